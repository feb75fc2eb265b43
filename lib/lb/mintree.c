/* A lock-free tournament tree of minimum costs (lb-impl.h: struct
 * mtd_lb__mintree), for LEAST_ACTIVE and SHORTEST_RESPONSE.
 *
 * Every node is one 64-bit word: cost in the high half, and in the low half
 * the summed tie weight of the leaves below it that reach that cost. A
 * parent is the combination of its MTD_LB__MINTREE_FAN (4) children: their
 * least cost, with the tie weights of the children at that cost summed.
 * The four children of a node are one aligned 32-byte group (half a cache
 * line), so a pick that walks from the root toward the cheapest child reads
 * log4(n) groups (5 at 1,000 endpoints, 7 at 10,000), and an update
 * recombines four words per level. Ties are split in proportion to the tie
 * weights (Dubbo LeastActiveLoadBalance's weighted random among
 * the least active) by one integer draw below the root's tie weight,
 * carried down as the remainder within the chosen child: no division and
 * no data-dependent branch per level. Measured against 8 (one whole line
 * per group) and 2 (bench/lb/README.md): 4 was the fastest for both the
 * pick and pick + begin + end at 1,000 and 10,000 endpoints.
 *
 * Concurrent writers: a writer stores a node, then re-reads the children
 * and stores again until the node equals their combination. The last store
 * to a node is therefore always followed by a check against children that
 * are at least as new, so once writers stop every node is exact (the
 * property tests check it). A writer stops climbing where the recomputed
 * node equals what is stored: whoever stored that value climbs on from it.
 * All updates are sequentially consistent (the store-then-reread needs
 * StoreLoad order); picks read relaxed, they only steer.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "lb/lb-impl.h"

#define FAN MTD_LB__MINTREE_FAN

static inline uint32_t cost_of(uint64_t v)
{
	return (uint32_t)(v >> 32);
}

static inline uint32_t tw_of(uint64_t v)
{
	return (uint32_t)v;
}

/* The parent word of one group of FAN children. */
static inline uint64_t combine(const _Atomic uint64_t *g, memory_order mo)
{
	uint64_t v[FAN], w = 0;
	uint32_t least = UINT32_MAX;

#pragma GCC unroll 4
	for (int c = 0; c < FAN; c++) {
		v[c] = atomic_load_explicit(&g[c], mo);
		least = cost_of(v[c]) < least ? cost_of(v[c]) : least;
	}
#pragma GCC unroll 4
	for (int c = 0; c < FAN; c++)
		w += tw_of(v[c]) & -(uint64_t)(cost_of(v[c]) == least);
	return (uint64_t)least << 32 | (w > 0xffffffffu ? 0xffffffffu : w);
}

int mtd_lb__mintree_init(struct mtd_lb__mintree *t, size_t n)
{
	size_t len = n > 0 ? n : 1, total = 0;
	unsigned k = 0;

	/* Level k holds ceil(len[k-1] / FAN) nodes, padded to whole groups
	 * (so every group is aligned to its size); the top level is the root. */
	for (;;) {
		if (k == MTD_LB__MINTREE_LEVELS)
			return -EINVAL; /* more than MTD_LB_MAX_ENDPOINTS leaves */
		t->off[k] = total;
		total += (len + FAN - 1) / FAN * FAN;
		if (len == 1)
			break;
		len = (len + FAN - 1) / FAN;
		k++;
	}
	t->top = k;
	t->n = n;
	/* aligned_alloc wants a size that is a multiple of the alignment. */
	total = (total * sizeof(*t->node) + MTD_LB_CACHELINE - 1) / MTD_LB_CACHELINE * MTD_LB_CACHELINE /
	        sizeof(*t->node);
	t->node = aligned_alloc(MTD_LB_CACHELINE, total * sizeof(*t->node));
	if (t->node == NULL)
		return -ENOMEM;
	for (size_t j = 0; j < total; j++)
		atomic_init(&t->node[j], MTD_LB__MINTREE_EMPTY);
	return 0;
}

void mtd_lb__mintree_free(struct mtd_lb__mintree *t)
{
	free(t->node);
	t->node = NULL;
	t->n = 0;
	t->top = 0;
}

void mtd_lb__mintree_build(struct mtd_lb__mintree *t)
{
	size_t len = t->n;

	for (unsigned k = 1; k <= t->top; k++) {
		len = (len + FAN - 1) / FAN;
		for (size_t x = 0; x < len; x++)
			atomic_store_explicit(&t->node[t->off[k] + x],
			                      combine(&t->node[t->off[k - 1] + x * FAN], memory_order_relaxed),
			                      memory_order_relaxed);
	}
}

