/* The balancer interface. See lb-t.h for the types and the call sequence.
 *
 * Threads: mtd_lb_picker_new/free, mtd_lb_tick and the config helpers run on
 * the control thread; mtd_lb_pick, mtd_lb_call_begin/end and the stats
 * functions run on any worker, concurrently, without locks.
 */
#ifndef MTD_LB_H
#define MTD_LB_H

#include <stdatomic.h>
#include <sys/types.h> /* ssize_t */

#include "lb/lb-t.h"

/* Strategy registry (the C counterpart of a Java SPI factory): the ops
 * of the strategy whose name is exactly `name` (a LoadBalancing.Policy enum
 * name such as "ROUND_ROBIN"), or NULL for NULL or an unknown name. */
const struct mtd_lb_ops *mtd_lb_find(const char *name);

/* Every registered strategy, in config enum order; *n receives the count.
 * The array is static. */
const struct mtd_lb_ops *const *mtd_lb_all(size_t *n);

/* Fill *cfg with every default for strategy ops (which may be NULL):
 * choice_count 2, bias 1.0, ring_points 160, table_size 65537, unbounded,
 * decay 10 s, no warmup (linear, aggression 1, floor 10 %), hot keys off
 * (threshold 100/s), 1 worker. */
void mtd_lb_config_defaults(struct mtd_lb_config *cfg, const struct mtd_lb_ops *ops);

/* Validate the options the chosen strategy uses (an option a strategy does
 * not use is not looked at here: rejecting it is config's job, by caps).
 * Returns 0, or -EINVAL with *field (if field != NULL) set to the proto
 * field name at fault ("table_size", "warmup.aggression", ...). */
int mtd_lb_config_check(const struct mtd_lb_config *cfg, const char **field);

/* Build a picker over eps[0..n) (eps must outlive the picker; n == 0 gives a
 * picker whose every pick returns -1). prev: the picker this one replaces
 * (same service), or NULL; it is only read, and may be freed right after.
 * Returns NULL on allocation failure or invalid options (see
 * mtd_lb_config_check), and also when n > MTD_LB_MAX_ENDPOINTS, when MAGLEV
 * has fewer table_size slots than endpoints taking traffic (weight > 0, or
 * all when none has), or when CONSISTENT_HASH cannot hash an id
 * (mtd_lb_ketama_points). lib/config turns each of these into a config
 * error, so a loaded config only fails here for lack of memory (or of MD5
 * in OpenSSL). Control thread. */
struct mtd_lb_picker *mtd_lb_picker_new(const struct mtd_lb_config *cfg, const struct mtd_lb_endpoint *eps, size_t n,
                                        const struct mtd_lb_picker *prev);
/* Free p and its strategy state; NULL is a no-op. No worker may still be
 * inside mtd_lb_pick(p) (the snapshot's refcount guarantees it). */
void mtd_lb_picker_free(struct mtd_lb_picker *p);

/* Index of the chosen endpoint, or -1 if every endpoint is excluded (or the
 * set is empty). Never returns an index set in ctx->excluded. Lock-free,
 * allocation-free; any worker thread. ctx->worker must be < cfg.n_workers
 * (larger values are reduced modulo n_workers). ctx->rng may be NULL (a
 * thread-local generator is used). Hashing strategies with ctx->key == NULL
 * pick at random (the data plane applies HashKey.on_missing = FAIL itself,
 * before picking). */
int mtd_lb_pick(struct mtd_lb_picker *p, const struct mtd_lb_pick_ctx *ctx);

/* Call accounting, any thread. begin: when the call is sent to eps[idx];
 * end: when it completes, with its outcome (now_ns: monotonic clock). Both
 * update eps[idx].stats and then tell the strategy (its begin/report
 * hooks: LEAST_ACTIVE and SHORTEST_RESPONSE keep their minimum tree current
 * this way; a change they did not see is picked up at the next tick() or
 * when a pick lands on the endpoint). An idx >= p->n is ignored. Pair every begin with one end on
 * the same picker, or use the stats functions below when the picker may
 * have been replaced in between (stats outlive pickers; report hooks are
 * only an optimisation). */
void mtd_lb_call_begin(struct mtd_lb_picker *p, size_t idx);
void mtd_lb_call_end(struct mtd_lb_picker *p, size_t idx, const struct mtd_lb_result *res, int64_t now_ns);

