/* lib/pbwire: field paths, valid messages (strings, bytes, varints,
 * fixed, nested, first occurrence, groups), truncated, oversized and
 * hostile input, the gRPC prefix and the bytes produced for hashing. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pbwire/pbwire.h"

static Suite *pbwire_suite(void);

/* A tiny encoder for building test messages. */
struct buf {
	uint8_t b[4096];
	size_t n;
};

static void put_varint(struct buf *m, uint64_t v)
{
	do {
		uint8_t byte = v & 0x7f;

		v >>= 7;
		m->b[m->n++] = byte | (v ? 0x80 : 0);
	} while (v);
}

static void put_tag(struct buf *m, uint32_t field, unsigned wt)
{
	put_varint(m, (uint64_t)field << 3 | wt);
}

static void put_bytes(struct buf *m, uint32_t field, const void *p, size_t n)
{
	put_tag(m, field, 2);
	put_varint(m, n);
	memcpy(m->b + m->n, p, n);
	m->n += n;
}

static void put_str(struct buf *m, uint32_t field, const char *s)
{
	put_bytes(m, field, s, strlen(s));
}

static void put_msg(struct buf *m, uint32_t field, const struct buf *sub)
{
	put_bytes(m, field, sub->b, sub->n);
}

static void put_uint(struct buf *m, uint32_t field, uint64_t v)
{
	put_tag(m, field, 0);
	put_varint(m, v);
}

static int find(const struct buf *m, const char *path, bool complete, struct mtd_pbwire_value *v)
{
	uint32_t p[MTD_PBWIRE_MAX_DEPTH];
	size_t d;

	ck_assert_int_eq(mtd_pbwire_path_parse(path, p, &d), 0);
	return mtd_pbwire_find(m->b, m->n, complete, p, d, v);
}

static void assert_key(const struct mtd_pbwire_value *v, const char *want)
{
	char num[MTD_PBWIRE_NUMBUF];
	const uint8_t *k;
	size_t n = mtd_pbwire_key_bytes(v, num, &k);

	ck_assert_uint_eq(n, strlen(want));
	ck_assert_mem_eq(k, want, n);
}

START_TEST(path_parse)
{
	static const char *const bad[] = {
	        "",
	        ".",
	        "1.",
	        ".1",
	        "0",
	        "01",
	        "1..2",
	        "a",
	        "-1",
	        "+1",
	        " 1",
	        "1 ",
	        "536870912",
	        "1.2.3.4.5.6.7.8.9",
	        "99999999999999999999",
	};
	uint32_t p[MTD_PBWIRE_MAX_DEPTH];
	size_t d;

	ck_assert_int_eq(mtd_pbwire_path_parse("1", p, &d), 0);
	ck_assert_uint_eq(d, 1);
	ck_assert_uint_eq(p[0], 1);
	ck_assert_int_eq(mtd_pbwire_path_parse("2.1", p, &d), 0);
	ck_assert_uint_eq(d, 2);
	ck_assert_uint_eq(p[0], 2);
	ck_assert_uint_eq(p[1], 1);
	ck_assert_int_eq(mtd_pbwire_path_parse("536870911.10.1.2.3.4.5.6", p, &d), 0);
	ck_assert_uint_eq(d, 8);
	ck_assert_uint_eq(p[0], MTD_PBWIRE_MAX_FIELD);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(mtd_pbwire_path_parse(bad[i], p, &d) == -EINVAL, "accepted \"%s\"", bad[i]);
	ck_assert_int_eq(mtd_pbwire_path_parse(NULL, p, &d), -EINVAL);
}
END_TEST

