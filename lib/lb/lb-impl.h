/* Private helpers shared by the strategies of lib/lb/. Not for callers
 * outside lib/lb/ (they use lb.h). Everything here is pure and lock-free.
 *
 * Rules every strategy keeps (the contract in lb-t.h, restated):
 *   - init() builds everything once per endpoint set; pick() allocates
 *     nothing, takes no lock and never blocks.
 *   - An excluded index is never returned; -1 only when all are excluded.
 *   - Weight <= 0 means "last resort": such an endpoint is chosen only when
 *     no eligible endpoint has a positive (warmed) weight, and then the
 *     choice among the zero-weight ones is uniform.
 */
#ifndef MTD_LB_IMPL_H
#define MTD_LB_IMPL_H

#include <string.h>

#include "lb/lb-t.h"
#include "lb/lb.h"

/* A double kept in an _Atomic uint64_t (shared figures that workers read
 * and the tick writes, lock-free): its bits, and back. */
static inline uint64_t mtd_lb__bits_of(double d)
{
	uint64_t u;
	memcpy(&u, &d, sizeof(u));
	return u;
}

static inline double mtd_lb__double_of(uint64_t u)
{
	double d;
	memcpy(&d, &u, sizeof(d));
	return d;
}

/* Per-worker slots are padded to this so workers never share a line. */
#define MTD_LB_CACHELINE 64

extern const struct mtd_lb_ops mtd_lb_ops_random;
extern const struct mtd_lb_ops mtd_lb_ops_weighted_random;
extern const struct mtd_lb_ops mtd_lb_ops_round_robin;
extern const struct mtd_lb_ops mtd_lb_ops_weighted_round_robin;
extern const struct mtd_lb_ops mtd_lb_ops_smooth_wrr;
extern const struct mtd_lb_ops mtd_lb_ops_least_active;
extern const struct mtd_lb_ops mtd_lb_ops_least_request;
extern const struct mtd_lb_ops mtd_lb_ops_weighted_response_time;
extern const struct mtd_lb_ops mtd_lb_ops_peak_ewma;
extern const struct mtd_lb_ops mtd_lb_ops_shortest_response;
extern const struct mtd_lb_ops mtd_lb_ops_consistent_hash;
extern const struct mtd_lb_ops mtd_lb_ops_maglev;
extern const struct mtd_lb_ops mtd_lb_ops_client_side_wrr;

/* The weight the last recomputation gave st's endpoint, for the admin
 * (orca.c; 0 = none: round robin, or drained). */
void mtd_lb__orca_set_used(struct mtd_lb_stats *st, double w);

static inline bool mtd_lb__excluded(const struct mtd_lb_pick_ctx *ctx, size_t i)
{
	return ctx->excluded != NULL && (ctx->excluded[i / 64] >> (i % 64) & 1u) != 0;
}

/* The caller's PRNG, or a thread-local one when ctx->rng is NULL. */
uint64_t *mtd_lb__rng(const struct mtd_lb_pick_ctx *ctx);

/* Uniform in [0, n), n >= 1 (Lemire's multiply-high; the bias is at most
 * n / 2^64, far below anything a test or a fleet can see). */
static inline uint64_t mtd_lb__below(uint64_t *rng, uint64_t n);

/* Uniform in [0, 1). */
static inline double mtd_lb__unit(uint64_t *rng);

/* First index at or after start (cyclically) that is not excluded and has
 * a positive configured weight when want_positive; -1 if none. O(n): used
 * on slow paths (exclusions, all weights zero). */
int mtd_lb__scan(const struct mtd_lb_endpoint *eps, size_t n, const struct mtd_lb_pick_ctx *ctx, size_t start,
                 bool want_positive);

/* The last-resort pick of the header comment: a uniformly random eligible
 * endpoint among those with positive weight, else among all eligible ones;
 * -1 when all are excluded. Expected O(1) when few are excluded. */
int mtd_lb__any_eligible(const struct mtd_lb_endpoint *eps, size_t n, const struct mtd_lb_pick_ctx *ctx);

