/* Validation and the runtime form: maitred.config.v1.Config -> struct
 * mtd_cfg, with every default documented in config.proto applied and every
 * rule checked here, once, so no consumer re-validates.
 *
 * This file is the entry point: the top-level keys (workers, listen, admin,
 * log, downstream, zone, node_id, drain_timeout) and the order in which the
 * sections are built and cross-checked. Each section has its file:
 * build_service.c (services[]), build_lb.c (lb, warmup, hash_key),
 * build_fault.c (fault, retry_budget), build_health.c (outlier_detection,
 * health_check, circuit_breaker), build_layer.c (routing, subset,
 * locality), build_policy.c (split, rate_limit, fault_injection, routes,
 * mirror), build_tls.c, build_discovery.c (discovery, register),
 * build_inbound.c (inbound, authorization); build_common.c holds the
 * helpers they share (build-int.h) and free.c frees the result.
 *
 * Errors point at where the offending value was written (the position table
 * pbjson.c filled); binary input has none, so they carry only the path. */
#include <config.h> /* autoconf (lib/config/config.h is the API) */

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/build-int.h"
#include "config/config.h"

#define DEFAULT_LISTEN "127.0.0.1:15001"
#define WORKERS_MAX    MTD_CFG_WORKERS_MAX
#define INBOUND_MAX    MTD_CFG_INBOUND_MAX

/* 127.0.0.0/8, ::1 or ::ffff:127.0.0.0/104. */
static bool is_loopback(const struct mtd_cfg_addr *a)
{
	if (a->sa.sa.sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)&a->sa;
		return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
	}
	if (a->sa.sa.sa_family == AF_INET6) {
		const struct in6_addr *in6 = &((const struct sockaddr_in6 *)&a->sa)->sin6_addr;
		return IN6_IS_ADDR_LOOPBACK(in6) || (IN6_IS_ADDR_V4MAPPED(in6) && in6->s6_addr[12] == 127);
	}
	return false;
}

static void build_log(struct builder *b, const PbLog *m, struct mtd_cfg_log *out)
{
	out->level = -1;
	if (m == NULL)
		return;
	out->json = m->format == MAITRED__CONFIG__V1__LOG__FORMAT__JSON;
	/* Log.Level DEBUG..ERROR = 1..4; enum mtd_log_level debug..error = 0..3. */
	if (m->level != MAITRED__CONFIG__V1__LOG__LEVEL__LEVEL_UNSPECIFIED)
		out->level = (int)m->level - 1;
	if (m->access == NULL)
		return;
	out->access = mtd_cfg__calloc(1, sizeof(*out->access));
	if (out->access == NULL) {
		b->d->oom = true;
		return;
	}
	if (m->access->path[0] == '\0')
		BERR(mtd_cfg__at(b, m->access, "path", m), "log.access.path",
		     "required (a file name, or \"-\" for stderr)");
	out->access->path = mtd_cfg__dup_or_oom(b, m->access->path);
	out->access->sample = 1.0;
	if (m->access->sample != NULL) {
		double v = m->access->sample->value;
		if (!(isfinite(v) && v >= 0.0 && v <= 1.0))
			BERR(mtd_cfg__at(b, m->access, "sample", m), "log.access.sample", "must be in [0, 1] (got %g)",
			     v);
		else
			out->access->sample = v;
	}
}

/* Config.zone and Config.node_id (default: the host name). */
static void build_identity(struct builder *b, const PbConfig *m, struct mtd_cfg *cfg)
{
	char host[256] = "";

	if (m->zone[0] != '\0') {
		cfg->zone = mtd_cfg__dup_or_oom(b, m->zone);
		b->zone = cfg->zone;
	}
	if (m->node_id[0] != '\0') {
		cfg->node_id = mtd_cfg__dup_or_oom(b, m->node_id);
	} else {
		if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0')
			snprintf(host, sizeof(host), "maitred");
		cfg->node_id = mtd_cfg__dup_or_oom(b, host);
	}
	b->node_id = cfg->node_id;
}

