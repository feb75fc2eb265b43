/* CONSISTENT_HASH and MAGLEV under change and heat:
 *   - warmup: a new endpoint's share of its keys follows the warm curve,
 *     a key is only ever on its owner before or after the join, and a key
 *     that moved stays;
 *   - hot keys: a key above the threshold is spread over `spread` distinct
 *     endpoints of its walk, a key below it stays on its owner;
 *   - the walk over a key's candidates both share (bounded.h), on a table
 *     of its own: order, wrap-around, exclusions, bounded load, warmup's
 *     refusals and fallback, the hot spread. */
#include "config.h"

#include "lb-test.h"
#include "lb/bounded.h"
#include "lb/lb-impl.h"

static Suite *ring_suite(void);

#define NKEYS 20000
#define T0    5000000 /* the new endpoint's start, ms */
#define WARM  60000

static const char *const policies[] = {"CONSISTENT_HASH", "MAGLEV"};

static int pick_key_at(struct mtd_lb_picker *p, struct t_set *s, unsigned key, int64_t now_ms)
{
	char buf[32];
	struct mtd_lb_pick_ctx ctx = t_ctx(s);
	int n = snprintf(buf, sizeof(buf), "key-%u", key);

	ctx.key = (const uint8_t *)buf;
	ctx.key_len = (size_t)n;
	ctx.now_ms = now_ms;
	ctx.now_ns = now_ms * 1000000; /* the hot-key window's clock, moved with the wall one here */
	return mtd_lb_pick(p, &ctx);
}

START_TEST(warmup_share_curve_and_one_way_moves)
{
	static int before[NKEYS], after[NKEYS], at[NKEYS];
	static const double fr[] = {0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 1.2};
	const char *policy = policies[_i / 2];
	bool slow_start = _i % 2 == 1;
	struct t_set s;
	struct mtd_lb_config cfg;
	struct mtd_lb_picker *old, *warm, *plain;
	size_t final_new = 0;

	t_set_init(&s, 11, NULL);
	s.eps[10].start_ms = T0; /* the newcomer; the others are old (0) */
	mtd_lb_config_defaults(&cfg, mtd_lb_find(policy));
	old = mtd_lb_picker_new(&cfg, s.eps, 10, NULL);
	plain = mtd_lb_picker_new(&cfg, s.eps, 11, NULL);
	cfg.warmup.duration_ms = WARM;
	if (slow_start) {
		cfg.warmup.curve = MTD_LB_WARMUP_SLOW_START;
		cfg.warmup.aggression = 2.0;
		cfg.warmup.min_weight_percent = 5.0;
	}
	warm = mtd_lb_picker_new(&cfg, s.eps, 11, old);
	ck_assert_ptr_nonnull(old);
	ck_assert_ptr_nonnull(plain);
	ck_assert_ptr_nonnull(warm);
	for (unsigned k = 0; k < NKEYS; k++) {
		before[k] = pick_key_at(old, &s, k, T0);
		after[k] = pick_key_at(plain, &s, k, T0);
		at[k] = -1;
		final_new += after[k] == 10;
	}
	ck_assert_uint_gt(final_new, NKEYS / 11 / 2);
	for (size_t t = 0; t < sizeof(fr) / sizeof(fr[0]); t++) {
		int64_t now = T0 + (int64_t)(fr[t] * WARM);
		double f = fr[t] >= 1.0 ? 1.0 : fr[t];
		size_t on_new = 0;

		if (slow_start)
			f = fmax(0.05, sqrt(f));
		for (unsigned k = 0; k < NKEYS; k++) {
			int i = pick_key_at(warm, &s, k, now);

			/* Only ever the owner before the join or the owner
			 * after it (the same but for the newcomer's keys on a
			 * ring; Maglev also reshuffles a few others at once). */
			ck_assert_msg(i == before[k] || i == after[k], "key %u at %.2f: %d (was %d, ends %d)", k, fr[t],
			              i, before[k], after[k]);
			/* Once moved, it stays. */
			ck_assert_msg(!(at[k] == after[k] && i != after[k]), "key %u moved back at %.2f", k, fr[t]);
			at[k] = i;
			on_new += i == 10;
		}
		/* The newcomer's share of its final keys is f(t): binomial over
		 * ~1,800 keys, sd < 0.012. */
		ck_assert_msg(fabs((double)on_new / (double)final_new - f) < 0.05, "%s at %.2f: share %.3f, want %.3f",
		              policy, fr[t], (double)on_new / (double)final_new, f);
	}
	mtd_lb_picker_free(warm);
	mtd_lb_picker_free(plain);
	mtd_lb_picker_free(old);
}
END_TEST

