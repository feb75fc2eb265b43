/* Pickers shared by worker threads (lb-t.h: pick, begin/end and report run
 * concurrently on any worker, lock-free). Several threads pick, begin and
 * end calls on one picker at once; once they stop:
 *   - LEAST_ACTIVE / SHORTEST_RESPONSE: every node of the minimum tree is
 *     exact (mintree.c's store-then-recheck), and a pick is a true minimum;
 *     also while endpoints ramp and a ticker thread rewrites the tie
 *     weights (least.c);
 *   - WEIGHTED_RANDOM / WEIGHTED_ROUND_ROBIN while endpoints ramp and a
 *     ticker thread republishes the warmed-weight table: no drained or
 *     out-of-range pick;
 *   - SMOOTH_WEIGHTED_ROUND_ROBIN: the picks of all threads together are
 *     exactly the cycle's shares (one global sequence);
 *   - CLIENT_SIDE_WEIGHTED_ROUND_ROBIN while workers record load reports
 *     and a ticker thread recomputes and republishes the weights;
 *   - every stats counter adds up;
 *   - first successes recorded at once install one latency histogram.
 * Meant to run under ThreadSanitizer as well (HACKING.md: configure a clean
 * checkout with --enable-tsan), where it proves the absence of data races;
 * without TSan it still checks the invariants. */
#include "config.h"

#include <pthread.h>

#include "lb-test.h"
#include "lb/lb-impl.h"

#define THREADS    4
#define ROUNDS     20000
#define MAX_FLIGHT 16
#define N_EPS      100

static Suite *threads_suite(void);

struct worker_arg {
	struct mtd_lb_picker *p;
	struct t_set *s;
	unsigned worker;
	uint64_t counts[N_EPS];
	bool keep_in_flight; /* leave up to MAX_FLIGHT calls open at the end */
};

static void *worker_main(void *argp)
{
	struct worker_arg *a = argp;
	int flight[MAX_FLIGHT];
	size_t nf = 0;
	uint64_t rng = T_SEED + a->worker;

	for (int r = 0; r < ROUNDS; r++) {
		struct mtd_lb_pick_ctx ctx = {
		        .now_ms = 1000000, .now_ns = 1000000000, .worker = a->worker, .rng = &rng};
		int i = mtd_lb_pick(a->p, &ctx);

		ck_assert_int_ge(i, 0);
		ck_assert_int_lt(i, (int)a->s->n);
		a->counts[i]++;
		mtd_lb_call_begin(a->p, (size_t)i);
		flight[nf++] = i;
		while (nf == MAX_FLIGHT || (nf > 0 && mtd_lb_rand(&rng) % 2 == 0)) {
			size_t k = (size_t)(mtd_lb_rand(&rng) % nf);
			struct mtd_lb_result res = {
			        .ok = mtd_lb_rand(&rng) % 16 != 0,
			        .latency_us = 100 + (int64_t)(flight[k] % 7) * 50,
			};

			mtd_lb_call_end(a->p, (size_t)flight[k], &res, 1000000000 + r);
			flight[k] = flight[--nf];
		}
	}
	if (!a->keep_in_flight)
		while (nf > 0) {
			struct mtd_lb_result res = {.ok = true, .latency_us = 100};

			mtd_lb_call_end(a->p, (size_t)flight[--nf], &res, 1000000000 + ROUNDS);
		}
	return NULL;
}

static void run_threads(struct mtd_lb_picker *p, struct t_set *s, bool keep, uint64_t *total_counts)
{
	pthread_t th[THREADS];
	static struct worker_arg args[THREADS];

	for (unsigned t = 0; t < THREADS; t++) {
		args[t] = (struct worker_arg){.p = p, .s = s, .worker = t, .keep_in_flight = keep};
		ck_assert_int_eq(pthread_create(&th[t], NULL, worker_main, &args[t]), 0);
	}
	for (unsigned t = 0; t < THREADS; t++)
		ck_assert_int_eq(pthread_join(th[t], NULL), 0);
	memset(total_counts, 0, N_EPS * sizeof(*total_counts));
	for (unsigned t = 0; t < THREADS; t++)
		for (size_t i = 0; i < s->n; i++)
			total_counts[i] += args[t].counts[i];
}

