/* A call: one gRPC request relayed from a downstream stream to one or more
 * upstream attempts, and one answer back.
 *
 *   HEADERS --route--> RUNNING ------------- answer complete ------> DONE
 *      |  \--hash on a message field--> WAIT_KEY --first message--/   ^
 *      |                                                               |
 *      +---------- any failure the policy ends: a gRPC status ---------+
 *
 * RUNNING: an attempt is going on (call->cur), or a retry waits for its
 * backoff (call->retry armed); each attempt follows lib/fault/attempt.c's
 * machine and a failed one asks mtd_fault_decide() what happens next
 * (attempt.c). The request is kept from its first byte until the call
 * commits (an attempt's response headers were relayed, or the request
 * outgrew fault.replay_buffer or the worker's replay_buffer_total), so a
 * new attempt replays it from the start; the client's window reopens only
 * for bytes an attempt took, so flow control stays end to end.
 *
 * The call is held by its downstream stream (call->down), by each attempt
 * in its list and by its retry timer; released when none holds it and
 * freed at the end of the turn (the lifetime rule, call-t.h). */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "pbwire/pbwire.h"
#include "core/bits.h"
#include "core/clock.h"
#include "discovery/discovery.h"
#include "health/outlier.h"
#include "lb/lb.h"
#include "route/route.h"
#include "sidecar/call/attempt.h"
#include "sidecar/call/call.h"
#include "sidecar/call/failback.h"
#include "sidecar/call/headers.h"
#include "sidecar/call/mirror.h"
#include "sidecar/call/mode/mode.h"
#include "sidecar/call/park.h"
#include "sidecar/call/policy.h"
#include "sidecar/call/relay.h"
#include "sidecar/call/trace.h"
#include "sidecar/control/runtime.h"
#include "sidecar/io/conn.h"
#include "sidecar/io/downstream.h"
#include "sidecar/call/inbound_call.h"
#include "sidecar/io/pool.h"
#include "sidecar/ops/metrics.h"
#include "sidecar/turn.h"

/* How much of the first request message we read to find a hash-key field:
 * bounded look-ahead (the key is expected near the start of the message). */
#define KEY_LOOKAHEAD MTD_PBWIRE_DEFAULT_LOOKAHEAD

/* The routing the call was given: its method's (call->method) where the
 * config names the method, else its service's. */
static struct mtd_lb_picker *call_picker(const struct mtd_call *call)
{
	return call->method ? call->method->picker : call->svc->picker;
}

static struct mtd_lb_layer *call_layer(const struct mtd_call *call)
{
	return call->method ? call->method->layer : call->svc->layer;
}

static struct mtd_outlier_set *call_outliers(const struct mtd_call *call)
{
	return call->method && call->method->outliers ? call->method->outliers : call->svc->outliers;
}

/* A control plane's route with a hash_policy decides the key of the
 * calls it takes; else the method's, else the service's hash_key. */
static const struct mtd_cfg_hash_key *call_hash_key(const struct mtd_call *call)
{
	if (call->xroute && call->xroute->hash_key.kind != MTD_CFG_HASH_NONE)
		return &call->xroute->hash_key;
	return call->method ? &call->method->cfg->hash_key : &call->svc->cfg->local->hash_key;
}

static const char *call_route_header(const struct mtd_call *call)
{
	return call->method ? call->method->cfg->routing.header : call->svc->cfg->local->routing.header;
}

/* ---- lifetime ---------------------------------------------------------- */

static void release_retained(struct mtd_call *call)
{
	call->w->replay_bytes -= call->req_retained;
	call->req_retained = 0;
}

/* Held by its downstream stream, an attempt, its retry timer, or its
 * worker's ready list (the lifetime rule, call-t.h). */
static bool call_held(const struct mtd_call *call)
{
	return call->down || !LIST_EMPTY(&call->attempts) || mtd_timer_armed(&call->retry) || call->next_due;
}

/* The call leaves its service's calls in flight (circuit_breaker.max_calls,
 * an inbound listener's max_concurrent_calls), once: call->load NULL
 * after. */
static void leave_load(struct mtd_call *call)
{
	struct mtd_rt_load *load = call->load;
	if (!load)
		return;
	call->load = NULL;
	atomic_fetch_sub_explicit(&load->calls, 1, memory_order_relaxed);
	if (mtd_ref_put(&load->ref))
		free(load);
}

/* What others see of a client's call, once: its figures, its access-log
 * line, and its place in the circuit breaker's count, which it leaves now
 * unless maitred's own answer made it leave already (a client told of the
 * end may ask /clusters next, and a call refused at max_calls must not be
 * counted in flight by then). */
static void count_end(struct mtd_call *call)
{
	if (call->bg || call->counted)
		return;
	call->counted = true;
	leave_load(call);
	mtd_metrics_call_end(call);
	mtd_call_trace_end(call);
}

void mtd_call_release(struct mtd_call *call)
{
	if (call->reaping || call_held(call))
		return;
	/* Its deadline is the one thing left that could reach it. */
	mtd_worker_timer_disarm(call->w, &call->deadline);
	/* A client's call is over for good (nothing holds one again once its
	 * stream is gone): its figures and access log line now, before the
	 * flush writes its last bytes, as the client may read the log next. */
	count_end(call);
	call->reaping = true;
	LIST_INSERT_HEAD(&call->w->reap_calls, &call->ds, link);
	mtd_worker_schedule_flush(call->w);
}

bool mtd_call_count_load(struct mtd_call *call, struct mtd_rt_load *load, uint32_t max)
{
	uint32_t in; /* calls in flight, this one included */
	if (!call->load) {
		call->load = load;
		mtd_ref_get(&load->ref);
		in = atomic_fetch_add_explicit(&load->calls, 1, memory_order_relaxed) + 1;
	} else {
		in = atomic_load_explicit(&call->load->calls, memory_order_relaxed);
	}
	return in <= max;
}

void mtd_call_routed(struct mtd_call *call, const char *path, size_t len, size_t svc_len)
{
	call->mx = mtd_metrics_call_routed(call->w->id, path, len, svc_len);
}

static void call_free(struct mtd_call *call)
{
	mtd_worker_timer_disarm(call->w, &call->deadline);
	if (call->bg) {
		/* A background call: no client, not one of the calls' figures. */
		LIST_REMOVE(call->bg, link);
		if (call->bg->mirror) {
			if (call->bg->primary && call->bg->primary->mirror == call)
				call->bg->primary->mirror = NULL; /* the primary outlives its copy */
		} else {
			call->w->n_bg--;
		}
		mtd_worker_unhold(call->w, call->bg->origin);
		mtd_slab_free(&call->w->slab, call->bg);
	}
	if (call->mirror && call->mirror->bg->primary == call)
		call->mirror->bg->primary = NULL; /* its copy outlives it (mirror.c) */
	release_retained(call);
	mtd_bufq_clear(&call->req);
	mtd_bufq_clear(&call->resp);
	mtd_headers_clear(&call->req_hdrs, &call->w->slab);
	mtd_headers_clear(&call->resp_hdrs, &call->w->slab);
	mtd_headers_clear(&call->resp_trailers, &call->w->slab);
	free(call->key_msg);
	if (call->tried != &call->tried_inline)
		free(call->tried);
	free(call->last_failure);
	if (call->bc) {
		free(call->bc->msg);
		mtd_slab_free(&call->w->slab, call->bc);
	}
	leave_load(call);
	mtd_worker_unhold(call->w, call->hold);
	mtd_worker_unhold(call->w, call->hold_prev);
	mtd_slab_free(&call->w->slab, call);
}

