/* Self-registration (etcd.h: mtd_register_*): the local app's record under
 * a lease kept alive at TTL/3 (state diagram below). Control thread only. */
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
#include "discovery/record.h"
#include "etcd/etcdserverpb/rpc.pb-c.h"
#include "grpc/health/v1/health.pb-c.h"
#include "sidecar/control/etcd.h"
#include "sidecar/control/etcd-int.h"
#include "sidecar/control/gclient.h"
#include "sidecar/io/transport.h"
#include "core/clock.h"
#include "grpc/grpc.h"

/* ---- registration -------------------------------------------------------- */

/* One register entry:
 *
 *   WAIT (link not ready, or app not SERVING) --ready & serving--> GRANT
 *   GRANT --LeaseGrant ok--> PUT --Put ok--> LIVE (keepalive every TTL/3)
 *   LIVE --keepalive TTL <= 0 (lease lost)--> GRANT
 *   LIVE --app not SERVING--> REVOKE --> WAIT
 *   any --link lost--> WAIT (the link reconnects, then GRANT again)
 */
enum reg_state { REG_WAIT, REG_GRANT, REG_PUT, REG_LIVE, REG_REVOKE };

struct reg {
	struct mtd_etcd_link link;
	struct mtd_register *owner;
	const struct mtd_cfg_register *cfg; /* = &own */
	/* A copy of the config entry: the registration outlives the config it
	 * came from (a reload frees that one). */
	struct mtd_cfg_register own;
	struct mtd_cfg_etcd own_etcd;
	struct mtd_cfg_tls own_tls;
	char what[160];
	char *key;
	enum reg_state state;
	int64_t lease, ttl_s;
	int64_t start_ms;
	struct mtd_gcli_call *call; /* the unary call in flight */
	struct mtd_gcli_call *ka;   /* LeaseKeepAlive stream */
	struct event *ka_timer;
	/* when_serving: the app's health, polled over its own connection. */
	struct mtd_gcli *hc;
	struct mtd_gcli_call *hc_call;
	struct event *hc_timer;
	bool serving;
	bool hc_seen; /* a health check has answered (its first answer is logged) */
};

struct mtd_register {
	struct event_base *base;
	struct reg *regs;
	size_t n;
	/* shutdown */
	struct event *done_ev, *shutdown_timer;
	void (*done)(void *arg);
	void *done_arg;
	size_t revokes_pending;
	bool shutting_down;
	/* Reload handover (mtd_register_handover): the registrars this one
	 * replaced, owned by it until their leases are revoked; and, on such a
	 * predecessor, its heir and the timer that polls whether the heir is
	 * live. */
	struct mtd_register *retiring, *next_retiring;
	struct mtd_register *heir;
	struct event *handover_ev;
	unsigned handover_polls;
};

static void reg_advance(struct reg *r);

static void reg_reset(struct reg *r)
{
	if (r->call)
		mtd_gcli_call_cancel(r->call);
	if (r->ka)
		mtd_gcli_call_cancel(r->ka);
	r->call = NULL;
	r->ka = NULL;
	evtimer_del(r->ka_timer);
	r->state = REG_WAIT;
}

static void reg_shutdown_step(struct mtd_register *o)
{
	if (o->shutting_down && o->revokes_pending == 0 && o->done != NULL) {
		struct timeval now = {0, 0};
		evtimer_add(o->done_ev, &now);
	}
}

static void ka_send(evutil_socket_t fd, short what, void *arg)
{
	struct reg *r = arg;
	Etcdserverpb__LeaseKeepAliveRequest req = ETCDSERVERPB__LEASE_KEEP_ALIVE_REQUEST__INIT;

	if (r->state != REG_LIVE || r->ka == NULL)
		return;
	req.id = r->lease;
	if (mtd_gcli_call_send(r->ka, &req.base, false) != 0) {
		mtd_etcd__link_fail(&r->link, "cannot send LeaseKeepAlive");
		return;
	}
	/* etcd clientv3 also renews at a third of the TTL. */
	struct timeval tv = mtd_etcd__tv_ms(r->ttl_s * 1000 / 3 > 0 ? r->ttl_s * 1000 / 3 : 500);
	evtimer_add(r->ka_timer, &tv);
}

