/* SipHash-2-4 with a 64-bit output (Aumasson and Bernstein, "SipHash: a
 * fast short-input PRF", 2012): a keyed pseudo-random function. Under a
 * key drawn at random and kept secret, its outputs are unpredictable:
 * seeing any number of them (and their inputs) tells nothing of the key,
 * nor of the output of an input not yet hashed; under one key the same
 * input always gives the same output. It is not a permutation: two
 * distinct inputs meet by chance only, one time in 2^64.
 *
 * What trace ids are made of (sidecar/call/trace.c): what identifies the
 * call, under the process's key, so that an id carries no clock, no seed,
 * nothing a downstream service or a trace backend could read back.
 *
 * Pure, no allocation; any thread. */
#ifndef MTD_TRACE_SIPHASH_H
#define MTD_TRACE_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

#define MTD_SIPHASH_KEY_LEN 16

/* SipHash-2-4 of the len bytes at msg (len 0: msg may be NULL) under key
 * (k0, k1: its two halves, each read little-endian, as the paper reads
 * them). The result as a number; the paper's and OpenSSL's 8 output
 * bytes are its little-endian bytes. */
uint64_t mtd_siphash24(const uint8_t key[MTD_SIPHASH_KEY_LEN], const void *msg, size_t len);

#endif
