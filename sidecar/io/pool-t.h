/* A worker's pool of upstream connections to one endpoint identity. */
#ifndef MTD_POOL_T_H
#define MTD_POOL_T_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include "sidecar/io/conn-t.h"

struct mtd_worker;
struct mtd_rt_service;
struct mtd_rt_load;
struct mtd_endpoint;
struct ssl_session_st;

/* A pool belongs to one worker and one endpoint identity (ep->pools->slot[w->id]);
 * it holds a reference on ep and on the service snapshot whose settings it
 * uses (the newest its worker has seen holding ep). Retired when its
 * worker serves a snapshot without ep: it takes no new attempt, its idle
 * connections close, busy ones drain, the attempts waiting in it move their
 * calls to the current snapshot; freed once it has no connection left.
 * A pool asked for an identity the worker's snapshot no longer holds is
 * retired from birth (mtd_pool_get).
 *
 * Each connection carries the TLS policy generation it was made under
 * (conn-t.h tls_gen); when the service's changes (mtd_pool_set_service),
 * the older connections take no new stream and drain, as they do past
 * upstream.max_connection_age.
 *
 * It opens no connection once retired or while being freed (`retired`,
 * `stopping`: set once, never cleared), nor while a failed connection's
 * calls are being moved (`failing`): three reasons, three fields, so
 * that ending one never ends another (one flag for all three let the
 * end of a connect failure clear what retirement had set). */
struct mtd_pool {
	struct mtd_worker *w;
	struct mtd_rt_service *svc; /* for TLS ctx and upstream settings (reference) */
	struct mtd_endpoint *ep;    /* reference */
	LIST_ENTRY(mtd_pool) link;  /* the worker's pools */
	bool retired;               /* its endpoint left (mtd_pool_retire) */
	bool stopping;              /* being freed (mtd_pool_free) */
	LIST_HEAD(, mtd_conn) conns;
	uint32_t n_conns;
	/* Waiting for a stream slot (io/stream-t.h): health checks first,
	 * then calls' attempts in order. n_pending counts the attempts,
	 * n_checks the checks. */
	TAILQ_HEAD(, mtd_up_stream) pending;
	uint32_t n_pending;
	uint32_t n_checks;
	/* Where the attempts in `pending` are counted for
	 * circuit_breaker.max_pending (a reference held; NULL while the
	 * service sets none): all of them, each once, so what the pool gives
	 * back is exactly what it added. It changes only with the pool's
	 * service (mtd_pool_set_service), which moves the count along. Issue
	 * 15, defect 2: a count given back under another config than the one
	 * it was kept under wrapped, and every later call was refused. */
	struct mtd_rt_load *load;
	struct ssl_session_st *tls_session; /* to resume with */
	/* Failed connections whose calls are being moved on (upstream.c
	 * up_fail; nested when moving them fails another): no replacement
	 * is opened for calls that are leaving. */
	uint32_t failing;
	/* Connections the pool closes itself before they were usable (an old
	 * TLS policy's, pool.c drain_conn): no failed connect (no backoff),
	 * and the calls waiting stay for the connection opened next. */
	uint32_t superseding;
	/* Connect failures in a row, and until when new calls avoid this
	 * endpoint (doubling from 250 ms to 10 s; reset by a connect). */
	uint32_t connect_failures;
	int64_t backoff_ns, retry_at_ns;
	/* Keepalive PING interval: the config's, doubled each time the peer
	 * says too_many_pings (gRPC A8). */
	int64_t keepalive_ms;
};

#endif
