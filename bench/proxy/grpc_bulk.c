/*
 * grpc_bulk: the client of the bulk workloads (bench/proxy/bulk.sh). Not part
 * of maitred. One h2c connection, nghttp2 on a non-blocking socket, poll(2);
 * it moves large gRPC messages against grpc_upstream (directly or through a
 * proxy) and prints what it moved and how long that took:
 *
 *   unary   -n CALLS calls of one -s byte request message each, -c in flight
 *           (the answer is the upstream's -z message)
 *   server  one call to /bench.Echo/ServerStream asking for -n messages
 *           (`bench-messages`) of the upstream's -z size
 *   client  one call to /bench.Echo/ClientStream sending -n messages of -s
 *           bytes; the upstream's trailers must count every byte
 *
 * Every call must end with grpc-status 0 (else exit 1). The windows it opens
 * (-w: SETTINGS_INITIAL_WINDOW_SIZE and the connection window, default 16 MiB)
 * let one stream fill the path. Output, one line on stdout:
 *
 *   bulk mode=M calls=N sent=BYTES received=BYTES seconds=S MBps=R
 *
 * MBps counts message bytes (prefixes included) in both directions, 10^6
 * bytes a MB, from the first byte written to the last trailers read.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <nghttp2/nghttp2.h>

enum bk_mode { BK_UNARY, BK_SERVER, BK_CLIENT };

struct bk_stream {
	uint64_t total; /* request body bytes to send */
	uint64_t off;
	bool ok; /* grpc-status 0 seen */
	char received[24];
};

struct bk {
	enum bk_mode mode;
	nghttp2_session *h2;
	int fd;
	const char *authority;
	uint64_t calls, limit, inflight, started, done, failed;
	uint64_t messages;
	size_t req_size; /* message payload bytes (the 5-byte prefix aside) */
	uint8_t *msg;    /* one request message: prefix + payload */
	size_t msg_len;
	uint64_t sent, received;
	uint8_t out[256 * 1024];
	size_t out_len, out_off;
};

static ssize_t bk_read_req(nghttp2_session *h2, int32_t sid, uint8_t *buf, size_t length, uint32_t *flags,
                           nghttp2_data_source *src, void *ud)
{
	struct bk *b = ud;
	struct bk_stream *st = src->ptr;
	size_t done = 0;

	while (done < length && st->off < st->total) {
		size_t at = (size_t)(st->off % b->msg_len), k = b->msg_len - at;

		if (k > length - done)
			k = length - done;
		memcpy(buf + done, b->msg + at, k);
		done += k;
		st->off += k;
	}
	b->sent += done;
	if (st->off == st->total)
		*flags |= NGHTTP2_DATA_FLAG_EOF;
	return (ssize_t)done;
}

static int bk_start(struct bk *b)
{
	static const char *paths[] = {"/bench.Echo/Call", "/bench.Echo/ServerStream", "/bench.Echo/ClientStream"};
	const char *path = paths[b->mode];
	char msgs[24];
	int nmsgs = snprintf(msgs, sizeof(msgs), "%llu", (unsigned long long)b->messages);
	nghttp2_nv nva[] = {
#define NV(n, v, vl) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, (vl), NGHTTP2_NV_FLAG_NONE}
	        NV(":method", "POST", 4),
	        NV(":scheme", "http", 4),
	        NV(":authority", b->authority, strlen(b->authority)),
	        NV(":path", path, strlen(path)),
	        NV("content-type", "application/grpc", 16),
	        NV("te", "trailers", 8),
	        NV("bench-messages", msgs, (size_t)nmsgs),
#undef NV
	};
	struct bk_stream *st = calloc(1, sizeof(*st));
	nghttp2_data_provider prd = {.source.ptr = st, .read_callback = bk_read_req};
	int32_t sid;

	if (!st)
		return -1;
	st->total = b->mode == BK_CLIENT ? b->messages * b->msg_len : b->msg_len;
	sid = nghttp2_submit_request(b->h2, NULL, nva, b->mode == BK_SERVER ? 7 : 6, &prd, st);
	if (sid < 0) {
		free(st);
		return -1;
	}
	b->started++;
	b->inflight++;
	return 0;
}

static int bk_on_header(nghttp2_session *h2, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
                        const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
	struct bk_stream *st = nghttp2_session_get_stream_user_data(h2, frame->hd.stream_id);

	if (!st)
		return 0;
	if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0)
		st->ok = valuelen == 1 && value[0] == '0';
	else if (namelen == 14 && memcmp(name, "bench-received", 14) == 0 && valuelen < sizeof(st->received)) {
		memcpy(st->received, value, valuelen);
		st->received[valuelen] = 0;
	}
	return 0;
}

