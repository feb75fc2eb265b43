/* Transport: plain TCP or TLS over a non-blocking socket, two ops tables
 * (transport.h). The only file that calls OpenSSL. OpenSSL reads and writes
 * the socket itself: no BIO pairs, no extra copy.
 *
 * OpenSSL's per-thread error queue must be empty before SSL_read/SSL_write
 * for SSL_get_error() to be right; every failed call here empties it
 * afterwards instead of paying ERR_clear_error() before each call. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "authz/authz.h"
#include "core/clock.h"
#include "core/log.h"
#include "identity/identity.h"
#include "sidecar/control/runtime-t.h"
#include "sidecar/io/pool.h"
#include "sidecar/io/transport.h"

static int conn_ex_index = -1;

/* What a client context checks of the server beyond its chain (secure
 * naming), kept on the context (ctx_ex_index) and freed with it. */
struct client_naming {
	char *identity;     /* the typed identity (lib/identity) the server must have, or NULL */
	bool from_registry; /* ... the endpoint's own (its registry record's) */
	bool check_name;    /* the host name / IP check too (no identity, or server_name set) */
};
static int ctx_ex_index = -1;
/* A kept session's context (new_session_cb): a session is offered again
 * only to the context it was made with, so that a context made from
 * rotated files (certwatch.c) authenticates afresh. */
static int sess_ex_index = -1;

/* When a session's peer was last authenticated by a full handshake
 * (monotonic seconds + 1, so that 0 is "unknown"), kept on a client's
 * session (sess_auth_index) and on the client SSL that offers one
 * (ssl_auth_index: what a resumed connection's new tickets inherit). An
 * integer in the pointer: nothing to free or copy. */
static int sess_auth_index = -1;
static int ssl_auth_index = -1;
/* A server context's ticket keys (struct ticket_keys), freed with it. */
static int keys_ex_index = -1;

static void naming_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl, void *argp)
{
	struct client_naming *n = ptr;
	if (n) {
		free(n->identity);
		free(n);
	}
}

static void keys_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl, void *argp);

int mtd_tls_global_init(void)
{
	conn_ex_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
	ctx_ex_index = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, naming_free);
	sess_ex_index = SSL_SESSION_get_ex_new_index(0, NULL, NULL, NULL, NULL);
	sess_auth_index = SSL_SESSION_get_ex_new_index(0, NULL, NULL, NULL, NULL);
	ssl_auth_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
	keys_ex_index = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, keys_free);
	return conn_ex_index < 0 || ctx_ex_index < 0 || sess_ex_index < 0 || sess_auth_index < 0 ||
	                       ssl_auth_index < 0 || keys_ex_index < 0
	               ? -ENOMEM
	               : 0;
}

/* ---- sessions: how long a resumed one may stand for a full handshake ---- */

/* Now in whole monotonic seconds + 1 (0 stays "unknown"). */
static uintptr_t auth_now(void)
{
	return (uintptr_t)(mtd_now_ns() / 1000000000) + 1;
}

/* Whether a session whose peer was authenticated by a full handshake at
 * auth (auth_now()'s unit; 0: unknown) and whose peer certificate is cert
 * (NULL: none) may still be resumed: the full handshake less than
 * MTD_TLS_SESSION_MAX_S ago, and the certificate inside its validity now
 * (a resumption does not verify the chain again, and expiry is how short
 * lived certificates are revoked). */
