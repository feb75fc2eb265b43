/* A call: one gRPC request relayed from a downstream stream to an upstream
 * stream, and its response back.
 *
 *   HEADERS --route+pick--> PENDING --stream slot--> OPEN --trailers--> DONE
 *      |  \--hash on a message field--> WAIT_KEY --first message--/ |
 *      +----------- any failure: a gRPC status to the client -------+
 *
 * The call is referenced by its downstream stream (call->down) and its
 * upstream stream (call->up) and by the pool while PENDING. It is freed when
 * none of the three holds it (mtd_call_maybe_free), always from a stream
 * close or a failure path, never while nghttp2 still has its pointer.
 *
 * Bytes flow without whole-message buffering: DATA received on one side is
 * queued (struct mtd_bufq) and the window on that side is only reopened
 * (nghttp2_session_consume) once the other side's session took the bytes.
 * So a slow reader on one side stops the writer on the other, and what a
 * call holds is bounded by the stream window in each direction. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "pbwire/pbwire.h"
#include "sidecar/sidecar.h"

/* How much of the first request message we read to find a hash-key field:
 * bounded look-ahead (the key is expected near the start of the message). */
#define KEY_LOOKAHEAD MTD_PBWIRE_DEFAULT_LOOKAHEAD

/* ---- header storage ---------------------------------------------------- */

/* Until mtd_headers_finish() the nv name/value fields hold offsets into
 * h->mem (which may move while growing); finish turns them into pointers. */
