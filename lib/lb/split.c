/* split: the group a call goes to when the routing header does
 * not pin one, and the guard that cuts a group which does worse than the
 * heaviest one. The groups are the routing layer's (layer.c: endpoints by
 * their metadata_key value, each group subset and split by zone, with a
 * picker per part): this file only chooses which group, layer.c picks
 * inside it.
 *
 *   weights {v1: 90, v2: 10}  --choose-->  group v1 | v2  --layer.c-->  endpoint
 *            ^ 0 while cut                  ^ none eligible: its share goes to
 *            (guard, until the   the others
 *            split changes)
 *
 * The choice (Envoy's weighted clusters, linkerd's TrafficSplit): one
 * random draw over the cumulative weights of the groups that have
 * endpoints. A group with no eligible endpoint for this call (all tried,
 * ejected, unhealthy or outside the subset) gives its share to the others:
 * the draw is made again over those left, so their proportions among
 * themselves stay those configured. The fast path (nothing cut, the first
 * group drawn has an endpoint) is one draw and a scan of at most
 * MTD_LB_SPLIT_MAX_GROUPS sums, no allocation, no lock.
 *
 * Figures: unpinned calls per group, counted per worker (one writer per
 * counter, relaxed load + store, as sidecar/ops/metrics.h); with the guard
 * on, the outcome and latency of every call that ended on a group's
 * endpoint (pinned or not: evidence about the version either way), in
 * shared atomics, and snapshots of them every window / 10 on the control
 * thread (mtd_lb_layer_guard), whose differences are the window's
 * figures. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lb/lb.h"
#include "lb/lb-impl.h"

/* Latency histogram: 4 buckets per octave of microseconds (a bucket is at
 * most 19 % wide), 1 us to 2^40 us. */
#define LAT_OCTAVES 40
#define LAT_BUCKETS (LAT_OCTAVES * 4)
#define SNAPS       11 /* window / 10 apart: ten intervals span the window */

struct split_entry {
	char *value; /* owned */
	uint32_t weight;
	int32_t group; /* the layer's group, -1 = no endpoint has the value */
};

/* Cumulative figures of one group (guard only). */
struct split_fig {
	_Atomic uint64_t done, failed;
	_Atomic uint64_t lat[LAT_BUCKETS]; /* successes, by latency */
};

/* A snapshot of one group's figures (control thread). */
struct split_snap {
	uint64_t done, failed;
	uint64_t lat[LAT_BUCKETS];
};

struct mtd_lb_split {
	struct split_entry *e;
	size_t n;
	uint64_t cum[MTD_LB_SPLIT_MAX_GROUPS]; /* prefix sums of the weights of entries with a group */
	uint64_t total;
	_Atomic uint64_t cut;                            /* bit k: entry k cut by the guard */
	_Atomic int64_t cut_ms[MTD_LB_SPLIT_MAX_GROUPS]; /* now_ms of the cut (monotonic) */
	unsigned n_workers;
	size_t stride;           /* counters per worker row, a multiple of a cache line */
	_Atomic uint64_t *picks; /* [worker * stride + entry], one writer each */
	struct mtd_lb_split_guard guard;
	/* Guard (NULL / unused when off). */
	struct split_fig *fig;            /* [n], shared atomics */
	struct split_snap (*snap)[SNAPS]; /* [n][SNAPS] ring, control thread */
	int64_t snap_ms[SNAPS];
	size_t snap_next, snap_count;
	/* What the last evaluation saw, per entry (control thread; read by the
	 * admin on the same thread). */
	uint64_t win_done[MTD_LB_SPLIT_MAX_GROUPS], win_failed[MTD_LB_SPLIT_MAX_GROUPS];
	double win_p99_ms[MTD_LB_SPLIT_MAX_GROUPS];
};

void mtd_lb__split_free(struct mtd_lb_split *s)
{
	if (s == NULL)
		return;
	for (size_t k = 0; k < s->n; k++)
		free(s->e[k].value);
	free(s->e);
	free(s->picks);
	free(s->fig);
	free(s->snap);
	free(s);
}

static bool same_guard(const struct mtd_lb_split_guard *a, const struct mtd_lb_split_guard *b)
{
	return a->on == b->on && a->max_error_ratio == b->max_error_ratio && a->max_p99_ratio == b->max_p99_ratio &&
	       a->min_calls == b->min_calls && a->window_ms == b->window_ms;
}

/* The weights (values and figures, in any order: the config's map may
 * list them otherwise) and the guard are equal; was[k] is then the entry
 * of a that b's entry k is. */
