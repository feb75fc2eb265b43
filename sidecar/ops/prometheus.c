/* The reading side of the figures (control thread): the sums over the
 * workers, an endpoint's health and warmup, and the /metrics text. The
 * contract is in prometheus.h. */
#include "config.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "admin/admin.h"
#include "core/clock.h"
#include "discovery/discovery.h"
#include "grpc/grpc.h"
#include "health/outlier.h"
#include "lb/lb-impl.h" /* warm span: the effective weight the pickers use */
#include "lb/lb.h"
#include "route/route.h"
#include "sidecar/control/runtime.h"
#include "sidecar/ops/mesh.h"
#include "sidecar/ops/metrics-int.h"
#include "sidecar/ops/prometheus.h"
#include "sidecar/ops/trace_export.h"
#include "sidecar/control/control-t.h"

const char *const mtd_mx_hc_names[4] = {
        [MTD_MX_HC_UNCHECKED] = "unchecked",
        [MTD_MX_HC_UNKNOWN] = "UNKNOWN",
        [MTD_MX_HC_SERVING] = "SERVING",
        [MTD_MX_HC_NOT_SERVING] = "NOT_SERVING",
};

/* ---- /metrics (control thread) ---------------------------------------- */

/* One (service, method) summed over the workers. */
struct agg {
	const struct mtd_mx_method *key; /* any worker's entry: path, svc_len */
	char *svc, *method;
	uint64_t started, by_code[MTD_MX_CODES], lat_bucket[MTD_MX_LAT_BUCKETS + 1], lat_sum_ns, bytes_in, bytes_out;
	uint64_t retries, transparent_retries, budget_exhausted, pushback_stops, failsafe, fallback;
	uint64_t circuit_rejected[MTD_MX_CIRCUIT_N];
	uint64_t hedges, hedge_wins, hedge_delay_ms; /* the last: max over workers */
	uint64_t failback_resent, failback_dropped;
	uint64_t policy[MTD_MX_POLICY_N];
	bool hedge_auto;
};

static uint64_t ld(const _Atomic uint64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

static int agg_cmp(const void *a, const void *b)
{
	const struct mtd_mx_method *x = *(const struct mtd_mx_method *const *)a;
	const struct mtd_mx_method *y = *(const struct mtd_mx_method *const *)b;
	return strcmp(x->path, y->path);
}

static void agg_add(struct agg *g, const struct mtd_mx_method *m)
{
	g->started += ld(&m->started);
	for (size_t c = 0; c < MTD_MX_CODES; c++)
		g->by_code[c] += ld(&m->by_code[c]);
	for (size_t i = 0; i <= MTD_MX_LAT_BUCKETS; i++)
		g->lat_bucket[i] += ld(&m->lat_bucket[i]);
	g->lat_sum_ns += ld(&m->lat_sum_ns);
	g->bytes_in += ld(&m->bytes_in);
	g->bytes_out += ld(&m->bytes_out);
	g->retries += ld(&m->retries);
	g->transparent_retries += ld(&m->transparent_retries);
	g->budget_exhausted += ld(&m->budget_exhausted);
	g->pushback_stops += ld(&m->pushback_stops);
	g->failsafe += ld(&m->failsafe);
	g->fallback += ld(&m->fallback);
	for (size_t c = 0; c < MTD_MX_CIRCUIT_N; c++)
		g->circuit_rejected[c] += ld(&m->circuit_rejected[c]);
	g->hedges += ld(&m->hedges);
	g->hedge_wins += ld(&m->hedge_wins);
	g->failback_resent += ld(&m->failback_resent);
	g->failback_dropped += ld(&m->failback_dropped);
	for (size_t c = 0; c < MTD_MX_POLICY_N; c++)
		g->policy[c] += ld(&m->policy[c]);
	uint64_t hd = ld(&m->hedge_delay_ms);
	if (hd) {
		g->hedge_auto = true;
		if (hd > g->hedge_delay_ms)
			g->hedge_delay_ms = hd;
	}
}

/* Every worker's entries, merged by path and sorted. *n receives the count;
 * NULL with *n = 0 on allocation failure or when nothing was called. */
static struct agg *aggregate(size_t *n)
{
	size_t cap = 0, k = 0;
	*n = 0;
	for (unsigned w = 0; w < mtd_mx_n_workers; w++)
		cap += MTD_MX_SLOTS + 1;
	const struct mtd_mx_method **all = calloc(cap ? cap : 1, sizeof(*all));
	if (!all)
		return NULL;
	for (unsigned w = 0; w < mtd_mx_n_workers; w++) {
		for (size_t i = 0; i < MTD_MX_SLOTS; i++) {
			const struct mtd_mx_method *m =
			        atomic_load_explicit(&mtd_mx_workers[w].slots[i], memory_order_acquire);
			if (m)
				all[k++] = m;
		}
		const struct mtd_mx_method *o = atomic_load_explicit(&mtd_mx_workers[w].other, memory_order_acquire);
		if (o)
			all[k++] = o;
	}
	qsort(all, k, sizeof(*all), agg_cmp);
	struct agg *out = calloc(k ? k : 1, sizeof(*out));
	if (!out) {
		free(all);
		return NULL;
	}
	size_t m = 0;
	for (size_t i = 0; i < k; i++) {
		if (m == 0 || strcmp(out[m - 1].key->path, all[i]->path) != 0) {
			struct agg *g = &out[m++];
			g->key = all[i];
			g->svc = strndup(all[i]->path + 1, all[i]->svc_len);
			g->method = strdup(all[i]->path + 2 + all[i]->svc_len);
		}
		agg_add(&out[m - 1], all[i]);
	}
	free(all);
	*n = m;
	return out;
}

static void agg_free(struct agg *a, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(a[i].svc);
		free(a[i].method);
	}
	free(a);
}

static const char *const SM[] = {"service", "method"};
static const char *const SE[] = {"service", "endpoint"};

