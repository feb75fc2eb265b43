/* A worker's turn: what every room of the data plane may ask of the
 * worker it runs on, below everything that runs on it (turn.h). The
 * worker itself (worker.c: accept, housekeeping, snapshot swaps, drain)
 * is above the rooms and calls them. Nothing here calls into io/ or
 * call/: their code runs from here only through the callbacks they hand
 * over (a timer's fn); of control/, it drops runtime references and rings
 * the worker's bell. */
#include "config.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "core/clock.h"
#include "core/log.h"
#include "discovery/discovery.h"
#include "sidecar/control/runtime.h"
#include "sidecar/io/conn-t.h"
#include "sidecar/turn.h"

/* Downstream connections open over all workers (downstream.max_connections
 * is per process). The only process-wide counter of the data plane: one
 * atomic add on accept, one sub on close. */
static atomic_uint n_downs_total;

bool mtd_worker_down_admit(uint32_t max)
{
	if (atomic_fetch_add_explicit(&n_downs_total, 1, memory_order_relaxed) < max)
		return true;
	atomic_fetch_sub_explicit(&n_downs_total, 1, memory_order_relaxed);
	return false;
}

/* At most one "refusing connections" line per worker this often. */
#define REFUSE_LOG_NS (10 * (int64_t)1000000000)

bool mtd_worker_admit(struct mtd_worker *w)
{
	uint32_t max = w->rt->cfg->downstream.max_connections;
	if (mtd_worker_down_admit(max))
		return true;
	uint64_t held;
	if (mtd_log_gate_pass(&w->refuse_log, mtd_now_ns(), REFUSE_LOG_NS, &held))
		MTD_WARN("worker %u: refusing new connections: downstream.max_connections (%u) are open "
		         "(%llu refused since the last message)",
		         w->id, max, (unsigned long long)held + 1);
	return false;
}

void mtd_worker_down_closed(void)
{
	atomic_fetch_sub_explicit(&n_downs_total, 1, memory_order_relaxed);
}

void mtd_worker_schedule_flush(struct mtd_worker *w)
{
	/* A flag, not event_pending(): this runs several times per call
	 * (every connection dirtied, every release). */
	if (!w->flush_due) {
		w->flush_due = true;
		event_active(&w->flush_ev, EV_TIMEOUT, 0);
	}
}

void mtd_worker_bury(struct mtd_worker *w, struct mtd_conn *c)
{
	TAILQ_INSERT_TAIL(&w->graveyard, c, dirty_link);
	mtd_worker_schedule_flush(w);
}

/* ---- timers ------------------------------------------------------------ */

/* The heap's earliest timer wakes the loop through a timerfd set to its
 * due time, absolute on CLOCK_MONOTONIC (mtd_now_ns's clock), to the
 * nanosecond. Not a libevent timer: libevent's epoll backend waits in
 * whole milliseconds rounded up, and adds a relative delay to the time it
 * cached at the start of the turn, so a timer fired a turn early for
 * nothing, then up to a few ms late (measured: hedges due 10 ms after
 * their call's start ran 1.3-1.5 ms late at the median, against 0.05-0.2
 * ms with the timerfd, on a loaded 2-core machine; bench/fault/README.md).
 * The kernel call is made only when the earliest timer moves earlier (as
 * the libevent timer was re-armed) and once per wake-up;
 * EVENT_BASE_FLAG_PRECISE_TIMER would set a timerfd on every turn of the
 * loop instead.
 *
 * A disarmed timer leaves the timerfd where it is: it then wakes the loop
 * once for nothing, cheaper than re-arming on every disarm (most calls end
 * before their deadline). */
static void timers_set(struct mtd_worker *w, int64_t at_ns)
{
	struct itimerspec its = {0};
	if (w->timer_fd < 0)
		return; /* torn down (mtd_worker_turn_fini): nothing runs them */
	if (at_ns != INT64_MAX) {
		/* 0 would disarm it: a due time in the past is "now". */
		int64_t at = at_ns > 0 ? at_ns : 1;
		its.it_value = (struct timespec){(time_t)(at / 1000000000), (long)(at % 1000000000)};
	}
	/* Setting it also clears an expiry not read yet (timerfd_create(2)):
	 * the fd stays readable only while a due time has passed, and is
	 * never read. */
	if (timerfd_settime(w->timer_fd, TFD_TIMER_ABSTIME, &its, NULL) == 0)
		w->timer_at_ns = at_ns;
	else
		MTD_WARN("worker %u: timerfd_settime: %s", w->id, strerror(errno));
}

/* Set the timerfd for the earliest armed timer if that is sooner than
 * where it is set. */
static void timers_rearm(struct mtd_worker *w)
{
	int64_t next = mtd_timers_next(&w->timers);
	if (next < w->timer_at_ns)
		timers_set(w, next);
}

