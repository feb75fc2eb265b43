/* CLIENT_SIDE_WEIGHTED_ROUND_ROBIN (gRFC A58; Envoy's
 * client_side_weighted_round_robin): weights from what the endpoints
 * report in their ORCA load reports (orca.c), not from the config.
 *
 * Reports land in each endpoint's shared stats: a trailer's through the
 * report hook (any worker), unless the endpoint has an out-of-band stream
 * (orca.out_of_band: the control thread's sidecar/control/orca_oob.c
 * records what the stream sends, and the trailers are ignored).
 * Every orca.update_ms, tick() (the control thread) turns them into
 * weights: an endpoint's own while it is past its blackout and not
 * expired, the mean of those for the others; with fewer than two weighted
 * endpoints, every endpoint weighs the same (round robin). Each tick then
 * publishes those weights, times the warmup ramp, as the cumulative table
 * of weights.c (mtd_lb__warm_cdf: double buffer under a seqlock, one
 * writer), and a pick binary-searches it at the golden-ratio point of a
 * shared counter: O(log n), lock-free, deterministic and interleaved (a
 * low-discrepancy sequence, so shares follow the weights closely over a
 * few dozen calls). Without a table (plain round robin, or no tick for
 * MTD_LB__WARM_MAX_AGE_MS) the counter picks in turn.
 *
 * Under load the sequence's endpoint is not taken blindly: the weights are
 * right on average, but a burst that lands on an endpoint with a momentary
 * queue waits there while another has room. When the sequence's endpoint
 * has calls in flight, CHOICES - 1 more endpoints are drawn from the same
 * table (at random) and the pick goes to the one with the fewest calls in
 * flight per unit of its concurrency scale (an idle one at once).
 * Comparing raw calls in flight would favour endpoints that run few calls
 * at once: at the utilization A58's weights aim at (the same for every
 * endpoint), an endpoint's calls in flight are its busy slots, utilization
 * x its concurrency, and ORCA does not report the concurrency. Nor can it
 * come from latency (Little's law, calls in flight = rate x latency): the
 * latency includes the queue, so a queue would raise its own allowance
 * (measured: bench/lb/README.md). The scale is learnt instead from what it
 * must achieve: every orca.update_ms, each endpoint's calls started over
 * the period (its stats' pick counter) are compared with its share of the
 * published table, and an endpoint that got significantly more than its
 * share (beyond two standard deviations of a Poisson count) has its scale
 * lowered by the ratio (at most halved or doubled per period), one that
 * got less raised; scales are kept at a geometric mean of 1, so equal
 * endpoints compare raw calls in flight. In steady state the scales
 * approach the ratios of the endpoints' concurrencies (bench/lb's
 * simulation), the correction moves no share (the weights decide how much
 * each endpoint gets, the calls in flight only when), and a persistent
 * queue still counts against its endpoint, since nothing in the scale
 * grows with it. Without a published table (round robin: fewer than two
 * weighted endpoints, nobody warming) nothing of this runs. A new
 * endpoint set inherits the scales of the endpoints it keeps. Per pick:
 * one load of the endpoint's calls in flight; under load, CHOICES - 1
 * random draws (binary searches) and two loads each.
 *
 * Configured endpoint weights are not honoured (the reports decide; config
 * refuses them: no MTD_LB_CAP_WEIGHTS), except that weight <= 0 drains an
 * endpoint (lb-impl.h "last resort").
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lb/lb.h"
#include "lb/lb-impl.h"

#define WEIGHT_SCALE 0x1.0p52 /* sum of a published table, about */
#define EXCLUDED_PROBES 4
#define CHOICES        4    /* endpoints compared by a pick whose first has calls in flight */
#define SCALE_STEP_MAX 2.0  /* a scale changes by at most this factor per update period */
#define SCALE_RANGE    16.0 /* and stays within this factor of the scales' geometric mean */

struct cswrr_state {
	_Alignas(MTD_LB_CACHELINE) _Atomic uint64_t next;
	_Alignas(MTD_LB_CACHELINE) const struct mtd_lb_endpoint *eps;
	size_t n;
	struct mtd_lb_orca_config orca;
	struct mtd_lb_warm_span span;
	struct mtd_lb__warm_cdf cdf;
	/* Per endpoint, its concurrency scale (a double's bits; header
	 * comment): written by the tick, read by picks. */
	_Atomic uint64_t *scale;
	/* Control thread only: */
	double *w;           /* weights of the last recomputation (1 each: unweighted) */
	double *share;       /* each endpoint's share of the published table; all 0: none */
	double *log_scale;   /* natural log of scale[] */
	uint64_t *picks0;    /* stats->picks at the start of the update period */
	double *started;     /* rescale()'s scratch: calls started over the period */
	bool weighted;       /* at least two endpoints had a weight of their own */
	int64_t updated_ms;  /* monotonic ms of the last recomputation; INT64_MIN: none */
	int64_t tick_wall_ms, tick_mono_ms; /* the last tick's clocks; INT64_MIN: none */
};