void mtd_call_reap(struct mtd_worker *w)
{
	struct mtd_attempt *a;
	while ((a = LIST_FIRST(&w->reap_attempts))) {
		LIST_REMOVE(a, call_link);
		mtd_slab_free(&w->slab, a);
	}
	struct mtd_down_stream *ds;
	while ((ds = LIST_FIRST(&w->reap_calls))) {
		struct mtd_call *call = mtd_call_of_stream(ds);
		LIST_REMOVE(ds, link);
		call->reaping = false;
		if (!call_held(call)) /* else held again since: released again later */
			call_free(call);
	}
}

/* ---- request bytes ----------------------------------------------------- */

/* Give the client's window back for request bytes nobody will send. */
static void drop_request_bytes(struct mtd_call *call)
{
	mtd_bufq_clear(&call->req);
	release_retained(call);
	if (call->down && call->req_unconsumed) {
		mtd_down_consume(call->down, call->down_sid, call->req_unconsumed);
		mtd_conn_want_flush(call->down);
	}
	call->req_unconsumed = 0;
}

void mtd_call_commit(struct mtd_call *call, struct mtd_attempt *a)
{
	if (call->committed)
		return;
	call->committed = true;
	call->cur = a;
	/* One attempt only from now on (FORKING: the others lose the race,
	 * RST_STREAM CANCEL; no more hedges). */
	struct mtd_attempt *o, *next;
	for (o = LIST_FIRST(&call->attempts); o; o = next) {
		next = LIST_NEXT(o, call_link);
		if (o != a && mtd_fault_attempt_live(o->state))
			mtd_attempt_cancel(o);
	}
	mtd_worker_timer_disarm(call->w, &call->retry);
	/* Nothing will be replayed: keep only what a still has to send. */
	mtd_bufq_drop(&call->req, a->req_off - call->req_base);
	call->req_base = a->req_off;
	release_retained(call);
}

/* Whether taking n more request bytes from a's position would outgrow
 * what may be kept, for the first time (a replay re-reads counted bytes). */
static bool req_outgrows(const struct mtd_call *call, const struct mtd_attempt *a, size_t n)
{
	if (a->req_off + n <= call->req_taken)
		return false;
	size_t fresh = a->req_off + n - call->req_taken;
	return a->req_off + n > call->fault->replay_buffer ||
	       call->w->replay_bytes + fresh > call->w->rt->cfg->replay_buffer_total;
}

/* The n request bytes at a's position went into a DATA frame: a moves on,
 * the client's window reopens for bytes sent the first time, a call whose
 * request outgrew what may be kept commits, a committed call drops them. */
static void take_req(struct mtd_call *call, struct mtd_attempt *a, size_t n)
{
	a->req_off += n;
	if (a->req_off > call->req_taken) {
		/* Reopen the client's window only for what went upstream (the
		 * first time: a replay re-sends bytes already counted). */
		size_t fresh = a->req_off - call->req_taken;
		call->req_taken = a->req_off;
		if (call->down) {
			mtd_down_consume(call->down, call->down_sid, fresh);
			mtd_conn_want_flush(call->down);
		}
		call->req_unconsumed -= fresh < call->req_unconsumed ? fresh : call->req_unconsumed;
		if (!call->committed) {
			if (call->req_taken > call->fault->replay_buffer ||
			    call->w->replay_bytes + fresh > call->w->rt->cfg->replay_buffer_total) {
				/* The request outgrew what may be kept: no replay, and
				 * the call is the attempt's that is sending it (FORKING:
				 * not the newest fork's, which may have failed already or
				 * be behind). BROADCAST never gets here (read_req). */
				mtd_call_commit(call, a);
			} else {
				call->req_retained += fresh;
				call->w->replay_bytes += fresh;
			}
		}
	}
	if (call->committed && a->req_off > call->req_base) {
		mtd_bufq_drop(&call->req, a->req_off - call->req_base);
		call->req_base = a->req_off;
	}
}

/* The request bytes of a frame of at least MTD_NO_COPY_MIN stay in
 * call->req until the frame is written (NGHTTP2_DATA_FLAG_NO_COPY, as the
 * response: relay.c): the read callback sizes the frame,
 * mtd_call_send_req takes the bytes. A smaller frame's are copied here. */
ssize_t mtd_call_read_req(nghttp2_session *s, int32_t sid, uint8_t *buf, size_t len, uint32_t *flags,
                          nghttp2_data_source *src, void *ud)
{
	struct mtd_attempt *a = src->ptr;
	struct mtd_call *call = a->call;
	if (!mtd_fault_attempt_live(a->state) || a->req_off < call->req_base) {
		/* Not one of the call's attempts any more (being cancelled). */
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	}
	size_t avail = call->req_base + call->req.len - a->req_off;
	size_t n = avail < len ? avail : len;
	if (!call->committed && mtd_call_mode(call)->holds_answer && req_outgrows(call, a, n)) {
		/* Every endpoint reads the request from the kept bytes: one that
		 * outgrew them cannot go to all. */
		mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED,
		              "BROADCAST: the request is larger than the replay buffer (fault.replay_buffer "
		              "%u bytes, or the worker's replay_buffer_total): not sent to every endpoint",
		              call->fault->replay_buffer);
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	}
	if (n >= MTD_NO_COPY_MIN) {
		*flags |= NGHTTP2_DATA_FLAG_NO_COPY;
	} else if (n > 0) {
		mtd_bufq_copy_at(&call->req, a->req_off - call->req_base, buf, n);
		take_req(call, a, n);
	}
	if (n == avail && call->req_eof) {
		*flags |= NGHTTP2_DATA_FLAG_EOF;
		return (ssize_t)n;
	}
	if (n == 0) {
		a->req_deferred = true;
		return NGHTTP2_ERR_DEFERRED;
	}
	return (ssize_t)n;
}

int mtd_call_send_req(const uint8_t *framehd, size_t n, struct mtd_attempt *a, struct mtd_conn *up)
{
	struct mtd_call *call = a->call;
	int rv = mtd_conn_send_data(up, framehd, &call->req, a->req_off - call->req_base, n);
	if (rv != NGHTTP2_ERR_CALLBACK_FAILURE)
		take_req(call, a, n);
	return rv;
}

void mtd_call_drop_request(struct mtd_call *call)
{
	call->req_sink = true;
	drop_request_bytes(call);
}

static void resume_attempts(struct mtd_call *call)
{
	struct mtd_attempt *a;
	LIST_FOREACH(a, &call->attempts, call_link)
		mtd_attempt_resume(a);
}

/* ---- failures ---------------------------------------------------------- */

