/* The control thread's state (main.c's event loop; control.h and
 * runtime.h the functions that run on it). */
#ifndef MTD_CONTROL_T_H
#define MTD_CONTROL_T_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sidecar/control/mailbox.h"

struct event;
struct event_base;
struct mtd_runtime;
struct mtd_worker;
struct mtd_register;
struct mtd_health;
struct mtd_orca_oob;
struct mtd_certwatch;
struct mtd_disc_source_ops;
struct mtd_xds;

struct mtd_control {
	struct event_base *base;
	struct mtd_runtime *rt; /* current: the one every worker gets next */
	struct mtd_worker **workers;
	unsigned n_workers;
	uint64_t next_gen;
	/* Objects whose last reference went on any thread, freed at the
	 * control thread's next turn (mailbox.h; each one's event runs
	 * mtd_runtime_reclaim, which empties all three). */
	struct mtd_mbox reclaim_rts;
	struct mtd_mbox reclaim_svcs;
	struct mtd_mbox reclaim_eps;
	/* When the last runtime was freed (CLOCK_MONOTONIC ms), until a tick
	 * gives malloc's free pages back to the kernel: 0 = nothing to give
	 * (publish.c give_back_heap). */
	int64_t heap_freed_ms;
	/* Endpoint sources of the current config: one per service, or NULL. */
	const struct mtd_disc_source_ops **src_ops;
	void **src_state;
	size_t n_src;
	/* The xDS client while the config has an xds block (xds.h); the
	 * services with discovery.xds bind to it through their source. */
	struct mtd_xds *xds;
	/* main.c: drain, reload, self-registration. */
	bool draining;
	int drain_signal;
	const char *drain_why;     /* "SIGTERM", "SIGINT", "POST /drain" */
	bool listening;            /* every worker's listener is up (admin /ready) */
	struct mtd_register *reg;  /* Config.register, NULL without */
	struct mtd_health *health; /* active health checks (health.c) */
	struct mtd_orca_oob *orca_oob; /* ORCA out-of-band streams (orca_oob.c) */
	struct mtd_certwatch *certs; /* certificate rotation (certwatch.c) */
	/* The span exporter (ops/trace_export.h), started with the first
	 * config that traces; until the stop, after the workers. */
	struct mtd_tracer *tracer;
	struct event *drain_timer;
	/* What the process runs with whatever a reload says (restart-only
	 * keys: listen, workers, admin), from the config it started with. */
	char *run_listen;
	char *run_admin; /* NULL = no admin endpoint */
	unsigned run_workers;
	const char *config_path; /* NULL = embedded default (no reload) */
	const char *config_base; /* its file name, for inotify events */
	uint64_t config_hash;    /* content last loaded (inotify: reload on change) */
	int watch_fd;            /* inotify, -1 = none */
	struct event *watch_ev, *watch_settle;
};

#endif
