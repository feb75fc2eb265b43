/* maitred: the process. Parses the command line, loads the config, binds
 * one SO_REUSEPORT listener per worker, runs the workers, and on SIGTERM or
 * SIGINT drains them (GOAWAY, in-flight calls finish within drain_timeout)
 * and exits 0. The main thread is the control thread: it also reloads the
 * config on SIGHUP or when the file changes (inotify), runs the endpoint
 * sources (DNS) and frees the snapshots nobody uses any more. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/random.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <event2/thread.h>
#include <openssl/ssl.h>

#include "authz/authz.h"
#include "core/log.h"
#include "sidecar/ops/admin.h"
#include "sidecar/call/trace.h"
#include "sidecar/control/certwatch.h"
#include "sidecar/control/control.h"
#include "sidecar/control/etcd.h"
#include "sidecar/control/health.h"
#include "sidecar/control/orca_oob.h"
#include "sidecar/ops/metrics.h"
#include "sidecar/ops/trace_export.h"
#include "core/clock.h"
#include "discovery/discovery.h"
#include "lb/lb.h"
#include "sidecar/control/control-t.h"
#include "sidecar/control/reload.h"
#include "sidecar/control/runtime.h"
#include "sidecar/control/sources.h"
#include "sidecar/control/xds.h"
#include "sidecar/io/inbound.h"
#include "sidecar/io/listen.h"
#include "sidecar/io/transport.h"
#include "sidecar/turn.h"
#include "sidecar/worker.h"

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

/* --check-config: every TLS file the start would load, loaded as it would
 * be (mtd_cfg_load_file only reads them): a file with no certificate in it, or
 * a key that is not its certificate's, refuses the start (services, inbound
 * listeners, xds.tls, tracing) or leaves a source or a registration
 * without its etcd (discovery.etcd, register), and must not pass the check.
 * Prints one line per failure, "PATH: where: TLS: why"; returns how many. */
static int check_tls(const char *path, const struct mtd_cfg *cfg)
{
	char why[512];
	int bad = 0;

#define CHECK_CTX(ctx, ...)                                        \
	do {                                                       \
		struct ssl_ctx_st *c_ = (ctx);                     \
		if (c_ == NULL) {                                  \
			fprintf(stderr, "%s: ", path);             \
			fprintf(stderr, __VA_ARGS__);              \
			fprintf(stderr, "%s\n", why);              \
			bad++;                                     \
		}                                                  \
		SSL_CTX_free(c_);                                  \
	} while (0)

	for (size_t i = 0; i < cfg->n_services; i++) {
		const struct mtd_cfg_service *s = &cfg->services[i];
		const struct mtd_cfg_etcd *etcd = s->local->etcd;

		if (s->tls != NULL)
			CHECK_CTX(mtd_tls_client_ctx_new(s->tls, why, sizeof(why)), "service %s: TLS: ", s->local->name);
		if (etcd != NULL && etcd->tls != NULL)
			CHECK_CTX(mtd_tls_client_ctx_new(etcd->tls, why, sizeof(why)), "service %s: discovery.etcd.tls: ",
			          s->local->name);
	}
	for (size_t i = 0; i < cfg->n_inbound; i++) {
		const struct mtd_cfg_inbound *ib = &cfg->inbound[i];

		CHECK_CTX(mtd_tls_server_ctx_new(ib->cert_file, ib->key_file, ib->client_ca_file, why, sizeof(why)),
		          "inbound[%zu] (%s): TLS: ", i, ib->listen.text);
	}
	for (size_t i = 0; i < cfg->n_registers; i++) {
		const struct mtd_cfg_register *r = &cfg->registers[i];

		if (r->etcd != NULL && r->etcd->tls != NULL)
			CHECK_CTX(mtd_tls_client_ctx_new(r->etcd->tls, why, sizeof(why)), "register[%zu] (%s): etcd.tls: ",
			          i, r->service);
	}
	if (cfg->xds != NULL && cfg->xds->tls != NULL)
		CHECK_CTX(mtd_tls_client_ctx_new(cfg->xds->tls, why, sizeof(why)), "xds.tls: ");
	if (cfg->tracing != NULL && cfg->tracing->https)
		CHECK_CTX(mtd_tls_http1_client_ctx_new(cfg->tracing->tls, why, sizeof(why)), "tracing: ");
#undef CHECK_CTX
	return bad;
}

