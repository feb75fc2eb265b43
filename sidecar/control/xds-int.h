/* Internals of the xDS client (sidecar/control/xds*.c; xds.c has the
 * overview and says which file owns what): the client's state, the
 * tables of what it subscribes to, and the functions the files call
 * across each other. Nothing but sidecar/control/xds*.c includes this
 * (xds_routes.c neither: it binds routes, it holds no client).
 *
 * Control thread only, as the whole client. */
#ifndef MTD_XDS_INT_H
#define MTD_XDS_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/util.h>

#include "config/config.h"
#include "xds/xds.h"

struct event;
struct event_base;
struct evdns_base;
struct xds_lookup;
struct mtd_control;
struct mtd_gcli;
struct mtd_gcli_call;
struct mtd_xds_routes_box;
struct ssl_ctx_st;

/* The resource types, in the order of x->t[] and of a new stream's
 * requests. */
enum { T_CDS = 0, T_EDS = 1, T_LDS = 2, T_RDS = 3, N_TYPES };

/* Each type's type_url (MTD_XDS_TYPE_*), by T_*. */
extern const char *const xds_type_url[N_TYPES];

/* The version and nonce of one response, shared by the resources it
 * brought (one copy per response, not one per resource). */
struct xds_stamp {
	unsigned refs;
	char *version, *nonce;
};

/* A cluster subscribed to: its last good translation (have) and where it
 * came from. */
struct xds_cl {
	char *name;
	bool have;
	bool removed; /* the server stopped sending it (CDS is state of the world) */
	bool dirty;   /* changed by the response at hand: its services to be queued (xds_on_clusters) */
	uint64_t gen; /* a new one at each change of c (the override's tag): unique in the process */
	struct mtd_xds_cluster c;
	/* c's resource as it last came (NULL: none, or out of memory): a
	 * state of the world resends every cluster, and the same bytes are
	 * neither decoded nor compared again. */
	uint8_t *raw;
	size_t raw_len;
	struct xds_stamp *stamp; /* the response that brought it (a reference), NULL = none */
	char *nack;              /* the last refusal of a resource of this name, NULL = none */
};

/* An assignment of at least this many endpoints keeps its translation
 * from its arrival until it is applied (struct xds_cla's fresh). */
#define FRESH_MIN 64

/* An assignment subscribed to (an EDS name of a cluster we have). */
struct xds_cla {
	char *name;
	/* The last good one as it came, the one form kept (NULL = none yet):
	 * the same bytes again translate to the same records, so a state of
	 * the world that resends it is neither decoded nor applied again, and
	 * its services are given it translated again (cla_records). */
	uint8_t *raw;
	size_t raw_len;
	/* Its translation while the response that brought it is applied
	 * (xds_on_endpoints to xds_apply_dirty), else NULL; only a large one's
	 * (FRESH_MIN endpoints or more, see xds_on_endpoints). */
	struct mtd_xds_cla *fresh;
	uint32_t n, priority, n_skipped; /* of its translation, for /config_dump */
	uint64_t updates; /* responses that changed it (each given to its services) */
	bool dirty;       /* changed by the response at hand */
	bool resent;      /* the response at hand brought it again, unchanged */
	struct xds_stamp *stamp;
	char *nack;
};

/* The one Listener (xds.listener) or RouteConfiguration subscribed to. */
struct xds_one {
	char *name;              /* NULL = none subscribed */
	bool have;               /* a good one came */
	struct xds_stamp *stamp; /* the response that brought the last good one */
	char *nack;
	char *detail; /* what it says: "rds NAME", "inline routes", "N routes" */
};

/* Per resource type, the stream's side of it. */
struct xds_type {
	char *version;   /* last accepted version_info, NULL = none */
	char *nonce;     /* the last response's nonce, NULL = none */
	char *nack;      /* the last NACK's text, NULL = the last response was accepted */
	bool subscribed; /* the current names went out on this stream */
	int64_t nack_logged_ms;
	uint64_t nacks_unlogged;
	char *nack_held; /* the last NACK not logged (the one-a-second bound), logged when the second is over */
};

