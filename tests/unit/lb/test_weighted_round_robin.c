/* WEIGHTED_ROUND_ROBIN and SMOOTH_WEIGHTED_ROUND_ROBIN: exact shares per
 * cycle, the nginx sequence, interleaving (no long runs), health cut and
 * recovery, per-worker rows, exclusions, weights 0/negative. */
#include "config.h"

#include <inttypes.h>

#include "lb-test.h"
#include "lb/lb-impl.h"

static Suite *wrr_suite(void);

/* Longest run of one endpoint in picks[0..n) read cyclically. */
static size_t longest_run(const int *picks, size_t n)
{
	size_t best = 0;

	for (size_t i = 0; i < n; i++) {
		size_t r = 1;

		while (r < n && picks[(i + r) % n] == picks[i])
			r++;
		if (r > best)
			best = r;
	}
	return best;
}

START_TEST(wrr_exact_cycle_and_interleaved)
{
	int32_t w[3] = {500, 100, 100}; /* gcd 100: cycle of 7 */
	struct t_set s;
	struct mtd_lb_picker *p;
	struct mtd_lb_pick_ctx ctx;
	int picks[7];
	uint64_t counts[T_MAX_EPS];

	t_set_init(&s, 3, w);
	p = t_picker("WEIGHTED_ROUND_ROBIN", &s, NULL);
	ctx = t_ctx(&s);
	for (int k = 0; k < 7; k++)
		picks[k] = mtd_lb_pick(p, &ctx);
	/* Any 7 consecutive picks are one whole cycle: 5 a, 1 b, 1 c... */
	memset(counts, 0, sizeof(counts));
	for (int k = 0; k < 7; k++)
		counts[picks[k]]++;
	ck_assert_uint_eq(counts[0], 5);
	ck_assert_uint_eq(counts[1], 1);
	ck_assert_uint_eq(counts[2], 1);
	/* ...and never more than 4 a in a row, across cycle boundaries
	 * (a burst scheduler would send 5). */
	ck_assert_uint_le(longest_run(picks, 7), 4);
	t_count(p, &s, counts, 7000);
	ck_assert_uint_eq(counts[0], 5000);
	ck_assert_uint_eq(counts[1], 1000);
	ck_assert_uint_eq(counts[2], 1000);
	mtd_lb_picker_free(p);
}
END_TEST

START_TEST(wrr_many_weights)
{
	int32_t w[50];
	struct t_set s;
	struct mtd_lb_picker *p;
	uint64_t counts[T_MAX_EPS];
	uint64_t total = 0;

	for (int i = 0; i < 50; i++) {
		w[i] = 1 + (i * 37) % 97;
		total += (uint64_t)w[i];
	}
	t_set_init(&s, 50, w);
	p = t_picker("WEIGHTED_ROUND_ROBIN", &s, NULL);
	t_count(p, &s, counts, total * 3);
	for (int i = 0; i < 50; i++)
		ck_assert_uint_eq(counts[i], 3 * (uint64_t)w[i]);
	mtd_lb_picker_free(p);
}
END_TEST

/* Equal weights (a cycle built without the heap): one turn each, in
 * index order, those of weight 0 skipped; as the weighted layouts give. */
START_TEST(wrr_equal_weights_in_index_order)
{
	int32_t w[5] = {7, 7, 0, 7, 7};
	static const int next[5] = {1, 3, -1, 4, 0};
	struct t_set s;
	struct mtd_lb_picker *p;
	struct mtd_lb_pick_ctx ctx;
	int prev;

	t_set_init(&s, 5, w);
	p = t_picker("WEIGHTED_ROUND_ROBIN", &s, NULL);
	ctx = t_ctx(&s);
	prev = mtd_lb_pick(p, &ctx);
	for (int k = 0; k < 12; k++) {
		int i = mtd_lb_pick(p, &ctx);
		ck_assert_int_eq(i, next[prev]);
		prev = i;
	}
	mtd_lb_picker_free(p);
}
END_TEST

/* Every endpoint of one weight, none drained (a discovered set: no cycle
 * stored, the turn is the index): one turn each in index order, an
 * excluded one's turn to the next, the same when every one is drained
 * (all of weight 1 then), and exact shares over a large set. */