static bool session_fresh(uintptr_t auth, X509 *cert)
{
	if (auth == 0 || auth_now() - auth >= MTD_TLS_SESSION_MAX_S)
		return false;
	if (!cert)
		return true;
	/* X509_cmp_current_time: -1 before now, 1 after, 0 on error. */
	bool ok = X509_cmp_current_time(X509_get0_notBefore(cert)) < 0 &&
	          X509_cmp_current_time(X509_get0_notAfter(cert)) > 0;
	ERR_clear_error();
	return ok;
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
	/* A ticket arriving on a connection of a TLS policy its service no
	 * longer has (draining) is not kept: it was verified under the old
	 * one, and the pool dropped that policy's session (pool.c). */
	if (c->pool->svc && c->tls_gen != c->pool->svc->tls_gen)
		return 0;
	/* Keep a copy: OpenSSL marks the connection's own session object
	 * non-resumable when the peer later closes without close_notify, which
	 * many servers do; the copy stays usable. */
	SSL_SESSION *copy = SSL_SESSION_dup(sess);
	if (!copy) {
		ERR_clear_error();
		return 0;
	}
	SSL_SESSION_set_ex_data(copy, sess_ex_index, SSL_get_SSL_CTX(ssl));
	/* A resumed connection's tickets stand for the full handshake its
	 * session came from, not for this one. */
	uintptr_t auth = SSL_session_reused(ssl) ? (uintptr_t)SSL_get_ex_data(ssl, ssl_auth_index) : auth_now();
	SSL_SESSION_set_ex_data(copy, sess_auth_index, (void *)auth);
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
	if (tls->server_identity || tls->server_identity_registry) {
		struct client_naming *n = calloc(1, sizeof(*n));
		if (!n || (tls->server_identity && !(n->identity = strdup(tls->server_identity)))) {
			free(n);
			snprintf(err, errlen, "out of memory");
			goto fail;
		}
		n->from_registry = tls->server_identity_registry;
		n->check_name = tls->server_name != NULL;
		if (SSL_CTX_set_ex_data(ctx, ctx_ex_index, n) != 1) {
			naming_free(NULL, n, NULL, 0, 0, NULL);
			snprintf(err, errlen, "out of memory");
			goto fail;
		}
	}
	return ctx;
fail:
	SSL_CTX_free(ctx);
	return NULL;
}

struct ssl_ctx_st *mtd_tls_http1_client_ctx_new(const struct mtd_cfg_tls *tls, char *err, size_t errlen)
{
	static const unsigned char alpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
	SSL_CTX *ctx = mtd_tls_client_ctx_new(tls, err, errlen);
	if (ctx && SSL_CTX_set_alpn_protos(ctx, alpn, sizeof(alpn)) != 0) {
		last_error(err, errlen, "ALPN");
		SSL_CTX_free(ctx);
		return NULL;
	}
	return ctx;
}

/* ---- identities --------------------------------------------------------- */

/* cert's identity (lib/identity: the X509-SVID rule over its URI and DNS
 * SANs) into id, cap >= MTD_IDENTITY_TEXT_SIZE ("" when none); returns
 * why it has none (MTD_IDENTITY_HAS: it has one). */
static enum mtd_identity_none cert_identity(X509 *cert, char *id, size_t cap)
{
	GENERAL_NAMES *names = X509_get_ext_d2i(cert, NID_subject_alt_name, NULL, NULL);
	int total = names ? sk_GENERAL_NAME_num(names) : 0;
	/* All the rule looks at: the first two URI SANs (a second one means
	 * none) and the first DNS SAN. */
	struct mtd_san sans[3];
	size_t n = 0, n_uri = 0;
	bool dns = false;
	for (int i = 0; i < total; i++) {
		const GENERAL_NAME *g = sk_GENERAL_NAME_value(names, i);
		bool is_uri = g->type == GEN_URI;
		if ((is_uri && n_uri == 2) || (g->type == GEN_DNS && dns) || (!is_uri && g->type != GEN_DNS))
			continue;
		const ASN1_IA5STRING *v = is_uri ? g->d.uniformResourceIdentifier : g->d.dNSName;
		int len = ASN1_STRING_length(v);
		sans[n++] = (struct mtd_san){is_uri ? MTD_IDENTITY_URI : MTD_IDENTITY_DNS,
		                             (const char *)ASN1_STRING_get0_data(v), len < 0 ? 0 : (size_t)len};
		n_uri += is_uri;
		dns = dns || !is_uri;
	}
	enum mtd_identity_none why = mtd_identity_of_sans(sans, n, id, cap);
	GENERAL_NAMES_free(names);
	ERR_clear_error();
	return why;
}

