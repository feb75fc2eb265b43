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
 *
 * Warmup: while endpoints ramp, a second table over the endpoints that were
 * warm when the newest joined says where a key was before; a key whose
 * owner ramps at share f moves to it once f passes the key's fraction
 * (bounded.h), and never back. Hot keys as in consistent_hash.c, over the
 * key's slots onward.
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
	uint32_t *warm_table; /* NULL unless some endpoint ramps (mg_init) */
	uint32_t size;
	double *w;
	double factor;
	struct mtd_lb_warm_span span;
	struct mtd_lb__hot hot;
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
	mtd_lb__hot_free(&s->hot);
	free(s->table);
	free(s->warm_table);
	free(s->w);
	free(s);
}

/* Fill table[0..size) with members[0..nm) (in id order) by their
 * permutations; pos/count are scratch of n entries. */
static void fill(uint32_t *table, uint32_t size, const uint32_t *members, size_t nm, const double *w,
                 const uint64_t *offset, const uint64_t *skip, uint64_t *pos, uint64_t *count)
{
	double wmax = 0.0;
	size_t filled = 0;

	for (size_t k = 0; k < nm; k++) {
		pos[members[k]] = offset[members[k]];
		count[members[k]] = 0;
		if (w[members[k]] > wmax)
			wmax = w[members[k]];
	}
	for (uint32_t j = 0; j < size; j++)
		table[j] = UINT32_MAX;
	for (uint64_t round = 0; filled < size; round++) {
		for (size_t k = 0; k < nm && filled < size; k++) {
			uint32_t i = members[k];

			/* Envoy weighted maglev: a turn while count <= round x
			 * normalised weight. */
			if ((double)count[i] > (double)round * w[i] / wmax)
				continue;
			while (table[pos[i]] != UINT32_MAX)
				pos[i] = (pos[i] + skip[i]) % size;
			table[pos[i]] = i;
			pos[i] = (pos[i] + skip[i]) % size;
			count[i]++;
			filled++;
		}
	}
}

static int mg_init(const struct mtd_lb_config *cfg, const struct mtd_lb_endpoint *eps, size_t n, const void *prev,
                   void **out)
{
	struct mg_state *s;
	uint64_t *offset = NULL, *pos = NULL, *skip = NULL, *count = NULL;
	uint32_t *members = NULL, *warm = NULL;
	size_t nm = 0, nw = 0;
	int64_t newest = INT64_MIN;
	int rc = -ENOMEM;

	s = calloc(1, sizeof(*s));
	if (s == NULL)
		goto fail;
	s->eps = eps;
	s->n = n;
	s->size = cfg->table_size;
	s->factor = cfg->bounded_load_factor;
	mtd_lb__warm_span(&cfg->warmup, eps, n, &s->span);
	s->w = calloc(n, sizeof(*s->w));
	s->table = malloc((size_t)s->size * sizeof(*s->table));
	offset = calloc(n, sizeof(*offset));
	pos = calloc(n, sizeof(*pos));
	skip = calloc(n, sizeof(*skip));
	count = calloc(n, sizeof(*count));
	members = calloc(n, sizeof(*members));
	warm = calloc(n, sizeof(*warm));
	if (s->w == NULL || s->table == NULL || offset == NULL || pos == NULL || skip == NULL || count == NULL ||
	    members == NULL || warm == NULL || mtd_lb__hot_init(&s->hot, &cfg->hot_keys) != 0)
		goto free_all;
	mtd_lb__table_weights(s->w, eps, n);
	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(eps[i].id);

		if (s->w[i] <= 0.0)
			continue;
		members[nm++] = (uint32_t)i;
		if (eps[i].start_ms > newest)
			newest = eps[i].start_ms;
		offset[i] = mtd_lb_hash64(eps[i].id, len, SEED_OFFSET) % s->size;
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
	fill(s->table, s->size, members, nm, s->w, offset, skip, pos, count);
	/* Warmup's second table: the members certainly warm by the time the
	 * newest one started (start unknown, or ramp over before it). A key
	 * a ramping owner refuses goes to its owner there, i.e. where it was
	 * before the ramping ones joined. None warm, or nobody ramping: no
	 * second table, warmup is inert. */
	if (cfg->warmup.duration_ms > 0 && s->span.ramp_until_ms != INT64_MIN) {
		for (size_t k = 0; k < nm; k++) {
			const struct mtd_lb_endpoint *ep = &eps[members[k]];

			if (ep->start_ms <= 0 || (ep->start_ms <= INT64_MAX - cfg->warmup.duration_ms &&
			                          ep->start_ms + cfg->warmup.duration_ms <= newest))
				warm[nw++] = members[k];
		}
		if (nw > 0 && nw < nm) {
			s->warm_table = malloc((size_t)s->size * sizeof(*s->warm_table));
			if (s->warm_table == NULL)
				goto free_all;
			fill(s->warm_table, s->size, warm, nw, s->w, offset, skip, pos, count);
		}
	}
	rc = 0;
	*out = s;

free_all:
	free(warm);
	free(members);
	free(count);
	free(skip);
	free(pos);
	free(offset);
	if (rc != 0)
		mg_destroy(s);
fail:
	return rc;
}

