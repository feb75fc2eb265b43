/* Active health checks: grpc.health.v1.Health/Check on every
 * endpoint of the services that set health_check, over the endpoint's
 * pooled connection: the check is one more stream of a worker's pool
 * (sidecar/io/pool.c), so it proves the path calls take and costs no
 * connection of its own.
 *
 *             unhealthy_threshold failures in a row
 *    HEALTHY ---------------------------------------> UNHEALTHY
 *       ^     (NOT_SERVING, an error, no answer in       |
 *       |      timeout, the connection refused)          |
 *       +------- healthy_threshold SERVING in a row -----+
 *                (and its warmup starts again)
 *
 * Every endpoint starts HEALTHY. The state belongs to the endpoint
 * identity (struct mtd_endpoint.hc_down), so it survives snapshot changes;
 * the current snapshot's bitmap (struct mtd_rt_hc) mirrors it and every
 * pick excludes its bits unless every endpoint of the service is unhealthy
 * (then all are used: better a doubtful answer than none). The set of
 * endpoints checked follows the current runtime (reloads, discovery).
 *
 * Threads: the control thread owns the schedule and the state (targets,
 * hc_down, the bitmaps). At each interval it hands the check to one
 * worker (its mailbox, sidecar/control/mailbox.h: struct
 * mtd_worker.hc_inbox): one whose pool has a usable connection to the
 * endpoint (struct mtd_ep_pools.pooled), else the target's own. The worker puts it in
 * its pool for the endpoint: it takes the first free stream slot of a
 * connection that has the peer's SETTINGS, before waiting calls; only
 * when the pool has no usable connection does the pool open one, counted
 * and kept like any other (a check then keeps it from idling out, and
 * calls use it). A pool backing off after failed connects fails the
 * check at once. health_check.timeout bounds the whole check (waiting
 * included; a late stream gets RST_STREAM CANCEL). The worker sends the
 * answer back (mtd_health's mailbox on the control base);
 * every check sends exactly one, so nothing is lost when an endpoint
 * leaves or the process stops. */
#ifndef MTD_SIDECAR_HEALTH_H
#define MTD_SIDECAR_HEALTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mtd_control;
struct mtd_health;
struct mtd_worker;
struct mtd_conn;
struct mtd_hc_probe;

/* Start checking; ctl (and its workers) must outlive the returned object.
 * Services without health_check cost nothing (one timer per second
 * compares generations). NULL on out of memory (logged; the data plane
 * runs without checks). Control thread. */
struct mtd_health *mtd_health_start(struct mtd_control *ctl);
/* Stop every check and free h (NULL is a no-op). After the workers were
 * freed (their checks have all answered by then). */
void mtd_health_free(struct mtd_health *h);

/* ---- the worker half ---- */

/* A check runs as a check stream of its endpoint's pool (io/stream-t.h):
 * the pool and the connection reach it only through its stream ops. */

/* The worker's inbox: set up in mtd_worker_new (before the thread runs;
 * 0, or -EINVAL from mtd_mbox_init); fini after its pools were freed
 * (checks still in the inbox answer "stopping"). */
int mtd_hc_worker_init(struct mtd_worker *w);
void mtd_hc_worker_fini(struct mtd_worker *w);
#endif
