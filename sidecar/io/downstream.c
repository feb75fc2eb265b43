/* Downstream: the local app's cleartext HTTP/2 connections (h2c with prior
 * knowledge). One nghttp2 server session per connection, hardened against
 * a peer's floods (HACKING.md "Output pressure", "Conformance"). The
 * callbacks only report a stream's events to its owner through the
 * worker's downstream port (downstream-t.h; the call engine fills it). */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "core/log.h"
#include "core/clock.h"
#include "discovery/discovery.h"
#include "sidecar/control/runtime.h"
#include "sidecar/io/conn.h"
#include "sidecar/io/downstream.h"
#include "sidecar/io/inbound.h"
#include "sidecar/turn.h"

/* Unsent bytes the kernel may hold for a client (TCP_NOTSENT_LOWAT). */
#define NOTSENT_LOWAT (64 * 1024)

static struct mtd_down_stream *stream_owner(nghttp2_session *ng, int32_t sid)
{
	return nghttp2_session_get_stream_user_data(ng, sid);
}

static int glitch(nghttp2_session *ng, struct mtd_conn *c);

/* ---- SETTINGS_MAX_CONCURRENT_STREAMS (RFC 9113 §5.1.2) -------------------
 *
 * A HEADERS that would open more streams than we advertised is a stream
 * error: this one stream is refused with RST_STREAM(REFUSED_STREAM), which
 * tells the client it may retry the call, and the connection and its other
 * calls go on. nghttp2 1.52 does that only until the client acknowledges
 * the SETTINGS; after, it ends the whole connection (GOAWAY
 * PROTOCOL_ERROR), every call of that client lost. So nghttp2 is given no
 * limit (the value it enforces once acknowledged is the one it was given)
 * while the client is told ours: the SETTINGS frame nghttp2 serialized
 * carries c->max_streams in place of that "no limit" (advertise_settings),
 * and on_begin_headers refuses a stream past it (refuse_stream). */
#define NO_LIMIT UINT32_MAX /* nghttp2's own default: unlimited */

/* The one MAX_CONCURRENT_STREAMS entry of SETTINGS frame f (n bytes) that
 * carries NO_LIMIT, set to max. 0, or -EPROTO if f has no such entry. */
static int set_advertised_max(uint8_t *f, size_t n, uint32_t max)
{
	if (n < 9 || f[3] != NGHTTP2_SETTINGS || (f[4] & NGHTTP2_FLAG_ACK))
		return -EPROTO;
	for (size_t i = 9; i + 6 <= n; i += 6) {
		uint16_t id = (uint16_t)(f[i] << 8 | f[i + 1]);
		uint32_t v = (uint32_t)f[i + 2] << 24 | (uint32_t)f[i + 3] << 16 | (uint32_t)f[i + 4] << 8 | f[i + 5];
		if (id == NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS && v == NO_LIMIT) {
			f[i + 2] = (uint8_t)(max >> 24), f[i + 3] = (uint8_t)(max >> 16);
			f[i + 4] = (uint8_t)(max >> 8), f[i + 5] = (uint8_t)max;
			return 0;
		}
	}
	return -EPROTO;
}

/* c's first frames (its SETTINGS, the connection window's WINDOW_UPDATE)
 * serialized into its output now, the SETTINGS telling the client
 * c->max_streams. 0, or -ENOMEM / -EPROTO (nghttp2 serialized something
 * else: the limit would not be advertised). */
static int advertise_settings(struct mtd_conn *c)
{
	bool done = false;
	for (;;) {
		const uint8_t *data;
		ssize_t n = nghttp2_session_mem_send(c->ng, &data);
		if (n < 0)
			return -EPROTO;
		if (n == 0)
			return done ? 0 : -EPROTO;
		size_t at = c->out_len;
		if (mtd_conn_out_append(c, data, (size_t)n) < 0)
			return -ENOMEM;
		if (!done) {
			if (set_advertised_max(c->out + at, (size_t)n, c->max_streams) < 0)
				return -EPROTO;
			done = true;
		}
	}
}

/* A request past c->max_streams: RST_STREAM(REFUSED_STREAM) for it alone,
 * counted as a glitch (a client that read our SETTINGS never sends one).
 * Its header block is still decoded (the HPACK state needs it) and goes
 * nowhere: the stream has no call. */
