/* Unit tests for lib/grpc: framing scanner, grpc-timeout, status mapping,
 * grpc-message encoding. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <nghttp2/nghttp2.h>

#include "grpc/grpc.h"

START_TEST(timeout_parse_units)
{
	static const struct {
		const char *s;
		int64_t ns;
	} ok[] = {
	        {"1n", 1},
	        {"250u", 250000},
	        {"250m", 250000000},
	        {"10S", 10000000000},
	        {"2M", 120000000000},
	        {"1H", 3600000000000},
	        {"99999999n", 99999999},
	        {"0m", 0},
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		int64_t ns = -1;
		ck_assert_int_eq(mtd_grpc_timeout_parse(ok[i].s, strlen(ok[i].s), &ns), 0);
		ck_assert_int_eq(ns, ok[i].ns);
	}
}
END_TEST

START_TEST(timeout_parse_rejects)
{
	static const char *bad[] = {"", "S", "10", "10s", "123456789S", "-1S", "1.5S", " 1S", "1 S", "1x"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int64_t ns = 7;
		ck_assert_int_eq(mtd_grpc_timeout_parse(bad[i], strlen(bad[i]), &ns), -EINVAL);
		ck_assert_int_eq(ns, 7);
	}
}
END_TEST

START_TEST(timeout_parse_saturates)
{
	int64_t ns = 0;
	ck_assert_int_eq(mtd_grpc_timeout_parse("99999999H", 9, &ns), 0);
	ck_assert_int_eq(ns, INT64_MAX);
}
END_TEST

START_TEST(timeout_format_round_trip)
{
	static const struct {
		int64_t ns;
		const char *s;
	} cases[] = {
	        {0, "1n"},
	        {1, "1n"},
	        {99999999, "99999999n"},
	        {100000000, "100000u"},
	        {100000001, "100001u"},
	        {5000000000, "5000000u"},
	        {3600000000000, "3600000m"},
	        {INT64_MAX, "2562048H"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char buf[MTD_GRPC_TIMEOUT_BUFLEN];
		size_t n = mtd_grpc_timeout_format(cases[i].ns, buf);
		ck_assert_str_eq(buf, cases[i].s);
		ck_assert_uint_eq(n, strlen(cases[i].s));
		int64_t back = 0;
		ck_assert_int_eq(mtd_grpc_timeout_parse(buf, n, &back), 0);
		/* Rounded up, never down. */
		ck_assert(back >= cases[i].ns);
	}
}
END_TEST

START_TEST(status_mapping)
{
	ck_assert_int_eq(mtd_grpc_status_from_h2_error(NGHTTP2_CANCEL), MTD_GRPC_CANCELLED);
	ck_assert_int_eq(mtd_grpc_status_from_h2_error(NGHTTP2_REFUSED_STREAM), MTD_GRPC_UNAVAILABLE);
	ck_assert_int_eq(mtd_grpc_status_from_h2_error(NGHTTP2_ENHANCE_YOUR_CALM), MTD_GRPC_RESOURCE_EXHAUSTED);
	ck_assert_int_eq(mtd_grpc_status_from_h2_error(NGHTTP2_INADEQUATE_SECURITY), MTD_GRPC_PERMISSION_DENIED);
	ck_assert_int_eq(mtd_grpc_status_from_h2_error(NGHTTP2_PROTOCOL_ERROR), MTD_GRPC_INTERNAL);
	ck_assert_int_eq(mtd_grpc_status_from_h2_error(0xdead), MTD_GRPC_INTERNAL);
	ck_assert_int_eq(mtd_grpc_status_from_http(404), MTD_GRPC_UNIMPLEMENTED);
	ck_assert_int_eq(mtd_grpc_status_from_http(503), MTD_GRPC_UNAVAILABLE);
	ck_assert_int_eq(mtd_grpc_status_from_http(401), MTD_GRPC_UNAUTHENTICATED);
	ck_assert_int_eq(mtd_grpc_status_from_http(500), MTD_GRPC_UNKNOWN);
	ck_assert_str_eq(mtd_grpc_status_name(14), "UNAVAILABLE");
	/* grpc-status and :status values. */
	ck_assert_int_eq(mtd_grpc_status_parse((const uint8_t *)"0", 1), 0);
	ck_assert_int_eq(mtd_grpc_status_parse((const uint8_t *)"14", 2), 14);
	ck_assert_int_eq(mtd_grpc_status_parse((const uint8_t *)"999", 3), 999);
	ck_assert_int_eq(mtd_grpc_status_parse((const uint8_t *)"1000", 4), -1);
	ck_assert_int_eq(mtd_grpc_status_parse((const uint8_t *)"", 0), -1);
	ck_assert_int_eq(mtd_grpc_status_parse((const uint8_t *)"-1", 2), -1);
	ck_assert_int_eq(mtd_grpc_status_parse((const uint8_t *)" 1", 2), -1);
	ck_assert_int_eq(mtd_grpc_status_parse((const uint8_t *)"1a", 2), -1);
	ck_assert_int_eq(mtd_http_status_parse((const uint8_t *)"200", 3), 200);
	ck_assert_int_eq(mtd_http_status_parse((const uint8_t *)"20", 2), -1);
	ck_assert_int_eq(mtd_http_status_parse((const uint8_t *)"2000", 4), -1);
	ck_assert_int_eq(mtd_http_status_parse((const uint8_t *)"2x0", 3), -1);
	ck_assert_str_eq(mtd_grpc_status_name(17), "UNKNOWN_STATUS");
	ck_assert_str_eq(mtd_grpc_status_name(-1), "UNKNOWN_STATUS");
}
END_TEST

