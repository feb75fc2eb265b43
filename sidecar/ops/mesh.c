/* Mesh mode's figures and the refusal log's rate limit (mesh.h). */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/addr.h"
#include "admin/admin.h"
#include "config/config.h"
#include "core/log.h"
#include "sidecar/control/runtime.h"
#include "sidecar/ops/mesh.h"

static pthread_mutex_t mesh_mu = PTHREAD_MUTEX_INITIALIZER;
/* Published with release under mesh_mu; read with acquire by the admin. */
static _Atomic(struct mtd_mesh_ident *) idents;
static unsigned n_idents[MTD_MESH_LISTENERS];
static _Atomic uint64_t handshakes[MTD_MESH_LISTENERS][2];
static _Atomic uint64_t refusals[MTD_MESH_LISTENERS][MTD_TLS_REFUSED_N];
static _Atomic uint64_t conns_refused[MTD_MESH_LISTENERS];
/* The listeners' keys by slot: written by the control thread only (which
 * also renders), so read there without a lock. */
static char listener_keys[MTD_MESH_LISTENERS][64];
static unsigned n_listeners;

unsigned mtd_mesh_listener(const char *key)
{
	for (unsigned i = 0; i < n_listeners; i++)
		if (strcmp(listener_keys[i], key) == 0)
			return i;
	if (n_listeners == MTD_MESH_LISTENERS)
		return MTD_MESH_LISTENERS - 1;
	snprintf(listener_keys[n_listeners], sizeof(listener_keys[0]), "%s", key);
	return n_listeners++;
}

/* The slot of key, or -1 (render: never makes one). */
static int slot_of(const char *key)
{
	for (unsigned i = 0; i < n_listeners; i++)
		if (strcmp(listener_keys[i], key) == 0)
			return (int)i;
	return n_listeners == MTD_MESH_LISTENERS ? MTD_MESH_LISTENERS - 1 : -1;
}

void mtd_mesh_conn_refused(unsigned listener)
{
	if (listener < MTD_MESH_LISTENERS)
		atomic_fetch_add_explicit(&conns_refused[listener], 1, memory_order_relaxed);
}

const char *mtd_mesh_verdict_name(enum mtd_in_verdict v)
{
	switch (v) {
	case MTD_IN_ALLOWED:
		return "allow";
	case MTD_IN_DENIED:
		return "deny";
	case MTD_IN_SHED:
		return "shed";
	case MTD_IN_NONE:
	case MTD_IN_N:
		break;
	}
	return "-";
}

static struct mtd_mesh_ident *find(unsigned listener, const char *identity)
{
	for (struct mtd_mesh_ident *e = atomic_load_explicit(&idents, memory_order_acquire); e; e = e->next)
		if (e->listener == listener && strcmp(e->identity, identity) == 0)
			return e;
	return NULL;
}

struct mtd_mesh_ident *mtd_mesh_identity(unsigned listener, const char *identity)
{
	if (listener >= MTD_MESH_LISTENERS)
		return NULL;
	pthread_mutex_lock(&mesh_mu);
	struct mtd_mesh_ident *e = find(listener, identity);
	if (!e && n_idents[listener] >= MTD_MESH_IDENTITIES) {
		/* Label cardinality stays bounded whoever connects. */
		identity = "other";
		e = find(listener, identity);
	}
	if (!e && (e = calloc(1, sizeof(*e))) && (e->identity = strdup(identity))) {
		e->listener = listener;
		e->next = atomic_load_explicit(&idents, memory_order_relaxed);
		if (strcmp(identity, "other") != 0)
			n_idents[listener]++;
		atomic_store_explicit(&idents, e, memory_order_release);
	} else if (e && !e->identity) {
		free(e);
		e = NULL;
	}
	pthread_mutex_unlock(&mesh_mu);
	return e;
}

void mtd_mesh_handshake(unsigned listener, bool resumed)
{
	if (listener < MTD_MESH_LISTENERS)
		atomic_fetch_add_explicit(&handshakes[listener][resumed], 1, memory_order_relaxed);
}

void mtd_mesh_refused(unsigned listener, enum mtd_tls_refusal why)
{
	if (listener < MTD_MESH_LISTENERS && why < MTD_TLS_REFUSED_N)
		atomic_fetch_add_explicit(&refusals[listener][why], 1, memory_order_relaxed);
}

