/* Active health checks (issue 8 §3): grpc.health.v1.Health/Check on every
 * endpoint of the services that set health_check, from the control thread
 * over a connection of its own per endpoint (sidecar/gclient.c).
 *
 *             unhealthy_threshold failures in a row
 *    HEALTHY ---------------------------------------> UNHEALTHY
 *       ^     (NOT_SERVING, an error, no answer in       |
 *       |      timeout, the connection refused)          |
 *       +------- healthy_threshold SERVING in a row -----+
 *
 * Every endpoint starts HEALTHY. The state belongs to the endpoint
 * identity (struct mtd_endpoint.hc_down), so it survives snapshot changes;
 * the current snapshot's bitmap (struct mtd_rt_hc) mirrors it and every
 * pick excludes its bits unless every endpoint of the service is unhealthy
 * (then all are used: better a doubtful answer than none). The set of
 * endpoints checked follows the current runtime (reloads, discovery).
 *
 * Threads: the control thread only; workers read the bitmap (atomics). */
#ifndef MTD_SIDECAR_HEALTH_H
#define MTD_SIDECAR_HEALTH_H

struct mtd_control;
struct mtd_health;

/* Start checking; ctl must outlive the returned object. Services without
 * health_check cost nothing (one timer per second compares generations).
 * NULL on out of memory (logged; the data plane runs without checks). */
struct mtd_health *mtd_health_start(struct mtd_control *ctl);
/* Stop every check and free h (NULL is a no-op). */
void mtd_health_free(struct mtd_health *h);

#endif
