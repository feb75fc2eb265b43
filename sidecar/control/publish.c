/* The control loop's hand of the snapshots (HACKING.md "Snapshots"): it
 * keeps the current runtime, makes every change a new one (an endpoint
 * source's set, an UNAVAILABLE message, a warmup restart) with runtime.c's
 * builders, and hands it to every worker. Also the control loop's own
 * state (init, reclaim mailboxes). Control thread only.
 *
 * runtime.c builds and frees snapshots and never calls a worker; this file
 * is the one place a snapshot is published. The endpoint sources that
 * feed it are started by sources.c. */
#include "config.h"

#include <errno.h>
#ifdef HAVE_MALLOC_TRIM
#include <malloc.h>
#endif
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "core/clock.h"
#include "core/log.h"
#include "sidecar/control/certwatch.h"
#include "sidecar/control/control-t.h"
#include "sidecar/control/control.h"
#include "sidecar/control/runtime.h"
#include "sidecar/ops/history.h"
#include "sidecar/ops/trace_export.h"
#include "sidecar/turn.h"

static void reclaim_cb(evutil_socket_t fd, short what, void *arg)
{
	mtd_runtime_reclaim(arg);
}

int mtd_control_init(struct mtd_control *ctl)
{
	int rc = -ENOMEM;

	memset(ctl, 0, sizeof(*ctl));
	ctl->base = event_base_new();
	if (!ctl->base)
		goto fail;
	/* libevent's default priority is the middle one: MTD_CONTROL_PRIO_NORMAL. */
	if (event_base_priority_init(ctl->base, MTD_CONTROL_N_PRIOS) != 0)
		goto free_base;
	rc = mtd_mbox_init(&ctl->reclaim_rts, ctl->base, reclaim_cb, ctl);
	if (rc < 0)
		goto free_base;
	rc = mtd_mbox_init(&ctl->reclaim_svcs, ctl->base, reclaim_cb, ctl);
	if (rc < 0)
		goto fini_rts;
	rc = mtd_mbox_init(&ctl->reclaim_eps, ctl->base, reclaim_cb, ctl);
	if (rc < 0)
		goto fini_svcs;
	ctl->watch_fd = -1;
	mtd_runtime_bind(ctl);
	return 0;

fini_svcs:
	mtd_mbox_fini(&ctl->reclaim_svcs);
fini_rts:
	mtd_mbox_fini(&ctl->reclaim_rts);
free_base:
	event_base_free(ctl->base);
	ctl->base = NULL;
fail:
	return rc;
}

/* The callbacks libevent still owes on the control base, run before the
 * base goes: a DNS lookup cancelled or failed by its resolver's end (a
 * stopped source's, dns.c; the xDS client's, xds.c; evdns's own probe of
 * a resolver marked down) calls back later, as a deferred callback, and
 * libevent frees its records of the lookup, and the source the
 * callback's argument frees, only in that callback; event_base_free
 * drops it unrun (LeakSanitizer: about 1.5 KiB a lookup). Only at the
 * end: every other user of the base is gone (main.c's run freed them,
 * the mailboxes are closed), so a turn of the loop runs those callbacks
 * and nothing else. One may free a resolver whose probe then calls
 * back: a few turns, at most MAX_TURNS. */
static void run_owed_callbacks(struct event_base *base)
{
	enum { MAX_TURNS = 8 };
	for (int i = 0; i < MAX_TURNS && event_base_get_num_events(base, EVENT_BASE_COUNT_ACTIVE) > 0; i++)
		event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
}

void mtd_control_fini(struct mtd_control *ctl)
{
	/* The workers, the exporter's producers, are gone: what they queued
	 * is counted as dropped (shutdown). */
	mtd_tracer_stop(ctl->tracer);
	ctl->tracer = NULL;
	if (ctl->rt) {
		mtd_runtime_unref(ctl->rt);
		ctl->rt = NULL;
	}
	mtd_runtime_reclaim(ctl);
	/* Nothing is left: what the last reclaim freed was the last. */
	mtd_mbox_fini(&ctl->reclaim_eps);
	mtd_mbox_fini(&ctl->reclaim_svcs);
	mtd_mbox_fini(&ctl->reclaim_rts);
	if (ctl->base) {
		run_owed_callbacks(ctl->base);
		event_base_free(ctl->base);
	}
	ctl->base = NULL;
	mtd_runtime_bind(NULL);
	free(ctl->run_listen);
	free(ctl->run_admin);
	ctl->run_listen = ctl->run_admin = NULL;
}

