/* Where a service's endpoints come from (endpoints, discovery.etcd,
 * discovery.dns or discovery.xds), and the register entries this sidecar keeps in etcd. */
#include <config.h> /* autoconf (lib/config/config.h is the API) */

#include <stdio.h>
#include <string.h>

#include "config/build-int.h"
#include "discovery/record.h"

/* ---- discovery ----------------------------------------------------------- */

/* A list of "host:port" strings (etcd cluster, DNS resolvers): none empty,
 * no duplicate. NULL when n is 0 or on error (recorded). */
static struct mtd_cfg_addr *build_addr_list(struct builder *b, char **texts, size_t n, const void *m, const char *field,
                                            const char *path, bool numeric)
{
	struct mtd_cfg_addr *out;
	char p[256];

	if (n == 0)
		return NULL;
	out = mtd_cfg__calloc(n, sizeof(*out));
	if (out == NULL) {
		b->d->oom = true;
		return NULL;
	}
	for (size_t i = 0; i < n; i++) {
		snprintf(p, sizeof(p), "%s.%s[%zu]", path, field, i);
		if (texts[i][0] == '\0') {
			BERR(mtd_cfg__at(b, m, field, NULL), p, "is empty (\"HOST:PORT\")");
			continue;
		}
		if (mtd_cfg__build_addr_as(b, texts[i], mtd_cfg__at(b, m, field, NULL), p, &out[i], numeric) != 0)
			continue;
		for (size_t j = 0; j < i; j++) {
			if (mtd_cfg__same_endpoint(&out[j], &out[i])) {
				BERR(mtd_cfg__at(b, m, field, NULL), p, "duplicate \"%s\" (also %s[%zu])", texts[i],
				     field, j);
				break;
			}
		}
	}
	return out;
}

static struct mtd_cfg_etcd *build_etcd(struct builder *b, const PbEtcd *m, const char *path)
{
	struct mtd_cfg_etcd *e = mtd_cfg__calloc(1, sizeof(*e));
	char p[256];

	if (e == NULL) {
		b->d->oom = true;
		return NULL;
	}
	if (m->n_endpoints == 0)
		BERR(mtd_cfg__at(b, m, "endpoints", NULL), mtd_cfg__sub(p, sizeof(p), path, "endpoints"),
		     "is required (the etcd cluster, [\"HOST:PORT\", ...])");
	e->endpoints = build_addr_list(b, m->endpoints, m->n_endpoints, m, "endpoints", path, false);
	if (e->endpoints != NULL)
		e->n_endpoints = m->n_endpoints;
	if (m->prefix[0] == '\0')
		BERR(mtd_cfg__at(b, m, "prefix", NULL), mtd_cfg__sub(p, sizeof(p), path, "prefix"),
		     "is required (e.g. \"/maitred/services/pkg.Service/\")");
	else
		e->prefix = mtd_cfg__dup_or_oom(b, m->prefix);
	if (m->tls != NULL) {
		e->tls = mtd_cfg__build_tls(b, m->tls, mtd_cfg__sub(p, sizeof(p), path, "tls"));
		if (m->tls->server_identity[0] != '\0') {
			char q[256];

			BERR(mtd_cfg__at(b, m->tls, "server_identity", NULL),
			     mtd_cfg__sub(q, sizeof(q), mtd_cfg__sub(p, sizeof(p), path, "tls"), "server_identity"),
			     "is for a service's upstreams (services[].tls), not for etcd");
		}
	}
	if ((m->username[0] != '\0') != (m->password_file[0] != '\0')) {
		const char *f = m->username[0] != '\0' ? "password_file" : "username";

		BERR(mtd_cfg__at(b, m, m->username[0] != '\0' ? "username" : "password_file", NULL),
		     mtd_cfg__sub(p, sizeof(p), path, f), "username and password_file must be set together");
	} else if (m->username[0] != '\0') {
		e->username = mtd_cfg__dup_or_oom(b, m->username);
		e->password_file = mtd_cfg__tls_file(b, m, "password_file", m->password_file, path);
	}
	return e;
}

/* RFC 1035 §2.3.4: labels of 1..63 characters; one trailing dot allowed. */
static bool dns_name_ok(const char *s, size_t n)
{
	size_t label = 0;

	if (n > 0 && s[n - 1] == '.')
		n--;
	if (n == 0 || n > HOST_NAME_TEXT_MAX || !mtd_cfg__host_name_ok(s, n))
		return false;
	for (size_t i = 0; i <= n; i++) {
		if (i == n || s[i] == '.') {
			if (label == 0 || label > 63)
				return false;
			label = 0;
		} else {
			label++;
		}
	}
	return true;
}

