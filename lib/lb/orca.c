/* ORCA load reports (xds.data.orca.v3.OrcaLoadReport, gRFC A51) and what
 * CLIENT_SIDE_WEIGHTED_ROUND_ROBIN makes of them (gRFC A58).
 *
 * The report arrives in the endpoint-load-metrics-bin trailer, base64 as
 * every -bin metadata value on the wire. It is decoded once, into a stack
 * buffer, and read by a strict wire-format reader of its own (no
 * allocation): a report that is malformed anywhere, or carries a figure
 * out of its range (negative, not finite, memory above 1), is ignored
 * whole and counted in the endpoint's `invalid`.
 *
 * Shared state (struct mtd_lb_orca_state, one per endpoint, every worker
 * writes): each figure is one relaxed atomic. The weight's three fields
 * are written weight, since, then last (release); tick() reads last
 * (acquire) first, so a tick that sees a report's time also sees its
 * weight and the start of its run. Two workers recording at once store
 * figures of one report or the other, never a torn double.
 */
#include "config.h"

#include "core/base64.h"
#include "core/lazy.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lb/lb.h"
#include "lb/lb-impl.h"

/* ---- wire format ------------------------------------------------------- */

struct rd {
	const uint8_t *p, *end;
};

static int varint(struct rd *r, uint64_t *out)
{
	uint64_t v = 0;

	for (unsigned shift = 0; shift < 64; shift += 7) {
		uint8_t b;

		if (r->p >= r->end)
			return -EINVAL;
		b = *r->p++;
		if (shift == 63 && b > 1)
			return -EINVAL;
		v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			*out = v;
			return 0;
		}
	}
	return -EINVAL;
}

static int fixed64(struct rd *r, double *out)
{
	uint64_t u = 0;

	if (r->end - r->p < 8)
		return -EINVAL;
	for (int i = 7; i >= 0; i--)
		u = u << 8 | r->p[i];
	r->p += 8;
	*out = mtd_lb__double_of(u);
	return 0;
}

/* Skip one field's value of wire type wt; groups are refused. */
static int skip(struct rd *r, unsigned wt)
{
	uint64_t v;

	switch (wt) {
	case 0:
		return varint(r, &v);
	case 1:
		if (r->end - r->p < 8)
			return -EINVAL;
		r->p += 8;
		return 0;
	case 2:
		if (varint(r, &v) != 0 || v > (uint64_t)(r->end - r->p))
			return -EINVAL;
		r->p += v;
		return 0;
	case 5:
		if (r->end - r->p < 4)
			return -EINVAL;
		r->p += 4;
		return 0;
	default:
		return -EINVAL;
	}
}

/* A map<string, double> entry: key 1 (LEN), value 2 (I64), in any order,
 * unknown fields skipped. */
static int map_entry(const uint8_t *p, size_t n)
{
	struct rd r = {p, p + n};

	while (r.p < r.end) {
		uint64_t key;
		unsigned wt;
		double d;

		if (varint(&r, &key) != 0 || key >> 3 == 0 || key >> 3 > UINT32_MAX)
			return -EINVAL;
		wt = (unsigned)(key & 7);
		if (key >> 3 == 1 && wt != 2)
			return -EINVAL;
		if (key >> 3 == 2) {
			if (wt != 1 || fixed64(&r, &d) != 0)
				return -EINVAL;
			continue;
		}
		if (skip(&r, wt) != 0)
			return -EINVAL;
	}
	return 0;
}

static bool in_range(double v, double max)
{
	return isfinite(v) && v >= 0.0 && v <= max;
}

int mtd_lb_orca_parse(const uint8_t *p, size_t n, struct mtd_lb_orca_report *out)
{
	struct rd r = {p, p + n};
	struct mtd_lb_orca_report rep = {0};
	uint64_t rps = 0;

	if (n > 0 && p == NULL)
		return -EINVAL;
	while (r.p < r.end) {
		uint64_t key, len;
		unsigned wt;
		uint64_t field;
		double *dst = NULL;

		if (varint(&r, &key) != 0)
			return -EINVAL;
		field = key >> 3;
		wt = (unsigned)(key & 7);
		if (field == 0 || field > 536870911u)
			return -EINVAL;
		switch (field) {
		case 1:
			dst = &rep.cpu;
			break;
		case 2:
			dst = &rep.mem;
			break;
		case 6:
			dst = &rep.qps;
			break;
		case 7:
			dst = &rep.eps;
			break;
		case 9:
			dst = &rep.app;
			break;
		case 3:
			if (wt != 0 || varint(&r, &rps) != 0)
				return -EINVAL;
			continue;
		case 4:
		case 5:
		case 8:
			if (wt != 2 || varint(&r, &len) != 0 || len > (uint64_t)(r.end - r.p) ||
			    map_entry(r.p, (size_t)len) != 0)
				return -EINVAL;
			r.p += len;
			continue;
		default:
			if (skip(&r, wt) != 0)
				return -EINVAL;
			continue;
		}
		if (wt != 1 || fixed64(&r, dst) != 0)
			return -EINVAL;
	}
	if (!in_range(rep.cpu, INFINITY) || !in_range(rep.mem, 1.0) || !in_range(rep.qps, INFINITY) ||
	    !in_range(rep.eps, INFINITY) || !in_range(rep.app, INFINITY))
		return -EINVAL;
	rep.rps = rps;
	*out = rep;
	return 0;
}

