/* A mailbox: how one thread hands objects to another thread's event loop.
 * Any thread posts an object (it keeps a struct mtd_mbox_link inside);
 * the posting wakes the owner's loop (event_active), whose callback takes
 * everything posted so far at once, oldest first. The list sits under a
 * mutex held for a few pointer stores; the objects themselves are not
 * touched by the mailbox.
 *
 *   control thread --(health check)--> a worker   (health.c: hc_inbox)
 *   a worker --(the check's answer)--> control    (health.c: mtd_health.done)
 *   any thread --(a last reference)--> control    (runtime.c: reclaim_rts,
 *                                                  reclaim_svcs, reclaim_eps)
 *
 * Not for a value a newer one replaces (mtd_worker_set_runtime keeps one
 * slot: the same runtime goes to every worker, so it cannot be linked into
 * each worker's list).
 *
 * Threads: init and fini on the owner's side with nobody posting (before
 * the posters start, after they stopped); post from any thread, take from
 * the owner's loop. The loop's base must have been made with libevent's
 * threading on (evthread_use_pthreads, main.c) when posters run on
 * another thread. */
#ifndef MTD_SIDECAR_MAILBOX_H
#define MTD_SIDECAR_MAILBOX_H

#include <pthread.h>
#include <stddef.h>

#include <event2/event.h>
#include <event2/event_struct.h>

struct mtd_mbox_link {
	struct mtd_mbox_link *next; /* the next one posted; NULL: the last */
};

struct mtd_mbox {
	pthread_mutex_t mu;
	struct mtd_mbox_link *head;  /* oldest first */
	struct mtd_mbox_link **tail; /* &head, or &last->next */
	struct event ev;             /* on the owner's base: runs cb(arg) */
};

/* The object that holds link as its member `member`. */
#define MTD_MBOX_ITEM(link, type, member) ((type *)(void *)((char *)(link)-offsetof(type, member)))

/* An empty mailbox whose posts run cb(-1, EV_TIMEOUT, arg) on base at its
 * next turn (once for any number of posts before it). 0, or -EINVAL when
 * libevent refuses the event. */
int mtd_mbox_init(struct mtd_mbox *mb, struct event_base *base, event_callback_fn cb, void *arg);
/* Tear down; what was posted and not taken is returned (oldest first) for
 * the owner to dispose of. Nobody may post any more, and the owner's loop
 * must not run the event after this. */
struct mtd_mbox_link *mtd_mbox_fini(struct mtd_mbox *mb);
/* Append l (its next is overwritten) and wake the owner. Any thread; l
 * belongs to the owner from here on. */
void mtd_mbox_post(struct mtd_mbox *mb, struct mtd_mbox_link *l);
/* Everything posted so far, oldest first (walk by ->next; read next
 * before handing an object on), or NULL. The mailbox is empty after. */
struct mtd_mbox_link *mtd_mbox_take(struct mtd_mbox *mb);

#endif
