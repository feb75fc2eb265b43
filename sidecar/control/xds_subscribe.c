/* The xDS client's subscriptions and requests (xds.c has the overview):
 * the tables of clusters and assignments follow what the bound services
 * name (xds_retable), each type's request says the names, the version
 * last accepted and the nonce it answers (xds_send_request), and every
 * response is read, given to its type's handler (xds_clusters.c,
 * xds_listener.c) and answered: an ACK, or a NACK naming each refused
 * resource (logged at most once a second per type). Control thread
 * only. */
#include "config.h"

#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/utf8.h"
#include "envoy/service/discovery/v3/discovery.pb-c.h"
#include "sidecar/control/gclient.h"
#include "sidecar/control/xds-int.h"
#include "sidecar/control/xds.h"
#include "sidecar/ops/metrics.h"

#define NACK_TEXT_MAX 4096 /* error_detail.message at most */
#define USER_AGENT    "maitred"

const char *const xds_type_url[N_TYPES] = {MTD_XDS_TYPE_CLUSTER, MTD_XDS_TYPE_ENDPOINT, MTD_XDS_TYPE_LISTENER,
                                           MTD_XDS_TYPE_ROUTE};
static const char *const type_name[N_TYPES] = {"cluster", "endpoint", "listener", "route"};

/* ---- subscriptions ------------------------------------------------------------ */

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names type t wants now, sorted and unique (borrowed from the
 * tables). NULL with *n = 0 when none; -1 on out of memory. */
static int wanted(struct mtd_xds *x, int t, const char ***out, size_t *n)
{
	size_t cap = t == T_CDS ? x->n_binds : x->n_cls, k = 0;
	const char **v;

	*out = NULL;
	*n = 0;
	if (cap == 0)
		return 0;
	v = calloc(cap, sizeof(*v));
	if (v == NULL)
		return -1;
	for (size_t i = 0; i < cap; i++) {
		if (t == T_CDS)
			v[k++] = x->binds[i]->cluster;
		else if (x->cls[i].have)
			v[k++] = x->cls[i].c.eds_name;
	}
	qsort(v, k, sizeof(*v), cmp_str);
	size_t u = 0;
	for (size_t i = 0; i < k; i++)
		if (u == 0 || strcmp(v[u - 1], v[i]) != 0)
			v[u++] = v[i];
	*out = v;
	*n = u;
	return 0;
}

/* Make the table of type t hold exactly the names wanted (entries kept by
 * name). true when the set of names changed; out of memory leaves the
 * table as it was (logged). */
bool xds_retable(struct mtd_xds *x, int t)
{
	const char **names;
	char **fresh = NULL;
	void *next = NULL;
	size_t n, esz = t == T_CDS ? sizeof(struct xds_cl) : sizeof(struct xds_cla);
	bool changed;

	if (wanted(x, t, &names, &n) != 0)
		goto oom;
	/* Every allocation first: nothing moves unless all succeeded. */
	fresh = calloc(n ? n : 1, sizeof(*fresh));
	next = calloc(n ? n : 1, esz);
	if (fresh == NULL || next == NULL)
		goto oom;
	changed = n != (t == T_CDS ? x->n_cls : x->n_clas);
	for (size_t i = 0; i < n; i++) {
		bool known = t == T_CDS ? xds_find_cl(x, names[i]) != NULL : xds_find_cla(x, names[i]) != NULL;
		if (!known && (fresh[i] = strdup(names[i])) == NULL)
			goto oom;
		changed |= !known;
	}
	for (size_t i = 0; i < n; i++) {
		if (t == T_CDS) {
			struct xds_cl *e = (struct xds_cl *)next + i, *old = xds_find_cl(x, names[i]);
			if (old != NULL) {
				*e = *old;
				/* Moved; its name stays for the lookups of the rest. */
				memset(old, 0, sizeof(*old));
				old->name = e->name;
			} else {
				e->name = fresh[i];
			}
		} else {
			struct xds_cla *e = (struct xds_cla *)next + i, *old = xds_find_cla(x, names[i]);
			if (old != NULL) {
				*e = *old;
				memset(old, 0, sizeof(*old));
				old->name = e->name;
			} else {
				e->name = fresh[i];
			}
		}
	}
	/* The old tables: an entry that moved kept only its name, which the
	 * new table owns now; the others (names no longer wanted) are freed. */
	if (t == T_CDS) {
		for (size_t i = 0; i < x->n_cls; i++)
			if (n == 0 || !bsearch(x->cls[i].name, next, n, esz, xds_cmp_name))
				xds_cl_clear(&x->cls[i]);
		free(x->cls);
		x->cls = next;
		x->n_cls = n;
	} else {
		for (size_t i = 0; i < x->n_clas; i++)
			if (n == 0 || !bsearch(x->clas[i].name, next, n, esz, xds_cmp_name))
				xds_cla_clear(&x->clas[i]);
		free(x->clas);
		x->clas = next;
		x->n_clas = n;
	}
	free(fresh);
	free(names);
	return changed;
oom:
	MTD_ERROR("xds: out of memory: subscriptions unchanged");
	for (size_t i = 0; fresh != NULL && i < n; i++)
		free(fresh[i]);
	free(fresh);
	free(next);
	free(names);
	return false;
}

