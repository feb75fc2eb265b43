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
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/queue.h>
#include <sys/types.h>

#include <event2/event.h>
#include <event2/event_struct.h>
#include <nghttp2/nghttp2.h>

#include "config/config.h"
#include "core/timers.h"
#include "fault/fault.h"
#include "core/bufq.h"
#include "core/slab.h"
#include "grpc/grpc.h"
#include "health/outlier.h"
#include "lb/lb.h"
#include "discovery/discovery.h"
#include "route/route.h"
#include "sidecar/control.h"
#include "sidecar/mailbox.h"
#include "sidecar/transport.h"
#include "sidecar/metrics.h"

struct mtd_worker;
struct mtd_control;
struct mtd_register;
struct mtd_conn;
struct mtd_call;
struct mtd_attempt;
struct mtd_pool;
struct mtd_hc_probe;
struct ssl_ctx_st;
struct ssl_st;
struct ssl_session_st;

/* ---- runtime snapshots (runtime.c) ------------------------------------ */

/* Snapshots and their reclaim (issue 7; HACKING.md "Snapshots"):
 *
 *   mtd_runtime  --refs-->  mtd_rt_service  --refs-->  mtd_endpoint
 *   (config, routes,        (one service's endpoint    (an identity: its stats,
 *    one service snapshot    set and pickers; shared    warmup start and
 *    per service)            by runtimes while its      per-worker pools live
 *                            endpoints do not change)   as long as it stays)
 *
 * All three are immutable once published (except the atomics) and carry a
 * struct mtd_disc_ref. The control thread holds the current runtime; each
 * worker holds the runtime it serves and, per runtime, a hold counting the
 * calls routed with it (lib/discovery/discovery.h: the reclaim rule); a
 * pool holds its service snapshot and its endpoint. An object whose last
 * reference goes is freed on the control thread (pickers are freed there,
 * lb.h), at its next turn. */

/* One endpoint identity (lib/discovery/discovery-t.h). */
struct mtd_endpoint {
	struct mtd_disc_ref ref;
	char *key;                 /* registry key, or NULL */
	struct mtd_cfg_addr addr;  /* owned copies: text (the id pickers hash), host (SNI default), sa */
	int64_t start_ms;          /* warmup start: the record's, or when first seen */
	struct mtd_lb_stats stats; /* shared by every worker; survives set changes */
	struct mtd_mx_endpoint mx; /* connection figures, shared (metrics.h) */
	/* Newest runtime generation whose snapshot holds this identity: a
	 * worker serving generation g retires the pools of identities with
	 * last_gen < g (removed). Written by the control thread before it
	 * publishes g. */
	_Atomic uint64_t last_gen;
	struct mtd_pool **pools; /* [n_workers]: slot i is worker i's, only it touches it */
	unsigned n_workers;
	/* Bit i: worker i (< 64) has a connection to it that took the peer's
	 * SETTINGS and is not closed; set and cleared by that worker (pool.c),
	 * read by health.c to run a check where a connection already is. */
	_Atomic uint64_t pooled;
	/* Active health checks (health.c) found it unhealthy; control thread
	 * writes it (from the results workers send back), and each snapshot's
	 * unhealthy bitmap starts from it. */
	bool hc_down;
	/* When it last came back (active checks SERVING again, or its
	 * ejection ended), 0 = never: its warmup restarts from then
	 * (mtd_runtime_rewarm). Control thread. */
	int64_t returned_ms;
	struct mtd_mbox_link reclaim; /* in the control thread's reclaim_eps */
};

struct mtd_rt_method {
	const struct mtd_cfg_method *cfg;
	struct mtd_lb_picker *picker;
	struct mtd_lb_layer *layer; /* NULL unless subset/locality/routing apply */
	/* outlier_detection.method_scoped: this method's own ejection state
	 * over the snapshot's endpoints (owned); else NULL (the service's). */
	struct mtd_outlier_set *outliers;
};

/* Calls of a service in flight and waiting, over every worker (circuit
 * breaking); shared by the snapshots of one service, like the budget. */
struct mtd_rt_load {
	struct mtd_disc_ref ref;
	_Atomic uint32_t calls;
	_Atomic uint32_t pending;
};

/* Endpoints of one snapshot that active health checks found unhealthy
 * (health.c): bit i of down_bits[i / 64]. Written by the control thread,
 * read by pickers (atomics). */
struct mtd_rt_hc {
	_Atomic uint32_t n_down;
	_Atomic uint64_t down_bits[]; /* (n_eps + 63) / 64 words */
};

/* Per snapshot attributes of an endpoint that may change while it stays. */
struct mtd_rt_epattr {
	char *zone;                 /* NULL = none */
	struct mtd_disc_meta *meta; /* owned copies */
	size_t n_meta;
};

/* One service's snapshot: its endpoint set and the pickers built on it. */
struct mtd_rt_service {
	struct mtd_disc_ref ref;
	struct mtd_cfg_box *cfgbox; /* keeps cfg alive */
	const struct mtd_cfg_service *cfg;
	struct mtd_endpoint **eps;      /* references held */
	struct mtd_lb_endpoint *lb_eps; /* parallel to eps, what pickers see (weights) */
	struct mtd_rt_epattr *attrs;    /* parallel to eps, or NULL when none has any */
	size_t n_eps;
	struct mtd_lb_picker *picker; /* the service-level policy */
	/* The routing layer (lib/lb/layer.c) over the same endpoints, when
	 * the service uses subset, locality or routing; calls then pick,
	 * begin and end through it instead of picker. NULL otherwise. */
	struct mtd_lb_layer *layer;
	struct mtd_rt_method *methods; /* parallel to cfg->methods */
	struct ssl_ctx_st *ssl_ctx;    /* NULL = h2c (a reference of its own) */
	char *unavailable;             /* why the set is empty (UNAVAILABLE message), or NULL */
	/* retry_budget's window: shared by every worker (atomics) and by the
	 * snapshots of one service (it goes on across changes and reloads). */
	struct mtd_fault_budget *budget;
	struct mtd_rt_budget *budget_box;
	/* Ejection state over eps (outlier_detection), owned; NULL = none. */
	struct mtd_outlier_set *outliers;
	struct mtd_rt_load *load; /* reference held */
	struct mtd_rt_hc *hc;     /* owned; NULL = no health_check */
	struct mtd_mbox_link reclaim; /* in the control thread's reclaim_svcs */
};

