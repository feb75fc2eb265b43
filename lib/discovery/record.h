/* The registry record (protos/maitred/registry/v1/endpoint.proto): the value
 * stored in etcd under "<prefix><instance id>", parsed and validated into
 * what an endpoint source hands the runtime.
 *
 * Pure: no I/O, no logging, no global state; any thread. The caller logs a
 * refused record once with its key and the reason, and skips it. */
#ifndef MTD_RECORD_H
#define MTD_RECORD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "identity/identity.h"

/* A value larger than this is refused without being parsed. A record is a
 * few hundred bytes; 16 KiB leaves room for metadata and bounds what one
 * bad writer can make every sidecar parse. */
#define MTD_RECORD_MAX_BYTES      16384
#define MTD_RECORD_MAX_WEIGHT     1000000
#define MTD_RECORD_MAX_META       64  /* metadata entries */
#define MTD_RECORD_MAX_STRING     256 /* a metadata key or value, in bytes */
#define MTD_RECORD_MAX_LABEL      128 /* zone, version, in bytes */
#define MTD_RECORD_MAX_IDENTITY   MTD_IDENTITY_TEXT_MAX /* identity, in bytes (typed: "dns:" + 2048) */
#define MTD_RECORD_DEFAULT_WEIGHT 100

struct mtd_record_meta {
	char *key, *value;
};

/* A valid record. Every string is owned by the record and NUL-terminated;
 * free with mtd_record_clear(). */
struct mtd_record {
	char *address; /* canonical numeric "ip:port" / "[v6]:port" */
	struct sockaddr_storage sa;
	socklen_t salen;
	int32_t weight;                   /* 0..MTD_RECORD_MAX_WEIGHT, 100 when absent */
	char *zone;                       /* "" when absent */
	char *version;                    /* "" when absent */
	char *identity;                   /* "" when absent; meant to be lib/identity's typed text, which
	                                   * the reader that relies on it checks (etcd_watch.c) */
	struct mtd_record_meta *metadata; /* sorted by key, unique keys */
	size_t n_metadata;
	int64_t start_ms; /* wall-clock ms since the epoch; 0 = absent */
};

/* Parse one record value of len bytes. The value is the proto3 JSON form
 * when its first byte that is not white space is '{', else the binary form
 * of maitred.registry.v1.Endpoint.
 *
 * Rules (a record breaking one is refused, never repaired):
 *   - len is 1..MTD_RECORD_MAX_BYTES;
 *   - JSON: well-formed, one object, only the message's fields (snake_case
 *     or lowerCamel), each of its type (proto3 JSON mapping); a key this
 *     version does not know is refused, as proto3 JSON parsers do;
 *   - binary: a well-formed message; fields this version does not know are
 *     skipped, as protobuf parsers do;
 *   - address: numeric IPv4 "a.b.c.d:port" or IPv6 "[v6]:port", port
 *     1..65535 (a registry holds where an instance listens, not a name to
 *     resolve);
 *   - weight 0..MTD_RECORD_MAX_WEIGHT; zone and version at most
 *     MTD_RECORD_MAX_LABEL bytes, identity at most MTD_RECORD_MAX_IDENTITY; at most MTD_RECORD_MAX_META metadata
 *     entries, keys non-empty, keys and values at most
 *     MTD_RECORD_MAX_STRING bytes; no string holds a NUL or a control
 *     character;
 *   - start_time, when present, after 1970-01-01 and at most one day in the
 *     future (a clock that far ahead would keep the endpoint cold).
 *
 * Returns 0 and fills *out (which the caller clears later), -EINVAL with a
 * one-line reason in why (e.g. "weight: must be at most 1000000"; for JSON
 * it starts with "value:LINE:COL: ") and *out untouched, or -ENOMEM.
 * now_ms is the wall clock, for the start_time check. */
int mtd_record_parse(const void *value, size_t len, int64_t now_ms, struct mtd_record *out, char *why, size_t whylen);

/* Free what a parsed record owns and zero it. Safe on a zeroed record. */
void mtd_record_clear(struct mtd_record *r);

/* The proto3 JSON form of the record maitred writes when it registers its
 * own app: address, weight, start_time (RFC 3339, UTC, milliseconds) when
 * start_ms > 0, and identity when not NULL or "" (escaped as JSON).
 * address must be numeric (no escaping is needed). Returns the length
 * written (as snprintf: may exceed size, then the output is truncated) or
 * -EINVAL (no address, or an identity a record may not carry). */
int mtd_record_format_json(const char *address, int32_t weight, int64_t start_ms, const char *identity, char *buf,
                           size_t size);

#endif
