/* Warmup: a new endpoint's weight ramps up from its start time.
 *
 *   LINEAR (Dubbo AbstractLoadBalance.calculateWarmupWeight):
 *       w' = w * uptime / warmup, clamped to [1, w]
 *   SLOW_START (Envoy slow start, EdfLoadBalancerBase):
 *       f  = max(uptime, 1 ms) / warmup
 *       w' = w * max(min_weight_percent / 100, f ^ (1 / aggression))
 *   then, for both, at least 1: a warming endpoint is never unreachable.
 *
 * An endpoint with start_ms == 0 (unknown) is treated as warm. A start in
 * the future (clock skew between the registry and us) counts as uptime 0.
 */
#include "config.h"

#include <math.h>
#include <stdint.h>

#include "lb/lb-impl.h"

double mtd_lb__warm_weight(const struct mtd_lb_warmup *w, const struct mtd_lb_endpoint *ep, int64_t now_ms)
{
	double weight = (double)ep->weight;
	double f, out;
	int64_t up;

	if (ep->weight <= 0)
		return 0.0;
	if (w->duration_ms <= 0 || ep->start_ms <= 0)
		return weight;
	up = now_ms - ep->start_ms;
	if (up >= w->duration_ms)
		return weight;
	if (up < 0)
		up = 0;

	if (w->curve == MTD_LB_WARMUP_SLOW_START) {
		double aggr = w->aggression > 0.0 ? w->aggression : 1.0;
		double floor_f = w->min_weight_percent / 100.0;

		/* Envoy: the time factor is at least 1 ms of the window. */
		f = (double)(up > 0 ? up : 1) / (double)w->duration_ms;
		if (aggr != 1.0)
			f = pow(f, 1.0 / aggr);
		out = weight * fmax(floor_f, f);
	} else {
		/* Dubbo: (int)(uptime / (warmup / weight)) in [1, w];
		 * kept fractional here, the clamp is Dubbo's. */
		out = weight * (double)up / (double)w->duration_ms;
	}
	if (out < 1.0)
		out = 1.0;
	if (out > weight)
		out = weight;
	return out;
}

double mtd_lb__warm_fraction(const struct mtd_lb_warmup *w, const struct mtd_lb_endpoint *ep, int64_t now_ms)
{
	int64_t up;
	double f;

	if (w->duration_ms <= 0 || ep->start_ms <= 0)
		return 1.0;
	up = now_ms - ep->start_ms;
	if (up >= w->duration_ms)
		return 1.0;
	if (up < 0)
		up = 0;
	f = (double)up / (double)w->duration_ms;
	if (w->curve == MTD_LB_WARMUP_SLOW_START) {
		double aggr = w->aggression > 0.0 ? w->aggression : 1.0;

		if (aggr != 1.0)
			f = pow(f, 1.0 / aggr);
		f = fmax(w->min_weight_percent / 100.0, f);
	}
	return f < 1.0 ? f : 1.0;
}

void mtd_lb__warm_span(const struct mtd_lb_warmup *w, const struct mtd_lb_endpoint *eps, size_t n,
                       struct mtd_lb_warm_span *span)
{
	int64_t until = INT64_MIN;
	int64_t oldest_done = INT64_MAX;
	int64_t first_return = INT64_MAX;

	span->w = *w;
	span->ramp_until_ms = INT64_MIN;
	span->apply_from_ms = INT64_MAX;
	if (w->duration_ms <= 0)
		return;
	for (size_t i = 0; i < n; i++) {
		int64_t done;

		if (eps[i].weight <= 0)
			continue;
		if (eps[i].start_ms <= 0) {
			oldest_done = INT64_MIN; /* an old endpoint: warm now */
			continue;
		}
		done = eps[i].start_ms > INT64_MAX - w->duration_ms ? INT64_MAX : eps[i].start_ms + w->duration_ms;
		if (done > until)
			until = done;
		if (done < oldest_done)
			oldest_done = done;
		if (eps[i].returned && eps[i].start_ms < first_return)
			first_return = eps[i].start_ms;
	}
	span->ramp_until_ms = until;
	/* Inert while every endpoint is new. Ramping starts to matter
	 * once one endpoint is fully warm, i.e. at the oldest one's end. */
	span->apply_from_ms = oldest_done;
	/* An endpoint that came back ramps from its return, even
	 * while the others are still inside their own first window (they
	 * served meanwhile; inertia is for a fleet that starts together). */
	if (first_return < span->apply_from_ms)
		span->apply_from_ms = first_return;
}
