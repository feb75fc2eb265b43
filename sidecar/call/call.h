/* One call (call.c): routing, pick, the retained request, deadline, how
 * it ends. Types: call-t.h. Worker thread only. */
#ifndef MTD_CALL_H
#define MTD_CALL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <nghttp2/nghttp2.h>

#include "sidecar/call/call-t.h"

struct mtd_worker;
struct mtd_rt_load;

/* The call whose downstream stream (io/'s part of it) is ds. */
static inline struct mtd_call *mtd_call_of_stream(struct mtd_down_stream *ds)
{
	return (struct mtd_call *)((char *)ds - offsetof(struct mtd_call, ds));
}

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


/* BROADCAST: every attempt ended OK: answer with the held answer. */
void mtd_call_answer_held(struct mtd_call *call);
/* BROADCAST: start another attempt on endpoint idx (a refused stream's
 * transparent replay on the endpoint that refused it). */
void mtd_call_relaunch(struct mtd_call *call, int idx);
/* The answering stream is gone: request bytes nobody will send (window
 * given back, later DATA dropped). */
void mtd_call_drop_request(struct mtd_call *call);
/* Count the call in load->calls (its service's calls in flight, which
 * circuit_breaker.max_calls and an inbound listener's
 * max_concurrent_calls limit), once: a call counted already (an inbound
 * peer's, at its listener, in the service it is routed to) is not counted
 * again. It is given back once: when maitred answers it itself
 * (mtd_call_fail, mtd_call_answer_ok, _held: its client may keep its
 * request half open for long after), else when it is released (or
 * freed). true while the count, this call included, is within max. */
bool mtd_call_count_load(struct mtd_call *call, struct mtd_rt_load *load, uint32_t max);
/* The call is routed to a service, path[1 .. 1 + svc_len): from here on
 * its figures and access-log line are its :path's (call->mx), whatever
 * ends it (a refusal included). */
void mtd_call_routed(struct mtd_call *call, const char *path, size_t len, size_t svc_len);
/* Release the call if nothing holds it any more (its downstream stream,
 * an attempt, its retry timer): its deadline stops and it is freed at the
 * end of the turn (the lifetime rule, call-t.h). Any function may call it
 * whenever a holder lets go; idempotent. */
void mtd_call_release(struct mtd_call *call);
/* The end of the worker's turn (worker.c, after the flush): free the
 * attempts and calls released during it (a call held again since stays). */
void mtd_call_reap(struct mtd_worker *w);
/* Start the call's next attempt now: pick an endpoint (never one already
 * tried while another is eligible) and queue it in its pool; ends the call
 * when none is left. */
void mtd_call_next_attempt(struct mtd_call *call);
/* mtd_call_next_attempt at the end of the turn, from the worker's ready
 * list (which holds the call meanwhile): an attempt that failed on the
 * stack of its own start (a connect refused at once) must not start the
 * next one there, or the engine recursed once per endpoint. The call
 * fails (out of memory) if it cannot be listed. */
void mtd_call_next_attempt_later(struct mtd_call *call);
/* The client's stream of call closed (error_code: its RST_STREAM's, or
 * NO_ERROR; CANCEL when its connection went), call->down already NULL:
 * mtd_call_on_down_close at the end of the turn, from the ready list, not
 * on the stack of io/'s callback (down_port.c). Meanwhile no attempt
 * starts. Out of memory for the list: at once. */
void mtd_call_down_closed_later(struct mtd_call *call, uint32_t error_code);
/* The worker's flush (worker.c), before it writes the connections: for
 * each call on the ready list, those listed meanwhile included, the
 * engine's side of its client's close, else its next attempt; then let
 * the list's holds go. */
void mtd_call_run_ready(struct mtd_worker *w);
/* Arm the call's deadline timer at call->deadline_ns (none: disarmed),
 * the call's own callback (DEADLINE_EXCEEDED): a timer a waiting call
 * moved earlier goes back (park.c). 0, or -ENOMEM. */
int mtd_call_arm_deadline(struct mtd_call *call);
/* Route a call that has no attempt again by its :path on the worker's
 * current snapshot (call->svc, method, fault, xroute), the snapshot it
 * held let go at the end of the turn. false when no service has that
 * name any more (nothing failed: call->svc NULL, the caller ends it). */
bool mtd_call_route_current(struct mtd_call *call);
/* Attempt a waits in a retired pool (its endpoint was removed): cancel it
 * (nobody is blamed) and start the call anew on the worker's current
 * snapshot. */
void mtd_call_reroute(struct mtd_attempt *a);
/* Commit the call to attempt a (a's response headers are relayed, or the
 * request a is sending outgrew what may be kept): a becomes call->cur,
 * every other live attempt is cancelled, no hedge starts, and only the
 * request bytes a has not sent yet are kept. No-op once committed. */
void mtd_call_commit(struct mtd_call *call, struct mtd_attempt *a);
/* Data provider of an attempt's upstream stream (src->ptr: the attempt a):
 * says how many of the retained request's bytes from the attempt's
 * position the next DATA frame carries (NGHTTP2_DATA_FLAG_NO_COPY; a
 * BROADCAST request that outgrows the replay buffer fails the call here).
 * mtd_call_send_req, the attempt's stream's send_data op (up: the
 * upstream connection), writes the frame into the connection's output
 * from call->req, moves the attempt on, reopens the client's window for
 * bytes sent the first time, commits a call whose request outgrew what
 * may be kept, and drops what a committed call sent. Returns 0,
 * NGHTTP2_ERR_PAUSE (the output reached its mark) or
 * NGHTTP2_ERR_CALLBACK_FAILURE (out of memory: the connection fails). */
ssize_t mtd_call_read_req(nghttp2_session *s, int32_t sid, uint8_t *buf, size_t len, uint32_t *flags,
                          nghttp2_data_source *src, void *ud);
int mtd_call_send_req(const uint8_t *framehd, size_t n, struct mtd_attempt *a, struct mtd_conn *up);

#endif
