/* Certificate rotation (certwatch.c): the certificate, key and CA
 * files of every inbound listener and every service's tls, watched
 * (inotify on their directories, and read every 10 s for the mounts
 * inotify misses) and loaded again when their content changed, once they
 * load (a certificate and key that match): new handshakes use them. A
 * connection in flight keeps its own, unless an inbound listener's client
 * CA content changed (who may connect): then it gets GOAWAY and its calls
 * in flight finish. Control thread only. */
#ifndef MTD_CERTWATCH_H
#define MTD_CERTWATCH_H

#include <stddef.h>

struct mtd_control;
struct mtd_certwatch;

/* Watch the files of ctl->rt's config. NULL when out of memory (logged:
 * rotation then needs SIGHUP... which needs the watch: restart). */
struct mtd_certwatch *mtd_certwatch_start(struct mtd_control *ctl);
/* A reload (control/reload.h): the entries of rt, a runtime not yet
 * published, and what their contexts were made from (an inbound listener
 * that keeps its context keeps what was known of its files; a new
 * context was made from the files as they are now). 0 with *next (NULL
 * when cw is), or -1 with the reason in err. Commit once rt is
 * published: its files are watched from then on; or abort. */
struct mtd_certwatch_next;
struct mtd_runtime;
int mtd_certwatch_prepare(struct mtd_certwatch *cw, const struct mtd_runtime *rt, struct mtd_certwatch_next **next,
                          char *err, size_t errlen);
void mtd_certwatch_commit(struct mtd_certwatch *cw, struct mtd_certwatch_next *next);
void mtd_certwatch_abort(struct mtd_certwatch_next *next);
/* ctl->rt, published by an endpoint source (an xDS cluster's TLS came,
 * went or names other files), may have other service contexts than the
 * ones watched: watch those. Entries that stay keep what was known of
 * them; a new context was just made from its files as they are. Nothing
 * when the set is the same. Not from certwatch's own publish. */
void mtd_certwatch_follow(struct mtd_certwatch *cw);
/* Read every file again now (SIGHUP). */
void mtd_certwatch_check(struct mtd_certwatch *cw);
void mtd_certwatch_free(struct mtd_certwatch *cw);

#endif
