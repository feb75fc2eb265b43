/* Certificate rotation (certwatch.h).
 *
 * One entry per set of files that makes one TLS context: each inbound
 * listener's (cert, key, client CA), and each service's (cert, key, CA;
 * services sharing a context share an entry, runtime.c shared_ctx). An
 * entry remembers the content its context was made from (a hash per
 * file). A change seen (inotify on the files' directories, settled for
 * 200 ms; or the 10 s check, for mounts that do not report, such as a
 * Kubernetes secret volume swapping its ..data link) makes a context from
 * the files as they are; if it loads, it is put in place:
 *
 *   inbound  a new runtime whose inbound set's entry for that listener
 *            (found by its listen address) carries the new context,
 *            published: the next accept takes it. A new client CA content
 *            is a new policy: connections made under the old one get
 *            GOAWAY (inbound.c); a new certificate or key alone keeps them
 *   service  a new runtime whose snapshots of the services using the old
 *            context carry the new one (runtime.c), published: pools open
 *            their next connections with it
 *
 * If it does not load (a certificate whose key is not written yet, or the
 * other way round), the current context stays and one warning is logged
 * for that content: the next change, when the pair matches, loads. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <event2/event.h>

#include "core/log.h"
#include "lb/lb.h"
#include "sidecar/control/certwatch.h"
#include "sidecar/control/control-t.h"
#include "sidecar/control/control.h"
#include "sidecar/control/runtime.h"
#include "sidecar/io/inbound.h"
#include "sidecar/io/transport.h"
#include "sidecar/ops/mesh.h"

#define SETTLE_MS 200
#define PERIOD_S  10

enum cw_kind { CW_INBOUND, CW_SERVICE };

struct cw_entry {
	enum cw_kind kind;
	size_t index; /* the service (the first with this context) */
	char key[64]; /* the inbound listener's key */
	char label[192];
	char *files[3];      /* cert, key, CA (NULL: none) */
	const void *ctx;     /* a service's context (an inbound listener's is its key's) */
	uint64_t applied[3]; /* content the current context was made from */
	uint64_t warned[3];  /* content last warned about */
	bool has_warned;
};

struct mtd_certwatch {
	struct mtd_control *ctl;
	struct cw_entry *e;
	size_t n;
	int ifd;
	struct event *iev, *settle, *tick;
};

/* A file's content hash; 0 when it cannot be read (*ok false). */
static uint64_t file_hash(const char *path, bool *ok)
{
	uint8_t buf[8192];
	uint64_t h = 0x9e3779b97f4a7c15ull;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	*ok = fd >= 0;
	if (fd < 0)
		return 0;
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		h = mtd_lb_hash64(buf, (size_t)n, h);
	if (n < 0)
		*ok = false;
	close(fd);
	return h;
}

static bool hash_all(const struct cw_entry *e, uint64_t h[3], const char **unreadable)
{
	bool all = true;
	for (int k = 0; k < 3; k++) {
		bool ok = true;
		h[k] = e->files[k] ? file_hash(e->files[k], &ok) : 0;
		if (!ok && all) {
			*unreadable = e->files[k];
			all = false;
		}
	}
	return all;
}

static void entries_free(struct cw_entry *e, size_t n)
{
	for (size_t i = 0; i < n; i++)
		for (int k = 0; k < 3; k++)
			free(e[i].files[k]);
	free(e);
}

static int entry_set(struct cw_entry *e, enum cw_kind kind, size_t index, const char *label, const char *cert,
                     const char *key, const char *ca)
{
	e->kind = kind;
	e->index = index;
	snprintf(e->label, sizeof(e->label), "%s", label);
	const char *f[3] = {cert, key, ca};
	for (int k = 0; k < 3; k++)
		if (f[k] && !(e->files[k] = strdup(f[k])))
			return -ENOMEM;
	return 0;
}

struct by_ctx {
	const void *ctx;
	size_t si;
};

