/* Types of the balancer interface (lib/lb/). Pure data: no I/O anywhere in
 * lib/lb/. Prototypes live in lb.h.
 *
 * A load balancer's select(request, instances) becomes:
 *   picker = mtd_lb_picker_new(cfg, endpoints, n, prev)   once per endpoint-set
 *   idx    = mtd_lb_pick(picker, &ctx)                    per call, any worker
 *   mtd_lb_call_begin() / mtd_lb_call_end()               around the call (the
 *     endpoint's stats, then the strategy's begin / report hooks; through a
 *     routing layer, mtd_lb_layer_call_begin / _end)
 */
#ifndef MTD_LB_T_H
#define MTD_LB_T_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Latency histogram of an endpoint's answered calls (mtd_lb_stats.lat):
 * 2 buckets per octave of microseconds, bucket b below
 * mtd_lb_lat_upper_us(b); 1 us to 2^26 us (67 s), the last open. */
#define MTD_LB_LAT_BUCKETS 53

/* That histogram, out of line (mtd_lb_stats.lat): 424 bytes that only an
 * endpoint which answered a call needs. */
struct mtd_lb_lat_hist {
	_Atomic uint64_t b[MTD_LB_LAT_BUCKETS];
};

/* What an endpoint's ORCA load reports said (orca.c; mtd_lb_stats.orca), shared by every
 * worker: any worker records a report (each field one relaxed atomic, the
 * weight's three published in an order tick() relies on: see
 * mtd_lb_orca_record), the control thread's tick reads. Doubles are stored
 * as their bits. Written only through mtd_lb_orca_record. */
struct mtd_lb_orca_state {
	_Atomic uint64_t weight_bits; /* qps / (utilization + eps / qps x penalty), last report */
	_Atomic int64_t since_ms;     /* monotonic ms of the first report of this run (blackout) */
	_Atomic int64_t last_ms;      /* monotonic ms of the last report that gave a weight; 0 = none */
	_Atomic uint64_t cpu_bits, mem_bits, app_bits, qps_bits, eps_bits; /* last report read (display) */
	_Atomic uint64_t reports; /* reports read whole */
	_Atomic uint64_t invalid; /* reports that did not parse (ignored) */
	_Atomic uint64_t used_bits; /* the weight the last tick gave the endpoint (display); 0 = none */
	/* Its out-of-band stream (enum mtd_lb_orca_oob), written by the
	 * control thread alone (mtd_lb_orca_set_oob, which installs the state
	 * for any but OFF): while WAITING or OPEN the reports come from that
	 * stream and the trailers' are not recorded (gRFC A58). No state
	 * reads as OFF. Here rather than in struct mtd_lb_stats, which every
	 * endpoint holds: only one with ORCA pays for it. */
	_Atomic uint32_t oob;
};

/* Where an endpoint's reports come from (mtd_lb_orca_state.oob). */
enum mtd_lb_orca_oob {
	MTD_LB_ORCA_OOB_OFF = 0,           /* no stream: the trailers' reports */
	MTD_LB_ORCA_OOB_WAITING = 1,       /* a stream wanted, connecting or backing off */
	MTD_LB_ORCA_OOB_OPEN = 2,          /* a stream that delivered a report */
	MTD_LB_ORCA_OOB_UNIMPLEMENTED = 3, /* the endpoint has no OpenRcaService: the trailers' */
};

/* Live figures of one endpoint, shared by every worker thread: what
 * calls and reports write. Allocated by the endpoint's first write (its
 * first pick, or an ORCA report): a sidecar knows thousands of endpoints
 * and calls few (struct mtd_lb_stats.live). Written only through
 * mtd_lb_stats_*() and orca.c. */
