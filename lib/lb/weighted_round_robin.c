/* WEIGHTED_ROUND_ROBIN: each endpoint gets its weight's share of every
 * cycle, interleaved rather than in bursts (the simple weighted round
 * robin sends a run of `weight` calls to one endpoint in a row; this does
 * not).
 *
 * init() lays out one cycle (sum of weights / their gcd turns; a cycle
 * longer than MAX_CYCLE is scaled down, every endpoint keeping at least
 * one turn) as the nginx smooth sequence (see smooth_wrr.c): {5,1,1} gives
 * a a b a c a a. That costs O(cycle x n) once, and a pick is then a shared
 * atomic counter modulo the cycle: O(1), lock-free, exact across workers,
 * no run of one endpoint longer than the weights force. Equal weights (the
 * common case of a discovered set) need no layout: one turn each in index
 * order, which the sequence gives too, O(n); when every endpoint has a turn
 * (none drained) the turn is the index and no cycle is stored at all.
 *
 * Past SMOOTH_BUDGET steps (large sets of unequal weights: 10,000
 * endpoints of weights 50..150 make a cycle of a million turns) no cycle
 * is laid out: a pick takes the counter's golden-ratio point (a Weyl
 * sequence, low-discrepancy) of the cumulative weights and binary-searches
 * it, O(log n). Still deterministic and interleaved, each endpoint's share
 * within a few calls of its weight over any run of calls, built in O(n)
 * (the earliest-deadline layout it replaced took 170 ms at that size, and
 * 4 MB, for every set change).
 *
 * While some endpoint warms up, weights change with time and the schedule
 * cannot follow; picks then take the cumulative warmed weights at the
 * golden-ratio point of the counter (the same sequence) until the ramp
 * ends. Each tick() publishes those weights as a table (lb-impl.h
 * mtd_lb__warm_cdf) that a pick binary-searches, O(log n); the documented
 * approximation: a ramping endpoint's share lags its curve by at most one
 * tick. Without a table from a tick at most MTD_LB__WARM_MAX_AGE_MS old,
 * or when the turn lands on an excluded endpoint, the pick walks the exact
 * warmed weights, O(n).
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "lb/lb-impl.h"

#define MAX_CYCLE     (1u << 20)
#define SMOOTH_BUDGET (1u << 26)

/* The counter alone on its line (every worker's pick writes it), what
 * picks only read on the next two: 192 bytes. */
struct wrr_state {
	_Alignas(MTD_LB_CACHELINE) _Atomic uint64_t next;
	_Alignas(MTD_LB_CACHELINE) const struct mtd_lb_endpoint *eps;
	size_t n;
	/* One cycle of turns (len of them), the endpoint of each; or NULL
	 * with cum NULL: every endpoint one turn in index order (len = n),
	 * the turn its index; or NULL with cum set. */
	uint32_t *cycle;
	size_t len;
	uint64_t *cum; /* without a cycle, past SMOOTH_BUDGET: prefix sums of the weights (n) */
	struct mtd_lb_warm_span span;
	struct mtd_lb__warm_cdf *cdf; /* warmup configured: its tables (owned), else NULL */
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

static size_t count_positive(const uint64_t *w, size_t n)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		k += w[i] > 0;
	return k;
}

static int build_cycle(struct wrr_state *s)
{
	uint64_t *w, g = 0, total = 0;
	int rc = -ENOMEM;
	bool any_positive = false;

	w = calloc(s->n, sizeof(*w));
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
	if (total > MAX_CYCLE && total > s->n) {
		uint64_t cap = MAX_CYCLE > s->n ? MAX_CYCLE : s->n;
		uint64_t t2 = 0;

		for (size_t i = 0; i < s->n; i++) {
			if (w[i] == 0)
				continue;
			w[i] = (uint64_t)((double)w[i] * (double)cap / (double)total);
			if (w[i] == 0)
				w[i] = 1;
			t2 += w[i];
		}
		total = t2;
	}
	if (total != (uint64_t)count_positive(w, s->n) && total * s->n > SMOOTH_BUDGET) {
		/* No cycle: the cumulative weights (the picks' Weyl points). */
		s->cum = calloc(s->n, sizeof(*s->cum));
		if (s->cum == NULL)
			goto out;
		uint64_t sum = 0;
		for (size_t i = 0; i < s->n; i++)
			s->cum[i] = sum += w[i];
		rc = 0;
		goto out;
	}
	if (total == s->n && count_positive(w, s->n) == s->n) {
		/* Every endpoint of weight 1 (equal weights, the gcd taken
		 * out, none drained: a sum of n alone is not that, 2:0:1 has
		 * it): the sequence gives each one turn in index order (ties go
		 * to the lower index): turn k is endpoint k. */
		s->len = total;
		rc = 0;
		goto out;
	}
	s->cycle = calloc(total, sizeof(*s->cycle));
	if (s->cycle == NULL)
		goto out;
	s->len = total;
	rc = 0;
	if (total == (uint64_t)count_positive(w, s->n)) {
		/* Every turn-holder of weight 1, some drained: one turn each
		 * in index order, as above; no need to run the sequence. */
		for (size_t i = 0, k = 0; i < s->n; i++)
			if (w[i] > 0)
				s->cycle[k++] = (uint32_t)i;
		goto out;
	}
	int64_t *cur = calloc(s->n, sizeof(*cur));
	if (cur == NULL) {
		rc = -ENOMEM;
		goto out;
	}
	for (uint64_t k = 0; k < total; k++) {
		size_t best = SIZE_MAX;

		for (size_t i = 0; i < s->n; i++) {
			if (w[i] == 0)
				continue;
			cur[i] += (int64_t)w[i];
			if (best == SIZE_MAX || cur[i] > cur[best])
				best = i;
		}
		cur[best] -= (int64_t)total;
		s->cycle[k] = (uint32_t)best;
	}
	free(cur);
out:
	free(w);
	return rc;
}

