/* Logging to stderr, one line per event, safe from any thread. */
#ifndef MTD_LOG_H
#define MTD_LOG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum mtd_log_level {
	MTD_LOG_DEBUG = 0,
	MTD_LOG_INFO,
	MTD_LOG_WARN,
	MTD_LOG_ERROR,
};

/* The lowest level written (an enum mtd_log_level; above MTD_LOG_ERROR:
 * nothing), and lines as JSON objects {"time","level","msg"} instead of
 * text (config log.format). Set at start and by a reload (log.level,
 * log.format) on the control thread while every thread logs: atomics, read
 * relaxed; a line racing a reload comes out in the old or the new way. */
extern _Atomic int mtd_log_threshold;
extern _Atomic bool mtd_log_json;

/* "2026-01-01T00:00:00.000Z" (UTC, ms) into buf (at least 32 bytes). */
void mtd_log_timestamp(char *buf, size_t len);

/* Parse "debug"/"info"/"warn"/"error"; -EINVAL otherwise. */
int mtd_log_parse_level(const char *s, enum mtd_log_level *out);

/* msg as one text log line's message into out (cap > 0 bytes, always
 * NUL-terminated; cut short at cap): valid UTF-8 as it is; newline,
 * carriage return and tab as \n \r \t; other control characters (C0,
 * DEL, and C1 such as NEL and CSI, each of its two bytes) and bytes that
 * do not form UTF-8 as \xNN; a backslash as \\, so that a peer's own
 * "\n" (two characters) never reads as an escaped newline. Returns the
 * length written. */
size_t mtd_log_escape_text(char *out, size_t cap, const char *msg);

/* One line on stderr, escaped (text: mtd_log_escape_text; JSON: a valid
 * JSON object whatever the bytes) so that no argument can break a line. */
void mtd_log(enum mtd_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define mtd_log_enabled(lvl) ((int)(lvl) >= atomic_load_explicit(&mtd_log_threshold, memory_order_relaxed))
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

/* At most one log line per interval for one kind of event, so that an
 * outage does not turn into a log flood; the line then says how many
 * events went without one. Zero-initialised = no line yet. One owner (a
 * worker's): not atomic. */
struct mtd_log_gate {
	int64_t last_ns; /* when the last line went out (0: never) */
	uint64_t held;   /* events since then that got no line */
};

/* An event at now_ns (monotonic): true when it gets a line (the first
 * one, or every_ns after the previous), with *held = the events that got
 * none since the previous line, and the count starts again; otherwise
 * the event is counted and false returned. */
bool mtd_log_gate_pass(struct mtd_log_gate *g, int64_t now_ns, int64_t every_ns, uint64_t *held);

#endif
