/* PEAK_EWMA and WEIGHTED_RESPONSE_TIME, and the latency figures they read
 * (stats.c): peak behaviour, decay, failures as slow samples, Ribbon's
 * round robin before data and weights proportional to 1 / latency. */
#include "config.h"

#include "lb-test.h"

static Suite *latency_suite(void);

#define SEC 1000000000LL

static void feed(struct mtd_lb_picker *p, size_t i, bool ok, int64_t lat_us, int64_t now_ns, int times)
{
	struct mtd_lb_result r = {.ok = ok, .latency_us = lat_us};

	for (int k = 0; k < times; k++) {
		mtd_lb_call_begin(p, i);
		mtd_lb_call_end(p, i, &r, now_ns);
	}
}

/* An endpoint's live figures cost nothing until its first pick
 * (core/lazy.h): reads see zeroes, the first begin makes them, and the
 * fini frees them (with what recording hung on them). */
START_TEST(live_figures_made_at_the_first_pick)
{
	struct mtd_lb_stats st;
	struct mtd_lb_result r = {.ok = true, .latency_us = 1000};
	uint64_t h[MTD_LB_LAT_BUCKETS] = {0};

	memset(&st, 0, sizeof(st));
	ck_assert_ptr_null(atomic_load(&st.live));
	ck_assert_uint_eq(atomic_load(&mtd_lb_stats_view(&st)->picks), 0);
	ck_assert(mtd_lb_stats_ewma_us(&st, SEC, 10000) == 0.0);
	mtd_lb_stats_lat_add(&st, h);
	ck_assert_ptr_null(atomic_load(&st.live)); /* reading made nothing */
	mtd_lb_stats_begin(&st);
	struct mtd_lb_live *l = atomic_load(&st.live);
	ck_assert_ptr_nonnull(l);
	ck_assert_ptr_eq(mtd_lb_stats_view(&st), l);
	ck_assert_uint_eq(atomic_load(&l->picks), 1);
	ck_assert_int_eq(atomic_load(&l->active), 1);
	ck_assert_ptr_null(t_lat(&st)); /* no success yet */
	mtd_lb_stats_end(&st, &r, SEC, 10000);
	ck_assert_ptr_eq(atomic_load(&st.live), l); /* the same block on */
	ck_assert_int_eq(atomic_load(&l->active), 0);
	ck_assert_ptr_nonnull(t_lat(&st));
	mtd_lb_stats_fini(&st);
	ck_assert_ptr_null(atomic_load(&st.live));
	ck_assert_uint_eq(atomic_load(&mtd_lb_stats_view(&st)->picks), 0);
}
END_TEST

START_TEST(ewma_peak_and_decay)
{
	struct mtd_lb_stats st;
	struct mtd_lb_result r = {.ok = true, .latency_us = 1000};
	double v;

	memset(&st, 0, sizeof(st));
	ck_assert(mtd_lb_stats_ewma_us(&st, SEC, 10000) == 0.0);
	mtd_lb_stats_begin(&st);
	mtd_lb_stats_end(&st, &r, SEC, 10000);
	ck_assert_double_eq_tol(mtd_lb_stats_ewma_us(&st, SEC, 10000), 1000, 1e-9);
	/* A slower sample is taken at once (the peak). */
	r.latency_us = 5000;
	mtd_lb_stats_begin(&st);
	mtd_lb_stats_end(&st, &r, SEC + 1, 10000);
	ck_assert_double_eq_tol(mtd_lb_stats_ewma_us(&st, SEC + 1, 10000), 5000, 1e-6);
	/* A faster one 10 s (= tau) later blends with weight 1 - 1/e. */
	r.latency_us = 1000;
	mtd_lb_stats_begin(&st);
	mtd_lb_stats_end(&st, &r, 11 * SEC + 1, 10000);
	v = mtd_lb_stats_ewma_us(&st, 11 * SEC + 1, 10000);
	ck_assert_double_eq_tol(v, 5000 * exp(-1) + 1000 * (1 - exp(-1)), 1e-6);
	/* Read 10 s later without samples: decayed by 1/e. */
	ck_assert_double_eq_tol(mtd_lb_stats_ewma_us(&st, 21 * SEC + 1, 10000), v * exp(-1), 1e-6);
	ck_assert_int_eq(t_live(&st)->active, 0);
	ck_assert_uint_eq(t_live(&st)->successes, 3);
	ck_assert_uint_eq(t_live(&st)->latency_count, 3);
	ck_assert_uint_eq(t_live(&st)->latency_sum_us, 7000);
	mtd_lb_stats_fini(&st);
}
END_TEST

