/* FNV-1a, 64-bit: the hash of the small tables keyed by names (route's
 * service table, outlier state matched across snapshots, the metrics'
 * method table and history's series). Not for keys an attacker picks to
 * collide in a table without a bound: each user bounds its table. */
#ifndef MTD_CORE_HASH_H
#define MTD_CORE_HASH_H

#include <stddef.h>
#include <stdint.h>

#define MTD_FNV1A_START 0xcbf29ce484222325ull /* the offset basis */
#define MTD_FNV1A_PRIME 0x100000001b3ull

/* h continued over the n bytes at p (start from MTD_FNV1A_START). */
static inline uint64_t mtd_fnv1a(uint64_t h, const void *p, size_t n)
{
	const unsigned char *u = p;
	for (size_t i = 0; i < n; i++)
		h = (h ^ u[i]) * MTD_FNV1A_PRIME;
	return h;
}

/* h continued over the string s. */
static inline uint64_t mtd_fnv1a_str(uint64_t h, const char *s)
{
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * MTD_FNV1A_PRIME;
	return h;
}

#endif
