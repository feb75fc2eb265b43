/* The call engine's test seam (issue 15 §4): a worker, its client
 * connection and its upstream endpoints in memory, without a socket, on a
 * clock the test moves.
 *
 * REAL (linked as they are in maitred):
 *   - the call engine: sidecar/call/{call,attempt,attempt_stream,relay,
 *     policy,failback,headers}.c;
 *   - the connections around it: sidecar/io/conn.c (flush, read slices,
 *     doom, close), downstream.c (the client's nghttp2 server session with
 *     maitred's options and callbacks, mtd_down_accept itself),
 *     upstream.c (the upstream client sessions' callbacks, the stream
 *     ops' mtd_up_open_stream, close), pool.c (queueing, dispatch, backoff, retirement: the
 *     attempts queued are the pool's own `pending` of streams);
 *   - the snapshots: sidecar/control/runtime.c builds, reloads and frees
 *     them from a YAML config (lib/config), with mailbox.c carrying the
 *     last references to the "control thread" (seam_reclaim, run after
 *     every turn: a snapshot is freed as soon as the rule allows);
 *   - the worker's turn: sidecar/worker_turn.c (the end of a turn: the
 *     calls ready for their next attempt, dirty connections flushed,
 *     buried ones freed, the reap; the snapshot swap, mtd_worker_take_runtime:
 *     holds, pools taking the new settings or retiring; the close at stop,
 *     mtd_worker_close_all) and sidecar/turn.c (the flush request, the
 *     graveyard, the timers and their timerfd, the snapshot holds, the
 *     client connection count). The worker's struct is real and set up as
 *     mtd_worker_new does, without a listener or a thread; its events are
 *     assigned and never dispatched: a flush scheduled sets flush_due, and
 *     the seam ends the turn (seam_end_turn), as the flush event would; the
 *     timerfd is set on the seam's clock and never read, seam_run runs the
 *     timers due (mtd_worker_run_timers);
 *   - lib/libmaitred.a (lb pickers, fault policy, timers heap, slab, ...);
 *   - nghttp2 on both ends: the app is a real nghttp2 client session and
 *     each endpoint a real nghttp2 server session, both scripted here.
 *
 * FAKE (this file):
 *   - the clock: mtd_now_ns is wrapped (-Wl,--wrap=mtd_now_ns) and only
 *     moves when the test says (seam_advance_ms, which starts a turn: the
 *     turn's clock, turn.h mtd_turn_now_ns, is read again; not
 *     seam_timers_mid_turn); mtd_wall_ms is real;
 *   - the transport (transport.c): each connection's bytes go to an
 *     in-memory buffer its peer session reads, and come back the same
 *     way; no TLS (its functions fail the test if reached). A connection's
 *     fd is an eventfd, only so that conn.c's libevent events have one:
 *     the event base is never dispatched;
 *   - the worker's thread, bell, accept and housekeeping (worker.c): none,
 *     but seam_housekeeping's walk over the pools (mtd_pool_housekeeping
 *     itself is real); inbound.c's worker half (mtd_inbound_worker_sync,
 *     _fini): nothing, as no seam config has an inbound listener; what
 *     a call reads of inbound.c (mtd_inbound_entry, _listener_entry): one
 *     listener of seam_client_inbound's;
 *   - the connect (mtd_up_connect, wrapped): a connection object like the
 *     real one's, whose "TCP" comes up at the next pump (or stays silent,
 *     or stays connecting until seam_ep_connect / seam_ep_connect_fail, or
 *     is refused at once, on the connect's own stack, as a socket() or
 *     connect() failing synchronously is);
 *     then upstream.c's up_ready steps (session, SETTINGS) are done here.
 *     No connect_timeout runs: a silent endpoint waits for ever unless the
 *     call's own timers end it;
 *   - metrics.c and access_log.c: counters (seam_mx), reading what the
 *     real ones read of a call (its access-log endpoint and attempts, as
 *     with log.access on); health.c:
 *     nothing (no health_check
 *     in the seam's configs: reaching it fails the test);
 *   - the slab calls (mtd_slab_*, wrapped) are the real ones plus a record
 *     of every live block, so a test can say a block is still allocated
 *     (freed only at the reap) and that every one came back. The worker's
 *     nghttp2_mem is the seam's: it can make the client session's
 *     allocations fail (issue 15 #5).
 *
 * A turn here: one event (a read, the timers, a swap), then the end of the
 * turn; seam_run goes on while a turn moved something or a flush is due.
 * Tests that look at the engine mid-turn use seam_deliver / seam_reload,
 * which stop before the end. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <event2/event.h>
#include <nghttp2/nghttp2.h>

#include "call_seam.h"
#include "config/config.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/slab.h"
#include "core/timers.h"
#include "discovery/discovery.h"
#include "sidecar/call/call.h"
#include "sidecar/call/down_port.h"
#include "sidecar/call/failback.h"
#include "sidecar/control/control-t.h"
#include "sidecar/control/mailbox.h"
#include "sidecar/control/runtime.h"
#include "sidecar/io/conn.h"
#include "sidecar/io/downstream.h"
#include "sidecar/io/inbound.h"
#include "sidecar/io/pool.h"
#include "sidecar/io/transport.h"
#include "sidecar/io/upstream.h"
#include "sidecar/ops/metrics.h"
#include "sidecar/ops/trace_export.h"
#include "sidecar/turn.h"
#include "sidecar/worker_turn.h"

/* ---- buffers -------------------------------------------------------------- */

static void buf_add(struct seam_buf *b, const void *p, size_t n)
{
	if (n == 0)
		return;
	if (b->cap - b->len < n) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap - b->len < n)
			cap *= 2;
		b->p = realloc(b->p, cap);
		ck_assert_ptr_nonnull(b->p);
		b->cap = cap;
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
}

static void buf_free(struct seam_buf *b)
{
	free(b->p);
	*b = (struct seam_buf){0};
}

size_t seam_grpc_msg(uint8_t *out, const void *payload, size_t len)
{
	out[0] = 0;
	out[1] = (uint8_t)(len >> 24);
	out[2] = (uint8_t)(len >> 16);
	out[3] = (uint8_t)(len >> 8);
	out[4] = (uint8_t)len;
	if (len)
		memcpy(out + 5, payload, len);
	return len + 5;
}

/* ---- the world ------------------------------------------------------------ */

/* The worker's nghttp2 allocator: the slab, counted, able to fail. */
struct seam_mem {
	struct mtd_slab *slab;
	unsigned fail_next, failed;
	long live;
};

/* One connection of maitred's and its peer. */
struct seam_link {
	struct seam *s;
	struct mtd_conn *c; /* NULL once maitred closed it */
	bool down;
	enum seam_ep_mode mode;
	bool connect_due;      /* its TCP comes up at the next pump */
	nghttp2_session *peer; /* the client (down), the endpoint's server (up) */
	struct seam_buf to_peer, from_peer;
	char addr[64];
	struct seam_link *next;
};

struct seam_ep {
	char addr[64];
	enum seam_ep_mode mode;
	unsigned connects;
	struct seam_ep *next;
};

