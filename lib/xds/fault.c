/* The HTTP fault filter's config (HTTPFault, gRPC's A33) into maitred's
 * fault_injection, and the overrides of it in typed_per_filter_config
 * (xds.h says what is honoured and what refused). */
#include <config.h> /* autoconf */

#include <errno.h>
#include <string.h>

#include "config/config-int.h"
#include "envoy/config/route/v3/route.pb-c.h"
#include "envoy/extensions/filters/http/fault/v3/fault.pb-c.h"
#include "grpc/grpc.h"
#include "xds/xds-int.h"
#include "xds/xds.h"

typedef Envoy__Extensions__Filters__Http__Fault__V3__HTTPFault PbFault;
typedef Envoy__Type__V3__FractionalPercent PbFraction;

#define FAULT_DELAY_MAX_MS 3600000 /* fault_injection.delay's bound in the config */

/* HTTPFault fields maitred leaves out of its proto, refused when set:
 * each would narrow or change which calls a fault hits. */
static const struct {
	uint32_t tag;
	const char *name;
	const char *why;
} refused_fields[] = {
        {3, "upstream_cluster", "faults apply to every cluster of the route"},
        {4, "headers", "faults apply to every call of the route"},
        {5, "downstream_nodes", "faults apply to every caller"},
        {6, "max_active_faults", "maitred does not bound the faults in flight"},
        {7, "response_rate_limit", "maitred does not slow responses"},
};

/* A share as maitred's percent (0..100); a numerator above its
 * denominator is all calls, as Envoy reads it. Unset: 0, as Envoy and
 * gRPC read an unset FractionalPercent. */
static int fraction(const PbFraction *f, double *percent, const char *where, char *why, size_t whylen)
{
	double den;

	if (f == NULL) {
		*percent = 0.0;
		return 0;
	}
	switch (f->denominator) {
	case ENVOY__TYPE__V3__FRACTIONAL_PERCENT__DENOMINATOR_TYPE__HUNDRED:
		den = 100.0;
		break;
	case ENVOY__TYPE__V3__FRACTIONAL_PERCENT__DENOMINATOR_TYPE__TEN_THOUSAND:
		den = 10000.0;
		break;
	case ENVOY__TYPE__V3__FRACTIONAL_PERCENT__DENOMINATOR_TYPE__MILLION:
		den = 1000000.0;
		break;
	default:
		return mtd_xds__refuse(why, whylen, "%s.percentage.denominator: unknown value %d", where,
		                       (int)f->denominator);
	}
	*percent = f->numerator >= den ? 100.0 : (double)f->numerator * 100.0 / den;
	return 0;
}

static int abort_of(const PbFault *m, struct mtd_cfg_fault_injection *fi, const char *where, char *why, size_t whylen)
{
	const Envoy__Extensions__Filters__Http__Fault__V3__FaultAbort *a = m->abort;

	if (a == NULL)
		return 0;
	switch (a->error_type_case) {
	case ENVOY__EXTENSIONS__FILTERS__HTTP__FAULT__V3__FAULT_ABORT__ERROR_TYPE_GRPC_STATUS:
		if (a->grpc_status == 0 || a->grpc_status > MTD_GRPC_UNAUTHENTICATED)
			return mtd_xds__refuse(why, whylen, "%s.abort.grpc_status: %u is not a gRPC status other than OK",
			                       where, a->grpc_status);
		fi->abort_status = (int)a->grpc_status;
		break;
	case ENVOY__EXTENSIONS__FILTERS__HTTP__FAULT__V3__FAULT_ABORT__ERROR_TYPE_HTTP_STATUS:
		if (a->http_status < 200 || a->http_status >= 600)
			return mtd_xds__refuse(why, whylen, "%s.abort.http_status: %u is not in 200..599", where,
			                       a->http_status);
		/* As a gRPC client reads an HTTP status without grpc-status. */
		fi->abort_status = (int)mtd_grpc_status_from_http((int)a->http_status);
		break;
	case ENVOY__EXTENSIONS__FILTERS__HTTP__FAULT__V3__FAULT_ABORT__ERROR_TYPE_HEADER_ABORT:
		return mtd_xds__refuse(why, whylen,
		                       "%s.abort.header_abort is not supported (the status comes from the "
		                       "config, never from a call's headers)",
		                       where);
	default:
		return mtd_xds__refuse(why, whylen, "%s.abort: neither grpc_status nor http_status", where);
	}
	fi->abort = true;
	return fraction(a->percentage, &fi->abort_percent, where, why, whylen);
}

