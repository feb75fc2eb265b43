/* The runtime form of the configuration: what the rest of maitred reads.
 * Built from the protobuf message (protos/maitred/config/v1/config.proto) by
 * lib/config/, with every default applied and every rule checked, so no
 * consumer ever re-validates or guesses a default. Immutable once built;
 * freed as a whole with mtd_cfg_free(). */
#ifndef MTD_CONFIG_T_H
#define MTD_CONFIG_T_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "authz/authz-t.h"
#include "core/addr.h"
#include "fault/fault-t.h"
#include "health/health-t.h"
#include "lb/lb-t.h"
#include "route/route.h"

#define MTD_CFG_FIELD_PATH_MAX 8
/* inbound listeners at most (a call keeps 1 + its listener's index in a byte) */
#define MTD_CFG_INBOUND_MAX 16
/* workers at most (a call's trace ids hold its worker's id in 10 bits,
 * call/trace.c) */
#define MTD_CFG_WORKERS_MAX 1024
/* discovery.initial_wait: its default (Envoy's initial_fetch_timeout) and
 * its largest value. */
#define MTD_CFG_INITIAL_WAIT_MS     15000
#define MTD_CFG_INITIAL_WAIT_MAX_MS 3600000

struct mtd_cfg_addr {
	char *text; /* as written: "127.0.0.1:50051" */
	char *host; /* "127.0.0.1" / "::1" / "svc.local" */
	uint16_t port;
	union mtd_sockaddr sa; /* resolved at load (first address), AF_INET or AF_INET6 */
	socklen_t salen;
};

enum mtd_cfg_hash_kind {
	MTD_CFG_HASH_NONE = 0,
	MTD_CFG_HASH_HEADER, /* a request metadata value */
	MTD_CFG_HASH_FIELD,  /* a field of the first request message */
};

struct mtd_cfg_hash_key {
	enum mtd_cfg_hash_kind kind;
	char *header;                                /* lower-cased metadata key (HEADER) */
	uint32_t field_path[MTD_CFG_FIELD_PATH_MAX]; /* FIELD: "2.1" = {2, 1} */
	size_t field_depth;
	bool fail_on_missing; /* INVALID_ARGUMENT instead of random */
};

struct mtd_cfg_endpoint {
	struct mtd_cfg_addr addr;
	int32_t weight;           /* default 100 */
	char *zone;               /* Endpoint.zone; NULL = none */
	struct mtd_lb_meta *meta; /* Endpoint.metadata, sorted by key; strings owned */
	size_t n_meta;
};

/* Service.routing / Method.routing (canary and tag routing, lib/lb/layer.c). */
struct mtd_cfg_routing {
	char *header;       /* lower-cased request metadata key; NULL = no routing */
	char *metadata_key; /* endpoint metadata key */
	bool fallback_fail; /* fallback FAIL */
};

/* Service.split / Method.split (lib/lb/split.c). */
struct mtd_cfg_split {
	char *metadata_key;                  /* the layer's key (= routing.metadata_key when both are set) */
	struct mtd_lb_split_weight *weights; /* values owned, sorted by value */
	struct mtd_lb_split_config lb;       /* over weights: what the routing layer gets */
};

/* rate_limit (lib/limit): set = a bucket of its own. */
struct mtd_cfg_rate_limit {
	bool set;
	uint32_t per_second; /* 1..MTD_LIMIT_MAX_RATE */
	uint32_t burst;      /* 1..MTD_LIMIT_MAX_BURST, default per_second */
};

/* fault_injection: percents in [0, 100]. */
struct mtd_cfg_fault_injection {
	bool abort;      /* abort set */
	double abort_percent;
	int abort_status; /* a gRPC status, not OK */
	bool delay;      /* delay set */
	double delay_percent;
	int64_t delay_ms; /* >= 1 */
};

/* File names are resolved against the config file's directory. */
struct mtd_cfg_tls {
	char *ca_file;              /* required, readable at load */
	char *server_name;          /* NULL = endpoint host */
	char *cert_file, *key_file; /* both or neither */
	/* Secure naming: the typed identity (lib/identity) the upstream's
	 * certificate must have, or NULL; server_identity_registry: each
	 * endpoint's own registry record names it (FROM_REGISTRY;
	 * server_identity NULL). */
	char *server_identity;
	bool server_identity_registry;
	/* FROM_REGISTRY only: the patterns (lib/identity) a record's identity
	 * must match one of; none: any. */
	char **allowed_identities;
	size_t n_allowed_identities;
};

