/* xDS resources as maitred keeps them: a Cluster (CDS) and a
 * ClusterLoadAssignment (EDS) translated into maitred's own terms, the
 * protobuf dropped. Pure data; lib/xds/xds.h translates, the ADS client
 * (sidecar/control/xds_clusters.c) keeps the last good one of each name.
 *
 * What maps onto what (and what is refused) is written on the
 * translators in xds.h. */
#ifndef MTD_XDS_T_H
#define MTD_XDS_T_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config-t.h"
#include "health/health-t.h"
#include "lb/lb-t.h"
#include "route/route.h"

#define MTD_XDS_TYPE_CLUSTER  "type.googleapis.com/envoy.config.cluster.v3.Cluster"
#define MTD_XDS_TYPE_ENDPOINT "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
#define MTD_XDS_TYPE_TLS      "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
#define MTD_XDS_TYPE_LISTENER "type.googleapis.com/envoy.config.listener.v3.Listener"
#define MTD_XDS_TYPE_ROUTE    "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
#define MTD_XDS_TYPE_HCM                                                                                             \
	"type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
#define MTD_XDS_TYPE_ROUTER "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
#define MTD_XDS_TYPE_FAULT  "type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault"
#define MTD_XDS_TYPE_FILTER_CONFIG "type.googleapis.com/envoy.config.route.v3.FilterConfig"

/* A resource name (cluster, EDS service name) is at most this long: a
 * longer one is refused rather than kept. */
#define MTD_XDS_NAME_MAX 1024
/* The most priorities a ClusterLoadAssignment may use (Envoy's bound). */
#define MTD_XDS_MAX_PRIORITY 128
/* Endpoint weights after locality shares are applied stay within
 * [1, MTD_XDS_WEIGHT_SCALE] (maitred's registry weight range). */
#define MTD_XDS_WEIGHT_SCALE 1000000
/* A RouteConfiguration translates into at most this many routes (over
 * all its virtual hosts): each call walks them in order, so a bigger
 * table is refused rather than slowing every call. */
#define MTD_XDS_ROUTES_MAX 1024
/* A weighted_clusters action names at most this many clusters. */
#define MTD_XDS_WEIGHTED_MAX 64

/* The upstream TLS of a cluster's transport_socket (UpstreamTlsContext):
 * files named in it, or those of the bootstrap's certificate provider
 * instances it names (gRFC A29). Strings owned. */
struct mtd_xds_tls {
	char *ca_file;   /* validation_context.trusted_ca.filename, or the CA instance's file; required */
	char *cert_file; /* tls_certificates[0], or the identity instance's files: both or neither */
	char *key_file;
	char *ca_instance;     /* ca_certificate_provider_instance's name; NULL = trusted_ca */
	char *cert_instance;   /* tls_certificate_provider_instance's name; NULL = none or tls_certificates */
	char *server_name;     /* sni; NULL = the endpoint's address */
	char *server_identity; /* one exact SAN matcher as a typed identity ("spiffe://...", "dns:NAME") */
};

/* A Cluster in maitred's terms. Strings owned (mtd_xds_cluster_clear). */
struct mtd_xds_cluster {
	char *name;
	char *eds_name; /* eds_cluster_config.service_name, else name */
	/* lb_policy: ops is maitred's strategy (registry name in lb-t.h);
	 * choice_count (LEAST_REQUEST), table_size (MAGLEV) and warmup set
	 * from the cluster; ring_min / ring_max (RING_HASH) are turned into
	 * ring_points per endpoint when a set is built (mtd_xds_ring_points). */
	struct mtd_lb_config lb;
	uint64_t ring_min, ring_max;
	int64_t connect_timeout_ms;        /* 0 = the service's own */
	struct mtd_circuit_config circuit; /* thresholds of priority DEFAULT; 0 = none */
	struct mtd_outlier_config outlier; /* enabled = outlier_detection set */
	struct mtd_xds_tls *tls;           /* NULL = h2c */
	/* transport_socket_matches set (not read, as gRPC's clients do not)
	 * and no transport_socket: h2c where the control plane may mean TLS. */
	bool tls_only_in_matches;
};

