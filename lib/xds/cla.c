/* A ClusterLoadAssignment (EDS) into maitred's endpoint records (xds.h
 * says what is kept, how weights and priorities are read, and what is
 * refused). */
#include <config.h> /* autoconf */

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envoy/config/endpoint/v3/endpoint.pb-c.h"
#include "envoy/config/cluster/v3/cluster.pb-c.h"
#include "config/config-int.h"
#include "lb/lb-t.h"
#include "xds/xds-int.h"
#include "xds/xds.h"

typedef Envoy__Config__Endpoint__V3__ClusterLoadAssignment PbCla;
typedef Envoy__Config__Endpoint__V3__LocalityLbEndpoints PbLocality;
typedef Envoy__Config__Endpoint__V3__LbEndpoint PbLbEndpoint;

#define ADDR_TEXT_MAX (INET6_ADDRSTRLEN + 8) /* "[v6]:65535" */

/* Check a socket address and parse it into e's port, v6 and ip, or
 * -EINVAL (each endpoint is parsed once: addr_text prints the parse). */
static int parse_addr(const Envoy__Config__Core__V3__SocketAddress *sa, struct mtd_xds_ep *e, char *why, size_t whylen,
                      const char *where)
{
	if (sa->protocol != ENVOY__CONFIG__CORE__V3__SOCKET_ADDRESS__PROTOCOL__TCP)
		return mtd_xds__refuse(why, whylen, "%s: protocol must be TCP", where);
	if (sa->resolver_name[0] != '\0')
		return mtd_xds__refuse(why, whylen, "%s: resolver_name is not supported (a numeric address)", where);
	if (sa->port_specifier_case != ENVOY__CONFIG__CORE__V3__SOCKET_ADDRESS__PORT_SPECIFIER_PORT_VALUE ||
	    sa->port_value == 0 || sa->port_value > 65535)
		return mtd_xds__refuse(why, whylen, "%s: port_value must be 1..65535", where);
	e->port = (uint16_t)sa->port_value;
	if (strlen(sa->address) < INET6_ADDRSTRLEN && inet_pton(AF_INET, sa->address, e->ip) == 1) {
		e->v6 = false;
		return 0;
	}
	if (strlen(sa->address) < INET6_ADDRSTRLEN && inet_pton(AF_INET6, sa->address, e->ip) == 1) {
		e->v6 = true;
		return 0;
	}
	return mtd_xds__refuse(why, whylen, "%s: address \"%.64s\" is not a numeric IP", where, sa->address);
}

static char *put_uint(char *p, unsigned v)
{
	char d[10];
	size_t n = 0;

	do
		d[n++] = (char)('0' + v % 10);
	while ((v /= 10) != 0);
	while (n > 0)
		*p++ = d[--n];
	return p;
}

/* The canonical "ip:port" / "[v6]:port" of e's parsed address into out
 * (ADDR_TEXT_MAX bytes): inet_ntop's text of the address (IPv4's dotted
 * quad written here, the same digits), the port in decimal. Returns the
 * end (the NUL). */
static char *addr_text(const struct mtd_xds_ep *e, char *out)
{
	char *p = out;

	if (e->v6) {
		*p++ = '[';
		inet_ntop(AF_INET6, e->ip, p, INET6_ADDRSTRLEN);
		p += strlen(p);
		*p++ = ']';
	} else {
		for (int i = 0; i < 4; i++) {
			p = put_uint(p, e->ip[i]);
			*p++ = i < 3 ? '.' : ':';
		}
		p--;
	}
	*p++ = ':';
	p = put_uint(p, e->port);
	*p = '\0';
	return p;
}

void mtd_xds_ep_sockaddr(const struct mtd_xds_ep *e, struct sockaddr_storage *ss, socklen_t *salen)
{
	memset(ss, 0, sizeof(*ss));
	if (e->v6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(e->port);
		memcpy(&s6->sin6_addr, e->ip, 16);
		*salen = sizeof(*s6);
		return;
	}
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
	s4->sin_family = AF_INET;
	s4->sin_port = htons(e->port);
	memcpy(&s4->sin_addr, e->ip, 4);
	*salen = sizeof(*s4);
}

