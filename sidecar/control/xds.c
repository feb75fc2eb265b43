/* The xDS client: one ADS stream, CDS then EDS, state of the world
 * (xds.h says the contract). A cluster is kept translated (lib/xds: its
 * options) and as the bytes that came (to know a resend); an assignment
 * only as its bytes, translated again when its services are given it
 * (the records of one just received serve until it is applied).
 *
 * This file owns the client's lifetime (mtd_xds_prepare, commit, free)
 * and its connection:
 *
 *   DOWN --connect--> STREAMING --stream or connection ends--> DOWN
 *    ^                                                           |
 *    +--------------- retry timer (jittered backoff) <-----------+
 *
 * DOWN: no connection; the retry timer armed. STREAMING: a connection and
 * its ADS call; every subscription sent on it. The rest, one concern a
 * file, sharing the client's state through xds-int.h:
 *
 *   xds_subscribe.c  what is subscribed (the tables follow the bindings),
 *                    the requests, and every response read and answered
 *                    (ACK or NACK)
 *   xds_clusters.c   CDS and EDS responses: the last good of each name
 *   xds_listener.c   LDS and RDS responses: the routes in force, the
 *                    services created for their clusters, kept across a
 *                    reload
 *   xds_services.c   the services: the per-service source (a binding),
 *                    what each is given, the pending rebuilds
 *   xds_dump.c       /config_dump
 *
 * reload.c and the client know each other: a reload prepares and commits
 * a changed client with the rest of its transaction (mtd_xds_prepare,
 * mtd_xds_commit), and the client, when the routes name clusters no
 * service follows, makes a reload of the running config itself
 * (xds_listener.c, mtd_reload_prepare and commit: the services created
 * and the routes bound in one snapshot). A callback in place of the call
 * would name the same dependency less plainly. Control thread only. */
#include "config.h"

#include <arpa/inet.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/addr.h"
#include "core/log.h"
#include "sidecar/control/control-t.h"
#include "sidecar/control/control.h"
#include "sidecar/control/gclient.h"
#include "sidecar/control/runtime-t.h"
#include "sidecar/control/xds-int.h"
#include "sidecar/control/xds.h"
#include "sidecar/control/xds_routes.h"
#include "sidecar/io/transport.h"
#include "sidecar/ops/metrics.h"

#define ADS_PATH           "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
#define CONNECT_TIMEOUT_MS 5000
/* gRPC servers on grpc-go police PINGs: by default none more often than
 * every 5 minutes, a few strikes and GOAWAY too_many_pings (HACKING.md,
 * "Lessons"). Just past that: a dead server is found within minutes. */
#define KEEPALIVE_MS     310000
#define BACKOFF_FIRST_MS 1000
#define BACKOFF_MAX_MS   30000

/* ---- small helpers ---------------------------------------------------------- */

void xds_stamp_put(struct xds_stamp *st)
{
	if (st == NULL || --st->refs > 0)
		return;
	free(st->version);
	free(st->nonce);
	free(st);
}

/* slot takes a reference on the response's stamp, made at its first use
 * (*st); out of memory leaves slot as it was (a display only). */
void xds_stamp_take(struct xds_stamp **slot, struct xds_stamp **st,
                    const struct mtd_xds_response *r)
{
	if (*st == NULL) {
		struct xds_stamp *n = calloc(1, sizeof(*n));
		if (n == NULL || (n->version = strdup(r->version_info)) == NULL ||
		    (n->nonce = strdup(r->nonce)) == NULL) {
			if (n != NULL)
				free(n->version);
			free(n);
			return;
		}
		n->refs = 1; /* the response's own, dropped when it is done */
		*st = n;
	}
	(*st)->refs++;
	xds_stamp_put(*slot);
	*slot = *st;
}

