/* CONSISTENT_HASH and MAGLEV: stickiness, spread (max/mean over 10,000
 * keys), remap fraction when one of N endpoints leaves or joins, bounded
 * load never exceeded, exclusions, missing key, weights, order
 * independence; the ring lookup against a plain sorted ring; and the hash
 * functions themselves. */
#include "config.h"

#include "lb-test.h"

static Suite *hash_suite(void);

#define NKEYS 10000

static const char *const policies[] = {"CONSISTENT_HASH", "MAGLEV"};

static int pick_key(struct mtd_lb_picker *p, struct t_set *s, unsigned key)
{
	char buf[32];
	struct mtd_lb_pick_ctx ctx = t_ctx(s);
	int n = snprintf(buf, sizeof(buf), "user-%u", key);

	ctx.key = (const uint8_t *)buf;
	ctx.key_len = (size_t)n;
	return mtd_lb_pick(p, &ctx);
}

/* The endpoint id each key maps to. */
static void map_keys(const char *policy, struct t_set *s, const char **out)
{
	struct mtd_lb_picker *p = t_picker(policy, s, NULL);

	for (unsigned k = 0; k < NKEYS; k++) {
		int i = pick_key(p, s, k);

		ck_assert_int_ge(i, 0);
		out[k] = s->eps[i].id;
	}
	mtd_lb_picker_free(p);
}

START_TEST(known_hashes)
{
	/* String.hashCode("abc") = 96354; ketama words are stable. */
	uint32_t a[4], b[4];

	ck_assert_int_eq(mtd_lb_java_string_hash("abc", 3), 96354);
	ck_assert_int_eq(mtd_lb_ketama_points("10.0.0.1:80", 1, a), 0);
	ck_assert_int_eq(mtd_lb_ketama_points("10.0.0.1:80", 1, b), 0);
	ck_assert_mem_eq(a, b, sizeof(a));
	ck_assert_uint_ne(a[0], a[1]);
	ck_assert_uint_eq(mtd_lb_hash64("key", 3, 0), mtd_lb_hash64("key", 3, 0));
	ck_assert_uint_ne(mtd_lb_hash64("key", 3, 0), mtd_lb_hash64("key", 3, 1));
	ck_assert_uint_ne(mtd_lb_hash64("key", 3, 0), mtd_lb_hash64("kez", 3, 0));
	ck_assert_uint_ne(mtd_lb_hash64("", 0, 0), mtd_lb_hash64("\0", 1, 0));
}
END_TEST

START_TEST(sticky_and_spread)
{
	/* Stated bounds: max/mean load over 10,000 keys on 10 endpoints is
	 * below 1.30 for the 160-point ring (ketama's own variance plus key
	 * sampling noise) and below 1.12 for maglev (sampling noise only). */
	static const double bound[2] = {1.30, 1.12};
	const char *policy = policies[_i];
	struct t_set s;
	struct mtd_lb_picker *p;
	uint64_t load[10] = {0};
	uint64_t max = 0;
	double ratio;

	t_set_init(&s, 10, NULL);
	p = t_picker(policy, &s, NULL);
	for (unsigned k = 0; k < NKEYS; k++) {
		int i = pick_key(p, &s, k);

		ck_assert_int_ge(i, 0);
		ck_assert_int_eq(pick_key(p, &s, k), i); /* sticky */
		load[i]++;
	}
	for (int i = 0; i < 10; i++)
		if (load[i] > max)
			max = load[i];
	ratio = (double)max / (NKEYS / 10.0);
	ck_assert_msg(ratio < bound[_i], "%s max/mean %.3f", policy, ratio);
	mtd_lb_picker_free(p);
	t_set_fini(&s);
}
END_TEST

START_TEST(remap_on_remove_and_add)
{
	const char *policy = policies[_i];
	static const char *before[NKEYS], *after[NKEYS];
	struct t_set s, t;
	size_t moved = 0, on_removed = 0, to_new = 0;
	const size_t N = 10;
	const char *removed, *added;
	double f;

	t_set_init(&s, N, NULL);
	map_keys(policy, &s, before);
	/* Remove endpoint 3: t = s without it (same ids for the others). */
	t_set_init(&t, N - 1, NULL);
	for (size_t i = 0, j = 0; i < N; i++)
		if (i != 3)
			memcpy(t.ids[j++], s.ids[i], sizeof(s.ids[i]));
	removed = s.ids[3];
	map_keys(policy, &t, after);
	for (unsigned k = 0; k < NKEYS; k++) {
		bool was = strcmp(before[k], removed) == 0;

		on_removed += was;
		if (strcmp(before[k], after[k]) != 0) {
			moved++;
			/* the ring moves nothing but the removed one's keys */
			if (_i == 0)
				ck_assert(was);
		} else {
			ck_assert(!was);
		}
	}
	f = (double)moved / NKEYS;
	/* Stated bound: within [0.5/N, 1.5/N] (1/N expected). */
	ck_assert_msg(f > 0.5 / N && f < 1.5 / N, "%s remove: %.4f", policy, f);
	ck_assert_uint_ge(moved, on_removed);

	/* Add an 11th endpoint to the original 10. */
	t_set_fini(&t);
	t_set_init(&t, N + 1, NULL);
	added = t.ids[N];
	map_keys(policy, &t, after);
	moved = 0;
	for (unsigned k = 0; k < NKEYS; k++)
		if (strcmp(before[k], after[k]) != 0) {
			moved++;
			to_new += strcmp(after[k], added) == 0;
		}
	f = (double)moved / NKEYS;
	ck_assert_msg(f > 0.5 / (N + 1) && f < 1.5 / (N + 1), "%s add: %.4f", policy, f);
	if (_i == 0)
		ck_assert_uint_eq(to_new, moved); /* only to the newcomer */
	else
		ck_assert_uint_ge(to_new * 10, moved * 9);
	t_set_fini(&s);
	t_set_fini(&t);
}
END_TEST