static void render_calls(struct mtd_abuf *b, struct agg *a, size_t n)
{
	mtd_prom_family(b, "maitred_calls_total", "counter",
	                "Calls finished, by service, method and the final gRPC status the client saw.");
	for (size_t i = 0; i < n; i++) {
		for (int c = 0; c < MTD_MX_CODES; c++) {
			if (!a[i].by_code[c])
				continue;
			const char *k[] = {"service", "method", "grpc_code"};
			const char *v[] = {a[i].svc, a[i].method, mtd_grpc_status_name(c)};
			mtd_prom_sample_u64(b, "maitred_calls_total", NULL, k, v, 3, a[i].by_code[c]);
		}
	}
	mtd_prom_family(b, "maitred_calls_in_flight", "gauge", "Calls routed and not yet finished.");
	for (size_t i = 0; i < n; i++) {
		uint64_t done = 0;
		for (int c = 0; c < MTD_MX_CODES; c++)
			done += a[i].by_code[c];
		const char *v[] = {a[i].svc, a[i].method};
		/* Read apart from the ends, started can lag them by a call. */
		mtd_prom_sample_u64(b, "maitred_calls_in_flight", NULL, SM, v, 2,
		                    a[i].started > done ? a[i].started - done : 0);
	}
	mtd_prom_family(b, "maitred_call_duration_seconds", "histogram",
	                "Call duration from the request headers to the end of the call, seconds.");
	for (size_t i = 0; i < n; i++) {
		const char *v[] = {a[i].svc, a[i].method};
		uint64_t cum = 0;
		for (size_t k = 0; k < MTD_MX_LAT_BUCKETS; k++) {
			cum += a[i].lat_bucket[k];
			mtd_prom_sample_le(b, "maitred_call_duration_seconds", SM, v, 2, mtd_mx_lat_bounds_s[k], cum);
		}
		cum += a[i].lat_bucket[MTD_MX_LAT_BUCKETS];
		mtd_prom_sample_le(b, "maitred_call_duration_seconds", SM, v, 2, INFINITY, cum);
		mtd_prom_sample(b, "maitred_call_duration_seconds", "_sum", SM, v, 2, (double)a[i].lat_sum_ns / 1e9);
		mtd_prom_sample_u64(b, "maitred_call_duration_seconds", "_count", SM, v, 2, cum);
	}
	mtd_prom_family(b, "maitred_call_request_bytes_total", "counter",
	                "Request DATA bytes received from the local app (gRPC framing included).");
	for (size_t i = 0; i < n; i++) {
		const char *v[] = {a[i].svc, a[i].method};
		mtd_prom_sample_u64(b, "maitred_call_request_bytes_total", NULL, SM, v, 2, a[i].bytes_in);
	}
	mtd_prom_family(b, "maitred_call_response_bytes_total", "counter",
	                "Response DATA bytes received from the upstreams (gRPC framing included).");
	for (size_t i = 0; i < n; i++) {
		const char *v[] = {a[i].svc, a[i].method};
		mtd_prom_sample_u64(b, "maitred_call_response_bytes_total", NULL, SM, v, 2, a[i].bytes_out);
	}
	/* The fault policy, per service and method. */
	static const struct {
		const char *name, *help;
		size_t off;
	} fault_families[] = {
	        {"maitred_retries_total", "Retries the fault policy started (FAILOVER), after the first attempt.",
	         offsetof(struct agg, retries)},
	        {"maitred_transparent_retries_total",
	         "Attempts moved to another endpoint before anything was sent (refused connects): no retry cost.",
	         offsetof(struct agg, transparent_retries)},
	        {"maitred_retry_budget_exhausted_total", "Retries the retry budget refused.",
	         offsetof(struct agg, budget_exhausted)},
	        {"maitred_retry_pushback_stops_total",
	         "Retries not made because the server's grpc-retry-pushback-ms said no.",
	         offsetof(struct agg, pushback_stops)},
	        {"maitred_failsafe_answers_total", "Calls answered OK with an empty message by FAILSAFE.",
	         offsetof(struct agg, failsafe)},
	        {"maitred_fallback_answers_total", "Calls answered with the configured fallback.",
	         offsetof(struct agg, fallback)},
	        {"maitred_hedges_total", "FORKING: attempts started after the first (hedges).",
	         offsetof(struct agg, hedges)},
	        {"maitred_hedge_wins_total", "FORKING: calls answered by a hedge rather than the first attempt.",
	         offsetof(struct agg, hedge_wins)},
	        {"maitred_failback_resent_total", "FAILBACK: background re-sends of failed calls started.",
	         offsetof(struct agg, failback_resent)},
	        {"maitred_failback_dropped_total",
	         "FAILBACK: failed calls given up (queue full, retries spent, request not kept, shutdown).",
	         offsetof(struct agg, failback_dropped)},
	};
	for (size_t f = 0; f < sizeof(fault_families) / sizeof(fault_families[0]); f++) {
		mtd_prom_family(b, fault_families[f].name, "counter", fault_families[f].help);
		for (size_t i = 0; i < n; i++) {
			const char *v[] = {a[i].svc, a[i].method};
			uint64_t x = *(const uint64_t *)((const char *)&a[i] + fault_families[f].off);
			mtd_prom_sample_u64(b, fault_families[f].name, NULL, SM, v, 2, x);
		}
	}
	/* Traffic policy, per service and method. */
	static const struct {
		const char *name, *help;
		enum mtd_mx_policy what;
	} policy_families[] = {
	        {"maitred_rate_limited_total",
	         "Calls rate_limit refused (RESOURCE_EXHAUSTED at once, nothing sent upstream).", MTD_MX_RATE_LIMITED},
	        {"maitred_mirror_copies_total", "mirror: copies of calls sent to the mirror entry (answers discarded).",
	         MTD_MX_MIRROR_COPIES},
	        {"maitred_mirror_too_large_total",
	         "mirror: calls not mirrored, their request larger than fault.replay_buffer (or not kept whole).",
	         MTD_MX_MIRROR_TOO_LARGE},
	        {"maitred_mirror_failed_total",
	         "mirror: copies that failed (no endpoint, a connect failure, an error status, their deadline); the "
	         "primary never sees it. Other reasons: maitred_mirror_dropped_total.",
	         MTD_MX_MIRROR_FAILED},
	        {"maitred_mirror_cancelled_total", "mirror: copies still running when the primary ended, cancelled.",
	         MTD_MX_MIRROR_CANCELLED},
	        {"maitred_first_endpoints_waits_total",
	         "Calls that waited for their service's first endpoint set, its source not answered yet "
	         "(discovery.initial_wait).",
	         MTD_MX_FIRST_WAITED},
	        {"maitred_first_endpoints_wait_expired_total",
	         "Calls whose wait for their service's first endpoint set ended at their deadline "
	         "(DEADLINE_EXCEEDED) or at discovery.initial_wait (UNAVAILABLE).",
	         MTD_MX_FIRST_WAIT_EXPIRED},
	        {"maitred_first_endpoints_wait_refused_total",
	         "Calls refused a wait for their service's first endpoints (UNAVAILABLE at once): their worker had "
	         "4096 calls waiting already.",
	         MTD_MX_FIRST_WAIT_FULL},
	};
	for (size_t f = 0; f < sizeof(policy_families) / sizeof(policy_families[0]); f++) {
		mtd_prom_family(b, policy_families[f].name, "counter", policy_families[f].help);
		for (size_t i = 0; i < n; i++) {
			const char *v[] = {a[i].svc, a[i].method};
			mtd_prom_sample_u64(b, policy_families[f].name, NULL, SM, v, 2,
			                    a[i].policy[policy_families[f].what]);
		}
	}
	/* Every copy made or meant and not delivered, by why (a copy is never
	 * lost silently): the sum over reasons. */
	mtd_prom_family(b, "maitred_mirror_dropped_total", "counter",
	                "mirror: copies not delivered to the mirror entry (or not answered by it), by reason; the "
	                "primary is never affected.");
	for (size_t i = 0; i < n; i++) {
		static const struct {
			const char *reason;
			enum mtd_mx_policy what;
		} reasons[] = {
		        {"too_large", MTD_MX_MIRROR_TOO_LARGE},
		        {"rate_limited", MTD_MX_MIRROR_RATE_LIMITED},
		        {"circuit_open", MTD_MX_MIRROR_CIRCUIT_OPEN},
		        {"queue_full", MTD_MX_MIRROR_QUEUE_FULL},
		        {"rerouted", MTD_MX_MIRROR_REROUTED},
		        {"no_memory", MTD_MX_MIRROR_NO_MEMORY},
		        {"failed", MTD_MX_MIRROR_FAILED},
		        {"primary_ended", MTD_MX_MIRROR_CANCELLED},
		        {"shutdown", MTD_MX_MIRROR_SHUTDOWN},
		};
		for (size_t r = 0; r < sizeof(reasons) / sizeof(reasons[0]); r++) {
			uint64_t x = a[i].policy[reasons[r].what];
			if (!x && !a[i].policy[MTD_MX_MIRROR_COPIES])
				continue; /* a path never mirrored: no zero rows */
			const char *k[] = {"service", "method", "reason"};
			const char *v[] = {a[i].svc, a[i].method, reasons[r].reason};
			mtd_prom_sample_u64(b, "maitred_mirror_dropped_total", NULL, k, v, 3, x);
		}
	}
	mtd_prom_family(b, "maitred_fault_injected_total", "counter",
	                "fault_injection: calls aborted (ended with the configured status, no upstream) or delayed.");
	for (size_t i = 0; i < n; i++) {
		static const char *const kinds[] = {"abort", "delay"};
		const enum mtd_mx_policy w[] = {MTD_MX_FAULT_ABORTED, MTD_MX_FAULT_DELAYED};
		for (int k = 0; k < 2; k++) {
			const char *kk[] = {"service", "method", "fault"};
			const char *v[] = {a[i].svc, a[i].method, kinds[k]};
			mtd_prom_sample_u64(b, "maitred_fault_injected_total", NULL, kk, v, 3, a[i].policy[w[k]]);
		}
	}
	mtd_prom_family(b, "maitred_circuit_rejections_total", "counter",
	                "Calls circuit breaking refused (RESOURCE_EXHAUSTED), by the limit reached.");
	for (size_t i = 0; i < n; i++) {
		for (int c = 0; c < MTD_MX_CIRCUIT_N; c++) {
			if (!a[i].circuit_rejected[c])
				continue;
			const char *k[] = {"service", "method", "limit"};
			const char *v[] = {a[i].svc, a[i].method, mtd_mx_circuit_names[c]};
			mtd_prom_sample_u64(b, "maitred_circuit_rejections_total", NULL, k, v, 3,
			                    a[i].circuit_rejected[c]);
		}
	}
	mtd_prom_family(b, "maitred_hedge_delay_seconds", "gauge",
	                "FORKING with hedge_delay AUTO: the delay before a hedge now (the largest of the workers').");
	for (size_t i = 0; i < n; i++) {
		if (!a[i].hedge_auto)
			continue;
		const char *v[] = {a[i].svc, a[i].method};
		mtd_prom_sample(b, "maitred_hedge_delay_seconds", NULL, SM, v, 2, (double)a[i].hedge_delay_ms / 1e3);
	}
	mtd_prom_family(b, "maitred_calls_unrouted_total", "counter",
	                "Calls that matched no service (malformed :path, unknown service), by status.");
	for (int c = 0; c < MTD_MX_CODES; c++) {
		uint64_t sum = 0;
		for (unsigned w = 0; w < mtd_mx_n_workers; w++)
			sum += ld(&mtd_mx_workers[w].unrouted_by_code[c]);
		if (!sum)
			continue;
		const char *k[] = {"grpc_code"};
		const char *v[] = {mtd_grpc_status_name(c)};
		mtd_prom_sample_u64(b, "maitred_calls_unrouted_total", NULL, k, v, 1, sum);
	}
}