static void cancel_attempts(struct mtd_call *call)
{
	struct mtd_attempt *a, *next;
	for (a = LIST_FIRST(&call->attempts); a; a = next) {
		next = LIST_NEXT(a, call_link);
		if (mtd_fault_attempt_live(a->state))
			mtd_attempt_cancel(a);
	}
	call->cur = NULL;
	mtd_worker_timer_disarm(call->w, &call->retry);
}

void mtd_call_settle(struct mtd_call *call)
{
	mtd_worker_timer_disarm(call->w, &call->deadline);
	mtd_call_unpark(call); /* off its worker's parked list, whatever ended it */
	call->state = MTD_CALL_DONE;
	cancel_attempts(call);
}

void mtd_call_answer_ok(struct mtd_call *call, const uint8_t *msg, size_t len)
{
	if (call->resp_done || call->resp_eof)
		return;
	mtd_call_settle(call);
	leave_load(call); /* maitred's own answer, whole: see mtd_call_fail */
	drop_request_bytes(call);
	mtd_relay_answer_ok(call, msg, len);
	mtd_call_release(call);
}

void mtd_call_answer_held(struct mtd_call *call)
{
	if (call->resp_done || call->resp_eof)
		return;
	mtd_call_settle(call);
	leave_load(call); /* maitred's own answer, whole: see mtd_call_fail */
	drop_request_bytes(call);
	mtd_relay_held(call, call->bc->trailers_only);
	mtd_call_release(call);
}

void mtd_call_fail(struct mtd_call *call, enum mtd_grpc_status status, const char *fmt, ...)
{
	if (call->resp_done || call->resp_eof)
		return;
	char msg[384];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (mtd_log_enabled(MTD_LOG_DEBUG)) {
		nghttp2_nv path_buf;
		const nghttp2_nv *path = mtd_headers_find(&call->req_hdrs, ":path", &path_buf);
		MTD_DEBUG("call %.*s: %s: %s", path ? (int)path->valuelen : 1, path ? (const char *)path->value : "?",
		          mtd_grpc_status_name(status), msg);
	}
	mtd_call_settle(call);
	/* Over, whatever its client does next: out of its service's calls in
	 * flight now, not when its stream closes (a client may keep its
	 * request half open after the status: a call refused at max_calls or
	 * shed at max_concurrent_calls would hold a place for as long). */
	leave_load(call);
	if (call->bg) {
		/* A FAILBACK re-send has nobody to answer: this try failed. */
		mtd_failback_failed(call, msg);
	} else {
		drop_request_bytes(call);
		mtd_relay_status(call, status, msg);
	}
	mtd_call_release(call);
}

static void on_deadline(struct mtd_timer *t)
{
	struct mtd_call *call = MTD_CONTAINER_OF(t, struct mtd_call, deadline);
	mtd_call_fail(call, MTD_GRPC_DEADLINE_EXCEEDED, "deadline exceeded (%lld ms)",
	              (long long)((call->deadline_ns - call->start_ns) / 1000000));
}

int mtd_call_arm_deadline(struct mtd_call *call)
{
	if (!call->deadline_ns) {
		mtd_worker_timer_disarm(call->w, &call->deadline);
		return 0;
	}
	int64_t left = call->deadline_ns - mtd_now_ns();
	return mtd_worker_timer_arm(call->w, &call->deadline, on_deadline, left > 0 ? left : 0);
}

/* ---- picking ----------------------------------------------------------- */

/* The routing layer picks by the call's routing header value. */
static int layer_pick(struct mtd_call *call, const struct mtd_lb_pick_ctx *ctx)
{
	const char *name = call_route_header(call);
	nghttp2_nv v_buf;
	const nghttp2_nv *v = name ? mtd_headers_find(&call->req_hdrs, name, &v_buf) : NULL;
	return mtd_lb_layer_pick(call_layer(call), v ? (const char *)v->value : NULL, v ? v->valuelen : 0, ctx);
}

/* The endpoints a pick must leave out: those this call tried, those
 * outlier detection ejected, and those active health checks found
 * unhealthy (the health filter runs before the rule). Returns the bitmap to
 * pass (NULL = none), merged into scratch when more than one applies.
 * When every endpoint is unhealthy the health checks are ignored. */
const uint64_t *mtd_call_excluded_set(const struct mtd_call *call, uint64_t *scratch, size_t words)
{
	const uint64_t *tried = call->n_tried ? call->tried : NULL;
	const _Atomic uint64_t *ejected = mtd_outlier_excluded(call_outliers(call));
	const struct mtd_rt_hc *hc = call->svc->hc;
	uint32_t down = hc ? atomic_load_explicit(&hc->n_down, memory_order_relaxed) : 0;
	const _Atomic uint64_t *unhealthy = down && down < call->svc->n_eps ? hc->down_bits : NULL;
	if (!ejected && !unhealthy)
		return tried;
	for (size_t i = 0; i < words; i++)
		scratch[i] = (tried ? tried[i] : 0) |
		             (ejected ? atomic_load_explicit(&ejected[i], memory_order_relaxed) : 0) |
		             (unhealthy ? atomic_load_explicit(&unhealthy[i], memory_order_relaxed) : 0);
	return scratch;
}

/* Deadline-aware picking: with a deadline, an endpoint whose
 * recent successful calls take longer on average than the time left would
 * only spend the deadline. A few samples (5) are needed to judge. *est_ms:
 * the estimate, when given. */
static bool too_slow(const struct mtd_call *call, const struct mtd_endpoint *ep, int64_t now_ns, int64_t *est_ms)
{
	if (!call->deadline_ns)
		return false;
	const struct mtd_lb_live *st = mtd_lb_stats_view(&ep->stats);
	uint64_t n = atomic_load_explicit(&st->window_count, memory_order_relaxed);
	uint64_t sum = atomic_load_explicit(&st->window_sum_us, memory_order_relaxed);
	int64_t left_us = (call->deadline_ns - now_ns) / 1000;
	if (n < 5 || (int64_t)(sum / n) <= left_us)
		return false;
	if (est_ms)
		*est_ms = (int64_t)(sum / n) / 1000;
	return true;
}

/* Why an endpoint the policy chose is passed over while another is
 * eligible. */
enum skip { SKIP_NONE, SKIP_BACKOFF, SKIP_SLOW, SKIP_FULL };

static enum skip skip_reason(const struct mtd_call *call, const struct mtd_endpoint *ep, const struct mtd_pool *p,
                             int64_t now_ns)
{
	uint32_t cap = call->svc->cfg->circuit.max_calls_per_endpoint;
	if (cap && atomic_load_explicit(&mtd_lb_stats_view(&ep->stats)->active, memory_order_relaxed) >= (int64_t)cap)
		return SKIP_FULL;
	/* The exact clock, as the backoff's end (pool.c) and the time left:
	 * at the turn's, an endpoint whose backoff ended in this turn's work
	 * was still passed over. */
	if (mtd_pool_backing_off(p, now_ns))
		return SKIP_BACKOFF;
	if (too_slow(call, ep, now_ns, NULL))
		return SKIP_SLOW;
	return SKIP_NONE;
}

/* At most this many endpoints are passed over in one pick; then the
 * policy's choice is taken as it is. */
#define MAX_SKIPS 16

