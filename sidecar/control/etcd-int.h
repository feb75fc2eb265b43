/* Internals shared by sidecar/control/etcd*.c: the link to an etcd cluster
 * that the watcher (etcd_watch.c) and the registration (etcd_register.c) each
 * own one of. Control thread only. See the state diagram in etcd.c. */
#ifndef MTD_ETCD_INT_H
#define MTD_ETCD_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/time.h>

#include <protobuf-c/protobuf-c.h>

#include "config/config.h"
#include "sidecar/control/gclient.h"

struct event;
struct event_base;
struct ssl_ctx_st;

#define BACKOFF_MIN_MS     250
#define BACKOFF_MAX_MS     5000
#define CONNECT_TIMEOUT_MS 2000
/* PING while a call is open: a silent etcd is noticed in 10-20 s. etcd
 * (grpc-go) refuses pings closer than 5 s (--grpc-keepalive-min-time). */
#define KEEPALIVE_MS     10000
#define HEALTH_PERIOD_MS 1000
#define REVOKE_LIMIT_MS  2000
/* Reload handover: how often and how long the previous registration waits
 * for the new one to be live before its leases are revoked. */
#define HANDOVER_POLL_MS  100
#define HANDOVER_LIMIT_MS 10000

/* One owner's connection to the cluster cfg->endpoints, tried in turn. */
struct mtd_etcd_link {
	const struct mtd_cfg_etcd *cfg;
	struct event_base *base;
	const char *what; /* "service shop.Cart" / "register shop.Cart" */
	size_t cur;
	struct mtd_gcli *conn;
	struct mtd_gcli_call *auth;
	char *token;                /* etcd auth token, NULL without username */
	struct ssl_ctx_st *ssl_ctx; /* cfg->tls, NULL = cleartext */
	struct event *retry;
	int64_t backoff_ms;
	bool ready, in_outage, ever_ok;
	void (*on_ready)(struct mtd_etcd_link *l);
	/* The connection is gone (l->conn already NULL); a retry is scheduled. */
	void (*on_lost)(struct mtd_etcd_link *l, const char *reason);
};

struct timeval mtd_etcd__tv_ms(int64_t ms);
/* The cluster endpoint in use ("127.0.0.1:2379"). */
const char *mtd_etcd__link_peer(const struct mtd_etcd_link *l);
/* 0, -ENOMEM or -EINVAL (cfg->tls unusable, logged). The owner sets
 * on_ready / on_lost, then calls connect. */
int mtd_etcd__link_init(struct mtd_etcd_link *l, struct event_base *base, const struct mtd_cfg_etcd *cfg,
                        const char *what);
/* Free the connection (its calls are cancelled without callbacks). */
void mtd_etcd__link_fini(struct mtd_etcd_link *l);
/* Connect to the current endpoint; on_ready once usable (authenticated). */
void mtd_etcd__link_connect(struct mtd_etcd_link *l);
/* Drop the connection, log (a warning the first time in an outage), move
 * to the next endpoint, schedule a retry after the backoff, call on_lost.
 * A no-op while a retry is already scheduled. */
void mtd_etcd__link_fail(struct mtd_etcd_link *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A good answer: the backoff resets, an outage ends ("reachable again"). */
void mtd_etcd__link_ok(struct mtd_etcd_link *l);
/* [prefix, prefix + 1): etcd's range_end for every key under a prefix.
 * buf holds strlen(prefix) + 1 bytes. */
ProtobufCBinaryData mtd_etcd__prefix_end(const char *prefix, uint8_t *buf);

#endif
