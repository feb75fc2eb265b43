/* The engine shared by LEAST_ACTIVE and SHORTEST_RESPONSE: the endpoint of
 * least cost(i), ties broken by weighted random (as Dubbo's
 * LeastActiveLoadBalance / ShortestResponseLoadBalance), found in
 * O(log4 n) half cache lines through a minimum tree (mintree.c) instead of
 * Dubbo's O(n) scan.
 *
 * A leaf holds cost(i) as last seen by this picker: refreshed by
 * begin()/report() for each call of this picker (after the stats counted
 * it) and by tick() for all leaves. A cost changed outside this picker
 * (another picker sharing the endpoint - a method override, the snapshot
 * before a membership change - or a test writing the stats) is seen:
 *   - at once when it made the endpoint dearer: a pick checks the leaf it
 *     lands on against cost(i), and if they differ repairs the leaf and
 *     walks again (at most MAX_WALKS times, then the exact O(n) scan
 *     decides that pick): a pick never lands on an endpoint that became
 *     dearer than its leaf says;
 *   - at the next tick() (about 1 s) when it made it cheaper.
 * That is the documented bound of this approximation; with one picker per
 * endpoint set, as in bench/lb's simulation, the pick is an exact minimum.
 *
 * Warmup (Dubbo's warmup): while some endpoint ramps, a leaf's tie
 * weight is its warmed weight as of the last tick(), refreshed for every
 * leaf at each tick: a ramping endpoint's share of the ties lags its curve
 * by at most one tick (about 1 s of a window of minutes). That is the
 * documented approximation; picks fall back to the exact scan while no
 * tick has set warm tie weights yet, or the last did so more than
 * WARM_MAX_AGE_MS ago.
 *
 * Slow path, the O(n) two-pass scan (lb-impl.h mtd_lb__argmin_weighted):
 * after MAX_WALKS stale landings, while warming without fresh warm tie
 * weights (above), when the tree's choice is excluded, and when no
 * positive weight is left. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "lb/lb-impl.h"

#define MAX_WALKS       3
#define WARM_MAX_AGE_MS 2500 /* a bit more than two ticks */

static inline uint32_t tie_weight(const struct mtd_lb__least *s, size_t i)
{
	return s->warm_tw != NULL ? atomic_load_explicit(&s->warm_tw[i], memory_order_relaxed) : s->tw[i];
}

/* Store-then-recheck, as for the inner nodes (mintree.c): a thread that
 * read the cost (or the tie weight, which tick() changes while warming)
 * before another thread's change may store after it, so whoever stores
 * re-reads both and stores again until they agree. */
static void leaf_refresh(struct mtd_lb__least *s, size_t i)
{
	uint32_t c, w, again, w_again;

	/* The stats were changed by relaxed RMWs: order them before the
	 * reads, and each store before its re-read (StoreLoad). */
	atomic_thread_fence(memory_order_seq_cst);
	c = s->cost(s->st[i]);
	w = tie_weight(s, i);
	for (;;) {
		mtd_lb__mintree_set(&s->tree, i, c, w);
		atomic_thread_fence(memory_order_seq_cst);
		again = s->cost(s->st[i]);
		w_again = tie_weight(s, i);
		if (again == c && w_again == w)
			return;
		c = again;
		w = w_again;
	}
}

static uint64_t slow_cost(const void *state, size_t i, const struct mtd_lb_pick_ctx *ctx)
{
	const struct mtd_lb__least *s = state;

	(void)ctx;
	return s->cost(s->st[i]);
}

