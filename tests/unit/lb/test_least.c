/* LEAST_ACTIVE, LEAST_REQUEST, SHORTEST_RESPONSE: the chosen endpoint is
 * always a minimum of its cost; ties follow the weights (chi-square at
 * p = 0.001); exclusions and drained endpoints. The minimum tree itself
 * (mintree.c) at sizes around its groups of four: exact after every set,
 * a pick is a true minimum, ties in proportion to the tie weights. */
#include "config.h"

#include "lb-test.h"
#include "lb/lb-impl.h"

static Suite *least_suite(void);

static void set_active(struct t_set *s, size_t i, int64_t a)
{
	atomic_store(&t_live(&s->stats[i])->active, a);
}

START_TEST(least_active_always_minimum)
{
	struct t_set s;
	struct mtd_lb_picker *p;
	struct mtd_lb_pick_ctx ctx;

	t_set_init(&s, 20, NULL);
	p = t_picker("LEAST_ACTIVE", &s, NULL);
	ctx = t_ctx(&s);
	for (int round = 0; round < 2000; round++) {
		int64_t least = INT64_MAX;
		int i;

		if (round % 2 == 0) {
			/* Counts written behind the picker's back (another
			 * picker's calls): seen at the next tick (least.c). */
			for (size_t k = 0; k < s.n; k++)
				set_active(&s, k, (int64_t)(mtd_lb_rand(&s.rng) % 6));
			mtd_lb_tick(p, 1000000, 1000000000);
		} else {
			/* Calls through the picker: seen at once. */
			for (int c = 0; c < 8; c++) {
				size_t k = (size_t)(mtd_lb_rand(&s.rng) % s.n);
				struct mtd_lb_result ok = {.ok = true, .latency_us = 5};

				if (t_live(&s.stats[k])->active > 0 && mtd_lb_rand(&s.rng) % 2)
					mtd_lb_call_end(p, k, &ok, 1);
				else
					mtd_lb_call_begin(p, k);
			}
		}
		if (round % 3 == 0) {
			memset(s.excluded, 0, sizeof(s.excluded));
			t_exclude(&s, (size_t)(mtd_lb_rand(&s.rng) % s.n));
		}
		for (size_t k = 0; k < s.n; k++)
			if (!(s.excluded[k / 64] >> (k % 64) & 1) && t_live(&s.stats[k])->active < least)
				least = t_live(&s.stats[k])->active;
		i = mtd_lb_pick(p, &ctx);
		ck_assert_int_ge(i, 0);
		ck_assert_msg(!(s.excluded[i / 64] >> (i % 64) & 1), "excluded");
		ck_assert_int_eq(t_live(&s.stats[i])->active, least);
	}
	mtd_lb_picker_free(p);
	t_set_fini(&s);
}
END_TEST

START_TEST(least_active_sees_dearer_at_once)
{
	struct t_set s;
	struct mtd_lb_picker *p;
	struct mtd_lb_pick_ctx ctx;

	t_set_init(&s, 40, NULL);
	p = t_picker("LEAST_ACTIVE", &s, NULL);
	ctx = t_ctx(&s);
	/* Another picker's calls make all but two endpoints busy: the tree
	 * has not seen them, yet no pick may go to a busy one (least.c: a
	 * landing is checked and repaired). */
	for (size_t k = 0; k < s.n; k++)
		set_active(&s, k, k == 7 || k == 31 ? 0 : 3);
	for (int k = 0; k < 200; k++) {
		int i = mtd_lb_pick(p, &ctx);

		ck_assert_msg(i == 7 || i == 31, "picked %d", i);
	}
	mtd_lb_picker_free(p);
	t_set_fini(&s);
}
END_TEST

START_TEST(least_active_ties_weighted)
{
	int32_t w[4] = {100, 300, 600, 900};
	double share[4] = {0.1, 0.3, 0.6, 0};
	struct t_set s;
	struct mtd_lb_picker *p;

	t_set_init(&s, 4, w);
	set_active(&s, 3, 1); /* not a minimum: never picked */
	p = t_picker("LEAST_ACTIVE", &s, NULL);
	t_assert_shares(p, &s, share, 100000);
	mtd_lb_picker_free(p);
	t_set_fini(&s);
}
END_TEST

