/* ORCA load reports (orca.c) and CLIENT_SIDE_WEIGHTED_ROUND_ROBIN
 * (client_side_wrr.c): the report reader checked against protobuf-c's
 * encoder (an independent implementation of the same proto), base64 as
 * -bin metadata arrives, gRFC A58's weight, blackout and expiration, and
 * the policy's shares, fallbacks, drains and exclusions, its pick's
 * correction by calls in flight and the concurrency scales it learns,
 * and the pick under threads while the control thread ticks. */
#include "config.h"

#include <errno.h>
#include <pthread.h>

#include "core/base64.h"
#include "lb-test.h"
#include "lb/lb-impl.h"
#include "xds/data/orca/v3/orca_load_report.pb-c.h"

typedef Xds__Data__Orca__V3__OrcaLoadReport PbReport;

static Suite *orca_suite(void);

static size_t b64(const uint8_t *in, size_t n, char *out, bool pad)
{
	static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t o = 0;

	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) |
		             (i + 2 < n ? in[i + 2] : 0);
		size_t chars = n - i >= 3 ? 4 : n - i + 1;

		for (size_t k = 0; k < 4; k++)
			if (k < chars)
				out[o++] = tab[v >> (18 - 6 * k) & 63];
			else if (pad)
				out[o++] = '=';
	}
	out[o] = '\0';
	return o;
}

/* A report with the figures given (and some of everything else), as the
 * trailer carries it. */
static size_t encode(char *out, double cpu, double app, double qps, double eps, bool pad)
{
	PbReport r = XDS__DATA__ORCA__V3__ORCA_LOAD_REPORT__INIT;
	Xds__Data__Orca__V3__OrcaLoadReport__NamedMetricsEntry nm = XDS__DATA__ORCA__V3__ORCA_LOAD_REPORT__NAMED_METRICS_ENTRY__INIT;
	Xds__Data__Orca__V3__OrcaLoadReport__NamedMetricsEntry *nmp = &nm;
	Xds__Data__Orca__V3__OrcaLoadReport__RequestCostEntry rc = XDS__DATA__ORCA__V3__ORCA_LOAD_REPORT__REQUEST_COST_ENTRY__INIT;
	Xds__Data__Orca__V3__OrcaLoadReport__RequestCostEntry *rcp = &rc;
	uint8_t buf[512];
	char queue[] = "queue", db[] = "db";
	size_t n;

	r.cpu_utilization = cpu;
	r.mem_utilization = 0.25;
	r.application_utilization = app;
	r.rps_fractional = qps;
	r.eps = eps;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
	r.rps = 7; /* deprecated, still on the wire */
#pragma GCC diagnostic pop
	nm.key = queue;
	nm.value = 3.5;
	r.n_named_metrics = 1;
	r.named_metrics = &nmp;
	rc.key = db;
	rc.value = 1.25;
	r.n_request_cost = 1;
	r.request_cost = &rcp;
	n = xds__data__orca__v3__orca_load_report__get_packed_size(&r);
	ck_assert_uint_le(n, sizeof(buf));
	xds__data__orca__v3__orca_load_report__pack(&r, buf);
	return b64(buf, n, out, pad);
}

START_TEST(parse_matches_protobuf_c)
{
	char text[1024];
	struct mtd_lb_orca_report r;

	for (int pad = 0; pad < 2; pad++) {
		size_t n = encode(text, 0.75, 0.5, 123.5, 4.25, pad);

		ck_assert_int_eq(mtd_lb_orca_parse_b64((const uint8_t *)text, n, &r), 0);
		ck_assert(r.cpu == 0.75 && r.app == 0.5 && r.qps == 123.5 && r.eps == 4.25 && r.mem == 0.25);
		ck_assert_uint_eq(r.rps, 7);
	}
	/* The empty report (every figure 0) is valid. */
	ck_assert_int_eq(mtd_lb_orca_parse_b64((const uint8_t *)"", 0, &r), 0);
	ck_assert(r.cpu == 0 && r.qps == 0);
}
END_TEST

START_TEST(parse_refuses_malformed)
{
	/* cpu_utilization = 0.5 (field 1, I64) */
	const uint8_t good[] = {0x09, 0, 0, 0, 0, 0, 0, 0xe0, 0x3f};
	const uint8_t truncated[] = {0x09, 0, 0, 0, 0, 0, 0, 0xe0};
	const uint8_t wrong_type[] = {0x08, 0x01};                /* field 1 as a varint */
	const uint8_t negative[] = {0x09, 0, 0, 0, 0, 0, 0, 0xe0, 0xbf}; /* -0.5 */
	const uint8_t nan[] = {0x39, 0, 0, 0, 0, 0, 0, 0xf8, 0x7f};     /* eps NaN */
	const uint8_t mem_above_1[] = {0x11, 0, 0, 0, 0, 0, 0, 0x00, 0x40}; /* 2.0 */
	const uint8_t group[] = {0x5b, 0x5c};                     /* field 11, start group */
	const uint8_t field0[] = {0x01, 0, 0, 0, 0, 0, 0, 0, 0};
	const uint8_t bad_entry[] = {0x42, 0x02, 0x10, 0x01};    /* named_metrics value as a varint */
	const uint8_t long_len[] = {0x42, 0x05, 0x0a, 0x01};      /* entry longer than the report */
	const uint8_t unknown_ok[] = {0x50, 0x05, 0x09, 0, 0, 0, 0, 0, 0, 0xe0, 0x3f}; /* field 10 skipped */
	struct mtd_lb_orca_report r = {.cpu = 42};

	ck_assert_int_eq(mtd_lb_orca_parse(good, sizeof(good), &r), 0);
	ck_assert(r.cpu == 0.5);
	r.cpu = 42;
	ck_assert_int_eq(mtd_lb_orca_parse(truncated, sizeof(truncated), &r), -EINVAL);
	ck_assert_int_eq(mtd_lb_orca_parse(wrong_type, sizeof(wrong_type), &r), -EINVAL);
	ck_assert_int_eq(mtd_lb_orca_parse(negative, sizeof(negative), &r), -EINVAL);
	ck_assert_int_eq(mtd_lb_orca_parse(nan, sizeof(nan), &r), -EINVAL);
	ck_assert_int_eq(mtd_lb_orca_parse(mem_above_1, sizeof(mem_above_1), &r), -EINVAL);
	ck_assert_int_eq(mtd_lb_orca_parse(group, sizeof(group), &r), -EINVAL);
	ck_assert_int_eq(mtd_lb_orca_parse(field0, sizeof(field0), &r), -EINVAL);
	ck_assert_int_eq(mtd_lb_orca_parse(bad_entry, sizeof(bad_entry), &r), -EINVAL);
	ck_assert_int_eq(mtd_lb_orca_parse(long_len, sizeof(long_len), &r), -EINVAL);
	ck_assert(r.cpu == 42); /* untouched by every refusal */
	ck_assert_int_eq(mtd_lb_orca_parse(unknown_ok, sizeof(unknown_ok), &r), 0);
	ck_assert(r.cpu == 0.5);
}
END_TEST

