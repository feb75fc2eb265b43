/* split (lib/lb/split.c through layer.c): the groups'
 * proportions, a pinned value winning, a group without an eligible
 * endpoint giving its share to the others, subset and zones inside the
 * groups, per-worker counts, and the guard (cut by errors or by latency,
 * kept across a rebuild of the same config, gone with a new one). */
#include "config.h"

#include "lb-test.h"

static const struct mtd_lb_meta m_v1[] = {{"version", "v1"}};
static const struct mtd_lb_meta m_v2[] = {{"version", "v2"}};
static const struct mtd_lb_meta m_v3[] = {{"version", "v3"}};
static const struct mtd_lb_attrs l_v1 = {.meta = {m_v1, 1}}, l_v2 = {.meta = {m_v2, 1}}, l_v3 = {.meta = {m_v3, 1}};

/* 0, 1, 2: v1; 3: v2; 4, 5: v3; 6: untagged. */
static void versions(struct t_set *s)
{
	t_set_init(s, 7, NULL);
	for (size_t i = 0; i < 3; i++) {
		s->eps[i].attrs = &l_v1;
	}
	s->eps[3].attrs = &l_v2;
	for (size_t i = 4; i < 6; i++) {
		s->eps[i].attrs = &l_v3;
	}
}

static struct mtd_lb_layer *split_layer(struct t_set *s, const char *policy, const struct mtd_lb_split_config *sc,
                                        const struct mtd_lb_layer *prev)
{
	struct mtd_lb_layer_config lc = {.metadata_key = "version", .min_healthy_percent = 70, .split = sc};
	struct mtd_lb_config cfg;
	struct mtd_lb_layer *l;

	mtd_lb_config_defaults(&cfg, mtd_lb_find(policy));
	cfg.n_workers = 2;
	l = mtd_lb_layer_new(&lc, &cfg, s->eps, s->n, prev);
	ck_assert_ptr_nonnull(l);
	return l;
}

/* Unpinned picks, counted per endpoint; fails on a -1. */
static void count_unpinned(struct mtd_lb_layer *l, struct t_set *s, uint64_t *counts, uint64_t picks)
{
	struct mtd_lb_pick_ctx ctx = t_ctx(s);

	memset(counts, 0, sizeof(counts[0]) * s->n);
	for (uint64_t k = 0; k < picks; k++) {
		ctx.worker = (unsigned)(k % 2);
		int i = mtd_lb_layer_pick(l, NULL, 0, &ctx);
		ck_assert_int_ge(i, 0);
		ck_assert_int_lt(i, (int)s->n);
		counts[i]++;
	}
}

static uint64_t sum(const uint64_t *c, size_t from, size_t to)
{
	uint64_t x = 0;
	for (size_t i = from; i < to; i++)
		x += c[i];
	return x;
}

/* Chi-square of group counts against the weights' shares (p = 0.001). */
static void assert_groups(const uint64_t *got, const double *share, size_t k, uint64_t total)
{
	size_t df = 0;
	for (size_t i = 0; i < k; i++)
		df += share[i] > 0;
	double x = t_chi2(got, share, k, total);
	ck_assert_msg(df < 2 || x < t_chi2_crit(df - 1), "chi2 %.2f over %zu groups", x, df);
}