struct seam {
	struct event_base *base; /* for libevent's structures; never dispatched */
	struct mtd_control ctl;
	struct mtd_worker *w;
	struct seam_mem mem_down, mem_up;
	nghttp2_session_callbacks *client_cbs, *server_cbs;
	struct seam_link *links, **links_tail;
	struct seam_link *down;
	struct seam_cs *calls;
	struct seam_ss *streams, **streams_tail;
	struct seam_ep *eps;
	unsigned rts_freed;
	uintptr_t stack_base; /* seam_run's frame, for seam_connects.deepest */
};

static struct seam *the_seam;
struct seam_mx seam_mx;

struct mtd_worker *seam_worker(struct seam *s)
{
	return s->w;
}

/* ---- the clock (wrapped) ---------------------------------------------------- */

static int64_t clock_ns = 1000 * (int64_t)1000000000;

int64_t __wrap_mtd_now_ns(void);
int64_t __wrap_mtd_now_ns(void)
{
	return clock_ns;
}

int64_t seam_now_ns(void)
{
	return clock_ns;
}

static int64_t wall_step_ms;

int64_t __real_mtd_wall_ms(void);
int64_t __wrap_mtd_wall_ms(void);
int64_t __wrap_mtd_wall_ms(void)
{
	return __real_mtd_wall_ms() + wall_step_ms;
}

void seam_step_wall_ms(int64_t ms)
{
	wall_step_ms += ms;
}

static void tick_back(struct mtd_control *ctl, size_t si, struct mtd_endpoint *const *eps, size_t n)
{
	(void)ctl, (void)si, (void)eps, (void)n;
}

void seam_runtime_tick(struct seam *s)
{
	mtd_runtime_tick(s->ctl.rt, tick_back);
}

/* ---- slab blocks (wrapped) ---------------------------------------------------- */

void *__real_mtd_slab_malloc(struct mtd_slab *s, size_t size);
void *__real_mtd_slab_calloc(struct mtd_slab *s, size_t n, size_t size);
void *__real_mtd_slab_realloc(struct mtd_slab *s, void *p, size_t size);
void __real_mtd_slab_free(struct mtd_slab *s, void *p);
void *__wrap_mtd_slab_malloc(struct mtd_slab *s, size_t size);
void *__wrap_mtd_slab_calloc(struct mtd_slab *s, size_t n, size_t size);
void *__wrap_mtd_slab_realloc(struct mtd_slab *s, void *p, size_t size);
void __wrap_mtd_slab_free(struct mtd_slab *s, void *p);

#define BLK_BUCKETS 1024
struct blk {
	const void *p;
	struct blk *next;
};
static struct blk *blk_tab[BLK_BUCKETS];
static size_t n_blocks;
static unsigned unknown_frees;

static size_t blk_hash(const void *p)
{
	return ((uintptr_t)p >> 4) % BLK_BUCKETS;
}

static void blk_add(const void *p)
{
	struct blk *b = malloc(sizeof(*b));
	ck_assert_ptr_nonnull(b);
	b->p = p;
	b->next = blk_tab[blk_hash(p)];
	blk_tab[blk_hash(p)] = b;
	n_blocks++;
}

static void blk_del(const void *p)
{
	for (struct blk **b = &blk_tab[blk_hash(p)]; *b; b = &(*b)->next)
		if ((*b)->p == p) {
			struct blk *d = *b;
			*b = d->next;
			free(d);
			n_blocks--;
			return;
		}
	unknown_frees++;
}

bool seam_block_live(const void *p)
{
	for (struct blk *b = blk_tab[blk_hash(p)]; b; b = b->next)
		if (b->p == p)
			return true;
	return false;
}

size_t seam_live_blocks(void)
{
	return n_blocks;
}

void *__wrap_mtd_slab_malloc(struct mtd_slab *s, size_t size)
{
	void *p = __real_mtd_slab_malloc(s, size);
	if (p)
		blk_add(p);
	return p;
}

void *__wrap_mtd_slab_calloc(struct mtd_slab *s, size_t n, size_t size)
{
	void *p = __real_mtd_slab_calloc(s, n, size);
	if (p)
		blk_add(p);
	return p;
}

void *__wrap_mtd_slab_realloc(struct mtd_slab *s, void *p, size_t size)
{
	void *q = __real_mtd_slab_realloc(s, p, size);
	if (q && q != p) {
		if (p)
			blk_del(p);
		blk_add(q);
	}
	return q;
}

void __wrap_mtd_slab_free(struct mtd_slab *s, void *p)
{
	if (p)
		blk_del(p);
	__real_mtd_slab_free(s, p);
}

/* nghttp2's allocations (every maitred session's, through w->ng_mem). */
static void *ng_malloc(size_t size, void *ud)
{
	struct seam_mem *m = ud;
	if (m->fail_next) {
		m->fail_next--;
		m->failed++;
		return NULL;
	}
	void *p = __real_mtd_slab_malloc(m->slab, size);
	if (p)
		m->live++;
	return p;
}

static void ng_free(void *p, void *ud)
{
	struct seam_mem *m = ud;
	if (!p)
		return;
	m->live--;
	__real_mtd_slab_free(m->slab, p);
}

static void *ng_calloc(size_t n, size_t size, void *ud)
{
	struct seam_mem *m = ud;
	if (m->fail_next) {
		m->fail_next--;
		m->failed++;
		return NULL;
	}
	void *p = __real_mtd_slab_calloc(m->slab, n, size);
	if (p)
		m->live++;
	return p;
}

static void *ng_realloc(void *p, size_t size, void *ud)
{
	struct seam_mem *m = ud;
	if (m->fail_next) {
		m->fail_next--;
		m->failed++;
		return NULL;
	}
	void *q = __real_mtd_slab_realloc(m->slab, p, size);
	if (q && !p)
		m->live++;
	return q;
}

void seam_fail_down_allocs(struct seam *s, unsigned n)
{
	s->mem_down.fail_next = n;
}

unsigned seam_down_allocs_failed(struct seam *s)
{
	return s->mem_down.failed;
}

/* ---- links ------------------------------------------------------------------ */

static struct seam_link *link_of(const struct mtd_conn *c)
{
	for (struct seam_link *l = the_seam ? the_seam->links : NULL; l; l = l->next)
		if (l->c == c)
			return l;
	return NULL;
}

static struct seam_link *link_new(struct seam *s, struct mtd_conn *c, bool down, enum seam_ep_mode mode,
                                  const char *addr)
{
	struct seam_link *l = calloc(1, sizeof(*l));
	ck_assert_ptr_nonnull(l);
	l->s = s;
	l->c = c;
	l->down = down;
	l->mode = mode;
	snprintf(l->addr, sizeof(l->addr), "%s", addr);
	*s->links_tail = l;
	s->links_tail = &l->next;
	return l;
}

static struct seam_ep *ep_of(struct seam *s, const char *addr)
{
	struct seam_ep *e;
	for (e = s->eps; e; e = e->next)
		if (strcmp(e->addr, addr) == 0)
			return e;
	e = calloc(1, sizeof(*e));
	ck_assert_ptr_nonnull(e);
	snprintf(e->addr, sizeof(e->addr), "%s", addr);
	e->mode = SEAM_EP_UP;
	e->next = s->eps;
	s->eps = e;
	return e;
}

