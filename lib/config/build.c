/* Validation and the runtime form: maitred.config.v1.Config -> struct
 * mtd_cfg, with every default documented in config.proto applied and every
 * rule checked here, once, so no consumer re-validates.
 *
 * Errors point at where the offending value was written (the position table
 * pbjson.c filled); binary input has none, so they carry only the path. */
#include <config.h> /* autoconf (lib/config/config.h is the API) */

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "authz/authz.h"
#include "config/config-int.h"
#include "fault/fault.h"
#include "health/outlier.h"
#include "discovery/record.h"
#include "lb/lb.h"
#include "limit/limit.h"
#include "pbwire/pbwire.h"

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

#define DEFAULT_LISTEN     "127.0.0.1:15001"
#define WORKERS_MAX        1024
#define H2_WINDOW_MAX      2147483647u /* RFC 9113 §6.9.1: 2^31 - 1 */
#define HOST_NAME_TEXT_MAX 253         /* RFC 1035 §2.3.4, as dotted text */
#define INBOUND_MAX        MTD_CFG_INBOUND_MAX
#define FROM_REGISTRY      "FROM_REGISTRY"

static _Thread_local bool numeric_hosts_only;

void mtd_cfg__numeric_hosts_only(bool on)
{
	numeric_hosts_only = on;
}

struct builder {
	struct mtd_cfg__diag *d;
	const PbConfig *root; /* the whole message (which entries routes and mirrors reach) */
	const char *basedir;
	unsigned workers;
	const char *zone, *node_id; /* struct mtd_cfg's, for the services */
};

/* What build_lb learnt about one lb block, for the service-wide checks. */
struct lb_info {
	const char *policy; /* enum value name */
	int policy_num;
	unsigned caps; /* all bits when the policy is unavailable, to
	                           avoid a cascade of follow-up errors */
};

static struct mtd_cfg__mark at(struct builder *b, const void *msg, const char *field, const void *fallback)
{
	if (msg == NULL)
		return mtd_cfg__pos_get(b->d, fallback, 0);
	if (field == NULL)
		return mtd_cfg__pos_get(b->d, msg, 0);
	return mtd_cfg__pos_named(b->d, msg, field);
}

#define BERR(where, path, ...) mtd_cfg__error(b->d, where, path, __VA_ARGS__)

/* path + "." + leaf into buf (truncated if it must be: paths are short). */
static const char *sub(char *buf, size_t size, const char *path, const char *leaf)
{
	size_t n = strlen(path), k = strlen(leaf);

	if (n + 1 + k >= size) {
		n = n < size - 1 ? n : size - 1;
		k = 0;
	}
	memmove(buf, path, n);
	if (n != 0 && k != 0)
		buf[n++] = '.';
	memcpy(buf + n, leaf, k);
	buf[n + k] = '\0';
	return buf;
}

static char *dup_or_oom(struct builder *b, const char *s)
{
	char *p = mtd_cfg__strdup(s);

	if (p == NULL)
		b->d->oom = true;
	return p;
}

/* ---- durations -------------------------------------------------------- */

enum zero_rule {
	ZERO_IS_ERROR,   /* must be at least 1ms */
	ZERO_ALLOWED,    /* 0 means 0 */
	ZERO_IS_DEFAULT, /* documented: 0 is replaced by the default */
};

static int64_t dur_ms(struct builder *b, const PbDuration *dur, int64_t def, enum zero_rule zero,
                      struct mtd_cfg__mark where, const char *path)
{
	int64_t ms;

	if (dur == NULL)
		return def;
	if (dur->seconds < 0 || dur->nanos < 0) {
		BERR(where, path, "must not be negative");
		return def;
	}
	if (dur->nanos >= 1000000000 || dur->seconds > INT64_MAX / 1000 - 1) {
		BERR(where, path, "duration out of range");
		return def;
	}
	ms = dur->seconds * 1000 + dur->nanos / 1000000;
	if (ms != 0)
		return ms;
	switch (zero) {
	case ZERO_IS_ERROR:
		BERR(where, path, "must be at least 1ms");
		return def;
	case ZERO_IS_DEFAULT:
		return def;
	case ZERO_ALLOWED:
		break;
	}
	return 0;
}

/* ---- addresses ---------------------------------------------------------- */

static bool host_name_ok(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (!isalnum(c) && c != '-' && c != '.' && c != '_')
			return false;
	}
	return n > 0;
}

int mtd_cfg__split_hostport(const char *text, char **host, uint16_t *port, const char **why)
{
	const char *h, *colon, *p;
	size_t hl;
	unsigned long v = 0;
	char v6[INET6_ADDRSTRLEN + 1];
	struct in6_addr a6;

	*host = NULL;
	if (text[0] == '[') {
		const char *rb = strchr(text, ']');

		if (rb == NULL) {
			*why = "missing ']' after the IPv6 address";
			return -EINVAL;
		}
		h = text + 1;
		hl = (size_t)(rb - h);
		if (rb[1] != ':') {
			*why = "expected \":PORT\" after ']'";
			return -EINVAL;
		}
		colon = rb + 1;
		if (hl == 0 || hl >= sizeof(v6)) {
			*why = "not an IPv6 address inside [ ]";
			return -EINVAL;
		}
		memcpy(v6, h, hl);
		v6[hl] = '\0';
		if (inet_pton(AF_INET6, v6, &a6) != 1) {
			*why = "not an IPv6 address inside [ ]";
			return -EINVAL;
		}
	} else {
		colon = strrchr(text, ':');
		if (colon == NULL) {
			*why = "expected \"HOST:PORT\"";
			return -EINVAL;
		}
		h = text;
		hl = (size_t)(colon - text);
		if (memchr(text, ':', hl) != NULL) {
			*why = "an IPv6 address must be in brackets, e.g. \"[::1]:50051\"";
			return -EINVAL;
		}
		if (hl == 0) {
			*why = "missing host before ':'";
			return -EINVAL;
		}
		if (!host_name_ok(h, hl)) {
			*why = "invalid host name";
			return -EINVAL;
		}
		/* Also keeps an endpoint id ("host:port", its text) far within
		 * the 500 bytes mtd_lb_ketama_points() takes (lb.h). */
		if (hl > HOST_NAME_TEXT_MAX) {
			*why = "host name longer than 253 characters "
			       "(RFC 1035 §2.3.4: 255 octets)";
			return -EINVAL;
		}
	}
	p = colon + 1;
	if (*p == '\0' || strlen(p) > 5 || p[strspn(p, "0123456789")] != '\0') {
		*why = "port must be a number in 1..65535";
		return -EINVAL;
	}
	v = strtoul(p, NULL, 10);
	if (v < 1 || v > 65535) {
		*why = "port must be a number in 1..65535";
		return -EINVAL;
	}
	*host = mtd_cfg__strndup(h, hl);
	if (*host == NULL)
		return -ENOMEM;
	*port = (uint16_t)v;
	return 0;
}

/* Parse and resolve (getaddrinfo, first result) into a; numeric: the host
 * must be an IP literal. 0 or -1 (error recorded; a's strings are owned by
 * a either way). */
static int build_addr_as(struct builder *b, const char *text, struct mtd_cfg__mark where, const char *path,
                         struct mtd_cfg_addr *a, bool numeric)
{
	struct addrinfo hints, *res = NULL;
	char port[8];
	const char *why = NULL;
	int rc;

	a->text = dup_or_oom(b, text);
	if (a->text == NULL)
		return -1;
	rc = mtd_cfg__split_hostport(text, &a->host, &a->port, &why);
	if (rc == -ENOMEM) {
		b->d->oom = true;
		return -1;
	}
	if (rc != 0) {
		BERR(where, path, "bad address \"%s\": %s", text, why);
		return -1;
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV | (numeric_hosts_only || numeric ? AI_NUMERICHOST : 0);
	snprintf(port, sizeof(port), "%u", (unsigned)a->port);
	rc = getaddrinfo(a->host, port, &hints, &res);
	if (rc == EAI_MEMORY) {
		b->d->oom = true;
		return -1;
	}
	if (rc != 0 && numeric) {
		BERR(where, path, "\"%s\" is not an IP address", a->host);
		return -1;
	}
	if (rc != 0) {
		BERR(where, path, "cannot resolve \"%s\": %s", a->host,
		     rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
		return -1;
	}
	memcpy(&a->sa, res->ai_addr, res->ai_addrlen);
	a->salen = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

static int build_addr(struct builder *b, const char *text, struct mtd_cfg__mark where, const char *path,
                      struct mtd_cfg_addr *a)
{
	return build_addr_as(b, text, where, path, a, false);
}

static void addr_fini(struct mtd_cfg_addr *a)
{
	mtd_cfg__free(a->text);
	a->text = NULL;
	mtd_cfg__free(a->host);
	a->host = NULL;
}

static bool same_endpoint(const struct mtd_cfg_addr *x, const struct mtd_cfg_addr *y)
{
	if (x->host == NULL || y->host == NULL || x->port != y->port)
		return false;
	if (strcasecmp(x->host, y->host) == 0)
		return true;
	/* "[::1]" and "[0::1]": the same literal address, written twice. */
	return x->salen != 0 && x->salen == y->salen && memcmp(&x->sa, &y->sa, x->salen) == 0 &&
	       strspn(x->host, "0123456789.:abcdefABCDEF") == strlen(x->host) &&
	       strspn(y->host, "0123456789.:abcdefABCDEF") == strlen(y->host);
}

/* 127.0.0.0/8, ::1 or ::ffff:127.0.0.0/104. */
static bool is_loopback(const struct mtd_cfg_addr *a)
{
	if (a->sa.ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)&a->sa;
		return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
	}
	if (a->sa.ss_family == AF_INET6) {
		const struct in6_addr *in6 = &((const struct sockaddr_in6 *)&a->sa)->sin6_addr;
		return IN6_IS_ADDR_LOOPBACK(in6) || (IN6_IS_ADDR_V4MAPPED(in6) && in6->s6_addr[12] == 127);
	}
	return false;
}

static void build_log(struct builder *b, const PbLog *m, struct mtd_cfg_log *out)
{
	out->level = -1;
	if (m == NULL)
		return;
	out->json = m->format == MAITRED__CONFIG__V1__LOG__FORMAT__JSON;
	/* Log.Level DEBUG..ERROR = 1..4; enum mtd_log_level debug..error = 0..3. */
	if (m->level != MAITRED__CONFIG__V1__LOG__LEVEL__LEVEL_UNSPECIFIED)
		out->level = (int)m->level - 1;
	if (m->access == NULL)
		return;
	out->access = mtd_cfg__calloc(1, sizeof(*out->access));
	if (out->access == NULL) {
		b->d->oom = true;
		return;
	}
	if (m->access->path[0] == '\0')
		BERR(at(b, m->access, "path", m), "log.access.path", "required (a file name, or \"-\" for stderr)");
	out->access->path = dup_or_oom(b, m->access->path);
	out->access->sample = 1.0;
	if (m->access->sample != NULL) {
		double v = m->access->sample->value;
		if (!(isfinite(v) && v >= 0.0 && v <= 1.0))
			BERR(at(b, m->access, "sample", m), "log.access.sample", "must be in [0, 1] (got %g)", v);
		else
			out->access->sample = v;
	}
}

/* ---- names -------------------------------------------------------------- */

static bool ident_ok(const char *s, size_t n)
{
	if (n == 0 || !(isalpha((unsigned char)s[0]) || s[0] == '_'))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!(isalnum((unsigned char)s[i]) || s[i] == '_'))
			return false;
	return true;
}

/* gRPC PROTOCOL-HTTP2: Service-Name = ?( {proto package name} "." ) {service
 * name}; each segment a protobuf identifier. */
static bool service_name_ok(const char *s)
{
	const char *dot;

	for (;;) {
		dot = strchr(s, '.');
		if (!ident_ok(s, dot != NULL ? (size_t)(dot - s) : strlen(s)))
			return false;
		if (dot == NULL)
			return true;
		s = dot + 1;
	}
}

/* RFC 9110 §5.6.2 token characters (already lower-cased). */
static bool header_name_ok(const char *s)
{
	if (*s == '\0')
		return false;
	for (; *s != '\0'; s++) {
		unsigned char c = (unsigned char)*s;

		if (!(isdigit(c) || (c >= 'a' && c <= 'z') || strchr("!#$%&'*+-.^_`|~", c) != NULL))
			return false;
	}
	return true;
}

/* ---- hash key ----------------------------------------------------------- */

/* The data plane hands hk->field_path to mtd_pbwire_find() as is. */
_Static_assert(MTD_CFG_FIELD_PATH_MAX == MTD_PBWIRE_MAX_DEPTH, "a config field path is a pbwire path");

#define FIELD_RESERVED_LO 19000u /* protobuf: reserved for the implementation */
#define FIELD_RESERVED_HI 19999u

/* Why mtd_pbwire_path_parse() refused s, in words. It only explains: what
 * is accepted is the pbwire parser's call, the extractor's own grammar. */
static const char *field_path_why(const char *s, char *buf, size_t size)
{
	size_t depth = 0;

	for (;;) {
		size_t n = strspn(s, "0123456789");

		if (n == 0 || (s[n] != '.' && s[n] != '\0'))
			return "expected field numbers separated by '.', e.g. \"2.1\"";
		if (n > 1 && s[0] == '0') {
			snprintf(buf, size, "field number \"%.*s\" has a leading zero", (int)n, s);
			return buf;
		}
		if (n > 10 || strtoul(s, NULL, 10) < 1 || strtoul(s, NULL, 10) > MTD_PBWIRE_MAX_FIELD) {
			snprintf(buf, size, "field number out of range 1..%u", MTD_PBWIRE_MAX_FIELD);
			return buf;
		}
		depth++;
		if (s[n] == '\0')
			break;
		s += n + 1;
	}
	if (depth > MTD_PBWIRE_MAX_DEPTH) {
		snprintf(buf, size, "path deeper than %d fields", MTD_PBWIRE_MAX_DEPTH);
		return buf;
	}
	return "not a field path"; /* the two grammars disagree: a bug here */
}

static void build_hash_key(struct builder *b, const PbHashKey *m, const char *path, struct mtd_cfg_hash_key *out)
{
	bool has_h = m->header != NULL && m->header[0] != '\0';
	bool has_f = m->field != NULL && m->field[0] != '\0';
	char p[256], why[64];

	out->fail_on_missing = m->on_missing == MAITRED__CONFIG__V1__HASH_KEY__ON_MISSING__FAIL;
	if (has_h == has_f) {
		BERR(at(b, m, has_h ? "field" : NULL, NULL), path,
		     has_h ? "set exactly one of header or field, not both" : "set one of header or field");
		return;
	}
	if (has_h) {
		sub(p, sizeof(p), path, "header");
		out->header = dup_or_oom(b, m->header);
		if (out->header == NULL)
			return;
		for (char *c = out->header; *c != '\0'; c++)
			*c = (char)tolower((unsigned char)*c);
		out->kind = MTD_CFG_HASH_HEADER;
		if (out->header[0] == ':')
			BERR(at(b, m, "header", NULL), p, "\"%s\" is a pseudo-header; use a metadata key", m->header);
		else if (!header_name_ok(out->header))
			BERR(at(b, m, "header", NULL), p, "\"%s\" is not a valid HTTP/2 field name (RFC 9110 §5.6.2)",
			     m->header);
		return;
	}
	sub(p, sizeof(p), path, "field");
	out->kind = MTD_CFG_HASH_FIELD;
	if (mtd_pbwire_path_parse(m->field, out->field_path, &out->field_depth) != 0) {
		out->field_depth = 0;
		BERR(at(b, m, "field", NULL), p, "bad field path \"%s\": %s", m->field,
		     field_path_why(m->field, why, sizeof(why)));
		return;
	}
	/* Stricter than the extractor: no .proto can declare these numbers, so
	 * such a path would never match a real message. */
	for (size_t i = 0; i < out->field_depth; i++) {
		if (out->field_path[i] >= FIELD_RESERVED_LO && out->field_path[i] <= FIELD_RESERVED_HI) {
			BERR(at(b, m, "field", NULL), p,
			     "bad field path \"%s\": field numbers %u..%u are reserved "
			     "by protobuf",
			     m->field, FIELD_RESERVED_LO, FIELD_RESERVED_HI);
			break;
		}
	}
}

static void hash_key_copy(struct builder *b, struct mtd_cfg_hash_key *dst, const struct mtd_cfg_hash_key *src)
{
	*dst = *src;
	if (src->header != NULL)
		dst->header = dup_or_oom(b, src->header);
}

/* ---- load balancing ----------------------------------------------------- */

#define CHOICE_COUNT_MAX 64u /* config's own cap; lib/lb only needs >= 2 */

/* Reject an option the chosen strategy would silently ignore (STYLE.md:
 * strategies declare what they support). */
static bool lb_opt_allowed(struct builder *b, const struct lb_info *info, bool allowed, const PbLb *m,
                           const char *field, const char *path)
{
	char p[256];

	if (allowed)
		return true;
	BERR(at(b, m, field, NULL), sub(p, sizeof(p), path, field), "policy %s does not use %s", info->policy, field);
	return false;
}

/* The options as written, with lib/lb's defaults for the rest. The values
 * the strategy range-checks itself are checked by lb_check(), with the
 * strategy's own rule; choice_count keeps its stricter config cap here. */
static void build_lb(struct builder *b, const PbLb *m, const void *owner, const char *path, struct mtd_lb_config *out,
                     struct lb_info *info)
{
	const ProtobufCEnumValue *ev;
	int policy = m != NULL ? (int)m->policy : 0;
	char p[256];
	unsigned caps;

