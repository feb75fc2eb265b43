#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "core/utf8.h"

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

/* Whether the UTF-8 sequence of k bytes at p is a C1 control character
 * (U+0080..U+009F): NEL ends a line for Unicode line breaking, CSI
 * (U+009B) starts a terminal's escape sequence as ESC [ does. */
static bool is_c1(const unsigned char *p, size_t k)
{
	return k == 2 && p[0] == 0xc2 && p[1] < 0xa0;
}

/* msg as the inside of a JSON string (RFC 8259 §7) onto out[*n..cap):
 * valid UTF-8 passes as it is; control characters (C0, DEL, C1) and
 * bytes that do not form UTF-8 (a peer's text, cut anywhere) become
 * \u00XX, so that the
 * line stays one valid JSON object whatever the bytes were. */
static void json_escape(char *out, size_t *n, size_t cap, const char *msg)
{
	const unsigned char *p = (const unsigned char *)msg;
	size_t left = strlen(msg);

	while (left > 0 && *n + 7 < cap) {
		unsigned c = *p;
		size_t k = c >= 0x80 ? mtd_utf8_seq(p, left) : 1;
		if (c == '"' || c == '\\') {
			out[(*n)++] = '\\';
			out[(*n)++] = (char)c;
		} else if (c < 0x20 || c == 0x7f || k == 0) {
			*n += (size_t)snprintf(out + *n, cap - *n, "\\u%04x", c);
			k = 1;
		} else if (is_c1(p, k)) {
			*n += (size_t)snprintf(out + *n, cap - *n, "\\u%04x", p[1]);
		} else {
			memcpy(out + *n, p, k);
			*n += k;
		}
		p += k;
		left -= k;
	}
}

size_t mtd_log_escape_text(char *out, size_t cap, const char *msg)
{
	const unsigned char *p = (const unsigned char *)msg;
	size_t n = 0, left = strlen(msg);

	if (cap == 0)
		return 0;
	while (left > 0 && n + 5 < cap) {
		unsigned c = *p;
		size_t k = c >= 0x80 ? mtd_utf8_seq(p, left) : 1;
		if (c == '\n' || c == '\r' || c == '\t' || c == '\\') {
			out[n++] = '\\';
			out[n++] = c == '\n' ? 'n' : c == '\r' ? 'r' : c == '\t' ? 't' : '\\';
		} else if (c < 0x20 || c == 0x7f || k == 0) {
			n += (size_t)snprintf(out + n, cap - n, "\\x%02x", c);
			k = 1;
		} else if (is_c1(p, k)) {
			if (n + 9 >= cap)
				break;
			n += (size_t)snprintf(out + n, cap - n, "\\x%02x\\x%02x", p[0], p[1]);
		} else {
			memcpy(out + n, p, k);
			n += k;
		}
		p += k;
		left -= k;
	}
	out[n] = '\0';
	return n;
}

void mtd_log(enum mtd_log_level lvl, const char *fmt, ...)
{
	if (!mtd_log_enabled(lvl))
		return;
	char line[1024], msg[900], ts[32];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	mtd_log_timestamp(ts, sizeof(ts));
	if (atomic_load_explicit(&mtd_log_json, memory_order_relaxed)) {
		size_t k = (size_t)snprintf(line, sizeof(line), "{\"time\":\"%s\",\"level\":\"%s\",\"msg\":\"", ts,
		                            level_names[lvl]);
		json_escape(line, &k, sizeof(line) - 4, msg);
		memcpy(line + k, "\"}\n", 3);
		fwrite(line, 1, k + 3, stderr);
		return;
	}
	int n = snprintf(line, sizeof(line), "%s %-5s ", ts, level_names[lvl]);
	/* A message carries peers' text (resource names, NACK reasons, header
	 * values): escaped, it can never end the line or forge another. */
	size_t len = (size_t)n + mtd_log_escape_text(line + n, sizeof(line) - (size_t)n - 1, msg);
	line[len++] = '\n';
	/* One write per line: lines from different threads never interleave. */
	fwrite(line, 1, len, stderr);
}
