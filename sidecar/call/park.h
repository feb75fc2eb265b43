/* A call waiting for its service's first endpoint set, or for the xDS
 * listener's first routes (park.c).
 *
 * A service whose source has not answered yet (runtime-t.h `awaiting`:
 * at startup, after a reload that added it or changed its source, a
 * cluster an xDS route just started naming) has no endpoint, and no
 * reason yet to have none. A call routed to it waits instead of failing
 * UNAVAILABLE at once, as gRPC's proxyless clients queue calls until a
 * cluster is ready:
 *
 *   first pick, empty set, source not answered, discovery.initial_wait > 0
 *     --mtd_call_park--> PARKED (on its worker's parked list; no attempt,
 *        |                its request bytes held unconsumed in call->req:
 *        |                the client's stream and connection windows bound them)
 *        |-- a new snapshot (mtd_call_parked_swap): routed again on it;
 *        |     still waiting: stays PARKED; else RUNNING and its first
 *        |     attempt starts from the ready list at the end of the turn
 *        |     (an empty set or the source's error: fails with that reason;
 *        |     its service gone from the config: UNAVAILABLE)
 *        |-- its deadline: DEADLINE_EXCEEDED, naming what it waited for
 *        |-- discovery.initial_wait: UNAVAILABLE, naming it
 *        |-- its client's close: unparked by mtd_call_settle, freed as any call
 *        +-- a drain (mtd_call_parked_fail_all): UNAVAILABLE
 *
 * While PARKED the call's deadline timer runs at the earlier of its
 * deadline and the end of its wait (park.c's callback), and goes back to
 * the deadline alone when it leaves.
 *
 * A call may also wait before it has a service: routed while the xDS
 * listener's first routes are awaited (runtime-t.h `routes_awaited`), it
 * parks with call->svc NULL (mtd_call_park_for_routes) and leaves the
 * same ways, except that a snapshot with the routes (or the server's
 * word that there are none) and the end of xds.initial_wait both route
 * it from the start, at the end of the turn (call.c mtd_call_run_ready),
 * the latter by :path. Worker thread only. */
#ifndef MTD_PARK_H
#define MTD_PARK_H

#include <stdbool.h>

struct mtd_call;
struct mtd_worker;

/* Calls that may wait at once on one worker; past it a call fails at
 * once as if it could not wait (a client opening calls to a service that
 * never answers grows nothing past this many calls, each bounded by its
 * stream's limits). */
#define MTD_CALL_PARKED_MAX 4096

/* At the call's first pick, its service without an endpoint: park it
 * when its source has not answered yet (true: parked, or failed because
 * it may not wait: the worker drains, MTD_CALL_PARKED_MAX reached, out of
 * memory). false: not a wait (the source answered, initial_wait 0, a
 * background call, a later attempt): the caller fails it as before. */
bool mtd_call_park(struct mtd_call *call);
/* At the call's first routing, the control plane's routes awaited
 * (runtime-t.h `routes_awaited`; the file's routes did not take it): park
 * it, without a service, until a snapshot has them or says there are
 * none, then route it from the start; at xds.initial_wait it is routed
 * by :path; at its deadline, DEADLINE_EXCEEDED. true: parked, or failed
 * (drain, MTD_CALL_PARKED_MAX, out of memory); false: it may not wait
 * (xds.initial_wait 0, a background call, a malformed or spent
 * grpc-timeout): the caller routes it by :path at once. */
bool mtd_call_park_for_routes(struct mtd_call *call);
/* The call leaves the parked list (state RUNNING) if it is on it:
 * mtd_call_settle, whatever ends it. */
void mtd_call_unpark(struct mtd_call *call);
/* The worker took a new snapshot (worker_turn.c): every parked call is
 * routed again on it and goes on, stays, or fails (above). */
void mtd_call_parked_swap(struct mtd_worker *w);
/* The worker drains: every parked call fails UNAVAILABLE now (a drain
 * never waits for a first endpoint set). */
void mtd_call_parked_fail_all(struct mtd_worker *w);

#endif
