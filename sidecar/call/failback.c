/* FAILBACK's background re-sends (Dubbo's failback cluster, for
 * fire-and-forget calls). A call that failed under FAILBACK
 * is answered OK at once (attempt.c, mode/failback.c) and a copy of it, a background call
 * with no client (call->bg), waits in its worker's queue for the backoff,
 * then is re-sent: routed by its :path, every endpoint eligible again,
 * with its own deadline per try. It ends when an endpoint answers with a
 * status outside retry_on, or is dropped when failback.retries re-sends
 * failed. The request bytes are the copy's, counted in the worker's
 * replay_bytes (bounded by replay_buffer and replay_buffer_total) until it
 * is freed. What is dropped is counted (maitred_failback_dropped_total)
 * and logged, at most a line a second per worker; at shutdown every queued
 * re-send is dropped and the count logged. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/clock.h"
#include "discovery/discovery.h"
#include "sidecar/call/call.h"
#include "sidecar/call/failback.h"
#include "sidecar/call/headers.h"
#include "sidecar/call/mirror.h"
#include "sidecar/control/runtime.h"
#include "sidecar/ops/metrics.h"
#include "sidecar/turn.h"

static void log_drop(struct mtd_worker *w, const char *what, const char *why)
{
	/* An outage must not turn into a log flood (as FAILSAFE's line). */
	uint64_t held;
	if (!mtd_log_gate_pass(&w->failback_log, mtd_now_ns(), 1000000000, &held))
		return;
	if (held)
		MTD_WARN("FAILBACK: %s; dropped: %s (and %llu more in the last second)", what, why,
		         (unsigned long long)held);
	else
		MTD_WARN("FAILBACK: %s; dropped: %s", what, why);
}

static void on_resend(struct mtd_timer *t)
{
	struct mtd_call *bg = MTD_CONTAINER_OF(t, struct mtd_call, retry);
	bg->bg->tries++;
	mtd_metrics_failback(bg, false);
	mtd_call_start_bg(bg);
	mtd_call_release(bg);
}

/* false: no timer (out of memory). */
static bool schedule(struct mtd_call *bg)
{
	const struct mtd_fault_policy *f = bg->fault;
	int64_t ns = mtd_fault_backoff_ns(f->backoff_base_ms, f->backoff_max_ms, bg->bg->tries + 1, &bg->w->rng);
	if (ns < 1000000)
		ns = 1000000; /* at least a turn of the loop: never a busy re-send */
	return mtd_worker_timer_arm(bg->w, &bg->retry, on_resend, ns) == 0;
}

static void drop(struct mtd_call *call, const char *what, const char *why)
{
	mtd_metrics_failback(call, true);
	log_drop(call->w, what, why);
}

int mtd_failback_copy_request(struct mtd_call *copy, const struct mtd_call *call)
{
	struct mtd_slab *slab = &copy->w->slab;
	int rc = 0;
	nghttp2_nv nv;
	for (uint32_t off = 0; mtd_headers_next(&call->req_hdrs, &off, &nv);)
		rc |= mtd_headers_add(&copy->req_hdrs, slab, nv.name, nv.namelen, nv.value, nv.valuelen,
		                      nv.flags & NGHTTP2_NV_FLAG_NO_INDEX);
	uint8_t chunk[4096];
	for (size_t off = 0; rc == 0 && off < call->req.len;) {
		size_t n = mtd_bufq_copy_at(&call->req, off, chunk, sizeof(chunk));
		if (n == 0 || mtd_bufq_append(&copy->req, chunk, n) < 0)
			rc = -1;
		off += n;
	}
	if (rc == 0)
		return 0;
	mtd_headers_clear(&copy->req_hdrs, slab);
	mtd_bufq_clear(&copy->req);
	return -ENOMEM;
}

