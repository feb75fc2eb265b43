/* An upstream stream's owner, as the pool and the connection see it: a
 * call's attempt (call/attempt.c) or an active health check
 * (control/health.c). Both embed a struct mtd_up_stream; pool.c and
 * upstream.c reach them only through its ops, never by their type.
 *
 *   enqueued -- a connection has room --> ops->submit (opens the stream:
 *      |                                  mtd_up_open_stream) -> ops->on_stream
 *      +-- the wait ends otherwise --> ops->on_wait_end (why, reason)
 *   on the stream: ops->on_field* -> ops->on_headers (every HEADERS frame:
 *      response headers, 1xx, trailers: the owner tells them apart)
 *      -> ops->on_data* -> ops->on_trailers (END_STREAM on DATA)
 *      -> ops->on_close (always last; s->conn is NULL by then)
 *
 * A check (s->check) waits ahead of calls, is not counted against
 * upstream.max_pending or the circuit breaker, and makes the pool open a
 * connection only when none is usable (health.h): it is a probe of the
 * connections calls use, not a call. */
#ifndef MTD_STREAM_T_H
#define MTD_STREAM_T_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

struct mtd_conn;
struct mtd_pool;
struct mtd_up_stream;

/* Why a wait in a pool ended without a stream. */
enum mtd_up_wait_end {
	MTD_UP_CONNECT_FAILED, /* the pool's connection could not be made (reason) */
	MTD_UP_RETIRED,        /* the pool's endpoint left the service */
	MTD_UP_STOPPING,       /* maitred is stopping */
	MTD_UP_NO_STREAM,      /* a usable connection refused the stream (reason) */
};

struct mtd_up_stream_ops {
	/* Open the stream on c (mtd_up_open_stream with the owner's request).
	 * 0, or -errno: c takes no stream (the pool tries another, or ends
	 * the wait with MTD_UP_NO_STREAM when c is still READY). */
	int (*submit)(struct mtd_up_stream *s, struct mtd_conn *c);
	/* The stream is open (after submit). */
	void (*on_stream)(struct mtd_up_stream *s);
	/* Out of the pool without a stream. */
	void (*on_wait_end)(struct mtd_up_stream *s, enum mtd_up_wait_end why, const char *reason);
	/* A header field of a HEADERS block (flags: nghttp2's). 0, or an
	 * nghttp2 error code (the stream is reset). */
	int (*on_field)(struct mtd_up_stream *s, const uint8_t *name, size_t nlen, const uint8_t *value, size_t vlen,
	                uint8_t flags);
	/* A HEADERS block is complete (end_stream: it ended the stream). */
	void (*on_headers)(struct mtd_up_stream *s, bool end_stream);
	void (*on_data)(struct mtd_up_stream *s, const uint8_t *p, size_t n);
	/* DATA with END_STREAM: the response ended without trailers. */
	void (*on_trailers)(struct mtd_up_stream *s);
	/* The stream is gone: closed (error_code; lost NULL) or its connection
	 * lost (lost: the reason). s->conn is NULL already. Last event. */
	void (*on_close)(struct mtd_up_stream *s, uint32_t error_code, const char *lost);
	/* The session's send_data callback, for a DATA frame whose data
	 * provider set NGHTTP2_DATA_FLAG_NO_COPY (src: the provider's
	 * source.ptr; framehd, n: nghttp2's): write the frame into s->conn's output
	 * (mtd_conn_send_data). 0, NGHTTP2_ERR_PAUSE or an nghttp2 error code.
	 * NULL for an owner whose provider never sets the flag. */
	int (*send_data)(struct mtd_up_stream *s, const uint8_t *framehd, size_t n, void *src);
};

struct mtd_up_stream {
	const struct mtd_up_stream_ops *ops;
	struct mtd_pool *pool; /* waiting in it, else NULL */
	struct mtd_conn *conn; /* its stream is on it, else NULL */
	int32_t sid;           /* while conn is set */
	bool check;            /* a health check (see above) */
	TAILQ_ENTRY(mtd_up_stream) pending_link;
	LIST_ENTRY(mtd_up_stream) conn_link;
};

#endif