void seam_ep_mode(struct seam *s, const char *addr, enum seam_ep_mode m)
{
	ep_of(s, addr)->mode = m;
}

unsigned seam_ep_connects(struct seam *s, const char *addr)
{
	return ep_of(s, addr)->connects;
}

/* ---- the transport (fake transport.c) --------------------------------------- */

ssize_t mtd_xprt_read(struct mtd_conn *c, uint8_t *buf, size_t len)
{
	struct seam_link *l = link_of(c);
	if (!l || l->from_peer.len == 0)
		return MTD_IO_WANT_READ;
	size_t n = l->from_peer.len < len ? l->from_peer.len : len;
	memcpy(buf, l->from_peer.p, n);
	memmove(l->from_peer.p, l->from_peer.p + n, l->from_peer.len - n);
	l->from_peer.len -= n;
	return (ssize_t)n;
}

ssize_t mtd_xprt_write(struct mtd_conn *c, const uint8_t *buf, size_t len)
{
	struct seam_link *l = link_of(c);
	if (!l)
		return -EPIPE;
	if (the_seam && l == the_seam->down)
		seam_mx.ended_at_client_write = seam_mx.ended;
	if (l->mode == SEAM_EP_UP)
		buf_add(&l->to_peer, buf, len);
	/* SILENT: the bytes go to a peer that never reads HTTP/2. */
	return (ssize_t)len;
}

/* A gathered write (DATA from the calls' queues, conn.c): each piece as
 * one write, all of it taken. */
ssize_t mtd_xprt_writev(struct mtd_conn *c, const struct iovec *iov, int n)
{
	ssize_t done = 0;
	for (int i = 0; i < n; i++) {
		ssize_t k = mtd_xprt_write(c, iov[i].iov_base, iov[i].iov_len);
		if (k < 0)
			return done ? done : k;
		done += k;
	}
	return done;
}

void mtd_xprt_close(struct mtd_conn *c)
{
	struct seam_link *l = link_of(c);
	if (l)
		l->c = NULL;
}

bool mtd_xprt_pending(const struct mtd_conn *c)
{
	return false;
}

int mtd_tls_handshake(struct mtd_conn *c, char *err, size_t errlen)
{
	ck_abort_msg("the seam has no TLS");
	return -EPROTO;
}

struct ssl_ctx_st *mtd_tls_client_ctx_new(const struct mtd_cfg_tls *tls, char *err, size_t errlen)
{
	snprintf(err, errlen, "the seam has no TLS");
	return NULL;
}

struct ssl_ctx_st *mtd_tls_ctx_ref(struct ssl_ctx_st *ctx)
{
	ck_abort_msg("the seam has no TLS");
	return ctx;
}

void mtd_tls_ctx_free(struct ssl_ctx_st *ctx)
{
	ck_abort_msg("the seam has no TLS");
}

int mtd_tls_client_start(struct mtd_conn *c, struct ssl_ctx_st *ctx, const char *server_name,
                         struct ssl_session_st *resume)
{
	ck_abort_msg("the seam has no TLS");
	return -ENOMEM;
}

void mtd_tls_session_free(struct ssl_session_st *s)
{
	ck_abort_msg("the seam has no TLS");
}

/* ---- metrics (counters) ------------------------------------------------------ */

struct mtd_mx_method *mtd_metrics_call_routed(unsigned worker, const char *path, size_t len, size_t svc_len)
{
	seam_mx.routed++;
	return NULL; /* no tables: the counters below take the call */
}

void mtd_metrics_fault_decision(struct mtd_call *call, const struct mtd_fault_decision *d)
{
	seam_mx.decisions++;
}

void mtd_metrics_circuit_rejected(struct mtd_call *call, enum mtd_mx_circuit limit)
{
	seam_mx.circuit_rejected++;
}

/* ---- inbound listeners (none in the seam, but for seam_client_inbound) ------ */

/* What seam_client_inbound makes the client connection: an inbound peer
 * (no certificate, no identity) of one listener, "seam-in", whose app is
 * the seam's first service. The call engine's inbound step is the real
 * one (call/inbound_call.c); what it reads of io/ (inbound.c's accessors
 * and the snapshot's listener set) is this. */
static struct mtd_cfg_inbound seam_in_cfg;
static struct mtd_rt_inentry seam_in_entry = {.cfg = &seam_in_cfg, .key = "seam-in", .policy = 1};
static struct mtd_in_peer seam_in_peer = {.key = "seam-in", .policy = 1};
static bool seam_in_on;

bool mtd_inbound_header_dropped(const uint8_t *name, size_t len)
{
	ck_assert_msg(seam_in_on, "the seam has no inbound listener");
	return false;
}

const struct mtd_rt_inentry *mtd_inbound_entry(const struct mtd_worker *w, const struct mtd_in_peer *in,
                                               size_t *idx)
{
	ck_assert_ptr_eq(in, &seam_in_peer);
	*idx = 0;
	return &seam_in_entry;
}

const struct mtd_rt_inentry *mtd_inbound_listener_entry(const struct mtd_runtime *rt, const struct mtd_in_peer *in,
                                                        size_t *idx)
{
	ck_assert_ptr_eq(in, &seam_in_peer);
	*idx = 0;
	return &seam_in_entry;
}

void seam_client_inbound_authz(struct seam *s, uint32_t max_concurrent_calls, bool deny)
{
	seam_in_cfg = (struct mtd_cfg_inbound){
	        .max_concurrent_calls = max_concurrent_calls,
	        .authz = {.def = deny ? MTD_AUTHZ_DENY : MTD_AUTHZ_ALLOW_ALL},
	        .service = 0,
	};
	static char listen[] = "seam-in";
	seam_in_cfg.listen.text = listen;
	seam_in_on = true;
	LIST_FIRST(&s->w->downs)->in = &seam_in_peer;
}

void seam_client_inbound(struct seam *s, uint32_t max_concurrent_calls)
{
	seam_client_inbound_authz(s, max_concurrent_calls, false);
}

void mtd_metrics_policy(struct mtd_call *call, enum mtd_mx_policy what)
{
	seam_mx.policy++;
	if ((unsigned)what < sizeof(seam_mx.policy_by) / sizeof(seam_mx.policy_by[0]))
		seam_mx.policy_by[what]++;
}

void mtd_metrics_parked(unsigned worker, uint32_t n)
{
	seam_mx.parked = n;
}

void mtd_metrics_guard_cut(const char *service, const char *method, const char *group)
{
	seam_mx.guard_cuts++;
}

void mtd_metrics_failback(struct mtd_call *call, bool dropped)
{
	if (dropped)
		seam_mx.failback_dropped++;
	else
		seam_mx.failback_started++;
}

void mtd_metrics_hedge_started(struct mtd_call *call)
{
	seam_mx.hedges_started++;
}

void mtd_metrics_hedge_won(struct mtd_call *call)
{
	seam_mx.hedges_won++;
}

int64_t mtd_metrics_hedge_delay_ms(struct mtd_call *call)
{
	return 50; /* AUTO's initial delay */
}

