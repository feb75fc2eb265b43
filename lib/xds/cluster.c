/* A Cluster (CDS) into maitred's service options (xds.h says what maps
 * onto what). */
#include <config.h> /* autoconf */

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envoy/config/cluster/v3/cluster.pb-c.h"
#include "envoy/extensions/transport_sockets/tls/v3/tls.pb-c.h"
#include "identity/identity.h"
#include "config/config-int.h"
#include "config/config.h"
#include "lb/lb.h"
#include "pbwire/pbwire.h"
#include "xds/xds-int.h"
#include "xds/xds.h"

typedef Envoy__Config__Cluster__V3__Cluster PbCluster;
typedef Envoy__Config__Cluster__V3__Cluster__SlowStartConfig PbSlowStart;
typedef Envoy__Config__Cluster__V3__OutlierDetection PbOutlier;
typedef Envoy__Extensions__TransportSockets__Tls__V3__UpstreamTlsContext PbUpTls;
typedef Envoy__Extensions__TransportSockets__Tls__V3__SubjectAltNameMatcher PbSanMatcher;
typedef Envoy__Type__Matcher__V3__StringMatcher PbStringMatcher;
typedef Envoy__Config__Core__V3__DataSource PbDataSource;

#define RING_MIN_DEFAULT 1024u
#define RING_MAX_DEFAULT 8388608u /* Envoy's bound on both sizes */
#define MAGLEV_DEFAULT   65537u
#define DURATION_MAX_MS  (INT64_C(86400) * 1000)

