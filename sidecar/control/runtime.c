/* Runtime snapshots: the validated config plus what the data
 * plane needs to serve it (route table, endpoint identities with their
 * stats, pickers, TLS contexts). Built on the control thread, published to
 * every worker, read by workers without locks, reclaimed by reference
 * counts (sidecar.h "runtime snapshots", HACKING.md "Snapshots").
 *
 * A change of one service's endpoints (mtd_control_set_endpoints) builds a
 * new snapshot of that service only; the new runtime shares every other
 * service's snapshot with the old one. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "sidecar/control/control.h"
#include "sidecar/control/etcd.h"
#include "core/addr.h"
#include "core/clock.h"
#include "discovery/discovery.h"
#include "health/outlier.h"
#include "identity/identity.h"
#include "lb/lb.h"
#include "route/route.h"
#include "sidecar/control/control-t.h"
#include "sidecar/control/runtime.h"
#include "sidecar/io/transport.h"
#include "sidecar/ops/metrics.h"

/* ---- freeing (control thread) ------------------------------------------ */

static void attrs_free(struct mtd_rt_epattr *a, size_t n)
{
	if (!a)
		return;
	for (size_t i = 0; i < n; i++) {
		for (size_t m = 0; m < a[i].a.meta.n; m++) {
			free((char *)a[i].a.meta.kv[m].key);
			free((char *)a[i].a.meta.kv[m].value);
		}
		free((struct mtd_lb_meta *)a[i].a.meta.kv);
	}
	free(a);
}

static void cfgbox_unref(struct mtd_cfg_box *b)
{
	if (b && mtd_ref_put(&b->ref)) {
		mtd_route_table_free(b->routes);
		mtd_cfg_free(b->cfg);
		free(b);
	}
}

static void bucket_unref(struct mtd_rt_bucket *b)
{
	if (b && mtd_ref_put(&b->ref))
		free(b);
}

void mtd_rt_over_unref(struct mtd_rt_over *o)
{
	if (o == NULL || !mtd_ref_put(&o->ref))
		return;
	if (o->owns & MTD_RT_OVER_OWNS_TLS) {
		free(o->svc.tls->ca_file);
		free(o->svc.tls->cert_file);
		free(o->svc.tls->key_file);
		free(o->svc.tls->server_name);
		free(o->svc.tls->server_identity);
		free(o->svc.tls);
	}
	if (o->owns & MTD_RT_OVER_OWNS_METHODS)
		free(o->svc.methods);
	if (o->owns & MTD_RT_OVER_OWNS_LOCAL)
		free(o->svc.local);
	free(o);
}

static void service_free(struct mtd_rt_service *s)
{
	if (s->methods) {
		for (size_t i = 0; i < s->cfg->n_methods; i++) {
			bucket_unref(s->methods[i].limit);
			mtd_lb_picker_free(s->methods[i].picker);
			mtd_outlier_set_free(s->methods[i].outliers);
			mtd_lb_layer_free(s->methods[i].layer);
		}
		free(s->methods);
	}
	mtd_lb_picker_free(s->picker);
	mtd_lb_layer_free(s->layer);
	if (s->ssl_ctx)
		mtd_tls_ctx_free(s->ssl_ctx);
	for (size_t i = 0; i < s->n_eps; i++)
		if (s->eps[i] && mtd_ref_put(&s->eps[i]->ref))
			mtd_endpoint_free(s->eps[i]);
	attrs_free(s->attrs, s->n_eps);
	for (size_t i = 0; i < s->n_zones; i++)
		free(s->zones[i]);
	free(s->zones);
	if (s->budget_box && mtd_ref_put(&s->budget_box->ref))
		free(s->budget_box);
	if (s->load && mtd_ref_put(&s->load->ref))
		free(s->load);
	mtd_outlier_set_free(s->outliers);
	bucket_unref(s->limit);
	free(s->hc);
	free(s->lb_eps);
	free(s->eps);
	free(s->unavailable);
	mtd_rt_over_unref(s->over);
	cfgbox_unref(s->cfgbox);
	free(s);
}

void mtd_rt_insocks_unref(struct mtd_rt_insocks *k)
{
	if (!k || !mtd_ref_put(&k->ref))
		return;
	for (unsigned i = 0; i < k->n; i++) {
		int fd = atomic_exchange_explicit(&k->fd[i], -1, memory_order_relaxed);
		if (fd >= 0)
			close(fd); /* no worker took it */
	}
	free(k);
}

void mtd_rt_inset_unref(struct mtd_rt_inset *set)
{
	if (!set || !mtd_ref_put(&set->ref))
		return;
	for (size_t i = 0; i < set->n; i++) {
		if (set->e[i].ctx)
			mtd_tls_ctx_free(set->e[i].ctx);
		mtd_rt_insocks_unref(set->e[i].socks);
	}
	free(set);
}

void mtd_rt_xroutes_unref(struct mtd_rt_xroutes *xr)
{
	if (xr == NULL || !mtd_ref_put(&xr->ref))
		return;
	for (size_t i = 0; i < xr->n; i++)
		free(xr->r[i].targets);
	free(xr->r);
	free(xr->rules);
	if (xr->owner_free != NULL)
		xr->owner_free(xr->owner);
	free(xr->name);
	free(xr);
}

static void runtime_free(struct mtd_runtime *rt)
{
	mtd_rt_inset_unref(rt->inbound);
	mtd_rt_xroutes_unref(rt->xroutes);
	if (rt->services) {
		for (size_t i = 0; i < rt->cfg->n_services; i++)
			if (rt->services[i] && mtd_ref_put(&rt->services[i]->ref))
				service_free(rt->services[i]);
		free(rt->services);
	}
	cfgbox_unref(rt->cfgbox); /* rt->routes is the box's */
	free(rt);
}

static struct mtd_control *the_ctl; /* one control loop per process (mtd_runtime_bind) */

void mtd_runtime_bind(struct mtd_control *ctl)
{
	the_ctl = ctl;
}

void mtd_runtime_unref(struct mtd_runtime *rt)
{
	if (rt && mtd_ref_put(&rt->ref))
		mtd_mbox_post(&rt->ctl->reclaim_rts, &rt->reclaim); /* freed by the control thread */
}

void mtd_rt_service_unref(struct mtd_rt_service *s)
{
	if (s && mtd_ref_put(&s->ref))
		mtd_mbox_post(&the_ctl->reclaim_svcs, &s->reclaim);
}

void mtd_endpoint_unref(struct mtd_endpoint *ep)
{
	if (ep && mtd_ref_put(&ep->ref))
		mtd_mbox_post(&the_ctl->reclaim_eps, &ep->reclaim);
}

void mtd_runtime_reclaim(struct mtd_control *ctl)
{
	/* Freeing a runtime lets go of its services, a service of its
	 * endpoints: again until all three are empty. */
	for (;;) {
		struct mtd_mbox_link *rts = mtd_mbox_take(&ctl->reclaim_rts);
		struct mtd_mbox_link *svcs = mtd_mbox_take(&ctl->reclaim_svcs);
		struct mtd_mbox_link *eps = mtd_mbox_take(&ctl->reclaim_eps);
		if (!rts && !svcs && !eps)
			return;
		while (rts) {
			struct mtd_runtime *rt = MTD_MBOX_ITEM(rts, struct mtd_runtime, reclaim);
			rts = rts->next;
			runtime_free(rt);
			ctl->heap_freed_ms = mtd_mono_ms();
		}
		while (svcs) {
			struct mtd_rt_service *s = MTD_MBOX_ITEM(svcs, struct mtd_rt_service, reclaim);
			svcs = svcs->next;
			service_free(s);
		}
		while (eps) {
			struct mtd_endpoint *ep = MTD_MBOX_ITEM(eps, struct mtd_endpoint, reclaim);
			eps = eps->next;
			mtd_endpoint_free(ep);
		}
	}
}

/* ---- building ------------------------------------------------------------ */

/* d's zone and metadata are those of the endpoint whose lb_eps entry is le
 * and attributes a (NULL: none). */
