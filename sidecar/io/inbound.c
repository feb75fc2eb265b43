/* Inbound listeners and their connections (inbound.h): mesh mode's server
 * half.
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
 * only calls authorization allows (call/inbound_call.c). */
#include "config.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/addr.h"
#include "authz/authz.h"
#include "core/clock.h"
#include "core/log.h"
#include "lb/lb.h"
#include "identity/identity.h"
#include "route/route.h"
#include "sidecar/control/runtime.h"
#include "sidecar/io/conn.h"
#include "sidecar/io/downstream.h"
#include "sidecar/io/inbound.h"
#include "sidecar/io/listen.h"
#include "sidecar/io/transport.h"
#include "sidecar/ops/mesh.h"
#include "sidecar/turn.h"
#include "sidecar/worker.h"

/* ---- the listener set (control thread) ------------------------------------ */

/* Policy generations and socket set ids: control thread only. */
static uint64_t last_policy, last_socks;

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

static bool same_files(const struct mtd_cfg_inbound *a, const struct mtd_cfg_inbound *b)
{
	return same_file(a->cert_file, b->cert_file) && same_file(a->key_file, b->key_file) &&
	       same_file(a->client_ca_file, b->client_ca_file);
}

const struct mtd_rt_inentry *mtd_inbound_set_find(const struct mtd_rt_inset *set, const char *key)
{
	for (size_t i = 0; set && i < set->n; i++)
		if (strcmp(set->e[i].key, key) == 0)
			return &set->e[i];
	return NULL;
}

static struct mtd_rt_inset *set_alloc(size_t n)
{
	struct mtd_rt_inset *set = calloc(1, sizeof(*set) + n * sizeof(set->e[0]));
	if (set)
		mtd_ref_init(&set->ref);
	return set;
}

/* The socket sets of listen addresses removed by a reload whose sockets
 * are not all closed yet (the workers close theirs when they take the
 * snapshot without them), a reference each. Control thread. */
static struct mtd_rt_insocks **retired;
static size_t n_retired;

/* Whether maitred's own sockets for key are still open (a removed
 * listener's on their way out); prunes those all closed. */
static bool retired_open(const char *key)
{
	bool busy = false;
	size_t k = 0;
	for (size_t i = 0; i < n_retired; i++) {
		struct mtd_rt_insocks *r = retired[i];
		if (atomic_load_explicit(&r->open, memory_order_acquire) == 0) {
			mtd_rt_insocks_unref(r);
			continue;
		}
		busy = busy || strcmp(r->key, key) == 0;
		retired[k++] = r;
	}
	n_retired = k;
	return busy;
}

void mtd_inbound_retired_free(void)
{
	for (size_t i = 0; i < n_retired; i++)
		mtd_rt_insocks_unref(retired[i]);
	free(retired);
	retired = NULL;
	n_retired = 0;
}

/* A socket per worker on a, bound now. NULL with the reason in err. The
 * check that nothing else listens there is skipped when what listens is
 * maitred's own removed listener, still closing (retired_open): the new
 * sockets join its SO_REUSEPORT group until its workers close theirs. */
static struct mtd_rt_insocks *socks_open(const struct mtd_cfg_addr *a, const char *key, unsigned n, char *err,
                                         size_t errlen)
{
	int rc = retired_open(key) ? 0 : mtd_listen_check_free(a);
	if (rc < 0) {
		snprintf(err, errlen, "cannot listen on %s: %s", a->text, strerror(-rc));
		return NULL;
	}
	struct mtd_rt_insocks *k = calloc(1, sizeof(*k) + n * sizeof(k->fd[0]));
	if (!k) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	mtd_ref_init(&k->ref);
	k->id = ++last_socks;
	snprintf(k->key, sizeof(k->key), "%s", key);
	k->n = n;
	for (unsigned i = 0; i < n; i++)
		atomic_init(&k->fd[i], -1);
	for (unsigned i = 0; i < n; i++) {
		int fd = mtd_listen_open(a);
		if (fd < 0) {
			snprintf(err, errlen, "cannot listen on %s: %s", a->text, strerror(-fd));
			mtd_rt_insocks_unref(k);
			return NULL;
		}
		atomic_fetch_add_explicit(&k->open, 1, memory_order_relaxed);
		atomic_store_explicit(&k->fd[i], fd, memory_order_relaxed);
	}
	return k;
}

