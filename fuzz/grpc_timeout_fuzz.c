/* libFuzzer target for grpc-timeout (lib/grpc/timeout.c).
 *
 * Any input either parses to a positive duration or is refused; what
 * parses must format back into a header that parses again to a duration
 * no earlier than the original (a forwarded deadline never fires before
 * ours, the contract in grpc.h), in at most 8 digits plus a unit. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grpc/grpc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int64_t ns;
	if (mtd_grpc_timeout_parse((const char *)data, size, &ns) < 0)
		return 0;
	if (ns < 0)
		abort();
	if (ns == 0)
		return 0;
	char buf[MTD_GRPC_TIMEOUT_BUFLEN];
	size_t len = mtd_grpc_timeout_format(ns, buf);
	if (len < 2 || len > 9 || buf[len] != 0)
		abort();
	int64_t back;
	if (mtd_grpc_timeout_parse(buf, len, &back) < 0 || back < ns)
		abort();
	return 0;
}
