/* Bitmaps over endpoint indices (a call's tried / refused endpoints, the
 * exclusions a pick is given): bit i of words[i / 64]. */
#ifndef MTD_BITS_H
#define MTD_BITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

static inline bool mtd_bit_get(const uint64_t *bits, size_t i)
{
	return (bits[i / 64] >> (i % 64)) & 1;
}

static inline void mtd_bit_set(uint64_t *bits, size_t i)
{
	bits[i / 64] |= 1ull << (i % 64);
}

static inline void mtd_bit_clear(uint64_t *bits, size_t i)
{
	bits[i / 64] &= ~(1ull << (i % 64));
}

#endif
