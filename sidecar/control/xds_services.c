/* The xDS client's services (xds.c has the overview): the per-service
 * source (mtd_xds_source_ops) binding a service to its cluster, what a
 * bound service is given (its cluster's options as an override of its
 * config, its assignment's endpoints), and the pending rebuilds (struct
 * xds_pending): the services whose cluster changed, rebuilt a slice at a
 * time in the background. Control thread only. */
#include "config.h"

#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/clock.h"
#include "core/log.h"
#include "sidecar/control/control-t.h"
#include "sidecar/control/control.h"
#include "sidecar/control/runtime-t.h"
#include "sidecar/control/runtime.h"
#include "sidecar/control/xds-int.h"
#include "sidecar/control/xds.h"
#include "sidecar/ops/metrics.h"

/* ---- the services ------------------------------------------------------------- */

static bool lb_same(const struct mtd_lb_config *a, const struct mtd_lb_config *b)
{
	return a->ops == b->ops && a->choice_count == b->choice_count && a->ring_points == b->ring_points &&
	       a->table_size == b->table_size && a->bounded_load_factor == b->bounded_load_factor &&
	       a->warmup.duration_ms == b->warmup.duration_ms && a->warmup.curve == b->warmup.curve &&
	       a->decay_ms == b->decay_ms && a->active_request_bias == b->active_request_bias;
}

/* The service's config as cluster c says (for the endpoints of set):
 * its policy always (lb_policy has a default), the rest where the cluster
 * sets it (its ring sized for the endpoint set). A method whose lb is
 * the service's copy follows the cluster too; one with its own keeps it.
 * An assignment with locality weights gives each locality its share of
 * the calls: the routing layer's zone preference (maitred's zone) is off
 * then, as Envoy's zone-aware routing is beside locality-weighted
 * balancing and as gRPC's clients do. NULL when out of memory. */
static struct mtd_rt_over *over_new(const struct mtd_cfg_service *base, const struct xds_cl *cl,
                                    const struct mtd_xds_cla *set)
{
	const struct mtd_xds_cluster *c = &cl->c;
	struct mtd_rt_over *o = calloc(1, sizeof(*o));
	struct mtd_lb_config lb = c->lb;

	if (o == NULL)
		return NULL;
	mtd_ref_init(&o->ref);
	o->base = base;
	lb.n_workers = base->lb.n_workers;
	lb.hot_keys = base->lb.hot_keys;
	lb.hot_keys.spread = 0;
	if (c->ring_min != 0)
		lb.ring_points = mtd_xds_ring_points(c, set->eps, set->n);
	o->tag = cl->gen << 24 ^ (uint64_t)set->locality_weighted << 23 ^ lb.ring_points;
	o->svc = *base;
	o->svc.lb = lb;
	bool unzone = set->locality_weighted && base->local->layer.locality != MTD_LB_LOCALITY_OFF;
	if (unzone) {
		struct mtd_cfg_service_local *local = malloc(sizeof(*local));
		if (local == NULL)
			goto oom;
		*local = *base->local;
		local->layer.locality = MTD_LB_LOCALITY_OFF;
		o->svc.local = local;
		o->owns |= MTD_RT_OVER_OWNS_LOCAL;
	}
	if (c->connect_timeout_ms > 0)
		o->svc.upstream.connect_timeout_ms = c->connect_timeout_ms;
	if (c->circuit.max_calls != 0)
		o->svc.circuit.max_calls = c->circuit.max_calls;
	if (c->circuit.max_pending != 0)
		o->svc.circuit.max_pending = c->circuit.max_pending;
	if (c->outlier.enabled)
		o->svc.outlier = c->outlier;
	if (base->n_methods > 0) {
		struct mtd_cfg_method *methods = calloc(base->n_methods, sizeof(*methods));
		if (methods == NULL)
			goto oom;
		for (size_t i = 0; i < base->n_methods; i++) {
			methods[i] = base->methods[i];
			if (lb_same(&base->methods[i].lb, &base->lb))
				methods[i].lb = lb;
			if (set->locality_weighted)
				methods[i].layer.locality = MTD_LB_LOCALITY_OFF;
		}
		o->svc.methods = methods;
		o->owns |= MTD_RT_OVER_OWNS_METHODS;
	}
	if (c->tls != NULL) {
		struct mtd_cfg_tls *tls = calloc(1, sizeof(*tls));
		if (tls == NULL)
			goto oom;
		o->svc.tls = tls;
		o->owns |= MTD_RT_OVER_OWNS_TLS;
		tls->ca_file = c->tls->ca_file ? strdup(c->tls->ca_file) : NULL;
		tls->cert_file = c->tls->cert_file ? strdup(c->tls->cert_file) : NULL;
		tls->key_file = c->tls->key_file ? strdup(c->tls->key_file) : NULL;
		tls->server_name = c->tls->server_name ? strdup(c->tls->server_name) : NULL;
		tls->server_identity = c->tls->server_identity ? strdup(c->tls->server_identity) : NULL;
		if ((c->tls->ca_file && !tls->ca_file) || (c->tls->cert_file && !tls->cert_file) ||
		    (c->tls->key_file && !tls->key_file) || (c->tls->server_name && !tls->server_name) ||
		    (c->tls->server_identity && !tls->server_identity))
			goto oom;
	}
	return o;
oom:
	mtd_rt_over_unref(o);
	return NULL;
}