static int refuse_stream(nghttp2_session *ng, struct mtd_conn *c, int32_t sid)
{
	MTD_DEBUG("client %s: stream %d: past max_concurrent_streams (%u): REFUSED_STREAM", c->peer, sid,
	          c->max_streams);
	if (nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, sid, NGHTTP2_REFUSED_STREAM) != 0)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* resets it all the same */
	return glitch(ng, c);
}

static int on_begin_headers(nghttp2_session *ng, const nghttp2_frame *frame, void *ud)
{
	struct mtd_conn *c = ud;
	c->block_bytes = 0; /* a block begins (one at a time: RFC 9113 §6.10) */
	if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	if (c->n_streams >= c->max_streams)
		return refuse_stream(ng, c, frame->hd.stream_id);
	/* The stream's start (its owner reads it: a call's start time). */
	c->last_active_ns = mtd_turn_now_ns(c->w);
	struct mtd_down_stream *ds = c->w->down_port->on_begin(c, frame->hd.stream_id);
	if (!ds)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* resets the stream */
	if (frame->hd.stream_id > c->max_sid)
		c->max_sid = frame->hd.stream_id;
	LIST_INSERT_HEAD(&c->down_streams, ds, link);
	c->n_streams++;
	nghttp2_session_set_stream_user_data(ng, frame->hd.stream_id, ds);
	return 0;
}

