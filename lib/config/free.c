/* mtd_cfg_free(): every string and array the build allocated, whatever
 * the build reached before it stopped (an error or a failed allocation). */
#include <config.h> /* autoconf (lib/config/config.h is the API) */

#include "config/config-int.h"
#include "config/config.h"

static void addr_fini(struct mtd_cfg_addr *a)
{
	mtd_cfg__free(a->text);
	a->text = NULL;
	mtd_cfg__free(a->host);
	a->host = NULL;
}

static void fault_fini(struct mtd_fault_policy *f)
{
	mtd_cfg__free(f->fallback.message);
	f->fallback.message = NULL;
	mtd_cfg__free(f->fallback.response);
	f->fallback.response = NULL;
}

static void routing_fini(struct mtd_cfg_routing *r)
{
	mtd_cfg__free(r->header);
	mtd_cfg__free(r->metadata_key);
	r->header = r->metadata_key = NULL;
}

static void split_free(struct mtd_cfg_split *sp)
{
	if (sp == NULL)
		return;
	for (size_t k = 0; k < sp->lb.n; k++)
		mtd_cfg__free((char *)sp->weights[k].value);
	mtd_cfg__free(sp->weights);
	mtd_cfg__free(sp->metadata_key);
	mtd_cfg__free(sp);
}

static void route_fini(struct mtd_route_rule *r)
{
	mtd_cfg__free((char *)r->service);
	mtd_cfg__free((char *)r->method);
	mtd_cfg__free((char *)r->header);
	mtd_cfg__free((char *)r->value);
}

static void tls_free(struct mtd_cfg_tls *t)
{
	if (t == NULL)
		return;
	mtd_cfg__free(t->ca_file);
	mtd_cfg__free(t->server_name);
	mtd_cfg__free(t->cert_file);
	mtd_cfg__free(t->key_file);
	mtd_cfg__free(t->server_identity);
	for (size_t i = 0; i < t->n_allowed_identities; i++)
		mtd_cfg__free(t->allowed_identities[i]);
	mtd_cfg__free(t->allowed_identities);
	mtd_cfg__free(t);
}

static void etcd_free(struct mtd_cfg_etcd *e)
{
	if (e == NULL)
		return;
	for (size_t i = 0; i < e->n_endpoints; i++)
		addr_fini(&e->endpoints[i]);
	mtd_cfg__free(e->endpoints);
	mtd_cfg__free(e->prefix);
	tls_free(e->tls);
	mtd_cfg__free(e->username);
	mtd_cfg__free(e->password_file);
	mtd_cfg__free(e);
}

static void service_fini(struct mtd_cfg_service *s)
{
	mtd_cfg__free(s->local->name);
	mtd_cfg__free(s->local->hash_key.header);
	mtd_cfg__free(s->local->authority);
	tls_free(s->tls);
	for (size_t i = 0; i < s->local->n_endpoints; i++) {
		addr_fini(&s->local->endpoints[i].addr);
		mtd_cfg__free(s->local->endpoints[i].zone);
		for (size_t k = 0; k < s->local->endpoints[i].n_meta; k++) {
			mtd_cfg__free((char *)s->local->endpoints[i].meta[k].key);
			mtd_cfg__free((char *)s->local->endpoints[i].meta[k].value);
		}
		mtd_cfg__free(s->local->endpoints[i].meta);
	}
	mtd_cfg__free(s->local->endpoints);
	etcd_free(s->local->etcd);
	mtd_cfg__free(s->local->xds_cluster);
	routing_fini(&s->local->routing);
	if (s->local->dns != NULL) {
		mtd_cfg__free(s->local->dns->name);
		for (size_t i = 0; i < s->local->dns->n_resolvers; i++)
			addr_fini(&s->local->dns->resolvers[i]);
		mtd_cfg__free(s->local->dns->resolvers);
		mtd_cfg__free(s->local->dns);
	}
	for (size_t i = 0; i < s->n_methods; i++) {
		mtd_cfg__free(s->methods[i].name);
		mtd_cfg__free(s->methods[i].hash_key.header);
		if (s->methods[i].fault_own)
			fault_fini(&s->methods[i].fault);
		if (s->methods[i].routing_own)
			routing_fini(&s->methods[i].routing);
		if (s->methods[i].split_own)
			split_free(s->methods[i].split);
	}
	split_free(s->local->split);
	mtd_cfg__free(s->methods);
	fault_fini(&s->local->fault);
	mtd_cfg__free(s->local->health_check.service_name);
}

