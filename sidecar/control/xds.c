/* The xDS client: one ADS stream, CDS then EDS, state of the world
 * (xds.h says the contract). A cluster is kept translated (lib/xds: its
 * options) and as the bytes that came (to know a resend); an assignment
 * only as its bytes, translated again when its services are given it
 * (the records of one just received serve until it is applied).
 *
 *   DOWN --connect--> STREAMING --stream or connection ends--> DOWN
 *    ^                                                           |
 *    +--------------- retry timer (jittered backoff) <-----------+
 *
 * DOWN: no connection; the retry timer armed. STREAMING: a connection and
 * its ADS call; every subscription sent on it. */
#include "config.h"

#include <errno.h>
#include <event2/event.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin/admin.h"
#include "config/config.h"
#include "core/clock.h"
#include "core/log.h"
#include "envoy/service/discovery/v3/discovery.pb-c.h"
#include "pbwire/pbwire.h"
#include "sidecar/control/control-t.h"
#include "sidecar/control/control.h"
#include "sidecar/control/gclient.h"
#include "sidecar/control/reload.h"
#include "sidecar/control/runtime-t.h"
#include "sidecar/control/runtime.h"
#include "sidecar/control/xds.h"
#include "sidecar/control/xds_routes.h"
#include "sidecar/io/transport.h"
#include "sidecar/ops/metrics.h"
#include "xds/xds.h"

#define ADS_PATH           "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
#define CONNECT_TIMEOUT_MS 5000
/* gRPC servers on grpc-go police PINGs: by default none more often than
 * every 5 minutes, a few strikes and GOAWAY too_many_pings (HACKING.md,
 * "Lessons"). Just past that: a dead server is found within minutes. */
#define KEEPALIVE_MS     310000
#define BACKOFF_FIRST_MS 1000
#define BACKOFF_MAX_MS   30000
#define NACK_TEXT_MAX    4096 /* error_detail.message at most */
#define USER_AGENT       "maitred"

enum { T_CDS = 0, T_EDS = 1, T_LDS = 2, T_RDS = 3, N_TYPES };

static const char *const type_url[N_TYPES] = {MTD_XDS_TYPE_CLUSTER, MTD_XDS_TYPE_ENDPOINT, MTD_XDS_TYPE_LISTENER,
                                              MTD_XDS_TYPE_ROUTE};
static const char *const type_name[N_TYPES] = {"cluster", "endpoint", "listener", "route"};

/* The version and nonce of one response, shared by the resources it
 * brought (one copy per response, not one per resource). */
struct xds_stamp {
	unsigned refs;
	char *version, *nonce;
};

/* A cluster subscribed to: its last good translation (have) and where it
 * came from. */
struct xds_cl {
	char *name;
	bool have;
	bool removed; /* the server stopped sending it (CDS is state of the world) */
	bool dirty;   /* changed by the response at hand: its services to be queued (on_clusters) */
	uint64_t gen; /* a new one at each change of c (the override's tag) */
	struct mtd_xds_cluster c;
	/* c's resource as it last came (NULL: none, or out of memory): a
	 * state of the world resends every cluster, and the same bytes are
	 * neither decoded nor compared again. */
	uint8_t *raw;
	size_t raw_len;
	struct xds_stamp *stamp; /* the response that brought it (a reference), NULL = none */
	char *nack;              /* the last refusal of a resource of this name, NULL = none */
};

/* An assignment of at least this many endpoints keeps its translation
 * from its arrival until it is applied (struct xds_cla's fresh). */
#define FRESH_MIN 64

/* An assignment subscribed to (an EDS name of a cluster we have). */
struct xds_cla {
	char *name;
	/* The last good one as it came, the one form kept (NULL = none yet):
	 * the same bytes again translate to the same records, so a state of
	 * the world that resends it is neither decoded nor applied again, and
	 * its services are given it translated again (cla_records). */
	uint8_t *raw;
	size_t raw_len;
	/* Its translation while the response that brought it is applied
	 * (on_endpoints to apply_dirty), else NULL; only a large one's
	 * (FRESH_MIN endpoints or more, see on_endpoints). */
	struct mtd_xds_cla *fresh;
	uint32_t n, priority, n_skipped; /* of its translation, for /config_dump */
	uint64_t updates; /* responses that changed it (each given to its services) */
	bool dirty;       /* changed by the response at hand */
	bool resent;      /* the response at hand brought it again, unchanged */
	struct xds_stamp *stamp;
	char *nack;
};

/* The one Listener (xds.listener) or RouteConfiguration subscribed to. */
struct xds_one {
	char *name;              /* NULL = none subscribed */
	bool have;               /* a good one came */
	struct xds_stamp *stamp; /* the response that brought the last good one */
	char *nack;
	char *detail; /* what it says: "rds NAME", "inline routes", "N routes" */
};

/* Per resource type, the stream's side of it. */
struct xds_type {
	char *version;   /* last accepted version_info, NULL = none */
	char *nonce;     /* the last response's nonce, NULL = none */
	char *nack;      /* the last NACK's text, NULL = the last response was accepted */
	bool subscribed; /* the current names went out on this stream */
	int64_t nack_logged_ms;
	uint64_t nacks_unlogged;
};

/* A service bound to a cluster (the per-service source's state). */
struct xds_bind {
	struct mtd_xds *x;
	size_t service;
	char *cluster;
	const char *svc_name; /* the config's, valid while bound */
	struct mtd_mx_disc *mx; /* its discovery figures, NULL = not yet (lives as long as the process) */
	bool applied;         /* what the client knows of its cluster was given to it */
	size_t cl_at, cla_at; /* where its cluster and assignment were last found (bind_cl, bind_cla) */
	size_t pending_at;    /* its slot in the pending rebuilds plus one; 0 = not queued */
};

/* The pending rebuilds: the bound services whose cluster changed since
 * their snapshot was built, rebuilt a slice at a time, a slice in a turn
 * of the event loop with nothing else ready (background priority,
 * control.h), so that a CDS response that changes many clusters is
 * answered at once and an EDS response read meanwhile is applied at once
 * for its services, not behind the whole rebuild.
 *
 * Contract: a binding is queued at most once, and is queued exactly while
 * its service's snapshot may lack its cluster's newest accepted
 * translation. Whatever gives a binding what the client holds now
 * (apply_bind: a slice, an EDS response for its assignment, a new
 * binding's first apply) takes it out of the queue (out of memory there:
 * it keeps its snapshot until its cluster or assignment changes again, as
 * it did before there was a queue); so a newer CDS
 * response only queues what is not queued yet (a service is rebuilt once,
 * from the newest cluster), and an EDS response rebuilds its queued
 * services then, with the newest cluster. A binding that stops leaves it
 * (a reload stops every binding; its new ones are each given everything
 * the client holds, as a fresh maitred's are). A rebuild is one service's
 * whole snapshot: it holds the old cluster or the new, never part of each.
 * The stream does not matter: what was accepted is rebuilt while the
 * server is away. Control thread. */
struct xds_pending {
	struct xds_bind **q; /* queued in [head, tail), NULL where one left early */
	size_t head, tail, n;
	size_t cap;       /* at least the number of bindings: queuing never allocates */
	struct event *ev; /* the next slice: a timer of background priority (control.h) */
	size_t slice_max; /* services at most per slice (test-only limit, see rebuild_limits) */
	int64_t slice_ns; /* time at most per slice (one service at least) */
	int64_t gap_ms;   /* delay before each slice (test-only, see rebuild_limits; else 0) */
	/* The bound on background priority's wait: a timer of normal
	 * priority that runs a slice when none ran for late_ms (a control
	 * loop with a normal event ready in every turn would otherwise hold
	 * the rebuild back for as long). Re-armed by every slice. */
	struct event *late;
	int64_t late_ms;
};