/* A retry budget shared by the snapshots of one service. */
struct mtd_rt_budget {
	struct mtd_disc_ref ref;
	struct mtd_fault_budget b;
};

/* A config shared by the snapshots built from it. */
struct mtd_cfg_box {
	struct mtd_disc_ref ref;
	struct mtd_cfg *cfg; /* owned */
};

struct mtd_runtime {
	struct mtd_disc_ref ref;
	uint64_t gen; /* 1, 2, ...: every published change */
	struct mtd_cfg_box *cfgbox;
	struct mtd_cfg *cfg; /* = cfgbox->cfg */
	struct mtd_route_table *routes;
	struct mtd_rt_service **services; /* parallel to cfg->services, references held */
	struct mtd_control *ctl;
	struct mtd_mbox_link reclaim; /* in the control thread's reclaim_rts */
};

/* Build the first runtime for cfg (takes ownership of cfg, also on
 * failure), for a process of n_workers workers. Errors (e.g. an unreadable
 * certificate) are written to err. */
struct mtd_runtime *mtd_runtime_new(struct mtd_control *ctl, struct mtd_cfg *cfg, unsigned n_workers, char *err,
                                    size_t errlen);
/* Drop one reference on a runtime / service snapshot / endpoint: any
 * thread. The last one queues the object for the control thread. */
void mtd_runtime_unref(struct mtd_runtime *rt);
void mtd_rt_service_unref(struct mtd_rt_service *s);
void mtd_endpoint_unref(struct mtd_endpoint *ep);
/* Background strategy work (Ribbon-style weight refresh), outlier ticks
 * (an endpoint whose ejection ended restarts its warmup); control thread. */
void mtd_runtime_tick(struct mtd_runtime *rt);
/* Endpoints eps[0..n) of service si came back (issue 8 §3: "SERVING brings
 * it back through warmup"): when the service (or one of its methods) has a
 * warmup window, their ramp restarts now, in a new snapshot of the same
 * set; else nothing. 0 or -errno (the set stays as it was). Control thread. */
int mtd_runtime_rewarm(struct mtd_control *ctl, size_t si, struct mtd_endpoint *const *eps, size_t n);

/* ---- the control thread (runtime.c, main.c) --------------------------- */

struct mtd_control {
	struct event_base *base;
	struct mtd_runtime *rt; /* current: the one every worker gets next */
	struct mtd_worker **workers;
	unsigned n_workers;
	uint64_t next_gen;
	/* Objects whose last reference went on any thread, freed at the
	 * control thread's next turn (mailbox.h; each one's event runs
	 * mtd_control_reclaim, which empties all three). */
	struct mtd_mbox reclaim_rts;
	struct mtd_mbox reclaim_svcs;
	struct mtd_mbox reclaim_eps;
	/* Endpoint sources of the current config: one per service, or NULL. */
	const struct mtd_disc_source_ops **src_ops;
	void **src_state;
	size_t n_src;
	/* main.c: drain, reload, self-registration. */
	bool draining;
	int drain_signal;
	const char *drain_why;     /* "SIGTERM", "SIGINT", "POST /drain" */
	bool listening;            /* every worker's listener is up (admin /ready) */
	struct mtd_register *reg;  /* Config.register, NULL without */
	struct mtd_health *health; /* active health checks (health.c) */
	struct event *drain_timer;
	const char *config_path; /* NULL = embedded default (no reload) */
	const char *config_base; /* its file name, for inotify events */
	uint64_t config_hash;    /* content last loaded (inotify: reload on change) */
	int watch_fd;            /* inotify, -1 = none */
	struct event *watch_ev, *watch_settle;
};

int mtd_control_init(struct mtd_control *ctl);
/* Free everything queued for reclaim (control thread, or at exit). */
void mtd_control_reclaim(struct mtd_control *ctl);
void mtd_control_fini(struct mtd_control *ctl);
/* Make rt (a reference transferred) the current runtime and hand it to
 * every worker. Control thread. */
void mtd_control_publish(struct mtd_control *ctl, struct mtd_runtime *rt);
/* A runtime for a reloaded config (ownership of cfg taken, also on
 * failure): every service whose name was there before keeps the
 * identities (stats, warmup start, connections) of the endpoints that stay;
 * a DNS or etcd service whose source settings did not change keeps its
 * current endpoint set until its source reports. NULL + err on failure
 * (the running one stays). Control thread. */
struct mtd_runtime *mtd_runtime_reload(struct mtd_control *ctl, struct mtd_cfg *cfg, char *err, size_t errlen);
/* The DNS sources (dns.c): discovery.dns, and static endpoints written
 * with a host name. */
extern const struct mtd_disc_source_ops mtd_dns_source_ops;
extern const struct mtd_disc_source_ops mtd_dns_static_source_ops;
/* Host is an IPv4/IPv6 literal. */
bool mtd_rt_host_is_literal(const char *host);
/* "ip:port" / "[v6]:port" of sa into buf (64 bytes are enough). */
const char *mtd_rt_numeric(const struct sockaddr_storage *sa, char *buf, size_t size);
/* Start / stop the endpoint sources (DNS, etcd) of the current config. */
void mtd_sources_start(struct mtd_control *ctl);
void mtd_sources_stop(struct mtd_control *ctl);

/* ---- connections (conn.c) -------------------------------------------- */

enum mtd_conn_kind { MTD_CONN_DOWN, MTD_CONN_UP };

/* Upstream connection states:
 *
 *   CONNECTING --tcp up--> HANDSHAKE --TLS done--> READY --GOAWAY--> DRAINING
 *       |     (h2c skips HANDSHAKE)                  |                   |
 *       +------------- error / timeout --------------+-----> CLOSED <----+
 *
 * READY: new streams may start once the peer's SETTINGS arrived
 *        (settings_seen; connect_timeout bounds the wait) and while
 *        streams < max_streams. Closing before SETTINGS counts as a
 *        failed connect: the pool's waiting calls move on.
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

/* RST_STREAM(STREAM_CLOSED) answers to late DATA one read may queue, and
 * the client resets the byte scan remembers (downstream.c). */