/* Pick an endpoint for the next attempt, which starts at now (the exact
 * clock: the deadline's time left is weighed at it). Returns its index and
 * *pool, or -1 when no endpoint is left, -EBUSY when every eligible one is
 * full (circuit breaking), -ENOMEM. Endpoints that are backing off after
 * failed connects, full, or too slow for the deadline are passed over
 * while another is eligible; if none is, the first one passed over that is
 * not full is taken anyway (it may be back). */
static int pick(struct mtd_call *call, const uint8_t *key, size_t key_len, int64_t now, struct mtd_pool **pool)
{
	struct mtd_rt_service *svc = call->svc;
	uint64_t *bits = call->tried;
	size_t words = (svc->n_eps + 63) / 64;
	uint64_t stack[16], *scratch = stack;
	if (words > 16 && (call->svc->hc || mtd_outlier_excluded(call_outliers(call)))) {
		scratch = malloc(words * sizeof(*scratch));
		if (!scratch)
			return -ENOMEM;
	}
	struct mtd_lb_pick_ctx ctx = {
	        .key = key,
	        .key_len = key_len,
	        .now_ms = mtd_turn_wall_ms(call->w),
	        .now_ns = mtd_turn_now_ns(call->w),
	        .worker = call->w->id,
	        .rng = &call->w->rng,
	};
	int skipped[MAX_SKIPS], fallback = -1, idx;
	size_t n_skipped = 0;
	bool any_full = false;
	struct mtd_pool *p = NULL;
	for (;;) {
		ctx.excluded = mtd_call_excluded_set(call, scratch, words);
		idx = call_layer(call) ? layer_pick(call, &ctx) : mtd_lb_pick(call_picker(call), &ctx);
		if (idx < 0) {
			idx = fallback >= 0 ? fallback : any_full ? -EBUSY : -1;
			if (fallback >= 0 && !(p = mtd_pool_get(call->w, svc, svc->eps[idx])))
				idx = -ENOMEM;
			break;
		}
		p = mtd_pool_get(call->w, svc, svc->eps[idx]);
		if (!p) {
			idx = -ENOMEM;
			break;
		}
		enum skip why = n_skipped < MAX_SKIPS ? skip_reason(call, svc->eps[idx], p, now) : SKIP_NONE;
		if (why == SKIP_NONE)
			break;
		if (why == SKIP_FULL)
			any_full = true;
		else if (fallback < 0)
			fallback = idx;
		skipped[n_skipped++] = idx;
		mtd_bit_set(bits, (size_t)idx);
		call->n_tried++;
	}
	/* Passing over is not a failure of this call: forget the skips. */
	for (size_t i = 0; i < n_skipped; i++) {
		mtd_bit_clear(bits, (size_t)skipped[i]);
		call->n_tried--;
	}
	if (scratch != stack)
		free(scratch);
	*pool = p;
	return idx;
}

/* Start an attempt of call on endpoint idx of its service (pool p):
 * counted by the balancer, queued in the pool. False when the call ended
 * instead (out of memory, the pool's limits) or moved to the worker's
 * current snapshot (the endpoint was removed). */
bool mtd_call_launch(struct mtd_call *call, int idx, struct mtd_pool *p, bool hedge, int64_t now)
{
	/* Its client's close is recorded, the engine's side due at the end
	 * of the turn: no attempt is born for it meanwhile (a reroute, a
	 * BROADCAST replay, whatever asks). */
	if (call->down_closed)
		return false;
	const struct mtd_rt_service *svc = call->svc;
	struct mtd_attempt *a = mtd_attempt_new(call);
	if (!a) {
		mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return false;
	}
	a->ep_idx = idx;
	a->ep = svc->eps[idx];
	a->picker = call_picker(call);
	a->outliers = call_outliers(call);
	if (mtd_call_mode(call)->distinct_endpoints && !mtd_bit_get(call->tried, (size_t)idx)) {
		/* Distinct endpoints for the forks. */
		mtd_bit_set(call->tried, (size_t)idx);
		call->n_tried++;
	}
	a->layer = call_layer(call);
	a->start_ns = now;
	if (hedge) {
		a->hedge = true;
		mtd_metrics_hedge_started(call);
	}
	if (a->layer)
		mtd_lb_layer_call_begin(a->layer, (size_t)idx);
	else
		mtd_lb_call_begin(a->picker, (size_t)idx);
	a->lb_begun = true;
	call->cur = a;
	call->state = MTD_CALL_RUNNING;
	mtd_attempt_step(a, MTD_AEV_START);
	if (p->retired) {
		/* The call's snapshot is older than its worker's, which removed
		 * this endpoint: move to the current one. */
		mtd_call_reroute(a);
		return false;
	}
	int rc = mtd_pool_enqueue(p, &a->s);
	if (rc < 0) {
		/* Not the endpoint's fault: the call fails, nobody is blamed. */
		if (rc == -EBUSY) {
			mtd_metrics_circuit_rejected(call, MTD_MX_CIRCUIT_MAX_PENDING);
			mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED,
			              "circuit breaker: service %s has circuit_breaker.max_pending (%u) calls waiting",
			              svc->cfg->local->name, svc->cfg->circuit.max_pending);
		} else {
			mtd_call_fail(call, MTD_GRPC_UNAVAILABLE,
			              "upstream %s: too many calls waiting for a connection (%u)",
			              mtd_endpoint_text(p->ep), p->n_pending);
		}
		return false;
	}
	return true;
}

