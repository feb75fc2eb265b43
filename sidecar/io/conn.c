/* Socket I/O shared by downstream and upstream connections: read into the
 * HTTP/2 session, gather the session's output and write it once per turn.
 *
 * Output is gathered from nghttp2_session_mem_send() into c->out and written
 * with one write per flush, so a turn that touched many streams costs one
 * syscall per connection (on plain TCP, DATA payloads stay in their calls'
 * queues and one sendmsg gathers them with c->out: out_ref); a big read is fed to nghttp2 in slices, and what
 * each slice queued on other connections is serialized in between (memory,
 * not syscalls: gather_others). While the socket is backed up we stop pulling
 * frames out of the session and stop reading from the peer
 * (CVE-2019-9517, ping/settings/reset floods), which pushes back on it. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <event2/event.h>

#include "core/bufq.h"
#include "core/log.h"
#include "core/clock.h"
#include "sidecar/io/conn.h"
#include "sidecar/io/transport.h"
#include "sidecar/turn.h"

/* Stop gathering frames past this much unsent output, and stop reading
 * from the peer while that much waits for the socket. */
#define OUT_HIGH_WATER (64 * 1024)
/* A doomed connection (its session wants no more input: GOAWAY queued
 * after a fatal error, or sent with no stream left) ends this long after
 * the decision whether or not its output drained. */
#define DOOM_NS (5 * (int64_t)1000000000)
/* A connection's output buffer starts this big (a full DATA frame and
 * its header fit) and is held only while the connection has output or
 * streams: an idle one gives it back (out_release). */
#define OUT_INITIAL 16384
/* Past this, a drained buffer goes back to malloc even with streams open. */
#define OUT_KEEP_MAX 65536
/* Frames nghttp2 may hold queued for a peer before we stop reading it. */
#define OUTBOUND_QUEUE_MAX 4096
/* Bytes read from a peer while our writes to it block (it has read
 * nothing of what we owe it since): past this it is read no more until it
 * reads. Answers can be far smaller than what asked for them (a
 * Trailers-Only HEADERS of some 20 bytes for a call of up to
 * max_header_list_size), so the output's mark bounds what is read from a
 * peer that reads nothing only by that ratio. */
#define STALLED_READ_MAX (256 * 1024)
/* Reads per readable event, so one busy peer cannot starve the others. */
#define READ_ROUNDS 8
/* A read is fed to the session this much at a time, the frames it queued
 * elsewhere serialized in between (gather_others). */
#define RECV_SLICE 4096
/* A frame header's length (RFC 9113 §4.1). */
#define FRAME_HD_LEN 9
/* On plain TCP a DATA frame of at least this much is written from its
 * call's queue where it is (out_ref), its header in out, one sendmsg
 * gathering both: a smaller one is copied, cheaper than an iovec. */
#define REF_MIN 4096
/* Spans one connection's output may hold; past it frames are copied.
 * The mark bounds them anyway: 64 KiB in frames of 4 KiB or more, two
 * spans each where a frame crosses a chunk. */
#define REFS_MAX 64

/* Output not written yet: in out and in the spans. */
static size_t out_pending(const struct mtd_conn *c)
{
	return c->out_len - c->out_off + c->ref_bytes;
}

static void conn_io_cb(evutil_socket_t fd, short what, void *arg);

int mtd_conn_ng_setup(nghttp2_session_callbacks **cbs, nghttp2_option **opt, const struct mtd_conn_ng_hooks *h)
{
	if (nghttp2_session_callbacks_new(cbs) != 0)
		return -ENOMEM;
	nghttp2_session_callbacks_set_on_header_callback(*cbs, h->on_header);
	nghttp2_session_callbacks_set_on_frame_recv_callback(*cbs, h->on_frame_recv);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(*cbs, h->on_data_chunk_recv);
	nghttp2_session_callbacks_set_on_stream_close_callback(*cbs, h->on_stream_close);
	nghttp2_session_callbacks_set_send_data_callback(*cbs, h->send_data);
	if (nghttp2_option_new(opt) != 0) {
		nghttp2_session_callbacks_del(*cbs);
		return -ENOMEM;
	}
	nghttp2_option_set_no_auto_window_update(*opt, 1);
	nghttp2_option_set_max_deflate_dynamic_table_size(*opt, 4096);
	nghttp2_option_set_no_rfc9113_leading_and_trailing_ws_validation(*opt, 1);
	return 0;
}

void mtd_conn_ng_teardown(nghttp2_session_callbacks *cbs, nghttp2_option *opt)
{
	nghttp2_option_del(opt);
	nghttp2_session_callbacks_del(cbs);
}

int mtd_conn_submit_settings(struct mtd_conn *c, const nghttp2_settings_entry *iv, size_t n, uint32_t stream_window)
{
	int rv = nghttp2_submit_settings(c->ng, NGHTTP2_FLAG_NONE, iv, n);
	if (rv == 0)
		rv = nghttp2_session_set_local_window_size(c->ng, NGHTTP2_FLAG_NONE, 0, mtd_conn_window(stream_window));
	return rv;
}

void mtd_conn_want_flush(struct mtd_conn *c)
{
	if (c->in_dirty || c->state == MTD_CONN_CLOSED)
		return;
	c->in_dirty = true;
	TAILQ_INSERT_TAIL(&c->w->dirty, c, dirty_link);
	mtd_worker_schedule_flush(c->w);
}

void *mtd_conn_field_ud(struct mtd_conn *c, int32_t sid)
{
	if (sid != c->field_sid || !c->field_ud) {
		c->field_sid = sid;
		c->field_ud = nghttp2_session_get_stream_user_data(c->ng, sid);
	}
	return c->field_ud;
}

/* Read c again at the next turn of the loop though its socket may say
 * nothing: bytes the transport read ahead wake nobody (transport.h). A
 * timeout of 0 on the read event runs it once after the next wait, with
 * whatever else that wait found, on the next turn's clock (conn_io_cb's
 * EV_TIMEOUT puts the event back on the socket: libevent took it off to
 * run the timeout, and does not renew a timeout of 0). Not event_active,
 * which runs it again in this turn of the loop (turn.h): a peer that keeps
 * the read-ahead full (TLS, frames nghttp2 ignores) would hold the worker
 * in one turn, its other sockets and its timers unread, as long as it
 * sends. The read event must be on (added). */