/* Send type t's request on the stream: the names in its table, the
 * version last accepted, the nonce of the response it answers (nonce
 * NULL: none, a new subscription), a NACK's text. */
void xds_send_request(struct mtd_xds *x, int t, const char *nack)
{
	Envoy__Service__Discovery__V3__DiscoveryRequest req = ENVOY__SERVICE__DISCOVERY__V3__DISCOVERY_REQUEST__INIT;
	Envoy__Config__Core__V3__Node node = ENVOY__CONFIG__CORE__V3__NODE__INIT;
	Envoy__Config__Core__V3__Locality loc = ENVOY__CONFIG__CORE__V3__LOCALITY__INIT;
	Google__Rpc__Status st = GOOGLE__RPC__STATUS__INIT;
	const struct xds_one *one = t == T_LDS ? &x->lds : t == T_RDS ? &x->rds : NULL;
	size_t n = t == T_CDS ? x->n_cls : t == T_EDS ? x->n_clas : one->name != NULL;
	char **names;

	/* No name: nothing to ask (an empty list would be a wildcard,
	 * every resource of the type the server has). */
	if (x->ads == NULL || n == 0)
		return;
	names = calloc(n, sizeof(*names));
	if (names == NULL) {
		MTD_ERROR("xds: out of memory: a %s request not sent", type_name[t]);
		return;
	}
	for (size_t i = 0; i < n; i++)
		names[i] = t == T_CDS ? x->cls[i].name : t == T_EDS ? x->clas[i].name : one->name;
	req.type_url = (char *)xds_type_url[t];
	req.n_resource_names = n;
	req.resource_names = names;
	req.version_info = x->t[t].version != NULL ? x->t[t].version : (char *)"";
	req.response_nonce = x->t[t].nonce != NULL ? x->t[t].nonce : (char *)"";
	if (!x->node_sent) {
		node.id = x->node_id;
		node.cluster = (char *)"";
		node.user_agent_name = (char *)USER_AGENT;
		node.user_agent_version_type_case =
		        ENVOY__CONFIG__CORE__V3__NODE__USER_AGENT_VERSION_TYPE_USER_AGENT_VERSION;
		node.user_agent_version = (char *)PACKAGE_VERSION;
		if (x->zone != NULL) {
			loc.zone = x->zone;
			node.locality = &loc;
		}
		req.node = &node;
	}
	if (nack != NULL) {
		st.code = 3; /* INVALID_ARGUMENT */
		st.message = (char *)nack;
		req.error_detail = &st;
	}
	if (mtd_gcli_call_send(x->ads, &req.base, false) == 0) {
		x->node_sent = true;
		x->t[t].subscribed = true;
	} else {
		MTD_ERROR("xds: cannot send a %s request (out of memory)", type_name[t]);
	}
	free(names);
}

static int cmp_bind(const void *a, const void *b)
{
	return strcmp((*(struct xds_bind *const *)a)->cluster, (*(struct xds_bind *const *)b)->cluster);
}

