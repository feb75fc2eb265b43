/* tracing: the OTLP export target (endpoint URL, TLS, headers, timeout),
 * the sampling share, and the services' and methods' tracing.sample. */
#include "config.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/build-int.h"

#define TRACE_SAMPLE_DEFAULT 0.01
#define OTLP_PORT_DEFAULT    4318
#define OTLP_PATH_DEFAULT    "/v1/traces"
#define OTLP_TIMEOUT_MAX_MS  60000
#define OTLP_HEADERS_MAX     32

typedef Maitred__Config__V1__Otlp PbOtlp;

/* A value in [0, 1] from a DoubleValue; def when unset or refused. */
static double share(struct builder *b, const Google__Protobuf__DoubleValue *v, const void *m, const char *path,
                    double def)
{
	if (v == NULL)
		return def;
	if (!(v->value >= 0 && v->value <= 1)) { /* NaN too */
		BERR(mtd_cfg__at(b, m, "sample", NULL), path, "must be in [0, 1] (got %g)", v->value);
		return def;
	}
	return v->value;
}

/* "http[s]://HOST[:PORT][/PATH]" into t. false with the error recorded. */
static bool parse_endpoint(struct builder *b, const PbOtlp *m, const char *path, struct mtd_cfg_tracing *t)
{
	const char *u = m->endpoint, *rest;
	struct mtd_cfg__mark at = mtd_cfg__at(b, m, "endpoint", NULL);

	for (const char *p = u; *p; p++)
		if ((unsigned char)*p <= ' ' || *p == 0x7f) {
			BERR(at, path, "\"%s\" has a space or a control character", u);
			return false;
		}
	if (strncmp(u, "http://", 7) == 0) {
		rest = u + 7;
	} else if (strncmp(u, "https://", 8) == 0) {
		rest = u + 8;
		t->https = true;
	} else {
		BERR(at, path, "\"%s\" must start with http:// or https:// (OTLP/HTTP, e.g. "
		     "\"http://127.0.0.1:4318/v1/traces\")", u);
		return false;
	}
	size_t auth_len = strcspn(rest, "/?#");
	const char *tail = rest + auth_len;
	if (memchr(rest, '@', auth_len) != NULL) {
		BERR(at, path, "\"%s\": credentials in the URL are not supported (use otlp.headers)", u);
		return false;
	}
	const char *host = rest, *port = NULL;
	size_t host_len;
	if (auth_len > 0 && rest[0] == '[') {
		const char *close = memchr(rest, ']', auth_len);
		if (close == NULL) {
			BERR(at, path, "\"%s\": an IPv6 address needs its closing ']'", u);
			return false;
		}
		host = rest + 1;
		host_len = (size_t)(close - host);
		if (close + 1 < tail) {
			if (close[1] != ':') {
				BERR(at, path, "\"%s\": expected ':PORT' after the address", u);
				return false;
			}
			port = close + 2;
		}
	} else {
		const char *colon = memchr(rest, ':', auth_len);
		host_len = colon ? (size_t)(colon - rest) : auth_len;
		if (colon)
			port = colon + 1;
	}
	if (host_len == 0 || host_len > HOST_NAME_TEXT_MAX ||
	    (rest[0] != '[' && !mtd_cfg__host_name_ok(host, host_len))) {
		BERR(at, path, "\"%s\": the host must be a name or an IP address", u);
		return false;
	}
	if (rest[0] == '[')
		for (size_t i = 0; i < host_len; i++)
			if (!isxdigit((unsigned char)host[i]) && host[i] != ':' && host[i] != '.') {
				BERR(at, path, "\"%s\": not an IPv6 address between the brackets", u);
				return false;
			}
	t->port = OTLP_PORT_DEFAULT;
	if (port != NULL) {
		unsigned long v = 0;
		size_t n = (size_t)(tail - port);
		if (n == 0 || n > 5)
			v = 0;
		else
			for (size_t i = 0; i < n; i++)
				v = isdigit((unsigned char)port[i]) ? v * 10 + (unsigned long)(port[i] - '0') : 0x10000;
		if (v == 0 || v > 65535) {
			BERR(at, path, "\"%s\": the port must be in 1..65535", u);
			return false;
		}
		t->port = (uint16_t)v;
	}
	if (*tail == '#') {
		BERR(at, path, "\"%s\": a fragment has no meaning here", u);
		return false;
	}
	t->host = mtd_cfg__calloc(1, host_len + 1);
	t->path = mtd_cfg__dup_or_oom(b, *tail == '\0' ? OTLP_PATH_DEFAULT : tail);
	if (t->host == NULL || t->path == NULL) {
		b->d->oom = true;
		return false;
	}
	memcpy(t->host, host, host_len);
	if (t->path[0] == '?') { /* a query without a path: the default path, then it */
		char *p = mtd_cfg__calloc(1, strlen(OTLP_PATH_DEFAULT) + strlen(t->path) + 1);
		if (p == NULL) {
			b->d->oom = true;
			return false;
		}
		strcpy(p, OTLP_PATH_DEFAULT);
		strcat(p, t->path);
		mtd_cfg__free(t->path);
		t->path = p;
	}
	return true;
}

