/* The access log (config: log.access): one line per call, TEXT or JSON
 * (log.json), sampled (log.access.sample). Workers write it while a
 * reload switches its file: the descriptor is ours for the process's life
 * and a reload points it at the new file with dup2(), which a concurrent
 * write() sees before or after, never half; the settings are relaxed
 * atomics read once per call. A line is one write() (O_APPEND), so lines
 * never interleave; the log is best effort (a failed write is dropped). */
#ifndef MTD_ACCESS_LOG_H
#define MTD_ACCESS_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mtd_call;
struct mtd_cfg;

/* A reload's log.access, in two steps so that a file that cannot be
 * opened refuses the reload before anything changed: open cfg's access
 * log (*fd = -1 when cfg has none): 0, or -errno with a message in err.
 * Then apply: workers write to the new file, with cfg's sample and
 * format, from their next call on (fd is consumed). Reopening the same
 * path on every reload also lets SIGHUP follow a log rotation. Control
 * thread (mtd_metrics_init runs both at start). */
int mtd_access_log_open(const struct mtd_cfg *cfg, int *fd, char *err, size_t errlen);
void mtd_access_log_apply(const struct mtd_cfg *cfg, int fd);
/* Closes the file and turns the log off; after every worker stopped
 * (mtd_metrics_fini). */
void mtd_access_log_close(void);

/* Worker thread. Whether the call that ends gets a line: the log is on
 * and the sample picks it (draws from the worker's generator when the
 * sample is below 1). */
bool mtd_access_log_due(struct mtd_call *call);
/* Worker thread. The call's line: path[1 .. 1 + svc_len) its service and
 * the rest after the '/' its method ("/" with svc_len 0: both "-"), code
 * the gRPC status the client saw, dur_ns its duration. Reads the call's
 * published figures only (its endpoint, attempts, bytes, and an inbound
 * call's listener, identity and verdict); allocates nothing. */
void mtd_access_log_line(const struct mtd_call *call, const char *path, size_t svc_len, size_t path_len, int code,
                         int64_t dur_ns);

#endif
