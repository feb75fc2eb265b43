/* The data plane's types: workers, connections, pools, calls, and the
 * runtime snapshot they read. One header so the whole picture is in one
 * place; the functions are grouped by the file that defines them.
 *
 * Threads: every object below except struct mtd_runtime (and what it holds)
 * belongs to exactly one worker thread and is touched only by it. The
 * runtime snapshot is immutable and shared; endpoint stats inside it are
 * atomics (lb-t.h).
 *
 * Ownership: a worker owns its listener, its downstream connections, its
 * pools and their upstream connections. A call is owned jointly by the
 * HTTP/2 streams that reference it and is freed when neither does (see the
 * state diagram in call.c).
 */
#ifndef MTD_SIDECAR_H
#define MTD_SIDECAR_H

#include <stdbool.h>
#include <stdint.h>
#include <pthread.h>
#include <sys/queue.h>
#include <sys/types.h>

#include <event2/event.h>
#include <event2/event_struct.h>
#include <nghttp2/nghttp2.h>

#include "config/config.h"
#include "core/bufq.h"
#include "core/slab.h"
#include "grpc/grpc.h"
#include "lb/lb.h"
#include "route/route.h"
#include "sidecar/transport.h"

struct mtd_worker;
struct mtd_conn;
struct mtd_call;
struct mtd_pool;
struct ssl_ctx_st;
struct ssl_st;
struct ssl_session_st;

/* ---- runtime snapshot (runtime.c) ------------------------------------ */

struct mtd_rt_endpoint {
	const struct mtd_cfg_endpoint *cfg;
	struct mtd_lb_stats stats; /* shared by every worker */
	size_t slot;               /* index of this endpoint's pool in a worker */
};

struct mtd_rt_method {
	const struct mtd_cfg_method *cfg;
	struct mtd_lb_picker *picker;
};

struct mtd_rt_service {
	const struct mtd_cfg_service *cfg;
	struct mtd_rt_endpoint *eps;
	struct mtd_lb_endpoint *lb_eps; /* parallel to eps, what pickers see */
	size_t n_eps;
	struct mtd_lb_picker *picker;  /* the service-level policy */
	struct mtd_rt_method *methods; /* parallel to cfg->methods */
	struct ssl_ctx_st *ssl_ctx;    /* NULL = h2c */
};

struct mtd_runtime {
	struct mtd_cfg *cfg; /* owned */
	struct mtd_route_table *routes;
	struct mtd_rt_service *services; /* parallel to cfg->services */
	size_t n_slots;                  /* endpoints over all services */
};

/* Build the runtime for cfg (takes ownership of cfg, also on failure).
 * Errors (e.g. an unreadable certificate) are written to err. */
struct mtd_runtime *mtd_runtime_new(struct mtd_cfg *cfg, char *err, size_t errlen);
void mtd_runtime_free(struct mtd_runtime *rt);
/* Background strategy work (Ribbon-style weight refresh); control thread. */
void mtd_runtime_tick(struct mtd_runtime *rt);

/* ---- connections (conn.c) -------------------------------------------- */

enum mtd_conn_kind { MTD_CONN_DOWN, MTD_CONN_UP };

/* Upstream connection states:
 *
 *   CONNECTING --tcp up--> HANDSHAKE --TLS done--> READY --GOAWAY--> DRAINING
 *       |     (h2c skips HANDSHAKE)                  |                   |
 *       +------------- error / timeout --------------+-----> CLOSED <----+
 *
 * READY: new streams may start while streams < max_streams.
 * DRAINING: no new streams; closes when its last stream ends.
 * CLOSED: no fd, no events; freed by the worker at the end of the turn.
 */
enum mtd_conn_state {
	MTD_CONN_CONNECTING,
	MTD_CONN_HANDSHAKE,
	MTD_CONN_READY,
	MTD_CONN_DRAINING,
	MTD_CONN_CLOSED,
};

LIST_HEAD(mtd_call_list, mtd_call);
TAILQ_HEAD(mtd_call_tailq, mtd_call);

