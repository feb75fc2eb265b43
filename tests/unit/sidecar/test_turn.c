/* sidecar/turn.c: a worker's timers on a real libevent loop, and its
 * snapshot holds.
 *
 * Timers: a worker's timer wakes the loop at its due time, never a turn
 * early for nothing, and the timerfd behind them is quiet once nothing is
 * armed (the hedge delay's timer). Nothing here measures how late a timer
 * runs: what is checked is the order of events (no turn before the due
 * time) and the loop's turns, which do not depend on the machine's load.
 *
 * Holds (lib/discovery/discovery.h's reclaim rule, carried out by turn.c):
 * a runtime's reference goes only when the worker moved past it and the
 * last call routed with it let go; a call that lets go mid-turn
 * (mtd_worker_unhold_later) keeps it until the reap. */
#include "config.h"

#include <check.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>

#include <event2/event.h>

#include "core/clock.h"
#include "sidecar/control/runtime.h"
#include "sidecar/turn.h"
#include "sidecar/worker-t.h"

/* Runtimes are opaque here: two addresses stand for them, and dropping a
 * reference is recorded, never done. */
static char rt_a, rt_b;
#define RT_A ((struct mtd_runtime *)&rt_a)
#define RT_B ((struct mtd_runtime *)&rt_b)
static unsigned unrefs;
static struct mtd_runtime *last_unref;

void mtd_runtime_unref(struct mtd_runtime *rt)
{
	unrefs++;
	last_unref = rt;
}

struct fixture {
	struct mtd_worker *w;
	struct event *busy; /* a callback that spins, then arms the timer */
	struct mtd_timer t;
	int64_t delay_ns, spin_ns;
	int64_t armed_at, due_at, ran_at;
	int runs;
};

static struct fixture fx;

static void on_timer(struct mtd_timer *t)
{
	ck_assert_ptr_eq(t, &fx.t);
	fx.ran_at = mtd_now_ns();
	fx.runs++;
}

/* Runs in a turn of the loop that has lasted spin_ns already, so that
 * libevent's time cached at the start of the turn is that much behind:
 * the timer armed here must still be due delay_ns from the real now. */
static void busy_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd, (void)what, (void)arg;
	int64_t until = mtd_now_ns() + fx.spin_ns;
	while (mtd_now_ns() < until)
		;
	fx.armed_at = mtd_now_ns();
	ck_assert_int_eq(mtd_worker_timer_arm(fx.w, &fx.t, on_timer, fx.delay_ns), 0);
	fx.due_at = fx.t.at_ns;
}

static void flush_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd, (void)what, (void)arg;
}

static void setup(void)
{
	fx = (struct fixture){0};
	unrefs = 0;
	last_unref = NULL;
	fx.w = calloc(1, sizeof(*fx.w));
	ck_assert_ptr_nonnull(fx.w);
	fx.w->base = event_base_new();
	ck_assert_ptr_nonnull(fx.w->base);
	fx.w->timer_fd = -1;
	ck_assert_int_eq(event_assign(&fx.w->flush_ev, fx.w->base, -1, 0, flush_cb, fx.w), 0);
	ck_assert_int_eq(mtd_worker_turn_init(fx.w), 0);
	fx.busy = event_new(fx.w->base, -1, 0, busy_cb, NULL);
	ck_assert_ptr_nonnull(fx.busy);
}

static void teardown(void)
{
	event_free(fx.busy);
	event_del(&fx.w->flush_ev);
	mtd_worker_turn_fini(fx.w);
	ck_assert_int_eq(fx.w->timer_fd, -1);
	mtd_timers_free(&fx.w->timers);
	event_base_free(fx.w->base);
	free(fx.w);
}

/* Turns of the loop (each runs at least one callback) until the timer
 * ran, at most limit. */
static int turns_until_run(int limit)
{
	int turns = 0;
	while (fx.runs == 0 && turns < limit) {
		ck_assert_int_ge(event_base_loop(fx.w->base, EVLOOP_ONCE), 0);
		turns++;
	}
	return turns;
}

