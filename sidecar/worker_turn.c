/* What a worker does between its events (worker_turn.h): the end of a
 * turn, a snapshot swap, closing everything at the end, memory given back
 * after a quiet spell. No socket of its own, no thread, no libevent call:
 * the seam links it as it is. */
#include "config.h"

#include <errno.h>
#ifdef HAVE_MALLOC_TRIM
#include <malloc.h>
#endif
#include <stdatomic.h>
#include <stdlib.h>

#include "core/bufq.h"
#include "core/lazy.h"
#include "core/log.h"
#include "core/slab.h"
#include "sidecar/call/call.h"
#include "sidecar/call/failback.h"
#include "sidecar/call/park.h"
#include "sidecar/control/runtime.h"
#include "sidecar/io/conn.h"
#include "sidecar/io/downstream.h"
#include "sidecar/io/inbound.h"
#include "sidecar/io/pool.h"
#include "sidecar/turn.h"
#include "sidecar/worker_turn.h"

/* The connections closed this turn: freed now, when no callback of the
 * turn can reach them any more. */
static void free_buried(struct mtd_worker *w)
{
	struct mtd_conn *c;
	while ((c = TAILQ_FIRST(&w->graveyard))) {
		TAILQ_REMOVE(&w->graveyard, c, dirty_link);
		mtd_conn_free(c);
	}
}

/* The end of the turn's lifetimes: free what the call engine released
 * (call-t.h), then drop the snapshot holds let go of meanwhile. */
static void reap(struct mtd_worker *w)
{
	mtd_call_reap(w);
	mtd_worker_reap_holds(w);
}

void mtd_worker_end_turn(struct mtd_worker *w)
{
	struct mtd_conn *c;
	w->flush_due = false; /* what this flush dirties schedules another */

	do {
		/* Calls whose next attempt is due start it now, in this turn,
		 * so that its request goes out with this flush. */
		mtd_call_run_ready(w);
		/* Flushing can dirty other connections (a stream closing
		 * upstream makes a downstream trailer), and a failed write may
		 * ready a call: loop until quiet. */
		while ((c = TAILQ_FIRST(&w->dirty))) {
			TAILQ_REMOVE(&w->dirty, c, dirty_link);
			c->in_dirty = false;
			mtd_conn_flush(c);
		}
	} while (w->n_ready);
	free_buried(w);
	reap(w);
}

int mtd_worker_take_runtime(struct mtd_worker *w, struct mtd_runtime *rt)
{
	struct mtd_rt_hold *h = mtd_worker_hold_new(w, rt);
	if (!h) {
		/* Out of memory: stay on the current snapshot; the control
		 * thread's next change tries again. */
		MTD_ERROR("worker %u: out of memory taking a new snapshot", w->id);
		mtd_runtime_unref(rt);
		return -ENOMEM;
	}
	struct mtd_rt_hold *old = w->hold;
	/* Compared while the old snapshot is still held: a change of the
	 * endpoint sets keeps the inbound set (the same object). */
	bool inbound_changed = !w->rt || w->rt->inbound != rt->inbound;
	const struct mtd_runtime *prev = w->rt; /* valid until old is retired, below */
	w->hold = h;
	w->rt = rt;
	/* Inbound listeners and connections follow a new set by key (it walks
	 * every client connection: not for a change that kept the set). */
	if (inbound_changed)
		mtd_inbound_worker_sync(w);
	/* What client connections took at their start follows the new config
	 * by their reconnecting (not for a change of endpoints: same cfg). */
	if (prev && prev->cfg != rt->cfg && mtd_down_settings_differ(&prev->cfg->downstream, &rt->cfg->downstream)) {
		mtd_down_settings_changed(w);
		/* Upstream connections advertise the same bounds: told live. */
		const struct mtd_cfg_downstream *a = &prev->cfg->downstream, *b = &rt->cfg->downstream;
		if (a->initial_window_size != b->initial_window_size ||
		    a->max_header_list_size != b->max_header_list_size) {
			struct mtd_pool *p;
			LIST_FOREACH(p, &w->pools, link)
				mtd_pool_settings_changed(p);
		}
	}
	/* Pools of endpoints that stay take the new snapshot's settings. A
	 * service whose snapshot the change kept (the same object, over the
	 * same config) has its pools on it already, unless a pool was made
	 * since for a call on an older one (pools_born): one changed service
	 * among 10,000 of 10 endpoints is not a walk over 100,000 endpoints. */
	bool same_config = prev != NULL && prev->cfgbox == rt->cfgbox && !w->pools_born;
	w->pools_born = false;
	for (size_t i = 0; i < rt->cfg->n_services; i++) {
		struct mtd_rt_service *s = rt->services[i];
		if (same_config && prev->services[i] == s)
			continue;
		for (size_t e = 0; e < s->n_eps; e++) {
			struct mtd_ep_pools *slots = mtd_lazy_peek(&s->eps[e]->pools);
			struct mtd_pool *p = slots ? slots->slot[w->id] : NULL;
			if (p)
				mtd_pool_set_service(p, s);
		}
	}
	/* Pools of endpoints it no longer holds drain. */
	struct mtd_pool *p;
	LIST_FOREACH(p, &w->pools, link)
		if (!p->retired && mtd_endpoint_gone(p->ep, rt->gen))
			mtd_pool_retire(p);
	/* Calls waiting for a first endpoint set look at this one. */
	mtd_call_parked_swap(w);
	mtd_worker_hold_retire(w, old);
	return 0;
}

