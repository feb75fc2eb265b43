/* ORCA out-of-band streams (orca_oob.h): one per endpoint of the
 * services that ask for them, each on a gclient connection of its own. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "core/clock.h"
#include "core/log.h"
#include "grpc/grpc.h"
#include "lb/lb.h"
#include "sidecar/control/control-t.h"
#include "sidecar/control/gclient.h"
#include "sidecar/control/orca_oob.h"
#include "sidecar/control/runtime.h"
#include "sidecar/io/transport.h"
#include "xds/service/orca/v3/orca.pb-c.h"

#define PATH               "/xds.service.orca.v3.OpenRcaService/StreamCoreMetrics"
#define CONNECT_TIMEOUT_MS 5000
#define BACKOFF_FIRST_MS   1000
#define BACKOFF_MAX_MS     30000
/* A stream silent this long past its period is taken as dead and opened
 * again: no PING goes on these connections, so a peer that vanished
 * without a FIN or RST (a host gone, a partition, a process hung) would
 * otherwise hold the endpoint's stream, and its trailers ignored, for
 * ever. A minute of slack: gRPC servers may send less often than asked
 * (grpc-go and grpc-java send at most every 30 s by default). */
#define SILENCE_SLACK_MS 60000

/* One endpoint's stream. */
struct oob {
	struct mtd_orca_oob *o;
	struct mtd_endpoint *ep;       /* reference held */
	char *svc;                     /* its service's name (logs) */
	struct ssl_ctx_st *ssl_ctx;    /* a reference, or NULL: h2c */
	char *server_name;             /* tls.server_name, or NULL: the endpoint's host */
	uint64_t tls_gen;              /* the service's TLS policy it was made under */
	struct mtd_lb_orca_config cfg; /* how its reports are weighed */
	struct mtd_gcli *conn;
	struct mtd_gcli_call *call;
	struct event *retry;
	struct event *silence; /* no message for period + SILENCE_SLACK_MS: lost */
	unsigned failures;     /* in a row, since the last report */
	bool unimpl_logged;
	char last_why[160]; /* the last failure logged */
};

struct mtd_orca_oob {
	struct mtd_control *ctl;
	uint64_t gen; /* runtime generation the streams follow */
	struct event *sync;
	struct oob **s;
	size_t n;
};

static void connect_now(struct oob *st);