START_TEST(warmup_inert_when_all_start_together)
{
	const char *policy = policies[_i];
	struct t_set s;
	struct mtd_lb_config cfg;
	struct mtd_lb_picker *warm, *plain;

	t_set_init(&s, 8, NULL);
	for (size_t i = 0; i < s.n; i++)
		s.eps[i].start_ms = T0;
	mtd_lb_config_defaults(&cfg, mtd_lb_find(policy));
	plain = mtd_lb_picker_new(&cfg, s.eps, s.n, NULL);
	cfg.warmup.duration_ms = WARM;
	warm = mtd_lb_picker_new(&cfg, s.eps, s.n, NULL);
	for (unsigned k = 0; k < 5000; k++)
		ck_assert_int_eq(pick_key_at(warm, &s, k, T0 + WARM / 3), pick_key_at(plain, &s, k, T0 + WARM / 3));
	mtd_lb_picker_free(warm);
	mtd_lb_picker_free(plain);
}
END_TEST

/* Key `key` called at `rate` per second for `secs` seconds (evenly spaced
 * picks); counts per endpoint over the last second. */
static void drive_key(struct mtd_lb_picker *p, struct t_set *s, unsigned key, unsigned rate, int secs, uint64_t *counts)
{
	memset(counts, 0, sizeof(counts[0]) * s->n);
	for (int64_t c = 0; c < (int64_t)rate * secs; c++) {
		int64_t now = T0 + c * 1000 / rate;
		int i = pick_key_at(p, s, key, now);

		ck_assert_int_ge(i, 0);
		if (c >= (int64_t)rate * (secs - 1))
			counts[i]++;
	}
}

START_TEST(hot_keys_spread_only_above_threshold)
{
	const char *policy = policies[_i];
	struct t_set s;
	struct mtd_lb_config cfg;
	struct mtd_lb_picker *p, *plain;
	uint64_t counts[T_MAX_EPS];

	t_set_init(&s, 10, NULL);
	mtd_lb_config_defaults(&cfg, mtd_lb_find(policy));
	plain = mtd_lb_picker_new(&cfg, s.eps, s.n, NULL);
	cfg.hot_keys.threshold_per_second = 100;
	cfg.hot_keys.spread = 3;
	p = mtd_lb_picker_new(&cfg, s.eps, s.n, NULL);
	ck_assert_ptr_nonnull(p);
	for (unsigned key = 0; key < 20; key++) {
		int home = pick_key_at(plain, &s, key, T0);
		size_t used = 0;

		/* 80 calls a second: below the threshold, always home. */
		drive_key(p, &s, 1000 + key, 80, 3, counts);
		ck_assert_uint_eq(counts[pick_key_at(plain, &s, 1000 + key, T0)], 80);
		/* 600 a second: spread over 3 distinct endpoints, one of them
		 * home, about 200 each (binomial sd ~ 11.5). */
		drive_key(p, &s, key, 600, 3, counts);
		ck_assert_uint_gt(counts[home], 0);
		for (size_t i = 0; i < s.n; i++) {
			if (counts[i] == 0)
				continue;
			used++;
			ck_assert_msg(counts[i] > 140 && counts[i] < 260, "key %u endpoint %zu: %llu", key, i,
			              (unsigned long long)counts[i]);
		}
		ck_assert_uint_eq(used, 3);
	}
	mtd_lb_picker_free(p);
	mtd_lb_picker_free(plain);
}
END_TEST

/* A hot key (threshold 100 a second, spread 3) picked 1,200 times at 600
 * a second by policy, each pick's clocks set by clock (call c's monotonic
 * and wall ms, both T0 + c * 1000 / 600 before it changes them): how many
 * endpoints the calls from..to (inclusive) went to. */
