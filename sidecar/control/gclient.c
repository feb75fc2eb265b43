/* The control thread's gRPC client (gclient.h): nghttp2 client session over
 * a bufferevent. Bytes in: bufferevent read -> nghttp2_session_mem_recv ->
 * callbacks (headers, DATA reassembled into gRPC messages, stream close).
 * Bytes out: mem_send at the end of the outermost entry (`leave`), never
 * from inside an nghttp2 callback (nghttp2 forbids sending from there).
 *
 * Connection states:
 *
 *   CONNECTING --TCP up--> UP --EOF / error / GOAWAY / PING timeout--> DOWN
 *        |                                                              ^
 *        +--------------- refused / connect timeout -------------------+
 *
 * DOWN: every call got on_close(UNAVAILABLE), on_down ran, no I/O; the
 * owner frees the connection. `dead` (freed by the owner while a callback
 * runs) suppresses every callback; the memory goes when `busy` drops to 0.
 */
#include "config.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <nghttp2/nghttp2.h>

#include "core/log.h"
#include "grpc/grpc.h"
#include "sidecar/control/gclient.h"
#include "sidecar/io/transport.h"

struct mtd_gcli_call {
	struct mtd_gcli *c;
	int32_t sid;
	const struct mtd_gcli_call_cbs *cbs;
	void *arg;
	LIST_ENTRY(mtd_gcli_call) link;
	/* Request bytes not yet taken by nghttp2: out[out_off, out_len). */
	uint8_t *out;
	size_t out_off, out_len, out_cap;
	bool out_eof, deferred;
	/* Response bytes not yet a whole message. */
	uint8_t *in;
	size_t in_len, in_cap;
	uint32_t max_msg; /* mtd_gcli_call_limit */
	size_t skip;      /* bytes of a message too large still to discard as they come */
	int http_status;
	int status; /* -1 until grpc-status (or a local failure) decides */
	char message[256];
	bool cancelled;
};

/* A call's buffer once it holds nothing: kept when small (the next
 * message reuses it), freed past BUF_KEEP so that one large message (an
 * xDS state of the world: megabytes) is not held for the stream's life. */
#define BUF_KEEP (64 * 1024)
static void buf_idle(uint8_t **buf, size_t *cap)
{
	if (*cap > BUF_KEEP) {
		free(*buf);
		*buf = NULL;
		*cap = 0;
	}
}

struct mtd_gcli {
	struct event_base *base;
	struct bufferevent *bev;
	nghttp2_session *ng;
	struct event *connect_timer, *ping_timer;
	const struct mtd_gcli_cbs *cbs;
	void *arg;
	char authority[128];
	char pending_reason[128]; /* an error to report from the next turn */
	LIST_HEAD(, mtd_gcli_call) calls;
	int64_t keepalive_ms;
	bool tls;
	bool check_peer;         /* mtd_gcli_check_peer */
	char *registry_identity; /* its argument, owned, or NULL */
	bool up, down, dead, ping_out, want_flush;
	int busy;
};

static void destroy(struct mtd_gcli *c);
static void fail(struct mtd_gcli *c, const char *reason);

static void enter(struct mtd_gcli *c)
{
	c->busy++;
}

static void flush(struct mtd_gcli *c)
{
	for (;;) {
		const uint8_t *data;
		ssize_t n = nghttp2_session_mem_send(c->ng, &data);

		if (n < 0) {
			fail(c, nghttp2_strerror((int)n));
			return;
		}
		if (n == 0)
			return;
		if (bufferevent_write(c->bev, data, (size_t)n) != 0) {
			fail(c, "out of memory");
			return;
		}
	}
}

static void leave(struct mtd_gcli *c)
{
	while (c->busy == 1 && c->want_flush && c->up && !c->down && !c->dead) {
		c->want_flush = false;
		flush(c);
	}
	if (--c->busy == 0 && c->dead)
		destroy(c);
}

static void call_free(struct mtd_gcli_call *call)
{
	free(call->out);
	free(call->in);
	free(call);
}

