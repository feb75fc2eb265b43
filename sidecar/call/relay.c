/* The response side of a call, towards the client: the committed attempt's
 * headers, DATA and trailers, or an answer maitred makes itself (a status,
 * FAILSAFE's empty message, a fallback).
 *
 * Bytes flow without whole-message buffering: DATA from the upstream is
 * queued (call->resp); the upstream connection window reopens at once and
 * the stream's only once the downstream session took the bytes
 * (mtd_call_read_resp), so a client that stops reading never holds a
 * window other calls share. What one client connection holds is bounded by
 * downstream.max_buffered_response (conn->resp_held = the sum of its
 * calls' resp queues; written here only, see "what the client's connection
 * holds" below). */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "discovery/discovery.h"
#include "sidecar/call/call.h"
#include "sidecar/call/headers.h"
#include "sidecar/call/relay.h"
#include "sidecar/control/runtime.h"
#include "sidecar/io/conn.h"
#include "sidecar/io/downstream.h"
#include "sidecar/turn.h"

/* The client's stream may take more of the response. */
static void resume_down(struct mtd_call *call)
{
	if (!call->down || !call->resp_deferred)
		return;
	call->resp_deferred = false;
	mtd_conn_resume(call->down, call->down_sid, "response");
}

/* ---- what the client's connection holds -------------------------------
 *
 * conn->resp_held is the sum of the response bytes its calls queued for it
 * (call->resp). Only the functions below write it, and each call's bytes
 * are counted all or none (call->resp_counted): what a call gives back is
 * exactly what it added, so the sum never wraps, whichever way the call
 * ends. A BROADCAST answer is held uncounted until it is the answer
 * (mtd_relay_held): its bytes are not the client's before then. */

/* From now on call->resp is counted in its connection's sum. */
static void count_resp(struct mtd_call *call)
{
	if (call->resp_counted || !call->down)
		return;
	call->resp_counted = true;
	call->down->resp_held += call->resp.len;
}

/* 0, or -ENOMEM (some of the bytes may have gone in: counted all the
 * same, as they are in call->resp). */
static int resp_append(struct mtd_call *call, const uint8_t *p, size_t n)
{
	size_t before = call->resp.len;
	int rc = mtd_bufq_append(&call->resp, p, n);
	if (call->resp_counted && call->down)
		call->down->resp_held += call->resp.len - before;
	return rc < 0 ? -ENOMEM : 0;
}

/* The n bytes at the head of call->resp leave it (sent, or dropped). */
static void resp_drop(struct mtd_call *call, size_t n)
{
	mtd_bufq_drop(&call->resp, n);
	if (call->resp_counted && call->down)
		call->down->resp_held -= n;
}

static void resp_clear(struct mtd_call *call)
{
	resp_drop(call, call->resp.len);
}

void mtd_relay_down_gone(struct mtd_call *call)
{
	if (call->resp_counted && call->down)
		call->down->resp_held -= call->resp.len;
	call->resp_counted = false;
}

/* Replace h with grpc-status/grpc-message of our own. */
static int synth_trailers(struct mtd_headers *h, struct mtd_slab *slab, bool with_status_line,
                          enum mtd_grpc_status status, const char *msg)
{
	char code[8], enc[512];
	int clen = snprintf(code, sizeof(code), "%d", (int)status);
	size_t elen = msg ? mtd_grpc_message_encode(msg, enc, sizeof(enc)) : 0;
	mtd_headers_clear(h, slab);
	int rc = 0;
	if (with_status_line) {
		rc |= mtd_headers_add(h, slab, (const uint8_t *)":status", 7, (const uint8_t *)"200", 3, 0);
		rc |= mtd_headers_add(h, slab, (const uint8_t *)"content-type", 12, (const uint8_t *)"application/grpc",
		                      16, 0);
	}
	rc |= mtd_headers_add(h, slab, (const uint8_t *)"grpc-status", 11, (const uint8_t *)code, (size_t)clen, 0);
	if (elen)
		rc |= mtd_headers_add(h, slab, (const uint8_t *)"grpc-message", 12, (const uint8_t *)enc, elen, 0);
	return rc ? -ENOMEM : 0;
}

void mtd_relay_drop(struct mtd_call *call)
{
	resp_clear(call);
	struct mtd_attempt *a = call->ans;
	/* The connection window went back when the bytes arrived. */
	if (a && a->s.conn && call->resp_unconsumed) {
		nghttp2_session_consume_stream(a->s.conn->ng, a->s.sid, call->resp_unconsumed);
		mtd_conn_want_flush(a->s.conn);
	}
	call->resp_unconsumed = 0;
}

