/* Unit tests of lib/discovery/record.c: the registry record in both forms,
 * every validation rule, and the error paths under failing allocations. */
#include <config.h> /* autoconf */

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config-int.h"
#include "discovery/record.h"
#include "maitred/registry/v1/endpoint.pb-c.h"

#define NOW_MS INT64_C(1796112000000) /* 2026-12-01T08:00:00Z */

static char why[512];

static int parse(const char *json, struct mtd_record *r)
{
	why[0] = '\0';
	return mtd_record_parse(json, strlen(json), NOW_MS, r, why, sizeof(why));
}

static void refused(const char *json, const char *reason)
{
	struct mtd_record r = {0};
	int rc = parse(json, &r);

	ck_assert_msg(rc == -EINVAL, "accepted %s", json);
	ck_assert_msg(strstr(why, reason) != NULL, "%s: reason \"%s\" lacks \"%s\"", json, why, reason);
	ck_assert_ptr_null(r.address);
}

START_TEST(test_json_full)
{
	struct mtd_record r = {0};
	const char *json = "{\"address\": \"10.0.0.5:8080\", \"weight\": 250, \"zone\": \"eu-1a\", "
	                   "\"metadata\": {\"version\": \"1.4\", \"canary\": \"yes\"}, "
	                   "\"start_time\": \"2026-12-01T07:59:30.250Z\", \"version\": \"1.4.2\"}";

	ck_assert_int_eq(parse(json, &r), 0);
	ck_assert_str_eq(r.address, "10.0.0.5:8080");
	ck_assert_int_eq(r.sa.ss_family, AF_INET);
	ck_assert_uint_eq(ntohs(((struct sockaddr_in *)&r.sa)->sin_port), 8080);
	ck_assert_uint_eq(r.salen, sizeof(struct sockaddr_in));
	ck_assert_int_eq(r.weight, 250);
	ck_assert_str_eq(r.zone, "eu-1a");
	ck_assert_str_eq(r.version, "1.4.2");
	ck_assert_uint_eq(r.n_metadata, 2);
	ck_assert_str_eq(r.metadata[0].key, "canary"); /* sorted */
	ck_assert_str_eq(r.metadata[0].value, "yes");
	ck_assert_str_eq(r.metadata[1].key, "version");
	ck_assert_str_eq(r.metadata[1].value, "1.4");
	ck_assert_int_eq(r.start_ms, NOW_MS - 29750);
	mtd_record_clear(&r);
	ck_assert_ptr_null(r.address);
	mtd_record_clear(&r); /* twice is fine */
}
END_TEST

START_TEST(test_json_defaults_and_camel)
{
	struct mtd_record r = {0};

	ck_assert_int_eq(parse("  {\"address\":\"127.0.0.1:1\"}\n", &r), 0);
	ck_assert_int_eq(r.weight, 100);
	ck_assert_str_eq(r.zone, "");
	ck_assert_str_eq(r.version, "");
	ck_assert_uint_eq(r.n_metadata, 0);
	ck_assert_int_eq(r.start_ms, 0);
	mtd_record_clear(&r);
	ck_assert_int_eq(
	        parse("{\"address\":\"127.0.0.1:2\",\"weight\":0,\"startTime\":\"2026-12-01T10:00:00+02:00\"}", &r), 0);
	ck_assert_int_eq(r.weight, 0);
	ck_assert_int_eq(r.start_ms, NOW_MS);
	mtd_record_clear(&r);
	/* A quoted number is a number in proto3 JSON. */
	ck_assert_int_eq(parse("{\"address\":\"127.0.0.1:2\",\"weight\":\"7\"}", &r), 0);
	ck_assert_int_eq(r.weight, 7);
	mtd_record_clear(&r);
}
END_TEST

START_TEST(test_ipv6)
{
	struct mtd_record r = {0};

	ck_assert_int_eq(parse("{\"address\":\"[0:0::1]:50051\"}", &r), 0);
	ck_assert_str_eq(r.address, "[::1]:50051"); /* canonical: the identity */
	ck_assert_int_eq(r.sa.ss_family, AF_INET6);
	ck_assert_uint_eq(ntohs(((struct sockaddr_in6 *)&r.sa)->sin6_port), 50051);
	mtd_record_clear(&r);
}
END_TEST

