/* A RouteConfiguration (RDS, or inline in a Listener's connection
 * manager) into maitred's routes, and a Listener into where its routes
 * are (xds.h says what maps onto what, and what is refused). */
#include <config.h> /* autoconf */

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h> /* strncasecmp */

#include "config/config-int.h"
#include "envoy/config/listener/v3/listener.pb-c.h"
#include "envoy/config/route/v3/route.pb-c.h"
#include "envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.pb-c.h"
#include "fault/fault-t.h"
#include "grpc/grpc.h"
#include "route/regex.h"
#include "xds/xds-int.h"
#include "xds/xds.h"

typedef Envoy__Config__Route__V3__RouteConfiguration PbRouteConfig;
typedef Envoy__Config__Route__V3__VirtualHost PbVhost;
typedef Envoy__Config__Route__V3__Route PbRoute;
typedef Envoy__Config__Route__V3__RouteMatch PbMatch;
typedef Envoy__Config__Route__V3__HeaderMatcher PbHeader;
typedef Envoy__Config__Route__V3__RouteAction PbAction;
typedef Envoy__Config__Route__V3__RetryPolicy PbRetry;
typedef Envoy__Config__Listener__V3__Listener PbListener;
typedef Envoy__Extensions__Filters__Network__HttpConnectionManager__V3__HttpConnectionManager PbHcm;

#define BACKOFF_BASE_DEFAULT_MS 25 /* Envoy's */
#define MATCH_QUERY_PARAMETERS  7  /* RouteMatch fields maitred leaves out but must refuse */
#define MATCH_RUNTIME_FRACTION  9
/* Domains over all virtual hosts: each name is checked against the
 * others', so the count is bounded. */
#define DOMAINS_MAX 4096

/* ---- the output, built up ------------------------------------------------- */

static void action_clear(struct mtd_xds_action *a)
{
	for (size_t i = 0; i < a->n_clusters; i++)
		free(a->clusters[i]);
	free(a->clusters);
	free(a->weights);
	free(a->hash_header);
	memset(a, 0, sizeof(*a));
}

static void route_clear(struct mtd_xds_route *r)
{
	/* service, method, header, value and the patterns are this route's own. */
	free((char *)r->rule.service);
	free((char *)r->rule.method);
	free((char *)r->rule.header);
	free((char *)r->rule.value);
	mtd_regex_free((struct mtd_regex *)r->rule.path_re);
	mtd_regex_free((struct mtd_regex *)r->rule.value_re);
	action_clear(&r->act);
	free(r->name);
	for (size_t i = 0; i < r->n_faults; i++)
		free(r->faults[i].filter);
	free(r->faults);
	memset(r, 0, sizeof(*r));
}

void mtd_xds_routes_free(struct mtd_xds_routes *r)
{
	if (r == NULL)
		return;
	for (size_t i = 0; i < r->n; i++)
		route_clear(&r->routes[i]);
	free(r->routes);
	free(r->name);
	free(r);
}

static char *dup_n(const char *s, size_t n)
{
	char *c = mtd_cfg__malloc(n + 1);

	if (c != NULL) {
		memcpy(c, s, n);
		c[n] = '\0';
	}
	return c;
}

/* ---- a match ---------------------------------------------------------------- */