static bool timer_fd_readable(void)
{
	struct pollfd p = {.fd = fx.w->timer_fd, .events = POLLIN};
	return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

START_TEST(timer_armed_late_in_a_turn_wakes_once_when_due)
{
	/* 3 ms into a turn, a timer for 2 ms from now: due 5 ms after the
	 * turn began. A delay added to the time cached at the turn's start
	 * made it due 1 ms before it was armed: a turn for nothing (the heap
	 * said "not yet"), then another, whole ms rounded up, late. */
	fx.spin_ns = 3000000;
	fx.delay_ns = 2000000;
	event_active(fx.busy, EV_TIMEOUT, 0);
	ck_assert_int_eq(event_base_loop(fx.w->base, EVLOOP_ONCE), 0); /* busy_cb's turn */
	ck_assert_int_eq(fx.runs, 0);
	int turns = turns_until_run(50);
	ck_assert_int_eq(fx.runs, 1);
	ck_assert_int_ge(fx.ran_at, fx.due_at); /* never before its time */
	ck_assert_int_eq(turns, 1);             /* and the loop woke once, for it */
	/* Nothing armed: the timerfd is disarmed, not left readable (a
	 * level-triggered fd left readable would spin the loop). */
	ck_assert(!timer_fd_readable());
}
END_TEST

START_TEST(an_earlier_timer_moves_the_wake_up_earlier)
{
	struct mtd_timer later = {0};
	ck_assert_int_eq(mtd_worker_timer_arm(fx.w, &later, on_timer, 60 * (int64_t)1000000000), 0);
	int64_t far = fx.w->timer_at_ns;
	fx.delay_ns = 1000000;
	ck_assert_int_eq(mtd_worker_timer_arm(fx.w, &fx.t, on_timer, fx.delay_ns), 0);
	fx.due_at = fx.t.at_ns;
	ck_assert_int_eq(fx.w->timer_at_ns, fx.due_at); /* set to the earliest, to the ns */
	ck_assert_int_lt(fx.w->timer_at_ns, far);
	ck_assert_int_eq(turns_until_run(50), 1);
	ck_assert_int_ge(fx.ran_at, fx.due_at);
	/* The later one is still armed, and the timerfd set for it. */
	ck_assert(mtd_timer_armed(&later));
	ck_assert_int_eq(fx.w->timer_at_ns, later.at_ns);
	ck_assert(!timer_fd_readable());
	mtd_worker_timer_disarm(fx.w, &later);
}
END_TEST

START_TEST(a_timer_for_now_runs_at_the_next_turn)
{
	ck_assert_int_eq(mtd_worker_timer_arm(fx.w, &fx.t, on_timer, 0), 0);
	fx.due_at = fx.t.at_ns;
	ck_assert_int_eq(turns_until_run(50), 1);
	ck_assert_int_ge(fx.ran_at, fx.due_at);
	ck_assert(!timer_fd_readable());
}
END_TEST

/* ---- snapshot holds ------------------------------------------------------ */

/* The worker on RT_A, as mtd_worker_new leaves it. */
static void hold_setup(void)
{
	setup();
	fx.w->hold = mtd_worker_hold_new(fx.w, RT_A);
	ck_assert_ptr_nonnull(fx.w->hold);
	fx.w->rt = RT_A;
}

/* Every hold went: none alive, nothing left to drop at a reap. */
static void hold_teardown(void)
{
	ck_assert_uint_eq(fx.w->n_holds, 0);
	ck_assert_ptr_null(fx.w->unhold_later);
	teardown();
}

/* mtd_worker_take_runtime's first steps (worker_turn.c): a hold on rt, the
 * old one retired. */
static struct mtd_rt_hold *move_to(struct mtd_runtime *rt)
{
	struct mtd_rt_hold *old = fx.w->hold;
	fx.w->hold = mtd_worker_hold_new(fx.w, rt);
	ck_assert_ptr_nonnull(fx.w->hold);
	fx.w->rt = rt;
	mtd_worker_hold_retire(fx.w, old);
	return old;
}

/* RT_A's reference, and only it, was dropped: the worker's hold on RT_B is
 * the one left, released now (the worker's end). */
static void expect_only_a_dropped_then_end(void)
{
	ck_assert_uint_eq(unrefs, 1);
	ck_assert_ptr_eq(last_unref, RT_A);
	ck_assert_uint_eq(fx.w->n_holds, 1);
	mtd_worker_hold_release(fx.w, fx.w->hold);
}

START_TEST(a_hold_is_counted_from_new_to_release_and_drops_its_reference)
{
	ck_assert_uint_eq(fx.w->n_holds, 1);
	ck_assert_ptr_eq(fx.w->hold->rt, RT_A);
	ck_assert_uint_eq(fx.w->hold->h.users, 0);
	struct mtd_rt_hold *h = mtd_worker_hold_new(fx.w, RT_B);
	ck_assert_ptr_nonnull(h);
	ck_assert_uint_eq(fx.w->n_holds, 2);
	mtd_worker_hold_release(fx.w, h);
	ck_assert_uint_eq(fx.w->n_holds, 1);
	ck_assert_uint_eq(unrefs, 1);
	ck_assert_ptr_eq(last_unref, RT_B);
	mtd_worker_hold_release(fx.w, fx.w->hold);
	ck_assert_uint_eq(unrefs, 2);
	ck_assert_ptr_eq(last_unref, RT_A);
}
END_TEST

START_TEST(the_current_hold_outlives_its_users)
{
	struct mtd_rt_hold *h = mtd_worker_hold(fx.w);
	ck_assert_ptr_eq(h, fx.w->hold);
	ck_assert_ptr_eq(mtd_worker_hold_again(fx.w, h), h);
	ck_assert_ptr_null(mtd_worker_hold_again(fx.w, NULL));
	ck_assert_uint_eq(h->h.users, 2);
	mtd_worker_unhold(fx.w, h);
	mtd_worker_unhold(fx.w, h);
	mtd_worker_unhold(fx.w, NULL);
	/* No user, but the worker still serves it: nothing dropped. */
	ck_assert_uint_eq(h->h.users, 0);
	ck_assert_uint_eq(unrefs, 0);
	ck_assert_uint_eq(fx.w->n_holds, 1);
	mtd_worker_hold_release(fx.w, fx.w->hold);
}
END_TEST

START_TEST(a_retired_hold_without_users_goes_at_once)
{
	move_to(RT_B);
	expect_only_a_dropped_then_end();
}
END_TEST

START_TEST(a_retired_runtime_goes_with_the_last_of_its_calls)
{
	struct mtd_rt_hold *a = mtd_worker_hold(fx.w); /* two calls on RT_A */
	mtd_worker_hold(fx.w);
	ck_assert_ptr_eq(move_to(RT_B), a);
	/* The worker moved on; its calls still read RT_A. */
	ck_assert_uint_eq(unrefs, 0);
	ck_assert_uint_eq(fx.w->n_holds, 2);
	ck_assert(a->h.retired);
	mtd_worker_unhold(fx.w, a);
	ck_assert_uint_eq(unrefs, 0);
	ck_assert_uint_eq(fx.w->n_holds, 2);
	mtd_worker_unhold(fx.w, a); /* the last: a is freed */
	expect_only_a_dropped_then_end();
}
END_TEST

START_TEST(unhold_later_keeps_the_runtime_until_the_reap)
{
	struct mtd_rt_hold *a = mtd_worker_hold(fx.w); /* three calls on RT_A */
	mtd_worker_hold(fx.w);
	mtd_worker_hold(fx.w);
	move_to(RT_B);
	/* Two of them move to RT_B mid-turn, one goes at once. */
	mtd_worker_unhold_later(fx.w, a);
	mtd_worker_unhold_later(fx.w, a);
	mtd_worker_unhold_later(fx.w, NULL);
	ck_assert(fx.w->flush_due); /* the end of the turn was asked for */
	ck_assert_ptr_eq(fx.w->unhold_later, a);
	ck_assert_ptr_null(a->later_next); /* listed once, counted twice */
	ck_assert_uint_eq(a->later, 2);
	mtd_worker_unhold(fx.w, a);
	ck_assert_uint_eq(a->h.users, 2);
	/* Still read this turn: nothing dropped before the reap. */
	ck_assert_uint_eq(unrefs, 0);
	ck_assert_uint_eq(fx.w->n_holds, 2);
	mtd_worker_reap_holds(fx.w);
	ck_assert_ptr_null(fx.w->unhold_later);
	/* A reap with nothing listed drops nothing more. */
	mtd_worker_reap_holds(fx.w);
	expect_only_a_dropped_then_end();
}
END_TEST

START_TEST(unhold_later_of_holds_still_used_drops_only_what_was_let_go)
{
	struct mtd_rt_hold *a = mtd_worker_hold(fx.w); /* two calls on RT_A */
	mtd_worker_hold(fx.w);
	move_to(RT_B);
	struct mtd_rt_hold *b = mtd_worker_hold(fx.w); /* one call on RT_B */
	mtd_worker_unhold_later(fx.w, a);
	mtd_worker_unhold_later(fx.w, b);
	mtd_worker_reap_holds(fx.w);
	/* A call still reads RT_A; nobody reads RT_B, which is current. */
	ck_assert_uint_eq(a->h.users, 1);
	ck_assert_uint_eq(b->h.users, 0);
	ck_assert_uint_eq(a->later, 0);
	ck_assert_uint_eq(unrefs, 0);
	ck_assert_uint_eq(fx.w->n_holds, 2);
	/* Listed again after a reap: the list starts over. */
	mtd_worker_unhold_later(fx.w, a);
	ck_assert_ptr_eq(fx.w->unhold_later, a);
	mtd_worker_reap_holds(fx.w);
	expect_only_a_dropped_then_end();
}
END_TEST

static Suite *turn_suite(void)
{
	Suite *s = suite_create("turn");
	TCase *tc = tcase_create("timers");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, timer_armed_late_in_a_turn_wakes_once_when_due);
	tcase_add_test(tc, an_earlier_timer_moves_the_wake_up_earlier);
	tcase_add_test(tc, a_timer_for_now_runs_at_the_next_turn);
	suite_add_tcase(s, tc);
	tc = tcase_create("holds");
	tcase_add_checked_fixture(tc, hold_setup, hold_teardown);
	tcase_add_test(tc, a_hold_is_counted_from_new_to_release_and_drops_its_reference);
	tcase_add_test(tc, the_current_hold_outlives_its_users);
	tcase_add_test(tc, a_retired_hold_without_users_goes_at_once);
	tcase_add_test(tc, a_retired_runtime_goes_with_the_last_of_its_calls);
	tcase_add_test(tc, unhold_later_keeps_the_runtime_until_the_reap);
	tcase_add_test(tc, unhold_later_of_holds_still_used_drops_only_what_was_let_go);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(turn_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
