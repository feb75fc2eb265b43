/* Spans to an OTLP ExportTraceServiceRequest: see otlp.h.
 *
 * Written straight in protobuf's wire format, not through protobuf-c:
 * the messages are a handful of fixed shapes, and protobuf-c's
 * descriptor-driven sizing and packing cost about 9,000 instructions a
 * span (bench/proxy/README.md, "Tracing"). The field numbers are those of
 * protos/opentelemetry (OpenTelemetry's); the unit test reads the output
 * back through protobuf-c.
 *
 * One pass, backwards: each message is written from its last field to its
 * first at the end of a buffer sized by an upper bound, and its length,
 * known once its body is written, goes in front of it. proto3: a field at
 * its default (0, "", no bytes) is left out; a oneof member is written
 * whatever its value (its presence is the value). */
#include "config.h"

#include "trace/otlp.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

enum { VARINT = 0, I64 = 1, LEN = 2, I32 = 5 }; /* wire types */

struct bw {
	uint8_t *cur; /* writing moves it down */
};

static void b_raw(struct bw *b, const void *s, size_t n)
{
	b->cur -= n;
	if (n)
		memcpy(b->cur, s, n);
}

static void b_varint(struct bw *b, uint64_t v)
{
	if (v < 0x80) { /* tags and most lengths */
		*--b->cur = (uint8_t)v;
		return;
	}
	uint8_t tmp[10];
	size_t k = 0;
	do {
		tmp[k++] = (uint8_t)(v | 0x80);
		v >>= 7;
	} while (v);
	tmp[k - 1] &= 0x7f;
	b_raw(b, tmp, k);
}

static void b_tag(struct bw *b, unsigned field, unsigned type)
{
	b_varint(b, (uint64_t)field << 3 | type);
}

/* A nested message written since `end`: its length and tag in front. */
static void b_close(struct bw *b, unsigned field, const uint8_t *end)
{
	b_varint(b, (uint64_t)(end - b->cur));
	b_tag(b, field, LEN);
}

static void b_bytes(struct bw *b, unsigned field, const void *s, size_t n)
{
	if (n == 0)
		return;
	b_raw(b, s, n);
	b_varint(b, n);
	b_tag(b, field, LEN);
}

static void b_uint(struct bw *b, unsigned field, uint64_t v)
{
	if (v == 0)
		return;
	b_varint(b, v);
	b_tag(b, field, VARINT);
}

static void b_fixed(struct bw *b, unsigned field, uint64_t v, unsigned size)
{
	if (v == 0)
		return;
	uint8_t le[8];
	for (unsigned i = 0; i < size; i++)
		le[i] = (uint8_t)(v >> (8 * i));
	b_raw(b, le, size);
	b_tag(b, field, size == 8 ? I64 : I32);
}

/* KeyValue{key: 1, value: 2 AnyValue{string 1 | bool 2 | int 3}} as
 * field `field` of its parent. */
static void b_kv(struct bw *b, unsigned field, const char *key, int type, const char *s, size_t slen, int64_t i)
{
	uint8_t *end = b->cur;
	uint8_t *any = b->cur;
	if (type == MTD_ATTR_STR) {
		b_raw(b, s, slen);
		b_varint(b, slen);
		b_tag(b, 1, LEN);
	} else {
		b_varint(b, type == MTD_ATTR_BOOL ? (uint64_t)(i != 0) : (uint64_t)i);
		b_tag(b, type == MTD_ATTR_BOOL ? 2 : 3, VARINT);
	}
	b_close(b, 2, any);
	b_bytes(b, 1, key, strlen(key));
	b_close(b, field, end);
}

static void b_span(struct bw *b, const struct mtd_span *s)
{
	static const uint8_t zero[8];
	uint8_t *end = b->cur;
	b_fixed(b, 16, s->flags, 4);
	if (s->error) { /* Status{message: 2, code: 3 = STATUS_CODE_ERROR} */
		uint8_t *st = b->cur;
		b_uint(b, 3, 2);
		b_bytes(b, 2, mtd_span_text(s, s->status_off), s->status_len);
		b_close(b, 15, st);
	}
	b_uint(b, 10, s->dropped_attrs);
	for (unsigned j = s->n_attrs; j-- > 0;) {
		const struct mtd_span_attr *a = &s->attr[j];
		b_kv(b, 9, a->key, a->type, mtd_span_text(s, a->off), a->len, a->i);
	}
	b_fixed(b, 8, (uint64_t)s->end_unix_ns, 8);
	b_fixed(b, 7, (uint64_t)s->start_unix_ns, 8);
	b_uint(b, 6, s->kind);
	b_bytes(b, 5, mtd_span_text(s, s->name_off), s->name_len);
	if (memcmp(s->parent_id, zero, 8) != 0)
		b_bytes(b, 4, s->parent_id, 8);
	b_bytes(b, 3, mtd_span_text(s, s->state_off), s->state_len);
	b_bytes(b, 2, s->span_id, 8);
	b_bytes(b, 1, s->trace_id, 16);
	b_close(b, 2, end); /* ScopeSpans.spans */
}

/* An upper bound of what b_span writes: every byte of text and key, and
 * each field's tag and length prefixes at their widest. */
static size_t span_bound(const struct mtd_span *s)
{
	size_t n = 128 + s->text_used;
	for (unsigned j = 0; j < s->n_attrs; j++)
		n += strlen(s->attr[j].key) + 40;
	return n;
}

size_t mtd_otlp_encode(const struct mtd_otlp_resource *res, const struct mtd_span *spans, size_t n,
                       uint8_t **out)
{
	size_t bound = 256 + strlen(res->service_name) + (res->scope_version ? strlen(res->scope_version) : 0);
	for (size_t j = 0; j < res->n; j++)
		bound += strlen(res->keys[j]) + strlen(res->values[j]) + 40;
	for (size_t i = 0; i < n; i++)
		bound += span_bound(&spans[i]);
	uint8_t *buf = malloc(bound);
	*out = NULL;
	if (!buf)
		return 0;
	struct bw b = {.cur = buf + bound};
	uint8_t *req = b.cur;
	/* ResourceSpans{resource: 1, scope_spans: 2} */
	uint8_t *scope_spans = b.cur;
	for (size_t i = n; i-- > 0;)
		b_span(&b, &spans[i]);
	uint8_t *scope = b.cur; /* InstrumentationScope{name: 1, version: 2} */
	if (res->scope_version)
		b_bytes(&b, 2, res->scope_version, strlen(res->scope_version));
	b_bytes(&b, 1, "maitred", 7);
	b_close(&b, 1, scope);
	b_close(&b, 2, scope_spans);
	uint8_t *resource = b.cur; /* Resource{attributes: 1} */
	for (size_t j = res->n; j-- > 0;)
		b_kv(&b, 1, res->keys[j], MTD_ATTR_STR, res->values[j], strlen(res->values[j]), 0);
	b_kv(&b, 1, "service.name", MTD_ATTR_STR, res->service_name, strlen(res->service_name), 0);
	b_close(&b, 1, resource);
	b_close(&b, 1, req); /* ExportTraceServiceRequest.resource_spans */
	size_t len = (size_t)(buf + bound - b.cur);
	memmove(buf, b.cur, len);
	*out = buf;
	return len;
}
