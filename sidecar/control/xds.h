/* The xDS client (xds.c, whose header says which xds_*.c beside it owns
 * what): one ADS stream to the management server of the config's `xds`
 * block, on the control thread's gRPC client (gclient.h), feeding the
 * services whose source is discovery.xds.
 *
 * Protocol (state of the world, envoy.service.discovery.v3): CDS for
 * exactly the clusters the running services name, then EDS for their EDS
 * names (eds_cluster_config.service_name, else the cluster's). Every
 * response is answered: an ACK (its version_info and nonce), or a NACK
 * (the last accepted version, its nonce, error_detail INVALID_ARGUMENT
 * naming each refused resource and why, logged at most once a second per
 * type). A refused resource keeps the last good one of its name in force;
 * the others of the same response apply. A cluster the server stops
 * sending (CDS is state of the world) leaves its services without
 * endpoints, naming why; an assignment it stops sending does not (EDS
 * responses need not repeat every name).
 *
 * What the services see: an assignment replaces the endpoint set of the
 * services on its cluster, and only theirs (mtd_control_set_endpoints);
 * until their cluster and its assignment arrived they answer UNAVAILABLE
 * naming what is awaited. The connection: 5 s to connect, a PING every
 * 310 s (grpc-go servers refuse them more often); when the stream or the connection goes, it is made again after a
 * jittered backoff (first within 1 s, doubling to 30 s; a response on a
 * stream starts the count again), every name subscribed again with the
 * versions last accepted, and meanwhile the last good resources serve.
 *
 * Lifetime: the control loop holds one client while the config has an
 * xds block (ctl->xds), across reloads whose block is the same (the
 * stream and every resource kept); a reload that changes the block
 * replaces it (mtd_xds_prepare, then commit: the new stream starts, the
 * services keep their sets until it reports). The per-service source
 * (mtd_xds_source_ops) binds a service to a cluster of that client.
 *
 * Threads: control thread only. */
#ifndef MTD_XDS_CLIENT_H
#define MTD_XDS_CLIENT_H

#include <stdbool.h>
#include <stddef.h>

#include "sidecar/control/control.h"

struct mtd_cfg;
struct mtd_control;
struct mtd_xds;
struct mtd_json;

/* The source of services with discovery.xds: binds the service to its
 * cluster on ctl->xds (none: the service stays UNAVAILABLE, logged). */
extern const struct mtd_disc_source_ops mtd_xds_source_ops;

/* Every source of the config started (sources.c): the services bound to
 * x take what it holds now, in one snapshot, and the subscriptions
 * follow them (after a reload: the cluster's options at once, not a turn
 * later on the config's own). NULL x is a no-op. */
void mtd_xds_sources_started(struct mtd_xds *x);

/* For a reload's runtime (runtime.c), not yet published: the override a
 * service of the new config (base, with discovery.xds) gets from the
 * cluster x holds now and its last good assignment, as the stream would
 * give it once the new config's sources start; NULL when x (may be NULL)
 * has no good cluster or assignment for it, or out of memory. So the
 * snapshot published by the reload carries the cluster's settings (its
 * TLS above all) with the endpoints it keeps, never the endpoints alone. */
struct mtd_rt_over;
struct mtd_cfg_service;
struct mtd_rt_over *mtd_xds_over_now(struct mtd_xds *x, const struct mtd_cfg_service *base);

/* A reload's new runtime rt, not yet published, takes the routes in
 * force of x (xds.listener's), bound to its config's services, so that
 * no call of the new config misses them (a route that no longer fits is
 * logged, and calls go by :path until routes that fit arrive); also when
 * the xds block changed but names the same listener (the new client
 * keeps them until its own arrive: mtd_xds_commit). NULL x, no routes,
 * another listener or none in rt's config, or routes already: a no-op. */
struct mtd_runtime;
void mtd_xds_carry_routes(struct mtd_xds *x, struct mtd_runtime *rt);
/* A config just loaded for a reload (taken), given the services created
 * for the clusters of the routes in force that none of its own follows
 * (x's listener being its xds.listener): the reloaded process keeps
 * them as a fresh one would have them. cfg itself when there are none
 * or they cannot be made (logged). */
struct mtd_cfg *mtd_xds_keep_created(struct mtd_xds *x, struct mtd_cfg *cfg);

/* A reload's first half: when cfg's xds block differs from the running
 * client's (or there is none running), a new client for it, built (its
 * TLS context loaded) but not connected, in *next; when it is the same, or
 * cfg has none, *next = NULL. 0, or -1 with the reason in err (nothing
 * kept). */
int mtd_xds_prepare(struct mtd_control *ctl, const struct mtd_cfg *cfg, struct mtd_xds **next, char *err,
                    size_t errlen);
/* The second half, with ctl->rt the new config's runtime and the sources
 * stopped: next (when not NULL) replaces ctl->xds and connects; with
 * next NULL, a config without xds drops ctl->xds. Does not fail. */
void mtd_xds_commit(struct mtd_control *ctl, struct mtd_xds *next);
/* Free a client (its stream and connection closed; no callback after).
 * NULL is a no-op. */
void mtd_xds_free(struct mtd_xds *x);

/* /config_dump's "xds" value: the server, the connection, and per type
 * and per resource the version accepted, the nonce it came with and the
 * last NACK (a JSON object; null when x is NULL). */
void mtd_xds_dump(const struct mtd_xds *x, struct mtd_json *j);

#endif
