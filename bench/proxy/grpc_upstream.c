/*
 * grpc_upstream: a minimal, single-threaded gRPC unary "echo" server for the
 * proxy benchmark (bench/proxy/run.sh). Not part of maitred.
 *
 * It answers every request, once the request stream has ended, with
 *
 *   HEADERS  :status 200, content-type application/grpc
 *   DATA     one length-prefixed gRPC message (a protobuf with field 1 =
 *            bytes of -z length), END_STREAM not set
 *   HEADERS  grpc-status 0 (trailers, END_STREAM)
 *
 * (gRPC PROTOCOL-HTTP2: Response -> Response-Headers *Length-Prefixed-Message
 * Trailers). The request body is read and dropped. Two more shapes, for
 * the bulk workloads (bench/proxy/bulk.sh), chosen by :path:
 *
 *   .../ServerStream  server streaming: the answer is `bench-messages`
 *                     (a request header, default 1) copies of the -z
 *                     message, then the trailers
 *   .../ClientStream  client streaming: the request's bytes are counted
 *                     and the one answer's trailers carry them
 *                     (`bench-received: N`)
 *
 * Any other :path is the unary echo above. A message larger than a DATA
 * frame goes out in 16 KiB frames, as gRPC servers send them. Its job is to be much
 * cheaper per call than any proxy in front of it, so that the proxy is what
 * the benchmark measures: one event loop, no bufferevents, nghttp2's
 * mem_recv/mem_send straight on the socket (or on OpenSSL for TLS with ALPN
 * h2), and responses coalesced into one write per loop iteration.
 *
 * With --slow-fraction F, a fraction F of the calls (drawn per call, by this
 * process) waits --slow-ms before anything of its answer is sent, headers
 * included: a tail per attempt that a hedge elsewhere can beat (bench/fault/
 * tail.py). A stream reset meanwhile (a hedge won) drops its wait.
 *
 * SIGUSR1 prints one line of counters to stderr:
 *   stats port=P calls=N accepted=A open=O peak_open=K
 * run.sh reads it to count calls and upstream connections per endpoint.
 * SIGTERM / SIGINT print the same line and exit 0.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <event2/event.h>
#include <event2/listener.h>
#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#define UP_READ_CHUNK 16384
/* Stop pulling frames from nghttp2 once this much is queued for one write. */
#define UP_WRITE_HIGH 65536

struct up_server {
	struct event_base *base;
	uint32_t stream_window; /* SETTINGS_INITIAL_WINDOW_SIZE we advertise */
	SSL_CTX *ssl_ctx;   /* NULL = h2c */
	uint8_t *resp_body; /* prefix + message, shared by all calls */
	size_t resp_len;
	uint32_t max_streams; /* 0 = do not advertise a limit */
	int port;
	uint64_t calls;
	uint64_t accepted;
	uint64_t open;
	uint64_t peak_open;
	double slow_fraction; /* --slow-fraction: 0 = every call answered at once */
	struct timeval slow_tv; /* --slow-ms */
	uint64_t rng;           /* xorshift64 state of the slow draws (--seed) */
	uint64_t slowed;        /* calls that waited */
};

struct up_wait;

struct up_conn {
	struct up_server *srv;
	int fd;
	SSL *ssl;               /* owned; NULL = h2c */
	nghttp2_session *h2;    /* owned */
	struct event *ev_read;  /* persistent */
	struct event *ev_write; /* added only while output is blocked */
	uint8_t *out;           /* pending output, owned */
	size_t out_cap, out_len, out_off;
	struct up_wait *waits; /* slow calls waiting to be answered, owned */
};

enum up_shape { UP_UNARY, UP_SERVER_STREAM, UP_CLIENT_STREAM };

/* One request stream: what its answer is and how far it went. */
struct up_stream {
	enum up_shape shape;
	uint64_t messages; /* copies of the message to answer with */
	uint64_t total;    /* response body bytes: messages * resp_len */
	uint64_t off;      /* of them sent */
	uint64_t received; /* request body bytes */
	char received_text[24];
	struct up_wait *wait; /* a slow call's answer waiting, or NULL */
};

/* A slow call waiting for its answer, in its stream's up_stream, so a
 * stream closed meanwhile takes it off the list. */
struct up_wait {
	struct up_conn *c;
	struct up_stream *st;
	int32_t stream_id;
	struct event *ev;
	struct up_wait *prev, *next;
};