void mtd_inbound_set_retire(const struct mtd_rt_inset *was, const struct mtd_rt_inset *now)
{
	for (size_t i = 0; was && i < was->n; i++) {
		struct mtd_rt_insocks *k = was->e[i].socks;
		if (mtd_inbound_set_find(now, was->e[i].key))
			continue;
		/* The sockets no worker took: no snapshot that will be taken
		 * carries them any more (a worker that takes an older one
		 * meanwhile gets -1 from the exchange). */
		for (unsigned w = 0; w < k->n; w++) {
			int fd = atomic_exchange_explicit(&k->fd[w], -1, memory_order_relaxed);
			if (fd >= 0) {
				close(fd);
				atomic_fetch_sub_explicit(&k->open, 1, memory_order_release);
			}
		}
		if (atomic_load_explicit(&k->open, memory_order_acquire) == 0)
			continue;
		struct mtd_rt_insocks **r = realloc(retired, (n_retired + 1) * sizeof(*r));
		if (!r)
			continue; /* then a reload adding it back soon may be refused: busy */
		retired = r;
		mtd_ref_get(&k->ref);
		retired[n_retired++] = k;
	}
}

struct mtd_rt_inset *mtd_inbound_set_build(const struct mtd_cfg *cfg, const struct mtd_rt_inset *cur,
                                           unsigned n_workers, char *err, size_t errlen)
{
	if (cfg->n_inbound == 0)
		return NULL;
	struct mtd_rt_inset *set = set_alloc(cfg->n_inbound);
	if (!set) {
		snprintf(err, errlen, "inbound: out of memory");
		return NULL;
	}
	for (size_t i = 0; i < cfg->n_inbound; i++) {
		const struct mtd_cfg_inbound *ib = &cfg->inbound[i];
		struct mtd_rt_inentry *e = &set->e[i];
		char why[384];
		e->cfg = ib;
		mtd_addr_text(&ib->listen.sa.sa, e->key, sizeof(e->key));
		/* One entry per key (the config refuses two on one address;
		 * this keeps a set from ever serving one of them silently). */
		for (size_t j = 0; j < i; j++)
			if (strcmp(set->e[j].key, e->key) == 0) {
				snprintf(err, errlen, "inbound[%zu]: %s is also inbound[%zu]'s address", i, e->key, j);
				goto fail;
			}
		set->n = i + 1;
		const struct mtd_rt_inentry *was = mtd_inbound_set_find(cur, e->key);
		if (was && same_files(was->cfg, ib)) {
			/* The same files: the same context (their content is
			 * certwatch's), the same policy. */
			e->ctx = mtd_tls_ctx_ref(was->ctx);
			memcpy(e->by, was->by, sizeof(e->by));
			e->policy = was->policy;
		} else {
			e->ctx = tls_build(ib, e->by, sizeof(e->by), why, sizeof(why));
			if (!e->ctx) {
				snprintf(err, errlen, "inbound[%zu] (%s): TLS: %s", i, ib->listen.text, why);
				goto fail;
			}
			e->policy = ++last_policy;
		}
		if (was) {
			mtd_ref_get(&was->socks->ref);
			e->socks = was->socks;
		} else if (!(e->socks = socks_open(&ib->listen, e->key, n_workers, why, sizeof(why)))) {
			snprintf(err, errlen, "inbound[%zu]: %s", i, why);
			goto fail;
		}
		e->mx = mtd_mesh_listener(e->key);
	}
	return set;
fail:
	mtd_rt_inset_unref(set);
	return NULL;
}

