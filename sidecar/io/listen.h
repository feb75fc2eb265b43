/* Listening sockets (listen.c): the app's listener and the inbound ones are
 * one SO_REUSEPORT socket per worker (the kernel spreads the connections
 * over the workers). */
#ifndef MTD_LISTEN_H
#define MTD_LISTEN_H

struct mtd_cfg_addr;

/* SO_REUSEPORT would let a second maitred (same user) bind the same port
 * and silently take half of the connections: bind once without it first,
 * which fails with EADDRINUSE while anything listens there. 0 or -errno. */
int mtd_listen_check_free(const struct mtd_cfg_addr *a);
/* A non-blocking SO_REUSEPORT listening socket on a, or -errno. */
int mtd_listen_open(const struct mtd_cfg_addr *a);

#endif
