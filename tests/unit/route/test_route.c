/* Unit tests for lib/route: :path parsing and service lookup. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "route/route.h"

START_TEST(parse_valid)
{
	struct mtd_route_path p;
	const char *path = "/grpc.testing.TestService/UnaryCall";
	ck_assert_int_eq(mtd_route_parse_path(path, strlen(path), &p), 0);
	ck_assert_uint_eq(p.service_len, strlen("grpc.testing.TestService"));
	ck_assert(memcmp(p.service, "grpc.testing.TestService", p.service_len) == 0);
	ck_assert_uint_eq(p.method_len, strlen("UnaryCall"));
	ck_assert(memcmp(p.method, "UnaryCall", p.method_len) == 0);
}
END_TEST

START_TEST(parse_invalid)
{
	static const char *bad[] = {"",     "/",      "//",       "/a/",   "//m",  "a/b/c",
	                            "/svc", "/a/b/c", "/a/b?x=1", "/a#/b", "/a/b#"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct mtd_route_path p;
		ck_assert_msg(mtd_route_parse_path(bad[i], strlen(bad[i]), &p) == -EINVAL, "accepted %s", bad[i]);
	}
}
END_TEST

START_TEST(lookup_exact_and_catch_all)
{
	const char *names[] = {"a.Svc", "*", "b.Svc", "a.Svc2"};
	struct mtd_route_table *t = mtd_route_table_new(names, 4);
	ck_assert_ptr_nonnull(t);
	ck_assert_int_eq(mtd_route_lookup(t, "a.Svc", 5), 0);
	ck_assert_int_eq(mtd_route_lookup(t, "b.Svc", 5), 2);
	ck_assert_int_eq(mtd_route_lookup(t, "a.Svc2", 6), 3);
	/* A prefix of a name is not the name. */
	ck_assert_int_eq(mtd_route_lookup(t, "a.Sv", 4), 1);
	ck_assert_int_eq(mtd_route_lookup(t, "zzz", 3), 1);
	mtd_route_table_free(t);
}
END_TEST

START_TEST(lookup_without_catch_all_and_many)
{
	enum { N = 500 };
	static char bufs[N][32];
	const char *names[N];
	for (int i = 0; i < N; i++) {
		snprintf(bufs[i], sizeof(bufs[i]), "pkg.Service%d", i);
		names[i] = bufs[i];
	}
	struct mtd_route_table *t = mtd_route_table_new(names, N);
	ck_assert_ptr_nonnull(t);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(mtd_route_lookup(t, names[i], strlen(names[i])), i);
	ck_assert_int_eq(mtd_route_lookup(t, "pkg.Service500", 14), -1);
	mtd_route_table_free(t);
	t = mtd_route_table_new(names, 0);
	ck_assert_int_eq(mtd_route_lookup(t, "x", 1), -1);
	mtd_route_table_free(t);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("route");
	TCase *tc = tcase_create("route");
	tcase_add_test(tc, parse_valid);
	tcase_add_test(tc, parse_invalid);
	tcase_add_test(tc, lookup_exact_and_catch_all);
	tcase_add_test(tc, lookup_without_catch_all_and_many);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
