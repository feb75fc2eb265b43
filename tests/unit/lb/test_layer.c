/* The routing layer (lib/lb/layer.c, subset.c): subset evenness and churn,
 * zone preference and spill-over proportions, canary (tag) selection and
 * its fallback, and that the policy keeps its properties inside a part. */
#include "config.h"

#include <errno.h>

#include "lb-test.h"

static Suite *layer_suite(void);

static struct mtd_lb_layer *layer(struct t_set *s, const char *policy, const struct mtd_lb_layer_config *lc)
{
	struct mtd_lb_config cfg;
	struct mtd_lb_layer *l;

	mtd_lb_config_defaults(&cfg, mtd_lb_find(policy));
	l = mtd_lb_layer_new(lc, &cfg, s->eps, s->n, NULL);
	ck_assert_ptr_nonnull(l);
	return l;
}

static void count_layer(struct mtd_lb_layer *l, struct t_set *s, const char *value, uint64_t *counts, uint64_t picks,
                        bool excl)
{
	struct mtd_lb_pick_ctx ctx = t_ctx(s);

	if (!excl)
		ctx.excluded = NULL;
	memset(counts, 0, sizeof(counts[0]) * s->n);
	for (uint64_t k = 0; k < picks; k++) {
		int i = mtd_lb_layer_pick(l, value, value ? strlen(value) : 0, &ctx);

		ck_assert_int_ge(i, 0);
		ck_assert_int_lt(i, (int)s->n);
		counts[i]++;
	}
}

/* ---- subset ------------------------------------------------------------- */

#define SIDECARS 100

static const struct mtd_lb_subset_config rdv25 = {.size = 25, .mode = MTD_LB_SUBSET_RENDEZVOUS};

START_TEST(subset_even_and_minimal_churn)
{
	static uint32_t before[SIDECARS][25], after[SIDECARS][25];
	static struct t_set s;
	size_t conns[T_MAX_EPS] = {0}, got;
	char node[48], gone[32];

	t_set_init(&s, 100, NULL);
	for (size_t c = 0; c < SIDECARS; c++) {
		snprintf(node, sizeof(node), "sidecar-%zu", c);
		ck_assert_int_eq(mtd_lb_subset(&rdv25, node, s.eps, s.n, before[c], &got), 0);
		ck_assert_uint_eq(got, 25);
		/* Deterministic, and sorted by index. */
		ck_assert_int_eq(mtd_lb_subset(&rdv25, node, s.eps, s.n, after[c], &got), 0);
		ck_assert_int_eq(memcmp(before[c], after[c], sizeof(before[c])), 0);
		for (size_t k = 0; k < 25; k++) {
			ck_assert(k == 0 || before[c][k] > before[c][k - 1]);
			conns[before[c][k]]++;
		}
	}
	/* binomial(100, 1/4) per endpoint: mean 25, sd 4.3; every endpoint
	 * within 4 sd. */
	for (size_t i = 0; i < s.n; i++)
		ck_assert_msg(conns[i] >= 8 && conns[i] <= 42, "endpoint %zu in %zu subsets", i, conns[i]);
	/* Endpoint 3 leaves (the last takes its index): only the sidecars
	 * that had it change, by exactly one slot. */
	snprintf(gone, sizeof(gone), "%s", s.ids[3]);
	memcpy(s.ids[3], s.ids[99], sizeof(s.ids[3]));
	s.n = 99;
	for (size_t c = 0; c < SIDECARS; c++) {
		bool had = false;
		size_t moved = 0;

		snprintf(node, sizeof(node), "sidecar-%zu", c);
		ck_assert_int_eq(mtd_lb_subset(&rdv25, node, s.eps, s.n, after[c], &got), 0);
		for (size_t k = 0; k < 25; k++) {
			const char *id = before[c][k] == 3 ? gone : before[c][k] == 99 ? s.ids[3] : s.ids[before[c][k]];
			bool kept = false;

			had |= before[c][k] == 3;
			for (size_t j = 0; j < 25; j++)
				kept |= strcmp(id, s.ids[after[c][j]]) == 0;
			moved += !kept;
		}
		ck_assert_uint_eq(moved, had ? 1 : 0);
	}
	/* size 0 or >= n: everyone. */
	ck_assert_int_eq(mtd_lb_subset(&(struct mtd_lb_subset_config){.size = 0}, "x", s.eps, 10, after[0], &got), 0);
	ck_assert_uint_eq(got, 10);
	ck_assert_int_eq(mtd_lb_subset(&(struct mtd_lb_subset_config){.size = 10}, "x", s.eps, 10, after[0], &got), 0);
	ck_assert_uint_eq(got, 10);
}
END_TEST