static void read_next_turn(struct mtd_conn *c)
{
	static const struct timeval next_turn = {0, 0};
	if (event_add(&c->rev, &next_turn) != 0)
		event_active(&c->rev, EV_READ, 0); /* no room for the timeout: in this turn */
}

int mtd_conn_start_io(struct mtd_conn *c)
{
	if (event_assign(&c->rev, c->w->base, c->fd, EV_READ | EV_PERSIST, conn_io_cb, c) != 0 ||
	    event_assign(&c->wev, c->w->base, c->fd, EV_WRITE, conn_io_cb, c) != 0 || event_add(&c->rev, NULL) != 0)
		return -EIO;
	/* The TLS handshake may have read ahead the peer's first frames. */
	if (mtd_xprt_pending(c))
		read_next_turn(c);
	return 0;
}

static void conn_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_conn *c = arg;
	void (*fn)(struct mtd_conn *) = c->timer_fn;
	c->timer_fn = NULL;
	if (fn && c->state != MTD_CONN_CLOSED)
		fn(c);
}

int mtd_conn_timer_init(struct mtd_conn *c)
{
	return evtimer_assign(&c->timer, c->w->base, conn_timer_cb, c) == 0 ? 0 : -EINVAL;
}

int mtd_conn_timer_arm(struct mtd_conn *c, void (*fn)(struct mtd_conn *c), int64_t ms)
{
	struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
	c->timer_fn = fn;
	if (evtimer_add(&c->timer, &tv) != 0) {
		c->timer_fn = NULL;
		return -ENOMEM;
	}
	return 0;
}

void mtd_conn_timer_disarm(struct mtd_conn *c)
{
	evtimer_del(&c->timer);
	c->timer_fn = NULL;
}

/* Reading on or off. 0, or -EIO when reading could not be turned back on
 * (libevent refused the event): the peer would never be read again, the
 * caller closes c. */
static int set_read_paused(struct mtd_conn *c, bool paused)
{
	c->read_paused = paused;
	/* Reading stays on while the transport must read before it can write
	 * (transport.h): the output cannot drain otherwise. */
	bool on = !paused || c->want_read_on_write;
	if (on == (event_pending(&c->rev, EV_READ, NULL) != 0))
		return 0;
	if (on) {
		if (event_add(&c->rev, NULL) != 0)
			return -EIO;
		if (mtd_xprt_pending(c))
			read_next_turn(c);
	} else {
		event_del(&c->rev);
	}
	return 0;
}

static void doom_expired(struct mtd_conn *c)
{
	MTD_DEBUG("%s %s: closing: its output did not drain within %lld s of the GOAWAY", c->ops->role, c->peer,
	          (long long)(DOOM_NS / 1000000000));
	mtd_conn_close(c);
}

void mtd_conn_doom(struct mtd_conn *c)
{
	if (c->doomed_ns || c->state == MTD_CONN_CLOSED)
		return;
	c->doomed_ns = mtd_now_ns();
	/* Nothing the peer sends matters any more: do not read it (else a
	 * doomed peer is read and discarded without end). Pausing only
	 * deletes the event: it cannot fail. */
	set_read_paused(c, true);
	mtd_conn_want_flush(c);
	/* The timer's other use (the upstream connect timeout) is over. */
	if (mtd_conn_timer_arm(c, doom_expired, DOOM_NS / 1000000) < 0) {
		/* Without its deadline a doomed connection lasts as long as its
		 * peer does not read: it ends once the callbacks already due
		 * have run instead (event_active), after the flush above (not
		 * here: its session's callback may be running). */
		MTD_WARN("%s %s: cannot arm the close deadline: closing it now, after its output is flushed",
		         c->ops->role, c->peer);
		c->timer_fn = doom_expired;
		event_active(&c->timer, EV_TIMEOUT, 0);
	}
}

/* Move out[out_off, out_len) to the front; the spans waiting keep
 * their places among those bytes. */
static void out_shift(struct mtd_conn *c)
{
	size_t d = c->out_off;
	if (c->out_len > d)
		memmove(c->out, c->out + d, c->out_len - d);
	c->out_len -= d;
	c->out_off = 0;
	for (unsigned i = c->ref_head; i < c->n_refs; i++)
		c->refs[i].at -= d;
}

static int out_reserve(struct mtd_conn *c, size_t n)
{
	if (c->out_off > 0 && c->out_off == c->out_len)
		out_shift(c);
	if (c->out_cap - c->out_len >= n)
		return 0;
	if (c->out_off > 0) {
		out_shift(c);
		if (c->out_cap - c->out_len >= n)
			return 0;
	}
	size_t cap = c->out_cap ? c->out_cap : OUT_INITIAL;
	while (cap - c->out_len < n)
		cap *= 2;
	if (!c->out && cap == OUT_INITIAL && c->w->n_spare_out) {
		c->out = c->w->spare_out[--c->w->n_spare_out];
		c->out_cap = cap;
		return 0;
	}
	uint8_t *p = realloc(c->out, cap);
	if (!p)
		return -ENOMEM;
	c->out = p;
	c->out_cap = cap;
	return 0;
}

/* Queue q's bytes [off, off + n) after out's as spans, while c has
 * room for them. Returns the bytes queued so. */
static size_t out_ref(struct mtd_conn *c, const struct mtd_bufq *q, size_t off, size_t n)
{
	if (!c->refs && !(c->refs = malloc(REFS_MAX * sizeof(*c->refs))))
		return 0; /* copied instead */
	size_t done = 0;
	while (done < n && c->n_refs < REFS_MAX) {
		struct mtd_bufq_span sp[8];
		size_t room = REFS_MAX - c->n_refs, got;
		size_t k = mtd_bufq_ref_at(q, off + done, n - done, sp, room < 8 ? room : 8, &got);
		if (k == 0)
			break;
		for (size_t i = 0; i < k; i++)
			c->refs[c->n_refs++] = (struct mtd_out_ref){sp[i].chunk, sp[i].p, sp[i].n, c->out_len};
		c->ref_bytes += got;
		done += got;
	}
	return done;
}

