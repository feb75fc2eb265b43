#include "config.h"

#include <nghttp2/nghttp2.h>

#include "grpc/grpc.h"

static const char *const status_names[] = {
        "OK",        "CANCELLED",       "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
        "NOT_FOUND", "ALREADY_EXISTS",  "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
        "ABORTED",   "OUT_OF_RANGE",    "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
        "DATA_LOSS", "UNAUTHENTICATED",
};

const char *mtd_grpc_status_name(int code)
{
	if (code < 0 || code >= (int)(sizeof(status_names) / sizeof(status_names[0])))
		return "UNKNOWN_STATUS";
	return status_names[code];
}

enum mtd_grpc_status mtd_grpc_status_from_h2_error(uint32_t h2_error)
{
	/* gRPC PROTOCOL-HTTP2 "Errors": RST_STREAM code -> status. */
	switch (h2_error) {
	case NGHTTP2_NO_ERROR:
	case NGHTTP2_PROTOCOL_ERROR:
	case NGHTTP2_INTERNAL_ERROR:
	case NGHTTP2_FLOW_CONTROL_ERROR:
	case NGHTTP2_SETTINGS_TIMEOUT:
	case NGHTTP2_FRAME_SIZE_ERROR:
	case NGHTTP2_COMPRESSION_ERROR:
	case NGHTTP2_CONNECT_ERROR:
		return MTD_GRPC_INTERNAL;
	case NGHTTP2_REFUSED_STREAM:
		return MTD_GRPC_UNAVAILABLE;
	case NGHTTP2_CANCEL:
		return MTD_GRPC_CANCELLED;
	case NGHTTP2_ENHANCE_YOUR_CALM:
		return MTD_GRPC_RESOURCE_EXHAUSTED;
	case NGHTTP2_INADEQUATE_SECURITY:
		return MTD_GRPC_PERMISSION_DENIED;
	default:
		return MTD_GRPC_INTERNAL;
	}
}

enum mtd_grpc_status mtd_grpc_status_from_http(int http_status)
{
	/* gRPC http-grpc-status-mapping.md */
	switch (http_status) {
	case 400:
		return MTD_GRPC_INTERNAL;
	case 401:
		return MTD_GRPC_UNAUTHENTICATED;
	case 403:
		return MTD_GRPC_PERMISSION_DENIED;
	case 404:
		return MTD_GRPC_UNIMPLEMENTED;
	case 429:
	case 502:
	case 503:
	case 504:
		return MTD_GRPC_UNAVAILABLE;
	default:
		return MTD_GRPC_UNKNOWN;
	}
}

static int digits(const uint8_t *v, size_t len, size_t min, size_t max)
{
	if (len < min || len > max)
		return -1;
	int n = 0;
	for (size_t i = 0; i < len; i++) {
		if (v[i] < '0' || v[i] > '9')
			return -1;
		n = n * 10 + (v[i] - '0');
	}
	return n;
}

int mtd_grpc_status_parse(const uint8_t *v, size_t len)
{
	return digits(v, len, 1, 3);
}

int mtd_http_status_parse(const uint8_t *v, size_t len)
{
	return digits(v, len, 3, 3);
}

size_t mtd_grpc_message_encode(const char *msg, char *out, size_t cap)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;

	if (cap == 0)
		return 0;
	for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
		/* PROTOCOL-HTTP2: percent-encode outside 0x20..0x7E and '%'. */
		bool plain = *p >= 0x20 && *p <= 0x7e && *p != '%';
		size_t need = plain ? 1 : 3;
		if (o + need >= cap)
			break;
		if (plain) {
			out[o++] = (char)*p;
		} else {
			out[o++] = '%';
			out[o++] = hex[*p >> 4];
			out[o++] = hex[*p & 15];
		}
	}
	out[o] = '\0';
	return o;
}
