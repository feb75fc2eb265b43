/* W3C Trace Context: see context.h. */
#include "config.h"

#include "trace/context.h"

#include <string.h>

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1; /* uppercase is invalid too (the spec's HEXDIGLC) */
}

/* n bytes from 2n lowercase hex digits; false on any other character. */
static bool unhex(const char *p, uint8_t *out, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int hi = hexval(p[2 * i]), lo = hexval(p[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return false;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return true;
}

static bool all_zero(const uint8_t *p, size_t n)
{
	uint8_t acc = 0;
	for (size_t i = 0; i < n; i++)
		acc |= p[i];
	return acc == 0;
}

bool mtd_traceparent_parse(const char *v, size_t len, struct mtd_trace_ctx *out)
{
	uint8_t version;
	if (len < MTD_TRACEPARENT_LEN || !unhex(v, &version, 1) || version == 0xff)
		return false;
	if (version == 0 && len != MTD_TRACEPARENT_LEN)
		return false;
	if (version != 0 && len > MTD_TRACEPARENT_LEN && v[MTD_TRACEPARENT_LEN] != '-')
		return false;
	if (v[2] != '-' || v[35] != '-' || v[52] != '-')
		return false;
	struct mtd_trace_ctx c;
	if (!unhex(v + 3, c.trace_id, 16) || !unhex(v + 36, c.span_id, 8) || !unhex(v + 53, &c.flags, 1))
		return false;
	if (all_zero(c.trace_id, 16) || all_zero(c.span_id, 8))
		return false;
	*out = c;
	return true;
}

/* Two hex digits a byte, from a table of the 256 pairs (a traceparent is
 * written for every traced call's every attempt). */
static const char hex_pairs[513] =
        "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
        "202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"
        "404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f"
        "606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f"
        "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f"
        "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
        "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedf"
        "e0e1e2e3e4e5e6e7e8e9eaebecedeeeff0f1f2f3f4f5f6f7f8f9fafbfcfdfeff";

static void tohex(char *out, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		memcpy(out + 2 * i, hex_pairs + 2 * p[i], 2);
}

void mtd_traceparent_format(char out[MTD_TRACEPARENT_LEN], const struct mtd_trace_ctx *ctx)
{
	memcpy(out, "00-", 3);
	tohex(out + 3, ctx->trace_id, 16);
	out[35] = '-';
	tohex(out + 36, ctx->span_id, 8);
	out[52] = '-';
	tohex(out + 53, &ctx->flags, 1);
}

/* tracestate's grammar (W3C Trace Context level 1, §3.3):
 *   key   = simple-key / multi-tenant-key
 *   simple-key = lcalpha 0*255( lcalpha / DIGIT / "_" / "-"/ "*" / "/" )
 *   multi-tenant-key = tenant-id "@" system-id
 *   tenant-id = ( lcalpha / DIGIT ) 0*240( lcalpha / DIGIT / "_" / "-"/ "*" / "/" )
 *   system-id = lcalpha 0*13( lcalpha / DIGIT / "_" / "-"/ "*" / "/" )
 *   value = 0*255(chr) nblk-chr, chr = %x20 / nblk-chr,
 *   nblk-chr = %x21-2B / %x2D-3C / %x3E-7E */
static bool key_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '*' || c == '/';
}

static bool member_valid(const char *p, size_t n)
{
	const char *eq = memchr(p, '=', n);
	if (!eq)
		return false;
	size_t klen = (size_t)(eq - p), vlen = n - klen - 1;
	if (klen == 0 || vlen == 0 || vlen > 256)
		return false;
	const char *at = memchr(p, '@', klen);
	if (at) {
		size_t tlen = (size_t)(at - p), slen = klen - tlen - 1;
		if (tlen == 0 || tlen > 241 || slen == 0 || slen > 14)
			return false;
		if (!((p[0] >= 'a' && p[0] <= 'z') || (p[0] >= '0' && p[0] <= '9')))
			return false;
		if (!(at[1] >= 'a' && at[1] <= 'z'))
			return false;
		for (size_t i = 0; i < klen; i++)
			if (i != tlen && !key_char(p[i]))
				return false;
	} else {
		if (klen > 256 || !(p[0] >= 'a' && p[0] <= 'z'))
			return false;
		for (size_t i = 0; i < klen; i++)
			if (!key_char(p[i]))
				return false;
	}
	const char *val = eq + 1;
	for (size_t i = 0; i < vlen; i++) {
		unsigned char c = (unsigned char)val[i];
		if (c < 0x20 || c > 0x7e || c == ',' || c == '=')
			return false;
	}
	return val[vlen - 1] != ' ';
}

bool mtd_tracestate_valid(const char *v, size_t len)
{
	if (len > MTD_TRACESTATE_MAX)
		return false;
	unsigned members = 0;
	size_t i = 0;
	while (i <= len) {
		size_t end = i;
		while (end < len && v[end] != ',')
			end++;
		size_t a = i, b = end;
		while (a < b && (v[a] == ' ' || v[a] == '\t'))
			a++;
		while (b > a && (v[b - 1] == ' ' || v[b - 1] == '\t'))
			b--;
		if (b > a) {
			if (++members > 32 || !member_valid(v + a, b - a))
				return false;
		}
		i = end + 1;
	}
	return true;
}

void mtd_trace_id8(uint8_t out[8], uint64_t v)
{
	if (v == 0)
		v = 1;
	for (int i = 7; i >= 0; i--, v >>= 8)
		out[i] = (uint8_t)v;
}

bool mtd_trace_sample(const uint8_t trace_id[16], double ratio)
{
	if (!(ratio > 0))
		return false; /* NaN too */
	if (ratio >= 1)
		return true;
	uint64_t r = 0;
	for (int i = 9; i < 16; i++)
		r = r << 8 | trace_id[i];
	return (double)r < ratio * 72057594037927936.0; /* 2^56 */
}