int mtd_tls_peer_identity(const struct mtd_conn *c, char *id, size_t cap, enum mtd_identity_none *none,
                          char hash[65])
{
	X509 *cert = c->ssl ? SSL_get0_peer_certificate(c->ssl) : NULL;
	id[0] = '\0';
	hash[0] = '\0';
	*none = MTD_IDENTITY_NO_SAN;
	if (!cert)
		return -ENOENT;
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	if (X509_digest(cert, EVP_sha256(), md, &mdlen) != 1 || mdlen != 32) {
		ERR_clear_error();
		return -ENOMEM;
	}
	mtd_xfcc_hex(md, hash);
	*none = cert_identity(cert, id, cap);
	return 0;
}

int mtd_tls_ctx_identity(struct ssl_ctx_st *ctx, char *id, size_t cap)
{
	X509 *cert = SSL_CTX_get0_certificate(ctx);
	id[0] = '\0';
	return !cert ? -ENOENT : cert_identity(cert, id, cap) == MTD_IDENTITY_HAS ? 0 : -ENOENT;
}

int mtd_tls_file_identity(const char *cert_file, char *id, size_t cap, enum mtd_identity_none *none)
{
	FILE *f = fopen(cert_file, "re");
	id[0] = '\0';
	*none = MTD_IDENTITY_NO_SAN;
	if (!f)
		return -errno;
	X509 *cert = PEM_read_X509(f, NULL, NULL, NULL);
	fclose(f);
	if (!cert) {
		ERR_clear_error();
		return -EINVAL;
	}
	*none = cert_identity(cert, id, cap);
	X509_free(cert);
	return 0;
}

/* Secure naming, once the client handshake is done: the server's
 * certificate's identity (lib/identity: typed, the X509-SVID rule) is the
 * one expected (the context's, or the endpoint's registry record's). 0,
 * or -EPROTO with both identities in err. */
static int identity_check(SSL *ssl, const char *registry_identity, char *err, size_t errlen)
{
	const struct client_naming *n = SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), ctx_ex_index);
	if (!n)
		return 0;
	const char *want = n->identity;
	if (n->from_registry)
		want = registry_identity;
	if (!want) {
		/* Refused when the record was read (etcd_watch.c); never connected. */
		snprintf(err, errlen, "TLS server identity: the endpoint's registry record names none");
		return -EPROTO;
	}
	X509 *cert = SSL_get0_peer_certificate(ssl);
	char got[MTD_IDENTITY_TEXT_SIZE];
	enum mtd_identity_none none = cert ? cert_identity(cert, got, sizeof(got)) : MTD_IDENTITY_NO_SAN;
	if (cert && none == MTD_IDENTITY_HAS && mtd_identity_equal(want, got))
		return 0;
	snprintf(err, errlen, "TLS server identity mismatch: expected %.512s, presented %.512s%s%s", want,
	         !cert ? "no certificate" : none == MTD_IDENTITY_HAS ? got : "no identity",
	         cert && none != MTD_IDENTITY_HAS ? ": " : "",
	         cert && none != MTD_IDENTITY_HAS ? mtd_identity_none_text(none) : "");
	return -EPROTO;
}

static int check_server_identity(struct mtd_conn *c, char *err, size_t errlen)
{
	return identity_check(c->ssl, c->pool && c->pool->ep ? mtd_endpoint_identity(c->pool->ep) : NULL, err, errlen);
}


/* ---- inbound (server) contexts --------------------------------------------- */

