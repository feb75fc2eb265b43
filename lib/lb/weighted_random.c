/* WEIGHTED_RANDOM (Dubbo RandomLoadBalance): probability
 * proportional to weight, uniform when all weights are equal.
 *
 * Dubbo walks the weights per call (O(n)); here init() builds a Vose alias
 * table once per endpoint set, so a pick is one random number and two
 * loads. While some endpoint warms up the weights change with time: each
 * tick() publishes the warmed weights as a cumulative table (lb-impl.h
 * mtd_lb__warm_cdf) and picks binary-search it, O(log n). The documented
 * approximation: a ramping endpoint's share lags its curve by at most one
 * tick (about 1 s of a window of minutes). Picks take the exact O(n) walk
 * over warmed weights while no tick has published a table yet or the last
 * did so more than MTD_LB__WARM_MAX_AGE_MS ago. The ramp's end is known at
 * init (mtd_lb__warm_span); after it, the alias table again. An excluded
 * draw is redrawn a few times, then the O(n) walk decides.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "lb/lb-impl.h"

struct wrandom_state {
	const struct mtd_lb_endpoint *eps;
	size_t n;
	bool uniform; /* every positive weight equal: no table */
	size_t m;
	uint32_t *pos; /* positive-weight indices, else all */
	struct mtd_lb_alias alias;
	struct mtd_lb_warm_span span;
	bool has_cdf; /* warmup configured: cdf allocated */
	struct mtd_lb__warm_cdf cdf;
};

static void wrandom_destroy(void *state)
{
	struct wrandom_state *s = state;

	if (s == NULL)
		return;
	mtd_lb__alias_free(&s->alias);
	if (s->has_cdf)
		mtd_lb__warm_cdf_free(&s->cdf);
	free(s->pos);
	free(s);
}

static int wrandom_init(const struct mtd_lb_config *cfg, const struct mtd_lb_endpoint *eps, size_t n, const void *prev,
                        void **out)
{
	struct wrandom_state *s;
	double *w = NULL;
	int rc = -ENOMEM;

	s = calloc(1, sizeof(*s));
	if (s == NULL)
		goto fail;
	s->eps = eps;
	s->n = n;
	mtd_lb__warm_span(&cfg->warmup, eps, n, &s->span);
	if (cfg->warmup.duration_ms > 0) {
		rc = mtd_lb__warm_cdf_init(&s->cdf, n);
		if (rc != 0)
			goto free_state;
		s->has_cdf = true;
		rc = -ENOMEM;
	}
	s->pos = mtd_lb__positive_list(eps, n, &s->m);
	if (s->pos == NULL)
		goto free_state;
	s->uniform = true;
	/* No positive weight at all: pos lists everyone, uniformly. */
	for (size_t j = 1; j < s->m && eps[s->pos[0]].weight > 0; j++)
		if (eps[s->pos[j]].weight != eps[s->pos[0]].weight)
			s->uniform = false;
	if (!s->uniform) {
		w = calloc(n, sizeof(*w));
		if (w == NULL)
			goto free_state;
		for (size_t i = 0; i < n; i++)
			w[i] = eps[i].weight > 0 ? (double)eps[i].weight : 0.0;
		rc = mtd_lb__alias_build(&s->alias, w, n);
		free(w);
		if (rc != 0)
			goto free_state;
	}
	*out = s;
	return 0;

free_state:
	wrandom_destroy(s);
fail:
	return rc;
}

static int wrandom_pick(void *state, const struct mtd_lb_pick_ctx *ctx)
{
	struct wrandom_state *s = state;
	uint64_t *rng = mtd_lb__rng(ctx);

	if (mtd_lb__warming(&s->span, ctx->now_ms)) {
		for (int probe = 0; s->has_cdf && probe < 8; probe++) {
			int i = mtd_lb__warm_cdf_pick(&s->cdf, s->eps, ctx, mtd_lb__unit(rng));

			if (i >= 0)
				return i;
			if (ctx->excluded == NULL)
				break;
		}
		return mtd_lb__wrandom_slow(&s->span, s->eps, s->n, ctx);
	}
	if (s->uniform) {
		int i = mtd_lb__uniform_list(s->pos, s->m, ctx);

		if (i >= 0)
			return i;
	} else {
		for (int probe = 0; probe < 8; probe++) {
			size_t i = mtd_lb__alias_draw(&s->alias, rng);

			if (!mtd_lb__excluded(ctx, i))
				return (int)i;
			if (ctx->excluded == NULL)
				break;
		}
	}
	return mtd_lb__wrandom_slow(&s->span, s->eps, s->n, ctx);
}

static void wrandom_tick(void *state, int64_t now_ms, int64_t now_ns)
{
	struct wrandom_state *s = state;

	(void)now_ns;
	if (s->has_cdf)
		mtd_lb__warm_cdf_tick(&s->cdf, &s->span, s->eps, now_ms);
}

const struct mtd_lb_ops mtd_lb_ops_weighted_random = {
        .name = "WEIGHTED_RANDOM",
        .caps = MTD_LB_CAP_WEIGHTS | MTD_LB_CAP_WARMUP,
        .init = wrandom_init,
        .pick = wrandom_pick,
        .tick = wrandom_tick,
        .destroy = wrandom_destroy,
};