START_TEST(proportions_and_policy_inside)
{
	static struct t_set s;
	const struct mtd_lb_split_weight w[] = {{"v1", 90}, {"v2", 10}};
	const struct mtd_lb_split_config sc = {.weights = w, .n = 2};
	uint64_t counts[T_MAX_EPS];
	enum { PICKS = 200000 };

	versions(&s);
	struct mtd_lb_layer *l = split_layer(&s, "ROUND_ROBIN", &sc, NULL);
	count_unpinned(l, &s, counts, PICKS);
	uint64_t g[2] = {sum(counts, 0, 3), counts[3]};
	const double share[2] = {0.9, 0.1};
	assert_groups(g, share, 2, PICKS);
	/* v3 and the untagged endpoint have no weight: none. */
	ck_assert_uint_eq(sum(counts, 4, 7), 0);
	/* ROUND_ROBIN inside v1: even over its three endpoints (each of the
	 * two workers' picks rotate on their own, so within a few). */
	for (size_t i = 0; i < 3; i++)
		ck_assert_uint_le(counts[i] > g[0] / 3 ? counts[i] - g[0] / 3 : g[0] / 3 - counts[i], 3);
	/* Counted per group, over both workers. */
	struct mtd_lb_split_group info;
	ck_assert_uint_eq(mtd_lb_layer_split_groups(l), 2);
	ck_assert(mtd_lb_layer_split_group(l, 0, &info));
	ck_assert_str_eq(info.value, "v1");
	ck_assert_uint_eq(info.weight, 90);
	ck_assert_uint_eq(info.current, 90);
	ck_assert_uint_eq(info.picks, g[0]);
	ck_assert(mtd_lb_layer_split_group(l, 1, &info));
	ck_assert_uint_eq(info.picks, g[1]);
	ck_assert(!mtd_lb_layer_split_group(l, 2, &info));
	mtd_lb_layer_free(l);

	/* Three groups, 60 / 30 / 10. */
	const struct mtd_lb_split_weight w3[] = {{"v3", 10}, {"v1", 60}, {"v2", 30}};
	const struct mtd_lb_split_config sc3 = {.weights = w3, .n = 3};
	l = split_layer(&s, "RANDOM", &sc3, NULL);
	count_unpinned(l, &s, counts, PICKS);
	uint64_t g3[3] = {sum(counts, 4, 6), sum(counts, 0, 3), counts[3]};
	const double share3[3] = {0.1, 0.6, 0.3};
	assert_groups(g3, share3, 3, PICKS);
	mtd_lb_layer_free(l);
}
END_TEST

START_TEST(pinned_value_wins_over_the_split)
{
	static struct t_set s;
	const struct mtd_lb_split_weight w[] = {{"v1", 100}};
	const struct mtd_lb_split_config sc = {.weights = w, .n = 1};
	struct mtd_lb_pick_ctx ctx;

	versions(&s);
	struct mtd_lb_layer *l = split_layer(&s, "ROUND_ROBIN", &sc, NULL);
	ctx = t_ctx(&s);
	for (int k = 0; k < 100; k++) {
		int i = mtd_lb_layer_pick(l, "v3", 2, &ctx);
		ck_assert(i == 4 || i == 5);
		ck_assert_int_eq(mtd_lb_layer_pick(l, "v2", 2, &ctx), 3);
		/* A value no group has: the routing fallback (untagged). */
		ck_assert_int_eq(mtd_lb_layer_pick(l, "v7", 2, &ctx), 6);
		ck_assert_int_le(mtd_lb_layer_pick(l, NULL, 0, &ctx), 2);
	}
	/* Pinned calls are not split picks. */
	struct mtd_lb_split_group info;
	ck_assert(mtd_lb_layer_split_group(l, 0, &info));
	ck_assert_uint_eq(info.picks, 100);
	mtd_lb_layer_free(l);
}
END_TEST

