#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/bufq.h"
#include "core/slab.h"

/* The calling thread's recycled chunks (bufq.h): a queue's first ones,
 * and full ones. */
struct kept_list {
	struct mtd_bufq_chunk *head;
	unsigned n, max;
};
static _Thread_local struct {
	struct kept_list first, full;
	int8_t keep; /* 0: not decided yet, 1: keep, -1: the environment says no */
} kept = {.first.max = MTD_BUFQ_KEEP_FIRST, .full.max = MTD_BUFQ_KEEP};

/* The list chunks of payload cap are kept on, or NULL: no other size is. */
static struct kept_list *kept_list_of(size_t cap)
{
	return cap == MTD_BUFQ_CHUNK ? &kept.full : cap == MTD_BUFQ_FIRST_CHUNK ? &kept.first : NULL;
}

static struct mtd_bufq_chunk *chunk_new(size_t cap)
{
	struct kept_list *l = kept_list_of(cap);
	if (l && l->head) {
		struct mtd_bufq_chunk *c = l->head;
		l->head = c->next;
		l->n--;
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
	struct kept_list *l = kept_list_of(c->cap);
	if (l && kept.keep > 0 && l->n < l->max) {
		c->next = l->head;
		l->head = c;
		l->n++;
		return;
	}
#endif
	free(c);
}

unsigned mtd_bufq_kept(size_t cap)
{
	const struct kept_list *l = kept_list_of(cap);
	return l ? l->n : 0;
}

static void release(struct kept_list *l)
{
	while (l->head) {
		struct mtd_bufq_chunk *c = l->head;
		l->head = c->next;
		free(c);
	}
	l->n = 0;
}

void mtd_bufq_release_kept(void)
{
	release(&kept.first);
	release(&kept.full);
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
