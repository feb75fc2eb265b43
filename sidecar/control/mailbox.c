/* The mailbox of mailbox.h. */
#include "config.h"

#include <errno.h>

#include "sidecar/control/mailbox.h"

int mtd_mbox_init(struct mtd_mbox *mb, struct event_base *base, event_callback_fn cb, void *arg)
{
	mb->head = NULL;
	mb->tail = &mb->head;
	if (event_assign(&mb->ev, base, -1, 0, cb, arg) < 0)
		return -EINVAL;
	pthread_mutex_init(&mb->mu, NULL);
	return 0;
}

struct mtd_mbox_link *mtd_mbox_fini(struct mtd_mbox *mb)
{
	struct mtd_mbox_link *left = mtd_mbox_take(mb);

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
