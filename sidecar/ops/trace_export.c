/* The span exporter: see trace_export.h.
 *
 * The exporter thread runs an event loop of its own: a tick every
 * TICK_MS drains the workers' rings into the batch, sends the batch when
 * it is half full or a second old, and sends a batch waiting for its retry
 * when its time has come. One POST is in flight at a time (libevent's
 * evhttp client; over TLS on a bufferevent_openssl, HTTP/1.1 by ALPN), and
 * for at most the target's timeout, from the name's lookup to the answer's
 * last byte (evhttp's own timeout is per read: a collector answering a
 * byte at a time never reached it). Names are resolved with evdns on this
 * thread's loop (resolv.conf, the hosts file), never by a blocking
 * getaddrinfo: a resolver that does not answer delays exports, never a
 * call, and never the stop. */
#include "config.h"

#include "sidecar/ops/trace_export.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/http.h>

#include "config/config.h"
#include "core/clock.h"
#include "core/log.h"
#include "sidecar/io/transport.h"
#include "trace/otlp.h"

#define TICK_MS          200
#define SEND_AFTER_MS    1000   /* a batch that is not half full waits at most this */
#define BACKOFF_FIRST_MS 1000
#define BACKOFF_MAX_MS   30000
#define LOG_EVERY_NS     (60 * 1000000000LL)
#define MAX_ANSWER_BODY  (1u << 20)

static const char *const drop_names[MTD_TRACE_DROP_N] = {"queue_full", "export_failed", "rejected", "shutdown"};

const char *mtd_trace_drop_name(enum mtd_trace_drop r)
{
	return r < MTD_TRACE_DROP_N ? drop_names[r] : "unknown";
}

struct mtd_trace_target {
	char *host, *path;
	char *host_header; /* "host:port", "[v6]:port" */
	uint16_t port;
	struct ssl_ctx_st *ssl_ctx; /* https: the collector's context; NULL: plain http */
	char *server_name;          /* SNI and the name checked */
	char **hn, **hv;
	size_t nh;
	int64_t timeout_ms;
	char *service_name;
	char *endpoint; /* for messages */
	struct mtd_trace_target *retired_next; /* the exporter's list of old targets */
};

/* One worker's spans: that worker writes tail and `full`, the exporter
 * head. Each on a cache line of its own. */
struct ring {
	_Atomic uint32_t tail;
	_Atomic uint64_t full;
	char pad1[64 - sizeof(uint32_t) - sizeof(uint64_t)];
	_Atomic uint32_t head;
	char pad2[64 - sizeof(uint32_t)];
	struct mtd_span *slot; /* MTD_TRACE_RING of them */
};

struct mtd_tracer {
	pthread_t thread;
	struct event_base *base;
	struct event *tick, *wake;
	struct event *deadline;  /* the request in flight's timeout */
	struct evdns_base *dns;  /* the collector's name, looked up on this loop */
	struct ring *rings;
	unsigned n_rings;

	pthread_mutex_t mu; /* guards next, next_set, stopping */
	struct mtd_trace_target *next;
	bool next_set, stopping;

	/* Exporter thread only. */
	struct mtd_trace_target *tgt;      /* where new batches go */
	struct mtd_trace_target *body_tgt; /* where the pending body was sent (tgt, or an old one) */
	struct evhttp_connection *conn;    /* to body_tgt / tgt; NULL: none yet */
	struct mtd_trace_target *conn_tgt;
	struct mtd_trace_target *retired;  /* replaced, freed once nothing refers to them */
	bool conn_dead;                    /* closed: made anew before the next request */
	struct mtd_span *batch;
	size_t n_batch;
	int64_t batch_since_ns;
	uint8_t *body; /* an encoded batch waiting to be sent, or in flight */
	size_t body_len, body_spans;
	bool in_flight;
	int answer_code; /* the status line of the answer in flight, once read; 0 before */
	unsigned tries;
	int64_t retry_at_ns, backoff_ms;
	int64_t last_log_ns;
	uint64_t logged_drops;
	char last_err[160];