/* Ticket keys of a server context, shared by its workers: a key encrypts
 * tickets for MTD_TLS_TICKET_KEY_S, then only decrypts them (the ticket
 * renewed) for as long again; older tickets are not decrypted at all (a
 * full handshake). OpenSSL's own key is made once per context and never
 * rotates. Taken once per handshake that issues or presents a ticket. */
struct ticket_key {
	unsigned char name[16], aes[32], hmac[32];
	int64_t born_ns; /* monotonic; 0: unset */
};
struct ticket_keys {
	pthread_mutex_t mu;
	struct ticket_key cur, prev;
};

#define TICKET_KEY_NS ((int64_t)MTD_TLS_TICKET_KEY_S * 1000000000)

static void keys_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl, void *argp)
{
	struct ticket_keys *k = ptr;
	if (k) {
		pthread_mutex_destroy(&k->mu);
		OPENSSL_cleanse(k, sizeof(*k));
		free(k);
	}
}

static int key_make(struct ticket_key *t, int64_t now)
{
	if (RAND_bytes(t->name, sizeof(t->name)) != 1 || RAND_bytes(t->aes, sizeof(t->aes)) != 1 ||
	    RAND_bytes(t->hmac, sizeof(t->hmac)) != 1)
		return -1;
	t->born_ns = now;
	return 0;
}

/* Under k->mu: the current key retires once it is MTD_TLS_TICKET_KEY_S
 * old. -1 when no random bytes could be had. */
static int keys_rotate(struct ticket_keys *k, int64_t now)
{
	if (k->cur.born_ns != 0 && now - k->cur.born_ns < TICKET_KEY_NS)
		return 0;
	struct ticket_key fresh;
	if (key_make(&fresh, now) != 0)
		return -1;
	k->prev = k->cur;
	k->cur = fresh;
	OPENSSL_cleanse(&fresh, sizeof(fresh));
	return 0;
}

static int key_use(const struct ticket_key *t, unsigned char *iv, EVP_CIPHER_CTX *cctx, EVP_MAC_CTX *hctx, int enc)
{
	OSSL_PARAM params[] = {
	        OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_KEY, (void *)t->hmac, sizeof(t->hmac)),
	        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
	        OSSL_PARAM_construct_end(),
	};
	if (EVP_CipherInit_ex(cctx, EVP_aes_256_cbc(), NULL, t->aes, iv, enc) != 1 ||
	    EVP_MAC_CTX_set_params(hctx, params) != 1)
		return -1;
	return 0;
}

/* SSL_CTX_set_tlsext_ticket_key_evp_cb: 1 (key found / ticket made), 2
 * (found, a retired key: renew the ticket), 0 (no such key: a full
 * handshake), -1 (error). */
static int ticket_key_cb(SSL *ssl, unsigned char key_name[16], unsigned char *iv, EVP_CIPHER_CTX *cctx,
                         EVP_MAC_CTX *hctx, int enc)
{
	struct ticket_keys *k = SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), keys_ex_index);
	int64_t now = mtd_now_ns();
	int rc = -1;
	if (!k)
		return -1;
	pthread_mutex_lock(&k->mu);
	if (keys_rotate(k, now) != 0)
		goto out;
	if (enc) {
		int ivlen = EVP_CIPHER_get_iv_length(EVP_aes_256_cbc());
		if (RAND_bytes(iv, ivlen) != 1)
			goto out;
		memcpy(key_name, k->cur.name, 16);
		rc = key_use(&k->cur, iv, cctx, hctx, 1) == 0 ? 1 : -1;
		goto out;
	}
	const struct ticket_key *t = NULL;
	if (memcmp(key_name, k->cur.name, 16) == 0)
		t = &k->cur;
	else if (k->prev.born_ns != 0 && now - k->prev.born_ns < 2 * TICKET_KEY_NS &&
	         memcmp(key_name, k->prev.name, 16) == 0)
		t = &k->prev;
	rc = !t ? 0 : key_use(t, iv, cctx, hctx, 0) != 0 ? -1 : t == &k->cur ? 1 : 2;