static void up_wait_free(struct up_wait *w)
{
	struct up_conn *c = w->c;

	if (w->prev)
		w->prev->next = w->next;
	else
		c->waits = w->next;
	if (w->next)
		w->next->prev = w->prev;
	w->st->wait = NULL;
	event_free(w->ev);
	free(w);
}

static void up_conn_free(struct up_conn *c)
{
	while (c->waits)
		up_wait_free(c->waits);
	if (c->ev_read)
		event_free(c->ev_read);
	if (c->ev_write)
		event_free(c->ev_write);
	if (c->h2)
		nghttp2_session_del(c->h2);
	if (c->ssl)
		SSL_free(c->ssl);
	if (c->fd >= 0)
		close(c->fd);
	c->srv->open--;
	free(c->out);
	free(c);
}

/* The DATA source: the answer's messages, as much as nghttp2 asks for (a
 * frame at most); the stream stays open for the trailers, submitted from
 * here (nghttp2 allows it). */
static ssize_t up_read_body(nghttp2_session *h2, int32_t stream_id, uint8_t *buf, size_t length, uint32_t *data_flags,
                            nghttp2_data_source *source, void *user_data)
{
	struct up_conn *c = user_data;
	struct up_stream *st = source->ptr;
	size_t done = 0;
	nghttp2_nv trailers[2] = {
	        {(uint8_t *)"grpc-status", (uint8_t *)"0", 11, 1,
	         NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE},
	};
	size_t ntrailers = 1;

	while (done < length && st->off < st->total) {
		size_t at = (size_t)(st->off % c->srv->resp_len), k = c->srv->resp_len - at;

		if (k > length - done)
			k = length - done;
		memcpy(buf + done, c->srv->resp_body + at, k);
		done += k;
		st->off += k;
	}
	if (st->off < st->total)
		return (ssize_t)done;
	if (st->shape == UP_CLIENT_STREAM) {
		int n = snprintf(st->received_text, sizeof(st->received_text), "%llu",
		                 (unsigned long long)st->received);
		trailers[ntrailers++] = (nghttp2_nv){(uint8_t *)"bench-received", (uint8_t *)st->received_text, 14,
		                                     (size_t)n, NGHTTP2_NV_FLAG_NO_COPY_NAME};
	}
	*data_flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
	if (nghttp2_submit_trailer(h2, stream_id, trailers, ntrailers) != 0)
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	return (ssize_t)done;
}