static int bk_on_data(nghttp2_session *h2, uint8_t flags, int32_t sid, const uint8_t *data, size_t len, void *ud)
{
	struct bk *b = ud;

	b->received += len;
	return 0;
}

static int bk_on_close(nghttp2_session *h2, int32_t sid, uint32_t error_code, void *ud)
{
	struct bk *b = ud;
	struct bk_stream *st = nghttp2_session_get_stream_user_data(h2, sid);

	if (!st)
		return 0;
	if (!st->ok || error_code != 0) {
		fprintf(stderr, "grpc_bulk: stream %d ended without grpc-status 0 (reset code %u)\n", sid, error_code);
		b->failed++;
	} else if (b->mode == BK_CLIENT && strtoull(st->received, NULL, 10) != st->total) {
		fprintf(stderr, "grpc_bulk: the upstream counted %s bytes of %llu\n", st->received,
		        (unsigned long long)st->total);
		b->failed++;
	}
	free(st);
	b->done++;
	b->inflight--;
	return 0;
}

static double bk_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Moves bytes until every call ended. 0, or -1 on a connection failure. */
static int bk_loop(struct bk *b)
{
	static uint8_t in[256 * 1024];

	for (;;) {
		while (b->inflight < b->limit && b->started < b->calls)
			if (bk_start(b) != 0)
				return -1;
		if (b->done == b->calls)
			return 0;
		/* gather, then write */
		while (b->out_len < sizeof(b->out) / 2) {
			const uint8_t *p;
			ssize_t n = nghttp2_session_mem_send(b->h2, &p);

			if (n < 0)
				return -1;
			if (n == 0)
				break;
			if (b->out_len + (size_t)n > sizeof(b->out)) {
				/* a frame larger than the rest: write what we have first */
				memmove(b->out, b->out + b->out_off, b->out_len - b->out_off);
				b->out_len -= b->out_off;
				b->out_off = 0;
				if (b->out_len + (size_t)n > sizeof(b->out))
					return -1;
			}
			memcpy(b->out + b->out_len, p, (size_t)n);
			b->out_len += (size_t)n;
		}
		struct pollfd pfd = {.fd = b->fd, .events = POLLIN | (b->out_off < b->out_len ? POLLOUT : 0)};

		if (poll(&pfd, 1, 30000) <= 0) {
			fprintf(stderr, "grpc_bulk: nothing moved for 30 s\n");
			return -1;
		}
		if (pfd.revents & POLLOUT) {
			ssize_t n = send(b->fd, b->out + b->out_off, b->out_len - b->out_off, MSG_NOSIGNAL);

			if (n < 0 && errno != EAGAIN && errno != EINTR)
				return -1;
			if (n > 0)
				b->out_off += (size_t)n;
			if (b->out_off == b->out_len)
				b->out_off = b->out_len = 0;
		}
		if (pfd.revents & (POLLIN | POLLERR | POLLHUP)) {
			ssize_t n = recv(b->fd, in, sizeof(in), 0);

			if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
				fprintf(stderr, "grpc_bulk: connection closed\n");
				return -1;
			}
			if (n > 0 && nghttp2_session_mem_recv(b->h2, in, (size_t)n) < 0)
				return -1;
		}
	}
}

static void bk_usage(FILE *f)
{
	fputs("usage: grpc_bulk -p PORT [-a ADDR] -m unary|server|client [-n N] [-c N] [-s BYTES]\n"
	      "                 [-w WINDOW] [-f MAX_FRAME]\n"
	      "  -m  workload (see the top of grpc_bulk.c)\n"
	      "  -n  unary: calls; server / client: messages in the one call\n"
	      "  -c  unary: calls in flight (default 4)\n"
	      "  -s  request message payload bytes (default 16)\n"
	      "  -w  stream and connection window to open (default 16 MiB)\n"
	      "  -f  SETTINGS_MAX_FRAME_SIZE to advertise (default 16384)\n",
	      f);
}