struct event_base *mtd_control_base(struct mtd_control *ctl)
{
	return ctl->base;
}

void mtd_control_publish(struct mtd_control *ctl, struct mtd_runtime *rt)
{
	struct mtd_runtime *old = ctl->rt;
	if (old)
		mtd_runtime_mark_gone(old, rt);
	ctl->rt = rt;
	for (unsigned i = 0; i < ctl->n_workers; i++) {
		mtd_ref_get(&rt->ref);
		mtd_worker_set_runtime(ctl->workers[i], rt);
	}
	if (old)
		mtd_runtime_unref(old);
}

/* ---- changes from the endpoint sources (control.h) ----------------------- */

int mtd_control_set_endpoints(struct mtd_control *ctl, size_t service, const struct mtd_disc_endpoint *eps, size_t n)
{
	struct mtd_runtime *cur = ctl->rt;
	char err[384];
	bool same = false;

	if (!cur || service >= cur->cfg->n_services)
		return -EINVAL;
	const struct mtd_rt_service *prev = cur->services[service];
	struct mtd_runtime *rt = mtd_runtime_with_endpoints(ctl, service, eps, n, &same, err, sizeof(err));
	if (!rt) {
		if (same)
			return 0;
		MTD_WARN("%s; keeping its %zu endpoint%s", err, prev->n_eps, prev->n_eps == 1 ? "" : "s");
		return strstr(err, "out of memory") ? -ENOMEM : -EINVAL;
	}
	size_t now = rt->services[service]->n_eps;
	MTD_INFO("service %s: %zu endpoint%s", prev->cfg->local->name, now, now == 1 ? "" : "s");
	mtd_control_publish(ctl, rt);
	return 0;
}

struct mtd_rt_batch *mtd_control_batch_begin(struct mtd_control *ctl)
{
	struct mtd_rt_batch *bt = ctl->rt ? mtd_runtime_batch_begin(ctl) : NULL;

	if (!bt)
		MTD_ERROR("out of memory: endpoint changes not applied");
	return bt;
}

int mtd_control_batch_set(struct mtd_rt_batch *bt, size_t service, struct mtd_rt_over *over,
                          const struct mtd_disc_endpoint *eps, size_t n, const char *unavailable, bool waiting)
{
	char err[384];
	int rc;

	if (!bt) {
		mtd_rt_over_unref(over);
		return -ENOMEM;
	}
	const struct mtd_rt_service *prev = mtd_runtime_batch_service(bt, service);
	size_t was = prev ? prev->n_eps : 0;
	rc = mtd_runtime_batch_set(bt, service, over, eps, n, unavailable, waiting, err, sizeof(err));
	mtd_rt_over_unref(over); /* the snapshot took its own */
	if (rc < 0) {
		MTD_WARN("%s; keeping its %zu endpoint%s", err, was, was == 1 ? "" : "s");
		return rc;
	}
	if (rc == 0 && eps) {
		const struct mtd_rt_service *s = mtd_runtime_batch_service(bt, service);
		MTD_INFO("service %s: %zu endpoint%s, policy %s", s->cfg->local->name, s->n_eps,
		         s->n_eps == 1 ? "" : "s", s->cfg->lb.ops ? s->cfg->lb.ops->name : "?");
	}
	return 0;
}

/* rt's services have the TLS contexts old's have (same config): the
 * batch changed endpoints only, as nearly all do. */
static bool same_contexts(const struct mtd_runtime *old, const struct mtd_runtime *rt)
{
	if (!old || old->cfg != rt->cfg)
		return false;
	for (size_t i = 0; i < rt->cfg->n_services; i++)
		if (old->services[i]->ssl_ctx != rt->services[i]->ssl_ctx)
			return false;
	return true;
}

void mtd_control_batch_publish(struct mtd_control *ctl, struct mtd_rt_batch *bt)
{
	struct mtd_runtime *rt = mtd_runtime_batch_end(bt);

	if (rt) {
		/* An xDS cluster's TLS is the only one a source changes: the
		 * watch follows it, unless no context changed. */
		bool follow = !same_contexts(ctl->rt, rt);
		mtd_control_publish(ctl, rt);
		if (follow)
			mtd_certwatch_follow(ctl->certs);
	}
}