/* A gRPC name part: non-empty, no '/', printable. */
static bool part_ok(const char *s, size_t n)
{
	if (n == 0 || n > MTD_XDS_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (s[i] == '/' || s[i] == '?' || s[i] == '#' || (unsigned char)s[i] <= 0x20 || s[i] == 0x7f)
			return false;
	return true;
}

static bool has_unknown(const ProtobufCMessage *m, uint32_t tag)
{
	for (unsigned i = 0; i < m->n_unknown_fields; i++)
		if (m->unknown_fields[i].tag == tag)
			return true;
	return false;
}

/* A RegexMatcher (Envoy's safe_regex: RE2 syntax, a whole match) compiled
 * into *out; `field` names it in a refusal. */
static int regex_of(const Envoy__Type__Matcher__V3__RegexMatcher *rm, const struct mtd_regex **out, const char *where,
                    const char *field, char *why, size_t whylen)
{
	char inner[192];
	struct mtd_regex *re;

	if (rm->base.n_unknown_fields > 0)
		return mtd_xds__refuse(why, whylen, "%s.%s: a field maitred does not know (only regex is read)", where,
		                       field);
	if (rm->regex[0] == '\0')
		return mtd_xds__refuse(why, whylen, "%s.%s.regex: empty", where, field);
	int rc = mtd_regex_compile(rm->regex, strlen(rm->regex), &re, inner, sizeof(inner));
	if (rc == -ENOMEM)
		return rc;
	bool printable = true; /* a NACK's message is text: quote only printable ASCII */
	for (const char *c = rm->regex; *c != '\0' && printable; c++)
		printable = (unsigned char)*c >= 0x20 && (unsigned char)*c < 0x7f;
	if (rc != 0 && printable)
		return mtd_xds__refuse(why, whylen, "%s.%s.regex \"%.128s\": %s", where, field, rm->regex, inner);
	if (rc != 0)
		return mtd_xds__refuse(why, whylen, "%s.%s.regex: %s", where, field, inner);
	*out = re;
	return 0;
}

/* The :path part of a match into rule's service and method, or its
 * pattern (service NULL on return = any service, then the caller sets
 * its virtual host's or "*"). */
static int path_match(const PbMatch *m, struct mtd_route_rule *rule, const char *where, char *why, size_t whylen)
{
	const char *p;
	bool whole;

	if (has_unknown(&m->base, MATCH_QUERY_PARAMETERS) || has_unknown(&m->base, MATCH_RUNTIME_FRACTION))
		return mtd_xds__refuse(why, whylen, "%s.match: query_parameters and runtime_fraction are not supported",
		                       where);
	if (m->path_specifier_case == ENVOY__CONFIG__ROUTE__V3__ROUTE_MATCH__PATH_SPECIFIER_SAFE_REGEX)
		/* Envoy ignores case_sensitive for safe_regex; so does maitred. */
		return regex_of(m->safe_regex, &rule->path_re, where, "match.safe_regex", why, whylen);
	if (m->path_specifier_case == ENVOY__CONFIG__ROUTE__V3__ROUTE_MATCH__PATH_SPECIFIER_PREFIX) {
		p = m->prefix;
		whole = false;
	} else if (m->path_specifier_case == ENVOY__CONFIG__ROUTE__V3__ROUTE_MATCH__PATH_SPECIFIER_PATH) {
		p = m->path;
		whole = true;
	} else {
		return mtd_xds__refuse(why, whylen,
		                       "%s.match: only prefix, path and safe_regex are supported (the other path "
		                       "forms are not)",
		                       where);
	}
	if (m->case_sensitive != NULL && !m->case_sensitive->value)
		return mtd_xds__refuse(why, whylen, "%s.match.case_sensitive: false is not supported", where);
	size_t n = strlen(p);
	if (!whole && (n == 0 || (n == 1 && p[0] == '/')))
		return 0; /* every call */
	const char *slash = n > 1 && p[0] == '/' ? memchr(p + 1, '/', n - 1) : NULL;
	if (slash == NULL || !part_ok(p + 1, (size_t)(slash - p - 1)))
		goto bad;
	size_t svc_n = (size_t)(slash - p - 1);
	size_t rest = n - svc_n - 2;
	if (rest == 0 && whole)
		goto bad;
	if (rest != 0 && !part_ok(slash + 1, rest))
		goto bad;
	if ((rule->service = dup_n(p + 1, svc_n)) == NULL)
		return -ENOMEM;
	rule->service_len = svc_n;
	if (rest != 0) {
		if ((rule->method = dup_n(slash + 1, rest)) == NULL)
			return -ENOMEM;
		rule->method_len = rest;
	}
	return 0;
bad:
	return mtd_xds__refuse(why, whylen, "%s.match.%s: \"%.128s\" is not %sa gRPC path \"/SERVICE/METHOD\"%s", where,
	                       whole ? "path" : "prefix", p, whole ? "" : "\"\", \"/\", \"/SERVICE/\" or ",
	                       whole ? "" : " (a prefix ending inside a name is not supported)");
}

static int header_match(const PbMatch *m, struct mtd_route_rule *rule, const char *where, char *why, size_t whylen)
{
	if (m->n_headers == 0)
		return 0;
	if (m->n_headers > 1)
		return mtd_xds__refuse(why, whylen,
		                       "%s.match.headers: %zu matchers; maitred's routes test at most one header",
		                       where, m->n_headers);
	const PbHeader *h = m->headers[0];
	size_t n = strlen(h->name);
	if (n == 0 || n > 255 || h->name[0] == ':')
		return mtd_xds__refuse(why, whylen, "%s.match.headers[0].name: empty, too long or a pseudo-header",
		                       where);
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)h->name[i] <= 0x20 || (unsigned char)h->name[i] >= 0x7f)
			return mtd_xds__refuse(why, whylen, "%s.match.headers[0].name: not a header name", where);
	if (h->invert_match)
		return mtd_xds__refuse(why, whylen, "%s.match.headers[0].invert_match is not supported", where);
	if (h->treat_missing_header_as_empty)
		return mtd_xds__refuse(why, whylen,
		                       "%s.match.headers[0].treat_missing_header_as_empty is not supported", where);
	const char *value = NULL;
	switch (h->header_match_specifier_case) {
	case ENVOY__CONFIG__ROUTE__V3__HEADER_MATCHER__HEADER_MATCH_SPECIFIER_EXACT_MATCH:
		rule->kind = MTD_ROUTE_HEADER_VALUE;
		value = h->exact_match;
		break;
	case ENVOY__CONFIG__ROUTE__V3__HEADER_MATCHER__HEADER_MATCH_SPECIFIER_PREFIX_MATCH:
		rule->kind = MTD_ROUTE_HEADER_PREFIX;
		value = h->prefix_match;
		break;
	case ENVOY__CONFIG__ROUTE__V3__HEADER_MATCHER__HEADER_MATCH_SPECIFIER_PRESENT_MATCH:
		if (!h->present_match)
			return mtd_xds__refuse(why, whylen, "%s.match.headers[0].present_match: false is not supported",
			                       where);
		rule->kind = MTD_ROUTE_HEADER_PRESENT;
		break;
	case ENVOY__CONFIG__ROUTE__V3__HEADER_MATCHER__HEADER_MATCH_SPECIFIER_STRING_MATCH: {
		const Envoy__Type__Matcher__V3__StringMatcher *sm = h->string_match;
		if (sm->ignore_case)
			return mtd_xds__refuse(why, whylen,
			                       "%s.match.headers[0].string_match.ignore_case is not supported", where);
		if (sm->match_pattern_case == ENVOY__TYPE__MATCHER__V3__STRING_MATCHER__MATCH_PATTERN_EXACT) {
			rule->kind = MTD_ROUTE_HEADER_VALUE;
			value = sm->exact;
		} else if (sm->match_pattern_case == ENVOY__TYPE__MATCHER__V3__STRING_MATCHER__MATCH_PATTERN_PREFIX) {
			rule->kind = MTD_ROUTE_HEADER_PREFIX;
			value = sm->prefix;
		} else if (sm->match_pattern_case ==
		           ENVOY__TYPE__MATCHER__V3__STRING_MATCHER__MATCH_PATTERN_SAFE_REGEX) {
			rule->kind = MTD_ROUTE_HEADER_REGEX;
			int rc = regex_of(sm->safe_regex, &rule->value_re, where,
			                  "match.headers[0].string_match.safe_regex", why, whylen);
			if (rc != 0)
				return rc;
		} else {
			return mtd_xds__refuse(why, whylen,
			                       "%s.match.headers[0].string_match: only exact, prefix and safe_regex "
			                       "are supported",
			                       where);
		}
		break;
	}
	case ENVOY__CONFIG__ROUTE__V3__HEADER_MATCHER__HEADER_MATCH_SPECIFIER_SAFE_REGEX_MATCH: {
		rule->kind = MTD_ROUTE_HEADER_REGEX;
		int rc = regex_of(h->safe_regex_match, &rule->value_re, where, "match.headers[0].safe_regex_match", why,
		                  whylen);
		if (rc != 0)
			return rc;
		break;
	}
	default:
		return mtd_xds__refuse(why, whylen,
		                       "%s.match.headers[0]: only exact_match, prefix_match, present_match, "
		                       "safe_regex_match and string_match are supported",
		                       where);
	}
	char *name = dup_n(h->name, n);
	if (name == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		name[i] = (char)tolower((unsigned char)name[i]);
	rule->header = name;
	if (value != NULL) {
		if (strlen(value) > 8192)
			return mtd_xds__refuse(why, whylen, "%s.match.headers[0]: the value is over 8192 bytes", where);
		if ((rule->value = mtd_cfg__strdup(value)) == NULL)
			return -ENOMEM;
		rule->value_len = strlen(value);
	}
	return 0;
}

