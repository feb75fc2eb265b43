/* Transport: what carries a connection's bytes, plain TCP or TLS, behind
 * one ops table (STYLE.md; HAProxy xprt_ops). transport.c is the only file
 * that calls OpenSSL.
 *
 * Results of the I/O ops, the same for every transport:
 *   > 0                 bytes moved
 *   0                   (read) the peer closed the stream cleanly
 *   MTD_IO_WANT_READ    nothing can move until the socket is readable
 *   MTD_IO_WANT_WRITE   nothing can move until the socket is writable
 *   other < 0           -errno: the connection is dead
 * The two waits are a range of their own, below every -errno (STYLE.md:
 * one namespace per result): they once were -EAGAIN and -ENOMEM, and an
 * ENOMEM from read(2) or send(2) read as "wait for writability", so the
 * connection looped on a writable socket instead of closing.
 * Either op may want either direction: TLS may have to read before it can
 * write (a handshake message in the way) and write before it can read (a
 * KeyUpdate or alert to answer). The caller waits for exactly what was
 * asked, whatever it was trying to do, and retries the same op.
 *
 * Threads: a connection's transport is used only by the worker that owns
 * the connection. */
#ifndef MTD_SIDECAR_TRANSPORT_H
#define MTD_SIDECAR_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "config/config.h"

struct mtd_conn;
struct ssl_ctx_st;
struct ssl_session_st;
struct ssl_st;

/* Linux's errno values stay below 4096 (MAX_ERRNO, include/linux/err.h):
 * ours start far past them. */
#define MTD_IO__BASE (-0x10000)

enum mtd_io_want {
	MTD_IO_WANT_READ = MTD_IO__BASE - 1,  /* wait until the fd is readable */
	MTD_IO_WANT_WRITE = MTD_IO__BASE - 2, /* wait until the fd is writable */
};

_Static_assert(MTD_IO_WANT_READ < -4095 && MTD_IO_WANT_WRITE < -4095, "transport waits collide with -errno");

/* n (an op's result) is one of the two waits. */
static inline bool mtd_io_wants(ssize_t n)
{
	return n == MTD_IO_WANT_READ || n == MTD_IO_WANT_WRITE;
}

struct mtd_xprt_ops {
	const char *name; /* "tcp", "tls": for messages */
	/* Fill buf with up to len bytes. A TLS read gathers every record
	 * OpenSSL can decrypt without waiting, so one call drains what one
	 * readable event brought (results above). */
	ssize_t (*read)(struct mtd_conn *c, uint8_t *buf, size_t len);
	/* Send from buf. TLS: one SSL_write per call, so a flush gathered
	 * into one buffer goes out as one record (up to 16 KiB each, RFC 8446
	 * §5.1), not one per HTTP/2 frame. */
	ssize_t (*write)(struct mtd_conn *c, const uint8_t *buf, size_t len);
	/* Drive the handshake: 0 done (for TLS: ALPN h2 agreed), a WANT
	 * result, or -EPROTO with the reason in err. */
	int (*handshake)(struct mtd_conn *c, char *err, size_t errlen);
	/* Release the transport's state; the caller closes the fd. */
	void (*close)(struct mtd_conn *c);
	/* Bytes already taken off the socket and not handed over yet (TLS
	 * reads ahead): the fd's readiness will not report them, so a reader
	 * that stops before read says WANT_READ must come back by itself. */
	bool (*pending)(const struct mtd_conn *c);
};

/* Plain TCP. A connection with no transport set (c->xprt NULL) uses it. */
extern const struct mtd_xprt_ops mtd_xprt_tcp;
/* TLS client, set by mtd_tls_client_start(). */
extern const struct mtd_xprt_ops mtd_xprt_tls;

/* The connection's ops (conn.c and upstream.c call through these). */
ssize_t mtd_xprt_read(struct mtd_conn *c, uint8_t *buf, size_t len);
ssize_t mtd_xprt_write(struct mtd_conn *c, const uint8_t *buf, size_t len);
int mtd_tls_handshake(struct mtd_conn *c, char *err, size_t errlen);
void mtd_xprt_close(struct mtd_conn *c);
bool mtd_xprt_pending(const struct mtd_conn *c);

/* TLS client context for a service's upstreams: TLS 1.2 or later, ALPN h2,
 * verification against ca_file, optional client certificate, no
 * renegotiation (RFC 9113 §9.2.1), session tickets kept per pool. NULL +
 * err on failure. One per set of TLS files (runtime.c shares it between
 * services), used by every worker (SSL_new on a shared SSL_CTX is
 * thread-safe). */
struct ssl_ctx_st *mtd_tls_client_ctx_new(const struct mtd_cfg_tls *tls, char *err, size_t errlen);
/* Another reference to ctx (services with the same TLS files share one);
 * each reference is dropped with mtd_tls_ctx_free(). Returns ctx. */
struct ssl_ctx_st *mtd_tls_ctx_ref(struct ssl_ctx_st *ctx);
void mtd_tls_ctx_free(struct ssl_ctx_st *ctx);
/* Start a client handshake on c->fd and switch c to mtd_xprt_tls;
 * server_name for SNI and the certificate check, resume a session to
 * offer (may be NULL). 0 or -ENOMEM. */
int mtd_tls_client_start(struct mtd_conn *c, struct ssl_ctx_st *ctx, const char *server_name,
                         struct ssl_session_st *resume);
void mtd_tls_session_free(struct ssl_session_st *s);
/* A client SSL for a control-thread connection (gclient.c: etcd over TLS):
 * the same SNI and certificate check as an upstream's. NULL on out of
 * memory. */
struct ssl_st *mtd_tls_client_ssl_new(struct ssl_ctx_st *ctx, const char *server_name);
void mtd_tls_ssl_free(struct ssl_st *ssl); /* NULL is a no-op */
/* OpenSSL's text for error code e (bufferevent_get_openssl_error()). */
void mtd_tls_error_string(unsigned long e, char *buf, size_t len);
/* Process-wide OpenSSL setup (ex_data index), before any worker starts. */
int mtd_tls_global_init(void);

#endif
