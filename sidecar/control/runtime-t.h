/* The runtime snapshot's types: what workers read, immutable once
 * published (HACKING.md "Snapshots"; the functions are runtime.h's). */
#ifndef MTD_RUNTIME_T_H
#define MTD_RUNTIME_T_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "config/config.h"
#include "core/addr.h"
#include "discovery/discovery.h"
#include "fault/fault-t.h"
#include "lb/lb-t.h"
#include "limit/limit.h"
#include "sidecar/ops/metrics-t.h"
#include "sidecar/control/mailbox.h"

struct mtd_control;
struct mtd_pool;
struct mtd_route_table;
struct mtd_fault_budget;
struct mtd_outlier_set;
struct mtd_lb_picker;
struct mtd_lb_layer;
struct ssl_ctx_st;

/* Snapshots and their reclaim (HACKING.md "Snapshots"):
 *
 *   mtd_runtime  --refs-->  mtd_rt_service  --refs-->  mtd_endpoint
 *   (config, routes,        (one service's endpoint    (an identity: its stats,
 *    one service snapshot    set and pickers; shared    warmup start and
 *    per service)            by runtimes while its      per-worker pools live
 *                            endpoints do not change)   as long as it stays)
 *
 * All three are immutable once published (except the atomics) and carry a
 * struct mtd_ref. The control thread holds the current runtime; each
 * worker holds the runtime it serves and, per runtime, a hold counting the
 * calls routed with it (lib/discovery/discovery.h: the reclaim rule); a
 * pool holds its service snapshot and its endpoint. An object whose last
 * reference goes is freed on the control thread (pickers are freed there,
 * lb.h), at its next turn. */

/* An endpoint's registry key and identity (both NULL for xDS, DNS and
 * static endpoints, which then have none of this block): one allocation,
 * the strings after the struct, freed with the endpoint. */
struct mtd_endpoint_names {
	const char *key; /* registry key, or NULL */
	/* The identity its registry record names (FROM_REGISTRY checks the
	 * server presents it), or NULL. Part of what the record says, like
	 * the address: a changed one is another identity. */
	const char *identity;
};

/* An endpoint's pools, one slot per worker, and which workers have a
 * usable connection: made by its first pool (struct mtd_endpoint.pools). */
struct mtd_ep_pools {
	/* Bit i: worker i (< 64) has a connection to it that took the peer's
	 * SETTINGS and is not closed; set and cleared by that worker (pool.c),
	 * read by health.c to run a check where a connection already is (no
	 * block: no bit). */
	_Atomic uint64_t pooled;
	/* [n_slots]: slot i is worker i's, only it touches it. */
	struct mtd_pool *slot[];
};

/* One endpoint identity (lib/discovery/discovery-t.h): one allocation, the
 * struct then its address (addr[]), made by mtd_endpoint_new (endpoint.c).
 * 64 bytes and the address: an IPv4 one of up to 24 bytes of text (NUL
 * included: "10.244.123.234:18080", any ip:port with a port of up to 5
 * digits) fits glibc's 112-byte chunk (104 usable). */
