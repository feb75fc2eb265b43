/* ROUND_ROBIN: exact rotation, exclusions, drained (weight 0) endpoints,
 * n == 1, empty set, and the registry. */
#include "config.h"

#include <pthread.h>

#include "lb-test.h"

static Suite *rr_suite(void);

START_TEST(registry_names)
{
	static const char *names[] = {
	        "RANDOM",
	        "WEIGHTED_RANDOM",
	        "ROUND_ROBIN",
	        "WEIGHTED_ROUND_ROBIN",
	        "SMOOTH_WEIGHTED_ROUND_ROBIN",
	        "LEAST_ACTIVE",
	        "LEAST_REQUEST",
	        "WEIGHTED_RESPONSE_TIME",
	        "PEAK_EWMA",
	        "SHORTEST_RESPONSE",
	        "CONSISTENT_HASH",
	        "MAGLEV",
	};
	size_t n;
	const struct mtd_lb_ops *const *all = mtd_lb_all(&n);

	ck_assert_ptr_nonnull(mtd_lb_find("ROUND_ROBIN"));
	ck_assert_ptr_null(mtd_lb_find("round_robin"));
	ck_assert_ptr_null(mtd_lb_find(NULL));
	ck_assert_ptr_null(mtd_lb_find("POLICY_UNSPECIFIED"));
	ck_assert_uint_ge(n, 1);
	for (size_t i = 0; i < n; i++) {
		ck_assert_ptr_eq(mtd_lb_find(all[i]->name), all[i]);
		ck_assert_ptr_nonnull(all[i]->init);
		ck_assert_ptr_nonnull(all[i]->pick);
		ck_assert_ptr_nonnull(all[i]->destroy);
	}
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		const struct mtd_lb_ops *o = mtd_lb_find(names[i]);

		if (o != NULL)
			ck_assert_str_eq(o->name, names[i]);
	}
}
END_TEST

START_TEST(rotation_exact)
{
	struct t_set s;
	uint64_t counts[T_MAX_EPS];
	struct mtd_lb_picker *p;
	struct mtd_lb_pick_ctx ctx;
	int first, prev;

	t_set_init(&s, 7, NULL);
	p = t_picker("ROUND_ROBIN", &s, NULL);
	ctx = t_ctx(&s);
	/* Consecutive picks walk the endpoints in order. */
	first = prev = mtd_lb_pick(p, &ctx);
	for (int k = 1; k < 70; k++) {
		int i = mtd_lb_pick(p, &ctx);

		ck_assert_int_eq(i, (prev + 1) % 7);
		prev = i;
	}
	ck_assert_int_eq(prev, (first + 69) % 7);
	/* And any multiple of n picks is exactly even. */
	t_count(p, &s, counts, 7000);
	for (size_t i = 0; i < 7; i++)
		ck_assert_uint_eq(counts[i], 1000);
	mtd_lb_picker_free(p);
}
END_TEST

START_TEST(excluded_and_drained)
{
	int32_t w[5] = {100, 0, 100, -5, 100};
	struct t_set s;
	uint64_t counts[T_MAX_EPS];
	struct mtd_lb_picker *p;
	struct mtd_lb_pick_ctx ctx;

	t_set_init(&s, 5, w);
	p = t_picker("ROUND_ROBIN", &s, NULL);
	/* Drained endpoints get nothing while positive ones are eligible. */
	t_count(p, &s, counts, 3000);
	ck_assert_uint_eq(counts[0], 1000);
	ck_assert_uint_eq(counts[1], 0);
	ck_assert_uint_eq(counts[2], 1000);
	ck_assert_uint_eq(counts[3], 0);
	ck_assert_uint_eq(counts[4], 1000);
	/* Excluding one positive endpoint never returns it. */
	t_exclude(&s, 2);
	t_count(p, &s, counts, 3000);
	ck_assert_uint_eq(counts[2], 0);
	ck_assert_uint_eq(counts[0] + counts[4], 3000);
	/* All positive ones excluded: the drained ones serve. */
	t_exclude(&s, 0);
	t_exclude(&s, 4);
	t_count(p, &s, counts, 100);
	ck_assert_uint_eq(counts[1] + counts[3], 100);
	/* All excluded: -1. */
	t_exclude(&s, 1);
	t_exclude(&s, 3);
	ctx = t_ctx(&s);
	ck_assert_int_eq(mtd_lb_pick(p, &ctx), -1);
	mtd_lb_picker_free(p);
}
END_TEST