START_TEST(base64_variants)
{
	uint8_t out[8];

	ck_assert_int_eq(mtd_base64_decode((const uint8_t *)"+/8=", 4, out, sizeof(out)), 2);
	ck_assert(out[0] == 0xfb && out[1] == 0xff);
	ck_assert_int_eq(mtd_base64_decode((const uint8_t *)"-_8", 3, out, sizeof(out)), 2);
	ck_assert(out[0] == 0xfb && out[1] == 0xff);
	ck_assert_int_eq(mtd_base64_decode((const uint8_t *)"QQ", 2, out, sizeof(out)), 1);
	ck_assert_int_eq(mtd_base64_decode((const uint8_t *)"QR", 2, out, sizeof(out)), -EINVAL); /* trailing bits */
	ck_assert_int_eq(mtd_base64_decode((const uint8_t *)"Q", 1, out, sizeof(out)), -EINVAL);
	ck_assert_int_eq(mtd_base64_decode((const uint8_t *)"QQ=A", 4, out, sizeof(out)), -EINVAL);
	ck_assert_int_eq(mtd_base64_decode((const uint8_t *)"Q Q=", 4, out, sizeof(out)), -EINVAL);
	ck_assert_int_eq(mtd_base64_decode((const uint8_t *)"QUFBQUFBQUFB", 12, out, sizeof(out)), -EINVAL);
}
END_TEST

START_TEST(weight_formula)
{
	struct mtd_lb_orca_report r = {.cpu = 0.5, .qps = 100};

	ck_assert_double_eq_tol(mtd_lb_orca_weight(&r, 1.0), 200.0, 1e-9);
	r.app = 0.25; /* preferred over cpu */
	ck_assert_double_eq_tol(mtd_lb_orca_weight(&r, 1.0), 400.0, 1e-9);
	r.eps = 10; /* 100 / (0.25 + 0.1 x 1.5) */
	ck_assert_double_eq_tol(mtd_lb_orca_weight(&r, 1.5), 250.0, 1e-9);
	ck_assert_double_eq_tol(mtd_lb_orca_weight(&r, 0.0), 400.0, 1e-9);
	r.qps = 0;
	ck_assert(mtd_lb_orca_weight(&r, 1.0) == 0.0);
	r = (struct mtd_lb_orca_report){.qps = 10};
	ck_assert(mtd_lb_orca_weight(&r, 1.0) == 0.0);
}
END_TEST

static struct mtd_lb_orca_config cfg_of(int64_t blackout, int64_t expiration)
{
	struct mtd_lb_config c;

	mtd_lb_config_defaults(&c, NULL);
	c.orca.blackout_ms = blackout;
	c.orca.expiration_ms = expiration;
	return c.orca;
}

static int record(struct mtd_lb_stats *st, double cpu, double qps, const struct mtd_lb_orca_config *c, int64_t now)
{
	char text[1024];
	size_t n = encode(text, cpu, 0, qps, 0, false);

	return mtd_lb_orca_record(st, (const uint8_t *)text, n, c, now);
}

