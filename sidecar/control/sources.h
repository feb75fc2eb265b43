/* The endpoint sources of the current config (sources.c): each discovered
 * service's DNS or etcd source, started and stopped together around a
 * publish. Control thread only. */
#ifndef MTD_SOURCES_H
#define MTD_SOURCES_H

struct mtd_control;

/* Start the sources of ctl's current runtime's services (those running
 * are stopped first); one that cannot start is logged and its service gets
 * no endpoints from it. */
void mtd_sources_start(struct mtd_control *ctl);
/* Stop every source started: none calls ctl after this returns. */
void mtd_sources_stop(struct mtd_control *ctl);

#endif