struct mtd_lb_live {
	_Atomic int64_t active;          /* calls in flight, all workers */
	_Atomic uint64_t picks;          /* calls started */
	_Atomic uint64_t successes;      /* calls ended OK (any gRPC status from the peer) */
	_Atomic uint64_t failures;       /* connect/reset/timeout failures */
	_Atomic uint64_t latency_sum_us; /* successes only */
	_Atomic uint64_t latency_count;
	_Atomic uint64_t ewma_bits;      /* peak-EWMA latency (double, in us), as bits */
	_Atomic int64_t ewma_stamp_ns;   /* monotonic time of the last EWMA update */
	_Atomic uint64_t window_sum_us;  /* SHORTEST_RESPONSE sliding window */
	_Atomic uint64_t window_count;   /* (successes only; halved every */
	_Atomic int64_t window_stamp_ns; /*  MTD_LB_WINDOW_SLIDE_NS) */
	/* Successes by latency (to the first response message), for the
	 * admin's p99 per endpoint and split group (the live page): out of
	 * line again (424 B), installed by the first success recorded
	 * (core/lazy.h; NULL read as empty, mtd_lb_stats_lat_add). */
	struct mtd_lb_lat_hist *_Atomic lat;
	/* Its ORCA reports, out of line like lat and for the same reason:
	 * installed by the first report recorded (or the first non-zero
	 * weight a tick gives it), NULL read as none. */
	struct mtd_lb_orca_state *_Atomic orca;
};

/* One endpoint's figures as its owner holds them (the data plane's
 * endpoint object, which outlives every picker pointing at it, and
 * survives endpoint-set changes: an endpoint keeps its stats while it
 * stays in the set). 8 bytes until the endpoint is used (the ORCA
 * out-of-band state is in the report state, mtd_lb_orca_state.oob).
 * Freed by mtd_lb_stats_fini. */
struct mtd_lb_stats {
	/* NULL until the first write; whichever thread writes first
	 * installs it (core/lazy.h: compare-and-swap, the loser frees its
	 * copy); readers take NULL as every figure zero. */
	struct mtd_lb_live *_Atomic live;
};

/* One key/value of an endpoint's metadata (Endpoint.metadata, or the
 * registry record's). Strings outlive every picker and layer. */
struct mtd_lb_meta {
	const char *key;
	const char *value;
};

/* An endpoint's metadata: n entries (the routing layer's tags). */
struct mtd_lb_metas {
	const struct mtd_lb_meta *kv;
	size_t n;
};

/* What the routing layer reads of an endpoint beyond its weight: its zone
 * and metadata, as its set says. Owned with the endpoint array, and shared
 * by the endpoints that say the same (a runtime snapshot has one per zone
 * for its endpoints without metadata). */
struct mtd_lb_attrs {
	const char *zone;         /* NULL or "" = unknown */
	struct mtd_lb_metas meta; /* n = 0: none */
};

/* One endpoint as a strategy sees it. The array handed to a picker is
 * immutable for the picker's lifetime. */
struct mtd_lb_endpoint {
	const char *id;                 /* stable identity ("host:port"), hashed by rings */
	int32_t weight;                 /* configured weight; <= 0 means "no traffic while
	                               a positive-weight endpoint is eligible" */
	/* start_ms is when the endpoint came back (active checks SERVING
	 * again, or its ejection ended: a returning endpoint gets its traffic
	 * back through warmup, not all at once): its ramp applies even while
	 * every endpoint is within its own window (warmup.c). Beside weight,
	 * in what would be padding (one copy per endpoint per snapshot). */
	bool returned;
	int64_t start_ms;               /* wall-clock ms the instance started (registry
	                               record) or was first seen; 0 = unknown/old */
	struct mtd_lb_stats *stats;     /* never NULL */
	const struct mtd_lb_attrs *attrs; /* NULL = no zone, no metadata (routing layer) */
};

enum mtd_lb_warmup_curve {
	MTD_LB_WARMUP_LINEAR = 0,     /* Dubbo: weight*uptime/warmup in [1,w] */
	MTD_LB_WARMUP_SLOW_START = 1, /* Envoy slow start: aggression, min weight % */
};

struct mtd_lb_warmup {
	int64_t duration_ms; /* 0 = no warmup */
	enum mtd_lb_warmup_curve curve;
	double aggression;         /* SLOW_START, > 0, default 1.0 */
	double min_weight_percent; /* SLOW_START floor, default 10 */
};

