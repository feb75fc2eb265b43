/* The call engine (sidecar/call/) driven through its attempts, retries,
 * hedges, cancels, reroutes and reloads, with a scripted app and scripted
 * endpoints and no socket (issue 15 §4). The seam and what in it is real
 * or fake: call_seam.c. Each defect of issue 15 the engine had gets a test
 * here (#1 reroute, #3 FORKING commit, #4 FAILBACK copy, #5 submit
 * failures), and the lifetime rule of call-t.h one of its own. Bugs the
 * seam found are in the found_by_the_seam case. */
#include "config.h"

#include <arpa/inet.h>
#include <check.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nghttp2/nghttp2.h>

#include "call_seam.h"
#include "core/log.h"
#include "grpc/grpc.h"
#include "health/outlier.h"
#include "lb/lb.h"
#include "limit/limit.h"
#include "sidecar/call/call.h"
#include "sidecar/call/mirror.h"
#include "sidecar/call/park.h"
#include "sidecar/call/policy.h"
#include "sidecar/call/trace.h"
#include "sidecar/ops/mesh.h"
#include "sidecar/ops/metrics-t.h"
#include "sidecar/control/runtime-t.h"
#include "sidecar/io/conn-t.h"
#include "sidecar/io/pool.h"
#include "sidecar/turn.h"
#include "sidecar/worker-t.h"
#include "sidecar/worker.h"
#include "sidecar/worker_turn.h"

#define PATH    "/echo.Echo/Unary"
#define EP_A    "10.0.0.1:50051"
#define EP_B    "10.0.0.2:50051"
#define EP_C    "10.0.0.3:50051"
#define EPS_A   "{address: \"" EP_A "\"}"
#define EPS_B   "{address: \"" EP_B "\"}"
#define EPS_AB  EPS_A ", " EPS_B
#define EPS_ABC EPS_AB ", {address: \"" EP_C "\"}"

/* A config with service echo.Echo on eps (a YAML flow list's items) and
 * fault block fault (NULL: none, FAILFAST). */
static const char *config(const char *eps, const char *fault)
{
	static char buf[1024];
	snprintf(buf, sizeof(buf),
	         "services:\n"
	         "  - name: \"echo.Echo\"\n"
	         "    endpoints: [%s]\n"
	         "%s%s%s",
	         eps, fault ? "    fault: {" : "", fault ? fault : "", fault ? "}\n" : "");
	return buf;
}

static struct seam_cs *unary(struct seam *s, const char *timeout, const char *payload)
{
	uint8_t m[256];
	size_t n = seam_grpc_msg(m, payload, strlen(payload));
	return seam_call(s, PATH, timeout, m, n, true);
}

/* The request bytes a server should have received for unary(payload). */
static void expect_request(const struct seam_ss *ss, const char *payload)
{
	uint8_t m[256];
	size_t n = seam_grpc_msg(m, payload, strlen(payload));
	ck_assert_uint_eq(ss->req.len, n);
	ck_assert_mem_eq(ss->req.p, m, n);
	ck_assert(ss->req_end);
	ck_assert_str_eq(ss->path, PATH);
}

/* The app got OK with the one message payload. */
static void expect_ok(const struct seam_cs *cs, const char *payload)
{
	uint8_t m[256];
	size_t n = seam_grpc_msg(m, payload, strlen(payload));
	ck_assert_msg(cs->closed, "the call never ended");
	ck_assert_int_eq(cs->rst, -1);
	ck_assert_int_eq(cs->status, 0);
	ck_assert(cs->ended);
	ck_assert_uint_eq(cs->data.len, n);
	ck_assert_mem_eq(cs->data.p, m, n);
}

/* The app got status (Trailers-Only or trailers). */
static void expect_status(const struct seam_cs *cs, int status)
{
	ck_assert_msg(cs->closed, "the call never ended");
	ck_assert_int_eq(cs->rst, -1);
	ck_assert_int_eq(cs->status, status);
	ck_assert(cs->ended);
}

/* The stream whose request carries grpc-previous-rpc-attempts n (the
 * attempt of that index). */
static struct seam_ss *stream_of_attempt(struct seam *s, int n)
{
	for (unsigned i = 0; seam_stream(s, i); i++)
		if (seam_stream(s, i)->prev_attempts == n)
			return seam_stream(s, i);
	ck_abort_msg("no stream of attempt %d", n);
	return NULL;
}

static unsigned n_attempts(const struct mtd_call *call)
{
	unsigned n = 0;
	const struct mtd_attempt *a;
	LIST_FOREACH(a, &call->attempts, call_link)
		n++;
	return n;
}

/* ---- a snapshot's zones and metadata (runtime.c) ----------------------------- */

static struct mtd_disc_endpoint disc_ep(const char *text, const char *zone, const struct mtd_disc_meta *meta,
                                        size_t n_meta)
{
	struct mtd_disc_endpoint d = {.address = text,
	                              .weight = 100,
	                              .zone = zone,
	                              .metadata = meta,
	                              .n_metadata = n_meta,
	                              .salen = sizeof(struct sockaddr_in)};
	struct sockaddr_in *sin = (struct sockaddr_in *)&d.sa;
	char ip[32];
	const char *colon = strrchr(text, ':');
	snprintf(ip, sizeof(ip), "%.*s", (int)(colon - text), text);
	sin->sin_family = AF_INET;
	sin->sin_port = htons((uint16_t)atoi(colon + 1));
	ck_assert_int_eq(inet_pton(AF_INET, ip, &sin->sin_addr), 1);
	return d;
}

/* What the routing layer reads of each endpoint (lb_eps[i].attrs): one
 * record per zone shared by the zone's endpoints without metadata, an
 * endpoint's own (zone included) when it has metadata, none without
 * either; a set that says the same again is the same set, a changed zone
 * or metadata a new one. */
START_TEST(snapshot_zone_records_and_metadata)
{
	struct seam *s = seam_new(config(EPS_AB, NULL));
	static const struct mtd_disc_meta v2[] = {{"version", "v2"}}, v3[] = {{"version", "v3"}};
	struct mtd_disc_endpoint eps[4] = {
	        disc_ep("10.0.0.1:1", "z1", NULL, 0),
	        disc_ep("10.0.0.2:1", "z1", NULL, 0),
	        disc_ep("10.0.0.3:1", "z1", v2, 1),
	        disc_ep("10.0.0.4:1", NULL, NULL, 0),
	};
	ck_assert_uint_eq(sizeof(struct mtd_lb_endpoint), 40);
	ck_assert(seam_set_disc(s, 0, eps, 4));
	const struct mtd_rt_service *svc = seam_worker(s)->rt->services[0];
	const struct mtd_lb_endpoint *le = svc->lb_eps;
	ck_assert_uint_eq(svc->n_zones, 1);
	ck_assert_ptr_nonnull(le[0].attrs);
	ck_assert_ptr_eq(le[0].attrs, le[1].attrs);
	ck_assert_ptr_eq(le[0].attrs, svc->zones[0]);
	ck_assert_str_eq(le[0].attrs->zone, "z1");
	ck_assert_uint_eq(le[0].attrs->meta.n, 0);
	ck_assert_ptr_nonnull(svc->attrs);
	ck_assert_ptr_eq(le[2].attrs, &svc->attrs[2].a);
	ck_assert_ptr_eq(le[2].attrs->zone, le[0].attrs->zone); /* the zone's one copy */
	ck_assert_uint_eq(le[2].attrs->meta.n, 1);
	ck_assert_str_eq(le[2].attrs->meta.kv[0].key, "version");
	ck_assert_str_eq(le[2].attrs->meta.kv[0].value, "v2");
	ck_assert_ptr_null(le[3].attrs);

	ck_assert(!seam_set_disc(s, 0, eps, 4)); /* the same set */
	eps[2].metadata = v3;
	ck_assert(seam_set_disc(s, 0, eps, 4));
	svc = seam_worker(s)->rt->services[0];
	ck_assert_str_eq(svc->lb_eps[2].attrs->meta.kv[0].value, "v3");
	eps[1].zone = "z2";
	ck_assert(seam_set_disc(s, 0, eps, 4));
	svc = seam_worker(s)->rt->services[0];
	le = svc->lb_eps;
	ck_assert_uint_eq(svc->n_zones, 2); /* z1, z2, then z1 found again */
	ck_assert_str_eq(le[1].attrs->zone, "z2");
	ck_assert_str_eq(le[0].attrs->zone, "z1");
	ck_assert_str_eq(le[2].attrs->zone, "z1");
	ck_assert_ptr_null(svc->lb_eps[3].attrs);
	eps[3].zone = "z1";
	ck_assert(seam_set_disc(s, 0, eps, 4));
	ck_assert_str_eq(seam_worker(s)->rt->services[0]->lb_eps[3].attrs->zone, "z1");
	seam_free(s);
}
END_TEST

/* ---- calls, retries, hedges, cancels, deadlines ---------------------------- */

START_TEST(unary_ok_through_one_attempt)
{
	struct seam *s = seam_new(config(EPS_A, NULL));
	struct seam_cs *cs = unary(s, NULL, "ping");
	seam_run(s);
	struct seam_ss *ss = seam_stream(s, 0);
	ck_assert_ptr_nonnull(ss);
	ck_assert_str_eq(ss->ep, EP_A);
	expect_request(ss, "ping");
	ck_assert_int_eq(ss->prev_attempts, 0);
	ck_assert(!cs->closed);
	seam_respond(s, ss, 0, "pong", 4);
	seam_run(s);
	expect_ok(cs, "pong");
	ck_assert_uint_eq(seam_streams(s, NULL), 1);
	ck_assert_uint_eq(seam_ep_connects(s, EP_A), 1);
	ck_assert_uint_eq(seam_mx.routed, 1);
	ck_assert_uint_eq(seam_mx.attempts, 1);
	ck_assert_str_eq(seam_mx.last_ep, EP_A);
	ck_assert_uint_eq(seam_mx.ended, 1);
	ck_assert_ptr_null(seam_call_of(s, cs));
	ck_assert_uint_eq(seam_live_blocks(), 0);
	/* Issue 19 §3: the client's connection, idle again, holds no output
	 * buffer; the worker keeps it (and the upstream connection's) for the
	 * next call instead. */
	struct mtd_worker *w = seam_worker(s);
	ck_assert_ptr_nonnull(LIST_FIRST(&w->downs));
	ck_assert_ptr_null(LIST_FIRST(&w->downs)->out);
	ck_assert_uint_eq(LIST_FIRST(&w->downs)->out_cap, 0);
	ck_assert_uint_ge(w->n_spare_out, 1);
	seam_free(s);
}
END_TEST

