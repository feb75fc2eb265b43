/* UTF-8 as RFC 3629 defines it: no overlong forms, no surrogates, nothing
 * above U+10FFFF. One reading for every place that must refuse, repair or
 * recognise text (config sniffing, registry records, JSON and OTLP output). */
#ifndef MTD_CORE_UTF8_H
#define MTD_CORE_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* The length (1..4) of the valid UTF-8 sequence at p, n > 0 bytes left;
 * 0 when the byte at p does not start one (a stray continuation byte, an
 * overlong form, a surrogate, above U+10FFFF, or cut short by n). */
size_t mtd_utf8_seq(const unsigned char *p, size_t n);

/* Whether the n bytes at p are valid UTF-8 throughout. */
bool mtd_utf8_valid(const char *p, size_t n);

/* The n bytes at src into dst as valid UTF-8, for a protobuf string a
 * strict peer decodes (a collector's, an xDS server's: one that is not
 * UTF-8 fails the whole message): a byte that is not part of a valid
 * sequence, one cut short by a length limit too, is written as '?'. dst
 * may be src. */
void mtd_utf8_copy(char *dst, const char *src, size_t n);

#endif
