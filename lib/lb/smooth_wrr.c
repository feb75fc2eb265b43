/* SMOOTH_WEIGHTED_ROUND_ROBIN (nginx ngx_http_upstream_get_peer; seed 001
 * and seed 003: Dubbo RoundRobinLoadBalance). Per pick, over the eligible
 * endpoints:
 *     current[i] += effective[i];  total += effective[i]
 *     best = argmax current (first on ties)
 *     current[best] -= total
 * Weights {5,1,1} give a a b a c a a.
 *
 * Effective weight = warmed weight x health, health in permille of the
 * configured weight: a failure cuts it by a quarter (nginx cuts
 * weight/max_fails), a success restores 1/16, and tick() restores a tenth
 * per second, so an endpoint that failed and was left alone is back at
 * full weight after ten seconds.
 *
 * Threads: `current` must change on every pick. Each worker owns its own
 * row of current weights (cfg->n_workers rows indexed by ctx->worker,
 * cache-line aligned), so picks never contend; each worker's sequence is
 * the smooth sequence, and the fleet-wide share is still the weights'.
 * Health is shared (atomics), written by report() on any thread. A pick is
 * O(n), as in nginx and Dubbo.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lb/lb-impl.h"

#define HEALTH_FULL      1000
#define HEALTH_FAIL_CUT  (HEALTH_FULL / 4)
#define HEALTH_OK_GAIN   (HEALTH_FULL / 16)
#define HEALTH_TICK_GAIN (HEALTH_FULL / 10)
#define SCALE            1000.0 /* current weights in thousandths of a weight unit */

struct swrr_state {
	const struct mtd_lb_endpoint *eps;
	size_t n;
	unsigned n_workers;
	size_t stride;           /* int64s per worker row, whole cache lines */
	int64_t *current;        /* n_workers rows */
	_Atomic int32_t *health; /* per endpoint, permille */
	/* weight x SCALE x health, kept current by report()/tick() so that a
	 * pick outside warmup is one load and one add per endpoint. */
	_Atomic int64_t *eff;
	struct mtd_lb_warm_span span;
};

static int64_t eff_of(double weight, int32_t health)
{
	return (int64_t)llround(weight * SCALE * health / HEALTH_FULL);
}

static void swrr_destroy(void *state)
{
	struct swrr_state *s = state;

	if (s == NULL)
		return;
	free(s->current);
	free(s->health);
	free(s->eff);
	free(s);
}

static int swrr_init(const struct mtd_lb_config *cfg, const struct mtd_lb_endpoint *eps, size_t n, const void *prev,
                     void **out)
{
	const struct swrr_state *old = prev;
	struct swrr_state *s;
	const size_t per_line = MTD_LB_CACHELINE / sizeof(int64_t);

	s = calloc(1, sizeof(*s));
	if (s == NULL)
		goto fail;
	s->eps = eps;
	s->n = n;
	s->n_workers = cfg->n_workers > 0 ? cfg->n_workers : 1;
	mtd_lb__warm_span(&cfg->warmup, eps, n, &s->span);
	s->stride = (n + per_line - 1) / per_line * per_line;
	s->current = aligned_alloc(MTD_LB_CACHELINE, s->stride * s->n_workers * sizeof(int64_t));
	if (s->current == NULL)
		goto free_state;
	memset(s->current, 0, s->stride * s->n_workers * sizeof(int64_t));
	s->health = calloc(n, sizeof(*s->health));
	s->eff = calloc(n, sizeof(*s->eff));
	if (s->health == NULL || s->eff == NULL)
		goto free_state;
	for (size_t i = 0; i < n; i++) {
		int32_t h = HEALTH_FULL;

		/* Keep the health of an endpoint that stays in the set. */
		if (old != NULL)
			for (size_t j = 0; j < old->n; j++)
				if (old->eps[j].stats == eps[i].stats) {
					h = atomic_load(&old->health[j]);
					break;
				}
		atomic_init(&s->health[i], h);
		atomic_init(&s->eff[i], eff_of(eps[i].weight > 0 ? eps[i].weight : 0, h));
	}
	*out = s;
	return 0;

free_state:
	swrr_destroy(s);
fail:
	return -ENOMEM;
}

static int swrr_pick(void *state, const struct mtd_lb_pick_ctx *ctx)
{
	struct swrr_state *s = state;
	int64_t *cur = s->current + (size_t)(ctx->worker % s->n_workers) * s->stride;
	int64_t total = 0;
	int best = -1;

	bool warming = mtd_lb__warming(&s->span, ctx->now_ms);

	for (size_t i = 0; i < s->n; i++) {
		int64_t eff;

		if (mtd_lb__excluded(ctx, i))
			continue;
		if (warming)
			eff = eff_of(mtd_lb__weight_at(&s->span, &s->eps[i], ctx->now_ms),
			             atomic_load_explicit(&s->health[i], memory_order_relaxed));
		else
			eff = atomic_load_explicit(&s->eff[i], memory_order_relaxed);
		if (eff <= 0)
			continue;
		cur[i] += eff;
		total += eff;
		if (best < 0 || cur[i] > cur[best])
			best = (int)i;
	}
	if (best < 0) /* only drained or fully unhealthy endpoints left */
		return mtd_lb__wrandom_slow(&s->span, s->eps, s->n, ctx);
	cur[best] -= total;
	return best;
}

static void health_add(struct swrr_state *s, size_t i, int32_t delta)
{
	_Atomic int32_t *h = &s->health[i];
	int32_t old = atomic_load_explicit(h, memory_order_relaxed), next;
	double w = s->eps[i].weight > 0 ? s->eps[i].weight : 0;

	do {
		next = old + delta;
		if (next > HEALTH_FULL)
			next = HEALTH_FULL;
		if (next < 0)
			next = 0;
		if (next == old)
			return;
	} while (!atomic_compare_exchange_weak_explicit(h, &old, next, memory_order_relaxed, memory_order_relaxed));
	/* Two racing writers may store their eff in either order; the next
	 * health change or tick() puts it right. */
	atomic_store_explicit(&s->eff[i], eff_of(w, next), memory_order_relaxed);
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

	for (size_t i = 0; i < s->n; i++) {
		double w = s->eps[i].weight > 0 ? s->eps[i].weight : 0;

		health_add(s, i, HEALTH_TICK_GAIN);
		atomic_store_explicit(&s->eff[i], eff_of(w, atomic_load(&s->health[i])), memory_order_relaxed);
	}
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
