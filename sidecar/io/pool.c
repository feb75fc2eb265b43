/* A pool per endpoint identity per worker (kept while the endpoint
 * stays, retired when it leaves): calls multiplex over its connections; a
 * new connection opens only when the open ones are full (peer's
 * SETTINGS_MAX_CONCURRENT_STREAMS, capped by config) and the cap on
 * connections allows; calls wait in a bounded FIFO meanwhile. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/log.h"
#include "core/clock.h"
#include "discovery/discovery.h"
#include "sidecar/control/runtime.h"
#include "sidecar/io/conn.h"
#include "sidecar/io/pool.h"
#include "sidecar/io/stream-t.h"
#include "sidecar/io/transport.h"
#include "sidecar/io/upstream.h"
#include "core/lazy.h"
#include "sidecar/ops/metrics.h"
#include "sidecar/turn.h"

/* Circuit counts (runtime-t.h) are freed by whoever drops the last
 * reference, as a call does. */
static void load_unref(struct mtd_rt_load *load)
{
	if (mtd_ref_put(&load->ref))
		free(load);
}

/* Where svc's circuit breaker counts waiting attempts: NULL when it sets
 * no max_pending. */
static struct mtd_rt_load *pending_load(const struct mtd_rt_service *svc)
{
	return svc->cfg->circuit.max_pending ? svc->load : NULL;
}

/* Count p's waiting attempts in load (NULL: nowhere) from now on: the one
 * they were counted in gets back exactly p->n_pending, the new one gets
 * them all. */
static void count_pending_in(struct mtd_pool *p, struct mtd_rt_load *load)
{
	if (load == p->load)
		return;
	if (load) {
		mtd_ref_get(&load->ref);
		atomic_fetch_add_explicit(&load->pending, p->n_pending, memory_order_relaxed);
	}
	if (p->load) {
		atomic_fetch_sub_explicit(&p->load->pending, p->n_pending, memory_order_relaxed);
		load_unref(p->load);
	}
	p->load = load;
}

struct mtd_pool *mtd_pool_get(struct mtd_worker *w, struct mtd_rt_service *svc, struct mtd_endpoint *ep)
{
	/* Keyed by endpoint identity: the pool (and its connections) stays
	 * while the endpoint stays in the worker's snapshots. */
	struct mtd_ep_pools *slots = mtd_lazy_peek(&ep->pools);
	struct mtd_pool *p = slots ? slots->slot[w->id] : NULL;
	if (p)
		return p;
	if (!slots && !(slots = mtd_lazy_get_size(&ep->pools, sizeof(*slots) + ep->n_slots * sizeof(slots->slot[0]))))
		return NULL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->w = w;
	mtd_ref_get(&svc->ref);
	p->svc = svc;
	mtd_ref_get(&ep->ref);
	p->ep = ep;
	p->keepalive_ms = svc->cfg->upstream.keepalive_interval_ms;
	count_pending_in(p, pending_load(svc));
	LIST_INIT(&p->conns);
	TAILQ_INIT(&p->pending);
	LIST_INSERT_HEAD(&w->pools, p, link);
	slots->slot[w->id] = p;
	w->pools_born = true;
	/* Asked for by a call or a check of an older snapshot, for an
	 * identity the worker's current one no longer holds: its pool was
	 * retired at the swap and freed once drained, and a new one must not
	 * connect to an endpoint that left. Born retired, it opens nothing;
	 * whoever asked moves on as from any retired pool (a call picks again
	 * in the current snapshot, a check answers "skip"), and housekeeping
	 * frees it. */
	if (w->rt && mtd_endpoint_gone(ep, w->rt->gen))
		p->retired = true;
	return p;
}

