/* Mesh mode: the inbound[] listeners, their authorization, the service
 * each one's app gets, and the checks of their addresses against the
 * other listeners and the register entries. */
#include <config.h> /* autoconf (lib/config/config.h is the API) */

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "authz/authz.h"
#include "core/addr.h"
#include "config/build-int.h"

static void build_authz(struct builder *b, const PbAuthz *m, const char *path, bool has_ca,
                        struct mtd_authz_policy *out)
{
	char p[256];

	out->def = MTD_AUTHZ_DENY;
	if (m == NULL)
		return;
	switch (m->default_) {
	case MAITRED__CONFIG__V1__AUTHORIZATION__DEFAULT__ALLOW_AUTHENTICATED:
		out->def = MTD_AUTHZ_ALLOW_AUTHENTICATED;
		if (!has_ca)
			BERR(mtd_cfg__at(b, m, "default", NULL), mtd_cfg__sub(p, sizeof(p), path, "default"),
			     "ALLOW_AUTHENTICATED needs tls.client_ca_file (without it no caller has an identity)");
		break;
	case MAITRED__CONFIG__V1__AUTHORIZATION__DEFAULT__ALLOW_ALL:
		out->def = MTD_AUTHZ_ALLOW_ALL;
		break;
	default:
		break;
	}
	if (m->n_rules == 0)
		return;
	out->rules = mtd_cfg__calloc(m->n_rules, sizeof(*out->rules));
	if (out->rules == NULL) {
		b->d->oom = true;
		return;
	}
	out->n_rules = m->n_rules;
	for (size_t i = 0; i < m->n_rules; i++) {
		const PbAuthzRule *r = m->rules[i];
		struct mtd_authz_rule *o = &out->rules[i];
		char rpath[160];
		const char *why = NULL;

		snprintf(rpath, sizeof(rpath), "%s.rules[%zu]", path, i);
		if (r->n_principals == 0 && r->n_methods == 0)
			BERR(mtd_cfg__at(b, r, NULL, NULL), rpath,
			     "needs principals or methods (a rule with neither would allow every authenticated "
			     "caller: that is default ALLOW_AUTHENTICATED)");
		if (!has_ca)
			BERR(mtd_cfg__at(b, r, NULL, NULL), rpath,
			     "a rule needs tls.client_ca_file (without it no caller has an identity, so no rule "
			     "can match)");
		o->principals = mtd_cfg__calloc(r->n_principals ? r->n_principals : 1, sizeof(*o->principals));
		o->methods = mtd_cfg__calloc(r->n_methods ? r->n_methods : 1, sizeof(*o->methods));
		if (o->principals == NULL || o->methods == NULL) {
			b->d->oom = true;
			return;
		}
		for (size_t k = 0; k < r->n_principals; k++) {
			snprintf(p, sizeof(p), "%s.principals[%zu]", rpath, k);
			if (!mtd_authz_principal_ok(r->principals[k], &why))
				BERR(mtd_cfg__at(b, r, "principals", NULL), p, "\"%s\": %s", r->principals[k], why);
			o->principals[k] = mtd_cfg__dup_or_oom(b, r->principals[k]);
			o->n_principals = k + 1;
		}
		for (size_t k = 0; k < r->n_methods; k++) {
			snprintf(p, sizeof(p), "%s.methods[%zu]", rpath, k);
			if (!mtd_authz_method_ok(r->methods[k], &why))
				BERR(mtd_cfg__at(b, r, "methods", NULL), p, "\"%s\": %s", r->methods[k], why);
			o->methods[k] = mtd_cfg__dup_or_oom(b, r->methods[k]);
			o->n_methods = k + 1;
		}
		if (b->d->oom)
			return;
	}
}

