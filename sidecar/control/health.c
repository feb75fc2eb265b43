/* Active health checks: the state machine and the threads are drawn in
 * health.h. The control thread half (targets, timers, the state) comes
 * first, then the worker half (a check as a stream of the worker's pool). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "core/lazy.h"
#include "core/log.h"
#include "grpc/health/v1/health.pb-c.h"
#include "sidecar/control/health.h"
#include "sidecar/ops/metrics.h"
#include "core/clock.h"
#include "discovery/discovery.h"
#include "grpc/grpc.h"
#include "sidecar/control/control-t.h"
#include "sidecar/control/control.h"
#include "sidecar/control/runtime.h"
#include "sidecar/io/conn.h"
#include "sidecar/io/pool.h"
#include "sidecar/io/stream-t.h"
#include "sidecar/io/upstream.h"
#include "sidecar/turn.h"

/* One check's answer: allocated by the control thread with the check,
 * filled by the worker, handed back (mtd_health.done) and freed by the
 * control thread. Every check sends exactly one back, even when it is
 * dropped (skip), so none is lost or leaked. */
struct hc_result {
	struct target *t; /* control thread only: NULL once the target went */
	bool ok;
	bool skip; /* not a verdict on the endpoint (it left, shutdown) */
	char why[192];
	struct mtd_mbox_link link; /* in mtd_health.done */
};

struct target {
	struct mtd_health *h;
	size_t si;               /* service index in the current runtime */
	struct mtd_endpoint *ep; /* reference held */
	unsigned worker;         /* whose pool ran the last check */
	struct hc_result *res;   /* the check in flight, or NULL */
	struct event *next;      /* the next check */
	uint32_t fails, oks;     /* results in a row */
};

struct mtd_health {
	struct mtd_control *ctl;
	uint64_t gen; /* runtime generation the targets follow */
	struct event *sync;
	struct target **t;
	size_t n;
	/* Answers from the workers (mailbox.h: any worker posts, done_cb on
	 * the control thread takes them). */
	struct mtd_mbox done;
	bool done_ready; /* done was set up */
};

/* One check, on a worker from the moment it is posted: waiting in the pool
 * of its endpoint, then a stream on one of its connections, as the owner
 * of s (io/stream-t.h: a check, s.check); freed when neither holds it. */
struct mtd_hc_probe {
	struct mtd_up_stream s; /* s.pool while waiting, s.conn while its stream is open */
	struct mtd_health *h;
	struct mtd_rt_service *svc; /* reference: the pool's settings if it makes one */
	struct mtd_endpoint *ep;    /* reference */
	struct hc_result *res;      /* until reported */
	int64_t timeout_ms;
	struct event timer;
	bool timer_set;
	int http_status;
	int grpc_status; /* -1 = none seen */
	char grpc_message[96];
	uint8_t resp[16]; /* the response message, framed (it is 2 bytes) */
	size_t resp_len;
	bool resp_over;            /* more than resp holds */
	struct mtd_mbox_link link; /* in a worker's hc_inbox */
	size_t body_off, body_len;
	uint8_t body[]; /* the framed HealthCheckRequest */
};

static const struct mtd_up_stream_ops probe_ops;

