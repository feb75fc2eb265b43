/* Picker lifecycle, the pick entry point and config defaults/checks. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "lb/lb.h"
#include "lb/lb-impl.h"

static bool is_prime(uint32_t v)
{
	if (v < 2)
		return false;
	for (uint32_t d = 2; (uint64_t)d * d <= v; d++)
		if (v % d == 0)
			return false;
	return true;
}

void mtd_lb_config_defaults(struct mtd_lb_config *cfg, const struct mtd_lb_ops *ops)
{
	*cfg = (struct mtd_lb_config){
	        .ops = ops,
	        .choice_count = MTD_LB_DEFAULT_CHOICE_COUNT,
	        .active_request_bias = 1.0,
	        .ring_points = MTD_LB_DEFAULT_RING_POINTS,
	        .table_size = MTD_LB_DEFAULT_TABLE_SIZE,
	        .bounded_load_factor = 0.0,
	        .decay_ms = MTD_LB_DEFAULT_DECAY_MS,
	        .warmup =
	                {
	                        .duration_ms = 0,
	                        .curve = MTD_LB_WARMUP_LINEAR,
	                        .aggression = 1.0,
	                        .min_weight_percent = 10.0,
	                },
	        .hot_keys = {.threshold_per_second = MTD_LB_DEFAULT_HOT_THRESHOLD, .spread = 0},
	        .orca =
	                {
	                        .blackout_ms = MTD_LB_DEFAULT_ORCA_BLACKOUT_MS,
	                        .expiration_ms = MTD_LB_DEFAULT_ORCA_EXPIRATION_MS,
	                        .update_ms = MTD_LB_DEFAULT_ORCA_UPDATE_MS,
	                        .error_penalty = 1.0,
	                        .out_of_band = false,
	                        .oob_period_ms = MTD_LB_DEFAULT_ORCA_OOB_MS,
	                },
	        .n_workers = 1,
	};
}

int mtd_lb_config_check(const struct mtd_lb_config *cfg, const char **field)
{
	const char *bad = NULL;

	unsigned caps = cfg->ops != NULL ? cfg->ops->caps : 0;

	if (cfg->ops == NULL)
		bad = "policy";
	else if ((caps & MTD_LB_CAP_CHOICE_COUNT) && cfg->choice_count < 2)
		bad = "choice_count";
	else if ((caps & MTD_LB_CAP_CHOICE_COUNT) &&
	         (!(cfg->active_request_bias >= 0.0) || !isfinite(cfg->active_request_bias)))
		bad = "active_request_bias";
	else if ((caps & MTD_LB_CAP_RING_POINTS) && (cfg->ring_points < 1 || cfg->ring_points > MTD_LB_MAX_RING_POINTS))
		bad = "ring_points";
	else if ((caps & MTD_LB_CAP_TABLE_SIZE) &&
	         (cfg->table_size > MTD_LB_MAX_TABLE_SIZE || !is_prime(cfg->table_size)))
		bad = "table_size";
	else if ((caps & MTD_LB_CAP_BOUNDED_LOAD) &&
	         (!isfinite(cfg->bounded_load_factor) ||
	          (cfg->bounded_load_factor != 0.0 && !(cfg->bounded_load_factor > 1.0))))
		bad = "bounded_load_factor";
	else if ((caps & MTD_LB_CAP_DECAY) && cfg->decay_ms <= 0)
		bad = "decay";
	else if ((caps & MTD_LB_CAP_HOT_KEYS) && cfg->hot_keys.spread != 0 &&
	         (cfg->hot_keys.spread < 2 || cfg->hot_keys.spread > MTD_LB_MAX_HOT_SPREAD))
		bad = "hot_keys.spread";
	else if ((caps & MTD_LB_CAP_HOT_KEYS) && cfg->hot_keys.spread != 0 && cfg->hot_keys.threshold_per_second == 0)
		bad = "hot_keys.threshold_per_second";
	else if ((caps & MTD_LB_CAP_ORCA) && cfg->orca.blackout_ms < 0)
		bad = "orca.blackout_period";
	else if ((caps & MTD_LB_CAP_ORCA) && cfg->orca.expiration_ms <= 0)
		bad = "orca.weight_expiration_period";
	else if ((caps & MTD_LB_CAP_ORCA) && cfg->orca.update_ms < MTD_LB_MIN_ORCA_UPDATE_MS)
		bad = "orca.weight_update_period";
	else if ((caps & MTD_LB_CAP_ORCA) && (!(cfg->orca.error_penalty >= 0.0) || !isfinite(cfg->orca.error_penalty)))
		bad = "orca.error_utilization_penalty";
	else if ((caps & MTD_LB_CAP_ORCA) && cfg->orca.oob_period_ms < MTD_LB_MIN_ORCA_OOB_MS)
		bad = "orca.oob_reporting_period";
	else if (!(caps & MTD_LB_CAP_WARMUP) || cfg->warmup.duration_ms == 0)
		bad = NULL;
	else if (cfg->warmup.duration_ms < 0)
		bad = "warmup.duration";
	else if (cfg->warmup.curve != MTD_LB_WARMUP_LINEAR && cfg->warmup.curve != MTD_LB_WARMUP_SLOW_START)
		bad = "warmup.curve";
	else if (!(cfg->warmup.aggression > 0.0) || !isfinite(cfg->warmup.aggression))
		bad = "warmup.aggression";
	else if (!(cfg->warmup.min_weight_percent >= 0.0 && cfg->warmup.min_weight_percent <= 100.0))
		bad = "warmup.min_weight_percent";
	if (field != NULL)
		*field = bad;
	return bad != NULL ? -EINVAL : 0;
}

struct mtd_lb_picker *mtd_lb_picker_new(const struct mtd_lb_config *cfg, const struct mtd_lb_endpoint *eps, size_t n,
                                        const struct mtd_lb_picker *prev)
{
	struct mtd_lb_picker *p;
	const void *prev_state = NULL;

	if (cfg == NULL || mtd_lb_config_check(cfg, NULL) != 0 || (n > 0 && eps == NULL) || n > MTD_LB_MAX_ENDPOINTS)
		return NULL;
	p = calloc(1, sizeof(*p));
	if (p == NULL)
		goto fail;
	p->ops = cfg->ops;
	p->eps = eps;
	p->n = n;
	p->cfg = *cfg;
	if (p->cfg.n_workers == 0)
		p->cfg.n_workers = 1;
	/* An empty set is a valid picker whose every pick is -1: the data
	 * plane answers UNAVAILABLE instead of special-casing "no picker". */
	if (n == 0)
		return p;
	/* prev's state is only meaningful to the same strategy. */
	if (prev != NULL && prev->ops == cfg->ops)
		prev_state = prev->state;
	if (p->ops->init(&p->cfg, eps, n, prev_state, &p->state) != 0)
		goto free_picker;
	return p;

free_picker:
	free(p);
fail:
	return NULL;
}

void mtd_lb_picker_free(struct mtd_lb_picker *p)
{
	if (p == NULL)
		return;
	if (p->state != NULL && p->ops->destroy != NULL)
		p->ops->destroy(p->state);
	p->state = NULL;
	free(p);
}

int mtd_lb_pick(struct mtd_lb_picker *p, const struct mtd_lb_pick_ctx *ctx)
{
	if (p->n == 0)
		return -1;
	return p->ops->pick(p->state, ctx);
}

void mtd_lb_tick(struct mtd_lb_picker *p, int64_t now_ms, int64_t now_ns)
{
	if (p->n > 0 && p->ops->tick != NULL)
		p->ops->tick(p->state, now_ms, now_ns);
}
