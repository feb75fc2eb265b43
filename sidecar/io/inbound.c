/* Inbound listeners and their connections (inbound.h): mesh mode's server
 * half, issue 17.
 *
 *   accept --> HANDSHAKE --first byte a TLS record, handshake done--> READY
 *   (admitted:     |     (identity, x-forwarded-client-cert)  (a downstream
 *   max_connections)                                            connection:
 *                  +-- not TLS / refused / timeout --> CLOSED   downstream.c)
 *
 * HANDSHAKE: on its worker's handshake list (not the downstream list), its
 * deadline downstream.preface_timeout on the connection's timer; what
 * ends it is counted by reason and logged at most once a second per peer
 * address (ops/mesh.h). Nothing reaches the app before READY, and then
 * only calls authorization allows (mtd_inbound_call_start). */
#include "config.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "authz/authz.h"
#include "core/clock.h"
#include "core/log.h"
#include "route/route.h"
#include "sidecar/call/call.h"
#include "sidecar/call/headers.h"
#include "sidecar/control/runtime.h"
#include "sidecar/io/conn.h"
#include "sidecar/io/downstream.h"
#include "sidecar/io/inbound.h"
#include "sidecar/io/transport.h"
#include "sidecar/ops/mesh.h"
#include "sidecar/ops/metrics.h"
#include "sidecar/turn.h"
#include "sidecar/worker.h"

/* ---- the listeners' TLS contexts ------------------------------------------ */

static struct in_tls {
	pthread_mutex_t mu;
	struct ssl_ctx_st *ctx;
	char by[256]; /* ctx's own identity (the XFCC By= element) */
	/* Control thread only: what the listener runs (its address, read at
	 * start) and the files ctx was made from. */
	char *listen;
	char *files[3]; /* cert, key, client CA (NULL: none) */
} in_tls[MTD_CFG_INBOUND_MAX];
static size_t n_in_tls;

static struct ssl_ctx_st *tls_build(const struct mtd_cfg_inbound *ib, char *by, size_t bylen, char *err, size_t errlen)
{
	struct ssl_ctx_st *ctx = mtd_tls_server_ctx_new(ib->cert_file, ib->key_file, ib->client_ca_file, err, errlen);
	if (ctx && mtd_tls_ctx_identity(ctx, by, bylen) < 0)
		by[0] = '\0'; /* a certificate without SAN: no By= */
	return ctx;
}

static bool same_file(const char *a, const char *b)
{
	return (a == NULL) == (b == NULL) && (a == NULL || strcmp(a, b) == 0);
}

static void set_files(struct in_tls *t, const struct mtd_cfg_inbound *ib)
{
	const char *f[3] = {ib->cert_file, ib->key_file, ib->client_ca_file};
	for (int k = 0; k < 3; k++) {
		free(t->files[k]);
		t->files[k] = f[k] ? strdup(f[k]) : NULL;
	}
}

int mtd_inbound_tls_init(const struct mtd_cfg *cfg, char *err, size_t errlen)
{
	for (size_t i = 0; i < cfg->n_inbound; i++) {
		char why[384];
		pthread_mutex_init(&in_tls[i].mu, NULL);
		n_in_tls = i + 1;
		in_tls[i].listen = strdup(cfg->inbound[i].listen.text);
		set_files(&in_tls[i], &cfg->inbound[i]);
		in_tls[i].ctx = tls_build(&cfg->inbound[i], in_tls[i].by, sizeof(in_tls[i].by), why, sizeof(why));
		if (!in_tls[i].ctx || !in_tls[i].listen) {
			snprintf(err, errlen, "inbound[%zu] (%s): TLS: %s", i, cfg->inbound[i].listen.text,
			         in_tls[i].ctx ? "out of memory" : why);
			mtd_inbound_tls_fini();
			return -1;
		}
	}
	return 0;
}

const char *mtd_inbound_running_listen(size_t i)
{
	return i < n_in_tls ? in_tls[i].listen : NULL;
}

