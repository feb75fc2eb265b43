/*
 * splice_relay: what splice(2) would save a relay of HTTP/2 DATA payloads on
 * loopback TCP (bench/proxy/splice_relay.sh, README "Splice on loopback").
 * Not part of maitred; no HTTP/2 library: the stream is a run of frames, each
 * a 9-byte header (RFC 9113 §4.1: 24-bit length, type 0 = DATA, flags, stream
 * 1) and its payload. One program, three roles, blocking sockets:
 *
 *   splice_relay sink -o PORTFILE -f FRAME -n FRAMES
 *       listens on 127.0.0.1 (an ephemeral port, written to PORTFILE), reads
 *       one connection to EOF, checks every header (length FRAME, type DATA)
 *       and each payload's first and last byte (the frame's number, mod 256);
 *       exits 1 on any mismatch or a short stream
 *   splice_relay source -p PORT -f FRAME -n FRAMES
 *       connects and writes FRAMES frames of FRAME payload bytes
 *
 * Source and sink print their whole life's CPU ns (CLOCK_PROCESS_CPUTIME_ID)
 * at the end: loopback TCP work moves between the three processes' contexts
 * with the relay's mode (whose call finds the window open pays for the
 * segment), so only their sum compares modes without that shift.
 *   splice_relay relay -m MODE -o PORTFILE -p SINKPORT [-z PIPE] [-q QUEUE]
 *       connects to the sink, listens (port to PORTFILE), accepts one source
 *       and relays its bytes to the sink until EOF, by MODE:
 *         copy        read(2) into a 64 KiB buffer, write(2) it out
 *         copy2       the same plus one memcpy into a QUEUE-byte ring (default
 *                     8 MiB, beyond this machine's 2 MiB L2, as maitred's
 *                     queues' 8-11 MiB are) written out from there
 *         splice      per frame: recv(2) its header, send(2) it (MSG_MORE),
 *                     splice(2) its payload socket -> pipe -> socket
 *                     (SPLICE_F_MORE); the output pushed (TCP_NODELAY set
 *                     again) only when no next header has arrived
 *         splicepipe  per frame: recv(2) its header, write(2) a header into
 *                     the pipe, splice(2) the payload socket -> pipe
 *                     (SPLICE_F_NONBLOCK: a full pipe answers EAGAIN instead
 *                     of waiting); the pipe spliced into the output socket in
 *                     one call when full or when no next header has arrived
 *         splicebatch headers peeked ahead (SO_PEEK_OFF: a 9-byte peek and a
 *                     setsockopt past the payload per frame) as far as the
 *                     bytes received go; every whole frame known, headers
 *                     included, spliced in one run of up to PIPE bytes
 *         splicerun   no framing at all: socket -> pipe -> socket in runs of
 *                     the pipe's size (the floor of what splice costs)
 *       PIPE is the pipe's size (F_SETPIPE_SZ, default 65536).
 *
 * The relay prints one line on stdout when the source's EOF has been relayed:
 *
 *   relay mode=M bytes=B seconds=S cpu_ns=N user_us=U sys_us=Y syscalls=C
 *
 * from the accept to the end: cpu_ns from CLOCK_PROCESS_CPUTIME_ID (the
 * scheduler's ns, as /proc/PID/schedstat; loopback TCP run in the relay's
 * context counts, as in bulk.sh), user and sys from getrusage(2) (the kernel
 * splits the same ns by its tick samples), syscalls counted by the relay
 * (every read, write, send, recv, splice it made).
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define FRAME_HDR 9
#define COPY_BUF 65536

static uint64_t syscalls;

static void die(const char *what)
{
	fprintf(stderr, "splice_relay: %s: %s\n", what, strerror(errno));
	exit(1);
}

static int listen_any(const char *portfile)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	FILE *f;

	if (fd < 0)
		die("socket");
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 1) < 0)
		die("bind/listen");
	if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
		die("getsockname");
	/* Written whole, then renamed: the driver never reads half a port. */
	char tmp[4096];
	snprintf(tmp, sizeof(tmp), "%s.tmp", portfile);
	f = fopen(tmp, "w");
	if (!f)
		die(tmp);
	fprintf(f, "%u\n", ntohs(sa.sin_port));
	if (fclose(f) != 0 || rename(tmp, portfile) != 0)
		die(portfile);
	return fd;
}

