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

#endif
