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
#include "config/config-int.h"
#include "pbwire/pbwire.h"
#include "lb/lb-t.h"
#include "xds/xds-int.h"
#include "xds/xds.h"


#define ADDR_TEXT_MAX (INET6_ADDRSTRLEN + 8) /* "[v6]:65535" */

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

/* ---- the assignment read from the wire ------------------------------------- */

/* Field numbers (protos/envoy/config/endpoint/v3/endpoint.proto,
 * core/v3/address.proto, core/v3/base.proto, google/protobuf/wrappers). */
enum { CLA_NAME = 1, CLA_ENDPOINTS = 2 };
enum { LOC_LOCALITY = 1, LOC_LB_ENDPOINTS = 2, LOC_WEIGHT = 3, LOC_PRIORITY = 5 };
enum { LOCALITY_REGION = 1, LOCALITY_ZONE = 2, LOCALITY_SUB_ZONE = 3 };
enum { LBE_ENDPOINT = 1, LBE_HEALTH = 2, LBE_WEIGHT = 4, LBE_NAME = 5 };
enum { EP_ADDRESS = 1, EP_HOSTNAME = 3 };
enum { ADDR_SOCKET = 1 };
enum { SA_PROTOCOL = 1, SA_ADDRESS = 2, SA_PORT = 3, SA_NAMED_PORT = 4, SA_RESOLVER = 5 };
enum { U32_VALUE = 1 };

/* A known field of the wrong wire type: protobuf-c refuses the message. */
static bool is(const struct mtd_pbwire_value *v, enum mtd_pbwire_type t)
{
	return v->type == t;
}

/* A string maitred reads: LEN with no NUL inside (protobuf-c would cut
 * it there; refused instead). */
static int text(const struct mtd_pbwire_value *v, const char **s, uint32_t *len)
{
	if (!is(v, MTD_PBWIRE_LEN) || v->len > UINT32_MAX || memchr(v->data, '\0', v->len) != NULL)
		return -EBADMSG;
	*s = (const char *)v->data;
	*len = (uint32_t)v->len;
	return 0;
}

/* A message whose fields are only checked for their wire types: every
 * one listed in len_fields is LEN (strings maitred does not read). */
static int only_len(const struct mtd_pbwire_value *v, uint32_t a, uint32_t b, uint32_t c)
{
	struct mtd_pbwire_iter it;
	struct mtd_pbwire_value f;
	uint32_t field;
	int rc;

	mtd_pbwire_iter_init(&it, v->data, v->len);
	while ((rc = mtd_pbwire_next(&it, &field, &f)) == 1)
		if ((field == a || field == b || field == c) && !is(&f, MTD_PBWIRE_LEN))
			return -EBADMSG;
	return rc;
}

/* google.protobuf.UInt32Value: its value, the low 32 bits of the varint
 * as protobuf-c takes them. */
static int read_u32_value(const struct mtd_pbwire_value *v, uint32_t *out)
{
	struct mtd_pbwire_iter it;
	struct mtd_pbwire_value f;
	uint32_t field;
	int rc;

	*out = 0;
	mtd_pbwire_iter_init(&it, v->data, v->len);
	while ((rc = mtd_pbwire_next(&it, &field, &f)) == 1) {
		if (field != U32_VALUE)
			continue;
		if (!is(&f, MTD_PBWIRE_VARINT))
			return -EBADMSG;
		*out = (uint32_t)f.num;
	}
	return rc;
}

static int read_socket(const struct mtd_pbwire_value *v, struct mtd_xds__wire_ep *e)
{
	struct mtd_pbwire_iter it;
	struct mtd_pbwire_value f;
	uint32_t field, unused;
	const char *ignored;
	int rc;

	mtd_pbwire_iter_init(&it, v->data, v->len);
	while ((rc = mtd_pbwire_next(&it, &field, &f)) == 1) {
		switch (field) {
		case SA_PROTOCOL:
			if (!is(&f, MTD_PBWIRE_VARINT))
				return -EBADMSG;
			e->protocol = (uint32_t)f.num;
			break;
		case SA_ADDRESS:
			if (text(&f, &e->address, &e->address_len) != 0)
				return -EBADMSG;
			break;
		case SA_PORT:
		case SA_NAMED_PORT:
			/* One member of the oneof, once (stricter than
			 * protobuf-c, which keeps the last). */
			if (e->port_case != 0)
				return -EBADMSG;
			e->port_case = (uint8_t)field;
			if (field == SA_PORT) {
				if (!is(&f, MTD_PBWIRE_VARINT))
					return -EBADMSG;
				e->port = (uint32_t)f.num;
			} else if (text(&f, &ignored, &unused) != 0) {
				return -EBADMSG;
			}
			break;
		case SA_RESOLVER:
			if (text(&f, &ignored, &unused) != 0)
				return -EBADMSG;
			e->resolver_name = unused > 0;
			break;
		default:
			break;
		}
	}
	return rc;
}

