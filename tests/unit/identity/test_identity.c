/* Unit tests for lib/identity: a certificate's identity from its SANs (the
 * X509-SVID rule, lengths, bytes), the typed text, and patterns matching
 * only identities of their type. */
#include "config.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "identity/identity.h"

#define CART "spiffe://cluster.local/ns/shop/sa/cart"

static struct mtd_san uri(const char *s)
{
	return (struct mtd_san){MTD_IDENTITY_URI, s, strlen(s)};
}

static struct mtd_san dns(const char *s)
{
	return (struct mtd_san){MTD_IDENTITY_DNS, s, strlen(s)};
}

START_TEST(of_sans_one_uri_else_first_dns)
{
	char out[MTD_IDENTITY_TEXT_SIZE];
	struct mtd_san a[] = {dns("cart.shop.svc"), uri(CART), dns("other.svc")};
	ck_assert_int_eq(mtd_identity_of_sans(a, 3, out, sizeof(out)), MTD_IDENTITY_HAS);
	ck_assert_str_eq(out, CART);
	struct mtd_san b[] = {dns("cart.shop.svc"), dns("other.svc")};
	ck_assert_int_eq(mtd_identity_of_sans(b, 2, out, sizeof(out)), MTD_IDENTITY_HAS);
	ck_assert_str_eq(out, "dns:cart.shop.svc");
	ck_assert_int_eq(mtd_identity_of_sans(NULL, 0, out, sizeof(out)), MTD_IDENTITY_NO_SAN);
	ck_assert_str_eq(out, "");
}
END_TEST

START_TEST(several_uri_sans_are_no_identity)
{
	char out[MTD_IDENTITY_TEXT_SIZE];
	struct mtd_san a[] = {uri(CART), dns("cart.shop.svc"), uri("spiffe://cluster.local/ns/pay/sa/api")};
	ck_assert_int_eq(mtd_identity_of_sans(a, 3, out, sizeof(out)), MTD_IDENTITY_SEVERAL_URIS);
	ck_assert_str_eq(out, "");
	/* Not even the DNS SAN: a certificate that breaks the rule has none. */
	ck_assert(!mtd_identity_match("*", out));
	ck_assert_str_ne(mtd_identity_none_text(MTD_IDENTITY_SEVERAL_URIS), "");
}
END_TEST

START_TEST(lengths_up_to_2048)
{
	char out[MTD_IDENTITY_TEXT_SIZE];
	static char id[MTD_IDENTITY_MAX + 2];
	memset(id, 'a', sizeof(id) - 1);
	memcpy(id, "spiffe://td/", 12);
	id[MTD_IDENTITY_MAX] = '\0'; /* exactly 2048 bytes: an identity */
	struct mtd_san a[] = {uri(id)};
	ck_assert_int_eq(mtd_identity_of_sans(a, 1, out, sizeof(out)), MTD_IDENTITY_HAS);
	ck_assert_str_eq(out, id);
	ck_assert(mtd_identity_match("spiffe://td/*", out));
	ck_assert(mtd_identity_equal(out, id));
	id[MTD_IDENTITY_MAX] = 'a'; /* 2049: none */
	id[MTD_IDENTITY_MAX + 1] = '\0';
	a[0] = uri(id);
	ck_assert_int_eq(mtd_identity_of_sans(a, 1, out, sizeof(out)), MTD_IDENTITY_TOO_LONG);
	ck_assert_str_eq(out, "");
	const char *why;
	ck_assert(!mtd_identity_ok(id, &why));
	/* A DNS name of 2048 bytes: "dns:" + 2048 fits the text buffer. */
	memset(id, 'b', MTD_IDENTITY_MAX);
	id[MTD_IDENTITY_MAX] = '\0';
	a[0] = dns(id);
	ck_assert_int_eq(mtd_identity_of_sans(a, 1, out, sizeof(out)), MTD_IDENTITY_HAS);
	ck_assert_uint_eq(strlen(out), MTD_IDENTITY_TEXT_MAX);
	ck_assert(mtd_identity_ok(out, &why));
	/* A buffer too small is no identity, never a truncated one. */
	char small[16];
	a[0] = uri(CART);
	ck_assert_int_eq(mtd_identity_of_sans(a, 1, small, sizeof(small)), MTD_IDENTITY_TOO_LONG);
	ck_assert_str_eq(small, "");
}
END_TEST

START_TEST(bad_sans)
{
	char out[MTD_IDENTITY_TEXT_SIZE];
	struct mtd_san a[1];
	a[0] = (struct mtd_san){MTD_IDENTITY_URI, "spiffe://x\0y", 12};
	ck_assert_int_eq(mtd_identity_of_sans(a, 1, out, sizeof(out)), MTD_IDENTITY_BAD_BYTES);
	a[0] = uri("spiffe://x y");
	ck_assert_int_eq(mtd_identity_of_sans(a, 1, out, sizeof(out)), MTD_IDENTITY_BAD_BYTES);
	/* A URI SAN in the dns: scheme would read as a DNS identity. */
	a[0] = uri("dns:cart.shop.svc");
	ck_assert_int_eq(mtd_identity_of_sans(a, 1, out, sizeof(out)), MTD_IDENTITY_NOT_A_URI);
	a[0] = uri("DNS:cart.shop.svc");
	ck_assert_int_eq(mtd_identity_of_sans(a, 1, out, sizeof(out)), MTD_IDENTITY_NOT_A_URI);
	a[0] = uri("no-scheme/at/all");
	ck_assert_int_eq(mtd_identity_of_sans(a, 1, out, sizeof(out)), MTD_IDENTITY_NOT_A_URI);
	a[0] = uri("");
	ck_assert_int_eq(mtd_identity_of_sans(a, 1, out, sizeof(out)), MTD_IDENTITY_BAD_BYTES);
}
END_TEST