/* One endpoint of an assignment, compact: the text is in the
 * assignment's string block. */
struct mtd_xds_ep {
	const char *address; /* canonical numeric "ip:port" / "[v6]:port" */
	const char *zone;    /* the locality's zone, NULL = none */
	int32_t weight;      /* 1..MTD_XDS_WEIGHT_SCALE, locality share applied */
	/* address, parsed (the one parse; mtd_xds_ep_sockaddr) */
	uint16_t port;
	bool v6;
	uint8_t ip[16]; /* network order; IPv4: the first 4 */
};

/* A ClusterLoadAssignment in maitred's terms: the endpoints of its
 * priority in use (the lowest number with an endpoint that may be
 * picked). One allocation for eps and their text (mtd_xds_cla_free). */
struct mtd_xds_cla {
	char *name;         /* cluster_name */
	uint32_t priority;  /* the priority the endpoints are of */
	uint32_t n_skipped; /* endpoints not picked (health_status, other priorities) */
	bool locality_weighted; /* a locality has load_balancing_weight: the weights give each its share */
	size_t n;
	struct mtd_xds_ep eps[];
};

/* What a route does with the calls it matches. */
struct mtd_xds_action {
	/* The clusters the calls go to: one (RouteAction.cluster, weight 1)
	 * or weighted_clusters' (weights as given, their sum in
	 * (0, UINT32_MAX]); n_clusters 0 = none: the calls fail UNAVAILABLE
	 * (a virtual host's calls that none of its routes matched). */
	char **clusters;
	uint32_t *weights;
	size_t n_clusters;
	/* The call's deadline is at most this (max_stream_duration's
	 * grpc_timeout_header_max, else its max_stream_duration, else the
	 * route's timeout); 0 = no cap. */
	int64_t deadline_cap_ms;
	/* retry_policy as FAILOVER: retry set when it retries at all (a
	 * gRPC code in retry_on and num_retries >= 1). */
	bool retry;
	uint32_t retries;          /* 1..MTD_FAULT_RETRIES_MAX */
	uint32_t retry_on;         /* bit per gRPC status */
	int64_t per_try_timeout_ms; /* 0 = none */
	int64_t backoff_base_ms, backoff_max_ms;
	char *hash_header; /* hash_policy's header, lower case; NULL = none */
};

/* An HTTP fault filter's config, or an override of it, by the filter's
 * name (the key of typed_per_filter_config), in maitred's
 * fault_injection terms (neither abort nor delay: no fault). */
struct mtd_xds_fault {
	char *filter; /* owned; NULL = no fault filter (a listener's) */
	struct mtd_cfg_fault_injection fi;
};

/* One route: the call it takes (a maitred route rule whose strings point
 * into this structure's own: service, method, header, value) and what it
 * does (rule.to is the route's own index). */
struct mtd_xds_route {
	struct mtd_route_rule rule;
	struct mtd_xds_action act;
	char *name; /* Route.name, NULL = none (for logs) */
	/* The fault filter overrides the route's calls take, by filter
	 * name: the route's own typed_per_filter_config entries, then its
	 * virtual host's for the names the route has none of. */
	struct mtd_xds_fault *faults;
	size_t n_faults;
};

/* A RouteConfiguration in maitred's terms: the routes of every usable
 * virtual host in the order a call tries them (mtd_xds_routes_parse).
 * Everything owned (mtd_xds_routes_free). */
struct mtd_xds_routes {
	char *name;
	struct mtd_xds_route *routes;
	size_t n;
};

/* A Listener's connection manager: where its routes come from. Exactly
 * one of rds_name (a RouteConfiguration to subscribe to by RDS) and
 * routes (inline) is set. Owned (mtd_xds_listener_clear). */
struct mtd_xds_listener {
	char *name;
	char *rds_name;
	struct mtd_xds_routes *routes;
	struct mtd_xds_fault fault; /* its http_filters' fault filter, if any */
};

#endif
