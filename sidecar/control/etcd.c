/* etcd v3 client (etcd-int.h): the link to an etcd cluster that each etcd
 * user on the control thread owns one of (a registration, etcd_register.c;
 * the discovery watcher of a service's prefix is to follow).
 *
 * A link holds at most one connection, to cluster endpoint `cur`:
 *
 *   IDLE --start--> CONNECTING --TCP up (+ Authenticate)--> READY
 *     ^                 |                                    |
 *     +--backoff timer--+---- connection or call failed -----+
 *        (250 ms doubling to 5 s; next endpoint each time)
 *
 * READY hands the connection to the owner (on_ready); the owner's first
 * successful answer ends an outage (mtd_etcd__link_ok). The first failure
 * of an outage is logged as a warning, the rest of it at debug level, its
 * end at info level. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "core/log.h"
#include "etcd/etcdserverpb/rpc.pb-c.h"
#include "sidecar/control/etcd.h"
#include "sidecar/control/etcd-int.h"
#include "sidecar/control/gclient.h"
#include "grpc/grpc.h"
#include "sidecar/io/transport.h"

struct timeval mtd_etcd__tv_ms(int64_t ms)
{
	return (struct timeval){(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
}

/* ---- link ---------------------------------------------------------------- */

const char *mtd_etcd__link_peer(const struct mtd_etcd_link *l)
{
	return l->cfg->endpoints[l->cur].text;
}

void mtd_etcd__link_fail(struct mtd_etcd_link *l, const char *fmt, ...)
{
	char reason[300];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	if (l->conn == NULL && !l->ready && evtimer_pending(l->retry, NULL))
		return; /* already failed; retry scheduled */
	char peer[80];
	snprintf(peer, sizeof(peer), "%s", mtd_etcd__link_peer(l));
	mtd_gcli_free(l->conn);
	l->conn = NULL;
	l->auth = NULL;
	l->ready = false;
	if (!l->in_outage) {
		l->in_outage = true;
		MTD_WARN("etcd %s (%s): %s; retrying (other cluster endpoints too)", peer, l->what, reason);
	} else {
		MTD_DEBUG("etcd %s (%s): %s", peer, l->what, reason);
	}
	l->cur = (l->cur + 1) % l->cfg->n_endpoints;
	struct timeval tv = mtd_etcd__tv_ms(l->backoff_ms);
	l->backoff_ms = l->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : l->backoff_ms * 2;
	evtimer_add(l->retry, &tv);
	char full[400];
	snprintf(full, sizeof(full), "etcd %s unreachable: %s", peer, reason);
	l->on_lost(l, full);
}

/* The owner got a good answer: the outage (if any) is over. */
void mtd_etcd__link_ok(struct mtd_etcd_link *l)
{
	l->backoff_ms = BACKOFF_MIN_MS;
	if (l->in_outage && l->ever_ok)
		MTD_INFO("etcd %s (%s): reachable again", mtd_etcd__link_peer(l), l->what);
	l->in_outage = false;
	l->ever_ok = true;
}

static void on_conn_down(struct mtd_gcli *c, const char *reason, void *arg)
{
	mtd_etcd__link_fail(arg, "%s", reason);
}

static void auth_msg(struct mtd_gcli_call *call, const uint8_t *msg, size_t len, void *arg)
{
	struct mtd_etcd_link *l = arg;
	Etcdserverpb__AuthenticateResponse *r = etcdserverpb__authenticate_response__unpack(NULL, len, msg);

	if (r != NULL && r->token != NULL && r->token[0] != '\0') {
		free(l->token);
		l->token = strdup(r->token);
	}
	if (r != NULL)
		etcdserverpb__authenticate_response__free_unpacked(r, NULL);
}

static void auth_close(struct mtd_gcli_call *call, int status, const char *message, void *arg)
{
	struct mtd_etcd_link *l = arg;

	l->auth = NULL;
	if (status != 0 || l->token == NULL) {
		mtd_etcd__link_fail(l, "authentication as \"%s\" failed: %s %s", l->cfg->username,
		                    mtd_grpc_status_name(status), message);
		return;
	}
	l->ready = true;
	l->on_ready(l);
}

static const struct mtd_gcli_call_cbs auth_cbs = {auth_msg, auth_close};