START_TEST(single_and_empty)
{
	struct t_set s;
	struct mtd_lb_config cfg;
	struct mtd_lb_picker *p;
	struct mtd_lb_pick_ctx ctx;

	t_set_init(&s, 1, NULL);
	p = t_picker("ROUND_ROBIN", &s, NULL);
	ctx = t_ctx(&s);
	for (int k = 0; k < 10; k++)
		ck_assert_int_eq(mtd_lb_pick(p, &ctx), 0);
	t_exclude(&s, 0);
	ck_assert_int_eq(mtd_lb_pick(p, &ctx), -1);
	mtd_lb_picker_free(p);

	mtd_lb_config_defaults(&cfg, mtd_lb_find("ROUND_ROBIN"));
	p = mtd_lb_picker_new(&cfg, NULL, 0, NULL);
	ck_assert_ptr_nonnull(p);
	ctx.excluded = NULL;
	ck_assert_int_eq(mtd_lb_pick(p, &ctx), -1);
	mtd_lb_picker_free(p);
	mtd_lb_picker_free(NULL);
}
END_TEST

START_TEST(config_check)
{
	struct mtd_lb_config cfg;
	const char *field = NULL;

	mtd_lb_config_defaults(&cfg, NULL);
	ck_assert_int_ne(mtd_lb_config_check(&cfg, &field), 0);
	ck_assert_str_eq(field, "policy");
	mtd_lb_config_defaults(&cfg, mtd_lb_find("ROUND_ROBIN"));
	ck_assert_int_eq(mtd_lb_config_check(&cfg, &field), 0);
	ck_assert_ptr_null(field);
}
END_TEST

START_TEST(carries_position)
{
	struct t_set s;
	struct mtd_lb_config cfg;
	struct mtd_lb_picker *a, *b;
	struct mtd_lb_pick_ctx ctx;
	int last;

	t_set_init(&s, 4, NULL);
	a = t_picker("ROUND_ROBIN", &s, NULL);
	ctx = t_ctx(&s);
	last = mtd_lb_pick(a, &ctx);
	mtd_lb_config_defaults(&cfg, mtd_lb_find("ROUND_ROBIN"));
	b = mtd_lb_picker_new(&cfg, s.eps, s.n, a);
	ck_assert_ptr_nonnull(b);
	mtd_lb_picker_free(a);
	ck_assert_int_eq(mtd_lb_pick(b, &ctx), (last + 1) % 4);
	mtd_lb_picker_free(b);
}
END_TEST

/* Concurrent picks from several workers: the shared counter keeps the
 * global rotation exact (no lost or doubled turns). */
#define THREADS    4
#define PER_THREAD 60000

struct worker_arg {
	struct mtd_lb_picker *p;
	struct t_set *s;
	unsigned worker;
	uint64_t counts[8];
};

static void *worker_main(void *arg)
{
	struct worker_arg *w = arg;
	uint64_t rng = w->worker + 1;
	struct mtd_lb_pick_ctx ctx = {.worker = w->worker, .rng = &rng};

	for (int k = 0; k < PER_THREAD; k++) {
		int i = mtd_lb_pick(w->p, &ctx);

		if (i >= 0 && i < 8)
			w->counts[i]++;
	}
	return NULL;
}

START_TEST(concurrent_workers)
{
	static const char *const names[] = {"ROUND_ROBIN", "WEIGHTED_ROUND_ROBIN", "SMOOTH_WEIGHTED_ROUND_ROBIN"};
	static struct t_set s;
	struct worker_arg args[THREADS];
	pthread_t th[THREADS];
	struct mtd_lb_config cfg;

	for (size_t k = 0; k < 3; k++) {
		struct mtd_lb_picker *p;

		t_set_init(&s, 6, NULL);
		mtd_lb_config_defaults(&cfg, mtd_lb_find(names[k]));
		cfg.n_workers = THREADS;
		p = mtd_lb_picker_new(&cfg, s.eps, s.n, NULL);
		ck_assert_ptr_nonnull(p);
		for (unsigned t = 0; t < THREADS; t++) {
			args[t] = (struct worker_arg){.p = p, .s = &s, .worker = t};
			ck_assert_int_eq(pthread_create(&th[t], NULL, worker_main, &args[t]), 0);
		}
		for (unsigned t = 0; t < THREADS; t++)
			pthread_join(th[t], NULL);
		/* 240,000 picks over 6 endpoints: exactly 40,000 each. */
		for (size_t i = 0; i < 6; i++) {
			uint64_t sum = 0;

			for (unsigned t = 0; t < THREADS; t++)
				sum += args[t].counts[i];
			ck_assert_msg(sum == THREADS * PER_THREAD / 6, "%s: endpoint %zu got %llu", names[k], i,
			              (unsigned long long)sum);
		}
		mtd_lb_picker_free(p);
	}
}
END_TEST

static Suite *rr_suite(void)
{
	Suite *s = suite_create("lb_round_robin");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, registry_names);
	tcase_add_test(tc, rotation_exact);
	tcase_add_test(tc, excluded_and_drained);
	tcase_add_test(tc, single_and_empty);
	tcase_add_test(tc, config_check);
	tcase_add_test(tc, carries_position);
	tcase_add_test(tc, concurrent_workers);
	suite_add_tcase(s, tc);
	return s;
}

T_RUN(rr_suite)