/* ---- an action -------------------------------------------------------------- */

/* A Duration that may be 0 (= none) as ms; -1 when out of range. */
static int64_t dur_or_zero(const Google__Protobuf__Duration *d)
{
	if (d != NULL && d->seconds == 0 && d->nanos == 0)
		return 0;
	return mtd_xds__dur_ms(d, 0);
}

static int add_cluster(struct mtd_xds_action *a, const char *name, uint32_t weight)
{
	char *c = mtd_cfg__strdup(name);

	if (c == NULL)
		return -ENOMEM;
	a->clusters[a->n_clusters] = c;
	a->weights[a->n_clusters++] = weight;
	return 0;
}

static int clusters(const PbAction *pa, struct mtd_xds_action *a, const char *where, char *why, size_t whylen)
{
	size_t n;

	if (pa->cluster_specifier_case == ENVOY__CONFIG__ROUTE__V3__ROUTE_ACTION__CLUSTER_SPECIFIER_CLUSTER)
		n = 1;
	else if (pa->cluster_specifier_case ==
	         ENVOY__CONFIG__ROUTE__V3__ROUTE_ACTION__CLUSTER_SPECIFIER_WEIGHTED_CLUSTERS)
		n = pa->weighted_clusters->n_clusters;
	else
		return mtd_xds__refuse(why, whylen,
		                       "%s.route: only cluster and weighted_clusters are supported (cluster_header "
		                       "and cluster specifier plugins are not)",
		                       where);
	if (n == 0 || n > MTD_XDS_WEIGHTED_MAX)
		return mtd_xds__refuse(why, whylen, "%s.route.weighted_clusters: %zu clusters (1..%d)", where, n,
		                       MTD_XDS_WEIGHTED_MAX);
	a->clusters = mtd_cfg__calloc(n, sizeof(*a->clusters));
	a->weights = mtd_cfg__calloc(n, sizeof(*a->weights));
	if (a->clusters == NULL || a->weights == NULL)
		return -ENOMEM;
	if (n == 1 && pa->cluster_specifier_case == ENVOY__CONFIG__ROUTE__V3__ROUTE_ACTION__CLUSTER_SPECIFIER_CLUSTER) {
		if (!mtd_xds__name_ok(pa->cluster))
			return mtd_xds__refuse(why, whylen, "%s.route.cluster: empty, too long or not printable",
			                       where);
		return add_cluster(a, pa->cluster, 1);
	}
	uint64_t sum = 0;
	for (size_t i = 0; i < n; i++) {
		const Envoy__Config__Route__V3__WeightedCluster__ClusterWeight *cw = pa->weighted_clusters->clusters[i];
		if (cw->cluster_header[0] != '\0')
			return mtd_xds__refuse(
			        why, whylen, "%s.route.weighted_clusters.clusters[%zu].cluster_header is not supported",
			        where, i);
		for (size_t k = 0; k < cw->n_typed_per_filter_config; k++) {
			struct mtd_cfg_fault_injection fi;
			char at[160];
			snprintf(at, sizeof(at), "%s.route.weighted_clusters.clusters[%zu].typed_per_filter_config", where,
			         i);
			int frc = cw->typed_per_filter_config[k]->value == NULL
			                  ? 0
			                  : mtd_xds__fault_override(cw->typed_per_filter_config[k]->value, &fi, at, why,
			                                            whylen);
			if (frc < 0)
				return frc;
			if (frc > 0)
				return mtd_xds__refuse(why, whylen,
				                       "%s: a fault override per cluster is not supported (per route "
				                       "or virtual host it is)",
				                       at);
		}
		if (!mtd_xds__name_ok(cw->name))
			return mtd_xds__refuse(why, whylen,
			                       "%s.route.weighted_clusters.clusters[%zu].name: empty, too long or not "
			                       "printable",
			                       where, i);
		for (size_t j = 0; j < a->n_clusters; j++)
			if (strcmp(a->clusters[j], cw->name) == 0)
				return mtd_xds__refuse(why, whylen,
				                       "%s.route.weighted_clusters: cluster \"%.128s\" twice", where,
				                       cw->name);
		uint32_t w = cw->weight != NULL ? cw->weight->value : 0;
		sum += w;
		int rc = add_cluster(a, cw->name, w);
		if (rc != 0)
			return rc;
	}
	if (sum == 0 || sum > UINT32_MAX)
		return mtd_xds__refuse(why, whylen, "%s.route.weighted_clusters: the weights sum to %llu (1..%u)",
		                       where, (unsigned long long)sum, UINT32_MAX);
	return 0;
}

