/* Active health checks: the state machine is drawn in health.h. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "core/log.h"
#include "grpc/health/v1/health.pb-c.h"
#include "sidecar/gclient.h"
#include "sidecar/health.h"
#include "sidecar/metrics.h"
#include "sidecar/sidecar.h"

struct target {
	struct mtd_health *h;
	size_t si;               /* service index in the current runtime */
	struct mtd_endpoint *ep; /* reference held */
	struct mtd_gcli *conn;
	struct mtd_gcli_call *call;
	struct event *next;    /* the next check */
	struct event *timeout; /* the check in flight must answer by then */
	bool serving;          /* the check in flight answered SERVING */
	uint32_t fails, oks;   /* results in a row */
};

struct mtd_health {
	struct mtd_control *ctl;
	uint64_t gen; /* runtime generation the targets follow */
	struct event *sync;
	struct target **t;
	size_t n;
};

static struct timeval tv_ms(int64_t ms)
{
	return (struct timeval){(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
}

static struct mtd_rt_service *current(const struct target *t)
{
	struct mtd_runtime *rt = t->h->ctl->rt;
	return t->si < rt->cfg->n_services ? rt->services[t->si] : NULL;
}

/* Mirror ep's state into the current snapshot's bitmap. */
static void mirror(struct mtd_rt_service *s, const struct mtd_endpoint *ep)
{
	if (!s || !s->hc)
		return;
	for (size_t i = 0; i < s->n_eps; i++) {
		if (s->eps[i] != ep)
			continue;
		uint64_t bit = 1ull << (i % 64);
		uint64_t was = ep->hc_down ? atomic_fetch_or(&s->hc->down_bits[i / 64], bit)
		                           : atomic_fetch_and(&s->hc->down_bits[i / 64], ~bit);
		if (ep->hc_down && !(was & bit))
			atomic_fetch_add(&s->hc->n_down, 1);
		else if (!ep->hc_down && (was & bit))
			atomic_fetch_sub(&s->hc->n_down, 1);
		return;
	}
}

static void result(struct target *t, bool ok, const char *why)
{
	struct mtd_rt_service *s = current(t);
	if (!s)
		return;
	const struct mtd_hc_config *c = &s->cfg->health_check;
	evtimer_del(t->timeout);
	/* For the admin (metrics.h: the control thread is the one writer). */
	mtd_mx_add(&t->ep->mx.hc_checks, 1);
	if (!ok)
		mtd_mx_add(&t->ep->mx.hc_failures, 1);
	if (ok) {
		t->fails = 0;
		t->oks++;
		if (t->ep->hc_down && t->oks >= c->healthy_threshold) {
			t->ep->hc_down = false;
			mirror(s, t->ep);
			MTD_INFO("service %s: endpoint %s is healthy again (%u health checks SERVING)", s->cfg->name,
			         t->ep->addr.text, t->oks);
			/* issue 8 §3: SERVING brings it back through warmup. */
			mtd_runtime_rewarm(t->h->ctl, t->si, &t->ep, 1);
		}
	} else {
		t->oks = 0;
		t->fails++;
		if (!t->ep->hc_down && t->fails >= c->unhealthy_threshold) {
			t->ep->hc_down = true;
			mirror(s, t->ep);
			MTD_WARN("service %s: endpoint %s is unhealthy (%u health checks failed in a row, last: %s)",
			         s->cfg->name, t->ep->addr.text, t->fails, why);
		}
	}
}

static void on_msg(struct mtd_gcli_call *call, const uint8_t *msg, size_t len, void *arg)
{
	struct target *t = arg;
	Grpc__Health__V1__HealthCheckResponse *r = grpc__health__v1__health_check_response__unpack(NULL, len, msg);
	if (r) {
		t->serving = r->status == GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
		grpc__health__v1__health_check_response__free_unpacked(r, NULL);
	}
}

static void on_close(struct mtd_gcli_call *call, int status, const char *message, void *arg)
{
	struct target *t = arg;
	char why[160];
	t->call = NULL;
	if (status != 0)
		snprintf(why, sizeof(why), "%s %s", mtd_grpc_status_name(status), message);
	else
		snprintf(why, sizeof(why), "%s", t->serving ? "SERVING" : "not SERVING");
	result(t, status == 0 && t->serving, why);
}

static const struct mtd_gcli_call_cbs call_cbs = {on_msg, on_close};

static void on_down(struct mtd_gcli *c, const char *reason, void *arg)
{
	struct target *t = arg;
	/* A call on it already ended (on_close); connect again next time. */
	mtd_gcli_free(t->conn);
	t->conn = NULL;
}

static const struct mtd_gcli_cbs conn_cbs = {NULL, on_down};

static void timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct target *t = arg;
	if (!t->call)
		return;
	mtd_gcli_call_cancel(t->call); /* no callback of it runs again */
	t->call = NULL;
	result(t, false, "no answer within health_check.timeout");
}

static void check_cb(evutil_socket_t fd, short what, void *arg)
{
	struct target *t = arg;
	struct mtd_rt_service *s = current(t);
	if (!s || !s->cfg->health_check.enabled)
		return; /* the next sync drops this target */
	const struct mtd_hc_config *c = &s->cfg->health_check;
	const struct mtd_cfg_addr *a = &t->ep->addr;
	struct timeval tv = tv_ms(c->interval_ms);
	evtimer_add(t->next, &tv);
	if (t->call)
		return; /* the previous check is still within its timeout */
	if (!t->conn) {
		struct ssl_st *ssl = NULL;
		if (s->ssl_ctx) {
			const char *sni = s->cfg->tls && s->cfg->tls->server_name ? s->cfg->tls->server_name : a->host;
			ssl = mtd_tls_client_ssl_new(s->ssl_ctx, sni);
			if (!ssl) {
				result(t, false, "cannot set up TLS");
				return;
			}
		}
		t->conn = mtd_gcli_new(t->h->ctl->base, (const struct sockaddr *)&a->sa, a->salen, a->text, ssl,
		                       c->timeout_ms, 0, &conn_cbs, t);
		if (!t->conn) {
			result(t, false, "cannot open a connection");
			return;
		}
	}
	static char whole_server[] = "";
	Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
	req.service = c->service_name ? c->service_name : whole_server;
	t->serving = false;
	t->call = mtd_gcli_call_start(t->conn, "/grpc.health.v1.Health/Check", NULL, &call_cbs, t);
	if (!t->call) {
		result(t, false, "cannot start the check");
		return;
	}
	if (mtd_gcli_call_send(t->call, &req.base, true) != 0) {
		mtd_gcli_call_cancel(t->call);
		t->call = NULL;
		result(t, false, "cannot send the check");
		return;
	}
	tv = tv_ms(c->timeout_ms);
	evtimer_add(t->timeout, &tv);
}

static void target_free(struct target *t)
{
	if (!t)
		return;
	if (t->call)
		mtd_gcli_call_cancel(t->call);
	mtd_gcli_free(t->conn);
	if (t->next)
		event_free(t->next);
	if (t->timeout)
		event_free(t->timeout);
	mtd_endpoint_unref(t->ep);
	free(t);
}

static struct target *target_new(struct mtd_health *h, size_t si, struct mtd_endpoint *ep, int64_t first_ms)
{
	struct target *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	*t = (struct target){.h = h, .si = si, .ep = ep};
	mtd_disc_ref_get(&ep->ref);
	t->next = evtimer_new(h->ctl->base, check_cb, t);
	t->timeout = evtimer_new(h->ctl->base, timeout_cb, t);
	if (!t->next || !t->timeout) {
		target_free(t);
		return NULL;
	}
	struct timeval tv = tv_ms(first_ms);
	evtimer_add(t->next, &tv);
	return t;
}

/* Follow the current runtime: keep the targets of endpoints that stay
 * (their connection and counts), start new ones, stop the others. */
static void resync(struct mtd_health *h)
{
	struct mtd_runtime *rt = h->ctl->rt;
	size_t want = 0;
	for (size_t si = 0; si < rt->cfg->n_services; si++)
		if (rt->services[si]->cfg->health_check.enabled)
			want += rt->services[si]->n_eps;
	struct target **next = calloc(want ? want : 1, sizeof(*next));
	if (!next)
		return; /* out of memory: try again next second */
	size_t n = 0;
	for (size_t si = 0; si < rt->cfg->n_services; si++) {
		struct mtd_rt_service *s = rt->services[si];
		if (!s->cfg->health_check.enabled)
			continue;
		for (size_t e = 0; e < s->n_eps; e++) {
			struct target *t = NULL;
			for (size_t k = 0; k < h->n && !t; k++)
				if (h->t[k] && h->t[k]->ep == s->eps[e] && h->t[k]->si == si) {
					t = h->t[k];
					h->t[k] = NULL;
				}
			/* New ones are spread over the first tenth of an interval. */
			if (!t)
				t = target_new(
				        h, si, s->eps[e],
				        (int64_t)(e * (uint64_t)s->cfg->health_check.interval_ms / 10 / s->n_eps));
			if (t)
				next[n++] = t;
			mirror(s, s->eps[e]);
		}
	}
	for (size_t k = 0; k < h->n; k++)
		target_free(h->t[k]);
	free(h->t);
	h->t = next;
	h->n = n;
	h->gen = rt->gen;
}

static void sync_cb(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_health *h = arg;
	if (h->ctl->rt && h->ctl->rt->gen != h->gen)
		resync(h);
}

struct mtd_health *mtd_health_start(struct mtd_control *ctl)
{
	struct mtd_health *h = calloc(1, sizeof(*h));
	if (!h)
		goto nomem;
	h->ctl = ctl;
	h->sync = event_new(ctl->base, -1, EV_PERSIST, sync_cb, h);
	if (!h->sync)
		goto nomem;
	struct timeval one_second = {1, 0};
	event_add(h->sync, &one_second);
	resync(h);
	return h;
nomem:
	MTD_ERROR("health checks: out of memory; running without them");
	mtd_health_free(h);
	return NULL;
}

void mtd_health_free(struct mtd_health *h)
{
	if (!h)
		return;
	for (size_t i = 0; i < h->n; i++)
		target_free(h->t[i]);
	free(h->t);
	if (h->sync)
		event_free(h->sync);
	free(h);
}
