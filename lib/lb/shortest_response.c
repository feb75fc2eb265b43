/* SHORTEST_RESPONSE (Dubbo ShortestResponseLoadBalance): the endpoint with
 * the shortest estimated response, estimate = average latency of the
 * successful calls in the sliding window x (calls in flight + 1); ties
 * (including "no data yet", estimate 0) broken by weighted random over the
 * warmed weights. The window lives in the endpoint's stats (stats.c:
 * halved every 30 s, Dubbo's slidePeriod) so it survives membership
 * changes. O(log n) per pick through a minimum tree updated on call
 * begin/end (Dubbo scans every endpoint); see least.c for when a change
 * made elsewhere is seen. Estimates are whole microseconds, saturating at
 * 2^32 - 1. */
#include "config.h"

#include "lb/lb-impl.h"

static uint32_t sr_cost(const struct mtd_lb_stats *stats)
{
	const struct mtd_lb_live *st = mtd_lb_stats_view(stats);
	uint64_t sum = atomic_load_explicit(&st->window_sum_us, memory_order_relaxed);
	uint64_t cnt = atomic_load_explicit(&st->window_count, memory_order_relaxed);
	uint64_t avg = cnt > 0 ? sum / cnt : 0;
	uint64_t load = (uint64_t)mtd_lb__active_of(stats) + 1;

	if (avg == 0)
		return 0;
	return avg > UINT32_MAX / load ? UINT32_MAX : (uint32_t)(avg * load);
}

static int sr_init(const struct mtd_lb_config *cfg, const struct mtd_lb_endpoint *eps, size_t n, const void *prev,
                   void **out)
{
	(void)prev;
	return mtd_lb__least_init(cfg, eps, n, sr_cost, out);
}

const struct mtd_lb_ops mtd_lb_ops_shortest_response = {
        .name = "SHORTEST_RESPONSE",
        .caps = MTD_LB_CAP_WEIGHTS | MTD_LB_CAP_WARMUP,
        .init = sr_init,
        .pick = mtd_lb__least_pick,
        .begin = mtd_lb__least_begin,
        .report = mtd_lb__least_report,
        .tick = mtd_lb__least_tick,
        .destroy = mtd_lb__least_destroy,
};
