/* The strategy registry: one line per strategy, in the order of the
 * LoadBalancing.Policy enum (protos/maitred/config/v1/config.proto). This is
 * a Java SPI factory keyed by name, as a static table. */
#include "config.h"

#include <string.h>

#include "lb/lb.h"
#include "lb/lb-impl.h"

static const struct mtd_lb_ops *const strategies[] = {
        &mtd_lb_ops_random,          &mtd_lb_ops_weighted_random,
        &mtd_lb_ops_round_robin,     &mtd_lb_ops_weighted_round_robin,
        &mtd_lb_ops_smooth_wrr,      &mtd_lb_ops_least_active,
        &mtd_lb_ops_least_request,   &mtd_lb_ops_weighted_response_time,
        &mtd_lb_ops_peak_ewma,       &mtd_lb_ops_shortest_response,
        &mtd_lb_ops_consistent_hash, &mtd_lb_ops_maglev,
        &mtd_lb_ops_client_side_wrr,
};

const struct mtd_lb_ops *const *mtd_lb_all(size_t *n)
{
	*n = sizeof(strategies) / sizeof(strategies[0]);
	return strategies;
}

const struct mtd_lb_ops *mtd_lb_find(const char *name)
{
	if (name == NULL)
		return NULL;
	for (size_t i = 0; i < sizeof(strategies) / sizeof(strategies[0]); i++)
		if (strcmp(strategies[i]->name, name) == 0)
			return strategies[i];
	return NULL;
}