void mtd_metrics_hedge_sample(struct mtd_call *call, int64_t us)
{
	seam_mx.hedge_samples++;
	seam_mx.hedge_sample_us = us;
}

/* access_log.c reads the call's endpoint and attempts for its line
 * (log.access on): so does the fake, every time. */
void mtd_metrics_call_end(struct mtd_call *call)
{
	seam_mx.ended++;
	seam_mx.attempts += call->n_attempts;
	const char *ep = call->mx_ep ? mtd_endpoint_text(call->mx_ep) : "-";
	snprintf(seam_mx.last_ep, sizeof(seam_mx.last_ep), "%s", ep);
}

/* ---- the worker (turn.c and worker_turn.c, real; its events never dispatched) ---- */

/* inbound.c's worker half: the seam's snapshots have no inbound listener,
 * and seam_client_inbound's stand-in is no listener either. */
void mtd_inbound_worker_sync(struct mtd_worker *w)
{
	ck_assert_ptr_null(w->in);
}

void mtd_inbound_worker_fini(struct mtd_worker *w)
{
	ck_assert_ptr_null(w->in);
}

unsigned seam_holds_alive(struct seam *s)
{
	return s->w->n_holds;
}

uint64_t seam_current_hold_users(struct seam *s)
{
	return s->w->hold->h.users;
}

unsigned seam_reclaim(struct seam *s)
{
	unsigned n = 0;
	pthread_mutex_lock(&s->ctl.reclaim_rts.mu);
	for (struct mtd_mbox_link *l = s->ctl.reclaim_rts.head; l; l = l->next)
		n++;
	pthread_mutex_unlock(&s->ctl.reclaim_rts.mu);
	mtd_runtime_reclaim(&s->ctl);
	s->rts_freed += n;
	return n;
}

unsigned seam_runtimes_freed(struct seam *s)
{
	return s->rts_freed;
}

/* The flush event's turn end (worker.c flush_cb), then the control
 * thread's reclaim. */
void seam_end_turn(struct seam *s)
{
	mtd_worker_end_turn(s->w);
	seam_reclaim(s);
}

/* The timerfd's event (turn.c timers_cb), and the end of its turn. */
static bool run_timers(struct seam *s)
{
	if (!mtd_worker_run_timers(s->w))
		return false;
	seam_end_turn(s);
	return true;
}

void seam_housekeeping(struct seam *s)
{
	struct mtd_pool *p, *next;
	for (p = LIST_FIRST(&s->w->pools); p; p = next) {
		next = LIST_NEXT(p, link);
		mtd_pool_housekeeping(p, mtd_now_ns());
	}
	seam_end_turn(s);
}

/* ---- peers ---------------------------------------------------------------- */

static bool name_is(const uint8_t *name, size_t len, const char *lit)
{
	return len == strlen(lit) && memcmp(name, lit, len) == 0;
}

static void copy_value(char *out, size_t cap, const uint8_t *v, size_t len)
{
	size_t n = len < cap - 1 ? len : cap - 1;
	memcpy(out, v, n);
	out[n] = '\0';
}

/* The app's client session. */
static int cl_on_header(nghttp2_session *ng, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
                        const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
	struct seam_cs *cs = nghttp2_session_get_stream_user_data(ng, frame->hd.stream_id);
	if (!cs)
		return 0;
	if (name_is(name, namelen, "grpc-status")) {
		char v[16];
		copy_value(v, sizeof(v), value, valuelen);
		cs->status = atoi(v);
	} else if (name_is(name, namelen, "grpc-message")) {
		copy_value(cs->message, sizeof(cs->message), value, valuelen);
	}
	return 0;
}

