/* A call's trace: see trace.h. */
#include "config.h"

#include "sidecar/call/trace.h"

#include <string.h>

#include <nghttp2/nghttp2.h>

#include "authz/authz.h"
#include "core/clock.h"
#include "fault/fault.h"
#include "grpc/grpc.h"
#include "lb/lb-t.h"
#include "sidecar/call/call-t.h"
#include "sidecar/call/headers.h"
#include "sidecar/control/runtime-t.h"
#include "sidecar/call/mode/mode.h" /* mtd_attempt_status_of */
#include "sidecar/ops/metrics.h"
#include "sidecar/ops/trace_export.h"
#include "sidecar/worker-t.h"
#include "trace/siphash.h"
#include "trace/span.h"

static uint8_t key[MTD_SIPHASH_KEY_LEN];

void mtd_call_trace_key(const uint8_t k[MTD_SIPHASH_KEY_LEN])
{
	memcpy(key, k, sizeof(key));
}

/* An id of the call, 8 bytes, never zero: SipHash-2-4 under the process's
 * key (W3C Trace Context level 2: an id's random part unpredictable) of
 * what identifies the call and which of its ids this is (salt). A
 * worker's calls start at distinct ns (turn.h mtd_turn_call_start_ns),
 * even two of one turn in one reused block; workers differ by id, and two
 * workers' calls may start at the same ns: (start, worker) is the call's
 * alone, and the message, (start, salt, worker), is one id's alone. Two
 * distinct messages' hashes meet by chance only, as two random ids would:
 * 2^-64 for two span ids, 2^-128 for two trace ids. (Background calls,
 * which start elsewhere, have no ids: mtd_call_trace_of.) 18 bytes: two
 * words and a tail, three compressions. */
_Static_assert(MTD_CFG_WORKERS_MAX <= UINT16_MAX + 1u, "a worker id fits in 16 bits");
static void derive(uint8_t out[8], const struct mtd_call *call, uint64_t salt)
{
	uint64_t start = (uint64_t)call->start_ns;
	uint16_t worker = (uint16_t)call->w->id;
	uint8_t m[8 + 8 + 2];
	memcpy(m, &start, 8); /* host order: the message is this process's only */
	memcpy(m + 8, &salt, 8);
	memcpy(m + 16, &worker, 2);
	mtd_trace_id8(out, mtd_siphash24(key, m, sizeof(m)));
}

static const struct mtd_runtime *rt_of(const struct mtd_call *call)
{
	return call->hold ? call->hold->rt : call->w->rt;
}

static double sample_of(const struct mtd_call *call, const struct mtd_runtime *rt)
{
	if (call->method)
		return call->method->cfg->trace_sample;
	if (call->svc)
		return call->svc->cfg->local->trace_sample;
	return rt->cfg->tracing ? rt->cfg->tracing->sample : 0;
}

/* The incoming tracestate into t->state: one field as it came; several
 * joined with "," into t->joined, as one list value. Left NULL when the
 * whole is not well formed or longer than MTD_TRACESTATE_MAX (the
 * spec's choice: dropped, never cut). */
static void read_state(const struct mtd_call *call, struct mtd_call_trace *t)
{
	const uint8_t *first = NULL;
	size_t first_len = 0, n = 0;
	unsigned fields = 0;
	nghttp2_nv f;
	for (uint32_t off = 0; mtd_headers_next(&call->req_hdrs, &off, &f);) {
		if (f.namelen != 10 || memcmp(f.name, "tracestate", 10) != 0)
			continue;
		/* A field's own spaces are no part of the list (RFC 9110 §5.5):
		 * joined, they would end a header value, which an upstream may
		 * refuse; an empty field adds no member. */
		while (f.valuelen > 0 && (f.value[0] == ' ' || f.value[0] == '\t')) {
			f.value++;
			f.valuelen--;
		}
		while (f.valuelen > 0 && (f.value[f.valuelen - 1] == ' ' || f.value[f.valuelen - 1] == '\t'))
			f.valuelen--;
		if (f.valuelen == 0)
			continue;
		if (++fields == 1) {
			first = f.value;
			first_len = f.valuelen;
			continue;
		}
		if (fields == 2) {
			if (first_len > sizeof(t->joined))
				return;
			memcpy(t->joined, first, first_len);
			n = first_len;
		}
		if (n + 1 + f.valuelen > sizeof(t->joined))
			return;
		t->joined[n++] = ',';
		memcpy(t->joined + n, f.value, f.valuelen);
		n += f.valuelen;
	}
	const uint8_t *v = fields > 1 ? (const uint8_t *)t->joined : first;
	size_t len = fields > 1 ? n : first_len;
	if (v && mtd_tracestate_valid((const char *)v, len)) {
		t->state = v;
		t->state_len = len;
	}
}

