/* DNS endpoint sources, on the control thread's event
 * loop with libevent's evdns:
 *
 *  - discovery.dns: every A and AAAA record of the name, each called on the
 *    configured port, re-resolved every `refresh` (sooner when the records'
 *    TTL is shorter, never more often than once per MIN_PERIOD_MS);
 *  - static endpoints written with a host name: all the addresses of each
 *    name (evdns_getaddrinfo: the hosts file, then DNS), refreshed the same
 *    way with the default period, instead of getaddrinfo's first address at
 *    load.
 *
 * A round resolves every name; a name whose resolution fails keeps its
 * last good addresses, and the failure is logged once per outage. The set
 * (literal endpoints + every name's addresses, each with its config
 * endpoint's zone and metadata) goes to
 * mtd_control_set_endpoints, which ignores a set equal to the current one. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/dns.h>
#include <event2/util.h>

#include "core/addr.h"
#include "core/log.h"
#include "sidecar/control/control-t.h"
#include "sidecar/control/control.h"
#include "core/clock.h"
#include "discovery/discovery.h"
#include "sidecar/control/runtime.h"
#include "sidecar/ops/metrics.h"

#define MIN_PERIOD_MS     1000 /* a TTL of 0 must not make us spin */
#define STATIC_REFRESH_MS 5000 /* static host names: config.proto's dns default */
#define MAX_ADDRS         256  /* per name: more is a misconfiguration */

struct dns_name {
	struct dns_src *src;
	const char *host; /* borrowed from the config */
	const char *key;  /* static: the endpoint as written; DNS: NULL */
	/* static: the config's endpoint (its zone and metadata go with each
	 * of its addresses); DNS: NULL */
	const struct mtd_cfg_endpoint *ep;
	uint16_t port;
	int32_t weight;
	/* The last good answer. */
	struct sockaddr_storage *good;
	size_t n_good;
	/* The round in flight. */
	struct sockaddr_storage *got;
	size_t n_got;
	int pending;  /* queries of this round not answered yet */
	int answered; /* queries that gave at least a definite answer */
	char why[128];
	bool failing; /* logged this outage already */
	struct evdns_request *req[2];
	struct evdns_getaddrinfo_request *gai;
};

struct dns_src {
	struct mtd_control *ctl;
	size_t service;
	const struct mtd_cfg_service *cfg;
	bool system; /* resolv.conf servers */
	struct evdns_base *dns;
	struct event *timer;
	int64_t period_ms;
	uint32_t min_ttl; /* of this round's answers */
	struct dns_name *names;
	size_t n_names;
	int pending; /* names not done this round */
	bool stopping;
	/* A stopped source's lookups whose callbacks have not come yet, each
	 * cancelled (A, AAAA and host-name lookups alike): the source and its
	 * resolver stay until the last one. libevent defers a lookup's
	 * callback, an answer's too: one already due when the source stops
	 * comes after, and reads the source; a cancelled one's work reads the
	 * resolver. */
	size_t cancelled;
	struct mtd_mx_disc *mx; /* the admin's figures (metrics.h), or NULL */
};

static void round_start(struct dns_src *s);
static void src_destroy(struct dns_src *s);

/* A stopped source's lookup called back: the last one frees the source. */
static void stopped_callback(struct dns_src *s)
{
	if (--s->cancelled == 0)
		src_destroy(s); /* after this, libevent reads neither */
}

static void arm(struct dns_src *s)
{
	int64_t ms = s->period_ms;
	if (s->min_ttl != UINT32_MAX && (int64_t)s->min_ttl * 1000 < ms)
		ms = (int64_t)s->min_ttl * 1000; /* records expire sooner */
	if (ms < MIN_PERIOD_MS)
		ms = MIN_PERIOD_MS;
	struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
	evtimer_add(s->timer, &tv);
}