START_TEST(failover_after_a_reset_retries_on_the_other_endpoint)
{
	struct seam *s = seam_new(config(EPS_AB, "mode: FAILOVER, retries: 2, backoff: {base: 10ms, max: 10ms}"));
	struct seam_cs *cs = unary(s, NULL, "ping");
	seam_run(s);
	struct seam_ss *first = seam_stream(s, 0);
	ck_assert_ptr_nonnull(first);
	seam_reset(s, first, NGHTTP2_INTERNAL_ERROR);
	seam_run(s);
	/* The backoff: nothing new yet, the app waits. */
	ck_assert_uint_eq(seam_streams(s, NULL), 1);
	ck_assert(!cs->closed);
	seam_advance_ms(s, 20);
	struct seam_ss *second = seam_stream(s, 1);
	ck_assert_ptr_nonnull(second);
	ck_assert_str_ne(second->ep, first->ep); /* never an endpoint tried */
	ck_assert_int_eq(second->prev_attempts, 1);
	expect_request(second, "ping"); /* replayed whole */
	seam_respond(s, second, 0, "pong", 4);
	seam_run(s);
	expect_ok(cs, "pong");
	ck_assert_uint_eq(seam_mx.attempts, 2);
	ck_assert_str_eq(seam_mx.last_ep, second->ep); /* the answer's */
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

START_TEST(per_try_timeout_then_retry)
{
	struct seam *s = seam_new(
	        config(EPS_AB, "mode: FAILOVER, retries: 2, per_try_timeout: 100ms, backoff: {base: 10ms, max: 10ms}"));
	struct seam_cs *cs = unary(s, NULL, "ping");
	seam_run(s);
	struct seam_ss *first = seam_stream(s, 0);
	ck_assert_ptr_nonnull(first);
	ck_assert_str_ne(first->timeout, ""); /* the try's bound goes upstream */
	seam_advance_ms(s, 99);
	ck_assert_int_eq(first->rst, -1);
	ck_assert_uint_eq(seam_streams(s, NULL), 1);
	seam_advance_ms(s, 2);
	/* Abandoned: its server hears of it; the retry waits for the backoff. */
	ck_assert_int_eq(first->rst, NGHTTP2_CANCEL);
	ck_assert(!cs->closed);
	seam_advance_ms(s, 20);
	struct seam_ss *second = seam_stream(s, 1);
	ck_assert_ptr_nonnull(second);
	ck_assert_str_ne(second->ep, first->ep);
	expect_request(second, "ping");
	seam_respond(s, second, 0, "pong", 4);
	seam_run(s);
	expect_ok(cs, "pong");
	seam_free(s);
}
END_TEST

START_TEST(forking_first_answer_wins_the_other_is_cancelled)
{
	struct seam *s = seam_new(config(EPS_AB, "mode: FORKING, forks: 2"));
	struct seam_cs *cs = unary(s, NULL, "ping");
	seam_run(s);
	ck_assert_uint_eq(seam_streams(s, NULL), 2);
	struct seam_ss *f0 = stream_of_attempt(s, 0), *f1 = stream_of_attempt(s, 1);
	ck_assert_str_ne(f0->ep, f1->ep); /* distinct endpoints */
	expect_request(f0, "ping");
	expect_request(f1, "ping");
	ck_assert_uint_eq(seam_mx.hedges_started, 1);
	seam_respond(s, f1, 0, "fast", 4);
	seam_run(s);
	expect_ok(cs, "fast");
	ck_assert_int_eq(f0->rst, NGHTTP2_CANCEL);
	ck_assert_int_eq(f1->rst, -1);
	ck_assert_uint_eq(seam_mx.hedges_won, 1);
	ck_assert_str_eq(seam_mx.last_ep, f1->ep); /* the answer's, not the cancelled fork's */
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

/* hedge_delay AUTO (seam: 50 ms) learns from each call's first attempt:
 * one that a hedge beat counts with the time it went unanswered, not with
 * the hedge's own latency (issue 19 §5: the slow ones were left out, and
 * the p95 of what was left hedged the fast calls too). */
START_TEST(forking_auto_learns_the_first_attempt_a_hedge_beat)
{
	struct seam *s = seam_new(config(EPS_AB, "mode: FORKING, forks: 2, hedge_delay: AUTO"));
	struct seam_cs *cs = unary(s, NULL, "ping");
	seam_run(s);
	struct seam_ss *first = seam_stream(s, 0);
	ck_assert_ptr_nonnull(first);
	seam_advance_ms(s, 60);
	ck_assert_uint_eq(seam_mx.hedges_started, 1);
	struct seam_ss *hedge = stream_of_attempt(s, 1);
	ck_assert_ptr_nonnull(hedge);
	seam_advance_ms(s, 3);
	seam_respond(s, hedge, 0, "fast", 4);
	seam_run(s);
	expect_ok(cs, "fast");
	ck_assert_int_eq(first->rst, NGHTTP2_CANCEL);
	ck_assert_uint_eq(seam_mx.hedges_won, 1);
	/* One sample for the call: the first attempt's 63 ms without an
	 * answer (the hedge answered after 3). */
	ck_assert_uint_eq(seam_mx.hedge_samples, 1);
	ck_assert_int_eq(seam_mx.hedge_sample_us, 63000);
	seam_free(s);
}
END_TEST

START_TEST(forking_auto_learns_a_first_attempt_that_answered_and_no_client_cancel)
{
	struct seam *s = seam_new(config(EPS_AB, "mode: FORKING, forks: 2, hedge_delay: AUTO"));
	struct seam_cs *cs = unary(s, NULL, "ping");
	seam_run(s);
	struct seam_ss *first = seam_stream(s, 0);
	seam_advance_ms(s, 7);
	seam_respond(s, first, 0, "pong", 4);
	seam_run(s);
	expect_ok(cs, "pong");
	ck_assert_uint_eq(seam_mx.hedges_started, 0);
	ck_assert_uint_eq(seam_mx.hedge_samples, 1);
	ck_assert_int_eq(seam_mx.hedge_sample_us, 7000);
	/* A call the client cancels says nothing of the latency. */
	uint8_t m[64];
	size_t n = seam_grpc_msg(m, "left", 4);
	struct seam_cs *gone = seam_call(s, PATH, NULL, m, n, true);
	seam_run(s);
	seam_advance_ms(s, 5);
	seam_cancel(s, gone);
	seam_run(s);
	ck_assert_uint_eq(seam_mx.hedge_samples, 1);
	seam_free(s);
}
END_TEST

START_TEST(client_cancel_cancels_the_live_attempts)
{
	struct seam *s = seam_new(config(EPS_AB, "mode: FORKING, forks: 2"));
	uint8_t m[64];
	size_t n = seam_grpc_msg(m, "streaming", 9);
	struct seam_cs *cs = seam_call(s, PATH, NULL, m, n, false); /* the request goes on */
	seam_run(s);
	ck_assert_uint_eq(seam_streams(s, NULL), 2);
	struct mtd_call *call = seam_call_of(s, cs);
	ck_assert_ptr_nonnull(call);
	ck_assert_uint_eq(n_attempts(call), 2);
	seam_cancel(s, cs);
	seam_run(s);
	ck_assert(cs->closed);
	ck_assert_int_eq(seam_stream(s, 0)->rst, NGHTTP2_CANCEL);
	ck_assert_int_eq(seam_stream(s, 1)->rst, NGHTTP2_CANCEL);
	ck_assert_ptr_null(seam_call_of(s, cs));
	ck_assert_uint_eq(seam_mx.ended, 1);
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

START_TEST(deadline_exceeded_while_waiting_in_a_pool)
{
	struct seam *s = seam_new(config(EPS_A, "mode: FAILOVER"));
	seam_ep_mode(s, EP_A, SEAM_EP_SILENT);
	struct seam_cs *cs = unary(s, "100m", "ping");
	seam_run(s);
	struct mtd_pool *p = seam_pool(s, EP_A);
	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq(p->n_pending, 1); /* no SETTINGS: no stream */
	ck_assert_uint_eq(seam_streams(s, NULL), 0);
	seam_advance_ms(s, 99);
	ck_assert(!cs->closed);
	seam_advance_ms(s, 2);
	expect_status(cs, 4);                   /* DEADLINE_EXCEEDED */
	ck_assert_uint_eq(cs->resp_headers, 1); /* Trailers-Only */
	ck_assert_uint_eq(p->n_pending, 0);
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

START_TEST(refused_stream_is_replayed_on_the_same_endpoint)
{
	struct seam *s = seam_new(config(EPS_A, NULL)); /* FAILFAST: no retry */
	struct seam_cs *cs = unary(s, NULL, "ping");
	seam_run(s);
	struct seam_ss *first = seam_stream(s, 0);
	ck_assert_ptr_nonnull(first);
	seam_reset(s, first, NGHTTP2_REFUSED_STREAM); /* never processed */
	seam_run(s);
	struct seam_ss *again = seam_stream(s, 1);
	ck_assert_ptr_nonnull(again);
	ck_assert_str_eq(again->ep, EP_A);
	ck_assert_int_eq(again->prev_attempts, 1);
	expect_request(again, "ping");
	seam_respond(s, again, 0, "pong", 4);
	seam_run(s);
	expect_ok(cs, "pong");
	seam_free(s);
}
END_TEST

START_TEST(connect_failure_moves_the_call_to_another_endpoint)
{
	struct seam *s = seam_new(config(EPS_AB, NULL)); /* FAILFAST all the same */
	seam_ep_mode(s, EP_A, SEAM_EP_CONNECTING);
	seam_ep_mode(s, EP_B, SEAM_EP_CONNECTING);
	struct seam_cs *cs = unary(s, NULL, "ping");
	seam_run(s);
	ck_assert_uint_eq(seam_ep_connects(s, EP_A) + seam_ep_connects(s, EP_B), 1);
	const char *first = seam_ep_connects(s, EP_A) ? EP_A : EP_B;
	const char *other = strcmp(first, EP_A) == 0 ? EP_B : EP_A;
	ck_assert_uint_eq(seam_pool(s, first)->n_pending, 1);
	seam_ep_connect_fail(s, first); /* nothing left maitred */
	ck_assert_uint_eq(seam_pool(s, first)->n_pending, 0);
	ck_assert(mtd_pool_backing_off(seam_pool(s, first), seam_now_ns()));
	ck_assert_uint_eq(seam_ep_connects(s, other), 1);
	ck_assert_uint_eq(seam_pool(s, other)->n_pending, 1);
	seam_ep_connect(s, other);
	struct seam_ss *ss = seam_stream(s, 0);
	ck_assert_ptr_nonnull(ss);
	ck_assert_str_eq(ss->ep, other);
	expect_request(ss, "ping");
	seam_respond(s, ss, 0, "pong", 4);
	seam_run(s);
	expect_ok(cs, "pong");
	seam_free(s);
}
END_TEST

START_TEST(broadcast_answers_once_every_endpoint_answered)
{
	struct seam *s = seam_new(config(EPS_ABC, "mode: BROADCAST"));
	struct seam_cs *cs = unary(s, NULL, "flush");
	seam_run(s);
	ck_assert_uint_eq(seam_streams(s, NULL), 3);
	for (unsigned i = 0; i < 3; i++)
		expect_request(seam_stream(s, i), "flush");
	seam_respond(s, seam_stream(s, 1), 0, "first", 5);
	seam_run(s);
	ck_assert_uint_eq(cs->resp_headers, 0); /* held until all answered */
	seam_respond(s, seam_stream(s, 0), 0, "second", 6);
	seam_run(s);
	ck_assert(!cs->closed);
	seam_respond(s, seam_stream(s, 2), 0, "third", 5);
	seam_run(s);
	expect_ok(cs, "first"); /* the first answer to begin */
	seam_free(s);
}
END_TEST

START_TEST(deadline_after_the_response_began_ends_with_trailers)
{
	struct seam *s = seam_new(config(EPS_A, NULL));
	struct seam_cs *cs = unary(s, "100m", "ping");
	seam_run(s);
	struct seam_ss *ss = seam_stream(s, 0);
	ck_assert_ptr_nonnull(ss);
	seam_respond_headers(s, ss);
	seam_respond_data(s, ss, "part", 4);
	seam_run(s);
	ck_assert_uint_eq(cs->resp_headers, 1);
	seam_advance_ms(s, 101);
	ck_assert_uint_eq(cs->resp_headers, 2); /* the status in trailers */
	expect_status(cs, 4);
	ck_assert_int_eq(ss->rst, NGHTTP2_CANCEL);
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

START_TEST(client_cancel_while_waiting_in_a_pool)
{
	struct seam *s = seam_new(config(EPS_A, "mode: FAILOVER"));
	seam_ep_mode(s, EP_A, SEAM_EP_SILENT);
	struct seam_cs *cs = unary(s, NULL, "ping");
	seam_run(s);
	struct mtd_pool *p = seam_pool(s, EP_A);
	ck_assert_uint_eq(p->n_pending, 1);
	seam_cancel(s, cs);
	seam_run(s);
	ck_assert(cs->closed);
	ck_assert_uint_eq(p->n_pending, 0);
	ck_assert_ptr_null(seam_call_of(s, cs));
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

START_TEST(per_try_timeout_while_waiting_in_a_pool_retries_elsewhere)
{
	struct seam *s = seam_new(
	        config(EPS_AB, "mode: FAILOVER, retries: 1, per_try_timeout: 100ms, backoff: {base: 10ms, max: 10ms}"));
	seam_ep_mode(s, EP_A, SEAM_EP_SILENT);
	seam_ep_mode(s, EP_B, SEAM_EP_SILENT);
	struct seam_cs *cs = unary(s, NULL, "ping");
	seam_run(s);
	const char *first = seam_pool(s, EP_A) ? EP_A : EP_B;
	const char *other = strcmp(first, EP_A) == 0 ? EP_B : EP_A;
	ck_assert_uint_eq(seam_pool(s, first)->n_pending, 1);
	seam_ep_mode(s, other, SEAM_EP_UP);
	seam_advance_ms(s, 101);
	ck_assert_uint_eq(seam_pool(s, first)->n_pending, 0);
	seam_advance_ms(s, 20);
	struct seam_ss *ss = seam_stream(s, 0);
	ck_assert_ptr_nonnull(ss);
	ck_assert_str_eq(ss->ep, other);
	seam_respond(s, ss, 0, "pong", 4);
	seam_run(s);
	expect_ok(cs, "pong");
	seam_free(s);
}
END_TEST

START_TEST(reload_removing_the_endpoint_of_a_call_in_flight_lets_it_finish)
{
	struct seam *s = seam_new(config(EPS_A, NULL));
	struct seam_cs *cs = unary(s, NULL, "ping");
	seam_run(s);
	struct seam_ss *ss = seam_stream(s, 0);
	ck_assert_ptr_nonnull(ss);
	seam_reload(s, config(EPS_B, NULL));
	seam_run(s);
	ck_assert(seam_pool(s, EP_A)->retired);
	ck_assert(!cs->closed);
	ck_assert_int_eq(ss->rst, -1);
	ck_assert_uint_eq(seam_holds_alive(s), 2); /* the call keeps its snapshot */
	seam_respond(s, ss, 0, "pong", 4);
	seam_run(s);
	expect_ok(cs, "pong");
	ck_assert_uint_eq(seam_holds_alive(s), 1);
	ck_assert_uint_eq(seam_runtimes_freed(s), 1);
	seam_housekeeping(s); /* the drained connection closes */
	seam_housekeeping(s); /* then the pool goes */
	ck_assert_ptr_null(seam_pool(s, EP_A));
	/* A new call goes to the new snapshot's endpoint. */
	struct seam_cs *next = unary(s, NULL, "again");
	seam_run(s);
	ck_assert_str_eq(seam_stream(s, 1)->ep, EP_B);
	seam_respond(s, seam_stream(s, 1), 0, "ok", 2);
	seam_run(s);
	expect_ok(next, "ok");
	seam_free(s);
}
END_TEST

/* A reload turns circuit_breaker.max_pending on while attempts wait in a
 * pool (its endpoint accepts TCP and never says a word of HTTP/2): at the
 * swap the pool takes the new snapshot's service (mtd_pool_set_service) and
 * counts the attempts already waiting there, so the limit holds at once and
 * their end gives back exactly what was added. The seam's former copy of
 * the swap only replaced p->svc: the pool counted nowhere under a limit,
 * and the next call read a count that did not exist (a NULL load). */
START_TEST(reload_turning_max_pending_on_counts_the_attempts_already_waiting)
{
	const char *limited = "services:\n"
	                      "  - name: \"echo.Echo\"\n"
	                      "    endpoints: [" EPS_A "]\n"
	                      "    circuit_breaker: {max_pending: 2}\n";
	struct seam *s = seam_new(config(EPS_A, NULL));
	seam_ep_mode(s, EP_A, SEAM_EP_SILENT);
	struct seam_cs *waiting[2];
	for (int i = 0; i < 2; i++)
		waiting[i] = unary(s, NULL, "w");
	seam_run(s);
	struct mtd_pool *p = seam_pool(s, EP_A);
	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq(p->n_pending, 2);
	ck_assert_ptr_null(p->load); /* no limit: counted nowhere */

	seam_reload(s, limited);
	seam_run(s);
	struct mtd_rt_service *svc = seam_worker(s)->rt->services[0];
	ck_assert_ptr_eq(p->svc, svc);
	ck_assert_ptr_eq(p->load, svc->load);
	ck_assert_uint_eq(atomic_load(&svc->load->pending), 2);
	/* Full: the next call is refused, not queued. */
	struct seam_cs *over = unary(s, NULL, "x");
	seam_run(s);
	expect_status(over, MTD_GRPC_RESOURCE_EXHAUSTED);
	ck_assert_uint_eq(seam_mx.circuit_rejected, 1);
	ck_assert_uint_eq(p->n_pending, 2);

	/* The waiting calls end: what they took is given back, no more. */
	for (int i = 0; i < 2; i++)
		seam_cancel(s, waiting[i]);
	seam_run(s);
	ck_assert_uint_eq(p->n_pending, 0);
	ck_assert_uint_eq(atomic_load(&svc->load->pending), 0);
	/* Room again: a call waits. */
	struct seam_cs *again = unary(s, NULL, "y");
	seam_run(s);
	ck_assert(!again->closed);
	ck_assert_uint_eq(p->n_pending, 1);
	ck_assert_uint_eq(atomic_load(&svc->load->pending), 1);
	seam_cancel(s, again);
	seam_run(s);
	ck_assert_uint_eq(atomic_load(&svc->load->pending), 0);
	seam_free(s);
}
END_TEST

START_TEST(client_reset_after_an_early_answer_cancels_the_open_request_upstream)
{
	struct seam *s = seam_new(config(EPS_A, NULL));
	uint8_t m[64];
	size_t n = seam_grpc_msg(m, "first", 5);
	struct seam_cs *cs = seam_call(s, PATH, NULL, m, n, false); /* a client stream */
	seam_run(s);
	struct seam_ss *ss = seam_stream(s, 0);
	ck_assert_ptr_nonnull(ss);
	ck_assert(!ss->req_end);
	seam_respond(s, ss, 0, "early", 5); /* answered before the request ended */
	seam_run(s);
	ck_assert_int_eq(cs->status, 0);
	ck_assert(cs->ended);
	ck_assert_int_eq(ss->rst, -1);
	seam_cancel(s, cs); /* the client's request half ends with a reset */
	seam_run(s);
	ck_assert(cs->closed);
	ck_assert_int_eq(ss->rst, NGHTTP2_CANCEL);
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

/* ---- issue 15 #1: the endpoint removed while an attempt waits ------------------ */

START_TEST(reroute_endpoint_removed_while_waiting)
{
	struct seam *s = seam_new(config(EPS_A, "mode: FAILOVER"));
	seam_ep_mode(s, EP_A, SEAM_EP_SILENT); /* accepts TCP, never answers HTTP/2 */
	struct seam_cs *cs = unary(s, NULL, "ping");
	seam_run(s);
	struct mtd_pool *p = seam_pool(s, EP_A);
	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq(p->n_pending, 1);
	struct mtd_attempt *a = MTD_CONTAINER_OF(TAILQ_FIRST(&p->pending), struct mtd_attempt, s);
	struct mtd_call *call = seam_call_of(s, cs);
	ck_assert_ptr_eq(a->call, call);
	struct mtd_rt_hold *old = call->hold;
	ck_assert_uint_eq(seam_holds_alive(s), 1);

	/* A reload without A: the pool retires and its waiting attempt moves
	 * its call to the new snapshot (pool.c -> mtd_call_reroute). */
	seam_reload(s, config(EPS_B, "mode: FAILOVER"));
	ck_assert(p->retired);
	ck_assert_uint_eq(p->n_pending, 0);
	/* Mid-turn: the old attempt is over but its memory is still there
	 * (the reap frees it), and so is the old snapshot's hold. */
	ck_assert(seam_block_live(a));
	ck_assert_int_eq(a->state, MTD_ATTEMPT_CANCELLED);
	ck_assert(a->released);
	ck_assert_ptr_ne(call->hold, old);
	ck_assert_ptr_eq(call->hold->rt, seam_worker(s)->rt);
	ck_assert_ptr_null(call->hold_prev);
	ck_assert_uint_eq(n_attempts(call), 1);
	struct mtd_attempt *moved = LIST_FIRST(&call->attempts);
	ck_assert_ptr_ne(moved, a);
	ck_assert_str_eq(mtd_endpoint_text(moved->ep), EP_B);
	ck_assert_uint_eq(seam_holds_alive(s), 2);
	ck_assert_uint_eq(seam_runtimes_freed(s), 0);

	seam_end_turn(s);
	ck_assert(!seam_block_live(a)); /* freed at the reap, not before */
	ck_assert_uint_eq(seam_holds_alive(s), 1);
	ck_assert_uint_eq(seam_runtimes_freed(s), 1); /* the old snapshot went */

	seam_run(s);
	struct seam_ss *ss = seam_stream(s, 0);
	ck_assert_ptr_nonnull(ss);
	ck_assert_str_eq(ss->ep, EP_B);
	expect_request(ss, "ping");
	seam_respond(s, ss, 0, "pong", 4);
	seam_run(s);
	expect_ok(cs, "pong");
	/* The retired pool drained (its silent connection closed at
	 * retirement) and housekeeping frees it. */
	seam_housekeeping(s);
	ck_assert_ptr_null(seam_pool(s, EP_A));
	ck_assert_uint_eq(seam_current_hold_users(s), 0);
	seam_free(s);
}
END_TEST

/* Found by this seam (fixed: mtd_call_reroute forgets mx_ep with the
 * snapshot it lets go). The endpoint and the service of a waiting call both leave: the
 * call fails, and its client, still sending, ends its stream later.
 * mtd_call_reroute lets go of the old snapshot (call.c:952-953) while
 * call->mx_ep - the access log's endpoint, set from the attempt it just
 * cancelled (attempt.c note_endpoint) - still points at the removed
 * endpoint; once the retired pool is freed (housekeeping) the endpoint is
 * freed, and the call's end reads it (the access-log line, via call_free)
 * with log.access on: heap-use-after-free. By reading (not
 * tested): the same when the new snapshot's pick starts no attempt to
 * replace mx_ep (e.g. the service has no endpoint there yet). */
START_TEST(reroute_to_a_removed_service_then_the_client_ends_later)
{
	const char *two = "services:\n"
	                  "  - name: \"echo.Echo\"\n"
	                  "    endpoints: [" EPS_A "]\n"
	                  "    fault: {mode: FAILOVER}\n"
	                  "  - name: \"other.Other\"\n"
	                  "    endpoints: [" EPS_B "]\n";
	const char *one = "services:\n"
	                  "  - name: \"other.Other\"\n"
	                  "    endpoints: [" EPS_B "]\n";
	struct seam *s = seam_new(two);
	seam_ep_mode(s, EP_A, SEAM_EP_SILENT);
	uint8_t m[64];
	size_t n = seam_grpc_msg(m, "first", 5);
	struct seam_cs *cs = seam_call(s, PATH, NULL, m, n, false); /* a client stream */
	seam_run(s);
	ck_assert_uint_eq(seam_pool(s, EP_A)->n_pending, 1);
	seam_reload(s, one);
	seam_run(s);
	ck_assert_int_eq(cs->status, 14); /* UNAVAILABLE: service no longer in the config */
	ck_assert(cs->ended);
	ck_assert(!cs->closed);                     /* its request half is open */
	ck_assert_ptr_nonnull(seam_call_of(s, cs)); /* which holds the call */
	seam_housekeeping(s);                       /* the retired pool goes (a second later) */
	ck_assert_ptr_null(seam_pool(s, EP_A));
	seam_send(s, cs, NULL, 0, true);
	seam_run(s);
	ck_assert_ptr_null(seam_call_of(s, cs));
	ck_assert_uint_eq(seam_mx.ended, 1);
	seam_free(s);
}
END_TEST

/* ---- issue 15 #3: FORKING and a request outgrowing the replay buffer ----------- */

static uint8_t big[5005];

static size_t big_request(void)
{
	static uint8_t payload[5000];
	memset(payload, 'x', sizeof(payload));
	return seam_grpc_msg(big, payload, sizeof(payload));
}

START_TEST(forking_outgrown_request_after_the_newest_fork_failed_completes)
{
	struct seam *s = seam_new(config(EPS_AB, "mode: FORKING, forks: 2, replay_buffer: 1000"));
	size_t len = big_request();
	struct seam_cs *cs = seam_call(s, PATH, NULL, big, 100, false);
	seam_run(s);
	ck_assert_uint_eq(seam_streams(s, NULL), 2);
	struct seam_ss *older = stream_of_attempt(s, 0), *newest = stream_of_attempt(s, 1);
	ck_assert_uint_eq(older->req.len, 100);
	ck_assert_uint_eq(newest->req.len, 100);
	/* The newest fork (the call's cur) fails first. */
	seam_reset(s, newest, NGHTTP2_INTERNAL_ERROR);
	seam_run(s);
	ck_assert(!cs->closed);
	ck_assert_int_eq(older->rst, -1);
	/* The rest of the request: past replay_buffer, the call commits to
	 * the fork sending it. */
	seam_send(s, cs, big + 100, len - 100, true);
	seam_run(s);
	ck_assert_int_eq(older->rst, -1);
	ck_assert_uint_eq(older->req.len, len);
	ck_assert_mem_eq(older->req.p, big, len);
	ck_assert(older->req_end);
	struct mtd_call *call = seam_call_of(s, cs);
	ck_assert_ptr_nonnull(call);
	ck_assert(call->committed);
	ck_assert_ptr_nonnull(call->cur);
	ck_assert_str_eq(mtd_endpoint_text(call->cur->ep), older->ep);
	seam_respond(s, older, 0, "done", 4);
	seam_run(s);
	expect_ok(cs, "done");
	seam_free(s);
}
END_TEST

START_TEST(forking_outgrown_request_commits_to_the_sending_fork_not_a_newer_one_behind)
{
	struct seam *s = seam_new(config(EPS_AB, "mode: FORKING, forks: 2, hedge_delay: 50ms, replay_buffer: 1000"));
	size_t len = big_request();
	struct seam_cs *cs = seam_call(s, PATH, NULL, big, 100, false);
	seam_run(s);
	ck_assert_uint_eq(seam_streams(s, NULL), 1);
	struct seam_ss *first = seam_stream(s, 0);
	const char *other = strcmp(first->ep, EP_A) == 0 ? EP_B : EP_A;
	seam_ep_mode(s, other, SEAM_EP_CONNECTING);
	/* The hedge starts after its delay and waits for its connection. */
	seam_advance_ms(s, 60);
	ck_assert_uint_eq(seam_mx.hedges_started, 1);
	struct mtd_pool *p = seam_pool(s, other);
	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq(p->n_pending, 1);
	struct mtd_call *call = seam_call_of(s, cs);
	ck_assert_ptr_eq(&call->cur->s, TAILQ_FIRST(&p->pending)); /* the newest, behind */
	seam_send(s, cs, big + 100, len - 100, true);
	seam_run(s);
	/* Committed to the fork that sent the bytes; the one behind is
	 * cancelled, and nothing reaches its endpoint when it connects. */
	ck_assert(call->committed);
	ck_assert_str_eq(mtd_endpoint_text(call->cur->ep), first->ep);
	ck_assert_uint_eq(p->n_pending, 0);
	ck_assert_uint_eq(first->req.len, len);
	ck_assert_mem_eq(first->req.p, big, len);
	ck_assert(first->req_end);
	seam_ep_connect(s, other);
	ck_assert_uint_eq(seam_streams(s, other), 0);
	seam_respond(s, first, 0, "done", 4);
	seam_run(s);
	expect_ok(cs, "done");
	seam_free(s);
}
END_TEST

/* ---- issue 15 #4: a FAILBACK copy and the snapshot it came from --------------------- */

#define FAILBACK "mode: FAILBACK, backoff: {base: 10ms, max: 10ms}, failback: {queue: 10, retries: 2}"

/* A call fails under FAILBACK: answered OK at once (an empty message), a
 * copy queued. */
static struct seam_cs *failback_failed_call(struct seam *s)
{
	struct seam_cs *cs = unary(s, NULL, "fire");
	seam_run(s);
	struct seam_ss *ss = seam_stream(s, 0);
	ck_assert_ptr_nonnull(ss);
	seam_reset(s, ss, NGHTTP2_INTERNAL_ERROR);
	seam_run(s);
	expect_ok(cs, "");
	ck_assert_uint_eq(seam_worker(s)->n_bg, 1);
	/* The app's call is freed; the copy holds its snapshot. */
	ck_assert_ptr_null(seam_call_of(s, cs));
	ck_assert_uint_eq(seam_holds_alive(s), 1);
	ck_assert_uint_eq(seam_current_hold_users(s), 1);
	return cs;
}

START_TEST(failback_copy_resent_after_its_snapshot_was_replaced)
{
	struct seam *s = seam_new(config(EPS_A, FAILBACK));
	struct seam_cs *cs = failback_failed_call(s);
	/* A reload moves the service to B: the old snapshot stays while the
	 * copy's fault policy points into it. */
	seam_reload(s, config(EPS_B, FAILBACK));
	seam_run(s);
	seam_housekeeping(s); /* A's retired pool goes, and its hold on A's service */
	ck_assert_ptr_null(seam_pool(s, EP_A));
	ck_assert_uint_eq(seam_holds_alive(s), 2);
	ck_assert_uint_eq(seam_runtimes_freed(s), 0);
	ck_assert_uint_eq(seam_current_hold_users(s), 0);
	/* The re-send routes on the new snapshot; the old one goes. */
	seam_advance_ms(s, 20);
	ck_assert_uint_eq(seam_mx.failback_started, 1);
	ck_assert_uint_eq(seam_holds_alive(s), 1);
	ck_assert_uint_eq(seam_runtimes_freed(s), 1);
	ck_assert_uint_eq(seam_current_hold_users(s), 1);
	struct seam_ss *ss = seam_stream(s, 1);
	ck_assert_ptr_nonnull(ss);
	ck_assert_str_eq(ss->ep, EP_B);
	expect_request(ss, "fire");
	seam_respond(s, ss, 0, "", 0);
	seam_run(s);
	ck_assert_uint_eq(seam_worker(s)->n_bg, 0);
	ck_assert_uint_eq(seam_mx.failback_dropped, 0);
	ck_assert_uint_eq(seam_current_hold_users(s), 0);
	ck_assert_uint_eq(cs->resp_headers, 2); /* the app had its one answer */
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

/* echo.Echo under FAILBACK with failback.retries `retries`, beside
 * other.Other; the reload config without echo.Echo. */
static const char *failback_two_services(unsigned retries)
{
	static char buf[1024];
	snprintf(buf, sizeof(buf),
	         "services:\n"
	         "  - name: \"echo.Echo\"\n"
	         "    endpoints: [" EPS_A "]\n"
	         "    fault: {mode: FAILBACK, backoff: {base: 10ms, max: 10ms}, failback: {queue: 10, retries: %u}}\n"
	         "  - name: \"other.Other\"\n"
	         "    endpoints: [" EPS_B "]\n",
	         retries);
	return buf;
}

static const char *only_other = "services:\n"
                                "  - name: \"other.Other\"\n"
                                "    endpoints: [" EPS_B "]\n";

START_TEST(failback_copy_of_a_removed_service_is_dropped)
{
	struct seam *s = seam_new(failback_two_services(1));
	failback_failed_call(s);
	/* The reload removes echo.Echo: its config would be freed but for
	 * the copy's hold (the retired pool's on the service goes too). */
	seam_reload(s, only_other);
	seam_run(s);
	seam_housekeeping(s);
	ck_assert_ptr_null(seam_pool(s, EP_A));
	ck_assert_uint_eq(seam_runtimes_freed(s), 0);
	/* The re-send finds no service and fails; its policy (the old
	 * config's) says that was the last: dropped. */
	seam_advance_ms(s, 20);
	ck_assert_uint_eq(seam_mx.failback_started, 1);
	ck_assert_uint_eq(seam_mx.failback_dropped, 1);
	ck_assert_uint_eq(seam_worker(s)->n_bg, 0);
	ck_assert_uint_eq(seam_streams(s, NULL), 1); /* only the first try */
	ck_assert_uint_eq(seam_holds_alive(s), 1);
	ck_assert_uint_eq(seam_runtimes_freed(s), 1);
	ck_assert_uint_eq(seam_current_hold_users(s), 0);
	seam_free(s);
}
END_TEST

/* Found by this seam and test_churn (fixed: mtd_call_start_bg routes a
 * copy without a service again). The first re-send of a copy whose service is gone sets
 * call->hold in route() (call.c:803-804) before the lookup fails
 * (call.c:806-808), so the second re-send skips routing in
 * mtd_call_start_bg (call.c:903) and reads call->svc, NULL, in
 * call_hash_key (call.c:71, from start_keyed call.c:755 <- call.c:920):
 * a NULL dereference (SIGSEGV) with failback.retries >= 2 (default 3). */
START_TEST(failback_second_resend_of_a_removed_service)
{
	struct seam *s = seam_new(failback_two_services(2));
	failback_failed_call(s);
	seam_reload(s, only_other);
	seam_run(s);
	seam_housekeeping(s);
	seam_advance_ms(s, 20);
	ck_assert_uint_eq(seam_mx.failback_started, 1);
	ck_assert_uint_eq(seam_worker(s)->n_bg, 1);
	seam_advance_ms(s, 20); /* the second re-send */
	ck_assert_uint_eq(seam_mx.failback_started, 2);
	ck_assert_uint_eq(seam_mx.failback_dropped, 1);
	ck_assert_uint_eq(seam_worker(s)->n_bg, 0);
	ck_assert_uint_eq(seam_streams(s, NULL), 1);
	ck_assert_uint_eq(seam_holds_alive(s), 1);
	ck_assert_uint_eq(seam_current_hold_users(s), 0);
	seam_free(s);
}
END_TEST

/* ---- issue 15 #5: a submit towards the client failing ---------------------------- */

/* The client's stream was reset INTERNAL_ERROR, without a status. */
static void expect_reset_internal(struct seam *s, const struct seam_cs *cs)
{
	ck_assert_msg(cs->closed, "the call never ended");
	ck_assert_int_eq(cs->rst, NGHTTP2_INTERNAL_ERROR);
	ck_assert_int_eq(cs->status, -1);
	ck_assert_uint_ge(seam_down_allocs_failed(s), 1);
}

START_TEST(submit_response_failing_on_relayed_headers_resets_the_client)
{
	struct seam *s = seam_new(config(EPS_A, NULL));
	struct seam_cs *cs = unary(s, NULL, "ping");
	seam_run(s);
	struct seam_ss *ss = seam_stream(s, 0);
	ck_assert_ptr_nonnull(ss);
	seam_fail_down_allocs(s, 1); /* the next allocation: the response's */
	seam_respond(s, ss, 0, "pong", 4);
	seam_run(s);
	expect_reset_internal(s, cs);
	ck_assert_uint_eq(cs->resp_headers, 0);
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

START_TEST(submit_response_failing_on_our_own_status_resets_the_client)
{
	struct seam *s = seam_new(config(EPS_A, NULL));
	seam_ep_mode(s, EP_A, SEAM_EP_SILENT);
	struct seam_cs *cs = unary(s, "100m", "ping");
	seam_run(s);
	seam_fail_down_allocs(s, 1);
	seam_advance_ms(s, 101); /* DEADLINE_EXCEEDED, Trailers-Only */
	expect_reset_internal(s, cs);
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

START_TEST(submit_response_failing_on_a_failsafe_answer_resets_the_client)
{
	struct seam *s = seam_new(config(EPS_A, "mode: FAILSAFE"));
	struct seam_cs *cs = unary(s, NULL, "ping");
	seam_run(s);
	struct seam_ss *ss = seam_stream(s, 0);
	ck_assert_ptr_nonnull(ss);
	seam_reset(s, ss, NGHTTP2_INTERNAL_ERROR);
	seam_fail_down_allocs(s, 1); /* FAILSAFE's OK answer */
	seam_run(s);
	expect_reset_internal(s, cs);
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

START_TEST(submit_trailer_failing_resets_the_client)
{
	struct seam *s = seam_new(config(EPS_A, NULL));
	struct seam_cs *cs = unary(s, NULL, "ping");
	seam_run(s);
	struct seam_ss *ss = seam_stream(s, 0);
	ck_assert_ptr_nonnull(ss);
	seam_respond_headers(s, ss);
	seam_respond_data(s, ss, "pong", 4);
	seam_run(s);
	ck_assert_uint_eq(cs->resp_headers, 1);
	ck_assert_uint_eq(cs->data.len, 9);
	seam_fail_down_allocs(s, 1); /* the trailers' */
	seam_respond_trailers(s, ss, 0);
	seam_run(s);
	expect_reset_internal(s, cs);
	ck_assert(!cs->ended); /* never an end without grpc-status */
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

/* ---- the lifetime rule (call-t.h) ---------------------------------------------- */

START_TEST(commit_cancels_forks_mid_callback_and_the_reap_frees_them)
{
	struct seam *s = seam_new(config(EPS_ABC, "mode: FORKING, forks: 3"));
	struct seam_cs *cs = unary(s, NULL, "ping");
	seam_run(s);
	ck_assert_uint_eq(seam_streams(s, NULL), 3);
	struct mtd_call *call = seam_call_of(s, cs);
	ck_assert_ptr_nonnull(call);
	struct mtd_attempt *att[3];
	unsigned n = 0;
	struct mtd_attempt *a;
	LIST_FOREACH(a, &call->attempts, call_link)
		att[n++] = a;
	ck_assert_uint_eq(n, 3);
	size_t blocks_before = seam_live_blocks();

	/* The newest fork's response headers: relaying them commits the call,
	 * which cancels the two others under mtd_attempt_on_resp_headers. */
	struct seam_ss *winner = stream_of_attempt(s, 2);
	seam_respond_headers(s, winner);
	seam_deliver(s, winner);
	ck_assert(call->committed);
	ck_assert_ptr_nonnull(call->ans);
	ck_assert_uint_eq(call->ans->index, 2);
	unsigned cancelled = 0;
	for (unsigned i = 0; i < 3; i++) {
		ck_assert(seam_block_live(att[i])); /* nothing freed mid-turn */
		if (att[i] == call->ans)
			continue;
		ck_assert_int_eq(att[i]->state, MTD_ATTEMPT_CANCELLED);
		cancelled++;
	}
	ck_assert_uint_eq(cancelled, 2);
	ck_assert_uint_eq(n_attempts(call), 3); /* their streams still hold them */

	seam_run(s);
	for (unsigned i = 0; i < 3; i++) {
		if (att[i] != call->ans)
			ck_assert(!seam_block_live(att[i])); /* streams closed, reaped */
	}
	ck_assert_uint_lt(seam_live_blocks(), blocks_before);
	ck_assert_int_eq(stream_of_attempt(s, 0)->rst, NGHTTP2_CANCEL);
	ck_assert_int_eq(stream_of_attempt(s, 1)->rst, NGHTTP2_CANCEL);
	ck_assert_int_eq(winner->rst, -1);
	seam_respond_data(s, winner, "won", 3);
	seam_respond_trailers(s, winner, 0);
	seam_run(s);
	expect_ok(cs, "won");
	/* Every block back; nothing left to reap. */
	ck_assert_uint_eq(seam_live_blocks(), 0);
	ck_assert(LIST_EMPTY(&seam_worker(s)->reap_calls));
	ck_assert(LIST_EMPTY(&seam_worker(s)->reap_attempts));
	seam_free(s);
}
END_TEST

/* A call moved once to a newer snapshot while an attempt of the first
 * one still runs is not moved again: when the endpoint of the moved
 * attempt goes too, the call fails naming that endpoint, read from the
 * attempt mtd_call_reroute has just cancelled (issue 15 #1's line). */
START_TEST(second_reroute_fails_naming_the_cancelled_attempts_endpoint)
{
	struct seam *s = seam_new(config(EPS_AB, "mode: FORKING, forks: 2"));
	seam_ep_mode(s, EP_A, SEAM_EP_SILENT);
	seam_ep_mode(s, EP_C, SEAM_EP_SILENT);
	struct seam_cs *cs = unary(s, NULL, "ping");
	seam_run(s);
	struct seam_ss *on_b = seam_stream(s, 0);
	ck_assert_ptr_nonnull(on_b);
	ck_assert_str_eq(on_b->ep, EP_B);
	ck_assert_uint_eq(seam_pool(s, EP_A)->n_pending, 1);
	struct mtd_call *call = seam_call_of(s, cs);
	/* A goes: its fork moves to C, the call keeps the first snapshot for
	 * the fork on B. */
	seam_reload(s, config("{address: \"" EP_C "\"}", "mode: FORKING, forks: 2"));
	ck_assert_ptr_nonnull(call->hold_prev);
	seam_run(s);
	struct mtd_pool *pc = seam_pool(s, EP_C);
	ck_assert_ptr_nonnull(pc);
	ck_assert_uint_eq(pc->n_pending, 1);
	struct mtd_attempt *moved = MTD_CONTAINER_OF(TAILQ_FIRST(&pc->pending), struct mtd_attempt, s);
	ck_assert(!cs->closed);
	/* C goes too: the call fails where it is. */
	seam_reload(s, config("{address: \"10.0.0.4:50051\"}", "mode: FORKING, forks: 2"));
	ck_assert(seam_block_live(moved));
	ck_assert_int_eq(moved->state, MTD_ATTEMPT_CANCELLED);
	seam_end_turn(s);
	ck_assert(!seam_block_live(moved));
	seam_run(s);
	expect_status(cs, 14); /* UNAVAILABLE */
	ck_assert_ptr_nonnull(strstr(cs->message, EP_C));
	ck_assert_int_eq(on_b->rst, NGHTTP2_CANCEL);
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

/* The worker stops (mtd_worker_free's order, in seam_free) with a call in
 * each state: waiting in a pool, streaming, in its backoff, and a FAILBACK
 * copy re-sending; everything is freed, every hold let go. */
START_TEST(worker_stop_with_calls_in_every_state)
{
	struct seam *s = seam_new("services:\n"
	                          "  - name: \"wait.Wait\"\n"
	                          "    endpoints: [" EPS_B "]\n"
	                          "    fault: {mode: FAILOVER}\n"
	                          "  - name: \"echo.Echo\"\n"
	                          "    endpoints: [" EPS_A ", {address: \"" EP_C "\"}]\n"
	                          "    fault: {mode: FAILOVER, retries: 2, backoff: {base: 1s, max: 1s}}\n"
	                          "  - name: \"fire.Fire\"\n"
	                          "    endpoints: [" EPS_A "]\n"
	                          "    fault: {" FAILBACK "}\n");
	seam_ep_mode(s, EP_B, SEAM_EP_SILENT);
	uint8_t m[64];
	size_t n = seam_grpc_msg(m, "x", 1);
	struct seam_cs *waiting = seam_call(s, "/wait.Wait/M", NULL, m, n, true);
	struct seam_cs *streaming = seam_call(s, PATH, NULL, m, n, false);
	seam_run(s);
	struct seam_cs *backoff = seam_call(s, PATH, NULL, m, n, true);
	seam_run(s);
	seam_reset(s, seam_stream(s, 1), NGHTTP2_INTERNAL_ERROR);
	struct seam_cs *fire = seam_call(s, "/fire.Fire/M", NULL, m, n, true);
	seam_run(s);
	seam_reset(s, seam_stream(s, 2), NGHTTP2_INTERNAL_ERROR);
	seam_run(s);
	ck_assert_uint_eq(seam_pool(s, EP_B)->n_pending, 1);
	ck_assert_ptr_nonnull(seam_call_of(s, waiting));
	ck_assert_ptr_nonnull(seam_call_of(s, streaming));
	ck_assert(mtd_timer_armed(&seam_call_of(s, backoff)->retry));
	expect_ok(fire, "");
	ck_assert_uint_eq(seam_worker(s)->n_bg, 1);
	seam_advance_ms(s, 20); /* the copy's re-send: its stream is open too */
	ck_assert_uint_eq(seam_streams(s, NULL), 4);
	ck_assert_str_eq(seam_stream(s, 3)->path, "/fire.Fire/M");
	ck_assert_uint_gt(seam_live_blocks(), 0);
	seam_free(s); /* checks that every block and hold came back */
}
END_TEST

START_TEST(many_calls_every_block_back_after_the_reap)
{
	struct seam *s = seam_new(config(EPS_AB, "mode: FAILOVER, retries: 1, backoff: {base: 1ms, max: 1ms}"));
	struct seam_cs *cs[8];
	for (int i = 0; i < 8; i++)
		cs[i] = unary(s, "5S", "ping");
	seam_run(s);
	ck_assert_uint_eq(seam_streams(s, NULL), 8);
	ck_assert_uint_gt(seam_live_blocks(), 0);
	/* Half fail over, half answer; then the others answer. */
	for (unsigned i = 0; i < 8; i++) {
		if (i % 2)
			seam_reset(s, seam_stream(s, i), NGHTTP2_INTERNAL_ERROR);
		else
			seam_respond(s, seam_stream(s, i), 0, "pong", 4);
	}
	seam_run(s);
	seam_advance_ms(s, 5);
	ck_assert_uint_eq(seam_streams(s, NULL), 12);
	for (unsigned i = 8; i < 12; i++)
		seam_respond(s, seam_stream(s, i), 0, "pong", 4);
	seam_run(s);
	for (int i = 0; i < 8; i++)
		expect_ok(cs[i], "pong");
	ck_assert_uint_eq(seam_mx.ended, 8);
	ck_assert_uint_eq(seam_mx.attempts, 12);
	ck_assert_uint_eq(seam_live_blocks(), 0);
	ck_assert_uint_eq(seam_worker(s)->timers.n, 0);
	seam_free(s);
}
END_TEST

/* ---- clocks: windows and cadences on the monotonic clock --------------- */

/* The endpoint index of addr in the worker's current snapshot of echo.Echo. */
static size_t ep_index(struct seam *s, const char *addr)
{
	const struct mtd_rt_service *svc = seam_worker(s)->rt->services[0];
	for (size_t i = 0; i < svc->n_eps; i++)
		if (strcmp(mtd_endpoint_text(svc->eps[i]), addr) == 0)
			return i;
	ck_abort_msg("no endpoint %s", addr);
	return 0;
}

/* One unary call answered by its endpoint: status 0 on ok_ep, 14
 * (UNAVAILABLE) elsewhere. */
static void one_call(struct seam *s, unsigned *nth, const char *ok_ep)
{
	struct seam_cs *cs = unary(s, NULL, "ping");
	seam_run(s);
	struct seam_ss *ss = seam_stream(s, (*nth)++);
	ck_assert_ptr_nonnull(ss);
	int st = strcmp(ss->ep, ok_ep) == 0 ? 0 : 14;
	seam_respond(s, ss, st, "pong", 4);
	seam_run(s);
	ck_assert(cs->closed);
}

/* A turn that read the clock, then ran long (a snapshot swap, a burst
 * of reads, a throttled CPU) before a retry's backoff ran out in it: the
 * attempt it starts forwards its per-try bound as its own timer counts
 * it, from when the attempt really began, not from the turn's start
 * (turn.h: the turn's clock is behind by the turn's work so far). */
START_TEST(a_retry_late_in_a_long_turn_forwards_its_whole_per_try_bound)
{
	struct seam *s = seam_new(
	        config(EPS_AB, "mode: FAILOVER, retries: 2, per_try_timeout: 100ms, backoff: {base: 50ms, max: 50ms}"));
	struct seam_cs *cs = unary(s, NULL, "ping");
	seam_run(s);
	struct seam_ss *first = seam_stream(s, 0);
	ck_assert_ptr_nonnull(first);
	/* A turn: the first try's bound (the retry within 50 ms), and another
	 * call, whose start reads the turn's clock. */
	seam_advance_ms(s, 101);
	ck_assert_int_eq(first->rst, NGHTTP2_CANCEL);
	struct seam_cs *other = unary(s, NULL, "other");
	seam_run(s);
	ck_assert_uint_eq(seam_streams(s, NULL), 2);
	seam_respond(s, seam_stream(s, 1), 0, "pong", 4);
	seam_run(s);
	expect_ok(other, "pong");
	seam_timers_mid_turn(s, 61); /* the turn runs on 61 ms; the backoff ends in it */
	seam_run(s);
	struct seam_ss *retry = seam_stream(s, 2);
	ck_assert_ptr_nonnull(retry);
	ck_assert_int_eq(retry->prev_attempts, 1);
	int64_t ns = 0;
	ck_assert_int_eq(mtd_grpc_timeout_parse(retry->timeout, strlen(retry->timeout), &ns), 0);
	/* Its timer gives it 100 ms from now: so does its upstream. */
	ck_assert_int_ge(ns, 100 * (int64_t)1000000);
	seam_advance_ms(s, 99);
	ck_assert_int_eq(retry->rst, -1);
	seam_respond(s, retry, 0, "pong", 4);
	seam_run(s);
	expect_ok(cs, "pong");
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

/* A call "a" whose start reads the turn's clock (turn.h), its stream
 * upstream, then the same turn running on for ms: what the worker reads
 * next in it comes late in a long turn. */
static struct seam_cs *a_long_turn(struct seam *s, int64_t ms)
{
	struct seam_cs *a = unary(s, NULL, "a");
	seam_run(s);
	ck_assert_uint_eq(seam_streams(s, NULL), 1);
	seam_timers_mid_turn(s, ms);
	return a;
}

/* A request the worker reads late in a long turn (its bytes came while
 * the worker was busy with the turn's earlier callbacks): its deadline
 * counts from when it was read, as the app's own began before that, not
 * from the turn's clock, which is as old as the turn (turn.h). */
START_TEST(a_call_read_late_in_a_long_turn_keeps_its_whole_deadline)
{
	struct seam *s = seam_new(config(EPS_A, NULL));
	struct seam_cs *a = a_long_turn(s, 50);
	struct seam_cs *b = unary(s, "20m", "b");
	seam_run(s);
	ck_assert_msg(!b->closed, "ended at once: %d %s", b->status, b->message);
	struct seam_ss *sb = seam_stream(s, 1);
	ck_assert_ptr_nonnull(sb);
	expect_request(sb, "b");
	int64_t ns = 0;
	ck_assert_int_eq(mtd_grpc_timeout_parse(sb->timeout, strlen(sb->timeout), &ns), 0);
	ck_assert_int_ge(ns, 20 * (int64_t)1000000);
	seam_advance_ms(s, 19);
	ck_assert(!b->closed);
	seam_respond(s, sb, 0, "pong", 4);
	seam_respond(s, seam_stream(s, 0), 0, "pong", 4);
	seam_run(s);
	expect_ok(b, "pong");
	expect_ok(a, "pong");
	seam_free(s);
}
END_TEST

/* An attempt's start is what its endpoint's latency counts from (the
 * balancer's window and peak EWMA, deadline-aware picking, the learnt hedge
 * delay): an attempt picked late in a long turn is not charged the turn's
 * work before its pick, which was not the endpoint's. */
START_TEST(an_attempt_picked_late_in_a_long_turn_is_charged_its_own_latency)
{
	struct seam *s = seam_new(config(EPS_A, NULL));
	struct seam_cs *a = a_long_turn(s, 50);
	struct seam_cs *b = unary(s, NULL, "b");
	seam_run(s);
	struct seam_ss *sb = seam_stream(s, 1);
	ck_assert_ptr_nonnull(sb);
	seam_advance_ms(s, 1);
	seam_respond(s, sb, 0, "pong", 4);
	seam_run(s);
	expect_ok(b, "pong");
	const struct mtd_lb_live *lv = mtd_lb_stats_view(&seam_worker(s)->rt->services[0]->eps[0]->stats);
	ck_assert_uint_eq(atomic_load(&lv->window_count), 1);
	uint64_t us = atomic_load(&lv->window_sum_us);
	ck_assert_msg(us >= 1000 && us <= 2000, "b's latency: %llu us, not the 1 ms its endpoint took",
	              (unsigned long long)us);
	seam_respond(s, seam_stream(s, 0), 0, "pong", 4);
	seam_run(s);
	expect_ok(a, "pong");
	seam_free(s);
}
END_TEST

/* The service's rate limit is one bucket for every worker. A request read
 * late in a long turn takes from it at the time it was read: another
 * worker's takes meanwhile moved the bucket past the turn's clock
 * (turn.h), which the bucket refuses as a straggler's (limit.h), though
 * tokens are left. */
START_TEST(a_call_read_late_in_a_long_turn_takes_a_token_left_in_a_shared_rate_limit)
{
	struct seam *s = seam_new("services:\n"
	                          "  - name: \"echo.Echo\"\n"
	                          "    endpoints: [" EPS_A "]\n"
	                          "    rate_limit: {calls_per_second: 1000, burst: 10}\n");
	seam_advance_ms(s, 100); /* a full bucket: 10 tokens */
	struct seam_cs *a = unary(s, NULL, "a"); /* its start reads the turn's clock */
	seam_run(s);
	ck_assert_uint_eq(seam_streams(s, EP_A), 1);
	seam_timers_mid_turn(s, 5); /* the turn runs on 5 ms */
	/* Another worker, on its own clock, takes 7 of the 9 left (and the 5
	 * that came in 5 ms fill only to the burst): 3 are left. */
	struct mtd_limit_bucket *b = &seam_worker(s)->rt->services[0]->limit->b;
	for (int i = 0; i < 7; i++)
		ck_assert(mtd_limit_take(b, seam_now_ns()));
	ck_assert_uint_eq(mtd_limit_tokens(b, seam_now_ns()), 3);
	struct seam_cs *c = unary(s, NULL, "c");
	seam_run(s);
	ck_assert_msg(!c->closed, "refused: %d %s", c->status, c->message);
	ck_assert_uint_eq(seam_streams(s, EP_A), 2);
	for (unsigned i = 0; i < 2; i++)
		seam_respond(s, seam_stream(s, i), 0, "pong", 4);
	seam_run(s);
	expect_ok(a, "pong");
	expect_ok(c, "pong");
	seam_free(s);
}
END_TEST

/* An attempt that fails late in a long turn, near its call's deadline: no
 * retry whose backoff ends past the deadline (lib/fault policy.c), judged
 * at the time of the failure, not at the turn's clock (turn.h), which is
 * as old as the turn. The call ends with the attempt's failure, not with
 * a DEADLINE_EXCEEDED after a retry that could not start. */
START_TEST(an_attempt_failing_late_in_a_long_turn_near_the_deadline_is_not_retried_past_it)
{
	struct seam *s = seam_new(
	        config(EPS_AB, "mode: FAILOVER, retries: 2, backoff: {base: 50ms, max: 50ms}"));
	struct seam_cs *cs = unary(s, "100m", "ping");
	seam_run(s);
	struct seam_ss *first = seam_stream(s, 0);
	ck_assert_ptr_nonnull(first);
	seam_advance_ms(s, 48); /* a new turn: another call's start reads its clock */
	struct seam_cs *other = unary(s, NULL, "other");
	seam_run(s);
	seam_respond(s, seam_stream(s, 1), 0, "pong", 4);
	seam_run(s);
	expect_ok(other, "pong");
	seam_timers_mid_turn(s, 51); /* the turn runs on: 1 ms of the deadline left */
	seam_reset(s, first, NGHTTP2_INTERNAL_ERROR);
	seam_run(s);
	/* A backoff (up to 50 ms) cannot end within 1 ms but by luck: the
	 * attempt's failure is the call's. */
	ck_assert_msg(cs->closed, "a retry waits past the deadline");
	ck_assert_int_ne(cs->status, 4);
	ck_assert_uint_eq(seam_streams(s, NULL), 2);
	seam_free(s);
}
END_TEST

/* A retry due late in a long turn, near its call's deadline: "no retry
 * that cannot finish in time" (call.c too_slow) weighs the endpoints'
 * answers against the time left now, not at the turn's clock (turn.h),
 * which is as old as the turn. */
START_TEST(a_retry_due_late_in_a_long_turn_is_weighed_against_the_time_left_now)
{
	struct seam *s = seam_new(config(EPS_AB, "mode: FAILOVER, retries: 2, backoff: {base: 1ms, max: 1ms}"));
	/* Both endpoints answer in 30 ms (their windows: 5 answers or more). */
	unsigned n = 0;
	for (; n < 16; n++) {
		struct seam_cs *w = unary(s, NULL, "warm");
		seam_run(s);
		seam_advance_ms(s, 30);
		seam_respond(s, seam_stream(s, n), 0, "pong", 4);
		seam_run(s);
		expect_ok(w, "pong");
	}
	struct seam_cs *cs = unary(s, "100m", "ping");
	seam_run(s);
	struct seam_ss *first = seam_stream(s, n++);
	ck_assert_ptr_nonnull(first);
	seam_advance_ms(s, 30); /* a new turn: another call's start reads its clock */
	struct seam_cs *other = unary(s, NULL, "other");
	seam_run(s);
	seam_respond(s, seam_stream(s, n++), 0, "pong", 4);
	seam_run(s);
	expect_ok(other, "pong");
	seam_timers_mid_turn(s, 50); /* the turn runs on: 20 ms of the deadline left */
	seam_reset(s, first, NGHTTP2_INTERNAL_ERROR);
	seam_run(s);
	ck_assert(!cs->closed); /* a retry, after its backoff */
	seam_timers_mid_turn(s, 1); /* the backoff ends in the same turn */
	seam_run(s);
	/* 19 ms left; both answer in 30: no retry. */
	ck_assert_msg(cs->closed, "a retry started");
	ck_assert_ptr_nonnull(strstr(cs->message, "no retry"));
	ck_assert_uint_eq(seam_streams(s, NULL), n);
	seam_free(s);
}
END_TEST

/* A call read late in a long turn that waits for a control plane's
 * routes: the wait its deadline bounds counts from when it was read, not
 * from the turn's clock (turn.h), as its deadline does once routed. */
START_TEST(a_call_read_late_in_a_long_turn_waits_for_routes_its_whole_deadline)
{
	struct seam *s = seam_new("xds: {server: \"127.0.0.1:9\", listener: lis, initial_wait: 2s}\n"
	                          "services:\n"
	                          "  - name: \"echo.Echo\"\n"
	                          "    endpoints: [" EPS_A "]\n"
	                          "  - name: \"other.Other\"\n"
	                          "    discovery: {dns: {name: a.example, port: 50051}}\n");
	struct mtd_worker *w = seam_worker(s);
	struct seam_cs *a = seam_call(s, PATH, NULL, NULL, 0, false); /* its start reads the turn's clock */
	seam_run(s);
	ck_assert_uint_eq(w->n_parked, 1);
	seam_timers_mid_turn(s, 50); /* the turn runs on 50 ms */
	struct seam_cs *b = seam_call(s, PATH, "100m", NULL, 0, false);
	seam_run(s);
	ck_assert_uint_eq(w->n_parked, 2);
	seam_advance_ms(s, 99);
	ck_assert_msg(b->status == -1, "answered: %d %s", b->status, b->message);
	ck_assert_uint_eq(w->n_parked, 2);
	seam_advance_ms(s, 2);
	ck_assert_int_eq(b->status, 4);
	ck_assert_uint_eq(w->n_parked, 1);
	seam_cancel(s, b);
	seam_cancel(s, a);
	seam_run(s);
	ck_assert_uint_eq(w->n_parked, 0);
	seam_free(s);
}
END_TEST

/* A retry late in a long turn, with an endpoint too slow for the time
 * left and another fast enough: the pick passes the slow one over by the
 * time left now (call.c too_slow at the exact clock), not at the turn's
 * clock, which is as old as the turn (turn.h) and would let the pick take
 * the slow one, only for the check after it to refuse the retry. */
START_TEST(a_retry_late_in_a_long_turn_passes_over_an_endpoint_too_slow_for_the_time_left)
{
	/* Round robin, so that the pick's order is known: A, B, C. */
	struct seam *s = seam_new("services:\n"
	                          "  - name: \"echo.Echo\"\n"
	                          "    endpoints: [" EPS_ABC "]\n"
	                          "    lb: {policy: ROUND_ROBIN}\n"
	                          "    fault: {mode: FAILOVER, retries: 2, backoff: {base: 1ms, max: 1ms}}\n");
	/* A answers in 30 ms, B and C in 2 (their windows: 5 answers or
	 * more); the warm-up ends when the next pick is C's. */
	unsigned n = 0, on_a = 0;
	for (; n < 60 && (on_a < 5 || strcmp(seam_stream(s, n - 1)->ep, EP_B) != 0); n++) {
		struct seam_cs *w = unary(s, NULL, "warm");
		seam_run(s);
		struct seam_ss *ss = seam_stream(s, n);
		ck_assert_ptr_nonnull(ss);
		bool slow = strcmp(ss->ep, EP_A) == 0;
		on_a += slow;
		seam_advance_ms(s, slow ? 30 : 2);
		seam_respond(s, ss, 0, "pong", 4);
		seam_run(s);
		expect_ok(w, "pong");
	}
	ck_assert_uint_ge(on_a, 5);
	seam_advance_ms(s, 1); /* a new turn: the call's start reads its clock */
	struct seam_cs *cs = unary(s, "100m", "ping");
	seam_run(s);
	struct seam_ss *first = seam_stream(s, n++);
	ck_assert_ptr_nonnull(first);
	ck_assert_str_eq(first->ep, EP_C);
	/* The turn runs on: 20 ms of the deadline left when C fails, 19 at
	 * the retry, which round robin would send to A (30 ms) next. */
	seam_timers_mid_turn(s, 80);
	seam_reset(s, first, NGHTTP2_INTERNAL_ERROR);
	seam_run(s);
	seam_timers_mid_turn(s, 1);
	seam_run(s);
	ck_assert_msg(!cs->closed, "no retry: %s", cs->message);
	struct seam_ss *retry = seam_stream(s, n);
	ck_assert_ptr_nonnull(retry);
	ck_assert_str_eq(retry->ep, EP_B);
	ck_assert_int_eq(retry->prev_attempts, 1);
	seam_respond(s, retry, 0, "pong", 4);
	seam_run(s);
	expect_ok(cs, "pong");
	seam_free(s);
}
END_TEST

/* An endpoint whose connect backoff (pool.c, set from the exact clock)
 * runs out late in a long turn is not passed over by a pick in it: the
 * pick weighs the backoff at the exact clock, as it does the time left
 * (call.c skip_reason). At the turn's clock, as old as the turn (turn.h),
 * it was still backing off, and the call went to the other endpoint. */
START_TEST(an_endpoint_whose_backoff_ran_out_late_in_a_long_turn_is_not_passed_over)
{
	/* Round robin, so that the pick's order is known once A was tried:
	 * A (refused), B (the call moved there), then A again. */
	struct seam *s = seam_new("services:\n"
	                          "  - name: \"echo.Echo\"\n"
	                          "    endpoints: [" EPS_AB "]\n"
	                          "    lb: {policy: ROUND_ROBIN}\n");
	seam_ep_mode(s, EP_A, SEAM_EP_REFUSED);
	unsigned nth = 0;
	struct seam_cs *cs;
	struct seam_ss *ss;
	while (seam_ep_connects(s, EP_A) == 0 && nth < 2) { /* round robin starts anywhere */
		cs = unary(s, NULL, "ping");
		seam_run(s);
		ss = seam_stream(s, nth++);
		ck_assert_ptr_nonnull(ss);
		ck_assert_str_eq(ss->ep, EP_B);
		seam_respond(s, ss, 0, "pong", 4);
		seam_run(s);
		expect_ok(cs, "pong");
	}
	ck_assert_uint_eq(seam_ep_connects(s, EP_A), 1); /* refused: 250 ms of backoff */
	seam_ep_mode(s, EP_A, SEAM_EP_UP);
	/* A turn that read its clock 1 ms before the backoff's end, then ran
	 * on 2 ms: the next call, round robin's A, is read in it. */
	seam_advance_ms(s, 249);
	ck_assert(mtd_pool_backing_off(seam_pool(s, EP_A), mtd_turn_now_ns(seam_worker(s))));
	seam_timers_mid_turn(s, 2);
	ck_assert(!mtd_pool_backing_off(seam_pool(s, EP_A), seam_now_ns()));
	cs = unary(s, NULL, "ping");
	seam_run(s);
	ss = seam_stream(s, nth);
	ck_assert_ptr_nonnull(ss);
	ck_assert_str_eq(ss->ep, EP_A);
	seam_respond(s, ss, 0, "pong", 4);
	seam_run(s);
	expect_ok(cs, "pong");
	seam_free(s);
}
END_TEST

/* A worker gives its freed memory back once per quiet spell after calls
 * (worker_turn.c mtd_worker_give_back). A call that ends in the turn of a
 * give-back, after it, is a call since: the next quiet spell gives back
 * again. Its stream's end is stamped with the turn's clock (downstream.c);
 * the give-back was stamped with the exact one, read later in that turn,
 * so the end looked older than the give-back and the burst's memory
 * stayed. */
START_TEST(a_call_ending_in_the_turn_of_a_give_back_is_a_call_since)
{
	struct seam *s = seam_new(config(EPS_A, NULL));
	struct mtd_worker *w = seam_worker(s);
	ck_assert(!mtd_worker_give_back(w)); /* no call yet */
	unsigned nth = 0;
	one_call(s, &nth, EP_A);
	seam_advance_ms(s, 4000);
	ck_assert(!mtd_worker_give_back(w)); /* not quiet for long enough */
	/* A turn whose clock a callback read, then the give-back later in it. */
	seam_advance_ms(s, 2000);
	mtd_turn_now_ns(w);
	seam_timers_mid_turn(s, 1);
	ck_assert(mtd_worker_give_back(w));
	ck_assert(!mtd_worker_give_back(w)); /* once a spell */
	/* Later in that turn, a call begins and ends. */
	one_call(s, &nth, EP_A);
	seam_advance_ms(s, 6000);
	ck_assert_msg(mtd_worker_give_back(w), "the call after the give-back went unseen");
	seam_free(s);
}
END_TEST

/* Calls that end with their client's connection (closed with streams
 * open: a client that read none of its answers, gone) are calls too: the
 * memory they held goes back after the quiet spell. Only a stream's close
 * stamped the worker's last stream end, so a burst that ended so (64 MiB
 * of answers for a client that never read) stayed private memory until
 * some later call ended. */
START_TEST(calls_ended_by_their_connections_close_count_for_the_give_back)
{
	struct seam *s = seam_new(config(EPS_A, NULL));
	struct mtd_worker *w = seam_worker(s);
	ck_assert(!mtd_worker_give_back(w)); /* no call yet */
	struct seam_cs *cs = unary(s, NULL, "ping");
	seam_run(s);
	ck_assert_ptr_nonnull(seam_stream(s, 0));
	ck_assert(!cs->closed);
	seam_client_gone(s);
	seam_run(s);
	seam_advance_ms(s, 6000);
	ck_assert_msg(mtd_worker_give_back(w), "the calls that ended with their connection went unseen");
	seam_free(s);
}
END_TEST

/* A call's trace and span ids (call/trace.c), derived as a traced
 * snapshot would: the seam's trace nothing, and only whether a tracer is
 * there is read. */
static void trace_ids(struct seam *s, const struct seam_cs *cs, uint8_t out[24])
{
	struct mtd_call *call = seam_call_of(s, cs);
	ck_assert_ptr_nonnull(call);
	/* Changed for the derivation only, and put back. */
	struct mtd_runtime *rt = (struct mtd_runtime *)(call->hold ? call->hold->rt : seam_worker(s)->rt);
	struct mtd_tracer *was = rt->tracer;
	rt->tracer = (struct mtd_tracer *)rt;
	struct mtd_call_trace t;
	bool traced = mtd_call_trace_of(call, &t);
	rt->tracer = was;
	ck_assert(traced);
	ck_assert(!t.has_parent);
	memcpy(out, t.ctx.trace_id, 16);
	memcpy(out + 16, t.ctx.span_id, 8);
}

/* Calls of one turn, each over and freed (the turn's flush) before the
 * next begins, as a read the transport read ahead brings back after the
 * flush does (io/conn.c): each starts at its own ns (turn.h
 * mtd_turn_call_start_ns), and one that begins in an earlier one's block
 * has ids of its own. They were mixed from the call's address and its
 * start, which were the same (red so in the release build). A slab that
 * keeps freed blocks gives the block back to the next call; under
 * AddressSanitizer it keeps none, and only the starts are compared. */
START_TEST(calls_of_one_turn_start_apart_and_have_their_own_trace_ids)
{
	struct seam *s = seam_new(config(EPS_A, NULL));
	seam_worker(s)->slab.passthrough = false;
	uint8_t m[256];
	size_t len = seam_grpc_msg(m, "a", 1);
	struct seam_cs *first = seam_call(s, PATH, NULL, m, len, false);
	seam_run(s);
	struct mtd_call *block = seam_call_of(s, first);
	int64_t last = block->start_ns;
	uint8_t ids_first[24], ids[24];
	trace_ids(s, first, ids_first);
	seam_cancel(s, first);
	seam_run(s);
	ck_assert(first->closed);
	ck_assert(!seam_block_live(block));
	bool again = false;
	for (int i = 0; i < 8; i++) {
		struct seam_cs *cs = seam_call(s, PATH, NULL, m, len, false);
		seam_run(s);
		struct mtd_call *call = seam_call_of(s, cs);
		ck_assert_int_gt(call->start_ns, last);
		last = call->start_ns;
		if (call == block) {
			again = true;
			trace_ids(s, cs, ids);
			ck_assert_msg(memcmp(ids_first, ids, 16) != 0, "the same trace id");
			ck_assert_msg(memcmp(ids_first + 16, ids + 16, 8) != 0, "the same span id");
		}
		seam_cancel(s, cs);
		seam_run(s);
		ck_assert(cs->closed);
	}
	ck_assert_int_eq(again, MTD_SLAB_KEEP_BYTES > 0);
	seam_free(s);
}
END_TEST

/* Two workers' calls can start at the same ns: each worker's turn clock
 * is its own reading (at 10,000 calls a second on each of two workers,
 * about one pair of starts in ten seconds is the same ns). A process runs
 * up to 1024 workers (config: workers, 0 = one per CPU), and the worker's
 * id is what tells two such calls apart (call/trace.c): for any two
 * workers, their calls' ids differ. The second call stands for another
 * worker's first of the same turn: started at the same ns (its worker's
 * last start was earlier), renumbered for the derivation. */
START_TEST(calls_of_two_workers_starting_at_one_ns_have_their_own_trace_ids)
{
	struct seam *s = seam_new(config(EPS_A, NULL));
	struct mtd_worker *w = seam_worker(s);
	uint8_t m[256];
	size_t len = seam_grpc_msg(m, "a", 1);
	struct seam_cs *zero = seam_call(s, PATH, NULL, m, len, false);
	seam_run(s);
	w->last_call_start_ns = 0;
	struct seam_cs *other = seam_call(s, PATH, NULL, m, len, false);
	seam_run(s);
	ck_assert_int_eq(seam_call_of(s, zero)->start_ns, seam_call_of(s, other)->start_ns);
	uint8_t ids_zero[24], ids[24];
	trace_ids(s, zero, ids_zero);
	for (unsigned id = 1; id < 1024; id++) {
		w->id = id;
		trace_ids(s, other, ids);
		w->id = 0;
		ck_assert_msg(memcmp(ids_zero, ids, 16) != 0, "workers 0 and %u: the same trace id", id);
		ck_assert_msg(memcmp(ids_zero + 16, ids + 16, 8) != 0, "workers 0 and %u: the same span id", id);
	}
	seam_cancel(s, zero);
	seam_cancel(s, other);
	seam_run(s);
	seam_free(s);
}
END_TEST

/* Under one key a call's ids are the same each time they are derived (its
 * attempts, its span and its log line name one trace); under another,
 * even one bit apart, they are others: every bit of the key goes into
 * every id. */
START_TEST(a_calls_trace_ids_stay_under_one_key_and_change_with_any_bit_of_it)
{
	struct seam *s = seam_new(config(EPS_A, NULL));
	uint8_t m[256];
	size_t len = seam_grpc_msg(m, "a", 1);
	struct seam_cs *cs = seam_call(s, PATH, NULL, m, len, false);
	seam_run(s);
	uint8_t key[MTD_SIPHASH_KEY_LEN];
	for (unsigned i = 0; i < sizeof(key); i++)
		key[i] = (uint8_t)(0xa5 ^ i * 17);
	uint8_t ids[24], again[24], other[24];
	mtd_call_trace_key(key);
	trace_ids(s, cs, ids);
	trace_ids(s, cs, again);
	ck_assert_msg(memcmp(ids, again, 24) == 0, "derived twice, the ids differ");
	for (unsigned bit = 0; bit < 8 * sizeof(key); bit++) {
		key[bit / 8] ^= (uint8_t)(1u << bit % 8);
		mtd_call_trace_key(key);
		trace_ids(s, cs, other);
		key[bit / 8] ^= (uint8_t)(1u << bit % 8);
		ck_assert_msg(memcmp(ids, other, 16) != 0, "key bit %u: the same trace id", bit);
		ck_assert_msg(memcmp(ids + 16, other + 16, 8) != 0, "key bit %u: the same span id", bit);
	}
	mtd_call_trace_key(key);
	trace_ids(s, cs, again);
	ck_assert_msg(memcmp(ids, again, 24) == 0, "the key back, the ids differ");
	static const uint8_t zero[MTD_SIPHASH_KEY_LEN];
	mtd_call_trace_key(zero);
	seam_cancel(s, cs);
	seam_run(s);
	seam_free(s);
}
END_TEST

/* The ids' former derivation, as one who sees an id would undo it:
 * splitmix64's finalizer (z ^= z >> 30, *= c1, ^= >> 27, *= c2, ^= >> 31)
 * and its inverse. */
static uint64_t old_mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t undo_xorshift(uint64_t y, unsigned k)
{
	uint64_t x = y;
	for (unsigned i = 0; i < 64 / k + 1; i++)
		x = y ^ (x >> k);
	return x;
}

static uint64_t mul_inverse(uint64_t c) /* c odd: Newton's, 3 -> 96 bits */
{
	uint64_t x = c;
	for (int i = 0; i < 5; i++)
		x *= 2 - c * x;
	return x;
}

static uint64_t old_unmix(uint64_t z)
{
	z = undo_xorshift(z, 31) * mul_inverse(0x94d049bb133111ebull);
	z = undo_xorshift(z, 27) * mul_inverse(0xbf58476d1ce4e5b9ull);
	return undo_xorshift(z, 30);
}

static uint64_t be64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

/* One who sees the trace id of one call maitred started (any service
 * downstream, any trace backend) and knows when it and another call
 * started cannot tell the other's trace id. Ids were mixes of (seed ^
 * start * golden ^ worker << 54) and a salt, by an invertible mix: the
 * seed came back from one id, and every other call's ids with it (red so
 * before ids were keyed). */
START_TEST(one_trace_id_does_not_give_away_another_calls)
{
	struct seam *s = seam_new(config(EPS_A, NULL));
	uint8_t key[MTD_SIPHASH_KEY_LEN];
	for (unsigned i = 0; i < sizeof(key); i++)
		key[i] = (uint8_t)(0x3c + i * 29);
	mtd_call_trace_key(key);
	uint8_t m[256];
	size_t len = seam_grpc_msg(m, "a", 1);
	struct seam_cs *seen = seam_call(s, PATH, NULL, m, len, false);
	struct seam_cs *next = seam_call(s, PATH, NULL, m, len, false);
	seam_run(s);
	uint8_t ids_seen[24], ids_next[24];
	trace_ids(s, seen, ids_seen);
	trace_ids(s, next, ids_next);
	const uint64_t golden = 0x9e3779b97f4a7c15ull, salt = 0x7472616365ull; /* "trace" */
	uint64_t worker = (uint64_t)seam_worker(s)->id << 54;
	uint64_t start_seen = (uint64_t)seam_call_of(s, seen)->start_ns;
	uint64_t start_next = (uint64_t)seam_call_of(s, next)->start_ns;
	uint64_t seed = old_unmix(old_unmix(be64(ids_seen)) ^ salt) ^ start_seen * golden ^ worker;
	uint64_t guess = old_mix(old_mix(seed ^ start_next * golden ^ worker) ^ salt);
	ck_assert_msg(guess != be64(ids_next), "the next call's trace id follows from the first's");
	ck_assert(memcmp(ids_seen, ids_next, 16) != 0);
	static const uint8_t zero[MTD_SIPHASH_KEY_LEN];
	mtd_call_trace_key(zero);
	seam_cancel(s, seen);
	seam_cancel(s, next);
	seam_run(s);
	seam_free(s);
}
END_TEST

/* The sampling verdict reads the trace id's last 56 bits: over calls
 * starting one ns apart, one worker, one key, the share sampled is the
 * ratio (binomial: 5000 expected, sd 61). */
START_TEST(trace_ids_of_calls_a_ns_apart_are_sampled_at_the_ratio)
{
	struct seam *s = seam_new(config(EPS_A, NULL));
	uint8_t m[256];
	size_t len = seam_grpc_msg(m, "a", 1);
	struct seam_cs *cs = seam_call(s, PATH, NULL, m, len, false);
	seam_run(s);
	struct mtd_call *call = seam_call_of(s, cs);
	int64_t start = call->start_ns;
	unsigned in = 0;
	uint8_t ids[24];
	for (int64_t i = 0; i < 20000; i++) {
		call->start_ns = start + i;
		trace_ids(s, cs, ids);
		in += mtd_trace_sample(ids, 0.25);
	}
	call->start_ns = start;
	ck_assert_uint_gt(in, 4700);
	ck_assert_uint_lt(in, 5300);
	seam_cancel(s, cs);
	seam_run(s);
	seam_free(s);
}
END_TEST

START_TEST(wall_clock_step_back_does_not_hold_an_ejection)
{
	char yaml[2048];
	snprintf(yaml, sizeof(yaml), "%s    outlier_detection: {consecutive_failures: 1, base_ejection_time: 30s}\n",
	         config(EPS_AB, NULL));
	struct seam *s = seam_new(yaml);
	unsigned nth = 0;
	/* Until an endpoint failed once: ejected for 30 s. */
	while (nth < 8 && atomic_load(&seam_worker(s)->rt->services[0]->outliers->n_ejected) == 0)
		one_call(s, &nth, "none");
	const struct mtd_outlier_set *o = seam_worker(s)->rt->services[0]->outliers;
	ck_assert_uint_eq(atomic_load(&o->n_ejected), 1);
	size_t out = mtd_outlier_is_ejected(o, ep_index(s, EP_A)) ? ep_index(s, EP_A) : ep_index(s, EP_B);
	ck_assert(mtd_outlier_is_ejected(o, out));
	/* The wall clock steps back an hour (NTP, an operator). */
	seam_step_wall_ms(-3600 * 1000);
	seam_advance_ms(s, 29000);
	seam_runtime_tick(s);
	ck_assert(mtd_outlier_is_ejected(o, out));
	/* 30 s later on the monotonic clock: back, not an hour later. */
	seam_advance_ms(s, 2000);
	seam_runtime_tick(s);
	ck_assert(!mtd_outlier_is_ejected(o, out));
	seam_free(s);
}
END_TEST

START_TEST(wall_clock_step_back_does_not_stop_the_guard)
{
	struct seam *s = seam_new("services:\n"
	                          "  - name: \"echo.Echo\"\n"
	                          "    endpoints: [{address: \"" EP_A "\", metadata: {version: v1}},"
	                          " {address: \"" EP_B "\", metadata: {version: v2}}]\n"
	                          "    split: {metadata_key: version, weights: {v1: 50, v2: 50},"
	                          " guard: {min_calls: 10, window: 10s}}\n");
	unsigned nth = 0;
	struct mtd_lb_split_group info;
	seam_runtime_tick(s); /* the guard's first snapshot */
	seam_step_wall_ms(-3600 * 1000);
	/* v2 fails every call; a second of calls, then the control thread's
	 * tick: cut within the 10 s window whatever the wall clock did. */
	for (int sec = 0; sec < 10; sec++) {
		for (int k = 0; k < 20; k++)
			one_call(s, &nth, EP_A);
		seam_advance_ms(s, 1000);
		seam_runtime_tick(s);
		ck_assert(mtd_lb_layer_split_group(seam_worker(s)->rt->services[0]->layer, 1, &info));
		if (info.current == 0)
			break;
	}
	ck_assert_str_eq(info.value, "v2");
	ck_assert_msg(info.current == 0, "v2 not cut in 10 s after a wall-clock step back");
	ck_assert_uint_eq(seam_mx.guard_cuts, 1);
	seam_free(s);
}
END_TEST

/* ---- mirror copies ------------------------------------------------------- */

START_TEST(shadow_authority_suffixes_the_host_before_any_port)
{
	static const struct {
		const char *in, *out; /* out NULL: left as it is */
	} cases[] = {
	        {"shop.test", "shop.test-shadow"},
	        {"shop.test:8080", "shop.test-shadow:8080"},
	        {"10.0.0.1:80", "10.0.0.1-shadow:80"},
	        {"user@shop.test:1", "user@shop.test-shadow:1"},
	        {"[::1]:80", NULL},
	        {"[::1]", NULL},
	        {"::1", NULL},
	        {"", NULL},
	};
	char out[64];
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t n = mtd_mirror_shadow_authority(cases[i].in, strlen(cases[i].in), out, sizeof(out));
		if (!cases[i].out) {
			ck_assert_msg(n == 0, "%s: suffixed", cases[i].in);
			continue;
		}
		ck_assert_msg(n == strlen(cases[i].out) && memcmp(out, cases[i].out, n) == 0, "%s -> %.*s", cases[i].in,
		              (int)n, out);
	}
	/* No room: left as it is. */
	ck_assert_uint_eq(mtd_mirror_shadow_authority("shop.test", 9, out, 15), 0);
}
END_TEST

#define MIRRORED(shadow_extra)                       \
	"services:\n"                                \
	"  - name: \"echo.Echo\"\n"                  \
	"    endpoints: [" EPS_A "]\n"               \
	"    mirror: {service: shadow}\n"            \
	"  - name: shadow\n"                         \
	"    endpoints: [{address: \"" EP_C "\"}]\n" \
	"    " shadow_extra "\n"

/* The streams opened to addr so far. */
static struct seam_ss *nth_stream_to(struct seam *s, const char *addr, unsigned nth)
{
	for (unsigned i = 0; seam_stream(s, i); i++)
		if (strcmp(seam_stream(s, i)->ep, addr) == 0 && nth-- == 0)
			return seam_stream(s, i);
	return NULL;
}

START_TEST(mirror_copies_pass_the_mirror_entrys_rate_limit)
{
	struct seam *s = seam_new(MIRRORED("rate_limit: {calls_per_second: 1, burst: 1}"));
	struct seam_cs *cs[3];
	for (int i = 0; i < 3; i++) {
		cs[i] = unary(s, NULL, "ping");
		seam_run(s);
	}
	/* One copy (the bucket's one token), two dropped and counted; the
	 * primaries all went on. */
	ck_assert_uint_eq(seam_streams(s, EP_A), 3);
	ck_assert_uint_eq(seam_streams(s, EP_C), 1);
	ck_assert_uint_eq(seam_mx.policy_by[MTD_MX_MIRROR_COPIES], 1);
	ck_assert_uint_eq(seam_mx.policy_by[MTD_MX_MIRROR_RATE_LIMITED], 2);
	/* The copy says it is one: its host suffixed -shadow. */
	ck_assert_str_eq(nth_stream_to(s, EP_C, 0)->authority, "seam.test-shadow");
	ck_assert_str_eq(nth_stream_to(s, EP_A, 0)->authority, "seam.test");
	expect_request(nth_stream_to(s, EP_C, 0), "ping");
	seam_respond(s, nth_stream_to(s, EP_C, 0), 0, "pong", 4);
	for (int i = 0; i < 3; i++)
		seam_respond(s, nth_stream_to(s, EP_A, (unsigned)i), 0, "pong", 4);
	seam_run(s);
	for (int i = 0; i < 3; i++)
		expect_ok(cs[i], "pong");
	/* A second later the bucket has a token again. */
	seam_advance_ms(s, 1000);
	struct seam_cs *late = unary(s, NULL, "ping");
	seam_run(s);
	ck_assert_uint_eq(seam_streams(s, EP_C), 2);
	seam_respond(s, nth_stream_to(s, EP_C, 1), 0, "pong", 4);
	seam_respond(s, nth_stream_to(s, EP_A, 3), 0, "pong", 4);
	seam_run(s);
	expect_ok(late, "pong");
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

START_TEST(mirror_copies_pass_the_mirror_entrys_circuit_breaker)
{
	struct seam *s = seam_new(MIRRORED("circuit_breaker: {max_calls: 1}"));
	/* The first copy stays in flight at the mirror entry (its primary
	 * too: the primary's end would cancel it). */
	struct seam_cs *a = unary(s, NULL, "ping");
	seam_run(s);
	ck_assert_uint_eq(seam_streams(s, EP_C), 1);
	struct seam_cs *b = unary(s, NULL, "ping");
	seam_run(s);
	ck_assert_uint_eq(seam_streams(s, EP_C), 1);
	ck_assert_uint_eq(seam_mx.policy_by[MTD_MX_MIRROR_CIRCUIT_OPEN], 1);
	ck_assert_uint_eq(seam_streams(s, EP_A), 2); /* the primary never affected */
	/* The copy answered: room again. */
	seam_respond(s, nth_stream_to(s, EP_C, 0), 0, "pong", 4);
	seam_run(s);
	struct seam_cs *c = unary(s, NULL, "ping");
	seam_run(s);
	ck_assert_uint_eq(seam_streams(s, EP_C), 2);
	for (unsigned i = 0; i < 3; i++)
		seam_respond(s, nth_stream_to(s, EP_A, i), 0, "pong", 4);
	seam_respond(s, nth_stream_to(s, EP_C, 1), 0, "pong", 4);
	seam_run(s);
	expect_ok(a, "pong");
	expect_ok(b, "pong");
	expect_ok(c, "pong");
	ck_assert_uint_eq(seam_mx.policy_by[MTD_MX_MIRROR_COPIES], 2);
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

/* A reload that changes a bucket's figures carries the tokens left over:
 * it mints no new burst. */
START_TEST(reload_with_new_rate_limit_figures_mints_no_burst)
{
	struct seam *s = seam_new("services:\n"
	                          "  - name: \"echo.Echo\"\n"
	                          "    endpoints: [" EPS_A "]\n"
	                          "    rate_limit: {calls_per_second: 1, burst: 2}\n");
	struct seam_cs *cs[4];
	for (int i = 0; i < 3; i++) {
		cs[i] = unary(s, NULL, "ping");
		seam_run(s);
	}
	expect_status(cs[2], 8); /* RESOURCE_EXHAUSTED: the burst of 2 spent */
	seam_reload(s, "services:\n"
	               "  - name: \"echo.Echo\"\n"
	               "    endpoints: [" EPS_A "]\n"
	               "    rate_limit: {calls_per_second: 2, burst: 50}\n");
	seam_run(s);
	cs[3] = unary(s, NULL, "ping");
	seam_run(s);
	expect_status(cs[3], 8); /* still empty, not a fresh 50 */
	ck_assert_uint_eq(seam_streams(s, EP_A), 2);
	for (unsigned i = 0; i < 2; i++)
		seam_respond(s, seam_stream(s, i), 0, "pong", 4);
	seam_run(s);
	/* Refilled at the new rate: one token in 500 ms. */
	seam_advance_ms(s, 500);
	struct seam_cs *late = unary(s, NULL, "ping");
	seam_run(s);
	ck_assert_uint_eq(seam_streams(s, EP_A), 3);
	seam_respond(s, seam_stream(s, 2), 0, "pong", 4);
	seam_run(s);
	expect_ok(late, "pong");
	seam_free(s);
}
END_TEST

/* ---- the defects of the engine's seams (issue 24) ------------------------------ */

/* echo.Echo on A alone, bc.Bc under BROADCAST on A and B. */
static const char *broadcast_beside_echo = "services:\n"
                                           "  - name: \"echo.Echo\"\n"
                                           "    endpoints: [" EPS_A "]\n"
                                           "  - name: \"bc.Bc\"\n"
                                           "    endpoints: [" EPS_AB "]\n"
                                           "    fault: {mode: BROADCAST}\n";

static size_t down_resp_held(struct seam *s)
{
	return LIST_FIRST(&seam_worker(s)->downs)->resp_held;
}

/* A BROADCAST call that fails after one endpoint's answer was held gives
 * its client connection back nothing it had not counted: the held answer
 * was never the client's (mtd_relay_hold), and the failure dropped it.
 * It gave back its length all the same, resp_held wrapped, and every
 * later call on that connection failed RESOURCE_EXHAUSTED "left
 * 18446744073709551... response bytes unread". */
START_TEST(failed_broadcast_leaves_its_client_connection_usable)
{
	struct seam *s = seam_new(broadcast_beside_echo);
	seam_ep_mode(s, EP_B, SEAM_EP_SILENT);
	uint8_t m[64];
	size_t n = seam_grpc_msg(m, "flush", 5);
	struct seam_cs *bc = seam_call(s, "/bc.Bc/Unary", "100m", m, n, true);
	seam_run(s);
	ck_assert_uint_eq(seam_streams(s, EP_A), 1);
	seam_respond(s, seam_stream(s, 0), 0, "held", 4);
	seam_run(s);
	ck_assert_uint_eq(bc->resp_headers, 0); /* held: B has not answered */
	ck_assert_uint_eq(down_resp_held(s), 0);
	seam_advance_ms(s, 101);
	expect_status(bc, 4); /* DEADLINE_EXCEEDED */
	ck_assert_uint_eq(down_resp_held(s), 0);
	/* The next calls on the connection are answered. */
	for (int i = 0; i < 2; i++) {
		struct seam_cs *cs = unary(s, NULL, "ping");
		seam_run(s);
		struct seam_ss *ss = seam_stream(s, seam_streams(s, NULL) - 1);
		ck_assert_str_eq(ss->path, PATH);
		seam_respond(s, ss, 0, "pong", 4);
		seam_run(s);
		expect_ok(cs, "pong");
		ck_assert_uint_eq(down_resp_held(s), 0);
	}
	seam_free(s);
}
END_TEST

/* The response headers cannot be submitted to the client (out of memory):
 * its stream is reset, and the call is settled as any end of a call is.
 * reset_down ended it without cancelling the attempt, whose upstream
 * stream went on until its server ended it (for a server stream maybe
 * never), nor stopping the deadline; the client's close, once the
 * request was whole, reset nothing. */
START_TEST(reset_towards_the_client_cancels_the_attempt_upstream)
{
	struct seam *s = seam_new(config(EPS_A, NULL));
	struct seam_cs *cs = unary(s, "5S", "ping");
	seam_run(s);
	struct seam_ss *ss = seam_stream(s, 0);
	ck_assert_ptr_nonnull(ss);
	seam_fail_down_allocs(s, 1); /* the response's */
	seam_respond_headers(s, ss); /* a stream begins; no more yet */
	seam_run(s);
	expect_reset_internal(s, cs);
	ck_assert_int_eq(ss->rst, NGHTTP2_CANCEL);
	ck_assert(ss->closed);
	ck_assert_uint_eq(seam_worker(s)->timers.n, 0); /* no deadline left */
	ck_assert_ptr_null(seam_call_of(s, cs));
	ck_assert_uint_eq(seam_mx.ended, 1);
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

/* A service of n endpoints 10.0.1.i:50051 (fault block fault, or none),
 * each refusing connects at once. */
static struct seam *refusing_service(unsigned n, const char *fault)
{
	static char buf[8192];
	int k = snprintf(buf, sizeof(buf), "services:\n  - name: \"echo.Echo\"\n    endpoints: [");
	for (unsigned i = 0; i < n; i++)
		k += snprintf(buf + k, sizeof(buf) - (size_t)k, "%s{address: \"10.0.1.%u:50051\"}", i ? ", " : "", i);
	snprintf(buf + k, sizeof(buf) - (size_t)k, "]\n%s%s%s", fault ? "    fault: {" : "", fault ? fault : "",
	         fault ? "}\n" : "");
	struct seam *s = seam_new(buf);
	for (unsigned i = 0; i < n; i++) {
		char addr[32];
		snprintf(addr, sizeof(addr), "10.0.1.%u:50051", i);
		seam_ep_mode(s, addr, SEAM_EP_REFUSED);
	}
	return s;
}

/* Every endpoint refuses the connect at once (a refused loopback connect,
 * EMFILE, ENETUNREACH): the call moves from one to the next, each next
 * attempt started from the end of the turn, not on the failed connect's
 * stack. It was: up_fail -> move_waiting_calls -> ... -> attempt_failed ->
 * mtd_call_next_attempt -> launch -> mtd_pool_dispatch -> mtd_up_connect
 * -> ..., a dozen frames per endpoint, as deep as the service is wide. */
START_TEST(connects_refused_at_once_do_not_nest)
{
	uintptr_t deepest[2];
	const unsigned widths[2] = {2, 64};
	for (int w = 0; w < 2; w++) {
		struct seam *s = refusing_service(widths[w], NULL);
		struct seam_cs *cs = unary(s, NULL, "ping");
		seam_run(s);
		expect_status(cs, 14); /* UNAVAILABLE */
		ck_assert_msg(strstr(cs->message, "10.0.1."), "%s", cs->message);
		for (unsigned i = 0; i < widths[w]; i++) {
			char addr[32];
			snprintf(addr, sizeof(addr), "10.0.1.%u:50051", i);
			ck_assert_uint_eq(seam_ep_connects(s, addr), 1); /* each tried once */
		}
		deepest[w] = seam_connects.deepest;
		if (getenv("TEST_CALL_STACK"))
			fprintf(stderr, "%u endpoints refusing: %u connects nested at most, the deepest %zu bytes down\n",
			        widths[w], seam_connects.max_nested, (size_t)deepest[w]);
		ck_assert_uint_eq(seam_connects.max_nested, 1);
		ck_assert_uint_eq(seam_live_blocks(), 0);
		seam_free(s);
	}
	/* As deep for 64 endpoints as for 2. */
	ck_assert_uint_eq(deepest[1], deepest[0]);
}
END_TEST

/* FORKING over A (silent) and B: A's fork waits, B's runs. A reload
 * replaces both by C and D (silent): A's fork moves to the new snapshot,
 * whose tried bitmap is over C and D. B's fork then fails: its index is
 * the old snapshot's, and marked in the new bitmap it named another
 * endpoint as tried (and past the bitmap when the set had shrunk across
 * 64 endpoints). Its marks are dropped. */
START_TEST(old_forks_failure_after_a_reroute_marks_nothing_in_the_new_set)
{
	struct seam *s = seam_new(config(EPS_AB, "mode: FORKING, forks: 2"));
	seam_ep_mode(s, EP_A, SEAM_EP_SILENT);
	seam_ep_mode(s, EP_C, SEAM_EP_SILENT);
	seam_ep_mode(s, "10.0.0.4:50051", SEAM_EP_SILENT);
	struct seam_cs *cs = unary(s, NULL, "ping");
	seam_run(s);
	struct seam_ss *on_b = seam_stream(s, 0);
	ck_assert_ptr_nonnull(on_b);
	ck_assert_str_eq(on_b->ep, EP_B);
	struct mtd_call *call = seam_call_of(s, cs);
	struct mtd_attempt *b_fork = NULL, *a;
	LIST_FOREACH(a, &call->attempts, call_link)
		if (strcmp(mtd_endpoint_text(a->ep), EP_B) == 0)
			b_fork = a;
	ck_assert_ptr_nonnull(b_fork);
	ck_assert_int_eq(b_fork->ep_idx, 1);
	seam_reload(s, config("{address: \"" EP_C "\"}, {address: \"10.0.0.4:50051\"}", "mode: FORKING, forks: 2"));
	seam_run(s);
	ck_assert_ptr_nonnull(call->hold_prev); /* B's fork keeps the first snapshot */
	ck_assert_uint_eq(call->n_tried, 1);    /* the moved fork's endpoint */
	uint64_t before = call->tried[0];
	seam_reset(s, on_b, NGHTTP2_INTERNAL_ERROR);
	seam_run(s);
	ck_assert(!seam_block_live(b_fork)); /* failed, its stream closed: reaped */
	ck_assert(!cs->closed);              /* the moved fork goes on */
	ck_assert_uint_eq(call->n_tried, 1);
	ck_assert_uint_eq(call->tried[0], before);
	ck_assert_uint_eq(call->refused[0], 0);
	seam_cancel(s, cs);
	seam_run(s);
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

/* FORKING with forks: 3 and no hedge_delay: all forks at once. Each of
 * the three endpoints sees every call, and the three streams are opened
 * in the step that started the call, before anything is written: no
 * answer can come back before the last fork left. */
START_TEST(forking_three_forks_all_leave_in_the_calls_first_step)
{
	struct seam *s = seam_new(config(EPS_ABC, "mode: FORKING, forks: 3"));
	for (unsigned i = 0; i < 4; i++) {
		struct seam_cs *cs = unary(s, NULL, "ping");
		if (i > 0) {
			/* Connections up: the call's first step opens every fork's
			 * stream (mid-turn, nothing written yet). */
			seam_deliver_client(s);
			struct mtd_call *call = seam_call_of(s, cs);
			ck_assert_ptr_nonnull(call);
			ck_assert_uint_eq(n_attempts(call), 3);
			struct mtd_attempt *a;
			LIST_FOREACH(a, &call->attempts, call_link)
				ck_assert_ptr_nonnull(a->s.conn);
		}
		seam_run(s);
		ck_assert_uint_eq(seam_streams(s, EP_A), i + 1);
		ck_assert_uint_eq(seam_streams(s, EP_B), i + 1);
		ck_assert_uint_eq(seam_streams(s, EP_C), i + 1);
		struct seam_ss *first = seam_stream(s, 3 * i);
		seam_respond(s, first, 0, "won", 3);
		seam_run(s);
		expect_ok(cs, "won");
		for (unsigned k = 3 * i; k < 3 * i + 3; k++) {
			expect_request(seam_stream(s, k), "ping");
			if (seam_stream(s, k) != first)
				ck_assert_int_eq(seam_stream(s, k)->rst, NGHTTP2_CANCEL);
		}
	}
	ck_assert_uint_eq(seam_mx.hedges_started, 8);
	seam_free(s);
}
END_TEST

static uint32_t load_calls(struct seam *s)
{
	return atomic_load(&seam_worker(s)->rt->services[0]->load->calls);
}

/* An inbound peer's call to a service with circuit_breaker.max_calls is
 * counted once in the service's calls in flight, by the listener's
 * max_concurrent_calls and the circuit breaker alike, and given back once.
 * It was counted by each (inbound.c, then call.c, which also took a
 * second reference on the count and lost the first) and given back once:
 * every such call left one in the count for good, and the second of two
 * allowed calls was refused. */
START_TEST(inbound_call_under_a_circuit_breaker_is_counted_once)
{
	struct seam *s = seam_new("services:\n"
	                          "  - name: \"echo.Echo\"\n"
	                          "    endpoints: [" EPS_A "]\n"
	                          "    circuit_breaker: {max_calls: 2}\n");
	seam_client_inbound(s, 2);
	for (int round = 0; round < 2; round++) {
		struct seam_cs *one = unary(s, NULL, "one"), *two = unary(s, NULL, "two");
		seam_run(s);
		ck_assert(!one->closed && !two->closed); /* both allowed */
		ck_assert_uint_eq(seam_streams(s, NULL), 2 * (unsigned)(round + 1));
		ck_assert_uint_eq(load_calls(s), 2); /* both in flight, once each */
		ck_assert_uint_eq(seam_mx.circuit_rejected, 0);
		/* A third is past both limits. */
		struct seam_cs *three = unary(s, NULL, "three");
		seam_run(s);
		expect_status(three, 8); /* RESOURCE_EXHAUSTED */
		ck_assert_uint_eq(load_calls(s), 2);
		unsigned n = seam_streams(s, NULL);
		seam_respond(s, seam_stream(s, n - 2), 0, "ok", 2);
		seam_respond(s, seam_stream(s, n - 1), 0, "ok", 2);
		seam_run(s);
		expect_ok(one, "ok");
		expect_ok(two, "ok");
		ck_assert_uint_eq(load_calls(s), 0); /* every count given back */
	}
	seam_free(s);
}
END_TEST

/* ---- the downstream port (io/downstream-t.h, call/down_port.c) ----------------- */

/* A call's figures (access log, /metrics, its circuit count) are out
 * before maitred writes its answer's end: a client told of the end may
 * look at once. The stream closes as its trailers are serialized, in the
 * flush, just before the write; the engine's side of that close waits
 * for the ready list, after the write, but the figures may not. */
START_TEST(a_calls_figures_are_out_before_its_answer_is_written)
{
	struct seam *s = seam_new(config(EPS_A, NULL));
	struct seam_cs *cs = unary(s, NULL, "ping");
	seam_run(s);
	seam_respond(s, seam_stream(s, 0), 0, "pong", 4);
	seam_run(s);
	expect_ok(cs, "pong");
	ck_assert_uint_eq(seam_mx.ended, 1);
	ck_assert_uint_eq(seam_mx.ended_at_client_write, 1);
	seam_free(s);
}
END_TEST

/* The client's reset arrives while the call waits on the worker's ready
 * list (its first attempt's connect was refused at once): the port records
 * the close (the call's client is gone, the call still held) and the engine
 * learns it at the end of the turn, not on nghttp2's callback's stack; the
 * attempt due is never started. */
START_TEST(a_client_reset_while_the_call_waits_on_the_ready_list)
{
	struct seam *s = refusing_service(2, NULL);
	struct seam_cs *cs = unary(s, NULL, "ping");
	seam_deliver_client(s); /* the HEADERS: the call starts, its connect is refused */
	struct mtd_call *call = seam_call_of(s, cs);
	ck_assert_ptr_nonnull(call);
	ck_assert(call->next_due); /* its next attempt waits for the end of the turn */
	unsigned connects = seam_ep_connects(s, "10.0.1.0:50051") + seam_ep_connects(s, "10.0.1.1:50051");
	ck_assert_uint_eq(connects, 1);
	seam_cancel(s, cs);
	seam_deliver_client(s); /* the RST_STREAM, in the same turn */
	ck_assert(seam_block_live(call));
	ck_assert_ptr_null(call->down);     /* the stream is gone ... */
	ck_assert_uint_ne(call->down_closed, 0);
	ck_assert_int_ne(call->state, MTD_CALL_DONE); /* ... the engine has not run on its stack */
	ck_assert(call->next_due);
	seam_end_turn(s);
	seam_run(s);
	/* The close came first: no other endpoint was tried for a call whose
	 * client had gone. */
	connects = seam_ep_connects(s, "10.0.1.0:50051") + seam_ep_connects(s, "10.0.1.1:50051");
	ck_assert_uint_eq(connects, 1);
	ck_assert_uint_eq(seam_mx.ended, 1);
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

/* The client resets a call waiting in the pool of an endpoint a reload
 * then removes, both in one turn: the waiting attempt is rerouted (the
 * pool retires) after the close was recorded and before the engine
 * learned it. No attempt is born for a call whose client has gone: the
 * new snapshot's endpoint is never asked. */
START_TEST(a_reroute_after_the_clients_close_starts_nothing)
{
	struct seam *s = seam_new(config(EPS_A, NULL));
	seam_ep_mode(s, EP_A, SEAM_EP_SILENT); /* the attempt waits in A's pool */
	struct seam_cs *cs = unary(s, NULL, "ping");
	seam_run(s);
	ck_assert_uint_eq(seam_ep_connects(s, EP_A), 1);
	seam_cancel(s, cs);
	seam_deliver_client(s); /* the RST_STREAM: recorded, the turn goes on */
	seam_reload(s, config(EPS_B, NULL)); /* A's pool retires: its waiting attempt reroutes */
	seam_end_turn(s);
	seam_run(s);
	ck_assert_uint_eq(seam_ep_connects(s, EP_B), 0);
	ck_assert_uint_eq(seam_mx.ended, 1);
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

/* An inbound peer's call that authorization denies: PERMISSION_DENIED,
 * nothing upstream, counted as denied. The client goes on sending (DATA,
 * then trailers: a HEADERS block after the call failed) and then its
 * connection goes: each event reaches a call that is over and changes
 * nothing, and everything comes back. */
START_TEST(an_inbound_call_denied_then_data_trailers_and_the_client_gone)
{
	struct seam *s = seam_new("services:\n"
	                          "  - name: \"echo.Echo\"\n"
	                          "    endpoints: [" EPS_A "]\n");
	seam_client_inbound_authz(s, 4, true);
	uint8_t m[64];
	size_t n = seam_grpc_msg(m, "ping", 4);
	struct seam_cs *cs = seam_call(s, PATH, NULL, m, n, false);
	seam_run(s);
	/* Answered (Trailers-Only, END_STREAM), its request half still open. */
	ck_assert_int_eq(cs->status, 7); /* PERMISSION_DENIED */
	ck_assert(cs->ended && !cs->closed);
	ck_assert_msg(strstr(cs->message, "without a certificate"), "%s", cs->message);
	ck_assert_uint_eq(seam_streams(s, NULL), 0);
	ck_assert_uint_eq(seam_mx.routed, 1); /* its figures name the method */
	struct mtd_call *call = seam_call_of(s, cs);
	ck_assert_ptr_nonnull(call); /* held by its stream, whose client half is open */
	ck_assert_uint_eq(call->verdict, MTD_IN_DENIED);
	ck_assert_int_eq(call->state, MTD_CALL_DONE);
	seam_send_trailers(s, cs, m, n);
	seam_run(s);
	expect_status(cs, 7); /* closed now, no RST_STREAM */
	ck_assert_ptr_null(seam_call_of(s, cs)); /* both halves closed: released */
	ck_assert_uint_eq(load_calls(s), 0);
	/* Another, then the connection goes with it open. */
	struct seam_cs *two = seam_call(s, PATH, NULL, m, n, false);
	seam_run(s);
	ck_assert_int_eq(two->status, 7);
	call = seam_call_of(s, two);
	ck_assert_ptr_nonnull(call);
	seam_client_gone(s);
	ck_assert(seam_block_live(call));
	ck_assert_ptr_null(call->down);
	ck_assert_uint_eq(call->down_closed, NGHTTP2_CANCEL + 1);
	seam_end_turn(s);
	seam_run(s);
	ck_assert_uint_eq(seam_mx.ended, 2);
	ck_assert_uint_eq(seam_streams(s, NULL), 0);
	ck_assert_uint_eq(load_calls(s), 0);
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

/* An inbound call allowed, in flight upstream, when the client's
 * connection goes: the port records it, the end of the turn cancels the
 * upstream stream, and its count in max_concurrent_calls goes back. */
START_TEST(an_inbound_call_in_flight_when_the_client_goes)
{
	struct seam *s = seam_new("services:\n"
	                          "  - name: \"echo.Echo\"\n"
	                          "    endpoints: [" EPS_A "]\n");
	seam_client_inbound(s, 1);
	struct seam_cs *cs = unary(s, NULL, "ping");
	seam_run(s);
	ck_assert_uint_eq(seam_streams(s, NULL), 1);
	ck_assert_uint_eq(load_calls(s), 1);
	struct mtd_call *call = seam_call_of(s, cs);
	ck_assert_ptr_nonnull(call);
	ck_assert_uint_eq(call->verdict, MTD_IN_ALLOWED);
	seam_client_gone(s);
	ck_assert_ptr_null(seam_call_of(s, cs));
	seam_end_turn(s);
	seam_run(s);
	ck_assert_int_eq(seam_stream(s, 0)->rst, NGHTTP2_CANCEL);
	ck_assert_uint_eq(load_calls(s), 0);
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

/* ---- the ready list's window, attacked (a client's close recorded, the
 * engine's side not yet run: whatever else the same turn brings) ---------- */

/* The client resets a call waiting in a pool, and its deadline passes in
 * the same turn, before the engine learned of the close: the deadline
 * fails a call whose client is gone; the close then finds it over. One
 * end, nothing left. */
START_TEST(a_client_reset_then_its_deadline_in_one_turn)
{
	struct seam *s = seam_new(config(EPS_A, NULL));
	seam_ep_mode(s, EP_A, SEAM_EP_SILENT);
	struct seam_cs *cs = unary(s, "100m", "ping");
	seam_run(s);
	struct mtd_pool *p = seam_pool(s, EP_A);
	ck_assert_uint_eq(p->n_pending, 1);
	seam_cancel(s, cs);
	seam_deliver_client(s);
	seam_timers_mid_turn(s, 101); /* the deadline, in the same turn */
	seam_end_turn(s);
	seam_run(s);
	ck_assert_uint_eq(p->n_pending, 0);
	ck_assert_uint_eq(seam_mx.ended, 1);
	ck_assert_uint_eq(seam_worker(s)->timers.n, 0);
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

/* The client resets a call and its endpoint's whole answer is read in the
 * same turn: relayed to nobody (the client's stream is gone), one end. */
START_TEST(a_client_reset_then_its_answer_in_one_turn)
{
	struct seam *s = seam_new(config(EPS_A, NULL));
	struct seam_cs *cs = unary(s, NULL, "ping");
	seam_run(s);
	struct seam_ss *ss = seam_stream(s, 0);
	ck_assert_ptr_nonnull(ss);
	seam_respond(s, ss, 0, "pong", 4);
	seam_cancel(s, cs);
	seam_deliver_client(s); /* the RST_STREAM: recorded */
	seam_deliver(s, ss);    /* the answer, whole: the call's client is gone */
	seam_end_turn(s);
	seam_run(s);
	ck_assert(ss->closed);
	ck_assert_uint_eq(cs->data.len, 0);
	ck_assert_uint_eq(seam_mx.ended, 1);
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

/* The call's answer is complete (its endpoint's trailers read, the
 * client's data provider not yet run: nothing written) when the client's
 * reset arrives in the same turn: its figures come out once, nothing is
 * left. */
START_TEST(an_answer_complete_then_the_client_reset_before_the_flush)
{
	struct seam *s = seam_new(config(EPS_A, NULL));
	struct seam_cs *cs = unary(s, NULL, "ping");
	seam_run(s);
	struct seam_ss *ss = seam_stream(s, 0);
	seam_respond(s, ss, 0, "pong", 4);
	seam_deliver(s, ss); /* the answer, whole, submitted downstream */
	struct mtd_call *call = seam_call_of(s, cs);
	ck_assert_ptr_nonnull(call);
	ck_assert(call->resp_eof);
	seam_cancel(s, cs);
	seam_deliver_client(s); /* the reset, before the flush */
	seam_end_turn(s);
	seam_run(s);
	ck_assert_uint_eq(seam_mx.ended, 1);
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

/* FAILOVER: the first attempt failed, the retry waits for its backoff;
 * the client resets and the backoff ends in the same turn: no retry for
 * a call whose client is gone. */
START_TEST(a_client_reset_then_its_retry_backoff_in_one_turn)
{
	struct seam *s = seam_new(config(EPS_AB, "mode: FAILOVER, retries: 2, backoff: {base: 10ms, max: 10ms}"));
	struct seam_cs *cs = unary(s, NULL, "ping");
	seam_run(s);
	ck_assert_uint_eq(seam_streams(s, NULL), 1);
	seam_trailers_only(s, seam_stream(s, 0), 14); /* UNAVAILABLE: retried */
	seam_run(s);
	ck_assert_uint_eq(seam_streams(s, NULL), 1); /* the backoff */
	seam_cancel(s, cs);
	seam_deliver_client(s);
	seam_timers_mid_turn(s, 11); /* the backoff ends, same turn */
	seam_end_turn(s);
	seam_run(s);
	ck_assert_uint_eq(seam_streams(s, NULL), 1);
	ck_assert_uint_eq(seam_mx.ended, 1);
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

/* FORKING: the first fork runs, the hedge is due after 50 ms; the client
 * resets and the hedge delay ends in the same turn: no fork is born. */
START_TEST(a_client_reset_then_its_hedge_in_one_turn)
{
	struct seam *s = seam_new(config(EPS_AB, "mode: FORKING, forks: 2, hedge_delay: 50ms"));
	struct seam_cs *cs = unary(s, NULL, "ping");
	seam_run(s);
	ck_assert_uint_eq(seam_streams(s, NULL), 1);
	seam_cancel(s, cs);
	seam_deliver_client(s);
	seam_timers_mid_turn(s, 51);
	seam_end_turn(s);
	seam_run(s);
	ck_assert_uint_eq(seam_streams(s, NULL), 1);
	ck_assert_int_eq(seam_stream(s, 0)->rst, NGHTTP2_CANCEL);
	ck_assert_uint_eq(seam_mx.ended, 1);
	ck_assert_uint_eq(seam_mx.hedges_started, 0);
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

/* The client's connection goes with calls in several states: one in
 * flight upstream, one whose answer is complete and not written, one
 * waiting for a connection (a silent endpoint), one reset by the client
 * in the same turn. Each ends once; nothing is left. */
START_TEST(the_client_gone_with_calls_in_every_state)
{
	struct seam *s = seam_new("services:\n"
	                          "  - name: \"echo.Echo\"\n"
	                          "    endpoints: [" EPS_A "]\n"
	                          "  - name: \"other.Other\"\n"
	                          "    endpoints: [" EPS_B "]\n");
	seam_ep_mode(s, EP_B, SEAM_EP_SILENT);
	struct seam_cs *flying = unary(s, NULL, "one");
	struct seam_cs *answered = unary(s, NULL, "two");
	uint8_t m[64];
	size_t n = seam_grpc_msg(m, "three", 5);
	struct seam_cs *waiting = seam_call(s, "/other.Other/Unary", NULL, m, n, true);
	struct seam_cs *reset = unary(s, NULL, "four");
	seam_run(s);
	ck_assert_uint_eq(seam_streams(s, NULL), 3);
	struct seam_ss *ss_answered = NULL;
	for (unsigned i = 0; seam_stream(s, i); i++)
		if (seam_stream(s, i)->req.len == seam_grpc_msg(m, "two", 3))
			ss_answered = seam_stream(s, i);
	ck_assert_ptr_nonnull(ss_answered);
	seam_respond(s, ss_answered, 0, "owt", 3);
	seam_deliver(s, ss_answered);
	struct mtd_call *calls[3] = {seam_call_of(s, flying), seam_call_of(s, answered), seam_call_of(s, waiting)};
	seam_cancel(s, reset);
	seam_deliver_client(s);
	seam_client_gone(s);
	/* No engine on io/'s stack: each close is recorded, none run yet (the
	 * calls in flight and waiting still have their attempts). */
	for (unsigned i = 0; i < 3; i++) {
		ck_assert(seam_block_live(calls[i]));
		ck_assert_ptr_null(calls[i]->down);
		ck_assert_uint_eq(calls[i]->down_closed, NGHTTP2_CANCEL + 1);
		ck_assert(calls[i]->next_due);
	}
	ck_assert_int_ne(calls[0]->state, MTD_CALL_DONE);
	ck_assert_int_eq(n_attempts(calls[0]), 1);
	ck_assert_int_eq(n_attempts(calls[2]), 1);
	seam_end_turn(s);
	seam_run(s);
	(void)flying;
	(void)answered;
	(void)waiting;
	ck_assert_uint_eq(seam_mx.ended, 4);
	for (unsigned i = 0; seam_stream(s, i); i++)
		ck_assert(seam_stream(s, i)->closed);
	ck_assert_uint_eq(seam_pool(s, EP_B)->n_pending, 0);
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

/* An inbound peer with max_concurrent_calls 1: one call in flight, the
 * next shed (RESOURCE_EXHAUSTED, its request half still open), then the
 * connection goes: each ends once, the count goes back to 0. */
START_TEST(an_inbound_call_shed_then_the_client_gone)
{
	struct seam *s = seam_new("services:\n"
	                          "  - name: \"echo.Echo\"\n"
	                          "    endpoints: [" EPS_A "]\n");
	seam_client_inbound(s, 1);
	struct seam_cs *one = unary(s, NULL, "ping");
	seam_run(s);
	ck_assert_uint_eq(load_calls(s), 1);
	uint8_t m[64];
	size_t n = seam_grpc_msg(m, "ping", 4);
	struct seam_cs *two = seam_call(s, PATH, NULL, m, n, false);
	seam_run(s);
	ck_assert_int_eq(two->status, 8); /* RESOURCE_EXHAUSTED */
	ck_assert_uint_eq(load_calls(s), 1);
	seam_send(s, two, m, n, false); /* more DATA on a shed call */
	seam_deliver_client(s);
	seam_client_gone(s);
	seam_end_turn(s);
	seam_run(s);
	(void)one;
	ck_assert_uint_eq(load_calls(s), 0);
	ck_assert_uint_eq(seam_mx.ended, 2);
	ck_assert_int_eq(seam_stream(s, 0)->rst, NGHTTP2_CANCEL);
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

/* The worker stops (mtd_worker_close_all, as mtd_worker_free runs it when
 * its loop ended between an event and the end of its turn) with a call on
 * the ready list (its next attempt due, its first connect refused) and
 * another whose client's reset is recorded: neither starts an attempt,
 * each ends once, everything comes back. */
START_TEST(the_worker_stops_with_calls_on_the_ready_list)
{
	struct seam *s = refusing_service(3, NULL);
	struct seam_cs *due = unary(s, NULL, "one");
	struct seam_cs *reset = unary(s, NULL, "two");
	seam_deliver_client(s); /* both start; each connect is refused at once */
	struct mtd_call *a = seam_call_of(s, due), *b = seam_call_of(s, reset);
	ck_assert(a->next_due && b->next_due);
	seam_cancel(s, reset);
	seam_deliver_client(s);
	ck_assert_uint_ne(b->down_closed, 0);
	unsigned connects = 0;
	for (unsigned i = 0; i < 3; i++) {
		char addr[32];
		snprintf(addr, sizeof(addr), "10.0.1.%u:50051", i);
		connects += seam_ep_connects(s, addr);
	}
	ck_assert_uint_eq(connects, 2);
	mtd_worker_close_all(seam_worker(s)); /* mid-turn: the list is not run yet */
	unsigned after = 0;
	for (unsigned i = 0; i < 3; i++) {
		char addr[32];
		snprintf(addr, sizeof(addr), "10.0.1.%u:50051", i);
		after += seam_ep_connects(s, addr);
	}
	ck_assert_uint_eq(after, 2);
	ck_assert_uint_eq(seam_mx.ended, 2);
	ck_assert_uint_eq(seam_worker(s)->n_ready, 0);
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

/* FAILBACK: the client resets its call, and its attempt fails in the same
 * turn, before the engine learned of the close. A call whose client has
 * gone has nobody to answer and nothing to re-send for: no background
 * copy is queued (with the close run first, the attempt was cancelled and
 * never failed). */
START_TEST(a_client_reset_then_a_failback_failure_in_one_turn)
{
	struct seam *s = seam_new(config(EPS_A, FAILBACK));
	struct seam_cs *cs = unary(s, NULL, "fire");
	seam_run(s);
	struct seam_ss *ss = seam_stream(s, 0);
	ck_assert_ptr_nonnull(ss);
	seam_cancel(s, cs);
	seam_deliver_client(s); /* the reset: recorded */
	seam_reset(s, ss, NGHTTP2_INTERNAL_ERROR);
	seam_deliver(s, ss); /* the attempt fails, same turn */
	seam_end_turn(s);
	seam_run(s);
	ck_assert_uint_eq(seam_worker(s)->n_bg, 0);
	seam_advance_ms(s, 20);
	ck_assert_uint_eq(seam_mx.failback_started, 0);
	ck_assert_uint_eq(seam_streams(s, NULL), 1);
	ck_assert_uint_eq(seam_mx.ended, 1);
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

/* circuit_breaker.max_calls 1: one call in flight, the next refused
 * (RESOURCE_EXHAUSTED) while its client keeps its request half open. The
 * refused call is over: it is not counted in flight, and once the first
 * ends a new call goes through though the refused one's stream is still
 * open. */
START_TEST(a_call_refused_at_max_calls_with_its_request_open_is_not_in_flight)
{
	struct seam *s = seam_new("services:\n"
	                          "  - name: \"echo.Echo\"\n"
	                          "    endpoints: [" EPS_A "]\n"
	                          "    circuit_breaker: {max_calls: 1}\n");
	struct seam_cs *one = unary(s, NULL, "one");
	seam_run(s);
	ck_assert_uint_eq(load_calls(s), 1);
	uint8_t m[64];
	size_t n = seam_grpc_msg(m, "two", 3);
	struct seam_cs *two = seam_call(s, PATH, NULL, m, n, false);
	seam_run(s);
	ck_assert_int_eq(two->status, 8); /* RESOURCE_EXHAUSTED */
	ck_assert(!two->closed);         /* its request half is open */
	ck_assert_uint_eq(load_calls(s), 1);
	seam_respond(s, seam_stream(s, 0), 0, "eno", 3);
	seam_run(s);
	expect_ok(one, "eno");
	ck_assert_uint_eq(load_calls(s), 0);
	struct seam_cs *three = unary(s, NULL, "three");
	seam_run(s);
	ck_assert_uint_eq(seam_streams(s, NULL), 2); /* not refused */
	seam_respond(s, seam_stream(s, 1), 0, "eerht", 5);
	seam_run(s);
	expect_ok(three, "eerht");
	seam_send(s, two, NULL, 0, true); /* the refused call's client ends its half */
	seam_run(s);
	expect_status(two, 8);
	ck_assert_uint_eq(seam_mx.circuit_rejected, 1);
	ck_assert_uint_eq(seam_mx.ended, 3);
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

/* A reload in the turn a call waits on the ready list (its first connect
 * refused at once, its next attempt due): the old endpoints are gone, so
 * the due attempt goes to the new snapshot's endpoint, which answers. */
START_TEST(a_reload_while_a_call_waits_on_the_ready_list)
{
	struct seam *s = refusing_service(2, NULL);
	struct seam_cs *cs = unary(s, NULL, "ping");
	seam_deliver_client(s);
	struct mtd_call *call = seam_call_of(s, cs);
	ck_assert(call->next_due);
	seam_reload(s, config(EPS_B, NULL)); /* the refusing pools retire */
	seam_end_turn(s);
	seam_run(s);
	struct seam_ss *ss = seam_stream(s, 0);
	ck_assert_ptr_nonnull(ss);
	ck_assert_str_eq(ss->ep, EP_B);
	seam_respond(s, ss, 0, "pong", 4);
	seam_run(s);
	expect_ok(cs, "pong");
	ck_assert_uint_eq(seam_mx.ended, 1);
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

/* FAILOVER over A and B: the first attempt fails, its retry waits for the
 * backoff; a reload replaces both endpoints by C meanwhile. The retry goes
 * to C: no endpoint the reload removed is asked (the one not tried yet
 * had no pool to retire). */
START_TEST(an_endpoint_removed_while_a_retry_waits_for_its_backoff)
{
	struct seam *s = seam_new(config(EPS_AB, "mode: FAILOVER, retries: 2, backoff: {base: 10ms, max: 10ms}"));
	struct seam_cs *cs = unary(s, NULL, "ping");
	seam_run(s);
	ck_assert_uint_eq(seam_streams(s, NULL), 1);
	seam_trailers_only(s, seam_stream(s, 0), 14);
	seam_run(s);
	ck_assert_uint_eq(seam_streams(s, NULL), 1); /* the backoff */
	seam_reload(s, config("{address: \"" EP_C "\"}", "mode: FAILOVER, retries: 2, backoff: {base: 10ms, max: 10ms}"));
	seam_run(s);
	seam_advance_ms(s, 11);
	ck_assert_uint_eq(seam_ep_connects(s, EP_A) + seam_ep_connects(s, EP_B), 1);
	struct seam_ss *ss = seam_stream(s, 1);
	ck_assert_ptr_nonnull(ss);
	ck_assert_str_eq(ss->ep, EP_C);
	seam_respond(s, ss, 0, "pong", 4);
	seam_run(s);
	expect_ok(cs, "pong");
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

/* FAILOVER: the first attempt failed, its retry waits for a long backoff;
 * the client resets. The call is over at once: its figures and access
 * line come out and it is freed at the end of that turn, not when the
 * backoff would have ended. */
START_TEST(a_client_reset_while_a_retry_waits_for_its_backoff_ends_the_call_at_once)
{
	struct seam *s = seam_new(config(EPS_AB, "mode: FAILOVER, retries: 2, backoff: {base: 5s, max: 5s}"));
	struct seam_cs *cs = unary(s, NULL, "ping");
	seam_run(s);
	seam_trailers_only(s, seam_stream(s, 0), 14);
	seam_run(s);
	ck_assert_uint_eq(seam_streams(s, NULL), 1); /* the backoff */
	seam_cancel(s, cs);
	seam_run(s);
	ck_assert_uint_eq(seam_mx.ended, 1);
	ck_assert_uint_eq(seam_worker(s)->timers.n, 0);
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

/* ---- waiting for a first endpoint set (call/park.c) ------------------------- */

/* echo.Echo fed by a source (DNS) that has not answered: the seam starts
 * no source, the test answers for it (seam_set_endpoints). */
static const char *awaiting_config(const char *initial_wait)
{
	static char buf[512];
	snprintf(buf, sizeof(buf),
	         "services:\n"
	         "  - name: \"echo.Echo\"\n"
	         "    discovery: {dns: {name: a.example, port: 50051}%s%s}\n"
	         "  - name: \"other.Other\"\n"
	         "    endpoints: [" EPS_B "]\n",
	         initial_wait ? ", initial_wait: " : "", initial_wait ? initial_wait : "");
	return buf;
}

static const char *const ONLY_A[] = {EP_A};

START_TEST(a_parked_call_proceeds_on_the_first_set)
{
	struct seam *s = seam_new(awaiting_config(NULL));
	struct mtd_worker *w = seam_worker(s);
	struct seam_cs *cs = seam_call(s, PATH, NULL, NULL, 0, false);
	seam_run(s);
	struct mtd_call *call = seam_call_of(s, cs);
	ck_assert_ptr_nonnull(call);
	ck_assert_int_eq(call->state, MTD_CALL_PARKED);
	ck_assert_uint_eq(w->n_parked, 1);
	ck_assert_uint_eq(seam_mx.parked, 1);
	ck_assert_uint_eq(seam_mx.policy_by[MTD_MX_FIRST_WAITED], 1);
	ck_assert(!cs->closed);
	/* The body that comes meanwhile is held, not consumed. */
	uint8_t m[256];
	size_t n = seam_grpc_msg(m, "ping", 4);
	seam_send(s, cs, m, n, true);
	seam_run(s);
	ck_assert_uint_eq(call->req.len, n);
	ck_assert_uint_eq(call->req_unconsumed, n);
	ck_assert_uint_eq(seam_streams(s, NULL), 0);
	/* The first set: the call goes on, on the new snapshot, at the end of
	 * the swap's turn (the ready list). */
	seam_set_endpoints(s, 0, ONLY_A, 1);
	ck_assert_uint_eq(w->n_parked, 0);
	ck_assert_uint_eq(seam_mx.parked, 0);
	ck_assert_int_eq(call->state, MTD_CALL_RUNNING);
	ck_assert_ptr_eq(call->hold->rt, w->rt);
	ck_assert(call->next_due);
	ck_assert_uint_eq(call->tried_inline, 0); /* the list's link, cleared */
	seam_run(s);
	struct seam_ss *ss = seam_stream(s, 0);
	ck_assert_ptr_nonnull(ss);
	ck_assert_str_eq(ss->ep, EP_A);
	expect_request(ss, "ping");
	seam_respond(s, ss, 0, "pong", 4);
	seam_run(s);
	expect_ok(cs, "pong");
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

/* A call waiting for the xDS listener's first routes (no service yet)
 * holds the snapshot in force, not the one it came on, across the swaps
 * of its wait; at xds.initial_wait it goes by its :path. */
START_TEST(a_call_waiting_for_routes_holds_the_current_snapshot)
{
	struct seam *s = seam_new("xds: {server: \"127.0.0.1:9\", listener: lis, initial_wait: 2s}\n"
	                          "services:\n"
	                          "  - name: \"echo.Echo\"\n"
	                          "    endpoints: [" EPS_A "]\n"
	                          "  - name: \"other.Other\"\n"
	                          "    discovery: {dns: {name: a.example, port: 50051}}\n");
	struct mtd_worker *w = seam_worker(s);
	struct seam_cs *cs = seam_call(s, PATH, NULL, NULL, 0, false);
	seam_run(s);
	struct mtd_call *call = seam_call_of(s, cs);
	ck_assert_ptr_nonnull(call);
	ck_assert_int_eq(call->state, MTD_CALL_PARKED);
	ck_assert_ptr_null(call->svc);
	ck_assert_uint_eq(w->n_parked, 1);
	const struct mtd_runtime *first = w->rt;
	/* Another service's set: a swap, the routes still awaited. */
	seam_set_endpoints(s, 1, ONLY_A, 1);
	ck_assert_ptr_ne(w->rt, first);
	ck_assert_int_eq(call->state, MTD_CALL_PARKED);
	ck_assert_ptr_eq(call->hold->rt, w->rt);
	/* The wait runs out: routed by :path, to echo.Echo's endpoint. */
	uint8_t m[256];
	size_t n = seam_grpc_msg(m, "ping", 4);
	seam_send(s, cs, m, n, true);
	seam_advance_ms(s, 2001);
	seam_run(s);
	ck_assert_uint_eq(w->n_parked, 0);
	struct seam_ss *ss = seam_stream(s, 0);
	ck_assert_ptr_nonnull(ss);
	ck_assert_str_eq(ss->ep, EP_A);
	expect_request(ss, "ping");
	seam_respond(s, ss, 0, "pong", 4);
	seam_run(s);
	expect_ok(cs, "pong");
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

START_TEST(a_parked_call_ends_at_its_deadline_naming_the_wait)
{
	struct seam *s = seam_new(awaiting_config(NULL));
	struct seam_cs *cs = unary(s, "100m", "ping");
	seam_run(s);
	ck_assert_uint_eq(seam_worker(s)->n_parked, 1);
	seam_advance_ms(s, 99);
	ck_assert(!cs->closed);
	seam_advance_ms(s, 1);
	expect_status(cs, 4); /* DEADLINE_EXCEEDED */
	ck_assert_ptr_nonnull(strstr(cs->message, "waiting for the first endpoints of service echo.Echo"));
	ck_assert_ptr_nonnull(strstr(cs->message, "waiting for the first DNS answer"));
	ck_assert_uint_eq(seam_worker(s)->n_parked, 0);
	ck_assert_uint_eq(seam_mx.policy_by[MTD_MX_FIRST_WAIT_EXPIRED], 1);
	/* The set later reaches nobody. */
	seam_set_endpoints(s, 0, ONLY_A, 1);
	seam_run(s);
	ck_assert_uint_eq(seam_streams(s, NULL), 0);
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

START_TEST(initial_wait_bounds_a_longer_deadline_and_a_set_in_time_restores_it)
{
	struct seam *s = seam_new(awaiting_config("50ms"));
	struct seam_cs *late = unary(s, "10S", "late");
	seam_run(s);
	seam_advance_ms(s, 50);
	expect_status(late, 14); /* UNAVAILABLE at the bound, not the deadline */
	ck_assert_ptr_nonnull(strstr(late->message, "discovery.initial_wait"));
	ck_assert_ptr_nonnull(strstr(late->message, "waiting for the first DNS answer"));
	/* One in time: its deadline (200 ms) is its own again once it goes on. */
	struct seam_cs *cs = unary(s, "200m", "ping");
	seam_run(s);
	struct mtd_call *call = seam_call_of(s, cs);
	seam_advance_ms(s, 10);
	seam_set_endpoints(s, 0, ONLY_A, 1);
	seam_run(s);
	ck_assert_int_eq(call->deadline.at_ns, call->deadline_ns);
	seam_advance_ms(s, 100); /* past where the wait would have ended */
	ck_assert(!cs->closed);
	seam_advance_ms(s, 90);
	expect_status(cs, 4);
	ck_assert_ptr_nonnull(strstr(cs->message, "deadline exceeded (200 ms)"));
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

START_TEST(an_empty_answer_or_a_sources_error_ends_the_wait_with_its_reason)
{
	struct seam *s = seam_new(awaiting_config(NULL));
	struct seam_cs *a = unary(s, NULL, "a");
	seam_run(s);
	/* Still waiting, in other words: the calls wait on. */
	seam_set_unavailable(s, 0, "waiting for something else", true);
	seam_run(s);
	ck_assert(!a->closed);
	ck_assert_uint_eq(seam_worker(s)->n_parked, 1);
	/* An error: an answer. */
	seam_set_unavailable(s, 0, "dns: a.example has no address: nope", false);
	seam_run(s);
	expect_status(a, 14);
	ck_assert_ptr_nonnull(strstr(a->message, "dns: a.example has no address: nope"));
	/* Later calls fail at once. */
	struct seam_cs *b = unary(s, NULL, "b");
	seam_run(s);
	expect_status(b, 14);
	ck_assert_uint_eq(seam_mx.policy_by[MTD_MX_FIRST_WAITED], 1);
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);

	/* An empty set is an answer too. */
	s = seam_new(awaiting_config(NULL));
	a = unary(s, NULL, "a");
	seam_run(s);
	seam_set_endpoints(s, 0, NULL, 0);
	seam_run(s);
	expect_status(a, 14);
	ck_assert_ptr_nonnull(strstr(a->message, "service echo.Echo has no endpoint"));
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);

	/* initial_wait 0: no wait at all. */
	s = seam_new(awaiting_config("0s"));
	a = unary(s, NULL, "a");
	seam_run(s);
	expect_status(a, 14);
	ck_assert_ptr_nonnull(strstr(a->message, "waiting for the first DNS answer"));
	ck_assert_uint_eq(seam_mx.policy_by[MTD_MX_FIRST_WAITED], 0);
	seam_free(s);
}
END_TEST

START_TEST(a_parked_call_cancelled_or_gone_is_freed_and_never_woken)
{
	struct seam *s = seam_new(awaiting_config(NULL));
	struct seam_cs *a = unary(s, "1S", "a");
	struct seam_cs *b = seam_call(s, PATH, NULL, NULL, 0, false);
	seam_run(s);
	ck_assert_uint_eq(seam_worker(s)->n_parked, 2);
	seam_cancel(s, a);
	seam_run(s);
	ck_assert_ptr_null(seam_call_of(s, a));
	ck_assert_uint_eq(seam_worker(s)->n_parked, 1);
	ck_assert_uint_eq(seam_worker(s)->timers.n, 1); /* b's wait (initial_wait), a's deadline gone */
	/* The client's connection goes, and the first set comes, in one turn:
	 * the close is due at the turn's end, the swap starts nothing for it. */
	seam_client_gone(s);
	seam_set_endpoints(s, 0, ONLY_A, 1);
	seam_end_turn(s);
	ck_assert_uint_eq(seam_worker(s)->n_parked, 0);
	ck_assert_uint_eq(seam_mx.parked, 0);
	seam_run(s);
	ck_assert_uint_eq(seam_streams(s, NULL), 0);
	ck_assert_uint_eq(seam_live_blocks(), 0);
	(void)b;
	seam_free(s);
}
END_TEST

START_TEST(a_reload_without_the_service_or_a_drain_ends_the_parked_calls)
{
	struct seam *s = seam_new(awaiting_config(NULL));
	struct seam_cs *a = unary(s, NULL, "a");
	seam_run(s);
	/* A reload that keeps the service (same source): waits on. */
	seam_reload(s, awaiting_config(NULL));
	seam_run(s);
	ck_assert(!a->closed);
	ck_assert_uint_eq(seam_worker(s)->n_parked, 1);
	seam_reload(s, config(EPS_B, NULL) /* echo.Echo static now: proceeds */);
	seam_run(s);
	ck_assert_uint_eq(seam_worker(s)->n_parked, 0);
	struct seam_ss *ss = seam_stream(s, 0);
	ck_assert_ptr_nonnull(ss);
	ck_assert_str_eq(ss->ep, EP_B);
	seam_respond(s, ss, 0, "pong", 4);
	seam_run(s);
	expect_ok(a, "pong");
	/* Removed: UNAVAILABLE at once. */
	seam_reload(s, awaiting_config(NULL));
	struct seam_cs *b = unary(s, NULL, "b");
	seam_run(s);
	ck_assert_uint_eq(seam_worker(s)->n_parked, 1);
	seam_reload(s, "services:\n"
	               "  - name: \"other.Other\"\n"
	               "    endpoints: [" EPS_B "]\n");
	seam_run(s);
	expect_status(b, 14);
	ck_assert_ptr_nonnull(strstr(b->message, "left maitred's config while the call waited"));
	/* A drain: the waiting calls end at once, new ones do not wait. */
	seam_reload(s, awaiting_config(NULL));
	struct seam_cs *c = unary(s, NULL, "c");
	seam_run(s);
	ck_assert_uint_eq(seam_worker(s)->n_parked, 1);
	seam_worker(s)->draining = true;
	mtd_call_parked_fail_all(seam_worker(s));
	seam_run(s);
	expect_status(c, 14);
	ck_assert_ptr_nonnull(strstr(c->message, "maitred is draining"));
	struct seam_cs *d = unary(s, NULL, "d");
	seam_run(s);
	expect_status(d, 14);
	ck_assert_ptr_nonnull(strstr(d->message, "maitred is draining"));
	ck_assert_uint_eq(seam_live_blocks(), 0);
	seam_free(s);
}
END_TEST

static Suite *call_suite(void)
{
	Suite *s = suite_create("call");
	TCase *tc = tcase_create("calls");
	tcase_add_test(tc, snapshot_zone_records_and_metadata);
	tcase_add_test(tc, unary_ok_through_one_attempt);
	tcase_add_test(tc, failover_after_a_reset_retries_on_the_other_endpoint);
	tcase_add_test(tc, per_try_timeout_then_retry);
	tcase_add_test(tc, forking_first_answer_wins_the_other_is_cancelled);
	tcase_add_test(tc, forking_auto_learns_the_first_attempt_a_hedge_beat);
	tcase_add_test(tc, forking_auto_learns_a_first_attempt_that_answered_and_no_client_cancel);
	tcase_add_test(tc, client_cancel_cancels_the_live_attempts);
	tcase_add_test(tc, deadline_exceeded_while_waiting_in_a_pool);
	tcase_add_test(tc, refused_stream_is_replayed_on_the_same_endpoint);
	tcase_add_test(tc, connect_failure_moves_the_call_to_another_endpoint);
	tcase_add_test(tc, broadcast_answers_once_every_endpoint_answered);
	tcase_add_test(tc, deadline_after_the_response_began_ends_with_trailers);
	tcase_add_test(tc, client_cancel_while_waiting_in_a_pool);
	tcase_add_test(tc, per_try_timeout_while_waiting_in_a_pool_retries_elsewhere);
	tcase_add_test(tc, reload_removing_the_endpoint_of_a_call_in_flight_lets_it_finish);
	tcase_add_test(tc, reload_turning_max_pending_on_counts_the_attempts_already_waiting);
	tcase_add_test(tc, client_reset_after_an_early_answer_cancels_the_open_request_upstream);
	suite_add_tcase(s, tc);

	tc = tcase_create("policy");
	tcase_add_test(tc, shadow_authority_suffixes_the_host_before_any_port);
	tcase_add_test(tc, mirror_copies_pass_the_mirror_entrys_rate_limit);
	tcase_add_test(tc, mirror_copies_pass_the_mirror_entrys_circuit_breaker);
	tcase_add_test(tc, reload_with_new_rate_limit_figures_mints_no_burst);
	suite_add_tcase(s, tc);

	tc = tcase_create("clocks");
	tcase_add_test(tc, a_retry_late_in_a_long_turn_forwards_its_whole_per_try_bound);
	tcase_add_test(tc, a_call_read_late_in_a_long_turn_keeps_its_whole_deadline);
	tcase_add_test(tc, an_attempt_picked_late_in_a_long_turn_is_charged_its_own_latency);
	tcase_add_test(tc, a_call_read_late_in_a_long_turn_takes_a_token_left_in_a_shared_rate_limit);
	tcase_add_test(tc, an_attempt_failing_late_in_a_long_turn_near_the_deadline_is_not_retried_past_it);
	tcase_add_test(tc, a_retry_due_late_in_a_long_turn_is_weighed_against_the_time_left_now);
	tcase_add_test(tc, a_call_read_late_in_a_long_turn_waits_for_routes_its_whole_deadline);
	tcase_add_test(tc, a_retry_late_in_a_long_turn_passes_over_an_endpoint_too_slow_for_the_time_left);
	tcase_add_test(tc, an_endpoint_whose_backoff_ran_out_late_in_a_long_turn_is_not_passed_over);
	tcase_add_test(tc, a_call_ending_in_the_turn_of_a_give_back_is_a_call_since);
	tcase_add_test(tc, calls_ended_by_their_connections_close_count_for_the_give_back);
	tcase_add_test(tc, calls_of_one_turn_start_apart_and_have_their_own_trace_ids);
	tcase_add_test(tc, calls_of_two_workers_starting_at_one_ns_have_their_own_trace_ids);
	tcase_add_test(tc, a_calls_trace_ids_stay_under_one_key_and_change_with_any_bit_of_it);
	tcase_add_test(tc, one_trace_id_does_not_give_away_another_calls);
	tcase_add_test(tc, trace_ids_of_calls_a_ns_apart_are_sampled_at_the_ratio);
	tcase_add_test(tc, wall_clock_step_back_does_not_hold_an_ejection);
	tcase_add_test(tc, wall_clock_step_back_does_not_stop_the_guard);
	suite_add_tcase(s, tc);

	tc = tcase_create("reroute");
	tcase_add_test(tc, reroute_endpoint_removed_while_waiting);
	suite_add_tcase(s, tc);

	tc = tcase_create("first_wait");
	tcase_add_test(tc, a_parked_call_proceeds_on_the_first_set);
	tcase_add_test(tc, a_call_waiting_for_routes_holds_the_current_snapshot);
	tcase_add_test(tc, a_parked_call_ends_at_its_deadline_naming_the_wait);
	tcase_add_test(tc, initial_wait_bounds_a_longer_deadline_and_a_set_in_time_restores_it);
	tcase_add_test(tc, an_empty_answer_or_a_sources_error_ends_the_wait_with_its_reason);
	tcase_add_test(tc, a_parked_call_cancelled_or_gone_is_freed_and_never_woken);
	tcase_add_test(tc, a_reload_without_the_service_or_a_drain_ends_the_parked_calls);
	suite_add_tcase(s, tc);

	tc = tcase_create("forking_commit");
	tcase_add_test(tc, forking_outgrown_request_after_the_newest_fork_failed_completes);
	tcase_add_test(tc, forking_outgrown_request_commits_to_the_sending_fork_not_a_newer_one_behind);
	suite_add_tcase(s, tc);

	tc = tcase_create("failback");
	tcase_add_test(tc, failback_copy_resent_after_its_snapshot_was_replaced);
	tcase_add_test(tc, failback_copy_of_a_removed_service_is_dropped);
	suite_add_tcase(s, tc);

	tc = tcase_create("submit_failures");
	tcase_add_test(tc, submit_response_failing_on_relayed_headers_resets_the_client);
	tcase_add_test(tc, submit_response_failing_on_our_own_status_resets_the_client);
	tcase_add_test(tc, submit_response_failing_on_a_failsafe_answer_resets_the_client);
	tcase_add_test(tc, submit_trailer_failing_resets_the_client);
	suite_add_tcase(s, tc);

	tc = tcase_create("found_by_the_seam");
	tcase_add_test(tc, failback_second_resend_of_a_removed_service);
	tcase_add_test(tc, reroute_to_a_removed_service_then_the_client_ends_later);
	suite_add_tcase(s, tc);

	tc = tcase_create("lifetime");
	tcase_add_test(tc, commit_cancels_forks_mid_callback_and_the_reap_frees_them);
	tcase_add_test(tc, second_reroute_fails_naming_the_cancelled_attempts_endpoint);
	tcase_add_test(tc, many_calls_every_block_back_after_the_reap);
	tcase_add_test(tc, worker_stop_with_calls_in_every_state);
	suite_add_tcase(s, tc);

	tc = tcase_create("seams");
	tcase_add_test(tc, failed_broadcast_leaves_its_client_connection_usable);
	tcase_add_test(tc, reset_towards_the_client_cancels_the_attempt_upstream);
	tcase_add_test(tc, connects_refused_at_once_do_not_nest);
	tcase_add_test(tc, old_forks_failure_after_a_reroute_marks_nothing_in_the_new_set);
	tcase_add_test(tc, forking_three_forks_all_leave_in_the_calls_first_step);
	tcase_add_test(tc, inbound_call_under_a_circuit_breaker_is_counted_once);
	tcase_add_test(tc, a_calls_figures_are_out_before_its_answer_is_written);
	tcase_add_test(tc, a_client_reset_while_the_call_waits_on_the_ready_list);
	tcase_add_test(tc, a_reroute_after_the_clients_close_starts_nothing);
	tcase_add_test(tc, an_inbound_call_denied_then_data_trailers_and_the_client_gone);
	tcase_add_test(tc, an_inbound_call_in_flight_when_the_client_goes);
	tcase_add_test(tc, a_client_reset_then_its_deadline_in_one_turn);
	tcase_add_test(tc, a_client_reset_then_its_answer_in_one_turn);
	tcase_add_test(tc, an_answer_complete_then_the_client_reset_before_the_flush);
	tcase_add_test(tc, a_client_reset_then_its_retry_backoff_in_one_turn);
	tcase_add_test(tc, a_client_reset_then_its_hedge_in_one_turn);
	tcase_add_test(tc, the_client_gone_with_calls_in_every_state);
	tcase_add_test(tc, an_inbound_call_shed_then_the_client_gone);
	tcase_add_test(tc, a_call_refused_at_max_calls_with_its_request_open_is_not_in_flight);
	tcase_add_test(tc, the_worker_stops_with_calls_on_the_ready_list);
	tcase_add_test(tc, a_reload_while_a_call_waits_on_the_ready_list);
	tcase_add_test(tc, a_client_reset_while_a_retry_waits_for_its_backoff_ends_the_call_at_once);
	tcase_add_test(tc, an_endpoint_removed_while_a_retry_waits_for_its_backoff);
	tcase_add_test(tc, a_client_reset_then_a_failback_failure_in_one_turn);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	/* Quiet unless asked (TEST_CALL_DEBUG=1: maitred's debug lines). */
	atomic_store(&mtd_log_threshold, getenv("TEST_CALL_DEBUG") ? MTD_LOG_DEBUG : MTD_LOG_ERROR);
	SRunner *sr = srunner_create(call_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
