/* A control plane's routes bound to one config's services (xds_routes.h
 * says the contract). */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "sidecar/control/runtime-t.h"
#include "sidecar/control/runtime.h"
#include "sidecar/control/xds_routes.h"
#include "xds/xds.h"

struct mtd_xds_routes_box *mtd_xds_routes_box_new(struct mtd_xds_routes *r)
{
	struct mtd_xds_routes_box *b = calloc(1, sizeof(*b));

	if (b == NULL) {
		mtd_xds_routes_free(r);
		return NULL;
	}
	b->refs = 1;
	b->r = r;
	return b;
}

void mtd_xds_routes_box_put(struct mtd_xds_routes_box *b)
{
	if (b == NULL || --b->refs > 0)
		return;
	mtd_xds_routes_free(b->r);
	free(b);
}

static void box_release(void *p)
{
	mtd_xds_routes_box_put(p);
}

/* A cluster's service: the services with discovery.xds, sorted by
 * cluster name, looked up by binary search (a table of a thousand routes
 * over ten thousand services stays cheap). */
struct by_cluster {
	const char *cluster;
	int service;
};

static int cmp_cluster(const void *a, const void *b)
{
	return strcmp(((const struct by_cluster *)a)->cluster, ((const struct by_cluster *)b)->cluster);
}

static int find_service(const struct mtd_cfg *cfg, const struct by_cluster *idx, size_t n, const char *cluster,
                        char *why, size_t whylen)
{
	struct by_cluster key = {cluster, -1};
	const struct by_cluster *hit = n ? bsearch(&key, idx, n, sizeof(*idx), cmp_cluster) : NULL;

	if (hit != NULL)
		return hit->service;
	for (size_t i = 0; i < cfg->n_routed; i++)
		if (strcmp(cfg->services[i].local->name, cluster) == 0) {
			snprintf(why, whylen,
			         "cluster %.128s: service %.128s of that name is not an xDS service (xDS never "
			         "changes or shadows a service of another source)",
			         cluster, cfg->services[i].local->name);
			return -1;
		}
	snprintf(why, whylen, "cluster %.128s: no service has discovery.xds cluster %.128s", cluster, cluster);
	return -1;
}

static void xroute_fault(struct mtd_rt_xtarget *t, const struct mtd_cfg_service *sc, const struct mtd_xds_action *a)
{
	if (!a->retry)
		return;
	t->fault = sc->local->fault;
	t->fault.mode = MTD_FAULT_FAILOVER;
	t->fault.retries = a->retries;
	t->fault.retry_on = a->retry_on;
	t->fault.per_try_timeout_ms = a->per_try_timeout_ms;
	t->fault.backoff_base_ms = a->backoff_base_ms;
	t->fault.backoff_max_ms = a->backoff_max_ms;
	t->has_fault = true;
}

/* The fault config route r's calls take under filter: its override (its
 * own or its host's), else the filter's; NULL when there is no filter. */
static const struct mtd_cfg_fault_injection *route_fault(const struct mtd_xds_route *r,
                                                         const struct mtd_xds_fault *filter)
{
	if (filter == NULL || filter->filter == NULL)
		return NULL;
	for (size_t i = 0; i < r->n_faults; i++)
		if (strcmp(r->faults[i].filter, filter->filter) == 0)
			return &r->faults[i].fi;
	return &filter->fi;
}

