/* Weighted choice helpers shared by the weighted strategies. */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "lb/lb-impl.h"

int mtd_lb__wrandom_slow(const struct mtd_lb_warm_span *span, const struct mtd_lb_endpoint *eps, size_t n,
                         const struct mtd_lb_pick_ctx *ctx)
{
	uint64_t *rng = mtd_lb__rng(ctx);
	double total = 0.0, r;
	size_t eligible = 0, k;
	int last = -1;

	for (size_t i = 0; i < n; i++) {
		if (mtd_lb__excluded(ctx, i))
			continue;
		eligible++;
		total += mtd_lb__weight_at(span, &eps[i], ctx->now_ms);
	}
	if (eligible == 0)
		return -1;
	if (total > 0.0) {
		r = mtd_lb__unit(rng) * total;
		for (size_t i = 0; i < n; i++) {
			double wi;

			if (mtd_lb__excluded(ctx, i))
				continue;
			wi = mtd_lb__weight_at(span, &eps[i], ctx->now_ms);
			if (wi <= 0.0)
				continue;
			last = (int)i;
			if (r < wi)
				return (int)i;
			r -= wi;
		}
		return last; /* rounding left r a hair above the last weight */
	}
	/* Only drained endpoints are eligible: uniform among them. */
	k = (size_t)mtd_lb__below(rng, eligible);
	for (size_t i = 0; i < n; i++) {
		if (mtd_lb__excluded(ctx, i))
			continue;
		if (k-- == 0)
			return (int)i;
	}
	return -1;
}

const struct mtd_lb_warm_span mtd_lb__no_span = {
        .ramp_until_ms = INT64_MIN,
        .apply_from_ms = INT64_MAX,
};

int mtd_lb__uniform_list_other(const uint32_t *list, size_t m, const struct mtd_lb_pick_ctx *ctx, int avoid)
{
	uint64_t *rng = mtd_lb__rng(ctx);
	size_t eligible = 0, k, span = m;
	bool avoid_listed = false;

	if (m == 0)
		return -1;
	if (avoid >= 0 && m > 1) {
		/* Draw over m - 1 slots; the avoided entry's slot stands for
		 * the last entry. Exactly uniform over the others. */
		span = m - 1;
		avoid_listed = true;
	}
	for (int probe = 0; probe < 8; probe++) {
		size_t j = (size_t)mtd_lb__below(rng, span);
		uint32_t i = list[j];

		if (avoid_listed && (int)i == avoid)
			i = list[m - 1];
		if (!mtd_lb__excluded(ctx, i) && (int)i != avoid)
			return (int)i;
		if (ctx->excluded == NULL && (int)i != avoid)
			break;
	}
	for (size_t j = 0; j < m; j++)
		eligible += !mtd_lb__excluded(ctx, list[j]) && (int)list[j] != avoid;
	if (eligible == 0)
		return avoid >= 0 && !mtd_lb__excluded(ctx, (size_t)avoid) ? avoid : -1;
	k = (size_t)mtd_lb__below(rng, eligible);
	for (size_t j = 0; j < m; j++) {
		if (mtd_lb__excluded(ctx, list[j]) || (int)list[j] == avoid)
			continue;
		if (k-- == 0)
			return (int)list[j];
	}
	return -1;
}

int mtd_lb__uniform_list(const uint32_t *list, size_t m, const struct mtd_lb_pick_ctx *ctx)
{
	return mtd_lb__uniform_list_other(list, m, ctx, -1);
}

