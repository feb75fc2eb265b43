/* The token bucket of rate_limit (limit.h): one atomic time, GCRA form. */
#include "config.h"

#include "limit/limit.h"

void mtd_limit_bucket_init(struct mtd_limit_bucket *b, uint32_t per_second, uint32_t burst, int64_t now_ns)
{
	if (per_second == 0)
		per_second = 1;
	if (per_second > MTD_LIMIT_MAX_RATE)
		per_second = MTD_LIMIT_MAX_RATE;
	if (burst == 0)
		burst = 1;
	if (burst > MTD_LIMIT_MAX_BURST)
		burst = MTD_LIMIT_MAX_BURST;
	b->rate = per_second;
	b->burst = burst;
	/* Rounded down: at most one token per 1e9 / rate ns, a rate a few
	 * parts in a billion above the one configured (rate 7: 142857142 ns). */
	b->interval_ns = 1000000000 / (int64_t)per_second;
	b->span_ns = b->interval_ns * (int64_t)burst;  /* <= 1e15: no overflow */
	atomic_init(&b->zero_ns, now_ns - b->span_ns); /* full */
}

void mtd_limit_bucket_init_from(struct mtd_limit_bucket *b, uint32_t per_second, uint32_t burst,
                                const struct mtd_limit_bucket *was, int64_t now_ns)
{
	mtd_limit_bucket_init(b, per_second, burst, now_ns);
	uint32_t left = mtd_limit_tokens(was, now_ns);
	if (left > b->burst)
		left = b->burst;
	atomic_store_explicit(&b->zero_ns, now_ns - (int64_t)left * b->interval_ns, memory_order_relaxed);
}

bool mtd_limit_take(struct mtd_limit_bucket *b, int64_t now_ns)
{
	int64_t z = atomic_load_explicit(&b->zero_ns, memory_order_relaxed);

	for (;;) {
		int64_t from = z, full = now_ns - b->span_ns;

		if (z > now_ns)
			return false; /* before the last take: none (see limit.h) */
		if (from < full)
			from = full; /* idle (or the clock jumped ahead): full, not fuller */
		if (now_ns - from < b->interval_ns)
			return false; /* less than a token: refused, nothing written */
		if (atomic_compare_exchange_weak_explicit(&b->zero_ns, &z, from + b->interval_ns, memory_order_relaxed,
		                                          memory_order_relaxed))
			return true;
		/* Another thread took one meanwhile: z is its new value. */
	}
}

uint32_t mtd_limit_tokens(const struct mtd_limit_bucket *b, int64_t now_ns)
{
	int64_t z = atomic_load_explicit(&b->zero_ns, memory_order_relaxed);
	int64_t t;

	if (z >= now_ns)
		return 0;
	t = (now_ns - z) / b->interval_ns;
	return t > (int64_t)b->burst ? b->burst : (uint32_t)t;
}