static const struct {
	const char *name;
	int code;
} retry_codes[] = {
        {"cancelled", MTD_GRPC_CANCELLED},     {"deadline-exceeded", MTD_GRPC_DEADLINE_EXCEEDED},
        {"internal", MTD_GRPC_INTERNAL},       {"resource-exhausted", MTD_GRPC_RESOURCE_EXHAUSTED},
        {"unavailable", MTD_GRPC_UNAVAILABLE},
};

static int retry(const PbRetry *rp, struct mtd_xds_action *a, const char *where, char *why, size_t whylen)
{
	uint32_t on = 0;

	if (strlen(rp->retry_on) > 1024)
		return mtd_xds__refuse(why, whylen, "%s.route.retry_policy.retry_on: over 1024 bytes", where);
	for (const char *p = rp->retry_on; *p != '\0';) {
		size_t n = strcspn(p, ",");
		const char *tok = p;
		size_t tn = n;
		while (tn > 0 && *tok == ' ')
			tok++, tn--;
		while (tn > 0 && tok[tn - 1] == ' ')
			tn--;
		for (size_t i = 0; i < sizeof(retry_codes) / sizeof(retry_codes[0]); i++)
			if (strlen(retry_codes[i].name) == tn && memcmp(retry_codes[i].name, tok, tn) == 0)
				on |= 1u << retry_codes[i].code;
		p += n;
		if (*p == ',')
			p++;
	}
	uint32_t retries = rp->num_retries != NULL ? rp->num_retries->value : 1;
	int64_t per_try = dur_or_zero(rp->per_try_timeout);
	if (per_try < 0)
		return mtd_xds__refuse(why, whylen, "%s.route.retry_policy.per_try_timeout: out of range", where);
	int64_t base = BACKOFF_BASE_DEFAULT_MS, max = 0;
	if (rp->retry_back_off != NULL) {
		base = mtd_xds__dur_ms(rp->retry_back_off->base_interval, -1);
		max = mtd_xds__dur_ms(rp->retry_back_off->max_interval, 0);
		if (base <= 0)
			return mtd_xds__refuse(why, whylen,
			                       "%s.route.retry_policy.retry_back_off.base_interval: required, at least "
			                       "1 ms and at most a day",
			                       where);
		if (max < 0 || (max > 0 && max < base))
			return mtd_xds__refuse(
			        why, whylen,
			        "%s.route.retry_policy.retry_back_off.max_interval: out of range or below "
			        "base_interval",
			        where);
	}
	if (max == 0)
		max = base * 10;
	if (on == 0 || retries == 0)
		return 0; /* no gRPC code to retry on: no retry, as gRPC's clients read it */
	a->retry = true;
	a->retries = retries < MTD_FAULT_RETRIES_MAX ? retries : MTD_FAULT_RETRIES_MAX;
	a->retry_on = on;
	a->per_try_timeout_ms = per_try;
	a->backoff_base_ms = base;
	a->backoff_max_ms = max;
	return 0;
}

static int hash_policy(const PbAction *pa, struct mtd_xds_action *a, const char *where, char *why, size_t whylen)
{
	for (size_t i = 0; i < pa->n_hash_policy; i++) {
		const Envoy__Config__Route__V3__RouteAction__HashPolicy *hp = pa->hash_policy[i];
		if (hp->policy_specifier_case !=
		    ENVOY__CONFIG__ROUTE__V3__ROUTE_ACTION__HASH_POLICY__POLICY_SPECIFIER_HEADER)
			continue; /* another kind: ignored, as gRPC's clients do */
		if (a->hash_header != NULL)
			return mtd_xds__refuse(
			        why, whylen, "%s.route.hash_policy: two header policies; maitred hashes by one", where);
		const char *h = hp->header->header_name;
		size_t n = strlen(h);
		if (n == 0 || n > 255 || h[0] == ':')
			return mtd_xds__refuse(why, whylen,
			                       "%s.route.hash_policy[%zu].header.header_name: empty, too long or a "
			                       "pseudo-header",
			                       where, i);
		if ((a->hash_header = dup_n(h, n)) == NULL)
			return -ENOMEM;
		for (size_t k = 0; k < n; k++) {
			if ((unsigned char)h[k] <= 0x20 || (unsigned char)h[k] >= 0x7f)
				return mtd_xds__refuse(
				        why, whylen, "%s.route.hash_policy[%zu].header.header_name: not a header name",
				        where, i);
			a->hash_header[k] = (char)tolower((unsigned char)h[k]);
		}
	}
	return 0;
}