static struct timeval tv_ms(int64_t ms)
{
	return (struct timeval){(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
}

/* The orca options of s's policy that asks for out-of-band reports (the
 * service's, else a method's), or NULL when none does. */
static const struct mtd_lb_orca_config *wanted(const struct mtd_rt_service *s)
{
	const struct mtd_cfg_service *c = s->cfg;

	if (c->lb.ops && (c->lb.ops->caps & MTD_LB_CAP_ORCA) && c->lb.orca.out_of_band)
		return &c->lb.orca;
	for (size_t m = 0; m < c->n_methods; m++) {
		const struct mtd_lb_config *lb = &c->methods[m].lb;
		if (lb->ops && (lb->ops->caps & MTD_LB_CAP_ORCA) && lb->orca.out_of_band)
			return &lb->orca;
	}
	return NULL;
}

static void set_state(struct oob *st, enum mtd_lb_orca_oob state)
{
	mtd_lb_orca_set_oob(&st->ep->stats, state);
}

/* The stream is gone (why): its connection freed, the next try after a
 * jittered backoff, at its cap at once when the endpoint has no
 * OpenRcaService. */
static void lost(struct oob *st, const char *why, bool unimplemented)
{
	enum mtd_lb_orca_oob was = mtd_lb_orca_oob_state(&st->ep->stats);

	/* Logged when it ends after reports, or fails another way than last
	 * time (not once per retry). */
	if (was == MTD_LB_ORCA_OOB_OPEN || (!unimplemented && strcmp(st->last_why, why) != 0))
		MTD_WARN("service %s: endpoint %s: the ORCA out-of-band stream %s: %s; reconnecting", st->svc,
		         mtd_endpoint_text(st->ep), was == MTD_LB_ORCA_OOB_OPEN ? "ended" : "failed", why);
	else
		MTD_DEBUG("service %s: endpoint %s: ORCA out-of-band stream: %s", st->svc, mtd_endpoint_text(st->ep),
		          why);
	snprintf(st->last_why, sizeof(st->last_why), "%s", why);
	evtimer_del(st->silence);
	mtd_gcli_free(st->conn); /* inside its callback: freed when that returns */
	st->conn = NULL;
	st->call = NULL;
	if (unimplemented) {
		if (!st->unimpl_logged)
			MTD_WARN("service %s: endpoint %s does not serve xds.service.orca.v3.OpenRcaService "
			         "(UNIMPLEMENTED): its load reports are read from its trailers; asked again every %d s",
			         st->svc, mtd_endpoint_text(st->ep), BACKOFF_MAX_MS / 1000);
		st->unimpl_logged = true;
		set_state(st, MTD_LB_ORCA_OOB_UNIMPLEMENTED);
	} else if (was == MTD_LB_ORCA_OOB_OPEN) {
		set_state(st, MTD_LB_ORCA_OOB_WAITING);
	}
	unsigned k = st->failures < 5 ? st->failures : 5;
	int64_t cap = unimplemented ? BACKOFF_MAX_MS : (int64_t)BACKOFF_FIRST_MS << k;
	if (cap > BACKOFF_MAX_MS)
		cap = BACKOFF_MAX_MS;
	int64_t ms = cap / 2 + (int64_t)(random() % (cap / 2 + 1));
	st->failures++;
	struct timeval tv = tv_ms(ms);
	if (evtimer_add(st->retry, &tv) != 0)
		MTD_ERROR("service %s: endpoint %s: cannot arm the ORCA stream's retry timer: no reconnection", st->svc,
		          mtd_endpoint_text(st->ep));
}

/* The stream said something (or started): silence counts from now. */
static void heard(struct oob *st)
{
	struct timeval tv = tv_ms(st->cfg.oob_period_ms + SILENCE_SLACK_MS);

	evtimer_add(st->silence, &tv);
}

static void silence_cb(evutil_socket_t fd, short what, void *arg)
{
	struct oob *st = arg;
	char why[96];

	(void)fd;
	(void)what;
	snprintf(why, sizeof(why), "no message for %lld s",
	         (long long)(st->cfg.oob_period_ms + SILENCE_SLACK_MS) / 1000);
	lost(st, why, false);
}

static void on_msg(struct mtd_gcli_call *call, const uint8_t *msg, size_t len, void *arg)
{
	struct oob *st = arg;

	(void)call;
	heard(st);
	if (mtd_lb_orca_record_raw(&st->ep->stats, msg, len, &st->cfg, mtd_mono_ms()) != 0) {
		MTD_DEBUG(
		        "service %s: endpoint %s: an out-of-band load report that does not parse (%zu bytes): ignored",
		        st->svc, mtd_endpoint_text(st->ep), len);
		return;
	}
	st->failures = 0;
	st->last_why[0] = '\0';
	if (mtd_lb_orca_oob_state(&st->ep->stats) != MTD_LB_ORCA_OOB_OPEN) {
		if (st->unimpl_logged)
			MTD_INFO("service %s: endpoint %s: ORCA out-of-band reports again", st->svc,
			         mtd_endpoint_text(st->ep));
		st->unimpl_logged = false;
		set_state(st, MTD_LB_ORCA_OOB_OPEN);
	}
}

/* A report longer than any the trailers may carry: skipped unread as it
 * arrives (never held whole), counted as one that does not parse. */
static void on_too_large(struct mtd_gcli_call *call, size_t len, void *arg)
{
	struct oob *st = arg;

	(void)call;
	heard(st);
	mtd_lb_orca_record_raw(&st->ep->stats, NULL, len, &st->cfg, mtd_mono_ms());
	MTD_DEBUG("service %s: endpoint %s: an out-of-band load report of %zu bytes (more than %d): ignored", st->svc,
	          mtd_endpoint_text(st->ep), len, MTD_LB_ORCA_MAX_REPORT);
}

static void on_close(struct mtd_gcli_call *call, int status, const char *message, void *arg)
{
	struct oob *st = arg;
	char why[320];

	(void)call;
	st->call = NULL; /* freed by gclient when this returns */
	snprintf(why, sizeof(why), "status %d%s%.256s", status, message[0] ? ", " : "", message);
	lost(st, why, status == MTD_GRPC_UNIMPLEMENTED);
}

static void on_down(struct mtd_gcli *c, const char *reason, void *arg)
{
	(void)c;
	lost(arg, reason, false);
}

static const struct mtd_gcli_cbs conn_cbs = {NULL, on_down};
static const struct mtd_gcli_call_cbs call_cbs = {on_msg, on_close, on_too_large};

static void connect_now(struct oob *st)
{
	const struct mtd_endpoint *ep = st->ep;
	char host[256];
	const char *name = st->server_name ? st->server_name : mtd_endpoint_host(ep, host, sizeof(host));
	struct ssl_st *ssl = NULL;

	if (st->ssl_ctx != NULL) {
		ssl = mtd_tls_endpoint_ssl_new(st->ssl_ctx, name);
		if (ssl == NULL) {
			lost(st, "TLS: out of memory", false);
			return;
		}
	}
	/* No keepalive PING: gRPC servers police them (A8); a report every
	 * period is what shows the stream alive (SILENCE_SLACK_MS). */
	st->conn = mtd_gcli_new(st->o->ctl->base, mtd_endpoint_sa(ep), mtd_endpoint_salen(ep),
	                        st->server_name ? st->server_name : mtd_endpoint_text(ep), ssl, CONNECT_TIMEOUT_MS, 0,
	                        &conn_cbs, st);
	if (st->conn == NULL || (ssl != NULL && mtd_gcli_check_peer(st->conn, mtd_endpoint_identity(st->ep)) != 0)) {
		lost(st, "cannot create a connection", false);
		return;
	}
	st->call = mtd_gcli_call_start(st->conn, PATH, NULL, &call_cbs, st);
	if (st->call == NULL) {
		lost(st, "cannot start the stream (out of memory)", false);
		return;
	}
	mtd_gcli_call_limit(st->call, MTD_LB_ORCA_MAX_REPORT);
	Google__Protobuf__Duration every = GOOGLE__PROTOBUF__DURATION__INIT;
	Xds__Service__Orca__V3__OrcaLoadReportRequest req = XDS__SERVICE__ORCA__V3__ORCA_LOAD_REPORT_REQUEST__INIT;
	every.seconds = st->cfg.oob_period_ms / 1000;
	every.nanos = (int32_t)(st->cfg.oob_period_ms % 1000) * 1000000;
	req.report_interval = &every;
	if (mtd_gcli_call_send(st->call, &req.base, true) != 0)
		lost(st, "cannot send the request (out of memory)", false);
	else
		heard(st);
}

static void retry_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	connect_now(arg);
}

static void stream_free(struct oob *st, bool to_off)
{
	if (st == NULL)
		return;
	mtd_gcli_free(st->conn);
	if (st->retry)
		event_free(st->retry);
	if (st->silence)
		event_free(st->silence);
	if (to_off)
		set_state(st, MTD_LB_ORCA_OOB_OFF);
	if (st->ssl_ctx)
		mtd_tls_ctx_free(st->ssl_ctx);
	mtd_endpoint_unref(st->ep);
	free(st->server_name);
	free(st->svc);
	free(st);
}

static struct oob *stream_new(struct mtd_orca_oob *o, const struct mtd_rt_service *s, struct mtd_endpoint *ep,
                              const struct mtd_lb_orca_config *cfg)
{
	struct oob *st = calloc(1, sizeof(*st));

	if (st == NULL)
		return NULL;
	st->o = o;
	mtd_ref_get(&ep->ref);
	st->ep = ep;
	st->cfg = *cfg;
	st->tls_gen = s->tls_gen;
	st->svc = strdup(s->cfg->local->name);
	if (s->ssl_ctx)
		st->ssl_ctx = mtd_tls_ctx_ref(s->ssl_ctx);
	if (s->cfg->tls && s->cfg->tls->server_name)
		st->server_name = strdup(s->cfg->tls->server_name);
	st->retry = evtimer_new(o->ctl->base, retry_cb, st);
	st->silence = evtimer_new(o->ctl->base, silence_cb, st);
	if (st->svc == NULL || st->retry == NULL || st->silence == NULL ||
	    (s->cfg->tls && s->cfg->tls->server_name && !st->server_name)) {
		stream_free(st, false);
		return NULL;
	}
	if (mtd_lb_orca_oob_state(&ep->stats) != MTD_LB_ORCA_OOB_UNIMPLEMENTED)
		set_state(st, MTD_LB_ORCA_OOB_WAITING);
	connect_now(st);
	return st;
}

/* A certificate rotation (certwatch.c) gives the service a new context
 * under the same policy (same tls_gen): a stream that is up keeps its
 * connection, its next connection takes the new context, as the calls'
 * do. Kept, the old one would reconnect with an expired certificate or a
 * CA the backends no longer use, for as long as the process runs. */
static void take_ctx(struct oob *st, const struct mtd_rt_service *s)
{
	if (s->ssl_ctx == NULL || st->ssl_ctx == s->ssl_ctx)
		return;
	if (st->ssl_ctx)
		mtd_tls_ctx_free(st->ssl_ctx);
	st->ssl_ctx = mtd_tls_ctx_ref(s->ssl_ctx);
}

/* Follow the current runtime: keep the streams of endpoints that stay
 * with the same period and TLS policy (their next connection with the
 * service's current context), open new ones, close the others. */
static void resync(struct mtd_orca_oob *o)
{
	struct mtd_runtime *rt = o->ctl->rt;
	size_t want = 0, n = 0;

	for (size_t si = 0; si < rt->cfg->n_services; si++)
		if (wanted(rt->services[si]))
			want += rt->services[si]->n_eps;
	struct oob **next = calloc(want ? want : 1, sizeof(*next));
	if (next == NULL)
		return; /* out of memory: try again next second */
	for (size_t si = 0; si < rt->cfg->n_services; si++) {
		struct mtd_rt_service *s = rt->services[si];
		const struct mtd_lb_orca_config *cfg = wanted(s);

		if (cfg == NULL)
			continue;
		for (size_t e = 0; e < s->n_eps; e++) {
			struct oob *st = NULL;

			for (size_t k = 0; k < o->n && !st; k++)
				if (o->s[k] && o->s[k]->ep == s->eps[e]) {
					st = o->s[k];
					o->s[k] = NULL;
				}
			if (st && (st->cfg.oob_period_ms != cfg->oob_period_ms || st->tls_gen != s->tls_gen)) {
				stream_free(st, false); /* asked again, as the new settings say */
				st = NULL;
			}
			if (st) {
				st->cfg = *cfg; /* the weighing options may have changed */
				take_ctx(st, s);
			} else {
				st = stream_new(o, s, s->eps[e], cfg);
			}
			if (st)
				next[n++] = st;
		}
	}
	for (size_t k = 0; k < o->n; k++)
		stream_free(o->s[k], true);
	free(o->s);
	o->s = next;
	o->n = n;
	o->gen = rt->gen;
}

static void sync_cb(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_orca_oob *o = arg;

	(void)fd;
	(void)what;
	if (o->ctl->rt && o->ctl->rt->gen != o->gen)
		resync(o);
}

struct mtd_orca_oob *mtd_orca_oob_start(struct mtd_control *ctl)
{
	struct mtd_orca_oob *o = calloc(1, sizeof(*o));
	struct timeval one_second = {1, 0};

	if (o == NULL)
		goto nomem;
	o->ctl = ctl;
	o->sync = event_new(ctl->base, -1, EV_PERSIST, sync_cb, o);
	if (o->sync == NULL || event_add(o->sync, &one_second) != 0)
		goto nomem;
	if (ctl->rt)
		resync(o);
	return o;
nomem:
	MTD_ERROR("ORCA out-of-band reports: out of memory; trailers' reports only");
	mtd_orca_oob_free(o);
	return NULL;
}

void mtd_orca_oob_free(struct mtd_orca_oob *o)
{
	if (o == NULL)
		return;
	if (o->sync)
		event_free(o->sync);
	for (size_t k = 0; k < o->n; k++)
		stream_free(o->s[k], true);
	free(o->s);
	free(o);
}