/* Take the call off the connection, tell its owner (unless cancelled or
 * the connection is being freed), free it. */
static void call_finish(struct mtd_gcli_call *call, int status, const char *message)
{
	struct mtd_gcli *c = call->c;

	LIST_REMOVE(call, link);
	if (call->sid > 0)
		nghttp2_session_set_stream_user_data(c->ng, call->sid, NULL);
	if (!call->cancelled && !c->dead && call->cbs->on_close)
		call->cbs->on_close(call, status, message, call->arg);
	call_free(call);
}

static void fail(struct mtd_gcli *c, const char *reason)
{
	struct mtd_gcli_call *call;

	if (c->down || c->dead)
		return;
	c->down = true;
	c->up = false;
	bufferevent_disable(c->bev, EV_READ | EV_WRITE);
	evtimer_del(c->connect_timer);
	if (c->ping_timer)
		evtimer_del(c->ping_timer);
	while ((call = LIST_FIRST(&c->calls)) != NULL)
		call_finish(call, MTD_GRPC_UNAVAILABLE, reason);
	if (!c->dead && c->cbs->on_down)
		c->cbs->on_down(c, reason, c->arg);
}

static void destroy(struct mtd_gcli *c)
{
	struct mtd_gcli_call *call;

	while ((call = LIST_FIRST(&c->calls)) != NULL) {
		call->cancelled = true;
		call_finish(call, MTD_GRPC_CANCELLED, "");
	}
	if (c->ng)
		nghttp2_session_del(c->ng);
	if (c->bev)
		bufferevent_free(c->bev);
	if (c->connect_timer)
		event_free(c->connect_timer);
	if (c->ping_timer)
		event_free(c->ping_timer);
	free(c->registry_identity);
	free(c);
}

void mtd_gcli_free(struct mtd_gcli *c)
{
	if (c == NULL)
		return;
	c->dead = true;
	if (c->busy == 0)
		destroy(c);
}

/* ---- nghttp2 callbacks --------------------------------------------------- */

static ssize_t read_req(nghttp2_session *ng, int32_t sid, uint8_t *buf, size_t len, uint32_t *flags,
                        nghttp2_data_source *src, void *ud)
{
	struct mtd_gcli_call *call = src->ptr;
	size_t avail = call->out_len - call->out_off, n = avail < len ? avail : len;

	if (avail == 0 && !call->out_eof) {
		call->deferred = true;
		return NGHTTP2_ERR_DEFERRED;
	}
	memcpy(buf, call->out + call->out_off, n);
	call->out_off += n;
	if (call->out_off == call->out_len) {
		call->out_off = call->out_len = 0;
		buf_idle(&call->out, &call->out_cap);
	}
	if (call->out_len == 0 && call->out_eof)
		*flags |= NGHTTP2_DATA_FLAG_EOF;
	return (ssize_t)n;
}

static struct mtd_gcli_call *stream_call(nghttp2_session *ng, int32_t sid)
{
	return nghttp2_session_get_stream_user_data(ng, sid);
}

static int hexval(uint8_t c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* gRPC PROTOCOL-HTTP2: grpc-message is percent-encoded. */
static void percent_decode(char *dst, size_t size, const uint8_t *v, size_t n)
{
	size_t o = 0;

	for (size_t i = 0; i < n && o + 1 < size; i++) {
		int hi, lo;

		if (v[i] == '%' && i + 2 < n && (hi = hexval(v[i + 1])) >= 0 && (lo = hexval(v[i + 2])) >= 0) {
			dst[o++] = (char)(hi << 4 | lo);
			i += 2;
		} else {
			dst[o++] = (char)v[i];
		}
	}
	dst[o] = '\0';
}

static int on_header(nghttp2_session *ng, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
	struct mtd_gcli_call *call = stream_call(ng, frame->hd.stream_id);

	if (call == NULL || frame->hd.type != NGHTTP2_HEADERS)
		return 0;
	if (namelen == 7 && memcmp(name, ":status", 7) == 0) {
		call->http_status = mtd_http_status_parse(value, valuelen);
	} else if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0 && call->status < 0) {
		int st = mtd_grpc_status_parse(value, valuelen);
		call->status = st >= 0 ? st : MTD_GRPC_UNKNOWN;
	} else if (namelen == 12 && memcmp(name, "grpc-message", 12) == 0) {
		percent_decode(call->message, sizeof(call->message), value, valuelen);
	}
	return 0;
}