/* Some bits of entropy for a strategy's starting point (round-robin start
 * offset) so that a fleet of sidecars does not all begin at endpoint 0. */
uint64_t mtd_lb__entropy(void);

/* ---- warmup (warmup.c) ------------------------------------------------ */

/* Effective weight of eps[i] at now_ms (Dubbo's warmup; Envoy's slow
 * start). weight <= 0 gives 0. Without warmup, or once warm, the configured
 * weight. Never below 1 for a positive weight: warmup never makes an
 * endpoint unreachable. */
double mtd_lb__warm_weight(const struct mtd_lb_warmup *w, const struct mtd_lb_endpoint *ep, int64_t now_ms);

/* The warm share of ep at now_ms in [0, 1], the same curve for every
 * endpoint whatever its weight (no [1, weight] clamp): uptime / warmup for
 * LINEAR, max(min%, (uptime / warmup)^(1/aggression)) for SLOW_START, 1
 * once warm or when the start is unknown. Non-decreasing in now_ms, and
 * ordered by start time across endpoints: what the rings ramp by. */
double mtd_lb__warm_fraction(const struct mtd_lb_warmup *w, const struct mtd_lb_endpoint *ep, int64_t now_ms);

/* What init() learns once about an endpoint set's warmup, with the warmup
 * options themselves: everything a weighted pick needs to weigh. */
struct mtd_lb_warm_span {
	struct mtd_lb_warmup w;
	/* Until this wall-clock ms some endpoint is still ramping; picks before
	 * it must call mtd_lb__warm_weight, picks after it may use the
	 * configured weights. INT64_MIN when warmup is off or nobody ramps. */
	int64_t ramp_until_ms;
	/* Warmup is inert while every endpoint is new (a fleet that starts
	 * together has no warm endpoint to send the load to instead): ramping
	 * applies from this time on, when the oldest endpoint has finished its
	 * own ramp. */
	int64_t apply_from_ms;
};

void mtd_lb__warm_span(const struct mtd_lb_warmup *w, const struct mtd_lb_endpoint *eps, size_t n,
                       struct mtd_lb_warm_span *span);

/* True when picks at now_ms must use ramped weights. */
static inline bool mtd_lb__warming(const struct mtd_lb_warm_span *s, int64_t now_ms)
{
	return now_ms < s->ramp_until_ms && now_ms >= s->apply_from_ms;
}

/* Weight of ep for a pick at now_ms under span s: the ramped weight while
 * warming, the configured one (clamped at 0) otherwise. */
static inline double mtd_lb__weight_at(const struct mtd_lb_warm_span *s, const struct mtd_lb_endpoint *ep,
                                       int64_t now_ms)
{
	if (ep->weight <= 0)
		return 0.0;
	if (mtd_lb__warming(s, now_ms))
		return mtd_lb__warm_weight(&s->w, ep, now_ms);
	return (double)ep->weight;
}

/* ---- weighted choice (weights.c) ------------------------------------- */

/* Weighted-random choice among the eligible endpoints by their weight at
 * ctx->now_ms under cfg's warmup (span from init); if no eligible one has a
 * positive weight, uniform among the eligible; -1 when all are excluded.
 * O(n), two passes, one random draw: the slow path of every weighted
 * strategy (warmup in progress, exclusions defeating the fast path). */
int mtd_lb__wrandom_slow(const struct mtd_lb_warm_span *span, const struct mtd_lb_endpoint *eps, size_t n,
                         const struct mtd_lb_pick_ctx *ctx);

/* Warmed weights as of the last tick(), as a cumulative table a pick
 * binary-searches (WEIGHTED_RANDOM, WEIGHTED_ROUND_ROBIN while some
 * endpoint ramps; the same approximation as least.c: a ramping endpoint's
 * share lags its curve by at most one tick). Two tables: tick() (the
 * control thread, the only writer) fills the one no pick reads, then
 * publishes its generation; a pick reads the published one and drops its
 * answer when a tick began rewriting that table meanwhile (seqlock over
 * the double buffer). weights.c. */