/* The refusal log's gates: one per peer address seen in the last second,
 * at most GATES of them, and at most PEER_LINES lines a second over all
 * of them. A refusal that finds neither a gate (every one busy within
 * the second) nor room in the second's lines is folded into one summary
 * line a second: many source addresses (a scan, a botnet, a fleet with
 * the wrong CA) cannot flood the log, and what was not logged one by one
 * is said, with its count (maitred_inbound_handshake_failures_total has
 * every refusal). */
#define GATES      256
#define PEER_LINES 16
#define SECOND_NS  1000000000
static struct {
	char addr[48];
	struct mtd_log_gate g;
	int64_t seen_ns; /* the last refusal from addr */
} gates[GATES];
static int64_t lines_from_ns; /* the second PEER_LINES counts over */
static unsigned lines;
static struct mtd_log_gate others;

/* A summary line for refusals not logged one by one. mesh_mu held. */
static void fold(int64_t now_ns)
{
	uint64_t held = 0;
	if (mtd_log_gate_pass(&others, now_ns, SECOND_NS, &held))
		MTD_INFO("inbound: %llu handshake refusals not logged one by one (over %u peer addresses or %u lines a "
		         "second)",
		         (unsigned long long)held + 1, GATES, PEER_LINES);
}

bool mtd_mesh_refusal_log(const char *addr, int64_t now_ns, uint64_t *held)
{
	char key[48];
	const char *colon = strrchr(addr, ':');
	size_t n = colon ? (size_t)(colon - addr) : strlen(addr);
	if (n >= sizeof(key))
		n = sizeof(key) - 1;
	memcpy(key, addr, n);
	key[n] = '\0';
	pthread_mutex_lock(&mesh_mu);
	unsigned i, idle = GATES;
	for (i = 0; i < GATES; i++) {
		if (gates[i].addr[0] && strcmp(gates[i].addr, key) == 0)
			break;
		/* A gate whose address refused nothing for a second would let
		 * its next line through anyway: free to take. */
		if (idle == GATES && (!gates[i].addr[0] || now_ns - gates[i].seen_ns >= SECOND_NS))
			idle = i;
	}
	if (i == GATES) {
		if (idle == GATES) { /* every gate busy this second */
			fold(now_ns);
			pthread_mutex_unlock(&mesh_mu);
			return false;
		}
		i = idle;
		memcpy(gates[i].addr, key, n + 1);
		gates[i].g = (struct mtd_log_gate){0};
	}
	gates[i].seen_ns = now_ns;
	if (now_ns - lines_from_ns >= SECOND_NS) {
		lines_from_ns = now_ns;
		lines = 0;
	}
	bool pass = false;
	if (lines < PEER_LINES) {
		pass = mtd_log_gate_pass(&gates[i].g, now_ns, SECOND_NS, held);
		lines += pass;
	} else {
		fold(now_ns);
	}
	pthread_mutex_unlock(&mesh_mu);
	return pass;
}

/* Control thread only (certwatch.c writes, the admin reads): a list. */
static struct tls_reloads {
	char *files;
	uint64_t n[3]; /* ok, mismatch, error */
	struct tls_reloads *next;
} * tls_reloads;
static const char *const reload_results[3] = {"ok", "mismatch", "error"};

void mtd_mesh_tls_reload(const char *files, const char *result)
{
	struct tls_reloads *r = tls_reloads;
	while (r && strcmp(r->files, files) != 0)
		r = r->next;
	if (!r) {
		r = calloc(1, sizeof(*r));
		if (!r || !(r->files = strdup(files))) {
			free(r);
			return;
		}
		r->next = tls_reloads;
		tls_reloads = r;
	}
	for (int i = 0; i < 3; i++)
		if (strcmp(result, reload_results[i]) == 0)
			r->n[i]++;
}