/* One entry of `inbound`; its app's service is built by the caller. */
void mtd_cfg__build_inbound(struct builder *b, const PbInbound *m, size_t i, struct mtd_cfg_inbound *out)
{
	char path[48], p[256];
	bool has_ca = false;

	snprintf(path, sizeof(path), "inbound[%zu]", i);
	if (m->listen[0] == '\0')
		BERR(mtd_cfg__at(b, m, "listen", m), mtd_cfg__sub(p, sizeof(p), path, "listen"),
		     "is required (where the other sidecars connect, e.g. \"0.0.0.0:15443\")");
	else
		mtd_cfg__build_addr(b, m->listen, mtd_cfg__at(b, m, "listen", m),
		                    mtd_cfg__sub(p, sizeof(p), path, "listen"), &out->listen);
	if (m->app[0] == '\0')
		BERR(mtd_cfg__at(b, m, "app", m), mtd_cfg__sub(p, sizeof(p), path, "app"),
		     "is required (the local app, h2c, e.g. \"127.0.0.1:50051\")");
	else
		mtd_cfg__build_addr(b, m->app, mtd_cfg__at(b, m, "app", m), mtd_cfg__sub(p, sizeof(p), path, "app"),
		                    &out->app);
	if (m->tls == NULL) {
		BERR(mtd_cfg__at(b, m, "tls", m), mtd_cfg__sub(p, sizeof(p), path, "tls"),
		     "is required (cert_file, key_file; client_ca_file to require client certificates)");
	} else {
		const PbInboundTls *t = m->tls;
		char tpath[64];

		snprintf(tpath, sizeof(tpath), "%s.tls", path);
		if (t->cert_file[0] == '\0')
			BERR(mtd_cfg__at(b, t, "cert_file", t), mtd_cfg__sub(p, sizeof(p), tpath, "cert_file"),
			     "is required");
		else
			out->cert_file = mtd_cfg__tls_file(b, t, "cert_file", t->cert_file, tpath);
		if (t->key_file[0] == '\0')
			BERR(mtd_cfg__at(b, t, "key_file", t), mtd_cfg__sub(p, sizeof(p), tpath, "key_file"),
			     "is required");
		else
			out->key_file = mtd_cfg__tls_file(b, t, "key_file", t->key_file, tpath);
		if (t->client_ca_file[0] != '\0') {
			out->client_ca_file = mtd_cfg__tls_file(b, t, "client_ca_file", t->client_ca_file, tpath);
			has_ca = true;
		}
	}
	out->max_concurrent_calls = m->max_concurrent_calls;
	out->max_connections = mtd_cfg__u32_limit(b, m->max_connections, 1024, 1u << 24, m, "max_connections", path);
	out->max_connection_age_ms = mtd_cfg__dur_ms(b, m->max_connection_age, 0, ZERO_ALLOWED,
	                                             mtd_cfg__at(b, m, "max_connection_age", NULL),
	                                             mtd_cfg__sub(p, sizeof(p), path, "max_connection_age"));
	if (out->max_connection_age_ms > 0 && out->max_connection_age_ms < 1000) {
		/* The worker's housekeeping looks once a second (as upstream's). */
		BERR(mtd_cfg__at(b, m, "max_connection_age", NULL), mtd_cfg__sub(p, sizeof(p), path, "max_connection_age"),
		     "must be at least 1s (connections are checked once a second), got %lld ms",
		     (long long)out->max_connection_age_ms);
		out->max_connection_age_ms = 0;
	}
	build_authz(b, m->authorization, mtd_cfg__sub(p, sizeof(p), path, "authorization"), has_ca, &out->authz);
}

/* The service serving inbound entry i's app: the defaults of every
 * service (round robin over the one endpoint, FAILFAST, the upstream
 * pool settings), h2c. Named "inbound:IP:PORT" after the address listen
 * resolved to (mtd_addr_text), never its spelling: a reload that writes
 * "localhost:P" for "127.0.0.1:P" keeps the same listener, so the same
 * service (matched by name: its pool, and the max_concurrent_calls count
 * of calls in flight). Reached by no :path. */
void mtd_cfg__build_inbound_app(struct builder *b, const PbInbound *m, const struct mtd_cfg_addr *listen, size_t i,
                                size_t si, struct mtd_cfg_service *out)
{
	PbService ps = MAITRED__CONFIG__V1__SERVICE__INIT;
	PbEndpoint pe = MAITRED__CONFIG__V1__ENDPOINT__INIT;
	PbEndpoint *eps[1] = {&pe};
	char name[] = "maitred.Inbound"; /* replaced below */

	pe.address = m->app;
	ps.name = name;
	ps.endpoints = eps;
	ps.n_endpoints = 1;
	mtd_cfg__build_service(b, &ps, si, out);
	mtd_cfg__free(out->local->name);
	char key[MTD_ADDR_TEXT_SIZE];
	out->local->name = listen->salen
	                           ? mtd_cfg__asprintf("inbound:%s", mtd_addr_text(&listen->sa.sa, key, sizeof(key)))
	                           : mtd_cfg__asprintf("inbound:%s", m->listen);
	if (out->local->name == NULL)
		b->d->oom = true;
	out->local->inbound = (int)i;
}

