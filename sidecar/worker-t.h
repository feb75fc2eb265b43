/* A worker thread's state (worker.c). */
#ifndef MTD_WORKER_T_H
#define MTD_WORKER_T_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include <event2/event_struct.h>
#include <nghttp2/nghttp2.h>

#include "core/log.h"
#include "core/slab.h"
#include "core/timers.h"
#include "sidecar/control/mailbox.h"

struct mtd_runtime;
struct mtd_rt_hold;
struct mtd_conn;
struct mtd_pool;
struct mtd_call;
struct mtd_call_bg;
struct mtd_in_worker;
struct mtd_down_port;

/* What another thread may ring a worker's bell for. */
enum {
	MTD_WORKER_BELL_SWAP = 1u << 0,  /* a runtime in next_rt (mtd_worker_set_runtime) */
	MTD_WORKER_BELL_HC = 1u << 1,    /* health checks in hc_inbox */
	MTD_WORKER_BELL_DRAIN = 1u << 2, /* mtd_worker_drain */
	MTD_WORKER_BELL_STOP = 1u << 3,  /* mtd_worker_stop */
};

/* Output buffers a worker keeps for its connections (spare_out). */
#define MTD_SPARE_OUT 4

struct mtd_worker {
	unsigned id;
	struct event_base *base;
	const struct mtd_runtime *rt; /* = hold->rt: what new calls route with */
	struct mtd_rt_hold *hold;
	/* The next runtime, set by the control thread (mtd_worker_set_runtime),
	 * taken when the bell rings MTD_WORKER_BELL_SWAP. One slot, a newer
	 * runtime replacing one not taken yet: not a mailbox (mailbox.h), as
	 * one runtime goes to every worker. */
	pthread_mutex_t next_mu;
	struct mtd_runtime *next_rt;
	/* The only way another thread reaches this worker: its base takes no
	 * lock (EVENT_BASE_FLAG_NOLOCK), so nothing but the bell may be
	 * touched from outside (control/mailbox.h). Bits: MTD_WORKER_BELL_*. */
	struct mtd_bell bell;
	int listen_fd;
	struct event listen_ev;
	struct event flush_ev;        /* the end of the turn (mtd_worker_end_turn) */
	bool flush_due;               /* flush_ev is active (mtd_worker_schedule_flush) */
	/* The turn's clocks (turn.h mtd_turn_now_ns, mtd_turn_wall_ms): each
	 * read at its first use in this turn of the loop, 0 until then;
	 * worker_main sets them to 0 before each turn (mtd_turn_forget). */
	int64_t turn_ns;
	int64_t turn_wall_ms;
	/* The start of the last call a client began here (turn.h
	 * mtd_turn_call_start_ns): the next one starts later. */
	int64_t last_call_start_ns;
	struct event housekeeping_ev; /* 1 s timer */
	/* The timers of its calls and attempts (lib/core/timers.h), and the
	 * one timerfd for the earliest (turn.c), read by timers_ev:
	 * timer_at_ns is where that one is set (INT64_MAX: not armed). */
	struct mtd_timers timers;
	struct event timers_ev;
	int timer_fd;
	int64_t timer_at_ns;
	bool in_timers; /* running due timers: re-armed once they are done */
	TAILQ_HEAD(, mtd_conn) dirty;
	LIST_HEAD(, mtd_conn) downs;
	uint32_t n_downs;
	/* Reloads that changed the client connections' settings so far
	 * (mtd_down_settings_changed): a connection made under an older count
	 * (an inbound peer's, in its TLS handshake then) is told to go as it
	 * begins. */
	uint32_t down_settings_gen;
	TAILQ_HEAD(, mtd_conn) graveyard;
	LIST_HEAD(, mtd_pool) pools; /* every pool of this worker */
	/* A pool was made since the last snapshot was taken: it may be on an
	 * older snapshot of its service than the worker's (made for a call
	 * that holds one), so the next one taken sets every pool's service,
	 * not only those of services it changed (worker_turn.c). */
	bool pools_born;
	/* Calls and attempts released this turn, freed at its end (the call
	 * engine's lifetime rule, call/call-t.h; mtd_call_reap). */
	LIST_HEAD(, mtd_down_stream) reap_calls; /* the calls (their ds link) */
	LIST_HEAD(, mtd_attempt) reap_attempts;
	/* Calls whose next attempt starts at the end of the turn, before the
	 * connections are written (call.c mtd_call_run_ready): never on the
	 * stack of the failure that asked for it. */
	struct mtd_call **ready;
	uint32_t n_ready, ready_cap;
	/* Calls waiting for their service's first endpoint set (call/park.c),
	 * held by their client's stream; at most MTD_CALL_PARKED_MAX. */
	LIST_HEAD(, mtd_call) parked;
	uint32_t n_parked;
	struct mtd_rt_hold *unhold_later; /* holds with users to drop at the reap */
	/* Holds alive: the current one and the retired ones calls still use
	 * (turn.c mtd_worker_hold_new ... mtd_worker_hold_release). */
	uint32_t n_holds;
	/* Sockets of closed connections lingering (conn.c: a graceful close). */
	LIST_HEAD(, mtd_linger) lingering;
	uint32_t n_lingering;
	nghttp2_session_callbacks *down_cbs, *up_cbs;
	/* Who owns the clients' requests (io/downstream-t.h): the call
	 * engine's port (call/down_port.c). */
	const struct mtd_down_port *down_port;
	nghttp2_option *down_opt, *up_opt;
	struct mtd_slab slab; /* recycled small blocks (calls, nghttp2) */
	nghttp2_mem ng_mem;   /* nghttp2's allocations go to slab */
	uint8_t *rbuf;        /* shared read buffer */
	size_t rbuf_len;
	/* Connection output buffers of the initial size that no connection
	 * holds (conn.c out_release): an idle connection gives its buffer
	 * back, and the next one to send takes one instead of malloc's. A
	 * lone call makes two connections idle, its client's and its
	 * upstream's. */
	uint8_t *spare_out[MTD_SPARE_OUT];
	unsigned n_spare_out;
	/* When a client stream last ended (downstream.c, the turn's clock),
	 * and the stream end the last give-back of freed memory followed
	 * (worker_turn.c mtd_worker_give_back): once per quiet spell after
	 * calls. */
	int64_t stream_end_ns;
	int64_t gave_back_end_ns;
	uint64_t rng;
	bool draining;
	bool drained; /* said so once */
	uint64_t replay_bytes;   /* request bytes calls keep for replay */
	struct mtd_log_gate failsafe_log; /* FAILSAFE answers: one log line a second */
	/* FAILBACK (failback.c): background re-sends alive, their count, and
	 * the drop log's rate limit. */
	LIST_HEAD(, mtd_call_bg) bg_calls;
	uint32_t n_bg;
	struct mtd_log_gate failback_log;
	/* Connections refused past downstream.max_connections: a line at
	 * most every 10 s, with the count since the last one. */
	struct mtd_log_gate refuse_log;
	/* Health checks the control thread hands over (health.c). */
	struct mtd_mbox hc_inbox;
	/* Inbound listeners and the handshakes under way (io/inbound.c), or
	 * NULL (none configured). */
	struct mtd_in_worker *in;
	pthread_t thread;
};

#endif
