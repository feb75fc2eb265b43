/* x-forwarded-client-cert in Envoy's format (authz.h): what the app is told
 * about the caller. Pure: the digest comes from the caller's TLS library. */
#include "config.h"

#include <string.h>

#include "authz/authz.h"

static bool needs_quotes(const char *v)
{
	for (; *v; v++) {
		unsigned char c = (unsigned char)*v;
		if (c <= 0x20 || c == 0x7f || c == ',' || c == ';' || c == '=' || c == '"' || c == '\\')
			return true;
	}
	return false;
}

/* Append s (n bytes) at out[*len], counting what does not fit. */
static void put(char *out, size_t cap, size_t *len, const char *s, size_t n)
{
	if (*len < cap) {
		size_t k = cap - *len > n ? n : cap - *len;
		memcpy(out + *len, s, k);
	}
	*len += n;
}

static void pair(char *out, size_t cap, size_t *len, const char *key, const char *value)
{
	if (*len > 0)
		put(out, cap, len, ";", 1);
	put(out, cap, len, key, strlen(key));
	put(out, cap, len, "=", 1);
	if (!needs_quotes(value)) {
		put(out, cap, len, value, strlen(value));
		return;
	}
	put(out, cap, len, "\"", 1);
	for (const char *p = value; *p; p++) {
		if (*p == '"' || *p == '\\')
			put(out, cap, len, "\\", 1);
		put(out, cap, len, p, 1);
	}
	put(out, cap, len, "\"", 1);
}

size_t mtd_xfcc_format(char *out, size_t cap, const char *by, const char *hash_hex, const char *uri, const char *dns)
{
	size_t len = 0;
	if (by && by[0])
		pair(out, cap, &len, "By", by);
	pair(out, cap, &len, "Hash", hash_hex);
	if (uri && uri[0])
		pair(out, cap, &len, "URI", uri);
	if (dns && dns[0])
		pair(out, cap, &len, "DNS", dns);
	if (cap > 0)
		out[len < cap ? len : cap - 1] = '\0';
	return len;
}

bool mtd_xfcc_identity(const char *v, size_t n, const char **id, size_t *len, bool *dns_only)
{
	const char *dns = NULL;
	size_t dns_len = 0;
	size_t i = 0;
	while (i < n) {
		/* One key=value pair: up to the next ';' outside quotes. */
		size_t start = i;
		bool quoted = false;
		while (i < n && (quoted || (v[i] != ';' && v[i] != ','))) {
			if (v[i] == '\\' && quoted && i + 1 < n)
				i++;
			else if (v[i] == '"')
				quoted = !quoted;
			i++;
		}
		size_t plen = i - start;
		if (plen > 4 && memcmp(v + start, "URI=", 4) == 0) {
			*id = v + start + 4;
			*len = plen - 4;
			*dns_only = false;
			return true;
		}
		if (plen > 4 && memcmp(v + start, "DNS=", 4) == 0 && !dns) {
			dns = v + start + 4;
			dns_len = plen - 4;
		}
		if (i < n && v[i] == ',')
			break; /* ours is the only element */
		i++;
	}
	if (!dns)
		return false;
	*id = dns;
	*len = dns_len;
	*dns_only = true;
	return true;
}

void mtd_xfcc_hex(const unsigned char digest[32], char out[65])
{
	static const char hex[] = "0123456789abcdef";
	for (int i = 0; i < 32; i++) {
		out[2 * i] = hex[digest[i] >> 4];
		out[2 * i + 1] = hex[digest[i] & 15];
	}
	out[64] = '\0';
}

size_t mtd_xfcc_typed_identity(const char *v, size_t n, char *out, size_t cap)
{
	const char *id;
	size_t len;
	bool dns;
	if (cap == 0)
		return 0;
	out[0] = '\0';
	if (!mtd_xfcc_identity(v, n, &id, &len, &dns))
		return 0;
	size_t pre = dns ? 4 : 0;
	if (pre >= cap)
		return 0;
	memcpy(out, "dns:", pre);
	if (len > cap - 1 - pre)
		len = cap - 1 - pre;
	memcpy(out + pre, id, len);
	out[pre + len] = '\0';
	return pre + len;
}
