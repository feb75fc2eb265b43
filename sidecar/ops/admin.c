/* The admin endpoint (admin.h): evhttp on the control thread. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>

#include "admin/admin.h"
#include "core/log.h"
#include "maitred/config/v1/config.pb-c.h"
#include "sidecar/ops/admin.h"
#include "sidecar/ops/history.h"
#include "sidecar/ops/metrics.h"
#include "sidecar/ops/prometheus.h"
#include "core/clock.h"
#include "discovery/discovery.h"
#include "health/outlier.h"
#include "lb/lb.h"
#include "sidecar/control/runtime.h"
#include "sidecar/control/xds.h"

struct mtd_admin {
	struct evhttp *http;
	struct mtd_admin_view view;
};

/* The live page, embedded at build time (admin_page.c, generated). */
extern const char mtd_admin_page[];
extern const size_t mtd_admin_page_len;

static void reply(struct evhttp_request *req, int code, const char *reason, const char *type, const char *body,
                  size_t len)
{
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);
	evhttp_add_header(h, "Content-Type", type);
	evhttp_add_header(h, "Cache-Control", "no-store");
	struct evbuffer *out = evbuffer_new();
	if (!out) {
		evhttp_send_error(req, 500, "out of memory");
		return;
	}
	if (evhttp_request_get_command(req) != EVHTTP_REQ_HEAD)
		evbuffer_add(out, body, len);
	evhttp_send_reply(req, code, reason, out);
	evbuffer_free(out);
}

static void reply_text(struct evhttp_request *req, int code, const char *reason, const char *text)
{
	reply(req, code, reason, "text/plain; charset=utf-8", text, strlen(text));
}

static void reply_buf(struct evhttp_request *req, const char *type, struct mtd_abuf *b)
{
	if (b->oom)
		reply_text(req, 500, "Internal Server Error", "out of memory\n");
	else
		reply(req, 200, "OK", type, b->p ? b->p : "", b->len);
	mtd_abuf_clear(b);
}

/* ---- handlers ----------------------------------------------------------- */

static void h_metrics(struct mtd_admin *a, struct evhttp_request *req)
{
	struct mtd_abuf b = {0};
	struct mtd_mx_process proc = {
	        .n_workers = a->view.n_workers,
	        .start_wall_ms = a->view.start_wall_ms,
	        .config_generation = (*a->view.rt)->gen,
	        .draining = *a->view.draining,
	};
	mtd_metrics_render(&b, *a->view.rt, &proc);
	/* Prometheus text exposition format, version 0.0.4. */
	reply_buf(req, "text/plain; version=0.0.4; charset=utf-8", &b);
}

static void h_healthz(struct mtd_admin *a, struct evhttp_request *req)
{
	reply_text(req, 200, "OK", "ok\n");
}

static void h_ready(struct mtd_admin *a, struct evhttp_request *req)
{
	const struct mtd_runtime *rt = *a->view.rt;
	struct mtd_abuf b = {0};
	if (*a->view.draining)
		mtd_abuf_puts(&b, "not ready: draining\n");
	if (!*a->view.listening)
		mtd_abuf_puts(&b, "not ready: listeners are not up yet\n");
	if (!rt)
		mtd_abuf_puts(&b, "not ready: no config loaded\n");
	for (size_t i = 0; rt && i < rt->cfg->n_services; i++)
		if (rt->services[i]->n_eps == 0)
			mtd_abuf_printf(&b, "not ready: service %s has no endpoint\n",
			                rt->services[i]->cfg->local->name);
	if (b.len == 0 && !b.oom) {
		reply_text(req, 200, "OK", "ready\n");
	} else if (b.oom) {
		reply_text(req, 503, "Service Unavailable", "not ready\n");
	} else {
		reply(req, 503, "Service Unavailable", "text/plain; charset=utf-8", b.p, b.len);
	}
	mtd_abuf_clear(&b);
}

static void h_drain(struct mtd_admin *a, struct evhttp_request *req)
{
	if (*a->view.draining) {
		reply_text(req, 200, "OK", "already draining\n");
		return;
	}
	/* Answer first: the drain may end the loop before a later write. */
	reply_text(req, 202, "Accepted", "draining\n");
	a->view.drain(a->view.arg, "POST /drain");
}

