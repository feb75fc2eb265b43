/* The downstream port: a client's request stream as its owner sees it,
 * and the events downstream.c reports to that owner (the call engine,
 * call/down_port.c). The upstream side's twin is io/stream-t.h. io/ never
 * names the owner's type: it keeps a struct mtd_down_stream the owner
 * embeds, and reports through the worker's struct mtd_down_port.
 *
 *   HEADERS begins a request --> on_begin (the owner made, or the stream
 *      refused) -> on_field* -> on_headers (the block complete)
 *   -> on_data* -> on_end (END_STREAM, on DATA or on trailers)
 *   -> on_close (the stream closed: the client's RST_STREAM, or our
 *      answer's end), or on_gone (the client's connection closed)
 *
 * Exactly one of on_close and on_gone comes, last; the stream has left
 * its connection's list by then. What the owner asks of io/ in return
 * (consume request bytes, submit the answer, reset) goes through the
 * connection's nghttp2 session and downstream.h. Worker thread only. */
#ifndef MTD_DOWNSTREAM_T_H
#define MTD_DOWNSTREAM_T_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include <nghttp2/nghttp2.h>

struct mtd_conn;

/* io/'s part of a request stream's owner: its place in its connection's
 * list (conn->down_streams) while the stream is open. The owner may use
 * the link for a list of its own once on_close / on_gone came. */
struct mtd_down_stream {
	LIST_ENTRY(mtd_down_stream) link;
};

struct mtd_down_port {
	/* A request stream sid begins on c: its owner, or NULL (out of
	 * memory: the stream is reset). */
	struct mtd_down_stream *(*on_begin)(struct mtd_conn *c, int32_t sid);
	/* A field of the request's header block (flags: nghttp2's). 0, or an
	 * nghttp2 error code (the stream is reset). */
	int (*on_field)(struct mtd_down_stream *s, const uint8_t *name, size_t nlen, const uint8_t *value,
	                size_t vlen, uint8_t flags);
	/* The request's header block is complete (end_stream: it ended the
	 * request). */
	void (*on_headers)(struct mtd_down_stream *s, bool end_stream);
	/* Request DATA (the owner consumes it from the session: the window is
	 * the owner's to give back). */
	void (*on_data)(struct mtd_down_stream *s, const uint8_t *p, size_t n);
	/* END_STREAM after the headers: the request is whole. */
	void (*on_end)(struct mtd_down_stream *s);
	/* The stream closed (error_code: the client's RST_STREAM, or
	 * NO_ERROR); its session is still there. Last event. */
	void (*on_close)(struct mtd_down_stream *s, uint32_t error_code);
	/* The client's connection closed with the stream open. Last event. */
	void (*on_gone)(struct mtd_down_stream *s);
	/* The session's send_data callback: a response DATA frame whose data
	 * provider set NGHTTP2_DATA_FLAG_NO_COPY (nghttp2's arguments). */
	nghttp2_send_data_callback send_data;
};

#endif