/* A service bound to a cluster (the per-service source's state). */
struct xds_bind {
	struct mtd_xds *x;
	size_t service;
	char *cluster;
	const char *svc_name; /* the config's, valid while bound */
	struct mtd_mx_disc *mx; /* its discovery figures, NULL = not yet (lives as long as the process) */
	bool applied;         /* what the client knows of its cluster was given to it */
	size_t cl_at, cla_at; /* where its cluster and assignment were last found (bind_cl, bind_cla) */
	size_t pending_at;    /* its slot in the pending rebuilds plus one; 0 = not queued */
};

/* The pending rebuilds: the bound services whose cluster changed since
 * their snapshot was built, rebuilt a slice at a time, a slice in a turn
 * of the event loop with nothing else ready (background priority,
 * control.h), so that a CDS response that changes many clusters is
 * answered at once and an EDS response read meanwhile is applied at once
 * for its services, not behind the whole rebuild.
 *
 * Contract: a binding is queued at most once, and is queued exactly while
 * its service's snapshot may lack its cluster's newest accepted
 * translation. Whatever gives a binding what the client holds now
 * (apply_bind: a slice, an EDS response for its assignment, a new
 * binding's first apply) takes it out of the queue (out of memory there:
 * it keeps its snapshot until its cluster or assignment changes again, as
 * it did before there was a queue); so a newer CDS
 * response only queues what is not queued yet (a service is rebuilt once,
 * from the newest cluster), and an EDS response rebuilds its queued
 * services then, with the newest cluster. A binding that stops leaves it
 * (a reload stops every binding; its new ones are each given everything
 * the client holds, as a fresh maitred's are). A rebuild is one service's
 * whole snapshot: it holds the old cluster or the new, never part of each.
 * The stream does not matter: what was accepted is rebuilt while the
 * server is away. Control thread. */
struct xds_pending {
	struct xds_bind **q; /* queued in [head, tail), NULL where one left early */
	size_t head, tail, n;
	size_t cap;       /* at least the number of bindings: queuing never allocates */
	struct event *ev; /* the next slice: a timer of background priority (control.h) */
	size_t slice_max; /* services at most per slice (test-only limit, see xds_rebuild_limits) */
	int64_t slice_ns; /* time at most per slice (one service at least) */
	int64_t gap_ms;   /* delay before each slice (test-only, see xds_rebuild_limits; else 0) */
	/* The bound on background priority's wait: a timer of normal
	 * priority that runs a slice when none ran for late_ms (a control
	 * loop with a normal event ready in every turn would otherwise hold
	 * the rebuild back for as long). Re-armed by every slice. */
	struct event *late;
	int64_t late_ms;
};

