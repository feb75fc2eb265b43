/* Transport: plain TCP or TLS over a non-blocking socket, two ops tables
 * (transport.h). The only file that calls OpenSSL. OpenSSL reads and writes
 * the socket itself: no BIO pairs, no extra copy.
 *
 * OpenSSL's per-thread error queue must be empty before SSL_read/SSL_write
 * for SSL_get_error() to be right; every failed call here empties it
 * afterwards instead of paying ERR_clear_error() before each call. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "core/log.h"
#include "sidecar/io/pool.h"
#include "sidecar/io/transport.h"

static int conn_ex_index = -1;

int mtd_tls_global_init(void)
{
	conn_ex_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
	return conn_ex_index < 0 ? -ENOMEM : 0;
}

static void last_error(char *err, size_t errlen, const char *what)
{
	unsigned long e = ERR_get_error();
	char buf[256];
	if (e)
		ERR_error_string_n(e, buf, sizeof(buf));
	else
		snprintf(buf, sizeof(buf), "%s", "unknown error");
	snprintf(err, errlen, "%s: %s", what, buf);
	ERR_clear_error();
}

/* TLS 1.3 tickets arrive after the handshake: keep the newest per pool so
 * the next connection to that endpoint resumes (no full handshake). */
static int new_session_cb(SSL *ssl, SSL_SESSION *sess)
{
	struct mtd_conn *c = SSL_get_ex_data(ssl, conn_ex_index);
	if (!c || !c->pool)
		return 0;
	/* Keep a copy: OpenSSL marks the connection's own session object
	 * non-resumable when the peer later closes without close_notify, which
	 * many servers do; the copy stays usable. */
	SSL_SESSION *copy = SSL_SESSION_dup(sess);
	if (!copy) {
		ERR_clear_error();
		return 0;
	}
	if (c->pool->tls_session)
		SSL_SESSION_free(c->pool->tls_session);
	c->pool->tls_session = copy;
	return 0; /* OpenSSL keeps its own reference to sess */
}

struct ssl_ctx_st *mtd_tls_client_ctx_new(const struct mtd_cfg_tls *tls, char *err, size_t errlen)
{
	static const unsigned char alpn[] = {2, 'h', '2'};
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	if (!ctx) {
		last_error(err, errlen, "SSL_CTX_new");
		return NULL;
	}
	/* RFC 9113 §9.2: TLS 1.2 or later for HTTP/2. */
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	/* RFC 9113 §9.2.1: HTTP/2 over TLS 1.2 MUST disable renegotiation. A
	 * server's HelloRequest is answered with a no_renegotiation alert. */
	SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
	                              SSL_MODE_RELEASE_BUFFERS);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	if (SSL_CTX_load_verify_locations(ctx, tls->ca_file, NULL) != 1) {
		last_error(err, errlen, tls->ca_file);
		goto fail;
	}
	if (tls->cert_file) {
		if (SSL_CTX_use_certificate_chain_file(ctx, tls->cert_file) != 1) {
			last_error(err, errlen, tls->cert_file);
			goto fail;
		}
		if (SSL_CTX_use_PrivateKey_file(ctx, tls->key_file, SSL_FILETYPE_PEM) != 1) {
			last_error(err, errlen, tls->key_file);
			goto fail;
		}
		if (SSL_CTX_check_private_key(ctx) != 1) {
			last_error(err, errlen, "client certificate and key do not match");
			goto fail;
		}
	}
	if (SSL_CTX_set_alpn_protos(ctx, alpn, sizeof(alpn)) != 0) {
		last_error(err, errlen, "ALPN");
		goto fail;
	}
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
	SSL_CTX_sess_set_new_cb(ctx, new_session_cb);
	return ctx;
fail:
	SSL_CTX_free(ctx);
	return NULL;
}

struct ssl_ctx_st *mtd_tls_ctx_ref(struct ssl_ctx_st *ctx)
{
	SSL_CTX_up_ref(ctx);
	return ctx;
}

void mtd_tls_ctx_free(struct ssl_ctx_st *ctx)
{
	SSL_CTX_free(ctx);
}

/* SNI and the name the certificate must carry (or, for an IP literal, its
 * IP SAN). 0 or -ENOMEM. */