struct mtd_rt_xroutes *mtd_xds_routes_bind(const struct mtd_cfg *cfg, struct mtd_xds_routes_box *box,
                                           const struct mtd_xds_fault *filter, char *why, size_t whylen)
{
	const struct mtd_xds_routes *r = box->r;
	struct mtd_rt_xroutes *xr = calloc(1, sizeof(*xr));
	struct by_cluster *idx = calloc(cfg->n_routed ? cfg->n_routed : 1, sizeof(*idx));
	size_t n_idx = 0;
	char buf[1024];

	if (xr != NULL)
		mtd_ref_init(&xr->ref);
	if (xr == NULL || idx == NULL)
		goto oom;
	for (size_t i = 0; i < cfg->n_routed; i++)
		if (cfg->services[i].local->source == MTD_CFG_SOURCE_XDS)
			idx[n_idx++] = (struct by_cluster){cfg->services[i].local->xds_cluster, (int)i};
	qsort(idx, n_idx, sizeof(*idx), cmp_cluster);
	snprintf(buf, sizeof(buf), "route configuration %.400s", r->name);
	xr->name = strdup(buf);
	xr->rules = calloc(r->n ? r->n : 1, sizeof(*xr->rules));
	xr->r = calloc(r->n ? r->n : 1, sizeof(*xr->r));
	if (xr->name == NULL || xr->rules == NULL || xr->r == NULL)
		goto oom;
	xr->n = r->n;
	for (size_t i = 0; i < r->n; i++) {
		const struct mtd_xds_route *src = &r->routes[i];
		struct mtd_rt_xroute *dst = &xr->r[i];
		const char *rname = src->name ? src->name : "(unnamed)";

		xr->rules[i] = src->rule;
		xr->rules[i].to = (int)i;
		dst->name = src->name ? src->name : xr->name;
		dst->deadline_cap_ms = src->act.deadline_cap_ms;
		if (src->act.hash_header != NULL) {
			/* hash_policy: the header's value is the calls' hash key. */
			dst->hash_key.kind = MTD_CFG_HASH_HEADER;
			dst->hash_key.header = src->act.hash_header;
		}
		const struct mtd_cfg_fault_injection *fi = route_fault(src, filter);
		if (fi != NULL && (fi->abort || fi->delay)) {
			dst->fault_injection = *fi;
			dst->has_fault_injection = true;
		}
		if (src->act.n_clusters == 0)
			continue;
		dst->targets = calloc(src->act.n_clusters, sizeof(*dst->targets));
		if (dst->targets == NULL)
			goto oom;
		for (size_t k = 0; k < src->act.n_clusters; k++) {
			struct mtd_rt_xtarget *t = &dst->targets[dst->n_targets];
			int si = find_service(cfg, idx, n_idx, src->act.clusters[k], buf, sizeof(buf));
			if (si < 0) {
				snprintf(why, whylen, "route %zu (%.128s): %s", i, rname, buf);
				goto fail;
			}
			if (src->act.weights[k] == 0)
				continue; /* never drawn */
			dst->total += src->act.weights[k];
			t->service = si;
			t->upto = dst->total;
			xroute_fault(t, &cfg->services[si], &src->act);
			dst->n_targets++;
		}
	}
	free(idx);
	box->refs++;
	xr->owner = box;
	xr->owner_free = box_release;
	return xr;
oom:
	snprintf(why, whylen, "out of memory");
fail:
	free(idx);
	mtd_rt_xroutes_unref(xr);
	return NULL;
}

/* ---- services created for the routes' clusters ----------------------------------- */

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool in_sorted(const char **v, size_t n, const char *s)
{
	return n != 0 && bsearch(&s, v, n, sizeof(*v), cmp_str) != NULL;
}

int mtd_xds_routes_created(const struct mtd_cfg *cfg, const struct mtd_xds_routes *r, const char ***out, size_t *n)
{
	size_t n_file = 0, n_all = 0, n_out = 0;

	*out = NULL;
	*n = 0;
	for (size_t i = 0; i < r->n; i++)
		n_all += r->routes[i].act.n_clusters;
	/* What the file's services take: their clusters and their names. */
	const char **taken = calloc(2 * cfg->n_routed + 1, sizeof(*taken));
	const char **want = calloc(n_all + 1, sizeof(*want));
	if (taken == NULL || want == NULL) {
		free(taken);
		free(want);
		return -ENOMEM;
	}
	for (size_t i = 0; i < cfg->n_routed; i++) {
		const struct mtd_cfg_service *s = &cfg->services[i];
		if (s->local->xds_created)
			continue;
		taken[n_file++] = s->local->name;
		if (s->local->source == MTD_CFG_SOURCE_XDS)
			taken[n_file++] = s->local->xds_cluster;
	}
	qsort(taken, n_file, sizeof(*taken), cmp_str);
	for (size_t i = 0; i < r->n; i++)
		for (size_t k = 0; k < r->routes[i].act.n_clusters; k++) {
			const char *c = r->routes[i].act.clusters[k];
			if (!in_sorted(taken, n_file, c))
				want[n_out++] = c;
		}
	free(taken);
	qsort(want, n_out, sizeof(*want), cmp_str);
	size_t u = 0;
	for (size_t i = 0; i < n_out; i++)
		if (u == 0 || strcmp(want[u - 1], want[i]) != 0)
			want[u++] = want[i];
	*out = want;
	*n = u;
	return 0;
}

bool mtd_xds_routes_created_same(const struct mtd_cfg *cfg, const char *const *names, size_t n)
{
	size_t have = 0;

	for (size_t i = 0; i < cfg->n_routed; i++) {
		if (!cfg->services[i].local->xds_created)
			continue;
		if (have == n || !in_sorted((const char **)names, n, cfg->services[i].local->name))
			return false;
		have++;
	}
	return have == n;
}