static void ka_msg(struct mtd_gcli_call *call, const uint8_t *msg, size_t len, void *arg)
{
	struct reg *r = arg;
	Etcdserverpb__LeaseKeepAliveResponse *resp = etcdserverpb__lease_keep_alive_response__unpack(NULL, len, msg);

	if (resp == NULL)
		return;
	int64_t ttl = resp->ttl;
	etcdserverpb__lease_keep_alive_response__free_unpacked(resp, NULL);
	if (ttl > 0) {
		mtd_etcd__link_ok(&r->link);
		return;
	}
	MTD_WARN("etcd %s (%s): lease %llx lost (expired or revoked): registering again", mtd_etcd__link_peer(&r->link),
	         r->what, (unsigned long long)r->lease);
	reg_reset(r);
	reg_advance(r);
}

static void ka_close(struct mtd_gcli_call *call, int status, const char *message, void *arg)
{
	struct reg *r = arg;

	r->ka = NULL;
	mtd_etcd__link_fail(&r->link, "LeaseKeepAlive ended: %s %s", mtd_grpc_status_name(status), message);
}

static const struct mtd_gcli_call_cbs ka_cbs = {ka_msg, ka_close};

static void put_msg(struct mtd_gcli_call *call, const uint8_t *msg, size_t len, void *arg) {}

static void put_close(struct mtd_gcli_call *call, int status, const char *message, void *arg)
{
	struct reg *r = arg;

	r->call = NULL;
	if (status != 0) {
		mtd_etcd__link_fail(&r->link, "Put %s: %s %s", r->key, mtd_grpc_status_name(status), message);
		return;
	}
	mtd_etcd__link_ok(&r->link);
	r->state = REG_LIVE;
	MTD_INFO("etcd %s (%s): registered %s under lease %llx (TTL %llds)", mtd_etcd__link_peer(&r->link), r->what,
	         r->key, (unsigned long long)r->lease, (long long)r->ttl_s);
	r->ka = mtd_gcli_call_start(r->link.conn, "/etcdserverpb.Lease/LeaseKeepAlive", r->link.token, &ka_cbs, r);
	if (r->ka == NULL) {
		mtd_etcd__link_fail(&r->link, "cannot start LeaseKeepAlive");
		return;
	}
	struct timeval tv = mtd_etcd__tv_ms(r->ttl_s * 1000 / 3 > 0 ? r->ttl_s * 1000 / 3 : 500);
	evtimer_add(r->ka_timer, &tv);
}

static const struct mtd_gcli_call_cbs put_cbs = {put_msg, put_close};

static void grant_msg(struct mtd_gcli_call *call, const uint8_t *msg, size_t len, void *arg)
{
	struct reg *r = arg;
	Etcdserverpb__LeaseGrantResponse *resp = etcdserverpb__lease_grant_response__unpack(NULL, len, msg);

	if (resp == NULL)
		return;
	if (resp->error == NULL || resp->error[0] == '\0') {
		r->lease = resp->id;
		r->ttl_s = resp->ttl;
	}
	etcdserverpb__lease_grant_response__free_unpacked(resp, NULL);
}