struct mtd_rt_inset *mtd_inbound_set_with_ctx(const struct mtd_rt_inset *cur, size_t i, struct ssl_ctx_st *ctx,
                                              bool new_policy)
{
	struct mtd_rt_inset *set = set_alloc(cur->n);
	if (!set)
		return NULL;
	set->n = cur->n;
	for (size_t k = 0; k < cur->n; k++) {
		set->e[k] = cur->e[k];
		mtd_ref_get(&set->e[k].socks->ref);
		if (k != i) {
			set->e[k].ctx = mtd_tls_ctx_ref(cur->e[k].ctx);
			continue;
		}
		set->e[k].ctx = mtd_tls_ctx_ref(ctx);
		if (mtd_tls_ctx_identity(ctx, set->e[k].by, sizeof(set->e[k].by)) < 0)
			set->e[k].by[0] = '\0';
		if (new_policy)
			set->e[k].policy = ++last_policy;
	}
	return set;
}

void mtd_inbound_set_log(const struct mtd_rt_inset *was, const struct mtd_rt_inset *now)
{
	for (size_t i = 0; was && i < was->n; i++)
		if (!mtd_inbound_set_find(now, was->e[i].key))
			MTD_INFO("reload: inbound %s removed: it stops accepting; its connections get GOAWAY, "
			         "calls in flight finish", was->e[i].key);
	for (size_t i = 0; now && i < now->n; i++) {
		const struct mtd_rt_inentry *e = &now->e[i], *o = mtd_inbound_set_find(was, e->key);
		if (!o)
			MTD_INFO("reload: inbound %s added (for the app at %s)", e->key, e->cfg->app.text);
		else if (o->policy != e->policy)
			MTD_INFO("reload: inbound %s: new TLS files: connections made before get GOAWAY, calls in "
			         "flight finish", e->key);
	}
}

/* ---- per worker ------------------------------------------------------------ */

struct mtd_in_listener {
	struct mtd_worker *w;
	uint64_t socks; /* the id of the socket set its fd came from */
	struct mtd_rt_insocks *sk; /* that set (a reference): its `open` count */
	unsigned idx;   /* its entry in w->rt->inbound (set by sync) */
	int fd;         /* -1: a free slot */
	struct event ev;
	bool added;
};

struct mtd_in_worker {
	struct mtd_in_listener l[MTD_CFG_INBOUND_MAX];
	struct mtd_log_gate refuse_log; /* refusals at accept: a line every 10 s at most */
	LIST_HEAD(, mtd_conn) handshakes; /* HANDSHAKE connections (conn->link) */
};

/* The entry with policy generation `policy` in w's snapshot, or NULL. */
static const struct mtd_rt_inentry *entry_of_policy(const struct mtd_worker *w, uint64_t policy, size_t *idx)
{
	const struct mtd_rt_inset *set = w->rt->inbound;
	for (size_t i = 0; set && i < set->n; i++)
		if (set->e[i].policy == policy) {
			if (idx)
				*idx = i;
			return &set->e[i];
		}
	return NULL;
}

/* Pending handshakes per source address, over every worker: a few
 * buckets of a hash of the address (a collision only makes two addresses
 * share their bound). The hash is seeded at random once per process: with
 * a known seed a peer picks, among the addresses it holds, one in another
 * peer's bucket and uses up that peer's handshakes. */
#define HS_PER_ADDR 8
#define HS_BUCKETS  4096
static _Atomic uint16_t hs_pending[HS_BUCKETS];
static uint64_t hs_seed;
static pthread_once_t hs_seed_once = PTHREAD_ONCE_INIT;

static void hs_seed_init(void)
{
	if (getrandom(&hs_seed, sizeof(hs_seed), GRND_NONBLOCK) != (ssize_t)sizeof(hs_seed)) {
		/* No entropy yet (early boot): the clock and pid, still not a
		 * constant a peer can read in the source. */
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		hs_seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ ((uint64_t)getpid() << 44);
	}
}

static unsigned hs_bucket(const struct sockaddr_storage *sa)
{
	pthread_once(&hs_seed_once, hs_seed_init);
	if (sa->ss_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
		return (unsigned)(mtd_lb_hash64(&s6->sin6_addr, sizeof(s6->sin6_addr), hs_seed) % HS_BUCKETS);
	}
	const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
	return (unsigned)(mtd_lb_hash64(&s4->sin_addr, sizeof(s4->sin_addr), hs_seed) % HS_BUCKETS);
}