START_TEST(ewma_failure_is_slow)
{
	struct mtd_lb_stats st;
	struct mtd_lb_result ok = {.ok = true, .latency_us = 200};
	struct mtd_lb_result fail = {.ok = false, .latency_us = 5};

	memset(&st, 0, sizeof(st));
	mtd_lb_stats_begin(&st);
	mtd_lb_stats_end(&st, &ok, SEC, 10000);
	mtd_lb_stats_begin(&st);
	mtd_lb_stats_end(&st, &fail, SEC + 1000, 10000);
	ck_assert(mtd_lb_stats_ewma_us(&st, SEC + 1000, 10000) >= MTD_LB_FAILURE_PENALTY_US);
	ck_assert_uint_eq(t_live(&st)->failures, 1);
	ck_assert_uint_eq(t_live(&st)->latency_count, 1); /* failures: no latency */
	/* A run of failures saturates: each multiplies the estimate, up to the cap. */
	for (int i = 0; i < 400; i++) {
		mtd_lb_stats_begin(&st);
		mtd_lb_stats_end(&st, &fail, SEC + 2000 + i, 10000);
	}
	double e = mtd_lb_stats_ewma_us(&st, SEC + 3000, 10000);
	ck_assert(e >= MTD_LB_FAILURE_PENALTY_US && e <= MTD_LB_FAILURE_PENALTY_MAX_US);
	mtd_lb_stats_fini(&st);
}
END_TEST

START_TEST(window_halves_each_slide)
{
	struct mtd_lb_stats st;
	struct mtd_lb_result r = {.ok = true, .latency_us = 100};

	memset(&st, 0, sizeof(st));
	for (int k = 0; k < 8; k++) {
		mtd_lb_stats_begin(&st);
		mtd_lb_stats_end(&st, &r, SEC, 0);
	}
	ck_assert_uint_eq(t_live(&st)->window_count, 8);
	mtd_lb_stats_begin(&st);
	mtd_lb_stats_end(&st, &r, SEC + MTD_LB_WINDOW_SLIDE_NS, 0);
	ck_assert_uint_eq(t_live(&st)->window_count, 5);
	ck_assert_uint_eq(t_live(&st)->window_sum_us, 500);
	mtd_lb_stats_fini(&st);
}
END_TEST

START_TEST(peak_ewma_avoids_slow)
{
	struct t_set s;
	struct mtd_lb_picker *p;
	uint64_t counts[T_MAX_EPS];

	t_set_init(&s, 3, NULL);
	p = t_picker("PEAK_EWMA", &s, NULL);
	feed(p, 0, true, 1000, SEC, 5);
	feed(p, 1, true, 1000, SEC, 5);
	feed(p, 2, true, 10000, SEC, 5);
	/* The slow one only wins when drawn against itself: never, since
	 * the two candidates are distinct. */
	t_count(p, &s, counts, 30000);
	ck_assert_uint_eq(counts[2], 0);
	ck_assert_uint_gt(counts[0], 12000);
	ck_assert_uint_gt(counts[1], 12000);
	mtd_lb_picker_free(p);
	t_set_fini(&s);
}
END_TEST

START_TEST(peak_ewma_fast_failure_not_attractive)
{
	struct t_set s;
	struct mtd_lb_picker *p;
	uint64_t counts[T_MAX_EPS];

	t_set_init(&s, 2, NULL);
	p = t_picker("PEAK_EWMA", &s, NULL);
	feed(p, 0, true, 20000, SEC, 5); /* slow but working */
	feed(p, 1, false, 10, SEC, 5);   /* fails in 10 us */
	t_count(p, &s, counts, 1000);
	ck_assert_uint_eq(counts[0], 1000);
	mtd_lb_picker_free(p);
	t_set_fini(&s);
}
END_TEST

START_TEST(peak_ewma_load_counts)
{
	struct t_set s;
	struct mtd_lb_picker *p;
	struct mtd_lb_pick_ctx ctx;

	t_set_init(&s, 2, NULL);
	p = t_picker("PEAK_EWMA", &s, NULL);
	feed(p, 0, true, 1000, SEC, 3);
	feed(p, 1, true, 3000, SEC, 3);
	ctx = t_ctx(&s);
	ctx.now_ns = SEC;
	ck_assert_int_eq(mtd_lb_pick(p, &ctx), 0);
	/* 1000 x (3 + 1) > 3000 x 1 */
	atomic_store(&t_live(&s.stats[0])->active, 3);
	ck_assert_int_eq(mtd_lb_pick(p, &ctx), 1);
	t_exclude(&s, 1);
	ck_assert_int_eq(mtd_lb_pick(p, &ctx), 0);
	t_exclude(&s, 0);
	ck_assert_int_eq(mtd_lb_pick(p, &ctx), -1);
	mtd_lb_picker_free(p);
	t_set_fini(&s);
}
END_TEST

