/* Unit tests for lib/limit: the token bucket's refill arithmetic, its
 * burst, a clock that jumps either way, and threads taking at once. */
#include "config.h"

#include <check.h>
#include <pthread.h>
#include <stdint.h>

#include "limit/limit.h"

#define S  1000000000LL
#define MS 1000000LL

static unsigned take_n(struct mtd_limit_bucket *b, int64_t now, unsigned n)
{
	unsigned ok = 0;
	for (unsigned i = 0; i < n; i++)
		ok += mtd_limit_take(b, now);
	return ok;
}

START_TEST(starts_full_then_refills_at_the_rate)
{
	struct mtd_limit_bucket b;
	int64_t t0 = 5 * S;
	mtd_limit_bucket_init(&b, 50, 10, t0);
	ck_assert_uint_eq(mtd_limit_tokens(&b, t0), 10);
	ck_assert_uint_eq(take_n(&b, t0, 100), 10); /* the burst, no more */
	ck_assert_uint_eq(mtd_limit_tokens(&b, t0), 0);
	/* 50/s: one token every 20 ms, none before. */
	ck_assert(!mtd_limit_take(&b, t0 + 19 * MS));
	ck_assert(mtd_limit_take(&b, t0 + 20 * MS));
	ck_assert(!mtd_limit_take(&b, t0 + 39 * MS));
	ck_assert(mtd_limit_take(&b, t0 + 40 * MS));
	/* A second later: 50 more tokens, capped at the burst of 10. */
	ck_assert_uint_eq(mtd_limit_tokens(&b, t0 + 40 * MS + S), 10);
	ck_assert_uint_eq(take_n(&b, t0 + 40 * MS + S, 100), 10);
}
END_TEST

START_TEST(ok_calls_are_burst_plus_rate_times_seconds)
{
	/* A call every ms for 10 s at 50/s burst 10: 10 + 50 x 10, exactly
	 * (the integration test's bound without its 10 % slack). */
	struct mtd_limit_bucket b;
	int64_t t0 = 1000 * S;
	mtd_limit_bucket_init(&b, 50, 10, t0);
	unsigned ok = 0;
	for (int64_t t = t0; t <= t0 + 10 * S; t += MS)
		ok += mtd_limit_take(&b, t);
	ck_assert_uint_eq(ok, 10 + 50 * 10);
	/* A rate that does not divide a second: 7/s, interval rounded down,
	 * so over 100 s at most one token more than 7 x 100 + burst. */
	mtd_limit_bucket_init(&b, 7, 1, t0);
	ok = 0;
	for (int64_t t = t0; t <= t0 + 100 * S; t += MS)
		ok += mtd_limit_take(&b, t);
	ck_assert_uint_ge(ok, 700);
	ck_assert_uint_le(ok, 702);
}
END_TEST

START_TEST(clock_jumping_forward_fills_to_burst_only)
{
	struct mtd_limit_bucket b;
	int64_t t0 = 3 * S;
	mtd_limit_bucket_init(&b, 100, 5, t0);
	ck_assert_uint_eq(take_n(&b, t0, 5), 5);
	/* An hour later (a suspend, a clock step): full, not 360,000. */
	int64_t t1 = t0 + 3600 * S;
	ck_assert_uint_eq(mtd_limit_tokens(&b, t1), 5);
	ck_assert_uint_eq(take_n(&b, t1, 1000), 5);
	ck_assert_uint_eq(mtd_limit_tokens(&b, t1), 0);
	/* Near the end of int64 nanoseconds: no overflow either. */
	int64_t far = INT64_MAX - 10 * S;
	ck_assert_uint_eq(mtd_limit_tokens(&b, far), 5);
	ck_assert_uint_eq(take_n(&b, far, 10), 5);
}
END_TEST

START_TEST(clock_jumping_back_mints_nothing_and_never_goes_negative)
{
	struct mtd_limit_bucket b;
	int64_t t0 = 100 * S;
	mtd_limit_bucket_init(&b, 10, 3, t0);
	ck_assert_uint_eq(take_n(&b, t0, 3), 3);
	/* Back 50 s: no token, and tokens() reads 0, not a negative count
	 * wrapped to a huge one. */
	ck_assert_uint_eq(mtd_limit_tokens(&b, t0 - 50 * S), 0);
	ck_assert_uint_eq(take_n(&b, t0 - 50 * S, 100), 0);
	ck_assert_uint_eq(take_n(&b, t0 - 1, 100), 0);
	/* Nothing was written meanwhile: once past the last take again, the
	 * refill resumes from it (one token per 100 ms). */
	ck_assert(!mtd_limit_take(&b, t0 + 99 * MS));
	ck_assert(mtd_limit_take(&b, t0 + 100 * MS));
	/* Back and forth: never more than the rate over the real span. */
	unsigned ok = 0;
	for (int i = 0; i < 1000; i++) {
		int64_t t = t0 + 100 * MS + (int64_t)i * MS;
		ok += mtd_limit_take(&b, (i % 2) ? t - 5 * S : t);
	}
	/* 1 s of clock (100 ms .. 1.1 s): 10 tokens at most. */
	ck_assert_uint_le(ok, 10);
	ck_assert_uint_ge(ok, 9);
}
END_TEST