int mtd_conn_send_data(struct mtd_conn *c, const uint8_t *framehd, const struct mtd_bufq *q, size_t off, size_t n)
{
	/* A span is written by sendmsg: TLS needs the bytes in one buffer
	 * (SSL_write), so it copies them (one record per flush). */
	bool by_ref = !c->xprt && n >= REF_MIN;
	if (out_reserve(c, FRAME_HD_LEN + (by_ref ? 0 : n)) < 0)
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	memcpy(c->out + c->out_len, framehd, FRAME_HD_LEN);
	c->out_len += FRAME_HD_LEN;
	size_t done = by_ref ? out_ref(c, q, off, n) : 0;
	if (done < n) {
		if (out_reserve(c, n - done) < 0 || mtd_bufq_copy_at(q, off + done, c->out + c->out_len, n - done) != n - done)
			return NGHTTP2_ERR_CALLBACK_FAILURE; /* the caller's bug: fail the session, not the frame's framing */
		c->out_len += n - done;
	}
	/* mem_send would go on to the next frame inside this same call: stop
	 * it at the mark, as gather() does between frames. */
	return out_pending(c) >= OUT_HIGH_WATER ? NGHTTP2_ERR_PAUSE : 0;
}

int mtd_conn_out_append(struct mtd_conn *c, const uint8_t *p, size_t n)
{
	if (out_reserve(c, n) < 0)
		return -ENOMEM;
	memcpy(c->out + c->out_len, p, n);
	c->out_len += n;
	return 0;
}

/* Give c's drained output buffer up (an idle connection holds none:
 * 16 KiB of address space and the pages its frames touched, 4 KiB of
 * private memory per idle connection): to the worker's spares if
 * one is free and the buffer has the initial size, so that calls one at a
 * time cost no malloc and free of it each (callgrind, lone calls: +450
 * instructions per call with one spare, for the client's and the upstream
 * connection's), else to malloc. */
static void out_release(struct mtd_conn *c)
{
	struct mtd_worker *w = c->w;
	if (c->out_cap == OUT_INITIAL && w->n_spare_out < MTD_SPARE_OUT)
		w->spare_out[w->n_spare_out++] = c->out;
	else
		free(c->out);
	c->out = NULL;
	c->out_cap = c->out_len = c->out_off = 0;
	free(c->refs); /* drained: no span waits */
	c->refs = NULL;
}

/* m bytes of the output were written: out's and the spans', in order. */
static void out_consume(struct mtd_conn *c, size_t m)
{
	while (m > 0) {
		struct mtd_out_ref *r = c->ref_head < c->n_refs ? &c->refs[c->ref_head] : NULL;
		size_t upto = r ? r->at : c->out_len;
		if (c->out_off < upto) {
			size_t k = upto - c->out_off < m ? upto - c->out_off : m;
			c->out_off += k;
			m -= k;
			continue;
		}
		if (!r)
			break; /* more than was pending: cannot happen */
		size_t k = r->n < m ? r->n : m;
		r->p += k;
		r->n -= k;
		c->ref_bytes -= k;
		m -= k;
		if (r->n == 0) {
			mtd_bufq_unref(r->chunk);
			c->ref_head++;
		}
	}
	if (c->ref_head == c->n_refs)
		c->ref_head = c->n_refs = 0;
}

/* The pending output as iovecs, in order, at most max (>= 2) of them.
 * Returns the count. */
static int out_iov(const struct mtd_conn *c, struct iovec *iov, int max)
{
	int k = 0;
	size_t pos = c->out_off;
	unsigned i;
	for (i = c->ref_head; i < c->n_refs && k + 2 <= max; i++) {
		const struct mtd_out_ref *r = &c->refs[i];
		if (r->at > pos)
			iov[k++] = (struct iovec){c->out + pos, r->at - pos};
		pos = r->at;
		iov[k++] = (struct iovec){(void *)r->p, r->n};
	}
	if (i == c->n_refs && pos < c->out_len && k < max)
		iov[k++] = (struct iovec){c->out + pos, c->out_len - pos};
	return k;
}

/* Write what is buffered. 0 when all written, MTD_IO_WANT_WRITE or
 * MTD_IO_WANT_READ (transport.h), or -errno. */
static int write_out(struct mtd_conn *c)
{
	while (out_pending(c) > 0) {
		ssize_t n;
		if (c->ref_head < c->n_refs) {
			struct iovec iov[2 * REFS_MAX + 1];
			n = mtd_xprt_writev(c, iov, out_iov(c, iov, 2 * REFS_MAX + 1));
		} else {
			n = mtd_xprt_write(c, c->out + c->out_off, c->out_len - c->out_off);
		}
		if (n > 0) {
			out_consume(c, (size_t)n);
			c->stalled_ns = 0; /* the peer reads */
			c->stalled_read = 0;
			continue;
		}
		if (mtd_io_wants(n)) {
			if (!c->stalled_ns)
				c->stalled_ns = mtd_now_ns();
			return (int)n;
		}
		return n < 0 ? (int)n : -EPIPE;
	}
	c->out_off = c->out_len = 0;
	return 0;
}

bool mtd_conn_write_stalled(const struct mtd_conn *c, int64_t now_ns, int64_t timeout_ms)
{
	return c->stalled_ns && now_ns - c->stalled_ns > timeout_ms * 1000000;
}

/* Serialize the session's queued frames into c->out, up to the high-water
 * mark, without writing. 0, or -errno with the connection closed. */
static int gather(struct mtd_conn *c)
{
	while (c->ng && out_pending(c) < OUT_HIGH_WATER) {
		const uint8_t *data;
		ssize_t n = nghttp2_session_mem_send(c->ng, &data);
		if (n < 0) {
			MTD_WARN("%s %s: HTTP/2 send failed: %s", c->ops->role, c->peer, nghttp2_strerror((int)n));
			mtd_conn_close(c);
			return -EPROTO;
		}
		if (n == 0)
			break;
		if (mtd_conn_out_append(c, data, (size_t)n) < 0) {
			mtd_conn_close(c);
			return -ENOMEM;
		}
	}
	return 0;
}

