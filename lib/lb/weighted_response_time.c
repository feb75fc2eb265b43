/* WEIGHTED_RESPONSE_TIME (Ribbon WeightedResponseTimeRule):
 * weight_i = configured (warmed) weight_i / average latency_i, recomputed
 * in the background by tick() (Ribbon's DynamicServerWeightTask), never on
 * the pick path; round robin until there is data.
 *
 * The average is per tick interval and smoothed across intervals with
 * time constant `decay`; failures enter it as MTD_LB_FAILURE_PENALTY_US
 * samples (a fast-failing endpoint must not look fast). An endpoint
 * without data yet is given the mean weight of those with data, so it is
 * probed rather than starved or flooded. init() seeds the averages from the
 * endpoints' lifetime figures, so a membership change keeps the weights.
 *
 * Publication: tick() rewrites a cumulative table of fixed-point weights
 * (atomics) and then the total; a pick draws r < total and binary-searches
 * the table. A pick racing a rewrite may see old and new entries mixed:
 * that can skew that one pick, never send it out of range (the search is
 * clamped) - no lock, no allocation, no reclamation problem.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "lb/lb-impl.h"

#define FIXED_TOTAL 0x1.0p52 /* sum of published weights, about */

struct wrt_state {
	_Alignas(MTD_LB_CACHELINE) _Atomic uint64_t rr;
	_Alignas(MTD_LB_CACHELINE) _Atomic uint64_t total; /* 0: no data */
	const struct mtd_lb_endpoint *eps;
	size_t n;
	size_t m;
	uint32_t *pos;
	_Atomic uint64_t *cum; /* cumulative fixed-point weights */
	/* Control thread only (init, tick): */
	double *avg_us; /* 0 = no data */
	uint64_t *seen_sum, *seen_count, *seen_fail;
	double *scratch;
	int64_t last_tick_ns; /* monotonic: the decay is by time between ticks */
	int64_t decay_ms;
	struct mtd_lb_warm_span span;
};

static void wrt_destroy(void *state)
{
	struct wrt_state *s = state;

	if (s == NULL)
		return;
	free(s->pos);
	free(s->cum);
	free(s->avg_us);
	free(s->seen_sum);
	free(s->seen_count);
	free(s->seen_fail);
	free(s->scratch);
	free(s);
}

static void publish(struct wrt_state *s, int64_t now_ms)
{
	double sum_inv = 0.0, mean_inv, total = 0.0, acc = 0.0;
	size_t with_data = 0;

	for (size_t i = 0; i < s->n; i++)
		if (s->avg_us[i] > 0.0 && s->eps[i].weight > 0) {
			sum_inv += 1.0 / s->avg_us[i];
			with_data++;
		}
	if (with_data == 0) {
		atomic_store_explicit(&s->total, 0, memory_order_release);
		return;
	}
	mean_inv = sum_inv / (double)with_data;
	for (size_t i = 0; i < s->n; i++) {
		double w = mtd_lb__weight_at(&s->span, &s->eps[i], now_ms);

		if (w > 0.0)
			w *= s->avg_us[i] > 0.0 ? 1.0 / s->avg_us[i] : mean_inv;
		s->scratch[i] = w;
		total += w;
	}
	for (size_t i = 0; i < s->n; i++) {
		acc += s->scratch[i];
		atomic_store_explicit(&s->cum[i], (uint64_t)(acc / total * FIXED_TOTAL), memory_order_relaxed);
	}
	atomic_store_explicit(&s->total, atomic_load_explicit(&s->cum[s->n - 1], memory_order_relaxed),
	                      memory_order_release);
}

