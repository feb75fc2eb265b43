/* An atomic reference count, starting at one (the creator's), for what
 * threads share and the last user frees: runtime snapshots, service
 * snapshots, endpoint identities, retry budgets, circuit counts. What
 * frees the object is its owner's (the control thread, for snapshots:
 * lib/discovery/discovery.h states the reclaim rule). */
#ifndef MTD_REF_H
#define MTD_REF_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct mtd_ref {
	_Atomic uint32_t n;
};

static inline void mtd_ref_init(struct mtd_ref *r)
{
	atomic_init(&r->n, 1);
}

static inline void mtd_ref_get(struct mtd_ref *r)
{
	/* A new reference is always made from an existing one: relaxed. */
	atomic_fetch_add_explicit(&r->n, 1, memory_order_relaxed);
}

/* Drop one reference; true when it was the last: the caller frees the
 * object. acq_rel: every thread's use of the object happens before its
 * free (an acquire fence after a release decrement says the same, but
 * ThreadSanitizer does not model fences). */
static inline bool mtd_ref_put(struct mtd_ref *r)
{
	return atomic_fetch_sub_explicit(&r->n, 1, memory_order_acq_rel) == 1;
}

#endif
