/* Passive outlier detection (outlier.h has the state diagram and the
 * contracts). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "health/outlier.h"

/* ejected_until_ms while an ejection is being written (never a real time). */
#define EJECTING 1

void mtd_outlier_config_defaults(struct mtd_outlier_config *c)
{
	*c = (struct mtd_outlier_config){
	        .consecutive_failures = MTD_OUTLIER_DEFAULT_CONSECUTIVE,
	        .min_requests = MTD_OUTLIER_DEFAULT_MIN_REQUESTS,
	        .interval_ms = MTD_OUTLIER_DEFAULT_INTERVAL_MS,
	        .base_ejection_ms = MTD_OUTLIER_DEFAULT_BASE_MS,
	        .max_ejection_ms = MTD_OUTLIER_DEFAULT_MAX_MS,
	        .max_ejection_percent = MTD_OUTLIER_DEFAULT_MAX_PERCENT,
	        .panic_percent = MTD_OUTLIER_DEFAULT_PANIC_PERCENT,
	};
}

size_t mtd_outlier_max_ejected(const struct mtd_outlier_config *cfg, size_t n)
{
	if (!cfg->enabled || cfg->max_ejection_percent == 0 || n == 0)
		return 0;
	size_t k = n * cfg->max_ejection_percent / 100;
	/* Issue 8: when the percentage rounds down to zero endpoints, one may
	 * still be ejected; never the last one standing. */
	if (k == 0 && n > 1)
		k = 1;
	if (k >= n)
		k = cfg->max_ejection_percent >= 100 ? n : n - 1;
	return k;
}

int64_t mtd_outlier_ejection_ms(const struct mtd_outlier_config *cfg, uint32_t k)
{
	if (k == 0)
		k = 1;
	/* Envoy: base_ejection_time x times ejected, capped at max. */
	if (cfg->base_ejection_ms > 0 && (int64_t)k > cfg->max_ejection_ms / cfg->base_ejection_ms)
		return cfg->max_ejection_ms;
	int64_t t = cfg->base_ejection_ms * (int64_t)k;
	return t < cfg->max_ejection_ms ? t : cfg->max_ejection_ms;
}

static uint64_t hash_id(const char *s)
{
	return mtd_fnv1a_str(MTD_FNV1A_START, s);
}

/* prev entry index per new entry (SIZE_MAX = new), via an open-addressing
 * table over prev's ids. */
static int match_prev(const struct mtd_outlier_set *prev, const char *const *ids, size_t n, size_t *out)
{
	for (size_t i = 0; i < n; i++)
		out[i] = SIZE_MAX;
	if (!prev)
		return 0;
	size_t cap = 16;
	while (cap < prev->n * 2)
		cap *= 2;
	size_t *tab = malloc(cap * sizeof(*tab));
	if (!tab)
		return -1;
	for (size_t i = 0; i < cap; i++)
		tab[i] = SIZE_MAX;
	for (size_t j = 0; j < prev->n; j++) {
		size_t h = (size_t)hash_id(prev->entries[j].id) & (cap - 1);
		while (tab[h] != SIZE_MAX)
			h = (h + 1) & (cap - 1);
		tab[h] = j;
	}
	for (size_t i = 0; i < n; i++) {
		size_t h = (size_t)hash_id(ids[i]) & (cap - 1);
		for (; tab[h] != SIZE_MAX; h = (h + 1) & (cap - 1))
			if (strcmp(prev->entries[tab[h]].id, ids[i]) == 0) {
				out[i] = tab[h];
				break;
			}
	}
	free(tab);
	return 0;
}

struct mtd_outlier_set *mtd_outlier_set_new(const struct mtd_outlier_config *cfg, const char *const *ids, size_t n,
                                            const struct mtd_outlier_set *prev, int64_t now_ms)
{
	struct mtd_outlier_set *s = calloc(1, sizeof(*s));
	size_t *from = calloc(n ? n : 1, sizeof(*from));
	if (!s || !from)
		goto fail;
	s->cfg = *cfg;
	s->n = n;
	s->entries = calloc(n ? n : 1, sizeof(*s->entries));
	s->ejected_bits = calloc((n + 63) / 64 + 1, sizeof(*s->ejected_bits));
	if (!s->entries || !s->ejected_bits || match_prev(prev, ids, n, from) < 0)
		goto fail;
	s->next_interval_ms = now_ms + cfg->interval_ms;
	if (prev && prev->next_interval_ms > now_ms)
		s->next_interval_ms = prev->next_interval_ms;
	size_t max = mtd_outlier_max_ejected(cfg, n), ejected = 0;
	for (size_t i = 0; i < n; i++) {
		struct mtd_outlier_entry *e = &s->entries[i];
		e->id = ids[i];
		if (from[i] == SIZE_MAX)
			continue;
		const struct mtd_outlier_entry *p = &prev->entries[from[i]];
		atomic_store(&e->consecutive, atomic_load(&p->consecutive));
		atomic_store(&e->win_calls, atomic_load(&p->win_calls));
		atomic_store(&e->win_failures, atomic_load(&p->win_failures));
		atomic_store(&e->times_ejected, atomic_load(&p->times_ejected));
		atomic_store(&e->ejections_total, atomic_load(&p->ejections_total));
		int64_t until = atomic_load(&p->ejected_until_ms);
		/* A smaller set may allow fewer ejections: the surplus returns. */
		if (until > EJECTING && ejected < max) {
			atomic_store(&e->ejected_until_ms, until);
			atomic_fetch_or(&s->ejected_bits[i / 64], 1ull << (i % 64));
			ejected++;
		}
	}
	atomic_store(&s->n_ejected, (uint32_t)ejected);
	free(from);
	return s;
fail:
	free(from);
	mtd_outlier_set_free(s);
	return NULL;
}

