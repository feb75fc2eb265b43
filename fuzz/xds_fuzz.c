/* libFuzzer target for the xDS translators (lib/xds): a Cluster, a
 * ClusterLoadAssignment, a RouteConfiguration or a Listener as any
 * management server, or anyone in its place, may send. The first byte
 * chooses which ('R' routes, 'H' routes for a listener named as a host,
 * 'L' a listener, 'D' a whole
 * DiscoveryResponse, else odd a cluster, even an assignment); the rest is
 * the serialized bytes.
 *
 * A DiscoveryResponse read from the wire (mtd_xds_response_read) is
 * never read where protobuf-c's unpack of the same bytes refuses, and
 * where both read it they agree: the same strings, the same resources
 * (the reader is the stricter: a NUL inside a string, a field number past
 * 2^29 - 1).
 *
 * A ClusterLoadAssignment read from the wire (lib/xds/cla.c) is held to
 * the same: never read where protobuf-c refuses it, and where both read
 * it every field the translation uses is the same.
 *
 * The guard against a NUL inside a string (mtd_xds__strings_whole) walks
 * every resource protobuf-c decodes to its end, and never takes for
 * nested too deep what protobuf-c read; it is stricter only where pbwire
 * is (a field number past 2^29 - 1, which protobuf-c reads cut to 32
 * bits): such a resource does not decode.
 *
 * A resource either translates into one that keeps every documented
 * bound (xds.h: names printable and bounded, a strategy, weights in
 * 1..MTD_XDS_WEIGHT_SCALE, addresses that parse back, at most
 * MTD_LB_MAX_ENDPOINTS endpoints) or is refused with a one-line reason.
 * The name read from the wire alone (mtd_xds_resource_name) is held to
 * protobuf-c's for all four types (check_name_reader).
 *
 * Nothing leaks (LeakSanitizer). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "envoy/config/cluster/v3/cluster.pb-c.h"
#include "envoy/config/endpoint/v3/endpoint.pb-c.h"
#include "envoy/config/listener/v3/listener.pb-c.h"
#include "envoy/config/route/v3/route.pb-c.h"
#include "envoy/service/discovery/v3/discovery.pb-c.h"
#include "config/config.h"
#include "lb/lb-t.h"
#include "xds/xds-int.h"
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

/* The wire reader against protobuf-c's unpack. */
static void check_response(const uint8_t *data, size_t size)
{
	struct mtd_xds_response r;
	int rc = mtd_xds_response_read(data, size, &r);
	Envoy__Service__Discovery__V3__DiscoveryResponse *pb =
	        envoy__service__discovery__v3__discovery_response__unpack(NULL, size, data);

	if (rc == -ENOMEM) {
		if (pb)
			envoy__service__discovery__v3__discovery_response__free_unpacked(pb, NULL);
		return;
	}
	if (rc != 0 && rc != -EBADMSG)
		abort();
	if (pb == NULL) {
		if (rc == 0)
			abort(); /* read what protobuf-c refuses */
		return;
	}
	if (rc != 0) {
		/* Stricter than protobuf-c, never laxer: it lets through a NUL
		 * inside a string and field numbers past 2^29 - 1 (a tag's
		 * varint cut to 32 bits), which the reader refuses. */
		envoy__service__discovery__v3__discovery_response__free_unpacked(pb, NULL);
		return;
	}
	if (strcmp(r.version_info, pb->version_info) != 0 || strcmp(r.type_url, pb->type_url) != 0 ||
	    strcmp(r.nonce, pb->nonce) != 0 || r.n_res != pb->n_resources)
		abort();
	for (size_t i = 0; i < r.n_res; i++) {
		const Google__Protobuf__Any *a = pb->resources[i];
		const struct mtd_xds_any *m = &r.res[i];
		if (m->len != a->value.len ||
		    (m->len && (memcmp(m->value, a->value.data, m->len) != 0 || m->value < data ||
		                m->value + m->len > data + size)))
			abort(); /* the same bytes, a slice of the input (empty: anywhere) */
		/* An Any's type URL may hold a NUL protobuf-c's C string cuts. */
		size_t tl = strlen(a->type_url);
		if (m->type_url_len < tl || memcmp(m->type_url, a->type_url, tl) != 0 ||
		    (m->type_url_len != tl && memchr(m->type_url, 0, m->type_url_len) == NULL))
			abort();
	}
	mtd_xds_response_clear(&r);
	envoy__service__discovery__v3__discovery_response__free_unpacked(pb, NULL);
}

static bool same_text(const char *s, uint32_t n, const char *pb)
{
	return strlen(pb) == n && (n == 0 || memcmp(s, pb, n) == 0);
}

static bool same_u32(bool has, uint32_t v, const Google__Protobuf__UInt32Value *pb)
{
	return has == (pb != NULL) && (pb == NULL || v == pb->value);
}