START_TEST(valid_scalars_and_strings)
{
	struct buf m = {.n = 0};
	struct mtd_pbwire_value v;

	put_uint(&m, 3, 42);
	put_str(&m, 1, "user-17");
	put_tag(&m, 4, 5); /* fixed32 7 */
	m.b[m.n++] = 7;
	m.b[m.n++] = 0;
	m.b[m.n++] = 0;
	m.b[m.n++] = 0;
	put_tag(&m, 5, 1); /* fixed64 2^40 */
	for (int i = 0; i < 8; i++)
		m.b[m.n++] = i == 5 ? 1 : 0;
	put_uint(&m, 6, (uint64_t)-5); /* int64 -5: ten-byte varint */
	put_bytes(&m, 7, "\0\1\2", 3);

	ck_assert_int_eq(find(&m, "1", true, &v), 1);
	ck_assert_int_eq(v.type, MTD_PBWIRE_LEN);
	assert_key(&v, "user-17");
	ck_assert_int_eq(find(&m, "3", true, &v), 1);
	ck_assert_int_eq(v.type, MTD_PBWIRE_VARINT);
	ck_assert_uint_eq(v.num, 42);
	assert_key(&v, "42"); /* hashes like a header "42" */
	ck_assert_int_eq(find(&m, "4", true, &v), 1);
	ck_assert_int_eq(v.type, MTD_PBWIRE_I32);
	assert_key(&v, "7");
	ck_assert_int_eq(find(&m, "5", true, &v), 1);
	ck_assert_int_eq(v.type, MTD_PBWIRE_I64);
	assert_key(&v, "1099511627776");
	ck_assert_int_eq(find(&m, "6", true, &v), 1);
	assert_key(&v, "-5");
	ck_assert_int_eq(find(&m, "7", true, &v), 1);
	ck_assert_uint_eq(v.len, 3);
	ck_assert_mem_eq(v.data, "\0\1\2", 3);
	ck_assert_int_eq(find(&m, "8", true, &v), 0);
	ck_assert_int_eq(find(&m, "1.1", true, &v), 0);
	/* The empty message has nothing. */
	m.n = 0;
	ck_assert_int_eq(find(&m, "1", true, &v), 0);
}
END_TEST

START_TEST(nested_and_first_occurrence)
{
	struct buf m = {.n = 0}, a = {.n = 0}, b = {.n = 0}, c = {.n = 0};
	struct mtd_pbwire_value v;

	/* m = { 2: {3: 9}, 1: "first", 2: {1: "inner", 1: "later"},
	 *       1: "second", 5: { 6: { 7: 77 } } } */
	put_uint(&a, 3, 9);
	put_msg(&m, 2, &a);
	put_str(&m, 1, "first");
	put_str(&b, 1, "inner");
	put_str(&b, 1, "later");
	put_msg(&m, 2, &b);
	put_str(&m, 1, "second");
	a.n = 0;
	put_uint(&c, 7, 77);
	put_msg(&a, 6, &c);
	put_msg(&m, 5, &a);

	ck_assert_int_eq(find(&m, "1", true, &v), 1);
	assert_key(&v, "first");
	/* The first field 2 has no field 1: the second one gives it. */
	ck_assert_int_eq(find(&m, "2.1", true, &v), 1);
	assert_key(&v, "inner");
	ck_assert_int_eq(find(&m, "2.3", true, &v), 1);
	ck_assert_uint_eq(v.num, 9);
	ck_assert_int_eq(find(&m, "5.6.7", true, &v), 1);
	assert_key(&v, "77");
	ck_assert_int_eq(find(&m, "5.6.8", true, &v), 0);
	/* A whole nested message as the key: its raw bytes. */
	ck_assert_int_eq(find(&m, "5.6", true, &v), 1);
	ck_assert_uint_eq(v.len, c.n);
	ck_assert_mem_eq(v.data, c.b, c.n);
	/* Descending into a string is "no match in it", not an error. */
	ck_assert_int_eq(find(&m, "1.1", true, &v), 0);
}
END_TEST

START_TEST(groups_are_skipped)
{
	struct buf m = {.n = 0};
	struct mtd_pbwire_value v;

	/* group 4 { 1: "in group", group 5 { 1: 3 } } then 1: "top" */
	put_tag(&m, 4, 3);
	put_str(&m, 1, "in group");
	put_tag(&m, 5, 3);
	put_uint(&m, 1, 3);
	put_tag(&m, 5, 4);
	put_tag(&m, 4, 4);
	put_str(&m, 1, "top");
	ck_assert_int_eq(find(&m, "1", true, &v), 1);
	assert_key(&v, "top");
	/* A group as the target is skipped, not returned. */
	ck_assert_int_eq(find(&m, "4", true, &v), 0);
	/* Unbalanced: an EGROUP of another field. */
	m.n = 0;
	put_tag(&m, 4, 3);
	put_tag(&m, 5, 4);
	put_str(&m, 1, "x");
	ck_assert_int_eq(find(&m, "1", true, &v), -EBADMSG);
	/* Nested past the limit. */
	m.n = 0;
	for (int i = 0; i < 100; i++)
		put_tag(&m, 4, 3);
	ck_assert_int_eq(find(&m, "1", true, &v), -EBADMSG);
	/* A stray EGROUP at top level. */
	m.n = 0;
	put_tag(&m, 4, 4);
	ck_assert_int_eq(find(&m, "1", true, &v), -EBADMSG);
}
END_TEST