void mtd_call_relaunch(struct mtd_call *call, int idx)
{
	struct mtd_rt_service *svc = call->svc;
	struct mtd_pool *p = mtd_pool_get(call->w, svc, svc->eps[idx]);
	if (!p) {
		mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	mtd_call_launch(call, idx, p, false, mtd_now_ns()); /* as start_attempt's */
	if (mtd_call_mode(call)->holds_answer)
		call->cur = NULL;
}

/* The call's tried and refused bitmaps over n endpoints, zeroed: inline
 * for up to 64, else one allocation for both. False when the call failed
 * instead (out of memory). */
static bool tried_bitmaps(struct mtd_call *call, size_t n)
{
	size_t words = (n + 63) / 64;
	if (words <= 1) {
		call->tried_inline = call->refused_inline = 0;
		call->tried = &call->tried_inline;
		call->refused = &call->refused_inline;
		return true;
	}
	call->tried = calloc(2 * words, sizeof(*call->tried));
	if (!call->tried) {
		mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return false;
	}
	call->refused = call->tried + words;
	return true;
}

/* hedge: a FORKING attempt after the first; when no endpoint is left it
 * is simply not started (the call goes on with those it has). */
static void start_attempt(struct mtd_call *call, const uint8_t *key, size_t key_len, bool hedge)
{
	const struct mtd_rt_service *svc = call->svc;
	const struct mtd_cfg_hash_key *hk = call_hash_key(call);
	if (!key && hk->kind != MTD_CFG_HASH_NONE && hk->fail_on_missing) {
		mtd_call_fail(call, MTD_GRPC_INVALID_ARGUMENT, "hash key %s is missing from the call",
		              hk->kind == MTD_CFG_HASH_HEADER ? hk->header : "field");
		return;
	}
	/* No endpoint because its source has not answered yet: the call
	 * waits for the first set (park.h), whatever its mode. */
	if (svc->n_eps == 0 && !hedge && mtd_call_park(call))
		return;
	if (!call->tried && !tried_bitmaps(call, svc->n_eps))
		return;
	const struct mtd_fault_mode_ops *mode = mtd_call_mode(call);
	if (mode->start) {
		mode->start(call);
		return;
	}
	/* The exact clock, not the turn's (turn.h), read once an attempt: an
	 * attempt's start is what its endpoint's latency counts from (the
	 * balancer, the learnt hedge delay), which must not hold the turn's
	 * work before it; and the pick, and a retry or a hedge, weigh the
	 * deadline's time left at it. */
	int64_t now = mtd_now_ns(), est_ms;
	struct mtd_pool *p;
	int idx = pick(call, key, key_len, now, &p);
	if (idx == -ENOMEM) {
		mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	if (idx < 0 && hedge)
		return;
	if (idx == -EBUSY) {
		mtd_metrics_circuit_rejected(call, MTD_MX_CIRCUIT_MAX_CALLS_PER_ENDPOINT);
		mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED,
		              "circuit breaker: every endpoint of %s is at circuit_breaker.max_calls_per_endpoint (%u)",
		              svc->cfg->local->name, svc->cfg->circuit.max_calls_per_endpoint);
		return;
	}
	if (idx < 0) {
		if (call->n_tried)
			mtd_call_fail(call, MTD_GRPC_UNAVAILABLE, "%s (and no other endpoint of %s is left)",
			              call->last_failure ? call->last_failure : "every endpoint failed",
			              svc->cfg->local->name);
		else if (svc->n_eps == 0)
			mtd_call_fail(call, MTD_GRPC_UNAVAILABLE, "service %s has no endpoint%s%s",
			              svc->cfg->local->name, svc->unavailable ? ": " : "",
			              svc->unavailable ? svc->unavailable : "");
		else
			mtd_call_fail(call, MTD_GRPC_UNAVAILABLE, "no endpoint available for service %s",
			              svc->cfg->local->name);
		return;
	}
	if (call->n_attempts > 0 && too_slow(call, svc->eps[idx], now, &est_ms)) {
		/* No retry or hedge that cannot finish in time. A
		 * hedge is not started (the forks racing go on); a retry is not,
		 * and the call ends with the failure it has. */
		if (hedge)
			return;
		mtd_call_fail(call, call->last_failure ? call->last_status : MTD_GRPC_DEADLINE_EXCEEDED,
		              "%s (no retry: %s answers in about %lld ms, %lld ms are left)",
		              call->last_failure ? call->last_failure : "the attempt ended",
		              mtd_endpoint_text(svc->eps[idx]), (long long)est_ms,
		              (long long)((call->deadline_ns - now) / 1000000));
		return;
	}
	if (mtd_call_launch(call, idx, p, hedge, now) && mode->on_started)
		mode->on_started(call);
}

void mtd_call_next_attempt(struct mtd_call *call)
{
	if (call->state == MTD_CALL_DONE || call->down_closed)
		return;
	if (call->deadline_ns && mtd_now_ns() >= call->deadline_ns) {
		mtd_call_fail(call, MTD_GRPC_DEADLINE_EXCEEDED, "deadline exceeded (%lld ms)",
		              (long long)((call->deadline_ns - call->start_ns) / 1000000));
		return;
	}
	mtd_call_start_keyed(call, false);
}

/* Put call on its worker's ready list (which holds it) unless it is there
 * already. 0, or -ENOMEM (not listed). */
static int list_ready(struct mtd_call *call)
{
	struct mtd_worker *w = call->w;
	if (call->next_due)
		return 0;
	if (w->n_ready == w->ready_cap) {
		uint32_t cap = w->ready_cap ? w->ready_cap * 2 : 16;
		struct mtd_call **r = realloc(w->ready, cap * sizeof(*r));
		if (!r)
			return -ENOMEM;
		w->ready = r;
		w->ready_cap = cap;
	}
	w->ready[w->n_ready++] = call;
	call->next_due = true;
	mtd_worker_schedule_flush(w);
	return 0;
}

void mtd_call_next_attempt_later(struct mtd_call *call)
{
	if (call->next_due || call->state == MTD_CALL_DONE)
		return;
	if (list_ready(call) < 0)
		mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
}

void mtd_call_down_closed_later(struct mtd_call *call, uint32_t error_code)
{
	/* A stream closes as its answer's last frame is serialized, before
	 * the flush writes it: a call whose answer is complete shows its end
	 * now, as its release did when it ran here (the rest waits). */
	if (call->resp_done)
		count_end(call);
	call->down_closed = (uint8_t)(error_code < 254 ? error_code + 1 : 255);
	if (list_ready(call) < 0) {
		/* Out of memory for the list: the engine learns it now. */
		call->down_closed = 0;
		mtd_call_on_down_close(call, error_code);
	}
}

void mtd_call_run_ready(struct mtd_worker *w)
{
	/* By index: a call whose next attempt failed at once again is listed
	 * again at the end (a loop over the endpoints, not a recursion). */
	for (uint32_t i = 0; i < w->n_ready; i++) {
		struct mtd_call *call = w->ready[i];
		call->next_due = false;
		if (call->down_closed) {
			/* Its client's close, first: what was due after it is over. */
			uint32_t code = call->down_closed - 1u;
			call->down_closed = 0;
			mtd_call_on_down_close(call, code);
		} else if (!call->svc) {
			/* It waited for the listener's routes (park.c): routed
			 * from the start now, unless something ended it since. */
			if (call->state != MTD_CALL_DONE)
				mtd_call_start(call);
		} else {
			mtd_call_next_attempt(call);
		}
		mtd_call_release(call); /* the list let go */
	}
	w->n_ready = 0;
}

static void pick_with_field_key(struct mtd_call *call, bool hedge)
{
	const struct mtd_cfg_hash_key *hk = call_hash_key(call);
	struct mtd_pbwire_value v;
	/* What was captured is the whole message or its look-ahead prefix; a
	 * compressed message cannot be read: its key counts as absent. */
	if (call->key_msg && !call->key_compressed &&
	    mtd_pbwire_find(call->key_msg, call->key_msg_have, true, hk->field_path, hk->field_depth, &v) == 1) {
		char num[MTD_PBWIRE_NUMBUF];
		const uint8_t *key;
		size_t len = mtd_pbwire_key_bytes(&v, num, &key);
		start_attempt(call, key, len, hedge);
		return;
	}
	start_attempt(call, NULL, 0, hedge);
}

/* Start an attempt hashing request header `name`: its value, or, sent
 * more than once, its values joined by "," in their order (what the
 * fields mean as one, RFC 9110 §5.3; gRPC's ring hash reads a repeated
 * header so), so that no value is left out of the key. */
static void start_with_header_key(struct mtd_call *call, const char *name, bool hedge)
{
	size_t nlen = strlen(name);
	nghttp2_nv v_buf, nv;
	const nghttp2_nv *v = mtd_headers_find_n(&call->req_hdrs, name, nlen, &v_buf);
	if (v == NULL || mtd_headers_count_n(&call->req_hdrs, name, nlen, 2) < 2) {
		start_attempt(call, v ? v->value : NULL, v ? v->valuelen : 0, hedge);
		return;
	}
	size_t total = 0, len = 0;
	uint32_t off = 0;
	while (mtd_headers_next(&call->req_hdrs, &off, &nv))
		if (nv.namelen == nlen && memcmp(nv.name, name, nlen) == 0)
			total += nv.valuelen + 1;
	uint8_t stack[256] = {0}; /* = {0}: LTO cannot see the loop below fills what it hashes */
	uint8_t *key = total <= sizeof(stack) ? stack : malloc(total);
	if (key == NULL) {
		start_attempt(call, v->value, v->valuelen, hedge); /* out of memory: the first value */
		return;
	}
	for (off = 0; mtd_headers_next(&call->req_hdrs, &off, &nv);)
		if (nv.namelen == nlen && memcmp(nv.name, name, nlen) == 0) {
			if (len > 0)
				key[len++] = ',';
			memcpy(key + len, nv.value, nv.valuelen);
			len += nv.valuelen;
		}
	start_attempt(call, key, len, hedge);
	if (key != stack)
		free(key);
}

/* Start an attempt with the call's hash key read where it is: a request
 * header, or the first message captured (every attempt, retries and
 * hedges included, hashes the same key; no copy of it is kept). */
void mtd_call_start_keyed(struct mtd_call *call, bool hedge)
{
	const struct mtd_cfg_hash_key *hk = call_hash_key(call);
	if (hk->kind == MTD_CFG_HASH_FIELD) {
		pick_with_field_key(call, hedge);
	} else if (hk->kind == MTD_CFG_HASH_HEADER) {
		start_with_header_key(call, hk->header, hedge);
	} else {
		start_attempt(call, NULL, 0, hedge);
	}
}

static void capture_first_message(void *arg, uint32_t msg_len, uint32_t off, const uint8_t *p, size_t n)
{
	struct mtd_call *call = arg;
	/* The look-ahead must fit in the stream window, which stays closed
	 * until the pick is made (else the call would wait forever): the
	 * window its connection advertised, not the config's, which a reload
	 * may have raised since key_msg was sized from it (the same `want`
	 * at every chunk: no copy past its end, no wait for bytes the window
	 * never lets in). */
	uint32_t window = call->down ? call->down->stream_window : call->w->rt->cfg->downstream.initial_window_size;
	uint32_t limit = window / 2;
	if (limit > KEY_LOOKAHEAD)
		limit = KEY_LOOKAHEAD;
	uint32_t want = msg_len < limit ? msg_len : limit;
	call->key_compressed = call->req_scan.hdr[0] == 1;
	if (call->key_ready)
		return;
	if (!call->key_msg && want > 0) {
		call->key_msg = malloc(want);
		if (!call->key_msg) {
			call->key_ready = true; /* out of memory: the key is "absent" */
			return;
		}
	}
	if (off < want) {
		size_t k = n < want - off ? n : want - off;
		memcpy(call->key_msg + off, p, k);
		call->key_msg_have = off + (uint32_t)k;
	}
	if (call->key_msg_have >= want)
		call->key_ready = true; /* the message, or its look-ahead, is here */
}

/* A call routed once request bytes were queued (it waited for the
 * listener's routes, park.c): its first message's look-ahead taken from
 * the queue, as capture_first_message takes it from the wire; the bytes
 * still to come continue it there. Nothing was sent yet: the queue starts
 * at the request's first byte. */
static void capture_queued(struct mtd_call *call)
{
	uint8_t hdr[5], buf[4096];
	if (mtd_bufq_copy_at(&call->req, 0, hdr, sizeof(hdr)) < sizeof(hdr))
		return; /* the prefix is not all here: the scan captures it all */
	uint32_t len = (uint32_t)hdr[1] << 24 | (uint32_t)hdr[2] << 16 | (uint32_t)hdr[3] << 8 | hdr[4];
	size_t off = 0;
	while (!call->key_ready && off < len) {
		size_t k = mtd_bufq_copy_at(&call->req, 5 + off, buf, len - off < sizeof(buf) ? len - off : sizeof(buf));
		if (k == 0)
			break;
		capture_first_message(call, len, (uint32_t)off, buf, k);
		off += k;
	}
	if (len == 0)
		call->key_ready = true; /* an empty first message: nothing to read the key from */
	call->key_compressed = hdr[0] == 1;
}

/* ---- request ----------------------------------------------------------- */

/* Route the call by its :path on the worker's current snapshot: svc,
 * method and fault set (a control plane's route: its retry policy, and
 * in *xr what else it adds). false when no service has the name. */
static bool route(struct mtd_call *call, const struct mtd_route_path *rp, struct mtd_policy_xroute *xr)
{
	/* The call keeps the worker's current snapshot alive until it is
	 * freed (the reclaim rule, lib/discovery/discovery.h). */
	if (!call->hold)
		call->hold = mtd_worker_hold(call->w);
	const struct mtd_runtime *rt = call->hold->rt;
	/* An inbound peer's call goes to its listener's app, whatever the
	 * :path names (io/inbound.h); the app's own calls take the routes
	 * first, then :path. */
	*xr = (struct mtd_policy_xroute){0};
	int si = call->inbound ? mtd_call_inbound_route(rt, call) : mtd_policy_route(rt, call, rp, xr);
	call->xroute = xr->route;
	if (si < 0) {
		call->svc = NULL; /* nothing of an older snapshot stays routed */
		call->method = NULL;
		return false;
	}
	call->svc = rt->services[si];
	const struct mtd_cfg_service *sc = call->svc->cfg;
	const struct mtd_cfg_method *m = mtd_cfg_service_method(sc, rp->method, rp->method_len);
	call->method = m ? &call->svc->methods[m - sc->methods] : NULL;
	call->fault = xr->fault ? xr->fault : m ? &m->fault : &sc->local->fault;
	return true;
}

/* Route the call by its :path again (checked when it started) on the
 * worker's current snapshot; false when no service has that name any more. */
static bool route_by_path(struct mtd_call *call)
{
	nghttp2_nv path_buf;
	const nghttp2_nv *path = mtd_headers_find(&call->req_hdrs, ":path", &path_buf);
	struct mtd_route_path rp;
	struct mtd_policy_xroute xr;
	return path && mtd_route_parse_path((const char *)path->value, path->valuelen, &rp) >= 0 &&
	       route(call, &rp, &xr);
}

/* Route a call again (a re-send, or its endpoint gone while it waited) on
 * the worker's current snapshot. Its :path was checked when it started;
 * false when no service has that name any more, the call failed so. */
static bool route_again(struct mtd_call *call)
{
	if (call->bg && call->bg->mirror) {
		/* A mirror copy goes to its mirror entry only (mirror.c). */
		mtd_call_fail(call, MTD_GRPC_UNAVAILABLE, "mirror copy: its endpoint left the mirror entry");
		return false;
	}
	if (!route_by_path(call)) {
		mtd_call_fail(call, MTD_GRPC_UNAVAILABLE, "service no longer in maitred's config");
		return false;
	}
	return true;
}

bool mtd_call_route_current(struct mtd_call *call)
{
	/* What this turn read of the old snapshot stays valid until its end. */
	mtd_worker_unhold_later(call->w, call->hold);
	call->hold = NULL;
	return route_by_path(call);
}

/* The call's first pick, once routed and past its policy. */
static void proceed(struct mtd_call *call)
{
	if (call->state == MTD_CALL_WAIT_KEY) {
		/* Hashing a message field: the pick waits for the first message
		 * (or its first KEY_LOOKAHEAD bytes). */
		if (call->req_eof || call->key_ready || call->req_scan.messages > 1)
			pick_with_field_key(call, false);
		return;
	}
	mtd_call_start_keyed(call, false);
}

static void on_delay(struct mtd_timer *t)
{
	struct mtd_call *call = MTD_CONTAINER_OF(t, struct mtd_call, retry);
	call->delayed = false;
	if (call->state != MTD_CALL_DONE && !call->down_closed)
		proceed(call);
	mtd_call_release(call); /* the timer let go */
}

void mtd_call_start(struct mtd_call *call)
{
	nghttp2_nv path_buf;
	const nghttp2_nv *path = mtd_headers_find(&call->req_hdrs, ":path", &path_buf);
	struct mtd_route_path rp;
	if (!path || mtd_route_parse_path((const char *)path->value, path->valuelen, &rp) < 0) {
		mtd_call_fail(call, MTD_GRPC_UNIMPLEMENTED, "malformed gRPC path \"%.*s\"",
		              path ? (int)(path->valuelen > 200 ? 200 : path->valuelen) : 0,
		              path ? (const char *)path->value : "");
		return;
	}
	struct mtd_policy_xroute xr;
	bool routed = route(call, &rp, &xr);
	if (!routed && xr.awaiting) {
		if (mtd_call_park_for_routes(call))
			return;
		call->routes_waited = true; /* it may not wait: by :path now */
		routed = route(call, &rp, &xr);
	}
	call->routes_waited = true;
	if (!routed) {
		if (xr.failed)
			mtd_call_fail(call, MTD_GRPC_UNAVAILABLE, "xds: %s matches %.*s and has no cluster", xr.failed,
			              (int)(rp.service_len > 200 ? 200 : rp.service_len), rp.service);
		else
			mtd_call_fail(call, MTD_GRPC_UNIMPLEMENTED,
			              "unknown service %.*s: no route in maitred's config",
			              (int)(rp.service_len > 200 ? 200 : rp.service_len), rp.service);
		return;
	}
	/* Counted from here on as its service's (a refusal below included). */
	mtd_call_routed(call, (const char *)path->value, path->valuelen, rp.service_len);
	/* Traffic policy: rate_limit, fault_injection's abort. */
	if (!mtd_policy_admit(call))
		return;
	/* Circuit breaking: past the service's limit the call ends at once
	 * rather than queue behind an overloaded backend. */
	uint32_t max_calls = call->svc->cfg->circuit.max_calls;
	if (max_calls) {
		if (!mtd_call_count_load(call, call->svc->load, max_calls)) {
			mtd_metrics_circuit_rejected(call, MTD_MX_CIRCUIT_MAX_CALLS);
			mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED,
			              "circuit breaker: service %s has circuit_breaker.max_calls (%u) calls in flight",
			              call->svc->cfg->local->name, max_calls);
			return;
		}
	}
	if (call->svc->cfg->local->retry_budget.set)
		mtd_fault_budget_call(call->svc->budget, call->start_ns / 1000000000);
	nghttp2_nv tmo_buf;
	const nghttp2_nv *tmo = mtd_headers_find(&call->req_hdrs, "grpc-timeout", &tmo_buf);
	if (tmo || xr.deadline_cap_ms > 0) {
		int64_t ns = INT64_MAX;
		if (tmo && mtd_grpc_timeout_parse((const char *)tmo->value, tmo->valuelen, &ns) < 0) {
			mtd_call_fail(call, MTD_GRPC_INTERNAL, "malformed grpc-timeout \"%.*s\"",
			              (int)(tmo->valuelen > 32 ? 32 : tmo->valuelen), (const char *)tmo->value);
			return;
		}
		if (ns <= 0) {
			mtd_call_fail(call, MTD_GRPC_DEADLINE_EXCEEDED, "deadline exceeded before the call started");
			return;
		}
		/* A control plane's route caps the deadline (max_stream_duration). */
		if (xr.deadline_cap_ms > 0 && ns > xr.deadline_cap_ms * 1000000)
			ns = xr.deadline_cap_ms * 1000000;
		/* Far deadlines (beyond ~100 days) are as good as none. */
		if (ns < (int64_t)100 * 86400 * 1000000000) {
			/* From the exact clock, not the call's start (the turn's
			 * clock, turn.h): a request read late in a long turn may
			 * have been sent after the turn began, its app's deadline
			 * counting from then. */
			call->deadline_ns = mtd_now_ns() + ns;
			if (mtd_worker_timer_arm(call->w, &call->deadline, on_deadline, ns) < 0) {
				mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
				return;
			}
		}
	}
	bool field_key = call_hash_key(call)->kind == MTD_CFG_HASH_FIELD;
	if (field_key) {
		call->state = MTD_CALL_WAIT_KEY; /* the first message is captured from now on */
		capture_queued(call);
	}
	int64_t delay = mtd_policy_delay_ns(call);
	if (delay > 0) {
		/* fault_injection delay: within the deadline (armed above, it
		 * may end the call first), then on as if it had just come. */
		if (mtd_worker_timer_arm(call->w, &call->retry, on_delay, delay) < 0) {
			mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
			return;
		}
		call->delayed = true;
		return;
	}
	proceed(call);
}

