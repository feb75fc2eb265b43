/* A service's health blocks: outlier_detection, health_check and
 * circuit_breaker. */
#include <config.h> /* autoconf (lib/config/config.h is the API) */

#include <stdio.h>

#include "config/build-int.h"
#include "fault/fault.h"
#include "health/outlier.h"

static uint32_t percent_or(struct builder *b, const PbOutlier *m, const Google__Protobuf__UInt32Value *v,
                           const char *field, const char *path, uint32_t def)
{
	char p[256];
	if (v == NULL)
		return def;
	if (v->value > 100) {
		BERR(mtd_cfg__at(b, m, field, NULL), mtd_cfg__sub(p, sizeof(p), path, field),
		     "must be a percentage, 0..100");
		return def;
	}
	return v->value;
}

void mtd_cfg__build_outlier(struct builder *b, const PbOutlier *m, const char *path, struct mtd_cfg_service *out)
{
	char p[256];

	mtd_outlier_config_defaults(&out->outlier);
	out->local->failure_statuses = MTD_FAULT_FAILURE_STATUSES;
	if (m == NULL)
		return;
	struct mtd_outlier_config *o = &out->outlier;
	o->enabled = true;
	if (m->consecutive_failures != NULL)
		o->consecutive_failures = m->consecutive_failures->value;
	if (m->failure_percentage > 100)
		BERR(mtd_cfg__at(b, m, "failure_percentage", NULL),
		     mtd_cfg__sub(p, sizeof(p), path, "failure_percentage"),
		     "must be a percentage, 1..100 (0 turns the rule off)");
	else
		o->failure_percentage = m->failure_percentage;
	if (m->min_requests != 0)
		o->min_requests = m->min_requests;
	o->interval_ms =
	        mtd_cfg__dur_ms(b, m->interval, MTD_OUTLIER_DEFAULT_INTERVAL_MS, ZERO_IS_ERROR,
	                        mtd_cfg__at(b, m, "interval", NULL), mtd_cfg__sub(p, sizeof(p), path, "interval"));
	o->base_ejection_ms = mtd_cfg__dur_ms(b, m->base_ejection_time, MTD_OUTLIER_DEFAULT_BASE_MS, ZERO_IS_ERROR,
	                                      mtd_cfg__at(b, m, "base_ejection_time", NULL),
	                                      mtd_cfg__sub(p, sizeof(p), path, "base_ejection_time"));
	int64_t max_def =
	        o->base_ejection_ms > MTD_OUTLIER_DEFAULT_MAX_MS ? o->base_ejection_ms : MTD_OUTLIER_DEFAULT_MAX_MS;
	o->max_ejection_ms = mtd_cfg__dur_ms(b, m->max_ejection_time, max_def, ZERO_IS_ERROR,
	                                     mtd_cfg__at(b, m, "max_ejection_time", NULL),
	                                     mtd_cfg__sub(p, sizeof(p), path, "max_ejection_time"));
	if (m->max_ejection_time != NULL && o->max_ejection_ms < o->base_ejection_ms)
		BERR(mtd_cfg__at(b, m, "max_ejection_time", NULL),
		     mtd_cfg__sub(p, sizeof(p), path, "max_ejection_time"), "must be at least base_ejection_time");
	o->max_ejection_percent = percent_or(b, m, m->max_ejection_percent, "max_ejection_percent", path,
	                                     MTD_OUTLIER_DEFAULT_MAX_PERCENT);
	o->panic_percent =
	        percent_or(b, m, m->panic_threshold, "panic_threshold", path, MTD_OUTLIER_DEFAULT_PANIC_PERCENT);
	if (o->consecutive_failures == 0 && o->failure_percentage == 0)
		BERR(mtd_cfg__at(b, m, NULL, NULL), path,
		     "ejects nothing: set consecutive_failures or failure_percentage (or remove the block)");
	if (m->n_failure_statuses != 0) {
		out->local->failure_statuses = 0;
		for (size_t i = 0; i < m->n_failure_statuses; i++) {
			int code = (int)m->failure_statuses[i];

			snprintf(p, sizeof(p), "%s.failure_statuses[%zu]", path, i);
			if (code == MAITRED__CONFIG__V1__GRPC_STATUS__OK)
				BERR(mtd_cfg__at(b, m, "failure_statuses", NULL), p, "OK is not a failure");
			else if (code < 0 || code > 16)
				BERR(mtd_cfg__at(b, m, "failure_statuses", NULL), p, "unknown status number %d", code);
			else
				out->local->failure_statuses |= 1u << code;
		}
	}
	out->outlier_method_scoped = m->method_scoped;
}

void mtd_cfg__build_health_check(struct builder *b, const PbHealthCheck *m, const char *path, struct mtd_hc_config *out)
{
	char p[256];

	*out = (struct mtd_hc_config){.enabled = false};
	if (m == NULL)
		return;
	out->enabled = true;
	out->interval_ms = mtd_cfg__dur_ms(b, m->interval, 5000, ZERO_IS_ERROR, mtd_cfg__at(b, m, "interval", NULL),
	                                   mtd_cfg__sub(p, sizeof(p), path, "interval"));
	out->timeout_ms = mtd_cfg__dur_ms(b, m->timeout, 1000, ZERO_IS_ERROR, mtd_cfg__at(b, m, "timeout", NULL),
	                                  mtd_cfg__sub(p, sizeof(p), path, "timeout"));
	out->unhealthy_threshold = m->unhealthy_threshold ? m->unhealthy_threshold : 3;
	out->healthy_threshold = m->healthy_threshold ? m->healthy_threshold : 2;
	if (out->unhealthy_threshold > 1000)
		BERR(mtd_cfg__at(b, m, "unhealthy_threshold", NULL),
		     mtd_cfg__sub(p, sizeof(p), path, "unhealthy_threshold"), "must be at most 1000");
	if (out->healthy_threshold > 1000)
		BERR(mtd_cfg__at(b, m, "healthy_threshold", NULL),
		     mtd_cfg__sub(p, sizeof(p), path, "healthy_threshold"), "must be at most 1000");
	out->service_name = mtd_cfg__dup_or_oom(b, m->service_name);
}

void mtd_cfg__build_circuit(const PbCircuit *m, struct mtd_circuit_config *out)
{
	*out = (struct mtd_circuit_config){0};
	if (m == NULL)
		return;
	out->max_calls = m->max_calls;
	out->max_pending = m->max_pending;
	out->max_calls_per_endpoint = m->max_calls_per_endpoint;
}
