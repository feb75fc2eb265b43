/* Unit tests for sidecar/io/transport.c and the transport waits in
 * sidecar/io/conn.c: a real OpenSSL client (maitred's context) against an
 * OpenSSL server in this process, over a non-blocking socketpair, pumped by
 * hand (no timing). Certificates are made in memory at start.
 *
 * conn.c is linked alone: the worker functions it calls are stubbed below,
 * and the connection's kind is a test one (test_ops). */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "core/bufq.h"
#include "core/clock.h"
#include "sidecar/io/conn.h"
#include "sidecar/io/pool-t.h"
#include "sidecar/io/transport.h"
#include "sidecar/turn.h"
#include "sidecar/worker.h"

/* ---- stubs for what conn.c calls outside itself ---------------------- */

void mtd_worker_schedule_flush(struct mtd_worker *w) {}

void mtd_worker_bury(struct mtd_worker *w, struct mtd_conn *c) {}

static void test_on_close(struct mtd_conn *c) {}

static const struct mtd_conn_ops test_ops = {.role = "upstream", .on_close = test_on_close};

/* read(2) and send(2) on one fd fail with a chosen errno (the test links
 * with -Wl,--wrap=read,--wrap=send); every other call goes through. */
static int fail_fd = -1, fail_errno;

ssize_t __real_read(int fd, void *buf, size_t n);
ssize_t __wrap_read(int fd, void *buf, size_t n);
ssize_t __real_send(int fd, const void *buf, size_t n, int flags);
ssize_t __wrap_send(int fd, const void *buf, size_t n, int flags);

ssize_t __wrap_read(int fd, void *buf, size_t n)
{
	if (fd == fail_fd) {
		errno = fail_errno;
		return -1;
	}
	return __real_read(fd, buf, n);
}

ssize_t __wrap_send(int fd, const void *buf, size_t n, int flags)
{
	if (fd == fail_fd) {
		errno = fail_errno;
		return -1;
	}
	return __real_send(fd, buf, n, flags);
}

/* sendmsg(2) counted (-Wl,--wrap=sendmsg): the gathered writes. */
static unsigned n_sendmsg;

ssize_t __real_sendmsg(int fd, const struct msghdr *m, int flags);
ssize_t __wrap_sendmsg(int fd, const struct msghdr *m, int flags);

ssize_t __wrap_sendmsg(int fd, const struct msghdr *m, int flags)
{
	if (fd == fail_fd) {
		errno = fail_errno;
		return -1;
	}
	n_sendmsg++;
	return __real_sendmsg(fd, m, flags);
}

/* event_add of one event fails (-Wl,--wrap=event_add), as libevent's does
 * when epoll_ctl or its timer heap cannot grow. */
static const struct event *fail_ev;

int __real_event_add(struct event *ev, const struct timeval *tv);
int __wrap_event_add(struct event *ev, const struct timeval *tv);

int __wrap_event_add(struct event *ev, const struct timeval *tv)
{
	if (ev == fail_ev)
		return -1;
	return __real_event_add(ev, tv);
}

/* The monotonic clock, moved ahead by the session tests (clock_ahead_s). */
static int64_t clock_ahead_s;

int64_t mtd_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ((int64_t)ts.tv_sec + clock_ahead_s) * 1000000000 + ts.tv_nsec;
}

/* ---- fixture ----------------------------------------------------------- */

#define SERVER_NAME "upstream.test"

static EVP_PKEY *key;
static X509 *cert;
static char ca_path[64];

/* A self-signed certificate for SERVER_NAME, also the client's CA. */
static void make_cert(void)
{
	key = EVP_EC_gen("P-256");
	ck_assert_ptr_nonnull(key);
	cert = X509_new();
	X509_set_version(cert, 2);
	ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
	X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
	X509_gmtime_adj(X509_getm_notAfter(cert), 86400);
	X509_NAME *name = X509_get_subject_name(cert);
	X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)SERVER_NAME, -1, -1, 0);
	X509_set_issuer_name(cert, name);
	X509_set_pubkey(cert, key);
	X509V3_CTX v3;
	X509V3_set_ctx_nodb(&v3);
	X509V3_set_ctx(&v3, cert, cert, NULL, NULL, 0);
	const char *exts[][2] = {{"basicConstraints", "critical,CA:TRUE"},
	                         {"keyUsage", "critical,keyCertSign,digitalSignature"},
	                         {"subjectAltName", "DNS:" SERVER_NAME}};
	for (size_t i = 0; i < sizeof(exts) / sizeof(exts[0]); i++) {
		X509_EXTENSION *ext = X509V3_EXT_conf(NULL, &v3, exts[i][0], exts[i][1]);
		ck_assert_ptr_nonnull(ext);
		X509_add_ext(cert, ext, -1);
		X509_EXTENSION_free(ext);
	}
	ck_assert_int_gt(X509_sign(cert, key, EVP_sha256()), 0);
	snprintf(ca_path, sizeof(ca_path), "/tmp/maitred-test-ca-%d.pem", (int)getpid());
	FILE *f = fopen(ca_path, "w");
	ck_assert_ptr_nonnull(f);
	PEM_write_X509(f, cert);
	fclose(f);
}

static void setup(void)
{
	ck_assert_int_eq(mtd_tls_global_init(), 0);
	make_cert();
}

static void teardown(void)
{
	unlink(ca_path);
	X509_free(cert);
	EVP_PKEY_free(key);
}

static int alpn_h2(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                   unsigned int inlen, void *arg)
{
	static const unsigned char h2[] = {2, 'h', '2'};
	unsigned char *sel;
	if (SSL_select_next_proto(&sel, outlen, h2, sizeof(h2), in, inlen) != OPENSSL_NPN_NEGOTIATED)
		return SSL_TLSEXT_ERR_ALERT_FATAL;
	*out = sel;
	return SSL_TLSEXT_ERR_OK;
}

static int handshakes_done;

static void count_handshakes(const SSL *ssl, int where, int ret)
{
	if (where & SSL_CB_HANDSHAKE_DONE)
		handshakes_done++;
}

struct pair {
	struct event_base *base;
	struct mtd_worker w;
	struct mtd_conn c; /* maitred's side: the TLS client */
	SSL_CTX *cctx, *sctx;
	SSL *srv;
	int sfd;
};

