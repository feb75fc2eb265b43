/* One service's snapshot (runtime-int.h mtd_rt__service_build): its
 * endpoints' identities carried over from the snapshot it replaces, what
 * the pickers read of them, its pickers and routing layers, its TLS
 * context, and the state that outlives a rebuild. Control thread. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "discovery/discovery.h"
#include "health/outlier.h"
#include "lb/lb.h"
#include "sidecar/control/runtime-int.h"
#include "sidecar/control/runtime.h"
#include "sidecar/io/transport.h"

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

bool mtd_rt__same_file(const char *a, const char *b)
{
	return a == b || (a && b && strcmp(a, b) == 0);
}

bool mtd_rt__same_tls(const struct mtd_cfg_tls *a, const struct mtd_cfg_tls *b)
{
	if ((a == NULL) != (b == NULL))
		return false;
	return !a || (mtd_rt__same_file(a->ca_file, b->ca_file) && mtd_rt__same_file(a->server_name, b->server_name) &&
	              mtd_rt__same_file(a->cert_file, b->cert_file) && mtd_rt__same_file(a->key_file, b->key_file));
}

/* Two services' upstream TLS settings are one policy (runtime-t.h
 * tls_gen): both cleartext, or the same files and server name, identity
 * rule and allowed_identities. By value: files whose content changed
 * under the same names are the same policy, whether certwatch or a reload
 * read them again. */