	_Atomic uint64_t exported, dropped[MTD_TRACE_DROP_N], exports_ok, exports_failed;
};

/* ---- targets (control thread) -------------------------------------------- */

void mtd_trace_target_free(struct mtd_trace_target *t)
{
	if (!t)
		return;
	free(t->host);
	free(t->path);
	free(t->host_header);
	if (t->ssl_ctx)
		mtd_tls_ctx_free(t->ssl_ctx);
	free(t->server_name);
	for (size_t i = 0; i < t->nh; i++) {
		free(t->hn[i]);
		free(t->hv[i]);
	}
	free(t->hn);
	free(t->hv);
	free(t->service_name);
	free(t->endpoint);
	free(t);
}

/* "host:port", an IPv6 address in brackets. */
static char *host_port(const char *host, unsigned port)
{
	char *s = NULL;
	int n = strchr(host, ':') ? asprintf(&s, "[%s]:%u", host, port) : asprintf(&s, "%s:%u", host, port);
	return n < 0 ? NULL : s;
}

struct mtd_trace_target *mtd_trace_target_new(const struct mtd_cfg_tracing *cfg, char *err, size_t errlen)
{
	struct mtd_trace_target *t = calloc(1, sizeof(*t));
	if (!t)
		goto oom;
	t->host = strdup(cfg->host);
	t->path = strdup(cfg->path);
	t->endpoint = strdup(cfg->endpoint);
	t->service_name = strdup(cfg->service_name);
	t->host_header = host_port(cfg->host, cfg->port);
	t->port = cfg->port;
	t->timeout_ms = cfg->timeout_ms;
	if (!t->host || !t->path || !t->endpoint || !t->service_name || !t->host_header)
		goto oom;
	if (cfg->n_headers) {
		t->hn = calloc(cfg->n_headers, sizeof(char *));
		t->hv = calloc(cfg->n_headers, sizeof(char *));
		if (!t->hn || !t->hv)
			goto oom;
		for (; t->nh < cfg->n_headers; t->nh++) {
			t->hn[t->nh] = strdup(cfg->header_names[t->nh]);
			t->hv[t->nh] = strdup(cfg->header_values[t->nh]);
			if (!t->hn[t->nh] || !t->hv[t->nh]) {
				t->nh++;
				goto oom;
			}
		}
	}
	if (cfg->https) {
		t->ssl_ctx = mtd_tls_http1_client_ctx_new(cfg->tls, err, errlen);
		if (!t->ssl_ctx) {
			mtd_trace_target_free(t);
			return NULL;
		}
		t->server_name = strdup(cfg->tls->server_name ? cfg->tls->server_name : cfg->host);
		if (!t->server_name)
			goto oom;
	}
	return t;
oom:
	mtd_trace_target_free(t);
	snprintf(err, errlen, "out of memory");
	return NULL;
}

/* ---- the rings ---------------------------------------------------------- */

bool mtd_tracer_submit(struct mtd_tracer *tr, unsigned worker, const struct mtd_span *s)
{
	struct ring *r = &tr->rings[worker];
	uint32_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
	uint32_t head = atomic_load_explicit(&r->head, memory_order_acquire);
	if (tail - head >= MTD_TRACE_RING) {
		atomic_store_explicit(&r->full, atomic_load_explicit(&r->full, memory_order_relaxed) + 1,
		                      memory_order_relaxed);
		return false;
	}
	memcpy(&r->slot[tail % MTD_TRACE_RING], s, sizeof(*s));
	atomic_store_explicit(&r->tail, tail + 1, memory_order_release);
	/* Half full: the exporter drains now, not at its next tick (a tick
	 * alone drains at most a ring a tick: 1,280 spans a second). Once per
	 * filling, so the wake-up's cost is not a span's. */
	if (tail + 1 - head == MTD_TRACE_RING / 2)
		event_active(tr->wake, EV_READ, 0);
	return true;
}

