/* A worker's turn (turn.c): what the rooms of the data plane (io/,
 * call/, control/health.c's worker half) may ask of the worker they run
 * on. Worker thread only, unless a declaration says otherwise. Below every
 * room: nothing here calls into io/ or call/ but through the callbacks
 * they hand over (a timer's fn); of control/, it drops runtime references
 * and rings the bell (worker.h is the worker above them). */
#ifndef MTD_TURN_H
#define MTD_TURN_H

#include <stdbool.h>
#include <stdint.h>

#include "core/clock.h"
#include "core/timers.h"
#include "sidecar/worker-t.h"

struct mtd_runtime;
struct mtd_rt_hold;
struct mtd_conn;

/* The turn's clock: mtd_now_ns's clock, read once per turn of the loop (at
 * its first use after the loop woke) and the same for every callback of
 * that turn, as libev's ev_now and HAProxy's and nginx's loop times are.
 * What a call measures and stamps reads it: one clock read a turn, and
 * one an attempt, instead of some eleven a call on each hop (a read
 * costs 37 ns in a loop on the bench VM's kvm-clock, and orders the
 * pipeline around it; bench/proxy/README.md "The turn's clock"). It is never later than
 * mtd_now_ns and never earlier than the loop's wake-up, so it is behind
 * the exact clock by at most the turn's own work so far: besides the
 * events the wait returned, one event_base_loop(EVLOOP_ONCE) runs those
 * their callbacks make active (a flush asked for during
 * mtd_worker_end_turn; bytes TLS read ahead are read at the next turn,
 * conn.c read_next_turn), and whatever blocks in them (an access-log
 * write). What must not be
 * early or late by that reads mtd_now_ns: a timer's due time
 * (mtd_worker_timer_arm: delay from the real now), which timers are due,
 * a call's deadline (the real now plus its grpc-timeout), a deadline's
 * time left, the grpc-timeout forwarded, a rate limit's take (a bucket
 * every worker shares), a failed attempt's fault decision, an attempt's
 * start (its endpoint's latency counts from it; its pick weighs the
 * deadline's time left at it). Outside the loop: worker_main forgets the
 * turn after it (mtd_worker_free's close_all reads the clock again);
 * test_call's seam forgets it when its clock moves (seam_advance_ms);
 * test_pool's and test_transport's fixtures never do (their turn's clock
 * stays at its first reading). */
static inline int64_t mtd_turn_now_ns(struct mtd_worker *w)
{
	if (!w->turn_ns)
		w->turn_ns = mtd_now_ns();
	return w->turn_ns;
}

/* The same for the wall clock (mtd_wall_ms): a pick's now_ms (warmup). */
static inline int64_t mtd_turn_wall_ms(struct mtd_worker *w)
{
	if (!w->turn_wall_ms)
		w->turn_wall_ms = mtd_wall_ms();
	return w->turn_wall_ms;
}

/* A call's start, for a call a client began: the turn's clock, or one ns
 * after the worker's last call's start when that is as late (calls of one
 * turn). So no two of a worker's calls start at the same ns, even two of
 * one turn of which the second took the first's freed block (a flush,
 * whose reap frees the first, and a callback after it that begins the
 * second, as the turn's clock is one): with the worker's id the start names
 * the call, and its trace ids are derived from that (call/trace.c). At
 * most one ns a call ahead of the turn's clock, so still behind the exact
 * one (a call takes far longer than a ns to begin). */
static inline int64_t mtd_turn_call_start_ns(struct mtd_worker *w)
{
	int64_t t = mtd_turn_now_ns(w);
	if (t <= w->last_call_start_ns)
		t = w->last_call_start_ns + 1;
	w->last_call_start_ns = t;
	return t;
}

/* A new turn: both clocks are read again at their next use. */
static inline void mtd_turn_forget(struct mtd_worker *w)
{
	w->turn_ns = w->turn_wall_ms = 0;
}

/* Schedule the end of the turn (worker_turn.h mtd_worker_end_turn: ready
 * calls started, dirty connections written once each, the dead freed, the
 * call engine's reap). */
