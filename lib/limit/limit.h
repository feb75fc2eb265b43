/* Rate limits (rate_limit): a token bucket shared by every worker
 * of the sidecar without a lock. Pure, no I/O; the caller passes the
 * monotonic clock. Any thread.
 *
 * Which of the two shapes the issue allows, and why (bench/lb README,
 * "rate limit"): one atomic bucket. Per-worker shares that rebalance cost
 * a relaxed load and store per check instead of a compare-and-swap, but
 * while shares are out of balance a worker refuses calls the sidecar as a
 * whole has room for, and a share rebalanced late lets a burst through
 * twice; one bucket is exact, and its compare-and-swap with two workers
 * contending costs what bench/lb measures (within the 30 ns).
 *
 * The bucket is kept in its GCRA form (ITU-T I.371's virtual scheduling):
 * one 64-bit time, `zero_ns`, the moment the bucket was (or will be)
 * empty, so tokens(now) = min(burst, (now - zero_ns) / interval). Taking a
 * token moves zero_ns one interval later; an idle bucket is full, never
 * fuller (zero_ns is read as at least now - burst * interval). One CAS per
 * call taken, none for a call refused. */
#ifndef MTD_LIMIT_H
#define MTD_LIMIT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Bounds the config layer enforces (rate_limit.calls_per_second, burst). */
#define MTD_LIMIT_MAX_RATE  1000000u /* 1 token per microsecond */
#define MTD_LIMIT_MAX_BURST 1000000u

struct mtd_limit_bucket {
	_Atomic int64_t zero_ns; /* when the bucket was (will be) empty */
	/* Immutable after init. */
	int64_t interval_ns; /* one token per interval: 1e9 / rate */
	int64_t span_ns;     /* a full bucket: burst * interval */
	uint32_t rate, burst;
};

/* A full bucket of `burst` tokens refilled at `per_second` tokens a
 * second, at now_ns (monotonic). per_second in 1..MTD_LIMIT_MAX_RATE,
 * burst in 1..MTD_LIMIT_MAX_BURST; values outside are clamped. Not
 * thread-safe (before the bucket is shared). */
void mtd_limit_bucket_init(struct mtd_limit_bucket *b, uint32_t per_second, uint32_t burst, int64_t now_ns);

/* A bucket of the new figures (as mtd_limit_bucket_init) that holds what
 * `was` holds at now_ns, whole tokens, at most the new burst: a reload
 * that changes a bucket's figures neither mints a burst nor forgives the
 * tokens spent. was is only read (other threads may still take from it;
 * a token taken there after this read is not seen here). Not
 * thread-safe for b. */
void mtd_limit_bucket_init_from(struct mtd_limit_bucket *b, uint32_t per_second, uint32_t burst,
                                const struct mtd_limit_bucket *was, int64_t now_ns);

/* Take one token at now_ns: true, or false when the bucket has less than
 * one (nothing taken). Lock-free; any thread. A clock that jumps mints
 * nothing and never drives the bucket negative: forward, the bucket fills
 * to burst at most; backward, before the last token taken, nothing is
 * taken and nothing written until the clock is past it again. Workers
 * read the clock at different instants, so a caller's now_ns may be
 * behind another's last take by the time it gets here: moving the bucket
 * back to it would mint the difference. CLOCK_MONOTONIC never goes back,
 * so only such a straggler is refused, by at most its delay. */
bool mtd_limit_take(struct mtd_limit_bucket *b, int64_t now_ns);

/* Whole tokens in the bucket at now_ns, 0..burst (a figure: another
 * thread may take one meanwhile). */
uint32_t mtd_limit_tokens(const struct mtd_limit_bucket *b, int64_t now_ns);

#endif