	mtd_lb_config_defaults(out, NULL);
	out->n_workers = b->workers;

	if (policy == MAITRED__CONFIG__V1__LOAD_BALANCING__POLICY__POLICY_UNSPECIFIED)
		policy = MAITRED__CONFIG__V1__LOAD_BALANCING__POLICY__ROUND_ROBIN;
	info->policy_num = policy;
	info->caps = ~0u;
	ev = protobuf_c_enum_descriptor_get_value(&maitred__config__v1__load_balancing__policy__descriptor, policy);
	info->policy = ev != NULL ? ev->name : "?";
	sub(p, sizeof(p), path, "policy");
	if (ev == NULL) {
		BERR(at(b, m, "policy", owner), p, "unknown policy number %d", policy);
		return;
	}
	out->ops = mtd_lb_find(ev->name);
	if (out->ops == NULL) {
		BERR(at(b, m, "policy", owner), p, "policy %s is not available in this build", ev->name);
		return;
	}
	caps = info->caps = out->ops->caps;
	if (m == NULL)
		return;

	if (m->choice_count != 0 && lb_opt_allowed(b, info, caps & MTD_LB_CAP_CHOICE_COUNT, m, "choice_count", path)) {
		if (m->choice_count < 2 || m->choice_count > CHOICE_COUNT_MAX)
			BERR(at(b, m, "choice_count", NULL), sub(p, sizeof(p), path, "choice_count"),
			     "must be in 2..%u, got %u", CHOICE_COUNT_MAX, (unsigned)m->choice_count);
		else
			out->choice_count = m->choice_count;
	}
	/* lb-t.h: CAP_CHOICE_COUNT also covers active_request_bias. */
	if (m->active_request_bias != NULL &&
	    lb_opt_allowed(b, info, caps & MTD_LB_CAP_CHOICE_COUNT, m, "active_request_bias", path))
		out->active_request_bias = m->active_request_bias->value;
	if (m->ring_points != 0 && lb_opt_allowed(b, info, caps & MTD_LB_CAP_RING_POINTS, m, "ring_points", path))
		out->ring_points = m->ring_points;
	if (m->table_size != 0 && lb_opt_allowed(b, info, caps & MTD_LB_CAP_TABLE_SIZE, m, "table_size", path))
		out->table_size = m->table_size;
	if (m->bounded_load_factor != 0 &&
	    lb_opt_allowed(b, info, caps & MTD_LB_CAP_BOUNDED_LOAD, m, "bounded_load_factor", path))
		out->bounded_load_factor = m->bounded_load_factor;
	if (m->decay != NULL && lb_opt_allowed(b, info, caps & MTD_LB_CAP_DECAY, m, "decay", path))
		out->decay_ms = dur_ms(b, m->decay, MTD_LB_DEFAULT_DECAY_MS, ZERO_IS_ERROR, at(b, m, "decay", NULL),
		                       sub(p, sizeof(p), path, "decay"));
	/* Ranges: lb_check() with lib/lb's rule (hot_keys.*). */
	if (m->hot_keys != NULL && lb_opt_allowed(b, info, caps & MTD_LB_CAP_HOT_KEYS, m, "hot_keys", path)) {
		out->hot_keys.threshold_per_second = m->hot_keys->threshold_per_second != 0
		                                             ? m->hot_keys->threshold_per_second
		                                             : MTD_LB_DEFAULT_HOT_THRESHOLD;
		out->hot_keys.spread = m->hot_keys->spread != 0 ? m->hot_keys->spread : MTD_LB_DEFAULT_HOT_SPREAD;
	}
}

/* The rule of lib/lb/picker.c's mtd_lb_config_check() that refused `field`,
 * in words, into buf; then put the field back to its default so the check
 * can go on to the next one. false for a field this list does not know. */
static bool lb_rule(struct mtd_lb_config *lb, const char *field, char *buf, size_t size)
{
	struct mtd_lb_config def;

	mtd_lb_config_defaults(&def, lb->ops);
	if (strcmp(field, "choice_count") == 0) {
		snprintf(buf, size, "must be in 2..%u, got %u", CHOICE_COUNT_MAX, (unsigned)lb->choice_count);
		lb->choice_count = def.choice_count;
	} else if (strcmp(field, "active_request_bias") == 0) {
		snprintf(buf, size, "must be a finite number >= 0");
		lb->active_request_bias = def.active_request_bias;
	} else if (strcmp(field, "ring_points") == 0) {
		snprintf(buf, size, "must be in 1..%u, got %u", MTD_LB_MAX_RING_POINTS, (unsigned)lb->ring_points);
		lb->ring_points = def.ring_points;
	} else if (strcmp(field, "table_size") == 0) {
		snprintf(buf, size, "must be a prime of at most %u, got %u", MTD_LB_MAX_TABLE_SIZE,
		         (unsigned)lb->table_size);
		lb->table_size = def.table_size;
	} else if (strcmp(field, "bounded_load_factor") == 0) {
		snprintf(buf, size, "must be 0 (unbounded) or greater than 1");
		lb->bounded_load_factor = def.bounded_load_factor;
	} else if (strcmp(field, "decay") == 0) {
		snprintf(buf, size, "must be at least 1ms");
		lb->decay_ms = def.decay_ms;
	} else if (strcmp(field, "warmup.duration") == 0) {
		snprintf(buf, size, "must not be negative");
		lb->warmup.duration_ms = 0;
	} else if (strcmp(field, "warmup.curve") == 0) {
		snprintf(buf, size, "unknown curve %d", (int)lb->warmup.curve);
		lb->warmup.curve = def.warmup.curve;
	} else if (strcmp(field, "warmup.aggression") == 0) {
		snprintf(buf, size, "must be greater than 0");
		lb->warmup.aggression = def.warmup.aggression;
	} else if (strcmp(field, "warmup.min_weight_percent") == 0) {
		snprintf(buf, size, "must be in 0..100");
		lb->warmup.min_weight_percent = def.warmup.min_weight_percent;
	} else if (strcmp(field, "hot_keys.spread") == 0) {
		snprintf(buf, size, "must be in 2..%u, got %u", MTD_LB_MAX_HOT_SPREAD, (unsigned)lb->hot_keys.spread);
		lb->hot_keys.spread = MTD_LB_DEFAULT_HOT_SPREAD;
	} else if (strcmp(field, "hot_keys.threshold_per_second") == 0) {
		snprintf(buf, size, "must be at least 1");
		lb->hot_keys.threshold_per_second = MTD_LB_DEFAULT_HOT_THRESHOLD;
	} else {
		return false;
	}
	return true;
}

/* Whatever mtd_lb_config_check() refuses in a built lb block (warmup
 * included) becomes a config error at the field it names, so a range the
 * strategy enforces is never a startup surprise. m/owner/path: the lb
 * block; svc/svc_path: its service, whose warmup the block carries. Every
 * refused field is reported, each once: it is reset after its error. */
static void lb_check(struct builder *b, const PbLb *m, const void *owner, const char *path, const PbService *svc,
                     const char *svc_path, struct mtd_lb_config *lb)
{
	const char *field, *prev = "";
	char p[256], why[96];

	if (lb->ops == NULL)
		return; /* build_lb() said why */
	while (mtd_lb_config_check(lb, &field) != 0) {
		struct mtd_cfg__mark where;

		if (strncmp(field, "warmup.", 7) == 0) {
			where = at(b, svc->warmup, field + 7, svc);
			sub(p, sizeof(p), svc_path, field);
		} else if (strncmp(field, "hot_keys.", 9) == 0 && m != NULL) {
			where = at(b, m->hot_keys, field + 9, m);
			sub(p, sizeof(p), path, field);
		} else {
			where = at(b, m, field, owner);
			sub(p, sizeof(p), path, field);
		}
		if (strcmp(field, prev) == 0)
			return; /* its default is refused too: said once is enough */
		if (!lb_rule(lb, field, why, sizeof(why))) {
			BERR(where, p, "refused by policy %s", lb->ops->name);
			return;
		}
		BERR(where, p, "%s", why);
		prev = field;
	}
}

/* What mtd_lb_picker_new() would refuse for this service's endpoints
 * although every option is valid alone (checked after lb_check()):
 * maglev.c gives each endpoint that takes traffic (weight > 0; all of
 * them when none has) a slot of its own, so it needs as many slots. The
 * other strategies take any endpoint count up to MTD_LB_MAX_ENDPOINTS,
 * which build_service() enforces. */
static void lb_fits_endpoints(struct builder *b, const PbLb *m, const void *owner, const char *path,
                              const struct mtd_lb_config *lb, const struct mtd_cfg_service *svc)
{
	struct mtd_lb_config trial = *lb;
	size_t members = 0;
	char p[256];

	if (lb->ops == NULL || !(lb->ops->caps & MTD_LB_CAP_TABLE_SIZE))
		return;
	for (size_t i = 0; i < svc->n_endpoints; i++)
		members += svc->endpoints[i].weight > 0;
	if (members == 0)
		members = svc->n_endpoints;
	if (members <= lb->table_size)
		return;
	/* The smallest table lib/lb accepts that is large enough (members <=
	 * MTD_LB_MAX_ENDPOINTS, far below MTD_LB_MAX_TABLE_SIZE). */
	trial.table_size = (uint32_t)members;
	while (trial.table_size < MTD_LB_MAX_TABLE_SIZE && mtd_lb_config_check(&trial, NULL) != 0)
		trial.table_size++;
	BERR(at(b, m, "table_size", owner), sub(p, sizeof(p), path, "table_size"),
	     "%u is smaller than the %zu endpoints taking traffic (policy %s "
	     "needs a slot for each); use a prime of at least %zu, e.g. %u",
	     (unsigned)lb->table_size, members, lb->ops->name, members, (unsigned)trial.table_size);
}

/* The ranges here are also lib/lb's (mtd_lb_config_check), which checks
 * them only for a policy that warms up. Checked here once per service,
 * whatever its policies, so lb_check() finds them valid and never repeats
 * them for each lb block carrying this warmup. */
static void build_warmup(struct builder *b, const PbWarmup *m, const char *path, struct mtd_lb_warmup *out)
{
	char p[256];
	bool slow;

	out->duration_ms = 0;
	out->curve = MTD_LB_WARMUP_LINEAR;
	out->aggression = 1.0;
	out->min_weight_percent = 10;
	if (m == NULL)
		return;
	out->duration_ms = dur_ms(b, m->duration, 0, ZERO_ALLOWED, at(b, m, "duration", NULL),
	                          sub(p, sizeof(p), path, "duration"));
	slow = m->curve == MAITRED__CONFIG__V1__WARMUP__CURVE__SLOW_START;
	if (slow)
		out->curve = MTD_LB_WARMUP_SLOW_START;
	if (m->aggression != NULL) {
		sub(p, sizeof(p), path, "aggression");
		if (!slow)
			BERR(at(b, m, "aggression", NULL), p, "applies only to curve SLOW_START");
		else if (!(isfinite(m->aggression->value) && m->aggression->value > 0))
			BERR(at(b, m, "aggression", NULL), p, "must be greater than 0");
		else
			out->aggression = m->aggression->value;
	}
	if (m->min_weight_percent != NULL) {
		double v = m->min_weight_percent->value;

		sub(p, sizeof(p), path, "min_weight_percent");
		if (!slow)
			BERR(at(b, m, "min_weight_percent", NULL), p, "applies only to curve SLOW_START");
		else if (!(v >= 0 && v <= 100))
			BERR(at(b, m, "min_weight_percent", NULL), p, "must be in 0..100");
		else
			out->min_weight_percent = v;
	}
}

/* ---- TLS ---------------------------------------------------------------- */

/* basedir + name for a relative name; checks the file can be read. */
static char *tls_file(struct builder *b, const void *m, const char *field, const char *value, const char *path)
{
	char p[256], *full;
	int fd;

	if (value[0] == '/' || b->basedir[0] == '\0')
		full = mtd_cfg__strdup(value);
	else
		full = mtd_cfg__asprintf("%s%s", b->basedir, value);
	if (full == NULL) {
		b->d->oom = true;
		return NULL;
	}
	fd = open(full, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		BERR(at(b, m, field, NULL), sub(p, sizeof(p), path, field), "cannot read \"%s\": %s", full,
		     strerror(errno));
	else
		close(fd);
	return full;
}

static struct mtd_cfg_tls *build_tls(struct builder *b, const PbTls *m, const char *path)
{
	struct mtd_cfg_tls *t = mtd_cfg__calloc(1, sizeof(*t));
	bool has_cert = m->cert_file[0] != '\0', has_key = m->key_file[0] != '\0';
	char p[256];

	if (t == NULL) {
		b->d->oom = true;
		return NULL;
	}
	if (m->ca_file[0] == '\0')
		BERR(at(b, m, "ca_file", NULL), sub(p, sizeof(p), path, "ca_file"), "is required when tls is set");
	else
		t->ca_file = tls_file(b, m, "ca_file", m->ca_file, path);
	if (m->server_name[0] != '\0')
		t->server_name = dup_or_oom(b, m->server_name);
	if (has_cert != has_key) {
		const char *f = has_cert ? "cert_file" : "key_file";

		BERR(at(b, m, f, NULL), sub(p, sizeof(p), path, f),
		     "cert_file and key_file must be set together (mTLS)");
	} else if (has_cert) {
		t->cert_file = tls_file(b, m, "cert_file", m->cert_file, path);
		t->key_file = tls_file(b, m, "key_file", m->key_file, path);
	}
	if (strcmp(m->server_identity, FROM_REGISTRY) == 0) {
		t->server_identity_registry = true; /* the service checks its source (build_service) */
	} else if (m->server_identity[0] != '\0') {
		const char *why = NULL;

		/* An identity is what a principal names exactly (lib/authz). */
		if (strchr(m->server_identity, '*') != NULL || !mtd_authz_principal_ok(m->server_identity, &why))
			BERR(at(b, m, "server_identity", NULL), sub(p, sizeof(p), path, "server_identity"),
			     "\"%s\" is not an identity (a URI SAN such as \"spiffe://cluster.local/ns/NS/sa/SA\", "
			     "or FROM_REGISTRY)",
			     m->server_identity);
		else
			t->server_identity = dup_or_oom(b, m->server_identity);
	}
	return t;
}

/* ---- discovery (issue 7) ------------------------------------------------ */

/* A list of "host:port" strings (etcd cluster, DNS resolvers): none empty,
 * no duplicate. NULL when n is 0 or on error (recorded). */
static struct mtd_cfg_addr *build_addr_list(struct builder *b, char **texts, size_t n, const void *m, const char *field,
                                            const char *path, bool numeric)
{
	struct mtd_cfg_addr *out;
	char p[256];

	if (n == 0)
		return NULL;
	out = mtd_cfg__calloc(n, sizeof(*out));
	if (out == NULL) {
		b->d->oom = true;
		return NULL;
	}
	for (size_t i = 0; i < n; i++) {
		snprintf(p, sizeof(p), "%s.%s[%zu]", path, field, i);
		if (texts[i][0] == '\0') {
			BERR(at(b, m, field, NULL), p, "is empty (\"HOST:PORT\")");
			continue;
		}
		if (build_addr_as(b, texts[i], at(b, m, field, NULL), p, &out[i], numeric) != 0)
			continue;
		for (size_t j = 0; j < i; j++) {
			if (same_endpoint(&out[j], &out[i])) {
				BERR(at(b, m, field, NULL), p, "duplicate \"%s\" (also %s[%zu])", texts[i], field, j);
				break;
			}
		}
	}
	return out;
}

static struct mtd_cfg_etcd *build_etcd(struct builder *b, const PbEtcd *m, const char *path)
{
	struct mtd_cfg_etcd *e = mtd_cfg__calloc(1, sizeof(*e));
	char p[256];

	if (e == NULL) {
		b->d->oom = true;
		return NULL;
	}
	if (m->n_endpoints == 0)
		BERR(at(b, m, "endpoints", NULL), sub(p, sizeof(p), path, "endpoints"),
		     "is required (the etcd cluster, [\"HOST:PORT\", ...])");
	e->endpoints = build_addr_list(b, m->endpoints, m->n_endpoints, m, "endpoints", path, false);
	if (e->endpoints != NULL)
		e->n_endpoints = m->n_endpoints;
	if (m->prefix[0] == '\0')
		BERR(at(b, m, "prefix", NULL), sub(p, sizeof(p), path, "prefix"),
		     "is required (e.g. \"/maitred/services/pkg.Service/\")");
	else
		e->prefix = dup_or_oom(b, m->prefix);
	if (m->tls != NULL) {
		e->tls = build_tls(b, m->tls, sub(p, sizeof(p), path, "tls"));
		if (m->tls->server_identity[0] != '\0') {
			char q[256];

			BERR(at(b, m->tls, "server_identity", NULL),
			     sub(q, sizeof(q), sub(p, sizeof(p), path, "tls"), "server_identity"),
			     "is for a service's upstreams (services[].tls), not for etcd");
		}
	}
	if ((m->username[0] != '\0') != (m->password_file[0] != '\0')) {
		const char *f = m->username[0] != '\0' ? "password_file" : "username";

		BERR(at(b, m, m->username[0] != '\0' ? "username" : "password_file", NULL), sub(p, sizeof(p), path, f),
		     "username and password_file must be set together");
	} else if (m->username[0] != '\0') {
		e->username = dup_or_oom(b, m->username);
		e->password_file = tls_file(b, m, "password_file", m->password_file, path);
	}
	return e;
}

/* RFC 1035 §2.3.4: labels of 1..63 characters; one trailing dot allowed. */
static bool dns_name_ok(const char *s, size_t n)
{
	size_t label = 0;

	if (n > 0 && s[n - 1] == '.')
		n--;
	if (n == 0 || n > HOST_NAME_TEXT_MAX || !host_name_ok(s, n))
		return false;
	for (size_t i = 0; i <= n; i++) {
		if (i == n || s[i] == '.') {
			if (label == 0 || label > 63)
				return false;
			label = 0;
		} else {
			label++;
		}
	}
	return true;
}

static struct mtd_cfg_dns *build_dns(struct builder *b, const PbDns *m, const char *path)
{
	struct mtd_cfg_dns *d = mtd_cfg__calloc(1, sizeof(*d));
	size_t n = strlen(m->name);
	char p[256];

	if (d == NULL) {
		b->d->oom = true;
		return NULL;
	}
	if (n == 0)
		BERR(at(b, m, "name", NULL), sub(p, sizeof(p), path, "name"),
		     "is required (e.g. \"pay.shop.svc.cluster.local\")");
	else if (!dns_name_ok(m->name, n))
		BERR(at(b, m, "name", NULL), sub(p, sizeof(p), path, "name"), "\"%s\" is not a host name", m->name);
	else
		d->name = dup_or_oom(b, m->name);
	if (m->port == 0 || m->port > 65535)
		BERR(at(b, m, "port", m), sub(p, sizeof(p), path, "port"), "is required, 1..65535%s",
		     m->port == 0 ? "" : " (out of range)");
	else
		d->port = (uint16_t)m->port;
	d->refresh_ms = dur_ms(b, m->refresh, 5000, ZERO_IS_ERROR, at(b, m, "refresh", NULL),
	                       sub(p, sizeof(p), path, "refresh"));
	d->resolvers = build_addr_list(b, m->resolvers, m->n_resolvers, m, "resolvers", path, true);
	if (d->resolvers != NULL)
		d->n_resolvers = m->n_resolvers;
	return d;
}

/* Issue 7: exactly one endpoint source per service; errors name the field. */
static void build_source(struct builder *b, const PbService *m, const char *path, struct mtd_cfg_service *out)
{
	const PbDiscovery *dm = m->discovery;
	char p[256], dpath[96];
	unsigned n = (m->n_endpoints != 0) + (dm != NULL && dm->etcd != NULL) + (dm != NULL && dm->dns != NULL);

	snprintf(dpath, sizeof(dpath), "%s.discovery", path);
	if (dm != NULL && dm->etcd == NULL && dm->dns == NULL) {
		BERR(at(b, m, "discovery", NULL), dpath, "needs etcd or dns");
		return;
	}
	if (n == 0) {
		BERR(at(b, m, "endpoints", NULL), sub(p, sizeof(p), path, "endpoints"),
		     "a service needs exactly one endpoint source: endpoints | discovery.etcd | discovery.dns");
		return;
	}
	if (n > 1) {
		const char *second = dm->dns != NULL ? "dns" : "etcd";

		BERR(at(b, dm, second, NULL), sub(p, sizeof(p), dpath, second),
		     "a service has exactly one endpoint source: endpoints | discovery.etcd | discovery.dns "
		     "(this one is %s)",
		     m->n_endpoints != 0 && dm->etcd != NULL && dm->dns != NULL ? "the third" : "the second");
		return;
	}
	if (dm == NULL) {
		out->source = MTD_CFG_SOURCE_STATIC;
	} else if (dm->etcd != NULL) {
		out->source = MTD_CFG_SOURCE_ETCD;
		out->etcd = build_etcd(b, dm->etcd, sub(p, sizeof(p), dpath, "etcd"));
	} else {
		out->source = MTD_CFG_SOURCE_DNS;
		out->dns = build_dns(b, dm->dns, sub(p, sizeof(p), dpath, "dns"));
	}
}

/* ---- services ----------------------------------------------------------- */

static uint32_t u32_limit(struct builder *b, uint32_t v, uint32_t def, uint32_t max, const void *m, const char *field,
                          const char *path)
{
	char p[256];

	if (v == 0)
		return def;
	if (v > max) {
		BERR(at(b, m, field, NULL), sub(p, sizeof(p), path, field), "must be at most %u, got %u", (unsigned)max,
		     (unsigned)v);
		return def;
	}
	return v;
}

static void build_upstream(struct builder *b, const PbUpstream *m, const char *path, struct mtd_cfg_upstream *out)
{
	char p[256];

	out->connect_timeout_ms = 2000;
	out->idle_timeout_ms = 300000;
	out->keepalive_interval_ms = 30000;
	out->keepalive_timeout_ms = 10000;
	out->max_connections = 4;
	out->max_concurrent_streams = 1000;
	out->max_pending = 1024;
	out->write_timeout_ms = 30000;
	if (m == NULL)
		return;
#define UP_DUR(f, def, zero) out->f##_ms = dur_ms(b, m->f, def, zero, at(b, m, #f, NULL), sub(p, sizeof(p), path, #f))
	UP_DUR(connect_timeout, 2000, ZERO_IS_ERROR);
	UP_DUR(idle_timeout, 300000, ZERO_IS_ERROR);
	UP_DUR(keepalive_interval, 30000, ZERO_IS_DEFAULT);
	UP_DUR(keepalive_timeout, 10000, ZERO_IS_ERROR);
	UP_DUR(write_timeout, 30000, ZERO_IS_ERROR);
#undef UP_DUR
	out->max_connections = u32_limit(b, m->max_connections, 4, 1024, m, "max_connections", path);
	out->max_concurrent_streams =
	        u32_limit(b, m->max_concurrent_streams, 1000, H2_WINDOW_MAX, m, "max_concurrent_streams", path);
	out->max_pending = u32_limit(b, m->max_pending, 1024, 1u << 20, m, "max_pending", path);
}

/* ---- fault policy ------------------------------------------------------- */

#define REPLAY_BUFFER_MAX  (64u << 20)
#define HEDGE_DELAY_MAX_MS 60000

/* A fault option the chosen mode would silently ignore is refused
 * (STYLE.md: no key parsed and then ignored). */
static bool fault_opt_allowed(struct builder *b, const PbFault *m, const char *field, bool allowed, const char *mode,
                              const char *path)
{
	char p[256];

	if (allowed)
		return true;
	BERR(at(b, m, field, NULL), sub(p, sizeof(p), path, field), "mode %s does not use %s", mode, field);
	return false;
}

static void build_fault(struct builder *b, const PbFault *m, const char *path, struct mtd_fault_policy *out)
{
	char p[256];
	const char *mode;
	bool failover, forking;

	mtd_fault_policy_defaults(out);
	if (m == NULL)
		return;
	switch (m->mode) {
	case MAITRED__CONFIG__V1__FAULT__MODE__MODE_UNSPECIFIED:
	case MAITRED__CONFIG__V1__FAULT__MODE__FAILFAST:
		out->mode = MTD_FAULT_FAILFAST;
		break;
	case MAITRED__CONFIG__V1__FAULT__MODE__FAILOVER:
		out->mode = MTD_FAULT_FAILOVER;
		break;
	case MAITRED__CONFIG__V1__FAULT__MODE__FAILSAFE:
		out->mode = MTD_FAULT_FAILSAFE;
		break;
	case MAITRED__CONFIG__V1__FAULT__MODE__FAILBACK:
		out->mode = MTD_FAULT_FAILBACK;
		break;
	case MAITRED__CONFIG__V1__FAULT__MODE__FORKING:
		out->mode = MTD_FAULT_FORKING;
		break;
	case MAITRED__CONFIG__V1__FAULT__MODE__BROADCAST:
		out->mode = MTD_FAULT_BROADCAST;
		break;
	default:
		BERR(at(b, m, "mode", NULL), sub(p, sizeof(p), path, "mode"), "unknown mode number %d", (int)m->mode);
		return;
	}
	mode = mtd_fault_mode_name(out->mode);
	failover = out->mode == MTD_FAULT_FAILOVER;
	forking = out->mode == MTD_FAULT_FORKING;

	if (m->retries != NULL && fault_opt_allowed(b, m, "retries", failover, mode, path)) {
		if (m->retries->value > MTD_FAULT_RETRIES_MAX)
			BERR(at(b, m, "retries", NULL), sub(p, sizeof(p), path, "retries"), "must be in 0..%u, got %u",
			     MTD_FAULT_RETRIES_MAX, (unsigned)m->retries->value);
		else
			out->retries = m->retries->value;
	}
	if (m->n_retry_on != 0) {
		out->retry_on = 0;
		for (size_t i = 0; i < m->n_retry_on; i++) {
			int code = (int)m->retry_on[i];

			snprintf(p, sizeof(p), "%s.retry_on[%zu]", path, i);
			if (code == MAITRED__CONFIG__V1__GRPC_STATUS__OK)
				BERR(at(b, m, "retry_on", NULL), p, "OK is not a failure");
			else if (code < 0 || code > 16)
				BERR(at(b, m, "retry_on", NULL), p, "unknown status number %d", code);
			else
				out->retry_on |= 1u << code;
		}
	}
	if (m->per_try_timeout != NULL)
		out->per_try_timeout_ms =
		        dur_ms(b, m->per_try_timeout, 0, ZERO_IS_ERROR, at(b, m, "per_try_timeout", NULL),
		               sub(p, sizeof(p), path, "per_try_timeout"));
	if (m->failback != NULL && fault_opt_allowed(b, m, "failback", out->mode == MTD_FAULT_FAILBACK, mode, path)) {
		char fp[256];

		sub(fp, sizeof(fp), path, "failback");
		if (m->failback->queue != 0)
			out->failback_queue = u32_limit(b, m->failback->queue, 100, 100000, m->failback, "queue", fp);
		if (m->failback->retries != 0)
			out->failback_retries = u32_limit(b, m->failback->retries, 3, 100, m->failback, "retries", fp);
	}
	if (m->backoff != NULL &&
	    fault_opt_allowed(b, m, "backoff", failover || out->mode == MTD_FAULT_FAILBACK, mode, path)) {
		const Maitred__Config__V1__Backoff *bo = m->backoff;
		char bp[256];

		sub(bp, sizeof(bp), path, "backoff");
		out->backoff_base_ms =
		        dur_ms(b, bo->base_, 25, ZERO_ALLOWED, at(b, bo, "base_", NULL), sub(p, sizeof(p), bp, "base"));
		out->backoff_max_ms = dur_ms(b, bo->max, out->backoff_base_ms > 250 ? out->backoff_base_ms : 250,
		                             ZERO_ALLOWED, at(b, bo, "max", NULL), sub(p, sizeof(p), bp, "max"));
		if (out->backoff_max_ms < out->backoff_base_ms && bo->max != NULL)
			BERR(at(b, bo, "max", NULL), sub(p, sizeof(p), bp, "max"), "must not be below base (%lld ms)",
			     (long long)out->backoff_base_ms);
	}
	if (m->forks != 0 && fault_opt_allowed(b, m, "forks", forking, mode, path)) {
		if (m->forks < 2 || m->forks > 16)
			BERR(at(b, m, "forks", NULL), sub(p, sizeof(p), path, "forks"), "must be in 2..16, got %u",
			     (unsigned)m->forks);
		else
			out->forks = m->forks;
	}
	if (m->hedge_delay[0] != '\0' && fault_opt_allowed(b, m, "hedge_delay", forking, mode, path)) {
		int64_t sec;
		int32_t ns;
		const char *why = NULL;

		sub(p, sizeof(p), path, "hedge_delay");
		if (strcmp(m->hedge_delay, "AUTO") == 0)
			out->hedge_delay_ms = MTD_FAULT_HEDGE_AUTO;
		else if (mtd_cfg__parse_duration(m->hedge_delay, &sec, &ns, &why) != 0)
			BERR(at(b, m, "hedge_delay", NULL), p, "bad hedge_delay \"%s\": %s (a duration or AUTO)",
			     m->hedge_delay, why);
		else if (sec < 0 || ns < 0)
			BERR(at(b, m, "hedge_delay", NULL), p, "must not be negative");
		else if (sec * 1000 + ns / 1000000 > HEDGE_DELAY_MAX_MS)
			BERR(at(b, m, "hedge_delay", NULL), p, "must be at most %ds", HEDGE_DELAY_MAX_MS / 1000);
		else
			out->hedge_delay_ms = sec * 1000 + ns / 1000000;
	}
	if (m->replay_buffer != 0)
		out->replay_buffer =
		        u32_limit(b, m->replay_buffer, 256u << 10, REPLAY_BUFFER_MAX, m, "replay_buffer", path);
	if (m->fallback != NULL) {
		const Maitred__Config__V1__Fallback *fb = m->fallback;
		char fp[256];

		sub(fp, sizeof(fp), path, "fallback");
		out->fallback.set = true;
		out->fallback.status = (int)fb->status;
		if (fb->status < 0 || fb->status > 16)
			BERR(at(b, fb, "status", NULL), sub(p, sizeof(p), fp, "status"), "unknown status number %d",
			     (int)fb->status);
		if (fb->message[0] != '\0') {
			out->fallback.message = dup_or_oom(b, fb->message);
			if (fb->status == MAITRED__CONFIG__V1__GRPC_STATUS__OK)
				BERR(at(b, fb, "message", NULL), sub(p, sizeof(p), fp, "message"),
				     "a grpc-message goes with a non-OK status");
		}
		if (fb->response_base64.len != 0) {
			if (fb->status != MAITRED__CONFIG__V1__GRPC_STATUS__OK)
				BERR(at(b, fb, "response_base64", NULL), sub(p, sizeof(p), fp, "response_base64"),
				     "a response message goes with status OK");
			else if (fb->response_base64.len > REPLAY_BUFFER_MAX)
				BERR(at(b, fb, "response_base64", NULL), sub(p, sizeof(p), fp, "response_base64"),
				     "longer than %u bytes", REPLAY_BUFFER_MAX);
			out->fallback.response = mtd_cfg__malloc(fb->response_base64.len);
			if (out->fallback.response == NULL) {
				b->d->oom = true;
				return;
			}
			memcpy(out->fallback.response, fb->response_base64.data, fb->response_base64.len);
			out->fallback.response_len = fb->response_base64.len;
		}
	}
}

static void fault_fini(struct mtd_fault_policy *f)
{
	mtd_cfg__free(f->fallback.message);
	f->fallback.message = NULL;
	mtd_cfg__free(f->fallback.response);
	f->fallback.response = NULL;
}

static void build_retry_budget(struct builder *b, const PbRetryBudget *m, const char *path,
                               struct mtd_fault_budget_cfg *out)
{
	char p[256];

	*out = (struct mtd_fault_budget_cfg){.set = false};
	if (m == NULL)
		return;
	out->set = true;
	out->ratio = 0.2;
	out->min_per_second = 10;
	if (m->ratio != NULL) {
		if (!(isfinite(m->ratio->value) && m->ratio->value >= 0 && m->ratio->value <= 1000))
			BERR(at(b, m, "ratio", NULL), sub(p, sizeof(p), path, "ratio"), "must be in 0..1000");
		else
			out->ratio = m->ratio->value;
	}
	if (m->min_per_second != NULL) {
		if (m->min_per_second->value > 1000000)
			BERR(at(b, m, "min_per_second", NULL), sub(p, sizeof(p), path, "min_per_second"),
			     "must be at most 1000000");
		else
			out->min_per_second = m->min_per_second->value;
	}
}

/* RFC 3986 §3.2 authority = host [ ":" port ], without userinfo (RFC 9113
 * §8.3.1 forbids it in :authority): reg-name or IP-literal characters. */
static bool authority_ok(const char *a)
{
	if (*a == '\0')
		return false;
	for (const unsigned char *c = (const unsigned char *)a; *c; c++) {
		if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9'))
			continue;
		if (!strchr("-._~!$&'()*+,;=:[]%", *c))
			return false;
	}
	return true;
}

static void build_authority(struct builder *b, const PbService *m, const char *path, struct mtd_cfg_service *out)
{
	if (m->authority[0] == '\0')
		return;
	if (strcmp(m->authority, "FROM_ENDPOINT") == 0) {
		out->authority_from_endpoint = true;
		return;
	}
	if (!authority_ok(m->authority)) {
		BERR(at(b, m, "authority", NULL), path,
		     "\"%s\" is neither FROM_ENDPOINT nor a host[:port] authority (RFC 3986 §3.2, no userinfo)",
		     m->authority);
		return;
	}
	out->authority = dup_or_oom(b, m->authority);
}

/* ---- health: outlier detection, circuit breaking ----------------------- */

static uint32_t percent_or(struct builder *b, const PbOutlier *m, const Google__Protobuf__UInt32Value *v,
                           const char *field, const char *path, uint32_t def)
{
	char p[256];
	if (v == NULL)
		return def;
	if (v->value > 100) {
		BERR(at(b, m, field, NULL), sub(p, sizeof(p), path, field), "must be a percentage, 0..100");
		return def;
	}
	return v->value;
}

static void build_outlier(struct builder *b, const PbOutlier *m, const char *path, struct mtd_cfg_service *out)
{
	char p[256];

	mtd_outlier_config_defaults(&out->outlier);
	out->failure_statuses = MTD_FAULT_FAILURE_STATUSES;
	if (m == NULL)
		return;
	struct mtd_outlier_config *o = &out->outlier;
	o->enabled = true;
	if (m->consecutive_failures != NULL)
		o->consecutive_failures = m->consecutive_failures->value;
	if (m->failure_percentage > 100)
		BERR(at(b, m, "failure_percentage", NULL), sub(p, sizeof(p), path, "failure_percentage"),
		     "must be a percentage, 1..100 (0 turns the rule off)");
	else
		o->failure_percentage = m->failure_percentage;
	if (m->min_requests != 0)
		o->min_requests = m->min_requests;
	o->interval_ms = dur_ms(b, m->interval, MTD_OUTLIER_DEFAULT_INTERVAL_MS, ZERO_IS_ERROR,
	                        at(b, m, "interval", NULL), sub(p, sizeof(p), path, "interval"));
	o->base_ejection_ms =
	        dur_ms(b, m->base_ejection_time, MTD_OUTLIER_DEFAULT_BASE_MS, ZERO_IS_ERROR,
	               at(b, m, "base_ejection_time", NULL), sub(p, sizeof(p), path, "base_ejection_time"));
	int64_t max_def =
	        o->base_ejection_ms > MTD_OUTLIER_DEFAULT_MAX_MS ? o->base_ejection_ms : MTD_OUTLIER_DEFAULT_MAX_MS;
	o->max_ejection_ms = dur_ms(b, m->max_ejection_time, max_def, ZERO_IS_ERROR,
	                            at(b, m, "max_ejection_time", NULL), sub(p, sizeof(p), path, "max_ejection_time"));
	if (m->max_ejection_time != NULL && o->max_ejection_ms < o->base_ejection_ms)
		BERR(at(b, m, "max_ejection_time", NULL), sub(p, sizeof(p), path, "max_ejection_time"),
		     "must be at least base_ejection_time");
	o->max_ejection_percent = percent_or(b, m, m->max_ejection_percent, "max_ejection_percent", path,
	                                     MTD_OUTLIER_DEFAULT_MAX_PERCENT);
	o->panic_percent =
	        percent_or(b, m, m->panic_threshold, "panic_threshold", path, MTD_OUTLIER_DEFAULT_PANIC_PERCENT);
	if (o->consecutive_failures == 0 && o->failure_percentage == 0)
		BERR(at(b, m, NULL, NULL), path,
		     "ejects nothing: set consecutive_failures or failure_percentage (or remove the block)");
	if (m->n_failure_statuses != 0) {
		out->failure_statuses = 0;
		for (size_t i = 0; i < m->n_failure_statuses; i++) {
			int code = (int)m->failure_statuses[i];

			snprintf(p, sizeof(p), "%s.failure_statuses[%zu]", path, i);
			if (code == MAITRED__CONFIG__V1__GRPC_STATUS__OK)
				BERR(at(b, m, "failure_statuses", NULL), p, "OK is not a failure");
			else if (code < 0 || code > 16)
				BERR(at(b, m, "failure_statuses", NULL), p, "unknown status number %d", code);
			else
				out->failure_statuses |= 1u << code;
		}
	}
	out->outlier_method_scoped = m->method_scoped;
}

static void build_health_check(struct builder *b, const PbHealthCheck *m, const char *path, struct mtd_hc_config *out)
{
	char p[256];

	*out = (struct mtd_hc_config){.enabled = false};
	if (m == NULL)
		return;
	out->enabled = true;
	out->interval_ms = dur_ms(b, m->interval, 5000, ZERO_IS_ERROR, at(b, m, "interval", NULL),
	                          sub(p, sizeof(p), path, "interval"));
	out->timeout_ms = dur_ms(b, m->timeout, 1000, ZERO_IS_ERROR, at(b, m, "timeout", NULL),
	                         sub(p, sizeof(p), path, "timeout"));
	out->unhealthy_threshold = m->unhealthy_threshold ? m->unhealthy_threshold : 3;
	out->healthy_threshold = m->healthy_threshold ? m->healthy_threshold : 2;
	if (out->unhealthy_threshold > 1000)
		BERR(at(b, m, "unhealthy_threshold", NULL), sub(p, sizeof(p), path, "unhealthy_threshold"),
		     "must be at most 1000");
	if (out->healthy_threshold > 1000)
		BERR(at(b, m, "healthy_threshold", NULL), sub(p, sizeof(p), path, "healthy_threshold"),
		     "must be at most 1000");
	out->service_name = dup_or_oom(b, m->service_name);
}

static void build_circuit(const PbCircuit *m, struct mtd_circuit_config *out)
{
	*out = (struct mtd_circuit_config){0};
	if (m == NULL)
		return;
	out->max_calls = m->max_calls;
	out->max_pending = m->max_pending;
	out->max_calls_per_endpoint = m->max_calls_per_endpoint;
}

static int method_cmp(const void *a, const void *c)
{
	return strcmp(((const struct mtd_cfg_method *)a)->name, ((const struct mtd_cfg_method *)c)->name);
}

/* ---- routing layer (lib/lb/layer.c) -------------------------------------- */

/* Config.zone and Config.node_id (default: the host name). */
static void build_identity(struct builder *b, const PbConfig *m, struct mtd_cfg *cfg)
{
	char host[256] = "";

	if (m->zone[0] != '\0') {
		cfg->zone = dup_or_oom(b, m->zone);
		b->zone = cfg->zone;
	}
	if (m->node_id[0] != '\0') {
		cfg->node_id = dup_or_oom(b, m->node_id);
	} else {
		if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0')
			snprintf(host, sizeof(host), "maitred");
		cfg->node_id = dup_or_oom(b, host);
	}
	b->node_id = cfg->node_id;
}

static void build_routing(struct builder *b, const PbRouting *m, const char *path, struct mtd_cfg_routing *out)
{
	char p[256];

	*out = (struct mtd_cfg_routing){.fallback_fail = m->fallback == MAITRED__CONFIG__V1__ROUTING__FALLBACK__FAIL};
	sub(p, sizeof(p), path, "header");
	if (m->header[0] == '\0') {
		BERR(at(b, m, NULL, NULL), p, "is required (the request metadata key carrying the tag)");
	} else {
		out->header = dup_or_oom(b, m->header);
		if (out->header == NULL)
			return;
		for (char *c = out->header; *c != '\0'; c++)
			*c = (char)tolower((unsigned char)*c);
		if (out->header[0] == ':')
			BERR(at(b, m, "header", NULL), p, "\"%s\" is a pseudo-header; use a metadata key", m->header);
		else if (!header_name_ok(out->header))
			BERR(at(b, m, "header", NULL), p, "\"%s\" is not a valid HTTP/2 field name (RFC 9110 §5.6.2)",
			     m->header);
	}
	sub(p, sizeof(p), path, "metadata_key");
	if (m->metadata_key[0] == '\0')
		BERR(at(b, m, NULL, NULL), p, "is required (the endpoint metadata key to match)");
	else
		out->metadata_key = dup_or_oom(b, m->metadata_key);
}

static void routing_fini(struct mtd_cfg_routing *r)
{
	mtd_cfg__free(r->header);
	mtd_cfg__free(r->metadata_key);
	r->header = r->metadata_key = NULL;
}

/* The layer options of a service (or method, with its routing). */
static void layer_resolve(struct builder *b, const struct mtd_cfg_service *svc, const struct mtd_cfg_routing *r,
                          struct mtd_lb_layer_config *out)
{
	*out = svc->layer;
	out->metadata_key = r->metadata_key;
	out->fallback_fail = r->fallback_fail;
}

/* Service.subset (lib/lb/subset.c): RING needs this sidecar's index and
 * the count, RENDEZVOUS neither; a key the mode would ignore is refused. */
static void build_subset(struct builder *b, const PbSubset *m, const char *path, struct mtd_lb_subset_config *out)
{
	bool ring;
	char p[256];

	*out = (struct mtd_lb_subset_config){.mode = MTD_LB_SUBSET_RENDEZVOUS};
	if (m == NULL)
		return;
	out->size = m->size;
	switch (m->mode) {
	case MAITRED__CONFIG__V1__SUBSET__MODE__MODE_UNSPECIFIED:
		ring = m->count > 0;
		break;
	case MAITRED__CONFIG__V1__SUBSET__MODE__RENDEZVOUS:
		ring = false;
		break;
	case MAITRED__CONFIG__V1__SUBSET__MODE__RING:
		ring = true;
		break;
	default:
		BERR(at(b, m, "mode", NULL), sub(p, sizeof(p), path, "subset.mode"), "unknown mode %d", (int)m->mode);
		return;
	}
	if (m->size == 0 &&
	    (m->mode != MAITRED__CONFIG__V1__SUBSET__MODE__MODE_UNSPECIFIED || m->index != NULL || m->count > 0))
		BERR(at(b, m, "size", NULL), sub(p, sizeof(p), path, "subset.size"),
		     "is required with mode, index or count (0 keeps every endpoint)");
	if (!ring) {
		if (m->index != NULL)
			BERR(at(b, m, "index", NULL), sub(p, sizeof(p), path, "subset.index"),
			     m->mode == MAITRED__CONFIG__V1__SUBSET__MODE__RENDEZVOUS
			             ? "is for mode RING (RENDEZVOUS places this sidecar by node_id)"
			             : "needs count (how many sidecars share the service)");
		if (m->count > 0)
			BERR(at(b, m, "count", NULL), sub(p, sizeof(p), path, "subset.count"),
			     "is for mode RING (RENDEZVOUS places this sidecar by node_id)");
		return;
	}
	out->mode = MTD_LB_SUBSET_RING;
	if (m->count == 0)
		BERR(at(b, m, "mode", NULL), sub(p, sizeof(p), path, "subset.count"),
		     "is required with mode RING (how many sidecars share the service)");
	if (m->index == NULL)
		BERR(at(b, m, m->count > 0 ? "count" : "mode", NULL), sub(p, sizeof(p), path, "subset.index"),
		     "is required with mode RING (this sidecar's index, 0 .. count - 1)");
	else if (m->count > 0 && m->index->value >= m->count)
		BERR(at(b, m, "index", NULL), sub(p, sizeof(p), path, "subset.index"), "%u is not below count (%u)",
		     (unsigned)m->index->value, (unsigned)m->count);
	if (m->count == 0 || m->index == NULL || m->index->value >= m->count)
		return;
	out->index = m->index->value;
	out->count = m->count;
}

static void build_locality(struct builder *b, const PbService *m, const char *path, struct mtd_cfg_service *out)
{
	const PbLocality *l = m->locality;
	char p[256];

	out->layer.zone = b->zone;
	out->layer.node_id = b->node_id;
	out->layer.min_healthy_percent = MTD_LB_DEFAULT_MIN_HEALTHY_PERCENT;
	/* issue 10: PREFER_LOCAL by default once zone is set. */
	out->layer.locality = b->zone != NULL ? MTD_LB_LOCALITY_PREFER_LOCAL : MTD_LB_LOCALITY_OFF;
	build_subset(b, m->subset, path, &out->layer.subset);
	if (l == NULL)
		return;
	switch (l->mode) {
	case MAITRED__CONFIG__V1__LOCALITY__MODE__STRICT:
		out->layer.locality = MTD_LB_LOCALITY_STRICT;
		break;
	case MAITRED__CONFIG__V1__LOCALITY__MODE__OFF:
		out->layer.locality = MTD_LB_LOCALITY_OFF;
		break;
	default:
		break;
	}
	if (b->zone == NULL && l->mode != MAITRED__CONFIG__V1__LOCALITY__MODE__OFF &&
	    l->mode != MAITRED__CONFIG__V1__LOCALITY__MODE__MODE_UNSPECIFIED)
		BERR(at(b, l, "mode", NULL), sub(p, sizeof(p), path, "locality.mode"),
		     "needs the top-level zone (this sidecar's zone)");
	if (l->min_healthy_percent != NULL) {
		double v = l->min_healthy_percent->value;

		if (!(v >= 0.0 && v <= 100.0))
			BERR(at(b, l, "min_healthy_percent", NULL),
			     sub(p, sizeof(p), path, "locality.min_healthy_percent"), "must be in 0..100");
		else
			out->layer.min_healthy_percent = v;
	}
}

/* Endpoint.zone and Endpoint.metadata (sorted by key: the map has no
 * order of its own, and lookups then need not care). */
static int meta_cmp(const void *x, const void *y)
{
	return strcmp(((const struct mtd_lb_meta *)x)->key, ((const struct mtd_lb_meta *)y)->key);
}

static void build_endpoint_tags(struct builder *b, const PbEndpoint *e, struct mtd_cfg_endpoint *oe)
{
	if (e->zone[0] != '\0')
		oe->zone = dup_or_oom(b, e->zone);
	if (e->n_metadata == 0)
		return;
	oe->meta = mtd_cfg__calloc(e->n_metadata, sizeof(*oe->meta));
	if (oe->meta == NULL) {
		b->d->oom = true;
		return;
	}
	for (size_t k = 0; k < e->n_metadata; k++) {
		oe->meta[k].key = dup_or_oom(b, e->metadata[k]->key);
		oe->meta[k].value = dup_or_oom(b, e->metadata[k]->value);
		oe->n_meta++;
		if (oe->meta[k].key == NULL || oe->meta[k].value == NULL)
			return;
	}
	qsort(oe->meta, oe->n_meta, sizeof(*oe->meta), meta_cmp);
}

/* ---- traffic policy (issue 18) -------------------------------------------- */

/* An entry that routes or a mirror send calls to: it may have any name. */
static bool reached_by_name(struct builder *b, const char *name)
{
	const PbConfig *m = b->root;

	for (size_t i = 0; i < m->n_routes; i++)
		if (m->routes[i]->to[0] != '\0' && strcmp(m->routes[i]->to, name) == 0)
			return true;
	for (size_t i = 0; i < m->n_services; i++)
		if (m->services[i]->mirror != NULL && strcmp(m->services[i]->mirror->service, name) == 0)
			return true;
	return false;
}

/* A DoubleValue percent in 0..100, default 100. */
static double percent_of(struct builder *b, const Google__Protobuf__DoubleValue *v, const void *m, const char *path)
{
	char p[256];

	if (v == NULL)
		return 100.0;
	if (!(v->value >= 0.0 && v->value <= 100.0)) {
		BERR(at(b, m, "percent", NULL), sub(p, sizeof(p), path, "percent"), "must be in 0..100");
		return 100.0;
	}
	return v->value;
}

static int split_weight_cmp(const void *x, const void *y)
{
	return strcmp(((const struct mtd_lb_split_weight *)x)->value, ((const struct mtd_lb_split_weight *)y)->value);
}

static struct mtd_cfg_split *build_split(struct builder *b, const PbSplit *m, const char *path)
{
	struct mtd_cfg_split *out;
	uint64_t total = 0;
	char p[256];

	out = mtd_cfg__calloc(1, sizeof(*out));
	if (out == NULL) {
		b->d->oom = true;
		return NULL;
	}
	if (m->metadata_key[0] == '\0')
		BERR(at(b, m, NULL, NULL), sub(p, sizeof(p), path, "metadata_key"),
		     "is required (the endpoint metadata key whose values name the groups, e.g. \"version\")");
	else
		out->metadata_key = dup_or_oom(b, m->metadata_key);
	sub(p, sizeof(p), path, "weights");
	if (m->n_weights == 0)
		BERR(at(b, m, NULL, NULL), p, "is required (group value -> weight, e.g. {v1: 90, v2: 10})");
	else if (m->n_weights > MTD_LB_SPLIT_MAX_GROUPS)
		BERR(at(b, m, "weights", NULL), p, "at most %u groups, got %zu", MTD_LB_SPLIT_MAX_GROUPS, m->n_weights);
	if (m->n_weights != 0 && m->n_weights <= MTD_LB_SPLIT_MAX_GROUPS) {
		out->weights = mtd_cfg__calloc(m->n_weights, sizeof(*out->weights));
		if (out->weights == NULL) {
			b->d->oom = true;
			return out;
		}
		for (size_t k = 0; k < m->n_weights; k++) {
			out->weights[k].value = dup_or_oom(b, m->weights[k]->key);
			out->weights[k].weight = m->weights[k]->value;
			out->lb.n = k + 1;
			if (out->weights[k].value == NULL)
				return out;
			total += m->weights[k]->value;
		}
		out->lb.weights = out->weights;
		/* The map has no order: by value, so a reload of the same file
		 * draws the same way. */
		qsort(out->weights, out->lb.n, sizeof(*out->weights), split_weight_cmp);
		if (total == 0)
			BERR(at(b, m, "weights", NULL), p, "the weights sum to 0: no group would take a call");
		else if (total > UINT32_MAX)
			BERR(at(b, m, "weights", NULL), p, "the weights sum to more than %u", UINT32_MAX);
	}
	if (m->guard != NULL) {
		const PbSplitGuard *g = m->guard;
		struct mtd_lb_split_guard *o = &out->lb.guard;
		char gp[256];

		sub(gp, sizeof(gp), path, "guard");
		o->on = true;
		o->max_error_ratio = 2.0;
		o->max_p99_ratio = 1.5;
		o->min_calls = g->min_calls != 0 ? g->min_calls : 100;
		if (g->max_error_ratio != NULL) {
			double v = g->max_error_ratio->value;

			if (!(v == 0.0 || (v > 1.0 && v <= 1e6)))
				BERR(at(b, g, "max_error_ratio", NULL), sub(p, sizeof(p), gp, "max_error_ratio"),
				     "must be more than 1 (or 0: this rule off)");
			else
				o->max_error_ratio = v;
		}
		if (g->max_p99_ratio != NULL) {
			double v = g->max_p99_ratio->value;

			if (!(v == 0.0 || (v > 1.0 && v <= 1e6)))
				BERR(at(b, g, "max_p99_ratio", NULL), sub(p, sizeof(p), gp, "max_p99_ratio"),
				     "must be more than 1 (or 0: this rule off)");
			else
				o->max_p99_ratio = v;
		}
		if (o->max_error_ratio == 0.0 && o->max_p99_ratio == 0.0)
			BERR(at(b, g, NULL, NULL), gp, "both rules are off (max_error_ratio and max_p99_ratio 0)");
		o->window_ms = dur_ms(b, g->window, 30000, ZERO_IS_ERROR, at(b, g, "window", NULL),
		                      sub(p, sizeof(p), gp, "window"));
		if (o->window_ms < 1000 || o->window_ms > 3600000) {
			BERR(at(b, g, "window", NULL), sub(p, sizeof(p), gp, "window"), "must be in 1s..1h");
			o->window_ms = 30000;
		}
	}
	return out;
}

static void split_free(struct mtd_cfg_split *sp)
{
	if (sp == NULL)
		return;
	for (size_t k = 0; k < sp->lb.n; k++)
		mtd_cfg__free((char *)sp->weights[k].value);
	mtd_cfg__free(sp->weights);
	mtd_cfg__free(sp->metadata_key);
	mtd_cfg__free(sp);
}

/* The routing layer of a service or method with its split: the groups are
 * the split's metadata_key's, which routing's (when set) must equal, so a
 * pinned value names one of the split's groups. */
static void layer_split(struct builder *b, struct mtd_lb_layer_config *lc, const struct mtd_cfg_split *sp,
                        const void *m, const char *path)
{
	char p[256];

	lc->split = sp != NULL && sp->metadata_key != NULL ? &sp->lb : NULL;
	if (lc->split == NULL)
		return;
	if (lc->metadata_key == NULL)
		lc->metadata_key = sp->metadata_key;
	else if (strcmp(lc->metadata_key, sp->metadata_key) != 0)
		BERR(at(b, m, "split", NULL), sub(p, sizeof(p), path, "split.metadata_key"),
		     "\"%s\" differs from routing.metadata_key \"%s\": a pinned value must name a split group",
		     sp->metadata_key, lc->metadata_key);
}

static void build_rate_limit(struct builder *b, const PbRateLimit *m, const char *path, struct mtd_cfg_rate_limit *out)
{
	char p[256];

	*out = (struct mtd_cfg_rate_limit){.set = m != NULL};
	if (m == NULL)
		return;
	if (m->calls_per_second == 0)
		BERR(at(b, m, NULL, NULL), sub(p, sizeof(p), path, "calls_per_second"), "is required (1..%u)",
		     MTD_LIMIT_MAX_RATE);
	else if (m->calls_per_second > MTD_LIMIT_MAX_RATE)
		BERR(at(b, m, "calls_per_second", NULL), sub(p, sizeof(p), path, "calls_per_second"),
		     "must be in 1..%u, got %u", MTD_LIMIT_MAX_RATE, (unsigned)m->calls_per_second);
	out->per_second = m->calls_per_second;
	out->burst = m->burst != 0 ? m->burst : m->calls_per_second;
	if (m->burst > MTD_LIMIT_MAX_BURST)
		BERR(at(b, m, "burst", NULL), sub(p, sizeof(p), path, "burst"), "must be in 1..%u, got %u",
		     MTD_LIMIT_MAX_BURST, (unsigned)m->burst);
}

static void build_fault_injection(struct builder *b, const PbFaultInjection *m, const char *path,
                                  struct mtd_cfg_fault_injection *out)
{
	char p[256], fp[256];

	*out = (struct mtd_cfg_fault_injection){0};
	if (m == NULL)
		return;
	if (m->abort == NULL && m->delay == NULL)
		BERR(at(b, m, NULL, NULL), path, "needs abort or delay (or both)");
	if (m->abort != NULL) {
		sub(fp, sizeof(fp), path, "abort");
		out->abort = true;
		out->abort_percent = percent_of(b, m->abort->percent, m->abort, fp);
		out->abort_status = (int)m->abort->status;
		if (m->abort->status == MAITRED__CONFIG__V1__GRPC_STATUS__OK)
			BERR(at(b, m->abort, "status", m->abort), sub(p, sizeof(p), fp, "status"),
			     "is required, and not OK (the status aborted calls end with)");
		else if (m->abort->status < 0 || m->abort->status > 16)
			BERR(at(b, m->abort, "status", NULL), sub(p, sizeof(p), fp, "status"),
			     "unknown status number %d", (int)m->abort->status);
	}
	if (m->delay != NULL) {
		sub(fp, sizeof(fp), path, "delay");
		out->delay = true;
		out->delay_percent = percent_of(b, m->delay->percent, m->delay, fp);
		if (m->delay->duration == NULL)
			BERR(at(b, m->delay, NULL, NULL), sub(p, sizeof(p), fp, "duration"),
			     "is required (e.g. \"100ms\")");
		out->delay_ms = dur_ms(b, m->delay->duration, 1, ZERO_IS_ERROR, at(b, m->delay, "duration", NULL),
		                       sub(p, sizeof(p), fp, "duration"));
		if (out->delay_ms > 3600000) {
			BERR(at(b, m->delay, "duration", NULL), sub(p, sizeof(p), fp, "duration"),
			     "must be at most 1h");
			out->delay_ms = 1;
		}
	}
}

/* routes[i] (issue 18): its strings, checked; `to` is resolved once every
 * service is built (resolve_routes). */
static void build_route(struct builder *b, const PbRoute *m, size_t i, struct mtd_route_rule *out)
{
	char path[48], p[256];

	snprintf(path, sizeof(path), "routes[%zu]", i);
	*out = (struct mtd_route_rule){.to = -1};
	if (m->to[0] == '\0')
		BERR(at(b, m, NULL, NULL), sub(p, sizeof(p), path, "to"),
		     "is required (the name of a services[] entry)");
	if (m->match == NULL) {
		BERR(at(b, m, NULL, NULL), sub(p, sizeof(p), path, "match"),
		     "is required ({service: \"pkg.Service\", method, header})");
		return;
	}
	const Maitred__Config__V1__RouteMatch *mm = m->match;
	char mp[64];

	sub(mp, sizeof(mp), path, "match");
	if (mm->service[0] == '\0')
		BERR(at(b, mm, NULL, NULL), sub(p, sizeof(p), mp, "service"),
		     "is required (\"package.Service\" or \"*\")");
	else if (strcmp(mm->service, "*") != 0 && !service_name_ok(mm->service))
		BERR(at(b, mm, "service", NULL), sub(p, sizeof(p), mp, "service"),
		     "\"%s\" is not a fully-qualified gRPC service name (\"package.Service\") or \"*\"", mm->service);
	out->service = dup_or_oom(b, mm->service);
	out->service_len = out->service != NULL ? strlen(out->service) : 0;
	if (mm->method[0] != '\0') {
		if (!ident_ok(mm->method, strlen(mm->method)))
			BERR(at(b, mm, "method", NULL), sub(p, sizeof(p), mp, "method"),
			     "\"%s\" is not a valid method name", mm->method);
		out->method = dup_or_oom(b, mm->method);
		out->method_len = out->method != NULL ? strlen(out->method) : 0;
	}
	if (mm->header == NULL)
		return;
	const Maitred__Config__V1__HeaderMatch *h = mm->header;
	char hp[96];
	char *name;

	sub(hp, sizeof(hp), mp, "header");
	if (h->name[0] == '\0') {
		BERR(at(b, h, NULL, NULL), sub(p, sizeof(p), hp, "name"), "is required (a request metadata key)");
		return;
	}
	name = dup_or_oom(b, h->name);
	if (name == NULL)
		return;
	for (char *c = name; *c != '\0'; c++)
		*c = (char)tolower((unsigned char)*c);
	out->header = name;
	if (name[0] == ':')
		BERR(at(b, h, "name", NULL), sub(p, sizeof(p), hp, "name"),
		     "\"%s\" is a pseudo-header; use a metadata key", h->name);
	else if (!header_name_ok(name))
		BERR(at(b, h, "name", NULL), sub(p, sizeof(p), hp, "name"),
		     "\"%s\" is not a valid HTTP/2 field name (RFC 9110 §5.6.2)", h->name);
	switch (h->match_case) {
	case MAITRED__CONFIG__V1__HEADER_MATCH__MATCH_VALUE:
		out->kind = MTD_ROUTE_HEADER_VALUE;
		out->value = dup_or_oom(b, h->value);
		break;
	case MAITRED__CONFIG__V1__HEADER_MATCH__MATCH_PREFIX:
		out->kind = MTD_ROUTE_HEADER_PREFIX;
		out->value = dup_or_oom(b, h->prefix);
		if (h->prefix[0] == '\0')
			BERR(at(b, h, "prefix", NULL), sub(p, sizeof(p), hp, "prefix"),
			     "is empty (every value has it: use present: true)");
		break;
	case MAITRED__CONFIG__V1__HEADER_MATCH__MATCH_PRESENT:
		out->kind = MTD_ROUTE_HEADER_PRESENT;
		if (!h->present)
			BERR(at(b, h, "present", NULL), sub(p, sizeof(p), hp, "present"),
			     "false matches nothing (leave header out, or give value or prefix)");
		break;
	default:
		BERR(at(b, h, NULL, NULL), hp, "needs one of value, prefix, present");
		break;
	}
	out->value_len = out->value != NULL ? strlen(out->value) : 0;
}

static void route_fini(struct mtd_route_rule *r)
{
	mtd_cfg__free((char *)r->service);
	mtd_cfg__free((char *)r->method);
	mtd_cfg__free((char *)r->header);
	mtd_cfg__free((char *)r->value);
}

/* The index of the services[] entry named `name`, or -1. */
static int service_index(const PbConfig *m, const char *name)
{
	for (size_t j = 0; j < m->n_services; j++)
		if (strcmp(m->services[j]->name, name) == 0)
			return (int)j;
	return -1;
}

/* Routes' `to` and mirrors' `service`, once every entry is known. */
static void resolve_targets(struct builder *b, const PbConfig *m, struct mtd_cfg *cfg)
{
	char p[96];

	for (size_t i = 0; i < cfg->n_routes; i++) {
		const PbRoute *r = m->routes[i];

		if (r->to[0] == '\0')
			continue;
		snprintf(p, sizeof(p), "routes[%zu].to", i);
		cfg->routes[i].to = service_index(m, r->to);
		if (cfg->routes[i].to < 0)
			BERR(at(b, r, "to", NULL), p, "no services[] entry is named \"%s\"", r->to);
	}
	for (size_t i = 0; i < cfg->n_services; i++) {
		const PbService *s = m->services[i];

		cfg->services[i].mirror = -1;
		if (s->mirror == NULL)
			continue;
		snprintf(p, sizeof(p), "services[%zu].mirror.service", i);
		if (s->mirror->service[0] == '\0') {
			BERR(at(b, s->mirror, NULL, NULL), p, "is required (the services[] entry the copies go to)");
			continue;
		}
		cfg->services[i].mirror = service_index(m, s->mirror->service);
		if (cfg->services[i].mirror < 0)
			BERR(at(b, s->mirror, "service", NULL), p, "no services[] entry is named \"%s\"",
			     s->mirror->service);
		else if (cfg->services[i].mirror == (int)i)
			BERR(at(b, s->mirror, "service", NULL), p, "\"%s\" is this entry: a mirror goes to another",
			     s->mirror->service);
	}
}

static void build_service(struct builder *b, const PbService *m, size_t si, struct mtd_cfg_service *out)
{
	char path[64], p[256];
	struct lb_info svc_info, *minfo = NULL;
	struct mtd_lb_warmup warmup;
	const PbEndpoint *first_weighted = NULL;
	size_t first_weighted_i = 0, n_eps;
	bool any_weights, any_warmup, svc_hash, svc_key_used, any_method_key = false;

	snprintf(path, sizeof(path), "services[%zu]", si);
	out->inbound = -1;
	out->name = dup_or_oom(b, m->name);
	if (m->name[0] == '\0')
		BERR(at(b, m, "name", NULL), sub(p, sizeof(p), path, "name"),
		     "is required (\"package.Service\" or \"*\")");
	else if (strcmp(m->name, "*") != 0 && !service_name_ok(m->name) && !reached_by_name(b, m->name))
		BERR(at(b, m, "name", NULL), sub(p, sizeof(p), path, "name"),
		     "\"%s\" is not a fully-qualified gRPC service name "
		     "(\"package.Service\") or \"*\", nor an entry that routes or a mirror reach",
		     m->name);
	out->by_path = strcmp(m->name, "*") == 0 || service_name_ok(m->name);

	build_lb(b, m->lb, m, sub(p, sizeof(p), path, "lb"), &out->lb, &svc_info);
	build_warmup(b, m->warmup, sub(p, sizeof(p), path, "warmup"), &warmup);
	out->lb.warmup = warmup;
	lb_check(b, m->lb, m, sub(p, sizeof(p), path, "lb"), m, path, &out->lb);
	if (m->hash_key != NULL)
		build_hash_key(b, m->hash_key, sub(p, sizeof(p), path, "hash_key"), &out->hash_key);
	if (m->tls != NULL)
		out->tls = build_tls(b, m->tls, sub(p, sizeof(p), path, "tls"));
	build_upstream(b, m->upstream, sub(p, sizeof(p), path, "upstream"), &out->upstream);
	build_fault(b, m->fault, sub(p, sizeof(p), path, "fault"), &out->fault);
	build_retry_budget(b, m->retry_budget, sub(p, sizeof(p), path, "retry_budget"), &out->retry_budget);
	build_authority(b, m, sub(p, sizeof(p), path, "authority"), out);
	build_outlier(b, m->outlier_detection, sub(p, sizeof(p), path, "outlier_detection"), out);
	build_circuit(m->circuit_breaker, &out->circuit);
	build_health_check(b, m->health_check, sub(p, sizeof(p), path, "health_check"), &out->health_check);
	build_locality(b, m, path, out);
	if (m->routing != NULL)
		build_routing(b, m->routing, sub(p, sizeof(p), path, "routing"), &out->routing);
	layer_resolve(b, out, &out->routing, &out->layer);
	if (m->split != NULL) {
		out->split = build_split(b, m->split, sub(p, sizeof(p), path, "split"));
		if (b->d->oom)
			return;
	}
	layer_split(b, &out->layer, out->split, m, path);
	build_rate_limit(b, m->rate_limit, sub(p, sizeof(p), path, "rate_limit"), &out->rate_limit);
	build_fault_injection(b, m->fault_injection, sub(p, sizeof(p), path, "fault_injection"), &out->fault_injection);
	out->mirror = -1;
	if (m->mirror != NULL)
		out->mirror_percent = percent_of(b, m->mirror->percent, m->mirror, sub(p, sizeof(p), path, "mirror"));

	/* endpoints */
	build_source(b, m, path, out);
	if (b->d->oom)
		goto out;
	if (out->tls != NULL && out->tls->server_identity_registry && out->source != MTD_CFG_SOURCE_ETCD)
		BERR(at(b, m->tls, "server_identity", NULL), sub(p, sizeof(p), path, "tls.server_identity"),
		     "FROM_REGISTRY needs discovery.etcd (the identity is each endpoint's registry record's)");
	n_eps = out->source == MTD_CFG_SOURCE_STATIC ? m->n_endpoints : 0;
	if (n_eps > MTD_LB_MAX_ENDPOINTS) {
		/* mtd_lb_picker_new() refuses more; none is built (nor resolved). */
		BERR(at(b, m, "endpoints", NULL), sub(p, sizeof(p), path, "endpoints"),
		     "at most %u endpoints per service, got %zu", MTD_LB_MAX_ENDPOINTS, n_eps);
		n_eps = 0;
	}
	out->endpoints = mtd_cfg__calloc(n_eps, sizeof(*out->endpoints));
	if (out->endpoints == NULL) {
		b->d->oom = true;
		return;
	}
	out->n_endpoints = n_eps;
	for (size_t i = 0; i < n_eps; i++) {
		const PbEndpoint *e = m->endpoints[i];
		struct mtd_cfg_endpoint *oe = &out->endpoints[i];

		snprintf(p, sizeof(p), "%s.endpoints[%zu].address", path, i);
		oe->weight = 100;
		if (e->address[0] == '\0')
			BERR(at(b, e, "address", NULL), p, "is required (\"HOST:PORT\")");
		else if (build_addr(b, e->address, at(b, e, "address", NULL), p, &oe->addr) == 0) {
			for (size_t j = 0; j < i; j++) {
				if (same_endpoint(&out->endpoints[j].addr, &oe->addr)) {
					BERR(at(b, e, "address", NULL), p,
					     "duplicate endpoint \"%s\" (also endpoints[%zu])", e->address, j);
					break;
				}
			}
		}
		build_endpoint_tags(b, e, oe);
		if (e->weight != NULL) {
			snprintf(p, sizeof(p), "%s.endpoints[%zu].weight", path, i);
			if (e->weight->value > INT32_MAX)
				BERR(at(b, e, "weight", NULL), p, "must be at most %d", INT32_MAX);
			else
				oe->weight = (int32_t)e->weight->value;
			if (e->weight->value != 100 && first_weighted == NULL) {
				first_weighted = e;
				first_weighted_i = i;
			}
		}
		if (b->d->oom)
			return;
	}

	/* methods */
	if (m->n_methods != 0) {
		out->methods = mtd_cfg__calloc(m->n_methods, sizeof(*out->methods));
		minfo = mtd_cfg__calloc(m->n_methods, sizeof(*minfo));
		if (out->methods == NULL || minfo == NULL) {
			mtd_cfg__free(minfo);
			b->d->oom = true;
			return;
		}
		out->n_methods = m->n_methods;
	}
	for (size_t i = 0; i < m->n_methods; i++) {
		const PbMethod *mm = m->methods[i];
		struct mtd_cfg_method *om = &out->methods[i];
		char mpath[96];

		snprintf(mpath, sizeof(mpath), "%s.methods[%zu]", path, i);
		om->name = dup_or_oom(b, mm->name);
		if (om->name == NULL)
			break;
		if (mm->name[0] == '\0') {
			BERR(at(b, mm, "name", NULL), sub(p, sizeof(p), mpath, "name"), "is required (\"GetCart\")");
		} else if (!ident_ok(mm->name, strlen(mm->name))) {
			BERR(at(b, mm, "name", NULL), sub(p, sizeof(p), mpath, "name"),
			     "\"%s\" is not a valid method name", mm->name);
		} else {
			for (size_t j = 0; j < i; j++) {
				if (strcmp(m->methods[j]->name, mm->name) == 0) {
					BERR(at(b, mm, "name", NULL), sub(p, sizeof(p), mpath, "name"),
					     "duplicate method \"%s\" (also methods[%zu])", mm->name, j);
					break;
				}
			}
		}
		if (mm->lb != NULL) {
			build_lb(b, mm->lb, mm, sub(p, sizeof(p), mpath, "lb"), &om->lb, &minfo[i]);
			om->lb.warmup = warmup;
			lb_check(b, mm->lb, mm, sub(p, sizeof(p), mpath, "lb"), m, path, &om->lb);
		} else {
			om->lb = out->lb; /* the service's, whole */
			minfo[i] = svc_info;
		}
		if (mm->fault != NULL) {
			build_fault(b, mm->fault, sub(p, sizeof(p), mpath, "fault"), &om->fault);
			om->fault_own = true;
		} else {
			om->fault = out->fault; /* shares the service's fallback bytes */
		}
		if (mm->routing != NULL) {
			build_routing(b, mm->routing, sub(p, sizeof(p), mpath, "routing"), &om->routing);
			om->routing_own = true;
		} else {
			om->routing = out->routing; /* shares the service's strings */
		}
		layer_resolve(b, out, &om->routing, &om->layer);
		if (mm->split != NULL) {
			om->split = build_split(b, mm->split, sub(p, sizeof(p), mpath, "split"));
			om->split_own = true;
			if (b->d->oom)
				break;
		} else {
			om->split = out->split;
		}
		layer_split(b, &om->layer, om->split, mm, mpath);
		if (mm->rate_limit != NULL)
			build_rate_limit(b, mm->rate_limit, sub(p, sizeof(p), mpath, "rate_limit"), &om->rate_limit);
		if (mm->fault_injection != NULL)
			build_fault_injection(b, mm->fault_injection, sub(p, sizeof(p), mpath, "fault_injection"),
			                      &om->fault_injection);
		else
			om->fault_injection = out->fault_injection;
		if (mm->hash_key != NULL) {
			any_method_key = true;
			build_hash_key(b, mm->hash_key, sub(p, sizeof(p), mpath, "hash_key"), &om->hash_key);
		} else {
			hash_key_copy(b, &om->hash_key, &out->hash_key);
		}
		if (b->d->oom)
			break;
	}
	if (b->d->oom)
		goto out;

	/* Options that fit the policy but not this endpoint set. */
	lb_fits_endpoints(b, m->lb, m, sub(p, sizeof(p), path, "lb"), &out->lb, out);
	for (size_t i = 0; i < m->n_methods; i++) {
		char mpath[128];

		if (m->methods[i]->lb == NULL)
			continue; /* the service's block, checked above */
		snprintf(mpath, sizeof(mpath), "%s.methods[%zu].lb", path, i);
		lb_fits_endpoints(b, m->methods[i]->lb, m->methods[i], mpath, &out->methods[i].lb, out);
	}

	/* Options only some policy in this service would use. */
	any_weights = svc_info.caps & MTD_LB_CAP_WEIGHTS;
	any_warmup = svc_info.caps & MTD_LB_CAP_WARMUP;
	svc_hash = svc_info.caps & MTD_LB_CAP_HASH_KEY;
	svc_key_used = svc_hash;
	for (size_t i = 0; i < m->n_methods; i++) {
		any_weights |= (minfo[i].caps & MTD_LB_CAP_WEIGHTS) != 0;
		any_warmup |= (minfo[i].caps & MTD_LB_CAP_WARMUP) != 0;
		if (m->methods[i]->hash_key == NULL && (minfo[i].caps & MTD_LB_CAP_HASH_KEY))
			svc_key_used = true;
	}
	if (first_weighted != NULL && !any_weights) {
		snprintf(p, sizeof(p), "%s.endpoints[%zu].weight", path, first_weighted_i);
		BERR(at(b, first_weighted, "weight", NULL), p,
		     "policy %s ignores endpoint weights (use a weighted policy)", svc_info.policy);
	}
	if (warmup.duration_ms > 0 && !any_warmup)
		BERR(at(b, m, "warmup", NULL), sub(p, sizeof(p), path, "warmup"), "policy %s does not apply warmup",
		     svc_info.policy);
	if (m->hash_key != NULL && !svc_key_used)
		BERR(at(b, m, "hash_key", NULL), sub(p, sizeof(p), path, "hash_key"),
		     "policy %s does not use a hash key", svc_info.policy);
	if (svc_hash && m->hash_key == NULL && !any_method_key)
		BERR(at(b, m->lb, "policy", m), sub(p, sizeof(p), path, "lb.policy"),
		     "policy %s needs a hash_key (on the service or its methods)", svc_info.policy);
	for (size_t i = 0; i < m->n_methods; i++) {
		const PbMethod *mm = m->methods[i];
		char mpath[96];
		bool hashes = minfo[i].caps & MTD_LB_CAP_HASH_KEY;

		snprintf(mpath, sizeof(mpath), "%s.methods[%zu]", path, i);
		if (mm->hash_key != NULL && !hashes)
			BERR(at(b, mm, "hash_key", NULL), sub(p, sizeof(p), mpath, "hash_key"),
			     "policy %s does not use a hash key", minfo[i].policy);
		if (mm->lb != NULL && hashes && mm->hash_key == NULL && m->hash_key == NULL)
			BERR(at(b, mm->lb, "policy", mm), sub(p, sizeof(p), mpath, "lb.policy"),
			     "policy %s needs a hash_key (on the method or its service)", minfo[i].policy);
	}
out:
	mtd_cfg__free(minfo);
}

static void build_downstream(struct builder *b, const PbDownstream *m, struct mtd_cfg_downstream *out)
{
	const char *path = "downstream";
	const PbDownstream none = MAITRED__CONFIG__V1__DOWNSTREAM__INIT;

	if (m == NULL)
		m = &none;
	out->max_concurrent_streams =
	        u32_limit(b, m->max_concurrent_streams, 1024, H2_WINDOW_MAX, m, "max_concurrent_streams", path);
	/* RFC 9113 §6.5.2 SETTINGS_INITIAL_WINDOW_SIZE: at most 2^31 - 1. */
	out->initial_window_size =
	        u32_limit(b, m->initial_window_size, 1u << 20, H2_WINDOW_MAX, m, "initial_window_size", path);
	out->max_header_list_size =
	        u32_limit(b, m->max_header_list_size, 65536, 16u << 20, m, "max_header_list_size", path);
	/* The gRPC length prefix is 32 bits, but implementations use int. */
	out->max_message_size = u32_limit(b, m->max_message_size, 64u << 20, INT32_MAX, m, "max_message_size", path);
	out->reset_burst = u32_limit(b, m->reset_burst, 10000, 1u << 24, m, "reset_burst", path);
	out->reset_rate = u32_limit(b, m->reset_rate, 1000, 1u << 24, m, "reset_rate", path);
	out->idle_timeout_ms = dur_ms(b, m->idle_timeout, 600000, ZERO_IS_ERROR, at(b, m, "idle_timeout", NULL),
	                              "downstream.idle_timeout");
	/* Past 2^24 connections the process runs out of descriptors first. */
	out->max_connections = u32_limit(b, m->max_connections, 10000, 1u << 24, m, "max_connections", path);
	out->write_timeout_ms = dur_ms(b, m->write_timeout, 30000, ZERO_IS_ERROR, at(b, m, "write_timeout", NULL),
	                               "downstream.write_timeout");
	out->preface_timeout_ms = dur_ms(b, m->preface_timeout, 10000, ZERO_IS_ERROR, at(b, m, "preface_timeout", NULL),
	                                 "downstream.preface_timeout");
	out->header_timeout_ms = dur_ms(b, m->header_timeout, 10000, ZERO_IS_ERROR, at(b, m, "header_timeout", NULL),
	                                "downstream.header_timeout");
	/* A call must be able to hold a full stream window of its response. */
	out->max_buffered_response =
	        u32_limit(b, m->max_buffered_response,
	                  out->initial_window_size > (64u << 20) ? out->initial_window_size : 64u << 20, UINT32_MAX, m,
	                  "max_buffered_response", path);
	if (out->max_buffered_response < out->initial_window_size)
		BERR(at(b, m, "max_buffered_response", NULL), "downstream.max_buffered_response",
		     "must be at least initial_window_size (%u), got %u", (unsigned)out->initial_window_size,
		     (unsigned)out->max_buffered_response);
}

/* ---- register (issue 7 section 4) ------------------------------------------ */

/* One entry of `register`: this pod's app, kept in etcd under a lease. */
static void build_register(struct builder *b, const PbRegister *m, size_t i, struct mtd_cfg_register *out)
{
	char path[48], p[256];

	snprintf(path, sizeof(path), "register[%zu]", i);
	if (m->service[0] == '\0')
		BERR(at(b, m, "service", m), sub(p, sizeof(p), path, "service"),
		     "is required (the app's gRPC service, e.g. \"shop.Cart\")");
	else if (strcmp(m->service, "*") == 0 || !service_name_ok(m->service))
		BERR(at(b, m, "service", m), sub(p, sizeof(p), path, "service"), "\"%s\" is not a gRPC service name",
		     m->service);
	else
		out->service = dup_or_oom(b, m->service);
	/* The record holds a numeric address (lib/discovery/record.h): a name
	 * would mean something else on every other pod. */
	if (m->address[0] == '\0')
		BERR(at(b, m, "address", m), sub(p, sizeof(p), path, "address"),
		     "is required (where other pods reach the app, \"IP:PORT\")");
	else
		build_addr_as(b, m->address, at(b, m, "address", m), sub(p, sizeof(p), path, "address"), &out->address,
		              true);
	out->weight = MTD_RECORD_DEFAULT_WEIGHT;
	if (m->weight != NULL) {
		if (m->weight->value > MTD_RECORD_MAX_WEIGHT)
			BERR(at(b, m, "weight", m), sub(p, sizeof(p), path, "weight"),
			     "must be at most %d (what a registry record may carry)", MTD_RECORD_MAX_WEIGHT);
		else
			out->weight = (int32_t)m->weight->value;
	}
	out->ttl_ms = dur_ms(b, m->ttl, 10000, ZERO_IS_ERROR, at(b, m, "ttl", m), sub(p, sizeof(p), path, "ttl"));
	/* etcd leases are granted in whole seconds. */
	if (m->ttl != NULL && (out->ttl_ms < 2000 || out->ttl_ms > 3600000 || out->ttl_ms % 1000 != 0))
		BERR(at(b, m, "ttl", m), sub(p, sizeof(p), path, "ttl"), "must be whole seconds in 2s..1h");
	if (m->etcd == NULL)
		BERR(at(b, m, "etcd", m), sub(p, sizeof(p), path, "etcd"),
		     "is required ({endpoints: [\"HOST:PORT\"], prefix: \"/maitred/services/SERVICE/\"})");
	else
		out->etcd = build_etcd(b, m->etcd, sub(p, sizeof(p), path, "etcd"));
	out->when_serving = m->when_serving;
}

/* ---- inbound (issue 17) ------------------------------------------------------ */

static void build_authz(struct builder *b, const PbAuthz *m, const char *path, bool has_ca,
                        struct mtd_authz_policy *out)
{
	char p[256];

	out->def = MTD_AUTHZ_DENY;
	if (m == NULL)
		return;
	switch (m->default_) {
	case MAITRED__CONFIG__V1__AUTHORIZATION__DEFAULT__ALLOW_AUTHENTICATED:
		out->def = MTD_AUTHZ_ALLOW_AUTHENTICATED;
		if (!has_ca)
			BERR(at(b, m, "default", NULL), sub(p, sizeof(p), path, "default"),
			     "ALLOW_AUTHENTICATED needs tls.client_ca_file (without it no caller has an identity)");
		break;
	case MAITRED__CONFIG__V1__AUTHORIZATION__DEFAULT__ALLOW_ALL:
		out->def = MTD_AUTHZ_ALLOW_ALL;
		break;
	default:
		break;
	}
	if (m->n_rules == 0)
		return;
	out->rules = mtd_cfg__calloc(m->n_rules, sizeof(*out->rules));
	if (out->rules == NULL) {
		b->d->oom = true;
		return;
	}
	out->n_rules = m->n_rules;
	for (size_t i = 0; i < m->n_rules; i++) {
		const PbAuthzRule *r = m->rules[i];
		struct mtd_authz_rule *o = &out->rules[i];
		char rpath[160];
		const char *why = NULL;

		snprintf(rpath, sizeof(rpath), "%s.rules[%zu]", path, i);
		if (r->n_principals == 0 && r->n_methods == 0)
			BERR(at(b, r, NULL, NULL), rpath,
			     "needs principals or methods (a rule with neither would allow every authenticated "
			     "caller: that is default ALLOW_AUTHENTICATED)");
		if (!has_ca)
			BERR(at(b, r, NULL, NULL), rpath,
			     "a rule needs tls.client_ca_file (without it no caller has an identity, so no rule "
			     "can match)");
		o->principals = mtd_cfg__calloc(r->n_principals ? r->n_principals : 1, sizeof(*o->principals));
		o->methods = mtd_cfg__calloc(r->n_methods ? r->n_methods : 1, sizeof(*o->methods));
		if (o->principals == NULL || o->methods == NULL) {
			b->d->oom = true;
			return;
		}
		for (size_t k = 0; k < r->n_principals; k++) {
			snprintf(p, sizeof(p), "%s.principals[%zu]", rpath, k);
			if (!mtd_authz_principal_ok(r->principals[k], &why))
				BERR(at(b, r, "principals", NULL), p, "\"%s\": %s", r->principals[k], why);
			o->principals[k] = dup_or_oom(b, r->principals[k]);
			o->n_principals = k + 1;
		}
		for (size_t k = 0; k < r->n_methods; k++) {
			snprintf(p, sizeof(p), "%s.methods[%zu]", rpath, k);
			if (!mtd_authz_method_ok(r->methods[k], &why))
				BERR(at(b, r, "methods", NULL), p, "\"%s\": %s", r->methods[k], why);
			o->methods[k] = dup_or_oom(b, r->methods[k]);
			o->n_methods = k + 1;
		}
		if (b->d->oom)
			return;
	}
}

/* One entry of `inbound`; its app's service is built by the caller. */
static void build_inbound(struct builder *b, const PbInbound *m, size_t i, struct mtd_cfg_inbound *out)
{
	char path[48], p[256];
	bool has_ca = false;

	snprintf(path, sizeof(path), "inbound[%zu]", i);
	if (m->listen[0] == '\0')
		BERR(at(b, m, "listen", m), sub(p, sizeof(p), path, "listen"),
		     "is required (where the other sidecars connect, e.g. \"0.0.0.0:15443\")");
	else
		build_addr(b, m->listen, at(b, m, "listen", m), sub(p, sizeof(p), path, "listen"), &out->listen);
	if (m->app[0] == '\0')
		BERR(at(b, m, "app", m), sub(p, sizeof(p), path, "app"),
		     "is required (the local app, h2c, e.g. \"127.0.0.1:50051\")");
	else
		build_addr(b, m->app, at(b, m, "app", m), sub(p, sizeof(p), path, "app"), &out->app);
	if (m->tls == NULL) {
		BERR(at(b, m, "tls", m), sub(p, sizeof(p), path, "tls"),
		     "is required (cert_file, key_file; client_ca_file to require client certificates)");
	} else {
		const PbInboundTls *t = m->tls;
		char tpath[64];

		snprintf(tpath, sizeof(tpath), "%s.tls", path);
		if (t->cert_file[0] == '\0')
			BERR(at(b, t, "cert_file", t), sub(p, sizeof(p), tpath, "cert_file"), "is required");
		else
			out->cert_file = tls_file(b, t, "cert_file", t->cert_file, tpath);
		if (t->key_file[0] == '\0')
			BERR(at(b, t, "key_file", t), sub(p, sizeof(p), tpath, "key_file"), "is required");
		else
			out->key_file = tls_file(b, t, "key_file", t->key_file, tpath);
		if (t->client_ca_file[0] != '\0') {
			out->client_ca_file = tls_file(b, t, "client_ca_file", t->client_ca_file, tpath);
			has_ca = true;
		}
	}
	out->max_concurrent_calls = m->max_concurrent_calls;
	out->max_connections = u32_limit(b, m->max_connections, 1024, 1u << 24, m, "max_connections", path);
	out->max_connection_age_ms = dur_ms(b, m->max_connection_age, 0, ZERO_ALLOWED,
	                                    at(b, m, "max_connection_age", NULL),
	                                    sub(p, sizeof(p), path, "max_connection_age"));
	build_authz(b, m->authorization, sub(p, sizeof(p), path, "authorization"), has_ca, &out->authz);
}

/* The service serving inbound entry i's app: the defaults of every
 * service (round robin over the one endpoint, FAILFAST, the upstream
 * pool settings), h2c. Named "inbound:IP:PORT" after the address listen
 * resolved to, never its spelling: a reload that writes "localhost:P" for
 * "127.0.0.1:P" keeps the same listener, so the same service (matched by
 * name: its pool, and the max_concurrent_calls count of calls in
 * flight). Reached by no :path. */
static void build_inbound_app(struct builder *b, const PbInbound *m, const struct mtd_cfg_addr *listen, size_t i,
                              size_t si, struct mtd_cfg_service *out)
{
	PbService ps = MAITRED__CONFIG__V1__SERVICE__INIT;
	PbEndpoint pe = MAITRED__CONFIG__V1__ENDPOINT__INIT;
	PbEndpoint *eps[1] = {&pe};
	char name[] = "maitred.Inbound"; /* replaced below */

	pe.address = m->app;
	ps.name = name;
	ps.endpoints = eps;
	ps.n_endpoints = 1;
	build_service(b, &ps, si, out);
	mtd_cfg__free(out->name);
	char host[INET6_ADDRSTRLEN];
	if (getnameinfo((const struct sockaddr *)&listen->sa, listen->salen, host, sizeof(host), NULL, 0,
	                NI_NUMERICHOST) != 0)
		out->name = mtd_cfg__asprintf("inbound:%s", m->listen);
	else if (listen->sa.ss_family == AF_INET6)
		out->name = mtd_cfg__asprintf("inbound:[%s]:%u", host, (unsigned)listen->port);
	else
		out->name = mtd_cfg__asprintf("inbound:%s:%u", host, (unsigned)listen->port);
	if (out->name == NULL)
		b->d->oom = true;
	out->inbound = (int)i;
}

static bool is_wildcard(const struct mtd_cfg_addr *a)
{
	if (a->sa.ss_family == AF_INET)
		return ((const struct sockaddr_in *)&a->sa)->sin_addr.s_addr == htonl(INADDR_ANY);
	if (a->sa.ss_family == AF_INET6)
		return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)&a->sa)->sin6_addr);
	return false;
}