/* RING: SIDECARS sidecars, index 0..SIDECARS-1 of count
 * SIDECARS, size 25, over the first n endpoints of s. conns[i]: in how
 * many subsets endpoint i is; each subset distinct and sorted. */
static void ring_all(const struct mtd_lb_endpoint *eps, size_t n, uint32_t (*sub)[25], size_t *conns)
{
	struct mtd_lb_subset_config sc = {.size = 25, .mode = MTD_LB_SUBSET_RING, .count = SIDECARS};
	bool ok = true; /* one ck_assert per call: each one costs the forked test a write */
	size_t got;

	if (conns != NULL)
		memset(conns, 0, sizeof(conns[0]) * n);
	for (size_t c = 0; c < SIDECARS; c++) {
		sc.index = (uint32_t)c;
		ok &= mtd_lb_subset(&sc, NULL, eps, n, sub[c], &got) == 0 && got == 25;
		for (size_t k = 0; k < 25; k++) {
			ok &= (k == 0 || sub[c][k] > sub[c][k - 1]) && sub[c][k] < n;
			if (conns != NULL && sub[c][k] < n)
				conns[sub[c][k]]++;
		}
	}
	ck_assert_msg(ok, "n %zu: a subset is not 25 distinct sorted indices", n);
}

/* Slots of a (indices into ea) that b (indices into eb) lacks, by id (the
 * sets share the id strings). */
static size_t ring_moved(const uint32_t *a, const struct mtd_lb_endpoint *ea, const uint32_t *b,
                         const struct mtd_lb_endpoint *eb)
{
	size_t moved = 0;

	for (size_t k = 0; k < 25; k++) {
		bool kept = false;

		for (size_t j = 0; j < 25 && !kept; j++)
			kept = ea[a[k]].id == eb[b[j]].id;
		moved += !kept;
	}
	return moved;
}

static const size_t ring_ns[] = {100, 300, 1000};

/* The goal: max/mean at most 1.10 across 100 sidecars; RING gives every
 * endpoint floor or ceil of the mean, which is that at 100 and 300
 * endpoints, and at 1,000 (mean 2.5) the 3 / 2.5 whole connections allow. */
START_TEST(subset_ring_even_within_one_connection)
{
	static uint32_t sub[SIDECARS][25], again[SIDECARS][25];
	static struct t_set s;
	size_t conns[T_MAX_EPS];

	for (size_t z = 0; z < sizeof(ring_ns) / sizeof(ring_ns[0]); z++) {
		size_t n = ring_ns[z], lo, hi, max = 0, min = SIZE_MAX;
		double mean = (double)SIDECARS * 25 / (double)n;

		t_set_init(&s, n, NULL);
		ring_all(s.eps, n, sub, conns);
		ring_all(s.eps, n, again, NULL);
		ck_assert_int_eq(memcmp(sub, again, sizeof(sub)), 0); /* deterministic */
		lo = SIDECARS * 25 / n;
		hi = lo + (SIDECARS * 25 % n != 0);
		for (size_t i = 0; i < n; i++) {
			if (conns[i] < lo || conns[i] > hi)
				ck_abort_msg("n %zu: endpoint %zu in %zu subsets (mean %.2f)", n, i, conns[i], mean);
			max = conns[i] > max ? conns[i] : max;
			min = conns[i] < min ? conns[i] : min;
		}
		ck_assert_msg(n == 1000 || (double)max / mean <= 1.10, "n %zu: max/mean %.3f", n, (double)max / mean);
		ck_assert_uint_le(max - min, 1);
	}
	/* Any count: 7 sidecars of 10 over 23 endpoints are 70 slots, 3 or 4 each. */
	t_set_init(&s, 23, NULL);
	memset(conns, 0, sizeof(conns));
	for (uint32_t c = 0; c < 7; c++) {
		struct mtd_lb_subset_config sc = {.size = 10, .mode = MTD_LB_SUBSET_RING, .index = c, .count = 7};
		size_t got;

		ck_assert_int_eq(mtd_lb_subset(&sc, NULL, s.eps, s.n, sub[c], &got), 0);
		ck_assert_uint_eq(got, 10);
		for (size_t k = 0; k < 10; k++)
			conns[sub[c][k]]++;
	}
	for (size_t i = 0; i < s.n; i++)
		ck_assert_msg(conns[i] == 3 || conns[i] == 4, "endpoint %zu in %zu subsets", i, conns[i]);
}
END_TEST