START_TEST(wrr_every_endpoint_one_turn)
{
	static int32_t w[1000];
	static struct t_set s;
	struct mtd_lb_picker *p;
	struct mtd_lb_pick_ctx ctx;
	static uint64_t counts[T_MAX_EPS];
	int prev;

	for (int i = 0; i < 5; i++)
		w[i] = 5;
	t_set_init(&s, 5, w);
	p = t_picker("WEIGHTED_ROUND_ROBIN", &s, NULL);
	ctx = t_ctx(&s);
	prev = mtd_lb_pick(p, &ctx);
	for (int k = 0; k < 12; k++) {
		int i = mtd_lb_pick(p, &ctx);
		ck_assert_int_eq(i, (prev + 1) % 5);
		prev = i;
	}
	/* Turn k still goes to endpoint k, but turn 2 to the next one. */
	t_exclude(&s, 2);
	ctx = t_ctx(&s);
	for (int k = 0, turn = prev; k < 12; k++) {
		int i = mtd_lb_pick(p, &ctx);
		turn = (turn + 1) % 5;
		ck_assert_int_eq(i, turn == 2 ? 3 : turn);
	}
	mtd_lb_picker_free(p);

	for (int i = 0; i < 3; i++)
		w[i] = 0;
	t_set_init(&s, 3, w);
	p = t_picker("WEIGHTED_ROUND_ROBIN", &s, NULL);
	ctx = t_ctx(&s);
	prev = mtd_lb_pick(p, &ctx);
	for (int k = 0; k < 6; k++) {
		int i = mtd_lb_pick(p, &ctx);
		ck_assert_int_eq(i, (prev + 1) % 3);
		prev = i;
	}
	mtd_lb_picker_free(p);

	for (int i = 0; i < 1000; i++)
		w[i] = 40;
	t_set_init(&s, 1000, w);
	p = t_picker("WEIGHTED_ROUND_ROBIN", &s, NULL);
	t_count(p, &s, counts, 3000);
	for (int i = 0; i < 1000; i++)
		ck_assert_uint_eq(counts[i], 3);
	mtd_lb_picker_free(p);
}
END_TEST

/* A large set of unequal weights (a cycle of about 100,000 turns over
 * 1,000 endpoints, past the smooth layout's budget) has no cycle: the
 * picks' Weyl points over the cumulative weights still give each endpoint
 * its weight's share within a few calls, none to a drained one, and an
 * excluded one's turns to others. */
START_TEST(wrr_large_set_without_a_cycle)
{
	static int32_t w[1000];
	static struct t_set s;
	struct mtd_lb_picker *p;
	static uint64_t counts[T_MAX_EPS];
	uint64_t total = 0, worst = 0;

	for (int i = 0; i < 1000; i++) {
		w[i] = i % 100 == 7 ? 0 : 50 + (i * 37) % 101;
		total += (uint64_t)w[i];
	}
	t_set_init(&s, 1000, w);
	p = t_picker("WEIGHTED_ROUND_ROBIN", &s, NULL);
	t_count(p, &s, counts, total * 2);
	for (int i = 0; i < 1000; i++) {
		uint64_t want = 2 * (uint64_t)w[i], d = counts[i] > want ? counts[i] - want : want - counts[i];
		if (d > worst)
			worst = d;
	}
	ck_assert_msg(worst <= 3, "an endpoint's count is %" PRIu64 " calls off its share", worst);
	for (int i = 7; i < 1000; i += 100)
		ck_assert_uint_eq(counts[i], 0);
	t_exclude(&s, 0);
	t_count(p, &s, counts, total);
	ck_assert_uint_eq(counts[0], 0);
	mtd_lb_picker_free(p);
}
END_TEST

/* Weights whose sum, the gcd taken out, is the number of endpoints while
 * some are drained (2:0:1, 3:1:0:0) are no set of one turn each: a drained
 * endpoint gets none, the others their weight's share. */
START_TEST(wrr_drained_sum_equal_to_count)
{
	int32_t w3[3] = {200, 0, 100}, w4[4] = {30, 10, 0, 0};
	struct t_set s;
	struct mtd_lb_picker *p;
	uint64_t counts[T_MAX_EPS];

	t_set_init(&s, 3, w3);
	p = t_picker("WEIGHTED_ROUND_ROBIN", &s, NULL);
	t_count(p, &s, counts, 3000);
	ck_assert_uint_eq(counts[0], 2000);
	ck_assert_uint_eq(counts[1], 0);
	ck_assert_uint_eq(counts[2], 1000);
	mtd_lb_picker_free(p);

	t_set_init(&s, 4, w4);
	p = t_picker("WEIGHTED_ROUND_ROBIN", &s, NULL);
	t_count(p, &s, counts, 4000);
	ck_assert_uint_eq(counts[0], 3000);
	ck_assert_uint_eq(counts[1], 1000);
	ck_assert_uint_eq(counts[2] + counts[3], 0);
	mtd_lb_picker_free(p);
}
END_TEST

