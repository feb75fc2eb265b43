/* Upstream: one HTTP/2 client connection to an endpoint (h2c or TLS with
 * ALPN h2), carrying many calls' streams. See the state diagram in
 * sidecar.h (struct mtd_conn). */
#include "config.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "sidecar/control/health.h"
#include "core/clock.h"
#include "discovery/discovery.h"
#include "sidecar/control/runtime.h"
#include "sidecar/io/conn.h"
#include "sidecar/io/pool.h"
#include "sidecar/io/stream-t.h"
#include "sidecar/io/transport.h"
#include "sidecar/io/upstream.h"
#include "sidecar/ops/metrics.h"
#include "sidecar/turn.h"

/* Past this the interval stops doubling (about 12 days). */
#define KEEPALIVE_MAX_MS (1LL << 30)

/* A stream's owner (stream-t.h): its user data. */
static struct mtd_up_stream *stream_of(nghttp2_session *ng, int32_t sid)
{
	return nghttp2_session_get_stream_user_data(ng, sid);
}

/* A connection of p could not be made: the calls waiting in p cannot be
 * served by this endpoint unless another connection is usable (or on its
 * way). Nothing of them left maitred: they try another endpoint, or fail
 * with the reason. Never leaves a call waiting with nothing to wake it. */
static void move_waiting_calls(struct mtd_pool *p, const char *reason)
{
	struct mtd_conn *o;
	LIST_FOREACH(o, &p->conns, link)
		if (o->state != MTD_CONN_CLOSED && o->state != MTD_CONN_DRAINING)
			return;
	struct mtd_up_stream *s;
	while ((s = TAILQ_FIRST(&p->pending))) {
		mtd_pool_dequeue(s);
		s->ops->on_wait_end(s, MTD_UP_CONNECT_FAILED, reason);
	}
}

/* Fail the connection: the reason names the endpoint and reaches every call
 * on it, and every call waiting for it if no other connection can serve. */
