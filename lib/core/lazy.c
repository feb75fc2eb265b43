/* Blocks installed at their first use (lazy.h). */
#include "config.h"

#include "core/lazy.h"

__attribute__((noinline, cold)) void *mtd_lazy__install(void *_Atomic *slot, size_t size)
{
	void *mine = calloc(1, size), *cur = NULL;

	if (mine == NULL)
		return atomic_load_explicit(slot, memory_order_acquire);
	/* Release: the zeroes are visible to whoever loads the pointer;
	 * acquire on failure: so are the winner's. */
	if (atomic_compare_exchange_strong_explicit(slot, &cur, mine, memory_order_acq_rel, memory_order_acquire))
		return mine;
	free(mine);
	return cur;
}
