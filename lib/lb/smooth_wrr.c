/* SMOOTH_WEIGHTED_ROUND_ROBIN (nginx ngx_http_upstream_get_peer; Dubbo
 * RoundRobinLoadBalance). nginx, per pick:
 *     current[i] += weight[i];  total += weight[i]
 *     best = argmax current (first on ties)
 *     current[best] -= total
 * Weights {5,1,1} give a a b a c a a.
 *
 * That sequence is periodic: after W = sum of weights picks every current
 * weight is back at 0, and scaling all weights by their gcd g repeats the
 * W/g sequence g times. init() therefore lays out one cycle of W/g turns,
 * exactly nginx's, and a pick is a shared atomic counter modulo the cycle:
 * O(1), lock-free, the exact global sequence across workers (nginx keeps
 * one sequence per upstream, shared by its workers through a lock; here
 * the counter is the only shared write).
 *
 * Laying out the cycle: endpoints of equal weight are taken in index
 * order, round robin (they start equal; the first of the least-picked
 * wins every tie), so a step compares one candidate per distinct weight:
 * O(W/g x distinct weights) once per endpoint set. Past LAYOUT_BUDGET steps
 * (huge sets with many distinct weights) the cycle is laid out by earliest
 * deadline first instead (turn k of endpoint i due at (k + 1/2) / w_i,
 * O(W/g log n)): the same turns per cycle, not nginx's order. A cycle longer
 * than MAX_CYCLE scales the weights down first (every endpoint keeps at
 * least one turn). Both limits are far above what a fleet of equal
 * weights needs (W/g = n, one distinct weight).
 *
 * Health: a failure cuts an endpoint's effective weight by a quarter (nginx
 * cuts weight / max_fails), a success restores 1/16, and tick() restores a
 * tenth per second, so an endpoint that failed and was left alone is back
 * at full weight after ten seconds. Warmup ramps it the same way. Either
 * thins the endpoint's turns instead of rebuilding the cycle: a turn of
 * endpoint i is kept for a fraction f_i = health x warm weight / weight of
 * its visits, by a per-endpoint credit counter (Bresenham: kept when the
 * credit crosses a multiple of CREDIT_ONE), and a refused turn passes the
 * pick to the next turn of the cycle. Shares are then w_i f_i / sum, evenly
 * spread, and still O(1) per pick while some endpoints keep full turns;
 * after MAX_PROBES refused or excluded turns the pick falls back to an O(n)
 * weighted choice over the effective weights.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lb/lb-impl.h"

#define HEALTH_FULL      1000
#define HEALTH_FAIL_CUT  (HEALTH_FULL / 4)
#define HEALTH_OK_GAIN   (HEALTH_FULL / 16)
#define HEALTH_TICK_GAIN (HEALTH_FULL / 10)
#define CREDIT_ONE       (1u << 20)
#define MAX_CYCLE        (1u << 22)
#define LAYOUT_BUDGET    (1ULL << 27)
#define MAX_PROBES       16

struct swrr_state {
	_Alignas(MTD_LB_CACHELINE) _Atomic uint64_t next;
	_Alignas(MTD_LB_CACHELINE) const struct mtd_lb_endpoint *eps;
	size_t n;
	uint32_t *cycle;
	size_t len;
	bool exact;               /* the cycle is nginx's sequence (tests) */
	_Atomic int32_t *health;  /* per endpoint, permille */
	_Atomic uint64_t *credit; /* per endpoint, thinning credit */
	struct mtd_lb_warm_span span;
};

static uint64_t gcd64(uint64_t a, uint64_t b)
{
	while (b != 0) {
		uint64_t t = a % b;

		a = b;
		b = t;
	}
	return a;
}

static int weight_cmp(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b; /* {weight, index} pairs */

	if (x[0] != y[0])
		return x[0] > y[0] ? -1 : 1;
	return x[1] < y[1] ? -1 : x[1] > y[1];
}

