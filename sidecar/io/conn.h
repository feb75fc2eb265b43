/* Socket I/O shared by both sides (conn.c): read -> nghttp2, gather
 * output -> one write per turn. Worker thread only. */
#ifndef MTD_CONN_H
#define MTD_CONN_H

#include <stdbool.h>
#include <stdint.h>

#include "sidecar/io/conn-t.h"

struct mtd_worker;

/* The connection window a session opens for streams of stream_window
 * bytes (downstream.initial_window_size, on both sides): sixteen streams'
 * worth, at most 64 MiB. It bounds what all of one peer's streams may
 * have buffered here at once. */
static inline int32_t mtd_conn_window(uint32_t stream_window)
{
	return (int32_t)(stream_window > (1u << 26) / 16 ? (1u << 26) : stream_window * 16);
}
/* Queue c's SETTINGS iv[0..n) and open its connection window to
 * mtd_conn_window(stream_window). 0, or nghttp2's error code. */
/* What both kinds of connection hand nghttp2 (downstream.c, upstream.c
 * add their own on top). */
struct mtd_conn_ng_hooks {
	nghttp2_on_header_callback on_header;
	nghttp2_on_frame_recv_callback on_frame_recv;
	nghttp2_on_data_chunk_recv_callback on_data_chunk_recv;
	nghttp2_on_stream_close_callback on_stream_close;
	nghttp2_send_data_callback send_data; /* DATA written by its owner (NGHTTP2_DATA_FLAG_NO_COPY) */
};
/* New callbacks with h set, and options with what every session of ours
 * takes: windows updated by hand (flow control follows what was forwarded,
 * CVE-2019-9517), a 4 KiB HPACK table to compress with, and
 * gRPC's edge spaces in values let through (RFC 9113 §8.2.1 forbids them;
 * gRPC's PROTOCOL-HTTP2 allows printable ASCII incl. 0x20, and servers
 * send them: a strict check would turn an application status into
 * PROTOCOL_ERROR; CR, LF and NUL are still refused). 0 or -ENOMEM (nothing
 * to free). mtd_conn_ng_teardown frees both. */
int mtd_conn_ng_setup(nghttp2_session_callbacks **cbs, nghttp2_option **opt, const struct mtd_conn_ng_hooks *h);
void mtd_conn_ng_teardown(nghttp2_session_callbacks *cbs, nghttp2_option *opt);

int mtd_conn_submit_settings(struct mtd_conn *c, const nghttp2_settings_entry *iv, size_t n, uint32_t stream_window);
/* Append n bytes (whole frames) to c's pending output, written with the
 * rest at its next flush. 0, or -ENOMEM (nothing appended). */
int mtd_conn_out_append(struct mtd_conn *c, const uint8_t *p, size_t n);
/* Mark c as having output to flush at the end of this event-loop turn. */
void mtd_conn_want_flush(struct mtd_conn *c);
/* The user data of stream sid, for a header field of it (c->field_ud). */
void *mtd_conn_field_ud(struct mtd_conn *c, int32_t sid);
/* Stream sid closed: forget it if it is the cached one. */
static inline void mtd_conn_field_forget(struct mtd_conn *c, int32_t sid)
{
	if (sid == c->field_sid)
		c->field_sid = 0, c->field_ud = NULL;
}
/* Read from the socket into the session. false when c was closed. */
bool mtd_conn_on_readable(struct mtd_conn *c);
/* Write pending output and whatever the session has. 0 or -errno (closed). */
int mtd_conn_flush(struct mtd_conn *c);
/* Register c's fd with the worker's base (read interest). 0, or -EIO
 * (libevent refused the events). */
int mtd_conn_start_io(struct mtd_conn *c);
/* c's timer (conn-t.h), set up once when c is made: 0, or -EINVAL
 * (libevent refused the event). */
int mtd_conn_timer_init(struct mtd_conn *c);
/* Run fn(c) in ms unless disarmed or armed again first. 0, or -ENOMEM
 * (libevent could not add it: its timer heap could not grow); the caller
 * decides what a connection without that bound means. */
int mtd_conn_timer_arm(struct mtd_conn *c, void (*fn)(struct mtd_conn *c), int64_t ms);
void mtd_conn_timer_disarm(struct mtd_conn *c);
/* c's session wants no more input (GOAWAY queued after a fatal error, or
 * sent with no stream left): stop reading the peer and close c within 5 s
 * whether or not its output drains (at the next turn if that deadline
 * cannot be armed). Never closes c itself: safe inside c's session's
 * callbacks. Idempotent. */