static int set_peer_name(SSL *ssl, const char *server_name)
{
	unsigned char ip[16];
	bool is_ip = inet_pton(AF_INET, server_name, ip) == 1 || inet_pton(AF_INET6, server_name, ip) == 1;
	if (is_ip) {
		/* RFC 6066 §3: no SNI for IP literals; check the IP SAN. */
		if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), server_name) != 1)
			return -ENOMEM;
	} else {
		if (SSL_set_tlsext_host_name(ssl, server_name) != 1 || SSL_set1_host(ssl, server_name) != 1)
			return -ENOMEM;
	}
	return 0;
}

int mtd_tls_client_start(struct mtd_conn *c, struct ssl_ctx_st *ctx, const char *server_name,
                         struct ssl_session_st *resume)
{
	SSL *ssl = SSL_new(ctx);
	if (!ssl) {
		ERR_clear_error();
		return -ENOMEM;
	}
	SSL_set_ex_data(ssl, conn_ex_index, c);
	if (SSL_set_fd(ssl, c->fd) != 1 || set_peer_name(ssl, server_name) != 0)
		goto fail;
	if (resume)
		SSL_set_session(ssl, resume);
	/* Read ahead: one read(2) takes every record the socket holds (up to
	 * the record buffer) instead of two per record (header, then body).
	 * What it took and did not hand over yet is mtd_xprt_pending(). */
	SSL_set_read_ahead(ssl, 1);
	SSL_set_connect_state(ssl);
	c->ssl = ssl;
	c->tls_up = c->tls_drained = false;
	c->xprt = &mtd_xprt_tls;
	return 0;
fail:
	SSL_free(ssl);
	ERR_clear_error();
	return -ENOMEM;
}

struct ssl_st *mtd_tls_client_ssl_new(struct ssl_ctx_st *ctx, const char *server_name)
{
	SSL *ssl = SSL_new(ctx);
	if (ssl && set_peer_name(ssl, server_name) != 0) {
		SSL_free(ssl);
		ssl = NULL;
	}
	return ssl;
}

void mtd_tls_ssl_free(struct ssl_st *ssl)
{
	SSL_free(ssl);
}

void mtd_tls_error_string(unsigned long e, char *buf, size_t len)
{
	if (e)
		ERR_error_string_n(e, buf, len);
	else
		snprintf(buf, len, "%s", "TLS error");
}

static int tls_handshake(struct mtd_conn *c, char *err, size_t errlen)
{
	int rc = SSL_do_handshake(c->ssl);
	if (rc == 1) {
		const unsigned char *proto = NULL;
		unsigned int len = 0;
		SSL_get0_alpn_selected(c->ssl, &proto, &len);
		/* RFC 9113 §3.2: h2 over TLS is negotiated with ALPN. */
		if (len != 2 || memcmp(proto, "h2", 2) != 0) {
			snprintf(err, errlen, "TLS peer did not negotiate ALPN h2");
			return -EPROTO;
		}
		c->tls_up = true;
		MTD_DEBUG("upstream %s: %s, %s", c->peer, SSL_get_version(c->ssl),
		          SSL_session_reused(c->ssl) ? "session resumed" : "full handshake");
		return 0;
	}
	switch (SSL_get_error(c->ssl, rc)) {
	case SSL_ERROR_WANT_READ:
		return MTD_IO_WANT_READ;
	case SSL_ERROR_WANT_WRITE:
		return MTD_IO_WANT_WRITE;
	default: {
		long v = SSL_get_verify_result(c->ssl);
		if (v != X509_V_OK)
			snprintf(err, errlen, "TLS certificate verification failed: %s",
			         X509_verify_cert_error_string(v));
		else
			last_error(err, errlen, "TLS handshake failed");
		ERR_clear_error();
		return -EPROTO;
	}
	}
}

/* What an SSL_read/SSL_write result that moved nothing means for the caller
 * (transport.h). The error queue is left empty, as the next SSL_ call
 * needs it (SSL_get_error(3)). */
static ssize_t tls_result(struct mtd_conn *c, int rc, ssize_t dead)
{
	int e = SSL_get_error(c->ssl, rc);
	switch (e) {
	case SSL_ERROR_WANT_READ:
		return MTD_IO_WANT_READ;
	case SSL_ERROR_WANT_WRITE:
		return MTD_IO_WANT_WRITE;
	case SSL_ERROR_ZERO_RETURN:
		return 0;
	default:
		if (e == SSL_ERROR_SSL)
			MTD_DEBUG("upstream %s: TLS: %s", c->peer, ERR_reason_error_string(ERR_peek_error()));
		ERR_clear_error();
		return dead;
	}
}