void mtd_worker_close_all(struct mtd_worker *w)
{
	mtd_failback_drop_all(w);
	mtd_inbound_worker_fini(w);
	struct mtd_conn *c;
	while ((c = LIST_FIRST(&w->downs)))
		mtd_conn_close(c);
	mtd_call_run_ready(w); /* the calls listed are over by now: their holds go */
	struct mtd_pool *p;
	while ((p = LIST_FIRST(&w->pools)))
		mtd_pool_free(p);
	/* Closing may have queued output and burials: nothing is written
	 * any more; free the dead. */
	while ((c = TAILQ_FIRST(&w->dirty))) {
		TAILQ_REMOVE(&w->dirty, c, dirty_link);
		c->in_dirty = false;
	}
	free_buried(w);
	reap(w);
}

/* How long a worker's client connections have had no stream before its
 * freed memory goes back. */
#define GIVE_BACK_QUIET_NS (5 * (int64_t)1000000000)

/* After a burst, the blocks its calls freed stay private memory, in the
 * slab's free lists (up to 256 KiB a class) and in malloc's arena,
 * fragmented: 512 calls in flight left 2.4 MB where the idle worker had
 * 0.8 (bench/proxy/README.md). Once the worker has been quiet for a while
 * (no client stream for GIVE_BACK_QUIET_NS, calls since the last time),
 * the slab goes back to malloc and malloc gives the free pages of its
 * arenas back to the kernel (glibc malloc_trim: every arena, so other
 * workers' too; rare enough that its locks cost nothing). */
bool mtd_worker_give_back(struct mtd_worker *w)
{
	/* One clock: a stream's end is stamped with the turn's
	 * (downstream.c), and so the quiet spell is measured on it, and "a
	 * call since" is a stream end other than the one the last give-back
	 * followed. An exact reading beside it took a stream that ended
	 * later in the give-back's turn, stamped with the turn's earlier
	 * clock, for one before it: that burst's memory stayed. */
	if (w->stream_end_ns == w->gave_back_end_ns || mtd_turn_now_ns(w) - w->stream_end_ns < GIVE_BACK_QUIET_NS)
		return false;
	w->gave_back_end_ns = w->stream_end_ns;
	while (w->n_spare_out)
		free(w->spare_out[--w->n_spare_out]);
	mtd_slab_drain(&w->slab);
	mtd_bufq_release_kept(); /* the relay's recycled chunks: up to 1 MiB of full ones, 74 KiB of first ones */
#ifdef HAVE_MALLOC_TRIM
	malloc_trim(0);
#endif
	return true;
}
