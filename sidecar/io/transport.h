/* Transport: what carries a connection's bytes, plain TCP or TLS, behind
 * one ops table (as HAProxy's xprt_ops). transport.c is the only file
 * that calls OpenSSL.
 *
 * Results of the I/O ops, the same for every transport:
 *   > 0                 bytes moved
 *   0                   (read) the peer closed the stream cleanly
 *   MTD_IO_WANT_READ    nothing can move until the socket is readable
 *   MTD_IO_WANT_WRITE   nothing can move until the socket is writable
 *   other < 0           -errno: the connection is dead
 * The two waits are a range of their own, below every -errno (one
 * namespace per result): they once were -EAGAIN and -ENOMEM, and an
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
#include <sys/uio.h>

#include "config/config.h"
#include "identity/identity.h"

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
/* One sendmsg of iov[0..n) (a flush whose DATA stays in the calls'
 * queues, conn.c): plain TCP only (c->xprt NULL). Bytes sent, a WANT
 * result or -errno, as write. */
ssize_t mtd_xprt_writev(struct mtd_conn *c, const struct iovec *iov, int n);
int mtd_tls_handshake(struct mtd_conn *c, char *err, size_t errlen);
void mtd_xprt_close(struct mtd_conn *c);
bool mtd_xprt_pending(const struct mtd_conn *c);

/* TLS client context for a service's upstreams: TLS 1.2 or later, ALPN h2,
 * verification against ca_file, optional client certificate, no
 * renegotiation (RFC 9113 §9.2.1), session tickets kept per pool, the
 * server identity check (below) when tls sets one. NULL + err on failure. One per set of TLS files (runtime.c shares it between
 * services), used by every worker (SSL_new on a shared SSL_CTX is
 * thread-safe). */
struct ssl_ctx_st *mtd_tls_client_ctx_new(const struct mtd_cfg_tls *tls, char *err, size_t errlen);
/* The same for an HTTP/1.1 peer (the OTLP/HTTP collector): ALPN
 * http/1.1 instead of h2, the rest alike (server_identity aside, which
 * the config refuses there). */
struct ssl_ctx_st *mtd_tls_http1_client_ctx_new(const struct mtd_cfg_tls *tls, char *err, size_t errlen);
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
/* ---- identities and inbound listeners (mesh mode) ----------------------- */

/* Sessions (both sides): a resumed session stands for the full handshake
 * that first authenticated its peer for at most MTD_TLS_SESSION_MAX_S,
 * and only while the peer certificate it holds is inside its validity
 * (a resumption verifies no chain, and expiry is how short-lived
 * certificates are revoked); past either, the ticket is ignored (server)
 * or not offered (client) and a full handshake authenticates the peer
 * again. A resumed session's new tickets inherit the original handshake's
 * time, so chains of resumptions do not extend it. A server context's
 * ticket keys rotate every MTD_TLS_TICKET_KEY_S (a retired key decrypts
 * for as long again, its tickets renewed). */
#define MTD_TLS_SESSION_MAX_S 3600
#define MTD_TLS_TICKET_KEY_S  1800

/* Why an inbound handshake was refused (counted per listener). */
enum mtd_tls_refusal {
	MTD_TLS_REFUSED_NOT_TLS,   /* the first byte is no TLS record (plain h2c on the TLS port) */
	MTD_TLS_REFUSED_NO_CERT,   /* client_ca_file set, no client certificate */
	MTD_TLS_REFUSED_BAD_CERT,  /* a certificate that does not verify (another CA, expired...) */
	MTD_TLS_REFUSED_ALPN,      /* h2 not offered */
	MTD_TLS_REFUSED_PROTOCOL,  /* no common version or cipher */
	MTD_TLS_REFUSED_TIMEOUT,   /* not done within downstream.preface_timeout */
	MTD_TLS_REFUSED_OTHER,     /* the peer went away, or refused our certificate */
	MTD_TLS_REFUSED_N
};
/* "not_tls", "no_certificate", ...: the metric's reason label. */
const char *mtd_tls_refusal_name(enum mtd_tls_refusal r);

