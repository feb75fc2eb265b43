/* A connection of either side (conn.c's I/O core; downstream.c and
 * upstream.c the two roles). */
#ifndef MTD_CONN_T_H
#define MTD_CONN_T_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include <event2/event_struct.h>
#include <nghttp2/nghttp2.h>

struct mtd_worker;
struct mtd_down_stream;
struct mtd_pool;
struct mtd_up_stream;
struct mtd_in_peer;
struct mtd_bufq_chunk;
struct mtd_xprt_ops;
struct ssl_st;

struct mtd_conn;

/* A span of a call's queue waiting in a connection's output (conn.c). */
struct mtd_out_ref {
	struct mtd_bufq_chunk *chunk;
	const uint8_t *p;
	size_t n;
	size_t at; /* written after out[..at) */
};

/* What differs between the two kinds of connection for the I/O core
 * (conn.c), which knows no kind (an ops table per kind, like
 * mtd_xprt_ops): downstream.c and upstream.c each fill one and set it at
 * creation. Worker thread only. */
struct mtd_conn_ops {
	const char *role; /* "client", "upstream": how messages name the peer */
	/* The bytes p[0..n) of one socket read, before nghttp2 gets them
	 * (NULL: none to look at). 0, or < 0: c was doomed (its GOAWAY is
	 * queued), feed it nothing more. */
	int (*prescan)(struct mtd_conn *c, const uint8_t *p, size_t n);
	/* nghttp2 took a read's bytes without error (NULL: nothing to do).
	 * May close or doom c. */
	void (*after_recv)(struct mtd_conn *c);
	/* c is closing, its fd and events gone: detach what holds it (its
	 * calls or attempts learn it from here). */
	void (*on_close)(struct mtd_conn *c);
	/* A frame mtd_conn_prescan saw that nghttp2 skips unread (NULL:
	 * nothing to do): PRIORITY (no RFC 7540 priorities) or a frame type
	 * it does not know. Work for nothing. May doom c. */
	void (*on_skipped_frame)(struct mtd_conn *c);
};

/* Upstream connection states:
 *
 *   CONNECTING --tcp up--> HANDSHAKE --TLS done--> READY --GOAWAY*--> DRAINING
 *       |     (h2c skips HANDSHAKE)                  |                    |
 *       +------------- error / timeout --------------+-----> CLOSED <-----+
 *
 * READY: new streams may start once the peer's SETTINGS arrived
 *        (settings_seen; connect_timeout bounds the wait) and while
 *        streams < max_streams. Closing before SETTINGS counts as a
 *        failed connect: the pool's waiting calls move on.
 * DRAINING: no new streams; closes when its last stream ends.
 *        (*) The peer's GOAWAY, or ours: its service's TLS policy
 *        changed, or it outlived upstream.max_connection_age (pool.c).
 *        One not up yet under an old TLS policy is closed instead.
 * CLOSED: no fd, no events; freed by the worker at the end of the turn.
 */
enum mtd_conn_state {
	MTD_CONN_CONNECTING,
	MTD_CONN_HANDSHAKE,
	MTD_CONN_READY,
	MTD_CONN_DRAINING,
	MTD_CONN_CLOSED,
};

/* RST_STREAM(STREAM_CLOSED) answers to late DATA one read may queue, and
 * the peer's resets and stream ends the byte scan remembers (conn.c). */
#define MTD_LATE_DATA_DUE 8
#define MTD_SCAN_RST 8

/* Closed streams remembered per connection (RFC 9113 §5.1, conn.c). */
#define MTD_CLOSED_RING 16