static void grant_close(struct mtd_gcli_call *call, int status, const char *message, void *arg)
{
	struct reg *r = arg;
	char value[2 * MTD_RECORD_MAX_IDENTITY + 256]; /* the identity escaped, and the rest */

	r->call = NULL;
	if (status != 0 || r->lease == 0) {
		mtd_etcd__link_fail(&r->link, "LeaseGrant: %s %s", mtd_grpc_status_name(status), message);
		return;
	}
	/* Advertising an inbound listener, the record names the
	 * identity its certificate presents (read now: a rotated certificate
	 * is named at the next registration). */
	char identity[MTD_IDENTITY_TEXT_SIZE] = "";
	enum mtd_identity_none none = MTD_IDENTITY_HAS;
	/* The typed identity (lib/identity): what FROM_REGISTRY clients
	 * compare with the certificate they are shown, the same way. */
	if (r->cfg->identity_cert &&
	    mtd_tls_file_identity(r->cfg->identity_cert, identity, sizeof(identity), &none) < 0)
		MTD_WARN("register %s: cannot read the identity of %s: the record names none", r->cfg->service,
		         r->cfg->identity_cert);
	else if (r->cfg->identity_cert && none != MTD_IDENTITY_HAS)
		MTD_WARN("register %s: %s has no identity (%s): the record names none", r->cfg->service,
		         r->cfg->identity_cert, mtd_identity_none_text(none));
	int n = mtd_record_format_json(r->cfg->address.text, r->cfg->weight, r->start_ms, identity, value,
	                               sizeof(value));
	if (n < 0 || (size_t)n >= sizeof(value)) {
		mtd_etcd__link_fail(&r->link, "cannot format the record");
		return;
	}
	Etcdserverpb__PutRequest req = ETCDSERVERPB__PUT_REQUEST__INIT;
	req.key = (ProtobufCBinaryData){strlen(r->key), (uint8_t *)r->key};
	req.value = (ProtobufCBinaryData){(size_t)n, (uint8_t *)value};
	req.lease = r->lease;
	r->state = REG_PUT;
	r->call = mtd_gcli_call_start(r->link.conn, "/etcdserverpb.KV/Put", r->link.token, &put_cbs, r);
	if (r->call == NULL || mtd_gcli_call_send(r->call, &req.base, true) != 0)
		mtd_etcd__link_fail(&r->link, "cannot start Put");
}

static const struct mtd_gcli_call_cbs grant_cbs = {grant_msg, grant_close};

static void revoke_close(struct mtd_gcli_call *call, int status, const char *message, void *arg)
{
	struct reg *r = arg;

	r->call = NULL;
	if (status == 0)
		MTD_INFO("etcd %s (%s): lease %llx revoked, %s deregistered", mtd_etcd__link_peer(&r->link), r->what,
		         (unsigned long long)r->lease, r->key);
	else
		MTD_WARN("etcd %s (%s): LeaseRevoke: %s %s (the record goes when the lease expires)",
		         mtd_etcd__link_peer(&r->link), r->what, mtd_grpc_status_name(status), message);
	r->lease = 0;
	r->state = REG_WAIT;
	if (r->owner->shutting_down) {
		r->owner->revokes_pending--;
		reg_shutdown_step(r->owner);
		return;
	}
	reg_advance(r);
}

static const struct mtd_gcli_call_cbs revoke_cbs = {put_msg, revoke_close};

static void reg_revoke(struct reg *r)
{
	Etcdserverpb__LeaseRevokeRequest req = ETCDSERVERPB__LEASE_REVOKE_REQUEST__INIT;

	reg_reset(r);
	req.id = r->lease;
	r->state = REG_REVOKE;
	r->call = mtd_gcli_call_start(r->link.conn, "/etcdserverpb.Lease/LeaseRevoke", r->link.token, &revoke_cbs, r);
	if (r->call == NULL || mtd_gcli_call_send(r->call, &req.base, true) != 0) {
		if (r->call)
			mtd_gcli_call_cancel(r->call);
		r->call = NULL;
		revoke_close(NULL, MTD_GRPC_UNAVAILABLE, "etcd not connected", r);
	}
}

/* Move towards what the state should be, given link and health. */
static void reg_advance(struct reg *r)
{
	if (r->owner->shutting_down)
		return;
	if (!r->serving) {
		if ((r->state == REG_LIVE || r->state == REG_PUT) && r->link.ready) {
			MTD_INFO("etcd (%s): the app is not SERVING: deregistering", r->what);
			reg_revoke(r);
		}
		return;
	}
	if (r->state != REG_WAIT || !r->link.ready)
		return;
	Etcdserverpb__LeaseGrantRequest req = ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
	req.ttl = (r->cfg->ttl_ms + 999) / 1000;
	r->lease = 0;
	r->state = REG_GRANT;
	r->call = mtd_gcli_call_start(r->link.conn, "/etcdserverpb.Lease/LeaseGrant", r->link.token, &grant_cbs, r);
	if (r->call == NULL || mtd_gcli_call_send(r->call, &req.base, true) != 0)
		mtd_etcd__link_fail(&r->link, "cannot start LeaseGrant");
}

