/* bench/lb: the balancers measured, with the real strategy code.
 *
 *   lb_bench [pick|call|sim|ring|hot|subset|all]
 *
 * pick  ns per mtd_lb_pick for every strategy at 3, 100, 1,000 and 10,000
 *       endpoints (one thread, weights 50..150, keys rotating; best of
 *       ten runs of at least 20 ms of thread CPU time), then
 *       the weighted and least-cost strategies with every 10th endpoint
 *       warming up, and CLIENT_SIDE_WEIGHTED_ROUND_ROBIN with calls in
 *       flight everywhere (its pick then compares endpoints). "pick NAME
 *       [N]": one strategy (and one size), to profile a cell.
 * call  the same table for a whole call's work on the picker: pick, then
 *       begin and end (what LEAST_ACTIVE's tree pays on updates).
 * sim   a discrete-event simulation: 10 endpoints, each a FCFS server
 *       with 4 slots and exponential service times (mean 1 ms; one
 *       endpoint 10 ms), Poisson arrivals at 70 % of the fleet's capacity;
 *       every call is picked, begun and ended through lib/lb exactly as the
 *       data plane does, tick() once per simulated second. Reports each
 *       strategy's p50/p99 latency and the share sent to the slow one.
 * ring  spread (max/mean and min/mean of 10,000 keys over 10 endpoints)
 *       and remap fraction when an endpoint leaves or joins, for the ketama
 *       ring and maglev next to a textbook Java ring (String.hashCode of
 *       "host:port#i", 100 virtual nodes, TreeMap.ceilingEntry).
 * hot   Zipf-distributed keys (s = 1.1, 100,000 keys) over 10 endpoints,
 *       Poisson arrivals, exponential service (so bounded load sees calls
 *       in flight): plain ring vs bounded load 1.25 vs hot_keys {100/s,
 *       spread 3}: the most loaded endpoint's share, the calls that left
 *       the key's plain-ring endpoint, the calls on another endpoint than
 *       the key's previous call.
 * subset 100 sidecars, subset size 25 over 100 / 300 / 1,000 endpoints:
 *       connections per endpoint, and what changes when one endpoint
 *       leaves (endpoint 3; the worst of all), one joins, a sidecar
 *       joins; every subset.mode (mtd_lb_subset) vs the SRE book's and
 *       two variants considered for RING.
 * split ns per pick through a routing layer with a split (metadata_key
 *       version, v1 90 / v2 10, 3 / 100 / 1,000 endpoints)
 *       next to the same policy's plain pick and the layer's pick
 *       without a split, and the groups' shares over 1,000,000 picks.
 * orca  heterogeneous backends reporting their utilization (ORCA), three
 *       fleets (one endpoint at half the capacity; one with twice the
 *       slots; one slow per call with many slots): max/mean utilization,
 *       p50/p99 and the odd endpoint's share under ROUND_ROBIN,
 *       LEAST_REQUEST, PEAK_EWMA and CLIENT_SIDE_WEIGHTED_ROUND_ROBIN, five
 *       seeds each (orca_one, bench_orca).
 * build ms of the control thread's CPU to build each strategy's picker
 *       over 1,000 and 10,000 endpoints (weights 50..150): fresh, and over
 *       a previous picker of the same strategy whose set lacked one
 *       endpoint in 100 of this one (what a discovery update pays); best
 *       of three. "build NAME": one strategy.
 * limit ns per rate-limit check (mtd_limit_take): one thread, then two
 *       threads contending on one bucket, every check taking a token
 *       (the compare-and-swap written each time), and two threads on a
 *       bucket that refuses (loads only).
 */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lb/lb.h"
#include "limit/limit.h"

#define MAXN 10000

static struct mtd_lb_endpoint eps[MAXN + 1];
static struct mtd_lb_stats stats[MAXN + 1];
static char ids[MAXN + 1][32];

static void make_eps(size_t n, bool weighted)
{
	memset(stats, 0, sizeof(stats));
	for (size_t i = 0; i < n; i++) {
		snprintf(ids[i], sizeof(ids[i]), "10.%zu.%zu.%zu:8080", i / 65536, i / 256 % 256, i % 256);
		eps[i] = (struct mtd_lb_endpoint){
		        .id = ids[i],
		        .weight = weighted ? (int32_t)(50 + (i * 37) % 101) : 100,
		        .stats = &stats[i],
		};
	}
}

/* CPU time of this thread: on a shared machine the time the thread was
 * preempted does not count against the strategy. */
static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static struct mtd_lb_picker *new_picker(const struct mtd_lb_ops *ops, size_t n, double bounded)
{
	struct mtd_lb_config cfg;
	struct mtd_lb_picker *p;

	mtd_lb_config_defaults(&cfg, ops);
	cfg.bounded_load_factor = bounded;
	p = mtd_lb_picker_new(&cfg, eps, n, NULL);
	if (p == NULL) {
		fprintf(stderr, "%s: picker_new failed\n", ops->name);
		exit(1);
	}
	return p;
}

/* An ORCA load report (cpu_utilization, rps_fractional) as the
 * endpoint-load-metrics-bin trailer carries it: serialized, then base64
 * without padding (what grpc sends). out: room for 32 characters. */
