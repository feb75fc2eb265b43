/* sidecar/turn.c's timers on a real libevent loop: a worker's timer wakes
 * the loop at its due time, never a turn early for nothing, and the
 * timerfd behind them is quiet once nothing is armed (issue 19 §5: the
 * hedge delay's timer). Nothing here measures how late a timer runs:
 * what is checked is the order of events (no turn before the due time)
 * and the loop's turns, which do not depend on the machine's load. */
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

/* turn.c's snapshot holds call it; no test here makes a hold. */
void mtd_runtime_unref(struct mtd_runtime *rt)
{
	(void)rt;
	ck_abort_msg("mtd_runtime_unref called");
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

static void setup(void)
{
	fx = (struct fixture){0};
	fx.w = calloc(1, sizeof(*fx.w));
	ck_assert_ptr_nonnull(fx.w);
	fx.w->base = event_base_new();
	ck_assert_ptr_nonnull(fx.w->base);
	fx.w->timer_fd = -1;
	ck_assert_int_eq(mtd_worker_turn_init(fx.w), 0);
	fx.busy = event_new(fx.w->base, -1, 0, busy_cb, NULL);
	ck_assert_ptr_nonnull(fx.busy);
}

static void teardown(void)
{
	event_free(fx.busy);
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

static Suite *turn_suite(void)
{
	Suite *s = suite_create("turn");
	TCase *tc = tcase_create("timers");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, timer_armed_late_in_a_turn_wakes_once_when_due);
	tcase_add_test(tc, an_earlier_timer_moves_the_wake_up_earlier);
	tcase_add_test(tc, a_timer_for_now_runs_at_the_next_turn);
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
