/* A reload is a transaction (reload.c; HACKING.md "Invariants"): prepare
 * builds everything the new config needs without publishing anything,
 * then commit publishes all of it in one step, or abort drops it and the
 * running process is as it was. Whatever can fail is in prepare: the
 * runtime snapshot (every service's TLS context), the inbound listener
 * set (each listener's server context, the sockets of new listen
 * addresses, bound), certwatch's entries, the access log's file. Commit
 * does not fail (register, which starts connections of its own, is
 * started there: out of memory is its only failure, logged, and the
 * previous registration then stays). Control thread only. */
#ifndef MTD_RELOAD_H
#define MTD_RELOAD_H

#include <stdbool.h>
#include <stddef.h>

struct mtd_cfg;
struct mtd_control;
struct mtd_runtime;
struct mtd_certwatch_next;
struct mtd_trace_target;
struct mtd_xds;

struct mtd_reload_tx {
	struct mtd_runtime *rt;          /* built, not published (owns the config) */
	int access_fd;                   /* the access log's new file, -1 = none / stderr */
	struct mtd_certwatch_next *cw;   /* certwatch's entries for rt */
	bool reg_changed;                /* register differs: started at commit */
	struct mtd_trace_target *trace;  /* where spans go under rt, NULL = no tracing */
	struct mtd_xds *xds;             /* a new xDS client (xds block changed), NULL = keep / none */
};

/* Tracing's part of a prepare, also for the first config: where rt's spans
 * go (*target, NULL without a tracing block) and rt->tracer, the exporter
 * started on first use. 0, or -1 with the reason in err (a TLS file that
 * does not load, out of memory), nothing kept. */
int mtd_reload_tracing(struct mtd_control *ctl, struct mtd_runtime *rt, struct mtd_trace_target **target, char *err,
                       size_t errlen);

/* Build what cfg needs (ownership of cfg taken, also on failure). 0, or
 * -1 with the reason in err and nothing changed, nothing kept. */
int mtd_reload_prepare(struct mtd_control *ctl, struct mtd_cfg *cfg, struct mtd_reload_tx *tx, char *err,
                       size_t errlen);
/* Publish a prepared reload: the snapshot (with its inbound set) to every
 * worker, the access log, the endpoint sources, register, certwatch. */
void mtd_reload_commit(struct mtd_control *ctl, struct mtd_reload_tx *tx);
/* Drop a prepared reload: nothing of it was ever seen. */
void mtd_reload_abort(struct mtd_reload_tx *tx);

#endif