static size_t orca_text(double cpu, double qps, char *out)
{
	static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	uint8_t msg[18];
	uint64_t u;
	size_t o = 0;

	msg[0] = 0x09; /* field 1, I64 */
	memcpy(&u, &cpu, 8);
	for (int k = 0; k < 8; k++)
		msg[1 + k] = (uint8_t)(u >> (8 * k));
	msg[9] = 0x31; /* field 6, I64 */
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

/* One answer of endpoint i at now_ns carrying a load report. */
static void orca_answer(struct mtd_lb_picker *p, size_t i, double cpu, double qps, int64_t latency_us, int64_t now_ns)
{
	char text[32];
	struct mtd_lb_result r = {.ok = true, .latency_us = latency_us, .now_ns = now_ns};

	r.orca_len = orca_text(cpu, qps, text);
	r.orca = (const uint8_t *)text;
	mtd_lb_call_end(p, i, &r, now_ns);
}

/* ---- pick ---------------------------------------------------------------- */

#define PICK_TRIALS 10

static char pick_keys[1024][16];

/* ns per pick (calls: per pick + begin + end, what the data plane pays per
 * call) of ops over the first n endpoints; warming: a warmup window of 60 s
 * in which every tenth endpoint started 10 s ago, one tick() at the picks'
 * time; loaded: every endpoint has 1 to 3 calls in flight (the policies
 * that look at them then take their whole path on every pick). */
static double time_cell(const struct mtd_lb_ops *ops, size_t n, bool calls, bool warming, bool loaded)
{
	struct mtd_lb_config cfg;
	struct mtd_lb_picker *p;
	struct mtd_lb_pick_ctx ctx = {.now_ms = 1000000, .now_ns = 1000000000};
	uint64_t rng = 42, sink = 0;
	const long batch = 4096;
	double t0, t1, best = 1e300;

	make_eps(n, true);
	mtd_lb_config_defaults(&cfg, ops);
	if (warming) {
		cfg.warmup.duration_ms = 60000;
		for (size_t i = 0; i < n; i += 10)
			eps[i].start_ms = ctx.now_ms - 10000;
	}
	if (ops->caps & MTD_LB_CAP_ORCA)
		cfg.orca.blackout_ms = 0; /* the weights' table at once */
	p = mtd_lb_picker_new(&cfg, eps, n, NULL);
	if (p == NULL) {
		fprintf(stderr, "%s: picker_new failed\n", ops->name);
		exit(1);
	}
	ctx.rng = &rng;
	/* Some latency data so the latency strategies work. */
	for (size_t i = 0; i < n; i++) {
		struct mtd_lb_result r = {true, 1000 + (int64_t)(i % 7) * 100};

		mtd_lb_call_begin(p, i);
		if (ops->caps & MTD_LB_CAP_ORCA) /* reported utilizations 0.2 .. 0.9 */
			orca_answer(p, i, 0.2 + 0.1 * (double)(i % 8), 100.0, r.latency_us, 1000000000);
		else
			mtd_lb_call_end(p, i, &r, 1000000000);
	}
	mtd_lb_tick(p, 1000000, 1000000000);
	for (size_t i = 0; loaded && i < n; i++)
		for (size_t k = 0; k <= i % 3; k++)
			mtd_lb_call_begin(p, i);
	/* Best of PICK_TRIALS runs of at least 20 ms of this thread's CPU
	 * time each: the machine is shared, the minimum is the least
	 * disturbed (other processes still share the caches). */
	for (int trial = 0; trial < PICK_TRIALS; trial++) {
		long done = 0;

		t0 = cpu_s();
		do {
			for (long it = 0; it < batch; it++, done++) {
				int i;

				ctx.key = (const uint8_t *)pick_keys[done & 1023];
				ctx.key_len = strlen(pick_keys[done & 1023]);
				i = mtd_lb_pick(p, &ctx);
				sink += (uint64_t)i;
				if (calls && i >= 0) {
					struct mtd_lb_result r = {true, 1000 + (int64_t)(i % 7) * 100};

					mtd_lb_call_begin(p, (size_t)i);
					mtd_lb_call_end(p, (size_t)i, &r, 1000000000);
				}
			}
			t1 = cpu_s();
		} while (t1 - t0 < 0.02);
		if ((t1 - t0) * 1e9 / (double)done < best)
			best = (t1 - t0) * 1e9 / (double)done;
	}
	if (sink == 1)
		printf(" ");
	mtd_lb_picker_free(p);
	return best;
}

/* only / only_n: one strategy and/or one size (lb_bench pick NAME N), to
 * profile one cell; NULL / 0 for all. calls: time_cell's. The table ends
 * with the weighted and least-cost strategies while endpoints warm up. */
static void bench_pick(const char *only, size_t only_n, bool calls)
{
	static const size_t sizes[] = {3, 100, 1000, 10000};
	static const char *const warm_rows[] = {"WEIGHTED_RANDOM", "WEIGHTED_ROUND_ROBIN", "LEAST_ACTIVE",
	                                        "SHORTEST_RESPONSE"};
	static const char *const loaded_rows[] = {"CLIENT_SIDE_WEIGHTED_ROUND_ROBIN"};
	size_t nops, nwarm = sizeof(warm_rows) / sizeof(warm_rows[0]),
	             nloaded = sizeof(loaded_rows) / sizeof(loaded_rows[0]);
	const struct mtd_lb_ops *const *all = mtd_lb_all(&nops);

	for (int k = 0; k < 1024; k++)
		snprintf(pick_keys[k], sizeof(pick_keys[k]), "user-%d", k * 7919);
	printf("| strategy | 3 eps | 100 eps | 1000 eps | 10000 eps |\n");
	printf("|---|---:|---:|---:|---:|\n");
	for (size_t s = 0; s < nops + nwarm + nloaded; s++) {
		const struct mtd_lb_ops *ops = s < nops           ? all[s]
		                               : s < nops + nwarm ? mtd_lb_find(warm_rows[s - nops])
		                                                  : mtd_lb_find(loaded_rows[s - nops - nwarm]);
		bool warming = s >= nops && s < nops + nwarm, loaded = s >= nops + nwarm;

		if (only != NULL && strcmp(only, ops->name) != 0)
			continue;
		printf("| %s%s |", ops->name,
		       warming  ? ", every 10th endpoint warming"
		       : loaded ? ", 1 to 3 calls in flight on every endpoint"
		                : "");
		for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
			if (only_n != 0 && sizes[z] != only_n)
				printf(" |");
			else
				printf(" %.0f |", time_cell(ops, sizes[z], calls, warming, loaded));
		}
		printf("\n");
		fflush(stdout);
	}
}

/* ---- sim ----------------------------------------------------------------- */

#define SIM_N     10
#define SIM_SLOTS 4
#define SIM_CALLS 200000

struct done {
	double t; /* completion time, s */
	int ep;
	double latency; /* s */
};

static struct done heap[SIM_CALLS];
static size_t heap_len;

static void heap_push(struct done d)
{
	size_t i = heap_len++;

	while (i > 0 && heap[(i - 1) / 2].t > d.t) {
		heap[i] = heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	heap[i] = d;
}

static struct done heap_pop(void)
{
	struct done top = heap[0], last = heap[--heap_len];
	size_t i = 0;

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= heap_len)
			break;
		if (c + 1 < heap_len && heap[c + 1].t < heap[c].t)
			c++;
		if (heap[c].t >= last.t)
			break;
		heap[i] = heap[c];
		i = c;
	}
	heap[i] = last;
	return top;
}