static int cl_on_frame_recv(nghttp2_session *ng, const nghttp2_frame *frame, void *ud)
{
	struct seam_cs *cs = nghttp2_session_get_stream_user_data(ng, frame->hd.stream_id);
	if (!cs)
		return 0;
	if (frame->hd.type == NGHTTP2_HEADERS)
		cs->resp_headers++;
	if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
	    (frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
		cs->ended = true;
	if (frame->hd.type == NGHTTP2_RST_STREAM)
		cs->rst = frame->rst_stream.error_code;
	return 0;
}

static int cl_on_data(nghttp2_session *ng, uint8_t flags, int32_t sid, const uint8_t *data, size_t len, void *ud)
{
	struct seam_cs *cs = nghttp2_session_get_stream_user_data(ng, sid);
	if (cs)
		buf_add(&cs->data, data, len);
	return 0;
}

static int cl_on_close(nghttp2_session *ng, int32_t sid, uint32_t error_code, void *ud)
{
	struct seam_cs *cs = nghttp2_session_get_stream_user_data(ng, sid);
	if (cs)
		cs->closed = true;
	return 0;
}

static ssize_t cs_read(nghttp2_session *ng, int32_t sid, uint8_t *buf, size_t len, uint32_t *flags,
                       nghttp2_data_source *src, void *ud)
{
	struct seam_cs *cs = src->ptr;
	size_t left = cs->req.len - cs->req_sent;
	size_t n = left < len ? left : len;
	if (n)
		memcpy(buf, cs->req.p + cs->req_sent, n);
	cs->req_sent += n;
	if (cs->req_sent == cs->req.len && cs->req_end) {
		*flags |= NGHTTP2_DATA_FLAG_EOF;
		if (cs->req_trailers) {
			nghttp2_nv tr[] = {{(uint8_t *)"x-seam-trailer", (uint8_t *)"1", 14, 1, NGHTTP2_NV_FLAG_NONE}};
			*flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
			ck_assert_int_eq(nghttp2_submit_trailer(ng, sid, tr, 1), 0);
		}
		return (ssize_t)n;
	}
	if (n == 0) {
		cs->req_deferred = true;
		return NGHTTP2_ERR_DEFERRED;
	}
	return (ssize_t)n;
}

/* An endpoint's server session. */
static int sv_on_begin_headers(nghttp2_session *ng, const nghttp2_frame *frame, void *ud)
{
	struct seam_link *l = ud;
	if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	struct seam_ss *ss = calloc(1, sizeof(*ss));
	ck_assert_ptr_nonnull(ss);
	ss->sid = frame->hd.stream_id;
	ss->link = l;
	snprintf(ss->ep, sizeof(ss->ep), "%s", l->addr);
	ss->rst = -1;
	ss->trailer_status = -1;
	*l->s->streams_tail = ss;
	l->s->streams_tail = &ss->next;
	nghttp2_session_set_stream_user_data(ng, ss->sid, ss);
	return 0;
}

static int sv_on_header(nghttp2_session *ng, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
                        const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
	struct seam_ss *ss = nghttp2_session_get_stream_user_data(ng, frame->hd.stream_id);
	if (!ss)
		return 0;
	if (name_is(name, namelen, ":path")) {
		copy_value(ss->path, sizeof(ss->path), value, valuelen);
	} else if (name_is(name, namelen, ":authority")) {
		copy_value(ss->authority, sizeof(ss->authority), value, valuelen);
	} else if (name_is(name, namelen, "grpc-previous-rpc-attempts")) {
		char v[16];
		copy_value(v, sizeof(v), value, valuelen);
		ss->prev_attempts = atoi(v);
	} else if (name_is(name, namelen, "grpc-timeout")) {
		copy_value(ss->timeout, sizeof(ss->timeout), value, valuelen);
	}
	return 0;
}

static int sv_on_frame_recv(nghttp2_session *ng, const nghttp2_frame *frame, void *ud)
{
	struct seam_ss *ss = nghttp2_session_get_stream_user_data(ng, frame->hd.stream_id);
	if (!ss)
		return 0;
	if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
	    (frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
		ss->req_end = true;
	if (frame->hd.type == NGHTTP2_RST_STREAM)
		ss->rst = frame->rst_stream.error_code;
	return 0;
}

static int sv_on_data(nghttp2_session *ng, uint8_t flags, int32_t sid, const uint8_t *data, size_t len, void *ud)
{
	struct seam_ss *ss = nghttp2_session_get_stream_user_data(ng, sid);
	if (ss)
		buf_add(&ss->req, data, len);
	return 0;
}

static int sv_on_close(nghttp2_session *ng, int32_t sid, uint32_t error_code, void *ud)
{
	struct seam_ss *ss = nghttp2_session_get_stream_user_data(ng, sid);
	if (ss)
		ss->closed = true;
	return 0;
}

static ssize_t ss_read(nghttp2_session *ng, int32_t sid, uint8_t *buf, size_t len, uint32_t *flags,
                       nghttp2_data_source *src, void *ud)
{
	struct seam_ss *ss = src->ptr;
	size_t left = ss->resp.len - ss->resp_off;
	size_t n = left < len ? left : len;
	if (n)
		memcpy(buf, ss->resp.p + ss->resp_off, n);
	ss->resp_off += n;
	if (ss->resp_off == ss->resp.len && ss->resp_eof) {
		*flags |= NGHTTP2_DATA_FLAG_EOF;
		if (ss->trailer_status >= 0) {
			char v[16];
			int vl = snprintf(v, sizeof(v), "%d", ss->trailer_status);
			nghttp2_nv nv = {(uint8_t *)"grpc-status", (uint8_t *)v, 11, (size_t)vl, NGHTTP2_NV_FLAG_NONE};
			ck_assert_int_eq(nghttp2_submit_trailer(ng, sid, &nv, 1), 0);
			*flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
		}
		return (ssize_t)n;
	}
	if (n == 0) {
		ss->deferred = true;
		return NGHTTP2_ERR_DEFERRED;
	}
	return (ssize_t)n;
}

#define NV(n, v)                                                                           \
	{                                                                                  \
		(uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE \
	}

static void ss_resume(struct seam_ss *ss)
{
	if (ss->deferred && ss->link->peer) {
		ss->deferred = false;
		nghttp2_session_resume_data(ss->link->peer, ss->sid);
	}
}

void seam_respond_headers(struct seam *s, struct seam_ss *ss)
{
	nghttp2_nv nva[] = {NV(":status", "200"), NV("content-type", "application/grpc")};
	nghttp2_data_provider prd = {.source.ptr = ss, .read_callback = ss_read};
	ck_assert(!ss->resp_submitted);
	ss->resp_submitted = true;
	ck_assert_int_eq(nghttp2_submit_response(ss->link->peer, ss->sid, nva, 2, &prd), 0);
}

void seam_respond_data(struct seam *s, struct seam_ss *ss, const void *msg, size_t len)
{
	uint8_t *m = malloc(len + 5);
	ck_assert_ptr_nonnull(m);
	buf_add(&ss->resp, m, seam_grpc_msg(m, msg, len));
	free(m);
	ss_resume(ss);
}

void seam_respond_trailers(struct seam *s, struct seam_ss *ss, int status)
{
	ss->trailer_status = status;
	ss->resp_eof = true;
	ss_resume(ss);
}

void seam_respond(struct seam *s, struct seam_ss *ss, int status, const void *msg, size_t len)
{
	seam_respond_headers(s, ss);
	seam_respond_data(s, ss, msg, len);
	seam_respond_trailers(s, ss, status);
}

void seam_trailers_only(struct seam *s, struct seam_ss *ss, int status)
{
	char v[16];
	snprintf(v, sizeof(v), "%d", status);
	nghttp2_nv nva[] = {NV(":status", "200"), NV("content-type", "application/grpc"), NV("grpc-status", v)};
	ck_assert(!ss->resp_submitted);
	ss->resp_submitted = true;
	ck_assert_int_eq(nghttp2_submit_response(ss->link->peer, ss->sid, nva, 3, NULL), 0);
}

void seam_reset(struct seam *s, struct seam_ss *ss, uint32_t code)
{
	ck_assert_int_eq(nghttp2_submit_rst_stream(ss->link->peer, NGHTTP2_FLAG_NONE, ss->sid, code), 0);
}

struct seam_ss *seam_stream(struct seam *s, unsigned nth)
{
	struct seam_ss *ss = s->streams;
	while (ss && nth--)
		ss = ss->next;
	return ss;
}

unsigned seam_streams(struct seam *s, const char *addr)
{
	unsigned n = 0;
	for (struct seam_ss *ss = s->streams; ss; ss = ss->next)
		if (!addr || strcmp(ss->ep, addr) == 0)
			n++;
	return n;
}

/* ---- upstream connections (mtd_up_connect wrapped; upstream.c up_ready) ------------ */

static void noop_cb(evutil_socket_t fd, short what, void *arg) {}

static void peer_server_new(struct seam *s, struct seam_link *l)
{
	ck_assert_int_eq(nghttp2_session_server_new(&l->peer, s->server_cbs, l), 0);
	nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 100}};
	ck_assert_int_eq(nghttp2_submit_settings(l->peer, NGHTTP2_FLAG_NONE, iv, 1), 0);
}

/* The transport is up: upstream.c's up_ready, without its SETTINGS timer. */
static void up_ready(struct seam *s, struct seam_link *l)
{
	struct mtd_conn *c = l->c;
	const struct mtd_cfg_downstream *d = &c->w->rt->cfg->downstream;
	ck_assert_int_eq(nghttp2_session_client_new3(&c->ng, c->w->up_cbs, c, c->w->up_opt, &c->w->ng_mem), 0);
	nghttp2_settings_entry iv[] = {
	        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
	        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, d->initial_window_size},
	        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, d->max_header_list_size},
	        {NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1},
	};
	int32_t conn_window =
	        (int32_t)(d->initial_window_size > (1u << 26) / 16 ? (1u << 26) : d->initial_window_size * 16);
	ck_assert_int_eq(nghttp2_submit_settings(c->ng, NGHTTP2_FLAG_NONE, iv, sizeof(iv) / sizeof(iv[0])), 0);
	ck_assert_int_eq(nghttp2_session_set_local_window_size(c->ng, NGHTTP2_FLAG_NONE, 0, conn_window), 0);
	ck_assert_int_eq(mtd_conn_start_io(c), 0);
	c->state = MTD_CONN_READY;
	c->last_active_ns = c->last_read_ns = mtd_now_ns();
	if (l->mode == SEAM_EP_UP)
		peer_server_new(s, l);
	mtd_conn_want_flush(c);
}