/* Wall time ms as an RFC 3339 UTC string with milliseconds (a double of
 * Unix seconds would lose them in the JSON writer's 9 digits); null for
 * 0 or 1 (not ejected, or an ejection being written). */
static void json_time_or_null(struct mtd_json *j, int64_t ms)
{
	struct tm tm;
	time_t t = (time_t)(ms / 1000);
	char out[40];
	if (ms <= 1 || !gmtime_r(&t, &tm) || !strftime(out, sizeof(out), "%Y-%m-%dT%H:%M:%S", &tm)) {
		mtd_json_null(j);
		return;
	}
	size_t n = strlen(out);
	snprintf(out + n, sizeof(out) - n, ".%03dZ", (int)(ms % 1000));
	mtd_json_str(j, out);
}

/* A routing layer's split in /clusters: each group's weight
 * configured and now, the calls it took, the guard's cut and its window
 * figures. Nothing without a split. */
static void clusters_split(struct mtd_json *j, const struct mtd_lb_layer *l, const struct mtd_cfg_split *sp)
{
	struct mtd_lb_split_group g;
	if (!l || !sp || mtd_lb_layer_split_groups(l) == 0)
		return;
	mtd_json_key(j, "split");
	mtd_json_obj_begin(j);
	mtd_json_key(j, "metadata_key");
	mtd_json_str(j, sp->metadata_key);
	mtd_json_key(j, "guard");
	if (sp->lb.guard.on) {
		mtd_json_obj_begin(j);
		mtd_json_key(j, "max_error_ratio");
		mtd_json_dbl(j, sp->lb.guard.max_error_ratio);
		mtd_json_key(j, "max_p99_ratio");
		mtd_json_dbl(j, sp->lb.guard.max_p99_ratio);
		mtd_json_key(j, "min_calls");
		mtd_json_u64(j, sp->lb.guard.min_calls);
		mtd_json_key(j, "window_s");
		mtd_json_dbl(j, (double)sp->lb.guard.window_ms / 1e3);
		mtd_json_obj_end(j);
	} else {
		mtd_json_null(j);
	}
	mtd_json_key(j, "groups");
	mtd_json_arr_begin(j);
	for (size_t k = 0; mtd_lb_layer_split_group(l, k, &g); k++) {
		mtd_json_obj_begin(j);
		mtd_json_key(j, "group");
		mtd_json_str(j, g.value);
		mtd_json_key(j, "weight");
		mtd_json_u64(j, g.weight);
		mtd_json_key(j, "current_weight");
		mtd_json_u64(j, g.current);
		mtd_json_key(j, "has_endpoints");
		mtd_json_bool(j, g.has_endpoints);
		mtd_json_key(j, "calls");
		mtd_json_u64(j, g.picks);
		mtd_json_key(j, "cut");
		mtd_json_bool(j, g.cut_ms != 0);
		mtd_json_key(j, "cut_at");
		json_time_or_null(j, g.cut_ms ? mtd_wall_of_mono_ms(g.cut_ms) : 0);
		if (g.guarded) {
			mtd_json_key(j, "window_calls");
			mtd_json_u64(j, g.window_calls);
			mtd_json_key(j, "window_failures");
			mtd_json_u64(j, g.window_failed);
			mtd_json_key(j, "window_p99_s");
			mtd_json_dbl(j, g.window_p99_ms / 1e3);
		}
		mtd_json_obj_end(j);
	}
	mtd_json_arr_end(j);
	mtd_json_obj_end(j);
}

/* A service's fault figures in /clusters: ejections, the circuit
 * breaker's counts and refusals, the retry budget, substitute answers. */
