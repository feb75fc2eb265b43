/* The routing layer (subsetting, zone-aware and canary routing):
 * which endpoints a policy sees, decided before the policy picks.
 *
 *   endpoints ──subset──▶ groups by routing tag ──▶ zones ──▶ policy pickers
 *             (rendezvous on       (metadata_key value;   (local / other
 *              node_id, or ring    "untagged" = no key)   zones)
 *              at index/count)
 *
 * Built once per endpoint set (mtd_lb_layer_new): every (group, zone part)
 * gets its own picker over its own endpoint array, so a policy never sees
 * an endpoint the layer filtered out and keeps all its properties inside
 * its part. A call picks the group by its routing header value (a hash
 * table lookup), then the part by locality, then the part's picker picks:
 * O(1) on top of the policy when the call excludes nothing.
 *
 * Groups (Dubbo tag routing, Envoy subset load balancing):
 *   - a call whose routing value is V goes to the endpoints whose metadata
 *     has metadata_key = V; when none is eligible, to the untagged group
 *     (endpoints without the key), or nowhere with fallback FAIL;
 *   - a call without the value goes to the untagged group only.
 *
 * Locality (Envoy zone-aware routing; Ribbon's ZoneAvoidanceRule
 * avoids a zone, this prefers one), within the chosen group:
 *   - OFF: one part, every zone;
 *   - STRICT: the local zone only;
 *   - PREFER_LOCAL: h = eligible local / local endpoints (an endpoint the
 *     call excludes - tried, or its pool backing off - is not eligible).
 *     h >= min_healthy_percent: all calls local. Below it, a fraction
 *     h / min_healthy_percent stays local and the rest spills over to the
 *     other zones' part, in proportion to what its policy gives them; with
 *     no eligible local endpoint, everything spills over. Either part
 *     yields to the other when it has no eligible endpoint.
 *
 * Subset (subset.c): with subset.size, each group keeps only size of its
 * endpoints (RENDEZVOUS: the highest scores for node_id; RING: this
 * sidecar's window of the group's ring), before zones split it, so a
 * canary group keeps its members in every sidecar's view.
 *
 * Split (split.c): with lc->split, a call the routing header
 * does not pin goes to one of the split's groups, chosen by weight among
 * those with an eligible endpoint, instead of the untagged group; subset
 * and zones apply inside the group as for a pinned call.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lb/lb.h"
#include "lb/lb-impl.h"

#define VALUE_SEED   0x726f757465763031ULL /* "routev01" */
#define BITMAP_WORDS ((MTD_LB_MAX_ENDPOINTS + 63) / 64)

struct part {
	struct mtd_lb_endpoint *eps; /* copies of the members, owned */
	uint32_t *global;            /* member -> index in the layer's eps */
	size_t n;
	struct mtd_lb_picker *p; /* NULL when n == 0 */
};

struct group {
	const char *value; /* NULL: the untagged group (or everyone without routing) */
	size_t value_len;
	struct part part[2];  /* [0] local zone (or all), [1] the other zones */
	uint64_t *local_mask; /* PREFER_LOCAL: part[0]'s members as a bitmap of layer indices */
};

struct where {
	struct part *part; /* NULL: not reachable (outside the subset, or STRICT elsewhere) */
	uint32_t local;
};

struct mtd_lb_layer {
	struct mtd_lb_layer_config cfg;
	char *zone, *metadata_key, *node_id; /* owned copies of cfg's strings */
	struct mtd_lb_split *split;          /* NULL = no split */
	int8_t *split_of;                    /* [n]: the split entry of each endpoint's group, or -1 */
	const struct mtd_lb_endpoint *eps;
	size_t n;
	bool tagged, zoned;
	struct group *groups; /* [0] untagged */
	size_t n_groups;
	uint32_t *table; /* open addressing: group index, 0 = empty slot */
	size_t table_mask;
	struct where *where;
};

static const char *meta_value(const struct mtd_lb_endpoint *ep, const char *key)
{
	for (size_t k = 0; ep->attrs != NULL && k < ep->attrs->meta.n; k++) {
		const struct mtd_lb_meta *m = &ep->attrs->meta.kv[k];
		if (m->key != NULL && strcmp(m->key, key) == 0)
			return m->value != NULL ? m->value : "";
	}
	return NULL;
}

