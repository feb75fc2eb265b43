/* Hashes for keys, rings and tables.
 *
 * mtd_lb_hash64: a 64-bit multiply-rotate hash, 8 bytes per step, with a
 * full-avalanche finalizer (the murmur3 fmix64 constants). Not
 * cryptographic: keys come from clients, and an attacker who can choose
 * keys can already choose where a hashed call lands, which is the point of
 * hashing. Used for request keys (CONSISTENT_HASH, MAGLEV) and for Maglev's
 * per-endpoint offset/skip.
 *
 * mtd_lb_ketama_points: ketama's points for one endpoint (as Dubbo's
 * ConsistentHashLoadBalance): MD5 of "<id>-<replica>" yields four 32-bit
 * little-endian points per digest. The id is the endpoint's stable identity,
 * so the ring survives restarts and reorderings unchanged.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>

#include "lb/lb.h"
#include "lb/lb-impl.h"

#define K1 0x9e3779b97f4a7c15ULL
#define K2 0xc2b2ae3d27d4eb4fULL
#define K3 0x165667b19e3779f9ULL

static inline uint64_t rotl64(uint64_t x, unsigned r)
{
	return (x << r) | (x >> (64 - r));
}

static inline uint64_t load_le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static inline uint64_t fmix64(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

static inline uint64_t block(uint64_t v)
{
	v *= K2;
	v = rotl64(v, 31);
	return v * K1;
}

uint64_t mtd_lb_hash64(const void *data, size_t len, uint64_t seed)
{
	const uint8_t *p = data;
	uint64_t h = seed ^ ((uint64_t)len * K3);
	size_t left = len;

	while (left >= 8) {
		h ^= block(load_le64(p));
		h = rotl64(h, 27) * 5 + 0x52dce729;
		p += 8;
		left -= 8;
	}
	if (left > 0) {
		uint64_t v = 0;

		for (size_t i = left; i > 0; i--)
			v = v << 8 | p[i - 1];
		h ^= block(v);
	}
	return fmix64(h ^ (uint64_t)len);
}

/* MD5 fetched once for the process: EVP_md5() at each digest init makes
 * OpenSSL 3 look the implementation up again under its store's locks, a
 * third of a ring's MD5 time (a ring of 10,000 endpoints hashes 400,000
 * ids). Never freed: one object for the life of the process. */
static EVP_MD *md5_impl;
static pthread_once_t md5_once = PTHREAD_ONCE_INIT;

static void md5_fetch(void)
{
	md5_impl = EVP_MD_fetch(NULL, "MD5", NULL);
}

int mtd_lb_ketama_points(const char *id, uint32_t replicas, uint32_t *out)
{
	EVP_MD_CTX *md;
	unsigned char digest[EVP_MAX_MD_SIZE];
	char buf[512];
	int rc = -ENOMEM;

	pthread_once(&md5_once, md5_fetch);
	if (md5_impl == NULL)
		return -EIO;
	md = EVP_MD_CTX_new();
	if (md == NULL)
		goto fail;
	for (uint32_t r = 0; r < replicas; r++) {
		unsigned int dlen = 0;
		int len = snprintf(buf, sizeof(buf), "%s-%u", id, r);

		if (len < 0 || (size_t)len >= sizeof(buf)) {
			rc = -EINVAL;
			goto free_md;
		}
		if (EVP_DigestInit_ex(md, md5_impl, NULL) != 1 || EVP_DigestUpdate(md, buf, (size_t)len) != 1 ||
		    EVP_DigestFinal_ex(md, digest, &dlen) != 1 || dlen < 16) {
			rc = -EIO;
			goto free_md;
		}
		for (int k = 0; k < 4; k++)
			out[r * 4 + (uint32_t)k] = (uint32_t)digest[k * 4 + 3] << 24 |
			                           (uint32_t)digest[k * 4 + 2] << 16 |
			                           (uint32_t)digest[k * 4 + 1] << 8 | (uint32_t)digest[k * 4];
	}
	rc = 0;
free_md:
	EVP_MD_CTX_free(md);
fail:
	return rc;
}

int32_t mtd_lb_java_string_hash(const char *s, size_t len)
{
	/* Java String.hashCode for ASCII: s[0]*31^(n-1) + ... + s[n-1],
	 * in wrapping 32-bit arithmetic (the textbook Java ring's hash). */
	uint32_t h = 0;

	for (size_t i = 0; i < len; i++)
		h = h * 31u + (uint8_t)s[i];
	return (int32_t)h;
}
