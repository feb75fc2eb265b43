/* A block several threads share that costs nothing until its first use:
 * a `T *_Atomic` slot, NULL until the first thread that writes the block
 * installs a zeroed one. An endpoint's live figures are the use: a mesh
 * sidecar knows thousands of endpoints and calls few.
 *
 * The rule, for every slot:
 * - writers take mtd_lazy_get(): the block, installed by a
 *   compare-and-swap if none is yet (a thread that loses the race frees
 *   its own copy and uses the winner's; both see the same block);
 * - readers take mtd_lazy_peek(): NULL reads as "all zero" (nothing was
 *   ever written);
 * - the owner frees the block with what holds the slot, once no thread
 *   can reach it (mtd_lazy_free).
 * Memory order: the install is a release (the zeroes are written before
 * the pointer is seen) and every load an acquire, so a reader never sees
 * the pointer before the block's zeroes; the fields themselves are
 * atomics the owner's module orders as it needs. */
#ifndef MTD_LAZY_H
#define MTD_LAZY_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>

/* The slot's block, or a zeroed one of size bytes installed there, or
 * the one another thread installed first. NULL only when out of memory
 * (the caller skips what it would have written). Any thread.
 * slot: a `T *_Atomic` field seen as `void *_Atomic` (every object
 * pointer has one representation on the platforms we build for). */
void *mtd_lazy__install(void *_Atomic *slot, size_t size);

#define mtd_lazy_peek(slot) atomic_load_explicit((slot), memory_order_acquire)

#define mtd_lazy_get(slot) mtd_lazy_get_size(slot, sizeof(*mtd_lazy_peek(slot)))

/* The same for a block of size bytes (a struct and its flexible array
 * member; size the same for every caller of one slot). */
#define mtd_lazy_get_size(slot, size)                                                 \
	__extension__({                                                               \
		__typeof__(mtd_lazy_peek(slot)) lazy_p_ = mtd_lazy_peek(slot);        \
		if (__builtin_expect(lazy_p_ == NULL, 0))                             \
			lazy_p_ = mtd_lazy__install((void *_Atomic *)(slot), (size)); \
		lazy_p_;                                                              \
	})

/* Free the slot's block (if any) and leave NULL: its owner, once no
 * other thread can reach the slot. */
#define mtd_lazy_free(slot) free(atomic_exchange_explicit((slot), NULL, memory_order_acquire))

#endif
