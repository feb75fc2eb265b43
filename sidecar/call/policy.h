/* A call's traffic policy (policy.c): routes, rate_limit and
 * fault_injection, decided once when the call is routed, before
 * any upstream is touched: a layer before the pick, which then picks
 * inside the group it chose; split is the routing layer's (lib/lb/split.c). Worker thread
 * only. */
#ifndef MTD_POLICY_H
#define MTD_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mtd_call;
struct mtd_route_path;
struct mtd_runtime;

struct mtd_fault_policy;

/* What a control plane's route (xDS) adds to the call it routes. */
struct mtd_policy_xroute {
	const struct mtd_fault_policy *fault; /* its retry_policy, NULL = the service's */
	int64_t deadline_cap_ms;              /* 0 = none */
	const char *failed;                   /* the call fails: this route has no cluster, NULL = no */
	const struct mtd_rt_xroute *route;    /* the control plane's route taken, NULL = none */
	bool awaiting; /* -1: the listener's first routes have not come (rt->routes_awaited) */
};

/* The services[] entry of rt a call goes to: the first of the config's
 * routes that matches it (its :path rp and its request headers), else
 * the first of the control plane's (rt->xroutes: a weighted draw among
 * its clusters' services, what it adds in *xr), else the lookup by
 * :path; -1 when none has one (or xr->failed), or when the control
 * plane's routes are awaited and the call, a client's, has not waited for
 * them yet (xr->awaiting). *xr is cleared first. */
int mtd_policy_route(const struct mtd_runtime *rt, const struct mtd_call *call, const struct mtd_route_path *rp,
                     struct mtd_policy_xroute *xr);

/* A call just routed (call->svc, method, mx set): rate_limit, then
 * fault_injection's abort. false when it ended the call (RESOURCE_EXHAUSTED
 * naming rate_limit, or the abort status): nothing was sent upstream. */
bool mtd_policy_admit(struct mtd_call *call);

/* fault_injection's delay for the call, in ns (0: none), drawn once and
 * counted. The caller waits it out on the call's retry timer. */
int64_t mtd_policy_delay_ns(struct mtd_call *call);

/* A draw in [0, 100) against percent (the call's worker's generator):
 * fault_injection's, mirror's. */
bool mtd_policy_drawn(struct mtd_call *call, double percent);

#endif