/* The concurrency scales after an update period (header comment): each
 * endpoint's calls started (its stats' pick counter since picks0) against
 * its share of the table published over the period. An endpoint without a
 * share or a start (drained, ejected, excluded for the whole period) tells
 * nothing and keeps its scale. */
static void rescale(struct cswrr_state *s)
{
	double total = 0.0, mean = 0.0;
	size_t k = 0;

	for (size_t i = 0; i < s->n; i++) {
		uint64_t now = atomic_load_explicit(&mtd_lb_stats_view(s->eps[i].stats)->picks, memory_order_relaxed);

		s->started[i] = (double)(now - s->picks0[i]);
		s->picks0[i] = now;
		if (s->share[i] > 0.0)
			total += s->started[i];
	}
	for (size_t i = 0; i < s->n; i++) {
		double d = s->started[i], e = s->share[i] * total;

		if (!(s->share[i] > 0.0))
			continue;
		if (d > 0.0 && (d - e) * (d - e) > 4.0 * (e + 1.0))
			s->log_scale[i] +=
			        fmin(fmax(log((e + 1.0) / (d + 1.0)), -log(SCALE_STEP_MAX)), log(SCALE_STEP_MAX));
		mean += s->log_scale[i];
		k++;
	}
	if (k == 0)
		return;
	mean /= (double)k;
	for (size_t i = 0; i < s->n; i++) {
		if (!(s->share[i] > 0.0))
			continue;
		s->log_scale[i] = fmin(fmax(s->log_scale[i] - mean, -log(SCALE_RANGE)), log(SCALE_RANGE));
		atomic_store_explicit(&s->scale[i], mtd_lb__bits_of(exp(s->log_scale[i])), memory_order_relaxed);
	}
}

/* The weights from the reports as of mono_ms (header comment). */
static void recompute(struct cswrr_state *s, int64_t mono_ms)
{
	size_t k = 0;
	double sum = 0.0, mean;

	for (size_t i = 0; i < s->n; i++) {
		s->w[i] = s->eps[i].weight > 0 ? mtd_lb_orca_weight_at(s->eps[i].stats, &s->orca, mono_ms) : 0.0;
		if (s->w[i] > 0.0) {
			k++;
			sum += s->w[i];
		}
	}
	s->weighted = k >= 2;
	mean = k > 0 ? sum / (double)k : 1.0;
	for (size_t i = 0; i < s->n; i++) {
		if (!s->weighted)
			s->w[i] = 1.0;
		else if (!(s->w[i] > 0.0))
			s->w[i] = mean;
		mtd_lb__orca_set_used(s->eps[i].stats, s->weighted && s->eps[i].weight > 0 ? s->w[i] : 0.0);
	}
	s->updated_ms = mono_ms;
}

/* Publish the weights times the warmup ramp at wall_ms, or unpublish when
 * the counter alone picks as well (unweighted, nobody ramping). */
/* Never inlined: gcc 12 refuses the seqlock's release fence under
 * -fsanitize=thread (-Wtsan, an error with --enable-werror) when this is
 * inlined into the tick, as weights.c's writer, which is not, is not. */
