/* A control plane's routes (a translated RouteConfiguration, lib/xds)
 * bound to the services of one config: what the runtime snapshot carries
 * (struct mtd_rt_xroutes) and policy.c matches calls against.
 *
 * A route's cluster is the cluster of a service with discovery.xds
 * (services are not created from routes); a cluster no such service
 * names is refused, and so is one that only a service of another source
 * is named after (xDS never changes or shadows a static service). A
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

#endif