static bool attr_same(const struct mtd_lb_endpoint *le, const struct mtd_rt_epattr *a,
                      const struct mtd_disc_endpoint *d)
{
	const char *az = le->attrs ? le->attrs->zone : NULL, *dz = d->zone && d->zone[0] ? d->zone : NULL;
	if ((az == NULL) != (dz == NULL) || (az && strcmp(az, dz) != 0))
		return false;
	size_t an = a ? a->a.meta.n : 0;
	if (an != d->n_metadata)
		return false;
	for (size_t i = 0; i < an; i++)
		if (strcmp(a->a.meta.kv[i].key, d->metadata[i].key) != 0 ||
		    strcmp(a->a.meta.kv[i].value, d->metadata[i].value) != 0)
			return false;
	return true;
}

/* How many of a snapshot's zones, the newest first, an endpoint's zone is
 * looked for among before it gets a copy of its own: a set lists the
 * endpoints of a zone together (xDS by locality, a registry by instance
 * group), so a few find nearly every repeat, and the search stays bounded
 * whatever the number of zones (a zone further back is merely copied
 * again). */
#define ZONE_LOOKBACK 8

/* zone's record among s->zones (cap: the array's size), made if none of
 * the last ZONE_LOOKBACK is it; NULL when out of memory. */
static const struct mtd_lb_attrs *zone_intern(struct mtd_rt_service *s, size_t *cap, const char *zone)
{
	for (size_t k = s->n_zones; k > 0 && s->n_zones - k < ZONE_LOOKBACK; k--)
		if (strcmp(s->zones[k - 1]->zone, zone) == 0)
			return s->zones[k - 1];
	if (s->n_zones == *cap) {
		size_t nc = *cap ? *cap * 2 : 1;
		struct mtd_lb_attrs **z = realloc(s->zones, nc * sizeof(*z));
		if (!z)
			return NULL;
		s->zones = z;
		*cap = nc;
	}
	size_t len = strlen(zone) + 1;
	struct mtd_lb_attrs *rec = calloc(1, sizeof(*rec) + len);
	if (!rec)
		return NULL;
	rec->zone = memcpy(rec + 1, zone, len);
	s->zones[s->n_zones++] = rec;
	return rec;
}

static int attr_copy(struct mtd_rt_epattr *a, const struct mtd_disc_endpoint *d)
{
	if (d->n_metadata == 0)
		return 0;
	struct mtd_lb_meta *kv = calloc(d->n_metadata, sizeof(*kv));
	if (!kv)
		return -ENOMEM;
	a->a.meta.kv = kv;
	for (size_t i = 0; i < d->n_metadata; i++) {
		a->a.meta.n = i + 1;
		kv[i].key = strdup(d->metadata[i].key);
		kv[i].value = strdup(d->metadata[i].value);
		if (!kv[i].key || !kv[i].value)
			return -ENOMEM;
	}
	return 0;
}

/* The host name a static endpoint keyed key (its address as written) was
 * written with, or NULL: the name whose addresses the resolver gives
 * (dns.c) is each one's SNI and certificate name, as it is for the
 * address getaddrinfo gave at load (static_set's hosts). */
static const char *static_host(const struct mtd_cfg_service *cfg, const char *key)
{
	if (cfg->local->source != MTD_CFG_SOURCE_STATIC || !key)
		return NULL;
	for (size_t i = 0; i < cfg->local->n_endpoints; i++)
		if (strcmp(cfg->local->endpoints[i].addr.text, key) == 0)
			return cfg->local->endpoints[i].addr.host;
	return NULL;
}

/* The routing layer is built only where an option asks for it, so a
 * service without them picks exactly as it would without a layer (a split
 * needs one). */
static bool layer_wanted(const struct mtd_lb_layer_config *lc)
{
	return lc->subset.size > 0 || (lc->zone && lc->locality != MTD_LB_LOCALITY_OFF) || lc->metadata_key ||
	       lc->split;
}

/* rate_limit's bucket: was's when it has the same figures (a
 * reload or an endpoint change keeps the tokens spent: no new burst),
 * else a new one with the new figures holding what was has left (at most
 * the new burst: new figures mint nothing either), or a full one when
 * there was none. NULL when rl is not set, or out of memory (*oom). */
static struct mtd_rt_bucket *bucket_for(const struct mtd_cfg_rate_limit *rl, struct mtd_rt_bucket *was, bool *oom)
{
	if (!rl->set)
		return NULL;
	if (was && was->b.rate == rl->per_second && was->b.burst == rl->burst) {
		mtd_ref_get(&was->ref);
		return was;
	}
	struct mtd_rt_bucket *b = calloc(1, sizeof(*b));
	if (!b) {
		*oom = true;
		return NULL;
	}
	mtd_ref_init(&b->ref);
	if (was) /* new figures: the tokens left, no new burst */
		mtd_limit_bucket_init_from(&b->b, rl->per_second, rl->burst, &was->b, mtd_now_ns());
	else
		mtd_limit_bucket_init(&b->b, rl->per_second, rl->burst, mtd_now_ns());
	return b;
}

static bool same_file(const char *a, const char *b)
{
	return a == b || (a && b && strcmp(a, b) == 0);
}

/* The same TLS files and server name (a service's client context, an
 * etcd source's connection settings). */
static bool same_tls(const struct mtd_cfg_tls *a, const struct mtd_cfg_tls *b)
{
	if ((a == NULL) != (b == NULL))
		return false;
	return !a || (same_file(a->ca_file, b->ca_file) && same_file(a->server_name, b->server_name) &&
	              same_file(a->cert_file, b->cert_file) && same_file(a->key_file, b->key_file));
}

/* Two services' upstream TLS settings are one policy (runtime-t.h
 * tls_gen): both cleartext, or the same files and server name, identity
 * rule and allowed_identities. By value: files whose content changed
 * under the same names are the same policy, whether certwatch or a reload
 * read them again. */
static bool tls_policy_same(const struct mtd_cfg_tls *a, const struct mtd_cfg_tls *b)
{
	if (!same_tls(a, b))
		return false;
	if (!a)
		return true;
	if (a->n_allowed_identities != b->n_allowed_identities)
		return false;
	for (size_t i = 0; i < a->n_allowed_identities; i++)
		if (strcmp(a->allowed_identities[i], b->allowed_identities[i]) != 0)
			return false;
	return same_file(a->server_identity, b->server_identity) &&
	       a->server_identity_registry == b->server_identity_registry;
}

/* A new TLS policy generation: unique in the process (control thread;
 * atomic for tests that build snapshots elsewhere). */
static uint64_t tls_gen_next(void)
{
	static _Atomic uint64_t last;
	return atomic_fetch_add_explicit(&last, 1, memory_order_relaxed) + 1;
}

/* A TLS context already built for an earlier service with the same files:
 * contexts differ only by them (the server name is set per connection),
 * and each costs its CA store (860 KiB for the system bundle). */
static struct ssl_ctx_st *shared_ctx(struct mtd_rt_service *const *built, size_t n, const struct mtd_cfg_tls *tls)
{
	for (size_t i = 0; i < n; i++) {
		const struct mtd_cfg_tls *t = built[i]->cfg->tls;
		/* The server identity check is the context's too (transport.c),
		 * and whether it replaces the name check. */
		if (built[i]->ssl_ctx && t && same_file(t->ca_file, tls->ca_file) &&
		    same_file(t->cert_file, tls->cert_file) && same_file(t->key_file, tls->key_file) &&
		    same_file(t->server_identity, tls->server_identity) &&
		    t->server_identity_registry == tls->server_identity_registry &&
		    (t->server_name == NULL) == (tls->server_name == NULL))
			return built[i]->ssl_ctx;
	}
	return NULL;
}

/* A group split.guard had cut in was that is not cut in now: its split
 * changed (weights, guard or metadata_key) or went away, so it takes calls again. Said
 * in the log, as the cut was. */
static void log_readmitted(const char *svc, const char *method, const struct mtd_lb_layer *was,
                           const struct mtd_lb_layer *now)
{
	struct mtd_lb_split_group g, h;
	for (size_t i = 0; was && i < mtd_lb_layer_split_groups(was); i++) {
		if (!mtd_lb_layer_split_group(was, i, &g) || g.cut_ms == 0)
			continue;
		bool still = false;
		for (size_t k = 0; now && k < mtd_lb_layer_split_groups(now) && !still; k++)
			still = mtd_lb_layer_split_group(now, k, &h) && strcmp(h.value, g.value) == 0 && h.cut_ms != 0;
		if (!still)
			MTD_WARN("service %s%s%s: split.guard's cut of %s lifted: the split changed, the group takes "
			         "calls again",
			         svc, method[0] == '*' ? "" : ", method ", method[0] == '*' ? "" : method, g.value);
	}
}

