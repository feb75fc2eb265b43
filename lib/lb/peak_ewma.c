/* PEAK_EWMA (linkerd / Finagle): power of two (distinct) choices on
 *     cost = rtt x (active + 1) / weight
 * where rtt is the endpoint's peak-EWMA latency (stats.c: a slower sample
 * replaces the estimate at once, faster ones blend in with decay `decay`),
 * decayed toward 0 while no response arrives, so an idle slow endpoint is
 * eventually probed again. Failures are fed to the estimate as slow
 * samples (at least MTD_LB_FAILURE_PENALTY_US, or a multiple of the
 * current estimate), so an endpoint that fails fast does not look fast.
 * An endpoint without any sample costs 0 when idle (it is probed at once)
 * and the failure penalty while it has calls in flight (linkerd's default
 * RTT for a cold endpoint). O(1) per pick. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "lb/lb.h"
#include "lb/lb-impl.h"

struct pe_state {
	const struct mtd_lb_endpoint *eps;
	size_t n;
	size_t m;
	uint32_t *pos;
	int64_t decay_ms;
	struct mtd_lb_warm_span span;
};

static void pe_destroy(void *state)
{
	struct pe_state *s = state;

	if (s == NULL)
		return;
	free(s->pos);
	free(s);
}

static int pe_init(const struct mtd_lb_config *cfg, const struct mtd_lb_endpoint *eps, size_t n, const void *prev,
                   void **out)
{
	struct pe_state *s = calloc(1, sizeof(*s));

	if (s == NULL)
		goto fail;
	s->eps = eps;
	s->n = n;
	s->decay_ms = cfg->decay_ms;
	mtd_lb__warm_span(&cfg->warmup, eps, n, &s->span);
	s->pos = mtd_lb__positive_list(eps, n, &s->m);
	if (s->pos == NULL)
		goto free_state;
	*out = s;
	return 0;

free_state:
	pe_destroy(s);
fail:
	return -ENOMEM;
}

static double pe_cost(const struct pe_state *s, size_t i, const struct mtd_lb_pick_ctx *ctx)
{
	const struct mtd_lb_endpoint *ep = &s->eps[i];
	double rtt = mtd_lb_stats_ewma_us(ep->stats, ctx->now_ns, s->decay_ms);
	int64_t active = mtd_lb__active(ep);
	double w = mtd_lb__weight_at(&s->span, ep, ctx->now_ms);

	if (rtt <= 0.0 && active > 0)
		rtt = MTD_LB_FAILURE_PENALTY_US;
	if (w <= 0.0)
		w = 1.0;
	return rtt * (double)(active + 1) / w;
}

static int pe_pick(void *state, const struct mtd_lb_pick_ctx *ctx)
{
	struct pe_state *s = state;
	int a = mtd_lb__uniform_list(s->pos, s->m, ctx);
	int b;

	if (a < 0)
		return mtd_lb__wrandom_slow(&s->span, s->eps, s->n, ctx);
	/* Two distinct candidates: a repeat draw would make the choice
	 * blind (half the time with two endpoints). */
	b = mtd_lb__uniform_list_other(s->pos, s->m, ctx, a);
	if (b < 0 || b == a)
		return a;
	return pe_cost(s, (size_t)b, ctx) < pe_cost(s, (size_t)a, ctx) ? b : a;
}

const struct mtd_lb_ops mtd_lb_ops_peak_ewma = {
        .name = "PEAK_EWMA",
        .caps = MTD_LB_CAP_WEIGHTS | MTD_LB_CAP_WARMUP | MTD_LB_CAP_DECAY,
        .init = pe_init,
        .pick = pe_pick,
        .destroy = pe_destroy,
};