START_TEST(blackout_and_expiration)
{
	static struct mtd_lb_stats st;
	struct mtd_lb_orca_config c = cfg_of(10000, 180000);
	struct mtd_lb_orca_view v;

	memset(&st, 0, sizeof(st));
	ck_assert(mtd_lb_orca_weight_at(&st, &c, 5000) == 0.0); /* none */
	ck_assert_int_eq(record(&st, 0.5, 100, &c, 1000), 0);
	ck_assert(mtd_lb_orca_weight_at(&st, &c, 1000) == 0.0);   /* blackout */
	ck_assert(mtd_lb_orca_weight_at(&st, &c, 10999) == 0.0);
	ck_assert_double_eq_tol(mtd_lb_orca_weight_at(&st, &c, 11000), 200.0, 1e-9);
	/* Later reports keep the run going and replace the weight. */
	ck_assert_int_eq(record(&st, 0.25, 100, &c, 150000), 0);
	ck_assert_double_eq_tol(mtd_lb_orca_weight_at(&st, &c, 160000), 400.0, 1e-9);
	/* Expired 180 s after the last report... */
	ck_assert(mtd_lb_orca_weight_at(&st, &c, 330000) == 0.0);
	/* ...and a new run has its blackout again. */
	ck_assert_int_eq(record(&st, 0.25, 100, &c, 400000), 0);
	ck_assert(mtd_lb_orca_weight_at(&st, &c, 405000) == 0.0);
	ck_assert_double_eq_tol(mtd_lb_orca_weight_at(&st, &c, 410000), 400.0, 1e-9);
	/* A report without a weight (qps 0) does not extend the run. */
	ck_assert_int_eq(record(&st, 0.25, 0, &c, 500000), 0);
	ck_assert(mtd_lb_orca_weight_at(&st, &c, 590000) == 0.0);
	/* A malformed report changes nothing but its counter. */
	ck_assert_int_eq(mtd_lb_orca_record(&st, (const uint8_t *)"CQ!", 3, &c, 600000), -EINVAL);
	mtd_lb_orca_view(&st, &v);
	ck_assert_uint_eq(v.invalid, 1);
	ck_assert_uint_eq(v.reports, 4);
	ck_assert(v.cpu == 0.25 && v.qps == 0 && v.mem == 0.25);
	/* blackout 0: the first report counts at once. */
	c = cfg_of(0, 180000);
	mtd_lb_stats_fini(&st);
	ck_assert_int_eq(record(&st, 0.5, 100, &c, 1000), 0);
	ck_assert_double_eq_tol(mtd_lb_orca_weight_at(&st, &c, 1000), 200.0, 1e-9);
	mtd_lb_stats_fini(&st);
}
END_TEST

/* An endpoint without reports (most: a sidecar knows thousands and calls
 * few) has no report state: it reads as none and as no out-of-band
 * stream (OFF), and a tick's 0 or an OFF makes none; its first report, a
 * weight or an out-of-band stream wanted does (the state holds the
 * stream's state: struct mtd_lb_stats, in every endpoint, is one
 * pointer). */
START_TEST(no_state_until_a_report)
{
	static struct mtd_lb_stats st;
	struct mtd_lb_orca_config c = cfg_of(0, 180000);
	struct mtd_lb_orca_view v;

	memset(&st, 0, sizeof(st));
	mtd_lb_orca_set_oob(&st, MTD_LB_ORCA_OOB_OFF);
	mtd_lb__orca_set_used(&st, 0.0);
	ck_assert_ptr_null(t_orca(&st));
	ck_assert_int_eq(mtd_lb_orca_oob_state(&st), MTD_LB_ORCA_OOB_OFF);
	ck_assert(mtd_lb_orca_trailers_count(&st));
	ck_assert_uint_eq(sizeof(st), sizeof(void *));
	mtd_lb_orca_set_oob(&st, MTD_LB_ORCA_OOB_WAITING);
	ck_assert_ptr_nonnull(t_orca(&st));
	ck_assert(mtd_lb_orca_weight_at(&st, &c, 1000) == 0.0);
	mtd_lb_orca_view(&st, &v);
	ck_assert(v.reports == 0 && v.invalid == 0 && v.weight == 0 && v.cpu == 0 && v.utilization == 0);
	ck_assert_int_eq(v.oob, MTD_LB_ORCA_OOB_WAITING);
	ck_assert(!mtd_lb_orca_trailers_count(&st));
	mtd_lb__orca_set_used(&st, 5.0);
	ck_assert_ptr_nonnull(t_orca(&st));
	mtd_lb_orca_view(&st, &v);
	ck_assert(v.weight == 5.0 && v.reports == 0);
	ck_assert_int_eq(v.oob, MTD_LB_ORCA_OOB_WAITING);
	mtd_lb_stats_fini(&st);
	ck_assert_ptr_null(t_orca(&st));
	/* A malformed first report makes it too: it is counted. */
	ck_assert_int_eq(mtd_lb_orca_record(&st, (const uint8_t *)"CQ!", 3, &c, 600000), -EINVAL);
	mtd_lb_orca_view(&st, &v);
	ck_assert_uint_eq(v.invalid, 1);
	mtd_lb_stats_fini(&st);
}
END_TEST

/* A CLIENT_SIDE_WEIGHTED_ROUND_ROBIN picker over s with short periods;
 * now_ms: monotonic ms of the clock the tests drive. */
static struct mtd_lb_picker *cswrr(struct t_set *s, struct mtd_lb_config *cfg)
{
	mtd_lb_config_defaults(cfg, mtd_lb_find("CLIENT_SIDE_WEIGHTED_ROUND_ROBIN"));
	ck_assert_ptr_nonnull(cfg->ops);
	cfg->orca.blackout_ms = 2000;
	cfg->orca.expiration_ms = 5000;
	cfg->orca.update_ms = 1000;
	return t_picker("CLIENT_SIDE_WEIGHTED_ROUND_ROBIN", s, cfg);
}

/* What the data plane does when an answer ends: the trailer to the
 * picker's report hook. */
static void answer(struct mtd_lb_picker *p, size_t i, double cpu, double qps, int64_t mono_ms)
{
	char text[1024];
	struct mtd_lb_result res = {.ok = true, .latency_us = 100};

	res.orca_len = encode(text, cpu, 0, qps, 0, true);
	res.orca = (const uint8_t *)text;
	res.now_ns = mono_ms * 1000000;
	mtd_lb_call_begin(p, i);
	mtd_lb_call_end(p, i, &res, res.now_ns);
}

static void tick(struct mtd_lb_picker *p, int64_t mono_ms)
{
	mtd_lb_tick(p, 1000000 /* t_ctx's wall clock */, mono_ms * 1000000);
}