static int on_header(nghttp2_session *ng, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
	struct mtd_conn *c = ud;
	/* HPACK bomb: nghttp2 checks every field it decodes, those that go
	 * nowhere too (trailers, a refused stream's, an inbound peer's
	 * x-forwarded-client-cert), and a 1-byte reference can name a 4 KB
	 * field. The budget covers the whole block (RFC 9113 §6.5.2: name +
	 * value + 32); past it the stream is reset and nghttp2 only decodes
	 * the rest, unchecked. */
	size_t add = namelen + valuelen + 32;
	if ((size_t)c->block_bytes + add > c->w->rt->cfg->downstream.max_header_list_size) {
		MTD_DEBUG("client %s: stream %d: header block too large", c->peer, frame->hd.stream_id);
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	}
	c->block_bytes += (uint32_t)add;
	struct mtd_down_stream *ds = mtd_conn_field_ud(c, frame->hd.stream_id);
	if (!ds || frame->hd.type != NGHTTP2_HEADERS)
		return 0;
	if (frame->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0; /* request trailers: gRPC has none; not forwarded */
	if (c->in && mtd_inbound_header_dropped(name, namelen))
		return 0; /* an inbound peer's own x-forwarded-client-cert */
	return c->w->down_port->on_field(ds, name, namelen, value, valuelen, flags);
}

/* nghttp2 1.52 has no glitch limiter. Frames that cost us
 * work but carry nothing (DATA with neither data nor END_STREAM,
 * padded or not, CVE-2019-9518;
 * PRIORITY churn, CVE-2019-9513; frames of unknown types; invalid
 * frames) are counted per
 * connection, as is each stream the client made us reset (on_stream_close),
 * with one credit back per request that ended; past the budget the
 * connection ends with ENHANCE_YOUR_CALM. */
#define GLITCH_BUDGET 1000

static int glitch(nghttp2_session *ng, struct mtd_conn *c)
{
	if (++c->glitches <= GLITCH_BUDGET)
		return 0;
	MTD_WARN("client %s: too many empty or invalid frames, closing", c->peer);
	nghttp2_session_terminate_session(ng, NGHTTP2_ENHANCE_YOUR_CALM);
	mtd_conn_doom(c);
	return 0;
}

static int on_invalid_frame_recv(nghttp2_session *ng, const nghttp2_frame *frame, int lib_error_code, void *ud)
{
	struct mtd_conn *c = ud;
	if (frame->hd.stream_id == c->hdr_sid)
		c->hdr_start_ns = 0;
	return glitch(ng, ud);
}

/* Every frame header, before nghttp2 looks at the frame. */
static int on_begin_frame(nghttp2_session *ng, const nghttp2_frame_hd *hd, void *ud)
{
	struct mtd_conn *c = ud;
	int rv = mtd_conn_on_begin_frame(ng, hd, ud); /* RFC 9113 §5.1 on forgotten streams */
	if (rv != 0)
		return rv;
	/* Slowloris: a header block (HEADERS, then CONTINUATIONs until
	 * END_HEADERS) must complete within downstream.header_timeout (worker
	 * housekeeping). Any other frame means no block is open (RFC 9113
	 * §6.10: a block is contiguous). */
	if (hd->type == NGHTTP2_HEADERS) {
		if (!c->hdr_start_ns)
			c->hdr_start_ns = c->last_read_ns;
		c->hdr_sid = hd->stream_id;
	} else if (hd->type != NGHTTP2_CONTINUATION) {
		c->hdr_start_ns = 0;
	}
	return 0;
}

static int on_frame_recv(nghttp2_session *ng, const nghttp2_frame *frame, void *ud)
{
	struct mtd_conn *c = ud;
	struct mtd_down_stream *ds;
	/* PRIORITY frames never get here (nghttp2 skips them without RFC 7540
	 * priorities), nor frames of a type it does not know: the scan counts
	 * them (mtd_down_on_skipped_frame). */
	/* Empty: no data, padding or not (padlen counts the Pad Length
	 * byte too), so padding alone does not pass for a payload. */
	if (frame->hd.type == NGHTTP2_DATA && frame->hd.length <= frame->data.padlen &&
	    !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
		return glitch(ng, c);
	switch (frame->hd.type) {
	case NGHTTP2_SETTINGS:
		/* RFC 9113 §3.4: the preface ends with the client's first
		 * SETTINGS (nghttp2 checks that it comes first). */
		if (!(frame->hd.flags & NGHTTP2_FLAG_ACK))
			c->preface_done = true;
		break;
	case NGHTTP2_HEADERS:
		c->hdr_start_ns = 0;
		ds = stream_owner(ng, frame->hd.stream_id);
		if (!ds)
			return 0;
		if (frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
			c->w->down_port->on_headers(ds, frame->hd.flags & NGHTTP2_FLAG_END_STREAM);
		} else if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) {
			c->w->down_port->on_end(ds);
		}
		break;
	case NGHTTP2_DATA:
		ds = stream_owner(ng, frame->hd.stream_id);
		if (ds && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
			c->w->down_port->on_end(ds);
		break;
	default:
		break;
	}
	return 0;
}

static int on_data_chunk_recv(nghttp2_session *ng, uint8_t flags, int32_t sid, const uint8_t *data, size_t len,
                              void *ud)
{
	struct mtd_conn *c = ud;
	struct mtd_down_stream *ds = stream_owner(ng, sid);
	if (!ds) {
		/* Nobody will read these bytes: give the window back now. */
		nghttp2_session_consume(ng, sid, len);
		return 0;
	}
	c->w->down_port->on_data(ds, data, len);
	return 0;
}

/* CVE-2025-8671 (MadeYouReset): frames that make the server reset a
 * stream the client opened (more DATA than its content-length, a
 * WINDOW_UPDATE past the window, a malformed trailer...) start a call
 * each and escape nghttp2's limit on the client's own resets. nghttp2
 * resets such a stream with one of these codes; maitred's own resets of a
 * client's stream say INTERNAL_ERROR, REFUSED_STREAM (already a glitch:
 * refuse_stream) or STREAM_CLOSED on a stream already closed. */
static bool peer_made_us_reset(uint32_t code)
{
	return code == NGHTTP2_PROTOCOL_ERROR || code == NGHTTP2_FLOW_CONTROL_ERROR ||
	       code == NGHTTP2_FRAME_SIZE_ERROR || code == NGHTTP2_STREAM_CLOSED;
}

static int on_stream_close(nghttp2_session *ng, int32_t sid, uint32_t error_code, void *ud)
{
	struct mtd_conn *c = ud;
	struct mtd_down_stream *ds = stream_owner(ng, sid);
	mtd_conn_field_forget(c, sid);
	if (sid == c->hdr_sid)
		c->hdr_start_ns = 0; /* a block nghttp2 refused ends with its stream */
	mtd_conn_stream_closed(c, sid);
	if (!ds)
		return 0;
	/* A request's credit (glitch) is earned by its end: a close of both
	 * halves, or the client's own RST_STREAM (nghttp2's reset limit
	 * counts those). A stream the client made us reset costs one. */
	if (error_code == NGHTTP2_NO_ERROR || sid == c->rst_recv_sid) {
		if (c->glitches > 0)
			c->glitches--;
	} else if (peer_made_us_reset(error_code)) {
		glitch(ng, c);
	}
	nghttp2_session_set_stream_user_data(ng, sid, NULL);
	LIST_REMOVE(ds, link);
	c->n_streams--;
	c->last_active_ns = c->w->stream_end_ns = mtd_turn_now_ns(c->w);
	c->w->down_port->on_close(ds, error_code);
	return 0;
}

void mtd_down_on_skipped_frame(struct mtd_conn *c)
{
	glitch(c->ng, c);
}

/* The session options' stream-reset limit: new sessions take d's. */
static void set_reset_limit(struct mtd_worker *w, const struct mtd_cfg_downstream *d)
{
#ifdef HAVE_NGHTTP2_OPTION_SET_STREAM_RESET_RATE_LIMIT
	/* gRPC cancels are normal traffic: the library default (1000 burst,
	 * 33/s) would GOAWAY an app cancelling calls in a brownout. */
	nghttp2_option_set_stream_reset_rate_limit(w->down_opt, d->reset_burst, d->reset_rate);
#else
	(void)w, (void)d;
#endif
}

int mtd_down_setup(struct mtd_worker *w, const struct mtd_down_port *port)
{
	/* Response DATA is written by the stream's owner (its queue). */
	const struct mtd_conn_ng_hooks hooks = {on_header, on_frame_recv, on_data_chunk_recv, on_stream_close,
	                                        port->send_data};
	w->down_port = port;
	if (mtd_conn_ng_setup(&w->down_cbs, &w->down_opt, &hooks) < 0)
		return -ENOMEM;
	nghttp2_session_callbacks_set_on_begin_headers_callback(w->down_cbs, on_begin_headers);
	nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(w->down_cbs, on_invalid_frame_recv);
	nghttp2_session_callbacks_set_on_begin_frame_callback(w->down_cbs, on_begin_frame);
	/* The downstream server session. Window updates follow what
	 * was forwarded upstream (CVE-2019-9517), not what was received
	 * (mtd_conn_ng_setup). */
	nghttp2_option_set_no_closed_streams(w->down_opt, 1);
	nghttp2_option_set_max_settings(w->down_opt, 32);
	nghttp2_option_set_max_outbound_ack(w->down_opt, 1000);
	set_reset_limit(w, &w->rt->cfg->downstream);
#ifdef HAVE_NGHTTP2_OPTION_SET_MAX_CONTINUATIONS
	nghttp2_option_set_max_continuations(w->down_opt, 8);
#endif
	return 0;
}

bool mtd_down_settings_differ(const struct mtd_cfg_downstream *a, const struct mtd_cfg_downstream *b)
{
	return a->max_concurrent_streams != b->max_concurrent_streams ||
	       a->initial_window_size != b->initial_window_size ||
	       a->max_header_list_size != b->max_header_list_size || a->reset_burst != b->reset_burst ||
	       a->reset_rate != b->reset_rate;
}

void mtd_down_notice(struct mtd_conn *c, int64_t now_ns)
{
	if (c->notice_ns || c->state != MTD_CONN_READY)
		return; /* told already, or going */
	/* A lone GOAWAY refuses the streams the client sent before it saw
	 * it: under load, calls failed UNAVAILABLE ("GOAWAY received"). */
	if (nghttp2_submit_shutdown_notice(c->ng) == 0) {
		c->notice_ns = now_ns;
		mtd_conn_want_flush(c);
		return;
	}
	mtd_down_shutdown(c);
}

void mtd_down_tick(struct mtd_conn *c, int64_t now_ns)
{
	/* A tick after the notice: the streams the client opened before it
	 * saw the notice are here by now. */
	if (c->notice_ns == 0 || c->state != MTD_CONN_READY || now_ns - c->notice_ns < 1000000000)
		return;
	mtd_down_shutdown(c);
}

void mtd_down_settings_changed(struct mtd_worker *w)
{
	const struct mtd_cfg_downstream *d = &w->rt->cfg->downstream;
	unsigned n = 0;
	struct mtd_conn *c, *next;
	int64_t now = mtd_now_ns();

	w->down_settings_gen++;
	set_reset_limit(w, d);
	for (c = LIST_FIRST(&w->downs); c; c = next) {
		next = LIST_NEXT(c, link);
		if (c->state != MTD_CONN_READY || c->notice_ns)
			continue;
		n++;
		mtd_down_notice(c, now);
	}
	if (n > 0)
		MTD_INFO("worker %u: reload: downstream connection settings changed (max_concurrent_streams %u, "
		         "initial_window_size %u, max_header_list_size %u, reset_burst %u, reset_rate %u): %u "
		         "client connections get GOAWAY, calls in flight finish",
		         w->id, d->max_concurrent_streams, d->initial_window_size, d->max_header_list_size,
		         d->reset_burst, d->reset_rate, n);
}

void mtd_down_teardown(struct mtd_worker *w)
{
	mtd_conn_ng_teardown(w->down_cbs, w->down_opt);
}

static void down_on_close(struct mtd_conn *c);

const struct mtd_conn_ops mtd_down_ops = {
        .role = "client",
        .prescan = mtd_conn_prescan,
        .after_recv = mtd_conn_answer_late_data,
        .on_close = down_on_close,
        .on_skipped_frame = mtd_down_on_skipped_frame,
};

struct mtd_conn *mtd_down_conn_new(struct mtd_worker *w, int fd)
{
	const struct mtd_cfg_downstream *d = &w->rt->cfg->downstream;
	struct mtd_conn *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->ops = &mtd_down_ops;
	c->state = MTD_CONN_READY;
	c->w = w;
	c->fd = fd;
	c->accepted_ns = c->last_active_ns = c->last_read_ns = mtd_now_ns();
	c->scan_skip = NGHTTP2_CLIENT_MAGIC_LEN; /* the client preface, before any frame */
	LIST_INIT(&c->down_streams);
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[INET6_ADDRSTRLEN] = "?";
	uint16_t port = 0;
	if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0) {
		if (ss.ss_family == AF_INET) {
			struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
			inet_ntop(AF_INET, &s4->sin_addr, host, sizeof(host));
			port = ntohs(s4->sin_port);
		} else if (ss.ss_family == AF_INET6) {
			struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
			inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof(host));
			port = ntohs(s6->sin6_port);
		}
	}
	snprintf(c->peer, sizeof(c->peer), "%s:%u", host, port);
	/* What the kernel holds unsent for the client is output waiting too:
	 * without a bound, the send buffer (4 MiB on loopback) took some
	 * 100,000 small answers for a client that read none, and maitred read
	 * their calls (2 MB) before its writes ever blocked. Past this much
	 * unsent, writes block (and the output pressure sees it: conn.c). */
	int lowat = NOTSENT_LOWAT;
	if (setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat, sizeof(lowat)) < 0)
		MTD_DEBUG("client %s: TCP_NOTSENT_LOWAT: %s", c->peer, strerror(errno));
	if (mtd_conn_timer_init(c) < 0 ||
	    nghttp2_session_server_new3(&c->ng, w->down_cbs, c, w->down_opt, &w->ng_mem) != 0) {
		free(c);
		return NULL;
	}
	c->max_streams = d->max_concurrent_streams;
	c->stream_window = d->initial_window_size;
	c->settings_gen = w->down_settings_gen;
	nghttp2_settings_entry iv[] = {
	        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, NO_LIMIT}, /* c->max_streams on the wire */
	        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, d->initial_window_size},
	        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, d->max_header_list_size},
	        {NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, 4096},
	        {NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1},
	};
	/* The connection window bounds what all of a client's calls may have
	 * buffered here at once. */
	if (mtd_conn_submit_settings(c, iv, sizeof(iv) / sizeof(iv[0]), d->initial_window_size) != 0 ||
	    advertise_settings(c) < 0) {
		mtd_conn_free(c);
		return NULL;
	}
	return c;
}