static ssize_t tls_read(struct mtd_conn *c, uint8_t *buf, size_t len)
{
	/* The previous call stopped on an empty socket: say so without another
	 * read(2). Level-triggered readiness reports what arrived since. */
	if (c->tls_drained) {
		c->tls_drained = false;
		return MTD_IO_WANT_READ;
	}
	size_t got = 0;
	while (got < len) {
		size_t want = len - got;
		int n = SSL_read(c->ssl, buf + got, (int)(want > INT32_MAX ? INT32_MAX : want));
		if (n > 0) {
			got += (size_t)n;
			continue;
		}
		ssize_t rc = tls_result(c, n, -EPROTO);
		if (got == 0)
			return rc;
		/* Hand over what was decrypted; a condition other than an
		 * empty socket shows again on the next call (OpenSSL keeps it). */
		c->tls_drained = rc == MTD_IO_WANT_READ;
		break;
	}
	return (ssize_t)got;
}

static ssize_t tls_write(struct mtd_conn *c, const uint8_t *buf, size_t len)
{
	int n = SSL_write(c->ssl, buf, (int)(len > INT32_MAX ? INT32_MAX : len));
	if (n > 0)
		return n;
	/* WANT_READ here is real (a handshake message must be read first):
	 * waiting for writability instead would spin. */
	ssize_t rc = tls_result(c, n, -EPIPE);
	return rc == 0 ? -EPIPE : rc;
}

static void tls_close(struct mtd_conn *c)
{
	/* No close_notify round trip: the socket closes right after. The quiet
	 * SSL_shutdown() still marks the connection as properly shut down;
	 * without it SSL_free() takes the session for a bad one and makes it
	 * non-resumable (ssl_clear_bad_session), so no ticket would ever be
	 * reused. */
	SSL_set_quiet_shutdown(c->ssl, 1);
	if (c->tls_up)
		SSL_shutdown(c->ssl);
	SSL_free(c->ssl);
	ERR_clear_error();
	c->ssl = NULL;
	c->tls_up = false;
}

static bool tls_pending(const struct mtd_conn *c)
{
	return SSL_has_pending(c->ssl) == 1;
}

const struct mtd_xprt_ops mtd_xprt_tls = {
        .name = "tls",
        .read = tls_read,
        .write = tls_write,
        .handshake = tls_handshake,
        .close = tls_close,
        .pending = tls_pending,
};

static ssize_t tcp_result(ssize_t n, ssize_t again)
{
	if (n >= 0)
		return n;
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		return again;
	return -errno;
}

static ssize_t tcp_read(struct mtd_conn *c, uint8_t *buf, size_t len)
{
	return tcp_result(read(c->fd, buf, len), MTD_IO_WANT_READ);
}

static ssize_t tcp_write(struct mtd_conn *c, const uint8_t *buf, size_t len)
{
	return tcp_result(send(c->fd, buf, len, MSG_NOSIGNAL), MTD_IO_WANT_WRITE);
}

static int tcp_handshake(struct mtd_conn *c, char *err, size_t errlen)
{
	return 0;
}

static void tcp_close(struct mtd_conn *c) {}

static bool tcp_pending(const struct mtd_conn *c)
{
	return false;
}

const struct mtd_xprt_ops mtd_xprt_tcp = {
        .name = "tcp",
        .read = tcp_read,
        .write = tcp_write,
        .handshake = tcp_handshake,
        .close = tcp_close,
        .pending = tcp_pending,
};

static const struct mtd_xprt_ops *ops(const struct mtd_conn *c)
{
	return c->xprt ? c->xprt : &mtd_xprt_tcp;
}

ssize_t mtd_xprt_read(struct mtd_conn *c, uint8_t *buf, size_t len)
{
	return ops(c)->read(c, buf, len);
}

ssize_t mtd_xprt_write(struct mtd_conn *c, const uint8_t *buf, size_t len)
{
	return ops(c)->write(c, buf, len);
}

int mtd_tls_handshake(struct mtd_conn *c, char *err, size_t errlen)
{
	return ops(c)->handshake(c, err, errlen);
}

bool mtd_xprt_pending(const struct mtd_conn *c)
{
	return ops(c)->pending(c);
}

void mtd_xprt_close(struct mtd_conn *c)
{
	ops(c)->close(c);
	c->xprt = NULL;
}

void mtd_tls_session_free(struct ssl_session_st *s)
{
	SSL_SESSION_free(s);
}