static int action(const PbRoute *pr, struct mtd_xds_action *a, const char *where, char *why, size_t whylen)
{
	if (pr->action_case != ENVOY__CONFIG__ROUTE__V3__ROUTE__ACTION_ROUTE)
		return mtd_xds__refuse(why, whylen,
		                       "%s: only a route action is supported (redirect, direct_response, "
		                       "filter_action and non_forwarding_action are not)",
		                       where);
	const PbAction *pa = pr->route;
	int rc = clusters(pa, a, where, why, whylen);
	if (rc != 0)
		return rc;
	int64_t cap = dur_or_zero(pa->timeout);
	if (cap < 0)
		return mtd_xds__refuse(why, whylen, "%s.route.timeout: out of range", where);
	if (pa->max_stream_duration != NULL) {
		int64_t msd = dur_or_zero(pa->max_stream_duration->max_stream_duration);
		int64_t hdr = dur_or_zero(pa->max_stream_duration->grpc_timeout_header_max);
		if (msd < 0 || hdr < 0)
			return mtd_xds__refuse(why, whylen, "%s.route.max_stream_duration: out of range", where);
		if (pa->max_stream_duration->grpc_timeout_header_max != NULL)
			cap = hdr;
		else if (pa->max_stream_duration->max_stream_duration != NULL)
			cap = msd;
	}
	a->deadline_cap_ms = cap;
	if (pa->retry_policy != NULL && (rc = retry(pa->retry_policy, a, where, why, whylen)) != 0)
		return rc;
	return hash_policy(pa, a, where, why, whylen);
}

/* ---- virtual hosts ---------------------------------------------------------- */

/* How a virtual host is reached: by "*", or by the service names among
 * its domains. */
static bool domain_is_name(const char *d)
{
	return strchr(d, '*') == NULL && part_ok(d, strlen(d));
}

static bool vhost_any(const PbVhost *v)
{
	for (size_t i = 0; i < v->n_domains; i++)
		if (strcmp(v->domains[i], "*") == 0)
			return true;
	return false;
}

/* How domain d matches host, in the order Envoy searches a route
 * configuration's domains and gRPC's clients match their authority: a
 * better rank wins, then within the suffix and prefix ranks the longer
 * domain. Case is ignored (host names'); a wildcard stands for at least
 * one character. A "*" first makes the rest a suffix, else a "*" last
 * the rest a prefix, whatever "*" the rest holds ("*b*" is the suffix
 * "b*"), as Envoy, gRPC C-core and grpc-js read a domain; a domain with
 * a "*" only elsewhere ("a*b"), or empty, matches nothing. */
enum domain_rank { DOMAIN_NONE, DOMAIN_ANY, DOMAIN_PREFIX, DOMAIN_SUFFIX, DOMAIN_EXACT };
static enum domain_rank domain_rank(const char *d, const char *host)
{
	size_t dl = strlen(d), hl = strlen(host);

	if (dl == 0)
		return DOMAIN_NONE;
	if (strchr(d, '*') == NULL)
		return dl == hl && strncasecmp(d, host, hl) == 0 ? DOMAIN_EXACT : DOMAIN_NONE;
	if (dl == 1)
		return DOMAIN_ANY;
	if (hl < dl)
		return DOMAIN_NONE; /* the wildcard's character or more, and the rest */
	if (d[0] == '*')
		return strncasecmp(d + 1, host + hl - (dl - 1), dl - 1) == 0 ? DOMAIN_SUFFIX : DOMAIN_NONE;
	if (d[dl - 1] == '*')
		return strncasecmp(d, host, dl - 1) == 0 ? DOMAIN_PREFIX : DOMAIN_NONE;
	return DOMAIN_NONE;
}

/* The virtual host host selects (domain_rank; the first of equals), or
 * SIZE_MAX when none of m's domains matches it. host NULL: the "*" host. */
static size_t vhost_for(const PbRouteConfig *m, const char *host)
{
	size_t best = SIZE_MAX, best_len = 0;
	enum domain_rank best_rank = DOMAIN_NONE;

	for (size_t vi = 0; vi < m->n_virtual_hosts; vi++) {
		const PbVhost *v = m->virtual_hosts[vi];
		for (size_t d = 0; d < v->n_domains; d++) {
			const char *dom = v->domains[d];
			enum domain_rank r = host != NULL ? domain_rank(dom, host)
			                                  : strcmp(dom, "*") == 0 ? DOMAIN_ANY : DOMAIN_NONE;
			size_t len = strlen(dom);
			if (r > best_rank || (r == best_rank && r != DOMAIN_NONE && len > best_len)) {
				best = vi;
				best_rank = r;
				best_len = len;
			}
		}
	}
	return best;
}

struct building {
	struct mtd_xds_routes *out;
	size_t cap;
};