void mtd_call_start_bg(struct mtd_call *call)
{
	if (!call->svc) {
		/* Routed once, on the snapshot of its first re-send that has its
		 * service, which it holds until it ends. A try that found no
		 * service let go of that snapshot: this one routes on the
		 * worker's current one. */
		mtd_worker_unhold_later(call->w, call->hold);
		call->hold = NULL;
		if (!route_again(call))
			return;
		mtd_worker_unhold_later(call->w, call->bg->origin); /* its fault policy is the new snapshot's */
		call->bg->origin = NULL;
	}
	/* A new try: every endpoint is eligible again. */
	if (call->tried) {
		size_t words = (call->svc->n_eps + 63) / 64;
		memset(call->tried, 0, words * sizeof(*call->tried));
		memset(call->refused, 0, words * sizeof(*call->refused));
		call->n_tried = 0;
	}
	call->state = MTD_CALL_RUNNING;
	call->deadline_ns = call->bg->timeout_ms ? mtd_now_ns() + call->bg->timeout_ms * 1000000 : 0;
	mtd_call_start_keyed(call, false);
}

/* After a reroute (call->svc the new snapshot's service, its bitmaps
 * NULL): the bitmaps over its endpoints, with the marks of old (the
 * snapshot it moved from) for the endpoints both hold. False when the
 * call failed instead (out of memory). */