static int by_ctx_cmp(const void *a, const void *b)
{
	const struct by_ctx *x = a, *y = b;
	uintptr_t p = (uintptr_t)x->ctx, q = (uintptr_t)y->ctx;
	return p != q ? (p < q ? -1 : 1) : (x->si > y->si) - (x->si < y->si);
}

static int by_index_cmp(const void *a, const void *b)
{
	const struct by_ctx *x = a, *y = b;
	return (x->si > y->si) - (x->si < y->si);
}

/* The entries of rt's config: its inbound listeners in the set's order,
 * then its services' contexts by service index. NULL + *n 0 when out of
 * memory. */
static struct cw_entry *entries_of(const struct mtd_runtime *rt, size_t *n)
{
	const struct mtd_cfg *cfg = rt->cfg;
	const struct mtd_rt_inset *set = rt->inbound;
	size_t n_in = set ? set->n : 0;
	struct cw_entry *e = calloc(n_in + cfg->n_services + 1, sizeof(*e));
	size_t k = 0;
	*n = 0;
	if (!e)
		return NULL;
	for (size_t i = 0; i < n_in; i++) {
		const struct mtd_cfg_inbound *ib = set->e[i].cfg;
		char label[192];
		snprintf(label, sizeof(label), "inbound %s", set->e[i].key);
		snprintf(e[k].key, sizeof(e[k].key), "%s", set->e[i].key);
		if (entry_set(&e[k++], CW_INBOUND, i, label, ib->cert_file, ib->key_file, ib->client_ca_file) < 0)
			goto nomem;
	}
	/* One context, one entry: the first service with it. By the
	 * contexts sorted (10,000 xDS services follow each batch publish). */
	struct by_ctx *first = calloc(cfg->n_services + 1, sizeof(*first));
	size_t n_tls = 0;
	if (!first)
		goto nomem;
	for (size_t si = 0; si < cfg->n_services; si++)
		if (rt->services[si]->ssl_ctx && rt->services[si]->cfg->tls)
			first[n_tls++] = (struct by_ctx){rt->services[si]->ssl_ctx, si};
	qsort(first, n_tls, sizeof(*first), by_ctx_cmp);
	size_t kept = 0;
	for (size_t i = 0; i < n_tls; i++)
		if (i == 0 || first[i].ctx != first[i - 1].ctx)
			first[kept++] = first[i];
	qsort(first, kept, sizeof(*first), by_index_cmp); /* the entries in service order */
	for (size_t i = 0; i < kept; i++) {
		size_t si = first[i].si;
		const struct mtd_rt_service *s = rt->services[si];
		const struct mtd_cfg_tls *t = s->cfg->tls;
		char label[192];
		snprintf(label, sizeof(label), "service %s", s->cfg->local->name);
		e[k].ctx = s->ssl_ctx;
		if (entry_set(&e[k++], CW_SERVICE, si, label, t->cert_file, t->key_file, t->ca_file) < 0) {
			free(first);
			goto nomem;
		}
	}
	free(first);
	*n = k;
	return e;
nomem:
	entries_free(e, k);
	return NULL;
}

/* Make and put in place entry e's new context, from files whose content
 * hashes are h. 0, or -1 with the reason. */
static int apply(struct mtd_certwatch *cw, struct cw_entry *e, const uint64_t h[3], bool *new_policy, char *err,
                 size_t errlen)
{
	struct mtd_control *ctl = cw->ctl;
	struct ssl_ctx_st *ctx;
	struct mtd_runtime *rt;
	if (e->kind == CW_INBOUND) {
		const struct mtd_rt_inset *set = ctl->rt->inbound;
		const struct mtd_rt_inentry *ie = mtd_inbound_set_find(set, e->key);
		if (!ie) {
			snprintf(err, errlen, "no such listener any more");
			return -1;
		}
		const struct mtd_cfg_inbound *ib = ie->cfg;
		ctx = mtd_tls_server_ctx_new(ib->cert_file, ib->key_file, ib->client_ca_file, err, errlen);
		if (!ctx)
			return -1;
		/* Who may connect changed with the client CA's content: the
		 * connections made before it are the old policy's. */
		*new_policy = ib->client_ca_file && h[2] != e->applied[2];
		struct mtd_rt_inset *next = mtd_inbound_set_with_ctx(set, (size_t)(ie - set->e), ctx, *new_policy);
		mtd_tls_ctx_free(ctx); /* the set holds its own */
		rt = next ? mtd_runtime_with_inbound(ctl, next) : NULL;
	} else {
		const struct mtd_rt_service *s = ctl->rt->services[e->index];
		ctx = mtd_tls_client_ctx_new(s->cfg->tls, err, errlen);
		if (!ctx)
			return -1;
		rt = mtd_runtime_with_ctx(ctl, s->ssl_ctx, ctx, err, errlen);
		if (rt)
			e->ctx = ctx;  /* what the entry watches now (mtd_certwatch_follow) */
		mtd_tls_ctx_free(ctx); /* the snapshots hold theirs */
	}
	if (!rt) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	mtd_control_publish(ctl, rt);
	return 0;
}