#define MTD_LATE_DATA_DUE 8
#define MTD_SCAN_RST 8

/* Closed downstream streams remembered per connection (RFC 9113 §5.1). */
#define MTD_CLOSED_RING 16

LIST_HEAD(mtd_call_list, mtd_call);
LIST_HEAD(mtd_attempt_list, mtd_attempt);
TAILQ_HEAD(mtd_attempt_tailq, mtd_attempt);

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
	bool read_paused;        /* output backed up, or doomed: stop reading */
	int64_t doomed_ns;       /* session wants no more input: closes 5 s on */
	int64_t stalled_ns;      /* output waiting and the peer read none since */
	int32_t max_sid;         /* highest stream with a call (downstream) */
	uint32_t glitches;       /* empty/invalid frames (downstream) */
	/* Downstream deadlines (worker housekeeping): the client preface and
	 * first SETTINGS within preface_timeout of accepted_ns; a header block
	 * begun at hdr_start_ns (0 = none) complete within header_timeout. */
	int64_t accepted_ns;
	int64_t hdr_start_ns;
	int32_t hdr_sid; /* stream of the last header block begun */
	bool preface_done;
	/* The stream whose header fields on_header receives and its user data
	 * (call downstream, attempt upstream): looked up once per block, not
	 * once per field, as a block's fields never interleave with another
	 * frame (RFC 9113 §4.3). Cleared when that stream closes, so it is
	 * never a pointer the stream no longer holds (conn.c
	 * mtd_conn_field_ud). */
	int32_t field_sid;
	void *field_ud;
	/* RFC 9113 §5.1 on streams nghttp2 forgot (downstream.c): the highest
	 * stream id the client opened, the stream of the RST_STREAM being
	 * processed, and the last closes with how each happened. */
	int32_t max_peer_sid;
	int32_t rst_recv_sid;
	/* The last streams the scan saw a RST_STREAM for (ring): a read can
	 * carry a burst of resets and then each stream's late DATA. */
	int32_t scan_rst_sids[MTD_SCAN_RST];
	uint8_t scan_rst_next;
	int32_t late_data_sid; /* the last one answered RST_STREAM(STREAM_CLOSED) for DATA after it */
	/* Those answers, submitted once nghttp2 has read the bytes: at most
	 * MTD_LATE_DATA_DUE per read (the DATA is dropped either way). */
	int32_t late_data_due[MTD_LATE_DATA_DUE];
	uint8_t n_late_data_due;
	uint8_t closed_next;
	struct {
		int32_t sid;
		uint8_t how;
	} closed_ring[MTD_CLOSED_RING];
	/* RFC 9113 §5.3.1/§6.3 (downstream.c, mtd_down_prescan): where the
	 * byte stream is in the client's frames. */
	uint32_t scan_skip;  /* bytes to pass before the next frame header */
	uint8_t scan_hdr[9]; /* the frame header being gathered */
	uint8_t scan_have;   /* of scan_hdr, or of scan_dep below */
	bool scan_in_prio;   /* gathering a PRIORITY frame's dependency */
	uint8_t scan_dep[4];
	/* Downstream: response bytes buffered for this client's calls, not
	 * read by it yet (sum of their resp queues; max_buffered_response). */
	size_t resp_held;
	bool in_dirty;
	TAILQ_ENTRY(mtd_conn) dirty_link;
	LIST_ENTRY(mtd_conn) link; /* worker's downstream list or pool's list */
	/* Pending output: out[out_off, out_len). */
	uint8_t *out;
	size_t out_off, out_len, out_cap;
	struct mtd_call_list calls;       /* downstream: calls with a stream here */
	struct mtd_attempt_list attempts; /* upstream: attempts with a stream here */
	uint32_t n_streams;               /* streams open (length of that list) */
	int64_t last_active_ns;           /* last stream end or start, for idle */
	/* upstream only */
	struct mtd_pool *pool;
	uint32_t max_streams; /* min(peer SETTINGS, config cap) */
	bool settings_seen;   /* the peer's first SETTINGS arrived */
	/* An active health check's stream on it (health.c), counted in
	 * n_streams; probe_sid 0 = none. */
	struct mtd_hc_probe *probe;
	int32_t probe_sid;
	int64_t ping_sent_ns; /* 0 = no keepalive PING outstanding */
	int64_t last_read_ns;
	char peer[64]; /* "127.0.0.1:50051" for messages */
};

/* Mark c as having output to flush at the end of this event-loop turn. */
void mtd_conn_want_flush(struct mtd_conn *c);
/* The user data of stream sid, for a header field of it (c->field_ud). */
void *mtd_conn_field_ud(struct mtd_conn *c, int32_t sid);
/* Stream sid closed: forget it if it is the cached one. */
static inline void mtd_conn_field_forget(struct mtd_conn *c, int32_t sid)
{
	if (sid == c->field_sid)
		c->field_sid = 0, c->field_ud = NULL;
}
/* Read from the socket into the session. false when c was closed. */
bool mtd_conn_on_readable(struct mtd_conn *c);
/* Write pending output and whatever the session has. 0 or -errno (closed). */
int mtd_conn_flush(struct mtd_conn *c);
/* Register c's fd with the worker's base (read interest). */
int mtd_conn_start_io(struct mtd_conn *c);
/* c's session wants no more input (GOAWAY queued after a fatal error, or
 * sent with no stream left): stop reading the peer and close c within 5 s
 * whether or not its output drains. Idempotent. */
void mtd_conn_doom(struct mtd_conn *c);
/* Issue 6 (write_timeout, both sides): true when output has waited for c's
 * socket and the peer read none of it for more than timeout_ms. */
bool mtd_conn_write_stalled(const struct mtd_conn *c, int64_t now_ns, int64_t timeout_ms);
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
/* Follow the client's bytes p[0..n) frame by frame, before nghttp2 gets
 * them, for what nghttp2 1.52 skips unread without RFC 7540 priorities:
 * RFC 9113 §6.3 PRIORITY on stream 0, §5.3.1 a stream depending on itself
 * (PRIORITY, or HEADERS with the PRIORITY flag). 0, or -EPROTO with a
 * GOAWAY(PROTOCOL_ERROR) queued and c doomed: feed nothing more. A few
 * operations per frame; no allocation. */
