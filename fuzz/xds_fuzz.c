/* libFuzzer target for the xDS translators (lib/xds): a Cluster, a
 * ClusterLoadAssignment, a RouteConfiguration or a Listener as any
 * management server, or anyone in its place, may send. The first byte
 * chooses which ('R' routes, 'L' a listener, else odd a cluster, even an
 * assignment); the rest is the resource's serialized bytes.
 *
 * A resource either translates into one that keeps every documented
 * bound (xds.h: names printable and bounded, a strategy, weights in
 * 1..MTD_XDS_WEIGHT_SCALE, addresses that parse back, at most
 * MTD_LB_MAX_ENDPOINTS endpoints) or is refused with a one-line reason.
 * Nothing leaks (LeakSanitizer). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lb/lb-t.h"
#include "xds/xds.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_name(const char *s, size_t max)
{
	if (!s || !s[0] || strlen(s) > max)
		abort();
	for (const char *p = s; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			abort();
}

static void check_refused(int rc, const char *why, size_t cap)
{
	if (rc == -ENOMEM)
		return;
	if (rc != -EINVAL || !why[0] || !memchr(why, 0, cap))
		abort();
}

/* Translated routes keep their bounds: at most MTD_XDS_ROUTES_MAX, each
 * its own index, a service, a header when matched on one, clusters named
 * with weights that sum to 1..UINT32_MAX (or none), retries bounded. */
static void check_routes(const struct mtd_xds_routes *r)
{
	check_name(r->name, MTD_XDS_NAME_MAX);
	if (r->n > MTD_XDS_ROUTES_MAX)
		abort();
	for (size_t i = 0; i < r->n; i++) {
		const struct mtd_xds_route *t = &r->routes[i];
		uint64_t sum = 0;
		if (t->rule.to != (int)i || !t->rule.service || t->rule.service_len != strlen(t->rule.service) ||
		    (t->rule.kind != MTD_ROUTE_HEADER_NONE && !t->rule.header) ||
		    t->act.n_clusters > MTD_XDS_WEIGHTED_MAX || t->act.deadline_cap_ms < 0 ||
		    (t->act.retry && (t->act.retries < 1 || t->act.retries > 10 || !t->act.retry_on)))
			abort();
		for (size_t k = 0; k < t->act.n_clusters; k++) {
			check_name(t->act.clusters[k], MTD_XDS_NAME_MAX);
			sum += t->act.weights[k];
		}
		if (t->act.n_clusters && (sum == 0 || sum > UINT32_MAX))
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char why[1024], name[MTD_XDS_NAME_MAX + 1];

	if (size < 1)
		return 0;
	memset(why, 0, sizeof(why));
	if (data[0] == 'R') {
		struct mtd_xds_routes *r;
		int rc = mtd_xds_routes_parse(data + 1, size - 1, &r, why, sizeof(why));
		if (rc != 0) {
			check_refused(rc, why, sizeof(why));
			if (r)
				abort();
			return 0;
		}
		check_routes(r);
		mtd_xds_routes_free(r);
		return 0;
	}
	if (data[0] == 'L') {
		struct mtd_xds_listener l;
		int rc = mtd_xds_listener_parse(data + 1, size - 1, &l, why, sizeof(why));
		if (rc != 0) {
			check_refused(rc, why, sizeof(why));
			if (l.name || l.routes || l.rds_name)
				abort();
			return 0;
		}
		check_name(l.name, MTD_XDS_NAME_MAX);
		if (!l.rds_name == !l.routes)
			abort();
		if (l.routes)
			check_routes(l.routes);
		mtd_xds_listener_clear(&l);
		return 0;
	}
	if (data[0] & 1) {
		struct mtd_xds_cluster c;
		int rc = mtd_xds_cluster_parse(data + 1, size - 1, &c, why, sizeof(why));
		if (rc != 0) {
			check_refused(rc, why, sizeof(why));
			if (c.name || c.tls)
				abort();
			return 0;
		}
		check_name(c.name, MTD_XDS_NAME_MAX);
		check_name(c.eds_name, MTD_XDS_NAME_MAX);
		if (!c.lb.ops || c.connect_timeout_ms < 0 || (c.ring_min && c.ring_min > c.ring_max))
			abort();
		struct mtd_xds_ep eps[256];
		for (size_t i = 0; i < 256; i++)
			eps[i] = (struct mtd_xds_ep){"127.0.0.1:1", NULL, 1 + (int32_t)i * 3907};
		uint32_t pts = mtd_xds_ring_points(&c, eps, 1 + (size_t)data[0]);
		if (pts < 1 || pts > MTD_LB_MAX_RING_POINTS)
			abort();
		if (c.tls && !c.tls->ca_file)
			abort();
		if (mtd_xds_resource_name(MTD_XDS_TYPE_CLUSTER, data + 1, size - 1, name, sizeof(name)) != 0 ||
		    strcmp(name, c.name) != 0)
			abort();
		mtd_xds_cluster_clear(&c);
		return 0;
	}
	struct mtd_xds_cla *a;
	int rc = mtd_xds_cla_parse(data + 1, size - 1, &a, why, sizeof(why));
	if (rc != 0) {
		check_refused(rc, why, sizeof(why));
		if (a)
			abort();
		return 0;
	}
	check_name(a->name, MTD_XDS_NAME_MAX);
	if (a->n > MTD_LB_MAX_ENDPOINTS || a->priority > MTD_XDS_MAX_PRIORITY)
		abort();
	for (size_t i = 0; i < a->n; i++) {
		struct sockaddr_storage ss;
		socklen_t sl;
		if (a->eps[i].weight < 1 || a->eps[i].weight > MTD_XDS_WEIGHT_SCALE)
			abort();
		struct sockaddr_storage kept;
		socklen_t kl;
		if (mtd_xds_sockaddr(a->eps[i].address, &ss, &sl) != 0)
			abort();
		mtd_xds_ep_sockaddr(&a->eps[i], &kept, &kl);
		if (kl != sl || memcmp(&kept, &ss, sizeof(ss)) != 0)
			abort(); /* the parse kept is the text's */
		if (a->eps[i].zone)
			check_name(a->eps[i].zone, 255);
		for (size_t k = 0; k < i && a->n < 64; k++)
			if (strcmp(a->eps[k].address, a->eps[i].address) == 0)
				abort(); /* never the same address twice */
	}
	mtd_xds_cla_free(a);
	return 0;
}
