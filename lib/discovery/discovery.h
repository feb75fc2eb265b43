/* Pure logic behind live endpoint sets: matching a new endpoint
 * set against the old one by identity, and the reclaim rule that decides
 * when an old snapshot may be freed. No I/O, no threads of its own; the
 * reference counts are safe to use from any thread.
 *
 * The reclaim rule (HACKING.md "Snapshots"):
 *  - shared objects (runtime snapshot, service snapshot, endpoint identity)
 *    carry an atomic reference count (struct mtd_ref): the control
 *    thread holds the current ones, a worker its current runtime, a pool
 *    its service snapshot and its endpoint; the object is freed when the
 *    count drops to zero;
 *  - calls do not touch a shared count: each worker keeps a hold (struct
 *    mtd_disc_hold) on the runtime it serves, counting its own calls routed
 *    with it, without atomics. When the worker moves to a newer runtime the
 *    hold is retired, and the worker's reference on the old runtime is
 *    dropped when the last of those calls ends. */
#ifndef MTD_DISCOVERY_H
#define MTD_DISCOVERY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/ref.h"

#include "discovery/discovery-t.h"

/* ---- identity and diff (diff.c) --------------------------------------- */

/* Identity of an endpoint: (key, address); key NULL sorts before any. */
struct mtd_disc_id {
	const char *key;     /* NULL = none */
	const char *address; /* never NULL */
};

/* Total order on identities (strcmp of key, then of address). */
int mtd_disc_id_cmp(const struct mtd_disc_id *a, const struct mtd_disc_id *b);

/* What a match of two endpoint sets found. */
struct mtd_disc_diff {
	size_t kept;    /* identities in both sets */
	size_t added;   /* only in the new set */
	size_t removed; /* only in the old set */
};

/* Match set eps[0..n) against old[0..n_old) by identity: old_of_new[i]
 * receives the index in old of eps[i]'s identity, or SIZE_MAX for a new
 * one; *diff (may be NULL) the counts. O(n + n_old) expected (a hash of
 * the identities, whatever their order); allocates scratch space. Returns 0, -EINVAL when two entries of eps share an
 * identity or one has a NULL address (*dup, if dup != NULL, receives the
 * index of the second of them), or -ENOMEM. old must not hold duplicates
 * (it was accepted by this function before). Any thread. */
int mtd_disc_match(const struct mtd_disc_id *old, size_t n_old, const struct mtd_disc_endpoint *eps, size_t n,
                   size_t *old_of_new, struct mtd_disc_diff *diff, size_t *dup);

/* ---- the reclaim rule (inline) ---------------------------------------- */

/* The reference count of shared snapshot objects: lib/core/ref.h. */

/* One worker's hold on one runtime snapshot: its calls routed with it. Not
 * atomic: only the owning worker touches it. */
struct mtd_disc_hold {
	uint64_t users; /* calls holding it */
	bool retired;   /* the worker moved to a newer snapshot */
};

static inline void mtd_disc_hold_take(struct mtd_disc_hold *h)
{
	h->users++;
}

/* A call let go; true when the hold is retired and now unused: the worker
 * drops its reference on the snapshot and frees the hold. */
static inline bool mtd_disc_hold_drop(struct mtd_disc_hold *h)
{
	return --h->users == 0 && h->retired;
}

/* The worker moved on; true when no call uses the hold (drop it now). */
static inline bool mtd_disc_hold_retire(struct mtd_disc_hold *h)
{
	h->retired = true;
	return h->users == 0;
}

#endif
