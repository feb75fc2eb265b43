/* Unit tests for lib/fault: backoff arithmetic, pushback parsing, the retry
 * budget, the attempt state machine and the policy's decisions. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fault/fault.h"

#define MS 1000000LL

/* ---- backoff ------------------------------------------------------------ */

START_TEST(backoff_bounds_and_growth)
{
	uint64_t rng = 12345;
	/* gRPC A6: the n-th retry waits in [0, min(max, base x 2^(n-1))). */
	static const struct {
		uint32_t n;
		int64_t cap_ms;
	} want[] = {{1, 25}, {2, 50}, {3, 100}, {4, 200}, {5, 250}, {6, 250}, {30, 250}, {4000000000u, 250}};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		int64_t lo = INT64_MAX, hi = -1;
		for (int k = 0; k < 2000; k++) {
			int64_t d = mtd_fault_backoff_ns(25, 250, want[i].n, &rng);
			ck_assert_int_ge(d, 0);
			ck_assert_int_lt(d, want[i].cap_ms * MS);
			lo = d < lo ? d : lo;
			hi = d > hi ? d : hi;
		}
		/* Jittered over the whole range, not a fixed value. */
		ck_assert_int_lt(lo, want[i].cap_ms * MS / 10);
		ck_assert_int_gt(hi, want[i].cap_ms * MS * 9 / 10);
	}
}
END_TEST

START_TEST(backoff_degenerate)
{
	uint64_t rng = 0; /* a zero state still yields numbers */
	ck_assert_int_eq(mtd_fault_backoff_ns(0, 250, 3, &rng), 0);
	ck_assert_int_eq(mtd_fault_backoff_ns(25, 250, 0, &rng), 0);
	/* max below base: base is the cap */
	for (int k = 0; k < 100; k++)
		ck_assert_int_lt(mtd_fault_backoff_ns(40, 10, 5, &rng), 40 * MS);
	ck_assert_uint_ne(rng, 0);
}
END_TEST

/* ---- pushback ----------------------------------------------------------- */

