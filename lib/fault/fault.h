/* The fault policy's arithmetic and decisions (types in fault-t.h). Every
 * function is pure: time and randomness come from the caller, nothing is
 * allocated, nothing blocks. Budget functions may be called from any worker
 * at once (atomics); the others touch only what they are given. */
#ifndef MTD_FAULT_H
#define MTD_FAULT_H

#include "fault/fault-t.h"

/* "FAILOVER" etc., or NULL for a value outside the enum. */
const char *mtd_fault_mode_name(enum mtd_fault_mode m);

/* Defaults written in config.proto: FAILFAST, retries 2, retry_on
 * UNAVAILABLE, backoff 25 ms .. 250 ms, forks 2, replay_buffer 256 KiB,
 * failback queue 100, retries 3. */
void mtd_fault_policy_defaults(struct mtd_fault_policy *p);

/* Statuses that count against an endpoint in its health figures
 * (outlier_detection.failure_statuses' default): UNKNOWN, INTERNAL,
 * UNAVAILABLE, DATA_LOSS. */
#define MTD_FAULT_FAILURE_STATUSES ((1u << 2) | (1u << 13) | (1u << 14) | (1u << 15))

/* True when status (0..16) fails an attempt under p (fault.retry_on). */
static inline bool mtd_fault_retry_on(const struct mtd_fault_policy *p, int status)
{
	return status > 0 && status < 32 && (p->retry_on >> status) & 1u;
}

/* Backoff before policy retry number n (1 = the first retry), gRPC A6:
 * a uniformly random delay in [0, min(max, base x 2^(n-1))) ("full
 * jitter"), in ns. rng is a xorshift64 state (never 0), advanced. base <= 0
 * gives 0. */
int64_t mtd_fault_backoff_ns(int64_t base_ms, int64_t max_ms, uint32_t n, uint64_t *rng);

/* grpc-retry-pushback-ms (gRPC A6): a non-negative decimal integer of at
 * most 18 digits. Returns 0 and *ms, or -EINVAL for anything else (negative,
 * empty, junk), which A6 reads as "do not retry". */
int mtd_fault_pushback_parse(const char *s, size_t len, int64_t *ms);

/* Retry budget (linkerd): a sliding window of MTD_FAULT_BUDGET_SLOTS
 * seconds. Each call counts once (mtd_fault_budget_call); a retry or hedge
 * may start only while
 *     retries_in_window + 1 <= ratio x calls_in_window + min_per_second x SLOTS
 * mtd_fault_budget_take() checks that, counts the retry when granted and
 * returns true, else counts the refusal in b->exhausted and returns false.
 * now_s is a monotonic second count. With cfg->set false every retry is
 * granted (and counted in spent). Concurrent calls may overshoot the bound
 * by at most the number of racing workers (no lock on the data path). */
void mtd_fault_budget_call(struct mtd_fault_budget *b, int64_t now_s);
bool mtd_fault_budget_take(struct mtd_fault_budget *b, const struct mtd_fault_budget_cfg *cfg, int64_t now_s);

/* What the call does after one of its attempts ended with o (the policy's
 * one place of decision). budget may be NULL (no budget). rng feeds the
 * backoff jitter. Rules, in order:
 *  - o->failure OK: RELAY.
 *  - REFUSED (never reached the app) and not committed: a transparent
 *    RETRY, at once, in every mode, once per endpoint (c->refused_here_before
 *    false), without spending retries or budget (gRPC A6 transparent retry).
 *  - BROADCAST (every endpoint, OK only if all are): WAIT while
 *    c->others_live, else the end. The caller keeps the call's first
 *    failure and asks again with it when the last attempt ends.
 *  - CONNECT (nothing was sent) with an endpoint left: a transparent
 *    RETRY at once, in every other mode.
 *  - once answered (response headers relayed): FAIL; once committed
 *    otherwise (the request outgrew the buffer): the mode's end. Nothing
 *    committed is ever replayed.
 *  - FAILOVER with retries left, an endpoint left and no pushback "stop":
 *    RETRY after the backoff (or the server's pushback, which replaces
 *    it), if that starts before the deadline and the budget grants it;
 *    a retry the budget refuses ends the call as FAILFAST would (FAIL,
 *    d->budget_exhausted); else the mode's end.
 *  - the end: FALLBACK when p->fallback is set, SAFE_OK under FAILSAFE
 *    (and FAILBACK, whose caller answers OK), else FAIL. */
void mtd_fault_decide(const struct mtd_fault_policy *p, const struct mtd_fault_outcome *o,
                      const struct mtd_fault_call *c, struct mtd_fault_budget *budget,
                      const struct mtd_fault_budget_cfg *bcfg, uint64_t *rng, struct mtd_fault_decision *d);

/* hedge_delay: AUTO's estimator (latency.c). Count one latency sample
 * (us; below 1 counts as 1). */
void mtd_fault_lat_add(struct mtd_fault_lat *h, int64_t us);
/* The q-quantile (0..1) of what h holds, in us, interpolated inside its
 * bucket: within one bucket width (12.5 %) of the true sample quantile.
 * -1 when h is empty. */
int64_t mtd_fault_lat_quantile_us(const struct mtd_fault_lat *h, double q);
/* The hedge delay AUTO gives now, ms: MTD_FAULT_HEDGE_AUTO_INITIAL_MS
 * before MTD_FAULT_LAT_MIN_SAMPLES samples, else the p95 rounded up to a
 * whole ms, clamped to [FLOOR, MAX] (fault-t.h). */
int64_t mtd_fault_hedge_auto_ms(const struct mtd_fault_lat *h);

/* The attempt state machine (attempt.c). Returns the state after ev in s,
 * or -1 when ev cannot happen in s (a caller's bug: it keeps s). */
int mtd_fault_attempt_step(enum mtd_attempt_state s, enum mtd_attempt_event ev);
/* True for states that hold an upstream stream or a pool slot. */
bool mtd_fault_attempt_live(enum mtd_attempt_state s);
const char *mtd_fault_attempt_state_name(enum mtd_attempt_state s);

#endif