struct seam_connects seam_connects;

struct mtd_conn *__wrap_mtd_up_connect(struct mtd_pool *p);
struct mtd_conn *__wrap_mtd_up_connect(struct mtd_pool *p)
{
	struct seam *s = the_seam;
	struct seam_ep *e = ep_of(s, mtd_endpoint_text(p->ep));
	e->connects++;
	/* upstream.c mtd_up_connect's connection, without socket() and
	 * connect(): the fd is an eventfd for conn.c's events. */
	struct mtd_conn *c = calloc(1, sizeof(*c));
	ck_assert_ptr_nonnull(c);
	c->ops = &mtd_up_conn_ops;
	c->state = MTD_CONN_CONNECTING;
	c->w = p->w;
	c->pool = p;
	c->max_streams = p->svc->cfg->upstream.max_concurrent_streams;
	c->tls_gen = p->svc->tls_gen; /* h2c: its policy is fixed at once */
	LIST_INIT(&c->streams);
	snprintf(c->peer, sizeof(c->peer), "%s", mtd_endpoint_text(p->ep));
	c->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	ck_assert_int_ge(c->fd, 0);
	LIST_INSERT_HEAD(&p->conns, c, link);
	p->n_conns++;
	mtd_mx_ep_add(p->ep, conns_open, 1);
	ck_assert_int_eq(mtd_conn_timer_init(c), 0);
	event_assign(&c->rev, c->w->base, c->fd, EV_READ, noop_cb, c);
	event_assign(&c->wev, c->w->base, c->fd, EV_WRITE, noop_cb, c);
	struct seam_link *l = link_new(s, c, false, e->mode, mtd_endpoint_text(p->ep));
	l->connect_due = e->mode == SEAM_EP_UP || e->mode == SEAM_EP_SILENT;
	/* How deep the engine's stack is here, and how many connects are on
	 * it (issue 24: one per endpoint when a refused connect started the
	 * next attempt on its own stack). */
	uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
	if (s->stack_base && s->stack_base > sp && s->stack_base - sp > seam_connects.deepest)
		seam_connects.deepest = s->stack_base - sp;
	if (e->mode == SEAM_EP_REFUSED) {
		/* connect() failed at once: upstream.c closes the connection on
		 * this stack, which moves the calls waiting in the pool on. */
		seam_connects.nested++;
		if (seam_connects.nested > seam_connects.max_nested)
			seam_connects.max_nested = seam_connects.nested;
		mtd_conn_close(c);
		seam_connects.nested--;
		return NULL;
	}
	return c;
}

static struct seam_link *connecting_link(struct seam *s, const char *addr)
{
	for (struct seam_link *l = s->links; l; l = l->next)
		if (!l->down && l->c && l->c->state == MTD_CONN_CONNECTING && strcmp(l->addr, addr) == 0)
			return l;
	ck_abort_msg("no connection to %s is connecting", addr);
	return NULL;
}

void seam_ep_connect(struct seam *s, const char *addr)
{
	struct seam_link *l = connecting_link(s, addr);
	l->mode = SEAM_EP_UP;
	up_ready(s, l);
	seam_end_turn(s);
	seam_run(s);
}

void seam_ep_connect_fail(struct seam *s, const char *addr)
{
	struct seam_link *l = connecting_link(s, addr);
	/* Closed before HTTP/2 was up: upstream.c moves the waiting calls. */
	mtd_conn_close(l->c);
	seam_end_turn(s);
	seam_run(s);
}

struct mtd_pool *seam_pool(struct seam *s, const char *addr)
{
	struct mtd_pool *p;
	LIST_FOREACH(p, &s->w->pools, link)
		if (strcmp(mtd_endpoint_text(p->ep), addr) == 0)
			return p;
	return NULL;
}

/* ---- pumping ---------------------------------------------------------------- */

/* What l's peer sends reaches maitred: one read event (no end of turn). */
static bool deliver(struct seam_link *l)
{
	for (;;) {
		const uint8_t *d;
		ssize_t n = nghttp2_session_mem_send(l->peer, &d);
		ck_assert_int_ge(n, 0);
		if (n == 0)
			break;
		if (l->c)
			buf_add(&l->from_peer, d, (size_t)n);
	}
	if (!l->from_peer.len || !l->c)
		return false;
	mtd_conn_on_readable(l->c);
	return true;
}

static bool pump_link(struct seam *s, struct seam_link *l)
{
	bool moved = false;
	if (l->connect_due) {
		l->connect_due = false;
		if (l->c) {
			up_ready(s, l);
			seam_end_turn(s);
			moved = true;
		}
	}
	if (!l->peer || l->mode != SEAM_EP_UP)
		return moved;
	if (l->to_peer.len) {
		ssize_t rv = nghttp2_session_mem_recv(l->peer, l->to_peer.p, l->to_peer.len);
		ck_assert_msg(rv >= 0, "peer %s: %s", l->addr, nghttp2_strerror((int)rv));
		l->to_peer.len = 0;
		moved = true;
	}
	if (deliver(l)) {
		seam_end_turn(s);
		moved = true;
	}
	return moved;
}

void seam_run(struct seam *s)
{
	uintptr_t base = (uintptr_t)__builtin_frame_address(0);
	if (!s->stack_base || base > s->stack_base)
		s->stack_base = base;
	for (int round = 0;; round++) {
		ck_assert_msg(round < 100000, "the seam does not settle");
		seam_end_turn(s);
		bool moved = run_timers(s);
		for (struct seam_link *l = s->links; l; l = l->next)
			moved |= pump_link(s, l);
		/* A flush still due is a turn the real loop would run. */
		if (!moved && TAILQ_EMPTY(&s->w->dirty) && !s->w->flush_due)
			break;
	}
}

void seam_advance_ms(struct seam *s, int64_t ms)
{
	clock_ns += ms * 1000000;
	mtd_turn_forget(s->w); /* a later turn: its clocks are read again */
	seam_run(s);
}

void seam_timers_mid_turn(struct seam *s, int64_t ms)
{
	clock_ns += ms * 1000000;
	mtd_worker_run_timers(s->w);
}

void seam_deliver(struct seam *s, struct seam_ss *ss)
{
	ck_assert(deliver(ss->link));
}

void seam_deliver_client(struct seam *s)
{
	ck_assert(deliver(s->down));
}

/* ---- the client ---------------------------------------------------------------- */

struct seam_cs *seam_call(struct seam *s, const char *path, const char *timeout, const void *body, size_t len, bool end)
{
	struct seam_cs *cs = calloc(1, sizeof(*cs));
	ck_assert_ptr_nonnull(cs);
	cs->status = -1;
	cs->rst = -1;
	buf_add(&cs->req, body, len);
	cs->req_end = end;
	nghttp2_nv nva[7] = {NV(":method", "POST"),
	                     NV(":scheme", "http"),
	                     NV(":authority", "seam.test"),
	                     NV(":path", path),
	                     NV("content-type", "application/grpc"),
	                     NV("te", "trailers")};
	size_t n = 6;
	if (timeout)
		nva[n++] = (nghttp2_nv)NV("grpc-timeout", timeout);
	nghttp2_data_provider prd = {.source.ptr = cs, .read_callback = cs_read};
	cs->sid = nghttp2_submit_request(s->down->peer, NULL, nva, n, end && len == 0 ? NULL : &prd, cs);
	ck_assert_int_gt(cs->sid, 0);
	cs->next = s->calls;
	s->calls = cs;
	return cs;
}

