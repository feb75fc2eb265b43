/* The admin endpoint's growable text buffer. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin/admin.h"

static bool reserve(struct mtd_abuf *b, size_t extra)
{
	if (b->oom)
		return false;
	if (b->len + extra + 1 <= b->cap)
		return true;
	if (b->fixed) {
		b->oom = true;
		return false;
	}
	size_t cap = b->cap ? b->cap : 4096;
	while (cap < b->len + extra + 1) {
		if (cap > SIZE_MAX / 2) {
			b->oom = true;
			return false;
		}
		cap *= 2;
	}
	char *p = realloc(b->p, cap);
	if (!p) {
		b->oom = true;
		return false;
	}
	b->p = p;
	b->cap = cap;
	return true;
}

void mtd_abuf_add(struct mtd_abuf *b, const void *data, size_t n)
{
	if (!reserve(b, n))
		return;
	memcpy(b->p + b->len, data, n);
	b->len += n;
	b->p[b->len] = '\0';
}

void mtd_abuf_puts(struct mtd_abuf *b, const char *s)
{
	mtd_abuf_add(b, s, strlen(s));
}

void mtd_abuf_printf(struct mtd_abuf *b, const char *fmt, ...)
{
	va_list ap;
	char small[256];
	va_start(ap, fmt);
	int n = vsnprintf(small, sizeof(small), fmt, ap);
	va_end(ap);
	if (n < 0) {
		b->oom = true;
		return;
	}
	if ((size_t)n < sizeof(small)) {
		mtd_abuf_add(b, small, (size_t)n);
		return;
	}
	if (!reserve(b, (size_t)n))
		return;
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

void mtd_abuf_init_fixed(struct mtd_abuf *b, char *mem, size_t cap)
{
	b->p = mem;
	b->cap = cap;
	b->len = 0;
	b->oom = cap == 0;
	b->fixed = true;
	if (cap)
		mem[0] = '\0';
}

void mtd_abuf_clear(struct mtd_abuf *b)
{
	if (b->fixed) {
		b->len = 0;
		b->oom = false;
		if (b->cap)
			b->p[0] = '\0';
		return;
	}
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
	b->oom = false;
}
