/* CONSISTENT_HASH: a ketama ring (a hash ring with virtual nodes, as
 * Dubbo's ConsistentHashLoadBalance).
 *
 * Each endpoint gets ring_points x weight / 100 points (Dubbo's
 * hash.nodes, 160 by default; at least one for a positive weight; none for
 * weight <= 0 unless every weight is, then all count as 100). Points are
 * MD5 words of "<id>-<r>" (mtd_lb_ketama_points), so an endpoint's points
 * depend only on its stable id: adding or removing one endpoint moves only
 * the keys of the arcs it gains or loses, about 1/N of them. Equal points
 * are ordered by id, so the ring does not depend on endpoint order.
 *
 * A key is hashed with mtd_lb_hash64 (the top 32 bits place it on the
 * ring) and served by the first point clockwise; an excluded endpoint, or
 * one over its bounded-load share (bounded.h), passes the call to the next
 * point. A call without a key goes to a random eligible endpoint (the data
 * plane applies HashKey.on_missing = FAIL before picking). Built once per
 * endpoint set in init(); a pick is a bucket lookup, then a binary search
 * over the few points of that bucket (expected O(1) cache lines).
 *
 * Warmup (bounded.h): a new endpoint takes the keys of its arcs gradually,
 * a key moving to it once its warm share passes the key's fraction, and
 * never back.
 *
 * Hot keys (hotkeys.c): a key above hot_keys.threshold_per_second goes to
 * one of the first hot_keys.spread distinct endpoints clockwise, at random;
 * cold keys keep their one endpoint.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lb/bounded.h"
#include "lb/lb.h"
#include "lb/lb-impl.h"

#define MAX_TOTAL_POINTS (1u << 24)
#define BUCKET_POINTS    8

struct ring_point {
	uint32_t hash;
	uint32_t idx;
};

struct ch_state {
	const struct mtd_lb_endpoint *eps;
	size_t n;
	struct ring_point *ring;
	size_t len;
	/* Where the binary search starts: bucket b of nb covers the hashes h
	 * with h x nb / 2^32 == b, and find[b] is the first ring position at
	 * or past bucket b (find[nb] = len). About BUCKET_POINTS points per
	 * bucket, so a lookup reads find[] and one or two lines of the ring
	 * instead of log2(len) lines scattered over it. */
	uint32_t *find;
	size_t nb;
	double *w; /* ring weight of each endpoint (0: no points) */
	uint32_t *points_of; /* its number of points (what the next ring may reuse) */
	double factor;
	struct mtd_lb_warm_span span;
	struct mtd_lb__hot hot;
};

static const struct mtd_lb_endpoint *sort_eps;

static inline size_t bucket_of(const struct ch_state *s, uint32_t h)
{
	return (size_t)((uint64_t)h * s->nb >> 32);
}

static int point_cmp(const void *a, const void *b)
{
	const struct ring_point *x = a, *y = b;
	int c;

	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	c = strcmp(sort_eps[x->idx].id, sort_eps[y->idx].id);
	if (c != 0)
		return c;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* The ring in point_cmp's order: by hash (a least-significant-digit radix
 * sort, four passes of 8 bits; qsort's comparisons took 200 ms over the
 * 1.6 million points of 10,000 endpoints), then each run of equal hashes
 * (rare: a 32-bit collision) by id and index. tmp: len entries. */
static void ring_sort(struct ring_point *ring, struct ring_point *tmp, size_t len)
{
	static uint32_t count[1u << 8];
	struct ring_point *from = ring, *to = tmp;

	for (unsigned shift = 0; shift < 32; shift += 8) {
		uint32_t at = 0;

		memset(count, 0, sizeof(count));
		for (size_t k = 0; k < len; k++)
			count[from[k].hash >> shift & 0xff]++;
		for (size_t d = 0; d < 1u << 8; d++) {
			uint32_t c = count[d];

			count[d] = at;
			at += c;
		}
		for (size_t k = 0; k < len; k++)
			to[count[from[k].hash >> shift & 0xff]++] = from[k];
		struct ring_point *t = from;
		from = to;
		to = t;
	}
	/* An even number of passes: the sorted points are back in ring. */
	for (size_t k = 0; k + 1 < len;) {
		size_t end = k + 1;

		while (end < len && ring[end].hash == ring[k].hash)
			end++;
		if (end - k > 1)
			qsort(ring + k, end - k, sizeof(*ring), point_cmp);
		k = end;
	}
}

static void ch_destroy(void *state)
{
	struct ch_state *s = state;

	if (s == NULL)
		return;
	mtd_lb__hot_free(&s->hot);
	free(s->find);
	free(s->ring);
	free(s->w);
	free(s->points_of);
	free(s);
}

/* For each endpoint of s, the index of the endpoint of prev with the same
 * id and number of points (its points are the same), or UINT32_MAX: an
 * open-addressed table of s's ids, each claimed once (an id listed twice
 * keeps at most one match). map: s->n entries. -ENOMEM or 0. */
