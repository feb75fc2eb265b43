/* A test seam for the call engine (issue 15 §4): one worker, one client
 * connection and its upstream endpoints, in memory, on a clock the test
 * moves. What is real and what is fake is listed at the top of
 * call_seam.c. Used by test_call.c. Single-threaded; one seam at a time. */
#ifndef MTD_TEST_CALL_SEAM_H
#define MTD_TEST_CALL_SEAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <nghttp2/nghttp2.h>

struct mtd_call;
struct mtd_pool;
struct mtd_worker;
struct mtd_control;
struct mtd_runtime;
struct mtd_disc_endpoint;

/* A growable byte buffer. */
struct seam_buf {
	uint8_t *p;
	size_t len, cap;
};

/* One call as the app (the downstream client) sees it. */
struct seam_cs {
	int32_t sid;
	/* The request: bytes queued, how far the client's session sent them. */
	struct seam_buf req;
	size_t req_sent;
	bool req_end;
	bool req_deferred;
	bool req_trailers; /* the request ends with a trailers HEADERS frame */
	/* The answer. */
	unsigned resp_headers; /* HEADERS blocks received (2 with trailers) */
	int status;            /* grpc-status (headers or trailers), -1 none */
	char message[256];     /* grpc-message */
	struct seam_buf data;  /* response DATA */
	bool ended;            /* END_STREAM received */
	int64_t rst;           /* RST_STREAM code received, -1 none */
	bool closed;
	struct seam_cs *next;
};

/* One upstream stream as its endpoint's server sees it. */
struct seam_ss {
	int32_t sid;
	struct seam_link *link;
	char ep[64];         /* the endpoint's address */
	char path[128];      /* :path */
	char authority[128]; /* :authority */
	int prev_attempts;   /* grpc-previous-rpc-attempts, 0 when absent */
	char timeout[32];    /* grpc-timeout, "" when absent */
	struct seam_buf req; /* request DATA received */
	bool req_end;
	int64_t rst; /* RST_STREAM code from maitred, -1 none */
	bool closed;
	/* The scripted answer (call_seam.c's data provider). */
	struct seam_buf resp;
	size_t resp_off;
	bool resp_submitted, resp_eof, deferred;
	int trailer_status;   /* -1: none (END_STREAM on the DATA) */
	struct seam_ss *next; /* every stream, in the order they opened */
};

/* How an endpoint's connections behave. */
enum seam_ep_mode {
	SEAM_EP_UP,         /* HTTP/2 up at once (its SETTINGS at the next pump) */
	SEAM_EP_SILENT,     /* accepts TCP, never says a word of HTTP/2 (issue 15) */
	SEAM_EP_CONNECTING, /* the connect neither succeeds nor fails until told */
	SEAM_EP_REFUSED,    /* connect() fails at once, on the stack that asked (ECONNREFUSED) */
};

/* The connects of SEAM_EP_REFUSED endpoints: how many were on the stack
 * at once at most, and the deepest stack any connect ran on (bytes below
 * the outermost seam_run's frame). */
struct seam_connects {
	unsigned nested, max_nested;
	uintptr_t deepest;
};
extern struct seam_connects seam_connects;

/* Figures the fake metrics count. */
struct seam_mx {
	unsigned routed, ended, hedges_started, hedges_won;
	unsigned attempts; /* the ended calls' attempts, as their access lines count them */
	/* ended as it was when maitred last wrote to the client: a call's
	 * figures are out before its answer's last bytes. */
	unsigned ended_at_client_write;
	unsigned failback_started, failback_dropped, decisions, circuit_rejected;
	unsigned policy;        /* traffic policy events (rate limited, injected, mirrored) */
	unsigned policy_by[32]; /* the same by enum mtd_mx_policy */
	unsigned guard_cuts;    /* split.guard cuts (seam_runtime_tick) */
	unsigned parked;        /* the worker's calls waiting for a first set, as last published */
	unsigned hedge_samples; /* hedge_delay AUTO's samples, and the last one (us) */
	int64_t hedge_sample_us;
	char last_ep[64]; /* the endpoint the last call's access line names ("-": none) */
};
extern struct seam_mx seam_mx;