/* x and y resolved to the same socket address, however written
 * ("localhost:P" and "127.0.0.1:P"). */
static bool same_resolved(const struct mtd_cfg_addr *x, const struct mtd_cfg_addr *y)
{
	if (x->salen == 0 || y->salen == 0 || x->port != y->port || x->sa.ss_family != y->sa.ss_family)
		return false;
	if (x->sa.ss_family == AF_INET)
		return ((const struct sockaddr_in *)&x->sa)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)&y->sa)->sin_addr.s_addr;
	if (x->sa.ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&x->sa, *b = (const struct sockaddr_in6 *)&y->sa;
		return IN6_ARE_ADDR_EQUAL(&a->sin6_addr, &b->sin6_addr) && a->sin6_scope_id == b->sin6_scope_id;
	}
	return false;
}

/* Two listeners that cannot both bind: the same address, however written
 * (a reload keeps one listener per resolved address: two entries there
 * would be one listener serving the first), or the same port with one of
 * them on the wildcard address. */
static bool listeners_clash(const struct mtd_cfg_addr *x, const struct mtd_cfg_addr *y)
{
	if (x->salen == 0 || y->salen == 0 || x->port != y->port)
		return false;
	return same_endpoint(x, y) || same_resolved(x, y) || is_wildcard(x) || is_wildcard(y);
}

