/* Calls waiting for their service's first endpoint set or the xDS
 * listener's first routes (park.h: the states and how each wait ends). The parked list holds nothing: a
 * parked call is held by its client's stream, as any call before its
 * first attempt, and leaves the list whatever ends it (mtd_call_settle
 * calls mtd_call_unpark), so the list never names a call that is over. */
#include "config.h"

#include <stdint.h>

#include "core/clock.h"
#include "core/log.h"
#include "grpc/grpc.h"
#include "sidecar/call/call.h"
#include "sidecar/call/headers.h"
#include "sidecar/call/park.h"
#include "sidecar/control/runtime.h"
#include "sidecar/ops/metrics.h"
#include "sidecar/turn.h"

/* What the call's service waits for, for messages. */
static const char *awaited(const struct mtd_rt_service *svc)
{
	return svc->unavailable ? svc->unavailable : "its source has not answered yet";
}

/* The listener whose routes a call without a service waits for. */
static const char *listener_of(const struct mtd_call *call)
{
	const struct mtd_cfg *cfg = call->w->rt->cfg;
	return cfg->xds && cfg->xds->listener ? cfg->xds->listener : "(none)";
}

static void list_parked(struct mtd_call *call)
{
	struct mtd_worker *w = call->w;
	LIST_INSERT_HEAD(&w->parked, call, park_link);
	w->n_parked++;
	mtd_metrics_parked(w->id, w->n_parked);
	call->state = MTD_CALL_PARKED;
}

void mtd_call_unpark(struct mtd_call *call)
{
	if (call->state != MTD_CALL_PARKED)
		return;
	LIST_REMOVE(call, park_link);
	/* The link's words are the call's inline tried/refused bitmaps. */
	call->tried_inline = call->refused_inline = 0;
	call->w->n_parked--;
	mtd_metrics_parked(call->w->id, call->w->n_parked);
	call->state = MTD_CALL_RUNNING;
}

/* A call that waited for the listener's routes, routed from the start at
 * the end of the turn (call.c mtd_call_run_ready: no service yet) on the
 * worker's snapshot then. */
static void restart(struct mtd_call *call)
{
	mtd_worker_unhold_later(call->w, call->hold);
	call->hold = NULL;
	call->deadline_ns = 0; /* armed again as the call starts */
	mtd_call_next_attempt_later(call);
}

/* A call that may not wait for the listener's routes, or waited for them
 * long enough (xds.initial_wait): routed from the start by what there is
 * (the file's routes, then its :path); at its deadline it ends. */
static void routes_wait_over(struct mtd_call *call, int64_t now)
{
	if (call->deadline_ns && now >= call->deadline_ns) {
		mtd_call_fail(call, MTD_GRPC_DEADLINE_EXCEEDED,
		              "deadline exceeded (%lld ms) waiting for the routes of xds listener %s",
		              (long long)((call->deadline_ns - call->start_ns) / 1000000), listener_of(call));
		return;
	}
	MTD_DEBUG("call: the routes of xds listener %s did not come within xds.initial_wait: routed by :path",
	          listener_of(call));
	call->routes_waited = true;
	restart(call);
}

/* The call's deadline timer while it waits: its deadline, or the end of
 * its wait (discovery.initial_wait), whichever came. */
static void wait_over(struct mtd_timer *t)
{
	struct mtd_call *call = MTD_CONTAINER_OF(t, struct mtd_call, deadline);
	if (call->state != MTD_CALL_PARKED)
		return;
	const struct mtd_rt_service *svc = call->svc;
	int64_t now = mtd_now_ns();
	mtd_call_unpark(call);
	if (svc == NULL) {
		routes_wait_over(call, now);
		return;
	}
	mtd_metrics_policy(call, MTD_MX_FIRST_WAIT_EXPIRED);
	if (call->deadline_ns && now >= call->deadline_ns)
		mtd_call_fail(call, MTD_GRPC_DEADLINE_EXCEEDED,
		              "deadline exceeded (%lld ms) waiting for the first endpoints of service %s: %s",
		              (long long)((call->deadline_ns - call->start_ns) / 1000000), svc->cfg->local->name,
		              awaited(svc));
	else
		mtd_call_fail(call, MTD_GRPC_UNAVAILABLE,
		              "service %s has no endpoint: %s (the call waited %lld ms for the first ones, "
		              "discovery.initial_wait)",
		              svc->cfg->local->name, awaited(svc), (long long)((now - call->start_ns) / 1000000));
}

