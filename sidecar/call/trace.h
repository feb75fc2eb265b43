/* A call's trace (tracing on: the runtime's tracer set): its W3C context,
 * the traceparent its upstreams receive, and its spans at its end.
 *
 * Nothing of it is stored in the call (struct mtd_call has no room, and
 * needs none): the context is derived again where it is needed, the same
 * every time, from the request's traceparent and tracestate and from what
 * identifies the call (its start time and its worker): the call's span
 * id, and the trace id of a trace it starts, are SipHash-2-4 of those
 * under a per-process secret key (trace/siphash.h), so that no id tells
 * the key, the call's start, or another call's ids. The derivation costs
 * one header lookup, one parse and a hash per id (three without a parent,
 * one with); it runs at each attempt's submit, at the call's end, and for
 * its access-log line, and not at all without tracing.
 *
 * Worker thread of the call. */
#ifndef MTD_CALL_TRACE_H
#define MTD_CALL_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trace/context.h"
#include "trace/siphash.h"

struct mtd_call;
struct mtd_attempt;

struct mtd_call_trace {
	struct mtd_trace_ctx ctx; /* trace id and flags; span_id: the call's own span */
	uint8_t parent[8];        /* the incoming span, when has_parent */
	bool has_parent;
	bool sampled;              /* its spans are exported */
	const uint8_t *state;      /* the incoming tracestate to pass on (well formed), or NULL */
	size_t state_len;
	/* Several incoming tracestate fields are one list (RFC 9110 §5.3):
	 * joined here, and state points here. */
	char joined[MTD_TRACESTATE_MAX];
};

/* The process's key of the ids (16 random bytes, set once before the
 * workers start; copied). Unset, it is all zero: tests only. */
void mtd_call_trace_key(const uint8_t key[MTD_SIPHASH_KEY_LEN]);

/* The call's context. false: the call is not traced (no tracing in its
 * snapshot, or a background call: a mirror copy or FAILBACK's re-send,
 * whose upstream gets the app's context as the app sent it), t untouched. */
bool mtd_call_trace_of(const struct mtd_call *call, struct mtd_call_trace *t);

/* The traceparent an upstream of the call receives (MTD_TRACEPARENT_LEN
 * bytes): the trace, the call's span as parent, the sampled flag. */
void mtd_call_trace_parent_header(const struct mtd_call_trace *t, char out[MTD_TRACEPARENT_LEN]);

/* The call's span, at its end (its figures counted): handed to the
 * exporter when sampled. */
void mtd_call_trace_end(const struct mtd_call *call);

/* An attempt's span, as it is released: exported when the call is
 * sampled and the attempt failed, was cancelled, or was one of several
 * (won: its answer went to the client). */
void mtd_call_trace_attempt_end(const struct mtd_attempt *a);

#endif
