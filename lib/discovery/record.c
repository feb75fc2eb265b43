/* The registry record: proto3 JSON (through lib/config's descriptor walk)
 * or binary (protobuf-c) into a maitred.registry.v1.Endpoint message, then
 * one validation for both forms (record.h has the rules). */
#include <config.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/config-int.h"
#include "core/utf8.h"
#include "discovery/record.h"
#include "maitred/registry/v1/endpoint.pb-c.h"

typedef Maitred__Registry__V1__Endpoint PbRecord;

#define DAY_MS (86400 * INT64_C(1000))

static int refuse(char *why, size_t whylen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int refuse(char *why, size_t whylen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, whylen, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* NULL when s is fine, else what is wrong with it. */
static const char *bad_string(const char *s, size_t max, bool nonempty)
{
	size_t n = strlen(s);

	if (nonempty && n == 0)
		return "must not be empty";
	if (n > max)
		return "too long";
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return "contains a control character";
	/* The binary form's strings are bytes to protobuf-c; proto3 (and the
	 * JSON form, and the identities they are compared with) say UTF-8. */
	if (!mtd_utf8_valid(s, n))
		return "is not valid UTF-8";
	return NULL;
}

/* "a.b.c.d:port" or "[v6]:port", numeric only; canonical text into out. */
static int parse_address(const char *text, struct mtd_record *r, char *why, size_t whylen)
{
	char host[INET6_ADDRSTRLEN + 1], canon[INET6_ADDRSTRLEN + 32];
	const char *colon, *h = text;
	size_t hl;
	unsigned long port = 0;

	if (text[0] == '[') {
		const char *close = strchr(text, ']');

		if (close == NULL || close[1] != ':')
			return refuse(why, whylen, "address: \"%s\": expected \"[v6]:port\"", text);
		h = text + 1;
		hl = (size_t)(close - h);
		colon = close + 1;
	} else {
		colon = strrchr(text, ':');
		if (colon == NULL)
			return refuse(why, whylen, "address: \"%s\": expected \"ip:port\"", text);
		hl = (size_t)(colon - text);
	}
	if (hl == 0 || hl >= sizeof(host))
		return refuse(why, whylen, "address: \"%s\": bad host", text);
	memcpy(host, h, hl);
	host[hl] = '\0';
	if (colon[1] == '\0')
		return refuse(why, whylen, "address: \"%s\": missing port", text);
	for (const char *p = colon + 1; *p != '\0'; p++) {
		if (*p < '0' || *p > '9' || port > 65535)
			return refuse(why, whylen, "address: \"%s\": bad port", text);
		port = port * 10 + (unsigned long)(*p - '0');
	}
	if (port == 0 || port > 65535)
		return refuse(why, whylen, "address: \"%s\": port must be 1..65535", text);
	memset(&r->sa, 0, sizeof(r->sa));
	if (text[0] == '[') {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&r->sa;

		if (inet_pton(AF_INET6, host, &s6->sin6_addr) != 1)
			return refuse(why, whylen, "address: \"%s\": not an IPv6 literal", text);
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
		r->salen = sizeof(*s6);
		inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof(host));
		snprintf(canon, sizeof(canon), "[%s]:%lu", host, port);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&r->sa;

		if (inet_pton(AF_INET, host, &s4->sin_addr) != 1)
			return refuse(why, whylen,
			              "address: \"%s\": not an IPv4 literal (a record holds a numeric "
			              "address, not a name)",
			              text);
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)port);
		r->salen = sizeof(*s4);
		inet_ntop(AF_INET, &s4->sin_addr, host, sizeof(host));
		snprintf(canon, sizeof(canon), "%s:%lu", host, port);
	}
	r->address = mtd_cfg__strdup(canon);
	return r->address != NULL ? 0 : -ENOMEM;
}

static int meta_cmp(const void *a, const void *b)
{
	return strcmp(((const struct mtd_record_meta *)a)->key, ((const struct mtd_record_meta *)b)->key);
}

