/* ORCA out-of-band load reports (gRFC A51): for every endpoint of a
 * service whose lb (or a method's) is CLIENT_SIDE_WEIGHTED_ROUND_ROBIN
 * with orca.out_of_band, one xds.service.orca.v3.OpenRcaService/
 * StreamCoreMetrics stream for the whole process, on the control thread
 * (gclient.h: its own connection, h2c or the service's upstream TLS as
 * calls to that endpoint use), asking for orca.oob_reporting_period. Each
 * report it sends is recorded in the endpoint's shared stats
 * (mtd_lb_orca_record_raw), what the trailers' reports feed otherwise:
 * every worker's picker weighs it at its tick. A report that does not
 * parse is ignored whole and counted (maitred_orca_reports_invalid_total).
 *
 * Per endpoint (mtd_lb_orca_state.oob, which the workers' report hook
 * reads: trailers are recorded only in OFF and UNIMPLEMENTED):
 *
 *   OFF --wanted--> WAITING --a report--> OPEN
 *                     ^  |                  |
 *                     |  +-- UNIMPLEMENTED --+--> UNIMPLEMENTED (logged once;
 *                     |      (retried at the backoff's cap)      trailers count)
 *                     +---- the stream ends, fails, or is silent for its
 *                           period + a minute: jittered backoff
 *
 * An endpoint that leaves, or a reload that turns out_of_band off, closes
 * its stream and puts it back to OFF. The set of streams follows the
 * current runtime (reloads, discovery), compared by generation every
 * second, as active health checks do; a certificate rotation (same TLS
 * policy, a new context) is taken at a stream's next connection. /metrics counts the streams by
 * state (maitred_orca_oob_streams, from the endpoints' oob) and /clusters
 * shows each endpoint's. */
#ifndef MTD_SIDECAR_ORCA_OOB_H
#define MTD_SIDECAR_ORCA_OOB_H

#include <stddef.h>

struct mtd_control;
struct mtd_orca_oob;

/* Start following ctl's runtime; NULL on out of memory (logged: the
 * trailers' reports go on counting). Control thread. */
struct mtd_orca_oob *mtd_orca_oob_start(struct mtd_control *ctl);
/* Close every stream and free o (NULL is a no-op). Control thread. */
void mtd_orca_oob_free(struct mtd_orca_oob *o);

#endif