START_TEST(pushback_parse)
{
	int64_t ms = -5;
	ck_assert_int_eq(mtd_fault_pushback_parse("0", 1, &ms), 0);
	ck_assert_int_eq(ms, 0);
	ck_assert_int_eq(mtd_fault_pushback_parse("1500", 4, &ms), 0);
	ck_assert_int_eq(ms, 1500);
	ck_assert_int_eq(mtd_fault_pushback_parse("999999999999999999", 18, &ms), 0);
	ck_assert_int_eq(ms, 999999999999999999LL);
	static const char *bad[] = {"", "-1", "+1", "1.5", " 1", "1 ", "1s", "abc", "9999999999999999999"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(mtd_fault_pushback_parse(bad[i], strlen(bad[i]), &ms) == -EINVAL, "%s", bad[i]);
}
END_TEST

/* ---- retry budget ------------------------------------------------------- */

START_TEST(budget_ratio_exact)
{
	struct mtd_fault_budget b = {0};
	struct mtd_fault_budget_cfg cfg = {.set = true, .ratio = 0.5, .min_per_second = 0};
	unsigned granted = 0;
	/* Sequential calls each wanting one retry: floor(n x ratio) granted. */
	for (int i = 1; i <= 20; i++) {
		mtd_fault_budget_call(&b, 100);
		granted += mtd_fault_budget_take(&b, &cfg, 100);
		ck_assert_uint_eq(granted, (unsigned)(i / 2));
	}
	ck_assert_uint_eq(atomic_load(&b.spent), 10);
	ck_assert_uint_eq(atomic_load(&b.exhausted), 10);
}
END_TEST

START_TEST(budget_floor_and_outage)
{
	struct mtd_fault_budget b = {0};
	struct mtd_fault_budget_cfg cfg = {.set = true, .ratio = 0.2, .min_per_second = 1};
	/* No calls yet: the floor alone, min_per_second x window. */
	unsigned granted = 0;
	for (int i = 0; i < 100; i++)
		granted += mtd_fault_budget_take(&b, &cfg, 50);
	ck_assert_uint_eq(granted, MTD_FAULT_BUDGET_SLOTS);
	/* A full outage: 100 calls, each retried until refused. */
	for (int i = 0; i < 100; i++) {
		mtd_fault_budget_call(&b, 51);
		while (mtd_fault_budget_take(&b, &cfg, 51))
			granted++;
	}
	/* 0.2 x 100 + 10 = 30 retries in the window, never more. */
	ck_assert_uint_eq(granted, 30);
	ck_assert_uint_eq(atomic_load(&b.spent), 30);
}
END_TEST

START_TEST(budget_window_slides)
{
	struct mtd_fault_budget b = {0};
	struct mtd_fault_budget_cfg cfg = {.set = true, .ratio = 1.0, .min_per_second = 0};
	for (int i = 0; i < 10; i++)
		mtd_fault_budget_call(&b, 1000);
	for (int i = 0; i < 10; i++)
		ck_assert(mtd_fault_budget_take(&b, &cfg, 1000));
	ck_assert(!mtd_fault_budget_take(&b, &cfg, 1000));
	/* Still inside the window nine seconds later... */
	ck_assert(!mtd_fault_budget_take(&b, &cfg, 1009));
	/* ...and the old calls and retries age out after it. */
	mtd_fault_budget_call(&b, 1010);
	ck_assert(mtd_fault_budget_take(&b, &cfg, 1010));
	ck_assert(!mtd_fault_budget_take(&b, &cfg, 1010));
}
END_TEST

START_TEST(budget_unset_grants)
{
	struct mtd_fault_budget b = {0};
	struct mtd_fault_budget_cfg cfg = {.set = false};
	for (int i = 0; i < 50; i++)
		ck_assert(mtd_fault_budget_take(&b, &cfg, 7));
	ck_assert(mtd_fault_budget_take(&b, NULL, 7));
	ck_assert_uint_eq(atomic_load(&b.spent), 51);
	ck_assert_uint_eq(atomic_load(&b.exhausted), 0);
}
END_TEST

/* ---- attempt state machine ---------------------------------------------- */

START_TEST(attempt_transitions)
{
	/* The happy paths. */
	ck_assert_int_eq(mtd_fault_attempt_step(MTD_ATTEMPT_BACKOFF, MTD_AEV_START), MTD_ATTEMPT_PENDING);
	ck_assert_int_eq(mtd_fault_attempt_step(MTD_ATTEMPT_PENDING, MTD_AEV_STREAM), MTD_ATTEMPT_OPEN);
	ck_assert_int_eq(mtd_fault_attempt_step(MTD_ATTEMPT_OPEN, MTD_AEV_HEADERS), MTD_ATTEMPT_ANSWERING);
	ck_assert_int_eq(mtd_fault_attempt_step(MTD_ATTEMPT_ANSWERING, MTD_AEV_TRAILERS), MTD_ATTEMPT_DONE);
	/* Trailers-Only: OPEN straight to DONE. */
	ck_assert_int_eq(mtd_fault_attempt_step(MTD_ATTEMPT_OPEN, MTD_AEV_TRAILERS), MTD_ATTEMPT_DONE);
	/* Out of order events are refused. */
	ck_assert_int_eq(mtd_fault_attempt_step(MTD_ATTEMPT_BACKOFF, MTD_AEV_STREAM), -1);
	ck_assert_int_eq(mtd_fault_attempt_step(MTD_ATTEMPT_PENDING, MTD_AEV_HEADERS), -1);
	ck_assert_int_eq(mtd_fault_attempt_step(MTD_ATTEMPT_ANSWERING, MTD_AEV_HEADERS), -1);
	ck_assert_int_eq(mtd_fault_attempt_step(MTD_ATTEMPT_OPEN, MTD_AEV_START), -1);
	ck_assert_int_eq(mtd_fault_attempt_step(MTD_ATTEMPT_N_STATES, MTD_AEV_START), -1);
	ck_assert_int_eq(mtd_fault_attempt_step(MTD_ATTEMPT_OPEN, MTD_AEV_N_EVENTS), -1);
	/* Every live state can fail or be cancelled; ended ones take nothing. */
	for (int s = 0; s < MTD_ATTEMPT_N_STATES; s++) {
		bool live = mtd_fault_attempt_live((enum mtd_attempt_state)s);
		ck_assert_int_eq(mtd_fault_attempt_step((enum mtd_attempt_state)s, MTD_AEV_FAIL),
		                 live ? MTD_ATTEMPT_FAILED : -1);
		ck_assert_int_eq(mtd_fault_attempt_step((enum mtd_attempt_state)s, MTD_AEV_CANCEL),
		                 live ? MTD_ATTEMPT_CANCELLED : -1);
		if (!live)
			for (int e = 0; e < MTD_AEV_N_EVENTS; e++)
				ck_assert_int_eq(
				        mtd_fault_attempt_step((enum mtd_attempt_state)s, (enum mtd_attempt_event)e),
				        -1);
		ck_assert_str_ne(mtd_fault_attempt_state_name((enum mtd_attempt_state)s), "?");
	}
	ck_assert(!mtd_fault_attempt_live(MTD_ATTEMPT_DONE));
	ck_assert(mtd_fault_attempt_live(MTD_ATTEMPT_ANSWERING));
}
END_TEST

/* ---- decisions ---------------------------------------------------------- */

static struct mtd_fault_policy policy(enum mtd_fault_mode mode)
{
	struct mtd_fault_policy p;
	mtd_fault_policy_defaults(&p);
	p.mode = mode;
	return p;
}

static struct mtd_fault_decision decide(const struct mtd_fault_policy *p, struct mtd_fault_outcome o,
                                        struct mtd_fault_call c)
{
	struct mtd_fault_decision d;
	uint64_t rng = 99;
	mtd_fault_decide(p, &o, &c, NULL, NULL, &rng, &d);
	return d;
}

static const struct mtd_fault_call fresh = {.endpoint_left = true, .now_ns = 1000 * MS};
static const struct mtd_fault_outcome unavailable = {.failure = MTD_FAULT_STATUS, .status = 14};

START_TEST(decide_defaults)
{
	struct mtd_fault_policy p;
	mtd_fault_policy_defaults(&p);
	ck_assert_int_eq(p.mode, MTD_FAULT_FAILFAST);
	ck_assert(mtd_fault_retry_on(&p, 14));
	ck_assert(!mtd_fault_retry_on(&p, 13));
	ck_assert(!mtd_fault_retry_on(&p, 0));
	ck_assert(!mtd_fault_retry_on(&p, -1));
	ck_assert(!mtd_fault_retry_on(&p, 99));
	ck_assert_uint_eq(p.replay_buffer, 256 * 1024);
	ck_assert_str_eq(mtd_fault_mode_name(MTD_FAULT_BROADCAST), "BROADCAST");
	ck_assert_ptr_null(mtd_fault_mode_name((enum mtd_fault_mode)77));
}
END_TEST

START_TEST(decide_failover)
{
	struct mtd_fault_policy p = policy(MTD_FAULT_FAILOVER);
	struct mtd_fault_call c = fresh;
	struct mtd_fault_decision d = decide(&p, unavailable, c);
	ck_assert_int_eq(d.action, MTD_FAULT_RETRY);
	ck_assert(!d.transparent);
	ck_assert_int_lt(d.delay_ns, 25 * MS);
	c.retries_done = 1;
	d = decide(&p, (struct mtd_fault_outcome){.failure = MTD_FAULT_RESET}, c);
	ck_assert_int_eq(d.action, MTD_FAULT_RETRY);
	ck_assert_int_lt(d.delay_ns, 50 * MS);
	/* retries spent */
	c.retries_done = 2;
	ck_assert_int_eq(decide(&p, unavailable, c).action, MTD_FAULT_FAIL);
	/* no endpoint left */
	c = fresh;
	c.endpoint_left = false;
	ck_assert_int_eq(decide(&p, unavailable, c).action, MTD_FAULT_FAIL);
	/* a success or a status outside retry_on is relayed */
	ck_assert_int_eq(decide(&p, (struct mtd_fault_outcome){0}, fresh).action, MTD_FAULT_RELAY);
}
END_TEST

START_TEST(decide_never_after_commit)
{
	struct mtd_fault_call c = fresh;
	c.committed = true;
	for (int m = MTD_FAULT_FAILFAST; m <= MTD_FAULT_BROADCAST; m++) {
		struct mtd_fault_policy p = policy((enum mtd_fault_mode)m);
		/* outgrew the buffer: no replay, but a fixed answer still fits */
		c.answered = false;
		ck_assert_int_eq(decide(&p, unavailable, c).action, m == MTD_FAULT_FAILSAFE || m == MTD_FAULT_FAILBACK
		                                                            ? MTD_FAULT_SAFE_OK
		                                                            : MTD_FAULT_FAIL);
		ck_assert_int_ne(decide(&p, (struct mtd_fault_outcome){.failure = MTD_FAULT_REFUSED}, c).action,
		                 MTD_FAULT_RETRY);
		p.fallback.set = true;
		ck_assert_int_eq(decide(&p, unavailable, c).action, MTD_FAULT_FALLBACK);
		/* headers relayed: only the failure itself */
		c.answered = true;
		ck_assert_int_eq(decide(&p, unavailable, c).action, MTD_FAULT_FAIL);
		/* not even a refused stream: headers already came on it */
		ck_assert_int_eq(decide(&p, (struct mtd_fault_outcome){.failure = MTD_FAULT_REFUSED}, c).action,
		                 MTD_FAULT_FAIL);
	}
}
END_TEST

START_TEST(decide_transparent)
{
	struct mtd_fault_outcome refused = {.failure = MTD_FAULT_REFUSED};
	for (int m = MTD_FAULT_FAILFAST; m <= MTD_FAULT_BROADCAST; m++) {
		struct mtd_fault_policy p = policy((enum mtd_fault_mode)m);
		struct mtd_fault_call c = fresh;
		c.endpoint_left = false; /* the same endpoint may take it again */
		c.retries_done = 5;      /* and it costs no retries */
		struct mtd_fault_budget b = {0};
		struct mtd_fault_budget_cfg bc = {.set = true};
		struct mtd_fault_decision d;
		uint64_t rng = 1;
		mtd_fault_decide(&p, &refused, &c, &b, &bc, &rng, &d);
		ck_assert_int_eq(d.action, MTD_FAULT_RETRY);
		ck_assert(d.transparent);
		ck_assert_int_eq(d.delay_ns, 0);
		ck_assert_uint_eq(atomic_load(&b.spent) + atomic_load(&b.exhausted), 0);
		/* once per endpoint */
		c.refused_here_before = true;
		mtd_fault_decide(&p, &refused, &c, &b, &bc, &rng, &d);
		ck_assert_int_ne(d.action, MTD_FAULT_RETRY);
	}
}
END_TEST

START_TEST(decide_connect_moves_on)
{
	struct mtd_fault_outcome o = {.failure = MTD_FAULT_CONNECT};
	for (int m = MTD_FAULT_FAILFAST; m < MTD_FAULT_BROADCAST; m++) {
		struct mtd_fault_policy p = policy((enum mtd_fault_mode)m);
		struct mtd_fault_call c = fresh;
		c.retries_done = 9;
		struct mtd_fault_decision d = decide(&p, o, c);
		ck_assert_int_eq(d.action, MTD_FAULT_RETRY);
		ck_assert(d.transparent);
		c.endpoint_left = false;
		ck_assert_int_ne(decide(&p, o, c).action, MTD_FAULT_RETRY);
	}
}
END_TEST

START_TEST(decide_modes_end)
{
	struct mtd_fault_policy p = policy(MTD_FAULT_FAILFAST);
	ck_assert_int_eq(decide(&p, unavailable, fresh).action, MTD_FAULT_FAIL);
	p = policy(MTD_FAULT_FAILSAFE);
	ck_assert_int_eq(decide(&p, unavailable, fresh).action, MTD_FAULT_SAFE_OK);
	p = policy(MTD_FAULT_FAILFAST);
	p.fallback.set = true;
	ck_assert_int_eq(decide(&p, unavailable, fresh).action, MTD_FAULT_FALLBACK);
	p = policy(MTD_FAULT_FAILOVER);
	p.fallback.set = true;
	struct mtd_fault_call c = fresh;
	c.retries_done = 2;
	ck_assert_int_eq(decide(&p, unavailable, c).action, MTD_FAULT_FALLBACK);
}
END_TEST

START_TEST(decide_broadcast)
{
	/* Every endpoint; one failure fails the call, once the others ended. */
	struct mtd_fault_policy p = policy(MTD_FAULT_BROADCAST);
	struct mtd_fault_outcome connect = {.failure = MTD_FAULT_CONNECT};
	struct mtd_fault_outcome reset = {.failure = MTD_FAULT_RESET};
	struct mtd_fault_call c = fresh;
	c.others_live = true;
	ck_assert_int_eq(decide(&p, unavailable, c).action, MTD_FAULT_WAIT);
	/* No endpoint stands in for another, even one never reached. */
	ck_assert_int_eq(decide(&p, connect, c).action, MTD_FAULT_WAIT);
	ck_assert_int_eq(decide(&p, reset, c).action, MTD_FAULT_WAIT);
	c.others_live = false;
	ck_assert_int_eq(decide(&p, unavailable, c).action, MTD_FAULT_FAIL);
	ck_assert_int_eq(decide(&p, connect, c).action, MTD_FAULT_FAIL);
	p.fallback.set = true;
	ck_assert_int_eq(decide(&p, unavailable, c).action, MTD_FAULT_FALLBACK);
	/* A refused stream is still replayed (on its endpoint: the caller's). */
	struct mtd_fault_outcome refused = {.failure = MTD_FAULT_REFUSED};
	struct mtd_fault_decision d = decide(&p, refused, c);
	ck_assert_int_eq(d.action, MTD_FAULT_RETRY);
	ck_assert(d.transparent);
	/* Not a failure: relayed (the caller waits for the others). */
	struct mtd_fault_outcome ok = {.failure = MTD_FAULT_OK};
	ck_assert_int_eq(decide(&p, ok, c).action, MTD_FAULT_RELAY);
}
END_TEST

START_TEST(decide_pushback_and_deadline)
{
	struct mtd_fault_policy p = policy(MTD_FAULT_FAILOVER);
	struct mtd_fault_outcome o = unavailable;
	o.has_pushback = true;
	o.pushback_ms = 300;
	struct mtd_fault_decision d = decide(&p, o, fresh);
	ck_assert_int_eq(d.action, MTD_FAULT_RETRY);
	ck_assert_int_eq(d.delay_ns, 300 * MS); /* replaces the backoff */
	o.pushback_ms = -1;
	d = decide(&p, o, fresh);
	ck_assert_int_eq(d.action, MTD_FAULT_FAIL);
	ck_assert(d.pushback_stop);
	o.pushback_ms = INT64_MAX / 1000;
	ck_assert_int_eq(decide(&p, o, fresh).action, MTD_FAULT_FAIL);
	/* a retry that would start after the deadline is not started */
	o.pushback_ms = 300;
	struct mtd_fault_call c = fresh;
	c.deadline_ns = c.now_ns + 200 * MS;
	ck_assert_int_eq(decide(&p, o, c).action, MTD_FAULT_FAIL);
	c.deadline_ns = c.now_ns + 400 * MS;
	ck_assert_int_eq(decide(&p, o, c).action, MTD_FAULT_RETRY);
	/* past the deadline even a refused stream is not replayed */
	c.deadline_ns = c.now_ns;
	ck_assert_int_eq(decide(&p, (struct mtd_fault_outcome){.failure = MTD_FAULT_REFUSED}, c).action,
	                 MTD_FAULT_FAIL);
}
END_TEST

START_TEST(decide_budget)
{
	struct mtd_fault_policy p = policy(MTD_FAULT_FAILOVER);
	p.fallback.set = true;
	struct mtd_fault_budget b = {0};
	struct mtd_fault_budget_cfg bc = {.set = true, .ratio = 0.5};
	struct mtd_fault_call c = fresh;
	struct mtd_fault_decision d;
	uint64_t rng = 3;
	unsigned retries = 0, exhausted = 0;
	for (int i = 0; i < 10; i++) {
		mtd_fault_budget_call(&b, c.now_ns / 1000000000);
		mtd_fault_decide(&p, &unavailable, &c, &b, &bc, &rng, &d);
		if (d.action == MTD_FAULT_RETRY)
			retries++;
		else {
			/* beyond the budget: FAILFAST's answer, not the fallback */
			ck_assert_int_eq(d.action, MTD_FAULT_FAIL);
			ck_assert(d.budget_exhausted);
			exhausted++;
		}
	}
	ck_assert_uint_eq(retries, 5);
	ck_assert_uint_eq(exhausted, 5);
	ck_assert_uint_eq(atomic_load(&b.exhausted), 5);
}
END_TEST

/* ---- hedge_delay: AUTO's estimator -------------------------------------- */

static uint64_t t_rng(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*s = x;
	return x;
}

static double t_unit(uint64_t *s)
{
	return (double)(t_rng(s) >> 11) * 0x1p-53;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

/* The estimate against the exact p95 of the same samples: within one
 * bucket width (12.5 %), the bound fault.h states. */
static void check_p95(const int64_t *v, size_t n, double bound)
{
	static struct mtd_fault_lat h;
	memset(&h, 0, sizeof(h));
	for (size_t i = 0; i < n; i++)
		mtd_fault_lat_add(&h, v[i]);
	int64_t *sorted = malloc(n * sizeof(*sorted));
	ck_assert_ptr_nonnull(sorted);
	memcpy(sorted, v, n * sizeof(*sorted));
	qsort(sorted, n, sizeof(*sorted), cmp_i64);
	double want = (double)sorted[(size_t)(0.95 * (double)n) - 1];
	double got = (double)mtd_fault_lat_quantile_us(&h, 0.95);
	free(sorted);
	ck_assert_msg(got >= want * (1 - bound) && got <= want * (1 + bound), "p95 %.0f us, estimated %.0f us", want,
	              got);
}

START_TEST(lat_p95_uniform)
{
	/* Uniform 1 ms .. 11 ms: p95 = 10.5 ms. Fewer samples than the window:
	 * nothing forgotten. */
	enum { N = 2000 };
	static int64_t v[N];
	uint64_t rng = 99;
	for (size_t i = 0; i < N; i++)
		v[i] = 1000 + (int64_t)(t_rng(&rng) % 10000);
	check_p95(v, N, 0.125);
}
END_TEST

START_TEST(lat_p95_exponential_and_bimodal)
{
	enum { N = 2000 };
	static int64_t v[N];
	uint64_t rng = 7;
	/* Exponential, mean 2 ms: p95 = 2 ms x ln 20 = 6 ms. */
	for (size_t i = 0; i < N; i++)
		v[i] = (int64_t)(-log(1.0 - t_unit(&rng)) * 2000.0) + 1;
	check_p95(v, N, 0.125);
	/* 90 % fast (200..400 us), 10 % slow (40..60 ms): the p95 is in the
	 * slow mode. */
	for (size_t i = 0; i < N; i++)
		v[i] = i % 10 ? 200 + (int64_t)(t_rng(&rng) % 200) : 40000 + (int64_t)(t_rng(&rng) % 20000);
	check_p95(v, N, 0.125);
	/* 97 % fast: the p95 is in the fast mode. */
	for (size_t i = 0; i < N; i++)
		v[i] = i % 33 ? 200 + (int64_t)(t_rng(&rng) % 200) : 40000 + (int64_t)(t_rng(&rng) % 20000);
	check_p95(v, N, 0.125);
}
END_TEST

START_TEST(lat_follows_a_shift)
{
	/* 10,000 samples at ~1 ms, then 10,000 at ~100 ms: the halving window
	 * forgets the old mode, the estimate moves to the new one. */
	static struct mtd_fault_lat h;
	memset(&h, 0, sizeof(h));
	uint64_t rng = 3;
	for (int i = 0; i < 10000; i++)
		mtd_fault_lat_add(&h, 900 + (int64_t)(t_rng(&rng) % 200));
	int64_t before = mtd_fault_lat_quantile_us(&h, 0.95);
	ck_assert_int_ge(before, 900 * 875 / 1000);
	ck_assert_int_le(before, 1100 * 1125 / 1000);
	for (int i = 0; i < 10000; i++)
		mtd_fault_lat_add(&h, 99000 + (int64_t)(t_rng(&rng) % 2000));
	int64_t after = mtd_fault_lat_quantile_us(&h, 0.95);
	ck_assert_int_ge(after, 99000 * 875 / 1000);
	ck_assert_int_le(after, 101000 * 1125 / 1000);
	ck_assert_uint_lt(h.total, MTD_FAULT_LAT_WINDOW);
	ck_assert_uint_eq(h.seen, 20000);
}
END_TEST

START_TEST(lat_auto_delay_rules)
{
	static struct mtd_fault_lat h;
	memset(&h, 0, sizeof(h));
	ck_assert_int_eq(mtd_fault_lat_quantile_us(&h, 0.95), -1);
	/* Until MIN_SAMPLES answers: the initial delay. */
	for (unsigned i = 0; i + 1 < MTD_FAULT_LAT_MIN_SAMPLES; i++)
		mtd_fault_lat_add(&h, 20000);
	ck_assert_int_eq(mtd_fault_hedge_auto_ms(&h), MTD_FAULT_HEDGE_AUTO_INITIAL_MS);
	mtd_fault_lat_add(&h, 20000);
	int64_t ms = mtd_fault_hedge_auto_ms(&h);
	ck_assert_int_ge(ms, 20);
	ck_assert_int_le(ms, 23); /* 20 ms, its bucket's 12.5 %, rounded up */
	/* Sub-ms latencies: the floor. */
	memset(&h, 0, sizeof(h));
	for (int i = 0; i < 100; i++)
		mtd_fault_lat_add(&h, i % 2 ? 0 : -5);
	ck_assert_int_eq(mtd_fault_hedge_auto_ms(&h), MTD_FAULT_HEDGE_AUTO_FLOOR_MS);
	/* Beyond the histogram's range: the cap. */
	memset(&h, 0, sizeof(h));
	for (int i = 0; i < 100; i++)
		mtd_fault_lat_add(&h, INT64_MAX / 2);
	ck_assert_int_eq(mtd_fault_hedge_auto_ms(&h), MTD_FAULT_HEDGE_AUTO_MAX_MS);
}
END_TEST

static Suite *fault_suite(void)
{
	Suite *s = suite_create("fault");
	TCase *t = tcase_create("backoff");
	tcase_add_test(t, backoff_bounds_and_growth);
	tcase_add_test(t, backoff_degenerate);
	tcase_add_test(t, pushback_parse);
	suite_add_tcase(s, t);
	t = tcase_create("budget");
	tcase_add_test(t, budget_ratio_exact);
	tcase_add_test(t, budget_floor_and_outage);
	tcase_add_test(t, budget_window_slides);
	tcase_add_test(t, budget_unset_grants);
	suite_add_tcase(s, t);
	t = tcase_create("attempt");
	tcase_add_test(t, attempt_transitions);
	suite_add_tcase(s, t);
	t = tcase_create("decide");
	tcase_add_test(t, decide_defaults);
	tcase_add_test(t, decide_failover);
	tcase_add_test(t, decide_never_after_commit);
	tcase_add_test(t, decide_transparent);
	tcase_add_test(t, decide_modes_end);
	tcase_add_test(t, decide_broadcast);
	tcase_add_test(t, decide_connect_moves_on);
	tcase_add_test(t, decide_pushback_and_deadline);
	tcase_add_test(t, decide_budget);
	suite_add_tcase(s, t);
	t = tcase_create("latency");
	tcase_add_test(t, lat_p95_uniform);
	tcase_add_test(t, lat_p95_exponential_and_bimodal);
	tcase_add_test(t, lat_follows_a_shift);
	tcase_add_test(t, lat_auto_delay_rules);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(fault_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