static bool carry_tried(struct mtd_call *call, const struct mtd_rt_service *old, const uint64_t *tried,
                        const uint64_t *refused)
{
	const struct mtd_rt_service *svc = call->svc;
	if (!tried_bitmaps(call, svc->n_eps))
		return false;
	for (size_t i = 0; old && i < old->n_eps; i++) {
		bool t = mtd_bit_get(tried, i), r = mtd_bit_get(refused, i);
		if (!t && !r)
			continue;
		for (size_t j = 0; j < svc->n_eps; j++) {
			if (svc->eps[j] != old->eps[i])
				continue;
			if (t) {
				mtd_bit_set(call->tried, j);
				call->n_tried++;
			}
			if (r)
				mtd_bit_set(call->refused, j);
			break;
		}
	}
	return true;
}

void mtd_call_reroute(struct mtd_attempt *a)
{
	struct mtd_call *call = a->call;
	const struct mtd_rt_service *old_svc = NULL;
	uint64_t *old_tried = NULL, *old_refused = NULL, inline_words[2];
	bool old_alloc = false;
	/* Nothing of the call reached the removed endpoint: nobody is blamed
	 * (the attempt ends neutral) and no retry is spent. */
	mtd_attempt_cancel(a);
	const struct mtd_fault_mode_ops *mode = mtd_call_mode(call);
	if (mode->on_reroute && mode->on_reroute(call))
		goto out;
	if (call->state == MTD_CALL_DONE || call->hold_prev) {
		/* Done, or moved once already with attempts of the first
		 * snapshot still around: let it fail where it is. */
		if (call->state != MTD_CALL_DONE)
			mtd_call_fail(call, MTD_GRPC_UNAVAILABLE, "endpoint %s left service %s",
			              mtd_endpoint_text(a->ep), call->svc->cfg->local->name);
		goto out;
	}
	/* The new snapshot's indices differ: what was tried (and refused)
	 * is carried by endpoint identity (carry_tried, once routed again),
	 * so that FAILOVER's "never an endpoint already tried" holds across
	 * the move; the old bitmaps are read until then. */
	old_svc = call->svc;
	old_tried = call->tried;
	old_refused = call->refused;
	inline_words[0] = call->tried_inline;
	inline_words[1] = call->refused_inline;
	if (old_tried == &call->tried_inline) {
		old_tried = &inline_words[0];
		old_refused = &inline_words[1];
	}
	old_alloc = old_tried && call->tried != &call->tried_inline;
	call->tried = call->refused = NULL;
	call->tried_inline = call->refused_inline = 0;
	call->n_tried = 0;
	/* Attempts of the old snapshot not freed yet still read its pickers;
	 * with none, what this turn read of it stays valid until its end. */
	if (LIST_EMPTY(&call->attempts)) {
		mtd_worker_unhold_later(call->w, call->hold);
		/* The access log's endpoint was the old snapshot's: it may be
		 * gone by the time the call ends (its next attempt sets one). */
		call->mx_ep = NULL;
		call->mx_ep_answered = false;
	}
	else
		call->hold_prev = call->hold;
	call->hold = NULL;
	if (!route_again(call))
		goto out;
	if (old_tried && !carry_tried(call, old_svc, old_tried, old_refused))
		goto out;
	MTD_DEBUG("call: endpoint removed while waiting; picking again in the current snapshot");
	mtd_call_start_keyed(call, false); /* a field key's message was captured before */
out:
	if (old_alloc)
		free(old_tried);
	mtd_call_release(call);
}

