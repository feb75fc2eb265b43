/* An attempt: one upstream try of a call, from its pick to its stream's
 * close. Its states are lib/fault/attempt.c's (every change goes through
 * mtd_attempt_step); a failed attempt asks mtd_fault_decide() what the
 * call does next and carries the verdict out here, in one place.
 *
 * What the balancer learns: an attempt counts against its
 * endpoint only for what the endpoint did (connect or TLS failure, a reset,
 * a status in outlier_detection.failure_statuses, a per-try timeout); a client
 * cancel, a deadline, a refused stream or a call maitred ended itself is
 * neutral. Latency is measured to the first response message (or the
 * answer's end when it has none), so a long stream does not make its
 * instance look slow; not to the response headers, which a server may send
 * before it works (grpcio's send_initial_metadata). */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/bits.h"
#include "core/clock.h"
#include "discovery/discovery.h"
#include "health/outlier.h"
#include "lb/lb.h"
#include "sidecar/call/attempt.h"
#include "sidecar/call/call.h"
#include "sidecar/call/failback.h"
#include "sidecar/call/headers.h"
#include "sidecar/call/mode/mode.h"
#include "sidecar/call/relay.h"
#include "sidecar/call/trace.h"
#include "sidecar/control/runtime.h"
#include "sidecar/io/conn.h"
#include "sidecar/io/pool.h"
#include "sidecar/ops/metrics.h"
#include "sidecar/turn.h"

static void on_timeout(struct mtd_timer *t);

struct mtd_attempt *mtd_attempt_new(struct mtd_call *call)
{
	struct mtd_attempt *a = mtd_slab_calloc(&call->w->slab, 1, sizeof(*a));
	if (!a)
		return NULL;
	a->call = call;
	a->state = MTD_ATTEMPT_BACKOFF;
	a->index = call->n_attempts++;
	a->ep_idx = -1;
	a->s.ops = &mtd_attempt_stream_ops;
	LIST_INSERT_HEAD(&call->attempts, a, call_link);
	int64_t ms = call->fault->per_try_timeout_ms;
	if (call->bg && call->bg->timeout_ms > 0 && (ms <= 0 || call->bg->timeout_ms < ms))
		ms = call->bg->timeout_ms; /* a FAILBACK re-send's own deadline */
	if (ms > 0 && mtd_worker_timer_arm(call->w, &a->timer, on_timeout, ms * 1000000) < 0) {
		LIST_REMOVE(a, call_link);
		call->n_attempts--;
		mtd_slab_free(&call->w->slab, a);
		return NULL;
	}
	return a;
}

bool mtd_attempt_step(struct mtd_attempt *a, enum mtd_attempt_event ev)
{
	int next = mtd_fault_attempt_step(a->state, ev);
	if (next < 0) {
		MTD_DEBUG("attempt %u: event %d in state %s ignored", a->index, (int)ev,
		          mtd_fault_attempt_state_name(a->state));
		return false;
	}
	a->state = (enum mtd_attempt_state)next;
	return true;
}

static void disarm(struct mtd_attempt *a)
{
	mtd_worker_timer_disarm(a->call->w, &a->timer);
}

/* True when an upstream status counts as the endpoint's failure
 * (outlier_detection.failure_statuses, default UNAVAILABLE, INTERNAL,
 * UNKNOWN, DATA_LOSS). */
static bool status_blames(const struct mtd_call *call, int st)
{
	return st > 0 && st < 32 && ((call->svc->cfg->local->failure_statuses >> st) & 1u);
}

/* hedge_delay AUTO learns how long a call's attempts go unanswered: one
 * sample per attempt that was not a hedge, its latency when it answered,
 * or the time it had gone without an answer when another attempt's answer
 * made it lose (a lower bound: it was slower than that). Without the
 * losers, the slow attempts that hedges beat were replaced by their fast
 * hedges, the estimate saw only the fast ones, and its p95 hedged 5 % of
 * the fast calls on top of every slow one; with them, about
 * 5 % of the calls wait past the p95 and are hedged, "The Tail at Scale"'s
 * bound (Dean and Barroso, CACM 2013: hedge after the p95, about 5 % more
 * requests). A hedge's own latency is left out: it began late, and would
 * be a second sample of its call. */
