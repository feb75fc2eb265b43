/* The latency estimator behind FORKING's hedge_delay: AUTO:
 * a small fixed-size histogram per (method, worker), log-linear buckets
 * (eight per power of two, HdrHistogram's layout), so a quantile is found
 * within one bucket's width (12.5 %) and linear interpolation inside the
 * bucket narrows it further. It forgets: when MTD_FAULT_LAT_WINDOW samples
 * are counted every bucket is halved, so old traffic weighs half as much
 * with each window and the estimate follows a method whose latency moves.
 * No allocation, no clock, no lock: one writer (the worker that owns it). */
#include "config.h"

#include "fault/fault.h"

/* Bucket of v >= 1 us: values below 8 have a bucket each; above, the
 * power of two (msb) and the next three bits pick one of eight. */
static unsigned bucket_of(uint64_t v)
{
	if (v < MTD_FAULT_LAT_SUB)
		return (unsigned)v;
	unsigned msb = 63u - (unsigned)__builtin_clzll(v);
	unsigned idx = (msb - 2u) * MTD_FAULT_LAT_SUB + (unsigned)((v >> (msb - 3u)) & (MTD_FAULT_LAT_SUB - 1u));
	return idx < MTD_FAULT_LAT_BUCKETS ? idx : MTD_FAULT_LAT_BUCKETS - 1u;
}

/* [lo, hi) of bucket i in us. */
static void bucket_bounds(unsigned i, uint64_t *lo, uint64_t *hi)
{
	if (i < MTD_FAULT_LAT_SUB) {
		*lo = i;
		*hi = i + 1u;
		return;
	}
	unsigned msb = i / MTD_FAULT_LAT_SUB + 2u, sub = i % MTD_FAULT_LAT_SUB;
	*lo = (uint64_t)(MTD_FAULT_LAT_SUB + sub) << (msb - 3u);
	*hi = *lo + (1ull << (msb - 3u));
}

void mtd_fault_lat_add(struct mtd_fault_lat *h, int64_t us)
{
	uint64_t v = us < 1 ? 1u : (uint64_t)us;
	h->count[bucket_of(v)]++;
	h->total++;
	h->seen++;
	if (h->total >= MTD_FAULT_LAT_WINDOW) {
		/* Forget half: the window slides by halving (an exponential
		 * decay over windows, never a per-sample cost). */
		uint32_t t = 0;
		for (unsigned i = 0; i < MTD_FAULT_LAT_BUCKETS; i++) {
			h->count[i] /= 2u;
			t += h->count[i];
		}
		h->total = t;
	}
}

int64_t mtd_fault_lat_quantile_us(const struct mtd_fault_lat *h, double q)
{
	if (h->total == 0)
		return -1;
	if (q < 0)
		q = 0;
	if (q > 1)
		q = 1;
	/* The rank'th smallest sample, rank in [1, total]. */
	double rank = q * (double)h->total;
	if (rank < 1)
		rank = 1;
	uint32_t cum = 0;
	for (unsigned i = 0; i < MTD_FAULT_LAT_BUCKETS; i++) {
		uint32_t c = h->count[i];
		if (c == 0)
			continue;
		if ((double)(cum + c) >= rank) {
			uint64_t lo, hi;
			bucket_bounds(i, &lo, &hi);
			/* Samples spread evenly over the bucket: the rank's place. */
			double frac = (rank - (double)cum) / (double)c;
			return (int64_t)((double)lo + frac * (double)(hi - lo));
		}
		cum += c;
	}
	uint64_t lo, hi;
	bucket_bounds(MTD_FAULT_LAT_BUCKETS - 1u, &lo, &hi);
	return (int64_t)hi;
}

int64_t mtd_fault_hedge_auto_ms(const struct mtd_fault_lat *h)
{
	if (h->seen < MTD_FAULT_LAT_MIN_SAMPLES)
		return MTD_FAULT_HEDGE_AUTO_INITIAL_MS;
	int64_t us = mtd_fault_lat_quantile_us(h, MTD_FAULT_HEDGE_AUTO_QUANTILE);
	int64_t ms = (us + 999) / 1000; /* round up: never hedge before the p95 */
	if (ms < MTD_FAULT_HEDGE_AUTO_FLOOR_MS)
		ms = MTD_FAULT_HEDGE_AUTO_FLOOR_MS;
	if (ms > MTD_FAULT_HEDGE_AUTO_MAX_MS)
		ms = MTD_FAULT_HEDGE_AUTO_MAX_MS;
	return ms;
}
