/* The attempt as the owner of an upstream stream (io/stream-t.h): the
 * request it opens on a connection, and the pool's and the stream's
 * events handed to the attempt's interface (attempt.h). The only way
 * io/ reaches a call. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "core/clock.h"
#include "sidecar/call/attempt.h"
#include "sidecar/call/call.h"
#include "sidecar/call/headers.h"
#include "sidecar/call/mirror.h"
#include "sidecar/call/trace.h"
#include "sidecar/control/runtime-t.h"
#include "sidecar/io/conn.h"
#include "sidecar/io/pool.h"
#include "sidecar/io/upstream.h"
#include "sidecar/turn.h"

static struct mtd_attempt *owner(struct mtd_up_stream *s)
{
	return MTD_CONTAINER_OF(s, struct mtd_attempt, s);
}

/* Hop-by-hop fields never cross the proxy (RFC 9113 §8.2.2); grpc-timeout is
 * replaced with the time left. */
static bool skip_request_header(const nghttp2_nv *nv)
{
	switch (nv->namelen) {
	case 2:
		return memcmp(nv->name, "te", 2) == 0; /* re-added as "trailers" */
	case 4:
		return memcmp(nv->name, "host", 4) == 0;
	case 7:
		return memcmp(nv->name, ":scheme", 7) == 0 || mtd_headers_hop_by_hop(nv);
	case 12:
		return memcmp(nv->name, "grpc-timeout", 12) == 0;
	default:
		return mtd_headers_hop_by_hop(nv);
	}
}

/* What tracing replaces (the call's context, mtd_call_trace_of). */
static bool trace_header(const nghttp2_nv *nv)
{
	return (nv->namelen == 11 && memcmp(nv->name, "traceparent", 11) == 0) ||
	       (nv->namelen == 10 && memcmp(nv->name, "tracestate", 10) == 0);
}

