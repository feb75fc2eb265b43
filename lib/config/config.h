/* Loading and validating the configuration. Control thread only. */
#ifndef MTD_CONFIG_H
#define MTD_CONFIG_H

#include "config/config-t.h"

/* Load, map onto the protobuf message, validate and build the runtime form.
 * path NULL = the embedded default (mtd_cfg_default_yaml). On success returns
 * 0 and *out owns a new config. On failure returns -EINVAL (or -ENOMEM,
 * -errno for I/O), *out is NULL and errs lists every problem found; the
 * caller frees errs with mtd_cfg_errors_clear(). errs must start zeroed (or
 * cleared); messages are appended to it, sorted by place in the file.
 *
 * fmt AUTO: by extension (.yaml/.yml, .json, .pb/.bin/.binpb), else by
 * content (invalid UTF-8 or control bytes = binary; '{' first = JSON; else
 * YAML). The accepted YAML/JSON is documented at the top of pbjson.c.
 * Relative TLS file names are resolved against the directory of the config
 * file (against the working directory for mtd_cfg_load_buffer) and stored
 * resolved. Host names are resolved (getaddrinfo) during the load, so a
 * load can block on DNS. */
int mtd_cfg_load_file(const char *path, enum mtd_cfg_format fmt, struct mtd_cfg **out, struct mtd_cfg_errors *errs);
/* Same from memory; name is used in messages in place of a file name. */
int mtd_cfg_load_buffer(const char *name, const void *data, size_t len, enum mtd_cfg_format fmt, struct mtd_cfg **out,
                        struct mtd_cfg_errors *errs);
/* base's config as it was loaded (base->pb, names resolved against the
 * directory of base->source again), without the services created
 * before and with one created for each of the n clusters, as if the file
 * had {name: C, discovery: {xds: {cluster: C}}} last among its services
 * (every other option its default; xds_created set). The caller passes
 * only clusters no service of the file is named after or follows.
 * Returns as mtd_cfg_load_file. */
int mtd_cfg_with_xds_services(const struct mtd_cfg *base, const char *const *clusters, size_t n,
                              struct mtd_cfg **out, struct mtd_cfg_errors *errs);
void mtd_cfg_free(struct mtd_cfg *cfg);
void mtd_cfg_errors_clear(struct mtd_cfg_errors *errs);

/* The method entry of svc named `method` (len bytes, need not be
 * NUL-terminated), or NULL (use the service's lb). O(log n_methods): the
 * methods are sorted by name. Any thread; the config is immutable. */
const struct mtd_cfg_method *mtd_cfg_service_method(const struct mtd_cfg_service *svc, const char *method, size_t len);

/* The bootstrap's certificate provider instance named `name`, NULL when
 * there is none (ps may be NULL: no bootstrap). */
const struct mtd_cfg_cert_provider *mtd_cfg_cert_provider_find(const struct mtd_cfg_cert_providers *ps,
                                                               const char *name);
/* A deep copy of src into *dst (malloc'd; mtd_cfg_cert_providers_fini
 * frees it): 0, or -ENOMEM with *dst empty. */
int mtd_cfg_cert_providers_copy(struct mtd_cfg_cert_providers *dst, const struct mtd_cfg_cert_providers *src);
/* The same instances, files and intervals, in the same order. */
bool mtd_cfg_cert_providers_same(const struct mtd_cfg_cert_providers *a, const struct mtd_cfg_cert_providers *b);
void mtd_cfg_cert_providers_fini(struct mtd_cfg_cert_providers *ps);

/* The embedded default: listen 127.0.0.1:15001, service "*" round robin
 * over 127.0.0.1:50051, :50052, :50053 (what deploy/demo.sh starts). */
extern const char mtd_cfg_default_yaml[];

#endif