struct mtd_xds {
	struct mtd_control *ctl;
	struct event_base *base;
	/* The config's block, copied (a reload frees the config). */
	struct mtd_cfg_addr server;
	char *node_id, *zone;
	struct mtd_cfg_tls *tls_cfg; /* the files, for comparing */
	struct ssl_ctx_st *ssl_ctx;  /* NULL = h2c */
	struct mtd_gcli *conn;
	struct mtd_gcli_call *ads;
	bool node_sent; /* on this stream */
	struct event *retry, *sync_ev;
	unsigned failures; /* streams in a row without a response */
	char *down_why;    /* why the last stream ended, NULL = never */
	bool away;         /* a stream ended and no response came since: "answers again" is due */
	struct xds_type t[N_TYPES];
	struct xds_cl *cls; /* sorted by name */
	size_t n_cls;
	struct xds_cla *clas; /* sorted by name */
	size_t n_clas;
	struct xds_bind **binds; /* sorted by cluster name while binds_sorted (sync_cb) */
	size_t n_binds;
	bool binds_sorted;
	struct xds_pending pending;
	uint64_t next_gen;
	/* LDS and RDS (xds.listener): the listener, the route configuration
	 * its connection manager names (name NULL: inline, or none yet), and
	 * the routes in force (the last good, inline or by RDS), kept to bind
	 * again to a reloaded config's services. */
	struct xds_one lds, rds;
	bool rds_resub; /* rds.name changed: its request goes out after the listener's answer */
	struct mtd_xds_routes_box *routes;
	struct mtd_xds_fault fault; /* the listener's fault filter (filter NULL: none) */
	/* The server answered for the listener: its routes came, or it said
	 * there are none (the listener or its route configuration absent
	 * from a response, or refused). Until then calls wait for them
	 * (runtime-t.h `routes_awaited`); from then on, never again for this
	 * listener, whatever the stream does. */
	bool routes_answered;
};

static void connect_now(struct mtd_xds *x);
static void send_request(struct mtd_xds *x, int t, const char *nack);

/* ---- small helpers ---------------------------------------------------------- */

static void stamp_put(struct xds_stamp *st)
{
	if (st == NULL || --st->refs > 0)
		return;
	free(st->version);
	free(st->nonce);
	free(st);
}

/* slot takes a reference on the response's stamp, made at its first use
 * (*st); out of memory leaves slot as it was (a display only). */
static void stamp_take(struct xds_stamp **slot, struct xds_stamp **st,
                       const struct mtd_xds_response *r)
{
	if (*st == NULL) {
		struct xds_stamp *n = calloc(1, sizeof(*n));
		if (n == NULL || (n->version = strdup(r->version_info)) == NULL ||
		    (n->nonce = strdup(r->nonce)) == NULL) {
			if (n != NULL)
				free(n->version);
			free(n);
			return;
		}
		n->refs = 1; /* the response's own, dropped when it is done */
		*st = n;
	}
	(*st)->refs++;
	stamp_put(*slot);
	*slot = *st;
}

static bool same_str(const char *a, const char *b)
{
	return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

static void set_str(char **slot, const char *s)
{
	char *c = s != NULL ? strdup(s) : NULL;

	if (s != NULL && c == NULL)
		return; /* out of memory: keep the old text, a display only */
	free(*slot);
	*slot = c;
}

static int cmp_name(const void *key, const void *elem)
{
	return strcmp(key, *(char *const *)elem); /* every table entry starts with its name */
}

static struct xds_cl *find_cl(struct mtd_xds *x, const char *name)
{
	return x->n_cls ? bsearch(name, x->cls, x->n_cls, sizeof(*x->cls), cmp_name) : NULL;
}

static struct xds_cla *find_cla(struct mtd_xds *x, const char *name)
{
	return x->n_clas ? bsearch(name, x->clas, x->n_clas, sizeof(*x->clas), cmp_name) : NULL;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void cl_clear(struct xds_cl *e)
{
	free(e->name);
	mtd_xds_cluster_clear(&e->c);
	free(e->raw);
	stamp_put(e->stamp);
	free(e->nack);
	memset(e, 0, sizeof(*e));
}

static void cla_clear(struct xds_cla *e)
{
	free(e->name);
	mtd_xds_cla_free(e->fresh);
	free(e->raw);
	stamp_put(e->stamp);
	free(e->nack);
	memset(e, 0, sizeof(*e));
}

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
		o->local = malloc(sizeof(*o->local));
		if (o->local == NULL)
			goto oom;
		*o->local = *base->local;
		o->local->layer.locality = MTD_LB_LOCALITY_OFF;
		o->svc.local = o->local;
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
		o->methods = calloc(base->n_methods, sizeof(*o->methods));
		if (o->methods == NULL)
			goto oom;
		for (size_t i = 0; i < base->n_methods; i++) {
			o->methods[i] = base->methods[i];
			if (lb_same(&base->methods[i].lb, &base->lb))
				o->methods[i].lb = lb;
			if (set->locality_weighted)
				o->methods[i].layer.locality = MTD_LB_LOCALITY_OFF;
		}
		o->svc.methods = o->methods;
	}
	if (c->tls != NULL) {
		o->tls = calloc(1, sizeof(*o->tls));
		if (o->tls == NULL)
			goto oom;
		o->tls->ca_file = c->tls->ca_file ? strdup(c->tls->ca_file) : NULL;
		o->tls->cert_file = c->tls->cert_file ? strdup(c->tls->cert_file) : NULL;
		o->tls->key_file = c->tls->key_file ? strdup(c->tls->key_file) : NULL;
		o->tls->server_name = c->tls->server_name ? strdup(c->tls->server_name) : NULL;
		o->tls->server_identity = c->tls->server_identity ? strdup(c->tls->server_identity) : NULL;
		if ((c->tls->ca_file && !o->tls->ca_file) || (c->tls->cert_file && !o->tls->cert_file) ||
		    (c->tls->key_file && !o->tls->key_file) || (c->tls->server_name && !o->tls->server_name) ||
		    (c->tls->server_identity && !o->tls->server_identity))
			goto oom;
		o->svc.tls = o->tls;
	}
	return o;
oom:
	mtd_rt_over_unref(o);
	return NULL;
}

/* Binding b's cluster (find_cl) and the assignment of its EDS name
 * (find_cla), looked up where they were found last (the tables move
 * when rebuilt: the name there decides) before a search: every response
 * visits every binding (10,000 of them in a large mesh). */
static struct xds_cl *bind_cl(struct mtd_xds *x, struct xds_bind *b)
{
	if (b->cl_at < x->n_cls && strcmp(x->cls[b->cl_at].name, b->cluster) == 0)
		return &x->cls[b->cl_at];
	struct xds_cl *cl = find_cl(x, b->cluster);
	if (cl != NULL)
		b->cl_at = (size_t)(cl - x->cls);
	return cl;
}

