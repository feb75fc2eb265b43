/* LEAST_ACTIVE (seed 003: Dubbo LeastActiveLoadBalance; seed 002's "least
 * connections"): the endpoint with the fewest calls in flight, counted
 * across all workers (stats->active), ties broken by weighted random over
 * the warmed weights. O(n) per pick: the minimum needs every count. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "lb/lb-impl.h"

struct la_state {
	const struct mtd_lb_endpoint *eps;
	size_t n;
	struct mtd_lb_warm_span span;
};

static int la_init(const struct mtd_lb_config *cfg, const struct mtd_lb_endpoint *eps, size_t n, const void *prev,
                   void **out)
{
	struct la_state *s = calloc(1, sizeof(*s));

	if (s == NULL)
		return -ENOMEM;
	s->eps = eps;
	s->n = n;
	mtd_lb__warm_span(&cfg->warmup, eps, n, &s->span);
	*out = s;
	return 0;
}

static uint64_t la_cost(const void *state, size_t i, const struct mtd_lb_pick_ctx *ctx)
{
	const struct la_state *s = state;

	return (uint64_t)mtd_lb__active(&s->eps[i]);
}

static int la_pick(void *state, const struct mtd_lb_pick_ctx *ctx)
{
	struct la_state *s = state;

	return mtd_lb__argmin_weighted(s, la_cost, &s->span, s->eps, s->n, ctx);
}

static void la_destroy(void *state)
{
	free(state);
}

const struct mtd_lb_ops mtd_lb_ops_least_active = {
        .name = "LEAST_ACTIVE",
        .caps = MTD_LB_CAP_WEIGHTS | MTD_LB_CAP_WARMUP,
        .init = la_init,
        .pick = la_pick,
        .destroy = la_destroy,
};