START_TEST(truncated)
{
	struct buf m = {.n = 0}, sub = {.n = 0};
	struct mtd_pbwire_value v;
	struct buf cut;

	put_uint(&m, 3, 300);
	put_str(&sub, 1, "abcdef");
	put_msg(&m, 2, &sub);
	put_str(&m, 9, "tail");
	/* Fields: 3 at [0, 3), 2 at [3, 13) with 2.1 ending at 13, 9 at
	 * [13, 19). Every proper prefix, as complete or as partial. */
	ck_assert_uint_eq(m.n, 19);
	for (size_t n = 0; n < m.n; n++) {
		bool boundary = n == 0 || n == 3 || n == 13;
		int rc;

		memcpy(cut.b, m.b, n);
		cut.n = n;
		rc = find(&cut, "2.1", false, &v);
		ck_assert_int_eq(rc, n >= 13 ? 1 : -EAGAIN);
		rc = find(&cut, "2.1", true, &v);
		ck_assert_int_eq(rc, n >= 13 ? 1 : boundary ? 0 : -EBADMSG);
		rc = find(&cut, "3", false, &v);
		if (n >= 3) {
			ck_assert_int_eq(rc, 1);
			ck_assert_uint_eq(v.num, 300);
		} else {
			ck_assert_int_eq(rc, -EAGAIN);
		}
		rc = find(&cut, "9", true, &v);
		ck_assert_int_eq(rc, boundary ? 0 : -EBADMSG);
		rc = find(&cut, "9", false, &v);
		ck_assert_int_eq(rc, -EAGAIN);
	}
	ck_assert_int_eq(find(&m, "2.1", false, &v), 1);
	assert_key(&v, "abcdef");
	ck_assert_int_eq(find(&m, "9", false, &v), 1);
	ck_assert_int_eq(find(&m, "10", false, &v), -EAGAIN);
	ck_assert_int_eq(find(&m, "10", true, &v), 0);
}
END_TEST

START_TEST(oversized_and_malformed)
{
	struct buf m = {.n = 0};
	struct mtd_pbwire_value v;
	uint32_t path[1] = {1};

	/* Declared length far beyond the buffer (2^63). */
	put_tag(&m, 1, 2);
	put_varint(&m, 1ULL << 63);
	m.b[m.n++] = 'x';
	ck_assert_int_eq(find(&m, "1", true, &v), -EBADMSG);
	ck_assert_int_eq(find(&m, "1", false, &v), -EAGAIN);
	ck_assert_int_eq(find(&m, "2", true, &v), -EBADMSG);
	/* An 11-byte varint. */
	m.n = 0;
	put_tag(&m, 1, 0);
	for (int i = 0; i < 10; i++)
		m.b[m.n++] = 0xff;
	m.b[m.n++] = 0x01;
	ck_assert_int_eq(find(&m, "1", true, &v), -EBADMSG);
	/* 10th byte carrying more than bit 63. */
	m.n = 0;
	put_tag(&m, 1, 0);
	for (int i = 0; i < 9; i++)
		m.b[m.n++] = 0x80;
	m.b[m.n++] = 0x02;
	ck_assert_int_eq(find(&m, "1", true, &v), -EBADMSG);
	/* ...and exactly 2^63 is fine. */
	m.b[m.n - 1] = 0x01;
	ck_assert_int_eq(find(&m, "1", true, &v), 1);
	ck_assert_uint_eq(v.num, 1ULL << 63);
	/* Field number 0, wire types 6 and 7. */
	m.n = 0;
	m.b[m.n++] = 0x00;
	ck_assert_int_eq(find(&m, "1", true, &v), -EBADMSG);
	m.b[0] = 0x0e;
	ck_assert_int_eq(find(&m, "1", true, &v), -EBADMSG);
	m.b[0] = 0x0f;
	ck_assert_int_eq(find(&m, "1", true, &v), -EBADMSG);
	/* A nested message longer than its parent, at top level. */
	m.n = 0;
	put_tag(&m, 2, 2);
	put_varint(&m, 10);
	put_uint(&m, 1, 1);
	ck_assert_int_eq(find(&m, "2.1", true, &v), -EBADMSG);
	/* Bad arguments. */
	ck_assert_int_eq(mtd_pbwire_find(m.b, m.n, true, path, 0, &v), -EINVAL);
	ck_assert_int_eq(mtd_pbwire_find(m.b, m.n, true, path, 9, &v), -EINVAL);
	path[0] = 0;
	ck_assert_int_eq(mtd_pbwire_find(m.b, m.n, true, path, 1, &v), -EINVAL);
	path[0] = 1;
	ck_assert_int_eq(mtd_pbwire_find(NULL, 3, true, path, 1, &v), -EINVAL);
	ck_assert_int_eq(mtd_pbwire_find(NULL, 0, true, path, 1, &v), 0);
}
END_TEST

