/* gRPC-over-HTTP/2 wire rules that need no socket: message framing,
 * grpc-timeout, status codes and grpc-message encoding.
 * Reference: gRPC PROTOCOL-HTTP2.md ("the spec" below). */
#ifndef MTD_GRPC_H
#define MTD_GRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Status codes (the spec's "Status codes and their use"). */
enum mtd_grpc_status {
	MTD_GRPC_OK = 0,
	MTD_GRPC_CANCELLED = 1,
	MTD_GRPC_UNKNOWN = 2,
	MTD_GRPC_INVALID_ARGUMENT = 3,
	MTD_GRPC_DEADLINE_EXCEEDED = 4,
	MTD_GRPC_NOT_FOUND = 5,
	MTD_GRPC_ALREADY_EXISTS = 6,
	MTD_GRPC_PERMISSION_DENIED = 7,
	MTD_GRPC_RESOURCE_EXHAUSTED = 8,
	MTD_GRPC_FAILED_PRECONDITION = 9,
	MTD_GRPC_ABORTED = 10,
	MTD_GRPC_OUT_OF_RANGE = 11,
	MTD_GRPC_UNIMPLEMENTED = 12,
	MTD_GRPC_INTERNAL = 13,
	MTD_GRPC_UNAVAILABLE = 14,
	MTD_GRPC_DATA_LOSS = 15,
	MTD_GRPC_UNAUTHENTICATED = 16,
};

/* "UNAVAILABLE" etc.; "UNKNOWN_STATUS" outside 0..16. */
const char *mtd_grpc_status_name(int code);

/* The status a client must see when the peer resets a stream with an
 * HTTP/2 error code (the spec's "Errors" table). */
enum mtd_grpc_status mtd_grpc_status_from_h2_error(uint32_t h2_error);

/* The status for a non-200 HTTP response without grpc-status (gRPC
 * http-grpc-status-mapping.md). */
enum mtd_grpc_status mtd_grpc_status_from_http(int http_status);

/* A grpc-status value (1 to 3 ASCII digits, as PROTOCOL-HTTP2 writes the
 * code in decimal): the number, or -1 when it is not that (empty, a sign,
 * a space, a letter, 4 digits or more). What the code means is the
 * caller's (codes above 16 are UNKNOWN's to report). */
int mtd_grpc_status_parse(const uint8_t *v, size_t len);
/* An HTTP :status value: exactly 3 ASCII digits (RFC 9110 §15), else -1. */
int mtd_http_status_parse(const uint8_t *v, size_t len);

/* Percent-encode msg for grpc-message (the spec: bytes outside 0x20..0x7E and
 * '%' become %XX). Writes at most cap-1 bytes plus NUL into out, never
 * splitting an escape; returns the length written. */
size_t mtd_grpc_message_encode(const char *msg, char *out, size_t cap);

/* grpc-timeout: TimeoutValue (1..8 digits) + unit (H M S m u n).
 * Returns 0 and the duration in *ns (saturating at INT64_MAX), or -EINVAL. */
int mtd_grpc_timeout_parse(const char *s, size_t len, int64_t *ns);

/* Format a positive duration with the finest unit that fits 8 digits,
 * rounding up so a forwarded deadline is never earlier than ours would
 * fire... and never 0. buf must hold MTD_GRPC_TIMEOUT_BUFLEN bytes.
 * Returns the length (without NUL). */
#define MTD_GRPC_TIMEOUT_BUFLEN 12
size_t mtd_grpc_timeout_format(int64_t ns, char *buf);

/* Length-prefixed message scanner: follows message boundaries in a DATA
 * stream arriving in arbitrary chunks, without copying or buffering the
 * payload. The spec: Length-Prefixed-Message = Compressed-Flag(1)
 * Message-Length(4, big endian) Message. */
struct mtd_grpc_scanner {
	uint8_t hdr[5];
	uint8_t hdr_have;   /* prefix bytes seen of the current message */
	uint32_t remaining; /* payload bytes still to come */
	uint32_t messages;  /* complete prefixes seen (stops at UINT32_MAX) */
};

/* Scanner verdicts. */
enum {
	MTD_GRPC_SCAN_TOO_BIG = -1,  /* a prefix announced > max bytes */
	MTD_GRPC_SCAN_BAD_FLAG = -2, /* compressed flag neither 0 nor 1 */
};

/* Feed len bytes. Returns 0, or a MTD_GRPC_SCAN_* code (the stream is then
 * unusable). If first_msg is non-NULL it is called once for the first
 * message's payload chunks (offset within the message, bytes), which is how
 * a hash key is read from the first request message. */
typedef void mtd_grpc_first_msg_cb(void *arg, uint32_t msg_len, uint32_t off, const uint8_t *p, size_t n);
int mtd_grpc_scan(struct mtd_grpc_scanner *s, const uint8_t *data, size_t len, uint32_t max,
                  mtd_grpc_first_msg_cb *first_msg, void *arg);

/* True when the stream so far ends on a message boundary. */
static inline bool mtd_grpc_scan_complete(const struct mtd_grpc_scanner *s)
{
	return s->hdr_have == 0 && s->remaining == 0;
}

#endif
