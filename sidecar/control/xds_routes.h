/* A control plane's routes (a translated RouteConfiguration, lib/xds)
 * bound to the services of one config: what the runtime snapshot carries
 * (struct mtd_rt_xroutes) and policy.c matches calls against.
 *
 * A route's cluster is the cluster of a service with discovery.xds: the
 * file's, or one created for it (xds_listener.c, mtd_cfg_with_xds_services); a
 * cluster that only a service of another source is named after is
 * refused (xDS never changes or shadows a static service). A
 * route's retry_policy becomes FAILOVER over its service's own fault
 * policy; a header hash_policy is the hash key of the calls the route
 * takes (struct mtd_rt_xroute.hash_key; without one, the service's).
 * With the listener's fault filter, each route's calls take its
 * override of it, else its virtual host's, else the filter's own config
 * (struct mtd_rt_xroute.fault_injection; none that aborts or delays: the
 * service's own fault_injection).
 *
 * Control thread. */
#ifndef MTD_XDS_ROUTES_H
#define MTD_XDS_ROUTES_H

#include <stdbool.h>
#include <stddef.h>

struct mtd_cfg;
struct mtd_rt_xroutes;
struct mtd_xds_routes;
struct mtd_xds_fault;

/* A translated RouteConfiguration shared by the client (its last good)
 * and every mtd_rt_xroutes bound from it; freed with the last holder. */
struct mtd_xds_routes_box {
	unsigned refs;
	struct mtd_xds_routes *r;
};

/* A box of one reference owning r (freed when out of memory: NULL). */
struct mtd_xds_routes_box *mtd_xds_routes_box_new(struct mtd_xds_routes *r);
void mtd_xds_routes_box_put(struct mtd_xds_routes_box *b);

/* The routes of box bound to cfg's services under the listener's fault
 * filter (NULL, or filter->filter NULL: none): a new mtd_rt_xroutes (one
 * reference, holding one on box), or NULL with the reason in why (a
 * NACK's text: which route and cluster), or "out of memory". */
struct mtd_rt_xroutes *mtd_xds_routes_bind(const struct mtd_cfg *cfg, struct mtd_xds_routes_box *box,
                                           const struct mtd_xds_fault *filter, char *why, size_t whylen);

/* The clusters the routes r name that no service of cfg's file is named
 * after or follows: those a service is created for (a route naming a
 * static service's name is refused when bound instead). Sorted, without
 * repeats, pointing into r: *out (free it), *n. 0 or -ENOMEM. */
int mtd_xds_routes_created(const struct mtd_cfg *cfg, const struct mtd_xds_routes *r, const char ***out, size_t *n);
/* cfg's created services (xds_created) are exactly the n sorted names. */
bool mtd_xds_routes_created_same(const struct mtd_cfg *cfg, const char *const *names, size_t n);

#endif