START_TEST(bounds_are_clamped)
{
	struct mtd_limit_bucket b;
	mtd_limit_bucket_init(&b, 0, 0, 0);
	ck_assert_uint_eq(b.rate, 1);
	ck_assert_uint_eq(b.burst, 1);
	mtd_limit_bucket_init(&b, 2000000000u, 2000000000u, 0);
	ck_assert_uint_eq(b.rate, MTD_LIMIT_MAX_RATE);
	ck_assert_uint_eq(b.burst, MTD_LIMIT_MAX_BURST);
	ck_assert_int_eq(b.interval_ns, 1000);
	/* At the largest rate, a second gives exactly a million tokens. */
	unsigned ok = 0;
	mtd_limit_bucket_init(&b, MTD_LIMIT_MAX_RATE, 1, 0);
	for (int64_t t = 0; t < S; t += 250)
		ok += mtd_limit_take(&b, t);
	ck_assert_uint_eq(ok, 1000000);
}
END_TEST

/* Threads taking at once from one bucket: exactly the tokens there are
 * (no lost update, none given twice). */
#define THREADS 4
static struct mtd_limit_bucket shared;
static _Atomic int64_t shared_now;
static _Atomic unsigned taken;

static void *taker(void *arg)
{
	(void)arg;
	for (int i = 0; i < 200000; i++) {
		int64_t now = atomic_load_explicit(&shared_now, memory_order_relaxed);
		if (mtd_limit_take(&shared, now))
			atomic_fetch_add(&taken, 1);
		if (i % 1000 == 0)
			atomic_fetch_add(&shared_now, MS); /* 1 token per ms at 1000/s */
	}
	return NULL;
}

/* A reload with new figures: the tokens left carry over, at most the new
 * burst, and refill at the new rate. */
START_TEST(new_figures_carry_the_tokens_left)
{
	struct mtd_limit_bucket a, b;
	int64_t t = 5 * S;

	mtd_limit_bucket_init(&a, 10, 10, t);
	for (int i = 0; i < 10; i++)
		ck_assert(mtd_limit_take(&a, t));
	/* Empty, to a bucket of 100 a second, burst 100: still empty. */
	mtd_limit_bucket_init_from(&b, 100, 100, &a, t);
	ck_assert_uint_eq(mtd_limit_tokens(&b, t), 0);
	ck_assert(!mtd_limit_take(&b, t));
	ck_assert(mtd_limit_take(&b, t + S / 100)); /* the new rate */
	/* 7 left, to a burst of 3: 3. */
	mtd_limit_bucket_init(&a, 10, 10, t);
	for (int i = 0; i < 3; i++)
		ck_assert(mtd_limit_take(&a, t));
	mtd_limit_bucket_init_from(&b, 10, 3, &a, t);
	ck_assert_uint_eq(mtd_limit_tokens(&b, t), 3);
	/* 7 left, to a burst of 50: 7, not 50. */
	mtd_limit_bucket_init_from(&b, 10, 50, &a, t);
	ck_assert_uint_eq(mtd_limit_tokens(&b, t), 7);
	for (int i = 0; i < 7; i++)
		ck_assert(mtd_limit_take(&b, t));
	ck_assert(!mtd_limit_take(&b, t));
}
END_TEST

START_TEST(threads_share_one_bucket_exactly)
{
	pthread_t t[THREADS];
	atomic_store(&shared_now, 7 * S);
	mtd_limit_bucket_init(&shared, 1000, 50, 7 * S);
	for (int i = 0; i < THREADS; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, taker, NULL), 0);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	int64_t elapsed = atomic_load(&shared_now) - 7 * S;
	/* burst + rate x elapsed bounds what was taken; and every thread
	 * hammers, so nearly all of it was. */
	unsigned max = 50 + (unsigned)(elapsed / MS);
	ck_assert_uint_le(atomic_load(&taken), max);
	ck_assert_uint_ge(atomic_load(&taken) + mtd_limit_tokens(&shared, atomic_load(&shared_now)) + THREADS * 2, max);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("limit");
	TCase *tc = tcase_create("bucket");
	tcase_add_test(tc, starts_full_then_refills_at_the_rate);
	tcase_add_test(tc, ok_calls_are_burst_plus_rate_times_seconds);
	tcase_add_test(tc, clock_jumping_forward_fills_to_burst_only);
	tcase_add_test(tc, clock_jumping_back_mints_nothing_and_never_goes_negative);
	tcase_add_test(tc, bounds_are_clamped);
	tcase_add_test(tc, new_figures_carry_the_tokens_left);
	tcase_add_test(tc, threads_share_one_bucket_exactly);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