/* The health state of snapshot s (built over its endpoints): outlier
 * ejection sets (outlier_detection; one per listed method when
 * method_scoped), carried over from prev's for endpoints that stay
 * (ejections included: the health filter runs before the rule, as Ribbon's server-list filter does), and the
 * unhealthy bitmap of active checks, from the identities' flags. */
static int health_init(struct mtd_rt_service *s, const struct mtd_rt_service *prev, int64_t now_ms)
{
	const struct mtd_cfg_service *cfg = s->cfg;
	if (s->n_eps == 0)
		return 0;
	if (cfg->local->health_check.enabled) {
		s->hc = calloc(1, sizeof(*s->hc) + (s->n_eps + 63) / 64 * sizeof(s->hc->down_bits[0]));
		if (!s->hc)
			return -1;
		for (size_t i = 0; i < s->n_eps; i++)
			if (s->eps[i]->hc_down) {
				atomic_fetch_or(&s->hc->down_bits[i / 64], 1ull << (i % 64));
				atomic_fetch_add(&s->hc->n_down, 1);
			}
	}
	if (!cfg->outlier.enabled)
		return 0;
	const char **ids = calloc(s->n_eps, sizeof(*ids));
	if (!ids)
		return -1;
	for (size_t i = 0; i < s->n_eps; i++)
		ids[i] = s->lb_eps[i].id;
	int rc = 0;
	s->outliers = mtd_outlier_set_new(&cfg->outlier, ids, s->n_eps, prev ? prev->outliers : NULL, now_ms);
	if (!s->outliers)
		rc = -1;
	for (size_t m = 0; rc == 0 && cfg->outlier_method_scoped && m < cfg->n_methods; m++) {
		const struct mtd_outlier_set *was = NULL;
		for (size_t k = 0; prev && k < prev->cfg->n_methods; k++)
			if (strcmp(prev->cfg->methods[k].name, cfg->methods[m].name) == 0)
				was = prev->methods[k].outliers;
		s->methods[m].outliers = mtd_outlier_set_new(&cfg->outlier, ids, s->n_eps, was, now_ms);
		if (!s->methods[m].outliers)
			rc = -1;
	}
	free(ids);
	return rc;
}

/* What a build says of its source's first answer (the snapshot's
 * `awaiting`, runtime-t.h). */
enum rt_await {
	AWAIT_AS_PREV = 0, /* not a source's report: prev's (none: answered) */
	AWAIT_ANSWERED,    /* a set or an error came: calls no longer wait */
	AWAIT_WAITING,     /* the source has not answered yet */
};

/* What a new service snapshot is built from. */
struct build {
	struct mtd_cfg_box *box;
	const struct mtd_cfg_service *cfg;
	const struct mtd_rt_service *prev; /* the snapshot replaced, or NULL */
	const struct mtd_disc_endpoint *eps;
	size_t n;
	const char *const *hosts; /* SNI host per endpoint, or NULL: from the address */
	/* Services of the same runtime built before this one (TLS contexts
	 * are shared between services with the same files). */
	struct mtd_rt_service *const *built;
	size_t n_built;
	unsigned n_workers;
	bool force; /* build even when the set equals prev's */
	/* A TLS context made from the service's files again (certwatch.c:
	 * they changed), used instead of prev's; NULL = prev's / built. */
	struct ssl_ctx_st *ssl_ctx;
	bool set_unavailable;     /* replace prev's message by `unavailable` */
	const char *unavailable;  /* with set_unavailable */
	enum rt_await awaiting;   /* the snapshot's `awaiting` */
	struct mtd_rt_over *over; /* cfg is &over->svc (a reference taken), or NULL */
};

static bool awaiting_of(const struct build *b)
{
	return b->awaiting == AWAIT_AS_PREV ? b->prev && b->prev->awaiting : b->awaiting == AWAIT_WAITING;
}

/* A snapshot of service b->cfg over b->eps, reusing the identities of
 * b->prev and building each picker with prev's as `prev`. *same: the set
 * equals prev's (nothing to publish, NULL returned). NULL + err on
 * failure. */
static struct mtd_rt_service *service_build(const struct build *b, bool *same, char *err, size_t errlen)
{
	struct mtd_cfg_box *box = b->box;
	const struct mtd_cfg_service *cfg = b->cfg;
	const struct mtd_rt_service *prev = b->prev;
	const struct mtd_disc_endpoint *eps = b->eps;
	size_t n = b->n;
	const char *const *hosts = b->hosts;
	unsigned n_workers = b->n_workers;
	struct mtd_rt_service *s = calloc(1, sizeof(*s));
	struct mtd_disc_id *old_ids = NULL;
	size_t *map = NULL, dup = 0;
	struct mtd_disc_diff diff = {0};
	int64_t now_ms = mtd_wall_ms();
	int rc;

