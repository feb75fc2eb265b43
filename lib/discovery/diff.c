/* Matching endpoint sets by identity (see discovery.h). */
#include <config.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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

static int by_id(const void *x, const void *y, void *arg)
{
	const struct mtd_disc_id *ids = arg;

	return mtd_disc_id_cmp(&ids[*(const size_t *)x], &ids[*(const size_t *)y]);
}

int mtd_disc_match(const struct mtd_disc_id *old, size_t n_old, const struct mtd_disc_endpoint *eps, size_t n,
                   size_t *old_of_new, struct mtd_disc_diff *diff, size_t *dup)
{
	struct mtd_disc_id *ids;
	size_t *o_ord, *n_ord, kept = 0;
	int rc = 0;

	ids = calloc(n ? n : 1, sizeof(*ids));
	o_ord = calloc(n_old ? n_old : 1, sizeof(*o_ord));
	n_ord = calloc(n ? n : 1, sizeof(*n_ord));
	if (ids == NULL || o_ord == NULL || n_ord == NULL) {
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
		n_ord[i] = i;
	}
	/* Duplicates in the new set: neighbours once sorted. */
	qsort_r(n_ord, n, sizeof(*n_ord), by_id, ids);
	for (size_t i = 1; i < n; i++) {
		if (mtd_disc_id_cmp(&ids[n_ord[i - 1]], &ids[n_ord[i]]) == 0) {
			if (dup != NULL)
				*dup = n_ord[i] > n_ord[i - 1] ? n_ord[i] : n_ord[i - 1];
			rc = -EINVAL;
			goto out;
		}
	}
	for (size_t i = 0; i < n_old; i++)
		o_ord[i] = i;
	qsort_r(o_ord, n_old, sizeof(*o_ord), by_id, (void *)old);
	/* Merge the two sorted orders. */
	for (size_t i = 0, j = 0; i < n; i++) {
		const struct mtd_disc_id *id = &ids[n_ord[i]];
		int c = 1;

		while (j < n_old && (c = mtd_disc_id_cmp(&old[o_ord[j]], id)) < 0)
			j++;
		if (j < n_old && c == 0) {
			old_of_new[n_ord[i]] = o_ord[j++];
			kept++;
		} else {
			old_of_new[n_ord[i]] = SIZE_MAX;
		}
	}
	if (diff != NULL)
		*diff = (struct mtd_disc_diff){.kept = kept, .added = n - kept, .removed = n_old - kept};
out:
	free(ids);
	free(o_ord);
	free(n_ord);
	return rc;
}