static bool same_split(const struct mtd_lb_split *a, const struct mtd_lb_split *b, size_t *was)
{
	if (a->n != b->n || !same_guard(&a->guard, &b->guard))
		return false;
	for (size_t k = 0; k < b->n; k++) {
		size_t j = 0;
		while (j < a->n && strcmp(a->e[j].value, b->e[k].value) != 0)
			j++;
		if (j == a->n || a->e[j].weight != b->e[k].weight)
			return false;
		was[k] = j; /* values are distinct: one match at most */
	}
	return true;
}

struct mtd_lb_split *mtd_lb__split_new(const struct mtd_lb_split_config *cfg, const int32_t *group, unsigned n_workers,
                                       const struct mtd_lb_split *prev)
{
	struct mtd_lb_split *s;

	if (cfg == NULL || cfg->n == 0 || cfg->n > MTD_LB_SPLIT_MAX_GROUPS)
		return NULL;
	s = calloc(1, sizeof(*s));
	if (s == NULL)
		return NULL;
	s->n = cfg->n;
	s->guard = cfg->guard;
	s->n_workers = n_workers > 0 ? n_workers : 1;
	s->stride = (cfg->n + 7) / 8 * 8; /* 8 counters = 64 bytes */
	s->e = calloc(cfg->n, sizeof(*s->e));
	s->picks = aligned_alloc(MTD_LB_CACHELINE, s->n_workers * s->stride * sizeof(*s->picks));
	if (s->e == NULL || s->picks == NULL)
		goto fail;
	memset(s->picks, 0, s->n_workers * s->stride * sizeof(*s->picks));
	for (size_t k = 0; k < cfg->n; k++) {
		s->e[k].value = strdup(cfg->weights[k].value != NULL ? cfg->weights[k].value : "");
		if (s->e[k].value == NULL)
			goto fail;
		s->e[k].weight = cfg->weights[k].weight;
		s->e[k].group = group[k];
		s->total += group[k] >= 0 ? cfg->weights[k].weight : 0;
		s->cum[k] = s->total;
	}
	if (s->guard.on) {
		s->fig = calloc(cfg->n, sizeof(*s->fig));
		s->snap = calloc(cfg->n, sizeof(*s->snap));
		if (s->fig == NULL || s->snap == NULL)
			goto fail;
	}
	/* The same split by value (a new endpoint set, a warmup restart, a
	 * reload that changed something else or only re-read certificates):
	 * the guard's verdicts and its window go on; picks counted go on too,
	 * so the figures read as counters. A changed split starts afresh: a
	 * cut lasts until the split itself changes. */
	size_t was[MTD_LB_SPLIT_MAX_GROUPS];
	if (prev != NULL && same_split(prev, s, was)) {
		uint64_t prev_cut = atomic_load(&prev->cut), cut = 0;
		for (size_t k = 0; k < s->n; k++) {
			size_t j = was[k];
			cut |= (prev_cut >> j & 1u) << k;
			atomic_store_explicit(&s->cut_ms[k], atomic_load(&prev->cut_ms[j]), memory_order_relaxed);
			for (unsigned w = 0; w < s->n_workers && w < prev->n_workers; w++)
				atomic_store_explicit(&s->picks[w * s->stride + k],
				                      atomic_load(&prev->picks[w * prev->stride + j]),
				                      memory_order_relaxed);
		}
		atomic_store_explicit(&s->cut, cut, memory_order_relaxed);
		if (s->guard.on && prev->fig != NULL) {
			for (size_t k = 0; k < s->n; k++) {
				size_t j = was[k];
				atomic_store(&s->fig[k].done, atomic_load(&prev->fig[j].done));
				atomic_store(&s->fig[k].failed, atomic_load(&prev->fig[j].failed));
				for (size_t b = 0; b < LAT_BUCKETS; b++)
					atomic_store(&s->fig[k].lat[b], atomic_load(&prev->fig[j].lat[b]));
				memcpy(s->snap[k], prev->snap[j], sizeof(s->snap[k]));
				s->win_done[k] = prev->win_done[j];
				s->win_failed[k] = prev->win_failed[j];
				s->win_p99_ms[k] = prev->win_p99_ms[j];
			}
			memcpy(s->snap_ms, prev->snap_ms, sizeof(s->snap_ms));
			s->snap_next = prev->snap_next;
			s->snap_count = prev->snap_count;
		}
	}
	return s;
fail:
	mtd_lb__split_free(s);
	return NULL;
}