static double expo(uint64_t *rng, double mean)
{
	double u = (double)(mtd_lb_rand(rng) >> 11) * 0x1.0p-53;

	return -mean * log1p(-u);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static void sim_one(const struct mtd_lb_ops *ops, double bounded, const char *label)
{
	static double lat[SIM_CALLS];
	double slot_free[SIM_N][SIM_SLOTS];
	const double mean[SIM_N] = {0.010, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001};
	double capacity = 0, lambda, t = 0, next_tick = 1.0;
	uint64_t rng = 7, krng = 11;
	size_t sent_slow = 0, nlat = 0;
	struct mtd_lb_picker *p;

	make_eps(SIM_N, false);
	p = new_picker(ops, SIM_N, bounded);
	memset(slot_free, 0, sizeof(slot_free));
	heap_len = 0;
	for (int i = 0; i < SIM_N; i++)
		capacity += SIM_SLOTS / mean[i];
	lambda = 0.7 * capacity;

	for (size_t c = 0; c < SIM_CALLS; c++) {
		struct mtd_lb_pick_ctx ctx = {0};
		char key[24];
		int e, best = 0;
		double start, svc;

		t += expo(&rng, 1.0 / lambda);
		/* Complete everything due before this arrival. */
		while (heap_len > 0 && heap[0].t <= t) {
			struct done d = heap_pop();
			struct mtd_lb_result r = {
			        .ok = true,
			        .latency_us = (int64_t)(d.latency * 1e6),
			};

			while (next_tick <= d.t) {
				mtd_lb_tick(p, (int64_t)(next_tick * 1000) + 1000000,
				            (int64_t)(next_tick * 1e9) + 1000000000);
				next_tick += 1.0;
			}
			mtd_lb_call_end(p, (size_t)d.ep, &r, (int64_t)(d.t * 1e9) + 1000000000);
			lat[nlat++] = d.latency;
		}
		ctx.now_ms = (int64_t)(t * 1000) + 1000000;
		ctx.now_ns = (int64_t)(t * 1e9) + 1000000000;
		ctx.rng = &rng;
		snprintf(key, sizeof(key), "user-%llu", (unsigned long long)(mtd_lb_rand(&krng) % 10000));
		ctx.key = (const uint8_t *)key;
		ctx.key_len = strlen(key);
		e = mtd_lb_pick(p, &ctx);
		mtd_lb_call_begin(p, (size_t)e);
		sent_slow += e == 0;
		/* FCFS with SIM_SLOTS servers: the call takes the slot that
		 * frees first. */
		for (int s = 1; s < SIM_SLOTS; s++)
			if (slot_free[e][s] < slot_free[e][best])
				best = s;
		start = fmax(t, slot_free[e][best]);
		svc = expo(&rng, mean[e]);
		slot_free[e][best] = start + svc;
		heap_push((struct done){start + svc, e, start + svc - t});
	}
	while (heap_len > 0) {
		struct done d = heap_pop();
		struct mtd_lb_result r = {true, (int64_t)(d.latency * 1e6)};

		mtd_lb_call_end(p, (size_t)d.ep, &r, (int64_t)(d.t * 1e9) + 1000000000);
		lat[nlat++] = d.latency;
	}
	qsort(lat, nlat, sizeof(lat[0]), cmp_double);
	printf("| %s | %.2f | %.2f | %.1f %% |\n", label, lat[nlat / 2] * 1e3, lat[nlat * 99 / 100] * 1e3,
	       100.0 * (double)sent_slow / SIM_CALLS);
	fflush(stdout);
	mtd_lb_picker_free(p);
}

static void bench_sim(void)
{
	size_t nops;
	const struct mtd_lb_ops *const *all = mtd_lb_all(&nops);

	printf("| strategy | p50 ms | p99 ms | share to the slow one |\n");
	printf("|---|---:|---:|---:|\n");
	for (size_t s = 0; s < nops; s++)
		sim_one(all[s], 0.0, all[s]->name);
	sim_one(mtd_lb_find("CONSISTENT_HASH"), 1.25, "CONSISTENT_HASH, bounded 1.25");
	sim_one(mtd_lb_find("MAGLEV"), 1.25, "MAGLEV, bounded 1.25");
}

/* ---- orca ---------------------------------------------------------------- */

/* Heterogeneous backends that report their load: 10 endpoints, each a FCFS
 * server with some slots and exponential service times; endpoint 0 differs
 * from the nine others (struct orca_fleet), Poisson arrivals at ORCA_LOAD
 * of the fleet's capacity. Each answer carries an ORCA report of its
 * endpoint's utilization (busy slot time / slots) and completions per
 * second over the last closed window of ORCA_WINDOW_S (honest figures, a
 * window late), the way a gRPC server's metrics recorder does. Printed per
 * policy, over the steady state (from ORCA_SKIP_S of simulated time on):
 * the utilization of the busiest endpoint over the mean, p50 / p99
 * latency, and endpoint 0's share. */
#define ORCA_N         10
#define ORCA_MAX_SLOTS 16
#define ORCA_CALLS     1000000
#define ORCA_LOAD      0.8
#define ORCA_WINDOW_S  0.1
#define ORCA_BINS      1024 /* windows: the run lasts about 33 s */
#define ORCA_SKIP_S    5.0  /* figures from then on: the steady state */

/* Endpoint 0 against the nine others: slots and mean service time each. */
struct orca_fleet {
	const char *title;
	int slots0, slots;
	double mean0, mean;
};

static const struct orca_fleet orca_fleets[] = {
        {"endpoint 0 at half the capacity: 4 slots of 2 ms, the others 4 of 1 ms", 4, 4, 0.002, 0.001},
        {"endpoint 0 with twice the slots at the same speed: 8 slots of 1 ms, the others 4 of 1 ms", 8, 4, 0.001,
         0.001},
        {"endpoint 0 slow per call with many slots, half the capacity: 8 slots of 4 ms, the others 4 of 1 ms", 8, 4,
         0.004, 0.001},
};

/* Busy slot time of one endpoint per window: the service [a, b) spread
 * over the windows it covers. */
static void orca_busy(double *bins, double a, double b)
{
	for (long k = (long)(a / ORCA_WINDOW_S); k < ORCA_BINS && k * ORCA_WINDOW_S < b; k++) {
		double lo = fmax(a, (double)k * ORCA_WINDOW_S), hi = fmin(b, (double)(k + 1) * ORCA_WINDOW_S);

		if (hi > lo)
			bins[k] += hi - lo;
	}
}

/* One run's figures (orca_one). */
struct orca_fig {
	double max_mean, p50_ms, p99_ms, share0;
};

static void orca_one(const char *name, const struct orca_fleet *f, uint64_t seed, struct orca_fig *out)
{
	static double bins[ORCA_N][ORCA_BINS];
	const struct mtd_lb_ops *ops = mtd_lb_find(name);
	double *lat = malloc(ORCA_CALLS * sizeof(*lat));
	double slot_free[ORCA_N][ORCA_MAX_SLOTS], win_done[ORCA_N] = {0}, rep_util[ORCA_N] = {0}, rep_qps[ORCA_N] = {0};
	double mean[ORCA_N], capacity = 0, lambda, t = 0, next_tick = 1.0;
	double umax = 0, usum = 0;
	int slots[ORCA_N];
	long win = 0, last_win;
	uint64_t rng = seed;
	size_t sent_slow = 0, sent = 0, nlat = 0;
	struct mtd_lb_config cfg;
	struct mtd_lb_picker *p;

	if (lat == NULL || ops == NULL)
		exit(1);
	memset(bins, 0, sizeof(bins));
	for (int i = 0; i < ORCA_N; i++) {
		mean[i] = i == 0 ? f->mean0 : f->mean;
		slots[i] = i == 0 ? f->slots0 : f->slots;
	}
	make_eps(ORCA_N, false);
	mtd_lb_config_defaults(&cfg, ops);
	cfg.orca.blackout_ms = 1000; /* the default 10 s is a third of the run */
	p = mtd_lb_picker_new(&cfg, eps, ORCA_N, NULL);
	if (p == NULL)
		exit(1);
	memset(slot_free, 0, sizeof(slot_free));
	heap_len = 0;
	for (int i = 0; i < ORCA_N; i++)
		capacity += slots[i] / mean[i];
	lambda = ORCA_LOAD * capacity;

	for (size_t c = 0; c < ORCA_CALLS; c++) {
		struct mtd_lb_pick_ctx ctx = {0};
		int e, best = 0;
		double start, svc;

		t += expo(&rng, 1.0 / lambda);
		while (heap_len > 0 && heap[0].t <= t) {
			struct done d = heap_pop();
			int64_t now_ns = (int64_t)(d.t * 1e9) + 1000000000;

			/* A window closed: what the reports say from now on. */
			while ((double)(win + 1) * ORCA_WINDOW_S <= d.t && win + 1 < ORCA_BINS) {
				for (int i = 0; i < ORCA_N; i++) {
					rep_util[i] = bins[i][win] / (slots[i] * ORCA_WINDOW_S);
					rep_qps[i] = win_done[i] / ORCA_WINDOW_S;
					win_done[i] = 0;
				}
				win++;
			}
			while (next_tick <= d.t) {
				mtd_lb_tick(p, (int64_t)(next_tick * 1000) + 1000000,
				            (int64_t)(next_tick * 1e9) + 1000000000);
				next_tick += 1.0;
			}
			win_done[d.ep]++;
			orca_answer(p, (size_t)d.ep, rep_util[d.ep], rep_qps[d.ep], (int64_t)(d.latency * 1e6), now_ns);
			if (d.t - d.latency >= ORCA_SKIP_S)
				lat[nlat++] = d.latency;
		}
		ctx.now_ms = (int64_t)(t * 1000) + 1000000;
		ctx.now_ns = (int64_t)(t * 1e9) + 1000000000;
		ctx.rng = &rng;
		e = mtd_lb_pick(p, &ctx);
		mtd_lb_call_begin(p, (size_t)e);
		if (t >= ORCA_SKIP_S) {
			sent++;
			sent_slow += e == 0;
		}
		for (int s = 1; s < slots[e]; s++)
			if (slot_free[e][s] < slot_free[e][best])
				best = s;
		start = fmax(t, slot_free[e][best]);
		svc = expo(&rng, mean[e]);
		slot_free[e][best] = start + svc;
		orca_busy(bins[e], start, start + svc);
		heap_push((struct done){start + svc, e, start + svc - t});
	}
	while (heap_len > 0) {
		struct done d = heap_pop();
		struct mtd_lb_result r = {.ok = true, .latency_us = (int64_t)(d.latency * 1e6)};

		mtd_lb_call_end(p, (size_t)d.ep, &r, (int64_t)(d.t * 1e9) + 1000000000);
		if (d.t - d.latency >= ORCA_SKIP_S)
			lat[nlat++] = d.latency;
	}
	/* Utilization from ORCA_SKIP_S to the last arrival. */
	last_win = (long)(t / ORCA_WINDOW_S);
	for (int i = 0; i < ORCA_N; i++) {
		double b = 0, u;

		for (long k = (long)(ORCA_SKIP_S / ORCA_WINDOW_S); k < last_win && k < ORCA_BINS; k++)
			b += bins[i][k];
		u = b / (slots[i] * ((double)last_win * ORCA_WINDOW_S - ORCA_SKIP_S));
		umax = fmax(umax, u);
		usum += u;
	}
	qsort(lat, nlat, sizeof(lat[0]), cmp_double);
	*out = (struct orca_fig){umax / (usum / ORCA_N), lat[nlat / 2] * 1e3, lat[nlat * 99 / 100] * 1e3,
	                         100.0 * (double)sent_slow / (double)sent};
	mtd_lb_picker_free(p);
	free(lat);
}

/* Every fleet, every policy, ORCA_SEEDS runs each (seeds 7, 8, ...: the
 * arrivals, service times and random draws; CLIENT_SIDE_WEIGHTED_ROUND_ROBIN's
 * sequence also starts at a random point): the extremes of max/mean and
 * p99 over the runs, the means of p50 and the share. ORCA_FLEET=k in the
 * environment: fleet k only. */
#define ORCA_SEEDS 5

static void bench_orca(void)
{
	static const char *const rows[] = {"ROUND_ROBIN", "LEAST_REQUEST", "PEAK_EWMA",
	                                   "CLIENT_SIDE_WEIGHTED_ROUND_ROBIN"};
	const char *only = getenv("ORCA_FLEET");

	for (size_t k = 0; k < sizeof(orca_fleets) / sizeof(orca_fleets[0]); k++) {
		const struct orca_fleet *f = &orca_fleets[k];
		double cap0 = f->slots0 / f->mean0, cap = f->slots / f->mean;

		if (only != NULL && (size_t)atoi(only) != k)
			continue;
		printf("%s%s (endpoint 0's share of the capacity: %.1f %%), %d runs\n\n", k > 0 ? "\n" : "", f->title,
		       100.0 * cap0 / (cap0 + (ORCA_N - 1) * cap), ORCA_SEEDS);
		printf("| strategy | max/mean utilization | p50 ms | p99 ms | share to endpoint 0 |\n");
		printf("|---|---:|---:|---:|---:|\n");
		for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
			struct orca_fig lo = {INFINITY, INFINITY, INFINITY, INFINITY}, hi = {0}, sum = {0};

			for (uint64_t seed = 7; seed < 7 + ORCA_SEEDS; seed++) {
				struct orca_fig r;

				orca_one(rows[i], f, seed, &r);
				lo.max_mean = fmin(lo.max_mean, r.max_mean);
				hi.max_mean = fmax(hi.max_mean, r.max_mean);
				lo.p99_ms = fmin(lo.p99_ms, r.p99_ms);
				hi.p99_ms = fmax(hi.p99_ms, r.p99_ms);
				sum.p50_ms += r.p50_ms;
				sum.share0 += r.share0;
			}
			printf("| %s | %.3f to %.3f | %.2f | %.2f to %.2f | %.1f %% |\n", rows[i], lo.max_mean,
			       hi.max_mean, sum.p50_ms / ORCA_SEEDS, lo.p99_ms, hi.p99_ms, sum.share0 / ORCA_SEEDS);
			fflush(stdout);
		}
	}
}

