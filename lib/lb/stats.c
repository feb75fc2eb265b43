/* Per-endpoint live figures (struct mtd_lb_stats) and the PRNG.
 *
 * Every field is an atomic shared by all workers and all pickers that hold
 * the endpoint; writers use relaxed read-modify-write, readers tolerate a
 * figure that is a few calls stale (a balancer decision, not accounting).
 */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/lazy.h"
#include "lb/lb.h"
#include "lb/lb-impl.h"

const struct mtd_lb_live mtd_lb__live_zero;

uint64_t mtd_lb_rand(uint64_t *state)
{
	return mtd_lb__rand_inline(state);
}

uint64_t *mtd_lb__rng(const struct mtd_lb_pick_ctx *ctx)
{
	static _Thread_local uint64_t fallback;

	if (ctx->rng != NULL)
		return ctx->rng;
	if (fallback == 0)
		fallback = mtd_lb__entropy() | 1u;
	return &fallback;
}

uint64_t mtd_lb__entropy(void)
{
	static _Atomic uint64_t seq;
	struct timespec ts;
	uint64_t x;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	x = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	x ^= atomic_fetch_add_explicit(&seq, 0x9e3779b97f4a7c15ULL, memory_order_relaxed);
	x ^= (uint64_t)(uintptr_t)&ts;
	return mtd_lb__rand_inline(&x);
}

int mtd_lb__scan(const struct mtd_lb_endpoint *eps, size_t n, const struct mtd_lb_pick_ctx *ctx, size_t start,
                 bool want_positive)
{
	for (size_t k = 0; k < n; k++) {
		size_t i = (start + k) % n;

		if (mtd_lb__excluded(ctx, i))
			continue;
		if (want_positive && eps[i].weight <= 0)
			continue;
		return (int)i;
	}
	return -1;
}

int mtd_lb__any_eligible(const struct mtd_lb_endpoint *eps, size_t n, const struct mtd_lb_pick_ctx *ctx)
{
	uint64_t *rng = mtd_lb__rng(ctx);
	size_t start;
	int i;

	/* A few random probes first: with few exclusions this is O(1) and
	 * exactly uniform over the eligible positive-weight endpoints. */
	for (int probe = 0; probe < 4; probe++) {
		size_t j = (size_t)mtd_lb__below(rng, n);

		if (!mtd_lb__excluded(ctx, j) && eps[j].weight > 0)
			return (int)j;
	}
	/* Then a scan from a random start: uniform enough for the rare case of
	 * most endpoints being excluded or drained. */
	start = (size_t)mtd_lb__below(rng, n);
	i = mtd_lb__scan(eps, n, ctx, start, true);
	if (i >= 0)
		return i;
	return mtd_lb__scan(eps, n, ctx, start, false);
}

/* ---- call accounting ---------------------------------------------------- */

static double ewma_load(const struct mtd_lb_live *st)
{
	uint64_t bits = atomic_load_explicit(&st->ewma_bits, memory_order_relaxed);
	double v;

	memcpy(&v, &bits, sizeof(v));
	return v;
}

double mtd_lb_stats_ewma_us(const struct mtd_lb_stats *stats, int64_t now_ns, int64_t decay_ms)
{
	const struct mtd_lb_live *st = mtd_lb_stats_view(stats);
	double cost = ewma_load(st);
	int64_t stamp = atomic_load_explicit(&st->ewma_stamp_ns, memory_order_relaxed);
	double tau_ns = (double)(decay_ms > 0 ? decay_ms : MTD_LB_DEFAULT_DECAY_MS) * 1e6;
	int64_t td = now_ns - stamp;

	/* linkerd peak-EWMA: an estimate decays toward 0 while no response
	 * arrives, so an idle slow endpoint is eventually probed again. */
	if (td <= 0 || cost <= 0.0)
		return cost;
	return cost * exp(-(double)td / tau_ns);
}

/* Peak EWMA (Finagle/linkerd): a sample above the estimate replaces it at
 * once (the peak); a lower one is blended in with weight 1 - e^(-dt/tau).
 * Concurrent writers race on a CAS; a lost race retries with fresh data. */