struct mtd_xds {
	struct mtd_control *ctl;
	struct event_base *base;
	/* The config's block, copied (a reload frees the config). */
	struct mtd_cfg_addr server;
	char *node_id, *zone;
	struct mtd_cfg_tls *tls_cfg; /* the files, for comparing */
	/* The bootstrap's certificate provider instances, the clusters'
	 * TLS names (a change is a new client: every cluster read again). */
	struct mtd_cfg_cert_providers providers;
	struct ssl_ctx_st *ssl_ctx;  /* NULL = h2c */
	struct mtd_gcli *conn;
	struct mtd_gcli_call *ads;
	bool node_sent; /* on this stream */
	struct event *retry, *sync_ev;
	struct event *nack_ev; /* logs the NACKs held back (nack_flush) */
	/* A server written with a name is looked up again before each
	 * reconnect (one at load only would pin a moved server's old
	 * address): a resolver made afresh for each lookup, so resolv.conf
	 * and the hosts file are read again. by_name false: an address. */
	bool by_name;
	struct evdns_base *dns;
	struct xds_lookup *lookup; /* pending (its callback's argument), or NULL */
	char *lookup_why; /* the last lookup's failure (said once), NULL = none */
	unsigned turn;    /* lookups so far: which of the name's addresses is next */
	unsigned failures; /* streams in a row without a response */
	char *down_why;    /* why the last stream ended, NULL = never */
	bool away;         /* a stream ended and no response came since: "answers again" is due */
	struct xds_type t[N_TYPES];
	struct xds_cl *cls; /* sorted by name */
	size_t n_cls;
	struct xds_cla *clas; /* sorted by name */
	size_t n_clas;
	struct xds_bind **binds; /* sorted by cluster name while binds_sorted (xds_sync_cb) */
	size_t n_binds;
	bool binds_sorted;
	struct xds_pending pending;
	/* LDS and RDS (xds.listener): the listener, the route configuration
	 * its connection manager names (name NULL: inline, or none yet), and
	 * the routes in force (the last good, inline or by RDS), kept to bind
	 * again to a reloaded config's services. */
	struct xds_one lds, rds;
	bool rds_resub; /* rds.name changed: its request goes out after the listener's answer */
	struct mtd_xds_routes_box *routes;
	struct mtd_xds_fault fault; /* the listener's fault filter (filter NULL: none) */
	/* The server answered for the listener: its routes came, or it said
	 * there are none (the listener or its route configuration absent
	 * from a response, or refused). Until then calls wait for them
	 * (runtime-t.h `routes_awaited`); from then on, never again for this
	 * listener, whatever the stream does. */
	bool routes_answered;
};

/* ---- xds.c: small helpers ----------------------------------------------------- */

/* Drop one reference on st (NULL is a no-op); the last frees it. */
void xds_stamp_put(struct xds_stamp *st);
/* *slot (a resource's) takes a reference on the stamp of response r,
 * made at its first use into *st (which holds the response's own
 * reference, dropped by xds_on_msg when the response is done); the old
 * *slot's is dropped. Out of memory leaves *slot as it was. */
void xds_stamp_take(struct xds_stamp **slot, struct xds_stamp **st, const struct mtd_xds_response *r);
/* Both NULL, or both the same text. */
bool xds_same_str(const char *a, const char *b);
/* *slot becomes a copy of s (NULL: none), the old freed; out of memory
 * keeps the old text (every such text is a display or a NACK's). */
void xds_set_str(char **slot, const char *s);
/* bsearch's comparison of a name (key) with a table entry that starts
 * with its name (struct xds_cl, xds_cla). */
int xds_cmp_name(const void *key, const void *elem);
/* The cluster or the assignment of that name in x's tables, or NULL. */
/* A cluster translation's generation, unique in the process (control
 * thread): an override's tag says which translation made it, whichever
 * client made it; a reload's override made over the client then in force
 * is never taken for the next client's (whose translations may differ:
 * other certificate provider files), as per-client numbers would be. */
uint64_t xds_cluster_gen_next(void);
struct xds_cl *xds_find_cl(struct mtd_xds *x, const char *name);
struct xds_cla *xds_find_cla(struct mtd_xds *x, const char *name);
/* Free what a table entry owns, and zero it. */
void xds_cl_clear(struct xds_cl *e);
void xds_cla_clear(struct xds_cla *e);

/* ---- xds_subscribe.c: subscriptions, requests, responses ------------------------ */

/* Make the table of type t (T_CDS or T_EDS) hold exactly the names the
 * bindings (CDS) or the clusters held (EDS) want, entries kept by name.
 * true when the set of names changed; out of memory leaves the table as
 * it was (logged), false. */
bool xds_retable(struct mtd_xds *x, int t);
/* Send type t's request on the stream (none: a no-op), with the names of
 * its table, its version and nonce, and nack (NULL: an ACK or a new
 * subscription) as error_detail. Failing is logged; the next response or
 * stream asks again. */
void xds_send_request(struct mtd_xds *x, int t, const char *nack);
/* The event (x->sync_ev) run once a turn after the bindings changed:
 * subscribes to what they name, gives the new ones what is held
 * (xds_apply_new). fd and what unused. */