int mtd_xds_sockaddr(const char *address, struct sockaddr_storage *ss, socklen_t *salen)
{
	char host[INET6_ADDRSTRLEN];
	const char *colon = strrchr(address, ':');
	unsigned long port;
	char *end;

	if (colon == NULL)
		return -EINVAL;
	port = strtoul(colon + 1, &end, 10);
	if (*end != '\0' || port == 0 || port > 65535)
		return -EINVAL;
	memset(ss, 0, sizeof(*ss));
	if (address[0] == '[') {
		size_t hl = (size_t)(colon - address) - 2;
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

		if (colon - address < 3 || colon[-1] != ']' || hl >= sizeof(host))
			return -EINVAL;
		memcpy(host, address + 1, hl);
		host[hl] = '\0';
		if (inet_pton(AF_INET6, host, &s6->sin6_addr) != 1)
			return -EINVAL;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
		*salen = sizeof(*s6);
		return 0;
	}
	size_t hl = (size_t)(colon - address);
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
	if (hl >= sizeof(host))
		return -EINVAL;
	memcpy(host, address, hl);
	host[hl] = '\0';
	if (inet_pton(AF_INET, host, &s4->sin_addr) != 1)
		return -EINVAL;
	s4->sin_family = AF_INET;
	s4->sin_port = htons((uint16_t)port);
	*salen = sizeof(*s4);
	return 0;
}

static bool pickable(const PbLbEndpoint *e)
{
	switch (e->health_status) {
	case ENVOY__CONFIG__CORE__V3__HEALTH_STATUS__UNHEALTHY:
	case ENVOY__CONFIG__CORE__V3__HEALTH_STATUS__DRAINING:
	case ENVOY__CONFIG__CORE__V3__HEALTH_STATUS__TIMEOUT:
		return false;
	default:
		return true;
	}
}

static int cmp_addr(const void *a, const void *b)
{
	return strcmp(((const struct mtd_xds_ep *)a)->address, ((const struct mtd_xds_ep *)b)->address);
}

