/* FAILBACK's background re-sends (failback.c; Dubbo's
 * failback). Worker thread only. */
#ifndef MTD_FAILBACK_H
#define MTD_FAILBACK_H

struct mtd_call;
struct mtd_timer;
struct mtd_worker;

/* call failed under FAILBACK and is about to be answered OK: queue a copy
 * of its request (headers, bytes) for re-sending, or count and log it
 * dropped (queue full, request too large for the replay accounting or not
 * complete). what: the failure. */
void mtd_failback_enqueue(struct mtd_call *call, const char *what);
/* A background call's try failed: re-send after the backoff while
 * failback.retries allow, else drop it (counted, logged). A mirror copy
 * goes to mtd_mirror_ended instead, here and below. */
void mtd_failback_failed(struct mtd_call *call, const char *what);
/* A background call was answered (a status outside retry_on): done. */
void mtd_failback_done(struct mtd_call *call);
/* The worker stops: every queued re-send is dropped, the count logged;
 * mirror copies on the list end with it. */
void mtd_failback_drop_all(struct mtd_worker *w);

/* Copy call's request headers and the bytes it keeps (call->req, whole)
 * into copy, a background call of the same worker (a FAILBACK copy, a
 * mirror's): 0, or -ENOMEM with copy's headers and bytes cleared. */
int mtd_failback_copy_request(struct mtd_call *copy, const struct mtd_call *call);

#endif