/* Publish a new snapshot of service si over its current set: with a new
 * UNAVAILABLE message (set_unavailable; waiting: what the source still
 * waits for, else its error), or to take what changed on its identities
 * (returned_ms). */
static int rebuild(struct mtd_control *ctl, size_t si, bool set_unavailable, const char *reason, bool waiting)
{
	char err[384];
	struct mtd_runtime *rt = mtd_runtime_rebuilt(ctl, si, set_unavailable, reason, waiting, err, sizeof(err));
	if (!rt) {
		if (set_unavailable)
			MTD_WARN("%s", err);
		else
			MTD_WARN("%s; its warmup does not restart", err);
		return -ENOMEM;
	}
	mtd_control_publish(ctl, rt);
	return 0;
}

static int set_message(struct mtd_control *ctl, size_t service, const char *reason, bool waiting)
{
	struct mtd_runtime *cur = ctl->rt;
	if (!cur || service >= cur->cfg->n_services)
		return -EINVAL;
	struct mtd_rt_service *prev = cur->services[service];
	if (((reason == NULL && prev->unavailable == NULL) ||
	     (reason && prev->unavailable && strcmp(reason, prev->unavailable) == 0)) &&
	    prev->awaiting == waiting)
		return 0;
	/* A new snapshot of the same set, with the new message. */
	return rebuild(ctl, service, true, reason, waiting);
}

int mtd_control_set_unavailable(struct mtd_control *ctl, size_t service, const char *reason)
{
	return set_message(ctl, service, reason, false);
}

int mtd_control_set_waiting(struct mtd_control *ctl, size_t service, const char *what)
{
	return set_message(ctl, service, what, true);
}

int mtd_control_rewarm(struct mtd_control *ctl, size_t si, struct mtd_endpoint *const *eps, size_t n)
{
	struct mtd_runtime *cur = ctl->rt;
	if (!cur || si >= cur->cfg->n_services)
		return -EINVAL;
	struct mtd_rt_service *prev = cur->services[si];
	if (!mtd_runtime_warms_up(prev->cfg) || n == 0)
		return 0;
	int64_t now_ms = mtd_wall_ms();
	for (size_t k = 0; k < n; k++) {
		eps[k]->returned_ms = now_ms;
		MTD_INFO("service %s: endpoint %s is back: its warmup starts again", prev->cfg->local->name,
		         mtd_endpoint_text(eps[k]));
	}
	/* The same set; the builder sees the new start (returned_ms). */
	return rebuild(ctl, si, false, NULL, false);
}

/* A reload (or a discovery change) builds the new generation while the
 * old one lives, and frees the old one once the workers let go of it: the
 * freed blocks sit below the new ones, so malloc cannot shrink its heap and
 * keeps them as private memory. 10,000 services of 10 endpoints: 79 MB
 * fresh, 124-148 MB after reloads (bench/reload/README.md). A reloaded
 * maitred is to hold about what a fresh one does, so once generations
 * stop changing for HEAP_QUIET_MS, a tick hands malloc's free pages back
 * (glibc malloc_trim: every arena; 5-9 ms over that heap, on the control
 * thread). Not at every change: the next generation would fault the same
 * pages in again (a reload of that config: 15,000 page faults without the
 * trim, 23,000 after one), and under a stream of discovery changes the
 * freed blocks are reused anyway. */
#define HEAP_QUIET_MS 10000

static void give_back_heap(struct mtd_control *ctl)
{
	if (ctl->heap_freed_ms == 0 || mtd_mono_ms() - ctl->heap_freed_ms < HEAP_QUIET_MS)
		return;
	ctl->heap_freed_ms = 0;
#ifdef HAVE_MALLOC_TRIM
	malloc_trim(0);
#endif
}

static void came_back(struct mtd_control *ctl, size_t si, struct mtd_endpoint *const *eps, size_t n)
{
	mtd_control_rewarm(ctl, si, eps, n);
}

void mtd_control_tick(struct mtd_control *ctl)
{
	mtd_runtime_tick(ctl->rt, came_back);
	mtd_history_tick(ctl->rt, mtd_wall_ms()); /* the live page's five minutes */
	give_back_heap(ctl);
}