int mtd_down_accept(struct mtd_worker *w, int fd)
{
	struct mtd_conn *c = mtd_down_conn_new(w, fd);
	if (!c)
		return -ENOMEM;
	if (mtd_conn_start_io(c) < 0) {
		mtd_conn_free(c);
		return -ENOMEM;
	}
	LIST_INSERT_HEAD(&w->downs, c, link);
	w->n_downs++;
	MTD_DEBUG("client %s: connected (worker %u)", c->peer, w->id);
	mtd_conn_want_flush(c);
	return 0;
}

int mtd_down_begin(struct mtd_conn *c)
{
	struct mtd_worker *w = c->w;
	LIST_INSERT_HEAD(&w->downs, c, link);
	w->n_downs++;
	/* The preface deadline runs from here: what came before (a TLS
	 * handshake) had its own. */
	c->accepted_ns = c->last_active_ns = c->last_read_ns = mtd_now_ns();
	c->state = MTD_CONN_READY;
	if (mtd_conn_start_io(c) < 0) {
		MTD_WARN("%s %s: cannot wait for its socket (event_add failed): closing", c->ops->role, c->peer);
		mtd_conn_close(c);
		return -EIO;
	}
	MTD_DEBUG("%s %s: connected (worker %u)", c->ops->role, c->peer, w->id);
	if (c->settings_gen != w->down_settings_gen) {
		/* Its SETTINGS and session were made before a reload changed
		 * them (at accept, before its TLS handshake): it goes too. */
		MTD_DEBUG("%s %s: made before the last downstream settings change: GOAWAY", c->ops->role, c->peer);
		mtd_down_notice(c, mtd_now_ns());
	}
	mtd_conn_want_flush(c);
	return 0;
}

