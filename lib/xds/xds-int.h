/* Helpers lib/xds's translators share (not an API). */
#ifndef MTD_XDS_INT_H
#define MTD_XDS_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "google/protobuf/duration.pb-c.h"

/* Write the reason (printf) into why; returns -EINVAL. */
int mtd_xds__refuse(char *why, size_t whylen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A Duration in ms, in (0, 1 day]; absent: dflt; -1 when out of range. */
int64_t mtd_xds__dur_ms(const Google__Protobuf__Duration *d, int64_t dflt);
/* 1..MTD_XDS_NAME_MAX printable bytes. */
bool mtd_xds__name_ok(const char *s);

/* mtd_xds_resource_name for a Listener or a RouteConfiguration. */
int mtd_xds__route_resource_name(const char *type_url, const uint8_t *buf, size_t len, char *name, size_t cap);

#endif