static void check_inbound_addrs(struct builder *b, const PbConfig *m, struct mtd_cfg *cfg)
{
	char p[64];

	for (size_t i = 0; i < cfg->n_inbound; i++) {
		const struct mtd_cfg_inbound *in = &cfg->inbound[i];
		const PbInbound *pm = m->inbound[i];

		snprintf(p, sizeof(p), "inbound[%zu].listen", i);
		if (listeners_clash(&in->listen, &cfg->listen))
			BERR(at(b, pm, "listen", pm), p, "\"%s\" is also the listen address (%s)", in->listen.text,
			     cfg->listen.text);
		else if (cfg->admin != NULL && listeners_clash(&in->listen, cfg->admin))
			BERR(at(b, pm, "listen", pm), p, "\"%s\" is also the admin address", in->listen.text);
		for (size_t j = 0; j < i; j++)
			if (listeners_clash(&in->listen, &cfg->inbound[j].listen)) {
				BERR(at(b, pm, "listen", pm), p, "\"%s\" is also inbound[%zu].listen", in->listen.text,
				     j);
				break;
			}
		snprintf(p, sizeof(p), "inbound[%zu].app", i);
		/* The app's calls would come back to maitred itself. */
		if (same_endpoint(&in->app, &cfg->listen) || same_endpoint(&in->app, &in->listen) ||
		    same_resolved(&in->app, &cfg->listen) || same_resolved(&in->app, &in->listen))
			BERR(at(b, pm, "app", pm), p, "\"%s\" is one of maitred's own listeners, not the app",
			     in->app.text);
	}
}