static int header_cmp(const void *x, const void *y)
{
	const Maitred__Config__V1__Otlp__HeadersEntry *const *a = x, *const *c = y;
	return strcasecmp((*a)->key, (*c)->key);
}

static void build_headers(struct builder *b, const PbOtlp *m, const char *path, struct mtd_cfg_tracing *t)
{
	static const char *const ours[] = {"content-type", "content-length", "host", "transfer-encoding",
	                                   "connection", "te", "upgrade", "expect"};
	char p[256];

	if (m->n_headers == 0)
		return;
	if (m->n_headers > OTLP_HEADERS_MAX) {
		BERR(mtd_cfg__at(b, m, "headers", NULL), mtd_cfg__sub(p, sizeof(p), path, "headers"),
		     "at most %d headers, got %zu", OTLP_HEADERS_MAX, m->n_headers);
		return;
	}
	Maitred__Config__V1__Otlp__HeadersEntry **sorted = mtd_cfg__calloc(m->n_headers, sizeof(*sorted));
	t->header_names = mtd_cfg__calloc(m->n_headers, sizeof(char *));
	t->header_values = mtd_cfg__calloc(m->n_headers, sizeof(char *));
	if (sorted == NULL || t->header_names == NULL || t->header_values == NULL) {
		mtd_cfg__free(sorted);
		b->d->oom = true;
		return;
	}
	memcpy(sorted, m->headers, m->n_headers * sizeof(*sorted));
	qsort(sorted, m->n_headers, sizeof(*sorted), header_cmp);
	for (size_t i = 0; i < m->n_headers; i++) {
		const Maitred__Config__V1__Otlp__HeadersEntry *e = sorted[i];
		char hp[256];
		snprintf(hp, sizeof(hp), "%s.headers[\"%s\"]", path, e->key);
		char *name = mtd_cfg__dup_or_oom(b, e->key);
		if (name == NULL)
			break;
		for (char *c = name; *c; c++)
			*c = (char)tolower((unsigned char)*c);
		t->header_names[t->n_headers] = name;
		t->header_values[t->n_headers] = mtd_cfg__dup_or_oom(b, e->value);
		t->n_headers++;
		if (t->header_values[t->n_headers - 1] == NULL)
			break;
		if (!mtd_cfg__header_name_ok(name)) {
			BERR(mtd_cfg__at(b, e, NULL, m), hp, "\"%s\" is not an HTTP header name", e->key);
			continue;
		}
		for (size_t k = 0; k < sizeof(ours) / sizeof(ours[0]); k++)
			if (strcmp(name, ours[k]) == 0)
				BERR(mtd_cfg__at(b, e, NULL, m), hp, "\"%s\" is set by maitred itself", name);
		for (const char *c = e->value; *c; c++)
			if ((unsigned char)*c < ' ' && *c != '\t') {
				BERR(mtd_cfg__at(b, e, NULL, m), hp, "the value has a control character (a line break?)");
				break;
			}
		if (i > 0 && strcmp(name, t->header_names[t->n_headers - 2]) == 0)
			BERR(mtd_cfg__at(b, e, NULL, m), hp, "written twice (header names ignore case)");
	}
	mtd_cfg__free(sorted);
}

