#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "core/timers.h"

static void place(struct mtd_timers *h, uint32_t i, struct mtd_timer *t)
{
	h->heap[i] = t;
	t->slot = i + 1;
}

/* Move the timer at index i up or down until the heap order holds. */
static void sift(struct mtd_timers *h, uint32_t i)
{
	struct mtd_timer *t = h->heap[i];
	while (i > 0) {
		uint32_t parent = (i - 1) / 2;
		if (h->heap[parent]->at_ns <= t->at_ns)
			break;
		place(h, i, h->heap[parent]);
		i = parent;
	}
	for (;;) {
		uint32_t child = 2 * i + 1;
		if (child >= h->n)
			break;
		if (child + 1 < h->n && h->heap[child + 1]->at_ns < h->heap[child]->at_ns)
			child++;
		if (h->heap[child]->at_ns >= t->at_ns)
			break;
		place(h, i, h->heap[child]);
		i = child;
	}
	place(h, i, t);
}

int mtd_timers_add(struct mtd_timers *h, struct mtd_timer *t, int64_t at_ns)
{
	if (t->slot) {
		t->at_ns = at_ns;
		sift(h, t->slot - 1);
		return 0;
	}
	if (h->n == h->cap) {
		uint32_t cap = h->cap ? h->cap * 2 : 64;
		struct mtd_timer **heap = cap > h->cap ? realloc(h->heap, (size_t)cap * sizeof(*heap)) : NULL;
		if (!heap)
			return -ENOMEM;
		h->heap = heap;
		h->cap = cap;
	}
	t->at_ns = at_ns;
	place(h, h->n++, t);
	sift(h, h->n - 1);
	return 0;
}

void mtd_timers_del(struct mtd_timers *h, struct mtd_timer *t)
{
	if (!t->slot)
		return;
	uint32_t i = t->slot - 1;
	t->slot = 0;
	struct mtd_timer *last = h->heap[--h->n];
	if (last != t) {
		place(h, i, last);
		sift(h, i);
	}
}

struct mtd_timer *mtd_timers_pop_due(struct mtd_timers *h, int64_t now_ns)
{
	if (!h->n || h->heap[0]->at_ns > now_ns)
		return NULL;
	struct mtd_timer *t = h->heap[0];
	mtd_timers_del(h, t);
	return t;
}

void mtd_timers_free(struct mtd_timers *h)
{
	for (uint32_t i = 0; i < h->n; i++)
		h->heap[i]->slot = 0;
	free(h->heap);
	h->heap = NULL;
	h->n = h->cap = 0;
}