static bool tls_policy_same(const struct mtd_cfg_tls *a, const struct mtd_cfg_tls *b)
{
	if (!mtd_rt__same_tls(a, b))
		return false;
	if (!a)
		return true;
	if (a->n_allowed_identities != b->n_allowed_identities)
		return false;
	for (size_t i = 0; i < a->n_allowed_identities; i++)
		if (strcmp(a->allowed_identities[i], b->allowed_identities[i]) != 0)
			return false;
	return mtd_rt__same_file(a->server_identity, b->server_identity) &&
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
		if (built[i]->ssl_ctx && t && mtd_rt__same_file(t->ca_file, tls->ca_file) &&
		    mtd_rt__same_file(t->cert_file, tls->cert_file) && mtd_rt__same_file(t->key_file, tls->key_file) &&
		    mtd_rt__same_file(t->server_identity, tls->server_identity) &&
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

/* Method i of s->cfg in prev (the same name), or -1. */
static ptrdiff_t prev_method(const struct mtd_rt_service *prev, const struct mtd_cfg_service *cfg, size_t i)
{
	for (size_t m = 0; prev && m < prev->cfg->n_methods; m++)
		if (strcmp(prev->cfg->methods[m].name, cfg->methods[i].name) == 0)
			return (ptrdiff_t)m;
	return -1;
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
		ptrdiff_t k = prev_method(prev, cfg, m);
		const struct mtd_outlier_set *was = k >= 0 ? prev->methods[k].outliers : NULL;
		s->methods[m].outliers = mtd_outlier_set_new(&cfg->outlier, ids, s->n_eps, was, now_ms);
		if (!s->methods[m].outliers)
			rc = -1;
	}
	free(ids);
	return rc;
}

static bool awaiting_of(const struct mtd_rt_build *b)
{
	return b->awaiting == MTD_RT_AWAIT_AS_PREV ? b->prev && b->prev->awaiting
	                                           : b->awaiting == MTD_RT_AWAIT_WAITING;
}

/* s's endpoints: b->eps, each the identity b->prev had for it (matched by
 * key and address; another identity presented is another endpoint: its
 * pools connect expecting the identity they were made for) or a new one,
 * and what the pickers read of them (s->lb_eps). *changed: the set, an
 * order, a weight, an attribute or a start differs from prev's. 0, or
 * -ENOMEM, or -EINVAL with err. */
static int take_endpoints(const struct mtd_rt_build *b, struct mtd_rt_service *s, bool *changed, char *err,
                          size_t errlen)
{
	const struct mtd_cfg_service *cfg = b->cfg;
	const struct mtd_rt_service *prev = b->prev;
	const struct mtd_disc_endpoint *eps = b->eps;
	size_t n = b->n, n_old = prev ? prev->n_eps : 0, dup = 0;
	struct mtd_disc_diff diff = {0};
	int64_t now_ms = mtd_wall_ms();
	int rc = -ENOMEM;

	struct mtd_disc_id *old_ids = calloc(n_old ? n_old : 1, sizeof(*old_ids));
	size_t *map = calloc(n ? n : 1, sizeof(*map));
	if (!old_ids || !map)
		goto done;
	for (size_t i = 0; i < n_old; i++)
		old_ids[i] = (struct mtd_disc_id){mtd_endpoint_key(prev->eps[i]), mtd_endpoint_text(prev->eps[i])};
	rc = mtd_disc_match(old_ids, n_old, eps, n, map, &diff, &dup);
	if (rc == -ENOMEM)
		goto done;
	if (rc < 0) {
		snprintf(err, errlen, "service %s: endpoint %s%s%s given twice", cfg->local->name,
		         eps[dup].key ? eps[dup].key : "", eps[dup].key ? " " : "",
		         eps[dup].address ? eps[dup].address : "(no address)");
		rc = -EINVAL;
		goto done;
	}
	*changed = diff.added || diff.removed;
	for (size_t i = 0; i < n; i++) {
		struct mtd_endpoint *ep;
		const char *id = eps[i].identity && eps[i].identity[0] ? eps[i].identity : NULL;
		if (map[i] != SIZE_MAX && !mtd_rt__same_file(mtd_endpoint_identity(prev->eps[map[i]]), id)) {
			map[i] = SIZE_MAX;
			*changed = true;
		}
		if (map[i] != SIZE_MAX) {
			ep = prev->eps[map[i]];
			mtd_ref_get(&ep->ref);
			if (prev->lb_eps[map[i]].weight != eps[i].weight ||
			    !attr_same(&prev->lb_eps[map[i]], prev->attrs ? &prev->attrs[map[i]] : NULL, &eps[i]) ||
			    (eps[i].start_ms > 0 && eps[i].start_ms != ep->start_ms) ||
			    prev->lb_eps[map[i]].start_ms < ep->returned_ms || map[i] != i)
				*changed = true;
		} else {
			sa_family_t fam = eps[i].sa.ss_family;
			socklen_t need = fam == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
			if ((fam != AF_INET && fam != AF_INET6) || eps[i].salen < need) {
				snprintf(err, errlen, "service %s: endpoint %s has no address", cfg->local->name,
				         eps[i].address);
				rc = -EINVAL;
				goto done;
			}
			/* SNI and certificate name default (upstream.c): the name a
			 * DNS service resolves, or a static endpoint was written
			 * with, else the address's host. */
			const char *host = b->hosts          ? b->hosts[i]
			                   : cfg->local->dns ? cfg->local->dns->name
			                                     : static_host(cfg, eps[i].key);
			ep = mtd_endpoint_new(&eps[i], host, b->n_workers, now_ms);
			if (!ep) {
				rc = -ENOMEM;
				goto done;
			}
		}
		s->eps[i] = ep;
		s->n_eps = i + 1;
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
	rc = 0;
done:
	free(old_ids);
	free(map);
	return rc;
}

/* What the routing layer reads of s's endpoints (lb_eps[i].attrs): the
 * zone's record, or the endpoint's own when it has metadata. 0 or
 * -ENOMEM. */
static int take_attrs(const struct mtd_rt_build *b, struct mtd_rt_service *s)
{
	const struct mtd_disc_endpoint *eps = b->eps;
	size_t n = b->n, zones_cap = 0;
	bool any_attr = false;

	for (size_t i = 0; i < n; i++) {
		any_attr |= eps[i].n_metadata > 0;
		if (eps[i].zone && eps[i].zone[0] && !(s->lb_eps[i].attrs = zone_intern(s, &zones_cap, eps[i].zone)))
			return -ENOMEM;
	}
	if (!any_attr)
		return 0;
	s->attrs = calloc(n, sizeof(*s->attrs));
	if (!s->attrs)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		if (attr_copy(&s->attrs[i], &eps[i]) < 0)
			return -ENOMEM;
		if (s->attrs[i].a.meta.n == 0)
			continue;
		s->attrs[i].a.zone = s->lb_eps[i].attrs ? s->lb_eps[i].attrs->zone : NULL;
		s->lb_eps[i].attrs = &s->attrs[i].a;
	}
	return 0;
}

/* s's pickers and routing layers, the service's and each method's, each
 * built with prev's as `prev`: they carry a strategy's history (lb.h;
 * lib/lb ignores a prev of another strategy, as a reload may change the
 * policy). Config validation rejects every option set a picker would
 * refuse for static endpoints; a discovered set may still be refused
 * (MAGLEV table_size below the endpoint count): -EINVAL with err, and
 * the old set stays then. */
static int build_pickers(const struct mtd_rt_build *b, struct mtd_rt_service *s, char *err, size_t errlen)
{
	const struct mtd_cfg_service *cfg = b->cfg;
	const struct mtd_rt_service *prev = b->prev;

	s->picker = mtd_lb_picker_new(&cfg->lb, s->lb_eps, s->n_eps, prev ? prev->picker : NULL);
	if (!s->picker) {
		snprintf(err, errlen, "service %s: cannot build the %s picker over %zu endpoints", cfg->local->name,
		         cfg->lb.ops->name, s->n_eps);
		return -EINVAL;
	}
	if (layer_wanted(&cfg->local->layer)) {
		s->layer = mtd_lb_layer_new(&cfg->local->layer, &cfg->lb, s->lb_eps, s->n_eps, prev ? prev->layer : NULL);
		if (!s->layer) {
			snprintf(err, errlen, "service %s: cannot build the routing layer over %zu endpoints",
			         cfg->local->name, s->n_eps);
			return -EINVAL;
		}
	}
	log_readmitted(cfg->local->name, "*", prev ? prev->layer : NULL, s->layer);
	for (size_t i = 0; i < cfg->n_methods; i++) {
		ptrdiff_t m = prev_method(prev, cfg, i);
		s->methods[i].cfg = &cfg->methods[i];
		s->methods[i].picker = mtd_lb_picker_new(&cfg->methods[i].lb, s->lb_eps, s->n_eps,
		                                         m >= 0 ? prev->methods[m].picker : NULL);
		if (layer_wanted(&cfg->methods[i].layer)) {
			const struct mtd_lb_layer *lprev = m >= 0 ? prev->methods[m].layer : NULL;
			s->methods[i].layer = mtd_lb_layer_new(&cfg->methods[i].layer, &cfg->methods[i].lb, s->lb_eps,
			                                       s->n_eps, lprev);
			if (!s->methods[i].layer) {
				snprintf(err, errlen,
				         "service %s, method %s: cannot build the routing layer over %zu endpoints",
				         cfg->local->name, cfg->methods[i].name, s->n_eps);
				return -EINVAL;
			}
			log_readmitted(cfg->local->name, cfg->methods[i].name, lprev, s->methods[i].layer);
		}
		if (!s->methods[i].picker) {
			snprintf(err, errlen, "service %s, method %s: cannot build the %s picker over %zu endpoints",
			         cfg->local->name, cfg->methods[i].name, cfg->methods[i].lb.ops->name, s->n_eps);
			return -EINVAL;
		}
	}
	return 0;
}

/* s's TLS policy generation and client context: b->ssl_ctx (the files
 * read again), else prev's for the same policy, else one an earlier
 * service of the runtime built from the same files, else a new one. 0,
 * or -EINVAL with err. */
static int take_tls(const struct mtd_rt_build *b, struct mtd_rt_service *s, char *err, size_t errlen)
{
	const struct mtd_cfg_service *cfg = b->cfg;
	const struct mtd_rt_service *prev = b->prev;

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
			return -EINVAL;
		}
	}
	return 0;
}

