/* The local app's h2c connections: nghttp2 server sessions with the
 * hardening options (downstream.c). Worker thread only. */
#ifndef MTD_DOWNSTREAM_H
#define MTD_DOWNSTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <nghttp2/nghttp2.h>

#include "sidecar/io/downstream-t.h"

struct mtd_worker;
struct mtd_conn;

/* Per-worker nghttp2 callbacks and options; port: who owns the requests
 * (the call engine's, call/down_port.c), kept in w->down_port. */
int mtd_down_setup(struct mtd_worker *w, const struct mtd_down_port *port);
void mtd_down_teardown(struct mtd_worker *w);
/* An accepted client socket becomes one of w's connections (its SETTINGS
 * queued, its reads armed): 0, the fd then the connection's; or -ENOMEM,
 * nothing kept, the fd still the caller's to close (worker.c does, and
 * gives back the client count it admitted). */
int mtd_down_accept(struct mtd_worker *w, int fd);
/* The kind's ops (inbound.c wraps them for its peers' connections). */
extern const struct mtd_conn_ops mtd_down_ops;
/* Its ops.on_skipped_frame (a kind wrapping it sets the same): a PRIORITY
 * frame (CVE-2019-9513 churn) or one of a type nghttp2 does not know is
 * work for nothing, counted among the empty or invalid frames whose
 * excess ends the connection (a few, as clients that GREASE send, are
 * nothing: each request that ends gives one back). */
void mtd_down_on_skipped_frame(struct mtd_conn *c);
/* A client connection on fd: its session made and SETTINGS queued, but
 * not reading yet nor on the worker's list (mtd_down_begin does both),
 * for a kind that runs a TLS handshake first (inbound.c). NULL when out of
 * memory (fd left to the caller). */
struct mtd_conn *mtd_down_conn_new(struct mtd_worker *w, int fd);
/* Such a connection, its transport up: on the worker's list (drain, the
 * deadlines of housekeeping, the preface one from now), READY, reading;
 * told to go (as mtd_down_settings_changed tells the open ones) when a
 * reload changed the downstream settings since it was made. 0, or -EIO
 * with c closed (libevent refused its events). */
int mtd_down_begin(struct mtd_conn *c);
/* Tell the client to go away (SIGTERM drain, idle): GOAWAY, finish
 * streams; closed at once when the GOAWAY cannot be queued. */
void mtd_down_shutdown(struct mtd_conn *c);
/* Tell the client to go in two steps, as gRPC servers do, so that no
 * stream it sent meanwhile is refused (RFC 9113 §6.8): a GOAWAY that
 * refuses nothing (last stream id 2^31-1: it opens no new stream here)
 * now, and the real one (mtd_down_shutdown) from mtd_down_tick a second
 * later at the earliest. Once per connection; a connection not READY,
 * or told already, is left as it is; mtd_down_shutdown at once when the
 * notice cannot be queued. For a reload's new settings and an inbound
 * peer's max_connection_age. */
void mtd_down_notice(struct mtd_conn *c, int64_t now_ns);
/* Housekeeping (each second) for client connection c: the real GOAWAY a
 * second after mtd_down_notice's, at the earliest. */
void mtd_down_tick(struct mtd_conn *c, int64_t now_ns);

struct mtd_cfg_downstream;
/* Whether a and b differ in what a client connection takes once, at its
 * start: its SETTINGS (max_concurrent_streams, initial_window_size,
 * max_header_list_size) and its session's stream-reset limit
 * (reset_burst, reset_rate). The other downstream keys are read where
 * they apply, from the snapshot in force. */
bool mtd_down_settings_differ(const struct mtd_cfg_downstream *a, const struct mtd_cfg_downstream *b);
/* The snapshot w just took changed those settings: sessions made from now
 * on take the new reset limit, and every open client connection (the
 * app's and inbound peers') gets GOAWAY, its calls in flight finishing,
 * so that its client reconnects under the new settings, as with a
 * maitred started afresh on them, in two steps (mtd_down_notice).
 * Connections of inbound peers
 * still in their TLS handshake (their SETTINGS queued at accept) are told
 * as they begin (mtd_down_begin). */
void mtd_down_settings_changed(struct mtd_worker *w);

/* ---- what a request stream's owner asks of its connection -----------------
 *
 * The downstream port's other direction (its events: downstream-t.h):
 * stream sid of c, whose owner answers it. The connection is written at
 * the end of the turn (the caller marks it: mtd_conn_want_flush). */

/* Submit the response's headers nva[0..n), then DATA from prd (NULL: the
 * headers end the stream, Trailers-Only). 0, or nghttp2's error with
 * nothing submitted. */
int mtd_down_respond(struct mtd_conn *c, int32_t sid, const nghttp2_nv *nva, size_t n,
                     const nghttp2_data_provider *prd);
/* Reset the stream (RST_STREAM code); when not even that can be queued,
 * the connection is doomed (it goes, with its other streams). */
void mtd_down_reset(struct mtd_conn *c, int32_t sid, uint32_t code);
/* n request bytes of sid are read by their owner (kept, sent or
 * dropped): the client's stream and connection windows reopen. */
void mtd_down_consume(struct mtd_conn *c, int32_t sid, size_t n);
/* The same for a stream that closed: its connection's window only. */
void mtd_down_consume_closed(struct mtd_conn *c, size_t n);

#endif