static int connect_port(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	if (fd < 0)
		die("socket");
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		die("connect");
	/* As maitred's sockets: no Nagle delay on a header written alone. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static int accept_one(int lfd)
{
	int fd = accept(lfd, NULL, NULL), one = 1;

	if (fd < 0)
		die("accept");
	close(lfd);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static void frame_header(uint8_t h[FRAME_HDR], uint32_t len)
{
	h[0] = (uint8_t)(len >> 16);
	h[1] = (uint8_t)(len >> 8);
	h[2] = (uint8_t)len;
	h[3] = 0;	/* DATA */
	h[4] = 0;	/* no flags */
	h[5] = 0, h[6] = 0, h[7] = 0, h[8] = 1;	/* stream 1 */
}

static uint32_t frame_length(const uint8_t h[FRAME_HDR])
{
	return (uint32_t)h[0] << 16 | (uint32_t)h[1] << 8 | h[2];
}

static void write_all(int fd, const void *p, size_t n, int flags)
{
	const uint8_t *b = p;

	while (n > 0) {
		ssize_t w = send(fd, b, n, flags);
		syscalls++;
		if (w < 0) {
			if (errno == EINTR)
				continue;
			die("send");
		}
		b += w;
		n -= (size_t)w;
	}
}

/* recv exactly n bytes; false on EOF before the first byte. */
static bool read_exact(int fd, void *p, size_t n)
{
	uint8_t *b = p;
	size_t got = 0;

	while (got < n) {
		ssize_t r = recv(fd, b + got, n - got, MSG_WAITALL);
		syscalls++;
		if (r < 0) {
			if (errno == EINTR)
				continue;
			die("recv");
		}
		if (r == 0) {
			if (got == 0)
				return false;
			fprintf(stderr, "splice_relay: EOF inside a frame header\n");
			exit(1);
		}
		got += (size_t)r;
	}
	return true;
}

static double cpu_ns_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* ---- source and sink ---------------------------------------------------- */

/* Frames are written from a buffer of up to 1 MiB of whole frames, their
 * payloads' first and last bytes set to their number mod 256. */
static int run_source(int port, uint32_t frame, uint64_t frames)
{
	size_t per = frame + FRAME_HDR, batch = (1u << 20) / per;
	uint8_t *buf;
	uint64_t i = 0;
	int fd = connect_port(port);

	if (batch == 0)
		batch = 1;
	if (batch > 256)	/* the numbers repeat every 256 frames */
		batch = 256;
	buf = calloc(batch, per);
	if (!buf)
		die("calloc");
	for (size_t k = 0; k < batch; k++) {
		uint8_t *f = buf + k * per;
		frame_header(f, frame);
		memset(f + FRAME_HDR, 'x', frame);
	}
	while (i < frames) {
		size_t k, n = frames - i < batch ? (size_t)(frames - i) : batch;
		for (k = 0; k < n; k++) {
			uint8_t *f = buf + k * per;
			f[FRAME_HDR] = f[per - 1] = (uint8_t)(i + k);
		}
		write_all(fd, buf, n * per, 0);
		i += n;
	}
	close(fd);
	free(buf);
	printf("source frames=%" PRIu64 " cpu_ns=%.0f\n", frames, cpu_ns_now());
	return 0;
}