static void clusters_health(struct mtd_json *j, const struct mtd_rt_service *s, const struct mtd_mx_service *f)
{
	const struct mtd_cfg_service *c = s->cfg;
	if (c->outlier.enabled) {
		mtd_json_key(j, "ejected");
		mtd_json_u64(j, s->outliers ? atomic_load(&s->outliers->n_ejected) : 0);
	}
	const struct mtd_circuit_config *cb = &c->circuit;
	mtd_json_key(j, "circuit_breaker");
	mtd_json_obj_begin(j);
	mtd_json_key(j, "max_calls");
	mtd_json_u64(j, cb->max_calls);
	/* Counted only while a limit needs them (call.c, pool.c). */
	if (cb->max_calls) {
		mtd_json_key(j, "calls");
		mtd_json_u64(j, atomic_load(&s->load->calls));
	}
	mtd_json_key(j, "max_pending");
	mtd_json_u64(j, cb->max_pending);
	if (cb->max_pending) {
		mtd_json_key(j, "pending");
		mtd_json_u64(j, atomic_load(&s->load->pending));
	}
	mtd_json_key(j, "max_calls_per_endpoint");
	mtd_json_u64(j, cb->max_calls_per_endpoint);
	mtd_json_key(j, "rejected");
	mtd_json_obj_begin(j);
	for (size_t k = 0; k < MTD_MX_CIRCUIT_N; k++) {
		mtd_json_key(j, mtd_mx_circuit_names[k]);
		mtd_json_u64(j, f->circuit_rejected[k]);
	}
	mtd_json_obj_end(j);
	mtd_json_obj_end(j);
	mtd_json_key(j, "retries");
	mtd_json_u64(j, f->retries);
	if (c->local->retry_budget.set) {
		mtd_json_key(j, "retry_budget");
		mtd_json_obj_begin(j);
		mtd_json_key(j, "spent");
		mtd_json_u64(j, atomic_load(&s->budget->spent));
		mtd_json_key(j, "exhausted");
		mtd_json_u64(j, atomic_load(&s->budget->exhausted));
		mtd_json_obj_end(j);
	}
	mtd_json_key(j, "failsafe_answers");
	mtd_json_u64(j, f->failsafe);
	mtd_json_key(j, "fallback_answers");
	mtd_json_u64(j, f->fallback);
}

/* Where a service's endpoints come from, and how its source is doing. */
static void clusters_discovery(struct mtd_json *j, const struct mtd_cfg_service *c,
                               const struct mtd_mx_disc_index *ix)
{
	const struct mtd_mx_disc *d = mtd_metrics_disc_lookup(ix, c->local->name);
	bool etcd = c->local->source == MTD_CFG_SOURCE_ETCD;
	if (!d || (strcmp(d->source, "etcd") == 0) != etcd)
		return; /* static endpoints (no host name to resolve) */
	mtd_json_key(j, "discovery");
	mtd_json_obj_begin(j);
	mtd_json_key(j, "source");
	mtd_json_str(j, d->source);
	mtd_json_key(j, "endpoints");
	mtd_json_u64(j, d->endpoints);
	mtd_json_key(j, "last_sync");
	json_time_or_null(j, d->last_sync_ms);
	if (etcd) {
		mtd_json_key(j, "connected");
		mtd_json_bool(j, d->connected);
		mtd_json_key(j, "updates");
		mtd_json_u64(j, d->updates);
	} else {
		mtd_json_key(j, "resolutions");
		mtd_json_u64(j, d->resolutions);
		mtd_json_key(j, "resolution_failures");
		mtd_json_u64(j, d->resolve_fails);
	}
	mtd_json_obj_end(j);
}

