/* Deterministic subsetting (issue 10: `subset {size: 25}`): which endpoints
 * of a service this sidecar talks to at all.
 *
 * Rendezvous (highest random weight) hashing on the sidecar's identity:
 * endpoint i scores mtd_lb_hash64(id_i, seed = mtd_lb_hash64(node_id)),
 * and the subset is the `size` highest scores (ties by id). Every sidecar
 * computes its own subset from nothing but its node_id and the endpoint
 * ids, so a fleet needs no coordination, and a membership change moves as
 * few slots as possible: when an endpoint leaves, only the sidecars that
 * had it change, by exactly that one slot (its replacement is their next
 * score); when one joins, only the sidecars where it ranks in the top
 * `size` take it, each dropping its lowest. The cost is evenness: an
 * endpoint is in each subset with probability size / n independently, so
 * with S sidecars its count is binomial(S, size / n) (bench/lb subset: the
 * spread for 100 sidecars next to the SRE book's deterministic subsetting,
 * which is exactly even but needs each sidecar's index and reshuffles on
 * every change). Endpoints with weight <= 0 are ranked like the others:
 * draining is the policy's business, not the subset's. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lb/lb.h"
#include "lb/lb-impl.h"

struct scored {
	uint64_t score;
	const char *id;
	uint32_t idx;
};

static int scored_cmp(const void *a, const void *b)
{
	const struct scored *x = a, *y = b;
	int c;

	if (x->score != y->score)
		return x->score > y->score ? -1 : 1;
	c = strcmp(x->id, y->id);
	if (c != 0)
		return c;
	return (x->idx > y->idx) - (x->idx < y->idx);
}

static int idx_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

int mtd_lb_subset(const char *node_id, const struct mtd_lb_endpoint *eps, size_t n, size_t size, uint32_t *out,
                  size_t *n_out)
{
	uint64_t seed;
	struct scored *sc;

	if (node_id == NULL || (n > 0 && (eps == NULL || out == NULL)) || n_out == NULL)
		return -EINVAL;
	if (size == 0 || size >= n) {
		for (size_t i = 0; i < n; i++)
			out[i] = (uint32_t)i;
		*n_out = n;
		return 0;
	}
	sc = calloc(n, sizeof(*sc));
	if (sc == NULL)
		return -ENOMEM;
	seed = mtd_lb_hash64(node_id, strlen(node_id), MTD_LB_SUBSET_SEED);
	for (size_t i = 0; i < n; i++)
		sc[i] = (struct scored){mtd_lb_hash64(eps[i].id, strlen(eps[i].id), seed), eps[i].id, (uint32_t)i};
	qsort(sc, n, sizeof(*sc), scored_cmp);
	for (size_t k = 0; k < size; k++)
		out[k] = sc[k].idx;
	/* In endpoint order, so a picker over the subset sees the same
	 * relative order as over the whole set. */
	qsort(out, size, sizeof(*out), idx_cmp);
	*n_out = size;
	free(sc);
	return 0;
}
