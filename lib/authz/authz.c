/* Inbound authorization: principals x methods, then the default (authz.h).
 * Matching is a few string compares per rule; policies are small (a
 * handful of rules), so a call walks them in order, as Istio's RBAC
 * filter does. */
#include "config.h"

#include <string.h>

#include "authz/authz.h"
#include "identity/identity.h"
#include "route/route.h"

bool mtd_authz_principal_match(const char *pattern, const char *identity)
{
	return mtd_identity_match(pattern, identity);
}

bool mtd_authz_method_match(const char *pattern, const char *path, size_t len)
{
	size_t n = strlen(pattern);
	if (n >= 2 && pattern[n - 1] == '*' && pattern[n - 2] == '/') {
		/* A service pattern ("/pkg.Service/" then "*"): that service's methods, any one (a name,
		 * no further '/': PROTOCOL-HTTP2's Path). */
		if (len < n || memcmp(pattern, path, n - 1) != 0)
			return false;
		return memchr(path + n - 1, '/', len - (n - 1)) == NULL;
	}
	return n == len && memcmp(pattern, path, len) == 0;
}

static bool rule_matches(const struct mtd_authz_rule *r, const char *identity, const char *path, size_t len)
{
	bool who = r->n_principals == 0;
	for (size_t i = 0; !who && i < r->n_principals; i++)
		who = mtd_authz_principal_match(r->principals[i], identity);
	if (!who)
		return false;
	if (r->n_methods == 0)
		return true;
	for (size_t i = 0; i < r->n_methods; i++)
		if (mtd_authz_method_match(r->methods[i], path, len))
			return true;
	return false;
}

struct mtd_authz_decision mtd_authz_decide(const struct mtd_authz_policy *p, bool authenticated, const char *identity,
                                           const char *path, size_t path_len)
{
	if (mtd_identity_type(identity) != MTD_IDENTITY_NONE)
		for (size_t i = 0; i < p->n_rules; i++)
			if (rule_matches(&p->rules[i], identity, path, path_len))
				return (struct mtd_authz_decision){.allowed = true, .rule = (int)i};
	switch (p->def) {
	case MTD_AUTHZ_ALLOW_ALL:
		return (struct mtd_authz_decision){.allowed = true, .rule = -1};
	case MTD_AUTHZ_ALLOW_AUTHENTICATED:
		return (struct mtd_authz_decision){.allowed = authenticated, .rule = -1};
	case MTD_AUTHZ_DENY:
		break;
	}
	return (struct mtd_authz_decision){.allowed = false, .rule = -1};
}

bool mtd_authz_principal_ok(const char *pattern, const char **why)
{
	return mtd_identity_pattern_ok(pattern, why);
}

bool mtd_authz_method_ok(const char *pattern, const char **why)
{
	size_t n = strlen(pattern);
	struct mtd_route_path rp;
	if (n >= 3 && pattern[0] == '/' && pattern[n - 1] == '*' && pattern[n - 2] == '/') {
		/* A service pattern: the service part must be a valid name. */
		char probe[512];
		if (n - 1 + 1 > sizeof(probe)) {
			*why = "too long";
			return false;
		}
		memcpy(probe, pattern, n - 1);
		probe[n - 1] = 'x';
		if (mtd_route_parse_path(probe, n, &rp) == 0 && memchr(pattern + 1, '*', n - 2) == NULL)
			return true;
	} else if (mtd_route_parse_path(pattern, n, &rp) == 0 && !memchr(pattern, '*', n)) {
		return true;
	}
	*why = "a method is \"/package.Service/Method\" or \"/package.Service/*\"";
	return false;
}

const char *mtd_authz_default_name(enum mtd_authz_default d)
{
	switch (d) {
	case MTD_AUTHZ_ALLOW_AUTHENTICATED:
		return "ALLOW_AUTHENTICATED";
	case MTD_AUTHZ_ALLOW_ALL:
		return "ALLOW_ALL";
	case MTD_AUTHZ_DENY:
		break;
	}
	return "DENY";
}