/* Issue 17: a register entry whose address is an inbound listener's
 * advertises that listener: the record carries its certificate's
 * identity. */
static void registers_advertise(struct builder *b, struct mtd_cfg *cfg)
{
	for (size_t r = 0; r < cfg->n_registers; r++) {
		struct mtd_cfg_register *reg = &cfg->registers[r];

		for (size_t i = 0; i < cfg->n_inbound && reg->address.salen != 0; i++) {
			const struct mtd_cfg_inbound *in = &cfg->inbound[i];

			if (in->cert_file == NULL || in->listen.salen == 0 || in->listen.port != reg->address.port ||
			    !(is_wildcard(&in->listen) || same_endpoint(&in->listen, &reg->address)))
				continue;
			reg->identity_cert = dup_or_oom(b, in->cert_file);
			break;
		}
	}
}

static unsigned cpu_count(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n < 1 ? 1 : n > WORKERS_MAX ? WORKERS_MAX : (unsigned)n;
}

int mtd_cfg__build(const PbConfig *m, const char *source, const char *basedir, struct mtd_cfg__diag *d,
                   struct mtd_cfg **out)
{
	struct builder bb = {.d = d, .root = m, .basedir = basedir}, *b = &bb;
	struct mtd_cfg *cfg;
	size_t star = SIZE_MAX;

