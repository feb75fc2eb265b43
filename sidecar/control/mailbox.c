/* The mailbox of mailbox.h. */
#include "config.h"

#include <errno.h>
#include <stdatomic.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "sidecar/control/mailbox.h"

/* An empty list that runs cb(arg), woken by bell's bit (NULL: by ev). */
static void mbox_setup(struct mtd_mbox *mb, struct mtd_bell *bell, uint32_t bit, event_callback_fn cb, void *arg)
{
	mb->head = NULL;
	mb->tail = &mb->head;
	mb->bell = bell;
	mb->bit = bit;
	mb->cb = cb;
	mb->arg = arg;
	pthread_mutex_init(&mb->mu, NULL);
}

int mtd_mbox_init(struct mtd_mbox *mb, struct event_base *base, event_callback_fn cb, void *arg)
{
	if (event_assign(&mb->ev, base, -1, 0, cb, arg) < 0)
		return -EINVAL;
	mbox_setup(mb, NULL, 0, cb, arg);
	return 0;
}

int mtd_mbox_init_bell(struct mtd_mbox *mb, struct mtd_bell *bell, uint32_t bit, event_callback_fn cb, void *arg)
{
	mbox_setup(mb, bell, bit, cb, arg);
	return 0;
}

void mtd_mbox_run(struct mtd_mbox *mb)
{
	mb->cb(-1, EV_TIMEOUT, mb->arg);
}

struct mtd_mbox_link *mtd_mbox_fini(struct mtd_mbox *mb)
{
	struct mtd_mbox_link *left = mtd_mbox_take(mb);

	if (!mb->bell)
		event_del(&mb->ev); /* an activation nobody will run */
	pthread_mutex_destroy(&mb->mu);
	return left;
}

void mtd_mbox_post(struct mtd_mbox *mb, struct mtd_mbox_link *l)
{
	l->next = NULL;
	pthread_mutex_lock(&mb->mu);
	*mb->tail = l;
	mb->tail = &l->next;
	pthread_mutex_unlock(&mb->mu);
	/* Outside the lock: the owner may run before this and find l; then
	 * the extra run finds nothing, which is harmless. */
	if (mb->bell)
		mtd_bell_ring(mb->bell, mb->bit);
	else
		event_active(&mb->ev, EV_TIMEOUT, 0);
}

struct mtd_mbox_link *mtd_mbox_take(struct mtd_mbox *mb)
{
	pthread_mutex_lock(&mb->mu);
	struct mtd_mbox_link *l = mb->head;
	mb->head = NULL;
	mb->tail = &mb->head;
	pthread_mutex_unlock(&mb->mu);
	return l;
}

/* ---- the bell ------------------------------------------------------------ */

static void bell_cb(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_bell *b = arg;
	uint64_t n;
	/* Read first, then swap: a ring between the two writes again and
	 * runs again (a run with no bits at worst), never lost. */
	while (read(b->fd, &n, sizeof(n)) < 0 && errno == EINTR)
		;
	uint32_t bits = atomic_exchange_explicit(&b->rung, 0, memory_order_acq_rel);
	if (bits)
		b->on_ring(b->arg, bits);
}

int mtd_bell_init(struct mtd_bell *b, struct event_base *base, void (*on_ring)(void *arg, uint32_t bits), void *arg)
{
	atomic_init(&b->rung, 0);
	b->on_ring = on_ring;
	b->arg = arg;
	b->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (b->fd < 0)
		return -errno;
	if (event_assign(&b->ev, base, b->fd, EV_READ | EV_PERSIST, bell_cb, b) != 0 || event_add(&b->ev, NULL) != 0) {
		close(b->fd);
		b->fd = -1;
		return -EINVAL;
	}
	return 0;
}

void mtd_bell_fini(struct mtd_bell *b)
{
	if (b->fd < 0)
		return;
	event_del(&b->ev);
	close(b->fd);
	b->fd = -1;
}

void mtd_bell_ring(struct mtd_bell *b, uint32_t bits)
{
	if (atomic_fetch_or_explicit(&b->rung, bits, memory_order_acq_rel) != 0)
		return; /* rung already and not run yet: that run takes these bits too */
	uint64_t one = 1;
	/* An eventfd write fails only when its counter would overflow
	 * (2^64 - 2 rings unread), and then the bell is rung anyway. */
	while (write(b->fd, &one, sizeof(one)) < 0 && errno == EINTR)
		;
}
