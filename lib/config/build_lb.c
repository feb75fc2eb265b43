/* A lb block (service or method) and the service's warmup and hash_key:
 * the options the chosen strategy uses, checked with lib/lb's own rules,
 * and refused where the strategy would ignore them. */
#include <config.h> /* autoconf (lib/config/config.h is the API) */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/build-int.h"
#include "lb/lb.h"
#include "pbwire/pbwire.h"

/* ---- load balancing ------------------------------------------------------ */

#define CHOICE_COUNT_MAX 64u /* config's own cap; lib/lb only needs >= 2 */

/* Reject an option the chosen strategy would silently ignore: each
 * strategy declares what it supports (struct lb_info), and a key that is
 * parsed but has no effect would mislead whoever wrote it. */
static bool lb_opt_allowed(struct builder *b, const struct lb_info *info, bool allowed, const PbLb *m,
                           const char *field, const char *path)
{
	char p[256];

	if (allowed)
		return true;
	BERR(mtd_cfg__at(b, m, field, NULL), mtd_cfg__sub(p, sizeof(p), path, field), "policy %s does not use %s",
	     info->policy, field);
	return false;
}

/* lb.orca: durations and the penalty, each range refused with its reason
 * here (lib/lb checks the same ranges again: mtd_lb_config_check). */
static void build_orca(struct builder *b, const Maitred__Config__V1__Orca *m, const char *path,
                       struct mtd_lb_orca_config *out)
{
	char p[256], op[256];

	mtd_cfg__sub(op, sizeof(op), path, "orca");
	out->blackout_ms =
	        mtd_cfg__dur_ms(b, m->blackout_period, MTD_LB_DEFAULT_ORCA_BLACKOUT_MS, ZERO_ALLOWED,
	                        mtd_cfg__at(b, m, "blackout_period", NULL), mtd_cfg__sub(p, sizeof(p), op, "blackout_period"));
	out->expiration_ms = mtd_cfg__dur_ms(b, m->weight_expiration_period, MTD_LB_DEFAULT_ORCA_EXPIRATION_MS,
	                                     ZERO_IS_ERROR, mtd_cfg__at(b, m, "weight_expiration_period", NULL),
	                                     mtd_cfg__sub(p, sizeof(p), op, "weight_expiration_period"));
	out->update_ms = mtd_cfg__dur_ms(b, m->weight_update_period, MTD_LB_DEFAULT_ORCA_UPDATE_MS, ZERO_IS_ERROR,
	                                 mtd_cfg__at(b, m, "weight_update_period", NULL),
	                                 mtd_cfg__sub(p, sizeof(p), op, "weight_update_period"));
	if (m->weight_update_period != NULL && out->update_ms > 0 && out->update_ms < MTD_LB_MIN_ORCA_UPDATE_MS) {
		BERR(mtd_cfg__at(b, m, "weight_update_period", NULL), p, "must be at least %dms, got %lldms",
		     MTD_LB_MIN_ORCA_UPDATE_MS, (long long)out->update_ms);
		out->update_ms = MTD_LB_DEFAULT_ORCA_UPDATE_MS;
	}
	if (m->error_utilization_penalty != NULL) {
		double v = m->error_utilization_penalty->value;

		if (!(isfinite(v) && v >= 0.0))
			BERR(mtd_cfg__at(b, m, "error_utilization_penalty", NULL),
			     mtd_cfg__sub(p, sizeof(p), op, "error_utilization_penalty"),
			     "must be a finite number >= 0, got %g", v);
		else
			out->error_penalty = v;
	}
	out->oob_period_ms = mtd_cfg__dur_ms(b, m->oob_reporting_period, MTD_LB_DEFAULT_ORCA_OOB_MS, ZERO_IS_ERROR,
	                                     mtd_cfg__at(b, m, "oob_reporting_period", NULL),
	                                     mtd_cfg__sub(p, sizeof(p), op, "oob_reporting_period"));
	if (m->oob_reporting_period != NULL && out->oob_period_ms > 0 && out->oob_period_ms < MTD_LB_MIN_ORCA_OOB_MS) {
		BERR(mtd_cfg__at(b, m, "oob_reporting_period", NULL), p, "must be at least %dms, got %lldms",
		     MTD_LB_MIN_ORCA_OOB_MS, (long long)out->oob_period_ms);
		out->oob_period_ms = MTD_LB_DEFAULT_ORCA_OOB_MS;
	}
	out->out_of_band = m->out_of_band;
}