void mtd_worker_schedule_flush(struct mtd_worker *w);
/* Move a closed conn to the graveyard (freed at the end of the turn). */
void mtd_worker_bury(struct mtd_worker *w, struct mtd_conn *c);

/* Arm t to run fn when due, delay_ns from now, or move it there. 0, or
 * -ENOMEM (t left as it was). Disarming a timer not armed does nothing. */
int mtd_worker_timer_arm(struct mtd_worker *w, struct mtd_timer *t, mtd_timer_fn *fn, int64_t delay_ns);
void mtd_worker_timer_disarm(struct mtd_worker *w, struct mtd_timer *t);

/* The worker's hold on its current runtime, for a call being routed; let go
 * with mtd_worker_unhold when the call is freed. */
struct mtd_rt_hold *mtd_worker_hold(struct mtd_worker *w);
void mtd_worker_unhold(struct mtd_worker *w, struct mtd_rt_hold *h);
/* mtd_worker_unhold at the end of the turn (the call engine's lifetime
 * rule, call/call-t.h): for a call that stays but lets go of a snapshot
 * mid-turn (moved to a newer one), so that what it read of the old one
 * stays valid until the turn ends. */
void mtd_worker_unhold_later(struct mtd_worker *w, struct mtd_rt_hold *h);
/* One more user of hold h (NULL: none), another call routed with it (a
 * FAILBACK copy of the call holding h). Let go with mtd_worker_unhold. */
struct mtd_rt_hold *mtd_worker_hold_again(struct mtd_worker *w, struct mtd_rt_hold *h);
/* Drop what mtd_worker_unhold_later queued (the end of the turn). */
void mtd_worker_reap_holds(struct mtd_worker *w);
/* A hold on rt (the worker's reference, transferred) with no user yet, or
 * NULL (out of memory; rt's reference stays the caller's). */
struct mtd_rt_hold *mtd_worker_hold_new(struct mtd_worker *w, struct mtd_runtime *rt);
/* The worker moved on from h's snapshot: h is released now if no call uses
 * it, else by the mtd_worker_unhold (or the reap after
 * mtd_worker_unhold_later) of the last of its users. */
void mtd_worker_hold_retire(struct mtd_worker *w, struct mtd_rt_hold *h);
/* The end of a hold: its runtime reference dropped, h freed. For a hold
 * no call uses (at the worker's end: its own). */
void mtd_worker_hold_release(struct mtd_worker *w, struct mtd_rt_hold *h);

/* Run the timers due now (the timerfd's event does, once it is readable),
 * then set the timerfd for the next one; a timer armed for now by one of
 * them runs next time. How many ran. */
unsigned mtd_worker_run_timers(struct mtd_worker *w);

/* Thread-safe: serve rt (a reference transferred) from the worker's next
 * turn; a runtime set before and not yet taken is dropped. */
void mtd_worker_set_runtime(struct mtd_worker *w, struct mtd_runtime *rt);

/* Client connections over every worker (downstream.max_connections is
 * per process; the one process-wide counter, an atomic). Any thread:
 * take a slot (false: full, nothing taken), give one back. */
bool mtd_worker_down_admit(uint32_t max);
/* A new client connection (the app's or an inbound peer's) takes a slot
 * of downstream.max_connections; false (and the slot given back, a line
 * logged at most every 10 s) past it. Worker thread. */
bool mtd_worker_admit(struct mtd_worker *w);
void mtd_worker_down_closed(void);

/* The timer heap's timerfd and its event, and the reap lists
 * (mtd_worker_new, w->base set, w->timer_fd -1). 0, -errno when no
 * timerfd can be made (w->timer_fd stays -1), or -EINVAL when libevent
 * refuses its event. */
int mtd_worker_turn_init(struct mtd_worker *w);
/* Close what mtd_worker_turn_init made (its event deleted); nothing when
 * it made nothing. Timers still armed never run. */
void mtd_worker_turn_fini(struct mtd_worker *w);

#endif