/* Endpoint, then its Address, then the SocketAddress. A message field
 * written twice would be merged by protobuf-c: refused here. */
static int read_endpoint(const struct mtd_pbwire_value *v, struct mtd_xds__wire_ep *e)
{
	struct mtd_pbwire_iter it, ia;
	struct mtd_pbwire_value f, g;
	uint32_t field;
	int rc;

	mtd_pbwire_iter_init(&it, v->data, v->len);
	while ((rc = mtd_pbwire_next(&it, &field, &f)) == 1) {
		if (field == EP_HOSTNAME && !is(&f, MTD_PBWIRE_LEN))
			return -EBADMSG;
		if (field != EP_ADDRESS)
			continue;
		if (!is(&f, MTD_PBWIRE_LEN) || e->has_address)
			return -EBADMSG;
		e->has_address = true;
		mtd_pbwire_iter_init(&ia, f.data, f.len);
		while ((rc = mtd_pbwire_next(&ia, &field, &g)) == 1) {
			if (field != ADDR_SOCKET)
				continue;
			if (!is(&g, MTD_PBWIRE_LEN) || e->has_socket)
				return -EBADMSG;
			e->has_socket = true;
			if (read_socket(&g, e) != 0)
				return -EBADMSG;
		}
		if (rc != 0)
			return rc;
	}
	return rc;
}

static int read_lb_endpoint(const struct mtd_pbwire_value *v, struct mtd_xds__wire_ep *e)
{
	struct mtd_pbwire_iter it;
	struct mtd_pbwire_value f;
	uint32_t field, unused;
	const char *ignored;
	int rc;

	mtd_pbwire_iter_init(&it, v->data, v->len);
	while ((rc = mtd_pbwire_next(&it, &field, &f)) == 1) {
		switch (field) {
		case LBE_ENDPOINT:
		case LBE_NAME:
			if (!is(&f, MTD_PBWIRE_LEN) || e->host_case != 0)
				return -EBADMSG;
			e->host_case = (uint8_t)field;
			if (field == LBE_ENDPOINT ? read_endpoint(&f, e) != 0 : text(&f, &ignored, &unused) != 0)
				return -EBADMSG;
			break;
		case LBE_HEALTH:
			if (!is(&f, MTD_PBWIRE_VARINT))
				return -EBADMSG;
			e->health = (int32_t)(uint32_t)f.num;
			break;
		case LBE_WEIGHT:
			if (!is(&f, MTD_PBWIRE_LEN) || e->has_weight || read_u32_value(&f, &e->weight) != 0)
				return -EBADMSG;
			e->has_weight = true;
			break;
		default:
			break;
		}
	}
	return rc;
}

/* A LocalityLbEndpoints' own fields into l; its lb_endpoints counted
 * (eps == NULL) or read into eps[l->first...]. */
static int read_locality(const struct mtd_pbwire_value *v, struct mtd_xds__wire_loc *l, struct mtd_xds__wire_ep *eps)
{
	struct mtd_pbwire_iter it, iz;
	struct mtd_pbwire_value f, g;
	uint32_t field;
	int rc;

	mtd_pbwire_iter_init(&it, v->data, v->len);
	while ((rc = mtd_pbwire_next(&it, &field, &f)) == 1) {
		if (eps == NULL) {
			if (field == LOC_LB_ENDPOINTS)
				l->n++;
			continue;
		}
		switch (field) {
		case LOC_LOCALITY:
			if (!is(&f, MTD_PBWIRE_LEN) || l->has_locality || only_len(&f, LOCALITY_REGION, LOCALITY_ZONE,
			                                                          LOCALITY_SUB_ZONE) != 0)
				return -EBADMSG;
			l->has_locality = true;
			mtd_pbwire_iter_init(&iz, f.data, f.len);
			while (mtd_pbwire_next(&iz, &field, &g) == 1)
				if (field == LOCALITY_ZONE && text(&g, &l->zone, &l->zone_len) != 0)
					return -EBADMSG;
			break;
		case LOC_LB_ENDPOINTS:
			if (!is(&f, MTD_PBWIRE_LEN) || read_lb_endpoint(&f, &eps[l->first + l->n++]) != 0)
				return -EBADMSG;
			break;
		case LOC_WEIGHT:
			if (!is(&f, MTD_PBWIRE_LEN) || l->has_weight || read_u32_value(&f, &l->weight) != 0)
				return -EBADMSG;
			l->has_weight = true;
			break;
		case LOC_PRIORITY:
			if (!is(&f, MTD_PBWIRE_VARINT))
				return -EBADMSG;
			l->priority = (uint32_t)f.num;
			break;
		default:
			break;
		}
	}
	return rc;
}