static void hedge_learn(struct mtd_attempt *a, bool answered, int64_t latency_us)
{
	struct mtd_call *call = a->call;
	if (a->hedge || call->fault->hedge_delay_ms != MTD_FAULT_HEDGE_AUTO)
		return;
	if (answered || (call->ans && call->ans != a))
		mtd_metrics_hedge_sample(call, latency_us);
}

/* The field called endpoint-load-metrics-bin of h, in *nv; false if none.
 * A walk of its own rather than mtd_headers_find: one more call site of
 * that (even a cold one) made LTO stop inlining it into the call path's
 * status lookups, +460 instructions per call under ROUND_ROBIN. */
static bool orca_field(const struct mtd_headers *h, nghttp2_nv *nv)
{
	static const char name[] = "endpoint-load-metrics-bin";
	for (uint32_t off = 0; mtd_headers_next(h, &off, nv);)
		if (nv->namelen == sizeof(name) - 1 && memcmp(nv->name, name, sizeof(name) - 1) == 0)
			return true;
	return false;
}

/* The attempt's ORCA load report (in its trailers, or in its headers for
 * a Trailers-Only answer) into res, as received: pointers into the
 * attempt's header block, which lib/lb decodes once, on its stack; what
 * the app receives is not touched. Out of line: only
 * CLIENT_SIDE_WEIGHTED_ROUND_ROBIN's calls come here. */
static __attribute__((noinline)) void orca_report_of(const struct mtd_attempt *a, struct mtd_lb_result *res,
                                                     int64_t now)
{
	nghttp2_nv nv;
	if (!orca_field(&a->resp_trailers, &nv) && !orca_field(&a->resp_hdrs, &nv))
		return;
	res->orca = nv.value;
	res->orca_len = nv.valuelen;
	res->now_ns = now;
}

/* Tell the balancer, and outlier detection, how the endpoint did, once
 * per attempt. */
void mtd_attempt_lb_end(struct mtd_attempt *a, bool ok, bool neutral)
{
	if (!a->lb_begun)
		return;
	a->lb_begun = false;
	int64_t now = mtd_turn_now_ns(a->call->w);
	int64_t until = a->first_ns ? a->first_ns : now;
	struct mtd_lb_result res = {.ok = ok, .neutral = neutral, .latency_us = (until - a->start_ns) / 1000};
	/* Only a policy that reads load reports pays for looking. */
	if (!neutral && a->picker && (a->picker->ops->caps & MTD_LB_CAP_ORCA))
		orca_report_of(a, &res, now);
	if (ok && !neutral)
		hedge_learn(a, true, res.latency_us);
	if (a->layer)
		mtd_lb_layer_call_end(a->layer, (size_t)a->ep_idx, &res, now);
	else
		mtd_lb_call_end(a->picker, (size_t)a->ep_idx, &res, now);
	struct mtd_outlier_set *os = a->outliers;
	if (!neutral && os && mtd_outlier_report(os, (size_t)a->ep_idx, !ok, now / 1000000))
		MTD_WARN("service %s: endpoint %s ejected (outlier detection: %u failures in a row), for %lld ms",
		         a->call->svc->cfg->local->name, mtd_endpoint_text(a->ep), os->cfg.consecutive_failures,
		         (long long)mtd_outlier_ejection_ms(&os->cfg,
		                                            atomic_load(&os->entries[a->ep_idx].times_ejected)));
}

/* The endpoint the call's access-log line names (call->mx_ep, read when
 * the call ends): the answering attempt's, else the last one released. */
static void note_endpoint(struct mtd_attempt *a)
{
	struct mtd_call *call = a->call;
	if (!a->ep || call->mx_ep_answered)
		return;
	call->mx_ep = a->ep;
	call->mx_ep_answered = call->ans == a;
}

void mtd_attempt_release(struct mtd_attempt *a)
{
	if (a->released || mtd_fault_attempt_live(a->state) || a->s.conn)
		return;
	struct mtd_call *call = a->call;
	a->released = true;
	disarm(a);
	mtd_attempt_lb_end(a, true, true);
	note_endpoint(a);
	mtd_call_trace_attempt_end(a); /* before its answer's headers go */
	if (call->cur == a)
		call->cur = NULL;
	if (call->ans == a)
		call->ans = NULL;
	if (call->bc && call->bc->ans == a)
		call->bc->ans = NULL;
	mtd_headers_clear(&a->resp_hdrs, &call->w->slab);
	mtd_headers_clear(&a->resp_trailers, &call->w->slab);
	/* Out of the call's list (it no longer holds the call), onto the
	 * worker's reap list: freed at the end of the turn (call-t.h). */
	LIST_REMOVE(a, call_link);
	LIST_INSERT_HEAD(&call->w->reap_attempts, a, call_link);
	mtd_worker_schedule_flush(call->w);
	mtd_call_release(call);
}