int mtd_down_prescan(struct mtd_conn *c, const uint8_t *p, size_t n);
/* After nghttp2 read what mtd_down_prescan saw: the RST_STREAM(STREAM_CLOSED)
 * it found due for DATA after the client's RST_STREAM (RFC 9113 §5.1),
 * submitted now that nghttp2 has closed the stream (a RST_STREAM submitted
 * while the stream was still open went nowhere once the client's closed it). */
void mtd_down_after_recv(struct mtd_conn *c);

/* ---- pools and upstream connections (pool.c, upstream.c) -------------- */

/* A pool belongs to one worker and one endpoint identity (ep->pools[w->id]);
 * it holds a reference on ep and on the service snapshot whose settings it
 * uses (the newest its worker has seen holding ep). Retired when its
 * worker serves a snapshot without ep: it takes no new attempt, its idle
 * connections close, busy ones drain, the attempts waiting in it move their
 * calls to the current snapshot; freed once it has no connection left. */
struct mtd_pool {
	struct mtd_worker *w;
	struct mtd_rt_service *svc; /* for TLS ctx and upstream settings (reference) */
	struct mtd_endpoint *ep;    /* reference */
	LIST_ENTRY(mtd_pool) link;  /* the worker's pools */
	bool retired;
	LIST_HEAD(, mtd_conn) conns;
	uint32_t n_conns;
	struct mtd_attempt_tailq pending; /* waiting for a stream slot */
	uint32_t n_pending;
	struct ssl_session_st *tls_session; /* to resume with */
	bool failing;                       /* a connect failure is being handled */
	/* Connect failures in a row, and until when new calls avoid this
	 * endpoint (doubling from 250 ms to 10 s; reset by a connect). */
	uint32_t connect_failures;
	int64_t backoff_ns, retry_at_ns;
	/* Keepalive PING interval: the config's, doubled each time the peer
	 * says too_many_pings (gRPC A8). */
	int64_t keepalive_ms;
	/* An active health check waiting for a stream slot (health.c): it
	 * takes the first free one, before waiting calls; only when no
	 * connection is usable does it make the pool open one. */
	struct mtd_hc_probe *probe;
};

/* The pool of endpoint ep (of service snapshot svc) on worker w, created on
 * first use; NULL when out of memory. May be retired (see above). */
struct mtd_pool *mtd_pool_get(struct mtd_worker *w, struct mtd_rt_service *svc, struct mtd_endpoint *ep);
/* The worker moved to a snapshot without p's endpoint. */
void mtd_pool_retire(struct mtd_pool *p);
void mtd_pool_free(struct mtd_pool *p);
/* True while the pool's endpoint failed its last connect and no connection
 * of it is usable: new calls should go elsewhere if they can. */
bool mtd_pool_backing_off(const struct mtd_pool *p, int64_t now_ns);
/* Record a failed / successful connect (backoff, and logging once per
 * outage instead of once per attempt). */
void mtd_pool_connect_failed(struct mtd_pool *p, const char *reason);
void mtd_pool_connect_succeeded(struct mtd_pool *p);
/* Queue attempt a (state PENDING) for a stream on this pool; its stream is
 * opened when a connection has room. 0, -EAGAIN when too many wait on this
 * pool (upstream.max_pending), or -EBUSY when the service has
 * circuit_breaker.max_pending waiting over every worker (nothing queued
 * either way: the caller fails the attempt). */
int mtd_pool_enqueue(struct mtd_pool *p, struct mtd_attempt *a);
/* Remove an attempt still waiting in the pool (no-op otherwise). */
void mtd_pool_dequeue(struct mtd_attempt *a);
/* A connection gained room (ready, stream closed) or went away. */
void mtd_pool_dispatch(struct mtd_pool *p);
/* Recompute p's bit in its endpoint's `pooled` after a connection took
 * SETTINGS or closed. */
void mtd_pool_note_usable(struct mtd_pool *p);
/* The worker's 1 s housekeeping for one pool: idle close, keepalive,
 * write stall. */
void mtd_pool_housekeeping(struct mtd_pool *p, int64_t now_ns);

struct mtd_conn *mtd_up_connect(struct mtd_pool *p);
/* Open attempt a's stream on c. 0, or -errno (the conn cannot take it). */
int mtd_up_submit(struct mtd_conn *c, struct mtd_attempt *a);
/* Called when an attempt's upstream side may send more (request data). */
void mtd_up_resume(struct mtd_attempt *a);
/* c is closing: fail its attempts, leave the pool, let the pool dispatch. */
void mtd_up_on_close(struct mtd_conn *c);
/* Housekeeping: close c if its peer read nothing for upstream.write_timeout
 * while output waits (a stuck upstream); its calls end UNAVAILABLE. true
 * when c was closed. */
bool mtd_up_check_write_stall(struct mtd_conn *c, int64_t now_ns);

/* ---- calls and attempts (call.c, attempt.c, relay.c, headers.c) ------ */

/* Header storage of one HEADERS block (headers.c): its fields in one
 * buffer from the owning worker's slab, which every function below is
 * given. No nghttp2_nv array is kept (issue 6 §5: it was 40 bytes per
 * field, and nghttp2 copies the array on submit anyway): mtd_headers_nv
 * and mtd_headers_next give nv entries pointing into the buffer, flagged
 * NO_COPY, valid until the block changes. A block is under 2 GiB (the
 * header list limits are 16 MiB). */
struct mtd_headers {
	uint8_t *mem;
	uint32_t n; /* fields */
	uint32_t mem_len, mem_cap;
};

/* Append a field; flags: NGHTTP2_NV_FLAG_NO_INDEX if the sender encoded it
 * as never indexed (nghttp2's on_header flags), which mtd_headers_next
 * gives back so that it is sent on the same way (RFC 7541 §7.1.3), else 0.
 * 0 or -ENOMEM. */