/* Binding b's cluster (xds_find_cl) and the assignment of its EDS name
 * (xds_find_cla), looked up where they were found last (the tables move
 * when rebuilt: the name there decides) before a search: every response
 * visits every binding (10,000 of them in a large mesh). */
static struct xds_cl *bind_cl(struct mtd_xds *x, struct xds_bind *b)
{
	if (b->cl_at < x->n_cls && strcmp(x->cls[b->cl_at].name, b->cluster) == 0)
		return &x->cls[b->cl_at];
	struct xds_cl *cl = xds_find_cl(x, b->cluster);
	if (cl != NULL)
		b->cl_at = (size_t)(cl - x->cls);
	return cl;
}

static struct xds_cla *bind_cla(struct mtd_xds *x, struct xds_bind *b, const char *eds_name)
{
	if (b->cla_at < x->n_clas && strcmp(x->clas[b->cla_at].name, eds_name) == 0)
		return &x->clas[b->cla_at];
	struct xds_cla *ea = xds_find_cla(x, eds_name);
	if (ea != NULL)
		b->cla_at = (size_t)(ea - x->clas);
	return ea;
}

/* ---- the pending rebuilds (struct xds_pending) ----------------------------------- */

/* A slice's time: a response that arrives during a slice waits at most
 * about this long for the control thread (10,000 services of 10
 * endpoints rebuild in about 220 ms: 15-20 slices, each published). */
#define SLICE_MS 8

/* A slice runs at most this long after the previous one (or the queue's
 * first entry), whatever else the control loop has to do. */
#define LATE_MS 250

/* Test-only limits (a test shows the rebuild in progress, which one slice
 * per turn at full speed hides): MAITRED_TEST_XDS_SLICE, services per
 * slice at most; MAITRED_TEST_XDS_SLICE_GAP_MS, the delay before each
 * slice; MAITRED_TEST_XDS_SLICE_LATE_MS, the bound on a slice's wait
 * (default LATE_MS after the gap). Read once, at the first client's
 * start; a bad value is ignored (logged). Not for production: a gap
 * delays every cluster change. */
/* Test-only environment variable name as a whole number in [lo, hi] into
 * *out (digits only: strtoull would read "-1" as its largest value);
 * absent leaves *out, anything else is logged and ignored. */