struct mtd_conn {
	const struct mtd_conn_ops *ops; /* its kind's (never NULL) */
	enum mtd_conn_state state;
	struct mtd_worker *w;
	int fd;
	const struct mtd_xprt_ops *xprt; /* NULL = plain TCP (transport.h) */
	struct ssl_st *ssl;              /* TLS only */
	bool tls_up;                     /* TLS handshake completed */
	bool tls_drained;                /* the last SSL_read found the socket empty */
	bool tls_short_read;             /* the last read(2) under TLS filled less than asked */
	nghttp2_session *ng;
	struct event rev, wev;   /* fd readable / writable */
	/* Its one timer, made with it (mtd_conn_timer_init) and armed with
	 * what it runs: the connect and SETTINGS timeouts (upstream), the
	 * doom deadline (both sides). */
	struct event timer;
	void (*timer_fn)(struct mtd_conn *c);
	bool want_write_on_read; /* TLS asked for writability to read */
	bool want_read_on_write; /* TLS asked for readability to write */
	bool read_paused;        /* output backed up, or doomed: stop reading */
	int64_t doomed_ns;       /* session wants no more input: closes 5 s on */
	int64_t stalled_ns;      /* output waiting and the peer read none since */
	size_t stalled_read;     /* bytes read from the peer since then (conn.c) */
	int32_t max_sid;         /* highest stream with a call (downstream) */
	uint32_t glitches;       /* empty/invalid frames (downstream) */
	/* Downstream deadlines (worker housekeeping): the client preface and
	 * first SETTINGS within preface_timeout of accepted_ns; a header block
	 * begun at hdr_start_ns (0 = none) complete within header_timeout. */
	int64_t accepted_ns;
	int64_t hdr_start_ns;
	int32_t hdr_sid; /* stream of the last header block begun */
	/* The header block being decoded (downstream): name + value + 32 of
	 * every field nghttp2 checked, request or trailers, kept or dropped. */
	uint32_t block_bytes;
	bool preface_done;
	/* The stream whose header fields on_header receives and its user data
	 * (call downstream, attempt upstream): looked up once per block, not
	 * once per field, as a block's fields never interleave with another
	 * frame (RFC 9113 §4.3). Cleared when that stream closes, so it is
	 * never a pointer the stream no longer holds (conn.c
	 * mtd_conn_field_ud). */
	int32_t field_sid;
	void *field_ud;
	/* RFC 9113 §5.1 on streams nghttp2 forgot (conn.c, both sides): the
	 * highest stream id opened (by the client: the peer downstream,
	 * maitred upstream), the stream of the RST_STREAM being processed, and
	 * the last closes with how each happened. */
	int32_t top_sid;
	int32_t rst_recv_sid;
	/* The last streams the scan saw a RST_STREAM for, and the last the
	 * peer ended (END_STREAM) (rings): a read can carry a burst of resets
	 * and then each stream's late DATA. */
	int32_t scan_rst_sids[MTD_SCAN_RST];
	int32_t scan_end_sids[MTD_SCAN_RST];
	uint8_t scan_rst_next, scan_end_next;
	uint8_t scan_rst_n, scan_end_n; /* notes made, up to MTD_SCAN_RST (each ring) */
	int32_t late_data_sid; /* the last one answered RST_STREAM(STREAM_CLOSED) for DATA after it */
	/* Those answers, submitted once nghttp2 has read the bytes: at most
	 * MTD_LATE_DATA_DUE per read (the DATA is dropped either way). */
	int32_t late_data_due[MTD_LATE_DATA_DUE];
	uint8_t n_late_data_due;
	uint8_t closed_next;
	struct {
		int32_t sid;
		uint8_t how;
	} closed_ring[MTD_CLOSED_RING];
	/* RFC 9113 §5.3.1/§6.3 (conn.c, mtd_conn_prescan): where the byte
	 * stream is in the peer's frames. */
	uint32_t scan_skip;  /* bytes to pass before the next frame header */
	uint8_t scan_hdr[9]; /* the frame header being gathered */
	uint8_t scan_have;   /* of scan_hdr, or of scan_dep below */
	bool scan_in_prio;   /* gathering a PRIORITY frame's dependency */
	uint8_t scan_dep[4];
	/* Downstream: response bytes buffered for this client's calls, not
	 * read by it yet (sum of their resp queues; max_buffered_response). */
	size_t resp_held;
	bool in_dirty;
	TAILQ_ENTRY(mtd_conn) dirty_link;
	LIST_ENTRY(mtd_conn) link; /* worker's downstream list or pool's list */
	/* Pending output: out[out_off, out_len); NULL while there is none and
	 * c has no stream (conn.c out_release). */
	uint8_t *out;
	size_t out_off, out_len, out_cap;
	/* DATA payloads written from the calls' queues where they are, not
	 * copied into out (plain TCP only: conn.c out_ref): each goes out
	 * between out[..at) and out[at..), its chunk held until it is
	 * written. refs[ref_head, n_refs) wait; ref_bytes, their bytes.
	 * NULL while none waits and c has no stream, as out. */
	struct mtd_out_ref *refs;
	uint16_t ref_head, n_refs;
	size_t ref_bytes;
	LIST_HEAD(, mtd_down_stream) down_streams; /* downstream: request streams open here (downstream-t.h) */
	LIST_HEAD(, mtd_up_stream) streams; /* upstream: streams open here (io/stream-t.h) */
	uint32_t n_streams;               /* streams open (length of that list) */
	/* Streams that may be open at once: upstream, min(the peer's SETTINGS,
	 * the config's cap); downstream, what its SETTINGS advertised (a
	 * request past it is refused, downstream.c). */
	uint32_t max_streams;
	/* Downstream: the SETTINGS_INITIAL_WINDOW_SIZE its SETTINGS
	 * advertised, its streams' window for its whole life (a reload that
	 * changes the config's sends it GOAWAY; it is never told a new one). */
	uint32_t stream_window;
	/* Downstream: when it was sent the GOAWAY that refuses nothing
	 * (mtd_down_notice: a reload's new settings, max_connection_age),
	 * 0 = never; the real one follows a housekeeping tick (1 s) later at
	 * the earliest (mtd_down_tick). */
	int64_t notice_ns;
	uint32_t settings_gen; /* downstream: its worker's down_settings_gen when it was made */
	int64_t last_active_ns;           /* last stream end or start, for idle */
	/* An inbound peer's connection (inbound.c: listener, identity,
	 * x-forwarded-client-cert), owned; NULL for the app's and upstream. */
	struct mtd_in_peer *in;
	/* upstream only */
	struct mtd_pool *pool;
	/* The generation of its service's TLS policy it was made under
	 * (runtime-t.h tls_gen), set when its transport starts: it takes
	 * streams only while the pool's service has that generation. */
	uint64_t tls_gen;
	int64_t opened_ns; /* its connect began (upstream.max_connection_age) */
	bool settings_seen;   /* the peer's first SETTINGS arrived */
	bool goaway_seen;     /* the peer's first GOAWAY arrived (logged, obeyed) */
	int64_t ping_sent_ns; /* 0 = no keepalive PING outstanding */
	int64_t last_read_ns;
	char peer[64]; /* "127.0.0.1:50051" for messages */
};

#endif