START_TEST(test_bad_address)
{
	refused("{\"weight\": 5}", "address: required");
	refused("{\"address\": \"\"}", "address: required");
	refused("{\"address\": \"shop.local:80\"}", "not an IPv4 literal");
	refused("{\"address\": \"10.0.0.1\"}", "expected \"ip:port\"");
	refused("{\"address\": \"10.0.0.1:\"}", "missing port");
	refused("{\"address\": \"10.0.0.1:0\"}", "port must be 1..65535");
	refused("{\"address\": \"10.0.0.1:65536\"}", "port must be 1..65535");
	refused("{\"address\": \"10.0.0.1:99999999999999\"}", "bad port");
	refused("{\"address\": \"10.0.0.1:8o\"}", "bad port");
	refused("{\"address\": \"1.2.3.4.5:80\"}", "not an IPv4 literal");
	refused("{\"address\": \"[::1]80\"}", "expected \"[v6]:port\"");
	refused("{\"address\": \"[zz::1]:80\"}", "not an IPv6 literal");
	refused("{\"address\": \":80\"}", "bad host");
	refused("{\"address\": 5}", "address: \"5\": expected \"ip:port\"");
}
END_TEST

START_TEST(test_bad_weight)
{
	refused("{\"address\": \"10.0.0.1:80\", \"weight\": 1000001}", "weight: 1000001 is out of range 0..1000000");
	refused("{\"address\": \"10.0.0.1:80\", \"weight\": -1}", "weight");
	refused("{\"address\": \"10.0.0.1:80\", \"weight\": 1.5}", "weight");
	refused("{\"address\": \"10.0.0.1:80\", \"weight\": \"heavy\"}", "weight");
	refused("{\"address\": \"10.0.0.1:80\", \"weight\": 99999999999}", "weight");
}
END_TEST

START_TEST(test_bad_json)
{
	refused("{\"address\": \"10.0.0.1:80\"", "value:");
	refused("{\"address\": \"10.0.0.1:80\", \"colour\": \"red\"}", "unknown field");
	refused("{\"address\": \"10.0.0.1:80\", \"address\": \"10.0.0.2:80\"}", "duplicate key");
	refused("{\"address\": [\"10.0.0.1:80\"]}", "address");
	refused("{\"address\": \"10.0.0.1:80\"} {}", "value:");
	refused("{\"address\": \"10.0.0.1:80\", \"metadata\": [\"a\"]}", "metadata");
	refused("{\"address\": \"10.0.0.1:80\", \"metadata\": {\"a\": \"1\", \"a\": \"2\"}}", "duplicate key");
	refused("{\"address\": \"10.0.0.1:80\", \"metadata\": {\"a\": {\"b\": 1}}}", "metadata.a");
	refused("{\"address\": \"10.0.0.1:80\", \"start_time\": \"yesterday\"}", "start_time: bad time");
	refused("{\"address\": \"10.0.0.1:80\", \"start_time\": \"2026-02-30T00:00:00Z\"}", "no such date");
	refused("{\"address\": \"10.0.0.1:80\", \"start_time\": \"2026-12-01T08:00:00\"}", "missing time zone");
	refused("{\"address\": \"10.0.0.1:80\", \"start_time\": \"2026-12-01T08:00:00Zjunk\"}", "trailing");
	refused("{\"address\": \"10.0.0.1:80\", \"start_time\": \"2026-12-03T08:00:00Z\"}",
	        "more than a day in the future");
	refused("{\"address\": \"10.0.0.1:80\", \"start_time\": \"1969-12-31T23:00:00Z\"}", "after 1970");
}
END_TEST

