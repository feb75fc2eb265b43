/* sidecar/control/mailbox.c: what posters hand over arrives once each, in
 * each poster's order, and wakes the owner's loop; what is left at fini
 * comes back. The threaded case is also what a --enable-tsan build checks. */
#include "config.h"

#include <check.h>
#include <stdbool.h>
#include <stdlib.h>

#include <event2/thread.h>

#include "sidecar/control/mailbox.h"

#define POSTERS    3
#define PER_THREAD 2000

struct item {
	int poster, seq;
	struct mtd_mbox_link link;
};

struct owner {
	struct event_base *base;
	struct mtd_mbox mb;
	int runs;
	int got;
	int last[POSTERS]; /* the last seq seen per poster */
	bool in_order;
	bool heap;               /* items are malloc'ed: free them once seen */
	struct item *first_seen; /* when not heap */
};

static void owner_take(struct owner *o)
{
	struct mtd_mbox_link *l = mtd_mbox_take(&o->mb);

	while (l) {
		struct item *it = MTD_MBOX_ITEM(l, struct item, link);

		l = l->next;
		if (!o->heap && o->first_seen == NULL)
			o->first_seen = it;
		if (it->seq != o->last[it->poster] + 1)
			o->in_order = false;
		o->last[it->poster] = it->seq;
		o->got++;
		if (o->heap)
			free(it);
	}
}

static void owner_cb(evutil_socket_t fd, short what, void *arg)
{
	struct owner *o = arg;

	o->runs++;
	owner_take(o);
	if (o->got == POSTERS * PER_THREAD)
		event_base_loopbreak(o->base);
}

static void owner_init(struct owner *o)
{
	*o = (struct owner){.in_order = true};
	for (int p = 0; p < POSTERS; p++)
		o->last[p] = -1;
	o->base = event_base_new();
	ck_assert_ptr_nonnull(o->base);
	ck_assert_int_eq(mtd_mbox_init(&o->mb, o->base, owner_cb, o), 0);
}

START_TEST(post_take_order_and_wakeup)
{
	struct owner o;
	struct item a = {0, 0}, b = {0, 1}, c = {0, 2};

	owner_init(&o);
	ck_assert_ptr_null(mtd_mbox_take(&o.mb));
	mtd_mbox_post(&o.mb, &a.link);
	mtd_mbox_post(&o.mb, &b.link);
	/* One turn of the loop runs the callback once for both posts. */
	ck_assert_int_ge(event_base_loop(o.base, EVLOOP_NONBLOCK), 0);
	ck_assert_int_eq(o.runs, 1);
	ck_assert_int_eq(o.got, 2);
	ck_assert(o.in_order);
	ck_assert_ptr_eq(o.first_seen, &a);
	/* Taken: the mailbox is empty, a later post starts a new list. */
	ck_assert_ptr_null(mtd_mbox_take(&o.mb));
	mtd_mbox_post(&o.mb, &c.link);
	ck_assert_ptr_eq(mtd_mbox_take(&o.mb), &c.link);
	ck_assert_ptr_null(c.link.next);
	/* Left at fini: returned oldest first, and the event is gone. */
	mtd_mbox_post(&o.mb, &a.link);
	mtd_mbox_post(&o.mb, &b.link);
	struct mtd_mbox_link *left = mtd_mbox_fini(&o.mb);
	ck_assert_ptr_eq(left, &a.link);
	ck_assert_ptr_eq(left->next, &b.link);
	ck_assert_ptr_null(left->next->next);
	ck_assert_int_ge(event_base_loop(o.base, EVLOOP_NONBLOCK), 0);
	ck_assert_int_eq(o.runs, 1); /* the posts' activation went with fini */
	event_base_free(o.base);
}
END_TEST

struct poster {
	struct mtd_mbox *mb;
	int id;
};

static void *poster_main(void *arg)
{
	struct poster *p = arg;

	for (int i = 0; i < PER_THREAD; i++) {
		struct item *it = malloc(sizeof(*it));

		ck_assert_ptr_nonnull(it);
		*it = (struct item){.poster = p->id, .seq = i};
		mtd_mbox_post(p->mb, &it->link);
	}
	return NULL;
}

START_TEST(threads_post_while_the_owner_takes)
{
	struct owner o;
	struct poster ps[POSTERS];
	pthread_t th[POSTERS];
	struct timeval limit = {60, 0};

	ck_assert_int_eq(evthread_use_pthreads(), 0);
	owner_init(&o);
	o.heap = true;
	for (int p = 0; p < POSTERS; p++) {
		ps[p] = (struct poster){&o.mb, p};
		ck_assert_int_eq(pthread_create(&th[p], NULL, poster_main, &ps[p]), 0);
	}
	/* Bounded: the loop ends when everything arrived (owner_cb), or
	 * after the limit, which then fails below. */
	event_base_loopexit(o.base, &limit);
	event_base_dispatch(o.base);
	for (int p = 0; p < POSTERS; p++)
		pthread_join(th[p], NULL);
	/* The posts' wake-ups alone brought everything: the loop stopped
	 * in owner_cb, not at the limit. */
	ck_assert_int_eq(o.got, POSTERS * PER_THREAD);
	ck_assert_int_gt(o.runs, 0);
	ck_assert(o.in_order);
	for (int p = 0; p < POSTERS; p++)
		ck_assert_int_eq(o.last[p], PER_THREAD - 1);
	ck_assert_ptr_null(mtd_mbox_fini(&o.mb));
	event_base_free(o.base);
}
END_TEST

