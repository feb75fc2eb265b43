/* Call figures per worker (single writer) and discovery's figures: the
 * tables, filled on the call path and read by prometheus.c. The threading
 * contract is at the top of metrics.h. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/hash.h"
#include "sidecar/call/attempt.h"
#include "sidecar/call/headers.h"
#include "sidecar/ops/access_log.h"
#include "sidecar/ops/history.h"
#include "sidecar/ops/metrics-int.h"
#include "sidecar/ops/metrics.h"
#include "sidecar/turn.h"

const double mtd_mx_lat_bounds_s[MTD_MX_LAT_BUCKETS] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                        0.1,    0.25,  0.5,    1.0,   2.5,  5.0,   10.0};

const char *const mtd_mx_circuit_names[MTD_MX_CIRCUIT_N] = {
        [MTD_MX_CIRCUIT_MAX_CALLS] = "max_calls",
        [MTD_MX_CIRCUIT_MAX_PENDING] = "max_pending",
        [MTD_MX_CIRCUIT_MAX_CALLS_PER_ENDPOINT] = "max_calls_per_endpoint",
};

/* The tables (metrics-int.h). */
struct mtd_mx_worker *mtd_mx_workers;
unsigned mtd_mx_n_workers;
struct mtd_mx_disc *mtd_mx_discs;
static struct mtd_mx_xds mx_xds;

struct mtd_mx_xds *mtd_metrics_xds(void)
{
	return &mx_xds;
}
struct mtd_mx_cut *mtd_mx_cuts;

int mtd_metrics_init(unsigned n_workers, const struct mtd_cfg *cfg, char *err, size_t errlen)
{
	mtd_mx_workers = calloc(n_workers ? n_workers : 1, sizeof(*mtd_mx_workers));
	if (!mtd_mx_workers) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	mtd_mx_n_workers = n_workers;
	int fd, rc = mtd_access_log_open(cfg, &fd, err, errlen);
	if (rc < 0) {
		mtd_metrics_fini();
		return rc;
	}
	mtd_access_log_apply(cfg, fd);
	return 0;
}

static void method_free(struct mtd_mx_method *m)
{
	if (m) {
		free(m->hedge_lat);
		free(m->path);
		free(m);
	}
}

void mtd_metrics_fini(void)
{
	for (unsigned w = 0; w < mtd_mx_n_workers; w++) {
		for (size_t i = 0; i < MTD_MX_SLOTS; i++)
			method_free(atomic_load_explicit(&mtd_mx_workers[w].slots[i], memory_order_relaxed));
		method_free(atomic_load_explicit(&mtd_mx_workers[w].other, memory_order_relaxed));
	}
	free(mtd_mx_workers);
	mtd_mx_workers = NULL;
	mtd_mx_n_workers = 0;
	while (mtd_mx_discs) {
		struct mtd_mx_disc *d = mtd_mx_discs;
		mtd_mx_discs = d->next;
		free(d->service);
		free(d);
	}
	mtd_history_fini();
	while (mtd_mx_cuts) {
		struct mtd_mx_cut *c = mtd_mx_cuts;
		mtd_mx_cuts = c->next;
		free(c->service);
		free(c->method);
		free(c->group);
		free(c);
	}
	mtd_access_log_close();
}

struct mtd_mx_disc *mtd_metrics_disc(const char *service, const char *source)
{
	for (struct mtd_mx_disc *d = mtd_mx_discs; d; d = d->next)
		if (strcmp(d->service, service) == 0 && strcmp(d->source, source) == 0)
			return d;
	struct mtd_mx_disc *d = calloc(1, sizeof(*d));
	if (!d || !(d->service = strdup(service))) {
		free(d);
		return NULL;
	}
	d->source = source;
	d->next = mtd_mx_discs;
	mtd_mx_discs = d;
	return d;
}

void mtd_metrics_guard_cut(const char *service, const char *method, const char *group)
{
	for (struct mtd_mx_cut *c = mtd_mx_cuts; c; c = c->next)
		if (strcmp(c->service, service) == 0 && strcmp(c->method, method) == 0 &&
		    strcmp(c->group, group) == 0) {
			c->n++;
			return;
		}
	struct mtd_mx_cut *c = calloc(1, sizeof(*c));
	if (!c || !(c->service = strdup(service)) || !(c->method = strdup(method)) || !(c->group = strdup(group))) {
		if (c) {
			free(c->service);
			free(c->method);
		}
		free(c);
		return; /* out of memory: this cut goes uncounted (it is logged) */
	}
	c->n = 1;
	c->next = mtd_mx_cuts;
	mtd_mx_cuts = c;
}

const struct mtd_mx_disc *mtd_metrics_disc_find(const char *service)
{
	for (const struct mtd_mx_disc *d = mtd_mx_discs; d; d = d->next)
		if (strcmp(d->service, service) == 0)
			return d;
	return NULL;
}

/* An entry and its place in the list (the newest first: the first of
 * equal names is mtd_metrics_disc_find's). */
struct mtd_mx_disc_ref {
	const struct mtd_mx_disc *d;
	size_t k;
};