/* ---- ring ---------------------------------------------------------------- */

#define RING_KEYS 10000

/* A textbook Java ring: TreeMap<Integer, node> of String.hashCode("addr#i"). */
struct jpoint {
	int32_t h;
	int node;
};

static struct jpoint jring[(MAXN + 1) * 100];
static size_t jlen;

static int jcmp(const void *a, const void *b)
{
	const struct jpoint *x = a, *y = b;

	return (x->h > y->h) - (x->h < y->h);
}

static void jring_build(size_t n)
{
	jlen = 0;
	for (size_t i = 0; i < n; i++)
		for (int v = 0; v < 100; v++) {
			char buf[48];
			int len = snprintf(buf, sizeof(buf), "%s#%d", ids[i], v);

			jring[jlen++] = (struct jpoint){mtd_lb_java_string_hash(buf, (size_t)len), (int)i};
		}
	qsort(jring, jlen, sizeof(jring[0]), jcmp);
	/* TreeMap.put: a later equal key replaces the earlier one. */
	{
		size_t w = 0;

		for (size_t r = 0; r < jlen; r++) {
			if (w > 0 && jring[w - 1].h == jring[r].h)
				jring[w - 1] = jring[r];
			else
				jring[w++] = jring[r];
		}
		jlen = w;
	}
}

static const char *jring_pick(const char *key)
{
	int32_t h = mtd_lb_java_string_hash(key, strlen(key));
	size_t lo = 0, hi = jlen;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (jring[mid].h < h)
			lo = mid + 1;
		else
			hi = mid;
	}
	return ids[jring[lo == jlen ? 0 : lo].node];
}

typedef void map_fn(size_t n, const char **out, const struct mtd_lb_ops *ops);

static char keys_txt[RING_KEYS][16];

static void map_lb(size_t n, const char **out, const struct mtd_lb_ops *ops)
{
	struct mtd_lb_picker *p = new_picker(ops, n, 0.0);
	uint64_t rng = 1;

	for (int k = 0; k < RING_KEYS; k++) {
		struct mtd_lb_pick_ctx ctx = {.rng = &rng};

		ctx.key = (const uint8_t *)keys_txt[k];
		ctx.key_len = strlen(keys_txt[k]);
		out[k] = eps[mtd_lb_pick(p, &ctx)].id;
	}
	mtd_lb_picker_free(p);
}

static void map_java(size_t n, const char **out, const struct mtd_lb_ops *ops)
{
	jring_build(n);
	for (int k = 0; k < RING_KEYS; k++)
		out[k] = jring_pick(keys_txt[k]);
}

/* Endpoint ids are stable strings in ids[]; results are compared by
 * content, so removing endpoint 3 is done by moving the last one into its
 * place and shrinking n. */
static void ring_row(const char *label, map_fn *map, const struct mtd_lb_ops *ops, int hexkeys)
{
	static const char *before[RING_KEYS], *after[RING_KEYS];
	static char saved[RING_KEYS][32];
	const size_t n = 10;
	size_t load[11] = {0}, moved_rm = 0, moved_add = 0, max = 0, min = RING_KEYS;
	char removed[32];

	for (int k = 0; k < RING_KEYS; k++) {
		if (hexkeys)
			snprintf(keys_txt[k], sizeof(keys_txt[k]), "%08x", (unsigned)k * 2654435761u);
		else
			snprintf(keys_txt[k], sizeof(keys_txt[k]), "user-%d", k);
	}
	make_eps(n + 1, false);
	map(n, before, ops);
	for (int k = 0; k < RING_KEYS; k++) {
		for (size_t i = 0; i < n; i++)
			if (before[k] == ids[i])
				load[i]++;
		snprintf(saved[k], sizeof(saved[k]), "%s", before[k]);
	}
	for (size_t i = 0; i < n; i++) {
		if (load[i] > max)
			max = load[i];
		if (load[i] < min)
			min = load[i];
	}
	/* Join: the 11th endpoint. */
	map(n + 1, after, ops);
	for (int k = 0; k < RING_KEYS; k++)
		moved_add += strcmp(saved[k], after[k]) != 0;
	/* Leave: endpoint 3 goes (the last takes its slot). */
	snprintf(removed, sizeof(removed), "%s", ids[3]);
	memcpy(ids[3], ids[n - 1], sizeof(ids[3]));
	make_eps(0, false);
	for (size_t i = 0; i < n - 1; i++)
		eps[i] = (struct mtd_lb_endpoint){.id = ids[i], .weight = 100, .stats = &stats[i]};
	map(n - 1, after, ops);
	for (int k = 0; k < RING_KEYS; k++)
		moved_rm += strcmp(saved[k], after[k]) != 0;
	printf("| %s | %.3f | %.3f | %.4f | %.4f |\n", label, (double)max / (RING_KEYS / (double)n),
	       (double)min / (RING_KEYS / (double)n), (double)moved_rm / RING_KEYS, (double)moved_add / RING_KEYS);
	(void)removed;
}