struct mtd_conn {
	enum mtd_conn_kind kind;
	enum mtd_conn_state state;
	struct mtd_worker *w;
	int fd;
	const struct mtd_xprt_ops *xprt; /* NULL = plain TCP (transport.h) */
	struct ssl_st *ssl;              /* TLS only */
	bool tls_up;                     /* TLS handshake completed */
	bool tls_drained;                /* the last SSL_read found the socket empty */
	nghttp2_session *ng;
	struct event rev, wev;   /* fd readable / writable */
	struct event timer;      /* connect timeout (upstream) */
	bool want_write_on_read; /* TLS asked for writability to read */
	bool want_read_on_write; /* TLS asked for readability to write */
	bool read_paused;        /* output backed up: stop reading */
	int32_t max_sid;         /* highest stream with a call (downstream) */
	uint32_t glitches;       /* empty/invalid frames (downstream) */
	bool in_dirty;
	TAILQ_ENTRY(mtd_conn) dirty_link;
	LIST_ENTRY(mtd_conn) link; /* worker's downstream list or pool's list */
	/* Pending output: out[out_off, out_len). */
	uint8_t *out;
	size_t out_off, out_len, out_cap;
	struct mtd_call_list calls; /* calls with a stream on this conn */
	uint32_t n_streams;         /* streams open (calls list length) */
	int64_t last_active_ns;     /* last stream end or start, for idle */
	/* upstream only */
	struct mtd_pool *pool;
	uint32_t max_streams; /* min(peer SETTINGS, config cap) */
	bool settings_seen;   /* the peer's first SETTINGS arrived */
	int64_t ping_sent_ns; /* 0 = no keepalive PING outstanding */
	int64_t last_read_ns;
	char peer[64]; /* "127.0.0.1:50051" for messages */
};

/* Mark c as having output to flush at the end of this event-loop turn. */
void mtd_conn_want_flush(struct mtd_conn *c);
/* Read from the socket into the session. false when c was closed. */
bool mtd_conn_on_readable(struct mtd_conn *c);
/* Write pending output and whatever the session has. 0 or -errno (closed). */
int mtd_conn_flush(struct mtd_conn *c);
/* Register c's fd with the worker's base (read interest). */
int mtd_conn_start_io(struct mtd_conn *c);
/* Tear down fd and events now; the memory is freed at the end of the turn. */
void mtd_conn_close(struct mtd_conn *c);
/* Free a CLOSED conn (worker, end of turn). */
void mtd_conn_free(struct mtd_conn *c);

/* ---- downstream: the local app's h2c connections (downstream.c) ------ */

int mtd_down_accept(struct mtd_worker *w, int fd);
/* Tell the client to go away (SIGTERM drain): GOAWAY, finish streams. */
void mtd_down_shutdown(struct mtd_conn *c);
/* Called when a call's downstream side may send more (response data). */
void mtd_down_resume(struct mtd_call *call);
/* c is closing: detach its calls, leave the worker's list. */
void mtd_down_on_close(struct mtd_conn *c);

/* ---- pools and upstream connections (pool.c, upstream.c) -------------- */

struct mtd_pool {
	struct mtd_worker *w;
	const struct mtd_rt_service *svc; /* for TLS ctx and upstream settings */
	struct mtd_rt_endpoint *ep;
	LIST_HEAD(, mtd_conn) conns;
	uint32_t n_conns;
	struct mtd_call_tailq pending; /* waiting for a stream slot */
	uint32_t n_pending;
	struct ssl_session_st *tls_session; /* to resume with */
	bool failing;                       /* a connect failure is being handled */
	/* Connect failures in a row, and until when new calls avoid this
	 * endpoint (doubling from 250 ms to 10 s; reset by a connect). */
	uint32_t connect_failures;
	int64_t backoff_ns, retry_at_ns;
};

/* The pool of endpoint ep (service svc) on worker w, created on first use. */
struct mtd_pool *mtd_pool_get(struct mtd_worker *w, const struct mtd_rt_service *svc, struct mtd_rt_endpoint *ep);
void mtd_pool_free(struct mtd_pool *p);
/* True while the pool's endpoint failed its last connect and no connection
 * of it is usable: new calls should go elsewhere if they can. */
bool mtd_pool_backing_off(const struct mtd_pool *p, int64_t now_ns);
/* Record a failed / successful connect (backoff, and logging once per
 * outage instead of once per attempt). */
void mtd_pool_connect_failed(struct mtd_pool *p, const char *reason);
void mtd_pool_connect_succeeded(struct mtd_pool *p);
/* Queue call for a stream on this pool; it is started when a connection
 * has room, or failed (UNAVAILABLE / RESOURCE_EXHAUSTED) if none can. */