void mtd_inbound_reload(const struct mtd_cfg *cfg)
{
	size_t n = cfg->n_inbound > n_in_tls ? cfg->n_inbound : n_in_tls;
	for (size_t i = 0; i < n; i++) {
		const char *was = i < n_in_tls ? in_tls[i].listen : "(none)";
		const char *now = i < cfg->n_inbound ? cfg->inbound[i].listen.text : "(none)";
		if (strcmp(was, now) != 0) {
			MTD_WARN("reload: inbound[%zu].listen %s -> %s needs a restart; still listening on %s", i, was,
			         now, was);
			continue;
		}
		const struct mtd_cfg_inbound *ib = &cfg->inbound[i];
		struct in_tls *t = &in_tls[i];
		if (same_file(t->files[0], ib->cert_file) && same_file(t->files[1], ib->key_file) &&
		    same_file(t->files[2], ib->client_ca_file))
			continue; /* the same files: their content is certwatch's */
		char err[384];
		if (mtd_inbound_tls_reload(i, ib, err, sizeof(err)) < 0) {
			MTD_ERROR("reload: inbound %s: TLS: %s; new handshakes keep the previous certificate", now,
			          err);
			continue;
		}
		set_files(t, ib);
		MTD_INFO("reload: inbound %s: new TLS files, for new handshakes", now);
	}
}

int mtd_inbound_tls_reload(size_t i, const struct mtd_cfg_inbound *ib, char *err, size_t errlen)
{
	char by[256];
	if (i >= n_in_tls) {
		snprintf(err, errlen, "not listening (a new inbound entry needs a restart)");
		return -1;
	}
	struct ssl_ctx_st *ctx = tls_build(ib, by, sizeof(by), err, errlen);
	if (!ctx)
		return -1;
	pthread_mutex_lock(&in_tls[i].mu);
	struct ssl_ctx_st *old = in_tls[i].ctx;
	in_tls[i].ctx = ctx;
	memcpy(in_tls[i].by, by, sizeof(by));
	pthread_mutex_unlock(&in_tls[i].mu);
	if (old)
		mtd_tls_ctx_free(old); /* connections in flight hold their own */
	return 0;
}

size_t mtd_inbound_tls_count(void)
{
	return n_in_tls;
}

void mtd_inbound_tls_fini(void)
{
	for (size_t i = 0; i < n_in_tls; i++) {
		if (in_tls[i].ctx)
			mtd_tls_ctx_free(in_tls[i].ctx);
		in_tls[i].ctx = NULL;
		free(in_tls[i].listen);
		in_tls[i].listen = NULL;
		for (int k = 0; k < 3; k++) {
			free(in_tls[i].files[k]);
			in_tls[i].files[k] = NULL;
		}
		pthread_mutex_destroy(&in_tls[i].mu);
	}
	n_in_tls = 0;
}

/* A reference on listener i's current context, and its identity. */
static struct ssl_ctx_st *tls_take(size_t i, char by[256])
{
	if (i >= n_in_tls)
		return NULL;
	pthread_mutex_lock(&in_tls[i].mu);
	struct ssl_ctx_st *ctx = in_tls[i].ctx ? mtd_tls_ctx_ref(in_tls[i].ctx) : NULL;
	memcpy(by, in_tls[i].by, 256);
	pthread_mutex_unlock(&in_tls[i].mu);
	return ctx;
}

/* ---- per worker ------------------------------------------------------------ */

struct mtd_in_listener {
	struct mtd_worker *w;
	unsigned idx;
	int fd;
	struct event ev;
	bool added;
};

struct mtd_in_worker {
	size_t n;
	struct mtd_in_listener l[MTD_CFG_INBOUND_MAX];
	LIST_HEAD(, mtd_conn) handshakes; /* HANDSHAKE connections (conn->link) */
};

/* The listener's address as the running config names it. */
static const char *listener_name(const struct mtd_worker *w, unsigned idx)
{
	const struct mtd_cfg *cfg = w->rt->cfg;
	return idx < cfg->n_inbound ? cfg->inbound[idx].listen.text : "(removed)";
}

static void in_on_close(struct mtd_conn *c)
{
	struct mtd_in_peer *in = c->in;
	if (in->handshaking) {
		LIST_REMOVE(c, link);
		mtd_worker_down_closed();
		MTD_DEBUG("peer %s: closed during the handshake", c->peer);
	} else {
		mtd_down_ops.on_close(c);
	}
	free(in->xfcc);
	free(in);
	c->in = NULL;
}

static int in_prescan(struct mtd_conn *c, const uint8_t *p, size_t n)
{
	return mtd_down_ops.prescan(c, p, n);
}

