/* Unit tests for lib/trace: traceparent and tracestate as W3C Trace Context
 * level 1 reads and writes them (the spec's examples, and what a careless
 * or hostile app sends), ids, the sampling verdict, span records' bounds,
 * the OTLP request read back with protobuf-c, and SipHash-2-4 against the
 * paper's vectors and OpenSSL's implementation. */
#include "config.h"

#include <check.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opentelemetry/proto/collector/trace/v1/trace_service.pb-c.h"
#include "trace/context.h"
#include "trace/otlp.h"
#include "trace/siphash.h"
#include "trace/span.h"

#define TP "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

static bool parses(const char *v)
{
	struct mtd_trace_ctx c;
	return mtd_traceparent_parse(v, strlen(v), &c);
}

START_TEST(traceparent_reads_the_specs_example_and_writes_it_back)
{
	struct mtd_trace_ctx c;
	ck_assert(mtd_traceparent_parse(TP, strlen(TP), &c));
	ck_assert_uint_eq(c.trace_id[0], 0x4b);
	ck_assert_uint_eq(c.trace_id[15], 0x36);
	ck_assert_uint_eq(c.span_id[0], 0x00);
	ck_assert_uint_eq(c.span_id[7], 0xb7);
	ck_assert_uint_eq(c.flags, 1);
	char out[MTD_TRACEPARENT_LEN + 1] = {0};
	mtd_traceparent_format(out, &c);
	ck_assert_str_eq(out, TP);
	ck_assert(parses("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"));
	ck_assert(parses("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff")); /* other flag bits kept */
}
END_TEST

/* Every byte value in every position of every id, written as snprintf
 * writes it (the writer converts four bytes at a time). */
START_TEST(traceparent_writes_every_byte_in_every_position)
{
	for (unsigned pos = 0; pos < 25; pos++) {
		for (unsigned v = 0; v < 256; v++) {
			struct mtd_trace_ctx c;
			memset(&c, 0x5a, sizeof(c));
			uint8_t *bytes = pos < 16 ? &c.trace_id[pos] : pos < 24 ? &c.span_id[pos - 16] : &c.flags;
			*bytes = (uint8_t)v;
			char want[MTD_TRACEPARENT_LEN + 1], *w = want;
			w += sprintf(w, "00-");
			for (int i = 0; i < 16; i++)
				w += sprintf(w, "%02x", c.trace_id[i]);
			w += sprintf(w, "-");
			for (int i = 0; i < 8; i++)
				w += sprintf(w, "%02x", c.span_id[i]);
			sprintf(w, "-%02x", c.flags);
			char out[MTD_TRACEPARENT_LEN + 1] = {0};
			mtd_traceparent_format(out, &c);
			ck_assert_str_eq(out, want);
		}
	}
}
END_TEST

