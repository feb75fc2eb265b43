/* Traffic policy: split, rate_limit and fault_injection (service or
 * method), the top-level routes, and the targets routes and mirrors name. */
#include <config.h> /* autoconf (lib/config/config.h is the API) */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/build-int.h"
#include "limit/limit.h"

/* An entry that routes or a mirror send calls to: it may have any name. */
bool mtd_cfg__reached_by_name(struct builder *b, const char *name)
{
	const PbConfig *m = b->root;

	for (size_t i = 0; i < m->n_routes; i++)
		if (m->routes[i]->to[0] != '\0' && strcmp(m->routes[i]->to, name) == 0)
			return true;
	for (size_t i = 0; i < m->n_services; i++)
		if (m->services[i]->mirror != NULL && strcmp(m->services[i]->mirror->service, name) == 0)
			return true;
	return false;
}

static int split_weight_cmp(const void *x, const void *y)
{
	return strcmp(((const struct mtd_lb_split_weight *)x)->value, ((const struct mtd_lb_split_weight *)y)->value);
}

struct mtd_cfg_split *mtd_cfg__build_split(struct builder *b, const PbSplit *m, const char *path)
{
	struct mtd_cfg_split *out;
	uint64_t total = 0;
	char p[256];

	out = mtd_cfg__calloc(1, sizeof(*out));
	if (out == NULL) {
		b->d->oom = true;
		return NULL;
	}
	if (m->metadata_key[0] == '\0')
		BERR(mtd_cfg__at(b, m, NULL, NULL), mtd_cfg__sub(p, sizeof(p), path, "metadata_key"),
		     "is required (the endpoint metadata key whose values name the groups, e.g. \"version\")");
	else
		out->metadata_key = mtd_cfg__dup_or_oom(b, m->metadata_key);
	mtd_cfg__sub(p, sizeof(p), path, "weights");
	if (m->n_weights == 0)
		BERR(mtd_cfg__at(b, m, NULL, NULL), p, "is required (group value -> weight, e.g. {v1: 90, v2: 10})");
	else if (m->n_weights > MTD_LB_SPLIT_MAX_GROUPS)
		BERR(mtd_cfg__at(b, m, "weights", NULL), p, "at most %u groups, got %zu", MTD_LB_SPLIT_MAX_GROUPS,
		     m->n_weights);
	if (m->n_weights != 0 && m->n_weights <= MTD_LB_SPLIT_MAX_GROUPS) {
		out->weights = mtd_cfg__calloc(m->n_weights, sizeof(*out->weights));
		if (out->weights == NULL) {
			b->d->oom = true;
			return out;
		}
		for (size_t k = 0; k < m->n_weights; k++) {
			out->weights[k].value = mtd_cfg__dup_or_oom(b, m->weights[k]->key);
			out->weights[k].weight = m->weights[k]->value;
			out->lb.n = k + 1;
			if (out->weights[k].value == NULL)
				return out;
			total += m->weights[k]->value;
		}
		out->lb.weights = out->weights;
		/* The map has no order: by value, so a reload of the same file
		 * draws the same way. */
		qsort(out->weights, out->lb.n, sizeof(*out->weights), split_weight_cmp);
		if (total == 0)
			BERR(mtd_cfg__at(b, m, "weights", NULL), p, "the weights sum to 0: no group would take a call");
		else if (total > UINT32_MAX)
			BERR(mtd_cfg__at(b, m, "weights", NULL), p, "the weights sum to more than %u", UINT32_MAX);
	}
	if (m->guard != NULL) {
		const PbSplitGuard *g = m->guard;
		struct mtd_lb_split_guard *o = &out->lb.guard;
		char gp[256];

		mtd_cfg__sub(gp, sizeof(gp), path, "guard");
		o->on = true;
		o->max_error_ratio = 2.0;
		o->max_p99_ratio = 1.5;
		o->min_calls = g->min_calls != 0 ? g->min_calls : 100;
		if (g->max_error_ratio != NULL) {
			double v = g->max_error_ratio->value;

			if (!(v == 0.0 || (v > 1.0 && v <= 1e6)))
				BERR(mtd_cfg__at(b, g, "max_error_ratio", NULL),
				     mtd_cfg__sub(p, sizeof(p), gp, "max_error_ratio"),
				     "must be more than 1 (or 0: this rule off)");
			else
				o->max_error_ratio = v;
		}
		if (g->max_p99_ratio != NULL) {
			double v = g->max_p99_ratio->value;

			if (!(v == 0.0 || (v > 1.0 && v <= 1e6)))
				BERR(mtd_cfg__at(b, g, "max_p99_ratio", NULL),
				     mtd_cfg__sub(p, sizeof(p), gp, "max_p99_ratio"),
				     "must be more than 1 (or 0: this rule off)");
			else
				o->max_p99_ratio = v;
		}
		if (o->max_error_ratio == 0.0 && o->max_p99_ratio == 0.0)
			BERR(mtd_cfg__at(b, g, NULL, NULL), gp,
			     "both rules are off (max_error_ratio and max_p99_ratio 0)");
		o->window_ms = mtd_cfg__dur_ms(b, g->window, 30000, ZERO_IS_ERROR, mtd_cfg__at(b, g, "window", NULL),
		                               mtd_cfg__sub(p, sizeof(p), gp, "window"));
		if (o->window_ms < 1000 || o->window_ms > 3600000) {
			BERR(mtd_cfg__at(b, g, "window", NULL), mtd_cfg__sub(p, sizeof(p), gp, "window"),
			     "must be in 1s..1h");
			o->window_ms = 30000;
		}
	}
	return out;
}

