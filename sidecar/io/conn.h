/* Socket I/O shared by both sides (conn.c): read -> nghttp2, gather
 * output -> one write per turn. Worker thread only. */
#ifndef MTD_CONN_H
#define MTD_CONN_H

#include <stdbool.h>
#include <stdint.h>

#include "sidecar/io/conn-t.h"

/* Mark c as having output to flush at the end of this event-loop turn. */
void mtd_conn_want_flush(struct mtd_conn *c);
/* The user data of stream sid, for a header field of it (c->field_ud). */
void *mtd_conn_field_ud(struct mtd_conn *c, int32_t sid);
/* Stream sid closed: forget it if it is the cached one. */
static inline void mtd_conn_field_forget(struct mtd_conn *c, int32_t sid)
{
	if (sid == c->field_sid)
		c->field_sid = 0, c->field_ud = NULL;
}
/* Read from the socket into the session. false when c was closed. */
bool mtd_conn_on_readable(struct mtd_conn *c);
/* Write pending output and whatever the session has. 0 or -errno (closed). */
int mtd_conn_flush(struct mtd_conn *c);
/* Register c's fd with the worker's base (read interest). */
int mtd_conn_start_io(struct mtd_conn *c);
/* c's session wants no more input (GOAWAY queued after a fatal error, or
 * sent with no stream left): stop reading the peer and close c within 5 s
 * whether or not its output drains. Idempotent. */
void mtd_conn_doom(struct mtd_conn *c);
/* Issue 6 (write_timeout, both sides): true when output has waited for c's
 * socket and the peer read none of it for more than timeout_ms. */
bool mtd_conn_write_stalled(const struct mtd_conn *c, int64_t now_ns, int64_t timeout_ms);
/* Tear down fd and events now; the memory is freed at the end of the turn. */
void mtd_conn_close(struct mtd_conn *c);
/* Free a CLOSED conn (worker, end of turn). */
void mtd_conn_free(struct mtd_conn *c);

#endif