/* The stats half of call_begin/end, for a call whose picker is gone.
 * decay_ms: the service's lb decay (<= 0: the default). */
void mtd_lb_stats_begin(struct mtd_lb_stats *st);
void mtd_lb_stats_end(struct mtd_lb_stats *st, const struct mtd_lb_result *res, int64_t now_ns, int64_t decay_ms);

/* st's figures to read, any thread: its live block, or a block of
 * zeroes while st was never written (no pick, no report yet). Acquire:
 * the block's zeroes are seen before its pointer (core/lazy.h). */
extern const struct mtd_lb_live mtd_lb__live_zero;
static inline const struct mtd_lb_live *mtd_lb_stats_view(const struct mtd_lb_stats *st)
{
	const struct mtd_lb_live *l = atomic_load_explicit(&st->live, memory_order_acquire);

	return l != NULL ? l : &mtd_lb__live_zero;
}

/* Adds st's latency histogram into hist (MTD_LB_LAT_BUCKETS counts):
 * nothing while st has none (no success recorded yet). Any thread. */
void mtd_lb_stats_lat_add(const struct mtd_lb_stats *st, uint64_t *hist);

/* Frees what st's recording allocated (its histogram, its ORCA state) and leaves st as
 * zeroed. Only once no thread can record into st or read it. */
void mtd_lb_stats_fini(struct mtd_lb_stats *st);

/* The peak-EWMA latency estimate of st in us, decayed to now_ns (0 when
 * no call has completed yet). */
double mtd_lb_stats_ewma_us(const struct mtd_lb_stats *st, int64_t now_ns, int64_t decay_ms);

/* The latency histogram's bucket for us microseconds, and bucket b's upper
 * bound in us (MTD_LB_LAT_BUCKETS, lb-t.h). The q quantile (0 < q < 1)
 * of a histogram of MTD_LB_LAT_BUCKETS counts, in ms: the upper bound of
 * the bucket it falls in (within a factor sqrt(2) above); 0 when empty. */
size_t mtd_lb_lat_bucket(int64_t us);
double mtd_lb_lat_upper_us(size_t b);
double mtd_lb_lat_quantile_ms(const uint64_t *hist, double q);

/* Background work for time-driven strategies; control thread, ~1 Hz. */
void mtd_lb_tick(struct mtd_lb_picker *p, int64_t now_ms, int64_t now_ns);

/* ---- subsetting (subset.c) and the routing layer (layer.c) ------------ */

#define MTD_LB_SUBSET_SEED 0x7375627365743031ULL /* "subset01" */

/* This sidecar's deterministic subset of eps[0..n) under sc (subset.c):
 * RENDEZVOUS, the sc->size endpoints of highest rendezvous score for
 * node_id; RING, the sc->size endpoints of the hash-ordered ring from
 * position floor(sc->index * n / sc->count + 1/2) on. The indices go into
 * out in increasing order (room for min(size, n) entries, or n when size
 * is 0 or >= n: then every index); *n_out receives the count. Returns 0,
 * or -EINVAL (NULL arguments; n > MTD_LB_MAX_ENDPOINTS; node_id NULL
 * under RENDEZVOUS; under RING, count 0 or index >= count) or -ENOMEM.
 * Pure; any thread. */
int mtd_lb_subset(const struct mtd_lb_subset_config *sc, const char *node_id, const struct mtd_lb_endpoint *eps,
                  size_t n, uint32_t *out, size_t *n_out);

/* True when sc is one mtd_lb_subset accepts (a known mode; under RING,
 * index < count). */
bool mtd_lb_subset_config_ok(const struct mtd_lb_subset_config *sc);

/* The routing layer over eps[0..n) (eps must outlive it): subset, tag
 * groups and zone parts (layer.c), each part with its own picker of
 * policy cfg, carrying state from prev's matching part (prev is only
 * read). NULL on allocation failure or invalid options (those
 * mtd_lb_picker_new refuses; min_healthy_percent outside 0..100; a
 * subset mtd_lb_subset_config_ok refuses).
 * Control thread. */
struct mtd_lb_layer;
struct mtd_lb_layer *mtd_lb_layer_new(const struct mtd_lb_layer_config *lc, const struct mtd_lb_config *cfg,
                                      const struct mtd_lb_endpoint *eps, size_t n, const struct mtd_lb_layer *prev);
/* NULL is a no-op. No worker may still use l. */
void mtd_lb_layer_free(struct mtd_lb_layer *l);