static void check_endpoint(const struct mtd_xds__wire_ep *e, const Envoy__Config__Endpoint__V3__LbEndpoint *pb)
{
	if (e->health != (int32_t)pb->health_status || !same_u32(e->has_weight, e->weight, pb->load_balancing_weight) ||
	    e->host_case != (uint8_t)pb->host_identifier_case)
		abort();
	const Envoy__Config__Core__V3__Address *a =
	        pb->host_identifier_case == ENVOY__CONFIG__ENDPOINT__V3__LB_ENDPOINT__HOST_IDENTIFIER_ENDPOINT
	                ? pb->endpoint->address
	                : NULL;
	if (e->has_address != (a != NULL))
		abort();
	const Envoy__Config__Core__V3__SocketAddress *sa =
	        a != NULL && a->address_case == ENVOY__CONFIG__CORE__V3__ADDRESS__ADDRESS_SOCKET_ADDRESS
	                ? a->socket_address
	                : NULL;
	if (e->has_socket != (sa != NULL))
		abort();
	if (sa == NULL)
		return;
	if (e->protocol != (uint32_t)sa->protocol || !same_text(e->address, e->address_len, sa->address) ||
	    e->port_case != (uint8_t)sa->port_specifier_case ||
	    (e->port_case == 3 && e->port != sa->port_value) || e->resolver_name != (sa->resolver_name[0] != '\0'))
		abort();
}

/* The guard against protobuf-c's unpack of a resource of type d. */
/* The name read from the wire alone (mtd_xds_resource_name) against
 * protobuf-c's: an exact name is the one protobuf-c keeps wherever it
 * unpacks the resource, a long one longer than any asked for; where
 * maitred's unpack (protobuf-c, then the guard) takes the resource, its
 * name is never a guess, and unnamed only when empty. */
static void check_name_reader(const ProtobufCMessageDescriptor *d, const ProtobufCMessage *pb, bool taken,
                              const uint8_t *data, size_t size)
{
	static const struct {
		const ProtobufCMessageDescriptor *d;
		const char *url;
	} types[] = {
		{&envoy__config__cluster__v3__cluster__descriptor, MTD_XDS_TYPE_CLUSTER},
		{&envoy__config__endpoint__v3__cluster_load_assignment__descriptor, MTD_XDS_TYPE_ENDPOINT},
		{&envoy__config__listener__v3__listener__descriptor, MTD_XDS_TYPE_LISTENER},
		{&envoy__config__route__v3__route_configuration__descriptor, MTD_XDS_TYPE_ROUTE},
	};
	const char *url = NULL;
	char name[MTD_XDS_NAME_MAX + 1];

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (types[i].d == d)
			url = types[i].url;
	if (url == NULL)
		abort();
	int r = mtd_xds_resource_name(url, data, size, name, sizeof(name));
	if (r == MTD_XDS_NAME_EXACT && (name[0] == '\0' || strlen(name) > MTD_XDS_NAME_MAX))
		abort();
	if (pb == NULL)
		return;
	const ProtobufCFieldDescriptor *fd = protobuf_c_message_descriptor_get_field(d, 1);
	const char *pbname = *(char *const *)(const void *)((const char *)pb + fd->offset);
	if (r == MTD_XDS_NAME_EXACT && strcmp(name, pbname) != 0)
		abort(); /* sure, and another name than protobuf-c's */
	if (r == MTD_XDS_NAME_LONG && strlen(pbname) <= MTD_XDS_NAME_MAX)
		abort();
	if (taken && (r == MTD_XDS_NAME_GUESS || (r < 0 && pbname[0] != '\0')))
		abort(); /* decoded by maitred, named by a guess or not at all */
}

static void check_guard(const ProtobufCMessageDescriptor *d, const uint8_t *data, size_t size)
{
	char why[512];
	ProtobufCMessage *pb = protobuf_c_message_unpack(d, NULL, size, data);
	int rc = mtd_xds__strings_whole(d, data, size, NULL, why, sizeof(why));

	check_name_reader(d, pb, rc == 0, data, size);
	if (pb == NULL)
		return;
	if (rc == -EINVAL && strstr(why, "a NUL in string field ") != why)
		abort(); /* nested too deep, where protobuf-c read it */
	protobuf_c_message_free_unpacked(pb, NULL);
}