/* The goal: an endpoint's departure moves at most 1/size of the
 * connections (SIDECARS slots of SIDECARS * 25), at most one per sidecar,
 * and every sidecar that had it takes exactly one other; the same for an
 * endpoint joining. Every departure at 100, 201 and 300 endpoints, every 17th at
 * 1,000, and the last. */
START_TEST(subset_ring_departure_moves_at_most_one_slot_per_sidecar)
{
	static uint32_t before[SIDECARS][25], after[SIDECARS][25];
	static struct t_set s;
	static struct mtd_lb_endpoint less[T_MAX_EPS], more[T_MAX_EPS];

	/* 201: one past a multiple of 2 * count, where floor((index + 1/2) * n /
	 * count) would move every window before the departed one. */
	static const size_t ns[] = {100, 201, 300, 1000};

	for (size_t z = 0; z < sizeof(ns) / sizeof(ns[0]); z++) {
		size_t n = ns[z], step = n >= 1000 ? 17 : 1, sum = 0, runs = 0;

		t_set_init(&s, n, NULL);
		ring_all(s.eps, n, before, NULL);
		for (size_t g = 0; g < n; g = g + step < n ? g + step : g == n - 1 ? n : n - 1) {
			size_t total = 0;

			for (size_t i = 0, j = 0; i < n; i++)
				if (i != g)
					less[j++] = s.eps[i];
			ring_all(less, n - 1, after, NULL);
			for (size_t c = 0; c < SIDECARS; c++) {
				size_t moved = ring_moved(before[c], s.eps, after[c], less);
				bool had = false;

				for (size_t k = 0; k < 25; k++)
					had |= before[c][k] == g;
				if (moved > 1 || (had && moved != 1))
					ck_abort_msg("n %zu, endpoint %zu leaves: sidecar %zu moves %zu", n, g, c,
					             moved);
				total += moved;
			}
			if (total > SIDECARS)
				ck_abort_msg("n %zu, endpoint %zu leaves: %zu slots move", n, g, total);
			sum += total;
			runs++;
		}
		/* On average well under the bound (a third to a half). */
		ck_assert_msg(sum <= runs * SIDECARS / 2, "n %zu: %zu slots per departure on average", n, sum / runs);
		/* One joins (at the end of eps; its place on the ring is its hash's). */
		memcpy(more, s.eps, n * sizeof(more[0]));
		more[n] = (struct mtd_lb_endpoint){.id = "10.9.9.9:9090", .weight = 100, .stats = &s.stats[n]};
		ring_all(more, n + 1, after, NULL);
		{
			size_t total = 0;

			for (size_t c = 0; c < SIDECARS; c++)
				total += ring_moved(before[c], s.eps, after[c], more);
			ck_assert_msg(total <= SIDECARS, "n %zu, one joins: %zu slots move", n, total);
		}
	}
}
END_TEST

START_TEST(subset_ring_refuses_a_bad_index_or_count)
{
	static struct t_set s;
	struct mtd_lb_layer_config lc = {.subset = {.size = 5, .mode = MTD_LB_SUBSET_RING, .index = 3, .count = 3},
	                                 .min_healthy_percent = 70};
	struct mtd_lb_config cfg;
	struct mtd_lb_layer *l;
	uint32_t sub[40];
	size_t got;

	t_set_init(&s, 40, NULL);
	ck_assert_int_eq(mtd_lb_subset(&lc.subset, NULL, s.eps, s.n, sub, &got), -EINVAL); /* index >= count */
	lc.subset.count = 0;
	lc.subset.index = 0;
	ck_assert_int_eq(mtd_lb_subset(&lc.subset, NULL, s.eps, s.n, sub, &got), -EINVAL); /* no count */
	ck_assert(!mtd_lb_subset_config_ok(&lc.subset));
	mtd_lb_config_defaults(&cfg, mtd_lb_find("ROUND_ROBIN"));
	ck_assert_ptr_null(mtd_lb_layer_new(&lc, &cfg, s.eps, s.n, NULL));
	ck_assert_int_eq(mtd_lb_subset(&rdv25, NULL, s.eps, s.n, sub, &got), -EINVAL); /* RENDEZVOUS needs node_id */
	/* Sane: fewer endpoints than size keeps them all, index 0 of 1 the first window. */
	lc.subset.count = 1;
	ck_assert_int_eq(mtd_lb_subset(&lc.subset, NULL, s.eps, 4, sub, &got), 0);
	ck_assert_uint_eq(got, 4);
	ck_assert_int_eq(mtd_lb_subset(&lc.subset, NULL, s.eps, s.n, sub, &got), 0);
	ck_assert_uint_eq(got, 5);
	l = mtd_lb_layer_new(&lc, &cfg, s.eps, s.n, NULL);
	ck_assert_ptr_nonnull(l);
	for (size_t i = 0, k = 0; i < s.n; i++) {
		bool in = k < 5 && sub[k] == i;

		k += in;
		ck_assert(mtd_lb_layer_reachable(l, i) == in);
	}
	mtd_lb_layer_free(l);
}
END_TEST