static struct mtd_xds_route *next_route(struct building *b, const char *where, char *why, size_t whylen, int *rc)
{
	if (b->out->n == MTD_XDS_ROUTES_MAX) {
		*rc = mtd_xds__refuse(why, whylen, "%s: more than %d routes in all", where, MTD_XDS_ROUTES_MAX);
		return NULL;
	}
	if (b->out->n == b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 8;
		struct mtd_xds_route *r = mtd_cfg__realloc(b->out->routes, cap * sizeof(*r));
		if (r == NULL) {
			*rc = -ENOMEM;
			return NULL;
		}
		b->out->routes = r;
		b->cap = cap;
	}
	struct mtd_xds_route *r = &b->out->routes[b->out->n++];
	memset(r, 0, sizeof(*r));
	r->rule.to = (int)(b->out->n - 1);
	return r;
}

typedef Envoy__Config__Route__V3__Route__TypedPerFilterConfigEntry PbRouteFilterEntry;
typedef Envoy__Config__Route__V3__VirtualHost__TypedPerFilterConfigEntry PbVhostFilterEntry;

/* One typed_per_filter_config entry (key, value) into r's fault
 * overrides, unless r has one of that filter's already (the route's
 * own come first: they win over its host's). */
static int add_override(struct mtd_xds_route *r, const char *key, const Google__Protobuf__Any *value,
                        const char *where, char *why, size_t whylen)
{
	struct mtd_cfg_fault_injection fi;
	char at[192];

	if (value == NULL)
		return 0;
	snprintf(at, sizeof(at), "%s.typed_per_filter_config[\"%.64s\"]", where, key);
	for (size_t i = 0; i < r->n_faults; i++)
		if (strcmp(r->faults[i].filter, key) == 0)
			return 0;
	int rc = mtd_xds__fault_override(value, &fi, at, why, whylen);
	if (rc <= 0)
		return rc;
	if (!mtd_xds__name_ok(key))
		return mtd_xds__refuse(why, whylen, "%s: the filter name is empty, too long or not printable", where);
	struct mtd_xds_fault *f = mtd_cfg__realloc(r->faults, (r->n_faults + 1) * sizeof(*f));
	if (f == NULL)
		return -ENOMEM;
	r->faults = f;
	if ((f[r->n_faults].filter = mtd_cfg__strdup(key)) == NULL)
		return -ENOMEM;
	f[r->n_faults++].fi = fi;
	return 0;
}

static int route_overrides(struct mtd_xds_route *r, const PbRoute *pr, const PbVhost *v, const char *where,
                           const char *vwhere, char *why, size_t whylen)
{
	int rc = 0;

	for (size_t i = 0; i < pr->n_typed_per_filter_config && rc == 0; i++) {
		const PbRouteFilterEntry *e = pr->typed_per_filter_config[i];
		rc = add_override(r, e->key, e->value, where, why, whylen);
	}
	for (size_t i = 0; i < v->n_typed_per_filter_config && rc == 0; i++) {
		const PbVhostFilterEntry *e = v->typed_per_filter_config[i];
		rc = add_override(r, e->key, e->value, vwhere, why, whylen);
	}
	return rc;
}

/* The routes of virtual host v for service `svc` (NULL = any: the "*"
 * host), then for a named host the route failing the rest of its calls. */
static int vhost_routes(struct building *b, const PbVhost *v, size_t vi, const char *svc, char *why, size_t whylen)
{
	char where[96];
	int rc = 0;

	for (size_t i = 0; i < v->n_routes; i++) {
		snprintf(where, sizeof(where), "virtual_hosts[%zu].routes[%zu]", vi, i);
		const PbRoute *pr = v->routes[i];
		if (pr->match == NULL)
			return mtd_xds__refuse(why, whylen, "%s.match: required", where);
		struct mtd_xds_route *r = next_route(b, where, why, whylen, &rc);
		if (r == NULL)
			return rc;
		if ((rc = path_match(pr->match, &r->rule, where, why, whylen)) != 0 ||
		    (rc = header_match(pr->match, &r->rule, where, why, whylen)) != 0 ||
		    (rc = action(pr, &r->act, where, why, whylen)) != 0)
			return rc;
		char vwhere[48];
		snprintf(vwhere, sizeof(vwhere), "virtual_hosts[%zu]", vi);
		if ((rc = route_overrides(r, pr, v, where, vwhere, why, whylen)) != 0)
			return rc;
		if (pr->name[0] != '\0' && mtd_xds__name_ok(pr->name) && (r->name = mtd_cfg__strdup(pr->name)) == NULL)
			return -ENOMEM;
		if (svc != NULL && r->rule.service != NULL && strcmp(r->rule.service, svc) != 0) {
			/* A host for svc whose route names another service: no call reaches it. */
			route_clear(r);
			b->out->n--;
			continue;
		}
		if (r->rule.service == NULL) {
			if ((r->rule.service = mtd_cfg__strdup(svc != NULL ? svc : "*")) == NULL)
				return -ENOMEM;
			r->rule.service_len = strlen(r->rule.service);
		}
	}
	if (svc == NULL)
		return 0;
	snprintf(where, sizeof(where), "virtual_hosts[%zu]", vi);
	struct mtd_xds_route *r = next_route(b, where, why, whylen, &rc);
	if (r == NULL)
		return rc;
	if ((r->rule.service = mtd_cfg__strdup(svc)) == NULL)
		return -ENOMEM;
	r->rule.service_len = strlen(svc);
	return 0;
}