/* The assignment's reader against protobuf-c's unpack. */
static void check_cla_reader(const uint8_t *data, size_t size)
{
	struct mtd_xds__wire_cla w;
	int rc = mtd_xds__cla_read(data, size, &w);
	Envoy__Config__Endpoint__V3__ClusterLoadAssignment *pb =
	        envoy__config__endpoint__v3__cluster_load_assignment__unpack(NULL, size, data);

	if (rc != 0 && rc != -EBADMSG && rc != -ENOMEM)
		abort();
	if (pb == NULL) {
		if (rc == 0)
			abort(); /* read what protobuf-c refuses */
		return;
	}
	if (rc != 0) { /* stricter (a NUL in a string, a field written twice), or out of memory */
		envoy__config__endpoint__v3__cluster_load_assignment__free_unpacked(pb, NULL);
		return;
	}
	if (!same_text(w.name, w.name_len, pb->cluster_name) || w.n_locs != pb->n_endpoints)
		abort();
	size_t first = 0;
	for (size_t i = 0; i < w.n_locs; i++) {
		const struct mtd_xds__wire_loc *l = &w.locs[i];
		const Envoy__Config__Endpoint__V3__LocalityLbEndpoints *L = pb->endpoints[i];
		if (l->has_locality != (L->locality != NULL) ||
		    !same_text(l->zone, l->zone_len, L->locality != NULL ? L->locality->zone : "") ||
		    !same_u32(l->has_weight, l->weight, L->load_balancing_weight) || l->priority != L->priority ||
		    l->first != first || l->n != L->n_lb_endpoints)
			abort();
		for (size_t j = 0; j < l->n; j++)
			check_endpoint(&w.eps[l->first + j], L->lb_endpoints[j]);
		first += l->n;
	}
	if (first != w.n_eps)
		abort();
	mtd_xds__cla_wire_clear(&w);
	envoy__config__endpoint__v3__cluster_load_assignment__free_unpacked(pb, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char why[1024], name[MTD_XDS_NAME_MAX + 1];

	if (size < 1)
		return 0;
	memset(why, 0, sizeof(why));
	if (data[0] == 'D') {
		check_response(data + 1, size - 1);
		return 0;
	}
	if (data[0] == 'R' || data[0] == 'H') {
		/* 'H': the same, for a listener named as a host (wildcard domains) */
		struct mtd_xds_routes *r;
		const char *host = data[0] == 'H' ? "api.shop.svc:8080" : NULL;
		check_guard(&envoy__config__route__v3__route_configuration__descriptor, data + 1, size - 1);
		int rc = mtd_xds_routes_parse(data + 1, size - 1, host, &r, why, sizeof(why));
		if (rc != 0) {
			check_refused(rc, why, sizeof(why));
			if (r)
				abort();
			return 0;
		}
		check_routes(r);
		/* The name read for a NACK (from the wire) is the parse's. */
		if (r->name && (mtd_xds_resource_name(MTD_XDS_TYPE_ROUTE, data + 1, size - 1, name, sizeof(name)) != MTD_XDS_NAME_EXACT ||
		                strcmp(name, r->name) != 0))
			abort();
		mtd_xds_routes_free(r);
		return 0;
	}
	if (data[0] == 'L') {
		struct mtd_xds_listener l;
		check_guard(&envoy__config__listener__v3__listener__descriptor, data + 1, size - 1);
		int rc = mtd_xds_listener_parse(data + 1, size - 1, &l, why, sizeof(why));
		if (rc != 0) {
			check_refused(rc, why, sizeof(why));
			if (l.name || l.routes || l.rds_name)
				abort();
			return 0;
		}
		check_name(l.name, MTD_XDS_NAME_MAX);
		if (mtd_xds_resource_name(MTD_XDS_TYPE_LISTENER, data + 1, size - 1, name, sizeof(name)) != MTD_XDS_NAME_EXACT ||
		    strcmp(name, l.name) != 0)
			abort();
		if (!l.rds_name == !l.routes)
			abort();
		if (l.routes)
			check_routes(l.routes);
		mtd_xds_listener_clear(&l);
		return 0;
	}
	if (data[0] & 1) {
		struct mtd_xds_cluster c;
		check_guard(&envoy__config__cluster__v3__cluster__descriptor, data + 1, size - 1);
		/* Certificate provider instances as a bootstrap names them: one
		 * of each kind, and "default" (an instance named by nothing). */
		static struct mtd_cfg_cert_provider inst[] = {
		        {.name = (char *)"id", .cert_file = (char *)"/c.pem", .key_file = (char *)"/k.pem"},
		        {.name = (char *)"roots", .ca_file = (char *)"/ca.pem"},
		        {.name = (char *)"default",
		         .cert_file = (char *)"/d.pem",
		         .key_file = (char *)"/dk.pem",
		         .ca_file = (char *)"/dca.pem"},
		};
		static const struct mtd_cfg_cert_providers providers = {inst, 3};
		int rc = mtd_xds_cluster_parse(data + 1, size - 1, &providers, &c, why, sizeof(why));
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
		if (c.tls && (!c.tls->ca_file || (c.tls->cert_file == NULL) != (c.tls->key_file == NULL)))
			abort();
		/* Files from an instance are that instance's. */
		if (c.tls && c.tls->ca_instance &&
		    strcmp(c.tls->ca_file, mtd_cfg_cert_provider_find(&providers, c.tls->ca_instance)->ca_file) != 0)
			abort();
		if (c.tls && c.tls->cert_instance &&
		    strcmp(c.tls->cert_file, mtd_cfg_cert_provider_find(&providers, c.tls->cert_instance)->cert_file) !=
		            0)
			abort();
		if (mtd_xds_resource_name(MTD_XDS_TYPE_CLUSTER, data + 1, size - 1, name, sizeof(name)) != MTD_XDS_NAME_EXACT ||
		    strcmp(name, c.name) != 0)
			abort();
		mtd_xds_cluster_clear(&c);
		return 0;
	}
	check_cla_reader(data + 1, size - 1);
	check_guard(&envoy__config__endpoint__v3__cluster_load_assignment__descriptor, data + 1, size - 1);
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
