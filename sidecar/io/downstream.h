/* The local app's h2c connections: nghttp2 server sessions with the
 * hardening options (downstream.c). Worker thread only. */
#ifndef MTD_DOWNSTREAM_H
#define MTD_DOWNSTREAM_H

struct mtd_worker;
struct mtd_conn;
struct mtd_call;

/* Per-worker nghttp2 callbacks and options. */
int mtd_down_setup(struct mtd_worker *w);
void mtd_down_teardown(struct mtd_worker *w);
int mtd_down_accept(struct mtd_worker *w, int fd);
/* Tell the client to go away (SIGTERM drain, idle): GOAWAY, finish
 * streams; closed at once when the GOAWAY cannot be queued. */
void mtd_down_shutdown(struct mtd_conn *c);

#endif