void mtd_pool_free(struct mtd_pool *p)
{
	struct mtd_conn *c;
	struct mtd_up_stream *s;
	p->stopping = true; /* no reconnects while tearing down */
	if (p->connect_failures > 0)
		mtd_mx_ep_add(p->ep, pools_failing, -1);
	while ((s = TAILQ_FIRST(&p->pending))) {
		mtd_pool_dequeue(s);
		s->ops->on_wait_end(s, MTD_UP_STOPPING, NULL);
	}
	while ((c = LIST_FIRST(&p->conns)))
		mtd_conn_close(c);
	if (p->tls_session)
		mtd_tls_session_free(p->tls_session);
	count_pending_in(p, NULL); /* none waits: gives back nothing, drops the reference */
	LIST_REMOVE(p, link);
	mtd_lazy_peek(&p->ep->pools)->slot[p->w->id] = NULL; /* made with p */
	mtd_endpoint_unref(p->ep);
	mtd_rt_service_unref(p->svc);
	free(p);
}

const char *mtd_pool_authority(const struct mtd_pool *p, bool keep_app)
{
	const struct mtd_cfg_service *svc = p->svc->cfg;
	if (svc->local->authority)
		return svc->local->authority;
	if (keep_app && !svc->local->authority_from_endpoint)
		return NULL;
	return svc->tls && svc->tls->server_name ? svc->tls->server_name : mtd_endpoint_text(p->ep);
}

/* c takes no new stream, whatever it carries (an old TLS policy, its
 * age): without a stream it closes now (with a GOAWAY once HTTP/2 is up);
 * with streams a GOAWAY tells the peer, its calls finish, and it closes
 * once the last one ended (housekeeping, or the session wanting no more
 * input). Closing one that was not usable yet is no failed connect: the
 * calls waiting stay for the connection the caller's dispatch opens. */
static void drain_conn(struct mtd_pool *p, struct mtd_conn *c)
{
	if (c->state == MTD_CONN_READY && c->n_streams > 0) {
		/* A client's GOAWAY names the last stream the server opened:
		 * none (no push). */
		if (nghttp2_submit_goaway(c->ng, NGHTTP2_FLAG_NONE, 0, NGHTTP2_NO_ERROR, NULL, 0) == 0)
			mtd_conn_want_flush(c);
		c->state = MTD_CONN_DRAINING;
		return;
	}
	p->superseding++; /* the flush may close it already */
	if (c->state == MTD_CONN_READY) {
		nghttp2_session_terminate_session(c->ng, NGHTTP2_NO_ERROR);
		mtd_conn_flush(c);
	}
	mtd_conn_close(c);
	p->superseding--;
}

/* p's service took another TLS policy (runtime-t.h tls_gen): what was
 * authenticated under the old one (TLS off, another CA, another
 * identity...) serves no new call, as a fresh maitred would have none of
 * it. Connections still connecting have not chosen yet: they start the
 * new policy's transport. The kept session was the old context's. */
static void supersede(struct mtd_pool *p)
{
	struct mtd_conn *c, *next;
	uint32_t n = 0;
	if (p->tls_session) {
		mtd_tls_session_free(p->tls_session);
		p->tls_session = NULL;
	}
	for (c = LIST_FIRST(&p->conns); c; c = next) {
		next = LIST_NEXT(c, link);
		if ((c->state == MTD_CONN_HANDSHAKE || c->state == MTD_CONN_READY) && c->tls_gen != p->svc->tls_gen) {
			drain_conn(p, c);
			n++;
		}
	}
	if (n == 0)
		return;
	MTD_DEBUG("worker %u: service %s's TLS policy changed: %u connections to %s drain", p->w->id,
	          p->svc->cfg->local->name, n, mtd_endpoint_text(p->ep));
	mtd_pool_note_usable(p);
	mtd_pool_dispatch(p);
}

