/* The etcd endpoint source (etcd.h: mtd_etcd_source_ops): Range the
 * service's prefix, then Watch from the next revision (state diagram in
 * etcd.c). Control thread only. */
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
#include "sidecar/control/runtime.h"
#include "core/clock.h"
#include "grpc/grpc.h"
#include "sidecar/ops/metrics.h"

/* ---- watcher ----------------------------------------------------------- */

struct entry {
	char *key;
	int64_t mod_rev; /* of the value last looked at */
	bool ok;         /* rec holds a valid record (maybe an older value's) */
	struct mtd_record rec;
};

struct watcher {
	struct mtd_etcd_link link;
	struct mtd_control *ctl;
	size_t service;
	const struct mtd_cfg_service *cfg;
	char what[160];
	struct mtd_gcli_call *range, *watch;
	int64_t rev; /* last revision seen; 0 = never listed */
	uint64_t cluster_id; /* of the cluster that gave rev (0: not known) */
	uint64_t raft_term;  /* its raft term then (0: not known) */
	bool listed;
	struct entry *tab; /* sorted by key */
	size_t n, cap;
	struct event *push_ev;  /* the deferred push (end of this turn) */
	size_t pushed;          /* endpoints in the set last handed over */
	struct mtd_mx_disc *mx; /* the admin's figures (metrics.h), or NULL */
	bool pushed_once;
	struct mtd_log_gate refusal_log; /* a refused record's line: at most one a second */
	uint8_t *range_end_buf;
	ProtobufCBinaryData range_end; /* prefix + 1 */
};

static struct entry *find(struct watcher *w, const char *key, size_t *pos)
{
	size_t lo = 0, hi = w->n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(w->tab[mid].key, key);