static int translate(const PbCla *m, struct mtd_xds_cla **out, char *why, size_t whylen)
{
	char where[96];
	uint32_t best = UINT32_MAX;
	size_t total = 0, n = 0, bytes = 0, cap = 0;
	bool any_lw = false;
	double sum_lw = 0.0;
	int rc = -EINVAL;

	if (!mtd_xds__name_ok(m->cluster_name))
		return mtd_xds__refuse(why, whylen, "cluster_name: empty, too long or not printable");
	/* Every endpoint's address as parsed by the first pass, in wire
	 * order (at most the endpoints the first pass lets through). */
	for (size_t i = 0; i < m->n_endpoints && cap < MTD_LB_MAX_ENDPOINTS; i++)
		cap += m->endpoints[i]->n_lb_endpoints;
	if (cap > MTD_LB_MAX_ENDPOINTS)
		cap = MTD_LB_MAX_ENDPOINTS;
	struct mtd_xds_ep *parsed = mtd_cfg__calloc(cap ? cap : 1, sizeof(*parsed));
	if (parsed == NULL)
		return -ENOMEM;
	/* First pass: validate everything, find the priority in use. */
	for (size_t i = 0; i < m->n_endpoints; i++) {
		const PbLocality *l = m->endpoints[i];

		if (l->priority > MTD_XDS_MAX_PRIORITY) {
			mtd_xds__refuse(why, whylen, "endpoints[%zu].priority: %u is above %u", i, l->priority,
			                MTD_XDS_MAX_PRIORITY);
			goto fail;
		}
		if (l->load_balancing_weight != NULL) {
			if (l->load_balancing_weight->value == 0) {
				mtd_xds__refuse(why, whylen, "endpoints[%zu].load_balancing_weight: must be >= 1", i);
				goto fail;
			}
			any_lw = true;
		}
		if (l->locality != NULL && l->locality->zone[0] != '\0' &&
		    (strlen(l->locality->zone) > 255 || !mtd_xds__name_ok(l->locality->zone))) {
			mtd_xds__refuse(why, whylen, "endpoints[%zu].locality.zone: longer than 255 or not printable",
			                i);
			goto fail;
		}
		if (l->n_lb_endpoints > MTD_LB_MAX_ENDPOINTS || total + l->n_lb_endpoints > MTD_LB_MAX_ENDPOINTS) {
			mtd_xds__refuse(why, whylen, "more than %u endpoints", MTD_LB_MAX_ENDPOINTS);
			goto fail;
		}
		size_t first = total; /* this locality's first in parsed[] */
		total += l->n_lb_endpoints;
		for (size_t j = 0; j < l->n_lb_endpoints; j++) {
			const PbLbEndpoint *e = l->lb_endpoints[j];

			snprintf(where, sizeof(where), "endpoints[%zu].lb_endpoints[%zu]", i, j);
			if (e->host_identifier_case !=
			            ENVOY__CONFIG__ENDPOINT__V3__LB_ENDPOINT__HOST_IDENTIFIER_ENDPOINT ||
			    e->endpoint->address == NULL ||
			    e->endpoint->address->address_case !=
			            ENVOY__CONFIG__CORE__V3__ADDRESS__ADDRESS_SOCKET_ADDRESS) {
				mtd_xds__refuse(why, whylen, "%s: needs endpoint.address.socket_address", where);
				goto fail;
			}
			if (parse_addr(e->endpoint->address->socket_address, &parsed[first + j], why, whylen, where) !=
			    0)
				goto fail;
			if (e->load_balancing_weight != NULL && e->load_balancing_weight->value == 0) {
				mtd_xds__refuse(why, whylen, "%s.load_balancing_weight: must be >= 1", where);
				goto fail;
			}
			if (pickable(e) && l->priority < best)
				best = l->priority;
		}
	}
	/* Second pass: the chosen priority's endpoints, sized. */
	for (size_t i = 0; i < m->n_endpoints; i++) {
		const PbLocality *l = m->endpoints[i];
		size_t k = 0;

		if (l->priority != best)
			continue;
		for (size_t j = 0; j < l->n_lb_endpoints; j++)
			if (pickable(l->lb_endpoints[j]))
				k++;
		if (k == 0)
			continue;
		n += k;
		bytes += k * ADDR_TEXT_MAX;
		if (l->locality != NULL && l->locality->zone[0] != '\0')
			bytes += strlen(l->locality->zone) + 1;
		sum_lw += l->load_balancing_weight != NULL ? l->load_balancing_weight->value : 1.0;
	}
	struct mtd_xds_cla *c =
	        mtd_cfg__calloc(1, sizeof(*c) + n * sizeof(c->eps[0]) + bytes + strlen(m->cluster_name) + 1);
	if (c == NULL) {
		rc = -ENOMEM;
		goto fail;
	}
	char *s = (char *)&c->eps[n];
	c->name = s;
	s = stpcpy(s, m->cluster_name) + 1;
	c->priority = best == UINT32_MAX ? 0 : best;
	c->n_skipped = (uint32_t)(total - n);
	size_t next_first = 0; /* the next locality's first in parsed[] */
	for (size_t i = 0; i < m->n_endpoints && n > 0; i++) {
		const PbLocality *l = m->endpoints[i];
		const char *zone = NULL;
		double sum_ew = 0.0, lw;
		uint32_t max_ew = 1;
		size_t first = next_first;

		next_first += l->n_lb_endpoints;
		if (l->priority != best)
			continue;
		for (size_t j = 0; j < l->n_lb_endpoints; j++) {
			const PbLbEndpoint *e = l->lb_endpoints[j];
			uint32_t w = e->load_balancing_weight != NULL ? e->load_balancing_weight->value : 1;
			if (!pickable(e))
				continue;
			sum_ew += w;
			if (w > max_ew)
				max_ew = w;
		}
		if (sum_ew == 0.0)
			continue;
		if (l->locality != NULL && l->locality->zone[0] != '\0') {
			zone = s;
			s = stpcpy(s, l->locality->zone) + 1;
		}
		lw = l->load_balancing_weight != NULL ? l->load_balancing_weight->value : 1.0;
		for (size_t j = 0; j < l->n_lb_endpoints; j++) {
			const PbLbEndpoint *e = l->lb_endpoints[j];
			struct mtd_xds_ep *ep = &c->eps[c->n];
			uint32_t w = e->load_balancing_weight != NULL ? e->load_balancing_weight->value : 1;
			double eff;

			if (!pickable(e))
				continue;
			ep->port = parsed[first + j].port;
			ep->v6 = parsed[first + j].v6;
			memcpy(ep->ip, parsed[first + j].ip, sizeof(ep->ip));
			ep->address = s;
			s = addr_text(ep, s) + 1;
			ep->zone = zone;
			/* The locality's share of the calls split among its
			 * endpoints by their weights; without locality
			 * weights, the endpoints' own (scaled down past the
			 * range maitred's weights take). */
			if (any_lw)
				eff = (double)MTD_XDS_WEIGHT_SCALE * (lw / sum_lw) * ((double)w / sum_ew);
			else
				eff = max_ew > MTD_XDS_WEIGHT_SCALE ? (double)w * MTD_XDS_WEIGHT_SCALE / max_ew
				                                    : (double)w;
			ep->weight = eff < 1.0                    ? 1
			             : eff > MTD_XDS_WEIGHT_SCALE ? MTD_XDS_WEIGHT_SCALE
			                                          : (int32_t)(eff + 0.5);
			c->n++;
		}
	}
	/* Keep what was used of the block (the text was sized for the
	 * longest address): the pointers moved along. */
	size_t used = (size_t)(s - (char *)c);
	mtd_cfg__free(parsed);
	parsed = NULL;
	struct mtd_xds_cla *d = mtd_cfg__malloc(used);
	if (d == NULL) {
		mtd_cfg__free(c);
		return -ENOMEM;
	}
	memcpy(d, c, used);
	d->name = (char *)d + (c->name - (char *)c);
	for (size_t i = 0; i < d->n; i++) {
		d->eps[i].address = (char *)d + (c->eps[i].address - (char *)c);
		if (c->eps[i].zone != NULL)
			d->eps[i].zone = (char *)d + (c->eps[i].zone - (char *)c);
	}
	mtd_cfg__free(c);
	c = d;
	/* The same address twice would be one endpoint counted twice. */
	if (c->n > 1) {
		struct mtd_xds_ep *sorted = mtd_cfg__malloc(c->n * sizeof(*sorted));
		if (sorted == NULL) {
			mtd_cfg__free(c);
			return -ENOMEM;
		}
		memcpy(sorted, c->eps, c->n * sizeof(*sorted));
		qsort(sorted, c->n, sizeof(*sorted), cmp_addr);
		for (size_t i = 1; i < c->n; i++) {
			if (strcmp(sorted[i - 1].address, sorted[i].address) == 0) {
				mtd_xds__refuse(why, whylen, "endpoint %s appears twice in priority %u",
				                sorted[i].address, c->priority);
				mtd_cfg__free(sorted);
				mtd_cfg__free(c);
				return -EINVAL;
			}
		}
		mtd_cfg__free(sorted);
	}
	*out = c;
	return 0;
fail:
	mtd_cfg__free(parsed);
	return rc;
}

