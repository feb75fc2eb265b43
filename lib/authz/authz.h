/* Inbound authorization (authz.c) and the x-forwarded-client-cert header
 * (xfcc.c): pure, no I/O, no allocation on the call path. Any thread. */
#ifndef MTD_AUTHZ_H
#define MTD_AUTHZ_H

#include <stdbool.h>
#include <stddef.h>

#include "authz/authz-t.h"

/* The decision for a call of `path` (path_len bytes, the request's :path)
 * by a caller that presented a verified certificate (authenticated) whose
 * identity is `identity` (lib/identity's typed text; NULL or "": none, a
 * certificate without a usable SAN or no certificate): the first rule that
 * matches allows it (rules in order), else p->def decides.
 * ALLOW_AUTHENTICATED allows any authenticated caller, with an identity
 * or not; rules need an identity. */
struct mtd_authz_decision mtd_authz_decide(const struct mtd_authz_policy *p, bool authenticated, const char *identity,
                                           const char *path, size_t path_len);

/* One principal pattern against a typed identity (both NUL-terminated):
 * lib/identity's mtd_identity_match. */
bool mtd_authz_principal_match(const char *pattern, const char *identity);
/* One method pattern against a :path of len bytes. */
bool mtd_authz_method_match(const char *pattern, const char *path, size_t len);

/* Config validation: whether a pattern is one the matchers understand
 * (principals: mtd_identity_pattern_ok);
 * false with *why (a static string) when not. */
bool mtd_authz_principal_ok(const char *pattern, const char **why);
bool mtd_authz_method_ok(const char *pattern, const char **why);

/* The name of a default ("DENY", ...), for messages. */
const char *mtd_authz_default_name(enum mtd_authz_default d);

/* ---- x-forwarded-client-cert (Envoy's format) ---------------------------
 *
 * What the app receives about the caller, one element:
 *   By=<this listener's own URI SAN>;Hash=<sha256 hex of the caller's DER
 *   certificate>;URI=<the caller's URI SAN>   (or DNS=<its DNS SAN>)
 * A value holding one of , ; = " or a space or control byte is quoted,
 * '"' and '\' escaped with '\' (Envoy's rule for Subject). by, uri and dns
 * may be NULL (left out); hash_hex must be set. */
#define MTD_XFCC_HEADER "x-forwarded-client-cert"

/* Writes the element into out (NUL-terminated) and returns its length, or
 * returns the length it needs (>= cap) and writes nothing useful, as
 * snprintf does. */
size_t mtd_xfcc_format(char *out, size_t cap, const char *by, const char *hash_hex, const char *uri, const char *dns);

/* The caller identity an element written by mtd_xfcc_format names (its
 * URI=, else its DNS= value, quotes left in place if it had any): *id and
 * *len point into v, *dns_only says it is a DNS identity's name (whose
 * typed text is "dns:" and the name, lib/identity). false when it names
 * none. */
bool mtd_xfcc_identity(const char *v, size_t n, const char **id, size_t *len, bool *dns_only);
/* The same identity as its typed text ("spiffe://...", or "dns:" and the
 * name) into out (cap bytes, NUL-terminated, cut to fit): its length, 0
 * when v names none. */
size_t mtd_xfcc_typed_identity(const char *v, size_t n, char *out, size_t cap);

/* The sha256 hex (64 characters + NUL) of len bytes of DER, into out[65]:
 * a caller hashes with its own library (the sidecar: transport.c), this
 * only spells the digest. */
void mtd_xfcc_hex(const unsigned char digest[32], char out[65]);

#endif
