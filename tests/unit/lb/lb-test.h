/* Shared fixture for the lib/lb Check suites: a set of endpoints with their
 * own stats, a deterministic PRNG and helpers to count picks.
 *
 * Statistical tolerances: distribution tests use Pearson's chi-square with
 * the critical value at p = 0.001 for the degrees of freedom at hand, with
 * a fixed seed, so a pass is deterministic and a real bias of a few
 * percent over 100k picks fails. */
#ifndef MTD_LB_TEST_H
#define MTD_LB_TEST_H

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/lazy.h"
#include "lb/lb.h"

#define T_MAX_EPS 1024
#define T_SEED 0x5eed5eed12345678ULL

struct t_set {
	struct mtd_lb_endpoint eps[T_MAX_EPS];
	struct mtd_lb_stats stats[T_MAX_EPS];
	char ids[T_MAX_EPS][32];
	struct mtd_lb_attrs attrs[T_MAX_EPS]; /* t_zone's */
	size_t n;
	uint64_t rng;
	uint64_t excluded[T_MAX_EPS / 64];
};

static inline void t_set_init(struct t_set *s, size_t n, const int32_t *weights)
{
	memset(s, 0, sizeof(*s));
	s->n = n;
	s->rng = T_SEED;
	for (size_t i = 0; i < n; i++) {
		snprintf(s->ids[i], sizeof(s->ids[i]), "10.0.%zu.%zu:8080",
		         i / 256, i % 256);
		s->eps[i].id = s->ids[i];
		s->eps[i].weight = weights != NULL ? weights[i] : 100;
		s->eps[i].stats = &s->stats[i];
	}
}

/* Endpoint i in zone, its metadata (if any) kept: its attrs become the
 * set's own copy. */
static inline void t_zone(struct t_set *s, size_t i, const char *zone)
{
	struct mtd_lb_attrs a = s->eps[i].attrs != NULL ? *s->eps[i].attrs : (struct mtd_lb_attrs){0};

	a.zone = zone;
	s->attrs[i] = a;
	s->eps[i].attrs = &s->attrs[i];
}

/* Frees what recording into the set's stats allocated (their latency
 * histograms): before the set is left or initialised again. */
static inline void t_set_fini(struct t_set *s)
{
	for (size_t i = 0; i < T_MAX_EPS; i++)
		mtd_lb_stats_fini(&s->stats[i]);
}

/* st's live figures, made if none yet (to set or read one directly);
 * its histogram and ORCA state as they are (NULL: none yet). */
static inline struct mtd_lb_live *t_live(struct mtd_lb_stats *st)
{
	struct mtd_lb_live *l = mtd_lazy_get(&st->live);

	ck_assert_ptr_nonnull(l);
	return l;
}

static inline struct mtd_lb_lat_hist *t_lat(const struct mtd_lb_stats *st)
{
	return mtd_lazy_peek(&mtd_lb_stats_view(st)->lat);
}

static inline struct mtd_lb_orca_state *t_orca(const struct mtd_lb_stats *st)
{
	return mtd_lazy_peek(&mtd_lb_stats_view(st)->orca);
}

static inline void t_exclude(struct t_set *s, size_t i)
{
	s->excluded[i / 64] |= 1ULL << (i % 64);
}

static inline struct mtd_lb_pick_ctx t_ctx(struct t_set *s)
{
	return (struct mtd_lb_pick_ctx){
		.excluded = s->excluded,
		.now_ms = 1000000,
		.now_ns = 1000000000,
		.worker = 0,
		.rng = &s->rng,
	};
}

static inline struct mtd_lb_picker *t_picker(const char *policy,
                                             struct t_set *s,
                                             struct mtd_lb_config *cfg_out)
{
	struct mtd_lb_config cfg;
	struct mtd_lb_picker *p;

	mtd_lb_config_defaults(&cfg, mtd_lb_find(policy));
	ck_assert_msg(cfg.ops != NULL, "no strategy %s", policy);
	if (cfg_out != NULL) {
		cfg_out->ops = cfg.ops;
		cfg = *cfg_out;
	}
	p = mtd_lb_picker_new(&cfg, s->eps, s->n, NULL);
	ck_assert_ptr_nonnull(p);
	return p;
}

/* Pearson chi-square of observed counts against expected shares. */
static inline double t_chi2(const uint64_t *obs, const double *share, size_t k,
                            uint64_t total)
{
	double x = 0;

	for (size_t i = 0; i < k; i++) {
		double e = share[i] * (double)total;

		if (e > 0)
			x += ((double)obs[i] - e) * ((double)obs[i] - e) / e;
		else
			ck_assert_uint_eq(obs[i], 0);
	}
	return x;
}

/* Chi-square critical values at p = 0.001 for df = 1..10, then a
 * Wilson-Hilferty approximation. */
static inline double t_chi2_crit(size_t df)
{
	static const double tab[] = { 0, 10.83, 13.82, 16.27, 18.47, 20.52,
		                      22.46, 24.32, 26.12, 27.88, 29.59 };
	double z = 3.09, h;

	if (df <= 10)
		return tab[df];
	h = 2.0 / (9.0 * (double)df);
	return (double)df * pow(1 - h + z * sqrt(h), 3);
}

/* Pick `picks` times and count per endpoint; every pick must succeed. */
static inline void t_count(struct mtd_lb_picker *p, struct t_set *s,
                           uint64_t *counts, uint64_t picks)
{
	struct mtd_lb_pick_ctx ctx = t_ctx(s);

	memset(counts, 0, sizeof(counts[0]) * s->n);
	for (uint64_t k = 0; k < picks; k++) {
		int i = mtd_lb_pick(p, &ctx);

		ck_assert_int_ge(i, 0);
		ck_assert_int_lt(i, (int)s->n);
		counts[i]++;
	}
}

/* The distribution of `picks` picks must match shares (chi-square at
 * p = 0.001 over the endpoints with a positive share). */
static inline void t_assert_shares(struct mtd_lb_picker *p, struct t_set *s,
                                   const double *share, uint64_t picks)
{
	uint64_t counts[T_MAX_EPS];
	size_t df = 0;
	double x;

	t_count(p, s, counts, picks);
	for (size_t i = 0; i < s->n; i++)
		if (share[i] > 0)
			df++;
	x = t_chi2(counts, share, s->n, picks);
	ck_assert_msg(x < t_chi2_crit(df - 1),
	              "chi2 %.2f >= %.2f (df %zu)", x, t_chi2_crit(df - 1),
	              df - 1);
}

#define T_RUN(make_suite)                                                  \
	int main(void)                                                     \
	{                                                                  \
		SRunner *sr = srunner_create(make_suite());                \
		int failed;                                                \
		srunner_run_all(sr, CK_NORMAL);                            \
		failed = srunner_ntests_failed(sr);                        \
		srunner_free(sr);                                          \
		return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;          \
	}

#endif