/* The bindings changed (a service started or stopped): subscribe to what
 * the services name now and give each bound service what is known. Run
 * from an event, once for all the changes of one turn (a reload stops
 * and starts every source). */
void xds_sync_cb(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_xds *x = arg;

	(void)fd;
	(void)what;
	if (!x->binds_sorted) {
		if (x->n_binds > 1) /* binds is NULL while none was ever bound */
			qsort(x->binds, x->n_binds, sizeof(*x->binds), cmp_bind);
		x->binds_sorted = true;
	}
	if (xds_retable(x, T_CDS) && x->ads != NULL)
		xds_send_request(x, T_CDS, NULL);
	if (xds_retable(x, T_EDS) && x->ads != NULL)
		xds_send_request(x, T_EDS, NULL);
	xds_apply_new(x);
}

void xds_schedule_sync(struct mtd_xds *x)
{
	event_active(x->sync_ev, 0, 0);
}

void mtd_xds_sources_started(struct mtd_xds *x)
{
	if (x == NULL)
		return;
	event_del(x->sync_ev); /* done now, not again at the next turn */
	xds_sync_cb(-1, 0, x);
}

/* ---- responses ---------------------------------------------------------------- */

/* Append "name: why" to the NACK text. */
void xds_nack_add(char *buf, size_t *len, const char *name, const char *why)
{
	int k;

	if (*len + 8 >= NACK_TEXT_MAX)
		return;
	k = snprintf(buf + *len, NACK_TEXT_MAX - *len, "%s%s: %s", *len ? "; " : "", name, why);
	if (k > 0)
		*len += (size_t)k < NACK_TEXT_MAX - *len ? (size_t)k : NACK_TEXT_MAX - *len - 1;
}

/* Log type t's NACK text now; unlogged: the NACKs held back before it. */
static void nack_line(struct mtd_xds *x, int t, const char *text, uint64_t unlogged, int64_t now)
{
	struct xds_type *ty = &x->t[t];

	if (unlogged > 0)
		MTD_WARN("xds: NACK of %s resources from %s (%llu more since the last line): %s", type_name[t],
		         x->server.text, (unsigned long long)unlogged, text);
	else
		MTD_WARN("xds: NACK of %s resources from %s: %s", type_name[t], x->server.text, text);
	ty->nack_logged_ms = now;
	ty->nacks_unlogged = 0;
	xds_set_str(&ty->nack_held, NULL);
}

static void nack_arm(struct mtd_xds *x, int64_t ms)
{
	struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000 * 1000)};

	evtimer_add(x->nack_ev, &tv);
}

/* The NACKs held back (xds-int.h): the last of each type logged once its second is
 * over (else a refusal that no other follows would never be logged). */
void xds_nack_flush(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_xds *x = arg;
	int64_t now = mtd_mono_ms(), next = 0;

	(void)fd;
	(void)what;
	for (int t = 0; t < N_TYPES; t++) {
		struct xds_type *ty = &x->t[t];
		if (ty->nack_held == NULL)
			continue;
		if (now - ty->nack_logged_ms >= 1000) {
			char *text = ty->nack_held;
			ty->nack_held = NULL;
			nack_line(x, t, text, ty->nacks_unlogged - 1, now);
			free(text);
		} else if (next == 0 || ty->nack_logged_ms + 1000 < next) {
			next = ty->nack_logged_ms + 1000;
		}
	}
	if (next != 0)
		nack_arm(x, next - now);
}

static void log_nack(struct mtd_xds *x, int t, const char *text)
{
	int64_t now = mtd_mono_ms();
	struct xds_type *ty = &x->t[t];

	if (ty->nack_logged_ms != 0 && now - ty->nack_logged_ms < 1000) {
		ty->nacks_unlogged++;
		xds_set_str(&ty->nack_held, text);
		if (!evtimer_pending(x->nack_ev, NULL))
			nack_arm(x, ty->nack_logged_ms + 1000 - now);
		return;
	}
	nack_line(x, t, text, ty->nacks_unlogged, now);
}

