/* Pools (pool.c): multiplexing, connection cap, waiting attempts,
 * retirement. Worker thread only. */
#ifndef MTD_POOL_H
#define MTD_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "sidecar/io/pool-t.h"

struct mtd_up_stream;

/* The pool of endpoint ep (of service snapshot svc) on worker w, created on
 * first use; NULL when out of memory. May be retired (see above): always
 * when w's current snapshot no longer holds ep, so that nothing of an
 * older snapshot reaches an endpoint that left. */
struct mtd_pool *mtd_pool_get(struct mtd_worker *w, struct mtd_rt_service *svc, struct mtd_endpoint *ep);
/* The :authority a stream to p's endpoint carries by the service's rule
 * (config-t.h): its `authority`; else with FROM_ENDPOINT, or when the
 * stream has no :authority of the app's to keep (keep_app false: a health
 * check), the endpoint's name (tls.server_name, else its address as
 * written); else NULL: the app's. Points into the config or the endpoint:
 * no per-call work. */
const char *mtd_pool_authority(const struct mtd_pool *p, bool keep_app);
/* The worker moved to a snapshot that holds p's endpoint in svc: p takes
 * svc's settings (a reference; the previous one dropped) and counts its
 * waiting attempts where svc's circuit breaker says from now on. When
 * svc's TLS policy is another (tls_gen), the connections made under the
 * old one take no new stream: idle or not up yet they close, busy they
 * send GOAWAY and drain; the calls waiting get new connections. */
void mtd_pool_set_service(struct mtd_pool *p, struct mtd_rt_service *svc);
/* A reload changed the SETTINGS maitred's upstream connections advertise
 * (mtd_up_settings_changed): each of p's connections sends them. */
void mtd_pool_settings_changed(struct mtd_pool *p);
/* The worker moved to a snapshot without p's endpoint. */
void mtd_pool_retire(struct mtd_pool *p);
void mtd_pool_free(struct mtd_pool *p);
/* Retired or being freed: p opens no connection any more, and what its
 * connections do no longer concerns waiting calls (it has none). */
static inline bool mtd_pool_closing(const struct mtd_pool *p)
{
	return p->retired || p->stopping;
}
/* True while the pool's endpoint failed its last connect and no connection
 * of it is usable: new calls should go elsewhere if they can. */
bool mtd_pool_backing_off(const struct mtd_pool *p, int64_t now_ns);
/* Record a failed / successful connect (backoff, and logging once per
 * outage instead of once per attempt). */
void mtd_pool_connect_failed(struct mtd_pool *p, const char *reason);
void mtd_pool_connect_succeeded(struct mtd_pool *p);
/* Queue s (an attempt PENDING, or a health check: stream-t.h) for a
 * stream on this pool; its owner's submit runs when a connection has room
 * (maybe before this returns). 0, -EAGAIN when too many attempts wait on
 * this pool (upstream.max_pending), or -EBUSY when the service has
 * circuit_breaker.max_pending waiting over every worker (nothing queued
 * either way: the caller fails the attempt). A check is always queued. */
int mtd_pool_enqueue(struct mtd_pool *p, struct mtd_up_stream *s);
/* Remove s if it waits in a pool (no-op otherwise); nothing is called. */
void mtd_pool_dequeue(struct mtd_up_stream *s);
/* A connection gained room (ready, stream closed) or went away. */
void mtd_pool_dispatch(struct mtd_pool *p);
/* Recompute p's bit in its endpoint's `pools->pooled` after a connection took
 * SETTINGS or closed. */
void mtd_pool_note_usable(struct mtd_pool *p);
/* The worker's 1 s housekeeping for one pool: idle close, keepalive,
 * write stall, max_connection_age (drained as above). */
void mtd_pool_housekeeping(struct mtd_pool *p, int64_t now_ns);

#endif
