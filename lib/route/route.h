/* Routing a call by its :path to a configured service. Pure, no I/O. */
#ifndef MTD_ROUTE_H
#define MTD_ROUTE_H

#include <stddef.h>

/* "/pkg.Service/Method" split into its parts (pointers into the input). */
struct mtd_route_path {
	const char *service;
	size_t service_len;
	const char *method;
	size_t method_len;
};

/* Parse a gRPC :path (PROTOCOL-HTTP2: Path = "/" Service-Name "/"
 * {method name}). Both parts must be non-empty and free of '/', '?', '#'.
 * Returns 0 or -EINVAL. */
int mtd_route_parse_path(const char *path, size_t len, struct mtd_route_path *out);

/* Service name -> index table, built once per config, read by every worker
 * without locks. Names are borrowed and must outlive the table. */
struct mtd_route_table;

/* names[i] is service i; "*" marks the catch-all. NULL on ENOMEM. */
struct mtd_route_table *mtd_route_table_new(const char *const *names, size_t n);
void mtd_route_table_free(struct mtd_route_table *t);

/* Index of the service named exactly svc, else of "*", else -1. */
int mtd_route_lookup(const struct mtd_route_table *t, const char *svc, size_t len);

#endif