	*out = NULL;
	cfg = mtd_cfg__calloc(1, sizeof(*cfg));
	if (cfg == NULL)
		goto fail;
	cfg->source = dup_or_oom(b, source);
	if (cfg->source == NULL)
		goto fail_cfg;

	if (m->workers > WORKERS_MAX)
		BERR(at(b, m, "workers", NULL), "workers", "must be at most %d (0 = one per CPU)", WORKERS_MAX);
	b->workers = cfg->workers = m->workers == 0 || m->workers > WORKERS_MAX ? cpu_count() : m->workers;

	build_addr(b, m->listen[0] != '\0' ? m->listen : DEFAULT_LISTEN, at(b, m, "listen", NULL), "listen",
	           &cfg->listen);
	if (m->admin[0] != '\0') {
		cfg->admin = mtd_cfg__calloc(1, sizeof(*cfg->admin));
		if (cfg->admin == NULL)
			goto fail_cfg;
		if (build_addr(b, m->admin, at(b, m, "admin", NULL), "admin", cfg->admin) == 0 &&
		    same_endpoint(cfg->admin, &cfg->listen))
			BERR(at(b, m, "admin", NULL), "admin", "\"%s\" is also the listen address", m->admin);
		else if (cfg->admin->salen != 0 && !is_loopback(cfg->admin) && !m->admin_allow_remote)
			BERR(at(b, m, "admin", NULL), "admin",
			     "\"%s\" is not a loopback address: the admin endpoint has no authentication and "
			     "POST /drain stops maitred; set admin_allow_remote: true to expose it anyway",
			     m->admin);
	}
	cfg->admin_allow_remote = m->admin_allow_remote;
	build_log(b, m->log, &cfg->log);
	build_downstream(b, m->downstream, &cfg->downstream);
	build_identity(b, m, cfg);
	cfg->drain_timeout_ms =
	        dur_ms(b, m->drain_timeout, 15000, ZERO_ALLOWED, at(b, m, "drain_timeout", NULL), "drain_timeout");
	cfg->replay_buffer_total = m->replay_buffer_total != 0 ? m->replay_buffer_total : 64u << 20;
	if (d->oom)
		goto fail_cfg;

