/* A call's traffic policy (issue 18): what happens to it before the pick.
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
 * A mirror copy is a background call (call->bg, as FAILBACK's re-sends:
 * no client, its own headers and request bytes, counted in the worker's
 * replay_bytes) routed straight to the mirror entry on the primary's
 * snapshot. It follows the lifetime rule (call-t.h) like any call: held
 * by its attempts, released when none is left, freed at the end of the
 * turn. The primary and its copy point at each other while both live;
 * whichever is freed first clears the other's link (call.c call_free),
 * and the primary's end (its client stream closing) cancels a copy still
 * running. */
#include "config.h"

#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "discovery/discovery.h"
#include "lb/lb.h"
#include "limit/limit.h"
#include "route/route.h"
#include "sidecar/call/call.h"
#include "sidecar/call/failback.h"
#include "sidecar/call/headers.h"
#include "sidecar/call/policy.h"
#include "sidecar/control/runtime.h"
#include "sidecar/ops/metrics.h"
#include "sidecar/turn.h"

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

int mtd_policy_route(const struct mtd_runtime *rt, const struct mtd_call *call, const struct mtd_route_path *rp)
{
	const struct mtd_cfg *cfg = rt->cfg;
	if (cfg->n_routes) {
		/* Before the lookup by :path, first match wins. */
		int r = mtd_route_match(cfg->routes, cfg->n_routes, rp, req_header, (void *)call);
		if (r >= 0)
			return cfg->routes[r].to;
	}
	return mtd_route_lookup(rt->routes, rp->service, rp->service_len);
}

/* ---- rate_limit and fault_injection ------------------------------------- */

/* A draw in [0, 100) against percent. */
static bool drawn(struct mtd_call *call, double percent)
{
	if (percent >= 100.0)
		return true;
	if (percent <= 0.0)
		return false;
	return (double)(mtd_lb_rand(&call->w->rng) >> 11) * 0x1p-53 * 100.0 < percent;
}

static const struct mtd_cfg_fault_injection *call_faults(const struct mtd_call *call)
{
	return call->method ? &call->method->cfg->fault_injection : &call->svc->cfg->fault_injection;
}

bool mtd_policy_admit(struct mtd_call *call)
{
	/* The method's own bucket, else the service's. */
	struct mtd_rt_bucket *lim = call->method && call->method->limit ? call->method->limit : call->svc->limit;
	if (lim && !mtd_limit_take(&lim->b, call->start_ns)) {
		mtd_metrics_policy(call, MTD_MX_RATE_LIMITED);
		if (lim == call->svc->limit)
			mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED,
			              "rate_limit: service %s is over %u calls per second (burst %u)",
			              call->svc->cfg->name, lim->b.rate, lim->b.burst);
		else
			mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED,
			              "rate_limit: method %s/%s is over %u calls per second (burst %u)",
			              call->svc->cfg->name, call->method->cfg->name, lim->b.rate, lim->b.burst);
		return false;
	}
	const struct mtd_cfg_fault_injection *fi = call_faults(call);
	if (fi->abort && drawn(call, fi->abort_percent)) {
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
	if (!fi->delay || !drawn(call, fi->delay_percent))
		return 0;
	mtd_metrics_policy(call, MTD_MX_FAULT_DELAYED);
	return fi->delay_ms * 1000000;
}

/* ---- mirror -------------------------------------------------------------- */

static void mirror_unlink(struct mtd_call *copy)
{
	struct mtd_call *primary = copy->bg->primary;
	if (primary && primary->mirror == copy)
		primary->mirror = NULL;
	copy->bg->primary = NULL;
}

