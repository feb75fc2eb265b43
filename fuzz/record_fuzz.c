/* libFuzzer target for the registry record parser (lib/discovery/record.c):
 * the value an etcd key holds, from any writer.
 *
 * A record either parses into one that keeps every documented bound
 * (record.h), or is refused with a one-line reason; a record that parses
 * formats back (address, weight, start time) into JSON that parses again
 * to the same values. Nothing leaks (LeakSanitizer). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "discovery/record.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* 2026-12-01T00:00:00Z: a fixed "now" keeps runs reproducible. */
#define NOW_MS 1796083200000LL

static void check_string(const char *s, size_t max)
{
	if (!s)
		abort();
	size_t n = strlen(s);
	if (n > max)
		abort();
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mtd_record r;
	char why[256];
	memset(why, 0, sizeof(why));
	int rc = mtd_record_parse(data, size, NOW_MS, &r, why, sizeof(why));
	if (rc == -EINVAL) {
		if (!why[0] || !memchr(why, 0, sizeof(why)))
			abort();
		return 0;
	}
	if (rc == -ENOMEM)
		return 0;
	if (rc != 0 || size == 0 || size > MTD_RECORD_MAX_BYTES)
		abort();
	if (r.weight < 0 || r.weight > MTD_RECORD_MAX_WEIGHT || r.start_ms < 0 || r.start_ms > NOW_MS + 86400000LL)
		abort();
	check_string(r.address, 64);
	check_string(r.zone, MTD_RECORD_MAX_LABEL);
	check_string(r.version, MTD_RECORD_MAX_LABEL);
	check_string(r.identity, MTD_RECORD_MAX_IDENTITY);
	if (r.n_metadata > MTD_RECORD_MAX_META)
		abort();
	for (size_t i = 0; i < r.n_metadata; i++) {
		check_string(r.metadata[i].key, MTD_RECORD_MAX_STRING);
		check_string(r.metadata[i].value, MTD_RECORD_MAX_STRING);
		if (!r.metadata[i].key[0] || (i > 0 && strcmp(r.metadata[i - 1].key, r.metadata[i].key) >= 0))
			abort(); /* sorted, unique, non-empty keys */
	}
	char buf[2048];
	int n = mtd_record_format_json(r.address, r.weight, r.start_ms, r.identity, buf, sizeof(buf));
	if (n <= 0 || (size_t)n >= sizeof(buf))
		abort();
	struct mtd_record back;
	if (mtd_record_parse(buf, (size_t)n, NOW_MS, &back, why, sizeof(why)) != 0)
		abort();
	if (strcmp(back.address, r.address) != 0 || back.weight != r.weight || back.start_ms != r.start_ms ||
	    strcmp(back.identity, r.identity) != 0)
		abort();
	mtd_record_clear(&back);
	mtd_record_clear(&r);
	return 0;
}