void mtd_attempt_reset_stream(struct mtd_attempt *a)
{
	if (!a->s.conn)
		return;
	/* Cancellation reaches the upstream (PROTOCOL-HTTP2: RST_STREAM CANCEL). */
	nghttp2_submit_rst_stream(a->s.conn->ng, NGHTTP2_FLAG_NONE, a->s.sid, NGHTTP2_CANCEL);
	mtd_conn_want_flush(a->s.conn);
}

void mtd_attempt_cancel(struct mtd_attempt *a)
{
	if (!mtd_fault_attempt_live(a->state))
		return;
	mtd_pool_dequeue(&a->s);
	mtd_attempt_step(a, MTD_AEV_CANCEL);
	disarm(a);
	mtd_attempt_reset_stream(a);
	if (a->lb_begun)
		hedge_learn(a, false, (mtd_turn_now_ns(a->call->w) - a->start_ns) / 1000); /* lost the race, if it did */
	mtd_attempt_lb_end(a, true, true);
	if (a->call->cur == a)
		a->call->cur = NULL;
	mtd_attempt_release(a);
}

void mtd_attempt_on_stream(struct mtd_attempt *a)
{
	mtd_attempt_step(a, MTD_AEV_STREAM);
}

/* ---- the policy's verdict ---------------------------------------------- */

static void on_retry(struct mtd_timer *t)
{
	struct mtd_call *call = MTD_CONTAINER_OF(t, struct mtd_call, retry);
	mtd_call_next_attempt(call);
	mtd_call_release(call);
}

/* Whether a's endpoint index is one of the call's bitmaps' (tried,
 * refused): they are over the endpoints of the call's current snapshot,
 * and after a reroute an attempt of the snapshot before has an index into
 * that one's endpoints. Its marks would name another endpoint, or fall
 * past the bitmaps when the set shrank: they are dropped. */
static bool marks_apply(const struct mtd_attempt *a)
{
	const struct mtd_call *call = a->call;
	const struct mtd_rt_service *svc = call->svc;
	return svc && call->tried && a->ep_idx >= 0 && (size_t)a->ep_idx < svc->n_eps &&
	       svc->eps[a->ep_idx] == a->ep;
}

/* a ended without an answer the call can use: count it, then do what
 * the policy says. status/what: FAILFAST's answer (what names the endpoint
 * and what happened). a is not freed here (the caller does, last): it
 * keeps the call alive meanwhile. */