START_TEST(shares_follow_reported_utilization)
{
	static struct t_set s;
	struct mtd_lb_config cfg;
	struct mtd_lb_picker *p;
	uint64_t counts[T_MAX_EPS];
	const double cpu[3] = {0.2, 0.4, 0.8};

	t_set_init(&s, 3, NULL);
	p = cswrr(&s, &cfg);
	for (size_t i = 0; i < 3; i++)
		answer(p, i, cpu[i], 100, 1000);
	/* In the blackout: round robin, exactly. */
	tick(p, 1500);
	t_count(p, &s, counts, 3000);
	ck_assert_uint_eq(counts[0], 1000);
	ck_assert_uint_eq(counts[1], 1000);
	ck_assert_uint_eq(counts[2], 1000);
	/* Past it: 4 : 2 : 1 (57 / 29 / 14 %), within a few calls of the
	 * exact share (the golden-ratio sequence is low-discrepancy). */
	tick(p, 3000);
	t_count(p, &s, counts, 7000);
	ck_assert_uint_le((uint64_t)llabs((long long)counts[0] - 4000), 10);
	ck_assert_uint_le((uint64_t)llabs((long long)counts[1] - 2000), 10);
	ck_assert_uint_le((uint64_t)llabs((long long)counts[2] - 1000), 10);
	{
		struct mtd_lb_orca_view v;

		mtd_lb_orca_view(&s.stats[2], &v);
		ck_assert_double_eq_tol(v.weight, 125.0, 1e-9);
		ck_assert_double_eq_tol(v.utilization, 0.8, 1e-12);
	}
	/* Endpoint 2 stops reporting: at 6000 its weight (last 1000) has
	 * expired and it gets the mean of the others (500 + 250) / 2. */
	answer(p, 0, 0.2, 100, 5500);
	answer(p, 1, 0.4, 100, 5500);
	tick(p, 6000);
	t_count(p, &s, counts, 9000); /* 500 : 250 : 375 */
	ck_assert_uint_le((uint64_t)llabs((long long)counts[0] - 4000), 10);
	ck_assert_uint_le((uint64_t)llabs((long long)counts[1] - 2000), 10);
	ck_assert_uint_le((uint64_t)llabs((long long)counts[2] - 3000), 10);
	/* Only one reporter left: round robin again. */
	answer(p, 0, 0.2, 100, 9000);
	tick(p, 10500); /* 1 expired at 10500 */
	t_count(p, &s, counts, 3000);
	ck_assert_uint_eq(counts[0], 1000);
	ck_assert_uint_eq(counts[2], 1000);
	mtd_lb_picker_free(p);
}
END_TEST

/* n calls begun on endpoint i and left in flight. */
static void hold(struct mtd_lb_picker *p, size_t i, int n)
{
	for (int k = 0; k < n; k++)
		mtd_lb_call_begin(p, i);
}

/* n of endpoint i's calls in flight end (neutral: a cancelled call). */
static void release(struct mtd_lb_picker *p, size_t i, int n)
{
	struct mtd_lb_result res = {.neutral = true};

	for (int k = 0; k < n; k++)
		mtd_lb_call_end(p, i, &res, 0);
}

/* picks calls, each begun and ended at once (what is in flight stays):
 * the calls started per endpoint into counts. */
static void run_calls(struct mtd_lb_picker *p, struct t_set *s, uint64_t *counts, uint64_t picks)
{
	struct mtd_lb_pick_ctx ctx = t_ctx(s);
	struct mtd_lb_result res = {.ok = true, .latency_us = 100};

	memset(counts, 0, sizeof(counts[0]) * s->n);
	for (uint64_t k = 0; k < picks; k++) {
		int i = mtd_lb_pick(p, &ctx);

		ck_assert_int_ge(i, 0);
		counts[i]++;
		mtd_lb_call_begin(p, (size_t)i);
		mtd_lb_call_end(p, (size_t)i, &res, 0);
	}
}

/* An endpoint with a queue (calls in flight) is passed over for one
 * without, whatever the weighted sequence says; without a queue anywhere
 * the sequence alone picks (the shares above are exact). */
START_TEST(queued_endpoint_avoided)
{
	static struct t_set s;
	struct mtd_lb_config cfg;
	struct mtd_lb_picker *p;
	uint64_t counts[T_MAX_EPS];

	t_set_init(&s, 3, NULL);
	p = cswrr(&s, &cfg);
	for (size_t i = 0; i < 3; i++)
		answer(p, i, 0.5, 100, 1000);
	tick(p, 3500);
	t_count(p, &s, counts, 3000);
	ck_assert_uint_le((uint64_t)llabs((long long)counts[0] - 1000), 3);
	/* Endpoint 0 has 50 calls in flight, the others 1 each: it gets a
	 * call only when all CHOICES draws land on it (its sequence turn
	 * and three more draws at a third each: 1/81 of the calls), where
	 * the sequence alone would give it a third. */
	hold(p, 0, 50);
	hold(p, 1, 1);
	hold(p, 2, 1);
	t_count(p, &s, counts, 8100);
	ck_assert_uint_lt(counts[0], 300);
	ck_assert_uint_gt(counts[1], 3000);
	ck_assert_uint_gt(counts[2], 3000);
	/* Its queue gone and the others still busy, it is taken on its own
	 * turns and whenever one of the other turns draws it. */
	release(p, 0, 50);
	t_count(p, &s, counts, 3000);
	ck_assert_uint_gt(counts[0], 2000);
	mtd_lb_picker_free(p);
}
END_TEST

/* In the blackout (no weights: round robin, gRFC A58) calls in flight
 * change nothing: the turn is exact. */