/* Take what the rings hold into the batch, as far as it has room. */
static void drain(struct mtd_tracer *tr)
{
	for (unsigned i = 0; i < tr->n_rings && tr->n_batch < MTD_TRACE_BATCH; i++) {
		struct ring *r = &tr->rings[i];
		uint32_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
		uint32_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
		while (head != tail && tr->n_batch < MTD_TRACE_BATCH) {
			if (tr->n_batch == 0)
				tr->batch_since_ns = mtd_now_ns();
			memcpy(&tr->batch[tr->n_batch++], &r->slot[head % MTD_TRACE_RING], sizeof(struct mtd_span));
			head++;
		}
		atomic_store_explicit(&r->head, head, memory_order_release);
	}
}

static void count_drop(struct mtd_tracer *tr, enum mtd_trace_drop why, uint64_t n)
{
	atomic_fetch_add_explicit(&tr->dropped[why], n, memory_order_relaxed);
}

/* ---- sending (exporter thread) ------------------------------------------ */

static void drop_body(struct mtd_tracer *tr, enum mtd_trace_drop why)
{
	if (tr->body)
		count_drop(tr, why, tr->body_spans);
	free(tr->body);
	tr->body = NULL;
	tr->body_len = tr->body_spans = 0;
	tr->tries = 0;
	tr->body_tgt = NULL;
}

static void conn_closed(struct evhttp_connection *conn, void *arg)
{
	struct mtd_tracer *tr = arg;
	(void)conn;
	tr->conn_dead = true;
}

/* Drop the connection unless a request is on it (then at the next tick). */
static void conn_release(struct mtd_tracer *tr)
{
	if (tr->conn && !tr->in_flight) {
		evhttp_connection_free(tr->conn);
		tr->conn = NULL;
		tr->conn_tgt = NULL;
		tr->conn_dead = false;
	}
}