out:
	pthread_mutex_unlock(&k->mu);
	if (rc < 0)
		ERR_clear_error();
	return rc;
}

/* A ticket's application data: when its session's peer was authenticated
 * by a full handshake (auth_now()'s unit). Inside the encrypted ticket,
 * so the client cannot change it. A resumed session's new tickets carry
 * the original's (OpenSSL copies the data into the session it issues
 * them from). */
static int ticket_gen_cb(SSL *ssl, void *arg)
{
	SSL_SESSION *sess = SSL_get0_session(ssl);
	void *data = NULL;
	size_t len = 0;
	if (!sess)
		return 0;
	if (SSL_SESSION_get0_ticket_appdata(sess, &data, &len) == 1 && len == sizeof(uint64_t))
		return 1;
	uint64_t auth = auth_now();
	return SSL_SESSION_set1_ticket_appdata(sess, &auth, sizeof(auth));
}

/* A ticket presented: resumed only while it may stand for a full
 * handshake (session_fresh); else ignored, so the client authenticates
 * afresh (its certificate verified again: an expired one is refused). */
static SSL_TICKET_RETURN ticket_dec_cb(SSL *ssl, SSL_SESSION *sess, const unsigned char *keyname, size_t keyname_len,
                                       SSL_TICKET_STATUS status, void *arg)
{
	switch (status) {
	case SSL_TICKET_SUCCESS:
	case SSL_TICKET_SUCCESS_RENEW: {
		void *data = NULL;
		size_t len = 0;
		uint64_t auth = 0;
		if (SSL_SESSION_get0_ticket_appdata(sess, &data, &len) == 1 && len == sizeof(auth))
			memcpy(&auth, data, sizeof(auth));
		if (!session_fresh((uintptr_t)auth, SSL_SESSION_get0_peer(sess))) {
			MTD_DEBUG("a TLS ticket too old, or whose client certificate is out of its validity: full "
			          "handshake");
			return SSL_TICKET_RETURN_IGNORE_RENEW;
		}
		/* Renewed: a TLS 1.3 client uses a ticket once, so a resumption
		 * that sent none would make the next connection a full one.
		 * The new ticket keeps this one's full-handshake time. */
		return SSL_TICKET_RETURN_USE_RENEW;
	}
	case SSL_TICKET_EMPTY:
	case SSL_TICKET_NO_DECRYPT:
		return SSL_TICKET_RETURN_IGNORE_RENEW;
	default:
		return SSL_TICKET_RETURN_ABORT;
	}
}

/* Tickets whose keys rotate and whose sessions stand for a full handshake
 * at most MTD_TLS_SESSION_MAX_S. 0 or -1 (err set). */
static int server_sessions(SSL_CTX *ctx, char *err, size_t errlen)
{
	struct ticket_keys *k = calloc(1, sizeof(*k));
	if (!k || pthread_mutex_init(&k->mu, NULL) != 0) {
		free(k);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (SSL_CTX_set_ex_data(ctx, keys_ex_index, k) != 1) {
		keys_free(NULL, k, NULL, 0, 0, NULL);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	SSL_CTX_set_timeout(ctx, MTD_TLS_SESSION_MAX_S); /* the lifetime hint, and OpenSSL's own check */
	if (SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, ticket_key_cb) != 1 ||
	    SSL_CTX_set_session_ticket_cb(ctx, ticket_gen_cb, ticket_dec_cb, NULL) != 1) {
		last_error(err, errlen, "session tickets");
		return -1;
	}
	return 0;
}

/* RFC 9113 §3.2: h2 is negotiated with ALPN, and only h2 is spoken here:
 * a client that offers ALPN without h2 gets no_application_protocol
 * (RFC 7301 §3.2); one that offers no ALPN is refused after the
 * handshake (mtd_tls_server_handshake). */
static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                       unsigned int inlen, void *arg)
{
	static const unsigned char h2[] = {2, 'h', '2'};
	unsigned char *sel = NULL;
	if (SSL_select_next_proto(&sel, outlen, h2, sizeof(h2), in, inlen) == OPENSSL_NPN_NEGOTIATED) {
		*out = sel;
		return SSL_TLSEXT_ERR_OK;
	}
	return SSL_TLSEXT_ERR_ALERT_FATAL;
}

