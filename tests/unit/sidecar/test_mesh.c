/* The refusal log's gates (sidecar/ops/mesh.c): one line a second per
 * peer address, and a bounded log whatever the number of addresses. */
#include "config.h"

#include <check.h>
#include <stdio.h>

#include "sidecar/ops/mesh.h"

#define S 1000000000LL

/* mesh.c's rendering names refusals with transport.c's names; not here. */
const char *mtd_tls_refusal_name(enum mtd_tls_refusal why)
{
	(void)why;
	return "?";
}

START_TEST(one_line_a_second_per_address)
{
	uint64_t held = 0;
	int64_t t = 100 * S;
	ck_assert(mtd_mesh_refusal_log("10.1.1.1:1000", t, &held));
	ck_assert_uint_eq(held, 0);
	/* Another port of the same address: the same gate. */
	for (int i = 0; i < 5; i++)
		ck_assert(!mtd_mesh_refusal_log("10.1.1.1:1001", t + i, &held));
	ck_assert(mtd_mesh_refusal_log("10.1.1.1:1002", t + S, &held));
	ck_assert_uint_eq(held, 5);
}
END_TEST

/* Many source addresses (a scan): a bounded number of lines a second,
 * however many addresses, and the log comes back for each one later. */
START_TEST(many_addresses_cannot_flood_the_log)
{
	uint64_t held = 0;
	int64_t t = 200 * S;
	unsigned lines = 0;
	char addr[48];
	for (unsigned i = 0; i < 10000; i++) {
		snprintf(addr, sizeof(addr), "10.%u.%u.%u:443", i >> 16 & 255, i >> 8 & 255, i & 255);
		lines += mtd_mesh_refusal_log(addr, t + (int64_t)i * 1000, &held); /* 10 ms in all */
	}
	ck_assert_uint_le(lines, 16);
	ck_assert_uint_ge(lines, 1);
	/* The same flood over 3 s: at most 16 a second. */
	lines = 0;
	for (unsigned i = 0; i < 30000; i++) {
		snprintf(addr, sizeof(addr), "172.16.%u.%u:443", i >> 8 & 255, i & 255);
		lines += mtd_mesh_refusal_log(addr, t + 10 * S + (int64_t)i * 100000, &held);
	}
	ck_assert_uint_le(lines, 16 * 3 + 16);
	/* A second later, a known address has its line again. */
	ck_assert(mtd_mesh_refusal_log("192.0.2.1:1", t + 20 * S, &held));
}
END_TEST

static Suite *mesh_suite(void)
{
	Suite *s = suite_create("mesh");
	TCase *tc = tcase_create("refusal_log");
	tcase_add_test(tc, one_line_a_second_per_address);
	tcase_add_test(tc, many_addresses_cannot_flood_the_log);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(mesh_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