static struct evhttp_connection *conn_for(struct mtd_tracer *tr, struct mtd_trace_target *t)
{
	if (tr->conn && (tr->conn_dead || tr->conn_tgt != t))
		conn_release(tr);
	if (tr->conn)
		return tr->conn;
	struct evhttp_connection *c;
	if (t->ssl_ctx) {
		struct ssl_st *ssl = mtd_tls_client_ssl_new(t->ssl_ctx, t->server_name);
		if (!ssl)
			return NULL;
		struct bufferevent *bev = bufferevent_openssl_socket_new(tr->base, -1, ssl, BUFFEREVENT_SSL_CONNECTING,
		                                                         BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
		if (!bev) {
			mtd_tls_ssl_free(ssl);
			return NULL;
		}
		bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
		c = evhttp_connection_base_bufferevent_new(tr->base, tr->dns, bev, t->host, t->port);
		if (!c) {
			bufferevent_free(bev);
			return NULL;
		}
	} else {
		c = evhttp_connection_base_new(tr->base, tr->dns, t->host, t->port);
		if (!c)
			return NULL;
	}
	struct timeval tv = {.tv_sec = t->timeout_ms / 1000, .tv_usec = (t->timeout_ms % 1000) * 1000};
	evhttp_connection_set_timeout_tv(c, &tv);
	evhttp_connection_set_retries(c, 0);
	evhttp_connection_set_max_body_size(c, MAX_ANSWER_BODY);
	evhttp_connection_set_max_headers_size(c, 16384);
	evhttp_connection_set_closecb(c, conn_closed, tr);
	tr->conn = c;
	tr->conn_tgt = t;
	tr->conn_dead = false;
	return c;
}

/* The delay a refusal asks for: Retry-After in seconds (an HTTP date is
 * read as "no figure"), else the backoff; at most BACKOFF_MAX_MS. */
static int64_t retry_delay_ms(struct mtd_tracer *tr, const char *retry_after)
{
	int64_t ms = tr->backoff_ms;
	if (retry_after) {
		char *end;
		long v = strtol(retry_after, &end, 10);
		if (end != retry_after && *end == '\0' && v >= 0)
			ms = v > BACKOFF_MAX_MS / 1000 ? BACKOFF_MAX_MS : v * 1000;
	}
	tr->backoff_ms = tr->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : tr->backoff_ms * 2;
	return ms;
}

static void answered(struct evhttp_request *req, void *arg)
{
	struct mtd_tracer *tr = arg;
	evtimer_del(tr->deadline);
	tr->in_flight = false;
	/* No request: the answer did not come whole (cut, too big, or the
	 * timeout). A 2xx status line read before that is the collector's
	 * word that it took the spans: sending them again would duplicate
	 * them. */
	int code = req ? evhttp_request_get_response_code(req) : tr->answer_code;
	if (!req)
		tr->conn_dead = true;
	if (code >= 200 && code < 300) {
		atomic_fetch_add_explicit(&tr->exported, tr->body_spans, memory_order_relaxed);
		atomic_fetch_add_explicit(&tr->exports_ok, 1, memory_order_relaxed);
		free(tr->body);
		tr->body = NULL;
		tr->body_len = tr->body_spans = 0;
		tr->tries = 0;
		tr->backoff_ms = BACKOFF_FIRST_MS;
		tr->body_tgt = NULL;
		/* The next batch may be waiting: send it now, not at the tick. */
		event_active(tr->wake, EV_READ, 0);
		return;
	}
	atomic_fetch_add_explicit(&tr->exports_failed, 1, memory_order_relaxed);
	const char *where = tr->body_tgt ? tr->body_tgt->endpoint : "?";
	if (!req) {
		snprintf(tr->last_err, sizeof(tr->last_err), "%s: no answer (refused, unreachable or timed out)", where);
	} else {
		snprintf(tr->last_err, sizeof(tr->last_err), "%s: HTTP %d", where, code);
	}
	if (code != 0 && code != 429 && code != 502 && code != 503 && code != 504) {
		drop_body(tr, MTD_TRACE_DROP_REJECTED);
		return;
	}
	if (++tr->tries >= MTD_TRACE_TRIES) {
		drop_body(tr, MTD_TRACE_DROP_EXPORT_FAILED);
		return;
	}
	const char *ra = req ? evhttp_find_header(evhttp_request_get_input_headers(req), "Retry-After") : NULL;
	tr->retry_at_ns = mtd_now_ns() + retry_delay_ms(tr, ra) * 1000000;
}

/* The request in flight outlived the timeout (a lookup, a connect, or an
 * answer that trickles in): its connection goes, with it the request
 * (evhttp frees it without its callback), and it counts as no answer. */
static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_tracer *tr = arg;
	(void)fd;
	(void)what;
	if (!tr->in_flight || !tr->conn)
		return;
	evhttp_connection_free(tr->conn);
	tr->conn = NULL;
	tr->conn_tgt = NULL;
	tr->conn_dead = false;
	answered(NULL, tr);
}

static int got_status(struct evhttp_request *req, void *arg)
{
	struct mtd_tracer *tr = arg;
	tr->answer_code = evhttp_request_get_response_code(req);
	return 0;
}

