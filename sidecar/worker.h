/* A worker thread (worker.c): its event loop, the bell (snapshot swaps,
 * health checks, drain, stop), accept, housekeeping, drain. Above the rooms
 * it runs (io/, call/); what they may ask of it is turn.h; the end of a
 * turn, the swap itself and the final close are worker_turn.h. */
#ifndef MTD_WORKER_H
#define MTD_WORKER_H

#include "sidecar/worker-t.h"

struct mtd_runtime;

/* rt: a reference transferred to the worker (kept by the caller when NULL
 * is returned). */
struct mtd_worker *mtd_worker_new(unsigned id, struct mtd_runtime *rt, int listen_fd);
/* Start w's thread: 0, or -errno from pthread_create (w not started:
 * mtd_worker_free it). */
int mtd_worker_start(struct mtd_worker *w);
/* Thread-safe: ask the worker to drain (GOAWAY everyone) / stop now. */
void mtd_worker_drain(struct mtd_worker *w);
void mtd_worker_stop(struct mtd_worker *w);
/* Free a worker whose thread has ended (or never started). */
void mtd_worker_free(struct mtd_worker *w);

#endif