/* Per endpoint: one family at a time over every service's endpoints. */
enum ep_fig {
	EP_PICKS,
	EP_ACTIVE,
	EP_SUCCESSES,
	EP_FAILURES,
	EP_EWMA,
	EP_WEIGHT,
	EP_EFFECTIVE,
	EP_WARMUP,
	EP_CONNS,
	EP_CONNECT_FAILURES,
	EP_REACHABLE,
	EP_EJECTED,
	EP_EJECTIONS,
	EP_HEALTHY,
	EP_HC_FAILURES,
	EP_ORCA_UTIL,
	EP_ORCA_CPU,
	EP_ORCA_APP,
	EP_ORCA_MEM,
	EP_ORCA_QPS,
	EP_ORCA_EPS,
	EP_ORCA_WEIGHT,
	EP_ORCA_REPORTS,
	EP_ORCA_INVALID,
	EP_N
};

static const struct {
	const char *name, *type, *help;
} ep_families[EP_N] = {
        [EP_PICKS] = {"maitred_endpoint_picks_total", "counter", "Calls the balancer sent to the endpoint."},
        [EP_ACTIVE] = {"maitred_endpoint_calls_in_flight", "gauge", "Calls in flight on the endpoint."},
        [EP_SUCCESSES] = {"maitred_endpoint_responses_total", "counter",
                          "Calls the endpoint answered with a gRPC status (any status)."},
        [EP_FAILURES] = {"maitred_endpoint_failures_total", "counter",
                         "Calls that failed on the endpoint (connect, reset, timeout) without an answer."},
        [EP_EWMA] = {"maitred_endpoint_latency_ewma_seconds", "gauge",
                     "Peak-EWMA latency estimate of the endpoint, seconds (0 before any answer)."},
        [EP_WEIGHT] = {"maitred_endpoint_weight", "gauge", "Configured weight of the endpoint."},
        [EP_EFFECTIVE] = {"maitred_endpoint_effective_weight", "gauge", "Weight the balancer uses now, after warmup."},
        [EP_WARMUP] = {"maitred_endpoint_warmup_ratio", "gauge",
                       "Warmup progress of the endpoint, 0 to 1 (1 = warm, or no warmup)."},
        [EP_CONNS] = {"maitred_endpoint_connections", "gauge",
                      "Upstream HTTP/2 connections open to the endpoint, over all workers."},
        [EP_CONNECT_FAILURES] = {"maitred_endpoint_connect_failures_total", "counter",
                                 "Failed connects and TLS handshakes to the endpoint."},
        [EP_REACHABLE] = {"maitred_endpoint_reachable", "gauge",
                          "0 while some worker backs off the endpoint after failed connects, else 1."},
        [EP_EJECTED] = {"maitred_endpoint_ejected", "gauge",
                        "1 while outlier detection ejects the endpoint (for any method when method-scoped), "
                        "else 0; services with outlier_detection only."},
        [EP_EJECTIONS] = {"maitred_endpoint_ejections_total", "counter",
                          "Times outlier detection ejected the endpoint; services with outlier_detection only."},
        [EP_HEALTHY] = {"maitred_endpoint_healthy", "gauge",
                        "0 while active health checks find the endpoint unhealthy, else 1; services with "
                        "health_check only."},
        [EP_HC_FAILURES] = {"maitred_endpoint_health_check_failures_total", "counter",
                            "Active health checks of the endpoint that failed (an error, no answer in time, "
                            "or not SERVING); services with health_check only."},
        [EP_ORCA_UTIL] = {"maitred_orca_utilization", "gauge",
                          "Utilization the endpoint's last ORCA load report gave (application_utilization when "
                          "above 0, else cpu_utilization); services whose policy reads load reports only."},
        [EP_ORCA_CPU] = {"maitred_orca_cpu_utilization", "gauge",
                         "cpu_utilization of the endpoint's last ORCA load report."},
        [EP_ORCA_APP] = {"maitred_orca_application_utilization", "gauge",
                         "application_utilization of the endpoint's last ORCA load report."},
        [EP_ORCA_MEM] = {"maitred_orca_mem_utilization", "gauge",
                         "mem_utilization of the endpoint's last ORCA load report."},
        [EP_ORCA_QPS] = {"maitred_orca_qps", "gauge",
                         "Queries per second (rps_fractional) of the endpoint's last ORCA load report."},
        [EP_ORCA_EPS] = {"maitred_orca_eps", "gauge",
                         "Errors per second of the endpoint's last ORCA load report."},
        [EP_ORCA_WEIGHT] = {"maitred_orca_weight", "gauge",
                            "Weight CLIENT_SIDE_WEIGHTED_ROUND_ROBIN gave the endpoint at its last recomputation "
                            "(its own, or the mean of the weighted ones); 0 while the policy is plain round "
                            "robin (fewer than two weighted endpoints)."},
        [EP_ORCA_REPORTS] = {"maitred_orca_reports_total", "counter",
                             "ORCA load reports read from the endpoint's trailers."},
        [EP_ORCA_INVALID] = {"maitred_orca_reports_invalid_total", "counter",
                             "ORCA load reports from the endpoint that did not parse (bad base64 or protobuf, a "
                             "figure out of range) and were ignored."},
};

