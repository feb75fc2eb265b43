/* maitred: the process. Parses the command line, loads the config, binds
 * one SO_REUSEPORT listener per worker, runs the workers, and on SIGTERM or
 * SIGINT drains them (GOAWAY, in-flight calls finish within drain_timeout)
 * and exits 0. The main thread is the control thread. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/thread.h>
#include <openssl/ssl.h>

#include "core/log.h"
#include "sidecar/etcd.h"
#include "sidecar/sidecar.h"

static void usage(FILE *out)
{
	fprintf(out, "Usage: maitred [--config FILE] [--log-level LEVEL]\n"
	             "       maitred --check-config FILE\n"
	             "\n"
	             "A gRPC load-balancing sidecar: the local app sends its calls over h2c to\n"
	             "maitred, which routes each by /package.Service/Method to a service's\n"
	             "endpoints over pooled HTTP/2 (h2c or TLS).\n"
	             "\n"
	             "  -c, --config FILE       config file (YAML, JSON or binary protobuf of\n"
	             "                          maitred.config.v1.Config); without it maitred\n"
	             "                          runs its embedded default (listen 127.0.0.1:15001,\n"
	             "                          every service round robin over 127.0.0.1:50051-50053)\n"
	             "      --check-config FILE validate FILE, print every error, exit 0 or 1\n"
	             "  -l, --log-level LEVEL   debug, info (default), warn or error\n"
	             "  -V, --version           print the version and exit\n"
	             "  -h, --help              print this help and exit\n");
}

static void print_errors(const struct mtd_cfg_errors *errs, const char *fallback)
{
	if (errs->n == 0) {
		fprintf(stderr, "maitred: %s\n", fallback);
		return;
	}
	for (size_t i = 0; i < errs->n; i++)
		fprintf(stderr, "%s\n", errs->msgs[i]);
}

static struct mtd_cfg *load_config(const char *path)
{
	struct mtd_cfg_errors errs = {0};
	struct mtd_cfg *cfg = NULL;
	int rc = mtd_cfg_load_file(path, MTD_CFG_FORMAT_AUTO, &cfg, &errs);
	if (rc < 0) {
		char why[128];
		snprintf(why, sizeof(why), "%s: %s", path ? path : "<embedded default>", strerror(-rc));
		print_errors(&errs, why);
		mtd_cfg_errors_clear(&errs);
		return NULL;
	}
	mtd_cfg_errors_clear(&errs);
	return cfg;
}

/* SO_REUSEPORT would let a second maitred (same user) bind the same port
 * and silently take half of the app's connections. Bind once without it
 * first: that fails with EADDRINUSE while anything listens there. */
static int check_port_free(const struct mtd_cfg_addr *a)
{
	int fd = socket(a->sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int one = 1, rc = 0;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (const struct sockaddr *)&a->sa, a->salen) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

static int open_listener(const struct mtd_cfg_addr *a)
{
	int fd = socket(a->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	/* DESIGN.md: one listener per worker; the kernel spreads connections. */
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0 ||
	    bind(fd, (const struct sockaddr *)&a->sa, a->salen) < 0 || listen(fd, 1024) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

struct control {
	struct event_base *base;
	struct mtd_runtime *rt;
	struct mtd_worker **workers;
	unsigned n_workers;
	bool draining;
	int drain_signal;
	struct event *drain_timer;
	struct mtd_register *reg; /* Config.register, NULL without */
};

static void drain_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct control *ctl = arg;
	MTD_WARN("drain timeout (%lld ms) reached: closing the remaining calls",
	         (long long)ctl->rt->cfg->drain_timeout_ms);
	for (unsigned i = 0; i < ctl->n_workers; i++)
		mtd_worker_stop(ctl->workers[i]);
	event_base_loopexit(ctl->base, NULL);
}

static void start_drain(void *arg)
{
	struct control *ctl = arg;
	MTD_INFO("%s: draining (GOAWAY to clients, up to %lld ms for calls in flight)",
	         ctl->drain_signal == SIGTERM ? "SIGTERM" : "SIGINT", (long long)ctl->rt->cfg->drain_timeout_ms);
	for (unsigned i = 0; i < ctl->n_workers; i++)
		mtd_worker_drain(ctl->workers[i]);
	int64_t ms = ctl->rt->cfg->drain_timeout_ms;
	struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
	evtimer_add(ctl->drain_timer, &tv);
}

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
	struct control *ctl = arg;
	if (ctl->draining) {
		MTD_WARN("second signal: stopping now");
		drain_timeout_cb(-1, 0, ctl);
		return;
	}
	ctl->draining = true;
	ctl->drain_signal = (int)sig;
	/* Issue 7 section 4: deregister first (revoke the leases, so no other
	 * sidecar sends new calls here), then drain. Bounded (etcd.h). */
	if (mtd_register_shutdown(ctl->reg, start_drain, ctl)) {
		MTD_INFO("%s: revoking the etcd registration leases before draining",
		         sig == SIGTERM ? "SIGTERM" : "SIGINT");
		return;
	}
	start_drain(ctl);
}

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct control *ctl = arg;
	mtd_runtime_tick(ctl->rt);
}