/* A lookup table as the key's candidates (bounded.h): slot -> endpoint. */
static uint32_t table_endpoint(const void *table, size_t slot)
{
	return ((const uint32_t *)table)[slot];
}

static int mg_pick(void *state, const struct mtd_lb_pick_ctx *ctx)
{
	struct mg_state *s = state;
	const struct mtd_lb__slots table = {.table = s->table, .len = s->size, .endpoint = table_endpoint};
	struct mtd_lb__bound b;
	bool warming = ctx->now_ms < s->span.ramp_until_ms;
	uint64_t h, kh;
	int i;

	if (!mtd_lb__bound_start(&b, s->factor, s->w, s->eps, s->n, ctx))
		return mtd_lb__any_eligible(s->eps, s->n, ctx);
	kh = mtd_lb_hash64(ctx->key, ctx->key_len, 0);
	h = kh % s->size;
	if (s->hot.slot != NULL && mtd_lb__hot_observe(&s->hot, kh, ctx->now_ns / 1000000)) {
		i = mtd_lb__slots_hot(table, h, s->hot.spread, warming ? &s->span.w : NULL, s->eps, ctx);
		if (i >= 0)
			return i;
	}
	i = mtd_lb__slots_walk(table, h, &b, s->w, s->eps, NULL, ctx);
	if (i < 0)
		return mtd_lb__any_eligible(s->eps, s->n, ctx);
	/* bounded.h: a ramping owner takes the key by the key's fraction,
	 * else the key stays where it was before the ramping ones joined. */
	if (s->warm_table != NULL && warming) {
		const struct mtd_lb__slots before = {
		        .table = s->warm_table, .len = s->size, .endpoint = table_endpoint};
		double f = mtd_lb__warm_fraction(&s->span.w, &s->eps[i], ctx->now_ms);

		if (f < 1.0 && !(mtd_lb__key_fraction(ctx) < f)) {
			int j = mtd_lb__slots_walk(before, h, &b, s->w, s->eps, NULL, ctx);

			if (j >= 0)
				return j;
		}
	}
	return i;
}

const struct mtd_lb_ops mtd_lb_ops_maglev = {
        .name = "MAGLEV",
        .caps = MTD_LB_CAP_WEIGHTS | MTD_LB_CAP_HASH_KEY | MTD_LB_CAP_BOUNDED_LOAD | MTD_LB_CAP_TABLE_SIZE |
                MTD_LB_CAP_WARMUP | MTD_LB_CAP_HOT_KEYS,
        .init = mg_init,
        .pick = mg_pick,
        .destroy = mg_destroy,
};