static void build_downstream(struct builder *b, const PbDownstream *m, struct mtd_cfg_downstream *out)
{
	const char *path = "downstream";
	const PbDownstream none = MAITRED__CONFIG__V1__DOWNSTREAM__INIT;

	if (m == NULL)
		m = &none;
	out->max_concurrent_streams = mtd_cfg__u32_limit(b, m->max_concurrent_streams, 1024, H2_WINDOW_MAX, m,
	                                                 "max_concurrent_streams", path);
	/* RFC 9113 §6.5.2 SETTINGS_INITIAL_WINDOW_SIZE: at most 2^31 - 1. */
	out->initial_window_size =
	        mtd_cfg__u32_limit(b, m->initial_window_size, 1u << 20, H2_WINDOW_MAX, m, "initial_window_size", path);
	out->max_header_list_size =
	        mtd_cfg__u32_limit(b, m->max_header_list_size, 65536, 16u << 20, m, "max_header_list_size", path);
	/* The gRPC length prefix is 32 bits, but implementations use int. */
	out->max_message_size =
	        mtd_cfg__u32_limit(b, m->max_message_size, 64u << 20, INT32_MAX, m, "max_message_size", path);
	out->reset_burst = mtd_cfg__u32_limit(b, m->reset_burst, 10000, 1u << 24, m, "reset_burst", path);
	out->reset_rate = mtd_cfg__u32_limit(b, m->reset_rate, 1000, 1u << 24, m, "reset_rate", path);
	out->idle_timeout_ms = mtd_cfg__dur_ms(b, m->idle_timeout, 600000, ZERO_IS_ERROR,
	                                       mtd_cfg__at(b, m, "idle_timeout", NULL), "downstream.idle_timeout");
	/* Past 2^24 connections the process runs out of descriptors first. */
	out->max_connections = mtd_cfg__u32_limit(b, m->max_connections, 10000, 1u << 24, m, "max_connections", path);
	out->write_timeout_ms = mtd_cfg__dur_ms(b, m->write_timeout, 30000, ZERO_IS_ERROR,
	                                        mtd_cfg__at(b, m, "write_timeout", NULL), "downstream.write_timeout");
	out->preface_timeout_ms =
	        mtd_cfg__dur_ms(b, m->preface_timeout, 10000, ZERO_IS_ERROR, mtd_cfg__at(b, m, "preface_timeout", NULL),
	                        "downstream.preface_timeout");
	out->header_timeout_ms =
	        mtd_cfg__dur_ms(b, m->header_timeout, 10000, ZERO_IS_ERROR, mtd_cfg__at(b, m, "header_timeout", NULL),
	                        "downstream.header_timeout");
	/* A call must be able to hold a full stream window of its response. */
	out->max_buffered_response =
	        mtd_cfg__u32_limit(b, m->max_buffered_response,
	                           out->initial_window_size > (64u << 20) ? out->initial_window_size : 64u << 20,
	                           UINT32_MAX, m, "max_buffered_response", path);
	if (out->max_buffered_response < out->initial_window_size)
		BERR(mtd_cfg__at(b, m, "max_buffered_response", NULL), "downstream.max_buffered_response",
		     "must be at least initial_window_size (%u), got %u", (unsigned)out->initial_window_size,
		     (unsigned)out->max_buffered_response);
}

static int method_cmp(const void *a, const void *c)
{
	return strcmp(((const struct mtd_cfg_method *)a)->name, ((const struct mtd_cfg_method *)c)->name);
}

static unsigned cpu_count(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n < 1 ? 1 : n > WORKERS_MAX ? WORKERS_MAX : (unsigned)n;
}

static const PbConfig *sort_root; /* first_of_names' comparator's context */

static int by_name_then_index(const void *x, const void *y)
{
	size_t a = *(const size_t *)x, b = *(const size_t *)y;
	int c = strcmp(sort_root->services[a]->name, sort_root->services[b]->name);

	return c != 0 ? c : a < b ? -1 : a > b;
}

/* For each of m's services the index of the first service of its name
 * (itself when none before has it; so for the unnamed), by one sort.
 * NULL when there is none or out of memory. */
static size_t *first_of_names(const PbConfig *m)
{
	size_t n = m->n_services;
	size_t *order = n != 0 ? mtd_cfg__malloc(n * sizeof(*order)) : NULL;
	size_t *first = n != 0 ? mtd_cfg__malloc(n * sizeof(*first)) : NULL;

	if (order == NULL || first == NULL) {
		mtd_cfg__free(order);
		mtd_cfg__free(first);
		return NULL;
	}
	for (size_t i = 0; i < n; i++)
		order[i] = first[i] = i;
	sort_root = m;
	qsort(order, n, sizeof(*order), by_name_then_index);
	sort_root = NULL;
	for (size_t k = 1; k < n; k++) {
		const char *name = m->services[order[k]]->name;
		if (name[0] != '\0' && strcmp(name, m->services[order[k - 1]]->name) == 0)
			first[order[k]] = first[order[k - 1]];
	}
	mtd_cfg__free(order);
	return first;
}

int mtd_cfg__build(const PbConfig *m, const char *source, const char *basedir, struct mtd_cfg__diag *d,
                   struct mtd_cfg **out)
{
	struct builder bb = {.d = d, .root = m, .basedir = basedir}, *b = &bb;
	struct mtd_cfg *cfg;
	size_t star = SIZE_MAX;