static int up_respond(struct up_conn *c, int32_t stream_id)
{
	static const nghttp2_nv hdrs[] = {
	        {(uint8_t *)":status", (uint8_t *)"200", 7, 3,
	         NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE},
	        {(uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16,
	         NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE},
	};
	struct up_stream *st = nghttp2_session_get_stream_user_data(c->h2, stream_id);
	nghttp2_data_provider prd = {.source.ptr = st, .read_callback = up_read_body};

	if (!st)
		return -1;
	st->total = st->messages * c->srv->resp_len;
	c->srv->calls++;
	return nghttp2_submit_response(c->h2, stream_id, hdrs, 2, &prd);
}

static int up_on_begin_headers(nghttp2_session *h2, const nghttp2_frame *frame, void *user_data)
{
	struct up_stream *st;

	if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	st = calloc(1, sizeof(*st));
	if (!st)
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	st->messages = 1;
	return nghttp2_session_set_stream_user_data(h2, frame->hd.stream_id, st) == 0 ? 0
	                                                                            : NGHTTP2_ERR_CALLBACK_FAILURE;
}

static bool up_ends_with(const uint8_t *s, size_t n, const char *suffix)
{
	size_t k = strlen(suffix);

	return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

static int up_on_header(nghttp2_session *h2, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
                        const uint8_t *value, size_t valuelen, uint8_t flags, void *user_data)
{
	struct up_stream *st = nghttp2_session_get_stream_user_data(h2, frame->hd.stream_id);
	char num[24];

	if (!st || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	if (namelen == 5 && memcmp(name, ":path", 5) == 0) {
		if (up_ends_with(value, valuelen, "/ServerStream"))
			st->shape = UP_SERVER_STREAM;
		else if (up_ends_with(value, valuelen, "/ClientStream"))
			st->shape = UP_CLIENT_STREAM;
	} else if (namelen == 14 && memcmp(name, "bench-messages", 14) == 0 && valuelen < sizeof(num)) {
		memcpy(num, value, valuelen);
		num[valuelen] = 0;
		st->messages = strtoull(num, NULL, 10);
	}
	return 0;
}

static int up_on_data_chunk(nghttp2_session *h2, uint8_t flags, int32_t stream_id, const uint8_t *data, size_t len,
                            void *user_data)
{
	struct up_stream *st = nghttp2_session_get_stream_user_data(h2, stream_id);

	if (st)
		st->received += len;
	return 0;
}

static int up_flush(struct up_conn *c);

static void up_on_wait_done(evutil_socket_t fd, short what, void *arg)
{
	struct up_wait *w = arg;
	struct up_conn *c = w->c;
	int32_t sid = w->stream_id;

	up_wait_free(w);
	if (up_respond(c, sid) != 0 || up_flush(c) < 0)
		up_conn_free(c);
}

/* True when this call is one of the slow ones (xorshift64, Marsaglia). */
static bool up_draw_slow(struct up_server *srv)
{
	if (srv->slow_fraction <= 0)
		return false;
	srv->rng ^= srv->rng << 13;
	srv->rng ^= srv->rng >> 7;
	srv->rng ^= srv->rng << 17;
	return (double)(srv->rng >> 11) / 9007199254740992.0 < srv->slow_fraction;
}

/* Answers now, or after --slow-ms when the draw says so. */
static int up_answer(struct up_conn *c, int32_t stream_id)
{
	struct up_wait *w;

	if (!up_draw_slow(c->srv))
		return up_respond(c, stream_id);
	struct up_stream *st = nghttp2_session_get_stream_user_data(c->h2, stream_id);
	if (!st)
		return -1;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -1;
	w->c = c;
	w->st = st;
	w->stream_id = stream_id;
	w->ev = evtimer_new(c->srv->base, up_on_wait_done, w);
	if (!w->ev || evtimer_add(w->ev, &c->srv->slow_tv) != 0) {
		if (w->ev)
			event_free(w->ev);
		free(w);
		return -1;
	}
	st->wait = w;
	w->next = c->waits;
	if (c->waits)
		c->waits->prev = w;
	c->waits = w;
	c->srv->slowed++;
	return 0;
}

static int up_on_stream_close(nghttp2_session *h2, int32_t stream_id, uint32_t error_code, void *user_data)
{
	struct up_stream *st = nghttp2_session_get_stream_user_data(h2, stream_id);

	if (st && st->wait)
		up_wait_free(st->wait); /* reset while waiting: nothing to answer */
	free(st);
	return 0;
}

static int up_on_frame_recv(nghttp2_session *h2, const nghttp2_frame *frame, void *user_data)
{
	struct up_conn *c = user_data;

	/* A request is complete when its stream is half-closed by the client,
	 * with HEADERS (no body) or with its last DATA frame. */
	if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
	    (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) && frame->hd.stream_id > 0)
		return up_answer(c, frame->hd.stream_id) == 0 ? 0 : NGHTTP2_ERR_CALLBACK_FAILURE;
	return 0;
}

enum up_block { UP_FAILED, UP_WANT_READ, UP_WANT_WRITE };

/* Why a read or write returned ret <= 0: the socket (or TLS) would block
 * until it is readable or writable again, or the connection failed. */
static enum up_block up_would_block(struct up_conn *c, int ret, bool writing)
{
	if (c->ssl) {
		switch (SSL_get_error(c->ssl, ret)) {
		case SSL_ERROR_WANT_READ:
			return UP_WANT_READ;
		case SSL_ERROR_WANT_WRITE:
			return UP_WANT_WRITE;
		default:
			return UP_FAILED;
		}
	}
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		return writing ? UP_WANT_WRITE : UP_WANT_READ;
	return UP_FAILED;
}

/* Writes what nghttp2 has queued. Returns 0 (done or blocked, with ev_write
 * armed when blocked) or -1 (connection must close). */
static int up_flush(struct up_conn *c)
{
	for (;;) {
		while (c->out_off < c->out_len) {
			size_t left = c->out_len - c->out_off;
			ssize_t n;

			ERR_clear_error();
			n = c->ssl ? SSL_write(c->ssl, c->out + c->out_off, (int)left)
			           : send(c->fd, c->out + c->out_off, left, MSG_NOSIGNAL);
			if (n <= 0) {
				switch (up_would_block(c, (int)n, true)) {
				case UP_WANT_WRITE:
					event_add(c->ev_write, NULL);
					return 0;
				case UP_WANT_READ:
					/* TLS handshake waiting for the client:
					 * the read event retries (no busy loop
					 * on an always-writable socket) */
					event_del(c->ev_write);
					return 0;
				case UP_FAILED:
					break;
				}
				return -1;
			}
			c->out_off += (size_t)n;
		}
		c->out_off = c->out_len = 0;

		while (c->out_len < UP_WRITE_HIGH) {
			const uint8_t *data;
			ssize_t n = nghttp2_session_mem_send(c->h2, &data);

			if (n < 0)
				return -1;
			if (n == 0)
				break;
			if (c->out_len + (size_t)n > c->out_cap) {
				size_t cap = c->out_cap ? c->out_cap : 16384;
				uint8_t *p;

				while (cap < c->out_len + (size_t)n)
					cap *= 2;
				p = realloc(c->out, cap);
				if (!p)
					return -1;
				c->out = p;
				c->out_cap = cap;
			}
			memcpy(c->out + c->out_len, data, (size_t)n);
			c->out_len += (size_t)n;
		}
		if (c->out_len == 0)
			break;
	}
	event_del(c->ev_write);
	return 0;
}

/* Reads until the socket (or TLS) has nothing more, then writes. */
static void up_on_io(evutil_socket_t fd, short what, void *arg)
{
	struct up_conn *c = arg;
	uint8_t buf[UP_READ_CHUNK];

	for (;;) {
		ssize_t n;

		ERR_clear_error();
		n = c->ssl ? SSL_read(c->ssl, buf, sizeof(buf)) : recv(fd, buf, sizeof(buf), 0);
		if (n <= 0) {
			enum up_block b = n < 0 || c->ssl ? up_would_block(c, (int)n, false) : UP_FAILED;

			if (b == UP_WANT_WRITE) /* TLS: handshake output */
				event_add(c->ev_write, NULL);
			if (b != UP_FAILED)
				break;
			goto close; /* EOF, reset or TLS failure */
		}
		if (nghttp2_session_mem_recv(c->h2, buf, (size_t)n) < 0)
			goto close;
		if ((size_t)n < sizeof(buf) && !c->ssl)
			break; /* drained: skip the EAGAIN syscall */
	}
	if (up_flush(c) < 0)
		goto close;
	if (!nghttp2_session_want_read(c->h2) && !nghttp2_session_want_write(c->h2) && c->out_len == 0)
		goto close;
	return;
close:
	up_conn_free(c);
}

static void up_on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
	struct up_server *srv = arg;
	struct up_conn *c = calloc(1, sizeof(*c));
	nghttp2_session_callbacks *cbs = NULL;
	nghttp2_settings_entry iv[2];
	size_t niv = 0;
	int one = 1;

	if (!c) {
		close(fd);
		return;
	}
	c->srv = srv;
	c->fd = fd;
	srv->accepted++;
	if (++srv->open > srv->peak_open)
		srv->peak_open = srv->open;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

	if (srv->ssl_ctx) {
		c->ssl = SSL_new(srv->ssl_ctx);
		if (!c->ssl || SSL_set_fd(c->ssl, fd) != 1)
			goto fail;
		SSL_set_accept_state(c->ssl);
	}
	if (nghttp2_session_callbacks_new(&cbs) != 0)
		goto fail;
	nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, up_on_frame_recv);
	nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, up_on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(cbs, up_on_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, up_on_data_chunk);
	nghttp2_session_callbacks_set_on_stream_close_callback(cbs, up_on_stream_close);
	if (nghttp2_session_server_new(&c->h2, cbs, c) != 0)
		goto fail_cbs;
	nghttp2_session_callbacks_del(cbs);
	cbs = NULL;

	if (srv->max_streams)
		iv[niv++] = (nghttp2_settings_entry){NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, srv->max_streams};
	iv[niv++] = (nghttp2_settings_entry){NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, srv->stream_window};
	if (nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, iv, niv) != 0 ||
	    nghttp2_session_set_local_window_size(c->h2, NGHTTP2_FLAG_NONE, 0, 1 << 24) != 0)
		goto fail;

	c->ev_read = event_new(srv->base, fd, EV_READ | EV_PERSIST, up_on_io, c);
	c->ev_write = event_new(srv->base, fd, EV_WRITE, up_on_io, c);
	if (!c->ev_read || !c->ev_write || event_add(c->ev_read, NULL) != 0)
		goto fail;
	if (up_flush(c) < 0) /* our SETTINGS (h2c); TLS waits for the hello */
		goto fail;
	return;