static void call_local_fail(struct mtd_gcli_call *call, int status, const char *message)
{
	call->status = status;
	snprintf(call->message, sizeof(call->message), "%s", message);
	nghttp2_submit_rst_stream(call->c->ng, NGHTTP2_FLAG_NONE, call->sid, NGHTTP2_CANCEL);
	call->c->want_flush = true;
}

static int on_data(nghttp2_session *ng, uint8_t flags, int32_t sid, const uint8_t *data, size_t len, void *ud)
{
	struct mtd_gcli *c = ud;
	struct mtd_gcli_call *call = stream_call(ng, sid);

	if (call == NULL || call->cancelled || call->status >= 0)
		return 0;
	if (call->skip > 0) {
		size_t k = call->skip < len ? call->skip : len;
		call->skip -= k;
		data += k;
		len -= k;
		if (len == 0)
			return 0;
	}
	if (call->in_len + len > call->in_cap) {
		size_t cap = call->in_cap ? call->in_cap : 4096;
		uint8_t *p;

		while (cap < call->in_len + len)
			cap *= 2;
		p = realloc(call->in, cap);
		if (p == NULL) {
			call_local_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
			return 0;
		}
		call->in = p;
		call->in_cap = cap;
	}
	memcpy(call->in + call->in_len, data, len);
	call->in_len += len;
	/* gRPC PROTOCOL-HTTP2: Length-Prefixed-Message = flag, 4-byte length,
	 * message. */
	size_t off = 0;
	while (call->in_len - off >= 5 && !call->cancelled && !c->dead && call->status < 0) {
		const uint8_t *p = call->in + off;
		uint32_t mlen = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];

		if (p[0] != 0) {
			call_local_fail(call, MTD_GRPC_INTERNAL, "compressed response message (none was asked for)");
			break;
		}
		if (mlen > call->max_msg && call->cbs->on_too_large) {
			/* Skipped: what is buffered of it now, the rest as it comes. */
			size_t have = call->in_len - off - 5;
			call->cbs->on_too_large(call, mlen, call->arg);
			if (have >= mlen) {
				off += 5 + (size_t)mlen;
				continue;
			}
			call->skip = mlen - have;
			off = call->in_len;
			break;
		}
		if (mlen > call->max_msg) {
			call_local_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "response message too large");
			break;
		}
		if (call->in_len - off < 5 + (size_t)mlen)
			break;
		off += 5 + (size_t)mlen;
		if (call->cbs->on_msg)
			call->cbs->on_msg(call, p + 5, mlen, call->arg);
	}
	/* The callback may have cancelled the call; its buffers stay until the
	 * stream closes, so this is still safe. */
	if (off > 0) {
		memmove(call->in, call->in + off, call->in_len - off);
		call->in_len -= off;
		if (call->in_len == 0)
			buf_idle(&call->in, &call->in_cap);
	}
	return 0;
}

static int on_stream_close(nghttp2_session *ng, int32_t sid, uint32_t error_code, void *ud)
{
	struct mtd_gcli_call *call = stream_call(ng, sid);
	char why[96];

	if (call == NULL)
		return 0;
	call->sid = -1; /* the stream is gone */
	if (call->status >= 0) {
		call_finish(call, call->status, call->message);
	} else if (call->http_status != 0 && call->http_status != 200) {
		snprintf(why, sizeof(why), "HTTP status %d", call->http_status);
		call_finish(call, (int)mtd_grpc_status_from_http(call->http_status), why);
	} else {
		snprintf(why, sizeof(why), "stream closed without grpc-status (%s)",
		         nghttp2_http2_strerror(error_code));
		call_finish(call, error_code == NGHTTP2_REFUSED_STREAM ? MTD_GRPC_UNAVAILABLE : MTD_GRPC_INTERNAL, why);
	}
	return 0;
}

