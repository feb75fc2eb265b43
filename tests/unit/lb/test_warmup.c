/* Warmup: both curves at 0, 25, 50, 100 % of the window; clamps; inert
 * while every endpoint is new; never unreachable; applied by the weighted
 * strategies. */
#include "config.h"

#include "lb-test.h"
#include "lb/lb-impl.h"

static Suite *warmup_suite(void);

#define START  1000000
#define WINDOW 60000

static double at(const struct mtd_lb_warmup *w, int32_t weight, double frac)
{
	struct mtd_lb_endpoint ep = {.id = "x", .weight = weight, .start_ms = START};

	return mtd_lb__warm_weight(w, &ep, START + (int64_t)(frac * WINDOW));
}

START_TEST(linear_curve)
{
	struct mtd_lb_warmup w = {.duration_ms = WINDOW, .curve = MTD_LB_WARMUP_LINEAR};

	/* Dubbo: weight * uptime / warmup, clamped to [1, weight] */
	ck_assert_double_eq_tol(at(&w, 100, 0.0), 1.0, 1e-9);
	ck_assert_double_eq_tol(at(&w, 100, 0.25), 25.0, 1e-9);
	ck_assert_double_eq_tol(at(&w, 100, 0.5), 50.0, 1e-9);
	ck_assert_double_eq_tol(at(&w, 100, 1.0), 100.0, 1e-9);
	ck_assert_double_eq_tol(at(&w, 100, 3.0), 100.0, 1e-9);
	ck_assert_double_eq_tol(at(&w, 2, 0.25), 1.0, 1e-9);   /* floor 1 */
	ck_assert_double_eq_tol(at(&w, 100, -1.0), 1.0, 1e-9); /* skew */
	ck_assert_double_eq_tol(at(&w, 0, 0.5), 0.0, 1e-9);
}
END_TEST

START_TEST(slow_start_curve)
{
	struct mtd_lb_warmup w = {.duration_ms = WINDOW,
	                          .curve = MTD_LB_WARMUP_SLOW_START,
	                          .aggression = 1.0,
	                          .min_weight_percent = 10.0};

	/* Envoy: weight * max(min%, (t / window) ^ (1 / aggression)) */
	ck_assert_double_eq_tol(at(&w, 100, 0.0), 10.0, 1e-9);
	ck_assert_double_eq_tol(at(&w, 100, 0.25), 25.0, 1e-9);
	ck_assert_double_eq_tol(at(&w, 100, 0.5), 50.0, 1e-9);
	ck_assert_double_eq_tol(at(&w, 100, 1.0), 100.0, 1e-9);
	w.aggression = 2.0;
	ck_assert_double_eq_tol(at(&w, 100, 0.0), 10.0, 1e-9);
	ck_assert_double_eq_tol(at(&w, 100, 0.25), 50.0, 1e-9);
	ck_assert_double_eq_tol(at(&w, 100, 0.5), 100.0 * sqrt(0.5), 1e-9);
	ck_assert_double_eq_tol(at(&w, 100, 1.0), 100.0, 1e-9);
	w.aggression = 0.5;
	w.min_weight_percent = 0.0;
	ck_assert_double_eq_tol(at(&w, 100, 0.5), 25.0, 1e-9);
	ck_assert_double_eq_tol(at(&w, 100, 0.0), 1.0, 1e-9); /* never 0 */
}
END_TEST

START_TEST(unknown_start_is_warm)
{
	struct mtd_lb_warmup w = {.duration_ms = WINDOW};
	struct mtd_lb_endpoint ep = {.id = "x", .weight = 100, .start_ms = 0};

	ck_assert_double_eq_tol(mtd_lb__warm_weight(&w, &ep, 5), 100.0, 1e-9);
}
END_TEST

/* Endpoint 0 old, endpoint 1 started `frac` of the window ago. */
static void two_eps(struct t_set *s, double frac, int64_t *now)
{
	t_set_init(s, 2, NULL);
	s->eps[0].start_ms = 0;
	s->eps[1].start_ms = START;
	*now = START + (int64_t)(frac * WINDOW);
}