START_TEST(group_without_eligible_endpoint_gives_its_share)
{
	static struct t_set s;
	const struct mtd_lb_split_weight w[] = {{"v1", 60}, {"v2", 30}, {"v3", 10}, {"v9", 500}};
	const struct mtd_lb_split_config sc = {.weights = w, .n = 4};
	uint64_t counts[T_MAX_EPS];
	struct mtd_lb_pick_ctx ctx;
	enum { PICKS = 100000 };

	versions(&s);
	/* v9: no endpoint has it, its 500 go to the others, in their own
	 * proportions. */
	struct mtd_lb_layer *l = split_layer(&s, "RANDOM", &sc, NULL);
	count_unpinned(l, &s, counts, PICKS);
	uint64_t g[3] = {sum(counts, 0, 3), counts[3], sum(counts, 4, 6)};
	const double share[3] = {0.6, 0.3, 0.1};
	assert_groups(g, share, 3, PICKS);
	struct mtd_lb_split_group info;
	ck_assert(mtd_lb_layer_split_group(l, 3, &info));
	ck_assert(!info.has_endpoints);
	ck_assert_uint_eq(info.current, 0);
	/* v1's three endpoints excluded for these calls (tried, ejected):
	 * v2 and v3 share its 60 as 30 : 10. */
	t_exclude(&s, 0);
	t_exclude(&s, 1);
	t_exclude(&s, 2);
	count_unpinned(l, &s, counts, PICKS);
	ck_assert_uint_eq(sum(counts, 0, 3), 0);
	uint64_t g2[2] = {counts[3], sum(counts, 4, 6)};
	const double share2[2] = {0.75, 0.25};
	assert_groups(g2, share2, 2, PICKS);
	/* One of v3's endpoints out: v3 keeps its share on the other. */
	t_exclude(&s, 4);
	count_unpinned(l, &s, counts, PICKS);
	ck_assert_uint_eq(counts[4], 0);
	uint64_t g3[2] = {counts[3], counts[5]};
	assert_groups(g3, share2, 2, PICKS);
	/* Nothing eligible in any weighted group: -1 (the untagged endpoint
	 * is not part of the split). */
	t_exclude(&s, 3);
	t_exclude(&s, 5);
	ctx = t_ctx(&s);
	ck_assert_int_eq(mtd_lb_layer_pick(l, NULL, 0, &ctx), -1);
	mtd_lb_layer_free(l);

	/* A weight of 0 takes no unpinned call, even alone. */
	memset(s.excluded, 0, sizeof(s.excluded));
	const struct mtd_lb_split_weight wz[] = {{"v1", 0}, {"v2", 5}};
	const struct mtd_lb_split_config scz = {.weights = wz, .n = 2};
	l = split_layer(&s, "RANDOM", &scz, NULL);
	count_unpinned(l, &s, counts, 1000);
	ck_assert_uint_eq(counts[3], 1000);
	t_exclude(&s, 3);
	ctx = t_ctx(&s);
	ck_assert_int_eq(mtd_lb_layer_pick(l, NULL, 0, &ctx), -1);
	mtd_lb_layer_free(l);
}
END_TEST

START_TEST(subset_and_zones_apply_inside_groups)
{
	static struct t_set s;
	const struct mtd_lb_split_weight w[] = {{"v1", 50}, {"v3", 50}};
	const struct mtd_lb_split_config sc = {.weights = w, .n = 2};
	struct mtd_lb_layer_config lc = {.metadata_key = "version",
	                                 .min_healthy_percent = 70,
	                                 .split = &sc,
	                                 .node_id = "node-a",
	                                 .subset = {.size = 1}};
	struct mtd_lb_config cfg;
	uint64_t counts[T_MAX_EPS];

	versions(&s);
	mtd_lb_config_defaults(&cfg, mtd_lb_find("RANDOM"));
	/* Subset 1 per group: one v1 endpoint and one v3 endpoint only. */
	struct mtd_lb_layer *l = mtd_lb_layer_new(&lc, &cfg, s.eps, s.n, NULL);
	ck_assert_ptr_nonnull(l);
	count_unpinned(l, &s, counts, 10000);
	size_t used_v1 = 0, used_v3 = 0;
	for (size_t i = 0; i < 3; i++)
		used_v1 += counts[i] > 0;
	for (size_t i = 4; i < 6; i++)
		used_v3 += counts[i] > 0;
	ck_assert_uint_eq(used_v1, 1);
	ck_assert_uint_eq(used_v3, 1);
	mtd_lb_layer_free(l);
	/* STRICT zone a: v1's endpoints 0 and 2 are in a, v3's 4 in a. */
	for (size_t i = 0; i < s.n; i++)
		t_zone(&s, i, i % 2 == 0 ? "a" : "b");
	lc.subset.size = 0;
	lc.zone = "a";
	lc.locality = MTD_LB_LOCALITY_STRICT;
	l = mtd_lb_layer_new(&lc, &cfg, s.eps, s.n, NULL);
	ck_assert_ptr_nonnull(l);
	count_unpinned(l, &s, counts, 10000);
	ck_assert_uint_eq(counts[1] + counts[3] + counts[5], 0);
	ck_assert_uint_gt(counts[0], 0);
	ck_assert_uint_gt(counts[2], 0);
	ck_assert_uint_gt(counts[4], 0);
	mtd_lb_layer_free(l);
	/* A split needs groups: without metadata_key it is refused. */
	lc.metadata_key = NULL;
	ck_assert_ptr_null(mtd_lb_layer_new(&lc, &cfg, s.eps, s.n, NULL));
}
END_TEST