static void env_count(const char *name, unsigned long long lo, unsigned long long hi, unsigned long long *out)
{
	const char *v = getenv(name);
	char *end;

	if (v == NULL)
		return;
	unsigned long long n = strtoull(v, &end, 10);
	if (*v >= '0' && *v <= '9' && *end == '\0' && n >= lo && n <= hi)
		*out = n;
	else
		MTD_WARN("xds: %s=%.40s is not %llu..%llu: ignored", name, v, lo, hi);
}

void xds_rebuild_limits(struct xds_pending *p)
{
	static bool read;
	static unsigned long long slice_max = SIZE_MAX, gap_ms, late_ms;

	if (!read) {
		read = true;
		env_count("MAITRED_TEST_XDS_SLICE", 1, SIZE_MAX, &slice_max);
		env_count("MAITRED_TEST_XDS_SLICE_GAP_MS", 0, 86400000, &gap_ms);
		env_count("MAITRED_TEST_XDS_SLICE_LATE_MS", 1, 86400000, &late_ms);
		if (slice_max != SIZE_MAX || gap_ms != 0 || late_ms != 0)
			MTD_WARN("xds: test-only rebuild limits: %llu service(s) a slice at most, %llu ms before each, "
			         "%llu ms at most",
			         slice_max, gap_ms, late_ms ? late_ms : gap_ms + LATE_MS);
	}
	p->slice_max = (size_t)slice_max;
	p->slice_ns = (int64_t)SLICE_MS * 1000000;
	p->gap_ms = (int64_t)gap_ms;
	p->late_ms = (int64_t)(late_ms ? late_ms : gap_ms + LATE_MS);
}

static void pending_count(struct mtd_xds *x)
{
	mtd_metrics_xds()->rebuilds_pending = x->pending.n;
}

/* Room to queue every binding (called as one is added): 0, or -ENOMEM. */
static int pending_reserve(struct xds_pending *p, size_t n_binds)
{
	if (p->cap >= n_binds)
		return 0;
	size_t cap = p->cap ? p->cap : 16;
	while (cap < n_binds)
		cap *= 2;
	struct xds_bind **q = realloc(p->q, cap * sizeof(*q));
	if (q == NULL)
		return -ENOMEM;
	p->q = q;
	p->cap = cap;
	return 0;
}

/* The queued bindings moved to the front (slots left by those taken out
 * early are dropped). */
static void pending_compact(struct xds_pending *p)
{
	size_t k = 0;

	for (size_t i = p->head; i < p->tail; i++) {
		if (p->q[i] == NULL)
			continue;
		p->q[k] = p->q[i];
		p->q[k]->pending_at = k + 1;
		k++;
	}
	p->head = 0;
	p->tail = k;
}

static void pending_arm(struct mtd_xds *x)
{
	struct xds_pending *p = &x->pending;
	struct timeval tv = {(time_t)(p->gap_ms / 1000), (suseconds_t)(p->gap_ms % 1000 * 1000)};
	struct timeval late = {(time_t)(p->late_ms / 1000), (suseconds_t)(p->late_ms % 1000 * 1000)};

	if (p->n == 0)
		return;
	if (!evtimer_pending(p->ev, NULL) && evtimer_add(p->ev, &tv) != 0)
		MTD_ERROR("xds: cannot arm the rebuild timer: %zu service(s) wait for the next cluster change", p->n);
	if (!evtimer_pending(p->late, NULL))
		(void)evtimer_add(p->late, &late); /* the background timer alone still runs the rebuild */
}

/* Queue binding b's service for a rebuild (a no-op when it is queued). */
static void pending_add(struct mtd_xds *x, struct xds_bind *b)
{
	struct xds_pending *p = &x->pending;

	if (b->pending_at != 0)
		return;
	if (p->tail == p->cap)
		pending_compact(p); /* room: n < bindings <= cap */
	p->q[p->tail++] = b;
	b->pending_at = p->tail;
	p->n++;
	pending_count(x);
	pending_arm(x);
}