static atomic_bool ticking;

/* The control thread's ticks while the workers run (least.c: while some
 * endpoint ramps, each tick rewrites every leaf's tie weight). */
static void *ticker_main(void *argp)
{
	struct mtd_lb_picker *p = argp;

	while (atomic_load(&ticking))
		mtd_lb_tick(p, 1000000, 1000000000);
	return NULL;
}

/* warm: a third of the endpoints started 10 s into a 60 s warmup window
 * at the workers' now_ms, and a ticker thread runs alongside. */
static void check_least(const char *policy, bool warm)
{
	static struct t_set s;
	struct mtd_lb_config cfg;
	struct mtd_lb_picker *p;
	struct mtd_lb__least *st;
	uint64_t counts[N_EPS], picks = 0, active = 0;
	int32_t w[N_EPS];
	pthread_t ticker;

	for (size_t i = 0; i < N_EPS; i++)
		w[i] = (int32_t)(50 + i % 3 * 50);
	t_set_init(&s, N_EPS, w);
	mtd_lb_config_defaults(&cfg, mtd_lb_find(policy));
	cfg.n_workers = THREADS;
	if (warm) {
		cfg.warmup.duration_ms = 60000;
		for (size_t i = 0; i < N_EPS; i += 3)
			s.eps[i].start_ms = 1000000 - 10000;
	}
	p = mtd_lb_picker_new(&cfg, s.eps, s.n, NULL);
	ck_assert_ptr_nonnull(p);
	if (warm) {
		mtd_lb_tick(p, 1000000, 1000000000);
		atomic_store(&ticking, true);
		ck_assert_int_eq(pthread_create(&ticker, NULL, ticker_main, p), 0);
	}
	run_threads(p, &s, true, counts);
	if (warm) {
		atomic_store(&ticking, false);
		ck_assert_int_eq(pthread_join(ticker, NULL), 0);
	}
	st = p->state;
	ck_assert(mtd_lb__mintree_consistent(&st->tree));
	for (size_t i = 0; i < N_EPS; i++) {
		uint64_t leaf = atomic_load(&st->tree.node[i]);

		/* Every leaf is this endpoint's cost right now, with its tie
		 * weight (the ramped one for the new endpoints). */
		ck_assert_uint_eq(leaf >> 32, st->cost(s.eps[i].stats));
		ck_assert_uint_eq(leaf & 0xffffffffu, warm ? atomic_load(&st->warm_tw[i]) : st->tw[i]);
		if (warm && i % 3 == 0)
			ck_assert_uint_lt(leaf & 0xffffffffu, st->tw[i]);
		picks += atomic_load(&t_live(&s.stats[i])->picks);
		active += (uint64_t)atomic_load(&t_live(&s.stats[i])->active);
	}
	ck_assert_uint_eq(picks, (uint64_t)THREADS * ROUNDS);
	ck_assert_uint_le(active, (uint64_t)THREADS * MAX_FLIGHT);
	/* And a pick is a true minimum. */
	for (int k = 0; k < 200; k++) {
		struct mtd_lb_pick_ctx ctx = t_ctx(&s);
		uint32_t least = UINT32_MAX;
		int i = mtd_lb_pick(p, &ctx);

		for (size_t j = 0; j < N_EPS; j++)
			if (st->cost(s.eps[j].stats) < least)
				least = st->cost(s.eps[j].stats);
		ck_assert_int_ge(i, 0);
		ck_assert_uint_eq(st->cost(s.eps[i].stats), least);
	}
	mtd_lb_picker_free(p);
}

