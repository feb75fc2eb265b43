/* Types shared by every endpoint source (static config, DNS, etcd) and the
 * runtime that turns their endpoint sets into live snapshots. Pure data;
 * what a source calls on the control thread is in
 * sidecar/control/control.h.
 *
 * Identity. An endpoint is the pair (key, address): the registry key where
 * the source has one (etcd: the full key under the prefix), else NULL, and
 * the numeric "ip:port" it is called on. Two sets that both hold an identity
 * hold the same endpoint: its live figures (struct mtd_lb_stats), warmup
 * start and per-worker pools carry over from the old snapshot to the new
 * one. A changed weight, zone or metadata keeps the identity; a changed
 * address (same key) is a removal plus an addition.
 */
#ifndef MTD_DISCOVERY_T_H
#define MTD_DISCOVERY_T_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* One metadata entry of a registry record ("version" -> "1.4"). */
struct mtd_disc_meta {
	const char *key;
	const char *value;
};

/* One endpoint as a source produces it. Everything is borrowed: the
 * receiver (mtd_control_set_endpoints) copies what it keeps before it
 * returns, so a source may build these on its stack or in a scratch
 * buffer. */
struct mtd_disc_endpoint {
	const char *key;            /* registry key, or NULL (static, DNS) */
	const char *address;        /* numeric "ip:port" / "[v6]:port", the id pickers hash */
	struct sockaddr_storage sa; /* address, parsed */
	socklen_t salen;
	int32_t weight;   /* 0..INT32_MAX; 100 when the source has none */
	const char *zone; /* NULL or "" = none */
	const struct mtd_disc_meta *metadata;
	size_t n_metadata;
	/* Wall-clock ms the instance started (registry record), feeding warmup
	 * (lib/lb/warmup.c). 0 = unknown: the moment maitred first saw the identity
	 * is used, and kept while the identity stays. */
	int64_t start_ms;
	/* The identity the instance presents (its registry record's: the URI
	 * SAN of its certificate), NULL or "" = none. Part of the endpoint: a
	 * changed one makes it another endpoint (runtime.c), as FROM_REGISTRY
	 * connects expecting it. */
	const char *identity;
};

#endif