struct mtd_lb__warm_cdf {
	_Atomic uint64_t *cum[2]; /* cum[gen & 1]: fixed-point prefix sums, n each */
	_Atomic uint64_t gen;     /* published table */
	_Atomic uint64_t writing; /* table generation a tick is filling */
	_Atomic int64_t at_ms;    /* now_ms of the tick that filled it; INT64_MIN: none */
	size_t n;
};

/* Allocates the tables (n >= 1), none published yet. 0 or -ENOMEM. */
int mtd_lb__warm_cdf_init(struct mtd_lb__warm_cdf *c, size_t n);
void mtd_lb__warm_cdf_free(struct mtd_lb__warm_cdf *c);

/* Control thread (tick): while span warms at now_ms, fill and publish the
 * warmed weights of eps[0..n); else unpublish (picks then need none). */
void mtd_lb__warm_cdf_tick(struct mtd_lb__warm_cdf *c, const struct mtd_lb_warm_span *span,
                           const struct mtd_lb_endpoint *eps, int64_t now_ms);

/* The endpoint at fraction u in [0, 1) of the published warmed weights, in
 * O(log n): -1 when no table was published, the last is older than
 * MTD_LB__WARM_MAX_AGE_MS (or from the future), a tick rewrote it during
 * the search, or the endpoint found is excluded or drained: the caller
 * then takes its exact O(n) path. Any thread, no allocation. */
#define MTD_LB__WARM_MAX_AGE_MS 2500 /* a bit more than two ticks */
int mtd_lb__warm_cdf_pick(const struct mtd_lb__warm_cdf *c, const struct mtd_lb_endpoint *eps,
                          const struct mtd_lb_pick_ctx *ctx, double u);

/* Uniform choice among list[0..m) minus the excluded; -1 if all are.
 * A few random probes (O(1) when few are excluded), then an exact O(m)
 * count-and-select so the result stays uniform whatever is excluded. */
int mtd_lb__uniform_list(const uint32_t *list, size_t m, const struct mtd_lb_pick_ctx *ctx);

/* The same over list minus the entry `avoid` (an index that appears
 * exactly once in list, or -1): the second, distinct candidate of a power of
 * two choices. Returns avoid itself only when it is the sole eligible. */
int mtd_lb__uniform_list_other(const uint32_t *list, size_t m, const struct mtd_lb_pick_ctx *ctx, int avoid);

/* Indices of eps with weight > 0, or of all of them when none has
 * (lb-impl.h "last resort"). Allocated; *m receives the count. NULL on
 * allocation failure. */
uint32_t *mtd_lb__positive_list(const struct mtd_lb_endpoint *eps, size_t n, size_t *m);

/* The warmup span of an endpoint set with warmup switched off. */
extern const struct mtd_lb_warm_span mtd_lb__no_span;

/* The eligible positive-weight endpoint of least cost(i); ties broken at
 * random in proportion to the warmed weights (as Dubbo's
 * LeastActiveLoadBalance / ShortestResponseLoadBalance). Falls back to
 * uniform among drained endpoints; -1 when all are excluded. Two O(n)
 * passes, one random draw; cost() is read again in the second pass, and a
 * concurrent change between passes only narrows the tie set. */
typedef uint64_t mtd_lb__cost_fn(const void *state, size_t i, const struct mtd_lb_pick_ctx *ctx);
static inline int mtd_lb__argmin_weighted(const void *state, mtd_lb__cost_fn *cost, const struct mtd_lb_warm_span *span,
                                          const struct mtd_lb_endpoint *eps, size_t n,
                                          const struct mtd_lb_pick_ctx *ctx);

static inline int64_t mtd_lb__active_of(const struct mtd_lb_stats *st)
{
	int64_t a = atomic_load_explicit(&mtd_lb_stats_view(st)->active, memory_order_relaxed);

	return a > 0 ? a : 0;
}