static void h_clusters(struct mtd_admin *a, struct evhttp_request *req)
{
	const struct mtd_runtime *rt = *a->view.rt;
	struct mtd_abuf b = {0};
	struct mtd_json j;
	int64_t now_ms = mtd_wall_ms(), now_ns = mtd_now_ns();
	mtd_json_init(&j, &b);
	mtd_json_obj_begin(&j);
	mtd_json_key(&j, "generation");
	mtd_json_u64(&j, (*a->view.rt)->gen);
	mtd_json_key(&j, "draining");
	mtd_json_bool(&j, *a->view.draining);
	mtd_json_key(&j, "services");
	mtd_json_arr_begin(&j);
	struct mtd_mx_service *figs = rt ? mtd_metrics_services(rt) : NULL;
	if (rt && !figs)
		b.oom = true; /* answered as 500 below */
	struct mtd_mx_disc_index discs;
	(void)mtd_metrics_disc_index(&discs); /* out of memory: looked up one by one */
	for (size_t si = 0; figs && si < rt->cfg->n_services; si++) {
		const struct mtd_rt_service *s = rt->services[si];
		const struct mtd_cfg_service *c = s->cfg;
		mtd_json_obj_begin(&j);
		mtd_json_key(&j, "name");
		mtd_json_str(&j, c->local->name);
		mtd_json_key(&j, "policy");
		mtd_json_str(&j, c->lb.ops->name);
		mtd_json_key(&j, "tls");
		mtd_json_bool(&j, c->tls != NULL);
		mtd_json_key(&j, "warmup");
		mtd_json_obj_begin(&j);
		mtd_json_key(&j, "duration_s");
		mtd_json_dbl(&j, (double)c->lb.warmup.duration_ms / 1e3);
		mtd_json_key(&j, "curve");
		mtd_json_str(&j, c->lb.warmup.curve == MTD_LB_WARMUP_SLOW_START ? "SLOW_START" : "LINEAR");
		mtd_json_obj_end(&j);
		mtd_json_key(&j, "methods");
		mtd_json_arr_begin(&j);
		for (size_t m = 0; m < c->n_methods; m++) {
			mtd_json_obj_begin(&j);
			mtd_json_key(&j, "name");
			mtd_json_str(&j, c->methods[m].name);
			mtd_json_key(&j, "policy");
			mtd_json_str(&j, c->methods[m].lb.ops->name);
			clusters_split(&j, s->methods ? s->methods[m].layer : NULL, c->methods[m].split);
			mtd_json_obj_end(&j);
		}
		mtd_json_arr_end(&j);
		clusters_split(&j, s->layer, c->local->split);
		clusters_health(&j, s, &figs[si]);
		clusters_discovery(&j, c, &discs);
		mtd_json_key(&j, "endpoints");
		mtd_json_arr_begin(&j);
		struct mtd_mx_warm *warm = mtd_metrics_warmups(s, now_ms);
		if (!warm)
			b.oom = true; /* answered as 500 below */
		bool orca = c->lb.ops && (c->lb.ops->caps & MTD_LB_CAP_ORCA);
		for (size_t m = 0; m < c->n_methods; m++)
			orca |= c->methods[m].lb.ops && (c->methods[m].lb.ops->caps & MTD_LB_CAP_ORCA);
		for (size_t i = 0; warm && i < s->n_eps; i++) {
			const struct mtd_endpoint *e = s->eps[i];
			const struct mtd_lb_stats *st = &e->stats;
			const struct mtd_lb_live *live = mtd_lb_stats_view(st);
			const struct mtd_mx_endpoint *mx = mtd_mx_ep_view(&e->mx);
			double eff = warm[i].effective, progress = warm[i].progress;
			int64_t active = atomic_load(&live->active), conns = atomic_load(&mx->conns_open);
			bool reachable = atomic_load(&mx->pools_failing) <= 0;
			mtd_json_obj_begin(&j);
			mtd_json_key(&j, "address");
			mtd_json_str(&j, mtd_endpoint_text(e));
			mtd_json_key(&j, "weight");
			mtd_json_i64(&j, s->lb_eps[i].weight);
			mtd_json_key(&j, "effective_weight");
			mtd_json_dbl(&j, eff);
			mtd_json_key(&j, "warmup_progress");
			mtd_json_dbl(&j, progress);
			mtd_json_key(&j, "picks");
			mtd_json_u64(&j, atomic_load(&live->picks));
			mtd_json_key(&j, "in_flight");
			mtd_json_i64(&j, active > 0 ? active : 0);
			mtd_json_key(&j, "responses");
			mtd_json_u64(&j, atomic_load(&live->successes));
			mtd_json_key(&j, "failures");
			mtd_json_u64(&j, atomic_load(&live->failures));
			mtd_json_key(&j, "latency_ewma_s");
			mtd_json_dbl(&j, mtd_lb_stats_ewma_us(st, now_ns, c->lb.decay_ms) / 1e6);
			if (orca) {
				/* What the endpoint's ORCA load reports said. */
				struct mtd_lb_orca_view ov;
				mtd_lb_orca_view(st, &ov);
				mtd_json_key(&j, "orca");
				mtd_json_obj_begin(&j);
				mtd_json_key(&j, "utilization");
				mtd_json_dbl(&j, ov.utilization);
				mtd_json_key(&j, "cpu_utilization");
				mtd_json_dbl(&j, ov.cpu);
				mtd_json_key(&j, "application_utilization");
				mtd_json_dbl(&j, ov.app);
				mtd_json_key(&j, "mem_utilization");
				mtd_json_dbl(&j, ov.mem);
				mtd_json_key(&j, "qps");
				mtd_json_dbl(&j, ov.qps);
				mtd_json_key(&j, "eps");
				mtd_json_dbl(&j, ov.eps);
				mtd_json_key(&j, "weight");
				mtd_json_dbl(&j, ov.weight);
				mtd_json_key(&j, "reports");
				mtd_json_u64(&j, ov.reports);
				mtd_json_key(&j, "reports_invalid");
				mtd_json_u64(&j, ov.invalid);
				/* Its out-of-band stream: "off" (trailers), "waiting",
				 * "open", "unimplemented" (trailers). */
				static const char *const oob[] = {"off", "waiting", "open", "unimplemented"};
				mtd_json_key(&j, "out_of_band");
				mtd_json_str(&j, (unsigned)ov.oob < 4 ? oob[ov.oob] : "off");
				mtd_json_obj_end(&j);
			}
			mtd_json_key(&j, "connections");
			mtd_json_i64(&j, conns > 0 ? conns : 0);
			mtd_json_key(&j, "connect_failures");
			mtd_json_u64(&j, atomic_load(&mx->connect_failures));
			struct mtd_mx_health h;
			mtd_metrics_health(s, i, &h);
			if (c->outlier.enabled) {
				mtd_json_key(&j, "ejected");
				mtd_json_bool(&j, h.ejected);
				/* RFC 3339 UTC, and the seconds left; null while
				 * serving (or while the ejection is being written). */
				mtd_json_key(&j, "ejected_until");
				json_time_or_null(&j, h.ejected_until_ms);
				mtd_json_key(&j, "ejection_remaining_s");
				if (h.ejected_until_ms > 1)
					mtd_json_dbl(&j, h.ejected_until_ms > now_ms
					                         ? (double)(h.ejected_until_ms - now_ms) / 1e3
					                         : 0.0);
				else
					mtd_json_null(&j);
				mtd_json_key(&j, "ejections");
				mtd_json_u64(&j, h.ejections);
			}
			mtd_json_key(&j, "health");
			mtd_json_str(&j, mtd_mx_hc_names[h.hc]);
			if (c->local->health_check.enabled) {
				mtd_json_key(&j, "health_checks");
				mtd_json_u64(&j, h.hc_checks);
				mtd_json_key(&j, "health_check_failures");
				mtd_json_u64(&j, h.hc_failures);
			}
			/* One word for the live page, the worst first: left out of
			 * picks by outlier detection, by health checks, or a pool
			 * backing off after failed connects. */
			mtd_json_key(&j, "state");
			mtd_json_str(&j, h.ejected                       ? "ejected"
			                 : h.hc == MTD_MX_HC_NOT_SERVING ? "unhealthy"
			                 : reachable                     ? "healthy"
			                                                 : "unreachable");
			mtd_json_obj_end(&j);
		}
		free(warm);
		mtd_json_arr_end(&j);
		mtd_json_obj_end(&j);
	}
	free(figs);
	mtd_metrics_disc_index_free(&discs);
	mtd_json_arr_end(&j);
	mtd_json_obj_end(&j);
	mtd_abuf_add(&b, "\n", 1);
	reply_buf(req, "application/json", &b);
}