int mtd_xds__cla_read(const uint8_t *buf, size_t len, struct mtd_xds__wire_cla *w)
{
	struct mtd_pbwire_iter it;
	struct mtd_pbwire_value f;
	uint32_t field;
	size_t n_eps = 0;
	int rc;

	memset(w, 0, sizeof(*w));
	w->name = "";
	/* First pass: the top level is well formed, the localities and their
	 * endpoints counted (each locality's fields only skimmed). */
	mtd_pbwire_iter_init(&it, buf, len);
	while ((rc = mtd_pbwire_next(&it, &field, &f)) == 1) {
		if (field == CLA_NAME) {
			if (text(&f, &w->name, &w->name_len) != 0)
				return -EBADMSG;
		} else if (field == CLA_ENDPOINTS) {
			struct mtd_xds__wire_loc l = {0};
			if (!is(&f, MTD_PBWIRE_LEN) || read_locality(&f, &l, NULL) != 0)
				return -EBADMSG;
			w->n_locs++;
			n_eps += l.n;
		}
	}
	if (rc != 0)
		return rc;
	/* One block: the localities, then the endpoints. */
	if (w->n_locs > 0) {
		w->locs = mtd_cfg__calloc(1, w->n_locs * sizeof(*w->locs) + n_eps * sizeof(*w->eps));
		if (w->locs == NULL)
			return -ENOMEM;
		w->eps = (struct mtd_xds__wire_ep *)&w->locs[w->n_locs];
	}
	size_t k = 0;
	mtd_pbwire_iter_init(&it, buf, len);
	while (mtd_pbwire_next(&it, &field, &f) == 1) {
		if (field != CLA_ENDPOINTS)
			continue;
		struct mtd_xds__wire_loc *l = &w->locs[k++];
		l->first = w->n_eps;
		if (read_locality(&f, l, w->eps) != 0) {
			mtd_xds__cla_wire_clear(w);
			return -EBADMSG;
		}
		w->n_eps += l->n;
	}
	return 0;
}

void mtd_xds__cla_wire_clear(struct mtd_xds__wire_cla *w)
{
	mtd_cfg__free(w->locs);
	memset(w, 0, sizeof(*w));
	w->name = "";
}

/* ---- the translation ---------------------------------------------------------- */

/* Check endpoints[i].lb_endpoints[j]'s socket address and parse it into
 * e's port, v6 and ip, or -EINVAL (each endpoint is parsed once:
 * addr_text prints the parse). */
static int parse_addr(const struct mtd_xds__wire_ep *w, struct mtd_xds_ep *e, char *why, size_t whylen, size_t i,
                      size_t j)
{
	char ip[INET6_ADDRSTRLEN];
	const char *bad;

	if (w->protocol != 0)
		bad = "protocol must be TCP";
	else if (w->resolver_name)
		bad = "resolver_name is not supported (a numeric address)";
	else if (w->port_case != SA_PORT || w->port == 0 || w->port > 65535)
		bad = "port_value must be 1..65535";
	else
		bad = NULL;
	if (bad != NULL)
		return mtd_xds__refuse(why, whylen, "endpoints[%zu].lb_endpoints[%zu]: %s", i, j, bad);
	e->port = (uint16_t)w->port;
	if (w->address_len < sizeof(ip)) {
		if (w->address_len > 0)
			memcpy(ip, w->address, w->address_len);
		ip[w->address_len] = '\0';
		if (inet_pton(AF_INET, ip, e->ip) == 1) {
			e->v6 = false;
			return 0;
		}
		if (inet_pton(AF_INET6, ip, e->ip) == 1) {
			e->v6 = true;
			return 0;
		}
	}
	return mtd_xds__refuse(why, whylen, "endpoints[%zu].lb_endpoints[%zu]: address \"%.*s\" is not a numeric IP", i,
	                       j, (int)(w->address_len < 64 ? w->address_len : 64), w->address_len ? w->address : "");
}

