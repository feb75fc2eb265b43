/*
 * tcp_relay: the floor of a proxy hop at a steady rate (bench/proxy/README.md
 * "The floor of a hop"). Not part of maitred; no HTTP/2, no TLS, no library:
 * each accepted connection gets one connection to an upstream (round robin
 * over the given ports) and the bytes go across as they come, both ways. It
 * does what any proxy must do for a call and nothing more: wake, read, write.
 * A proxy that parses HTTP/2, routes the call and keeps gRPC's semantics can
 * only cost more CPU and add more latency than this row, so what this row
 * adds over the direct path is the machine's price of a hop (wake-ups,
 * loopback TCP, context switches), not any proxy's.
 *
 *   tcp_relay -l PORT -u PORT[,PORT...]
 *
 * One thread, epoll, level-triggered. A direction reads at most one 64 KiB
 * buffer, writes it at once and reads again only when it has all gone out
 * (EPOLLOUT on the other side while it has not): the fewest syscalls a relay
 * can make per wake-up, as maitred's own path does (one read, one write per
 * ready connection). Listens and connects on 127.0.0.1 only. Upstream
 * connects are blocking (loopback answers at once). Stops on SIGTERM.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUF_SIZE 65536
#define MAX_UPSTREAMS 16
#define MAX_EVENTS 64

/* One direction of a pair: bytes read from `from`, not yet all written to
 * the other side. */
struct half {
	size_t off, len;
	uint8_t buf[BUF_SIZE];
};

/* A client connection and its upstream connection: side 0 the client,
 * side 1 the upstream; h[s] carries bytes read from side s. */
struct pair {
	int fd[2];
	uint32_t interest[2]; /* what epoll watches on fd[s] */
	struct half h[2];
	/* epoll's data for each fd: points here, the side in the low bit */
};

static int epfd;

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static void *tag(struct pair *p, int side)
{
	return (void *)((uintptr_t)p | (uintptr_t)side);
}

static void close_pair(struct pair *p)
{
	for (int s = 0; s < 2; s++)
		close(p->fd[s]); /* also leaves the epoll set */
	free(p);
}

/* Watch fd[s] for `want`, with one epoll_ctl only when it changes. */
static int watch(struct pair *p, int s, uint32_t want)
{
	if (p->interest[s] == want)
		return 0;
	struct epoll_event ev = {.events = want, .data.ptr = tag(p, s)};
	if (epoll_ctl(epfd, EPOLL_CTL_MOD, p->fd[s], &ev) < 0)
		return -1;
	p->interest[s] = want;
	return 0;
}

/* Write what h[s] holds to the other side. 1 when it has all gone out, 0
 * when the socket is full, -1 on an error. */
static int flush(struct pair *p, int s)
{
	struct half *h = &p->h[s];
	while (h->off < h->len) {
		ssize_t n = write(p->fd[!s], h->buf + h->off, h->len - h->off);
		if (n < 0)
			return errno == EAGAIN ? 0 : -1;
		h->off += (size_t)n;
	}
	h->off = h->len = 0;
	return 1;
}

/* fd[s] is readable: one read, written out at once; while the other side
 * has not taken it all, stop reading s and wait for the other side's room. */
static int on_readable(struct pair *p, int s)
{
	struct half *h = &p->h[s];
	ssize_t n = read(p->fd[s], h->buf, sizeof(h->buf));
	if (n == 0)
		return -1;
	if (n < 0)
		return errno == EAGAIN ? 0 : -1;
	h->len = (size_t)n;
	int r = flush(p, s);
	if (r < 0)
		return -1;
	if (r == 0 && (watch(p, s, p->interest[s] & ~EPOLLIN) < 0 || watch(p, !s, p->interest[!s] | EPOLLOUT) < 0))
		return -1;
	return 0;
}

/* fd[s] has room: what side !s read goes on; once all gone, read !s again. */
static int on_writable(struct pair *p, int s)
{
	int r = flush(p, !s);
	if (r <= 0)
		return r;
	if (watch(p, s, p->interest[s] & ~EPOLLOUT) < 0 || watch(p, !s, p->interest[!s] | EPOLLIN) < 0)
		return -1;
	return 0;
}