static void send_body(struct mtd_tracer *tr)
{
	struct mtd_trace_target *t = tr->body_tgt;
	struct evhttp_connection *c = conn_for(tr, t);
	struct evhttp_request *req = c ? evhttp_request_new(answered, tr) : NULL;
	if (!req) {
		snprintf(tr->last_err, sizeof(tr->last_err), "%s: cannot make a connection or request (out of memory?)",
		         t->endpoint);
		drop_body(tr, MTD_TRACE_DROP_EXPORT_FAILED);
		return;
	}
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);
	evhttp_add_header(h, "Host", t->host_header);
	evhttp_add_header(h, "Content-Type", "application/x-protobuf");
	evhttp_add_header(h, "User-Agent", "maitred/" PACKAGE_VERSION);
	for (size_t i = 0; i < t->nh; i++)
		evhttp_add_header(h, t->hn[i], t->hv[i]);
	tr->answer_code = 0;
	evhttp_request_set_header_cb(req, got_status);
	bool queued = evbuffer_add(evhttp_request_get_output_buffer(req), tr->body, tr->body_len) == 0;
	if (!queued)
		evhttp_request_free(req); /* never handed to the connection: ours */
	if (!queued || evhttp_make_request(c, req, EVHTTP_REQ_POST, t->path) != 0) {
		/* (A request evhttp_make_request refused is evhttp's to free.) */
		snprintf(tr->last_err, sizeof(tr->last_err), "%s: cannot send (out of memory?)", t->endpoint);
		drop_body(tr, MTD_TRACE_DROP_EXPORT_FAILED);
		tr->conn_dead = true;
		return;
	}
	tr->in_flight = true;
	struct timeval tv = {.tv_sec = t->timeout_ms / 1000, .tv_usec = (t->timeout_ms % 1000) * 1000};
	evtimer_add(tr->deadline, &tv);
}

static void encode_batch(struct mtd_tracer *tr)
{
	static const char *const keys[] = {"telemetry.sdk.name"};
	static const char *const values[] = {"maitred"};
	struct mtd_otlp_resource res = {.service_name = tr->tgt->service_name, .keys = keys, .values = values,
	                                .n = 1, .scope_version = PACKAGE_VERSION};
	uint8_t *out;
	size_t len = mtd_otlp_encode(&res, tr->batch, tr->n_batch, &out);
	if (len == 0) {
		count_drop(tr, MTD_TRACE_DROP_EXPORT_FAILED, tr->n_batch);
		snprintf(tr->last_err, sizeof(tr->last_err), "out of memory encoding %zu spans", tr->n_batch);
	} else {
		tr->body = out;
		tr->body_len = len;
		tr->body_spans = tr->n_batch;
		tr->body_tgt = tr->tgt;
		tr->tries = 0;
		tr->retry_at_ns = 0;
	}
	tr->n_batch = 0;
}

static void take_target(struct mtd_tracer *tr)
{
	pthread_mutex_lock(&tr->mu);
	bool set = tr->next_set;
	struct mtd_trace_target *t = tr->next;
	tr->next = NULL;
	tr->next_set = false;
	pthread_mutex_unlock(&tr->mu);
	if (!set)
		return;
	if (tr->tgt) {
		tr->tgt->retired_next = tr->retired;
		tr->retired = tr->tgt;
	}
	tr->tgt = t;
}

/* Old targets nothing refers to any more (a request in flight keeps its
 * own, and its connection, until its answer). */
static void free_retired(struct mtd_tracer *tr)
{
	if (tr->conn && !tr->in_flight && tr->conn_tgt != tr->tgt)
		conn_release(tr);
	for (struct mtd_trace_target **p = &tr->retired; *p;) {
		struct mtd_trace_target *r = *p;
		if (r != tr->body_tgt && r != tr->conn_tgt) {
			*p = r->retired_next;
			mtd_trace_target_free(r);
		} else {
			p = &r->retired_next;
		}
	}
}

