/* One HEADERS block's storage (headers.c). */
#ifndef MTD_HEADERS_T_H
#define MTD_HEADERS_T_H

#include <stdint.h>

/* Header storage of one HEADERS block (headers.c): its fields in one
 * buffer from the owning worker's slab, which every function below is
 * given. No nghttp2_nv array is kept (it would be 40 bytes per
 * field, and nghttp2 copies the array on submit anyway): mtd_headers_nv
 * and mtd_headers_next give nv entries pointing into the buffer, flagged
 * NO_COPY, valid until the block changes. A block is under 2 GiB (the
 * header list limits are 16 MiB). */
struct mtd_headers {
	uint8_t *mem;
	uint32_t n; /* fields */
	uint32_t mem_len, mem_cap;
};

#endif