START_TEST(order_independent)
{
	const char *policy = policies[_i];
	static const char *a[NKEYS], *b[NKEYS];
	struct t_set s, t;

	t_set_init(&s, 8, NULL);
	map_keys(policy, &s, a);
	/* The same endpoints in reverse order. */
	t_set_init(&t, 8, NULL);
	for (size_t i = 0; i < 8; i++)
		memcpy(t.ids[i], s.ids[7 - i], sizeof(t.ids[i]));
	map_keys(policy, &t, b);
	for (unsigned k = 0; k < NKEYS; k++)
		ck_assert_str_eq(a[k], b[k]);
	t_set_fini(&s);
	t_set_fini(&t);
}
END_TEST

START_TEST(bounded_load_never_exceeded)
{
	const char *policy = policies[_i];
	struct t_set s;
	struct mtd_lb_config cfg = {0};
	struct mtd_lb_picker *p;
	struct mtd_lb_result ok = {.ok = true, .latency_us = 1};
	const double factor = 1.25;
	int inflight[4096];
	size_t nin = 0, spilled = 0;

	t_set_init(&s, 5, NULL);
	mtd_lb_config_defaults(&cfg, mtd_lb_find(policy));
	cfg.bounded_load_factor = factor;
	p = mtd_lb_picker_new(&cfg, s.eps, s.n, NULL);
	ck_assert_ptr_nonnull(p);
	for (int step = 0; step < 20000; step++) {
		/* Skewed keys: half the calls carry one hot key. */
		unsigned key = mtd_lb_rand(&s.rng) % 2 ? 7 : (unsigned)(mtd_lb_rand(&s.rng) % 1000);
		int64_t m = 0;
		double cap;
		int i;

		for (size_t k = 0; k < s.n; k++)
			m += t_live(&s.stats[k])->active;
		i = pick_key(p, &s, key);
		ck_assert_int_ge(i, 0);
		cap = ceil(factor * (double)(m + 1) / (double)s.n);
		/* no endpoint takes more than factor x the mean */
		ck_assert_msg((double)(t_live(&s.stats[i])->active + 1) <= cap, "%s: active %lld + 1 > cap %.0f", policy,
		              (long long)t_live(&s.stats[i])->active, cap);
		spilled += key == 7 && t_live(&s.stats[i])->active > 0;
		mtd_lb_call_begin(p, (size_t)i);
		inflight[nin++] = i;
		/* End a random call when 60 are in flight, sometimes more. */
		while (nin > 60 || (nin > 0 && mtd_lb_rand(&s.rng) % 3 == 0)) {
			size_t j = mtd_lb_rand(&s.rng) % nin;

			mtd_lb_call_end(p, (size_t)inflight[j], &ok, 1);
			inflight[j] = inflight[--nin];
		}
	}
	ck_assert_uint_gt(spilled, 0);
	mtd_lb_picker_free(p);
	t_set_fini(&s);
}
END_TEST

START_TEST(excluded_missing_key_weights)
{
	const char *policy = policies[_i];
	int32_t w[4] = {100, 100, 200, 0};
	struct t_set s;
	struct mtd_lb_picker *p;
	struct mtd_lb_pick_ctx ctx;
	uint64_t load[4] = {0};
	uint64_t counts[T_MAX_EPS];
	int first;

	t_set_init(&s, 4, w);
	p = t_picker(policy, &s, NULL);
	for (unsigned k = 0; k < NKEYS; k++)
		load[pick_key(p, &s, k)]++;
	/* Weight 0: no keys. Weight 200: about twice weight 100's. */
	ck_assert_uint_eq(load[3], 0);
	ck_assert_msg(load[2] > 1.6 * load[0] && load[2] < 2.5 * load[0], "%s weights: %llu vs %llu", policy,
	              (unsigned long long)load[2], (unsigned long long)load[0]);
	/* Exclude a key's endpoint: it moves, always to the same place. */
	first = pick_key(p, &s, 42);
	t_exclude(&s, (size_t)first);
	ck_assert_int_ne(pick_key(p, &s, 42), first);
	ck_assert_int_eq(pick_key(p, &s, 42), pick_key(p, &s, 42));
	ck_assert_int_ne(pick_key(p, &s, 42), 3);
	/* All positive excluded: the drained endpoint serves; then -1. */
	memset(s.excluded, 0, sizeof(s.excluded));
	t_exclude(&s, 0);
	t_exclude(&s, 1);
	t_exclude(&s, 2);
	ck_assert_int_eq(pick_key(p, &s, 42), 3);
	t_exclude(&s, 3);
	ck_assert_int_eq(pick_key(p, &s, 42), -1);
	/* No key: random over the eligible, never -1 while one is. */
	memset(s.excluded, 0, sizeof(s.excluded));
	t_count(p, &s, counts, 3000);
	ck_assert_uint_gt(counts[0], 800);
	ck_assert_uint_gt(counts[1], 800);
	ck_assert_uint_gt(counts[2], 800);
	ck_assert_uint_eq(counts[3], 0);
	ctx = t_ctx(&s);
	ctx.key = (const uint8_t *)"";
	ctx.key_len = 0; /* an empty key is a key */
	ck_assert_int_ge(mtd_lb_pick(p, &ctx), 0);
	mtd_lb_picker_free(p);
	t_set_fini(&s);
}
END_TEST