/* nginx's sequence over classes of equal weight (header comment). */
static int layout_exact(uint32_t *cycle, const uint64_t *w, size_t n, uint64_t total)
{
	uint64_t *pairs = calloc(n, 2 * sizeof(uint64_t));
	struct cls {
		uint64_t w;
		size_t first, m; /* members: pairs[first .. first + m), by index */
		uint64_t picks;
		int64_t cur;
	} *cls = calloc(n, sizeof(*cls));
	size_t np = 0, nc = 0;
	int rc = -ENOMEM;

	if (pairs == NULL || cls == NULL)
		goto out;
	for (size_t i = 0; i < n; i++)
		if (w[i] > 0) {
			pairs[2 * np] = w[i];
			pairs[2 * np + 1] = i;
			np++;
		}
	qsort(pairs, np, 2 * sizeof(uint64_t), weight_cmp);
	for (size_t k = 0; k < np; k++) {
		if (nc == 0 || cls[nc - 1].w != pairs[2 * k])
			cls[nc++] = (struct cls){.w = pairs[2 * k], .first = k};
		cls[nc - 1].m++;
	}
	/* Class c's candidate is member picks % m with current weight
	 * s * w - total * (picks / m) at step s; the global argmax, first
	 * index on ties, is nginx's choice. */
	for (uint64_t step = 1; step <= total; step++) {
		size_t best = SIZE_MAX;
		int64_t best_cur = 0;
		uint64_t best_idx = 0;

		for (size_t c = 0; c < nc; c++) {
			int64_t cur = (int64_t)(step * cls[c].w) - (int64_t)(total * (cls[c].picks / cls[c].m));
			uint64_t idx = pairs[2 * (cls[c].first + cls[c].picks % cls[c].m) + 1];

			if (best == SIZE_MAX || cur > best_cur || (cur == best_cur && idx < best_idx)) {
				best = c;
				best_cur = cur;
				best_idx = idx;
			}
		}
		cycle[step - 1] = (uint32_t)best_idx;
		cls[best].picks++;
	}
	rc = 0;
out:
	free(cls);
	free(pairs);
	return rc;
}

/* Earliest deadline first: turn k of i due at (2k + 1) / (2 w_i). */
struct edf {
	uint32_t *heap;
	uint64_t *turns;
	const uint64_t *w;
	size_t len;
};

static bool edf_before(const struct edf *e, uint32_t a, uint32_t b)
{
	unsigned __int128 da = (unsigned __int128)(2 * e->turns[a] + 1) * e->w[b];
	unsigned __int128 db = (unsigned __int128)(2 * e->turns[b] + 1) * e->w[a];

	return da < db || (da == db && a < b);
}

static void edf_sift_down(struct edf *e, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		uint32_t t;

		if (l < e->len && edf_before(e, e->heap[l], e->heap[m]))
			m = l;
		if (r < e->len && edf_before(e, e->heap[r], e->heap[m]))
			m = r;
		if (m == i)
			return;
		t = e->heap[i];
		e->heap[i] = e->heap[m];
		e->heap[m] = t;
		i = m;
	}
}

static int layout_edf(uint32_t *cycle, const uint64_t *w, size_t n, uint64_t total)
{
	struct edf e = {.w = w};
	int rc = -ENOMEM;

	e.turns = calloc(n, sizeof(*e.turns));
	e.heap = calloc(n, sizeof(*e.heap));
	if (e.turns == NULL || e.heap == NULL)
		goto out;
	for (size_t i = 0; i < n; i++)
		if (w[i] > 0)
			e.heap[e.len++] = (uint32_t)i;
	for (size_t i = e.len / 2; i-- > 0;)
		edf_sift_down(&e, i);
	for (uint64_t k = 0; k < total; k++) {
		cycle[k] = e.heap[0];
		e.turns[e.heap[0]]++;
		edf_sift_down(&e, 0);
	}
	rc = 0;
out:
	free(e.heap);
	free(e.turns);
	return rc;
}

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

