/* LEAST_ACTIVE (Dubbo LeastActiveLoadBalance; Ribbon's "least
 * connections"): the endpoint with the fewest calls in flight, counted
 * across all workers (stats->active), ties broken by weighted random over
 * the warmed weights. O(log n) per pick through a minimum tree updated on
 * call begin/end; see least.c for when a count changed elsewhere is seen. */
#include "config.h"

#include "lb/lb-impl.h"

static uint32_t la_cost(const struct mtd_lb_stats *st)
{
	int64_t a = mtd_lb__active_of(st);

	return a < (int64_t)UINT32_MAX ? (uint32_t)a : UINT32_MAX;
}

static int la_init(const struct mtd_lb_config *cfg, const struct mtd_lb_endpoint *eps, size_t n, const void *prev,
                   void **out)
{
	(void)prev;
	return mtd_lb__least_init(cfg, eps, n, la_cost, out);
}

const struct mtd_lb_ops mtd_lb_ops_least_active = {
        .name = "LEAST_ACTIVE",
        .caps = MTD_LB_CAP_WEIGHTS | MTD_LB_CAP_WARMUP,
        .init = la_init,
        .pick = mtd_lb__least_pick,
        .begin = mtd_lb__least_begin,
        .report = mtd_lb__least_report,
        .tick = mtd_lb__least_tick,
        .destroy = mtd_lb__least_destroy,
};