static struct mtd_cfg_dns *build_dns(struct builder *b, const PbDns *m, const char *path)
{
	struct mtd_cfg_dns *d = mtd_cfg__calloc(1, sizeof(*d));
	size_t n = strlen(m->name);
	char p[256];

	if (d == NULL) {
		b->d->oom = true;
		return NULL;
	}
	if (n == 0)
		BERR(mtd_cfg__at(b, m, "name", NULL), mtd_cfg__sub(p, sizeof(p), path, "name"),
		     "is required (e.g. \"pay.shop.svc.cluster.local\")");
	else if (!dns_name_ok(m->name, n))
		BERR(mtd_cfg__at(b, m, "name", NULL), mtd_cfg__sub(p, sizeof(p), path, "name"),
		     "\"%s\" is not a host name", m->name);
	else
		d->name = mtd_cfg__dup_or_oom(b, m->name);
	if (m->port == 0 || m->port > 65535)
		BERR(mtd_cfg__at(b, m, "port", m), mtd_cfg__sub(p, sizeof(p), path, "port"), "is required, 1..65535%s",
		     m->port == 0 ? "" : " (out of range)");
	else
		d->port = (uint16_t)m->port;
	d->refresh_ms = mtd_cfg__dur_ms(b, m->refresh, 5000, ZERO_IS_ERROR, mtd_cfg__at(b, m, "refresh", NULL),
	                                mtd_cfg__sub(p, sizeof(p), path, "refresh"));
	d->resolvers = build_addr_list(b, m->resolvers, m->n_resolvers, m, "resolvers", path, true);
	if (d->resolvers != NULL)
		d->n_resolvers = m->n_resolvers;
	return d;
}

/* Exactly one endpoint source per service (endpoints, discovery.etcd,
 * discovery.dns or discovery.xds); errors name the field. */
void mtd_cfg__build_source(struct builder *b, const PbService *m, const char *path, struct mtd_cfg_service *out)
{
	const PbDiscovery *dm = m->discovery;
	char p[256], dpath[96];
	bool has_xds = dm != NULL && dm->xds != NULL;
	unsigned n = (m->n_endpoints != 0) + (dm != NULL && dm->etcd != NULL) + (dm != NULL && dm->dns != NULL) +
	             has_xds;

	snprintf(dpath, sizeof(dpath), "%s.discovery", path);
	if (dm != NULL && dm->etcd == NULL && dm->dns == NULL && !has_xds) {
		BERR(mtd_cfg__at(b, m, "discovery", NULL), dpath, "needs etcd, dns or xds");
		return;
	}
	if (n == 0) {
		/* endpoints written in another shape was said where it is. */
		if (!mtd_cfg__said_under(b->d, mtd_cfg__sub(p, sizeof(p), path, "endpoints")))
			BERR(mtd_cfg__at(b, m, "endpoints", NULL), p,
			     "a service needs exactly one endpoint source: endpoints | discovery.etcd | discovery.dns | "
			     "discovery.xds");
		return;
	}
	if (n > 1) {
		const char *second = has_xds ? "xds" : dm->dns != NULL ? "dns" : "etcd";

		BERR(mtd_cfg__at(b, dm, second, NULL), mtd_cfg__sub(p, sizeof(p), dpath, second),
		     "a service has exactly one endpoint source: endpoints | discovery.etcd | discovery.dns | "
		     "discovery.xds (this one makes %u)",
		     n);
		return;
	}
	if (dm != NULL) {
		out->local->initial_wait_ms = mtd_cfg__dur_ms(b, dm->initial_wait, MTD_CFG_INITIAL_WAIT_MS,
		                                              ZERO_ALLOWED, mtd_cfg__at(b, dm, "initial_wait", m),
		                                              mtd_cfg__sub(p, sizeof(p), dpath, "initial_wait"));
		if (out->local->initial_wait_ms > MTD_CFG_INITIAL_WAIT_MAX_MS) {
			BERR(mtd_cfg__at(b, dm, "initial_wait", m), mtd_cfg__sub(p, sizeof(p), dpath, "initial_wait"),
			     "must be at most 1h (calls past it fail UNAVAILABLE; a client's deadline ends them "
			     "sooner)");
			out->local->initial_wait_ms = MTD_CFG_INITIAL_WAIT_MS;
		}
	}
	if (dm == NULL) {
		out->local->source = MTD_CFG_SOURCE_STATIC;
	} else if (dm->etcd != NULL) {
		out->local->source = MTD_CFG_SOURCE_ETCD;
		out->local->etcd = build_etcd(b, dm->etcd, mtd_cfg__sub(p, sizeof(p), dpath, "etcd"));
	} else if (dm->dns != NULL) {
		out->local->source = MTD_CFG_SOURCE_DNS;
		out->local->dns = build_dns(b, dm->dns, mtd_cfg__sub(p, sizeof(p), dpath, "dns"));
	} else {
		const char *cluster = dm->xds->cluster[0] != '\0' ? dm->xds->cluster : m->name;

		out->local->source = MTD_CFG_SOURCE_XDS;
		if (b->root->xds == NULL)
			BERR(mtd_cfg__at(b, dm, "xds", NULL), mtd_cfg__sub(p, sizeof(p), dpath, "xds"),
			     "needs the top-level xds block (the management server: xds: {server: \"HOST:PORT\"})");
		if (strlen(cluster) > 1024 || strchr(cluster, '\n') != NULL)
			BERR(mtd_cfg__at(b, dm->xds, "cluster", dm), mtd_cfg__sub(p, sizeof(p), dpath, "xds.cluster"),
			     "is not a cluster name (at most 1024 bytes, one line)");
		else
			out->local->xds_cluster = mtd_cfg__dup_or_oom(b, cluster);
	}
}