static int validate(const PbRecord *m, int64_t now_ms, struct mtd_record *r, char *why, size_t whylen)
{
	const char *bad;
	int rc;

	if (m->address == NULL || m->address[0] == '\0')
		return refuse(why, whylen, "address: required");
	if ((bad = bad_string(m->address, 64, true)) != NULL)
		return refuse(why, whylen, "address: %s", bad);
	if ((rc = parse_address(m->address, r, why, whylen)) != 0)
		return rc;
	r->weight = MTD_RECORD_DEFAULT_WEIGHT;
	if (m->weight != NULL) {
		if (m->weight->value > MTD_RECORD_MAX_WEIGHT)
			return refuse(why, whylen, "weight: %u is out of range 0..%d", (unsigned)m->weight->value,
			              MTD_RECORD_MAX_WEIGHT);
		r->weight = (int32_t)m->weight->value;
	}
	const char *zone = m->zone != NULL ? m->zone : "", *version = m->version != NULL ? m->version : "";
	if ((bad = bad_string(zone, MTD_RECORD_MAX_LABEL, false)) != NULL)
		return refuse(why, whylen, "zone: %s", bad);
	if ((bad = bad_string(version, MTD_RECORD_MAX_LABEL, false)) != NULL)
		return refuse(why, whylen, "version: %s", bad);
	const char *identity = m->identity != NULL ? m->identity : "";
	if ((bad = bad_string(identity, MTD_RECORD_MAX_IDENTITY, false)) != NULL)
		return refuse(why, whylen, "identity: %s", bad);
	if (m->n_metadata > MTD_RECORD_MAX_META)
		return refuse(why, whylen, "metadata: %zu entries, at most %d", m->n_metadata, MTD_RECORD_MAX_META);
	for (size_t i = 0; i < m->n_metadata; i++) {
		const char *k = m->metadata[i]->key != NULL ? m->metadata[i]->key : "";
		const char *v = m->metadata[i]->value != NULL ? m->metadata[i]->value : "";

		if ((bad = bad_string(k, MTD_RECORD_MAX_STRING, true)) != NULL)
			return refuse(why, whylen, "metadata: key \"%.64s\": %s", k, bad);
		if ((bad = bad_string(v, MTD_RECORD_MAX_STRING, false)) != NULL)
			return refuse(why, whylen, "metadata.%.64s: %s", k, bad);
	}
	if (m->start_time != NULL) {
		int64_t s = m->start_time->seconds;
		int32_t ns = m->start_time->nanos;

		if (ns < 0 || ns > 999999999 || s < -62135596800 || s > 253402300799)
			return refuse(why, whylen, "start_time: not a valid time");
		int64_t ms = s > 0 ? s * 1000 + ns / 1000000 : 0;
		if (ms <= 0)
			return refuse(why, whylen, "start_time: must be after 1970-01-01T00:00:00Z");
		if (ms > now_ms + DAY_MS)
			return refuse(why, whylen, "start_time: more than a day in the future");
		r->start_ms = ms;
	}
	r->zone = mtd_cfg__strdup(zone);
	r->version = mtd_cfg__strdup(version);
	r->identity = mtd_cfg__strdup(identity);
	if (r->zone == NULL || r->version == NULL || r->identity == NULL)
		return -ENOMEM;
	if (m->n_metadata == 0)
		return 0;
	r->metadata = mtd_cfg__calloc(m->n_metadata, sizeof(*r->metadata));
	if (r->metadata == NULL)
		return -ENOMEM;
	/* A key written twice on the wire: the last one wins (protobuf maps). */
	for (size_t i = m->n_metadata; i-- > 0;) {
		const char *k = m->metadata[i]->key, *v = m->metadata[i]->value != NULL ? m->metadata[i]->value : "";
		bool seen = false;

		for (size_t j = 0; j < r->n_metadata && !seen; j++)
			seen = strcmp(r->metadata[j].key, k) == 0;
		if (seen)
			continue;
		r->metadata[r->n_metadata].key = mtd_cfg__strdup(k);
		r->metadata[r->n_metadata].value = mtd_cfg__strdup(v);
		r->n_metadata++;
		if (r->metadata[r->n_metadata - 1].key == NULL || r->metadata[r->n_metadata - 1].value == NULL)
			return -ENOMEM;
	}
	qsort(r->metadata, r->n_metadata, sizeof(*r->metadata), meta_cmp);
	return 0;
}