/* Where a service's endpoints come from: exactly one source. */
enum mtd_cfg_source {
	MTD_CFG_SOURCE_STATIC = 0, /* `endpoints` */
	MTD_CFG_SOURCE_ETCD,       /* `discovery.etcd` */
	MTD_CFG_SOURCE_DNS,        /* `discovery.dns` */
	MTD_CFG_SOURCE_XDS,        /* `discovery.xds`: the top-level xds server */
};

/* discovery.etcd. File names are resolved against the config file's
 * directory. */
struct mtd_cfg_etcd {
	struct mtd_cfg_addr *endpoints; /* the cluster, >= 1, tried in order */
	size_t n_endpoints;
	char *prefix;            /* non-empty */
	struct mtd_cfg_tls *tls; /* NULL = cleartext */
	char *username;          /* NULL = no authentication */
	char *password_file;     /* set iff username is, readable at load */
};

/* discovery.dns */
struct mtd_cfg_dns {
	char *name; /* the name resolved (A and AAAA), as written */
	uint16_t port;
	int64_t refresh_ms;             /* 5000 */
	struct mtd_cfg_addr *resolvers; /* numeric "ip:port"; none = resolv.conf */
	size_t n_resolvers;
};

/* A certificate provider instance of the gRPC bootstrap file
 * (certificate_providers, plugin file_watcher; gRFC A29): a cluster's
 * UpstreamTlsContext names it instead of files. Strings owned. */
struct mtd_cfg_cert_provider {
	char *name;         /* the instance name, the map's key */
	char *cert_file;    /* certificate_file, with key_file: both or neither */
	char *key_file;     /* private_key_file */
	char *ca_file;      /* ca_certificate_file; NULL = none */
	int64_t refresh_ms; /* refresh_interval (default 10 min): read, not used; certwatch watches the files */
};

/* The bootstrap's certificate_providers, in the file's order. */
struct mtd_cfg_cert_providers {
	struct mtd_cfg_cert_provider *e;
	size_t n;
};

/* xds: the management server services with discovery.xds follow (one ADS
 * stream). From the config's own keys or a gRPC bootstrap file. */
struct mtd_cfg_xds {
	struct mtd_cfg_addr server; /* resolved at load */
	char *node_id;              /* xds.node_id, bootstrap node.id, else Config.node_id; never NULL */
	char *zone;                 /* xds.zone, bootstrap node.locality.zone, else Config.zone; NULL = none */
	struct mtd_cfg_tls *tls;    /* NULL = h2c */
	char *bootstrap;            /* the bootstrap file read (xds.bootstrap or GRPC_XDS_BOOTSTRAP), NULL = none */
	char *listener;             /* xds.listener: the LDS Listener whose routes route calls, NULL = none */
	int64_t initial_wait_ms;    /* xds.initial_wait: a call's wait for the listener's first routes; 0 = none */
	struct mtd_cfg_cert_providers providers; /* the bootstrap's certificate_providers; none without one */
};

/* register[]: an app of this pod kept in etcd. */
struct mtd_cfg_register {
	char *service;               /* "shop.Cart", for logs */
	struct mtd_cfg_addr address; /* numeric; also the instance id in the key */
	int32_t weight;              /* 0..1000000, default 100 */
	int64_t ttl_ms;              /* whole seconds, 2 s..1 h, default 10 s */
	struct mtd_cfg_etcd *etcd;   /* cluster + prefix (+ TLS, auth) */
	bool when_serving;           /* follow grpc.health.v1 Check */
	/* Mesh mode: the entry advertises an inbound listener (its address is
	 * the listener's: the same port, on its host or any host when it binds
	 * the wildcard address): that listener's cert_file, whose identity the
	 * record carries; NULL otherwise. */
	char *identity_cert;
};

struct mtd_cfg_upstream {
	int64_t connect_timeout_ms;      /* 2000 */
	int64_t idle_timeout_ms;         /* 300000 */
	int64_t keepalive_interval_ms;   /* 30000 */
	int64_t keepalive_timeout_ms;    /* 10000 */
	uint32_t max_connections;        /* 4 */
	uint32_t max_concurrent_streams; /* 1000 */
	uint32_t max_pending;            /* 1024 */
	int64_t write_timeout_ms;        /* 30000 */
	int64_t max_connection_age_ms;   /* 0 = none; else >= 1000 */
};

struct mtd_cfg_method {
	char *name;                     /* "GetCart" */
	double trace_sample;            /* tracing.sample: the method's own, or the service's */
	struct mtd_cfg_routing routing; /* the method's own (routing_own), or the service's (shared) */
	bool routing_own;
	struct mtd_lb_layer_config layer; /* resolved like the service's, with this routing */
	struct mtd_lb_config lb;          /* the method's own, or a copy of the service's */
	struct mtd_cfg_hash_key hash_key; /* the method's own, or the service's */
	struct mtd_fault_policy fault;    /* the method's own, or a copy of the service's
	                                     (fallback strings then shared: owned by the
	                                     service unless fault_own) */
	bool fault_own;
	/* Traffic policy: the method's own or the service's. */
	struct mtd_cfg_split *split; /* NULL = none; owned when split_own, else the service's */
	bool split_own;
	struct mtd_cfg_rate_limit rate_limit; /* set: the method's own bucket; else the service's applies */
	struct mtd_cfg_fault_injection fault_injection;
};