	*same = false;
	if (!s)
		goto nomem;
	mtd_ref_init(&s->ref);
	mtd_ref_get(&box->ref);
	s->cfgbox = box;
	s->cfg = cfg;
	if (b->over) {
		mtd_ref_get(&b->over->ref);
		s->over = b->over;
	}
	if (n > MTD_LB_MAX_ENDPOINTS) {
		snprintf(err, errlen, "service %s: %zu endpoints, at most %u", cfg->local->name, n,
		         MTD_LB_MAX_ENDPOINTS);
		goto fail;
	}
	size_t n_old = prev ? prev->n_eps : 0;
	old_ids = calloc(n_old ? n_old : 1, sizeof(*old_ids));
	map = calloc(n ? n : 1, sizeof(*map));
	s->eps = calloc(n ? n : 1, sizeof(*s->eps));
	s->lb_eps = calloc(n ? n : 1, sizeof(*s->lb_eps));
	s->methods = calloc(cfg->n_methods ? cfg->n_methods : 1, sizeof(*s->methods));
	if (!old_ids || !map || !s->eps || !s->lb_eps || !s->methods)
		goto nomem;
	for (size_t i = 0; i < n_old; i++)
		old_ids[i] = (struct mtd_disc_id){mtd_endpoint_key(prev->eps[i]), mtd_endpoint_text(prev->eps[i])};
	rc = mtd_disc_match(old_ids, n_old, eps, n, map, &diff, &dup);
	if (rc == -ENOMEM)
		goto nomem;
	if (rc < 0) {
		snprintf(err, errlen, "service %s: endpoint %s%s%s given twice", cfg->local->name,
		         eps[dup].key ? eps[dup].key : "", eps[dup].key ? " " : "",
		         eps[dup].address ? eps[dup].address : "(no address)");
		goto fail;
	}
	bool any_attr = false, changed = diff.added || diff.removed;
	for (size_t i = 0; i < n; i++) {
		struct mtd_endpoint *ep;
		/* Another identity presented is another endpoint: its
		 * pools connect expecting the identity they were made for. */
		const char *id = eps[i].identity && eps[i].identity[0] ? eps[i].identity : NULL;
		if (map[i] != SIZE_MAX && !same_file(mtd_endpoint_identity(prev->eps[map[i]]), id)) {
			map[i] = SIZE_MAX;
			changed = true;
		}
		if (map[i] != SIZE_MAX) {
			ep = prev->eps[map[i]];
			mtd_ref_get(&ep->ref);
			if (prev->lb_eps[map[i]].weight != eps[i].weight ||
			    !attr_same(&prev->lb_eps[map[i]], prev->attrs ? &prev->attrs[map[i]] : NULL, &eps[i]) ||
			    (eps[i].start_ms > 0 && eps[i].start_ms != ep->start_ms) ||
			    prev->lb_eps[map[i]].start_ms < ep->returned_ms || map[i] != i)
				changed = true;
		} else {
			sa_family_t fam = eps[i].sa.ss_family;
			socklen_t need = fam == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
			if ((fam != AF_INET && fam != AF_INET6) || eps[i].salen < need) {
				snprintf(err, errlen, "service %s: endpoint %s has no address", cfg->local->name,
				         eps[i].address);
				goto fail;
			}
			/* SNI and certificate name default (upstream.c): the name a
			 * DNS service resolves, or a static endpoint was written
			 * with, else the address's host. */
			const char *host = hosts             ? hosts[i]
			                   : cfg->local->dns ? cfg->local->dns->name
			                                     : static_host(cfg, eps[i].key);
			ep = mtd_endpoint_new(&eps[i], host, n_workers, now_ms);
			if (!ep)
				goto nomem;
		}
		s->eps[i] = ep;
		s->n_eps = i + 1;
		any_attr |= eps[i].n_metadata > 0;
		/* A registry's start time, when it names one, is the newest
		 * word; else the identity's own first sighting; unless it came
		 * back since (a returning endpoint ramps up through its warmup again). */
		int64_t start = eps[i].start_ms > 0 ? eps[i].start_ms : ep->start_ms;
		bool returned = ep->returned_ms > start;
		s->lb_eps[i] = (struct mtd_lb_endpoint){
		        .id = mtd_endpoint_text(ep),
		        .weight = eps[i].weight,
		        .start_ms = returned ? ep->returned_ms : start,
		        .returned = returned,
		        .stats = &ep->stats,
		};
	}
	s->awaiting = awaiting_of(b);
	if (prev && !changed && prev->cfg == cfg && !b->force && s->awaiting == prev->awaiting) {
		*same = true;
		goto fail; /* not an error: nothing to build */
	}
	/* What the routing layer reads (lb_eps[i].attrs): the zone's record,
	 * or the endpoint's own when it has metadata. */
	size_t zones_cap = 0;
	for (size_t i = 0; i < n; i++)
		if (eps[i].zone && eps[i].zone[0] && !(s->lb_eps[i].attrs = zone_intern(s, &zones_cap, eps[i].zone)))
			goto nomem;
	if (any_attr) {
		s->attrs = calloc(n, sizeof(*s->attrs));
		if (!s->attrs)
			goto nomem;
		for (size_t i = 0; i < n; i++) {
			if (attr_copy(&s->attrs[i], &eps[i]) < 0)
				goto nomem;
			if (s->attrs[i].a.meta.n == 0)
				continue;
			s->attrs[i].a.zone = s->lb_eps[i].attrs ? s->lb_eps[i].attrs->zone : NULL;
			s->lb_eps[i].attrs = &s->attrs[i].a;
		}
	}
	/* Config validation rejects every option set a picker would refuse for
	 * static endpoints; a discovered set may still be refused (MAGLEV
	 * table_size below the endpoint count): the old set stays then. */
	/* prev's pickers carry a strategy's history (lb.h); lib/lb ignores a
	 * prev of another strategy (a reload may change the policy). */
	s->picker = mtd_lb_picker_new(&cfg->lb, s->lb_eps, s->n_eps, prev ? prev->picker : NULL);
	if (!s->picker) {
		snprintf(err, errlen, "service %s: cannot build the %s picker over %zu endpoints", cfg->local->name,
		         cfg->lb.ops->name, s->n_eps);
		goto fail;
	}
	if (layer_wanted(&cfg->local->layer)) {
		s->layer = mtd_lb_layer_new(&cfg->local->layer, &cfg->lb, s->lb_eps, s->n_eps, prev ? prev->layer : NULL);
		if (!s->layer) {
			snprintf(err, errlen, "service %s: cannot build the routing layer over %zu endpoints",
			         cfg->local->name, s->n_eps);
			goto fail;
		}
	}
	log_readmitted(cfg->local->name, "*", prev ? prev->layer : NULL, s->layer);
	for (size_t i = 0; i < cfg->n_methods; i++) {
		s->methods[i].cfg = &cfg->methods[i];
		const struct mtd_lb_picker *mprev = NULL;
		for (size_t m = 0; prev && m < prev->cfg->n_methods && !mprev; m++)
			if (strcmp(prev->cfg->methods[m].name, cfg->methods[i].name) == 0)
				mprev = prev->methods[m].picker;
		s->methods[i].picker = mtd_lb_picker_new(&cfg->methods[i].lb, s->lb_eps, s->n_eps, mprev);
		if (layer_wanted(&cfg->methods[i].layer)) {
			const struct mtd_lb_layer *lprev = NULL;
			for (size_t m = 0; prev && m < prev->cfg->n_methods && !lprev; m++)
				if (strcmp(prev->cfg->methods[m].name, cfg->methods[i].name) == 0)
					lprev = prev->methods[m].layer;
			s->methods[i].layer = mtd_lb_layer_new(&cfg->methods[i].layer, &cfg->methods[i].lb, s->lb_eps,
			                                       s->n_eps, lprev);
			if (!s->methods[i].layer) {
				snprintf(err, errlen,
				         "service %s, method %s: cannot build the routing layer over %zu endpoints",
				         cfg->local->name, cfg->methods[i].name, s->n_eps);
				goto fail;
			}
			log_readmitted(cfg->local->name, cfg->methods[i].name, lprev, s->methods[i].layer);
		}
		if (!s->methods[i].picker) {
			snprintf(err, errlen, "service %s, method %s: cannot build the %s picker over %zu endpoints",
			         cfg->local->name, cfg->methods[i].name, cfg->methods[i].lb.ops->name, s->n_eps);
			goto fail;
		}
	}
	s->tls_gen = prev && tls_policy_same(prev->cfg->tls, cfg->tls) ? prev->tls_gen : tls_gen_next();
	if (b->ssl_ctx) {
		s->ssl_ctx = mtd_tls_ctx_ref(b->ssl_ctx);
	} else if (prev && (prev->cfg == cfg || tls_policy_same(prev->cfg->tls, cfg->tls)) && prev->ssl_ctx) {
		/* The same files (an override of the same service changed
		 * something else): the context stays, as a rotation left it. */
		s->ssl_ctx = mtd_tls_ctx_ref(prev->ssl_ctx);
	} else if (cfg->tls) {
		char why[256];
		struct ssl_ctx_st *shared = shared_ctx(b->built, b->n_built, cfg->tls);
		s->ssl_ctx = shared ? mtd_tls_ctx_ref(shared) : mtd_tls_client_ctx_new(cfg->tls, why, sizeof(why));
		if (!s->ssl_ctx) {
			snprintf(err, errlen, "service %s: TLS: %s", cfg->local->name, why);
			goto fail;
		}
	}
	/* The retry budget's window goes on while the service stays. */
	if (prev && prev->budget_box) {
		mtd_ref_get(&prev->budget_box->ref);
		s->budget_box = prev->budget_box;
	} else {
		s->budget_box = calloc(1, sizeof(*s->budget_box));
		if (!s->budget_box)
			goto nomem;
		mtd_ref_init(&s->budget_box->ref);
	}
	s->budget = &s->budget_box->b;
	/* So do the circuit breaker's counts. */
	if (prev && prev->load) {
		mtd_ref_get(&prev->load->ref);
		s->load = prev->load;
	} else {
		s->load = calloc(1, sizeof(*s->load));
		if (!s->load)
			goto nomem;
		mtd_ref_init(&s->load->ref);
	}
	if (health_init(s, prev, mtd_mono_ms()) < 0)
		goto nomem;
	bool oom = false;
	s->limit = bucket_for(&cfg->local->rate_limit, prev ? prev->limit : NULL, &oom);
	for (size_t i = 0; i < cfg->n_methods; i++) {
		struct mtd_rt_bucket *was = NULL;
		for (size_t m = 0; prev && m < prev->cfg->n_methods && !was; m++)
			if (strcmp(prev->cfg->methods[m].name, cfg->methods[i].name) == 0)
				was = prev->methods[m].limit;
		s->methods[i].limit = bucket_for(&cfg->methods[i].rate_limit, was, &oom);
	}
	if (oom)
		goto nomem;
	const char *msg = b->set_unavailable ? b->unavailable : prev && prev->cfg == cfg ? prev->unavailable : NULL;
	if (msg && !(s->unavailable = strdup(msg)))
		goto nomem;
	free(old_ids);
	free(map);
	return s;
nomem:
	snprintf(err, errlen, "service %s: out of memory", cfg ? cfg->local->name : "?");
fail:
	free(old_ids);
	free(map);
	if (s)
		service_free(s);
	return NULL;
}

/* The static endpoints of cfg as a source would give them. An IP literal
 * is its own identity, as written; a host name is named by the address it
 * resolved to, like the resolver's later answers (sidecar/dns.c), so the
 * first refresh keeps it. */