int mtd_xds__refuse(char *why, size_t whylen, const char *fmt, ...)
{
	va_list ap;

	if (whylen > 0) {
		va_start(ap, fmt);
		vsnprintf(why, whylen, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

/* A Duration as ms in (0, 1 day]; absent: dflt. -1 when out of range. */
int64_t mtd_xds__dur_ms(const Google__Protobuf__Duration *d, int64_t dflt)
{
	if (d == NULL)
		return dflt;
	if (d->seconds < 0 || d->nanos < 0 || d->nanos > 999999999 || d->seconds > DURATION_MAX_MS / 1000)
		return -1;
	int64_t ms = d->seconds * 1000 + d->nanos / 1000000;
	return ms > 0 && ms <= DURATION_MAX_MS ? ms : -1;
}

/* A printable name of 1..MTD_XDS_NAME_MAX bytes. */
bool mtd_xds__name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > MTD_XDS_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return false;
	return true;
}

/* lb starts from the strategy's defaults, as a config file's service. */
static const struct mtd_lb_ops *strategy(struct mtd_lb_config *lb, const char *name)
{
	mtd_lb_config_defaults(lb, mtd_lb_find(name));
	return lb->ops;
}

static int slow_start(const PbSlowStart *ss, struct mtd_lb_config *lb, char *why, size_t whylen)
{
	if (ss == NULL || ss->slow_start_window == NULL)
		return 0;
	int64_t ms = mtd_xds__dur_ms(ss->slow_start_window, 0);
	if (ms < 0)
		return mtd_xds__refuse(why, whylen, "slow_start_config.slow_start_window: out of range (0, 1 day]");
	lb->warmup.duration_ms = ms;
	lb->warmup.curve = MTD_LB_WARMUP_SLOW_START;
	lb->warmup.aggression = 1.0;
	lb->warmup.min_weight_percent = 10.0;
	if (ss->aggression != NULL) {
		double a = ss->aggression->default_value;
		if (!isfinite(a) || !(a > 0.0) || a > 1000.0)
			return mtd_xds__refuse(why, whylen, "slow_start_config.aggression: must be in (0, 1000]");
		lb->warmup.aggression = a;
	}
	if (ss->min_weight_percent != NULL) {
		double p = ss->min_weight_percent->value;
		if (!isfinite(p) || p < 0.0 || p > 100.0)
			return mtd_xds__refuse(why, whylen,
			                       "slow_start_config.min_weight_percent: must be in [0, 100]");
		lb->warmup.min_weight_percent = p;
	}
	return 0;
}

static int lb_policy(const PbCluster *m, struct mtd_xds_cluster *c, char *why, size_t whylen)
{
	struct mtd_lb_config *lb = &c->lb;
	const PbSlowStart *ss = NULL;

	switch (m->lb_policy) {
	case ENVOY__CONFIG__CLUSTER__V3__CLUSTER__LB_POLICY__ROUND_ROBIN:
		strategy(lb, "WEIGHTED_ROUND_ROBIN");
		if (m->lb_config_case == ENVOY__CONFIG__CLUSTER__V3__CLUSTER__LB_CONFIG_ROUND_ROBIN_LB_CONFIG)
			ss = m->round_robin_lb_config->slow_start_config;
		break;
	case ENVOY__CONFIG__CLUSTER__V3__CLUSTER__LB_POLICY__LEAST_REQUEST:
		strategy(lb, "LEAST_REQUEST");
		if (m->lb_config_case == ENVOY__CONFIG__CLUSTER__V3__CLUSTER__LB_CONFIG_LEAST_REQUEST_LB_CONFIG) {
			const Envoy__Config__Cluster__V3__Cluster__LeastRequestLbConfig *lr =
			        m->least_request_lb_config;
			if (lr->choice_count != NULL) {
				if (lr->choice_count->value < 2 || lr->choice_count->value > 100)
					return mtd_xds__refuse(
					        why, whylen,
					        "least_request_lb_config.choice_count: %u is not in 2..100",
					        lr->choice_count->value);
				lb->choice_count = lr->choice_count->value;
			}
			ss = lr->slow_start_config;
		}
		break;
	case ENVOY__CONFIG__CLUSTER__V3__CLUSTER__LB_POLICY__RANDOM:
		strategy(lb, "WEIGHTED_RANDOM");
		break;
	case ENVOY__CONFIG__CLUSTER__V3__CLUSTER__LB_POLICY__RING_HASH:
		strategy(lb, "CONSISTENT_HASH");
		c->ring_min = RING_MIN_DEFAULT;
		c->ring_max = RING_MAX_DEFAULT;
		if (m->lb_config_case == ENVOY__CONFIG__CLUSTER__V3__CLUSTER__LB_CONFIG_RING_HASH_LB_CONFIG) {
			const Envoy__Config__Cluster__V3__Cluster__RingHashLbConfig *rh = m->ring_hash_lb_config;
			if (rh->minimum_ring_size != NULL)
				c->ring_min = rh->minimum_ring_size->value;
			if (rh->maximum_ring_size != NULL)
				c->ring_max = rh->maximum_ring_size->value;
		}
		if (c->ring_min == 0 || c->ring_max > RING_MAX_DEFAULT || c->ring_min > c->ring_max)
			return mtd_xds__refuse(why, whylen,
			                       "ring_hash_lb_config: ring sizes must be 1 <= minimum <= maximum <= %u",
			                       RING_MAX_DEFAULT);
		break;
	case ENVOY__CONFIG__CLUSTER__V3__CLUSTER__LB_POLICY__MAGLEV:
		strategy(lb, "MAGLEV");
		lb->table_size = MAGLEV_DEFAULT;
		if (m->lb_config_case == ENVOY__CONFIG__CLUSTER__V3__CLUSTER__LB_CONFIG_MAGLEV_LB_CONFIG &&
		    m->maglev_lb_config->table_size != NULL) {
			uint64_t t = m->maglev_lb_config->table_size->value;
			if (t > MTD_LB_MAX_TABLE_SIZE)
				return mtd_xds__refuse(why, whylen, "maglev_lb_config.table_size: above %u",
				                       MTD_LB_MAX_TABLE_SIZE);
			lb->table_size = (uint32_t)t;
		}
		break;
	default:
		return mtd_xds__refuse(why, whylen,
		                       "lb_policy %d: maitred supports ROUND_ROBIN, LEAST_REQUEST, RANDOM, "
		                       "RING_HASH and MAGLEV",
		                       (int)m->lb_policy);
	}
	if (lb->ops == NULL)
		return mtd_xds__refuse(why, whylen, "lb_policy: strategy missing from this build");
	if (slow_start(ss, lb, why, whylen) != 0)
		return -EINVAL;
	/* The strategy's own rules (a prime maglev table, ...); ring_points
	 * is set per endpoint set (mtd_xds_ring_points). */
	const char *bad = NULL;
	if (mtd_lb_config_check(lb, &bad) != 0)
		return mtd_xds__refuse(why, whylen, "lb_policy: %s is not valid for %s", bad, lb->ops->name);
	return 0;
}

static int limit_u32(const Google__Protobuf__UInt32Value *v, uint32_t *out, const char *field, char *why, size_t whylen)
{
	if (v == NULL)
		return 0;
	if (v->value == 0)
		return mtd_xds__refuse(why, whylen, "circuit_breakers.thresholds.%s: 0 would refuse every call", field);
	*out = v->value;
	return 0;
}

static int circuit(const PbCluster *m, struct mtd_xds_cluster *c, char *why, size_t whylen)
{
	if (m->circuit_breakers == NULL)
		return 0;
	for (size_t i = 0; i < m->circuit_breakers->n_thresholds; i++) {
		const Envoy__Config__Cluster__V3__CircuitBreakers__Thresholds *t = m->circuit_breakers->thresholds[i];
		if (t->priority != ENVOY__CONFIG__CORE__V3__ROUTING_PRIORITY__DEFAULT)
			continue; /* HIGH: routes maitred does not have */
		if (limit_u32(t->max_requests, &c->circuit.max_calls, "max_requests", why, whylen) != 0 ||
		    limit_u32(t->max_pending_requests, &c->circuit.max_pending, "max_pending_requests", why, whylen) !=
		            0)
			return -EINVAL;
	}
	return 0;
}

static int percent(const Google__Protobuf__UInt32Value *v, uint32_t dflt, uint32_t *out)
{
	*out = v != NULL ? v->value : dflt;
	return *out <= 100 ? 0 : -1;
}

static int outlier(const PbOutlier *m, struct mtd_outlier_config *o, char *why, size_t whylen)
{
	uint32_t enforce5xx, enforce_pct, pct;

	if (m == NULL)
		return 0;
	o->enabled = true;
	o->consecutive_failures =
	        m->consecutive_5xx != NULL ? m->consecutive_5xx->value : MTD_OUTLIER_DEFAULT_CONSECUTIVE;
	if (percent(m->enforcing_consecutive_5xx, 100, &enforce5xx) != 0 ||
	    percent(m->enforcing_failure_percentage, 0, &enforce_pct) != 0 ||
	    percent(m->failure_percentage_threshold, 85, &pct) != 0 ||
	    percent(m->max_ejection_percent, MTD_OUTLIER_DEFAULT_MAX_PERCENT, &o->max_ejection_percent) != 0)
		return mtd_xds__refuse(why, whylen, "outlier_detection: a percentage above 100");
	/* maitred enforces a rule always or never: Envoy's enforcing_* 0
	 * turns it off, any other value on. */
	if (enforce5xx == 0)
		o->consecutive_failures = 0;
	o->failure_percentage = enforce_pct > 0 ? (pct > 0 ? pct : 1) : 0;
	o->min_requests =
	        m->failure_percentage_request_volume != NULL ? m->failure_percentage_request_volume->value : 50;
	if (o->min_requests == 0)
		o->min_requests = 1;
	o->interval_ms = mtd_xds__dur_ms(m->interval, MTD_OUTLIER_DEFAULT_INTERVAL_MS);
	o->base_ejection_ms = mtd_xds__dur_ms(m->base_ejection_time, MTD_OUTLIER_DEFAULT_BASE_MS);
	o->max_ejection_ms = mtd_xds__dur_ms(m->max_ejection_time, MTD_OUTLIER_DEFAULT_MAX_MS);
	if (o->interval_ms < 0 || o->base_ejection_ms < 0 || o->max_ejection_ms < 0)
		return mtd_xds__refuse(why, whylen, "outlier_detection: a duration out of range (0, 1 day]");
	if (o->max_ejection_ms < o->base_ejection_ms)
		o->max_ejection_ms = o->base_ejection_ms;
	o->panic_percent = MTD_OUTLIER_DEFAULT_PANIC_PERCENT;
	return 0;
}

static int file_of(const PbDataSource *d, char **out, const char *field, char *why, size_t whylen)
{
	if (d == NULL)
		return 0;
	if (d->specifier_case != ENVOY__CONFIG__CORE__V3__DATA_SOURCE__SPECIFIER_FILENAME || d->filename[0] == '\0')
		return mtd_xds__refuse(why, whylen, "%s: maitred takes a file name only (filename)", field);
	if (strlen(d->filename) > 4096)
		return mtd_xds__refuse(why, whylen, "%s: file name too long", field);
	*out = mtd_cfg__strdup(d->filename);
	return *out != NULL ? 0 : -ENOMEM;
}

/* One exact SAN matcher, as the typed identity maitred checks. */
static int san(const PbSanMatcher *const *typed, size_t n_typed, const PbStringMatcher *const *plain, size_t n_plain,
               char **out, char *why, size_t whylen)
{
	const PbStringMatcher *sm;
	char text[MTD_IDENTITY_TEXT_SIZE];
	const char *bad = NULL;
	bool dns;

	if (n_typed + n_plain == 0)
		return 0;
	if (n_typed + n_plain > 1)
		return mtd_xds__refuse(why, whylen,
		                       "validation_context: maitred checks one SAN (server_identity), not %zu",
		                       n_typed + n_plain);
	if (n_typed == 1) {
		sm = typed[0]->matcher;
		if (typed[0]->san_type ==
		    ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__SUBJECT_ALT_NAME_MATCHER__SAN_TYPE__URI)
			dns = false;
		else if (typed[0]->san_type ==
		         ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__SUBJECT_ALT_NAME_MATCHER__SAN_TYPE__DNS)
			dns = true;
		else
			return mtd_xds__refuse(why, whylen, "match_typed_subject_alt_names: only URI and DNS SANs");
	} else {
		sm = plain[0];
		dns = strncmp(sm->exact != NULL ? sm->exact : "", "spiffe://", 9) != 0;
	}
	if (sm == NULL || sm->match_pattern_case != ENVOY__TYPE__MATCHER__V3__STRING_MATCHER__MATCH_PATTERN_EXACT ||
	    sm->ignore_case)
		return mtd_xds__refuse(why, whylen,
		                       "validation_context: a SAN matcher must be exact (maitred's server_identity)");
	if (strlen(sm->exact) > MTD_IDENTITY_MAX)
		return mtd_xds__refuse(why, whylen, "validation_context: SAN too long");
	snprintf(text, sizeof(text), "%s%s", dns ? "dns:" : "", sm->exact);
	if (!mtd_identity_ok(text, &bad))
		return mtd_xds__refuse(why, whylen, "validation_context: SAN \"%s\": %s", text,
		                       bad ? bad : "not an identity");
	*out = mtd_cfg__strdup(text);
	return *out != NULL ? 0 : -ENOMEM;
}

typedef Envoy__Extensions__TransportSockets__Tls__V3__CommonTlsContext PbCommonTls;
typedef Envoy__Extensions__TransportSockets__Tls__V3__CertificateValidationContext PbValidation;
typedef Envoy__Extensions__TransportSockets__Tls__V3__CertificateProviderPluginInstance PbProviderInstance;

/* CommonTlsContext's fields maitred refuses by number (not in its
 * tls.proto, so protobuf-c keeps them unknown): tls_certificate_sds_secret_configs
 * (6), validation_context_sds_secret_config (7), and the deprecated
 * provider forms tls_certificate_certificate_provider (9),
 * validation_context_certificate_provider (10),
 * tls_certificate_certificate_provider_instance (11),
 * validation_context_certificate_provider_instance (12), and
 * custom_handshaker (13), as gRPC's clients refuse it. Ignoring them
 * would make a connection without the client certificate or the CA the
 * control plane meant. */
static const char *refused_common_field(const PbCommonTls *ctx)
{
	for (size_t i = 0; i < ctx->base.n_unknown_fields; i++) {
		switch (ctx->base.unknown_fields[i].tag) {
		case 6:
			return "tls_certificate_sds_secret_configs: SDS is not read "
			       "(file names or certificate provider instances)";
		case 7:
			return "validation_context_sds_secret_config: SDS is not read "
			       "(file names or certificate provider instances)";
		case 9:
		case 10:
		case 11:
		case 12:
			return "a deprecated certificate provider field: maitred reads "
			       "tls_certificate_provider_instance and ca_certificate_provider_instance";
		case 13:
			/* Another handshake than TLS's (ALTS, say): ignored, the
			 * connection would not be what the control plane meant. */
			return "custom_handshaker: maitred makes TLS handshakes only";
		default:
			break;
		}
	}
	return NULL;
}

/* CertificateValidationContext's checks maitred does not make (not in
 * its tls.proto, so protobuf-c keeps them unknown): each narrows which
 * upstream certificates the control plane trusts, so taking the context
 * without them would trust more than it meant. NACKed, as grpc-js-xds
 * NACKs each of them. */
static const char *refused_validation_field(const PbValidation *vc)
{
	for (size_t i = 0; i < vc->base.n_unknown_fields; i++) {
		switch (vc->base.unknown_fields[i].tag) {
		case 2:
			return "verify_certificate_hash";
		case 3:
			return "verify_certificate_spki";
		case 6:
			return "require_signed_certificate_timestamp";
		case 7:
			return "crl";
		case 12:
			return "custom_validator_config";
		default:
			break;
		}
	}
	return NULL;
}

/* A certificate provider instance, by its name in the bootstrap's
 * certificate_providers; NULL with the refusal in why. */
static const struct mtd_cfg_cert_provider *instance_of(const PbProviderInstance *pi,
                                                       const struct mtd_cfg_cert_providers *providers,
                                                       const char *field, char *why, size_t whylen)
{
	/* gRPC's proto: "If not present, defaults to \"default\"". */
	const char *name = pi->instance_name[0] != '\0' ? pi->instance_name : "default";
	const struct mtd_cfg_cert_provider *p = mtd_cfg_cert_provider_find(providers, name);

	if (p == NULL)
		(void)mtd_xds__refuse(why, whylen, "%s \"%.128s\": not among the bootstrap's certificate_providers",
		                      field, name);
	return p;
}

static int dup_to(char **out, const char *s)
{
	*out = mtd_cfg__strdup(s);
	return *out != NULL ? 0 : -ENOMEM;
}

/* The CA: validation_context.trusted_ca (a file name) or
 * ca_certificate_provider_instance, one of them. */
static int tls_ca(const PbValidation *vc, const struct mtd_cfg_cert_providers *providers, struct mtd_xds_tls *t,
                  char *why, size_t whylen)
{
	const struct mtd_cfg_cert_provider *p;

	if (vc->trusted_ca != NULL && vc->ca_certificate_provider_instance != NULL)
		return mtd_xds__refuse(
		        why, whylen,
		        "validation_context: trusted_ca and ca_certificate_provider_instance are both set");
	if (vc->trusted_ca != NULL)
		return file_of(vc->trusted_ca, &t->ca_file, "validation_context.trusted_ca", why, whylen);
	if (vc->ca_certificate_provider_instance == NULL)
		return mtd_xds__refuse(
		        why, whylen,
		        "transport_socket: validation_context.trusted_ca or ca_certificate_provider_instance "
		        "is required (maitred verifies its upstreams)");
	p = instance_of(vc->ca_certificate_provider_instance, providers, "ca_certificate_provider_instance", why,
	                whylen);
	if (p == NULL)
		return -EINVAL;
	if (p->ca_file == NULL)
		return mtd_xds__refuse(
		        why, whylen,
		        "ca_certificate_provider_instance \"%.128s\": the instance has no ca_certificate_file",
		        p->name);
	int rc = dup_to(&t->ca_file, p->ca_file);
	return rc != 0 ? rc : dup_to(&t->ca_instance, p->name);
}

/* The client certificate: tls_certificates[0] (file names) or
 * tls_certificate_provider_instance, at most one of them; none is a
 * connection without one. */
static int tls_identity(const PbCommonTls *ctx, const struct mtd_cfg_cert_providers *providers, struct mtd_xds_tls *t,
                        char *why, size_t whylen)
{
	const struct mtd_cfg_cert_provider *p;
	int rc;

	if (ctx->n_tls_certificates > 1)
		return mtd_xds__refuse(why, whylen, "tls_certificates: one certificate at most");
	if (ctx->n_tls_certificates == 1 && ctx->tls_certificate_provider_instance != NULL)
		return mtd_xds__refuse(why, whylen,
		                       "tls_certificates and tls_certificate_provider_instance are both set");
	if (ctx->n_tls_certificates == 1) {
		const Envoy__Extensions__TransportSockets__Tls__V3__TlsCertificate *tc = ctx->tls_certificates[0];
		if (tc->certificate_chain == NULL || tc->private_key == NULL)
			return mtd_xds__refuse(why, whylen,
			                       "tls_certificates[0]: certificate_chain and private_key go together");
		if ((rc = file_of(tc->certificate_chain, &t->cert_file, "tls_certificates[0].certificate_chain", why,
		                  whylen)) != 0)
			return rc;
		return file_of(tc->private_key, &t->key_file, "tls_certificates[0].private_key", why, whylen);
	}
	if (ctx->tls_certificate_provider_instance == NULL)
		return 0;
	p = instance_of(ctx->tls_certificate_provider_instance, providers, "tls_certificate_provider_instance", why,
	                whylen);
	if (p == NULL)
		return -EINVAL;
	if (p->cert_file == NULL)
		return mtd_xds__refuse(why, whylen,
		                       "tls_certificate_provider_instance \"%.128s\": the instance has no "
		                       "certificate_file and private_key_file",
		                       p->name);
	if ((rc = dup_to(&t->cert_file, p->cert_file)) != 0 || (rc = dup_to(&t->key_file, p->key_file)) != 0)
		return rc;
	return dup_to(&t->cert_instance, p->name);
}

/* The validation context: validation_context, or
 * combined_validation_context's default_validation_context (its other
 * fields are SDS and deprecated provider forms: refused). */
static const PbValidation *validation_of(const PbCommonTls *ctx, char *why, size_t whylen)
{
	if (ctx->validation_context_type_case ==
	    ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__COMMON_TLS_CONTEXT__VALIDATION_CONTEXT_TYPE_VALIDATION_CONTEXT)
		return ctx->validation_context;
	if (ctx->validation_context_type_case ==
	    ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__COMMON_TLS_CONTEXT__VALIDATION_CONTEXT_TYPE_COMBINED_VALIDATION_CONTEXT) {
		const Envoy__Extensions__TransportSockets__Tls__V3__CommonTlsContext__CombinedCertificateValidationContext
		        *cc = ctx->combined_validation_context;
		if (cc->base.n_unknown_fields > 0) {
			(void)mtd_xds__refuse(
			        why, whylen,
			        "combined_validation_context: only default_validation_context is read (not "
			        "SDS or the deprecated provider forms)");
			return NULL;
		}
		if (cc->default_validation_context != NULL)
			return cc->default_validation_context;
	}
	(void)mtd_xds__refuse(why, whylen,
	                      "transport_socket: common_tls_context.validation_context with trusted_ca or "
	                      "ca_certificate_provider_instance is required (maitred verifies its upstreams)");
	return NULL;
}

static int tls(const Envoy__Config__Core__V3__TransportSocket *ts, const struct mtd_cfg_cert_providers *providers,
               struct mtd_xds_cluster *c, char *why, size_t whylen)
{
	const Google__Protobuf__Any *any;
	const PbValidation *vc;
	const char *refused;
	PbUpTls *m;
	int rc = 0;

	if (ts == NULL)
		return 0;
	any = ts->config_type_case == ENVOY__CONFIG__CORE__V3__TRANSPORT_SOCKET__CONFIG_TYPE_TYPED_CONFIG
	              ? ts->typed_config
	              : NULL;
	if (any == NULL || strcmp(any->type_url, MTD_XDS_TYPE_TLS) != 0)
		return mtd_xds__refuse(why, whylen, "transport_socket: maitred takes an UpstreamTlsContext only");
	rc = mtd_xds__unpack(&envoy__extensions__transport_sockets__tls__v3__upstream_tls_context__descriptor,
	                     any->value.data, any->value.len, "transport_socket.typed_config", &m, why, whylen);
	if (rc == -EBADMSG)
		return mtd_xds__refuse(why, whylen, "transport_socket: the UpstreamTlsContext does not decode");
	if (rc != 0)
		return rc;
	c->tls = mtd_cfg__calloc(1, sizeof(*c->tls));
	if (c->tls == NULL) {
		rc = -ENOMEM;
		goto out;
	}
	const PbCommonTls *ctx = m->common_tls_context;
	if (ctx == NULL) {
		rc = mtd_xds__refuse(why, whylen, "transport_socket: common_tls_context is required");
		goto out;
	}
	if ((refused = refused_common_field(ctx)) != NULL) {
		rc = mtd_xds__refuse(why, whylen, "common_tls_context.%s", refused);
		goto out;
	}
	if ((vc = validation_of(ctx, why, whylen)) == NULL) {
		rc = -EINVAL;
		goto out;
	}
	if ((refused = refused_validation_field(vc)) != NULL) {
		rc = mtd_xds__refuse(why, whylen,
		                     "common_tls_context: the validation context's %s: maitred does not make that check "
		                     "(it verifies the chain to the CA and one SAN matcher)",
		                     refused);
		goto out;
	}
	if ((rc = tls_ca(vc, providers, c->tls, why, whylen)) != 0 ||
	    (rc = tls_identity(ctx, providers, c->tls, why, whylen)) != 0)
		goto out;
	rc = san((const PbSanMatcher *const *)vc->match_typed_subject_alt_names, vc->n_match_typed_subject_alt_names,
	         (const PbStringMatcher *const *)vc->match_subject_alt_names, vc->n_match_subject_alt_names,
	         &c->tls->server_identity, why, whylen);
	if (rc != 0)
		goto out;
	if (m->sni[0] != '\0') {
		if (strlen(m->sni) > 255 || !mtd_xds__name_ok(m->sni)) {
			rc = mtd_xds__refuse(why, whylen, "sni: not a server name");
			goto out;
		}
		if ((c->tls->server_name = mtd_cfg__strdup(m->sni)) == NULL)
			rc = -ENOMEM;
	}
out:
	envoy__extensions__transport_sockets__tls__v3__upstream_tls_context__free_unpacked(m, &mtd_cfg__pb_allocator);
	return rc;
}

/* Cluster.transport_socket_matches, Envoy's field number. */
#define CLUSTER_TRANSPORT_SOCKET_MATCHES 43

/* An unknown field 43 (protobuf-c keeps it: its bytes after the tag,
 * length prefix first) is a TransportSocketMatch whose transport_socket
 * (3) holds an UpstreamTlsContext (typed_config 3, its type_url 1): TLS
 * the cluster would have were matches read. A raw_buffer match (Istio's
 * tlsMode-disabled), or a field 43 of another wire type, is none. */
static bool match_holds_tls(const ProtobufCMessageUnknownField *f)
{
	static const uint32_t type_url[] = {3, 3, 1};
	struct mtd_pbwire_value v;
	size_t i = 0, len = 0;
	int shift = 0;

	if (f->tag != CLUSTER_TRANSPORT_SOCKET_MATCHES || f->wire_type != PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED)
		return false;
	/* Skip the length varint protobuf-c kept (it checked it). */
	while (i < f->len && i < 10 && (f->data[i] & 0x80))
		len |= (size_t)(f->data[i++] & 0x7f) << shift, shift += 7;
	if (i >= f->len)
		return false;
	len |= (size_t)f->data[i++] << shift;
	if (len != f->len - i)
		return false;
	return mtd_pbwire_find(f->data + i, len, true, type_url, 3, &v) == 1 && v.type == MTD_PBWIRE_LEN &&
	       v.len == strlen(MTD_XDS_TYPE_TLS) && memcmp(v.data, MTD_XDS_TYPE_TLS, v.len) == 0;
}

static int translate(const PbCluster *m, const struct mtd_cfg_cert_providers *providers, struct mtd_xds_cluster *c,
                     char *why, size_t whylen)
{
	const Envoy__Config__Cluster__V3__Cluster__EdsClusterConfig *eds = m->eds_cluster_config;
	int rc;

	if (!mtd_xds__name_ok(m->name))
		return mtd_xds__refuse(why, whylen, "name: empty, too long or not printable");
	if (m->cluster_discovery_type_case != ENVOY__CONFIG__CLUSTER__V3__CLUSTER__CLUSTER_DISCOVERY_TYPE_TYPE ||
	    m->type != ENVOY__CONFIG__CLUSTER__V3__CLUSTER__DISCOVERY_TYPE__EDS)
		return mtd_xds__refuse(why, whylen, "cluster %s: type must be EDS (maitred takes endpoints from EDS)",
		                       m->name);
	if (eds == NULL || eds->eds_config == NULL ||
	    (eds->eds_config->config_source_specifier_case !=
	             ENVOY__CONFIG__CORE__V3__CONFIG_SOURCE__CONFIG_SOURCE_SPECIFIER_ADS &&
	     eds->eds_config->config_source_specifier_case !=
	             ENVOY__CONFIG__CORE__V3__CONFIG_SOURCE__CONFIG_SOURCE_SPECIFIER_SELF))
		return mtd_xds__refuse(why, whylen, "cluster %s: eds_cluster_config.eds_config must be ads (or self)",
		                       m->name);
	if (eds->service_name[0] != '\0' && !mtd_xds__name_ok(eds->service_name))
		return mtd_xds__refuse(
		        why, whylen, "cluster %s: eds_cluster_config.service_name: too long or not printable", m->name);
	c->name = mtd_cfg__strdup(m->name);
	c->eds_name = mtd_cfg__strdup(eds->service_name[0] != '\0' ? eds->service_name : m->name);
	if (c->name == NULL || c->eds_name == NULL)
		return -ENOMEM;
	if (m->connect_timeout != NULL) {
		c->connect_timeout_ms = mtd_xds__dur_ms(m->connect_timeout, 0);
		if (c->connect_timeout_ms <= 0 || c->connect_timeout_ms > 3600000)
			return mtd_xds__refuse(why, whylen, "cluster %s: connect_timeout: out of range (0, 1h]",
			                       m->name);
	}
	if ((rc = lb_policy(m, c, why, whylen)) != 0 || (rc = circuit(m, c, why, whylen)) != 0 ||
	    (rc = outlier(m->outlier_detection, &c->outlier, why, whylen)) != 0 ||
	    (rc = tls(m->transport_socket, providers, c, why, whylen)) != 0)
		return rc;
	/* Not in maitred's cluster.proto: protobuf-c keeps it unknown. */
	for (size_t i = 0; i < m->base.n_unknown_fields && c->tls == NULL; i++)
		c->tls_only_in_matches |= match_holds_tls(&m->base.unknown_fields[i]);
	return 0;
}

int mtd_xds_cluster_parse(const uint8_t *buf, size_t len, const struct mtd_cfg_cert_providers *providers,
                          struct mtd_xds_cluster *out, char *why, size_t whylen)
{
	PbCluster *m;
	int rc;

	memset(out, 0, sizeof(*out));
	rc = mtd_xds__unpack(&envoy__config__cluster__v3__cluster__descriptor, buf, len, NULL, &m, why, whylen);
	if (rc == -EBADMSG)
		return mtd_xds__refuse(why, whylen, "the Cluster does not decode");
	if (rc != 0)
		return rc;
	rc = translate(m, providers, out, why, whylen);
	envoy__config__cluster__v3__cluster__free_unpacked(m, &mtd_cfg__pb_allocator);
	if (rc != 0)
		mtd_xds_cluster_clear(out);
	return rc;
}

void mtd_xds_cluster_clear(struct mtd_xds_cluster *c)
{
	mtd_cfg__free(c->name);
	mtd_cfg__free(c->eds_name);
	if (c->tls != NULL) {
		mtd_cfg__free(c->tls->ca_file);
		mtd_cfg__free(c->tls->cert_file);
		mtd_cfg__free(c->tls->key_file);
		mtd_cfg__free(c->tls->server_name);
		mtd_cfg__free(c->tls->server_identity);
		mtd_cfg__free(c->tls->ca_instance);
		mtd_cfg__free(c->tls->cert_instance);
		mtd_cfg__free(c->tls);
	}
	memset(c, 0, sizeof(*c));
}

static bool same_str(const char *a, const char *b)
{
	return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

bool mtd_xds_cluster_equal(const struct mtd_xds_cluster *a, const struct mtd_xds_cluster *b)
{
	if (!same_str(a->name, b->name) || !same_str(a->eds_name, b->eds_name) || a->lb.ops != b->lb.ops ||
	    a->lb.choice_count != b->lb.choice_count || a->lb.table_size != b->lb.table_size ||
	    memcmp(&a->lb.warmup, &b->lb.warmup, sizeof(a->lb.warmup)) != 0 || a->ring_min != b->ring_min ||
	    a->ring_max != b->ring_max || a->connect_timeout_ms != b->connect_timeout_ms ||
	    memcmp(&a->circuit, &b->circuit, sizeof(a->circuit)) != 0 ||
	    memcmp(&a->outlier, &b->outlier, sizeof(a->outlier)) != 0 || (a->tls == NULL) != (b->tls == NULL) ||
	    a->tls_only_in_matches != b->tls_only_in_matches)
		return false;
	if (a->tls == NULL)
		return true;
	return same_str(a->tls->ca_file, b->tls->ca_file) && same_str(a->tls->cert_file, b->tls->cert_file) &&
	       same_str(a->tls->key_file, b->tls->key_file) && same_str(a->tls->server_name, b->tls->server_name) &&
	       same_str(a->tls->server_identity, b->tls->server_identity) &&
	       same_str(a->tls->ca_instance, b->tls->ca_instance) &&
	       same_str(a->tls->cert_instance, b->tls->cert_instance);
}

uint32_t mtd_xds_ring_points(const struct mtd_xds_cluster *c, const struct mtd_xds_ep *eps, size_t n)
{
	/* The picker gives an endpoint ring_points * weight / 100 points
	 * (lb-t.h): the ring's size is ring_points * total / 100, whatever
	 * scale the weights are on (1 each, or shares of
	 * MTD_XDS_WEIGHT_SCALE with locality weights). */
	uint64_t total = 0, pts;

	for (size_t i = 0; i < n; i++)
		total += eps[i].weight > 0 ? (uint64_t)eps[i].weight : 0;
	if (total == 0)
		total = 100 * (uint64_t)n; /* no weight at all: 100 each, as the picker reads it */
	if (total == 0)
		return 1;
	pts = ((uint64_t)c->ring_min * 100 + total - 1) / total;
	if (pts * total > (uint64_t)c->ring_max * 100)
		pts = (uint64_t)c->ring_max * 100 / total;
	if (pts < 1)
		pts = 1;
	if (pts > MTD_LB_MAX_RING_POINTS)
		pts = MTD_LB_MAX_RING_POINTS;
	return (uint32_t)pts;
}
