/* Per-worker call figures for the admin endpoint, race-free by
 * construction, so that the admin reads them without ever blocking a
 * worker (and no worker waits for the admin):
 *
 *   - every counter below has ONE writer, the worker thread that owns it,
 *     which updates it with a relaxed load + store (no locked instruction);
 *   - the admin (control thread) reads them with relaxed loads and sums the
 *     workers; a figure may be a call behind, never torn;
 *   - a worker publishes a new (service, method) entry into its table with
 *     a release store after filling it; readers load slots with acquire, so
 *     an entry's immutable part (its :path) is complete when seen;
 *   - entries live until mtd_metrics_fini(), after the workers and the
 *     admin stopped.
 *
 * Per-endpoint figures shared by all workers are atomics too: mtd_lb_stats
 * (picks, in flight, EWMA) and struct mtd_mx_endpoint below (connections).
 *
 * Cost on the call path: one hash of :path when the call is routed, a
 * handful of relaxed stores when it ends; nothing else. */
#ifndef MTD_METRICS_H
#define MTD_METRICS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/lazy.h"
#include "sidecar/ops/metrics-t.h"

struct mtd_call;
struct mtd_cfg;
struct mtd_route_path;
struct mtd_worker;
struct mtd_fault_lat;

/* Control thread, before any worker starts: one table per worker, and the
 * access log of cfg (opened for appending: access_log.h). 0, -ENOMEM, or
 * -errno with a message in err when the access log cannot be opened. */
int mtd_metrics_init(unsigned n_workers, const struct mtd_cfg *cfg, char *err, size_t errlen);
/* After every worker stopped. */
void mtd_metrics_fini(void);

/* Worker thread, the one whose id is worker. A call was routed to a
 * service: find or publish its :path entry in the worker's table and count
 * a call started. Returns the entry, which the call keeps as call->mx
 * (mtd_call_routed); NULL without a table (a harness that never called
 * mtd_metrics_init) or memory. */
struct mtd_mx_method *mtd_metrics_call_routed(unsigned worker, const char *path, size_t len, size_t svc_len);
struct mtd_fault_decision;
/* Worker thread. The fault policy decided what a call does after a failed
 * attempt: count retries, budget refusals and substitute answers. */
void mtd_metrics_fault_decision(struct mtd_call *call, const struct mtd_fault_decision *d);
/* Worker thread. Circuit breaking refused the call (it fails
 * RESOURCE_EXHAUSTED); call->mx must be set (mtd_call_routed). */
void mtd_metrics_circuit_rejected(struct mtd_call *call, enum mtd_mx_circuit limit);
/* Worker thread. FAILBACK: a background re-send started, or a failed
 * call was given up (dropped). */
void mtd_metrics_failback(struct mtd_call *call, bool dropped);
/* Worker thread. Traffic policy: a call refused by rate_limit,
 * aborted or delayed by fault_injection; a mirror copy sent, not made, failed
 * or cancelled (counted under the primary's :path). */
void mtd_metrics_policy(struct mtd_call *call, enum mtd_mx_policy what);
/* Worker thread: how many of its calls wait for a first endpoint set
 * now (call/park.c, after each change). */
void mtd_metrics_parked(unsigned worker, uint32_t n);
/* Worker thread. FORKING: a hedge started / a hedge's answer won. */
void mtd_metrics_hedge_started(struct mtd_call *call);
void mtd_metrics_hedge_won(struct mtd_call *call);
/* Worker thread. hedge_delay AUTO: the delay for call's method now (ms,
 * mtd_fault_hedge_auto_ms of its histogram on this worker), and one
 * sample (us) counted into that histogram: a first attempt's latency, or
 * how long it went unanswered before it lost (attempt.c hedge_learn). Without a
 * table (or memory for the histogram) the delay is AUTO's initial one. */
int64_t mtd_metrics_hedge_delay_ms(struct mtd_call *call);
void mtd_metrics_hedge_sample(struct mtd_call *call, int64_t us);
/* Worker thread. The call is being freed: its final status, latency and
 * bytes; the access-log line if one is due. */
void mtd_metrics_call_end(struct mtd_call *call);
/* The gRPC status the call's client got (its trailers', else its
 * headers'; CANCELLED when it got none). */
int mtd_metrics_call_code(const struct mtd_call *call);