/* A TLS 1.2 connection (renegotiation exists only up to 1.2) between
 * maitred's transport and a server, handshake done. */
static void pair_open(struct pair *p)
{
	memset(p, 0, sizeof(*p));
	handshakes_done = 0;
	struct mtd_cfg_tls tls = {.ca_file = ca_path};
	char err[256] = "";
	p->cctx = mtd_tls_client_ctx_new(&tls, err, sizeof(err));
	ck_assert_msg(p->cctx != NULL, "%s", err);
	p->sctx = SSL_CTX_new(TLS_server_method());
	ck_assert_ptr_nonnull(p->sctx);
	SSL_CTX_set_max_proto_version(p->sctx, TLS1_2_VERSION);
	ck_assert_int_eq(SSL_CTX_use_certificate(p->sctx, cert), 1);
	ck_assert_int_eq(SSL_CTX_use_PrivateKey(p->sctx, key), 1);
	SSL_CTX_set_alpn_select_cb(p->sctx, alpn_h2, NULL);

	int sv[2];
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
	p->sfd = sv[1];
	p->srv = SSL_new(p->sctx);
	SSL_set_fd(p->srv, p->sfd);
	SSL_set_accept_state(p->srv);

	p->base = event_base_new();
	p->w.base = p->base;
	TAILQ_INIT(&p->w.dirty);
	p->w.rbuf_len = 64 * 1024;
	p->w.rbuf = malloc(p->w.rbuf_len);
	p->c.ops = &test_ops;
	p->c.w = &p->w;
	p->c.fd = sv[0];
	snprintf(p->c.peer, sizeof(p->c.peer), "test");
	LIST_INIT(&p->c.down_streams);
	ck_assert_int_eq(mtd_tls_client_start(&p->c, p->cctx, SERVER_NAME, NULL), 0);
	ck_assert_ptr_eq(p->c.xprt, &mtd_xprt_tls);
	/* Handshakes the client completed (a server counts its HelloRequest too). */
	SSL_set_info_callback(p->c.ssl, count_handshakes);

	int crc = 1, src = -1;
	for (int i = 0; i < 100 && (crc != 0 || src != 1); i++) {
		if (crc != 0) {
			crc = mtd_tls_handshake(&p->c, err, sizeof(err));
			ck_assert_msg(crc == 0 || crc == MTD_IO_WANT_READ, "client handshake: %d %s", crc, err);
		}
		if (src != 1)
			src = SSL_do_handshake(p->srv);
	}
	ck_assert_int_eq(crc, 0);
	ck_assert_int_eq(src, 1);
	ck_assert_int_eq(handshakes_done, 1);
	ck_assert_str_eq(SSL_get_version(p->srv), "TLSv1.2");

	nghttp2_session_callbacks *cbs;
	ck_assert_int_eq(nghttp2_session_callbacks_new(&cbs), 0);
	ck_assert_int_eq(nghttp2_session_client_new(&p->c.ng, cbs, &p->c), 0);
	nghttp2_session_callbacks_del(cbs);
	p->c.state = MTD_CONN_READY;
	ck_assert_int_eq(mtd_conn_start_io(&p->c), 0);
}

static void pair_close(struct pair *p)
{
	event_del(&p->c.rev);
	event_del(&p->c.wev);
	mtd_xprt_close(&p->c);
	close(p->c.fd);
	nghttp2_session_del(p->c.ng);
	free(p->c.out);
	SSL_free(p->srv);
	close(p->sfd);
	SSL_CTX_free(p->sctx);
	mtd_tls_ctx_free(p->cctx);
	mtd_conn_linger_end_all(&p->w); /* the graceful closes' sockets */
	event_base_free(p->base);
	free(p->w.rbuf);
}