/* The service or one of its methods balances on ORCA load reports. */
static bool reads_orca(const struct mtd_rt_service *s)
{
	if (s->cfg->lb.ops && (s->cfg->lb.ops->caps & MTD_LB_CAP_ORCA))
		return true;
	for (size_t m = 0; m < s->cfg->n_methods; m++)
		if (s->cfg->methods[m].lb.ops && (s->cfg->methods[m].lb.ops->caps & MTD_LB_CAP_ORCA))
			return true;
	return false;
}

static void add_outliers(struct mtd_mx_health *out, const struct mtd_outlier_set *set, size_t i)
{
	if (!set || i >= set->n)
		return;
	const struct mtd_outlier_entry *e = &set->entries[i];
	int64_t until = atomic_load_explicit(&e->ejected_until_ms, memory_order_relaxed);
	out->ejections += atomic_load_explicit(&e->ejections_total, memory_order_relaxed);
	if (until != 0) {
		out->ejected = true;
		/* The set runs on the monotonic clock; shown as wall time. 1:
		 * being written (outlier.c), kept as is. */
		if (until > 1)
			until = mtd_wall_of_mono_ms(until);
		if (until > out->ejected_until_ms)
			out->ejected_until_ms = until;
	}
}

void mtd_metrics_health(const struct mtd_rt_service *s, size_t i, struct mtd_mx_health *out)
{
	*out = (struct mtd_mx_health){0};
	add_outliers(out, s->outliers, i);
	for (size_t m = 0; s->methods && m < s->cfg->n_methods; m++)
		add_outliers(out, s->methods[m].outliers, i);
	if (s->cfg->local->health_check.enabled) {
		const struct mtd_endpoint *ep = s->eps[i];
		const struct mtd_mx_endpoint *mx = mtd_mx_ep_view(&ep->mx);
		out->hc_checks = atomic_load_explicit(&mx->hc_checks, memory_order_relaxed);
		out->hc_failures = atomic_load_explicit(&mx->hc_failures, memory_order_relaxed);
		/* hc_down: the control thread's, which the admin runs on. */
		out->hc = ep->hc_down ? MTD_MX_HC_NOT_SERVING : out->hc_checks ? MTD_MX_HC_SERVING : MTD_MX_HC_UNKNOWN;
	}
}

struct mtd_mx_service *mtd_metrics_services(const struct mtd_runtime *rt)
{
	size_t n_svc = rt->cfg->n_services, n = 0;
	struct mtd_mx_service *out = calloc(n_svc ? n_svc : 1, sizeof(*out));
	if (!out)
		return NULL;
	struct agg *a = aggregate(&n);
	for (size_t i = 0; i < n; i++) {
		if (a[i].key->hash == 0 && strcmp(a[i].key->path, "/(other)/(other)") == 0)
			continue; /* the overflow bucket belongs to no one service */
		/* Where the :path routes now (a reload may have moved it). */
		int si = mtd_route_lookup(rt->routes, a[i].svc, strlen(a[i].svc));
		if (si < 0 || (size_t)si >= n_svc)
			continue;
		struct mtd_mx_service *o = &out[si];
		o->retries += a[i].retries;
		o->budget_exhausted += a[i].budget_exhausted;
		o->fallback += a[i].fallback;
		o->failsafe += a[i].failsafe;
		for (size_t c = 0; c < MTD_MX_CIRCUIT_N; c++)
			o->circuit_rejected[c] += a[i].circuit_rejected[c];
	}
	agg_free(a, n);
	return out;
}