static void in_after_recv(struct mtd_conn *c)
{
	mtd_down_ops.after_recv(c);
}

/* Downstream's, named for what it is (conn.c's messages say "peer"). */
static const struct mtd_conn_ops in_ops = {
        .role = "peer",
        .prescan = in_prescan,
        .after_recv = in_after_recv,
        .on_close = in_on_close,
        .on_priority = mtd_down_on_priority,
};

/* The handshake did not end well: counted, logged (rate-limited), closed. */
static void refuse(struct mtd_conn *c, enum mtd_tls_refusal why, const char *err)
{
	unsigned idx = c->in->listener;
	uint64_t held = 0;
	mtd_mesh_refused(idx, why);
	if (mtd_mesh_refusal_log(c->peer, mtd_now_ns(), &held))
		MTD_INFO("inbound %s: peer %s refused before HTTP/2 (%s): %s (%llu more since the last line)",
		         listener_name(c->w, idx), c->peer, mtd_tls_refusal_name(why), err, (unsigned long long)held);
	mtd_conn_close(c);
}

static void handshake_timeout(struct mtd_conn *c)
{
	char err[96];
	snprintf(err, sizeof(err), "TLS handshake not done within %lld ms (downstream.preface_timeout)",
	         (long long)c->w->rt->cfg->downstream.preface_timeout_ms);
	refuse(c, MTD_TLS_REFUSED_TIMEOUT, err);
}

/* The peer's identity and our x-forwarded-client-cert for its calls. */
static void learn_peer(struct mtd_conn *c)
{
	struct mtd_in_peer *in = c->in;
	char hash[65];
	bool is_uri = false;
	int rc = mtd_tls_peer_identity(c, in->identity, sizeof(in->identity), &is_uri, hash);
	if (rc == -ENAMETOOLONG)
		MTD_INFO("inbound %s: peer %s: a certificate SAN longer than %zu bytes: no identity",
		         listener_name(c->w, in->listener), c->peer, sizeof(in->identity) - 1);
	if (rc == 0 || rc == -ENAMETOOLONG) {
		const char *id = in->identity[0] ? in->identity : NULL;
		size_t n = mtd_xfcc_format(NULL, 0, in->by, hash, is_uri ? id : NULL, is_uri ? NULL : id);
		in->xfcc = malloc(n + 1);
		if (in->xfcc) {
			mtd_xfcc_format(in->xfcc, n + 1, in->by, hash, is_uri ? id : NULL, is_uri ? NULL : id);
			in->xfcc_len = n;
		}
	}
	in->mx = mtd_mesh_identity(in->listener, in->identity);
}

static void handshake_cb(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_conn *c = arg;
	struct mtd_in_peer *in = c->in;
	if (c->state == MTD_CONN_CLOSED)
		return;
	if (!in->peeked) {
		/* A TLS connection starts with a handshake record (RFC 8446
		 * §5.1, content type 22); anything else (an h2c preface on the
		 * TLS port) is refused here, without OpenSSL's guesswork. */
		unsigned char b;
		ssize_t n = recv(c->fd, &b, 1, MSG_PEEK);
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
			if (event_add(&c->rev, NULL) != 0)
				refuse(c, MTD_TLS_REFUSED_OTHER, "cannot wait for its socket (event_add failed)");
			return;
		}
		if (n == 0) {
			/* Connected and went away without a byte: a port probe (a
			 * load balancer's or kubelet's TCP check), not a handshake. */
			MTD_DEBUG("peer %s: closed before sending anything", c->peer);
			mtd_conn_close(c);
			return;
		}
		if (n < 0) {
			refuse(c, MTD_TLS_REFUSED_OTHER, strerror(errno));
			return;
		}
		if (b != 22) {
			refuse(c, MTD_TLS_REFUSED_NOT_TLS, "not TLS (plain HTTP/2 on the TLS port?)");
			return;
		}
		in->peeked = true;
	}
	char err[384];
	enum mtd_tls_refusal why;
	int rc = mtd_tls_server_handshake(c, err, sizeof(err), &why);
	if (rc == MTD_IO_WANT_READ || rc == MTD_IO_WANT_WRITE) {
		if (event_add(rc == MTD_IO_WANT_READ ? &c->rev : &c->wev, NULL) != 0)
			refuse(c, MTD_TLS_REFUSED_OTHER, "cannot wait for its socket (event_add failed)");
		return;
	}
	if (rc < 0) {
		refuse(c, why, err);
		return;
	}
	mtd_conn_timer_disarm(c);
	event_del(&c->rev);
	event_del(&c->wev);
	learn_peer(c);
	mtd_mesh_handshake(in->listener, mtd_tls_resumed(c));
	LIST_REMOVE(c, link);
	in->handshaking = false;
	MTD_DEBUG("peer %s: inbound %s: identity %s", c->peer, listener_name(c->w, in->listener),
	          in->identity[0] ? in->identity : "(none)");
	mtd_down_begin(c); /* closes c if it cannot read */
}