bool xds_same_str(const char *a, const char *b)
{
	return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

void xds_set_str(char **slot, const char *s)
{
	char *c = s != NULL ? strdup(s) : NULL;

	if (s != NULL && c == NULL)
		return; /* out of memory: keep the old text, a display only */
	free(*slot);
	*slot = c;
}

int xds_cmp_name(const void *key, const void *elem)
{
	return strcmp(key, *(char *const *)elem); /* every table entry starts with its name */
}

uint64_t xds_cluster_gen_next(void)
{
	static uint64_t last;
	return ++last;
}

struct xds_cl *xds_find_cl(struct mtd_xds *x, const char *name)
{
	return x->n_cls ? bsearch(name, x->cls, x->n_cls, sizeof(*x->cls), xds_cmp_name) : NULL;
}

struct xds_cla *xds_find_cla(struct mtd_xds *x, const char *name)
{
	return x->n_clas ? bsearch(name, x->clas, x->n_clas, sizeof(*x->clas), xds_cmp_name) : NULL;
}

void xds_cl_clear(struct xds_cl *e)
{
	free(e->name);
	mtd_xds_cluster_clear(&e->c);
	free(e->raw);
	xds_stamp_put(e->stamp);
	free(e->nack);
	memset(e, 0, sizeof(*e));
}

void xds_cla_clear(struct xds_cla *e)
{
	free(e->name);
	mtd_xds_cla_free(e->fresh);
	free(e->raw);
	xds_stamp_put(e->stamp);
	free(e->nack);
	memset(e, 0, sizeof(*e));
}

/* ---- the connection ----------------------------------------------------------- */

/* Whether a resource was ever accepted from this server (a cluster, an
 * assignment, the listener or its routes). */
static bool any_good(const struct mtd_xds *x)
{
	for (size_t i = 0; i < x->n_cls; i++)
		if (x->cls[i].have)
			return true;
	for (size_t i = 0; i < x->n_clas; i++)
		if (x->clas[i].raw != NULL)
			return true;
	return x->lds.have || x->rds.have;
}

static void stream_lost(struct mtd_xds *x, const char *why)
{
	if (x->down_why == NULL || strcmp(x->down_why, why) != 0 || x->failures == 0)
		MTD_WARN("xds: %s: %s; %s", x->server.text, why,
		         any_good(x) ? "the last good resources stay in force"
		                     : "nothing received from it yet: the services with discovery.xds wait for it");
	xds_set_str(&x->down_why, why);
	x->away = true;
	mtd_gcli_free(x->conn); /* cancels the call without a callback */
	x->conn = NULL;
	x->ads = NULL;
	mtd_metrics_xds()->connected = false;
	/* Jittered exponential backoff: the first retry within 1 s. */
	unsigned k = x->failures < 5 ? x->failures : 5;
	int64_t cap = (int64_t)BACKOFF_FIRST_MS << k;
	if (cap > BACKOFF_MAX_MS)
		cap = BACKOFF_MAX_MS;
	int64_t ms = cap / 2 + (int64_t)(random() % (cap / 2 + 1));
	x->failures++;
	struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
	if (evtimer_add(x->retry, &tv) != 0)
		MTD_ERROR("xds: cannot arm the retry timer: no reconnection");
}

static void on_close(struct mtd_gcli_call *call, int status, const char *message, void *arg)
{
	struct mtd_xds *x = arg;
	char why[512];

	(void)call;
	x->ads = NULL; /* freed by gclient when this returns */
	snprintf(why, sizeof(why), "the ADS stream ended: status %d%s%.400s", status, message[0] ? ", " : "", message);
	stream_lost(x, why);
}

static void on_down(struct mtd_gcli *c, const char *reason, void *arg)
{
	struct mtd_xds *x = arg;

	(void)c;
	stream_lost(x, reason);
}

static void on_up(struct mtd_gcli *c, void *arg)
{
	(void)c;
	(void)arg;
	mtd_metrics_xds()->connected = true;
}

static const struct mtd_gcli_cbs conn_cbs = {on_up, on_down};
static const struct mtd_gcli_call_cbs call_cbs = {xds_on_msg, on_close};

static void connect_now(struct mtd_xds *x)
{
	struct ssl_st *ssl = NULL;

	if (x->ssl_ctx != NULL) {
		ssl = mtd_tls_client_ssl_new(x->ssl_ctx,
		                             x->tls_cfg->server_name ? x->tls_cfg->server_name : x->server.host);
		if (ssl == NULL) {
			stream_lost(x, "TLS: out of memory");
			return;
		}
	}
	x->conn = mtd_gcli_new(x->base, (const struct sockaddr *)&x->server.sa, x->server.salen, x->server.text, ssl,
	                       CONNECT_TIMEOUT_MS, KEEPALIVE_MS, &conn_cbs, x);
	if (x->conn == NULL) {
		stream_lost(x, "cannot create a connection");
		return;
	}
	x->ads = mtd_gcli_call_start(x->conn, ADS_PATH, NULL, &call_cbs, x);
	if (x->ads == NULL) {
		stream_lost(x, "cannot start the ADS stream (out of memory)");
		return;
	}
	x->node_sent = false;
	for (int t = 0; t < N_TYPES; t++) {
		x->t[t].subscribed = false;
		/* A nonce belongs to its stream; the versions carry over. */
		xds_set_str(&x->t[t].nonce, NULL);
	}
	if (x->n_cls > 0)
		xds_send_request(x, T_CDS, NULL);
	if (x->n_clas > 0)
		xds_send_request(x, T_EDS, NULL);
	xds_send_request(x, T_LDS, NULL); /* each: when it has a name */
	xds_send_request(x, T_RDS, NULL);
}

/* A lookup's callback argument: its client, or NULL once the client is
 * freed (a reload, a stop): the callback then comes later (libevent
 * defers it), when the client and its resolver are gone, and touches
 * neither. Not cancelled instead: libevent's cancel defers work that
 * reads the resolver, which the client frees at once. */
struct xds_lookup {
	struct mtd_xds *x;
};

/* The lookup's answer: the next of the name's addresses in turn (a
 * server that went takes the next one at the next retry), or, when the
 * name has none, the last address it had, the failure said once. */
static void lookup_done(struct mtd_xds *x, int result, struct evutil_addrinfo *res)
{
	union mtd_sockaddr got[8];
	size_t n = 0;
	char was[MTD_ADDR_TEXT_SIZE], now[MTD_ADDR_TEXT_SIZE], why[256];

	for (struct evutil_addrinfo *ai = res; ai != NULL && n < sizeof(got) / sizeof(got[0]); ai = ai->ai_next) {
		if (ai->ai_family == AF_INET && ai->ai_addrlen >= sizeof(struct sockaddr_in)) {
			memcpy(&got[n].in, ai->ai_addr, sizeof(got[n].in));
			got[n++].in.sin_port = htons(x->server.port);
		} else if (ai->ai_family == AF_INET6 && ai->ai_addrlen >= sizeof(struct sockaddr_in6)) {
			memcpy(&got[n].in6, ai->ai_addr, sizeof(got[n].in6));
			got[n++].in6.sin6_port = htons(x->server.port);
		}
	}
	if (res != NULL)
		evutil_freeaddrinfo(res);
	mtd_addr_text(&x->server.sa.sa, was, sizeof(was));
	if (n == 0) {
		snprintf(why, sizeof(why), "%s", result != 0 ? evutil_gai_strerror(result) : "no IPv4 or IPv6 address");
		if (!xds_same_str(x->lookup_why, why))
			MTD_WARN("xds: %s: cannot look up %s (%s): connecting to its last address, %s", x->server.text,
			         x->server.host, why, was);
		xds_set_str(&x->lookup_why, why);
	} else {
		union mtd_sockaddr *a = &got[x->turn++ % n];
		socklen_t len = a->sa.sa_family == AF_INET ? sizeof(a->in) : sizeof(a->in6);
		if (len != x->server.salen || memcmp(a, &x->server.sa, len) != 0)
			MTD_INFO("xds: %s: connecting to %s (was %s): %s has %zu address%s", x->server.text,
			         mtd_addr_text(&a->sa, now, sizeof(now)), was, x->server.host, n, n == 1 ? "" : "es");
		memcpy(&x->server.sa, a, len);
		x->server.salen = len;
		xds_set_str(&x->lookup_why, NULL);
	}
	connect_now(x);
}

static void lookup_cb(int result, struct evutil_addrinfo *res, void *arg)
{
	struct xds_lookup *lk = arg;
	struct mtd_xds *x = lk->x;

	free(lk);
	if (x == NULL) { /* its client was freed */
		if (res != NULL)
			evutil_freeaddrinfo(res);
		return;
	}
	x->lookup = NULL;
	lookup_done(x, result, res);
}

/* Looks the server's name up (resolv.conf and the hosts file read
 * again), then connects; an answer at once (the hosts file) connects
 * before this returns. */
static void look_up(struct mtd_xds *x)
{
	struct evutil_addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};

	if (x->dns != NULL)
		evdns_base_free(x->dns, 0); /* the last lookup's, answered */
	x->dns = evdns_base_new(x->base, EVDNS_BASE_INITIALIZE_NAMESERVERS | EVDNS_BASE_DISABLE_WHEN_INACTIVE);
	struct xds_lookup *lk = x->dns != NULL ? malloc(sizeof(*lk)) : NULL;
	if (lk == NULL) {
		lookup_done(x, EVUTIL_EAI_MEMORY, NULL);
		return;
	}
	/* A resolver that does not answer delays a reconnect by 4 s at most. */
	evdns_base_set_option(x->dns, "timeout:", "2");
	evdns_base_set_option(x->dns, "attempts:", "2");
	lk->x = x;
	x->lookup = lk;
	/* Its callback always comes (at once when the hosts file answers). */
	(void)evdns_getaddrinfo(x->dns, x->server.host, NULL, &hints, lookup_cb, lk);
}