/* For a reload: the same errors as at start, through the log. */
static struct mtd_cfg *reload_config(const char *path)
{
	struct mtd_cfg_errors errs = {0};
	struct mtd_cfg *cfg = NULL;
	int rc = mtd_cfg_load_file(path, MTD_CFG_FORMAT_AUTO, &cfg, &errs);
	if (rc < 0) {
		if (errs.n == 0)
			MTD_ERROR("reload: %s: %s; keeping the running config", path, strerror(-rc));
		for (size_t i = 0; i < errs.n; i++)
			MTD_ERROR("reload: %s", errs.msgs[i]);
		if (errs.n != 0)
			MTD_ERROR("reload: %s refused (%zu error%s); keeping the running config", path, errs.n,
			          errs.n == 1 ? "" : "s");
		mtd_cfg_errors_clear(&errs);
		return NULL;
	}
	mtd_cfg_errors_clear(&errs);
	return cfg;
}

static void stop_now(struct mtd_control *ctl)
{
	for (unsigned i = 0; i < ctl->n_workers; i++)
		mtd_worker_stop(ctl->workers[i]);
	event_base_loopexit(ctl->base, NULL);
}

static void drain_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_control *ctl = arg;
	MTD_WARN("drain timeout (%lld ms) reached: closing the remaining calls",
	         (long long)ctl->rt->cfg->drain_timeout_ms);
	stop_now(ctl);
}

static void start_drain(void *arg)
{
	struct mtd_control *ctl = arg;
	MTD_INFO("%s: draining (GOAWAY to clients, up to %lld ms for calls in flight)", ctl->drain_why,
	         (long long)ctl->rt->cfg->drain_timeout_ms);
	for (unsigned i = 0; i < ctl->n_workers; i++)
		mtd_worker_drain(ctl->workers[i]);
	int64_t ms = ctl->rt->cfg->drain_timeout_ms;
	struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
	evtimer_add(ctl->drain_timer, &tv);
}

/* SIGTERM, SIGINT and the admin's POST /drain. */
static void begin_drain(void *arg, const char *why)
{
	struct mtd_control *ctl = arg;
	if (ctl->draining)
		return;
	ctl->draining = true;
	ctl->drain_why = why;
	/* The endpoint sets stay as they are while calls finish. */
	mtd_sources_stop(ctl);
	/* Issue 7 section 4: deregister first (revoke the leases, so no other
	 * sidecar sends new calls here), then drain. Bounded (etcd.h). */
	if (mtd_register_shutdown(ctl->reg, start_drain, ctl)) {
		MTD_INFO("%s: revoking the etcd registration leases before draining", why);
		return;
	}
	start_drain(ctl);
}

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
	struct mtd_control *ctl = arg;
	if (ctl->draining) {
		MTD_WARN("second signal: stopping now");
		stop_now(ctl);
		return;
	}
	ctl->drain_signal = (int)sig;
	begin_drain(ctl, sig == SIGTERM ? "SIGTERM" : "SIGINT");
}

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_control *ctl = arg;
	mtd_control_tick(ctl);
}

/* ---- reload -------------------------------------------------------------- */

/* --log-level on the command line wins over the file's log.level. */
static bool log_level_given;

static void apply_log_settings(const struct mtd_cfg *cfg)
{
	atomic_store_explicit(&mtd_log_json, cfg->log.json, memory_order_relaxed);
	if (!log_level_given)
		atomic_store_explicit(&mtd_log_threshold, cfg->log.level >= 0 ? cfg->log.level : (int)MTD_LOG_INFO,
		                      memory_order_relaxed);
}

/* A reload is a transaction (control/reload.h): everything the new config
 * needs is built first, then published in one step; or the reload is
 * refused and the running process is exactly as it was. */
