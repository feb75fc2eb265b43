/* The response side towards the client (relay.c): relayed, or an answer
 * of maitred's own. Worker thread only. */
#ifndef MTD_RELAY_H
#define MTD_RELAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <nghttp2/nghttp2.h>

#include "grpc/grpc.h"

struct mtd_call;
struct mtd_attempt;

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
/* The client's stream is going (call->down still set): what the call's
 * response counted in the connection's resp_held goes back. Called by the
 * connection once per call, before it lets go of the call. */
void mtd_relay_down_gone(struct mtd_call *call);
/* Give back what the call holds of the response (window included). */
void mtd_relay_drop(struct mtd_call *call);
/* Data provider of a call's response towards the client (src->ptr: the
 * call): says how many of call->resp's bytes the next DATA frame carries,
 * with NGHTTP2_DATA_FLAG_NO_COPY, and submits the trailers after the last
 * ones. The bytes are taken by mtd_call_send_resp, the downstream
 * sessions' send_data callback (ud: the client's connection), which
 * writes the frame into the connection's output, drops them from
 * call->resp and reopens the upstream stream's window for them. It
 * returns 0, NGHTTP2_ERR_PAUSE (the output reached its mark) or
 * NGHTTP2_ERR_CALLBACK_FAILURE (out of memory: the connection fails). */
ssize_t mtd_call_read_resp(nghttp2_session *s, int32_t sid, uint8_t *buf, size_t len, uint32_t *flags,
                           nghttp2_data_source *src, void *ud);
int mtd_call_send_resp(nghttp2_session *s, nghttp2_frame *frame, const uint8_t *framehd, size_t n,
                       nghttp2_data_source *src, void *ud);

#endif
