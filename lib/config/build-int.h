/* Internals of the build (lib/config/build*.c): the state one build
 * carries, the helpers every section shares, and each section's entry
 * points. Nothing outside lib/config/build*.c includes this.
 *
 * Every function takes the builder of the build in progress: errors go to
 * b->d, at the place the value was written and with its path in the
 * config ("services[2].lb.policy"); a failed allocation sets b->d->oom and
 * the build returns -ENOMEM. A section never stops at the first error, so
 * a file's problems are reported together. */
#ifndef MTD_CONFIG_BUILD_INT_H
#define MTD_CONFIG_BUILD_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config-int.h"

typedef Maitred__Config__V1__Config PbConfig;
typedef Maitred__Config__V1__Service PbService;
typedef Maitred__Config__V1__LoadBalancing PbLb;
typedef Maitred__Config__V1__Method PbMethod;
typedef Maitred__Config__V1__HashKey PbHashKey;
typedef Maitred__Config__V1__Warmup PbWarmup;
typedef Maitred__Config__V1__Tls PbTls;
typedef Maitred__Config__V1__Endpoint PbEndpoint;
typedef Maitred__Config__V1__Upstream PbUpstream;
typedef Maitred__Config__V1__Downstream PbDownstream;
typedef Maitred__Config__V1__Fault PbFault;
typedef Maitred__Config__V1__RetryBudget PbRetryBudget;
typedef Maitred__Config__V1__OutlierDetection PbOutlier;
typedef Maitred__Config__V1__CircuitBreaker PbCircuit;
typedef Maitred__Config__V1__HealthCheck PbHealthCheck;
typedef Maitred__Config__V1__Discovery PbDiscovery;
typedef Maitred__Config__V1__EtcdDiscovery PbEtcd;
typedef Maitred__Config__V1__Register PbRegister;
typedef Maitred__Config__V1__DnsDiscovery PbDns;
typedef Maitred__Config__V1__XdsDiscovery PbXdsDiscovery;
typedef Maitred__Config__V1__Xds PbXds;
typedef Maitred__Config__V1__Log PbLog;
typedef Google__Protobuf__Duration PbDuration;
typedef Maitred__Config__V1__Routing PbRouting;
typedef Maitred__Config__V1__Locality PbLocality;
typedef Maitred__Config__V1__Subset PbSubset;
typedef Maitred__Config__V1__Split PbSplit;
typedef Maitred__Config__V1__SplitGuard PbSplitGuard;
typedef Maitred__Config__V1__RateLimit PbRateLimit;
typedef Maitred__Config__V1__FaultInjection PbFaultInjection;
typedef Maitred__Config__V1__Route PbRoute;
typedef Maitred__Config__V1__Inbound PbInbound;
typedef Maitred__Config__V1__InboundTls PbInboundTls;
typedef Maitred__Config__V1__Authorization PbAuthz;
typedef Maitred__Config__V1__AuthorizationRule PbAuthzRule;
typedef Maitred__Config__V1__Tracing PbTracing;
typedef Maitred__Config__V1__TracingOverride PbTracingOverride;

#define H2_WINDOW_MAX      2147483647u /* RFC 9113 §6.9.1: 2^31 - 1 */
#define HOST_NAME_TEXT_MAX 253         /* RFC 1035 §2.3.4, as dotted text */

/* One build in progress. */
struct builder {
	struct mtd_cfg__diag *d;
	const PbConfig *root; /* the whole message (which entries routes and mirrors reach) */
	const char *basedir;
	unsigned workers;
	const char *zone, *node_id; /* struct mtd_cfg's, for the services */
	const struct mtd_cfg_tracing *tracing; /* struct mtd_cfg's (NULL: none), for the services */
};

/* What mtd_cfg__build_lb learnt about one lb block, for the service-wide checks. */
struct lb_info {
	const char *policy; /* enum value name */
	int policy_num;
	unsigned caps; /* all bits when the policy is unavailable, to
	                           avoid a cascade of follow-up errors */
};

/* Record an error at `where` with the field path `path` (printf format). */
#define BERR(where, path, ...) mtd_cfg__error(b->d, where, path, __VA_ARGS__)

/* What a zero duration means for a field (mtd_cfg__dur_ms). */
enum zero_rule {
	ZERO_IS_ERROR,   /* must be at least 1ms */
	ZERO_ALLOWED,    /* 0 means 0 */
	ZERO_IS_DEFAULT, /* documented: 0 is replaced by the default */
};

/* ---- shared helpers (build_common.c) ------------------------------------ */

/* Where field (its .proto name; NULL = the message) of msg was written;
 * msg NULL: where fallback was. */
