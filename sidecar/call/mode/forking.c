/* FORKING (gRPC A6 hedging, Dubbo's forking cluster): up to fault.forks
 * attempts race on distinct endpoints, each started hedge_delay after the
 * one before (all at once when it is 0; AUTO: the method's p95 on the
 * worker), a lost fork starting the next at once; hedges spend the retry
 * budget. The first answer to begin wins: it commits the call and the
 * others are cancelled (the engine's default answer). The call fails only
 * when no fork is left racing. */
#include "config.h"

#include "core/clock.h"
#include "core/log.h"
#include "sidecar/call/call.h"
#include "sidecar/call/mode/mode.h"
#include "sidecar/control/runtime.h"
#include "sidecar/ops/metrics.h"
#include "sidecar/turn.h"

/* Start the next fork now unless forks are all started, an answer came,
 * the deadline passed or the budget says no. */
static void hedge(struct mtd_call *call)
{
	const struct mtd_fault_policy *f = call->fault;
	if (call->state == MTD_CALL_DONE || call->down_closed || call->committed || call->n_attempts >= f->forks)
		return;
	if (call->deadline_ns && mtd_now_ns() >= call->deadline_ns)
		return;
	/* Hedges are retries for the budget (linkerd): they stay under it. */
	if (!mtd_fault_budget_take(call->svc->budget, &call->svc->cfg->local->retry_budget, mtd_now_ns() / 1000000000))
		return;
	mtd_call_start_keyed(call, true);
}

static void on_hedge(struct mtd_timer *t)
{
	struct mtd_call *call = MTD_CONTAINER_OF(t, struct mtd_call, retry);
	hedge(call);
	mtd_call_release(call);
}

/* A fork started on the balancer's pick: the next one after hedge_delay
 * (at once when it is 0). */
static void schedule_hedge(struct mtd_call *call)
{
	const struct mtd_fault_policy *f = call->fault;
	if (call->n_attempts >= f->forks || mtd_timer_armed(&call->retry) || call->state == MTD_CALL_DONE)
		return;
	int64_t ms = f->hedge_delay_ms;
	if (ms == MTD_FAULT_HEDGE_AUTO)
		ms = mtd_metrics_hedge_delay_ms(call); /* the method's p95 on this worker */
	if (ms <= 0) {
		hedge(call); /* all forks at once */
		return;
	}
	/* gRPC A6 hedging: the next attempt only once the delay passed
	 * without an answer (no timer, no hedge: the first attempt goes on). */
	if (mtd_worker_timer_arm(call->w, &call->retry, on_hedge, ms * 1000000) < 0)
		MTD_DEBUG("call: out of memory for the hedge delay's timer; no hedge"); /* the forks started race on */
}

/* A fork lost: the next one starts at once (gRPC A6 hedging); the call
 * ends only when none is left racing. Once committed, a failure is the
 * policy's as in any mode. */
static bool on_failure(struct mtd_attempt *a, const struct mtd_fault_outcome *o, enum mtd_grpc_status status,
                       const char *what, bool refused_before)
{
	(void)o, (void)status, (void)what, (void)refused_before;
	struct mtd_call *call = a->call;
	if (call->committed)
		return false;
	if (call->n_attempts < call->fault->forks) {
		mtd_worker_timer_disarm(call->w, &call->retry);
		hedge(call);
	}
	struct mtd_attempt *other;
	LIST_FOREACH(other, &call->attempts, call_link)
		if (other != a && mtd_fault_attempt_live(other->state))
			return true;
	return call->state == MTD_CALL_DONE;
}

const struct mtd_fault_mode_ops mtd_fault_mode_forking = {
        .name = "FORKING",
        .distinct_endpoints = true,
        .on_started = schedule_hedge,
        .on_failure = on_failure,
};