START_TEST(strategies_apply_warmup)
{
	static const char *const names[] = {
	        "WEIGHTED_RANDOM", "WEIGHTED_ROUND_ROBIN", "SMOOTH_WEIGHTED_ROUND_ROBIN",
	        "LEAST_ACTIVE",    "SHORTEST_RESPONSE",
	};
	static const double fracs[] = {0.0, 0.25, 0.5, 1.0};

	for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
		for (size_t f = 0; f < 4; f++) {
			struct t_set s;
			struct mtd_lb_config cfg;
			struct mtd_lb_picker *p;
			struct mtd_lb_pick_ctx ctx;
			int64_t now;
			uint64_t c1 = 0;
			double want = fracs[f] > 0 ? fracs[f] * 100 : 1;
			double share, expect = want / (100 + want);

			two_eps(&s, fracs[f], &now);
			mtd_lb_config_defaults(&cfg, mtd_lb_find(names[k]));
			cfg.warmup.duration_ms = WINDOW;
			p = mtd_lb_picker_new(&cfg, s.eps, s.n, NULL);
			ck_assert_ptr_nonnull(p);
			ctx = t_ctx(&s);
			ctx.now_ms = now;
			for (int i = 0; i < 40000; i++)
				c1 += mtd_lb_pick(p, &ctx) == 1;
			share = (double)c1 / 40000;
			/* Stated tolerance: 10 % of the share, or 0.3 points. */
			ck_assert_msg(fabs(share - expect) < fmax(0.1 * expect, 0.003),
			              "%s at %.2f: share %.4f, want %.4f", names[k], fracs[f], share, expect);
			mtd_lb_picker_free(p);
		}
}
END_TEST

/* LEAST_ACTIVE / SHORTEST_RESPONSE while an endpoint ramps (least.c): the
 * exact scan until a tick sets warm tie weights, then the tree with the
 * weights of that tick for up to WARM_MAX_AGE_MS (2.5 s), the exact scan
 * again past that, and the configured weights at the first tick after the
 * ramp. Window 10 s, endpoint 1 started at START (25 % in at START +
 * 2.5 s), both idle so every pick is a tie split by the weights. */
static double share_of_1(struct mtd_lb_picker *p, struct t_set *s, int64_t now_ms)
{
	struct mtd_lb_pick_ctx ctx = t_ctx(s);
	uint64_t c1 = 0;

	ctx.now_ms = now_ms;
	for (int i = 0; i < 40000; i++)
		c1 += mtd_lb_pick(p, &ctx) == 1;
	return (double)c1 / 40000;
}

START_TEST(least_cost_warm_tie_weights_follow_ticks)
{
	static const char *const names[] = {"LEAST_ACTIVE", "SHORTEST_RESPONSE"};
	const int64_t window = 10000, t0 = START + window / 4;
	struct t_set s;
	struct mtd_lb_config cfg;
	struct mtd_lb_picker *p;
	struct mtd_lb__least *st;

	t_set_init(&s, 2, NULL);
	s.eps[0].start_ms = 0;
	s.eps[1].start_ms = START;
	mtd_lb_config_defaults(&cfg, mtd_lb_find(names[_i]));
	cfg.warmup.duration_ms = window;
	p = mtd_lb_picker_new(&cfg, s.eps, s.n, NULL);
	ck_assert_ptr_nonnull(p);
	st = p->state;
	/* No tick yet: exact, weight 25 against 100 at t0, 45 at t0 + 2 s. */
	ck_assert_double_eq_tol(share_of_1(p, &s, t0), 25.0 / 125, 0.01);
	ck_assert_double_eq_tol(share_of_1(p, &s, t0 + 2000), 45.0 / 145, 0.01);
	/* A tick at t0: the tree's tie weights are t0's, for 2.5 s. */
	mtd_lb_tick(p, t0, 1000000000);
	ck_assert_uint_eq(atomic_load(&st->tree.node[1]) & 0xffffffffu, 25);
	ck_assert(mtd_lb__mintree_consistent(&st->tree));
	ck_assert_double_eq_tol(share_of_1(p, &s, t0 + 2000), 25.0 / 125, 0.01);
	/* Older than that: exact again (55 against 100 at t0 + 3 s). */
	ck_assert_double_eq_tol(share_of_1(p, &s, t0 + 3000), 55.0 / 155, 0.01);
	/* Ticks follow the ramp; the first after it restores the weights. */
	mtd_lb_tick(p, t0 + 5000, 2000000000);
	ck_assert_double_eq_tol(share_of_1(p, &s, t0 + 5000), 75.0 / 175, 0.01);
	mtd_lb_tick(p, START + window + 1, 3000000000);
	ck_assert_uint_eq(atomic_load(&st->tree.node[1]) & 0xffffffffu, 100);
	ck_assert_int_eq(atomic_load(&st->warm_at_ms), INT64_MIN);
	ck_assert_double_eq_tol(share_of_1(p, &s, START + window + 1), 0.5, 0.01);
	mtd_lb_picker_free(p);
}
END_TEST

