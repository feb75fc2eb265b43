/* A streaming JSON writer (RFC 8259) for the admin endpoint. */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "admin/admin.h"
#include "core/utf8.h"

void mtd_json_init(struct mtd_json *j, struct mtd_abuf *b)
{
	memset(j, 0, sizeof(*j));
	j->b = b;
}

/* Before any value: a comma if a sibling came before (not after a key). */
static void pre_value(struct mtd_json *j)
{
	if (j->after_key) {
		j->after_key = false;
		return;
	}
	unsigned d = j->depth > MTD_JSON_MAX_DEPTH ? MTD_JSON_MAX_DEPTH : j->depth;
	if (j->need_comma[d])
		mtd_abuf_add(j->b, ",", 1);
	j->need_comma[d] = true;
}

static void begin(struct mtd_json *j, char c)
{
	pre_value(j);
	mtd_abuf_add(j->b, &c, 1);
	j->depth++;
	if (j->depth <= MTD_JSON_MAX_DEPTH)
		j->need_comma[j->depth] = false;
}

static void close_(struct mtd_json *j, char c)
{
	mtd_abuf_add(j->b, &c, 1);
	if (j->depth > 0)
		j->depth--;
}

void mtd_json_obj_begin(struct mtd_json *j)
{
	begin(j, '{');
}

void mtd_json_obj_end(struct mtd_json *j)
{
	close_(j, '}');
}

void mtd_json_arr_begin(struct mtd_json *j)
{
	begin(j, '[');
}

void mtd_json_arr_end(struct mtd_json *j)
{
	close_(j, ']');
}

void mtd_json_escape(struct mtd_abuf *b, const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, run = 0;
	while (i < n) {
		unsigned c = p[i];
		size_t k = 1;
		const char *esc = NULL;
		char ubuf[8];
		if (c == '"')
			esc = "\\\"";
		else if (c == '\\')
			esc = "\\\\";
		else if (c == '\n')
			esc = "\\n";
		else if (c == '\r')
			esc = "\\r";
		else if (c == '\t')
			esc = "\\t";
		else if (c < 0x20 || c == 0x7f) {
			snprintf(ubuf, sizeof(ubuf), "\\u%04x", c);
			esc = ubuf;
		} else if (c >= 0x80) {
			k = mtd_utf8_seq(p + i, n - i);
			if (k == 0) {
				esc = "\\ufffd";
				k = 1;
			}
		}
		if (esc) {
			mtd_abuf_add(b, s + i - run, run);
			run = 0;
			mtd_abuf_puts(b, esc);
		} else {
			run += k;
		}
		i += k;
	}
	mtd_abuf_add(b, s + n - run, run);
}

void mtd_json_key(struct mtd_json *j, const char *key)
{
	pre_value(j);
	mtd_abuf_add(j->b, "\"", 1);
	mtd_json_escape(j->b, key, strlen(key));
	mtd_abuf_add(j->b, "\":", 2);
	j->after_key = true;
}

void mtd_json_strn(struct mtd_json *j, const char *s, size_t n)
{
	if (!s) {
		mtd_json_null(j);
		return;
	}
	pre_value(j);
	mtd_abuf_add(j->b, "\"", 1);
	mtd_json_escape(j->b, s, n);
	mtd_abuf_add(j->b, "\"", 1);
}

void mtd_json_str(struct mtd_json *j, const char *s)
{
	mtd_json_strn(j, s, s ? strlen(s) : 0);
}

void mtd_json_u64(struct mtd_json *j, uint64_t v)
{
	pre_value(j);
	mtd_abuf_printf(j->b, "%" PRIu64, v);
}

void mtd_json_i64(struct mtd_json *j, int64_t v)
{
	pre_value(j);
	mtd_abuf_printf(j->b, "%" PRId64, v);
}

void mtd_json_dbl(struct mtd_json *j, double v)
{
	if (!isfinite(v)) {
		mtd_json_null(j);
		return;
	}
	pre_value(j);
	mtd_abuf_printf(j->b, "%.9g", v);
}

void mtd_json_bool(struct mtd_json *j, bool v)
{
	pre_value(j);
	mtd_abuf_puts(j->b, v ? "true" : "false");
}

void mtd_json_null(struct mtd_json *j)
{
	pre_value(j);
	mtd_abuf_puts(j->b, "null");
}