START_TEST(least_active_drained_and_all_excluded)
{
	int32_t w[3] = {0, 100, -1};
	struct t_set s;
	struct mtd_lb_picker *p;
	struct mtd_lb_pick_ctx ctx;

	t_set_init(&s, 3, w);
	set_active(&s, 1, 50); /* busy, but the only positive weight */
	p = t_picker("LEAST_ACTIVE", &s, NULL);
	ctx = t_ctx(&s);
	ck_assert_int_eq(mtd_lb_pick(p, &ctx), 1);
	t_exclude(&s, 1);
	for (int k = 0; k < 50; k++) {
		int i = mtd_lb_pick(p, &ctx);

		ck_assert(i == 0 || i == 2);
	}
	t_exclude(&s, 0);
	t_exclude(&s, 2);
	ck_assert_int_eq(mtd_lb_pick(p, &ctx), -1);
	mtd_lb_picker_free(p);
	t_set_fini(&s);
}
END_TEST

START_TEST(least_request_prefers_idle)
{
	struct t_set s;
	struct mtd_lb_picker *p;
	uint64_t counts[T_MAX_EPS];

	t_set_init(&s, 2, NULL);
	set_active(&s, 0, 10);
	p = t_picker("LEAST_REQUEST", &s, NULL);
	/* Two endpoints, two distinct choices: always the idle one. */
	t_count(p, &s, counts, 10000);
	ck_assert_uint_eq(counts[1], 10000);
	mtd_lb_picker_free(p);
	t_set_fini(&s);
}
END_TEST

START_TEST(least_request_never_worst_of_choices)
{
	struct t_set s;
	struct mtd_lb_config cfg;
	struct mtd_lb_picker *p;
	struct mtd_lb_pick_ctx ctx;
	uint64_t counts[T_MAX_EPS];
	double share[10];

	t_set_init(&s, 10, NULL);
	/* Endpoint k has k calls in flight. */
	for (size_t k = 0; k < 10; k++)
		set_active(&s, k, (int64_t)k);
	mtd_lb_config_defaults(&cfg, mtd_lb_find("LEAST_REQUEST"));
	cfg.choice_count = 10;
	p = mtd_lb_picker_new(&cfg, s.eps, s.n, NULL);
	ck_assert_ptr_nonnull(p);
	/* With 10 choices the most loaded is essentially never picked. */
	t_count(p, &s, counts, 10000);
	ck_assert_uint_lt(counts[9], 10);
	ck_assert_uint_gt(counts[0], counts[5]);
	mtd_lb_picker_free(p);

	/* Equal load: uniform (chi-square). */
	for (size_t k = 0; k < 10; k++) {
		set_active(&s, k, 3);
		share[k] = 0.1;
	}
	p = t_picker("LEAST_REQUEST", &s, NULL);
	t_assert_shares(p, &s, share, 100000);
	ctx = t_ctx(&s);
	for (size_t k = 0; k < 10; k++)
		t_exclude(&s, k);
	ck_assert_int_eq(mtd_lb_pick(p, &ctx), -1);
	mtd_lb_picker_free(p);
	t_set_fini(&s);
}
END_TEST

START_TEST(least_request_weights_under_load)
{
	int32_t w[2] = {300, 100};
	struct t_set s;
	struct mtd_lb_picker *p;
	struct mtd_lb_pick_ctx ctx;

	t_set_init(&s, 2, w);
	p = t_picker("LEAST_REQUEST", &s, NULL);
	ctx = t_ctx(&s);
	/* Calls that never end: in-flight counts settle where
	 * weight / (active + 1) levels, i.e. about 3:1. */
	for (int k = 0; k < 4000; k++) {
		int i = mtd_lb_pick(p, &ctx);

		ck_assert_int_ge(i, 0);
		mtd_lb_call_begin(p, (size_t)i);
	}
	ck_assert_int_ge(t_live(&s.stats[0])->active, 2990);
	ck_assert_int_le(t_live(&s.stats[0])->active, 3010);
	mtd_lb_picker_free(p);
	t_set_fini(&s);
}
END_TEST