static size_t hot_key_spread(const char *policy, void (*clock)(int64_t c, int64_t *mono_ms, int64_t *wall_ms),
                             int64_t from, int64_t to)
{
	struct t_set s;
	struct mtd_lb_config cfg;
	uint64_t counts[T_MAX_EPS] = {0};

	t_set_init(&s, 10, NULL);
	mtd_lb_config_defaults(&cfg, mtd_lb_find(policy));
	cfg.hot_keys.threshold_per_second = 100;
	cfg.hot_keys.spread = 3;
	struct mtd_lb_picker *p = mtd_lb_picker_new(&cfg, s.eps, s.n, NULL);
	ck_assert_ptr_nonnull(p);
	struct mtd_lb_pick_ctx ctx = t_ctx(&s);
	ctx.key = (const uint8_t *)"key-hot";
	ctx.key_len = 7;
	for (int64_t c = 0; c < 1200; c++) {
		int64_t mono_ms = T0 + c * 1000 / 600, wall_ms = mono_ms;
		clock(c, &mono_ms, &wall_ms);
		ctx.now_ns = mono_ms * 1000000;
		ctx.now_ms = wall_ms;
		int i = mtd_lb_pick(p, &ctx);
		ck_assert_int_ge(i, 0);
		if (c >= from && c <= to)
			counts[i]++;
	}
	mtd_lb_picker_free(p);
	size_t used = 0;
	for (size_t i = 0; i < s.n; i++)
		used += counts[i] > 0;
	return used;
}

static void wall_steps_back_at_600(int64_t c, int64_t *mono_ms, int64_t *wall_ms)
{
	(void)mono_ms;
	if (c >= 600)
		*wall_ms -= 3600 * 1000;
}

/* A hot key stays hot across a wall-clock step: its window counts on the
 * monotonic clock. 600 calls a second for 2 s, the wall clock stepping an
 * hour back halfway: the 80 calls right after the step still spread over
 * 3 endpoints (on the wall clock the step emptied the window, and they all
 * went home until 100 more calls had been counted). */
START_TEST(hot_keys_window_ignores_a_wall_clock_step)
{
	ck_assert_uint_eq(hot_key_spread(policies[_i], wall_steps_back_at_600, 600, 679), 3);
}
END_TEST

static int64_t behind_ms; /* call_601_behind's lag */

static void call_601_behind(int64_t c, int64_t *mono_ms, int64_t *wall_ms)
{
	if (c == 601) {
		*mono_ms -= behind_ms;
		*wall_ms -= behind_ms;
	}
}

/* A hot key stays hot when a pick's now is behind the window's second:
 * workers share the sketch, each pick's now is its worker's turn clock
 * (sidecar/turn.h), read when its turn began, and another worker's pick
 * may have crossed into the next second meanwhile. 600 calls a second,
 * one of them just after a second began 5 ms behind, in the second
 * before; or 1.5 s behind, two seconds before (a turn that lasted that
 * long: a worker descheduled, a long TLS burst): the 80 calls after it
 * still spread over 3 endpoints (it moved the counters back, emptying
 * them, and they all went home until 100 more calls had been counted). */
START_TEST(hot_keys_window_counts_a_pick_a_turn_behind)
{
	static const int64_t lag_ms[] = {5, 1500};
	behind_ms = lag_ms[_i / 2];
	ck_assert_uint_eq(hot_key_spread(policies[_i % 2], call_601_behind, 602, 681), 3);
}
END_TEST

/* A counter never used is empty, its epoch second 0: it is not a second
 * ahead of a now 65,530 s after boot (0 is that second's + 6 in 16 bits),
 * where 40 calls a second for 5 s, all counted in one "second", read as
 * 200 a second, over the threshold of 100. */
START_TEST(hot_keys_empty_counter_is_not_ahead_at_the_epochs_wrap)
{
	struct mtd_lb_hot_keys cfg = {.threshold_per_second = 100, .spread = 3};
	struct mtd_lb__hot h;
	ck_assert_int_eq(mtd_lb__hot_init(&h, &cfg), 0);
	for (int64_t c = 0; c < 200; c++) {
		int64_t now_ms = 65530 * 1000ll + c * 1000 / 40;
		ck_assert_msg(!mtd_lb__hot_observe(&h, 0x1234567887654321ull, now_ms), "hot at call %lld",
		              (long long)c);
	}
	mtd_lb__hot_free(&h);
}
END_TEST