/* The routing layer of a service or method with its split: the groups are
 * the split's metadata_key's, which routing's (when set) must equal, so a
 * pinned value names one of the split's groups. */
void mtd_cfg__layer_split(struct builder *b, struct mtd_lb_layer_config *lc, const struct mtd_cfg_split *sp,
                          const void *m, const char *path)
{
	char p[256];

	lc->split = sp != NULL && sp->metadata_key != NULL ? &sp->lb : NULL;
	if (lc->split == NULL)
		return;
	if (lc->metadata_key == NULL)
		lc->metadata_key = sp->metadata_key;
	else if (strcmp(lc->metadata_key, sp->metadata_key) != 0)
		BERR(mtd_cfg__at(b, m, "split", NULL), mtd_cfg__sub(p, sizeof(p), path, "split.metadata_key"),
		     "\"%s\" differs from routing.metadata_key \"%s\": a pinned value must name a split group",
		     sp->metadata_key, lc->metadata_key);
}

void mtd_cfg__build_rate_limit(struct builder *b, const PbRateLimit *m, const char *path,
                               struct mtd_cfg_rate_limit *out)
{
	char p[256];

	*out = (struct mtd_cfg_rate_limit){.set = m != NULL};
	if (m == NULL)
		return;
	if (m->calls_per_second == 0)
		BERR(mtd_cfg__at(b, m, NULL, NULL), mtd_cfg__sub(p, sizeof(p), path, "calls_per_second"),
		     "is required (1..%u)", MTD_LIMIT_MAX_RATE);
	else if (m->calls_per_second > MTD_LIMIT_MAX_RATE)
		BERR(mtd_cfg__at(b, m, "calls_per_second", NULL), mtd_cfg__sub(p, sizeof(p), path, "calls_per_second"),
		     "must be in 1..%u, got %u", MTD_LIMIT_MAX_RATE, (unsigned)m->calls_per_second);
	out->per_second = m->calls_per_second;
	out->burst = m->burst != 0 ? m->burst : m->calls_per_second;
	if (m->burst > MTD_LIMIT_MAX_BURST)
		BERR(mtd_cfg__at(b, m, "burst", NULL), mtd_cfg__sub(p, sizeof(p), path, "burst"),
		     "must be in 1..%u, got %u", MTD_LIMIT_MAX_BURST, (unsigned)m->burst);
}

void mtd_cfg__build_fault_injection(struct builder *b, const PbFaultInjection *m, const char *path,
                                    struct mtd_cfg_fault_injection *out)
{
	char p[256], fp[256];