static __attribute__((noinline)) void publish(struct cswrr_state *s, int64_t wall_ms)
{
	struct mtd_lb__warm_cdf *c = &s->cdf;
	bool warming = mtd_lb__warming(&s->span, wall_ms);
	uint64_t g = atomic_load_explicit(&c->gen, memory_order_relaxed) + 1;
	_Atomic uint64_t *cum = c->cum[g & 1];
	double total = 0.0, acc = 0.0;

	for (size_t i = 0; i < s->n; i++)
		s->share[i] = 0.0;
	if (!s->weighted && !warming) {
		atomic_store_explicit(&c->at_ms, INT64_MIN, memory_order_release);
		return;
	}
	for (size_t i = 0; i < s->n; i++) {
		const struct mtd_lb_endpoint *ep = &s->eps[i];

		if (ep->weight > 0)
			total += s->w[i] * (warming ? mtd_lb__weight_at(&s->span, ep, wall_ms) / ep->weight : 1.0);
	}
	if (!(total > 0.0)) {
		atomic_store_explicit(&c->at_ms, INT64_MIN, memory_order_release);
		return;
	}
	/* Seqlock writer, as weights.c's mtd_lb__warm_cdf_tick. */
	atomic_store_explicit(&c->writing, g, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	for (size_t i = 0; i < s->n; i++) {
		const struct mtd_lb_endpoint *ep = &s->eps[i];
		double wi = 0.0;

		if (ep->weight > 0)
			wi = s->w[i] * (warming ? mtd_lb__weight_at(&s->span, ep, wall_ms) / ep->weight : 1.0);
		acc += wi;
		s->share[i] = wi / total;
		atomic_store_explicit(&cum[i], (uint64_t)(acc / total * WEIGHT_SCALE), memory_order_relaxed);
	}
	atomic_store_explicit(&c->gen, g, memory_order_release);
	atomic_store_explicit(&c->at_ms, wall_ms, memory_order_release);
}

static void cswrr_destroy(void *state)
{
	struct cswrr_state *s = state;

	if (s == NULL)
		return;
	mtd_lb__warm_cdf_free(&s->cdf);
	free(s->scale);
	free(s->w);
	free(s->share);
	free(s->log_scale);
	free(s->picks0);
	free(s->started);
	free(s);
}

static void cswrr_tick(void *state, int64_t now_ms, int64_t now_ns)
{
	struct cswrr_state *s = state;
	int64_t mono_ms = now_ns / 1000000;

	if (s->updated_ms == INT64_MIN || mono_ms - s->updated_ms >= s->orca.update_ms || mono_ms < s->updated_ms) {
		rescale(s); /* over the period the last table was in force */
		recompute(s, mono_ms);
	}
	publish(s, now_ms);
	s->tick_wall_ms = now_ms;
	s->tick_mono_ms = mono_ms;
}

struct kept_scale {
	const struct mtd_lb_stats *stats;
	double log_scale;
};

static int kept_cmp(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)((const struct kept_scale *)a)->stats,
	          y = (uintptr_t)((const struct kept_scale *)b)->stats;

	return (x > y) - (x < y);
}

/* The scales of the endpoints old and s share (by their stats, which an
 * endpoint keeps while it stays in the set): matched in O(n log n). 0 or
 * -ENOMEM. */
static int inherit_scales(struct cswrr_state *s, const struct cswrr_state *old)
{
	struct kept_scale *kept = calloc(old->n > 0 ? old->n : 1, sizeof(*kept));

	if (kept == NULL)
		return -ENOMEM;
	for (size_t j = 0; j < old->n; j++)
		kept[j] = (struct kept_scale){old->eps[j].stats, old->log_scale[j]};
	qsort(kept, old->n, sizeof(*kept), kept_cmp);
	for (size_t i = 0; i < s->n; i++) {
		struct kept_scale key = {.stats = s->eps[i].stats};
		const struct kept_scale *k = bsearch(&key, kept, old->n, sizeof(*kept), kept_cmp);

		if (k != NULL)
			s->log_scale[i] = k->log_scale;
	}
	free(kept);
	return 0;
}

static int cswrr_init(const struct mtd_lb_config *cfg, const struct mtd_lb_endpoint *eps, size_t n, const void *prev,
                      void **out)
{
	const struct cswrr_state *old = prev;
	struct cswrr_state *s;
	int rc = -ENOMEM;

	s = aligned_alloc(MTD_LB_CACHELINE, (sizeof(*s) + MTD_LB_CACHELINE - 1) / MTD_LB_CACHELINE * MTD_LB_CACHELINE);
	if (s == NULL)
		return -ENOMEM;
	*s = (struct cswrr_state){.eps = eps, .n = n, .orca = cfg->orca, .updated_ms = INT64_MIN,
	                          .tick_wall_ms = INT64_MIN, .tick_mono_ms = INT64_MIN};
	mtd_lb__warm_span(&cfg->warmup, eps, n, &s->span);
	s->w = calloc(n, sizeof(*s->w));
	s->share = calloc(n, sizeof(*s->share));
	s->log_scale = calloc(n, sizeof(*s->log_scale));
	s->picks0 = calloc(n, sizeof(*s->picks0));
	s->started = calloc(n, sizeof(*s->started));
	s->scale = calloc(n, sizeof(*s->scale));
	if (s->w == NULL || s->share == NULL || s->log_scale == NULL || s->picks0 == NULL || s->started == NULL ||
	    s->scale == NULL)
		goto free_state;
	for (size_t i = 0; i < n; i++) {
		s->w[i] = 1.0;
		s->picks0[i] = atomic_load_explicit(&mtd_lb_stats_view(eps[i].stats)->picks, memory_order_relaxed);
	}
	if (old != NULL && inherit_scales(s, old) != 0)
		goto free_state;
	for (size_t i = 0; i < n; i++)
		atomic_init(&s->scale[i], mtd_lb__bits_of(exp(s->log_scale[i])));
	rc = mtd_lb__warm_cdf_init(&s->cdf, n);
	if (rc != 0) {
		s->cdf = (struct mtd_lb__warm_cdf){0};
		goto free_state;
	}
	atomic_init(&s->next, old != NULL ? atomic_load(&old->next) : mtd_lb__entropy());
	/* The reports live in the endpoints' stats: a new set is weighed at
	 * once, as of the previous set's last tick, not a tick later. */
	if (old != NULL && old->tick_mono_ms != INT64_MIN)
		cswrr_tick(s, old->tick_wall_ms, old->tick_mono_ms * 1000000);
	*out = s;
	return 0;

free_state:
	cswrr_destroy(s);
	return rc;
}