int mtd_lb_orca_parse_b64(const uint8_t *text, size_t n, struct mtd_lb_orca_report *out)
{
	uint8_t buf[MTD_LB_ORCA_MAX_REPORT];
	ssize_t len;

	if (n > (MTD_LB_ORCA_MAX_REPORT / 3) * 4 + 4)
		return -EINVAL;
	len = mtd_base64_decode(text, n, buf, sizeof(buf));
	if (len < 0)
		return -EINVAL;
	return mtd_lb_orca_parse(buf, (size_t)len, out);
}

/* ---- weights ----------------------------------------------------------- */

double mtd_lb_orca_weight(const struct mtd_lb_orca_report *r, double penalty)
{
	double util = r->app > 0.0 ? r->app : r->cpu;

	if (!(r->qps > 0.0) || !(util > 0.0))
		return 0.0;
	util += r->eps / r->qps * penalty;
	return r->qps / util;
}

/* st's report state, installed by the first report (core/lazy.h: st's
 * live block first, then the state in it); NULL only out of memory. */
static struct mtd_lb_orca_state *orca_of(struct mtd_lb_stats *st)
{
	struct mtd_lb_live *l = mtd_lazy_get(&st->live);

	return l != NULL ? mtd_lazy_get(&l->orca) : NULL;
}

/* st's report state to read: NULL while it has none. */
static struct mtd_lb_orca_state *orca_peek(const struct mtd_lb_stats *st)
{
	return mtd_lazy_peek(&mtd_lb_stats_view(st)->orca);
}

/* A report that parsed (rc 0) or did not: stored, or counted. */
static int record(struct mtd_lb_stats *st, int rc, const struct mtd_lb_orca_report *rp,
                  const struct mtd_lb_orca_config *cfg, int64_t now_ms)
{
	struct mtd_lb_orca_state *o = orca_of(st);
	struct mtd_lb_orca_report r;
	double w;
	int64_t last;

	if (!o)
		return -ENOMEM;
	if (rc != 0) {
		atomic_fetch_add_explicit(&o->invalid, 1, memory_order_relaxed);
		return -EINVAL;
	}
	r = *rp;
	atomic_fetch_add_explicit(&o->reports, 1, memory_order_relaxed);
	atomic_store_explicit(&o->cpu_bits, mtd_lb__bits_of(r.cpu), memory_order_relaxed);
	atomic_store_explicit(&o->mem_bits, mtd_lb__bits_of(r.mem), memory_order_relaxed);
	atomic_store_explicit(&o->app_bits, mtd_lb__bits_of(r.app), memory_order_relaxed);
	atomic_store_explicit(&o->qps_bits, mtd_lb__bits_of(r.qps), memory_order_relaxed);
	atomic_store_explicit(&o->eps_bits, mtd_lb__bits_of(r.eps), memory_order_relaxed);
	w = mtd_lb_orca_weight(&r, cfg->error_penalty);
	if (!(w > 0.0) || !isfinite(w))
		return 0; /* A58: a report without a weight leaves the old one to expire */
	if (now_ms <= 0)
		now_ms = 1; /* 0 means "no report" */
	last = atomic_load_explicit(&o->last_ms, memory_order_relaxed);
	if (last == 0 || now_ms - last >= cfg->expiration_ms)
		atomic_store_explicit(&o->since_ms, now_ms, memory_order_relaxed);
	atomic_store_explicit(&o->weight_bits, mtd_lb__bits_of(w), memory_order_relaxed);
	atomic_store_explicit(&o->last_ms, now_ms, memory_order_release);
	return 0;
}

