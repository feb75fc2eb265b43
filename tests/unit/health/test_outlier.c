/* Unit tests for lib/health/outlier: ejection arithmetic, the caps, the
 * percentage rule, panic, state carried across membership changes, and
 * concurrent reports (run under TSan too: HACKING.md). */
#include "config.h"

#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "health/outlier.h"

static const char *ids10[] = {"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80", "10.0.0.5:80",
                              "10.0.0.6:80", "10.0.0.7:80", "10.0.0.8:80", "10.0.0.9:80", "10.0.0.10:80"};

static struct mtd_outlier_config cfg_on(void)
{
	struct mtd_outlier_config c;
	mtd_outlier_config_defaults(&c);
	c.enabled = true;
	return c;
}

static bool bit(const _Atomic uint64_t *b, size_t i)
{
	return b && (atomic_load(&b[i / 64]) >> (i % 64)) & 1;
}

START_TEST(consecutive_failures_eject)
{
	struct mtd_outlier_config c = cfg_on();
	c.max_ejection_percent = 50;
	struct mtd_outlier_set *s = mtd_outlier_set_new(&c, ids10, 4, NULL, 0);
	ck_assert_ptr_nonnull(s);
	for (int i = 0; i < 4; i++)
		ck_assert(!mtd_outlier_report(s, 1, true, 100));
	ck_assert(!mtd_outlier_is_ejected(s, 1));
	ck_assert_ptr_null(mtd_outlier_excluded(s));
	ck_assert(mtd_outlier_report(s, 1, true, 100)); /* the 5th in a row */
	ck_assert(mtd_outlier_is_ejected(s, 1));
	const _Atomic uint64_t *ex = mtd_outlier_excluded(s);
	ck_assert(bit(ex, 1) && !bit(ex, 0) && !bit(ex, 2));
	/* A call picked before the ejection ending now says nothing new. */
	ck_assert(!mtd_outlier_report(s, 1, true, 200));
	mtd_outlier_set_free(s);
}
END_TEST

START_TEST(success_resets_the_run)
{
	struct mtd_outlier_config c = cfg_on();
	c.max_ejection_percent = 50;
	struct mtd_outlier_set *s = mtd_outlier_set_new(&c, ids10, 4, NULL, 0);
	for (int round = 0; round < 10; round++) {
		for (int i = 0; i < 4; i++)
			ck_assert(!mtd_outlier_report(s, 0, true, 1));
		ck_assert(!mtd_outlier_report(s, 0, false, 1));
	}
	ck_assert(!mtd_outlier_is_ejected(s, 0));
	mtd_outlier_set_free(s);
}
END_TEST

START_TEST(max_ejection_percent_caps)
{
	struct mtd_outlier_config c = cfg_on();
	c.max_ejection_percent = 20;
	c.consecutive_failures = 1;
	struct mtd_outlier_set *s = mtd_outlier_set_new(&c, ids10, 10, NULL, 0);
	size_t ejected = 0;
	for (size_t i = 0; i < 10; i++)
		ejected += mtd_outlier_report(s, i, true, 1);
	ck_assert_uint_eq(ejected, 2);
	ck_assert_uint_eq(atomic_load(&s->n_ejected), 2);
	mtd_outlier_set_free(s);
	/* Rounding down to zero still allows one, never the last one. */
	ck_assert_uint_eq(mtd_outlier_max_ejected(&c, 3), 1);
	ck_assert_uint_eq(mtd_outlier_max_ejected(&c, 1), 0);
	c.max_ejection_percent = 0;
	ck_assert_uint_eq(mtd_outlier_max_ejected(&c, 10), 0);
	c.max_ejection_percent = 100;
	ck_assert_uint_eq(mtd_outlier_max_ejected(&c, 10), 10);
	c.enabled = false;
	ck_assert_uint_eq(mtd_outlier_max_ejected(&c, 10), 0);
}
END_TEST