static char *dup_or_null(const char *s)
{
	return s != NULL && s[0] != '\0' ? strdup(s) : NULL;
}

static bool same_zone(const struct mtd_lb_endpoint *ep, const char *zone)
{
	return ep->attrs != NULL && ep->attrs->zone != NULL && strcmp(ep->attrs->zone, zone) == 0;
}

static void part_free(struct part *pt)
{
	mtd_lb_picker_free(pt->p);
	pt->p = NULL;
	free(pt->eps);
	pt->eps = NULL;
	free(pt->global);
	pt->global = NULL;
	pt->n = 0;
}

void mtd_lb_layer_free(struct mtd_lb_layer *l)
{
	if (l == NULL)
		return;
	for (size_t g = 0; g < l->n_groups; g++) {
		part_free(&l->groups[g].part[0]);
		part_free(&l->groups[g].part[1]);
		free(l->groups[g].local_mask);
	}
	free(l->groups);
	free(l->table);
	free(l->where);
	mtd_lb__split_free(l->split);
	free(l->split_of);
	free(l->zone);
	free(l->metadata_key);
	free(l->node_id);
	free(l);
}

/* prev's part of the same group value and side, to carry strategy state. */
static const struct mtd_lb_picker *prev_picker(const struct mtd_lb_layer *prev, const char *value, int side)
{
	if (prev == NULL)
		return NULL;
	for (size_t g = 0; g < prev->n_groups; g++) {
		const struct group *pg = &prev->groups[g];

		if ((pg->value == NULL) != (value == NULL))
			continue;
		if (value != NULL && strcmp(pg->value, value) != 0)
			continue;
		return pg->part[side].p;
	}
	return NULL;
}

/* Build group g from the layer indices members[0..m). */
static int group_build(struct mtd_lb_layer *l, struct group *g, const uint32_t *members, size_t m,
                       const struct mtd_lb_config *cfg, const struct mtd_lb_layer *prev)
{
	struct mtd_lb_endpoint *tmp = NULL;
	uint32_t *keep = NULL;
	size_t nk = m;
	int rc = -ENOMEM;

	keep = calloc(m > 0 ? m : 1, sizeof(*keep));
	if (keep == NULL)
		goto out;
	for (size_t k = 0; k < m; k++)
		keep[k] = (uint32_t)k;
	if (l->cfg.subset.size > 0 && m > l->cfg.subset.size) {
		tmp = calloc(m, sizeof(*tmp));
		if (tmp == NULL)
			goto out;
		for (size_t k = 0; k < m; k++)
			tmp[k] = l->eps[members[k]];
		rc = mtd_lb_subset(&l->cfg.subset, l->node_id != NULL ? l->node_id : "", tmp, m, keep, &nk);
		if (rc != 0)
			goto out;
		rc = -ENOMEM;
	}
	for (int side = 0; side < 2; side++) {
		struct part *pt = &g->part[side];

		pt->eps = calloc(nk > 0 ? nk : 1, sizeof(*pt->eps));
		pt->global = calloc(nk > 0 ? nk : 1, sizeof(*pt->global));
		if (pt->eps == NULL || pt->global == NULL)
			goto out;
	}
	if (l->zoned && l->cfg.locality == MTD_LB_LOCALITY_PREFER_LOCAL) {
		g->local_mask = calloc((l->n + 63) / 64, sizeof(*g->local_mask));
		if (g->local_mask == NULL)
			goto out;
	}
	for (size_t k = 0; k < nk; k++) {
		uint32_t gi = members[keep[k]];
		int side = l->zoned && !same_zone(&l->eps[gi], l->zone) ? 1 : 0;
		struct part *pt = &g->part[side];

		if (side == 1 && l->cfg.locality == MTD_LB_LOCALITY_STRICT)
			continue; /* never reachable: no part, no picker */
		pt->eps[pt->n] = l->eps[gi];
		pt->global[pt->n] = gi;
		l->where[gi] = (struct where){pt, (uint32_t)pt->n};
		pt->n++;
		if (side == 0 && g->local_mask != NULL)
			g->local_mask[gi / 64] |= 1ULL << (gi % 64);
	}
	for (int side = 0; side < 2; side++) {
		struct part *pt = &g->part[side];

		if (pt->n == 0)
			continue;
		pt->p = mtd_lb_picker_new(cfg, pt->eps, pt->n, prev_picker(prev, g->value, side));
		if (pt->p == NULL)
			goto out;
	}
	rc = 0;
out:
	free(tmp);
	free(keep);
	return rc;
}

