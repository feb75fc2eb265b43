/* Bounded load for the hashing strategies ("Consistent Hashing with
 * Bounded Loads", Mirrokni, Thorup, Zadimoghaddam 2016; Envoy's
 * hash_balance_factor): with m calls in flight over the eligible
 * endpoints, endpoint i may take a new call only while
 *     active_i < ceil(factor * (m + 1) * w_i / W)
 * (W: sum of eligible weights), so nobody exceeds factor x its fair share
 * of the mean. An overflowing call walks on to the next candidate of its
 * key, so keys still stick as long as their endpoint has room. Private to
 * consistent_hash.c and maglev.c (and their unit tests), like the walk over
 * a key's candidates both share (mtd_lb__slots, at the end). */
#ifndef MTD_LB_BOUNDED_H
#define MTD_LB_BOUNDED_H

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

/* The start of a hashing pick: false when the pick is no matter of the
 * key's candidates (ctx carries no key, or every endpoint with a place in
 * the table is excluded) and the caller takes mtd_lb__any_eligible; else
 * true with b prepared (mtd_lb__bound_prepare, only when bounded load is on
 * or ctx excludes some: the O(n) pass is skipped otherwise, b stays off). */
static inline bool mtd_lb__bound_start(struct mtd_lb__bound *b, double factor, const double *w,
                                       const struct mtd_lb_endpoint *eps, size_t n, const struct mtd_lb_pick_ctx *ctx)
{
	*b = (struct mtd_lb__bound){.on = false}; /* every field: gcc -O2 (no ASan) warns of per_weight */
	if (ctx->key == NULL)
		return false;
	if (factor > 0.0 || ctx->excluded != NULL) {
		mtd_lb__bound_prepare(b, factor, w, eps, n, ctx);
		if (b->eligible == 0) /* only drained endpoints left, or none */
			return false;
	}
	return true;
}

/* The table weight of each endpoint for both strategies: its configured
 * weight, 0 (no place in the table) for weight <= 0, unless no weight is
 * positive: then all are equal (100). w: n entries. */
static inline void mtd_lb__table_weights(double *w, const struct mtd_lb_endpoint *eps, size_t n)
{
	bool any_positive = false;

	for (size_t i = 0; i < n; i++)
		any_positive |= eps[i].weight > 0;
	for (size_t i = 0; i < n; i++)
		w[i] = any_positive ? (eps[i].weight > 0 ? eps[i].weight : 0) : 100.0;
}

static inline bool mtd_lb__bound_has_room(const struct mtd_lb__bound *b, double w, const struct mtd_lb_endpoint *ep)
{
	if (!b->on)
		return true;
	/* For a whole number a, a < ceil(x) exactly when a < x: the
	 * paper's bound without the ceiling (and without libm). The epsilon
	 * keeps float noise from lifting an exact integer share to the next
	 * one: the bound errs on the strict side. */
	return (double)mtd_lb__active(ep) < b->per_weight * w - 1e-9;
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

/* ---- a key's candidates ------------------------------------------------
 * Both strategies place a key at a slot of a fixed table (CONSISTENT_HASH:
 * the ring's points clockwise; MAGLEV: its lookup table) and walk on from
 * there, slot after slot, wrapping around; the endpoints of those slots
 * are the key's candidates, in the same order for every pick of the key. */
struct mtd_lb__slots {
	const void *table;
	size_t len; /* number of slots, > 0 */
	/* The endpoint index of slot (< len), below the picker's endpoint
	 * count; pure. A static function of the strategy's file: the helpers
	 * below are inline and take the struct by value, so the compiler
	 * sees the function and inlines it (gcc -O2 does; by pointer it only
	 * made the call direct). */
	uint32_t (*endpoint)(const void *table, size_t slot);
};

/* The bounded-load walk: the endpoint of the first slot from `at` on
 * (each slot once) that ctx does not exclude and that has room under b
 * (every one has when b is off; w: the endpoints' weights, as given to
 * mtd_lb__bound_prepare). With ww non-NULL (some endpoint ramps) such a
 * candidate must also take the key (mtd_lb__warm_takes), and the warmest
 * refused one takes it after MTD_LB__WARM_CANDIDATES refusals or when the
 * walk ends. Returns an endpoint index, or -1 when no slot qualifies (the
 * caller falls back to mtd_lb__any_eligible). O(len) in the worst case;
 * any thread (reads the endpoints' counters only; ww is the caller's). */
static inline int mtd_lb__slots_walk(struct mtd_lb__slots sl, size_t at, const struct mtd_lb__bound *b, const double *w,
                                     const struct mtd_lb_endpoint *eps, struct mtd_lb__warm_walk *ww,
                                     const struct mtd_lb_pick_ctx *ctx)
{
	for (size_t k = 0; k < sl.len; k++) {
		uint32_t i = sl.endpoint(sl.table, (at + k) % sl.len);

		if (mtd_lb__excluded(ctx, i))
			continue;
		if (!mtd_lb__bound_has_room(b, w[i], &eps[i]))
			continue;
		if (ww == NULL || mtd_lb__warm_takes(ww, eps, i, ctx))
			return (int)i;
		if (mtd_lb__warm_fallback(ww, false) >= 0)
			return ww->best;
	}
	return ww != NULL ? mtd_lb__warm_fallback(ww, true) : -1;
}

/* A hot key's endpoint (hotkeys.c says when a key is hot): uniform (ctx's
 * PRNG) over the first `spread` (2..MTD_LB_MAX_HOT_SPREAD) distinct
 * endpoints of the slots from `at` on that ctx does not exclude and, with
 * warm non-NULL (some endpoint ramps), whose warm share is 1; so each takes
 * 1/spread of the key, or a larger share when fewer qualify. At most
 * min(len, 64 x spread) slots are looked at. Bounded load does not apply:
 * the spread is the key's bound. Returns an endpoint index, or -1 when none
 * qualifies (the caller walks on as for a cold key). Any thread. */
static inline int mtd_lb__slots_hot(struct mtd_lb__slots sl, size_t at, uint32_t spread,
                                    const struct mtd_lb_warmup *warm, const struct mtd_lb_endpoint *eps,
                                    const struct mtd_lb_pick_ctx *ctx)
{
	uint32_t cand[MTD_LB_MAX_HOT_SPREAD];
	size_t nc = 0, limit;

	if (spread > MTD_LB_MAX_HOT_SPREAD) /* cand[]'s bound, whatever the caller passes */
		spread = MTD_LB_MAX_HOT_SPREAD;
	limit = sl.len < 64 * (size_t)spread ? sl.len : 64 * (size_t)spread;
	for (size_t k = 0; k < limit && nc < spread; k++) {
		uint32_t i = sl.endpoint(sl.table, (at + k) % sl.len);
		bool seen = false;

		if (mtd_lb__excluded(ctx, i))
			continue;
		if (warm != NULL && mtd_lb__warm_fraction(warm, &eps[i], ctx->now_ms) < 1.0)
			continue;
		for (size_t c = 0; c < nc && !seen; c++)
			seen = cand[c] == i;
		if (!seen)
			cand[nc++] = i;
	}
	if (nc == 0)
		return -1;
	return (int)cand[mtd_lb__below(mtd_lb__rng(ctx), nc)];
}

#endif