/* The live page's five minutes (history.h): ?since=MS for the points
 * after that time (the page asks for what it has not seen yet). */
static void h_history(struct mtd_admin *a, struct evhttp_request *req)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *q = uri ? evhttp_uri_get_query(uri) : NULL;
	int64_t since = 0;
	if (q && strncmp(q, "since=", 6) == 0)
		since = strtoll(q + 6, NULL, 10);
	struct mtd_abuf b = {0};
	struct mtd_json j;
	mtd_json_init(&j, &b);
	mtd_history_json(&j, *a->view.rt, since, mtd_wall_ms());
	mtd_abuf_add(&b, "\n", 1);
	reply_buf(req, "application/json", &b);
}

static void h_config_dump(struct mtd_admin *a, struct evhttp_request *req)
{
	const struct mtd_runtime *rt = *a->view.rt;
	if (!rt) {
		reply_text(req, 503, "Service Unavailable", "no config loaded\n");
		return;
	}
	ProtobufCMessage *msg =
	        (ProtobufCMessage *)maitred__config__v1__config__unpack(NULL, rt->cfg->pb_len, rt->cfg->pb);
	if (!msg) {
		reply_text(req, 500, "Internal Server Error", "cannot decode the running config\n");
		return;
	}
	struct mtd_abuf b = {0};
	struct mtd_json j;
	mtd_json_init(&j, &b);
	mtd_json_obj_begin(&j);
	mtd_json_key(&j, "source");
	mtd_json_str(&j, rt->cfg->source);
	mtd_json_key(&j, "generation");
	mtd_json_u64(&j, (*a->view.rt)->gen);
	mtd_json_key(&j, "config");
	mtd_admin_dump_message(&j, msg);
	/* What the xDS server sent, as CSDS shows it: versions, nonces, NACKs
	 * (names and figures only, no resource bytes). */
	mtd_json_key(&j, "xds");
	mtd_xds_dump(a->view.xds != NULL ? *a->view.xds : NULL, &j);
	mtd_json_obj_end(&j);
	mtd_abuf_add(&b, "\n", 1);
	protobuf_c_message_free_unpacked(msg, NULL);
	reply_buf(req, "application/json", &b);
}