static void ewma_observe(struct mtd_lb_live *st, double rtt_us, int64_t now_ns, int64_t decay_ms)
{
	double tau_ns = (double)(decay_ms > 0 ? decay_ms : MTD_LB_DEFAULT_DECAY_MS) * 1e6;
	int64_t stamp = atomic_exchange_explicit(&st->ewma_stamp_ns, now_ns, memory_order_relaxed);
	int64_t td = stamp > 0 && now_ns > stamp ? now_ns - stamp : 0;
	double w = exp(-(double)td / tau_ns);
	uint64_t old_bits = atomic_load_explicit(&st->ewma_bits, memory_order_relaxed);
	uint64_t new_bits;

	do {
		double cost, next;

		memcpy(&cost, &old_bits, sizeof(cost));
		if (stamp == 0 || rtt_us > cost)
			next = rtt_us;
		else
			next = cost * w + rtt_us * (1.0 - w);
		memcpy(&new_bits, &next, sizeof(next));
	} while (!atomic_compare_exchange_weak_explicit(&st->ewma_bits, &old_bits, new_bits, memory_order_relaxed,
	                                                memory_order_relaxed));
}

/* Dubbo ShortestResponseLoadBalance keeps a sliding window (slidePeriod,
 * 30 s by default) of successful calls. Here the window halves its sum and
 * count every period instead of zeroing them, so an estimate never drops
 * to "no data" at a boundary and old samples fade geometrically. Two
 * threads may both see a stale stamp; only the CAS winner halves. */
static void window_observe(struct mtd_lb_live *st, int64_t latency_us, int64_t now_ns)
{
	int64_t stamp = atomic_load_explicit(&st->window_stamp_ns, memory_order_relaxed);

	if (stamp == 0) {
		atomic_compare_exchange_strong_explicit(&st->window_stamp_ns, &stamp, now_ns, memory_order_relaxed,
		                                        memory_order_relaxed);
	} else if (now_ns - stamp >= MTD_LB_WINDOW_SLIDE_NS &&
	           atomic_compare_exchange_strong_explicit(&st->window_stamp_ns, &stamp, now_ns, memory_order_relaxed,
	                                                   memory_order_relaxed)) {
		uint64_t s = atomic_load_explicit(&st->window_sum_us, memory_order_relaxed);
		uint64_t c = atomic_load_explicit(&st->window_count, memory_order_relaxed);

		atomic_fetch_sub_explicit(&st->window_sum_us, s / 2, memory_order_relaxed);
		atomic_fetch_sub_explicit(&st->window_count, c / 2, memory_order_relaxed);
	}
	atomic_fetch_add_explicit(&st->window_sum_us, (uint64_t)latency_us, memory_order_relaxed);
	atomic_fetch_add_explicit(&st->window_count, 1, memory_order_relaxed);
}

size_t mtd_lb_lat_bucket(int64_t us)
{
	uint64_t v = us > 1 ? (uint64_t)us : 1;
	unsigned oct = 63 - (unsigned)__builtin_clzll(v);
	/* The half of the octave: the bit after the leading one. */
	unsigned half = oct >= 1 ? (unsigned)(v >> (oct - 1)) & 1u : 0;
	size_t b = (size_t)oct * 2 + half;

	return b < MTD_LB_LAT_BUCKETS ? b : MTD_LB_LAT_BUCKETS - 1;
}

double mtd_lb_lat_upper_us(size_t b)
{
	unsigned oct = (unsigned)(b / 2);

	return (double)(1ull << oct) * (b % 2 ? 2.0 : 1.5);
}

double mtd_lb_lat_quantile_ms(const uint64_t *hist, double q)
{
	uint64_t n = 0, seen = 0;

	for (size_t b = 0; b < MTD_LB_LAT_BUCKETS; b++)
		n += hist[b];
	if (n == 0)
		return 0;
	for (size_t b = 0; b < MTD_LB_LAT_BUCKETS; b++) {
		seen += hist[b];
		if ((double)seen >= q * (double)n)
			return mtd_lb_lat_upper_us(b) / 1000.0;
	}
	return mtd_lb_lat_upper_us(MTD_LB_LAT_BUCKETS - 1) / 1000.0;
}

