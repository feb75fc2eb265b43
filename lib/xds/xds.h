/* xDS resources into maitred's terms (types: xds-t.h). Pure: no I/O, any
 * thread. Every translator takes the serialized resource (the value of
 * the response's google.protobuf.Any, its type URL already checked),
 * and either fills its output and returns 0, or returns -EINVAL with the
 * reason in why (what the ADS client sends back as the NACK's
 * error_detail: names the field, quotes at most a bounded piece of the
 * resource: a name, an address, a path or a pattern of up to 128 bytes;
 * the ADS client sends its control bytes and broken UTF-8 as '?'), or
 * -ENOMEM. Nothing is kept of the input. A
 * resource with a NUL byte inside a string field is refused whole ("a
 * NUL in string field virtual_hosts[0].domains[1]"): protobuf-c's C
 * string would end at it, "a\0x" read as the name "a" (every string
 * field of a Cluster, Listener, RouteConfiguration and the Any payloads
 * read in them; of an assignment, every string read). */
#ifndef MTD_XDS_H
#define MTD_XDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "xds/xds-t.h"

/* A Cluster. Accepted: type EDS whose eds_config is ads or self (the one
 * ADS stream). lb_policy ROUND_ROBIN -> WEIGHTED_ROUND_ROBIN and RANDOM ->
 * WEIGHTED_RANDOM (Envoy's honour endpoint and locality weights; maitred's
 * plain ones do not), LEAST_REQUEST -> LEAST_REQUEST
 * (least_request_lb_config.choice_count, default 2), RING_HASH ->
 * CONSISTENT_HASH (minimum / maximum_ring_size, default 1024 / 8M), MAGLEV
 * -> MAGLEV (table_size, default 65537, prime); round_robin_lb_config or
 * least_request_lb_config.slow_start_config -> warmup SLOW_START;
 * connect_timeout; circuit_breakers' DEFAULT thresholds max_requests /
 * max_pending_requests; outlier_detection (consecutive_5xx and the
 * failure-percentage rule, interval, base / max ejection time, max
 * ejection percent); transport_socket with an UpstreamTlsContext of file
 * names or of certificate provider instances, looked up in providers (the
 * bootstrap's certificate_providers; NULL = none). Refused: other cluster
 * types, other config sources, the other policies, inline certificates,
 * SDS, an instance providers lacks or that lacks the file asked of it,
 * validation checks maitred does not make (certificate hash or SPKI
 * pins, SCTs, CRLs, a custom validator),
 * SAN matchers other than one exact URI or DNS name, zero limits,
 * out-of-range values. out is cleared first; on error it holds nothing. */
int mtd_xds_cluster_parse(const uint8_t *buf, size_t len, const struct mtd_cfg_cert_providers *providers,
                          struct mtd_xds_cluster *out, char *why, size_t whylen);
/* Free what a parsed cluster owns (twice is fine). */
void mtd_xds_cluster_clear(struct mtd_xds_cluster *c);
/* a and b would configure a service the same way (name included). */
bool mtd_xds_cluster_equal(const struct mtd_xds_cluster *a, const struct mtd_xds_cluster *b);
/* CONSISTENT_HASH's ring_points (points per endpoint of weight 100) for
 * the set of n endpoints eps, by their weights: the ring is
 * minimum_ring_size points at least and maximum_ring_size at most,
 * within maitred's bounds (at least one point per 100 of weight, at
 * most MTD_LB_MAX_RING_POINTS). */
uint32_t mtd_xds_ring_points(const struct mtd_xds_cluster *c, const struct mtd_xds_ep *eps, size_t n);

/* A ClusterLoadAssignment. Endpoints of health_status UNHEALTHY, DRAINING
 * or TIMEOUT are never picked; of the rest, only those of the lowest
 * priority that has one are kept (priority N+1 serves while N has none
 * that may be picked; the control plane's health marks decide, not
 * maitred's own checks). A locality's load_balancing_weight, when any
 * locality has one, is its share of the calls: each endpoint's weight is
 * its share of its locality times the locality's share, scaled to
 * [1, MTD_XDS_WEIGHT_SCALE]; else the endpoints' own weights (default 1).
 * The locality's zone is the endpoint's zone. Refused: no cluster_name,
 * an endpoint without a numeric socket address and port 1..65535, a
 * weight of 0, a priority above MTD_XDS_MAX_PRIORITY, more than
 * MTD_LB_MAX_ENDPOINTS endpoints, the same address twice in one priority.
 * An assignment with no endpoint that may be picked is valid (n == 0). */
