/* The span exporter: the spans every worker finished, batched and POSTed
 * as OTLP/HTTP protobuf (lib/trace/otlp.h) to the configured collector,
 * from a thread of its own, so that a collector that is slow, down or
 * refusing never delays or fails a call.
 *
 * Threads: a worker hands a finished span over with mtd_tracer_submit (a
 * copy into that worker's own single-producer ring: no lock, no syscall);
 * the exporter thread drains the rings, encodes and sends; the control
 * thread sets the target (mtd_tracer_set_target, at a reload's commit) and
 * reads the figures. The tracer lives until the process stops
 * (mtd_tracer_stop, after the workers are joined).
 *
 * Bounds: each worker's ring holds MTD_TRACE_RING spans and the exporter
 * one batch of MTD_TRACE_BATCH; memory is (workers x MTD_TRACE_RING +
 * MTD_TRACE_BATCH) x sizeof(struct mtd_span) plus one encoded batch (the
 * figure docs/tracing.md gives). A span that finds its ring full is
 * dropped (reason queue_full). A batch the collector answers 429, 502,
 * 503 or 504, or that cannot be delivered (refused, timed out), is sent
 * again after the collector's Retry-After (at most 30 s) or a backoff
 * (1 s, doubling to 30 s), at most MTD_TRACE_TRIES times, then dropped
 * (export_failed); one answered with another error is dropped at once
 * (rejected). Drops are counted and logged at most once a minute. */
#ifndef MTD_TRACE_EXPORT_H
#define MTD_TRACE_EXPORT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trace/span.h"

#define MTD_TRACE_RING  256
#define MTD_TRACE_BATCH 512
#define MTD_TRACE_TRIES 5

struct mtd_cfg_tracing;
struct mtd_tracer;
struct mtd_trace_target;

enum mtd_trace_drop {
	MTD_TRACE_DROP_QUEUE_FULL,    /* a worker's ring was full */
	MTD_TRACE_DROP_EXPORT_FAILED, /* retried MTD_TRACE_TRIES times, or tracing turned off meanwhile */
	MTD_TRACE_DROP_REJECTED,      /* the collector answered an error that is not worth a retry */
	MTD_TRACE_DROP_SHUTDOWN,      /* still queued when maitred stopped */
	MTD_TRACE_DROP_N
};
/* "queue_full", ...: maitred_trace_spans_dropped_total's reason label. */
const char *mtd_trace_drop_name(enum mtd_trace_drop r);

struct mtd_tracer_figures {
	uint64_t exported;                  /* spans the collector took */
	uint64_t dropped[MTD_TRACE_DROP_N]; /* by reason */
	uint64_t exports_ok, exports_failed; /* POSTs answered 2xx, POSTs that were not */
};

/* Where spans go, built from a config's tracing block on the control
 * thread (a reload's prepare: the https context is made here, so a bad CA
 * refuses the reload). NULL + err on failure. */
struct mtd_trace_target *mtd_trace_target_new(const struct mtd_cfg_tracing *cfg, char *err, size_t errlen);
void mtd_trace_target_free(struct mtd_trace_target *t); /* NULL is a no-op */

/* Start the exporter thread for n_workers rings, with no target yet. NULL
 * + err (out of memory, or the thread cannot start). */
struct mtd_tracer *mtd_tracer_start(unsigned n_workers, char *err, size_t errlen);
/* Export to t from now on (ownership taken); NULL: tracing is off, what is
 * queued is dropped (export_failed). The batch in flight finishes with
 * the target it was sent to. Control thread. */
void mtd_tracer_set_target(struct mtd_tracer *tr, struct mtd_trace_target *t);
/* Hand a finished span over (copied). false: the worker's ring was full
 * and the span was dropped (counted). Worker `worker` only. */
bool mtd_tracer_submit(struct mtd_tracer *tr, unsigned worker, const struct mtd_span *s);
/* Any thread. */
void mtd_tracer_figures(const struct mtd_tracer *tr, struct mtd_tracer_figures *out);
/* Stop the thread and free everything; what is still queued is dropped
 * (shutdown). NULL is a no-op. After the workers have stopped. */
void mtd_tracer_stop(struct mtd_tracer *tr);

#endif
