/* The fault policy's one place of decision: what a call does after one of
 * its attempts failed (fault.h states the rules in order). */
#include "config.h"

#include <stdint.h>

#include "fault/fault.h"

const char *mtd_fault_mode_name(enum mtd_fault_mode m)
{
	switch (m) {
	case MTD_FAULT_FAILFAST:
		return "FAILFAST";
	case MTD_FAULT_FAILOVER:
		return "FAILOVER";
	case MTD_FAULT_FAILSAFE:
		return "FAILSAFE";
	case MTD_FAULT_FAILBACK:
		return "FAILBACK";
	case MTD_FAULT_FORKING:
		return "FORKING";
	case MTD_FAULT_BROADCAST:
		return "BROADCAST";
	}
	return NULL;
}

void mtd_fault_policy_defaults(struct mtd_fault_policy *p)
{
	*p = (struct mtd_fault_policy){
	        .mode = MTD_FAULT_FAILFAST,
	        .retries = 2,
	        .retry_on = 1u << 14, /* UNAVAILABLE */
	        .backoff_base_ms = 25,
	        .backoff_max_ms = 250,
	        .forks = 2,
	        .replay_buffer = 256u << 10,
	        .failback_queue = 100,
	        .failback_retries = 3,
	};
}

static void end_of_call(const struct mtd_fault_policy *p, struct mtd_fault_decision *d)
{
	if (p->fallback.set)
		d->action = MTD_FAULT_FALLBACK;
	else if (p->mode == MTD_FAULT_FAILSAFE || p->mode == MTD_FAULT_FAILBACK)
		d->action = MTD_FAULT_SAFE_OK;
	else
		d->action = MTD_FAULT_FAIL;
}

void mtd_fault_decide(const struct mtd_fault_policy *p, const struct mtd_fault_outcome *o,
                      const struct mtd_fault_call *c, struct mtd_fault_budget *budget,
                      const struct mtd_fault_budget_cfg *bcfg, uint64_t *rng, struct mtd_fault_decision *d)
{
	*d = (struct mtd_fault_decision){.action = MTD_FAULT_RELAY};
	if (o->failure == MTD_FAULT_OK)
		return;
	if (c->answered) {
		/* The app saw the response begin: no other answer fits. */
		d->action = MTD_FAULT_FAIL;
		return;
	}
	if (c->committed) {
		/* The request outgrew what was kept: nothing can be replayed,
		 * whatever the mode; a fixed answer still can be given. */
		end_of_call(p, d);
		return;
	}
	if (o->failure == MTD_FAULT_REFUSED && !c->refused_here_before &&
	    (c->deadline_ns == 0 || c->now_ns < c->deadline_ns)) {
		/* gRPC A6 transparent retry: the stream never reached the app. */
		d->action = MTD_FAULT_RETRY;
		d->transparent = true;
		return;
	}
	if (p->mode == MTD_FAULT_BROADCAST) {
		/* Dubbo's broadcast cluster: every endpoint answers; one failure
		 * fails the call, once the others ended too (a cache
		 * invalidation still reaches them). No other endpoint stands in
		 * for one that failed: the call is for each of them. */
		if (c->others_live)
			d->action = MTD_FAULT_WAIT;
		else
			end_of_call(p, d);
		return;
	}
	if (o->failure == MTD_FAULT_CONNECT && c->endpoint_left) {
		/* Nothing of the call left maitred: another endpoint can take it
		 * in any mode (the pool's rule before attempts existed). */
		d->action = MTD_FAULT_RETRY;
		d->transparent = true;
		return;
	}
	if (o->has_pushback && o->pushback_ms < 0) {
		d->pushback_stop = true;
		end_of_call(p, d);
		return;
	}
	if (p->mode != MTD_FAULT_FAILOVER || c->retries_done >= p->retries || !c->endpoint_left) {
		end_of_call(p, d);
		return;
	}
	int64_t delay = mtd_fault_backoff_ns(p->backoff_base_ms, p->backoff_max_ms, c->retries_done + 1, rng);
	if (o->has_pushback) {
		/* gRPC A6: the server's pushback replaces the backoff. */
		if (o->pushback_ms > INT64_MAX / 1000000) {
			end_of_call(p, d);
			return;
		}
		delay = o->pushback_ms * 1000000;
	}
	if (c->deadline_ns && c->now_ns + delay >= c->deadline_ns) {
		/* No retry that cannot start before the deadline. */
		end_of_call(p, d);
		return;
	}
	if (budget && !mtd_fault_budget_take(budget, bcfg, c->now_ns / 1000000000)) {
		/* Beyond the budget a call fails as FAILFAST would. */
		d->budget_exhausted = true;
		d->action = MTD_FAULT_FAIL;
		return;
	}
	d->action = MTD_FAULT_RETRY;
	d->delay_ns = delay;
}