START_TEST(subset_bounds_what_the_layer_reaches)
{
	static struct t_set s;
	struct mtd_lb_layer_config lc = {.node_id = "sidecar-7", .subset = {.size = 5}, .min_healthy_percent = 70};
	struct mtd_lb_layer *l;
	uint64_t counts[T_MAX_EPS];
	uint32_t sub[5];
	size_t got, used = 0;

	t_set_init(&s, 40, NULL);
	l = layer(&s, "ROUND_ROBIN", &lc);
	ck_assert_int_eq(mtd_lb_subset(&lc.subset, "sidecar-7", s.eps, s.n, sub, &got), 0);
	count_layer(l, &s, NULL, counts, 5000, false);
	for (size_t i = 0; i < s.n; i++) {
		bool in = false;

		for (size_t k = 0; k < 5; k++)
			in |= sub[k] == i;
		ck_assert(mtd_lb_layer_reachable(l, i) == in);
		if (counts[i] > 0) {
			ck_assert(in);
			used++;
			/* round robin inside the subset */
			ck_assert_uint_eq(counts[i], 1000);
		}
	}
	ck_assert_uint_eq(used, 5);
	mtd_lb_layer_free(l);
}
END_TEST

/* ---- zones -------------------------------------------------------------- */

/* 10 endpoints in zone a (0..9), 10 in b (10..19), 5 in c (20..24). */
static void zones(struct t_set *s)
{
	t_set_init(s, 25, NULL);
	for (size_t i = 0; i < s->n; i++)
		t_zone(s, i, i < 10 ? "a" : i < 20 ? "b" : "c");
}

static uint64_t sum_range(const uint64_t *c, size_t from, size_t to)
{
	uint64_t x = 0;

	for (size_t i = from; i < to; i++)
		x += c[i];
	return x;
}

START_TEST(zone_prefer_local_and_spill_proportions)
{
	static struct t_set s;
	struct mtd_lb_layer_config lc = {
	        .zone = "a", .locality = MTD_LB_LOCALITY_PREFER_LOCAL, .min_healthy_percent = 70};
	struct mtd_lb_layer *l;
	uint64_t counts[T_MAX_EPS];
	const uint64_t picks = 60000;
	double local;

	zones(&s);
	l = layer(&s, "RANDOM", &lc);
	/* All healthy: all local. */
	count_layer(l, &s, NULL, counts, picks, true);
	ck_assert_uint_eq(sum_range(counts, 0, 10), picks);
	/* 8 of 10 local eligible (80 % >= 70 %): still all local. */
	t_exclude(&s, 0);
	t_exclude(&s, 1);
	count_layer(l, &s, NULL, counts, picks, true);
	ck_assert_uint_eq(sum_range(counts, 0, 10), picks);
	/* 5 of 10 (50 %): 50 / 70 of the calls stay, the rest spill over to
	 * b and c in proportion to their endpoints (10 : 5). */
	t_exclude(&s, 2);
	t_exclude(&s, 3);
	t_exclude(&s, 4);
	count_layer(l, &s, NULL, counts, picks, true);
	local = (double)sum_range(counts, 0, 10) / (double)picks;
	ck_assert_msg(fabs(local - 50.0 / 70.0) < 0.01, "local share %.4f", local);
	ck_assert_uint_eq(sum_range(counts, 0, 5), 0);
	{
		double b = (double)sum_range(counts, 10, 20), c = (double)sum_range(counts, 20, 25);

		ck_assert_msg(fabs(b / (b + c) - 2.0 / 3.0) < 0.015, "b share of the spill %.4f", b / (b + c));
	}
	/* None local: everything spills over. */
	for (size_t i = 5; i < 10; i++)
		t_exclude(&s, i);
	count_layer(l, &s, NULL, counts, picks, true);
	ck_assert_uint_eq(sum_range(counts, 0, 10), 0);
	ck_assert_uint_eq(sum_range(counts, 10, 25), picks);
	mtd_lb_layer_free(l);
}
END_TEST

