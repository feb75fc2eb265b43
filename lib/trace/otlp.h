/* Spans to OTLP: an ExportTraceServiceRequest (protos/opentelemetry,
 * OpenTelemetry's field numbers) holding one ResourceSpans (the sidecar:
 * service.name and the resource attributes given) with one ScopeSpans
 * ("maitred") and the spans, serialized with protobuf-c. Pure; the
 * exporter thread calls it for each batch. */
#ifndef MTD_TRACE_OTLP_H
#define MTD_TRACE_OTLP_H

#include <stddef.h>
#include <stdint.h>

#include "trace/span.h"

struct mtd_otlp_resource {
	const char *service_name;
	const char *const *keys;   /* further string attributes, n of them */
	const char *const *values;
	size_t n;
	const char *scope_version; /* the instrumentation scope's version */
};

/* Serialize n spans. *out is malloc'd (the caller frees it); its length is
 * returned. 0 with *out NULL on out of memory (n == 0 gives a valid empty
 * request, not 0). */
size_t mtd_otlp_encode(const struct mtd_otlp_resource *res, const struct mtd_span *spans, size_t n,
                       uint8_t **out);

#endif