void mtd_pool_set_service(struct mtd_pool *p, struct mtd_rt_service *svc)
{
	if (p->svc == svc)
		return;
	bool new_policy = p->svc->tls_gen != svc->tls_gen;
	/* A keepalive_interval the config changed applies to the pool's
	 * connections from now on; an unchanged one keeps what the endpoint
	 * taught it (doubled at each too_many_pings, upstream.c). */
	int64_t ka = svc->cfg->upstream.keepalive_interval_ms;
	if (ka != p->svc->cfg->upstream.keepalive_interval_ms)
		p->keepalive_ms = ka;
	mtd_ref_get(&svc->ref);
	mtd_rt_service_unref(p->svc);
	p->svc = svc;
	/* A reload may turn max_pending on or off, or the service may be a
	 * new one with counts of its own: the attempts waiting now are
	 * counted where the new settings say, and given back there. */
	count_pending_in(p, pending_load(svc));
	if (new_policy)
		supersede(p);
}

void mtd_pool_settings_changed(struct mtd_pool *p)
{
	struct mtd_conn *c;
	LIST_FOREACH(c, &p->conns, link)
		mtd_up_settings_changed(c);
}

void mtd_pool_retire(struct mtd_pool *p)
{
	struct mtd_conn *c, *next;
	struct mtd_up_stream *s;
	if (p->retired)
		return;
	p->retired = true;
	MTD_DEBUG("worker %u: endpoint %s left service %s: draining its pool (%u connections, %u calls waiting)",
	          p->w->id, mtd_endpoint_text(p->ep), p->svc->cfg->local->name, p->n_conns, p->n_pending);
	/* Issue 7: calls waiting here move to an endpoint of the current
	 * snapshot (their owner's doing); calls in flight finish where they
	 * are. */
	while ((s = TAILQ_FIRST(&p->pending))) {
		mtd_pool_dequeue(s);
		s->ops->on_wait_end(s, MTD_UP_RETIRED, NULL);
	}
	/* No new connection from here on: `retired`, never cleared. */
	for (c = LIST_FIRST(&p->conns); c; c = next) {
		next = LIST_NEXT(c, link);
		if (c->n_streams == 0) {
			if (c->state == MTD_CONN_READY || c->state == MTD_CONN_DRAINING) {
				nghttp2_session_terminate_session(c->ng, NGHTTP2_NO_ERROR);
				mtd_conn_flush(c);
			}
			mtd_conn_close(c);
		} else if (c->state == MTD_CONN_READY) {
			c->state = MTD_CONN_DRAINING; /* no new stream; closed when idle */
		}
	}
}

#define BACKOFF_FIRST_NS (250 * 1000000LL)
#define BACKOFF_MAX_NS   (10 * 1000000000LL)

bool mtd_pool_backing_off(const struct mtd_pool *p, int64_t now_ns)
{
	if (p->retry_at_ns <= now_ns)
		return false;
	struct mtd_conn *c;
	LIST_FOREACH(c, &p->conns, link)
		if (c->state == MTD_CONN_READY)
			return false;
	return true;
}

void mtd_pool_connect_failed(struct mtd_pool *p, const char *reason)
{
	mtd_mx_ep_add(p->ep, connect_failures, 1);
	/* One warning per outage; the attempts during it are debug lines. */
	if (p->connect_failures++ == 0) {
		mtd_mx_ep_add(p->ep, pools_failing, 1);
		MTD_WARN("%s", reason);
	} else
		MTD_DEBUG("%s (%u failures in a row)", reason, p->connect_failures);
	p->backoff_ns = p->backoff_ns ? p->backoff_ns * 2 : BACKOFF_FIRST_NS;
	if (p->backoff_ns > BACKOFF_MAX_NS)
		p->backoff_ns = BACKOFF_MAX_NS;
	p->retry_at_ns = mtd_now_ns() + p->backoff_ns;
}

void mtd_pool_connect_succeeded(struct mtd_pool *p)
{
	if (p->connect_failures > 1)
		MTD_INFO("upstream %s: connected again after %u failed attempts", mtd_endpoint_text(p->ep),
		         p->connect_failures);
	if (p->connect_failures > 0)
		mtd_mx_ep_add(p->ep, pools_failing, -1);
	p->connect_failures = 0;
	p->backoff_ns = p->retry_at_ns = 0;
	mtd_pool_note_usable(p);
}

