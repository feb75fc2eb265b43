/* A thread's timers in one binary min-heap: what a call and its attempts
 * wait for (deadline, backoff, hedge delay, per-try timeout), one timerfd
 * per worker for the earliest (sidecar/turn.c).
 *
 * Why not a struct event each: libevent's is 128 bytes, and a call in
 * flight held three, 384 bytes of its memory; a struct mtd_timer is 24.
 * Arming and disarming cost what libevent's own heap costs (O(log n)
 * moves), and the worker re-arms its timerfd only when the earliest
 * deadline moves earlier. Not thread-safe: one heap per worker, used only
 * by that worker's thread. */
#ifndef MTD_TIMERS_H
#define MTD_TIMERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mtd_timer;
/* What runs when a timer is due: given the timer, it finds its owner
 * (MTD_CONTAINER_OF). The timer is disarmed before it runs and may be
 * armed again from it. */
typedef void mtd_timer_fn(struct mtd_timer *t);

/* Embedded in what it times; carries its own callback (set when armed),
 * so the heap's owner needs no table of what timers are for. 24 bytes. */
struct mtd_timer {
	int64_t at_ns;   /* when, on the owner's clock (mtd_now_ns) */
	uint32_t slot;   /* 1 + its index in the heap; 0 = not armed */
	mtd_timer_fn *fn;
};

/* The struct of `type` holding member `field` at p (a timer's owner). */
#define MTD_CONTAINER_OF(p, type, field) ((type *)(void *)((char *)(p)-offsetof(type, field)))

struct mtd_timers {
	struct mtd_timer **heap;
	uint32_t n, cap;
};

static inline bool mtd_timer_armed(const struct mtd_timer *t)
{
	return t->slot != 0;
}

/* Arm t for at_ns, or move it there if it is armed. 0, or -ENOMEM (t is
 * left as it was). */
int mtd_timers_add(struct mtd_timers *h, struct mtd_timer *t, int64_t at_ns);
/* Disarm t; nothing when it is not armed. */
void mtd_timers_del(struct mtd_timers *h, struct mtd_timer *t);
/* The earliest at_ns, or INT64_MAX when none is armed. */
static inline int64_t mtd_timers_next(const struct mtd_timers *h)
{
	return h->n ? h->heap[0]->at_ns : INT64_MAX;
}
/* Disarm and return the earliest timer if it is due at now_ns (at_ns <=
 * now_ns), else NULL. */
struct mtd_timer *mtd_timers_pop_due(struct mtd_timers *h, int64_t now_ns);
/* Free the heap; timers still armed are marked disarmed. */
void mtd_timers_free(struct mtd_timers *h);

#endif