/* Weyl sequence c * (golden ratio - 1) mod 1, as 53-bit fixed point. */
static inline double weyl(uint64_t c)
{
	return (double)(c * 0x9e3779b97f4a7c15ULL >> 11) * 0x1.0p-53;
}

static double scale_of(const struct cswrr_state *s, size_t i)
{
	return mtd_lb__double_of(atomic_load_explicit(&s->scale[i], memory_order_relaxed));
}

/* The sequence's endpoint i, or, when it has calls in flight, the one
 * with the fewest per unit of scale among it and CHOICES - 1 draws from
 * the table (header comment); ties keep the earlier. */
static int least_loaded(const struct cswrr_state *s, const struct mtd_lb_pick_ctx *ctx, int i)
{
	int64_t ai = mtd_lb__active(&s->eps[i]);
	double ci;

	if (ai == 0)
		return i;
	ci = scale_of(s, (size_t)i);
	for (int k = 1; k < CHOICES; k++) {
		int j = mtd_lb__warm_cdf_pick(&s->cdf, s->eps, ctx, mtd_lb__unit(mtd_lb__rng(ctx)));
		int64_t aj;
		double cj;

		if (j < 0 || j == i)
			continue;
		aj = mtd_lb__active(&s->eps[j]);
		cj = scale_of(s, (size_t)j);
		/* aj / cj < ai / ci, without a division */
		if ((double)aj * ci < (double)ai * cj) {
			if (aj == 0)
				return j;
			i = j;
			ai = aj;
			ci = cj;
		}
	}
	return i;
}

static int cswrr_pick(void *state, const struct mtd_lb_pick_ctx *ctx)
{
	struct cswrr_state *s = state;
	uint64_t c = atomic_fetch_add_explicit(&s->next, 1, memory_order_relaxed);
	int probes = ctx->excluded != NULL ? EXCLUDED_PROBES : 1, i;

	if (atomic_load_explicit(&s->cdf.at_ms, memory_order_relaxed) != INT64_MIN)
		/* An excluded or drained landing tries other points of the
		 * sequence (far apart), then the turn below. */
		for (int k = 0; k < probes; k++) {
			i = mtd_lb__warm_cdf_pick(&s->cdf, s->eps, ctx, weyl(c + ((uint64_t)k << 40)));
			if (i >= 0)
				return least_loaded(s, ctx, i);
		}
	i = mtd_lb__scan(s->eps, s->n, ctx, (size_t)(c % s->n), true);
	return i >= 0 ? i : mtd_lb__scan(s->eps, s->n, ctx, (size_t)(c % s->n), false);
}

static void cswrr_report(void *state, size_t idx, const struct mtd_lb_result *res)
{
	struct cswrr_state *s = state;

	/* With an out-of-band stream for the endpoint, its reports are the
	 * stream's and the trailers are ignored (gRFC A58). */
	if (idx < s->n && res->orca != NULL && mtd_lb_orca_trailers_count(s->eps[idx].stats))
		mtd_lb_orca_record(s->eps[idx].stats, res->orca, res->orca_len, &s->orca, res->now_ns / 1000000);
}

const struct mtd_lb_ops mtd_lb_ops_client_side_wrr = {
        .name = "CLIENT_SIDE_WEIGHTED_ROUND_ROBIN",
        .caps = MTD_LB_CAP_WARMUP | MTD_LB_CAP_ORCA,
        .init = cswrr_init,
        .pick = cswrr_pick,
        .report = cswrr_report,
        .tick = cswrr_tick,
        .destroy = cswrr_destroy,
};