int main(int argc, char **argv)
{
	static struct bk b = {.calls = 1, .messages = 1, .req_size = 16};
	const char *addr = "127.0.0.1";
	uint32_t window = 16 << 20, max_frame = 16384;
	uint64_t count = 1, conc = 4;
	int port = 0, opt, one = 1;
	struct sockaddr_in sin = {.sin_family = AF_INET};
	nghttp2_session_callbacks *cbs;
	char authority[64];

	while ((opt = getopt(argc, argv, "a:p:m:n:c:s:w:f:h")) != -1) {
		switch (opt) {
		case 'a':
			addr = optarg;
			break;
		case 'p':
			port = atoi(optarg);
			break;
		case 'm':
			if (strcmp(optarg, "unary") == 0)
				b.mode = BK_UNARY;
			else if (strcmp(optarg, "server") == 0)
				b.mode = BK_SERVER;
			else if (strcmp(optarg, "client") == 0)
				b.mode = BK_CLIENT;
			else {
				bk_usage(stderr);
				return 2;
			}
			break;
		case 'n':
			count = strtoull(optarg, NULL, 10);
			break;
		case 'c':
			conc = strtoull(optarg, NULL, 10);
			break;
		case 's':
			b.req_size = strtoul(optarg, NULL, 10);
			break;
		case 'w':
			window = (uint32_t)strtoul(optarg, NULL, 10);
			break;
		case 'f':
			max_frame = (uint32_t)strtoul(optarg, NULL, 10);
			break;
		case 'h':
			bk_usage(stdout);
			return 0;
		default:
			bk_usage(stderr);
			return 2;
		}
	}
	if (port <= 0 || port > 65535 || count == 0 || conc == 0 || window < 65535 || window > 0x7fffffff ||
	    max_frame < 16384 || max_frame > 16777215 || b.req_size > (64u << 20) ||
	    inet_pton(AF_INET, addr, &sin.sin_addr) != 1) {
		bk_usage(stderr);
		return 2;
	}
	if (b.mode == BK_UNARY) {
		b.calls = count;
	} else {
		b.messages = count;
	}
	b.msg_len = 5 + b.req_size;
	b.msg = calloc(1, b.msg_len);
	if (!b.msg)
		return 1;
	b.msg[1] = (uint8_t)(b.req_size >> 24);
	b.msg[2] = (uint8_t)(b.req_size >> 16);
	b.msg[3] = (uint8_t)(b.req_size >> 8);
	b.msg[4] = (uint8_t)b.req_size;
	memset(b.msg + 5, 'x', b.req_size);
	snprintf(authority, sizeof(authority), "%s:%d", addr, port);
	b.authority = authority;

	sin.sin_port = htons((uint16_t)port);
	b.fd = socket(AF_INET, SOCK_STREAM, 0);
	if (b.fd < 0 || connect(b.fd, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
		fprintf(stderr, "grpc_bulk: cannot connect to %s: %s\n", authority, strerror(errno));
		return 1;
	}
	setsockopt(b.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (nghttp2_session_callbacks_new(&cbs) != 0)
		return 1;
	nghttp2_session_callbacks_set_on_header_callback(cbs, bk_on_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, bk_on_data);
	nghttp2_session_callbacks_set_on_stream_close_callback(cbs, bk_on_close);
	if (nghttp2_session_client_new(&b.h2, cbs, &b) != 0)
		return 1;
	nghttp2_session_callbacks_del(cbs);
	nghttp2_settings_entry iv[] = {
	        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
	        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, window},
	        {NGHTTP2_SETTINGS_MAX_FRAME_SIZE, max_frame},
	};
	if (nghttp2_submit_settings(b.h2, NGHTTP2_FLAG_NONE, iv, 3) != 0 ||
	    nghttp2_session_set_local_window_size(b.h2, NGHTTP2_FLAG_NONE, 0, (int32_t)window) != 0)
		return 1;
	/* unary: -c calls in flight; streaming: the one call */
	b.limit = b.mode == BK_UNARY ? conc : 1;
	double t0 = bk_now();
	int rc = bk_loop(&b);
	double secs = bk_now() - t0;

	if (rc != 0) {
		fprintf(stderr, "grpc_bulk: failed after %llu of %llu calls\n", (unsigned long long)b.done,
		        (unsigned long long)b.calls);
		return 1;
	}
	printf("bulk mode=%s calls=%llu sent=%llu received=%llu seconds=%.3f MBps=%.1f\n",
	       b.mode == BK_UNARY ? "unary" : b.mode == BK_SERVER ? "server" : "client", (unsigned long long)b.done,
	       (unsigned long long)b.sent, (unsigned long long)b.received, secs,
	       (double)(b.sent + b.received) / secs / 1e6);
	return b.failed ? 1 : 0;
}
