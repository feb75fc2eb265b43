/* Transport: plain TCP or TLS over a non-blocking socket. The only file that
 * calls OpenSSL (STYLE.md: transport behind a small interface). OpenSSL reads
 * and writes the socket itself: no BIO pairs, no extra copy. */
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
#include "sidecar/sidecar.h"

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
	if (!copy)
		return 0;
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

void mtd_tls_ctx_free(struct ssl_ctx_st *ctx)
{
	SSL_CTX_free(ctx);
}

int mtd_tls_client_start(struct mtd_conn *c, struct ssl_ctx_st *ctx, const char *server_name,
                         struct ssl_session_st *resume)
{
	SSL *ssl = SSL_new(ctx);
	if (!ssl)
		return -ENOMEM;
	SSL_set_ex_data(ssl, conn_ex_index, c);
	if (SSL_set_fd(ssl, c->fd) != 1)
		goto fail;
	unsigned char ip[16];
	bool is_ip = inet_pton(AF_INET, server_name, ip) == 1 || inet_pton(AF_INET6, server_name, ip) == 1;
	if (is_ip) {
		/* RFC 6066 §3: no SNI for IP literals; check the IP SAN. */
		if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), server_name) != 1)
			goto fail;
	} else {
		if (SSL_set_tlsext_host_name(ssl, server_name) != 1 || SSL_set1_host(ssl, server_name) != 1)
			goto fail;
	}
	if (resume)
		SSL_set_session(ssl, resume);
	SSL_set_connect_state(ssl);
	c->ssl = ssl;
	return 0;
fail:
	SSL_free(ssl);
	return -ENOMEM;
}

int mtd_tls_handshake(struct mtd_conn *c, char *err, size_t errlen)
{
	ERR_clear_error();
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
		return MTD_IO_AGAIN;
	case SSL_ERROR_WANT_WRITE:
		return MTD_IO_WANT_WRITE;
	default: {
		long v = SSL_get_verify_result(c->ssl);
		if (v != X509_V_OK)
			snprintf(err, errlen, "TLS certificate verification failed: %s",
			         X509_verify_cert_error_string(v));
		else
			last_error(err, errlen, "TLS handshake failed");
		return -EPROTO;
	}
	}
}

ssize_t mtd_xprt_read(struct mtd_conn *c, uint8_t *buf, size_t len)
{
	if (!c->ssl) {
		ssize_t n = read(c->fd, buf, len);
		if (n >= 0)
			return n;
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
			return MTD_IO_AGAIN;
		return -errno;
	}
	ERR_clear_error();
	int n = SSL_read(c->ssl, buf, (int)(len > INT32_MAX ? INT32_MAX : len));
	if (n > 0)
		return n;
	switch (SSL_get_error(c->ssl, n)) {
	case SSL_ERROR_WANT_READ:
		return MTD_IO_AGAIN;
	case SSL_ERROR_WANT_WRITE:
		return MTD_IO_WANT_WRITE;
	case SSL_ERROR_ZERO_RETURN:
		return 0;
	default:
		return -EPROTO;
	}
}

ssize_t mtd_xprt_write(struct mtd_conn *c, const uint8_t *buf, size_t len)
{
	if (!c->ssl) {
		ssize_t n = send(c->fd, buf, len, MSG_NOSIGNAL);
		if (n >= 0)
			return n;
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
			return MTD_IO_AGAIN;
		return -errno;
	}
	ERR_clear_error();
	int n = SSL_write(c->ssl, buf, (int)(len > INT32_MAX ? INT32_MAX : len));
	if (n > 0)
		return n;
	switch (SSL_get_error(c->ssl, n)) {
	case SSL_ERROR_WANT_READ:
	case SSL_ERROR_WANT_WRITE:
		return MTD_IO_AGAIN;
	default:
		return -EPIPE;
	}
}

void mtd_xprt_close(struct mtd_conn *c)
{
	if (!c->ssl)
		return;
	/* No close_notify round trip: the socket closes right after. The quiet
	 * SSL_shutdown() still marks the connection as properly shut down;
	 * without it SSL_free() takes the session for a bad one and makes it
	 * non-resumable (ssl_clear_bad_session), so no ticket would ever be
	 * reused. */
	SSL_set_quiet_shutdown(c->ssl, 1);
	if (c->tls_up)
		SSL_shutdown(c->ssl);
	SSL_free(c->ssl);
	c->ssl = NULL;
}

void mtd_tls_session_free(struct ssl_session_st *s)
{
	SSL_SESSION_free(s);
}