START_TEST(hot_keys_options_checked)
{
	struct mtd_lb_config cfg;
	const char *field = NULL;

	mtd_lb_config_defaults(&cfg, mtd_lb_find("MAGLEV"));
	cfg.hot_keys.spread = 1;
	ck_assert_int_ne(mtd_lb_config_check(&cfg, &field), 0);
	ck_assert_str_eq(field, "hot_keys.spread");
	cfg.hot_keys.spread = MTD_LB_MAX_HOT_SPREAD + 1;
	ck_assert_int_ne(mtd_lb_config_check(&cfg, &field), 0);
	cfg.hot_keys.spread = 3;
	cfg.hot_keys.threshold_per_second = 0;
	ck_assert_int_ne(mtd_lb_config_check(&cfg, &field), 0);
	ck_assert_str_eq(field, "hot_keys.threshold_per_second");
	cfg.hot_keys.threshold_per_second = 100;
	ck_assert_int_eq(mtd_lb_config_check(&cfg, &field), 0);
}
END_TEST

/* A table shaped like the ring's points: the endpoint is the second word;
 * the first is a valid but wrong index, so a helper reading the table
 * instead of asking the mapping picks wrong. */
struct t_slot {
	uint32_t decoy;
	uint32_t ep;
};

static const struct t_slot t_slots[] = {{1, 2}, {3, 0}, {0, 2}, {2, 1}, {0, 3}, {1, 0}};

static uint32_t t_slot_endpoint(const void *table, size_t k)
{
	return ((const struct t_slot *)table)[k].ep;
}

static const struct mtd_lb__slots t_table = {
        .table = t_slots, .len = sizeof(t_slots) / sizeof(t_slots[0]), .endpoint = t_slot_endpoint};

START_TEST(slots_walk_order_exclusions_bound)
{
	static const double w[4] = {100, 100, 100, 100};
	struct t_set s;
	struct mtd_lb_pick_ctx ctx;
	struct mtd_lb__bound off = {.on = false};
	/* ceil(per_weight x 100) = 1: one call in flight fills an endpoint. */
	struct mtd_lb__bound one = {.on = true, .per_weight = 0.01, .eligible = 4};

	t_set_init(&s, 4, NULL);
	ctx = t_ctx(&s);
	ck_assert_int_eq(mtd_lb__slots_walk(t_table, 0, &off, w, s.eps, NULL, &ctx), 2);
	ck_assert_int_eq(mtd_lb__slots_walk(t_table, 3, &off, w, s.eps, NULL, &ctx), 1);
	ck_assert_int_eq(mtd_lb__slots_walk(t_table, 5, &off, w, s.eps, NULL, &ctx), 0);
	t_exclude(&s, 0); /* slot 5 passes on, wrapping to slot 0 */
	ck_assert_int_eq(mtd_lb__slots_walk(t_table, 5, &off, w, s.eps, NULL, &ctx), 2);
	t_exclude(&s, 2);
	ck_assert_int_eq(mtd_lb__slots_walk(t_table, 0, &off, w, s.eps, NULL, &ctx), 1);
	t_exclude(&s, 1);
	t_exclude(&s, 3);
	ck_assert_int_eq(mtd_lb__slots_walk(t_table, 0, &off, w, s.eps, NULL, &ctx), -1);

	memset(s.excluded, 0, sizeof(s.excluded));
	atomic_store(&t_live(&s.stats[2])->active, 1);
	ck_assert_int_eq(mtd_lb__slots_walk(t_table, 0, &off, w, s.eps, NULL, &ctx), 2);
	ck_assert_int_eq(mtd_lb__slots_walk(t_table, 0, &one, w, s.eps, NULL, &ctx), 0);
	atomic_store(&t_live(&s.stats[0])->active, 1);
	ck_assert_int_eq(mtd_lb__slots_walk(t_table, 0, &one, w, s.eps, NULL, &ctx), 1);
	atomic_store(&t_live(&s.stats[1])->active, 1);
	atomic_store(&t_live(&s.stats[3])->active, 1);
	ck_assert_int_eq(mtd_lb__slots_walk(t_table, 0, &one, w, s.eps, NULL, &ctx), -1);
	t_set_fini(&s);
}
END_TEST

/* A key whose fraction (bounded.h) lies in (lo, hi). */
static void t_key_by_fraction(struct mtd_lb_pick_ctx *ctx, char *buf, size_t len, double lo, double hi)
{
	for (unsigned k = 0; k < 100000; k++) {
		ctx->key_len = (size_t)snprintf(buf, len, "key-%u", k);
		ctx->key = (const uint8_t *)buf;
		if (mtd_lb__key_fraction(ctx) > lo && mtd_lb__key_fraction(ctx) < hi)
			return;
	}
	ck_abort_msg("no key with fraction in (%g, %g)", lo, hi);
}