static struct xds_cla *bind_cla(struct mtd_xds *x, struct xds_bind *b, const char *eds_name)
{
	if (b->cla_at < x->n_clas && strcmp(x->clas[b->cla_at].name, eds_name) == 0)
		return &x->clas[b->cla_at];
	struct xds_cla *ea = find_cla(x, eds_name);
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

static void rebuild_limits(struct xds_pending *p)
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

/* The services not given anything yet (just bound). */
static void apply_new(struct mtd_xds *x)
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
static void apply_dirty(struct mtd_xds *x)
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
static void rebuild_slice(evutil_socket_t fd, short what, void *arg)
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
static void queue_changed(struct mtd_xds *x)
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

/* ---- subscriptions ------------------------------------------------------------ */

/* The names type t wants now, sorted and unique (borrowed from the
 * tables). NULL with *n = 0 when none; -1 on out of memory. */
static int wanted(struct mtd_xds *x, int t, const char ***out, size_t *n)
{
	size_t cap = t == T_CDS ? x->n_binds : x->n_cls, k = 0;
	const char **v;

	*out = NULL;
	*n = 0;
	if (cap == 0)
		return 0;
	v = calloc(cap, sizeof(*v));
	if (v == NULL)
		return -1;
	for (size_t i = 0; i < cap; i++) {
		if (t == T_CDS)
			v[k++] = x->binds[i]->cluster;
		else if (x->cls[i].have)
			v[k++] = x->cls[i].c.eds_name;
	}
	qsort(v, k, sizeof(*v), cmp_str);
	size_t u = 0;
	for (size_t i = 0; i < k; i++)
		if (u == 0 || strcmp(v[u - 1], v[i]) != 0)
			v[u++] = v[i];
	*out = v;
	*n = u;
	return 0;
}

/* Make the table of type t hold exactly the names wanted (entries kept by
 * name). true when the set of names changed; out of memory leaves the
 * table as it was (logged). */
static bool retable(struct mtd_xds *x, int t)
{
	const char **names;
	char **fresh = NULL;
	void *next = NULL;
	size_t n, esz = t == T_CDS ? sizeof(struct xds_cl) : sizeof(struct xds_cla);
	bool changed;

	if (wanted(x, t, &names, &n) != 0)
		goto oom;
	/* Every allocation first: nothing moves unless all succeeded. */
	fresh = calloc(n ? n : 1, sizeof(*fresh));
	next = calloc(n ? n : 1, esz);
	if (fresh == NULL || next == NULL)
		goto oom;
	changed = n != (t == T_CDS ? x->n_cls : x->n_clas);
	for (size_t i = 0; i < n; i++) {
		bool known = t == T_CDS ? find_cl(x, names[i]) != NULL : find_cla(x, names[i]) != NULL;
		if (!known && (fresh[i] = strdup(names[i])) == NULL)
			goto oom;
		changed |= !known;
	}
	for (size_t i = 0; i < n; i++) {
		if (t == T_CDS) {
			struct xds_cl *e = (struct xds_cl *)next + i, *old = find_cl(x, names[i]);
			if (old != NULL) {
				*e = *old;
				/* Moved; its name stays for the lookups of the rest. */
				memset(old, 0, sizeof(*old));
				old->name = e->name;
			} else {
				e->name = fresh[i];
			}
		} else {
			struct xds_cla *e = (struct xds_cla *)next + i, *old = find_cla(x, names[i]);
			if (old != NULL) {
				*e = *old;
				memset(old, 0, sizeof(*old));
				old->name = e->name;
			} else {
				e->name = fresh[i];
			}
		}
	}
	/* The old tables: an entry that moved kept only its name, which the
	 * new table owns now; the others (names no longer wanted) are freed. */
	if (t == T_CDS) {
		for (size_t i = 0; i < x->n_cls; i++)
			if (n == 0 || !bsearch(x->cls[i].name, next, n, esz, cmp_name))
				cl_clear(&x->cls[i]);
		free(x->cls);
		x->cls = next;
		x->n_cls = n;
	} else {
		for (size_t i = 0; i < x->n_clas; i++)
			if (n == 0 || !bsearch(x->clas[i].name, next, n, esz, cmp_name))
				cla_clear(&x->clas[i]);
		free(x->clas);
		x->clas = next;
		x->n_clas = n;
	}
	free(fresh);
	free(names);
	return changed;
oom:
	MTD_ERROR("xds: out of memory: subscriptions unchanged");
	for (size_t i = 0; fresh != NULL && i < n; i++)
		free(fresh[i]);
	free(fresh);
	free(next);
	free(names);
	return false;
}

/* Send type t's request on the stream: the names in its table, the
 * version last accepted, the nonce of the response it answers (nonce
 * NULL: none, a new subscription), a NACK's text. */
static void send_request(struct mtd_xds *x, int t, const char *nack)
{
	Envoy__Service__Discovery__V3__DiscoveryRequest req = ENVOY__SERVICE__DISCOVERY__V3__DISCOVERY_REQUEST__INIT;
	Envoy__Config__Core__V3__Node node = ENVOY__CONFIG__CORE__V3__NODE__INIT;
	Envoy__Config__Core__V3__Locality loc = ENVOY__CONFIG__CORE__V3__LOCALITY__INIT;
	Google__Rpc__Status st = GOOGLE__RPC__STATUS__INIT;
	const struct xds_one *one = t == T_LDS ? &x->lds : t == T_RDS ? &x->rds : NULL;
	size_t n = t == T_CDS ? x->n_cls : t == T_EDS ? x->n_clas : one->name != NULL;
	char **names;

	/* No name: nothing to ask (an empty list would be a wildcard,
	 * every resource of the type the server has). */
	if (x->ads == NULL || n == 0)
		return;
	names = calloc(n, sizeof(*names));
	if (names == NULL) {
		MTD_ERROR("xds: out of memory: a %s request not sent", type_name[t]);
		return;
	}
	for (size_t i = 0; i < n; i++)
		names[i] = t == T_CDS ? x->cls[i].name : t == T_EDS ? x->clas[i].name : one->name;
	req.type_url = (char *)type_url[t];
	req.n_resource_names = n;
	req.resource_names = names;
	req.version_info = x->t[t].version != NULL ? x->t[t].version : (char *)"";
	req.response_nonce = x->t[t].nonce != NULL ? x->t[t].nonce : (char *)"";
	if (!x->node_sent) {
		node.id = x->node_id;
		node.cluster = (char *)"";
		node.user_agent_name = (char *)USER_AGENT;
		node.user_agent_version_type_case =
		        ENVOY__CONFIG__CORE__V3__NODE__USER_AGENT_VERSION_TYPE_USER_AGENT_VERSION;
		node.user_agent_version = (char *)PACKAGE_VERSION;
		if (x->zone != NULL) {
			loc.zone = x->zone;
			node.locality = &loc;
		}
		req.node = &node;
	}
	if (nack != NULL) {
		st.code = 3; /* INVALID_ARGUMENT */
		st.message = (char *)nack;
		req.error_detail = &st;
	}
	if (mtd_gcli_call_send(x->ads, &req.base, false) == 0) {
		x->node_sent = true;
		x->t[t].subscribed = true;
	} else {
		MTD_ERROR("xds: cannot send a %s request (out of memory)", type_name[t]);
	}
	free(names);
}

static int cmp_bind(const void *a, const void *b)
{
	return strcmp((*(struct xds_bind *const *)a)->cluster, (*(struct xds_bind *const *)b)->cluster);
}

/* The bindings changed (a service started or stopped): subscribe to what
 * the services name now and give each bound service what is known. Run
 * from an event, once for all the changes of one turn (a reload stops
 * and starts every source). */
static void sync_cb(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_xds *x = arg;

	(void)fd;
	(void)what;
	if (!x->binds_sorted) {
		if (x->n_binds > 1) /* binds is NULL while none was ever bound */
			qsort(x->binds, x->n_binds, sizeof(*x->binds), cmp_bind);
		x->binds_sorted = true;
	}
	if (retable(x, T_CDS) && x->ads != NULL)
		send_request(x, T_CDS, NULL);
	if (retable(x, T_EDS) && x->ads != NULL)
		send_request(x, T_EDS, NULL);
	apply_new(x);
}

static void schedule_sync(struct mtd_xds *x)
{
	event_active(x->sync_ev, 0, 0);
}

void mtd_xds_sources_started(struct mtd_xds *x)
{
	if (x == NULL)
		return;
	event_del(x->sync_ev); /* done now, not again at the next turn */
	sync_cb(-1, 0, x);
}

struct mtd_cfg *mtd_xds_keep_created(struct mtd_xds *x, struct mtd_cfg *cfg)
{
	const char **want;
	size_t n_want;

