/* W3C Trace Context (level 1) as a proxy needs it: the incoming
 * `traceparent` read, a child's written, `tracestate` checked so that only
 * a well-formed one is passed on, span ids drawn, and the sampling verdict
 * for a trace that starts here. Pure, no I/O, no allocation; any thread
 * (an id source is one thread's).
 *
 * What "malformed" means is the spec's: a traceparent that does not parse
 * is ignored whole, as if absent (the call goes on and a new trace starts);
 * its tracestate goes with it. A tracestate that does not parse is dropped
 * alone. Nothing here ever fails a call. */
#ifndef MTD_TRACE_CONTEXT_H
#define MTD_TRACE_CONTEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MTD_TRACEPARENT_LEN 55      /* "00-" 32 "-" 16 "-" 2 */
#define MTD_TRACESTATE_MAX  512     /* longer ones are dropped, not cut */
#define MTD_TRACE_SAMPLED   0x01    /* trace-flags bit 0 */

struct mtd_trace_ctx {
	uint8_t trace_id[16];
	uint8_t span_id[8]; /* the parent's span, as read; a child's own, as written */
	uint8_t flags;      /* trace-flags; only MTD_TRACE_SAMPLED has a meaning */
};

/* Parse a traceparent header value (len bytes, not NUL-terminated). Version
 * 00: exactly 55 characters. A higher version (not ff) is read for its
 * first four fields when it is at least 55 characters and the 56th, if any,
 * is '-' (the spec's rule for versions from the future). Hex must be
 * lowercase; an all-zero trace id or span id is invalid. false: ignore the
 * header (out untouched). */
bool mtd_traceparent_parse(const char *v, size_t len, struct mtd_trace_ctx *out);

/* Write ctx as a version-00 traceparent into out (MTD_TRACEPARENT_LEN
 * bytes, no NUL). */
void mtd_traceparent_format(char out[MTD_TRACEPARENT_LEN], const struct mtd_trace_ctx *ctx);

/* Whether a tracestate value may be passed on as it is: at most
 * MTD_TRACESTATE_MAX bytes, at most 32 list members, each "key=value" with
 * the spec's key (lowercase simple key, or tenant@system) and value
 * characters; empty members (",,", surrounding spaces and tabs) allowed. */
bool mtd_tracestate_valid(const char *v, size_t len);

/* Ids are not drawn but derived (sidecar/call/trace.c): a keyed hash
 * (trace/siphash.h) of what identifies their owner, unpredictable without
 * the process's key, and its bits evenly spread (which the sampling
 * verdict below reads). mtd_trace_id8 writes such a value as 8 id bytes,
 * big-endian, never all zero (0 is written as 1). */
void mtd_trace_id8(uint8_t out[8], uint64_t v);

/* The sampling verdict for a trace that starts here, from its id alone, so
 * that every sidecar seeing the same trace id with the same ratio agrees:
 * the trace id's last 56 bits, read big-endian (W3C level 2's random part),
 * below ratio * 2^56. ratio <= 0: never; >= 1: always. */
bool mtd_trace_sample(const uint8_t trace_id[16], double ratio);

#endif