	*out = (struct mtd_cfg_fault_injection){0};
	if (m == NULL)
		return;
	if (m->abort == NULL && m->delay == NULL)
		BERR(mtd_cfg__at(b, m, NULL, NULL), path, "needs abort or delay (or both)");
	if (m->abort != NULL) {
		mtd_cfg__sub(fp, sizeof(fp), path, "abort");
		out->abort = true;
		out->abort_percent = mtd_cfg__percent_of(b, m->abort->percent, m->abort, fp);
		out->abort_status = (int)m->abort->status;
		if (m->abort->status == MAITRED__CONFIG__V1__GRPC_STATUS__OK)
			BERR(mtd_cfg__at(b, m->abort, "status", m->abort), mtd_cfg__sub(p, sizeof(p), fp, "status"),
			     "is required, and not OK (the status aborted calls end with)");
		else if (m->abort->status < 0 || m->abort->status > 16)
			BERR(mtd_cfg__at(b, m->abort, "status", NULL), mtd_cfg__sub(p, sizeof(p), fp, "status"),
			     "unknown status number %d", (int)m->abort->status);
	}
	if (m->delay != NULL) {
		mtd_cfg__sub(fp, sizeof(fp), path, "delay");
		out->delay = true;
		out->delay_percent = mtd_cfg__percent_of(b, m->delay->percent, m->delay, fp);
		if (m->delay->duration == NULL)
			BERR(mtd_cfg__at(b, m->delay, NULL, NULL), mtd_cfg__sub(p, sizeof(p), fp, "duration"),
			     "is required (e.g. \"100ms\")");
		out->delay_ms = mtd_cfg__dur_ms(b, m->delay->duration, 1, ZERO_IS_ERROR,
		                                mtd_cfg__at(b, m->delay, "duration", NULL),
		                                mtd_cfg__sub(p, sizeof(p), fp, "duration"));
		if (out->delay_ms > 3600000) {
			BERR(mtd_cfg__at(b, m->delay, "duration", NULL), mtd_cfg__sub(p, sizeof(p), fp, "duration"),
			     "must be at most 1h");
			out->delay_ms = 1;
		}
	}
}

/* routes[i]: its strings, checked; `to` is resolved once every
 * service is built (mtd_cfg__resolve_targets). */