static bool pickable(const struct mtd_xds__wire_ep *e)
{
	switch (e->health) {
	case ENVOY__CONFIG__CORE__V3__HEALTH_STATUS__UNHEALTHY:
	case ENVOY__CONFIG__CORE__V3__HEALTH_STATUS__DRAINING:
	case ENVOY__CONFIG__CORE__V3__HEALTH_STATUS__TIMEOUT:
		return false;
	default:
		return true;
	}
}

/* Equal parses, equal canonical text: the same address. */
static int cmp_addr(const void *a, const void *b)
{
	const struct mtd_xds_ep *x = a, *y = b;
	int c = memcmp(x->ip, y->ip, sizeof(x->ip));

	if (c != 0)
		return c;
	if (x->v6 != y->v6)
		return x->v6 ? 1 : -1;
	return x->port < y->port ? -1 : x->port > y->port;
}

/* First pass, one locality (endpoints[i]): everything it holds checked,
 * its endpoints' addresses parsed into parsed[] (at their wire index),
 * *total counting them; *best lowered to its priority when it has an
 * endpoint that may be picked, *any_lw set when it has a weight. 0, or
 * -EINVAL (why set). */
static int check_locality(const struct mtd_xds__wire_cla *m, size_t i, struct mtd_xds_ep *parsed, size_t *total,
                          uint32_t *best, bool *any_lw, char *why, size_t whylen)
{
	const struct mtd_xds__wire_loc *l = &m->locs[i];

	if (l->priority > MTD_XDS_MAX_PRIORITY)
		return mtd_xds__refuse(why, whylen, "endpoints[%zu].priority: %u is above %u", i, l->priority,
		                       MTD_XDS_MAX_PRIORITY);
	if (l->has_weight) {
		if (l->weight == 0)
			return mtd_xds__refuse(why, whylen, "endpoints[%zu].load_balancing_weight: must be >= 1", i);
		*any_lw = true;
	}
	if (l->zone_len > 0) {
		char zone[256];
		bool ok = l->zone_len <= 255;
		if (ok) {
			memcpy(zone, l->zone, l->zone_len);
			zone[l->zone_len] = '\0';
			ok = mtd_xds__name_ok(zone);
		}
		if (!ok)
			return mtd_xds__refuse(why, whylen,
			                       "endpoints[%zu].locality.zone: longer than 255 or not printable", i);
	}
	if (l->n > MTD_LB_MAX_ENDPOINTS || *total + l->n > MTD_LB_MAX_ENDPOINTS)
		return mtd_xds__refuse(why, whylen, "more than %u endpoints", MTD_LB_MAX_ENDPOINTS);
	*total += l->n;
	for (size_t j = 0; j < l->n; j++) {
		const struct mtd_xds__wire_ep *e = &m->eps[l->first + j];

		if (e->host_case != LBE_ENDPOINT || !e->has_address || !e->has_socket)
			return mtd_xds__refuse(
			        why, whylen, "endpoints[%zu].lb_endpoints[%zu]: needs endpoint.address.socket_address",
			        i, j);
		if (parse_addr(e, &parsed[l->first + j], why, whylen, i, j) != 0)
			return -EINVAL;
		if (e->has_weight && e->weight == 0)
			return mtd_xds__refuse(why, whylen,
			                       "endpoints[%zu].lb_endpoints[%zu].load_balancing_weight: must be >= 1",
			                       i, j);
		if (pickable(e) && l->priority < *best)
			*best = l->priority;
	}
	return 0;
}

/* How many of locality l's endpoints may be picked; their weights' sum
 * and largest (1 at least) into *sum_ew and *max_ew. */
static size_t pickable_in(const struct mtd_xds__wire_cla *m, const struct mtd_xds__wire_loc *l, double *sum_ew,
                          uint32_t *max_ew)
{
	size_t k = 0;

	*sum_ew = 0.0;
	*max_ew = 1;
	for (size_t j = 0; j < l->n; j++) {
		const struct mtd_xds__wire_ep *e = &m->eps[l->first + j];
		uint32_t w = e->has_weight ? e->weight : 1;

		if (!pickable(e))
			continue;
		k++;
		*sum_ew += w;
		if (w > *max_ew)
			*max_ew = w;
	}
	return k;
}