struct mtd_mx_warm *mtd_metrics_warmups(const struct mtd_rt_service *s, int64_t now_ms)
{
	struct mtd_mx_warm *out = calloc(s->n_eps ? s->n_eps : 1, sizeof(*out));
	if (!out)
		return NULL;
	/* The same span and weight the pickers compute (lb-impl.h). */
	struct mtd_lb_warm_span span;
	mtd_lb__warm_span(&s->cfg->lb.warmup, s->lb_eps, s->n_eps, &span);
	int64_t d = s->cfg->lb.warmup.duration_ms;
	for (size_t i = 0; i < s->n_eps; i++) {
		const struct mtd_lb_endpoint *e = &s->lb_eps[i];
		out[i].effective = mtd_lb__weight_at(&span, e, now_ms);
		if (d <= 0 || e->start_ms <= 0) {
			out[i].progress = 1.0;
			continue;
		}
		double f = (double)(now_ms - e->start_ms) / (double)d;
		out[i].progress = f < 0 ? 0 : f > 1 ? 1 : f;
	}
	return out;
}

static void render_endpoints(struct mtd_abuf *b, const struct mtd_runtime *rt)
{
	int64_t now_ms = mtd_wall_ms(), now_ns = mtd_now_ns();
	size_t n_svc = rt->cfg->n_services;
	struct mtd_mx_warm **warm = calloc(n_svc ? n_svc : 1, sizeof(*warm));
	for (size_t si = 0; warm && si < n_svc; si++)
		warm[si] = mtd_metrics_warmups(rt->services[si], now_ms);
	for (int f = 0; f < EP_N; f++) {
		mtd_prom_family(b, ep_families[f].name, ep_families[f].type, ep_families[f].help);
		for (size_t si = 0; si < n_svc; si++) {
			const struct mtd_rt_service *s = rt->services[si];
			const struct mtd_mx_warm *wm = warm ? warm[si] : NULL;
			if ((f == EP_EFFECTIVE || f == EP_WARMUP) && !wm)
				continue; /* out of memory: leave the samples out */
			if ((f == EP_EJECTED || f == EP_EJECTIONS) && !s->cfg->outlier.enabled)
				continue;
			if ((f == EP_HEALTHY || f == EP_HC_FAILURES) && !s->cfg->local->health_check.enabled)
				continue;
			bool orca_family = f >= EP_ORCA_UTIL && f <= EP_ORCA_INVALID;
			if (orca_family && !reads_orca(s))
				continue;
			for (size_t i = 0; i < s->n_eps; i++) {
				const struct mtd_endpoint *e = s->eps[i];
				struct mtd_mx_health h;
				const struct mtd_lb_stats *st = &e->stats;
				const struct mtd_lb_live *live = mtd_lb_stats_view(st);
				const char *v[] = {s->cfg->local->name, mtd_endpoint_text(e)};
				const char *name = ep_families[f].name;
				int64_t a;
				struct mtd_lb_orca_view ov;
				if (orca_family)
					mtd_lb_orca_view(st, &ov);
				switch (f) {
				case EP_PICKS:
					mtd_prom_sample_u64(b, name, NULL, SE, v, 2, atomic_load(&live->picks));
					break;
				case EP_ACTIVE:
					a = atomic_load(&live->active);
					mtd_prom_sample_u64(b, name, NULL, SE, v, 2, a > 0 ? (uint64_t)a : 0);
					break;
				case EP_SUCCESSES:
					mtd_prom_sample_u64(b, name, NULL, SE, v, 2, atomic_load(&live->successes));
					break;
				case EP_FAILURES:
					mtd_prom_sample_u64(b, name, NULL, SE, v, 2, atomic_load(&live->failures));
					break;
				case EP_EWMA:
					mtd_prom_sample(b, name, NULL, SE, v, 2,
					                mtd_lb_stats_ewma_us(st, now_ns, s->cfg->lb.decay_ms) / 1e6);
					break;
				case EP_WEIGHT:
					mtd_prom_sample(b, name, NULL, SE, v, 2, s->lb_eps[i].weight);
					break;
				case EP_EFFECTIVE:
					mtd_prom_sample(b, name, NULL, SE, v, 2, wm[i].effective);
					break;
				case EP_WARMUP:
					mtd_prom_sample(b, name, NULL, SE, v, 2, wm[i].progress);
					break;
				case EP_CONNS:
					a = atomic_load(&mtd_mx_ep_view(&e->mx)->conns_open);
					mtd_prom_sample_u64(b, name, NULL, SE, v, 2, a > 0 ? (uint64_t)a : 0);
					break;
				case EP_CONNECT_FAILURES:
					mtd_prom_sample_u64(b, name, NULL, SE, v, 2,
					                    atomic_load(&mtd_mx_ep_view(&e->mx)->connect_failures));
					break;
				case EP_REACHABLE:
					mtd_prom_sample_u64(b, name, NULL, SE, v, 2,
					                    atomic_load(&mtd_mx_ep_view(&e->mx)->pools_failing) <= 0);
					break;
				case EP_EJECTED:
					mtd_metrics_health(s, i, &h);
					mtd_prom_sample_u64(b, name, NULL, SE, v, 2, h.ejected);
					break;
				case EP_EJECTIONS:
					mtd_metrics_health(s, i, &h);
					mtd_prom_sample_u64(b, name, NULL, SE, v, 2, h.ejections);
					break;
				case EP_HEALTHY:
					mtd_metrics_health(s, i, &h);
					mtd_prom_sample_u64(b, name, NULL, SE, v, 2, h.hc != MTD_MX_HC_NOT_SERVING);
					break;
				case EP_HC_FAILURES:
					mtd_metrics_health(s, i, &h);
					mtd_prom_sample_u64(b, name, NULL, SE, v, 2, h.hc_failures);
					break;
				case EP_ORCA_UTIL:
					mtd_prom_sample(b, name, NULL, SE, v, 2, ov.utilization);
					break;
				case EP_ORCA_CPU:
					mtd_prom_sample(b, name, NULL, SE, v, 2, ov.cpu);
					break;
				case EP_ORCA_APP:
					mtd_prom_sample(b, name, NULL, SE, v, 2, ov.app);
					break;
				case EP_ORCA_MEM:
					mtd_prom_sample(b, name, NULL, SE, v, 2, ov.mem);
					break;
				case EP_ORCA_QPS:
					mtd_prom_sample(b, name, NULL, SE, v, 2, ov.qps);
					break;
				case EP_ORCA_EPS:
					mtd_prom_sample(b, name, NULL, SE, v, 2, ov.eps);
					break;
				case EP_ORCA_WEIGHT:
					mtd_prom_sample(b, name, NULL, SE, v, 2, ov.weight);
					break;
				case EP_ORCA_REPORTS:
					mtd_prom_sample_u64(b, name, NULL, SE, v, 2, ov.reports);
					break;
				case EP_ORCA_INVALID:
					mtd_prom_sample_u64(b, name, NULL, SE, v, 2, ov.invalid);
					break;
				}
			}
		}
	}
	for (size_t si = 0; warm && si < n_svc; si++)
		free(warm[si]);
	free(warm);
}