START_TEST(least_active_threads)
{
	check_least("LEAST_ACTIVE", _i == 1);
}
END_TEST

START_TEST(shortest_response_threads)
{
	check_least("SHORTEST_RESPONSE", _i == 1);
}
END_TEST

/* WEIGHTED_RANDOM / WEIGHTED_ROUND_ROBIN while a third of the endpoints
 * ramp: a ticker thread republishes the warmed-weight table (weights.c,
 * double buffer + generation) at alternating times while the workers
 * pick from it. No pick is out of range or lands on a drained endpoint,
 * every pick is counted, and the ramping endpoints (weight 50, one sixth
 * warm at the workers' now_ms) get fewer picks than the warm ones of
 * weight 100. Under ThreadSanitizer: no race between tick and picks. */
static void *table_ticker_main(void *argp)
{
	struct mtd_lb_picker *p = argp;

	for (int64_t k = 0; atomic_load(&ticking); k++)
		mtd_lb_tick(p, 1000000 - (k % 2) * 1000, 1000000000);
	return NULL;
}

static void check_weighted_warm(const char *policy)
{
	static struct t_set s;
	struct mtd_lb_config cfg;
	struct mtd_lb_picker *p;
	uint64_t counts[N_EPS], picks = 0, ramping = 0, warm = 0;
	int32_t w[N_EPS];
	pthread_t ticker;

	for (size_t i = 0; i < N_EPS; i++)
		w[i] = i % 10 == 9 ? 0 : (int32_t)(50 + i % 3 * 50);
	t_set_init(&s, N_EPS, w);
	mtd_lb_config_defaults(&cfg, mtd_lb_find(policy));
	cfg.n_workers = THREADS;
	cfg.warmup.duration_ms = 60000;
	for (size_t i = 0; i < N_EPS; i += 3)
		s.eps[i].start_ms = 1000000 - 10000;
	p = mtd_lb_picker_new(&cfg, s.eps, s.n, NULL);
	ck_assert_ptr_nonnull(p);
	mtd_lb_tick(p, 1000000, 1000000000);
	atomic_store(&ticking, true);
	ck_assert_int_eq(pthread_create(&ticker, NULL, table_ticker_main, p), 0);
	run_threads(p, &s, false, counts);
	atomic_store(&ticking, false);
	ck_assert_int_eq(pthread_join(ticker, NULL), 0);
	for (size_t i = 0; i < N_EPS; i++) {
		if (w[i] == 0)
			ck_assert_uint_eq(counts[i], 0);
		else if (i % 3 == 0)
			ramping += counts[i];
		else if (i % 3 == 1)
			warm += counts[i]; /* weight 100, warm */
		picks += counts[i];
	}
	ck_assert_uint_eq(picks, (uint64_t)THREADS * ROUNDS);
	ck_assert_uint_lt(ramping, warm);
	mtd_lb_picker_free(p);
}

START_TEST(weighted_random_warm_threads)
{
	check_weighted_warm("WEIGHTED_RANDOM");
}
END_TEST

START_TEST(weighted_round_robin_warm_threads)
{
	check_weighted_warm("WEIGHTED_ROUND_ROBIN");
}
END_TEST

/* CLIENT_SIDE_WEIGHTED_ROUND_ROBIN: workers record ORCA load reports on
 * every answer (the shared per-endpoint report state, many writers) while
 * a ticker thread recomputes the weights and republishes their table (one
 * writer) and the workers pick from it. No pick is out of range or lands on
 * a drained endpoint, every report is counted, and the endpoints reporting
 * the least utilization get the most picks. Under ThreadSanitizer: no race
 * between records, ticks and picks. */
static _Atomic int64_t orca_clock_ms = 1000;
static char orca_text[5][32];
static size_t orca_len[5];