/* Feed the guard: calls ended on endpoint idx through the layer. */
static void feed(struct mtd_lb_layer *l, size_t idx, int calls, int fail_every, int64_t latency_us)
{
	for (int k = 0; k < calls; k++) {
		struct mtd_lb_result r = {.ok = !(fail_every && k % fail_every == 0), .latency_us = latency_us};
		mtd_lb_layer_call_begin(l, idx);
		mtd_lb_layer_call_end(l, idx, &r, 1);
	}
}

START_TEST(guard_cuts_by_errors_and_keeps_it_until_the_split_changes)
{
	static struct t_set s;
	const struct mtd_lb_split_weight w[] = {{"v1", 50}, {"v2", 50}};
	struct mtd_lb_split_config sc = {.weights = w,
	                                 .n = 2,
	                                 .guard = {.on = true,
	                                           .max_error_ratio = 2.0,
	                                           .max_p99_ratio = 1.5,
	                                           .min_calls = 100,
	                                           .window_ms = 30000}};
	struct mtd_lb_guard_cut cut[4];
	uint64_t counts[T_MAX_EPS];
	int64_t t = 1000000;

	versions(&s);
	struct mtd_lb_layer *l = split_layer(&s, "RANDOM", &sc, NULL);
	/* The first snapshot: nothing to compare yet. */
	ck_assert_uint_eq(mtd_lb_layer_guard(l, t, cut, 4), 0);
	/* Neutral outcomes (cancels, deadlines) are no evidence. */
	struct mtd_lb_result neutral = {.neutral = true};
	for (int k = 0; k < 500; k++)
		mtd_lb_layer_call_end(l, 3, &neutral, 1);
	/* Under min_calls on v2 (99): no verdict even at 1 in 3 failing. */
	feed(l, 0, 300, 0, 1000);
	feed(l, 3, 99, 3, 1000);
	t += 3000;
	ck_assert_uint_eq(mtd_lb_layer_guard(l, t, cut, 4), 0);
	/* v2 at 1 in 3 failing over 120 calls, v1 none over 400: cut. */
	feed(l, 0, 100, 0, 1000);
	feed(l, 3, 21, 3, 1000);
	t += 3000;
	ck_assert_uint_eq(mtd_lb_layer_guard(l, t, cut, 4), 1);
	ck_assert_str_eq(cut[0].value, "v2");
	ck_assert_str_eq(cut[0].reference, "v1");
	ck_assert(cut[0].by_errors);
	ck_assert(!cut[0].by_latency);
	ck_assert_uint_eq(cut[0].calls, 120);
	ck_assert_uint_eq(cut[0].failed, 40);
	ck_assert_uint_eq(cut[0].ref_calls, 400);
	/* Once: not cut again. */
	t += 3000;
	ck_assert_uint_eq(mtd_lb_layer_guard(l, t, cut, 4), 0);
	struct mtd_lb_split_group info;
	ck_assert(mtd_lb_layer_split_group(l, 1, &info));
	ck_assert_uint_eq(info.current, 0);
	ck_assert_uint_eq(info.weight, 50);
	ck_assert_int_eq(info.cut_ms, t - 3000);
	/* Every unpinned call goes to v1 now; a pinned one still reaches v2. */
	count_unpinned(l, &s, counts, 1000);
	ck_assert_uint_eq(counts[3], 0);
	struct mtd_lb_pick_ctx ctx = t_ctx(&s);
	ck_assert_int_eq(mtd_lb_layer_pick(l, "v2", 2, &ctx), 3);

	/* A new endpoint set under the same config: still cut. */
	struct mtd_lb_layer *l2 = split_layer(&s, "RANDOM", &sc, l);
	mtd_lb_layer_free(l);
	ck_assert(mtd_lb_layer_split_group(l2, 1, &info));
	ck_assert_uint_eq(info.current, 0);
	count_unpinned(l2, &s, counts, 1000);
	ck_assert_uint_eq(counts[3], 0);
	/* A reload whose split is equal by value (another config object,
	 * strings at other addresses, the map listed in another order: a
	 * SIGHUP that only re-read certificates): still cut, its time kept. */
	char v1[] = "v1", v2[] = "v2";
	const struct mtd_lb_split_weight w_same[] = {{v2, 50}, {v1, 50}};
	struct mtd_lb_split_config sc2 = sc;
	sc2.weights = w_same;
	struct mtd_lb_layer *l3 = split_layer(&s, "RANDOM", &sc2, l2);
	mtd_lb_layer_free(l2);
	ck_assert(mtd_lb_layer_split_group(l3, 0, &info));
	ck_assert_str_eq(info.value, "v2");
	ck_assert_uint_eq(info.current, 0);
	ck_assert_int_eq(info.cut_ms, t - 3000);
	ck_assert(mtd_lb_layer_split_group(l3, 1, &info));
	ck_assert_uint_eq(info.current, 50);
	count_unpinned(l3, &s, counts, 1000);
	ck_assert_uint_eq(counts[3], 0);
	/* A changed split (a weight): back in. */
	const struct mtd_lb_split_weight w_new[] = {{"v1", 60}, {"v2", 40}};
	struct mtd_lb_split_config sc3 = sc;
	sc3.weights = w_new;
	struct mtd_lb_layer *l4 = split_layer(&s, "RANDOM", &sc3, l3);
	ck_assert(mtd_lb_layer_split_group(l4, 1, &info));
	ck_assert_uint_eq(info.current, 40);
	ck_assert_int_eq(info.cut_ms, 0);
	count_unpinned(l4, &s, counts, 1000);
	ck_assert_uint_gt(counts[3], 0);
	mtd_lb_layer_free(l4);
	/* A changed guard (min_calls) is a changed split too. */
	sc2.guard.min_calls = 101;
	l4 = split_layer(&s, "RANDOM", &sc2, l3);
	mtd_lb_layer_free(l3);
	ck_assert(mtd_lb_layer_split_group(l4, 1, &info));
	ck_assert_uint_eq(info.current, 50);
	mtd_lb_layer_free(l4);
}
END_TEST