static const char *const *sort_vals; /* control thread only */

/* By tag value (untagged first), then index. */
static int value_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	const char *vx = sort_vals[x], *vy = sort_vals[y];
	int c = vx == NULL || vy == NULL ? (vx != NULL) - (vy != NULL) : strcmp(vx, vy);

	return c != 0 ? c : (x > y) - (x < y);
}

static uint64_t value_hash(const char *v, size_t len)
{
	return mtd_lb_hash64(v, len, VALUE_SEED);
}

/* The split over the groups just built: each weight's group by value, and
 * each member's entry (for the guard's figures). A split needs groups:
 * without metadata_key it is refused. */
static int split_build(struct mtd_lb_layer *l, const struct mtd_lb_split_config *sc, unsigned n_workers,
                       const struct mtd_lb_layer *prev)
{
	int32_t group[MTD_LB_SPLIT_MAX_GROUPS];

	if (!l->tagged || sc->n == 0 || sc->n > MTD_LB_SPLIT_MAX_GROUPS)
		return -EINVAL;
	l->split_of = malloc(l->n > 0 ? l->n : 1);
	if (l->split_of == NULL)
		return -ENOMEM;
	memset(l->split_of, -1, l->n > 0 ? l->n : 1);
	for (size_t k = 0; k < sc->n; k++) {
		group[k] = -1;
		for (size_t g = 1; g < l->n_groups && sc->weights[k].value != NULL; g++) {
			if (strcmp(l->groups[g].value, sc->weights[k].value) != 0)
				continue;
			if (l->groups[g].part[0].n + l->groups[g].part[1].n > 0)
				group[k] = (int32_t)g; /* else: outside the subset, or STRICT elsewhere */
			for (int side = 0; side < 2; side++)
				for (size_t m = 0; m < l->groups[g].part[side].n; m++)
					l->split_of[l->groups[g].part[side].global[m]] = (int8_t)k;
			break;
		}
	}
	/* The guard's cuts go on only under the same split, its key
	 * included: under another key a value names other endpoints. */
	const struct mtd_lb_split *was = NULL;
	if (prev != NULL && prev->metadata_key != NULL && strcmp(prev->metadata_key, l->metadata_key) == 0)
		was = prev->split;
	l->split = mtd_lb__split_new(sc, group, n_workers, was);
	return l->split != NULL ? 0 : -ENOMEM;
}