void mtd_outlier_set_free(struct mtd_outlier_set *s)
{
	if (!s)
		return;
	free(s->entries);
	free((void *)s->ejected_bits);
	free(s);
}

static bool try_eject(struct mtd_outlier_set *s, size_t idx, int64_t now_ms)
{
	struct mtd_outlier_entry *e = &s->entries[idx];
	uint32_t max = (uint32_t)mtd_outlier_max_ejected(&s->cfg, s->n);
	uint32_t cur = atomic_load_explicit(&s->n_ejected, memory_order_relaxed);
	/* Reserve a slot under max_ejection_percent first, so two workers
	 * ejecting at once cannot exceed it. */
	do {
		if (cur >= max)
			return false;
	} while (!atomic_compare_exchange_weak(&s->n_ejected, &cur, cur + 1));
	int64_t serving = 0;
	if (!atomic_compare_exchange_strong(&e->ejected_until_ms, &serving, EJECTING)) {
		atomic_fetch_sub(&s->n_ejected, 1); /* another worker ejected it */
		return false;
	}
	uint32_t k = atomic_fetch_add(&e->times_ejected, 1) + 1;
	atomic_store(&e->ejected_until_ms, now_ms + mtd_outlier_ejection_ms(&s->cfg, k));
	atomic_fetch_or(&s->ejected_bits[idx / 64], 1ull << (idx % 64));
	atomic_fetch_add_explicit(&e->ejections_total, 1, memory_order_relaxed);
	atomic_store_explicit(&e->consecutive, 0, memory_order_relaxed);
	return true;
}

bool mtd_outlier_report(struct mtd_outlier_set *s, size_t idx, bool endpoint_failure, int64_t now_ms)
{
	if (!s || !s->cfg.enabled || idx >= s->n)
		return false;
	struct mtd_outlier_entry *e = &s->entries[idx];
	/* Calls picked before the ejection still end; they say nothing new. */
	if (atomic_load_explicit(&e->ejected_until_ms, memory_order_relaxed) != 0)
		return false;
	atomic_fetch_add_explicit(&e->win_calls, 1, memory_order_relaxed);
	if (!endpoint_failure) {
		atomic_store_explicit(&e->consecutive, 0, memory_order_relaxed);
		return false;
	}
	atomic_fetch_add_explicit(&e->win_failures, 1, memory_order_relaxed);
	uint32_t run = atomic_fetch_add_explicit(&e->consecutive, 1, memory_order_relaxed) + 1;
	if (s->cfg.consecutive_failures == 0 || run < s->cfg.consecutive_failures)
		return false;
	return try_eject(s, idx, now_ms);
}

size_t mtd_outlier_tick(struct mtd_outlier_set *s, int64_t now_ms)
{
	if (!s || !s->cfg.enabled)
		return 0;
	size_t changed = 0;
	for (size_t i = 0; i < s->n; i++) {
		struct mtd_outlier_entry *e = &s->entries[i];
		int64_t until = atomic_load(&e->ejected_until_ms);
		if (until > EJECTING && until <= now_ms) {
			/* Back to serving with a clean count. */
			atomic_fetch_and(&s->ejected_bits[i / 64], ~(1ull << (i % 64)));
			atomic_store(&e->consecutive, 0);
			atomic_store(&e->win_calls, 0);
			atomic_store(&e->win_failures, 0);
			atomic_store(&e->ejected_until_ms, 0);
			atomic_fetch_sub(&s->n_ejected, 1);
			changed++;
		}
	}
	if (now_ms < s->next_interval_ms)
		return changed;
	s->next_interval_ms = now_ms + s->cfg.interval_ms;
	for (size_t i = 0; i < s->n; i++) {
		struct mtd_outlier_entry *e = &s->entries[i];
		uint32_t calls = atomic_exchange(&e->win_calls, 0);
		uint32_t fails = atomic_exchange(&e->win_failures, 0);
		if (atomic_load(&e->ejected_until_ms) != 0)
			continue;
		/* Envoy failure_percentage: enough calls, and at least pct % of
		 * them failed because of the endpoint. */
		uint32_t pct = s->cfg.failure_percentage;
		if (pct && calls >= s->cfg.min_requests && calls > 0 &&
		    (uint64_t)fails * 100 >= (uint64_t)pct * calls) {
			if (try_eject(s, i, now_ms))
				changed++;
			continue;
		}
		/* A whole interval serving: the next ejection is shorter again. */
		uint32_t k = atomic_load(&e->times_ejected);
		if (k > 0)
			atomic_store(&e->times_ejected, k - 1);
	}
	return changed;
}

const _Atomic uint64_t *mtd_outlier_excluded(const struct mtd_outlier_set *s)
{
	if (!s || !s->cfg.enabled)
		return NULL;
	uint32_t ejected = atomic_load_explicit(&s->n_ejected, memory_order_relaxed);
	if (ejected == 0)
		return NULL;
	/* Panic: too few serving, use everyone (Envoy healthy_panic_threshold). */
	if ((uint64_t)(s->n - ejected) * 100 < (uint64_t)s->cfg.panic_percent * s->n)
		return NULL;
	return s->ejected_bits;
}

bool mtd_outlier_is_ejected(const struct mtd_outlier_set *s, size_t idx)
{
	return s && idx < s->n && atomic_load_explicit(&s->entries[idx].ejected_until_ms, memory_order_relaxed) != 0;
}