START_TEST(zone_strict_off_and_no_zone)
{
	static struct t_set s;
	struct mtd_lb_layer_config lc = {.zone = "b", .locality = MTD_LB_LOCALITY_STRICT, .min_healthy_percent = 70};
	struct mtd_lb_layer *l;
	struct mtd_lb_pick_ctx ctx;
	uint64_t counts[T_MAX_EPS];

	zones(&s);
	l = layer(&s, "ROUND_ROBIN", &lc);
	count_layer(l, &s, NULL, counts, 1000, true);
	ck_assert_uint_eq(sum_range(counts, 10, 20), 1000);
	ck_assert(!mtd_lb_layer_reachable(l, 0));
	for (size_t i = 10; i < 20; i++)
		t_exclude(&s, i);
	ctx = t_ctx(&s);
	/* STRICT never leaves its zone. */
	ck_assert_int_eq(mtd_lb_layer_pick(l, NULL, 0, &ctx), -1);
	mtd_lb_layer_free(l);

	/* OFF, and PREFER_LOCAL without a zone of our own: every zone. */
	lc.locality = MTD_LB_LOCALITY_OFF;
	for (int k = 0; k < 2; k++) {
		memset(s.excluded, 0, sizeof(s.excluded));
		l = layer(&s, "ROUND_ROBIN", &lc);
		count_layer(l, &s, NULL, counts, 2500, true);
		for (size_t i = 0; i < s.n; i++)
			ck_assert_uint_eq(counts[i], 100);
		mtd_lb_layer_free(l);
		lc.locality = MTD_LB_LOCALITY_PREFER_LOCAL;
		lc.zone = NULL;
	}
}
END_TEST

/* ---- canary / tags ------------------------------------------------------ */

static const struct mtd_lb_meta v1[] = {{"version", "v1"}, {"team", "x"}};
static const struct mtd_lb_meta v2[] = {{"version", "v2"}};
static const struct mtd_lb_meta other[] = {{"team", "y"}};
static const struct mtd_lb_attrs l_v1 = {.meta = {v1, 2}}, l_v2 = {.meta = {v2, 1}}, l_other = {.meta = {other, 1}};

/* 0..1 version v1, 2 version v2, 3..5 untagged (4 has another key). */
static void tagged(struct t_set *s)
{
	t_set_init(s, 6, NULL);
	s->eps[0].attrs = &l_v1;
	s->eps[1].attrs = &l_v1;
	s->eps[2].attrs = &l_v2;
	s->eps[4].attrs = &l_other;
}

START_TEST(canary_selection_and_fallback)
{
	static struct t_set s;
	struct mtd_lb_layer_config lc = {.metadata_key = "version", .min_healthy_percent = 70};
	struct mtd_lb_layer *l;
	struct mtd_lb_pick_ctx ctx;
	uint64_t counts[T_MAX_EPS];

	tagged(&s);
	l = layer(&s, "ROUND_ROBIN", &lc);
	/* v2: only endpoint 2. */
	count_layer(l, &s, "v2", counts, 300, true);
	ck_assert_uint_eq(counts[2], 300);
	/* v1: 0 and 1, round robin between them. */
	count_layer(l, &s, "v1", counts, 300, true);
	ck_assert_uint_eq(counts[0], 150);
	ck_assert_uint_eq(counts[1], 150);
	/* No header: only the untagged (3, 4, 5). */
	count_layer(l, &s, NULL, counts, 300, true);
	ck_assert_uint_eq(counts[3] + counts[4] + counts[5], 300);
	ck_assert_uint_eq(counts[3], 100);
	/* An unknown version, and v2 with its endpoint excluded: untagged. */
	count_layer(l, &s, "v9", counts, 300, true);
	ck_assert_uint_eq(counts[3] + counts[4] + counts[5], 300);
	t_exclude(&s, 2);
	count_layer(l, &s, "v2", counts, 300, true);
	ck_assert_uint_eq(counts[3] + counts[4] + counts[5], 300);
	mtd_lb_layer_free(l);

	/* fallback FAIL: no untagged fallback. */
	lc.fallback_fail = true;
	l = layer(&s, "ROUND_ROBIN", &lc);
	ctx = t_ctx(&s);
	ck_assert_int_eq(mtd_lb_layer_pick(l, "v2", 2, &ctx), -1);
	ck_assert_int_eq(mtd_lb_layer_pick(l, "v9", 2, &ctx), -1);
	ck_assert_int_ge(mtd_lb_layer_pick(l, "v1", 2, &ctx), 0);
	ck_assert_int_le(mtd_lb_layer_pick(l, "v1", 2, &ctx), 1);
	/* A call without the header still goes to the untagged. */
	ck_assert_int_ge(mtd_lb_layer_pick(l, NULL, 0, &ctx), 3);
	mtd_lb_layer_free(l);

	/* No routing configured: one group, every endpoint. */
	memset(s.excluded, 0, sizeof(s.excluded));
	lc.metadata_key = NULL;
	l = layer(&s, "ROUND_ROBIN", &lc);
	count_layer(l, &s, "v2", counts, 600, true);
	for (size_t i = 0; i < s.n; i++)
		ck_assert_uint_eq(counts[i], 100);
	mtd_lb_layer_free(l);
}
END_TEST

