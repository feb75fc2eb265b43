/* One upstream HTTP/2 client connection (upstream.c): connect, TLS,
 * SETTINGS, GOAWAY, PING. Worker thread only. */
#ifndef MTD_UPSTREAM_H
#define MTD_UPSTREAM_H

#include <stdbool.h>
#include <stdint.h>

struct mtd_worker;
struct mtd_conn;
struct mtd_pool;
struct mtd_attempt;

/* Per-worker nghttp2 callbacks and options. */
int mtd_up_setup(struct mtd_worker *w);
void mtd_up_teardown(struct mtd_worker *w);
struct mtd_conn *mtd_up_connect(struct mtd_pool *p);
/* Open attempt a's stream on c. 0, or -errno (the conn cannot take it). */
int mtd_up_submit(struct mtd_conn *c, struct mtd_attempt *a);
/* Called when an attempt's upstream side may send more (request data). If
 * nghttp2 cannot take it up again (out of memory) the stream is reset, or
 * the connection doomed: never closed under the caller. */
void mtd_up_resume(struct mtd_attempt *a);
/* Housekeeping: close c if its peer read nothing for upstream.write_timeout
 * while output waits (a stuck upstream); its calls end UNAVAILABLE. true
 * when c was closed. */
bool mtd_up_check_write_stall(struct mtd_conn *c, int64_t now_ns);

#endif