START_TEST(hostile_random_input)
{
	/* 50,000 random and mutated buffers under every path shape: no
	 * crash (ASan/UBSan builds check the reads), and every value found
	 * lies inside the buffer. */
	static const char *const paths[] = {"1", "2.1", "1.1.1", "3", "5.6.7"};
	uint64_t rng = 0x1234567;
	uint8_t b[64];
	size_t found = 0;

	for (int iter = 0; iter < 50000; iter++) {
		size_t n = 0;
		uint32_t p[MTD_PBWIRE_MAX_DEPTH];
		size_t d;
		struct mtd_pbwire_value v;

		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		n = rng % sizeof(b);
		for (size_t i = 0; i < n; i++) {
			rng ^= rng << 13;
			rng ^= rng >> 7;
			rng ^= rng << 17;
			/* Bias toward small tags/lengths, which parse. */
			b[i] = (uint8_t)(rng % 4 == 0 ? rng >> 8 : (rng >> 8) % 24);
		}
		mtd_pbwire_path_parse(paths[iter % 5], p, &d);
		for (int complete = 0; complete < 2; complete++) {
			int rc = mtd_pbwire_find(b, n, complete, p, d, &v);

			ck_assert(rc == 1 || rc == 0 || rc == -EAGAIN || rc == -EBADMSG);
			if (!complete)
				ck_assert_int_ne(rc, 0);
			if (rc == 1) {
				found++;
				if (v.type == MTD_PBWIRE_LEN)
					ck_assert(v.data >= b && v.len <= n && (size_t)(v.data - b) <= n - v.len);
			}
		}
	}
	ck_assert_uint_gt(found, 250);
}
END_TEST

/* The iterator: every top-level field in wire order with its value, the
 * end, and a malformation (a group among them) that stays one. */