/* Made under another TLS policy than its service's now: never (supersede
 * drained it; checked here too, so that no path hands it a stream). */
static bool usable(const struct mtd_conn *c)
{
	return c->state == MTD_CONN_READY && c->settings_seen && c->tls_gen == c->pool->svc->tls_gen;
}

void mtd_pool_note_usable(struct mtd_pool *p)
{
	unsigned id = p->w->id;
	if (id >= 64)
		return;
	bool any = false;
	struct mtd_conn *c;
	LIST_FOREACH(c, &p->conns, link)
		any |= usable(c);
	_Atomic uint64_t *pooled = &mtd_lazy_peek(&p->ep->pools)->pooled; /* made with p */
	if (any)
		atomic_fetch_or_explicit(pooled, 1ull << id, memory_order_relaxed);
	else
		atomic_fetch_and_explicit(pooled, ~(1ull << id), memory_order_relaxed);
}

/* Waiting attempts are counted per pool (upstream.max_pending) and per
 * service over every worker (circuit_breaker.max_pending): in p->load,
 * whatever the config says by the time they leave (pool-t.h). Checks are
 * counted apart (stream-t.h). */
static void pending_add(struct mtd_pool *p, const struct mtd_up_stream *s, int d)
{
	if (s->check) {
		p->n_checks += (uint32_t)d;
		return;
	}
	p->n_pending += (uint32_t)d;
	if (p->load)
		atomic_fetch_add_explicit(&p->load->pending, (uint32_t)d, memory_order_relaxed);
}

int mtd_pool_enqueue(struct mtd_pool *p, struct mtd_up_stream *s)
{
	if (s->check) {
		TAILQ_INSERT_HEAD(&p->pending, s, pending_link); /* ahead of calls */
	} else {
		if (p->n_pending >= p->svc->cfg->upstream.max_pending)
			return -EAGAIN;
		uint32_t max = p->svc->cfg->circuit.max_pending;
		if (max && atomic_load_explicit(&p->load->pending, memory_order_relaxed) >= max)
			return -EBUSY; /* p->load is the service's when max is set */
		TAILQ_INSERT_TAIL(&p->pending, s, pending_link);
	}
	s->pool = p;
	pending_add(p, s, 1);
	mtd_pool_dispatch(p);
	return 0;
}

void mtd_pool_dequeue(struct mtd_up_stream *s)
{
	struct mtd_pool *p = s->pool;
	if (!p)
		return;
	TAILQ_REMOVE(&p->pending, s, pending_link);
	pending_add(p, s, -1);
	/* No longer held by a pool: whoever dequeued decides what is next. */
	s->pool = NULL;
}

static struct mtd_conn *conn_with_room(struct mtd_pool *p)
{
	struct mtd_conn *c;
	LIST_FOREACH(c, &p->conns, link)
		if (usable(c) && c->n_streams < c->max_streams)
			return c;
	return NULL;
}

