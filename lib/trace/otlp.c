/* Spans to an OTLP ExportTraceServiceRequest: see otlp.h.
 *
 * The message tree is built over the spans' own bytes (protobuf-c packs
 * from pointers: nothing of the spans is copied before the pack), in three
 * arrays allocated per batch: the spans' messages, their attributes' pairs
 * and values, and the pointer lists protobuf-c wants. */
#include "config.h"

#include "trace/otlp.h"

#include <stdlib.h>
#include <string.h>

#include "opentelemetry/proto/collector/trace/v1/trace_service.pb-c.h"

typedef Opentelemetry__Proto__Common__V1__KeyValue KeyValue;
typedef Opentelemetry__Proto__Common__V1__AnyValue AnyValue;
typedef Opentelemetry__Proto__Trace__V1__Span Span;
typedef Opentelemetry__Proto__Trace__V1__Status Status;

/* protobuf-c's string fields are NUL-terminated char *: the span's text is
 * not, so each string is copied once into a per-batch arena, sized for
 * every span's whole text and a NUL per string (it cannot run out; were it
 * to, a NULL string packs as empty: proto3 skips it). */
struct arena {
	char *p;
	size_t used, cap;
};

static char *dup_n(struct arena *a, const char *s, size_t n)
{
	if (a->used + n + 1 > a->cap)
		return NULL;
	char *d = a->p + a->used;
	memcpy(d, s, n);
	d[n] = '\0';
	a->used += n + 1;
	return d;
}

static void str_attr(KeyValue *kv, AnyValue *v, const char *key, char *value)
{
	opentelemetry__proto__common__v1__key_value__init(kv);
	opentelemetry__proto__common__v1__any_value__init(v);
	kv->key = (char *)key;
	kv->value = v;
	v->value_case = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE;
	v->string_value = value;
}

size_t mtd_otlp_encode(const struct mtd_otlp_resource *res, const struct mtd_span *spans, size_t n,
                       uint8_t **out)
{
	*out = NULL;
	size_t n_res = 1 + res->n;
	size_t n_kv = n * MTD_SPAN_ATTRS + n_res;
	Span *sp = calloc(n ? n : 1, sizeof(*sp));
	Span **spp = calloc(n ? n : 1, sizeof(*spp));
	Status *st = calloc(n ? n : 1, sizeof(*st));
	KeyValue *kv = calloc(n_kv, sizeof(*kv));
	KeyValue **kvp = calloc(n_kv, sizeof(*kvp));
	AnyValue *av = calloc(n_kv, sizeof(*av));
	struct arena ar = {.cap = n * (MTD_SPAN_TEXT + 4 * MTD_SPAN_ATTRS + 4) + 1};
	ar.p = malloc(ar.cap);
	size_t len = 0;
	if (!sp || !spp || !st || !kv || !kvp || !av || !ar.p)
		goto out;

	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		const struct mtd_span *s = &spans[i];
		Span *m = &sp[i];
		opentelemetry__proto__trace__v1__span__init(m);
		m->trace_id.data = (uint8_t *)s->trace_id;
		m->trace_id.len = 16;
		m->span_id.data = (uint8_t *)s->span_id;
		m->span_id.len = 8;
		static const uint8_t zero[8];
		if (memcmp(s->parent_id, zero, 8) != 0) {
			m->parent_span_id.data = (uint8_t *)s->parent_id;
			m->parent_span_id.len = 8;
		}
		m->name = dup_n(&ar, mtd_span_text(s, s->name_off), s->name_len);
		m->trace_state = s->state_len ? dup_n(&ar, mtd_span_text(s, s->state_off), s->state_len) : NULL;
		m->kind = s->kind;
		m->start_time_unix_nano = (uint64_t)s->start_unix_ns;
		m->end_time_unix_nano = (uint64_t)s->end_unix_ns;
		m->flags = s->flags;
		m->dropped_attributes_count = s->dropped_attrs;
		opentelemetry__proto__trace__v1__status__init(&st[i]);
		if (s->error) {
			st[i].code = OPENTELEMETRY__PROTO__TRACE__V1__STATUS__STATUS_CODE__STATUS_CODE_ERROR;
			st[i].message = dup_n(&ar, mtd_span_text(s, s->status_off), s->status_len);
		}
		m->status = &st[i];
		m->attributes = &kvp[k];
		for (unsigned j = 0; j < s->n_attrs; j++) {
			const struct mtd_span_attr *a = &s->attr[j];
			KeyValue *p = &kv[k];
			AnyValue *v = &av[k];
			if (a->type == MTD_ATTR_STR) {
				str_attr(p, v, a->key, dup_n(&ar, mtd_span_text(s, a->off), a->len));
			} else {
				str_attr(p, v, a->key, NULL);
				if (a->type == MTD_ATTR_INT) {
					v->value_case = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_INT_VALUE;
					v->int_value = a->i;
				} else {
					v->value_case = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_BOOL_VALUE;
					v->bool_value = a->i != 0;
				}
			}
			kvp[k++] = p;
		}
		m->n_attributes = s->n_attrs;
		spp[i] = m;
	}

	KeyValue **res_kvp = &kvp[k];
	str_attr(&kv[k], &av[k], "service.name", (char *)res->service_name);
	kvp[k] = &kv[k];
	k++;
	for (size_t j = 0; j < res->n; j++, k++) {
		str_attr(&kv[k], &av[k], res->keys[j], (char *)res->values[j]);
		kvp[k] = &kv[k];
	}

	Opentelemetry__Proto__Common__V1__InstrumentationScope scope;
	opentelemetry__proto__common__v1__instrumentation_scope__init(&scope);
	static char scope_name[] = "maitred";
	scope.name = scope_name;
	scope.version = (char *)res->scope_version; /* NULL packs as empty */
	Opentelemetry__Proto__Trace__V1__ScopeSpans ss;
	opentelemetry__proto__trace__v1__scope_spans__init(&ss);
	ss.scope = &scope;
	ss.spans = spp;
	ss.n_spans = n;
	Opentelemetry__Proto__Trace__V1__ScopeSpans *ssp = &ss;
	Opentelemetry__Proto__Resource__V1__Resource resource;
	opentelemetry__proto__resource__v1__resource__init(&resource);
	resource.attributes = res_kvp;
	resource.n_attributes = n_res;
	Opentelemetry__Proto__Trace__V1__ResourceSpans rs;
	opentelemetry__proto__trace__v1__resource_spans__init(&rs);
	rs.resource = &resource;
	rs.scope_spans = &ssp;
	rs.n_scope_spans = 1;
	Opentelemetry__Proto__Trace__V1__ResourceSpans *rsp = &rs;
	Opentelemetry__Proto__Collector__Trace__V1__ExportTraceServiceRequest req;
	opentelemetry__proto__collector__trace__v1__export_trace_service_request__init(&req);
	req.resource_spans = &rsp;
	req.n_resource_spans = 1;

	len = opentelemetry__proto__collector__trace__v1__export_trace_service_request__get_packed_size(&req);
	*out = malloc(len ? len : 1);
	if (!*out) {
		len = 0;
		goto out;
	}
	opentelemetry__proto__collector__trace__v1__export_trace_service_request__pack(&req, *out);
out:
	free(sp);
	free(spp);
	free(st);
	free(kv);
	free(kvp);
	free(av);
	free(ar.p);
	return len;
}