static struct mtd_disc_endpoint *static_set(const struct mtd_cfg_service *cfg, const char ***hosts, char (**texts)[64])
{
	*texts = calloc(cfg->local->n_endpoints ? cfg->local->n_endpoints : 1, sizeof(**texts));
	if (!*texts)
		return NULL;
	struct mtd_disc_endpoint *d = calloc(cfg->local->n_endpoints ? cfg->local->n_endpoints : 1, sizeof(*d));
	*hosts = calloc(cfg->local->n_endpoints ? cfg->local->n_endpoints : 1, sizeof(**hosts));
	if (!d || !*hosts) {
		free(d);
		free(*hosts);
		free(*texts);
		return NULL;
	}
	for (size_t i = 0; i < cfg->local->n_endpoints; i++) {
		const struct mtd_cfg_endpoint *e = &cfg->local->endpoints[i];
		const char *id = mtd_rt_host_is_literal(e->addr.host)
		                         ? e->addr.text
		                         : mtd_addr_text(&e->addr.sa.sa, (*texts)[i], sizeof((*texts)[i]));
		/* A name's endpoints are keyed by the name as written:
		 * "localhost:80" next to "127.0.0.1:80" is two endpoints, as the
		 * config allows (and as dns.c names them on each refresh). */
		d[i] = (struct mtd_disc_endpoint){.key = id == e->addr.text ? NULL : e->addr.text,
		                                  .address = id,
		                                  .salen = e->addr.salen,
		                                  .weight = e->weight,
		                                  .zone = e->zone,
		                                  /* both {key, value} */
		                                  .metadata = (const struct mtd_disc_meta *)e->meta,
		                                  .n_metadata = e->n_meta};
		memcpy(&d[i].sa, &e->addr.sa, e->addr.salen);
		(*hosts)[i] = e->addr.host;
	}
	return d;
}

bool mtd_rt_host_is_literal(const char *host)
{
	struct in6_addr a;
	return inet_pton(AF_INET, host, &a) == 1 || inet_pton(AF_INET6, host, &a) == 1;
}

const char *mtd_runtime_waiting(const struct mtd_cfg_service *sc, char *buf, size_t len)
{
	switch (sc->local->source) {
	case MTD_CFG_SOURCE_DNS:
		return "waiting for the first DNS answer";
	case MTD_CFG_SOURCE_ETCD:
		snprintf(buf, len, "etcd: waiting for the first list of %s from %s", sc->local->etcd->prefix,
		         sc->local->etcd->endpoints[0].text);
		return buf;
	case MTD_CFG_SOURCE_XDS:
		snprintf(buf, len, "xds: waiting for cluster %s and its endpoints", sc->local->xds_cluster);
		return buf;
	case MTD_CFG_SOURCE_STATIC:
		break;
	}
	return NULL;
}

/* A runtime over cfgbox's config with services[i] (references taken). */
static struct mtd_runtime *runtime_assemble(struct mtd_control *ctl, struct mtd_cfg_box *box,
                                            struct mtd_rt_service **services)
{
	const struct mtd_cfg *cfg = box->cfg;
	struct mtd_runtime *rt = calloc(1, sizeof(*rt));
	const char **names = box->routes ? NULL : calloc(cfg->n_services ? cfg->n_services : 1, sizeof(*names));
	if (!rt || (!box->routes && !names))
		goto fail;
	mtd_ref_init(&rt->ref);
	rt->ctl = ctl;
	mtd_ref_get(&box->ref);
	rt->cfgbox = box;
	rt->cfg = box->cfg;
	rt->services = calloc(cfg->n_services ? cfg->n_services : 1, sizeof(*rt->services));
	if (!rt->services)
		goto fail;
	for (size_t i = 0; i < cfg->n_services; i++) {
		/* An entry only routes or mirrors reach is not looked up by :path. */
		if (names)
			names[i] = cfg->services[i].local->by_path ? cfg->services[i].local->name : NULL;
		mtd_ref_get(&services[i]->ref);
		rt->services[i] = services[i];
	}
	/* Only the user's services are routes: an inbound app is reached
	 * from its own listener, never by a :path (mtd_cfg.n_routed). */
	if (!box->routes && !(box->routes = mtd_route_table_new(names, cfg->n_routed)))
		goto fail;
	rt->routes = box->routes;
	free(names);
	names = NULL;
	/* A change over the same config keeps its inbound listener set; a
	 * new config's is the caller's (mtd_runtime_set_inbound). */
	if (ctl->rt && ctl->rt->cfgbox == box && ctl->rt->inbound) {
		mtd_ref_get(&ctl->rt->inbound->ref);
		rt->inbound = ctl->rt->inbound;
	}
	/* So do its control plane's routes (their services[] indices are
	 * that config's): a new config's are set again by their client. */
	if (ctl->rt && ctl->rt->cfgbox == box && ctl->rt->xroutes) {
		mtd_ref_get(&ctl->rt->xroutes->ref);
		rt->xroutes = ctl->rt->xroutes;
	}
	rt->routes_awaited = ctl->rt && ctl->rt->cfgbox == box ? ctl->rt->routes_awaited
	                                                       : cfg->xds != NULL && cfg->xds->listener != NULL;
	/* The identities it drops are marked when it is published
	 * (mtd_runtime_mark_gone, by publish.c), not here: it may never be. */
	rt->gen = ++ctl->next_gen;
	return rt;
fail:
	free(names);
	if (rt)
		runtime_free(rt);
	return NULL;
}

static void mark_eps(struct mtd_endpoint *const *eps, size_t n, uint64_t gen)
{
	for (size_t i = 0; i < n; i++)
		atomic_store_explicit(&eps[i]->gone_gen, gen, memory_order_relaxed);
}

/* Each service rt changed (every service when the config changed) has
 * its old snapshot's identities marked, then its new one's unmarked (an
 * identity belongs to one service: a snapshot reuses only those of the
 * one it replaces, of the same name). Only what rt changed is visited:
 * one service changed among 10,000 is not a walk over 100,000 endpoints.
 * The mark of an identity rt keeps is undone before rt is published, and
 * no worker serves a generation >= rt->gen before that: none acts on it. */
void mtd_runtime_mark_gone(const struct mtd_runtime *old, const struct mtd_runtime *rt)
{
	bool same_config = old->cfgbox == rt->cfgbox;

	for (size_t i = 0; i < old->cfg->n_services; i++) {
		const struct mtd_rt_service *s = old->services[i];
		if (!same_config || s != rt->services[i])
			mark_eps(s->eps, s->n_eps, rt->gen);
	}
	for (size_t i = 0; i < rt->cfg->n_services; i++) {
		const struct mtd_rt_service *s = rt->services[i];
		if (!same_config || s != old->services[i])
			mark_eps(s->eps, s->n_eps, 0);
	}
}

/* A box owning cfg and an array for its service snapshots; on failure
 * (out of memory, said in err) cfg is freed and NULL returned. */
static struct mtd_cfg_box *box_new(struct mtd_cfg *cfg, struct mtd_rt_service ***svcs, char *err, size_t errlen)
{
	struct mtd_cfg_box *box = calloc(1, sizeof(*box));
	*svcs = calloc(cfg->n_services ? cfg->n_services : 1, sizeof(**svcs));
	if (!box || !*svcs) {
		snprintf(err, errlen, "out of memory");
		free(box);
		free(*svcs);
		*svcs = NULL;
		mtd_cfg_free(cfg);
		return NULL;
	}
	mtd_ref_init(&box->ref);
	box->cfg = cfg;
	return box;
}

/* The end of building a runtime, whether it was assembled or not: drop the
 * builder's references on the first `built` services and on the box (the
 * runtime holds its own). */
static void runtime_build_done(struct mtd_cfg_box *box, struct mtd_rt_service **svcs, size_t built)
{
	for (size_t i = 0; i < built; i++)
		if (mtd_ref_put(&svcs[i]->ref))
			service_free(svcs[i]);
	free(svcs);
	cfgbox_unref(box);
}