uint32_t *mtd_lb__positive_list(const struct mtd_lb_endpoint *eps, size_t n, size_t *m)
{
	uint32_t *list = calloc(n > 0 ? n : 1, sizeof(*list));
	size_t k = 0;

	if (list == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (eps[i].weight > 0)
			list[k++] = (uint32_t)i;
	if (k == 0)
		for (size_t i = 0; i < n; i++)
			list[k++] = (uint32_t)i;
	*m = k;
	return list;
}

int mtd_lb__alias_build(struct mtd_lb_alias *a, const double *weights, size_t n)
{
	double total = 0.0, *scaled;
	uint32_t *small, *large;
	size_t ns = 0, nl = 0, first_positive = SIZE_MAX;
	int rc = -ENOMEM;

	a->n = n;
	a->threshold = calloc(n, sizeof(*a->threshold));
	a->alias = calloc(n, sizeof(*a->alias));
	scaled = calloc(n, sizeof(*scaled));
	small = calloc(n, sizeof(*small));
	large = calloc(n, sizeof(*large));
	if (a->threshold == NULL || a->alias == NULL || scaled == NULL || small == NULL || large == NULL)
		goto free_scratch;

	for (size_t i = 0; i < n; i++) {
		if (weights[i] > 0.0 && first_positive == SIZE_MAX)
			first_positive = i;
		total += weights[i] > 0.0 ? weights[i] : 0.0;
	}
	if (!(total > 0.0)) {
		rc = -EINVAL;
		goto free_scratch;
	}
	/* Vose: scale to mean 1, pair each under-full column with an
	 * over-full one that tops it up. */
	for (size_t i = 0; i < n; i++) {
		scaled[i] = (weights[i] > 0.0 ? weights[i] : 0.0) * (double)n / total;
		a->alias[i] = (uint32_t)i;
		if (scaled[i] < 1.0)
			small[ns++] = (uint32_t)i;
		else
			large[nl++] = (uint32_t)i;
	}
	while (ns > 0 && nl > 0) {
		uint32_t s = small[--ns], l = large[nl - 1];

		a->threshold[s] = (uint64_t)(scaled[s] * 0x1.0p64);
		a->alias[s] = l;
		scaled[l] -= 1.0 - scaled[s];
		if (scaled[l] < 1.0) {
			nl--;
			small[ns++] = l;
		}
	}
	/* Leftovers are full columns (up to rounding). */
	while (nl > 0)
		a->threshold[large[--nl]] = UINT64_MAX;
	while (ns > 0) {
		uint32_t s = small[--ns];

		if (weights[s] > 0.0) {
			a->threshold[s] = UINT64_MAX;
		} else {
			/* A zero column left over by rounding: always defer to
			 * a positive one, never return a weight-0 endpoint. */
			a->threshold[s] = 0;
			a->alias[s] = (uint32_t)first_positive;
		}
	}
	rc = 0;

free_scratch:
	free(large);
	free(small);
	free(scaled);
	if (rc != 0)
		mtd_lb__alias_free(a);
	return rc;
}

void mtd_lb__alias_free(struct mtd_lb_alias *a)
{
	free(a->threshold);
	a->threshold = NULL;
	free(a->alias);
	a->alias = NULL;
	a->n = 0;
}

#define WARM_CDF_TOTAL 0x1.0p52 /* sum of a published table, about */

int mtd_lb__warm_cdf_init(struct mtd_lb__warm_cdf *c, size_t n)
{
	*c = (struct mtd_lb__warm_cdf){.n = n};
	c->cum[0] = calloc(n, sizeof(*c->cum[0]));
	c->cum[1] = calloc(n, sizeof(*c->cum[1]));
	if (c->cum[0] == NULL || c->cum[1] == NULL) {
		mtd_lb__warm_cdf_free(c);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		atomic_init(&c->cum[0][i], 0);
		atomic_init(&c->cum[1][i], 0);
	}
	atomic_init(&c->gen, 0);
	atomic_init(&c->writing, 0);
	atomic_init(&c->at_ms, INT64_MIN);
	return 0;
}

void mtd_lb__warm_cdf_free(struct mtd_lb__warm_cdf *c)
{
	free(c->cum[0]);
	free(c->cum[1]);
	c->cum[0] = c->cum[1] = NULL;
}

void mtd_lb__warm_cdf_tick(struct mtd_lb__warm_cdf *c, const struct mtd_lb_warm_span *span,
                           const struct mtd_lb_endpoint *eps, int64_t now_ms)
{
	uint64_t g = atomic_load_explicit(&c->gen, memory_order_relaxed) + 1;
	_Atomic uint64_t *cum = c->cum[g & 1];
	double total = 0.0, acc = 0.0;

	if (!mtd_lb__warming(span, now_ms)) {
		atomic_store_explicit(&c->at_ms, INT64_MIN, memory_order_release);
		return;
	}
	for (size_t i = 0; i < c->n; i++)
		total += mtd_lb__weight_at(span, &eps[i], now_ms);
	if (!(total > 0.0)) {
		atomic_store_explicit(&c->at_ms, INT64_MIN, memory_order_release);
		return;
	}
	/* Seqlock writer: mark the table taken before touching it; a pick
	 * that sees any of the stores below then sees the mark. */
	atomic_store_explicit(&c->writing, g, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	for (size_t i = 0; i < c->n; i++) {
		acc += mtd_lb__weight_at(span, &eps[i], now_ms);
		atomic_store_explicit(&cum[i], (uint64_t)(acc / total * WARM_CDF_TOTAL), memory_order_relaxed);
	}
	atomic_store_explicit(&c->gen, g, memory_order_release);
	atomic_store_explicit(&c->at_ms, now_ms, memory_order_release);
}

int mtd_lb__warm_cdf_pick(const struct mtd_lb__warm_cdf *c, const struct mtd_lb_endpoint *eps,
                          const struct mtd_lb_pick_ctx *ctx, double u)
{
	int64_t at = atomic_load_explicit(&c->at_ms, memory_order_acquire);
	uint64_t g, total, r;
	const _Atomic uint64_t *cum;
	size_t lo = 0, len = c->n;

	if (at == INT64_MIN || ctx->now_ms < at || ctx->now_ms - at > MTD_LB__WARM_MAX_AGE_MS)
		return -1;
	g = atomic_load_explicit(&c->gen, memory_order_acquire);
	cum = c->cum[g & 1];
	total = atomic_load_explicit(&cum[c->n - 1], memory_order_relaxed);
	r = (uint64_t)(u * (double)total);
	if (r >= total)
		return -1;
	/* The first entry above r, in [lo, lo + len): halved without a
	 * branch on the data (a conditional move), since random points
	 * would mispredict about every other step. */
	while (len > 1) {
		size_t half = len / 2;

		lo += atomic_load_explicit(&cum[lo + half - 1], memory_order_relaxed) <= r ? half : 0;
		len -= half;
	}
	/* Seqlock reader: the table read is g's unless a tick has since begun
	 * generation g + 2, the next to reuse it. */
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load_explicit(&c->writing, memory_order_relaxed) - g >= 2)
		return -1;
	if (mtd_lb__excluded(ctx, lo) || eps[lo].weight <= 0)
		return -1;
	return (int)lo;
}
