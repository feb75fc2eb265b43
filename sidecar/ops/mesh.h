/* Mesh mode's figures and refusal log (mesh.c): per inbound listener, the
 * calls authorization decided by caller identity (a bounded label set),
 * the handshakes done and refused, and the rate limit on refusal lines.
 * Counters are multi-writer atomics (a worker per connection or call); the
 * identity table grows under a mutex, once per new (listener, identity)
 * per connection, never per call. */
#ifndef MTD_MESH_H
#define MTD_MESH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "sidecar/io/transport.h"

struct mtd_abuf;
struct mtd_cfg;

/* Listeners are counted by key (their listen address, normalised), each
 * in a slot of its own for the life of the process, so that a reload
 * that removes or reorders inbound entries never moves one listener's
 * figures to another. Past MTD_MESH_LISTENERS keys the last slot is
 * shared (its figures are then those of several addresses). */
#define MTD_MESH_LISTENERS 64
/* The slot of listener `key` (made the first time). Control thread. */
unsigned mtd_mesh_listener(const char *key);
/* A connection closed at accept (inbound[].max_connections, or too many
 * handshakes from one address). Any thread. */
void mtd_mesh_conn_refused(unsigned listener);

/* Distinct identities counted per listener; the rest share "other". */
#define MTD_MESH_IDENTITIES 64

enum mtd_in_verdict {
	MTD_IN_NONE = 0, /* not decided (not an inbound call) */
	MTD_IN_ALLOWED,
	MTD_IN_DENIED, /* authorization: PERMISSION_DENIED */
	MTD_IN_SHED,   /* max_concurrent_calls: RESOURCE_EXHAUSTED */
	MTD_IN_N
};
/* "allow", "deny", "shed". */
const char *mtd_mesh_verdict_name(enum mtd_in_verdict v);

/* One (listener, identity): its calls by verdict. Lives until exit. */
struct mtd_mesh_ident {
	unsigned listener;
	char *identity; /* "" = no certificate; "other" past the cap */
	_Atomic uint64_t calls[MTD_IN_N];
	struct mtd_mesh_ident *next;
};

/* The entry of (listener, identity): made at the first connection with
 * that identity, "other" once the listener has MTD_MESH_IDENTITIES. NULL
 * only when out of memory (nothing is counted then). Any thread. */
struct mtd_mesh_ident *mtd_mesh_identity(unsigned listener, const char *identity);
static inline void mtd_mesh_count(struct mtd_mesh_ident *id, enum mtd_in_verdict v)
{
	if (id && v < MTD_IN_N)
		atomic_fetch_add_explicit(&id->calls[v], 1, memory_order_relaxed);
}
/* A handshake done (resumed: by a session ticket), or refused. Any thread. */
void mtd_mesh_handshake(unsigned listener, bool resumed);
void mtd_mesh_refused(unsigned listener, enum mtd_tls_refusal why);
/* Whether a refusal from peer address `addr` ("ip:port"; the port is not
 * part of the key) gets a log line now: at most one a second per address
 * (*held: those that got none since), at most 16 a second over every
 * address, for at most 256 addresses at once; the refusals past those
 * bounds get one summary line a second, logged here. Any thread. */
bool mtd_mesh_refusal_log(const char *addr, int64_t now_ns, uint64_t *held);
/* Certificate files read again (certwatch.c): `files` names them
 * ("inbound LISTEN", "service NAME"), result "ok", "mismatch", "error".
 * Control thread (as the admin that reads them). */
void mtd_mesh_tls_reload(const char *files, const char *result);
/* The families, for the listeners of cfg (admin, control thread). */
void mtd_mesh_render(struct mtd_abuf *b, const struct mtd_cfg *cfg);

#endif
