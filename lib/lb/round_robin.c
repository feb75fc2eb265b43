/* ROUND_ROBIN: endpoints in turn, globally across worker threads.
 *
 * One shared atomic counter, alone on its cache line: a relaxed fetch_add
 * per pick is lock-free and gives an exact global rotation (per-worker
 * counters would be cheaper but only rotate per worker). The counter starts
 * at prev's position, else at a random one, so sidecars do not all begin at
 * endpoint 0. Weights are not honoured, except that weight <= 0 drains an
 * endpoint (lb-impl.h "last resort").
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "lb/lb-impl.h"

struct rr_state {
	_Alignas(MTD_LB_CACHELINE) _Atomic uint64_t next;
	_Alignas(MTD_LB_CACHELINE) const struct mtd_lb_endpoint *eps;
	size_t n;
	size_t m;         /* entries in order[] */
	uint32_t order[]; /* positive-weight indices, else all */
};

static int rr_init(const struct mtd_lb_config *cfg, const struct mtd_lb_endpoint *eps, size_t n, const void *prev,
                   void **out)
{
	const struct rr_state *old = prev;
	struct rr_state *s;
	size_t m = 0;

	s = aligned_alloc(MTD_LB_CACHELINE, (sizeof(*s) + n * sizeof(s->order[0]) + MTD_LB_CACHELINE - 1) /
	                                            MTD_LB_CACHELINE * MTD_LB_CACHELINE);
	if (s == NULL)
		return -ENOMEM;
	s->eps = eps;
	s->n = n;
	for (size_t i = 0; i < n; i++)
		if (eps[i].weight > 0)
			s->order[m++] = (uint32_t)i;
	if (m == 0)
		for (size_t i = 0; i < n; i++)
			s->order[m++] = (uint32_t)i;
	s->m = m;
	atomic_init(&s->next, old != NULL ? atomic_load(&old->next) : mtd_lb__entropy());
	*out = s;
	return 0;
}

static int rr_pick(void *state, const struct mtd_lb_pick_ctx *ctx)
{
	struct rr_state *s = state;
	uint64_t c = atomic_fetch_add_explicit(&s->next, 1, memory_order_relaxed);
	size_t start = (size_t)(c % s->m);

	for (size_t k = 0; k < s->m; k++) {
		size_t i = s->order[(start + k) % s->m];

		if (!mtd_lb__excluded(ctx, i))
			return (int)i;
	}
	/* Every positive-weight endpoint is excluded: the drained ones. */
	return mtd_lb__scan(s->eps, s->n, ctx, (size_t)(c % s->n), false);
}

static void rr_destroy(void *state)
{
	free(state);
}

const struct mtd_lb_ops mtd_lb_ops_round_robin = {
        .name = "ROUND_ROBIN",
        .caps = 0,
        .init = rr_init,
        .pick = rr_pick,
        .destroy = rr_destroy,
};