static int run_sink(const char *portfile, uint32_t frame, uint64_t frames)
{
	static uint8_t buf[1 << 18];
	uint8_t hdr[FRAME_HDR];
	uint64_t seen = 0, total = 0, per = FRAME_HDR + (uint64_t)frame;
	uint64_t pos = 0;	/* in the current frame, header included */
	int fd = accept_one(listen_any(portfile));

	for (;;) {
		ssize_t r = read(fd, buf, sizeof(buf));
		if (r < 0) {
			if (errno == EINTR)
				continue;
			die("sink read");
		}
		if (r == 0)
			break;
		total += (uint64_t)r;
		for (size_t o = 0; o < (size_t)r;) {
			if (pos < FRAME_HDR) {
				hdr[pos++] = buf[o++];
				if (pos == FRAME_HDR &&
				    (frame_length(hdr) != frame || hdr[3] != 0 || hdr[8] != 1)) {
					fprintf(stderr, "sink: bad header at frame %" PRIu64 "\n", seen);
					return 1;
				}
				continue;
			}
			if (pos == FRAME_HDR && buf[o] != (uint8_t)seen) {
				fprintf(stderr, "sink: frame %" PRIu64 " starts wrong\n", seen);
				return 1;
			}
			uint64_t take = per - pos < (size_t)r - o ? per - pos : (size_t)r - o;
			o += take;
			pos += take;
			if (pos == per) {
				if (buf[o - 1] != (uint8_t)seen) {
					fprintf(stderr, "sink: frame %" PRIu64 " ends wrong\n", seen);
					return 1;
				}
				seen++;
				pos = 0;
			}
		}
	}
	if (seen != frames || pos != 0) {
		fprintf(stderr, "sink: %" PRIu64 " whole frames of %" PRIu64 " (%" PRIu64 " bytes)\n",
			seen, frames, total);
		return 1;
	}
	printf("sink frames=%" PRIu64 " bytes=%" PRIu64 " cpu_ns=%.0f\n", seen, total, cpu_ns_now());
	return 0;
}

/* ---- the relay's modes -------------------------------------------------- */

static uint64_t relay_copy(int in, int out, size_t queue)
{
	static uint8_t buf[COPY_BUF];
	uint8_t *ring = NULL;
	size_t at = 0;
	uint64_t moved = 0;

	if (queue) {
		ring = malloc(queue);
		if (!ring)
			die("malloc");
		memset(ring, 0, queue);
	}
	for (;;) {
		ssize_t r = read(in, buf, sizeof(buf));
		syscalls++;
		if (r < 0) {
			if (errno == EINTR)
				continue;
			die("read");
		}
		if (r == 0)
			break;
		moved += (uint64_t)r;
		if (!ring) {
			write_all(out, buf, (size_t)r, 0);
			continue;
		}
		/* The second pass maitred's queue adds: read buffer -> queue,
		 * written from the queue; the ring wraps at a 64 KiB step. */
		if (at + (size_t)r > queue)
			at = 0;
		memcpy(ring + at, buf, (size_t)r);
		write_all(out, ring + at, (size_t)r, 0);
		at += COPY_BUF;
	}
	free(ring);
	return moved;
}

/* Splice up to want bytes from in into the pipe: the count (never 0: EOF
 * inside a frame ends the run), or -1 when a non-blocking splice finds the
 * pipe full (EAGAIN). Retried on EINTR; any other error ends the run. */
static ssize_t splice_in(int in, const int pipefd[2], size_t want, unsigned fl)
{
	for (;;) {
		ssize_t n = splice(in, NULL, pipefd[1], NULL, want, SPLICE_F_MOVE | fl);
		syscalls++;
		if (n > 0)
			return n;
		if (n == 0) {
			fprintf(stderr, "splice_relay: EOF inside a frame\n");
			exit(1);
		}
		if (errno == EAGAIN && (fl & SPLICE_F_NONBLOCK))
			return -1;
		if (errno != EINTR)
			die("splice in");
	}
}

/* Empty the pipe into out: inpipe bytes. more: more follow at once (the
 * segment may wait to fill). */
static void pipe_flush(const int pipefd[2], int out, size_t inpipe, bool more)
{
	while (inpipe > 0) {
		ssize_t w = splice(pipefd[0], NULL, out, NULL, inpipe,
				   SPLICE_F_MOVE | (more ? SPLICE_F_MORE : 0));
		syscalls++;
		if (w < 0) {
			if (errno == EINTR)
				continue;
			die("splice out");
		}
		if (w == 0) {
			fprintf(stderr, "splice_relay: splice out moved nothing\n");
			exit(1);
		}
		inpipe -= (size_t)w;
	}
}

/* Move n bytes in -> pipe -> out, pipe-sized pieces at a time; the pipe is
 * empty on entry and on return. more: more bytes follow at once. */