START_TEST(test_bad_strings)
{
	char buf[2048];

	refused("{\"address\": \"10.0.0.1:80\", \"zone\": \"eu\\u0001\"}", "zone: contains a control character");
	refused("{\"address\": \"10.0.0.1:80\", \"metadata\": {\"\": \"x\"}}", "metadata: key \"\": must not be empty");
	memset(buf, 0, sizeof(buf));
	int n = snprintf(buf, sizeof(buf), "{\"address\": \"10.0.0.1:80\", \"version\": \"");
	memset(buf + n, 'v', MTD_RECORD_MAX_LABEL + 1);
	strcat(buf, "\"}");
	refused(buf, "version: too long");
	n = snprintf(buf, sizeof(buf), "{\"address\": \"10.0.0.1:80\", \"metadata\": {");
	for (int i = 0; i <= MTD_RECORD_MAX_META; i++)
		n += snprintf(buf + n, sizeof(buf) - (size_t)n, "%s\"k%d\": \"v\"", i ? ", " : "", i);
	snprintf(buf + n, sizeof(buf) - (size_t)n, "}}");
	refused(buf, "metadata: 65 entries, at most 64");
}
END_TEST

START_TEST(test_size_bounds)
{
	struct mtd_record r = {0};
	size_t big = MTD_RECORD_MAX_BYTES + 1;
	char *buf = malloc(big);

	ck_assert_int_eq(mtd_record_parse("", 0, NOW_MS, &r, why, sizeof(why)), -EINVAL);
	ck_assert_str_eq(why, "empty value");
	/* Valid JSON padded with spaces past the bound: refused unparsed. */
	memset(buf, ' ', big);
	memcpy(buf, "{\"address\":\"10.0.0.1:80\"}", 25);
	ck_assert_int_eq(mtd_record_parse(buf, big, NOW_MS, &r, why, sizeof(why)), -EINVAL);
	ck_assert_str_eq(why, "value of 16385 bytes, at most 16384");
	ck_assert_int_eq(mtd_record_parse(buf, big - 1, NOW_MS, &r, why, sizeof(why)), 0);
	mtd_record_clear(&r);
	free(buf);
}
END_TEST

static size_t pack(const Maitred__Registry__V1__Endpoint *m, uint8_t *buf)
{
	size_t n = maitred__registry__v1__endpoint__get_packed_size(m);

	ck_assert_uint_lt(n, 1024);
	return maitred__registry__v1__endpoint__pack(m, buf);
}