struct mtd_cfg__mark mtd_cfg__at(struct builder *b, const void *msg, const char *field, const void *fallback);
/* path + "." + leaf into buf (truncated if it must be); returns buf. */
const char *mtd_cfg__sub(char *buf, size_t size, const char *path, const char *leaf);
/* A copy of s, or NULL with b->d->oom set. */
char *mtd_cfg__dup_or_oom(struct builder *b, const char *s);
/* dur in milliseconds; def when dur is NULL or refused (error recorded);
 * zero says what 0 means. */
int64_t mtd_cfg__dur_ms(struct builder *b, const PbDuration *dur, int64_t def, enum zero_rule zero,
                        struct mtd_cfg__mark where, const char *path);
/* n bytes of s are host name characters (letters, digits, '-', '.', '_'), n > 0. */
bool mtd_cfg__host_name_ok(const char *s, size_t n);
/* Parse "HOST:PORT" and resolve it (first result) into a; numeric: the
 * host must be an IP literal. 0, or -1 with the error recorded; a owns
 * its strings either way. */
int mtd_cfg__build_addr_as(struct builder *b, const char *text, struct mtd_cfg__mark where, const char *path,
                           struct mtd_cfg_addr *a, bool numeric);
/* mtd_cfg__build_addr_as() for a host name or an IP literal. */
int mtd_cfg__build_addr(struct builder *b, const char *text, struct mtd_cfg__mark where, const char *path,
                        struct mtd_cfg_addr *a);
/* x and y name the same host (case aside, or the same IP literal) and port. */
bool mtd_cfg__same_endpoint(const struct mtd_cfg_addr *x, const struct mtd_cfg_addr *y);
/* n bytes of s are a protobuf identifier (a method name). */
bool mtd_cfg__ident_ok(const char *s, size_t n);
/* s is a fully-qualified gRPC service name ("package.Service"). */
bool mtd_cfg__service_name_ok(const char *s);
/* s (lower case) is an HTTP/2 field name (RFC 9110 token). */
bool mtd_cfg__header_name_ok(const char *s);
/* A request metadata key as written (hash_key.header, routing.header,
 * routes' header names): lower-cased like HTTP/2's field names, an error
 * at where/path when it is a pseudo-header or not a field name. The copy
 * (NULL: out of memory, noted), even when refused. */
char *mtd_cfg__metadata_key(struct builder *b, const char *text, struct mtd_cfg__mark where, const char *path);
/* v, or def when v is 0 or above max (error recorded at m's field). */
uint32_t mtd_cfg__u32_limit(struct builder *b, uint32_t v, uint32_t def, uint32_t max, const void *m, const char *field,
                            const char *path);
/* m's `percent` (a DoubleValue in 0..100); 100 when unset or refused. */
double mtd_cfg__percent_of(struct builder *b, const Google__Protobuf__DoubleValue *v, const void *m, const char *path);

/* ---- sections: each fills its part of struct mtd_cfg, errors recorded ---- */

/* build_service.c: services[si] into out (name, endpoints, methods, every block). */
void mtd_cfg__build_service(struct builder *b, const PbService *m, size_t si, struct mtd_cfg_service *out);

/* build_lb.c: a lb block (m NULL = the defaults; owner: the message holding it). */
void mtd_cfg__build_lb(struct builder *b, const PbLb *m, const void *owner, const char *path, struct mtd_lb_config *out,
                       struct lb_info *info);
/* build_lb.c: what lib/lb refuses in a built lb block, as errors at its fields. */
void mtd_cfg__lb_check(struct builder *b, const PbLb *m, const void *owner, const char *path, const PbService *svc,
                       const char *svc_path, struct mtd_lb_config *lb);
/* build_lb.c: a table the policy needs larger than the service's endpoints allow. */
void mtd_cfg__lb_fits_endpoints(struct builder *b, const PbLb *m, const void *owner, const char *path,
                                const struct mtd_lb_config *lb, const struct mtd_cfg_service *svc);
/* build_lb.c: a service's warmup (m NULL = none). */
void mtd_cfg__build_warmup(struct builder *b, const PbWarmup *m, const char *path, struct mtd_lb_warmup *out);
/* build_lb.c: a hash_key block. */
void mtd_cfg__build_hash_key(struct builder *b, const PbHashKey *m, const char *path, struct mtd_cfg_hash_key *out);
/* build_lb.c: *dst = *src with a header string of its own. */
void mtd_cfg__hash_key_copy(struct builder *b, struct mtd_cfg_hash_key *dst, const struct mtd_cfg_hash_key *src);

/* build_tls.c: basedir + value for a relative value, checked readable. */
char *mtd_cfg__tls_file(struct builder *b, const void *m, const char *field, const char *value, const char *path);
/* build_tls.c: a tls block; NULL only when out of memory. */
struct mtd_cfg_tls *mtd_cfg__build_tls(struct builder *b, const PbTls *m, const char *path);