void mtd_attempt_failed(struct mtd_attempt *a, const struct mtd_fault_outcome *o, enum mtd_grpc_status status,
                        const char *what)
{
	struct mtd_call *call = a->call;
	const struct mtd_rt_service *svc = call->svc;
	bool blamed = o->failure == MTD_FAULT_CONNECT || o->failure == MTD_FAULT_RESET ||
	              o->failure == MTD_FAULT_TIMEOUT ||
	              (o->failure == MTD_FAULT_STATUS && status_blames(call, o->status));
	mtd_pool_dequeue(&a->s);
	mtd_attempt_step(a, MTD_AEV_FAIL);
	disarm(a);
	mtd_attempt_reset_stream(a);
	mtd_attempt_lb_end(a, !blamed, o->failure == MTD_FAULT_REFUSED);
	if (call->cur == a)
		call->cur = NULL;
	bool refused_before = false;
	size_t idx = (size_t)a->ep_idx, n = marks_apply(a) ? svc->n_eps : 0;
	if (o->failure == MTD_FAULT_REFUSED) {
		refused_before = mtd_bit_get_in(call->refused, n, idx);
		mtd_bit_set_in(call->refused, n, idx);
	} else if (!mtd_bit_get_in(call->tried, n, idx) && mtd_bit_set_in(call->tried, n, idx)) {
		call->n_tried++;
	}
	free(call->last_failure);
	call->last_failure = strdup(what);
	call->last_status = status;
	if (call->state == MTD_CALL_DONE)
		return;
	/* Its client's close is recorded, the ready list settles the call at
	 * the end of the turn: nobody to answer, and no fault action for it
	 * (a FAILBACK copy queued here would re-send a call its client
	 * cancelled). */
	if (call->down_closed)
		return;
	const struct mtd_fault_mode_ops *mode = mtd_call_mode(call);
	if (mode->on_failure && mode->on_failure(a, o, status, what, refused_before))
		return;
	/* The exact clock, not the turn's (turn.h): whether a retry can start
	 * before the deadline must not be judged as long before as the turn
	 * began. A failure's path, not every call's: the read is not one the
	 * turn's clock saves. */
	int64_t now = mtd_now_ns();
	struct mtd_fault_call fc = {
	        .retries_done = call->retries_done,
	        .committed = call->committed,
	        .answered = call->resp_headers_sent,
	        .endpoint_left = call->n_tried < svc->n_eps,
	        .refused_here_before = refused_before,
	        .now_ns = now,
	        .deadline_ns = call->deadline_ns,
	};
	struct mtd_fault_decision d;
	mtd_fault_decide(call->fault, o, &fc, svc->budget, &svc->cfg->local->retry_budget, &call->w->rng, &d);
	mtd_metrics_fault_decision(call, &d);
	if (call->bg && d.action != MTD_FAULT_RETRY) {
		/* A FAILBACK re-send: nobody to answer; try again later. */
		mtd_failback_failed(call, what);
		return;
	}
	switch (d.action) {
	case MTD_FAULT_RETRY:
		if (!d.transparent)
			call->retries_done++;
		MTD_DEBUG("call: %s; %s %u%s", what, d.transparent ? "replaying, attempt" : "retrying, attempt",
		          call->n_attempts + 1, d.delay_ns ? " after a backoff" : "");
		if (d.delay_ns > 0) {
			if (mtd_worker_timer_arm(call->w, &call->retry, on_retry, d.delay_ns) < 0)
				mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
		} else {
			/* Not on this stack: it may be the failing start's own. */
			mtd_call_next_attempt_later(call);
		}
		break;
	case MTD_FAULT_SAFE_OK:
		if (mode->on_answered_anyway)
			mode->on_answered_anyway(call, what, d.action);
		mtd_call_answer_ok(call, NULL, 0);
		break;
	case MTD_FAULT_FALLBACK: {
		const struct mtd_fault_fallback *fb = &call->fault->fallback;
		MTD_DEBUG("call: %s; answering with the fallback", what);
		if (mode->on_answered_anyway)
			mode->on_answered_anyway(call, what, d.action);
		if (fb->status == MTD_GRPC_OK)
			mtd_call_answer_ok(call, fb->response, fb->response_len);
		else
			mtd_call_fail(call, (enum mtd_grpc_status)fb->status, "%s", fb->message ? fb->message : "");
		break;
	}
	case MTD_FAULT_FAIL:
	case MTD_FAULT_RELAY:
	default:
		if (o->failure == MTD_FAULT_STATUS && a->resp_headers_in && !call->resp_headers_sent &&
		    !d.budget_exhausted && !d.pushback_stop) {
			/* The upstream's own Trailers-Only answer, as it gave it. */
			call->ans = a;
			mtd_call_settle(call);
			mtd_relay_headers(call, a, true);
		} else {
			mtd_call_fail(call, status, "%s%s%s", what,
			              d.budget_exhausted ? " (retry budget exhausted)"
			              : d.pushback_stop  ? " (the server asked not to retry)"
			                                 : "",
			              !fc.endpoint_left && svc->n_eps > 1 && !d.budget_exhausted && !d.pushback_stop &&
			                              mode->fails_over
			                      ? " (and no other endpoint is left)"
			                      : "");
		}
		break;
	}
}

static void on_timeout(struct mtd_timer *t)
{
	struct mtd_attempt *a = MTD_CONTAINER_OF(t, struct mtd_attempt, timer);
	char msg[192];
	snprintf(msg, sizeof(msg), "upstream %s: no response within the per-try timeout (%lld ms)",
	         mtd_endpoint_text(a->ep), (long long)a->call->fault->per_try_timeout_ms);
	struct mtd_fault_outcome o = {.failure = MTD_FAULT_TIMEOUT};
	mtd_attempt_failed(a, &o, MTD_GRPC_DEADLINE_EXCEEDED, msg);
	mtd_attempt_release(a);
}