START_TEST(slots_walk_warmup_refusals_and_fallback)
{
	static const double w[4] = {100, 100, 100, 100};
	const struct mtd_lb_warmup warm = {.duration_ms = WARM, .curve = MTD_LB_WARMUP_LINEAR};
	struct mtd_lb__bound off = {.on = false};
	struct mtd_lb__warm_walk ww;
	struct t_set s;
	struct mtd_lb_pick_ctx ctx;
	char key[32];

	t_set_init(&s, 4, NULL);
	ctx = t_ctx(&s);
	ctx.now_ms = T0;
	s.eps[2].start_ms = T0 - WARM / 10; /* warm share 0.1 */
	s.eps[0].start_ms = T0 - WARM / 2;  /* 0.5; 1 and 3 are old */
	/* A key with fraction above 0.5: both ramping ones refuse it, the
	 * first old one (slot 3) takes it. */
	t_key_by_fraction(&ctx, key, sizeof(key), 0.5, 1.0);
	mtd_lb__warm_walk_init(&ww, &warm, ctx.now_ms);
	ck_assert_int_eq(mtd_lb__slots_walk(t_table, 0, &off, w, s.eps, &ww, &ctx), 1);
	ck_assert_uint_eq(ww.refused, 3);
	/* Nobody takes it: at the end of the walk the warmest refused one. */
	t_exclude(&s, 1);
	t_exclude(&s, 3);
	mtd_lb__warm_walk_init(&ww, &warm, ctx.now_ms);
	ck_assert_int_eq(mtd_lb__slots_walk(t_table, 0, &off, w, s.eps, &ww, &ctx), 0);
	/* A key below 0.1: the first candidate takes it. */
	t_key_by_fraction(&ctx, key, sizeof(key), 0.0, 0.1);
	mtd_lb__warm_walk_init(&ww, &warm, ctx.now_ms);
	ck_assert_int_eq(mtd_lb__slots_walk(t_table, 0, &off, w, s.eps, &ww, &ctx), 2);
	/* Between: endpoint 2 refuses, 0 takes it. */
	t_key_by_fraction(&ctx, key, sizeof(key), 0.1, 0.5);
	mtd_lb__warm_walk_init(&ww, &warm, ctx.now_ms);
	ck_assert_int_eq(mtd_lb__slots_walk(t_table, 0, &off, w, s.eps, &ww, &ctx), 0);
}
END_TEST

/* Counts of 4,000 hot picks from slot `at` over the 4 endpoints. */
static void t_hot_counts(struct t_set *s, size_t at, uint32_t spread, const struct mtd_lb_warmup *warm, int64_t now_ms,
                         uint64_t *counts)
{
	struct mtd_lb_pick_ctx ctx = t_ctx(s);

	ctx.now_ms = now_ms;
	memset(counts, 0, 4 * sizeof(*counts));
	for (int c = 0; c < 4000; c++) {
		int i = mtd_lb__slots_hot(t_table, at, spread, warm, s->eps, &ctx);

		ck_assert_int_ge(i, 0);
		ck_assert_int_lt(i, 4);
		counts[i]++;
	}
}

