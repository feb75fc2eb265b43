/* Unit tests for lib/authz: principals x methods, the defaults, pattern
 * validation, and the x-forwarded-client-cert element. */
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "authz/authz.h"

#define CART "spiffe://cluster.local/ns/shop/sa/cart"
#define PAY  "spiffe://cluster.local/ns/pay/sa/api"

/* A caller with a verified certificate whose identity is id (NULL: a
 * caller without a certificate). */
static struct mtd_authz_decision decide(const struct mtd_authz_policy *p, const char *id, const char *path)
{
	return mtd_authz_decide(p, id != NULL, id, path, strlen(path));
}

START_TEST(principal_patterns)
{
	ck_assert(mtd_authz_principal_match(CART, CART));
	ck_assert(!mtd_authz_principal_match(CART, CART "x"));
	ck_assert(!mtd_authz_principal_match(CART, "spiffe://cluster.local/ns/shop/sa/car"));
	ck_assert(mtd_authz_principal_match("spiffe://cluster.local/ns/shop/*", CART));
	ck_assert(!mtd_authz_principal_match("spiffe://cluster.local/ns/shop/*", PAY));
	ck_assert(mtd_authz_principal_match("*", PAY));
	ck_assert(mtd_authz_principal_match("*", "dns:echo.test"));
	/* Typed: a DNS identity spelled like a SPIFFE ID matches no URI
	 * principal, and a DNS principal says so. */
	ck_assert(!mtd_authz_principal_match(CART, "dns:" CART));
	ck_assert(!mtd_authz_principal_match("spiffe://cluster.local/ns/shop/*", "dns:" CART));
	ck_assert(mtd_authz_principal_match("dns:cart.shop.svc", "dns:cart.shop.svc"));
	ck_assert(!mtd_authz_principal_match("dns:cart.shop.svc", "spiffe://cart.shop.svc"));
	/* '*' is a prefix wildcard only: no glob inside. */
	ck_assert(!mtd_authz_principal_match("spiffe://cluster.local/ns/*", "spiffe://other/ns/shop"));
}
END_TEST

START_TEST(method_patterns)
{
	const char *p = "/shop.Cart/GetCart";
	ck_assert(mtd_authz_method_match("/shop.Cart/GetCart", p, strlen(p)));
	ck_assert(!mtd_authz_method_match("/shop.Cart/GetCar", p, strlen(p)));
	ck_assert(!mtd_authz_method_match("/shop.Cart/GetCartX", p, strlen(p)));
	ck_assert(mtd_authz_method_match("/shop.Cart/*", p, strlen(p)));
	ck_assert(!mtd_authz_method_match("/shop.Car/*", p, strlen(p)));
	/* A service pattern is not a prefix of another service's name. */
	const char *q = "/shop.CartAdmin/Drop";
	ck_assert(!mtd_authz_method_match("/shop.Cart/*", q, strlen(q)));
	/* ... nor of a path with another segment, nor of an empty method. */
	const char *r = "/shop.Cart/a/b";
	ck_assert(!mtd_authz_method_match("/shop.Cart/*", r, strlen(r)));
	const char *e = "/shop.Cart/";
	ck_assert(!mtd_authz_method_match("/shop.Cart/*", e, strlen(e)));
	/* Length-bounded: the path need not be NUL-terminated. */
	const char buf[] = "/shop.Cart/GetCartTRAILING";
	ck_assert(mtd_authz_method_match("/shop.Cart/GetCart", buf, strlen(p)));
}
END_TEST