bool mtd_call_park_for_routes(struct mtd_call *call)
{
	struct mtd_worker *w = call->w;
	const struct mtd_cfg *cfg = call->hold->rt->cfg;
	int64_t wait_ms = cfg->xds ? cfg->xds->initial_wait_ms : 0;
	if (wait_ms <= 0 || call->bg || !call->down || call->down_closed)
		return false;
	int64_t now = mtd_now_ns(), until = now + wait_ms * 1000000, ns = 0;
	nghttp2_nv tmo_buf;
	const nghttp2_nv *tmo = mtd_headers_find(&call->req_hdrs, "grpc-timeout", &tmo_buf);
	if (tmo != NULL) {
		/* A malformed or spent timeout fails as the call starts. */
		if (mtd_grpc_timeout_parse((const char *)tmo->value, tmo->valuelen, &ns) < 0 || ns <= 0)
			return false;
		/* From now, as call.c's: its start is the turn's clock (turn.h). */
		if (ns < (int64_t)100 * 86400 * 1000000000 && now + ns < until)
			until = call->deadline_ns = now + ns;
	}
	if (w->draining) {
		mtd_call_fail(call, MTD_GRPC_UNAVAILABLE,
		              "the routes of xds listener %s have not come (maitred is draining: no wait)",
		              cfg->xds->listener);
		return true;
	}
	if (w->n_parked >= MTD_CALL_PARKED_MAX) {
		mtd_call_fail(call, MTD_GRPC_UNAVAILABLE,
		              "the routes of xds listener %s have not come (%u calls of this worker wait already, "
		              "the most that may)",
		              cfg->xds->listener, (unsigned)MTD_CALL_PARKED_MAX);
		return true;
	}
	if (mtd_worker_timer_arm(w, &call->deadline, wait_over, until > now ? until - now : 0) < 0) {
		mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return true;
	}
	MTD_DEBUG("call: the routes of xds listener %s have not come: waiting up to %lld ms", cfg->xds->listener,
	          (long long)((until - now) / 1000000));
	list_parked(call);
	return true;
}

bool mtd_call_park(struct mtd_call *call)
{
	struct mtd_worker *w = call->w;
	const struct mtd_rt_service *svc = call->svc;
	int64_t wait_ms = svc->cfg->local->initial_wait_ms;
	/* Only a client's call, at its first pick (its tried bitmaps not
	 * made yet: their inline words become the list's link). */
	if (!svc->awaiting || svc->n_eps != 0 || wait_ms <= 0 || call->bg || call->tried || call->n_attempts ||
	    !call->down || call->down_closed)
		return false;
	if (w->draining) {
		mtd_call_fail(call, MTD_GRPC_UNAVAILABLE,
		              "service %s has no endpoint: %s (maitred is draining: no wait)", svc->cfg->local->name,
		              awaited(svc));
		return true;
	}
	if (w->n_parked >= MTD_CALL_PARKED_MAX) {
		mtd_metrics_policy(call, MTD_MX_FIRST_WAIT_FULL);
		mtd_call_fail(call, MTD_GRPC_UNAVAILABLE,
		              "service %s has no endpoint: %s (%u calls of this worker wait for first endpoints "
		              "already, the most that may)",
		              svc->cfg->local->name, awaited(svc), (unsigned)MTD_CALL_PARKED_MAX);
		return true;
	}
	int64_t now = mtd_now_ns(), until = now + wait_ms * 1000000;
	if (call->deadline_ns && call->deadline_ns < until)
		until = call->deadline_ns;
	if (mtd_worker_timer_arm(w, &call->deadline, wait_over, until > now ? until - now : 0) < 0) {
		mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return true;
	}
	mtd_metrics_policy(call, MTD_MX_FIRST_WAITED);
	MTD_DEBUG("call: service %s has no endpoint yet (%s): waiting up to %lld ms", svc->cfg->local->name,
	          awaited(svc), (long long)((until - now) / 1000000));
	list_parked(call);
	return true;
}