static void render_tls_reloads(struct mtd_abuf *b)
{
	static const char *const k[] = {"files", "result"};
	mtd_prom_family(b, "maitred_tls_reloads_total", "counter",
	                "Certificate files read again after they changed (or on SIGHUP), by files and result (ok; "
	                "mismatch: a certificate without its key, ignored until they match; error).");
	for (const struct tls_reloads *r = tls_reloads; r; r = r->next)
		for (int i = 0; i < 3; i++) {
			const char *v[] = {r->files, reload_results[i]};
			mtd_prom_sample_u64(b, "maitred_tls_reloads_total", NULL, k, v, 2, r->n[i]);
		}
}

void mtd_mesh_render(struct mtd_abuf *b, const struct mtd_cfg *cfg)
{
	if (tls_reloads)
		render_tls_reloads(b);
	if (cfg->n_inbound == 0)
		return;
	/* The listeners of cfg by key, and each one's slot. */
	char keys[MTD_CFG_INBOUND_MAX][64];
	int slots[MTD_CFG_INBOUND_MAX];
	size_t n = cfg->n_inbound < MTD_CFG_INBOUND_MAX ? cfg->n_inbound : MTD_CFG_INBOUND_MAX;
	for (size_t i = 0; i < n; i++) {
		mtd_addr_text(&cfg->inbound[i].listen.sa.sa, keys[i], sizeof(keys[i]));
		slots[i] = slot_of(keys[i]);
	}
	static const char *const kc[] = {"listener", "identity", "decision"};
	mtd_prom_family(b, "maitred_inbound_calls_total", "counter",
	                "Inbound calls by listener, caller identity (\"\" = no certificate; \"other\" past 64 per "
	                "listener) and authorization decision (allow, deny, shed: max_concurrent_calls).");
	for (struct mtd_mesh_ident *e = atomic_load_explicit(&idents, memory_order_acquire); e; e = e->next) {
		for (size_t i = 0; i < n; i++) {
			if (slots[i] != (int)e->listener)
				continue;
			for (int v = MTD_IN_ALLOWED; v < MTD_IN_N; v++) {
				const char *vals[] = {keys[i], e->identity, mtd_mesh_verdict_name((enum mtd_in_verdict)v)};
				mtd_prom_sample_u64(b, "maitred_inbound_calls_total", NULL, kc, vals, 3,
				                    atomic_load_explicit(&e->calls[v], memory_order_relaxed));
			}
		}
	}
	static const char *const kh[] = {"listener", "session"};
	mtd_prom_family(b, "maitred_inbound_handshakes_total", "counter",
	                "Inbound TLS handshakes completed, by listener and session (new, or resumed by a ticket).");
	for (size_t i = 0; i < n; i++)
		for (int r = 0; r < 2 && slots[i] >= 0; r++) {
			const char *vals[] = {keys[i], r ? "resumed" : "new"};
			mtd_prom_sample_u64(b, "maitred_inbound_handshakes_total", NULL, kh, vals, 2,
			                    atomic_load_explicit(&handshakes[slots[i]][r], memory_order_relaxed));
		}
	static const char *const kr[] = {"listener", "reason"};
	mtd_prom_family(b, "maitred_inbound_handshake_failures_total", "counter",
	                "Inbound connections refused before HTTP/2, by listener and reason (not_tls, "
	                "no_certificate, bad_certificate, alpn, protocol, timeout, other).");
	for (size_t i = 0; i < n; i++)
		for (int r = 0; r < MTD_TLS_REFUSED_N && slots[i] >= 0; r++) {
			const char *vals[] = {keys[i], mtd_tls_refusal_name((enum mtd_tls_refusal)r)};
			mtd_prom_sample_u64(b, "maitred_inbound_handshake_failures_total", NULL, kr, vals, 2,
			                    atomic_load_explicit(&refusals[slots[i]][r], memory_order_relaxed));
		}
	static const char *const kl[] = {"listener"};
	mtd_prom_family(b, "maitred_inbound_connections_refused_total", "counter",
	                "Inbound connections closed at accept: the listener's max_connections open, or 8 TLS "
	                "handshakes under way from the same address.");
	for (size_t i = 0; i < n; i++)
		if (slots[i] >= 0) {
			const char *vals[] = {keys[i]};
			mtd_prom_sample_u64(b, "maitred_inbound_connections_refused_total", NULL, kl, vals, 1,
			                    atomic_load_explicit(&conns_refused[slots[i]], memory_order_relaxed));
		}
}
