/* One upstream HTTP/2 client connection (upstream.c): connect, TLS,
 * SETTINGS, GOAWAY, PING. Worker thread only. */
#ifndef MTD_UPSTREAM_H
#define MTD_UPSTREAM_H

#include <stdbool.h>
#include <stdint.h>

#include <nghttp2/nghttp2.h>

struct mtd_worker;
struct mtd_conn;
struct mtd_pool;
struct mtd_up_stream;
struct mtd_conn_ops;

/* Per-worker nghttp2 callbacks and options. */
int mtd_up_setup(struct mtd_worker *w);
void mtd_up_teardown(struct mtd_worker *w);
/* A new connection of p's to its endpoint, connecting (non-blocking, its
 * connect timeout armed), in p's list: the connection; or NULL when it
 * failed at once, already counted as a connect failure of p's, its waiting
 * calls moved on and nothing left to free. */
struct mtd_conn *mtd_up_connect(struct mtd_pool *p);
/* Open s's stream on c with the request nva[0..n) (and prd's body, or
 * none): nghttp2 copies nva; the stream's user data is s, and s->conn,
 * s->sid are set. 0, or -ENOMEM / -EAGAIN (c takes no stream: stream ids
 * exhausted make it DRAINING). For an owner's submit (stream-t.h). */
int mtd_up_open_stream(struct mtd_conn *c, struct mtd_up_stream *s, const nghttp2_nv *nva, size_t n,
                       const nghttp2_data_provider *prd);
/* Housekeeping: close c if its peer read nothing for upstream.write_timeout
 * while output waits (a stuck upstream); its calls end UNAVAILABLE. true
 * when c was closed. */
bool mtd_up_check_write_stall(struct mtd_conn *c, int64_t now_ns);
/* A reload changed downstream.initial_window_size or max_header_list_size
 * (the bounds of what maitred buffers, which its upstream connections
 * advertise too): a connection already up sends the new SETTINGS and
 * moves its connection window to match; one still connecting sends them
 * when it is up. A SETTINGS nghttp2 cannot queue leaves the previous
 * values, logged. */
void mtd_up_settings_changed(struct mtd_conn *c);

/* The upstream kind's connection ops (conn-t.h), set by mtd_up_connect;
 * public for a test seam that makes its connections without sockets. */
extern const struct mtd_conn_ops mtd_up_conn_ops;

#endif
