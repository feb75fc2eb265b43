/* The call engine's types: a call and its attempts.
 *
 * THE LIFETIME RULE (one for the whole engine; HACKING.md "Calls and
 * attempts"):
 *
 *   holders                                  release            reap
 *   call:    its downstream stream (down),   last holder   ->   end of the
 *            each attempt in its list,       lets go            worker's turn
 *            its retry timer while armed,    (mtd_call_release)  (mtd_call_reap)
 *            its worker's ready list while
 *            its next attempt, or its
 *            client's close, is due
 *   attempt: its call while live, a pool     not live and
 *            while PENDING, its upstream     no stream
 *            stream while `up` is set        (mtd_attempt_release)
 *
 * Releasing an object stops what could deliver an event to it (its
 * timers; an attempt leaves its call's list, so the call may be released
 * in turn) and queues it on its worker's reap list. Its memory is freed
 * only at the end of the turn, after the flush (worker_turn.c
 * mtd_worker_end_turn), when no callback of the engine is on the stack.
 * So every pointer a function of the engine holds stays valid until the
 * turn ends, whatever it calls:
 * no function needs to guard an object against the calls it makes, and
 * none does. An object's state says whether it is over (a call DONE, an
 * attempt FAILED / CANCELLED / DONE); entry points ignore events for an
 * object that is over. A call that gains a holder again before the reap
 * (a FAILBACK re-send armed after its try failed) is not freed: the reap
 * frees only what is still unheld.
 *
 * What a released object held of the snapshot (the call's runtime holds)
 * is let go at the reap too: the config its fault policy points into
 * stays alive as long as its memory. What others can see of a client's
 * call (its figures, its access-log line, its place in the circuit
 * breaker's count) is settled at its release, before the flush sends its
 * last bytes: a client told of the end may look at once. */
#ifndef MTD_CALL_T_H
#define MTD_CALL_T_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "sidecar/call/headers-t.h"
#include "sidecar/io/downstream-t.h"
#include "sidecar/io/stream-t.h"
#include "core/bufq.h"
#include "core/timers.h"
#include "fault/fault.h"
#include "grpc/grpc.h"

/* One upstream try of a call (the state machine is lib/fault/attempt.c's:
 * BACKOFF -> PENDING -> OPEN -> ANSWERING -> DONE, or FAILED / CANCELLED).
 * Held by its call while live, by a pool while PENDING and by its
 * upstream stream while `s.conn` is set; released (the rule above) when it is
 * neither live nor on a stream. */
struct mtd_attempt {
	struct mtd_call *call;
	enum mtd_attempt_state state;
	uint32_t index; /* 0 = first; grpc-previous-rpc-attempts (gRPC A6) */
	struct mtd_endpoint *ep;
	int ep_idx;                       /* in the snapshot of picker */
	struct mtd_lb_picker *picker;     /* the one that picked it */
	struct mtd_lb_layer *layer;       /* the routing layer that picked it, or NULL */
	struct mtd_outlier_set *outliers; /* the ejection state ep_idx indexes, or NULL */
	/* What the pool and the connection see of it (io/stream-t.h): waiting
	 * in s.pool while PENDING, its stream s.sid on s.conn while that is set. */
	struct mtd_up_stream s;
	LIST_ENTRY(mtd_attempt) call_link; /* the call's list; once released, the worker's reap list */
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
	bool released; /* the lifetime rule: on the reap list, over */
	bool resp_grpc; /* its response headers say content-type application/grpc */
};

enum mtd_call_state {
	MTD_CALL_HEADERS,  /* reading the request headers */
	MTD_CALL_WAIT_KEY, /* hashing a message field: waiting for message 1 */
	MTD_CALL_RUNNING,  /* attempts going on (or a retry waiting), relaying */
	/* Routed to a service whose source has not answered yet: no attempt,
	 * on its worker's parked list until the first set (park.c). */
	MTD_CALL_PARKED,
	MTD_CALL_DONE,     /* response finished or failed; draining streams */
};

/* BROADCAST's part of a call (call/mode/broadcast.c), allocated by calls of that mode
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

/* The part of a background call, one with no client, on its worker's
 * list while it lives: a FAILBACK re-send (failback.c), or a mirror copy
 * (mirror.c: mirror set; its try's end goes to mirror.c). */
struct mtd_call_bg {
	struct mtd_call *call;
	LIST_ENTRY(mtd_call_bg) link;
	int64_t timeout_ms; /* each try's deadline (0 = per_try_timeout only) */
	uint32_t tries;     /* re-sends started */
	bool mirror;        /* a mirror copy: not a re-send, never re-sent */
	/* A mirror copy: the call it copies while both live (each clears
	 * the other's link when it ends first: mirror.c, call.c call_free). */
	struct mtd_call *primary;
	/* The snapshot of the call it is a copy of, until its first re-send
	 * routes it on the worker's then current one: its fault policy (and
	 * the copy's call->fault) points into that snapshot's config. */
	struct mtd_rt_hold *origin;
};