/* Between two slices of a read from `reader`: serialize what the slice
 * queued on the other dirty connections, still without writing (the turn's
 * flush does that, once per connection). A submitted frame waiting in
 * nghttp2 costs far more than its bytes: a request's HEADERS hold an
 * outbound item and a copy of the nv array (about 800 bytes with the
 * slab's rounding) until serialized, against some 40 bytes encoded; a
 * read of 512 requests held them all at once. Measured with
 * bench/proxy/smaps.sh at 512 calls in flight: worker arena 2048 -> 1856
 * KiB; instructions per call unchanged. A connection closed on the way
 * (a send error) has left the list: stop there, the flush does the rest. */
static void gather_others(struct mtd_worker *w, const struct mtd_conn *reader)
{
	struct mtd_conn *o;
	TAILQ_FOREACH(o, &w->dirty, dirty_link) {
		/* This runs once per slice over every dirty connection: one with
		 * nothing to send is skipped without a mem_send. */
		if (o == reader || (o->state != MTD_CONN_READY && o->state != MTD_CONN_DRAINING) || !o->ng ||
		    !nghttp2_session_want_write(o->ng))
			continue;
		if (gather(o) < 0 || o->state == MTD_CONN_CLOSED)
			break;
	}
}

/* While c's socket takes no more of its output: whether to stop reading
 * the peer (a peer that reads nothing is read no more than a bounded
 * amount). What it owes the peer counts wherever it waits: in c's
 * output buffer (gathering stops at the mark, so the pause must trigger at
 * it, not past it), in nghttp2's queue (frames submitted and not gathered:
 * small answers, each of which holds a stream until serialized), and in
 * the kernel (what the peer's reads would take first: bounded by
 * TCP_NOTSENT_LOWAT, and what was read since it took none). */
static bool output_pressed(const struct mtd_conn *c)
{
	return out_pending(c) >= OUT_HIGH_WATER || c->stalled_read > STALLED_READ_MAX ||
	       (c->ng && nghttp2_session_get_outbound_queue_size(c->ng) > OUTBOUND_QUEUE_MAX);
}

/* libevent refused a wait c needs (for readability or writability): c
 * would never move again. -EIO, c closed. */
static int io_wait_failed(struct mtd_conn *c)
{
	MTD_WARN("%s %s: cannot wait for its socket (event_add failed): closing", c->ops->role, c->peer);
	mtd_conn_close(c);
	return -EIO;
}

int mtd_conn_flush(struct mtd_conn *c)
{
	if (c->state == MTD_CONN_CLOSED)
		return -EPIPE;
	if (c->state == MTD_CONN_CONNECTING || c->state == MTD_CONN_HANDSHAKE)
		return 0; /* nothing may go out before the transport is up */
	for (;;) {
		int rc = gather(c);
		if (rc < 0)
			return rc;
		if (out_pending(c) == 0)
			break;
		rc = write_out(c);
		if (mtd_io_wants(rc)) {
			/* Wait for what the transport asked: a TLS write that must
			 * read first would spin on writability. */
			c->want_read_on_write = rc == MTD_IO_WANT_READ;
			/* CVE-2019-9517: a peer that does not read
			 * what we owe it is not read either. Gathering stops at
			 * the mark, so the pause must trigger at it, not past it. */
			if ((!c->want_read_on_write && event_add(&c->wev, NULL) != 0) ||
			    set_read_paused(c, c->doomed_ns || output_pressed(c)) < 0)
				return io_wait_failed(c);
			if (c->ng && !c->doomed_ns && !nghttp2_session_want_read(c->ng))
				mtd_conn_doom(c);
			return 0;
		}
		if (rc < 0) {
			MTD_DEBUG("%s %s: write failed: %s", c->ops->role, c->peer, strerror(-rc));
			mtd_conn_close(c);
			return rc;
		}
	}
	c->want_read_on_write = false;
	c->stalled_ns = 0;
	c->stalled_read = 0;
	if (set_read_paused(c, c->doomed_ns != 0) < 0)
		return io_wait_failed(c);
	/* Drained: a connection without streams keeps no output buffer, nor
	 * one that grew big. */
	if ((c->out || c->refs) && (c->n_streams == 0 || c->out_cap > OUT_KEEP_MAX))
		out_release(c);
	/* A session with nothing left to do on either side is finished. */
	if (c->ng && !nghttp2_session_want_read(c->ng) && !nghttp2_session_want_write(c->ng)) {
		MTD_DEBUG("%s %s: HTTP/2 session finished", c->ops->role, c->peer);
		mtd_conn_close(c);
		return -EPIPE;
	}
	return 0;
}