/* The world: the control loop's side (snapshots), the worker, the client. */
struct seam;

/* A seam serving config yaml (a maitred config). The client connection is
 * made and its SETTINGS exchanged. Fails the test on error. */
struct seam *seam_new(const char *yaml);
/* Stop the worker as maitred does (mtd_worker_free's order), free the
 * snapshots, and check that every slab block and hold went back. */
void seam_free(struct seam *s);
struct mtd_worker *seam_worker(struct seam *s);

/* ---- turns and time ---------------------------------------------------- */

/* Pump until nothing moves and no flush is due: bytes between maitred and
 * the peers, each read an I/O event followed by the end of its turn
 * (mtd_worker_end_turn: flush, burials, the reap); due timers; the control
 * thread's reclaim after each turn. */
void seam_run(struct seam *s);
/* The end of the current turn only (flush, burials, reap). */
void seam_end_turn(struct seam *s);
/* Move the clock on by ms, then seam_run (which runs the timers due,
 * mtd_worker_run_timers). */
void seam_advance_ms(struct seam *s, int64_t ms);
/* Move the clock on by ms and run the timers due, in the current turn:
 * its end is not run (seam_end_turn next). */
void seam_timers_mid_turn(struct seam *s, int64_t ms);
/* The clock (mtd_now_ns, wrapped). */
int64_t seam_now_ns(void);
/* Step the wall clock (mtd_wall_ms, wrapped: the real one plus every step
 * so far) by ms, back when negative; the monotonic clock does not move.
 * The worker sees the step from its next turn on (seam_advance_ms). */
void seam_step_wall_ms(int64_t ms);
/* The control thread's once-a-second tick over the current snapshot
 * (mtd_runtime_tick: outlier ejection, split.guard, pickers). */
void seam_runtime_tick(struct seam *s);

/* ---- snapshots ---------------------------------------------------------- */

/* A reload to yaml, published (control thread) and taken by the worker
 * (mtd_worker_take_runtime: pools of endpoints that stay take the new
 * settings, pools of removed ones retire, their waiting attempts reroute) -
 * one event, whose turn has NOT ended yet: call seam_end_turn / seam_run
 * next. */
void seam_reload(struct seam *s, const char *yaml);
/* The source of service si (an index of the config's services) answers:
 * its endpoint set becomes addrs[0..n) ("IP:PORT", at most 8; n 0: an
 * empty answer), published and taken by the worker as seam_reload's (its
 * turn NOT ended). */
void seam_set_endpoints(struct seam *s, size_t si, const char *const *addrs, size_t n);
/* The same with the source's records as they are (eps[0..n): zones,
 * metadata); false when the set equals the one in force (nothing
 * published). */
bool seam_set_disc(struct seam *s, size_t si, const struct mtd_disc_endpoint *eps, size_t n);
/* The source of service si reports reason: an error (an answer), or
 * (waiting) what it still waits for. Published and taken as above. */
void seam_set_unavailable(struct seam *s, size_t si, const char *reason, bool waiting);
/* The control thread's turn: free every snapshot whose last reference
 * went (mtd_runtime_reclaim). Returns the runtimes freed. */
unsigned seam_reclaim(struct seam *s);
/* Runtimes freed so far (by seam_reclaim, which every turn's end runs). */
unsigned seam_runtimes_freed(struct seam *s);
/* Holds alive (the worker's n_holds: turn.c mtd_worker_hold_new ...
 * mtd_worker_hold_release), and the users of the worker's current one. */
unsigned seam_holds_alive(struct seam *s);
uint64_t seam_current_hold_users(struct seam *s);
/* The worker's 1 s housekeeping for its pools (frees retired idle pools). */
void seam_housekeeping(struct seam *s);

/* ---- the client (downstream) --------------------------------------------- */

/* Start a call: POST path with gRPC's headers (grpc-timeout when timeout
 * is not NULL, e.g. "100m"), body (may be empty), END_STREAM if end. The
 * bytes go out at the next pump. */
