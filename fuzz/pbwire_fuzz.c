/* libFuzzer target for lib/pbwire (every parser of outside input has one).
 *
 * Input layout: byte 0 picks the path (its low 3 bits + 1 = depth, the
 * field numbers come from bytes 1..depth, each mod 16 + 1, so the paths hit
 * fields that small random messages contain); the rest is the message.
 * Every call is checked for in-bounds results; the gRPC entry point and
 * the key-bytes formatter run on the same input. Build and run:
 * fuzz/build.sh. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pbwire/pbwire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int rc, const struct mtd_pbwire_value *v, const uint8_t *msg, size_t len)
{
	char num[MTD_PBWIRE_NUMBUF];
	const uint8_t *key;
	size_t n;

	if (rc != 1 && rc != 0 && rc != -EAGAIN && rc != -EBADMSG && rc != -ENOTSUP)
		abort();
	if (rc != 1)
		return;
	if (v->type == MTD_PBWIRE_LEN && (v->data < msg || v->len > len || (size_t)(v->data - msg) > len - v->len))
		abort();
	n = mtd_pbwire_key_bytes(v, num, &key);
	if (v->type != MTD_PBWIRE_LEN && (n == 0 || n >= sizeof(num)))
		abort();
	if (n > 0 && key == NULL)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint32_t path[MTD_PBWIRE_MAX_DEPTH];
	struct mtd_pbwire_value v;
	size_t depth, skip;
	const uint8_t *msg;
	size_t len;
	int rc;

	if (size < 1)
		return 0;
	depth = (size_t)(data[0] & 7) + 1;
	if (size < 1 + depth)
		return 0;
	for (size_t i = 0; i < depth; i++)
		path[i] = (uint32_t)(data[1 + i] % 16) + 1;
	skip = 1 + depth;
	msg = data + skip;
	len = size - skip;

	rc = mtd_pbwire_find(msg, len, true, path, depth, &v);
	check(rc, &v, msg, len);
	rc = mtd_pbwire_find(msg, len, false, path, depth, &v);
	check(rc, &v, msg, len);
	if (rc == 0) /* a partial read never claims "absent" */
		abort();
	rc = mtd_pbwire_find_grpc(msg, len, 64, path, depth, &v);
	check(rc, &v, msg, len);
	return 0;
}
