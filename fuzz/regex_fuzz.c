/* libFuzzer target for lib/route/regex.c.
 *
 * The input is a pattern, then a NUL, then a subject. A pattern either
 * compiles or is refused with a reason in printable ASCII that says
 * where ("at byte N") or which cap it is over; what compiles matches the subject (and itself)
 * in time linear in them, which libFuzzer's -timeout watches, and gives
 * the same answer twice (the program is immutable). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "route/regex.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nul = memchr(data, 0, size);
	size_t plen = nul ? (size_t)(nul - data) : size;
	const char *subject = nul ? (const char *)nul + 1 : "";
	size_t slen = nul ? size - plen - 1 : 0;
	struct mtd_regex *re = NULL;
	char why[256] = "";

	int rc = mtd_regex_compile((const char *)data, plen, &re, why, sizeof(why));
	if (rc == -EINVAL) {
		if (re != NULL || (strstr(why, " at byte ") == NULL && strstr(why, " over ") == NULL))
			abort();
		for (const char *c = why; *c; c++)
			if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f)
				abort(); /* it goes into a NACK's text */
		return 0;
	}
	if (rc != 0 || re == NULL || strlen(mtd_regex_pattern(re)) > plen)
		abort();
	bool m = mtd_regex_match(re, subject, slen);
	if (mtd_regex_match(re, subject, slen) != m)
		abort();
	(void)mtd_regex_match(re, (const char *)data, plen);
	mtd_regex_free(re);
	return 0;
}