static inline int64_t mtd_lb__active(const struct mtd_lb_endpoint *ep)
{
	return mtd_lb__active_of(ep->stats);
}

/* Walker/Vose alias table over fixed weights: O(n) build, O(1) draw with a
 * single 64-bit random number. */
struct mtd_lb_alias {
	uint64_t *threshold; /* stay at i when the fraction < threshold[i] */
	uint32_t *alias;
	size_t n;
};

/* weights[i] >= 0 and their sum > 0. Returns 0 or -ENOMEM. */
int mtd_lb__alias_build(struct mtd_lb_alias *a, const double *weights, size_t n);
void mtd_lb__alias_free(struct mtd_lb_alias *a);

static inline size_t mtd_lb__alias_draw(const struct mtd_lb_alias *a, uint64_t *rng);

/* ---- minimum tree (mintree.c) ------------------------------------------ */

/* A tournament tree over n leaves (cost, tie weight), lock-free: any thread
 * may set a leaf while others pick. Built once per endpoint set by the
 * strategy that owns it; the strategy decides what a leaf's cost is and
 * when it is refreshed. A leaf nobody set is empty (never picked). Each
 * inner node combines MTD_LB__MINTREE_FAN children that share one aligned
 * half cache line; leaf i is node[i]. */
#define MTD_LB__MINTREE_FAN    4
#define MTD_LB__MINTREE_LEVELS 12 /* FAN^(LEVELS - 1) >= MTD_LB_MAX_ENDPOINTS */

struct mtd_lb__mintree {
	_Atomic uint64_t *node;             /* 64-byte aligned; level k starts at off[k] */
	size_t off[MTD_LB__MINTREE_LEVELS]; /* off[0] = 0: the leaves; off[top]: the root */
	unsigned top;
	size_t n;
};

#define MTD_LB__MINTREE_EMPTY ((uint64_t)UINT32_MAX << 32)

/* Allocate an all-empty tree over 1 <= n <= MTD_LB_MAX_ENDPOINTS leaves.
 * 0, -ENOMEM, or -EINVAL for more leaves than its levels hold. */
int mtd_lb__mintree_init(struct mtd_lb__mintree *t, size_t n);
void mtd_lb__mintree_free(struct mtd_lb__mintree *t);

/* Set leaf i (< n) to (cost, tie_weight) and repair its path to the root.
 * tie_weight 0 empties the leaf. Any thread, concurrently with picks and
 * other sets; once every set has returned, every node is exact. */
void mtd_lb__mintree_set(struct mtd_lb__mintree *t, size_t i, uint32_t cost, uint32_t tie_weight);

/* init() only, before any other thread sees t: store leaves with
 * atomic_init/relaxed stores into node[i], then build the inner nodes
 * bottom-up in O(n). */
void mtd_lb__mintree_build(struct mtd_lb__mintree *t);

/* A leaf of least cost, ties split at random in proportion to their tie
 * weights (one draw from rng); *cost receives the leaf's stored cost.
 * -1 when no leaf has a tie weight. O(log4 n) half lines, lock-free, no
 * allocation. A pick racing a set may land on a leaf that was a minimum a
 * moment ago. */
int mtd_lb__mintree_pick(const struct mtd_lb__mintree *t, uint64_t *rng, uint32_t *cost);

/* Every inner node equals the combination of its children (tests: call
 * only when no set is running). */
bool mtd_lb__mintree_consistent(const struct mtd_lb__mintree *t);

/* Tie weights of eps (their configured weights, 0 for weight <= 0, scaled
 * down together if their sum would not fit 31 bits, never below 1 for a
 * positive weight) into out[0..n); returns their sum. */
uint32_t mtd_lb__mintree_tie_weights(const struct mtd_lb_endpoint *eps, size_t n, uint32_t *out);

/* ---- least cost through the tree (least.c) ----------------------------- */

/* Cost of one endpoint from its live stats (LEAST_ACTIVE: calls in flight;
 * SHORTEST_RESPONSE: window average x (active + 1)). Pure, any thread. */