	if (x == NULL || x->routes == NULL || cfg->xds == NULL || !same_str(cfg->xds->listener, x->lds.name))
		return cfg;
	if (mtd_xds_routes_created(cfg, x->routes->r, &want, &n_want) != 0) {
		MTD_WARN("xds: out of memory: the services created for the routes' clusters are not kept");
		return cfg;
	}
	if (n_want == 0) {
		free(want);
		return cfg;
	}
	struct mtd_cfg_errors errs = {0};
	struct mtd_cfg *with;
	int rc = mtd_cfg_with_xds_services(cfg, want, n_want, &with, &errs);
	free(want);
	if (rc != 0) {
		MTD_WARN("xds: the services created for the routes' clusters are not kept (%s)",
		         errs.n ? errs.msgs[0] : "out of memory");
		mtd_cfg_errors_clear(&errs);
		return cfg;
	}
	mtd_cfg_errors_clear(&errs);
	mtd_cfg_free(cfg);
	return with;
}

void mtd_xds_carry_routes(struct mtd_xds *x, struct mtd_runtime *rt)
{
	char why[1024];

	/* The new config's listener must be the one whose routes they are. */
	if (x == NULL || rt->cfg->xds == NULL || !same_str(rt->cfg->xds->listener, x->lds.name))
		return;
	if (x->routes_answered)
		rt->routes_awaited = false;
	if (x->routes == NULL || rt->xroutes != NULL)
		return;
	rt->xroutes = mtd_xds_routes_bind(rt->cfg, x->routes, &x->fault, why, sizeof(why));
	if (rt->xroutes == NULL)
		MTD_WARN("xds: the routes of %s no longer fit the config (%s): calls are routed by :path until a "
		         "route configuration that does arrives",
		         x->routes->r->name, why);
}

/* ---- responses ---------------------------------------------------------------- */

/* Append "name: why" to the NACK text. */
static void nack_add(char *buf, size_t *len, const char *name, const char *why)
{
	int k;

	if (*len + 8 >= NACK_TEXT_MAX)
		return;
	k = snprintf(buf + *len, NACK_TEXT_MAX - *len, "%s%s: %s", *len ? "; " : "", name, why);
	if (k > 0)
		*len += (size_t)k < NACK_TEXT_MAX - *len ? (size_t)k : NACK_TEXT_MAX - *len - 1;
}

static void log_nack(struct mtd_xds *x, int t, const char *text)
{
	int64_t now = mtd_mono_ms();
	struct xds_type *ty = &x->t[t];

	if (ty->nack_logged_ms != 0 && now - ty->nack_logged_ms < 1000) {
		ty->nacks_unlogged++;
		return;
	}
	if (ty->nacks_unlogged > 0)
		MTD_WARN("xds: NACK of %s resources from %s (%llu more since the last line): %s", type_name[t],
		         x->server.text, (unsigned long long)ty->nacks_unlogged, text);
	else
		MTD_WARN("xds: NACK of %s resources from %s: %s", type_name[t], x->server.text, text);
	ty->nack_logged_ms = now;
	ty->nacks_unlogged = 0;
}

/* A resource's name for a NACK, even when the rest does not translate;
 * false (name "(unnamed)") when none can be read: it may be any of the
 * resources asked for. */
static bool name_of(const char *url, const struct mtd_xds_any *v, char *name, size_t cap)
{
	if (mtd_xds_resource_name(url, v->value, v->len, name, cap) == 0)
		return true;
	snprintf(name, cap, "(unnamed)");
	return false;
}

/* The name a Cluster (field 1, name) or an assignment (field 1,
 * cluster_name) gives itself, read from the wire without decoding the
 * rest: the last one written, as protobuf keeps; false when there is none
 * to read or the top level does not scan (the resource is decoded then,
 * and refused). */
static bool wire_name(const struct mtd_xds_any *v, char name[MTD_XDS_NAME_MAX + 1])
{
	struct mtd_pbwire_iter it;
	struct mtd_pbwire_value f, last = {0};
	uint32_t field;
	int rc;

	mtd_pbwire_iter_init(&it, v->value, v->len);
	while ((rc = mtd_pbwire_next(&it, &field, &f)) == 1) {
		if (field != 1)
			continue;
		if (f.type != MTD_PBWIRE_LEN)
			return false;
		last = f;
	}
	if (rc != 0 || last.data == NULL || last.len > MTD_XDS_NAME_MAX || memchr(last.data, '\0', last.len) != NULL)
		return false;
	memcpy(name, last.data, last.len);
	name[last.len] = '\0';
	return true;
}

static bool same_bytes(const uint8_t *raw, size_t raw_len, const struct mtd_xds_any *v)
{
	return raw != NULL && raw_len == v->len && memcmp(raw, v->value, v->len) == 0;
}

/* Keep v's bytes as the last good resource's (none when out of memory:
 * the next resend is then decoded and compared, as before there were). */
static void raw_keep(uint8_t **raw, size_t *raw_len, const struct mtd_xds_any *v)
{
	free(*raw);
	*raw_len = v->len;
	if ((*raw = malloc(v->len ? v->len : 1)) != NULL)
		memcpy(*raw, v->value, v->len);
}

/* A copy of v's bytes, or NULL (out of memory). */
static uint8_t *bytes_dup(const struct mtd_xds_any *v)
{
	uint8_t *p = malloc(v->len ? v->len : 1);

	if (p != NULL)
		memcpy(p, v->value, v->len);
	return p;
}

/* CDS: state of the world. The clusters whose translation changed (or
 * that went) are given to their services. */
static void on_clusters(struct mtd_xds *x, const struct mtd_xds_response *r, char *nack,
                        size_t *nack_len, struct xds_stamp **st)
{
	bool *seen = calloc(x->n_cls ? x->n_cls : 1, sizeof(*seen));
	size_t n_changed = 0;
	bool eds_names = false; /* a cluster came, went or changed its EDS name */
	bool unnamed = false;   /* a resource refused whose name cannot be read */
	char why[1024], name[MTD_XDS_NAME_MAX + 1];

	if (seen == NULL) {
		nack_add(nack, nack_len, "(response)", "out of memory");
		goto out;
	}
	for (size_t i = 0; i < r->n_res; i++) {
		const struct mtd_xds_any *any = &r->res[i];
		struct mtd_xds_cluster c;

		if (!mtd_xds_any_is(any, MTD_XDS_TYPE_CLUSTER)) {
			nack_add(nack, nack_len, "(resource)", "not a Cluster");
			unnamed = true;
			continue;
		}
		bool named = wire_name(any, name);
		struct xds_cl *same = named ? find_cl(x, name) : NULL;
		if (named && same == NULL)
			continue; /* not asked for: skipped unread, as gRPC's clients do (istiod sends every cluster) */
		if (same != NULL && same->have && same_bytes(same->raw, same->raw_len, any)) {
			/* Resent as it was: what its bytes said last time. */
			if (seen[same - x->cls]) {
				nack_add(nack, nack_len, same->name, "sent twice in one response");
				continue;
			}
			seen[same - x->cls] = true;
			set_str(&same->nack, NULL);
			stamp_take(&same->stamp, st, r);
			continue;
		}
		int rc = mtd_xds_cluster_parse(any->value, any->len, &c, why, sizeof(why));
		if (rc != 0) {
			unnamed |= !name_of(MTD_XDS_TYPE_CLUSTER, any, name, sizeof(name));
			nack_add(nack, nack_len, name, rc == -ENOMEM ? "out of memory" : why);
			struct xds_cl *e = find_cl(x, name);
			if (e != NULL) {
				seen[e - x->cls] = true; /* present, refused: the last good stays */
				set_str(&e->nack, rc == -ENOMEM ? "out of memory" : why);
				if (!e->have) {
					/* No good one to keep: its services' calls stop
					 * waiting for it and fail with the refusal. */
					e->dirty = true;
					n_changed++;
				}
			}
			continue;
		}
		struct xds_cl *e = find_cl(x, c.name);
		if (e == NULL) {
			mtd_xds_cluster_clear(&c); /* not asked for: a server may send more */
			continue;
		}
		if (seen[e - x->cls]) {
			nack_add(nack, nack_len, c.name, "sent twice in one response");
			mtd_xds_cluster_clear(&c);
			continue;
		}
		seen[e - x->cls] = true;
		set_str(&e->nack, NULL);
		stamp_take(&e->stamp, st, r);
		raw_keep(&e->raw, &e->raw_len, any);
		if (e->have && mtd_xds_cluster_equal(&e->c, &c)) {
			mtd_xds_cluster_clear(&c);
			continue;
		}
		if (!e->have || strcmp(e->c.eds_name, c.eds_name) != 0)
			eds_names = true;
		mtd_xds_cluster_clear(&e->c);
		e->c = c;
		e->have = true;
		e->removed = false;
		e->gen = ++x->next_gen;
		e->dirty = true;
		n_changed++;
	}
	/* A cluster the response lacks is gone (CDS is state of the world),
	 * unless a resource refused could not be named: it may be that
	 * cluster, and the whole response is NACKed (Envoy keeps every
	 * cluster then). */
	for (size_t i = 0; i < x->n_cls && !unnamed; i++) {
		if (seen[i] || !x->cls[i].have)
			continue;
		MTD_WARN("xds: cluster %s is no longer served by %s: its services have no endpoints", x->cls[i].name,
		         x->server.text);
		mtd_xds_cluster_clear(&x->cls[i].c);
		free(x->cls[i].raw);
		x->cls[i].raw = NULL;
		x->cls[i].have = false;
		x->cls[i].removed = true;
		x->cls[i].dirty = true;
		eds_names = true;
		n_changed++;
	}
	if (n_changed > 0) {
		/* EDS names follow the clusters: subscribe before applying, so a
		 * service on a new EDS name waits for it (the table is rebuilt
		 * only when a name may have changed: 10,000 names sorted). */
		if (eds_names && retable(x, T_EDS))
			x->t[T_EDS].subscribed = false;
		queue_changed(x);
	}
out:
	free(seen);
}

/* The subscribed assignment whose last good one came as exactly these
 * bytes, or NULL (the bytes compared decide, whatever the name read). */
static struct xds_cla *same_as_last_good(struct mtd_xds *x, const struct mtd_xds_any *v)
{
	char name[MTD_XDS_NAME_MAX + 1];
	struct xds_cla *e = wire_name(v, name) ? find_cla(x, name) : NULL;