static int delay_of(const PbFault *m, struct mtd_cfg_fault_injection *fi, const char *where, char *why, size_t whylen)
{
	const Envoy__Extensions__Filters__Common__Fault__V3__FaultDelay *d = m->delay;

	if (d == NULL)
		return 0;
	switch (d->fault_delay_secifier_case) {
	case ENVOY__EXTENSIONS__FILTERS__COMMON__FAULT__V3__FAULT_DELAY__FAULT_DELAY_SECIFIER_FIXED_DELAY: {
		int64_t ms = mtd_xds__dur_ms(d->fixed_delay, -1);
		if (ms < 1 || ms > FAULT_DELAY_MAX_MS)
			return mtd_xds__refuse(why, whylen, "%s.delay.fixed_delay: out of range (1 ms..1 h)", where);
		fi->delay_ms = ms;
		break;
	}
	case ENVOY__EXTENSIONS__FILTERS__COMMON__FAULT__V3__FAULT_DELAY__FAULT_DELAY_SECIFIER_HEADER_DELAY:
		return mtd_xds__refuse(why, whylen,
		                       "%s.delay.header_delay is not supported (the delay comes from the config, "
		                       "never from a call's headers)",
		                       where);
	default:
		return mtd_xds__refuse(why, whylen, "%s.delay: no fixed_delay", where);
	}
	fi->delay = true;
	return fraction(d->percentage, &fi->delay_percent, where, why, whylen);
}

int mtd_xds__fault(const uint8_t *buf, size_t len, struct mtd_cfg_fault_injection *fi, const char *where, char *why,
                   size_t whylen)
{
	memset(fi, 0, sizeof(*fi));
	PbFault *m;
	int rc = mtd_xds__unpack(&envoy__extensions__filters__http__fault__v3__httpfault__descriptor, buf, len, where,
	                         &m, why, whylen);
	if (rc == -EBADMSG)
		return mtd_xds__refuse(why, whylen, "%s: not an HTTPFault (it does not decode)", where);
	if (rc != 0)
		return rc;
	for (size_t i = 0; i < sizeof(refused_fields) / sizeof(refused_fields[0]) && rc == 0; i++)
		for (unsigned k = 0; k < m->base.n_unknown_fields; k++)
			if (m->base.unknown_fields[k].tag == refused_fields[i].tag) {
				rc = mtd_xds__refuse(why, whylen, "%s.%s is not supported (%s)", where,
				                     refused_fields[i].name, refused_fields[i].why);
				break;
			}
	if (rc == 0)
		rc = abort_of(m, fi, where, why, whylen);
	if (rc == 0)
		rc = delay_of(m, fi, where, why, whylen);
	envoy__extensions__filters__http__fault__v3__httpfault__free_unpacked(m, &mtd_cfg__pb_allocator);
	if (rc != 0)
		memset(fi, 0, sizeof(*fi));
	return rc;
}

int mtd_xds__fault_override(const Google__Protobuf__Any *any, struct mtd_cfg_fault_injection *fi, const char *where,
                            char *why, size_t whylen)
{
	if (strcmp(any->type_url, MTD_XDS_TYPE_FAULT) == 0)
		return mtd_xds__fault(any->value.data, any->value.len, fi, where, why, whylen) == 0 ? 1 : -EINVAL;
	if (strcmp(any->type_url, MTD_XDS_TYPE_FILTER_CONFIG) != 0)
		return 0; /* another filter's: maitred runs none */
	Envoy__Config__Route__V3__FilterConfig *fc;
	int rc = mtd_xds__unpack(&envoy__config__route__v3__filter_config__descriptor, any->value.data, any->value.len,
	                         where, &fc, why, whylen);
	if (rc == -EBADMSG)
		return mtd_xds__refuse(why, whylen, "%s: not a FilterConfig (it does not decode)", where);
	if (rc != 0)
		return rc;
	if (fc->disabled) {
		/* The filter is off for these calls: no fault. */
		memset(fi, 0, sizeof(*fi));
		rc = 1;
	} else if (fc->config != NULL && strcmp(fc->config->type_url, MTD_XDS_TYPE_FAULT) == 0) {
		rc = mtd_xds__fault(fc->config->value.data, fc->config->value.len, fi, where, why, whylen) == 0
		             ? 1
		             : -EINVAL;
	}
	envoy__config__route__v3__filter_config__free_unpacked(fc, &mtd_cfg__pb_allocator);
	return rc;
}