void seam_send(struct seam *s, struct seam_cs *cs, const void *p, size_t n, bool end)
{
	buf_add(&cs->req, p, n);
	cs->req_end = end;
	if (cs->req_deferred) {
		cs->req_deferred = false;
		ck_assert_int_eq(nghttp2_session_resume_data(s->down->peer, cs->sid), 0);
	}
}

void seam_send_trailers(struct seam *s, struct seam_cs *cs, const void *p, size_t n)
{
	cs->req_trailers = true;
	seam_send(s, cs, p, n, true);
}

void seam_client_gone(struct seam *s)
{
	ck_assert_ptr_nonnull(s->down->c);
	mtd_conn_close(s->down->c);
}

void seam_cancel(struct seam *s, struct seam_cs *cs)
{
	ck_assert_int_eq(nghttp2_submit_rst_stream(s->down->peer, NGHTTP2_FLAG_NONE, cs->sid, NGHTTP2_CANCEL), 0);
}

struct mtd_call *seam_call_of(struct seam *s, const struct seam_cs *cs)
{
	struct mtd_call *call;
	if (!s->down->c)
		return NULL;
	struct mtd_down_stream *ds;
	LIST_FOREACH(ds, &s->down->c->down_streams, link) {
		call = mtd_call_of_stream(ds);
		if (call->down_sid == cs->sid)
			return call;
	}
	return NULL;
}

/* ---- setup and teardown ---------------------------------------------------------- */

static struct mtd_cfg *load(const char *yaml)
{
	struct mtd_cfg *cfg = NULL;
	struct mtd_cfg_errors errs = {0};
	int rc = mtd_cfg_load_buffer("seam.yaml", yaml, strlen(yaml), MTD_CFG_FORMAT_YAML, &cfg, &errs);
	for (size_t i = 0; i < errs.n; i++)
		fprintf(stderr, "seam config: %s\n", errs.msgs[i]);
	ck_assert_int_eq(rc, 0);
	mtd_cfg_errors_clear(&errs);
	return cfg;
}

static void publish(struct seam *s, struct mtd_runtime *rt);

void seam_reload(struct seam *s, const char *yaml)
{
	char err[384];
	struct mtd_runtime *rt = mtd_runtime_reload(&s->ctl, load(yaml), NULL, err, sizeof(err));
	ck_assert_msg(rt != NULL, "reload: %s", err);
	publish(s, rt);
}

void seam_set_endpoints(struct seam *s, size_t si, const char *const *addrs, size_t n)
{
	struct mtd_disc_endpoint eps[8];
	ck_assert_uint_le(n, 8);
	for (size_t i = 0; i < n; i++) {
		char ip[64];
		const char *colon = strrchr(addrs[i], ':');
		ck_assert_ptr_nonnull(colon);
		snprintf(ip, sizeof(ip), "%.*s", (int)(colon - addrs[i]), addrs[i]);
		eps[i] = (struct mtd_disc_endpoint){.address = addrs[i], .weight = 100};
		struct sockaddr_in *sin = (struct sockaddr_in *)&eps[i].sa;
		sin->sin_family = AF_INET;
		sin->sin_port = htons((uint16_t)atoi(colon + 1));
		ck_assert_int_eq(inet_pton(AF_INET, ip, &sin->sin_addr), 1);
		eps[i].salen = sizeof(*sin);
	}
	char err[384];
	bool same;
	struct mtd_runtime *rt = mtd_runtime_with_endpoints(&s->ctl, si, eps, n, &same, err, sizeof(err));
	ck_assert_msg(rt != NULL, "endpoints: %s", same ? "the same set" : err);
	publish(s, rt);
}

bool seam_set_disc(struct seam *s, size_t si, const struct mtd_disc_endpoint *eps, size_t n)
{
	char err[384];
	bool same;
	struct mtd_runtime *rt = mtd_runtime_with_endpoints(&s->ctl, si, eps, n, &same, err, sizeof(err));
	ck_assert_msg(rt != NULL || same, "endpoints: %s", err);
	if (rt == NULL)
		return false;
	publish(s, rt);
	return true;
}

void seam_set_unavailable(struct seam *s, size_t si, const char *reason, bool waiting)
{
	char err[384];
	struct mtd_runtime *rt = mtd_runtime_rebuilt(&s->ctl, si, true, reason, waiting, err, sizeof(err));
	ck_assert_msg(rt != NULL, "rebuilt: %s", err);
	publish(s, rt);
}

/* publish.c mtd_control_publish, for the one worker, and the bell's swap. */
static void publish(struct seam *s, struct mtd_runtime *rt)
{
	struct mtd_runtime *old = s->ctl.rt;
	if (old)
		mtd_runtime_mark_gone(old, rt); /* as mtd_control_publish does */
	s->ctl.rt = rt;
	mtd_ref_get(&rt->ref);
	mtd_runtime_unref(old);
	/* The bell's swap (worker.c take_next_runtime), the slot taken. */
	ck_assert_int_eq(mtd_worker_take_runtime(s->w, rt), 0);
}

static void reclaim_cb(evutil_socket_t fd, short what, void *arg) {}
static void flush_cb(evutil_socket_t fd, short what, void *arg) {}

struct seam *seam_new(const char *yaml)
{
	ck_assert_ptr_null(the_seam);
	struct seam *s = calloc(1, sizeof(*s));
	ck_assert_ptr_nonnull(s);
	the_seam = s;
	memset(&seam_mx, 0, sizeof(seam_mx));
	memset(&seam_connects, 0, sizeof(seam_connects));
	seam_in_on = false;
	s->links_tail = &s->links;
	s->streams_tail = &s->streams;
	s->base = event_base_new();
	ck_assert_ptr_nonnull(s->base);

	/* The control loop's side: mailboxes for the last references. */
	s->ctl.base = s->base;
	s->ctl.n_workers = 1;
	ck_assert_int_eq(mtd_mbox_init(&s->ctl.reclaim_rts, s->base, reclaim_cb, s), 0);
	ck_assert_int_eq(mtd_mbox_init(&s->ctl.reclaim_svcs, s->base, reclaim_cb, s), 0);
	ck_assert_int_eq(mtd_mbox_init(&s->ctl.reclaim_eps, s->base, reclaim_cb, s), 0);
	mtd_runtime_bind(&s->ctl);
	char err[384];
	s->ctl.rt = mtd_runtime_new(&s->ctl, load(yaml), 1, err, sizeof(err));
	ck_assert_msg(s->ctl.rt != NULL, "runtime: %s", err);