START_TEST(guard_cuts_by_latency_and_forgets_the_old_window)
{
	static struct t_set s;
	const struct mtd_lb_split_weight w[] = {{"v1", 90}, {"v2", 10}};
	struct mtd_lb_split_config sc = {
	        .weights = w,
	        .n = 2,
	        .guard = {
	                .on = true, .max_error_ratio = 2.0, .max_p99_ratio = 1.5, .min_calls = 50, .window_ms = 10000}};
	struct mtd_lb_guard_cut cut[4];
	struct mtd_lb_split_group info;
	int64_t t = 5000000;

	versions(&s);
	struct mtd_lb_layer *l = split_layer(&s, "RANDOM", &sc, NULL);
	ck_assert_uint_eq(mtd_lb_layer_guard(l, t, cut, 4), 0);
	/* v2: 30 calls, half failing and slow, under min_calls: no verdict;
	 * then one good call a second: once the bad ones are older than the
	 * 10 s window, 60 good calls are judged on their own. */
	feed(l, 3, 30, 2, 80000);
	for (int sec = 0; sec < 12; sec++) {
		feed(l, 1, 100, 0, 1000);
		feed(l, 3, 1, 0, 1000);
		t += 1000;
		ck_assert_uint_eq(mtd_lb_layer_guard(l, t, cut, 4), 0);
	}
	feed(l, 1, 100, 0, 1000);
	feed(l, 3, 60, 0, 1000);
	t += 1000;
	ck_assert_uint_eq(mtd_lb_layer_guard(l, t, cut, 4), 0);
	ck_assert(mtd_lb_layer_split_group(l, 1, &info));
	ck_assert(info.guarded);
	ck_assert_uint_eq(info.current, 10);
	ck_assert_uint_ge(info.window_calls, 60);
	ck_assert_uint_eq(info.window_failed, 0);
	/* A failure in 70 (1.4 %) against none: under the reference's 1 %
	 * floor times 2, no cut. */
	struct mtd_lb_result bad = {.ok = false};
	mtd_lb_layer_call_end(l, 3, &bad, 1);
	t += 1000;
	ck_assert_uint_eq(mtd_lb_layer_guard(l, t, cut, 4), 0);
	mtd_lb_layer_free(l);

	/* v2 slow: 60 calls at 40 ms against v1's 1 ms: cut by latency. */
	l = split_layer(&s, "RANDOM", &sc, NULL);
	ck_assert_uint_eq(mtd_lb_layer_guard(l, t, cut, 4), 0);
	feed(l, 1, 100, 0, 1000);
	feed(l, 3, 60, 0, 40000);
	t += 1000;
	ck_assert_uint_eq(mtd_lb_layer_guard(l, t, cut, 4), 1);
	ck_assert_str_eq(cut[0].value, "v2");
	ck_assert(cut[0].by_latency);
	ck_assert(!cut[0].by_errors);
	ck_assert_double_ge(cut[0].p99_ms, 40.0);
	ck_assert_double_le(cut[0].ref_p99_ms, 1.25);
	ck_assert(mtd_lb_layer_split_group(l, 1, &info));
	ck_assert_uint_eq(info.current, 0);
	mtd_lb_layer_free(l);
	/* A guard off: never a verdict. */
	sc.guard.on = false;
	l = split_layer(&s, "RANDOM", &sc, NULL);
	feed(l, 3, 600, 2, 40000);
	ck_assert_uint_eq(mtd_lb_layer_guard(l, t, cut, 4), 0);
	ck_assert_uint_eq(mtd_lb_layer_guard(l, t + 5000, cut, 4), 0);
	mtd_lb_layer_free(l);
}
END_TEST

