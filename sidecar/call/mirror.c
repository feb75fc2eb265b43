/* A call's mirror copy (mirror.percent of a services[] entry): sent once
 * the primary's request is complete, its answer dropped.
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

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "discovery/discovery.h"
#include "limit/limit.h"
#include "route/route.h"
#include "sidecar/call/call.h"
#include "sidecar/call/failback.h"
#include "sidecar/call/headers.h"
#include "sidecar/call/mirror.h"
#include "sidecar/call/policy.h"
#include "sidecar/control/runtime.h"
#include "sidecar/ops/metrics.h"
#include "sidecar/turn.h"

size_t mtd_mirror_shadow_authority(const char *in, size_t len, char *out, size_t cap)
{
	static const char suffix[] = "-shadow";
	const size_t slen = sizeof(suffix) - 1;
	const char *host = in, *end = in + len;
	/* userinfo (not allowed in HTTP/2's :authority, but harmless here). */
	for (const char *p = in; p < end; p++)
		if (*p == '@')
			host = p + 1;
	if (host == end || *host == '[')
		return 0; /* no host, or an IPv6 literal: no suffix makes a valid host */
	const char *port = memchr(host, ':', (size_t)(end - host));
	if (port && memchr(port + 1, ':', (size_t)(end - port - 1)))
		return 0; /* an IPv6 address without brackets: not a host either */
	size_t at = (size_t)((port ? port : end) - in);
	if (len + slen > cap)
		return 0;
	memcpy(out, in, at);
	memcpy(out + at, suffix, slen);
	memcpy(out + at + slen, in + at, len - at);
	return len + slen;
}

/* The copy's request headers: the primary's, :authority's host suffixed
 * -shadow (mtd_mirror_shadow_authority) so the mirror's server can tell a
 * copy from a call. Every other field as it came, credentials included
 * (docs: a mirror is trusted with them). 0, or -ENOMEM. */
static int shadow_headers(struct mtd_call *copy)
{
	struct mtd_slab *slab = &copy->w->slab;
	struct mtd_headers h = {0};
	nghttp2_nv nv;
	int rc = 0;
	for (uint32_t off = 0; rc == 0 && mtd_headers_next(&copy->req_hdrs, &off, &nv);) {
		char stack[256], *buf = stack;
		size_t n = 0, cap = nv.valuelen + 8;
		if (nv.namelen == 10 && memcmp(nv.name, ":authority", 10) == 0) {
			if (cap > sizeof(stack) && !(buf = malloc(cap))) {
				rc = -ENOMEM;
				break;
			}
			n = mtd_mirror_shadow_authority((const char *)nv.value, nv.valuelen, buf, cap);
		}
		rc = mtd_headers_add(&h, slab, nv.name, nv.namelen, n ? (const uint8_t *)buf : nv.value,
		                     n ? n : nv.valuelen, nv.flags & NGHTTP2_NV_FLAG_NO_INDEX);
		if (buf != stack)
			free(buf);
	}
	if (rc != 0) {
		mtd_headers_clear(&h, slab);
		return -ENOMEM;
	}
	mtd_headers_clear(&copy->req_hdrs, slab);
	mtd_headers_move(&copy->req_hdrs, &h, slab);
	return 0;
}

/* The mirror entry's method of the primary's :path, or NULL. */
static const struct mtd_cfg_method *mirror_method(const struct mtd_rt_service *target, const struct mtd_call *call)
{
	nghttp2_nv path_buf;
	const nghttp2_nv *path = mtd_headers_find(&call->req_hdrs, ":path", &path_buf);
	struct mtd_route_path rp;
	if (path && mtd_route_parse_path((const char *)path->value, path->valuelen, &rp) == 0)
		return mtd_cfg_service_method(target->cfg, rp.method, rp.method_len);
	return NULL;
}

static void mirror_unlink(struct mtd_call *copy)
{
	struct mtd_call *primary = copy->bg->primary;
	if (primary && primary->mirror == copy)
		primary->mirror = NULL;
	copy->bg->primary = NULL;
}

