#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "core/slab.h"

/* Header in front of every block: the class, or LARGE for a plain malloc.
 * 16 bytes keep the payload aligned for any type. */
#define HDR       16
#define LARGE     0xffu
#define MIN_SHIFT 5

struct block_hdr {
	uint32_t cls;
	uint32_t pad[3];
};

static uint32_t keep_limit(const struct mtd_slab *s, unsigned cls)
{
	if (s->passthrough)
		return 0;
	uint32_t n = (uint32_t)(MTD_SLAB_KEEP_BYTES >> (cls + MIN_SHIFT));
	return n < MTD_SLAB_KEEP_MAX ? n : MTD_SLAB_KEEP_MAX;
}

static unsigned size_class(size_t size)
{
	if (size <= ((size_t)1 << MIN_SHIFT))
		return 0;
	if (size > ((size_t)1 << (MIN_SHIFT + MTD_SLAB_CLASSES - 1)))
		return LARGE;
	/* ceil(log2(size)) - MIN_SHIFT, without a loop. */
	return (unsigned)(64 - __builtin_clzll((unsigned long long)size - 1)) - MIN_SHIFT;
}

void *mtd_slab_malloc(struct mtd_slab *s, size_t size)
{
	unsigned cls = size_class(size);
	struct block_hdr *h;
	if (cls != LARGE && s->free[cls]) {
		h = s->free[cls];
		memcpy(&s->free[cls], (char *)h + HDR, sizeof(void *));
		s->n_free[cls]--;
		return (char *)h + HDR;
	}
	size_t payload = cls == LARGE ? size : (size_t)1 << (cls + MIN_SHIFT);
	if (payload > SIZE_MAX - HDR)
		return NULL;
	h = malloc(HDR + payload);
	if (!h)
		return NULL;
	h->cls = cls;
	return (char *)h + HDR;
}

void *mtd_slab_calloc(struct mtd_slab *s, size_t n, size_t size)
{
	if (size && n > SIZE_MAX / size)
		return NULL;
	void *p = mtd_slab_malloc(s, n * size);
	if (p)
		memset(p, 0, n * size);
	return p;
}

void mtd_slab_free(struct mtd_slab *s, void *p)
{
	if (!p)
		return;
	struct block_hdr *h = (struct block_hdr *)((char *)p - HDR);
	unsigned cls = h->cls;
	if (cls == LARGE || s->n_free[cls] >= keep_limit(s, cls)) {
		free(h);
		return;
	}
	memcpy(p, &s->free[cls], sizeof(void *));
	s->free[cls] = h;
	s->n_free[cls]++;
}

void *mtd_slab_realloc(struct mtd_slab *s, void *p, size_t size)
{
	if (!p)
		return mtd_slab_malloc(s, size);
	struct block_hdr *h = (struct block_hdr *)((char *)p - HDR);
	if (h->cls != LARGE && size <= (size_t)1 << (h->cls + MIN_SHIFT))
		return p;
	if (h->cls == LARGE && size_class(size) == LARGE) {
		struct block_hdr *n = realloc(h, HDR + size);
		return n ? (char *)n + HDR : NULL;
	}
	void *q = mtd_slab_malloc(s, size);
	if (!q)
		return NULL;
	size_t old = h->cls == LARGE ? size : (size_t)1 << (h->cls + MIN_SHIFT);
	memcpy(q, p, old < size ? old : size);
	mtd_slab_free(s, p);
	return q;
}

void mtd_slab_drain(struct mtd_slab *s)
{
	for (unsigned c = 0; c < MTD_SLAB_CLASSES; c++) {
		void *h = s->free[c];
		while (h) {
			void *next;
			memcpy(&next, (char *)h + HDR, sizeof(void *));
			free(h);
			h = next;
		}
		s->free[c] = NULL;
		s->n_free[c] = 0;
	}
}

bool mtd_slab_env_passthrough(void)
{
	const char *v = getenv(MTD_SLAB_ENV);
	return v && strcmp(v, "0") == 0;
}