void mtd_conn_doom(struct mtd_conn *c);
/* Issue 6 (write_timeout, both sides): true when output has waited for c's
 * socket and the peer read none of it for more than timeout_ms. */
bool mtd_conn_write_stalled(const struct mtd_conn *c, int64_t now_ns, int64_t timeout_ms);
/* Tear down fd and events now; the memory is freed at the end of the turn. */
void mtd_conn_close(struct mtd_conn *c);
/* Free a CLOSED conn (worker, end of turn). */
void mtd_conn_free(struct mtd_conn *c);

struct mtd_bufq;
/* DATA frames carrying at least this many bytes are written from their
 * queue by a send_data callback (NGHTTP2_DATA_FLAG_NO_COPY); smaller ones
 * go through nghttp2's frame buffer, cheaper for them. */
#define MTD_NO_COPY_MIN 1024
/* For a send_data callback (nghttp2's NGHTTP2_DATA_FLAG_NO_COPY): append
 * one DATA frame to c's output, its 9-byte header framehd then n bytes of
 * q starting off bytes past its head, copied straight from the queue's
 * chunks (q must hold them; nothing is dropped). The frame goes out with
 * the rest of the flush, in the order nghttp2 serialized it. Returns 0,
 * NGHTTP2_ERR_PAUSE when c's output reached its high-water mark with this
 * frame (mem_send returns, so gathering stops there as it does for any
 * other frame), or NGHTTP2_ERR_CALLBACK_FAILURE: out of memory (nothing
 * appended; the session fails and c closes). No padding: maitred never
 * asks for any. */
int mtd_conn_send_data(struct mtd_conn *c, const uint8_t *framehd, const struct mtd_bufq *q, size_t off, size_t n);

/* The data provider of stream sid deferred and has bytes again: resume it
 * (what: "request", "response", for the message). If nghttp2 cannot (out of
 * memory) the stream is reset, or the connection doomed: never closed
 * under the caller. */
void mtd_conn_resume(struct mtd_conn *c, int32_t sid, const char *what);

/* RFC 9113 where nghttp2 1.52, run without closed-stream state and
 * without RFC 7540 priorities, lets a peer's mistake pass (conn.c has the
 * rules): frames on closed streams (§5.1), stream ids going backwards
 * (§5.1.1), PRIORITY on stream 0 or on itself (§5.3.1, §6.3). Both kinds
 * of connection use all of it: */
/* on_begin_frame callback (or the first thing one does): 0, or
 * NGHTTP2_ERR_CALLBACK_FAILURE with a GOAWAY queued and c doomed. */
int mtd_conn_on_begin_frame(nghttp2_session *ng, const nghttp2_frame_hd *hd, void *ud);
/* From on_stream_close: stream sid closed; remember how. */
void mtd_conn_stream_closed(struct mtd_conn *c, int32_t sid);
/* ops.prescan: the peer's bytes p[0..n), frame by frame, before nghttp2
 * gets them. 0, or -EPROTO with a GOAWAY queued and c doomed. A few
 * operations per frame; no allocation. */
int mtd_conn_prescan(struct mtd_conn *c, const uint8_t *p, size_t n);
/* ops.after_recv: the RST_STREAM(STREAM_CLOSED) the scan found due for
 * DATA after the peer's RST_STREAM, submitted now that nghttp2 has read
 * the bytes and closed the stream (one submitted while it was still open
 * went nowhere once the peer's closed it). Out of memory for one closes
 * c: the stream error could not be told. */
void mtd_conn_answer_late_data(struct mtd_conn *c);
/* A connection error found before nghttp2 saw the frame: GOAWAY with
 * code, c doomed (the read loop closes it). NGHTTP2_ERR_CALLBACK_FAILURE. */
int mtd_conn_error(nghttp2_session *ng, struct mtd_conn *c, uint32_t code, const char *why, int32_t sid);

/* Close now the sockets still lingering after a graceful close (conn.c:
 * shutdown, then read and drop for a bounded time); worker stop. */
void mtd_conn_linger_end_all(struct mtd_worker *w);

#endif
