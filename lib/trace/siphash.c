/* SipHash-2-4: see siphash.h. Written from the paper's description. */
#include "config.h"

#include "trace/siphash.h"

#include <endian.h>
#include <string.h>

static uint64_t rotl(uint64_t x, unsigned b)
{
	return x << b | x >> (64 - b);
}

/* 8 bytes, little-endian: one load on a little-endian machine. */
static uint64_t le64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return le64toh(v);
}

/* The last n < 8 bytes, little-endian. */
static uint64_t le_tail(const uint8_t *p, size_t n)
{
	uint64_t v = 0;
	while (n-- > 0)
		v = v << 8 | p[n];
	return v;
}

struct sip {
	uint64_t v0, v1, v2, v3;
};

/* SipRound: two add-rotate-xor halves, the state's halves exchanged by
 * the 32-bit rotations. Inlined, the state stays in registers (called,
 * it went through memory: twice the time). */
static inline __attribute__((always_inline)) void sipround(struct sip *s)
{
	s->v0 += s->v1;
	s->v2 += s->v3;
	s->v1 = rotl(s->v1, 13);
	s->v3 = rotl(s->v3, 16);
	s->v1 ^= s->v0;
	s->v3 ^= s->v2;
	s->v0 = rotl(s->v0, 32);
	s->v2 += s->v1;
	s->v0 += s->v3;
	s->v1 = rotl(s->v1, 17);
	s->v3 = rotl(s->v3, 21);
	s->v1 ^= s->v2;
	s->v3 ^= s->v0;
	s->v2 = rotl(s->v2, 32);
}

/* One 8-byte word in: c = 2 rounds between the xors. */
static inline __attribute__((always_inline)) void compress(struct sip *s, uint64_t m)
{
	s->v3 ^= m;
	sipround(s);
	sipround(s);
	s->v0 ^= m;
}

uint64_t mtd_siphash24(const uint8_t key[MTD_SIPHASH_KEY_LEN], const void *msg, size_t len)
{
	const uint8_t *p = msg;
	uint64_t k0 = le64(key), k1 = le64(key + 8);
	/* "somepseudorandomlygeneratedbytes", 8 bytes a word, big-endian. */
	struct sip s;
	s.v0 = k0 ^ 0x736f6d6570736575ull; /* "somepseu" */
	s.v1 = k1 ^ 0x646f72616e646f6dull; /* "dorandom" */
	s.v2 = k0 ^ 0x6c7967656e657261ull; /* "lygenera" */
	s.v3 = k1 ^ 0x7465646279746573ull; /* "tedbytes" */
	size_t full = len - len % 8;
	for (size_t i = 0; i < full; i += 8)
		compress(&s, le64(p + i));
	/* The last block: the 0..7 bytes left, and the length (mod 256) in
	 * its top byte. */
	uint64_t last = (uint64_t)(len & 0xff) << 56;
	if (len % 8)
		last |= le_tail(p + full, len % 8);
	compress(&s, last);
	/* d = 4 finalization rounds. */
	s.v2 ^= 0xff;
	for (int i = 0; i < 4; i++)
		sipround(&s);
	return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}