int mtd_xds_cla_parse(const uint8_t *buf, size_t len, struct mtd_xds_cla **out, char *why, size_t whylen)
{
	PbCla *m;
	int rc;

	*out = NULL;
	m = envoy__config__endpoint__v3__cluster_load_assignment__unpack(&mtd_cfg__pb_allocator, len, buf);
	if (m == NULL)
		return mtd_xds__refuse(why, whylen, "the ClusterLoadAssignment does not decode");
	rc = translate(m, out, why, whylen);
	envoy__config__endpoint__v3__cluster_load_assignment__free_unpacked(m, &mtd_cfg__pb_allocator);
	return rc;
}

void mtd_xds_cla_free(struct mtd_xds_cla *c)
{
	mtd_cfg__free(c);
}

int mtd_xds_resource_name(const char *type_url, const uint8_t *buf, size_t len, char *name, size_t cap)
{
	int rc = -EINVAL;

	if (cap == 0)
		return -EINVAL;
	if (strcmp(type_url, MTD_XDS_TYPE_CLUSTER) == 0) {
		Envoy__Config__Cluster__V3__Cluster *m =
		        envoy__config__cluster__v3__cluster__unpack(&mtd_cfg__pb_allocator, len, buf);
		if (m != NULL && mtd_xds__name_ok(m->name) && strlen(m->name) < cap) {
			strcpy(name, m->name);
			rc = 0;
		}
		if (m != NULL)
			envoy__config__cluster__v3__cluster__free_unpacked(m, &mtd_cfg__pb_allocator);
	} else if (strcmp(type_url, MTD_XDS_TYPE_ENDPOINT) == 0) {
		PbCla *m =
		        envoy__config__endpoint__v3__cluster_load_assignment__unpack(&mtd_cfg__pb_allocator, len, buf);
		if (m != NULL && mtd_xds__name_ok(m->cluster_name) && strlen(m->cluster_name) < cap) {
			strcpy(name, m->cluster_name);
			rc = 0;
		}
		if (m != NULL)
			envoy__config__endpoint__v3__cluster_load_assignment__free_unpacked(m, &mtd_cfg__pb_allocator);
	} else {
		rc = mtd_xds__route_resource_name(type_url, buf, len, name, cap);
	}
	return rc;
}