fail_cbs:
	nghttp2_session_callbacks_del(cbs);
fail:
	up_conn_free(c);
}

static int up_alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                          unsigned int inlen, void *arg)
{
	unsigned char *sel;

	if (nghttp2_select_next_protocol(&sel, outlen, in, inlen) != 1)
		return SSL_TLSEXT_ERR_ALERT_FATAL;
	*out = sel;
	return SSL_TLSEXT_ERR_OK;
}

static SSL_CTX *up_tls_ctx(const char *cert, const char *key)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());

	if (!ctx)
		return NULL;
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
	                              SSL_MODE_RELEASE_BUFFERS);
	if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1 ||
	    SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
		ERR_print_errors_fp(stderr);
		SSL_CTX_free(ctx);
		return NULL;
	}
	SSL_CTX_set_alpn_select_cb(ctx, up_alpn_select, NULL);
	return ctx;
}

static void up_print_stats(const struct up_server *srv)
{
	fprintf(stderr, "stats port=%d calls=%llu accepted=%llu open=%llu peak_open=%llu slowed=%llu\n", srv->port,
	        (unsigned long long)srv->calls, (unsigned long long)srv->accepted, (unsigned long long)srv->open,
	        (unsigned long long)srv->peak_open, (unsigned long long)srv->slowed);
	fflush(stderr);
}