void mtd_attempt_connect_failed(struct mtd_attempt *a, const char *reason)
{
	struct mtd_fault_outcome o = {.failure = MTD_FAULT_CONNECT};
	mtd_attempt_failed(a, &o, MTD_GRPC_UNAVAILABLE, reason);
	mtd_attempt_release(a);
}

void mtd_attempt_conn_lost(struct mtd_attempt *a, const char *reason)
{
	struct mtd_call *call = a->call;
	if (a->state == MTD_ATTEMPT_OPEN || a->state == MTD_ATTEMPT_ANSWERING) {
		struct mtd_fault_outcome o = {.failure = MTD_FAULT_RESET};
		mtd_attempt_failed(a, &o, MTD_GRPC_UNAVAILABLE, reason);
	}
	if ((a == call->ans || a->state == MTD_ATTEMPT_DONE) && !mtd_call_mode(call)->holds_answer)
		mtd_call_drop_request(call);
	mtd_attempt_release(a);
}

/* ---- response ---------------------------------------------------------- */

/* The block's grpc-status as a number; -1 if missing or malformed. */
int mtd_attempt_status_of(const struct mtd_headers *h)
{
	nghttp2_nv buf;
	const nghttp2_nv *st = mtd_headers_find(h, "grpc-status", &buf);
	return st ? mtd_grpc_status_parse(st->value, st->valuelen) : -1;
}

/* The response's :status as a number; -1 if missing or not 3 digits
 * (nghttp2 checks responses for RFC 9113 §8.3.2, so that is a guard). */
static int http_status(const struct mtd_headers *h)
{
	nghttp2_nv buf;
	const nghttp2_nv *st = mtd_headers_find(h, ":status", &buf);
	return st ? mtd_http_status_parse(st->value, st->valuelen) : -1;
}

/* An HTTP answer that is not gRPC (an ingress's or proxy's error page, a
 * plain HTTP server): replace its headers with the Trailers-Only answer it
 * means, by gRPC's http-grpc-status-mapping.md, naming the HTTP status
 * (and, for a 200, the content-type that makes it not gRPC). 0 or -ENOMEM. */
static int translate_http_answer(struct mtd_attempt *a, int http)
{
	char code[8], msg[224], enc[704];
	int clen = snprintf(code, sizeof(code), "%d", (int)mtd_grpc_status_from_http(http));
	nghttp2_nv ct_buf;
	const nghttp2_nv *ct = mtd_headers_find(&a->resp_hdrs, "content-type", &ct_buf);
	if (http == 200)
		snprintf(msg, sizeof(msg), "upstream %s answered HTTP 200 with content-type \"%.*s\", not gRPC",
		         mtd_endpoint_text(a->ep), ct ? (int)(ct->valuelen > 64 ? 64 : ct->valuelen) : 0,
		         ct ? (const char *)ct->value : "");
	else
		snprintf(msg, sizeof(msg), "upstream %s answered HTTP %d without grpc-status", mtd_endpoint_text(a->ep),
		         http);
	size_t elen = mtd_grpc_message_encode(msg, enc, sizeof(enc));
	struct mtd_headers *h = &a->resp_hdrs;
	struct mtd_slab *slab = &a->call->w->slab;
	mtd_headers_clear(h, slab);
	int rc = 0;
	rc |= mtd_headers_add(h, slab, (const uint8_t *)":status", 7, (const uint8_t *)"200", 3, 0);
	rc |= mtd_headers_add(h, slab, (const uint8_t *)"content-type", 12, (const uint8_t *)"application/grpc", 16, 0);
	rc |= mtd_headers_add(h, slab, (const uint8_t *)"grpc-status", 11, (const uint8_t *)code, (size_t)clen, 0);
	rc |= mtd_headers_add(h, slab, (const uint8_t *)"grpc-message", 12, (const uint8_t *)enc, elen, 0);
	return rc ? -ENOMEM : 0;
}