static void pending_remove(struct mtd_xds *x, struct xds_bind *b)
{
	struct xds_pending *p = &x->pending;

	if (b->pending_at == 0)
		return;
	p->q[b->pending_at - 1] = NULL;
	b->pending_at = 0;
	if (--p->n == 0) {
		p->head = p->tail = 0;
		if (p->ev != NULL)
			evtimer_del(p->ev);
		if (p->late != NULL)
			evtimer_del(p->late);
	}
	pending_count(x);
}

/* The records of ea's last good assignment: its fresh translation, or its
 * bytes translated again into *again (the caller frees it); NULL when
 * out of memory (the bytes were accepted once: the same translate
 * alike). */
static const struct mtd_xds_cla *cla_records(const struct xds_cla *ea, struct mtd_xds_cla **again)
{
	char why[256];

	*again = NULL;
	if (ea->fresh != NULL)
		return ea->fresh;
	if (mtd_xds_cla_parse(ea->raw, ea->raw_len, again, why, sizeof(why)) != 0)
		return NULL;
	return *again;
}

/* Give bound service b what its cluster holds now, in batch bt (one
 * snapshot for every service a response changes). */
static void apply_bind(struct mtd_xds *x, struct mtd_rt_batch *bt, struct xds_bind *b)
{
	const struct xds_cl *cl = bind_cl(x, b);
	const struct xds_cla *ea = cl != NULL && cl->have ? bind_cla(x, b, cl->c.eds_name) : NULL;
	static const struct mtd_disc_endpoint none[1];
	char why[1200];

	b->applied = true;
	pending_remove(x, b); /* given the newest: its rebuild is done */
	if (cl != NULL && cl->removed) {
		snprintf(why, sizeof(why), "xds: cluster %s was removed by %s", b->cluster, x->server.text);
		mtd_control_batch_set(bt, b->service, NULL, none, 0, why, false);
		return;
	}
	if (cl == NULL || !cl->have) {
		/* Nothing good yet: what a reload carried over serves on. */
		bool refused = cl != NULL && cl->nack;
		snprintf(why, sizeof(why), "xds: %s cluster %s from %s%s%s", refused ? "refused" : "waiting for",
		         b->cluster, x->server.text, refused ? ": " : "", refused ? cl->nack : "");
		mtd_control_batch_set(bt, b->service, NULL, NULL, 0, why, !refused);
		return;
	}
	if (ea == NULL || ea->raw == NULL) {
		bool refused = ea != NULL && ea->nack != NULL;
		snprintf(why, sizeof(why), "xds: %s the endpoints of cluster %s (EDS %s) from %s%s%s",
		         refused ? "refused" : "waiting for", b->cluster, cl->c.eds_name, x->server.text,
		         refused ? ": " : "", refused ? ea->nack : "");
		mtd_control_batch_set(bt, b->service, NULL, NULL, 0, why, !refused);
		return;
	}
	struct mtd_xds_cla *again = NULL;
	const struct mtd_xds_cla *c = cla_records(ea, &again);
	struct mtd_disc_endpoint *eps = c != NULL ? calloc(c->n ? c->n : 1, sizeof(*eps)) : NULL;
	struct mtd_rt_over *over = c != NULL ? over_new(&x->ctl->rt->cfg->services[b->service], cl, c) : NULL;
	if (eps == NULL || over == NULL) {
		MTD_ERROR("xds: service %s: out of memory: its endpoint set stays as it was", b->svc_name);
		free(eps);
		mtd_rt_over_unref(over);
		mtd_xds_cla_free(again);
		return;
	}
	for (size_t i = 0; i < c->n; i++) {
		eps[i].address = c->eps[i].address;
		eps[i].weight = c->eps[i].weight;
		eps[i].zone = c->eps[i].zone;
		mtd_xds_ep_sockaddr(&c->eps[i], &eps[i].sa, &eps[i].salen);
	}
	if (c->n == 0)
		snprintf(why, sizeof(why), "xds: cluster %s has no endpoint that may be picked", b->cluster);
	if (mtd_control_batch_set(bt, b->service, over, eps, c->n, c->n == 0 ? why : NULL, false) == 0) {
		/* Looked up once per binding, not at every set: the lookup walks
		 * every service's entry, and a state-of-the-world EDS response
		 * applies every assignment (10,000 services: 0.6 s of the
		 * control thread a push, bench/xds/README.md). */
		if (b->mx == NULL)
			b->mx = mtd_metrics_disc(b->svc_name, "xds");
		if (b->mx != NULL) {
			b->mx->endpoints = c->n;
			b->mx->last_sync_ms = mtd_wall_ms();
		}
	}
	free(eps);
	mtd_xds_cla_free(again);
}