START_TEST(round_robin_ignores_calls_in_flight)
{
	static struct t_set s;
	struct mtd_lb_config cfg;
	struct mtd_lb_picker *p;
	uint64_t counts[T_MAX_EPS];

	t_set_init(&s, 3, NULL);
	p = cswrr(&s, &cfg);
	for (size_t i = 0; i < 3; i++)
		answer(p, i, 0.2 * (double)(i + 1), 100, 1000);
	tick(p, 1500);
	hold(p, 0, 50);
	t_count(p, &s, counts, 3000);
	ck_assert_uint_eq(counts[0], 1000);
	ck_assert_uint_eq(counts[1], 1000);
	ck_assert_uint_eq(counts[2], 1000);
	mtd_lb_picker_free(p);
}
END_TEST

/* An endpoint that always has more calls in flight than the others for
 * the same share (it runs more at once) loses every comparison by raw
 * calls in flight and gets far less than its share; one update period
 * later its scale has caught up: it gets at least its share. And where
 * the shares were met, the scales do not move. */
START_TEST(scales_learnt_from_shares)
{
	static struct t_set s;
	struct mtd_lb_config cfg;
	struct mtd_lb_picker *p;
	uint64_t counts[T_MAX_EPS];

	t_set_init(&s, 2, NULL);
	p = cswrr(&s, &cfg);
	answer(p, 0, 0.5, 100, 1000);
	answer(p, 1, 0.5, 100, 1000);
	tick(p, 3500);
	/* Both idle over a period: the shares are exact, nothing moves. */
	run_calls(p, &s, counts, 4000);
	ck_assert_uint_le((uint64_t)llabs((long long)counts[0] - 2000), 3);
	tick(p, 4500);
	hold(p, 0, 3);
	hold(p, 1, 1);
	run_calls(p, &s, counts, 4000);
	/* 3 against 1 in flight at equal scales: endpoint 0 only when all
	 * four draws are its (1/16 of its turns). */
	ck_assert_uint_lt(counts[0], 400);
	tick(p, 5500);
	run_calls(p, &s, counts, 4000);
	ck_assert_uint_ge(counts[0], 2000);
	mtd_lb_picker_free(p);
}
END_TEST

/* Workers picking with calls in flight (so the comparison runs), ending
 * them with reports, while the control thread ticks a new update period
 * each time (weights, scales and the table rewritten under the picks).
 * Every pick in range and never the drained endpoint; under
 * ThreadSanitizer (deploy/tsan.sh with TSAN_UNIT=tests/unit/test_lb_orca):
 * no race. */
#define TH_WORKERS   4
#define TH_PICKS     20000
#define TH_IN_FLIGHT 8

struct th_arg {
	struct mtd_lb_picker *p;
	struct t_set *s;
	unsigned worker;
	uint64_t counts[T_MAX_EPS];
	bool bad;
};

static _Atomic bool th_ticking;

static void *th_worker(void *argp)
{
	struct th_arg *a = argp;
	struct mtd_lb_pick_ctx ctx = {.now_ms = 1000000, .now_ns = 1000000000, .worker = a->worker};
	uint64_t rng = 0x9e3779b97f4a7c15ULL * (a->worker + 1);
	int held[TH_IN_FLIGHT];
	char text[1024];
	size_t len = encode(text, 0.5, 0, 100, 0, false);

	ctx.rng = &rng;
	for (int k = 0; k < TH_PICKS; k++) {
		int i = mtd_lb_pick(a->p, &ctx);

		if (i < 0 || i >= (int)a->s->n || a->s->eps[i].weight <= 0) {
			a->bad = true;
			break;
		}
		a->counts[i]++;
		mtd_lb_call_begin(a->p, (size_t)i);
		if (k >= TH_IN_FLIGHT) {
			struct mtd_lb_result res = {.ok = true, .latency_us = 100, .now_ns = 2000000000};
			size_t e = (size_t)held[k % TH_IN_FLIGHT];

			res.orca = (const uint8_t *)text;
			res.orca_len = len;
			mtd_lb_call_end(a->p, e, &res, res.now_ns);
		}
		held[k % TH_IN_FLIGHT] = i;
	}
	for (int k = 0; k < TH_IN_FLIGHT && !a->bad; k++) {
		struct mtd_lb_result res = {.neutral = true};

		mtd_lb_call_end(a->p, (size_t)held[k], &res, 0);
	}
	return NULL;
}

static void *th_ticker(void *argp)
{
	struct mtd_lb_picker *p = argp;

	for (int64_t k = 1; atomic_load(&th_ticking); k++)
		mtd_lb_tick(p, 1000000, (2000 + k * 1000) * 1000000LL);
	return NULL;
}

