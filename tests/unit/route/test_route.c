/* Unit tests for lib/route: :path parsing and service lookup. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "route/regex.h"
#include "route/route.h"

START_TEST(parse_valid)
{
	struct mtd_route_path p;
	const char *path = "/grpc.testing.TestService/UnaryCall";
	ck_assert_int_eq(mtd_route_parse_path(path, strlen(path), &p), 0);
	ck_assert_uint_eq(p.service_len, strlen("grpc.testing.TestService"));
	ck_assert(memcmp(p.service, "grpc.testing.TestService", p.service_len) == 0);
	ck_assert_uint_eq(p.method_len, strlen("UnaryCall"));
	ck_assert(p.path == path && p.path_len == strlen(path));
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

/* ---- routes --------------------------------------------------------------- */

struct hdrs {
	const char *const *kv; /* name, value, ... NULL */
	int asked;
};

static const char *find_hdr(void *arg, const char *name, size_t *len)
{
	struct hdrs *h = arg;
	h->asked++;
	for (size_t i = 0; h->kv[i]; i += 2)
		if (strcmp(h->kv[i], name) == 0) {
			*len = strlen(h->kv[i + 1]);
			return h->kv[i + 1];
		}
	return NULL;
}

static int match(const struct mtd_route_rule *r, size_t n, const char *path, const char *const *kv, int *asked)
{
	struct mtd_route_path p;
	struct hdrs h = {kv, 0};
	ck_assert_int_eq(mtd_route_parse_path(path, strlen(path), &p), 0);
	int i = mtd_route_match(r, n, &p, find_hdr, &h);
	if (asked)
		*asked = h.asked;
	return i;
}

static size_t len0(const char *s)
{
	return s ? strlen(s) : 0;
}

#define RULE(svc, meth, hdr, k, val, to)                                           \
	{                                                                          \
		svc, sizeof(svc) - 1, meth, len0(meth), hdr, k, val, len0(val), to \
	}

START_TEST(routes_first_match_wins)
{
	const char *m_get = "Get";
	struct mtd_route_rule r[] = {
	        RULE("shop.Cart", m_get, "x-tenant", MTD_ROUTE_HEADER_VALUE, "acme", 5),
	        RULE("shop.Cart", NULL, "x-tenant", MTD_ROUTE_HEADER_PREFIX, "ac", 6),
	        RULE("shop.Cart", NULL, "x-beta", MTD_ROUTE_HEADER_PRESENT, NULL, 7),
	        RULE("*", NULL, "x-any", MTD_ROUTE_HEADER_VALUE, "1", 8),
	        RULE("shop.Pay", NULL, NULL, MTD_ROUTE_HEADER_NONE, NULL, 9),
	};
	size_t n = sizeof(r) / sizeof(r[0]);
	const char *acme[] = {"x-tenant", "acme", NULL};
	const char *acorn[] = {"x-tenant", "acorn", NULL};
	const char *other[] = {"x-tenant", "bolt", NULL};
	const char *beta_empty[] = {"x-beta", "", NULL};
	const char *any[] = {"x-any", "1", NULL};
	const char *any2[] = {"x-any", "12", NULL};
	const char *none[] = {NULL};
	int asked;
	/* Exact value on the method, then the prefix for other methods. */
	ck_assert_int_eq(match(r, n, "/shop.Cart/Get", acme, NULL), 0);
	ck_assert_int_eq(match(r, n, "/shop.Cart/Put", acme, NULL), 1);
	ck_assert_int_eq(match(r, n, "/shop.Cart/Get", acorn, NULL), 1);
	/* A prefix is not an exact value, and a prefix longer than the value
	 * does not match it. */
	ck_assert_int_eq(match(r, n, "/shop.Cart/Get", other, NULL), -1);
	const char *a[] = {"x-tenant", "a", NULL};
	ck_assert_int_eq(match(r, n, "/shop.Cart/Get", a, NULL), -1);
	/* present: an empty value is present. */
	ck_assert_int_eq(match(r, n, "/shop.Cart/Get", beta_empty, NULL), 2);
	/* "*" matches any service; exact values are exact. */
	ck_assert_int_eq(match(r, n, "/other.Svc/X", any, NULL), 3);
	ck_assert_int_eq(match(r, n, "/other.Svc/X", any2, NULL), -1);
	/* No header condition: service (and method) alone. */
	ck_assert_int_eq(match(r, n, "/shop.Pay/Charge", none, NULL), 4); /* a rule index */
	/* A service that is a prefix of another is not it; headers are not
	 * looked up for rules whose service and method do not match. */
	ck_assert_int_eq(match(r, n, "/shop.CartX/Get", acme, &asked), -1);
	ck_assert_int_eq(asked, 1); /* only the "*" rule asked */
	ck_assert_int_eq(match(r, 0, "/shop.Cart/Get", acme, NULL), -1);
}
END_TEST

static struct mtd_regex *re(const char *p)
{
	struct mtd_regex *r;
	char why[128];
	ck_assert_int_eq(mtd_regex_compile(p, strlen(p), &r, why, sizeof(why)), 0);
	return r;
}

/* A path pattern matches the whole :path, after service and method; a
 * header pattern the whole value of a header that is there. */
START_TEST(routes_by_pattern)
{
	struct mtd_regex *path = re("/shop\\.(Cart|Pay)/Get.*"), *tenant = re("ac(me|orn)");
	struct mtd_route_rule r[] = {
	        {.service = "*", .service_len = 1, .path_re = path, .to = 10},
	        {.service = "*",
	         .service_len = 1,
	         .header = "x-tenant",
	         .kind = MTD_ROUTE_HEADER_REGEX,
	         .value_re = tenant,
	         .to = 11},
	        {.service = "shop.Cart", .service_len = 9, .path_re = tenant, .to = 12}, /* matches no :path */
	};
	const char *acme[] = {"x-tenant", "acme", NULL};
	const char *acm[] = {"x-tenant", "acm", NULL};
	const char *none[] = {NULL};
	int asked;
	ck_assert_int_eq(match(r, 3, "/shop.Cart/GetAll", none, NULL), 0);
	ck_assert_int_eq(match(r, 3, "/shop.Pay/Get", none, NULL), 0);
	ck_assert_int_eq(match(r, 3, "/shop.Pay/Put", acme, NULL), 1);
	ck_assert_int_eq(match(r, 3, "/shopXPay/Get", acme, NULL), 1);     /* the escaped dot is a dot */
	ck_assert_int_eq(match(r, 3, "/shop.Cart/Put", acm, NULL), -1);    /* the whole value */
	ck_assert_int_eq(match(r, 3, "/x.Cart/GetAll", none, &asked), -1); /* a missing header */
	ck_assert_int_eq(asked, 1);
	mtd_regex_free(path);
	mtd_regex_free(tenant);
}
END_TEST

START_TEST(table_leaves_out_null_names)
{
	const char *names[] = {"a.Svc", NULL, "b.Svc"};
	struct mtd_route_table *t = mtd_route_table_new(names, 3);
	ck_assert_ptr_nonnull(t);
	ck_assert_int_eq(mtd_route_lookup(t, "a.Svc", 5), 0);
	ck_assert_int_eq(mtd_route_lookup(t, "b.Svc", 5), 2);
	ck_assert_int_eq(mtd_route_lookup(t, "beta-pool", 9), -1);
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
	tcase_add_test(tc, routes_first_match_wins);
	tcase_add_test(tc, routes_by_pattern);
	tcase_add_test(tc, table_leaves_out_null_names);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
