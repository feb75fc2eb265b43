/* Reading the figures (control thread): what /metrics and the admin's
 * pages show, summed over the workers with relaxed loads (metrics.h has
 * the threading contract: a figure may be a call behind, never torn), and
 * the /metrics text (Prometheus text format). */
#ifndef MTD_PROMETHEUS_H
#define MTD_PROMETHEUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sidecar/ops/metrics-t.h"

struct mtd_abuf;
struct mtd_runtime;

/* Everything the admin shows that is not in the runtime snapshot. */
struct mtd_mx_process {
	unsigned n_workers;
	int64_t start_wall_ms;
	uint64_t config_generation;
	bool draining;
};

struct mtd_rt_service;
/* Per endpoint of a service at one instant: warmup progress in [0, 1] (1 =
 * warm or no warmup) and the weight its pickers use now. */
struct mtd_mx_warm {
	double progress, effective;
};
/* For every endpoint of s at now_ms, in one O(n) pass: an allocated array
 * of s->n_eps entries (caller frees), NULL when out of memory. */
struct mtd_mx_warm *mtd_metrics_warmups(const struct mtd_rt_service *s, int64_t now_ms);

/* Health of an endpoint of a service snapshot, as the admin shows it:
 * outlier ejection (over the service's set and, when method_scoped, the
 * methods' sets) and the active checks' state. Control thread (hc_down is
 * the control thread's; the rest are atomics). */
enum mtd_mx_hc { MTD_MX_HC_UNCHECKED, MTD_MX_HC_UNKNOWN, MTD_MX_HC_SERVING, MTD_MX_HC_NOT_SERVING };
struct mtd_mx_health {
	bool ejected;             /* in any of the service's ejection sets */
	int64_t ejected_until_ms; /* wall ms the latest ejection ends (0 = not ejected; 1 = being written) */
	uint64_t ejections;       /* ejections ever, over the sets */
	enum mtd_mx_hc hc;        /* UNCHECKED: the service has no health_check */
	uint64_t hc_checks, hc_failures;
};
void mtd_metrics_health(const struct mtd_rt_service *s, size_t i, struct mtd_mx_health *out);
extern const char *const mtd_mx_hc_names[4];

/* Per service figures summed over its methods and the workers, parallel
 * to rt->services (caller frees); NULL when out of memory. */
struct mtd_mx_service {
	uint64_t retries, budget_exhausted, fallback, failsafe;
	uint64_t circuit_rejected[MTD_MX_CIRCUIT_N];
};
struct mtd_mx_service *mtd_metrics_services(const struct mtd_runtime *rt);

/* The whole /metrics text for rt onto b. */
void mtd_metrics_render(struct mtd_abuf *b, const struct mtd_runtime *rt, const struct mtd_mx_process *proc);

#endif