static void reg_ready(struct mtd_etcd_link *l)
{
	struct reg *r = (struct reg *)l;

	r->state = REG_WAIT;
	reg_advance(r);
}

static void reg_lost(struct mtd_etcd_link *l, const char *reason)
{
	struct reg *r = (struct reg *)l;

	/* The calls died with the connection. The lease may outlive the
	 * outage; registering again on reconnect puts the record under a new
	 * lease, and the old one expires on its own. */
	r->call = NULL;
	r->ka = NULL;
	evtimer_del(r->ka_timer);
	if (r->state == REG_REVOKE && r->owner->shutting_down) {
		r->state = REG_WAIT;
		r->owner->revokes_pending--;
		reg_shutdown_step(r->owner);
	}
	r->state = REG_WAIT;
}

/* when_serving: grpc.health.v1.Health/Check on the app. */
static void hc_msg(struct mtd_gcli_call *call, const uint8_t *msg, size_t len, void *arg)
{
	struct reg *r = arg;
	Grpc__Health__V1__HealthCheckResponse *resp = grpc__health__v1__health_check_response__unpack(NULL, len, msg);
	bool serving = false;

	if (resp != NULL) {
		serving = resp->status == GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
		grpc__health__v1__health_check_response__free_unpacked(resp, NULL);
	}
	if (serving != r->serving || !r->hc_seen)
		MTD_INFO("register %s: the app at %s is %s", r->cfg->service, r->cfg->address.text,
		         serving ? "SERVING" : "not SERVING");
	r->hc_seen = true;
	r->serving = serving;
}

static void hc_close(struct mtd_gcli_call *call, int status, const char *message, void *arg)
{
	struct reg *r = arg;

	r->hc_call = NULL;
	if (status != 0) {
		if (r->serving || !r->hc_seen)
			MTD_INFO("register %s: health check of %s failed (%s %s): not SERVING", r->cfg->service,
			         r->cfg->address.text, mtd_grpc_status_name(status), message);
		r->serving = false;
		r->hc_seen = true;
	}
	reg_advance(r);
}

static const struct mtd_gcli_call_cbs hc_cbs = {hc_msg, hc_close};

static void hc_down(struct mtd_gcli *c, const char *reason, void *arg)
{
	struct reg *r = arg;

	/* The call on it already failed (hc_close); reconnect next period. */
	mtd_gcli_free(r->hc);
	r->hc = NULL;
}

static const struct mtd_gcli_cbs hc_conn_cbs = {NULL, hc_down};

static void hc_tick(evutil_socket_t fd, short what, void *arg)
{
	struct reg *r = arg;
	struct timeval tv = mtd_etcd__tv_ms(HEALTH_PERIOD_MS);

	evtimer_add(r->hc_timer, &tv);
	if (r->hc_call != NULL || r->owner->shutting_down)
		return;
	if (r->hc == NULL) {
		r->hc = mtd_gcli_new(r->owner->base, (const struct sockaddr *)&r->cfg->address.sa,
		                     r->cfg->address.salen, r->cfg->address.text, NULL, CONNECT_TIMEOUT_MS, 0,
		                     &hc_conn_cbs, r);
		if (r->hc == NULL)
			return;
	}
	Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
	r->hc_call = mtd_gcli_call_start(r->hc, "/grpc.health.v1.Health/Check", NULL, &hc_cbs, r);
	if (r->hc_call != NULL && mtd_gcli_call_send(r->hc_call, &req.base, true) != 0) {
		mtd_gcli_call_cancel(r->hc_call);
		r->hc_call = NULL;
	}
}

static void done_cb(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_register *o = arg;
	void (*done)(void *) = o->done;

	o->done = NULL;
	evtimer_del(o->shutdown_timer);
	if (done != NULL)
		done(o->done_arg);
}

static char *dup_ok(const char *s, bool *ok)
{
	char *d;

	if (s == NULL)
		return NULL;
	d = strdup(s);
	*ok &= d != NULL;
	return d;
}

