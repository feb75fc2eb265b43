#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/log.h"

_Atomic int mtd_log_threshold = MTD_LOG_INFO;
_Atomic bool mtd_log_json;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

int mtd_log_parse_level(const char *s, enum mtd_log_level *out)
{
	for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
		if (strcmp(s, level_names[i]) == 0) {
			*out = (enum mtd_log_level)i;
			return 0;
		}
	}
	return -EINVAL;
}

bool mtd_log_gate_pass(struct mtd_log_gate *g, int64_t now_ns, int64_t every_ns, uint64_t *held)
{
	if (g->last_ns && now_ns - g->last_ns < every_ns) {
		g->held++;
		return false;
	}
	*held = g->held;
	g->held = 0;
	g->last_ns = now_ns ? now_ns : 1;
	return true;
}

void mtd_log_timestamp(char *buf, size_t len)
{
	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
	         tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
}

/* msg as the inside of a JSON string (RFC 8259 §7) onto out[*n..cap). */
static void json_escape(char *out, size_t *n, size_t cap, const char *msg)
{
	for (const unsigned char *p = (const unsigned char *)msg; *p && *n + 7 < cap; p++) {
		unsigned c = *p;
		if (c == '"' || c == '\\') {
			out[(*n)++] = '\\';
			out[(*n)++] = (char)c;
		} else if (c < 0x20 || c >= 0x7f) {
			/* Bytes >= 0x80 (a peer's text) as Latin-1 code points: the
			 * line stays valid JSON whatever the bytes were. */
			*n += (size_t)snprintf(out + *n, cap - *n, "\\u%04x", c);
		} else {
			out[(*n)++] = (char)c;
		}
	}
}

void mtd_log(enum mtd_log_level lvl, const char *fmt, ...)
{
	if (!mtd_log_enabled(lvl))
		return;
	char line[1024], ts[32];
	mtd_log_timestamp(ts, sizeof(ts));
	va_list ap;
	if (atomic_load_explicit(&mtd_log_json, memory_order_relaxed)) {
		char msg[900];
		va_start(ap, fmt);
		vsnprintf(msg, sizeof(msg), fmt, ap);
		va_end(ap);
		size_t k = (size_t)snprintf(line, sizeof(line), "{\"time\":\"%s\",\"level\":\"%s\",\"msg\":\"", ts,
		                            level_names[lvl]);
		json_escape(line, &k, sizeof(line) - 4, msg);
		memcpy(line + k, "\"}\n", 3);
		fwrite(line, 1, k + 3, stderr);
		return;
	}
	int n = snprintf(line, sizeof(line), "%s %-5s ", ts, level_names[lvl]);
	va_start(ap, fmt);
	int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
	if (len > sizeof(line) - 2)
		len = sizeof(line) - 2;
	line[len++] = '\n';
	/* One write per line: lines from different threads never interleave. */
	fwrite(line, 1, len, stderr);
}