START_TEST(wrr_zero_and_excluded)
{
	int32_t w[4] = {200, 0, 100, -2};
	struct t_set s;
	struct mtd_lb_picker *p;
	struct mtd_lb_pick_ctx ctx;
	uint64_t counts[T_MAX_EPS];

	t_set_init(&s, 4, w);
	p = t_picker("WEIGHTED_ROUND_ROBIN", &s, NULL);
	t_count(p, &s, counts, 3000);
	ck_assert_uint_eq(counts[0], 2000);
	ck_assert_uint_eq(counts[2], 1000);
	ck_assert_uint_eq(counts[1] + counts[3], 0);
	t_exclude(&s, 0);
	t_count(p, &s, counts, 3000);
	ck_assert_uint_eq(counts[2], 3000);
	t_exclude(&s, 2);
	t_count(p, &s, counts, 1000);
	ck_assert_uint_eq(counts[1] + counts[3], 1000);
	t_exclude(&s, 1);
	t_exclude(&s, 3);
	ctx = t_ctx(&s);
	ck_assert_int_eq(mtd_lb_pick(p, &ctx), -1);
	mtd_lb_picker_free(p);
}
END_TEST

START_TEST(swrr_nginx_sequence)
{
	int32_t w[3] = {5, 1, 1};
	static const int want[14] = {0, 0, 1, 0, 2, 0, 0, 0, 0, 1, 0, 2, 0, 0};
	struct t_set s;
	struct mtd_lb_picker *p;
	struct mtd_lb_pick_ctx ctx;

	t_set_init(&s, 3, w);
	p = t_picker("SMOOTH_WEIGHTED_ROUND_ROBIN", &s, NULL);
	ctx = t_ctx(&s);
	/* a a b a c a a, twice */
	for (int k = 0; k < 14; k++)
		ck_assert_int_eq(mtd_lb_pick(p, &ctx), want[k]);
	mtd_lb_picker_free(p);
}
END_TEST

START_TEST(swrr_workers_share_the_sequence)
{
	int32_t w[3] = {5, 1, 1};
	static const int want[14] = {0, 0, 1, 0, 2, 0, 0, 0, 0, 1, 0, 2, 0, 0};
	struct t_set s;
	struct mtd_lb_config cfg;
	struct mtd_lb_picker *p;
	struct mtd_lb_pick_ctx c0, c1;

	t_set_init(&s, 3, w);
	mtd_lb_config_defaults(&cfg, mtd_lb_find("SMOOTH_WEIGHTED_ROUND_ROBIN"));
	cfg.n_workers = 2;
	p = mtd_lb_picker_new(&cfg, s.eps, s.n, NULL);
	ck_assert_ptr_nonnull(p);
	c0 = t_ctx(&s);
	c1 = t_ctx(&s);
	c1.worker = 1;
	/* Interleaved picks of two workers walk one global sequence. */
	for (int k = 0; k < 14; k += 2) {
		ck_assert_int_eq(mtd_lb_pick(p, &c0), want[k]);
		ck_assert_int_eq(mtd_lb_pick(p, &c1), want[k + 1]);
	}
	mtd_lb_picker_free(p);
}
END_TEST

/* nginx's loop, verbatim in spirit: the reference the cycle must equal. */
static void nginx_sequence(const int32_t *w, size_t n, int *out, size_t len)
{
	int64_t cur[T_MAX_EPS] = {0};

	for (size_t k = 0; k < len; k++) {
		int64_t total = 0;
		int best = -1;

		for (size_t i = 0; i < n; i++) {
			if (w[i] <= 0)
				continue;
			cur[i] += w[i];
			total += w[i];
			if (best < 0 || cur[i] > cur[best])
				best = (int)i;
		}
		cur[best] -= total;
		out[k] = best;
	}
}