static int read_password(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = read(fd, buf, size - 1);
	close(fd);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	buf[strcspn(buf, "\r\n")] = '\0';
	return 0;
}

static void on_conn_up(struct mtd_gcli *c, void *arg)
{
	struct mtd_etcd_link *l = arg;

	if (l->cfg->username == NULL) {
		l->ready = true;
		l->on_ready(l);
		return;
	}
	char pw[1024];
	int rc = read_password(l->cfg->password_file, pw, sizeof(pw));
	if (rc < 0) {
		mtd_etcd__link_fail(l, "cannot read password_file %s: %s", l->cfg->password_file, strerror(-rc));
		return;
	}
	Etcdserverpb__AuthenticateRequest req = ETCDSERVERPB__AUTHENTICATE_REQUEST__INIT;
	req.name = l->cfg->username;
	req.password = pw;
	free(l->token);
	l->token = NULL;
	l->auth = mtd_gcli_call_start(c, "/etcdserverpb.Auth/Authenticate", NULL, &auth_cbs, l);
	if (l->auth == NULL || mtd_gcli_call_send(l->auth, &req.base, true) != 0)
		mtd_etcd__link_fail(l, "cannot start Authenticate (out of memory)");
	explicit_bzero(pw, sizeof(pw));
}

static const struct mtd_gcli_cbs link_cbs = {on_conn_up, on_conn_down};

void mtd_etcd__link_connect(struct mtd_etcd_link *l)
{
	const struct mtd_cfg_addr *a = &l->cfg->endpoints[l->cur];

	struct ssl_st *ssl = NULL;

	if (l->ssl_ctx != NULL) {
		const char *name = l->cfg->tls->server_name ? l->cfg->tls->server_name : a->host;
		ssl = mtd_tls_client_ssl_new(l->ssl_ctx, name);
		if (ssl == NULL) {
			mtd_etcd__link_fail(l, "TLS: out of memory");
			return;
		}
	}
	l->conn = mtd_gcli_new(l->base, (const struct sockaddr *)&a->sa, a->salen, a->text, ssl, CONNECT_TIMEOUT_MS,
	                       KEEPALIVE_MS, &link_cbs, l);
	if (l->conn == NULL)
		mtd_etcd__link_fail(l, "cannot create a connection: %s", strerror(errno));
}

static void retry_cb(evutil_socket_t fd, short what, void *arg)
{
	mtd_etcd__link_connect(arg);
}

int mtd_etcd__link_init(struct mtd_etcd_link *l, struct event_base *base, const struct mtd_cfg_etcd *cfg,
                        const char *what)
{
	l->base = base;
	l->cfg = cfg;
	l->what = what;
	l->backoff_ms = BACKOFF_MIN_MS;
	l->retry = evtimer_new(base, retry_cb, l);
	if (l->retry == NULL)
		return -ENOMEM;
	if (cfg->tls != NULL) {
		char why[256];
		/* The same context as a service's upstreams: ALPN h2, the CA,
		 * an optional client certificate (etcd --client-cert-auth). */
		l->ssl_ctx = mtd_tls_client_ctx_new(cfg->tls, why, sizeof(why));
		if (l->ssl_ctx == NULL) {
			MTD_ERROR("etcd (%s): TLS: %s", what, why);
			return -EINVAL;
		}
	}
	return 0;
}

void mtd_etcd__link_fini(struct mtd_etcd_link *l)
{
	mtd_gcli_free(l->conn);
	l->conn = NULL;
	if (l->retry)
		event_free(l->retry);
	l->retry = NULL;
	free(l->token);
	l->token = NULL;
	if (l->ssl_ctx)
		mtd_tls_ctx_free(l->ssl_ctx);
	l->ssl_ctx = NULL;
}

/* [key, key + 1): every key under a prefix (etcd's range_end rule). buf
 * holds strlen(prefix) + 1 bytes. */
ProtobufCBinaryData mtd_etcd__prefix_end(const char *prefix, uint8_t *buf)
{
	size_t n = strlen(prefix);

	memcpy(buf, prefix, n);
	while (n > 0) {
		if (buf[n - 1] < 0xff) {
			buf[n - 1]++;
			return (ProtobufCBinaryData){n, buf};
		}
		n--;
	}
	/* All 0xff (or empty): "\0" = every key >= prefix. */
	buf[0] = 0;
	return (ProtobufCBinaryData){1, buf};
}