void mtd_pool_enqueue(struct mtd_pool *p, struct mtd_call *call);
/* Remove a call still waiting in the pool (cancelled, deadline). */
void mtd_pool_dequeue(struct mtd_call *call);
/* A connection gained room (ready, stream closed) or went away. */
void mtd_pool_dispatch(struct mtd_pool *p);
/* The worker's 1 s housekeeping for one pool: idle close, keepalive. */
void mtd_pool_housekeeping(struct mtd_pool *p, int64_t now_ns);

struct mtd_conn *mtd_up_connect(struct mtd_pool *p);
/* Open the call's stream on c. 0, or -errno (the conn cannot take it). */
int mtd_up_submit(struct mtd_conn *c, struct mtd_call *call);
/* Called when a call's upstream side may send more (request data). */
void mtd_up_resume(struct mtd_call *call);
/* c is closing: fail its calls, leave the pool, let the pool dispatch. */
void mtd_up_on_close(struct mtd_conn *c);

/* ---- calls (call.c) --------------------------------------------------- */

/* Header storage of one HEADERS block: nv entries pointing into `mem`.
 * Memory comes from the owning worker's slab. */
struct mtd_headers {
	struct mtd_slab *slab;
	nghttp2_nv *nv;
	size_t n, cap;
	uint8_t *mem;
	size_t mem_len, mem_cap;
	size_t budget_used; /* name + value + 32 per field */
};

enum mtd_call_state {
	MTD_CALL_HEADERS,  /* reading the request headers */
	MTD_CALL_WAIT_KEY, /* hashing a message field: waiting for message 1 */
	MTD_CALL_PENDING,  /* picked, waiting in a pool for a stream */
	MTD_CALL_OPEN,     /* upstream stream open, relaying */
	MTD_CALL_DONE,     /* response finished or failed; draining streams */
};

struct mtd_call {
	struct mtd_worker *w;
	enum mtd_call_state state;
	/* Downstream side. */
	struct mtd_conn *down; /* NULL once the stream closed */
	int32_t down_sid;
	struct mtd_headers req_hdrs;
	/* Routing. */
	const struct mtd_rt_service *svc;
	struct mtd_lb_picker *picker;
	const struct mtd_cfg_hash_key *hash_key;
	struct mtd_rt_endpoint *ep;
	int ep_idx;
	/* Endpoints this call already failed on (bitmap over the service's
	 * endpoints): inline up to 64, else allocated. */
	uint64_t tried_inline;
	uint64_t *tried;
	uint32_t n_tried;
	char *last_failure;
	uint8_t *key_copy; /* the hash key, for re-picks */
	size_t key_copy_len;
	int64_t start_ns;
	int64_t deadline_ns; /* 0 = none */
	struct event deadline_ev;
	bool deadline_armed;
	/* Upstream side. */
	struct mtd_pool *pool;
	struct mtd_conn *up; /* NULL until open / once closed */
	int32_t up_sid;
	TAILQ_ENTRY(mtd_call) pending_link;
	LIST_ENTRY(mtd_call) down_link, up_link;
	/* Request bytes: downstream DATA -> upstream DATA. */
	struct mtd_bufq req;
	struct mtd_grpc_scanner req_scan;
	bool req_eof;          /* client sent END_STREAM */
	bool req_deferred;     /* upstream data provider waiting */
	size_t req_unconsumed; /* received but not yet consumed */
	/* First-message capture for a hash key on a message field. */
	uint8_t *key_msg;
	uint32_t key_msg_have;
	bool key_ready; /* captured all we will read of it */
	bool key_compressed;
	/* Response. */
	struct mtd_headers resp_hdrs;
	struct mtd_headers resp_trailers;
	bool resp_headers_in;   /* upstream response headers complete */
	bool resp_headers_sent; /* we submitted headers downstream */
	bool resp_eof;          /* upstream finished (trailers or synth) */
	bool resp_deferred;
	bool resp_done; /* trailers / END_STREAM submitted downstream */
	struct mtd_bufq resp;
	struct mtd_grpc_scanner resp_scan;
	size_t resp_unconsumed;
	bool outcome_reported;
	bool up_ok; /* upstream answered with trailers */
};

