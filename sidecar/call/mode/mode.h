/* The fault modes' ops tables (fault_mode-t.h), one file each in this
 * folder, and what of the engine they build on. call/ only: io/ never
 * sees a mode. Worker thread only. */
#ifndef MTD_FAULT_MODE_H
#define MTD_FAULT_MODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sidecar/call/call-t.h"
#include "sidecar/call/fault_mode-t.h"

struct mtd_headers;
struct mtd_pool;

extern const struct mtd_fault_mode_ops mtd_fault_mode_failfast;
extern const struct mtd_fault_mode_ops mtd_fault_mode_failover;
extern const struct mtd_fault_mode_ops mtd_fault_mode_failsafe;
extern const struct mtd_fault_mode_ops mtd_fault_mode_failback;
extern const struct mtd_fault_mode_ops mtd_fault_mode_forking;
extern const struct mtd_fault_mode_ops mtd_fault_mode_broadcast;

/* The ops of every mode, indexed by enum mtd_fault_mode (registry.c). */
extern const struct mtd_fault_mode_ops *const mtd_fault_modes[];

/* The ops of call's fault mode (call->fault set). */
static inline const struct mtd_fault_mode_ops *mtd_call_mode(const struct mtd_call *call)
{
	return mtd_fault_modes[call->fault->mode];
}

/* ---- the engine's parts the modes use ----------------------------------- */

/* attempt.c: a ended without an answer the call can use: count it, then
 * do what the mode and the policy say. a is not freed here. */
void mtd_attempt_failed(struct mtd_attempt *a, const struct mtd_fault_outcome *o, enum mtd_grpc_status status,
                        const char *what);
/* attempt.c: the grpc-status of h, or -1 when it has none or a bad one. */
int mtd_attempt_status_of(const struct mtd_headers *h);
/* attempt.c: report a's end to the balancer (ok, or neutral), once. */
void mtd_attempt_lb_end(struct mtd_attempt *a, bool ok, bool neutral);

/* call.c: start an attempt of call on endpoint idx through pool p, its
 * start at now (the exact clock, mtd_now_ns: what its latency counts
 * from); false when the call failed instead (see launch), or its client's
 * close is recorded (call->down_closed: no attempt is born then). */
bool mtd_call_launch(struct mtd_call *call, int idx, struct mtd_pool *p, bool hedge, int64_t now);
/* call.c: start an attempt with the call's hash key read where it is
 * (hedge: a FORKING attempt after the first). */
void mtd_call_start_keyed(struct mtd_call *call, bool hedge);
/* call.c: the endpoints a pick must leave out (NULL = none), merged into
 * scratch (words long) when more than one set applies. */
const uint64_t *mtd_call_excluded_set(const struct mtd_call *call, uint64_t *scratch, size_t words);

#endif