unsigned mtd_worker_run_timers(struct mtd_worker *w)
{
	int64_t now = mtd_now_ns();
	/* Those due now; one a callback arms for now runs at the next turn. */
	uint32_t n = w->timers.n;
	unsigned ran = 0;
	struct mtd_timer *t;
	w->in_timers = true;
	while (n-- > 0 && (t = mtd_timers_pop_due(&w->timers, now))) {
		t->fn(t);
		ran++;
	}
	w->in_timers = false;
	/* Always set (to the next, or disarmed): the expiry that woke the
	 * loop must be cleared, or the fd stays readable. */
	timers_set(w, mtd_timers_next(&w->timers));
	return ran;
}

static void timers_cb(evutil_socket_t fd, short what, void *arg)
{
	mtd_worker_run_timers(arg);
}

int mtd_worker_timer_arm(struct mtd_worker *w, struct mtd_timer *t, mtd_timer_fn *fn, int64_t delay_ns)
{
	t->fn = fn;
	if (mtd_timers_add(&w->timers, t, mtd_now_ns() + (delay_ns > 0 ? delay_ns : 0)) < 0)
		return -ENOMEM;
	if (!w->in_timers)
		timers_rearm(w);
	return 0;
}

void mtd_worker_timer_disarm(struct mtd_worker *w, struct mtd_timer *t)
{
	mtd_timers_del(&w->timers, t);
}

int mtd_worker_turn_init(struct mtd_worker *w)
{
	w->timer_at_ns = INT64_MAX;
	LIST_INIT(&w->reap_calls);
	LIST_INIT(&w->reap_attempts);
	w->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (w->timer_fd < 0)
		return -errno;
	/* Level-triggered: readable from its due time until timers_set. */
	if (event_assign(&w->timers_ev, w->base, w->timer_fd, EV_READ | EV_PERSIST, timers_cb, w) != 0 ||
	    event_add(&w->timers_ev, NULL) != 0) {
		close(w->timer_fd);
		w->timer_fd = -1;
		return -EINVAL;
	}
	return 0;
}

void mtd_worker_turn_fini(struct mtd_worker *w)
{
	if (w->timer_fd < 0)
		return;
	event_del(&w->timers_ev);
	close(w->timer_fd);
	w->timer_fd = -1;
}

/* ---- snapshots (the reclaim rule: lib/discovery/discovery.h) ---------- */

struct mtd_rt_hold *mtd_worker_hold_new(struct mtd_worker *w, struct mtd_runtime *rt)
{
	struct mtd_rt_hold *h = calloc(1, sizeof(*h));
	if (h) {
		h->rt = rt;
		w->n_holds++;
	}
	return h;
}

void mtd_worker_hold_release(struct mtd_worker *w, struct mtd_rt_hold *h)
{
	w->n_holds--;
	mtd_runtime_unref(h->rt);
	free(h);
}

void mtd_worker_hold_retire(struct mtd_worker *w, struct mtd_rt_hold *h)
{
	if (mtd_disc_hold_retire(&h->h))
		mtd_worker_hold_release(w, h);
}

struct mtd_rt_hold *mtd_worker_hold(struct mtd_worker *w)
{
	mtd_disc_hold_take(&w->hold->h);
	return w->hold;
}

struct mtd_rt_hold *mtd_worker_hold_again(struct mtd_worker *w, struct mtd_rt_hold *h)
{
	if (h)
		mtd_disc_hold_take(&h->h);
	return h;
}

void mtd_worker_unhold(struct mtd_worker *w, struct mtd_rt_hold *h)
{
	if (h && mtd_disc_hold_drop(&h->h))
		mtd_worker_hold_release(w, h);
}

void mtd_worker_unhold_later(struct mtd_worker *w, struct mtd_rt_hold *h)
{
	if (!h)
		return;
	if (h->later++ == 0) {
		h->later_next = w->unhold_later;
		w->unhold_later = h;
	}
	mtd_worker_schedule_flush(w);
}

void mtd_worker_set_runtime(struct mtd_worker *w, struct mtd_runtime *rt)
{
	pthread_mutex_lock(&w->next_mu);
	struct mtd_runtime *old = w->next_rt;
	w->next_rt = rt;
	pthread_mutex_unlock(&w->next_mu);
	if (old)
		mtd_runtime_unref(old); /* never served: a newer one replaced it */
	mtd_bell_ring(&w->bell, MTD_WORKER_BELL_SWAP);
}

void mtd_worker_reap_holds(struct mtd_worker *w)
{
	struct mtd_rt_hold *h;
	while ((h = w->unhold_later)) {
		w->unhold_later = h->later_next;
		uint32_t n = h->later;
		h->later = 0;
		while (n-- > 0)
			mtd_worker_unhold(w, h); /* the last may free h */
	}
}