/* LoadBalancing.hot_keys (CONSISTENT_HASH, MAGLEV): a key called more
 * than threshold_per_second times a second is spread over the first
 * `spread` distinct endpoints of its walk. spread 0 = off. */
struct mtd_lb_hot_keys {
	uint32_t threshold_per_second; /* default 100 */
	uint32_t spread;               /* 2..MTD_LB_MAX_HOT_SPREAD; default 3 when set */
};

/* LoadBalancing.orca (CLIENT_SIDE_WEIGHTED_ROUND_ROBIN, gRFC A58). */
struct mtd_lb_orca_config {
	int64_t blackout_ms;    /* a weight counts after reports for this long; default 10 s */
	int64_t expiration_ms;  /* dropped after this long without a report; default 180 s */
	int64_t update_ms;      /* weights recomputed this often (at tick()); default 1 s */
	double error_penalty;   /* error_utilization_penalty, >= 0; default 1.0 */
	bool out_of_band;       /* reports from an OpenRcaService stream per endpoint (control thread) */
	int64_t oob_period_ms;  /* the report_interval asked on it; default 10 s */
};

/* Validated options of one `lb` block (service level, or a method override),
 * with every default already applied by the config layer. */
struct mtd_lb_config {
	const struct mtd_lb_ops *ops;
	uint32_t choice_count;       /* LEAST_REQUEST, >= 2 */
	double active_request_bias;  /* LEAST_REQUEST */
	uint32_t ring_points;        /* CONSISTENT_HASH points per endpoint */
	uint32_t table_size;         /* MAGLEV, prime */
	double bounded_load_factor;  /* 0 = unbounded, else > 1 */
	int64_t decay_ms;            /* PEAK_EWMA / WEIGHTED_RESPONSE_TIME */
	struct mtd_lb_warmup warmup; /* from the service */
	struct mtd_lb_hot_keys hot_keys;
	struct mtd_lb_orca_config orca; /* CLIENT_SIDE_WEIGHTED_ROUND_ROBIN */
	unsigned n_workers; /* pick() callers pass worker < n_workers */
};

/* Locality of the routing layer (Service.locality.mode). */
enum mtd_lb_locality_mode {
	MTD_LB_LOCALITY_OFF = 0,
	MTD_LB_LOCALITY_PREFER_LOCAL = 1,
	MTD_LB_LOCALITY_STRICT = 2,
};

#define MTD_LB_DEFAULT_MIN_HEALTHY_PERCENT 70.0

/* subset.mode (subset.c: the trade between the two). */
enum mtd_lb_subset_mode {
	MTD_LB_SUBSET_RENDEZVOUS = 0, /* on node_id: no coordination; binomial spread */
	MTD_LB_SUBSET_RING = 1,       /* a window of the hash ring at index / count: even */
};

/* Which endpoints of a routing group this sidecar uses (subset.c). */
struct mtd_lb_subset_config {
	uint32_t size; /* endpoints kept; 0 = every endpoint */
	enum mtd_lb_subset_mode mode;
	/* RING only: this sidecar's index among the count sidecars that share
	 * the service, index < count (RENDEZVOUS ignores both). */
	uint32_t index, count;
};

/* split (split.c): a call the routing header does not pin goes
 * to the group of endpoints whose metadata_key value is `value`, in
 * proportion to `weight` among the groups that have an eligible endpoint;
 * the policy picks inside the group. */
#define MTD_LB_SPLIT_MAX_GROUPS 32

struct mtd_lb_split_weight {
	const char *value; /* the metadata value naming the group */
	uint32_t weight;   /* 0 = none of the unpinned calls */
};

/* split.guard: a group whose failure ratio or p99 latency over `window`
 * exceeds the heaviest group's by these factors, with at least min_calls
 * calls in the window, is cut (weight 0) until a reload changes the split
 * (its weights or its guard, compared by value). */
struct mtd_lb_split_guard {
	bool on;
	double max_error_ratio; /* > 1; 0 = the error rule off */
	double max_p99_ratio;   /* > 1; 0 = the latency rule off */
	uint32_t min_calls;     /* default 100 */
	int64_t window_ms;      /* default 30 s */
};

