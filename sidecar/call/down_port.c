/* The downstream port, the call engine's side (io/downstream-t.h): what
 * downstream.c reports of a client's request stream becomes the call's
 * state here and in call.c, never in io/. A stream's close, or its
 * connection's, is recorded (call->down NULL, down_closed) and the engine
 * learns it from the worker's ready list at the end of the turn, never on
 * the stack of io/'s callback; a request's start, data and end run the
 * engine at once (docs/architecture.md, "No re-entry from io/", says
 * why). */
#include "config.h"

#include <string.h>

#include "core/log.h"
#include "sidecar/call/call.h"
#include "sidecar/call/down_port.h"
#include "sidecar/call/headers.h"
#include "sidecar/call/inbound_call.h"
#include "sidecar/call/relay.h"
#include "sidecar/control/runtime.h"
#include "sidecar/io/conn.h"
#include "sidecar/io/downstream.h"
#include "sidecar/turn.h"

/* A call for stream sid of c, started at the turn's clock, distinct from
 * any other of the worker's calls (turn.h mtd_turn_call_start_ns). */
static struct mtd_down_stream *port_begin(struct mtd_conn *c, int32_t sid)
{
	struct mtd_call *call = mtd_slab_calloc(&c->w->slab, 1, sizeof(*call));
	if (!call)
		return NULL;
	call->w = c->w;
	call->down = c;
	call->down_sid = sid;
	LIST_INIT(&call->attempts);
	call->start_ns = mtd_turn_call_start_ns(c->w);
	return &call->ds;
}

static int port_field(struct mtd_down_stream *ds, const uint8_t *name, size_t nlen, const uint8_t *value,
                      size_t vlen, uint8_t flags)
{
	struct mtd_call *call = mtd_call_of_stream(ds);
	/* nghttp2 1.52 does not enforce our advertised
	 * SETTINGS_MAX_HEADER_LIST_SIZE; RFC 9113 §6.5.2 counts name + value + 32. */
	if (mtd_headers_size(&call->req_hdrs) + nlen + vlen + 32 > call->w->rt->cfg->downstream.max_header_list_size) {
		MTD_DEBUG("client %s: stream %d: header list too large", call->down->peer, call->down_sid);
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	}
	if (mtd_headers_add(&call->req_hdrs, &call->w->slab, name, nlen, value, vlen, flags & NGHTTP2_NV_FLAG_NO_INDEX) <
	    0)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	if (nlen == 11 && memcmp(name, "traceparent", 11) == 0)
		call->trace_tp = true; /* nghttp2 passes names lower case (RFC 9113 §8.2.1) */
	return 0;
}

static void port_headers(struct mtd_down_stream *ds, bool end_stream)
{
	struct mtd_call *call = mtd_call_of_stream(ds);
	call->req_eof = end_stream;
	/* An inbound peer's call is authorized first (inbound_call.c). */
	if (mtd_call_inbound_peer(call))
		mtd_call_inbound_start(call);
	else
		mtd_call_start(call);
}

static void port_data(struct mtd_down_stream *ds, const uint8_t *p, size_t n)
{
	struct mtd_call *call = mtd_call_of_stream(ds);
	if (call->state == MTD_CALL_DONE) {
		/* Nobody will read these bytes: give the window back now. */
		mtd_down_consume(call->down, call->down_sid, n);
		return;
	}
	mtd_call_on_req_data(call, p, n);
}

static void port_end(struct mtd_down_stream *ds)
{
	mtd_call_on_req_end(mtd_call_of_stream(ds));
}

static void port_close(struct mtd_down_stream *ds, uint32_t error_code)
{
	struct mtd_call *call = mtd_call_of_stream(ds);
	/* The stream is gone; its connection window is not. */
	if (call->req_unconsumed)
		mtd_down_consume_closed(call->down, call->req_unconsumed);
	mtd_relay_down_gone(call);
	call->down = NULL;
	mtd_call_down_closed_later(call, error_code);
}

static void port_gone(struct mtd_down_stream *ds)
{
	struct mtd_call *call = mtd_call_of_stream(ds);
	mtd_relay_down_gone(call);
	call->down = NULL;
	/* The client is gone: its calls are cancelled. */
	mtd_call_down_closed_later(call, NGHTTP2_CANCEL);
}

const struct mtd_down_port mtd_call_down_port = {
        .on_begin = port_begin,
        .on_field = port_field,
        .on_headers = port_headers,
        .on_data = port_data,
        .on_end = port_end,
        .on_close = port_close,
        .on_gone = port_gone,
        .send_data = mtd_call_send_resp,
};