typedef uint32_t mtd_lb__leaf_cost_fn(const struct mtd_lb_stats *st);

struct mtd_lb__least {
	const struct mtd_lb_endpoint *eps;
	size_t n;
	mtd_lb__leaf_cost_fn *cost;
	uint32_t *tw; /* tie weight per endpoint (0: drained, not in the tree) */
	/* eps[i].stats, packed: a pick's check of the leaf it lands on reads
	 * the stats without first loading the endpoint's line. */
	struct mtd_lb_stats **st;
	/* With warmup configured: the tie weights the tree uses, the warmed
	 * weights as of warm_at_ms (a tick) while some endpoint ramps, else
	 * tw; INT64_MIN: not warm (least.c). NULL without warmup. */
	_Atomic uint32_t *warm_tw;
	double warm_scale;
	_Atomic int64_t warm_at_ms;
	struct mtd_lb__mintree tree;
	struct mtd_lb_warm_span span;
};

/* The ops of a least-cost strategy: its init passes its cost function. */
int mtd_lb__least_init(const struct mtd_lb_config *cfg, const struct mtd_lb_endpoint *eps, size_t n,
                       mtd_lb__leaf_cost_fn *cost, void **out);
int mtd_lb__least_pick(void *state, const struct mtd_lb_pick_ctx *ctx);
void mtd_lb__least_begin(void *state, size_t idx);
void mtd_lb__least_report(void *state, size_t idx, const struct mtd_lb_result *res);
void mtd_lb__least_tick(void *state, int64_t now_ms, int64_t now_ns);
void mtd_lb__least_destroy(void *state);

/* True when a SMOOTH_WEIGHTED_ROUND_ROBIN state's cycle is nginx's exact
 * sequence (smooth_wrr.c: not past its layout budget or cycle cap). */
bool mtd_lb__swrr_exact(const void *state);

/* ---- hot keys (hotkeys.c) ---------------------------------------------- */

#define MTD_LB__HOT_SLOTS 4096u /* per sketch row; a power of two */

/* The call-rate sketch of one hashing picker; slot == NULL when off. */
struct mtd_lb__hot {
	_Atomic uint64_t *slot;
	uint32_t threshold;
	uint32_t spread;
};

/* 0, or -ENOMEM. Off (no allocation) when cfg->spread < 2. */
int mtd_lb__hot_init(struct mtd_lb__hot *h, const struct mtd_lb_hot_keys *cfg);
void mtd_lb__hot_free(struct mtd_lb__hot *h);

/* Count one call of the key whose mtd_lb_hash64 is key_hash at now_ms on
 * the monotonic clock (a wall-clock step must not empty or fill the
 * window); true when the key's rate over the last second exceeds the
 * threshold. Any thread, lock-free; false when off. */
bool mtd_lb__hot_observe(struct mtd_lb__hot *h, uint64_t key_hash, int64_t now_ms);

/* ---- inline bodies ------------------------------------------------------ */

static inline uint64_t mtd_lb__rand_inline(uint64_t *s)
{
	/* wyrand (Wang Yi, public domain): one multiply, passes BigCrush. */
	*s += 0xa0761d6478bd642fULL;
	unsigned __int128 m = (unsigned __int128)*s * (*s ^ 0xe7037ed1a0b428dbULL);
	return (uint64_t)(m >> 64) ^ (uint64_t)m;
}

static inline uint64_t mtd_lb__below(uint64_t *rng, uint64_t n)
{
	unsigned __int128 m = (unsigned __int128)mtd_lb__rand_inline(rng) * n;
	return (uint64_t)(m >> 64);
}

static inline double mtd_lb__unit(uint64_t *rng)
{
	return (double)(mtd_lb__rand_inline(rng) >> 11) * 0x1.0p-53;
}