static inline void lat_record(struct mtd_lb_live *st, int64_t lat)
{
	struct mtd_lb_lat_hist *h = mtd_lazy_get(&st->lat);

	if (h == NULL) /* out of memory: the sample is not in the histogram */
		return;
	atomic_fetch_add_explicit(&h->b[mtd_lb_lat_bucket(lat)], 1, memory_order_relaxed);
}

void mtd_lb_stats_lat_add(const struct mtd_lb_stats *st, uint64_t *hist)
{
	const struct mtd_lb_lat_hist *h = mtd_lazy_peek(&mtd_lb_stats_view(st)->lat);

	if (!h)
		return;
	for (size_t b = 0; b < MTD_LB_LAT_BUCKETS; b++)
		hist[b] += atomic_load_explicit(&h->b[b], memory_order_relaxed);
}

void mtd_lb_stats_fini(struct mtd_lb_stats *st)
{
	struct mtd_lb_live *l = mtd_lazy_peek(&st->live);

	if (l != NULL) {
		mtd_lazy_free(&l->lat);
		mtd_lazy_free(&l->orca);
		mtd_lazy_free(&st->live);
	}
}

/* Out of memory at the first pick: the call is not counted (its end may
 * then count one call fewer in flight; readers clamp at 0). */
void mtd_lb_stats_begin(struct mtd_lb_stats *stats)
{
	struct mtd_lb_live *st = mtd_lazy_get(&stats->live);

	if (st == NULL)
		return;
	atomic_fetch_add_explicit(&st->active, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&st->picks, 1, memory_order_relaxed);
}

void mtd_lb_stats_end(struct mtd_lb_stats *stats, const struct mtd_lb_result *res, int64_t now_ns, int64_t decay_ms)
{
	struct mtd_lb_live *st = mtd_lazy_get(&stats->live);
	int64_t lat = res->latency_us > 0 ? res->latency_us : 0;

	if (st == NULL)
		return;
	atomic_fetch_sub_explicit(&st->active, 1, memory_order_relaxed);
	if (res->neutral)
		return;
	if (res->ok) {
		atomic_fetch_add_explicit(&st->successes, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&st->latency_sum_us, (uint64_t)lat, memory_order_relaxed);
		atomic_fetch_add_explicit(&st->latency_count, 1, memory_order_relaxed);
		lat_record(st, lat);
		window_observe(st, lat, now_ns);
		ewma_observe(st, (double)lat, now_ns, decay_ms);
	} else {
		/* PEAK_EWMA: failures count as slow, so an instance
		 * that fails fast does not look fast and attract traffic. */
		double cost = mtd_lb_stats_ewma_us(stats, now_ns, decay_ms);
		double pen = fmax((double)lat, fmax(MTD_LB_FAILURE_PENALTY_US, MTD_LB_FAILURE_PENALTY_FACTOR * cost));
		if (pen > MTD_LB_FAILURE_PENALTY_MAX_US)
			pen = MTD_LB_FAILURE_PENALTY_MAX_US;

		atomic_fetch_add_explicit(&st->failures, 1, memory_order_relaxed);
		ewma_observe(st, pen, now_ns, decay_ms);
	}
}

void mtd_lb_call_begin(struct mtd_lb_picker *p, size_t idx)
{
	if (idx >= p->n)
		return;
	mtd_lb_stats_begin(p->eps[idx].stats);
	if (p->ops->begin != NULL && p->state != NULL)
		p->ops->begin(p->state, idx);
}

void mtd_lb_call_end(struct mtd_lb_picker *p, size_t idx, const struct mtd_lb_result *res, int64_t now_ns)
{
	if (idx >= p->n)
		return;
	mtd_lb_stats_end(p->eps[idx].stats, res, now_ns, p->cfg.decay_ms);
	if (p->ops->report != NULL && p->state != NULL && !res->neutral)
		p->ops->report(p->state, idx, res);
}