static void up_on_signal(evutil_socket_t sig, short what, void *arg)
{
	struct up_server *srv = arg;

	up_print_stats(srv);
	if (sig != SIGUSR1)
		event_base_loopbreak(srv->base);
}

/* Builds the response: 5-byte gRPC prefix (uncompressed, big-endian length)
 * around a protobuf message { bytes field 1 = payload_len x 'x' }. */
static int up_build_body(struct up_server *srv, size_t payload_len)
{
	size_t msg_len, vlen = 0, i;
	uint8_t varint[10];
	uint8_t *p;

	for (size_t v = payload_len;; v >>= 7) {
		varint[vlen++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
		if (v <= 0x7f)
			break;
	}
	msg_len = 1 + vlen + payload_len;
	srv->resp_len = 5 + msg_len;
	if (payload_len > (64u << 20))
		return -1;
	p = srv->resp_body = malloc(srv->resp_len);
	if (!p)
		return -1;
	p[0] = 0;
	p[1] = (uint8_t)(msg_len >> 24);
	p[2] = (uint8_t)(msg_len >> 16);
	p[3] = (uint8_t)(msg_len >> 8);
	p[4] = (uint8_t)msg_len;
	p[5] = 0x0a; /* field 1, wire type 2 */
	memcpy(p + 6, varint, vlen);
	for (i = 0; i < payload_len; i++)
		p[6 + vlen + i] = 'x';
	return 0;
}

static void up_usage(FILE *f)
{
	fputs("usage: grpc_upstream [-a ADDR] -p PORT [-s MAX_STREAMS] "
	      "[-z PAYLOAD_BYTES]\n"
	      "                     [-W STREAM_WINDOW] [--cert FILE --key FILE]\n"
	      "                     [--slow-fraction F [--slow-ms MS] [--seed N]]\n"
	      "  -a  listen address (default 127.0.0.1)\n"
	      "  -p  listen port\n"
	      "  -s  SETTINGS_MAX_CONCURRENT_STREAMS to advertise "
	      "(default: none, i.e. unlimited)\n"
	      "  -z  response message payload bytes (default 16, at most 64 MiB)\n"
	      "  -W  SETTINGS_INITIAL_WINDOW_SIZE to advertise (default 1 MiB)\n"
	      "  --cert/--key  serve TLS with ALPN h2 instead of h2c\n"
	      "  --slow-fraction  this fraction of the calls (drawn per call) waits --slow-ms\n"
	      "                before its answer, headers included (default 0)\n"
	      "  --slow-ms     that wait (default 50)\n"
	      "  --seed        seed of the draws (default 1)\n",
	      f);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
	        {"cert", required_argument, NULL, 'C'},
	        {"key", required_argument, NULL, 'K'},
	        {"slow-fraction", required_argument, NULL, 'F'},
	        {"slow-ms", required_argument, NULL, 'M'},
	        {"seed", required_argument, NULL, 'S'},
	        {"help", no_argument, NULL, 'h'},
	        {NULL, 0, NULL, 0},
	};
	struct up_server srv = {.port = 0, .stream_window = 1 << 20, .rng = 1};
	const char *addr = "127.0.0.1", *cert = NULL, *key = NULL;
	size_t payload = 16;
	struct sockaddr_in sin = {.sin_family = AF_INET};
	struct evconnlistener *lst;
	struct event *sigs[3];
	int opt, i, rc = 1;
	long slow_ms = 50;
	char *end;

	while ((opt = getopt_long(argc, argv, "a:p:s:z:W:h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'a':
			addr = optarg;
			break;
		case 'p':
			srv.port = atoi(optarg);
			break;
		case 's':
			srv.max_streams = (uint32_t)strtoul(optarg, NULL, 10);
			break;
		case 'z':
			payload = strtoul(optarg, NULL, 10);
			break;
		case 'W':
			srv.stream_window = (uint32_t)strtoul(optarg, NULL, 10);
			if (srv.stream_window > 0x7fffffff) {
				up_usage(stderr);
				return 2;
			}
			break;
		case 'C':
			cert = optarg;
			break;
		case 'K':
			key = optarg;
			break;
		case 'F':
			srv.slow_fraction = strtod(optarg, &end);
			if (*end || !(srv.slow_fraction >= 0 && srv.slow_fraction <= 1)) {
				fprintf(stderr, "grpc_upstream: --slow-fraction must be in [0, 1]\n");
				return 2;
			}
			break;
		case 'M':
			slow_ms = strtol(optarg, &end, 10);
			if (*end || slow_ms < 0 || slow_ms > 3600000) {
				fprintf(stderr, "grpc_upstream: --slow-ms must be in [0, 3600000]\n");
				return 2;
			}
			break;
		case 'S':
			srv.rng = strtoull(optarg, &end, 10);
			if (*end) {
				fprintf(stderr, "grpc_upstream: --seed must be a number\n");
				return 2;
			}
			break;
		case 'h':
			up_usage(stdout);
			return 0;
		default:
			up_usage(stderr);
			return 2;
		}
	}
	if (srv.port <= 0 || srv.port > 65535 || !cert != !key || inet_pton(AF_INET, addr, &sin.sin_addr) != 1) {
		up_usage(stderr);
		return 2;
	}
	sin.sin_port = htons((uint16_t)srv.port);
	srv.slow_tv = (struct timeval){.tv_sec = slow_ms / 1000, .tv_usec = (slow_ms % 1000) * 1000};
	/* xorshift's state must not be 0; mixed so that near seeds differ. */
	srv.rng = (srv.rng ? srv.rng : 1) * 0x9E3779B97F4A7C15ull;
	if (up_build_body(&srv, payload) != 0) {
		fprintf(stderr, "grpc_upstream: payload too large\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	if (cert && !(srv.ssl_ctx = up_tls_ctx(cert, key)))
		goto out_body;

	srv.base = event_base_new();
	if (!srv.base)
		goto out_tls;
	lst = evconnlistener_new_bind(srv.base, up_on_accept, &srv,
	                              LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC, 1024,
	                              (struct sockaddr *)&sin, sizeof(sin));
	if (!lst) {
		fprintf(stderr, "grpc_upstream: cannot listen on %s:%d: %s\n", addr, srv.port, strerror(errno));
		goto out_base;
	}
	sigs[0] = evsignal_new(srv.base, SIGTERM, up_on_signal, &srv);
	sigs[1] = evsignal_new(srv.base, SIGINT, up_on_signal, &srv);
	sigs[2] = evsignal_new(srv.base, SIGUSR1, up_on_signal, &srv);
	for (i = 0; i < 3; i++)
		if (sigs[i])
			event_add(sigs[i], NULL);
	fprintf(stderr, "grpc_upstream: listening on %s:%d (%s)\n", addr, srv.port, srv.ssl_ctx ? "tls" : "h2c");
	fflush(stderr);

	event_base_dispatch(srv.base);
	rc = 0;
	/* Connections still open at exit are left to the OS. */
	for (i = 0; i < 3; i++)
		if (sigs[i])
			event_free(sigs[i]);
	evconnlistener_free(lst);
out_base:
	event_base_free(srv.base);
out_tls:
	if (srv.ssl_ctx)
		SSL_CTX_free(srv.ssl_ctx);
out_body:
	free(srv.resp_body);
	return rc;
}