START_TEST(validation)
{
	const char *why = NULL;
	ck_assert(mtd_authz_principal_ok(CART, &why));
	ck_assert(mtd_authz_principal_ok("spiffe://cluster.local/ns/shop/*", &why));
	ck_assert(mtd_authz_principal_ok("*", &why));
	ck_assert(!mtd_authz_principal_ok("", &why));
	ck_assert(!mtd_authz_principal_ok("spiffe://*/ns/shop", &why));
	ck_assert(!mtd_authz_principal_ok("spiffe://a b", &why));
	ck_assert_ptr_nonnull(why);
	ck_assert(mtd_authz_principal_ok("dns:cart.shop.svc", &why));
	ck_assert(!mtd_authz_principal_ok("cart.shop.svc", &why)); /* untyped */
	ck_assert(mtd_authz_method_ok("/shop.Cart/GetCart", &why));
	ck_assert(mtd_authz_method_ok("/shop.Cart/*", &why));
	static const char *bad[] = {"",
	                            "/",
	                            "shop.Cart/GetCart",
	                            "/shop.Cart",
	                            "/shop.Cart/",
	                            "/*/*",
	                            "/shop.*/Get",
	                            "/shop.Cart/Get*",
	                            "/shop.Cart/a/b",
	                            "*",
	                            "/shop.Cart/*/x"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(!mtd_authz_method_ok(bad[i], &why), "accepted %s", bad[i]);
}
END_TEST

START_TEST(rules_then_default)
{
	/* The policy's strings are the config's own (char *). */
	static char cart[] = CART, cart_methods[] = "/shop.Cart/*", pay[] = "spiffe://cluster.local/ns/pay/*",
	            get[] = "/shop.Cart/GetCart", list[] = "/shop.Cart/List", check[] = "/grpc.health.v1.Health/Check";
	char *pr0[] = {cart}, *me0[] = {cart_methods};
	char *pr1[] = {pay}, *me1[] = {get, list};
	char *me2[] = {check};
	struct mtd_authz_rule rules[] = {
	        {pr0, 1, me0, 1}, {pr1, 1, me1, 2}, {NULL, 0, me2, 1}, /* any authenticated caller */
	};
	struct mtd_authz_policy p = {.def = MTD_AUTHZ_DENY, .rules = rules, .n_rules = 3};
	struct mtd_authz_decision d = decide(&p, CART, "/shop.Cart/Drop");
	ck_assert(d.allowed);
	ck_assert_int_eq(d.rule, 0);
	d = decide(&p, PAY, "/shop.Cart/List");
	ck_assert(d.allowed);
	ck_assert_int_eq(d.rule, 1);
	d = decide(&p, PAY, "/shop.Cart/Drop");
	ck_assert(!d.allowed);
	ck_assert_int_eq(d.rule, -1);
	d = decide(&p, "spiffe://x/y", "/grpc.health.v1.Health/Check");
	ck_assert(d.allowed);
	ck_assert_int_eq(d.rule, 2);
	/* No identity: no rule applies, not even one without principals. */
	ck_assert(!decide(&p, NULL, "/grpc.health.v1.Health/Check").allowed);
	ck_assert(!decide(&p, "", "/shop.Cart/Drop").allowed);
	/* The defaults. */
	p.def = MTD_AUTHZ_ALLOW_AUTHENTICATED;
	d = decide(&p, PAY, "/shop.Cart/Drop");
	ck_assert(d.allowed);
	ck_assert_int_eq(d.rule, -1);
	ck_assert(!decide(&p, NULL, "/shop.Cart/Drop").allowed);
	/* A verified certificate without an identity (no SAN, several URI
	 * SANs): authenticated, so ALLOW_AUTHENTICATED lets it in; no rule
	 * matches it. */
	ck_assert(mtd_authz_decide(&p, true, "", "/shop.Cart/Drop", 15).allowed);
	p.def = MTD_AUTHZ_DENY;
	ck_assert(!mtd_authz_decide(&p, true, "", "/grpc.health.v1.Health/Check", 28).allowed);
	p.def = MTD_AUTHZ_ALLOW_ALL;
	ck_assert(decide(&p, NULL, "/shop.Cart/Drop").allowed);
	ck_assert(decide(&p, PAY, "/other.Svc/X").allowed);
	/* No rule at all. */
	struct mtd_authz_policy none = {.def = MTD_AUTHZ_DENY};
	ck_assert(!decide(&none, CART, "/shop.Cart/GetCart").allowed);
	ck_assert_str_eq(mtd_authz_default_name(MTD_AUTHZ_ALLOW_AUTHENTICATED), "ALLOW_AUTHENTICATED");
}
END_TEST

START_TEST(xfcc_element)
{
	unsigned char dg[32];
	for (int i = 0; i < 32; i++)
		dg[i] = (unsigned char)(i * 9);
	char hex[65];
	mtd_xfcc_hex(dg, hex);
	ck_assert_uint_eq(strlen(hex), 64);
	ck_assert(strncmp(hex, "000912", 6) == 0);
	char out[512];
	size_t n = mtd_xfcc_format(out, sizeof(out), NULL, hex, CART, NULL);
	ck_assert_uint_eq(n, strlen(out));
	char want[512];
	snprintf(want, sizeof(want), "Hash=%s;URI=%s", hex, CART);
	ck_assert_str_eq(out, want);
	mtd_xfcc_format(out, sizeof(out), "spiffe://cluster.local/ns/shop/sa/srv", hex, NULL, "cart.shop.svc");
	snprintf(want, sizeof(want), "By=spiffe://cluster.local/ns/shop/sa/srv;Hash=%s;DNS=cart.shop.svc", hex);
	ck_assert_str_eq(out, want);
	/* A value with a separator or a quote is quoted, escaped. */
	mtd_xfcc_format(out, sizeof(out), NULL, "ab", "spiffe://x/a;b\"c", NULL);
	ck_assert_str_eq(out, "Hash=ab;URI=\"spiffe://x/a;b\\\"c\"");
	/* What the access log reads back. */
	const char *id;
	size_t idlen;
	bool dns_only = true;
	mtd_xfcc_format(out, sizeof(out), "spiffe://srv", hex, CART, NULL);
	ck_assert(mtd_xfcc_identity(out, strlen(out), &id, &idlen, &dns_only));
	ck_assert(!dns_only);
	ck_assert_uint_eq(idlen, strlen(CART));
	ck_assert(memcmp(id, CART, idlen) == 0);
	mtd_xfcc_format(out, sizeof(out), NULL, hex, NULL, "cart.shop.svc");
	ck_assert(mtd_xfcc_identity(out, strlen(out), &id, &idlen, &dns_only));
	ck_assert(idlen == 13 && memcmp(id, "cart.shop.svc", 13) == 0);
	ck_assert(dns_only); /* the access log writes it typed, "dns:cart.shop.svc" */
	mtd_xfcc_format(out, sizeof(out), "spiffe://srv", hex, NULL, NULL);
	ck_assert(!mtd_xfcc_identity(out, strlen(out), &id, &idlen, &dns_only));
	/* Typed, as the access log and spans name it. */
	char typed[16];
	mtd_xfcc_format(out, sizeof(out), NULL, hex, NULL, "cart.shop.svc");
	ck_assert_uint_eq(mtd_xfcc_typed_identity(out, strlen(out), typed, sizeof(typed)), 15);
	ck_assert_str_eq(typed, "dns:cart.shop.s"); /* cut to fit, terminated */
	char big[128];
	mtd_xfcc_format(out, sizeof(out), "spiffe://srv", hex, CART, NULL);
	ck_assert_uint_eq(mtd_xfcc_typed_identity(out, strlen(out), big, sizeof(big)), strlen(CART));
	ck_assert_str_eq(big, CART);
	mtd_xfcc_format(out, sizeof(out), "spiffe://srv", hex, NULL, NULL);
	ck_assert_uint_eq(mtd_xfcc_typed_identity(out, strlen(out), big, sizeof(big)), 0);
	ck_assert_str_eq(big, "");
	/* A quoted value with a ';' in it is one value. */
	mtd_xfcc_format(out, sizeof(out), "By;x", hex, "spiffe://x/a;b", NULL);
	ck_assert(mtd_xfcc_identity(out, strlen(out), &id, &idlen, &dns_only));
	ck_assert(idlen == strlen("\"spiffe://x/a;b\"") && memcmp(id, "\"spiffe://x/a;b\"", idlen) == 0);
	/* Too small: the length it needs, the buffer terminated. */
	char small[8];
	snprintf(want, sizeof(want), "Hash=%s;URI=%s", hex, CART);
	n = mtd_xfcc_format(small, sizeof(small), NULL, hex, CART, NULL);
	ck_assert_uint_eq(n, strlen(want));
	ck_assert_uint_eq(strlen(small), 7);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("authz");
	TCase *t = tcase_create("core");
	tcase_add_test(t, principal_patterns);
	tcase_add_test(t, method_patterns);
	tcase_add_test(t, validation);
	tcase_add_test(t, rules_then_default);
	tcase_add_test(t, xfcc_element);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	SRunner *r = srunner_create(suite());
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
