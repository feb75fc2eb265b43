/* WEIGHTED_RANDOM (seed 003: Dubbo RandomLoadBalance): probability
 * proportional to weight, uniform when all weights are equal.
 *
 * Dubbo walks the weights per call (O(n)); here init() builds a Vose alias
 * table once per endpoint set, so a pick is one random number and two
 * loads. While some endpoint warms up the weights change with time, so
 * picks take the O(n) walk over warmed weights until the ramp ends (the
 * time is known at init: mtd_lb__warm_span). An excluded draw is redrawn a
 * few times, then the O(n) walk decides.
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
};

static void wrandom_destroy(void *state)
{
	struct wrandom_state *s = state;

	if (s == NULL)
		return;
	mtd_lb__alias_free(&s->alias);
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

	if (mtd_lb__warming(&s->span, ctx->now_ms))
		return mtd_lb__wrandom_slow(&s->span, s->eps, s->n, ctx);
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

const struct mtd_lb_ops mtd_lb_ops_weighted_random = {
        .name = "WEIGHTED_RANDOM",
        .caps = MTD_LB_CAP_WEIGHTS | MTD_LB_CAP_WARMUP,
        .init = wrandom_init,
        .pick = wrandom_pick,
        .destroy = wrandom_destroy,
};