START_TEST(iterate_fields)
{
	struct buf m = {.n = 0}, sub = {.n = 0};
	struct mtd_pbwire_iter it;
	struct mtd_pbwire_value v;
	uint32_t f;

	put_str(&sub, 1, "in");
	put_uint(&m, 3, 300);
	put_msg(&m, 2, &sub);
	put_tag(&m, 9, 5);
	memcpy(m.b + m.n, "\x01\x00\x00\x00", 4);
	m.n += 4;
	put_str(&m, 2, "");
	mtd_pbwire_iter_init(&it, m.b, m.n);
	ck_assert_int_eq(mtd_pbwire_next(&it, &f, &v), 1);
	ck_assert_uint_eq(f, 3);
	ck_assert_int_eq(v.type, MTD_PBWIRE_VARINT);
	ck_assert_uint_eq(v.num, 300);
	ck_assert_int_eq(mtd_pbwire_next(&it, &f, &v), 1);
	ck_assert_uint_eq(f, 2);
	ck_assert_int_eq(v.type, MTD_PBWIRE_LEN);
	ck_assert_uint_eq(v.len, sub.n);
	ck_assert_mem_eq(v.data, sub.b, sub.n);
	ck_assert_int_eq(mtd_pbwire_next(&it, &f, &v), 1);
	ck_assert_uint_eq(f, 9);
	ck_assert_int_eq(v.type, MTD_PBWIRE_I32);
	ck_assert_uint_eq(v.num, 1);
	ck_assert_int_eq(mtd_pbwire_next(&it, &f, &v), 1);
	ck_assert_uint_eq(f, 2);
	ck_assert_uint_eq(v.len, 0);
	ck_assert_int_eq(mtd_pbwire_next(&it, &f, &v), 0);
	ck_assert_int_eq(mtd_pbwire_next(&it, &f, &v), 0);
	/* Empty. */
	mtd_pbwire_iter_init(&it, NULL, 0);
	ck_assert_int_eq(mtd_pbwire_next(&it, &f, &v), 0);
	/* A tag in 5 bytes is still one. */
	static const uint8_t five[] = {0x88, 0x80, 0x80, 0x80, 0x00, 0x07};
	mtd_pbwire_iter_init(&it, five, sizeof(five));
	ck_assert_int_eq(mtd_pbwire_next(&it, &f, &v), 1);
	ck_assert_uint_eq(f, 1);
	ck_assert_uint_eq(v.num, 7);
	/* A LEN longer than what is left, after a good field: the good one,
	 * then -EBADMSG, and -EBADMSG again. */
	struct buf bad = {.n = 0};
	put_uint(&bad, 1, 1);
	put_tag(&bad, 2, 2);
	put_varint(&bad, 10);
	bad.b[bad.n++] = 'x';
	mtd_pbwire_iter_init(&it, bad.b, bad.n);
	ck_assert_int_eq(mtd_pbwire_next(&it, &f, &v), 1);
	ck_assert_int_eq(mtd_pbwire_next(&it, &f, &v), -EBADMSG);
	ck_assert_int_eq(mtd_pbwire_next(&it, &f, &v), -EBADMSG);
	/* A group (balanced), a stray end of group, wire type 6, field 0, a
	 * cut varint, a tag in 6 bytes (field 1 varint, zeros past the value:
	 * small, but longer than a 32-bit varint), a length in 6 bytes. */
	static const uint8_t strays[][8] = {{0x0b, 0x08, 0x01, 0x0c},
	                                    {0x0c},
	                                    {0x0e},
	                                    {0x00, 0x01},
	                                    {0x08, 0x80},
	                                    {0x88, 0x80, 0x80, 0x80, 0x80, 0x00, 0x01},
	                                    {0x0a, 0x81, 0x80, 0x80, 0x80, 0x80, 0x00, 'x'}};
	static const size_t stray_len[] = {4, 1, 1, 2, 2, 7, 8};
	for (size_t i = 0; i < 7; i++) {
		mtd_pbwire_iter_init(&it, strays[i], stray_len[i]);
		ck_assert_int_eq(mtd_pbwire_next(&it, &f, &v), -EBADMSG);
	}
}
END_TEST

START_TEST(grpc_prefix)
{
	struct buf m = {.n = 0}, f = {.n = 0};
	struct mtd_pbwire_value v;
	uint32_t path[2] = {1, 0};

	put_uint(&m, 2, 5);
	put_str(&m, 1, "k");
	f.b[0] = 0;
	f.b[1] = 0;
	f.b[2] = 0;
	f.b[3] = 0;
	f.b[4] = (uint8_t)m.n;
	memcpy(f.b + 5, m.b, m.n);
	f.n = 5 + m.n;
	/* Bytes of a following message are ignored. */
	f.b[f.n++] = 0x0a;
	f.b[f.n++] = 0x01;
	ck_assert_int_eq(mtd_pbwire_find_grpc(f.b, f.n, 65536, path, 1, &v), 1);
	assert_key(&v, "k");
	for (size_t n = 0; n < 5 + m.n; n++)
		ck_assert_int_eq(mtd_pbwire_find_grpc(f.b, n, 65536, path, 1, &v), -EAGAIN);
	/* Look-ahead of 2 bytes: field 1 lies beyond it, absent. */
	ck_assert_int_eq(mtd_pbwire_find_grpc(f.b, 7, 2, path, 1, &v), 0);
	f.b[0] = 1;
	ck_assert_int_eq(mtd_pbwire_find_grpc(f.b, f.n, 65536, path, 1, &v), -ENOTSUP);
}
END_TEST

static Suite *pbwire_suite(void)
{
	Suite *s = suite_create("pbwire");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, path_parse);
	tcase_add_test(tc, valid_scalars_and_strings);
	tcase_add_test(tc, nested_and_first_occurrence);
	tcase_add_test(tc, groups_are_skipped);
	tcase_add_test(tc, truncated);
	tcase_add_test(tc, oversized_and_malformed);
	tcase_add_test(tc, hostile_random_input);
	tcase_add_test(tc, grpc_prefix);
	tcase_add_test(tc, iterate_fields);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(pbwire_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
