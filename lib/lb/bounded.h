/* Bounded load for the hashing strategies ("Consistent Hashing with
 * Bounded Loads", Mirrokni, Thorup, Zadimoghaddam 2016; Envoy's
 * hash_balance_factor): with m calls in flight over the eligible
 * endpoints, endpoint i may take a new call only while
 *     active_i < ceil(factor * (m + 1) * w_i / W)
 * (W: sum of eligible weights), so nobody exceeds factor x its fair share
 * of the mean. An overflowing call walks on to the next candidate of its
 * key, so keys still stick as long as their endpoint has room. Private to
 * consistent_hash.c and maglev.c. */
#ifndef MTD_LB_BOUNDED_H
#define MTD_LB_BOUNDED_H

#include <math.h>

#include "lb/lb.h"
#include "lb/lb-impl.h"

struct mtd_lb__bound {
	bool on;
	double per_weight; /* factor * (m + 1) / W */
	size_t eligible;   /* eligible endpoints with a place in the table */
};

/* O(n): the in-flight total is the sum of the endpoints' counters. */
static inline void mtd_lb__bound_prepare(struct mtd_lb__bound *b, double factor, const double *w,
                                         const struct mtd_lb_endpoint *eps, size_t n, const struct mtd_lb_pick_ctx *ctx)
{
	double wsum = 0.0;
	int64_t m = 0;

	b->eligible = 0;
	for (size_t i = 0; i < n; i++) {
		if (w[i] <= 0.0 || mtd_lb__excluded(ctx, i))
			continue;
		b->eligible++;
		wsum += w[i];
		m += mtd_lb__active(&eps[i]);
	}
	b->on = factor > 0.0 && wsum > 0.0;
	b->per_weight = b->on ? factor * (double)(m + 1) / wsum : 0.0;
}

static inline bool mtd_lb__bound_has_room(const struct mtd_lb__bound *b, double w, const struct mtd_lb_endpoint *ep)
{
	if (!b->on)
		return true;
	/* The epsilon keeps float noise from lifting an exact integer
	 * share to the next one: the bound errs on the strict side. */
	return (double)mtd_lb__active(ep) < ceil(b->per_weight * w - 1e-9);
}

/* Warmup on the ring (CONSISTENT_HASH; MAGLEV uses the key's fraction with
 * a second table, maglev.c). A key walks its candidates in their fixed
 * order (ring points clockwise), skipping the excluded and the full as
 * above. A candidate whose
 * warm share is f (mtd_lb__warm_fraction) takes the key only when the
 * key's own fraction u (a second hash of the key, uniform in [0, 1)) is
 * below f; a warm endpoint (f = 1) always takes it. After
 * MTD_LB__WARM_CANDIDATES refusals the warmest refused candidate (first
 * on ties) takes it.
 *
 * Why keys only move toward the new endpoint: f grows with time and is
 * ordered by start time across endpoints (the same curve for all), so the
 * set of candidates accepting a key only grows, and its first member can
 * only move earlier in the key's order - toward the endpoint the plain ring
 * gives it. When nobody accepts yet, the warmest refused candidate is the
 * one that will accept first, so that fallback hands over without a jump.
 * A new endpoint thus receives the keys with u < f(t) of its arcs: its
 * share of its arcs is f(t), and a key that moved to it stays. When every
 * endpoint started at once, every f is equal, and the first candidate -
 * the plain owner - keeps each key: warmup is inert. */
#define MTD_LB__WARM_CANDIDATES   16
#define MTD_LB__KEY_FRACTION_SEED 0x6b65796672616331ULL /* "keyfrac1" */

struct mtd_lb__warm_walk {
	const struct mtd_lb_warmup *w;
	int64_t now_ms;
	double u; /* < 0 until needed */
	int best;
	double best_f;
	unsigned refused;
};

static inline void mtd_lb__warm_walk_init(struct mtd_lb__warm_walk *ww, const struct mtd_lb_warmup *w, int64_t now_ms)
{
	*ww = (struct mtd_lb__warm_walk){.w = w, .now_ms = now_ms, .u = -1.0, .best = -1, .best_f = -1.0};
}

/* The key's fraction u: a second hash of it, uniform in [0, 1). */
static inline double mtd_lb__key_fraction(const struct mtd_lb_pick_ctx *ctx)
{
	return (double)(mtd_lb_hash64(ctx->key, ctx->key_len, MTD_LB__KEY_FRACTION_SEED) >> 11) * 0x1.0p-53;
}

/* True when candidate idx takes the key (see above). */
static inline bool mtd_lb__warm_takes(struct mtd_lb__warm_walk *ww, const struct mtd_lb_endpoint *eps, size_t idx,
                                      const struct mtd_lb_pick_ctx *ctx)
{
	double f = mtd_lb__warm_fraction(ww->w, &eps[idx], ww->now_ms);

	if (f >= 1.0)
		return true;
	if (ww->u < 0.0)
		ww->u = mtd_lb__key_fraction(ctx);
	if (ww->u < f)
		return true;
	if (f > ww->best_f) {
		ww->best_f = f;
		ww->best = (int)idx;
	}
	ww->refused++;
	return false;
}

/* The warmest refused candidate once the walk has refused enough, else -1. */
static inline int mtd_lb__warm_fallback(const struct mtd_lb__warm_walk *ww, bool walk_ended)
{
	return ww->refused >= MTD_LB__WARM_CANDIDATES || walk_ended ? ww->best : -1;
}

#endif