static void reload(struct mtd_control *ctl, const char *why)
{
	if (ctl->draining || !ctl->config_path)
		return;
	MTD_INFO("%s: reloading %s", why, ctl->config_path);
	struct mtd_cfg *cfg = reload_config(ctl->config_path);
	if (!cfg)
		return;
	/* The services created for a control plane's routes stay while its
	 * routes name them. */
	cfg = mtd_xds_keep_created(ctl->xds, cfg);
	/* What the running process cannot change: logged, the rest applies.
	 * Compared with what it runs (not the last config applied, which may
	 * have asked for a restart already). */
	if (strcmp(cfg->listen.text, ctl->run_listen) != 0)
		MTD_WARN("reload: listen changed (%s -> %s): needs a restart; still listening on %s", ctl->run_listen,
		         cfg->listen.text, ctl->run_listen);
	if (cfg->workers != ctl->run_workers)
		MTD_WARN("reload: workers changed (%u -> %u): needs a restart; still %u", ctl->run_workers, cfg->workers,
		         ctl->run_workers);
	if ((cfg->admin == NULL) != (ctl->run_admin == NULL) ||
	    (cfg->admin && strcmp(cfg->admin->text, ctl->run_admin) != 0))
		MTD_WARN("reload: admin changed: needs a restart");
	struct mtd_reload_tx tx;
	char err[512];
	if (mtd_reload_prepare(ctl, cfg, &tx, err, sizeof(err)) < 0) {
		MTD_ERROR("reload: %s; keeping the running config", err);
		return;
	}
	/* log: live from here (log.h, access_log.h: atomics the threads read). */
	apply_log_settings(tx.rt->cfg);
	mtd_reload_commit(ctl, &tx);
	MTD_INFO("reload: %s applied (%zu service%s)", ctl->config_path, ctl->rt->cfg->n_routed,
	         ctl->rt->cfg->n_routed == 1 ? "" : "s");
}

static uint64_t file_hash(const char *path, bool *ok);

static void sighup_cb(evutil_socket_t sig, short what, void *arg)
{
	struct mtd_control *ctl = arg;
	bool ok;
	/* The content about to be loaded, hashed first: the file watch then
	 * skips the change SIGHUP already applied (one reload, not two), and
	 * a write after this still differs and reloads. */
	uint64_t h = ctl->config_path ? file_hash(ctl->config_path, &ok) : 0;
	if (ctl->config_path && ok)
		ctl->config_hash = h;
	reload(ctl, "SIGHUP");
	/* SIGHUP reads the certificate files again too (whatever the config
	 * did: refused, or unchanged). */
	mtd_certwatch_check(ctl->certs);
}

/* Editors and config managers write in bursts (truncate, write, rename):
 * wait until the file has been quiet for a moment, then reload if its
 * content changed. */
#define WATCH_SETTLE_MS 200

/* The content's hash; *ok false when path is no regular file it can read
 * (then the load refuses it, saying why). O_NONBLOCK: a FIFO with no writer
 * would block open(). */
static uint64_t file_hash(const char *path, bool *ok)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	struct stat st;
	FILE *f = NULL;
	uint64_t h = 0;
	uint8_t buf[8192];
	size_t n;
	if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
		f = fdopen(fd, "rb");
	*ok = f != NULL;
	if (!f) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		h = mtd_lb_hash64(buf, n, h);
	fclose(f);
	return h;
}

static void watch_settle_cb(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_control *ctl = arg;
	bool ok;
	uint64_t h = file_hash(ctl->config_path, &ok);
	if (!ok || h == ctl->config_hash)
		return; /* gone for a moment (rename in progress), or the same */
	ctl->config_hash = h;
	reload(ctl, "config file changed");
}

static void watch_cb(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_control *ctl = arg;
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	bool hit = false, other = false;
	ssize_t n;
	while ((n = read(fd, buf, sizeof(buf))) > 0) {
		for (char *p = buf; p < buf + n;) {
			const struct inotify_event *ev = (const struct inotify_event *)(void *)p;
			if (ev->len && strcmp(ev->name, ctl->config_base) == 0)
				hit = true;
			else if (ev->len)
				other = true;
			p += sizeof(*ev) + ev->len;
		}
	}
	/* A config reached through a symbolic link changes when a link it
	 * goes through is replaced under another name of the directory: a
	 * Kubernetes ConfigMap renames a new "..data" over the old. The hash
	 * after the settle decides whether it changed. */
	struct stat st;
	if (!hit && other && lstat(ctl->config_path, &st) == 0 && S_ISLNK(st.st_mode))
		hit = true;
	if (hit) {
		struct timeval tv = {0, WATCH_SETTLE_MS * 1000};
		evtimer_add(ctl->watch_settle, &tv);
	}
}