START_TEST(canary_with_zones_and_call_accounting)
{
	static struct t_set s;
	struct mtd_lb_layer_config lc = {.zone = "a",
	                                 .locality = MTD_LB_LOCALITY_PREFER_LOCAL,
	                                 .min_healthy_percent = 70,
	                                 .metadata_key = "version"};
	struct mtd_lb_config cfg;
	struct mtd_lb_layer *l;
	struct mtd_lb_pick_ctx ctx;
	struct mtd_lb_result ok = {.ok = true, .latency_us = 10};

	tagged(&s);
	for (size_t i = 0; i < s.n; i++)
		t_zone(&s, i, i % 2 == 0 ? "a" : "b");
	mtd_lb_config_defaults(&cfg, mtd_lb_find("LEAST_ACTIVE"));
	l = mtd_lb_layer_new(&lc, &cfg, s.eps, s.n, NULL);
	ck_assert_ptr_nonnull(l);
	ctx = t_ctx(&s);
	ctx.excluded = NULL;
	/* v1 lives in a (0) and b (1): local first. A call in flight on 0
	 * keeps LEAST_ACTIVE inside the part: still 0, the only local one. */
	ck_assert_int_eq(mtd_lb_layer_pick(l, "v1", 2, &ctx), 0);
	mtd_lb_layer_call_begin(l, 0);
	ck_assert_int_eq(atomic_load(&t_live(&s.stats[0])->active), 1);
	ck_assert_int_eq(mtd_lb_layer_pick(l, "v1", 2, &ctx), 0);
	mtd_lb_layer_call_end(l, 0, &ok, 1);
	ck_assert_int_eq(atomic_load(&t_live(&s.stats[0])->active), 0);
	/* Untagged: 3 (b), 4 (a), 5 (b): local is 4. */
	ck_assert_int_eq(mtd_lb_layer_pick(l, NULL, 0, &ctx), 4);
	mtd_lb_layer_tick(l, 1000, 1000);
	mtd_lb_layer_free(l);
	/* Bad options. */
	lc.min_healthy_percent = 101;
	ck_assert_ptr_null(mtd_lb_layer_new(&lc, &cfg, s.eps, s.n, NULL));
}
END_TEST

static Suite *layer_suite(void)
{
	Suite *s = suite_create("lb_layer");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, subset_even_and_minimal_churn);
	tcase_add_test(tc, subset_bounds_what_the_layer_reaches);
	tcase_add_test(tc, subset_ring_even_within_one_connection);
	tcase_add_test(tc, subset_ring_departure_moves_at_most_one_slot_per_sidecar);
	tcase_add_test(tc, subset_ring_refuses_a_bad_index_or_count);
	tcase_add_test(tc, zone_prefer_local_and_spill_proportions);
	tcase_add_test(tc, zone_strict_off_and_no_zone);
	tcase_add_test(tc, canary_selection_and_fallback);
	tcase_add_test(tc, canary_with_zones_and_call_accounting);
	suite_add_tcase(s, tc);
	return s;
}

T_RUN(layer_suite)