bool mtd_call_trace_of(const struct mtd_call *call, struct mtd_call_trace *t)
{
	const struct mtd_runtime *rt = rt_of(call);
	/* A background call (a mirror copy, FAILBACK's re-send) has no span
	 * of its own: its upstream gets the app's context as the app sent it. */
	if (!rt || !rt->tracer || call->bg)
		return false;
	nghttp2_nv buf;
	const nghttp2_nv *tp = call->trace_tp ? mtd_headers_find(&call->req_hdrs, "traceparent", &buf) : NULL;
	/* Several traceparent fields make one list value (RFC 9110 §5.3),
	 * which no traceparent is: ignored as a malformed one. */
	t->has_parent = tp && mtd_traceparent_parse((const char *)tp->value, tp->valuelen, &t->ctx) &&
	                mtd_headers_count_n(&call->req_hdrs, "traceparent", 11, 2) == 1;
	t->state = NULL;
	t->state_len = 0;
	if (t->has_parent) {
		memcpy(t->parent, t->ctx.span_id, 8);
		t->sampled = t->ctx.flags & MTD_TRACE_SAMPLED;
		/* tracestate goes with a traceparent that parsed, never alone. */
		read_state(call, t);
	}
	if (!t->has_parent) {
		derive(t->ctx.trace_id, call, 0x7472616365ull); /* "trace" */
		derive(t->ctx.trace_id + 8, call, 0x6964ull);   /* "id" */
		t->sampled = mtd_trace_sample(t->ctx.trace_id, sample_of(call, rt));
		t->ctx.flags = t->sampled ? MTD_TRACE_SAMPLED : 0;
		memset(t->parent, 0, 8);
	}
	derive(t->ctx.span_id, call, 0x7370616eull); /* "span" */
	return true;
}

void mtd_call_trace_parent_header(const struct mtd_call_trace *t, char out[MTD_TRACEPARENT_LEN])
{
	mtd_traceparent_format(out, &t->ctx);
}

static int64_t unix_ns(int64_t mono_ns)
{
	return mono_ns + mtd_wall_offset_ms() * 1000000;
}

/* "host:port" (or "[v6]:port") as the two server.* attributes. */
static void server_attrs(struct mtd_span *s, const char *addr)
{
	if (!addr)
		return;
	const char *colon = strrchr(addr, ':');
	if (!colon)
		return;
	const char *host = addr;
	size_t hlen = (size_t)(colon - addr);
	if (hlen >= 2 && host[0] == '[' && host[hlen - 1] == ']') {
		host++;
		hlen -= 2;
	}
	mtd_span_str(s, "server.address", host, hlen);
	long port = 0;
	for (const char *p = colon + 1; *p >= '0' && *p <= '9' && port < 65536; p++)
		port = port * 10 + (*p - '0');
	mtd_span_int(s, "server.port", port);
}

/* The :path's service and method ("/pkg.Service/Method"). */
static void path_parts(const struct mtd_call *call, const char **svc, size_t *svc_len, const char **meth,
                       size_t *meth_len)
{
	nghttp2_nv buf;
	const nghttp2_nv *p = mtd_headers_find(&call->req_hdrs, ":path", &buf);
	*svc = *meth = "";
	*svc_len = *meth_len = 0;
	if (!p || p->valuelen < 2 || p->value[0] != '/')
		return;
	const char *v = (const char *)p->value + 1;
	size_t n = p->valuelen - 1;
	const char *slash = memchr(v, '/', n);
	*svc = v;
	*svc_len = slash ? (size_t)(slash - v) : n;
	if (slash) {
		*meth = slash + 1;
		*meth_len = n - *svc_len - 1;
	}
}

static void status_attrs(struct mtd_span *s, int code)
{
	mtd_span_int(s, "rpc.grpc.status_code", code);
	if (code != MTD_GRPC_OK) {
		const char *name = mtd_grpc_status_name(code);
		mtd_span_status_error(s, name, strlen(name));
	}
}

static void submit(const struct mtd_call *call, const struct mtd_span *s)
{
	const struct mtd_runtime *rt = rt_of(call);
	mtd_tracer_submit(rt->tracer, call->w->id, s);
}

/* The split group the call went to: the answering (else last tried)
 * endpoint's value of the split's metadata key, or NULL. A scan of the
 * service's endpoints, for sampled calls of splitting services only. */
static const char *split_group(const struct mtd_call *call)
{
	const struct mtd_rt_service *svc = call->svc;
	const struct mtd_cfg_split *sp = call->method ? call->method->cfg->split : svc ? svc->cfg->local->split : NULL;
	if (!sp || !svc->attrs || !call->mx_ep)
		return NULL;
	for (size_t i = 0; i < svc->n_eps; i++) {
		if (svc->eps[i] != call->mx_ep)
			continue;
		const struct mtd_rt_epattr *a = &svc->attrs[i];
		for (size_t k = 0; k < a->a.meta.n; k++)
			if (strcmp(a->a.meta.kv[k].key, sp->metadata_key) == 0)
				return a->a.meta.kv[k].value;
		return NULL;
	}
	return NULL;
}