/* Index into eps of the endpoint for a call whose routing value is
 * value[0..value_len) (NULL: the call has none), or -1 when no endpoint
 * may take it (every candidate excluded, nothing in the group and its
 * fallback, or fallback FAIL). With a split, a call without a value goes
 * to a split group instead of the untagged one (-1 when no group with a
 * weight has an eligible endpoint). ctx->excluded is over eps indices. O(1) on
 * top of the policy's pick when ctx->excluded is NULL, O(part) otherwise.
 * Lock-free; any worker. */
int mtd_lb_layer_pick(struct mtd_lb_layer *l, const char *value, size_t value_len, const struct mtd_lb_pick_ctx *ctx);

/* True when eps[idx] can be picked at all (in this sidecar's subset, and
 * not in another zone under STRICT). */
bool mtd_lb_layer_reachable(const struct mtd_lb_layer *l, size_t idx);

/* mtd_lb_call_begin/end and mtd_lb_tick for the part picker that holds
 * eps[idx] (an unreachable idx is ignored). Same threads as those. */
void mtd_lb_layer_call_begin(struct mtd_lb_layer *l, size_t idx);
void mtd_lb_layer_call_end(struct mtd_lb_layer *l, size_t idx, const struct mtd_lb_result *res, int64_t now_ns);
void mtd_lb_layer_tick(struct mtd_lb_layer *l, int64_t now_ms, int64_t now_ns);

/* ---- split (split.c, through the layer) -------------------------------- */

/* The routing layer with lc->split: a call whose routing value is NULL
 * (not pinned) goes to a split group (mtd_lb_layer_pick); these read and
 * drive the split. */

/* One group of a split, for the admin (figures may be a call behind). */
struct mtd_lb_split_group {
	const char *value;                    /* metadata value; valid while the layer lives */
	uint32_t weight;                      /* configured */
	uint32_t current;                     /* what it gets now: 0 when cut or without endpoints */
	bool has_endpoints;                   /* some endpoint of the set has the value */
	uint64_t picks;                       /* unpinned calls sent to it (a counter) */
	int64_t cut_ms;                       /* the guard's clock (monotonic ms) when it cut it; 0 = not cut */
	bool guarded;                         /* split.guard is on: the window figures mean something */
	uint64_t window_calls, window_failed; /* over the guard's window, last evaluation */
	double window_p99_ms;
};

/* Groups of l's split (0: no split), and group i's figures (false: i out
 * of range). Control thread (the guard's window figures are its own). */
size_t mtd_lb_layer_split_groups(const struct mtd_lb_layer *l);
bool mtd_lb_layer_split_group(const struct mtd_lb_layer *l, size_t i, struct mtd_lb_split_group *out);

/* A group the guard cut, and why. */
struct mtd_lb_guard_cut {
	const char *value, *reference; /* the group, and the heaviest one it was compared with */
	bool by_errors, by_latency;
	uint64_t calls, failed, ref_calls, ref_failed; /* over the window */
	double p99_ms, ref_p99_ms;
};

/* split.guard's evaluation (control thread, about once a second), now_ms
 * on the monotonic clock (a wall-clock step must not stall the window):
 * take the window's figures and cut (weight 0 until a reload changes the
 * split) every
 * group that did worse than the heaviest group by the configured ratios
 * with at least min_calls calls in the window (both groups). Returns the
 * groups cut now (at most cap described in out). No split or no guard: 0. */
size_t mtd_lb_layer_guard(struct mtd_lb_layer *l, int64_t now_ms, struct mtd_lb_guard_cut *out, size_t cap);

/* ---- ORCA load reports (orca.c) ---------------------------------------- */

/* The figures of one xds.data.orca.v3.OrcaLoadReport that lib/lb uses. */
struct mtd_lb_orca_report {
	double cpu, mem, app; /* cpu_utilization, mem_utilization, application_utilization */
	double qps, eps;      /* rps_fractional, eps */
	uint64_t rps;         /* the deprecated integer rps (not used for weights) */
};

/* Parse a serialized OrcaLoadReport p[0..n): 0, or -EINVAL when it is not
 * well-formed protobuf, a known field has the wrong wire type, a map entry
 * is malformed, or a figure is out of range (negative or not finite;
 * mem_utilization above 1). *out is only written on success. Pure. */
int mtd_lb_orca_parse(const uint8_t *p, size_t n, struct mtd_lb_orca_report *out);


