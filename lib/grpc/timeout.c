#include "config.h"

#include <errno.h>

#include "grpc/grpc.h"

int mtd_grpc_timeout_parse(const char *s, size_t len, int64_t *ns)
{
	/* PROTOCOL-HTTP2: Timeout = TimeoutValue TimeoutUnit,
	 * TimeoutValue = 1*8 ASCII digit. */
	if (len < 2 || len > 9)
		return -EINVAL;
	uint64_t v = 0;
	for (size_t i = 0; i + 1 < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	uint64_t mul;
	switch (s[len - 1]) {
	case 'H':
		mul = 3600ull * 1000000000ull;
		break;
	case 'M':
		mul = 60ull * 1000000000ull;
		break;
	case 'S':
		mul = 1000000000ull;
		break;
	case 'm':
		mul = 1000000ull;
		break;
	case 'u':
		mul = 1000ull;
		break;
	case 'n':
		mul = 1;
		break;
	default:
		return -EINVAL;
	}
	/* 99999999 H overflows int64 nanoseconds: saturate. */
	if (v > (uint64_t)INT64_MAX / mul)
		*ns = INT64_MAX;
	else
		*ns = (int64_t)(v * mul);
	return 0;
}

size_t mtd_grpc_timeout_format(int64_t ns, char *buf)
{
	static const struct {
		char unit;
		int64_t ns;
	} units[] = {
	        {'n', 1}, {'u', 1000}, {'m', 1000000}, {'S', 1000000000}, {'M', 60000000000}, {'H', 3600000000000},
	};
	if (ns < 1)
		ns = 1;
	int64_t v = 0;
	char unit = 'H';
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		/* Round up: the upstream must not give up before we do. */
		v = ns / units[i].ns + (ns % units[i].ns != 0);
		unit = units[i].unit;
		if (v <= 99999999)
			break;
	}
	if (v > 99999999)
		v = 99999999;
	char tmp[10];
	size_t n = 0;
	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	size_t len = 0;
	while (n)
		buf[len++] = tmp[--n];
	buf[len++] = unit;
	buf[len] = '\0';
	return len;
}
