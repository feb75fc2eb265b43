/* Inbound listeners (mesh mode, issue 17; inbound.c): the server half of
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

struct mtd_worker;
struct mtd_call;
struct mtd_conn;
struct mtd_mesh_ident;
struct ssl_ctx_st;

/* ---- the listeners' TLS contexts (control thread sets, workers take) ------
 *
 * One server context per listener, process-wide: a worker takes a
 * reference at each accept (under the slot's mutex: once per connection,
 * never per call); a new one (rotation, reload) serves the handshakes that
 * follow, and connections in flight keep theirs (their SSL holds it). */

/* Build every listener's context from cfg (at start). 0, or -1 with the
 * reason in err (nothing kept). */
int mtd_inbound_tls_init(const struct mtd_cfg *cfg, char *err, size_t errlen);
/* Replace listener i's context by one built from ib's files. 0, or -1 with
 * the reason in err (the current one stays). Control thread. */
int mtd_inbound_tls_reload(size_t i, const struct mtd_cfg_inbound *ib, char *err, size_t errlen);
/* The listeners at start (their count is what the process runs), and
 * listener i's address then (NULL past them). */
size_t mtd_inbound_tls_count(void);
const char *mtd_inbound_running_listen(size_t i);
/* A reload: a changed listen address is logged (needs a restart); an
 * entry whose TLS file names changed gets a context from the new files
 * (its content changing is certwatch's). Control thread. */
void mtd_inbound_reload(const struct mtd_cfg *cfg);
void mtd_inbound_tls_fini(void);

/* ---- per worker ------------------------------------------------------------ */

/* Serve the inbound listeners fds[0..n) (fds[i] for Config.inbound[i];
 * ownership taken, also on failure). 0 or -ENOMEM / -EIO. Before the
 * worker starts. */
int mtd_inbound_worker_init(struct mtd_worker *w, const int *fds, size_t n);
/* Stop accepting (drain): the listeners close, handshakes in progress end. */
void mtd_inbound_worker_drain(struct mtd_worker *w);
/* At worker stop: close all that is left (before the graveyard's flush). */
void mtd_inbound_worker_fini(struct mtd_worker *w);

/* ---- calls ------------------------------------------------------------------ */

/* What an inbound connection knows of its peer (conn->in), owned by it. */
struct mtd_in_peer {
	unsigned listener;
	bool handshaking;          /* on its worker's handshake list, not yet a downstream */
	bool peeked;               /* its first byte was a TLS record */
	bool authenticated;        /* it presented a verified certificate (identity or not) */
	char *identity;            /* its certificate's typed identity (lib/identity), owned; NULL = none */
	struct mtd_mesh_ident *mx; /* its figures (ops/mesh.h) */
	char by[256];              /* the listener's own identity when it was accepted */
	char *xfcc;                /* our x-forwarded-client-cert value, or NULL (no certificate) */
	size_t xfcc_len;
};

/* A request's headers arrived on an inbound connection (downstream.c):
 * the client's own x-forwarded-client-cert removed and maitred's added;
 * authorization (PERMISSION_DENIED naming the identity and the method),
 * max_concurrent_calls (RESOURCE_EXHAUSTED); then mtd_call_start routes it
 * to the listener's app. Each decision goes to the access log and the
 * figures. */
void mtd_inbound_call_start(struct mtd_call *call);
/* A request field an inbound peer sends that is dropped as it arrives
 * (downstream.c on_header): its own x-forwarded-client-cert. */
bool mtd_inbound_header_dropped(const uint8_t *name, size_t len);

/* The service of rt that serves inbound listener (1 + index) `ib`'s app,
 * or -1 when rt's config has no such entry (call.c route()). */
static inline int mtd_inbound_service(const struct mtd_runtime *rt, unsigned ib)
{
	return ib >= 1 && ib <= rt->cfg->n_inbound ? (int)rt->cfg->inbound[ib - 1].service : -1;
}

#endif
