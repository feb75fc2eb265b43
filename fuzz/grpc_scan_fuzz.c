/* libFuzzer target for the gRPC length-prefixed message scanner
 * (lib/grpc/frame.c).
 *
 * Byte 0 is a chunking seed, byte 1 picks the size limit; the rest is a
 * DATA stream. The stream is scanned once whole and once cut into chunks
 * of pseudo-random sizes: the scanner must reach the same verdict, count
 * the same messages and end in the same state either way (it is fed by
 * DATA frames of any size), and the first-message callback must only ever
 * see in-bounds offsets of the first message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grpc/grpc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct first {
	uint32_t len;
	uint64_t seen;
	int calls_with_other_len;
};

static void on_first(void *arg, uint32_t msg_len, uint32_t off, const uint8_t *p, size_t n)
{
	struct first *f = arg;
	if (f->seen == 0 && off == 0)
		f->len = msg_len;
	if (msg_len != f->len || off != f->seen || n > msg_len || off > msg_len - n || (n && !p))
		abort();
	f->seen += n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	uint32_t rng = data[0] * 2654435761u + 1;
	uint32_t max = data[1] < 128 ? (uint32_t)data[1] * 64 : UINT32_MAX >> (data[1] & 31);
	data += 2;
	size -= 2;

	struct mtd_grpc_scanner whole = {0}, cut = {0};
	struct first fw = {0}, fc = {0};
	int rw = mtd_grpc_scan(&whole, data, size, max, on_first, &fw);

	int rc = 0;
	size_t off = 0;
	while (off < size && rc == 0) {
		rng = rng * 1103515245u + 12345u;
		size_t n = 1 + (rng >> 16) % 97;
		if (n > size - off)
			n = size - off;
		rc = mtd_grpc_scan(&cut, data + off, n, max, on_first, &fc);
		off += n;
	}
	if ((rw == 0) != (rc == 0))
		abort();
	if (rw == 0 && (whole.messages != cut.messages || whole.remaining != cut.remaining ||
	                whole.hdr_have != cut.hdr_have || fw.seen != fc.seen))
		abort();
	if (rw == 0 && mtd_grpc_scan_complete(&whole) != mtd_grpc_scan_complete(&cut))
		abort();
	return 0;
}