void mtd_cfg__build_route(struct builder *b, const PbRoute *m, size_t i, struct mtd_route_rule *out)
{
	char path[48], p[256];

	snprintf(path, sizeof(path), "routes[%zu]", i);
	*out = (struct mtd_route_rule){.to = -1};
	if (m->to[0] == '\0')
		BERR(mtd_cfg__at(b, m, NULL, NULL), mtd_cfg__sub(p, sizeof(p), path, "to"),
		     "is required (the name of a services[] entry)");
	if (m->match == NULL) {
		BERR(mtd_cfg__at(b, m, NULL, NULL), mtd_cfg__sub(p, sizeof(p), path, "match"),
		     "is required ({service: \"pkg.Service\", method, header})");
		return;
	}
	const Maitred__Config__V1__RouteMatch *mm = m->match;
	char mp[64];

	mtd_cfg__sub(mp, sizeof(mp), path, "match");
	if (mm->service[0] == '\0')
		BERR(mtd_cfg__at(b, mm, NULL, NULL), mtd_cfg__sub(p, sizeof(p), mp, "service"),
		     "is required (\"package.Service\" or \"*\")");
	else if (strcmp(mm->service, "*") != 0 && !mtd_cfg__service_name_ok(mm->service))
		BERR(mtd_cfg__at(b, mm, "service", NULL), mtd_cfg__sub(p, sizeof(p), mp, "service"),
		     "\"%s\" is not a fully-qualified gRPC service name (\"package.Service\") or \"*\"", mm->service);
	out->service = mtd_cfg__dup_or_oom(b, mm->service);
	out->service_len = out->service != NULL ? strlen(out->service) : 0;
	if (mm->method[0] != '\0') {
		if (!mtd_cfg__ident_ok(mm->method, strlen(mm->method)))
			BERR(mtd_cfg__at(b, mm, "method", NULL), mtd_cfg__sub(p, sizeof(p), mp, "method"),
			     "\"%s\" is not a valid method name", mm->method);
		out->method = mtd_cfg__dup_or_oom(b, mm->method);
		out->method_len = out->method != NULL ? strlen(out->method) : 0;
	}
	if (mm->header == NULL)
		return;
	const Maitred__Config__V1__HeaderMatch *h = mm->header;
	char hp[96];
	char *name;

	mtd_cfg__sub(hp, sizeof(hp), mp, "header");
	if (h->name[0] == '\0') {
		BERR(mtd_cfg__at(b, h, NULL, NULL), mtd_cfg__sub(p, sizeof(p), hp, "name"),
		     "is required (a request metadata key)");
		return;
	}
	name = mtd_cfg__metadata_key(b, h->name, mtd_cfg__at(b, h, "name", NULL), mtd_cfg__sub(p, sizeof(p), hp, "name"));
	if (name == NULL)
		return;
	out->header = name;
	switch (h->match_case) {
	case MAITRED__CONFIG__V1__HEADER_MATCH__MATCH_VALUE:
		out->kind = MTD_ROUTE_HEADER_VALUE;
		out->value = mtd_cfg__dup_or_oom(b, h->value);
		break;
	case MAITRED__CONFIG__V1__HEADER_MATCH__MATCH_PREFIX:
		out->kind = MTD_ROUTE_HEADER_PREFIX;
		out->value = mtd_cfg__dup_or_oom(b, h->prefix);
		if (h->prefix[0] == '\0')
			BERR(mtd_cfg__at(b, h, "prefix", NULL), mtd_cfg__sub(p, sizeof(p), hp, "prefix"),
			     "is empty (every value has it: use present: true)");
		break;
	case MAITRED__CONFIG__V1__HEADER_MATCH__MATCH_PRESENT:
		out->kind = MTD_ROUTE_HEADER_PRESENT;
		if (!h->present)
			BERR(mtd_cfg__at(b, h, "present", NULL), mtd_cfg__sub(p, sizeof(p), hp, "present"),
			     "false matches nothing (leave header out, or give value or prefix)");
		break;
	default:
		BERR(mtd_cfg__at(b, h, NULL, NULL), hp, "needs one of value, prefix, present");
		break;
	}
	out->value_len = out->value != NULL ? strlen(out->value) : 0;
}

/* The index of the services[] entry named `name`, or -1. */
static int service_index(const PbConfig *m, const char *name)
{
	for (size_t j = 0; j < m->n_services; j++)
		if (strcmp(m->services[j]->name, name) == 0)
			return (int)j;
	return -1;
}

/* Routes' `to` and mirrors' `service`, once every entry is known. */
void mtd_cfg__resolve_targets(struct builder *b, const PbConfig *m, struct mtd_cfg *cfg)
{
	char p[96];

	for (size_t i = 0; i < cfg->n_routes; i++) {
		const PbRoute *r = m->routes[i];

		if (r->to[0] == '\0')
			continue;
		snprintf(p, sizeof(p), "routes[%zu].to", i);
		cfg->routes[i].to = service_index(m, r->to);
		if (cfg->routes[i].to < 0)
			BERR(mtd_cfg__at(b, r, "to", NULL), p, "no services[] entry is named \"%s\"", r->to);
	}
	for (size_t i = 0; i < cfg->n_services; i++) {
		const PbService *s = m->services[i];

		cfg->services[i].local->mirror = -1;
		if (s->mirror == NULL)
			continue;
		snprintf(p, sizeof(p), "services[%zu].mirror.service", i);
		if (s->mirror->service[0] == '\0') {
			BERR(mtd_cfg__at(b, s->mirror, NULL, NULL), p,
			     "is required (the services[] entry the copies go to)");
			continue;
		}
		cfg->services[i].local->mirror = service_index(m, s->mirror->service);
		if (cfg->services[i].local->mirror < 0)
			BERR(mtd_cfg__at(b, s->mirror, "service", NULL), p, "no services[] entry is named \"%s\"",
			     s->mirror->service);
		else if (cfg->services[i].local->mirror == (int)i)
			BERR(mtd_cfg__at(b, s->mirror, "service", NULL), p,
			     "\"%s\" is this entry: a mirror goes to another", s->mirror->service);
	}
}