START_TEST(threads_pick_while_ticking)
{
	static struct t_set s;
	static struct th_arg args[TH_WORKERS];
	int32_t w[8] = {100, 100, 100, 0, 100, 100, 100, 100};
	struct mtd_lb_config cfg;
	struct mtd_lb_picker *p;
	pthread_t th[TH_WORKERS], ticker;
	uint64_t total = 0;

	t_set_init(&s, 8, w);
	mtd_lb_config_defaults(&cfg, mtd_lb_find("CLIENT_SIDE_WEIGHTED_ROUND_ROBIN"));
	cfg.orca.blackout_ms = 0;
	cfg.orca.expiration_ms = INT64_MAX / 4; /* the ticker's clock runs fast */
	cfg.orca.update_ms = 1000;
	cfg.n_workers = TH_WORKERS;
	p = t_picker("CLIENT_SIDE_WEIGHTED_ROUND_ROBIN", &s, &cfg);
	for (size_t i = 0; i < 8; i++)
		answer(p, i, 0.1 * (double)(i + 1), 100, 1000);
	tick(p, 1500);
	atomic_store(&th_ticking, true);
	ck_assert_int_eq(pthread_create(&ticker, NULL, th_ticker, p), 0);
	for (unsigned t = 0; t < TH_WORKERS; t++) {
		args[t] = (struct th_arg){.p = p, .s = &s, .worker = t};
		ck_assert_int_eq(pthread_create(&th[t], NULL, th_worker, &args[t]), 0);
	}
	for (unsigned t = 0; t < TH_WORKERS; t++)
		ck_assert_int_eq(pthread_join(th[t], NULL), 0);
	atomic_store(&th_ticking, false);
	ck_assert_int_eq(pthread_join(ticker, NULL), 0);
	for (unsigned t = 0; t < TH_WORKERS; t++) {
		ck_assert(!args[t].bad);
		ck_assert_uint_eq(args[t].counts[3], 0);
		for (size_t i = 0; i < 8; i++)
			total += args[t].counts[i];
	}
	ck_assert_uint_eq(total, (uint64_t)TH_WORKERS * TH_PICKS);
	for (size_t i = 0; i < 8; i++)
		ck_assert_int_eq(atomic_load(&t_live(&s.stats[i])->active), 0);
	mtd_lb_picker_free(p);
}
END_TEST

START_TEST(update_period_and_new_set)
{
	static struct t_set s;
	struct mtd_lb_config cfg;
	struct mtd_lb_picker *p, *q;
	uint64_t counts[T_MAX_EPS];

	t_set_init(&s, 2, NULL);
	p = cswrr(&s, &cfg);
	cfg.orca.update_ms = 5000;
	mtd_lb_picker_free(p);
	p = t_picker("CLIENT_SIDE_WEIGHTED_ROUND_ROBIN", &s, &cfg);
	tick(p, 500); /* the first recomputation: nobody reported */
	answer(p, 0, 0.25, 100, 1000);
	answer(p, 1, 0.75, 100, 1000);
	tick(p, 4000); /* past the blackout but not the update period */
	t_count(p, &s, counts, 1000);
	ck_assert_uint_eq(counts[0], 500);
	tick(p, 5500);
	t_count(p, &s, counts, 4000);
	ck_assert_uint_le((uint64_t)llabs((long long)counts[0] - 3000), 10);
	/* A new endpoint set is weighed at once, from the shared reports. */
	q = mtd_lb_picker_new(&cfg, s.eps, s.n, p);
	ck_assert_ptr_nonnull(q);
	mtd_lb_picker_free(p);
	t_count(q, &s, counts, 4000);
	ck_assert_uint_le((uint64_t)llabs((long long)counts[0] - 3000), 10);
	mtd_lb_picker_free(q);
}
END_TEST

START_TEST(drained_and_excluded)
{
	static struct t_set s;
	int32_t w[4] = {100, 100, 0, 100};
	struct mtd_lb_config cfg;
	struct mtd_lb_picker *p;
	struct mtd_lb_pick_ctx ctx;
	uint64_t counts[T_MAX_EPS];

	t_set_init(&s, 4, w);
	p = cswrr(&s, &cfg);
	for (size_t i = 0; i < 4; i++)
		answer(p, i, 0.1 * (double)(i + 1), 100, 1000);
	tick(p, 3500);
	t_count(p, &s, counts, 10000);
	ck_assert_uint_eq(counts[2], 0); /* drained, whatever it reports */
	ck_assert_uint_gt(counts[0], counts[1]);
	ck_assert_uint_gt(counts[1], counts[3]);
	t_exclude(&s, 0);
	t_count(p, &s, counts, 10000);
	ck_assert_uint_eq(counts[0], 0);
	ck_assert_uint_eq(counts[2], 0);
	ck_assert_uint_gt(counts[1], counts[3]);
	t_exclude(&s, 1);
	t_exclude(&s, 3);
	ctx = t_ctx(&s);
	ck_assert_int_eq(mtd_lb_pick(p, &ctx), 2); /* the last resort */
	t_exclude(&s, 2);
	ck_assert_int_eq(mtd_lb_pick(p, &ctx), -1);
	mtd_lb_picker_free(p);
}
END_TEST

/* Through the routing layer (a tag group per version, one picker each):
 * the reports reach the group's picker through mtd_lb_layer_call_end and
 * its tick, and shares follow them inside the group. */