static int on_frame_recv(nghttp2_session *ng, const nghttp2_frame *frame, void *ud)
{
	struct mtd_gcli *c = ud;

	if (frame->hd.type == NGHTTP2_PING && (frame->hd.flags & NGHTTP2_FLAG_ACK))
		c->ping_out = false;
	if (frame->hd.type == NGHTTP2_GOAWAY) {
		fail(c, "the server sent GOAWAY");
		return NGHTTP2_ERR_CALLBACK_FAILURE; /* stop reading: c is down */
	}
	return 0;
}

/* ---- libevent callbacks -------------------------------------------------- */

static void read_cb(struct bufferevent *bev, void *arg)
{
	struct mtd_gcli *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	uint8_t buf[16384];

	enter(c);
	while (!c->down && !c->dead && evbuffer_get_length(in) > 0) {
		int n = evbuffer_remove(in, buf, sizeof(buf));
		ssize_t rv;

		if (n <= 0)
			break;
		rv = nghttp2_session_mem_recv(c->ng, buf, (size_t)n);
		if (rv < 0) {
			fail(c, nghttp2_strerror((int)rv));
			break;
		}
	}
	c->want_flush = true;
	leave(c);
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct mtd_gcli *c = arg;
	char why[200];

	enter(c);
	if (what & BEV_EVENT_CONNECTED) {
		int one = 1;

		evtimer_del(c->connect_timer);
		if (c->tls && c->check_peer &&
		    mtd_tls_ssl_check_peer(bufferevent_openssl_get_ssl(bev), c->registry_identity, why, sizeof(why)) < 0) {
			fail(c, why);
			leave(c);
			return;
		}
		setsockopt(bufferevent_getfd(bev), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c->up = true;
		c->want_flush = true;
		if (c->keepalive_ms > 0) {
			struct timeval tv = {(time_t)(c->keepalive_ms / 1000),
			                     (suseconds_t)(c->keepalive_ms % 1000) * 1000};
			evtimer_add(c->ping_timer, &tv);
		}
		if (c->cbs->on_up)
			c->cbs->on_up(c, c->arg);
	} else if (what & BEV_EVENT_ERROR) {
		unsigned long tls_err = c->tls ? bufferevent_get_openssl_error(bev) : 0;
		int e = EVUTIL_SOCKET_ERROR();
		if (tls_err != 0) {
			char ssl_why[160];
			mtd_tls_error_string(tls_err, ssl_why, sizeof(ssl_why));
			snprintf(why, sizeof(why), "TLS: %s", ssl_why);
		} else {
			snprintf(why, sizeof(why), "%s",
			         e != 0   ? strerror(e)
			         : c->tls ? "TLS handshake failed"
			                  : "socket error");
		}
		fail(c, why);
	} else if (what & BEV_EVENT_EOF) {
		fail(c, "connection closed by the server");
	}
	leave(c);
}

static void connect_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_gcli *c = arg;

	enter(c);
	fail(c, c->pending_reason[0] ? c->pending_reason : "connect timeout");
	leave(c);
}

static void ping_cb(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_gcli *c = arg;

	enter(c);
	if (c->ping_out) {
		char why[96];
		snprintf(why, sizeof(why), "keepalive PING unanswered for %lld ms", (long long)c->keepalive_ms);
		fail(c, why);
	} else if (!c->down) {
		struct timeval tv = {(time_t)(c->keepalive_ms / 1000), (suseconds_t)(c->keepalive_ms % 1000) * 1000};
		/* gRPC A8 / grpc-go's enforcement policy (etcd's too): no PING
		 * without a call open, or the server answers GOAWAY
		 * too_many_pings. */
		if (!LIST_EMPTY(&c->calls)) {
			nghttp2_submit_ping(c->ng, NGHTTP2_FLAG_NONE, NULL);
			c->ping_out = true;
			c->want_flush = true;
		}
		evtimer_add(c->ping_timer, &tv);
	}
	leave(c);
}

