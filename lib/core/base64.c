/* Base64 decoding: see base64.h. */
#include "config.h"

#include "core/base64.h"

#include <errno.h>

static int b64_val(uint8_t c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+' || c == '-')
		return 62;
	if (c == '/' || c == '_')
		return 63;
	return -1;
}

ssize_t mtd_base64_decode(const uint8_t *text, size_t n, uint8_t *out, size_t cap)
{
	uint32_t acc = 0;
	unsigned bits = 0;
	size_t o = 0;

	if (n > 0 && text[n - 1] == '=')
		n--;
	if (n > 0 && text[n - 1] == '=')
		n--;
	if (n % 4 == 1)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		int v = b64_val(text[i]);

		if (v < 0)
			return -EINVAL;
		acc = acc << 6 | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			if (o >= cap)
				return -EINVAL;
			out[o++] = (uint8_t)(acc >> bits);
		}
	}
	if ((acc & ((1u << bits) - 1)) != 0)
		return -EINVAL;
	return (ssize_t)o;
}