/* What the server read, as application data, into buf. */
static size_t server_drain(struct pair *p, uint8_t *buf, size_t cap)
{
	size_t got = 0;
	for (;;) {
		int n = SSL_read(p->srv, buf + got, (int)(cap - got > 65536 ? 65536 : cap - got));
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	ERR_clear_error();
	return got;
}

/* ---- tests -------------------------------------------------------------- */

/* One TLS 1.3 connection from a plain OpenSSL client (offering *sess, if
 * any) to an SSL of sctx (an inbound listener's context), handshake done
 * and the server's tickets read; *sess becomes the newest ticket's
 * session. Whether the handshake resumed. */
static bool inbound_round(SSL_CTX *sctx, SSL_CTX *cctx, SSL_SESSION **sess)
{
	int sv[2];
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
	SSL *srv = SSL_new(sctx), *cli = SSL_new(cctx);
	ck_assert(srv && cli);
	SSL_set_fd(srv, sv[1]);
	SSL_set_accept_state(srv);
	SSL_set_fd(cli, sv[0]);
	SSL_set_connect_state(cli);
	if (*sess)
		ck_assert_int_eq(SSL_set_session(cli, *sess), 1);
	int crc = -1, src = -1;
	for (int i = 0; i < 100 && (crc != 1 || src != 1); i++) {
		if (crc != 1)
			crc = SSL_do_handshake(cli);
		if (src != 1)
			src = SSL_do_handshake(srv);
	}
	ck_assert_int_eq(crc, 1);
	ck_assert_int_eq(src, 1);
	/* The tickets come after the handshake: a read takes them in. */
	unsigned char b;
	for (int i = 0; i < 4; i++) {
		SSL_write(srv, "x", 1);
		SSL_read(cli, &b, 1);
	}
	ERR_clear_error();
	bool reused = SSL_session_reused(srv) == 1;
	ck_assert_int_eq(SSL_session_reused(cli) == 1, reused);
	SSL_SESSION_free(*sess);
	/* A copy: SSL_free without a shutdown marks the connection's own
	 * session non-resumable (as transport.c's new_session_cb says). */
	*sess = SSL_SESSION_dup(SSL_get0_session(cli));
	ck_assert_ptr_nonnull(*sess);
	SSL_free(srv);
	SSL_free(cli);
	close(sv[0]);
	close(sv[1]);
	return reused;
}

/* One TLS 1.3 connection from maitred's client transport (its pool kept
 * session offered, if the transport will) to an SSL of sctx, tickets
 * read. *offered: whether the client offered a session. Whether the
 * handshake resumed. */
static bool upstream_round(SSL_CTX *sctx, SSL_CTX *cctx, struct mtd_pool *pool, bool *offered)
{
	int sv[2];
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
	SSL *srv = SSL_new(sctx);
	SSL_set_fd(srv, sv[1]);
	SSL_set_accept_state(srv);
	struct mtd_worker w = {0};
	struct mtd_conn c = {0};
	c.w = &w;
	c.fd = sv[0];
	c.pool = pool;
	snprintf(c.peer, sizeof(c.peer), "test");
	ck_assert_int_eq(mtd_tls_client_start(&c, cctx, SERVER_NAME, pool->tls_session), 0);
	*offered = SSL_get0_session(c.ssl) != NULL;
	char err[256] = "";
	int crc = 1, src = -1;
	for (int i = 0; i < 100 && (crc != 0 || src != 1); i++) {
		if (crc != 0)
			crc = mtd_tls_handshake(&c, err, sizeof(err));
		if (src != 1)
			src = SSL_do_handshake(srv);
	}
	ck_assert_msg(crc == 0, "%s", err);
	ck_assert_int_eq(src, 1);
	uint8_t buf[16];
	for (int i = 0; i < 4; i++) {
		SSL_write(srv, "x", 1);
		mtd_xprt_read(&c, buf, sizeof(buf));
	}
	ERR_clear_error();
	bool reused = mtd_tls_resumed(&c);
	mtd_xprt_close(&c);
	SSL_free(srv);
	close(sv[0]);
	close(sv[1]);
	return reused;
}

/* maitred's upstream sessions: a kept session is offered while the full
 * handshake it stands for is under MTD_TLS_SESSION_MAX_S old, resumed
 * connections' tickets inheriting that time; past it, not offered. */
START_TEST(upstream_sessions_end_an_hour_after_the_full_handshake)
{
	char key_path[64], err[256] = "";
	snprintf(key_path, sizeof(key_path), "/tmp/maitred-test-key-%d.pem", (int)getpid());
	FILE *f = fopen(key_path, "w");
	ck_assert_ptr_nonnull(f);
	PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL);
	fclose(f);
	SSL_CTX *sctx = mtd_tls_server_ctx_new(ca_path, key_path, NULL, err, sizeof(err));
	unlink(key_path);
	ck_assert_msg(sctx != NULL, "%s", err);
	struct mtd_cfg_tls tls = {.ca_file = ca_path};
	SSL_CTX *cctx = mtd_tls_client_ctx_new(&tls, err, sizeof(err));
	ck_assert_msg(cctx != NULL, "%s", err);
	struct mtd_pool pool = {0};
	bool offered;
	clock_ahead_s = 0;
	ck_assert(!upstream_round(sctx, cctx, &pool, &offered));
	ck_assert(!offered);
	ck_assert_ptr_nonnull(pool.tls_session);
	clock_ahead_s = 1000;
	ck_assert(upstream_round(sctx, cctx, &pool, &offered));
	clock_ahead_s = 3500;
	ck_assert(upstream_round(sctx, cctx, &pool, &offered));
	/* The newest ticket is 2500 s old, but it stands for the handshake
	 * at 0: not offered. */
	clock_ahead_s = 3700;
	ck_assert(!upstream_round(sctx, cctx, &pool, &offered));
	ck_assert(!offered);
	clock_ahead_s = 3800;
	ck_assert(upstream_round(sctx, cctx, &pool, &offered));
	ck_assert(offered);
	clock_ahead_s = 0;
	mtd_tls_session_free(pool.tls_session);
	mtd_tls_ctx_free(cctx);
	mtd_tls_ctx_free(sctx);
}
END_TEST

/* A resumed inbound session stands for its full handshake at most
 * MTD_TLS_SESSION_MAX_S, however many resumptions chained new tickets
 * since (each inherits the full handshake's time); ticket keys rotate
 * under it without breaking resumption. */
START_TEST(inbound_sessions_end_an_hour_after_the_full_handshake)
{
	char key_path[64], err[256] = "";
	snprintf(key_path, sizeof(key_path), "/tmp/maitred-test-key-%d.pem", (int)getpid());
	FILE *f = fopen(key_path, "w");
	ck_assert_ptr_nonnull(f);
	PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL);
	fclose(f);
	SSL_CTX *sctx = mtd_tls_server_ctx_new(ca_path, key_path, NULL, err, sizeof(err));
	unlink(key_path);
	ck_assert_msg(sctx != NULL, "%s", err);
	SSL_CTX *cctx = SSL_CTX_new(TLS_client_method());
	static const unsigned char h2[] = {2, 'h', '2'};
	SSL_CTX_set_alpn_protos(cctx, h2, sizeof(h2));
	SSL_CTX_set_verify(cctx, SSL_VERIFY_NONE, NULL);
	SSL_CTX_set_session_cache_mode(cctx, SSL_SESS_CACHE_CLIENT);

	SSL_SESSION *sess = NULL;
	clock_ahead_s = 0;
	ck_assert(!inbound_round(sctx, cctx, &sess)); /* the full handshake, at 0 */
	clock_ahead_s = 1000;
	ck_assert(inbound_round(sctx, cctx, &sess));
	/* Past the ticket key's 1800 s: the retired key still decrypts (and
	 * the ticket is renewed under the new one). */
	clock_ahead_s = 2000;
	ck_assert(inbound_round(sctx, cctx, &sess));
	/* The last ticket is 1500 s old, made with a current key, but the
	 * full handshake it stands for is 3500 s old: still in. */
	clock_ahead_s = 3500;
	ck_assert(inbound_round(sctx, cctx, &sess));
	/* ... and 3700 s: a full handshake. */
	clock_ahead_s = 3700;
	ck_assert(!inbound_round(sctx, cctx, &sess));
	/* Which starts the hour again. */
	clock_ahead_s = 3800;
	ck_assert(inbound_round(sctx, cctx, &sess));
	clock_ahead_s = 0;
	SSL_SESSION_free(sess);
	SSL_CTX_free(cctx);
	mtd_tls_ctx_free(sctx);
}
END_TEST

/* RFC 9113 §9.2.1: HTTP/2 over TLS 1.2 must not renegotiate. The server's
 * HelloRequest is refused, so no second handshake happens. */