bool mtd_conn_on_readable(struct mtd_conn *c)
{
	struct mtd_worker *w = c->w;
	int round;
	for (round = 0; round < READ_ROUNDS; round++) {
		ssize_t n = mtd_xprt_read(c, w->rbuf, w->rbuf_len);
		if (n == MTD_IO_WANT_READ)
			break;
		if (n == MTD_IO_WANT_WRITE) {
			c->want_write_on_read = true;
			if (event_add(&c->wev, NULL) != 0) {
				io_wait_failed(c);
				return false;
			}
			break;
		}
		if (n <= 0) {
			MTD_DEBUG("%s %s: %s", c->ops->role, c->peer, n == 0 ? "closed by peer" : strerror((int)-n));
			mtd_conn_close(c);
			return false;
		}
		c->last_read_ns = mtd_turn_now_ns(c->w);
		if (c->stalled_ns)
			c->stalled_read += (size_t)n;
		if (c->ops->prescan && c->ops->prescan(c, w->rbuf, (size_t)n) < 0)
			break; /* doomed: its GOAWAY goes out with the flush */
		ssize_t rv = 0;
		for (size_t off = 0; rv >= 0 && off < (size_t)n;) {
			size_t len = (size_t)n - off < RECV_SLICE ? (size_t)n - off : RECV_SLICE;
			rv = nghttp2_session_mem_recv(c->ng, w->rbuf + off, len);
			off += len;
			if (rv < 0 || off == (size_t)n)
				break;
			gather_others(w, c);
			if (c->state == MTD_CONN_CLOSED || !nghttp2_session_want_read(c->ng))
				break;
		}
		if (rv >= 0 && c->ops->after_recv) {
			c->ops->after_recv(c); /* may close c */
			if (c->state == MTD_CONN_CLOSED)
				return false;
		}
		/* A session that wants no more input (a connection error queued
		 * its GOAWAY) is doomed: read no further. */
		if (rv >= 0 && c->state != MTD_CONN_CLOSED && !nghttp2_session_want_read(c->ng)) {
			mtd_conn_doom(c);
			break;
		}
		/* A peer that makes us queue frames (RST_STREAMs,
		 * ACKs) while not reading its socket is read no further until
		 * the queue has gone out (CVE-2019-9514 reset flood), nor one
		 * read that much since it stopped taking our output. */
		if (rv >= 0 && (nghttp2_session_get_outbound_queue_size(c->ng) > OUTBOUND_QUEUE_MAX ||
		                c->stalled_read > STALLED_READ_MAX)) {
			set_read_paused(c, true);
			break;
		}
		if (rv < 0 && c->doomed_ns)
			break; /* a callback found a connection error: GOAWAY queued */
		if (rv < 0) {
			/* Fatal for the connection: flood, too many
			 * CONTINUATIONs, bad preface... Send what GOAWAY nghttp2 queued. */
			MTD_WARN("%s %s: HTTP/2 error: %s", c->ops->role, c->peer, nghttp2_strerror((int)rv));
			if (rv != NGHTTP2_ERR_NOMEM && rv != NGHTTP2_ERR_CALLBACK_FAILURE)
				nghttp2_session_terminate_session(c->ng, NGHTTP2_PROTOCOL_ERROR);
			mtd_conn_flush(c);
			mtd_conn_close(c);
			return false;
		}
		if (c->state == MTD_CONN_CLOSED)
			return false;
		/* A short read drained a plain socket. A short TLS read may have
		 * stopped on what the next read reports (transport.c): go on
		 * until it wants more from the socket. */
		if (!c->ssl && (size_t)n < w->rbuf_len)
			break;
	}
	/* Out of rounds with bytes the transport read ahead: come back at
	 * the next turn, as the socket's readiness would not say so. */
	if (round == READ_ROUNDS && !c->read_paused && mtd_xprt_pending(c))
		read_next_turn(c);
	mtd_conn_want_flush(c);
	return true;
}

static void conn_io_cb(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_conn *c = arg;

	if (c->state == MTD_CONN_CLOSED)
		return;
	if (what & EV_WRITE) {
		if (c->want_write_on_read) {
			c->want_write_on_read = false;
			if (!mtd_conn_on_readable(c))
				return;
		}
		mtd_conn_want_flush(c);
	}
	/* EV_TIMEOUT: the read-ahead left for this turn (read_next_turn).
	 * libevent took the read event off the socket to run its timeout,
	 * and a timeout of 0 does not put it back (a persistent event's
	 * timeout is renewed only when set): put it back, or the socket is
	 * read no more. */
	if ((what & EV_TIMEOUT) && event_add(&c->rev, NULL) != 0) {
		io_wait_failed(c);
		return;
	}
	if (what & (EV_READ | EV_TIMEOUT))
		mtd_conn_on_readable(c);
}

/* ---- a graceful close ---------------------------------------------------- */

/* A socket closed with bytes of the peer's unread (a PING, a request
 * racing our GOAWAY) makes the kernel answer with a RST, and the peer may
 * lose what we sent last, the GOAWAY included (h2spec's case 7/1 saw it).
 * So a connection whose HTTP/2 was up ends with shutdown(SHUT_WR) (our FIN
 * after the last bytes), then reads and drops what still comes for a
 * bounded linger, then closes: on the peer's FIN or error, after
 * LINGER_MS or LINGER_BYTES dropped (a peer that floods is read no more
 * for it), or at once past LINGER_MAX lingering sockets per worker. */
#define LINGER_MS    1000
#define LINGER_BYTES (128 * 1024)
#define LINGER_MAX   256

struct mtd_linger {
	struct event ev;
	struct mtd_worker *w;
	int fd;
	int64_t until_ns;
	size_t dropped;
	LIST_ENTRY(mtd_linger) link;
};

static void linger_end(struct mtd_linger *l)
{
	event_del(&l->ev);
	close(l->fd);
	LIST_REMOVE(l, link);
	l->w->n_lingering--;
	free(l);
}

static void linger_cb(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_linger *l = arg;
	if (what & EV_READ) {
		char buf[4096];
		ssize_t n = 0;
		while (l->dropped < LINGER_BYTES && (n = read(fd, buf, sizeof(buf))) > 0)
			l->dropped += (size_t)n;
		if (l->dropped < LINGER_BYTES && n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) &&
		    mtd_now_ns() < l->until_ns)
			return; /* drained for now; the peer has not closed */
	}
	linger_end(l);
}

static void linger(struct mtd_worker *w, int fd)
{
	struct mtd_linger *l = w->n_lingering < LINGER_MAX ? calloc(1, sizeof(*l)) : NULL;
	struct timeval tv = {LINGER_MS / 1000, (LINGER_MS % 1000) * 1000};
	if (!l || shutdown(fd, SHUT_WR) < 0 || event_assign(&l->ev, w->base, fd, EV_READ | EV_PERSIST, linger_cb, l) != 0 ||
	    event_add(&l->ev, &tv) != 0) {
		free(l);
		close(fd); /* as before: abrupt, but bounded */
		return;
	}
	l->w = w;
	l->fd = fd;
	l->until_ns = mtd_now_ns() + (int64_t)LINGER_MS * 1000000;
	LIST_INSERT_HEAD(&w->lingering, l, link);
	w->n_lingering++;
}