/* What a service's config alone says, never a control plane (struct
 * mtd_cfg_service.local): its name and where its endpoints come from, how
 * calls reach it (:path, :authority), and its call policy (hashing,
 * routing layer, retries and hedging, health checks, traffic policy,
 * tracing). An override (sidecar/control/runtime-t.h struct mtd_rt_over)
 * shares it with its base. */
struct mtd_cfg_service_local {
	char *name; /* "pkg.Service" or "*"; an inbound app's: "inbound:LISTEN" */
	int inbound; /* the inbound entry whose app it is, or -1 (a user's service) */
	enum mtd_cfg_source source;
	struct mtd_cfg_endpoint *endpoints; /* source STATIC */
	size_t n_endpoints;                 /* >= 1 for STATIC, else 0 */
	struct mtd_cfg_etcd *etcd;          /* source ETCD, else NULL */
	struct mtd_cfg_dns *dns;            /* source DNS, else NULL */
	char *xds_cluster;                  /* source XDS: the CDS cluster name, else NULL */
	/* discovery.initial_wait: how long a call may wait for the first
	 * endpoint set of a source that has not answered yet (0 = not at
	 * all; STATIC: 0). */
	int64_t initial_wait_ms;
	/* :authority sent upstream: NULL and !authority_from_endpoint = the
	 * app's; else this literal, or the endpoint's name (tls->server_name,
	 * else the address as written). */
	char *authority; /* with authority_from_endpoint below */
	/* Upstream statuses that are the endpoint's failure (outlier ejection
	 * and the balancer's figures); bit per code. */
	uint32_t failure_statuses;
	int mirror; /* services[] index of mirror.service, -1 = none; mirror_percent below */
	/* Not in the file: created for a cluster a control plane's route
	 * names (mtd_cfg_with_xds_services), named after it; such services
	 * come last among the first n_routed. */
	bool xds_created;
	bool authority_from_endpoint; /* with authority above */
	/* Reached by :path (its name is a gRPC service name or "*"); false:
	 * only routes or mirrors reach it (any name, e.g. "beta-pool"). */
	bool by_path;
	struct mtd_cfg_hash_key hash_key;
	struct mtd_cfg_routing routing;
	/* The routing layer's options, resolved (lib/lb/layer.c): zone and
	 * node_id point into struct mtd_cfg, metadata_key into routing. */
	struct mtd_lb_layer_config layer;
	struct mtd_fault_policy fault; /* default FAILFAST */
	struct mtd_fault_budget_cfg retry_budget;
	struct mtd_hc_config health_check;
	/* Traffic policy */
	struct mtd_cfg_rate_limit rate_limit;
	struct mtd_cfg_fault_injection fault_injection;
	struct mtd_cfg_split *split; /* NULL = none */
	double mirror_percent;       /* 0..100 */
	/* tracing.sample for its calls: its own, else the top-level's (0 when
	 * there is no tracing block). */
	double trace_sample;
};

/* A service: what a control plane may override (its cluster's policy,
 * connection options, circuit limits, outlier detection, TLS), and the
 * rest through local. A snapshot's copy of it (struct mtd_rt_over) is
 * what every override costs: keep it to what a cluster sets or the data
 * path reads beside it. */
struct mtd_cfg_service {
	struct mtd_lb_config lb;
	struct mtd_cfg_tls *tls;        /* NULL = h2c upstream */
	struct mtd_cfg_method *methods; /* sorted by name (strcmp) */
	size_t n_methods;
	struct mtd_cfg_upstream upstream;
	/* What only this config sets (never a control plane), out of line
	 * so that an override shares it with its base: one of struct
	 * mtd_cfg's service_locals. Never NULL once built. */
	struct mtd_cfg_service_local *local;
	struct mtd_outlier_config outlier; /* enabled = outlier_detection set */
	bool outlier_method_scoped;
	struct mtd_circuit_config circuit;
};

/* tracing: W3C trace context through calls, spans exported over OTLP/HTTP
 * (protobuf bodies) to otlp.endpoint. */
