/* Header storage: one HEADERS block as nghttp2_nv entries pointing into
 * one growing buffer, both from the worker's slab (the caller's). */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "sidecar/sidecar.h"

/* Until mtd_headers_finish() the nv name/value fields hold offsets into
 * h->mem (which may move while growing); finish turns them into pointers. */
int mtd_headers_add(struct mtd_headers *h, struct mtd_slab *slab, const uint8_t *name, size_t nlen,
                    const uint8_t *value, size_t vlen)
{
	/* 32-bit counts: a block stays under 2 GiB (the limits are 16 MiB),
	 * so its capacity, a power of two, fits too. */
	if (nlen > UINT32_MAX / 4 || vlen > UINT32_MAX / 4 || h->mem_len + nlen + vlen + 2 > UINT32_MAX / 2)
		return -ENOMEM;
	/* Start small: a gRPC response's headers and trailers are 2 or 3
	 * fields, and a call holds three blocks for its whole life (issue 6:
	 * 16 fields and 512 bytes each were 4.7 KiB per call in flight). */
	if (h->n == h->cap) {
		uint32_t cap = h->cap ? h->cap * 2 : 6;
		nghttp2_nv *nv = mtd_slab_realloc(slab, h->nv, cap * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		h->nv = nv;
		h->cap = cap;
	}
	size_t need = nlen + vlen + 2;
	if (h->mem_cap - h->mem_len < need) {
		size_t cap = h->mem_cap ? h->mem_cap : 128;
		while (cap - h->mem_len < need)
			cap *= 2;
		uint8_t *mem = mtd_slab_realloc(slab, h->mem, cap);
		if (!mem)
			return -ENOMEM;
		h->mem = mem;
		h->mem_cap = (uint32_t)cap;
	}
	size_t noff = h->mem_len;
	memcpy(h->mem + noff, name, nlen);
	h->mem[noff + nlen] = 0;
	size_t voff = noff + nlen + 1;
	memcpy(h->mem + voff, value, vlen);
	h->mem[voff + vlen] = 0;
	h->mem_len = (uint32_t)(voff + vlen + 1);
	h->nv[h->n++] = (nghttp2_nv){(uint8_t *)(uintptr_t)noff, (uint8_t *)(uintptr_t)voff, nlen, vlen,
	                             NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE};
	return 0;
}

void mtd_headers_finish(struct mtd_headers *h)
{
	for (size_t i = 0; i < h->n; i++) {
		h->nv[i].name = h->mem + (uintptr_t)h->nv[i].name;
		h->nv[i].value = h->mem + (uintptr_t)h->nv[i].value;
	}
}

void mtd_headers_clear(struct mtd_headers *h, struct mtd_slab *slab)
{
	mtd_slab_free(slab, h->nv);
	mtd_slab_free(slab, h->mem);
	memset(h, 0, sizeof(*h));
}

const nghttp2_nv *mtd_headers_find(const struct mtd_headers *h, const char *name)
{
	size_t len = strlen(name);
	for (size_t i = 0; i < h->n; i++)
		if (h->nv[i].namelen == len && memcmp(h->nv[i].name, name, len) == 0)
			return &h->nv[i];
	return NULL;
}

void mtd_headers_move(struct mtd_headers *dst, struct mtd_headers *src, struct mtd_slab *slab)
{
	mtd_headers_clear(dst, slab);
	*dst = *src;
	memset(src, 0, sizeof(*src));
}
