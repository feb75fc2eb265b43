/* An inbound peer's call (inbound_call.h): authorization, the listener's
 * max_concurrent_calls and maitred's x-forwarded-client-cert, decided
 * here, in the call engine, from what io/inbound.h lets a call read of
 * its connection; the socket, TLS, listeners and accept limits stay
 * io/'s (inbound.c). */
#include "config.h"

#include <string.h>

#include "authz/authz.h"
#include "core/log.h"
#include "route/route.h"
#include "sidecar/call/call.h"
#include "sidecar/call/headers.h"
#include "sidecar/call/inbound_call.h"
#include "sidecar/control/runtime.h"
#include "sidecar/io/downstream.h"
#include "sidecar/ops/mesh.h"
#include "sidecar/turn.h"

int mtd_call_inbound_route(const struct mtd_runtime *rt, struct mtd_call *call)
{
	const struct mtd_in_peer *in = mtd_call_inbound_peer(call);
	size_t idx;
	const struct mtd_rt_inentry *e = in ? mtd_inbound_listener_entry(rt, in, &idx) : NULL;
	if (!e)
		return -1;
	call->inbound = (uint8_t)(idx + 1);
	return (int)e->cfg->service;
}

const char *mtd_call_inbound_listener(const struct mtd_call *call)
{
	const struct mtd_runtime *rt = call->hold ? call->hold->rt : call->w->rt;
	if (!call->inbound || !rt->inbound || call->inbound > rt->inbound->n)
		return "-";
	return rt->inbound->e[call->inbound - 1].key;
}

void mtd_call_inbound_start(struct mtd_call *call)
{
	struct mtd_conn *c = call->down;
	const struct mtd_in_peer *in = mtd_inbound_peer(c);
	struct mtd_worker *w = call->w;
	size_t idx;
	const struct mtd_rt_inentry *e = mtd_inbound_entry(w, in, &idx);
	if (!e) {
		/* The snapshot swap sent this connection GOAWAY: a stream above
		 * its last-stream-id never gets here; this one raced it. */
		mtd_call_fail(call, MTD_GRPC_UNAVAILABLE,
		              "inbound %s: the connection was made under a TLS policy no longer in force; reconnect",
		              in->key);
		if (c->state == MTD_CONN_READY)
			mtd_down_shutdown(c);
		return;
	}
	const struct mtd_cfg_inbound *ib = e->cfg;
	call->inbound = (uint8_t)(idx + 1);
	/* Ours, on every call of an authenticated peer, before the decision:
	 * the access log reads the identity from it. */
	if (in->xfcc && mtd_headers_add(&call->req_hdrs, &w->slab, (const uint8_t *)MTD_XFCC_HEADER,
	                                sizeof(MTD_XFCC_HEADER) - 1, (const uint8_t *)in->xfcc, in->xfcc_len, 0) < 0) {
		mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	nghttp2_nv path_buf;
	const nghttp2_nv *path = mtd_headers_find(&call->req_hdrs, ":path", &path_buf);
	const char *p = path ? (const char *)path->value : "";
	size_t plen = path ? path->valuelen : 0;
	struct mtd_route_path rp;
	bool parsed = mtd_route_parse_path(p, plen, &rp) == 0;
	struct mtd_authz_decision d = mtd_authz_decide(&ib->authz, in->authenticated, in->identity, p, plen);
	if (!d.allowed) {
		call->verdict = MTD_IN_DENIED;
		mtd_mesh_count(in->mx, MTD_IN_DENIED);
		if (parsed) /* its figures and access-log line name the method */
			mtd_call_routed(call, p, plen, rp.service_len);
		mtd_call_fail(call, MTD_GRPC_PERMISSION_DENIED, "inbound %s: %s is not allowed to call %.*s",
		              ib->listen.text,
		              in->identity        ? in->identity
		              : in->authenticated ? "a caller whose certificate has no identity"
		                                  : "a caller without a certificate",
		              (int)(plen > 200 ? 200 : plen), p);
		return;
	}
	uint32_t max = ib->max_concurrent_calls;
	if (max) {
		/* Counted on the app service's load, shared by the workers, once
		 * (the circuit breaker's count is the same), and given back once
		 * (call.c). */
		const struct mtd_rt_service *svc = w->rt->services[ib->service];
		if (!mtd_call_count_load(call, svc->load, max)) {
			call->verdict = MTD_IN_SHED;
			mtd_mesh_count(in->mx, MTD_IN_SHED);
			if (parsed)
				mtd_call_routed(call, p, plen, rp.service_len);
			mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED,
			              "inbound %s: max_concurrent_calls (%u) calls in flight", ib->listen.text, max);
			return;
		}
	}
	call->verdict = MTD_IN_ALLOWED;
	mtd_mesh_count(in->mx, MTD_IN_ALLOWED);
	mtd_call_start(call);
}