static inline size_t mtd_lb__alias_draw(const struct mtd_lb_alias *a, uint64_t *rng)
{
	/* The high half of r * n is the column, the low half a uniform
	 * fraction that decides between the column and its alias. */
	unsigned __int128 m = (unsigned __int128)mtd_lb__rand_inline(rng) * a->n;
	size_t i = (size_t)(m >> 64);

	return (uint64_t)m < a->threshold[i] ? i : a->alias[i];
}

/* Inline so that each strategy's cost() is inlined into its own copy. */
static inline int mtd_lb__argmin_weighted(const void *state, mtd_lb__cost_fn *cost, const struct mtd_lb_warm_span *span,
                                          const struct mtd_lb_endpoint *eps, size_t n,
                                          const struct mtd_lb_pick_ctx *ctx)
{
	uint64_t least = UINT64_MAX;
	double sum = 0.0, r;
	size_t ties = 0;
	int first = -1, last = -1;

	for (size_t i = 0; i < n; i++) {
		double wi;
		uint64_t c;

		if (mtd_lb__excluded(ctx, i))
			continue;
		wi = mtd_lb__weight_at(span, &eps[i], ctx->now_ms);
		if (wi <= 0.0)
			continue;
		c = cost(state, i, ctx);
		if (c < least) {
			least = c;
			ties = 1;
			sum = wi;
			first = (int)i;
		} else if (c == least) {
			ties++;
			sum += wi;
		}
	}
	if (first < 0)
		return mtd_lb__wrandom_slow(span, eps, n, ctx);
	if (ties == 1)
		return first;
	r = mtd_lb__unit(mtd_lb__rng(ctx)) * sum;
	for (size_t i = (size_t)first; i < n; i++) {
		double wi;

		if (mtd_lb__excluded(ctx, i))
			continue;
		wi = mtd_lb__weight_at(span, &eps[i], ctx->now_ms);
		if (wi <= 0.0 || cost(state, i, ctx) != least)
			continue;
		last = (int)i;
		if (r < wi)
			return (int)i;
		r -= wi;
	}
	return last >= 0 ? last : first;
}

/* ---- split (split.c) ------------------------------------------------- */

struct mtd_lb_split;
struct mtd_lb_guard_cut;
struct mtd_lb_split_group;

/* The split of cfg over the layer's groups: group[k] is the layer group
 * of cfg->weights[k] (-1: no endpoint has the value). prev: the split of
 * the layer this one replaces, or NULL (its guard state and counts go on
 * when it was built from the same cfg). NULL on allocation failure or a
 * bad cfg. Control thread. */
struct mtd_lb_split *mtd_lb__split_new(const struct mtd_lb_split_config *cfg, const int32_t *group,
                                       unsigned n_workers, const struct mtd_lb_split *prev);
void mtd_lb__split_free(struct mtd_lb_split *s);
/* The entry (group) an unpinned call goes to, drawn in proportion to the
 * weights of the entries that have a group, are not cut and are not in
 * skip (bit k: entry k had no eligible endpoint for this call); -1 when
 * none is left. Lock-free, allocation-free. */
int mtd_lb__split_choose(const struct mtd_lb_split *s, uint64_t *rng, uint64_t skip);
int32_t mtd_lb__split_group(const struct mtd_lb_split *s, int e);
/* A call of worker went to entry e (picks counted per worker). */
void mtd_lb__split_count(struct mtd_lb_split *s, unsigned worker, int e);
/* A call on a member of entry e's group ended (guard figures; e < 0 and
 * a guard off do nothing). Any thread. */
void mtd_lb__split_end(struct mtd_lb_split *s, int e, const struct mtd_lb_result *res);
/* The guard's evaluation at now_ms (mtd_lb_layer_guard). */
size_t mtd_lb__split_guard(struct mtd_lb_split *s, int64_t now_ms, struct mtd_lb_guard_cut *out, size_t cap);
size_t mtd_lb__split_n(const struct mtd_lb_split *s);
void mtd_lb__split_info(const struct mtd_lb_split *s, size_t k, struct mtd_lb_split_group *out);

#endif
