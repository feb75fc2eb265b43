/* Matching endpoint sets by identity (see discovery.h). */
#include <config.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "discovery/discovery.h"

int mtd_disc_id_cmp(const struct mtd_disc_id *a, const struct mtd_disc_id *b)
{
	int c;

	if (a->key == NULL || b->key == NULL)
		c = (a->key != NULL) - (b->key != NULL);
	else
		c = strcmp(a->key, b->key);
	return c != 0 ? c : strcmp(a->address, b->address);
}

/* FNV-1a (core/hash.h) over the key (a marker for none) and the address:
 * equal identities hash alike; a collision only costs a comparison. The
 * identities come from the service's own source (its config, registry or
 * control plane), which could collide them at will only to slow its own
 * updates. */
static uint32_t id_hash(const char *key, const char *address)
{
	uint64_t h = MTD_FNV1A_START;
	uint8_t mark = key != NULL ? 1 : 2;

	if (key != NULL)
		h = mtd_fnv1a_str(h, key);
	h = mtd_fnv1a(h, &mark, 1);
	h = mtd_fnv1a_str(h, address);
	return (uint32_t)(h ^ (h >> 32));
}

/* An open-addressing table of indices into an array of identities:
 * slot.at is the index + 1 (0 = empty), slot.hash its id_hash. */
struct slot {
	uint32_t at, hash;
};

static size_t table_size(size_t n)
{
	size_t cap = 16;

	while (cap < 2 * n)
		cap *= 2;
	return cap;
}

/* The slot of the identity `id` (hash h) in t (cap slots, over ids[]):
 * the one holding it, or the empty one where it would go. */
static struct slot *table_find(struct slot *t, size_t cap, const struct mtd_disc_id *ids, const struct mtd_disc_id *id,
                               uint32_t h)
{
	for (size_t i = h & (cap - 1);; i = (i + 1) & (cap - 1))
		if (t[i].at == 0 || (t[i].hash == h && mtd_disc_id_cmp(&ids[t[i].at - 1], id) == 0))
			return &t[i];
}

int mtd_disc_match(const struct mtd_disc_id *old, size_t n_old, const struct mtd_disc_endpoint *eps, size_t n,
                   size_t *old_of_new, struct mtd_disc_diff *diff, size_t *dup)
{
	struct mtd_disc_id *ids = NULL;
	struct slot *t_new = NULL, *t_old = NULL;
	uint32_t *hash = NULL;
	size_t kept = 0, cap_new = table_size(n), cap_old = table_size(n_old);
	int rc = 0;

	if (n >= UINT32_MAX / 4 || n_old >= UINT32_MAX / 4)
		return -ENOMEM;
	ids = calloc(n ? n : 1, sizeof(*ids));
	hash = calloc(n ? n : 1, sizeof(*hash));
	t_new = calloc(cap_new, sizeof(*t_new));
	t_old = calloc(cap_old, sizeof(*t_old));
	if (ids == NULL || hash == NULL || t_new == NULL || t_old == NULL) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		if (eps[i].address == NULL) {
			if (dup != NULL)
				*dup = i;
			rc = -EINVAL;
			goto out;
		}
		ids[i] = (struct mtd_disc_id){eps[i].key, eps[i].address};
	}
	/* Duplicates in the new set: the second of a pair finds the first. */
	for (size_t i = 0; i < n; i++) {
		hash[i] = id_hash(ids[i].key, ids[i].address);
		struct slot *sl = table_find(t_new, cap_new, ids, &ids[i], hash[i]);
		if (sl->at != 0) {
			if (dup != NULL)
				*dup = i;
			rc = -EINVAL;
			goto out;
		}
		*sl = (struct slot){(uint32_t)i + 1, hash[i]};
	}
	for (size_t j = 0; j < n_old; j++) {
		uint32_t h = id_hash(old[j].key, old[j].address);
		struct slot *sl = table_find(t_old, cap_old, old, &old[j], h);
		if (sl->at == 0) /* old holds no duplicates (the contract); the first counts */
			*sl = (struct slot){(uint32_t)j + 1, h};
	}
	for (size_t i = 0; i < n; i++) {
		const struct slot *sl = table_find(t_old, cap_old, old, &ids[i], hash[i]);
		old_of_new[i] = sl->at != 0 ? sl->at - 1 : SIZE_MAX;
		kept += sl->at != 0;
	}
	if (diff != NULL)
		*diff = (struct mtd_disc_diff){.kept = kept, .added = n - kept, .removed = n_old - kept};
out:
	free(ids);
	free(hash);
	free(t_new);
	free(t_old);
	return rc;
}