int mtd_xds_cla_parse(const uint8_t *buf, size_t len, struct mtd_xds_cla **out, char *why, size_t whylen);
void mtd_xds_cla_free(struct mtd_xds_cla *c);
/* The socket address of a canonical endpoint address as a translated
 * assignment holds it. 0 or -EINVAL. */
int mtd_xds_sockaddr(const char *address, struct sockaddr_storage *sa, socklen_t *salen);
/* The same from the endpoint's parsed address (no text parsed): what
 * mtd_xds_sockaddr(e->address) gives. */
void mtd_xds_ep_sockaddr(const struct mtd_xds_ep *e, struct sockaddr_storage *sa, socklen_t *salen);

/* A RouteConfiguration into maitred's routes (struct mtd_xds_routes).
 *
 * Virtual hosts: one is for the calls of a service when a domain of it is
 * that service's name; the calls of other services take the host that
 * host (the Listener's name, NULL = none) selects as the authority of a
 * gRPC client whose target names that Listener does (gRPC A27/A28,
 * Envoy's domain search): an exact domain, case aside, then the longest
 * suffix wildcard ("*.shop", "*-cart.shop"), then the longest prefix
 * wildcard ("cart.*"), then "*"; a wildcard stands for one character or
 * more; a "*" first makes the rest a suffix, else a "*" last the rest a
 * prefix, whatever "*" the rest holds ("*b*" is the suffix "b*"), and a
 * domain with a "*" only elsewhere matches nothing (with host
 * NULL, only "*" is matched). The routes come
 * out in the order a call tries them: every named host's (each closed by
 * a route that takes the rest of its service's calls and fails them: in
 * Envoy a call that reaches a host and none of its routes is not
 * routed), then the selected host's (a call none of them matches goes
 * on by its :path). At most one host per name and one "*".
 *
 * A match: prefix "" or "/" (every call), "/SERVICE/" (the service's
 * calls), or a whole "/SERVICE/METHOD"; path "/SERVICE/METHOD";
 * safe_regex (its regex, RE2 syntax as lib/route/regex.h reads it, must
 * match the whole :path; the rule's service is its virtual host's, or
 * "*" in the selected host: a pattern may match several services' calls;
 * case_sensitive is ignored, as Envoy does; google_re2 is deprecated and
 * read as nothing); at most one header matcher (maitred's rules test one
 * header): exact_match, prefix_match, present_match true,
 * safe_regex_match, or string_match exact / prefix / safe_regex (a
 * pattern matches the whole value; a missing header matches none), the
 * name lower-cased. Refused: the other path forms, case_sensitive false
 * (but with safe_regex), query_parameters, runtime_fraction, a prefix
 * that ends inside a service or method name, a header matcher of another
 * form (suffix, contains, range), invert_match,
 * treat_missing_header_as_empty, ignore_case, pseudo-headers (":path"),
 * a RegexMatcher with a field maitred does not read, an empty pattern,
 * and a pattern lib/route/regex.h refuses (the refusal quotes it and
 * says the construct and its byte: flags, \b, backreferences, a program
 * over MTD_REGEX_PROGRAM_MAX instructions, ...).
 *
 * An action: cluster, or weighted_clusters (1..MTD_XDS_WEIGHTED_MAX,
 * names without cluster_header, weights summing to 1..UINT32_MAX);
 * max_stream_duration / timeout as the deadline cap; retry_policy as
 * FAILOVER (retry_on's gRPC codes cancelled, deadline-exceeded,
 * internal, resource-exhausted, unavailable; other conditions, which
 * are HTTP's, are ignored as gRPC's clients do; num_retries default 1,
 * at most MTD_FAULT_RETRIES_MAX; retry_back_off base default 25 ms, max
 * default 10 x base); hash_policy: one header policy as the hash key
 * (others ignored, as gRPC's clients do; two header policies refused).
 * Refused: a route without a route action (redirect, direct_response,
 * ...), cluster_header and cluster specifier plugins, more than
 * MTD_XDS_ROUTES_MAX routes in all, bad names and durations. The refusal
 * names the virtual host and route by position. *out is NULL on error. */
int mtd_xds_routes_parse(const uint8_t *buf, size_t len, const char *host, struct mtd_xds_routes **out, char *why,
                         size_t whylen);
