/* etcd v3 on the control thread: the endpoint source
 * that lists and watches a service's key prefix (etcd_watch.c), and the
 * self-registration of this pod's apps under a lease (etcd_register.c).
 * Both speak etcd's gRPC API (protos/etcd/) over the control thread's gRPC
 * client (gclient.h).
 *
 * Threads: control thread only (the main thread's event loop). */
#ifndef MTD_ETCD_H
#define MTD_ETCD_H

#include <stdbool.h>
#include <stddef.h>

#include "config/config.h"
#include "sidecar/control/control.h"

struct event_base;

/* The endpoint source for services whose source is MTD_CFG_SOURCE_ETCD.
 *
 * Behaviour: Range the prefix, hand every valid record to the runtime
 * (mtd_control_set_endpoints), then Watch from the next revision; the
 * changes one read brings become one new set, at the end of that turn. A record that does not
 * parse or validate is logged once (key, revision, reason) and skipped; a
 * key whose new value is bad keeps its last good value. A broken watch or
 * connection: back off (250 ms doubling to 5 s), try the next cluster
 * endpoint, Watch again from the last revision seen; a compacted revision
 * lists again. While etcd is unreachable the last set stays in force and
 * the outage is logged once; until the first list arrives the service
 * answers UNAVAILABLE naming etcd and the reason. */
extern const struct mtd_disc_source_ops mtd_etcd_source_ops;

/* Self-registration (Config.register): for each entry, a lease of its TTL
 * kept alive at TTL/3 and the record put under "<prefix><address>"; a lost
 * lease or an etcd outage registers again; with when_serving, registered
 * only while the app's grpc.health.v1 Check answers SERVING (polled every
 * second). */
struct mtd_register;
/* Start every entry of cfg->registers (copied: cfg may go away after);
 * none gives an empty registrar (a reload's heir). NULL on out of memory
 * (logged). */
struct mtd_register *mtd_register_start(struct event_base *base, const struct mtd_cfg *cfg);
/* SIGTERM: revoke every lease (which deletes the records) and call
 * done(arg) from the event loop once all answered or after 2 s, whichever
 * comes first. Returns false (and never calls done) when there is nothing
 * to revoke: the caller goes on at once. NULL r returns false. */
bool mtd_register_shutdown(struct mtd_register *r, void (*done)(void *arg), void *arg);
void mtd_register_free(struct mtd_register *r);
/* Reload with changed entries: the heir (started on the
 * new config, or an empty one) takes old over. old's leases are revoked,
 * deleting its records, once every entry of heir is live (or after 10 s,
 * or at once when heir has no entries, or when heir shuts down), and old
 * is then freed. A record both configs keep (same key) never disappears:
 * the heir's Put moves it to the heir's lease before the old lease goes.
 * The heir owns old until then (mtd_register_free(heir) frees it too).
 * false on out of memory (old untouched). NULL old: nothing to do. */
bool mtd_register_handover(struct mtd_register *old, struct mtd_register *heir);
/* Whether cfg's register entries are those r runs (a reload compares).
 * NULL r matches a cfg without any. */
bool mtd_register_same_config(const struct mtd_register *r, const struct mtd_cfg *cfg);

#endif