int mtd_lb_orca_record(struct mtd_lb_stats *st, const uint8_t *text, size_t n, const struct mtd_lb_orca_config *cfg,
                       int64_t now_ms)
{
	struct mtd_lb_orca_report r;

	return record(st, mtd_lb_orca_parse_b64(text, n, &r), &r, cfg, now_ms);
}

int mtd_lb_orca_record_raw(struct mtd_lb_stats *st, const uint8_t *p, size_t n, const struct mtd_lb_orca_config *cfg,
                           int64_t now_ms)
{
	struct mtd_lb_orca_report r;

	/* The trailers' bound (mtd_lb_orca_record's decoded bytes). */
	if (n > MTD_LB_ORCA_MAX_REPORT)
		return record(st, -EINVAL, NULL, cfg, now_ms);
	return record(st, mtd_lb_orca_parse(p, n, &r), &r, cfg, now_ms);
}

void mtd_lb_orca_set_oob(struct mtd_lb_stats *st, enum mtd_lb_orca_oob state)
{
	struct mtd_lb_orca_state *o = orca_peek(st);

	/* No state reads as OFF: none is made for an OFF. */
	if (!o && (state == MTD_LB_ORCA_OOB_OFF || !(o = orca_of(st))))
		return;
	atomic_store_explicit(&o->oob, (uint32_t)state, memory_order_relaxed);
}

enum mtd_lb_orca_oob mtd_lb_orca_oob_state(const struct mtd_lb_stats *st)
{
	const struct mtd_lb_orca_state *o = orca_peek(st);

	return o ? (enum mtd_lb_orca_oob)atomic_load_explicit(&o->oob, memory_order_relaxed) : MTD_LB_ORCA_OOB_OFF;
}

bool mtd_lb_orca_trailers_count(const struct mtd_lb_stats *st)
{
	enum mtd_lb_orca_oob s = mtd_lb_orca_oob_state(st);

	return s == MTD_LB_ORCA_OOB_OFF || s == MTD_LB_ORCA_OOB_UNIMPLEMENTED;
}

double mtd_lb_orca_weight_at(const struct mtd_lb_stats *st, const struct mtd_lb_orca_config *cfg, int64_t now_ms)
{
	const struct mtd_lb_orca_state *o = orca_peek(st);
	int64_t last = o ? atomic_load_explicit(&o->last_ms, memory_order_acquire) : 0, since;

	if (last == 0 || now_ms - last >= cfg->expiration_ms)
		return 0.0;
	since = atomic_load_explicit(&o->since_ms, memory_order_relaxed);
	if (cfg->blackout_ms > 0 && now_ms - since < cfg->blackout_ms)
		return 0.0;
	return mtd_lb__double_of(atomic_load_explicit(&o->weight_bits, memory_order_relaxed));
}

void mtd_lb_orca_view(const struct mtd_lb_stats *st, struct mtd_lb_orca_view *out)
{
	const struct mtd_lb_orca_state *o = orca_peek(st);

	if (!o) {
		*out = (struct mtd_lb_orca_view){.oob = mtd_lb_orca_oob_state(st)};
		return;
	}
	*out = (struct mtd_lb_orca_view){
	        .reports = atomic_load_explicit(&o->reports, memory_order_relaxed),
	        .invalid = atomic_load_explicit(&o->invalid, memory_order_relaxed),
	        .oob = mtd_lb_orca_oob_state(st),
	        .cpu = mtd_lb__double_of(atomic_load_explicit(&o->cpu_bits, memory_order_relaxed)),
	        .mem = mtd_lb__double_of(atomic_load_explicit(&o->mem_bits, memory_order_relaxed)),
	        .app = mtd_lb__double_of(atomic_load_explicit(&o->app_bits, memory_order_relaxed)),
	        .qps = mtd_lb__double_of(atomic_load_explicit(&o->qps_bits, memory_order_relaxed)),
	        .eps = mtd_lb__double_of(atomic_load_explicit(&o->eps_bits, memory_order_relaxed)),
	        .weight = mtd_lb__double_of(atomic_load_explicit(&o->used_bits, memory_order_relaxed)),
	};
	out->utilization = out->app > 0.0 ? out->app : out->cpu;
}

void mtd_lb__orca_set_used(struct mtd_lb_stats *st, double w)
{
	struct mtd_lb_orca_state *o = orca_peek(st);

	/* No state reads as "none" (0): an endpoint without reports gets
	 * none made for a 0. */
	if (!o && (w == 0.0 || !(o = orca_of(st))))
		return;
	atomic_store_explicit(&o->used_bits, mtd_lb__bits_of(w), memory_order_relaxed);
}
