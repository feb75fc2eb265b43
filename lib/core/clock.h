/* The two clocks: monotonic (timers, latencies, deadlines, and every
 * window and cadence: rate limits, split.guard, outlier ejection) and wall
 * (warmup starts, which registry records carry as wall time, and display).
 * A wall-clock step (NTP, an operator) must never stall or hurry a window:
 * what measures time between two events uses the monotonic clock, and a
 * monotonic time is turned into wall time only to be shown. Any thread. */
#ifndef MTD_CLOCK_H
#define MTD_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC, nanoseconds. */
int64_t mtd_now_ns(void);
/* CLOCK_REALTIME, milliseconds since the epoch. */
int64_t mtd_wall_ms(void);

/* CLOCK_MONOTONIC, milliseconds (mtd_now_ns's clock). */
static inline int64_t mtd_mono_ms(void)
{
	return mtd_now_ns() / 1000000;
}

/* The wall time (ms since the epoch) of mono_ms, a time on mtd_mono_ms's
 * clock, for display: as far from the wall clock now as mono_ms is from
 * the monotonic clock now. */
static inline int64_t mtd_wall_of_mono_ms(int64_t mono_ms)
{
	return mtd_wall_ms() - (mtd_mono_ms() - mono_ms);
}

#endif