/* A -bin trailer value as received: decoded (at most MTD_LB_ORCA_MAX_REPORT
 * bytes, on the stack) and parsed. 0 or -EINVAL. */
int mtd_lb_orca_parse_b64(const uint8_t *text, size_t n, struct mtd_lb_orca_report *out);

/* gRFC A58's weight: qps / (u + eps / qps x penalty), u the application
 * utilization when > 0, else the CPU's; 0 when qps or u is not > 0. */
double mtd_lb_orca_weight(const struct mtd_lb_orca_report *r, double penalty);

/* A report of st's endpoint arrived at now_ms (monotonic): text is the
 * trailer's value as received. Invalid: counted in st->orca->invalid,
 * nothing else changes, -EINVAL. -ENOMEM when st's first report finds no
 * memory for its state (not recorded). Else its figures are stored, and when it
 * gives a weight that weight is the endpoint's, its run (blackout) starting
 * now when the last weight had expired. Any worker, lock-free. */
int mtd_lb_orca_record(struct mtd_lb_stats *st, const uint8_t *text, size_t n, const struct mtd_lb_orca_config *cfg,
                       int64_t now_ms);

/* The same for a report received whole on an out-of-band stream: p[0..n)
 * is the serialized OrcaLoadReport (no base64); longer than
 * MTD_LB_ORCA_MAX_REPORT it is invalid as a trailer's would be (p is not
 * read: NULL then is fine). Any thread. */
int mtd_lb_orca_record_raw(struct mtd_lb_stats *st, const uint8_t *p, size_t n,
                           const struct mtd_lb_orca_config *cfg, int64_t now_ms);

/* Where st's reports come from now (the control thread sets it as its
 * out-of-band stream for the endpoint goes); a trailer's report is
 * recorded only when this is OFF or UNIMPLEMENTED
 * (mtd_lb_orca_trailers_count). A state other than OFF installs the
 * endpoint's report state (out of memory: not recorded, read as OFF). */
void mtd_lb_orca_set_oob(struct mtd_lb_stats *st, enum mtd_lb_orca_oob state);
enum mtd_lb_orca_oob mtd_lb_orca_oob_state(const struct mtd_lb_stats *st);
bool mtd_lb_orca_trailers_count(const struct mtd_lb_stats *st);

/* The weight st's endpoint may use at now_ms (monotonic): 0 without a
 * report, past cfg->expiration_ms since the last, or within
 * cfg->blackout_ms of its run's first. Any thread. */
double mtd_lb_orca_weight_at(const struct mtd_lb_stats *st, const struct mtd_lb_orca_config *cfg, int64_t now_ms);

/* What the admin shows of an endpoint's reports (figures of the last valid
 * report; weight: what the last recomputation gave it, 0 = none yet). */
struct mtd_lb_orca_view {
	uint64_t reports, invalid;
	enum mtd_lb_orca_oob oob;
	double cpu, mem, app, utilization, qps, eps, weight;
};
void mtd_lb_orca_view(const struct mtd_lb_stats *st, struct mtd_lb_orca_view *out);

/* ---- hashing (hash.c) -------------------------------------------------- */

/* 64-bit non-cryptographic hash of data[0..len) (any len, data may be NULL
 * when len == 0). Pure; any thread. What CONSISTENT_HASH and MAGLEV hash a
 * ctx->key with (seed 0). */
uint64_t mtd_lb_hash64(const void *data, size_t len, uint64_t seed);

/* Ketama points of one endpoint: for r in [0, replicas), the MD5 of
 * "<id>-<r>" gives out[4r .. 4r+3] (little-endian words of the digest).
 * out holds 4 * replicas entries. Returns 0, -EINVAL (id too long: an id
 * of up to 500 bytes always fits), -ENOMEM or -EIO (OpenSSL failure).
 * CONSISTENT_HASH's init fails, and with it mtd_lb_picker_new(), on any of
 * them; lib/config keeps endpoint ids (addresses) short enough. */
int mtd_lb_ketama_points(const char *id, uint32_t replicas, uint32_t *out);

/* Java's String.hashCode over len ASCII bytes (the hash of a textbook
 * Java ring: TreeMap of String.hashCode), for the benchmark's comparison
 * ring only. */
int32_t mtd_lb_java_string_hash(const char *s, size_t len);

/* wyrand: a fast PRNG for picks; *state is per worker (any seed works). */
uint64_t mtd_lb_rand(uint64_t *state);

#endif