static void check_entry(struct mtd_certwatch *cw, struct cw_entry *e)
{
	uint64_t h[3];
	const char *unreadable = NULL;
	bool readable = hash_all(e, h, &unreadable);
	if (readable && memcmp(h, e->applied, sizeof(h)) == 0)
		return;
	char err[384];
	int rc = -1;
	bool new_policy = false;
	if (!readable)
		snprintf(err, sizeof(err), "cannot read %s: %s", unreadable, strerror(errno));
	else
		rc = apply(cw, e, h, &new_policy, err, sizeof(err));
	if (rc == 0) {
		memcpy(e->applied, h, sizeof(h));
		e->has_warned = false;
		mtd_mesh_tls_reload(e->label, "ok");
		MTD_INFO("TLS files of %s changed: new handshakes use them (%s)", e->label,
		         new_policy ? "a new client CA: connections made before get GOAWAY"
		                    : "connections in flight keep theirs");
		return;
	}
	/* One warning per content: a pair being written logs once. */
	if (e->has_warned && memcmp(h, e->warned, sizeof(h)) == 0)
		return;
	memcpy(e->warned, h, sizeof(h));
	e->has_warned = true;
	/* OpenSSL says "key values mismatch" (a key for another certificate),
	 * or fails on a PEM file cut short: a pair being written. */
	bool mismatch = strstr(err, "match") || strstr(err, "PEM") || !readable;
	mtd_mesh_tls_reload(e->label, mismatch ? "mismatch" : "error");
	MTD_WARN("TLS files of %s changed but do not load yet (%s): keeping the current ones until they do", e->label,
	         err);
}

void mtd_certwatch_check(struct mtd_certwatch *cw)
{
	if (!cw)
		return;
	for (size_t i = 0; i < cw->n; i++)
		check_entry(cw, &cw->e[i]);
}

static void settle_cb(evutil_socket_t fd, short what, void *arg)
{
	mtd_certwatch_check(arg);
}

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
	mtd_certwatch_check(arg);
}

static void inotify_cb(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_certwatch *cw = arg;
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	bool any = false;
	while (read(fd, buf, sizeof(buf)) > 0)
		any = true;
	if (any) {
		/* Writers come in bursts (truncate, write; key after cert; a
		 * link swapped): look once they are quiet. */
		struct timeval tv = {0, SETTLE_MS * 1000};
		evtimer_add(cw->settle, &tv);
	}
}

