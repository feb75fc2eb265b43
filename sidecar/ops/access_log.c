/* The access log: its file (opened, switched by a reload) and the line
 * per call. The contract is in access_log.h. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "admin/admin.h"
#include "authz/authz.h"
#include "config/config.h"
#include "core/log.h"
#include "grpc/grpc.h"
#include "lb/lb.h"
#include "sidecar/call/call-t.h"
#include "sidecar/call/headers.h"
#include "sidecar/control/runtime.h"
#include "sidecar/call/inbound_call.h"
#include "sidecar/call/trace.h"
#include "sidecar/ops/access_log.h"
#include "sidecar/ops/mesh.h"
#include "sidecar/turn.h"

/* Access log, changed by a reload while workers write it (access_log.h):
 * access_fd is a descriptor of our own, made by the first open and never
 * closed before mtd_access_log_close(); a reload points it at the new file
 * with dup2(), which a concurrent write() sees before or after, never
 * half. The settings are relaxed atomics, read once per call. */
static _Atomic int access_fd = -1;
static _Atomic bool access_on;
static _Atomic uint64_t access_sample_bits; /* a double */
static _Atomic bool access_json;

int mtd_access_log_open(const struct mtd_cfg *cfg, int *fd, char *err, size_t errlen)
{
	*fd = -1;
	if (!cfg->log.access)
		return 0;
	const char *path = cfg->log.access->path;
	/* "-": a copy of stderr, so a later reload can repoint ours alone. */
	*fd = strcmp(path, "-") == 0 ? fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3)
	                             : open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
	if (*fd < 0) {
		int e = errno;
		snprintf(err, errlen, "log.access.path: cannot open %s: %s", path, strerror(e));
		return -e;
	}
	return 0;
}

void mtd_access_log_apply(const struct mtd_cfg *cfg, int fd)
{
	if (fd >= 0) {
		int cur = atomic_load_explicit(&access_fd, memory_order_relaxed);
		if (cur < 0) {
			atomic_store_explicit(&access_fd, fd, memory_order_release);
		} else {
			/* Failing here (EBADF, EINTR: not with our descriptors)
			 * keeps the old file; the log is best effort. */
			if (dup2(fd, cur) < 0)
				MTD_WARN("log.access: cannot switch to %s: %s", cfg->log.access->path, strerror(errno));
			close(fd);
		}
	}
	double sample = cfg->log.access ? cfg->log.access->sample : 0;
	uint64_t bits;
	memcpy(&bits, &sample, sizeof(bits));
	atomic_store_explicit(&access_sample_bits, bits, memory_order_relaxed);
	atomic_store_explicit(&access_json, cfg->log.json, memory_order_relaxed);
	/* Release: a worker that sees it on also sees the descriptor. */
	atomic_store_explicit(&access_on, cfg->log.access != NULL && fd >= 0, memory_order_release);
}

void mtd_access_log_close(void)
{
	int fd = atomic_exchange(&access_fd, -1);
	if (fd >= 0)
		close(fd);
	atomic_store(&access_on, false);
}

bool mtd_access_log_due(struct mtd_call *call)
{
	if (!atomic_load_explicit(&access_on, memory_order_acquire))
		return false;
	uint64_t bits = atomic_load_explicit(&access_sample_bits, memory_order_relaxed);
	double sample;
	memcpy(&sample, &bits, sizeof(sample));
	return !(sample < 1.0 && (double)(mtd_lb_rand(&call->w->rng) >> 11) * 0x1p-53 >= sample);
}

/* A label-safe copy for the TEXT access log: no spaces, quotes or control
 * bytes, so a line always splits into key=value fields. */
static size_t text_safe(char *out, size_t cap, const char *s, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n && k + 1 < cap; i++) {
		unsigned char c = (unsigned char)s[i];
		out[k++] = c <= 0x20 || c >= 0x7f || c == '"' || c == '=' ? '?' : (char)c;
	}
	out[k] = '\0';
	return k;
}

/* An inbound peer's call (mesh mode): its listener, the caller's identity
 * (from maitred's own x-forwarded-client-cert, which the call carries from
 * its first header on: io/inbound.c) and what authorization decided. */
struct access_in {
	const char *listener; /* NULL: not an inbound call */
	char id[4 + 257];     /* the caller's typed identity, "" for none */
	size_t id_len;
	const char *verdict;
};

static struct access_in access_inbound(const struct mtd_call *call)
{
	struct access_in a = {0};
	if (!call->inbound)
		return a;
	a.listener = mtd_call_inbound_listener(call);
	a.verdict = mtd_mesh_verdict_name((enum mtd_in_verdict)call->verdict);
	nghttp2_nv buf;
	const nghttp2_nv *x = mtd_headers_find(&call->req_hdrs, MTD_XFCC_HEADER, &buf);
	if (x)
		a.id_len = mtd_xfcc_typed_identity((const char *)x->value, x->valuelen, a.id, sizeof(a.id));
	return a;
}

