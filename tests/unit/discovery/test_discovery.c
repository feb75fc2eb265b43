/* lib/discovery: matching endpoint sets by identity, and the reclaim rule. */
#include <config.h>

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "discovery/discovery.h"

static struct mtd_disc_endpoint ep(const char *key, const char *addr)
{
	return (struct mtd_disc_endpoint){.key = key, .address = addr, .weight = 100};
}

START_TEST(match_basic)
{
	const struct mtd_disc_id old[] = {{NULL, "10.0.0.1:80"}, {NULL, "10.0.0.2:80"}, {NULL, "10.0.0.3:80"}};
	const struct mtd_disc_endpoint eps[] = {ep(NULL, "10.0.0.3:80"), ep(NULL, "10.0.0.4:80"),
	                                        ep(NULL, "10.0.0.1:80")};
	size_t map[3];
	struct mtd_disc_diff d;

	ck_assert_int_eq(mtd_disc_match(old, 3, eps, 3, map, &d, NULL), 0);
	ck_assert_uint_eq(map[0], 2);
	ck_assert_uint_eq(map[1], SIZE_MAX);
	ck_assert_uint_eq(map[2], 0);
	ck_assert_uint_eq(d.kept, 2);
	ck_assert_uint_eq(d.added, 1);
	ck_assert_uint_eq(d.removed, 1);
	/* Empty sets on either side. */
	ck_assert_int_eq(mtd_disc_match(NULL, 0, eps, 3, map, &d, NULL), 0);
	ck_assert_uint_eq(d.added, 3);
	ck_assert_uint_eq(map[1], SIZE_MAX);
	ck_assert_int_eq(mtd_disc_match(old, 3, NULL, 0, map, &d, NULL), 0);
	ck_assert_uint_eq(d.removed, 3);
	ck_assert_uint_eq(d.kept, 0);
}
END_TEST

/* The registry key is part of the identity: the same address under two
 * keys is two endpoints, and a key whose address changed is a new one. */
START_TEST(match_key_is_identity)
{
	const struct mtd_disc_id old[] = {{"/p/a", "10.0.0.1:80"}, {"/p/b", "10.0.0.1:80"}, {NULL, "10.0.0.1:80"}};
	const struct mtd_disc_endpoint eps[] = {ep("/p/b", "10.0.0.1:80"), ep("/p/a", "10.0.0.2:80"),
	                                        ep(NULL, "10.0.0.1:80")};
	size_t map[3];
	struct mtd_disc_diff d;

	ck_assert_int_eq(mtd_disc_match(old, 3, eps, 3, map, &d, NULL), 0);
	ck_assert_uint_eq(map[0], 1);
	ck_assert_uint_eq(map[1], SIZE_MAX);
	ck_assert_uint_eq(map[2], 2);
	ck_assert_uint_eq(d.kept, 2);
	ck_assert_uint_eq(d.removed, 1);
}
END_TEST

START_TEST(match_refuses_duplicates)
{
	const struct mtd_disc_endpoint eps[] = {ep(NULL, "10.0.0.1:80"), ep("/k", "10.0.0.1:80"),
	                                        ep(NULL, "10.0.0.2:80"), ep(NULL, "10.0.0.1:80")};
	const struct mtd_disc_endpoint nul[] = {ep(NULL, "10.0.0.1:80"), ep("/k", NULL)};
	size_t map[4], dup = 0;

	ck_assert_int_eq(mtd_disc_match(NULL, 0, eps, 4, map, NULL, &dup), -EINVAL);
	ck_assert_uint_eq(dup, 3);
	ck_assert_int_eq(mtd_disc_match(NULL, 0, eps, 3, map, NULL, &dup), 0);
	ck_assert_int_eq(mtd_disc_match(NULL, 0, nul, 2, map, NULL, &dup), -EINVAL);
	ck_assert_uint_eq(dup, 1);
}
END_TEST

/* Property: against a brute-force match, over random sets drawn from a
 * small universe (so that many identities are shared). */