void mtd_pool_dispatch(struct mtd_pool *p)
{
	struct mtd_up_stream *s;
	struct mtd_conn *c;
	/* Checks first (they are at the head), then calls in order. */
	while ((s = TAILQ_FIRST(&p->pending)) && (c = conn_with_room(p))) {
		mtd_pool_dequeue(s);
		if (s->ops->submit(s, c) < 0) {
			if (c->state == MTD_CONN_READY) {
				/* Out of memory: the wait ends (its owner says how). */
				char reason[96];
				snprintf(reason, sizeof(reason), "upstream %s: cannot open a stream", c->peer);
				s->ops->on_wait_end(s, MTD_UP_NO_STREAM, reason);
			} else {
				/* The connection cannot take streams any more (it was
				 * marked draining): back in front, look again. */
				TAILQ_INSERT_HEAD(&p->pending, s, pending_link);
				s->pool = p;
				pending_add(p, s, 1);
			}
			continue;
		}
		s->ops->on_stream(s);
	}
	/* A check alone opens a connection only when none is usable: it
	 * probes the connections calls use (stream-t.h). */
	bool checks_alone = false;
	if (p->n_checks) {
		checks_alone = true;
		LIST_FOREACH(c, &p->conns, link)
			if (usable(c))
				checks_alone = false;
	}
	if ((p->n_pending == 0 && !checks_alone) || p->failing || mtd_pool_closing(p))
		return;
	/* Calls still wait and every ready connection is full. While a
	 * connection is on its way, wait for it: its SETTINGS tell how many
	 * streams it takes (usually far more than one burst needs), so a burst
	 * does not open a connection per 100 calls (HTTP/2 is multiplexed; gRPC
	 * clients hold one connection per endpoint too). Otherwise open one
	 * more, while the cap allows. */
	uint32_t n_usable = 0;
	LIST_FOREACH(c, &p->conns, link) {
		if (c->state == MTD_CONN_CONNECTING || c->state == MTD_CONN_HANDSHAKE ||
		    (c->state == MTD_CONN_READY && !c->settings_seen))
			return;
		if (c->state == MTD_CONN_READY)
			n_usable++;
	}
	if (n_usable < p->svc->cfg->upstream.max_connections)
		mtd_up_connect(p); /* on an immediate failure the calls moved on */
}

void mtd_pool_housekeeping(struct mtd_pool *p, int64_t now)
{
	if (p->retired && p->n_conns == 0 && p->n_pending == 0) {
		mtd_pool_free(p);
		return;
	}
	const struct mtd_cfg_upstream *u = &p->svc->cfg->upstream;
	struct mtd_conn *c, *next;
	bool aged = false;
	for (c = LIST_FIRST(&p->conns); c; c = next) {
		next = LIST_NEXT(c, link);
		if (c->state != MTD_CONN_READY && c->state != MTD_CONN_DRAINING)
			continue;
		if (c->n_streams == 0 &&
		    (c->state == MTD_CONN_DRAINING || now - c->last_active_ns > u->idle_timeout_ms * 1000000)) {
			MTD_DEBUG("upstream %s: idle, closing", c->peer);
			nghttp2_session_terminate_session(c->ng, NGHTTP2_NO_ERROR);
			mtd_conn_flush(c);
			mtd_conn_close(c);
			continue;
		}
		if (c->ping_sent_ns && now - c->ping_sent_ns > u->keepalive_timeout_ms * 1000000) {
			MTD_WARN("upstream %s: no PING ack in %lld ms, closing", c->peer,
			         (long long)u->keepalive_timeout_ms);
			mtd_conn_close(c);
			continue;
		}
		if (mtd_up_check_write_stall(c, now))
			continue;
		if (u->max_connection_age_ms && c->state == MTD_CONN_READY && c->settings_seen &&
		    now - c->opened_ns > u->max_connection_age_ms * 1000000) {
			MTD_DEBUG("upstream %s: older than max_connection_age (%lld ms), draining", c->peer,
			          (long long)u->max_connection_age_ms);
			drain_conn(p, c);
			aged = true;
			continue;
		}
		/* Keepalive only while calls are open, as gRPC clients do by
		 * default (keepalive_permit_without_calls off): grpc-go servers
		 * count PINGs on a connection without streams as strikes and
		 * soon answer GOAWAY ENHANCE_YOUR_CALM. An idle connection needs
		 * none: idle_timeout ends it, and once a call is open on a dead
		 * one the PINGs find it. */
		if (!c->ping_sent_ns && c->n_streams > 0 && now - c->last_read_ns > p->keepalive_ms * 1000000) {
			if (nghttp2_submit_ping(c->ng, NGHTTP2_FLAG_NONE, NULL) == 0) {
				c->ping_sent_ns = now;
				mtd_conn_want_flush(c);
			}
		}
	}
	if (aged) {
		/* Calls waiting for a slot get a new connection. */
		mtd_pool_note_usable(p);
		mtd_pool_dispatch(p);
	}
}