/* Watch the file's directory, not the file: a rename over it (how most
 * tools replace a file) would end a watch on the old inode. */
static void watch_start(struct mtd_control *ctl)
{
	const char *slash = strrchr(ctl->config_path, '/');
	char dir[4096];
	if (slash)
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - ctl->config_path + 1), ctl->config_path);
	else
		snprintf(dir, sizeof(dir), ".");
	ctl->config_base = slash ? slash + 1 : ctl->config_path;
	ctl->watch_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	/* No IN_MODIFY: it fires on every write(2) to any file of the
	 * directory, and a log kept open there would wake the control thread
	 * once per line. A file edited in place is seen when it is closed. */
	if (ctl->watch_fd < 0 || inotify_add_watch(ctl->watch_fd, dir, IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE) < 0) {
		MTD_WARN("cannot watch %s for changes (%s): reload with SIGHUP", ctl->config_path, strerror(errno));
		if (ctl->watch_fd >= 0)
			close(ctl->watch_fd);
		ctl->watch_fd = -1;
		return;
	}
	ctl->watch_ev = event_new(ctl->base, ctl->watch_fd, EV_READ | EV_PERSIST, watch_cb, ctl);
	ctl->watch_settle = evtimer_new(ctl->base, watch_settle_cb, ctl);
	if (!ctl->watch_ev || !ctl->watch_settle || event_add(ctl->watch_ev, NULL) < 0) {
		MTD_WARN("cannot watch %s for changes: reload with SIGHUP", ctl->config_path);
		return;
	}
	/* The workers serve before the watch exists: a file replaced in
	 * between (a config manager's write as the port opened) is compared
	 * with what was loaded, as a change the watch saw would be, after
	 * the same settle (a SIGHUP sent with that write, pending since
	 * main's start, is taken first and makes it one reload). */
	struct timeval tv = {0, WATCH_SETTLE_MS * 1000};
	evtimer_add(ctl->watch_settle, &tv);
}

static void watch_stop(struct mtd_control *ctl)
{
	if (ctl->watch_ev)
		event_free(ctl->watch_ev);
	if (ctl->watch_settle)
		event_free(ctl->watch_settle);
	if (ctl->watch_fd >= 0)
		close(ctl->watch_fd);
	ctl->watch_ev = ctl->watch_settle = NULL;
	ctl->watch_fd = -1;
}

/* Threads: each worker's loop ends once it drained; joining them all in a
 * helper thread lets the control loop stop as soon as they are done. */
static void *join_all(void *arg)
{
	struct mtd_control *ctl = arg;
	for (unsigned i = 0; i < ctl->n_workers; i++)
		pthread_join(ctl->workers[i]->thread, NULL);
	event_base_loopexit(ctl->base, NULL);
	return NULL;
}

/* The key of the ids of the traces calls start (call/trace.h), drawn once:
 * getrandom, which waits at early boot until the kernel's pool is ready,
 * so it fails only where the call itself is missing (an old kernel, a
 * seccomp filter) or a signal keeps interrupting it. Then the sidecar
 * still starts, with a key from the clocks and the pid, and says so once:
 * its ids stay unique and evenly spread (sampling unchanged), only
 * guessable by one who knows when and as which pid it started. Refusing
 * to start would make that tracing property an outage of the app's calls. */
