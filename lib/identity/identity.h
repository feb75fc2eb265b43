/* Typed workload identities (mesh mode): what a certificate says a peer
 * is, in one spelling both directions use, inbound authorization (caller
 * -> principals) and secure naming (upstream -> server_identity,
 * FROM_REGISTRY's record, allowed_identities).
 *
 * An identity has a type, the kind of SAN it came from, and its text
 * says which:
 *   URI  the URI SAN itself ("spiffe://cluster.local/ns/shop/sa/cart"):
 *        a scheme, then ':'; never the scheme "dns"
 *   DNS  "dns:" then the DNS SAN ("dns:cart.shop.svc")
 * So a DNS SAN spelled "spiffe://..." is "dns:spiffe://..." and never
 * equals, nor matches a pattern for, the URI of the same letters.
 *
 * A certificate's identity (the X509-SVID rule, SPIFFE X509-SVID §2):
 * its URI SAN when it has exactly one; none when it has several; with no
 * URI SAN, its first DNS SAN; none without either. At most
 * MTD_IDENTITY_MAX bytes (SPIFFE's limit on an ID); a longer SAN, or one
 * holding a byte outside printable ASCII or a space, is no identity.
 *
 * Pure: no I/O, no allocation, any thread. */
#ifndef MTD_IDENTITY_H
#define MTD_IDENTITY_H

#include <stdbool.h>
#include <stddef.h>

#define MTD_IDENTITY_MAX 2048 /* bytes of the SAN (SPIFFE ID's limit) */
/* The typed text's longest, "dns:" included, and a buffer for it. */
#define MTD_IDENTITY_TEXT_MAX  (MTD_IDENTITY_MAX + 4)
#define MTD_IDENTITY_TEXT_SIZE (MTD_IDENTITY_TEXT_MAX + 1)

enum mtd_identity_type {
	MTD_IDENTITY_NONE = 0, /* no identity, or text that spells none */
	MTD_IDENTITY_URI,
	MTD_IDENTITY_DNS,
};

/* Why a certificate has no identity (0: it has one). */
enum mtd_identity_none {
	MTD_IDENTITY_HAS = 0,
	MTD_IDENTITY_NO_SAN,       /* neither a URI nor a DNS SAN */
	MTD_IDENTITY_SEVERAL_URIS, /* more than one URI SAN (X509-SVID: no identity) */
	MTD_IDENTITY_TOO_LONG,     /* the SAN is over MTD_IDENTITY_MAX bytes */
	MTD_IDENTITY_BAD_BYTES,    /* a NUL, space, control or non-ASCII byte */
	MTD_IDENTITY_NOT_A_URI,    /* a URI SAN without a scheme, or in the dns: scheme */
};

/* One SAN as the certificate lists it (a caller passes its URI and DNS
 * SANs only, in the certificate's order). p need not be NUL-terminated. */
struct mtd_san {
	enum mtd_identity_type type; /* URI or DNS */
	const char *p;
	size_t len;
};

/* The identity of a certificate whose SANs are sans[0..n): its typed text
 * into out (cap >= MTD_IDENTITY_TEXT_SIZE; "" when none), and why it has
 * none (MTD_IDENTITY_HAS when it has one). */
enum mtd_identity_none mtd_identity_of_sans(const struct mtd_san *sans, size_t n, char *out, size_t cap);
/* "no SAN", "several URI SANs", ...: for log lines. */
const char *mtd_identity_none_text(enum mtd_identity_none why);

/* The type a typed text spells: URI, DNS, or NONE (NULL, "", or not a
 * valid identity: see mtd_identity_ok). */
enum mtd_identity_type mtd_identity_type(const char *id);
/* Whether id is a valid typed identity (config, registry records); false
 * with *why (a static string) when not. */
bool mtd_identity_ok(const char *id, const char **why);
/* The SAN's own value: id without "dns:" (the XFCC DNS= element). */
const char *mtd_identity_value(const char *id);
/* Two typed identities are the same: same type, same value (a DNS name
 * compared without case, RFC 4343; a URI exactly). false when either is
 * none. */
bool mtd_identity_equal(const char *a, const char *b);

/* Patterns (authorization principals, allowed_identities):
 *   "*"            any identity, of either type
 *   "dns:NAME"     the DNS identity NAME (no case); "dns:PREFIX*" a prefix
 *   "URI"          that URI identity exactly; "URI-PREFIX*" a prefix
 *                  (a URI pattern starts with its scheme: "spiffe://...")
 * A pattern matches only identities of its type. Whether identity (a
 * typed text; NULL or "" is none, matched by nothing) matches pattern. */
bool mtd_identity_match(const char *pattern, const char *identity);
/* Config validation: whether a pattern is one mtd_identity_match
 * understands; false with *why (a static string) when not. */
bool mtd_identity_pattern_ok(const char *pattern, const char **why);

#endif
