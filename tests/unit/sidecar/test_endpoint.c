/* An endpoint identity's one allocation (sidecar/control/endpoint.c,
 * runtime-t.h struct mtd_endpoint): its address read back as it was given
 * (sockaddr of the family's length, text, host stored only when the text
 * does not hold it), its registry key and identity out of line and absent
 * when it has neither, what it refuses, and its size (glibc's 112-byte
 * chunk for an IPv4 address of up to 24 bytes of text). */
#include "config.h"

#include <arpa/inet.h>
#include <check.h>
#include <malloc.h>
#include <string.h>

#include "sidecar/control/runtime.h"

static struct mtd_disc_endpoint v4(const char *text, const char *ip, uint16_t port)
{
	struct mtd_disc_endpoint d = {.address = text, .salen = sizeof(struct sockaddr_in)};
	struct sockaddr_in *in = (struct sockaddr_in *)&d.sa;
	in->sin_family = AF_INET;
	in->sin_port = htons(port);
	ck_assert_int_eq(inet_pton(AF_INET, ip, &in->sin_addr), 1);
	return d;
}

START_TEST(ipv4_without_names)
{
	struct mtd_disc_endpoint d = v4("127.3.250.250:9", "127.3.250.250", 9);
	struct mtd_endpoint *ep = mtd_endpoint_new(&d, NULL, 2, 1234);
	char buf[64];
	ck_assert_ptr_nonnull(ep);
	ck_assert_uint_eq(atomic_load(&ep->ref.n), 1);
	ck_assert_uint_eq(ep->n_slots, 2);
	ck_assert_int_eq(ep->start_ms, 1234);
	ck_assert_str_eq(mtd_endpoint_text(ep), "127.3.250.250:9");
	ck_assert_uint_eq(mtd_endpoint_salen(ep), sizeof(struct sockaddr_in));
	ck_assert_int_eq(memcmp(mtd_endpoint_sa(ep), &d.sa, sizeof(struct sockaddr_in)), 0);
	ck_assert(!ep->own_host);
	ck_assert_str_eq(mtd_endpoint_host(ep, buf, sizeof(buf)), "127.3.250.250");
	ck_assert_str_eq(mtd_endpoint_host(ep, buf, 4), "127"); /* cut to fit */
	ck_assert_ptr_null(ep->names);
	ck_assert_ptr_null(mtd_endpoint_key(ep));
	ck_assert_ptr_null(mtd_endpoint_identity(ep));
	/* The size the mesh pays for: 64 bytes, the chunk 112 with the
	 * address (16 B of sockaddr, 16 B of text); a growth of the struct
	 * fails here. */
	ck_assert_uint_eq(sizeof(*ep), 64);
	ck_assert_uint_eq(sizeof(ep->stats), 8);
	ck_assert_uint_le(malloc_usable_size(ep), 104);
	mtd_endpoint_free(ep);
}
END_TEST

/* A pod address as a mesh's control plane sends it, its longest IPv4
 * form of a 5-digit port or less ("10.244.123.234:18080" has 21 bytes
 * with its NUL): the same 112-byte chunk (ORCA's out-of-band state in
 * the report state, the reclaim link sharing returned_ms's word; 80
 * bytes of struct took the 128-byte chunk). */
START_TEST(pod_address_fits_the_112_byte_chunk)
{
	struct mtd_disc_endpoint d = v4("10.244.123.234:18080", "10.244.123.234", 18080);
	struct mtd_endpoint *ep = mtd_endpoint_new(&d, NULL, 2, 1);
	ck_assert_ptr_nonnull(ep);
	ck_assert_str_eq(mtd_endpoint_text(ep), "10.244.123.234:18080");
	ck_assert_uint_le(malloc_usable_size(ep), 104);
	ck_assert_ptr_null(atomic_load(&ep->pools)); /* no pool: no slots, no bits */
	mtd_endpoint_free(ep);
}
END_TEST

START_TEST(ipv6_and_its_host)
{
	struct mtd_disc_endpoint d = {.address = "[2001:db8::7]:443", .salen = sizeof(struct sockaddr_in6)};
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&d.sa;
	in6->sin6_family = AF_INET6;
	in6->sin6_port = htons(443);
	in6->sin6_scope_id = 3;
	ck_assert_int_eq(inet_pton(AF_INET6, "2001:db8::7", &in6->sin6_addr), 1);
	struct mtd_endpoint *ep = mtd_endpoint_new(&d, NULL, 0, 5);
	char buf[64];
	ck_assert_ptr_nonnull(ep);
	ck_assert_uint_eq(ep->n_slots, 1); /* at least one */
	ck_assert_uint_eq(mtd_endpoint_salen(ep), sizeof(struct sockaddr_in6));
	ck_assert_int_eq(memcmp(mtd_endpoint_sa(ep), &d.sa, sizeof(struct sockaddr_in6)), 0);
	ck_assert_str_eq(mtd_endpoint_text(ep), "[2001:db8::7]:443");
	ck_assert_str_eq(mtd_endpoint_host(ep, buf, sizeof(buf)), "2001:db8::7");
	mtd_endpoint_free(ep);
}
END_TEST