struct mtd_lb_layer *mtd_lb_layer_new(const struct mtd_lb_layer_config *lc, const struct mtd_lb_config *cfg,
                                      const struct mtd_lb_endpoint *eps, size_t n, const struct mtd_lb_layer *prev)
{
	struct mtd_lb_layer *l;
	const char **vals = NULL;
	uint32_t *order = NULL;
	size_t start, cap;

	if (lc == NULL || cfg == NULL || (n > 0 && eps == NULL) || n > MTD_LB_MAX_ENDPOINTS ||
	    !(lc->min_healthy_percent >= 0.0 && lc->min_healthy_percent <= 100.0) ||
	    !mtd_lb_subset_config_ok(&lc->subset))
		return NULL;
	l = calloc(1, sizeof(*l));
	if (l == NULL)
		return NULL;
	l->cfg = *lc;
	l->cfg.split = NULL; /* copied into l->split (split_build) */
	l->eps = eps;
	l->n = n;
	l->zone = dup_or_null(lc->zone);
	l->metadata_key = dup_or_null(lc->metadata_key);
	l->node_id = dup_or_null(lc->node_id);
	if ((lc->zone != NULL && lc->zone[0] != '\0' && l->zone == NULL) ||
	    (lc->metadata_key != NULL && lc->metadata_key[0] != '\0' && l->metadata_key == NULL) ||
	    (lc->node_id != NULL && lc->node_id[0] != '\0' && l->node_id == NULL))
		goto fail;
	l->cfg.zone = l->zone;
	l->cfg.metadata_key = l->metadata_key;
	l->cfg.node_id = l->node_id;
	l->zoned = l->zone != NULL && lc->locality != MTD_LB_LOCALITY_OFF;
	l->tagged = l->metadata_key != NULL;
	l->where = calloc(n > 0 ? n : 1, sizeof(*l->where));
	vals = calloc(n > 0 ? n : 1, sizeof(*vals));
	order = calloc(n > 0 ? n : 1, sizeof(*order));
	if (l->where == NULL || vals == NULL || order == NULL)
		goto fail;
	/* Group by tag value: sort by value (untagged first), then runs. */
	for (size_t i = 0; i < n; i++) {
		vals[i] = l->tagged ? meta_value(&eps[i], l->metadata_key) : NULL;
		order[i] = (uint32_t)i;
	}
	sort_vals = vals;
	qsort(order, n, sizeof(*order), value_cmp);
	sort_vals = NULL;
	l->groups = calloc(n + 1, sizeof(*l->groups));
	if (l->groups == NULL)
		goto fail;
	l->n_groups = 1; /* [0]: untagged, possibly empty */
	start = 0;
	while (start < n && vals[order[start]] == NULL)
		start++;
	if (group_build(l, &l->groups[0], order, start, cfg, prev) != 0)
		goto fail;
	while (start < n) {
		size_t end = start + 1;
		struct group *g = &l->groups[l->n_groups++];

		while (end < n && strcmp(vals[order[end]], vals[order[start]]) == 0)
			end++;
		g->value = vals[order[start]]; /* the endpoint's string: outlives the layer */
		g->value_len = strlen(g->value);
		if (group_build(l, g, order + start, end - start, cfg, prev) != 0)
			goto fail;
		start = end;
	}
	for (cap = 4; cap < 2 * l->n_groups; cap *= 2)
		;
	l->table = calloc(cap, sizeof(*l->table));
	if (l->table == NULL)
		goto fail;
	l->table_mask = cap - 1;
	for (size_t g = 1; g < l->n_groups; g++) {
		size_t at = (size_t)value_hash(l->groups[g].value, l->groups[g].value_len) & l->table_mask;

		while (l->table[at] != 0)
			at = (at + 1) & l->table_mask;
		l->table[at] = (uint32_t)g;
	}
	if (lc->split != NULL && split_build(l, lc->split, cfg->n_workers, prev) != 0)
		goto fail;
	free(order);
	free(vals);
	return l;

fail:
	free(order);
	free(vals);
	mtd_lb_layer_free(l);
	return NULL;
}

/* The part's picker with the call's exclusions in the part's indices:
 * O(part) to translate, so only when the call excludes something. */
static __attribute__((noinline)) int pick_part_excluded(const struct part *pt, const struct mtd_lb_pick_ctx *ctx)
{
	uint64_t bits[BITMAP_WORDS];
	struct mtd_lb_pick_ctx local = *ctx;
	int i;

	memset(bits, 0, (pt->n + 63) / 64 * sizeof(bits[0]));
	for (size_t k = 0; k < pt->n; k++)
		if (mtd_lb__excluded(ctx, pt->global[k]))
			bits[k / 64] |= 1ULL << (k % 64);
	local.excluded = bits;
	i = mtd_lb_pick(pt->p, &local);
	return i >= 0 ? (int)pt->global[i] : -1;
}

static int pick_part(const struct part *pt, const struct mtd_lb_pick_ctx *ctx)
{
	int i;

	if (pt->p == NULL)
		return -1;
	if (ctx->excluded != NULL)
		return pick_part_excluded(pt, ctx);
	i = mtd_lb_pick(pt->p, ctx);
	return i >= 0 ? (int)pt->global[i] : -1;
}