void mtd_conn_linger_end_all(struct mtd_worker *w)
{
	struct mtd_linger *l;
	while ((l = LIST_FIRST(&w->lingering)))
		linger_end(l);
}

void mtd_conn_close(struct mtd_conn *c)
{
	if (c->state == MTD_CONN_CLOSED)
		return;
	c->state = MTD_CONN_CLOSED;
	if (c->fd >= 0) {
		event_del(&c->rev);
		event_del(&c->wev);
		event_del(&c->timer);
		mtd_xprt_close(c);
		if (c->ng)
			linger(c->w, c->fd); /* HTTP/2 was up: its GOAWAY must not be lost */
		else
			close(c->fd);
		c->fd = -1;
	}
	if (c->in_dirty) {
		TAILQ_REMOVE(&c->w->dirty, c, dirty_link);
		c->in_dirty = false;
	}
	/* Detach the calls: their other halves learn it from here. */
	c->ops->on_close(c);
	mtd_worker_bury(c->w, c);
}

void mtd_conn_free(struct mtd_conn *c)
{
	if (c->ng)
		nghttp2_session_del(c->ng);
	for (unsigned i = c->ref_head; i < c->n_refs; i++)
		mtd_bufq_unref(c->refs[i].chunk);
	free(c->refs);
	free(c->out);
	free(c);
}

void mtd_conn_resume(struct mtd_conn *c, int32_t sid, const char *what)
{
	if (nghttp2_session_resume_data(c->ng, sid) != 0) {
		/* Out of memory: the stream would wait forever. It ends instead
		 * (its close ends its owner), or, if even that cannot be queued,
		 * the connection (doomed: not closed under the caller). */
		MTD_WARN("%s %s: stream %d: cannot resume the %s: resetting it", c->ops->role, c->peer, sid, what);
		if (nghttp2_submit_rst_stream(c->ng, NGHTTP2_FLAG_NONE, sid, NGHTTP2_INTERNAL_ERROR) != 0) {
			nghttp2_session_terminate_session(c->ng, NGHTTP2_INTERNAL_ERROR);
			mtd_conn_doom(c);
		}
	}
	mtd_conn_want_flush(c);
}

/* ---- RFC 9113 where nghttp2 1.52 leaves it to us (both sides) ------------
 *
 * The sessions run without closed-stream state (a client session never
 * keeps any; a server one, no_closed_streams) and without RFC 7540
 * priorities, so nghttp2 ignores frames on a stream it has forgotten and
 * skips PRIORITY frames unread. The last MTD_CLOSED_RING closes of a
 * connection are remembered here with how they closed, which is what
 * decides what a late frame from the peer means:
 *
 *   PEER_RST  the peer reset it: §5.1 makes anything but PRIORITY a
 *             stream error STREAM_CLOSED. DATA gets that stream error
 *             (RST_STREAM(STREAM_CLOSED), the DATA dropped, the connection
 *             kept): grpc-java on Netty sends the DATA it had queued after
 *             its RST_STREAM(CANCEL), and a connection error would lose its
 *             other calls. A second RST_STREAM is ignored (§5.4.2 forbids
 *             answering one with one; Netty sends RST_STREAM(STREAM_CLOSED)
 *             when response HEADERS cross its CANCEL). HEADERS and
 *             WINDOW_UPDATE are connection errors (§5.4.1 allows it).
 *   END       both sides ended it: DATA / HEADERS / CONTINUATION are
 *             STREAM_CLOSED, a connection error, but for an upstream's
 *             second trailers block (HEADERS with END_STREAM), a stream
 *             error as after PEER_RST (gRPC's C core sends one when a
 *             deadline races its answer); WINDOW_UPDATE and RST_STREAM may
 *             still be in flight (§5.1 "closed", §6.9) and are ignored
 *   OUR_RST   maitred reset it while the peer could still send: every
 *             frame may be in flight and is ignored (§5.1 "closed")
 *
 * DATA after the peer's own END_STREAM is STREAM_CLOSED too, the stream
 * closed or not. On a connection whose peer opens the streams (a client's:
 * a server session), a HEADERS on a stream id lower than one
 * already opened that is in none of these is a connection PROTOCOL_ERROR
 * (§5.1.1); on an upstream connection it is a late frame nobody remembers
 * and is ignored, as are other frames on a forgotten stream, as nghttp2
 * does. HEADERS, WINDOW_UPDATE and RST_STREAM are judged in
 * mtd_conn_on_begin_frame; DATA, which nghttp2 drops on a forgotten stream
 * before any callback, in mtd_conn_prescan, which also follows the peer's
 * bytes for the PRIORITY rules (§5.3.1, §6.3). A lone CONTINUATION is
 * nghttp2's PROTOCOL_ERROR (§6.10). */
enum { CLOSED_PEER_RST = 1, CLOSED_END, CLOSED_OUR_RST };

static void remember_closed(struct mtd_conn *c, int32_t sid, uint8_t how)
{
	c->closed_ring[c->closed_next].sid = sid;
	c->closed_ring[c->closed_next].how = how;
	c->closed_next = (uint8_t)((c->closed_next + 1) % MTD_CLOSED_RING);
}

static uint8_t closed_how(const struct mtd_conn *c, int32_t sid)
{
	for (unsigned i = 0; i < MTD_CLOSED_RING; i++)
		if (c->closed_ring[i].sid == sid)
			return c->closed_ring[i].how;
	return 0;
}

void mtd_conn_stream_closed(struct mtd_conn *c, int32_t sid)
{
	if (sid == c->rst_recv_sid)
		remember_closed(c, sid, CLOSED_PEER_RST);
	else if (nghttp2_session_get_stream_remote_close(c->ng, sid) == 1)
		remember_closed(c, sid, CLOSED_END);
	else
		remember_closed(c, sid, CLOSED_OUR_RST);
}

static void scan_note(int32_t *ring, uint8_t *next, uint8_t *n, int32_t sid)
{
	ring[*next] = sid;
	*next = (uint8_t)((*next + 1) % MTD_SCAN_RST);
	if (*n < MTD_SCAN_RST)
		(*n)++;
}

/* Whether sid is among the n notes of ring (a connection that never saw a
 * reset looks at none; a full ring is compared whole, without a branch per
 * note). */