static void wrr_destroy(void *state)
{
	struct wrr_state *s = state;

	if (s == NULL)
		return;
	free(s->cycle);
	free(s->cum);
	if (s->cdf != NULL) {
		mtd_lb__warm_cdf_free(s->cdf);
		free(s->cdf);
	}
	free(s);
}

static int wrr_init(const struct mtd_lb_config *cfg, const struct mtd_lb_endpoint *eps, size_t n, const void *prev,
                    void **out)
{
	const struct wrr_state *old = prev;
	struct wrr_state *s;
	int rc;

	s = aligned_alloc(MTD_LB_CACHELINE, (sizeof(*s) + MTD_LB_CACHELINE - 1) / MTD_LB_CACHELINE * MTD_LB_CACHELINE);
	if (s == NULL)
		return -ENOMEM;
	*s = (struct wrr_state){.eps = eps, .n = n};
	mtd_lb__warm_span(&cfg->warmup, eps, n, &s->span);
	if (cfg->warmup.duration_ms > 0) {
		struct mtd_lb__warm_cdf *cdf = calloc(1, sizeof(*cdf));

		if (cdf == NULL) {
			rc = -ENOMEM;
			goto free_state;
		}
		rc = mtd_lb__warm_cdf_init(cdf, n);
		if (rc != 0) {
			free(cdf);
			goto free_state;
		}
		s->cdf = cdf;
	}
	rc = build_cycle(s);
	if (rc != 0)
		goto free_state;
	atomic_init(&s->next, old != NULL ? atomic_load(&old->next) : mtd_lb__entropy());
	*out = s;
	return 0;

free_state:
	wrr_destroy(s);
	return rc;
}

/* Weyl sequence c * (golden ratio - 1) mod 1, as 64-bit fixed point. */
static inline double weyl(uint64_t c)
{
	return (double)(c * 0x9e3779b97f4a7c15ULL >> 11) * 0x1.0p-53;
}

static int warming_pick(struct wrr_state *s, const struct mtd_lb_pick_ctx *ctx, uint64_t c)
{
	double total = 0.0, x;
	int last = -1;

	if (s->cdf != NULL) {
		int i = mtd_lb__warm_cdf_pick(s->cdf, s->eps, ctx, weyl(c));

		if (i >= 0)
			return i;
	}

	for (size_t i = 0; i < s->n; i++)
		if (!mtd_lb__excluded(ctx, i))
			total += mtd_lb__weight_at(&s->span, &s->eps[i], ctx->now_ms);
	if (!(total > 0.0))
		return mtd_lb__wrandom_slow(&s->span, s->eps, s->n, ctx);
	x = weyl(c) * total;
	for (size_t i = 0; i < s->n; i++) {
		double w;

		if (mtd_lb__excluded(ctx, i))
			continue;
		w = mtd_lb__weight_at(&s->span, &s->eps[i], ctx->now_ms);
		if (w <= 0.0)
			continue;
		last = (int)i;
		if (x < w)
			return (int)i;
		x -= w;
	}
	return last;
}

/* The endpoint of the turn at Weyl point u of the cumulative weights:
 * the first whose prefix sum passes it. */
static size_t cum_find(const struct wrr_state *s, double u)
{
	uint64_t r = (uint64_t)(u * (double)s->cum[s->n - 1]);
	size_t lo = 0, len = s->n;

	while (len > 1) {
		size_t half = len / 2;

		lo += s->cum[lo + half - 1] <= r ? half : 0;
		len -= half;
	}
	return lo;
}

static int wrr_pick(void *state, const struct mtd_lb_pick_ctx *ctx)
{
	struct wrr_state *s = state;
	uint64_t c = atomic_fetch_add_explicit(&s->next, 1, memory_order_relaxed);
	size_t probes;

	if (mtd_lb__warming(&s->span, ctx->now_ms))
		return warming_pick(s, ctx, c);
	if (s->cum != NULL) {
		/* A drained endpoint has no width to land in; an excluded
		 * turn passes to the next points. */
		for (uint64_t k = 0; k < 16; k++) {
			size_t i = cum_find(s, weyl(c + k));

			if (!mtd_lb__excluded(ctx, i))
				return (int)i;
		}
		return mtd_lb__wrandom_slow(&s->span, s->eps, s->n, ctx);
	}
	/* An excluded turn passes to the next turns of the cycle. */
	probes = s->len < 16 ? s->len : 16;
	for (size_t k = 0; k < probes; k++) {
		size_t t = (size_t)((c + k) % s->len);
		size_t i = s->cycle != NULL ? s->cycle[t] : t;

		if (!mtd_lb__excluded(ctx, i))
			return (int)i;
	}
	return mtd_lb__wrandom_slow(&s->span, s->eps, s->n, ctx);
}

static void wrr_tick(void *state, int64_t now_ms, int64_t now_ns)
{
	struct wrr_state *s = state;

	(void)now_ns;
	if (s->cdf != NULL)
		mtd_lb__warm_cdf_tick(s->cdf, &s->span, s->eps, now_ms);
}

const struct mtd_lb_ops mtd_lb_ops_weighted_round_robin = {
        .name = "WEIGHTED_ROUND_ROBIN",
        .caps = MTD_LB_CAP_WEIGHTS | MTD_LB_CAP_WARMUP,
        .init = wrr_init,
        .pick = wrr_pick,
        .tick = wrr_tick,
        .destroy = wrr_destroy,
};
