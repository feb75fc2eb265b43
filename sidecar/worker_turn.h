/* What a worker does between its events (worker_turn.c): the end of a
 * turn, taking a new snapshot, closing everything when it stops, giving
 * memory back when quiet. Above the rooms it runs (io/, call/), below the
 * thread, the accept, the housekeeping and the drain (worker.c), so that
 * the call engine's seam (tests/unit/sidecar/call_seam.c) runs this code,
 * without a socket or a thread, rather than a copy of it. Worker thread
 * only. */
#ifndef MTD_WORKER_TURN_H
#define MTD_WORKER_TURN_H

#include <stdbool.h>

#include "sidecar/worker-t.h"

struct mtd_runtime;

/* The end of a turn (the flush event, worker.c; mtd_worker_schedule_flush
 * asks for it): the calls ready for their next attempt start it, then every
 * dirty connection is written once; again while that readied calls, so that
 * their requests go out in this turn. Then the buried connections are
 * freed, then the reap: the calls and attempts released this turn
 * (call/call-t.h's lifetime rule) and the snapshot holds let go of
 * (mtd_worker_unhold_later). A flush asked for meanwhile is the next
 * turn's. */
void mtd_worker_end_turn(struct mtd_worker *w);

/* Serve rt (a reference, transferred) from now on: new calls route with it
 * and the previous snapshot's hold retires (its runtime dropped once no call
 * uses it, mtd_worker_hold_retire). Then inbound listeners follow rt's set by
 * key, the pools of endpoints that stay take rt's service settings
 * (mtd_pool_set_service), and the pools of endpoints rt no longer holds
 * retire (their waiting attempts go elsewhere; the pools drain). Its turn
 * has not ended: what it readied runs at the flush. 0, or -ENOMEM: rt's
 * reference dropped, the worker stays on the snapshot it served. */
int mtd_worker_take_runtime(struct mtd_worker *w, struct mtd_runtime *rt);

/* The loop has stopped (or never ran): FAILBACK's copies dropped, inbound
 * listeners closed, every client connection closed (which fails the calls
 * left), the calls listed ready ended, every pool freed, output not written
 * dropped, then the dead freed and the reap. After it no call, client
 * connection or pool is left, and only the worker's own hold (w->hold) is
 * alive, with no user. */
void mtd_worker_close_all(struct mtd_worker *w);

/* Housekeeping found the worker quiet (no client stream, no FAILBACK
 * copy): once a client stream ended since the last give-back and none
 * for 5 s, its kept memory goes back (connection output spares, the
 * slab's free blocks, the relay's recycled chunks, malloc's free pages).
 * Both measured on the turn's clock (turn.h), as the stream's end is.
 * Whether it gave back. */
bool mtd_worker_give_back(struct mtd_worker *w);

#endif