/* split: each split group of each routing layer with a split,
 * the service's (method "*") and the methods' own. */
static void render_split_layer(struct mtd_abuf *b, const char *svc, const char *method, const struct mtd_lb_layer *l,
                               bool calls)
{
	static const char *const K[] = {"service", "method", "group"};
	struct mtd_lb_split_group g;
	for (size_t k = 0; mtd_lb_layer_split_group(l, k, &g); k++) {
		const char *v[] = {svc, method, g.value};
		if (calls)
			mtd_prom_sample_u64(b, "maitred_split_calls_total", NULL, K, v, 3, g.picks);
		else
			mtd_prom_sample_u64(b, "maitred_split_weight", NULL, K, v, 3, g.current);
	}
}

static void render_split(struct mtd_abuf *b, const struct mtd_runtime *rt)
{
	for (int calls = 1; calls >= 0; calls--) {
		if (calls)
			mtd_prom_family(b, "maitred_split_calls_total", "counter",
			                "split: calls the routing header did not pin, sent to the group (method \"*\": "
			                "the service's split; counted since the last reload).");
		else
			mtd_prom_family(
			        b, "maitred_split_weight", "gauge",
			        "split: the group's weight now: the configured one, 0 while the guard cut it or "
			        "no endpoint has its value.");
		for (size_t si = 0; si < rt->cfg->n_services; si++) {
			const struct mtd_rt_service *s = rt->services[si];
			if (s->layer)
				render_split_layer(b, s->cfg->local->name, "*", s->layer, calls);
			for (size_t m = 0; s->methods && m < s->cfg->n_methods; m++)
				if (s->methods[m].layer)
					render_split_layer(b, s->cfg->local->name, s->cfg->methods[m].name,
					                   s->methods[m].layer, calls);
		}
	}
	mtd_prom_family(b, "maitred_split_guard_cuts_total", "counter",
	                "split.guard: times a group was cut (weight 0 until the next reload) for doing worse than "
	                "the heaviest group.");
	for (const struct mtd_mx_cut *c = mtd_mx_cuts; c; c = c->next) {
		static const char *const K[] = {"service", "method", "group"};
		const char *v[] = {c->service, c->method, c->group};
		mtd_prom_sample_u64(b, "maitred_split_guard_cuts_total", NULL, K, v, 3, c->n);
	}
}

/* Discovery: one entry per (service, source) of the running config; the
 * entries of services a reload removed are left out. */
/* Whether entry d belongs to a service of the running config, of etcd
 * discovery (etcd) or not: the first service of its name decides. */
static bool disc_current_scan(const struct mtd_runtime *rt, const struct mtd_mx_disc *d, bool etcd)
{
	if ((strcmp(d->source, "etcd") == 0) != etcd)
		return false;
	for (size_t i = 0; i < rt->cfg->n_services; i++) {
		const struct mtd_cfg_service *c = &rt->cfg->services[i];
		if (strcmp(c->local->name, d->service) == 0)
			return etcd ? c->local->source == MTD_CFG_SOURCE_ETCD : c->local->source != MTD_CFG_SOURCE_ETCD;
	}
	return false;
}

/* disc_current_scan of every entry, found once for render_discovery's
 * nine loops through the services sorted by name (a scan per entry and
 * loop was O(services x entries): 10,000 services, seconds a scrape). */
struct disc_view {
	const struct mtd_runtime *rt;
	bool *cur; /* per entry, in list order: current for its own kind (etcd or not); NULL = out of memory: scan */
};

static int cmp_service_name(const void *a, const void *b, void *arg)
{
	const struct mtd_cfg_service *sv = arg;
	size_t i = *(const size_t *)a, j = *(const size_t *)b;
	int c = strcmp(sv[i].local->name, sv[j].local->name);
	return c != 0 ? c : i < j ? -1 : i > j;
}

static void disc_view_init(struct disc_view *v, const struct mtd_runtime *rt)
{
	const struct mtd_cfg_service *sv = rt->cfg->services;
	size_t n_sv = rt->cfg->n_services, n_d = 0, *by_name;

	v->rt = rt;
	v->cur = NULL;
	for (const struct mtd_mx_disc *d = mtd_mx_discs; d; d = d->next)
		n_d++;
	by_name = malloc((n_sv ? n_sv : 1) * sizeof(*by_name));
	v->cur = calloc(n_d ? n_d : 1, sizeof(*v->cur));
	if (by_name == NULL || v->cur == NULL) {
		free(by_name);
		free(v->cur);
		v->cur = NULL;
		return;
	}
	for (size_t i = 0; i < n_sv; i++)
		by_name[i] = i;
	qsort_r(by_name, n_sv, sizeof(*by_name), cmp_service_name, (void *)sv);
	size_t k = 0;
	for (const struct mtd_mx_disc *d = mtd_mx_discs; d; d = d->next, k++) {
		/* The first service of the name: the lowest index among equals
		 * sorts first. */
		size_t lo = 0, hi = n_sv;
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;
			if (strcmp(sv[by_name[mid]].local->name, d->service) < 0)
				lo = mid + 1;
			else
				hi = mid;
		}
		if (lo == n_sv || strcmp(sv[by_name[lo]].local->name, d->service) != 0)
			continue;
		bool etcd = strcmp(d->source, "etcd") == 0;
		v->cur[k] = etcd == (sv[by_name[lo]].local->source == MTD_CFG_SOURCE_ETCD);
	}
	free(by_name);
}

/* Entry d, the k-th of the list: disc_current_scan(rt, d, etcd). */
static bool disc_current(const struct disc_view *v, size_t k, const struct mtd_mx_disc *d, bool etcd)
{
	if (v->cur == NULL)
		return disc_current_scan(v->rt, d, etcd);
	return v->cur[k] && (strcmp(d->source, "etcd") == 0) == etcd;
}