void mtd_xds_routes_free(struct mtd_xds_routes *r);

/* A Listener: its HttpConnectionManager (the api_listener's, else the
 * first filter of type HttpConnectionManager in its first filter chain)
 * and where its routes are (rds over ADS or self, or route_config inline,
 * translated as mtd_xds_routes_parse does, the Listener's name as host). Its http_filters must end
 * with the router; before it one fault filter (HTTPFault: out->fault,
 * its name and config) is taken, any other filter is refused unless
 * is_optional (maitred runs no other of Envoy's HTTP filters). The fault
 * config (and a route's or virtual host's override of it in
 * typed_per_filter_config, kept per route by mtd_xds_routes_parse:
 * an HTTPFault, or a FilterConfig wrapping one, disabled = none):
 * abort grpc_status 1..16 or http_status 200..599 (as gRPC reads it),
 * delay fixed_delay 1 ms..1 h, each for its percentage (unset = 0);
 * refused: header_abort, header_delay, headers, upstream_cluster,
 * downstream_nodes, max_active_faults, response_rate_limit, a second
 * fault filter, an override per weighted cluster. out is cleared
 * first; on error it holds nothing. */
int mtd_xds_listener_parse(const uint8_t *buf, size_t len, struct mtd_xds_listener *out, char *why, size_t whylen);
void mtd_xds_listener_clear(struct mtd_xds_listener *l);

/* The name of a serialized resource of type_url (a Cluster's, Listener's
 * or RouteConfiguration's name, an assignment's cluster_name) written to
 * name (cap bytes), read without decoding the rest:
 * - MTD_XDS_NAME_EXACT: the top level decodes; the name is the one any
 *   decoder that takes the resource gives it (it may not be printable).
 *   What a client may skip unread or take as present.
 * - MTD_XDS_NAME_GUESS: the bytes do not decode as pbwire reads them
 *   (stricter than protobuf-c: pbwire.h), or a field 1 is not a string;
 *   the last printable name read before, for a NACK's text only (the
 *   resource may be any other).
 * - MTD_XDS_NAME_LONG: as EXACT, but the name is longer than cap - 1
 *   (name is set to ""). With cap MTD_XDS_NAME_MAX + 1, longer than any
 *   name maitred asks for: what a client skips unread.
 * - -EINVAL: no name (none, an empty one: to protobuf the same, a NUL
 *   in it; a guess longer than cap - 1 or not printable). */
#define MTD_XDS_NAME_EXACT 0
#define MTD_XDS_NAME_GUESS 1
#define MTD_XDS_NAME_LONG 2
int mtd_xds_resource_name(const char *type_url, const uint8_t *buf, size_t len, char *name, size_t cap);

/* One resource of a DiscoveryResponse: its google.protobuf.Any as slices
 * of the response's bytes (valid while they are; type_url is not
 * NUL-terminated). */
struct mtd_xds_any {
	const char *type_url;
	size_t type_url_len;
	const uint8_t *value;
	size_t len;
};

/* The resources of one response read at most: a slice is 32 bytes and a
 * resource as small as 2 (an empty Any), so a 64 MB response of those
 * would take 1 GB of slices; a real resource holds its type URL (49 bytes
 * at least), so a response of 64 MB (gclient's limit) has fewer. */
#define MTD_XDS_MAX_RESOURCES 1000000u

/* A DiscoveryResponse (state of the world): its strings copied (absent =
 * ""), its resources sliced from msg, which must outlive it. */
struct mtd_xds_response {
	char *version_info, *type_url, *nonce;
	struct mtd_xds_any *res;
	size_t n_res;
	size_t too_many; /* its resources when more than MTD_XDS_MAX_RESOURCES: none read (n_res 0) */
};

/* Read msg[0..len) as a DiscoveryResponse. 0; -EBADMSG when it does not
 * decode (malformed wire, a known field of the wrong wire type, a NUL
 * inside one of its three strings); -ENOMEM. On error out holds nothing.
 * Past MTD_XDS_MAX_RESOURCES resources only the strings are read.
 * Unknown fields are skipped; a field written twice: the last counts. */
int mtd_xds_response_read(const uint8_t *msg, size_t len, struct mtd_xds_response *out);
void mtd_xds_response_clear(struct mtd_xds_response *r);

/* Whether resource a's type URL is type_url. */
bool mtd_xds_any_is(const struct mtd_xds_any *a, const char *type_url);

#endif
