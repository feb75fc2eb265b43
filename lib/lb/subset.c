/* Deterministic subsetting (`subset {size: 25}`): which endpoints of a
 * service this sidecar talks to at all. Two modes, because none measured
 * was best at both evenness and needing nothing (bench/lb/README.md
 * "Subsetting", 100 sidecars, size 25):
 *
 * RENDEZVOUS (highest random weight) hashing on the sidecar's node_id:
 * endpoint i scores mtd_lb_hash64(id_i, seed = mtd_lb_hash64(node_id)),
 * and the subset is the `size` highest scores (ties by id). Every sidecar
 * computes its own subset from nothing but its node_id and the endpoint
 * ids, so a fleet needs no coordination, a sidecar joining or leaving the
 * fleet moves nothing, and a membership change moves as few slots as
 * possible: when an endpoint leaves, only the sidecars that had it change,
 * by exactly that one slot (its replacement is their next score); when one
 * joins, only the sidecars where it ranks in the top `size` take it. The
 * cost is evenness: an endpoint is in each subset with probability
 * size / n independently, so with S sidecars its count is binomial(S,
 * size / n): max/mean 1.28 at 100 endpoints, 3.2 at 1,000.
 *
 * RING: every sidecar knows its index among the count sidecars of the
 * fleet. The endpoints sit on a ring in the order of a hash of their id
 * (the same order in every sidecar, and an endpoint's arrival or departure
 * moves no other endpoint's place in it), and sidecar i takes the `size`
 * consecutive endpoints from position
 *
 *     start(i) = floor(i * n / count + 1/2)
 *
 * on. The starts are evenly spaced (a Beatty sequence), so every endpoint
 * is in floor or ceil of count * size / n windows: as even as whole
 * connections can be (max/mean 1.00, 1.08, 1.20 at 100, 300, 1,000
 * endpoints; with 2.5 connections per endpoint some endpoint has 3). When
 * an endpoint leaves, the windows that held it take their next endpoint,
 * and the starts, now spaced over n - 1, creep by a fraction index / count
 * of an endpoint, which the rounding turns into one whole slot for some
 * windows. Which ones matters: with the + 1/2 inside the floor (not
 * floor((index + 1/2) * n / count), which moves every window before the
 * departed one at once when n - 1 is a multiple of 2 * count), when n is
 * near a multiple of count the windows that creep are those past the
 * middle of the ring, so a departure near either end of the ring moves
 * about half of them, not all. Measured (tests/unit/lb/test_layer.c,
 * lb_bench subset): at most one slot per sidecar for any departure, and
 * in the worst departure 0.75, 0.59, 0.52 slots per sidecar
 * at 100, 300, 1,000 endpoints (3.0, 2.4, 2.1 % of the connections; the
 * goal, 1/size, is 4 %; rendezvous moves only the holders' slots, 1.3 %
 * at most). The price: each sidecar's index and the count must be
 * configured, and a change of count moves every window (0.49, 1.47, 4.90
 * slots per sidecar at 100, 300, 1,000 endpoints when count goes from 100
 * to 101), where rendezvous moves nothing. Below 2 * size endpoints the
 * holders alone are half the sidecars, and the worst departure can pass
 * 1/size. Wrong values degrade, never fail (the config refuses index >=
 * count): two sidecars given one index share a window while another goes
 * unused, and a count above the sidecars running leaves the missing ones'
 * windows out, some endpoints a connection short.
 *
 * The SRE book's deterministic subsetting (Site Reliability Engineering,
 * ch. 20: rounds of n / size sidecars, each round's list shuffled by the
 * round number and cut in n / size subsets) is even too but reshuffles on
 * every change of n: 19 of 25 slots per sidecar when one of 100 endpoints
 * leaves. Ordering each round's list by a hash of the id seeded by the
 * round instead of a shuffle keeps a change cheap only while n / size
 * stays the same: a join at 100, 300, 1,000 endpoints, but not a departure
 * there (18.5 slots per sidecar at 100). Windows at (index * size) mod n
 * of the ring are even too, but a change of n moves every window that
 * wrapped: 13 slots per sidecar at 100 (bench/lb, "considered").
 *
 * Endpoints with weight <= 0 are placed like the others: draining is the
 * policy's business, not the subset's. */
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

bool mtd_lb_subset_config_ok(const struct mtd_lb_subset_config *sc)
{
	if (sc == NULL)
		return false;
	switch (sc->mode) {
	case MTD_LB_SUBSET_RENDEZVOUS:
		return true;
	case MTD_LB_SUBSET_RING:
		return sc->count > 0 && sc->index < sc->count;
	}
	return false;
}

int mtd_lb_subset(const struct mtd_lb_subset_config *sc, const char *node_id, const struct mtd_lb_endpoint *eps,
                  size_t n, uint32_t *out, size_t *n_out)
{
	size_t size, start = 0;
	uint64_t seed = MTD_LB_SUBSET_SEED;
	struct scored *sc_eps;

	if (!mtd_lb_subset_config_ok(sc) || (sc->mode == MTD_LB_SUBSET_RENDEZVOUS && node_id == NULL) ||
	    (n > 0 && (eps == NULL || out == NULL)) || n > MTD_LB_MAX_ENDPOINTS || n_out == NULL)
		return -EINVAL;
	size = sc->size;
	if (size == 0 || size >= n) {
		for (size_t i = 0; i < n; i++)
			out[i] = (uint32_t)i;
		*n_out = n;
		return 0;
	}
	sc_eps = calloc(n, sizeof(*sc_eps));
	if (sc_eps == NULL)
		return -ENOMEM;
	if (sc->mode == MTD_LB_SUBSET_RENDEZVOUS)
		seed = mtd_lb_hash64(node_id, strlen(node_id), MTD_LB_SUBSET_SEED);
	for (size_t i = 0; i < n; i++)
		sc_eps[i] = (struct scored){mtd_lb_hash64(eps[i].id, strlen(eps[i].id), seed), eps[i].id, (uint32_t)i};
	qsort(sc_eps, n, sizeof(*sc_eps), scored_cmp);
	if (sc->mode == MTD_LB_SUBSET_RING) /* floor(index * n / count + 1/2): index < 2^32, n < 2^31 */
		start = (size_t)((2 * (uint64_t)sc->index * n + sc->count) / (2 * (uint64_t)sc->count) % n);
	for (size_t k = 0; k < size; k++)
		out[k] = sc_eps[(start + k) % n].idx;
	/* In endpoint order, so a picker over the subset sees the same
	 * relative order as over the whole set. */
	qsort(out, size, sizeof(*out), idx_cmp);
	*n_out = size;
	free(sc_eps);
	return 0;
}