/* The response fields that go to the client: not the connection-specific
 * ones (RFC 9113 §8.2.2), and never content-length: maitred may end a
 * response its own way (a status in trailers after a malformed or
 * oversized message, a reset), and a length that no longer matches the
 * body is an HTTP messaging violation (RFC 9110 §8.6); gRPC never needs it
 * (PROTOCOL-HTTP2 frames its messages itself). */
static size_t filter_response(const struct mtd_headers *h, nghttp2_nv *out)
{
	size_t n = 0;
	for (uint32_t off = 0; mtd_headers_next(h, &off, &out[n]);)
		if (!mtd_headers_hop_by_hop(&out[n]) &&
		    !(out[n].namelen == 14 && memcmp(out[n].name, "content-length", 14) == 0))
			n++;
	return n;
}

/* A submit towards the client failed (nghttp2 out of memory): the answer
 * cannot go out as it should, so the stream is reset (INTERNAL_ERROR,
 * which gRPC clients report as INTERNAL) rather than left waiting for a
 * deadline or ended without grpc-status. The call is over, and settled
 * as every end of a call is: its deadline stops, its live attempts are
 * cancelled (RST_STREAM CANCEL reaches their servers, which would
 * otherwise go on until they end the stream themselves: a server stream
 * maybe never), the request is dropped. */
static void reset_down(struct mtd_call *call, int rv)
{
	MTD_WARN("client %s: cannot answer stream %d (%s); resetting it", call->down->peer, call->down_sid,
	         nghttp2_strerror(rv));
	mtd_call_settle(call);
	mtd_call_drop_request(call);
	call->resp_eof = true;
	call->resp_done = true;
	mtd_down_reset(call->down, call->down_sid, NGHTTP2_INTERNAL_ERROR);
	mtd_conn_want_flush(call->down);
}

/* Submit call->resp_hdrs to the client (filter_response's fields), the
 * call's data provider after them unless end_stream (Trailers-Only).
 * 0, or -ENOMEM with nothing submitted; a failed submit resets the
 * stream (reset_down) and counts as sent. */
static int submit_resp_headers(struct mtd_call *call, bool end_stream)
{
	nghttp2_nv stack_nv[MTD_STACK_NV];
	nghttp2_nv *nva = mtd_nv_room(stack_nv, call->resp_hdrs.n);
	if (!nva)
		return -ENOMEM;
	size_t n = filter_response(&call->resp_hdrs, nva);
	nghttp2_data_provider prd = {.source.ptr = call, .read_callback = mtd_call_read_resp};
	if (end_stream) {
		call->resp_eof = true;
		call->resp_done = true;
		call->state = MTD_CALL_DONE;
	}
	int rv = mtd_down_respond(call->down, call->down_sid, nva, n, end_stream ? NULL : &prd);
	call->resp_headers_sent = true;
	mtd_nv_release(nva, stack_nv);
	if (rv != 0)
		reset_down(call, rv);
	mtd_conn_want_flush(call->down);
	return 0;
}

/* h, the block that ends the response, holds a grpc-status maitred can
 * read, or is replaced with INTERNAL saying what came (with the status
 * line when it is Trailers-Only). PROTOCOL-HTTP2 says 1*DIGIT: a "+0",
 * "abc" or empty value is read as OK by one client, UNKNOWN by another,
 * while maitred counted the answer a failure; the client is told what
 * maitred counted. 0, or -ENOMEM. */
static int status_checked(struct mtd_call *call, struct mtd_attempt *a, struct mtd_headers *h, bool trailers_only)
{
	nghttp2_nv buf;
	const nghttp2_nv *st = mtd_headers_find(h, "grpc-status", &buf);
	if (st && mtd_grpc_status_parse(st->value, st->valuelen) >= 0)
		return 0;
	const char *peer = a->s.conn ? a->s.conn->peer : mtd_endpoint_text(a->ep);
	char msg[192], shown[24];
	size_t k = 0;
	for (size_t i = 0; st && i < st->valuelen && k + 1 < sizeof(shown) && i < 16; i++)
		shown[k++] = st->value[i] >= 0x20 && st->value[i] < 0x7f ? (char)st->value[i] : '?';
	shown[k] = '\0';
	if (st)
		snprintf(msg, sizeof(msg), "upstream %s sent a malformed grpc-status \"%s\"", peer, shown);
	else
		snprintf(msg, sizeof(msg), "upstream %s ended the response without grpc-status", peer);
	return synth_trailers(h, &call->w->slab, trailers_only, MTD_GRPC_INTERNAL, msg);
}

