/* Routing a call to a configured service: by the top-level routes (a
 * match on service, method and a request header names the services[]
 * entry), else by its :path. Pure, no I/O. */
#ifndef MTD_ROUTE_H
#define MTD_ROUTE_H

#include <stddef.h>

struct mtd_regex;

/* "/pkg.Service/Method" split into its parts (pointers into the input,
 * path the whole of it). */
struct mtd_route_path {
	const char *path;
	size_t path_len;
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

/* names[i] is service i; "*" marks the catch-all; NULL leaves entry i
 * out (one only routes reach). NULL on ENOMEM. */
struct mtd_route_table *mtd_route_table_new(const char *const *names, size_t n);
void mtd_route_table_free(struct mtd_route_table *t);

/* Index of the service named exactly svc, else of "*", else -1. */
int mtd_route_lookup(const struct mtd_route_table *t, const char *svc, size_t len);

/* ---- routes (Config.routes) --------------------------------------------- */

/* How a route's header condition matches the request's value. */
enum mtd_route_header_kind {
	MTD_ROUTE_HEADER_NONE = 0, /* no condition */
	MTD_ROUTE_HEADER_VALUE,    /* the value is exactly `value` */
	MTD_ROUTE_HEADER_PREFIX,   /* the value starts with `value` */
	MTD_ROUTE_HEADER_PRESENT,  /* the header is there, whatever its value */
	MTD_ROUTE_HEADER_REGEX,    /* the whole value matches `value_re` */
};

/* One route: match {service, method, path, header} -> to. Strings and
 * compiled patterns are borrowed (their owner - the config, or an xDS
 * route - outlives every reader of the rule) and strings need not be
 * NUL-terminated except header, which is passed to the caller's lookup.
 * A rule with path_re usually has service "*" (a pattern may match
 * several services' calls) or its virtual host's service. */
struct mtd_route_rule {
	const char *service; /* "*" = any service */
	size_t service_len;
	const char *method; /* NULL = any method */
	size_t method_len;
	const char *header; /* lower-case request metadata key; with kind != NONE */
	enum mtd_route_header_kind kind;
	const char *value; /* VALUE, PREFIX */
	size_t value_len;
	int to;                           /* the services[] entry (the caller's index) */
	const struct mtd_regex *path_re;  /* NULL, or the whole :path matches it */
	const struct mtd_regex *value_re; /* REGEX */
};

/* The request's value of header `name` (lower case, NUL-terminated):
 * its bytes and *len, or NULL when the request has none. */
typedef const char *mtd_route_header_fn(void *arg, const char *name, size_t *len);

/* Index of the first of rules[0..n) that matches the call (its :path p,
 * and its headers through hdr(arg, ...), asked only of rules whose
 * service, method and path pattern match), or -1: first match wins.
 * O(n) rules, each pattern linear in what it reads; no allocation. */
int mtd_route_match(const struct mtd_route_rule *rules, size_t n, const struct mtd_route_path *p,
                    mtd_route_header_fn *hdr, void *arg);

#endif