void mtd_access_log_line(const struct mtd_call *call, const char *path, size_t svc_len, size_t path_len, int code,
                         int64_t dur_ns)
{
	struct access_in in = access_inbound(call);
	char ts[40];
	mtd_log_timestamp(ts, sizeof(ts));
	const char *svc = path + 1, *method = path + 2 + svc_len;
	size_t mlen = path_len > svc_len + 2 ? path_len - svc_len - 2 : 0;
	if (svc_len + 1 > path_len) {
		svc = method = "";
		svc_len = mlen = 0;
	}
	const char *ep = call->mx_ep ? mtd_endpoint_text(call->mx_ep) : "-";
	unsigned attempts = call->n_attempts;
	/* A traced call's trace id (32 hex digits), "" otherwise. */
	char trace_id[33] = "";
	struct mtd_call_trace t;
	if (mtd_call_trace_of(call, &t)) {
		char tp[MTD_TRACEPARENT_LEN];
		mtd_traceparent_format(tp, &t.ctx);
		memcpy(trace_id, tp + 3, 32);
	}
	char line[1024];
	int n;
	int fd = atomic_load_explicit(&access_fd, memory_order_relaxed);
	if (atomic_load_explicit(&access_json, memory_order_relaxed)) {
		/* On the stack: the access log allocates nothing per call. */
		char mem[4096];
		struct mtd_abuf b;
		struct mtd_json j;
		mtd_abuf_init_fixed(&b, mem, sizeof(mem));
		mtd_json_init(&j, &b);
		mtd_json_obj_begin(&j);
		mtd_json_key(&j, "time");
		mtd_json_str(&j, ts);
		mtd_json_key(&j, "level");
		mtd_json_str(&j, "info");
		mtd_json_key(&j, "type");
		mtd_json_str(&j, "access");
		mtd_json_key(&j, "service");
		mtd_json_strn(&j, svc, svc_len > 256 ? 256 : svc_len);
		mtd_json_key(&j, "method");
		mtd_json_strn(&j, method, mlen > 256 ? 256 : mlen);
		mtd_json_key(&j, "endpoint");
		mtd_json_str(&j, ep);
		mtd_json_key(&j, "attempts");
		mtd_json_u64(&j, attempts);
		mtd_json_key(&j, "grpc_status");
		mtd_json_str(&j, mtd_grpc_status_name(code));
		mtd_json_key(&j, "duration_s");
		mtd_json_dbl(&j, (double)dur_ns / 1e9);
		mtd_json_key(&j, "bytes_in");
		mtd_json_u64(&j, call->bytes_in);
		mtd_json_key(&j, "bytes_out");
		mtd_json_u64(&j, call->bytes_out);
		if (in.listener) {
			mtd_json_key(&j, "inbound");
			mtd_json_str(&j, in.listener);
			mtd_json_key(&j, "identity");
			mtd_json_strn(&j, in.id, in.id_len);
			mtd_json_key(&j, "authz");
			mtd_json_str(&j, in.verdict);
		}
		if (trace_id[0]) {
			mtd_json_key(&j, "trace_id");
			mtd_json_str(&j, trace_id);
		}
		mtd_json_obj_end(&j);
		mtd_abuf_add(&b, "\n", 1);
		if (!b.oom && write(fd, b.p, b.len) < 0) {
			/* Nothing sensible to do: the log is best effort. */
		}
		return;
	}
	char s[260], m[260], id[260] = "", tail[600] = "", trace[48] = "";
	text_safe(s, sizeof(s), svc, svc_len);
	text_safe(m, sizeof(m), method, mlen);
	if (in.listener) {
		text_safe(id, sizeof(id), in.id, in.id_len);
		snprintf(tail, sizeof(tail), " inbound=%s identity=%s authz=%s", in.listener, id[0] ? id : "-",
		         in.verdict);
	}
	if (trace_id[0])
		snprintf(trace, sizeof(trace), " trace_id=%s", trace_id);
	n = snprintf(line, sizeof(line),
	             "%s access service=%s method=%s endpoint=%s attempts=%u grpc_status=%s duration_s=%.6f "
	             "bytes_in=%" PRIu64 " bytes_out=%" PRIu64 "%s%s\n",
	             ts, s[0] ? s : "-", m[0] ? m : "-", ep, attempts, mtd_grpc_status_name(code), (double)dur_ns / 1e9,
	             call->bytes_in, call->bytes_out, tail, trace);
	if (n > 0) {
		size_t len = (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;
		line[len - 1] = '\n';
		/* One write per line (O_APPEND): lines never interleave. */
		if (write(fd, line, len) < 0) {
			/* best effort, as above */
		}
	}
}