/* The options as written, with lib/lb's defaults for the rest. The values
 * the strategy range-checks itself are checked by mtd_cfg__lb_check(), with the
 * strategy's own rule; choice_count keeps its stricter config cap here. */
void mtd_cfg__build_lb(struct builder *b, const PbLb *m, const void *owner, const char *path, struct mtd_lb_config *out,
                       struct lb_info *info)
{
	const ProtobufCEnumValue *ev;
	int policy = m != NULL ? (int)m->policy : 0;
	char p[256];
	unsigned caps;

	mtd_lb_config_defaults(out, NULL);
	out->n_workers = b->workers;

	if (policy == MAITRED__CONFIG__V1__LOAD_BALANCING__POLICY__POLICY_UNSPECIFIED)
		policy = MAITRED__CONFIG__V1__LOAD_BALANCING__POLICY__ROUND_ROBIN;
	info->policy_num = policy;
	info->caps = ~0u;
	ev = protobuf_c_enum_descriptor_get_value(&maitred__config__v1__load_balancing__policy__descriptor, policy);
	info->policy = ev != NULL ? ev->name : "?";
	mtd_cfg__sub(p, sizeof(p), path, "policy");
	if (ev == NULL) {
		BERR(mtd_cfg__at(b, m, "policy", owner), p, "unknown policy number %d", policy);
		return;
	}
	out->ops = mtd_lb_find(ev->name);
	if (out->ops == NULL) {
		BERR(mtd_cfg__at(b, m, "policy", owner), p, "policy %s is not available in this build", ev->name);
		return;
	}
	caps = info->caps = out->ops->caps;
	if (m == NULL)
		return;

	if (m->choice_count != 0 && lb_opt_allowed(b, info, caps & MTD_LB_CAP_CHOICE_COUNT, m, "choice_count", path)) {
		if (m->choice_count < 2 || m->choice_count > CHOICE_COUNT_MAX)
			BERR(mtd_cfg__at(b, m, "choice_count", NULL), mtd_cfg__sub(p, sizeof(p), path, "choice_count"),
			     "must be in 2..%u, got %u", CHOICE_COUNT_MAX, (unsigned)m->choice_count);
		else
			out->choice_count = m->choice_count;
	}
	/* lb-t.h: CAP_CHOICE_COUNT also covers active_request_bias. */
	if (m->active_request_bias != NULL &&
	    lb_opt_allowed(b, info, caps & MTD_LB_CAP_CHOICE_COUNT, m, "active_request_bias", path))
		out->active_request_bias = m->active_request_bias->value;
	if (m->ring_points != 0 && lb_opt_allowed(b, info, caps & MTD_LB_CAP_RING_POINTS, m, "ring_points", path))
		out->ring_points = m->ring_points;
	if (m->table_size != 0 && lb_opt_allowed(b, info, caps & MTD_LB_CAP_TABLE_SIZE, m, "table_size", path))
		out->table_size = m->table_size;
	if (m->bounded_load_factor != 0 &&
	    lb_opt_allowed(b, info, caps & MTD_LB_CAP_BOUNDED_LOAD, m, "bounded_load_factor", path))
		out->bounded_load_factor = m->bounded_load_factor;
	if (m->decay != NULL && lb_opt_allowed(b, info, caps & MTD_LB_CAP_DECAY, m, "decay", path))
		out->decay_ms =
		        mtd_cfg__dur_ms(b, m->decay, MTD_LB_DEFAULT_DECAY_MS, ZERO_IS_ERROR,
		                        mtd_cfg__at(b, m, "decay", NULL), mtd_cfg__sub(p, sizeof(p), path, "decay"));
	/* Ranges: mtd_cfg__lb_check() with lib/lb's rule (hot_keys.*). */
	if (m->hot_keys != NULL && lb_opt_allowed(b, info, caps & MTD_LB_CAP_HOT_KEYS, m, "hot_keys", path)) {
		out->hot_keys.threshold_per_second = m->hot_keys->threshold_per_second != 0
		                                             ? m->hot_keys->threshold_per_second
		                                             : MTD_LB_DEFAULT_HOT_THRESHOLD;
		out->hot_keys.spread = m->hot_keys->spread != 0 ? m->hot_keys->spread : MTD_LB_DEFAULT_HOT_SPREAD;
	}
	if (m->orca != NULL && lb_opt_allowed(b, info, caps & MTD_LB_CAP_ORCA, m, "orca", path))
		build_orca(b, m->orca, path, &out->orca);
}