START_TEST(ejection_time_grows_and_is_capped)
{
	struct mtd_outlier_config c = cfg_on();
	c.base_ejection_ms = 30000;
	c.max_ejection_ms = 100000;
	ck_assert_int_eq(mtd_outlier_ejection_ms(&c, 1), 30000);
	ck_assert_int_eq(mtd_outlier_ejection_ms(&c, 3), 90000);
	ck_assert_int_eq(mtd_outlier_ejection_ms(&c, 4), 100000);
	ck_assert_int_eq(mtd_outlier_ejection_ms(&c, 4000000000u), 100000);

	c.consecutive_failures = 1;
	c.max_ejection_percent = 50;
	c.interval_ms = 1000000; /* no decay during this test */
	struct mtd_outlier_set *s = mtd_outlier_set_new(&c, ids10, 2, NULL, 0);
	ck_assert(mtd_outlier_report(s, 0, true, 1000));
	ck_assert_uint_eq(mtd_outlier_tick(s, 1000 + 29999), 0);
	ck_assert(mtd_outlier_is_ejected(s, 0));
	ck_assert_uint_eq(mtd_outlier_tick(s, 1000 + 30000), 1);
	ck_assert(!mtd_outlier_is_ejected(s, 0));
	ck_assert_ptr_null(mtd_outlier_excluded(s));
	/* Second ejection: twice as long. */
	ck_assert(mtd_outlier_report(s, 0, true, 40000));
	mtd_outlier_tick(s, 40000 + 59999);
	ck_assert(mtd_outlier_is_ejected(s, 0));
	mtd_outlier_tick(s, 40000 + 60000);
	ck_assert(!mtd_outlier_is_ejected(s, 0));
	mtd_outlier_set_free(s);
}
END_TEST

START_TEST(times_ejected_decays_while_serving)
{
	struct mtd_outlier_config c = cfg_on();
	c.consecutive_failures = 1;
	c.max_ejection_percent = 50;
	c.interval_ms = 10000;
	struct mtd_outlier_set *s = mtd_outlier_set_new(&c, ids10, 2, NULL, 0);
	ck_assert(mtd_outlier_report(s, 0, true, 0));
	mtd_outlier_tick(s, 30000); /* back, times_ejected 1 -> 0 at this interval */
	ck_assert(!mtd_outlier_is_ejected(s, 0));
	ck_assert_uint_eq(atomic_load(&s->entries[0].times_ejected), 0);
	ck_assert(mtd_outlier_report(s, 0, true, 30001));
	ck_assert_int_eq(atomic_load(&s->entries[0].ejected_until_ms), 30001 + 30000);
	mtd_outlier_set_free(s);
}
END_TEST

START_TEST(failure_percentage_rule)
{
	struct mtd_outlier_config c = cfg_on();
	c.consecutive_failures = 0; /* only the percentage */
	c.failure_percentage = 50;
	c.min_requests = 10;
	c.max_ejection_percent = 50;
	c.interval_ms = 10000;
	struct mtd_outlier_set *s = mtd_outlier_set_new(&c, ids10, 4, NULL, 0);
	/* Endpoint 0: 6 of 10 failed; endpoint 1: 4 of 10; endpoint 2: 5 of 9
	 * (too few calls). */
	for (int i = 0; i < 10; i++) {
		mtd_outlier_report(s, 0, i < 6, 5);
		mtd_outlier_report(s, 1, i < 4, 5);
		if (i < 9)
			mtd_outlier_report(s, 2, i < 5, 5);
	}
	ck_assert_uint_eq(mtd_outlier_tick(s, 9999), 0); /* not an interval yet */
	ck_assert(!mtd_outlier_is_ejected(s, 0));
	ck_assert_uint_eq(mtd_outlier_tick(s, 10000), 1);
	ck_assert(mtd_outlier_is_ejected(s, 0));
	ck_assert(!mtd_outlier_is_ejected(s, 1));
	ck_assert(!mtd_outlier_is_ejected(s, 2));
	/* The window restarts: endpoint 1 alone is not judged on old calls. */
	ck_assert_uint_eq(atomic_load(&s->entries[1].win_calls), 0);
	mtd_outlier_set_free(s);
}
END_TEST

START_TEST(panic_uses_everyone)
{
	struct mtd_outlier_config c = cfg_on();
	c.consecutive_failures = 1;
	c.max_ejection_percent = 100;
	c.panic_percent = 50;
	struct mtd_outlier_set *s = mtd_outlier_set_new(&c, ids10, 4, NULL, 0);
	ck_assert(mtd_outlier_report(s, 0, true, 1));
	ck_assert(mtd_outlier_report(s, 1, true, 1));
	ck_assert_ptr_nonnull(mtd_outlier_excluded(s)); /* 2 of 4 serving: 50 % */
	ck_assert(mtd_outlier_report(s, 2, true, 1));
	ck_assert_ptr_null(mtd_outlier_excluded(s)); /* 1 of 4: panic */
	ck_assert(mtd_outlier_is_ejected(s, 2));
	mtd_outlier_set_free(s);
}
END_TEST