/* 0, or -ENOMEM with nothing kept (the caller closes fd). */
static int in_accept(struct mtd_worker *w, unsigned idx, int fd)
{
	char by[256];
	struct ssl_ctx_st *ctx = tls_take(idx, by);
	struct mtd_in_peer *in = calloc(1, sizeof(*in));
	struct mtd_conn *c = ctx && in ? mtd_down_conn_new(w, fd) : NULL;
	if (!c || mtd_tls_server_start(c, ctx) < 0) {
		if (c)
			mtd_conn_free(c);
		free(in);
		if (ctx)
			mtd_tls_ctx_free(ctx);
		return -ENOMEM;
	}
	mtd_tls_ctx_free(ctx); /* the SSL holds its own reference */
	in->listener = idx;
	in->handshaking = true;
	memcpy(in->by, by, sizeof(in->by));
	c->in = in;
	c->ops = &in_ops;
	c->state = MTD_CONN_HANDSHAKE;
	LIST_INSERT_HEAD(&w->in->handshakes, c, link);
	/* From here c is whole: a failure closes it (in_on_close). */
	if (event_assign(&c->rev, w->base, fd, EV_READ, handshake_cb, c) != 0 ||
	    event_assign(&c->wev, w->base, fd, EV_WRITE, handshake_cb, c) != 0 ||
	    mtd_conn_timer_arm(c, handshake_timeout, w->rt->cfg->downstream.preface_timeout_ms) < 0 ||
	    event_add(&c->rev, NULL) != 0) {
		refuse(c, MTD_TLS_REFUSED_OTHER, "cannot wait for its socket (event_add failed)");
		return 0;
	}
	return 0;
}

static void accept_cb(evutil_socket_t lfd, short what, void *arg)
{
	struct mtd_in_listener *l = arg;
	struct mtd_worker *w = l->w;
	/* Bounded, as the app's listener (worker.c). */
	for (int i = 0; i < 64; i++) {
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				MTD_WARN("worker %u: accept on inbound %s: %s", w->id, listener_name(w, l->idx),
				         strerror(errno));
			return;
		}
		/* downstream.max_connections counts these too. */
		if (!mtd_worker_admit(w)) {
			close(fd);
			continue;
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (in_accept(w, l->idx, fd) < 0) {
			mtd_worker_down_closed();
			close(fd);
		}
	}
}

int mtd_inbound_worker_init(struct mtd_worker *w, const int *fds, size_t n)
{
	w->in = calloc(1, sizeof(*w->in));
	if (!w->in) {
		for (size_t i = 0; i < n; i++)
			close(fds[i]);
		return -ENOMEM;
	}
	LIST_INIT(&w->in->handshakes);
	int rc = 0;
	for (size_t i = 0; i < n && i < MTD_CFG_INBOUND_MAX; i++) {
		struct mtd_in_listener *l = &w->in->l[i];
		l->w = w;
		l->idx = (unsigned)i;
		l->fd = fds[i];
		w->in->n = i + 1;
		if (rc == 0 && (event_assign(&l->ev, w->base, l->fd, EV_READ | EV_PERSIST, accept_cb, l) != 0 ||
		                event_add(&l->ev, NULL) != 0))
			rc = -EIO;
		else if (rc == 0)
			l->added = true;
	}
	return rc;
}

static void close_listeners(struct mtd_in_worker *iw)
{
	for (size_t i = 0; i < iw->n; i++) {
		struct mtd_in_listener *l = &iw->l[i];
		if (l->added)
			event_del(&l->ev);
		l->added = false;
		if (l->fd >= 0)
			close(l->fd);
		l->fd = -1;
	}
}

