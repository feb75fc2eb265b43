/* Helpers lib/xds's translators share (not an API). */
#ifndef MTD_XDS_INT_H
#define MTD_XDS_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config-t.h"
#include "google/protobuf/any.pb-c.h"
#include "google/protobuf/duration.pb-c.h"

/* Write the reason (printf) into why; returns -EINVAL. */
int mtd_xds__refuse(char *why, size_t whylen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A Duration in ms, in (0, 1 day]; absent: dflt; -1 when out of range. */
int64_t mtd_xds__dur_ms(const Google__Protobuf__Duration *d, int64_t dflt);
/* 1..MTD_XDS_NAME_MAX printable bytes. */
bool mtd_xds__name_ok(const char *s);

/* An HTTPFault (the fault filter's config, or an override of it) into
 * fi; where names it in the refusal. 0 or -EINVAL (fi cleared). */
int mtd_xds__fault(const uint8_t *buf, size_t len, struct mtd_cfg_fault_injection *fi, const char *where, char *why,
                   size_t whylen);
/* An entry of typed_per_filter_config: an HTTPFault, or a FilterConfig
 * wrapping one (disabled: no fault), into fi: 1; another filter's
 * config: 0 (nothing); a bad one: -EINVAL. */
int mtd_xds__fault_override(const Google__Protobuf__Any *any, struct mtd_cfg_fault_injection *fi, const char *where,
                            char *why, size_t whylen);

/* mtd_xds_resource_name for a Listener or a RouteConfiguration. */
int mtd_xds__route_resource_name(const char *type_url, const uint8_t *buf, size_t len, char *name, size_t cap);

#endif