static bool is_wildcard(const struct mtd_cfg_addr *a)
{
	if (a->sa.sa.sa_family == AF_INET)
		return ((const struct sockaddr_in *)&a->sa)->sin_addr.s_addr == htonl(INADDR_ANY);
	if (a->sa.sa.sa_family == AF_INET6)
		return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)&a->sa)->sin6_addr);
	return false;
}

/* x and y resolved to the same socket address, however written
 * ("localhost:P" and "127.0.0.1:P"). */
static bool same_resolved(const struct mtd_cfg_addr *x, const struct mtd_cfg_addr *y)
{
	if (x->salen == 0 || y->salen == 0 || x->port != y->port || x->sa.sa.sa_family != y->sa.sa.sa_family)
		return false;
	if (x->sa.sa.sa_family == AF_INET)
		return ((const struct sockaddr_in *)&x->sa)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)&y->sa)->sin_addr.s_addr;
	if (x->sa.sa.sa_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&x->sa, *c = (const struct sockaddr_in6 *)&y->sa;
		return IN6_ARE_ADDR_EQUAL(&a->sin6_addr, &c->sin6_addr) && a->sin6_scope_id == c->sin6_scope_id;
	}
	return false;
}

/* Two listeners that cannot both bind: the same address, however written
 * (a reload keeps one listener per resolved address: two entries there
 * would be one listener serving the first), or the same port with one of
 * them on the wildcard address. */
static bool listeners_clash(const struct mtd_cfg_addr *x, const struct mtd_cfg_addr *y)
{
	if (x->salen == 0 || y->salen == 0 || x->port != y->port)
		return false;
	return mtd_cfg__same_endpoint(x, y) || same_resolved(x, y) || is_wildcard(x) || is_wildcard(y);
}

void mtd_cfg__check_inbound_addrs(struct builder *b, const PbConfig *m, struct mtd_cfg *cfg)
{
	char p[64];

	for (size_t i = 0; i < cfg->n_inbound; i++) {
		const struct mtd_cfg_inbound *in = &cfg->inbound[i];
		const PbInbound *pm = m->inbound[i];

		snprintf(p, sizeof(p), "inbound[%zu].listen", i);
		if (listeners_clash(&in->listen, &cfg->listen))
			BERR(mtd_cfg__at(b, pm, "listen", pm), p, "\"%s\" is also the listen address (%s)",
			     in->listen.text, cfg->listen.text);
		else if (cfg->admin != NULL && listeners_clash(&in->listen, cfg->admin))
			BERR(mtd_cfg__at(b, pm, "listen", pm), p, "\"%s\" is also the admin address", in->listen.text);
		for (size_t j = 0; j < i; j++)
			if (listeners_clash(&in->listen, &cfg->inbound[j].listen)) {
				BERR(mtd_cfg__at(b, pm, "listen", pm), p, "\"%s\" is also inbound[%zu].listen",
				     in->listen.text, j);
				break;
			}
		snprintf(p, sizeof(p), "inbound[%zu].app", i);
		/* The app's calls would come back to maitred itself. */
		if (mtd_cfg__same_endpoint(&in->app, &cfg->listen) || mtd_cfg__same_endpoint(&in->app, &in->listen) ||
		    same_resolved(&in->app, &cfg->listen) || same_resolved(&in->app, &in->listen))
			BERR(mtd_cfg__at(b, pm, "app", pm), p, "\"%s\" is one of maitred's own listeners, not the app",
			     in->app.text);
	}
}

/* A register entry whose address is an inbound listener's advertises
 * that listener: the record carries its certificate's identity, so that
 * callers can check who answers (FROM_REGISTRY secure naming). */
void mtd_cfg__registers_advertise(struct builder *b, struct mtd_cfg *cfg)
{
	for (size_t r = 0; r < cfg->n_registers; r++) {
		struct mtd_cfg_register *reg = &cfg->registers[r];

		for (size_t i = 0; i < cfg->n_inbound && reg->address.salen != 0; i++) {
			const struct mtd_cfg_inbound *in = &cfg->inbound[i];

			if (in->cert_file == NULL || in->listen.salen == 0 || in->listen.port != reg->address.port ||
			    !(is_wildcard(&in->listen) || mtd_cfg__same_endpoint(&in->listen, &reg->address)))
				continue;
			reg->identity_cert = mtd_cfg__dup_or_oom(b, in->cert_file);
			break;
		}
	}
}
