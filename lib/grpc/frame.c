#include "config.h"

#include <string.h>

#include "grpc/grpc.h"

int mtd_grpc_scan(struct mtd_grpc_scanner *s, const uint8_t *data, size_t len, uint32_t max,
                  mtd_grpc_first_msg_cb *first_msg, void *arg)
{
	while (len > 0) {
		if (s->remaining > 0) {
			size_t n = len < s->remaining ? len : s->remaining;
			if (first_msg && s->messages == 1) {
				uint32_t msg_len = (uint32_t)s->hdr[1] << 24 | (uint32_t)s->hdr[2] << 16 |
				                   (uint32_t)s->hdr[3] << 8 | s->hdr[4];
				first_msg(arg, msg_len, msg_len - s->remaining, data, n);
			}
			s->remaining -= (uint32_t)n;
			data += n;
			len -= n;
			continue;
		}
		size_t n = 5u - s->hdr_have;
		if (n > len)
			n = len;
		memcpy(s->hdr + s->hdr_have, data, n);
		s->hdr_have = (uint8_t)(s->hdr_have + n);
		data += n;
		len -= n;
		if (s->hdr_have < 5)
			break;
		s->hdr_have = 0;
		if (s->messages < UINT32_MAX)
			s->messages++; /* 16 bytes a scanner: two per call in flight */
		/* PROTOCOL-HTTP2: Compressed-Flag is 0 or 1. */
		if (s->hdr[0] > 1)
			return MTD_GRPC_SCAN_BAD_FLAG;
		uint32_t msg_len =
		        (uint32_t)s->hdr[1] << 24 | (uint32_t)s->hdr[2] << 16 | (uint32_t)s->hdr[3] << 8 | s->hdr[4];
		if (msg_len > max)
			return MTD_GRPC_SCAN_TOO_BIG;
		s->remaining = msg_len;
		if (first_msg && s->messages == 1 && msg_len == 0)
			first_msg(arg, 0, 0, NULL, 0);
	}
	return 0;
}