	return e != NULL && e->raw != NULL && same_bytes(e->raw, e->raw_len, v) ? e : NULL;
}

/* EDS: an assignment in the response replaces the last good one of its
 * name; a name it lacks keeps its own. One equal to the one in force
 * (the same bytes) only takes the response's stamp: its services keep
 * their snapshot. */
static void on_endpoints(struct mtd_xds *x, const struct mtd_xds_response *r, char *nack,
                         size_t *nack_len, struct xds_stamp **st)
{
	char why[1024], name[MTD_XDS_NAME_MAX + 1];

	for (size_t i = 0; i < r->n_res; i++) {
		const struct mtd_xds_any *any = &r->res[i];
		struct mtd_xds_cla *c;

		if (!mtd_xds_any_is(any, MTD_XDS_TYPE_ENDPOINT)) {
			nack_add(nack, nack_len, "(resource)", "not a ClusterLoadAssignment");
			continue;
		}
		if (wire_name(any, name) && find_cla(x, name) == NULL)
			continue; /* not asked for: skipped unread */
		struct xds_cla *same = same_as_last_good(x, any);
		if (same != NULL) {
			set_str(&same->nack, NULL);
			stamp_take(&same->stamp, st, r);
			same->resent = true;
			continue;
		}
		int rc = mtd_xds_cla_parse(any->value, any->len, &c, why, sizeof(why));
		if (rc != 0) {
			name_of(MTD_XDS_TYPE_ENDPOINT, any, name, sizeof(name));
			nack_add(nack, nack_len, name, rc == -ENOMEM ? "out of memory" : why);
			struct xds_cla *e = find_cla(x, name);
			if (e != NULL) {
				set_str(&e->nack, rc == -ENOMEM ? "out of memory" : why);
				if (e->raw == NULL)
					e->dirty = true; /* none to keep: its services hear of the refusal */
			}
			continue;
		}
		struct xds_cla *e = find_cla(x, c->name);
		if (e == NULL) {
			mtd_xds_cla_free(c);
			continue;
		}
		uint8_t *raw = bytes_dup(any);
		if (raw == NULL) {
			/* The bytes are the one form kept: the last good stays. */
			nack_add(nack, nack_len, c->name, "out of memory");
			set_str(&e->nack, "out of memory");
			mtd_xds_cla_free(c);
			continue;
		}
		set_str(&e->nack, NULL);
		stamp_take(&e->stamp, st, r);
		free(e->raw);
		e->raw = raw;
		e->raw_len = any->len;
		e->n = (uint32_t)c->n;
		e->priority = c->priority;
		e->n_skipped = c->n_skipped;
		/* A large assignment's records serve its services (translating
		 * 10,000 endpoints again would cost a fifth of the update); a
		 * small one is translated again when applied: held until then,
		 * the records of every assignment of a state-of-the-world push
		 * would all be alive at once, and their freed chunks would stay
		 * in the heap (about 640 B a cluster of 10). */
		mtd_xds_cla_free(e->fresh); /* the same name twice in one response: the last counts */
		e->fresh = NULL;
		if (c->n >= FRESH_MIN)
			e->fresh = c;
		else
			mtd_xds_cla_free(c);
		e->updates++;
		e->dirty = true;
	}
	/* The services of every cluster on these EDS names, and only those. */
	apply_dirty(x);
}

/* ---- LDS and RDS ------------------------------------------------------------ */

static void one_clear(struct xds_one *o)
{
	free(o->name);
	stamp_put(o->stamp);
	free(o->nack);
	free(o->detail);
	memset(o, 0, sizeof(*o));
}

static bool fault_same(const struct mtd_xds_fault *a, const struct mtd_xds_fault *b)
{
	const struct mtd_cfg_fault_injection *p = &a->fi, *q = &b->fi;

	return same_str(a->filter, b->filter) && p->abort == q->abort && p->abort_percent == q->abort_percent &&
	       p->abort_status == q->abort_status && p->delay == q->delay && p->delay_percent == q->delay_percent &&
	       p->delay_ms == q->delay_ms;
}

/* The running config with the services created for want (n sorted
 * cluster names) in place of those it has: a reload of the same config
 * (reload.h: one snapshot, calls in flight finish on the old one), whose
 * commit binds box's routes (carry_routes) to its services. 0, or -1 with
 * the reason in why (nothing changed). */
static int recreate(struct mtd_xds *x, struct mtd_xds_routes_box *box, const char *const *want, size_t n, char *why,
                    size_t whylen)
{
	struct mtd_control *ctl = x->ctl;
	struct mtd_cfg_errors errs = {0};
	struct mtd_cfg *cfg;
	struct mtd_reload_tx tx;

	if (ctl->draining) {
		snprintf(why, whylen, "maitred is draining: no service is created or removed");
		return -1;
	}
	int rc = mtd_cfg_with_xds_services(ctl->rt->cfg, want, n, &cfg, &errs);
	if (rc != 0) {
		snprintf(why, whylen, "the services for its clusters: %s",
		         errs.n ? errs.msgs[0] : rc == -ENOMEM ? "out of memory" : "refused");
		mtd_cfg_errors_clear(&errs);
		return -1;
	}
	mtd_cfg_errors_clear(&errs);
	struct mtd_rt_xroutes *probe = mtd_xds_routes_bind(cfg, box, &x->fault, why, whylen);
	if (probe == NULL) {
		mtd_cfg_free(cfg);
		return -1;
	}
	mtd_rt_xroutes_unref(probe);
	if (mtd_reload_prepare(ctl, cfg, &tx, why, whylen) < 0)
		return -1;
	if (box != x->routes) {
		box->refs++;
		mtd_xds_routes_box_put(x->routes);
		x->routes = box;
	}
	mtd_reload_commit(ctl, &tx);
	MTD_INFO("xds: %zu service%s created for the clusters of route configuration %s (%zu in all)", n,
	         n == 1 ? "" : "s", box->r->name, ctl->rt->cfg->n_routed);
	return 0;
}

/* The routes of box (a reference transferred) become the ones in force:
 * bound to the running config's services and published in one snapshot;
 * when they name clusters no service of the file follows, with the
 * services created for them (and those no route names any more gone).
 * 0, or -1 with the reason in why (the routes in force stay). */
static int install_routes(struct mtd_xds *x, struct mtd_xds_routes_box *box, char *why, size_t whylen)
{
	const char **want;
	size_t n_want;

	/* Before a reload for the services they create: the new runtime
	 * takes the answer with the routes (mtd_xds_carry_routes). */
	x->routes_answered = true;

	if (mtd_xds_routes_created(x->ctl->rt->cfg, box->r, &want, &n_want) != 0) {
		snprintf(why, whylen, "out of memory");
		return -1;
	}
	if (!mtd_xds_routes_created_same(x->ctl->rt->cfg, want, n_want)) {
		int rc = recreate(x, box, want, n_want, why, whylen);
		free(want);
		if (rc == 0)
			MTD_INFO("xds: %zu route%s of route configuration %s in force", box->r->n,
			         box->r->n == 1 ? "" : "s", box->r->name);
		return rc;
	}
	free(want);
	struct mtd_rt_xroutes *xr = mtd_xds_routes_bind(x->ctl->rt->cfg, box, &x->fault, why, whylen);

	if (xr == NULL)
		return -1;
	struct mtd_rt_batch *bt = mtd_control_batch_begin(x->ctl);
	if (bt == NULL) {
		mtd_rt_xroutes_unref(xr);
		snprintf(why, whylen, "out of memory");
		return -1;
	}
	mtd_runtime_batch_set_xroutes(bt, xr);
	mtd_runtime_batch_routes_answered(bt);
	mtd_control_batch_publish(x->ctl, bt);
	if (box != x->routes) {
		box->refs++;
		mtd_xds_routes_box_put(x->routes);
		x->routes = box;
	}
	MTD_INFO("xds: %zu route%s of route configuration %s in force", box->r->n, box->r->n == 1 ? "" : "s",
	         box->r->name);
	return 0;
}

/* The server answered for the listener without routes to install (see
 * `routes_answered`): calls waiting for them go on by :path. */
static void answered_without_routes(struct mtd_xds *x, const char *what)
{
	x->routes_answered = true;
	if (!x->ctl->rt->routes_awaited)
		return;
	struct mtd_rt_batch *bt = mtd_control_batch_begin(x->ctl);
	if (bt == NULL) {
		/* The calls' wait (xds.initial_wait) ends them instead. */
		MTD_WARN("xds: out of memory: calls waiting for the routes of %s wait out xds.initial_wait",
		         x->lds.name);
		return;
	}
	mtd_runtime_batch_routes_answered(bt);
	mtd_control_batch_publish(x->ctl, bt);
	MTD_INFO("xds: listener %s: %s: calls are routed by :path", x->lds.name, what);
}

/* The translated routes r (taken) of resource o: installed, or refused
 * into the NACK text. */
static void take_routes(struct mtd_xds *x, struct xds_one *o, const char *name, struct mtd_xds_routes *r, char *nack,
                        size_t *nack_len)
{
	char why[1024];
	struct mtd_xds_routes_box *box = mtd_xds_routes_box_new(r);

	if (box == NULL || install_routes(x, box, why, sizeof(why)) != 0) {
		if (box == NULL)
			snprintf(why, sizeof(why), "out of memory");
		nack_add(nack, nack_len, name, why);
		set_str(&o->nack, why);
	}
	mtd_xds_routes_box_put(box);
}

/* LDS: the one listener of xds.listener. Its connection manager names a
 * route configuration (subscribed by RDS; the routes in force stay until
 * it comes) or carries one inline. A listener the response lacks keeps
 * the routes in force. */
static void on_listener(struct mtd_xds *x, const struct mtd_xds_response *r, char *nack,
                        size_t *nack_len, struct xds_stamp **st)
{
	char why[1024], name[MTD_XDS_NAME_MAX + 1];
	bool found = false, refused = false, unnamed = false;

	for (size_t i = 0; i < r->n_res; i++) {
		const struct mtd_xds_any *any = &r->res[i];
		struct mtd_xds_listener l;

		if (!mtd_xds_any_is(any, MTD_XDS_TYPE_LISTENER)) {
			nack_add(nack, nack_len, "(resource)", "not a Listener");
			unnamed = true;
			continue;
		}
		if (!name_of(MTD_XDS_TYPE_LISTENER, any, name, sizeof(name))) {
			/* It may be the one asked for: refused, not taken as absent. */
			nack_add(nack, nack_len, name, "a Listener whose name cannot be read (it does not decode)");
			unnamed = true;
			continue;
		}
		if (x->lds.name == NULL || strcmp(name, x->lds.name) != 0)
			continue; /* not asked for */
		found = true;
		int rc = mtd_xds_listener_parse(any->value, any->len, &l, why, sizeof(why));
		if (rc != 0) {
			nack_add(nack, nack_len, name, rc == -ENOMEM ? "out of memory" : why);
			set_str(&x->lds.nack, rc == -ENOMEM ? "out of memory" : why);
			refused = true;
			continue;
		}
		size_t before = *nack_len;
		/* The new fault filter binds the routes from here on; given
		 * back if they do not bind under it. */
		bool fault_changed = !fault_same(&x->fault, &l.fault);
		struct mtd_xds_fault old = x->fault;
		x->fault = l.fault;
		l.fault = old;
		if (l.routes != NULL) {
			take_routes(x, &x->lds, name, l.routes, nack, nack_len);
			l.routes = NULL;
		} else if (fault_changed && x->routes != NULL && install_routes(x, x->routes, why, sizeof(why)) != 0) {
			nack_add(nack, nack_len, name, why);
			set_str(&x->lds.nack, why);
		}
		if (*nack_len != before) {
			old = x->fault;
			x->fault = l.fault;
			l.fault = old;
			mtd_xds_listener_clear(&l);
			refused = true;
			continue;
		}
		x->lds.have = true;
		set_str(&x->lds.nack, NULL);
		stamp_take(&x->lds.stamp, st, r);
		snprintf(why, sizeof(why), "%s%.1000s", l.rds_name ? "rds " : "inline routes",
		         l.rds_name ? l.rds_name : "");
		set_str(&x->lds.detail, why);
		if (!same_str(x->rds.name, l.rds_name)) {
			one_clear(&x->rds);
			x->rds.name = l.rds_name; /* taken */
			l.rds_name = NULL;
			x->t[T_RDS].subscribed = false;
			x->rds_resub = true;
		}
		mtd_xds_listener_clear(&l);
	}
	if (x->lds.name != NULL && ((!found && !unnamed) || refused))
		answered_without_routes(x, found ? "refused" : "absent from the server's listeners");
}

/* RDS: the route configuration the listener names. */
static void on_routes(struct mtd_xds *x, const struct mtd_xds_response *r, char *nack,
                      size_t *nack_len, struct xds_stamp **st)
{
	char why[1024], name[MTD_XDS_NAME_MAX + 1];
	bool refused = false;

	for (size_t i = 0; i < r->n_res; i++) {
		const struct mtd_xds_any *any = &r->res[i];
		struct mtd_xds_routes *routes;

		if (!mtd_xds_any_is(any, MTD_XDS_TYPE_ROUTE)) {
			nack_add(nack, nack_len, "(resource)", "not a RouteConfiguration");
			continue;
		}
		if (!name_of(MTD_XDS_TYPE_ROUTE, any, name, sizeof(name))) {
			nack_add(nack, nack_len, name,
			         "a RouteConfiguration whose name cannot be read (it does not decode)");
			continue;
		}
		if (x->rds.name == NULL || strcmp(name, x->rds.name) != 0)
			continue;
		int rc = mtd_xds_routes_parse(any->value, any->len, &routes, why, sizeof(why));
		if (rc != 0) {
			nack_add(nack, nack_len, name, rc == -ENOMEM ? "out of memory" : why);
			set_str(&x->rds.nack, rc == -ENOMEM ? "out of memory" : why);
			refused = true;
			continue;
		}
		size_t before = *nack_len, n = routes->n;
		take_routes(x, &x->rds, name, routes, nack, nack_len);
		if (*nack_len != before) {
			refused = true;
			continue;
		}
		x->rds.have = true;
		set_str(&x->rds.nack, NULL);
		stamp_take(&x->rds.stamp, st, r);
		snprintf(why, sizeof(why), "%zu route%s", n, n == 1 ? "" : "s");
		set_str(&x->rds.detail, why);
	}
	/* A route configuration the response lacks is not one the server
	 * says it has not (unlike a listener: LDS responses hold every
	 * resource asked for): calls wait on, at most xds.initial_wait. */
	if (x->rds.name != NULL && refused)
		answered_without_routes(x, "its route configuration was refused");
}

static void on_msg(struct mtd_gcli_call *call, const uint8_t *msg, size_t len, void *arg)
{
	struct mtd_xds *x = arg;
	struct mtd_xds_response resp, *r = &resp;
	char *nack;
	size_t nack_len = 0;
	int t, rc;

	(void)call;
	if ((rc = mtd_xds_response_read(msg, len, r)) != 0) {
		/* Unanswered when out of memory: the server sends again or waits. */
		if (rc == -EBADMSG)
			MTD_WARN("xds: a DiscoveryResponse from %s does not decode (%zu bytes): ignored",
			         x->server.text, len);
		return;
	}
	x->failures = 0;
	if (x->away) {
		/* A response, not a TCP connection that the server may drop at
		 * once, ends the outage. */
		MTD_INFO("xds: %s answers again", x->server.text);
		x->away = false;
	}
	for (t = 0; t < N_TYPES && strcmp(r->type_url, type_url[t]) != 0; t++)
		;
	if (t == N_TYPES) {
		MTD_WARN("xds: a response of type %.200s from %s, never asked for: ignored", r->type_url,
		         x->server.text);
		mtd_xds_response_clear(r);
		return;
	}
	nack = calloc(1, NACK_TEXT_MAX);
	if (nack == NULL) {
		mtd_xds_response_clear(r);
		return; /* unanswered: the server sends again or waits */
	}
	mtd_metrics_xds()->updates[t]++;
	struct xds_stamp *st = NULL;
	if (r->too_many > 0) {
		char why[96];
		snprintf(why, sizeof(why), "%zu resources, more than %u in one response: none read", r->too_many,
		         MTD_XDS_MAX_RESOURCES);
		nack_add(nack, &nack_len, "(response)", why);
	} else if (t == T_CDS)
		on_clusters(x, r, nack, &nack_len, &st);
	else if (t == T_EDS)
		on_endpoints(x, r, nack, &nack_len, &st);
	else if (t == T_LDS)
		on_listener(x, r, nack, &nack_len, &st);
	else
		on_routes(x, r, nack, &nack_len, &st);
	stamp_put(st); /* the resources that came hold their own */
	set_str(&x->t[t].nonce, r->nonce);
	if (nack_len == 0) {
		set_str(&x->t[t].version, r->version_info);
		set_str(&x->t[t].nack, NULL);
		mtd_metrics_xds()->acks++;
		send_request(x, t, NULL);
	} else {
		set_str(&x->t[t].nack, nack);
		mtd_metrics_xds()->nacks++;
		log_nack(x, t, nack);
		send_request(x, t, nack);
	}
	/* New EDS names (a cluster came or changed its service_name). */
	if (t == T_CDS && !x->t[T_EDS].subscribed)
		send_request(x, T_EDS, NULL);
	/* The listener named another route configuration. */
	if (t == T_LDS && x->rds_resub) {
		x->rds_resub = false;
		send_request(x, T_RDS, NULL);
	}
	free(nack);
	mtd_xds_response_clear(r);
}

/* ---- the connection ----------------------------------------------------------- */

static void stream_lost(struct mtd_xds *x, const char *why)
{
	if (x->down_why == NULL || strcmp(x->down_why, why) != 0 || x->failures == 0)
		MTD_WARN("xds: %s: %s; the last good resources stay in force", x->server.text, why);
	set_str(&x->down_why, why);
	x->away = true;
	mtd_gcli_free(x->conn); /* cancels the call without a callback */
	x->conn = NULL;
	x->ads = NULL;
	mtd_metrics_xds()->connected = false;
	/* Jittered exponential backoff: the first retry within 1 s. */
	unsigned k = x->failures < 5 ? x->failures : 5;
	int64_t cap = (int64_t)BACKOFF_FIRST_MS << k;
	if (cap > BACKOFF_MAX_MS)
		cap = BACKOFF_MAX_MS;
	int64_t ms = cap / 2 + (int64_t)(random() % (cap / 2 + 1));
	x->failures++;
	struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
	if (evtimer_add(x->retry, &tv) != 0)
		MTD_ERROR("xds: cannot arm the retry timer: no reconnection");
}

static void on_close(struct mtd_gcli_call *call, int status, const char *message, void *arg)
{
	struct mtd_xds *x = arg;
	char why[512];

	(void)call;
	x->ads = NULL; /* freed by gclient when this returns */
	snprintf(why, sizeof(why), "the ADS stream ended: status %d%s%.400s", status, message[0] ? ", " : "", message);
	stream_lost(x, why);
}

static void on_down(struct mtd_gcli *c, const char *reason, void *arg)
{
	struct mtd_xds *x = arg;

	(void)c;
	stream_lost(x, reason);
}

static void on_up(struct mtd_gcli *c, void *arg)
{
	(void)c;
	(void)arg;
	mtd_metrics_xds()->connected = true;
}

static const struct mtd_gcli_cbs conn_cbs = {on_up, on_down};
static const struct mtd_gcli_call_cbs call_cbs = {on_msg, on_close};

static void connect_now(struct mtd_xds *x)
{
	struct ssl_st *ssl = NULL;

	if (x->ssl_ctx != NULL) {
		ssl = mtd_tls_client_ssl_new(x->ssl_ctx,
		                             x->tls_cfg->server_name ? x->tls_cfg->server_name : x->server.host);
		if (ssl == NULL) {
			stream_lost(x, "TLS: out of memory");
			return;
		}
	}
	x->conn = mtd_gcli_new(x->base, (const struct sockaddr *)&x->server.sa, x->server.salen, x->server.text, ssl,
	                       CONNECT_TIMEOUT_MS, KEEPALIVE_MS, &conn_cbs, x);
	if (x->conn == NULL) {
		stream_lost(x, "cannot create a connection");
		return;
	}
	x->ads = mtd_gcli_call_start(x->conn, ADS_PATH, NULL, &call_cbs, x);
	if (x->ads == NULL) {
		stream_lost(x, "cannot start the ADS stream (out of memory)");
		return;
	}
	x->node_sent = false;
	for (int t = 0; t < N_TYPES; t++) {
		x->t[t].subscribed = false;
		/* A nonce belongs to its stream; the versions carry over. */
		set_str(&x->t[t].nonce, NULL);
	}
	if (x->n_cls > 0)
		send_request(x, T_CDS, NULL);
	if (x->n_clas > 0)
		send_request(x, T_EDS, NULL);
	send_request(x, T_LDS, NULL); /* each: when it has a name */
	send_request(x, T_RDS, NULL);
}

static void retry_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	connect_now(arg);
}

