/* The live page's five minutes (history.h). Each series keeps the last
 * cumulative figures it saw (picks, answers, failures, the latency
 * histogram) and a ring of points; a point is the difference to the last
 * figures over the time between the two samples. Counters that go back
 * (an endpoint that left and came back, a group whose members changed)
 * give a point of 0, never a negative one. */
#include "config.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "admin/admin.h"
#include "core/clock.h"
#include "core/hash.h"
#include "lb/lb.h"
#include "sidecar/control/runtime.h"
#include "sidecar/ops/history.h"

#define FORGET_MS (5 * 60 * 1000) /* a series unseen this long is dropped */

struct point {
	int64_t t_ms;
	float calls_s, err, p99_ms;
};

/* Cumulative figures at one sample. */
struct figs {
	uint64_t picks, ok, failed;
	uint64_t lat[MTD_LB_LAT_BUCKETS];
};

struct series {
	char *service, *method, *name; /* method NULL: an endpoint's (name: its address) */
	struct figs last;
	int64_t last_ms, seen_ms;
	struct point pts[MTD_HISTORY_POINTS];
	size_t head, n; /* ring: the oldest at head */
	uint64_t key;   /* key_of(service, method, name) */
	struct series *next;
	struct series *chain; /* the next in its bucket */
};

/* The series, and a hash of them by (service, method, name): the tick
 * looks up every endpoint of every service each second (100,000 of them
 * in a large mesh), which a walk of the list made O(endpoints x series). */
#define N_BUCKETS 1024 /* a power of two, above the caps' 320 */
static struct series *all;
static struct series *bucket[N_BUCKETS];
static size_t n_endpoint, n_group;

/* FNV-1a, continued from h over one part of a key. */
static uint64_t hash_str(uint64_t h, const char *s)
{
	/* The end of a part: "ab"+"c" differs from "a"+"bc". */
	return (mtd_fnv1a_str(h, s) ^ 0xff) * MTD_FNV1A_PRIME;
}

#define HASH_START MTD_FNV1A_START

/* The key of (service, method, name) from the service's own hash
 * (hash_str(HASH_START, service)), computed once per service a tick. */
static uint64_t key_of(uint64_t service_hash, const char *method, const char *name)
{
	uint64_t h = method ? hash_str(service_hash ^ 1, method) : service_hash;
	return hash_str(h, name);
}

static bool same(const char *a, const char *b)
{
	return (a == NULL) == (b == NULL) && (a == NULL || strcmp(a, b) == 0);
}

static struct series *find_keyed(uint64_t key, const char *service, const char *method, const char *name)
{
	for (struct series *s = bucket[key & (N_BUCKETS - 1)]; s; s = s->chain)
		if (s->key == key && strcmp(s->name, name) == 0 && strcmp(s->service, service) == 0 &&
		    same(s->method, method))
			return s;
	return NULL;
}

static struct series *find(const char *service, const char *method, const char *name)
{
	return find_keyed(key_of(hash_str(HASH_START, service), method, name), service, method, name);
}

/* The previous tick's time when every endpoint and group it found
 * without a series had figures of zero (none was refused one for the
 * caps or memory), else 0: a series made now starts from zeroes then. */
static int64_t zero_ms;
static bool refused; /* this tick refused a series with figures */

static bool all_zero(const struct figs *f)
{
	return f->picks == 0 && f->ok == 0 && f->failed == 0;
}

/* The series of (service, method, name), made at its first figures that
 * are not all zero (a first call: an endpoint or group never called
 * costs nothing here, the common case of a mesh's thousands of idle
 * endpoints; they read as no points), within the caps; NULL before that,
 * beyond the caps or out of memory (then simply not plotted). A series
 * made so starts from zeroes at the previous tick, so its first point
 * holds the first calls. service_hash: hash_str(HASH_START, service). */