int mtd_headers_add(struct mtd_headers *h, struct mtd_slab *slab, const uint8_t *name, size_t nlen,
                    const uint8_t *value, size_t vlen, uint8_t flags);
void mtd_headers_clear(struct mtd_headers *h, struct mtd_slab *slab);
/* The field after *off (0: the first) in *nv, *off moved past it; false
 * after the last. */
bool mtd_headers_next(const struct mtd_headers *h, uint32_t *off, nghttp2_nv *nv);
/* Every field, in order, into out (room for h->n); returns h->n. */
size_t mtd_headers_nv(const struct mtd_headers *h, nghttp2_nv *out);
/* Room for the nv array a submit builds: `stack` (MTD_STACK_NV entries)
 * when n fit, else malloc'd; NULL when out of memory. Give it back with
 * mtd_nv_release once nghttp2 has copied it (on submit). */
#define MTD_STACK_NV 32
static inline nghttp2_nv *mtd_nv_room(nghttp2_nv *stack, size_t n)
{
	return n <= MTD_STACK_NV ? stack : malloc(n * sizeof(*stack));
}
static inline void mtd_nv_release(nghttp2_nv *nva, const nghttp2_nv *stack)
{
	if (nva != stack)
		free(nva);
}
/* The first field called name (len bytes, len > 0), in *buf (returned),
 * or NULL. */
const nghttp2_nv *mtd_headers_find_n(const struct mtd_headers *h, const char *name, size_t len, nghttp2_nv *buf);
/* The same for a NUL-terminated name (its length folds for a literal). */
static inline const nghttp2_nv *mtd_headers_find(const struct mtd_headers *h, const char *name, nghttp2_nv *buf)
{
	return mtd_headers_find_n(h, name, strlen(name), buf);
}
/* True for a connection-specific field, which never crosses the proxy
 * in either direction (RFC 9113 §8.2.2): connection, keep-alive,
 * proxy-connection, transfer-encoding, upgrade. nv's name is lower case
 * (nghttp2 rejects upper case). */
bool mtd_headers_hop_by_hop(const nghttp2_nv *nv);
/* Move src's fields into dst (dst cleared first); src is left empty. */
void mtd_headers_move(struct mtd_headers *dst, struct mtd_headers *src, struct mtd_slab *slab);
/* The block's size as RFC 9113 §6.5.2 counts it: name + value + 32 per
 * field (what SETTINGS_MAX_HEADER_LIST_SIZE bounds). */
static inline size_t mtd_headers_size(const struct mtd_headers *h)
{
	return (size_t)h->mem_len + 22 * (size_t)h->n; /* mem holds name + value + 10 per field */
}

/* One upstream try of a call (the state machine is lib/fault/attempt.c's:
 * BACKOFF -> PENDING -> OPEN -> ANSWERING -> DONE, or FAILED / CANCELLED).
 * Held by its call's list; also by a pool while PENDING and by its
 * upstream stream while `up` is set. Freed by mtd_attempt_maybe_free when
 * it is neither live nor on a stream. */
struct mtd_attempt {
	struct mtd_call *call;
	enum mtd_attempt_state state;
	uint32_t index; /* 0 = first; grpc-previous-rpc-attempts (gRPC A6) */
	struct mtd_endpoint *ep;
	int ep_idx;                       /* in the snapshot of picker */
	int32_t up_sid;                   /* its upstream stream, while `up` is set */
	struct mtd_lb_picker *picker;     /* the one that picked it */
	struct mtd_lb_layer *layer;       /* the routing layer that picked it, or NULL */
	struct mtd_outlier_set *outliers; /* the ejection state ep_idx indexes, or NULL */
	struct mtd_pool *pool;            /* PENDING */
	TAILQ_ENTRY(mtd_attempt) pending_link;
	struct mtd_conn *up; /* set while the upstream stream exists */
	LIST_ENTRY(mtd_attempt) up_link;
	LIST_ENTRY(mtd_attempt) call_link;
	/* Request bytes (counted from the call's first) its stream took. */
	size_t req_off;
	/* Response headers / trailers until relayed (moved into the call). */
	struct mtd_headers resp_hdrs, resp_trailers;
	int64_t start_ns;       /* picked */
	int64_t first_ns;       /* first response message, or the answer's end (0 = none yet) */
	struct mtd_timer timer; /* per_try_timeout */
	bool req_deferred;      /* its data provider waits for bytes */
	bool resp_headers_in;
	bool lb_begun; /* counted in its endpoint's active calls */
	bool hedge;    /* FORKING: started after the first attempt */
};

enum mtd_call_state {
	MTD_CALL_HEADERS,  /* reading the request headers */
	MTD_CALL_WAIT_KEY, /* hashing a message field: waiting for message 1 */
	MTD_CALL_RUNNING,  /* attempts going on (or a retry waiting), relaying */
	MTD_CALL_DONE,     /* response finished or failed; draining streams */
};

/* BROADCAST's part of a call (attempt.c), allocated by calls of that mode
 * only: the answer given once every attempt ended OK is the first
 * complete OK answer, held in the call's resp_hdrs, resp and
 * resp_trailers; ans is the attempt whose answer is being held (NULL once
 * freed). The first failure decides a failed call. */
struct mtd_call_bc {
	struct mtd_attempt *ans;
	char *msg;
	struct mtd_fault_outcome o; /* the first failure */
	enum mtd_grpc_status status;
	uint32_t failures;
	bool have;          /* a complete OK answer is held */
	bool trailers_only; /* ... as a Trailers-Only response */
	bool failed;
};

/* FAILBACK's part of a background re-send (failback.c): a call with no
 * client, on its worker's list while it lives. */
struct mtd_call_bg {
	struct mtd_call *call;
	LIST_ENTRY(mtd_call_bg) link;
	int64_t timeout_ms; /* each try's deadline (0 = per_try_timeout only) */
	uint32_t tries;     /* re-sends started */
};

/* One call. Every call in flight holds one, so it is kept within the
 * slab's 512-byte class (issue 6 §5: HACKING.md "memory per call"): what
 * only some calls need (BROADCAST, FAILBACK) is allocated beside it. */