struct mtd_runtime *mtd_runtime_new(struct mtd_control *ctl, struct mtd_cfg *cfg, unsigned n_workers, char *err,
                                    size_t errlen)
{
	struct mtd_rt_service **svcs = NULL;
	struct mtd_cfg_box *box = box_new(cfg, &svcs, err, errlen);
	struct mtd_runtime *rt = NULL;
	size_t built = 0;

	if (!box)
		return NULL;
	for (; built < cfg->n_services; built++) {
		const struct mtd_cfg_service *sc = &cfg->services[built];
		const char **hosts = NULL;
		char(*texts)[64] = NULL;
		struct mtd_disc_endpoint *set = static_set(sc, &hosts, &texts);
		bool same;
		if (!set) {
			snprintf(err, errlen, "service %s: out of memory", sc->local->name);
			goto out;
		}
		char wbuf[300];
		struct build b = {.box = box,
		                  .cfg = sc,
		                  .eps = set,
		                  .n = sc->local->n_endpoints,
		                  .hosts = hosts,
		                  .built = svcs,
		                  .n_built = built,
		                  .n_workers = n_workers,
		                  .set_unavailable = true,
		                  .unavailable = mtd_runtime_waiting(sc, wbuf, sizeof(wbuf))};
		b.awaiting = b.unavailable ? AWAIT_WAITING : AWAIT_ANSWERED;
		svcs[built] = service_build(&b, &same, err, errlen);
		free(set);
		free(hosts);
		free(texts);
		if (!svcs[built])
			goto out;
	}
	rt = runtime_assemble(ctl, box, svcs);
	if (!rt)
		snprintf(err, errlen, "out of memory");
out:
	runtime_build_done(box, svcs, built);
	return rt;
}

/* ---- changes ------------------------------------------------------------- */

/* A copy of the current runtime with service si replaced by s (a
 * reference of its own taken), or NULL when out of memory. */
static struct mtd_runtime *replace_service(struct mtd_control *ctl, size_t si, struct mtd_rt_service *s)
{
	struct mtd_runtime *cur = ctl->rt;
	size_t n = cur->cfg->n_services;
	struct mtd_rt_service **svcs = calloc(n, sizeof(*svcs));
	if (!svcs)
		return NULL;
	memcpy(svcs, cur->services, n * sizeof(*svcs));
	svcs[si] = s;
	struct mtd_runtime *rt = runtime_assemble(ctl, cur->cfgbox, svcs);
	free(svcs);
	return rt;
}

struct mtd_runtime *mtd_runtime_with_endpoints(struct mtd_control *ctl, size_t si, const struct mtd_disc_endpoint *eps,
                                               size_t n, bool *same, char *err, size_t errlen)
{
	struct mtd_runtime *cur = ctl->rt;
	struct mtd_rt_service *prev = cur->services[si];
	struct build b = {.box = cur->cfgbox,
	                  .cfg = prev->cfg,
	                  .over = prev->over,
	                  .prev = prev,
	                  .eps = eps,
	                  .n = n,
	                  .n_workers = ctl->n_workers,
	                  .awaiting = AWAIT_ANSWERED};
	struct mtd_rt_service *s = service_build(&b, same, err, errlen);
	if (!s)
		return NULL;
	struct mtd_runtime *rt = replace_service(ctl, si, s);
	mtd_rt_service_unref(s); /* the runtime holds it */
	if (!rt)
		snprintf(err, errlen, "service %s: out of memory", prev->cfg->local->name);
	return rt;
}

static struct mtd_disc_endpoint *current_set(const struct mtd_rt_service *prev);

/* ---- batches: several services' changes, one runtime ---------------------- */

struct mtd_rt_batch {
	struct mtd_control *ctl;
	struct mtd_runtime *base;     /* ctl->rt when begun (a reference) */
	/* Parallel to base's: base's own (borrowed: base holds them while the
	 * batch holds base) until replaced by one the batch built (a
	 * reference held): a batch that changes one service among 10,000
	 * takes and drops no reference on the others. */
	struct mtd_rt_service **svcs;
	size_t n;
	bool changed;
	bool xroutes_set;               /* xroutes replaces the base's */
	struct mtd_rt_xroutes *xroutes; /* a reference held, NULL = none */
	bool routes_answered;           /* routes_awaited ends */
};

void mtd_runtime_batch_routes_answered(struct mtd_rt_batch *bt)
{
	if (bt == NULL)
		return;
	bt->routes_answered = true;
	bt->changed = true;
}

void mtd_runtime_batch_set_xroutes(struct mtd_rt_batch *bt, struct mtd_rt_xroutes *xr)
{
	if (bt == NULL) {
		mtd_rt_xroutes_unref(xr);
		return;
	}
	mtd_rt_xroutes_unref(bt->xroutes);
	bt->xroutes = xr;
	bt->xroutes_set = true;
	bt->changed = true;
}

struct mtd_rt_batch *mtd_runtime_batch_begin(struct mtd_control *ctl)
{
	struct mtd_rt_batch *bt = calloc(1, sizeof(*bt));
	size_t n = ctl->rt->cfg->n_services;

	if (!bt || !(bt->svcs = calloc(n ? n : 1, sizeof(*bt->svcs)))) {
		free(bt);
		return NULL;
	}
	bt->ctl = ctl;
	bt->base = ctl->rt;
	mtd_ref_get(&bt->base->ref);
	bt->n = n;
	memcpy(bt->svcs, ctl->rt->services, n * sizeof(*bt->svcs));
	return bt;
}

const struct mtd_rt_service *mtd_runtime_batch_service(const struct mtd_rt_batch *bt, size_t si)
{
	return si < bt->n ? bt->svcs[si] : NULL;
}

int mtd_runtime_batch_set(struct mtd_rt_batch *bt, size_t si, struct mtd_rt_over *over,
                          const struct mtd_disc_endpoint *eps, size_t n, const char *unavailable, bool waiting,
                          char *err, size_t errlen)
{
	if (si >= bt->n) {
		snprintf(err, errlen, "service %zu: out of range", si);
		return -EINVAL;
	}
	struct mtd_rt_service *prev = bt->svcs[si];
	const struct mtd_cfg_service *base = &bt->base->cfg->services[si];
	struct mtd_disc_endpoint *set = NULL;
	bool same = false;

	/* None, or the same override as in force: the one in force, so that
	 * an unchanged set stays the same snapshot. */
	if (!over || (prev->over && prev->over->base == over->base && prev->over->tag == over->tag))
		over = prev->over;
	if (over && over->base != base) {
		snprintf(err, errlen, "service %s: an override made for another config", base->local->name);
		return -EINVAL;
	}
	/* A set given is an answer; none, the source's word on the current one. */
	bool awaiting = eps == NULL && waiting;
	if (!eps) { /* the current set, another config or message */
		if (!(set = current_set(prev))) {
			snprintf(err, errlen, "service %s: out of memory", base->local->name);
			return -ENOMEM;
		}
		eps = set;
		n = prev->n_eps;
	}
	bool msg_same = (unavailable == NULL && prev->unavailable == NULL) ||
	                (unavailable && prev->unavailable && strcmp(unavailable, prev->unavailable) == 0);
	struct build b = {.box = bt->base->cfgbox,
	                  .cfg = over ? &over->svc : base,
	                  .over = over,
	                  .prev = prev,
	                  .eps = eps,
	                  .n = n,
	                  .n_workers = bt->ctl->n_workers,
	                  .force = !msg_same,
	                  .set_unavailable = true,
	                  .unavailable = unavailable,
	                  .awaiting = awaiting ? AWAIT_WAITING : AWAIT_ANSWERED};
	struct mtd_rt_service *s = service_build(&b, &same, err, errlen);
	free(set);
	if (!s)
		return same ? 1 : strstr(err, "out of memory") ? -ENOMEM : -EINVAL;
	if (prev != bt->base->services[si])
		mtd_rt_service_unref(prev); /* built by this batch */
	bt->svcs[si] = s;
	bt->changed = true;
	return 0;
}

struct mtd_runtime *mtd_runtime_batch_end(struct mtd_rt_batch *bt)
{
	struct mtd_runtime *rt = NULL;

