/* etcd v3 on the control thread (issue 7 section 4): the self-registration
 * of this pod's apps under a lease, speaking etcd's gRPC API (protos/etcd/)
 * over the control thread's gRPC client (gclient.h).
 *
 * Threads: control thread only (the main thread's event loop). */
#ifndef MTD_ETCD_H
#define MTD_ETCD_H

#include <stdbool.h>
#include <stddef.h>

#include "config/config.h"

struct event_base;

/* Self-registration (Config.register): for each entry, a lease of its TTL
 * kept alive at TTL/3 and the record put under "<prefix><address>"; a lost
 * lease or an etcd outage registers again; with when_serving, registered
 * only while the app's grpc.health.v1 Check answers SERVING (polled every
 * second). */
struct mtd_register;
/* Start every entry of cfg->registers (copied: cfg may go away after).
 * NULL when there are none or out of memory (logged). */
struct mtd_register *mtd_register_start(struct event_base *base, const struct mtd_cfg *cfg);
/* SIGTERM: revoke every lease (which deletes the records) and call
 * done(arg) from the event loop once all answered or after 2 s, whichever
 * comes first. Returns false (and never calls done) when there is nothing
 * to revoke: the caller goes on at once. NULL r returns false. */
bool mtd_register_shutdown(struct mtd_register *r, void (*done)(void *arg), void *arg);
void mtd_register_free(struct mtd_register *r);
/* Whether cfg's register entries are those r runs (a reload compares: a
 * change of them needs a restart). NULL r matches a cfg without any. */
bool mtd_register_same_config(const struct mtd_register *r, const struct mtd_cfg *cfg);

#endif
