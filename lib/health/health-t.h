/* Types of lib/health that the config carries (see outlier.h for what
 * uses them). Pure data. */
#ifndef MTD_HEALTH_T_H
#define MTD_HEALTH_T_H

#include <stdbool.h>
#include <stdint.h>

/* Validated options with every default applied (config: outlier_detection). */
struct mtd_outlier_config {
	bool enabled;
	uint32_t consecutive_failures; /* 0 = this rule is off; default 5 */
	uint32_t failure_percentage;   /* 0 = this rule is off; else 1..100 */
	uint32_t min_requests;         /* calls an interval needs for the % rule; default 10 */
	int64_t interval_ms;           /* % evaluation period and decay step; default 10 s */
	int64_t base_ejection_ms;      /* default 30 s */
	int64_t max_ejection_ms;       /* cap on base x times ejected; default 300 s */
	uint32_t max_ejection_percent; /* of the set, at once; default 10; 0 = never eject */
	uint32_t panic_percent;        /* serving share under which ejection is ignored; default 50 */
};

#define MTD_OUTLIER_DEFAULT_CONSECUTIVE   5u
#define MTD_OUTLIER_DEFAULT_MIN_REQUESTS  10u
#define MTD_OUTLIER_DEFAULT_INTERVAL_MS   10000
#define MTD_OUTLIER_DEFAULT_BASE_MS       30000
#define MTD_OUTLIER_DEFAULT_MAX_MS        300000
#define MTD_OUTLIER_DEFAULT_MAX_PERCENT   10u
#define MTD_OUTLIER_DEFAULT_PANIC_PERCENT 50u

/* Active health checks (config: health_check). */
struct mtd_hc_config {
	bool enabled;
	int64_t interval_ms;          /* default 5 s */
	int64_t timeout_ms;           /* default 1 s */
	uint32_t unhealthy_threshold; /* default 3 */
	uint32_t healthy_threshold;   /* default 2 */
	char *service_name;           /* owned by the config; "" = the server */
};

/* Circuit breaking (config: circuit_breaker); 0 = no limit. */
struct mtd_circuit_config {
	uint32_t max_calls;              /* in flight, per service, all workers */
	uint32_t max_pending;            /* waiting for a connection, per service */
	uint32_t max_calls_per_endpoint; /* in flight on one endpoint */
};

#endif