static void publish(struct dns_src *s)
{
	size_t total = 0;
	for (size_t i = 0; i < s->n_names; i++)
		total += s->names[i].n_good;
	const struct mtd_cfg_service *sc = s->cfg;
	size_t n_lit = sc->local->source == MTD_CFG_SOURCE_STATIC ? sc->local->n_endpoints : 0;
	struct mtd_disc_endpoint *set = calloc(total + n_lit + 1, sizeof(*set));
	char(*texts)[64] = calloc(total + 1, sizeof(*texts));
	size_t n = 0, t = 0;
	if (!set || !texts) {
		MTD_ERROR("service %s: out of memory building the resolved endpoint set", sc->local->name);
		goto out;
	}
	for (size_t i = 0; i < n_lit; i++) {
		const struct mtd_cfg_endpoint *e = &sc->local->endpoints[i];
		if (!mtd_rt_host_is_literal(e->addr.host))
			continue;
		set[n] = (struct mtd_disc_endpoint){.address = e->addr.text,
		                                    .salen = e->addr.salen,
		                                    .weight = e->weight,
		                                    .zone = e->zone,
		                                    /* both {key, value} */
		                                    .metadata = (const struct mtd_disc_meta *)e->meta,
		                                    .n_metadata = e->n_meta};
		memcpy(&set[n++].sa, &e->addr.sa, e->addr.salen);
	}
	for (size_t i = 0; i < s->n_names; i++) {
		const struct dns_name *nm = &s->names[i];
		for (size_t a = 0; a < nm->n_good; a++) {
			const char *id = mtd_addr_text((const struct sockaddr *)&nm->good[a], texts[t++], sizeof(texts[0]));
			/* A static name's addresses are keyed by the name as
			 * written (runtime.c static_set): two names giving one
			 * address are two endpoints, as the config allows. */
			set[n++] = (struct mtd_disc_endpoint){
			        .key = nm->key,
			        .address = id,
			        .sa = nm->good[a],
			        .salen = nm->good[a].ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
			                                                   : sizeof(struct sockaddr_in),
			        .weight = nm->weight,
			        .zone = nm->ep ? nm->ep->zone : NULL,
			        .metadata = nm->ep ? (const struct mtd_disc_meta *)nm->ep->meta : NULL,
			        .n_metadata = nm->ep ? nm->ep->n_meta : 0};
		}
	}
	if (n == 0 && sc->local->source == MTD_CFG_SOURCE_DNS && s->n_names > 0) {
		/* Its answer, an empty one: calls stop waiting for a first set
		 * and fail saying why. */
		char why[300];
		const struct dns_name *nm = &s->names[0];
		snprintf(why, sizeof(why), "dns: %s has no address%s%s", nm->host, nm->why[0] ? ": " : "", nm->why);
		mtd_control_set_unavailable(s->ctl, s->service, why);
	}
	if (mtd_control_set_endpoints(s->ctl, s->service, set, n) == 0 && s->mx)
		s->mx->endpoints = n;
out:
	free(set);
	free(texts);
}

static void name_done(struct dns_name *nm)
{
	struct dns_src *s = nm->src;
	if (s->mx) {
		s->mx->resolutions++;
		if (nm->n_got > 0)
			s->mx->last_sync_ms = mtd_wall_ms();
		else
			s->mx->resolve_fails++;
	}
	if (nm->n_got > 0) {
		/* A good answer replaces the last one. */
		free(nm->good);
		nm->good = nm->got;
		nm->n_good = nm->n_got;
		nm->got = NULL;
		nm->n_got = 0;
		if (nm->failing)
			MTD_INFO("service %s: %s resolves again (%zu address%s)", s->cfg->local->name, nm->host,
			         nm->n_good, nm->n_good == 1 ? "" : "es");
		nm->failing = false;
	} else {
		free(nm->got);
		nm->got = NULL;
		if (!nm->failing)
			MTD_WARN("service %s: cannot resolve %s: %s; keeping its last %zu address%s",
			         s->cfg->local->name, nm->host, nm->why[0] ? nm->why : "no address", nm->n_good,
			         nm->n_good == 1 ? "" : "es");
		nm->failing = true;
	}
	if (--s->pending == 0) {
		publish(s);
		arm(s);
	}
}