/* WEIGHTED_RANDOM / WEIGHTED_ROUND_ROBIN while an endpoint ramps
 * (weights.c mtd_lb__warm_cdf): the exact walk until a tick publishes the
 * warmed weights, then that tick's weights for up to
 * MTD_LB__WARM_MAX_AGE_MS (2.5 s), the exact walk again past that; the
 * configured weights (alias table, cycle) after the ramp. Same set and
 * times as the least-cost test above. */
START_TEST(weighted_warm_table_follows_ticks)
{
	static const char *const names[] = {"WEIGHTED_RANDOM", "WEIGHTED_ROUND_ROBIN"};
	const int64_t window = 10000, t0 = START + window / 4;
	struct t_set s;
	struct mtd_lb_config cfg;
	struct mtd_lb_picker *p;
	struct mtd_lb_pick_ctx ctx;
	uint64_t ex[1] = {1u << 1};

	t_set_init(&s, 3, NULL);
	s.eps[0].start_ms = 0;
	s.eps[1].start_ms = START;
	s.eps[2].start_ms = 0;
	s.eps[2].weight = 0; /* drained: never picked while others can be */
	mtd_lb_config_defaults(&cfg, mtd_lb_find(names[_i]));
	cfg.warmup.duration_ms = window;
	p = mtd_lb_picker_new(&cfg, s.eps, s.n, NULL);
	ck_assert_ptr_nonnull(p);
	/* No tick yet: exact, weight 25 against 100 at t0, 45 at t0 + 2 s. */
	ck_assert_double_eq_tol(share_of_1(p, &s, t0), 25.0 / 125, 0.01);
	ck_assert_double_eq_tol(share_of_1(p, &s, t0 + 2000), 45.0 / 145, 0.01);
	/* A tick at t0: its weights, for 2.5 s. */
	mtd_lb_tick(p, t0, 1000000000);
	ck_assert_double_eq_tol(share_of_1(p, &s, t0 + 2000), 25.0 / 125, 0.01);
	/* The drained endpoint is never picked, an excluded one neither. */
	ctx = t_ctx(&s);
	ctx.now_ms = t0 + 1000;
	for (int i = 0; i < 2000; i++)
		ck_assert_int_lt(mtd_lb_pick(p, &ctx), 2);
	ctx.excluded = ex;
	for (int i = 0; i < 2000; i++)
		ck_assert_int_eq(mtd_lb_pick(p, &ctx), 0);
	/* Older than that: exact again (55 against 100 at t0 + 3 s). */
	ck_assert_double_eq_tol(share_of_1(p, &s, t0 + 3000), 55.0 / 155, 0.01);
	/* Ticks follow the ramp (both tables in turn). */
	mtd_lb_tick(p, t0 + 5000, 2000000000);
	ck_assert_double_eq_tol(share_of_1(p, &s, t0 + 6000), 75.0 / 175, 0.01);
	mtd_lb_tick(p, t0 + 6000, 2000000000);
	ck_assert_double_eq_tol(share_of_1(p, &s, t0 + 7000), 85.0 / 185, 0.01);
	/* After the ramp: the configured weights, ticked or not. */
	ck_assert_double_eq_tol(share_of_1(p, &s, START + window + 1), 0.5, 0.01);
	mtd_lb_tick(p, START + window + 1, 3000000000);
	ck_assert_double_eq_tol(share_of_1(p, &s, START + window + 1), 0.5, 0.01);
	mtd_lb_picker_free(p);
}
END_TEST