void mtd_attempt_on_resp_headers(struct mtd_attempt *a, bool end_stream)
{
	struct mtd_call *call = a->call;
	a->resp_headers_in = true;
	if (a->state != MTD_ATTEMPT_OPEN || call->state == MTD_CALL_DONE || (!call->down && !call->bg) ||
	    call->resp_done || call->resp_eof)
		return;
	int http = http_status(&a->resp_hdrs);
	nghttp2_nv buf;
	if ((http != 200 || !a->resp_grpc) && !mtd_headers_find(&a->resp_hdrs, "grpc-status", &buf)) {
		if (translate_http_answer(a, http) < 0) {
			mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
			return;
		}
		/* From here it is a Trailers-Only answer; its body is not read. */
		if (!end_stream)
			mtd_attempt_reset_stream(a);
		end_stream = true;
	}
	if (end_stream)
		a->first_ns = mtd_turn_now_ns(a->call->w);
	disarm(a);
	const struct mtd_fault_mode_ops *mode = mtd_call_mode(call);
	if (end_stream) {
		int st = mtd_attempt_status_of(&a->resp_hdrs);
		if (mode->holds_answer && st < 0) {
			/* OK only if all are (BROADCAST); no status is not OK. */
			char msg[192];
			snprintf(msg, sizeof(msg), "upstream %s ended the response without grpc-status",
			         mtd_endpoint_text(a->ep));
			struct mtd_fault_outcome o = {.failure = MTD_FAULT_STATUS, .status = MTD_GRPC_INTERNAL};
			mtd_attempt_failed(a, &o, MTD_GRPC_INTERNAL, msg);
			mtd_attempt_release(a);
			return;
		}
		if (st > 0 && (mode->holds_answer || mtd_fault_retry_on(call->fault, st))) {
			struct mtd_fault_outcome o = {.failure = MTD_FAULT_STATUS, .status = st};
			const nghttp2_nv *pb = mtd_headers_find(&a->resp_hdrs, "grpc-retry-pushback-ms", &buf);
			if (pb) {
				/* gRPC A6: malformed or negative = do not retry. */
				o.has_pushback = true;
				if (mtd_fault_pushback_parse((const char *)pb->value, pb->valuelen, &o.pushback_ms) < 0)
					o.pushback_ms = -1;
			}
			nghttp2_nv gbuf;
			const nghttp2_nv *gm = mtd_headers_find(&a->resp_hdrs, "grpc-message", &gbuf);
			char msg[384];
			snprintf(msg, sizeof(msg), "upstream %s answered %s%s%.*s", mtd_endpoint_text(a->ep),
			         mtd_grpc_status_name(st), gm ? ": " : "",
			         gm ? (int)(gm->valuelen > 200 ? 200 : gm->valuelen) : 0,
			         gm ? (const char *)gm->value : "");
			mtd_attempt_failed(a, &o, (enum mtd_grpc_status)st, msg);
			mtd_attempt_release(a);
			return;
		}
		/* The answer, Trailers-Only. */
		mtd_attempt_step(a, MTD_AEV_TRAILERS);
		mtd_attempt_lb_end(a, !status_blames(call, st), false);
		if (call->bg) {
			mtd_failback_done(call); /* delivered */
			return;
		}
		if (mode->on_answer) {
			mode->on_answer(a, true);
			return;
		}
		if (a->hedge)
			mtd_metrics_hedge_won(call);
		call->ans = a;
		mtd_call_settle(call);
		mtd_relay_headers(call, a, true);
		return;
	}
	/* Response headers reach the app: the call is this attempt's now
	 * (never replayed once the app saw its answer begin). */
	mtd_attempt_step(a, MTD_AEV_HEADERS);
	if (call->bg) {
		/* A FAILBACK re-send: its status comes with the trailers; the
		 * response DATA is dropped (nobody reads it). */
		return;
	}
	if (mode->on_answer) {
		mode->on_answer(a, false);
		return;
	}
	if (a->hedge)
		mtd_metrics_hedge_won(call);
	call->ans = a;
	mtd_call_commit(call, a); /* FORKING: the winner */
	mtd_relay_headers(call, a, false);
}

void mtd_attempt_on_resp_data(struct mtd_attempt *a, const uint8_t *p, size_t n)
{
	struct mtd_call *call = a->call;
	const struct mtd_fault_mode_ops *mode = mtd_call_mode(call);
	if (mode->on_data) {
		mode->on_data(a, p, n);
		return;
	}
	if (a != call->ans || a->state != MTD_ATTEMPT_ANSWERING || call->resp_done || call->resp_eof) {
		nghttp2_session_consume(a->s.conn->ng, a->s.sid, n);
		return;
	}
	if (!a->first_ns)
		a->first_ns = mtd_turn_now_ns(a->call->w);
	mtd_relay_data(call, p, n);
}