#define NV_LIT(n, v)                                                                 \
	{                                                                            \
		(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, sizeof(v) - 1,        \
		        NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE \
	}

static int st_submit(struct mtd_up_stream *s, struct mtd_conn *c)
{
	struct mtd_attempt *a = owner(s);
	struct mtd_call *call = a->call;
	const struct mtd_headers *h = &call->req_hdrs;
	nghttp2_nv stack_nv[MTD_STACK_NV];
	nghttp2_nv *nva = mtd_nv_room(stack_nv, h->n + 6);
	if (!nva)
		return -ENOMEM;
	size_t n = 0;
	nghttp2_nv scheme = NV_LIT(":scheme", "http");
	if (c->ssl)
		scheme = (nghttp2_nv)NV_LIT(":scheme", "https");
	/* :authority: the app's unless the service overrides it. A mirror
	 * copy's override is marked -shadow too (the app's was, in
	 * mirror.c): the mirror's server tells copies from calls whatever
	 * the mirror entry's `authority` says. Copied by nghttp2 then. */
	const char *auth = mtd_pool_authority(c->pool, true);
	char shadow[320]; /* a host name (253) and a port, suffixed */
	size_t auth_len = auth ? strlen(auth) : 0;
	uint8_t auth_flags = NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE;
	if (auth && call->bg && call->bg->mirror) {
		size_t len = mtd_mirror_shadow_authority(auth, auth_len, shadow, sizeof(shadow));
		if (len > 0) {
			auth = shadow;
			auth_len = len;
			auth_flags = NGHTTP2_NV_FLAG_NO_COPY_NAME;
		}
	}
	nghttp2_nv authority = {(uint8_t *)":authority", (uint8_t *)(uintptr_t)auth, 10, auth_len, auth_flags};
	/* Pseudo-headers first (RFC 9113 §8.3). The block has them first
	 * already (nghttp2 refuses a request with one after a regular field),
	 * so one walk: the override and :scheme go where the regular fields
	 * begin. */
	/* Tracing: the app's traceparent (and tracestate) are replaced by
	 * the call's (trace.h). */
	struct mtd_call_trace tr;
	bool traced = mtd_call_trace_of(call, &tr);
	if (traced && !tr.sampled)
		call->trace_unsampled = true; /* its ends need not derive it again */
	nghttp2_nv f;
	bool regular = false;
	for (uint32_t off = 0; mtd_headers_next(h, &off, &f);) {
		if (!regular && f.name[0] != ':') {
			if (auth)
				nva[n++] = authority;
			nva[n++] = scheme;
			regular = true;
		}
		if (skip_request_header(&f) ||
		    (auth && !regular && f.namelen == 10 && memcmp(f.name, ":authority", 10) == 0) ||
		    (traced && trace_header(&f)))
			continue;
		nva[n++] = f;
	}
	if (!regular) {
		if (auth)
			nva[n++] = authority;
		nva[n++] = scheme;
	}
	nva[n++] = (nghttp2_nv)NV_LIT("te", "trailers");
	char tpbuf[MTD_TRACEPARENT_LEN];
	if (traced) {
		/* Never indexed: it differs on every call (as grpc-timeout). */
		mtd_call_trace_parent_header(&tr, tpbuf);
		nva[n++] = (nghttp2_nv){(uint8_t *)"traceparent", (uint8_t *)tpbuf, 11, sizeof(tpbuf),
		                        NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_INDEX};
		/* The app's one field lives as long as the call; fields joined
		 * live on this stack (trace.h): nghttp2 copies those. */
		if (tr.state)
			nva[n++] = (nghttp2_nv){(uint8_t *)"tracestate", (uint8_t *)(uintptr_t)tr.state, 10,
			                        tr.state_len,
			                        NGHTTP2_NV_FLAG_NO_COPY_NAME |
			                                (tr.state == (const uint8_t *)tr.joined ? 0 : NGHTTP2_NV_FLAG_NO_COPY_VALUE)};
	}
	char tbuf[MTD_GRPC_TIMEOUT_BUFLEN], abuf[12];
	int64_t per_try = call->fault->per_try_timeout_ms * 1000000;
	/* The exact clock, not the turn's: the time left forwarded must not
	 * be more than is left. Read only for a call with a bound. */
	int64_t now = call->deadline_ns || per_try > 0 ? mtd_now_ns() : 0;
	int64_t left = call->deadline_ns ? call->deadline_ns - now : INT64_MAX;
	/* The attempt's own bound as its timer counts it (armed from the exact
	 * clock at its pick, mtd_attempt_new), not per_try from a->start_ns:
	 * that is the turn's clock, early by the turn's work before the pick. */
	if (per_try > 0 && mtd_timer_armed(&a->timer) && a->timer.at_ns - now < left)
		left = a->timer.at_ns - now;
	if (left != INT64_MAX) {
		/* PROTOCOL-HTTP2: forward the time remaining, not the original;
		 * it shrinks with each attempt. Never indexed (RFC 7541 §6.2.3):
		 * the value differs on every call, so each one indexed would only
		 * evict the request's stable fields from the upstream's HPACK
		 * table; measured 35,800 -> 32,850 instructions per call with a
		 * client deadline (bench/proxy/README.md, "Calls with a deadline"). */
		size_t tl = mtd_grpc_timeout_format(left > 0 ? left : 1, tbuf);
		nva[n++] = (nghttp2_nv){(uint8_t *)"grpc-timeout", (uint8_t *)tbuf, 12, tl,
		                        NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_INDEX};
	}
	if (a->index > 0) {
		/* gRPC A6: how many attempts came before this one. */
		int al = snprintf(abuf, sizeof(abuf), "%u", a->index);
		nva[n++] = (nghttp2_nv){(uint8_t *)"grpc-previous-rpc-attempts", (uint8_t *)abuf, 26, (size_t)al,
		                        NGHTTP2_NV_FLAG_NO_COPY_NAME};
	}
	nghttp2_data_provider prd = {.source.ptr = a, .read_callback = mtd_call_read_req};
	bool body = !call->req_eof || call->req.len > 0 || call->req_base > 0;
	int rc = mtd_up_open_stream(c, &a->s, nva, n, body ? &prd : NULL);
	mtd_nv_release(nva, stack_nv);
	return rc;
}

static void st_on_stream(struct mtd_up_stream *s)
{
	mtd_attempt_on_stream(owner(s));
}

static void st_on_wait_end(struct mtd_up_stream *s, enum mtd_up_wait_end why, const char *reason)
{
	struct mtd_attempt *a = owner(s);
	switch (why) {
	case MTD_UP_CONNECT_FAILED:
		mtd_attempt_connect_failed(a, reason);
		break;
	case MTD_UP_RETIRED:
		mtd_call_reroute(a);
		break;
	case MTD_UP_STOPPING:
		mtd_call_fail(a->call, MTD_GRPC_UNAVAILABLE, "maitred is shutting down");
		break;
	case MTD_UP_NO_STREAM:
		mtd_call_fail(a->call, MTD_GRPC_INTERNAL, "%s", reason);
		break;
	}
}

static int st_on_field(struct mtd_up_stream *s, const uint8_t *name, size_t nlen, const uint8_t *value, size_t vlen,
                       uint8_t flags)
{
	struct mtd_attempt *a = owner(s);
	struct mtd_call *call = a->call;
	/* After the response headers, a HEADERS block is the trailers. */
	struct mtd_headers *h = a->resp_headers_in ? &a->resp_trailers : &a->resp_hdrs;
	if (mtd_headers_size(h) + nlen + vlen + 32 > call->w->rt->cfg->downstream.max_header_list_size) {
		if (a->state == MTD_ATTEMPT_OPEN || a == call->ans)
			mtd_call_fail(call, MTD_GRPC_INTERNAL, "upstream %s: response header list too large",
			              s->conn->peer);
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	}
	if (mtd_headers_add(h, &call->w->slab, name, nlen, value, vlen, flags & NGHTTP2_NV_FLAG_NO_INDEX) < 0)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	/* Whether the answer is gRPC's is seen as its field goes by, not
	 * looked up again: PROTOCOL-HTTP2's "application/grpc" [("+proto" /
	 * "+json" / {custom})]. */
	if (!a->resp_headers_in && nlen == 12 && memcmp(name, "content-type", 12) == 0)
		a->resp_grpc = vlen >= 16 && memcmp(value, "application/grpc", 16) == 0 &&
		               (vlen == 16 || value[16] == '+' || value[16] == ';');
	return 0;
}

static void st_on_headers(struct mtd_up_stream *s, bool end_stream)
{
	struct mtd_attempt *a = owner(s);
	if (a->resp_headers_in) {
		mtd_attempt_on_resp_trailers(a);
		return;
	}
	nghttp2_nv buf;
	const nghttp2_nv *st = mtd_headers_find(&a->resp_hdrs, ":status", &buf);
	/* RFC 9110 §15.2: 1xx are interim; the real response follows. */
	if (st && st->valuelen == 3 && st->value[0] == '1') {
		mtd_headers_clear(&a->resp_hdrs, &a->call->w->slab);
		a->resp_grpc = false;
		return;
	}
	mtd_attempt_on_resp_headers(a, end_stream);
}

static void st_on_data(struct mtd_up_stream *s, const uint8_t *p, size_t n)
{
	mtd_attempt_on_resp_data(owner(s), p, n);
}

static void st_on_trailers(struct mtd_up_stream *s)
{
	mtd_attempt_on_resp_trailers(owner(s));
}

static void st_on_close(struct mtd_up_stream *s, uint32_t error_code, const char *lost)
{
	struct mtd_attempt *a = owner(s);
	struct mtd_call *call = a->call;
	/* Bytes still queued for the client gave the connection window back
	 * when they arrived (mtd_relay_data); the stream's goes with it. */
	if (a == call->ans)
		call->resp_unconsumed = 0;
	if (lost)
		mtd_attempt_conn_lost(a, lost);
	else
		mtd_attempt_on_up_close(a, error_code);
}

static int st_send_data(struct mtd_up_stream *s, const uint8_t *framehd, size_t n, void *src)
{
	return mtd_call_send_req(framehd, n, src, s->conn);
}

const struct mtd_up_stream_ops mtd_attempt_stream_ops = {
        .submit = st_submit,
        .on_stream = st_on_stream,
        .on_wait_end = st_on_wait_end,
        .on_field = st_on_field,
        .on_headers = st_on_headers,
        .on_data = st_on_data,
        .on_trailers = st_on_trailers,
        .on_close = st_on_close,
        .send_data = st_send_data,
};

void mtd_attempt_resume(struct mtd_attempt *a)
{
	if (!a->s.conn || !a->req_deferred)
		return;
	a->req_deferred = false;
	mtd_conn_resume(a->s.conn, a->s.sid, "request");
}
