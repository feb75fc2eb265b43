/* xDS resources as maitred keeps them: a Cluster (CDS) and a
 * ClusterLoadAssignment (EDS) translated into maitred's own terms, the
 * protobuf dropped. Pure data; lib/xds/xds.h translates, the ADS client
 * (sidecar/control/xds.c) keeps the last good one of each name.
 *
 * What maps onto what (and what is refused) is written on the
 * translators in xds.h. */
#ifndef MTD_XDS_T_H
#define MTD_XDS_T_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "health/health-t.h"
#include "lb/lb-t.h"

#define MTD_XDS_TYPE_CLUSTER  "type.googleapis.com/envoy.config.cluster.v3.Cluster"
#define MTD_XDS_TYPE_ENDPOINT "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
#define MTD_XDS_TYPE_TLS      "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"

/* A resource name (cluster, EDS service name) is at most this long: a
 * longer one is refused rather than kept. */
#define MTD_XDS_NAME_MAX 1024
/* The most priorities a ClusterLoadAssignment may use (Envoy's bound). */
#define MTD_XDS_MAX_PRIORITY 128
/* Endpoint weights after locality shares are applied stay within
 * [1, MTD_XDS_WEIGHT_SCALE] (maitred's registry weight range). */
#define MTD_XDS_WEIGHT_SCALE 1000000

/* The upstream TLS of a cluster's transport_socket (UpstreamTlsContext,
 * file names only). Strings owned. */
struct mtd_xds_tls {
	char *ca_file;   /* validation_context.trusted_ca.filename; required */
	char *cert_file; /* tls_certificates[0]: both or neither */
	char *key_file;
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
};

/* One endpoint of an assignment, compact: the text is in the
 * assignment's string block. */
struct mtd_xds_ep {
	const char *address; /* canonical numeric "ip:port" / "[v6]:port" */
	const char *zone;    /* the locality's zone, NULL = none */
	int32_t weight;      /* 1..MTD_XDS_WEIGHT_SCALE, locality share applied */
};

/* A ClusterLoadAssignment in maitred's terms: the endpoints of its
 * priority in use (the lowest number with an endpoint that may be
 * picked). One allocation for eps and their text (mtd_xds_cla_free). */
struct mtd_xds_cla {
	char *name;         /* cluster_name */
	uint32_t priority;  /* the priority the endpoints are of */
	uint32_t n_skipped; /* endpoints not picked (health_status, other priorities) */
	size_t n;
	struct mtd_xds_ep eps[];
};

#endif