struct mtd_rt_over *mtd_xds_over_now(struct mtd_xds *x, const struct mtd_cfg_service *base)
{
	if (x == NULL || base->local->xds_cluster == NULL)
		return NULL;
	const struct xds_cl *cl = xds_find_cl(x, base->local->xds_cluster);
	if (cl == NULL || !cl->have || cl->removed)
		return NULL;
	const struct xds_cla *ea = xds_find_cla(x, cl->c.eds_name);
	if (ea == NULL || ea->raw == NULL)
		return NULL;
	struct mtd_xds_cla *again = NULL;
	const struct mtd_xds_cla *c = cla_records(ea, &again);
	struct mtd_rt_over *o = c != NULL ? over_new(base, cl, c) : NULL;
	mtd_xds_cla_free(again);
	return o;
}

/* The services not given anything yet (just bound). */
void xds_apply_new(struct mtd_xds *x)
{
	struct mtd_rt_batch *bt = NULL;

	for (size_t i = 0; i < x->n_binds; i++) {
		if (x->binds[i]->applied)
			continue;
		if (bt == NULL && (bt = mtd_control_batch_begin(x->ctl)) == NULL)
			return;
		apply_bind(x, bt, x->binds[i]);
	}
	if (bt != NULL)
		mtd_control_batch_publish(x->ctl, bt);
}

/* The services whose assignment the EDS response at hand changed (dirty),
 * and only those, each with its cluster's newest translation (a service
 * queued for a rebuild is rebuilt now, not after the queue): one pass over
 * the services, each looking its cluster up (no scan per resource: a push
 * of every assignment stays O(services log clusters) here), and one
 * snapshot for all of them. */
void xds_apply_dirty(struct mtd_xds *x)
{
	struct mtd_rt_batch *bt = NULL;

	for (size_t i = 0; i < x->n_binds; i++) {
		const struct xds_cl *cl = bind_cl(x, x->binds[i]);
		const struct xds_cla *ea = cl != NULL && cl->have ? bind_cla(x, x->binds[i], cl->c.eds_name) : NULL;

		if (ea != NULL && ea->resent && !ea->dirty) {
			/* Unchanged, not rebuilt; its source answered all the same. */
			if (x->binds[i]->applied && x->binds[i]->mx != NULL)
				x->binds[i]->mx->last_sync_ms = mtd_wall_ms();
			continue;
		}
		if (ea == NULL || !ea->dirty)
			continue;
		if (bt == NULL && (bt = mtd_control_batch_begin(x->ctl)) == NULL)
			break;
		apply_bind(x, bt, x->binds[i]);
	}
	if (bt != NULL)
		mtd_control_batch_publish(x->ctl, bt);
	for (size_t i = 0; i < x->n_clas; i++) {
		x->clas[i].dirty = x->clas[i].resent = false;
		mtd_xds_cla_free(x->clas[i].fresh);
		x->clas[i].fresh = NULL;
	}
}

/* One slice of the pending rebuilds: the queue's first services, as many
 * as fit in its time (one at least) and its count, in one snapshot. */