static void render_discovery(struct mtd_abuf *b, const struct mtd_runtime *rt)
{
	static const char *const SS[] = {"service", "source"};
	const struct mtd_mx_disc *d;
	struct disc_view view;
	size_t k;

	disc_view_init(&view, rt);
	mtd_prom_family(b, "maitred_discovery_updates_total", "counter",
	                "Registry record changes (puts and deletes, listed or watched) that changed the service's "
	                "endpoint set.");
	for (k = 0, d = mtd_mx_discs; d; d = d->next, k++)
		if (disc_current(&view, k, d, true)) {
			const char *v[] = {d->service, d->source};
			mtd_prom_sample_u64(b, "maitred_discovery_updates_total", NULL, SS, v, 2, d->updates);
		}
	mtd_prom_family(b, "maitred_discovery_connected", "gauge",
	                "1 while the service's link to its etcd cluster is up (listed or watching), else 0.");
	for (k = 0, d = mtd_mx_discs; d; d = d->next, k++)
		if (disc_current(&view, k, d, true)) {
			const char *v[] = {d->service, d->source};
			mtd_prom_sample_u64(b, "maitred_discovery_connected", NULL, SS, v, 2, d->connected);
		}
	mtd_prom_family(b, "maitred_discovery_last_sync_timestamp_seconds", "gauge",
	                "When the service's source last answered well (etcd list or watch, a DNS resolution), "
	                "Unix seconds; absent before the first.");
	for (int etcd = 1; etcd >= 0; etcd--)
		for (k = 0, d = mtd_mx_discs; d; d = d->next, k++)
			if (disc_current(&view, k, d, etcd) && d->last_sync_ms > 0) {
				const char *v[] = {d->service, d->source};
				mtd_prom_sample(b, "maitred_discovery_last_sync_timestamp_seconds", NULL, SS, v, 2,
				                (double)d->last_sync_ms / 1e3);
			}
	mtd_prom_family(b, "maitred_discovery_endpoints", "gauge",
	                "Endpoints in the set the service's source last handed over.");
	for (int etcd = 1; etcd >= 0; etcd--)
		for (k = 0, d = mtd_mx_discs; d; d = d->next, k++)
			if (disc_current(&view, k, d, etcd)) {
				const char *v[] = {d->service, d->source};
				mtd_prom_sample_u64(b, "maitred_discovery_endpoints", NULL, SS, v, 2, d->endpoints);
			}
	mtd_prom_family(b, "maitred_discovery_records_refused_total", "counter",
	                "etcd: registry records refused for the identity they name (tls.server_identity "
	                "FROM_REGISTRY: none, untyped, or matching none of tls.allowed_identities); never used.");
	for (k = 0, d = mtd_mx_discs; d; d = d->next, k++)
		if (disc_current(&view, k, d, true)) {
			const char *v[] = {d->service, d->source};
			mtd_prom_sample_u64(b, "maitred_discovery_records_refused_total", NULL, SS, v, 2, d->refused);
		}
	mtd_prom_family(b, "maitred_dns_resolutions_total", "counter",
	                "Host names looked up for the service (discovery.dns, static host names), one per name per "
	                "round.");
	for (k = 0, d = mtd_mx_discs; d; d = d->next, k++)
		if (disc_current(&view, k, d, false) && strcmp(d->source, "xds") != 0) {
			const char *v[] = {d->service};
			mtd_prom_sample_u64(b, "maitred_dns_resolutions_total", NULL, SS, v, 1, d->resolutions);
		}
	mtd_prom_family(b, "maitred_dns_resolution_failures_total", "counter",
	                "Of those, lookups that gave no address (the name's last addresses stay).");
	for (k = 0, d = mtd_mx_discs; d; d = d->next, k++)
		if (disc_current(&view, k, d, false) && strcmp(d->source, "xds") != 0) {
			const char *v[] = {d->service};
			mtd_prom_sample_u64(b, "maitred_dns_resolution_failures_total", NULL, SS, v, 1,
			                    d->resolve_fails);
		}
	free(view.cur);
}

/* The xDS client's figures: present only while the config has an xds
 * block. */
static void render_xds(struct mtd_abuf *b, const struct mtd_runtime *rt)
{
	static const char *const T[] = {"type"};
	static const char *const types[] = {"cluster", "endpoint", "listener", "route"};
	const struct mtd_mx_xds *x = mtd_metrics_xds();

	if (rt->cfg->xds == NULL)
		return;
	mtd_prom_family(b, "maitred_xds_updates_total", "counter",
	                "xDS responses received from the management server, by resource type (cluster: CDS, "
	                "endpoint: EDS, listener: LDS, route: RDS).");
	/* listener and route only where xds.listener subscribes to them. */
	for (int t = 0; t < (rt->cfg->xds->listener ? 4 : 2); t++) {
		const char *v[] = {types[t]};
		mtd_prom_sample_u64(b, "maitred_xds_updates_total", NULL, T, v, 1, x->updates[t]);
	}
	mtd_prom_family(b, "maitred_xds_acks_total", "counter", "xDS responses accepted (ACK).");
	mtd_prom_sample_u64(b, "maitred_xds_acks_total", NULL, NULL, NULL, 0, x->acks);
	mtd_prom_family(b, "maitred_xds_nacks_total", "counter",
	                "xDS responses refused in whole or in part (NACK; the last good resources stay).");
	mtd_prom_sample_u64(b, "maitred_xds_nacks_total", NULL, NULL, NULL, 0, x->nacks);
	mtd_prom_family(b, "maitred_xds_connected", "gauge", "1 while the connection to the xDS server is up.");
	mtd_prom_sample_u64(b, "maitred_xds_connected", NULL, NULL, NULL, 0, x->connected);
	mtd_prom_family(b, "maitred_xds_rebuilds_pending", "gauge",
	                "Services whose cluster changed and whose snapshot is still to be rebuilt (a few per "
	                "event-loop turn; an EDS update of one of them rebuilds it at once).");
	mtd_prom_sample_u64(b, "maitred_xds_rebuilds_pending", NULL, NULL, NULL, 0, x->rebuilds_pending);
}

/* ORCA out-of-band streams by state (sidecar/control/orca_oob.c): every
 * endpoint whose state is not OFF has one; shown once any does. */