int xds_name_of(const char *url, const struct mtd_xds_any *v, char *name, size_t cap)
{
	int rc = mtd_xds_resource_name(url, v->value, v->len, name, cap);

	if (rc < 0)
		snprintf(name, cap, "(unnamed)");
	return rc;
}

/* The NACK's text as it may go out. error_detail.message is a proto3
 * string: a server decoding strictly (protobuf-go's, C++'s) fails the
 * whole request unless it is UTF-8, and a text quoted from a resource may
 * be cut inside a character; such a byte becomes '?'. A control byte
 * quoted from a resource (a route's path, a filter's name) becomes '?'
 * too: the text lands in the server's logs and dashboards, where an
 * escape sequence or a line break is the resource's author writing
 * there. */
static void nack_text_clean(char *s, size_t n)
{
	mtd_utf8_copy(s, s, n);
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			s[i] = '?';
}

void xds_on_msg(struct mtd_gcli_call *call, const uint8_t *msg, size_t len, void *arg)
{
	struct mtd_xds *x = arg;
	struct mtd_xds_response resp, *r = &resp;
	char *nack;
	size_t nack_len = 0;
	int t, rc;

	(void)call;
	if ((rc = mtd_xds_response_read(msg, len, r)) != 0) {
		/* Unanswered when out of memory: the server sends again or waits. */
		if (rc == -EBADMSG)
			MTD_WARN("xds: a DiscoveryResponse from %s does not decode (%zu bytes): ignored",
			         x->server.text, len);
		return;
	}
	x->failures = 0;
	if (x->away) {
		/* A response, not a TCP connection that the server may drop at
		 * once, ends the outage. */
		MTD_INFO("xds: %s answers again", x->server.text);
		x->away = false;
	}
	for (t = 0; t < N_TYPES && strcmp(r->type_url, xds_type_url[t]) != 0; t++)
		;
	if (t == N_TYPES) {
		MTD_WARN("xds: a response of type %.200s from %s, never asked for: ignored", r->type_url,
		         x->server.text);
		mtd_xds_response_clear(r);
		return;
	}
	nack = calloc(1, NACK_TEXT_MAX);
	if (nack == NULL) {
		mtd_xds_response_clear(r);
		return; /* unanswered: the server sends again or waits */
	}
	mtd_metrics_xds()->updates[t]++;
	struct xds_stamp *st = NULL;
	if (r->too_many > 0) {
		char why[96];
		snprintf(why, sizeof(why), "%zu resources, more than %u in one response: none read", r->too_many,
		         MTD_XDS_MAX_RESOURCES);
		xds_nack_add(nack, &nack_len, "(response)", why);
	} else if (t == T_CDS)
		xds_on_clusters(x, r, nack, &nack_len, &st);
	else if (t == T_EDS)
		xds_on_endpoints(x, r, nack, &nack_len, &st);
	else if (t == T_LDS)
		xds_on_listener(x, r, nack, &nack_len, &st);
	else
		xds_on_routes(x, r, nack, &nack_len, &st);
	xds_stamp_put(st); /* the resources that came hold their own */
	xds_set_str(&x->t[t].nonce, r->nonce);
	nack_text_clean(nack, nack_len);
	if (nack_len == 0) {
		xds_set_str(&x->t[t].version, r->version_info);
		xds_set_str(&x->t[t].nack, NULL);
		mtd_metrics_xds()->acks++;
		xds_send_request(x, t, NULL);
	} else {
		xds_set_str(&x->t[t].nack, nack);
		mtd_metrics_xds()->nacks++;
		log_nack(x, t, nack);
		xds_send_request(x, t, nack);
	}
	/* New EDS names (a cluster came or changed its service_name). */
	if (t == T_CDS && !x->t[T_EDS].subscribed)
		xds_send_request(x, T_EDS, NULL);
	/* The listener named another route configuration. */
	if (t == T_LDS && x->rds_resub) {
		x->rds_resub = false;
		xds_send_request(x, T_RDS, NULL);
	}
	free(nack);
	mtd_xds_response_clear(r);
}