struct ssl_ctx_st *mtd_tls_server_ctx_new(const char *cert_file, const char *key_file, const char *client_ca_file,
                                          char *err, size_t errlen)
{
	static const unsigned char sid_ctx[] = "maitred-inbound";
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
	if (!ctx) {
		last_error(err, errlen, "SSL_CTX_new");
		return NULL;
	}
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION); /* RFC 9113 §9.2 */
	/* RFC 9113 §9.2.1: no renegotiation; the server prefers its ciphers. */
	SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
	                              SSL_MODE_RELEASE_BUFFERS);
	if (SSL_CTX_use_certificate_chain_file(ctx, cert_file) != 1) {
		last_error(err, errlen, cert_file);
		goto fail;
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, key_file, SSL_FILETYPE_PEM) != 1) {
		last_error(err, errlen, key_file);
		goto fail;
	}
	if (SSL_CTX_check_private_key(ctx) != 1) {
		last_error(err, errlen, "certificate and key do not match");
		goto fail;
	}
	if (client_ca_file) {
		STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(client_ca_file);
		if (!names || SSL_CTX_load_verify_locations(ctx, client_ca_file, NULL) != 1) {
			sk_X509_NAME_pop_free(names, X509_NAME_free);
			last_error(err, errlen, client_ca_file);
			goto fail;
		}
		SSL_CTX_set_client_CA_list(ctx, names); /* owns names */
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
	} else {
		SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
	}
	SSL_CTX_set_alpn_select_cb(ctx, alpn_select, NULL);
	/* Resumption by tickets only (stateless, RFC 8446 §4.6.1 / RFC 5077),
	 * valid on every worker (one context, one ticket key): no server-side
	 * session cache to grow. The session id context binds a resumed
	 * session to this listener's client verification (SSL_CTX_set_verify:
	 * required once a certificate is asked for). */
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	if (SSL_CTX_set_session_id_context(ctx, sid_ctx, sizeof(sid_ctx) - 1) != 1) {
		last_error(err, errlen, "session id context");
		goto fail;
	}
	if (server_sessions(ctx, err, errlen) != 0)
		goto fail;
	return ctx;
fail:
	SSL_CTX_free(ctx);
	return NULL;
}

/* The socket BIO's reads, watched: a read(2) that filled
 * less than OpenSSL asked for emptied the socket, so once OpenSSL holds
 * nothing more, tls_read stops without the read(2) that would only say
 * EAGAIN (0.45 of a read(2) per call at a steady rate, TLS upstreams).
 * Level-triggered readiness reports what arrives after. */
static long watch_reads(BIO *b, int oper, const char *argp, size_t len, int argi, long argl, int ret,
                        size_t *processed)
{
	(void)argp, (void)argi, (void)argl;
	if (oper == (BIO_CB_READ | BIO_CB_RETURN)) {
		struct mtd_conn *c = (struct mtd_conn *)BIO_get_callback_arg(b);
		c->tls_short_read = ret > 0 && processed && *processed < len;
	}
	return ret;
}

static void watch_socket_reads(SSL *ssl, struct mtd_conn *c)
{
	BIO *rb = SSL_get_rbio(ssl);
	c->tls_short_read = false;
	if (rb) {
		BIO_set_callback_arg(rb, (char *)c);
		BIO_set_callback_ex(rb, watch_reads);
	}
}