START_TEST(slots_hot_spread_over_distinct_candidates)
{
	const struct mtd_lb_warmup warm = {.duration_ms = WARM, .curve = MTD_LB_WARMUP_LINEAR};
	struct t_set s;
	struct mtd_lb_pick_ctx ctx;
	uint64_t n[4];

	t_set_init(&s, 4, NULL);
	/* Spread 2 from slot 0: endpoints 2 and 0 (slot 2 repeats 2), about
	 * 2,000 each (binomial sd ~ 32). */
	t_hot_counts(&s, 0, 2, NULL, T0, n);
	ck_assert_msg(n[2] > 1800 && n[0] > 1800 && n[1] == 0 && n[3] == 0, "%llu %llu %llu %llu",
	              (unsigned long long)n[0], (unsigned long long)n[1], (unsigned long long)n[2],
	              (unsigned long long)n[3]);
	/* Spread 3 from slot 4 wraps: 3, 0, 2. */
	t_hot_counts(&s, 4, 3, NULL, T0, n);
	ck_assert(n[3] > 1100 && n[0] > 1100 && n[2] > 1100 && n[1] == 0);
	/* Excluded ones are no candidates. */
	t_exclude(&s, 2);
	t_hot_counts(&s, 0, 2, NULL, T0, n);
	ck_assert(n[0] > 1800 && n[1] > 1800 && n[2] == 0 && n[3] == 0);
	/* While ramping, only warm ones: endpoint 0 ramps, so 1 and 3. */
	s.eps[0].start_ms = T0 - WARM / 2;
	t_hot_counts(&s, 0, 2, &warm, T0, n);
	ck_assert(n[1] > 1800 && n[3] > 1800 && n[0] == 0 && n[2] == 0);
	/* ... unless the caller says nobody ramps. */
	t_hot_counts(&s, 0, 2, NULL, T0, n);
	ck_assert(n[0] > 1800 && n[1] > 1800);
	/* More than the table holds: every eligible one; none: -1. */
	t_hot_counts(&s, 0, MTD_LB_MAX_HOT_SPREAD, NULL, T0, n);
	ck_assert(n[0] > 1100 && n[1] > 1100 && n[3] > 1100 && n[2] == 0);
	t_exclude(&s, 0);
	t_exclude(&s, 1);
	t_exclude(&s, 3);
	ctx = t_ctx(&s);
	ck_assert_int_eq(mtd_lb__slots_hot(t_table, 0, 2, NULL, s.eps, &ctx), -1);
}
END_TEST

/* A ring built over the previous one (its kept endpoints' points reused,
 * the others hashed and merged in) is the ring a fresh build makes:
 * endpoints removed, added, reweighted (other points) and listed in
 * another order, every key lands on the same endpoint. */
START_TEST(ring_over_a_previous_is_the_fresh_ring)
{
	static struct t_set a, b;
	struct mtd_lb_config cfg;
	struct mtd_lb_picker *pa, *pb, *fresh;
	size_t nb = 0;

	t_set_init(&a, 600, NULL);
	for (size_t i = 0; i < 600; i++)
		a.eps[i].weight = i % 50 == 3 ? 0 : 50 + (int32_t)(i * 37 % 101);
	t_set_init(&b, 0, NULL);
	for (size_t i = 600; i-- > 0;) { /* reversed */
		if (i % 7 == 0)
			continue; /* removed */
		snprintf(b.ids[nb], sizeof(b.ids[nb]), "%s", a.ids[i]);
		b.eps[nb].weight = i % 11 == 0 ? a.eps[i].weight + 40 : a.eps[i].weight;
		nb++;
	}
	for (size_t i = 0; i < 50; i++, nb++) { /* added */
		snprintf(b.ids[nb], sizeof(b.ids[nb]), "10.9.%zu.%zu:8080", i / 256, i % 256);
		b.eps[nb].weight = 100;
	}
	for (size_t i = 0; i < nb; i++) {
		b.eps[i].id = b.ids[i];
		b.eps[i].stats = &b.stats[i];
	}
	b.n = nb;
	mtd_lb_config_defaults(&cfg, mtd_lb_find("CONSISTENT_HASH"));
	pa = mtd_lb_picker_new(&cfg, a.eps, a.n, NULL);
	ck_assert_ptr_nonnull(pa);
	pb = mtd_lb_picker_new(&cfg, b.eps, b.n, pa);
	fresh = mtd_lb_picker_new(&cfg, b.eps, b.n, NULL);
	ck_assert_ptr_nonnull(pb);
	ck_assert_ptr_nonnull(fresh);
	for (unsigned k = 0; k < NKEYS; k++) {
		int x = pick_key_at(pb, &b, k, 1000000), y = pick_key_at(fresh, &b, k, 1000000);
		ck_assert_msg(x == y && x >= 0, "key %u: %d over the previous ring, %d fresh", k, x, y);
	}
	mtd_lb_picker_free(fresh);
	mtd_lb_picker_free(pb);
	mtd_lb_picker_free(pa);
}
END_TEST

/* The same over many random pairs of sets (a fixed seed): ids drawn from
 * a small pool (so the sets share some, and a set may list one twice),
 * weights 0, negative, 1 and small, sets of one, and the previous ring of
 * another ring_points (whose points are not the new ones'). Every key
 * lands as on a fresh ring. No weight here is large enough to scale the
 * ring to its cap of 2^24 points: three such rings took four minutes under
 * ASan, and reuse is decided by an endpoint's count of points, whatever
 * made it (a scaled ring is one more way to change that count). */