static void hs_done(struct mtd_in_peer *in)
{
	if (in->hs_counted) {
		atomic_fetch_sub_explicit(&hs_pending[in->hs_bucket], 1, memory_order_relaxed);
		in->hs_counted = false;
	}
}

static void in_on_close(struct mtd_conn *c)
{
	struct mtd_in_peer *in = c->in;
	if (in->handshaking) {
		LIST_REMOVE(c, link);
		MTD_DEBUG("peer %s: closed during the handshake", c->peer);
	} else {
		mtd_down_ops.on_close(c);
	}
	hs_done(in);
	if (in->socks) {
		atomic_fetch_sub_explicit(&in->socks->conns, 1, memory_order_relaxed);
		mtd_rt_insocks_unref(in->socks);
	}
	free(in->xfcc);
	free(in->identity);
	free(in);
	c->in = NULL;
}

/* Downstream's, named for what it is (conn.c's messages say "peer"). */
static const struct mtd_conn_ops in_ops = {
        .role = "peer",
        .prescan = mtd_conn_prescan,
        .after_recv = mtd_conn_answer_late_data,
        .on_close = in_on_close,
        .on_skipped_frame = mtd_down_on_skipped_frame,
};

/* The handshake did not end well: counted, logged (rate-limited), closed. */
static void refuse(struct mtd_conn *c, enum mtd_tls_refusal why, const char *err)
{
	uint64_t held = 0;
	mtd_mesh_refused(c->in->slot, why);
	if (mtd_mesh_refusal_log(c->peer, mtd_now_ns(), &held))
		MTD_INFO("inbound %s: peer %s refused before HTTP/2 (%s): %s (%llu more since the last line)",
		         c->in->key, c->peer, mtd_tls_refusal_name(why), err, (unsigned long long)held);
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
	char hash[65], id[MTD_IDENTITY_TEXT_SIZE];
	enum mtd_identity_none none;
	int rc = mtd_tls_peer_identity(c, id, sizeof(id), &none, hash);
	if (rc == 0) {
		in->authenticated = true;
		if (none != MTD_IDENTITY_HAS)
			MTD_INFO("inbound %s: peer %s: its certificate has no identity (%s): it matches no principal",
			         in->key, c->peer, mtd_identity_none_text(none));
		in->identity = id[0] ? strdup(id) : NULL;
		enum mtd_identity_type t = mtd_identity_type(in->identity);
		const char *v = mtd_identity_value(in->identity);
		const char *uri = t == MTD_IDENTITY_URI ? v : NULL, *dns = t == MTD_IDENTITY_DNS ? v : NULL;
		const char *by = mtd_identity_type(in->by) == MTD_IDENTITY_URI ? in->by : NULL;
		size_t n = mtd_xfcc_format(NULL, 0, by, hash, uri, dns);
		in->xfcc = malloc(n + 1);
		if (in->xfcc) {
			mtd_xfcc_format(in->xfcc, n + 1, by, hash, uri, dns);
			in->xfcc_len = n;
		}
	}
	in->mx = mtd_mesh_identity(in->slot, in->identity ? in->identity : "");
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
	mtd_mesh_handshake(in->slot, mtd_tls_resumed(c));
	LIST_REMOVE(c, link);
	in->handshaking = false;
	hs_done(in);
	MTD_DEBUG("peer %s: inbound %s: identity %s", c->peer, in->key,
	          in->identity ? in->identity : "(none)");
	mtd_down_begin(c); /* closes c if it cannot read */
}

/* Why a connection was refused at accept, logged at most once every 10 s
 * per worker (with the count since). */
static void refuse_at_accept(struct mtd_worker *w, const struct mtd_rt_inentry *e, const char *why)
{
	uint64_t held;
	mtd_mesh_conn_refused(e->mx);
	if (mtd_log_gate_pass(&w->in->refuse_log, mtd_now_ns(), 10 * (int64_t)1000000000, &held))
		MTD_WARN("worker %u: inbound %s: refusing new connections: %s (%llu refused since the last "
		         "message)", w->id, e->key, why, (unsigned long long)held + 1);
}

