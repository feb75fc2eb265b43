/* The helpers every section of the build shares (build-int.h): where a
 * field was written and its path, strings, durations, addresses, names
 * and bounded numbers. */
#include <config.h> /* autoconf (lib/config/config.h is the API) */

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/build-int.h"

static _Thread_local bool numeric_hosts_only;

void mtd_cfg__numeric_hosts_only(bool on)
{
	numeric_hosts_only = on;
}

struct mtd_cfg__mark mtd_cfg__at(struct builder *b, const void *msg, const char *field, const void *fallback)
{
	if (msg == NULL)
		return mtd_cfg__pos_get(b->d, fallback, 0);
	if (field == NULL)
		return mtd_cfg__pos_get(b->d, msg, 0);
	return mtd_cfg__pos_named(b->d, msg, field);
}

/* path + "." + leaf into buf (truncated if it must be: paths are short). */
const char *mtd_cfg__sub(char *buf, size_t size, const char *path, const char *leaf)
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

char *mtd_cfg__dup_or_oom(struct builder *b, const char *s)
{
	char *p = mtd_cfg__strdup(s);

	if (p == NULL)
		b->d->oom = true;
	return p;
}

/* ---- durations ----------------------------------------------------------- */

int64_t mtd_cfg__dur_ms(struct builder *b, const PbDuration *dur, int64_t def, enum zero_rule zero,
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

/* ---- addresses ----------------------------------------------------------- */

bool mtd_cfg__host_name_ok(const char *s, size_t n)
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
		if (!mtd_cfg__host_name_ok(h, hl)) {
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
int mtd_cfg__build_addr_as(struct builder *b, const char *text, struct mtd_cfg__mark where, const char *path,
                           struct mtd_cfg_addr *a, bool numeric)
{
	struct addrinfo hints, *res = NULL;
	char port[8];
	const char *why = NULL;
	int rc;

	a->text = mtd_cfg__dup_or_oom(b, text);
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
	if (res->ai_addrlen > sizeof(a->sa)) { /* neither AF_INET nor AF_INET6 */
		BERR(where, path, "\"%s\" is not an IP address", a->host);
		freeaddrinfo(res);
		return -1;
	}
	memcpy(&a->sa, res->ai_addr, res->ai_addrlen);
	a->salen = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

int mtd_cfg__build_addr(struct builder *b, const char *text, struct mtd_cfg__mark where, const char *path,
                        struct mtd_cfg_addr *a)
{
	return mtd_cfg__build_addr_as(b, text, where, path, a, false);
}

bool mtd_cfg__same_endpoint(const struct mtd_cfg_addr *x, const struct mtd_cfg_addr *y)
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

/* ---- names --------------------------------------------------------------- */

bool mtd_cfg__ident_ok(const char *s, size_t n)
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
bool mtd_cfg__service_name_ok(const char *s)
{
	const char *dot;

	for (;;) {
		dot = strchr(s, '.');
		if (!mtd_cfg__ident_ok(s, dot != NULL ? (size_t)(dot - s) : strlen(s)))
			return false;
		if (dot == NULL)
			return true;
		s = dot + 1;
	}
}

/* RFC 9110 §5.6.2 token characters (already lower-cased). */
bool mtd_cfg__header_name_ok(const char *s)
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

char *mtd_cfg__metadata_key(struct builder *b, const char *text, struct mtd_cfg__mark where, const char *path)
{
	char *name = mtd_cfg__dup_or_oom(b, text);
	if (name == NULL)
		return NULL;
	for (char *c = name; *c != '\0'; c++)
		*c = (char)tolower((unsigned char)*c);
	if (name[0] == ':')
		BERR(where, path, "\"%s\" is a pseudo-header; use a metadata key", text);
	else if (!mtd_cfg__header_name_ok(name))
		BERR(where, path, "\"%s\" is not a valid HTTP/2 field name (RFC 9110 §5.6.2)", text);
	return name;
}

/* ---- numbers ------------------------------------------------------------- */

uint32_t mtd_cfg__u32_limit(struct builder *b, uint32_t v, uint32_t def, uint32_t max, const void *m, const char *field,
                            const char *path)
{
	char p[256];

	if (v == 0)
		return def;
	if (v > max) {
		BERR(mtd_cfg__at(b, m, field, NULL), mtd_cfg__sub(p, sizeof(p), path, field),
		     "must be at most %u, got %u", (unsigned)max, (unsigned)v);
		return def;
	}
	return v;
}

/* A DoubleValue percent in 0..100, default 100. */
double mtd_cfg__percent_of(struct builder *b, const Google__Protobuf__DoubleValue *v, const void *m, const char *path)
{
	char p[256];

	if (v == NULL)
		return 100.0;
	if (!(v->value >= 0.0 && v->value <= 100.0)) {
		BERR(mtd_cfg__at(b, m, "percent", NULL), mtd_cfg__sub(p, sizeof(p), path, "percent"),
		     "must be in 0..100");
		return 100.0;
	}
	return v->value;
}