int mtd_lb__split_choose(const struct mtd_lb_split *s, uint64_t *rng, uint64_t skip)
{
	uint64_t mask = skip | atomic_load_explicit(&s->cut, memory_order_relaxed);
	uint64_t r, total = 0, w[MTD_LB_SPLIT_MAX_GROUPS];
	size_t k;

	if (mask == 0) {
		if (s->total == 0)
			return -1;
		r = mtd_lb__below(rng, s->total);
		for (k = 0; r >= s->cum[k]; k++)
			;
		return (int)k;
	}
	/* Some group is out for this call: draw again over those left, in
	 * their configured proportions. */
	for (k = 0; k < s->n; k++) {
		w[k] = s->e[k].group >= 0 && !(mask >> k & 1u) ? s->e[k].weight : 0;
		total += w[k];
	}
	if (total == 0)
		return -1;
	r = mtd_lb__below(rng, total);
	for (k = 0; r >= w[k]; k++)
		r -= w[k];
	return (int)k;
}

int32_t mtd_lb__split_group(const struct mtd_lb_split *s, int e)
{
	return s->e[e].group;
}

void mtd_lb__split_count(struct mtd_lb_split *s, unsigned worker, int e)
{
	_Atomic uint64_t *c = &s->picks[(worker % s->n_workers) * s->stride + (size_t)e];

	/* One writer per worker row (the metrics rule): no locked instruction. */
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1, memory_order_relaxed);
}

static size_t lat_bucket(int64_t us)
{
	uint64_t v = us > 0 ? (uint64_t)us : 1;
	unsigned oct = 63 - (unsigned)__builtin_clzll(v);
	unsigned quarter = oct >= 2 ? (unsigned)(v >> (oct - 2)) & 3u : (unsigned)(v << (2 - oct)) & 3u;
	size_t b = (size_t)oct * 4 + quarter;

	return b < LAT_BUCKETS ? b : LAT_BUCKETS - 1;
}

/* The upper bound of bucket b, in us. */
static double lat_upper_us(size_t b)
{
	unsigned oct = (unsigned)(b / 4), quarter = (unsigned)(b % 4);

	return (double)(1ull << oct) * (1.0 + (quarter + 1) / 4.0);
}

void mtd_lb__split_end(struct mtd_lb_split *s, int e, const struct mtd_lb_result *res)
{
	struct split_fig *f;

	if (s->fig == NULL || e < 0 || res->neutral)
		return;
	f = &s->fig[e];
	/* Shared by the workers: calls end on any of them. */
	atomic_fetch_add_explicit(&f->done, 1, memory_order_relaxed);
	if (!res->ok)
		atomic_fetch_add_explicit(&f->failed, 1, memory_order_relaxed);
	else
		atomic_fetch_add_explicit(&f->lat[lat_bucket(res->latency_us)], 1, memory_order_relaxed);
}

/* ---- the guard (control thread) ----------------------------------------- */

static double p99_ms(const uint64_t *lat)
{
	uint64_t n = 0, seen = 0;

	for (size_t b = 0; b < LAT_BUCKETS; b++)
		n += lat[b];
	if (n == 0)
		return 0;
	for (size_t b = 0; b < LAT_BUCKETS; b++) {
		seen += lat[b];
		/* The first bucket holding the 99th percentile: ceil(0.99 n). */
		if (seen * 100 >= n * 99)
			return lat_upper_us(b) / 1000.0;
	}
	return lat_upper_us(LAT_BUCKETS - 1) / 1000.0;
}

/* A reference group failing less than this is compared as failing this
 * much: against a reference that failed nothing, any failure would be an
 * infinite ratio, and a canary would be cut for one failure. */
#define REF_ERROR_FLOOR 0.01

static double err_rate(uint64_t failed, uint64_t done)
{
	return done > 0 ? (double)failed / (double)done : 0;
}