static void *orca_ticker_main(void *argp)
{
	struct mtd_lb_picker *p = argp;

	while (atomic_load(&ticking)) {
		int64_t now = atomic_fetch_add(&orca_clock_ms, 100) + 100;

		mtd_lb_tick(p, 1000000, now * 1000000);
	}
	return NULL;
}

static void *orca_worker_main(void *argp)
{
	struct worker_arg *a = argp;
	uint64_t rng = T_SEED + a->worker;

	for (int r = 0; r < ROUNDS; r++) {
		struct mtd_lb_pick_ctx ctx = {
		        .now_ms = 1000000, .now_ns = 1000000000, .worker = a->worker, .rng = &rng};
		int i = mtd_lb_pick(a->p, &ctx);
		struct mtd_lb_result res = {.ok = true, .latency_us = 100};

		ck_assert_int_ge(i, 0);
		ck_assert_int_lt(i, (int)a->s->n);
		a->counts[i]++;
		mtd_lb_call_begin(a->p, (size_t)i);
		res.orca = (const uint8_t *)orca_text[i % 5];
		res.orca_len = orca_len[i % 5];
		res.now_ns = atomic_load(&orca_clock_ms) * 1000000;
		mtd_lb_call_end(a->p, (size_t)i, &res, res.now_ns);
	}
	return NULL;
}

/* base64 (no padding) of a report: cpu_utilization, rps_fractional 100. */
static size_t orca_encode(double cpu, char *out)
{
	static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	double qps = 100.0;
	uint8_t msg[18];
	uint64_t u;
	size_t o = 0;

	msg[0] = 0x09;
	memcpy(&u, &cpu, 8);
	for (int k = 0; k < 8; k++)
		msg[1 + k] = (uint8_t)(u >> (8 * k));
	msg[9] = 0x31;
	memcpy(&u, &qps, 8);
	for (int k = 0; k < 8; k++)
		msg[10 + k] = (uint8_t)(u >> (8 * k));
	for (size_t i = 0; i < sizeof(msg); i += 3) {
		uint32_t v = (uint32_t)msg[i] << 16 | (uint32_t)msg[i + 1] << 8 | msg[i + 2];

		for (int k = 0; k < 4; k++)
			out[o++] = tab[v >> (18 - 6 * k) & 63];
	}
	return o;
}

START_TEST(client_side_wrr_threads)
{
	static struct t_set s;
	struct mtd_lb_config cfg;
	struct mtd_lb_picker *p;
	uint64_t counts[N_EPS], picks = 0, reports = 0, light = 0, heavy = 0;
	int32_t w[N_EPS];
	pthread_t ticker;
	pthread_t th[THREADS];
	static struct worker_arg args[THREADS];

	for (int k = 0; k < 5; k++)
		orca_len[k] = orca_encode(0.1 + 0.2 * k, orca_text[k]); /* 0.1 .. 0.9 */
	for (size_t i = 0; i < N_EPS; i++)
		w[i] = i % 10 == 9 ? 0 : 100;
	t_set_init(&s, N_EPS, w);
	mtd_lb_config_defaults(&cfg, mtd_lb_find("CLIENT_SIDE_WEIGHTED_ROUND_ROBIN"));
	cfg.n_workers = THREADS;
	cfg.orca.blackout_ms = 0;
	cfg.orca.update_ms = 100;
	p = mtd_lb_picker_new(&cfg, s.eps, s.n, NULL);
	ck_assert_ptr_nonnull(p);
	atomic_store(&ticking, true);
	ck_assert_int_eq(pthread_create(&ticker, NULL, orca_ticker_main, p), 0);
	for (unsigned t = 0; t < THREADS; t++) {
		args[t] = (struct worker_arg){.p = p, .s = &s, .worker = t};
		ck_assert_int_eq(pthread_create(&th[t], NULL, orca_worker_main, &args[t]), 0);
	}
	for (unsigned t = 0; t < THREADS; t++)
		ck_assert_int_eq(pthread_join(th[t], NULL), 0);
	atomic_store(&ticking, false);
	ck_assert_int_eq(pthread_join(ticker, NULL), 0);
	memset(counts, 0, sizeof(counts));
	for (unsigned t = 0; t < THREADS; t++)
		for (size_t i = 0; i < N_EPS; i++)
			counts[i] += args[t].counts[i];
	for (size_t i = 0; i < N_EPS; i++) {
		struct mtd_lb_orca_view v;

		mtd_lb_orca_view(&s.stats[i], &v);
		ck_assert_uint_eq(v.invalid, 0);
		ck_assert_uint_eq(v.reports, counts[i]);
		if (w[i] == 0)
			ck_assert_uint_eq(counts[i], 0);
		light += i % 5 == 0 ? counts[i] : 0; /* cpu 0.1 */
		heavy += i % 5 == 4 ? counts[i] : 0; /* cpu 0.9 */
		picks += counts[i];
		reports += v.reports;
	}
	ck_assert_uint_eq(picks, (uint64_t)THREADS * ROUNDS);
	ck_assert_uint_eq(reports, picks);
	/* Weighted once the first tick saw the reports: 9 to 1 after that. */
	ck_assert_uint_gt(light, 2 * heavy);
	mtd_lb_picker_free(p);
	t_set_fini(&s);
}
END_TEST