static int ring_reuse_map(const struct ch_state *s, const struct ch_state *prev, uint32_t *map)
{
	size_t cap = 16;
	uint32_t *slot;

	while (cap < 2 * s->n)
		cap *= 2;
	slot = malloc(cap * sizeof(*slot));
	if (slot == NULL)
		return -ENOMEM;
	memset(slot, 0xff, cap * sizeof(*slot));
	for (size_t i = 0; i < s->n; i++) {
		size_t h = (size_t)mtd_lb_hash64(s->eps[i].id, strlen(s->eps[i].id), 0) & (cap - 1);

		map[i] = UINT32_MAX;
		while (slot[h] != UINT32_MAX)
			h = (h + 1) & (cap - 1);
		slot[h] = (uint32_t)i;
	}
	for (size_t j = 0; j < prev->n; j++) {
		const char *id = prev->eps[j].id;
		size_t h = (size_t)mtd_lb_hash64(id, strlen(id), 0) & (cap - 1);

		for (; slot[h] != UINT32_MAX; h = (h + 1) & (cap - 1)) {
			uint32_t i = slot[h];

			if (strcmp(s->eps[i].id, id) != 0)
				continue;
			if (map[i] == UINT32_MAX && s->points_of[i] == prev->points_of[j] && s->points_of[i] > 0)
				map[i] = (uint32_t)j;
			break;
		}
	}
	free(slot);
	return 0;
}

/* s->ring[0..total) sorted: every endpoint's s->points_of[i] points.
 * An endpoint that prev (the ring this one replaces, or NULL) had with as
 * many points keeps them, read in order from prev's ring; only the others
 * are hashed (MD5) and sorted, then both merged: an update of one
 * endpoint in 100 among 10,000 rebuilds in 18 ms instead of 136
 * (bench/lb/README.md). The ring is the same as a fresh one's. */
static int ring_fill(struct ch_state *s, const struct ch_state *prev, size_t total)
{
	uint32_t *map = NULL, *old_to_new = NULL, *pts = NULL;
	struct ring_point *fresh = NULL, *tmp = NULL;
	size_t n_fresh = 0, k = 0;
	int rc = -ENOMEM;

	if (prev != NULL && prev->points_of != NULL && prev->len > 0 && s->n > 0) {
		map = malloc(s->n * sizeof(*map));
		old_to_new = malloc(prev->n * sizeof(*old_to_new));
		if (map == NULL || old_to_new == NULL || ring_reuse_map(s, prev, map) != 0)
			goto out;
		memset(old_to_new, 0xff, prev->n * sizeof(*old_to_new));
		for (size_t i = 0; i < s->n; i++)
			if (map[i] != UINT32_MAX)
				old_to_new[map[i]] = (uint32_t)i;
	}
	for (size_t i = 0; i < s->n; i++)
		if (map == NULL || map[i] == UINT32_MAX)
			n_fresh += s->points_of[i];
	/* Without a ring to reuse, the fresh points are the ring. */
	fresh = map == NULL ? s->ring : malloc((n_fresh > 0 ? n_fresh : 1) * sizeof(*fresh));
	tmp = malloc((n_fresh > 0 ? n_fresh : 1) * sizeof(*tmp));
	if (fresh == NULL || tmp == NULL)
		goto out;
	for (size_t i = 0, at = 0; i < s->n; i++) {
		uint32_t reps = (s->points_of[i] + 3) / 4;

		if (s->points_of[i] == 0 || (map != NULL && map[i] != UINT32_MAX))
			continue;
		free(pts);
		pts = calloc((size_t)reps * 4, sizeof(*pts));
		if (pts == NULL)
			goto out;
		rc = mtd_lb_ketama_points(s->eps[i].id, reps, pts);
		if (rc != 0)
			goto out;
		rc = -ENOMEM;
		for (uint32_t p = 0; p < s->points_of[i]; p++)
			fresh[at++] = (struct ring_point){pts[p], (uint32_t)i};
	}
	/* Control thread only, so the comparator's context and the radix
	 * counts can be static. */
	sort_eps = s->eps;
	ring_sort(fresh, tmp, n_fresh);
	if (map != NULL) {
		/* prev's ring less the endpoints that left or changed, as the
		 * new indices, merged with the fresh points. */
		size_t i = 0, j = 0;

		for (;;) {
			while (i < prev->len && old_to_new[prev->ring[i].idx] == UINT32_MAX)
				i++;
			if (i < prev->len) {
				struct ring_point a = {prev->ring[i].hash, old_to_new[prev->ring[i].idx]};

				if (j == n_fresh || point_cmp(&a, &fresh[j]) <= 0) {
					s->ring[k++] = a;
					i++;
					continue;
				}
			}
			if (j == n_fresh)
				break;
			s->ring[k++] = fresh[j++];
		}
	} else {
		k = n_fresh;
	}
	sort_eps = NULL;
	s->len = k;
	rc = k == total ? 0 : -EIO; /* each kept endpoint's points: as many as it had */
out:
	free(tmp);
	if (fresh != s->ring)
		free(fresh);
	free(pts);
	free(old_to_new);
	free(map);
	return rc;
}

