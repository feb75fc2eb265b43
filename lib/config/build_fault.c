/* A fault block (service or method): the mode and the options only that
 * mode uses (retries, failback, backoff, forks, hedge_delay), the
 * fallback answer; and a service's retry_budget. */
#include <config.h> /* autoconf (lib/config/config.h is the API) */

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "config/build-int.h"
#include "fault/fault.h"

#define REPLAY_BUFFER_MAX  (64u << 20)
#define HEDGE_DELAY_MAX_MS 60000

/* A fault option the chosen mode would silently ignore is refused: no
 * key is parsed and then ignored. */
static bool fault_opt_allowed(struct builder *b, const PbFault *m, const char *field, bool allowed, const char *mode,
                              const char *path)
{
	char p[256];

	if (allowed)
		return true;
	BERR(mtd_cfg__at(b, m, field, NULL), mtd_cfg__sub(p, sizeof(p), path, field), "mode %s does not use %s", mode,
	     field);
	return false;
}

void mtd_cfg__build_fault(struct builder *b, const PbFault *m, const char *path, struct mtd_fault_policy *out)
{
	char p[256];
	const char *mode;
	bool failover, forking;

	mtd_fault_policy_defaults(out);
	if (m == NULL)
		return;
	switch (m->mode) {
	case MAITRED__CONFIG__V1__FAULT__MODE__MODE_UNSPECIFIED:
	case MAITRED__CONFIG__V1__FAULT__MODE__FAILFAST:
		out->mode = MTD_FAULT_FAILFAST;
		break;
	case MAITRED__CONFIG__V1__FAULT__MODE__FAILOVER:
		out->mode = MTD_FAULT_FAILOVER;
		break;
	case MAITRED__CONFIG__V1__FAULT__MODE__FAILSAFE:
		out->mode = MTD_FAULT_FAILSAFE;
		break;
	case MAITRED__CONFIG__V1__FAULT__MODE__FAILBACK:
		out->mode = MTD_FAULT_FAILBACK;
		break;
	case MAITRED__CONFIG__V1__FAULT__MODE__FORKING:
		out->mode = MTD_FAULT_FORKING;
		break;
	case MAITRED__CONFIG__V1__FAULT__MODE__BROADCAST:
		out->mode = MTD_FAULT_BROADCAST;
		break;
	default:
		BERR(mtd_cfg__at(b, m, "mode", NULL), mtd_cfg__sub(p, sizeof(p), path, "mode"),
		     "unknown mode number %d", (int)m->mode);
		return;
	}
	mode = mtd_fault_mode_name(out->mode);
	failover = out->mode == MTD_FAULT_FAILOVER;
	forking = out->mode == MTD_FAULT_FORKING;

	if (m->retries != NULL && fault_opt_allowed(b, m, "retries", failover, mode, path)) {
		if (m->retries->value > MTD_FAULT_RETRIES_MAX)
			BERR(mtd_cfg__at(b, m, "retries", NULL), mtd_cfg__sub(p, sizeof(p), path, "retries"),
			     "must be in 0..%u, got %u", MTD_FAULT_RETRIES_MAX, (unsigned)m->retries->value);
		else
			out->retries = m->retries->value;
	}
	if (m->n_retry_on != 0) {
		out->retry_on = 0;
		for (size_t i = 0; i < m->n_retry_on; i++) {
			int code = (int)m->retry_on[i];

			snprintf(p, sizeof(p), "%s.retry_on[%zu]", path, i);
			if (code == MAITRED__CONFIG__V1__GRPC_STATUS__OK)
				BERR(mtd_cfg__at(b, m, "retry_on", NULL), p, "OK is not a failure");
			else if (code < 0 || code > 16)
				BERR(mtd_cfg__at(b, m, "retry_on", NULL), p, "unknown status number %d", code);
			else
				out->retry_on |= 1u << code;
		}
	}
	if (m->per_try_timeout != NULL)
		out->per_try_timeout_ms = mtd_cfg__dur_ms(b, m->per_try_timeout, 0, ZERO_IS_ERROR,
		                                          mtd_cfg__at(b, m, "per_try_timeout", NULL),
		                                          mtd_cfg__sub(p, sizeof(p), path, "per_try_timeout"));
	if (m->failback != NULL && fault_opt_allowed(b, m, "failback", out->mode == MTD_FAULT_FAILBACK, mode, path)) {
		char fp[256];

		mtd_cfg__sub(fp, sizeof(fp), path, "failback");
		if (m->failback->queue != 0)
			out->failback_queue =
			        mtd_cfg__u32_limit(b, m->failback->queue, 100, 100000, m->failback, "queue", fp);
		if (m->failback->retries != 0)
			out->failback_retries =
			        mtd_cfg__u32_limit(b, m->failback->retries, 3, 100, m->failback, "retries", fp);
	}
	if (m->backoff != NULL &&
	    fault_opt_allowed(b, m, "backoff", failover || out->mode == MTD_FAULT_FAILBACK, mode, path)) {
		const Maitred__Config__V1__Backoff *bo = m->backoff;
		char bp[256];

		mtd_cfg__sub(bp, sizeof(bp), path, "backoff");
		out->backoff_base_ms =
		        mtd_cfg__dur_ms(b, bo->base_, 25, ZERO_ALLOWED, mtd_cfg__at(b, bo, "base_", NULL),
		                        mtd_cfg__sub(p, sizeof(p), bp, "base"));
		out->backoff_max_ms = mtd_cfg__dur_ms(
		        b, bo->max, out->backoff_base_ms > 250 ? out->backoff_base_ms : 250, ZERO_ALLOWED,
		        mtd_cfg__at(b, bo, "max", NULL), mtd_cfg__sub(p, sizeof(p), bp, "max"));
		if (out->backoff_max_ms < out->backoff_base_ms && bo->max != NULL)
			BERR(mtd_cfg__at(b, bo, "max", NULL), mtd_cfg__sub(p, sizeof(p), bp, "max"),
			     "must not be below base (%lld ms)", (long long)out->backoff_base_ms);
	}
	if (m->forks != 0 && fault_opt_allowed(b, m, "forks", forking, mode, path)) {
		if (m->forks < 2 || m->forks > 16)
			BERR(mtd_cfg__at(b, m, "forks", NULL), mtd_cfg__sub(p, sizeof(p), path, "forks"),
			     "must be in 2..16, got %u", (unsigned)m->forks);
		else
			out->forks = m->forks;
	}
	if (m->hedge_delay[0] != '\0' && fault_opt_allowed(b, m, "hedge_delay", forking, mode, path)) {
		int64_t sec;
		int32_t ns;
		const char *why = NULL;

		mtd_cfg__sub(p, sizeof(p), path, "hedge_delay");
		if (strcmp(m->hedge_delay, "AUTO") == 0)
			out->hedge_delay_ms = MTD_FAULT_HEDGE_AUTO;
		else if (mtd_cfg__parse_duration(m->hedge_delay, &sec, &ns, &why) != 0)
			BERR(mtd_cfg__at(b, m, "hedge_delay", NULL), p,
			     "bad hedge_delay \"%s\": %s (a duration or AUTO)", m->hedge_delay, why);
		else if (sec < 0 || ns < 0)
			BERR(mtd_cfg__at(b, m, "hedge_delay", NULL), p, "must not be negative");
		else if (sec * 1000 + ns / 1000000 > HEDGE_DELAY_MAX_MS)
			BERR(mtd_cfg__at(b, m, "hedge_delay", NULL), p, "must be at most %ds",
			     HEDGE_DELAY_MAX_MS / 1000);
		else
			out->hedge_delay_ms = sec * 1000 + ns / 1000000;
	}
	if (m->replay_buffer != 0)
		out->replay_buffer = mtd_cfg__u32_limit(b, m->replay_buffer, 256u << 10, REPLAY_BUFFER_MAX, m,
		                                        "replay_buffer", path);
	if (m->fallback != NULL) {
		const Maitred__Config__V1__Fallback *fb = m->fallback;
		char fp[256];

		mtd_cfg__sub(fp, sizeof(fp), path, "fallback");
		out->fallback.set = true;
		out->fallback.status = (int)fb->status;
		if (fb->status < 0 || fb->status > 16)
			BERR(mtd_cfg__at(b, fb, "status", NULL), mtd_cfg__sub(p, sizeof(p), fp, "status"),
			     "unknown status number %d", (int)fb->status);
		if (fb->message[0] != '\0') {
			out->fallback.message = mtd_cfg__dup_or_oom(b, fb->message);
			if (fb->status == MAITRED__CONFIG__V1__GRPC_STATUS__OK)
				BERR(mtd_cfg__at(b, fb, "message", NULL), mtd_cfg__sub(p, sizeof(p), fp, "message"),
				     "a grpc-message goes with a non-OK status");
		}
		if (fb->response_base64.len != 0) {
			if (fb->status != MAITRED__CONFIG__V1__GRPC_STATUS__OK)
				BERR(mtd_cfg__at(b, fb, "response_base64", NULL),
				     mtd_cfg__sub(p, sizeof(p), fp, "response_base64"),
				     "a response message goes with status OK");
			else if (fb->response_base64.len > REPLAY_BUFFER_MAX)
				BERR(mtd_cfg__at(b, fb, "response_base64", NULL),
				     mtd_cfg__sub(p, sizeof(p), fp, "response_base64"), "longer than %u bytes",
				     REPLAY_BUFFER_MAX);
			out->fallback.response = mtd_cfg__malloc(fb->response_base64.len);
			if (out->fallback.response == NULL) {
				b->d->oom = true;
				return;
			}
			memcpy(out->fallback.response, fb->response_base64.data, fb->response_base64.len);
			out->fallback.response_len = fb->response_base64.len;
		}
	}
}

void mtd_cfg__build_retry_budget(struct builder *b, const PbRetryBudget *m, const char *path,
                                 struct mtd_fault_budget_cfg *out)
{
	char p[256];

	*out = (struct mtd_fault_budget_cfg){.set = false};
	if (m == NULL)
		return;
	out->set = true;
	out->ratio = 0.2;
	out->min_per_second = 10;
	if (m->ratio != NULL) {
		if (!(isfinite(m->ratio->value) && m->ratio->value >= 0 && m->ratio->value <= 1000))
			BERR(mtd_cfg__at(b, m, "ratio", NULL), mtd_cfg__sub(p, sizeof(p), path, "ratio"),
			     "must be in 0..1000");
		else
			out->ratio = m->ratio->value;
	}
	if (m->min_per_second != NULL) {
		if (m->min_per_second->value > 1000000)
			BERR(mtd_cfg__at(b, m, "min_per_second", NULL),
			     mtd_cfg__sub(p, sizeof(p), path, "min_per_second"), "must be at most 1000000");
		else
			out->min_per_second = m->min_per_second->value;
	}
}