static uint64_t prop_rng = 0x2545f4914f6cdd1dULL;

static uint64_t prop_next(void)
{
	prop_rng ^= prop_rng << 13;
	prop_rng ^= prop_rng >> 7;
	prop_rng ^= prop_rng << 17;
	return prop_rng;
}

static void prop_fill(struct t_set *s, size_t n, unsigned pool, const struct t_set *from)
{
	t_set_init(s, n, NULL);
	for (size_t i = 0; i < n; i++) {
		unsigned id = (unsigned)(prop_next() % pool);
		uint64_t r = prop_next() % 10;
		snprintf(s->ids[i], sizeof(s->ids[i]), "10.1.%u.%u:80", id / 256, id % 256);
		s->eps[i].weight = r == 0 ? 0 : r == 1 ? -2 : r == 2 ? 1 : (int32_t)(prop_next() % 300);
		if (from != NULL && from->n > 0 && prop_next() % 2 == 0) {
			size_t j = prop_next() % from->n;
			snprintf(s->ids[i], sizeof(s->ids[i]), "%s", from->ids[j]);
			if (prop_next() % 3 != 0)
				s->eps[i].weight = from->eps[j].weight;
		}
	}
}

START_TEST(ring_over_a_previous_is_the_fresh_ring_random_sets)
{
	static struct t_set a, b;

	for (int it = 0; it < 40; it++) {
		struct mtd_lb_config ca, cb;
		unsigned pool = 1 + (unsigned)(prop_next() % 300);
		size_t na = prop_next() % 4 == 0 ? 1 : prop_next() % 300, nb = prop_next() % 4 == 0 ? 1 : prop_next() % 300;

		prop_fill(&a, na, pool, NULL);
		prop_fill(&b, nb, pool, &a);
		mtd_lb_config_defaults(&ca, mtd_lb_find("CONSISTENT_HASH"));
		cb = ca;
		if (prop_next() % 4 == 0)
			ca.ring_points = 1 + (uint32_t)(prop_next() % 500);
		if (prop_next() % 4 == 0)
			cb.ring_points = 1 + (uint32_t)(prop_next() % 500);
		struct mtd_lb_picker *pa = mtd_lb_picker_new(&ca, a.eps, a.n, NULL);
		struct mtd_lb_picker *pb = mtd_lb_picker_new(&cb, b.eps, b.n, pa);
		struct mtd_lb_picker *fresh = mtd_lb_picker_new(&cb, b.eps, b.n, NULL);
		ck_assert_msg((pa != NULL || a.n == 0) && pb != NULL && fresh != NULL, "set %d: a picker not built", it);
		for (unsigned k = 0; k < 2000; k++) {
			int x = pick_key_at(pb, &b, k, 1000000), y = pick_key_at(fresh, &b, k, 1000000);
			ck_assert_msg(x == y, "set %d, key %u: %d over the previous ring, %d fresh", it, k, x, y);
		}
		mtd_lb_picker_free(fresh);
		mtd_lb_picker_free(pb);
		mtd_lb_picker_free(pa);
	}
}
END_TEST

static Suite *ring_suite(void)
{
	Suite *s = suite_create("lb_ring");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, warmup_share_curve_and_one_way_moves, 0, 4);
	tcase_add_loop_test(tc, warmup_inert_when_all_start_together, 0, 2);
	tcase_add_loop_test(tc, hot_keys_spread_only_above_threshold, 0, 2);
	tcase_add_loop_test(tc, hot_keys_window_ignores_a_wall_clock_step, 0, 2);
	tcase_add_loop_test(tc, hot_keys_window_counts_a_pick_a_turn_behind, 0, 4);
	tcase_add_test(tc, hot_keys_empty_counter_is_not_ahead_at_the_epochs_wrap);
	tcase_add_test(tc, hot_keys_options_checked);
	tcase_add_test(tc, slots_walk_order_exclusions_bound);
	tcase_add_test(tc, slots_walk_warmup_refusals_and_fallback);
	tcase_add_test(tc, slots_hot_spread_over_distinct_candidates);
	tcase_add_test(tc, ring_over_a_previous_is_the_fresh_ring);
	tcase_add_test(tc, ring_over_a_previous_is_the_fresh_ring_random_sets);
	suite_add_tcase(s, tc);
	return s;
}

T_RUN(ring_suite)