void xds_rebuild_slice(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_xds *x = arg;
	struct xds_pending *p = &x->pending;
	struct mtd_rt_batch *bt = NULL;
	int64_t start = mtd_now_ns();
	size_t done = 0;

	(void)fd;
	(void)what;
	evtimer_del(p->late); /* a slice ran: the bound counts from now */
	while (p->n > 0 && done < p->slice_max && (done == 0 || mtd_now_ns() - start < p->slice_ns)) {
		while (p->q[p->head] == NULL)
			p->head++;
		if (bt == NULL && (bt = mtd_control_batch_begin(x->ctl)) == NULL)
			break; /* out of memory: the next slice tries again */
		apply_bind(x, bt, p->q[p->head]); /* takes it out */
		done++;
	}
	if (bt != NULL)
		mtd_control_batch_publish(x->ctl, bt);
	pending_arm(x);
}

/* The first binding of cluster name in the sorted bindings (n_binds when
 * none is). */
static size_t binds_lower(const struct mtd_xds *x, const char *name)
{
	size_t lo = 0, hi = x->n_binds;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (strcmp(x->binds[mid]->cluster, name) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Queue the services of every cluster the CDS response at hand changed
 * (dirty), and only those (found by a search of the bindings sorted by
 * cluster: one change among 10,000 visits its own services). */
void xds_queue_changed(struct mtd_xds *x)
{
	for (size_t i = 0; i < x->n_cls; i++) {
		struct xds_cl *cl = &x->cls[i];
		if (!cl->dirty)
			continue;
		cl->dirty = false;
		if (!x->binds_sorted) {
			for (size_t k = 0; k < x->n_binds; k++)
				if (strcmp(x->binds[k]->cluster, cl->name) == 0)
					pending_add(x, x->binds[k]);
			continue;
		}
		for (size_t k = binds_lower(x, cl->name); k < x->n_binds && strcmp(x->binds[k]->cluster, cl->name) == 0;
		     k++)
			pending_add(x, x->binds[k]);
	}
}

/* ---- the per-service source ----------------------------------------------------- */

static int xds_start(struct mtd_control *ctl, size_t service, const struct mtd_cfg_service *cfg, void **state)
{
	struct mtd_xds *x = ctl->xds;
	struct xds_bind *b, **grown;

	if (x == NULL) {
		mtd_control_set_unavailable(ctl, service, "xds: no management server (the xds block failed to start)");
		return -EINVAL;
	}
	b = calloc(1, sizeof(*b));
	grown = realloc(x->binds, (x->n_binds + 1) * sizeof(*grown));
	if (grown != NULL)
		x->binds = grown;
	if (b == NULL || grown == NULL || pending_reserve(&x->pending, x->n_binds + 1) != 0 ||
	    (b->cluster = strdup(cfg->local->xds_cluster)) == NULL) {
		free(b);
		return -ENOMEM;
	}
	b->x = x;
	b->service = service;
	b->svc_name = cfg->local->name;
	x->binds[x->n_binds++] = b;
	x->binds_sorted = false;
	/* Given what the client has at mtd_xds_sources_started, with every
	 * other service started with it (one snapshot). Until then it keeps
	 * what a reload carried over, or names what it waits for
	 * (mtd_runtime_waiting, set when its snapshot was built). */
	xds_schedule_sync(x);
	*state = b;
	return 0;
}

static void xds_stop(void *state)
{
	struct xds_bind *b = state;
	struct mtd_xds *x;

	if (b == NULL)
		return;
	x = b->x;
	if (x != NULL) {
		pending_remove(x, b);
		x->binds_sorted = false;
		for (size_t i = 0; i < x->n_binds; i++) {
			if (x->binds[i] == b) {
				x->binds[i] = x->binds[--x->n_binds];
				break;
			}
		}
		xds_schedule_sync(x);
	}
	free(b->cluster);
	free(b);
}

const struct mtd_disc_source_ops mtd_xds_source_ops = {
        .name = "xds",
        .start = xds_start,
        .stop = xds_stop,
};
