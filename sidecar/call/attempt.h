/* One upstream try of a call (attempt.c), from pick to stream close.
 * Upstream events (upstream.c, pool.c) arrive here; a failed attempt asks
 * lib/fault what the call does next (mtd_fault_decide) and carries it
 * out. Worker thread only. */
#ifndef MTD_ATTEMPT_H
#define MTD_ATTEMPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sidecar/call/call-t.h"

/* A new attempt of call (state BACKOFF, in the call's list, its
 * per_try_timeout armed), or NULL when out of memory. */
struct mtd_attempt *mtd_attempt_new(struct mtd_call *call);
/* State change through lib/fault's table; false (and a debug line) when
 * the event cannot happen in the current state. */
bool mtd_attempt_step(struct mtd_attempt *a, enum mtd_attempt_event ev);
/* The pool got a stream for a (PENDING -> OPEN). */
void mtd_attempt_on_stream(struct mtd_attempt *a);
void mtd_attempt_on_resp_headers(struct mtd_attempt *a, bool end_stream);
void mtd_attempt_on_resp_data(struct mtd_attempt *a, const uint8_t *p, size_t n);
void mtd_attempt_on_resp_trailers(struct mtd_attempt *a);
/* Its upstream stream closed (a->s.conn already NULL). */
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
/* Release a if it is over and no stream holds it (the lifetime rule,
 * call-t.h): its timer stops, the balancer hears of it once, it leaves
 * its call's list (which may release the call) and is freed at the end of
 * the turn. Idempotent. */
void mtd_attempt_release(struct mtd_attempt *a);

/* The stream ops of every attempt (attempt_stream.c; io/stream-t.h):
 * a->s.ops. */
extern const struct mtd_up_stream_ops mtd_attempt_stream_ops;
/* The attempt's request has more bytes: resume its stream's data provider. */
void mtd_attempt_resume(struct mtd_attempt *a);

#endif
