#include "config.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#include "core/clock.h"

int64_t mtd_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t mtd_wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t mtd_wall_offset_ms(void)
{
	static _Atomic int64_t shared;
	static _Atomic bool taken;
	int64_t now = mtd_wall_ms() - mtd_mono_ms();
	int64_t was = atomic_load_explicit(&shared, memory_order_relaxed);
	if (atomic_load_explicit(&taken, memory_order_acquire) && now - was <= MTD_WALL_OFFSET_SLACK_MS &&
	    was - now <= MTD_WALL_OFFSET_SLACK_MS)
		return was;
	atomic_store_explicit(&shared, now, memory_order_relaxed);
	atomic_store_explicit(&taken, true, memory_order_release);
	return now;
}
