/* The xDS client's /config_dump value (xds.h, mtd_xds_dump): the server,
 * the connection, and per type and per resource what was accepted, when,
 * and the last refusal. Control thread only. */
#include "config.h"

#include <stddef.h>

#include "admin/admin.h"
#include "sidecar/control/xds-int.h"
#include "sidecar/control/xds.h"
#include "sidecar/ops/metrics.h"

/* ---- /config_dump ----------------------------------------------------------------- */

static void dump_opt(struct mtd_json *j, const char *key, const char *v)
{
	mtd_json_key(j, key);
	if (v != NULL)
		mtd_json_str(j, v);
	else
		mtd_json_null(j);
}

/* Type t's object, named by its resources ("clusters", ...): what the
 * type's last response said, then its resources' array, left open. */
static void type_begin(struct mtd_json *j, const struct mtd_xds *x, int t)
{
	static const char *const key[N_TYPES] = {
	        [T_CDS] = "clusters", [T_EDS] = "endpoints", [T_LDS] = "listeners", [T_RDS] = "routes"};

	mtd_json_key(j, key[t]);
	mtd_json_obj_begin(j);
	mtd_json_key(j, "type_url");
	mtd_json_str(j, xds_type_url[t]);
	dump_opt(j, "version", x->t[t].version);
	dump_opt(j, "nonce", x->t[t].nonce);
	dump_opt(j, "last_nack", x->t[t].nack);
	mtd_json_key(j, "resources");
	mtd_json_arr_begin(j);
}

/* LDS or RDS: its one resource. */
static void dump_one(struct mtd_json *j, const struct mtd_xds *x, int t)
{
	const struct xds_one *o = t == T_LDS ? &x->lds : &x->rds;

	type_begin(j, x, t);
	if (o->name != NULL) {
		mtd_json_obj_begin(j);
		dump_opt(j, "name", o->name);
		mtd_json_key(j, "state");
		mtd_json_str(j, o->have ? "ACKED" : o->nack ? "NACKED" : "REQUESTED");
		dump_opt(j, "detail", o->detail);
		dump_opt(j, "version", o->stamp ? o->stamp->version : NULL);
		dump_opt(j, "nonce", o->stamp ? o->stamp->nonce : NULL);
		dump_opt(j, "last_nack", o->nack);
		mtd_json_obj_end(j);
	}
	mtd_json_arr_end(j);
	mtd_json_obj_end(j);
}

void mtd_xds_dump(const struct mtd_xds *x, struct mtd_json *j)
{
	if (x == NULL) {
		mtd_json_null(j);
		return;
	}
	mtd_json_obj_begin(j);
	dump_opt(j, "server", x->server.text);
	mtd_json_key(j, "tls");
	mtd_json_bool(j, x->ssl_ctx != NULL);
	dump_opt(j, "node_id", x->node_id);
	dump_opt(j, "zone", x->zone);
	mtd_json_key(j, "connected");
	mtd_json_bool(j, x->ads != NULL && mtd_metrics_xds()->connected);
	dump_opt(j, "last_disconnect", x->down_why);
	mtd_json_key(j, "rebuilds_pending");
	mtd_json_u64(j, x->pending.n);
	for (int t = 0; t < N_TYPES; t++) {
		if (t == T_LDS || t == T_RDS) {
			dump_one(j, x, t);
			continue;
		}
		type_begin(j, x, t);
		size_t n = t == T_CDS ? x->n_cls : x->n_clas;
		for (size_t i = 0; i < n; i++) {
			mtd_json_obj_begin(j);
			if (t == T_CDS) {
				const struct xds_cl *e = &x->cls[i];
				dump_opt(j, "name", e->name);
				mtd_json_key(j, "state");
				mtd_json_str(j, e->have ? "ACKED" : e->nack ? "NACKED" : "REQUESTED");
				if (e->have) {
					dump_opt(j, "eds_service_name", e->c.eds_name);
					dump_opt(j, "lb_policy", e->c.lb.ops ? e->c.lb.ops->name : NULL);
					dump_opt(j, "transport",
					         e->c.tls ? "tls"
					         : e->c.tls_only_in_matches
					                 ? "h2c (TLS only in transport_socket_matches, not read)"
					                 : "h2c");
					if (e->c.tls != NULL) {
						/* Which certificate provider instances of the
						 * bootstrap the files came from (none: named). */
						dump_opt(j, "ca_certificate_provider_instance", e->c.tls->ca_instance);
						dump_opt(j, "tls_certificate_provider_instance",
						         e->c.tls->cert_instance);
					}
				}
				dump_opt(j, "version", e->stamp ? e->stamp->version : NULL);
				dump_opt(j, "nonce", e->stamp ? e->stamp->nonce : NULL);
				dump_opt(j, "last_nack", e->nack);
			} else {
				const struct xds_cla *e = &x->clas[i];
				dump_opt(j, "name", e->name);
				mtd_json_key(j, "state");
				mtd_json_str(j, e->raw ? "ACKED" : e->nack ? "NACKED" : "REQUESTED");
				if (e->raw) {
					mtd_json_key(j, "endpoints");
					mtd_json_u64(j, e->n);
					mtd_json_key(j, "priority");
					mtd_json_u64(j, e->priority);
					mtd_json_key(j, "not_picked");
					mtd_json_u64(j, e->n_skipped);
				}
				mtd_json_key(j, "updates");
				mtd_json_u64(j, e->updates);
				dump_opt(j, "version", e->stamp ? e->stamp->version : NULL);
				dump_opt(j, "nonce", e->stamp ? e->stamp->nonce : NULL);
				dump_opt(j, "last_nack", e->nack);
			}
			mtd_json_obj_end(j);
		}
		mtd_json_arr_end(j);
		mtd_json_obj_end(j);
	}
	mtd_json_obj_end(j);
}