void mtd_relay_headers(struct mtd_call *call, struct mtd_attempt *a, bool end_stream)
{
	/* The nv point into the header memory until nghttp2 sent the frame:
	 * it moves to the call, which outlives the attempt. Trailers-Only
	 * from the upstream stays Trailers-Only. */
	mtd_headers_move(&call->resp_hdrs, &a->resp_hdrs, &call->w->slab);
	if ((end_stream && status_checked(call, a, &call->resp_hdrs, true) < 0) ||
	    submit_resp_headers(call, end_stream) < 0)
		mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
}

/* Count n response bytes from attempt a and follow their gRPC framing.
 * false when they break it or the message size limit: the call is failed
 * (after giving the bytes' window back upstream when consume is set: they
 * will never be read downstream). */
static bool scan_resp(struct mtd_call *call, struct mtd_attempt *a, const uint8_t *p, size_t n, bool consume)
{
	uint32_t max = call->w->rt->cfg->downstream.max_message_size;
	call->bytes_out += n;
	int rc = mtd_grpc_scan(&call->resp_scan, p, n, max, NULL, NULL);
	if (rc >= 0)
		return true;
	if (consume)
		nghttp2_session_consume(a->s.conn->ng, a->s.sid, n);
	if (rc == MTD_GRPC_SCAN_TOO_BIG)
		mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED,
		              "response message from %s larger than the limit of %u bytes", a->s.conn->peer, max);
	else
		mtd_call_fail(call, MTD_GRPC_INTERNAL, "malformed gRPC message prefix from %s", a->s.conn->peer);
	return false;
}

void mtd_relay_data(struct mtd_call *call, const uint8_t *p, size_t n)
{
	struct mtd_attempt *a = call->ans;
	if (!scan_resp(call, a, p, n, true))
		return;
	struct mtd_conn *down = call->down;
	uint32_t budget = call->w->rt->cfg->downstream.max_buffered_response;
	if (down && down->resp_held + n > budget) {
		/* The client does not read what it asked for: its own calls pay
		 * (HACKING.md: flow control), never the shared window. */
		nghttp2_session_consume(a->s.conn->ng, a->s.sid, n);
		mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED,
		              "client %s left %zu response bytes unread (downstream.max_buffered_response %u)",
		              down->peer, down->resp_held, budget);
		return;
	}
	count_resp(call);
	if (!down || resp_append(call, p, n) < 0) {
		nghttp2_session_consume(a->s.conn->ng, a->s.sid, n);
		if (down)
			mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	/* Isolation: the upstream connection window, which every call on it
	 * shares, goes back now; only this stream's window waits for the
	 * client to take the bytes (mtd_call_read_resp). What the call holds
	 * is bounded by that window and, over its connection, by the budget. */
	nghttp2_session_consume_connection(a->s.conn->ng, n);
	call->resp_unconsumed += n;
	resume_down(call);
}

void mtd_relay_trailers(struct mtd_call *call, struct mtd_attempt *a)
{
	nghttp2_nv buf;
	const nghttp2_nv *st = a->resp_trailers.n ? mtd_headers_find(&a->resp_trailers, "grpc-status", &buf) : NULL;
	if (!st) {
		/* PROTOCOL-HTTP2: a response ends with grpc-status. */
		const char *peer = a->s.conn ? a->s.conn->peer : mtd_endpoint_text(a->ep);
		char msg[160];
		snprintf(msg, sizeof(msg), "upstream %s ended the response without grpc-status", peer);
		if (synth_trailers(&call->resp_trailers, &call->w->slab, false, MTD_GRPC_INTERNAL, msg) < 0) {
			mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
			return;
		}
	} else if (!mtd_grpc_scan_complete(&call->resp_scan) &&
	           mtd_grpc_status_parse(st->value, st->valuelen) == MTD_GRPC_OK) {
		/* The response ended inside a message: that message is lost,
		 * and an OK would pass the cut bytes off as an answer (grpcio
		 * takes it and returns no message). The bytes went on as they
		 * came; the status says what happened. */
		const char *peer = a->s.conn ? a->s.conn->peer : mtd_endpoint_text(a->ep);
		char msg[160];
		snprintf(msg, sizeof(msg), "upstream %s ended the response in the middle of a message", peer);
		if (synth_trailers(&call->resp_trailers, &call->w->slab, false, MTD_GRPC_INTERNAL, msg) < 0) {
			mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
			return;
		}
	} else {
		mtd_headers_move(&call->resp_trailers, &a->resp_trailers, &call->w->slab);
		if (status_checked(call, a, &call->resp_trailers, false) < 0) {
			mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
			return;
		}
	}
	call->resp_eof = true;
	mtd_worker_timer_disarm(call->w, &call->deadline);
	resume_down(call);
}

