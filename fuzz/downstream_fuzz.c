/* libFuzzer target for the downstream path: bytes from a local app into a
 * real worker (its nghttp2 server session with maitred's callbacks,
 * hardening options, routing, picking and call setup), with the upstream
 * side scripted by the same input.
 *
 * Input: a 2-byte big-endian length L, then L bytes the app sends, then
 * the bytes the first upstream connection's peer sends (a server preface
 * and frames, typically). Both sides are socketpairs: connect() is wrapped
 * (fuzz/build.sh links with --wrap=connect) so the worker's first upstream
 * socket becomes our scripted peer and later ones a peer that hangs up.
 * The worker's loop runs without blocking until nothing moves any more,
 * both peers hang up, it runs until quiet again; then the worker is freed, which must release every call, stream and
 * connection (LeakSanitizer checks each input). No timer fires here
 * (deadlines, idle and keepalive are left to the integration tests). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config/config.h"
#include "core/log.h"
#include "sidecar/control/control-t.h"
#include "sidecar/control/control.h"
#include "sidecar/control/runtime.h"
#include "sidecar/io/downstream.h"
#include "sidecar/turn.h"
#include "sidecar/worker.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);
int __wrap_connect(int fd, const struct sockaddr *addr, socklen_t len);

/* Two services besides the catch-all, so the hash-key paths (a header, a
 * field of the first message) are reached too. Endpoints are never
 * dialled: connect() is ours. */
static const char fuzz_config[] = "listen: \"127.0.0.1:1\"\n"
                                  "workers: 1\n"
                                  "services:\n"
                                  "  - name: \"*\"\n"
                                  "    lb: { policy: ROUND_ROBIN }\n"
                                  "    endpoints: [{address: \"127.0.0.1:9\"}, {address: \"127.0.0.2:9\"}]\n"
                                  "  - name: \"fuzz.Hash\"\n"
                                  "    lb: { policy: CONSISTENT_HASH }\n"
                                  "    hash_key: { field: \"1\" }\n"
                                  "    endpoints: [{address: \"127.0.0.1:9\"}, {address: \"127.0.0.3:9\"}]\n"
                                  "  - name: \"fuzz.Header\"\n"
                                  "    lb: { policy: MAGLEV }\n"
                                  "    hash_key: { header: \"x-key\", on_missing: FAIL }\n"
                                  "    endpoints: [{address: \"127.0.0.1:9\"}]\n";

static struct mtd_control ctl;
static struct mtd_runtime *rt;
static int listen_fd = -1;

/* The upstream script of the current input and the peers handed out. */
static const uint8_t *up_script;
static size_t up_len, up_off;
#define MAX_PEERS 16
static int peers[MAX_PEERS];
static size_t n_peers;

int __wrap_connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	(void)addr;
	(void)len;
	int sp[2];
	if (n_peers == MAX_PEERS || socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp) < 0) {
		errno = ECONNREFUSED;
		return -1;
	}
	if (dup3(sp[0], fd, O_CLOEXEC) < 0) {
		close(sp[0]);
		close(sp[1]);
		errno = ECONNREFUSED;
		return -1;
	}
	close(sp[0]);
	if (n_peers > 0)
		shutdown(sp[1], SHUT_WR); /* later connections: a peer that hangs up */
	peers[n_peers++] = sp[1];
	errno = EINPROGRESS;
	return -1;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	/* Quiet unless MTD_FUZZ_LOG=debug|info|... (to read what an input does). */
	const char *lvl = getenv("MTD_FUZZ_LOG");
	enum mtd_log_level l;
	mtd_log_threshold = !lvl || mtd_log_parse_level(lvl, &l) < 0 ? MTD_LOG_ERROR + 1 : (int)l;
	struct mtd_cfg *cfg = NULL;
	struct mtd_cfg_errors errs = {0};
	if (mtd_cfg_load_buffer("fuzz.yaml", fuzz_config, sizeof(fuzz_config) - 1, MTD_CFG_FORMAT_YAML, &cfg, &errs) <
	    0)
		abort();
	char err[256];
	/* The control side the runtime reports to: what the last reference to
	 * a snapshot or endpoint queues is freed after every input. */
	if (mtd_control_init(&ctl) < 0)
		abort();
	rt = mtd_runtime_new(&ctl, cfg, 1, err, sizeof(err));
	if (!rt)
		abort();
	listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (listen_fd < 0 || bind(listen_fd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || listen(listen_fd, 1) < 0)
		abort();
	return 0;
}

/* Read and discard what fd has; true if anything came. */
static size_t drained; /* bytes maitred wrote to the client, for MTD_FUZZ_LOG */

static bool drain(int fd, bool client)
{
	uint8_t buf[65536];
	bool any = false;
	ssize_t n;
	while ((n = read(fd, buf, sizeof(buf))) > 0) {
		any = true;
		if (client)
			drained += (size_t)n;
	}
	return any;
}

/* Write what is left of [*off, len) without blocking; true if anything went. */
static bool feed(int fd, const uint8_t *p, size_t len, size_t *off)
{
	bool any = false;
	while (*off < len) {
		ssize_t n = write(fd, p + *off, len - *off);
		if (n <= 0)
			break;
		*off += (size_t)n;
		any = true;
	}
	return any;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	size_t down_len = (size_t)data[0] << 8 | data[1];
	data += 2;
	size -= 2;
	if (down_len > size)
		down_len = size;
	const uint8_t *down = data;
	up_script = data + down_len;
	up_len = size - down_len;
	up_off = 0;
	n_peers = 0;

	int lfd = dup(listen_fd);
	mtd_ref_get(&rt->ref); /* the worker's; the harness keeps its own */
	struct mtd_worker *w = lfd >= 0 ? mtd_worker_new(0, rt, lfd) : NULL;
	if (!w) {
		mtd_runtime_unref(rt);
		if (lfd >= 0)
			close(lfd);
		return 0;
	}
	int sp[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp) < 0)
		abort();
	if (mtd_down_accept(w, sp[0]) < 0) {
		close(sp[0]);
		close(sp[1]);
		mtd_worker_free(w);
		return 0;
	}
	/* Both peers keep their sockets open until the exchange goes quiet
	 * (a real client waits for its answers); then they hang up, and the
	 * loop runs until quiet again. */
	size_t down_off = 0;
	bool hung_up = false;
	for (int idle = 0, turns = 0; turns < 1000; turns++) {
		bool moved = feed(sp[1], down, down_len, &down_off);
		if (n_peers > 0)
			moved |= feed(peers[0], up_script, up_len, &up_off);
		event_base_loop(w->base, EVLOOP_NONBLOCK);
		moved |= drain(sp[1], true);
		for (size_t i = 0; i < n_peers; i++)
			moved |= drain(peers[i], false);
		idle = moved ? 0 : idle + 1;
		if (idle < 4)
			continue;
		if (hung_up)
			break;
		shutdown(sp[1], SHUT_WR);
		if (n_peers > 0)
			shutdown(peers[0], SHUT_WR);
		hung_up = true;
		idle = 0;
	}
	MTD_DEBUG("fuzz: %zu of %zu client bytes read, %zu bytes back to the client, %zu upstream connections",
	          down_off, down_len, drained, n_peers);
	drained = 0;
	mtd_worker_free(w);
	mtd_runtime_reclaim(&ctl);
	close(sp[1]);
	for (size_t i = 0; i < n_peers; i++)
		close(peers[i]);
	n_peers = 0;
	return 0;
}