	if (m->n_services == 0 && m->n_inbound == 0)
		BERR(at(b, m, "services", NULL), "services",
		     "at least one service is required (or an inbound listener: a maitred that only serves "
		     "inbound calls needs no service)");
	if (m->n_inbound > INBOUND_MAX)
		BERR(at(b, m, "inbound", NULL), "inbound", "at most %d inbound listeners, got %zu", INBOUND_MAX,
		     m->n_inbound);
	if (m->n_services + m->n_inbound != 0) {
		/* The user's services, then one per inbound entry (its app). */
		cfg->services = mtd_cfg__calloc(m->n_services + m->n_inbound, sizeof(*cfg->services));
		if (cfg->services == NULL)
			goto fail_cfg;
		cfg->n_services = cfg->n_routed = m->n_services;
	}
	for (size_t i = 0; i < m->n_services; i++) {
		const PbService *s = m->services[i];
		char p[64];

		build_service(b, s, i, &cfg->services[i]);
		if (d->oom)
			goto fail_cfg;
		snprintf(p, sizeof(p), "services[%zu].name", i);
		if (strcmp(s->name, "*") == 0) {
			if (star != SIZE_MAX)
				BERR(at(b, s, "name", NULL), p, "a second catch-all \"*\" (the first is services[%zu])",
				     star);
			else
				star = i;
			continue;
		}
		for (size_t j = 0; j < i && s->name[0] != '\0'; j++) {
			if (strcmp(m->services[j]->name, s->name) == 0) {
				BERR(at(b, s, "name", NULL), p, "duplicate service \"%s\" (also services[%zu])",
				     s->name, j);
				break;
			}
		}
	}
	if (m->n_routes != 0) {
		cfg->routes = mtd_cfg__calloc(m->n_routes, sizeof(*cfg->routes));
		if (cfg->routes == NULL)
			goto fail_cfg;
		cfg->n_routes = m->n_routes;
	}
	for (size_t i = 0; i < m->n_routes; i++) {
		build_route(b, m->routes[i], i, &cfg->routes[i]);
		if (d->oom)
			goto fail_cfg;
	}
	resolve_targets(b, m, cfg);
	if (m->n_inbound != 0 && m->n_inbound <= INBOUND_MAX) {
		cfg->inbound = mtd_cfg__calloc(m->n_inbound, sizeof(*cfg->inbound));
		if (cfg->inbound == NULL)
			goto fail_cfg;
		cfg->n_inbound = m->n_inbound;
	}
	for (size_t i = 0; i < cfg->n_inbound; i++) {
		build_inbound(b, m->inbound[i], i, &cfg->inbound[i]);
		if (d->oom)
			goto fail_cfg;
		if (cfg->inbound[i].app.salen == 0 || cfg->inbound[i].listen.text == NULL)
			continue; /* said above; no service for it */
		cfg->inbound[i].service = cfg->n_services;
		build_inbound_app(b, m->inbound[i], &cfg->inbound[i].listen, i, cfg->n_services,
		                  &cfg->services[cfg->n_services]);
		cfg->n_services++;
		if (d->oom)
			goto fail_cfg;
	}
	check_inbound_addrs(b, m, cfg);
	if (m->n_register_ != 0) {
		cfg->registers = mtd_cfg__calloc(m->n_register_, sizeof(*cfg->registers));
		if (cfg->registers == NULL)
			goto fail_cfg;
		cfg->n_registers = m->n_register_;
	}
	for (size_t i = 0; i < m->n_register_; i++) {
		const struct mtd_cfg_register *r = &cfg->registers[i];

		build_register(b, m->register_[i], i, &cfg->registers[i]);
		if (d->oom)
			goto fail_cfg;
		/* One key per app and prefix: a second would fight over it. */
		for (size_t j = 0; j < i && r->etcd != NULL && r->etcd->prefix != NULL && r->address.text != NULL;
		     j++) {
			const struct mtd_cfg_register *o = &cfg->registers[j];
			char p[64];

			if (o->etcd != NULL && o->etcd->prefix != NULL && o->address.text != NULL &&
			    strcmp(o->etcd->prefix, r->etcd->prefix) == 0 &&
			    strcmp(o->address.text, r->address.text) == 0) {
				snprintf(p, sizeof(p), "register[%zu].address", i);
				BERR(at(b, m->register_[i], "address", m->register_[i]), p,
				     "\"%s\" under prefix \"%s\" is also register[%zu]", r->address.text,
				     r->etcd->prefix, j);
				break;
			}
		}
	}
	registers_advertise(b, cfg);
	if (d->oom)
		goto fail_cfg;
	if (d->n_errs != 0) {
		mtd_cfg_free(cfg);
		return 0;
	}
	/* Sorted so the per-call lookup is a binary search. */
	for (size_t i = 0; i < cfg->n_services; i++)
		if (cfg->services[i].n_methods > 1)
			qsort(cfg->services[i].methods, cfg->services[i].n_methods, sizeof(struct mtd_cfg_method),
			      method_cmp);
	cfg->pb_len = protobuf_c_message_get_packed_size(&m->base);
	cfg->pb = mtd_cfg__malloc(cfg->pb_len ? cfg->pb_len : 1);
	if (cfg->pb == NULL)
		goto fail_cfg;
	protobuf_c_message_pack(&m->base, cfg->pb);
	*out = cfg;
	return 0;

fail_cfg:
	mtd_cfg_free(cfg);
fail:
	d->oom = true;
	return -ENOMEM;
}