int mtd_tls_server_start(struct mtd_conn *c, struct ssl_ctx_st *ctx)
{
	SSL *ssl = SSL_new(ctx);
	if (!ssl) {
		ERR_clear_error();
		return -ENOMEM;
	}
	SSL_set_ex_data(ssl, conn_ex_index, c);
	if (SSL_set_fd(ssl, c->fd) != 1) {
		SSL_free(ssl);
		ERR_clear_error();
		return -ENOMEM;
	}
	SSL_set_read_ahead(ssl, 1); /* as a client's (mtd_tls_client_start) */
	watch_socket_reads(ssl, c);
	SSL_set_accept_state(ssl);
	c->ssl = ssl;
	c->tls_up = c->tls_drained = false;
	c->xprt = &mtd_xprt_tls;
	return 0;
}

int mtd_tls_server_handshake(struct mtd_conn *c, char *err, size_t errlen, enum mtd_tls_refusal *why)
{
	int rc = SSL_do_handshake(c->ssl);
	*why = MTD_TLS_REFUSED_OTHER;
	if (rc == 1) {
		const unsigned char *proto = NULL;
		unsigned int len = 0;
		SSL_get0_alpn_selected(c->ssl, &proto, &len);
		if (len != 2 || memcmp(proto, "h2", 2) != 0) {
			*why = MTD_TLS_REFUSED_ALPN;
			snprintf(err, errlen, "TLS client did not offer ALPN h2");
			return -EPROTO;
		}
		c->tls_up = true;
		MTD_DEBUG("peer %s: %s, %s", c->peer, SSL_get_version(c->ssl),
		          SSL_session_reused(c->ssl) ? "session resumed" : "full handshake");
		return 0;
	}
	int e = SSL_get_error(c->ssl, rc);
	if (e == SSL_ERROR_WANT_READ)
		return MTD_IO_WANT_READ;
	if (e == SSL_ERROR_WANT_WRITE)
		return MTD_IO_WANT_WRITE;
	unsigned long code = ERR_peek_error();
	int reason = ERR_GET_REASON(code);
	long v = SSL_get_verify_result(c->ssl);
	if (v != X509_V_OK) {
		*why = MTD_TLS_REFUSED_BAD_CERT;
		snprintf(err, errlen, "client certificate refused: %s", X509_verify_cert_error_string(v));
	} else if (reason == SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE) {
		*why = MTD_TLS_REFUSED_NO_CERT;
		snprintf(err, errlen, "client presented no certificate");
	} else if (reason == SSL_R_NO_APPLICATION_PROTOCOL) {
		*why = MTD_TLS_REFUSED_ALPN;
		snprintf(err, errlen, "TLS client did not offer ALPN h2");
	} else if (reason == SSL_R_UNSUPPORTED_PROTOCOL || reason == SSL_R_WRONG_VERSION_NUMBER ||
	           reason == SSL_R_NO_SHARED_CIPHER || reason == SSL_R_VERSION_TOO_LOW) {
		*why = MTD_TLS_REFUSED_PROTOCOL;
		last_error(err, errlen, "TLS handshake failed");
	} else if (code == 0) {
		snprintf(err, errlen, "connection closed during the TLS handshake");
	} else {
		last_error(err, errlen, "TLS handshake failed");
	}
	ERR_clear_error();
	return -EPROTO;
}

bool mtd_tls_resumed(const struct mtd_conn *c)
{
	return c->ssl && SSL_session_reused(c->ssl) == 1;
}