struct mtd_lb_split_config {
	const struct mtd_lb_split_weight *weights; /* 1..MTD_LB_SPLIT_MAX_GROUPS, distinct values */
	size_t n;
	struct mtd_lb_split_guard guard;
};

/* The routing layer's options (layer.c), validated by the config layer.
 * Strings are copied by mtd_lb_layer_new(). */
struct mtd_lb_layer_config {
	const char *zone;                   /* this sidecar's zone (Config.zone); NULL/"" = none */
	enum mtd_lb_locality_mode locality; /* OFF whatever it says when zone is none */
	double min_healthy_percent;         /* 0..100, default 70 */
	const char *metadata_key;           /* routing.metadata_key; NULL/"" = no tag routing */
	bool fallback_fail;                 /* routing.fallback FAIL: no untagged fallback */
	const char *node_id;                /* RENDEZVOUS subset identity (Config.node_id or the hostname) */
	struct mtd_lb_subset_config subset; /* size 0 = every endpoint */
	/* split over the groups of metadata_key (which must be set), or NULL.
	 * Copied. A layer built with a prev whose split is equal by value
	 * (the same values with the same weights, in any order, and the same
	 * guard) carries the guard's state over, cuts included; a changed
	 * split starts afresh. */
	const struct mtd_lb_split_config *split;
};

/* Everything one pick needs. Built on the caller's stack. */
struct mtd_lb_pick_ctx {
	const uint8_t *key; /* hash key bytes; NULL = absent */
	size_t key_len;
	/* Endpoints that must not be picked (already tried by this call, ejected),
	 * a bitmap over indices: bit i of excluded[i / 64]. NULL = none. */
	const uint64_t *excluded;
	int64_t now_ms;  /* wall clock, for warmup only (registry records carry wall start times) */
	int64_t now_ns;  /* monotonic: EWMA decay, the hot-key window, every other window */
	unsigned worker; /* index of the calling worker thread */
	uint64_t *rng;   /* the caller's PRNG state (mtd_lb_rand) */
};

/* What the data plane tells a strategy after a call to endpoint idx. */
struct mtd_lb_result {
	bool ok; /* false: connect failure, reset, timeout, a failure status */
	/* The endpoint did neither well nor badly (the client cancelled, a
	 * deadline ran out, maitred ended the call, the stream was refused):
	 * only `active` changes, and strategies' report hooks are not called. */
	bool neutral;
	int64_t latency_us; /* to the first response message (or the end) */
	/* The answer's endpoint-load-metrics-bin value as received (base64,
	 * padded or not), NULL when none or when the policy reads no reports
	 * (MTD_LB_CAP_ORCA); borrowed for the call_end only. */
	const uint8_t *orca;
	size_t orca_len;
	int64_t now_ns; /* monotonic, set with orca */
};

/* Capabilities: what config may ask of a strategy. Config validation rejects
 * an option the chosen strategy would silently ignore. */
enum {
	MTD_LB_CAP_WEIGHTS = 1u << 0,  /* honours endpoint weights */
	MTD_LB_CAP_HASH_KEY = 1u << 1, /* needs/uses ctx.key */
	MTD_LB_CAP_WARMUP = 1u << 2,   /* applies warmup to weights */
	MTD_LB_CAP_BOUNDED_LOAD = 1u << 3,
	MTD_LB_CAP_CHOICE_COUNT = 1u << 4,
	MTD_LB_CAP_DECAY = 1u << 5,
	MTD_LB_CAP_RING_POINTS = 1u << 6, /* CONSISTENT_HASH ring_points */
	MTD_LB_CAP_TABLE_SIZE = 1u << 7,  /* MAGLEV table_size */
	MTD_LB_CAP_HOT_KEYS = 1u << 8,    /* hot_keys */
	MTD_LB_CAP_ORCA = 1u << 9,        /* orca: reads load reports (mtd_lb_result.orca) */
	                                  /* CAP_CHOICE_COUNT also covers active_request_bias (LEAST_REQUEST). */
};

