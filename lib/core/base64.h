/* Base64 decoding, standard or URL-safe alphabet (RFC 4648 §4 and §5),
 * padding optional: what gRPC's -bin metadata and proto3 JSON's bytes
 * fields carry. Pure, any thread. */
#ifndef MTD_CORE_BASE64_H
#define MTD_CORE_BASE64_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Decode n characters of text into out (cap bytes; n * 3 / 4 + 1 is
 * always enough). '=' only at the end, at most two; a lone trailing
 * character, any other character, or leftover bits that are not zero
 * (a non-canonical encoding) is refused. The bytes written, or -EINVAL
 * (invalid, or more than cap). */
ssize_t mtd_base64_decode(const uint8_t *text, size_t n, uint8_t *out, size_t cap);

#endif