START_TEST(swrr_cycle_is_nginx_sequence)
{
	static int want[4 * 150 * T_MAX_EPS / 8];
	static const size_t sizes[] = {2, 3, 7, 10, 64, 200, 1000};
	uint64_t rng = T_SEED;

	for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
		for (int variant = 0; variant < 3; variant++) {
			size_t n = sizes[z], len = 0;
			int32_t w[T_MAX_EPS];
			struct t_set s;
			struct mtd_lb_picker *p;
			struct mtd_lb_pick_ctx ctx;

			for (size_t i = 0; i < n; i++) {
				/* equal; few distinct with a common factor; 1..150 with zeros */
				if (variant == 0)
					w[i] = 100;
				else if (variant == 1)
					w[i] = (int32_t)(10 * (1 + mtd_lb_rand(&rng) % 4));
				else
					w[i] = (int32_t)(mtd_lb_rand(&rng) % 151);
				len += w[i] > 0 ? (size_t)w[i] : 0;
			}
			if (len == 0) {
				w[0] = 1;
				len = 1;
			}
			len = len * 2 > sizeof(want) / sizeof(want[0]) ? sizeof(want) / sizeof(want[0]) : len * 2;
			nginx_sequence(w, n, want, len);
			t_set_init(&s, n, w);
			p = t_picker("SMOOTH_WEIGHTED_ROUND_ROBIN", &s, NULL);
			ck_assert(mtd_lb__swrr_exact(p->state));
			ctx = t_ctx(&s);
			for (size_t k = 0; k < len; k++)
				ck_assert_msg(mtd_lb_pick(p, &ctx) == want[k], "n %zu variant %d pick %zu", n, variant, k);
			mtd_lb_picker_free(p);
		}
	}
}
END_TEST

START_TEST(swrr_failure_shares_follow_health)
{
	int32_t w[4] = {100, 200, 300, 400};
	double share[4];
	struct t_set s;
	struct mtd_lb_picker *p;
	struct mtd_lb_result fail = {.ok = false, .latency_us = 10};
	uint64_t counts[T_MAX_EPS];

	t_set_init(&s, 4, w);
	p = t_picker("SMOOTH_WEIGHTED_ROUND_ROBIN", &s, NULL);
	/* One failure on 3 (health 3/4), three on 1 (1/4). */
	mtd_lb_call_begin(p, 3);
	mtd_lb_call_end(p, 3, &fail, 1);
	for (int k = 0; k < 3; k++) {
		mtd_lb_call_begin(p, 1);
		mtd_lb_call_end(p, 1, &fail, 1);
	}
	/* Effective 100, 50, 300, 300 of 750: deterministic thinning keeps
	 * the shares within a few picks of exact. */
	share[0] = 100.0 / 750;
	share[1] = 50.0 / 750;
	share[2] = 300.0 / 750;
	share[3] = 300.0 / 750;
	t_count(p, &s, counts, 75000);
	for (size_t i = 0; i < 4; i++)
		ck_assert_msg(fabs((double)counts[i] - share[i] * 75000) <= 20, "endpoint %zu: %llu", i,
		              (unsigned long long)counts[i]);
	mtd_lb_picker_free(p);
	t_set_fini(&s);
}
END_TEST

/* A new set keeps the health of the endpoints that stay (matched by their
 * stats, wherever they are in the new set); a new one starts healthy. */
START_TEST(swrr_health_follows_the_endpoint_into_a_new_set)
{
	int32_t w[3] = {100, 100, 100};
	struct t_set s, s2;
	struct mtd_lb_picker *p, *q;
	struct mtd_lb_config cfg;
	uint64_t counts[T_MAX_EPS];
	struct mtd_lb_result fail = {.ok = false, .latency_us = 10};

	t_set_init(&s, 2, w);
	p = t_picker("SMOOTH_WEIGHTED_ROUND_ROBIN", &s, NULL);
	for (int k = 0; k < 6; k++) { /* endpoint 1 cut to no traffic */
		mtd_lb_call_begin(p, 1);
		mtd_lb_call_end(p, 1, &fail, 1);
	}
	t_count(p, &s, counts, 100);
	ck_assert_uint_eq(counts[1], 0);
	/* The new set: endpoint 1 first, then 0, then a new one. */
	t_set_init(&s2, 3, w);
	s2.eps[0].stats = &s.stats[1];
	s2.eps[1].stats = &s.stats[0];
	mtd_lb_config_defaults(&cfg, mtd_lb_find("SMOOTH_WEIGHTED_ROUND_ROBIN"));
	q = mtd_lb_picker_new(&cfg, s2.eps, 3, p);
	ck_assert_ptr_nonnull(q);
	t_count(q, &s2, counts, 1000);
	ck_assert_uint_eq(counts[0], 0);
	ck_assert_uint_eq(counts[1], 500);
	ck_assert_uint_eq(counts[2], 500);
	mtd_lb_picker_free(q);
	mtd_lb_picker_free(p);
	t_set_fini(&s2);
	t_set_fini(&s);
}
END_TEST