START_TEST(through_the_routing_layer)
{
	static struct t_set s;
	static const struct mtd_lb_meta v1 = {"version", "v1"}, v2 = {"version", "v2"};
	static const struct mtd_lb_attrs l1 = {.meta = {&v1, 1}}, l2 = {.meta = {&v2, 1}};
	struct mtd_lb_layer_config lc = {.metadata_key = "version", .min_healthy_percent = 70};
	struct mtd_lb_config cfg;
	struct mtd_lb_layer *l;
	struct mtd_lb_pick_ctx ctx;
	uint64_t counts[T_MAX_EPS] = {0};
	const double cpu[6] = {0.2, 0.4, 0.8, 0.5, 0.5, 0.5};
	char text[1024];

	t_set_init(&s, 6, NULL);
	for (size_t i = 0; i < 6; i++) {
		s.eps[i].attrs = i < 3 ? &l1 : &l2;
	}
	mtd_lb_config_defaults(&cfg, mtd_lb_find("CLIENT_SIDE_WEIGHTED_ROUND_ROBIN"));
	cfg.orca.blackout_ms = 0;
	l = mtd_lb_layer_new(&lc, &cfg, s.eps, s.n, NULL);
	ck_assert_ptr_nonnull(l);
	for (size_t i = 0; i < 6; i++) {
		struct mtd_lb_result res = {.ok = true, .latency_us = 100, .now_ns = 1000 * 1000000LL};

		res.orca_len = encode(text, cpu[i], 0, 100, 0, false);
		res.orca = (const uint8_t *)text;
		mtd_lb_layer_call_begin(l, i);
		mtd_lb_layer_call_end(l, i, &res, res.now_ns);
	}
	mtd_lb_layer_tick(l, 1000000, 1500 * 1000000LL);
	ctx = t_ctx(&s);
	ctx.excluded = NULL;
	for (int k = 0; k < 7000; k++) {
		int i = mtd_lb_layer_pick(l, "v1", 2, &ctx);

		ck_assert_int_ge(i, 0);
		ck_assert_int_lt(i, 3);
		counts[i]++;
	}
	ck_assert_uint_le((uint64_t)llabs((long long)counts[0] - 4000), 10);
	ck_assert_uint_le((uint64_t)llabs((long long)counts[1] - 2000), 10);
	ck_assert_uint_le((uint64_t)llabs((long long)counts[2] - 1000), 10);
	mtd_lb_layer_free(l);
}
END_TEST

START_TEST(config_checks)
{
	struct mtd_lb_config c;
	const char *field;

	mtd_lb_config_defaults(&c, mtd_lb_find("CLIENT_SIDE_WEIGHTED_ROUND_ROBIN"));
	ck_assert_int_eq(mtd_lb_config_check(&c, &field), 0);
	ck_assert(c.orca.blackout_ms == 10000 && c.orca.expiration_ms == 180000 && c.orca.update_ms == 1000 &&
	          c.orca.error_penalty == 1.0 && !c.orca.out_of_band && c.orca.oob_period_ms == 10000);
	c.orca.update_ms = 99;
	ck_assert_int_eq(mtd_lb_config_check(&c, &field), -EINVAL);
	ck_assert_str_eq(field, "orca.weight_update_period");
	c.orca.update_ms = 100;
	c.orca.error_penalty = -1;
	ck_assert_int_eq(mtd_lb_config_check(&c, &field), -EINVAL);
	ck_assert_str_eq(field, "orca.error_utilization_penalty");
	c.orca.error_penalty = 0;
	c.orca.out_of_band = true; /* supported: the control thread's streams */
	ck_assert_int_eq(mtd_lb_config_check(&c, &field), 0);
	c.orca.oob_period_ms = 99;
	ck_assert_int_eq(mtd_lb_config_check(&c, &field), -EINVAL);
	ck_assert_str_eq(field, "orca.oob_reporting_period");
}
END_TEST

/* A report as an out-of-band stream delivers it: the serialized message,
 * no base64. */
static size_t encode_raw(uint8_t *out, size_t cap, double cpu, double qps)
{
	PbReport r = XDS__DATA__ORCA__V3__ORCA_LOAD_REPORT__INIT;
	size_t n;

	r.cpu_utilization = cpu;
	r.rps_fractional = qps;
	n = xds__data__orca__v3__orca_load_report__get_packed_size(&r);
	ck_assert_uint_le(n, cap);
	xds__data__orca__v3__orca_load_report__pack(&r, out);
	return n;
}

/* A report of n bytes (n >= 200): cpu 0.5, qps 100, then an unknown
 * LEN field padding it out (what many named metrics would make). */
static size_t padded_report(uint8_t *out, size_t n)
{
	size_t k = encode_raw(out, 128, 0.5, 100), pad = n - k - 3;

	ck_assert_uint_ge(pad, 128);
	ck_assert_uint_lt(pad, 16384);
	out[k++] = 15 << 3 | 2;
	out[k++] = (uint8_t)(0x80 | (pad & 0x7f));
	out[k++] = (uint8_t)(pad >> 7);
	memset(out + k, 'x', pad);
	return k + pad;
}

/* An out-of-band report is bounded as a trailer's is: longer than
 * MTD_LB_ORCA_MAX_REPORT, invalid (counted, nothing of it used). */
START_TEST(out_of_band_report_bounded_as_a_trailers)
{
	static struct mtd_lb_stats st;
	static uint8_t buf[MTD_LB_ORCA_MAX_REPORT + 1];
	struct mtd_lb_orca_config c = cfg_of(0, 180000);
	struct mtd_lb_orca_view v;

	memset(&st, 0, sizeof(st));
	ck_assert_uint_eq(padded_report(buf, MTD_LB_ORCA_MAX_REPORT), MTD_LB_ORCA_MAX_REPORT);
	ck_assert_int_eq(mtd_lb_orca_record_raw(&st, buf, MTD_LB_ORCA_MAX_REPORT, &c, 1000), 0);
	ck_assert_uint_eq(padded_report(buf, MTD_LB_ORCA_MAX_REPORT + 1), MTD_LB_ORCA_MAX_REPORT + 1);
	ck_assert_int_eq(mtd_lb_orca_record_raw(&st, buf, MTD_LB_ORCA_MAX_REPORT + 1, &c, 2000), -EINVAL);
	/* Its length alone decides: the bytes are not read. */
	ck_assert_int_eq(mtd_lb_orca_record_raw(&st, NULL, 1u << 20, &c, 3000), -EINVAL);
	mtd_lb_orca_view(&st, &v);
	ck_assert_uint_eq(v.reports, 1);
	ck_assert_uint_eq(v.invalid, 2);
}
END_TEST

