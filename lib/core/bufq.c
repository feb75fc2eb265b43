#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/bufq.h"
#include "core/slab.h"

/* The calling thread's recycled MTD_BUFQ_CHUNK chunks (bufq.h). */
static _Thread_local struct {
	struct mtd_bufq_chunk *head;
	unsigned n;
	int8_t keep; /* 0: not decided yet, 1: keep, -1: the environment says no */
} kept;

static struct mtd_bufq_chunk *chunk_new(size_t cap)
{
	if (cap == MTD_BUFQ_CHUNK && kept.head) {
		struct mtd_bufq_chunk *c = kept.head;
		kept.head = c->next;
		kept.n--;
		return c;
	}
	return malloc(sizeof(struct mtd_bufq_chunk) + cap);
}

static void chunk_free(struct mtd_bufq_chunk *c)
{
	if (--c->refs > 0)
		return; /* a span still holds it */
#if MTD_BUFQ_KEEP > 0
	if (kept.keep == 0)
		kept.keep = mtd_slab_env_passthrough() ? -1 : 1;
	if (c->cap == MTD_BUFQ_CHUNK && kept.keep > 0 && kept.n < MTD_BUFQ_KEEP) {
		c->next = kept.head;
		kept.head = c;
		kept.n++;
		return;
	}
#endif
	free(c);
}

unsigned mtd_bufq_kept(void)
{
	return kept.n;
}

void mtd_bufq_release_kept(void)
{
	while (kept.head) {
		struct mtd_bufq_chunk *c = kept.head;
		kept.head = c->next;
		free(c);
	}
	kept.n = 0;
}

int mtd_bufq_append(struct mtd_bufq *q, const uint8_t *p, size_t n)
{
	struct mtd_bufq_chunk *t = q->tail;

	if (n == 0)
		return 0;
	if (t && t->cap - t->end >= n) {
		memcpy(t->data + t->end, p, n);
		t->end += n;
		q->len += n;
		return 0;
	}
	/* Fill what is left of the tail, then one new chunk for the rest. */
	if (t && t->cap > t->end) {
		size_t k = t->cap - t->end;
		memcpy(t->data + t->end, p, k);
		t->end += k;
		q->len += k;
		p += k;
		n -= k;
	}
	/* Start small (most gRPC messages are small, and a call holds a queue
	 * per direction), then double up to MTD_BUFQ_CHUNK while it streams. */
	size_t cap = t ? t->cap * 2 : MTD_BUFQ_FIRST_CHUNK;
	if (cap > MTD_BUFQ_CHUNK)
		cap = MTD_BUFQ_CHUNK;
	if (cap < n)
		cap = n;
	struct mtd_bufq_chunk *c = chunk_new(cap);
	if (!c)
		return -ENOMEM;
	c->next = NULL;
	c->start = 0;
	c->end = n;
	c->cap = cap;
	c->refs = 1;
	memcpy(c->data, p, n);
	if (t)
		t->next = c;
	else
		q->head = c;
	q->tail = c;
	q->len += n;
	return 0;
}

size_t mtd_bufq_read(struct mtd_bufq *q, uint8_t *out, size_t n)
{
	return mtd_bufq_drop(q, mtd_bufq_copy_at(q, 0, out, n));
}

void mtd_bufq_clear(struct mtd_bufq *q)
{
	struct mtd_bufq_chunk *c = q->head;
	while (c) {
		struct mtd_bufq_chunk *next = c->next;
		chunk_free(c);
		c = next;
	}
	q->head = q->tail = NULL;
	q->len = 0;
}

size_t mtd_bufq_copy_at(const struct mtd_bufq *q, size_t off, uint8_t *out, size_t n)
{
	const struct mtd_bufq_chunk *c = q->head;
	size_t done = 0;

	while (c && off >= c->end - c->start) {
		off -= c->end - c->start;
		c = c->next;
	}
	for (; c && done < n; c = c->next, off = 0) {
		size_t k = c->end - c->start - off;
		if (k > n - done)
			k = n - done;
		memcpy(out + done, c->data + c->start + off, k);
		done += k;
	}
	return done;
}

size_t mtd_bufq_ref_at(const struct mtd_bufq *q, size_t off, size_t n, struct mtd_bufq_span *out, size_t max,
                       size_t *covered)
{
	struct mtd_bufq_chunk *c = q->head;
	size_t done = 0, k = 0;

	while (c && off >= c->end - c->start) {
		off -= c->end - c->start;
		c = c->next;
	}
	for (; c && done < n && k < max; c = c->next, off = 0) {
		size_t len = c->end - c->start - off;
		if (len > n - done)
			len = n - done;
		c->refs++;
		out[k++] = (struct mtd_bufq_span){c, c->data + c->start + off, len};
		done += len;
	}
	*covered = done;
	return k;
}

void mtd_bufq_unref(struct mtd_bufq_chunk *c)
{
	chunk_free(c);
}

size_t mtd_bufq_drop(struct mtd_bufq *q, size_t n)
{
	size_t done = 0;

	while (done < n && q->head) {
		struct mtd_bufq_chunk *c = q->head;
		size_t k = c->end - c->start;
		if (k > n - done)
			k = n - done;
		c->start += k;
		done += k;
		if (c->start == c->end) {
			q->head = c->next;
			if (!q->head)
				q->tail = NULL;
			chunk_free(c);
		}
	}
	q->len -= done;
	return done;
}