static int tcp_socket(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		die("socket");
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static struct sockaddr_in loopback(int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

static void on_accept(int lfd, const int *ups, size_t nups, size_t *next)
{
	for (;;) {
		int cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
		if (cfd < 0)
			return;
		int one = 1;
		setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		int ufd = tcp_socket();
		struct sockaddr_in a = loopback(ups[(*next)++ % nups]);
		struct pair *p = calloc(1, sizeof(*p));
		if (!p || connect(ufd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
		    fcntl(ufd, F_SETFL, O_NONBLOCK) < 0) {
			perror("upstream");
			close(cfd);
			close(ufd);
			free(p);
			continue;
		}
		p->fd[0] = cfd;
		p->fd[1] = ufd;
		for (int s = 0; s < 2; s++) {
			struct epoll_event ev = {.events = EPOLLIN, .data.ptr = tag(p, s)};
			p->interest[s] = EPOLLIN;
			if (epoll_ctl(epfd, EPOLL_CTL_ADD, p->fd[s], &ev) < 0)
				die("epoll_ctl");
		}
	}
}

int main(int argc, char **argv)
{
	int port = 0, ups[MAX_UPSTREAMS];
	size_t nups = 0, next = 0;
	for (int o; (o = getopt(argc, argv, "l:u:")) != -1;) {
		if (o == 'l') {
			port = atoi(optarg);
		} else if (o == 'u') {
			for (char *t = strtok(optarg, ","); t && nups < MAX_UPSTREAMS; t = strtok(NULL, ","))
				ups[nups++] = atoi(t);
		} else {
			fprintf(stderr, "usage: %s -l PORT -u PORT[,PORT...]\n", argv[0]);
			return 2;
		}
	}
	if (port <= 0 || port > 65535 || nups == 0) {
		fprintf(stderr, "usage: %s -l PORT -u PORT[,PORT...]\n", argv[0]);
		return 2;
	}
	int lfd = tcp_socket(), one = 1;
	struct sockaddr_in a = loopback(port);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 1024) < 0 ||
	    fcntl(lfd, F_SETFL, O_NONBLOCK) < 0)
		die("listen");
	if ((epfd = epoll_create1(0)) < 0)
		die("epoll_create1");
	struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
	if (epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &lev) < 0)
		die("epoll_ctl");
	struct epoll_event evs[MAX_EVENTS];
	for (;;) {
		int n = epoll_wait(epfd, evs, MAX_EVENTS, -1);
		if (n < 0 && errno != EINTR)
			die("epoll_wait");
		/* A pair closed in this batch may still have an event below:
		 * closing waits for the end of the batch. */
		struct pair *dead[MAX_EVENTS];
		int ndead = 0;
		for (int i = 0; i < n; i++) {
			if (!evs[i].data.ptr) {
				on_accept(lfd, ups, nups, &next);
				continue;
			}
			uintptr_t t = (uintptr_t)evs[i].data.ptr;
			struct pair *p = (struct pair *)(t & ~(uintptr_t)1);
			int s = (int)(t & 1), r = 0;
			bool gone = false;
			for (int d = 0; d < ndead; d++)
				gone |= dead[d] == p;
			if (gone)
				continue;
			if (evs[i].events & (EPOLLERR | EPOLLHUP | EPOLLIN)) {
				/* bytes of s still waiting for the other side: a
				 * hang-up or an error ends the pair, a read waits */
				if (p->h[s].len)
					r = evs[i].events & (EPOLLERR | EPOLLHUP) ? -1 : 0;
				else
					r = on_readable(p, s);
			}
			if (r >= 0 && (evs[i].events & EPOLLOUT))
				r = on_writable(p, s);
			if (r < 0)
				dead[ndead++] = p;
		}
		for (int d = 0; d < ndead; d++)
			close_pair(dead[d]);
	}
}