void mtd_relay_status(struct mtd_call *call, enum mtd_grpc_status status, const char *msg)
{
	mtd_relay_drop(call);
	call->resp_eof = true;
	if (!call->down) {
		call->resp_done = true;
		return;
	}
	if (!call->resp_headers_sent) {
		/* PROTOCOL-HTTP2 Trailers-Only: one HEADERS frame, END_STREAM. */
		struct mtd_headers *h = &call->resp_trailers;
		if (synth_trailers(h, &call->w->slab, true, status, msg) < 0) {
			mtd_down_reset(call->down, call->down_sid, NGHTTP2_INTERNAL_ERROR);
		} else {
			/* No RST_STREAM(NO_ERROR) after it even if the client is still
			 * sending (RFC 9113 §8.1 allows one): gRPC C-core turns it into
			 * INTERNAL, hiding our status. Its DATA is dropped instead. */
			nghttp2_nv nva[4]; /* synth_trailers' fields */
			int rv = mtd_down_respond(call->down, call->down_sid, nva, mtd_headers_nv(h, nva), NULL);
			if (rv != 0)
				reset_down(call, rv);
		}
		call->resp_headers_sent = true;
		call->resp_done = true;
	} else {
		/* Headers went out already: end with trailers carrying the status
		 * once the data provider runs dry (it is, we dropped the bytes). */
		if (synth_trailers(&call->resp_trailers, &call->w->slab, false, status, msg) < 0) {
			mtd_down_reset(call->down, call->down_sid, NGHTTP2_INTERNAL_ERROR);
			call->resp_done = true;
		}
		resume_down(call);
	}
	mtd_conn_want_flush(call->down);
}

