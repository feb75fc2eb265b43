/* A span record: see span.h. */
#include "config.h"

#include "trace/span.h"
#include "core/utf8.h"

#include <string.h>

void mtd_span_init(struct mtd_span *s, const struct mtd_trace_ctx *ctx, const uint8_t span_id[8],
                   const uint8_t *parent_id, enum mtd_span_kind kind, int64_t start_unix_ns)
{
	memcpy(s->trace_id, ctx->trace_id, 16);
	memcpy(s->span_id, span_id, 8);
	if (parent_id)
		memcpy(s->parent_id, parent_id, 8);
	else
		memset(s->parent_id, 0, 8);
	s->kind = (uint8_t)kind;
	s->flags = ctx->flags;
	s->error = false;
	s->n_attrs = 0;
	s->dropped_attrs = 0;
	s->name_off = s->name_len = 0;
	s->state_off = s->state_len = 0;
	s->status_off = s->status_len = 0;
	s->text_used = 0;
	s->start_unix_ns = start_unix_ns;
	s->end_unix_ns = start_unix_ns;
}

/* Room for n more bytes of text: their offset, or -1. */
static int take_text(struct mtd_span *s, size_t n)
{
	if (n > (size_t)(MTD_SPAN_TEXT - s->text_used))
		return -1;
	int off = s->text_used;
	s->text_used = (uint16_t)(s->text_used + n);
	return off;
}

void mtd_span_name(struct mtd_span *s, const char *name, size_t len)
{
	mtd_span_name2(s, name, len, NULL, 0);
}

void mtd_span_name2(struct mtd_span *s, const char *a, size_t alen, const char *b, size_t blen)
{
	size_t n = alen + (b ? 1 + blen : 0);
	if (n > MTD_SPAN_TEXT / 2) { /* an absurd :path: keep room for the rest */
		n = MTD_SPAN_TEXT / 2;
		if (alen >= n) /* no room for '/' and the method */
			alen = n, b = NULL;
		else if (b)
			blen = n - alen - 1;
	}
	int off = take_text(s, n);
	if (off < 0)
		return;
	mtd_utf8_copy(s->text + off, a, alen);
	if (b) {
		s->text[off + alen] = '/';
		mtd_utf8_copy(s->text + off + alen + 1, b, blen);
	}
	s->name_off = (uint16_t)off;
	s->name_len = (uint16_t)n;
}

void mtd_span_tracestate(struct mtd_span *s, const char *v, size_t len)
{
	int off = take_text(s, len);
	if (off < 0)
		return; /* left out whole: a cut tracestate would be a wrong one */
	memcpy(s->text + off, v, len);
	s->state_off = (uint16_t)off;
	s->state_len = (uint16_t)len;
}

void mtd_span_status_error(struct mtd_span *s, const char *message, size_t len)
{
	s->error = true;
	if (len > 128)
		len = 128;
	int off = take_text(s, len);
	if (off < 0)
		return;
	mtd_utf8_copy(s->text + off, message, len);
	s->status_off = (uint16_t)off;
	s->status_len = (uint16_t)len;
}

static struct mtd_span_attr *new_attr(struct mtd_span *s, const char *key)
{
	if (s->n_attrs == MTD_SPAN_ATTRS) {
		if (s->dropped_attrs < UINT8_MAX)
			s->dropped_attrs++;
		return NULL;
	}
	struct mtd_span_attr *a = &s->attr[s->n_attrs++];
	a->key = key;
	a->off = a->len = 0;
	a->i = 0;
	return a;
}

void mtd_span_str(struct mtd_span *s, const char *key, const char *v, size_t len)
{
	int off = take_text(s, len);
	if (off < 0) {
		if (s->dropped_attrs < UINT8_MAX)
			s->dropped_attrs++;
		return;
	}
	struct mtd_span_attr *a = new_attr(s, key);
	if (!a) {
		s->text_used = (uint16_t)off; /* give the text back */
		return;
	}
	mtd_utf8_copy(s->text + off, v, len);
	a->type = MTD_ATTR_STR;
	a->off = (uint16_t)off;
	a->len = (uint16_t)len;
}

void mtd_span_int(struct mtd_span *s, const char *key, int64_t v)
{
	struct mtd_span_attr *a = new_attr(s, key);
	if (a) {
		a->type = MTD_ATTR_INT;
		a->i = v;
	}
}

void mtd_span_bool(struct mtd_span *s, const char *key, bool v)
{
	struct mtd_span_attr *a = new_attr(s, key);
	if (a) {
		a->type = MTD_ATTR_BOOL;
		a->i = v;
	}
}