START_TEST(inert_when_all_new)
{
	struct t_set s;
	struct mtd_lb_config cfg;
	struct mtd_lb_picker *p;
	struct mtd_lb_pick_ctx ctx;
	uint64_t c[2] = {0, 0};

	/* Both started 10 % of the window ago: no ramp, plain 1:1. */
	t_set_init(&s, 2, NULL);
	s.eps[0].start_ms = START;
	s.eps[1].start_ms = START + 1000;
	mtd_lb_config_defaults(&cfg, mtd_lb_find("WEIGHTED_ROUND_ROBIN"));
	cfg.warmup.duration_ms = WINDOW;
	p = mtd_lb_picker_new(&cfg, s.eps, s.n, NULL);
	ck_assert_ptr_nonnull(p);
	ctx = t_ctx(&s);
	ctx.now_ms = START + WINDOW / 10;
	for (int i = 0; i < 1000; i++)
		c[mtd_lb_pick(p, &ctx)]++;
	ck_assert_uint_eq(c[0], 500);
	ck_assert_uint_eq(c[1], 500);
	mtd_lb_picker_free(p);
}
END_TEST

START_TEST(returned_ramps_while_all_new)
{
	struct t_set s;
	struct mtd_lb_warmup w = {.duration_ms = WINDOW, .curve = MTD_LB_WARMUP_LINEAR};
	struct mtd_lb_warm_span span;
	int64_t now = START + WINDOW / 2;

	/* Both first seen together; the second came back a quarter window
	 * ago: its ramp applies though every start is recent. */
	t_set_init(&s, 2, NULL);
	s.eps[0].start_ms = START;
	s.eps[1].start_ms = now - WINDOW / 4;
	mtd_lb__warm_span(&w, s.eps, s.n, &span);
	ck_assert(!mtd_lb__warming(&span, now));
	s.eps[1].returned = true;
	mtd_lb__warm_span(&w, s.eps, s.n, &span);
	ck_assert(mtd_lb__warming(&span, now));
	ck_assert(!mtd_lb__warming(&span, s.eps[1].start_ms - 1));
	ck_assert_double_eq_tol(mtd_lb__weight_at(&span, &s.eps[1], now), 25.0, 1e-9);
	ck_assert_double_eq_tol(mtd_lb__weight_at(&span, &s.eps[0], now), 50.0, 1e-9);
	/* Once its window is over, nobody ramps. */
	ck_assert_double_eq_tol(mtd_lb__weight_at(&span, &s.eps[1], s.eps[1].start_ms + WINDOW), 100.0, 1e-9);
}
END_TEST

START_TEST(never_unreachable)
{
	struct t_set s;
	struct mtd_lb_config cfg;
	struct mtd_lb_picker *p;
	struct mtd_lb_pick_ctx ctx;
	int64_t now;
	uint64_t c1 = 0;

	/* Weight 1, just started, next to a weight-100000 old endpoint. */
	two_eps(&s, 0.0, &now);
	s.eps[0].weight = 100000;
	s.eps[1].weight = 1;
	mtd_lb_config_defaults(&cfg, mtd_lb_find("WEIGHTED_RANDOM"));
	cfg.warmup.duration_ms = WINDOW;
	p = mtd_lb_picker_new(&cfg, s.eps, s.n, NULL);
	ck_assert_ptr_nonnull(p);
	ctx = t_ctx(&s);
	ctx.now_ms = now;
	for (int i = 0; i < 1000000; i++)
		c1 += mtd_lb_pick(p, &ctx) == 1;
	ck_assert_uint_gt(c1, 0);
	/* And if the old one is excluded, the warming one serves all. */
	t_exclude(&s, 0);
	ck_assert_int_eq(mtd_lb_pick(p, &ctx), 1);
	mtd_lb_picker_free(p);
}
END_TEST

static Suite *warmup_suite(void)
{
	Suite *s = suite_create("lb_warmup");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, linear_curve);
	tcase_add_test(tc, slow_start_curve);
	tcase_add_test(tc, unknown_start_is_warm);
	tcase_add_test(tc, strategies_apply_warmup);
	tcase_add_test(tc, inert_when_all_new);
	tcase_add_test(tc, returned_ramps_while_all_new);
	tcase_add_test(tc, never_unreachable);
	tcase_add_loop_test(tc, least_cost_warm_tie_weights_follow_ticks, 0, 2);
	tcase_add_loop_test(tc, weighted_warm_table_follows_ticks, 0, 2);
	suite_add_tcase(s, tc);
	return s;
}

T_RUN(warmup_suite)
