/* The control thread's API for endpoint sources: what the DNS
 * resolver (dns.c), the etcd client and a config reload call to replace one
 * service's endpoints. Everything here runs on the control thread (the main
 * thread's event loop, main.c), never on a worker.
 *
 * A change builds a new service snapshot (endpoints + pickers, each picker
 * built with the previous one as `prev`) and hands it to every worker; see
 * HACKING.md "Snapshots" for how old ones are reclaimed. */
#ifndef MTD_CONTROL_H
#define MTD_CONTROL_H

#include <stdbool.h>
#include <stddef.h>

#include "discovery/discovery-t.h"

struct event_base;
struct mtd_cfg_service;
struct mtd_control; /* control-t.h: the control loop's state */
struct mtd_runtime;
struct mtd_endpoint;

/* The control loop's event base, for a source's sockets and timers. */
struct event_base *mtd_control_base(struct mtd_control *ctl);
/* The control loop's event priorities (libevent's, lower runs first): every
 * event has MTD_CONTROL_PRIO_NORMAL unless set otherwise. An event of
 * MTD_CONTROL_PRIO_BACKGROUND runs only in a turn of the loop in which no
 * other event is ready: background work (xds_services.c's rebuild slices) yields to
 * every socket read, so that a response that arrives meanwhile is taken
 * first, even one that takes many turns to read (libevent reads at most
 * 4 KiB a socket per turn). Such work must bound its own wait (a loop
 * with a normal event ready in every turn would hold it back for as long):
 * xds_services.c's rebuild runs a slice from a timer of normal priority when none
 * ran for 250 ms. */
enum { MTD_CONTROL_PRIO_NORMAL = 1, MTD_CONTROL_PRIO_BACKGROUND = 2, MTD_CONTROL_N_PRIOS = 3 };

/* Replace the endpoint set of service `service` (an index into the current
 * config's services) with eps[0..n). Identities in both the old and the new
 * set keep their stats, warmup start and connections; a removed endpoint's
 * idle connections close, busy ones take no new stream and close when their
 * calls end, calls waiting in its pools move to another endpoint. n == 0 is
 * allowed: new calls to the service then fail UNAVAILABLE with the reason
 * given to mtd_control_set_unavailable (or "no endpoints").
 *
 * eps are borrowed (copied before return). Duplicate identities in eps are
 * an error. Returns 0 (the workers pick the new set up within their next
 * turn), -EINVAL (service out of range, a duplicate identity, n >
 * MTD_LB_MAX_ENDPOINTS, an address that does not parse) or -ENOMEM; on any
 * error the old set stays in force and the reason is logged once.
 * Setting a set identical to the current one is a no-op returning 0.
 * Control thread only. */
int mtd_control_set_endpoints(struct mtd_control *ctl, size_t service, const struct mtd_disc_endpoint *eps, size_t n);

/* Several services' changes published as one snapshot (a control
 * plane's response changes many at once: one runtime, not one per
 * service). begin, then set each service, then publish; all within one
 * turn of the control loop. begin returns NULL when out of memory
 * (logged; set and publish then do nothing). set: service's endpoints
 * become eps[0..n) (borrowed; NULL = its current set) under over (a
 * control plane's override of its config, runtime-t.h; a reference
 * transferred, also on failure; NULL = the override in force, if any)
 * with the UNAVAILABLE message unavailable (NULL = none); without a set
 * (eps NULL), waiting says the source has not answered yet and the
 * message names what it waits for (calls to an empty set wait for the
 * first one, discovery.initial_wait), else the message is its error; a
 * set is an answer. 0, or -EINVAL / -ENOMEM (logged; the service keeps
 * its set). */
struct mtd_rt_over;
struct mtd_rt_batch;
struct mtd_rt_batch *mtd_control_batch_begin(struct mtd_control *ctl);
int mtd_control_batch_set(struct mtd_rt_batch *bt, size_t service, struct mtd_rt_over *over,
                          const struct mtd_disc_endpoint *eps, size_t n, const char *unavailable, bool waiting);
void mtd_control_batch_publish(struct mtd_control *ctl, struct mtd_rt_batch *bt);

/* The source of service `service` reported an error: while the service
 * has no endpoint, new calls to it fail UNAVAILABLE with "<reason>" (e.g.
 * "etcd 127.0.0.1:2379 unreachable: connection refused"), and calls that
 * waited for its first set fail so; NULL restores the default message.
 * The text is copied. 0, -EINVAL or -ENOMEM. Control thread only. */
int mtd_control_set_unavailable(struct mtd_control *ctl, size_t service, const char *reason);
/* The source of service `service` has not answered yet, and `what` says
 * what it waits for (mtd_runtime_waiting's text): while the service has
 * no endpoint, calls to it wait for the first set (discovery.initial_wait)
 * and fail naming `what` past it. 0, -EINVAL or -ENOMEM. Control thread. */
int mtd_control_set_waiting(struct mtd_control *ctl, size_t service, const char *what);


/* An endpoint source (DNS, etcd) bound to one service of the current
 * config. The control loop starts one per service whose source is not
 * STATIC, after the initial snapshot is in force, and on a reload stops
 * every source of the old config before starting the new config's (a
 * service keeps its previous endpoint set across a reload until its new
 * source reports, when the service's name and source settings are
 * unchanged). */
struct mtd_disc_source_ops {
	const char *name; /* "dns", "etcd": for logs */
	/* Start feeding service `service` (cfg: its config, valid until stop).
	 * 0 or -errno; a source that cannot start logs why. */
	int (*start)(struct mtd_control *ctl, size_t service, const struct mtd_cfg_service *cfg, void **state);
	/* Stop: no call to ctl after this returns. NULL state is a no-op. */
	void (*stop)(void *state);
};

/* ---- the control loop itself (publish.c; the sources: sources.h) ------ */

/* ctl zeroed, then its event base (MTD_CONTROL_N_PRIOS priorities) and the
 * three reclaim mailboxes made, and ctl bound as the runtime's control:
 * 0, or a negative errno with what was made freed. mtd_control_fini stops
 * the tracer, drops ctl->rt's reference, reclaims what is left, runs the
 * callbacks libevent still owes, then frees the base (call it after the
 * workers are gone, and only after an init that returned 0). */
int mtd_control_init(struct mtd_control *ctl);
void mtd_control_fini(struct mtd_control *ctl);
/* Make rt (a reference transferred) the current runtime and hand it to
 * every worker. Control thread. */
void mtd_control_publish(struct mtd_control *ctl, struct mtd_runtime *rt);
/* The control loop's tick: strategy and outlier ticks; an endpoint whose
 * ejection ended restarts its warmup (mtd_control_rewarm). */
void mtd_control_tick(struct mtd_control *ctl);
/* Endpoints eps[0..n) of service si came back (health checks SERVING
 * again, or an ejection ended): they get their traffic back through
 * warmup, not all at once. When the service (or one of its methods) has a
 * warmup window, their ramp restarts now, in a new snapshot of the same
 * set; else nothing. 0 or -errno (the set stays as it was). */
int mtd_control_rewarm(struct mtd_control *ctl, size_t si, struct mtd_endpoint *const *eps, size_t n);

#endif
