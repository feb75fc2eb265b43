/* Passive outlier detection: the filter before the rule (Ribbon's
 * ServerListFilter drops unhealthy instances before the IRule picks; Envoy
 * calls it outlier detection). Pure code: no I/O, no clock of its own.
 *
 * One set per endpoint set of a service (or of a method, when ejection is
 * method-scoped). Each endpoint of the set has an entry:
 *
 *              failure count / failure % crosses the threshold,
 *              and fewer than max_ejection_percent are ejected
 *     SERVING ---------------------------------------------> EJECTED
 *        ^                                                       |
 *        +--- tick after base_ejection x times_ejected (capped) --+
 *
 * SERVING: picked as usual; results are counted.
 * EJECTED: left out of picks (its bit in the set's bitmap is set) unless the
 *          set is in panic, i.e. fewer than panic_percent of the endpoints
 *          are serving (then every endpoint is used again: a half-dead
 *          fleet is better than none). A returning endpoint starts with a
 *          clean count; times_ejected decays by one per interval spent
 *          serving, so a flapping endpoint is ejected longer each time.
 *
 * Times (now_ms, ejected_until_ms) are milliseconds on the caller's
 * monotonic clock (mtd_mono_ms): a wall-clock step back must neither keep
 * an endpoint out nor postpone the failure-percentage rule.
 *
 * Threads: mtd_outlier_report() and the read functions are called from any
 * worker concurrently (atomics only, no lock). Building a set and
 * mtd_outlier_tick() run on the control thread. */
#ifndef MTD_HEALTH_OUTLIER_H
#define MTD_HEALTH_OUTLIER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "health/health-t.h"

/* Fill c with the defaults above (enabled = false). */
void mtd_outlier_config_defaults(struct mtd_outlier_config *c);

/* One endpoint's state inside a set. */
struct mtd_outlier_entry {
	const char *id;                   /* the endpoint identity (borrowed) */
	_Atomic uint32_t consecutive;     /* endpoint failures in a row */
	_Atomic uint32_t win_calls;       /* results this interval */
	_Atomic uint32_t win_failures;    /* endpoint failures this interval */
	_Atomic int64_t ejected_until_ms; /* monotonic ms; 0 = serving */
	_Atomic uint32_t times_ejected;
	_Atomic uint64_t ejections_total; /* for metrics */
};

struct mtd_outlier_set {
	struct mtd_outlier_config cfg;
	size_t n;
	struct mtd_outlier_entry *entries;
	_Atomic uint64_t *ejected_bits; /* bit i of word i / 64: entry i ejected */
	_Atomic uint32_t n_ejected;
	int64_t next_interval_ms; /* control thread only */
};

/* Build a set for the endpoint ids ids[0..n) (n >= 1; the strings must
 * outlive the set). Entries of ids also present in prev (same string) take
 * over prev's state, ejection included, so a membership change neither
 * forgives nor forgets. prev is not modified and may be freed afterwards.
 * Returns NULL on allocation failure. Control thread. */
struct mtd_outlier_set *mtd_outlier_set_new(const struct mtd_outlier_config *cfg, const char *const *ids, size_t n,
                                            const struct mtd_outlier_set *prev, int64_t now_ms);
void mtd_outlier_set_free(struct mtd_outlier_set *s);

/* The outcome of a call on entry idx. endpoint_failure is true only for
 * what the endpoint did (connect or TLS failure, a reset by the upstream, a
 * status in the failure list); a client cancel or a deadline that expired
 * while queued is not reported at all. Returns true when this report
 * ejected the endpoint (for a log line and a counter). Any thread. */
bool mtd_outlier_report(struct mtd_outlier_set *s, size_t idx, bool endpoint_failure, int64_t now_ms);

/* Periodic work, about once per second: returns ejected endpoints whose
 * time is up to serving, applies the failure-percentage rule once per
 * interval and decays times_ejected. Returns the number of endpoints whose
 * state changed. Control thread. */
size_t mtd_outlier_tick(struct mtd_outlier_set *s, int64_t now_ms);

/* How many endpoints of a set of n may be ejected at once: floor(n x
 * max_ejection_percent / 100), but at least one when the percentage is not
 * 0 and n > 1 (a small set can still lose its one bad endpoint). */
size_t mtd_outlier_max_ejected(const struct mtd_outlier_config *cfg, size_t n);

/* The bitmap a pick must exclude (word i / 64, bit i % 64), or NULL when
 * nothing is ejected or the set is in panic (use every endpoint). The
 * words are read with relaxed loads by the caller; a pick racing an
 * ejection may still choose the endpoint once, which is harmless. */
const _Atomic uint64_t *mtd_outlier_excluded(const struct mtd_outlier_set *s);

/* True while entry idx is ejected (whatever the panic state). */
bool mtd_outlier_is_ejected(const struct mtd_outlier_set *s, size_t idx);

/* Ejection time for the k-th ejection (k >= 1): base x k, capped. */
int64_t mtd_outlier_ejection_ms(const struct mtd_outlier_config *cfg, uint32_t k);

#endif