START_TEST(shortest_response_minimum)
{
	struct t_set s;
	struct mtd_lb_picker *p;
	struct mtd_lb_pick_ctx ctx;
	/* avg latency per endpoint, and in-flight */
	static const uint64_t avg[4] = {100, 40, 30, 500};
	static const int64_t act[4] = {0, 1, 3, 0};

	t_set_init(&s, 4, NULL);
	for (size_t k = 0; k < 4; k++) {
		atomic_store(&t_live(&s.stats[k])->window_sum_us, avg[k] * 10);
		atomic_store(&t_live(&s.stats[k])->window_count, 10);
		set_active(&s, k, act[k]);
	}
	/* estimates: 100, 80, 120, 500 -> endpoint 1 */
	p = t_picker("SHORTEST_RESPONSE", &s, NULL);
	ctx = t_ctx(&s);
	for (int k = 0; k < 100; k++)
		ck_assert_int_eq(mtd_lb_pick(p, &ctx), 1);
	t_exclude(&s, 1);
	for (int k = 0; k < 100; k++)
		ck_assert_int_eq(mtd_lb_pick(p, &ctx), 0);
	mtd_lb_picker_free(p);
	t_set_fini(&s);
}
END_TEST

START_TEST(shortest_response_no_data_weighted)
{
	int32_t w[3] = {100, 100, 200};
	double share[3] = {0.25, 0.25, 0.5};
	struct t_set s;
	struct mtd_lb_picker *p;

	t_set_init(&s, 3, w);
	p = t_picker("SHORTEST_RESPONSE", &s, NULL);
	t_assert_shares(p, &s, share, 100000);
	mtd_lb_picker_free(p);
	t_set_fini(&s);
}
END_TEST

START_TEST(shortest_response_window_from_calls)
{
	struct t_set s;
	struct mtd_lb_picker *p;
	struct mtd_lb_pick_ctx ctx;
	struct mtd_lb_result fast = {.ok = true, .latency_us = 1000};
	struct mtd_lb_result slow = {.ok = true, .latency_us = 9000};

	t_set_init(&s, 2, NULL);
	p = t_picker("SHORTEST_RESPONSE", &s, NULL);
	for (int k = 0; k < 5; k++) {
		mtd_lb_call_begin(p, 0);
		mtd_lb_call_end(p, 0, &slow, 1000 + k);
		mtd_lb_call_begin(p, 1);
		mtd_lb_call_end(p, 1, &fast, 1000 + k);
	}
	ctx = t_ctx(&s);
	ck_assert_int_eq(mtd_lb_pick(p, &ctx), 1);
	/* 9 calls in flight on the fast one: 1000 x 10 > 9000 x 1. */
	set_active(&s, 1, 9);
	ck_assert_int_eq(mtd_lb_pick(p, &ctx), 0);
	mtd_lb_picker_free(p);
	t_set_fini(&s);
}
END_TEST

/* Sizes on both sides of the tree's group boundaries (4, 16, 64, 256) and
 * the bench's 1,000: one to six levels. */
static const size_t tree_sizes[] = {1, 2, 3, 4, 5, 15, 16, 17, 63, 64, 65, 255, 257, 1000};