static void bench_ring(void)
{
	static const char *const fmts[2] = {"user-<k>", "hex(k * 2654435761)"};

	printf("10 endpoints, 10,000 keys; ideal: max/mean = min/mean = 1, "
	       "remove = 0.1000, add = 0.0909\n\n");
	printf("| ring | keys | max/mean | min/mean | remap, 1 of 10 leaves | "
	       "remap, 11th joins |\n");
	printf("|---|---|---:|---:|---:|---:|\n");
	for (int f = 0; f < 2; f++) {
		char label[96];

		snprintf(label, sizeof(label),
		         "Java TreeMap ring (String.hashCode, 100 "
		         "points) | %s",
		         fmts[f]);
		ring_row(label, map_java, NULL, f);
		snprintf(label, sizeof(label),
		         "CONSISTENT_HASH (ketama MD5, 160 "
		         "points) | %s",
		         fmts[f]);
		ring_row(label, map_lb, mtd_lb_find("CONSISTENT_HASH"), f);
		snprintf(label, sizeof(label), "MAGLEV (65537 slots) | %s", fmts[f]);
		ring_row(label, map_lb, mtd_lb_find("MAGLEV"), f);
	}
}

/* ---- hot ----------------------------------------------------------------- */

#define HOT_KEYS  100000
#define HOT_N     10
#define HOT_RATE  50000.0 /* calls per second */
#define HOT_CALLS 200000
#define HOT_SVC   0.002 /* mean service time, s */

static double zipf_cdf[HOT_KEYS];

static void zipf_init(double s)
{
	double sum = 0;

	for (int k = 0; k < HOT_KEYS; k++) {
		sum += pow((double)(k + 1), -s);
		zipf_cdf[k] = sum;
	}
	for (int k = 0; k < HOT_KEYS; k++)
		zipf_cdf[k] /= sum;
}

static int zipf_draw(uint64_t *rng)
{
	double u = (double)(mtd_lb_rand(rng) >> 11) * 0x1.0p-53;
	size_t lo = 0, hi = HOT_KEYS - 1;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (zipf_cdf[mid] < u)
			lo = mid + 1;
		else
			hi = mid;
	}
	return (int)lo;
}

static void hot_one(const char *policy, double bounded, bool hot, const char *label)
{
	static int16_t last[HOT_KEYS];
	static char key[32];
	struct mtd_lb_config cfg;
	struct mtd_lb_picker *p, *plain;
	uint64_t rng = 3, served[HOT_N] = {0}, off_home = 0, changed = 0, repeat = 0, cold = 0, cold_off = 0;
	double t = 0;
	size_t max = 0;

	make_eps(HOT_N, false);
	mtd_lb_config_defaults(&cfg, mtd_lb_find(policy));
	plain = mtd_lb_picker_new(&cfg, eps, HOT_N, NULL);
	cfg.bounded_load_factor = bounded;
	if (hot) {
		cfg.hot_keys.threshold_per_second = 100;
		cfg.hot_keys.spread = 3;
	}
	p = mtd_lb_picker_new(&cfg, eps, HOT_N, NULL);
	if (p == NULL || plain == NULL)
		exit(1);
	memset(last, 0xff, sizeof(last));
	heap_len = 0;
	for (size_t c = 0; c < HOT_CALLS; c++) {
		struct mtd_lb_pick_ctx ctx = {.rng = &rng};
		int k = zipf_draw(&rng), e, home;

		t += expo(&rng, 1.0 / HOT_RATE);
		while (heap_len > 0 && heap[0].t <= t) {
			struct done d = heap_pop();
			struct mtd_lb_result r = {.ok = true, .latency_us = (int64_t)(d.latency * 1e6)};

			mtd_lb_call_end(p, (size_t)d.ep, &r, (int64_t)(d.t * 1e9) + 1000000000);
		}
		ctx.now_ms = (int64_t)(t * 1000) + 1000000;
		ctx.now_ns = (int64_t)(t * 1e9) + 1000000000;
		snprintf(key, sizeof(key), "key-%d", k);
		ctx.key = (const uint8_t *)key;
		ctx.key_len = strlen(key);
		e = mtd_lb_pick(p, &ctx);
		home = mtd_lb_pick(plain, &ctx);
		mtd_lb_call_begin(p, (size_t)e);
		served[e]++;
		off_home += e != home;
		/* Cold: expected rate at or below the 100/s threshold. */
		if ((zipf_cdf[k] - (k > 0 ? zipf_cdf[k - 1] : 0.0)) * HOT_RATE <= 100.0) {
			cold++;
			cold_off += e != home;
		}
		if (last[k] >= 0) {
			repeat++;
			changed += last[k] != e;
		}
		last[k] = (int16_t)e;
		{
			double svc = expo(&rng, HOT_SVC);

			heap_push((struct done){t + svc, e, svc});
		}
	}
	while (heap_len > 0)
		(void)heap_pop();
	for (int i = 0; i < HOT_N; i++)
		if (served[i] > max)
			max = served[i];
	printf("| %s | %.1f %% | %.1f %% | %.1f %% | %.1f %% |\n", label, 100.0 * (double)max / HOT_CALLS,
	       100.0 * (double)off_home / HOT_CALLS, 100.0 * (double)cold_off / (double)(cold ? cold : 1),
	       100.0 * (double)changed / (double)(repeat ? repeat : 1));
	fflush(stdout);
	mtd_lb_picker_free(p);
	mtd_lb_picker_free(plain);
}

static void bench_hot(void)
{
	static const char *const pol[2] = {"CONSISTENT_HASH", "MAGLEV"};

	zipf_init(1.1);
	printf("| ring | most loaded endpoint's share | calls off the key's plain-ring endpoint | the same, cold keys' "
	       "calls only | calls on another endpoint than the key's previous call |\n");
	printf("|---|---:|---:|---:|---:|\n");
	for (int k = 0; k < 2; k++) {
		char label[96];

		snprintf(label, sizeof(label), "%s, plain", pol[k]);
		hot_one(pol[k], 0.0, false, label);
		snprintf(label, sizeof(label), "%s, bounded load 1.25", pol[k]);
		hot_one(pol[k], 1.25, false, label);
		snprintf(label, sizeof(label), "%s, hot_keys {100/s, spread 3}", pol[k]);
		hot_one(pol[k], 0.0, true, label);
	}
}

/* ---- subset -------------------------------------------------------------- */

#define SUB_SIDECARS 100
#define SUB_SIZE     25

/* A subsetting scheme: sidecar `client` of `count`, subset of `size` of
 * eps[0..n) into out. */
typedef void subset_fn(size_t client, size_t count, size_t n, size_t size, uint32_t *out);

/* The SRE book's deterministic subsetting (Site Reliability Engineering,
 * ch. 20): sidecar `client` (no count needed), rounds of shuffled lists. */