struct mtd_call {
	struct mtd_worker *w;
	enum mtd_call_state state;
	/* Downstream side. */
	int32_t down_sid;
	struct mtd_conn *down; /* NULL once the stream closed */
	struct mtd_headers req_hdrs;
	LIST_ENTRY(mtd_call) down_link;
	/* Routing and policy: svc and picker belong to the snapshot of
	 * `hold` (hold_prev: the one before a reroute, while attempts of it
	 * remain). */
	struct mtd_rt_hold *hold, *hold_prev;
	struct mtd_rt_service *svc;
	/* The method's picker, layer, ejection state, hash key and routing
	 * header, or NULL: the service's (call.c reads them through one
	 * accessor each). */
	const struct mtd_rt_method *method;
	const struct mtd_fault_policy *fault; /* the method's, else the service's */
	struct mtd_rt_load *load;             /* counted in load->calls (reference held), or NULL */
	/* Endpoints this call failed on, and those that refused it (gRPC
	 * transparent retry: once per endpoint); bitmaps over the service's
	 * endpoints: inline up to 64, else allocated (tried, then refused). */
	uint64_t tried_inline, refused_inline;
	uint64_t *tried, *refused;
	uint32_t n_tried;
	enum mtd_grpc_status last_status; /* the status last_failure goes with */
	char *last_failure;
	int64_t start_ns;
	int64_t deadline_ns;       /* 0 = none */
	struct mtd_timer deadline; /* at deadline_ns while the answer is not complete */
	/* Attempts: every one not yet freed; cur = the one going on (NULL
	 * between attempts); ans = the one the call committed to by relaying
	 * its response headers. */
	struct mtd_attempt_list attempts;
	struct mtd_attempt *cur, *ans;
	uint32_t n_attempts;    /* started, transparent ones included */
	uint32_t retries_done;  /* policy retries started */
	struct mtd_timer retry; /* backoff before the next attempt; FORKING: hedge delay;
	                         * a FAILBACK re-send's wait */
	/* Request bytes: downstream DATA -> upstream DATA. Kept from the
	 * first byte (req_base = 0) until the call commits, so a new attempt
	 * can replay them; then dropped as they are sent. */
	struct mtd_bufq req;
	size_t req_base;         /* offset of req's first byte in the request */
	size_t req_taken;        /* bytes consumed downstream (window reopened) */
	uint32_t req_retained;   /* taken bytes kept for replay (worker total; <= replay_buffer) */
	uint32_t req_unconsumed; /* received but not yet consumed (<= the stream window) */
	struct mtd_grpc_scanner req_scan;
	/* First-message capture for a hash key on a message field. */
	uint8_t *key_msg;
	uint32_t key_msg_have;
	/* Response, as relayed to the client. */
	uint32_t resp_unconsumed; /* on ans's upstream stream (<= its window) */
	struct mtd_headers resp_hdrs;
	struct mtd_headers resp_trailers;
	struct mtd_bufq resp;
	struct mtd_grpc_scanner resp_scan;
	/* Figures (metrics.h): the :path entry once routed, DATA bytes. */
	struct mtd_mx_method *mx;
	uint64_t bytes_in, bytes_out;
	const struct mtd_endpoint *mx_ep; /* the answer's endpoint, else the last tried */
	struct mtd_call_bc *bc;           /* BROADCAST (attempt.c), else NULL */
	struct mtd_call_bg *bg;           /* a FAILBACK re-send (failback.c), else NULL */
	/* Flags, together (no padding after each). */
	bool held;      /* a call.c function is working on it: not freed meanwhile */
	bool committed; /* no replay any more (headers relayed / outgrown) */
	bool req_sink;  /* nobody reads the request any more: drop it */
	bool req_eof;   /* client sent END_STREAM */
	bool key_ready; /* captured all we will read of it */
	bool key_compressed;
	bool resp_headers_sent; /* we submitted headers downstream */
	bool resp_eof;          /* the answer is complete (trailers or synth) */
	bool resp_deferred;
	bool resp_done; /* trailers / END_STREAM submitted downstream */
	bool mx_ep_answered;
};

/* call.c: the call's life, routing, the request side, the policy's verdicts. */
/* A stream's request headers are complete: route, pick, start attempt 1. */
void mtd_call_start(struct mtd_call *call);
/* Request DATA from the client. */
void mtd_call_on_req_data(struct mtd_call *call, const uint8_t *p, size_t n);
void mtd_call_on_req_end(struct mtd_call *call);
/* The downstream stream closed (error_code from RST or NO_ERROR). */
void mtd_call_on_down_close(struct mtd_call *call, uint32_t error_code);
/* End the call with a status of maitred's own (before or after response
 * headers went out) unless its answer already ended; every live attempt
 * is cancelled (RST_STREAM CANCEL reaches its server). The endpoints are
 * not blamed: whoever saw an endpoint fail reported it before. */