struct mtd_endpoint {
	struct mtd_ref ref;
	/* Active health checks (health.c) found it unhealthy; control thread
	 * writes it (from the results workers send back), and each snapshot's
	 * unhealthy bitmap starts from it. Beside ref, in what would be
	 * padding. */
	bool hc_down;
	/* Its host (SNI and certificate name default) is stored after its
	 * text: it is not the text's own (a DNS service's name). Immutable. */
	bool own_host;
	uint16_t n_slots; /* pools[]'s length: the workers when it was made (at least 1) */
	const struct mtd_endpoint_names *names; /* NULL: no key, no identity */
	int64_t start_ms;          /* warmup start: the record's, or when first seen */
	struct mtd_lb_stats stats; /* shared by every worker; survives set changes */
	/* Connection figures, shared; NULL until its first connection or
	 * health check (metrics.h mtd_mx_ep_add, mtd_mx_ep_view). */
	struct mtd_mx_endpoint *_Atomic mx;
	/* The generation of the first published runtime that no longer holds
	 * this identity, 0 while the current one holds it (or it was never
	 * published): a worker serving generation g retires its pools once
	 * mtd_endpoint_gone(ep, g). Written by the control thread before it
	 * publishes that runtime (mtd_runtime_mark_gone, which looks only at the
	 * services the runtime changed); never cleared (an identity that left
	 * never comes back: a snapshot reuses only its predecessor's). */
	_Atomic uint64_t gone_gen;
	/* One word for two lives that do not meet:
	 * - returned_ms: when it last came back (active checks SERVING
	 *   again, or its ejection ended), 0 = never: its warmup restarts
	 *   from then. Control thread, and only while it holds a reference:
	 *   mtd_control_rewarm writes it for endpoints of the current
	 *   runtime's service (the tick's) or of a health check's target
	 *   (health.c, a reference held); the builder (runtime.c) reads it
	 *   of the endpoints of the snapshot it builds or of its predecessor,
	 *   which hold theirs.
	 * - reclaim: its link in the control thread's reclaim_eps, written
	 *   by mtd_mbox_post on the thread that dropped the last reference
	 *   (mtd_endpoint_unref), then read by the control thread's reclaim,
	 *   which frees the endpoint. No reference is left by then, so no
	 *   one reads or writes returned_ms again.
	 * (8 B: with ORCA's out-of-band state out of struct mtd_lb_stats,
	 * the struct is 64 B, test_endpoint.) */
	union {
		int64_t returned_ms;
		struct mtd_mbox_link reclaim;
	};
	/* Made by the first pool any worker makes for it (pool.c; core/lazy.h:
	 * compare-and-swap), NULL until then: most endpoints a sidecar knows
	 * are never called. Freed with the endpoint. */
	struct mtd_ep_pools *_Atomic pools;
	/* Its address, immutable, read with the functions below: the
	 * sockaddr (AF_INET or AF_INET6, as long as its family needs: 16 or
	 * 28 bytes), then the text (NUL-terminated: "127.0.0.1:50051", the
	 * id pickers hash), then the host (NUL-terminated) when own_host;
	 * else the host is the text's without the port (and the brackets). */
	unsigned char addr[];
};

_Static_assert(offsetof(struct mtd_endpoint, addr) % _Alignof(union mtd_sockaddr) == 0,
               "an endpoint's sockaddr is aligned");

static inline const struct sockaddr *mtd_endpoint_sa(const struct mtd_endpoint *ep)
{
	return (const struct sockaddr *)(const void *)ep->addr;
}