static bool scan_saw(const int32_t *ring, uint8_t n, int32_t sid)
{
	if (n < MTD_SCAN_RST) {
		for (unsigned i = 0; i < n; i++)
			if (ring[i] == sid)
				return true;
		return false;
	}
	unsigned hit = 0;
	for (unsigned i = 0; i < MTD_SCAN_RST; i++)
		hit |= ring[i] == sid;
	return hit != 0;
}

/* A frame on a stream the peer reset (DATA, before nghttp2 drops it and
 * counts it as consumed for the connection window; an upstream's HEADERS
 * or WINDOW_UPDATE): the §5.1 stream error, once for a run of such
 * frames, sent by mtd_conn_answer_late_data. */
static void data_after_peer_rst(struct mtd_conn *c, int32_t sid)
{
	if (sid == c->late_data_sid)
		return;
	c->late_data_sid = sid;
	for (unsigned i = 0; i < c->n_late_data_due; i++)
		if (c->late_data_due[i] == sid)
			return; /* interleaved with another stream's: answered once */
	if (c->n_late_data_due < MTD_LATE_DATA_DUE)
		c->late_data_due[c->n_late_data_due++] = sid;
}

void mtd_conn_answer_late_data(struct mtd_conn *c)
{
	unsigned n = c->n_late_data_due;
	c->n_late_data_due = 0;
	for (unsigned i = 0; i < n; i++) {
		int32_t sid = c->late_data_due[i];
		MTD_DEBUG("%s %s: stream %d: DATA after its RST_STREAM (RFC 9113 §5.1): RST_STREAM(STREAM_CLOSED)",
		          c->ops->role, c->peer, sid);
		int rv = nghttp2_submit_rst_stream(c->ng, NGHTTP2_FLAG_NONE, sid, NGHTTP2_STREAM_CLOSED);
		if (rv != 0) {
			MTD_WARN("%s %s: stream %d: cannot queue RST_STREAM (%s): closing", c->ops->role, c->peer, sid,
			         nghttp2_strerror(rv));
			mtd_conn_close(c);
			return;
		}
	}
}

int mtd_conn_error(nghttp2_session *ng, struct mtd_conn *c, uint32_t code, const char *why, int32_t sid)
{
	MTD_INFO("%s %s: stream %d: %s, closing (%s)", c->ops->role, c->peer, sid, why, nghttp2_http2_strerror(code));
	nghttp2_session_terminate_session(ng, code);
	mtd_conn_doom(c);
	return NGHTTP2_ERR_CALLBACK_FAILURE;
}

int mtd_conn_on_begin_frame(nghttp2_session *ng, const nghttp2_frame_hd *hd, void *ud)
{
	struct mtd_conn *c = ud;
	int32_t sid = hd->stream_id;
	if (hd->type == NGHTTP2_RST_STREAM)
		c->rst_recv_sid = sid; /* its close follows (mtd_conn_stream_closed) */
	else if (hd->type == NGHTTP2_DATA)
		return 0; /* on a closed stream, the scan answered it (nghttp2 drops it unseen) */
	/* A server session's peer opens the streams. */
	bool peer_opens = nghttp2_session_check_server_session(ng);
	if (hd->type == NGHTTP2_HEADERS && sid > c->top_sid && peer_opens) {
		c->top_sid = sid; /* a new stream: nghttp2 checks the rest */
		return 0;
	}
	if (sid == 0 || !(sid & 1) || sid > c->top_sid || nghttp2_session_find_stream(ng, sid))
		return 0;
	uint8_t how = closed_how(c, sid);
	/* A frame after the peer's own RST_STREAM is a stream error (RFC 9113
	 * §5.1), answered like late DATA, the connection kept. An upstream
	 * server can send one honestly: gRPC's C core resets a stream whose
	 * deadline passed and then sends the trailers it had queued for it.
	 * (A client's, downstream, is refused as before: nghttp2's server
	 * session would read the HEADERS as a new stream.) */
	if (how == CLOSED_PEER_RST && !peer_opens &&
	    (hd->type == NGHTTP2_HEADERS || hd->type == NGHTTP2_WINDOW_UPDATE)) {
		data_after_peer_rst(c, sid);
		return 0;
	}
	/* A second trailers block from an upstream, on a stream both sides
	 * ended: answered the same way, the connection kept. The RFC allows
	 * the connection error, but gRPC's C core sends exactly this when the
	 * call's deadline fires as its handler answers (its own trailers, then
	 * the DEADLINE_EXCEEDED ones; seen in test_interop_java about once in
	 * fifteen runs), and the connection error cost every other call on the
	 * connection. What follows no END_STREAM, or DATA, is still one. */
	if (how == CLOSED_END && !peer_opens && hd->type == NGHTTP2_HEADERS && (hd->flags & NGHTTP2_FLAG_END_STREAM)) {
		data_after_peer_rst(c, sid);
		return 0;
	}
	switch (hd->type) {
	case NGHTTP2_HEADERS:
		if (how == CLOSED_PEER_RST || how == CLOSED_END)
			return mtd_conn_error(ng, c, NGHTTP2_STREAM_CLOSED, "HEADERS on a closed stream (RFC 9113 §5.1)",
			                      sid);
		if (!how && peer_opens)
			return mtd_conn_error(ng, c, NGHTTP2_PROTOCOL_ERROR,
			                      "HEADERS on a stream id lower than one already used (RFC 9113 §5.1.1)", sid);
		return 0;
	case NGHTTP2_WINDOW_UPDATE:
		if (how == CLOSED_PEER_RST)
			return mtd_conn_error(ng, c, NGHTTP2_STREAM_CLOSED,
			                      "frame on a stream the peer reset (RFC 9113 §5.1)", sid);
		return 0;
	case NGHTTP2_RST_STREAM: /* ignored however it closed (see PEER_RST above) */
		return 0;
	default: /* DATA never gets here: nghttp2 drops it unseen (mtd_conn_prescan) */
		return 0;
	}
}

