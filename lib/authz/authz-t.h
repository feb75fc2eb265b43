/* Inbound authorization's types (mesh mode): a policy is a
 * default and rules of principals x methods (Istio's AuthorizationPolicy,
 * linkerd's default policies). Built by lib/config from
 * Inbound.authorization, immutable once built. authz.h has the functions. */
#ifndef MTD_AUTHZ_T_H
#define MTD_AUTHZ_T_H

#include <stdbool.h>
#include <stddef.h>

enum mtd_authz_default {
	MTD_AUTHZ_DENY = 0,            /* only what a rule allows (the unset default) */
	MTD_AUTHZ_ALLOW_AUTHENTICATED, /* any caller with a verified certificate, identity or not */
	MTD_AUTHZ_ALLOW_ALL,           /* everyone, callers without an identity included */
};

/* One rule: it allows a call whose caller has an identity matching one of
 * principals and whose :path matches one of methods. An empty list
 * matches every identity (principals) or every method (methods); a caller
 * without an identity matches no rule. Patterns (validated at load, see
 * mtd_authz_principal_ok / mtd_authz_method_ok):
 *   principal  lib/identity's patterns: a URI or "dns:NAME", exact, or a
 *              prefix ending in '*' ("*" alone: any identity); a pattern
 *              matches identities of its own type only
 *   method     exact "/pkg.Service/Method", or a service's: "/pkg.Service/" then "*" */
struct mtd_authz_rule {
	char **principals;
	size_t n_principals;
	char **methods;
	size_t n_methods;
};

struct mtd_authz_policy {
	enum mtd_authz_default def;
	struct mtd_authz_rule *rules;
	size_t n_rules;
};

/* What decided a call (mtd_authz_decide). */
struct mtd_authz_decision {
	bool allowed;
	int rule; /* index of the rule that allowed it, or -1: the default decided */
};

#endif