void mtd_cfg_free(struct mtd_cfg *cfg)
{
	if (cfg == NULL)
		return;
	for (size_t i = 0; i < cfg->n_services; i++)
		service_fini(&cfg->services[i]);
	mtd_cfg__free(cfg->services);
	mtd_cfg__free(cfg->service_locals);
	for (size_t i = 0; i < cfg->n_routes; i++)
		route_fini(&cfg->routes[i]);
	mtd_cfg__free(cfg->routes);
	for (size_t i = 0; i < cfg->n_registers; i++) {
		mtd_cfg__free(cfg->registers[i].identity_cert);
		mtd_cfg__free(cfg->registers[i].service);
		addr_fini(&cfg->registers[i].address);
		etcd_free(cfg->registers[i].etcd);
	}
	mtd_cfg__free(cfg->registers);
	for (size_t i = 0; i < cfg->n_inbound; i++) {
		struct mtd_cfg_inbound *in = &cfg->inbound[i];

		addr_fini(&in->listen);
		addr_fini(&in->app);
		mtd_cfg__free(in->cert_file);
		mtd_cfg__free(in->key_file);
		mtd_cfg__free(in->client_ca_file);
		for (size_t r = 0; r < in->authz.n_rules; r++) {
			struct mtd_authz_rule *rule = &in->authz.rules[r];

			for (size_t k = 0; k < rule->n_principals; k++)
				mtd_cfg__free(rule->principals[k]);
			for (size_t k = 0; k < rule->n_methods; k++)
				mtd_cfg__free(rule->methods[k]);
			mtd_cfg__free(rule->principals);
			mtd_cfg__free(rule->methods);
		}
		mtd_cfg__free(in->authz.rules);
	}
	mtd_cfg__free(cfg->inbound);
	addr_fini(&cfg->listen);
	if (cfg->log.access != NULL) {
		mtd_cfg__free(cfg->log.access->path);
		mtd_cfg__free(cfg->log.access);
	}
	mtd_cfg__free(cfg->pb);
	if (cfg->admin != NULL) {
		addr_fini(cfg->admin);
		mtd_cfg__free(cfg->admin);
	}
	if (cfg->tracing != NULL) {
		struct mtd_cfg_tracing *t = cfg->tracing;
		mtd_cfg__free(t->endpoint);
		mtd_cfg__free(t->host);
		mtd_cfg__free(t->path);
		tls_free(t->tls);
		for (size_t i = 0; i < t->n_headers; i++) {
			mtd_cfg__free(t->header_names[i]);
			mtd_cfg__free(t->header_values[i]);
		}
		mtd_cfg__free(t->header_names);
		mtd_cfg__free(t->header_values);
		mtd_cfg__free(t->service_name);
		mtd_cfg__free(t);
	}
	mtd_cfg__free(cfg->zone);
	mtd_cfg__free(cfg->node_id);
	if (cfg->xds != NULL) {
		addr_fini(&cfg->xds->server);
		mtd_cfg__free(cfg->xds->node_id);
		mtd_cfg__free(cfg->xds->zone);
		tls_free(cfg->xds->tls);
		mtd_cfg__free(cfg->xds->bootstrap);
		mtd_cfg__free(cfg->xds->listener);
		mtd_cfg_cert_providers_fini(&cfg->xds->providers);
		mtd_cfg__free(cfg->xds);
	}
	mtd_cfg__free(cfg->source);
	mtd_cfg__free(cfg);
}
