/* Logging to stderr, one line per event, safe from any thread. */
#ifndef MTD_LOG_H
#define MTD_LOG_H

#include <stdbool.h>
#include <stddef.h>

enum mtd_log_level {
	MTD_LOG_DEBUG = 0,
	MTD_LOG_INFO,
	MTD_LOG_WARN,
	MTD_LOG_ERROR,
};

extern enum mtd_log_level mtd_log_threshold;
/* Lines as JSON objects {"time","level","msg"} instead of text. Set once
 * before any thread starts (config log.format). */
extern bool mtd_log_json;

/* "2026-01-01T00:00:00.000Z" (UTC, ms) into buf (at least 32 bytes). */
void mtd_log_timestamp(char *buf, size_t len);

/* Parse "debug"/"info"/"warn"/"error"; -EINVAL otherwise. */
int mtd_log_parse_level(const char *s, enum mtd_log_level *out);

void mtd_log(enum mtd_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define mtd_log_enabled(lvl) ((lvl) >= mtd_log_threshold)
#define MTD_DEBUG(...)                                       \
	do {                                                 \
		if (mtd_log_enabled(MTD_LOG_DEBUG))          \
			mtd_log(MTD_LOG_DEBUG, __VA_ARGS__); \
	} while (0)
#define MTD_INFO(...)                                       \
	do {                                                \
		if (mtd_log_enabled(MTD_LOG_INFO))          \
			mtd_log(MTD_LOG_INFO, __VA_ARGS__); \
	} while (0)
#define MTD_WARN(...)                                       \
	do {                                                \
		if (mtd_log_enabled(MTD_LOG_WARN))          \
			mtd_log(MTD_LOG_WARN, __VA_ARGS__); \
	} while (0)
#define MTD_ERROR(...) mtd_log(MTD_LOG_ERROR, __VA_ARGS__)

#endif
