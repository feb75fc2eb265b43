/* One services[] entry: its name, its endpoints and methods, and the
 * checks across its blocks (which policy uses weights, warmup, a hash
 * key). The blocks themselves are built by their sections' files. */
#include <config.h> /* autoconf (lib/config/config.h is the API) */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/build-int.h"
#include "lb/lb.h"

static void build_upstream(struct builder *b, const PbUpstream *m, const char *path, struct mtd_cfg_upstream *out)
{
	char p[256];

	out->connect_timeout_ms = 2000;
	out->idle_timeout_ms = 300000;
	out->keepalive_interval_ms = 30000;
	out->keepalive_timeout_ms = 10000;
	out->max_connections = 4;
	out->max_concurrent_streams = 1000;
	out->max_pending = 1024;
	out->write_timeout_ms = 30000;
	if (m == NULL)
		return;
#define UP_DUR(f, def, zero) \
	out->f##_ms =        \
	        mtd_cfg__dur_ms(b, m->f, def, zero, mtd_cfg__at(b, m, #f, NULL), mtd_cfg__sub(p, sizeof(p), path, #f))
	UP_DUR(connect_timeout, 2000, ZERO_IS_ERROR);
	UP_DUR(idle_timeout, 300000, ZERO_IS_ERROR);
	UP_DUR(keepalive_interval, 30000, ZERO_IS_DEFAULT);
	UP_DUR(keepalive_timeout, 10000, ZERO_IS_ERROR);
	UP_DUR(write_timeout, 30000, ZERO_IS_ERROR);
	UP_DUR(max_connection_age, 0, ZERO_IS_ERROR);
#undef UP_DUR
	if (out->max_connection_age_ms > 0 && out->max_connection_age_ms < 1000) {
		/* The pool's housekeeping looks once a second. */
		BERR(mtd_cfg__at(b, m, "max_connection_age", NULL),
		     mtd_cfg__sub(p, sizeof(p), path, "max_connection_age"),
		     "must be at least 1s (connections are checked once a second), got %lld ms",
		     (long long)out->max_connection_age_ms);
		out->max_connection_age_ms = 0;
	}
	out->max_connections = mtd_cfg__u32_limit(b, m->max_connections, 4, 1024, m, "max_connections", path);
	out->max_concurrent_streams = mtd_cfg__u32_limit(b, m->max_concurrent_streams, 1000, H2_WINDOW_MAX, m,
	                                                 "max_concurrent_streams", path);
	out->max_pending = mtd_cfg__u32_limit(b, m->max_pending, 1024, 1u << 20, m, "max_pending", path);
}

/* RFC 3986 §3.2 authority = host [ ":" port ], without userinfo (RFC 9113
 * §8.3.1 forbids it in :authority): reg-name or IP-literal characters. */
static bool authority_ok(const char *a)
{
	if (*a == '\0')
		return false;
	for (const unsigned char *c = (const unsigned char *)a; *c; c++) {
		if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9'))
			continue;
		if (!strchr("-._~!$&'()*+,;=:[]%", *c))
			return false;
	}
	return true;
}

static void build_authority(struct builder *b, const PbService *m, const char *path, struct mtd_cfg_service *out)
{
	if (m->authority[0] == '\0')
		return;
	if (strcmp(m->authority, "FROM_ENDPOINT") == 0) {
		out->local->authority_from_endpoint = true;
		return;
	}
	if (!authority_ok(m->authority)) {
		BERR(mtd_cfg__at(b, m, "authority", NULL), path,
		     "\"%s\" is neither FROM_ENDPOINT nor a host[:port] authority (RFC 3986 §3.2, no userinfo)",
		     m->authority);
		return;
	}
	out->local->authority = mtd_cfg__dup_or_oom(b, m->authority);
}

/* Endpoint.zone and Endpoint.metadata (sorted by key: the map has no
 * order of its own, and lookups then need not care). */
static int meta_cmp(const void *x, const void *y)
{
	return strcmp(((const struct mtd_lb_meta *)x)->key, ((const struct mtd_lb_meta *)y)->key);
}

static void build_endpoint_tags(struct builder *b, const PbEndpoint *e, struct mtd_cfg_endpoint *oe)
{
	if (e->zone[0] != '\0')
		oe->zone = mtd_cfg__dup_or_oom(b, e->zone);
	if (e->n_metadata == 0)
		return;
	oe->meta = mtd_cfg__calloc(e->n_metadata, sizeof(*oe->meta));
	if (oe->meta == NULL) {
		b->d->oom = true;
		return;
	}
	for (size_t k = 0; k < e->n_metadata; k++) {
		oe->meta[k].key = mtd_cfg__dup_or_oom(b, e->metadata[k]->key);
		oe->meta[k].value = mtd_cfg__dup_or_oom(b, e->metadata[k]->value);
		oe->n_meta++;
		if (oe->meta[k].key == NULL || oe->meta[k].value == NULL)
			return;
	}
	qsort(oe->meta, oe->n_meta, sizeof(*oe->meta), meta_cmp);
}

/* A service with discovery.xds under an xds.listener: the control
 * plane's routes reach it by its cluster, whatever its name. */
/* Checked before mtd_cfg__reached_by_name, which scans every service:
 * the services a control plane creates (by the thousand) pass here. */
static bool reached_by_xds_routes(struct builder *b, const PbService *m)
{
	const PbConfig *root = b->root;

	return root->xds != NULL && root->xds->listener[0] != '\0' && m->discovery != NULL && m->discovery->xds != NULL;
}

/* ---- duplicates, in O(n log n) ------------------------------------------ */

/* An index sorted with its neighbours by a key; ties by index, so the
 * first of a run of equal keys is the run's smallest index. */
struct dup_sort {
	const void *items; /* what cmp reads */
	int (*cmp)(const void *items, size_t a, size_t b);
};

static int dup_cmp(const void *x, const void *y, void *arg)
{
	const struct dup_sort *ds = arg;
	size_t a = *(const size_t *)x, b = *(const size_t *)y;
	int c = ds->cmp(ds->items, a, b);

	return c != 0 ? c : (a > b) - (a < b);
}

/* For the n indices idx[] (sorted here), first[i] becomes the smallest
 * index equal to i under cmp when that is below i (and below first[i]). */
static void dup_runs(size_t *idx, size_t n, const struct dup_sort *ds, size_t *first)
{
	qsort_r(idx, n, sizeof(*idx), dup_cmp, (void *)ds);
	for (size_t k = 1, run = 0; k < n; k++) {
		if (ds->cmp(ds->items, idx[run], idx[k]) != 0) {
			run = k;
			continue;
		}
		if (idx[run] < first[idx[k]])
			first[idx[k]] = idx[run];
	}
}

static int method_name_cmp(const void *items, size_t a, size_t b)
{
	const PbService *m = items;

	return strcmp(m->methods[a]->name, m->methods[b]->name);
}

/* mtd_cfg__same_endpoint's two rules as orders: the same host (any case)
 * and port; or, both written as literal addresses, the same address. */
static bool literal_host(const struct mtd_cfg_addr *a)
{
	return a->host != NULL && a->salen != 0 && strspn(a->host, "0123456789.:abcdefABCDEF") == strlen(a->host);
}

static int ep_host_cmp(const void *items, size_t a, size_t b)
{
	const struct mtd_cfg_endpoint *e = items;

	if (e[a].addr.port != e[b].addr.port)
		return e[a].addr.port < e[b].addr.port ? -1 : 1;
	return strcasecmp(e[a].addr.host, e[b].addr.host);
}

static int ep_literal_cmp(const void *items, size_t a, size_t b)
{
	const struct mtd_cfg_endpoint *e = items;

	if (e[a].addr.port != e[b].addr.port)
		return e[a].addr.port < e[b].addr.port ? -1 : 1;
	if (e[a].addr.salen != e[b].addr.salen)
		return e[a].addr.salen < e[b].addr.salen ? -1 : 1;
	return memcmp(&e[a].addr.sa, &e[b].addr.sa, e[a].addr.salen);
}

/* first[i] for every endpoint: the smallest j < i that is the same
 * endpoint (mtd_cfg__same_endpoint), else SIZE_MAX. NULL on OOM. */
static size_t *endpoint_first_dups(const struct mtd_cfg_endpoint *eps, size_t n)
{
	size_t *first = mtd_cfg__calloc(n ? n : 1, sizeof(*first)), *idx = mtd_cfg__calloc(n ? n : 1, sizeof(*idx));
	size_t k = 0;

	if (first == NULL || idx == NULL) {
		mtd_cfg__free(first);
		mtd_cfg__free(idx);
		return NULL;
	}
	for (size_t i = 0; i < n; i++) {
		first[i] = SIZE_MAX;
		if (eps[i].addr.host != NULL)
			idx[k++] = i;
	}
	dup_runs(idx, k, &(struct dup_sort){eps, ep_host_cmp}, first);
	k = 0;
	for (size_t i = 0; i < n; i++)
		if (literal_host(&eps[i].addr))
			idx[k++] = i;
	dup_runs(idx, k, &(struct dup_sort){eps, ep_literal_cmp}, first);
	mtd_cfg__free(idx);
	return first;
}

/* The static endpoints (services[].endpoints) into out->local->endpoints:
 * each address, once; tags; weights. *first_weighted: the first whose
 * weight is not the default 100 (index *first_weighted_i), for the check
 * that the policy reads weights. */
static void build_endpoints(struct builder *b, const PbService *m, const char *path, struct mtd_cfg_service *out,
                            const PbEndpoint **first_weighted, size_t *first_weighted_i)
{
	char p[256];
	size_t n_eps = out->local->source == MTD_CFG_SOURCE_STATIC ? m->n_endpoints : 0;

	if (n_eps > MTD_LB_MAX_ENDPOINTS) {
		/* mtd_lb_picker_new() refuses more; none is built (nor resolved). */
		BERR(mtd_cfg__at(b, m, "endpoints", NULL), mtd_cfg__sub(p, sizeof(p), path, "endpoints"),
		     "at most %u endpoints per service, got %zu", MTD_LB_MAX_ENDPOINTS, n_eps);
		n_eps = 0;
	}
	out->local->endpoints = mtd_cfg__calloc(n_eps, sizeof(*out->local->endpoints));
	if (out->local->endpoints == NULL) {
		b->d->oom = true;
		return;
	}
	out->local->n_endpoints = n_eps;
	/* built[i]: its address parsed and resolved, so it is checked for a
	 * duplicate (an address refused already has its error). */
	bool *built = mtd_cfg__calloc(n_eps ? n_eps : 1, sizeof(*built));
	if (built == NULL) {
		b->d->oom = true;
		return;
	}
	for (size_t i = 0; i < n_eps; i++) {
		const PbEndpoint *e = m->endpoints[i];
		struct mtd_cfg_endpoint *oe = &out->local->endpoints[i];

		snprintf(p, sizeof(p), "%s.endpoints[%zu].address", path, i);
		oe->weight = 100;
		if (e->address[0] == '\0')
			BERR(mtd_cfg__at(b, e, "address", NULL), p, "is required (\"HOST:PORT\")");
		else
			built[i] = mtd_cfg__build_addr(b, e->address, mtd_cfg__at(b, e, "address", NULL), p, &oe->addr) == 0;
		build_endpoint_tags(b, e, oe);
		if (e->weight != NULL) {
			snprintf(p, sizeof(p), "%s.endpoints[%zu].weight", path, i);
			if (e->weight->value > INT32_MAX)
				BERR(mtd_cfg__at(b, e, "weight", NULL), p, "must be at most %d", INT32_MAX);
			else
				oe->weight = (int32_t)e->weight->value;
			if (e->weight->value != 100 && *first_weighted == NULL) {
				*first_weighted = e;
				*first_weighted_i = i;
			}
		}
		if (b->d->oom) {
			mtd_cfg__free(built);
			return;
		}
	}
	/* Each address once (a sort, not a scan per endpoint: 100,000 of them). */
	size_t *first = endpoint_first_dups(out->local->endpoints, n_eps);

	if (first == NULL) {
		mtd_cfg__free(built);
		b->d->oom = true;
		return;
	}
	for (size_t i = 0; i < n_eps; i++)
		if (built[i] && first[i] != SIZE_MAX) {
			snprintf(p, sizeof(p), "%s.endpoints[%zu].address", path, i);
			BERR(mtd_cfg__at(b, m->endpoints[i], "address", NULL), p, "duplicate endpoint \"%s\" (also endpoints[%zu])",
			     m->endpoints[i]->address, first[i]);
		}
	mtd_cfg__free(first);
	mtd_cfg__free(built);
}

/* Method i of m into out->methods[i] (its lb facts into *info): what it
 * sets of its own, else its service's (shared, not copied, where the
 * method's _own flag says so). */
static void build_method(struct builder *b, const PbService *m, size_t i, size_t first_dup, const char *path,
                         const struct mtd_lb_warmup *warmup, const struct lb_info *svc_info,
                         struct mtd_cfg_service *out, struct lb_info *info)
{
	const PbMethod *mm = m->methods[i];
	struct mtd_cfg_method *om = &out->methods[i];
	char mpath[96], p[256];

	snprintf(mpath, sizeof(mpath), "%s.methods[%zu]", path, i);
	om->name = mtd_cfg__dup_or_oom(b, mm->name);
	if (om->name == NULL)
		return;
	if (mm->name[0] == '\0') {
		BERR(mtd_cfg__at(b, mm, "name", NULL), mtd_cfg__sub(p, sizeof(p), mpath, "name"),
		     "is required (\"GetCart\")");
	} else if (!mtd_cfg__ident_ok(mm->name, strlen(mm->name))) {
		BERR(mtd_cfg__at(b, mm, "name", NULL), mtd_cfg__sub(p, sizeof(p), mpath, "name"),
		     "\"%s\" is not a valid method name", mm->name);
	} else if (first_dup != SIZE_MAX) {
		BERR(mtd_cfg__at(b, mm, "name", NULL), mtd_cfg__sub(p, sizeof(p), mpath, "name"),
		     "duplicate method \"%s\" (also methods[%zu])", mm->name, first_dup);
	}
	if (mm->lb != NULL) {
		mtd_cfg__build_lb(b, mm->lb, mm, mtd_cfg__sub(p, sizeof(p), mpath, "lb"), &om->lb, info);
		om->lb.warmup = *warmup;
		mtd_cfg__lb_check(b, mm->lb, mm, mtd_cfg__sub(p, sizeof(p), mpath, "lb"), m, path, &om->lb);
	} else {
		om->lb = out->lb; /* the service's, whole */
		*info = *svc_info;
	}
	if (mm->fault != NULL) {
		mtd_cfg__build_fault(b, mm->fault, mtd_cfg__sub(p, sizeof(p), mpath, "fault"), &om->fault);
		om->fault_own = true;
	} else {
		om->fault = out->local->fault; /* shares the service's fallback bytes */
	}
	if (mm->routing != NULL) {
		mtd_cfg__build_routing(b, mm->routing, mtd_cfg__sub(p, sizeof(p), mpath, "routing"), &om->routing);
		om->routing_own = true;
	} else {
		om->routing = out->local->routing; /* shares the service's strings */
	}
	mtd_cfg__layer_resolve(b, out, &om->routing, &om->layer);
	if (mm->split != NULL) {
		om->split = mtd_cfg__build_split(b, mm->split, mtd_cfg__sub(p, sizeof(p), mpath, "split"));
		om->split_own = true;
		if (b->d->oom)
			return;
	} else {
		om->split = out->local->split;
	}
	mtd_cfg__layer_split(b, &om->layer, om->split, mm, mpath);
	if (mm->rate_limit != NULL)
		mtd_cfg__build_rate_limit(b, mm->rate_limit, mtd_cfg__sub(p, sizeof(p), mpath, "rate_limit"),
		                          &om->rate_limit);
	om->trace_sample = mtd_cfg__trace_sample(b, mm->tracing, out->local->trace_sample,
	                                         mtd_cfg__sub(p, sizeof(p), mpath, "tracing"));
	if (mm->fault_injection != NULL)
		mtd_cfg__build_fault_injection(b, mm->fault_injection,
		                               mtd_cfg__sub(p, sizeof(p), mpath, "fault_injection"), &om->fault_injection);
	else
		om->fault_injection = out->local->fault_injection;
	if (mm->hash_key != NULL)
		mtd_cfg__build_hash_key(b, mm->hash_key, mtd_cfg__sub(p, sizeof(p), mpath, "hash_key"), &om->hash_key);
	else
		mtd_cfg__hash_key_copy(b, &om->hash_key, &out->local->hash_key);
}

void mtd_cfg__build_service(struct builder *b, const PbService *m, size_t si, struct mtd_cfg_service *out)
{
	char path[64], p[256];
	struct lb_info svc_info, *minfo = NULL;
	struct mtd_lb_warmup warmup;
	const PbEndpoint *first_weighted = NULL;
	size_t first_weighted_i = 0;
	bool any_weights, any_warmup, svc_hash, svc_key_used, any_method_key = false;

	snprintf(path, sizeof(path), "services[%zu]", si);
	out->local->inbound = -1;
	out->local->name = mtd_cfg__dup_or_oom(b, m->name);
	if (m->name[0] == '\0')
		BERR(mtd_cfg__at(b, m, "name", NULL), mtd_cfg__sub(p, sizeof(p), path, "name"),
		     "is required (\"package.Service\" or \"*\")");
	else if (strcmp(m->name, "*") != 0 && !mtd_cfg__service_name_ok(m->name) &&
	         !reached_by_xds_routes(b, m) && !mtd_cfg__reached_by_name(b, m->name))
		BERR(mtd_cfg__at(b, m, "name", NULL), mtd_cfg__sub(p, sizeof(p), path, "name"),
		     "\"%s\" is not a fully-qualified gRPC service name "
		     "(\"package.Service\") or \"*\", nor an entry that routes or a mirror reach",
		     m->name);
	out->local->by_path = strcmp(m->name, "*") == 0 || mtd_cfg__service_name_ok(m->name);

	mtd_cfg__build_lb(b, m->lb, m, mtd_cfg__sub(p, sizeof(p), path, "lb"), &out->lb, &svc_info);
	mtd_cfg__build_warmup(b, m->warmup, mtd_cfg__sub(p, sizeof(p), path, "warmup"), &warmup);
	out->lb.warmup = warmup;
	mtd_cfg__lb_check(b, m->lb, m, mtd_cfg__sub(p, sizeof(p), path, "lb"), m, path, &out->lb);
	if (m->hash_key != NULL)
		mtd_cfg__build_hash_key(b, m->hash_key, mtd_cfg__sub(p, sizeof(p), path, "hash_key"), &out->local->hash_key);
	if (m->tls != NULL)
		out->tls = mtd_cfg__build_tls(b, m->tls, mtd_cfg__sub(p, sizeof(p), path, "tls"));
	build_upstream(b, m->upstream, mtd_cfg__sub(p, sizeof(p), path, "upstream"), &out->upstream);
	mtd_cfg__build_fault(b, m->fault, mtd_cfg__sub(p, sizeof(p), path, "fault"), &out->local->fault);
	mtd_cfg__build_retry_budget(b, m->retry_budget, mtd_cfg__sub(p, sizeof(p), path, "retry_budget"),
	                            &out->local->retry_budget);
	build_authority(b, m, mtd_cfg__sub(p, sizeof(p), path, "authority"), out);
	mtd_cfg__build_outlier(b, m->outlier_detection, mtd_cfg__sub(p, sizeof(p), path, "outlier_detection"), out);
	mtd_cfg__build_circuit(m->circuit_breaker, &out->circuit);
	mtd_cfg__build_health_check(b, m->health_check, mtd_cfg__sub(p, sizeof(p), path, "health_check"),
	                            &out->local->health_check);
	mtd_cfg__build_locality(b, m, path, out);
	if (m->routing != NULL)
		mtd_cfg__build_routing(b, m->routing, mtd_cfg__sub(p, sizeof(p), path, "routing"), &out->local->routing);
	mtd_cfg__layer_resolve(b, out, &out->local->routing, &out->local->layer);
	if (m->split != NULL) {
		out->local->split = mtd_cfg__build_split(b, m->split, mtd_cfg__sub(p, sizeof(p), path, "split"));
		if (b->d->oom)
			return;
	}
	mtd_cfg__layer_split(b, &out->local->layer, out->local->split, m, path);
	mtd_cfg__build_rate_limit(b, m->rate_limit, mtd_cfg__sub(p, sizeof(p), path, "rate_limit"), &out->local->rate_limit);
	mtd_cfg__build_fault_injection(b, m->fault_injection, mtd_cfg__sub(p, sizeof(p), path, "fault_injection"),
	                               &out->local->fault_injection);
	out->local->trace_sample = mtd_cfg__trace_sample(b, m->tracing, b->tracing ? b->tracing->sample : 0,
	                                                 mtd_cfg__sub(p, sizeof(p), path, "tracing"));
	out->local->mirror = -1;
	if (m->mirror != NULL)
		out->local->mirror_percent = mtd_cfg__percent_of(b, m->mirror->percent, m->mirror,
		                                                 mtd_cfg__sub(p, sizeof(p), path, "mirror"));

	/* endpoints */
	mtd_cfg__build_source(b, m, path, out);
	if (b->d->oom)
		goto out;
	if (out->tls != NULL && out->tls->server_identity_registry && out->local->source != MTD_CFG_SOURCE_ETCD)
		BERR(mtd_cfg__at(b, m->tls, "server_identity", NULL),
		     mtd_cfg__sub(p, sizeof(p), path, "tls.server_identity"),
		     "FROM_REGISTRY needs discovery.etcd (the identity is each endpoint's registry record's)");
	build_endpoints(b, m, path, out, &first_weighted, &first_weighted_i);
	if (out->local->endpoints == NULL || b->d->oom)
		return;

	/* methods */
	if (m->n_methods != 0) {
		out->methods = mtd_cfg__calloc(m->n_methods, sizeof(*out->methods));
		minfo = mtd_cfg__calloc(m->n_methods, sizeof(*minfo));
		if (out->methods == NULL || minfo == NULL) {
			mtd_cfg__free(minfo);
			b->d->oom = true;
			return;
		}
		out->n_methods = m->n_methods;
	}
	if (m->n_methods != 0) {
		/* Each name once (a sort, not a scan per method). */
		size_t *first = mtd_cfg__calloc(m->n_methods, sizeof(*first));
		size_t *idx = mtd_cfg__calloc(m->n_methods, sizeof(*idx));

		if (first == NULL || idx == NULL) {
			b->d->oom = true;
		} else {
			for (size_t i = 0; i < m->n_methods; i++) {
				first[i] = SIZE_MAX;
				idx[i] = i;
			}
			dup_runs(idx, m->n_methods, &(struct dup_sort){m, method_name_cmp}, first);
		}
		for (size_t i = 0; i < m->n_methods && !b->d->oom; i++) {
			build_method(b, m, i, first[i], path, &warmup, &svc_info, out, &minfo[i]);
			any_method_key |= m->methods[i]->hash_key != NULL;
		}
		mtd_cfg__free(first);
		mtd_cfg__free(idx);
	}
	if (b->d->oom)
		goto out;

	/* Options that fit the policy but not this endpoint set. */
	mtd_cfg__lb_fits_endpoints(b, m->lb, m, mtd_cfg__sub(p, sizeof(p), path, "lb"), &out->lb, out);
	for (size_t i = 0; i < m->n_methods; i++) {
		char mpath[128];

		if (m->methods[i]->lb == NULL)
			continue; /* the service's block, checked above */
		snprintf(mpath, sizeof(mpath), "%s.methods[%zu].lb", path, i);
		mtd_cfg__lb_fits_endpoints(b, m->methods[i]->lb, m->methods[i], mpath, &out->methods[i].lb, out);
	}

	/* Options only some policy in this service would use. */
	any_weights = svc_info.caps & MTD_LB_CAP_WEIGHTS;
	any_warmup = svc_info.caps & MTD_LB_CAP_WARMUP;
	svc_hash = svc_info.caps & MTD_LB_CAP_HASH_KEY;
	svc_key_used = svc_hash;
	for (size_t i = 0; i < m->n_methods; i++) {
		any_weights |= (minfo[i].caps & MTD_LB_CAP_WEIGHTS) != 0;
		any_warmup |= (minfo[i].caps & MTD_LB_CAP_WARMUP) != 0;
		if (m->methods[i]->hash_key == NULL && (minfo[i].caps & MTD_LB_CAP_HASH_KEY))
			svc_key_used = true;
	}
	if (first_weighted != NULL && !any_weights) {
		snprintf(p, sizeof(p), "%s.endpoints[%zu].weight", path, first_weighted_i);
		BERR(mtd_cfg__at(b, first_weighted, "weight", NULL), p,
		     "policy %s ignores endpoint weights (use a weighted policy)", svc_info.policy);
	}
	if (warmup.duration_ms > 0 && !any_warmup)
		BERR(mtd_cfg__at(b, m, "warmup", NULL), mtd_cfg__sub(p, sizeof(p), path, "warmup"),
		     "policy %s does not apply warmup", svc_info.policy);
	if (m->hash_key != NULL && !svc_key_used)
		BERR(mtd_cfg__at(b, m, "hash_key", NULL), mtd_cfg__sub(p, sizeof(p), path, "hash_key"),
		     "policy %s does not use a hash key", svc_info.policy);
	if (svc_hash && m->hash_key == NULL && !any_method_key)
		BERR(mtd_cfg__at(b, m->lb, "policy", m), mtd_cfg__sub(p, sizeof(p), path, "lb.policy"),
		     "policy %s needs a hash_key (on the service or its methods)", svc_info.policy);
	for (size_t i = 0; i < m->n_methods; i++) {
		const PbMethod *mm = m->methods[i];
		char mpath[96];
		bool hashes = minfo[i].caps & MTD_LB_CAP_HASH_KEY;

		snprintf(mpath, sizeof(mpath), "%s.methods[%zu]", path, i);
		if (mm->hash_key != NULL && !hashes)
			BERR(mtd_cfg__at(b, mm, "hash_key", NULL), mtd_cfg__sub(p, sizeof(p), mpath, "hash_key"),
			     "policy %s does not use a hash key", minfo[i].policy);
		if (mm->lb != NULL && hashes && mm->hash_key == NULL && m->hash_key == NULL)
			BERR(mtd_cfg__at(b, mm->lb, "policy", mm), mtd_cfg__sub(p, sizeof(p), mpath, "lb.policy"),
			     "policy %s needs a hash_key (on the method or its service)", minfo[i].policy);
	}
out:
	mtd_cfg__free(minfo);
}