static int pick_group(const struct mtd_lb_layer *l, const struct group *g, const struct mtd_lb_pick_ctx *ctx)
{
	size_t n_local = g->part[0].n, healthy = n_local;
	int first = 0, i;

	if (!l->zoned || l->cfg.locality == MTD_LB_LOCALITY_STRICT || g->part[1].n == 0)
		return pick_part(&g->part[0], ctx);
	if (n_local == 0)
		return pick_part(&g->part[1], ctx);
	if (ctx->excluded != NULL)
		for (size_t w = 0; w < (l->n + 63) / 64; w++)
			healthy -= (size_t)__builtin_popcountll(ctx->excluded[w] & g->local_mask[w]);
	/* Envoy zone-aware: below min_healthy_percent the local zone keeps
	 * h / min of the calls and the rest spills over. */
	if (healthy == 0)
		first = 1;
	else if ((double)healthy * 100.0 < l->cfg.min_healthy_percent * (double)n_local &&
	         mtd_lb__unit(mtd_lb__rng(ctx)) * l->cfg.min_healthy_percent * (double)n_local >=
	                 (double)healthy * 100.0)
		first = 1;
	i = pick_part(&g->part[first], ctx);
	return i >= 0 ? i : pick_part(&g->part[1 - first], ctx);
}

/* An unpinned call under a split: a group by weight; one with no eligible
 * endpoint for this call gives its share to the others (split.c). */
static int pick_split(struct mtd_lb_layer *l, const struct mtd_lb_pick_ctx *ctx)
{
	uint64_t skip = 0;

	for (;;) {
		int e = mtd_lb__split_choose(l->split, mtd_lb__rng(ctx), skip);
		int i;

		if (e < 0)
			return -1;
		i = pick_group(l, &l->groups[mtd_lb__split_group(l->split, e)], ctx);
		if (i >= 0) {
			mtd_lb__split_count(l->split, ctx->worker, e);
			return i;
		}
		skip |= 1ull << e;
	}
}

int mtd_lb_layer_pick(struct mtd_lb_layer *l, const char *value, size_t value_len, const struct mtd_lb_pick_ctx *ctx)
{
	if (value == NULL && l->split != NULL)
		return pick_split(l, ctx);
	if (l->tagged && value != NULL) {
		size_t at = (size_t)value_hash(value, value_len) & l->table_mask;

		for (uint32_t g; (g = l->table[at]) != 0; at = (at + 1) & l->table_mask) {
			const struct group *gr = &l->groups[g];

			if (gr->value_len == value_len && memcmp(gr->value, value, value_len) == 0) {
				int i = pick_group(l, gr, ctx);

				if (i >= 0)
					return i;
				break;
			}
		}
		if (l->cfg.fallback_fail)
			return -1;
	}
	return pick_group(l, &l->groups[0], ctx);
}

bool mtd_lb_layer_reachable(const struct mtd_lb_layer *l, size_t idx)
{
	return idx < l->n && l->where[idx].part != NULL;
}

void mtd_lb_layer_call_begin(struct mtd_lb_layer *l, size_t idx)
{
	if (idx < l->n && l->where[idx].part != NULL)
		mtd_lb_call_begin(l->where[idx].part->p, l->where[idx].local);
}

void mtd_lb_layer_call_end(struct mtd_lb_layer *l, size_t idx, const struct mtd_lb_result *res, int64_t now_ns)
{
	if (idx < l->n && l->where[idx].part != NULL) {
		mtd_lb_call_end(l->where[idx].part->p, l->where[idx].local, res, now_ns);
		if (l->split != NULL)
			mtd_lb__split_end(l->split, l->split_of[idx], res);
	}
}

size_t mtd_lb_layer_split_groups(const struct mtd_lb_layer *l)
{
	return l != NULL && l->split != NULL ? mtd_lb__split_n(l->split) : 0;
}

bool mtd_lb_layer_split_group(const struct mtd_lb_layer *l, size_t i, struct mtd_lb_split_group *out)
{
	if (i >= mtd_lb_layer_split_groups(l))
		return false;
	mtd_lb__split_info(l->split, i, out);
	return true;
}

size_t mtd_lb_layer_guard(struct mtd_lb_layer *l, int64_t now_ms, struct mtd_lb_guard_cut *out, size_t cap)
{
	return l != NULL && l->split != NULL ? mtd_lb__split_guard(l->split, now_ms, out, cap) : 0;
}

void mtd_lb_layer_tick(struct mtd_lb_layer *l, int64_t now_ms, int64_t now_ns)
{
	for (size_t g = 0; g < l->n_groups; g++)
		for (int side = 0; side < 2; side++)
			if (l->groups[g].part[side].p != NULL)
				mtd_lb_tick(l->groups[g].part[side].p, now_ms, now_ns);
}