START_TEST(test_binary)
{
	Maitred__Registry__V1__Endpoint m = MAITRED__REGISTRY__V1__ENDPOINT__INIT;
	Google__Protobuf__UInt32Value w = GOOGLE__PROTOBUF__UINT32_VALUE__INIT;
	Google__Protobuf__Timestamp ts = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
	Maitred__Registry__V1__Endpoint__MetadataEntry e1 = MAITRED__REGISTRY__V1__ENDPOINT__METADATA_ENTRY__INIT,
	                                               e2 = MAITRED__REGISTRY__V1__ENDPOINT__METADATA_ENTRY__INIT;
	Maitred__Registry__V1__Endpoint__MetadataEntry *entries[] = {&e1, &e2};
	struct mtd_record r = {0};
	uint8_t buf[1024];
	char addr[] = "127.0.0.9:7000", bad_addr[] = "not an address", k[] = "k", first[] = "first", last[] = "last";
	size_t n;

	m.address = addr;
	w.value = 3;
	m.weight = &w;
	ts.seconds = NOW_MS / 1000 - 60;
	ts.nanos = 5000000;
	m.start_time = &ts;
	e1.key = k;
	e1.value = first;
	e2.key = k;
	e2.value = last;
	m.metadata = entries;
	m.n_metadata = 2;
	n = pack(&m, buf);
	ck_assert_int_eq(mtd_record_parse(buf, n, NOW_MS, &r, why, sizeof(why)), 0);
	ck_assert_str_eq(r.address, "127.0.0.9:7000");
	ck_assert_int_eq(r.weight, 3);
	ck_assert_int_eq(r.start_ms, NOW_MS - 60000 + 5);
	ck_assert_uint_eq(r.n_metadata, 1); /* protobuf maps: the last one wins */
	ck_assert_str_eq(r.metadata[0].value, "last");
	mtd_record_clear(&r);

	/* An unknown field (number 99, varint) is skipped. */
	buf[n++] = ((99 << 3) & 0x7f) | 0x80;
	buf[n++] = 99 >> 4;
	buf[n++] = 1;
	ck_assert_int_eq(mtd_record_parse(buf, n, NOW_MS, &r, why, sizeof(why)), 0);
	mtd_record_clear(&r);

	/* The same rules as JSON. */
	w.value = MTD_RECORD_MAX_WEIGHT + 1;
	n = pack(&m, buf);
	ck_assert_int_eq(mtd_record_parse(buf, n, NOW_MS, &r, why, sizeof(why)), -EINVAL);
	ck_assert_msg(strstr(why, "weight") != NULL, "%s", why);
	w.value = 1;
	ts.nanos = -1;
	n = pack(&m, buf);
	ck_assert_int_eq(mtd_record_parse(buf, n, NOW_MS, &r, why, sizeof(why)), -EINVAL);
	ck_assert_str_eq(why, "start_time: not a valid time");
	m.start_time = NULL;
	m.address = bad_addr;
	n = pack(&m, buf);
	ck_assert_int_eq(mtd_record_parse(buf, n, NOW_MS, &r, why, sizeof(why)), -EINVAL);
	ck_assert_msg(strstr(why, "address") != NULL, "%s", why);

	/* protobuf-c passes a string field's bytes as they are: one that is
	 * not UTF-8 is refused like a control character, whichever field (the
	 * fuzzer's identity "eu-1\x9f" formatted back into JSON no JSON reader
	 * would take). */
	char bad_id[] = "eu-1\x9f", overlong[] = "\xc0\xaf", surrogate[] = "\xed\xa0\x80", ok_id[] = "spiffe://t/\xc3\xa9";
	m.address = addr;
	m.identity = bad_id;
	n = pack(&m, buf);
	ck_assert_int_eq(mtd_record_parse(buf, n, NOW_MS, &r, why, sizeof(why)), -EINVAL);
	ck_assert_str_eq(why, "identity: is not valid UTF-8");
	m.identity = ok_id;
	m.zone = overlong;
	n = pack(&m, buf);
	ck_assert_int_eq(mtd_record_parse(buf, n, NOW_MS, &r, why, sizeof(why)), -EINVAL);
	ck_assert_str_eq(why, "zone: is not valid UTF-8");
	m.zone = NULL;
	e1.value = surrogate;
	n = pack(&m, buf);
	ck_assert_int_eq(mtd_record_parse(buf, n, NOW_MS, &r, why, sizeof(why)), -EINVAL);
	ck_assert_msg(strstr(why, "not valid UTF-8") != NULL, "%s", why);
	e1.value = first;
	n = pack(&m, buf);
	ck_assert_int_eq(mtd_record_parse(buf, n, NOW_MS, &r, why, sizeof(why)), 0);
	ck_assert_str_eq(r.identity, "spiffe://t/\xc3\xa9");
	mtd_record_clear(&r);
}
END_TEST

START_TEST(test_binary_garbage)
{
	static const uint8_t garbage[][8] = {
	        {0xff, 0xff, 0xff, 0xff}, {0x0a, 0x7f, 'a'}, {0x08}, {0x0a, 0x03, 'a', 0x00, 'b'}, {0x5b, 0x31, 0x5d},
	};
	static const size_t lens[] = {4, 3, 1, 5, 3};
	struct mtd_record r = {0};

	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		ck_assert_int_eq(mtd_record_parse(garbage[i], lens[i], NOW_MS, &r, why, sizeof(why)), -EINVAL);
		ck_assert_ptr_null(r.address);
	}
}
END_TEST