static void sre_subset(size_t client, size_t count_unused, size_t n, size_t size, uint32_t *out)
{
	size_t count = n / size > 0 ? n / size : 1, round = client / count, id = client % count;
	uint32_t order[MAXN];
	uint64_t rng = 0x5eed + round;

	(void)count_unused;
	for (size_t i = 0; i < n; i++)
		order[i] = (uint32_t)i;
	for (size_t i = n; i > 1; i--) {
		size_t j = (size_t)(mtd_lb_rand(&rng) % i);
		uint32_t tmp = order[i - 1];

		order[i - 1] = order[j];
		order[j] = tmp;
	}
	for (size_t k = 0; k < size; k++)
		out[k] = order[(id * size + k) % n];
}

struct hashed {
	uint64_t h;
	uint32_t idx;
};

static int hashed_cmp(const void *a, const void *b)
{
	const struct hashed *x = a, *y = b;

	if (x->h != y->h)
		return x->h < y->h ? -1 : 1;
	return strcmp(eps[x->idx].id, eps[y->idx].id);
}

/* eps[0..n) by mtd_lb_hash64 of the id under seed, into order. */
static void hash_order(size_t n, uint64_t seed, uint32_t *order)
{
	static struct hashed hs[MAXN];

	for (size_t i = 0; i < n; i++)
		hs[i] = (struct hashed){mtd_lb_hash64(eps[i].id, strlen(eps[i].id), seed), (uint32_t)i};
	qsort(hs, n, sizeof(hs[0]), hashed_cmp);
	for (size_t i = 0; i < n; i++)
		order[i] = hs[i].idx;
}

/* Considered, not a mode: the SRE book's rounds with each round's list in
 * the order of a hash of the id seeded by the round number, instead of a
 * shuffle of positions (a departure then only closes its own gap). */
static void sre_hashed_subset(size_t client, size_t count_unused, size_t n, size_t size, uint32_t *out)
{
	size_t count = n / size > 0 ? n / size : 1, round = client / count, id = client % count;
	uint32_t order[MAXN];

	(void)count_unused;
	hash_order(n, 0x5eed + round, order);
	for (size_t k = 0; k < size; k++)
		out[k] = order[(id * size + k) % n];
}

/* Considered, not a mode: the hash ring cut in consecutive windows,
 * sidecar i's from (i * size) mod n. */
static void tile_subset(size_t client, size_t count_unused, size_t n, size_t size, uint32_t *out)
{
	uint32_t order[MAXN];

	(void)count_unused;
	hash_order(n, MTD_LB_SUBSET_SEED, order);
	for (size_t k = 0; k < size; k++)
		out[k] = order[(client * size + k) % n];
}

static void maitred_subset(enum mtd_lb_subset_mode mode, size_t client, size_t count, size_t n, size_t size,
                           uint32_t *out)
{
	struct mtd_lb_subset_config sc = {
	        .size = (uint32_t)size, .mode = mode, .index = (uint32_t)client, .count = (uint32_t)count};
	char node[48];
	size_t got = 0;

	snprintf(node, sizeof(node), "sidecar-%zu.pod.cluster.local", client);
	if (mtd_lb_subset(&sc, node, eps, n, out, &got) != 0 || got != size)
		exit(1);
}

static void rendezvous_subset(size_t client, size_t count, size_t n, size_t size, uint32_t *out)
{
	maitred_subset(MTD_LB_SUBSET_RENDEZVOUS, client, count, n, size, out);
}

static void ring_subset(size_t client, size_t count, size_t n, size_t size, uint32_t *out)
{
	maitred_subset(MTD_LB_SUBSET_RING, client, count, n, size, out);
}

static uint32_t sub_before[SUB_SIDECARS + 1][SUB_SIZE], sub_after[SUB_SIDECARS + 1][SUB_SIZE];
static char sub_saved[MAXN + 1][32];

/* Slots of sidecar c's subset in sub_before (ids as sub_saved) that its
 * subset in sub_after (ids as ids[] now) lacks. */
static size_t sub_moved(size_t c)
{
	size_t moved = 0;

	for (size_t k = 0; k < SUB_SIZE; k++) {
		bool kept = false;

		for (size_t j = 0; j < SUB_SIZE && !kept; j++)
			kept = strcmp(sub_saved[sub_before[c][k]], ids[sub_after[c][j]]) == 0;
		moved += !kept;
	}
	return moved;
}

/* Endpoint g leaves (the last takes its index, as a registry's array
 * would): the slots that change, over every sidecar; ids[] restored. */
static size_t sub_leave(subset_fn *fn, size_t n, size_t g, size_t *changed_sidecars)
{
	size_t slots = 0;

	memcpy(ids[g], ids[n - 1], sizeof(ids[g]));
	for (size_t c = 0; c < SUB_SIDECARS; c++) {
		size_t moved;

		fn(c, SUB_SIDECARS, n - 1, SUB_SIZE, sub_after[c]);
		moved = sub_moved(c);
		slots += moved;
		if (changed_sidecars != NULL)
			*changed_sidecars += moved > 0;
	}
	memcpy(ids[g], sub_saved[g], sizeof(ids[g]));
	return slots;
}

/* Subsets by endpoint id (ids[] are stable), so a change is compared by
 * content. */
static void subset_row(const char *label, subset_fn *fn, size_t n)
{
	size_t conns[MAXN] = {0}, max = 0, min = SIZE_MAX, changed_sidecars = 0, slots, worst = 0, step, joined = 0,
	       grown = 0;
	double mean = (double)SUB_SIDECARS * SUB_SIZE / (double)n, var = 0;
	const size_t gone = 3;

	make_eps(n + 1, false);
	snprintf(ids[n], sizeof(ids[n]), "10.99.99.99:9090"); /* the one that joins */
	for (size_t i = 0; i <= n; i++)
		snprintf(sub_saved[i], sizeof(sub_saved[i]), "%s", ids[i]);
	for (size_t c = 0; c < SUB_SIDECARS; c++) {
		fn(c, SUB_SIDECARS, n, SUB_SIZE, sub_before[c]);
		for (size_t k = 0; k < SUB_SIZE; k++)
			conns[sub_before[c][k]]++;
	}
	for (size_t i = 0; i < n; i++) {
		if (conns[i] > max)
			max = conns[i];
		if (conns[i] < min)
			min = conns[i];
		var += ((double)conns[i] - mean) * ((double)conns[i] - mean);
	}
	/* Endpoint 3 leaves; then the worst departure of every endpoint (every
	 * 10th at 1,000). */
	slots = sub_leave(fn, n, gone, &changed_sidecars);
	step = n >= 1000 ? 10 : 1;
	for (size_t g = 0; g < n; g += step) {
		size_t s = sub_leave(fn, n, g, NULL);

		worst = s > worst ? s : worst;
	}
	/* One joins (ids[n]). */
	for (size_t c = 0; c < SUB_SIDECARS; c++) {
		fn(c, SUB_SIDECARS, n + 1, SUB_SIZE, sub_after[c]);
		joined += sub_moved(c);
	}
	/* A 101st sidecar joins the fleet: what the first 100 change. */
	for (size_t c = 0; c < SUB_SIDECARS; c++) {
		fn(c, SUB_SIDECARS + 1, n, SUB_SIZE, sub_after[c]);
		grown += sub_moved(c);
	}
	printf("| %s | %zu | %.1f | %zu | %zu | %.2f | %.2f | %zu | %.2f (%.1f %%) | %.2f (%.1f %%) | %.2f | %.2f |\n",
	       label, n, mean, min, max, (double)max / mean, sqrt(var / (double)n), changed_sidecars,
	       (double)slots / SUB_SIDECARS, 100.0 * (double)slots / (SUB_SIDECARS * SUB_SIZE),
	       (double)worst / SUB_SIDECARS, 100.0 * (double)worst / (SUB_SIDECARS * SUB_SIZE),
	       (double)joined / SUB_SIDECARS, (double)grown / SUB_SIDECARS);
	fflush(stdout);
}