START_TEST(mintree_minimum_and_exact)
{
	size_t n = tree_sizes[_i];
	struct mtd_lb__mintree t;
	uint32_t cost[1000], tw[1000];
	uint64_t rng = T_SEED + n;

	ck_assert_int_eq(mtd_lb__mintree_init(&t, n), 0);
	for (size_t i = 0; i < n; i++) {
		cost[i] = (uint32_t)(mtd_lb_rand(&rng) % 4);
		/* A few leaves are drained (tie weight 0: never picked). */
		tw[i] = mtd_lb_rand(&rng) % 10 == 0 && n > 1 ? 0 : 1 + (uint32_t)(mtd_lb_rand(&rng) % 1000);
		if (tw[i] > 0)
			atomic_init(&t.node[i], (uint64_t)cost[i] << 32 | tw[i]);
	}
	mtd_lb__mintree_build(&t);
	ck_assert(mtd_lb__mintree_consistent(&t));
	for (int round = 0; round < 300; round++) {
		uint32_t least = UINT32_MAX, seen;
		int i;

		/* A few leaves change (cost up or down), as begin/end do. */
		for (int c = 0; c < 4; c++) {
			size_t k = (size_t)(mtd_lb_rand(&rng) % n);

			cost[k] = (uint32_t)(mtd_lb_rand(&rng) % 4);
			if (tw[k] > 0)
				mtd_lb__mintree_set(&t, k, cost[k], tw[k]);
		}
		ck_assert(mtd_lb__mintree_consistent(&t));
		for (size_t k = 0; k < n; k++)
			if (tw[k] > 0 && cost[k] < least)
				least = cost[k];
		for (int k = 0; k < 20; k++) {
			i = mtd_lb__mintree_pick(&t, &rng, &seen);
			if (least == UINT32_MAX) {
				ck_assert_int_eq(i, -1);
				continue;
			}
			ck_assert_int_ge(i, 0);
			ck_assert_int_lt(i, (int)n);
			ck_assert_uint_gt(tw[i], 0);
			ck_assert_uint_eq(cost[i], least);
			ck_assert_uint_eq(seen, least);
		}
	}
	mtd_lb__mintree_free(&t);
}
END_TEST

START_TEST(mintree_ties_follow_tie_weights)
{
	/* 65 leaves (four levels, the last group holding one leaf): the 13
	 * of cost 0 spread over the groups, weights 1..13 x 10; the rest
	 * cost 1. */
	const size_t n = 65;
	struct mtd_lb__mintree t;
	uint64_t counts[65] = {0}, rng = T_SEED, picks = 200000;
	double share[65] = {0}, total = 0;
	uint32_t seen;

	ck_assert_int_eq(mtd_lb__mintree_init(&t, n), 0);
	for (size_t i = 0; i < n; i++) {
		bool tie = i % 5 == 0;

		atomic_init(&t.node[i], (uint64_t)(tie ? 0 : 1) << 32 | (uint32_t)(tie ? 10 * (i / 5 + 1) : 500));
		share[i] = tie ? 10.0 * (double)(i / 5 + 1) : 0.0;
		total += share[i];
	}
	mtd_lb__mintree_build(&t);
	for (size_t i = 0; i < n; i++)
		share[i] /= total;
	for (uint64_t k = 0; k < picks; k++) {
		int i = mtd_lb__mintree_pick(&t, &rng, &seen);

		ck_assert_int_ge(i, 0);
		ck_assert_uint_eq(seen, 0);
		counts[i]++;
	}
	ck_assert_double_lt(t_chi2(counts, share, n, picks), t_chi2_crit(12));
	mtd_lb__mintree_free(&t);
}
END_TEST

static Suite *least_suite(void)
{
	Suite *s = suite_create("lb_least");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, least_active_always_minimum);
	tcase_add_test(tc, least_active_sees_dearer_at_once);
	tcase_add_test(tc, least_active_ties_weighted);
	tcase_add_test(tc, least_active_drained_and_all_excluded);
	tcase_add_test(tc, least_request_prefers_idle);
	tcase_add_test(tc, least_request_never_worst_of_choices);
	tcase_add_test(tc, least_request_weights_under_load);
	tcase_add_test(tc, shortest_response_minimum);
	tcase_add_test(tc, shortest_response_no_data_weighted);
	tcase_add_test(tc, shortest_response_window_from_calls);
	tcase_add_loop_test(tc, mintree_minimum_and_exact, 0, (int)(sizeof(tree_sizes) / sizeof(tree_sizes[0])));
	tcase_add_test(tc, mintree_ties_follow_tie_weights);
	suite_add_tcase(s, tc);
	return s;
}

T_RUN(least_suite)