START_TEST(renegotiation_is_refused)
{
	struct pair p;
	pair_open(&p);
	ck_assert_int_eq(SSL_renegotiate(p.srv), 1);
	SSL_do_handshake(p.srv); /* sends HelloRequest */
	uint8_t buf[256];
	unsigned long why = 0;
	for (int i = 0; i < 20 && !why; i++) {
		mtd_xprt_read(&p.c, buf, sizeof(buf));
		if (SSL_read(p.srv, buf, sizeof(buf)) <= 0)
			why = ERR_peek_error();
		ERR_clear_error();
	}
	ck_assert_msg(ERR_GET_REASON(why) == SSL_R_NO_RENEGOTIATION, "server: %s",
	              why ? ERR_reason_error_string(why) : "no error: renegotiated");
	pair_close(&p);
}
END_TEST

/* A write that TLS can only finish after reading (the server's handshake
 * messages during a renegotiation) asks for readability, and the
 * connection waits for readability, even while its reading is paused for
 * output pressure. Waiting for writability instead spins (the socket is
 * writable) and never reads what the write waits for. Renegotiation is
 * turned back on for this connection: it is the one way OpenSSL's client
 * makes SSL_write need a read. */
START_TEST(write_that_must_read_waits_for_readability)
{
	struct pair p;
	pair_open(&p);
	SSL_clear_options(p.c.ssl, SSL_OP_NO_RENEGOTIATION);
	ck_assert_int_eq(SSL_renegotiate(p.srv), 1);
	SSL_do_handshake(p.srv); /* sends HelloRequest */
	uint8_t buf[256];
	/* The client reads the HelloRequest and sends its ClientHello. */
	ck_assert_int_eq(mtd_xprt_read(&p.c, buf, sizeof(buf)), MTD_IO_WANT_READ);

	/* More output than the read-pause mark (2 x 64 KiB). */
	enum { OUT = 200 * 1024 };
	p.c.out = malloc(OUT);
	for (size_t i = 0; i < OUT; i++)
		p.c.out[i] = (uint8_t)(i * 31 + 7);
	p.c.out_len = p.c.out_cap = OUT;
	ck_assert_int_eq(mtd_xprt_write(&p.c, p.c.out, 1), MTD_IO_WANT_READ);

	ck_assert_int_eq(mtd_conn_flush(&p.c), 0);
	ck_assert(p.c.read_paused);
	ck_assert_msg(event_pending(&p.c.rev, EV_READ, NULL), "not waiting for readability");
	ck_assert_msg(!event_pending(&p.c.wev, EV_WRITE, NULL), "waiting for writability");

	/* The server answers; the connection's read event then lets the
	 * write go on, and all of the output arrives. */
	uint8_t *got = malloc(OUT);
	size_t have = 0;
	for (int i = 0; i < 10000 && have < OUT; i++) {
		have += server_drain(&p, got + have, OUT - have);
		event_base_loop(p.base, EVLOOP_NONBLOCK);
		if (p.c.in_dirty) {
			TAILQ_REMOVE(&p.w.dirty, &p.c, dirty_link);
			p.c.in_dirty = false;
			mtd_conn_flush(&p.c);
		}
	}
	ck_assert_uint_eq(have, OUT);
	for (size_t i = 0; i < OUT; i++)
		if (got[i] != (uint8_t)(i * 31 + 7))
			ck_abort_msg("byte %zu differs", i);
	ck_assert_int_eq(SSL_renegotiate_pending(p.srv), 0);
	free(got);
	pair_close(&p);
}
END_TEST

/* A write that needs writability says so, distinctly from needing
 * readability (before, both came back as one "again"). */
START_TEST(write_on_full_socket_wants_write)
{
	struct pair p;
	pair_open(&p);
	static uint8_t chunk[16384];
	ssize_t n;
	int i = 0;
	while ((n = mtd_xprt_write(&p.c, chunk, sizeof(chunk))) > 0 && i++ < 10000)
		;
	ck_assert_int_eq(n, MTD_IO_WANT_WRITE);
	pair_close(&p);
}
END_TEST

/* Several records that arrived together come out of one read. */
START_TEST(read_gathers_records)
{
	struct pair p;
	pair_open(&p);
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(SSL_write(p.srv, "0123456789", 10), 10);
	uint8_t buf[256];
	ck_assert_int_eq(mtd_xprt_read(&p.c, buf, sizeof(buf)), 50);
	ck_assert_int_eq(mtd_xprt_read(&p.c, buf, sizeof(buf)), MTD_IO_WANT_READ);
	ck_assert_int_eq(SSL_write(p.srv, "abc", 3), 3);
	ck_assert_int_eq(mtd_xprt_read(&p.c, buf, sizeof(buf)), 3);
	ck_assert(memcmp(buf, "abc", 3) == 0);
	/* A clean close reads as 0. */
	SSL_shutdown(p.srv);
	ck_assert_int_eq(mtd_xprt_read(&p.c, buf, sizeof(buf)), MTD_IO_WANT_READ);
	ck_assert_int_eq(mtd_xprt_read(&p.c, buf, sizeof(buf)), 0);
	pair_close(&p);
}
END_TEST

/* Read ahead: the first read takes every record the socket holds in one
 * read(2), and what it has not handed over yet shows as pending. */
START_TEST(read_ahead_takes_the_socket_at_once)
{
	struct pair p;
	pair_open(&p);
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(SSL_write(p.srv, "0123456789", 10), 10);
	uint8_t buf[256];
	ck_assert(!mtd_xprt_pending(&p.c));
	ck_assert_int_eq(mtd_xprt_read(&p.c, buf, 15), 15);
	/* Without read ahead, records 3 to 5 would still be in the socket. */
	ck_assert_int_eq(recv(p.c.fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT), -1);
	ck_assert(mtd_xprt_pending(&p.c));
	ck_assert_int_eq(mtd_xprt_read(&p.c, buf, sizeof(buf)), 35);
	ck_assert(memcmp(buf, "56789", 5) == 0);
	ck_assert(!mtd_xprt_pending(&p.c));
	pair_close(&p);
}
END_TEST

/* The server's empty SETTINGS: the session's first frame. */
static const uint8_t settings[9] = {0, 0, 0, NGHTTP2_SETTINGS, 0, 0, 0, 0, 0};

