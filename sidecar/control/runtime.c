/* Runtime snapshots: the validated config plus what the data
 * plane needs to serve it (route table, endpoint identities with their
 * stats, pickers, TLS contexts). Built on the control thread, published to
 * every worker, read by workers without locks, reclaimed by reference
 * counts (sidecar.h "runtime snapshots", HACKING.md "Snapshots").
 *
 * A change of one service's endpoints (mtd_control_set_endpoints) builds a
 * new snapshot of that service only (runtime_service.c); the new runtime
 * shares every other service's snapshot with the old one. */
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
#include "sidecar/control/runtime-int.h"
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

void mtd_rt__service_free(struct mtd_rt_service *s)
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
				mtd_rt__service_free(rt->services[i]);
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
			mtd_rt__service_free(s);
		}
		while (eps) {
			struct mtd_endpoint *ep = MTD_MBOX_ITEM(eps, struct mtd_endpoint, reclaim);
			eps = eps->next;
			mtd_endpoint_free(ep);
		}
	}
}

/* Config endpoint e as a source would give it, into *d (its host into
 * *host, the text of the address a name resolved to into text). A name's
 * endpoints are keyed by the name as written: "localhost:80" next to
 * "127.0.0.1:80" is two endpoints, as the config allows (and as dns.c
 * names them on each refresh). */
static void static_endpoint(const struct mtd_cfg_endpoint *e, struct mtd_disc_endpoint *d, const char **host,
                            char text[64])
{
	bool literal = mtd_rt_host_is_literal(e->addr.host);
	*d = (struct mtd_disc_endpoint){.key = literal ? NULL : e->addr.text,
	                                .address = literal ? e->addr.text : mtd_addr_text(&e->addr.sa.sa, text, 64),
	                                .salen = e->addr.salen,
	                                .weight = e->weight,
	                                .zone = e->zone,
	                                /* both {key, value} */
	                                .metadata = (const struct mtd_disc_meta *)e->meta,
	                                .n_metadata = e->n_meta};
	memcpy(&d->sa, &e->addr.sa, e->addr.salen);
	*host = e->addr.host;
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
	for (size_t i = 0; i < cfg->local->n_endpoints; i++)
		static_endpoint(&cfg->local->endpoints[i], &d[i], &(*hosts)[i], (*texts)[i]);
	return d;
}

/* A static service's set at a reload: static_set's, but for a host name
 * the addresses prev had for it (its endpoints keyed by the name as
 * written: the resolver's last answer, dns.c) when it had any, rather
 * than the one address getaddrinfo gave the new config at load. Without
 * them a reload dropped every address of a name but that one (their
 * identities, pools, connections, figures and warmup) until the
 * resolver's next round added them back as new endpoints. *n the count. */