/* The rule of lib/lb/picker.c's mtd_lb_config_check() that refused `field`,
 * in words, into buf; then put the field back to its default so the check
 * can go on to the next one. false for a field this list does not know. */
static bool lb_rule(struct mtd_lb_config *lb, const char *field, char *buf, size_t size)
{
	struct mtd_lb_config def;

	mtd_lb_config_defaults(&def, lb->ops);
	if (strcmp(field, "choice_count") == 0) {
		snprintf(buf, size, "must be in 2..%u, got %u", CHOICE_COUNT_MAX, (unsigned)lb->choice_count);
		lb->choice_count = def.choice_count;
	} else if (strcmp(field, "active_request_bias") == 0) {
		snprintf(buf, size, "must be a finite number >= 0");
		lb->active_request_bias = def.active_request_bias;
	} else if (strcmp(field, "ring_points") == 0) {
		snprintf(buf, size, "must be in 1..%u, got %u", MTD_LB_MAX_RING_POINTS, (unsigned)lb->ring_points);
		lb->ring_points = def.ring_points;
	} else if (strcmp(field, "table_size") == 0) {
		snprintf(buf, size, "must be a prime of at most %u, got %u", MTD_LB_MAX_TABLE_SIZE,
		         (unsigned)lb->table_size);
		lb->table_size = def.table_size;
	} else if (strcmp(field, "bounded_load_factor") == 0) {
		snprintf(buf, size, "must be 0 (unbounded) or greater than 1");
		lb->bounded_load_factor = def.bounded_load_factor;
	} else if (strcmp(field, "decay") == 0) {
		snprintf(buf, size, "must be at least 1ms");
		lb->decay_ms = def.decay_ms;
	} else if (strcmp(field, "warmup.duration") == 0) {
		snprintf(buf, size, "must not be negative");
		lb->warmup.duration_ms = 0;
	} else if (strcmp(field, "warmup.curve") == 0) {
		snprintf(buf, size, "unknown curve %d", (int)lb->warmup.curve);
		lb->warmup.curve = def.warmup.curve;
	} else if (strcmp(field, "warmup.aggression") == 0) {
		snprintf(buf, size, "must be greater than 0");
		lb->warmup.aggression = def.warmup.aggression;
	} else if (strcmp(field, "warmup.min_weight_percent") == 0) {
		snprintf(buf, size, "must be in 0..100");
		lb->warmup.min_weight_percent = def.warmup.min_weight_percent;
	} else if (strncmp(field, "orca.", 5) == 0) {
		/* build_orca() refused these with their reasons already. */
		snprintf(buf, size, "out of range");
		lb->orca = def.orca;
	} else if (strcmp(field, "hot_keys.spread") == 0) {
		snprintf(buf, size, "must be in 2..%u, got %u", MTD_LB_MAX_HOT_SPREAD, (unsigned)lb->hot_keys.spread);
		lb->hot_keys.spread = MTD_LB_DEFAULT_HOT_SPREAD;
	} else if (strcmp(field, "hot_keys.threshold_per_second") == 0) {
		snprintf(buf, size, "must be at least 1");
		lb->hot_keys.threshold_per_second = MTD_LB_DEFAULT_HOT_THRESHOLD;
	} else {
		return false;
	}
	return true;
}

/* Whatever mtd_lb_config_check() refuses in a built lb block (warmup
 * included) becomes a config error at the field it names, so a range the
 * strategy enforces is never a startup surprise. m/owner/path: the lb
 * block; svc/svc_path: its service, whose warmup the block carries. Every
 * refused field is reported, each once: it is reset after its error. */
