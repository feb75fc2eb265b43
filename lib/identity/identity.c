/* Typed workload identities (identity.h). */
#include "config.h"

#include <string.h>
#include <strings.h>

#include "identity/identity.h"

#define DNS_PREFIX     "dns:"
#define DNS_PREFIX_LEN 4

/* Printable ASCII without the space: what a URI or a DNS name is made of. */
static bool plain_bytes(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)p[i] <= 0x20 || (unsigned char)p[i] >= 0x7f)
			return false;
	return true;
}

static bool is_dns_text(const char *p, size_t n)
{
	return n >= DNS_PREFIX_LEN && strncasecmp(p, DNS_PREFIX, DNS_PREFIX_LEN) == 0;
}

static bool is_alpha(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* p starts with a URI scheme and its ':' (RFC 3986 §3.1: ALPHA *( ALPHA /
 * DIGIT / "+" / "-" / "." ) ":"), and that scheme is not "dns" (whose
 * text would read as a DNS identity). */
static bool uri_scheme_ok(const char *p, size_t n)
{
	if (n == 0 || !is_alpha(p[0]))
		return false;
	for (size_t i = 1; i < n; i++) {
		char c = p[i];
		if (c == ':')
			return !is_dns_text(p, n);
		if (!is_alpha(c) && !(c >= '0' && c <= '9') && c != '+' && c != '-' && c != '.')
			return false;
	}
	return false;
}

enum mtd_identity_none mtd_identity_of_sans(const struct mtd_san *sans, size_t n, char *out, size_t cap)
{
	const struct mtd_san *uri = NULL, *dns = NULL;
	size_t n_uri = 0;
	out[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		if (sans[i].type == MTD_IDENTITY_URI && n_uri++ == 0)
			uri = &sans[i];
		else if (sans[i].type == MTD_IDENTITY_DNS && !dns)
			dns = &sans[i];
	}
	if (n_uri > 1)
		return MTD_IDENTITY_SEVERAL_URIS;
	const struct mtd_san *s = uri ? uri : dns;
	if (!s)
		return MTD_IDENTITY_NO_SAN;
	if (s->len > MTD_IDENTITY_MAX)
		return MTD_IDENTITY_TOO_LONG;
	if (s->len == 0 || !plain_bytes(s->p, s->len))
		return MTD_IDENTITY_BAD_BYTES;
	if (s == uri && !uri_scheme_ok(s->p, s->len))
		return MTD_IDENTITY_NOT_A_URI;
	size_t pre = s == uri ? 0 : DNS_PREFIX_LEN;
	if (cap < pre + s->len + 1)
		return MTD_IDENTITY_TOO_LONG; /* a caller's buffer below MTD_IDENTITY_TEXT_SIZE */
	memcpy(out, DNS_PREFIX, pre);
	memcpy(out + pre, s->p, s->len);
	out[pre + s->len] = '\0';
	return MTD_IDENTITY_HAS;
}

const char *mtd_identity_none_text(enum mtd_identity_none why)
{
	switch (why) {
	case MTD_IDENTITY_HAS:
		return "has an identity";
	case MTD_IDENTITY_NO_SAN:
		return "no URI or DNS SAN";
	case MTD_IDENTITY_SEVERAL_URIS:
		return "several URI SANs (an X509-SVID has exactly one)";
	case MTD_IDENTITY_TOO_LONG:
		return "a SAN longer than 2048 bytes";
	case MTD_IDENTITY_BAD_BYTES:
		return "a SAN with a space, control or non-ASCII byte";
	case MTD_IDENTITY_NOT_A_URI:
		return "a URI SAN without a scheme, or in the dns: scheme";
	}
	return "no identity";
}

bool mtd_identity_ok(const char *id, const char **why)
{
	size_t n = id ? strlen(id) : 0;
	if (n == 0) {
		*why = "empty";
		return false;
	}
	if (!plain_bytes(id, n)) {
		*why = "an identity has no space, control or non-ASCII byte";
		return false;
	}
	if (is_dns_text(id, n)) {
		if (n == DNS_PREFIX_LEN) {
			*why = "\"dns:\" without a name";
			return false;
		}
		if (n - DNS_PREFIX_LEN > MTD_IDENTITY_MAX) {
			*why = "longer than 2048 bytes";
			return false;
		}
		return true;
	}
	if (!uri_scheme_ok(id, n)) {
		*why = "an identity is a URI SAN (\"spiffe://trust.domain/path\") or \"dns:\" and a DNS SAN";
		return false;
	}
	if (n > MTD_IDENTITY_MAX) {
		*why = "longer than 2048 bytes";
		return false;
	}
	return true;
}

enum mtd_identity_type mtd_identity_type(const char *id)
{
	const char *why;
	if (!mtd_identity_ok(id, &why))
		return MTD_IDENTITY_NONE;
	return is_dns_text(id, strlen(id)) ? MTD_IDENTITY_DNS : MTD_IDENTITY_URI;
}

const char *mtd_identity_value(const char *id)
{
	return id && is_dns_text(id, strlen(id)) ? id + DNS_PREFIX_LEN : id;
}

bool mtd_identity_equal(const char *a, const char *b)
{
	enum mtd_identity_type t = mtd_identity_type(a);
	if (t == MTD_IDENTITY_NONE || t != mtd_identity_type(b))
		return false;
	if (t == MTD_IDENTITY_DNS)
		return strcasecmp(a + DNS_PREFIX_LEN, b + DNS_PREFIX_LEN) == 0;
	return strcmp(a, b) == 0;
}

/* value (NUL-terminated) against pat (n bytes, maybe ending in '*'). */
static bool value_match(const char *pat, size_t n, const char *value, bool nocase)
{
	if (n > 0 && pat[n - 1] == '*')
		return (nocase ? strncasecmp(pat, value, n - 1) : strncmp(pat, value, n - 1)) == 0;
	return strlen(value) == n && (nocase ? strncasecmp(pat, value, n) : strncmp(pat, value, n)) == 0;
}

bool mtd_identity_match(const char *pattern, const char *identity)
{
	enum mtd_identity_type t = mtd_identity_type(identity);
	size_t n = strlen(pattern);
	if (t == MTD_IDENTITY_NONE)
		return false;
	if (strcmp(pattern, "*") == 0)
		return true;
	if (is_dns_text(pattern, n))
		return t == MTD_IDENTITY_DNS &&
		       value_match(pattern + DNS_PREFIX_LEN, n - DNS_PREFIX_LEN, identity + DNS_PREFIX_LEN, true);
	return t == MTD_IDENTITY_URI && value_match(pattern, n, identity, false);
}

bool mtd_identity_pattern_ok(const char *pattern, const char **why)
{
	size_t n = strlen(pattern);
	if (n == 0) {
		*why = "an empty principal matches nobody (\"*\" is any identity)";
		return false;
	}
	if (!plain_bytes(pattern, n)) {
		*why = "a principal has no space or control byte (a URI or DNS SAN)";
		return false;
	}
	const char *star = memchr(pattern, '*', n);
	if (star && star != pattern + n - 1) {
		*why = "'*' may only end a principal (a prefix)";
		return false;
	}
	if (n == 1 && star)
		return true;
	if (n > MTD_IDENTITY_TEXT_MAX) {
		*why = "longer than an identity may be (2048 bytes)";
		return false;
	}
	if (is_dns_text(pattern, n)) {
		if (n == DNS_PREFIX_LEN) {
			*why = "\"dns:\" without a name (\"dns:*\" is any DNS identity)";
			return false;
		}
		return true;
	}
	/* A URI pattern names its scheme before any '*': "spiffe*" would
	 * silently match nothing a reader expects. */
	if (!uri_scheme_ok(pattern, star ? n - 1 : n)) {
		*why = "a principal is a URI (\"spiffe://...\"), \"dns:\" and a DNS name, or a prefix of one ending "
		       "in '*'";
		return false;
	}
	return true;
}