/* An endpoint's weight in maitred's range: its locality's share of the
 * calls (lw_share, when any locality has a weight) split among the
 * locality's endpoints by their weights; else the endpoint's own weight,
 * scaled down past the range maitred's weights take. */
static int32_t ep_weight(bool any_lw, double lw_share, uint32_t w, double sum_ew, uint32_t max_ew)
{
	double eff;

	if (any_lw)
		eff = (double)MTD_XDS_WEIGHT_SCALE * lw_share * ((double)w / sum_ew);
	else
		eff = max_ew > MTD_XDS_WEIGHT_SCALE ? (double)w * MTD_XDS_WEIGHT_SCALE / max_ew : (double)w;
	return eff < 1.0 ? 1 : eff > MTD_XDS_WEIGHT_SCALE ? MTD_XDS_WEIGHT_SCALE : (int32_t)(eff + 0.5);
}

/* Locality l's endpoints that may be picked appended to c->eps, their
 * text (and the locality's zone) written from *s on. */
static void fill_locality(struct mtd_xds_cla *c, const struct mtd_xds__wire_cla *m, const struct mtd_xds__wire_loc *l,
                          const struct mtd_xds_ep *parsed, bool any_lw, double sum_lw, char **s)
{
	const char *zone = NULL;
	double sum_ew, lw_share = (l->has_weight ? l->weight : 1.0) / sum_lw;
	uint32_t max_ew;

	if (pickable_in(m, l, &sum_ew, &max_ew) == 0)
		return;
	if (l->zone_len > 0) {
		zone = *s;
		memcpy(*s, l->zone, l->zone_len);
		(*s)[l->zone_len] = '\0';
		*s += l->zone_len + 1;
	}
	for (size_t j = 0; j < l->n; j++) {
		const struct mtd_xds__wire_ep *e = &m->eps[l->first + j];
		struct mtd_xds_ep *ep = &c->eps[c->n];

		if (!pickable(e))
			continue;
		ep->port = parsed[l->first + j].port;
		ep->v6 = parsed[l->first + j].v6;
		memcpy(ep->ip, parsed[l->first + j].ip, sizeof(ep->ip));
		ep->address = *s;
		*s = addr_text(ep, *s) + 1;
		ep->zone = zone;
		ep->weight = ep_weight(any_lw, lw_share, e->has_weight ? e->weight : 1, sum_ew, max_ew);
		c->n++;
	}
}

/* 0 when no address is in c twice (one endpoint counted twice; checked
 * on the parses: equal parses print the same text); -EINVAL (why set)
 * or -ENOMEM. */
static int refuse_twice(const struct mtd_xds_cla *c, char *why, size_t whylen)
{
	if (c->n < 2)
		return 0;
	struct mtd_xds_ep *sorted = mtd_cfg__malloc(c->n * sizeof(*sorted));
	int rc = 0;

	if (sorted == NULL)
		return -ENOMEM;
	memcpy(sorted, c->eps, c->n * sizeof(*sorted));
	qsort(sorted, c->n, sizeof(*sorted), cmp_addr);
	for (size_t i = 1; i < c->n && rc == 0; i++)
		if (cmp_addr(&sorted[i - 1], &sorted[i]) == 0)
			rc = mtd_xds__refuse(why, whylen, "endpoint %s appears twice in priority %u", sorted[i].address,
			                     c->priority);
	mtd_cfg__free(sorted);
	return rc;
}

/* c's block cut to its first used bytes (the text was sized for the
 * longest address), the pointers moved along; c is freed. NULL when out
 * of memory. */
static struct mtd_xds_cla *shrink(struct mtd_xds_cla *c, size_t used)
{
	struct mtd_xds_cla *d = mtd_cfg__malloc(used);

	if (d != NULL) {
		memcpy(d, c, used);
		d->name = (char *)d + (c->name - (char *)c);
		for (size_t i = 0; i < d->n; i++) {
			d->eps[i].address = (char *)d + (c->eps[i].address - (char *)c);
			if (c->eps[i].zone != NULL)
				d->eps[i].zone = (char *)d + (c->eps[i].zone - (char *)c);
		}
	}
	mtd_cfg__free(c);
	return d;
}

