/* The figures' types (metrics.h has the rules: one writer per counter,
 * relaxed loads and stores, entries published with release). */
#ifndef MTD_METRICS_T_H
#define MTD_METRICS_T_H

#include <stdatomic.h>
#include <stdint.h>

struct mtd_fault_lat;

/* Call latency histogram bounds, seconds (Prometheus base unit). */
#define MTD_MX_LAT_BUCKETS 14
extern const double mtd_mx_lat_bounds_s[MTD_MX_LAT_BUCKETS];
#define MTD_MX_CODES 17 /* gRPC status codes 0..16 */

/* The circuit breaker's limits (config: circuit_breaker), as counted. */
enum mtd_mx_circuit {
	MTD_MX_CIRCUIT_MAX_CALLS,              /* max_calls: in flight, per service */
	MTD_MX_CIRCUIT_MAX_PENDING,            /* max_pending: waiting for a connection */
	MTD_MX_CIRCUIT_MAX_CALLS_PER_ENDPOINT, /* every endpoint at max_calls_per_endpoint */
	MTD_MX_CIRCUIT_N
};
extern const char *const mtd_mx_circuit_names[MTD_MX_CIRCUIT_N];

/* Traffic policy's figures, per :path. */
enum mtd_mx_policy {
	MTD_MX_RATE_LIMITED,     /* refused by rate_limit */
	MTD_MX_FAULT_ABORTED,    /* fault_injection abort */
	MTD_MX_FAULT_DELAYED,    /* fault_injection delay */
	MTD_MX_MIRROR_COPIES,    /* mirror copies sent */
	MTD_MX_MIRROR_TOO_LARGE, /* requests not mirrored: over fault.replay_buffer (or not kept) */
	MTD_MX_MIRROR_FAILED,    /* copies that failed (no endpoint, no answer, an error status, its deadline) */
	MTD_MX_MIRROR_CANCELLED, /* copies still running when the primary ended */
	/* Copies not delivered, by reason (with the three above:
	 * maitred_mirror_dropped_total's reason label). */
	MTD_MX_MIRROR_RATE_LIMITED, /* over the mirror entry's rate_limit */
	MTD_MX_MIRROR_CIRCUIT_OPEN, /* over the mirror entry's circuit_breaker */
	MTD_MX_MIRROR_QUEUE_FULL,   /* too many calls waiting for a connection to the mirror */
	MTD_MX_MIRROR_REROUTED,     /* its endpoint left the mirror entry (never re-routed) */
	MTD_MX_MIRROR_NO_MEMORY,    /* out of memory making it */
	MTD_MX_MIRROR_SHUTDOWN,     /* still running when its worker stopped */
	/* Calls that waited for their service's first endpoint set
	 * (call/park.c), those whose wait ended at their deadline or at
	 * discovery.initial_wait, and those refused a wait (the worker's
	 * MTD_CALL_PARKED_MAX waiting already). */
	MTD_MX_FIRST_WAITED,
	MTD_MX_FIRST_WAIT_EXPIRED,
	MTD_MX_FIRST_WAIT_FULL,
	MTD_MX_POLICY_N
};

/* Figures of one :path on one worker. */
struct mtd_mx_method {
	/* Immutable once published. */
	char *path; /* "/pkg.Service/Method" (owned) */
	size_t path_len;
	size_t svc_len; /* path[1 .. 1 + svc_len) is the service */
	uint64_t hash;
	/* Single writer: the owning worker. */
	_Atomic uint64_t started;
	_Atomic uint64_t by_code[MTD_MX_CODES];
	_Atomic uint64_t lat_bucket[MTD_MX_LAT_BUCKETS + 1]; /* not cumulative; last = +Inf */
	_Atomic uint64_t lat_sum_ns;
	_Atomic uint64_t bytes_in, bytes_out; /* request / response DATA bytes */
	/* The fault policy's decisions (mtd_metrics_fault_decision). */
	_Atomic uint64_t retries, transparent_retries, budget_exhausted, pushback_stops, failsafe, fallback;
	/* Calls circuit breaking refused, by the limit reached. */
	_Atomic uint64_t circuit_rejected[MTD_MX_CIRCUIT_N];
	/* FORKING: hedges started (attempts after the first), hedges whose
	 * answer the client got; hedge_delay AUTO's current delay (gauge). */
	_Atomic uint64_t hedges, hedge_wins, hedge_delay_ms;
	/* FAILBACK: background re-sends started, calls given up. */
	_Atomic uint64_t failback_resent, failback_dropped;
	/* Traffic policy (mtd_metrics_policy). */
	_Atomic uint64_t policy[MTD_MX_POLICY_N];
	/* Not a figure: hedge_delay AUTO's latency histogram of this :path on
	 * this worker (owner only, allocated at the first AUTO call). */
	struct mtd_fault_lat *hedge_lat;
};

/* Distinct :paths a worker tracks; calls beyond go to one "other" entry. */
#define MTD_MX_SLOTS     1024
#define MTD_MX_MAX_PATHS 768

struct mtd_mx_worker {
	_Atomic(struct mtd_mx_method *) slots[MTD_MX_SLOTS]; /* open addressing */
	uint32_t n_paths;                                    /* owner only */
	_Atomic(struct mtd_mx_method *) other;               /* overflow, made once (release) */
	/* Calls that never reached a service (bad :path, unknown service). */
	_Atomic uint64_t unrouted_by_code[MTD_MX_CODES];
	_Atomic uint64_t access_logged; /* access-log lines written */
	_Atomic uint64_t parked;        /* calls waiting for a first endpoint set now (call/park.c) */
};

/* Per endpoint, shared by the workers (multi-writer atomics; connection
 * events are rare next to calls). Made by the endpoint's first
 * connection or health check (mtd_mx_ep_add). */
struct mtd_mx_endpoint {
	_Atomic int64_t conns_open;        /* upstream connections, connecting included */
	_Atomic uint64_t connect_failures; /* failed connects and TLS handshakes */
	_Atomic int32_t pools_failing;     /* worker pools in a connect outage */
	/* Active health checks (health.c, control thread the one writer):
	 * checks that ended, and those that failed (an error, no answer in
	 * time, or not SERVING). hc_checks == 0: no result yet (UNKNOWN). */
	_Atomic uint64_t hc_checks, hc_failures;
};

#endif