static void render_orca_oob(struct mtd_abuf *b, const struct mtd_runtime *rt)
{
	static const char *const names[] = {"waiting", "open", "unimplemented"};
	uint64_t n[3] = {0};
	const char *k[] = {"state"};

	for (size_t si = 0; si < rt->cfg->n_services; si++) {
		const struct mtd_rt_service *s = rt->services[si];
		for (size_t e = 0; e < s->n_eps; e++) {
			enum mtd_lb_orca_oob st = mtd_lb_orca_oob_state(&s->eps[e]->stats);
			if (st != MTD_LB_ORCA_OOB_OFF)
				n[st - MTD_LB_ORCA_OOB_WAITING]++;
		}
	}
	if (n[0] + n[1] + n[2] == 0)
		return;
	mtd_prom_family(b, "maitred_orca_oob_streams", "gauge",
	                "ORCA out-of-band streams (lb.orca.out_of_band), one per endpoint, by state: open (delivering "
	                "reports), waiting (connecting or backing off), unimplemented (the endpoint has no "
	                "OpenRcaService: its trailers' reports are used).");
	for (int i = 0; i < 3; i++) {
		const char *v[] = {names[i]};
		mtd_prom_sample_u64(b, "maitred_orca_oob_streams", NULL, k, v, 1, n[i]);
	}
}

/* Resident set size from /proc/self/statm (pages). */
static uint64_t rss_bytes(void)
{
	FILE *f = fopen("/proc/self/statm", "re");
	unsigned long long size = 0, res = 0;
	if (!f)
		return 0;
	if (fscanf(f, "%llu %llu", &size, &res) != 2)
		res = 0;
	fclose(f);
	long page = sysconf(_SC_PAGESIZE);
	return (uint64_t)res * (uint64_t)(page > 0 ? page : 4096);
}

static void render_process(struct mtd_abuf *b, const struct mtd_mx_process *p)
{
	int64_t now = mtd_wall_ms();
	const char *k[] = {"version"};
	const char *v[] = {PACKAGE_VERSION};
	mtd_prom_family(b, "maitred_build_info", "gauge", "Always 1; the version in a label.");
	mtd_prom_sample_u64(b, "maitred_build_info", NULL, k, v, 1, 1);
	mtd_prom_family(b, "maitred_workers", "gauge", "Worker threads.");
	mtd_prom_sample_u64(b, "maitred_workers", NULL, NULL, NULL, 0, p->n_workers);
	mtd_prom_family(b, "maitred_uptime_seconds", "gauge", "Seconds since maitred started.");
	mtd_prom_sample(b, "maitred_uptime_seconds", NULL, NULL, NULL, 0, (double)(now - p->start_wall_ms) / 1e3);
	mtd_prom_family(
	        b, "maitred_config_generation", "gauge",
	        "Runtime snapshot generation: 1 at start, one more for each change published (reload, discovery).");
	mtd_prom_sample_u64(b, "maitred_config_generation", NULL, NULL, NULL, 0, p->config_generation);
	mtd_prom_family(b, "maitred_draining", "gauge", "1 while maitred drains (SIGTERM or POST /drain).");
	mtd_prom_sample_u64(b, "maitred_draining", NULL, NULL, NULL, 0, p->draining);
	uint64_t logged = 0;
	for (unsigned w = 0; w < mtd_mx_n_workers; w++)
		logged += ld(&mtd_mx_workers[w].access_logged);
	mtd_prom_family(b, "maitred_access_log_lines_total", "counter", "Access-log lines written.");
	mtd_prom_sample_u64(b, "maitred_access_log_lines_total", NULL, NULL, NULL, 0, logged);
	uint64_t parked = 0;
	for (unsigned w = 0; w < mtd_mx_n_workers; w++)
		parked += ld(&mtd_mx_workers[w].parked);
	mtd_prom_family(b, "maitred_first_endpoints_waiting", "gauge",
	                "Calls waiting now for their service's first endpoint set (discovery.initial_wait; at most "
	                "4096 per worker).");
	mtd_prom_sample_u64(b, "maitred_first_endpoints_waiting", NULL, NULL, NULL, 0, parked);
	mtd_prom_family(b, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
	mtd_prom_sample_u64(b, "process_resident_memory_bytes", NULL, NULL, NULL, 0, rss_bytes());
	mtd_prom_family(b, "process_start_time_seconds", "gauge", "Start time of the process since the Unix epoch.");
	mtd_prom_sample(b, "process_start_time_seconds", NULL, NULL, NULL, 0, (double)p->start_wall_ms / 1e3);
}

/* The span exporter's figures, once it ever ran (control thread: its
 * pointer is the control's). */
static void render_tracing(struct mtd_abuf *b, const struct mtd_runtime *rt)
{
	const struct mtd_tracer *tr = rt->ctl ? rt->ctl->tracer : NULL;
	if (!tr)
		return;
	struct mtd_tracer_figures f;
	mtd_tracer_figures(tr, &f);
	mtd_prom_family(b, "maitred_trace_spans_exported_total", "counter",
	                "Spans the OTLP collector accepted (a 2xx answer).");
	mtd_prom_sample_u64(b, "maitred_trace_spans_exported_total", NULL, NULL, NULL, 0, f.exported);
	mtd_prom_family(b, "maitred_trace_spans_dropped_total", "counter",
	                "Spans never exported, by reason: queue_full (a worker's queue was full), export_failed "
	                "(the collector refused or was unreachable for every try, or tracing was turned off), "
	                "rejected (an error answer not worth a retry), shutdown.");
	for (int i = 0; i < MTD_TRACE_DROP_N; i++) {
		const char *k[] = {"reason"}, *v[] = {mtd_trace_drop_name((enum mtd_trace_drop)i)};
		mtd_prom_sample_u64(b, "maitred_trace_spans_dropped_total", NULL, k, v, 1, f.dropped[i]);
	}
	mtd_prom_family(b, "maitred_trace_exports_total", "counter", "OTLP export requests, by result (ok: 2xx).");
	const char *rk[] = {"result"}, *ok[] = {"ok"}, *failed[] = {"failed"};
	mtd_prom_sample_u64(b, "maitred_trace_exports_total", NULL, rk, ok, 1, f.exports_ok);
	mtd_prom_sample_u64(b, "maitred_trace_exports_total", NULL, rk, failed, 1, f.exports_failed);
}

void mtd_metrics_render(struct mtd_abuf *b, const struct mtd_runtime *rt, const struct mtd_mx_process *proc)
{
	size_t n = 0;
	struct agg *a = aggregate(&n);
	render_calls(b, a, n);
	agg_free(a, n);
	render_endpoints(b, rt);
	render_split(b, rt);
	render_discovery(b, rt);
	render_xds(b, rt);
	render_orca_oob(b, rt);
	mtd_mesh_render(b, rt->cfg);
	render_tracing(b, rt);
	render_process(b, proc);
}