static void log_drops(struct mtd_tracer *tr, int64_t now)
{
	if (now - tr->last_log_ns < LOG_EVERY_NS)
		return;
	uint64_t d[MTD_TRACE_DROP_N], total = 0;
	for (int i = 0; i < MTD_TRACE_DROP_N; i++) {
		d[i] = atomic_load_explicit(&tr->dropped[i], memory_order_relaxed);
		if (i == MTD_TRACE_DROP_QUEUE_FULL)
			for (unsigned k = 0; k < tr->n_rings; k++)
				d[i] += atomic_load_explicit(&tr->rings[k].full, memory_order_relaxed);
		total += d[i];
	}
	if (total == tr->logged_drops)
		return;
	MTD_WARN("tracing: %llu spans dropped in the last minute (queue_full %llu, export_failed %llu, rejected %llu)%s%s",
	         (unsigned long long)(total - tr->logged_drops), (unsigned long long)d[0], (unsigned long long)d[1],
	         (unsigned long long)d[2], tr->last_err[0] ? "; last error: " : "", tr->last_err);
	tr->logged_drops = total;
	tr->last_log_ns = now;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_tracer *tr = arg;
	(void)fd;
	(void)what;
	take_target(tr);
	/* A batch waiting for its retry goes where batches go now; with
	 * tracing off, nowhere. */
	if (tr->body && !tr->in_flight && tr->body_tgt != tr->tgt) {
		if (tr->tgt)
			tr->body_tgt = tr->tgt;
		else
			drop_body(tr, MTD_TRACE_DROP_EXPORT_FAILED);
	}
	if (tr->conn_dead && !tr->in_flight)
		conn_release(tr);
	free_retired(tr);
	drain(tr);
	int64_t now = mtd_now_ns();
	if (tr->n_batch && !tr->tgt) {
		count_drop(tr, MTD_TRACE_DROP_EXPORT_FAILED, tr->n_batch);
		tr->n_batch = 0;
	}
	if (!tr->in_flight && !tr->body && tr->n_batch &&
	    (tr->n_batch >= MTD_TRACE_BATCH / 2 || now - tr->batch_since_ns >= SEND_AFTER_MS * 1000000LL))
		encode_batch(tr);
	if (!tr->in_flight && tr->body && now >= tr->retry_at_ns)
		send_body(tr);
	log_drops(tr, now);
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_tracer *tr = arg;
	(void)fd;
	(void)what;
	pthread_mutex_lock(&tr->mu);
	bool stop = tr->stopping;
	pthread_mutex_unlock(&tr->mu);
	if (stop)
		event_base_loopbreak(tr->base);
	else
		on_tick(-1, 0, tr);
}

static void *tracer_main(void *arg)
{
	struct mtd_tracer *tr = arg;
	event_base_dispatch(tr->base);
	return NULL;
}

struct mtd_tracer *mtd_tracer_start(unsigned n_workers, char *err, size_t errlen)
{
	struct mtd_tracer *tr = calloc(1, sizeof(*tr));
	if (!tr)
		goto oom;
	tr->n_rings = n_workers;
	tr->backoff_ms = BACKOFF_FIRST_MS;
	pthread_mutex_init(&tr->mu, NULL);
	tr->rings = calloc(n_workers ? n_workers : 1, sizeof(*tr->rings));
	tr->batch = calloc(MTD_TRACE_BATCH, sizeof(*tr->batch));
	if (!tr->rings || !tr->batch)
		goto oom;
	for (unsigned i = 0; i < n_workers; i++)
		if (!(tr->rings[i].slot = calloc(MTD_TRACE_RING, sizeof(struct mtd_span))))
			goto oom;
	tr->base = event_base_new();
	if (!tr->base)
		goto oom;
	tr->tick = event_new(tr->base, -1, EV_PERSIST, on_tick, tr);
	tr->wake = event_new(tr->base, -1, 0, on_wake, tr);
	tr->deadline = evtimer_new(tr->base, on_deadline, tr);
	tr->dns = evdns_base_new(tr->base, EVDNS_BASE_INITIALIZE_NAMESERVERS | EVDNS_BASE_DISABLE_WHEN_INACTIVE);
	if (!tr->tick || !tr->wake || !tr->deadline || !tr->dns)
		goto oom;
	struct timeval tv = {.tv_sec = 0, .tv_usec = TICK_MS * 1000};
	event_add(tr->tick, &tv);
	int rc = pthread_create(&tr->thread, NULL, tracer_main, tr);
	if (rc != 0) {
		snprintf(err, errlen, "cannot start the tracing thread: %s", strerror(rc));
		goto fail;
	}
	return tr;
oom:
	snprintf(err, errlen, "out of memory");
fail:
	if (tr) {
		if (tr->tick)
			event_free(tr->tick);
		if (tr->wake)
			event_free(tr->wake);
		if (tr->deadline)
			event_free(tr->deadline);
		if (tr->dns)
			evdns_base_free(tr->dns, 0);
		if (tr->base)
			event_base_free(tr->base);
		for (unsigned i = 0; tr->rings && i < tr->n_rings; i++)
			free(tr->rings[i].slot);
		free(tr->rings);
		free(tr->batch);
		pthread_mutex_destroy(&tr->mu);
		free(tr);
	}
	return NULL;
}