/* What outlives a rebuild of the service, taken from prev: the retry
 * budget's window, the circuit breaker's counts, the health state, the
 * rate limits' tokens, the unavailable message (unless b replaces it).
 * 0 or -ENOMEM. */
static int carry_state(const struct mtd_rt_build *b, struct mtd_rt_service *s)
{
	const struct mtd_cfg_service *cfg = b->cfg;
	const struct mtd_rt_service *prev = b->prev;

	if (prev && prev->budget_box) {
		mtd_ref_get(&prev->budget_box->ref);
		s->budget_box = prev->budget_box;
	} else {
		s->budget_box = calloc(1, sizeof(*s->budget_box));
		if (!s->budget_box)
			return -ENOMEM;
		mtd_ref_init(&s->budget_box->ref);
	}
	s->budget = &s->budget_box->b;
	if (prev && prev->load) {
		mtd_ref_get(&prev->load->ref);
		s->load = prev->load;
	} else {
		s->load = calloc(1, sizeof(*s->load));
		if (!s->load)
			return -ENOMEM;
		mtd_ref_init(&s->load->ref);
	}
	if (health_init(s, prev, mtd_mono_ms()) < 0)
		return -ENOMEM;
	bool oom = false;
	s->limit = bucket_for(&cfg->local->rate_limit, prev ? prev->limit : NULL, &oom);
	for (size_t i = 0; i < cfg->n_methods; i++) {
		ptrdiff_t m = prev_method(prev, cfg, i);
		s->methods[i].limit = bucket_for(&cfg->methods[i].rate_limit, m >= 0 ? prev->methods[m].limit : NULL, &oom);
	}
	if (oom)
		return -ENOMEM;
	const char *msg = b->set_unavailable ? b->unavailable : prev && prev->cfg == cfg ? prev->unavailable : NULL;
	if (msg && !(s->unavailable = strdup(msg)))
		return -ENOMEM;
	return 0;
}