static void *pick_only_main(void *argp)
{
	struct worker_arg *a = argp;
	uint64_t rng = T_SEED + a->worker;

	for (int r = 0; r < ROUNDS; r++) {
		struct mtd_lb_pick_ctx ctx = {
		        .now_ms = 1000000, .now_ns = 1000000000, .worker = a->worker, .rng = &rng};
		int i = mtd_lb_pick(a->p, &ctx);

		ck_assert_int_ge(i, 0);
		a->counts[i]++;
	}
	return NULL;
}

START_TEST(swrr_threads_one_sequence)
{
	static struct t_set s;
	struct mtd_lb_config cfg;
	struct mtd_lb_picker *p;
	uint64_t counts[N_EPS];
	int32_t w[N_EPS];
	uint64_t wsum = 0;

	/* Weights summing to a divisor of THREADS x ROUNDS = 80000: 100
	 * endpoints of 4, 8 or 12, sum 800, so the picks are whole cycles. */
	for (size_t i = 0; i < N_EPS; i++) {
		w[i] = (int32_t)(4 + (i % 3) * 4);
		wsum += (uint64_t)w[i];
	}
	w[N_EPS - 1] += (int32_t)(800 - wsum);
	t_set_init(&s, N_EPS, w);
	mtd_lb_config_defaults(&cfg, mtd_lb_find("SMOOTH_WEIGHTED_ROUND_ROBIN"));
	cfg.n_workers = THREADS;
	p = mtd_lb_picker_new(&cfg, s.eps, s.n, NULL);
	ck_assert_ptr_nonnull(p);
	/* Health is cut and restored concurrently (failures), so shares are
	 * only checked in a second run where every call succeeds. */
	run_threads(p, &s, false, counts);
	for (int k = 1; k <= 10; k++)
		mtd_lb_tick(p, k * 1000, (int64_t)k * 1000000000);
	mtd_lb_picker_free(p);

	t_set_fini(&s);
	t_set_init(&s, N_EPS, w);
	p = mtd_lb_picker_new(&cfg, s.eps, s.n, NULL);
	ck_assert_ptr_nonnull(p);
	{
		pthread_t th[THREADS];
		static struct worker_arg args[THREADS];

		/* Picks only (no failures): exactly 100 cycles of 800. */
		for (unsigned t = 0; t < THREADS; t++) {
			args[t] = (struct worker_arg){.p = p, .s = &s, .worker = t};
			ck_assert_int_eq(pthread_create(&th[t], NULL, pick_only_main, &args[t]), 0);
		}
		for (unsigned t = 0; t < THREADS; t++)
			ck_assert_int_eq(pthread_join(th[t], NULL), 0);
		memset(counts, 0, sizeof(counts));
		for (unsigned t = 0; t < THREADS; t++)
			for (size_t i = 0; i < N_EPS; i++)
				counts[i] += args[t].counts[i];
	}
	for (size_t i = 0; i < N_EPS; i++)
		ck_assert_uint_eq(counts[i], (uint64_t)w[i] * (THREADS * ROUNDS / 800));
	mtd_lb_picker_free(p);
	t_set_fini(&s);
}
END_TEST

