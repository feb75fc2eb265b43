/* Building runtime snapshots and dropping references on them (runtime.c).
 * Types: runtime-t.h. */
#ifndef MTD_RUNTIME_H
#define MTD_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "sidecar/control/runtime-t.h"

struct mtd_cfg;
struct mtd_cfg_service;
struct mtd_cfg_tls;
struct mtd_control;
struct mtd_disc_endpoint;
struct ssl_ctx_st;

/* Build the first runtime for cfg (takes ownership of cfg, also on
 * failure), for a process of n_workers workers. Errors (e.g. an unreadable
 * certificate) are written to err. */
struct mtd_runtime *mtd_runtime_new(struct mtd_control *ctl, struct mtd_cfg *cfg, unsigned n_workers, char *err,
                                    size_t errlen);
/* Drop one reference on a runtime / service snapshot / endpoint: any
 * thread. The last one queues the object for the control thread. */
void mtd_runtime_unref(struct mtd_runtime *rt);
void mtd_rt_service_unref(struct mtd_rt_service *s);
void mtd_endpoint_unref(struct mtd_endpoint *ep);
/* A new endpoint identity for d (borrowed: copied) with one reference,
 * room for n_workers pool slots, its warmup started at d's start or
 * now_ms; host is its SNI and certificate name default (NULL: the
 * address's own host). NULL when out of memory, or when d's address is
 * not AF_INET or AF_INET6 or its text has no port. Control thread (tests
 * too). Freed by mtd_endpoint_free once its last reference went
 * (mtd_endpoint_unref: the control thread's reclaim). */
struct mtd_endpoint *mtd_endpoint_new(const struct mtd_disc_endpoint *d, const char *host, unsigned n_workers,
                                      int64_t now_ms);
void mtd_endpoint_free(struct mtd_endpoint *ep);
/* Its host (SNI and certificate name default): the one it was made with,
 * or its text's own host, copied into buf (size bytes, cut to fit). Any
 * thread; the result lives as long as ep or buf. */
const char *mtd_endpoint_host(const struct mtd_endpoint *ep, char *buf, size_t size);
/* Called by mtd_runtime_tick with endpoints eps[0..n) of service si whose
 * service-level ejection just ended (the caller restarts their warmup). */
typedef void mtd_runtime_back_fn(struct mtd_control *ctl, size_t si, struct mtd_endpoint *const *eps, size_t n);
/* Background strategy work (Ribbon-style weight refresh) and outlier
 * ticks of every service of rt; control thread. */
void mtd_runtime_tick(struct mtd_runtime *rt, mtd_runtime_back_fn *back);
/* A new runtime: the control loop's current one (ctl->rt) with service
 * si's endpoint set replaced by eps[0..n) (borrowed: copied). NULL with
 * *same when the set equals the current one (nothing to do); NULL with the
 * reason in err otherwise ("out of memory" in it when that was it). Not
 * published: the caller does (publish.c). Control thread. */
struct mtd_runtime *mtd_runtime_with_endpoints(struct mtd_control *ctl, size_t si, const struct mtd_disc_endpoint *eps,
                                               size_t n, bool *same, char *err, size_t errlen);
/* Several services changed at once (a control plane's response): one
 * runtime, assembled once, instead of one per service. Begin from the
 * current runtime; set each service (its snapshot built at once, as
 * mtd_runtime_with_endpoints does); end returns the new runtime (not
 * published) or NULL when nothing changed (or out of memory: the
 * services keep their sets). Control thread, within one turn. */
struct mtd_rt_batch;
struct mtd_rt_batch *mtd_runtime_batch_begin(struct mtd_control *ctl);
/* Service si over eps[0..n) (borrowed; NULL = its current set) with the
 * config overridden by over (borrowed: the snapshot takes a reference;
 * NULL = the override in force, if any; an over of the same base and
 * tag as the one in force is that one) and the UNAVAILABLE message
 * unavailable (NULL = none). A set given (eps) is the source's answer;
 * without one, waiting says the source has still not answered (the
 * message names what it waits for: calls wait, runtime-t.h `awaiting`)
 * rather than reported an error. 0 (changed), 1 (nothing to change), or
 * -EINVAL / -ENOMEM with the reason in err (the service keeps its
 * snapshot). */
int mtd_runtime_batch_set(struct mtd_rt_batch *bt, size_t si, struct mtd_rt_over *over,
                          const struct mtd_disc_endpoint *eps, size_t n, const char *unavailable, bool waiting,
                          char *err, size_t errlen);
/* The snapshot of service si in the batch as it stands. */
const struct mtd_rt_service *mtd_runtime_batch_service(const struct mtd_rt_batch *bt, size_t si);
struct mtd_runtime *mtd_runtime_batch_end(struct mtd_rt_batch *bt);
/* Before rt is published over old (the current runtime, ctl->rt): mark
 * gone at rt->gen every identity old holds and rt does not (runtime-t.h
 * gone_gen), so that a worker taking rt retires their pools. Visits only
 * the services rt changed. Control thread. */
