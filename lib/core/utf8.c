#include "config.h"

#include <string.h>

#include "core/utf8.h"

size_t mtd_utf8_seq(const unsigned char *p, size_t n)
{
	unsigned c = p[0];
	size_t len;
	/* The second byte's range carries the rules a lead byte alone cannot:
	 * E0 and F0 need it high enough not to be overlong, ED low enough
	 * not to be a surrogate, F4 low enough to stay at or below U+10FFFF. */
	unsigned lo = 0x80, hi = 0xbf;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) {
		len = 2;
	} else if (c >= 0xe0 && c <= 0xef) {
		len = 3;
		if (c == 0xe0)
			lo = 0xa0;
		else if (c == 0xed)
			hi = 0x9f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4;
		if (c == 0xf0)
			lo = 0x90;
		else if (c == 0xf4)
			hi = 0x8f;
	} else {
		return 0; /* a continuation byte, C0/C1 (always overlong), F5..FF */
	}
	if (n < len || p[1] < lo || p[1] > hi)
		return 0;
	for (size_t i = 2; i < len; i++)
		if (p[i] < 0x80 || p[i] > 0xbf)
			return 0;
	return len;
}

bool mtd_utf8_valid(const char *p, size_t n)
{
	const unsigned char *u = (const unsigned char *)p;
	size_t i = 0;

	while (i < n) {
		size_t k = mtd_utf8_seq(u + i, n - i);
		if (k == 0)
			return false;
		i += k;
	}
	return true;
}

void mtd_utf8_copy(char *dst, const char *src, size_t n)
{
	const unsigned char *p = (const unsigned char *)src;
	size_t i = 0;

	while (i < n) {
		size_t k = mtd_utf8_seq(p + i, n - i);
		if (k == 0) {
			dst[i++] = '?';
			continue;
		}
		if (dst != src)
			memcpy(dst + i, p + i, k);
		i += k;
	}
}
