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

/* How far the wall clock is ahead of the monotonic one, in ms, as one
 * value every reader shares: taken again only when the clocks moved
 * apart by more than MTD_WALL_OFFSET_SLACK_MS (a step, or a slew that
 * added up), so that one moment shown on two pages reads the same even
 * though each reading of the two clocks rounds to the ms its own way. */
int64_t mtd_wall_offset_ms(void);
#define MTD_WALL_OFFSET_SLACK_MS 100

/* The wall time (ms since the epoch) of mono_ms, a time on mtd_mono_ms's
 * clock, for display. */
static inline int64_t mtd_wall_of_mono_ms(int64_t mono_ms)
{
	return mono_ms + mtd_wall_offset_ms();
}

#endif