int mtd_record_parse(const void *value, size_t len, int64_t now_ms, struct mtd_record *out, char *why, size_t whylen)
{
	const ProtobufCMessageDescriptor *desc = &maitred__registry__v1__endpoint__descriptor;
	const char *p = value;
	struct mtd_record r = {0};
	ProtobufCMessage *msg = NULL;
	size_t i = 0;
	int rc;

	if (len == 0)
		return refuse(why, whylen, "empty value");
	if (len > MTD_RECORD_MAX_BYTES)
		return refuse(why, whylen, "value of %zu bytes, at most %d", len, MTD_RECORD_MAX_BYTES);
	while (i < len && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r' || p[i] == '\n'))
		i++;
	if (i < len && p[i] == '{') {
		struct mtd_cfg__diag d;

		mtd_cfg__diag_init(&d, "value");
		rc = mtd_cfg__pbjson_load(p, len, true, desc, &d, &msg);
		if (rc == 0 && d.n_errs != 0) {
			/* The first error in the input is the one to fix first. */
			size_t first = 0;
			for (size_t k = 1; k < d.n_errs; k++)
				if (d.errs[k].at.line < d.errs[first].at.line ||
				    (d.errs[k].at.line == d.errs[first].at.line &&
				     d.errs[k].at.col < d.errs[first].at.col))
					first = k;
			snprintf(why, whylen, "%s", d.errs[first].text);
			rc = -EINVAL;
		} else if (rc == 0 && msg == NULL) {
			rc = refuse(why, whylen, "not JSON");
		}
		mtd_cfg__diag_fini(&d);
	} else {
		bool failed_before = mtd_cfg__alloc_failed();

		msg = protobuf_c_message_unpack(desc, &mtd_cfg__pb_allocator, len, value);
		if (msg != NULL)
			rc = 0;
		else if (!failed_before && mtd_cfg__alloc_failed()) /* protobuf-c says only NULL */
			rc = -ENOMEM;
		else
			rc = refuse(why, whylen, "neither JSON nor a valid serialized %s", desc->name);
	}
	if (rc == 0) {
		rc = validate((const PbRecord *)msg, now_ms, &r, why, whylen);
	}
	if (rc == -ENOMEM)
		snprintf(why, whylen, "out of memory");
	if (msg != NULL)
		protobuf_c_message_free_unpacked(msg, &mtd_cfg__pb_allocator);
	if (rc != 0) {
		mtd_record_clear(&r);
		return rc;
	}
	*out = r;
	return 0;
}

void mtd_record_clear(struct mtd_record *r)
{
	for (size_t i = 0; i < r->n_metadata; i++) {
		mtd_cfg__free(r->metadata[i].key);
		mtd_cfg__free(r->metadata[i].value);
	}
	mtd_cfg__free(r->metadata);
	mtd_cfg__free(r->address);
	mtd_cfg__free(r->zone);
	mtd_cfg__free(r->version);
	mtd_cfg__free(r->identity);
	memset(r, 0, sizeof(*r));
}

int mtd_record_format_json(const char *address, int32_t weight, int64_t start_ms, const char *identity, char *buf,
                           size_t size)
{
	char when[64] = "", id[2 * MTD_RECORD_MAX_IDENTITY + 20] = "";

	if (address == NULL || address[0] == '\0')
		return -EINVAL;
	if (identity != NULL && identity[0] != '\0') {
		if (bad_string(identity, MTD_RECORD_MAX_IDENTITY, false) != NULL)
			return -EINVAL;
		size_t k = (size_t)snprintf(id, sizeof(id), ", \"identity\": \"");
		for (const char *p = identity; *p; p++) {
			if (*p == '"' || *p == '\\')
				id[k++] = '\\';
			id[k++] = *p;
		}
		id[k++] = '"';
		id[k] = '\0';
	}
	if (start_ms > 0) {
		time_t t = (time_t)(start_ms / 1000);
		struct tm tm;

		if (gmtime_r(&t, &tm) != NULL) {
			size_t n = strftime(when, sizeof(when), ", \"start_time\": \"%Y-%m-%dT%H:%M:%S", &tm);
			snprintf(when + n, sizeof(when) - n, ".%03dZ\"", (int)(start_ms % 1000));
		}
	}
	return snprintf(buf, size, "{\"address\": \"%s\", \"weight\": %d%s%s}", address, (int)weight, when, id);
}