START_TEST(out_of_band_reports)
{
	static struct mtd_lb_stats st;
	struct mtd_lb_orca_config c = cfg_of(0, 180000);
	struct mtd_lb_orca_view v;
	uint8_t buf[128];
	size_t n = encode_raw(buf, sizeof(buf), 0.5, 100);

	memset(&st, 0, sizeof(st));
	ck_assert_int_eq(mtd_lb_orca_record_raw(&st, buf, n, &c, 1000), 0);
	ck_assert_double_eq_tol(mtd_lb_orca_weight_at(&st, &c, 1000), 200.0, 1e-9);
	/* Malformed (a truncated fixed64): ignored whole, counted. */
	ck_assert_int_eq(mtd_lb_orca_record_raw(&st, buf, n - 1, &c, 2000), -EINVAL);
	/* An empty message is a report of zeros: no weight, the old one stays. */
	ck_assert_int_eq(mtd_lb_orca_record_raw(&st, NULL, 0, &c, 3000), 0);
	ck_assert_double_eq_tol(mtd_lb_orca_weight_at(&st, &c, 3000), 200.0, 1e-9);
	mtd_lb_orca_view(&st, &v);
	ck_assert_uint_eq(v.reports, 2);
	ck_assert_uint_eq(v.invalid, 1);
	ck_assert_int_eq(v.oob, MTD_LB_ORCA_OOB_OFF);
	/* Whether trailers count follows the stream's state. */
	ck_assert(mtd_lb_orca_trailers_count(&st));
	mtd_lb_orca_set_oob(&st, MTD_LB_ORCA_OOB_WAITING);
	ck_assert(!mtd_lb_orca_trailers_count(&st));
	mtd_lb_orca_set_oob(&st, MTD_LB_ORCA_OOB_OPEN);
	ck_assert(!mtd_lb_orca_trailers_count(&st));
	mtd_lb_orca_view(&st, &v);
	ck_assert_int_eq(v.oob, MTD_LB_ORCA_OOB_OPEN);
	mtd_lb_orca_set_oob(&st, MTD_LB_ORCA_OOB_UNIMPLEMENTED);
	ck_assert(mtd_lb_orca_trailers_count(&st));
}
END_TEST

/* With an out-of-band stream, the picker records none of the trailers'
 * reports (gRFC A58): the weights are the stream's; without (or when the
 * endpoint has no OpenRcaService) it records them again. */
START_TEST(trailers_ignored_while_out_of_band)
{
	static struct t_set s;
	struct mtd_lb_config cfg;
	struct mtd_lb_picker *p;
	struct mtd_lb_orca_view v;
	uint64_t counts[T_MAX_EPS];
	uint8_t buf[128];
	const double oob_cpu[3] = {0.2, 0.4, 0.8};

	t_set_init(&s, 3, NULL);
	p = cswrr(&s, &cfg);
	for (size_t i = 0; i < 3; i++) {
		size_t n = encode_raw(buf, sizeof(buf), oob_cpu[i], 100);

		mtd_lb_orca_set_oob(&s.stats[i], MTD_LB_ORCA_OOB_OPEN);
		ck_assert_int_eq(mtd_lb_orca_record_raw(&s.stats[i], buf, n, &cfg.orca, 1000), 0);
		/* The trailers say the opposite: ignored. */
		answer(p, i, oob_cpu[2 - i], 100, 1000);
	}
	mtd_lb_orca_view(&s.stats[0], &v);
	ck_assert_uint_eq(v.reports, 1);
	ck_assert_double_eq_tol(v.cpu, 0.2, 1e-12);
	tick(p, 3000);
	t_count(p, &s, counts, 7000);
	ck_assert_uint_le((uint64_t)llabs((long long)counts[0] - 4000), 10);
	ck_assert_uint_le((uint64_t)llabs((long long)counts[1] - 2000), 10);
	ck_assert_uint_le((uint64_t)llabs((long long)counts[2] - 1000), 10);
	/* Endpoint 0 answers UNIMPLEMENTED: its trailers count again. */
	mtd_lb_orca_set_oob(&s.stats[0], MTD_LB_ORCA_OOB_UNIMPLEMENTED);
	answer(p, 0, 0.8, 100, 3100);
	mtd_lb_orca_view(&s.stats[0], &v);
	ck_assert_uint_eq(v.reports, 2);
	ck_assert_double_eq_tol(v.cpu, 0.8, 1e-12);
	mtd_lb_picker_free(p);
}
END_TEST

static Suite *orca_suite(void)
{
	Suite *s = suite_create("lb_orca");
	TCase *tc = tcase_create("orca");

	tcase_add_test(tc, parse_matches_protobuf_c);
	tcase_add_test(tc, parse_refuses_malformed);
	tcase_add_test(tc, base64_variants);
	tcase_add_test(tc, weight_formula);
	tcase_add_test(tc, blackout_and_expiration);
	tcase_add_test(tc, no_state_until_a_report);
	tcase_add_test(tc, shares_follow_reported_utilization);
	tcase_add_test(tc, queued_endpoint_avoided);
	tcase_add_test(tc, round_robin_ignores_calls_in_flight);
	tcase_add_test(tc, scales_learnt_from_shares);
	tcase_add_test(tc, threads_pick_while_ticking);
	tcase_add_test(tc, update_period_and_new_set);
	tcase_add_test(tc, drained_and_excluded);
	tcase_add_test(tc, through_the_routing_layer);
	tcase_add_test(tc, config_checks);
	tcase_add_test(tc, out_of_band_reports);
	tcase_add_test(tc, out_of_band_report_bounded_as_a_trailers);
	tcase_add_test(tc, trailers_ignored_while_out_of_band);
	suite_add_tcase(s, tc);
	return s;
}

T_RUN(orca_suite)