struct mtd_cfg_tracing {
	char *endpoint;          /* as written */
	bool https;
	char *host;              /* a name or an IP literal (no brackets) */
	uint16_t port;           /* 4318 when not written */
	char *path;              /* "/v1/traces" when not written */
	struct mtd_cfg_tls *tls; /* https: the collector's CA, server_name, client certificate */
	char **header_names;     /* otlp.headers, names lower-cased, sorted by name */
	char **header_values;
	size_t n_headers;
	int64_t timeout_ms;      /* otlp.timeout, 5000 */
	double sample;           /* 0.01 */
	char *service_name;      /* service_name, else node_id; never NULL */
};

struct mtd_cfg_downstream {
	uint32_t max_concurrent_streams; /* 1024 */
	uint32_t initial_window_size;    /* 1 MiB */
	uint32_t max_header_list_size;   /* 64 KiB */
	uint32_t max_message_size;       /* 64 MiB */
	uint32_t reset_burst;            /* 10000 */
	uint32_t reset_rate;             /* 1000 */
	int64_t idle_timeout_ms;         /* 600000 */
	uint32_t max_connections;        /* 10000, per process */
	int64_t write_timeout_ms;        /* 30000 */
	int64_t preface_timeout_ms;      /* 10000 */
	int64_t header_timeout_ms;       /* 10000 */
	uint32_t max_buffered_response;  /* 64 MiB, per connection */
};

/* inbound[]: a listener terminating mTLS from other sidecars, its calls
 * authorized, then handed to the local app over h2c. The app is served as
 * a service of its own: services[service], built by the loader after the
 * user's (internal: no route reaches it, mtd_cfg.n_routed). */
struct mtd_cfg_inbound {
	struct mtd_cfg_addr listen;
	struct mtd_cfg_addr app;
	/* Resolved against the config file's directory, readable at load. */
	char *cert_file, *key_file;
	char *client_ca_file; /* NULL = no client certificate asked for */
	uint32_t max_concurrent_calls; /* 0 = no limit */
	uint32_t max_connections;      /* 1024, this listener's, over every worker */
	int64_t max_connection_age_ms; /* 0 = no limit */
	struct mtd_authz_policy authz;
	size_t service; /* its app's service: cfg->services[service] */
};

/* log.access: one line per finished call. */
struct mtd_cfg_access_log {
	char *path;    /* "-" = stderr, else a file appended to */
	double sample; /* in [0, 1], default 1.0 */
};

struct mtd_cfg_log {
	bool json;                         /* format JSON (default TEXT) */
	int level;                         /* enum mtd_log_level, or -1 = unset (info) */
	struct mtd_cfg_access_log *access; /* NULL = no access log */
};

struct mtd_cfg {
	char *source;               /* file name, or "<embedded default>" */
	struct mtd_cfg_addr listen; /* default 127.0.0.1:15001 */
	struct mtd_cfg_addr *admin; /* NULL = disabled; loopback unless admin_allow_remote */
	bool admin_allow_remote;
	struct mtd_cfg_log log;
	/* The Config message as loaded (serialized protobuf), for the admin
	 * endpoint's /config_dump: every field as written, redacted there. */
	uint8_t *pb;
	size_t pb_len;
	unsigned workers;           /* resolved: 0 in the file = CPU count */
	struct mtd_cfg_downstream downstream;
	int64_t drain_timeout_ms;     /* 15000 */
	uint64_t replay_buffer_total; /* per worker, 64 MiB */
	/* The user's services (the first n_routed, what :path routes to),
	 * then one per inbound entry (its app, mtd_cfg_inbound.service). */
	struct mtd_cfg_service *services;
	size_t n_services;
	/* services[i].local, owned: one array beside services[]. */
	struct mtd_cfg_service_local *service_locals;
	/* routes, in order: strings owned, `to` resolved to a services[]
	 * index. */
	struct mtd_route_rule *routes;
	size_t n_routes;
	size_t n_routed;
	struct mtd_cfg_inbound *inbound; /* `inbound` */
	size_t n_inbound;
	struct mtd_cfg_register *registers; /* `register` */
	size_t n_registers;
	char *zone;    /* NULL = none */
	char *node_id; /* Config.node_id, else the host name; never NULL */
	struct mtd_cfg_tracing *tracing; /* NULL = no tracing */
	struct mtd_cfg_xds *xds; /* `xds`, NULL = none */
};

/* Every problem found in one load, in file order. Each message reads
 * "FILE:LINE:COL: field.path: what is wrong" (line/col omitted when the
 * input has none, e.g. binary protobuf). */
struct mtd_cfg_errors {
	char **msgs;
	size_t n;
};

enum mtd_cfg_format {
	MTD_CFG_FORMAT_AUTO = 0, /* by extension, else by content */
	MTD_CFG_FORMAT_YAML,
	MTD_CFG_FORMAT_JSON,
	MTD_CFG_FORMAT_BINARY, /* serialized maitred.config.v1.Config */
};

#endif