const char *mtd_tls_refusal_name(enum mtd_tls_refusal r)
{
	switch (r) {
	case MTD_TLS_REFUSED_NOT_TLS:
		return "not_tls";
	case MTD_TLS_REFUSED_NO_CERT:
		return "no_certificate";
	case MTD_TLS_REFUSED_BAD_CERT:
		return "bad_certificate";
	case MTD_TLS_REFUSED_ALPN:
		return "alpn";
	case MTD_TLS_REFUSED_PROTOCOL:
		return "protocol";
	case MTD_TLS_REFUSED_TIMEOUT:
		return "timeout";
	case MTD_TLS_REFUSED_OTHER:
	case MTD_TLS_REFUSED_N:
		break;
	}
	return "other";
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

/* With a server identity and no server_name, the identity is the name
 * checked (check_server_identity): a mesh peer's certificate names its
 * workload, not the address it was reached at. SNI still goes out for a
 * host name. 0 or -ENOMEM. */
static int set_peer_name_or_identity(SSL *ssl, SSL_CTX *ctx, const char *server_name)
{
	const struct client_naming *n = SSL_CTX_get_ex_data(ctx, ctx_ex_index);
	unsigned char ip[16];
	if (!n || n->check_name)
		return set_peer_name(ssl, server_name);
	if (inet_pton(AF_INET, server_name, ip) == 1 || inet_pton(AF_INET6, server_name, ip) == 1)
		return 0; /* RFC 6066 §3: no SNI for an IP literal */
	return SSL_set_tlsext_host_name(ssl, server_name) == 1 ? 0 : -ENOMEM;
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
	if (SSL_set_fd(ssl, c->fd) != 1 || set_peer_name_or_identity(ssl, ctx, server_name) != 0)
		goto fail;
	if (resume && SSL_SESSION_get_ex_data(resume, sess_ex_index) == ctx) {
		/* Offered only while it may stand for a full handshake: else
		 * the server's certificate is verified afresh. */
		uintptr_t auth = (uintptr_t)SSL_SESSION_get_ex_data(resume, sess_auth_index);
		if (session_fresh(auth, SSL_SESSION_get0_peer(resume))) {
			SSL_set_session(ssl, resume);
			SSL_set_ex_data(ssl, ssl_auth_index, (void *)auth);
		} else {
			MTD_DEBUG("upstream %s: the kept TLS session is too old or its certificate is out of its "
			          "validity: full handshake",
			          c->peer);
		}
	}
	/* Read ahead: one read(2) takes every record the socket holds (up to
	 * the record buffer) instead of two per record (header, then body).
	 * What it took and did not hand over yet is mtd_xprt_pending(). */
	SSL_set_read_ahead(ssl, 1);
	watch_socket_reads(ssl, c);
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

struct ssl_st *mtd_tls_endpoint_ssl_new(struct ssl_ctx_st *ctx, const char *server_name)
{
	SSL *ssl = SSL_new(ctx);
	if (ssl && set_peer_name_or_identity(ssl, ctx, server_name) != 0) {
		SSL_free(ssl);
		ssl = NULL;
	}
	return ssl;
}

int mtd_tls_ssl_check_peer(struct ssl_st *ssl, const char *registry_identity, char *err, size_t errlen)
{
	const unsigned char *proto = NULL;
	unsigned int len = 0;
	SSL_get0_alpn_selected(ssl, &proto, &len);
	/* RFC 9113 §3.2: h2 over TLS is negotiated with ALPN. */
	if (len != 2 || memcmp(proto, "h2", 2) != 0) {
		snprintf(err, errlen, "TLS peer did not negotiate ALPN h2");
		return -EPROTO;
	}
	return identity_check(ssl, registry_identity, err, errlen);
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
		if (check_server_identity(c, err, errlen) < 0)
			return -EPROTO;
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
			/* The socket is empty and OpenSSL holds nothing more
			 * (watch_reads): the next SSL_read would only read(2)
			 * EAGAIN. */
			if (c->tls_short_read && !SSL_has_pending(c->ssl)) {
				c->tls_drained = true;
				break;
			}
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

ssize_t mtd_xprt_writev(struct mtd_conn *c, const struct iovec *iov, int n)
{
	struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)n};
	return tcp_result(sendmsg(c->fd, &m, MSG_NOSIGNAL), MTD_IO_WANT_WRITE);
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