/* Threads: each worker's loop ends once it drained; joining them all in a
 * helper thread lets the control loop stop as soon as they are done. */
static void *join_all(void *arg)
{
	struct control *ctl = arg;
	for (unsigned i = 0; i < ctl->n_workers; i++)
		pthread_join(ctl->workers[i]->thread, NULL);
	event_base_loopexit(ctl->base, NULL);
	return NULL;
}

static int run(struct mtd_runtime *rt)
{
	const struct mtd_cfg *cfg = rt->cfg;
	struct control ctl = {.rt = rt, .n_workers = cfg->workers};
	int rc = 1;

	ctl.workers = calloc(cfg->workers, sizeof(*ctl.workers));
	ctl.base = event_base_new();
	if (!ctl.workers || !ctl.base) {
		MTD_ERROR("out of memory");
		goto out;
	}
	int free_rc = check_port_free(&cfg->listen);
	if (free_rc < 0) {
		MTD_ERROR("cannot listen on %s: %s", cfg->listen.text, strerror(-free_rc));
		goto out;
	}
	for (unsigned i = 0; i < cfg->workers; i++) {
		int fd = open_listener(&cfg->listen);
		if (fd < 0) {
			MTD_ERROR("cannot listen on %s: %s", cfg->listen.text, strerror(-fd));
			goto out_workers;
		}
		ctl.workers[i] = mtd_worker_new(i, rt, fd);
		if (!ctl.workers[i]) {
			close(fd);
			MTD_ERROR("cannot create worker %u", i);
			goto out_workers;
		}
	}
	struct event *sigterm = evsignal_new(ctl.base, SIGTERM, signal_cb, &ctl);
	struct event *sigint = evsignal_new(ctl.base, SIGINT, signal_cb, &ctl);
	struct event *tick = event_new(ctl.base, -1, EV_PERSIST, tick_cb, &ctl);
	ctl.drain_timer = evtimer_new(ctl.base, drain_timeout_cb, &ctl);
	struct timeval one_second = {1, 0};
	evsignal_add(sigterm, NULL);
	evsignal_add(sigint, NULL);
	event_add(tick, &one_second);
	/* Workers (and the joiner) inherit a mask without SIGTERM/SIGINT, so
	 * only the control loop sees them. */
	sigset_t set, old;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, &old);
	for (unsigned i = 0; i < cfg->workers; i++) {
		if (mtd_worker_start(ctl.workers[i]) < 0) {
			MTD_ERROR("cannot start worker thread %u", i);
			for (unsigned j = 0; j < i; j++)
				mtd_worker_stop(ctl.workers[j]);
			ctl.n_workers = i;
			break;
		}
	}
	if (ctl.n_workers == cfg->workers) {
		MTD_INFO("maitred %s listening on %s (h2c), %u worker%s, %zu service%s", PACKAGE_VERSION,
		         cfg->listen.text, cfg->workers, cfg->workers == 1 ? "" : "s", cfg->n_services,
		         cfg->n_services == 1 ? "" : "s");
		rc = 0;
	}
	if (rc == 0 && cfg->n_registers != 0) {
		ctl.reg = mtd_register_start(ctl.base, cfg);
		if (!ctl.reg)
			MTD_ERROR("register: cannot start (out of memory): this pod's apps are not registered");
	}
	pthread_t joiner;
	bool joined = pthread_create(&joiner, NULL, join_all, &ctl) == 0;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (joined) {
		if (rc == 0)
			event_base_dispatch(ctl.base);
		/* The drain timeout may have ended the loop first. */
		for (unsigned i = 0; i < ctl.n_workers; i++)
			mtd_worker_stop(ctl.workers[i]);
		pthread_join(joiner, NULL);
	} else {
		for (unsigned i = 0; i < ctl.n_workers; i++) {
			mtd_worker_stop(ctl.workers[i]);
			pthread_join(ctl.workers[i]->thread, NULL);
		}
	}
	for (unsigned i = 0; i < ctl.n_workers; i++) {
		mtd_worker_free(ctl.workers[i]);
		ctl.workers[i] = NULL;
	}
	mtd_register_free(ctl.reg);
	ctl.reg = NULL;
	event_free(sigterm);
	event_free(sigint);
	event_free(tick);
	event_free(ctl.drain_timer);
	if (rc == 0)
		MTD_INFO("stopped");