/* The latency histogram is installed by an endpoint's first success
 * (stats.c): threads that record the first successes of the same fresh
 * endpoints at once (a barrier before each) install one histogram each,
 * and no sample is lost (one installed over another would lose the
 * first's counts; a loser's copy not freed would be a leak under ASan). */
#define HIST_EPS    64
#define HIST_ROUNDS 50

struct hist_arg {
	struct mtd_lb_stats *st;
	pthread_barrier_t *go;
	unsigned worker;
};

static void *first_records_main(void *argp)
{
	struct hist_arg *a = argp;
	struct mtd_lb_result r = {.ok = true, .latency_us = 1000 * (int64_t)(a->worker + 1)};

	for (size_t i = 0; i < HIST_EPS; i++) {
		pthread_barrier_wait(a->go);
		for (int k = 0; k < HIST_ROUNDS; k++) {
			mtd_lb_stats_begin(&a->st[i]);
			mtd_lb_stats_end(&a->st[i], &r, 1000000000, 0);
		}
	}
	return NULL;
}

START_TEST(latency_histogram_first_records_race)
{
	static struct mtd_lb_stats st[HIST_EPS];
	pthread_barrier_t go;
	pthread_t th[THREADS];
	struct hist_arg args[THREADS];
	uint64_t want[MTD_LB_LAT_BUCKETS] = {0};

	memset(st, 0, sizeof(st));
	ck_assert_int_eq(pthread_barrier_init(&go, NULL, THREADS), 0);
	for (unsigned t = 0; t < THREADS; t++) {
		args[t] = (struct hist_arg){.st = st, .go = &go, .worker = t};
		ck_assert_int_eq(pthread_create(&th[t], NULL, first_records_main, &args[t]), 0);
	}
	for (unsigned t = 0; t < THREADS; t++) {
		ck_assert_int_eq(pthread_join(th[t], NULL), 0);
		want[mtd_lb_lat_bucket(1000 * (int64_t)(t + 1))] += HIST_ROUNDS;
	}
	pthread_barrier_destroy(&go);
	for (size_t i = 0; i < HIST_EPS; i++) {
		uint64_t h[MTD_LB_LAT_BUCKETS] = {0};

		ck_assert_ptr_nonnull(t_lat(&st[i]));
		ck_assert_uint_eq(atomic_load(&t_live(&st[i])->latency_count), (uint64_t)THREADS * HIST_ROUNDS);
		mtd_lb_stats_lat_add(&st[i], h);
		for (size_t b = 0; b < MTD_LB_LAT_BUCKETS; b++)
			ck_assert_uint_eq(h[b], want[b]);
		mtd_lb_stats_fini(&st[i]);
		ck_assert_ptr_null(t_lat(&st[i]));
	}
}
END_TEST

static Suite *threads_suite(void)
{
	Suite *s = suite_create("lb_threads");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, least_active_threads, 0, 2);
	tcase_add_loop_test(tc, shortest_response_threads, 0, 2);
	tcase_add_test(tc, swrr_threads_one_sequence);
	tcase_add_test(tc, weighted_random_warm_threads);
	tcase_add_test(tc, weighted_round_robin_warm_threads);
	tcase_add_test(tc, client_side_wrr_threads);
	tcase_add_test(tc, latency_histogram_first_records_race);
	suite_add_tcase(s, tc);
	return s;
}

T_RUN(threads_suite)