	/* The worker, as mtd_worker_new makes it (no listener, no thread). */
	struct mtd_worker *w = calloc(1, sizeof(*w));
	ck_assert_ptr_nonnull(w);
	s->w = w;
	mtd_ref_get(&s->ctl.rt->ref); /* the worker's */
	w->hold = mtd_worker_hold_new(w, s->ctl.rt);
	ck_assert_ptr_nonnull(w->hold);
	w->id = 0;
	w->rt = s->ctl.rt;
	LIST_INIT(&w->pools);
	LIST_INIT(&w->bg_calls);
	LIST_INIT(&w->parked);
	LIST_INIT(&w->lingering);
	w->listen_fd = -1;
	w->timer_fd = -1;
	w->rng = 0x9e3779b97f4a7c15ull;
	w->slab.passthrough = true; /* exact frees for ASan and valgrind alike */
	s->mem_down.slab = s->mem_up.slab = &w->slab;
	w->ng_mem = (nghttp2_mem){&s->mem_up, ng_malloc, ng_free, ng_calloc, ng_realloc};
	TAILQ_INIT(&w->dirty);
	TAILQ_INIT(&w->graveyard);
	LIST_INIT(&w->downs);
	w->base = s->base;
	w->rbuf_len = 64 * 1024;
	w->rbuf = malloc(w->rbuf_len);
	ck_assert_ptr_nonnull(w->rbuf);
	/* Its events: the flush is scheduled for real, and ended by
	 * seam_end_turn; the timers' timerfd is set for real, on the seam's
	 * clock, and never read (seam_run runs them). */
	ck_assert_int_eq(event_assign(&w->flush_ev, w->base, -1, 0, flush_cb, w), 0);
	ck_assert_int_eq(mtd_worker_turn_init(w), 0);
	ck_assert_int_eq(mtd_down_setup(w, &mtd_call_down_port), 0);
	ck_assert_int_eq(mtd_up_setup(w), 0);

	/* The peers' callbacks. */
	ck_assert_int_eq(nghttp2_session_callbacks_new(&s->client_cbs), 0);
	nghttp2_session_callbacks_set_on_header_callback(s->client_cbs, cl_on_header);
	nghttp2_session_callbacks_set_on_frame_recv_callback(s->client_cbs, cl_on_frame_recv);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(s->client_cbs, cl_on_data);
	nghttp2_session_callbacks_set_on_stream_close_callback(s->client_cbs, cl_on_close);
	ck_assert_int_eq(nghttp2_session_callbacks_new(&s->server_cbs), 0);
	nghttp2_session_callbacks_set_on_begin_headers_callback(s->server_cbs, sv_on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(s->server_cbs, sv_on_header);
	nghttp2_session_callbacks_set_on_frame_recv_callback(s->server_cbs, sv_on_frame_recv);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(s->server_cbs, sv_on_data);
	nghttp2_session_callbacks_set_on_stream_close_callback(s->server_cbs, sv_on_close);

	/* The app's connection: downstream.c accepts it (its own session on
	 * the seam's allocator for the client side, so that #5 can fail it). */
	int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	w->ng_mem.mem_user_data = &s->mem_down;
	ck_assert(mtd_worker_admit(w)); /* as worker.c's accept does */
	ck_assert_int_eq(mtd_down_accept(w, fd), 0);
	w->ng_mem.mem_user_data = &s->mem_up;
	s->down = link_new(s, LIST_FIRST(&w->downs), true, SEAM_EP_UP, "client");
	ck_assert_int_eq(nghttp2_session_client_new(&s->down->peer, s->client_cbs, s), 0);
	ck_assert_int_eq(nghttp2_submit_settings(s->down->peer, NGHTTP2_FLAG_NONE, NULL, 0), 0);
	seam_run(s);
	return s;
}

void seam_free(struct seam *s)
{
	wall_step_ms = 0; /* the next test's wall clock is the real one (CK_FORK=no) */
	struct mtd_worker *w = s->w;
	seam_run(s);
	/* mtd_worker_free's close: what is left fails, then is freed. */
	struct mtd_conn *c;
	LIST_FOREACH(c, &w->downs, link)
		c->in = NULL; /* seam_client_inbound's stand-in, not inbound.c's */
	seam_in_on = false;
	mtd_worker_close_all(w);
	/* Every call is gone: every hold but the worker's own went, and
	 * nobody uses that one; every block of the engine came back. */
	ck_assert_uint_eq(w->n_holds, 1);
	ck_assert_uint_eq(w->hold->h.users, 0);
	ck_assert_uint_eq(n_blocks, 0);
	ck_assert_uint_eq(unknown_frees, 0);
	ck_assert_uint_eq(w->replay_bytes, 0);
	ck_assert_uint_eq(w->n_bg, 0);
	ck_assert_int_eq(s->mem_down.live, 0);
	ck_assert_int_eq(s->mem_up.live, 0);
	ck_assert_uint_eq(w->timers.n, 0);
	event_del(&w->flush_ev);
	mtd_worker_turn_fini(w);
	mtd_up_teardown(w);
	mtd_down_teardown(w);
	mtd_slab_drain(&w->slab);
	mtd_timers_free(&w->timers);
	while (w->n_spare_out) /* idle connections gave their output buffers back (conn.c) */
		free(w->spare_out[--w->n_spare_out]);
	free(w->rbuf);
	free(w->ready);
	mtd_worker_hold_release(w, w->hold);
	ck_assert_uint_eq(w->n_holds, 0);
	free(w);
	/* The control thread's end: its snapshot goes, then everything. */
	mtd_runtime_unref(s->ctl.rt);
	seam_reclaim(s);
	mtd_runtime_bind(NULL);
	mtd_mbox_fini(&s->ctl.reclaim_rts);
	mtd_mbox_fini(&s->ctl.reclaim_svcs);
	mtd_mbox_fini(&s->ctl.reclaim_eps);
	/* The peers. */
	struct seam_link *l, *ln;
	for (l = s->links; l; l = ln) {
		ln = l->next;
		if (l->peer)
			nghttp2_session_del(l->peer);
		buf_free(&l->to_peer);
		buf_free(&l->from_peer);
		free(l);
	}
	struct seam_cs *cs, *cn;
	for (cs = s->calls; cs; cs = cn) {
		cn = cs->next;
		buf_free(&cs->req);
		buf_free(&cs->data);
		free(cs);
	}
	struct seam_ss *ss, *sn;
	for (ss = s->streams; ss; ss = sn) {
		sn = ss->next;
		buf_free(&ss->req);
		buf_free(&ss->resp);
		free(ss);
	}
	struct seam_ep *e, *en;
	for (e = s->eps; e; e = en) {
		en = e->next;
		free(e);
	}
	nghttp2_session_callbacks_del(s->client_cbs);
	nghttp2_session_callbacks_del(s->server_cbs);
	event_base_free(s->base);
	free(s);
	the_seam = NULL;
}

/* Tracing: the seam's snapshots trace nothing (rt->tracer NULL), so
 * neither is reached; they link call/trace.c. */
int mtd_metrics_call_code(const struct mtd_call *call)
{
	(void)call;
	return 0;
}

bool mtd_tracer_submit(struct mtd_tracer *tr, unsigned worker, const struct mtd_span *s)
{
	(void)tr;
	(void)worker;
	(void)s;
	return false;
}
