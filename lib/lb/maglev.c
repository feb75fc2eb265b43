/* MAGLEV (Eisenbud et al., NSDI 2016; Envoy's maglev, table 65537 by
 * default): a lookup table of prime size M where each endpoint claims
 * slots in the order of its own permutation
 *     slot_j = (offset + j * skip) mod M,
 *     offset = h1(id) mod M,  skip = h2(id) mod (M - 1) + 1
 * taking turns, so every endpoint holds about M / N slots and a membership
 * change moves little more than the departed/arrived share. Weighted as in
 * Envoy: in round r an endpoint takes a turn only while its slots are at
 * most r x weight / max weight. Weight <= 0: no slots (unless every weight
 * is, then all count as equal).
 *
 * A key is hashed (mtd_lb_hash64) to a slot; an excluded or over-loaded
 * (bounded.h) endpoint passes the call to the next slot, which belongs to
 * an effectively random other endpoint, the same one for the same key.
 * A pick is one table load. Requires N <= M.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lb/bounded.h"
#include "lb/lb.h"
#include "lb/lb-impl.h"

#define SEED_OFFSET 0x6d61676c65763031ULL /* "maglev01" */
#define SEED_SKIP   0x6d61676c65763032ULL /* "maglev02" */

struct mg_state {
	const struct mtd_lb_endpoint *eps;
	size_t n;
	uint32_t *table;
	uint32_t size;
	double *w;
	double factor;
};

static const struct mtd_lb_endpoint *sort_eps; /* control thread only */

static int member_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	int c = strcmp(sort_eps[x].id, sort_eps[y].id);

	return c != 0 ? c : (x > y) - (x < y);
}

static void mg_destroy(void *state)
{
	struct mg_state *s = state;

	if (s == NULL)
		return;
	free(s->table);
	free(s->w);
	free(s);
}

static int mg_init(const struct mtd_lb_config *cfg, const struct mtd_lb_endpoint *eps, size_t n, const void *prev,
                   void **out)
{
	struct mg_state *s;
	uint64_t *pos = NULL, *skip = NULL, *count = NULL;
	uint32_t *members = NULL;
	size_t nm = 0, filled = 0;
	double wmax = 0.0;
	bool any_positive = false;
	int rc = -ENOMEM;

	s = calloc(1, sizeof(*s));
	if (s == NULL)
		goto fail;
	s->eps = eps;
	s->n = n;
	s->size = cfg->table_size;
	s->factor = cfg->bounded_load_factor;
	s->w = calloc(n, sizeof(*s->w));
	s->table = malloc((size_t)s->size * sizeof(*s->table));
	pos = calloc(n, sizeof(*pos));
	skip = calloc(n, sizeof(*skip));
	count = calloc(n, sizeof(*count));
	members = calloc(n, sizeof(*members));
	if (s->w == NULL || s->table == NULL || pos == NULL || skip == NULL || count == NULL || members == NULL)
		goto free_all;
	for (size_t i = 0; i < n; i++)
		any_positive |= eps[i].weight > 0;
	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(eps[i].id);

		s->w[i] = any_positive ? (eps[i].weight > 0 ? eps[i].weight : 0) : 1.0;
		if (s->w[i] <= 0.0)
			continue;
		members[nm++] = (uint32_t)i;
		if (s->w[i] > wmax)
			wmax = s->w[i];
		pos[i] = mtd_lb_hash64(eps[i].id, len, SEED_OFFSET) % s->size;
		skip[i] = mtd_lb_hash64(eps[i].id, len, SEED_SKIP) % (s->size - 1) + 1;
	}
	/* Fill in id order, so the table does not depend on the order of
	 * the endpoint array. */
	sort_eps = eps;
	qsort(members, nm, sizeof(*members), member_cmp);
	sort_eps = NULL;
	if (nm > s->size) {
		rc = -EINVAL;
		goto free_all;
	}
	for (uint32_t j = 0; j < s->size; j++)
		s->table[j] = UINT32_MAX;
	for (uint64_t round = 0; filled < s->size; round++) {
		for (size_t k = 0; k < nm && filled < s->size; k++) {
			uint32_t i = members[k];

			/* Envoy weighted maglev: a turn while count <= round x
			 * normalised weight. */
			if ((double)count[i] > (double)round * s->w[i] / wmax)
				continue;
			while (s->table[pos[i]] != UINT32_MAX)
				pos[i] = (pos[i] + skip[i]) % s->size;
			s->table[pos[i]] = i;
			pos[i] = (pos[i] + skip[i]) % s->size;
			count[i]++;
			filled++;
		}
	}
	rc = 0;
	*out = s;

free_all:
	free(members);
	free(count);
	free(skip);
	free(pos);
	if (rc != 0)
		mg_destroy(s);
fail:
	return rc;
}

static int mg_pick(void *state, const struct mtd_lb_pick_ctx *ctx)
{
	struct mg_state *s = state;
	struct mtd_lb__bound b = {.on = false};
	uint64_t h;

	if (ctx->key == NULL)
		return mtd_lb__any_eligible(s->eps, s->n, ctx);
	if (s->factor > 0.0 || ctx->excluded != NULL) {
		mtd_lb__bound_prepare(&b, s->factor, s->w, s->eps, s->n, ctx);
		if (b.eligible == 0)
			return mtd_lb__any_eligible(s->eps, s->n, ctx);
	}
	h = mtd_lb_hash64(ctx->key, ctx->key_len, 0) % s->size;
	for (uint32_t k = 0; k < s->size; k++) {
		uint32_t i = s->table[(h + k) % s->size];

		if (mtd_lb__excluded(ctx, i))
			continue;
		if (mtd_lb__bound_has_room(&b, s->w[i], &s->eps[i]))
			return (int)i;
	}
	return mtd_lb__any_eligible(s->eps, s->n, ctx);
}

const struct mtd_lb_ops mtd_lb_ops_maglev = {
        .name = "MAGLEV",
        .caps = MTD_LB_CAP_WEIGHTS | MTD_LB_CAP_HASH_KEY | MTD_LB_CAP_BOUNDED_LOAD | MTD_LB_CAP_TABLE_SIZE,
        .init = mg_init,
        .pick = mg_pick,
        .destroy = mg_destroy,
};