static struct series *get(uint64_t service_hash, const char *service, const char *method, const char *name,
                          const struct figs *f)
{
	uint64_t key = key_of(service_hash, method, name);
	struct series *s = find_keyed(key, service, method, name);
	if (s || all_zero(f))
		return s;
	if (method ? n_group >= MTD_HISTORY_MAX_GROUP : n_endpoint >= MTD_HISTORY_MAX_ENDPOINT) {
		refused = true;
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	if (!s || !(s->service = strdup(service)) || !(s->name = strdup(name)) ||
	    (method && !(s->method = strdup(method)))) {
		if (s) {
			free(s->service);
			free(s->name);
		}
		free(s);
		refused = true;
		return NULL;
	}
	s->last_ms = zero_ms; /* s->last: zeroes */
	if (method)
		n_group++;
	else
		n_endpoint++;
	s->key = key;
	s->next = all;
	all = s;
	s->chain = bucket[key & (N_BUCKETS - 1)];
	bucket[key & (N_BUCKETS - 1)] = s;
	return s;
}

static void unhash(struct series *s)
{
	struct series **pp = &bucket[s->key & (N_BUCKETS - 1)];
	while (*pp != s)
		pp = &(*pp)->chain;
	*pp = s->chain;
}

static void add_stats(struct figs *f, const struct mtd_lb_stats *stats)
{
	const struct mtd_lb_live *st = mtd_lb_stats_view(stats);

	f->picks += atomic_load_explicit(&st->picks, memory_order_relaxed);
	f->ok += atomic_load_explicit(&st->successes, memory_order_relaxed);
	f->failed += atomic_load_explicit(&st->failures, memory_order_relaxed);
	mtd_lb_stats_lat_add(stats, f->lat);
}

static uint64_t up(uint64_t now, uint64_t before)
{
	return now > before ? now - before : 0;
}

static void sample(struct series *s, const struct figs *f, int64_t now_ms)
{
	s->seen_ms = now_ms;
	if (s->last_ms > 0 && now_ms > s->last_ms) {
		double dt = (double)(now_ms - s->last_ms) / 1e3;
		uint64_t ok = up(f->ok, s->last.ok), failed = up(f->failed, s->last.failed);
		uint64_t lat[MTD_LB_LAT_BUCKETS];
		for (size_t b = 0; b < MTD_LB_LAT_BUCKETS; b++)
			lat[b] = up(f->lat[b], s->last.lat[b]);
		struct point *p = &s->pts[(s->head + s->n) % MTD_HISTORY_POINTS];
		if (s->n == MTD_HISTORY_POINTS)
			s->head = (s->head + 1) % MTD_HISTORY_POINTS;
		else
			s->n++;
		*p = (struct point){
		        .t_ms = now_ms,
		        .calls_s = (float)((double)up(f->picks, s->last.picks) / dt),
		        .err = ok + failed ? (float)((double)failed / (double)(ok + failed)) : 0.0f,
		        .p99_ms = (float)mtd_lb_lat_quantile_ms(lat, 0.99),
		};
	}
	s->last = *f;
	s->last_ms = now_ms;
}

/* The value of key in an endpoint's metadata, or NULL. */
static const char *meta_of(const struct mtd_rt_service *s, size_t i, const char *key)
{
	if (!s->attrs)
		return NULL;
	for (size_t m = 0; m < s->attrs[i].a.meta.n; m++)
		if (strcmp(s->attrs[i].a.meta.kv[m].key, key) == 0)
			return s->attrs[i].a.meta.kv[m].value;
	return NULL;
}

/* The split groups of one routing layer (method "*": the service's). */
static void tick_groups(const struct mtd_rt_service *s, uint64_t service_hash, const char *method,
                        const struct mtd_lb_layer *l, const struct mtd_cfg_split *sp, int64_t now_ms)
{
	struct mtd_lb_split_group g;
	if (!l || !sp || !sp->metadata_key)
		return;
	for (size_t k = 0; mtd_lb_layer_split_group(l, k, &g); k++) {
		struct figs f = {0};
		for (size_t i = 0; i < s->n_eps; i++) {
			const char *v = meta_of(s, i, sp->metadata_key);
			if (v && strcmp(v, g.value) == 0)
				add_stats(&f, &s->eps[i]->stats);
		}
		struct series *se = get(service_hash, s->cfg->local->name, method, g.value, &f);
		if (se)
			sample(se, &f, now_ms);
	}
}

void mtd_history_tick(const struct mtd_runtime *rt, int64_t now_ms)
{
	if (!rt)
		return;
	refused = false;
	for (size_t si = 0; si < rt->cfg->n_services; si++) {
		const struct mtd_rt_service *s = rt->services[si];
		uint64_t h = hash_str(HASH_START, s->cfg->local->name);
		for (size_t i = 0; i < s->n_eps; i++) {
			struct figs f = {0};
			add_stats(&f, &s->eps[i]->stats);
			struct series *se = get(h, s->cfg->local->name, NULL, mtd_endpoint_text(s->eps[i]), &f);
			if (se)
				sample(se, &f, now_ms);
		}
		/* A group's figures are its endpoints' (every method's calls):
		 * one series for the service's split, one per method with a
		 * split of its own. */
		tick_groups(s, h, "*", s->layer, s->cfg->local->split, now_ms);
		for (size_t m = 0; s->methods && m < s->cfg->n_methods; m++)
			if (s->cfg->methods[m].split_own)
				tick_groups(s, h, s->cfg->methods[m].name, s->methods[m].layer,
				            s->cfg->methods[m].split, now_ms);
	}
	zero_ms = refused ? 0 : now_ms;
	/* Forget what left the config long ago. */
	for (struct series **pp = &all; *pp;) {
		struct series *s = *pp;
		if (now_ms - s->seen_ms <= FORGET_MS) {
			pp = &s->next;
			continue;
		}
		*pp = s->next;
		unhash(s);
		if (s->method)
			n_group--;
		else
			n_endpoint--;
		free(s->service);
		free(s->method);
		free(s->name);
		free(s);
	}
}

static void points_json(struct mtd_json *j, const struct series *s, int64_t since_ms)
{
	mtd_json_key(j, "points");
	mtd_json_arr_begin(j);
	for (size_t k = 0; s && k < s->n; k++) {
		const struct point *p = &s->pts[(s->head + k) % MTD_HISTORY_POINTS];
		if (p->t_ms <= since_ms)
			continue;
		mtd_json_arr_begin(j);
		mtd_json_i64(j, p->t_ms);
		mtd_json_dbl(j, p->calls_s);
		mtd_json_dbl(j, p->err);
		mtd_json_dbl(j, p->p99_ms / 1e3);
		mtd_json_arr_end(j);
	}
	mtd_json_arr_end(j);
}

static void groups_json(struct mtd_json *j, const struct mtd_rt_service *s, const char *method,
                        const struct mtd_lb_layer *l, int64_t since_ms)
{
	struct mtd_lb_split_group g;
	for (size_t k = 0; l && mtd_lb_layer_split_group(l, k, &g); k++) {
		mtd_json_obj_begin(j);
		mtd_json_key(j, "service");
		mtd_json_str(j, s->cfg->local->name);
		mtd_json_key(j, "method");
		mtd_json_str(j, method);
		mtd_json_key(j, "group");
		mtd_json_str(j, g.value);
		mtd_json_key(j, "weight");
		mtd_json_u64(j, g.weight);
		mtd_json_key(j, "current_weight");
		mtd_json_u64(j, g.current);
		mtd_json_key(j, "cut_at");
		if (g.cut_ms)
			mtd_json_i64(j, mtd_wall_of_mono_ms(g.cut_ms));
		else
			mtd_json_null(j);
		points_json(j, find(s->cfg->local->name, method, g.value), since_ms);
		mtd_json_obj_end(j);
	}
}

void mtd_history_json(struct mtd_json *j, const struct mtd_runtime *rt, int64_t since_ms, int64_t now_ms)
{
	mtd_json_obj_begin(j);
	mtd_json_key(j, "now");
	mtd_json_i64(j, now_ms);
	mtd_json_key(j, "endpoints");
	mtd_json_arr_begin(j);
	for (size_t si = 0; rt && si < rt->cfg->n_services; si++) {
		const struct mtd_rt_service *s = rt->services[si];
		for (size_t i = 0; i < s->n_eps; i++) {
			mtd_json_obj_begin(j);
			mtd_json_key(j, "service");
			mtd_json_str(j, s->cfg->local->name);
			mtd_json_key(j, "endpoint");
			mtd_json_str(j, mtd_endpoint_text(s->eps[i]));
			points_json(j, find(s->cfg->local->name, NULL, mtd_endpoint_text(s->eps[i])), since_ms);
			mtd_json_obj_end(j);
		}
	}
	mtd_json_arr_end(j);
	mtd_json_key(j, "groups");
	mtd_json_arr_begin(j);
	for (size_t si = 0; rt && si < rt->cfg->n_services; si++) {
		const struct mtd_rt_service *s = rt->services[si];
		groups_json(j, s, "*", s->cfg->local->split ? s->layer : NULL, since_ms);
		for (size_t m = 0; s->methods && m < s->cfg->n_methods; m++)
			if (s->cfg->methods[m].split_own)
				groups_json(j, s, s->cfg->methods[m].name, s->methods[m].layer, since_ms);
	}
	mtd_json_arr_end(j);
	mtd_json_obj_end(j);
}

void mtd_history_fini(void)
{
	while (all) {
		struct series *s = all;
		all = s->next;
		free(s->service);
		free(s->method);
		free(s->name);
		free(s);
	}
	memset(bucket, 0, sizeof(bucket));
	n_endpoint = n_group = 0;
	zero_ms = 0;
}