static int routes_from(const PbRouteConfig *m, const char *host, struct mtd_xds_routes **out, char *why,
                       size_t whylen)
{
	struct building b = {.out = mtd_cfg__calloc(1, sizeof(*b.out))};
	int rc = 0;
	size_t any = SIZE_MAX;

	if (b.out == NULL)
		return -ENOMEM;
	if (!mtd_xds__name_ok(m->name)) {
		rc = mtd_xds__refuse(why, whylen, "name: empty, too long or not printable");
		goto fail;
	}
	if ((b.out->name = mtd_cfg__strdup(m->name)) == NULL) {
		rc = -ENOMEM;
		goto fail;
	}
	size_t n_domains = 0;
	for (size_t vi = 0; vi < m->n_virtual_hosts; vi++)
		n_domains += m->virtual_hosts[vi]->n_domains;
	if (n_domains > DOMAINS_MAX) {
		rc = mtd_xds__refuse(why, whylen, "virtual_hosts: %zu domains in all (at most %d)", n_domains,
		                     DOMAINS_MAX);
		goto fail;
	}
	/* Named hosts first, each name at most once; then the one host
	 * selects. */
	for (size_t vi = 0; vi < m->n_virtual_hosts && rc == 0; vi++) {
		const PbVhost *v = m->virtual_hosts[vi];
		if (vhost_any(v)) {
			if (any != SIZE_MAX) {
				rc = mtd_xds__refuse(why, whylen, "virtual_hosts[%zu]: domain \"*\" is also host %zu's",
				                     vi, any);
				break;
			}
			any = vi;
		}
		for (size_t d = 0; d < v->n_domains && rc == 0; d++) {
			if (!domain_is_name(v->domains[d]))
				continue;
			for (size_t pv = 0; pv <= vi && rc == 0; pv++)
				for (size_t pd = 0; pd < m->virtual_hosts[pv]->n_domains; pd++) {
					if (pv == vi && pd == d)
						break;
					if (strcmp(m->virtual_hosts[pv]->domains[pd], v->domains[d]) == 0) {
						rc = mtd_xds__refuse(why, whylen,
						                     "virtual_hosts[%zu].domains: \"%.128s\" is also "
						                     "host %zu's",
						                     vi, v->domains[d], pv);
						break;
					}
				}
			if (rc == 0)
				rc = vhost_routes(&b, v, vi, v->domains[d], why, whylen);
		}
	}
	size_t chosen = rc == 0 ? vhost_for(m, host) : SIZE_MAX;
	if (chosen != SIZE_MAX)
		rc = vhost_routes(&b, m->virtual_hosts[chosen], chosen, NULL, why, whylen);
	if (rc != 0)
		goto fail;
	*out = b.out;
	return 0;
fail:
	mtd_xds_routes_free(b.out);
	return rc;
}

int mtd_xds_routes_parse(const uint8_t *buf, size_t len, const char *host, struct mtd_xds_routes **out, char *why,
                         size_t whylen)
{
	*out = NULL;
	PbRouteConfig *m;
	int rc = mtd_xds__unpack(&envoy__config__route__v3__route_configuration__descriptor, buf, len, NULL, &m, why,
	                         whylen);
	if (rc == -EBADMSG)
		return mtd_xds__refuse(why, whylen, "not a RouteConfiguration (it does not decode)");
	if (rc != 0)
		return rc;
	rc = routes_from(m, host, out, why, whylen);
	envoy__config__route__v3__route_configuration__free_unpacked(m, &mtd_cfg__pb_allocator);
	if (rc == -ENOMEM)
		mtd_xds__refuse(why, whylen, "out of memory");
	return rc;
}

/* ---- a Listener ------------------------------------------------------------- */

void mtd_xds_listener_clear(struct mtd_xds_listener *l)
{
	free(l->name);
	free(l->rds_name);
	mtd_xds_routes_free(l->routes);
	free(l->fault.filter);
	memset(l, 0, sizeof(*l));
}

/* The manager's http_filters: the router last; before it at most one
 * fault filter (taken into out->fault) and optional filters of other
 * kinds (skipped). */
static int hcm_filters(const PbHcm *h, struct mtd_xds_listener *out, char *why, size_t whylen)
{
	if (h->n_http_filters == 0)
		return mtd_xds__refuse(why, whylen, "http_filters: empty (the router must be last)");
	for (size_t i = 0; i < h->n_http_filters; i++) {
		const Envoy__Extensions__Filters__Network__HttpConnectionManager__V3__HttpFilter *f =
		        h->http_filters[i];
		bool router = f->typed_config != NULL && strcmp(f->typed_config->type_url, MTD_XDS_TYPE_ROUTER) == 0;
		bool fault = f->typed_config != NULL && strcmp(f->typed_config->type_url, MTD_XDS_TYPE_FAULT) == 0;
		bool last = i + 1 == h->n_http_filters;
		if (last && !router)
			return mtd_xds__refuse(why, whylen, "http_filters: the last must be the router");
		if (!last && router)
			return mtd_xds__refuse(why, whylen, "http_filters[%zu]: the router must be last", i);
		if (fault) {
			char where[48];
			snprintf(where, sizeof(where), "http_filters[%zu]", i);
			if (out->fault.filter != NULL)
				return mtd_xds__refuse(why, whylen,
				                       "%s: a second fault filter (maitred runs one: \"%.128s\")", where,
				                       out->fault.filter);
			if (!mtd_xds__name_ok(f->name))
				return mtd_xds__refuse(why, whylen, "%s.name: empty, too long or not printable", where);
			int rc = mtd_xds__fault(f->typed_config->value.data, f->typed_config->value.len,
			                        &out->fault.fi, where, why, whylen);
			if (rc != 0)
				return rc;
			if ((out->fault.filter = mtd_cfg__strdup(f->name)) == NULL)
				return -ENOMEM;
			continue;
		}
		if (!last && !f->is_optional)
			return mtd_xds__refuse(why, whylen,
			                       "http_filters[%zu] \"%.128s\": not supported (maitred runs the fault "
			                       "filter and the router; other is_optional ones are skipped)",
			                       i, f->name);
	}
	return 0;
}