static void addr_copy(struct mtd_cfg_addr *d, const struct mtd_cfg_addr *s, bool *ok)
{
	*d = *s;
	d->text = dup_ok(s->text, ok);
	d->host = dup_ok(s->host, ok);
}

static bool same_str(const char *a, const char *b)
{
	return a == b || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

static void reg_copy_free(struct reg *r)
{
	free(r->own.identity_cert);
	free(r->own.service);
	free(r->own.address.text);
	free(r->own.address.host);
	for (size_t i = 0; r->own_etcd.endpoints != NULL && i < r->own_etcd.n_endpoints; i++) {
		free(r->own_etcd.endpoints[i].text);
		free(r->own_etcd.endpoints[i].host);
	}
	free(r->own_etcd.endpoints);
	free(r->own_etcd.prefix);
	free(r->own_etcd.username);
	free(r->own_etcd.password_file);
	free(r->own_tls.ca_file);
	free(r->own_tls.server_name);
	free(r->own_tls.cert_file);
	free(r->own_tls.key_file);
}

/* Deep copy of one config entry into r->own*. false on out of memory
 * (what was copied is freed by reg_copy_free). */
static bool reg_copy(struct reg *r, const struct mtd_cfg_register *s)
{
	const struct mtd_cfg_etcd *e = s->etcd;
	bool ok = true;

	r->own = *s;
	r->own.service = dup_ok(s->service, &ok);
	r->own.identity_cert = dup_ok(s->identity_cert, &ok);
	addr_copy(&r->own.address, &s->address, &ok);
	r->own.etcd = &r->own_etcd;
	/* Field by field: nothing of the source's may be freed with the copy. */
	r->own_etcd = (struct mtd_cfg_etcd){.n_endpoints = e->n_endpoints};
	r->own_etcd.endpoints = calloc(e->n_endpoints ? e->n_endpoints : 1, sizeof(*e->endpoints));
	if (r->own_etcd.endpoints == NULL)
		return false;
	for (size_t i = 0; i < e->n_endpoints; i++)
		addr_copy(&r->own_etcd.endpoints[i], &e->endpoints[i], &ok);
	r->own_etcd.prefix = dup_ok(e->prefix, &ok);
	r->own_etcd.username = dup_ok(e->username, &ok);
	r->own_etcd.password_file = dup_ok(e->password_file, &ok);
	if (e->tls != NULL) {
		r->own_tls.ca_file = dup_ok(e->tls->ca_file, &ok);
		r->own_tls.server_name = dup_ok(e->tls->server_name, &ok);
		r->own_tls.cert_file = dup_ok(e->tls->cert_file, &ok);
		r->own_tls.key_file = dup_ok(e->tls->key_file, &ok);
		r->own_etcd.tls = &r->own_tls;
	}
	r->cfg = &r->own;
	return ok;
}

static bool same_entry(const struct mtd_cfg_register *a, const struct mtd_cfg_register *b)
{
	const struct mtd_cfg_etcd *x = a->etcd, *y = b->etcd;

	if (!same_str(a->service, b->service) || !same_str(a->address.text, b->address.text) ||
	    !same_str(a->identity_cert, b->identity_cert) ||
	    a->weight != b->weight || a->ttl_ms != b->ttl_ms || a->when_serving != b->when_serving ||
	    x->n_endpoints != y->n_endpoints || !same_str(x->prefix, y->prefix) ||
	    !same_str(x->username, y->username) || !same_str(x->password_file, y->password_file) ||
	    (x->tls == NULL) != (y->tls == NULL))
		return false;
	for (size_t i = 0; i < x->n_endpoints; i++)
		if (!same_str(x->endpoints[i].text, y->endpoints[i].text))
			return false;
	return x->tls == NULL ||
	       (same_str(x->tls->ca_file, y->tls->ca_file) && same_str(x->tls->server_name, y->tls->server_name) &&
	        same_str(x->tls->cert_file, y->tls->cert_file) && same_str(x->tls->key_file, y->tls->key_file));
}

bool mtd_register_same_config(const struct mtd_register *o, const struct mtd_cfg *cfg)
{
	size_t n = o != NULL ? o->n : 0;

	if (n != cfg->n_registers)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!same_entry(o->regs[i].cfg, &cfg->registers[i]))
			return false;
	return true;
}

