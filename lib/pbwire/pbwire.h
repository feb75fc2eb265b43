/* Reading one field of a protobuf message straight from the wire format,
 * by field-number path, with no schema and no generated code: the request
 * hash key of a method (`hash_key: {field: "2.1"}`, the gRPC counterpart
 * of Dubbo's hash.arguments).
 *
 * What it understands (protobuf encoding spec, "Message Structure"): tags
 * as varints (field number << 3 | wire type), wire types VARINT (0),
 * I64 (1), LEN (2), SGROUP/EGROUP (3/4, skipped with their nesting) and
 * I32 (5). Every path element but the last must be a LEN field (a nested
 * message); the last may be any wire type.
 *
 * "First occurrence": the first match of the whole path in wire order. For
 * {2,1}: the occurrences of field 2 are visited in order, and the first
 * one that holds a field 1 gives it. (Canonical serializers write a
 * singular field once, so first = only; a parser would merge repeated
 * occurrences and keep the last scalar, which only differs for hand-made
 * or concatenated messages.)
 *
 * Safety: pure, no allocation, no recursion; every read is bounds-checked
 * against len; work is O(len) whatever the input; any byte string is a
 * valid input (malformed ones return -EBADMSG). Thread-safe.
 */
#ifndef MTD_PBWIRE_H
#define MTD_PBWIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MTD_PBWIRE_MAX_DEPTH 8          /* path elements */
#define MTD_PBWIRE_MAX_FIELD 536870911u /* 2^29 - 1 */
/* Suggested bound on how much of the first request message the data plane
 * buffers before picking (the look-ahead): a key past it is "absent". */
#define MTD_PBWIRE_DEFAULT_LOOKAHEAD 65536u
/* Room for a number's decimal text (mtd_pbwire_key_bytes). */
#define MTD_PBWIRE_NUMBUF 24

enum mtd_pbwire_type {
	MTD_PBWIRE_VARINT = 0,
	MTD_PBWIRE_I64 = 1,
	MTD_PBWIRE_LEN = 2,
	MTD_PBWIRE_I32 = 5,
};

struct mtd_pbwire_value {
	enum mtd_pbwire_type type;
	const uint8_t *data; /* LEN: the bytes, inside the input buffer */
	size_t len;          /* LEN: their count */
	uint64_t num;        /* VARINT, I64, I32: the raw value */
};

/* Parse "2.1" into path[] (field numbers in 1..MTD_PBWIRE_MAX_FIELD,
 * decimal, no sign, no leading zero, no spaces, 1..MTD_PBWIRE_MAX_DEPTH
 * elements). Returns 0, or -EINVAL (text NULL or malformed). For config
 * validation too. */
int mtd_pbwire_path_parse(const char *text, uint32_t path[MTD_PBWIRE_MAX_DEPTH], size_t *depth);

/* Find the first occurrence of path[0..depth) in the message msg[0..len).
 * complete: msg holds the whole message (false: only its first len bytes
 * have arrived so far).
 * Returns
 *   1        found; *out describes it (out->data points into msg)
 *   0        absent (the whole message was read)
 *  -EAGAIN   not found in the bytes so far (complete == false only): the
 *            field may come later, or its value is cut at len
 *  -EBADMSG  the top-level message is malformed before the field was
 *            found (truncated although complete, bad varint, wire type
 *            6/7, field 0, unbalanced groups); a nested payload that does
 *            not parse is taken for a string/bytes field: no match in it
 *  -EINVAL   bad arguments (depth 0 or > MTD_PBWIRE_MAX_DEPTH, field 0)
 * A field found before a malformation later in the message is returned:
 * the scan stops at the first match. */
int mtd_pbwire_find(const uint8_t *msg, size_t len, bool complete, const uint32_t *path, size_t depth,
                    struct mtd_pbwire_value *out);

/* The same on gRPC data as received: frame[0..len) starts with the first
 * message's 5-byte prefix (compressed flag, 4-byte big-endian length;
 * gRPC PROTOCOL-HTTP2 "Length-Prefixed-Message"); bytes past that message
 * are ignored; a message longer than lookahead is searched only in its
 * first lookahead bytes, as if complete (a key beyond them is absent).
 * Extra returns: -EAGAIN also when fewer than 5 bytes are there, or fewer
 * than min(message length, lookahead); -ENOTSUP for a compressed message
 * (the key cannot be read: treat it as absent). */
int mtd_pbwire_find_grpc(const uint8_t *frame, size_t len, size_t lookahead, const uint32_t *path, size_t depth,
                         struct mtd_pbwire_value *out);

/* The bytes to hash for a found value, so that a field and a header with
 * the same text hash alike:
 *   LEN     the raw bytes (string, bytes or a whole nested message)
 *   VARINT  the decimal text of the value as int64 (int32/int64/enum
 *           values print as written, negative ones too; bool as 0/1;
 *           sint32/sint64 print their zigzag form, uint64 above 2^63
 *           prints negative: there is no schema to know better)
 *   I32/I64 the decimal text of the unsigned little-endian value
 *           (fixed32/fixed64; a float/double prints its bit pattern)
 * Numbers are written to buf. Sets *key and returns the length. */
size_t mtd_pbwire_key_bytes(const struct mtd_pbwire_value *v, char buf[MTD_PBWIRE_NUMBUF], const uint8_t **key);

/* Walking the top-level fields of a whole message in wire order, the
 * way a reader of a known message does without generated code (the xDS
 * DiscoveryResponse, whose resources are only sliced, never copied). */
struct mtd_pbwire_iter {
	const uint8_t *msg;
	size_t pos, len;
};

static inline void mtd_pbwire_iter_init(struct mtd_pbwire_iter *it, const uint8_t *msg, size_t len)
{
	it->msg = msg;
	it->pos = 0;
	it->len = len;
}

/* The next field: 1 with *field and *out set (out->data points into the
 * message), 0 at the end, -EBADMSG when the message is malformed from
 * here (truncated, bad varint or wire type, field 0 or past 2^29 - 1, a
 * tag or a length written in more than 5 bytes, a group: proto3 has
 * none); after -EBADMSG it returns -EBADMSG again. protobuf-c refuses
 * most of these too, not all: it reads a field 0 whose tag takes two
 * bytes or more, a field number past 2^29 - 1 and a 10-byte varint past
 * 64 bits as unknown fields (a decoder on this is the stricter). */
int mtd_pbwire_next(struct mtd_pbwire_iter *it, uint32_t *field, struct mtd_pbwire_value *out);

#endif