static void splice_through(int in, const int pipefd[2], int out, size_t n, size_t pipesz, bool more)
{
	while (n > 0) {
		size_t r = (size_t)splice_in(in, pipefd, n < pipesz ? n : pipesz, 0);
		n -= r;
		pipe_flush(pipefd, out, r, n > 0 || more);
	}
}

/* Push what MSG_MORE / SPLICE_F_MORE held back: setting TCP_NODELAY pushes
 * the pending segments. A relay does it when its input runs dry, as an event
 * loop would on EAGAIN. */
static void uncork(int out)
{
	int one = 1;

	if (setsockopt(out, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
		die("TCP_NODELAY");
	syscalls++;
}

/* The next frame header, false on EOF. Without waiting first: when none has
 * arrived, the output is pushed before the wait. */
static bool next_header(int in, int out, uint8_t hdr[FRAME_HDR])
{
	ssize_t r = recv(in, hdr, FRAME_HDR, MSG_DONTWAIT);

	syscalls++;
	if (r == FRAME_HDR)
		return true;
	if (r == 0)
		return false;
	if (r < 0) {
		if (errno != EAGAIN && errno != EINTR)
			die("recv");
		r = 0;
	}
	uncork(out);
	if (read_exact(in, hdr + r, FRAME_HDR - (size_t)r))
		return true;
	if (r > 0) {
		fprintf(stderr, "splice_relay: EOF inside a frame header\n");
		exit(1);
	}
	return false;
}

/* Every payload byte sent with MORE: segments fill up to the path's size
 * goal as a 64 KiB write's do, instead of one per frame. */
static uint64_t relay_splice(int in, int out, const int pipefd[2], size_t pipesz)
{
	uint8_t hdr[FRAME_HDR];
	uint64_t moved = 0;

	while (next_header(in, out, hdr)) {
		uint32_t len = frame_length(hdr);
		/* maitred would write a header of its own (its stream id). */
		write_all(out, hdr, FRAME_HDR, MSG_MORE);
		splice_through(in, pipefd, out, len, pipesz, true);
		moved += FRAME_HDR + (uint64_t)len;
	}
	return moved;
}


/* Headers of the relay's own written into the pipe between the payloads,
 * the pipe emptied into out in one call when it is full or the input has
 * run dry: the shape a relay that rewrites every header could have. */
static uint64_t relay_splicepipe(int in, int out, const int pipefd[2], size_t pipesz)
{
	uint8_t hdr[FRAME_HDR];
	uint64_t moved = 0;
	size_t inpipe = 0;

	for (;;) {
		ssize_t r = recv(in, hdr, FRAME_HDR, MSG_DONTWAIT);
		syscalls++;
		if (r < 0 && errno != EAGAIN && errno != EINTR)
			die("recv");
		if (r != FRAME_HDR) {
			/* Nothing waiting (or EOF): send what the pipe holds. */
			pipe_flush(pipefd, out, inpipe, false);
			inpipe = 0;
			if (r == 0)
				return moved;
			if (r < 0)
				r = 0;
			if (!read_exact(in, hdr + r, FRAME_HDR - (size_t)r)) {
				if (r == 0)
					return moved;
				fprintf(stderr, "splice_relay: EOF inside a frame header\n");
				exit(1);
			}
		}
		uint32_t len = frame_length(hdr);
		if (inpipe + FRAME_HDR + len > pipesz) {
			pipe_flush(pipefd, out, inpipe, true);
			inpipe = 0;
		}
		/* maitred would write a header of its own (its stream id). */
		for (;;) {
			ssize_t w = write(pipefd[1], hdr, FRAME_HDR);
			syscalls++;
			if (w == FRAME_HDR)
				break;
			if (w < 0 && errno == EINTR)
				continue;
			die("write pipe");
		}
		inpipe += FRAME_HDR;
		for (size_t left = len; left > 0;) {
			ssize_t n = splice_in(in, pipefd, left, SPLICE_F_NONBLOCK);
			if (n < 0) {
				/* EAGAIN: the pipe's slots are full (a payload's pages
				 * need not fill them). Empty it, then splice again. */
				pipe_flush(pipefd, out, inpipe, true);
				inpipe = 0;
				n = splice_in(in, pipefd, left, 0);
			}
			left -= (size_t)n;
			inpipe += (size_t)n;
		}
		moved += FRAME_HDR + (uint64_t)len;
	}
}

/* Peek headers ahead with SO_PEEK_OFF: the socket's peek offset is where the
 * next unknown header starts, relative to the first byte not yet spliced. */
static uint64_t relay_splicebatch(int in, int out, const int pipefd[2], size_t pipesz)
{
	uint64_t moved = 0;
	size_t known = 0;	/* bytes of whole frames known, not yet spliced */
	int off = 0;

	if (setsockopt(in, SOL_SOCKET, SO_PEEK_OFF, &off, sizeof(off)) < 0)
		die("SO_PEEK_OFF");
	for (;;) {
		int avail = 0;
		uint8_t hdr[FRAME_HDR];

		if (ioctl(in, FIONREAD, &avail) < 0)
			die("FIONREAD");
		syscalls++;
		if (avail < FRAME_HDR)
			uncork(out);
		/* Learn every frame whose header has arrived, up to a run of
		 * pipesz; with nothing known yet, wait for one header. */
		while (known < pipesz && (known == 0 || (size_t)avail >= known + FRAME_HDR)) {
			ssize_t r = recv(in, hdr, FRAME_HDR, MSG_PEEK | MSG_WAITALL);
			syscalls++;
			if (r < 0) {
				if (errno == EINTR)
					continue;
				die("recv peek");
			}
			if (r == 0 && known == 0)
				return moved;
			if (r < FRAME_HDR) {
				if (r == 0)
					break;	/* EOF after the known frames */
				fprintf(stderr, "splice_relay: short peek %zd\n", r);
				exit(1);
			}
			known += FRAME_HDR + frame_length(hdr);
			/* The peek offset advanced by 9; skip the payload too. */
			off = (int)known;
			if (setsockopt(in, SOL_SOCKET, SO_PEEK_OFF, &off, sizeof(off)) < 0)
				die("SO_PEEK_OFF");
			syscalls++;
		}
		splice_through(in, pipefd, out, known, pipesz, true);
		moved += known;
		known = 0;
		/* The offset counts from the first unread byte; whether a
		 * splice moves it back with what it consumed is the kernel's
		 * business: set it. */
		off = 0;
		if (setsockopt(in, SOL_SOCKET, SO_PEEK_OFF, &off, sizeof(off)) < 0)
			die("SO_PEEK_OFF");
		syscalls++;
	}
}

static uint64_t relay_splicerun(int in, int out, const int pipefd[2], size_t pipesz)
{
	uint64_t moved = 0;

	for (;;) {
		ssize_t r = splice(in, NULL, pipefd[1], NULL, pipesz, SPLICE_F_MOVE);
		syscalls++;
		if (r < 0) {
			if (errno == EINTR)
				continue;
			die("splice in");
		}
		if (r == 0)
			return moved;
		moved += (uint64_t)r;
		for (size_t inpipe = (size_t)r; inpipe > 0;) {
			ssize_t w = splice(pipefd[0], NULL, out, NULL, inpipe, SPLICE_F_MOVE);
			syscalls++;
			if (w < 0) {
				if (errno == EINTR)
					continue;
				die("splice out");
			}
			inpipe -= (size_t)w;
		}
	}
}

static double ts_sec(const struct timespec *t)
{
	return (double)t->tv_sec + (double)t->tv_nsec / 1e9;
}

static int64_t tv_us(const struct timeval *t)
{
	return (int64_t)t->tv_sec * 1000000 + t->tv_usec;
}

static int run_relay(const char *mode, const char *portfile, int sinkport, size_t pipesz, size_t queue)
{
	int out = connect_port(sinkport), in, pipefd[2] = { -1, -1 };
	struct timespec w0, w1, c0, c1;
	struct rusage r0, r1;
	uint64_t moved;

	if (strcmp(mode, "copy") && strcmp(mode, "copy2")) {
		if (pipe(pipefd) < 0)
			die("pipe");
		if (fcntl(pipefd[1], F_SETPIPE_SZ, (int)pipesz) < 0)
			die("F_SETPIPE_SZ");
		pipesz = (size_t)fcntl(pipefd[1], F_GETPIPE_SZ);
	}
	in = accept_one(listen_any(portfile));
	clock_gettime(CLOCK_MONOTONIC, &w0);
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
	getrusage(RUSAGE_SELF, &r0);
	if (!strcmp(mode, "copy"))
		moved = relay_copy(in, out, 0);
	else if (!strcmp(mode, "copy2"))
		moved = relay_copy(in, out, queue);
	else if (!strcmp(mode, "splice"))
		moved = relay_splice(in, out, pipefd, pipesz);
	else if (!strcmp(mode, "splicepipe"))
		moved = relay_splicepipe(in, out, pipefd, pipesz);
	else if (!strcmp(mode, "splicebatch"))
		moved = relay_splicebatch(in, out, pipefd, pipesz);
	else if (!strcmp(mode, "splicerun"))
		moved = relay_splicerun(in, out, pipefd, pipesz);
	else {
		fprintf(stderr, "splice_relay: unknown mode %s\n", mode);
		return 2;
	}
	shutdown(out, SHUT_WR);
	syscalls++;
	clock_gettime(CLOCK_MONOTONIC, &w1);
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
	getrusage(RUSAGE_SELF, &r1);
	printf("relay mode=%s pipe=%zu bytes=%" PRIu64 " seconds=%.6f cpu_ns=%.0f user_us=%" PRId64
	       " sys_us=%" PRId64 " syscalls=%" PRIu64 "\n",
	       mode, pipefd[0] >= 0 ? pipesz : 0, moved, ts_sec(&w1) - ts_sec(&w0),
	       (ts_sec(&c1) - ts_sec(&c0)) * 1e9, tv_us(&r1.ru_utime) - tv_us(&r0.ru_utime),
	       tv_us(&r1.ru_stime) - tv_us(&r0.ru_stime), syscalls);
	close(in);
	close(out);
	return 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: splice_relay sink -o PORTFILE -f FRAME -n FRAMES\n"
			"       splice_relay source -p PORT -f FRAME -n FRAMES\n"
			"       splice_relay relay -m copy|copy2|splice|splicepipe|splicebatch|splicerun -o PORTFILE -p SINKPORT\n"
			"                          [-z PIPE_BYTES] [-q QUEUE_BYTES]\n");
}

int main(int argc, char **argv)
{
	const char *mode = "copy", *portfile = NULL;
	long port = 0;
	unsigned long long frame = 16384, frames = 0, pipesz = 65536, queue = 8u << 20;
	int opt;

	if (argc < 2) {
		usage();
		return 2;
	}
	optind = 2;
	while ((opt = getopt(argc, argv, "m:o:p:f:n:z:q:")) != -1) {
		switch (opt) {
		case 'm': mode = optarg; break;
		case 'o': portfile = optarg; break;
		case 'p': port = strtol(optarg, NULL, 10); break;
		case 'f': frame = strtoull(optarg, NULL, 10); break;
		case 'n': frames = strtoull(optarg, NULL, 10); break;
		case 'z': pipesz = strtoull(optarg, NULL, 10); break;
		case 'q': queue = strtoull(optarg, NULL, 10); break;
		default: usage(); return 2;
		}
	}
	if (frame == 0 || frame > 0xffffff || (queue != 0 && queue < COPY_BUF) || pipesz == 0 ||
	    pipesz > (1u << 30)) {
		fprintf(stderr, "splice_relay: frame 1..16777215, queue >= 65536, pipe 1..1 GiB\n");
		return 2;
	}
	if (!strcmp(argv[1], "sink") && portfile)
		return run_sink(portfile, (uint32_t)frame, frames);
	if (!strcmp(argv[1], "source") && port > 0 && port < 65536)
		return run_source((int)port, (uint32_t)frame, frames);
	if (!strcmp(argv[1], "relay") && portfile && port > 0 && port < 65536)
		return run_relay(mode, portfile, (int)port, (size_t)pipesz, (size_t)queue);
	usage();
	return 2;
}
