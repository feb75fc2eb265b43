/* A lock-free tournament tree of minimum costs (lb-impl.h: struct
 * mtd_lb__mintree), for LEAST_ACTIVE and SHORTEST_RESPONSE.
 *
 * Every node is one 64-bit word: cost in the high half, and in the low half
 * the summed tie weight of the leaves below it that reach that cost. A
 * parent is combine(left, right): the smaller cost, or on equal costs the
 * same cost with both tie weights. A pick walks from the root toward the
 * cheaper child, splitting ties in proportion to the tie weights (seed 003:
 * Dubbo LeastActiveLoadBalance's weighted random among the least active),
 * so a pick is log2(n) steps of two loads.
 *
 * Concurrent writers: a writer stores a node, then re-reads the children
 * and stores again until the node equals combine(children). The last store
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

static inline uint64_t combine(uint64_t a, uint64_t b)
{
	uint32_t ca = (uint32_t)(a >> 32), cb = (uint32_t)(b >> 32);
	uint64_t w;

	if (ca != cb)
		return ca < cb ? a : b;
	w = (a & 0xffffffffu) + (b & 0xffffffffu);
	return (uint64_t)ca << 32 | (w > 0xffffffffu ? 0xffffffffu : w);
}

int mtd_lb__mintree_init(struct mtd_lb__mintree *t, size_t n)
{
	size_t size = 1;

	while (size < n)
		size *= 2;
	t->n = n;
	t->size = size;
	t->node = calloc(2 * size, sizeof(*t->node));
	if (t->node == NULL)
		return -ENOMEM;
	for (size_t j = 0; j < 2 * size; j++)
		atomic_init(&t->node[j], MTD_LB__MINTREE_EMPTY);
	return 0;
}

void mtd_lb__mintree_free(struct mtd_lb__mintree *t)
{
	free(t->node);
	t->node = NULL;
	t->n = t->size = 0;
}

void mtd_lb__mintree_build(struct mtd_lb__mintree *t)
{
	for (size_t j = t->size; j-- > 1;)
		atomic_store_explicit(&t->node[j],
		                      combine(atomic_load_explicit(&t->node[2 * j], memory_order_relaxed),
		                              atomic_load_explicit(&t->node[2 * j + 1], memory_order_relaxed)),
		                      memory_order_relaxed);
}

void mtd_lb__mintree_set(struct mtd_lb__mintree *t, size_t i, uint32_t cost, uint32_t tie_weight)
{
	uint64_t leaf = (uint64_t)cost << 32 | tie_weight;
	size_t j = t->size + i;

	if (atomic_load(&t->node[j]) == leaf)
		return;
	atomic_store(&t->node[j], leaf);
	for (j /= 2; j >= 1; j /= 2) {
		uint64_t v = combine(atomic_load(&t->node[2 * j]), atomic_load(&t->node[2 * j + 1]));

		if (atomic_load(&t->node[j]) == v)
			return;
		for (;;) {
			uint64_t again;

			atomic_store(&t->node[j], v);
			again = combine(atomic_load(&t->node[2 * j]), atomic_load(&t->node[2 * j + 1]));
			if (again == v)
				break;
			v = again;
		}
	}
}

int mtd_lb__mintree_pick(const struct mtd_lb__mintree *t, uint64_t *rng, uint32_t *cost)
{
	uint64_t root = atomic_load_explicit(&t->node[1], memory_order_relaxed);
	/* One draw serves every tie on the way down: the fraction left after
	 * a choice is rescaled to [0, 1) for the next one. */
	double u = mtd_lb__unit(rng);
	size_t j = 1;

	if ((root & 0xffffffffu) == 0)
		return -1; /* no leaf with a tie weight: empty or all saturated */
	while (j < t->size) {
		uint64_t l = atomic_load_explicit(&t->node[2 * j], memory_order_relaxed);
		uint64_t r = atomic_load_explicit(&t->node[2 * j + 1], memory_order_relaxed);
		uint32_t cl = (uint32_t)(l >> 32), cr = (uint32_t)(r >> 32);

		if (cl == cr) {
			double wl = (double)(l & 0xffffffffu), wr = (double)(r & 0xffffffffu);
			double pl = wl + wr > 0.0 ? wl / (wl + wr) : 0.5;

			if (u < pl) {
				u = pl > 0.0 ? u / pl : 0.0;
				j = 2 * j;
			} else {
				u = pl < 1.0 ? (u - pl) / (1.0 - pl) : 0.0;
				j = 2 * j + 1;
			}
			if (!(u < 1.0))
				u = 0.0;
		} else {
			j = cl < cr ? 2 * j : 2 * j + 1;
		}
	}
	*cost = (uint32_t)(atomic_load_explicit(&t->node[j], memory_order_relaxed) >> 32);
	return j - t->size < t->n ? (int)(j - t->size) : -1;
}

bool mtd_lb__mintree_consistent(const struct mtd_lb__mintree *t)
{
	for (size_t j = 1; j < t->size; j++)
		if (atomic_load(&t->node[j]) != combine(atomic_load(&t->node[2 * j]), atomic_load(&t->node[2 * j + 1])))
			return false;
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