static void up_fail(struct mtd_conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void up_fail(struct mtd_conn *c, const char *fmt, ...)
{
	char reason[256];
	va_list ap;
	va_start(ap, fmt);
	int n = snprintf(reason, sizeof(reason), "upstream %s: ", c->peer);
	vsnprintf(reason + n, sizeof(reason) - (size_t)n, fmt, ap);
	va_end(ap);
	struct mtd_pool *p = c->pool;
	/* Not usable until the peer's SETTINGS came: no call was sent on it. */
	bool never_ready = c->state == MTD_CONN_CONNECTING || c->state == MTD_CONN_HANDSHAKE ||
	                   (c->state == MTD_CONN_READY && !c->settings_seen);
	if (never_ready)
		mtd_pool_connect_failed(p, reason);
	else
		MTD_WARN("%s", reason);
	/* While failing, the pool must not open a replacement for the calls
	 * it is about to move (that would loop on a dead endpoint). A count:
	 * closing c may fail another of its connections. Retirement and
	 * teardown have flags of their own, which this never clears. */
	p->failing++;
	mtd_conn_close(c);
	p->failing--;
	if (never_ready)
		move_waiting_calls(p, reason);
}

static int on_header(nghttp2_session *ng, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
	struct mtd_conn *c = ud;
	struct mtd_up_stream *s = mtd_conn_field_ud(c, frame->hd.stream_id);
	if (!s || frame->hd.type != NGHTTP2_HEADERS)
		return 0;
	return s->ops->on_field(s, name, namelen, value, valuelen, flags);
}

static void update_max_streams(struct mtd_conn *c)
{
	uint32_t peer = nghttp2_session_get_remote_settings(c->ng, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
	uint32_t cap = c->pool->svc->cfg->upstream.max_concurrent_streams;
	c->max_streams = peer < cap ? peer : cap;
}

static int on_frame_recv(nghttp2_session *ng, const nghttp2_frame *frame, void *ud)
{
	struct mtd_conn *c = ud;
	struct mtd_up_stream *s;
	switch (frame->hd.type) {
	case NGHTTP2_HEADERS:
		if ((s = stream_of(ng, frame->hd.stream_id)))
			s->ops->on_headers(s, frame->hd.flags & NGHTTP2_FLAG_END_STREAM);
		break;
	case NGHTTP2_DATA:
		s = stream_of(ng, frame->hd.stream_id);
		if (s && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
			s->ops->on_trailers(s); /* ended without trailers */
		break;
	case NGHTTP2_SETTINGS:
		if (!(frame->hd.flags & NGHTTP2_FLAG_ACK)) {
			if (!c->settings_seen) {
				c->settings_seen = true;
				mtd_conn_timer_disarm(c);
				mtd_pool_connect_succeeded(c->pool);
				MTD_DEBUG("upstream %s: ready", c->peer);
			}
			update_max_streams(c);
			mtd_pool_dispatch(c->pool);
		}
		break;
	case NGHTTP2_GOAWAY:
		/* RFC 9113 §6.8: no new streams here; nghttp2 closes the streams
		 * above last_stream_id with REFUSED_STREAM (each GOAWAY's). A
		 * server may send more than one; the first is logged and obeyed,
		 * the others could only flood the log and the keepalive rule. */
		if (c->goaway_seen) {
			MTD_DEBUG("upstream %s: GOAWAY again (%s)", c->peer, nghttp2_http2_strerror(frame->goaway.error_code));
			break;
		}
		c->goaway_seen = true;
		MTD_INFO("upstream %s: GOAWAY (%s), draining", c->peer,
		         nghttp2_http2_strerror(frame->goaway.error_code));
		if (frame->goaway.error_code == NGHTTP2_ENHANCE_YOUR_CALM && frame->goaway.opaque_data_len == 14 &&
		    memcmp(frame->goaway.opaque_data, "too_many_pings", 14) == 0 &&
		    c->pool->keepalive_ms < KEEPALIVE_MAX_MS) {
			/* gRPC A8 (client-side keepalive): double the interval. */
			c->pool->keepalive_ms *= 2;
			MTD_WARN("upstream %s: too many PINGs for its policy; keepalive interval now %lld ms", c->peer,
			         (long long)c->pool->keepalive_ms);
		}
		if (c->state == MTD_CONN_READY)
			c->state = MTD_CONN_DRAINING;
		mtd_pool_note_usable(c->pool);
		mtd_pool_dispatch(c->pool);
		break;
	case NGHTTP2_PING:
		if (frame->hd.flags & NGHTTP2_FLAG_ACK)
			c->ping_sent_ns = 0;
		break;
	default:
		break;
	}
	return 0;
}

static int on_data_chunk_recv(nghttp2_session *ng, uint8_t flags, int32_t sid, const uint8_t *data, size_t len,
                              void *ud)
{
	struct mtd_up_stream *s = stream_of(ng, sid);
	if (!s) {
		nghttp2_session_consume(ng, sid, len); /* nobody reads it */
		return 0;
	}
	s->ops->on_data(s, data, len); /* the owner gives the window back */
	return 0;
}

static int send_data(nghttp2_session *ng, nghttp2_frame *frame, const uint8_t *framehd, size_t n,
                     nghttp2_data_source *src, void *ud)
{
	struct mtd_up_stream *s = stream_of(ng, frame->hd.stream_id);
	if (!s || !s->ops->send_data)
		return NGHTTP2_ERR_CALLBACK_FAILURE; /* no provider of ours sets NO_COPY without it */
	return s->ops->send_data(s, framehd, n, src->ptr);
}

static int on_stream_close(nghttp2_session *ng, int32_t sid, uint32_t error_code, void *ud)
{
	struct mtd_conn *c = ud;
	mtd_conn_field_forget(c, sid);
	mtd_conn_stream_closed(c, sid); /* RFC 9113 §5.1: what the peer may still send on it */
	struct mtd_up_stream *s = stream_of(ng, sid);
	if (!s)
		return 0;
	nghttp2_session_set_stream_user_data(ng, sid, NULL);
	LIST_REMOVE(s, conn_link);
	c->n_streams--;
	c->last_active_ns = mtd_turn_now_ns(c->w);
	s->conn = NULL;
	s->ops->on_close(s, error_code, NULL);
	/* A slot is free: give it to a waiting call. */
	mtd_pool_dispatch(c->pool);
	return 0;
}

int mtd_up_setup(struct mtd_worker *w)
{
	/* Request DATA is written by its owner. */
	static const struct mtd_conn_ng_hooks hooks = {on_header, on_frame_recv, on_data_chunk_recv, on_stream_close,
	                                               send_data};
	if (mtd_conn_ng_setup(&w->up_cbs, &w->up_opt, &hooks) < 0)
		return -ENOMEM;
	/* RFC 9113 on streams nghttp2 forgot (conn.c), as for clients. */
	nghttp2_session_callbacks_set_on_begin_frame_callback(w->up_cbs, mtd_conn_on_begin_frame);
	/* Until the peer's SETTINGS arrive assume 100 streams,
	 * not "unlimited"; no server push. */
	nghttp2_option_set_peer_max_concurrent_streams(w->up_opt, 100);
	nghttp2_option_set_max_reserved_remote_streams(w->up_opt, 0);
	return 0;
}

void mtd_up_teardown(struct mtd_worker *w)
{
	mtd_conn_ng_teardown(w->up_cbs, w->up_opt);
}

static void connect_timeout(struct mtd_conn *c)
{
	up_fail(c, "connect timeout (%lld ms)", (long long)c->pool->svc->cfg->upstream.connect_timeout_ms);
}

static void settings_timeout(struct mtd_conn *c)
{
	up_fail(c, "no HTTP/2 SETTINGS from the peer within %lld ms of connecting",
	        (long long)c->pool->svc->cfg->upstream.connect_timeout_ms);
}

/* connect_timeout bounds every step before the connection is usable
 * (HACKING.md "Waiting calls"): one without it is failed, never kept. */
static int arm_connect_timer(struct mtd_conn *c, void (*fn)(struct mtd_conn *c))
{
	return mtd_conn_timer_arm(c, fn, c->pool->svc->cfg->upstream.connect_timeout_ms);
}

/* The SETTINGS that follow the config (downstream's window and header
 * list budget, which bound what maitred buffers for each side) queued on
 * c, with the connection window to match. 0, or nghttp2's error. */
static int submit_config_settings(struct mtd_conn *c, bool first)
{
	const struct mtd_cfg_downstream *d = &c->w->rt->cfg->downstream;
	nghttp2_settings_entry iv[] = {
	        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, d->initial_window_size},
	        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, d->max_header_list_size},
	        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
	        {NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1},
	};
	/* Push and priorities are said once, in the first SETTINGS. */
	return mtd_conn_submit_settings(c, iv, first ? 4 : 2, d->initial_window_size);
}

void mtd_up_settings_changed(struct mtd_conn *c)
{
	if (c->ng == NULL || c->state != MTD_CONN_READY)
		return; /* a connection still connecting sends them when it is up */
	int rv = submit_config_settings(c, false);
	if (rv != 0) {
		MTD_WARN("upstream %s: cannot queue the reload's SETTINGS (%s): it keeps the previous ones", c->peer,
		         nghttp2_strerror(rv));
		return;
	}
	mtd_conn_want_flush(c);
}

/* Transport is up: start HTTP/2. */
static void up_ready(struct mtd_conn *c)
{
	mtd_conn_timer_disarm(c);
	event_del(&c->rev);
	event_del(&c->wev);
	if (nghttp2_session_client_new3(&c->ng, c->w->up_cbs, c, c->w->up_opt, &c->w->ng_mem) != 0) {
		up_fail(c, "out of memory");
		return;
	}
	if (submit_config_settings(c, true) != 0 || mtd_conn_start_io(c) < 0) {
		up_fail(c, "cannot start HTTP/2");
		return;
	}
	c->state = MTD_CONN_READY;
	c->last_active_ns = c->last_read_ns = mtd_now_ns();
	/* Streams wait for the peer's SETTINGS (its first frame, RFC 9113
	 * §3.4), as gRPC clients do: a stream submitted before them may exceed
	 * its SETTINGS_MAX_CONCURRENT_STREAMS and then sit in nghttp2's queue
	 * behind the streams it admits, instead of going to another
	 * connection. connect_timeout bounds that wait too. */
	if (arm_connect_timer(c, settings_timeout) < 0) {
		up_fail(c, "cannot arm the SETTINGS timeout (%lld ms): out of memory",
		        (long long)c->pool->svc->cfg->upstream.connect_timeout_ms);
		return;
	}
	MTD_DEBUG("upstream %s: transport up%s, waiting for SETTINGS", c->peer, c->ssl ? " (TLS)" : "");
	mtd_conn_want_flush(c);
}

static void handshake_cb(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_conn *c = arg;
	char err[256];
	int rc = mtd_tls_handshake(c, err, sizeof(err));
	if (rc == 0) {
		up_ready(c);
	} else if (rc == MTD_IO_WANT_READ || rc == MTD_IO_WANT_WRITE) {
		if (event_add(rc == MTD_IO_WANT_READ ? &c->rev : &c->wev, NULL) != 0)
			up_fail(c, "cannot wait for the TLS handshake (event_add failed)");
	} else {
		up_fail(c, "%s", err);
	}
}

static void connected_cb(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_conn *c = arg;
	int err = 0;
	socklen_t len = sizeof(err);
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	if (err) {
		up_fail(c, "connect: %s", strerror(err));
		return;
	}
	/* The policy its transport starts under, whatever it was when the
	 * connect began (a reload may have changed it since). */
	c->tls_gen = c->pool->svc->tls_gen;
	if (!c->pool->svc->ssl_ctx) {
		up_ready(c);
		return;
	}
	const struct mtd_cfg_service *svc = c->pool->svc->cfg;
	char host[256];
	const char *sni =
	        svc->tls->server_name ? svc->tls->server_name : mtd_endpoint_host(c->pool->ep, host, sizeof(host));
	if (mtd_tls_client_start(c, c->pool->svc->ssl_ctx, sni, c->pool->tls_session) < 0) {
		up_fail(c, "TLS setup failed");
		return;
	}
	c->state = MTD_CONN_HANDSHAKE;
	if (event_assign(&c->rev, c->w->base, c->fd, EV_READ, handshake_cb, c) != 0 ||
	    event_assign(&c->wev, c->w->base, c->fd, EV_WRITE, handshake_cb, c) != 0) {
		up_fail(c, "cannot wait for the TLS handshake (event_assign failed)");
		return;
	}
	handshake_cb(c->fd, EV_WRITE, c);
}

static void up_on_close(struct mtd_conn *c);

const struct mtd_conn_ops mtd_up_conn_ops = {
        .role = "upstream",
        .prescan = mtd_conn_prescan, /* DATA on closed streams, PRIORITY rules (conn.c) */
        .after_recv = mtd_conn_answer_late_data,
        .on_close = up_on_close,
};

struct mtd_conn *mtd_up_connect(struct mtd_pool *p)
{
	const struct mtd_endpoint *ep = p->ep;
	const char *text = mtd_endpoint_text(ep);
	char reason[160];
	struct mtd_conn *c = calloc(1, sizeof(*c));
	if (!c) {
		snprintf(reason, sizeof(reason), "upstream %s: out of memory for a connection", text);
		goto fail;
	}
	c->ops = &mtd_up_conn_ops;
	c->state = MTD_CONN_CONNECTING;
	c->w = p->w;
	c->pool = p;
	c->max_streams = p->svc->cfg->upstream.max_concurrent_streams;
	c->tls_gen = p->svc->tls_gen;
	c->opened_ns = mtd_now_ns();
	LIST_INIT(&c->streams);
	snprintf(c->peer, sizeof(c->peer), "%s", text);
	c->fd = socket(mtd_endpoint_sa(ep)->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd < 0) {
		/* EMFILE, ENFILE, ENOBUFS...: as good as a failed connect for the
		 * calls waiting; nothing else would wake them. */
		snprintf(reason, sizeof(reason), "upstream %s: socket: %s", text, strerror(errno));
		goto fail_free;
	}
	int one = 1;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (event_assign(&c->rev, c->w->base, c->fd, EV_READ, connected_cb, c) != 0 ||
	    event_assign(&c->wev, c->w->base, c->fd, EV_WRITE, connected_cb, c) != 0 || mtd_conn_timer_init(c) < 0) {
		snprintf(reason, sizeof(reason), "upstream %s: cannot register the connection's events", text);
		goto fail_fd;
	}
	LIST_INSERT_HEAD(&p->conns, c, link);
	p->n_conns++;
	mtd_mx_ep_add(p->ep, conns_open, 1);
	/* Issue 15, defect 8: without its timeout a connect to a peer that
	 * never answers would keep the calls waiting for it forever. */
	if (arm_connect_timer(c, connect_timeout) < 0) {
		up_fail(c, "cannot arm the connect timeout (%lld ms): out of memory",
		        (long long)p->svc->cfg->upstream.connect_timeout_ms);
		return NULL;
	}
	MTD_DEBUG("upstream %s: connecting", c->peer);
	if (connect(c->fd, mtd_endpoint_sa(ep), mtd_endpoint_salen(ep)) < 0 && errno != EINPROGRESS) {
		int e = errno;
		up_fail(c, "connect: %s", strerror(e));
		return NULL;
	}
	if (event_add(&c->wev, NULL) != 0) {
		up_fail(c, "cannot wait for the connect (event_add failed)");
		return NULL;
	}
	return c;

fail_fd:
	close(c->fd);
fail_free:
	free(c);
fail:
	mtd_pool_connect_failed(p, reason);
	move_waiting_calls(p, reason);
	return NULL;
}

/* Hop-by-hop fields never cross the proxy (RFC 9113 §8.2.2); grpc-timeout is
 * replaced with the time left. */
int mtd_up_open_stream(struct mtd_conn *c, struct mtd_up_stream *s, const nghttp2_nv *nva, size_t n,
                       const nghttp2_data_provider *prd)
{
	int32_t sid = nghttp2_submit_request(c->ng, NULL, nva, n, prd, s);
	if (sid < 0) {
		if (sid == NGHTTP2_ERR_STREAM_ID_NOT_AVAILABLE && c->state == MTD_CONN_READY)
			c->state = MTD_CONN_DRAINING; /* stream ids exhausted */
		return sid == NGHTTP2_ERR_NOMEM ? -ENOMEM : -EAGAIN;
	}
	s->conn = c;
	s->sid = sid;
	if (sid > c->top_sid)
		c->top_sid = sid;
	LIST_INSERT_HEAD(&c->streams, s, conn_link);
	c->n_streams++;
	c->last_active_ns = mtd_turn_now_ns(c->w);
	mtd_conn_want_flush(c);
	return 0;
}

bool mtd_up_check_write_stall(struct mtd_conn *c, int64_t now_ns)
{
	/* Issue 6: the rule for clients holds for a stuck upstream too; its
	 * calls would otherwise wait for their deadlines (or forever). */
	int64_t ms = c->pool->svc->cfg->upstream.write_timeout_ms;
	if (!mtd_conn_write_stalled(c, now_ns, ms))
		return false;
	up_fail(c, "read nothing of its requests for %lld ms, closing", (long long)ms);
	return true;
}

/* ops.on_close: its attempts fail over or end (connection lost), it
 * leaves the pool, and the pool dispatches (or moves its waiting calls on
 * if it never became usable). */
static void up_on_close(struct mtd_conn *c)
{
	struct mtd_pool *p = c->pool;
	LIST_REMOVE(c, link);
	p->n_conns--;
	mtd_mx_ep_add(p->ep, conns_open, -1);
	mtd_pool_note_usable(p);
	struct mtd_up_stream *s;
	char reason[128];
	snprintf(reason, sizeof(reason), "upstream %s: connection lost", c->peer);
	while ((s = LIST_FIRST(&c->streams))) {
		LIST_REMOVE(s, conn_link);
		c->n_streams--;
		s->conn = NULL;
		s->ops->on_close(s, NGHTTP2_NO_ERROR, reason); /* the session goes with its windows */
	}
	if (!c->settings_seen && !p->failing && !p->superseding && !mtd_pool_closing(p)) {
		/* Closed before it was usable (the peer closed, sent garbage, or
		 * went silent) by another path than up_fail: the calls waiting
		 * for it must not wait for nothing. */
		snprintf(reason, sizeof(reason), "upstream %s: connection closed before HTTP/2 was up", c->peer);
		mtd_pool_connect_failed(p, reason);
		move_waiting_calls(p, reason);
		return;
	}
	mtd_pool_dispatch(p);
}