START_TEST(swrr_failure_cut_and_recovery)
{
	int32_t w[2] = {100, 100};
	struct t_set s;
	struct mtd_lb_picker *p;
	uint64_t counts[T_MAX_EPS];
	struct mtd_lb_result fail = {.ok = false, .latency_us = 10};

	t_set_init(&s, 2, w);
	p = t_picker("SMOOTH_WEIGHTED_ROUND_ROBIN", &s, NULL);
	t_count(p, &s, counts, 1000);
	ck_assert_uint_eq(counts[0], 500);
	/* Two failures halve endpoint 1's effective weight: 2:1. */
	mtd_lb_call_begin(p, 1);
	mtd_lb_call_end(p, 1, &fail, 1);
	mtd_lb_call_begin(p, 1);
	mtd_lb_call_end(p, 1, &fail, 2);
	t_count(p, &s, counts, 3000);
	/* (smooth WRR: +-2 from carried current weights) */
	ck_assert_uint_ge(counts[0], 1998);
	ck_assert_uint_le(counts[0], 2002);
	/* Four more: no traffic until it recovers. */
	for (int k = 0; k < 4; k++) {
		mtd_lb_call_begin(p, 1);
		mtd_lb_call_end(p, 1, &fail, 3);
	}
	t_count(p, &s, counts, 100);
	ck_assert_uint_eq(counts[1], 0);
	/* Ten ticks (ten seconds) restore it fully. */
	for (int k = 1; k <= 10; k++)
		mtd_lb_tick(p, k * 1000, (int64_t)k * 1000000000);
	t_count(p, &s, counts, 1000);
	ck_assert_uint_ge(counts[1], 498);
	ck_assert_uint_le(counts[1], 502);
	mtd_lb_picker_free(p);
	t_set_fini(&s);
}
END_TEST

START_TEST(swrr_zero_excluded_single)
{
	int32_t w[4] = {3, 0, 1, -1};
	struct t_set s;
	struct mtd_lb_picker *p;
	struct mtd_lb_pick_ctx ctx;
	uint64_t counts[T_MAX_EPS];

	t_set_init(&s, 4, w);
	p = t_picker("SMOOTH_WEIGHTED_ROUND_ROBIN", &s, NULL);
	t_count(p, &s, counts, 4000);
	ck_assert_uint_eq(counts[0], 3000);
	ck_assert_uint_eq(counts[2], 1000);
	t_exclude(&s, 0);
	t_count(p, &s, counts, 100);
	ck_assert_uint_eq(counts[2], 100);
	t_exclude(&s, 2);
	t_count(p, &s, counts, 100);
	ck_assert_uint_eq(counts[1] + counts[3], 100);
	t_exclude(&s, 1);
	t_exclude(&s, 3);
	ctx = t_ctx(&s);
	ck_assert_int_eq(mtd_lb_pick(p, &ctx), -1);
	mtd_lb_picker_free(p);

	t_set_init(&s, 1, NULL);
	p = t_picker("SMOOTH_WEIGHTED_ROUND_ROBIN", &s, NULL);
	ctx = t_ctx(&s);
	ck_assert_int_eq(mtd_lb_pick(p, &ctx), 0);
	ck_assert_int_eq(mtd_lb_pick(p, &ctx), 0);
	mtd_lb_picker_free(p);
}
END_TEST

static Suite *wrr_suite(void)
{
	Suite *s = suite_create("lb_weighted_round_robin");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, wrr_exact_cycle_and_interleaved);
	tcase_add_test(tc, wrr_many_weights);
	tcase_add_test(tc, wrr_zero_and_excluded);
	tcase_add_test(tc, wrr_drained_sum_equal_to_count);
	tcase_add_test(tc, wrr_every_endpoint_one_turn);
	tcase_add_test(tc, wrr_large_set_without_a_cycle);
	tcase_add_test(tc, wrr_equal_weights_in_index_order);
	tcase_add_test(tc, swrr_nginx_sequence);
	tcase_add_test(tc, swrr_workers_share_the_sequence);
	tcase_add_test(tc, swrr_cycle_is_nginx_sequence);
	tcase_add_test(tc, swrr_failure_shares_follow_health);
	tcase_add_test(tc, swrr_failure_cut_and_recovery);
	tcase_add_test(tc, swrr_health_follows_the_endpoint_into_a_new_set);
	tcase_add_test(tc, swrr_zero_excluded_single);
	suite_add_tcase(s, tc);
	return s;
}

T_RUN(wrr_suite)