START_TEST(state_survives_membership_changes)
{
	struct mtd_outlier_config c = cfg_on();
	c.consecutive_failures = 3;
	c.max_ejection_percent = 50;
	struct mtd_outlier_set *a = mtd_outlier_set_new(&c, ids10, 4, NULL, 0);
	for (int i = 0; i < 3; i++)
		mtd_outlier_report(a, 2, true, 10);
	mtd_outlier_report(a, 3, true, 10);
	mtd_outlier_report(a, 3, true, 10);
	ck_assert(mtd_outlier_is_ejected(a, 2));
	/* New set: endpoint 0 leaves, 4 joins; order changes. */
	const char *ids[] = {ids10[3], ids10[4], ids10[2], ids10[1]};
	struct mtd_outlier_set *b = mtd_outlier_set_new(&c, ids, 4, a, 20);
	mtd_outlier_set_free(a);
	ck_assert(mtd_outlier_is_ejected(b, 2)); /* 10.0.0.3 stays ejected */
	ck_assert(bit(mtd_outlier_excluded(b), 2));
	ck_assert_uint_eq(atomic_load(&b->n_ejected), 1);
	ck_assert(!mtd_outlier_is_ejected(b, 1)); /* the newcomer is clean */
	/* 10.0.0.4 kept its run of two: one more failure ejects it. */
	ck_assert(mtd_outlier_report(b, 0, true, 30));
	mtd_outlier_set_free(b);
}
END_TEST

struct hammer {
	struct mtd_outlier_set *s;
	unsigned seed;
};

static void *hammer_main(void *arg)
{
	struct hammer *h = arg;
	for (int i = 0; i < 20000; i++) {
		h->seed = h->seed * 1103515245u + 12345u;
		size_t idx = (h->seed >> 16) % h->s->n;
		mtd_outlier_report(h->s, idx, (h->seed >> 8) % 4 != 0, i);
		const _Atomic uint64_t *ex = mtd_outlier_excluded(h->s);
		(void)bit(ex, idx);
	}
	return NULL;
}

START_TEST(concurrent_reports_respect_the_cap)
{
	struct mtd_outlier_config c = cfg_on();
	c.consecutive_failures = 2;
	c.max_ejection_percent = 25;
	c.base_ejection_ms = 5;
	c.max_ejection_ms = 50;
	struct mtd_outlier_set *s = mtd_outlier_set_new(&c, ids10, 8, NULL, 0);
	pthread_t t[4];
	struct hammer h[4];
	for (int i = 0; i < 4; i++) {
		h[i] = (struct hammer){s, (unsigned)i * 7919u + 1};
		ck_assert_int_eq(pthread_create(&t[i], NULL, hammer_main, &h[i]), 0);
	}
	uint32_t most = 0;
	for (int64_t now = 0; now < 20000; now += 7) {
		mtd_outlier_tick(s, now); /* the control thread, concurrently */
		uint32_t k = atomic_load(&s->n_ejected);
		most = k > most ? k : most;
	}
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	ck_assert_uint_le(most, 2);
	size_t really = 0;
	for (size_t i = 0; i < s->n; i++)
		really += mtd_outlier_is_ejected(s, i);
	ck_assert_uint_eq(really, atomic_load(&s->n_ejected));
	mtd_outlier_set_free(s);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("health/outlier");
	TCase *tc = tcase_create("outlier");
	tcase_add_test(tc, consecutive_failures_eject);
	tcase_add_test(tc, success_resets_the_run);
	tcase_add_test(tc, max_ejection_percent_caps);
	tcase_add_test(tc, ejection_time_grows_and_is_capped);
	tcase_add_test(tc, times_ejected_decays_while_serving);
	tcase_add_test(tc, failure_percentage_rule);
	tcase_add_test(tc, panic_uses_everyone);
	tcase_add_test(tc, state_survives_membership_changes);
	tcase_add_test(tc, concurrent_reports_respect_the_cap);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