/* ---- lifetime ----------------------------------------------------------------- */

static bool same_text(const char *a, const char *b)
{
	return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

static bool same_tls(const struct mtd_cfg_tls *a, const struct mtd_cfg_tls *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	return same_text(a->ca_file, b->ca_file) && same_text(a->cert_file, b->cert_file) &&
	       same_text(a->key_file, b->key_file) && same_text(a->server_name, b->server_name);
}

static bool same_config(const struct mtd_xds *x, const struct mtd_cfg_xds *c)
{
	return x != NULL && c != NULL && strcmp(x->server.text, c->server.text) == 0 &&
	       same_text(x->node_id, c->node_id) && same_text(x->zone, c->zone) && same_tls(x->tls_cfg, c->tls) &&
	       same_text(x->lds.name, c->listener);
}

static struct mtd_cfg_tls *tls_copy(const struct mtd_cfg_tls *t)
{
	struct mtd_cfg_tls *c = calloc(1, sizeof(*c));

	if (c == NULL)
		return NULL;
	c->ca_file = t->ca_file ? strdup(t->ca_file) : NULL;
	c->cert_file = t->cert_file ? strdup(t->cert_file) : NULL;
	c->key_file = t->key_file ? strdup(t->key_file) : NULL;
	c->server_name = t->server_name ? strdup(t->server_name) : NULL;
	if ((t->ca_file && !c->ca_file) || (t->cert_file && !c->cert_file) || (t->key_file && !c->key_file) ||
	    (t->server_name && !c->server_name)) {
		free(c->ca_file);
		free(c->cert_file);
		free(c->key_file);
		free(c->server_name);
		free(c);
		return NULL;
	}
	return c;
}

static void tls_copy_free(struct mtd_cfg_tls *c)
{
	if (c == NULL)
		return;
	free(c->ca_file);
	free(c->cert_file);
	free(c->key_file);
	free(c->server_name);
	free(c);
}

int mtd_xds_prepare(struct mtd_control *ctl, const struct mtd_cfg *cfg, struct mtd_xds **next, char *err, size_t errlen)
{
	const struct mtd_cfg_xds *c = cfg->xds;
	struct mtd_xds *x;

	*next = NULL;
	if (c == NULL || same_config(ctl->xds, c))
		return 0;
	x = calloc(1, sizeof(*x));
	if (x == NULL)
		goto oom;
	x->ctl = ctl;
	x->base = mtd_control_base(ctl);
	x->server = c->server;
	x->server.text = strdup(c->server.text);
	x->server.host = strdup(c->server.host);
	x->node_id = strdup(c->node_id);
	x->zone = c->zone != NULL ? strdup(c->zone) : NULL;
	x->lds.name = c->listener != NULL ? strdup(c->listener) : NULL;
	x->retry = evtimer_new(x->base, retry_cb, x);
	x->sync_ev = event_new(x->base, -1, 0, sync_cb, x);
	x->pending.ev = evtimer_new(x->base, rebuild_slice, x);
	x->pending.late = evtimer_new(x->base, rebuild_slice, x);
	/* After every response already on the socket (a base without the
	 * control loop's priorities, in a unit test, runs it as any event). */
	if (x->pending.ev != NULL)
		(void)event_priority_set(x->pending.ev, MTD_CONTROL_PRIO_BACKGROUND);
	rebuild_limits(&x->pending);
	if (x->server.text == NULL || x->server.host == NULL || x->node_id == NULL || (c->zone && x->zone == NULL) ||
	    (c->listener && x->lds.name == NULL) || x->retry == NULL || x->sync_ev == NULL || x->pending.ev == NULL ||
	    x->pending.late == NULL)
		goto oom;
	if (c->tls != NULL) {
		x->tls_cfg = tls_copy(c->tls);
		if (x->tls_cfg == NULL)
			goto oom;
		char why[256];
		x->ssl_ctx = mtd_tls_client_ctx_new(c->tls, why, sizeof(why));
		if (x->ssl_ctx == NULL) {
			snprintf(err, errlen, "xds.tls: %s", why);
			mtd_xds_free(x);
			return -1;
		}
	}
	*next = x;
	return 0;
oom:
	snprintf(err, errlen, "xds: out of memory");
	mtd_xds_free(x);
	return -1;
}

void mtd_xds_commit(struct mtd_control *ctl, struct mtd_xds *next)
{
	if (next == NULL) {
		if (ctl->rt->cfg->xds == NULL && ctl->xds != NULL) {
			MTD_INFO("xds: no xds block any more: the stream to %s closes", ctl->xds->server.text);
			mtd_xds_free(ctl->xds);
			ctl->xds = NULL;
		}
		return;
	}
	if (ctl->xds != NULL)
		MTD_INFO("xds: the xds block changed: the stream to %s closes, one to %s opens", ctl->xds->server.text,
		         next->server.text);
	/* The routes in force (carried into the new runtime) stay the new
	 * client's until its stream brings the listener's own. */
	if (ctl->xds != NULL && same_str(ctl->xds->lds.name, next->lds.name))
		next->routes_answered = ctl->xds->routes_answered;
	if (ctl->xds != NULL && ctl->xds->routes != NULL && same_str(ctl->xds->lds.name, next->lds.name)) {
		ctl->xds->routes->refs++;
		next->routes = ctl->xds->routes;
		next->fault = ctl->xds->fault; /* taken, with the routes it binds */
		ctl->xds->fault = (struct mtd_xds_fault){0};
	}
	mtd_xds_free(ctl->xds);
	ctl->xds = next;
	MTD_INFO("xds: management server %s%s, node %s%s%s", next->server.text, next->ssl_ctx ? " (TLS)" : " (h2c)",
	         next->node_id, next->zone ? ", zone " : "", next->zone ? next->zone : "");
	connect_now(next);
}

void mtd_xds_free(struct mtd_xds *x)
{
	if (x == NULL)
		return;
	mtd_gcli_free(x->conn);
	if (x->retry)
		event_free(x->retry);
	if (x->sync_ev)
		event_free(x->sync_ev);
	if (x->pending.ev)
		event_free(x->pending.ev);
	if (x->pending.late)
		event_free(x->pending.late);
	if (x->ssl_ctx)
		mtd_tls_ctx_free(x->ssl_ctx);
	tls_copy_free(x->tls_cfg);
	free(x->server.text);
	free(x->server.host);
	free(x->node_id);
	free(x->zone);
	free(x->down_why);
	for (int t = 0; t < N_TYPES; t++) {
		free(x->t[t].version);
		free(x->t[t].nonce);
		free(x->t[t].nack);
	}
	for (size_t i = 0; i < x->n_cls; i++)
		cl_clear(&x->cls[i]);
	free(x->cls);
	for (size_t i = 0; i < x->n_clas; i++)
		cla_clear(&x->clas[i]);
	free(x->clas);
	one_clear(&x->lds);
	one_clear(&x->rds);
	mtd_xds_routes_box_put(x->routes);
	free(x->fault.filter);
	/* Bindings belong to their sources, stopped before (sources.h). */
	for (size_t i = 0; i < x->n_binds; i++) {
		x->binds[i]->x = NULL;
		x->binds[i]->pending_at = 0;
	}
	free(x->binds);
	free(x->pending.q);
	if (x->ctl->xds == x) {
		mtd_metrics_xds()->connected = false;
		mtd_metrics_xds()->rebuilds_pending = 0;
	}
	free(x);
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
	    (b->cluster = strdup(cfg->xds_cluster)) == NULL) {
		free(b);
		return -ENOMEM;
	}
	b->x = x;
	b->service = service;
	b->svc_name = cfg->name;
	x->binds[x->n_binds++] = b;
	x->binds_sorted = false;
	/* Given what the client has at mtd_xds_sources_started, with every
	 * other service started with it (one snapshot). Until then it keeps
	 * what a reload carried over, or names what it waits for
	 * (mtd_runtime_waiting, set when its snapshot was built). */
	schedule_sync(x);
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
		schedule_sync(x);
	}
	free(b->cluster);
	free(b);
}