START_TEST(traceparent_refuses_what_the_spec_calls_invalid)
{
	ck_assert(!parses(""));
	ck_assert(!parses("00"));
	ck_assert(!parses("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01")); /* uppercase */
	ck_assert(!parses("00-00000000000000000000000000000000-00f067aa0ba902b7-01")); /* zero trace id */
	ck_assert(!parses("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01")); /* zero span id */
	ck_assert(!parses("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")); /* version ff */
	ck_assert(!parses(TP "-extra"));                                                /* 00 is exact */
	ck_assert(!parses("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0"));
	ck_assert(!parses("00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
	ck_assert(!parses("00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01"));
	ck_assert(!parses("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7_01"));
	ck_assert(!parses("00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01"));
	ck_assert(!parses("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g"));
	ck_assert(!parses("0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
	ck_assert(!parses(" 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
	/* A NUL inside is not hex. */
	struct mtd_trace_ctx c;
	char buf[] = TP;
	buf[10] = '\0';
	ck_assert(!mtd_traceparent_parse(buf, sizeof(buf) - 1, &c));
}
END_TEST

START_TEST(traceparent_reads_a_future_version_by_its_first_fields)
{
	ck_assert(parses("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
	ck_assert(parses("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-holds"));
	ck_assert(!parses("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01.what"));
	struct mtd_trace_ctx c;
	const char *v = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x";
	ck_assert(mtd_traceparent_parse(v, strlen(v), &c));
	char out[MTD_TRACEPARENT_LEN + 1] = {0};
	mtd_traceparent_format(out, &c); /* written as the version we speak */
	ck_assert_str_eq(out, TP);
}
END_TEST

static bool state_ok(const char *v)
{
	return mtd_tracestate_valid(v, strlen(v));
}

START_TEST(tracestate_passes_well_formed_lists_only)
{
	ck_assert(state_ok(""));
	ck_assert(state_ok("congo=t61rcWkgMzE"));
	ck_assert(state_ok("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"));
	ck_assert(state_ok("rojo=1 , congo=2,,\tx=3"));
	ck_assert(state_ok("fw529a3039@dt=FW4; x"));
	ck_assert(state_ok("a*/_-b=v!~"));
	ck_assert(!state_ok("Rojo=1"));      /* uppercase key */
	ck_assert(!state_ok("1abc=1"));      /* a simple key starts with a letter */
	ck_assert(!state_ok("rojo="));       /* empty value */
	ck_assert(!state_ok("=1"));
	ck_assert(!state_ok("rojo"));
	ck_assert(!state_ok("rojo=a=b"));
	ck_assert(!state_ok("rojo=a\x01"));
	ck_assert(!state_ok("rojo=\xc3\xa9"));
	ck_assert(!state_ok("t@=1"));         /* empty system id */
	ck_assert(!state_ok("@s=1"));
	ck_assert(!state_ok("t@Sys=1"));
	ck_assert(!state_ok("t@abcdefghijklmno=1")); /* system id over 14 */
	char many[33 * 5 + 1] = {0};
	for (int i = 0; i < 33; i++)
		snprintf(many + 5 * i, 6, "k%c=v,", 'a' + (i % 26));
	ck_assert(!state_ok(many)); /* 33 members */
	many[32 * 5 - 1] = '\0';
	ck_assert(state_ok(many)); /* 32 */
	char big[600];
	memset(big, 'v', sizeof(big));
	memcpy(big, "k=", 2);
	ck_assert(!mtd_tracestate_valid(big, sizeof(big)));
	ck_assert(!mtd_tracestate_valid(big, 259)); /* a value over 256 */
	ck_assert(mtd_tracestate_valid(big, 258));
}
END_TEST

/* A key of the paper's vectors: 00 01 .. 0f. */
static const uint8_t key0f[MTD_SIPHASH_KEY_LEN] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

static uint64_t hash_u64(uint64_t v)
{
	return mtd_siphash24(key0f, &v, sizeof(v));
}

START_TEST(ids_are_never_zero_and_do_not_repeat)
{
	/* As the call derives them: a keyed hash of what identifies it. */
	uint8_t s[8], t[8];
	static const uint8_t zero[16];
	for (uint64_t i = 0; i < 10000; i++) {
		mtd_trace_id8(s, hash_u64(i));
		ck_assert(memcmp(s, zero, 8) != 0);
		if (i)
			ck_assert(memcmp(s, t, 8) != 0);
		memcpy(t, s, 8);
	}
	mtd_trace_id8(s, 0); /* a hash that is 0 still gives an id */
	ck_assert(memcmp(s, zero, 8) != 0);
}
END_TEST

START_TEST(sampling_reads_the_ids_random_part)
{
	uint8_t id[16] = {0};
	ck_assert(!mtd_trace_sample(id, 0));
	ck_assert(!mtd_trace_sample(id, -1));
	ck_assert(mtd_trace_sample(id, 1));
	id[9] = 0x7f; /* just under half of 2^56 */
	ck_assert(mtd_trace_sample(id, 0.5));
	id[9] = 0x80; /* half */
	ck_assert(!mtd_trace_sample(id, 0.5));
	memset(id, 0xff, 9); /* the first 9 bytes do not count */
	id[9] = 0x00;
	ck_assert(mtd_trace_sample(id, 0.01));
	/* Over ids hashed from consecutive values (calls' starts are close
	 * to each other), the share sampled is the ratio. */
	unsigned in = 0;
	for (uint64_t i = 0; i < 20000; i++) {
		mtd_trace_id8(id, hash_u64(i * 64));
		mtd_trace_id8(id + 8, hash_u64(i * 64 ^ 0x6964));
		in += mtd_trace_sample(id, 0.25);
	}
	ck_assert_uint_gt(in, 4700);
	ck_assert_uint_lt(in, 5300);
}
END_TEST

/* ---- SipHash-2-4 -------------------------------------------------------- */

/* The paper's (Appendix A) vector, and the empty message's, under key
 * 00..0f: the reference implementation's first test vector, its 8 output
 * bytes read little-endian. */
START_TEST(siphash_gives_the_papers_vectors)
{
	uint8_t m[15];
	for (unsigned i = 0; i < sizeof(m); i++)
		m[i] = (uint8_t)i;
	ck_assert_uint_eq(mtd_siphash24(key0f, m, 15), 0xa129ca6149be45e5ull);
	ck_assert_uint_eq(mtd_siphash24(key0f, NULL, 0), 0x726fdb47dd0e0e31ull);
}
END_TEST

/* The test's own inputs: xorshift64*, fixed start, so a failure repeats. */
static uint64_t rnd(uint64_t *x)
{
	*x ^= *x >> 12;
	*x ^= *x << 25;
	*x ^= *x >> 27;
	return *x * 0x2545f4914f6cdd1dull;
}

/* OpenSSL's own SipHash, 8 bytes out (its default is 16, a variant). */
static uint64_t openssl_siphash(EVP_MAC_CTX *ctx, const uint8_t key[16], const uint8_t *m, size_t len)
{
	size_t size = 8;
	OSSL_PARAM params[] = {OSSL_PARAM_construct_size_t(OSSL_MAC_PARAM_SIZE, &size), OSSL_PARAM_construct_end()};
	ck_assert_int_eq(EVP_MAC_init(ctx, key, 16, params), 1);
	ck_assert_int_eq(EVP_MAC_update(ctx, m, len), 1);
	uint8_t out[16];
	size_t n = 0;
	ck_assert_int_eq(EVP_MAC_final(ctx, out, &n, sizeof(out)), 1);
	ck_assert_uint_eq(n, 8);
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | out[i];
	return v;
}

/* An implementation of its own against ours: 1000 random keys, each with
 * a random message of every length from 0 to 64 (every tail length, up
 * to eight full blocks). */
START_TEST(siphash_agrees_with_openssl_over_random_keys_and_lengths)
{
	EVP_MAC *mac = EVP_MAC_fetch(NULL, "SIPHASH", NULL);
	ck_assert_ptr_nonnull(mac);
	EVP_MAC_CTX *ctx = EVP_MAC_CTX_new(mac);
	ck_assert_ptr_nonnull(ctx);
	uint64_t x = 0x9e3779b97f4a7c15ull;
	uint8_t key[16], m[64];
	for (int k = 0; k < 1000; k++) {
		for (unsigned i = 0; i < sizeof(key); i++)
			key[i] = (uint8_t)rnd(&x);
		for (size_t len = 0; len <= sizeof(m); len++) {
			for (size_t i = 0; i < len; i++)
				m[i] = (uint8_t)rnd(&x);
			uint64_t want = openssl_siphash(ctx, key, m, len);
			ck_assert_msg(mtd_siphash24(key, m, len) == want, "key %d, length %zu", k, len);
		}
	}
	EVP_MAC_CTX_free(ctx);
	EVP_MAC_free(mac);
}
END_TEST

/* The key and the message at any address (a caller's bytes need not be
 * 8-byte aligned: words are read as bytes), and lengths past 255 (the
 * last block carries the length mod 256). */
START_TEST(siphash_agrees_with_openssl_at_any_alignment_and_past_255_bytes)
{
	EVP_MAC *mac = EVP_MAC_fetch(NULL, "SIPHASH", NULL);
	ck_assert_ptr_nonnull(mac);
	EVP_MAC_CTX *ctx = EVP_MAC_CTX_new(mac);
	ck_assert_ptr_nonnull(ctx);
	static const size_t lens[] = {0, 1, 7, 8, 9, 15, 16, 17, 18, 63, 64, 255, 256, 257, 264, 520};
	uint64_t x = 0x2545f4914f6cdd1dull;
	_Alignas(8) uint8_t key[16 + 8], m[520 + 8];
	for (unsigned off = 0; off < 8; off++) {
		for (unsigned i = 0; i < sizeof(key); i++)
			key[i] = (uint8_t)rnd(&x);
		for (unsigned i = 0; i < sizeof(m); i++)
			m[i] = (uint8_t)rnd(&x);
		for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
			uint64_t want = openssl_siphash(ctx, key + off, m + off, lens[l]);
			ck_assert_msg(mtd_siphash24(key + off, m + off, lens[l]) == want, "offset %u, length %zu", off,
			              lens[l]);
		}
	}
	EVP_MAC_CTX_free(ctx);
	EVP_MAC_free(mac);
}
END_TEST

static struct mtd_trace_ctx ctx_of(const char *tp)
{
	struct mtd_trace_ctx c;
	ck_assert(mtd_traceparent_parse(tp, strlen(tp), &c));
	return c;
}

START_TEST(a_span_keeps_what_fits_and_counts_the_rest)
{
	struct mtd_trace_ctx c = ctx_of(TP);
	uint8_t id[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	struct mtd_span s;
	mtd_span_init(&s, &c, id, c.span_id, MTD_SPAN_CLIENT, 1000);
	mtd_span_name2(&s, "shop.Cart", 9, "Get", 3);
	ck_assert_int_eq(s.name_len, 13);
	ck_assert(memcmp(mtd_span_text(&s, s.name_off), "shop.Cart/Get", 13) == 0);
	for (int i = 0; i < MTD_SPAN_ATTRS + 3; i++)
		mtd_span_int(&s, "n", i);
	ck_assert_uint_eq(s.n_attrs, MTD_SPAN_ATTRS);
	ck_assert_uint_eq(s.dropped_attrs, 3);
	/* A tracestate that does not fit is left out whole. */
	char big[MTD_SPAN_TEXT];
	memset(big, 'x', sizeof(big));
	mtd_span_tracestate(&s, big, sizeof(big));
	ck_assert_uint_eq(s.state_len, 0);
	mtd_span_tracestate(&s, "rojo=1", 6);
	ck_assert_uint_eq(s.state_len, 6);
	/* A huge name keeps room for the rest. */
	struct mtd_span t;
	mtd_span_init(&t, &c, id, NULL, MTD_SPAN_SERVER, 0);
	mtd_span_name2(&t, big, sizeof(big), "M", 1);
	ck_assert_uint_le(t.name_len, MTD_SPAN_TEXT / 2);
	mtd_span_str(&t, "k", "v", 1);
	ck_assert_uint_eq(t.n_attrs, 1);
	/* A string that does not fit is dropped and counted, its text given back. */
	uint16_t used = t.text_used;
	mtd_span_str(&t, "k", big, sizeof(big));
	ck_assert_uint_eq(t.n_attrs, 1);
	ck_assert_uint_eq(t.dropped_attrs, 1);
	ck_assert_uint_eq(t.text_used, used);
}
END_TEST

START_TEST(a_span_name_of_a_service_as_long_as_the_limit_is_cut_not_overrun)
{
	/* :path "/" + 384 bytes + "/M": the service alone fills the name's
	 * share; the method and its '/' are left out (once a memcpy of
	 * SIZE_MAX bytes). */
	struct mtd_trace_ctx c = ctx_of(TP);
	uint8_t id[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	for (size_t alen = MTD_SPAN_TEXT / 2 - 2; alen <= MTD_SPAN_TEXT / 2 + 1; alen++) {
		char a[MTD_SPAN_TEXT];
		memset(a, 's', alen);
		struct mtd_span s;
		mtd_span_init(&s, &c, id, NULL, MTD_SPAN_CLIENT, 0);
		mtd_span_name2(&s, a, alen, "M", 1);
		ck_assert_uint_le(s.name_len, MTD_SPAN_TEXT / 2);
		ck_assert_uint_eq(s.text_used, s.name_len);
		ck_assert_int_eq(mtd_span_text(&s, s.name_off)[0], 's');
	}
}
END_TEST

/* Whether n bytes are valid UTF-8 (Python's idea of it: RFC 3629). */
static bool utf8_ok(const char *p, size_t n)
{
	const unsigned char *u = (const unsigned char *)p;
	for (size_t i = 0; i < n;) {
		unsigned c = u[i];
		size_t len = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
		           : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
		if (len == 0 || i + len > n)
			return false;
		uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;
		for (size_t k = 1; k < len; k++) {
			if ((u[i + k] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (u[i + k] & 0x3f);
		}
		if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
		    (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += len;
	}
	return true;
}

START_TEST(span_text_is_always_valid_utf8)
{
	/* A collector refuses a whole request with one string that is not
	 * UTF-8: a :path of raw bytes, or of UTF-8 that the name's limit
	 * cuts in a character, must not lose the batch. */
	struct mtd_trace_ctx c = ctx_of(TP);
	uint8_t id[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	struct mtd_span s;
	mtd_span_init(&s, &c, id, NULL, MTD_SPAN_CLIENT, 0);
	mtd_span_name2(&s, "sh\xffop", 5, "G\xc3\xa9t\xed\xa0\x80\xc0\xaf\xf4\x90\x80\x80\xe2\x82", 15);
	ck_assert_uint_eq(s.name_len, 21);
	ck_assert(memcmp(mtd_span_text(&s, s.name_off), "sh?op/G\xc3\xa9t???????????", 21) == 0);
	ck_assert(utf8_ok(mtd_span_text(&s, s.name_off), s.name_len));
	/* A valid 2-byte character that the limit cuts in half. */
	char a[MTD_SPAN_TEXT];
	memset(a, 'a', sizeof(a));
	a[MTD_SPAN_TEXT / 2 - 1] = (char)0xc3;
	a[MTD_SPAN_TEXT / 2] = (char)0xa9;
	mtd_span_init(&s, &c, id, NULL, MTD_SPAN_CLIENT, 0);
	mtd_span_name2(&s, a, MTD_SPAN_TEXT / 2 + 1, "M", 1);
	ck_assert(utf8_ok(mtd_span_text(&s, s.name_off), s.name_len));
	mtd_span_str(&s, "v", "x\x80y", 3);
	mtd_span_status_error(&s, "\xfe", 1);
	ck_assert(memcmp(mtd_span_text(&s, s.attr[0].off), "x?y", 3) == 0);
	ck_assert_int_eq(mtd_span_text(&s, s.status_off)[0], '?');
}
END_TEST

typedef Opentelemetry__Proto__Collector__Trace__V1__ExportTraceServiceRequest Req;

static const Opentelemetry__Proto__Common__V1__AnyValue *attr(const Opentelemetry__Proto__Trace__V1__Span *s,
                                                                const char *key)
{
	for (size_t i = 0; i < s->n_attributes; i++)
		if (strcmp(s->attributes[i]->key, key) == 0)
			return s->attributes[i]->value;
	return NULL;
}

START_TEST(otlp_carries_ids_kinds_attributes_and_the_resource)
{
	struct mtd_trace_ctx c = ctx_of(TP);
	uint8_t id1[8] = {1, 1, 1, 1, 1, 1, 1, 1}, id2[8] = {2, 2, 2, 2, 2, 2, 2, 2};
	struct mtd_span sp[2];
	mtd_span_init(&sp[0], &c, id1, c.span_id, MTD_SPAN_CLIENT, 1000);
	mtd_span_name2(&sp[0], "shop.Cart", 9, "Get", 3);
	mtd_span_str(&sp[0], "rpc.system", "grpc", 4);
	mtd_span_int(&sp[0], "rpc.grpc.status_code", 14);
	mtd_span_bool(&sp[0], "maitred.hedge", true);
	mtd_span_status_error(&sp[0], "UNAVAILABLE", 11);
	mtd_span_tracestate(&sp[0], "rojo=1", 6);
	sp[0].end_unix_ns = 2000;
	struct mtd_trace_ctx root = c;
	root.flags = 0;
	mtd_span_init(&sp[1], &root, id2, NULL, MTD_SPAN_SERVER, 5);
	mtd_span_name(&sp[1], "x", 1);
	const char *keys[] = {"service.instance.id"}, *vals[] = {"node-1"};
	struct mtd_otlp_resource res = {.service_name = "cart-sidecar", .keys = keys, .values = vals, .n = 1,
	                                .scope_version = "1.0"};
	uint8_t *buf;
	size_t len = mtd_otlp_encode(&res, sp, 2, &buf);
	ck_assert_uint_gt(len, 0);
	Req *r = opentelemetry__proto__collector__trace__v1__export_trace_service_request__unpack(NULL, len, buf);
	ck_assert_ptr_nonnull(r);
	ck_assert_uint_eq(r->n_resource_spans, 1);
	const Opentelemetry__Proto__Trace__V1__ResourceSpans *rs = r->resource_spans[0];
	ck_assert_uint_eq(rs->resource->n_attributes, 2);
	ck_assert_str_eq(rs->resource->attributes[0]->key, "service.name");
	ck_assert_str_eq(rs->resource->attributes[0]->value->string_value, "cart-sidecar");
	ck_assert_str_eq(rs->resource->attributes[1]->value->string_value, "node-1");
	ck_assert_uint_eq(rs->n_scope_spans, 1);
	ck_assert_str_eq(rs->scope_spans[0]->scope->name, "maitred");
	ck_assert_uint_eq(rs->scope_spans[0]->n_spans, 2);
	const Opentelemetry__Proto__Trace__V1__Span *a = rs->scope_spans[0]->spans[0];
	ck_assert_uint_eq(a->trace_id.len, 16);
	ck_assert(memcmp(a->trace_id.data, c.trace_id, 16) == 0);
	ck_assert(memcmp(a->span_id.data, id1, 8) == 0);
	ck_assert_uint_eq(a->parent_span_id.len, 8);
	ck_assert(memcmp(a->parent_span_id.data, c.span_id, 8) == 0);
	ck_assert_str_eq(a->name, "shop.Cart/Get");
	ck_assert_str_eq(a->trace_state, "rojo=1");
	ck_assert_int_eq(a->kind, 3);
	ck_assert_uint_eq(a->start_time_unix_nano, 1000);
	ck_assert_uint_eq(a->end_time_unix_nano, 2000);
	ck_assert_uint_eq(a->flags, 1);
	ck_assert_str_eq(attr(a, "rpc.system")->string_value, "grpc");
	ck_assert_int_eq(attr(a, "rpc.grpc.status_code")->value_case,
	                 OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_INT_VALUE);
	ck_assert_int_eq(attr(a, "rpc.grpc.status_code")->int_value, 14);
	ck_assert_int_eq(attr(a, "maitred.hedge")->value_case,
	                 OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_BOOL_VALUE);
	ck_assert(attr(a, "maitred.hedge")->bool_value);
	ck_assert_int_eq(a->status->code, OPENTELEMETRY__PROTO__TRACE__V1__STATUS__STATUS_CODE__STATUS_CODE_ERROR);
	ck_assert_str_eq(a->status->message, "UNAVAILABLE");
	const Opentelemetry__Proto__Trace__V1__Span *b = rs->scope_spans[0]->spans[1];
	ck_assert_uint_eq(b->parent_span_id.len, 0); /* a root */
	ck_assert_int_eq(b->kind, 2);
	ck_assert_uint_eq(b->flags, 0);
	ck_assert(b->status == NULL || b->status->code == 0);
	opentelemetry__proto__collector__trace__v1__export_trace_service_request__free_unpacked(r, NULL);
	free(buf);
	/* No spans: a valid, empty request. */
	len = mtd_otlp_encode(&res, NULL, 0, &buf);
	r = opentelemetry__proto__collector__trace__v1__export_trace_service_request__unpack(NULL, len, buf);
	ck_assert_ptr_nonnull(r);
	ck_assert_uint_eq(r->resource_spans[0]->scope_spans[0]->n_spans, 0);
	opentelemetry__proto__collector__trace__v1__export_trace_service_request__free_unpacked(r, NULL);
	free(buf);
}
END_TEST

START_TEST(otlp_full_spans_fit_their_bound_and_read_back)
{
	/* Every span at its limits: all attributes (long keys, values that
	 * fill the text), a tracestate, an error status, dropped counts. */
	enum { N = 300 };
	struct mtd_span *sp = calloc(N, sizeof(*sp));
	ck_assert_ptr_nonnull(sp);
	struct mtd_trace_ctx c = ctx_of(TP);
	char val[MTD_SPAN_TEXT];
	memset(val, 'v', sizeof(val));
	static const char *const keys[] = {"a.rather.long.attribute.key.of.forty.characters.xx", "k"};
	for (int i = 0; i < N; i++) {
		uint8_t id[8] = {1, 2, 3, 4, 5, 6, 7, (uint8_t)(i + 1)};
		mtd_span_init(&sp[i], &c, id, c.span_id, MTD_SPAN_CLIENT, 1 + i);
		mtd_span_name(&sp[i], val, 100);
		mtd_span_tracestate(&sp[i], "rojo=1", 6);
		mtd_span_status_error(&sp[i], val, 128);
		for (int k = 0; k < MTD_SPAN_ATTRS + 2; k++) {
			if (k % 3 == 0)
				mtd_span_int(&sp[i], keys[k % 2], -(int64_t)k * 1000000007);
			else if (k % 3 == 1)
				mtd_span_bool(&sp[i], keys[k % 2], k & 1);
			else
				mtd_span_str(&sp[i], keys[k % 2], val, 60);
		}
		mtd_span_str(&sp[i], "x", val, sizeof(val)); /* does not fit: dropped */
		sp[i].end_unix_ns = INT64_MAX;
	}
	struct mtd_otlp_resource res = {.service_name = "s"};
	uint8_t *buf;
	size_t len = mtd_otlp_encode(&res, sp, N, &buf);
	ck_assert_uint_gt(len, 0);
	Req *r = opentelemetry__proto__collector__trace__v1__export_trace_service_request__unpack(NULL, len, buf);
	ck_assert_ptr_nonnull(r);
	const Opentelemetry__Proto__Trace__V1__ScopeSpans *ss = r->resource_spans[0]->scope_spans[0];
	ck_assert_uint_eq(ss->n_spans, N);
	for (int i = 0; i < N; i++) {
		const Opentelemetry__Proto__Trace__V1__Span *m = ss->spans[i];
		ck_assert_uint_eq(m->span_id.data[7], (uint8_t)(i + 1));
		ck_assert_uint_eq(m->n_attributes, sp[i].n_attrs);
		ck_assert_uint_eq(m->dropped_attributes_count, sp[i].dropped_attrs);
		ck_assert_uint_eq(m->start_time_unix_nano, (uint64_t)(1 + i));
		ck_assert_uint_eq(m->end_time_unix_nano, (uint64_t)INT64_MAX);
		ck_assert_int_eq(attr(m, keys[0])->value_case, OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_INT_VALUE);
		ck_assert_int_eq(attr(m, keys[0])->int_value, 0);
		ck_assert_uint_eq(strlen(m->status->message), 128);
	}
	/* A negative integer attribute survives (ten varint bytes). */
	ck_assert_int_eq(ss->spans[0]->attributes[3]->value->int_value, -3000000021LL);
	opentelemetry__proto__collector__trace__v1__export_trace_service_request__free_unpacked(r, NULL);
	free(buf);
	free(sp);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("trace");
	TCase *tc = tcase_create("trace");
	tcase_add_test(tc, traceparent_reads_the_specs_example_and_writes_it_back);
	tcase_add_test(tc, traceparent_writes_every_byte_in_every_position);
	tcase_add_test(tc, traceparent_refuses_what_the_spec_calls_invalid);
	tcase_add_test(tc, traceparent_reads_a_future_version_by_its_first_fields);
	tcase_add_test(tc, tracestate_passes_well_formed_lists_only);
	tcase_add_test(tc, ids_are_never_zero_and_do_not_repeat);
	tcase_add_test(tc, sampling_reads_the_ids_random_part);
	tcase_add_test(tc, a_span_keeps_what_fits_and_counts_the_rest);
	tcase_add_test(tc, a_span_name_of_a_service_as_long_as_the_limit_is_cut_not_overrun);
	tcase_add_test(tc, span_text_is_always_valid_utf8);
	tcase_add_test(tc, otlp_carries_ids_kinds_attributes_and_the_resource);
	tcase_add_test(tc, otlp_full_spans_fit_their_bound_and_read_back);
	suite_add_tcase(s, tc);

	tc = tcase_create("siphash");
	tcase_add_test(tc, siphash_gives_the_papers_vectors);
	tcase_add_test(tc, siphash_agrees_with_openssl_over_random_keys_and_lengths);
	tcase_add_test(tc, siphash_agrees_with_openssl_at_any_alignment_and_past_255_bytes);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
