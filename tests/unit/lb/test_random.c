/* RANDOM and WEIGHTED_RANDOM: distributions (chi-square at p = 0.001, fixed
 * seed), exclusions, drained endpoints, n == 1. */
#include "config.h"

#include "lb-test.h"

static Suite *random_suite(void);

START_TEST(random_uniform_ignores_weights)
{
	int32_t w[4] = {100, 300, 50, 1000};
	double share[4] = {0.25, 0.25, 0.25, 0.25};
	struct t_set s;
	struct mtd_lb_picker *p;

	t_set_init(&s, 4, w);
	p = t_picker("RANDOM", &s, NULL);
	t_assert_shares(p, &s, share, 200000);
	mtd_lb_picker_free(p);
}
END_TEST

START_TEST(random_excluded_and_drained)
{
	int32_t w[5] = {100, 0, 100, -1, 100};
	double share[5] = {0.5, 0, 0, 0, 0.5};
	struct t_set s;
	struct mtd_lb_picker *p;
	struct mtd_lb_pick_ctx ctx;
	uint64_t counts[T_MAX_EPS];

	t_set_init(&s, 5, w);
	p = t_picker("RANDOM", &s, NULL);
	t_exclude(&s, 2);
	t_assert_shares(p, &s, share, 100000);
	t_exclude(&s, 0);
	t_exclude(&s, 4);
	/* Only drained ones left: they serve, evenly. */
	t_count(p, &s, counts, 10000);
	ck_assert_uint_eq(counts[1] + counts[3], 10000);
	ck_assert_uint_gt(counts[1], 4500);
	ck_assert_uint_gt(counts[3], 4500);
	t_exclude(&s, 1);
	t_exclude(&s, 3);
	ctx = t_ctx(&s);
	ck_assert_int_eq(mtd_lb_pick(p, &ctx), -1);
	mtd_lb_picker_free(p);
}
END_TEST

START_TEST(weighted_shares)
{
	int32_t w[4] = {100, 200, 300, 400};
	double share[4] = {0.1, 0.2, 0.3, 0.4};
	struct t_set s;
	struct mtd_lb_picker *p;

	t_set_init(&s, 4, w);
	p = t_picker("WEIGHTED_RANDOM", &s, NULL);
	t_assert_shares(p, &s, share, 200000);
	mtd_lb_picker_free(p);
}
END_TEST

START_TEST(weighted_equal_is_uniform)
{
	double share[10];
	struct t_set s;
	struct mtd_lb_picker *p;

	t_set_init(&s, 10, NULL);
	for (int i = 0; i < 10; i++)
		share[i] = 0.1;
	p = t_picker("WEIGHTED_RANDOM", &s, NULL);
	t_assert_shares(p, &s, share, 200000);
	mtd_lb_picker_free(p);
}
END_TEST

START_TEST(weighted_zero_negative_and_excluded)
{
	int32_t w[5] = {100, 0, 300, -7, 600};
	double share[5] = {0.1, 0, 0.3, 0, 0.6};
	double share_ex[5] = {0.25, 0, 0.75, 0, 0};
	struct t_set s;
	struct mtd_lb_picker *p;
	struct mtd_lb_pick_ctx ctx;

	t_set_init(&s, 5, w);
	p = t_picker("WEIGHTED_RANDOM", &s, NULL);
	t_assert_shares(p, &s, share, 200000);
	/* Excluding the heaviest renormalises over the rest. */
	t_exclude(&s, 4);
	t_assert_shares(p, &s, share_ex, 200000);
	for (int i = 0; i < 5; i++)
		t_exclude(&s, (size_t)i);
	ctx = t_ctx(&s);
	ck_assert_int_eq(mtd_lb_pick(p, &ctx), -1);
	mtd_lb_picker_free(p);
}
END_TEST

START_TEST(weighted_all_zero_is_uniform)
{
	int32_t w[3] = {0, 0, -3};
	double share[3] = {1 / 3.0, 1 / 3.0, 1 / 3.0};
	struct t_set s;
	struct mtd_lb_picker *p;

	t_set_init(&s, 3, w);
	p = t_picker("WEIGHTED_RANDOM", &s, NULL);
	t_assert_shares(p, &s, share, 60000);
	mtd_lb_picker_free(p);
}
END_TEST

START_TEST(single)
{
	static const char *const names[] = {"RANDOM", "WEIGHTED_RANDOM"};
	struct t_set s;

	for (size_t k = 0; k < 2; k++) {
		struct mtd_lb_picker *p;
		struct mtd_lb_pick_ctx ctx;

		t_set_init(&s, 1, NULL);
		p = t_picker(names[k], &s, NULL);
		ctx = t_ctx(&s);
		for (int i = 0; i < 100; i++)
			ck_assert_int_eq(mtd_lb_pick(p, &ctx), 0);
		t_exclude(&s, 0);
		ck_assert_int_eq(mtd_lb_pick(p, &ctx), -1);
		mtd_lb_picker_free(p);
	}
}
END_TEST

static Suite *random_suite(void)
{
	Suite *s = suite_create("lb_random");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, random_uniform_ignores_weights);
	tcase_add_test(tc, random_excluded_and_drained);
	tcase_add_test(tc, weighted_shares);
	tcase_add_test(tc, weighted_equal_is_uniform);
	tcase_add_test(tc, weighted_zero_negative_and_excluded);
	tcase_add_test(tc, weighted_all_zero_is_uniform);
	tcase_add_test(tc, single);
	suite_add_tcase(s, tc);
	return s;
}

T_RUN(random_suite)