static void h_page(struct mtd_admin *a, struct evhttp_request *req)
{
	reply(req, 200, "OK", "text/html; charset=utf-8", mtd_admin_page, mtd_admin_page_len);
}

/* ---- routing ------------------------------------------------------------ */

static const struct route {
	const char *path;
	bool post; /* else GET (and HEAD) */
	void (*fn)(struct mtd_admin *a, struct evhttp_request *req);
} routes[] = {
        {"/", false, h_page},
        {"/metrics", false, h_metrics},
        {"/clusters", false, h_clusters},
        {"/history", false, h_history},
        {"/config_dump", false, h_config_dump},
        {"/healthz", false, h_healthz},
        {"/ready", false, h_ready},
        {"/drain", true, h_drain},
};

static void handle(struct evhttp_request *req, void *arg)
{
	struct mtd_admin *a = arg;
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
	enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
	if (!path || !*path)
		path = "/";
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
		if (strcmp(path, routes[i].path) != 0)
			continue;
		bool ok = routes[i].post ? cmd == EVHTTP_REQ_POST : cmd == EVHTTP_REQ_GET || cmd == EVHTTP_REQ_HEAD;
		if (!ok) {
			/* RFC 9110 §15.5.6: 405 carries Allow. */
			evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
			                  routes[i].post ? "POST" : "GET, HEAD");
			reply_text(req, 405, "Method Not Allowed",
			           routes[i].post ? "method not allowed: use POST\n" : "method not allowed: use GET\n");
			return;
		}
		routes[i].fn(a, req);
		return;
	}
	reply_text(req, 404, "Not Found",
	           "not found; try /metrics, /clusters, /config_dump, /healthz, /ready, POST /drain or /\n");
}

struct mtd_admin *mtd_admin_start(struct event_base *base, const struct mtd_cfg_addr *addr,
                                  const struct mtd_admin_view *view, char *err, size_t errlen)
{
	struct mtd_admin *a = calloc(1, sizeof(*a));
	int fd = -1;
	if (!a)
		goto nomem;
	a->view = *view;
	a->http = evhttp_new(base);
	if (!a->http)
		goto nomem;
	/* Let every method reach handle(), which answers 405 itself. */
	evhttp_set_allowed_methods(a->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT |
	                                            EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
	                                            EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
	evhttp_set_timeout(a->http, 10);
	evhttp_set_max_headers_size(a->http, 16384);
	evhttp_set_max_body_size(a->http, 4096);
	evhttp_set_gencb(a->http, handle, a);
	fd = socket(addr->sa.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		goto sys;
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (const struct sockaddr *)&addr->sa, addr->salen) < 0 || listen(fd, 128) < 0)
		goto sys;
	if (!evhttp_accept_socket_with_handle(a->http, fd))
		goto nomem;
	return a;
sys:
	snprintf(err, errlen, "cannot listen on admin %s: %s", addr->text, strerror(errno));
	goto fail;
nomem:
	snprintf(err, errlen, "admin %s: out of memory", addr->text);
fail:
	if (fd >= 0)
		close(fd);
	mtd_admin_free(a);
	return NULL;
}

void mtd_admin_free(struct mtd_admin *a)
{
	if (!a)
		return;
	if (a->http)
		evhttp_free(a->http); /* closes the bound socket too */
	free(a);
}
