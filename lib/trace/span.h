/* A finished span as maitred exports it: a fixed-size record that owns its
 * text, so that a worker can copy it into the export queue and forget it,
 * and the exporter thread can encode it later (lib/trace/otlp.h). Pure; a
 * span is one thread's until it is handed over.
 *
 * Bounds: at most MTD_SPAN_ATTRS attributes and MTD_SPAN_TEXT bytes of
 * text (the name, the tracestate, string values). What does not fit is
 * left out and counted (dropped_attrs; a tracestate that does not fit is
 * left out of the span, never cut), so a span is never malformed. Text
 * is kept as valid UTF-8 (OTLP's strings must be): a byte of a name or a
 * string value that is not part of a valid sequence, or of one a cut left
 * short, is written as '?'. */
#ifndef MTD_TRACE_SPAN_H
#define MTD_TRACE_SPAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trace/context.h"

#define MTD_SPAN_ATTRS 16
#define MTD_SPAN_TEXT  768

enum mtd_span_kind { MTD_SPAN_SERVER = 2, MTD_SPAN_CLIENT = 3 }; /* OTLP's SpanKind numbers */

enum mtd_span_attr_type { MTD_ATTR_STR, MTD_ATTR_INT, MTD_ATTR_BOOL };

struct mtd_span_attr {
	const char *key; /* a string that outlives every span (a literal) */
	uint8_t type;    /* enum mtd_span_attr_type */
	uint16_t off, len; /* MTD_ATTR_STR: the value in text[] */
	int64_t i;         /* MTD_ATTR_INT, MTD_ATTR_BOOL (0 / 1) */
};

struct mtd_span {
	uint8_t trace_id[16];
	uint8_t span_id[8];
	uint8_t parent_id[8]; /* all zero: a root span */
	uint8_t kind;         /* enum mtd_span_kind */
	uint8_t flags;        /* W3C trace-flags */
	bool error;           /* status ERROR (else UNSET) */
	uint8_t n_attrs;
	uint8_t dropped_attrs;
	uint16_t name_off, name_len;
	uint16_t state_off, state_len; /* tracestate; 0 length: none */
	uint16_t status_off, status_len; /* the status message */
	uint16_t text_used;
	int64_t start_unix_ns, end_unix_ns;
	struct mtd_span_attr attr[MTD_SPAN_ATTRS];
	char text[MTD_SPAN_TEXT];
};

/* Start a span: ids from ctx (trace id, flags) and span_id; parent_id NULL
 * for a root. Everything else empty. */
void mtd_span_init(struct mtd_span *s, const struct mtd_trace_ctx *ctx, const uint8_t span_id[8],
                   const uint8_t *parent_id, enum mtd_span_kind kind, int64_t start_unix_ns);
void mtd_span_name(struct mtd_span *s, const char *name, size_t len);
/* The name as "prefix/suffix" (the gRPC full method, service and method
 * apart). */
void mtd_span_name2(struct mtd_span *s, const char *a, size_t alen, const char *b, size_t blen);
void mtd_span_tracestate(struct mtd_span *s, const char *v, size_t len);
void mtd_span_status_error(struct mtd_span *s, const char *message, size_t len);
void mtd_span_str(struct mtd_span *s, const char *key, const char *v, size_t len);
void mtd_span_int(struct mtd_span *s, const char *key, int64_t v);
void mtd_span_bool(struct mtd_span *s, const char *key, bool v);

static inline const char *mtd_span_text(const struct mtd_span *s, uint16_t off)
{
	return s->text + off;
}

#endif