struct mtd_rt_service *mtd_rt__service_build(const struct mtd_rt_build *b, bool *same, char *err, size_t errlen)
{
	const struct mtd_cfg_service *cfg = b->cfg;
	const struct mtd_rt_service *prev = b->prev;
	size_t n = b->n;
	struct mtd_rt_service *s = calloc(1, sizeof(*s));
	bool changed = false;
	int rc = -ENOMEM;

	*same = false;
	if (!s)
		goto fail;
	mtd_ref_init(&s->ref);
	mtd_ref_get(&b->box->ref);
	s->cfgbox = b->box;
	s->cfg = cfg;
	if (b->over) {
		mtd_ref_get(&b->over->ref);
		s->over = b->over;
	}
	if (n > MTD_LB_MAX_ENDPOINTS) {
		snprintf(err, errlen, "service %s: %zu endpoints, at most %u", cfg->local->name, n,
		         MTD_LB_MAX_ENDPOINTS);
		rc = -EINVAL;
		goto fail;
	}
	s->eps = calloc(n ? n : 1, sizeof(*s->eps));
	s->lb_eps = calloc(n ? n : 1, sizeof(*s->lb_eps));
	s->methods = calloc(cfg->n_methods ? cfg->n_methods : 1, sizeof(*s->methods));
	if (!s->eps || !s->lb_eps || !s->methods || (rc = take_endpoints(b, s, &changed, err, errlen)) != 0)
		goto fail;
	s->awaiting = awaiting_of(b);
	if (prev && !changed && prev->cfg == cfg && !b->force && s->awaiting == prev->awaiting) {
		*same = true; /* not an error: nothing to build */
		rc = 0;
		goto fail;
	}
	if ((rc = take_attrs(b, s)) != 0 || (rc = build_pickers(b, s, err, errlen)) != 0 ||
	    (rc = take_tls(b, s, err, errlen)) != 0 || (rc = carry_state(b, s)) != 0)
		goto fail;
	return s;
fail:
	if (rc == -ENOMEM)
		snprintf(err, errlen, "service %s: out of memory", cfg ? cfg->local->name : "?");
	if (s)
		mtd_rt__service_free(s);
	return NULL;
}
