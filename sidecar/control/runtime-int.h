/* Between runtime.c (snapshots: their lifetime, the runtime assembled
 * from them, reloads, ticks) and runtime_service.c (one service's
 * snapshot built). Control thread. */
#ifndef MTD_RUNTIME_INT_H
#define MTD_RUNTIME_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "sidecar/control/runtime-t.h"

struct mtd_cfg_tls;
struct mtd_disc_endpoint;
struct ssl_ctx_st;

/* What a build says of its source's first answer (the snapshot's
 * `awaiting`, runtime-t.h). */
enum mtd_rt_await {
	MTD_RT_AWAIT_AS_PREV = 0, /* not a source's report: prev's (none: answered) */
	MTD_RT_AWAIT_ANSWERED,    /* a set or an error came: calls no longer wait */
	MTD_RT_AWAIT_WAITING,     /* the source has not answered yet */
};

/* What a new service snapshot is built from. */
struct mtd_rt_build {
	struct mtd_cfg_box *box;
	const struct mtd_cfg_service *cfg;
	const struct mtd_rt_service *prev; /* the snapshot replaced, or NULL */
	const struct mtd_disc_endpoint *eps;
	size_t n;
	const char *const *hosts; /* SNI host per endpoint, or NULL: from the address */
	/* Services of the same runtime built before this one (TLS contexts
	 * are shared between services with the same files). */
	struct mtd_rt_service *const *built;
	size_t n_built;
	unsigned n_workers;
	bool force; /* build even when the set equals prev's */
	/* A TLS context made from the service's files again (certwatch.c:
	 * they changed), used instead of prev's; NULL = prev's / built. */
	struct ssl_ctx_st *ssl_ctx;
	bool set_unavailable;       /* replace prev's message by `unavailable` */
	const char *unavailable;    /* with set_unavailable */
	enum mtd_rt_await awaiting; /* the snapshot's `awaiting` */
	struct mtd_rt_over *over;   /* cfg is &over->svc (a reference taken), or NULL */
};

/* A snapshot of service b->cfg over b->eps (runtime_service.c), reusing
 * the identities of b->prev and building each picker with prev's as
 * `prev`, with one reference. *same: nothing differs from prev (nothing
 * to publish, NULL returned). NULL + err on failure. */
struct mtd_rt_service *mtd_rt__service_build(const struct mtd_rt_build *b, bool *same, char *err, size_t errlen);
/* Free a snapshot whose last reference went (runtime.c). */
void mtd_rt__service_free(struct mtd_rt_service *s);

/* Two optional strings (file names, server names) are the same. */
bool mtd_rt__same_file(const char *a, const char *b);
/* The same TLS files and server name (a service's client context, an
 * etcd source's connection settings). */
bool mtd_rt__same_tls(const struct mtd_cfg_tls *a, const struct mtd_cfg_tls *b);

#endif