struct mtd_cfg_tracing *mtd_cfg__build_tracing(struct builder *b, const PbTracing *m)
{
	char p[256];

	if (m == NULL)
		return NULL;
	struct mtd_cfg_tracing *t = mtd_cfg__calloc(1, sizeof(*t));
	if (t == NULL) {
		b->d->oom = true;
		return NULL;
	}
	t->sample = share(b, m->sample, m, "tracing.sample", TRACE_SAMPLE_DEFAULT);
	t->service_name = mtd_cfg__dup_or_oom(b, m->service_name[0] != '\0' ? m->service_name
	                                      : b->node_id != NULL          ? b->node_id
	                                                                    : "maitred");
	t->timeout_ms = 5000;
	const PbOtlp *o = m->otlp;
	if (o == NULL || o->endpoint[0] == '\0') {
		BERR(mtd_cfg__at(b, o ? (const void *)o : (const void *)m, o ? "endpoint" : NULL, m),
		     "tracing.otlp.endpoint", "is required (e.g. \"http://127.0.0.1:4318/v1/traces\")");
		return t;
	}
	t->endpoint = mtd_cfg__dup_or_oom(b, o->endpoint);
	bool ok = parse_endpoint(b, o, "tracing.otlp.endpoint", t);
	if (o->tls != NULL) {
		if (ok && !t->https)
			BERR(mtd_cfg__at(b, o, "tls", NULL), "tracing.otlp.tls",
			     "is for an https:// endpoint; \"%s\" is plain http", o->endpoint);
		else
			t->tls = mtd_cfg__build_tls(b, o->tls, "tracing.otlp.tls");
		if (t->tls != NULL && t->tls->server_identity != NULL)
			BERR(mtd_cfg__at(b, o->tls, "server_identity", NULL), "tracing.otlp.tls.server_identity",
			     "is for upstreams; the collector is checked by server_name");
	} else if (ok && t->https) {
		BERR(mtd_cfg__at(b, o, "endpoint", NULL), "tracing.otlp.tls",
		     "is required for an https:// endpoint (at least ca_file, the CA that signed the collector's "
		     "certificate)");
	}
	build_headers(b, o, "tracing.otlp", t);
	t->timeout_ms = mtd_cfg__dur_ms(b, o->timeout, 5000, ZERO_IS_DEFAULT, mtd_cfg__at(b, o, "timeout", NULL),
	                                mtd_cfg__sub(p, sizeof(p), "tracing.otlp", "timeout"));
	if (t->timeout_ms > OTLP_TIMEOUT_MAX_MS) {
		BERR(mtd_cfg__at(b, o, "timeout", NULL), "tracing.otlp.timeout", "must be at most 60s");
		t->timeout_ms = OTLP_TIMEOUT_MAX_MS;
	}
	return t;
}

double mtd_cfg__trace_sample(struct builder *b, const PbTracingOverride *m, double inherited, const char *path)
{
	char p[256];

	if (m == NULL)
		return inherited;
	if (b->tracing == NULL) {
		BERR(mtd_cfg__at(b, m, NULL, NULL), path,
		     "needs the top-level tracing block (where spans go: tracing.otlp.endpoint)");
		return 0;
	}
	return share(b, m->sample, m, mtd_cfg__sub(p, sizeof(p), path, "sample"), inherited);
}
