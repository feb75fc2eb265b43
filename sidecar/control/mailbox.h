/* A mailbox: how one thread hands objects to another thread's event loop.
 * Any thread posts an object (it keeps a struct mtd_mbox_link inside);
 * the posting wakes the owner's loop (event_active), whose callback takes
 * everything posted so far at once, oldest first. The list sits under a
 * mutex held for a few pointer stores; the objects themselves are not
 * touched by the mailbox.
 *
 *   control thread --(health check)--> a worker   (health.c: hc_inbox)
 *   a worker --(the check's answer)--> control    (health.c: mtd_health.done)
 *   any thread --(a last reference)--> control    (runtime.c: reclaim_rts,
 *                                                  reclaim_svcs, reclaim_eps)
 *
 * Not for a value a newer one replaces (mtd_worker_set_runtime keeps one
 * slot: the same runtime goes to every worker, so it cannot be linked into
 * each worker's list).
 *
 * Threads: init and fini on the owner's side with nobody posting (before
 * the posters start, after they stopped); post from any thread, take from
 * the owner's loop. A mailbox on a base wakes it with event_active, so
 * that base must have been made with libevent's threading on
 * (evthread_use_pthreads, main.c) when posters run on another thread; a
 * mailbox on a bell (below) wakes a base that has no lock at all.
 *
 * A bell: how other threads wake a loop whose base takes no lock
 * (EVENT_BASE_FLAG_NOLOCK: a worker's; a locked base takes
 * and drops its mutex a dozen times a turn, ~600 instructions a call at
 * a steady rate). Ringers set bits in one atomic word and, when they
 * turned it from zero, write the bell's eventfd; the owner's read event
 * reads the eventfd, then swaps the word for zero and runs its callback
 * with the bits. A ring after the swap writes again, so none is lost; a
 * write whose bits were taken by an earlier run gives a run with no
 * bits, which the callback ignores. What a bit asks for (a runtime in a
 * slot, a mailbox's list) is handed over under its own lock. */
#ifndef MTD_SIDECAR_MAILBOX_H
#define MTD_SIDECAR_MAILBOX_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>
#include <event2/event_struct.h>

struct mtd_mbox_link {
	struct mtd_mbox_link *next; /* the next one posted; NULL: the last */
};

struct mtd_bell {
	int fd;                /* eventfd (non-blocking) */
	_Atomic uint32_t rung; /* bits rung since the owner last swapped them */
	struct event ev;       /* EV_READ | EV_PERSIST on fd, on the owner's base */
	void (*on_ring)(void *arg, uint32_t bits);
	void *arg;
};

struct mtd_mbox {
	pthread_mutex_t mu;
	struct mtd_mbox_link *head;  /* oldest first */
	struct mtd_mbox_link **tail; /* &head, or &last->next */
	struct event ev;             /* on the owner's base: runs cb(arg); unused on a bell */
	struct mtd_bell *bell;       /* NULL: wake with ev */
	uint32_t bit;                /* what it rings on bell */
	event_callback_fn cb;
	void *arg;
};

/* The object that holds link as its member `member`. */
#define MTD_MBOX_ITEM(link, type, member) ((type *)(void *)((char *)(link)-offsetof(type, member)))

/* An empty mailbox whose posts run cb(-1, EV_TIMEOUT, arg) on base at its
 * next turn (once for any number of posts before it). 0, or -EINVAL when
 * libevent refuses the event. */
int mtd_mbox_init(struct mtd_mbox *mb, struct event_base *base, event_callback_fn cb, void *arg);
/* The same on a bell: a post rings bit on bell, whose owner then runs
 * mtd_mbox_run(mb). */
int mtd_mbox_init_bell(struct mtd_mbox *mb, struct mtd_bell *bell, uint32_t bit, event_callback_fn cb, void *arg);
/* The owner's side of a bell: runs the mailbox's cb. */
void mtd_mbox_run(struct mtd_mbox *mb);
/* Tear down; what was posted and not taken is returned (oldest first) for
 * the owner to dispose of. Nobody may post any more, and the owner's loop
 * must not run the event after this. */
struct mtd_mbox_link *mtd_mbox_fini(struct mtd_mbox *mb);
/* Append l (its next is overwritten) and wake the owner. Any thread; l
 * belongs to the owner from here on. */
void mtd_mbox_post(struct mtd_mbox *mb, struct mtd_mbox_link *l);
/* Everything posted so far, oldest first (walk by ->next; read next
 * before handing an object on), or NULL. The mailbox is empty after. */
struct mtd_mbox_link *mtd_mbox_take(struct mtd_mbox *mb);

/* A bell on base (which may be NOLOCK) running on_ring(arg, bits) in the
 * owner's loop. 0, or -errno (the eventfd, or -EINVAL from libevent).
 * Owner's thread, before any ringer starts. */
int mtd_bell_init(struct mtd_bell *b, struct event_base *base, void (*on_ring)(void *arg, uint32_t bits), void *arg);
/* Owner's thread, after every ringer stopped. Bits never run are dropped. */
void mtd_bell_fini(struct mtd_bell *b);
/* Any thread: ask the owner to run on_ring with bits (non-zero) soon;
 * rings before that run are merged into one. */
void mtd_bell_ring(struct mtd_bell *b, uint32_t bits);

#endif
