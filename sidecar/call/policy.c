/* A call's traffic policy: what happens to it before the pick.
 *
 *   :path + headers --routes--> services[] entry --rate_limit--> --abort-->
 *        --delay (timer)--> the pick (split inside the routing layer)
 *   request complete --mirror--> a copy to another entry, answer dropped
 *
 * Everything here is decided once, when the call is routed (call.c
 * route() and mtd_call_start), from the snapshot the call holds; nothing
 * is allocated for it unless the call is mirrored. The token bucket is
 * lib/limit's, shared by the workers without a lock; the split is
 * lib/lb/split.c's, inside the routing layer.
 *
 * The mirror copy, sent once the request is complete, is mirror.c's. */
#include "config.h"

#include "core/clock.h"
#include "discovery/discovery.h"
#include "lb/lb.h"
#include "limit/limit.h"
#include "route/route.h"
#include "sidecar/call/call.h"
#include "sidecar/call/headers.h"
#include "sidecar/call/policy.h"
#include "sidecar/control/runtime.h"
#include "sidecar/ops/metrics.h"
#include "sidecar/turn.h"
#include "sidecar/worker-t.h"

/* ---- routes ------------------------------------------------------------- */

static const char *req_header(void *arg, const char *name, size_t *len)
{
	const struct mtd_call *call = arg;
	nghttp2_nv buf;
	const nghttp2_nv *v = mtd_headers_find(&call->req_hdrs, name, &buf);
	if (!v)
		return NULL;
	*len = v->valuelen;
	return (const char *)v->value;
}

int mtd_policy_route(const struct mtd_runtime *rt, const struct mtd_call *call, const struct mtd_route_path *rp,
                     struct mtd_policy_xroute *xr)
{
	const struct mtd_cfg *cfg = rt->cfg;
	*xr = (struct mtd_policy_xroute){0};
	if (cfg->n_routes) {
		/* Before the lookup by :path, first match wins. */
		int r = mtd_route_match(cfg->routes, cfg->n_routes, rp, req_header, (void *)call);
		if (r >= 0)
			return cfg->routes[r].to;
	}
	const struct mtd_rt_xroutes *xs = rt->xroutes;
	if (xs == NULL && rt->routes_awaited && !call->routes_waited && !call->bg) {
		/* Not where its :path alone would send it: a route may say
		 * another cluster, or a split. A background call (a FAILBACK
		 * re-send, routed anew at each try) never waits: its client's
		 * call waited already, and only a client's call may park. */
		xr->awaiting = true;
		return -1;
	}
	if (xs != NULL) {
		/* The config's own routes first: a control plane never
		 * overrides what the file says. */
		int r = mtd_route_match(xs->rules, xs->n, rp, req_header, (void *)call);
		if (r >= 0) {
			const struct mtd_rt_xroute *x = &xs->r[r];
			xr->route = x;
			if (x->n_targets == 0) {
				xr->failed = x->name;
				return -1;
			}
			const struct mtd_rt_xtarget *t = &x->targets[0];
			if (x->n_targets > 1) {
				uint32_t draw = (uint32_t)(mtd_lb_rand(&call->w->rng) % x->total);
				for (size_t i = 0; i < x->n_targets; i++)
					if (draw < x->targets[i].upto) {
						t = &x->targets[i];
						break;
					}
			}
			xr->fault = t->has_fault ? &t->fault : NULL;
			xr->deadline_cap_ms = x->deadline_cap_ms;
			return t->service;
		}
	}
	return mtd_route_lookup(rt->routes, rp->service, rp->service_len);
}

/* ---- rate_limit and fault_injection ------------------------------------- */

bool mtd_policy_drawn(struct mtd_call *call, double percent)
{
	if (percent >= 100.0)
		return true;
	if (percent <= 0.0)
		return false;
	return (double)(mtd_lb_rand(&call->w->rng) >> 11) * 0x1p-53 * 100.0 < percent;
}

/* A control plane's fault filter for the calls of its route, else the
 * method's fault_injection, else the service's. */
static const struct mtd_cfg_fault_injection *call_faults(const struct mtd_call *call)
{
	if (call->xroute && call->xroute->has_fault_injection)
		return &call->xroute->fault_injection;
	return call->method ? &call->method->cfg->fault_injection : &call->svc->cfg->local->fault_injection;
}

bool mtd_policy_admit(struct mtd_call *call)
{
	/* The method's own bucket, else the service's. */
	struct mtd_rt_bucket *lim = call->method && call->method->limit ? call->method->limit : call->svc->limit;
	/* At the exact clock, not the call's start (the turn's clock,
	 * turn.h): the bucket is every worker's, and refuses a time behind
	 * another worker's last take as a straggler's (limit.h). */
	if (lim && !mtd_limit_take(&lim->b, mtd_now_ns())) {
		mtd_metrics_policy(call, MTD_MX_RATE_LIMITED);
		if (lim == call->svc->limit)
			mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED,
			              "rate_limit: service %s is over %u calls per second (burst %u)",
			              call->svc->cfg->local->name, lim->b.rate, lim->b.burst);
		else
			mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED,
			              "rate_limit: method %s/%s is over %u calls per second (burst %u)",
			              call->svc->cfg->local->name, call->method->cfg->name, lim->b.rate, lim->b.burst);
		return false;
	}
	const struct mtd_cfg_fault_injection *fi = call_faults(call);
	if (fi->abort && mtd_policy_drawn(call, fi->abort_percent)) {
		mtd_metrics_policy(call, MTD_MX_FAULT_ABORTED);
		mtd_call_fail(call, (enum mtd_grpc_status)fi->abort_status,
		              "fault_injection: call aborted with %s (abort.percent %g)",
		              mtd_grpc_status_name(fi->abort_status), fi->abort_percent);
		return false;
	}
	return true;
}

int64_t mtd_policy_delay_ns(struct mtd_call *call)
{
	const struct mtd_cfg_fault_injection *fi = call_faults(call);
	if (!fi->delay || !mtd_policy_drawn(call, fi->delay_percent))
		return 0;
	mtd_metrics_policy(call, MTD_MX_FAULT_DELAYED);
	return fi->delay_ms * 1000000;
}