static void shutdown_timeout(evutil_socket_t fd, short what, void *arg);

struct mtd_register *mtd_register_start(struct event_base *base, const struct mtd_cfg *cfg)
{
	struct mtd_register *o;

	o = calloc(1, sizeof(*o));
	if (o == NULL || (o->regs = calloc(cfg->n_registers ? cfg->n_registers : 1, sizeof(*o->regs))) == NULL ||
	    (o->done_ev = evtimer_new(base, done_cb, o)) == NULL ||
	    (o->shutdown_timer = evtimer_new(base, shutdown_timeout, o)) == NULL) {
		MTD_ERROR("register: out of memory");
		goto fail;
	}
	o->base = base;
	int64_t now = mtd_wall_ms();
	for (size_t i = 0; i < cfg->n_registers; i++) {
		struct reg *r = &o->regs[i];
		const struct mtd_cfg_register *rc = &cfg->registers[i];
		size_t kl = strlen(rc->etcd->prefix) + strlen(rc->address.text) + 1;

		o->n++;
		r->owner = o;
		if (!reg_copy(r, rc)) {
			MTD_ERROR("register %s: out of memory", rc->service);
			goto fail;
		}
		rc = r->cfg; /* from here on, the copy */
		r->start_ms = now;
		r->serving = !rc->when_serving;
		snprintf(r->what, sizeof(r->what), "register %s as %s", rc->service, rc->address.text);
		r->key = malloc(kl);
		r->ka_timer = evtimer_new(base, ka_send, r);
		r->hc_timer = evtimer_new(base, hc_tick, r);
		if (r->key == NULL || r->ka_timer == NULL || r->hc_timer == NULL ||
		    mtd_etcd__link_init(&r->link, base, rc->etcd, r->what) != 0) {
			MTD_ERROR("register %s: cannot start (out of memory or unusable etcd TLS files)", rc->service);
			goto fail;
		}
		/* The instance id is the app's address: stable across restarts,
		 * so a restarted sidecar overwrites its own record. */
		snprintf(r->key, kl, "%s%s", rc->etcd->prefix, rc->address.text);
		r->link.on_ready = reg_ready;
		r->link.on_lost = reg_lost;
	}
	for (size_t i = 0; i < o->n; i++) {
		struct reg *r = &o->regs[i];
		if (r->cfg->when_serving) {
			struct timeval now0 = {0, 0};
			evtimer_add(r->hc_timer, &now0);
		}
		mtd_etcd__link_connect(&r->link);
	}
	return o;
fail:
	mtd_register_free(o);
	return NULL;
}

static void shutdown_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_register *o = arg;

	if (o->revokes_pending != 0)
		MTD_WARN("register: %zu lease revoke%s unanswered after %d ms: draining anyway", o->revokes_pending,
		         o->revokes_pending == 1 ? "" : "s", REVOKE_LIMIT_MS);
	o->revokes_pending = 0;
	done_cb(-1, 0, o);
}

static void handover_poll(evutil_socket_t fd, short what, void *arg);

bool mtd_register_shutdown(struct mtd_register *o, void (*done)(void *arg), void *arg)
{
	size_t want = 0;

	if (o == NULL)
		return false;
	/* Predecessors still waiting for this one to be live: revoke them
	 * now too (their next poll sees the heir shutting down). */
	for (struct mtd_register *p = o->retiring; p != NULL; p = p->next_retiring)
		if (!p->shutting_down)
			event_active(p->handover_ev, EV_TIMEOUT, 0);
	o->shutting_down = true;
	o->done = done;
	o->done_arg = arg;
	for (size_t i = 0; i < o->n; i++) {
		struct reg *r = &o->regs[i];
		evtimer_del(r->hc_timer);
		want += r->lease != 0 && r->link.ready && r->state != REG_REVOKE;
	}
	if (want == 0) {
		o->done = NULL;
		return false;
	}
	/* Counted first: a revoke may end synchronously (decrementing). */
	o->revokes_pending = want;
	for (size_t i = 0; i < o->n; i++) {
		struct reg *r = &o->regs[i];
		if (r->lease != 0 && r->link.ready && r->state != REG_REVOKE)
			reg_revoke(r);
	}
	struct timeval limit = mtd_etcd__tv_ms(REVOKE_LIMIT_MS);
	evtimer_add(o->shutdown_timer, &limit);
	reg_shutdown_step(o);
	return true;
}