static void add_addr(struct dns_name *nm, int family, const void *ip)
{
	if (nm->n_got >= MAX_ADDRS)
		return;
	if (!nm->got) {
		nm->got = calloc(MAX_ADDRS, sizeof(*nm->got));
		if (!nm->got)
			return;
	}
	struct sockaddr_storage *ss = &nm->got[nm->n_got];
	memset(ss, 0, sizeof(*ss));
	if (family == AF_INET) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
		s4->sin_family = AF_INET;
		s4->sin_port = htons(nm->port);
		memcpy(&s4->sin_addr, ip, 4);
	} else {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(nm->port);
		memcpy(&s6->sin6_addr, ip, 16);
	}
	for (size_t i = 0; i < nm->n_got; i++)
		if (memcmp(&nm->got[i], ss, sizeof(*ss)) == 0)
			return;
	nm->n_got++;
}

/* discovery.dns: one A (which 0) or AAAA (1) answer. Each request has a
 * callback of its own: libevent says the type of an answer, not of an
 * error. */
static void resolved(struct dns_name *nm, int which, int result, int count, int ttl, void *addresses)
{
	struct dns_src *s = nm->src;
	nm->req[which] = NULL;
	if (s->stopping) {
		stopped_callback(s);
		return;
	}
	if (result == DNS_ERR_NONE) {
		for (int i = 0; i < count; i++)
			add_addr(nm, which ? AF_INET6 : AF_INET,
			         (const uint8_t *)addresses + (size_t)i * (which ? 16 : 4));
		if (count > 0 && ttl >= 0 && (uint32_t)ttl < s->min_ttl)
			s->min_ttl = (uint32_t)ttl;
	} else if (!nm->why[0] || result != DNS_ERR_NOTEXIST) {
		snprintf(nm->why, sizeof(nm->why), "%s", evdns_err_to_string(result));
	}
	if (--nm->pending == 0)
		name_done(nm);
}

static void resolve4_cb(int result, char type, int count, int ttl, void *addresses, void *arg)
{
	resolved(arg, 0, result, count, ttl, addresses);
}

static void resolve6_cb(int result, char type, int count, int ttl, void *addresses, void *arg)
{
	resolved(arg, 1, result, count, ttl, addresses);
}

/* Static host names: evdns_getaddrinfo (hosts file, then DNS). */
static void gai_cb(int result, struct evutil_addrinfo *res, void *arg)
{
	struct dns_name *nm = arg;
	struct dns_src *s = nm->src;
	nm->gai = NULL;
	if (s->stopping) {
		if (res)
			evutil_freeaddrinfo(res);
		stopped_callback(s);
		return;
	}
	if (result == 0) {
		for (struct evutil_addrinfo *ai = res; ai; ai = ai->ai_next) {
			if (ai->ai_family == AF_INET)
				add_addr(nm, AF_INET, &((struct sockaddr_in *)(void *)ai->ai_addr)->sin_addr);
			else if (ai->ai_family == AF_INET6)
				add_addr(nm, AF_INET6, &((struct sockaddr_in6 *)(void *)ai->ai_addr)->sin6_addr);
		}
	} else {
		snprintf(nm->why, sizeof(nm->why), "%s", evutil_gai_strerror(result));
	}
	if (res)
		evutil_freeaddrinfo(res);
	if (--nm->pending == 0)
		name_done(nm);
}