static int hcm(const ProtobufCBinaryData *v, struct mtd_xds_listener *out, char *why, size_t whylen)
{
	PbHcm *h;
	int rc = mtd_xds__unpack(
	        &envoy__extensions__filters__network__http_connection_manager__v3__http_connection_manager__descriptor,
	        v->data, v->len, "the HttpConnectionManager", &h, why, whylen);

	if (rc == -EBADMSG)
		return mtd_xds__refuse(why, whylen, "the HttpConnectionManager does not decode");
	if (rc != 0)
		return rc;
	if ((rc = hcm_filters(h, out, why, whylen)) != 0)
		goto done;
	if (h->route_specifier_case ==
	    ENVOY__EXTENSIONS__FILTERS__NETWORK__HTTP_CONNECTION_MANAGER__V3__HTTP_CONNECTION_MANAGER__ROUTE_SPECIFIER_RDS) {
		const Envoy__Config__Core__V3__ConfigSource *cs = h->rds->config_source;
		if (cs == NULL || (cs->config_source_specifier_case !=
		                           ENVOY__CONFIG__CORE__V3__CONFIG_SOURCE__CONFIG_SOURCE_SPECIFIER_ADS &&
		                   cs->config_source_specifier_case !=
		                           ENVOY__CONFIG__CORE__V3__CONFIG_SOURCE__CONFIG_SOURCE_SPECIFIER_SELF)) {
			rc = mtd_xds__refuse(why, whylen, "rds.config_source: must be ads or self");
			goto done;
		}
		if (!mtd_xds__name_ok(h->rds->route_config_name)) {
			rc = mtd_xds__refuse(why, whylen, "rds.route_config_name: empty, too long or not printable");
			goto done;
		}
		rc = (out->rds_name = mtd_cfg__strdup(h->rds->route_config_name)) == NULL ? -ENOMEM : 0;
	} else if (
	        h->route_specifier_case ==
	        ENVOY__EXTENSIONS__FILTERS__NETWORK__HTTP_CONNECTION_MANAGER__V3__HTTP_CONNECTION_MANAGER__ROUTE_SPECIFIER_ROUTE_CONFIG) {
		char inner[384];
		rc = routes_from(h->route_config, out->name, &out->routes, inner, sizeof(inner));
		if (rc == -EINVAL)
			mtd_xds__refuse(why, whylen, "route_config: %s", inner);
	} else {
		rc = mtd_xds__refuse(why, whylen, "neither rds nor route_config (scoped_routes is not supported)");
	}
done:
	envoy__extensions__filters__network__http_connection_manager__v3__http_connection_manager__free_unpacked(
	        h, &mtd_cfg__pb_allocator);
	return rc;
}

static int listener_from(const PbListener *m, struct mtd_xds_listener *out, char *why, size_t whylen)
{
	if (!mtd_xds__name_ok(m->name))
		return mtd_xds__refuse(why, whylen, "name: empty, too long or not printable");
	if ((out->name = mtd_cfg__strdup(m->name)) == NULL)
		return -ENOMEM;
	const ProtobufCBinaryData *v = NULL;
	if (m->api_listener != NULL) {
		const Google__Protobuf__Any *a = m->api_listener->api_listener;
		if (a == NULL || strcmp(a->type_url, MTD_XDS_TYPE_HCM) != 0)
			return mtd_xds__refuse(why, whylen, "api_listener: not an HttpConnectionManager");
		v = &a->value;
	} else if (m->n_filter_chains > 0) {
		const Envoy__Config__Listener__V3__FilterChain *fc = m->filter_chains[0];
		for (size_t i = 0; i < fc->n_filters && v == NULL; i++)
			if (fc->filters[i]->typed_config != NULL &&
			    strcmp(fc->filters[i]->typed_config->type_url, MTD_XDS_TYPE_HCM) == 0)
				v = &fc->filters[i]->typed_config->value;
		if (v == NULL)
			return mtd_xds__refuse(why, whylen, "filter_chains[0]: no HttpConnectionManager filter");
	} else {
		return mtd_xds__refuse(why, whylen, "neither api_listener nor filter_chains");
	}
	return hcm(v, out, why, whylen);
}

int mtd_xds_listener_parse(const uint8_t *buf, size_t len, struct mtd_xds_listener *out, char *why, size_t whylen)
{
	memset(out, 0, sizeof(*out));
	PbListener *m;
	int rc = mtd_xds__unpack(&envoy__config__listener__v3__listener__descriptor, buf, len, NULL, &m, why, whylen);
	if (rc == -EBADMSG)
		return mtd_xds__refuse(why, whylen, "not a Listener (it does not decode)");
	if (rc != 0)
		return rc;
	rc = listener_from(m, out, why, whylen);
	envoy__config__listener__v3__listener__free_unpacked(m, &mtd_cfg__pb_allocator);
	if (rc != 0)
		mtd_xds_listener_clear(out);
	if (rc == -ENOMEM)
		mtd_xds__refuse(why, whylen, "out of memory");
	return rc;
}