static void bench_subset(void)
{
	static const size_t ns[] = {100, 300, 1000};

	printf("%d sidecars, subset size %d; connections per endpoint; then endpoint 3 leaves, every endpoint leaves "
	       "(every 10th of 1,000), one joins, a 101st sidecar joins\n\n",
	       SUB_SIDECARS, SUB_SIZE);
	printf("| subsetting | endpoints | mean | min | max | max/mean | stddev | sidecars whose subset changed | "
	       "slots changed per sidecar (share of connections) | worst departure: slots per sidecar (share) | "
	       "one joins: slots per sidecar | a 101st sidecar: slots per sidecar |\n");
	printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
	for (size_t z = 0; z < sizeof(ns) / sizeof(ns[0]); z++) {
		subset_row("RENDEZVOUS on node_id (maitred)", rendezvous_subset, ns[z]);
		subset_row("RING at index / count (maitred)", ring_subset, ns[z]);
		subset_row("SRE book deterministic (needs sidecar index)", sre_subset, ns[z]);
		subset_row("considered: SRE rounds, hash order per round", sre_hashed_subset, ns[z]);
		subset_row("considered: ring, window at (index * size) mod n", tile_subset, ns[z]);
	}
}

/* ---- split --------------------------------------------------------------- */

static const struct mtd_lb_meta split_v1[] = {{"version", "v1"}};
static const struct mtd_lb_meta split_v2[] = {{"version", "v2"}};
static const struct mtd_lb_attrs split_m1 = {.meta = {split_v1, 1}}, split_m2 = {.meta = {split_v2, 1}};

/* ns per pick through f over the first n endpoints (best of PICK_TRIALS
 * runs of >= 20 ms of thread CPU time, as time_cell). */
typedef int split_pick_fn(void *obj, const struct mtd_lb_pick_ctx *ctx);

static int pick_plain(void *obj, const struct mtd_lb_pick_ctx *ctx)
{
	return mtd_lb_pick(obj, ctx);
}

static int pick_unpinned(void *obj, const struct mtd_lb_pick_ctx *ctx)
{
	return mtd_lb_layer_pick(obj, NULL, 0, ctx);
}

static int pick_pinned(void *obj, const struct mtd_lb_pick_ctx *ctx)
{
	return mtd_lb_layer_pick(obj, "v1", 2, ctx);
}

/* ns per pick of each of n (f, obj) pairs, their runs interleaved trial
 * by trial (best of PICK_TRIALS runs of >= 20 ms of thread CPU time each,
 * as time_cell): a burst of load on the machine hits them all alike. */
static void time_split(split_pick_fn *const *f, void *const *obj, size_t n, double *best)
{
	struct mtd_lb_pick_ctx ctx = {.now_ms = 1000000, .now_ns = 1000000000};
	uint64_t rng = 42, sink = 0;

	ctx.rng = &rng;
	for (size_t k = 0; k < n; k++)
		best[k] = 1e300;
	for (int trial = 0; trial < PICK_TRIALS; trial++) {
		for (size_t k = 0; k < n; k++) {
			long done = 0;
			double t0 = cpu_s(), t1;

			do {
				for (long it = 0; it < 4096; it++, done++)
					sink += (uint64_t)f[k](obj[k], &ctx);
				t1 = cpu_s();
			} while (t1 - t0 < 0.02);
			if ((t1 - t0) * 1e9 / (double)done < best[k])
				best[k] = (t1 - t0) * 1e9 / (double)done;
		}
	}
	if (sink == 1)
		printf(" ");
}

static void bench_split(void)
{
	static const size_t sizes[] = {3, 100, 1000};
	static const char *const policies[] = {"ROUND_ROBIN", "RANDOM", "WEIGHTED_RANDOM", "LEAST_REQUEST",
	                                       "PEAK_EWMA"};
	const struct mtd_lb_split_weight w[] = {{"v1", 90}, {"v2", 10}};
	const struct mtd_lb_split_config sc = {.weights = w, .n = 2};
	const struct mtd_lb_layer_config lc_split = {.metadata_key = "version", .split = &sc};
	const struct mtd_lb_layer_config lc_tags = {.metadata_key = "version"};

	printf("| policy, endpoints | plain pick | split 90/10 | split - plain | pinned v1 (layer) |\n");
	printf("|---|---:|---:|---:|---:|\n");
	for (size_t p = 0; p < sizeof(policies) / sizeof(policies[0]); p++) {
		for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
			size_t n = sizes[z];
			struct mtd_lb_config cfg;

			make_eps(n, true);
			/* A tenth v2 (at least one), the rest v1. */
			for (size_t i = 0; i < n; i++) {
				eps[i].attrs = i % 10 == 9 || (n < 10 && i == n - 1) ? &split_m2 : &split_m1;
			}
			mtd_lb_config_defaults(&cfg, mtd_lb_find(policies[p]));
			struct mtd_lb_picker *plain = mtd_lb_picker_new(&cfg, eps, n, NULL);
			struct mtd_lb_layer *split = mtd_lb_layer_new(&lc_split, &cfg, eps, n, NULL);
			struct mtd_lb_layer *tags = mtd_lb_layer_new(&lc_tags, &cfg, eps, n, NULL);
			if (plain == NULL || split == NULL || tags == NULL) {
				fprintf(stderr, "split bench: build failed\n");
				exit(1);
			}
			split_pick_fn *const fs[] = {pick_plain, pick_unpinned, pick_pinned};
			void *const os[] = {plain, split, tags};
			double t[3];
			time_split(fs, os, 3, t);
			printf("| %s, %zu | %.1f | %.1f | %+.1f | %.1f |\n", policies[p], n, t[0], t[1], t[1] - t[0],
			       t[2]);
			fflush(stdout);
			mtd_lb_picker_free(plain);
			mtd_lb_layer_free(split);
			mtd_lb_layer_free(tags);
			for (size_t i = 0; i < n; i++) {
				eps[i].attrs = NULL;
			}
		}
	}
	/* The proportions over 1,000,000 unpinned picks, 100 endpoints. */
	struct mtd_lb_config cfg;
	struct mtd_lb_pick_ctx ctx = {.now_ms = 1000000, .now_ns = 1000000000};
	uint64_t rng = 7, v2 = 0;

	make_eps(100, false);
	for (size_t i = 0; i < 100; i++) {
		eps[i].attrs = i % 10 == 9 ? &split_m2 : &split_m1;
	}
	mtd_lb_config_defaults(&cfg, mtd_lb_find("ROUND_ROBIN"));
	struct mtd_lb_layer *l = mtd_lb_layer_new(&lc_split, &cfg, eps, 100, NULL);
	ctx.rng = &rng;
	for (int k = 0; k < 1000000; k++)
		v2 += mtd_lb_layer_pick(l, NULL, 0, &ctx) % 10 == 9;
	printf("\nshares over 1,000,000 unpinned picks (100 endpoints, ROUND_ROBIN): v1 %.3f %%, v2 %.3f %%\n",
	       100.0 - (double)v2 / 1e4, (double)v2 / 1e4);
	mtd_lb_layer_free(l);
	for (size_t i = 0; i < 100; i++) {
		eps[i].attrs = NULL;
	}
}

/* ---- limit --------------------------------------------------------------- */

#define LIMIT_TRIALS 10
#define LIMIT_CHECKS 4000000 /* per thread per trial */

struct limit_run {
	struct mtd_limit_bucket *b;
	pthread_barrier_t *start;
	int64_t now_ns;
	double ns; /* per check, this thread's CPU time */
	unsigned ok;
	double wall0, wall1; /* when it ran (CLOCK_MONOTONIC, s) */
};

/* ---- build --------------------------------------------------------------- */

