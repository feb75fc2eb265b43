/* RANDOM: uniform over the eligible endpoints (a plain random balancer,
 * with exclusions). Weights are not honoured, except that weight <= 0
 * drains an endpoint (lb-impl.h "last resort"). O(1) per pick unless most
 * endpoints are excluded. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "lb/lb-impl.h"

struct random_state {
	const struct mtd_lb_endpoint *eps;
	size_t n;
	size_t m;
	uint32_t *pos; /* positive-weight indices, else all */
};

static void random_destroy(void *state)
{
	struct random_state *s = state;

	if (s == NULL)
		return;
	free(s->pos);
	free(s);
}

static int random_init(const struct mtd_lb_config *cfg, const struct mtd_lb_endpoint *eps, size_t n, const void *prev,
                       void **out)
{
	struct random_state *s = calloc(1, sizeof(*s));

	if (s == NULL)
		goto fail;
	s->eps = eps;
	s->n = n;
	s->pos = mtd_lb__positive_list(eps, n, &s->m);
	if (s->pos == NULL)
		goto free_state;
	*out = s;
	return 0;

free_state:
	free(s);
fail:
	return -ENOMEM;
}

static int random_pick(void *state, const struct mtd_lb_pick_ctx *ctx)
{
	struct random_state *s = state;
	int i = mtd_lb__uniform_list(s->pos, s->m, ctx);

	if (i >= 0)
		return i;
	/* Every positive endpoint is excluded: uniform among the drained. */
	return mtd_lb__wrandom_slow(&mtd_lb__no_span, s->eps, s->n, ctx);
}

const struct mtd_lb_ops mtd_lb_ops_random = {
        .name = "RANDOM",
        .caps = 0,
        .init = random_init,
        .pick = random_pick,
        .destroy = random_destroy,
};