/* Its sockaddr's length: the family's. */
static inline socklen_t mtd_endpoint_salen(const struct mtd_endpoint *ep)
{
	return mtd_endpoint_sa(ep)->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

/* Its address as text ("127.0.0.1:50051", "[::1]:50051"): the id pickers
 * hash, what logs and metrics name. Lives as long as the endpoint. */
static inline const char *mtd_endpoint_text(const struct mtd_endpoint *ep)
{
	return (const char *)ep->addr + mtd_endpoint_salen(ep);
}

static inline const char *mtd_endpoint_key(const struct mtd_endpoint *ep)
{
	return ep->names ? ep->names->key : NULL;
}

static inline const char *mtd_endpoint_identity(const struct mtd_endpoint *ep)
{
	return ep->names ? ep->names->identity : NULL;
}

/* Whether a worker serving generation gen must no longer use ep: the
 * runtime it serves, or an older one, dropped it (gone_gen). Any thread. */
static inline bool mtd_endpoint_gone(const struct mtd_endpoint *ep, uint64_t gen)
{
	uint64_t g = atomic_load_explicit(&ep->gone_gen, memory_order_relaxed);
	return g != 0 && g <= gen;
}

/* A rate_limit's token bucket, shared by every worker and by
 * the snapshots of one service (or method) while its figures stay. */
struct mtd_rt_bucket {
	struct mtd_ref ref;
	struct mtd_limit_bucket b;
};

struct mtd_rt_method {
	const struct mtd_cfg_method *cfg;
	struct mtd_rt_bucket *limit; /* the method's own rate_limit (reference held), else NULL */
	struct mtd_lb_picker *picker;
	struct mtd_lb_layer *layer; /* NULL unless subset/locality/routing apply */
	/* outlier_detection.method_scoped: this method's own ejection state
	 * over the snapshot's endpoints (owned); else NULL (the service's). */
	struct mtd_outlier_set *outliers;
};

/* Calls of a service in flight and waiting, over every worker (circuit
 * breaking); shared by the snapshots of one service, like the budget. */
struct mtd_rt_load {
	struct mtd_ref ref;
	_Atomic uint32_t calls;
	_Atomic uint32_t pending;
};

/* Endpoints of one snapshot that active health checks found unhealthy
 * (health.c): bit i of down_bits[i / 64]. Written by the control thread,
 * read by pickers (atomics). */
struct mtd_rt_hc {
	_Atomic uint32_t n_down;
	_Atomic uint64_t down_bits[]; /* (n_eps + 63) / 64 words */
};

/* Per snapshot zone and metadata of an endpoint that has metadata (they
 * may change while the endpoint stays); lb_eps[i].attrs points here then. */
struct mtd_rt_epattr {
	/* zone: the snapshot's copy (zones[]), or NULL; meta.kv: owned
	 * copies (strings too). */
	struct mtd_lb_attrs a;
};

/* A service's config as a control plane overrides it (xDS: its Cluster's
 * policy and options, sidecar/control/xds_services.c): a copy of the config's
 * service (`base`) whose pointers still reach into that config (every
 * snapshot built on it holds the config too; `svc.local` is the base's
 * but when an assignment's locality weights turn the zone preference off:
 * then a copy), with its own lb, circuit, outlier, connect
 * timeout, TLS and methods. Immutable; shared by the
 * snapshots of the service while it stays the same (same base, same tag),
 * freed with the last (control thread). */
struct mtd_rt_over {
	struct mtd_ref ref;
	/* What svc points to that it owns (MTD_RT_OVER_OWNS_*), else base's:
	 * svc.methods an array of shallow copies, svc.tls (its strings too),
	 * svc.local a shallow copy. */
	uint8_t owns;
	struct mtd_cfg_service svc;         /* what snapshots read */
	const struct mtd_cfg_service *base; /* the config's own */
	uint64_t tag;                       /* its maker's: equal tags over one base are the same override */
};

#define MTD_RT_OVER_OWNS_METHODS 1u
#define MTD_RT_OVER_OWNS_TLS     2u
#define MTD_RT_OVER_OWNS_LOCAL   4u

/* One service's snapshot: its endpoint set and the pickers built on it. */
struct mtd_rt_service {
	struct mtd_ref ref;
	struct mtd_cfg_box *cfgbox; /* keeps cfg alive */
	const struct mtd_cfg_service *cfg; /* the config's, or &over->svc */
	struct mtd_rt_over *over;          /* a control plane's override (reference held), or NULL */
	struct mtd_endpoint **eps;      /* references held */
	struct mtd_lb_endpoint *lb_eps; /* parallel to eps, what pickers see (weights) */
	struct mtd_rt_epattr *attrs;    /* parallel to eps, or NULL when none has metadata */
	size_t n_eps;
	/* Its zones, owned, each a struct mtd_lb_attrs without metadata (the
	 * zone's string after it): lb_eps[i].attrs of an endpoint in a zone
	 * without metadata, and attrs[i].a.zone, point into them; the
	 * endpoints of a zone share one (runtime.c zone_intern). */
	struct mtd_lb_attrs **zones;
	size_t n_zones;
	struct mtd_lb_picker *picker; /* the service-level policy */
	/* The routing layer (lib/lb/layer.c) over the same endpoints, when
	 * the service uses subset, locality or routing; calls then pick,
	 * begin and end through it instead of picker. NULL otherwise. */
	struct mtd_lb_layer *layer;
	struct mtd_rt_method *methods; /* parallel to cfg->methods */
	struct ssl_ctx_st *ssl_ctx;    /* NULL = h2c (a reference of its own) */
	/* Its upstream TLS policy's generation: TLS on or off, the CA, the
	 * client certificate, the name and identity the server must present
	 * (config-t.h struct mtd_cfg_tls), compared by value. A snapshot
	 * whose policy equals its previous one's keeps the generation (a
	 * certwatch rotation of the same files included); any change makes a
	 * new one, and the connections made under the old one take no new
	 * stream (pool.c). Never 0. */
	uint64_t tls_gen;
	char *unavailable;             /* why the set is empty (UNAVAILABLE message), or NULL */
	/* Its source has not answered yet (no set, no error): while the set
	 * is empty, a call waits for the first one (discovery.initial_wait,
	 * call/park.c) instead of failing with `unavailable`. False for a
	 * static service, and from a source's first answer on: a set (empty
	 * or not) or an error it reports (mtd_control_set_unavailable). */
	bool awaiting;
	/* retry_budget's window: shared by every worker (atomics) and by the
	 * snapshots of one service (it goes on across changes and reloads). */
	struct mtd_fault_budget *budget;
	struct mtd_rt_budget *budget_box;
	/* Ejection state over eps (outlier_detection), owned; NULL = none. */
	struct mtd_outlier_set *outliers;
	struct mtd_rt_load *load; /* reference held */
	struct mtd_rt_hc *hc;     /* owned; NULL = no health_check */
	struct mtd_rt_bucket *limit; /* rate_limit (reference held), or NULL */
	struct mtd_mbox_link reclaim; /* in the control thread's reclaim_svcs */
};

/* A retry budget shared by the snapshots of one service. */
struct mtd_rt_budget {
	struct mtd_ref ref;
	struct mtd_fault_budget b;
};

/* The inbound listener set (mesh mode): what each inbound listener serves,
 * identified by its address (the key), never by its position in the
 * config. Built on the control thread (io/inbound.c) as part of a reload's
 * prepare step, carried by the runtime, read by workers: a worker's
 * listeners, connections and calls find their entry by key (listener) or
 * by policy generation (connection), never by index. */

/* One socket per worker for one listen address, opened by the control
 * thread; worker i takes fd[i] (atomic exchange to -1) the first time a
 * snapshot carrying it reaches it, and owns it from then on. Shared by
 * the snapshots while the address stays; what no worker took is closed
 * when the last reference goes. `conns` counts the inbound connections
 * open on it over every worker (inbound[].max_connections): a connection
 * holds a reference while it counts. */
struct mtd_rt_insocks {
	struct mtd_ref ref;
	uint64_t id; /* unique in the process: a worker's listener remembers it */
	_Atomic uint32_t conns;
	/* Its sockets not closed yet, taken by a worker or not: while some
	 * are, the address is busy with maitred's own sockets on their way
	 * out (a removed listener whose workers have not all taken the
	 * snapshot without it), and a reload that adds it back binds beside
	 * them (inbound.c retired). */
	_Atomic unsigned open;
	char key[64];
	unsigned n;
	_Atomic int fd[];
};

struct mtd_rt_inentry {
	const struct mtd_cfg_inbound *cfg; /* in the runtime's config: authz, app service, limits */
	char key[64];                       /* listen, normalised ("ip:port", "[v6]:port") */
	struct ssl_ctx_st *ctx;             /* the server context (a reference of its own) */
	char by[256];                       /* ctx's own identity (the XFCC By= element), "" = none */
	/* The generation of the policy that decides who may connect: the
	 * TLS file names and the client CA's content. A connection records
	 * the one it was accepted under; a snapshot whose entry for its key
	 * has another (or no entry) sends it GOAWAY. New certificate content
	 * under the same files keeps it. Unique in the process. */
	uint64_t policy;
	struct mtd_rt_insocks *socks; /* reference held */
	unsigned mx;                  /* its figures' slot (ops/mesh.h) */
};

/* Immutable once built; runtimes over the same config share it (one
 * reference each). Freed on the control thread with the last runtime. */
struct mtd_rt_inset {
	struct mtd_ref ref;
	size_t n;
	struct mtd_rt_inentry e[];
};

/* A config shared by the snapshots built from it. */
struct mtd_cfg_box {
	struct mtd_ref ref;
	struct mtd_cfg *cfg; /* owned */
	/* The services' :path table: a function of cfg alone, built with the
	 * box's first runtime and borrowed by every runtime over it (an
	 * endpoint change among 10,000 services does not hash 10,000 names
	 * again). Owned; immutable once built. */
	struct mtd_route_table *routes;
};

/* A control plane's routes (xDS RDS, sidecar/control/xds_listener.c) over one
 * config: what a call whose :path and headers match rules[i] does. Tried
 * after the config's own routes and before the lookup by :path.
 * Immutable; shared by the runtimes over the same config, freed with the
 * last (control thread). */
struct mtd_rt_xtarget {
	int service;    /* the services[] entry */
	uint32_t upto;  /* cumulative weight: picked when the draw is below upto */
	/* retry_policy as FAILOVER over the service's own policy; used
	 * instead of the service's and its methods' when has_fault. */
	struct mtd_fault_policy fault;
	bool has_fault;
};

struct mtd_rt_xroute {
	struct mtd_rt_xtarget *targets; /* none: the call fails (its virtual host had no route for it) */
	size_t n_targets;
	uint32_t total;          /* the last target's upto */
	int64_t deadline_cap_ms; /* 0 = none */
	const char *name;        /* for messages: "Route.name", or the virtual host's "(no route)" */
	/* hash_policy's header as the calls' hash key (kind HEADER, never
	 * fail_on_missing: a call without it hashes at random), else kind
	 * NONE: the service's own hash_key. header points into `owner`. */
	struct mtd_cfg_hash_key hash_key;
	/* The fault filter's config the route's calls take (the route's
	 * override, else its virtual host's, else the filter's own), used
	 * instead of the service's and its methods' fault_injection when
	 * has_fault_injection (it aborts or delays). */
	struct mtd_cfg_fault_injection fault_injection;
	bool has_fault_injection;
};

struct mtd_rt_xroutes {
	struct mtd_ref ref;
	struct mtd_route_rule *rules; /* strings in `owner` */
	struct mtd_rt_xroute *r;      /* parallel to rules */
	size_t n;
	void *owner;        /* the translated RouteConfiguration (struct mtd_xds_routes) */
	void (*owner_free)(void *);
	char *name;         /* the RouteConfiguration's name */
};

struct mtd_runtime {
	struct mtd_ref ref;
	uint64_t gen; /* 1, 2, ...: every published change */
	struct mtd_cfg_box *cfgbox;
	struct mtd_cfg *cfg; /* = cfgbox->cfg */
	struct mtd_route_table *routes;
	struct mtd_rt_service **services; /* parallel to cfg->services, references held */
	struct mtd_rt_inset *inbound;     /* parallel to cfg->inbound (reference held), NULL = none */
	struct mtd_rt_xroutes *xroutes;   /* a control plane's routes (reference held), NULL = none */
	/* xds.listener is set and its client has had no answer for it yet
	 * (no routes in force, the listener or its route configuration
	 * neither given nor refused nor said absent): a call the file's
	 * routes do not take waits for them (call/park.c) instead of being
	 * routed by :path. Over the same config it carries over; a new
	 * config starts true when it has a listener, and the client that
	 * answered for that listener already clears it (mtd_xds_carry_routes). */
	bool routes_awaited;
	struct mtd_control *ctl;
	/* The span exporter while this config traces, else NULL (it outlives
	 * every runtime: stopped after the workers). */
	struct mtd_tracer *tracer;
	struct mtd_mbox_link reclaim; /* in the control thread's reclaim_rts */
};

/* A worker's hold on one runtime (lib/discovery: the reclaim rule). */
struct mtd_rt_hold {
	struct mtd_disc_hold h;
	struct mtd_runtime *rt; /* the worker's reference */
	/* Users let go during this turn, dropped at its end
	 * (mtd_worker_unhold_later), and the worker's list of such holds. */
	uint32_t later;
	struct mtd_rt_hold *later_next;
};

#endif