START_TEST(maglev_table_checks)
{
	struct t_set s;
	struct mtd_lb_config cfg;
	const char *field;

	t_set_init(&s, 20, NULL);
	mtd_lb_config_defaults(&cfg, mtd_lb_find("MAGLEV"));
	cfg.table_size = 65536; /* not prime */
	ck_assert_int_ne(mtd_lb_config_check(&cfg, &field), 0);
	ck_assert_str_eq(field, "table_size");
	ck_assert_ptr_null(mtd_lb_picker_new(&cfg, s.eps, s.n, NULL));
	cfg.table_size = 13; /* fewer slots than endpoints */
	ck_assert_ptr_null(mtd_lb_picker_new(&cfg, s.eps, s.n, NULL));
	cfg.table_size = 23;
	cfg.bounded_load_factor = 1.0; /* must be > 1 */
	ck_assert_int_ne(mtd_lb_config_check(&cfg, &field), 0);
	ck_assert_str_eq(field, "bounded_load_factor");
	mtd_lb_config_defaults(&cfg, mtd_lb_find("CONSISTENT_HASH"));
	cfg.ring_points = 0;
	ck_assert_int_ne(mtd_lb_config_check(&cfg, &field), 0);
	ck_assert_str_eq(field, "ring_points");
	t_set_fini(&s);
}
END_TEST

/* The ring's lookup (a bucket index, then a search inside the bucket:
 * consistent_hash.c) gives exactly the first point clockwise of a plain
 * sorted ring built here from the ketama words: 160 points per endpoint,
 * equal points ordered by id. Sizes 1, 3 and 200 (7 to 4,000 buckets). */
struct ref_point {
	uint32_t hash;
	const char *id;
	size_t idx;
};

static int ref_cmp(const void *a, const void *b)
{
	const struct ref_point *x = a, *y = b;

	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	return strcmp(x->id, y->id);
}

START_TEST(ring_lookup_matches_sorted_ring)
{
	static const size_t sizes[] = {1, 3, 200};
	static struct ref_point ref[200 * 160];
	static struct t_set s;
	size_t n = sizes[_i], len = 0;
	struct mtd_lb_picker *p;

	t_set_init(&s, n, NULL);
	for (size_t i = 0; i < n; i++) {
		uint32_t pts[160];

		ck_assert_int_eq(mtd_lb_ketama_points(s.eps[i].id, 40, pts), 0);
		for (size_t k = 0; k < 160; k++)
			ref[len++] = (struct ref_point){pts[k], s.eps[i].id, i};
	}
	qsort(ref, len, sizeof(ref[0]), ref_cmp);
	p = t_picker("CONSISTENT_HASH", &s, NULL);
	for (unsigned k = 0; k < 4 * NKEYS; k++) {
		char buf[32];
		int m = snprintf(buf, sizeof(buf), "user-%u", k);
		uint32_t h = (uint32_t)(mtd_lb_hash64(buf, (size_t)m, 0) >> 32);
		size_t lo = 0, hi = len;

		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;

			if (ref[mid].hash < h)
				lo = mid + 1;
			else
				hi = mid;
		}
		ck_assert_int_eq(pick_key(p, &s, k), (int)ref[lo == len ? 0 : lo].idx);
	}
	mtd_lb_picker_free(p);
	t_set_fini(&s);
}
END_TEST

static Suite *hash_suite(void)
{
	Suite *s = suite_create("lb_hash");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, known_hashes);
	tcase_add_loop_test(tc, sticky_and_spread, 0, 2);
	tcase_add_loop_test(tc, remap_on_remove_and_add, 0, 2);
	tcase_add_loop_test(tc, order_independent, 0, 2);
	tcase_add_loop_test(tc, bounded_load_never_exceeded, 0, 2);
	tcase_add_loop_test(tc, excluded_missing_key_weights, 0, 2);
	tcase_add_test(tc, maglev_table_checks);
	tcase_add_loop_test(tc, ring_lookup_matches_sorted_ring, 0, 3);
	suite_add_tcase(s, tc);
	return s;
}

T_RUN(hash_suite)