static int ch_init(const struct mtd_lb_config *cfg, const struct mtd_lb_endpoint *eps, size_t n, const void *prev,
                   void **out)
{
	struct ch_state *s;
	uint32_t *points_of = NULL;
	uint64_t total = 0;
	double scale = 1.0;
	int rc = -ENOMEM;

	s = calloc(1, sizeof(*s));
	if (s == NULL)
		goto fail;
	s->eps = eps;
	s->n = n;
	s->factor = cfg->bounded_load_factor;
	mtd_lb__warm_span(&cfg->warmup, eps, n, &s->span);
	s->w = calloc(n, sizeof(*s->w));
	points_of = calloc(n, sizeof(*points_of));
	if (s->w == NULL || points_of == NULL || mtd_lb__hot_init(&s->hot, &cfg->hot_keys) != 0)
		goto free_state;
	mtd_lb__table_weights(s->w, eps, n);
	for (size_t i = 0; i < n; i++)
		total += (uint64_t)((double)cfg->ring_points * s->w[i] / 100.0 + 0.5);
	if (total > MAX_TOTAL_POINTS)
		scale = (double)MAX_TOTAL_POINTS / (double)total;
	total = 0;
	for (size_t i = 0; i < n; i++) {
		double p = (double)cfg->ring_points * s->w[i] / 100.0 * scale;

		points_of[i] = s->w[i] > 0.0 ? (uint32_t)(p + 0.5) : 0;
		if (s->w[i] > 0.0 && points_of[i] == 0)
			points_of[i] = 1;
		total += points_of[i];
	}
	s->ring = calloc(total, sizeof(*s->ring));
	if (s->ring == NULL)
		goto free_state;
	s->points_of = points_of;
	points_of = NULL;
	rc = ring_fill(s, prev, total);
	if (rc != 0)
		goto free_state;
	rc = -ENOMEM;
	s->nb = s->len / BUCKET_POINTS + 1;
	s->find = calloc(s->nb + 1, sizeof(*s->find));
	if (s->find == NULL)
		goto free_state;
	for (size_t b = 0, at = 0; b <= s->nb; b++) {
		while (at < s->len && bucket_of(s, s->ring[at].hash) < b)
			at++;
		s->find[b] = (uint32_t)at;
	}
	*out = s;
	return 0;

free_state:
	free(points_of);
	ch_destroy(s);
fail:
	return rc;
}

static size_t ring_find(const struct ch_state *s, uint32_t h)
{
	size_t b = bucket_of(s, h), lo = s->find[b], hi = s->find[b + 1];

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (s->ring[mid].hash < h)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo == s->len ? 0 : lo; /* past the last point: wrap around */
}

/* The ring as the key's candidates (bounded.h): point k -> its endpoint. */
static uint32_t ring_endpoint(const void *table, size_t k)
{
	return ((const struct ring_point *)table)[k].idx;
}

static int ch_pick(void *state, const struct mtd_lb_pick_ctx *ctx)
{
	struct ch_state *s = state;
	const struct mtd_lb__slots ring = {.table = s->ring, .len = s->len, .endpoint = ring_endpoint};
	struct mtd_lb__bound b;
	struct mtd_lb__warm_walk ww;
	bool warming;
	uint64_t kh;
	size_t at;
	int i;

	if (!mtd_lb__bound_start(&b, s->factor, s->w, s->eps, s->n, ctx))
		return mtd_lb__any_eligible(s->eps, s->n, ctx);
	kh = mtd_lb_hash64(ctx->key, ctx->key_len, 0);
	at = ring_find(s, (uint32_t)(kh >> 32));
	/* bounded.h: while some endpoint ramps, its keys pass on by the key's
	 * fraction; the span says until when anyone ramps. */
	warming = ctx->now_ms < s->span.ramp_until_ms;
	if (s->hot.slot != NULL && mtd_lb__hot_observe(&s->hot, kh, ctx->now_ns / 1000000)) {
		i = mtd_lb__slots_hot(ring, at, s->hot.spread, warming ? &s->span.w : NULL, s->eps, ctx);
		if (i >= 0)
			return i;
	}
	/* Two calls, so the walk without warmup compiles without the
	 * refusals (bench/lb: about 20 instructions a pick fewer than one call). */
	if (!warming) {
		i = mtd_lb__slots_walk(ring, at, &b, s->w, s->eps, NULL, ctx);
	} else {
		mtd_lb__warm_walk_init(&ww, &s->span.w, ctx->now_ms);
		i = mtd_lb__slots_walk(ring, at, &b, s->w, s->eps, &ww, ctx);
	}
	return i >= 0 ? i : mtd_lb__any_eligible(s->eps, s->n, ctx);
}

const struct mtd_lb_ops mtd_lb_ops_consistent_hash = {
        .name = "CONSISTENT_HASH",
        .caps = MTD_LB_CAP_WEIGHTS | MTD_LB_CAP_HASH_KEY | MTD_LB_CAP_BOUNDED_LOAD | MTD_LB_CAP_RING_POINTS |
                MTD_LB_CAP_WARMUP | MTD_LB_CAP_HOT_KEYS,
        .init = ch_init,
        .pick = ch_pick,
        .destroy = ch_destroy,
};