static void trace_key(void)
{
	uint8_t key[MTD_SIPHASH_KEY_LEN];
	ssize_t n = -1;
	for (int tries = 0; tries < 8; tries++) {
		n = getrandom(key, sizeof(key), 0);
		if (n >= 0 || errno != EINTR)
			break;
	}
	if (n != (ssize_t)sizeof(key)) {
		MTD_WARN("trace ids: no random key (getrandom: %s): the ids of new traces are guessable",
		         n < 0 ? strerror(errno) : "short read");
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		uint64_t k0 = (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30;
		uint64_t k1 = (uint64_t)mtd_now_ns() ^ (uint64_t)getpid() << 40;
		memcpy(key, &k0, 8);
		memcpy(key + 8, &k1, 8);
	}
	mtd_call_trace_key(key);
	explicit_bzero(key, sizeof(key));
}

static int run(struct mtd_control *ctl)
{
	const struct mtd_cfg *cfg = ctl->rt->cfg;
	unsigned n_workers = cfg->workers;
	struct mtd_admin *admin = NULL;
	int rc = 1;

	ctl->run_listen = strdup(cfg->listen.text);
	ctl->run_admin = cfg->admin ? strdup(cfg->admin->text) : NULL;
	ctl->run_workers = n_workers;
	ctl->workers = calloc(n_workers, sizeof(*ctl->workers));
	if (!ctl->workers || !ctl->run_listen || (cfg->admin && !ctl->run_admin)) {
		MTD_ERROR("out of memory");
		return 1;
	}
	{
		trace_key();
		struct mtd_trace_target *trace;
		char err[256];
		if (mtd_reload_tracing(ctl, ctl->rt, &trace, err, sizeof(err)) < 0) {
			MTD_ERROR("tracing: %s", err);
			return 1;
		}
		if (ctl->tracer)
			mtd_tracer_set_target(ctl->tracer, trace);
	}
	int free_rc = mtd_listen_check_free(&cfg->listen);
	if (free_rc < 0) {
		MTD_ERROR("cannot listen on %s: %s", cfg->listen.text, strerror(-free_rc));
		goto out;
	}
	for (unsigned i = 0; i < n_workers; i++) {
		int fd = mtd_listen_open(&cfg->listen);
		if (fd < 0) {
			MTD_ERROR("cannot listen on %s: %s", cfg->listen.text, strerror(-fd));
			goto out_workers;
		}
		mtd_ref_get(&ctl->rt->ref); /* the worker's */
		ctl->workers[i] = mtd_worker_new(i, ctl->rt, fd);
		if (!ctl->workers[i]) {
			mtd_runtime_unref(ctl->rt);
			close(fd);
			MTD_ERROR("cannot create worker %u", i);
			goto out_workers;
		}
		/* Its inbound listeners: the sockets of the runtime's inbound
		 * set (bound when it was built), one per worker per entry. */
		if (mtd_inbound_worker_init(ctl->workers[i]) < 0) {
			MTD_ERROR("cannot create worker %u's inbound listeners", i);
			goto out_workers;
		}
	}
	ctl->n_workers = n_workers;
	if (cfg->admin) {
		char err[256];
		struct mtd_admin_view view = {
		        .rt = &ctl->rt,
		        .draining = &ctl->draining,
		        .listening = &ctl->listening,
		        .n_workers = n_workers,
		        .start_wall_ms = mtd_wall_ms(),
		        .drain = begin_drain,
		        .arg = ctl,
		        .xds = &ctl->xds,
		};
		admin = mtd_admin_start(ctl->base, cfg->admin, &view, err, sizeof(err));
		if (!admin) {
			MTD_ERROR("%s", err);
			goto out_workers;
		}
	}
	struct event *sigterm = evsignal_new(ctl->base, SIGTERM, signal_cb, ctl);
	struct event *sigint = evsignal_new(ctl->base, SIGINT, signal_cb, ctl);
	struct event *sighup = evsignal_new(ctl->base, SIGHUP, sighup_cb, ctl);
	struct event *tick = event_new(ctl->base, -1, EV_PERSIST, tick_cb, ctl);
	ctl->drain_timer = evtimer_new(ctl->base, drain_timeout_cb, ctl);
	struct timeval one_second = {1, 0};
	evsignal_add(sigterm, NULL);
	evsignal_add(sigint, NULL);
	evsignal_add(sighup, NULL);
	event_add(tick, &one_second);
	/* Workers (and the joiner) inherit a mask without SIGTERM/SIGINT/
	 * SIGHUP, so only the control loop sees them. */
	sigset_t set, old;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, &old);
	for (unsigned i = 0; i < n_workers; i++) {
		if (mtd_worker_start(ctl->workers[i]) < 0) {
			MTD_ERROR("cannot start worker thread %u", i);
			for (unsigned j = 0; j < i; j++)
				mtd_worker_stop(ctl->workers[j]);
			ctl->n_workers = i;
			break;
		}
	}
	if (ctl->n_workers == n_workers) {
		MTD_INFO("maitred %s listening on %s (h2c), %u worker%s, %zu service%s", PACKAGE_VERSION,
		         cfg->listen.text, n_workers, n_workers == 1 ? "" : "s", cfg->n_routed,
		         cfg->n_routed == 1 ? "" : "s");
		for (size_t k = 0; k < cfg->n_inbound; k++)
			MTD_INFO("inbound %s (mTLS%s) for the app at %s, authorization default %s, %zu rule%s",
			         cfg->inbound[k].listen.text, cfg->inbound[k].client_ca_file ? "" : ", no client certificate",
			         cfg->inbound[k].app.text, mtd_authz_default_name(cfg->inbound[k].authz.def),
			         cfg->inbound[k].authz.n_rules, cfg->inbound[k].authz.n_rules == 1 ? "" : "s");
		if (admin)
			MTD_INFO("admin endpoint on http://%s/", cfg->admin->text);
		ctl->listening = true;
		rc = 0;
	}
	if (rc == 0 && cfg->n_registers != 0) {
		/* The registration copies its entries (a reload may free cfg). */
		ctl->reg = mtd_register_start(ctl->base, cfg);
		if (!ctl->reg)
			MTD_ERROR("register: cannot start (out of memory or unusable etcd TLS files, said above): this "
			          "pod's apps are not registered");
	}
	pthread_t joiner;
	bool joined = pthread_create(&joiner, NULL, join_all, ctl) == 0;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	/* SIGHUP was held since main's start: one pending is delivered now. */
	sigset_t hup;
	sigemptyset(&hup);
	sigaddset(&hup, SIGHUP);
	pthread_sigmask(SIG_UNBLOCK, &hup, NULL);
	if (joined) {
		if (rc == 0) {
			if (ctl->config_path)
				watch_start(ctl);
			mtd_sources_start(ctl);
			ctl->health = mtd_health_start(ctl);
			ctl->orca_oob = mtd_orca_oob_start(ctl);
			ctl->certs = mtd_certwatch_start(ctl);
			event_base_dispatch(ctl->base);
		}
		/* The drain timeout may have ended the loop first. */
		for (unsigned i = 0; i < ctl->n_workers; i++)
			mtd_worker_stop(ctl->workers[i]);
		pthread_join(joiner, NULL);
	} else {
		for (unsigned i = 0; i < ctl->n_workers; i++) {
			mtd_worker_stop(ctl->workers[i]);
			pthread_join(ctl->workers[i]->thread, NULL);
		}
	}
	mtd_sources_stop(ctl);
	mtd_xds_free(ctl->xds);
	ctl->xds = NULL;
	watch_stop(ctl);
	for (unsigned i = 0; i < ctl->n_workers; i++) {
		mtd_worker_free(ctl->workers[i]);
		ctl->workers[i] = NULL;
	}
	mtd_register_free(ctl->reg);
	ctl->reg = NULL;
	mtd_health_free(ctl->health);
	ctl->health = NULL;
	mtd_orca_oob_free(ctl->orca_oob);
	ctl->orca_oob = NULL;
	mtd_certwatch_free(ctl->certs);
	ctl->certs = NULL;
	event_free(sigterm);
	event_free(sigint);
	event_free(sighup);
	event_free(tick);
	event_free(ctl->drain_timer);
	if (rc == 0)
		MTD_INFO("stopped");
out_workers:
	for (unsigned i = 0; i < n_workers; i++)
		if (ctl->workers[i])
			mtd_worker_free(ctl->workers[i]); /* never started */
	mtd_admin_free(admin);
out:
	ctl->n_workers = 0;
	free(ctl->workers);
	ctl->workers = NULL;
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
		case 'l': {
			enum mtd_log_level l;
			log_level_given = true;
			if (mtd_log_parse_level(optarg, &l) < 0) {
				fprintf(stderr, "maitred: unknown log level \"%s\" (debug, info, warn, error)\n",
				        optarg);
				return 2;
			}
			mtd_log_threshold = (int)l;
			break;
		}
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
		if (mtd_tls_global_init() < 0 || check_tls(check_path, cfg) != 0) {
			mtd_cfg_free(cfg);
			return 1;
		}
		printf("%s: OK (%zu service%s)\n", check_path, cfg->n_routed, cfg->n_routed == 1 ? "" : "s");
		mtd_cfg_free(cfg);
		return 0;
	}

	signal(SIGPIPE, SIG_IGN);
	/* SIGHUP is held (blocked, so pending) until the control loop's
	 * handler is in place and the worker threads have inherited a mask
	 * without it: the listening sockets accept from the moment they are
	 * bound, and a supervisor (or a test) that sees the port open may send
	 * one before the loop runs. Its default action would end the process;
	 * held, it is a reload once the loop runs (unblocked below). */
	sigset_t hup;
	sigemptyset(&hup);
	sigaddset(&hup, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &hup, NULL);
	if (evthread_use_pthreads() < 0 || mtd_tls_global_init() < 0) {
		MTD_ERROR("cannot initialise libevent threads / OpenSSL");
		return 1;
	}
	/* The content about to be loaded, hashed first (as SIGHUP does): a
	 * change made before the file watch starts is then still a change. */
	bool hashed = false;
	uint64_t loaded_hash = config_path ? file_hash(config_path, &hashed) : 0;
	struct mtd_cfg *cfg = load_config(config_path);
	if (!cfg)
		return 1;
	/* --log-level wins over the file; a reload applies log again. */
	apply_log_settings(cfg);
	char merr[512];
	if (mtd_metrics_init(cfg->workers, cfg, merr, sizeof(merr)) < 0) {
		fprintf(stderr, "%s: %s\n", config_path ? config_path : "<embedded default>", merr);
		mtd_cfg_free(cfg);
		return 1;
	}
	/* The inbound listeners' contexts and sockets (bound now: an address
	 * in use stops the start here). */
	struct mtd_rt_inset *in = mtd_inbound_set_build(cfg, NULL, cfg->workers, merr, sizeof(merr));
	if (!in && cfg->n_inbound) {
		fprintf(stderr, "%s: %s\n", config_path ? config_path : "<embedded default>", merr);
		mtd_cfg_free(cfg);
		mtd_metrics_fini();
		return 1;
	}
	struct mtd_control ctl;
	if (mtd_control_init(&ctl) < 0) {
		MTD_ERROR("out of memory");
		mtd_cfg_free(cfg);
		mtd_rt_inset_unref(in);
		mtd_metrics_fini();
		return 1;
	}
	ctl.config_path = config_path;
	ctl.config_hash = loaded_hash;
	char err[512];
	ctl.rt = mtd_runtime_new(&ctl, cfg, cfg->workers, err, sizeof(err));
	if (!ctl.rt) {
		fprintf(stderr, "%s: %s\n", config_path ? config_path : "<embedded default>", err);
		mtd_rt_inset_unref(in);
		mtd_control_fini(&ctl);
		mtd_metrics_fini();
		return 1;
	}
	/* The xds.tls files, refused at start as a reload refuses them
	 * (mtd_xds_prepare), rather than a maitred whose xDS services never
	 * get an endpoint. */
	if (cfg->xds != NULL && cfg->xds->tls != NULL) {
		struct ssl_ctx_st *x = mtd_tls_client_ctx_new(cfg->xds->tls, err, sizeof(err));
		if (x == NULL) {
			fprintf(stderr, "%s: xds.tls: %s\n", config_path ? config_path : "<embedded default>", err);
			mtd_rt_inset_unref(in);
			mtd_control_fini(&ctl);
			mtd_metrics_fini();
			return 1;
		}
		SSL_CTX_free(x);
	}
	mtd_runtime_set_inbound(ctl.rt, in);
	int rc = run(&ctl);
	mtd_control_fini(&ctl);
	mtd_inbound_retired_free();
	mtd_metrics_fini();
	libevent_global_shutdown();
	return rc;
}