out_workers:
	for (unsigned i = 0; i < cfg->workers; i++)
		if (ctl.workers[i])
			mtd_worker_free(ctl.workers[i]); /* never started */
out:
	if (ctl.base)
		event_base_free(ctl.base);
	free(ctl.workers);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	        {"config", required_argument, NULL, 'c'},
	        {"check-config", required_argument, NULL, 'C'},
	        {"log-level", required_argument, NULL, 'l'},
	        {"version", no_argument, NULL, 'V'},
	        {"help", no_argument, NULL, 'h'},
	        {NULL, 0, NULL, 0},
	};
	const char *config_path = NULL, *check_path = NULL;
	int opt;
	while ((opt = getopt_long(argc, argv, "c:l:Vh", opts, NULL)) != -1) {
		switch (opt) {
		case 'c':
			config_path = optarg;
			break;
		case 'C':
			check_path = optarg;
			break;
		case 'l':
			if (mtd_log_parse_level(optarg, &mtd_log_threshold) < 0) {
				fprintf(stderr, "maitred: unknown log level \"%s\" (debug, info, warn, error)\n",
				        optarg);
				return 2;
			}
			break;
		case 'V':
			printf("maitred %s (nghttp2 %s, %s, libevent %s)\n", PACKAGE_VERSION,
			       nghttp2_version(0)->version_str, OpenSSL_version(OPENSSL_VERSION), event_get_version());
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "maitred: unexpected argument \"%s\"\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (check_path) {
		struct mtd_cfg *cfg = load_config(check_path);
		if (!cfg)
			return 1;
		printf("%s: OK (%zu service%s)\n", check_path, cfg->n_services, cfg->n_services == 1 ? "" : "s");
		mtd_cfg_free(cfg);
		return 0;
	}

	signal(SIGPIPE, SIG_IGN);
	if (evthread_use_pthreads() < 0 || mtd_tls_global_init() < 0) {
		MTD_ERROR("cannot initialise libevent threads / OpenSSL");
		return 1;
	}
	struct mtd_cfg *cfg = load_config(config_path);
	if (!cfg)
		return 1;
	char err[512];
	struct mtd_runtime *rt = mtd_runtime_new(cfg, err, sizeof(err));
	if (!rt) {
		fprintf(stderr, "%s: %s\n", config_path ? config_path : "<embedded default>", err);
		return 1;
	}
	int rc = run(rt);
	mtd_runtime_free(rt);
	libevent_global_shutdown();
	return rc;
}