void mtd_lb__mintree_set(struct mtd_lb__mintree *t, size_t i, uint32_t cost, uint32_t tie_weight)
{
	uint64_t leaf = (uint64_t)cost << 32 | tie_weight;
	size_t x = i;

	if (atomic_load(&t->node[t->off[0] + x]) == leaf)
		return;
	atomic_store(&t->node[t->off[0] + x], leaf);
	for (unsigned k = 1; k <= t->top; k++) {
		const _Atomic uint64_t *g = &t->node[t->off[k - 1] + x / FAN * FAN];
		_Atomic uint64_t *parent = &t->node[t->off[k] + x / FAN];
		uint64_t v = combine(g, memory_order_seq_cst);

		if (atomic_load(parent) == v)
			return;
		for (;;) {
			uint64_t again;

			atomic_store(parent, v);
			again = combine(g, memory_order_seq_cst);
			if (again == v)
				break;
			v = again;
		}
		x /= FAN;
	}
}

int mtd_lb__mintree_pick(const struct mtd_lb__mintree *t, uint64_t *rng, uint32_t *cost)
{
	uint64_t root = atomic_load_explicit(&t->node[t->off[t->top]], memory_order_relaxed);
	uint64_t r, v = root;
	size_t x = 0;

	if (tw_of(root) == 0)
		return -1; /* no leaf with a tie weight: empty or all saturated */
	r = mtd_lb__below(rng, tw_of(root));
	for (unsigned k = t->top; k-- > 0;) {
		const _Atomic uint64_t *g = &t->node[t->off[k] + x * FAN];
		uint64_t val[FAN], m[FAN], sum = 0, before = 0;
		uint32_t least = UINT32_MAX;
		size_t c = 0;

		/* Unrolled and branch-free: the costs of a group are whatever
		 * the load made them, a branch per child would mispredict. */
#pragma GCC unroll 4
		for (int j = 0; j < FAN; j++) {
			val[j] = atomic_load_explicit(&g[j], memory_order_relaxed);
			least = cost_of(val[j]) < least ? cost_of(val[j]) : least;
		}
#pragma GCC unroll 4
		for (int j = 0; j < FAN; j++) {
			m[j] = tw_of(val[j]) & -(uint64_t)(cost_of(val[j]) == least);
			sum += m[j];
		}
		if (sum == 0)
			return -1;
		/* A parent read before a racing set may promise more weight
		 * than its children hold now: fold the draw back inside. */
		if (r >= sum)
			r %= sum;
		/* The child is the first whose running tie weight exceeds r,
		 * i.e. the number of running sums at or below r. */
		sum = 0;
#pragma GCC unroll 4
		for (int j = 0; j < FAN; j++) {
			uint64_t passed;

			sum += m[j];
			passed = -(uint64_t)(sum <= r);
			c -= passed;
			before = (sum & passed) | (before & ~passed);
		}
		r -= before;
		v = val[c];
		x = x * FAN + c;
	}
	*cost = cost_of(v);
	return x < t->n ? (int)x : -1;
}

bool mtd_lb__mintree_consistent(const struct mtd_lb__mintree *t)
{
	size_t len = t->n;

	for (unsigned k = 1; k <= t->top; k++) {
		len = (len + FAN - 1) / FAN;
		for (size_t x = 0; x < len; x++)
			if (atomic_load(&t->node[t->off[k] + x]) !=
			    combine(&t->node[t->off[k - 1] + x * FAN], memory_order_seq_cst))
				return false;
	}
	return true;
}

uint32_t mtd_lb__mintree_tie_weights(const struct mtd_lb_endpoint *eps, size_t n, uint32_t *out)
{
	double total = 0.0, scale = 1.0;

	for (size_t i = 0; i < n; i++)
		total += eps[i].weight > 0 ? (double)eps[i].weight : 0.0;
	/* The root's tie weight is the sum of all: keep it inside 32 bits. */
	if (total > (double)0x7fffffffu)
		scale = (double)0x7fffffffu / total;
	for (size_t i = 0; i < n; i++) {
		double w = eps[i].weight > 0 ? (double)eps[i].weight * scale : 0.0;

		out[i] = eps[i].weight > 0 ? (w < 1.0 ? 1u : (uint32_t)w) : 0u;
	}
	return (uint32_t)(total * scale);
}