	if (!bt)
		return NULL;
	/* Built over the runtime current when it began: a publish between
	 * (none on the control thread's one turn) would be undone. */
	if (bt->changed && bt->ctl->rt == bt->base)
		rt = runtime_assemble(bt->ctl, bt->base->cfgbox, bt->svcs);
	if (rt != NULL && bt->xroutes_set) {
		mtd_rt_xroutes_unref(rt->xroutes);
		rt->xroutes = bt->xroutes;
		bt->xroutes = NULL;
	}
	if (rt != NULL && bt->routes_answered)
		rt->routes_awaited = false;
	mtd_rt_xroutes_unref(bt->xroutes);
	for (size_t i = 0; i < bt->n; i++)
		if (bt->svcs[i] != bt->base->services[i])
			mtd_rt_service_unref(bt->svcs[i]);
	free(bt->svcs);
	mtd_runtime_unref(bt->base);
	free(bt);
	return rt;
}

/* Service prev of cur built again over its current endpoint set, forced
 * (a new snapshot even when nothing about the endpoints changed), with
 * what opt sets beyond that (unavailability, a TLS context). */
static struct mtd_rt_service *service_rebuilt(const struct mtd_runtime *cur, struct mtd_rt_service *prev,
                                              unsigned n_workers, struct build opt, char *err, size_t errlen)
{
	struct mtd_disc_endpoint *set = current_set(prev);
	if (!set) {
		snprintf(err, errlen, "service %s: out of memory", prev->cfg->local->name);
		return NULL;
	}
	bool same;
	opt.box = cur->cfgbox;
	opt.cfg = prev->cfg;
	opt.over = prev->over;
	opt.prev = prev;
	opt.eps = set;
	opt.n = prev->n_eps;
	opt.n_workers = n_workers;
	opt.force = true;
	struct mtd_rt_service *s = service_build(&opt, &same, err, errlen);
	free(set);
	return s;
}

struct mtd_runtime *mtd_runtime_rebuilt(struct mtd_control *ctl, size_t si, bool set_unavailable, const char *reason,
                                        bool waiting, char *err, size_t errlen)
{
	struct mtd_runtime *cur = ctl->rt;
	struct mtd_rt_service *prev = cur->services[si];
	/* A new message is the source's word: an error (an answer), or what
	 * it still waits for; the same set otherwise keeps prev's. */
	enum rt_await aw = !set_unavailable ? AWAIT_AS_PREV : waiting ? AWAIT_WAITING : AWAIT_ANSWERED;
	struct mtd_rt_service *s = service_rebuilt(
	        cur, prev, ctl->n_workers,
	        (struct build){.set_unavailable = set_unavailable, .unavailable = reason, .awaiting = aw}, err, errlen);
	if (!s)
		return NULL;
	struct mtd_runtime *rt = replace_service(ctl, si, s);
	mtd_rt_service_unref(s);
	if (!rt)
		snprintf(err, errlen, "service %s: out of memory", prev->cfg->local->name);
	return rt;
}

struct mtd_runtime *mtd_runtime_with_ctx(struct mtd_control *ctl, const struct ssl_ctx_st *old, struct ssl_ctx_st *ctx,
                                         char *err, size_t errlen)
{
	struct mtd_runtime *cur = ctl->rt;
	size_t n = cur->cfg->n_services, k = 0;
	struct mtd_rt_service **svcs = calloc(n ? n : 1, sizeof(*svcs));
	struct mtd_rt_service **made = calloc(n ? n : 1, sizeof(*made));
	struct mtd_runtime *rt = NULL;
	if (!svcs || !made) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	memcpy(svcs, cur->services, n * sizeof(*svcs));
	for (size_t si = 0; si < n; si++) {
		struct mtd_rt_service *prev = cur->services[si];
		if (!old || prev->ssl_ctx != old)
			continue;
		struct mtd_rt_service *s =
		        service_rebuilt(cur, prev, ctl->n_workers, (struct build){.ssl_ctx = ctx}, err, errlen);
		if (!s)
			goto out;
		made[k++] = svcs[si] = s;
	}
	rt = runtime_assemble(ctl, cur->cfgbox, svcs);
	if (!rt)
		snprintf(err, errlen, "out of memory");
out:
	for (size_t i = 0; i < k; i++)
		mtd_rt_service_unref(made[i]); /* the runtime holds its own */
	free(made);
	free(svcs);
	return rt;
}

void mtd_runtime_set_inbound(struct mtd_runtime *rt, struct mtd_rt_inset *set)
{
	mtd_rt_inset_unref(rt->inbound);
	rt->inbound = set;
}

struct mtd_runtime *mtd_runtime_with_inbound(struct mtd_control *ctl, struct mtd_rt_inset *set)
{
	struct mtd_runtime *cur = ctl->rt;
	struct mtd_runtime *rt = runtime_assemble(ctl, cur->cfgbox, cur->services);
	if (!rt) {
		mtd_rt_inset_unref(set);
		return NULL;
	}
	mtd_runtime_set_inbound(rt, set);
	return rt;
}

bool mtd_runtime_warms_up(const struct mtd_cfg_service *c)
{
	if (c->lb.warmup.duration_ms > 0)
		return true;
	for (size_t m = 0; m < c->n_methods; m++)
		if (c->methods[m].lb.warmup.duration_ms > 0)
			return true;
	return false;
}

/* Outlier ticks of service si; endpoints whose ejection ended restart
 * their warmup (service-level ejection only: a method-scoped one left the
 * endpoint serving the other methods). */
static void outlier_tick(struct mtd_runtime *rt, size_t si, int64_t mono_ms, mtd_runtime_back_fn *back_fn)
{
	struct mtd_rt_service *s = rt->services[si];
	struct mtd_outlier_set *o = s->outliers;
	if (!o)
		return;
	size_t *was = NULL, n_was = 0;
	if (atomic_load(&o->n_ejected) > 0 && mtd_runtime_warms_up(s->cfg)) {
		was = calloc(s->n_eps, sizeof(*was));
		for (size_t i = 0; was && i < s->n_eps; i++)
			if (mtd_outlier_is_ejected(o, i))
				was[n_was++] = i;
	}
	if (mtd_outlier_tick(o, mono_ms))
		MTD_INFO("service %s: ejections changed (%u of %zu endpoints out)", s->cfg->local->name,
		         (unsigned)atomic_load(&o->n_ejected), s->n_eps);
	struct mtd_endpoint **back = n_was ? calloc(n_was, sizeof(*back)) : NULL;
	size_t k = 0;
	for (size_t j = 0; back && j < n_was; j++)
		if (!mtd_outlier_is_ejected(o, was[j]))
			back[k++] = s->eps[was[j]];
	/* Only while s is still the service's current snapshot (a rewarm of
	 * an earlier service this tick published a runtime sharing it). */
	struct mtd_runtime *cur = rt->ctl ? rt->ctl->rt : NULL;
	if (k && cur && si < cur->cfg->n_services && cur->services[si] == s)
		back_fn(rt->ctl, si, back, k);
	free(was);
	free(back);
}

/* split.guard: the layer's evaluation, each cut logged and
 * counted. */
static void guard_tick(const struct mtd_cfg_service *sc, const char *method, struct mtd_lb_layer *l, int64_t mono_ms)
{
	struct mtd_lb_guard_cut cut[MTD_LB_SPLIT_MAX_GROUPS];
	size_t n = mtd_lb_layer_guard(l, mono_ms, cut, MTD_LB_SPLIT_MAX_GROUPS);
	for (size_t k = 0; k < n; k++) {
		const struct mtd_lb_guard_cut *c = &cut[k];
		/* Weight 0 until a reload changes the split (troubleshooting.md). */
		MTD_WARN("service %s%s%s: split.guard cut %s: %llu/%llu failed, p99 %.1f ms (%s: %llu/%llu, %.1f ms)",
		         sc->local->name, method[0] == '*' ? "" : ", method ", method[0] == '*' ? "" : method, c->value,
		         (unsigned long long)c->failed, (unsigned long long)c->calls, c->p99_ms, c->reference,
		         (unsigned long long)c->ref_failed, (unsigned long long)c->ref_calls, c->ref_p99_ms);
		mtd_metrics_guard_cut(sc->local->name, method, c->value);
	}
}