static struct timeval tv_ms(int64_t ms)
{
	return (struct timeval){(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
}

/* t's service in the current runtime, or NULL. A target follows the
 * runtime at the next sync (each second): a reload that moved the
 * services in the list puts another service at t->si meanwhile, whose
 * health_check (thresholds, service_name, timeout) and name are not t's.
 * Identities are a service's own, so the service at t->si is t's only
 * while it holds t->ep; else NULL, and the next sync makes the target
 * again at its service's new place. */
static struct mtd_rt_service *current(const struct target *t)
{
	struct mtd_runtime *rt = t->h->ctl->rt;
	struct mtd_rt_service *s = t->si < rt->cfg->n_services ? rt->services[t->si] : NULL;
	for (size_t i = 0; s && i < s->n_eps; i++)
		if (s->eps[i] == t->ep)
			return s;
	return NULL;
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
	const struct mtd_hc_config *c = &s->cfg->local->health_check;
	/* For the admin (metrics.h: the control thread is the one writer). */
	mtd_mx_ep_add(t->ep, hc_checks, 1);
	if (!ok)
		mtd_mx_ep_add(t->ep, hc_failures, 1);
	if (ok) {
		t->fails = 0;
		t->oks++;
		if (t->ep->hc_down && t->oks >= c->healthy_threshold) {
			t->ep->hc_down = false;
			mirror(s, t->ep);
			MTD_INFO("service %s: endpoint %s is healthy again (%u health checks SERVING)",
			         s->cfg->local->name, mtd_endpoint_text(t->ep), t->oks);
			/* SERVING brings it back through warmup, not at full
			 * share at once. */
			mtd_control_rewarm(t->h->ctl, t->si, &t->ep, 1);
		}
	} else {
		t->oks = 0;
		t->fails++;
		if (!t->ep->hc_down && t->fails >= c->unhealthy_threshold) {
			t->ep->hc_down = true;
			mirror(s, t->ep);
			MTD_WARN("service %s: endpoint %s is unhealthy (%u health checks failed in a row, last: %s)",
			         s->cfg->local->name, mtd_endpoint_text(t->ep), t->fails, why);
		}
	}
}

/* ---- control thread: asking a worker, taking its answer ---------------- */

/* The worker whose pool runs t's next check: one that has a usable
 * connection to the endpoint already (the check then costs no connection
 * and goes the way calls go), the one of the last check while it still
 * has, else t's own default worker (whose pool opens a connection). */
static unsigned pick_worker(struct target *t)
{
	unsigned n = t->h->ctl->n_workers;
	const struct mtd_ep_pools *ps = mtd_lazy_peek(&t->ep->pools);
	uint64_t m = ps ? atomic_load_explicit(&ps->pooled, memory_order_relaxed) : 0;
	if (t->worker < 64 && (m >> t->worker) & 1)
		return t->worker;
	if (m && (unsigned)__builtin_ctzll(m) < n)
		return t->worker = (unsigned)__builtin_ctzll(m);
	return t->worker;
}

static void post(struct mtd_worker *w, struct mtd_hc_probe *pr)
{
	mtd_mbox_post(&w->hc_inbox, &pr->link);
}

/* Workers' answers (h->done): each one's target, if it is still there. */
static void done_cb(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_health *h = arg;
	struct mtd_mbox_link *l = mtd_mbox_take(&h->done);
	while (l) {
		struct hc_result *r = MTD_MBOX_ITEM(l, struct hc_result, link);
		struct target *t = r->t;
		l = l->next;
		if (t) {
			t->res = NULL;
			if (!r->skip)
				result(t, r->ok, r->why);
		}
		free(r);
	}
}

static void check_cb(evutil_socket_t fd, short what, void *arg)
{
	struct target *t = arg;
	struct mtd_rt_service *s = current(t);
	if (!s || !s->cfg->local->health_check.enabled) {
		/* The next sync drops this target, or keeps it (its service
		 * back at its place, its checks on again, within the second):
		 * then it must still be armed. */
		struct timeval again = tv_ms(1000);
		evtimer_add(t->next, &again);
		return;
	}
	const struct mtd_hc_config *c = &s->cfg->local->health_check;
	struct timeval tv = tv_ms(c->interval_ms);
	evtimer_add(t->next, &tv);
	if (t->res || t->h->ctl->n_workers == 0)
		return; /* the previous check is still within its timeout */
	static char whole_server[] = "";
	Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
	req.service = c->service_name ? c->service_name : whole_server;
	size_t len = grpc__health__v1__health_check_request__get_packed_size(&req);
	struct mtd_hc_probe *pr = calloc(1, sizeof(*pr) + 5 + len);
	struct hc_result *r = calloc(1, sizeof(*r));
	if (!pr || !r) {
		free(pr);
		free(r);
		result(t, false, "out of memory");
		return;
	}
	/* gRPC framing: uncompressed, 4-byte big-endian length, the message. */
	pr->body[0] = 0;
	pr->body[1] = (uint8_t)(len >> 24);
	pr->body[2] = (uint8_t)(len >> 16);
	pr->body[3] = (uint8_t)(len >> 8);
	pr->body[4] = (uint8_t)len;
	grpc__health__v1__health_check_request__pack(&req, pr->body + 5);
	pr->body_len = 5 + len;
	pr->h = t->h;
	mtd_ref_get(&s->ref);
	pr->svc = s;
	mtd_ref_get(&t->ep->ref);
	pr->ep = t->ep;
	pr->timeout_ms = c->timeout_ms;
	pr->grpc_status = -1;
	pr->s.ops = &probe_ops;
	pr->s.check = true;
	r->t = t;
	pr->res = r;
	t->res = r;
	post(t->h->ctl->workers[pick_worker(t)], pr);
}

static void target_free(struct target *t)
{
	if (!t)
		return;
	if (t->res)
		t->res->t = NULL; /* its answer is freed when it comes back */
	if (t->next)
		event_free(t->next);
	mtd_endpoint_unref(t->ep);
	free(t);
}

static struct target *target_new(struct mtd_health *h, size_t si, struct mtd_endpoint *ep, int64_t first_ms,
                                 unsigned worker)
{
	struct target *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	*t = (struct target){.h = h, .si = si, .ep = ep, .worker = worker};
	mtd_ref_get(&ep->ref);
	t->next = evtimer_new(h->ctl->base, check_cb, t);
	if (!t->next) {
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
		if (rt->services[si]->cfg->local->health_check.enabled)
			want += rt->services[si]->n_eps;
	struct target **next = calloc(want ? want : 1, sizeof(*next));
	if (!next)
		return; /* out of memory: try again next second */
	size_t n = 0;
	for (size_t si = 0; si < rt->cfg->n_services; si++) {
		struct mtd_rt_service *s = rt->services[si];
		if (!s->cfg->local->health_check.enabled)
			continue;
		for (size_t e = 0; e < s->n_eps; e++) {
			struct target *t = NULL;
			for (size_t k = 0; k < h->n && !t; k++)
				if (h->t[k] && h->t[k]->ep == s->eps[e] && h->t[k]->si == si) {
					t = h->t[k];
					h->t[k] = NULL;
				}
			/* New ones are spread over the first tenth of an interval,
			 * and over the workers until a connection says where. */
			if (!t)
				t = target_new(
				        h, si, s->eps[e],
				        (int64_t)(e * (uint64_t)s->cfg->local->health_check.interval_ms / 10 / s->n_eps),
				        h->ctl->n_workers ? (unsigned)(n % h->ctl->n_workers) : 0);
			if (t)
				next[n++] = t;
			mirror(s, s->eps[e]);
		}
	}
	for (size_t k = 0; k < h->n; k++) {
		struct target *t = h->t[k];
		if (t && t->ep->hc_down) {
			/* Its checks stopped (turned off, or the endpoint left): their
			 * verdict goes with them. Checks turned on again later start
			 * from no verdict, as a fresh maitred's do, not from what
			 * checks said before a pause in which the endpoint may have
			 * recovered. An endpoint a new target checks (its service
			 * moved in the list) keeps it. */
			bool checked = false;
			for (size_t j = 0; j < n && !checked; j++)
				checked = next[j]->ep == t->ep;
			if (!checked)
				t->ep->hc_down = false;
		}
		target_free(t);
	}
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
	if (!h->sync || mtd_mbox_init(&h->done, ctl->base, done_cb, h) < 0)
		goto nomem;
	h->done_ready = true;
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
	/* The workers are gone: every answer is here. */
	for (struct mtd_mbox_link *l = h->done_ready ? mtd_mbox_fini(&h->done) : NULL, *next; l; l = next) {
		next = l->next;
		free(MTD_MBOX_ITEM(l, struct hc_result, link));
	}
	free(h);
}

/* ---- worker thread: a check is a stream of the endpoint's pool ------- */

/* Send pr's answer to the control thread (once). */
static void report(struct mtd_hc_probe *pr, bool ok, bool skip, const char *why)
{
	struct hc_result *r = pr->res;
	if (!r)
		return;
	pr->res = NULL;
	r->ok = ok;
	r->skip = skip;
	snprintf(r->why, sizeof(r->why), "%s", why);
	mtd_mbox_post(&pr->h->done, &r->link);
}

static void probe_free(struct mtd_hc_probe *pr)
{
	if (pr->timer_set)
		event_del(&pr->timer);
	mtd_rt_service_unref(pr->svc);
	mtd_endpoint_unref(pr->ep);
	free(pr);
}

/* pr is in no pool and on no stream: answer and free it. */
static void finish(struct mtd_hc_probe *pr, bool ok, bool skip, const char *why)
{
	report(pr, ok, skip, why);
	probe_free(pr);
}

static void probe_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_hc_probe *pr = arg;
	pr->timer_set = false;
	if (pr->s.pool) {
		mtd_pool_dequeue(&pr->s);
		finish(pr, false, false, "no answer within health_check.timeout (no stream slot)");
		return;
	}
	struct mtd_conn *c = pr->s.conn;
	if (!c)
		return;
	/* Answer now; the stream goes when the RST_STREAM went out (its close
	 * frees pr). */
	report(pr, false, false, "no answer within health_check.timeout");
	nghttp2_submit_rst_stream(c->ng, NGHTTP2_FLAG_NONE, pr->s.sid, NGHTTP2_CANCEL);
	mtd_conn_want_flush(c);
}

/* A check handed over by the control thread: into its endpoint's pool. */
static void probe_begin(struct mtd_worker *w, struct mtd_hc_probe *pr)
{
	char why[160];
	struct timeval tv = tv_ms(pr->timeout_ms);
	evtimer_assign(&pr->timer, w->base, probe_timeout_cb, pr);
	if (evtimer_add(&pr->timer, &tv) == 0)
		pr->timer_set = true;
	struct mtd_pool *p = mtd_pool_get(w, pr->svc, pr->ep);
	if (!p) {
		finish(pr, false, false, "out of memory for a pool");
		return;
	}
	if (p->retired) {
		finish(pr, false, true, "the endpoint left the service");
		return;
	}
	if (p->n_checks) {
		finish(pr, false, true, "the previous check still waits");
		return;
	}
	if (mtd_pool_backing_off(p, mtd_now_ns())) {
		/* Its connects fail: the check fails the same way, without one
		 * more attempt inside the pool's backoff. */
		snprintf(why, sizeof(why), "upstream %s: connecting fails (%u in a row)", mtd_endpoint_text(pr->ep),
		         p->connect_failures);
		finish(pr, false, false, why);
		return;
	}
	mtd_pool_enqueue(p, &pr->s); /* may start it, or fail it at once; a check is always queued */
}

static void inbox_cb(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_worker *w = arg;
	struct mtd_mbox_link *l = mtd_mbox_take(&w->hc_inbox);
	while (l) {
		struct mtd_hc_probe *pr = MTD_MBOX_ITEM(l, struct mtd_hc_probe, link);
		l = l->next;
		probe_begin(w, pr);
	}
}

int mtd_hc_worker_init(struct mtd_worker *w)
{
	return mtd_mbox_init_bell(&w->hc_inbox, &w->bell, MTD_WORKER_BELL_HC, inbox_cb, w);
}

void mtd_hc_worker_fini(struct mtd_worker *w)
{
	struct mtd_mbox_link *l = mtd_mbox_fini(&w->hc_inbox);
	while (l) {
		struct mtd_hc_probe *pr = MTD_MBOX_ITEM(l, struct mtd_hc_probe, link);
		l = l->next;
		finish(pr, false, true, "maitred is stopping");
	}
}

static ssize_t probe_read(nghttp2_session *s, int32_t sid, uint8_t *buf, size_t len, uint32_t *flags,
                          nghttp2_data_source *src, void *ud)
{
	struct mtd_hc_probe *pr = src->ptr;
	size_t n = pr->body_len - pr->body_off;
	if (n > len)
		n = len;
	memcpy(buf, pr->body + pr->body_off, n);
	pr->body_off += n;
	if (pr->body_off == pr->body_len)
		*flags |= NGHTTP2_DATA_FLAG_EOF;
	return (ssize_t)n;
}

#define NV(n, v, vlen, fl)                                                                                 \
	{                                                                                                  \
		(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, (vlen), NGHTTP2_NV_FLAG_NO_COPY_NAME | (fl) \
	}
#define NV_LIT(n, v) NV(n, v, sizeof(v) - 1, NGHTTP2_NV_FLAG_NO_COPY_VALUE)

/* ---- the check as an upstream stream's owner (io/stream-t.h) ----------- */

static struct mtd_hc_probe *probe_of(struct mtd_up_stream *s)
{
	return MTD_CONTAINER_OF(s, struct mtd_hc_probe, s);
}

static int probe_submit(struct mtd_up_stream *s, struct mtd_conn *c)
{
	struct mtd_hc_probe *pr = probe_of(s);
	/* :authority as calls to this endpoint get it when the service
	 * overrides it, else the endpoint's name (gRPC's target). */
	const char *auth = mtd_pool_authority(c->pool, false);
	char tbuf[MTD_GRPC_TIMEOUT_BUFLEN];
	size_t tl = mtd_grpc_timeout_format(pr->timeout_ms * 1000000, tbuf);
	nghttp2_nv nva[] = {
	        NV_LIT(":method", "POST"),
	        c->ssl ? (nghttp2_nv)NV_LIT(":scheme", "https") : (nghttp2_nv)NV_LIT(":scheme", "http"),
	        NV_LIT(":path", "/grpc.health.v1.Health/Check"),
	        NV(":authority", auth, strlen(auth), 0),
	        NV_LIT("content-type", "application/grpc"),
	        NV_LIT("te", "trailers"),
	        NV("grpc-timeout", tbuf, tl, 0),
	};
	nghttp2_data_provider prd = {.source.ptr = pr, .read_callback = probe_read};
	return mtd_up_open_stream(c, s, nva, sizeof(nva) / sizeof(nva[0]), &prd);
}

static void probe_on_stream(struct mtd_up_stream *s)
{
}

static void probe_on_wait_end(struct mtd_up_stream *s, enum mtd_up_wait_end why, const char *reason)
{
	struct mtd_hc_probe *pr = probe_of(s);
	switch (why) {
	case MTD_UP_CONNECT_FAILED:
		finish(pr, false, false, reason); /* a failed check */
		break;
	case MTD_UP_RETIRED:
		finish(pr, false, true, "the endpoint left the service"); /* no verdict */
		break;
	case MTD_UP_STOPPING:
		finish(pr, false, true, "maitred is stopping");
		break;
	case MTD_UP_NO_STREAM:
		finish(pr, false, false, "cannot open a stream for the check");
		break;
	}
}

static int probe_on_field(struct mtd_up_stream *s, const uint8_t *name, size_t nlen, const uint8_t *value,
                          size_t vlen, uint8_t flags)
{
	struct mtd_hc_probe *pr = probe_of(s);
	if (nlen == 7 && memcmp(name, ":status", 7) == 0) {
		pr->http_status = mtd_http_status_parse(value, vlen);
	} else if (nlen == 11 && memcmp(name, "grpc-status", 11) == 0) {
		int st = mtd_grpc_status_parse(value, vlen);
		pr->grpc_status = st >= 0 ? st : MTD_GRPC_UNKNOWN;
	} else if (nlen == 12 && memcmp(name, "grpc-message", 12) == 0) {
		size_t n = vlen < sizeof(pr->grpc_message) - 1 ? vlen : sizeof(pr->grpc_message) - 1;
		memcpy(pr->grpc_message, value, n);
		pr->grpc_message[n] = '\0';
	}
	return 0;
}

static void probe_on_headers(struct mtd_up_stream *s, bool end_stream)
{
}

static void probe_on_trailers(struct mtd_up_stream *s)
{
}

static void probe_on_data(struct mtd_up_stream *s, const uint8_t *p, size_t n)
{
	struct mtd_hc_probe *pr = probe_of(s);
	nghttp2_session_consume(s->conn->ng, s->sid, n); /* read here, whole */
	size_t room = sizeof(pr->resp) - pr->resp_len;
	if (n > room) {
		pr->resp_over = true;
		n = room;
	}
	memcpy(pr->resp + pr->resp_len, p, n);
	pr->resp_len += n;
}

/* What the ended stream said: true for SERVING; else why not in why. */
static bool verdict(const struct mtd_hc_probe *pr, uint32_t error_code, char *why, size_t size)
{
	if (pr->grpc_status < 0) {
		if (error_code != NGHTTP2_NO_ERROR)
			snprintf(why, size, "stream reset (%s)", nghttp2_http2_strerror(error_code));
		else if (pr->http_status != 200)
			snprintf(why, size, "HTTP status %d", pr->http_status);
		else
			snprintf(why, size, "no grpc-status");
		return false;
	}
	if (pr->grpc_status != 0) {
		snprintf(why, size, "%s %s", mtd_grpc_status_name(pr->grpc_status), pr->grpc_message);
		return false;
	}
	/* One gRPC message: flag 0, its length, HealthCheckResponse. */
	uint32_t len = pr->resp_len >= 5 ? (uint32_t)pr->resp[1] << 24 | (uint32_t)pr->resp[2] << 16 |
	                                           (uint32_t)pr->resp[3] << 8 | pr->resp[4]
	                                 : 0;
	if (pr->resp_over || pr->resp_len < 5 || pr->resp[0] != 0 || len != pr->resp_len - 5) {
		snprintf(why, size, "no readable HealthCheckResponse");
		return false;
	}
	Grpc__Health__V1__HealthCheckResponse *r =
	        grpc__health__v1__health_check_response__unpack(NULL, len, pr->resp + 5);
	if (!r) {
		snprintf(why, size, "no readable HealthCheckResponse");
		return false;
	}
	bool serving = r->status == GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
	snprintf(why, size, "%s", serving ? "SERVING" : "not SERVING");
	grpc__health__v1__health_check_response__free_unpacked(r, NULL);
	return serving;
}

static void probe_on_close(struct mtd_up_stream *s, uint32_t error_code, const char *lost)
{
	struct mtd_hc_probe *pr = probe_of(s);
	char why[192];
	bool ok = false;
	if (lost)
		snprintf(why, sizeof(why), "%s", lost);
	else
		ok = verdict(pr, error_code, why, sizeof(why));
	finish(pr, ok, false, why);
}

static const struct mtd_up_stream_ops probe_ops = {
        .submit = probe_submit,
        .on_stream = probe_on_stream,
        .on_wait_end = probe_on_wait_end,
        .on_field = probe_on_field,
        .on_headers = probe_on_headers,
        .on_data = probe_on_data,
        .on_trailers = probe_on_trailers,
        .on_close = probe_on_close,
};