/* The endpoints' latency histogram (stats.c), which the live page's p99
 * reads: 2 buckets an octave, the quantile an upper bound within sqrt 2. */
START_TEST(latency_histogram_buckets_and_quantile)
{
	static struct t_set s;
	uint64_t h[MTD_LB_LAT_BUCKETS];

	ck_assert_uint_eq(mtd_lb_lat_bucket(0), 0);
	ck_assert_uint_eq(mtd_lb_lat_bucket(1), 0);
	ck_assert_uint_eq(mtd_lb_lat_bucket(2), 2);
	ck_assert_uint_eq(mtd_lb_lat_bucket(3), 3);
	ck_assert_uint_eq(mtd_lb_lat_bucket(INT64_MAX), MTD_LB_LAT_BUCKETS - 1);
	for (int64_t us = 1; us < (1 << 26); us = us * 3 / 2 + 1) {
		size_t b = mtd_lb_lat_bucket(us);
		ck_assert_double_ge(mtd_lb_lat_upper_us(b), (double)us);
		ck_assert_double_le(mtd_lb_lat_upper_us(b), (double)us * 1.5 + 1);
		ck_assert(b == 0 || mtd_lb_lat_upper_us(b - 1) <= (double)us);
	}
	memset(h, 0, sizeof(h));
	ck_assert_double_eq(mtd_lb_lat_quantile_ms(h, 0.99), 0);
	/* 98 calls at 1 ms, 2 at 50 ms: p99 is in 50 ms's bucket. */
	h[mtd_lb_lat_bucket(1000)] = 98;
	h[mtd_lb_lat_bucket(50000)] = 2;
	ck_assert_double_ge(mtd_lb_lat_quantile_ms(h, 0.99), 50.0);
	ck_assert_double_le(mtd_lb_lat_quantile_ms(h, 0.99), 50.0 * 1.5);
	ck_assert_double_le(mtd_lb_lat_quantile_ms(h, 0.5), 1.5);
	/* Fed by the call accounting: successes only. */
	t_set_init(&s, 1, NULL);
	struct mtd_lb_result ok = {.ok = true, .latency_us = 3000}, bad = {.ok = false, .latency_us = 9000000};
	mtd_lb_stats_begin(&s.stats[0]);
	mtd_lb_stats_end(&s.stats[0], &ok, 1, 0);
	mtd_lb_stats_begin(&s.stats[0]);
	mtd_lb_stats_end(&s.stats[0], &bad, 1, 0);
	uint64_t total = 0;
	memset(h, 0, sizeof(h));
	mtd_lb_stats_lat_add(&s.stats[0], h);
	for (size_t b = 0; b < MTD_LB_LAT_BUCKETS; b++)
		total += h[b];
	ck_assert_uint_eq(total, 1);
	ck_assert_uint_eq(h[mtd_lb_lat_bucket(3000)], 1);
	/* Added to what the caller holds (the live page sums endpoints). */
	mtd_lb_stats_lat_add(&s.stats[0], h);
	ck_assert_uint_eq(h[mtd_lb_lat_bucket(3000)], 2);
	mtd_lb_stats_fini(&s.stats[0]);
	ck_assert_ptr_null(t_lat(&s.stats[0]));
}
END_TEST