/* 0, or -ENOMEM with nothing kept (the caller closes fd). */
static int in_accept(struct mtd_worker *w, const struct mtd_rt_inentry *e, int fd, unsigned bucket)
{
	struct mtd_in_peer *in = calloc(1, sizeof(*in));
	struct mtd_conn *c = in ? mtd_down_conn_new(w, fd) : NULL;
	if (!c || mtd_tls_server_start(c, e->ctx) < 0) {
		if (c)
			mtd_conn_free(c);
		free(in);
		return -ENOMEM;
	}
	memcpy(in->key, e->key, sizeof(in->key));
	in->policy = e->policy;
	in->slot = e->mx;
	mtd_ref_get(&e->socks->ref);
	in->socks = e->socks; /* counted by the caller */
	in->hs_bucket = bucket;
	in->hs_counted = true;
	in->handshaking = true;
	memcpy(in->by, e->by, sizeof(in->by));
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
	const struct mtd_rt_inentry *e = &w->rt->inbound->e[l->idx];
	/* Bounded, as the app's listener (worker.c). */
	for (int i = 0; i < 64; i++) {
		struct sockaddr_storage sa;
		socklen_t salen = sizeof(sa);
		int fd = accept4(lfd, (struct sockaddr *)&sa, &salen, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				MTD_WARN("worker %u: accept on inbound %s: %s", w->id, e->key, strerror(errno));
			return;
		}
		/* This listener's own count: the app's connections
		 * (downstream.max_connections) never compete with the mesh's. */
		uint32_t max = e->cfg->max_connections;
		if (atomic_fetch_add_explicit(&e->socks->conns, 1, memory_order_relaxed) >= max) {
			atomic_fetch_sub_explicit(&e->socks->conns, 1, memory_order_relaxed);
			close(fd);
			char why[96];
			snprintf(why, sizeof(why), "inbound max_connections (%u) are open", max);
			refuse_at_accept(w, e, why);
			continue;
		}
		unsigned b = hs_bucket(&sa);
		if (atomic_fetch_add_explicit(&hs_pending[b], 1, memory_order_relaxed) >= HS_PER_ADDR) {
			atomic_fetch_sub_explicit(&hs_pending[b], 1, memory_order_relaxed);
			atomic_fetch_sub_explicit(&e->socks->conns, 1, memory_order_relaxed);
			close(fd);
			char why[96];
			snprintf(why, sizeof(why), "%d TLS handshakes under way from one address", HS_PER_ADDR);
			refuse_at_accept(w, e, why);
			continue;
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (in_accept(w, e, fd, b) < 0) {
			atomic_fetch_sub_explicit(&hs_pending[b], 1, memory_order_relaxed);
			atomic_fetch_sub_explicit(&e->socks->conns, 1, memory_order_relaxed);
			close(fd);
		}
	}
}

static void close_listener(struct mtd_in_listener *l)
{
	if (l->added)
		event_del(&l->ev);
	l->added = false;
	if (l->fd >= 0) {
		close(l->fd);
		atomic_fetch_sub_explicit(&l->sk->open, 1, memory_order_release);
	}
	l->fd = -1;
	l->socks = 0;
	mtd_rt_insocks_unref(l->sk);
	l->sk = NULL;
}

static void close_listeners(struct mtd_in_worker *iw)
{
	for (size_t i = 0; i < MTD_CFG_INBOUND_MAX; i++)
		close_listener(&iw->l[i]);
}

static void close_handshakes(struct mtd_in_worker *iw)
{
	struct mtd_conn *c;
	while ((c = LIST_FIRST(&iw->handshakes)))
		mtd_conn_close(c); /* in_on_close takes it off the list */
}

int mtd_inbound_worker_init(struct mtd_worker *w)
{
	w->in = calloc(1, sizeof(*w->in));
	if (!w->in)
		return -ENOMEM;
	LIST_INIT(&w->in->handshakes);
	for (size_t i = 0; i < MTD_CFG_INBOUND_MAX; i++)
		w->in->l[i].fd = -1;
	mtd_inbound_worker_sync(w);
	return 0;
}

/* Listen on entry i of w's snapshot with its socket for this worker. */
static void listen_on(struct mtd_worker *w, size_t i)
{
	const struct mtd_rt_inentry *e = &w->rt->inbound->e[i];
	struct mtd_in_listener *l = NULL;
	for (size_t k = 0; k < MTD_CFG_INBOUND_MAX && !l; k++)
		if (w->in->l[k].fd < 0)
			l = &w->in->l[k];
	if (!l || w->id >= e->socks->n)
		return;
	int fd = atomic_exchange_explicit(&e->socks->fd[w->id], -1, memory_order_relaxed);
	if (fd < 0)
		return; /* taken by this worker before, and closed since */
	l->w = w;
	l->fd = fd;
	l->socks = e->socks->id;
	mtd_ref_get(&e->socks->ref);
	l->sk = e->socks;
	l->idx = (unsigned)i;
	if (event_assign(&l->ev, w->base, fd, EV_READ | EV_PERSIST, accept_cb, l) != 0 ||
	    event_add(&l->ev, NULL) != 0) {
		MTD_ERROR("worker %u: inbound %s: cannot wait for connections (event_add failed): this worker "
		          "does not accept there", w->id, e->key);
		close_listener(l);
		return;
	}
	l->added = true;
}

void mtd_inbound_worker_sync(struct mtd_worker *w)
{
	struct mtd_in_worker *iw = w->in;
	if (!iw)
		return;
	const struct mtd_rt_inset *set = w->rt->inbound;
	size_t n = set ? set->n : 0;
	bool have[MTD_CFG_INBOUND_MAX] = {false};
	/* Listeners: matched by their socket set (one per listen address). */
	for (size_t k = 0; k < MTD_CFG_INBOUND_MAX; k++) {
		struct mtd_in_listener *l = &iw->l[k];
		if (l->fd < 0)
			continue;
		size_t i = 0;
		while (i < n && set->e[i].socks->id != l->socks)
			i++;
		if (i == n) {
			MTD_DEBUG("worker %u: an inbound listener left the config: closed", w->id);
			close_listener(l);
			continue;
		}
		l->idx = (unsigned)i;
		have[i] = true;
	}
	for (size_t i = 0; i < n && !w->draining; i++)
		if (!have[i])
			listen_on(w, i);
	/* Connections: made under a policy no entry has any more. */
	struct mtd_conn *c, *next;
	for (c = LIST_FIRST(&w->downs); c; c = next) {
		next = LIST_NEXT(c, link);
		if (!c->in || c->state != MTD_CONN_READY || entry_of_policy(w, c->in->policy, NULL))
			continue;
		MTD_INFO("peer %s: inbound %s: its listener was removed or its TLS policy changed: GOAWAY, calls in "
		         "flight finish", c->peer, c->in->key);
		mtd_down_shutdown(c);
	}
	for (c = LIST_FIRST(&iw->handshakes); c; c = next) {
		next = LIST_NEXT(c, link);
		if (!entry_of_policy(w, c->in->policy, NULL))
			mtd_conn_close(c);
	}
}

void mtd_inbound_conn_tick(struct mtd_conn *c, int64_t now_ns)
{
	struct mtd_in_peer *in = c->in;
	if (c->notice_ns || c->state != MTD_CONN_READY)
		return; /* told to go already */
	const struct mtd_rt_inentry *e = entry_of_policy(c->w, in->policy, NULL);
	int64_t age_ms = e ? e->cfg->max_connection_age_ms : 0;
	if (age_ms <= 0 || now_ns - c->accepted_ns < age_ms * 1000000)
		return;
	MTD_DEBUG("peer %s: inbound %s: older than max_connection_age (%lld ms): GOAWAY", c->peer, in->key,
	          (long long)age_ms);
	mtd_down_notice(c, now_ns);
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

const struct mtd_rt_inentry *mtd_inbound_entry(const struct mtd_worker *w, const struct mtd_in_peer *in, size_t *idx)
{
	return entry_of_policy(w, in->policy, idx);
}

const struct mtd_rt_inentry *mtd_inbound_listener_entry(const struct mtd_runtime *rt, const struct mtd_in_peer *in,
                                                        size_t *idx)
{
	const struct mtd_rt_inentry *e = mtd_inbound_set_find(rt->inbound, in->key);
	if (e)
		*idx = (size_t)(e - rt->inbound->e);
	return e;
}
