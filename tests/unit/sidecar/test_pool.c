/* Unit tests for sidecar/io/pool.c and upstream.c: a real pool opening real
 * upstream connections over loopback to a listening socket this test
 * serves by hand (it accepts, sends SETTINGS or stays silent), the event
 * loop pumped by hand. The call engine, health checks and snapshots are
 * stubbed below: the stubs record what the pool asked of them.
 *
 * event_add is wrapped (-Wl,--wrap=event_add): a test may make the next
 * timer armed fail, as libevent does when its heap cannot grow. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <event2/event.h>

#include "core/clock.h"
#include "core/lazy.h"
#include "discovery/discovery.h"
#include "lb/lb.h"
#include "sidecar/control/runtime.h"
#include "sidecar/io/conn.h"
#include "sidecar/io/pool.h"
#include "sidecar/io/stream-t.h"
#include "sidecar/io/upstream.h"
#include "sidecar/ops/metrics.h"
#include "sidecar/turn.h"
#include "sidecar/worker.h"

/* ---- event_add, failing on demand --------------------------------------- */

static int fail_timer_adds; /* the next n event_adds with a timeout fail */

int __real_event_add(struct event *ev, const struct timeval *tv);
int __wrap_event_add(struct event *ev, const struct timeval *tv);

int __wrap_event_add(struct event *ev, const struct timeval *tv)
{
	if (tv && fail_timer_adds > 0) {
		fail_timer_adds--;
		return -1;
	}
	return __real_event_add(ev, tv);
}

/* ---- a stream owner of the test's (io/stream-t.h) ---------------------- */

/* The pool and its connections reach their streams' owners only through
 * the stream ops: the test's owner counts what it is told. */
static int n_connect_failed, n_conn_lost, n_on_stream, n_call_fail, n_reroute;
static char last_reason[256];

struct owner {
	struct mtd_up_stream s;
};

