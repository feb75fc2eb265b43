/* Inbound listeners (mesh mode; inbound.c): the server half of
 * the mesh. One more kind of listener and connection on the data plane:
 * an inbound peer's connection is a downstream one (downstream.c: its
 * session, hardening and deadlines) that first runs a TLS handshake
 * (transport.c), whose calls are authorized before they are routed, and
 * whose routing is its listener's app (a service of the snapshot, so the
 * call engine relays to the app as to any upstream). */
#ifndef MTD_INBOUND_H
#define MTD_INBOUND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "config/config.h"
#include "sidecar/control/runtime-t.h"
#include "sidecar/io/conn-t.h"

struct mtd_worker;
struct mtd_conn;
struct mtd_mesh_ident;
struct ssl_ctx_st;

/* ---- the listener set (control thread builds, the runtime carries) --------
 *
 * What each inbound listener serves is an entry of the runtime's inbound
 * set (runtime-t.h struct mtd_rt_inset), identified by its listen address
 * (the key): its server context, its policy generation, its sockets, and
 * through its config entry its authorization, app and limits. Built before
 * anything is published (a reload's prepare step), so that what can fail
 * (a certificate that does not load, an address that cannot be bound)
 * refuses the reload with nothing changed. */

/* The set for cfg's inbound entries. `cur`: the running set (NULL at
 * start). An entry whose key is in cur keeps its sockets, and its context
 * and policy generation while its TLS file names are the same (their
 * content is certwatch's); otherwise a new context and generation. A new
 * key gets a socket per worker (n_workers), bound now: an address in use
 * refuses. NULL with the reason in err (nothing kept, nothing bound). The
 * entries point into cfg: the set goes into a runtime over cfg only.
 * Control thread. */
struct mtd_rt_inset *mtd_inbound_set_build(const struct mtd_cfg *cfg, const struct mtd_rt_inset *cur,
                                           unsigned n_workers, char *err, size_t errlen);
/* A copy of cur whose entry i serves ctx (a reference of its own taken),
 * made again from the same files (certwatch.c); new_policy: the client CA's
 * content changed, so connections made before take no new call. NULL
 * when out of memory. Control thread. */
struct mtd_rt_inset *mtd_inbound_set_with_ctx(const struct mtd_rt_inset *cur, size_t i, struct ssl_ctx_st *ctx,
                                              bool new_policy);
/* The entry of set with key `key`, or NULL. */
const struct mtd_rt_inentry *mtd_inbound_set_find(const struct mtd_rt_inset *set, const char *key);
/* A reload's commit, once `now` is published: the listeners `was` had
 * and `now` has not close the sockets no worker took, and are remembered
 * while any of their sockets is open, so that a reload adding the
 * address back binds beside them rather than being refused as busy. */
void mtd_inbound_set_retire(const struct mtd_rt_inset *was, const struct mtd_rt_inset *now);
/* At exit: what mtd_inbound_set_retire remembered. Control thread. */
void mtd_inbound_retired_free(void);
/* What a published set changed from `was`, logged (a reload's commit). */
void mtd_inbound_set_log(const struct mtd_rt_inset *was, const struct mtd_rt_inset *now);

/* ---- per worker ------------------------------------------------------------ */

/* The worker's inbound state, and its listeners for w->rt's set
 * (mtd_inbound_worker_sync). 0 or -ENOMEM. Before the worker starts. */
int mtd_inbound_worker_init(struct mtd_worker *w);
/* w->rt changed (worker.c take_runtime): reconcile by key. A listener
 * whose socket set the snapshot no longer carries stops accepting; an
 * entry this worker has no listener for gets one (its socket taken from
 * the set); a connection, or a handshake, whose policy generation no
 * entry has any more (its listener removed, its TLS files or client CA
 * changed) takes no new call: GOAWAY, calls in flight finish (a
 * handshake is closed). Worker thread. */
void mtd_inbound_worker_sync(struct mtd_worker *w);
/* Housekeeping, each inbound connection of w once a second:
 * inbound[].max_connection_age. */
void mtd_inbound_conn_tick(struct mtd_conn *c, int64_t now_ns);
/* Stop accepting (drain): the listeners close, handshakes in progress end. */
void mtd_inbound_worker_drain(struct mtd_worker *w);
/* At worker stop: close all that is left (before the graveyard's flush). */
void mtd_inbound_worker_fini(struct mtd_worker *w);

/* ---- calls ------------------------------------------------------------------ */

/* What an inbound connection knows of its peer (conn->in), owned by it. */
struct mtd_in_peer {
	char key[64];             /* its listener's key (the listen address) */
	uint64_t policy;          /* the policy generation it was accepted under */
	unsigned slot;            /* its listener's figures slot (ops/mesh.h) */
	struct mtd_rt_insocks *socks; /* counts it (inbound[].max_connections); reference held */
	bool hs_counted;          /* counted in its source address's pending handshakes */
	unsigned hs_bucket;
	bool handshaking;          /* on its worker's handshake list, not yet a downstream */
	bool peeked;               /* its first byte was a TLS record */
	bool authenticated;        /* it presented a verified certificate (identity or not) */
	char *identity;            /* its certificate's typed identity (lib/identity), owned; NULL = none */
	struct mtd_mesh_ident *mx; /* its figures (ops/mesh.h) */
	char by[256];              /* the listener's own identity when it was accepted */
	char *xfcc;                /* our x-forwarded-client-cert value, or NULL (no certificate) */
	size_t xfcc_len;
};

/* A request field an inbound peer sends that is dropped as it arrives
 * (downstream.c on_header): its own x-forwarded-client-cert. */
bool mtd_inbound_header_dropped(const uint8_t *name, size_t len);

/* What a call may read of its connection (call/inbound_call.c), read
 * only: the inbound peer of c, or NULL (the app's connection). */
static inline const struct mtd_in_peer *mtd_inbound_peer(const struct mtd_conn *c)
{
	return c->in;
}
/* The entry of w's snapshot in's connection was accepted under (its
 * policy generation), *idx its index in the set; NULL when a snapshot
 * swap retired that policy (the connection was sent GOAWAY). */
const struct mtd_rt_inentry *mtd_inbound_entry(const struct mtd_worker *w, const struct mtd_in_peer *in,
                                               size_t *idx);
/* The entry of rt's set for in's listener (found by its key: rt may be
 * another snapshot than the one it was accepted under), *idx its index in
 * the set; NULL when rt has none (the listener was removed). */
const struct mtd_rt_inentry *mtd_inbound_listener_entry(const struct mtd_runtime *rt, const struct mtd_in_peer *in,
                                                        size_t *idx);

#endif
