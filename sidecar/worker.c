/* A worker thread: one event base, one SO_REUSEPORT listener, its own
 * downstream connections and upstream pools (share-nothing: no other
 * worker touches them; docs/architecture.md "Threads").
 *
 * A turn of the loop runs the ready I/O callbacks, which only feed bytes to
 * nghttp2 sessions and mark connections dirty; then the flush event writes
 * every dirty connection once; then closed connections are freed. Freeing
 * at the end of the turn means no callback ever sees freed memory. That end
 * of the turn, the snapshot swap and the final close are worker_turn.c's;
 * this file keeps the thread, the bell, accept, housekeeping and drain. */
#include "config.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/bufq.h"
#include "core/log.h"
#include "sidecar/control/health.h"
#include "core/clock.h"
#include "sidecar/control/runtime.h"
#include "sidecar/io/conn.h"
#include "sidecar/io/downstream.h"
#include "sidecar/call/down_port.h"
#include "sidecar/call/park.h"
#include "sidecar/io/inbound.h"
#include "sidecar/io/pool.h"
#include "sidecar/io/upstream.h"
#include "sidecar/turn.h"
#include "sidecar/worker.h"
#include "sidecar/worker_turn.h"

#define READ_BUF_SIZE (64 * 1024)
static void maybe_finish_drain(struct mtd_worker *w)
{
	if (w->draining && w->n_downs == 0 && !w->drained) {
		w->drained = true; /* flushes after the loop exit come here again */
		MTD_INFO("worker %u: drained", w->id);
		event_base_loopexit(w->base, NULL);
	}
}

/* The flush event: the end of the turn (worker_turn.c), then whether a
 * drain is done. */
static void flush_cb(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_worker *w = arg;
	mtd_worker_end_turn(w);
	maybe_finish_drain(w);
}

static void accept_cb(evutil_socket_t lfd, short what, void *arg)
{
	struct mtd_worker *w = arg;
	/* Bounded: let other work run between bursts of connections. */
	for (int i = 0; i < 64; i++) {
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				MTD_WARN("worker %u: accept: %s", w->id, strerror(errno));
			return;
		}
		if (!mtd_worker_admit(w)) {
			close(fd);
			continue;
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (mtd_down_accept(w, fd) < 0) {
			mtd_worker_down_closed();
			close(fd);
		}
	}
}

static void housekeeping_cb(evutil_socket_t fd, short what, void *arg)
{
	struct mtd_worker *w = arg;
	int64_t now = mtd_now_ns();
	struct mtd_pool *p, *pnext;
	for (p = LIST_FIRST(&w->pools); p; p = pnext) {
		pnext = LIST_NEXT(p, link);
		mtd_pool_housekeeping(p, now); /* may free a retired pool */
	}
	const struct mtd_cfg_downstream *d = &w->rt->cfg->downstream;
	int64_t idle_ns = d->idle_timeout_ms * 1000000;
	struct mtd_conn *c, *next;
	bool quiet = w->n_bg == 0;
	for (c = LIST_FIRST(&w->downs); c; c = next) {
		next = LIST_NEXT(c, link);
		if (c->n_streams)
			quiet = false;
		/* Slowloris: a client that dribbles its preface or a
		 * header block, or reads nothing of what it is owed, is closed. */
		if (!c->preface_done && now - c->accepted_ns > d->preface_timeout_ms * 1000000) {
			MTD_INFO("client %s: no HTTP/2 preface and SETTINGS within %lld ms, closing", c->peer,
			         (long long)d->preface_timeout_ms);
			mtd_conn_close(c);
			continue;
		}
		if (mtd_conn_write_stalled(c, now, d->write_timeout_ms)) {
			MTD_INFO("client %s: read nothing of its responses for %lld ms, closing", c->peer,
			         (long long)d->write_timeout_ms);
			mtd_conn_close(c);
			continue;
		}
		if (c->hdr_start_ns && !c->doomed_ns && now - c->hdr_start_ns > d->header_timeout_ms * 1000000) {
			MTD_INFO("client %s: header block not completed within %lld ms, closing", c->peer,
			         (long long)d->header_timeout_ms);
			nghttp2_session_terminate_session(c->ng, NGHTTP2_PROTOCOL_ERROR);
			mtd_conn_doom(c);
			continue;
		}
		if (c->in)
			mtd_inbound_conn_tick(c, now); /* max_connection_age */
		mtd_down_tick(c, now); /* the second GOAWAY of mtd_down_notice */
		if (c->n_streams == 0 && now - c->last_active_ns > idle_ns) {
			MTD_DEBUG("client %s: idle, closing", c->peer);
			mtd_down_shutdown(c);
		}
	}
	if (quiet)
		mtd_worker_give_back(w);
}

