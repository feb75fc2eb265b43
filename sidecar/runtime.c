/* The runtime snapshot: the validated config plus what the data plane needs
 * to serve it (route table, endpoint stats, pickers, TLS contexts). Built
 * once on the control thread, then read by every worker without locks. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "sidecar/sidecar.h"

static void service_free(struct mtd_rt_service *s)
{
	if (s->methods) {
		for (size_t i = 0; i < s->cfg->n_methods; i++)
			mtd_lb_picker_free(s->methods[i].picker);
		free(s->methods);
	}
	mtd_lb_picker_free(s->picker);
	free(s->budget);
	if (s->ssl_ctx)
		mtd_tls_ctx_free(s->ssl_ctx);
	free(s->lb_eps);
	free(s->eps);
}

static bool same_file(const char *a, const char *b)
{
	return a == b || (a && b && strcmp(a, b) == 0);
}

/* A TLS context already built for an earlier service with the same files:
 * contexts differ only by them (the server name is set per connection),
 * and each costs its CA store (860 KiB for the system bundle). */
static struct ssl_ctx_st *shared_ctx(const struct mtd_rt_service *built, size_t n, const struct mtd_cfg_tls *tls)
{
	for (size_t i = 0; i < n; i++) {
		const struct mtd_cfg_tls *t = built[i].cfg->tls;
		if (built[i].ssl_ctx && same_file(t->ca_file, tls->ca_file) &&
		    same_file(t->cert_file, tls->cert_file) && same_file(t->key_file, tls->key_file))
			return built[i].ssl_ctx;
	}
	return NULL;
}

/* Build s from cfg; `built` holds the n services built before it. */
static int service_init(struct mtd_rt_service *s, const struct mtd_cfg_service *cfg, const struct mtd_rt_service *built,
                        size_t n_built, size_t *next_slot, int64_t now_ms, char *err, size_t errlen)
{
	s->cfg = cfg;
	s->n_eps = cfg->n_endpoints;
	s->eps = calloc(s->n_eps, sizeof(*s->eps));
	s->lb_eps = calloc(s->n_eps, sizeof(*s->lb_eps));
	s->methods = calloc(cfg->n_methods ? cfg->n_methods : 1, sizeof(*s->methods));
	s->budget = calloc(1, sizeof(*s->budget));
	if (!s->eps || !s->lb_eps || !s->methods || !s->budget)
		goto nomem;
	for (size_t i = 0; i < s->n_eps; i++) {
		s->eps[i].cfg = &cfg->endpoints[i];
		s->eps[i].slot = (*next_slot)++;
		s->lb_eps[i] = (struct mtd_lb_endpoint){
		        .id = cfg->endpoints[i].addr.text,
		        .weight = cfg->endpoints[i].weight,
		        /* Issue 3: a registry record's start time, else the moment
		         * maitred first saw the endpoint. Static endpoints are all
		         * seen at start-up, so warmup stays inert for them (every
		         * endpoint is new) until discovery adds one later. */
		        .start_ms = now_ms,
		        .stats = &s->eps[i].stats,
		        .user = &s->eps[i],
		};
	}
	/* Config validation rejects every option set a picker would refuse;
	 * what is left is memory (or an OpenSSL without MD5 for the ring). */
	s->picker = mtd_lb_picker_new(&cfg->lb, s->lb_eps, s->n_eps, NULL);
	if (!s->picker) {
		snprintf(err, errlen, "service %s: cannot build the %s picker (out of memory?)", cfg->name,
		         cfg->lb.ops->name);
		return -1;
	}
	for (size_t i = 0; i < cfg->n_methods; i++) {
		s->methods[i].cfg = &cfg->methods[i];
		s->methods[i].picker = mtd_lb_picker_new(&cfg->methods[i].lb, s->lb_eps, s->n_eps, NULL);
		if (!s->methods[i].picker) {
			snprintf(err, errlen, "service %s, method %s: cannot build the %s picker (out of memory?)",
			         cfg->name, cfg->methods[i].name, cfg->methods[i].lb.ops->name);
			return -1;
		}
	}
	if (cfg->tls) {
		char why[256];
		struct ssl_ctx_st *same = shared_ctx(built, n_built, cfg->tls);
		s->ssl_ctx = same ? mtd_tls_ctx_ref(same) : mtd_tls_client_ctx_new(cfg->tls, why, sizeof(why));
		if (!s->ssl_ctx) {
			snprintf(err, errlen, "service %s: TLS: %s", cfg->name, why);
			return -1;
		}
	}
	return 0;
nomem:
	snprintf(err, errlen, "service %s: out of memory", cfg->name);
	return -1;
}

struct mtd_runtime *mtd_runtime_new(struct mtd_cfg *cfg, char *err, size_t errlen)
{
	struct mtd_runtime *rt = calloc(1, sizeof(*rt));
	const char **names = calloc(cfg->n_services ? cfg->n_services : 1, sizeof(*names));
	if (!rt || !names)
		goto nomem;
	rt->cfg = cfg;
	rt->services = calloc(cfg->n_services ? cfg->n_services : 1, sizeof(*rt->services));
	if (!rt->services)
		goto nomem;
	int64_t now_ms = mtd_wall_ms();
	for (size_t i = 0; i < cfg->n_services; i++) {
		names[i] = cfg->services[i].name;
		if (service_init(&rt->services[i], &cfg->services[i], rt->services, i, &rt->n_slots, now_ms, err,
		                 errlen) < 0)
			goto fail;
	}
	rt->routes = mtd_route_table_new(names, cfg->n_services);
	if (!rt->routes)
		goto nomem;
	free(names);
	return rt;
nomem:
	snprintf(err, errlen, "out of memory");
fail:
	free(names);
	if (rt)
		mtd_runtime_free(rt); /* frees cfg too */
	else
		mtd_cfg_free(cfg);
	return NULL;
}

void mtd_runtime_free(struct mtd_runtime *rt)
{
	if (!rt)
		return;
	if (rt->services) {
		size_t n = rt->cfg ? rt->cfg->n_services : 0;
		for (size_t i = 0; i < n; i++)
			if (rt->services[i].cfg)
				service_free(&rt->services[i]);
		free(rt->services);
	}
	mtd_route_table_free(rt->routes);
	mtd_cfg_free(rt->cfg);
	free(rt);
}

void mtd_runtime_tick(struct mtd_runtime *rt)
{
	int64_t now_ms = mtd_wall_ms(), now_ns = mtd_now_ns();
	for (size_t i = 0; i < rt->cfg->n_services; i++) {
		struct mtd_rt_service *s = &rt->services[i];
		mtd_lb_tick(s->picker, now_ms, now_ns);
		for (size_t m = 0; m < s->cfg->n_methods; m++)
			mtd_lb_tick(s->methods[m].picker, now_ms, now_ns);
	}
}