void mtd_mirror_start(struct mtd_call *call)
{
	struct mtd_worker *w = call->w;
	if (!call->svc || call->bg || !call->down || call->mirror || call->state == MTD_CALL_DONE)
		return;
	const struct mtd_cfg_service *sc = call->svc->cfg;
	if (sc->local->mirror < 0 || !mtd_policy_drawn(call, sc->local->mirror_percent))
		return;
	/* The whole request, kept from its first byte: a copy never holds
	 * the primary back, so it is made only from what is still here. */
	size_t len = call->req.len;
	if (call->committed || call->req_base != 0 || len > call->fault->replay_buffer ||
	    w->replay_bytes + len > w->rt->cfg->replay_buffer_total) {
		mtd_metrics_policy(call, MTD_MX_MIRROR_TOO_LARGE);
		MTD_DEBUG("mirror: %zu-byte request not mirrored to %s (over fault.replay_buffer %u, or not kept)", len,
		          call->hold->rt->cfg->services[sc->local->mirror].local->name, call->fault->replay_buffer);
		return;
	}
	const struct mtd_runtime *rt = call->hold->rt;
	struct mtd_rt_service *target = rt->services[sc->local->mirror];
	const struct mtd_cfg_method *m = mirror_method(target, call);
	struct mtd_rt_method *tm = m ? &target->methods[m - target->cfg->methods] : NULL;
	/* A copy is a call to the mirror entry: its rate_limit and circuit
	 * breaker apply. Over either, the copy is dropped and counted; the
	 * primary goes on as if nothing was mirrored. */
	struct mtd_rt_bucket *lim = tm && tm->limit ? tm->limit : target->limit;
	if (lim && !mtd_limit_take(&lim->b, mtd_now_ns())) {
		mtd_metrics_policy(call, MTD_MX_MIRROR_RATE_LIMITED);
		MTD_DEBUG("mirror: copy to %s dropped: over its rate_limit", target->cfg->local->name);
		return;
	}
	uint32_t max_calls = target->cfg->circuit.max_calls;
	if (max_calls && atomic_load_explicit(&target->load->calls, memory_order_relaxed) >= max_calls) {
		mtd_metrics_policy(call, MTD_MX_MIRROR_CIRCUIT_OPEN);
		MTD_DEBUG("mirror: copy to %s dropped: circuit_breaker.max_calls (%u) in flight",
		          target->cfg->local->name, max_calls);
		return;
	}
	struct mtd_call *copy = mtd_slab_calloc(&w->slab, 1, sizeof(*copy));
	struct mtd_call_bg *part = mtd_slab_calloc(&w->slab, 1, sizeof(*part));
	if (!copy || !part) {
		mtd_slab_free(&w->slab, copy);
		mtd_slab_free(&w->slab, part);
		mtd_metrics_policy(call, MTD_MX_MIRROR_NO_MEMORY);
		return;
	}
	copy->w = w;
	copy->bg = part;
	part->call = copy;
	part->mirror = true;
	LIST_INIT(&copy->attempts);
	copy->start_ns = mtd_now_ns();
	copy->mx = call->mx; /* counted as the primary's :path */
	if (mtd_failback_copy_request(copy, call) < 0 || shadow_headers(copy) < 0) {
		mtd_headers_clear(&copy->req_hdrs, &w->slab);
		mtd_bufq_clear(&copy->req);
		mtd_slab_free(&w->slab, part);
		mtd_slab_free(&w->slab, copy);
		mtd_metrics_policy(call, MTD_MX_MIRROR_NO_MEMORY);
		return;
	}
	/* Routed to the mirror entry on the primary's snapshot, which it
	 * holds (its policy points into that config); never by :path. */
	copy->hold = mtd_worker_hold_again(w, call->hold);
	copy->svc = target;
	copy->method = tm;
	copy->fault = m ? &m->fault : &target->cfg->local->fault;
	/* In flight at the mirror entry until freed, counted where every call
	 * is (the check above decided; two workers racing there may let one
	 * copy past the limit, never a primary). */
	if (max_calls)
		(void)mtd_call_count_load(copy, target->load, max_calls);
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

void mtd_mirror_primary_ended(struct mtd_call *call)
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

/* Why a copy's try failed, from its message: the call engine ends every
 * call, copies included, with a status and a message (call.c), whose
 * prefixes for the limits a copy meets are fixed there. */
static enum mtd_mx_policy drop_reason(const char *what)
{
	if (!what)
		return MTD_MX_MIRROR_FAILED;
	if (strncmp(what, "circuit breaker:", 16) == 0)
		return MTD_MX_MIRROR_CIRCUIT_OPEN;
	if (strstr(what, "too many calls waiting for a connection"))
		return MTD_MX_MIRROR_QUEUE_FULL;
	if (strncmp(what, "mirror copy: its endpoint left", 30) == 0)
		return MTD_MX_MIRROR_REROUTED;
	if (strcmp(what, "out of memory") == 0)
		return MTD_MX_MIRROR_NO_MEMORY;
	return MTD_MX_MIRROR_FAILED;
}

void mtd_mirror_dropped_at_stop(struct mtd_call *copy)
{
	if (copy->state != MTD_CALL_DONE)
		mtd_metrics_policy(copy, MTD_MX_MIRROR_SHUTDOWN);
}

void mtd_mirror_ended(struct mtd_call *copy, bool ok, const char *what)
{
	mirror_unlink(copy);
	if (ok) {
		mtd_call_settle(copy);
		return;
	}
	copy->state = MTD_CALL_DONE; /* over: later events are ignored */
	mtd_metrics_policy(copy, drop_reason(what));
	MTD_DEBUG("mirror: copy to %s failed: %s", copy->svc ? copy->svc->cfg->local->name : "?", what);
}