/* The assignment m in maitred's terms: every locality checked, then the
 * endpoints of the lowest priority with one that may be picked, in one
 * block sized by a second pass and cut to what the third used. */
static int translate(const struct mtd_xds__wire_cla *m, struct mtd_xds_cla **out, char *why, size_t whylen)
{
	char name[MTD_XDS_NAME_MAX + 1];
	uint32_t best = UINT32_MAX, max_ew;
	size_t total = 0, n = 0, bytes = 0, cap;
	bool any_lw = false;
	double sum_lw = 0.0, sum_ew;
	int rc = 0;

	if (m->name_len > MTD_XDS_NAME_MAX)
		return mtd_xds__refuse(why, whylen, "cluster_name: empty, too long or not printable");
	memcpy(name, m->name, m->name_len);
	name[m->name_len] = '\0';
	if (!mtd_xds__name_ok(name))
		return mtd_xds__refuse(why, whylen, "cluster_name: empty, too long or not printable");
	/* Every endpoint's address as parsed by the first pass, in wire
	 * order (at most the endpoints the first pass lets through). */
	cap = m->n_eps < MTD_LB_MAX_ENDPOINTS ? m->n_eps : MTD_LB_MAX_ENDPOINTS;
	struct mtd_xds_ep *parsed = mtd_cfg__calloc(cap ? cap : 1, sizeof(*parsed));
	if (parsed == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < m->n_locs && rc == 0; i++)
		rc = check_locality(m, i, parsed, &total, &best, &any_lw, why, whylen);
	if (rc != 0) {
		mtd_cfg__free(parsed);
		return rc;
	}
	/* Second pass: the chosen priority's endpoints, sized. */
	for (size_t i = 0; i < m->n_locs; i++) {
		const struct mtd_xds__wire_loc *l = &m->locs[i];
		size_t k = l->priority == best ? pickable_in(m, l, &sum_ew, &max_ew) : 0;

		if (k == 0)
			continue;
		n += k;
		bytes += k * ADDR_TEXT_MAX + (l->zone_len > 0 ? l->zone_len + 1 : 0);
		sum_lw += l->has_weight ? l->weight : 1.0;
	}
	struct mtd_xds_cla *c = mtd_cfg__calloc(1, sizeof(*c) + n * sizeof(c->eps[0]) + bytes + m->name_len + 1);
	if (c == NULL) {
		mtd_cfg__free(parsed);
		return -ENOMEM;
	}
	char *s = (char *)&c->eps[n];
	c->name = s;
	s = stpcpy(s, name) + 1;
	c->priority = best == UINT32_MAX ? 0 : best;
	c->n_skipped = (uint32_t)(total - n);
	c->locality_weighted = any_lw;
	/* Third pass: the endpoints and their text. */
	for (size_t i = 0; i < m->n_locs && n > 0; i++)
		if (m->locs[i].priority == best)
			fill_locality(c, m, &m->locs[i], parsed, any_lw, sum_lw, &s);
	mtd_cfg__free(parsed);
	if ((rc = refuse_twice(c, why, whylen)) != 0) {
		mtd_cfg__free(c);
		return rc;
	}
	if ((*out = shrink(c, (size_t)(s - (char *)c))) == NULL)
		return -ENOMEM;
	return 0;
}

int mtd_xds_cla_parse(const uint8_t *buf, size_t len, struct mtd_xds_cla **out, char *why, size_t whylen)
{
	struct mtd_xds__wire_cla w;
	int rc;

	*out = NULL;
	rc = mtd_xds__cla_read(buf, len, &w);
	if (rc == -ENOMEM)
		return rc;
	/* The reader refuses a NUL in a string it reads as it refuses what
	 * does not decode; the guard says which (walking every assignment
	 * by its descriptors would add half to the reading of one). */
	if (rc != 0 && mtd_xds__strings_whole(&envoy__config__endpoint__v3__cluster_load_assignment__descriptor, buf,
	                                      len, NULL, why, whylen) != -EINVAL)
		return mtd_xds__refuse(why, whylen, "the ClusterLoadAssignment does not decode");
	if (rc != 0)
		return -EINVAL;
	rc = translate(&w, out, why, whylen);
	mtd_xds__cla_wire_clear(&w);
	return rc;
}

void mtd_xds_cla_free(struct mtd_xds_cla *c)
{
	mtd_cfg__free(c);
}