void mtd_cfg__lb_check(struct builder *b, const PbLb *m, const void *owner, const char *path, const PbService *svc,
                       const char *svc_path, struct mtd_lb_config *lb)
{
	const char *field, *prev = "";
	char p[256], why[96];

	if (lb->ops == NULL)
		return; /* mtd_cfg__build_lb() said why */
	while (mtd_lb_config_check(lb, &field) != 0) {
		struct mtd_cfg__mark where;

		if (strncmp(field, "warmup.", 7) == 0) {
			where = mtd_cfg__at(b, svc->warmup, field + 7, svc);
			mtd_cfg__sub(p, sizeof(p), svc_path, field);
		} else if (strncmp(field, "hot_keys.", 9) == 0 && m != NULL) {
			where = mtd_cfg__at(b, m->hot_keys, field + 9, m);
			mtd_cfg__sub(p, sizeof(p), path, field);
		} else {
			where = mtd_cfg__at(b, m, field, owner);
			mtd_cfg__sub(p, sizeof(p), path, field);
		}
		if (strcmp(field, prev) == 0)
			return; /* its default is refused too: said once is enough */
		if (!lb_rule(lb, field, why, sizeof(why))) {
			BERR(where, p, "refused by policy %s", lb->ops->name);
			return;
		}
		BERR(where, p, "%s", why);
		prev = field;
	}
}

/* What mtd_lb_picker_new() would refuse for this service's endpoints
 * although every option is valid alone (checked after mtd_cfg__lb_check()):
 * maglev.c gives each endpoint that takes traffic (weight > 0; all of
 * them when none has) a slot of its own, so it needs as many slots. The
 * other strategies take any endpoint count up to MTD_LB_MAX_ENDPOINTS,
 * which mtd_cfg__build_service() enforces. */
void mtd_cfg__lb_fits_endpoints(struct builder *b, const PbLb *m, const void *owner, const char *path,
                                const struct mtd_lb_config *lb, const struct mtd_cfg_service *svc)
{
	struct mtd_lb_config trial = *lb;
	size_t members = 0;
	char p[256];

	if (lb->ops == NULL || !(lb->ops->caps & MTD_LB_CAP_TABLE_SIZE))
		return;
	for (size_t i = 0; i < svc->local->n_endpoints; i++)
		members += svc->local->endpoints[i].weight > 0;
	if (members == 0)
		members = svc->local->n_endpoints;
	if (members <= lb->table_size)
		return;
	/* The smallest table lib/lb accepts that is large enough (members <=
	 * MTD_LB_MAX_ENDPOINTS, far below MTD_LB_MAX_TABLE_SIZE). */
	trial.table_size = (uint32_t)members;
	while (trial.table_size < MTD_LB_MAX_TABLE_SIZE && mtd_lb_config_check(&trial, NULL) != 0)
		trial.table_size++;
	BERR(mtd_cfg__at(b, m, "table_size", owner), mtd_cfg__sub(p, sizeof(p), path, "table_size"),
	     "%u is smaller than the %zu endpoints taking traffic (policy %s "
	     "needs a slot for each); use a prime of at least %zu, e.g. %u",
	     (unsigned)lb->table_size, members, lb->ops->name, members, (unsigned)trial.table_size);
}

/* The ranges here are also lib/lb's (mtd_lb_config_check), which checks
 * them only for a policy that warms up. Checked here once per service,
 * whatever its policies, so mtd_cfg__lb_check() finds them valid and never repeats
 * them for each lb block carrying this warmup. */
void mtd_cfg__build_warmup(struct builder *b, const PbWarmup *m, const char *path, struct mtd_lb_warmup *out)
{
	char p[256];
	bool slow;

	out->duration_ms = 0;
	out->curve = MTD_LB_WARMUP_LINEAR;
	out->aggression = 1.0;
	out->min_weight_percent = 10;
	if (m == NULL)
		return;
	out->duration_ms = mtd_cfg__dur_ms(b, m->duration, 0, ZERO_ALLOWED, mtd_cfg__at(b, m, "duration", NULL),
	                                   mtd_cfg__sub(p, sizeof(p), path, "duration"));
	slow = m->curve == MAITRED__CONFIG__V1__WARMUP__CURVE__SLOW_START;
	if (slow)
		out->curve = MTD_LB_WARMUP_SLOW_START;
	if (m->aggression != NULL) {
		mtd_cfg__sub(p, sizeof(p), path, "aggression");
		if (!slow)
			BERR(mtd_cfg__at(b, m, "aggression", NULL), p, "applies only to curve SLOW_START");
		else if (!(isfinite(m->aggression->value) && m->aggression->value > 0))
			BERR(mtd_cfg__at(b, m, "aggression", NULL), p, "must be greater than 0");
		else
			out->aggression = m->aggression->value;
	}
	if (m->min_weight_percent != NULL) {
		double v = m->min_weight_percent->value;

		mtd_cfg__sub(p, sizeof(p), path, "min_weight_percent");
		if (!slow)
			BERR(mtd_cfg__at(b, m, "min_weight_percent", NULL), p, "applies only to curve SLOW_START");
		else if (!(v >= 0 && v <= 100))
			BERR(mtd_cfg__at(b, m, "min_weight_percent", NULL), p, "must be in 0..100");
		else
			out->min_weight_percent = v;
	}
}