/* After a turn that left bytes in the read-ahead: the next turns read
 * them all, the connection stays up, and its socket is still read when
 * frame (len bytes) comes after. */
static void read_ahead_read_in_later_turns(struct pair *p, const uint8_t *frame, size_t len)
{
	for (int i = 0; i < 4 && mtd_xprt_pending(&p->c); i++)
		event_base_loop(p->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
	ck_assert(!mtd_xprt_pending(&p->c));
	ck_assert_int_ne(p->c.state, MTD_CONN_CLOSED);
	/* And the socket is still read when more comes. */
	ck_assert(event_pending(&p->c.rev, EV_READ, NULL));
	ck_assert_int_eq(SSL_write(p->srv, frame, (int)len), (int)len);
	event_base_loop(p->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
	uint8_t b;
	ck_assert_int_eq(recv(p->c.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT), -1);
	ck_assert_int_ne(p->c.state, MTD_CONN_CLOSED);
}

/* A readable event that runs out of read rounds with bytes read ahead
 * comes back by itself: the socket is empty, so no readiness would. It
 * comes back at the next turn (one event_base_loop(EVLOOP_ONCE),
 * worker_main's), not in this one: a peer that keeps the read-ahead full
 * would hold the worker's turn, its other sockets and timers unread (a
 * TLS upstream flooding frames nghttp2 ignores delayed another
 * service's calls on its worker by 5 s). */
START_TEST(read_ahead_left_after_the_rounds_is_read_next_turn)
{
	struct pair p;
	pair_open(&p);
	p.w.rbuf_len = 512; /* 8 rounds take 4 KiB */
	ck_assert_int_eq(SSL_write(p.srv, settings, sizeof(settings)), (int)sizeof(settings));
	/* 8 KiB of frames of an unknown type (RFC 9113 §4.1: ignored). */
	static uint8_t frame[9 + 2039];
	frame[1] = (2039 >> 8) & 0xff;
	frame[2] = 2039 & 0xff;
	frame[3] = 0xfa;
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(SSL_write(p.srv, frame, sizeof(frame)), (int)sizeof(frame));
	event_base_loop(p.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
	ck_assert_int_eq(recv(p.c.fd, frame, 1, MSG_PEEK | MSG_DONTWAIT), -1); /* all read ahead */
	ck_assert_msg(mtd_xprt_pending(&p.c), "the read-ahead was read again in the same turn");
	read_ahead_read_in_later_turns(&p, frame, sizeof(frame));
	pair_close(&p);
}
END_TEST

/* The server's SETTINGS, then three copies of frame (len bytes, made a
 * frame of an unknown type: ignored, RFC 9113 §4.1), all in one TLS
 * read: the session takes the SETTINGS, the frames wait in the
 * read-ahead. */
static void frames_in_read_ahead(struct pair *p, uint8_t *frame, size_t len)
{
	ck_assert_int_eq(SSL_write(p->srv, settings, sizeof(settings)), (int)sizeof(settings));
	frame[2] = (uint8_t)(len - 9);
	frame[3] = 0xfa;
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(SSL_write(p->srv, frame, (int)len), (int)len);
	uint8_t buf[sizeof(settings)];
	ck_assert_int_eq(mtd_xprt_read(&p->c, buf, sizeof(buf)), (int)sizeof(buf));
	ck_assert_int_eq(nghttp2_session_mem_recv(p->c.ng, buf, sizeof(buf)), (ssize_t)sizeof(buf));
}

/* What the TLS handshake read ahead (the peer's first frames, no
 * readiness left on the socket) is read when the connection's I/O starts,
 * at the next turn too (conn.c read_next_turn), not in the turn that
 * started it: as the worker does, mtd_conn_start_io runs here inside a
 * callback of the loop. */
static void start_io_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct mtd_conn *c = arg;
	event_del(&c->rev);
	ck_assert_int_eq(mtd_conn_start_io(c), 0);
}

START_TEST(read_ahead_at_the_start_of_io_is_read_next_turn)
{
	struct pair p;
	pair_open(&p);
	static uint8_t frame[9 + 100];
	frames_in_read_ahead(&p, frame, sizeof(frame));
	uint8_t peek;
	ck_assert_int_eq(recv(p.c.fd, &peek, 1, MSG_PEEK | MSG_DONTWAIT), -1);
	ck_assert(mtd_xprt_pending(&p.c));
	ck_assert_int_eq(event_base_once(p.base, -1, EV_TIMEOUT, start_io_cb, &p.c, NULL), 0);
	event_base_loop(p.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
	ck_assert_msg(mtd_xprt_pending(&p.c), "the read-ahead was read in the turn that started the I/O");
	read_ahead_read_in_later_turns(&p, frame, sizeof(frame));
	pair_close(&p);
}
END_TEST

/* The third site: reading paused while the output could not drain
 * (conn.c set_read_paused), with bytes TLS read ahead, resumes when it
 * drained; those bytes are read at the next turn too, not in the turn
 * whose flush resumed reading. As the worker's flush does, the flush runs
 * here inside a callback of the loop. */
enum { RESUME_OUT = 1 << 20 };

static void resume_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct pair *p = arg;
	static uint8_t scratch[64 * 1024];
	for (int i = 0; i < 10000 && p->c.read_paused; i++) {
		server_drain(p, scratch, sizeof(scratch));
		ck_assert_int_eq(mtd_conn_flush(&p->c), 0);
	}
	ck_assert_msg(!p->c.read_paused, "reading did not resume once the output drained");
}

START_TEST(read_ahead_when_reading_resumes_is_read_next_turn)
{
	struct pair p;
	pair_open(&p);
	static uint8_t frame[9 + 100];
	frames_in_read_ahead(&p, frame, sizeof(frame));
	ck_assert(mtd_xprt_pending(&p.c));
	/* More output than the socket takes and than the read-pause mark:
	 * the flush waits for writability and stops reading. */
	int small = 4096;
	ck_assert_int_eq(setsockopt(p.c.fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
	p.c.out = malloc(RESUME_OUT);
	ck_assert_ptr_nonnull(p.c.out);
	memset(p.c.out, 'y', RESUME_OUT);
	p.c.out_len = p.c.out_cap = RESUME_OUT;
	ck_assert_int_eq(mtd_conn_flush(&p.c), 0);
	ck_assert(p.c.read_paused);
	ck_assert(!event_pending(&p.c.rev, EV_READ, NULL));
	ck_assert(mtd_xprt_pending(&p.c));
	ck_assert_int_eq(event_base_once(p.base, -1, EV_TIMEOUT, resume_cb, &p, NULL), 0);
	event_base_loop(p.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
	ck_assert_msg(mtd_xprt_pending(&p.c), "the read-ahead was read in the turn that resumed reading");
	read_ahead_read_in_later_turns(&p, frame, sizeof(frame));
	pair_close(&p);
}
END_TEST

/* ---- plain TCP ---------------------------------------------------------- */

/* A transport whose reads always want writability. */
static ssize_t test_read_wants_write(struct mtd_conn *c, uint8_t *buf, size_t len)
{
	return MTD_IO_WANT_WRITE;
}
static ssize_t test_write_nothing(struct mtd_conn *c, const uint8_t *buf, size_t len)
{
	return MTD_IO_WANT_WRITE;
}
static int test_handshake(struct mtd_conn *c, char *err, size_t errlen)
{
	return 0;
}
static void test_xprt_close(struct mtd_conn *c) {}
static bool test_pending(const struct mtd_conn *c)
{
	return false;
}

struct tcp_pair {
	struct event_base *base;
	struct mtd_worker w;
	struct mtd_conn c; /* maitred's side, plain TCP */
	int peer;
};

static void tcp_open(struct tcp_pair *p)
{
	memset(p, 0, sizeof(*p));
	int sv[2];
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
	p->peer = sv[1];
	p->base = event_base_new();
	p->w.base = p->base;
	TAILQ_INIT(&p->w.dirty);
	p->w.rbuf_len = 64 * 1024;
	p->w.rbuf = malloc(p->w.rbuf_len);
	p->c.ops = &test_ops;
	p->c.w = &p->w;
	p->c.fd = sv[0];
	snprintf(p->c.peer, sizeof(p->c.peer), "test");
	ck_assert_int_eq(mtd_conn_timer_init(&p->c), 0);
	nghttp2_session_callbacks *cbs;
	ck_assert_int_eq(nghttp2_session_callbacks_new(&cbs), 0);
	ck_assert_int_eq(nghttp2_session_client_new(&p->c.ng, cbs, &p->c), 0);
	nghttp2_session_callbacks_del(cbs);
	p->c.state = MTD_CONN_READY;
	ck_assert_int_eq(mtd_conn_start_io(&p->c), 0);
}

static void tcp_close(struct tcp_pair *p)
{
	fail_fd = -1;
	fail_ev = NULL;
	if (p->c.state != MTD_CONN_CLOSED) {
		event_del(&p->c.rev);
		event_del(&p->c.wev);
		close(p->c.fd);
	}
	nghttp2_session_del(p->c.ng);
	for (unsigned i = p->c.ref_head; i < p->c.n_refs; i++)
		mtd_bufq_unref(p->c.refs[i].chunk);
	free(p->c.refs);
	free(p->c.out);
	close(p->peer);
	mtd_conn_linger_end_all(&p->w); /* the graceful closes' sockets */
	event_base_free(p->base);
	free(p->w.rbuf);
}

/* n bytes of output waiting for c's socket. */
static void pending_output(struct tcp_pair *p, size_t n)
{
	p->c.out = malloc(n);
	ck_assert_ptr_nonnull(p->c.out);
	memset(p->c.out, 'y', n);
	p->c.out_len = p->c.out_cap = n;
}

/* From now on read(2) and send(2) on c's socket fail with e. */
static void socket_fails(struct tcp_pair *p, int e)
{
	fail_fd = p->c.fd;
	fail_errno = e;
}

/* Out of memory in read(2) is the end of the connection, not a wait: its
 * code (-ENOMEM) once doubled as "wait for writability", and the
 * connection waited on a socket that was writable all along, read again,
 * got ENOMEM again... (issue 15, defect 6). */
START_TEST(enomem_from_read_closes_the_connection)
{
	struct tcp_pair p;
	tcp_open(&p);
	ck_assert_int_eq(write(p.peer, "x", 1), 1);
	socket_fails(&p, ENOMEM);
	ck_assert_int_lt(mtd_xprt_read(&p.c, p.w.rbuf, p.w.rbuf_len), 0);
	ck_assert_int_ne(mtd_xprt_read(&p.c, p.w.rbuf, p.w.rbuf_len), MTD_IO_WANT_WRITE);
	ck_assert_int_ne(mtd_xprt_read(&p.c, p.w.rbuf, p.w.rbuf_len), MTD_IO_WANT_READ);
	ck_assert_msg(!mtd_conn_on_readable(&p.c), "the connection stayed open");
	ck_assert_int_eq(p.c.state, MTD_CONN_CLOSED);
	ck_assert(!p.c.want_write_on_read);
	tcp_close(&p);
}
END_TEST

/* The same for send(2): the flush closes the connection instead of
 * waiting for writability. */
START_TEST(enomem_from_send_closes_the_connection)
{
	struct tcp_pair p;
	tcp_open(&p);
	pending_output(&p, 64);
	socket_fails(&p, ENOMEM);
	ck_assert_int_ne(mtd_xprt_write(&p.c, p.c.out, 64), MTD_IO_WANT_WRITE);
	ck_assert_int_eq(mtd_conn_flush(&p.c), -ENOMEM);
	ck_assert_int_eq(p.c.state, MTD_CONN_CLOSED);
	tcp_close(&p);
}
END_TEST

/* Issue 15, defect 8 (every event_add checked): a flush whose socket is
 * full waits for writability; when libevent refuses that wait the
 * connection would never write again, and is closed instead of kept. */
START_TEST(flush_that_cannot_wait_for_writability_closes)
{
	struct tcp_pair p;
	tcp_open(&p);
	pending_output(&p, 64);
	socket_fails(&p, EAGAIN);
	fail_ev = &p.c.wev;
	ck_assert_int_lt(mtd_conn_flush(&p.c), 0);
	ck_assert_int_eq(p.c.state, MTD_CONN_CLOSED);
	tcp_close(&p);
}
END_TEST

/* The same for a read that must wait for writability (TLS). */
START_TEST(read_that_cannot_wait_for_writability_closes)
{
	struct tcp_pair p;
	tcp_open(&p);
	static const struct mtd_xprt_ops wants_write = {
	        .name = "test",
	        .read = test_read_wants_write,
	        .write = test_write_nothing,
	        .handshake = test_handshake,
	        .close = test_xprt_close,
	        .pending = test_pending,
	};
	p.c.xprt = &wants_write;
	fail_ev = &p.c.wev;
	ck_assert(!mtd_conn_on_readable(&p.c));
	ck_assert_int_eq(p.c.state, MTD_CONN_CLOSED);
	tcp_close(&p);
}
END_TEST

/* A doomed connection whose deadline cannot be armed ends at the next
 * turn instead of living as long as its peer does not read. */
START_TEST(doom_without_its_deadline_closes_next_turn)
{
	struct tcp_pair p;
	tcp_open(&p);
	fail_ev = &p.c.timer;
	mtd_conn_doom(&p.c);
	ck_assert_int_ne(p.c.state, MTD_CONN_CLOSED); /* not under the caller */
	event_base_loop(p.base, EVLOOP_NONBLOCK);
	ck_assert_int_eq(p.c.state, MTD_CONN_CLOSED);
	tcp_close(&p);
}
END_TEST

/* Both sides open the same connection window: sixteen streams' worth,
 * at most 64 MiB (the largest window nghttp2 and RFC 9113 §6.9.1 allow
 * is 2^31 - 1). */
START_TEST(connection_window)
{
	ck_assert_int_eq(mtd_conn_window(65535), 16 * 65535);
	ck_assert_int_eq(mtd_conn_window(1u << 20), 16 << 20);
	ck_assert_int_eq(mtd_conn_window(1u << 22), 1 << 26);
	ck_assert_int_eq(mtd_conn_window((1u << 22) + 1), 1 << 26);
	ck_assert_int_eq(mtd_conn_window(INT32_MAX), 1 << 26);
	struct tcp_pair p;
	tcp_open(&p);
	nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1u << 20}};
	ck_assert_int_eq(mtd_conn_submit_settings(&p.c, iv, 1, 1u << 20), 0);
	ck_assert_int_eq(nghttp2_session_get_local_window_size(p.c.ng), 16 << 20);
	tcp_close(&p);
}
END_TEST

/* EAGAIN stays a wait, for both directions. */
START_TEST(eagain_is_a_wait)
{
	struct tcp_pair p;
	tcp_open(&p);
	socket_fails(&p, EAGAIN);
	ck_assert_int_eq(mtd_xprt_read(&p.c, p.w.rbuf, p.w.rbuf_len), MTD_IO_WANT_READ);
	ck_assert_int_eq(mtd_xprt_write(&p.c, (const uint8_t *)"z", 1), MTD_IO_WANT_WRITE);
	ck_assert(mtd_conn_on_readable(&p.c));
	ck_assert_int_ne(p.c.state, MTD_CONN_CLOSED);
	tcp_close(&p);
}
END_TEST

/* A queue of n bytes of a pattern, appended unevenly so that frames
 * cross its chunks. */
static void pattern_queue(struct mtd_bufq *q, uint8_t *want, size_t n)
{
	for (size_t i = 0; i < n; i++)
		want[i] = (uint8_t)(i * 7 + 1);
	for (size_t put = 0; put < n; put += 5000)
		ck_assert_int_eq(mtd_bufq_append(q, want + put, n - put < 5000 ? n - put : 5000), 0);
}

/* On plain TCP a DATA frame of 4 KiB or more is written from its call's
 * queue where it is: only its header goes into c->out, one sendmsg
 * gathers both, the bytes outlive the queue dropping them (the call
 * takes them as soon as the frame is queued), a write the socket takes
 * in part goes on mid-span, and the output's mark counts the spans'
 * bytes (the fourth 16 KiB frame pauses the session). */
START_TEST(data_is_written_from_the_queue)
{
	struct tcp_pair p;
	tcp_open(&p);
	/* The session's preface and SETTINGS out of the way first. */
	ck_assert_int_eq(mtd_conn_flush(&p.c), 0);
	uint8_t junk[4096];
	while (read(p.peer, junk, sizeof(junk)) > 0)
		;
	int small = 8192;
	ck_assert_int_eq(setsockopt(p.c.fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
	enum { FRAME = 16384, FRAMES = 4 };
	static uint8_t want[FRAMES * FRAME], got[FRAMES * (9 + FRAME)];
	struct mtd_bufq q = {0};
	pattern_queue(&q, want, sizeof(want));
	p.c.n_streams = 1; /* as while a call is open: the buffers stay */
	for (int f = 0; f < FRAMES; f++) {
		uint8_t hd[9] = {0, 0x40, 0, 0, 0, 0, 0, 0, (uint8_t)(f + 1)};
		int rv = mtd_conn_send_data(&p.c, hd, &q, (size_t)f * FRAME, FRAME);
		ck_assert_int_eq(rv, f == FRAMES - 1 ? NGHTTP2_ERR_PAUSE : 0);
	}
	ck_assert_uint_eq(p.c.out_len, FRAMES * 9); /* the headers alone were copied */
	ck_assert_uint_eq(p.c.ref_bytes, sizeof(want));
	mtd_bufq_clear(&q);
	n_sendmsg = 0;
	size_t have = 0;
	for (int round = 0; round < 1000 && have < sizeof(got); round++) {
		ck_assert_int_eq(mtd_conn_flush(&p.c), 0);
		ssize_t n = read(p.peer, got + have, sizeof(got) - have);
		if (n > 0)
			have += (size_t)n;
	}
	ck_assert_uint_eq(have, sizeof(got));
	ck_assert_uint_gt(n_sendmsg, 1); /* the socket took it in parts */
	for (int f = 0; f < FRAMES; f++) {
		const uint8_t *fr = got + (size_t)f * (9 + FRAME);
		ck_assert_uint_eq(fr[8], f + 1);
		ck_assert_mem_eq(fr + 9, want + (size_t)f * FRAME, FRAME);
	}
	ck_assert_uint_eq(mtd_conn_flush(&p.c), 0);
	ck_assert_uint_eq(p.c.ref_bytes, 0);
	ck_assert_uint_eq(p.c.n_refs, 0);
	tcp_close(&p);
}
END_TEST

/* Output appended while spans wait behind a partial write: the buffer is
 * compacted (or grown) under them and every byte still goes out in
 * order, each span between the bytes it was queued between. */
START_TEST(spans_keep_their_place_when_the_output_moves)
{
	struct tcp_pair p;
	tcp_open(&p);
	ck_assert_int_eq(mtd_conn_flush(&p.c), 0);
	uint8_t junk[4096];
	while (read(p.peer, junk, sizeof(junk)) > 0)
		;
	int small = 4096;
	ck_assert_int_eq(setsockopt(p.c.fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
	enum { FRAME = 8192, TAIL = 30000 };
	static uint8_t want[2 * FRAME], tail[TAIL], expect[2 * (9 + FRAME) + TAIL], got[sizeof(expect)];
	struct mtd_bufq q = {0};
	pattern_queue(&q, want, sizeof(want));
	p.c.n_streams = 1;
	uint8_t hd1[9] = {0, 0x20, 0, 0, 0, 0, 0, 0, 1}, hd2[9] = {0, 0x20, 0, 0, 0, 0, 0, 0, 2};
	ck_assert_int_eq(mtd_conn_send_data(&p.c, hd1, &q, 0, FRAME), 0);
	ck_assert_int_eq(mtd_conn_send_data(&p.c, hd2, &q, FRAME, FRAME), 0);
	mtd_bufq_clear(&q);
	/* Part of it goes out: out_off moves past the first header. */
	ck_assert_int_eq(mtd_conn_flush(&p.c), 0);
	ck_assert_uint_gt(p.c.out_off, 0);
	ck_assert_uint_gt(p.c.ref_bytes, 0);
	/* More than the room left: out is compacted, then grown. */
	for (size_t i = 0; i < TAIL; i++)
		tail[i] = (uint8_t)(i * 3 + 11);
	ck_assert_int_eq(mtd_conn_out_append(&p.c, tail, TAIL), 0);
	size_t at = 0;
	memcpy(expect + at, hd1, 9), at += 9;
	memcpy(expect + at, want, FRAME), at += FRAME;
	memcpy(expect + at, hd2, 9), at += 9;
	memcpy(expect + at, want + FRAME, FRAME), at += FRAME;
	memcpy(expect + at, tail, TAIL);
	size_t have = 0;
	for (int round = 0; round < 1000 && have < sizeof(got); round++) {
		ck_assert_int_eq(mtd_conn_flush(&p.c), 0);
		ssize_t n = read(p.peer, got + have, sizeof(got) - have);
		if (n > 0)
			have += (size_t)n;
	}
	ck_assert_uint_eq(have, sizeof(got));
	ck_assert_mem_eq(got, expect, sizeof(expect));
	ck_assert_uint_eq(p.c.ref_bytes, 0);
	tcp_close(&p);
}
END_TEST

/* TLS writes one buffer (SSL_write): there the frame is copied into
 * c->out, and so is a frame under 4 KiB on plain TCP. */
START_TEST(data_is_copied_under_tls_and_when_small)
{
	struct tcp_pair p;
	tcp_open(&p);
	static uint8_t want[24000];
	struct mtd_bufq q = {0};
	pattern_queue(&q, want, sizeof(want));
	uint8_t hd[9] = {0};
	ck_assert_int_eq(mtd_conn_send_data(&p.c, hd, &q, 0, 4095), 0);
	ck_assert_uint_eq(p.c.out_len, 9 + 4095);
	ck_assert_uint_eq(p.c.ref_bytes, 0);
	static const struct mtd_xprt_ops tls_like = {
	        .name = "test",
	        .read = test_read_wants_write,
	        .write = test_write_nothing,
	        .handshake = test_handshake,
	        .close = test_xprt_close,
	        .pending = test_pending,
	};
	p.c.xprt = &tls_like;
	ck_assert_int_eq(mtd_conn_send_data(&p.c, hd, &q, 4095, 16384), 0);
	ck_assert_uint_eq(p.c.out_len, 2 * 9 + 4095 + 16384);
	ck_assert_uint_eq(p.c.ref_bytes, 0);
	ck_assert_mem_eq(p.c.out + 2 * 9 + 4095, want + 4095, 16384);
	p.c.xprt = NULL;
	mtd_bufq_clear(&q);
	tcp_close(&p);
}
END_TEST

static Suite *transport_suite(void)
{
	Suite *s = suite_create("transport");
	TCase *tc = tcase_create("tls");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, renegotiation_is_refused);
	tcase_add_test(tc, write_that_must_read_waits_for_readability);
	tcase_add_test(tc, write_on_full_socket_wants_write);
	tcase_add_test(tc, read_gathers_records);
	tcase_add_test(tc, read_ahead_takes_the_socket_at_once);
	tcase_add_test(tc, read_ahead_left_after_the_rounds_is_read_next_turn);
	tcase_add_test(tc, read_ahead_at_the_start_of_io_is_read_next_turn);
	tcase_add_test(tc, read_ahead_when_reading_resumes_is_read_next_turn);
	tcase_add_test(tc, inbound_sessions_end_an_hour_after_the_full_handshake);
	tcase_add_test(tc, upstream_sessions_end_an_hour_after_the_full_handshake);
	suite_add_tcase(s, tc);
	TCase *tcp = tcase_create("tcp");
	tcase_add_test(tcp, enomem_from_read_closes_the_connection);
	tcase_add_test(tcp, enomem_from_send_closes_the_connection);
	tcase_add_test(tcp, eagain_is_a_wait);
	tcase_add_test(tcp, data_is_written_from_the_queue);
	tcase_add_test(tcp, data_is_copied_under_tls_and_when_small);
	tcase_add_test(tcp, spans_keep_their_place_when_the_output_moves);
	tcase_add_test(tcp, connection_window);
	tcase_add_test(tcp, flush_that_cannot_wait_for_writability_closes);
	tcase_add_test(tcp, read_that_cannot_wait_for_writability_closes);
	tcase_add_test(tcp, doom_without_its_deadline_closes_next_turn);
	suite_add_tcase(s, tcp);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(transport_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
