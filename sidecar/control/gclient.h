/* A small gRPC client for the control thread: one h2c connection (nghttp2
 * client session on a bufferevent of the control loop's event base) and the
 * unary or streaming calls on it. What the etcd client and the register's
 * health check speak; the data plane never uses it (its upstreams are
 * pool.c / upstream.c).
 *
 * Threads: everything here runs on the thread that runs `base`.
 *
 * Lifetime: callbacks may free the connection (mtd_gcli_free) or cancel a
 * call from inside any callback; the memory goes away once the outermost
 * callback returned. After mtd_gcli_free() or mtd_gcli_call_cancel() no
 * callback of that object runs again.
 *
 * Bounds: a response message larger than MTD_GCLI_MAX_MSG (or the call's
 * own limit, mtd_gcli_call_limit) fails its call (RESOURCE_EXHAUSTED),
 * unless the call has on_too_large: then it is skipped unread, never
 * buffered; compressed messages are refused (maitred sends no
 * grpc-accept-encoding, so a server must not compress). */
#ifndef MTD_GCLIENT_H
#define MTD_GCLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <protobuf-c/protobuf-c.h>

#define MTD_GCLI_MAX_MSG (64u << 20)

struct event_base;
struct mtd_gcli;
struct mtd_gcli_call;

struct mtd_gcli_cbs {
	/* The connection is usable (TCP up, preface sent). Optional. */
	void (*on_up)(struct mtd_gcli *c, void *arg);
	/* The connection is gone: connect refused or timed out, EOF, GOAWAY,
	 * a keepalive PING unanswered, a protocol error. reason says which
	 * ("connection refused"). Every call still open got its on_close
	 * (UNAVAILABLE, reason) before this. The owner frees c (here or
	 * later); nothing else happens on it. */
	void (*on_down)(struct mtd_gcli *c, const char *reason, void *arg);
};

struct mtd_gcli_call_cbs {
	/* One complete response message (borrowed for the callback). */
	void (*on_msg)(struct mtd_gcli_call *call, const uint8_t *msg, size_t len, void *arg);
	/* The call ended: status is the gRPC status (0 = OK) from the trailers,
	 * or one maitred decided (UNAVAILABLE when the connection went away;
	 * an answer without grpc-status by its HTTP status as gRPC maps it:
	 * 404 UNIMPLEMENTED, 503 UNAVAILABLE...),
	 * message its grpc-message or maitred's reason ("" when none). The
	 * call is freed when this returns. */
	void (*on_close)(struct mtd_gcli_call *call, int status, const char *message, void *arg);
	/* Optional: a response message of len bytes, past the call's limit,
	 * skipped as it arrives (its bytes are never held); the call goes on.
	 * Without it such a message fails the call. */
	void (*on_too_large)(struct mtd_gcli_call *call, size_t len, void *arg);
};

/* Connect to sa (numeric; authority is the :authority sent, e.g.
 * "127.0.0.1:2379"). ssl, when not NULL (mtd_tls_client_ssl_new), makes it
 * TLS (:scheme https); the connection owns it from here on, also on
 * failure. connect_timeout_ms bounds the TCP connect and TLS handshake;
 * keepalive_ms > 0 sends a PING that often and declares the connection
 * down when one is not answered within keepalive_ms. Calls may be started
 * at once (they are sent when the connection is up). NULL on out of memory
 * or a socket error (errno set). */
struct ssl_st;
struct mtd_gcli *mtd_gcli_new(struct event_base *base, const struct sockaddr *sa, socklen_t salen,
                              const char *authority, struct ssl_st *ssl, int64_t connect_timeout_ms,
                              int64_t keepalive_ms, const struct mtd_gcli_cbs *cbs, void *arg);
/* Over TLS: once the handshake is done, check the peer as an upstream
 * connection to a service's endpoint is checked (mtd_tls_ssl_check_peer:
 * ALPN h2, the server identity; registry_identity, copied, is the
 * endpoint's record's), else the connection goes down with the reason.
 * Call before the connection is up. 0 or -ENOMEM. */
int mtd_gcli_check_peer(struct mtd_gcli *c, const char *registry_identity);
/* Close c now (RST of nothing: the socket just closes) and cancel its calls
 * without calling them back. NULL is a no-op. */
void mtd_gcli_free(struct mtd_gcli *c);

/* Start a call on path ("/etcdserverpb.KV/Range"). token, when not NULL,
 * is sent as the "token" metadata (etcd authentication). NULL when the
 * connection is down or out of memory. */
struct mtd_gcli_call *mtd_gcli_call_start(struct mtd_gcli *c, const char *path, const char *token,
                                          const struct mtd_gcli_call_cbs *cbs, void *arg);
/* The largest response message call accepts from now on (at most
 * MTD_GCLI_MAX_MSG, the default): what a stream of small messages sets
 * so that a peer cannot make it hold a large one. */
void mtd_gcli_call_limit(struct mtd_gcli_call *call, uint32_t max_msg);
/* Queue one request message; last = half-close after it (a unary call
 * sends one message with last = true). 0, -ENOMEM, -EPIPE (already
 * half-closed or ended). */
int mtd_gcli_call_send(struct mtd_gcli_call *call, const ProtobufCMessage *msg, bool last);
/* Cancel: RST_STREAM(CANCEL); no callback of call runs again. */
void mtd_gcli_call_cancel(struct mtd_gcli_call *call);

#endif
