/* The figures' tables, shared by the two files of ops/ that use them:
 * metrics.c fills them (init, the call path, discovery), prometheus.c
 * reads them for /metrics and the admin pages. Not for other rooms:
 * they go through metrics.h and prometheus.h. */
#ifndef MTD_METRICS_INT_H
#define MTD_METRICS_INT_H

#include <stdint.h>

#include "sidecar/ops/metrics.h"

/* One table per worker (mtd_metrics_init), until mtd_metrics_fini. */
extern struct mtd_mx_worker *mtd_mx_workers;
extern unsigned mtd_mx_n_workers;
extern struct mtd_mx_disc *mtd_mx_discs; /* control thread only; newest first */

/* split.guard's cuts, by service, method ("*": the service's
 * split) and group: the control thread's, kept across reloads (a
 * counter). */
struct mtd_mx_cut {
	char *service, *method, *group;
	uint64_t n;
	struct mtd_mx_cut *next;
};
extern struct mtd_mx_cut *mtd_mx_cuts;

#endif
