/* The live page's history, plotted so that a change is seen rather than
 * read off numbers: the last five minutes of calls/s, error ratio and p99
 * per endpoint and per split group, sampled once a second on the control
 * thread from the figures the admin already reads (the endpoints'
 * mtd_lb_stats, their latency histogram included; a split group is the
 * sum of the endpoints whose metadata carries its value). A series is
 * made at its first call (the first sample whose figures are not all
 * zero), within the caps: an endpoint or group never called has none and
 * no points (a mesh's thousands of idle endpoints cost nothing here).
 * Nothing on the call path. Control thread only. */
#ifndef MTD_HISTORY_H
#define MTD_HISTORY_H

#include <stdint.h>

struct mtd_json;
struct mtd_runtime;

#define MTD_HISTORY_POINTS       300 /* one a second: five minutes */
#define MTD_HISTORY_MAX_ENDPOINT 256 /* series kept for endpoints, over all services */
#define MTD_HISTORY_MAX_GROUP    64  /* and for split groups */

/* Take one point of every endpoint and split group of rt at now_ms (the
 * control loop's tick, about once a second). Series of endpoints and
 * groups gone from the running config for five minutes are dropped. */
void mtd_history_tick(const struct mtd_runtime *rt, int64_t now_ms);

/* /history: {"now", "endpoints": [{"service", "endpoint", "points":
 * [[t_ms, calls_s, error_ratio, p99_s], ...]}], "groups": [{"service",
 * "method", "group", "weight", "current_weight", "cut_at", "points"}]}, the
 * series of rt's endpoints and split groups in its order, with the points
 * after since_ms (0: all five minutes); "points" is empty for one never
 * called. */
void mtd_history_json(struct mtd_json *j, const struct mtd_runtime *rt, int64_t since_ms, int64_t now_ms);

/* Free every series (after the admin stopped). */
void mtd_history_fini(void);

#endif