START_TEST(wrt_round_robin_then_inverse_latency)
{
	struct t_set s;
	struct mtd_lb_picker *p;
	uint64_t counts[T_MAX_EPS];
	/* latencies 1, 2, 4 ms -> weights 4:2:1 */
	double share[3] = {4 / 7.0, 2 / 7.0, 1 / 7.0};

	t_set_init(&s, 3, NULL);
	p = t_picker("WEIGHTED_RESPONSE_TIME", &s, NULL);
	/* No data: exact round robin. */
	t_count(p, &s, counts, 3000);
	for (int i = 0; i < 3; i++)
		ck_assert_uint_eq(counts[i], 1000);
	feed(p, 0, true, 1000, SEC, 10);
	feed(p, 1, true, 2000, SEC, 10);
	feed(p, 2, true, 4000, SEC, 10);
	/* Still round robin until the background recompute runs. */
	t_count(p, &s, counts, 3000);
	ck_assert_uint_eq(counts[2], 1000);
	mtd_lb_tick(p, 1000000, SEC);
	t_assert_shares(p, &s, share, 140000);
	mtd_lb_picker_free(p);
	t_set_fini(&s);
}
END_TEST

START_TEST(wrt_new_picker_keeps_weights_and_failures_count)
{
	struct t_set s;
	struct mtd_lb_picker *p;
	uint64_t counts[T_MAX_EPS];
	double share[2] = {0.5, 0.5};

	t_set_init(&s, 2, NULL);
	p = t_picker("WEIGHTED_RESPONSE_TIME", &s, NULL);
	feed(p, 0, true, 1000, SEC, 10);
	feed(p, 1, false, 1, SEC, 10);
	mtd_lb_picker_free(p);
	/* A new picker (membership change) starts from the lifetime
	 * figures: the fast-failing endpoint is treated as very slow. */
	p = t_picker("WEIGHTED_RESPONSE_TIME", &s, NULL);
	t_count(p, &s, counts, 10000);
	ck_assert_uint_gt(counts[0], 9900);
	mtd_lb_picker_free(p);
	/* Equal latency: even. */
	t_set_fini(&s);
	t_set_init(&s, 2, NULL);
	p = t_picker("WEIGHTED_RESPONSE_TIME", &s, NULL);
	feed(p, 0, true, 500, SEC, 10);
	feed(p, 1, true, 500, SEC, 10);
	mtd_lb_tick(p, 1000000, SEC);
	t_assert_shares(p, &s, share, 50000);
	mtd_lb_picker_free(p);
	t_set_fini(&s);
}
END_TEST

/* The decay runs on the time between ticks by the monotonic clock: a
 * wall-clock step back at a tick does not freeze the averages. */
START_TEST(wrt_decay_ignores_a_wall_clock_step)
{
	struct t_set s;
	struct mtd_lb_picker *p;
	uint64_t counts[T_MAX_EPS];

	t_set_init(&s, 2, NULL);
	p = t_picker("WEIGHTED_RESPONSE_TIME", &s, NULL);
	feed(p, 0, true, 1000, SEC, 10);
	feed(p, 1, true, 1000, SEC, 10);
	mtd_lb_tick(p, 1000000000, SEC);
	/* Endpoint 1 slows down 8x; a second later by the monotonic clock,
	 * an hour earlier by the wall clock. */
	feed(p, 0, true, 1000, 2 * SEC, 10);
	feed(p, 1, true, 8000, 2 * SEC, 10);
	mtd_lb_tick(p, 1000000000 - 3600000, 2 * SEC);
	t_count(p, &s, counts, 10000);
	ck_assert_msg(counts[0] > 5800, "endpoint 0 got %llu of 10000", (unsigned long long)counts[0]);
	mtd_lb_picker_free(p);
	t_set_fini(&s);
}
END_TEST

static Suite *latency_suite(void)
{
	Suite *s = suite_create("lb_latency");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, live_figures_made_at_the_first_pick);
	tcase_add_test(tc, ewma_peak_and_decay);
	tcase_add_test(tc, ewma_failure_is_slow);
	tcase_add_test(tc, window_halves_each_slide);
	tcase_add_test(tc, peak_ewma_avoids_slow);
	tcase_add_test(tc, peak_ewma_fast_failure_not_attractive);
	tcase_add_test(tc, peak_ewma_load_counts);
	tcase_add_test(tc, wrt_round_robin_then_inverse_latency);
	tcase_add_test(tc, wrt_new_picker_keeps_weights_and_failures_count);
	tcase_add_test(tc, wrt_decay_ignores_a_wall_clock_step);
	suite_add_tcase(s, tc);
	return s;
}

T_RUN(latency_suite)