struct seam_cs *seam_call(struct seam *s, const char *path, const char *timeout, const void *body, size_t len,
                          bool end);
/* More request bytes for cs (END_STREAM if end). */
void seam_send(struct seam *s, struct seam_cs *cs, const void *p, size_t n, bool end);
/* More request bytes for cs, then the request ends with trailers (a
 * HEADERS frame, END_STREAM): gRPC clients send none, HTTP/2 allows them. */
void seam_send_trailers(struct seam *s, struct seam_cs *cs, const void *p, size_t n);
/* The client resets cs (RST_STREAM CANCEL). */
void seam_cancel(struct seam *s, struct seam_cs *cs);
/* maitred's side of the client connection closes, as on a read error
 * (mtd_conn_close): one event, whose turn has NOT ended. */
void seam_client_gone(struct seam *s);
/* From now on the client connection is an inbound peer's (no
 * certificate) of one listener whose app is the first service: its calls
 * go through the engine's inbound step (call/inbound_call.c), limited to
 * max_concurrent_calls in flight (counted in that service's load);
 * authorization allows all, or (deny) nothing. */
void seam_client_inbound(struct seam *s, uint32_t max_concurrent_calls);
void seam_client_inbound_authz(struct seam *s, uint32_t max_concurrent_calls, bool deny);
/* The engine's call for cs, or NULL once its stream closed. */
struct mtd_call *seam_call_of(struct seam *s, const struct seam_cs *cs);

/* ---- the endpoints (upstream) -------------------------------------------- */

/* From now on, new connections to addr behave so (default SEAM_EP_UP). */
void seam_ep_mode(struct seam *s, const char *addr, enum seam_ep_mode m);
/* Connections maitred opened to addr so far. */
unsigned seam_ep_connects(struct seam *s, const char *addr);
/* addr's connection in SEAM_EP_CONNECTING comes up (mode becomes UP), or
 * fails (closed before HTTP/2 was up: upstream.c's path for a failed
 * connect). Then the pump runs. */
void seam_ep_connect(struct seam *s, const char *addr);
void seam_ep_connect_fail(struct seam *s, const char *addr);
/* The worker's pool for addr, or NULL. */
struct mtd_pool *seam_pool(struct seam *s, const char *addr);
/* The nth upstream stream opened (over every endpoint, in order), or NULL;
 * how many opened (on addr; NULL: all). */
struct seam_ss *seam_stream(struct seam *s, unsigned nth);
unsigned seam_streams(struct seam *s, const char *addr);

/* Answers a server scripts; each is submitted on its session and goes
 * out at the next pump. */
void seam_respond(struct seam *s, struct seam_ss *ss, int status, const void *msg, size_t len);
void seam_respond_headers(struct seam *s, struct seam_ss *ss);
void seam_respond_data(struct seam *s, struct seam_ss *ss, const void *msg, size_t len);
void seam_respond_trailers(struct seam *s, struct seam_ss *ss, int status);
void seam_trailers_only(struct seam *s, struct seam_ss *ss, int status);
void seam_reset(struct seam *s, struct seam_ss *ss, uint32_t code);
/* ss's server sends what it has and maitred reads it: one I/O event,
 * whose turn has NOT ended (for looking at the engine mid-turn). */
void seam_deliver(struct seam *s, struct seam_ss *ss);
/* The same for what the app's client session has to send. */
void seam_deliver_client(struct seam *s);

/* ---- memory -------------------------------------------------------------- */

/* Blocks the engine (sidecar/call/, downstream.c's calls) holds from the
 * worker's slab, and whether p is one of them (never dereference a block
 * that is not). */
size_t seam_live_blocks(void);
bool seam_block_live(const void *p);
/* The next n allocations of the client connection's nghttp2 session fail
 * (the worker's nghttp2_mem is the seam's); how many failed so far. */
void seam_fail_down_allocs(struct seam *s, unsigned n);
unsigned seam_down_allocs_failed(struct seam *s);

/* A gRPC message (5-byte prefix + payload) into out; its length. */
size_t seam_grpc_msg(uint8_t *out, const void *payload, size_t len);

#endif