START_TEST(types_never_cross)
{
	char out[MTD_IDENTITY_TEXT_SIZE];
	/* A DNS SAN spelled like a SPIFFE ID is a DNS identity. */
	struct mtd_san a[] = {dns(CART)};
	ck_assert_int_eq(mtd_identity_of_sans(a, 1, out, sizeof(out)), MTD_IDENTITY_HAS);
	ck_assert_str_eq(out, "dns:" CART);
	ck_assert_int_eq(mtd_identity_type(out), MTD_IDENTITY_DNS);
	ck_assert(!mtd_identity_match(CART, out));
	ck_assert(!mtd_identity_match("spiffe://cluster.local/*", out));
	ck_assert(!mtd_identity_equal(CART, out));
	ck_assert(mtd_identity_match("dns:" CART, out));
	ck_assert_str_eq(mtd_identity_value(out), CART);
	/* And a URI identity matches no dns: pattern. */
	ck_assert_int_eq(mtd_identity_type(CART), MTD_IDENTITY_URI);
	ck_assert(!mtd_identity_match("dns:*", CART));
	ck_assert(mtd_identity_match("*", CART));
	ck_assert(mtd_identity_match("*", "dns:cart.shop.svc"));
	ck_assert_str_eq(mtd_identity_value(CART), CART);
}
END_TEST

START_TEST(dns_patterns)
{
	ck_assert(mtd_identity_match("dns:cart.shop.svc", "dns:cart.shop.svc"));
	ck_assert(mtd_identity_match("dns:Cart.Shop.svc", "dns:cart.shop.SVC")); /* RFC 4343 */
	ck_assert(mtd_identity_match("DNS:cart.shop.svc", "dns:cart.shop.svc"));
	ck_assert(!mtd_identity_match("dns:cart.shop.svc", "dns:cart.shop.svcx"));
	ck_assert(mtd_identity_match("dns:cart.*", "dns:cart.shop.svc"));
	ck_assert(!mtd_identity_match("dns:pay.*", "dns:cart.shop.svc"));
	ck_assert(mtd_identity_match("dns:*", "dns:cart.shop.svc"));
	ck_assert(mtd_identity_equal("dns:cart.shop.svc", "DNS:CART.shop.svc"));
	ck_assert(!mtd_identity_equal("dns:cart.shop.svc", "cart.shop.svc"));
	/* An untyped DNS name is no identity at all (a record of an older
	 * maitred wrote one): it equals and matches nothing. */
	ck_assert_int_eq(mtd_identity_type("cart.shop.svc"), MTD_IDENTITY_NONE);
	ck_assert(!mtd_identity_match("*", "cart.shop.svc"));
	ck_assert(!mtd_identity_equal("cart.shop.svc", "cart.shop.svc"));
}
END_TEST

START_TEST(uri_patterns)
{
	ck_assert(mtd_identity_match(CART, CART));
	ck_assert(!mtd_identity_match(CART, CART "x"));
	ck_assert(mtd_identity_match("spiffe://cluster.local/ns/shop/*", CART));
	ck_assert(!mtd_identity_match("spiffe://cluster.local/ns/pay/*", CART));
	ck_assert(!mtd_identity_match(CART, NULL));
	ck_assert(!mtd_identity_match(CART, ""));
	ck_assert(!mtd_identity_match("*", ""));
	/* URIs compare exactly. */
	ck_assert(!mtd_identity_match("spiffe://cluster.local/ns/shop/sa/CART", CART));
}
END_TEST

START_TEST(validation)
{
	const char *why = NULL;
	ck_assert(mtd_identity_pattern_ok(CART, &why));
	ck_assert(mtd_identity_pattern_ok("spiffe://cluster.local/*", &why));
	ck_assert(mtd_identity_pattern_ok("*", &why));
	ck_assert(mtd_identity_pattern_ok("dns:*", &why));
	ck_assert(mtd_identity_pattern_ok("dns:cart.shop.svc", &why));
	ck_assert(!mtd_identity_pattern_ok("dns:", &why));
	ck_assert(!mtd_identity_pattern_ok("", &why));
	ck_assert(!mtd_identity_pattern_ok("spiffe://*/x", &why));
	ck_assert(!mtd_identity_pattern_ok("spiffe://a b", &why));
	ck_assert(!mtd_identity_pattern_ok("cart.shop.svc", &why)); /* untyped: say dns: */
	ck_assert_ptr_nonnull(strstr(why, "dns:"));
	ck_assert(!mtd_identity_pattern_ok("spiff*", &why));
	ck_assert(mtd_identity_ok(CART, &why));
	ck_assert(mtd_identity_ok("dns:cart.shop.svc", &why));
	ck_assert(!mtd_identity_ok("dns:", &why));
	ck_assert(!mtd_identity_ok("cart.shop.svc", &why));
	ck_assert(!mtd_identity_ok("", &why));
	ck_assert(!mtd_identity_ok(NULL, &why));
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("identity");
	TCase *t = tcase_create("core");
	tcase_add_test(t, of_sans_one_uri_else_first_dns);
	tcase_add_test(t, several_uri_sans_are_no_identity);
	tcase_add_test(t, lengths_up_to_2048);
	tcase_add_test(t, bad_sans);
	tcase_add_test(t, types_never_cross);
	tcase_add_test(t, dns_patterns);
	tcase_add_test(t, uri_patterns);
	tcase_add_test(t, validation);
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