void mtd_call_on_req_data(struct mtd_call *call, const uint8_t *p, size_t n)
{
	struct mtd_conn *down = call->down;
	uint32_t max = call->w->rt->cfg->downstream.max_message_size;
	bool waiting = call->state == MTD_CALL_WAIT_KEY;
	call->bytes_in += n;
	int rc = mtd_grpc_scan(&call->req_scan, p, n, max, waiting ? capture_first_message : NULL, call);
	if (rc == MTD_GRPC_SCAN_TOO_BIG) {
		mtd_down_consume(down, call->down_sid, n);
		mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "request message larger than the limit of %u bytes",
		              max);
		return;
	}
	if (rc < 0) {
		mtd_down_consume(down, call->down_sid, n);
		mtd_call_fail(call, MTD_GRPC_INTERNAL, "malformed gRPC message prefix in the request");
		return;
	}
	if (call->req_sink) {
		/* The answering upstream already finished (it answered before
		 * reading the whole request): nobody will read these bytes. */
		mtd_down_consume(down, call->down_sid, n);
		return;
	}
	if (mtd_bufq_append(&call->req, p, n) < 0) {
		mtd_down_consume(down, call->down_sid, n);
		mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	call->req_unconsumed += n;
	if (call->req_scan.messages > 1 && call->fault && mtd_call_mode(call)->holds_answer) {
		/* Unary is BROADCAST's contract: a stream cannot be answered once. */
		mtd_call_fail(call, MTD_GRPC_UNIMPLEMENTED,
		              "BROADCAST is for unary calls: the request carried a second message");
		return;
	}
	if (waiting && !call->delayed && (call->key_ready || call->req_scan.messages > 1))
		pick_with_field_key(call, false);
	resume_attempts(call);
}

void mtd_call_on_req_end(struct mtd_call *call)
{
	call->req_eof = true;
	if (call->state == MTD_CALL_WAIT_KEY && !call->delayed)
		pick_with_field_key(call, false);
	resume_attempts(call);
	mtd_mirror_start(call); /* the copy, once the request is whole */
}

void mtd_call_on_down_close(struct mtd_call *call, uint32_t error_code)
{
	mtd_mirror_primary_ended(call); /* a mirror copy still running is cancelled */
	if (call->req_unconsumed) {
		/* The stream is gone; its connection window is not. */
		call->req_unconsumed = 0;
	}
	if (!call->resp_done) {
		/* The client cancelled (RST_STREAM) or went away: not the
		 * endpoints' doing, so nobody is blamed. */
		MTD_DEBUG("call: client ended the stream (%s)", nghttp2_http2_strerror(error_code));
		mtd_worker_timer_disarm(call->w, &call->deadline);
		call->resp_done = true;
		mtd_call_settle(call);
		mtd_relay_drop(call);
	} else {
		/* Every end of the answer settled the call; an attempt still live
		 * now would be one nobody ends: cancelled all the same. */
		mtd_call_settle(call);
		if (!call->req_eof) {
			/* The response ended but the request half is still open
			 * upstream: no more request bytes and no END_STREAM can come,
			 * so the stream would stay open for ever. Cancel it
			 * (PROTOCOL-HTTP2: RST_STREAM CANCEL). */
			struct mtd_attempt *a;
			LIST_FOREACH(a, &call->attempts, call_link)
				if (a->s.conn) {
					MTD_DEBUG("call: client ended the stream (%s) before its request ended; "
					          "cancelling upstream",
					          nghttp2_http2_strerror(error_code));
					mtd_attempt_reset_stream(a);
				}
		}
	}
	mtd_bufq_clear(&call->req);
	release_retained(call);
	mtd_call_release(call);
}