const struct mtd_disc_source_ops mtd_xds_source_ops = {
        .name = "xds",
        .start = xds_start,
        .stop = xds_stop,
};

/* ---- /config_dump ----------------------------------------------------------------- */

static void dump_opt(struct mtd_json *j, const char *key, const char *v)
{
	mtd_json_key(j, key);
	if (v != NULL)
		mtd_json_str(j, v);
	else
		mtd_json_null(j);
}

/* LDS or RDS: its one resource. */
static void dump_one(struct mtd_json *j, const struct mtd_xds *x, int t)
{
	const struct xds_one *o = t == T_LDS ? &x->lds : &x->rds;

	mtd_json_key(j, t == T_LDS ? "listeners" : "routes");
	mtd_json_obj_begin(j);
	mtd_json_key(j, "type_url");
	mtd_json_str(j, type_url[t]);
	dump_opt(j, "version", x->t[t].version);
	dump_opt(j, "nonce", x->t[t].nonce);
	dump_opt(j, "last_nack", x->t[t].nack);
	mtd_json_key(j, "resources");
	mtd_json_arr_begin(j);
	if (o->name != NULL) {
		mtd_json_obj_begin(j);
		dump_opt(j, "name", o->name);
		mtd_json_key(j, "state");
		mtd_json_str(j, o->have ? "ACKED" : o->nack ? "NACKED" : "REQUESTED");
		dump_opt(j, "detail", o->detail);
		dump_opt(j, "version", o->stamp ? o->stamp->version : NULL);
		dump_opt(j, "nonce", o->stamp ? o->stamp->nonce : NULL);
		dump_opt(j, "last_nack", o->nack);
		mtd_json_obj_end(j);
	}
	mtd_json_arr_end(j);
	mtd_json_obj_end(j);
}

