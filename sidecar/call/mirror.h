/* A call's mirror copy (mirror.c): a background call to the mirror entry,
 * its answer dropped, what is lost counted. Worker thread only. */
#ifndef MTD_MIRROR_H
#define MTD_MIRROR_H

#include <stdbool.h>
#include <stddef.h>

struct mtd_call;

/* The call's request is complete: send its mirror copy when its entry
 * mirrors (and the draw says so), a background call to the mirror entry
 * with a copy of the headers (:authority's host suffixed -shadow;
 * credentials such as authorization and cookie kept) and the request
 * bytes, if the whole request was kept (at most fault.replay_buffer: else
 * counted as too large) and the mirror entry's rate_limit and
 * circuit_breaker.max_calls have room (else dropped and counted). The
 * primary is never affected. Every copy not delivered is counted by
 * reason (maitred_mirror_dropped_total). A call that ended before its
 * request was whole (refused by its own rate_limit, aborted, failed) is
 * not mirrored: there is no traffic of it to show. */
void mtd_mirror_start(struct mtd_call *call);

/* The host of authority in[0..len) with "-shadow" appended before any
 * port, into out[0..cap) (not terminated): "shop.test" ->
 * "shop.test-shadow", "shop.test:8080" -> "shop.test-shadow:8080", as
 * Envoy's shadow. Returns the length written, or 0 when the authority is
 * left as it is: empty, an IPv6 literal ("[::1]:80": no suffix makes a
 * valid host of an address), or over cap. Pure. */
size_t mtd_mirror_shadow_authority(const char *in, size_t len, char *out, size_t cap);

/* The worker stops with copy still running (failback.c's drop at stop):
 * counted as dropped at shutdown. */
void mtd_mirror_dropped_at_stop(struct mtd_call *copy);

/* The call's client stream closed: its copy, if still running, is
 * cancelled (RST_STREAM CANCEL) and counted. */
void mtd_mirror_primary_ended(struct mtd_call *call);

/* A mirror copy's try ended (failback.c hands background calls that are
 * mirror copies here): answered (ok), or failed (what). Counted; the copy
 * is over and released when nothing holds it. */
void mtd_mirror_ended(struct mtd_call *copy, bool ok, const char *what);

#endif
