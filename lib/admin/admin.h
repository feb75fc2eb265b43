/* lib/admin: the pure pieces of the admin endpoint, testable without a
 * socket: a growable text buffer, a JSON writer, a Prometheus text-format
 * writer, and the /config_dump renderer (a protobuf message as JSON, with
 * secrets redacted). No I/O, no threads: the caller owns every buffer.
 *
 * Errors: a writer never fails midway. Out of memory sets buf->oom and
 * later appends do nothing; the caller checks oom once at the end. */
#ifndef MTD_ADMIN_H
#define MTD_ADMIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ProtobufCMessage;

/* ---- text buffer (buf.c) ---------------------------------------------- */

struct mtd_abuf {
	char *p; /* NUL-terminated while len < cap; owned unless fixed */
	size_t len, cap;
	bool oom;   /* an append failed: the content is incomplete */
	bool fixed; /* p is the caller's (mtd_abuf_init_fixed): never grown */
};

/* A buffer over the caller's memory (e.g. on the stack), for a path that
 * must not allocate: an append that does not fit sets oom instead. */
void mtd_abuf_init_fixed(struct mtd_abuf *b, char *mem, size_t cap);

void mtd_abuf_add(struct mtd_abuf *b, const void *data, size_t n);
void mtd_abuf_puts(struct mtd_abuf *b, const char *s);
void mtd_abuf_printf(struct mtd_abuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Free the memory (not a fixed buffer's); b is empty and reusable after. */
void mtd_abuf_clear(struct mtd_abuf *b);

/* ---- JSON writer (json.c) --------------------------------------------- */

#define MTD_JSON_MAX_DEPTH 32

/* Commas and nesting are tracked here: call key() then a value inside an
 * object, values only inside an array. Nesting deeper than
 * MTD_JSON_MAX_DEPTH is written but its comma state is not tracked. */
struct mtd_json {
	struct mtd_abuf *b;
	unsigned depth;
	bool need_comma[MTD_JSON_MAX_DEPTH + 1];
	bool after_key;
};

void mtd_json_init(struct mtd_json *j, struct mtd_abuf *b);
void mtd_json_obj_begin(struct mtd_json *j);
void mtd_json_obj_end(struct mtd_json *j);
void mtd_json_arr_begin(struct mtd_json *j);
void mtd_json_arr_end(struct mtd_json *j);
void mtd_json_key(struct mtd_json *j, const char *key);
/* A string of n bytes (RFC 8259 §7 escaping; bytes that are not valid
 * UTF-8 become U+FFFD, so the output is always valid JSON). NULL = null. */
void mtd_json_strn(struct mtd_json *j, const char *s, size_t n);
void mtd_json_str(struct mtd_json *j, const char *s);
void mtd_json_u64(struct mtd_json *j, uint64_t v);
void mtd_json_i64(struct mtd_json *j, int64_t v);
/* Non-finite values are written as null (JSON has no NaN/Infinity). */
void mtd_json_dbl(struct mtd_json *j, double v);
void mtd_json_bool(struct mtd_json *j, bool v);
void mtd_json_null(struct mtd_json *j);
/* Escape s[0..n) as the inside of a JSON string (no quotes) onto b. */
void mtd_json_escape(struct mtd_abuf *b, const char *s, size_t n);

/* ---- Prometheus text format 0.0.4 (prom.c) ----------------------------
 * Families must be written one at a time: family() then all its samples
 * (the format requires a family's samples to be contiguous). */

void mtd_prom_family(struct mtd_abuf *b, const char *name, const char *type, const char *help);
/* One sample: name{k1="v1",...} value. labels is a list of n_labels
 * key/value pairs (keys[i], values[i]); values are escaped (\\ \" \n).
 * suffix (may be NULL) is appended to name ("_bucket", "_sum"). */
void mtd_prom_sample(struct mtd_abuf *b, const char *name, const char *suffix, const char *const *keys,
                     const char *const *values, size_t n_labels, double value);
/* Same with an extra label (le="0.005" of a histogram bucket). */
void mtd_prom_sample_le(struct mtd_abuf *b, const char *name, const char *const *keys, const char *const *values,
                        size_t n_labels, double le, uint64_t count);
/* Counters and gauges that are integers are written exactly. */
void mtd_prom_sample_u64(struct mtd_abuf *b, const char *name, const char *suffix, const char *const *keys,
                         const char *const *values, size_t n_labels, uint64_t value);

/* ---- /config_dump (dump.c) -------------------------------------------- */

/* True for a field whose value is a secret: a string or bytes field whose
 * name is or contains "password", "secret", "token", "credential" or
 * "private_key", or is exactly "key". A name ending in "_file" (key_file,
 * password_file) is a file name, not a secret: maitred never holds a
 * file's contents in its config. */
bool mtd_admin_is_secret_field(const char *name);

#define MTD_ADMIN_REDACTED "[redacted]"

/* msg as JSON with the proto field names (snake_case), enums by name,
 * google.protobuf.Duration as "1.5s", wrappers as their value; fields at
 * their proto3 default are left out; secret fields (above) are written as
 * MTD_ADMIN_REDACTED when set. */
void mtd_admin_dump_message(struct mtd_json *j, const struct ProtobufCMessage *msg);

#endif