void mtd_down_shutdown(struct mtd_conn *c)
{
	if (c->state == MTD_CONN_CLOSED)
		return;
	/* RFC 9113 §6.8: streams up to last_stream_id finish; the rest were
	 * not processed and the client may retry them elsewhere. The highest
	 * stream we made a call for is counted too, so no call in flight can
	 * fall above the line. */
	int32_t last = nghttp2_session_get_last_proc_stream_id(c->ng);
	if (c->max_sid > last)
		last = c->max_sid;
	int rv = nghttp2_submit_goaway(c->ng, NGHTTP2_FLAG_NONE, last, NGHTTP2_NO_ERROR, NULL, 0);
	if (rv != 0) {
		/* Without its GOAWAY the client never learns to go: the
		 * connection would outlive the drain. Its calls end now. */
		MTD_WARN("client %s: cannot queue GOAWAY (%s): closing", c->peer, nghttp2_strerror(rv));
		mtd_conn_close(c);
		return;
	}
	c->state = MTD_CONN_DRAINING;
	mtd_conn_want_flush(c);
}

int mtd_down_respond(struct mtd_conn *c, int32_t sid, const nghttp2_nv *nva, size_t n,
                     const nghttp2_data_provider *prd)
{
	return nghttp2_submit_response(c->ng, sid, nva, n, prd);
}