/* A parked call, taken off the list, on the worker's new snapshot. */
static void wake(struct mtd_call *call)
{
	if (call->svc == NULL) {
		if (call->w->rt->routes_awaited) {
			/* Not yet: waits on, until the end it was given, holding
			 * the current snapshot rather than the one it came on (a
			 * wait may last xds.initial_wait, up to an hour). */
			mtd_worker_unhold_later(call->w, call->hold);
			call->hold = mtd_worker_hold(call->w);
			list_parked(call);
			return;
		}
		mtd_worker_timer_disarm(call->w, &call->deadline);
		restart(call);
		return;
	}
	/* Its old snapshot stays until the end of the turn (let go later):
	 * the name may be read meanwhile. */
	const char *name = call->svc->cfg->local->name;
	if (!mtd_call_route_current(call)) {
		mtd_call_fail(call, MTD_GRPC_UNAVAILABLE,
		              "service %s left maitred's config while the call waited for its first endpoints", name);
		return;
	}
	const struct mtd_rt_service *svc = call->svc;
	if (svc->n_eps == 0 && svc->awaiting && svc->cfg->local->initial_wait_ms > 0) {
		/* Not yet: waits on, until the end it was given. */
		list_parked(call);
		return;
	}
	if (mtd_call_arm_deadline(call) < 0) {
		mtd_call_fail(call, MTD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	/* The first pick at the end of the turn, on this snapshot (an empty
	 * set fails then, with the source's reason). */
	mtd_call_next_attempt_later(call);
}

void mtd_call_parked_swap(struct mtd_worker *w)
{
	LIST_HEAD(, mtd_call) todo = LIST_HEAD_INITIALIZER(todo);
	struct mtd_call *call;
	/* Taken off first: a call that still waits goes back on the list. */
	while ((call = LIST_FIRST(&w->parked))) {
		LIST_REMOVE(call, park_link);
		LIST_INSERT_HEAD(&todo, call, park_link);
	}
	while ((call = LIST_FIRST(&todo))) {
		LIST_REMOVE(call, park_link);
		call->tried_inline = call->refused_inline = 0;
		w->n_parked--;
		call->state = MTD_CALL_RUNNING;
		if (call->down_closed) {
			/* Its client's close runs at the end of the turn: nothing
			 * starts for it meanwhile. */
			list_parked(call);
			continue;
		}
		wake(call);
	}
	mtd_metrics_parked(w->id, w->n_parked);
}

void mtd_call_parked_fail_all(struct mtd_worker *w)
{
	struct mtd_call *call;
	while ((call = LIST_FIRST(&w->parked))) {
		mtd_call_unpark(call);
		if (call->down_closed)
			continue; /* its close, due at the end of the turn, ends it */
		const struct mtd_rt_service *svc = call->svc;
		if (svc == NULL) {
			mtd_call_fail(call, MTD_GRPC_UNAVAILABLE,
			              "the routes of xds listener %s have not come (maitred is draining: the call "
			              "waits no more)",
			              listener_of(call));
			continue;
		}
		mtd_call_fail(call, MTD_GRPC_UNAVAILABLE,
		              "service %s has no endpoint: %s (maitred is draining: the call waits no more)",
		              svc->cfg->local->name, awaited(svc));
	}
}