void mtd_call_trace_end(const struct mtd_call *call)
{
	struct mtd_call_trace t;
	if (call->trace_unsampled || !mtd_call_trace_of(call, &t) || !t.sampled)
		return;
	struct mtd_span s;
	mtd_span_init(&s, &t.ctx, t.ctx.span_id, t.has_parent ? t.parent : NULL,
	              call->inbound ? MTD_SPAN_SERVER : MTD_SPAN_CLIENT, unix_ns(call->start_ns));
	s.end_unix_ns = unix_ns(mtd_now_ns());
	const char *svc, *meth;
	size_t svc_len, meth_len;
	path_parts(call, &svc, &svc_len, &meth, &meth_len);
	mtd_span_name2(&s, svc, svc_len, meth, meth_len);
	if (t.state)
		mtd_span_tracestate(&s, (const char *)t.state, t.state_len);
	mtd_span_str(&s, "rpc.system", "grpc", 4);
	mtd_span_str(&s, "rpc.service", svc, svc_len);
	mtd_span_str(&s, "rpc.method", meth, meth_len);
	status_attrs(&s, mtd_metrics_call_code(call));
	if (call->mx_ep)
		server_attrs(&s, mtd_endpoint_text(call->mx_ep));
	const struct mtd_lb_picker *picker = call->method ? call->method->picker : call->svc ? call->svc->picker : NULL;
	if (picker) {
		mtd_span_str(&s, "maitred.policy", picker->ops->name, strlen(picker->ops->name));
	}
	if (call->fault) {
		const char *mode = mtd_fault_mode_name(call->fault->mode);
		mtd_span_str(&s, "maitred.fault_mode", mode, strlen(mode));
	}
	mtd_span_int(&s, "maitred.attempts", call->n_attempts);
	const char *group = split_group(call);
	if (group)
		mtd_span_str(&s, "maitred.split_group", group, strlen(group));
	if (call->inbound) {
		/* The caller's identity, from the x-forwarded-client-cert maitred
		 * set on the call (the inbound step), typed as everywhere. */
		nghttp2_nv xbuf;
		const nghttp2_nv *x = mtd_headers_find(&call->req_hdrs, MTD_XFCC_HEADER, &xbuf);
		char typed[4 + 257];
		size_t n = x ? mtd_xfcc_typed_identity((const char *)x->value, x->valuelen, typed, sizeof(typed)) : 0;
		if (n)
			mtd_span_str(&s, "maitred.caller", typed, n);
	}
	submit(call, &s);
}

void mtd_call_trace_attempt_end(const struct mtd_attempt *a)
{
	const struct mtd_call *call = a->call;
	const struct mtd_runtime *rt = rt_of(call);
	if (!rt || !rt->tracer || call->bg || call->trace_unsampled)
		return;
	bool won = a == call->ans;
	int code = mtd_attempt_status_of(&a->resp_trailers);
	if (code < 0)
		code = mtd_attempt_status_of(&a->resp_hdrs);
	bool failed = !(won && (code == MTD_GRPC_OK || (code < 0 && call->resp_eof)));
	if (call->n_attempts <= 1 && !failed)
		return; /* the call's own span says it all */
	struct mtd_call_trace t;
	if (!mtd_call_trace_of(call, &t) || !t.sampled)
		return;
	struct mtd_span s;
	uint8_t id[8];
	derive(id, call, 0x617474656d7074ull + a->index); /* "attempt" + its number */
	mtd_span_init(&s, &t.ctx, id, t.ctx.span_id, MTD_SPAN_CLIENT, unix_ns(a->start_ns));
	s.end_unix_ns = unix_ns(mtd_now_ns());
	const char *svc, *meth;
	size_t svc_len, meth_len;
	path_parts(call, &svc, &svc_len, &meth, &meth_len);
	mtd_span_name2(&s, svc, svc_len, meth, meth_len);
	mtd_span_str(&s, "rpc.system", "grpc", 4);
	mtd_span_int(&s, "maitred.attempt", a->index);
	mtd_span_bool(&s, "maitred.hedge", a->hedge);
	mtd_span_bool(&s, "maitred.won", won);
	if (a->ep)
		server_attrs(&s, mtd_endpoint_text(a->ep));
	if (code >= 0)
		status_attrs(&s, code);
	else if (failed)
		mtd_span_status_error(&s, "no answer", 9);
	submit(call, &s);
}
