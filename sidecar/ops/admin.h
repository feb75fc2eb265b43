/* The admin endpoint: HTTP/1.1 (libevent evhttp) on the control thread's
 * event base. Read-only except POST /drain:
 *
 *   GET  /metrics      Prometheus text (prometheus.c)
 *   GET  /clusters     services, policies, endpoints and their live figures (JSON)
 *   GET  /config_dump  the running config as JSON, secrets redacted
 *   GET  /healthz      200 while the process serves its admin port
 *   GET  /ready        200 when listeners are up, the config is loaded and
 *                      every service has an endpoint; 503 (with why) else,
 *                      and during a drain
 *   POST /drain        start draining, as SIGTERM
 *   GET  /             the live page (admin_page.html, embedded)
 *
 * Unknown paths get 404, a known path with another method 405 (with Allow).
 * Every figure comes from atomics or per-worker single-writer counters, so
 * a request costs the workers nothing (metrics.h). */
#ifndef MTD_ADMIN_SERVER_H
#define MTD_ADMIN_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
struct mtd_cfg_addr;
struct mtd_runtime;

/* What the admin reads from the control loop. Every pointer is read on the
 * control thread (the admin's handlers run there too), so plain fields are
 * fine; they must outlive the server. */
struct mtd_admin_view {
	struct mtd_runtime *const *rt; /* the runtime in use now */
	const bool *draining;
	const bool *listening; /* worker listeners are up */
	unsigned n_workers;
	int64_t start_wall_ms;
	void (*drain)(void *arg, const char *why); /* as SIGTERM */
	void *arg;
	struct mtd_xds *const *xds; /* the xDS client in use, for /config_dump; NULL = none */
};

struct mtd_admin;
struct mtd_xds;

/* Bind addr and serve on base. NULL with a message in err when the address
 * cannot be bound (or memory runs out). Control thread. */
struct mtd_admin *mtd_admin_start(struct event_base *base, const struct mtd_cfg_addr *addr,
                                  const struct mtd_admin_view *view, char *err, size_t errlen);
/* Close the port and free everything (NULL is fine). */
void mtd_admin_free(struct mtd_admin *a);

#endif