	*out = NULL;
	cfg = mtd_cfg__calloc(1, sizeof(*cfg));
	if (cfg == NULL)
		goto fail;
	cfg->source = mtd_cfg__dup_or_oom(b, source);
	if (cfg->source == NULL)
		goto fail_cfg;

	if (m->workers > WORKERS_MAX)
		BERR(mtd_cfg__at(b, m, "workers", NULL), "workers", "must be at most %d (0 = one per CPU)",
		     WORKERS_MAX);
	b->workers = cfg->workers = m->workers == 0 || m->workers > WORKERS_MAX ? cpu_count() : m->workers;

	mtd_cfg__build_addr(b, m->listen[0] != '\0' ? m->listen : DEFAULT_LISTEN, mtd_cfg__at(b, m, "listen", NULL),
	                    "listen", &cfg->listen);
	if (m->admin[0] != '\0') {
		cfg->admin = mtd_cfg__calloc(1, sizeof(*cfg->admin));
		if (cfg->admin == NULL)
			goto fail_cfg;
		if (mtd_cfg__build_addr(b, m->admin, mtd_cfg__at(b, m, "admin", NULL), "admin", cfg->admin) == 0 &&
		    mtd_cfg__same_endpoint(cfg->admin, &cfg->listen))
			BERR(mtd_cfg__at(b, m, "admin", NULL), "admin", "\"%s\" is also the listen address", m->admin);
		else if (cfg->admin->salen != 0 && !is_loopback(cfg->admin) && !m->admin_allow_remote)
			BERR(mtd_cfg__at(b, m, "admin", NULL), "admin",
			     "\"%s\" is not a loopback address: the admin endpoint has no authentication and "
			     "POST /drain stops maitred; set admin_allow_remote: true to expose it anyway",
			     m->admin);
	}
	cfg->admin_allow_remote = m->admin_allow_remote;
	build_log(b, m->log, &cfg->log);
	build_downstream(b, m->downstream, &cfg->downstream);
	build_identity(b, m, cfg);
	cfg->tracing = mtd_cfg__build_tracing(b, m->tracing);
	b->tracing = cfg->tracing;
	cfg->xds = mtd_cfg__build_xds(b, m->xds);
	cfg->drain_timeout_ms = mtd_cfg__dur_ms(b, m->drain_timeout, 15000, ZERO_ALLOWED,
	                                        mtd_cfg__at(b, m, "drain_timeout", NULL), "drain_timeout");
	cfg->replay_buffer_total = m->replay_buffer_total != 0 ? m->replay_buffer_total : 64u << 20;
	if (d->oom)
		goto fail_cfg;