void mtd_runtime_tick(struct mtd_runtime *rt, mtd_runtime_back_fn *back)
{
	/* Wall time for warmup only (lib/lb's now_ms); ejections and the
	 * guard's window on the monotonic clock. */
	int64_t now_ms = mtd_wall_ms(), now_ns = mtd_now_ns(), mono_ms = now_ns / 1000000;
	for (size_t i = 0; i < rt->cfg->n_services; i++) {
		struct mtd_rt_service *s = rt->services[i];
		mtd_lb_tick(s->picker, now_ms, now_ns);
		outlier_tick(rt, i, mono_ms, back);
		if (s->layer) {
			mtd_lb_layer_tick(s->layer, now_ms, now_ns);
			guard_tick(s->cfg, "*", s->layer, mono_ms);
		}
		for (size_t m = 0; m < s->cfg->n_methods; m++) {
			mtd_lb_tick(s->methods[m].picker, now_ms, now_ns);
			mtd_outlier_tick(s->methods[m].outliers, mono_ms);
			if (s->methods[m].layer) {
				mtd_lb_layer_tick(s->methods[m].layer, now_ms, now_ns);
				guard_tick(s->cfg, s->cfg->methods[m].name, s->methods[m].layer, mono_ms);
			}
		}
	}
}

/* ---- reload ---------------------------------------------------------------- */

static bool same_addrs(const struct mtd_cfg_addr *a, size_t na, const struct mtd_cfg_addr *b, size_t nb)
{
	if (na != nb)
		return false;
	for (size_t i = 0; i < na; i++)
		if (strcmp(a[i].text, b[i].text) != 0)
			return false;
	return true;
}

/* The discovered set of old can serve new until new's source reports. */
static bool same_source(const struct mtd_cfg_service *old, const struct mtd_cfg_service *new)
{
	if (old->local->source != new->local->source)
		return false;
	switch (new->local->source) {
	case MTD_CFG_SOURCE_DNS:
		return strcmp(old->local->dns->name, new->local->dns->name) == 0 &&
		       old->local->dns->port == new->local->dns->port &&same_addrs(
		                                        old->local->dns->resolvers, old->local->dns->n_resolvers,
		                                        new->local->dns->resolvers, new->local->dns->n_resolvers);
	case MTD_CFG_SOURCE_ETCD:
		return same_addrs(old->local->etcd->endpoints, old->local->etcd->n_endpoints,
		                  new->local->etcd->endpoints, new->local->etcd->n_endpoints) &&
		       strcmp(old->local->etcd->prefix, new->local->etcd->prefix) == 0 &&
		       same_file(old->local->etcd->username, new->local->etcd->username) &&
		       same_tls(old->local->etcd->tls, new->local->etcd->tls);
	case MTD_CFG_SOURCE_XDS:
		/* The last good assignment of the same cluster serves on, even
		 * when the server changed, until the stream reports. */
		return strcmp(old->local->xds_cluster, new->local->xds_cluster) == 0;
	case MTD_CFG_SOURCE_STATIC:
		break;
	}
	return false;
}

/* prev's current set, as a source would give it. */
static struct mtd_disc_endpoint *current_set(const struct mtd_rt_service *prev)
{
	struct mtd_disc_endpoint *set = calloc(prev->n_eps ? prev->n_eps : 1, sizeof(*set));
	if (!set)
		return NULL;
	for (size_t i = 0; i < prev->n_eps; i++) {
		const struct mtd_endpoint *ep = prev->eps[i];
		const struct mtd_rt_epattr *a = prev->attrs ? &prev->attrs[i] : NULL;
		set[i] = (struct mtd_disc_endpoint){.key = mtd_endpoint_key(ep),
		                                    .identity = mtd_endpoint_identity(ep),
		                                    .address = mtd_endpoint_text(ep),
		                                    .salen = mtd_endpoint_salen(ep),
		                                    .weight = prev->lb_eps[i].weight,
		                                    .zone = prev->lb_eps[i].attrs ? prev->lb_eps[i].attrs->zone : NULL,
		                                    /* both {key, value} */
		                                    .metadata = a ? (const struct mtd_disc_meta *)a->a.meta.kv : NULL,
		                                    .n_metadata = a ? a->a.meta.n : 0,
		                                    .start_ms = prev->lb_eps[i].start_ms};
		memcpy(&set[i].sa, mtd_endpoint_sa(ep), mtd_endpoint_salen(ep));
	}
	return set;
}

const char *mtd_runtime_identity_refused(const struct mtd_cfg_tls *tls, const char *identity)
{
	if (!tls || !tls->server_identity_registry)
		return NULL;
	if (!identity || identity[0] == '\0')
		return "it names no identity";
	if (mtd_identity_type(identity) == MTD_IDENTITY_NONE)
		return "its identity is not a typed identity (a URI, or dns:NAME)";
	if (tls->n_allowed_identities == 0)
		return NULL;
	for (size_t i = 0; i < tls->n_allowed_identities; i++)
		if (mtd_identity_match(tls->allowed_identities[i], identity))
			return NULL;
	return "its identity matches none of tls.allowed_identities";
}

/* prev's endpoints carried into sc's snapshot by a reload, less those
 * whose registry identity sc's TLS refuses (mtd_runtime_identity_refused):
 * the new allowed_identities apply from the reload on, as on a fresh
 * maitred, not from the watcher's next list (which never comes while etcd
 * is unreachable). Compacts set[0..*n) in place. */
static void drop_refused(const struct mtd_cfg_service *sc, struct mtd_disc_endpoint *set, size_t *n)
{
	size_t k = 0;
	for (size_t i = 0; i < *n; i++) {
		const char *why = mtd_runtime_identity_refused(sc->tls, set[i].identity);
		if (why) {
			MTD_WARN("reload: service %s: endpoint %s dropped: %s (FROM_REGISTRY)", sc->local->name,
			         set[i].address ? set[i].address : "?", why);
			continue;
		}
		set[k++] = set[i];
	}
	*n = k;
}

static struct mtd_rt_service *find_service(const struct mtd_runtime *rt, const char *name)
{
	for (size_t i = 0; i < rt->cfg->n_services; i++)
		if (strcmp(rt->cfg->services[i].local->name, name) == 0)
			return rt->services[i];
	return NULL;
}

struct mtd_runtime *mtd_runtime_reload(struct mtd_control *ctl, struct mtd_cfg *cfg, char *err, size_t errlen)
{
	struct mtd_rt_service **svcs = NULL;
	struct mtd_cfg_box *box = box_new(cfg, &svcs, err, errlen);
	struct mtd_runtime *rt = NULL;
	size_t built = 0;

	if (!box)
		return NULL;
	for (; built < cfg->n_services; built++) {
		const struct mtd_cfg_service *sc = &cfg->services[built];
		struct mtd_rt_service *prev = find_service(ctl->rt, sc->local->name);
		struct mtd_disc_endpoint *set;
		const char **hosts = NULL;
		char(*texts)[64] = NULL;
		size_t n;
		const char *waiting = NULL;
		enum rt_await aw = AWAIT_ANSWERED; /* static: nothing to wait for */
		char wbuf[300];
		bool same;
		if (sc->local->source == MTD_CFG_SOURCE_STATIC) {
			set = static_set(sc, &hosts, &texts);
			n = sc->local->n_endpoints;
		} else if (prev && same_source(prev->cfg, sc)) {
			/* The same source goes on: what it said (or had not yet) stays. */
			set = current_set(prev);
			n = prev->n_eps;
			waiting = prev->unavailable;
			aw = prev->awaiting ? AWAIT_WAITING : AWAIT_ANSWERED;
			if (set)
				drop_refused(sc, set, &n);
		} else {
			set = calloc(1, sizeof(*set));
			n = 0;
			waiting = mtd_runtime_waiting(sc, wbuf, sizeof(wbuf));
			aw = AWAIT_WAITING;
		}
		if (!set) {
			snprintf(err, errlen, "service %s: out of memory", sc->local->name);
			goto out;
		}
		struct build b = {.box = box,
		                  .cfg = sc,
		                  .prev = prev,
		                  .eps = set,
		                  .n = n,
		                  .hosts = hosts,
		                  .built = svcs,
		                  .n_built = built,
		                  .n_workers = ctl->n_workers,
		                  .force = true,
		                  .set_unavailable = true,
		                  .unavailable = waiting,
		                  .awaiting = aw};
		svcs[built] = service_build(&b, &same, err, errlen);
		free(set);
		free(hosts);
		free(texts);
		if (!svcs[built])
			goto out;
	}
	rt = runtime_assemble(ctl, box, svcs);
	if (!rt)
		snprintf(err, errlen, "out of memory");
out:
	runtime_build_done(box, svcs, built);
	return rt;
}