/* ---- reload handover ------------------------------------------------------ */

/* True when every entry of o is as registered as it can be: LIVE, or
 * (when_serving) its app has answered a health check and is not SERVING. */
static bool settled(const struct mtd_register *o)
{
	for (size_t i = 0; i < o->n; i++) {
		const struct reg *r = &o->regs[i];
		if (r->state != REG_LIVE && (r->serving || (r->cfg->when_serving && !r->hc_seen)))
			return false;
	}
	return true;
}

static void unlink_retiring(struct mtd_register *p)
{
	struct mtd_register **pp = &p->heir->retiring;
	while (*pp != p)
		pp = &(*pp)->next_retiring;
	*pp = p->next_retiring;
}

/* The predecessor's revokes ended (or timed out): it is done. Called from
 * its own done_cb, which touches nothing of it afterwards. */
static void retired(void *arg)
{
	struct mtd_register *p = arg;
	MTD_INFO("register: the previous config's leases are revoked");
	unlink_retiring(p);
	mtd_register_free(p);
}

static void handover_poll(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_register *p = arg;
	struct mtd_register *h = p->heir;
	bool live = h->n == 0 || settled(h);

	if (!live && !h->shutting_down && ++p->handover_polls < HANDOVER_LIMIT_MS / HANDOVER_POLL_MS) {
		struct timeval tv = mtd_etcd__tv_ms(HANDOVER_POLL_MS);
		evtimer_add(p->handover_ev, &tv);
		return;
	}
	if (!live && !h->shutting_down)
		MTD_WARN("register: new entries not all live after %d ms: revoking the old leases anyway",
		         HANDOVER_LIMIT_MS);
	if (!mtd_register_shutdown(p, retired, p)) {
		unlink_retiring(p);
		mtd_register_free(p);
	}
}

bool mtd_register_handover(struct mtd_register *old, struct mtd_register *heir)
{
	if (old == NULL)
		return true;
	if (old->handover_ev == NULL && (old->handover_ev = evtimer_new(old->base, handover_poll, old)) == NULL)
		return false;
	/* What old was still retiring waits for the heir now. */
	while (old->retiring != NULL) {
		struct mtd_register *p = old->retiring;
		old->retiring = p->next_retiring;
		p->heir = heir;
		p->next_retiring = heir->retiring;
		heir->retiring = p;
	}
	old->heir = heir;
	old->next_retiring = heir->retiring;
	heir->retiring = old;
	/* The first look at once: an heir without entries (register removed)
	 * lets the old leases go without waiting. */
	struct timeval now = {0, 0};
	evtimer_add(old->handover_ev, &now);
	return true;
}

void mtd_register_free(struct mtd_register *o)
{
	if (o == NULL)
		return;
	/* Predecessors not revoked yet (at exit): their leases expire with
	 * their TTL. */
	while (o->retiring != NULL) {
		struct mtd_register *p = o->retiring;
		o->retiring = p->next_retiring;
		mtd_register_free(p);
	}
	if (o->handover_ev)
		event_free(o->handover_ev);
	for (size_t i = 0; i < o->n; i++) {
		struct reg *r = &o->regs[i];
		mtd_etcd__link_fini(&r->link);
		mtd_gcli_free(r->hc);
		if (r->ka_timer)
			event_free(r->ka_timer);
		if (r->hc_timer)
			event_free(r->hc_timer);
		free(r->key);
		reg_copy_free(r);
	}
	if (o->done_ev)
		event_free(o->done_ev);
	if (o->shutdown_timer)
		event_free(o->shutdown_timer);
	free(o->regs);
	free(o);
}