static inline void mtd_mx_add(_Atomic uint64_t *c, uint64_t n)
{
	/* Single writer: no read-modify-write needed (see the top). */
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n, memory_order_relaxed);
}

/* Adds n (negative: subtracts) to field f of endpoint ep's connection
 * figures, made by its first connection event (core/lazy.h: installed
 * by compare-and-swap; out of memory the event is not counted). Any
 * thread. */
#define mtd_mx_ep_add(ep, f, n)                                                           \
	do {                                                                              \
		struct mtd_mx_endpoint *mx_ = mtd_lazy_get(&(ep)->mx);                    \
		if (mx_ != NULL)                                                          \
			atomic_fetch_add_explicit(&mx_->f, (n), memory_order_relaxed);   \
	} while (0)

/* An endpoint's connection figures to read (struct mtd_endpoint.mx): a
 * block of zeroes while it has had no connection event. Any thread. */
static inline const struct mtd_mx_endpoint *mtd_mx_ep_view(struct mtd_mx_endpoint *_Atomic const *slot)
{
	static const struct mtd_mx_endpoint zero;
	const struct mtd_mx_endpoint *mx = atomic_load_explicit(slot, memory_order_acquire);

	return mx != NULL ? mx : &zero;
}

/* ---- discovery (control thread) ------------------------------------- */

/* Figures of one endpoint source of one service, kept by service name and
 * source so they go on across reloads and source restarts. Sources (dns.c,
 * etcd_watch.c) and the admin both run on the control thread: plain
 * fields, no atomics. Entries live until mtd_metrics_fini(), which runs
 * after every source stopped. */
struct mtd_mx_disc {
	char *service;          /* owned */
	const char *source;     /* "etcd", "dns" (static) */
	uint64_t updates;       /* etcd: listed or watched record changes that changed the set */
	int64_t last_sync_ms;   /* wall ms of the last good answer (list, watch, resolution); 0 = never */
	bool connected;         /* etcd: the watch's link is up (listed or watching) */
	size_t endpoints;       /* in the last set handed to the runtime */
	uint64_t resolutions;   /* dns: names looked up (one per name per round) */
	uint64_t resolve_fails; /* dns: of them, no address */
	uint64_t refused;       /* etcd: records refused for their identity (FROM_REGISTRY) */
	struct mtd_mx_disc *next;
};

/* Find or make the entry of (service, source); NULL when out of memory
 * (the source then counts nothing). Control thread. */
struct mtd_mx_disc *mtd_metrics_disc(const char *service, const char *source);

/* split.guard cut a group: counted by service, method ("*"
 * for the service's split) and group. Control thread. */
void mtd_metrics_guard_cut(const char *service, const char *method, const char *group);

/* The discovery entry of service name (any source: the newest made), or
 * NULL. Control thread. */
const struct mtd_mx_disc *mtd_metrics_disc_find(const char *service);
/* The entries sorted by service name, for a caller that finds the entry
 * of every service (one /clusters: a walk per service was O(services x
 * entries), seconds at 10,000). Made by mtd_metrics_disc_index (0, or
 * -ENOMEM: then empty, and lookups walk the list), valid until the next
 * entry is made; mtd_metrics_disc_index_free gives it back. Control
 * thread. */
struct mtd_mx_disc_index {
	struct mtd_mx_disc_ref *v;
	size_t n;
};
int mtd_metrics_disc_index(struct mtd_mx_disc_index *ix);
/* mtd_metrics_disc_find's answer, in O(log entries). */
const struct mtd_mx_disc *mtd_metrics_disc_lookup(const struct mtd_mx_disc_index *ix, const char *service);
void mtd_metrics_disc_index_free(struct mtd_mx_disc_index *ix);

/* The xDS client's figures (sidecar/control/xds*.c), for the process's
 * life. Written and read on the control thread: plain fields. */
struct mtd_mx_xds {
	uint64_t updates[4]; /* responses received: clusters (CDS), endpoints (EDS), listeners (LDS), routes (RDS) */
	uint64_t acks;       /* responses accepted */
	uint64_t nacks;      /* responses refused (in part or whole) */
	bool connected;      /* the ADS stream's connection is up */
	size_t rebuilds_pending; /* services whose cluster changed, waiting for their rebuild (xds_services.c) */
};
struct mtd_mx_xds *mtd_metrics_xds(void);
#endif