/* build_discovery.c: a service's one endpoint source (endpoints, etcd or dns). */
void mtd_cfg__build_source(struct builder *b, const PbService *m, const char *path, struct mtd_cfg_service *out);
/* build_xds.c: the top-level xds block (its bootstrap file read), or
 * NULL when the config has none (errors recorded). */
struct mtd_cfg_xds *mtd_cfg__build_xds(struct builder *b, const PbXds *m);
/* build_discovery.c: register[i]. */
void mtd_cfg__build_register(struct builder *b, const PbRegister *m, size_t i, struct mtd_cfg_register *out);

/* build_fault.c: a fault block (m NULL = the defaults). */
void mtd_cfg__build_fault(struct builder *b, const PbFault *m, const char *path, struct mtd_fault_policy *out);
/* build_fault.c: a retry_budget (m NULL = none). */
void mtd_cfg__build_retry_budget(struct builder *b, const PbRetryBudget *m, const char *path,
                                 struct mtd_fault_budget_cfg *out);

/* build_health.c: outlier_detection (m NULL = off) and failure_statuses. */
void mtd_cfg__build_outlier(struct builder *b, const PbOutlier *m, const char *path, struct mtd_cfg_service *out);
/* build_health.c: a health_check (m NULL = off). */
void mtd_cfg__build_health_check(struct builder *b, const PbHealthCheck *m, const char *path,
                                 struct mtd_hc_config *out);
/* build_health.c: a circuit_breaker (m NULL = no limits). */
void mtd_cfg__build_circuit(const PbCircuit *m, struct mtd_circuit_config *out);

/* build_layer.c: a routing block. */
void mtd_cfg__build_routing(struct builder *b, const PbRouting *m, const char *path, struct mtd_cfg_routing *out);
/* build_layer.c: the layer options of svc with routing r. */
void mtd_cfg__layer_resolve(struct builder *b, const struct mtd_cfg_service *svc, const struct mtd_cfg_routing *r,
                            struct mtd_lb_layer_config *out);
/* build_layer.c: a service's subset and locality into out->layer. */
void mtd_cfg__build_locality(struct builder *b, const PbService *m, const char *path, struct mtd_cfg_service *out);

/* build_policy.c: some route or mirror sends calls to an entry named name. */
bool mtd_cfg__reached_by_name(struct builder *b, const char *name);
/* build_policy.c: a split block; NULL only when out of memory. */
struct mtd_cfg_split *mtd_cfg__build_split(struct builder *b, const PbSplit *m, const char *path);
/* build_policy.c: put split sp (may be NULL) into the layer lc. */
void mtd_cfg__layer_split(struct builder *b, struct mtd_lb_layer_config *lc, const struct mtd_cfg_split *sp,
                          const void *m, const char *path);
/* build_policy.c: a rate_limit (m NULL = none). */
void mtd_cfg__build_rate_limit(struct builder *b, const PbRateLimit *m, const char *path,
                               struct mtd_cfg_rate_limit *out);
/* build_policy.c: a fault_injection (m NULL = none). */
void mtd_cfg__build_fault_injection(struct builder *b, const PbFaultInjection *m, const char *path,
                                    struct mtd_cfg_fault_injection *out);
/* build_policy.c: routes[i], its target left unresolved. */
void mtd_cfg__build_route(struct builder *b, const PbRoute *m, size_t i, struct mtd_route_rule *out);
/* build_policy.c: routes' `to` and mirrors' `service`, once every entry is built. */
void mtd_cfg__resolve_targets(struct builder *b, const PbConfig *m, struct mtd_cfg *cfg);

/* build_inbound.c: inbound[i] (listener, TLS, authorization). */
void mtd_cfg__build_inbound(struct builder *b, const PbInbound *m, size_t i, struct mtd_cfg_inbound *out);
/* build_inbound.c: the service (services[si]) serving inbound[i]'s app. */
void mtd_cfg__build_inbound_app(struct builder *b, const PbInbound *m, const struct mtd_cfg_addr *listen, size_t i,
                                size_t si, struct mtd_cfg_service *out);
/* build_inbound.c: inbound listeners that clash with each other or with maitred's own. */
void mtd_cfg__check_inbound_addrs(struct builder *b, const PbConfig *m, struct mtd_cfg *cfg);
/* build_inbound.c: the certificate of the inbound listener each register entry advertises. */
void mtd_cfg__registers_advertise(struct builder *b, struct mtd_cfg *cfg);

/* build_tracing.c: the top-level tracing block (NULL when absent or
 * refused), and a service's or method's tracing.sample over inherited. */
struct mtd_cfg_tracing *mtd_cfg__build_tracing(struct builder *b, const PbTracing *m);
double mtd_cfg__trace_sample(struct builder *b, const PbTracingOverride *m, double inherited, const char *path);

#endif