static void round_start(struct dns_src *s)
{
	s->min_ttl = UINT32_MAX;
	s->pending = (int)s->n_names + 1; /* +1: until every query is out */
	for (size_t i = 0; i < s->n_names; i++) {
		struct dns_name *nm = &s->names[i];
		nm->why[0] = '\0';
		nm->n_got = 0;
		if (s->cfg->local->source == MTD_CFG_SOURCE_DNS) {
			nm->pending = 3; /* A, AAAA, and this loop's own */
			nm->req[0] = evdns_base_resolve_ipv4(s->dns, nm->host, DNS_QUERY_NO_SEARCH, resolve4_cb, nm);
			if (!nm->req[0])
				nm->pending--;
			nm->req[1] = evdns_base_resolve_ipv6(s->dns, nm->host, DNS_QUERY_NO_SEARCH, resolve6_cb, nm);
			if (!nm->req[1])
				nm->pending--;
		} else {
			struct evutil_addrinfo hints;
			memset(&hints, 0, sizeof(hints));
			hints.ai_family = AF_UNSPEC;
			hints.ai_socktype = SOCK_STREAM;
			hints.ai_flags = EVUTIL_AI_ADDRCONFIG;
			nm->pending = 2;
			/* May answer at once (hosts file), calling gai_cb first. */
			nm->gai = evdns_getaddrinfo(s->dns, nm->host, NULL, &hints, gai_cb, nm);
		}
		if (--nm->pending == 0)
			name_done(nm);
	}
	if (--s->pending == 0) {
		publish(s);
		arm(s);
	}
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
	round_start(arg);
}

static void src_free(struct dns_src *s)
{
	if (!s)
		return;
	s->stopping = true;
	if (s->timer)
		event_free(s->timer);
	s->timer = NULL;
	/* Each lookup whose callback has not come is cancelled; its callback
	 * comes later all the same (DNS_ERR_CANCEL, EVUTIL_EAI_CANCEL, or the
	 * answer already due, which a cancel leaves as it is), and the last
	 * frees s: none reads a source freed here. The +1: none of them frees
	 * it while this runs. */
	s->cancelled = 1;
	for (size_t i = 0; i < s->n_names; i++) {
		struct dns_name *nm = &s->names[i];
		for (int k = 0; k < 2; k++)
			if (nm->req[k]) {
				s->cancelled++;
				evdns_cancel_request(s->dns, nm->req[k]);
			}
		if (nm->gai) {
			s->cancelled++;
			evdns_getaddrinfo_cancel(nm->gai);
		}
	}
	if (--s->cancelled == 0)
		src_destroy(s);
}

static void src_destroy(struct dns_src *s)
{
	if (s->dns)
		evdns_base_free(s->dns, 0); /* no lookup left: each has called back */
	for (size_t i = 0; i < s->n_names; i++) {
		free(s->names[i].good);
		free(s->names[i].got);
	}
	free(s->names);
	free(s);
}

/* A reload that kept this source (discovery.dns: the same name, port and
 * resolvers, runtime.c same_source; static host names: the addresses
 * each name had, runtime.c static_set_kept) carried its last set into the
 * snapshot in force (sources start after the publish): those addresses
 * are the name's last good answer, kept while the resolver does not
 * answer, as they were before the reload. Without them a reload during
 * a DNS outage emptied a discovery.dns service at the new source's first
 * failed round. A new source finds nothing (0: nm keeps what it has).
 * nm->key NULL (discovery.dns): every endpoint; else those keyed so. */
static int seed_good(struct dns_name *nm, struct mtd_control *ctl, size_t service)
{
	const struct mtd_runtime *rt = ctl->rt;
	if (!rt || service >= rt->cfg->n_services)
		return 0;
	const struct mtd_rt_service *svc = rt->services[service];
	size_t n = 0;
	for (size_t i = 0; i < svc->n_eps; i++) {
		const char *key = mtd_endpoint_key(svc->eps[i]);
		n += !nm->key || (key && strcmp(key, nm->key) == 0);
	}
	if (n > MAX_ADDRS)
		n = MAX_ADDRS;
	if (n == 0)
		return 0;
	struct sockaddr_storage *good = calloc(n, sizeof(*good));
	if (!good)
		return -ENOMEM;
	size_t k = 0;
	for (size_t i = 0; i < svc->n_eps && k < n; i++) {
		const char *key = mtd_endpoint_key(svc->eps[i]);
		if (nm->key && (!key || strcmp(key, nm->key) != 0))
			continue;
		memcpy(&good[k++], mtd_endpoint_sa(svc->eps[i]), mtd_endpoint_salen(svc->eps[i]));
	}
	free(nm->good);
	nm->good = good;
	nm->n_good = k;
	return 0;
}

