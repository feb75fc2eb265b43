/* Certificate rotation (certwatch.c, issue 17): the certificate, key and CA
 * files of every inbound listener and every service's tls, watched
 * (inotify on their directories, and read every 10 s for the mounts
 * inotify misses) and loaded again when their content changed, once they
 * load (a certificate and key that match): new handshakes use them,
 * connections in flight keep theirs. Control thread only. */
#ifndef MTD_CERTWATCH_H
#define MTD_CERTWATCH_H

struct mtd_control;
struct mtd_certwatch;

/* Watch the files of ctl->rt's config. NULL when out of memory (logged:
 * rotation then needs SIGHUP... which needs the watch: restart). */
struct mtd_certwatch *mtd_certwatch_start(struct mtd_control *ctl);
/* The config changed (a reload applied): watch its files; a service's new
 * contexts were made from the files as they are now. */
void mtd_certwatch_update(struct mtd_certwatch *cw);
/* Read every file again now (SIGHUP). */
void mtd_certwatch_check(struct mtd_certwatch *cw);
void mtd_certwatch_free(struct mtd_certwatch *cw);

#endif