void mtd_call_fail(struct mtd_call *call, enum mtd_grpc_status status, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
/* The call's answer is decided: stop its deadline, cancel every live
 * attempt (RST_STREAM CANCEL), state DONE. The caller then answers. */
void mtd_call_settle(struct mtd_call *call);
/* End the call with OK and one response message (FAILSAFE: empty; a
 * fallback's). */
void mtd_call_answer_ok(struct mtd_call *call, const uint8_t *msg, size_t len);
/* FAILBACK: start a background call's next try on the worker's current
 * snapshot (routed by its :path; every endpoint eligible again). */
void mtd_call_start_bg(struct mtd_call *call);

/* failback.c: FAILBACK's background re-sends (issue 8 §2, Dubbo's
 * failback). All worker thread. */
/* call failed under FAILBACK and is about to be answered OK: queue a copy
 * of its request (headers, bytes) for re-sending, or count and log it
 * dropped (queue full, request too large for the replay accounting or not
 * complete). what: the failure. */
void mtd_failback_enqueue(struct mtd_call *call, const char *what);
/* A background call's try failed: re-send after the backoff while
 * failback.retries allow, else drop it (counted, logged). */
void mtd_failback_failed(struct mtd_call *call, const char *what);
/* A background call was answered (a status outside retry_on): done. */
void mtd_failback_done(struct mtd_call *call);
/* A background call's wait is over: its next try starts (its call->retry). */
void mtd_failback_on_resend(struct mtd_timer *t);
/* The worker stops: every queued re-send is dropped, the count logged. */
void mtd_failback_drop_all(struct mtd_worker *w);

/* BROADCAST: every attempt ended OK: answer with the held answer. */
void mtd_call_answer_held(struct mtd_call *call);
/* BROADCAST: start another attempt on endpoint idx (a refused stream's
 * transparent replay on the endpoint that refused it). */
void mtd_call_relaunch(struct mtd_call *call, int idx);
/* BROADCAST: an attempt ended; once none is left going, answer (the held
 * answer, or the policy's verdict on the first failure). attempt.c. */
void mtd_call_broadcast_settle(struct mtd_call *call);
/* The answering stream is gone: request bytes nobody will send (window
 * given back, later DATA dropped). */
void mtd_call_drop_request(struct mtd_call *call);
/* Free if nothing references the call any more (its downstream stream,
 * an attempt, a retry timer). */
void mtd_call_maybe_free(struct mtd_call *call);
/* Start the call's next attempt now: pick an endpoint (never one already
 * tried while another is eligible) and queue it in its pool; ends the call
 * when none is left. */
void mtd_call_next_attempt(struct mtd_call *call);
/* Attempt a waits in a retired pool (its endpoint was removed): cancel it
 * (nobody is blamed) and start the call anew on the worker's current
 * snapshot. */
void mtd_call_reroute(struct mtd_attempt *a);
/* FORKING: start the next fork now unless forks are all started, an
 * answer came, the deadline passed or the budget says no. */
void mtd_call_hedge(struct mtd_call *call);
/* The call's timers are due (worker.c's table): its deadline (the call
 * fails DEADLINE_EXCEEDED), its backoff (the next attempt), its hedge
 * delay (the next fork). */
void mtd_call_on_deadline(struct mtd_timer *t);
void mtd_call_on_retry(struct mtd_timer *t);
void mtd_call_on_hedge(struct mtd_timer *t);
/* Commit to the current attempt (its response headers are relayed, or the
 * request outgrew what may be kept): the other attempts are cancelled. */
void mtd_call_commit(struct mtd_call *call);
/* Data provider of an attempt's upstream stream (src->ptr: the attempt):
 * reads the retained request from the attempt's position. */
ssize_t mtd_call_read_req(nghttp2_session *s, int32_t sid, uint8_t *buf, size_t len, uint32_t *flags,
                          nghttp2_data_source *src, void *ud);

/* attempt.c: one upstream try, from pick to stream close. Upstream events
 * (upstream.c, pool.c) arrive here; a failed attempt asks lib/fault what
 * the call does next (mtd_fault_decide) and carries it out. */
struct mtd_attempt *mtd_attempt_new(struct mtd_call *call);
/* State change through lib/fault's table; false (and a debug line) when
 * the event cannot happen in the current state. */
bool mtd_attempt_step(struct mtd_attempt *a, enum mtd_attempt_event ev);
/* The pool got a stream for a (PENDING -> OPEN). */
void mtd_attempt_on_stream(struct mtd_attempt *a);
void mtd_attempt_on_resp_headers(struct mtd_attempt *a, bool end_stream);
void mtd_attempt_on_resp_data(struct mtd_attempt *a, const uint8_t *p, size_t n);
void mtd_attempt_on_resp_trailers(struct mtd_attempt *a);
/* Its upstream stream closed (a->up already NULL). */
void mtd_attempt_on_up_close(struct mtd_attempt *a, uint32_t error_code);
/* Its connection never came up (connect / TLS failure): nothing was sent. */
void mtd_attempt_connect_failed(struct mtd_attempt *a, const char *reason);
/* Its connection was lost with the stream open. */
void mtd_attempt_conn_lost(struct mtd_attempt *a, const char *reason);
/* The call no longer needs a: leave the pool, RST_STREAM CANCEL the
 * stream, report it to the balancer as neither success nor failure. */
void mtd_attempt_cancel(struct mtd_attempt *a);
/* RST_STREAM(CANCEL) a's upstream stream if it has one, whatever a's state
 * (the stream closes when it went out; its close callback ends a). */
void mtd_attempt_reset_stream(struct mtd_attempt *a);
void mtd_attempt_maybe_free(struct mtd_attempt *a);
/* a's per_try_timeout is due (worker.c's table): a fails as timed out. */
void mtd_attempt_on_timeout(struct mtd_timer *t);

/* relay.c: the response side towards the client. */
/* Relay the committed attempt's response headers (moved into the call). */
void mtd_relay_headers(struct mtd_call *call, struct mtd_attempt *a, bool end_stream);
/* Relay its trailers; the answer is complete. */
void mtd_relay_trailers(struct mtd_call *call, struct mtd_attempt *a);
/* Relay response DATA of the committed attempt. */
void mtd_relay_data(struct mtd_call *call, const uint8_t *p, size_t n);
/* A fixed OK answer with one response message (FAILSAFE: empty; a
 * fallback's response). Before any response header only. */
void mtd_relay_answer_ok(struct mtd_call *call, const uint8_t *msg, size_t len);
/* BROADCAST: response DATA of the attempt whose answer is held: checked
 * (one message, within fault.replay_buffer) and kept in call->resp; the
 * call fails otherwise. */
void mtd_relay_hold(struct mtd_call *call, struct mtd_attempt *a, const uint8_t *p, size_t n);
/* BROADCAST: send the answer held in call->resp_hdrs, resp and
 * resp_trailers (Trailers-Only: resp_hdrs alone). */
void mtd_relay_held(struct mtd_call *call, bool trailers_only);
/* Status-only answer (Trailers-Only, or trailers after headers). */
void mtd_relay_status(struct mtd_call *call, enum mtd_grpc_status status, const char *msg);
/* Give back what the call holds of the response (window included). */
void mtd_relay_drop(struct mtd_call *call);
ssize_t mtd_call_read_resp(nghttp2_session *s, int32_t sid, uint8_t *buf, size_t len, uint32_t *flags,
                           nghttp2_data_source *src, void *ud);

/* ---- worker (worker.c) ------------------------------------------------ */

/* A worker's hold on one runtime (lib/discovery: the reclaim rule). */
struct mtd_rt_hold {
	struct mtd_disc_hold h;
	struct mtd_runtime *rt; /* the worker's reference */
};

struct mtd_worker {
	unsigned id;
	struct event_base *base;
	const struct mtd_runtime *rt; /* = hold->rt: what new calls route with */
	struct mtd_rt_hold *hold;
	/* The next runtime, set by the control thread (mtd_worker_set_runtime),
	 * taken by the worker's swap_ev. One slot, a newer runtime replacing
	 * one not taken yet: not a mailbox (mailbox.h), as one runtime goes
	 * to every worker. */
	pthread_mutex_t next_mu;
	struct mtd_runtime *next_rt;
	struct event swap_ev;
	int listen_fd;
	struct event listen_ev;
	struct event flush_ev;        /* runs the dirty list */
	struct event housekeeping_ev; /* 1 s timer */
	struct event drain_ev;        /* activated by the main thread */
	struct event stop_ev;         /* activated by the main thread */
	/* The timers of its calls and attempts (lib/core/timers.h), and the
	 * one libevent timer for the earliest: timer_at_ns is where that one
	 * is set (INT64_MAX: not pending). */
	struct mtd_timers timers;
	struct event timers_ev;
	int64_t timer_at_ns;
	bool in_timers; /* running due timers: re-armed once they are done */
	TAILQ_HEAD(, mtd_conn) dirty;
	LIST_HEAD(, mtd_conn) downs;
	uint32_t n_downs;
	TAILQ_HEAD(, mtd_conn) graveyard;
	LIST_HEAD(, mtd_pool) pools; /* every pool of this worker */
	nghttp2_session_callbacks *down_cbs, *up_cbs;
	nghttp2_option *down_opt, *up_opt;
	struct mtd_slab slab; /* recycled small blocks (calls, nghttp2) */
	nghttp2_mem ng_mem;   /* nghttp2's allocations go to slab */
	uint8_t *rbuf;        /* shared read buffer */
	size_t rbuf_len;
	uint64_t rng;
	bool draining;
	uint64_t n_calls;        /* calls alive */
	uint64_t replay_bytes;   /* request bytes calls keep for replay */
	int64_t failsafe_log_ns; /* FAILSAFE answers: one log line a second */
	uint64_t failsafe_quiet;
	/* FAILBACK (failback.c): background re-sends alive, their count, and
	 * the drop log's rate limit. */
	LIST_HEAD(, mtd_call_bg) bg_calls;
	uint32_t n_bg;
	int64_t failback_log_ns;
	uint64_t failback_quiet;
	/* Connections refused past downstream.max_connections since the last
	 * log line about it, and when that line was written. */
	uint64_t n_refused;
	int64_t refuse_logged_ns;
	/* Health checks the control thread hands over (health.c). */
	struct mtd_mbox hc_inbox;
	pthread_t thread;
};

/* Per-worker nghttp2 callbacks and options (downstream.c / upstream.c). */
int mtd_down_setup(struct mtd_worker *w);
void mtd_down_teardown(struct mtd_worker *w);
int mtd_up_setup(struct mtd_worker *w);
void mtd_up_teardown(struct mtd_worker *w);

/* rt: a reference transferred to the worker (kept by the caller when NULL
 * is returned). */
struct mtd_worker *mtd_worker_new(unsigned id, struct mtd_runtime *rt, int listen_fd);
/* Thread-safe: serve rt (a reference transferred) from the worker's next
 * turn; a runtime set before and not yet taken is dropped. */
void mtd_worker_set_runtime(struct mtd_worker *w, struct mtd_runtime *rt);
/* The worker's hold on its current runtime, for a call being routed; let go
 * with mtd_worker_unhold when the call is freed. Worker thread. */
struct mtd_rt_hold *mtd_worker_hold(struct mtd_worker *w);
void mtd_worker_unhold(struct mtd_worker *w, struct mtd_rt_hold *h);
int mtd_worker_start(struct mtd_worker *w);
/* Thread-safe: ask the worker to drain (GOAWAY everyone) / stop now. */
void mtd_worker_drain(struct mtd_worker *w);
void mtd_worker_stop(struct mtd_worker *w);
/* Free a worker whose thread has ended (or never started). */
void mtd_worker_free(struct mtd_worker *w);
/* Schedule the end-of-turn flush. */
void mtd_worker_schedule_flush(struct mtd_worker *w);
/* The struct of `type` holding member `field` at p (a timer's owner). */
#define MTD_CONTAINER_OF(p, type, field) ((type *)(void *)((char *)(p)-offsetof(type, field)))
/* What a call's or an attempt's timer is for: the worker runs, when it is
 * due, the function of its kind (worker.c's table). */
enum mtd_timer_kind {
	MTD_TIMER_DEADLINE, /* call->deadline: mtd_call_on_deadline */
	MTD_TIMER_RETRY,    /* call->retry, a backoff: mtd_call_on_retry */
	MTD_TIMER_HEDGE,    /* call->retry, FORKING's hedge delay: mtd_call_on_hedge */
	MTD_TIMER_RESEND,   /* call->retry, FAILBACK's re-send: mtd_failback_on_resend */
	MTD_TIMER_PER_TRY,  /* attempt->timer: mtd_attempt_on_timeout */
};
/* Arm t (kind) to be due delay_ns from now, or move it there. 0, or
 * -ENOMEM (t left as it was). Disarming a timer not armed does nothing. */
int mtd_worker_timer_arm(struct mtd_worker *w, struct mtd_timer *t, enum mtd_timer_kind kind, int64_t delay_ns);
void mtd_worker_timer_disarm(struct mtd_worker *w, struct mtd_timer *t);
/* A downstream connection ended: its slot under downstream.max_connections
 * is free (any thread). */
void mtd_worker_down_closed(void);
/* Move a closed conn to the graveyard (freed at the end of the turn). */
void mtd_worker_bury(struct mtd_worker *w, struct mtd_conn *c);

/* Monotonic and wall clocks. */
int64_t mtd_now_ns(void);
int64_t mtd_wall_ms(void);

#endif