START_TEST(match_random_sets)
{
	enum { U = 40 };
	static char addr[U][24], key[U][8];
	uint64_t rng = 42;

	for (int i = 0; i < U; i++) {
		snprintf(addr[i], sizeof(addr[i]), "10.0.0.%d:%d", i % 7, 80 + i % 3);
		snprintf(key[i], sizeof(key[i]), "/k%d", i % 5);
	}
	for (int round = 0; round < 500; round++) {
		struct mtd_disc_id old[U];
		struct mtd_disc_endpoint eps[U];
		size_t n_old = 0, n = 0, map[U];
		bool used_old[U] = {false}, used_new[U] = {false};
		struct mtd_disc_diff d;

		for (int i = 0; i < U; i++) {
			rng = rng * 6364136223846793005ull + 1442695040888963407ull;
			/* universe entry i: identity (key or none, addr) */
			const char *k = (i % 3 == 0) ? NULL : key[i];
			struct mtd_disc_id id = {k, addr[i]};
			bool dupe = false;

			for (size_t j = 0; j < n_old; j++)
				dupe |= mtd_disc_id_cmp(&old[j], &id) == 0;
			for (size_t j = 0; j < n; j++)
				dupe |= mtd_disc_id_cmp(&(struct mtd_disc_id){eps[j].key, eps[j].address}, &id) == 0;
			if (dupe)
				continue;
			if ((rng >> 33) & 1)
				old[n_old++] = id;
			if ((rng >> 34) & 1)
				eps[n++] = ep(k, addr[i]);
		}
		ck_assert_int_eq(mtd_disc_match(old, n_old, eps, n, map, &d, NULL), 0);
		size_t kept = 0;
		for (size_t i = 0; i < n; i++) {
			size_t want = SIZE_MAX;
			struct mtd_disc_id id = {eps[i].key, eps[i].address};

			for (size_t j = 0; j < n_old; j++)
				if (mtd_disc_id_cmp(&old[j], &id) == 0)
					want = j;
			ck_assert_uint_eq(map[i], want);
			if (want != SIZE_MAX) {
				ck_assert(!used_old[want]);
				used_old[want] = used_new[i] = true;
				kept++;
			}
		}
		ck_assert_uint_eq(d.kept, kept);
		ck_assert_uint_eq(d.added, n - kept);
		ck_assert_uint_eq(d.removed, n_old - kept);
	}
}
END_TEST

/* ---- the reclaim rule ---------------------------------------------------- */

/* A snapshot is reclaimable exactly when its hold is retired and the last
 * call using it has ended, whichever comes last. */
START_TEST(hold_rule)
{
	struct mtd_disc_hold h = {0};

	mtd_disc_hold_take(&h);
	mtd_disc_hold_take(&h);
	ck_assert(!mtd_disc_hold_drop(&h)); /* current: never reclaimed */
	ck_assert(!mtd_disc_hold_retire(&h));
	ck_assert(mtd_disc_hold_drop(&h)); /* the last call of a retired hold */

	struct mtd_disc_hold idle = {0};
	ck_assert(mtd_disc_hold_retire(&idle)); /* nobody used it */

	struct mtd_disc_hold cur = {0};
	mtd_disc_hold_take(&cur);
	ck_assert(!mtd_disc_hold_drop(&cur));
	mtd_disc_hold_take(&cur);
	ck_assert(!mtd_disc_hold_retire(&cur));
	ck_assert(mtd_disc_hold_drop(&cur));
}
END_TEST

struct shared {
	struct mtd_ref ref;
	int payload; /* written before each put, read by the freeing thread */
	_Atomic int lasts;
};

static void *hammer(void *arg)
{
	struct shared *s = arg;

	for (int i = 0; i < 100000; i++) {
		mtd_ref_get(&s->ref);
		if (mtd_ref_put(&s->ref))
			atomic_fetch_add(&s->lasts, 1);
	}
	if (mtd_ref_put(&s->ref)) /* each thread's own reference */
		atomic_fetch_add(&s->lasts, 1);
	return NULL;
}

/* Exactly one put is the last, whatever the interleaving (TSan build:
 * no data race reported on the free side either). */
START_TEST(ref_last_put_once)
{
	enum { T = 4 };
	pthread_t th[T];
	struct shared s;

	mtd_ref_init(&s.ref);
	atomic_init(&s.lasts, 0);
	for (int i = 1; i < T; i++)
		mtd_ref_get(&s.ref); /* one per thread, the creator's is thread 0's */
	for (int i = 0; i < T; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, hammer, &s), 0);
	for (int i = 0; i < T; i++)
		pthread_join(th[i], NULL);
	ck_assert_int_eq(atomic_load(&s.lasts), 1);
	ck_assert_uint_eq(atomic_load(&s.ref.n), 0);
}
END_TEST

static Suite *discovery_suite(void)
{
	Suite *s = suite_create("discovery");
	TCase *diff = tcase_create("diff");
	TCase *reclaim = tcase_create("reclaim");

	tcase_add_test(diff, match_basic);
	tcase_add_test(diff, match_key_is_identity);
	tcase_add_test(diff, match_refuses_duplicates);
	tcase_add_test(diff, match_random_sets);
	suite_add_tcase(s, diff);
	tcase_add_test(reclaim, hold_rule);
	tcase_add_test(reclaim, ref_last_put_once);
	suite_add_tcase(s, reclaim);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(discovery_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
