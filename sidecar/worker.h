/* A worker thread (worker.c): its event loop, runtime swaps, timers,
 * the end-of-turn flush. */
#ifndef MTD_WORKER_H
#define MTD_WORKER_H

#include <stdint.h>

#include "sidecar/worker-t.h"

struct mtd_runtime;
struct mtd_rt_hold;
struct mtd_conn;

/* rt: a reference transferred to the worker (kept by the caller when NULL
 * is returned). */
struct mtd_worker *mtd_worker_new(unsigned id, struct mtd_runtime *rt, int listen_fd);
/* Thread-safe: serve rt (a reference transferred) from the worker's next
 * turn; a runtime set before and not yet taken is dropped. */
void mtd_worker_set_runtime(struct mtd_worker *w, struct mtd_runtime *rt);
/* The worker's hold on its current runtime, for a call being routed; let go
 * with mtd_worker_unhold when the call is freed. Worker thread. */
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
int mtd_worker_start(struct mtd_worker *w);
/* Thread-safe: ask the worker to drain (GOAWAY everyone) / stop now. */
void mtd_worker_drain(struct mtd_worker *w);
void mtd_worker_stop(struct mtd_worker *w);
/* Free a worker whose thread has ended (or never started). */
void mtd_worker_free(struct mtd_worker *w);
/* Schedule the end-of-turn flush. */
void mtd_worker_schedule_flush(struct mtd_worker *w);
/* Arm t to run fn when due, delay_ns from now, or move it there. 0, or
 * -ENOMEM (t left as it was). Disarming a timer not armed does nothing. */
int mtd_worker_timer_arm(struct mtd_worker *w, struct mtd_timer *t, mtd_timer_fn *fn, int64_t delay_ns);
void mtd_worker_timer_disarm(struct mtd_worker *w, struct mtd_timer *t);
/* A downstream connection ended: its slot under downstream.max_connections
 * is free (any thread). */
void mtd_worker_down_closed(void);
/* Move a closed conn to the graveyard (freed at the end of the turn). */
void mtd_worker_bury(struct mtd_worker *w, struct mtd_conn *c);

#endif