static void close_handshakes(struct mtd_in_worker *iw)
{
	struct mtd_conn *c;
	while ((c = LIST_FIRST(&iw->handshakes)))
		mtd_conn_close(c); /* in_on_close takes it off the list */
}

void mtd_inbound_worker_drain(struct mtd_worker *w)
{
	if (!w->in)
		return;
	close_listeners(w->in);
	close_handshakes(w->in);
}

void mtd_inbound_worker_fini(struct mtd_worker *w)
{
	if (!w->in)
		return;
	close_listeners(w->in);
	close_handshakes(w->in);
	free(w->in);
	w->in = NULL;
}

/* ---- calls ------------------------------------------------------------------ */

bool mtd_inbound_header_dropped(const uint8_t *name, size_t len)
{
	/* The client's own claim about a certificate never reaches the app:
	 * maitred's, from the handshake, replaces it (Envoy's
	 * forward_client_cert_details SANITIZE_SET). */
	return len == sizeof(MTD_XFCC_HEADER) - 1 && memcmp(name, MTD_XFCC_HEADER, len) == 0;
}

void mtd_inbound_call_start(struct mtd_call *call)
{
	struct mtd_conn *c = call->down;
	struct mtd_in_peer *in = c->in;
	struct mtd_worker *w = call->w;
	const struct mtd_cfg *cfg = w->rt->cfg;
	if (in->listener >= cfg->n_inbound) {
		mtd_call_fail(call, MTD_GRPC_UNAVAILABLE, "inbound listener %u is no longer in maitred's config",
		              in->listener);
		return;
	}
	const struct mtd_cfg_inbound *ib = &cfg->inbound[in->listener];
	call->inbound = (uint8_t)(in->listener + 1);
	/* Ours, on every call of an authenticated peer, before the decision:
	 * the access log reads the identity from it. */
	if (in->xfcc && mtd_headers_add(&call->req_hdrs, &w->slab, (const uint8_t *)MTD_XFCC_HEADER,
	                                sizeof(MTD_XFCC_HEADER) - 1, (const uint8_t *)in->xfcc, in->xfcc_len, 0) < 0) {
		mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	nghttp2_nv path_buf;
	const nghttp2_nv *path = mtd_headers_find(&call->req_hdrs, ":path", &path_buf);
	const char *p = path ? (const char *)path->value : "";
	size_t plen = path ? path->valuelen : 0;
	struct mtd_route_path rp;
	bool parsed = mtd_route_parse_path(p, plen, &rp) == 0;
	struct mtd_authz_decision d = mtd_authz_decide(&ib->authz, in->identity, p, plen);
	if (!d.allowed) {
		call->verdict = MTD_IN_DENIED;
		mtd_mesh_count(in->mx, MTD_IN_DENIED);
		if (parsed) /* its figures and access-log line name the method */
			mtd_metrics_call_routed(call, p, plen, rp.service_len);
		mtd_call_fail(call, MTD_GRPC_PERMISSION_DENIED, "inbound %s: %s is not allowed to call %.*s",
		              ib->listen.text, in->identity[0] ? in->identity : "a caller without a certificate",
		              (int)(plen > 200 ? 200 : plen), p);
		return;
	}
	uint32_t max = ib->max_concurrent_calls;
	if (max) {
		/* Counted on the app service's load, which the call gives back
		 * when it is freed (call.c); shared by the workers. */
		const struct mtd_rt_service *svc = w->rt->services[ib->service];
		call->load = svc->load;
		mtd_ref_get(&call->load->ref);
		uint32_t now = atomic_fetch_add_explicit(&call->load->calls, 1, memory_order_relaxed);
		if (now >= max) {
			call->verdict = MTD_IN_SHED;
			mtd_mesh_count(in->mx, MTD_IN_SHED);
			if (parsed)
				mtd_metrics_call_routed(call, p, plen, rp.service_len);
			mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED,
			              "inbound %s: max_concurrent_calls (%u) calls in flight", ib->listen.text, max);
			return;
		}
	}
	call->verdict = MTD_IN_ALLOWED;
	mtd_mesh_count(in->mx, MTD_IN_ALLOWED);
	mtd_call_start(call);
}