START_TEST(message_encoding)
{
	char out[64];
	ck_assert_uint_eq(mtd_grpc_message_encode("plain text", out, sizeof(out)), 10);
	ck_assert_str_eq(out, "plain text");
	mtd_grpc_message_encode("100% caf\xc3\xa9\n", out, sizeof(out));
	ck_assert_str_eq(out, "100%25 caf%C3%A9%0A");
	/* Truncation never splits an escape. */
	mtd_grpc_message_encode("ab\xc3\xa9", out, 5);
	ck_assert_str_eq(out, "ab");
	ck_assert_uint_eq(mtd_grpc_message_encode("x", out, 0), 0);
}
END_TEST

struct first_capture {
	uint8_t buf[64];
	size_t n;
	uint32_t msg_len;
	int calls;
};

static void capture_first(void *arg, uint32_t msg_len, uint32_t off, const uint8_t *p, size_t n)
{
	struct first_capture *c = arg;
	ck_assert_uint_eq(off, c->n);
	if (n > 0)
		memcpy(c->buf + c->n, p, n);
	c->n += n;
	c->msg_len = msg_len;
	c->calls++;
}

START_TEST(scanner_byte_by_byte)
{
	/* Two messages: "hello" and "" then a third of 3 bytes. */
	static const uint8_t stream[] = {
	        0, 0, 0, 0, 5, 'h', 'e', 'l', 'l', 'o', 0, 0, 0, 0, 0, 1, 0, 0, 0, 3, 'a', 'b', 'c',
	};
	struct mtd_grpc_scanner s = {0};
	struct first_capture c = {0};
	for (size_t i = 0; i < sizeof(stream); i++) {
		ck_assert_int_eq(mtd_grpc_scan(&s, stream + i, 1, 16, capture_first, &c), 0);
		if (i == 9 || i == 14 || i == sizeof(stream) - 1)
			ck_assert(mtd_grpc_scan_complete(&s));
		else
			ck_assert(!mtd_grpc_scan_complete(&s));
	}
	ck_assert_uint_eq(s.messages, 3);
	ck_assert_uint_eq(c.n, 5);
	ck_assert_uint_eq(c.msg_len, 5);
	ck_assert(memcmp(c.buf, "hello", 5) == 0);
}
END_TEST

START_TEST(scanner_limits)
{
	static const uint8_t big[] = {0, 0, 0, 1, 0}; /* 256 bytes announced */
	struct mtd_grpc_scanner s = {0};
	ck_assert_int_eq(mtd_grpc_scan(&s, big, sizeof(big), 255, NULL, NULL), MTD_GRPC_SCAN_TOO_BIG);
	memset(&s, 0, sizeof(s));
	ck_assert_int_eq(mtd_grpc_scan(&s, big, sizeof(big), 256, NULL, NULL), 0);
	ck_assert(!mtd_grpc_scan_complete(&s));
	static const uint8_t flag[] = {2, 0, 0, 0, 0};
	memset(&s, 0, sizeof(s));
	ck_assert_int_eq(mtd_grpc_scan(&s, flag, sizeof(flag), 256, NULL, NULL), MTD_GRPC_SCAN_BAD_FLAG);
	/* 0xFFFFFFFF-byte prefix against the largest limit. */
	static const uint8_t huge[] = {0, 0xff, 0xff, 0xff, 0xff};
	memset(&s, 0, sizeof(s));
	ck_assert_int_eq(mtd_grpc_scan(&s, huge, sizeof(huge), UINT32_MAX - 1, NULL, NULL), MTD_GRPC_SCAN_TOO_BIG);
}
END_TEST

START_TEST(scanner_empty_first_message)
{
	static const uint8_t empty[] = {0, 0, 0, 0, 0};
	struct mtd_grpc_scanner s = {0};
	struct first_capture c = {0};
	ck_assert_int_eq(mtd_grpc_scan(&s, empty, sizeof(empty), 16, capture_first, &c), 0);
	ck_assert_int_eq(c.calls, 1);
	ck_assert_uint_eq(c.n, 0);
}
END_TEST

static Suite *grpc_suite(void)
{
	Suite *s = suite_create("grpc");
	TCase *tc = tcase_create("timeout");
	tcase_add_test(tc, timeout_parse_units);
	tcase_add_test(tc, timeout_parse_rejects);
	tcase_add_test(tc, timeout_parse_saturates);
	tcase_add_test(tc, timeout_format_round_trip);
	suite_add_tcase(s, tc);
	tc = tcase_create("status");
	tcase_add_test(tc, status_mapping);
	tcase_add_test(tc, message_encoding);
	suite_add_tcase(s, tc);
	tc = tcase_create("frame");
	tcase_add_test(tc, scanner_byte_by_byte);
	tcase_add_test(tc, scanner_limits);
	tcase_add_test(tc, scanner_empty_first_message);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(grpc_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
