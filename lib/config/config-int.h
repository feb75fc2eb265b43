/* Internals of lib/config/, shared by its files and by its unit tests.
 * Nothing outside lib/config/ and tests/unit/config/ includes this, except
 * lib/discovery/record.c, which maps the registry record (proto3 JSON) with
 * the same descriptor walk.
 *
 * Pipeline of one load (control thread only):
 *
 *   bytes --(pbjson.c: libyaml document -> descriptor walk)--+
 *                                                            +--> Config message
 *   bytes --(load.c: protobuf_c_message_unpack)--------------+        |
 *                                                                     v
 *                             build*.c: validate, apply defaults, resolve
 *                                                                     |
 *                                                                     v
 *                                                           struct mtd_cfg
 *
 * Every stage reports into one struct mtd_cfg__diag; the text stages also
 * record where each message and field came from (line, column), so build*.c
 * can point at the file for errors it finds long after parsing. */
#ifndef MTD_CONFIG_INT_H
#define MTD_CONFIG_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h> /* mode_t */

#include <protobuf-c/protobuf-c.h>

#include "config/config-t.h"
#include "maitred/config/v1/config.pb-c.h"

/* ---- allocation --------------------------------------------------------
 * Every allocation lib/config makes (its own and protobuf-c's, through
 * mtd_cfg__pb_allocator) goes through these, so a test can make the Nth one
 * fail and prove that every error path unwinds without leaking. libyaml and
 * getaddrinfo allocate on their own and are not covered. */
void *mtd_cfg__malloc(size_t size);
void *mtd_cfg__calloc(size_t nmemb, size_t size);
/* On failure returns NULL and leaves p untouched (like realloc). */
void *mtd_cfg__realloc(void *p, size_t size);
char *mtd_cfg__strdup(const char *s);
char *mtd_cfg__strndup(const char *s, size_t n);
/* printf into a new string; NULL on allocation failure. */
char *mtd_cfg__asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void mtd_cfg__free(void *p);
extern ProtobufCAllocator mtd_cfg__pb_allocator;

/* Test hook (per thread): from now on, allocation number n (1-based) and
 * every later one fail; n = 0 turns failures off. */
void mtd_cfg__fail_alloc_after(unsigned long n);
/* Whether an allocation has failed since the last fail_alloc_after(). */
bool mtd_cfg__alloc_failed(void);

/* ---- diagnostics -------------------------------------------------------- */

/* A place in the input, 1-based; line 0 = unknown (binary input). */
struct mtd_cfg__mark {
	uint32_t line, col;
};

struct mtd_cfg__err {
	struct mtd_cfg__mark at;
	size_t seq; /* report order, ties broken by it */
	char *text; /* the full "FILE:L:C: path: what" line */
};

/* Where a message (field 0) or one of its fields (field = tag number) was
 * written. */
struct mtd_cfg__pos {
	const void *msg;
	uint32_t field;
	struct mtd_cfg__mark at;
};

struct mtd_cfg__diag {
	const char *source; /* borrowed; used in every message */
	struct mtd_cfg__err *errs;
	size_t n_errs, cap_errs;
	struct mtd_cfg__pos *pos;
	size_t n_pos, cap_pos;
	bool pos_sorted;
	bool oom; /* an allocation failed: result is -ENOMEM */
};

void mtd_cfg__diag_init(struct mtd_cfg__diag *d, const char *source);
void mtd_cfg__diag_fini(struct mtd_cfg__diag *d);
/* Record one error "SOURCE:LINE:COL: PATH: text". path may be NULL or "".
 * On allocation failure sets d->oom instead. */
