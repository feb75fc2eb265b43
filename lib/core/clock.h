/* The two clocks: monotonic (timers, latencies, deadlines) and wall
 * (warmup starts, which registry records carry as wall time). Any thread. */
#ifndef MTD_CLOCK_H
#define MTD_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC, nanoseconds. */
int64_t mtd_now_ns(void);
/* CLOCK_REALTIME, milliseconds since the epoch. */
int64_t mtd_wall_ms(void);

#endif
