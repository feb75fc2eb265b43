/* A fault mode (fault.mode) as the call engine sees it: an ops table, one
 * file per mode under call/mode/, registered in one table indexed by
 * enum mtd_fault_mode (mode/registry.c), the way lib/lb registers its
 * strategies. The engine (call.c, attempt.c) calls the hooks where a mode
 * differs and does the common work itself; a NULL hook means "the
 * engine's default" (one attempt on the balancer's pick, the first answer
 * to begin is relayed and commits the call, a failure goes to
 * mtd_fault_decide's verdict as it is). What to do after a failure stays
 * lib/fault's (mtd_fault_decide, pure); a mode only changes how the
 * verdict is carried out. Worker thread only; the tables are constant. */
#ifndef MTD_FAULT_MODE_T_H
#define MTD_FAULT_MODE_T_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fault/fault-t.h"
#include "grpc/grpc.h"

struct mtd_call;
struct mtd_attempt;

struct mtd_fault_mode_ops {
	const char *name; /* the config enum name, e.g. "BROADCAST" */
	/* The answer is held until every attempt ended (BROADCAST): the call
	 * is unary, its whole request must fit the replay buffer (every
	 * attempt reads it from the kept bytes), an attempt's end never drops
	 * the request bytes, every status but OK fails an attempt, and a
	 * relaunched attempt is not "the" attempt (call->cur stays NULL). */
	bool holds_answer;
	/* An endpoint is marked tried as its attempt starts, so that the
	 * attempts racing go to distinct endpoints (FORKING). */
	bool distinct_endpoints;
	/* A failed attempt is retried on another endpoint (FAILOVER): a call
	 * that fails with none left says so. */
	bool fails_over;
	/* The call's attempts start (the tried bitmaps are ready). NULL: one
	 * attempt on the balancer's pick (call.c). */
	void (*start)(struct mtd_call *call);
	/* An attempt started on the balancer's pick (the default start, a
	 * retry, a hedge). NULL: nothing (FORKING: the next fork's delay). */
	void (*on_started)(struct mtd_call *call);
	/* a ended without an answer the call can use; it was counted and
	 * marked (attempt.c's common part) and the call is not DONE. Returns
	 * true when the mode handled it; false lets mtd_fault_decide's
	 * verdict be carried out. NULL: false. */
	bool (*on_failure)(struct mtd_attempt *a, const struct mtd_fault_outcome *o, enum mtd_grpc_status status,
	                   const char *what, bool refused_before);
	/* mtd_fault_decide's verdict answers a failed call all the same
	 * (action SAFE_OK: an empty OK; FALLBACK: the fallback's answer),
	 * what saying why; called just before the answer. NULL: nothing. */
	void (*on_answered_anyway)(struct mtd_call *call, const char *what, enum mtd_fault_action action);
	/* a's response headers, an OK answer (or one outside retry_on) the
	 * call can use, a's state stepped; end_stream: Trailers-Only. NULL:
	 * a answers the call (relayed, committed). */
	void (*on_answer)(struct mtd_attempt *a, bool end_stream);
	/* A response DATA frame of a. NULL: relayed when a answers the call. */
	void (*on_data)(struct mtd_attempt *a, const uint8_t *p, size_t n);
	/* a's trailers (not a background call's). NULL: relayed when a
	 * answers the call. */
	void (*on_trailers)(struct mtd_attempt *a);
	/* a's endpoint left the service and a was cancelled. Returns true
	 * when the mode handled it; false moves the call to the current
	 * snapshot (call.c). NULL: false. */
	bool (*on_reroute)(struct mtd_call *call);
};

#endif