/* A stream's request headers are complete: route, pick, enqueue. */
void mtd_call_start(struct mtd_call *call);
/* Request DATA from the client. */
void mtd_call_on_req_data(struct mtd_call *call, const uint8_t *p, size_t n);
void mtd_call_on_req_end(struct mtd_call *call);
/* The downstream stream closed (error_code from RST or NO_ERROR). */
void mtd_call_on_down_close(struct mtd_call *call, uint32_t error_code);
/* The upstream stream's response headers / data / trailers / close. */
void mtd_call_on_resp_headers(struct mtd_call *call, bool end_stream);
void mtd_call_on_resp_data(struct mtd_call *call, const uint8_t *p, size_t n);
void mtd_call_on_resp_trailers(struct mtd_call *call);
void mtd_call_on_up_close(struct mtd_call *call, uint32_t error_code);
/* The call could not get or keep an upstream stream (before or after it
 * opened): end it with status/message unless the response already ended. */
void mtd_call_fail(struct mtd_call *call, enum mtd_grpc_status status, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
/* The call's endpoint could not be reached and nothing of the call was
 * sent: pick another endpoint (never one already tried) or fail. */
void mtd_call_retry_elsewhere(struct mtd_call *call, const char *reason);
/* Free if neither stream references the call any more. */
void mtd_call_maybe_free(struct mtd_call *call);

/* Header helpers (call.c). 0 or -ENOMEM. */
int mtd_headers_add(struct mtd_headers *h, const uint8_t *name, size_t nlen, const uint8_t *value, size_t vlen);
void mtd_headers_finish(struct mtd_headers *h); /* fix up nv pointers */
void mtd_headers_clear(struct mtd_headers *h);
const nghttp2_nv *mtd_headers_find(const struct mtd_headers *h, const char *name);

/* Data-provider read callbacks (call.c). */
ssize_t mtd_call_read_req(nghttp2_session *s, int32_t sid, uint8_t *buf, size_t len, uint32_t *flags,
                          nghttp2_data_source *src, void *ud);
ssize_t mtd_call_read_resp(nghttp2_session *s, int32_t sid, uint8_t *buf, size_t len, uint32_t *flags,
                           nghttp2_data_source *src, void *ud);

/* ---- worker (worker.c) ------------------------------------------------ */

struct mtd_worker {
	unsigned id;
	struct event_base *base;
	const struct mtd_runtime *rt;
	int listen_fd;
	struct event listen_ev;
	struct event flush_ev;        /* runs the dirty list */
	struct event housekeeping_ev; /* 1 s timer */
	struct event drain_ev;        /* activated by the main thread */
	struct event stop_ev;         /* activated by the main thread */
	TAILQ_HEAD(, mtd_conn) dirty;
	LIST_HEAD(, mtd_conn) downs;
	uint32_t n_downs;
	TAILQ_HEAD(, mtd_conn) graveyard;
	struct mtd_pool **pools; /* by endpoint slot, lazily created */
	nghttp2_session_callbacks *down_cbs, *up_cbs;
	nghttp2_option *down_opt, *up_opt;
	struct mtd_slab slab; /* recycled small blocks (calls, nghttp2) */
	nghttp2_mem ng_mem;   /* nghttp2's allocations go to slab */
	uint8_t *rbuf;        /* shared read buffer */
	size_t rbuf_len;
	uint64_t rng;
	bool draining;
	uint64_t n_calls; /* calls alive */
	pthread_t thread;
};

/* Per-worker nghttp2 callbacks and options (downstream.c / upstream.c). */
int mtd_down_setup(struct mtd_worker *w);
void mtd_down_teardown(struct mtd_worker *w);
int mtd_up_setup(struct mtd_worker *w);
void mtd_up_teardown(struct mtd_worker *w);

struct mtd_worker *mtd_worker_new(unsigned id, const struct mtd_runtime *rt, int listen_fd);
int mtd_worker_start(struct mtd_worker *w);
/* Thread-safe: ask the worker to drain (GOAWAY everyone) / stop now. */
void mtd_worker_drain(struct mtd_worker *w);
void mtd_worker_stop(struct mtd_worker *w);
/* Free a worker whose thread has ended (or never started). */
void mtd_worker_free(struct mtd_worker *w);
/* Schedule the end-of-turn flush. */
void mtd_worker_schedule_flush(struct mtd_worker *w);
/* Move a closed conn to the graveyard (freed at the end of the turn). */
void mtd_worker_bury(struct mtd_worker *w, struct mtd_conn *c);

/* Monotonic and wall clocks. */
int64_t mtd_now_ns(void);
int64_t mtd_wall_ms(void);

#endif