void mtd_relay_answer_ok(struct mtd_call *call, const uint8_t *msg, size_t len)
{
	mtd_relay_drop(call);
	call->resp_eof = true;
	if (!call->down) {
		call->resp_done = true;
		return;
	}
	/* One length-prefixed message (gRPC PROTOCOL-HTTP2), then OK. */
	uint8_t prefix[5] = {0, (uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len};
	struct mtd_headers *h = &call->resp_hdrs;
	int rc = resp_append(call, prefix, 5);
	if (rc == 0 && len)
		rc = resp_append(call, msg, len);
	struct mtd_slab *slab = &call->w->slab;
	mtd_headers_clear(h, slab);
	if (rc == 0)
		rc = mtd_headers_add(h, slab, (const uint8_t *)":status", 7, (const uint8_t *)"200", 3, 0) |
		     mtd_headers_add(h, slab, (const uint8_t *)"content-type", 12, (const uint8_t *)"application/grpc",
		                     16, 0);
	if (rc != 0 || synth_trailers(&call->resp_trailers, &call->w->slab, false, MTD_GRPC_OK, NULL) < 0) {
		resp_clear(call);
		call->resp_eof = false;
		mtd_relay_status(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	count_resp(call);
	nghttp2_data_provider prd = {.source.ptr = call, .read_callback = mtd_call_read_resp};
	nghttp2_nv nva[2]; /* :status, content-type */
	int rv = mtd_down_respond(call->down, call->down_sid, nva, mtd_headers_nv(h, nva), &prd);
	call->resp_headers_sent = true;
	if (rv != 0)
		reset_down(call, rv);
	mtd_conn_want_flush(call->down);
}

void mtd_relay_hold(struct mtd_call *call, struct mtd_attempt *a, const uint8_t *p, size_t n)
{
	if (!scan_resp(call, a, p, n, false))
		return;
	if (call->resp_scan.messages > 1) {
		mtd_call_fail(call, MTD_GRPC_UNIMPLEMENTED,
		              "BROADCAST is for unary calls: upstream %s sent a second response message", a->s.conn->peer);
		return;
	}
	if (call->resp.len + n > call->fault->replay_buffer) {
		mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED,
		              "BROADCAST: the response from %s is larger than fault.replay_buffer (%u bytes)",
		              a->s.conn->peer, call->fault->replay_buffer);
		return;
	}
	if (resp_append(call, p, n) < 0) /* not counted: not the client's yet */
		mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
}

void mtd_relay_held(struct mtd_call *call, bool trailers_only)
{
	call->resp_eof = true;
	if (!call->down) {
		resp_clear(call);
		call->resp_done = true;
		return;
	}
	/* The held bytes gave their windows back as they came (mode/broadcast.c):
	 * only the client's connection holds them now. */
	call->resp_unconsumed = 0;
	count_resp(call);
	if (submit_resp_headers(call, trailers_only) < 0) {
		resp_clear(call);
		call->resp_eof = false;
		mtd_relay_status(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
	}
}

/* The n response bytes at the head of call->resp went into a DATA frame:
 * drop them, and reopen the upstream stream's window for them. */
static void take_resp(struct mtd_call *call, size_t n)
{
	struct mtd_attempt *a = call->ans;
	resp_drop(call, n);
	size_t from_up = n < call->resp_unconsumed ? n : call->resp_unconsumed;
	if (from_up > 0 && a && a->s.conn) {
		nghttp2_session_consume_stream(a->s.conn->ng, a->s.sid, from_up);
		mtd_conn_want_flush(a->s.conn);
	}
	call->resp_unconsumed -= from_up;
}

/* A frame of at least MTD_NO_COPY_MIN response bytes leaves them in
 * call->resp until it is written: mtd_call_read_resp only says how many go
 * in the frame (NGHTTP2_DATA_FLAG_NO_COPY), and mtd_call_send_resp copies
 * them from the queue's chunks into the connection's output. One copy of
 * a response byte between the read and the write, where nghttp2's own
 * frame buffer took two. A smaller frame is copied here, through
 * nghttp2's buffer: for a 23-byte message the callback round trip cost
 * more than the copy (callgrind, +200 instructions per unary call). */
ssize_t mtd_call_read_resp(nghttp2_session *s, int32_t sid, uint8_t *buf, size_t len, uint32_t *flags,
                           nghttp2_data_source *src, void *ud)
{
	struct mtd_call *call = src->ptr;
	size_t n = call->resp.len < len ? call->resp.len : len;
	bool last = n == call->resp.len;
	if (n >= MTD_NO_COPY_MIN) {
		*flags |= NGHTTP2_DATA_FLAG_NO_COPY;
	} else if (n > 0) {
		mtd_bufq_copy_at(&call->resp, 0, buf, n);
		take_resp(call, n);
	}
	if (last && call->resp_eof && !call->resp_done) {
		nghttp2_nv stack_nv[MTD_STACK_NV];
		const struct mtd_headers *t = &call->resp_trailers;
		nghttp2_nv *nva = mtd_nv_room(stack_nv, t->n);
		int rv = nva ? nghttp2_submit_trailer(s, sid, nva, filter_response(t, nva)) : NGHTTP2_ERR_NOMEM;
		if (nva)
			mtd_nv_release(nva, stack_nv);
		call->resp_done = true;
		call->state = MTD_CALL_DONE;
		if (rv != 0) {
			/* Without its trailers the response would end without
			 * grpc-status: nghttp2 resets the stream instead
			 * (INTERNAL_ERROR) and drops these last bytes (or they stay
			 * queued until the call goes). */
			MTD_WARN("client %s: cannot send the trailers of stream %d (%s); resetting it",
			         call->down ? call->down->peer : "?", sid, nghttp2_strerror(rv));
			*flags &= ~(uint32_t)NGHTTP2_DATA_FLAG_NO_COPY;
			return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
		}
		*flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
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

int mtd_call_send_resp(nghttp2_session *s, nghttp2_frame *frame, const uint8_t *framehd, size_t n,
                       nghttp2_data_source *src, void *ud)
{
	struct mtd_call *call = src->ptr;
	int rv = mtd_conn_send_data(ud, framehd, &call->resp, 0, n);
	if (rv != NGHTTP2_ERR_CALLBACK_FAILURE)
		take_resp(call, n);
	return rv;
}