static double build_ms(const struct mtd_lb_ops *ops, size_t n, bool over_prev)
{
	struct mtd_lb_config cfg;
	double best = 1e30;

	mtd_lb_config_defaults(&cfg, ops);
	for (int run = 0; run < 3; run++) {
		struct mtd_lb_picker *prev = NULL, *p;
		double t0, t1;

		if (over_prev) {
			/* The previous set: this one less one endpoint in 100,
			 * packed as a source would list them. */
			static struct mtd_lb_endpoint before[MAXN];
			size_t k = 0;
			for (size_t i = 0; i < n; i++)
				if (i % 100 != 50)
					before[k++] = eps[i];
			prev = mtd_lb_picker_new(&cfg, before, k, NULL);
			if (prev == NULL)
				return -1;
		}
		t0 = cpu_s();
		p = mtd_lb_picker_new(&cfg, eps, n, prev);
		t1 = cpu_s();
		if (p == NULL)
			return -1;
		mtd_lb_picker_free(p);
		mtd_lb_picker_free(prev);
		if ((t1 - t0) * 1e3 < best)
			best = (t1 - t0) * 1e3;
	}
	return best;
}

static void bench_build(const char *only)
{
	static const size_t sizes[] = {1000, 10000};
	size_t nops;
	const struct mtd_lb_ops *const *all = mtd_lb_all(&nops);

	make_eps(MAXN, true);
	printf("| strategy | 1000 eps | over a previous | 10000 eps | over a previous |\n");
	printf("|---|---:|---:|---:|---:|\n");
	for (size_t s = 0; s < nops; s++) {
		if (only != NULL && strcmp(only, all[s]->name) != 0)
			continue;
		printf("| %s |", all[s]->name);
		for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++)
			printf(" %.2f | %.2f |", build_ms(all[s], sizes[z], false), build_ms(all[s], sizes[z], true));
		printf("\n");
		fflush(stdout);
	}
}

static double wall_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *limit_thread(void *arg)
{
	struct limit_run *r = arg;
	unsigned ok = 0;
	double t0, t1;

	pthread_barrier_wait(r->start);
	r->wall0 = wall_s();
	t0 = cpu_s();
	for (long i = 0; i < LIMIT_CHECKS; i++)
		ok += mtd_limit_take(r->b, r->now_ns + i); /* the call's start time, a ns later each */
	t1 = cpu_s();
	r->wall1 = wall_s();
	r->ns = (t1 - t0) * 1e9 / LIMIT_CHECKS;
	r->ok = ok;
	return NULL;
}

/* Best (over trials) of the slowest thread's ns per check; *ok: the
 * share of checks that took a token in that trial, *overlap: the share of
 * the trial's wall time both threads ran at once (1 for one thread).
 * rate 0: a bucket that never runs dry (one token per ns, a burst of
 * 10^15 ns' worth: outside what config allows, the same code path), so
 * every check takes and writes. */
static double limit_cell(unsigned threads, uint32_t rate, uint32_t burst, double *ok, double *overlap)
{
	static struct mtd_limit_bucket b __attribute__((aligned(64)));
	double best = 1e300;

	for (int trial = 0; trial < LIMIT_TRIALS; trial++) {
		pthread_t t[2];
		struct limit_run r[2];
		pthread_barrier_t start;
		struct timespec ts;
		double worst = 0;
		unsigned taken = 0;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		int64_t now = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
		mtd_limit_bucket_init(&b, rate ? rate : 1, burst, now);
		if (rate == 0) {
			b.interval_ns = 1;
			b.span_ns = 1000000000000000LL;
			atomic_store(&b.zero_ns, now - b.span_ns);
		}
		pthread_barrier_init(&start, NULL, threads);
		for (unsigned k = 0; k < threads; k++) {
			r[k] = (struct limit_run){.b = &b, .start = &start, .now_ns = now};
			pthread_create(&t[k], NULL, limit_thread, &r[k]);
		}
		for (unsigned k = 0; k < threads; k++) {
			pthread_join(t[k], NULL);
			if (r[k].ns > worst)
				worst = r[k].ns;
			taken += r[k].ok;
		}
		pthread_barrier_destroy(&start);
		if (worst < best) {
			best = worst;
			*ok = (double)taken / (threads * (double)LIMIT_CHECKS);
			*overlap = 1;
			if (threads == 2) {
				double from = r[0].wall0 > r[1].wall0 ? r[0].wall0 : r[1].wall0;
				double to = r[0].wall1 < r[1].wall1 ? r[0].wall1 : r[1].wall1;
				double span = (r[0].wall1 > r[1].wall1 ? r[0].wall1 : r[1].wall1) -
				              (r[0].wall0 < r[1].wall0 ? r[0].wall0 : r[1].wall0);
				*overlap = to > from ? (to - from) / span : 0;
			}
		}
	}
	return best;
}

static void bench_limit(void)
{
	static const struct {
		const char *label;
		unsigned threads;
		uint32_t rate, burst;
	} rows[] = {
	        {"one thread, every check taking (what a per-worker share costs)", 1, 0, 1},
	        {"two threads on one bucket, every check taking", 2, 0, 1},
	        {"two threads on one bucket at 50/s burst 10 (refusing)", 2, 50, 10},
	};
	double ok = 0, overlap = 0;

	printf("| rate-limit check (mtd_limit_take) | ns per check | checks that took a token | threads overlapping "
	       "|\n");
	printf("|---|---:|---:|---:|\n");
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		double ns = limit_cell(rows[i].threads, rows[i].rate, rows[i].burst, &ok, &overlap);

		printf("| %s | %.1f | %.3g %% | %.0f %% |\n", rows[i].label, ns, ok * 100, overlap * 100);
		fflush(stdout);
	}
}

int main(int argc, char **argv)
{
	const char *what = argc > 1 ? argv[1] : "all";
	bool all = strcmp(what, "all") == 0;

	if (all || strcmp(what, "pick") == 0) {
		printf("## ns per pick (one thread)\n\n");
		bench_pick(argc > 2 ? argv[2] : NULL, argc > 3 ? (size_t)strtoul(argv[3], NULL, 10) : 0, false);
		printf("\n");
	}
	if (all || strcmp(what, "call") == 0) {
		printf("## ns per call: pick + begin + end (one thread)\n\n");
		bench_pick(argc > 2 ? argv[2] : NULL, argc > 3 ? (size_t)strtoul(argv[3], NULL, 10) : 0, true);
		printf("\n");
	}
	if (all || strcmp(what, "sim") == 0) {
		printf("## simulation: 10 endpoints x 4 slots, mean 1 ms, one "
		       "at 10 ms, 70 %% load, %d calls\n\n",
		       SIM_CALLS);
		bench_sim();
		printf("\n");
	}
	if (all || strcmp(what, "ring") == 0) {
		printf("## ring spread and remap\n\n");
		bench_ring();
		printf("\n");
	}
	if (all || strcmp(what, "hot") == 0) {
		printf("## hot keys: Zipf s = 1.1 over %d keys, %d endpoints, %.0f calls/s, %d calls\n\n", HOT_KEYS,
		       HOT_N, HOT_RATE, HOT_CALLS);
		bench_hot();
		printf("\n");
	}
	if (all || strcmp(what, "subset") == 0) {
		printf("## subsetting\n\n");
		bench_subset();
		printf("\n");
	}
	if (all || strcmp(what, "split") == 0) {
		printf("## split: ns per pick (one thread)\n\n");
		bench_split();
		printf("\n");
	}
	if (all || strcmp(what, "orca") == 0) {
		printf("## orca: backends of unequal capacity reporting their load\n\n");
		bench_orca();
	}
	if (all || strcmp(what, "build") == 0) {
		printf("## ms to build a picker (one thread)\n\n");
		bench_build(argc > 2 && !all ? argv[2] : NULL);
		printf("\n");
	}
	if (all || strcmp(what, "limit") == 0) {
		printf("## rate limit: one atomic bucket\n\n");
		bench_limit();
	}
	return 0;
}