static int build_cycle(struct swrr_state *s)
{
	uint64_t *w = calloc(s->n, sizeof(*w));
	uint64_t g = 0, total = 0, distinct = 0;
	bool any_positive = false;
	int rc = -ENOMEM;

	if (w == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < s->n; i++)
		any_positive |= s->eps[i].weight > 0;
	for (size_t i = 0; i < s->n; i++) {
		/* Drained endpoints have no turn unless everyone is drained,
		 * then everyone has weight 1 (lb-impl.h "last resort"). */
		w[i] = any_positive ? (s->eps[i].weight > 0 ? (uint64_t)s->eps[i].weight : 0) : 1;
		if (w[i] > 0)
			g = gcd64(g, w[i]);
	}
	for (size_t i = 0; i < s->n; i++) {
		w[i] /= g;
		total += w[i];
	}
	s->exact = true;
	if (total > MAX_CYCLE && total > s->n) {
		uint64_t cap = MAX_CYCLE > s->n ? MAX_CYCLE : s->n, t2 = 0;

		for (size_t i = 0; i < s->n; i++) {
			if (w[i] == 0)
				continue;
			w[i] = (uint64_t)((double)w[i] * (double)cap / (double)total);
			if (w[i] == 0)
				w[i] = 1;
			t2 += w[i];
		}
		total = t2;
		s->exact = false;
	}
	{
		/* Distinct weights, for the layout budget. */
		uint64_t *sorted = calloc(s->n, sizeof(*sorted));

		if (sorted == NULL)
			goto out;
		memcpy(sorted, w, s->n * sizeof(*sorted));
		qsort(sorted, s->n, sizeof(*sorted), u64_cmp);
		for (size_t i = 0; i < s->n; i++)
			distinct += sorted[i] > 0 && (i == 0 || sorted[i] != sorted[i - 1]);
		free(sorted);
	}
	s->cycle = calloc(total, sizeof(*s->cycle));
	if (s->cycle == NULL)
		goto out;
	s->len = total;
	if (total * distinct <= LAYOUT_BUDGET) {
		rc = layout_exact(s->cycle, w, s->n, total);
	} else {
		s->exact = false;
		rc = layout_edf(s->cycle, w, s->n, total);
	}
out:
	free(w);
	return rc;
}

static void swrr_destroy(void *state)
{
	struct swrr_state *s = state;

	if (s == NULL)
		return;
	free(s->cycle);
	free(s->health);
	free(s->credit);
	free(s);
}

struct kept_health {
	const struct mtd_lb_stats *stats;
	int32_t health;
};

static int kept_cmp(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)((const struct kept_health *)a)->stats,
	          y = (uintptr_t)((const struct kept_health *)b)->stats;

	return (x > y) - (x < y);
}

/* Every endpoint of s starts at full health, but one that stays in the
 * set (the same stats: an endpoint keeps them while it stays) keeps its
 * health from old (NULL: none). Matched in O(n log n), not by a scan of
 * old per endpoint (10,000 x 10,000 comparisons for a large set). 0 or
 * -ENOMEM. */
static int inherit_health(struct swrr_state *s, const struct swrr_state *old)
{
	struct kept_health *kept = NULL;
	size_t n_old = old != NULL ? old->n : 0;

	if (n_old > 0 && (kept = calloc(n_old, sizeof(*kept))) == NULL)
		return -ENOMEM;
	for (size_t j = 0; j < n_old; j++)
		kept[j] = (struct kept_health){old->eps[j].stats, atomic_load(&old->health[j])};
	if (n_old > 0)
		qsort(kept, n_old, sizeof(*kept), kept_cmp);
	for (size_t i = 0; i < s->n; i++) {
		struct kept_health key = {.stats = s->eps[i].stats};
		const struct kept_health *k = n_old > 0 ? bsearch(&key, kept, n_old, sizeof(*kept), kept_cmp) : NULL;

		atomic_init(&s->health[i], k != NULL ? k->health : HEALTH_FULL);
		atomic_init(&s->credit[i], 0);
	}
	free(kept);
	return 0;
}

static int swrr_init(const struct mtd_lb_config *cfg, const struct mtd_lb_endpoint *eps, size_t n, const void *prev,
                     void **out)
{
	const struct swrr_state *old = prev;
	struct swrr_state *s;
	int rc = -ENOMEM;

	s = aligned_alloc(MTD_LB_CACHELINE, (sizeof(*s) + MTD_LB_CACHELINE - 1) / MTD_LB_CACHELINE * MTD_LB_CACHELINE);
	if (s == NULL)
		goto fail;
	*s = (struct swrr_state){.eps = eps, .n = n};
	mtd_lb__warm_span(&cfg->warmup, eps, n, &s->span);
	s->health = calloc(n, sizeof(*s->health));
	s->credit = calloc(n, sizeof(*s->credit));
	if (s->health == NULL || s->credit == NULL)
		goto free_state;
	rc = build_cycle(s);
	if (rc != 0)
		goto free_state;
	rc = inherit_health(s, old);
	if (rc != 0)
		goto free_state;
	/* nginx starts every sequence at its first turn; a new set carries
	 * on from the old position. */
	atomic_init(&s->next, old != NULL ? atomic_load(&old->next) : 0);
	*out = s;
	return 0;

free_state:
	swrr_destroy(s);
fail:
	return rc;
}

