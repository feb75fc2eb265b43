/* The local app's h2c connections: nghttp2 server sessions with the
 * hardening options (downstream.c). Worker thread only. */
#ifndef MTD_DOWNSTREAM_H
#define MTD_DOWNSTREAM_H

#include <stddef.h>
#include <stdint.h>

struct mtd_worker;
struct mtd_conn;
struct mtd_call;

/* Per-worker nghttp2 callbacks and options. */
int mtd_down_setup(struct mtd_worker *w);
void mtd_down_teardown(struct mtd_worker *w);
int mtd_down_accept(struct mtd_worker *w, int fd);
/* Tell the client to go away (SIGTERM drain): GOAWAY, finish streams. */
void mtd_down_shutdown(struct mtd_conn *c);
/* Called when a call's downstream side may send more (response data). */
void mtd_down_resume(struct mtd_call *call);
/* c is closing: detach its calls, leave the worker's list. */
void mtd_down_on_close(struct mtd_conn *c);
/* Follow the client's bytes p[0..n) frame by frame, before nghttp2 gets
 * them, for what nghttp2 1.52 skips unread without RFC 7540 priorities:
 * RFC 9113 §6.3 PRIORITY on stream 0, §5.3.1 a stream depending on itself
 * (PRIORITY, or HEADERS with the PRIORITY flag). 0, or -EPROTO with a
 * GOAWAY(PROTOCOL_ERROR) queued and c doomed: feed nothing more. A few
 * operations per frame; no allocation. */
int mtd_down_prescan(struct mtd_conn *c, const uint8_t *p, size_t n);
/* After nghttp2 read what mtd_down_prescan saw: the RST_STREAM(STREAM_CLOSED)
 * it found due for DATA after the client's RST_STREAM (RFC 9113 §5.1),
 * submitted now that nghttp2 has closed the stream (a RST_STREAM submitted
 * while the stream was still open went nowhere once the client's closed it). */
void mtd_down_after_recv(struct mtd_conn *c);

#endif
