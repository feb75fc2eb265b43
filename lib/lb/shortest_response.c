/* SHORTEST_RESPONSE (Dubbo ShortestResponseLoadBalance): the endpoint with
 * the shortest estimated response, estimate = average latency of the
 * successful calls in the sliding window x (calls in flight + 1); ties
 * (including "no data yet", estimate 0) broken by weighted random over the
 * warmed weights. The window lives in the endpoint's stats (stats.c:
 * halved every 30 s, Dubbo's slidePeriod) so it survives membership
 * changes. O(n) per pick, as in Dubbo. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "lb/lb-impl.h"

struct sr_state {
	const struct mtd_lb_endpoint *eps;
	size_t n;
	struct mtd_lb_warm_span span;
};

static int sr_init(const struct mtd_lb_config *cfg, const struct mtd_lb_endpoint *eps, size_t n, const void *prev,
                   void **out)
{
	struct sr_state *s = calloc(1, sizeof(*s));

	if (s == NULL)
		return -ENOMEM;
	s->eps = eps;
	s->n = n;
	mtd_lb__warm_span(&cfg->warmup, eps, n, &s->span);
	*out = s;
	return 0;
}

static uint64_t sr_cost(const void *state, size_t i, const struct mtd_lb_pick_ctx *ctx)
{
	const struct sr_state *s = state;
	const struct mtd_lb_stats *st = s->eps[i].stats;
	uint64_t sum = atomic_load_explicit(&st->window_sum_us, memory_order_relaxed);
	uint64_t cnt = atomic_load_explicit(&st->window_count, memory_order_relaxed);
	uint64_t avg = cnt > 0 ? sum / cnt : 0;

	return avg * (uint64_t)(mtd_lb__active(&s->eps[i]) + 1);
}

static int sr_pick(void *state, const struct mtd_lb_pick_ctx *ctx)
{
	struct sr_state *s = state;

	return mtd_lb__argmin_weighted(s, sr_cost, &s->span, s->eps, s->n, ctx);
}

static void sr_destroy(void *state)
{
	free(state);
}

const struct mtd_lb_ops mtd_lb_ops_shortest_response = {
        .name = "SHORTEST_RESPONSE",
        .caps = MTD_LB_CAP_WEIGHTS | MTD_LB_CAP_WARMUP,
        .init = sr_init,
        .pick = sr_pick,
        .destroy = sr_destroy,
};
