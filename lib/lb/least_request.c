/* LEAST_REQUEST (Envoy least_request): sample choice_count eligible
 * endpoints uniformly (never the current best again) and keep the one with the highest
 *     score = weight / (active + 1) ^ active_request_bias
 * (weight warmed). With equal weights this is the power of d choices on
 * calls in flight; with weights it drives active_i / weight_i level across
 * endpoints, i.e. traffic in proportion to weight under load. bias 1 avoids
 * pow(); bias 0 ignores load. O(choice_count) per pick. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "lb/lb-impl.h"

struct lr_state {
	const struct mtd_lb_endpoint *eps;
	size_t n;
	size_t m;
	uint32_t *pos; /* positive-weight indices, else all */
	uint32_t choices;
	double bias;
	struct mtd_lb_warm_span span;
};

static void lr_destroy(void *state)
{
	struct lr_state *s = state;

	if (s == NULL)
		return;
	free(s->pos);
	free(s);
}

static int lr_init(const struct mtd_lb_config *cfg, const struct mtd_lb_endpoint *eps, size_t n, const void *prev,
                   void **out)
{
	struct lr_state *s = calloc(1, sizeof(*s));

	if (s == NULL)
		goto fail;
	s->eps = eps;
	s->n = n;
	s->choices = cfg->choice_count >= 2 ? cfg->choice_count : 2;
	s->bias = cfg->active_request_bias;
	mtd_lb__warm_span(&cfg->warmup, eps, n, &s->span);
	s->pos = mtd_lb__positive_list(eps, n, &s->m);
	if (s->pos == NULL)
		goto free_state;
	*out = s;
	return 0;

free_state:
	lr_destroy(s);
fail:
	return -ENOMEM;
}

static double lr_score(const struct lr_state *s, size_t i, int64_t now_ms)
{
	double w = mtd_lb__weight_at(&s->span, &s->eps[i], now_ms);
	double load = (double)(mtd_lb__active(&s->eps[i]) + 1);

	if (w <= 0.0)
		w = 1.0; /* everyone drained: compare on load alone */
	if (s->bias == 1.0)
		return w / load;
	if (s->bias == 0.0)
		return w;
	return w / pow(load, s->bias);
}

static int lr_pick(void *state, const struct mtd_lb_pick_ctx *ctx)
{
	struct lr_state *s = state;
	double best_score = -1.0;
	int best = -1;

	for (uint32_t k = 0; k < s->choices; k++) {
		/* Never the best so far again: a repeat would make the
		 * choice blind (half the time with two endpoints). */
		int i = mtd_lb__uniform_list_other(s->pos, s->m, ctx, best);
		double sc;

		if (i < 0)
			break;
		sc = lr_score(s, (size_t)i, ctx->now_ms);
		if (sc > best_score) {
			best_score = sc;
			best = i;
		}
	}
	if (best >= 0)
		return best;
	return mtd_lb__wrandom_slow(&s->span, s->eps, s->n, ctx);
}

const struct mtd_lb_ops mtd_lb_ops_least_request = {
        .name = "LEAST_REQUEST",
        .caps = MTD_LB_CAP_WEIGHTS | MTD_LB_CAP_WARMUP | MTD_LB_CAP_CHOICE_COUNT,
        .init = lr_init,
        .pick = lr_pick,
        .destroy = lr_destroy,
};