	if (m->n_services == 0 && m->n_inbound == 0 && !mtd_cfg__said_under(d, "services"))
		BERR(mtd_cfg__at(b, m, "services", NULL), "services",
		     "at least one service is required (or an inbound listener: a maitred that only serves "
		     "inbound calls needs no service)");
	if (m->n_inbound > INBOUND_MAX)
		BERR(mtd_cfg__at(b, m, "inbound", NULL), "inbound", "at most %d inbound listeners, got %zu",
		     INBOUND_MAX, m->n_inbound);
	if (m->n_services + m->n_inbound != 0) {
		/* The user's services, then one per inbound entry (its app). */
		cfg->services = mtd_cfg__calloc(m->n_services + m->n_inbound, sizeof(*cfg->services));
		cfg->service_locals = mtd_cfg__calloc(m->n_services + m->n_inbound, sizeof(*cfg->service_locals));
		if (cfg->services == NULL || cfg->service_locals == NULL)
			goto fail_cfg;
		for (size_t i = 0; i < m->n_services + m->n_inbound; i++)
			cfg->services[i].local = &cfg->service_locals[i];
		cfg->n_services = cfg->n_routed = m->n_services;
	}
	/* Services a control plane creates come by the thousand: the
	 * duplicates by one sort, not by comparing every pair. */
	size_t *first_of = first_of_names(m);
	if (m->n_services != 0 && first_of == NULL)
		goto fail_cfg;
	for (size_t i = 0; i < m->n_services; i++) {
		const PbService *s = m->services[i];
		char p[64];

		mtd_cfg__build_service(b, s, i, &cfg->services[i]);
		if (d->oom) {
			mtd_cfg__free(first_of);
			goto fail_cfg;
		}
		snprintf(p, sizeof(p), "services[%zu].name", i);
		if (strcmp(s->name, "*") == 0) {
			if (star != SIZE_MAX)
				BERR(mtd_cfg__at(b, s, "name", NULL), p,
				     "a second catch-all \"*\" (the first is services[%zu])", star);
			else
				star = i;
			continue;
		}
		if (first_of != NULL && first_of[i] != i)
			BERR(mtd_cfg__at(b, s, "name", NULL), p, "duplicate service \"%s\" (also services[%zu])",
			     s->name, first_of[i]);
	}
	mtd_cfg__free(first_of);
	if (m->n_routes != 0) {
		cfg->routes = mtd_cfg__calloc(m->n_routes, sizeof(*cfg->routes));
		if (cfg->routes == NULL)
			goto fail_cfg;
		cfg->n_routes = m->n_routes;
	}
	for (size_t i = 0; i < m->n_routes; i++) {
		mtd_cfg__build_route(b, m->routes[i], i, &cfg->routes[i]);
		if (d->oom)
			goto fail_cfg;
	}
	mtd_cfg__resolve_targets(b, m, cfg);
	if (m->n_inbound != 0 && m->n_inbound <= INBOUND_MAX) {
		cfg->inbound = mtd_cfg__calloc(m->n_inbound, sizeof(*cfg->inbound));
		if (cfg->inbound == NULL)
			goto fail_cfg;
		cfg->n_inbound = m->n_inbound;
	}
	for (size_t i = 0; i < cfg->n_inbound; i++) {
		mtd_cfg__build_inbound(b, m->inbound[i], i, &cfg->inbound[i]);
		if (d->oom)
			goto fail_cfg;
		if (cfg->inbound[i].app.salen == 0 || cfg->inbound[i].listen.text == NULL)
			continue; /* said above; no service for it */
		cfg->inbound[i].service = cfg->n_services;
		mtd_cfg__build_inbound_app(b, m->inbound[i], &cfg->inbound[i].listen, i, cfg->n_services,
		                           &cfg->services[cfg->n_services]);
		cfg->n_services++;
		if (d->oom)
			goto fail_cfg;
	}
	mtd_cfg__check_inbound_addrs(b, m, cfg);
	if (m->n_register_ != 0) {
		cfg->registers = mtd_cfg__calloc(m->n_register_, sizeof(*cfg->registers));
		if (cfg->registers == NULL)
			goto fail_cfg;
		cfg->n_registers = m->n_register_;
	}
	for (size_t i = 0; i < m->n_register_; i++) {
		const struct mtd_cfg_register *r = &cfg->registers[i];

		mtd_cfg__build_register(b, m->register_[i], i, &cfg->registers[i]);
		if (d->oom)
			goto fail_cfg;
		/* One key per app and prefix: a second would fight over it. */
		for (size_t j = 0; j < i && r->etcd != NULL && r->etcd->prefix != NULL && r->address.text != NULL;
		     j++) {
			const struct mtd_cfg_register *o = &cfg->registers[j];
			char p[64];

			if (o->etcd != NULL && o->etcd->prefix != NULL && o->address.text != NULL &&
			    strcmp(o->etcd->prefix, r->etcd->prefix) == 0 &&
			    strcmp(o->address.text, r->address.text) == 0) {
				snprintf(p, sizeof(p), "register[%zu].address", i);
				BERR(mtd_cfg__at(b, m->register_[i], "address", m->register_[i]), p,
				     "\"%s\" under prefix \"%s\" is also register[%zu]", r->address.text,
				     r->etcd->prefix, j);
				break;
			}
		}
	}
	mtd_cfg__registers_advertise(b, cfg);
	if (d->oom)
		goto fail_cfg;
	if (d->n_errs != 0) {
		mtd_cfg_free(cfg);
		return 0;
	}
	/* Sorted so the per-call lookup is a binary search. */
	for (size_t i = 0; i < cfg->n_services; i++)
		if (cfg->services[i].n_methods > 1)
			qsort(cfg->services[i].methods, cfg->services[i].n_methods, sizeof(struct mtd_cfg_method),
			      method_cmp);
	cfg->pb_len = protobuf_c_message_get_packed_size(&m->base);
	cfg->pb = mtd_cfg__malloc(cfg->pb_len ? cfg->pb_len : 1);
	if (cfg->pb == NULL)
		goto fail_cfg;
	protobuf_c_message_pack(&m->base, cfg->pb);
	*out = cfg;
	return 0;

fail_cfg:
	mtd_cfg_free(cfg);
fail:
	d->oom = true;
	return -ENOMEM;
}

/* ---- runtime form: lookup ------------------------------------------------ */

const struct mtd_cfg_method *mtd_cfg_service_method(const struct mtd_cfg_service *svc, const char *method, size_t len)
{
	size_t lo = 0, hi = svc->n_methods;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const char *name = svc->methods[mid].name;
		size_t n = strlen(name);
		int c = memcmp(name, method, n < len ? n : len);

		if (c == 0)
			c = n < len ? -1 : n > len;
		if (c == 0)
			return &svc->methods[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}