/* Watch every entry's directories, on a new inotify descriptor. */
static void watch_dirs(struct mtd_certwatch *cw)
{
	if (cw->iev) {
		event_free(cw->iev);
		cw->iev = NULL;
	}
	if (cw->ifd >= 0)
		close(cw->ifd);
	cw->ifd = -1;
	if (cw->n == 0)
		return;
	cw->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (cw->ifd < 0) {
		MTD_WARN("cannot watch the TLS files (%s): they are read every %d s", strerror(errno), PERIOD_S);
		return;
	}
	for (size_t i = 0; i < cw->n; i++)
		for (int k = 0; k < 3; k++) {
			const char *f = cw->e[i].files[k];
			if (!f)
				continue;
			char dir[4096];
			const char *slash = strrchr(f, '/');
			snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - f + 1) : 1, slash ? f : ".");
			/* The same directory twice is one watch (the kernel's).
			 * A file is new once written and closed, renamed or
			 * linked into place, or removed; not IN_MODIFY, which
			 * fires on every write(2) to any file of the directory:
			 * a log kept open beside the certificates (a benchmark's
			 * per-call log, the app's) woke this thread once per
			 * line it wrote. The 10 s check sees a writer that never
			 * closes. */
			if (inotify_add_watch(cw->ifd, dir, IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE) < 0)
				MTD_WARN("cannot watch %s for TLS file changes (%s): they are read every %d s", dir,
				         strerror(errno), PERIOD_S);
		}
	cw->iev = event_new(cw->ctl->base, cw->ifd, EV_READ | EV_PERSIST, inotify_cb, cw);
	if (!cw->iev || event_add(cw->iev, NULL) < 0)
		MTD_WARN("cannot watch the TLS files: they are read every %d s", PERIOD_S);
}

/* o and e watch the same context made from the same files: an inbound
 * listener that stays (the same key and files: the same context,
 * inbound.c), or a service context a new runtime kept (the same one,
 * wherever its service now is in the list: a reload that adds a service
 * before it, or an xDS route change that creates one, moves it). */
static bool same_context(const struct cw_entry *o, const struct cw_entry *e)
{
	bool same = o->kind == e->kind && (o->kind == CW_INBOUND ? strcmp(o->key, e->key) == 0 : o->ctx == e->ctx);
	for (int k = 0; same && k < 3; k++)
		same = (o->files[k] == NULL) == (e->files[k] == NULL) &&
		       (!o->files[k] || strcmp(o->files[k], e->files[k]) == 0);
	return same;
}

/* ... and for the same service (apply() finds it by its index). */
static bool same_entry(const struct cw_entry *o, const struct cw_entry *e)
{
	return same_context(o, e) && (o->kind == CW_INBOUND || o->index == e->index);
}

static int by_entry_ctx_cmp(const void *a, const void *b)
{
	uintptr_t p = (uintptr_t)(*(const struct cw_entry *const *)a)->ctx,
	          q = (uintptr_t)(*(const struct cw_entry *const *)b)->ctx;
	return (p > q) - (p < q);
}

/* What each entry's context is made from now: entries that stay keep
 * what they knew (a rotation still settling is not taken as applied);
 * the rest were just made from the files as they are. */
static void know_entries(const struct mtd_certwatch *cw, struct cw_entry *e, size_t n)
{
	/* cw's service entries by context (one entry per context): a binary
	 * search each; the inbound listeners are few. Without memory for the
	 * index, every service entry counts as new (read as it is now). */
	size_t svc0 = 0;
	while (svc0 < cw->n && cw->e[svc0].kind == CW_INBOUND)
		svc0++;
	size_t n_svc = cw->n - svc0;
	const struct cw_entry **by_ctx = calloc(n_svc ? n_svc : 1, sizeof(*by_ctx));
	if (by_ctx) {
		for (size_t j = 0; j < n_svc; j++)
			by_ctx[j] = &cw->e[svc0 + j];
		qsort(by_ctx, n_svc, sizeof(*by_ctx), by_entry_ctx_cmp);
	}
	for (size_t i = 0; i < n; i++) {
		const struct cw_entry *was = NULL;
		if (e[i].kind == CW_INBOUND) {
			for (size_t j = 0; j < svc0 && !was; j++)
				if (same_context(&cw->e[j], &e[i]))
					was = &cw->e[j];
		} else if (by_ctx) {
			const struct cw_entry *key = &e[i], **hit;
			hit = bsearch(&key, by_ctx, n_svc, sizeof(*by_ctx), by_entry_ctx_cmp);
			if (hit && same_context(*hit, &e[i]))
				was = *hit;
		}
		if (was) {
			memcpy(e[i].applied, was->applied, sizeof(e[i].applied));
			memcpy(e[i].warned, was->warned, sizeof(e[i].warned));
			e[i].has_warned = was->has_warned;
		} else {
			const char *unreadable;
			hash_all(&e[i], e[i].applied, &unreadable);
		}
	}
	free(by_ctx);
}