/* A host given: stored only when it is not the text's (a DNS service's
 * name); the text's own is not stored twice. */
START_TEST(host_stored_only_when_another)
{
	struct mtd_disc_endpoint d = v4("10.0.0.1:50051", "10.0.0.1", 50051);
	char buf[64];
	struct mtd_endpoint *same = mtd_endpoint_new(&d, "10.0.0.1", 1, 1);
	struct mtd_endpoint *named = mtd_endpoint_new(&d, "cart.shop.svc", 1, 1);
	struct mtd_endpoint *prefix = mtd_endpoint_new(&d, "10.0.0.10", 1, 1);
	ck_assert_ptr_nonnull(same);
	ck_assert_ptr_nonnull(named);
	ck_assert_ptr_nonnull(prefix);
	ck_assert(!same->own_host);
	ck_assert(named->own_host);
	ck_assert(prefix->own_host);
	ck_assert_str_eq(mtd_endpoint_host(same, buf, sizeof(buf)), "10.0.0.1");
	ck_assert_str_eq(mtd_endpoint_host(named, buf, sizeof(buf)), "cart.shop.svc");
	ck_assert_ptr_ne(mtd_endpoint_host(named, buf, sizeof(buf)), buf); /* its own copy */
	ck_assert_str_eq(mtd_endpoint_host(prefix, buf, sizeof(buf)), "10.0.0.10");
	ck_assert_str_eq(mtd_endpoint_text(named), "10.0.0.1:50051");
	mtd_endpoint_free(same);
	mtd_endpoint_free(named);
	mtd_endpoint_free(prefix);
}
END_TEST

START_TEST(registry_names)
{
	struct mtd_disc_endpoint d = v4("10.0.0.2:80", "10.0.0.2", 80);
	d.key = "/svc/a/1";
	d.identity = "spiffe://td/a";
	d.start_ms = 77;
	struct mtd_endpoint *both = mtd_endpoint_new(&d, NULL, 1, 1);
	d.identity = ""; /* none */
	struct mtd_endpoint *key = mtd_endpoint_new(&d, NULL, 1, 1);
	d.key = NULL;
	d.identity = "spiffe://td/b";
	struct mtd_endpoint *id = mtd_endpoint_new(&d, NULL, 1, 1);
	d.identity = "";
	struct mtd_endpoint *none = mtd_endpoint_new(&d, NULL, 1, 1);
	ck_assert_ptr_nonnull(both);
	ck_assert_ptr_nonnull(key);
	ck_assert_ptr_nonnull(id);
	ck_assert_ptr_nonnull(none);
	ck_assert_int_eq(both->start_ms, 77); /* the record's start */
	ck_assert_str_eq(mtd_endpoint_key(both), "/svc/a/1");
	ck_assert_str_eq(mtd_endpoint_identity(both), "spiffe://td/a");
	ck_assert_str_eq(mtd_endpoint_key(key), "/svc/a/1");
	ck_assert_ptr_null(mtd_endpoint_identity(key));
	ck_assert_ptr_null(mtd_endpoint_key(id));
	ck_assert_str_eq(mtd_endpoint_identity(id), "spiffe://td/b");
	ck_assert_ptr_null(none->names);
	mtd_endpoint_free(both);
	mtd_endpoint_free(key);
	mtd_endpoint_free(id);
	mtd_endpoint_free(none);
}
END_TEST

START_TEST(refused)
{
	struct mtd_disc_endpoint d = v4("10.0.0.3", "10.0.0.3", 80); /* no port */
	ck_assert_ptr_null(mtd_endpoint_new(&d, NULL, 1, 1));
	d = v4("10.0.0.3:80", "10.0.0.3", 80);
	d.sa.ss_family = AF_UNIX;
	ck_assert_ptr_null(mtd_endpoint_new(&d, NULL, 1, 1));
	d = v4("10.0.0.3:80", "10.0.0.3", 80);
	d.salen = 8; /* shorter than its family's */
	ck_assert_ptr_null(mtd_endpoint_new(&d, NULL, 1, 1));
}
END_TEST

static Suite *endpoint_suite(void)
{
	Suite *s = suite_create("endpoint");
	TCase *tc = tcase_create("layout");
	tcase_add_test(tc, ipv4_without_names);
	tcase_add_test(tc, pod_address_fits_the_112_byte_chunk);
	tcase_add_test(tc, ipv6_and_its_host);
	tcase_add_test(tc, host_stored_only_when_another);
	tcase_add_test(tc, registry_names);
	tcase_add_test(tc, refused);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(endpoint_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