/* Kept fraction of i's turns in units of CREDIT_ONE (header comment). */
static uint32_t keep_of(const struct swrr_state *s, size_t i, bool warming, int64_t now_ms)
{
	int32_t h = atomic_load_explicit(&s->health[i], memory_order_relaxed);
	double f = (double)h / HEALTH_FULL;

	if (warming && s->eps[i].weight > 0)
		f *= mtd_lb__weight_at(&s->span, &s->eps[i], now_ms) / (double)s->eps[i].weight;
	return (uint32_t)(f * CREDIT_ONE);
}

/* O(n): weighted random over weight x kept fraction among the eligible. */
static int slow_pick(struct swrr_state *s, const struct mtd_lb_pick_ctx *ctx, bool warming)
{
	double total = 0.0, r;
	int last = -1;

	for (size_t i = 0; i < s->n; i++)
		if (!mtd_lb__excluded(ctx, i) && s->eps[i].weight > 0)
			total += (double)s->eps[i].weight * keep_of(s, i, warming, ctx->now_ms);
	if (!(total > 0.0)) /* only drained or fully unhealthy endpoints left */
		return mtd_lb__wrandom_slow(&s->span, s->eps, s->n, ctx);
	r = mtd_lb__unit(mtd_lb__rng(ctx)) * total;
	for (size_t i = 0; i < s->n; i++) {
		double wi;

		if (mtd_lb__excluded(ctx, i) || s->eps[i].weight <= 0)
			continue;
		wi = (double)s->eps[i].weight * keep_of(s, i, warming, ctx->now_ms);
		if (wi <= 0.0)
			continue;
		last = (int)i;
		if (r < wi)
			return (int)i;
		r -= wi;
	}
	return last;
}

static int swrr_pick(void *state, const struct mtd_lb_pick_ctx *ctx)
{
	struct swrr_state *s = state;
	bool warming = mtd_lb__warming(&s->span, ctx->now_ms);

	for (int probe = 0; probe < MAX_PROBES; probe++) {
		uint64_t c = atomic_fetch_add_explicit(&s->next, 1, memory_order_relaxed);
		uint32_t i = s->cycle[c % s->len];
		uint32_t keep;
		uint64_t old;

		if (mtd_lb__excluded(ctx, i))
			continue;
		keep = keep_of(s, i, warming, ctx->now_ms);
		if (keep >= CREDIT_ONE)
			return (int)i;
		if (keep == 0)
			continue;
		/* Kept when the credit crosses a multiple of CREDIT_ONE. */
		old = atomic_fetch_add_explicit(&s->credit[i], keep, memory_order_relaxed);
		if (old % CREDIT_ONE + keep >= CREDIT_ONE)
			return (int)i;
	}
	return slow_pick(s, ctx, warming);
}

static void health_add(struct swrr_state *s, size_t i, int32_t delta)
{
	_Atomic int32_t *h = &s->health[i];
	int32_t old = atomic_load_explicit(h, memory_order_relaxed), next;

	do {
		next = old + delta;
		if (next > HEALTH_FULL)
			next = HEALTH_FULL;
		if (next < 0)
			next = 0;
		if (next == old)
			return;
	} while (!atomic_compare_exchange_weak_explicit(h, &old, next, memory_order_relaxed, memory_order_relaxed));
}

static void swrr_report(void *state, size_t idx, const struct mtd_lb_result *res)
{
	struct swrr_state *s = state;

	if (idx >= s->n)
		return;
	health_add(s, idx, res->ok ? HEALTH_OK_GAIN : -HEALTH_FAIL_CUT);
}

static void swrr_tick(void *state, int64_t now_ms, int64_t now_ns)
{
	struct swrr_state *s = state;

	(void)now_ms;
	(void)now_ns;
	for (size_t i = 0; i < s->n; i++)
		health_add(s, i, HEALTH_TICK_GAIN);
}

bool mtd_lb__swrr_exact(const void *state)
{
	return ((const struct swrr_state *)state)->exact;
}

const struct mtd_lb_ops mtd_lb_ops_smooth_wrr = {
        .name = "SMOOTH_WEIGHTED_ROUND_ROBIN",
        .caps = MTD_LB_CAP_WEIGHTS | MTD_LB_CAP_WARMUP,
        .init = swrr_init,
        .pick = swrr_pick,
        .report = swrr_report,
        .tick = swrr_tick,
        .destroy = swrr_destroy,
};
