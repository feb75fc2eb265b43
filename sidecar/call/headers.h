/* Header blocks (headers.c): add, walk, find, move. Worker thread. */
#ifndef MTD_HEADERS_H
#define MTD_HEADERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <nghttp2/nghttp2.h>

#include "sidecar/call/headers-t.h"

struct mtd_slab;

/* Append a field; flags: NGHTTP2_NV_FLAG_NO_INDEX if the sender encoded it
 * as never indexed (nghttp2's on_header flags), which mtd_headers_next
 * gives back so that it is sent on the same way (RFC 7541 §7.1.3), else 0.
 * 0 or -ENOMEM. */
int mtd_headers_add(struct mtd_headers *h, struct mtd_slab *slab, const uint8_t *name, size_t nlen,
                    const uint8_t *value, size_t vlen, uint8_t flags);
void mtd_headers_clear(struct mtd_headers *h, struct mtd_slab *slab);
/* The field after *off (0: the first) in *nv, *off moved past it; false
 * after the last. */
bool mtd_headers_next(const struct mtd_headers *h, uint32_t *off, nghttp2_nv *nv);
/* Every field, in order, into out (room for h->n); returns h->n. */
size_t mtd_headers_nv(const struct mtd_headers *h, nghttp2_nv *out);
/* Room for the nv array a submit builds: `stack` (MTD_STACK_NV entries)
 * when n fit, else malloc'd; NULL when out of memory. Give it back with
 * mtd_nv_release once nghttp2 has copied it (on submit). */
#define MTD_STACK_NV 32
static inline nghttp2_nv *mtd_nv_room(nghttp2_nv *stack, size_t n)
{
	return n <= MTD_STACK_NV ? stack : malloc(n * sizeof(*stack));
}
static inline void mtd_nv_release(nghttp2_nv *nva, const nghttp2_nv *stack)
{
	if (nva != stack)
		free(nva);
}
/* The first field called name (len bytes, len > 0), in *buf (returned),
 * or NULL. */
const nghttp2_nv *mtd_headers_find_n(const struct mtd_headers *h, const char *name, size_t len, nghttp2_nv *buf);
/* The same for a NUL-terminated name (its length folds for a literal). */
static inline const nghttp2_nv *mtd_headers_find(const struct mtd_headers *h, const char *name, nghttp2_nv *buf)
{
	return mtd_headers_find_n(h, name, strlen(name), buf);
}
/* How many fields are called name (len bytes, len > 0), counting up to
 * max at most (the walk stops there). */
unsigned mtd_headers_count_n(const struct mtd_headers *h, const char *name, size_t len, unsigned max);
/* True for a connection-specific field, which never crosses the proxy
 * in either direction (RFC 9113 §8.2.2): connection, keep-alive,
 * proxy-connection, transfer-encoding, upgrade. nv's name is lower case
 * (nghttp2 rejects upper case). */
bool mtd_headers_hop_by_hop(const nghttp2_nv *nv);
/* Move src's fields into dst (dst cleared first); src is left empty. */
void mtd_headers_move(struct mtd_headers *dst, struct mtd_headers *src, struct mtd_slab *slab);
/* The block's size as RFC 9113 §6.5.2 counts it: name + value + 32 per
 * field (what SETTINGS_MAX_HEADER_LIST_SIZE bounds). */
static inline size_t mtd_headers_size(const struct mtd_headers *h)
{
	return (size_t)h->mem_len + 22 * (size_t)h->n; /* mem holds name + value + 10 per field */
}

#endif
