/* BROADCAST (Dubbo's broadcast cluster): the call goes to every eligible
 * endpoint of its service, and is answered OK only if every one answered
 * OK (with the first complete OK answer, held until then); otherwise the
 * first failure decides, once no attempt is left going. The call must be
 * unary and its request must fit the replay buffer: every attempt reads
 * the request from the call's kept bytes. What is held lives in
 * call->bc (call-t.h), allocated by calls of this mode only. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bits.h"
#include "core/clock.h"
#include "sidecar/call/attempt.h"
#include "sidecar/call/call.h"
#include "sidecar/call/headers.h"
#include "sidecar/call/mode/mode.h"
#include "sidecar/call/relay.h"
#include "sidecar/control/runtime.h"
#include "sidecar/io/conn.h"
#include "sidecar/io/pool.h"
#include "sidecar/ops/metrics.h"
#include "sidecar/turn.h"

/* Dubbo's broadcast cluster: one attempt on every eligible endpoint of the
 * service (not ejected, not found unhealthy, not removed), each replaying
 * the request from the call's retained bytes. How the answers combine is
 * settle's, below. */
static void start(struct mtd_call *call)
{
	struct mtd_rt_service *svc = call->svc;
	if (!call->bc && !(call->bc = mtd_slab_calloc(&call->w->slab, 1, sizeof(*call->bc)))) {
		mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	size_t words = (svc->n_eps + 63) / 64;
	uint64_t stack[16], *scratch = stack;
	if (words > 16 && !(scratch = malloc(words * sizeof(*scratch)))) {
		mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	const uint64_t *ex = mtd_call_excluded_set(call, scratch, words);
	int64_t now = mtd_now_ns();
	uint32_t started = 0;
	for (size_t i = 0; i < svc->n_eps && call->state != MTD_CALL_DONE; i++) {
		if (ex && mtd_bit_get(ex, i))
			continue;
		struct mtd_pool *p = mtd_pool_get(call->w, svc, svc->eps[i]);
		if (!p) {
			mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
			break;
		}
		if (p->retired)
			continue; /* removed by a newer snapshot: not the service's any more */
		if (mtd_call_launch(call, (int)i, p, false, now))
			started++;
	}
	if (scratch != stack)
		free(scratch);
	if (call->state != MTD_CALL_DONE && started == 0) {
		if (svc->n_eps == 0)
			mtd_call_fail(call, MTD_GRPC_UNAVAILABLE, "service %s has no endpoint%s%s",
			              svc->cfg->local->name, svc->unavailable ? ": " : "",
			              svc->unavailable ? svc->unavailable : "");
		else
			mtd_call_fail(call, MTD_GRPC_UNAVAILABLE, "no endpoint available for service %s",
			              svc->cfg->local->name);
	}
	call->cur = NULL; /* no one attempt is "the" attempt */
}

static bool others_live(const struct mtd_call *call)
{
	const struct mtd_attempt *o;
	LIST_FOREACH(o, &call->attempts, call_link)
		if (mtd_fault_attempt_live(o->state))
			return true;
	return false;
}

/* An attempt ended; once none is left going, answer: the held answer, or
 * the policy's verdict on the first failure. */
static void settle(struct mtd_call *call)
{
	if (call->state == MTD_CALL_DONE)
		return;
	bool live = others_live(call);
	if (!call->bc->failed) {
		if (live)
			return;
		if (call->bc->have)
			mtd_call_answer_held(call); /* every endpoint answered OK */
		else
			mtd_call_fail(call, MTD_GRPC_UNAVAILABLE, "no endpoint available for service %s",
			              call->svc->cfg->local->name);
		return;
	}
	/* The first failure decides, once the others ended too. */
	struct mtd_fault_call fc = {
	        .committed = false,
	        .others_live = live,
	        .now_ns = mtd_now_ns(),
	        .deadline_ns = call->deadline_ns,
	        .refused_here_before = true,
	};
	struct mtd_fault_decision d;
	mtd_fault_decide(call->fault, &call->bc->o, &fc, call->svc->budget, &call->svc->cfg->local->retry_budget,
	                 &call->w->rng, &d);
	if (d.action == MTD_FAULT_WAIT)
		return;
	mtd_metrics_fault_decision(call, &d);
	if (d.action == MTD_FAULT_FALLBACK) {
		const struct mtd_fault_fallback *fb = &call->fault->fallback;
		if (fb->status == MTD_GRPC_OK)
			mtd_call_answer_ok(call, fb->response, fb->response_len);
		else
			mtd_call_fail(call, (enum mtd_grpc_status)fb->status, "%s", fb->message ? fb->message : "");
		return;
	}
	mtd_call_fail(call, call->bc->status, "%s (BROADCAST: %u of %u attempts failed)",
	              call->bc->msg ? call->bc->msg : "an attempt failed", call->bc->failures, call->n_attempts);
}

/* A BROADCAST attempt failed: a refused stream is replayed on its own
 * endpoint (gRPC transparent retry, once); any other failure is kept if it
 * is the first, and the call ends once no attempt is left going. */
static bool on_failure(struct mtd_attempt *a, const struct mtd_fault_outcome *o, enum mtd_grpc_status status,
                       const char *what, bool refused_before)
{
	struct mtd_call *call = a->call;
	if (o->failure == MTD_FAULT_REFUSED && !refused_before) {
		struct mtd_fault_call fc = {
		        .others_live = true,
		        .now_ns = mtd_now_ns(),
		        .deadline_ns = call->deadline_ns,
		};
		struct mtd_fault_decision d;
		mtd_fault_decide(call->fault, o, &fc, call->svc->budget, &call->svc->cfg->local->retry_budget, &call->w->rng,
		                 &d);
		if (d.action == MTD_FAULT_RETRY) {
			mtd_metrics_fault_decision(call, &d);
			mtd_call_relaunch(call, a->ep_idx);
			return true;
		}
	}
	call->bc->failures++;
	if (!call->bc->failed) {
		call->bc->failed = true;
		call->bc->o = *o;
		call->bc->status = status;
		call->bc->msg = strdup(what);
	}
	settle(call);
	return true;
}

/* a's answer began (or, end_stream, a Trailers-Only OK answer came):
 * nothing reaches the app before every endpoint answered; the first
 * answer to begin is the one held. */
static void on_answer(struct mtd_attempt *a, bool end_stream)
{
	struct mtd_call *call = a->call;
	if (end_stream) {
		/* OK: held if no answer began before it; the call answers
		 * once every endpoint did. */
		if (!call->bc->have && !call->bc->ans) {
			mtd_headers_move(&call->resp_hdrs, &a->resp_hdrs, &call->w->slab);
			call->bc->have = call->bc->trailers_only = true;
		}
		settle(call);
		return;
	}
	if (!call->bc->have && !call->bc->ans) {
		call->bc->ans = a;
		mtd_headers_move(&call->resp_hdrs, &a->resp_hdrs, &call->w->slab);
	}
}

/* Held, not relayed: both windows go back at once; what is held is
 * bounded by fault.replay_buffer (mtd_relay_hold). */
static void on_data(struct mtd_attempt *a, const uint8_t *p, size_t n)
{
	struct mtd_call *call = a->call;
	nghttp2_session_consume(a->s.conn->ng, a->s.sid, n);
	mtd_conn_want_flush(a->s.conn);
	if (a != call->bc->ans || a->state != MTD_ATTEMPT_ANSWERING || call->state == MTD_CALL_DONE)
		return;
	if (!a->first_ns)
		a->first_ns = mtd_now_ns();
	mtd_relay_hold(call, a, p, n);
}

/* a's trailers: OK (0) is a complete answer, held if a's is the one held;
 * anything else fails a. */
static void on_trailers(struct mtd_attempt *a)
{
	struct mtd_call *call = a->call;
	if (a->state != MTD_ATTEMPT_ANSWERING || call->state == MTD_CALL_DONE)
		return;
	int st = mtd_attempt_status_of(&a->resp_trailers);
	if (st != 0) {
		nghttp2_nv gbuf;
		const nghttp2_nv *gm = mtd_headers_find(&a->resp_trailers, "grpc-message", &gbuf);
		char msg[384];
		if (st < 0)
			snprintf(msg, sizeof(msg), "upstream %s ended the response without grpc-status",
			         mtd_endpoint_text(a->ep));
		else
			snprintf(msg, sizeof(msg), "upstream %s answered %s%s%.*s", mtd_endpoint_text(a->ep),
			         mtd_grpc_status_name(st), gm ? ": " : "",
			         gm ? (int)(gm->valuelen > 200 ? 200 : gm->valuelen) : 0,
			         gm ? (const char *)gm->value : "");
		enum mtd_grpc_status es = st < 0 ? MTD_GRPC_INTERNAL : (enum mtd_grpc_status)st;
		struct mtd_fault_outcome o = {.failure = MTD_FAULT_STATUS, .status = (int)es};
		mtd_attempt_failed(a, &o, es, msg);
		return;
	}
	mtd_attempt_step(a, MTD_AEV_TRAILERS);
	if (!a->first_ns)
		a->first_ns = mtd_now_ns();
	mtd_attempt_lb_end(a, true, false);
	if (a == call->bc->ans) {
		mtd_headers_move(&call->resp_trailers, &a->resp_trailers, &call->w->slab);
		call->bc->have = true;
	}
	settle(call);
}

/* The endpoint left the service: the call is for those it has
 * (restarting would send it twice to the others). */
static bool on_reroute(struct mtd_call *call)
{
	if (call->state != MTD_CALL_DONE)
		settle(call);
	return true;
}

const struct mtd_fault_mode_ops mtd_fault_mode_broadcast = {
        .name = "BROADCAST",
        .holds_answer = true,
        .start = start,
        .on_failure = on_failure,
        .on_answer = on_answer,
        .on_data = on_data,
        .on_trailers = on_trailers,
        .on_reroute = on_reroute,
};