/* The control thread published a runtime (its slot, mtd_worker_set_runtime):
 * serve it from now on. */
static void take_next_runtime(struct mtd_worker *w)
{
	pthread_mutex_lock(&w->next_mu);
	struct mtd_runtime *rt = w->next_rt;
	w->next_rt = NULL;
	pthread_mutex_unlock(&w->next_mu);
	if (rt)
		mtd_worker_take_runtime(w, rt);
}

static void drain(struct mtd_worker *w)
{
	if (w->draining)
		return;
	w->draining = true;
	/* Stop accepting: the kernel spreads new connections over the
	 * remaining listeners, or refuses them once all are closed. */
	event_del(&w->listen_ev);
	close(w->listen_fd);
	w->listen_fd = -1;
	mtd_inbound_worker_drain(w);
	/* No call waits for a first endpoint set through a drain. */
	mtd_call_parked_fail_all(w);
	struct mtd_conn *c, *next;
	for (c = LIST_FIRST(&w->downs); c; c = next) {
		next = LIST_NEXT(c, link);
		mtd_down_shutdown(c);
	}
	maybe_finish_drain(w);
}

/* The bell (worker-t.h): what the other threads asked for since. */
static void on_bell(void *arg, uint32_t bits)
{
	struct mtd_worker *w = arg;
	if (bits & MTD_WORKER_BELL_SWAP)
		take_next_runtime(w);
	if (bits & MTD_WORKER_BELL_HC)
		mtd_mbox_run(&w->hc_inbox);
	if (bits & MTD_WORKER_BELL_DRAIN)
		drain(w);
	if (bits & MTD_WORKER_BELL_STOP)
		event_base_loopexit(w->base, NULL);
}

static void *ng_malloc(size_t size, void *ud)
{
	return mtd_slab_malloc(ud, size);
}
static void ng_free(void *p, void *ud)
{
	mtd_slab_free(ud, p);
}
static void *ng_calloc(size_t n, size_t size, void *ud)
{
	return mtd_slab_calloc(ud, n, size);
}
static void *ng_realloc(void *p, size_t size, void *ud)
{
	return mtd_slab_realloc(ud, p, size);
}