static void retry_cb(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_xds *x = arg;

	(void)fd;
	(void)what;
	if (x->by_name)
		look_up(x);
	else
		connect_now(x);
}

/* ---- lifetime ----------------------------------------------------------------- */

static bool same_text(const char *a, const char *b)
{
	return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

static bool same_tls(const struct mtd_cfg_tls *a, const struct mtd_cfg_tls *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	return same_text(a->ca_file, b->ca_file) && same_text(a->cert_file, b->cert_file) &&
	       same_text(a->key_file, b->key_file) && same_text(a->server_name, b->server_name);
}

static bool same_config(const struct mtd_xds *x, const struct mtd_cfg_xds *c)
{
	return x != NULL && c != NULL && strcmp(x->server.text, c->server.text) == 0 &&
	       same_text(x->node_id, c->node_id) && same_text(x->zone, c->zone) && same_tls(x->tls_cfg, c->tls) &&
	       same_text(x->lds.name, c->listener) && mtd_cfg_cert_providers_same(&x->providers, &c->providers);
}

static struct mtd_cfg_tls *tls_copy(const struct mtd_cfg_tls *t)
{
	struct mtd_cfg_tls *c = calloc(1, sizeof(*c));

	if (c == NULL)
		return NULL;
	c->ca_file = t->ca_file ? strdup(t->ca_file) : NULL;
	c->cert_file = t->cert_file ? strdup(t->cert_file) : NULL;
	c->key_file = t->key_file ? strdup(t->key_file) : NULL;
	c->server_name = t->server_name ? strdup(t->server_name) : NULL;
	if ((t->ca_file && !c->ca_file) || (t->cert_file && !c->cert_file) || (t->key_file && !c->key_file) ||
	    (t->server_name && !c->server_name)) {
		free(c->ca_file);
		free(c->cert_file);
		free(c->key_file);
		free(c->server_name);
		free(c);
		return NULL;
	}
	return c;
}

static void tls_copy_free(struct mtd_cfg_tls *c)
{
	if (c == NULL)
		return;
	free(c->ca_file);
	free(c->cert_file);
	free(c->key_file);
	free(c->server_name);
	free(c);
}

int mtd_xds_prepare(struct mtd_control *ctl, const struct mtd_cfg *cfg, struct mtd_xds **next, char *err, size_t errlen)
{
	const struct mtd_cfg_xds *c = cfg->xds;
	struct mtd_xds *x;

	*next = NULL;
	if (c == NULL || same_config(ctl->xds, c))
		return 0;
	x = calloc(1, sizeof(*x));
	if (x == NULL)
		goto oom;
	x->ctl = ctl;
	x->base = mtd_control_base(ctl);
	x->server = c->server;
	x->server.text = strdup(c->server.text);
	x->server.host = strdup(c->server.host);
	x->node_id = strdup(c->node_id);
	x->zone = c->zone != NULL ? strdup(c->zone) : NULL;
	x->lds.name = c->listener != NULL ? strdup(c->listener) : NULL;
	if (x->server.host != NULL) {
		unsigned char a[sizeof(struct in6_addr)];
		x->by_name = inet_pton(AF_INET, x->server.host, a) != 1 && inet_pton(AF_INET6, x->server.host, a) != 1;
	}
	x->retry = evtimer_new(x->base, retry_cb, x);
	x->nack_ev = evtimer_new(x->base, xds_nack_flush, x);
	x->sync_ev = event_new(x->base, -1, 0, xds_sync_cb, x);
	x->pending.ev = evtimer_new(x->base, xds_rebuild_slice, x);
	x->pending.late = evtimer_new(x->base, xds_rebuild_slice, x);
	/* After every response already on the socket (a base without the
	 * control loop's priorities, in a unit test, runs it as any event). */
	if (x->pending.ev != NULL)
		(void)event_priority_set(x->pending.ev, MTD_CONTROL_PRIO_BACKGROUND);
	xds_rebuild_limits(&x->pending);
	if (x->server.text == NULL || x->server.host == NULL || x->node_id == NULL || (c->zone && x->zone == NULL) ||
	    (c->listener && x->lds.name == NULL) || x->retry == NULL || x->nack_ev == NULL || x->sync_ev == NULL || x->pending.ev == NULL ||
	    x->pending.late == NULL)
		goto oom;
	if (mtd_cfg_cert_providers_copy(&x->providers, &c->providers) != 0)
		goto oom;
	if (c->tls != NULL) {
		x->tls_cfg = tls_copy(c->tls);
		if (x->tls_cfg == NULL)
			goto oom;
		char why[256];
		x->ssl_ctx = mtd_tls_client_ctx_new(c->tls, why, sizeof(why));
		if (x->ssl_ctx == NULL) {
			snprintf(err, errlen, "xds.tls: %s", why);
			mtd_xds_free(x);
			return -1;
		}
	}
	*next = x;
	return 0;
oom:
	snprintf(err, errlen, "xds: out of memory");
	mtd_xds_free(x);
	return -1;
}

void mtd_xds_commit(struct mtd_control *ctl, struct mtd_xds *next)
{
	if (next == NULL) {
		if (ctl->rt->cfg->xds == NULL && ctl->xds != NULL) {
			MTD_INFO("xds: no xds block any more: the stream to %s closes", ctl->xds->server.text);
			mtd_xds_free(ctl->xds);
			ctl->xds = NULL;
		}
		return;
	}
	if (ctl->xds != NULL)
		MTD_INFO("xds: the xds block changed: the stream to %s closes, one to %s opens", ctl->xds->server.text,
		         next->server.text);
	/* The routes in force (carried into the new runtime) stay the new
	 * client's until its stream brings the listener's own. */
	if (ctl->xds != NULL && xds_same_str(ctl->xds->lds.name, next->lds.name))
		next->routes_answered = ctl->xds->routes_answered;
	if (ctl->xds != NULL && ctl->xds->routes != NULL && xds_same_str(ctl->xds->lds.name, next->lds.name)) {
		ctl->xds->routes->refs++;
		next->routes = ctl->xds->routes;
		next->fault = ctl->xds->fault; /* taken, with the routes it binds */
		ctl->xds->fault = (struct mtd_xds_fault){0};
	}
	mtd_xds_free(ctl->xds);
	ctl->xds = next;
	MTD_INFO("xds: management server %s%s, node %s%s%s", next->server.text, next->ssl_ctx ? " (TLS)" : " (h2c)",
	         next->node_id, next->zone ? ", zone " : "", next->zone ? next->zone : "");
	connect_now(next);
}

void mtd_xds_free(struct mtd_xds *x)
{
	if (x == NULL)
		return;
	mtd_gcli_free(x->conn);
	if (x->lookup)
		x->lookup->x = NULL;
	if (x->dns) /* a pending lookup fails, its callback deferred */
		evdns_base_free(x->dns, 1);
	free(x->lookup_why);
	if (x->retry)
		event_free(x->retry);
	if (x->nack_ev)
		event_free(x->nack_ev);
	if (x->sync_ev)
		event_free(x->sync_ev);
	if (x->pending.ev)
		event_free(x->pending.ev);
	if (x->pending.late)
		event_free(x->pending.late);
	if (x->ssl_ctx)
		mtd_tls_ctx_free(x->ssl_ctx);
	tls_copy_free(x->tls_cfg);
	mtd_cfg_cert_providers_fini(&x->providers);
	free(x->server.text);
	free(x->server.host);
	free(x->node_id);
	free(x->zone);
	free(x->down_why);
	for (int t = 0; t < N_TYPES; t++) {
		free(x->t[t].version);
		free(x->t[t].nonce);
		free(x->t[t].nack);
		free(x->t[t].nack_held);
	}
	for (size_t i = 0; i < x->n_cls; i++)
		xds_cl_clear(&x->cls[i]);
	free(x->cls);
	for (size_t i = 0; i < x->n_clas; i++)
		xds_cla_clear(&x->clas[i]);
	free(x->clas);
	xds_one_clear(&x->lds);
	xds_one_clear(&x->rds);
	mtd_xds_routes_box_put(x->routes);
	free(x->fault.filter);
	/* Bindings belong to their sources, stopped before (sources.h). */
	for (size_t i = 0; i < x->n_binds; i++) {
		x->binds[i]->x = NULL;
		x->binds[i]->pending_at = 0;
	}
	free(x->binds);
	free(x->pending.q);
	if (x->ctl->xds == x) {
		mtd_metrics_xds()->connected = false;
		mtd_metrics_xds()->rebuilds_pending = 0;
	}
	free(x);
}