/* ---- public -------------------------------------------------------------- */

struct mtd_gcli *mtd_gcli_new(struct event_base *base, const struct sockaddr *sa, socklen_t salen,
                              const char *authority, struct ssl_st *ssl, int64_t connect_timeout_ms,
                              int64_t keepalive_ms, const struct mtd_gcli_cbs *cbs, void *arg)
{
	struct mtd_gcli *c = calloc(1, sizeof(*c));
	nghttp2_session_callbacks *ncb = NULL;
	nghttp2_option *opt = NULL;

	if (c == NULL) {
		mtd_tls_ssl_free(ssl);
		return NULL;
	}
	c->base = base;
	c->cbs = cbs;
	c->arg = arg;
	c->keepalive_ms = keepalive_ms;
	LIST_INIT(&c->calls);
	snprintf(c->authority, sizeof(c->authority), "%s", authority);
	c->tls = ssl != NULL;
	if (ssl) {
		/* Owns ssl from here (BEV_OPT_CLOSE_ON_FREE frees it too). */
		c->bev = bufferevent_openssl_socket_new(base, -1, ssl, BUFFEREVENT_SSL_CONNECTING,
		                                        BEV_OPT_CLOSE_ON_FREE);
		if (c->bev != NULL)
			bufferevent_openssl_set_allow_dirty_shutdown(c->bev, 1);
		else
			mtd_tls_ssl_free(ssl); /* libevent leaves it to us on failure */
	} else {
		c->bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
	}
	c->connect_timer = evtimer_new(base, connect_timer_cb, c);
	c->ping_timer = evtimer_new(base, ping_cb, c);
	if (c->bev == NULL || c->connect_timer == NULL || c->ping_timer == NULL)
		goto fail;
	if (nghttp2_session_callbacks_new(&ncb) != 0 || nghttp2_option_new(&opt) != 0)
		goto fail;
	nghttp2_session_callbacks_set_on_header_callback(ncb, on_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(ncb, on_data);
	nghttp2_session_callbacks_set_on_stream_close_callback(ncb, on_stream_close);
	nghttp2_session_callbacks_set_on_frame_recv_callback(ncb, on_frame_recv);
	/* Until the peer's SETTINGS arrive, open at most 100 streams (the
	 * protocol's default is unlimited; RFC 9113 §6.5.2 advises servers
	 * to allow at least 100), and accept no push. */
	nghttp2_option_set_peer_max_concurrent_streams(opt, 100);
	nghttp2_option_set_max_reserved_remote_streams(opt, 0);
	nghttp2_option_set_no_rfc9113_leading_and_trailing_ws_validation(opt, 1);
	if (nghttp2_session_client_new2(&c->ng, ncb, c, opt) != 0)
		goto fail;
	nghttp2_session_callbacks_del(ncb);
	nghttp2_option_del(opt);
	ncb = NULL;
	opt = NULL;
	/* A full list of 1,000 instances is a few hundred KiB in one message:
	 * open the windows wide enough that it flows in one round trip. */
	nghttp2_settings_entry iv[] = {
	        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
	        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 4u << 20},
	};
	if (nghttp2_submit_settings(c->ng, NGHTTP2_FLAG_NONE, iv, 2) != 0 ||
	    nghttp2_session_set_local_window_size(c->ng, NGHTTP2_FLAG_NONE, 0, 16 << 20) != 0)
		goto fail;
	bufferevent_setcb(c->bev, read_cb, NULL, event_cb, c);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
	struct timeval tv = {(time_t)(connect_timeout_ms / 1000), (suseconds_t)(connect_timeout_ms % 1000) * 1000};
	if (bufferevent_socket_connect(c->bev, (struct sockaddr *)sa, (int)salen) != 0) {
		/* Reported from the next turn: on_down never runs inside new(). */
		int e = EVUTIL_SOCKET_ERROR();
		snprintf(c->pending_reason, sizeof(c->pending_reason), "%s", e ? strerror(e) : "cannot connect");
		tv = (struct timeval){0, 0};
	}
	evtimer_add(c->connect_timer, &tv);
	return c;
fail:
	if (ncb)
		nghttp2_session_callbacks_del(ncb);
	if (opt)
		nghttp2_option_del(opt);
	destroy(c);
	errno = ENOMEM;
	return NULL;
}