/* An endpoint never answered (the common case: a sidecar knows thousands
 * of endpoints and calls few) has no histogram: its figures read as
 * empty. Picks, failures and calls in flight do not make one; the first
 * success does, and fini frees it. */
START_TEST(latency_histogram_only_once_answered)
{
	static struct t_set s;
	uint64_t h[MTD_LB_LAT_BUCKETS];
	struct mtd_lb_result bad = {.ok = false, .latency_us = 2000}, neutral = {.neutral = true, .ok = true},
	                     ok = {.ok = true, .latency_us = 700};

	t_set_init(&s, 2, NULL);
	ck_assert_ptr_null(t_lat(&s.stats[0]));
	memset(h, 0, sizeof(h));
	mtd_lb_stats_lat_add(&s.stats[0], h);
	for (size_t b = 0; b < MTD_LB_LAT_BUCKETS; b++)
		ck_assert_uint_eq(h[b], 0);
	ck_assert_double_eq(mtd_lb_lat_quantile_ms(h, 0.99), 0);
	mtd_lb_stats_begin(&s.stats[0]);
	mtd_lb_stats_end(&s.stats[0], &bad, 1, 0);
	mtd_lb_stats_begin(&s.stats[0]);
	mtd_lb_stats_end(&s.stats[0], &neutral, 1, 0);
	mtd_lb_stats_begin(&s.stats[0]);
	ck_assert_ptr_null(t_lat(&s.stats[0]));
	ck_assert_uint_eq(atomic_load(&t_live(&s.stats[0])->picks), 3);
	ck_assert_uint_eq(atomic_load(&t_live(&s.stats[0])->failures), 1);
	mtd_lb_stats_end(&s.stats[0], &ok, 1, 0);
	ck_assert_ptr_nonnull(t_lat(&s.stats[0]));
	mtd_lb_stats_lat_add(&s.stats[0], h);
	ck_assert_uint_eq(h[mtd_lb_lat_bucket(700)], 1);
	/* Its neighbour, never called, still has none. */
	ck_assert_ptr_null(t_lat(&s.stats[1]));
	mtd_lb_stats_fini(&s.stats[1]);
	mtd_lb_stats_fini(&s.stats[0]);
	ck_assert_ptr_null(t_lat(&s.stats[0]));
}
END_TEST

static Suite *split_suite(void)
{
	Suite *s = suite_create("lb_split");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, proportions_and_policy_inside);
	tcase_add_test(tc, pinned_value_wins_over_the_split);
	tcase_add_test(tc, group_without_eligible_endpoint_gives_its_share);
	tcase_add_test(tc, subset_and_zones_apply_inside_groups);
	tcase_add_test(tc, guard_cuts_by_errors_and_keeps_it_until_the_split_changes);
	tcase_add_test(tc, guard_cuts_by_latency_and_forgets_the_old_window);
	tcase_add_test(tc, latency_histogram_buckets_and_quantile);
	tcase_add_test(tc, latency_histogram_only_once_answered);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(split_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