/* One call. Every call in flight holds one, so it is kept within the
 * slab's 512-byte class (HACKING.md "Memory per call"): what
 * only some calls need (BROADCAST, FAILBACK) is allocated beside it. */
struct mtd_call {
	struct mtd_worker *w;
	enum mtd_call_state state;
	/* Downstream side: the client's stream down_sid on down (NULL once
	 * it closed: call/down_port.c, the one writer of both), and what
	 * io/ keeps of it (downstream-t.h: down's list; once released, down
	 * NULL, the link of the worker's reap list). */
	int32_t down_sid;
	struct mtd_conn *down;
	struct mtd_headers req_hdrs;
	struct mtd_down_stream ds;
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
	 * endpoints: inline up to 64, else allocated (tried, then refused).
	 * Before its first pick (tried NULL) a call has no use for the
	 * inline words: while PARKED they are its link in its worker's
	 * parked list (park.c), zeroed again when it leaves it. */
	union {
		struct {
			uint64_t tried_inline, refused_inline;
		};
		LIST_ENTRY(mtd_call) park_link;
	};
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
	LIST_HEAD(, mtd_attempt) attempts;
	struct mtd_attempt *cur, *ans;
	uint32_t n_attempts;    /* started, transparent ones included */
	uint16_t retries_done;  /* policy retries started (<= MTD_FAULT_RETRIES_MAX) */
	/* call->resp's bytes are counted in its client connection's resp_held
	 * (all of them, or none: relay.c, the one writer of that sum). */
	bool resp_counted;
	/* On its worker's ready list, which holds it: its next attempt, or
	 * the engine's side of its client's close (down_closed), runs at the
	 * end of the turn (mtd_call_next_attempt_later, _down_closed_later). */
	bool next_due;
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
	struct mtd_call_bc *bc;           /* BROADCAST (mode/broadcast.c), else NULL */
	struct mtd_call_bg *bg;           /* a background call (failback.c, mirror.c), else NULL */
	struct mtd_call *mirror;          /* its mirror copy while that runs (mirror.c), else NULL */
	/* Flags, together, one bit each (what made room for xroute below;
	 * none has its address taken). */
	bool reaping : 1;   /* on its worker's reap list (released) */
	bool counted : 1;   /* its end is in the figures, the access log and the circuit count */
	bool committed : 1; /* no replay any more (headers relayed / outgrown) */
	bool req_sink : 1;  /* nobody reads the request any more: drop it */
	bool req_eof : 1;   /* client sent END_STREAM */
	bool key_ready : 1; /* captured all we will read of it */
	bool key_compressed : 1;
	bool resp_headers_sent : 1; /* we submitted headers downstream */
	bool resp_eof : 1;          /* the answer is complete (trailers or synth) */
	bool resp_deferred : 1;
	bool resp_done : 1; /* trailers / END_STREAM submitted downstream */
	bool mx_ep_answered : 1;
	bool delayed : 1; /* fault_injection delay: waiting on its retry timer, no attempt yet */
	/* Tracing (trace.c): the request has a traceparent field (set as the
	 * header block arrives, so that a call without one never searches
	 * for it), and the call's context, once derived, was not sampled (its
	 * end writes no span and derives nothing again). */
	bool trace_tp : 1;
	bool trace_unsampled : 1;
	/* Routed once, or done waiting for the listener's first routes
	 * (park.c): routing again never waits for them. */
	bool routes_waited : 1;
	/* An inbound peer's call (inbound_call.c): 1 + its listener's index
	 * in the inbound set of the runtime it was routed with, found by key
	 * at each routing (0 = the app's own call), and what authorization decided
	 * (enum mtd_in_verdict), for routing and the access log. In the
	 * flags' padding: the call stays within its slab class. */
	uint8_t inbound;
	uint8_t verdict;
	/* Its client's stream closed (1 + the HTTP/2 error code, 255 for any
	 * past 253; 0 = not yet told): the port recorded it and listed the
	 * call; the ready list runs the engine's side (down_port.c,
	 * mtd_call_run_ready). No new attempt starts meanwhile. */
	uint8_t down_closed;
	/* The control plane's route the call took (in hold's runtime's
	 * xroutes), NULL = none: its hash key and fault injection. */
	const struct mtd_rt_xroute *xroute;
};

#endif