/* A server context for an inbound listener: TLS 1.2 or later, ALPN h2
 * only, the certificate chain and key (which must match), and with
 * client_ca_file a client certificate required that chains to it; session
 * tickets for resumption (valid on every worker), no renegotiation. NULL +
 * err. Shared by every worker (SSL_new on it is thread-safe); dropped with
 * mtd_tls_ctx_free(). */
struct ssl_ctx_st *mtd_tls_server_ctx_new(const char *cert_file, const char *key_file, const char *client_ca_file,
                                          char *err, size_t errlen);
/* Start a server handshake on c->fd and switch c to mtd_xprt_tls. 0 or
 * -ENOMEM. */
int mtd_tls_server_start(struct mtd_conn *c, struct ssl_ctx_st *ctx);
/* Drive it: 0 done (ALPN h2 agreed), a WANT result, or -EPROTO with the
 * reason in err and its kind in *why. */
int mtd_tls_server_handshake(struct mtd_conn *c, char *err, size_t errlen, enum mtd_tls_refusal *why);
/* The handshake resumed a session (a ticket): no full handshake. */
bool mtd_tls_resumed(const struct mtd_conn *c);
/* After a handshake: the peer certificate's identity (lib/identity's
 * typed text: its one URI SAN, else "dns:" and its first DNS SAN; "" with
 * none) into id (cap >= MTD_IDENTITY_TEXT_SIZE), why it has none into
 * *none, and the sha256 hex of its DER into hash. 0 (a certificate,
 * identity or not), -ENOENT (no certificate: id and hash "") or -ENOMEM. */
int mtd_tls_peer_identity(const struct mtd_conn *c, char *id, size_t cap, enum mtd_identity_none *none,
                          char hash[65]);
/* The same identity of ctx's own certificate: 0, or -ENOENT with id ""
 * (none). */
int mtd_tls_ctx_identity(struct ssl_ctx_st *ctx, char *id, size_t cap);
/* ... of the first certificate of a PEM file (what a registration
 * advertises): 0 with *none saying why id is "" if it is, or -errno (the
 * file cannot be read or holds no certificate). */
int mtd_tls_file_identity(const char *cert_file, char *id, size_t cap, enum mtd_identity_none *none);
/* Client side, secure naming: a context made from a tls with
 * server_identity checks, once the handshake is done, that the server's
 * certificate's identity equals that one (typed: a URI identity is met
 * only by the certificate's one URI SAN, a "dns:" one by its first DNS SAN
 * when it has no URI SAN; FROM_REGISTRY: the identity its endpoint's
 * record names, mtd_endpoint_identity(c->pool->ep)), else mtd_tls_handshake fails
 * -EPROTO with "TLS server identity mismatch: expected X, presented Y".
 * A certificate with several URI SANs has no identity and fails every
 * check. Without server_name, that replaces the host name check. */

/* A client SSL for a control-thread connection (gclient.c: etcd over TLS):
 * the same SNI and certificate check as an upstream's. NULL on out of
 * memory. */
struct ssl_st *mtd_tls_client_ssl_new(struct ssl_ctx_st *ctx, const char *server_name);
/* A client SSL for a control-thread connection to a service's endpoint
 * (orca_oob.c's out-of-band streams): named as that endpoint's calls are
 * (server_name, or with a server identity and no server_name the identity
 * alone, checked by mtd_tls_ssl_check_peer). NULL on out of memory. */
struct ssl_st *mtd_tls_endpoint_ssl_new(struct ssl_ctx_st *ctx, const char *server_name);
/* Once such an SSL's handshake is done: ALPN h2 and the server identity
 * the context requires (FROM_REGISTRY: registry_identity, the endpoint's
 * record's), as an upstream connection's handshake checks. 0, or -EPROTO
 * with the reason in err. */
int mtd_tls_ssl_check_peer(struct ssl_st *ssl, const char *registry_identity, char *err, size_t errlen);
void mtd_tls_ssl_free(struct ssl_st *ssl); /* NULL is a no-op */
/* OpenSSL's text for error code e (bufferevent_get_openssl_error()). */
void mtd_tls_error_string(unsigned long e, char *buf, size_t len);
/* Process-wide OpenSSL setup (ex_data index), before any worker starts. */
int mtd_tls_global_init(void);

#endif