static struct mtd_disc_endpoint *static_set_kept(const struct mtd_cfg_service *cfg, const struct mtd_rt_service *prev,
                                                 size_t *n, const char ***hosts, char (**texts)[64])
{
	size_t total = 0;
	bool any = false;
	for (size_t i = 0; i < cfg->local->n_endpoints; i++) {
		const struct mtd_cfg_endpoint *e = &cfg->local->endpoints[i];
		size_t k = 0;
		for (size_t j = 0; prev && !mtd_rt_host_is_literal(e->addr.host) && j < prev->n_eps; j++) {
			const char *key = mtd_endpoint_key(prev->eps[j]);
			k += key && strcmp(key, e->addr.text) == 0;
		}
		any |= k > 0;
		total += k ? k : 1;
	}
	*n = cfg->local->n_endpoints;
	if (!any)
		return static_set(cfg, hosts, texts);
	*texts = calloc(total, sizeof(**texts));
	struct mtd_disc_endpoint *d = calloc(total, sizeof(*d));
	*hosts = calloc(total, sizeof(**hosts));
	if (!d || !*hosts || !*texts) {
		free(d);
		free(*hosts);
		free(*texts);
		*hosts = NULL;
		*texts = NULL;
		return NULL;
	}
	size_t o = 0;
	for (size_t i = 0; i < cfg->local->n_endpoints; i++) {
		const struct mtd_cfg_endpoint *e = &cfg->local->endpoints[i];
		bool literal = mtd_rt_host_is_literal(e->addr.host);
		size_t had = o;
		for (size_t j = 0; !literal && j < prev->n_eps; j++) {
			const struct mtd_endpoint *ep = prev->eps[j];
			const char *key = mtd_endpoint_key(ep);
			if (!key || strcmp(key, e->addr.text) != 0)
				continue;
			d[o] = (struct mtd_disc_endpoint){.key = e->addr.text,
			                                  .address = mtd_endpoint_text(ep),
			                                  .salen = mtd_endpoint_salen(ep),
			                                  .weight = e->weight,
			                                  .zone = e->zone,
			                                  .metadata = (const struct mtd_disc_meta *)e->meta,
			                                  .n_metadata = e->n_meta};
			memcpy(&d[o].sa, mtd_endpoint_sa(ep), mtd_endpoint_salen(ep));
			(*hosts)[o++] = e->addr.host;
		}
		if (o > had)
			continue;
		static_endpoint(e, &d[o], &(*hosts)[o], (*texts)[o]);
		o++;
	}
	*n = o;
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
			mtd_rt__service_free(svcs[i]);
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
		struct mtd_rt_build b = {.box = box,
		                  .cfg = sc,
		                  .eps = set,
		                  .n = sc->local->n_endpoints,
		                  .hosts = hosts,
		                  .built = svcs,
		                  .n_built = built,
		                  .n_workers = n_workers,
		                  .set_unavailable = true,
		                  .unavailable = mtd_runtime_waiting(sc, wbuf, sizeof(wbuf))};
		b.awaiting = b.unavailable ? MTD_RT_AWAIT_WAITING : MTD_RT_AWAIT_ANSWERED;
		svcs[built] = mtd_rt__service_build(&b, &same, err, errlen);
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
	struct mtd_rt_build b = {.box = cur->cfgbox,
	                  .cfg = prev->cfg,
	                  .over = prev->over,
	                  .prev = prev,
	                  .eps = eps,
	                  .n = n,
	                  .n_workers = ctl->n_workers,
	                  .awaiting = MTD_RT_AWAIT_ANSWERED};
	struct mtd_rt_service *s = mtd_rt__service_build(&b, same, err, errlen);
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
	/* built: the batch's services, whose contexts a new one with the
	 * same files shares (clusters naming the same certificate provider
	 * instances: one context, one CA store, one rebuild per rotation). */
	struct mtd_rt_build b = {.box = bt->base->cfgbox,
	                  .cfg = over ? &over->svc : base,
	                  .over = over,
	                  .prev = prev,
	                  .eps = eps,
	                  .n = n,
	                  .built = bt->svcs,
	                  .n_built = bt->n,
	                  .n_workers = bt->ctl->n_workers,
	                  .force = !msg_same,
	                  .set_unavailable = true,
	                  .unavailable = unavailable,
	                  .awaiting = awaiting ? MTD_RT_AWAIT_WAITING : MTD_RT_AWAIT_ANSWERED};
	struct mtd_rt_service *s = mtd_rt__service_build(&b, &same, err, errlen);
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
                                              unsigned n_workers, struct mtd_rt_build opt, char *err, size_t errlen)
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
	struct mtd_rt_service *s = mtd_rt__service_build(&opt, &same, err, errlen);
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
	enum mtd_rt_await aw = !set_unavailable ? MTD_RT_AWAIT_AS_PREV
	                       : waiting        ? MTD_RT_AWAIT_WAITING
	                                        : MTD_RT_AWAIT_ANSWERED;
	struct mtd_rt_service *s = service_rebuilt(
	        cur, prev, ctl->n_workers,
	        (struct mtd_rt_build){.set_unavailable = set_unavailable, .unavailable = reason, .awaiting = aw}, err,
	        errlen);
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
		        service_rebuilt(cur, prev, ctl->n_workers, (struct mtd_rt_build){.ssl_ctx = ctx}, err, errlen);
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
		       mtd_rt__same_file(old->local->etcd->username, new->local->etcd->username) &&
		       mtd_rt__same_tls(old->local->etcd->tls, new->local->etcd->tls);
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

struct mtd_runtime *mtd_runtime_reload(struct mtd_control *ctl, struct mtd_cfg *cfg, mtd_rt_over_now_fn *over_now,
                                       char *err, size_t errlen)
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
		enum mtd_rt_await aw = MTD_RT_AWAIT_ANSWERED; /* static: nothing to wait for */
		char wbuf[300];
		bool same;
		struct mtd_rt_over *over = NULL;
		if (sc->local->source == MTD_CFG_SOURCE_STATIC) {
			set = static_set_kept(sc, prev && prev->cfg->local->source == MTD_CFG_SOURCE_STATIC ? prev : NULL, &n,
			                      &hosts, &texts);
		} else if (prev && same_source(prev->cfg, sc)) {
			/* The same source goes on: what it said (or had not yet) stays. */
			set = current_set(prev);
			n = prev->n_eps;
			waiting = prev->unavailable;
			aw = prev->awaiting ? MTD_RT_AWAIT_WAITING : MTD_RT_AWAIT_ANSWERED;
			if (set)
				drop_refused(sc, set, &n);
			/* A control plane's settings come with its endpoints, made
			 * again over the new config: the endpoints alone would be
			 * the service's own config until the stream gives them
			 * again, which a cluster it refuses never does (its TLS
			 * gone: plaintext to a TLS upstream). Without them, endpoints
			 * that had TLS are not kept. */
			if (prev->over && sc->local->source == MTD_CFG_SOURCE_XDS) {
				over = over_now ? over_now(ctl, sc) : NULL;
				if (!over && prev->cfg->tls && !sc->tls) {
					n = 0;
					waiting = mtd_runtime_waiting(sc, wbuf, sizeof(wbuf));
					aw = MTD_RT_AWAIT_WAITING;
				}
			}
		} else {
			set = calloc(1, sizeof(*set));
			n = 0;
			waiting = mtd_runtime_waiting(sc, wbuf, sizeof(wbuf));
			aw = MTD_RT_AWAIT_WAITING;
		}
		if (!set) {
			snprintf(err, errlen, "service %s: out of memory", sc->local->name);
			goto out;
		}
		struct mtd_rt_build b = {.box = box,
		                         .cfg = over ? &over->svc : sc,
		                         .over = over,
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
		svcs[built] = mtd_rt__service_build(&b, &same, err, errlen);
		mtd_rt_over_unref(over); /* the snapshot took its own */
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