void mtd_cfg__error(struct mtd_cfg__diag *d, struct mtd_cfg__mark at, const char *path, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
/* Remember where (msg, field) was written; field 0 = the message itself. */
void mtd_cfg__pos_add(struct mtd_cfg__diag *d, const void *msg, uint32_t field, struct mtd_cfg__mark at);
/* Where (msg, field) was written; falls back to the message's own place,
 * then to {0, 0}. msg may be NULL. */
struct mtd_cfg__mark mtd_cfg__pos_get(struct mtd_cfg__diag *d, const void *msg, uint32_t field);
/* Same, naming the field by its .proto name (unknown name = the message). */
struct mtd_cfg__mark mtd_cfg__pos_named(struct mtd_cfg__diag *d, const ProtobufCMessage *msg, const char *field);
/* What a path that is not a regular file is ("a directory", "a FIFO", ...),
 * for a refusal (load.c). */
const char *mtd_cfg__file_kind(mode_t mode);
/* Whether an error was recorded at path or under it ("services[0].endpoints"
 * holds for "services[0].endpoints[1]: ..." and "services[0].endpoints: ...",
 * not for "services[0].endpoints_x"): a check of what is there then says
 * nothing, the value was written wrong and that is said. */
bool mtd_cfg__said_under(const struct mtd_cfg__diag *d, const char *path);
/* Append every error, in file order, to errs. 0 or -ENOMEM. */
int mtd_cfg__diag_export(struct mtd_cfg__diag *d, struct mtd_cfg_errors *errs);

/* ---- the generic proto3-JSON-mapping loader (pbjson.c) ----------------- */

/* Parse a YAML (or JSON, a YAML subset; json = true also undoes escaped
 * UTF-16 surrogate pairs, which libyaml rejects) document of len bytes and
 * map it onto a new message of type desc by walking its descriptors.
 * Returns 0 and *out (free with protobuf_c_message_free_unpacked(*out,
 * &mtd_cfg__pb_allocator)) even when mapping errors were recorded in d, so
 * that later stages can keep reporting; *out is NULL after a syntax error.
 * Returns -ENOMEM (and *out NULL) when an allocation failed. */
int mtd_cfg__pbjson_load(const char *data, size_t len, bool json, const ProtobufCMessageDescriptor *desc,
                         struct mtd_cfg__diag *d, ProtobufCMessage **out);

/* libyaml's scanner walks every open flow level ('[', '{') at each token,
 * so yaml_parser_load costs O(N^2) for a document nested N levels deep
 * (200,000 "[": minutes; a 64 MiB file: hours). One pass over the
 * document's events, stopped at the first collection that opens level
 * max + 1 (the root's collection is level 1), bounds that before the load.
 * Returns 1 and sets *at (1-based) when data nests deeper than max; 0
 * otherwise, a syntax error included (the load reports it); -ENOMEM. */
#define MTD_CFG_NEST_MAX 256
int mtd_cfg__yaml_too_deep(const char *data, size_t len, unsigned max, struct mtd_cfg__mark *at);

/* Checks binary input has what the text path would have rejected: unknown
 * fields and enum numbers with no name. Errors go to d. */
void mtd_cfg__pb_check(const ProtobufCMessage *msg, struct mtd_cfg__diag *d);

/* Parse a duration: proto3 JSON "1.5s", "-3s", plus friendly units "ns",
 * "us", "ms", "s", "m", "h", combined as in "1m30s". Range: what fits in
 * int64 nanoseconds (about 292 years). 0 or -EINVAL (*why set). */
int mtd_cfg__parse_duration(const char *s, int64_t *seconds, int32_t *nanos, const char **why);

/* Parse an RFC 3339 time (proto3 JSON Timestamp): "2026-12-01T08:00:00Z",
 * optional fraction (to nanoseconds) and "+HH:MM" offset; years 0001..9999.
 * 0 or -EINVAL (*why set). */
int mtd_cfg__parse_timestamp(const char *s, int64_t *seconds, int32_t *nanos, const char **why);

/* ---- validation and runtime form (build*.c, free.c) --------------------- */

/* Validate m and build the runtime config. basedir ("" or a directory with
 * a trailing '/') is prepended to relative file names (TLS files). Errors
 * go to d; *out is set only when none were found. 0 or -ENOMEM. */
int mtd_cfg__build(const Maitred__Config__V1__Config *m, const char *source, const char *basedir,
                   struct mtd_cfg__diag *d, struct mtd_cfg **out);

/* Test/fuzz hook (per thread): resolve only numeric hosts, so no input can
 * make the loader wait on DNS. */
void mtd_cfg__numeric_hosts_only(bool on);

/* Parse "host:port" / "[v6]:port" without resolving. 0 or -EINVAL with
 * *why set. host is a new string. */
int mtd_cfg__split_hostport(const char *text, char **host, uint16_t *port, const char **why);

#endif