int mtd_lb__least_init(const struct mtd_lb_config *cfg, const struct mtd_lb_endpoint *eps, size_t n,
                       mtd_lb__leaf_cost_fn *cost, void **out)
{
	struct mtd_lb__least *s = calloc(1, sizeof(*s));

	if (s == NULL)
		goto fail;
	s->eps = eps;
	s->n = n;
	s->cost = cost;
	mtd_lb__warm_span(&cfg->warmup, eps, n, &s->span);
	s->tw = calloc(n, sizeof(*s->tw));
	if (s->tw == NULL)
		goto free_state;
	s->st = calloc(n, sizeof(*s->st));
	if (s->st == NULL)
		goto free_tw;
	for (size_t i = 0; i < n; i++)
		s->st[i] = eps[i].stats;
	if (mtd_lb__mintree_init(&s->tree, n) != 0)
		goto free_st;
	mtd_lb__mintree_tie_weights(eps, n, s->tw);
	if (cfg->warmup.duration_ms > 0) {
		double sum = 0.0;

		s->warm_tw = calloc(n, sizeof(*s->warm_tw));
		if (s->warm_tw == NULL)
			goto free_tree;
		for (size_t i = 0; i < n; i++) {
			atomic_init(&s->warm_tw[i], s->tw[i]);
			sum += eps[i].weight > 0 ? (double)eps[i].weight : 0.0;
		}
		/* The same scale as the configured tie weights (mintree.c). */
		s->warm_scale = sum > (double)0x7fffffffu ? (double)0x7fffffffu / sum : 1.0;
	}
	atomic_init(&s->warm_at_ms, INT64_MIN);
	for (size_t i = 0; i < n; i++)
		if (s->tw[i] > 0)
			atomic_init(&s->tree.node[i], (uint64_t)cost(eps[i].stats) << 32 | s->tw[i]);
	mtd_lb__mintree_build(&s->tree);
	*out = s;
	return 0;

free_tree:
	mtd_lb__mintree_free(&s->tree);
free_st:
	free(s->st);
free_tw:
	free(s->tw);
free_state:
	free(s);
fail:
	return -ENOMEM;
}

void mtd_lb__least_destroy(void *state)
{
	struct mtd_lb__least *s = state;

	if (s == NULL)
		return;
	mtd_lb__mintree_free(&s->tree);
	free(s->warm_tw);
	free(s->st);
	free(s->tw);
	free(s);
}

int mtd_lb__least_pick(void *state, const struct mtd_lb_pick_ctx *ctx)
{
	struct mtd_lb__least *s = state;
	int i = -1;

	if (mtd_lb__warming(&s->span, ctx->now_ms)) {
		int64_t at = atomic_load_explicit(&s->warm_at_ms, memory_order_acquire);

		/* The tree's tie weights are warm only once a tick set them, and
		 * only as fresh as the last tick. */
		if (at == INT64_MIN || ctx->now_ms - at > WARM_MAX_AGE_MS || ctx->now_ms < at)
			goto slow;
	}
	for (int walk = 0; walk < MAX_WALKS; walk++) {
		uint32_t seen, now;

		i = mtd_lb__mintree_pick(&s->tree, mtd_lb__rng(ctx), &seen);
		if (i < 0 || mtd_lb__excluded(ctx, (size_t)i))
			goto slow;
		now = s->cost(s->st[i]);
		if (now == seen)
			return i;
		leaf_refresh(s, (size_t)i);
	}
	/* Many costs moved behind our back: this once, the exact scan. */

slow:
	return mtd_lb__argmin_weighted(s, slow_cost, &s->span, s->eps, s->n, ctx);
}

void mtd_lb__least_begin(void *state, size_t idx)
{
	struct mtd_lb__least *s = state;

	if (idx < s->n && s->tw[idx] > 0)
		leaf_refresh(s, idx);
}

void mtd_lb__least_report(void *state, size_t idx, const struct mtd_lb_result *res)
{
	(void)res;
	mtd_lb__least_begin(state, idx);
}

void mtd_lb__least_tick(void *state, int64_t now_ms, int64_t now_ns)
{
	struct mtd_lb__least *s = state;
	bool warm = s->warm_tw != NULL && mtd_lb__warming(&s->span, now_ms);

	(void)now_ns;
	/* Warm tie weights while some endpoint ramps; the configured ones
	 * again at the first tick after (the tick thread is the only writer
	 * of warm_tw and warm_at_ms). */
	if (warm || (s->warm_tw != NULL && atomic_load_explicit(&s->warm_at_ms, memory_order_relaxed) != INT64_MIN))
		for (size_t i = 0; i < s->n; i++) {
			double w = warm ? mtd_lb__weight_at(&s->span, &s->eps[i], now_ms) * s->warm_scale : 0.0;

			if (s->tw[i] > 0)
				atomic_store_explicit(&s->warm_tw[i],
				                      !warm     ? s->tw[i]
				                      : w < 1.0 ? 1u
				                                : (uint32_t)w,
				                      memory_order_relaxed);
		}
	for (size_t i = 0; i < s->n; i++)
		if (s->tw[i] > 0)
			leaf_refresh(s, i);
	if (s->warm_tw != NULL)
		atomic_store_explicit(&s->warm_at_ms, warm ? now_ms : INT64_MIN, memory_order_release);
}