/* ---- the bell ----------------------------------------------------------- */

struct ringee {
	struct event_base *base;
	struct mtd_bell bell;
	struct mtd_mbox mb; /* on the bell, bit 2 */
	int runs;
	uint32_t bits; /* every bit seen */
	struct owner o; /* what the mailbox delivered (owner_take) */
};

static void mb_on_bell_cb(evutil_socket_t fd, short what, void *arg)
{
	struct ringee *r = arg;
	struct mtd_mbox_link *l = mtd_mbox_take(&r->mb);
	while (l) {
		struct item *it = MTD_MBOX_ITEM(l, struct item, link);
		l = l->next;
		if (it->seq != r->o.last[it->poster] + 1)
			r->o.in_order = false;
		r->o.last[it->poster] = it->seq;
		r->o.got++;
		free(it);
	}
	if (r->o.got == POSTERS * PER_THREAD)
		event_base_loopbreak(r->base);
}

static void on_ring(void *arg, uint32_t bits)
{
	struct ringee *r = arg;
	r->runs++;
	r->bits |= bits;
	if (bits & 4u)
		mtd_mbox_run(&r->mb);
}

static void ringee_init(struct ringee *r)
{
	struct event_config *cfg = event_config_new();

	*r = (struct ringee){.o = {.in_order = true}};
	for (int p = 0; p < POSTERS; p++)
		r->o.last[p] = -1;
	ck_assert_ptr_nonnull(cfg);
	/* As a worker's: a base without a lock (worker.c). */
	ck_assert_int_eq(event_config_set_flag(cfg, EVENT_BASE_FLAG_NOLOCK), 0);
	r->base = event_base_new_with_config(cfg);
	event_config_free(cfg);
	ck_assert_ptr_nonnull(r->base);
	ck_assert_int_eq(mtd_bell_init(&r->bell, r->base, on_ring, r), 0);
	ck_assert_int_eq(mtd_mbox_init_bell(&r->mb, &r->bell, 4u, mb_on_bell_cb, r), 0);
}

static void ringee_fini(struct ringee *r)
{
	ck_assert_ptr_null(mtd_mbox_fini(&r->mb));
	mtd_bell_fini(&r->bell);
	event_base_free(r->base);
}

START_TEST(bell_rings_merge_and_none_is_lost)
{
	struct ringee r;

	ringee_init(&r);
	/* Nothing rung: a turn runs nothing. */
	ck_assert_int_ge(event_base_loop(r.base, EVLOOP_NONBLOCK), 0);
	ck_assert_int_eq(r.runs, 0);
	/* Two rings before the owner looks: one run with both bits. */
	mtd_bell_ring(&r.bell, 1u);
	mtd_bell_ring(&r.bell, 2u);
	ck_assert_int_ge(event_base_loop(r.base, EVLOOP_NONBLOCK), 0);
	ck_assert_int_eq(r.runs, 1);
	ck_assert_uint_eq(r.bits, 3u);
	/* A ring after that run is a new run, with only its bit. */
	r.bits = 0;
	mtd_bell_ring(&r.bell, 8u);
	ck_assert_int_ge(event_base_loop(r.base, EVLOOP_NONBLOCK), 0);
	ck_assert_int_eq(r.runs, 2);
	ck_assert_uint_eq(r.bits, 8u);
	/* A mailbox on the bell: its post rings bit 4, the run delivers it. */
	struct item *it = malloc(sizeof(*it));
	ck_assert_ptr_nonnull(it);
	*it = (struct item){.poster = 0, .seq = 0};
	mtd_mbox_post(&r.mb, &it->link);
	ck_assert_int_ge(event_base_loop(r.base, EVLOOP_NONBLOCK), 0);
	ck_assert_int_eq(r.runs, 3);
	ck_assert_int_eq(r.o.got, 1);
	ringee_fini(&r);
}
END_TEST

START_TEST(bell_threads_ring_a_base_without_a_lock)
{
	struct ringee r;
	struct poster ps[POSTERS];
	pthread_t th[POSTERS];
	struct timeval limit = {60, 0};

	ck_assert_int_eq(evthread_use_pthreads(), 0);
	ringee_init(&r);
	for (int p = 0; p < POSTERS; p++) {
		ps[p] = (struct poster){&r.mb, p};
		ck_assert_int_eq(pthread_create(&th[p], NULL, poster_main, &ps[p]), 0);
	}
	/* Bounded as above: the rings alone must bring everything. */
	event_base_loopexit(r.base, &limit);
	event_base_dispatch(r.base);
	for (int p = 0; p < POSTERS; p++)
		pthread_join(th[p], NULL);
	ck_assert_int_eq(r.o.got, POSTERS * PER_THREAD);
	ck_assert(r.o.in_order);
	ck_assert_int_gt(r.runs, 0);
	ringee_fini(&r);
}
END_TEST

static Suite *mailbox_suite(void)
{
	Suite *s = suite_create("mailbox");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, post_take_order_and_wakeup);
	tcase_add_test(tc, threads_post_while_the_owner_takes);
	tcase_add_test(tc, bell_rings_merge_and_none_is_lost);
	tcase_add_test(tc, bell_threads_ring_a_base_without_a_lock);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(mailbox_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