static int src_start(struct mtd_control *ctl, size_t service, const struct mtd_cfg_service *cfg, void **state)
{
	struct dns_src *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->ctl = ctl;
	s->service = service;
	s->cfg = cfg;
	s->mx = mtd_metrics_disc(cfg->local->name, "dns");
	const struct mtd_cfg_dns *d = cfg->local->dns;
	s->system = !d || d->n_resolvers == 0;
	s->period_ms = d ? d->refresh_ms : STATIC_REFRESH_MS;
	s->dns = evdns_base_new(mtd_control_base(ctl),
	                        (s->system ? EVDNS_BASE_INITIALIZE_NAMESERVERS : 0) | EVDNS_BASE_DISABLE_WHEN_INACTIVE);
	s->timer = evtimer_new(mtd_control_base(ctl), timer_cb, s);
	if (!s->dns || !s->timer)
		goto fail;
	if (!s->system && evdns_base_load_hosts(s->dns, NULL) < 0)
		MTD_DEBUG("service %s: no hosts file for the resolver", cfg->local->name);
	for (size_t i = 0; d && i < d->n_resolvers; i++) {
		if (evdns_base_nameserver_sockaddr_add(s->dns, (const struct sockaddr *)&d->resolvers[i].sa,
		                                       d->resolvers[i].salen, 0) != 0) {
			MTD_ERROR("service %s: cannot use resolver %s", cfg->local->name, d->resolvers[i].text);
			goto fail;
		}
	}
	/* A resolver that does not answer must not stall the round for long. */
	evdns_base_set_option(s->dns, "timeout:", "2");
	evdns_base_set_option(s->dns, "attempts:", "2");
	if (d) {
		s->names = calloc(1, sizeof(*s->names));
		if (!s->names)
			goto fail;
		s->names[0] = (struct dns_name){.src = s, .host = d->name, .port = d->port, .weight = 100};
		s->n_names = 1;
		if (seed_good(&s->names[0], ctl, service) < 0)
			goto fail;
	} else {
		s->names = calloc(cfg->local->n_endpoints, sizeof(*s->names));
		if (!s->names)
			goto fail;
		for (size_t i = 0; i < cfg->local->n_endpoints; i++) {
			const struct mtd_cfg_endpoint *e = &cfg->local->endpoints[i];
			if (mtd_rt_host_is_literal(e->addr.host))
				continue;
			struct dns_name *nm = &s->names[s->n_names++];
			*nm = (struct dns_name){.src = s,
			                        .host = e->addr.host,
			                        .key = e->addr.text,
			                        .ep = e,
			                        .port = e->addr.port,
			                        .weight = e->weight};
			/* What getaddrinfo found at load is the last good answer. */
			nm->good = calloc(1, sizeof(*nm->good));
			if (!nm->good)
				goto fail;
			memcpy(nm->good, &e->addr.sa, e->addr.salen);
			nm->n_good = 1;
			if (seed_good(nm, ctl, service) < 0)
				goto fail;
		}
	}
	*state = s;
	MTD_INFO("service %s: resolving %s%s every %lld ms%s", cfg->local->name, d ? d->name : "its host names",
	         d ? "" : " in endpoints", (long long)s->period_ms, s->system ? " (resolv.conf)" : "");
	if (d) {
		round_start(s);
	} else {
		struct timeval tv = {0, 0};
		evtimer_add(s->timer, &tv); /* not inside start: the set exists */
	}
	return 0;
fail:
	src_free(s);
	return -ENOMEM;
}

static void src_stop(void *state)
{
	src_free(state);
}

const struct mtd_disc_source_ops mtd_dns_source_ops = {.name = "dns", .start = src_start, .stop = src_stop};
const struct mtd_disc_source_ops mtd_dns_static_source_ops = {
        .name = "static host names", .start = src_start, .stop = src_stop};