static int cmp_disc_ref(const void *a, const void *b)
{
	const struct mtd_mx_disc_ref *x = a, *y = b;
	int c = strcmp(x->d->service, y->d->service);
	return c != 0 ? c : x->k < y->k ? -1 : x->k > y->k;
}

int mtd_metrics_disc_index(struct mtd_mx_disc_index *ix)
{
	size_t n = 0;
	*ix = (struct mtd_mx_disc_index){0};
	for (const struct mtd_mx_disc *d = mtd_mx_discs; d; d = d->next)
		n++;
	if (n == 0)
		return 0;
	ix->v = malloc(n * sizeof(*ix->v));
	if (ix->v == NULL)
		return -ENOMEM;
	for (const struct mtd_mx_disc *d = mtd_mx_discs; d; d = d->next, ix->n++)
		ix->v[ix->n] = (struct mtd_mx_disc_ref){d, ix->n};
	qsort(ix->v, ix->n, sizeof(*ix->v), cmp_disc_ref);
	return 0;
}

const struct mtd_mx_disc *mtd_metrics_disc_lookup(const struct mtd_mx_disc_index *ix, const char *service)
{
	if (ix->v == NULL)
		return mtd_metrics_disc_find(service);
	size_t lo = 0, hi = ix->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (strcmp(ix->v[mid].d->service, service) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < ix->n && strcmp(ix->v[lo].d->service, service) == 0 ? ix->v[lo].d : NULL;
}

void mtd_metrics_disc_index_free(struct mtd_mx_disc_index *ix)
{
	free(ix->v);
	*ix = (struct mtd_mx_disc_index){0};
}

/* ---- call path (worker threads) --------------------------------------- */

static struct mtd_mx_method *method_new(const char *path, size_t len, size_t svc_len, uint64_t h)
{
	struct mtd_mx_method *m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	m->path = malloc(len + 1);
	if (!m->path) {
		free(m);
		return NULL;
	}
	memcpy(m->path, path, len);
	m->path[len] = '\0';
	m->path_len = len;
	m->svc_len = svc_len;
	m->hash = h;
	return m;
}

static struct mtd_mx_method *lookup(struct mtd_mx_worker *mw, const char *path, size_t len, size_t svc_len)
{
	uint64_t h = mtd_fnv1a(MTD_FNV1A_START, path, len);
	size_t i = (size_t)h & (MTD_MX_SLOTS - 1);
	for (;;) {
		/* The owner reads its own slots: relaxed is enough. */
		struct mtd_mx_method *m = atomic_load_explicit(&mw->slots[i], memory_order_relaxed);
		if (!m)
			break;
		if (m->hash == h && m->path_len == len && memcmp(m->path, path, len) == 0)
			return m;
		i = (i + 1) & (MTD_MX_SLOTS - 1);
	}
	if (mw->n_paths < MTD_MX_MAX_PATHS) {
		struct mtd_mx_method *m = method_new(path, len, svc_len, h);
		if (m) {
			mw->n_paths++;
			/* Publish a complete entry (metrics.h: release / acquire). */
			atomic_store_explicit(&mw->slots[i], m, memory_order_release);
			return m;
		}
	}
	/* Too many distinct paths (or no memory): one shared bucket, so a
	 * client inventing method names cannot grow maitred's memory. */
	struct mtd_mx_method *o = atomic_load_explicit(&mw->other, memory_order_relaxed);
	if (!o) {
		o = method_new("/(other)/(other)", 16, 7, 0);
		if (o)
			atomic_store_explicit(&mw->other, o, memory_order_release);
	}
	return o;
}

struct mtd_mx_method *mtd_metrics_call_routed(unsigned worker, const char *path, size_t len, size_t svc_len)
{
	if (worker >= mtd_mx_n_workers)
		return NULL; /* no tables (a harness that never called init) */
	struct mtd_mx_method *m = lookup(&mtd_mx_workers[worker], path, len, svc_len);
	if (m)
		mtd_mx_add(&m->started, 1);
	return m;
}

static int code_of(const struct mtd_headers *h)
{
	nghttp2_nv buf;
	const nghttp2_nv *s = mtd_headers_find(h, "grpc-status", &buf);
	if (!s)
		return -1;
	int v = mtd_grpc_status_parse(s->value, s->valuelen);
	return v >= 0 && v < MTD_MX_CODES ? v : MTD_GRPC_UNKNOWN;
}

/* The status the client saw: the trailers (the upstream's or maitred's
 * own), else a Trailers-Only response; none means the client went away
 * first (CANCELLED). */
int mtd_metrics_call_code(const struct mtd_call *call)
{
	int c = code_of(&call->resp_trailers);
	if (c < 0)
		c = code_of(&call->resp_hdrs);
	return c < 0 ? MTD_GRPC_CANCELLED : c;
}

static size_t lat_bucket(int64_t ns)
{
	double s = (double)ns / 1e9;
	size_t i = 0;
	while (i < MTD_MX_LAT_BUCKETS && s > mtd_mx_lat_bounds_s[i])
		i++;
	return i;
}

void mtd_metrics_fault_decision(struct mtd_call *call, const struct mtd_fault_decision *d)
{
	struct mtd_mx_method *m = call->mx;
	if (!m)
		return;
	if (d->action == MTD_FAULT_RETRY)
		mtd_mx_add(d->transparent ? &m->transparent_retries : &m->retries, 1);
	else if (d->action == MTD_FAULT_SAFE_OK)
		mtd_mx_add(&m->failsafe, 1);
	else if (d->action == MTD_FAULT_FALLBACK)
		mtd_mx_add(&m->fallback, 1);
	if (d->budget_exhausted)
		mtd_mx_add(&m->budget_exhausted, 1);
	if (d->pushback_stop)
		mtd_mx_add(&m->pushback_stops, 1);
}

void mtd_metrics_circuit_rejected(struct mtd_call *call, enum mtd_mx_circuit limit)
{
	if (call->mx && limit < MTD_MX_CIRCUIT_N)
		mtd_mx_add(&call->mx->circuit_rejected[limit], 1);
}

void mtd_metrics_failback(struct mtd_call *call, bool dropped)
{
	if (call->mx)
		mtd_mx_add(dropped ? &call->mx->failback_dropped : &call->mx->failback_resent, 1);
}

void mtd_metrics_policy(struct mtd_call *call, enum mtd_mx_policy what)
{
	if (call->mx && what < MTD_MX_POLICY_N)
		mtd_mx_add(&call->mx->policy[what], 1);
}

void mtd_metrics_parked(unsigned worker, uint32_t n)
{
	if (worker < mtd_mx_n_workers)
		atomic_store_explicit(&mtd_mx_workers[worker].parked, n, memory_order_relaxed);
}

/* FORKING's hedges. */
void mtd_metrics_hedge_started(struct mtd_call *call)
{
	if (call->mx)
		mtd_mx_add(&call->mx->hedges, 1);
}

void mtd_metrics_hedge_won(struct mtd_call *call)
{
	if (call->mx)
		mtd_mx_add(&call->mx->hedge_wins, 1);
}

static struct mtd_fault_lat *hedge_lat(struct mtd_mx_method *m)
{
	if (!m->hedge_lat) {
		/* Once per :path per worker, at its first AUTO call. */
		m->hedge_lat = calloc(1, sizeof(*m->hedge_lat));
		if (m->hedge_lat)
			atomic_store_explicit(&m->hedge_delay_ms, MTD_FAULT_HEDGE_AUTO_INITIAL_MS,
			                      memory_order_relaxed);
	}
	return m->hedge_lat;
}

int64_t mtd_metrics_hedge_delay_ms(struct mtd_call *call)
{
	struct mtd_mx_method *m = call->mx;
	if (!m || !hedge_lat(m))
		return MTD_FAULT_HEDGE_AUTO_INITIAL_MS;
	/* The cached value (below): no histogram scan per call. */
	return (int64_t)atomic_load_explicit(&m->hedge_delay_ms, memory_order_relaxed);
}

void mtd_metrics_hedge_sample(struct mtd_call *call, int64_t us)
{
	struct mtd_mx_method *m = call->mx;
	struct mtd_fault_lat *h = m ? hedge_lat(m) : NULL;
	if (!h)
		return;
	mtd_fault_lat_add(h, us);
	/* Recomputed every 16th answer (and each one until there are enough):
	 * a scan of the buckets, not per call. */
	if (h->seen <= MTD_FAULT_LAT_MIN_SAMPLES || h->seen % 16 == 0)
		atomic_store_explicit(&m->hedge_delay_ms, (uint64_t)mtd_fault_hedge_auto_ms(h), memory_order_relaxed);
}

void mtd_metrics_call_end(struct mtd_call *call)
{
	if (call->w->id >= mtd_mx_n_workers)
		return;
	struct mtd_mx_worker *mw = &mtd_mx_workers[call->w->id];
	int code = mtd_metrics_call_code(call);
	int64_t dur = mtd_turn_now_ns(call->w) - call->start_ns;
	struct mtd_mx_method *m = call->mx;
	if (dur < 0)
		dur = 0;
	if (m) {
		mtd_mx_add(&m->by_code[code], 1);
		mtd_mx_add(&m->lat_bucket[lat_bucket(dur)], 1);
		mtd_mx_add(&m->lat_sum_ns, (uint64_t)dur);
		mtd_mx_add(&m->bytes_in, call->bytes_in);
		mtd_mx_add(&m->bytes_out, call->bytes_out);
	} else {
		mtd_mx_add(&mw->unrouted_by_code[code], 1);
	}
	if (!mtd_access_log_due(call))
		return;
	if (m && m != atomic_load_explicit(&mw->other, memory_order_relaxed))
		mtd_access_log_line(call, m->path, m->svc_len, m->path_len, code, dur);
	else
		mtd_access_log_line(call, "/", 0, 1, code, dur); /* service and method "-" */
	mtd_mx_add(&mw->access_logged, 1);
}
