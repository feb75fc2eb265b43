/* Backoff between attempts and the server's pushback (gRPC A6). */
#include "config.h"

#include <errno.h>

#include "fault/fault.h"

static uint64_t xorshift64(uint64_t *s)
{
	uint64_t x = *s ? *s : 0x9e3779b97f4a7c15ull;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*s = x;
	return x;
}

int64_t mtd_fault_backoff_ns(int64_t base_ms, int64_t max_ms, uint32_t n, uint64_t *rng)
{
	if (base_ms <= 0 || n == 0)
		return 0;
	if (max_ms < base_ms)
		max_ms = base_ms;
	/* gRPC A6: initial_backoff x multiplier^(n-1), capped at max_backoff,
	 * then a random point below it (multiplier 2; the shift stops before
	 * it could overflow: 2^40 ms is far past any cap). */
	int64_t cap_ms = base_ms;
	for (uint32_t i = 1; i < n && cap_ms < max_ms && i < 40; i++)
		cap_ms *= 2;
	if (cap_ms > max_ms)
		cap_ms = max_ms;
	uint64_t cap_ns = (uint64_t)cap_ms * 1000000u;
	return (int64_t)(xorshift64(rng) % cap_ns);
}

int mtd_fault_pushback_parse(const char *s, size_t len, int64_t *ms)
{
	/* gRPC A6: "If the value ... is not a valid non-negative integer, the
	 * client will not retry" (no sign, no spaces, no unit). */
	if (len == 0 || len > 18)
		return -EINVAL;
	int64_t v = 0;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		v = v * 10 + (s[i] - '0');
	}
	*ms = v;
	return 0;
}