/* Defaults (mtd_lb_config_defaults) and hard limits (mtd_lb_config_check). */
#define MTD_LB_DEFAULT_CHOICE_COUNT  2u       /* Envoy least_request */
#define MTD_LB_DEFAULT_RING_POINTS   160u     /* Dubbo hash.nodes */
#define MTD_LB_DEFAULT_TABLE_SIZE    65537u   /* Envoy maglev */
#define MTD_LB_DEFAULT_DECAY_MS      10000    /* linkerd peak-EWMA decay */
#define MTD_LB_MAX_RING_POINTS       10000u   /* per endpoint at weight 100 */
#define MTD_LB_MAX_TABLE_SIZE        5000011u /* Envoy's cap on maglev tables */
#define MTD_LB_MAX_ENDPOINTS         100000u
#define MTD_LB_DEFAULT_HOT_THRESHOLD 100u /* calls per second */
#define MTD_LB_DEFAULT_HOT_SPREAD    3u
#define MTD_LB_MAX_HOT_SPREAD        16u
#define MTD_LB_DEFAULT_ORCA_BLACKOUT_MS   10000
#define MTD_LB_DEFAULT_ORCA_EXPIRATION_MS 180000
#define MTD_LB_DEFAULT_ORCA_UPDATE_MS     1000
#define MTD_LB_MIN_ORCA_UPDATE_MS         100 /* gRFC A58's floor */
#define MTD_LB_DEFAULT_ORCA_OOB_MS        10000
#define MTD_LB_MIN_ORCA_OOB_MS            100 /* a report a tenth of a second at most */
#define MTD_LB_ORCA_MAX_REPORT            4096 /* decoded bytes; a longer report is invalid */
#define MTD_LB_WINDOW_SLIDE_NS       30000000000LL /* Dubbo slidePeriod, 30 s */
/* A failed call is fed to the latency estimate as at least this slow. */
#define MTD_LB_FAILURE_PENALTY_US     1000000.0
#define MTD_LB_FAILURE_PENALTY_FACTOR 4.0
/* ... and at most this slow: each failure multiplies the estimate, so a
 * run of failures would otherwise grow it without bound (seen: 1e108 ms
 * on the live page); 60 s is slower than any call a deadline lets live. */
#define MTD_LB_FAILURE_PENALTY_MAX_US 60000000.0

/* One strategy: one .c file filling one const table, listed once in
 * lib/lb/registry.c (the C counterpart of Dubbo's SPI factory). */
struct mtd_lb_ops {
	const char *name; /* the config enum name, e.g. "ROUND_ROBIN" */
	unsigned caps;
	/* Build the state for one immutable endpoint set (n >= 1). prev is the
	 * previous state of the same strategy for the same service, or NULL, so
	 * a strategy can carry history across a membership change; it must not
	 * be modified. Returns 0 or -ENOMEM/-EINVAL. Control thread only. */
	int (*init)(const struct mtd_lb_config *cfg, const struct mtd_lb_endpoint *eps, size_t n, const void *prev,
	            void **state);
	/* Pick an endpoint index in [0, n), or -1 when every endpoint is
	 * excluded. Called concurrently from every worker: lock-free. */
	int (*pick)(void *state, const struct mtd_lb_pick_ctx *ctx);
	/* Optional: a call picked from this state was sent to idx (after its
	 * stats counted it). Any thread. */
	void (*begin)(void *state, size_t idx);
	/* Optional: outcome of a call picked from this state (after its stats
	 * counted it). Any thread. */
	void (*report)(void *state, size_t idx, const struct mtd_lb_result *res);
	/* Optional: periodic background work (e.g. Ribbon's weight recompute),
	 * control thread, about once per second. */
	void (*tick)(void *state, int64_t now_ms, int64_t now_ns);
	void (*destroy)(void *state);
};

/* An immutable picker: a strategy's state bound to one endpoint set. */
struct mtd_lb_picker {
	const struct mtd_lb_ops *ops;
	void *state;
	const struct mtd_lb_endpoint *eps; /* borrowed; outlives the picker */
	size_t n;
	struct mtd_lb_config cfg;
};

#endif
