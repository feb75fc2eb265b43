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

#endif