void mtd_tracer_set_target(struct mtd_tracer *tr, struct mtd_trace_target *t)
{
	pthread_mutex_lock(&tr->mu);
	mtd_trace_target_free(tr->next); /* set twice before the thread saw the first */
	tr->next = t;
	tr->next_set = true;
	pthread_mutex_unlock(&tr->mu);
	event_active(tr->wake, EV_READ, 0);
}

void mtd_tracer_figures(const struct mtd_tracer *tr, struct mtd_tracer_figures *out)
{
	memset(out, 0, sizeof(*out));
	out->exported = atomic_load_explicit(&tr->exported, memory_order_relaxed);
	for (int i = 0; i < MTD_TRACE_DROP_N; i++)
		out->dropped[i] = atomic_load_explicit(&tr->dropped[i], memory_order_relaxed);
	for (unsigned k = 0; k < tr->n_rings; k++)
		out->dropped[MTD_TRACE_DROP_QUEUE_FULL] += atomic_load_explicit(&tr->rings[k].full, memory_order_relaxed);
	out->exports_ok = atomic_load_explicit(&tr->exports_ok, memory_order_relaxed);
	out->exports_failed = atomic_load_explicit(&tr->exports_failed, memory_order_relaxed);
}

void mtd_tracer_stop(struct mtd_tracer *tr)
{
	if (!tr)
		return;
	pthread_mutex_lock(&tr->mu);
	tr->stopping = true;
	pthread_mutex_unlock(&tr->mu);
	event_active(tr->wake, EV_READ, 0);
	pthread_join(tr->thread, NULL);
	/* What is still queued never leaves. */
	drain(tr);
	count_drop(tr, MTD_TRACE_DROP_SHUTDOWN, tr->n_batch);
	for (unsigned i = 0; i < tr->n_rings; i++) {
		struct ring *r = &tr->rings[i];
		uint32_t left = atomic_load(&r->tail) - atomic_load(&r->head);
		count_drop(tr, MTD_TRACE_DROP_SHUTDOWN, left);
	}
	if (tr->body)
		count_drop(tr, MTD_TRACE_DROP_SHUTDOWN, tr->body_spans);
	free(tr->body);
	/* The connection goes before its resolver; a lookup still pending
	 * is failed, and its callback (which lets go of the connection's
	 * bufferevent) runs on one more turn of the loop, in which nothing
	 * of the exporter's own may run. */
	event_del(tr->tick);
	event_del(tr->wake);
	event_del(tr->deadline);
	if (tr->conn)
		evhttp_connection_free(tr->conn);
	tr->conn = NULL;
	tr->in_flight = false;
	evdns_base_free(tr->dns, 1);
	event_base_loop(tr->base, EVLOOP_NONBLOCK);
	while (tr->retired) {
		struct mtd_trace_target *r = tr->retired;
		tr->retired = r->retired_next;
		mtd_trace_target_free(r);
	}
	mtd_trace_target_free(tr->tgt);
	mtd_trace_target_free(tr->next);
	event_free(tr->tick);
	event_free(tr->wake);
	event_free(tr->deadline);
	event_base_free(tr->base);
	for (unsigned i = 0; i < tr->n_rings; i++)
		free(tr->rings[i].slot);
	free(tr->rings);
	free(tr->batch);
	pthread_mutex_destroy(&tr->mu);
	free(tr);
}