void mtd_down_reset(struct mtd_conn *c, int32_t sid, uint32_t code)
{
	if (nghttp2_submit_rst_stream(c->ng, NGHTTP2_FLAG_NONE, sid, code) != 0)
		mtd_conn_doom(c); /* not even that: the connection goes */
}

void mtd_down_consume(struct mtd_conn *c, int32_t sid, size_t n)
{
	nghttp2_session_consume(c->ng, sid, n);
}

void mtd_down_consume_closed(struct mtd_conn *c, size_t n)
{
	nghttp2_session_consume_connection(c->ng, n);
}

/* ops.on_close: its streams' owners learn the client is gone; leave the
 * worker's list. */
static void down_on_close(struct mtd_conn *c)
{
	struct mtd_worker *w = c->w;
	LIST_REMOVE(c, link);
	w->n_downs--;
	/* Its streams end here, as calls that ended: the quiet spell after
	 * them gives their memory back (mtd_worker_give_back). */
	if (!LIST_EMPTY(&c->down_streams))
		w->stream_end_ns = mtd_turn_now_ns(w);
	struct mtd_down_stream *ds;
	while ((ds = LIST_FIRST(&c->down_streams))) {
		LIST_REMOVE(ds, link);
		c->n_streams--;
		w->down_port->on_gone(ds);
	}
	if (!c->in) /* an inbound peer counts on its listener's (inbound.c) */
		mtd_worker_down_closed();
	MTD_DEBUG("client %s: closed", c->peer);
}