/* ---- register ------------------------------------------------------------ */

/* One entry of `register`: this pod's app, kept in etcd under a lease. */
void mtd_cfg__build_register(struct builder *b, const PbRegister *m, size_t i, struct mtd_cfg_register *out)
{
	char path[48], p[256];

	snprintf(path, sizeof(path), "register[%zu]", i);
	if (m->service[0] == '\0')
		BERR(mtd_cfg__at(b, m, "service", m), mtd_cfg__sub(p, sizeof(p), path, "service"),
		     "is required (the app's gRPC service, e.g. \"shop.Cart\")");
	else if (strcmp(m->service, "*") == 0 || !mtd_cfg__service_name_ok(m->service))
		BERR(mtd_cfg__at(b, m, "service", m), mtd_cfg__sub(p, sizeof(p), path, "service"),
		     "\"%s\" is not a gRPC service name", m->service);
	else
		out->service = mtd_cfg__dup_or_oom(b, m->service);
	/* The record holds a numeric address (lib/discovery/record.h): a name
	 * would mean something else on every other pod. */
	if (m->address[0] == '\0')
		BERR(mtd_cfg__at(b, m, "address", m), mtd_cfg__sub(p, sizeof(p), path, "address"),
		     "is required (where other pods reach the app, \"IP:PORT\")");
	else
		mtd_cfg__build_addr_as(b, m->address, mtd_cfg__at(b, m, "address", m),
		                       mtd_cfg__sub(p, sizeof(p), path, "address"), &out->address, true);
	out->weight = MTD_RECORD_DEFAULT_WEIGHT;
	if (m->weight != NULL) {
		if (m->weight->value > MTD_RECORD_MAX_WEIGHT)
			BERR(mtd_cfg__at(b, m, "weight", m), mtd_cfg__sub(p, sizeof(p), path, "weight"),
			     "must be at most %d (what a registry record may carry)", MTD_RECORD_MAX_WEIGHT);
		else
			out->weight = (int32_t)m->weight->value;
	}
	out->ttl_ms = mtd_cfg__dur_ms(b, m->ttl, 10000, ZERO_IS_ERROR, mtd_cfg__at(b, m, "ttl", m),
	                              mtd_cfg__sub(p, sizeof(p), path, "ttl"));
	/* etcd leases are granted in whole seconds. */
	if (m->ttl != NULL && (out->ttl_ms < 2000 || out->ttl_ms > 3600000 || out->ttl_ms % 1000 != 0))
		BERR(mtd_cfg__at(b, m, "ttl", m), mtd_cfg__sub(p, sizeof(p), path, "ttl"),
		     "must be whole seconds in 2s..1h");
	if (m->etcd == NULL)
		BERR(mtd_cfg__at(b, m, "etcd", m), mtd_cfg__sub(p, sizeof(p), path, "etcd"),
		     "is required ({endpoints: [\"HOST:PORT\"], prefix: \"/maitred/services/SERVICE/\"})");
	else
		out->etcd = build_etcd(b, m->etcd, mtd_cfg__sub(p, sizeof(p), path, "etcd"));
	out->when_serving = m->when_serving;
}