START_TEST(test_format_json)
{
	char buf[256];
	struct mtd_record r = {0};
	int n = mtd_record_format_json("10.1.2.3:8080", 100, NOW_MS + 123, NULL, buf, sizeof(buf));

	ck_assert_int_gt(n, 0);
	ck_assert_str_eq(
	        buf, "{\"address\": \"10.1.2.3:8080\", \"weight\": 100, \"start_time\": \"2026-12-01T08:00:00.123Z\"}");
	ck_assert_int_eq(mtd_record_parse(buf, (size_t)n, NOW_MS, &r, why, sizeof(why)), 0);
	ck_assert_int_eq(r.start_ms, NOW_MS + 123);
	mtd_record_clear(&r);
	ck_assert_int_eq(mtd_record_format_json("", 1, 0, NULL, buf, sizeof(buf)), -EINVAL);
	/* The identity a registered inbound listener presents (mesh mode). */
	n = mtd_record_format_json("10.1.2.3:15443", 7, 0, "spiffe://cluster.local/ns/a/sa/\"b\\", buf, sizeof(buf));
	ck_assert_str_eq(buf, "{\"address\": \"10.1.2.3:15443\", \"weight\": 7, "
	                      "\"identity\": \"spiffe://cluster.local/ns/a/sa/\\\"b\\\\\"}");
	ck_assert_int_eq(mtd_record_parse(buf, (size_t)n, NOW_MS, &r, why, sizeof(why)), 0);
	ck_assert_str_eq(r.identity, "spiffe://cluster.local/ns/a/sa/\"b\\");
	mtd_record_clear(&r);
	ck_assert_int_eq(mtd_record_format_json("10.1.2.3:1", 7, 0, "a\nb", buf, sizeof(buf)), -EINVAL);
	/* Absent: "". */
	ck_assert_int_eq(mtd_record_parse("{\"address\": \"10.0.0.1:1\"}", 25, NOW_MS, &r, why, sizeof(why)), 0);
	ck_assert_str_eq(r.identity, "");
	mtd_record_clear(&r);
	char long_id[MTD_RECORD_MAX_IDENTITY + 2]; /* one byte over */
	memset(long_id, 'x', sizeof(long_id) - 1);
	long_id[sizeof(long_id) - 1] = '\0';
	char big[MTD_RECORD_MAX_IDENTITY + 128];
	snprintf(big, sizeof(big), "{\"address\": \"10.0.0.1:1\", \"identity\": \"%s\"}", long_id);
	ck_assert_int_eq(mtd_record_parse(big, strlen(big), NOW_MS, &r, why, sizeof(why)), -EINVAL);
	ck_assert(strncmp(why, "identity: ", 10) == 0);
}
END_TEST

/* Every allocation failing in turn: -ENOMEM (or success), never a leak
 * (ASan's leak check) or a crash. */
START_TEST(test_failmalloc)
{
	const char *json = "{\"address\": \"10.0.0.5:8080\", \"weight\": 250, \"zone\": \"eu-1a\", "
	                   "\"metadata\": {\"version\": \"1.4\", \"canary\": \"yes\"}, "
	                   "\"start_time\": \"2026-12-01T07:59:30Z\", \"version\": \"1.4.2\"}";
	bool done = false;

	for (unsigned long n = 1; n < 10000 && !done; n++) {
		struct mtd_record r = {0};
		int rc;

		mtd_cfg__fail_alloc_after(n);
		rc = mtd_record_parse(json, strlen(json), NOW_MS, &r, why, sizeof(why));
		done = !mtd_cfg__alloc_failed();
		mtd_cfg__fail_alloc_after(0);
		if (done) {
			ck_assert_int_eq(rc, 0);
		} else {
			ck_assert_int_eq(rc, -ENOMEM);
			ck_assert_ptr_null(r.address);
		}
		mtd_record_clear(&r);
	}
	ck_assert(done);
}
END_TEST

static Suite *record_suite(void)
{
	Suite *s = suite_create("record");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_json_full);
	tcase_add_test(tc, test_json_defaults_and_camel);
	tcase_add_test(tc, test_ipv6);
	tcase_add_test(tc, test_bad_address);
	tcase_add_test(tc, test_bad_weight);
	tcase_add_test(tc, test_bad_json);
	tcase_add_test(tc, test_bad_strings);
	tcase_add_test(tc, test_size_bounds);
	tcase_add_test(tc, test_binary);
	tcase_add_test(tc, test_binary_garbage);
	tcase_add_test(tc, test_format_json);
	tcase_add_test(tc, test_failmalloc);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(record_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