/* DATA on stream sid (odd, opened), seen by the scan before nghttp2 reads
 * it. 0, or -EPROTO with a connection error queued. */
static int scan_data(struct mtd_conn *c, int32_t sid)
{
	/* The stream states nghttp2 knows are current: closes happen between
	 * reads, or by a RST_STREAM or END_STREAM the scan saw before. */
	uint8_t how = nghttp2_session_find_stream(c->ng, sid) ? 0 : closed_how(c, sid);
	if (how == CLOSED_OUR_RST)
		return 0; /* may have been in flight: ignored */
	if (how == CLOSED_PEER_RST || scan_saw(c->scan_rst_sids, c->scan_rst_n, sid)) {
		data_after_peer_rst(c, sid);
		return 0;
	}
	if (how == CLOSED_END || scan_saw(c->scan_end_sids, c->scan_end_n, sid)) {
		mtd_conn_error(c->ng, c, NGHTTP2_STREAM_CLOSED, "DATA after the stream's END_STREAM (RFC 9113 §5.1)",
		               sid);
		return -EPROTO;
	}
	return 0;
}

static uint32_t be24(const uint8_t *p)
{
	return (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
}

static uint32_t be31(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]) & 0x7fffffffu;
}

/* The frame whose header is h carries a priority dependency: gather it
 * next, its header kept in scan_hdr for the check (h may point into the
 * read). */
static void prio_next(struct mtd_conn *c, const uint8_t *h)
{
	if (h != c->scan_hdr)
		memcpy(c->scan_hdr, h, 9);
	c->scan_in_prio = true;
}

int mtd_conn_prescan(struct mtd_conn *c, const uint8_t *p, size_t n)
{
	while (n > 0) {
		if (c->scan_skip) {
			size_t k = n < c->scan_skip ? n : c->scan_skip;
			p += k;
			n -= k;
			c->scan_skip -= (uint32_t)k;
			continue;
		}
		if (c->scan_in_prio) {
			size_t k = 4u - c->scan_have;
			if (k > n)
				k = n;
			memcpy(c->scan_dep + c->scan_have, p, k);
			c->scan_have = (uint8_t)(c->scan_have + k);
			p += k;
			n -= k;
			if (c->scan_have < 4)
				break;
			c->scan_in_prio = false;
			c->scan_have = 0;
			const uint8_t *h = c->scan_hdr; /* the frame's (prio_next) */
			uint32_t sid = be31(h + 5),
			         pad = h[3] == NGHTTP2_HEADERS && (h[4] & NGHTTP2_FLAG_PADDED) ? 1 : 0;
			/* RFC 9113 §5.3.1: a stream cannot depend on itself. */
			if (be31(c->scan_dep) == sid) {
				mtd_conn_error(c->ng, c, NGHTTP2_PROTOCOL_ERROR, "stream depends on itself (RFC 9113 §5.3.1)",
				               (int32_t)sid);
				return -EPROTO;
			}
			c->scan_skip = be24(h) - pad - 4;
			continue;
		}
		/* The frame header: read in place when the read holds all of it
		 * (nearly always), else gathered across reads in scan_hdr. */
		const uint8_t *h;
		if (c->scan_have == 0 && n >= 9) {
			h = p;
			p += 9;
			n -= 9;
		} else {
			size_t k = 9u - c->scan_have;
			if (k > n)
				k = n;
			memcpy(c->scan_hdr + c->scan_have, p, k);
			c->scan_have = (uint8_t)(c->scan_have + k);
			p += k;
			n -= k;
			if (c->scan_have < 9)
				break;
			c->scan_have = 0;
			h = c->scan_hdr;
		}
		uint32_t len = be24(h), sid = be31(h + 5);
		c->scan_skip = len;
		if (h[3] == NGHTTP2_RST_STREAM) {
			scan_note(c->scan_rst_sids, &c->scan_rst_next, &c->scan_rst_n, (int32_t)sid); /* closes sid before what follows */
		} else if (h[3] == NGHTTP2_DATA && (sid & 1) &&
		           ((int32_t)sid <= c->top_sid || scan_saw(c->scan_rst_sids, c->scan_rst_n, (int32_t)sid))) {
			if (scan_data(c, (int32_t)sid) < 0)
				return -EPROTO;
		} else if (h[3] == NGHTTP2_PRIORITY) {
			/* RFC 9113 §6.3: PRIORITY on stream 0 is a PROTOCOL_ERROR. */
			if (sid == 0) {
				mtd_conn_error(c->ng, c, NGHTTP2_PROTOCOL_ERROR, "PRIORITY on stream 0 (RFC 9113 §6.3)", 0);
				return -EPROTO;
			}
			if (c->ops->on_skipped_frame) {
				c->ops->on_skipped_frame(c);
				if (c->doomed_ns)
					return -EPROTO;
			}
			if (len == 5) { /* other lengths: nghttp2's FRAME_SIZE_ERROR */
				c->scan_skip = 0;
				prio_next(c, h);
			}
		} else if (h[3] > NGHTTP2_CONTINUATION && c->ops->on_skipped_frame) {
			/* A type nghttp2 does not know: skipped unread, as RFC 9113
			 * §4.1 says, after a frame header's work (HARDENING.md). */
			c->ops->on_skipped_frame(c);
			if (c->doomed_ns)
				return -EPROTO;
		} else if (h[3] == NGHTTP2_HEADERS && (h[4] & NGHTTP2_FLAG_PRIORITY)) {
			uint32_t pad = h[4] & NGHTTP2_FLAG_PADDED ? 1 : 0;
			if (len >= pad + 5) {
				c->scan_skip = pad; /* the pad length, then the dependency */
				prio_next(c, h);
			}
		}
		/* The peer's half ends with this frame: DATA after it is
		 * STREAM_CLOSED (scan_data), though nghttp2 may have forgotten
		 * the stream by then. */
		if ((h[3] == NGHTTP2_DATA || h[3] == NGHTTP2_HEADERS) && (h[4] & NGHTTP2_FLAG_END_STREAM))
			scan_note(c->scan_end_sids, &c->scan_end_next, &c->scan_end_n, (int32_t)sid);
	}
	return 0;
}