/* ---- hash key ------------------------------------------------------------ */

/* The data plane hands hk->field_path to mtd_pbwire_find() as is. */
_Static_assert(MTD_CFG_FIELD_PATH_MAX == MTD_PBWIRE_MAX_DEPTH, "a config field path is a pbwire path");

#define FIELD_RESERVED_LO 19000u /* protobuf: reserved for the implementation */
#define FIELD_RESERVED_HI 19999u

/* Why mtd_pbwire_path_parse() refused s, in words. It only explains: what
 * is accepted is the pbwire parser's call, the extractor's own grammar. */
static const char *field_path_why(const char *s, char *buf, size_t size)
{
	size_t depth = 0;

	for (;;) {
		size_t n = strspn(s, "0123456789");

		if (n == 0 || (s[n] != '.' && s[n] != '\0'))
			return "expected field numbers separated by '.', e.g. \"2.1\"";
		if (n > 1 && s[0] == '0') {
			snprintf(buf, size, "field number \"%.*s\" has a leading zero", (int)n, s);
			return buf;
		}
		if (n > 10 || strtoul(s, NULL, 10) < 1 || strtoul(s, NULL, 10) > MTD_PBWIRE_MAX_FIELD) {
			snprintf(buf, size, "field number out of range 1..%u", MTD_PBWIRE_MAX_FIELD);
			return buf;
		}
		depth++;
		if (s[n] == '\0')
			break;
		s += n + 1;
	}
	if (depth > MTD_PBWIRE_MAX_DEPTH) {
		snprintf(buf, size, "path deeper than %d fields", MTD_PBWIRE_MAX_DEPTH);
		return buf;
	}
	return "not a field path"; /* the two grammars disagree: a bug here */
}

void mtd_cfg__build_hash_key(struct builder *b, const PbHashKey *m, const char *path, struct mtd_cfg_hash_key *out)
{
	bool has_h = m->header != NULL && m->header[0] != '\0';
	bool has_f = m->field != NULL && m->field[0] != '\0';
	char p[256], why[64];

	out->fail_on_missing = m->on_missing == MAITRED__CONFIG__V1__HASH_KEY__ON_MISSING__FAIL;
	if (has_h == has_f) {
		BERR(mtd_cfg__at(b, m, has_h ? "field" : NULL, NULL), path,
		     has_h ? "set exactly one of header or field, not both" : "set one of header or field");
		return;
	}
	if (has_h) {
		mtd_cfg__sub(p, sizeof(p), path, "header");
		out->header = mtd_cfg__metadata_key(b, m->header, mtd_cfg__at(b, m, "header", NULL), p);
		if (out->header == NULL)
			return;
		out->kind = MTD_CFG_HASH_HEADER;
		return;
	}
	mtd_cfg__sub(p, sizeof(p), path, "field");
	out->kind = MTD_CFG_HASH_FIELD;
	if (mtd_pbwire_path_parse(m->field, out->field_path, &out->field_depth) != 0) {
		out->field_depth = 0;
		BERR(mtd_cfg__at(b, m, "field", NULL), p, "bad field path \"%s\": %s", m->field,
		     field_path_why(m->field, why, sizeof(why)));
		return;
	}
	/* Stricter than the extractor: no .proto can declare these numbers, so
	 * such a path would never match a real message. */
	for (size_t i = 0; i < out->field_depth; i++) {
		if (out->field_path[i] >= FIELD_RESERVED_LO && out->field_path[i] <= FIELD_RESERVED_HI) {
			BERR(mtd_cfg__at(b, m, "field", NULL), p,
			     "bad field path \"%s\": field numbers %u..%u are reserved "
			     "by protobuf",
			     m->field, FIELD_RESERVED_LO, FIELD_RESERVED_HI);
			break;
		}
	}
}

void mtd_cfg__hash_key_copy(struct builder *b, struct mtd_cfg_hash_key *dst, const struct mtd_cfg_hash_key *src)
{
	*dst = *src;
	if (src->header != NULL)
		dst->header = mtd_cfg__dup_or_oom(b, src->header);
}