static int wrt_init(const struct mtd_lb_config *cfg, const struct mtd_lb_endpoint *eps, size_t n, const void *prev,
                    void **out)
{
	struct wrt_state *s;

	s = aligned_alloc(MTD_LB_CACHELINE, (sizeof(*s) + MTD_LB_CACHELINE - 1) / MTD_LB_CACHELINE * MTD_LB_CACHELINE);
	if (s == NULL)
		goto fail;
	*s = (struct wrt_state){
	        .eps = eps,
	        .n = n,
	        .decay_ms = cfg->decay_ms > 0 ? cfg->decay_ms : MTD_LB_DEFAULT_DECAY_MS,
	};
	mtd_lb__warm_span(&cfg->warmup, eps, n, &s->span);
	s->pos = mtd_lb__positive_list(eps, n, &s->m);
	s->cum = calloc(n, sizeof(*s->cum));
	s->avg_us = calloc(n, sizeof(*s->avg_us));
	s->seen_sum = calloc(n, sizeof(*s->seen_sum));
	s->seen_count = calloc(n, sizeof(*s->seen_count));
	s->seen_fail = calloc(n, sizeof(*s->seen_fail));
	s->scratch = calloc(n, sizeof(*s->scratch));
	if (s->pos == NULL || s->cum == NULL || s->avg_us == NULL || s->seen_sum == NULL || s->seen_count == NULL ||
	    s->seen_fail == NULL || s->scratch == NULL)
		goto free_state;
	for (size_t i = 0; i < n; i++) {
		const struct mtd_lb_live *st = mtd_lb_stats_view(eps[i].stats);
		uint64_t sum = atomic_load(&st->latency_sum_us);
		uint64_t cnt = atomic_load(&st->latency_count);
		uint64_t fail = atomic_load(&st->failures);

		s->seen_sum[i] = sum;
		s->seen_count[i] = cnt;
		s->seen_fail[i] = fail;
		if (cnt + fail > 0)
			s->avg_us[i] = fmax(1.0, ((double)sum + (double)fail * MTD_LB_FAILURE_PENALTY_US) /
			                                 (double)(cnt + fail));
	}
	atomic_init(&s->rr, mtd_lb__entropy());
	atomic_init(&s->total, 0);
	publish(s, 0);
	*out = s;
	return 0;

free_state:
	wrt_destroy(s);
fail:
	return -ENOMEM;
}

static void wrt_tick(void *state, int64_t now_ms, int64_t now_ns)
{
	struct wrt_state *s = state;
	int64_t dt = s->last_tick_ns > 0 ? (now_ns - s->last_tick_ns) / 1000000 : 1000;
	double alpha = 1.0 - exp(-(double)(dt > 0 ? dt : 1) / (double)s->decay_ms);

	s->last_tick_ns = now_ns;
	for (size_t i = 0; i < s->n; i++) {
		const struct mtd_lb_live *st = mtd_lb_stats_view(s->eps[i].stats);
		uint64_t sum = atomic_load_explicit(&st->latency_sum_us, memory_order_relaxed);
		uint64_t cnt = atomic_load_explicit(&st->latency_count, memory_order_relaxed);
		uint64_t fail = atomic_load_explicit(&st->failures, memory_order_relaxed);
		uint64_t ds = sum - s->seen_sum[i], dc = cnt - s->seen_count[i];
		uint64_t df = fail - s->seen_fail[i];
		double sample;

		s->seen_sum[i] = sum;
		s->seen_count[i] = cnt;
		s->seen_fail[i] = fail;
		if (dc + df == 0)
			continue;
		sample = fmax(1.0, ((double)ds + (double)df * MTD_LB_FAILURE_PENALTY_US) / (double)(dc + df));
		s->avg_us[i] = s->avg_us[i] > 0.0 ? s->avg_us[i] + alpha * (sample - s->avg_us[i]) : sample;
	}
	publish(s, now_ms);
}

static int wrt_pick(void *state, const struct mtd_lb_pick_ctx *ctx)
{
	struct wrt_state *s = state;
	uint64_t total = atomic_load_explicit(&s->total, memory_order_acquire);
	uint64_t *rng = mtd_lb__rng(ctx);

	if (total == 0) {
		/* Ribbon: round robin until the first weights exist. */
		uint64_t c = atomic_fetch_add_explicit(&s->rr, 1, memory_order_relaxed);

		for (size_t k = 0; k < s->m; k++) {
			uint32_t i = s->pos[(c + k) % s->m];

			if (!mtd_lb__excluded(ctx, i))
				return (int)i;
		}
		return mtd_lb__wrandom_slow(&mtd_lb__no_span, s->eps, s->n, ctx);
	}
	for (int probe = 0; probe < 8; probe++) {
		uint64_t r = mtd_lb__below(rng, total);
		size_t lo = 0, hi = s->n - 1;

		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;

			if (atomic_load_explicit(&s->cum[mid], memory_order_relaxed) > r)
				hi = mid;
			else
				lo = mid + 1;
		}
		if (!mtd_lb__excluded(ctx, lo) && s->eps[lo].weight > 0)
			return (int)lo;
		if (ctx->excluded == NULL)
			break;
	}
	/* Most are excluded: configured weights decide among the rest. */
	return mtd_lb__wrandom_slow(&s->span, s->eps, s->n, ctx);
}

const struct mtd_lb_ops mtd_lb_ops_weighted_response_time = {
        .name = "WEIGHTED_RESPONSE_TIME",
        .caps = MTD_LB_CAP_WEIGHTS | MTD_LB_CAP_WARMUP | MTD_LB_CAP_DECAY,
        .init = wrt_init,
        .pick = wrt_pick,
        .tick = wrt_tick,
        .destroy = wrt_destroy,
};