		if (c == 0) {
			*pos = mid;
			return &w->tab[mid];
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*pos = lo;
	return NULL;
}

static void entry_clear(struct entry *e)
{
	free(e->key);
	mtd_record_clear(&e->rec);
}

/* Look at a key's new value. Returns true when the endpoint set changed. */
static bool entry_update(struct watcher *w, struct entry *e, const ProtobufCBinaryData *value, int64_t mod_rev)
{
	struct mtd_record rec = {0};
	char why[300];

	if (e->mod_rev == mod_rev && mod_rev != 0)
		return false; /* seen (and logged, if bad) already */
	e->mod_rev = mod_rev;
	int rc = mtd_record_parse(value->data, value->len, mtd_wall_ms(), &rec, why, sizeof(why));
	if (rc != 0) {
		/* One bad record costs only itself: logged once (per key and
		 * revision) and skipped. */
		MTD_WARN("etcd (%s): key %s (revision %lld): bad record skipped: %s%s", w->what, e->key,
		         (long long)mod_rev, why, e->ok ? " (its last good value stays)" : "");
		return false;
	}
	const char *refused = mtd_runtime_identity_refused(w->cfg->tls, rec.identity);
	if (refused) {
		/* The identity to check comes from the record itself: one that
		 * is missing, untyped or not allowed here, and the endpoint is
		 * never used (it never enters the set). */
		if (w->mx)
			w->mx->refused++;
		uint64_t held;
		if (mtd_log_gate_pass(&w->refusal_log, mtd_now_ns(), 1000000000, &held))
			MTD_WARN("etcd (%s): key %s (revision %lld): record refused: %s (FROM_REGISTRY)%s (%llu more "
			         "refusals since the last line)",
			         w->what, e->key, (long long)mod_rev, refused,
			         e->ok ? " (its last good value stays)" : "", (unsigned long long)held);
		mtd_record_clear(&rec);
		return false;
	}
	if (e->ok) {
		bool same = strcmp(e->rec.address, rec.address) == 0 && e->rec.weight == rec.weight &&
		            strcmp(e->rec.zone, rec.zone) == 0 && e->rec.start_ms == rec.start_ms &&
		            strcmp(e->rec.identity, rec.identity) == 0 && e->rec.n_metadata == rec.n_metadata;
		for (size_t i = 0; same && i < rec.n_metadata; i++)
			same = strcmp(e->rec.metadata[i].key, rec.metadata[i].key) == 0 &&
			       strcmp(e->rec.metadata[i].value, rec.metadata[i].value) == 0;
		mtd_record_clear(&e->rec);
		e->rec = rec;
		return !same;
	}
	e->rec = rec;
	e->ok = true;
	return true;
}

static bool tab_put(struct watcher *w, const ProtobufCBinaryData *key, const ProtobufCBinaryData *value,
                    int64_t mod_rev)
{
	char *k = strndup((const char *)key->data, key->len);
	size_t pos;
	struct entry *e;

	if (k == NULL)
		return false;
	e = find(w, k, &pos);
	if (e != NULL) {
		free(k);
		return entry_update(w, e, value, mod_rev);
	}
	if (w->n == w->cap) {
		size_t cap = w->cap ? w->cap * 2 : 16;
		struct entry *t = realloc(w->tab, cap * sizeof(*t));
		if (t == NULL) {
			MTD_ERROR("etcd (%s): out of memory: key %s skipped", w->what, k);
			free(k);
			return false;
		}
		w->tab = t;
		w->cap = cap;
	}
	memmove(&w->tab[pos + 1], &w->tab[pos], (w->n - pos) * sizeof(*w->tab));
	w->n++;
	e = &w->tab[pos];
	*e = (struct entry){.key = k};
	/* A new key with a bad value stays in the table (ok = false), so it is
	 * logged once, not at every list. */
	return entry_update(w, e, value, mod_rev);
}

static bool tab_del(struct watcher *w, const ProtobufCBinaryData *key)
{
	char *k = strndup((const char *)key->data, key->len);
	size_t pos;
	struct entry *e;
	bool changed = false;

	if (k == NULL)
		return false;
	e = find(w, k, &pos);
	if (e != NULL) {
		changed = e->ok;
		entry_clear(e);
		memmove(&w->tab[pos], &w->tab[pos + 1], (w->n - pos - 1) * sizeof(*w->tab));
		w->n--;
	}
	free(k);
	return changed;
}

/* Hand the valid records to the runtime as the service's endpoint set. */
static void push_now(struct watcher *w)
{
	size_t n = 0, n_meta = 0;

	for (size_t i = 0; i < w->n; i++)
		if (w->tab[i].ok) {
			n++;
			n_meta += w->tab[i].rec.n_metadata;
		}
	struct mtd_disc_endpoint *eps = calloc(n ? n : 1, sizeof(*eps));
	struct mtd_disc_meta *meta = calloc(n_meta ? n_meta : 1, sizeof(*meta));
	if (eps == NULL || meta == NULL) {
		MTD_ERROR("etcd (%s): out of memory: endpoint set not updated", w->what);
		goto out;
	}
	size_t k = 0, m = 0;
	for (size_t i = 0; i < w->n; i++) {
		const struct entry *e = &w->tab[i];
		if (!e->ok)
			continue;
		eps[k] = (struct mtd_disc_endpoint){
		        .key = e->key,
		        .address = e->rec.address,
		        .sa = e->rec.sa,
		        .salen = e->rec.salen,
		        .weight = e->rec.weight,
		        .zone = e->rec.zone,
		        .metadata = &meta[m],
		        .n_metadata = e->rec.n_metadata,
		        .start_ms = e->rec.start_ms,
		        .identity = e->rec.identity,
		};
		for (size_t j = 0; j < e->rec.n_metadata; j++)
			meta[m++] = (struct mtd_disc_meta){e->rec.metadata[j].key, e->rec.metadata[j].value};
		k++;
	}
	if (n == 0) {
		char why[300];
		snprintf(why, sizeof(why), "etcd: no valid endpoint record under %s", w->link.cfg->prefix);
		mtd_control_set_unavailable(w->ctl, w->service, why);
	}
	if (mtd_control_set_endpoints(w->ctl, w->service, eps, n) == 0) {
		/* Info when the count changes (and the first time), debug for
		 * every set. */
		if (n != w->pushed || !w->pushed_once)
			MTD_INFO("etcd (%s): %zu endpoint%s (revision %lld)", w->what, n, n == 1 ? "" : "s",
			         (long long)w->rev);
		else
			MTD_DEBUG("etcd (%s): %zu endpoint%s (revision %lld)", w->what, n, n == 1 ? "" : "s",
			          (long long)w->rev);
		w->pushed = n;
		w->pushed_once = true;
		if (w->mx)
			w->mx->endpoints = n;
	}
out:
	free(eps);
	free(meta);
}

/* A change builds a whole new snapshot (O(endpoints)); the watch
 * responses one read brings are many events. Hand the set over once, at
 * the end of this event-loop turn. */
static void push_cb(evutil_socket_t fd, short what, void *arg)
{
	push_now(arg);
}

static void push(struct watcher *w)
{
	struct timeval now = {0, 0};

	if (!evtimer_pending(w->push_ev, NULL))
		evtimer_add(w->push_ev, &now);
}

static void start_watch(struct watcher *w);
static void start_range(struct watcher *w);

static void range_msg(struct mtd_gcli_call *call, const uint8_t *msg, size_t len, void *arg)
{
	struct watcher *w = arg;
	Etcdserverpb__RangeResponse *r = etcdserverpb__range_response__unpack(NULL, len, msg);

	if (r == NULL) {
		MTD_WARN("etcd (%s): malformed RangeResponse (%zu bytes)", w->what, len);
		return;
	}
	/* A list replaces the table: keys it lacks are gone. Entries whose
	 * value did not change (same mod_revision) are kept as they are, so a
	 * bad record is not logged again after a reconnect. */
	bool changed = false;
	size_t updates = 0; /* record changes, for the admin */
	bool *seen = calloc(w->n ? w->n : 1, sizeof(*seen));
	size_t n_before = w->n;
	if (seen == NULL) {
		etcdserverpb__range_response__free_unpacked(r, NULL);
		mtd_gcli_call_cancel(call);
		w->range = NULL;
		mtd_etcd__link_fail(&w->link, "out of memory");
		return;
	}
	for (size_t i = 0; i < r->n_kvs; i++) {
		const Mvccpb__KeyValue *kv = r->kvs[i];
		char *k = strndup((const char *)kv->key.data, kv->key.len);
		size_t pos;
		if (k == NULL)
			continue;
		if (find(w, k, &pos) != NULL && pos < n_before)
			seen[pos] = true;
		free(k);
	}
	/* Drop what the list lacks (back to front keeps indexes valid). */
	for (size_t i = n_before; i-- > 0;) {
		if (seen[i])
			continue;
		updates += w->tab[i].ok;
		entry_clear(&w->tab[i]);
		memmove(&w->tab[i], &w->tab[i + 1], (w->n - i - 1) * sizeof(*w->tab));
		w->n--;
	}
	free(seen);
	for (size_t i = 0; i < r->n_kvs; i++)
		if (tab_put(w, &r->kvs[i]->key, &r->kvs[i]->value, r->kvs[i]->mod_revision))
			updates++;
	changed |= updates > 0;
	if (w->mx) {
		w->mx->updates += updates;
		w->mx->last_sync_ms = mtd_wall_ms();
		w->mx->connected = true;
	}
	if (r->header != NULL) {
		w->rev = r->header->revision;
		w->cluster_id = r->header->cluster_id;
		w->raft_term = r->header->raft_term;
	}
	bool first = !w->listed;
	w->listed = true;
	etcdserverpb__range_response__free_unpacked(r, NULL);
	if (changed || first)
		push(w);
}

static void range_close(struct mtd_gcli_call *call, int status, const char *message, void *arg)
{
	struct watcher *w = arg;

	w->range = NULL;
	if (status != 0 || !w->listed) {
		mtd_etcd__link_fail(&w->link, "Range %s: %s %s", w->link.cfg->prefix, mtd_grpc_status_name(status),
		                    message);
		return;
	}
	mtd_etcd__link_ok(&w->link);
	start_watch(w);
}

static const struct mtd_gcli_call_cbs range_cbs = {range_msg, range_close};

static void start_range(struct watcher *w)
{
	Etcdserverpb__RangeRequest req = ETCDSERVERPB__RANGE_REQUEST__INIT;

	w->listed = false;
	req.key = (ProtobufCBinaryData){strlen(w->link.cfg->prefix), (uint8_t *)w->link.cfg->prefix};
	req.range_end = w->range_end;
	w->range = mtd_gcli_call_start(w->link.conn, "/etcdserverpb.KV/Range", w->link.token, &range_cbs, w);
	if (w->range == NULL || mtd_gcli_call_send(w->range, &req.base, true) != 0)
		mtd_etcd__link_fail(&w->link, "cannot start Range");
}

static void watch_msg(struct mtd_gcli_call *call, const uint8_t *msg, size_t len, void *arg)
{
	struct watcher *w = arg;
	Etcdserverpb__WatchResponse *r = etcdserverpb__watch_response__unpack(NULL, len, msg);
	bool changed = false;

	if (r == NULL) {
		MTD_WARN("etcd (%s): malformed WatchResponse (%zu bytes)", w->what, len);
		return;
	}
	if (r->compact_revision != 0) {
		/* etcd: the revision asked for is compacted; the history between
		 * is lost, so the only way back to a true set is a new list. */
		MTD_WARN("etcd (%s): revision %lld is compacted (oldest kept: %lld): listing again", w->what,
		         (long long)(w->rev + 1), (long long)r->compact_revision);
		etcdserverpb__watch_response__free_unpacked(r, NULL);
		mtd_gcli_call_cancel(call);
		w->watch = NULL;
		start_range(w);
		return;
	}
	if (r->canceled) {
		char why[300];
		snprintf(why, sizeof(why), "watch canceled by the server: %s",
		         r->cancel_reason && r->cancel_reason[0] ? r->cancel_reason : "(no reason)");
		etcdserverpb__watch_response__free_unpacked(r, NULL);
		mtd_gcli_call_cancel(call);
		w->watch = NULL;
		mtd_etcd__link_fail(&w->link, "%s", why);
		return;
	}
	if (r->created && r->header != NULL &&
	    (r->header->revision < w->rev ||
	     (w->cluster_id && r->header->cluster_id && r->header->cluster_id != w->cluster_id) ||
	     (w->raft_term && r->header->raft_term && r->header->raft_term < w->raft_term))) {
		/* The store's revision never goes back, nor does the raft term,
		 * nor does a cluster change its id: this is another store
		 * (rebuilt empty, restored from an older snapshot; a member
		 * rebuilt with the same flags keeps the cluster id, and its
		 * revision may have passed ours by the time we reach it).
		 * Watching from our revision would show nothing of what it
		 * holds below it, the old set serving meanwhile: list it
		 * afresh. */
		MTD_WARN("etcd (%s): the cluster is not the one listed (revision %lld after %lld, raft term %llu after "
		         "%llu, cluster id %llx after %llx): listing again",
		         w->what, (long long)r->header->revision, (long long)w->rev,
		         (unsigned long long)r->header->raft_term, (unsigned long long)w->raft_term,
		         (unsigned long long)r->header->cluster_id, (unsigned long long)w->cluster_id);
		etcdserverpb__watch_response__free_unpacked(r, NULL);
		mtd_gcli_call_cancel(call);
		w->watch = NULL;
		w->rev = 0;
		/* Its revisions are not ours: a key's mod_revision there may
		 * equal the one we read of another value here. */
		for (size_t i = 0; i < w->n; i++)
			w->tab[i].mod_rev = 0;
		start_range(w);
		return;
	}
	if (r->created)
		mtd_etcd__link_ok(&w->link);
	size_t updates = 0;
	for (size_t i = 0; i < r->n_events; i++) {
		const Mvccpb__Event *ev = r->events[i];
		if (ev->kv == NULL)
			continue;
		bool c = ev->type == MVCCPB__EVENT__EVENT_TYPE__DELETE
		                 ? tab_del(w, &ev->kv->key)
		                 : tab_put(w, &ev->kv->key, &ev->kv->value, ev->kv->mod_revision);
		changed |= c;
		updates += c;
		if (ev->kv->mod_revision > w->rev)
			w->rev = ev->kv->mod_revision;
	}
	/* A fragment's header revision may run ahead of the events still to
	 * come; only a complete response moves the resume point to it. */
	if (r->header != NULL && !r->fragment && r->header->revision > w->rev)
		w->rev = r->header->revision;
	etcdserverpb__watch_response__free_unpacked(r, NULL);
	if (w->mx) {
		/* Progress notifications count as a sync: the set is known
		 * current up to their revision. */
		w->mx->updates += updates;
		w->mx->last_sync_ms = mtd_wall_ms();
		w->mx->connected = true;
	}
	if (changed)
		push(w);
}

static void watch_close(struct mtd_gcli_call *call, int status, const char *message, void *arg)
{
	struct watcher *w = arg;

	w->watch = NULL;
	mtd_etcd__link_fail(&w->link, "watch ended: %s %s", mtd_grpc_status_name(status), message);
}

static const struct mtd_gcli_call_cbs watch_cbs = {watch_msg, watch_close};

static void start_watch(struct watcher *w)
{
	Etcdserverpb__WatchRequest req = ETCDSERVERPB__WATCH_REQUEST__INIT;
	Etcdserverpb__WatchCreateRequest cr = ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;

	cr.key = (ProtobufCBinaryData){strlen(w->link.cfg->prefix), (uint8_t *)w->link.cfg->prefix};
	cr.range_end = w->range_end;
	cr.start_revision = w->rev + 1;
	cr.progress_notify = 1;
	req.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
	req.create_request = &cr;
	w->watch = mtd_gcli_call_start(w->link.conn, "/etcdserverpb.Watch/Watch", w->link.token, &watch_cbs, w);
	if (w->watch == NULL || mtd_gcli_call_send(w->watch, &req.base, false) != 0)
		mtd_etcd__link_fail(&w->link, "cannot start Watch");
}

static void watcher_ready(struct mtd_etcd_link *l)
{
	struct watcher *w = (struct watcher *)l;

	/* Resume from the last revision seen; list only the first time (and
	 * after a compaction, which watch_msg handles). */
	if (w->rev > 0 && w->listed)
		start_watch(w);
	else
		start_range(w);
}

static void watcher_lost(struct mtd_etcd_link *l, const char *reason)
{
	struct watcher *w = (struct watcher *)l;

	/* The calls died with the connection (their on_close ran, or the
	 * connection was freed with them). */
	w->range = NULL;
	w->watch = NULL;
	if (w->mx)
		w->mx->connected = false;
	if (!w->listed || w->pushed == 0) {
		/* Until the first list, the service's calls fail UNAVAILABLE
		 * saying why (etcd unreachable, ...) rather than "no endpoints". */
		mtd_control_set_unavailable(w->ctl, w->service, reason);
	}
	/* Otherwise the last known set stays in force (logged once by the
	 * link). */
}

static int etcd_start(struct mtd_control *ctl, size_t service, const struct mtd_cfg_service *cfg, void **state)
{
	struct watcher *w = calloc(1, sizeof(*w));

	if (w == NULL)
		return -ENOMEM;
	w->ctl = ctl;
	w->service = service;
	w->cfg = cfg;
	w->range_end_buf = malloc(strlen(cfg->local->etcd->prefix) + 1);
	if (w->range_end_buf == NULL) {
		free(w);
		return -ENOMEM;
	}
	w->range_end = mtd_etcd__prefix_end(cfg->local->etcd->prefix, w->range_end_buf);
	snprintf(w->what, sizeof(w->what), "service %s, prefix %s", cfg->local->name, cfg->local->etcd->prefix);
	int rc = mtd_etcd__link_init(&w->link, mtd_control_base(ctl), cfg->local->etcd, w->what);
	if (rc != 0) {
		if (rc == -EINVAL) /* the TLS files (logged) */
			mtd_control_set_unavailable(ctl, service, "etcd: the discovery.etcd.tls files are unusable");
		mtd_etcd__link_fini(&w->link);
		free(w->range_end_buf);
		free(w);
		return rc;
	}
	w->push_ev = evtimer_new(mtd_control_base(ctl), push_cb, w);
	if (w->push_ev == NULL) {
		mtd_etcd__link_fini(&w->link);
		free(w->range_end_buf);
		free(w);
		return -ENOMEM;
	}
	w->link.on_ready = watcher_ready;
	w->link.on_lost = watcher_lost;
	w->mx = mtd_metrics_disc(cfg->local->name, "etcd");
	if (w->mx)
		w->mx->connected = false;
	if (cfg->tls && cfg->tls->server_identity_registry && cfg->tls->n_allowed_identities == 0)
		MTD_WARN("%s: tls.server_identity FROM_REGISTRY without tls.allowed_identities: any identity a "
		         "record under the prefix names is trusted (write access to it equals impersonation)",
		         w->what);
	char why[300];
	mtd_control_set_waiting(ctl, service, mtd_runtime_waiting(cfg, why, sizeof(why)));
	mtd_etcd__link_connect(&w->link);
	*state = w;
	return 0;
}

static void etcd_stop(void *state)
{
	struct watcher *w = state;

	if (w == NULL)
		return;
	mtd_etcd__link_fini(&w->link); /* cancels the calls without callbacks */
	if (w->mx)
		w->mx->connected = false;
	if (w->push_ev)
		event_free(w->push_ev);
	for (size_t i = 0; i < w->n; i++)
		entry_clear(&w->tab[i]);
	free(w->tab);
	free(w->range_end_buf);
	free(w);
}

const struct mtd_disc_source_ops mtd_etcd_source_ops = {
        .name = "etcd",
        .start = etcd_start,
        .stop = etcd_stop,
};