size_t mtd_lb__split_guard(struct mtd_lb_split *s, int64_t now_ms, struct mtd_lb_guard_cut *out, size_t cap)
{
	size_t newest, oldest, found = 0;
	int ref = -1;
	uint64_t cut = atomic_load_explicit(&s->cut, memory_order_relaxed);

	if (!s->guard.on || s->fig == NULL)
		return 0;
	/* A snapshot every window / 10; the window's figures are the newest
	 * minus the oldest kept (a shorter span until the ring is full). */
	if (s->snap_count == 0 || now_ms - s->snap_ms[(s->snap_next + SNAPS - 1) % SNAPS] >= s->guard.window_ms / 10) {
		for (size_t k = 0; k < s->n; k++) {
			struct split_snap *sn = &s->snap[k][s->snap_next];

			sn->done = atomic_load_explicit(&s->fig[k].done, memory_order_relaxed);
			sn->failed = atomic_load_explicit(&s->fig[k].failed, memory_order_relaxed);
			for (size_t b = 0; b < LAT_BUCKETS; b++)
				sn->lat[b] = atomic_load_explicit(&s->fig[k].lat[b], memory_order_relaxed);
		}
		s->snap_ms[s->snap_next] = now_ms;
		s->snap_next = (s->snap_next + 1) % SNAPS;
		if (s->snap_count < SNAPS)
			s->snap_count++;
	}
	if (s->snap_count < 2)
		return 0;
	newest = (s->snap_next + SNAPS - 1) % SNAPS;
	oldest = (s->snap_next + SNAPS - s->snap_count) % SNAPS;
	for (size_t k = 0; k < s->n; k++) {
		const struct split_snap *a = &s->snap[k][oldest], *b = &s->snap[k][newest];
		uint64_t lat[LAT_BUCKETS];

		s->win_done[k] = b->done - a->done;
		s->win_failed[k] = b->failed - a->failed;
		for (size_t i = 0; i < LAT_BUCKETS; i++)
			lat[i] = b->lat[i] - a->lat[i];
		s->win_p99_ms[k] = p99_ms(lat);
		/* The reference: the group with the most weight still in. */
		if (s->e[k].group >= 0 && !(cut >> k & 1u) && (ref < 0 || s->e[k].weight > s->e[ref].weight))
			ref = (int)k;
	}
	if (ref < 0 || s->win_done[ref] < s->guard.min_calls)
		return 0;
	for (size_t k = 0; k < s->n; k++) {
		double er, er_ref, p, p_ref;
		bool by_err, by_lat;

		if ((int)k == ref || s->e[k].group < 0 || (cut >> k & 1u) || s->win_done[k] < s->guard.min_calls)
			continue;
		er = err_rate(s->win_failed[k], s->win_done[k]);
		er_ref = err_rate(s->win_failed[ref], s->win_done[ref]);
		if (er_ref < REF_ERROR_FLOOR)
			er_ref = REF_ERROR_FLOOR;
		p = s->win_p99_ms[k];
		p_ref = s->win_p99_ms[ref];
		by_err = s->guard.max_error_ratio > 0 && er > s->guard.max_error_ratio * er_ref;
		by_lat = s->guard.max_p99_ratio > 0 && p_ref > 0 && p > s->guard.max_p99_ratio * p_ref;
		if (!by_err && !by_lat)
			continue;
		cut |= 1ull << k;
		atomic_store_explicit(&s->cut_ms[k], now_ms, memory_order_relaxed);
		if (found < cap)
			out[found] = (struct mtd_lb_guard_cut){
			        .value = s->e[k].value,
			        .reference = s->e[ref].value,
			        .by_errors = by_err,
			        .by_latency = by_lat,
			        .calls = s->win_done[k],
			        .failed = s->win_failed[k],
			        .ref_calls = s->win_done[ref],
			        .ref_failed = s->win_failed[ref],
			        .p99_ms = p,
			        .ref_p99_ms = p_ref,
			};
		found++;
	}
	if (found > 0)
		atomic_store_explicit(&s->cut, cut, memory_order_relaxed); /* picks read it: weight 0 from now on */
	return found < cap ? found : cap;
}

void mtd_lb__split_info(const struct mtd_lb_split *s, size_t k, struct mtd_lb_split_group *out)
{
	uint64_t picks = 0;
	bool cut = atomic_load_explicit(&s->cut, memory_order_relaxed) >> k & 1u;

	for (unsigned w = 0; w < s->n_workers; w++)
		picks += atomic_load_explicit(&s->picks[w * s->stride + k], memory_order_relaxed);
	*out = (struct mtd_lb_split_group){
	        .value = s->e[k].value,
	        .weight = s->e[k].weight,
	        .current = cut || s->e[k].group < 0 ? 0 : s->e[k].weight,
	        .has_endpoints = s->e[k].group >= 0,
	        .picks = picks,
	        .cut_ms = cut ? atomic_load_explicit(&s->cut_ms[k], memory_order_relaxed) : 0,
	        .guarded = s->guard.on,
	        .window_calls = s->guard.on ? s->win_done[k] : 0,
	        .window_failed = s->guard.on ? s->win_failed[k] : 0,
	        .window_p99_ms = s->guard.on ? s->win_p99_ms[k] : 0,
	};
}

size_t mtd_lb__split_n(const struct mtd_lb_split *s)
{
	return s->n;
}
