/* Header storage: one HEADERS block as one growing buffer from the
 * worker's slab (the caller's), its fields one after another:
 *
 *   uint32 name length, uint32 value length, name, NUL, value, NUL
 *
 * No nghttp2_nv array is kept: whoever submits a block builds one on the
 * stack (nghttp2 copies the array on submit and, with the NO_COPY flags,
 * points into this buffer until the frame is packed), so a block costs its
 * bytes plus 10 per field instead of 40 more per field. */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "core/slab.h"
#include "sidecar/call/headers.h"

#define FIELD_HDR 8 /* the two lengths */
/* In the name length: the sender encoded the field as never indexed, and
 * an intermediary must send it on the same way (RFC 7541 §7.1.3: a
 * credential marked so must not land in the next hop's HPACK table). */
#define FIELD_NEVER_INDEXED 0x80000000u

int mtd_headers_add(struct mtd_headers *h, struct mtd_slab *slab, const uint8_t *name, size_t nlen,
                    const uint8_t *value, size_t vlen, uint8_t flags)
{
	/* 32-bit counts: a block stays under 2 GiB (the limits are 16 MiB),
	 * so its capacity, a power of two, fits too. */
	if (nlen > UINT32_MAX / 4 || vlen > UINT32_MAX / 4 || h->mem_len + FIELD_HDR + nlen + vlen + 2 > UINT32_MAX / 2)
		return -ENOMEM;
	size_t need = FIELD_HDR + nlen + vlen + 2;
	if (h->mem_cap - h->mem_len < need) {
		/* Start small: a gRPC response's headers and trailers are 2 or 3
		 * fields, and a call holds three blocks for its whole life. */
		size_t cap = h->mem_cap ? h->mem_cap : 128;
		while (cap - h->mem_len < need)
			cap *= 2;
		uint8_t *mem = mtd_slab_realloc(slab, h->mem, cap);
		if (!mem)
			return -ENOMEM;
		h->mem = mem;
		h->mem_cap = (uint32_t)cap;
	}
	uint8_t *p = h->mem + h->mem_len;
	uint32_t lens[2] = {(uint32_t)nlen | (flags & NGHTTP2_NV_FLAG_NO_INDEX ? FIELD_NEVER_INDEXED : 0),
	                    (uint32_t)vlen};
	memcpy(p, lens, FIELD_HDR);
	p += FIELD_HDR;
	memcpy(p, name, nlen);
	p[nlen] = 0;
	p += nlen + 1;
	memcpy(p, value, vlen);
	p[vlen] = 0;
	h->mem_len += (uint32_t)need;
	h->n++;
	return 0;
}

bool mtd_headers_next(const struct mtd_headers *h, uint32_t *off, nghttp2_nv *nv)
{
	if (*off >= h->mem_len)
		return false;
	uint8_t *p = h->mem + *off;
	uint32_t lens[2];
	memcpy(lens, p, FIELD_HDR);
	uint8_t flags = NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE;
	if (lens[0] & FIELD_NEVER_INDEXED)
		flags |= NGHTTP2_NV_FLAG_NO_INDEX;
	lens[0] &= ~FIELD_NEVER_INDEXED;
	*nv = (nghttp2_nv){p + FIELD_HDR, p + FIELD_HDR + lens[0] + 1, lens[0], lens[1], flags};
	*off += FIELD_HDR + lens[0] + lens[1] + 2;
	return true;
}

size_t mtd_headers_nv(const struct mtd_headers *h, nghttp2_nv *out)
{
	size_t n = 0;
	uint32_t off = 0;
	while (mtd_headers_next(h, &off, &out[n]))
		n++;
	return n;
}

void mtd_headers_clear(struct mtd_headers *h, struct mtd_slab *slab)
{
	mtd_slab_free(slab, h->mem);
	memset(h, 0, sizeof(*h));
}

const nghttp2_nv *mtd_headers_find_n(const struct mtd_headers *h, const char *name, size_t len, nghttp2_nv *buf)
{
	/* Walk the lengths; build the nv of the match only. */
	for (uint32_t off = 0; off < h->mem_len;) {
		const uint8_t *p = h->mem + off;
		uint32_t lens[2];
		memcpy(lens, p, FIELD_HDR);
		uint32_t nlen = lens[0] & ~FIELD_NEVER_INDEXED;
		if (nlen == len && p[FIELD_HDR] == (uint8_t)name[0] && memcmp(p + FIELD_HDR, name, len) == 0) {
			mtd_headers_next(h, &off, buf);
			return buf;
		}
		off += FIELD_HDR + nlen + lens[1] + 2;
	}
	return NULL;
}

unsigned mtd_headers_count_n(const struct mtd_headers *h, const char *name, size_t len, unsigned max)
{
	unsigned n = 0;
	for (uint32_t off = 0; off < h->mem_len && n < max;) {
		const uint8_t *p = h->mem + off;
		uint32_t lens[2];
		memcpy(lens, p, FIELD_HDR);
		uint32_t nlen = lens[0] & ~FIELD_NEVER_INDEXED;
		if (nlen == len && p[FIELD_HDR] == (uint8_t)name[0] && memcmp(p + FIELD_HDR, name, len) == 0)
			n++;
		off += FIELD_HDR + nlen + lens[1] + 2;
	}
	return n;
}

bool mtd_headers_hop_by_hop(const nghttp2_nv *nv)
{
	switch (nv->namelen) {
	case 7:
		return memcmp(nv->name, "upgrade", 7) == 0;
	case 10:
		return memcmp(nv->name, "connection", 10) == 0 || memcmp(nv->name, "keep-alive", 10) == 0;
	case 16:
		return memcmp(nv->name, "proxy-connection", 16) == 0;
	case 17:
		return memcmp(nv->name, "transfer-encoding", 17) == 0;
	default:
		return false;
	}
}

void mtd_headers_move(struct mtd_headers *dst, struct mtd_headers *src, struct mtd_slab *slab)
{
	mtd_headers_clear(dst, slab);
	*dst = *src;
	memset(src, 0, sizeof(*src));
}