void xds_sync_cb(evutil_socket_t fd, short what, void *arg);
/* Run xds_sync_cb at the next turn (a binding started or stopped). */
void xds_schedule_sync(struct mtd_xds *x);
/* Append "name: why" to a response's NACK text buf (*len bytes so far;
 * what does not fit is cut). */
void xds_nack_add(char *buf, size_t *len, const char *name, const char *why);
/* The name resource v of type url gives itself, into name (cap bytes):
 * MTD_XDS_NAME_EXACT (skip it unread if not asked for), MTD_XDS_NAME_LONG
 * (longer than any asked for: skip it), or, when its bytes do not decode
 * or its name cannot be read, MTD_XDS_NAME_GUESS (a name for the NACK
 * only) or -EINVAL (name "(unnamed)"). Unless exact or long, it may be
 * any of the resources asked for. */
int xds_name_of(const char *url, const struct mtd_xds_any *v, char *name, size_t cap);
/* gclient's message callback on the ADS call (arg: x): a response
 * decoded, given to its type's handler, then ACKed or NACKed. */
void xds_on_msg(struct mtd_gcli_call *call, const uint8_t *msg, size_t len, void *arg);
/* x->nack_ev's callback (arg: x): the last NACK of each type held back
 * by the one-a-second bound logged once its second is over, the timer
 * armed again for the types whose second is not. */
void xds_nack_flush(evutil_socket_t fd, short what, void *arg);

/* ---- the responses of each type ------------------------------------------------- */

/* A response of its type (r, borrowed; cleared by the caller): every
 * resource that came translated, accepted or refused. A refused one is
 * named with its reason in the NACK text (nack, *nack_len bytes so far:
 * empty at the end = ACK, xds_nack_add); an accepted one takes the
 * response's stamp (*st, xds_stamp_take). xds_clusters.c: CDS (the
 * services of a changed cluster queued, xds_queue_changed), EDS (the
 * services of a changed assignment given it now, xds_apply_dirty).
 * xds_listener.c: LDS, RDS (the routes installed in one snapshot, or a
 * reload of the running config for the services they create). */
void xds_on_clusters(struct mtd_xds *x, const struct mtd_xds_response *r, char *nack, size_t *nack_len,
                     struct xds_stamp **st);
void xds_on_endpoints(struct mtd_xds *x, const struct mtd_xds_response *r, char *nack, size_t *nack_len,
                      struct xds_stamp **st);
void xds_on_listener(struct mtd_xds *x, const struct mtd_xds_response *r, char *nack, size_t *nack_len,
                     struct xds_stamp **st);
void xds_on_routes(struct mtd_xds *x, const struct mtd_xds_response *r, char *nack, size_t *nack_len,
                   struct xds_stamp **st);
/* Free what x->lds or x->rds owns, and zero it (xds_listener.c). */
void xds_one_clear(struct xds_one *o);

/* ---- xds_services.c: the services and the pending rebuilds ---------------------- */

/* Read the test-only rebuild limits (the environment, once a process)
 * into p's slice and timer settings. */
void xds_rebuild_limits(struct xds_pending *p);
/* The timers' callback (x->pending.ev and .late, arg: x): one slice of
 * the pending rebuilds, published in one snapshot. */
void xds_rebuild_slice(evutil_socket_t fd, short what, void *arg);
/* Give the services bound since the last sync what the client holds, in
 * one snapshot. */
void xds_apply_new(struct mtd_xds *x);
/* Give the services of the assignments the EDS response at hand changed
 * (dirty) theirs, in one snapshot; every assignment's dirty, resent and
 * fresh cleared after. */
void xds_apply_dirty(struct mtd_xds *x);
/* Queue for a rebuild the services of the clusters the CDS response at
 * hand changed (dirty, cleared here). */
void xds_queue_changed(struct mtd_xds *x);

#endif