void mtd_policy_mirror(struct mtd_call *call)
{
	struct mtd_worker *w = call->w;
	if (!call->svc || call->bg || !call->down || call->mirror || call->state == MTD_CALL_DONE)
		return;
	const struct mtd_cfg_service *sc = call->svc->cfg;
	if (sc->mirror < 0 || !drawn(call, sc->mirror_percent))
		return;
	/* The whole request, kept from its first byte: a copy never holds
	 * the primary back, so it is made only from what is still here. */
	size_t len = call->req.len;
	if (call->committed || call->req_base != 0 || len > call->fault->replay_buffer ||
	    w->replay_bytes + len > w->rt->cfg->replay_buffer_total) {
		mtd_metrics_policy(call, MTD_MX_MIRROR_TOO_LARGE);
		MTD_DEBUG("mirror: %zu-byte request not mirrored to %s (over fault.replay_buffer %u, or not kept)", len,
		          call->hold->rt->cfg->services[sc->mirror].name, call->fault->replay_buffer);
		return;
	}
	const struct mtd_runtime *rt = call->hold->rt;
	struct mtd_rt_service *target = rt->services[sc->mirror];
	struct mtd_call *copy = mtd_slab_calloc(&w->slab, 1, sizeof(*copy));
	struct mtd_call_bg *part = mtd_slab_calloc(&w->slab, 1, sizeof(*part));
	if (!copy || !part) {
		mtd_slab_free(&w->slab, copy);
		mtd_slab_free(&w->slab, part);
		mtd_metrics_policy(call, MTD_MX_MIRROR_FAILED);
		return;
	}
	copy->w = w;
	copy->bg = part;
	part->call = copy;
	part->mirror = true;
	LIST_INIT(&copy->attempts);
	copy->start_ns = mtd_now_ns();
	copy->mx = call->mx; /* counted as the primary's :path */
	if (mtd_failback_copy_request(copy, call) < 0) {
		mtd_slab_free(&w->slab, part);
		mtd_slab_free(&w->slab, copy);
		mtd_metrics_policy(call, MTD_MX_MIRROR_FAILED);
		return;
	}
	/* Routed to the mirror entry on the primary's snapshot, which it
	 * holds (its policy points into that config); never by :path. */
	copy->hold = mtd_worker_hold_again(w, call->hold);
	copy->svc = target;
	nghttp2_nv path_buf;
	const nghttp2_nv *path = mtd_headers_find(&call->req_hdrs, ":path", &path_buf);
	struct mtd_route_path rp;
	const struct mtd_cfg_method *m = NULL;
	if (path && mtd_route_parse_path((const char *)path->value, path->valuelen, &rp) == 0)
		m = mtd_cfg_service_method(target->cfg, rp.method, rp.method_len);
	copy->method = m ? &target->methods[m - target->cfg->methods] : NULL;
	copy->fault = m ? &m->fault : &target->cfg->fault;
	/* The whole request is here, counted as kept (as a FAILBACK copy's). */
	copy->req_eof = true;
	copy->req_taken = copy->req_retained = (uint32_t)len;
	w->replay_bytes += len;
	/* The primary's time left: the copy has no use past it. */
	if (call->deadline_ns) {
		int64_t left = (call->deadline_ns - copy->start_ns) / 1000000;
		part->timeout_ms = left > 0 ? left : 1;
	}
	LIST_INSERT_HEAD(&w->bg_calls, part, link); /* the worker's stop cancels it (failback.c) */
	part->primary = call;
	call->mirror = copy;
	mtd_metrics_policy(call, MTD_MX_MIRROR_COPIES);
	mtd_call_start_bg(copy);
	mtd_call_release(copy); /* held by its attempt, else freed at the end of the turn */
}

void mtd_policy_primary_ended(struct mtd_call *call)
{
	struct mtd_call *copy = call->mirror;
	if (!copy)
		return;
	mirror_unlink(copy);
	if (copy->state != MTD_CALL_DONE) {
		/* Still running: the primary's answer is what counts. */
		mtd_metrics_policy(copy, MTD_MX_MIRROR_CANCELLED);
		mtd_call_settle(copy); /* RST_STREAM CANCEL on its streams */
	}
	mtd_call_release(copy);
}

void mtd_policy_mirror_ended(struct mtd_call *copy, bool ok, const char *what)
{
	mirror_unlink(copy);
	if (ok) {
		mtd_call_settle(copy);
		return;
	}
	copy->state = MTD_CALL_DONE; /* over: later events are ignored */
	mtd_metrics_policy(copy, MTD_MX_MIRROR_FAILED);
	MTD_DEBUG("mirror: copy to %s failed: %s", copy->svc ? copy->svc->cfg->name : "?", what);
}