int mtd_headers_add(struct mtd_headers *h, const uint8_t *name, size_t nlen, const uint8_t *value, size_t vlen)
{
	/* Start small: a gRPC response's headers and trailers are 2 or 3
	 * fields, and a call holds three blocks for its whole life (issue 6:
	 * 16 fields and 512 bytes each were 4.7 KiB per call in flight). */
	if (h->n == h->cap) {
		size_t cap = h->cap ? h->cap * 2 : 6;
		nghttp2_nv *nv = mtd_slab_realloc(h->slab, h->nv, cap * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		h->nv = nv;
		h->cap = cap;
	}
	size_t need = nlen + vlen + 2;
	if (h->mem_cap - h->mem_len < need) {
		size_t cap = h->mem_cap ? h->mem_cap : 128;
		while (cap - h->mem_len < need)
			cap *= 2;
		uint8_t *mem = mtd_slab_realloc(h->slab, h->mem, cap);
		if (!mem)
			return -ENOMEM;
		h->mem = mem;
		h->mem_cap = cap;
	}
	size_t noff = h->mem_len;
	memcpy(h->mem + noff, name, nlen);
	h->mem[noff + nlen] = 0;
	size_t voff = noff + nlen + 1;
	memcpy(h->mem + voff, value, vlen);
	h->mem[voff + vlen] = 0;
	h->mem_len = voff + vlen + 1;
	h->nv[h->n++] = (nghttp2_nv){(uint8_t *)(uintptr_t)noff, (uint8_t *)(uintptr_t)voff, nlen, vlen,
	                             NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE};
	return 0;
}

void mtd_headers_finish(struct mtd_headers *h)
{
	for (size_t i = 0; i < h->n; i++) {
		h->nv[i].name = h->mem + (uintptr_t)h->nv[i].name;
		h->nv[i].value = h->mem + (uintptr_t)h->nv[i].value;
	}
}

void mtd_headers_clear(struct mtd_headers *h)
{
	struct mtd_slab *slab = h->slab;
	mtd_slab_free(slab, h->nv);
	mtd_slab_free(slab, h->mem);
	memset(h, 0, sizeof(*h));
	h->slab = slab;
}

const nghttp2_nv *mtd_headers_find(const struct mtd_headers *h, const char *name)
{
	size_t len = strlen(name);
	for (size_t i = 0; i < h->n; i++)
		if (h->nv[i].namelen == len && memcmp(h->nv[i].name, name, len) == 0)
			return &h->nv[i];
	return NULL;
}

/* ---- lifetime ---------------------------------------------------------- */

static void report_outcome(struct mtd_call *call, bool ok)
{
	if (call->outcome_reported || call->ep_idx < 0)
		return;
	call->outcome_reported = true;
	int64_t now = mtd_now_ns();
	struct mtd_lb_result res = {.ok = ok, .latency_us = (now - call->start_ns) / 1000};
	mtd_lb_call_end(call->picker, (size_t)call->ep_idx, &res, now);
}

void mtd_call_maybe_free(struct mtd_call *call)
{
	if (call->down || call->up || call->state == MTD_CALL_PENDING)
		return;
	if (call->deadline_armed)
		event_del(&call->deadline_ev);
	report_outcome(call, call->up_ok);
	mtd_bufq_clear(&call->req);
	mtd_bufq_clear(&call->resp);
	mtd_headers_clear(&call->req_hdrs);
	mtd_headers_clear(&call->resp_hdrs);
	mtd_headers_clear(&call->resp_trailers);
	free(call->key_msg);
	free(call->key_copy);
	free(call->tried);
	free(call->last_failure);
	call->w->n_calls--;
	mtd_slab_free(&call->w->slab, call);
}

/* ---- failures ---------------------------------------------------------- */

#define NV_LIT(n, v)                                                                 \
	{                                                                            \
		(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, sizeof(v) - 1,        \
		        NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE \
	}

/* Replace resp_trailers with grpc-status/grpc-message of our own. */
static int synth_trailers(struct mtd_headers *h, bool with_status_line, enum mtd_grpc_status status, const char *msg)
{
	char code[8], enc[512];
	int clen = snprintf(code, sizeof(code), "%d", (int)status);
	size_t elen = mtd_grpc_message_encode(msg, enc, sizeof(enc));
	mtd_headers_clear(h);
	int rc = 0;
	if (with_status_line) {
		rc |= mtd_headers_add(h, (const uint8_t *)":status", 7, (const uint8_t *)"200", 3);
		rc |= mtd_headers_add(h, (const uint8_t *)"content-type", 12, (const uint8_t *)"application/grpc", 16);
	}
	rc |= mtd_headers_add(h, (const uint8_t *)"grpc-status", 11, (const uint8_t *)code, (size_t)clen);
	rc |= mtd_headers_add(h, (const uint8_t *)"grpc-message", 12, (const uint8_t *)enc, elen);
	mtd_headers_finish(h);
	return rc ? -ENOMEM : 0;
}

static void drop_request_bytes(struct mtd_call *call)
{
	mtd_bufq_clear(&call->req);
	if (call->down && call->req_unconsumed) {
		nghttp2_session_consume(call->down->ng, call->down_sid, call->req_unconsumed);
		mtd_conn_want_flush(call->down);
	}
	call->req_unconsumed = 0;
}

static void drop_response_bytes(struct mtd_call *call)
{
	mtd_bufq_clear(&call->resp);
	if (call->up && call->resp_unconsumed) {
		nghttp2_session_consume(call->up->ng, call->up_sid, call->resp_unconsumed);
		mtd_conn_want_flush(call->up);
	}
	call->resp_unconsumed = 0;
}

static void reset_upstream(struct mtd_call *call)
{
	if (!call->up)
		return;
	/* Cancellation reaches the upstream (PROTOCOL-HTTP2: RST_STREAM CANCEL). */
	nghttp2_submit_rst_stream(call->up->ng, NGHTTP2_FLAG_NONE, call->up_sid, NGHTTP2_CANCEL);
	mtd_conn_want_flush(call->up);
}

void mtd_call_fail(struct mtd_call *call, enum mtd_grpc_status status, const char *fmt, ...)
{
	if (call->resp_done || call->resp_eof)
		return;
	char msg[384];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (mtd_log_enabled(MTD_LOG_DEBUG)) {
		const nghttp2_nv *path = mtd_headers_find(&call->req_hdrs, ":path");
		MTD_DEBUG("call %.*s: %s: %s", path ? (int)path->valuelen : 1, path ? (const char *)path->value : "?",
		          mtd_grpc_status_name(status), msg);
	}
	mtd_pool_dequeue(call);
	if (call->deadline_armed) {
		event_del(&call->deadline_ev);
		call->deadline_armed = false;
	}
	call->state = MTD_CALL_DONE;
	report_outcome(call, false);
	reset_upstream(call);
	drop_request_bytes(call);
	drop_response_bytes(call);
	call->resp_eof = true;
	if (!call->down) {
		call->resp_done = true;
		mtd_call_maybe_free(call);
		return;
	}
	if (!call->resp_headers_sent) {
		/* PROTOCOL-HTTP2 Trailers-Only: one HEADERS frame, END_STREAM. */
		struct mtd_headers *h = &call->resp_trailers;
		if (synth_trailers(h, true, status, msg) < 0) {
			nghttp2_submit_rst_stream(call->down->ng, NGHTTP2_FLAG_NONE, call->down_sid,
			                          NGHTTP2_INTERNAL_ERROR);
		} else {
			/* No RST_STREAM(NO_ERROR) after it even if the client is still
			 * sending (RFC 9113 §8.1 allows one): gRPC C-core turns it into
			 * INTERNAL, hiding our status. Its DATA is dropped instead. */
			nghttp2_submit_response(call->down->ng, call->down_sid, h->nv, h->n, NULL);
		}
		call->resp_headers_sent = true;
		call->resp_done = true;
	} else {
		/* Headers went out already: end with trailers carrying the status
		 * once the data provider runs dry (it is, we dropped the bytes). */
		if (synth_trailers(&call->resp_trailers, false, status, msg) < 0) {
			nghttp2_submit_rst_stream(call->down->ng, NGHTTP2_FLAG_NONE, call->down_sid,
			                          NGHTTP2_INTERNAL_ERROR);
			call->resp_done = true;
		}
		mtd_down_resume(call);
	}
	mtd_conn_want_flush(call->down);
}

static void deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_call *call = arg;
	call->deadline_armed = false;
	mtd_call_fail(call, MTD_GRPC_DEADLINE_EXCEEDED, "deadline exceeded (%lld ms)",
	              (long long)((call->deadline_ns - call->start_ns) / 1000000));
}

/* ---- picking ----------------------------------------------------------- */

static void pick_and_enqueue(struct mtd_call *call, const uint8_t *key, size_t key_len)
{
	const struct mtd_rt_service *svc = call->svc;
	if (!key && call->hash_key && call->hash_key->kind != MTD_CFG_HASH_NONE && call->hash_key->fail_on_missing) {
		mtd_call_fail(call, MTD_GRPC_INVALID_ARGUMENT, "hash key %s is missing from the call",
		              call->hash_key->kind == MTD_CFG_HASH_HEADER ? call->hash_key->header : "field");
		return;
	}
	if (svc->n_eps > 64 && !call->tried) {
		call->tried = calloc((svc->n_eps + 63) / 64, sizeof(*call->tried));
		if (!call->tried) {
			mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
			return;
		}
	}
	uint64_t *bits = call->tried ? call->tried : &call->tried_inline;
	struct mtd_lb_pick_ctx ctx = {
	        .key = key,
	        .key_len = key_len,
	        .now_ms = mtd_wall_ms(),
	        .now_ns = mtd_now_ns(),
	        .worker = call->w->id,
	        .rng = &call->w->rng,
	};
	/* Endpoints whose pool is backing off after failed connects are
	 * skipped while another is eligible; if none is, the first one skipped
	 * is tried anyway (it may be back). */
	int idx, skipped = -1;
	struct mtd_pool *p;
	for (;;) {
		ctx.excluded = call->n_tried ? bits : NULL;
		idx = mtd_lb_pick(call->picker, &ctx);
		if (idx < 0 && skipped >= 0) {
			idx = skipped;
			bits[idx / 64] &= ~(1ull << (idx % 64));
			call->n_tried--;
		}
		if (idx < 0)
			break;
		p = mtd_pool_get(call->w, svc, &svc->eps[idx]);
		if (!p) {
			mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
			return;
		}
		if (idx == skipped || !mtd_pool_backing_off(p, ctx.now_ns))
			break;
		if (skipped < 0)
			skipped = idx;
		bits[idx / 64] |= 1ull << (idx % 64);
		call->n_tried++;
	}
	if (skipped >= 0 && idx != skipped) {
		/* Not a failure of this call: forget the skip. */
		bits[skipped / 64] &= ~(1ull << (skipped % 64));
		call->n_tried--;
	}
	if (idx < 0) {
		if (call->n_tried)
			mtd_call_fail(call, MTD_GRPC_UNAVAILABLE, "%s (and no other endpoint of %s is left)",
			              call->last_failure ? call->last_failure : "every endpoint failed",
			              svc->cfg->name);
		else
			mtd_call_fail(call, MTD_GRPC_UNAVAILABLE, "no endpoint available for service %s",
			              svc->cfg->name);
		return;
	}
	if (key && !call->key_copy && svc->n_eps > 1) {
		/* A re-pick after a failed connect hashes the same key. */
		call->key_copy = malloc(key_len ? key_len : 1);
		if (call->key_copy) {
			memcpy(call->key_copy, key, key_len);
			call->key_copy_len = key_len;
		}
	}
	call->ep_idx = idx;
	call->ep = &svc->eps[idx];
	mtd_lb_call_begin(call->picker, (size_t)idx);
	mtd_pool_enqueue(p, call);
}

void mtd_call_retry_elsewhere(struct mtd_call *call, const char *reason)
{
	if (call->resp_done || call->resp_eof || call->ep_idx < 0)
		return;
	/* gRPC transparent retry: the call never reached an upstream, so every
	 * request byte is still queued here and another endpoint can take it
	 * (the pick avoids the ones tried, STYLE.md: nginx `tried`). */
	report_outcome(call, false);
	call->outcome_reported = false;
	uint64_t *bits = call->tried ? call->tried : &call->tried_inline;
	bits[call->ep_idx / 64] |= 1ull << (call->ep_idx % 64);
	call->n_tried++;
	free(call->last_failure);
	call->last_failure = strdup(reason);
	MTD_DEBUG("call: %s; trying another endpoint", reason);
	call->ep_idx = -1;
	call->ep = NULL;
	call->state = MTD_CALL_HEADERS;
	pick_and_enqueue(call, call->key_copy, call->key_copy_len);
}

static void pick_with_field_key(struct mtd_call *call)
{
	const struct mtd_cfg_hash_key *hk = call->hash_key;
	struct mtd_pbwire_value v;
	/* What was captured is the whole message or its look-ahead prefix; a
	 * compressed message cannot be read: its key counts as absent. */
	if (call->key_msg && !call->key_compressed &&
	    mtd_pbwire_find(call->key_msg, call->key_msg_have, true, hk->field_path, hk->field_depth, &v) == 1) {
		char num[MTD_PBWIRE_NUMBUF];
		const uint8_t *key;
		size_t len = mtd_pbwire_key_bytes(&v, num, &key);
		pick_and_enqueue(call, key, len);
		return;
	}
	pick_and_enqueue(call, NULL, 0);
}

static void capture_first_message(void *arg, uint32_t msg_len, uint32_t off, const uint8_t *p, size_t n)
{
	struct mtd_call *call = arg;
	/* The look-ahead must fit in the stream window, which stays closed
	 * until the pick is made (else the call would wait forever). */
	uint32_t limit = call->w->rt->cfg->downstream.initial_window_size / 2;
	if (limit > KEY_LOOKAHEAD)
		limit = KEY_LOOKAHEAD;
	uint32_t want = msg_len < limit ? msg_len : limit;
	call->key_compressed = call->req_scan.hdr[0] == 1;
	if (call->key_ready)
		return;
	if (!call->key_msg && want > 0) {
		call->key_msg = malloc(want);
		if (!call->key_msg) {
			call->key_ready = true; /* out of memory: the key is "absent" */
			return;
		}
	}
	if (off < want) {
		size_t k = n < want - off ? n : want - off;
		memcpy(call->key_msg + off, p, k);
		call->key_msg_have = off + (uint32_t)k;
	}
	if (call->key_msg_have >= want)
		call->key_ready = true; /* the message, or its look-ahead, is here */
}

/* ---- request ----------------------------------------------------------- */

static struct mtd_lb_picker *route(struct mtd_call *call, const struct mtd_route_path *rp)
{
	const struct mtd_runtime *rt = call->w->rt;
	int si = mtd_route_lookup(rt->routes, rp->service, rp->service_len);
	if (si < 0)
		return NULL;
	call->svc = &rt->services[si];
	const struct mtd_cfg_service *sc = call->svc->cfg;
	const struct mtd_cfg_method *m = mtd_cfg_service_method(sc, rp->method, rp->method_len);
	if (m) {
		call->hash_key = &m->hash_key;
		return call->svc->methods[m - sc->methods].picker;
	}
	call->hash_key = &sc->hash_key;
	return call->svc->picker;
}

void mtd_call_start(struct mtd_call *call)
{
	const nghttp2_nv *path = mtd_headers_find(&call->req_hdrs, ":path");
	struct mtd_route_path rp;
	if (!path || mtd_route_parse_path((const char *)path->value, path->valuelen, &rp) < 0) {
		mtd_call_fail(call, MTD_GRPC_UNIMPLEMENTED, "malformed gRPC path \"%.*s\"",
		              path ? (int)(path->valuelen > 200 ? 200 : path->valuelen) : 0,
		              path ? (const char *)path->value : "");
		return;
	}
	call->picker = route(call, &rp);
	if (!call->picker) {
		mtd_call_fail(call, MTD_GRPC_UNIMPLEMENTED, "unknown service %.*s: no route in maitred's config",
		              (int)(rp.service_len > 200 ? 200 : rp.service_len), rp.service);
		return;
	}
	const nghttp2_nv *tmo = mtd_headers_find(&call->req_hdrs, "grpc-timeout");
	if (tmo) {
		int64_t ns;
		if (mtd_grpc_timeout_parse((const char *)tmo->value, tmo->valuelen, &ns) < 0) {
			mtd_call_fail(call, MTD_GRPC_INTERNAL, "malformed grpc-timeout \"%.*s\"",
			              (int)(tmo->valuelen > 32 ? 32 : tmo->valuelen), (const char *)tmo->value);
			return;
		}
		if (ns <= 0) {
			mtd_call_fail(call, MTD_GRPC_DEADLINE_EXCEEDED, "deadline exceeded before the call started");
			return;
		}
		/* Far deadlines (beyond ~100 days) are as good as none. */
		if (ns < (int64_t)100 * 86400 * 1000000000) {
			call->deadline_ns = call->start_ns + ns;
			struct timeval tv = {(time_t)(ns / 1000000000), (suseconds_t)(ns % 1000000000 / 1000)};
			evtimer_assign(&call->deadline_ev, call->w->base, deadline_cb, call);
			evtimer_add(&call->deadline_ev, &tv);
			call->deadline_armed = true;
		}
	}
	const struct mtd_cfg_hash_key *hk = call->hash_key;
	if (hk->kind == MTD_CFG_HASH_FIELD) {
		/* Hashing a message field: the pick waits for the first message
		 * (or its first KEY_LOOKAHEAD bytes). */
		call->state = MTD_CALL_WAIT_KEY;
		if (call->req_eof)
			pick_with_field_key(call);
		return;
	}
	if (hk->kind == MTD_CFG_HASH_HEADER) {
		const nghttp2_nv *v = mtd_headers_find(&call->req_hdrs, hk->header);
		pick_and_enqueue(call, v ? v->value : NULL, v ? v->valuelen : 0);
		return;
	}
	pick_and_enqueue(call, NULL, 0);
}

void mtd_call_on_req_data(struct mtd_call *call, const uint8_t *p, size_t n)
{
	struct mtd_conn *down = call->down;
	uint32_t max = call->w->rt->cfg->downstream.max_message_size;
	bool waiting = call->state == MTD_CALL_WAIT_KEY;
	int rc = mtd_grpc_scan(&call->req_scan, p, n, max, waiting ? capture_first_message : NULL, call);
	if (rc == MTD_GRPC_SCAN_TOO_BIG) {
		nghttp2_session_consume(down->ng, call->down_sid, n);
		mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "request message larger than the limit of %u bytes",
		              max);
		return;
	}
	if (rc < 0) {
		nghttp2_session_consume(down->ng, call->down_sid, n);
		mtd_call_fail(call, MTD_GRPC_INTERNAL, "malformed gRPC message prefix in the request");
		return;
	}
	if (call->state == MTD_CALL_OPEN && !call->up) {
		/* The upstream already finished (it answered before reading the
		 * whole request): nobody will read these bytes. */
		nghttp2_session_consume(down->ng, call->down_sid, n);
		return;
	}
	if (mtd_bufq_append(&call->req, p, n) < 0) {
		nghttp2_session_consume(down->ng, call->down_sid, n);
		mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	call->req_unconsumed += n;
	if (waiting && (call->key_ready || call->req_scan.messages > 1))
		pick_with_field_key(call);
	mtd_up_resume(call);
}

void mtd_call_on_req_end(struct mtd_call *call)
{
	call->req_eof = true;
	if (call->state == MTD_CALL_WAIT_KEY)
		pick_with_field_key(call);
	mtd_up_resume(call);
}

ssize_t mtd_call_read_req(nghttp2_session *s, int32_t sid, uint8_t *buf, size_t len, uint32_t *flags,
                          nghttp2_data_source *src, void *ud)
{
	struct mtd_call *call = src->ptr;
	size_t n = mtd_bufq_read(&call->req, buf, len);
	if (n > 0 && call->down) {
		/* Reopen the client's window only for what went upstream. */
		nghttp2_session_consume(call->down->ng, call->down_sid, n);
		mtd_conn_want_flush(call->down);
	}
	call->req_unconsumed -= n < call->req_unconsumed ? n : call->req_unconsumed;
	if (call->req.len == 0 && call->req_eof) {
		*flags |= NGHTTP2_DATA_FLAG_EOF;
		return (ssize_t)n;
	}
	if (n == 0) {
		call->req_deferred = true;
		return NGHTTP2_ERR_DEFERRED;
	}
	return (ssize_t)n;
}

void mtd_call_on_down_close(struct mtd_call *call, uint32_t error_code)
{
	if (call->req_unconsumed) {
		/* The stream is gone; its connection window is not. */
		mtd_bufq_clear(&call->req);
		call->req_unconsumed = 0;
	}
	if (!call->resp_done) {
		/* The client cancelled (RST_STREAM) or went away. */
		MTD_DEBUG("call: client ended the stream (%s)", nghttp2_http2_strerror(error_code));
		mtd_pool_dequeue(call);
		if (call->deadline_armed) {
			event_del(&call->deadline_ev);
			call->deadline_armed = false;
		}
		call->state = MTD_CALL_DONE;
		call->resp_done = true;
		reset_upstream(call);
		drop_response_bytes(call);
	}
	mtd_call_maybe_free(call);
}

/* ---- response ---------------------------------------------------------- */

/* Hop-by-hop fields are not forwarded (RFC 9113 §8.2.2). */
static bool skip_response_header(const nghttp2_nv *nv)
{
	switch (nv->namelen) {
	case 7:
		return memcmp(nv->name, "upgrade", 7) == 0;
	case 10:
		return memcmp(nv->name, "connection", 10) == 0 || memcmp(nv->name, "keep-alive", 10) == 0;
	case 16:
		return memcmp(nv->name, "proxy-connection", 16) == 0;
	case 17:
		return memcmp(nv->name, "transfer-encoding", 17) == 0;
	default:
		return false;
	}
}

static size_t filter_response(const struct mtd_headers *h, nghttp2_nv *out)
{
	size_t n = 0;
	for (size_t i = 0; i < h->n; i++)
		if (!skip_response_header(&h->nv[i]))
			out[n++] = h->nv[i];
	return n;
}

void mtd_call_on_resp_headers(struct mtd_call *call, bool end_stream)
{
	call->resp_headers_in = true;
	if (call->resp_done || call->resp_eof || !call->down)
		return;
	nghttp2_nv stack_nv[32];
	nghttp2_nv *nva = call->resp_hdrs.n <= 32 ? stack_nv : malloc(call->resp_hdrs.n * sizeof(*nva));
	if (!nva) {
		mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	size_t n = filter_response(&call->resp_hdrs, nva);
	nghttp2_data_provider prd = {.source.ptr = call, .read_callback = mtd_call_read_resp};
	if (end_stream) {
		/* Trailers-Only from the upstream stays Trailers-Only. */
		call->resp_eof = true;
		call->resp_done = true;
		call->up_ok = mtd_headers_find(&call->resp_hdrs, "grpc-status") != NULL;
		call->state = MTD_CALL_DONE;
	}
	nghttp2_submit_response(call->down->ng, call->down_sid, nva, n, end_stream ? NULL : &prd);
	call->resp_headers_sent = true;
	if (nva != stack_nv)
		free(nva);
	mtd_conn_want_flush(call->down);
}

void mtd_call_on_resp_data(struct mtd_call *call, const uint8_t *p, size_t n)
{
	struct mtd_conn *up = call->up;
	uint32_t max = call->w->rt->cfg->downstream.max_message_size;
	int rc = mtd_grpc_scan(&call->resp_scan, p, n, max, NULL, NULL);
	if (rc < 0) {
		nghttp2_session_consume(up->ng, call->up_sid, n);
		if (rc == MTD_GRPC_SCAN_TOO_BIG)
			mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED,
			              "response message from %s larger than the limit of %u bytes", up->peer, max);
		else
			mtd_call_fail(call, MTD_GRPC_INTERNAL, "malformed gRPC message prefix from %s", up->peer);
		return;
	}
	if (!call->down || mtd_bufq_append(&call->resp, p, n) < 0) {
		nghttp2_session_consume(up->ng, call->up_sid, n);
		if (call->down)
			mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	call->resp_unconsumed += n;
	mtd_down_resume(call);
}

void mtd_call_on_resp_trailers(struct mtd_call *call)
{
	if (call->resp_done || call->resp_eof)
		return;
	if (call->resp_trailers.n == 0 || !mtd_headers_find(&call->resp_trailers, "grpc-status")) {
		/* PROTOCOL-HTTP2: a response ends with grpc-status. */
		const char *peer = call->up ? call->up->peer : "upstream";
		char msg[160];
		snprintf(msg, sizeof(msg), "upstream %s ended the response without grpc-status", peer);
		if (synth_trailers(&call->resp_trailers, false, MTD_GRPC_INTERNAL, msg) < 0) {
			mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
			return;
		}
	} else {
		call->up_ok = true;
	}
	call->resp_eof = true;
	if (call->deadline_armed) {
		event_del(&call->deadline_ev);
		call->deadline_armed = false;
	}
	mtd_down_resume(call);
}

ssize_t mtd_call_read_resp(nghttp2_session *s, int32_t sid, uint8_t *buf, size_t len, uint32_t *flags,
                           nghttp2_data_source *src, void *ud)
{
	struct mtd_call *call = src->ptr;
	size_t n = mtd_bufq_read(&call->resp, buf, len);
	if (n > 0 && call->up) {
		nghttp2_session_consume(call->up->ng, call->up_sid, n);
		mtd_conn_want_flush(call->up);
	}
	call->resp_unconsumed -= n < call->resp_unconsumed ? n : call->resp_unconsumed;
	if (call->resp.len == 0 && call->resp_eof && !call->resp_done) {
		*flags |= NGHTTP2_DATA_FLAG_EOF;
		nghttp2_nv stack_nv[32];
		const struct mtd_headers *t = &call->resp_trailers;
		nghttp2_nv *nva = t->n <= 32 ? stack_nv : malloc(t->n * sizeof(*nva));
		if (nva) {
			size_t k = filter_response(t, nva);
			if (nghttp2_submit_trailer(s, sid, nva, k) == 0)
				*flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
			if (nva != stack_nv)
				free(nva);
		}
		call->resp_done = true;
		call->state = MTD_CALL_DONE;
		return (ssize_t)n;
	}
	if (n == 0) {
		if (call->resp_done)
			return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
		call->resp_deferred = true;
		return NGHTTP2_ERR_DEFERRED;
	}
	return (ssize_t)n;
}

void mtd_call_on_up_close(struct mtd_call *call, uint32_t error_code)
{
	if (call->resp_unconsumed)
		call->resp_unconsumed = 0; /* the session returned the window */
	if (!call->resp_eof && !call->resp_done) {
		const char *peer = call->ep ? call->ep->cfg->addr.text : "?";
		if (call->deadline_ns && mtd_now_ns() >= call->deadline_ns)
			mtd_call_fail(call, MTD_GRPC_DEADLINE_EXCEEDED, "deadline exceeded");
		else if (error_code == NGHTTP2_REFUSED_STREAM)
			mtd_call_fail(call, MTD_GRPC_UNAVAILABLE, "upstream %s refused the stream", peer);
		else if (error_code == NGHTTP2_NO_ERROR)
			mtd_call_fail(call, MTD_GRPC_UNAVAILABLE, "upstream %s closed the stream without a response",
			              peer);
		else
			mtd_call_fail(call, mtd_grpc_status_from_h2_error(error_code),
			              "upstream %s reset the stream (%s)", peer, nghttp2_http2_strerror(error_code));
	}
	/* Request bytes nobody will send any more. */
	drop_request_bytes(call);
	mtd_call_maybe_free(call);
}