int mtd_gcli_check_peer(struct mtd_gcli *c, const char *registry_identity)
{
	if (registry_identity != NULL && (c->registry_identity = strdup(registry_identity)) == NULL)
		return -ENOMEM;
	c->check_peer = true;
	return 0;
}

static int reserve(struct mtd_gcli_call *call, size_t extra)
{
	size_t cap = call->out_cap ? call->out_cap : 256;
	uint8_t *q;

	if (call->out_len + extra <= call->out_cap)
		return 0;
	while (cap < call->out_len + extra)
		cap *= 2;
	q = realloc(call->out, cap);
	if (q == NULL)
		return -ENOMEM;
	call->out = q;
	call->out_cap = cap;
	return 0;
}

struct mtd_gcli_call *mtd_gcli_call_start(struct mtd_gcli *c, const char *path, const char *token,
                                          const struct mtd_gcli_call_cbs *cbs, void *arg)
{
	struct mtd_gcli_call *call;

	if (c->down || c->dead)
		return NULL;
	call = calloc(1, sizeof(*call));
	if (call == NULL)
		return NULL;
	call->c = c;
	call->cbs = cbs;
	call->arg = arg;
	call->status = -1;
	call->max_msg = MTD_GCLI_MAX_MSG;
#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NO_COPY_NAME}
	nghttp2_nv nv[] = {
	        NV(":method", "POST"),           NV(":scheme", c->tls ? "https" : "http"), NV(":path", path),
	        NV(":authority", c->authority),  NV("content-type", "application/grpc"),   NV("te", "trailers"),
	        NV("token", token ? token : ""),
	};
#undef NV
	nghttp2_data_provider dp = {.source.ptr = call, .read_callback = read_req};
	call->sid = nghttp2_submit_request(c->ng, NULL, nv, token ? 7 : 6, &dp, call);
	if (call->sid < 0) {
		call_free(call);
		return NULL;
	}
	LIST_INSERT_HEAD(&c->calls, call, link);
	enter(c);
	c->want_flush = true;
	leave(c);
	return call;
}

void mtd_gcli_call_limit(struct mtd_gcli_call *call, uint32_t max_msg)
{
	call->max_msg = max_msg < MTD_GCLI_MAX_MSG ? max_msg : MTD_GCLI_MAX_MSG;
}

int mtd_gcli_call_send(struct mtd_gcli_call *call, const ProtobufCMessage *msg, bool last)
{
	struct mtd_gcli *c = call->c;
	size_t n = protobuf_c_message_get_packed_size(msg);
	uint8_t hdr[5] = {0, (uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};

	if (call->out_eof || call->cancelled || call->sid < 0)
		return -EPIPE;
	if (reserve(call, 5 + n) != 0)
		return -ENOMEM;
	memcpy(call->out + call->out_len, hdr, 5);
	if (n > 0)
		protobuf_c_message_pack(msg, call->out + call->out_len + 5);
	call->out_len += 5 + n;
	call->out_eof = last;
	enter(c);
	if (call->deferred) {
		call->deferred = false;
		nghttp2_session_resume_data(c->ng, call->sid);
	}
	c->want_flush = true;
	leave(c);
	return 0;
}

void mtd_gcli_call_cancel(struct mtd_gcli_call *call)
{
	struct mtd_gcli *c = call->c;

	if (call->cancelled)
		return;
	call->cancelled = true;
	enter(c);
	if (call->sid > 0 && !c->down)
		nghttp2_submit_rst_stream(c->ng, NGHTTP2_FLAG_NONE, call->sid, NGHTTP2_CANCEL);
	c->want_flush = true;
	leave(c);
}