struct mtd_worker *mtd_worker_new(unsigned id, struct mtd_runtime *rt, int listen_fd)
{
	struct mtd_worker *w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->hold = mtd_worker_hold_new(w, rt);
	if (!w->hold) {
		free(w);
		return NULL;
	}
	pthread_mutex_init(&w->next_mu, NULL);
	w->id = id;
	w->rt = rt;
	LIST_INIT(&w->pools);
	LIST_INIT(&w->bg_calls);
	LIST_INIT(&w->parked);
	LIST_INIT(&w->lingering);
	w->listen_fd = listen_fd;
	w->timer_fd = -1;
	w->rng = 0x9e3779b97f4a7c15ull ^ ((uint64_t)id << 32) ^ (uint64_t)mtd_now_ns();
	w->slab.passthrough = mtd_slab_env_passthrough();
	w->ng_mem = (nghttp2_mem){&w->slab, ng_malloc, ng_free, ng_calloc, ng_realloc};
	TAILQ_INIT(&w->dirty);
	TAILQ_INIT(&w->graveyard);
	LIST_INIT(&w->downs);
	/* No lock: only this thread touches the base; others ring the bell. */
	struct event_config *ecfg = event_config_new();
	if (!ecfg)
		goto fail_base;
	event_config_set_flag(ecfg, EVENT_BASE_FLAG_NOLOCK);
	w->base = event_base_new_with_config(ecfg);
	event_config_free(ecfg);
	if (!w->base)
		goto fail_base;
	w->rbuf_len = READ_BUF_SIZE;
	w->rbuf = malloc(w->rbuf_len);
	if (!w->rbuf)
		goto fail_mem;
	if (mtd_down_setup(w, &mtd_call_down_port) < 0)
		goto fail_mem;
	if (mtd_up_setup(w) < 0)
		goto fail_down;
	/* A worker without one of its events cannot run: it is not made. */
	if (event_assign(&w->listen_ev, w->base, listen_fd, EV_READ | EV_PERSIST, accept_cb, w) != 0 ||
	    event_assign(&w->flush_ev, w->base, -1, 0, flush_cb, w) != 0 ||
	    event_assign(&w->housekeeping_ev, w->base, -1, EV_PERSIST, housekeeping_cb, w) != 0 ||
	    mtd_worker_turn_init(w) != 0)
		goto fail_up;
	if (mtd_bell_init(&w->bell, w->base, on_bell, w) < 0)
		goto fail_up;
	if (mtd_hc_worker_init(w) < 0)
		goto fail_bell;
	struct timeval one_second = {1, 0};
	if (event_add(&w->listen_ev, NULL) < 0 || event_add(&w->housekeeping_ev, &one_second) < 0)
		goto fail_hc;
	return w;
fail_hc:
	mtd_hc_worker_fini(w);
fail_bell:
	mtd_bell_fini(&w->bell);
fail_up:
	mtd_worker_turn_fini(w);
	mtd_up_teardown(w);
fail_down:
	mtd_down_teardown(w);
fail_mem:
	free(w->rbuf);
	event_base_free(w->base);
fail_base:
	pthread_mutex_destroy(&w->next_mu);
	free(w->hold); /* not released: the caller keeps its reference on rt */
	free(w);
	return NULL;
}

static void *worker_main(void *arg)
{
	struct mtd_worker *w = arg;
	MTD_DEBUG("worker %u: running", w->id);
	/* One turn of the loop per pass (EVLOOP_ONCE: wait for events, run
	 * their callbacks and those they made active, return), so that the
	 * turn's clock (turn.h mtd_turn_now_ns) is read again after each
	 * wait: it is never older than the turn. The loop ends as
	 * event_base_dispatch's would, on event_base_loopexit (the bell's
	 * STOP, a drain done) or an error. */
	do {
		mtd_turn_forget(w);
		if (event_base_loop(w->base, EVLOOP_ONCE) != 0)
			break;
	} while (!event_base_got_exit(w->base) && !event_base_got_break(w->base));
	mtd_turn_forget(w); /* mtd_worker_free's close_all reads them again */
	/* The chunks this thread kept for reuse die with it (bufq.h). */
	mtd_bufq_release_kept();
	return NULL;
}

int mtd_worker_start(struct mtd_worker *w)
{
	int rc = pthread_create(&w->thread, NULL, worker_main, w);
	return rc ? -rc : 0;
}

void mtd_worker_drain(struct mtd_worker *w)
{
	mtd_bell_ring(&w->bell, MTD_WORKER_BELL_DRAIN);
}

void mtd_worker_stop(struct mtd_worker *w)
{
	mtd_bell_ring(&w->bell, MTD_WORKER_BELL_STOP);
}

void mtd_worker_free(struct mtd_worker *w)
{
	/* The loop has stopped: close everything, which fails what is left. */
	mtd_worker_close_all(w);
	if (w->listen_fd >= 0) {
		event_del(&w->listen_ev);
		close(w->listen_fd);
	}
	event_del(&w->housekeeping_ev);
	event_del(&w->timers_ev);
	mtd_conn_linger_end_all(w);
	mtd_hc_worker_fini(w); /* after the pools: their checks answered */
	mtd_bell_fini(&w->bell);
	mtd_up_teardown(w);
	mtd_down_teardown(w);
	mtd_slab_drain(&w->slab);
	mtd_worker_turn_fini(w);
	mtd_timers_free(&w->timers);
	while (w->n_spare_out)
		free(w->spare_out[--w->n_spare_out]);
	free(w->rbuf);
	free(w->ready);
	event_base_free(w->base);
	if (w->next_rt)
		mtd_runtime_unref(w->next_rt);
	/* Every call is gone: no hold is in use any more. */
	mtd_worker_hold_release(w, w->hold);
	pthread_mutex_destroy(&w->next_mu);
	free(w);
}
