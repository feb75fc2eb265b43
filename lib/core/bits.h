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

/* The same on a bitmap of n bits, for an index that comes from elsewhere
 * (an attempt's endpoint index, which another snapshot's set may not
 * have): outside [0, n) nothing is read or written; get says false, set
 * says false (not set). */
static inline bool mtd_bit_get_in(const uint64_t *bits, size_t n, size_t i)
{
	return i < n && mtd_bit_get(bits, i);
}

static inline bool mtd_bit_set_in(uint64_t *bits, size_t n, size_t i)
{
	if (i >= n)
		return false;
	mtd_bit_set(bits, i);
	return true;
}

#endif