void mtd_attempt_on_resp_trailers(struct mtd_attempt *a)
{
	struct mtd_call *call = a->call;
	if (call->bg) {
		if (a->state != MTD_ATTEMPT_ANSWERING || call->state == MTD_CALL_DONE)
			return;
		int st = mtd_attempt_status_of(&a->resp_trailers);
		if (st > 0 && mtd_fault_retry_on(call->fault, st)) {
			char msg[192];
			snprintf(msg, sizeof(msg), "upstream %s answered %s", mtd_endpoint_text(a->ep),
			         mtd_grpc_status_name(st));
			struct mtd_fault_outcome o = {.failure = MTD_FAULT_STATUS, .status = st};
			mtd_attempt_failed(a, &o, (enum mtd_grpc_status)st, msg);
			return;
		}
		mtd_attempt_step(a, MTD_AEV_TRAILERS);
		mtd_attempt_lb_end(a, st >= 0 && !status_blames(call, st), false);
		mtd_failback_done(call);
		return;
	}
	const struct mtd_fault_mode_ops *mode = mtd_call_mode(call);
	if (mode->on_trailers) {
		mode->on_trailers(a);
		return;
	}
	if (a != call->ans || a->state != MTD_ATTEMPT_ANSWERING || call->resp_done || call->resp_eof)
		return;
	mtd_attempt_step(a, MTD_AEV_TRAILERS);
	if (!a->first_ns)
		a->first_ns = mtd_turn_now_ns(a->call->w);
	int st = mtd_attempt_status_of(&a->resp_trailers);
	if (st == MTD_GRPC_OK && !mtd_grpc_scan_complete(&call->resp_scan))
		st = MTD_GRPC_INTERNAL; /* its last message cut (mtd_relay_trailers) */
	mtd_attempt_lb_end(a, st >= 0 && !status_blames(call, st), false);
	mtd_relay_trailers(call, a);
}

void mtd_attempt_on_up_close(struct mtd_attempt *a, uint32_t error_code)
{
	struct mtd_call *call = a->call;
	if (a->state == MTD_ATTEMPT_OPEN || a->state == MTD_ATTEMPT_ANSWERING) {
		const char *peer = mtd_endpoint_text(a->ep);
		char msg[192];
		if (call->deadline_ns && mtd_now_ns() >= call->deadline_ns) {
			/* Both deadlines fire together (HACKING.md): ours decides.
			 * The attempt (without a stream now) fails first and the call
			 * is held: settling the call would otherwise free both under
			 * this function (test_deadline_cancel: a reset read between
			 * the deadline and libevent's coarser timer). */
			mtd_attempt_step(a, MTD_AEV_FAIL);
			mtd_call_fail(call, MTD_GRPC_DEADLINE_EXCEEDED, "deadline exceeded");
		} else if (error_code == NGHTTP2_REFUSED_STREAM && a->state == MTD_ATTEMPT_OPEN) {
			/* RFC 9113 §8.7: refused (or above a GOAWAY's last-stream-id,
			 * nghttp2 closes those with REFUSED_STREAM): never processed. */
			snprintf(msg, sizeof(msg), "upstream %s refused the stream", peer);
			struct mtd_fault_outcome o = {.failure = MTD_FAULT_REFUSED};
			mtd_attempt_failed(a, &o, MTD_GRPC_UNAVAILABLE, msg);
		} else {
			enum mtd_grpc_status st = MTD_GRPC_UNAVAILABLE;
			if (error_code == NGHTTP2_NO_ERROR) {
				snprintf(msg, sizeof(msg), "upstream %s closed the stream without a response", peer);
			} else {
				st = mtd_grpc_status_from_h2_error(error_code);
				snprintf(msg, sizeof(msg), "upstream %s reset the stream (%s)", peer,
				         nghttp2_http2_strerror(error_code));
			}
			struct mtd_fault_outcome o = {.failure = MTD_FAULT_RESET};
			mtd_attempt_failed(a, &o, st, msg);
		}
	}
	if ((a == call->ans || a->state == MTD_ATTEMPT_DONE) && !mtd_call_mode(call)->holds_answer)
		mtd_call_drop_request(call); /* bytes nobody will send any more */
	mtd_attempt_release(a);
}