void mtd_runtime_mark_gone(const struct mtd_runtime *old, const struct mtd_runtime *rt);
/* Drop a reference on an override; the last frees it (control thread). */
void mtd_rt_over_unref(struct mtd_rt_over *o);
/* The batch's runtime takes xr as its control plane's routes (a
 * reference transferred, also on failure; NULL = none), a new runtime
 * even when no service changed. xr's service indices are the batch's
 * config's. */
void mtd_runtime_batch_set_xroutes(struct mtd_rt_batch *bt, struct mtd_rt_xroutes *xr);
/* The batch's runtime no longer awaits the listener's routes (runtime-t.h
 * `routes_awaited`): they came, or the server said there are none. A new
 * runtime even when nothing else changed. */
void mtd_runtime_batch_routes_answered(struct mtd_rt_batch *bt);
/* Drop a reference on a control plane's routes (control thread). */
void mtd_rt_xroutes_unref(struct mtd_rt_xroutes *xr);
/* A new runtime with service si rebuilt over its current set: with the
 * UNAVAILABLE message reason (set_unavailable; waiting: the source has
 * not answered yet and reason says what it waits for, else the reason is
 * its error, an answer), or to take what changed on its identities
 * (returned_ms: warmup restarts). NULL + err when out of memory. Not
 * published. Control thread. */
struct mtd_runtime *mtd_runtime_rebuilt(struct mtd_control *ctl, size_t si, bool set_unavailable, const char *reason,
                                        bool waiting, char *err, size_t errlen);
/* A new runtime: the current one with every service whose TLS context is
 * `old` rebuilt over its current set with `ctx` (a context made again
 * from the same files: certwatch.c), a reference of its own taken. NULL +
 * err when out of memory. Not published. Control thread. */
struct mtd_runtime *mtd_runtime_with_ctx(struct mtd_control *ctl, const struct ssl_ctx_st *old, struct ssl_ctx_st *ctx,
                                         char *err, size_t errlen);
/* Give a runtime not yet published its inbound listener set (a reference
 * transferred; NULL = none): mtd_runtime_new and mtd_runtime_reload build
 * none. Changes over the same config share the current one. */
void mtd_runtime_set_inbound(struct mtd_runtime *rt, struct mtd_rt_inset *set);
/* A new runtime: the current one with the inbound listener set `set` (a
 * reference transferred, also on failure; made over the same config:
 * certwatch.c). NULL when out of memory. Not published. Control thread. */
struct mtd_runtime *mtd_runtime_with_inbound(struct mtd_control *ctl, struct mtd_rt_inset *set);
/* Drop a reference on an inbound set / socket set: control thread for a
 * set; any thread for a socket set (a connection's, inbound.c). */
void mtd_rt_inset_unref(struct mtd_rt_inset *set);
void mtd_rt_insocks_unref(struct mtd_rt_insocks *k);
/* The service, or one of its methods, has a warmup window. */
bool mtd_runtime_warms_up(const struct mtd_cfg_service *c);
/* The control loop whose mailboxes take the objects whose last reference
 * went (mtd_control_init binds it, fini unbinds). */
void mtd_runtime_bind(struct mtd_control *ctl);
/* Free everything queued for reclaim (control thread, or at exit). */
void mtd_runtime_reclaim(struct mtd_control *ctl);
/* A runtime for a reloaded config (ownership of cfg taken, also on
 * failure): every service whose name was there before keeps the
 * identities (stats, warmup start, connections) of the endpoints that stay;
 * a DNS or etcd service whose source settings did not change keeps its
 * current endpoint set until its source reports. An xDS service keeps it
 * with the override over_now (may be NULL: none) gives the new config's
 * service now (a control plane's settings, its TLS above all, come with
 * its endpoints or the endpoints do not: reload.c passes the xDS
 * client's). NULL + err on failure (the running one stays). Control
 * thread. */
struct mtd_rt_over;
typedef struct mtd_rt_over *mtd_rt_over_now_fn(struct mtd_control *ctl, const struct mtd_cfg_service *base);
struct mtd_runtime *mtd_runtime_reload(struct mtd_control *ctl, struct mtd_cfg *cfg, mtd_rt_over_now_fn *over_now,
                                       char *err, size_t errlen);
/* Host is an IPv4/IPv6 literal. */
bool mtd_rt_host_is_literal(const char *host);
/* Why a registry record naming `identity` may not be used by a service
 * whose upstream TLS is tls, or NULL when it may: with FROM_REGISTRY the
 * record must name a typed identity (lib/identity) that matches one of
 * tls.allowed_identities when the service lists any. One rule for the
 * records etcd hands over and for the endpoints a reload carries over
 * from the running snapshot (the watcher lists again only later, or never
 * while etcd is unreachable). */
const char *mtd_runtime_identity_refused(const struct mtd_cfg_tls *tls, const char *identity);

/* What a discovered service waits for before its source's first report
 * (what its calls wait for, and fail with past discovery.initial_wait):
 * in the snapshots built before the source starts (the listener may take
 * calls then) and what the source sets when it starts, one text for both:
 * "waiting for the first DNS answer", "etcd: waiting for the first list
 * of PREFIX from ADDRESS". Written to buf (len bytes) when it needs one;
 * NULL for a STATIC service. */
const char *mtd_runtime_waiting(const struct mtd_cfg_service *sc, char *buf, size_t len);

#endif