/* ---- runtime form: lookup and free ------------------------------------ */

const struct mtd_cfg_method *mtd_cfg_service_method(const struct mtd_cfg_service *svc, const char *method, size_t len)
{
	size_t lo = 0, hi = svc->n_methods;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const char *name = svc->methods[mid].name;
		size_t n = strlen(name);
		int c = memcmp(name, method, n < len ? n : len);

		if (c == 0)
			c = n < len ? -1 : n > len;
		if (c == 0)
			return &svc->methods[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static void tls_free(struct mtd_cfg_tls *t)
{
	if (t == NULL)
		return;
	mtd_cfg__free(t->ca_file);
	mtd_cfg__free(t->server_name);
	mtd_cfg__free(t->cert_file);
	mtd_cfg__free(t->key_file);
	mtd_cfg__free(t->server_identity);
	mtd_cfg__free(t);
}

static void etcd_free(struct mtd_cfg_etcd *e)
{
	if (e == NULL)
		return;
	for (size_t i = 0; i < e->n_endpoints; i++)
		addr_fini(&e->endpoints[i]);
	mtd_cfg__free(e->endpoints);
	mtd_cfg__free(e->prefix);
	tls_free(e->tls);
	mtd_cfg__free(e->username);
	mtd_cfg__free(e->password_file);
	mtd_cfg__free(e);
}

static void service_fini(struct mtd_cfg_service *s)
{
	mtd_cfg__free(s->name);
	mtd_cfg__free(s->hash_key.header);
	mtd_cfg__free(s->authority);
	tls_free(s->tls);
	for (size_t i = 0; i < s->n_endpoints; i++) {
		addr_fini(&s->endpoints[i].addr);
		mtd_cfg__free(s->endpoints[i].zone);
		for (size_t k = 0; k < s->endpoints[i].n_meta; k++) {
			mtd_cfg__free((char *)s->endpoints[i].meta[k].key);
			mtd_cfg__free((char *)s->endpoints[i].meta[k].value);
		}
		mtd_cfg__free(s->endpoints[i].meta);
	}
	mtd_cfg__free(s->endpoints);
	etcd_free(s->etcd);
	routing_fini(&s->routing);
	if (s->dns != NULL) {
		mtd_cfg__free(s->dns->name);
		for (size_t i = 0; i < s->dns->n_resolvers; i++)
			addr_fini(&s->dns->resolvers[i]);
		mtd_cfg__free(s->dns->resolvers);
		mtd_cfg__free(s->dns);
	}
	for (size_t i = 0; i < s->n_methods; i++) {
		mtd_cfg__free(s->methods[i].name);
		mtd_cfg__free(s->methods[i].hash_key.header);
		if (s->methods[i].fault_own)
			fault_fini(&s->methods[i].fault);
		if (s->methods[i].routing_own)
			routing_fini(&s->methods[i].routing);
		if (s->methods[i].split_own)
			split_free(s->methods[i].split);
	}
	split_free(s->split);
	mtd_cfg__free(s->methods);
	fault_fini(&s->fault);
	mtd_cfg__free(s->health_check.service_name);
}

void mtd_cfg_free(struct mtd_cfg *cfg)
{
	if (cfg == NULL)
		return;
	for (size_t i = 0; i < cfg->n_services; i++)
		service_fini(&cfg->services[i]);
	mtd_cfg__free(cfg->services);
	for (size_t i = 0; i < cfg->n_routes; i++)
		route_fini(&cfg->routes[i]);
	mtd_cfg__free(cfg->routes);
	for (size_t i = 0; i < cfg->n_registers; i++) {
		mtd_cfg__free(cfg->registers[i].identity_cert);
		mtd_cfg__free(cfg->registers[i].service);
		addr_fini(&cfg->registers[i].address);
		etcd_free(cfg->registers[i].etcd);
	}
	mtd_cfg__free(cfg->registers);
	for (size_t i = 0; i < cfg->n_inbound; i++) {
		struct mtd_cfg_inbound *in = &cfg->inbound[i];

		addr_fini(&in->listen);
		addr_fini(&in->app);
		mtd_cfg__free(in->cert_file);
		mtd_cfg__free(in->key_file);
		mtd_cfg__free(in->client_ca_file);
		for (size_t r = 0; r < in->authz.n_rules; r++) {
			struct mtd_authz_rule *rule = &in->authz.rules[r];

			for (size_t k = 0; k < rule->n_principals; k++)
				mtd_cfg__free(rule->principals[k]);
			for (size_t k = 0; k < rule->n_methods; k++)
				mtd_cfg__free(rule->methods[k]);
			mtd_cfg__free(rule->principals);
			mtd_cfg__free(rule->methods);
		}
		mtd_cfg__free(in->authz.rules);
	}
	mtd_cfg__free(cfg->inbound);
	addr_fini(&cfg->listen);
	if (cfg->log.access != NULL) {
		mtd_cfg__free(cfg->log.access->path);
		mtd_cfg__free(cfg->log.access);
	}
	mtd_cfg__free(cfg->pb);
	if (cfg->admin != NULL) {
		addr_fini(cfg->admin);
		mtd_cfg__free(cfg->admin);
	}
	mtd_cfg__free(cfg->zone);
	mtd_cfg__free(cfg->node_id);
	mtd_cfg__free(cfg->source);
	mtd_cfg__free(cfg);
}
