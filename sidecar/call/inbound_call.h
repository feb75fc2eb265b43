/* An inbound peer's call (inbound_call.c): mesh mode's step between a
 * request's headers and its routing. What it reads of the connection
 * (the peer's identity, its XFCC, the listener it came through) is io/'s,
 * read through io/inbound.h's accessors; what it decides is the call's.
 * Worker thread only. */
#ifndef MTD_INBOUND_CALL_H
#define MTD_INBOUND_CALL_H

#include "sidecar/call/call-t.h"
#include "sidecar/io/inbound.h"

/* The peer of call's connection when it is an inbound one, else NULL
 * (the app's call, a background call, a client gone). */
static inline const struct mtd_in_peer *mtd_call_inbound_peer(const struct mtd_call *call)
{
	return call->down ? mtd_inbound_peer(call->down) : NULL;
}

/* A request's headers arrived from an inbound peer (down_port.c): the
 * listener it came through found in the worker's snapshot (none: the
 * snapshot swap retired the connection's policy: UNAVAILABLE and GOAWAY),
 * maitred's x-forwarded-client-cert added; authorization
 * (PERMISSION_DENIED naming the identity and the method),
 * max_concurrent_calls (RESOURCE_EXHAUSTED); then mtd_call_start routes it
 * to the listener's app. Each decision goes to the access log and the
 * figures (call->verdict, ops/mesh.h). */
void mtd_call_inbound_start(struct mtd_call *call);
/* Route an inbound call on rt (call.c route()): the app service of the
 * entry of rt whose key is its connection's listener's, call->inbound
 * set to 1 + that entry's index in rt; -1 when rt has no such entry (the
 * listener was removed) or the client is gone. */
int mtd_call_inbound_route(const struct mtd_runtime *rt, struct mtd_call *call);
/* The listener an inbound call came through, as the runtime it was routed
 * with names it (the access log); "-" when unknown. */
const char *mtd_call_inbound_listener(const struct mtd_call *call);

#endif