void mtd_failback_enqueue(struct mtd_call *call, const char *what)
{
	struct mtd_worker *w = call->w;
	const struct mtd_fault_policy *f = call->fault;
	size_t len = call->req.len;
	if (w->n_bg >= f->failback_queue) {
		drop(call, what, "the failback queue is full");
		return;
	}
	if (!call->req_eof || call->committed || call->req_base != 0 || len > f->replay_buffer ||
	    w->replay_bytes + len > w->rt->cfg->replay_buffer_total) {
		drop(call, what, "the request was not kept whole (larger than the replay buffer, or not complete)");
		return;
	}
	struct mtd_call *bg = mtd_slab_calloc(&w->slab, 1, sizeof(*bg));
	struct mtd_call_bg *part = mtd_slab_calloc(&w->slab, 1, sizeof(*part));
	if (!bg || !part) {
		mtd_slab_free(&w->slab, bg);
		mtd_slab_free(&w->slab, part);
		drop(call, what, "out of memory");
		return;
	}
	bg->w = w;
	bg->bg = part;
	part->call = bg;
	LIST_INIT(&bg->attempts);
	bg->start_ns = mtd_now_ns();
	bg->mx = call->mx;
	/* f points into the config of call's snapshot: the copy holds that
	 * snapshot until its first re-send routes it anew (a reload may
	 * remove the service meanwhile). */
	part->origin = mtd_worker_hold_again(w, call->hold);
	bg->fault = f;
	if (mtd_failback_copy_request(bg, call) < 0) {
		mtd_worker_unhold(w, part->origin);
		mtd_slab_free(&w->slab, part);
		mtd_slab_free(&w->slab, bg);
		drop(call, what, "out of memory");
		return;
	}
	/* The whole request is here and counted as kept: a re-send reads it
	 * from offset 0 and never grows it. */
	bg->req_eof = true;
	bg->req_taken = bg->req_retained = len;
	w->replay_bytes += len;
	/* Each try's own deadline: the call's grpc-timeout. */
	if (call->deadline_ns)
		part->timeout_ms = (call->deadline_ns - call->start_ns + 999999) / 1000000;
	w->n_bg++;
	LIST_INSERT_HEAD(&w->bg_calls, part, link);
	if (!schedule(bg)) {
		drop(call, what, "out of memory");
		mtd_call_release(bg);
	}
}

void mtd_failback_failed(struct mtd_call *bg, const char *what)
{
	if (bg->bg->mirror) {
		/* A mirror copy is a background call too, never re-sent. */
		mtd_mirror_ended(bg, false, what);
		return;
	}
	bg->state = MTD_CALL_DONE; /* this try is over: later events are ignored */
	if (bg->bg->tries >= bg->fault->failback_retries) {
		char why[64];
		snprintf(why, sizeof(why), "%u re-sends failed", bg->bg->tries);
		drop(bg, what, why);
		return;
	}
	if (!mtd_timer_armed(&bg->retry) && !schedule(bg))
		drop(bg, what, "out of memory"); /* freed once nothing holds it */
}

void mtd_failback_done(struct mtd_call *bg)
{
	if (bg->bg->mirror) {
		mtd_mirror_ended(bg, true, NULL);
		return;
	}
	MTD_DEBUG("FAILBACK: re-send %u answered", bg->bg->tries);
	mtd_call_settle(bg);
}

void mtd_failback_drop_all(struct mtd_worker *w)
{
	uint32_t n = 0;
	struct mtd_call_bg *part, *next;
	for (part = LIST_FIRST(&w->bg_calls); part; part = next) {
		next = LIST_NEXT(part, link);
		struct mtd_call *bg = part->call;
		if (!part->mirror) {
			n++;
			mtd_metrics_failback(bg, true);
		} else {
			mtd_mirror_dropped_at_stop(bg); /* a mirror copy just ends, as its primary does */
		}
		mtd_worker_timer_disarm(w, &bg->retry);
		mtd_call_settle(bg);
		mtd_call_release(bg); /* or when its attempts' streams close */
	}
	if (n)
		MTD_WARN("worker %u: FAILBACK: %u queued re-send%s dropped at shutdown", w->id, n, n == 1 ? "" : "s");
}