static void take_entries(struct mtd_certwatch *cw, struct cw_entry *e, size_t n)
{
	entries_free(cw->e, cw->n);
	cw->e = e;
	cw->n = n;
}

struct mtd_certwatch *mtd_certwatch_start(struct mtd_control *ctl)
{
	struct mtd_certwatch *cw = calloc(1, sizeof(*cw));
	size_t n;
	struct cw_entry *e = cw ? entries_of(ctl->rt, &n) : NULL;
	if (!cw || !e) {
		free(cw);
		MTD_ERROR("TLS file watch: out of memory: certificates are not reloaded when they change");
		return NULL;
	}
	cw->ctl = ctl;
	cw->ifd = -1;
	know_entries(cw, e, n);
	take_entries(cw, e, n);
	cw->settle = evtimer_new(ctl->base, settle_cb, cw);
	cw->tick = event_new(ctl->base, -1, EV_PERSIST, tick_cb, cw);
	struct timeval period = {PERIOD_S, 0};
	if (!cw->settle || !cw->tick || event_add(cw->tick, &period) < 0)
		MTD_WARN("TLS file watch: cannot arm its timers: certificates are read again on SIGHUP only");
	watch_dirs(cw);
	return cw;
}

struct mtd_certwatch_next {
	struct cw_entry *e;
	size_t n;
};

int mtd_certwatch_prepare(struct mtd_certwatch *cw, const struct mtd_runtime *rt, struct mtd_certwatch_next **out,
                          char *err, size_t errlen)
{
	*out = NULL;
	if (!cw)
		return 0;
	struct mtd_certwatch_next *next = calloc(1, sizeof(*next));
	if (!next || !(next->e = entries_of(rt, &next->n))) {
		free(next);
		snprintf(err, errlen, "TLS file watch: out of memory");
		return -1;
	}
	know_entries(cw, next->e, next->n);
	*out = next;
	return 0;
}

static bool resync(struct mtd_certwatch *cw);

void mtd_certwatch_commit(struct mtd_certwatch *cw, struct mtd_certwatch_next *next)
{
	if (!cw || !next)
		return;
	take_entries(cw, next->e, next->n);
	free(next);
	/* next is the reload's runtime as prepared; the one in force may
	 * already be a later one: the reload's commit starts the sources
	 * before this, and the xDS client's first batch gives its services
	 * their clusters' TLS again (new contexts, followed then, and not
	 * in next). */
	(void)resync(cw);
	watch_dirs(cw);
	mtd_certwatch_check(cw);
}

/* The entries of the runtime in force, what was known kept: true when
 * they changed. */
static bool resync(struct mtd_certwatch *cw)
{
	size_t n;
	struct cw_entry *e = entries_of(cw->ctl->rt, &n);

	if (!e) {
		MTD_ERROR("TLS file watch: out of memory: the TLS files of services that changed are not watched");
		return false;
	}
	bool same = n == cw->n;
	for (size_t i = 0; i < n && same; i++)
		same = same_entry(&cw->e[i], &e[i]);
	if (same) {
		entries_free(e, n);
		return false;
	}
	know_entries(cw, e, n);
	take_entries(cw, e, n);
	return true;
}

void mtd_certwatch_follow(struct mtd_certwatch *cw)
{
	if (cw && resync(cw))
		watch_dirs(cw);
}

void mtd_certwatch_abort(struct mtd_certwatch_next *next)
{
	if (!next)
		return;
	entries_free(next->e, next->n);
	free(next);
}

void mtd_certwatch_free(struct mtd_certwatch *cw)
{
	if (!cw)
		return;
	if (cw->iev)
		event_free(cw->iev);
	if (cw->ifd >= 0)
		close(cw->ifd);
	if (cw->settle)
		event_free(cw->settle);
	if (cw->tick)
		event_free(cw->tick);
	entries_free(cw->e, cw->n);
	free(cw);
}