void mtd_xds_dump(const struct mtd_xds *x, struct mtd_json *j)
{
	if (x == NULL) {
		mtd_json_null(j);
		return;
	}
	mtd_json_obj_begin(j);
	dump_opt(j, "server", x->server.text);
	mtd_json_key(j, "tls");
	mtd_json_bool(j, x->ssl_ctx != NULL);
	dump_opt(j, "node_id", x->node_id);
	dump_opt(j, "zone", x->zone);
	mtd_json_key(j, "connected");
	mtd_json_bool(j, x->ads != NULL && mtd_metrics_xds()->connected);
	dump_opt(j, "last_disconnect", x->down_why);
	mtd_json_key(j, "rebuilds_pending");
	mtd_json_u64(j, x->pending.n);
	for (int t = 0; t < N_TYPES; t++) {
		if (t == T_LDS || t == T_RDS) {
			dump_one(j, x, t);
			continue;
		}
		mtd_json_key(j, t == T_CDS ? "clusters" : "endpoints");
		mtd_json_obj_begin(j);
		mtd_json_key(j, "type_url");
		mtd_json_str(j, type_url[t]);
		dump_opt(j, "version", x->t[t].version);
		dump_opt(j, "nonce", x->t[t].nonce);
		dump_opt(j, "last_nack", x->t[t].nack);
		mtd_json_key(j, "resources");
		mtd_json_arr_begin(j);
		size_t n = t == T_CDS ? x->n_cls : x->n_clas;
		for (size_t i = 0; i < n; i++) {
			mtd_json_obj_begin(j);
			if (t == T_CDS) {
				const struct xds_cl *e = &x->cls[i];
				dump_opt(j, "name", e->name);
				mtd_json_key(j, "state");
				mtd_json_str(j, e->have ? "ACKED" : e->nack ? "NACKED" : "REQUESTED");
				if (e->have) {
					dump_opt(j, "eds_service_name", e->c.eds_name);
					dump_opt(j, "lb_policy", e->c.lb.ops ? e->c.lb.ops->name : NULL);
				}
				dump_opt(j, "version", e->stamp ? e->stamp->version : NULL);
				dump_opt(j, "nonce", e->stamp ? e->stamp->nonce : NULL);
				dump_opt(j, "last_nack", e->nack);
			} else {
				const struct xds_cla *e = &x->clas[i];
				dump_opt(j, "name", e->name);
				mtd_json_key(j, "state");
				mtd_json_str(j, e->raw ? "ACKED" : e->nack ? "NACKED" : "REQUESTED");
				if (e->raw) {
					mtd_json_key(j, "endpoints");
					mtd_json_u64(j, e->n);
					mtd_json_key(j, "priority");
					mtd_json_u64(j, e->priority);
					mtd_json_key(j, "not_picked");
					mtd_json_u64(j, e->n_skipped);
				}
				mtd_json_key(j, "updates");
				mtd_json_u64(j, e->updates);
				dump_opt(j, "version", e->stamp ? e->stamp->version : NULL);
				dump_opt(j, "nonce", e->stamp ? e->stamp->nonce : NULL);
				dump_opt(j, "last_nack", e->nack);
			}
			mtd_json_obj_end(j);
		}
		mtd_json_arr_end(j);
		mtd_json_obj_end(j);
	}
	mtd_json_obj_end(j);
}