static int t_submit(struct mtd_up_stream *s, struct mtd_conn *c)
{
	static const nghttp2_nv nva[] = {
	        {(uint8_t *)":method", (uint8_t *)"POST", 7, 4, NGHTTP2_NV_FLAG_NONE},
	        {(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, NGHTTP2_NV_FLAG_NONE},
	        {(uint8_t *)":path", (uint8_t *)"/test.Svc/Call", 5, 14, NGHTTP2_NV_FLAG_NONE},
	        {(uint8_t *)":authority", (uint8_t *)"test", 10, 4, NGHTTP2_NV_FLAG_NONE},
	};
	return mtd_up_open_stream(c, s, nva, 4, NULL);
}

static void t_on_stream(struct mtd_up_stream *s)
{
	n_on_stream++;
}

static void t_on_wait_end(struct mtd_up_stream *s, enum mtd_up_wait_end why, const char *reason)
{
	switch (why) {
	case MTD_UP_CONNECT_FAILED:
		n_connect_failed++;
		snprintf(last_reason, sizeof(last_reason), "%s", reason);
		break;
	case MTD_UP_RETIRED:
		n_reroute++;
		break;
	case MTD_UP_STOPPING:
	case MTD_UP_NO_STREAM:
		n_call_fail++;
		break;
	}
}

static int t_on_field(struct mtd_up_stream *s, const uint8_t *name, size_t nlen, const uint8_t *value, size_t vlen,
                      uint8_t flags)
{
	return 0;
}

static void t_on_headers(struct mtd_up_stream *s, bool end_stream)
{
}

static void t_on_data(struct mtd_up_stream *s, const uint8_t *p, size_t n)
{
	nghttp2_session_consume(s->conn->ng, s->sid, n);
}

static void t_on_trailers(struct mtd_up_stream *s)
{
}

static void t_on_close(struct mtd_up_stream *s, uint32_t error_code, const char *lost)
{
	if (!lost)
		return;
	n_conn_lost++;
	snprintf(last_reason, sizeof(last_reason), "%s", lost);
}

static const struct mtd_up_stream_ops t_ops = {
        .submit = t_submit,
        .on_stream = t_on_stream,
        .on_wait_end = t_on_wait_end,
        .on_field = t_on_field,
        .on_headers = t_on_headers,
        .on_data = t_on_data,
        .on_trailers = t_on_trailers,
        .on_close = t_on_close,
};

/* The fixture owns the snapshot objects: references are counted, never
 * freed here. */
void mtd_endpoint_unref(struct mtd_endpoint *ep)
{
	mtd_ref_put(&ep->ref);
}
void mtd_rt_service_unref(struct mtd_rt_service *s)
{
	mtd_ref_put(&s->ref);
}

void mtd_worker_schedule_flush(struct mtd_worker *w) {}

void mtd_worker_bury(struct mtd_worker *w, struct mtd_conn *c)
{
	TAILQ_INSERT_TAIL(&w->graveyard, c, dirty_link);
}

/* ---- fixture ------------------------------------------------------------ */

static void *ng_malloc(size_t size, void *ud)
{
	return malloc(size);
}
static void ng_free(void *p, void *ud)
{
	free(p);
}
static void *ng_calloc(size_t n, size_t size, void *ud)
{
	return calloc(n, size);
}
static void *ng_realloc(void *p, size_t size, void *ud)
{
	return realloc(p, size);
}

struct fx {
	struct mtd_worker w;
	struct mtd_cfg cfg;
	struct mtd_runtime rt;
	struct mtd_cfg_service scfg;
	struct mtd_cfg_service_local slocal; /* scfg.local */
	struct mtd_rt_service svc;
	struct mtd_rt_load load;
	struct mtd_endpoint *ep; /* one worker's: n_slots 1 */
	int lfd;  /* the upstream's listening socket */
	int peer; /* the upstream's side of the last connection accepted, or -1 */
	char text[64];
};

static void fx_open(struct fx *f)
{
	memset(f, 0, sizeof(*f));
	f->peer = -1;
	n_connect_failed = n_conn_lost = n_on_stream = n_call_fail = n_reroute = 0;
	fail_timer_adds = 0;
	last_reason[0] = '\0';

	f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	ck_assert_int_ge(f->lfd, 0);
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	ck_assert_int_eq(bind(f->lfd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	ck_assert_int_eq(listen(f->lfd, 8), 0);
	socklen_t sl = sizeof(sin);
	ck_assert_int_eq(getsockname(f->lfd, (struct sockaddr *)&sin, &sl), 0);
	snprintf(f->text, sizeof(f->text), "127.0.0.1:%u", ntohs(sin.sin_port));

	f->cfg.downstream.initial_window_size = 65535;
	f->cfg.downstream.max_header_list_size = 65536;
	f->rt.cfg = &f->cfg;
	f->scfg.local = &f->slocal;
	f->scfg.local->name = (char *)"test.Svc";
	f->scfg.upstream = (struct mtd_cfg_upstream){
	        .connect_timeout_ms = 2000,
	        .idle_timeout_ms = 300000,
	        .keepalive_interval_ms = 30000,
	        .keepalive_timeout_ms = 10000,
	        .max_connections = 4,
	        .max_concurrent_streams = 100,
	        .max_pending = 100,
	        .write_timeout_ms = 30000,
	};
	mtd_ref_init(&f->svc.ref);
	mtd_ref_init(&f->load.ref);
	f->svc.cfg = &f->scfg;
	f->svc.load = &f->load;
	struct mtd_disc_endpoint d = {.address = f->text, .salen = sizeof(sin)};
	memcpy(&d.sa, &sin, sizeof(sin));
	f->ep = mtd_endpoint_new(&d, NULL, 1, 0);
	ck_assert_ptr_nonnull(f->ep);

	struct mtd_worker *w = &f->w;
	w->base = event_base_new();
	ck_assert_ptr_nonnull(w->base);
	w->rt = &f->rt;
	LIST_INIT(&w->pools);
	TAILQ_INIT(&w->dirty);
	TAILQ_INIT(&w->graveyard);
	w->slab.passthrough = true;
	w->ng_mem = (nghttp2_mem){NULL, ng_malloc, ng_free, ng_calloc, ng_realloc};
	w->rbuf_len = 64 * 1024;
	w->rbuf = malloc(w->rbuf_len);
	ck_assert_int_eq(mtd_up_setup(w), 0);
}

/* A waiting call as the pool sees one: a stream owner. */
static struct mtd_up_stream *attempt_new(struct fx *f)
{
	struct owner *o = calloc(1, sizeof(*o));
	ck_assert(o);
	o->s.ops = &t_ops;
	return &o->s;
}

static void attempt_free(struct fx *f, struct mtd_up_stream *s)
{
	free(MTD_CONTAINER_OF(s, struct owner, s));
}

/* One turn of the worker: ready events, then the flush of every dirty
 * connection, then the dead freed (worker.c's flush_cb). */
static void turn(struct fx *f)
{
	event_base_loop(f->w.base, EVLOOP_NONBLOCK | EVLOOP_ONCE);
	struct mtd_conn *c;
	while ((c = TAILQ_FIRST(&f->w.dirty))) {
		TAILQ_REMOVE(&f->w.dirty, c, dirty_link);
		c->in_dirty = false;
		mtd_conn_flush(c);
	}
	while ((c = TAILQ_FIRST(&f->w.graveyard))) {
		TAILQ_REMOVE(&f->w.graveyard, c, dirty_link);
		mtd_conn_free(c);
	}
}

/* Turns until pred(f) holds (a hang guard of a few seconds, never what
 * decides the test). */
static bool turn_until(struct fx *f, bool (*pred)(struct fx *))
{
	for (int i = 0; i < 5000; i++) {
		if (pred(f))
			return true;
		turn(f);
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	return pred(f);
}

static bool accepted(struct fx *f)
{
	if (f->peer < 0)
		f->peer = accept(f->lfd, NULL, NULL);
	return f->peer >= 0;
}

static bool has_stream(struct fx *f)
{
	return n_on_stream > 0;
}

/* The worker's pool for the endpoint, or NULL (none made yet, or freed). */
static struct mtd_pool *pool_of(struct fx *f)
{
	struct mtd_ep_pools *slots = mtd_lazy_peek(&f->ep->pools);
	return slots ? slots->slot[0] : NULL;
}

static bool transport_up(struct fx *f)
{
	struct mtd_conn *c = LIST_FIRST(&pool_of(f)->conns);
	return c && c->state == MTD_CONN_READY;
}

static void fx_close(struct fx *f)
{
	if (pool_of(f))
		mtd_pool_free(pool_of(f));
	turn(f);
	if (f->peer >= 0)
		close(f->peer);
	close(f->lfd);
	mtd_conn_linger_end_all(&f->w); /* the graceful closes' sockets */
	mtd_up_teardown(&f->w);
	event_base_free(f->w.base);
	while (f->w.n_spare_out) /* idle connections gave their output buffers back (conn.c) */
		free(f->w.spare_out[--f->w.n_spare_out]);
	free(f->w.rbuf);
	/* Every reference the pool took was given back. */
	ck_assert_uint_eq(atomic_load(&f->svc.ref.n), 1);
	ck_assert_uint_eq(atomic_load(&f->ep->ref.n), 1);
	mtd_endpoint_free(f->ep); /* its connection figures and pool slots too */
}

/* ---- tests -------------------------------------------------------------- */

/* Issue 15, defect 7: retirement says "no new connection", and a
 * connection of the retired pool failing must not undo it. up_fail set
 * and then cleared pool->failing, the flag retirement (and teardown) set
 * for good, so the next attempt to wait there made the pool connect to an
 * endpoint that had left. */
START_TEST(retired_pool_whose_connection_fails_opens_none)
{
	struct fx f;
	fx_open(&f);
	ck_assert_ptr_null(atomic_load(&f.ep->pools)); /* no pool: no slots either */
	struct mtd_pool *p = mtd_pool_get(&f.w, &f.svc, f.ep);
	ck_assert_ptr_nonnull(p);
	ck_assert_ptr_eq(pool_of(&f), p); /* the first pool made them */
	ck_assert_ptr_eq(mtd_pool_get(&f.w, &f.svc, f.ep), p);
	/* No connection yet: no connection figures (metrics.h), read as 0. */
	ck_assert_ptr_null(atomic_load(&f.ep->mx));
	ck_assert_int_eq(atomic_load(&mtd_mx_ep_view(&f.ep->mx)->conns_open), 0);
	struct mtd_up_stream *a1 = attempt_new(&f), *a2 = attempt_new(&f);
	ck_assert_int_eq(mtd_pool_enqueue(p, a1), 0);
	ck_assert_uint_eq(p->n_conns, 1);
	ck_assert_int_eq(atomic_load(&mtd_mx_ep_view(&f.ep->mx)->conns_open), 1);
	/* The upstream accepts and sends its SETTINGS: a1's stream opens. */
	ck_assert(turn_until(&f, accepted));
	ck_assert(turn_until(&f, transport_up));
	static const uint8_t settings[9] = {0, 0, 0, NGHTTP2_SETTINGS, 0, 0, 0, 0, 0};
	ck_assert_int_eq(write(f.peer, settings, sizeof(settings)), (ssize_t)sizeof(settings));
	ck_assert(turn_until(&f, has_stream));
	struct mtd_conn *c = LIST_FIRST(&p->conns);
	ck_assert_uint_eq(c->n_streams, 1);

	/* The endpoint leaves: the busy connection drains. */
	mtd_pool_retire(p);
	ck_assert_int_eq(c->state, MTD_CONN_DRAINING);
	/* It then fails (its peer read nothing for write_timeout). */
	c->stalled_ns = 1;
	ck_assert(mtd_up_check_write_stall(c, INT64_MAX / 2));
	ck_assert_int_eq(n_conn_lost, 1);
	ck_assert_uint_eq(p->n_conns, 0);
	ck_assert_int_eq(atomic_load(&mtd_mx_ep_view(&f.ep->mx)->conns_open), 0);
	turn(&f);

	/* Whatever waits there now, the pool opens no connection. */
	mtd_pool_enqueue(p, a2);
	ck_assert_msg(p->n_conns == 0, "the retired pool opened a connection (%u)", p->n_conns);
	mtd_pool_dequeue(a2);
	fx_close(&f);
	attempt_free(&f, a1);
	attempt_free(&f, a2);
}
END_TEST

/* Issue 15, defect 8: the connect timeout is what bounds a call's wait for
 * a connection (HACKING.md "Waiting calls"). When it cannot be armed the
 * connection is not kept unbounded: it fails at once, and the calls
 * waiting for it move on with the reason. */
START_TEST(connect_timeout_that_cannot_be_armed_fails_the_connect)
{
	struct fx f;
	fx_open(&f);
	struct mtd_pool *p = mtd_pool_get(&f.w, &f.svc, f.ep);
	struct mtd_up_stream *a = attempt_new(&f);
	fail_timer_adds = 1;
	ck_assert_int_eq(mtd_pool_enqueue(p, a), 0);
	ck_assert_int_eq(fail_timer_adds, 0);
	ck_assert_msg(p->n_conns == 0, "a connection without its timeout was kept");
	ck_assert_int_eq(n_connect_failed, 1);
	ck_assert_ptr_nonnull(strstr(last_reason, "connect timeout"));
	ck_assert_uint_eq(p->n_pending, 0);
	ck_assert(mtd_pool_backing_off(p, mtd_now_ns()));
	fx_close(&f);
	attempt_free(&f, a);
}
END_TEST

/* The same for the SETTINGS wait once the transport is up. */
START_TEST(settings_timeout_that_cannot_be_armed_fails_the_connect)
{
	struct fx f;
	fx_open(&f);
	struct mtd_pool *p = mtd_pool_get(&f.w, &f.svc, f.ep);
	struct mtd_up_stream *a = attempt_new(&f);
	ck_assert_int_eq(mtd_pool_enqueue(p, a), 0);
	ck_assert_uint_eq(p->n_conns, 1);
	fail_timer_adds = 1; /* the next: the SETTINGS timeout */
	ck_assert(turn_until(&f, accepted));
	for (int i = 0; i < 5000 && fail_timer_adds > 0; i++)
		turn(&f);
	ck_assert_int_eq(fail_timer_adds, 0);
	ck_assert_msg(p->n_conns == 0, "a connection without its SETTINGS timeout was kept");
	ck_assert_int_eq(n_connect_failed, 1);
	ck_assert_ptr_nonnull(strstr(last_reason, "SETTINGS"));
	fx_close(&f);
	attempt_free(&f, a);
}
END_TEST

/* Issue 15, defect 2, at the pool: attempts waiting while the service had
 * no max_pending are counted once a reload turns it on, and what leaves
 * gives back exactly that: the count never wraps. */
START_TEST(circuit_count_follows_the_service)
{
	struct fx f;
	fx_open(&f);
	struct mtd_pool *p = mtd_pool_get(&f.w, &f.svc, f.ep);
	struct mtd_up_stream *a[3];
	for (int i = 0; i < 3; i++) {
		a[i] = attempt_new(&f);
		ck_assert_int_eq(mtd_pool_enqueue(p, a[i]), 0);
	}
	ck_assert_uint_eq(p->n_pending, 3);
	ck_assert_uint_eq(atomic_load(&f.load.pending), 0);
	/* A reload: the same service (same counts) with max_pending on. */
	struct mtd_cfg_service scfg2 = f.scfg;
	scfg2.circuit.max_pending = 100;
	struct mtd_rt_service svc2 = {.cfg = &scfg2, .load = &f.load};
	mtd_ref_init(&svc2.ref);
	mtd_pool_set_service(p, &svc2);
	ck_assert_uint_eq(atomic_load(&f.load.pending), 3);
	mtd_pool_dequeue(a[0]);
	ck_assert_uint_eq(atomic_load(&f.load.pending), 2);
	/* And off again: the pool gives back what it counted. */
	mtd_pool_set_service(p, &f.svc);
	ck_assert_uint_eq(atomic_load(&f.load.pending), 0);
	mtd_pool_dequeue(a[1]);
	mtd_pool_dequeue(a[2]);
	ck_assert_uint_eq(atomic_load(&f.load.pending), 0);
	ck_assert_uint_eq(atomic_load(&f.load.ref.n), 1);
	ck_assert_uint_eq(atomic_load(&svc2.ref.n), 1);
	fx_close(&f);
	for (int i = 0; i < 3; i++)
		attempt_free(&f, a[i]);
}
END_TEST

/* One :authority rule for calls and health checks (config-t.h). */
START_TEST(authority_rule)
{
	struct fx f;
	fx_open(&f);
	struct mtd_pool *p = mtd_pool_get(&f.w, &f.svc, f.ep);
	/* No override: calls keep the app's, a check names the endpoint. */
	ck_assert_ptr_null(mtd_pool_authority(p, true));
	ck_assert_str_eq(mtd_pool_authority(p, false), f.text);
	/* FROM_ENDPOINT: the endpoint's name for both, the TLS name first. */
	f.scfg.local->authority_from_endpoint = true;
	ck_assert_str_eq(mtd_pool_authority(p, true), f.text);
	struct mtd_cfg_tls tls = {.server_name = (char *)"echo.test"};
	f.scfg.tls = &tls;
	ck_assert_str_eq(mtd_pool_authority(p, true), "echo.test");
	f.scfg.local->authority_from_endpoint = false;
	ck_assert_ptr_null(mtd_pool_authority(p, true));
	ck_assert_str_eq(mtd_pool_authority(p, false), "echo.test");
	/* A literal wins for both. */
	f.scfg.local->authority = (char *)"api.example:443";
	ck_assert_str_eq(mtd_pool_authority(p, true), "api.example:443");
	ck_assert_str_eq(mtd_pool_authority(p, false), "api.example:443");
	fx_close(&f);
}
END_TEST

/* The upstream's side: what maitred sent since the last look, parsed
 * into frames (the client preface skipped); true when a GOAWAY was among
 * them. Reads what is there, without waiting. */
static bool peer_saw_goaway(struct fx *f, int fd, bool *preface_done)
{
	uint8_t buf[65536];
	size_t len = 0;
	for (int i = 0; i < 200; i++) {
		turn(f);
		ssize_t n = recv(fd, buf + len, sizeof(buf) - len, MSG_DONTWAIT);
		if (n > 0)
			len += (size_t)n;
		else if (len > 0)
			break;
	}
	size_t off = 0;
	if (!*preface_done && len >= 24) {
		off = 24;
		*preface_done = true;
	}
	bool goaway = false;
	while (off + 9 <= len) {
		size_t flen = (size_t)buf[off] << 16 | (size_t)buf[off + 1] << 8 | buf[off + 2];
		if (buf[off + 3] == NGHTTP2_GOAWAY)
			goaway = true;
		off += 9 + flen;
	}
	return goaway;
}

/* Up to a ready connection of p with one stream open (a's). */
static struct mtd_conn *busy_conn(struct fx *f, struct mtd_pool *p, struct mtd_up_stream *a)
{
	ck_assert_int_eq(mtd_pool_enqueue(p, a), 0);
	ck_assert(turn_until(f, accepted));
	ck_assert(turn_until(f, transport_up));
	static const uint8_t settings[9] = {0, 0, 0, NGHTTP2_SETTINGS, 0, 0, 0, 0, 0};
	ck_assert_int_eq(write(f->peer, settings, sizeof(settings)), (ssize_t)sizeof(settings));
	ck_assert(turn_until(f, has_stream));
	struct mtd_conn *c = LIST_FIRST(&p->conns);
	ck_assert_uint_eq(c->n_streams, 1);
	return c;
}

static bool second_accepted(struct fx *f)
{
	int fd = accept(f->lfd, NULL, NULL);
	if (fd < 0)
		return false;
	close(fd);
	return true;
}

/* A retry or a check of an older snapshot asks for the pool of an endpoint
 * the worker's current snapshot no longer holds: its retired pool may have
 * been freed already, and a fresh one connected to the endpoint that left
 * (a reload replaced y by z; the retry was answered by y). Such a pool is
 * born retired and opens nothing; one the snapshot holds is a pool. */
START_TEST(pool_of_an_endpoint_that_left_is_born_retired)
{
	struct fx f;
	fx_open(&f);
	f.rt.gen = 7;
	atomic_store(&f.ep->gone_gen, 8); /* generation 8 dropped it; the worker serves 7 */
	struct mtd_pool *p = mtd_pool_get(&f.w, &f.svc, f.ep);
	ck_assert(!p->retired);
	mtd_pool_free(p);
	/* The worker took generation 8, which lacks the endpoint. */
	f.rt.gen = 8;
	p = mtd_pool_get(&f.w, &f.svc, f.ep);
	ck_assert_ptr_nonnull(p);
	ck_assert_msg(p->retired, "a pool was made for an endpoint the current snapshot no longer holds");
	mtd_pool_dispatch(p);
	ck_assert_uint_eq(p->n_conns, 0);
	/* Housekeeping frees it like any drained retired pool. */
	mtd_pool_housekeeping(p, mtd_now_ns());
	ck_assert_ptr_null(pool_of(&f));
	fx_close(&f);
}
END_TEST

/* A reload changes the service's TLS policy (tls turned on, another CA,
 * another server_identity...): a connection made under the old one takes
 * no new stream. Busy, it gets a GOAWAY and drains; the next call opens a
 * connection under the new policy. The same policy keeps it. */
START_TEST(tls_policy_change_drains_the_connections_made_under_the_old)
{
	struct fx f;
	fx_open(&f);
	f.svc.tls_gen = 1;
	struct mtd_pool *p = mtd_pool_get(&f.w, &f.svc, f.ep);
	struct mtd_up_stream *a1 = attempt_new(&f), *a2 = attempt_new(&f);
	struct mtd_conn *c = busy_conn(&f, p, a1);
	ck_assert(c->tls_gen == 1);
	bool preface = false;
	ck_assert(!peer_saw_goaway(&f, f.peer, &preface));

	/* A snapshot of the same policy (other settings may differ). */
	struct mtd_rt_service same = {.cfg = &f.scfg, .load = &f.load, .tls_gen = 1};
	mtd_ref_init(&same.ref);
	mtd_pool_set_service(p, &same);
	ck_assert_int_eq(c->state, MTD_CONN_READY);
	ck_assert(!peer_saw_goaway(&f, f.peer, &preface));

	/* Another policy: the busy connection drains, told so. */
	struct mtd_rt_service other = {.cfg = &f.scfg, .load = &f.load, .tls_gen = 2};
	mtd_ref_init(&other.ref);
	mtd_pool_set_service(p, &other);
	ck_assert_int_eq(c->state, MTD_CONN_DRAINING);
	ck_assert_msg(peer_saw_goaway(&f, f.peer, &preface), "the upstream was sent no GOAWAY");
	ck_assert_uint_eq(c->n_streams, 1); /* the call in flight goes on */
	/* The next call waits for a connection of the new policy. */
	n_on_stream = 0;
	ck_assert_int_eq(mtd_pool_enqueue(p, a2), 0);
	ck_assert_uint_eq(p->n_conns, 2);
	ck_assert_uint_eq(c->n_streams, 1);
	ck_assert_int_eq(n_on_stream, 0);
	ck_assert(turn_until(&f, second_accepted));
	struct mtd_conn *c2 = LIST_FIRST(&p->conns);
	ck_assert_ptr_ne(c2, c);
	for (int i = 0; i < 5000 && c2->state == MTD_CONN_CONNECTING; i++)
		turn(&f);
	ck_assert(c2->tls_gen == 2);
	mtd_pool_dequeue(a2);
	mtd_pool_set_service(p, &f.svc);
	fx_close(&f);
	ck_assert_uint_eq(atomic_load(&same.ref.n), 1);
	ck_assert_uint_eq(atomic_load(&other.ref.n), 1);
	attempt_free(&f, a1);
	attempt_free(&f, a2);
}
END_TEST

/* A connection not up yet under the old policy (its handshake began with
 * the old context) is closed, without counting as a failed connect: the
 * calls waiting for it stay, and a new connection is opened for them. */
START_TEST(tls_policy_change_replaces_a_connection_not_up_yet)
{
	struct fx f;
	fx_open(&f);
	f.svc.tls_gen = 1;
	struct mtd_pool *p = mtd_pool_get(&f.w, &f.svc, f.ep);
	struct mtd_up_stream *a = attempt_new(&f);
	ck_assert_int_eq(mtd_pool_enqueue(p, a), 0);
	ck_assert(turn_until(&f, accepted));
	ck_assert(turn_until(&f, transport_up)); /* h2c: READY, no SETTINGS yet */
	struct mtd_conn *c = LIST_FIRST(&p->conns);
	ck_assert(!c->settings_seen);
	struct mtd_rt_service other = {.cfg = &f.scfg, .load = &f.load, .tls_gen = 2};
	mtd_ref_init(&other.ref);
	mtd_pool_set_service(p, &other);
	ck_assert_int_eq(n_connect_failed, 0);
	ck_assert_uint_eq(p->connect_failures, 0);
	ck_assert_uint_eq(p->n_pending, 1);
	ck_assert_uint_eq(p->n_conns, 1);
	ck_assert_ptr_ne(LIST_FIRST(&p->conns), c);
	ck_assert_int_eq(LIST_FIRST(&p->conns)->state, MTD_CONN_CONNECTING);
	mtd_pool_dequeue(a);
	mtd_pool_set_service(p, &f.svc);
	fx_close(&f);
	attempt_free(&f, a);
}
END_TEST

/* upstream.max_connection_age: an older connection takes no new stream and
 * drains the same way (GOAWAY, its calls finish); an idle one closes. */
START_TEST(max_connection_age_drains)
{
	struct fx f;
	fx_open(&f);
	f.scfg.upstream.max_connection_age_ms = 1000;
	struct mtd_pool *p = mtd_pool_get(&f.w, &f.svc, f.ep);
	struct mtd_up_stream *a1 = attempt_new(&f);
	struct mtd_conn *c = busy_conn(&f, p, a1);
	bool preface = false;
	c->opened_ns = mtd_now_ns(); /* however long getting here took */
	mtd_pool_housekeeping(p, c->opened_ns + 500 * 1000000LL);
	ck_assert_int_eq(c->state, MTD_CONN_READY);
	mtd_pool_housekeeping(p, c->opened_ns + 1500 * 1000000LL);
	ck_assert_int_eq(c->state, MTD_CONN_DRAINING);
	ck_assert_uint_eq(c->n_streams, 1);
	ck_assert_msg(peer_saw_goaway(&f, f.peer, &preface), "the upstream was sent no GOAWAY");
	fx_close(&f);
	attempt_free(&f, a1);
}
END_TEST

static Suite *pool_suite(void)
{
	Suite *s = suite_create("pool");
	TCase *tc = tcase_create("pool");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, retired_pool_whose_connection_fails_opens_none);
	tcase_add_test(tc, connect_timeout_that_cannot_be_armed_fails_the_connect);
	tcase_add_test(tc, settings_timeout_that_cannot_be_armed_fails_the_connect);
	tcase_add_test(tc, circuit_count_follows_the_service);
	tcase_add_test(tc, authority_rule);
	tcase_add_test(tc, pool_of_an_endpoint_that_left_is_born_retired);
	tcase_add_test(tc, tls_policy_change_drains_the_connections_made_under_the_old);
	tcase_add_test(tc, tls_policy_change_replaces_a_connection_not_up_yet);
	tcase_add_test(tc, max_connection_age_drains);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(pool_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
