/* The xDS client's LDS and RDS responses (xds.c has the overview): the
 * one listener of xds.listener, the route configuration its connection
 * manager names (or carries inline), and the routes in force: bound to
 * the running config's services (xds_routes.c), with the services created
 * for clusters no service of the file follows (a reload of the running
 * config, reload.h), and carried to a reloaded config's. Control thread
 * only. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/log.h"
#include "sidecar/control/control-t.h"
#include "sidecar/control/control.h"
#include "sidecar/control/reload.h"
#include "sidecar/control/runtime-t.h"
#include "sidecar/control/runtime.h"
#include "sidecar/control/xds-int.h"
#include "sidecar/control/xds.h"
#include "sidecar/control/xds_routes.h"

/* ---- LDS and RDS ------------------------------------------------------------ */

void xds_one_clear(struct xds_one *o)
{
	free(o->name);
	xds_stamp_put(o->stamp);
	free(o->nack);
	free(o->detail);
	memset(o, 0, sizeof(*o));
}

static bool fault_same(const struct mtd_xds_fault *a, const struct mtd_xds_fault *b)
{
	const struct mtd_cfg_fault_injection *p = &a->fi, *q = &b->fi;

	return xds_same_str(a->filter, b->filter) && p->abort == q->abort && p->abort_percent == q->abort_percent &&
	       p->abort_status == q->abort_status && p->delay == q->delay && p->delay_percent == q->delay_percent &&
	       p->delay_ms == q->delay_ms;
}

/* The running config with the services created for want (n sorted
 * cluster names) in place of those it has: a reload of the same config
 * (reload.h: one snapshot, calls in flight finish on the old one), whose
 * commit binds box's routes (carry_routes) to its services. 0, or -1 with
 * the reason in why (nothing changed). */
static int recreate(struct mtd_xds *x, struct mtd_xds_routes_box *box, const char *const *want, size_t n, char *why,
                    size_t whylen)
{
	struct mtd_control *ctl = x->ctl;
	struct mtd_cfg_errors errs = {0};
	struct mtd_cfg *cfg;
	struct mtd_reload_tx tx;

	if (ctl->draining) {
		snprintf(why, whylen, "maitred is draining: no service is created or removed");
		return -1;
	}
	int rc = mtd_cfg_with_xds_services(ctl->rt->cfg, want, n, &cfg, &errs);
	if (rc != 0) {
		snprintf(why, whylen, "the services for its clusters: %s",
		         errs.n ? errs.msgs[0] : rc == -ENOMEM ? "out of memory" : "refused");
		mtd_cfg_errors_clear(&errs);
		return -1;
	}
	mtd_cfg_errors_clear(&errs);
	struct mtd_rt_xroutes *probe = mtd_xds_routes_bind(cfg, box, &x->fault, why, whylen);
	if (probe == NULL) {
		mtd_cfg_free(cfg);
		return -1;
	}
	mtd_rt_xroutes_unref(probe);
	if (mtd_reload_prepare(ctl, cfg, &tx, why, whylen) < 0)
		return -1;
	if (box != x->routes) {
		box->refs++;
		mtd_xds_routes_box_put(x->routes);
		x->routes = box;
	}
	mtd_reload_commit(ctl, &tx);
	MTD_INFO("xds: %zu service%s created for the clusters of route configuration %s (%zu in all)", n,
	         n == 1 ? "" : "s", box->r->name, ctl->rt->cfg->n_routed);
	return 0;
}

/* The routes of box (a reference transferred) become the ones in force:
 * bound to the running config's services and published in one snapshot;
 * when they name clusters no service of the file follows, with the
 * services created for them (and those no route names any more gone).
 * 0, or -1 with the reason in why (the routes in force stay). */
static int install_routes(struct mtd_xds *x, struct mtd_xds_routes_box *box, char *why, size_t whylen)
{
	const char **want;
	size_t n_want;

	/* Before a reload for the services they create: the new runtime
	 * takes the answer with the routes (mtd_xds_carry_routes). */
	x->routes_answered = true;

	if (mtd_xds_routes_created(x->ctl->rt->cfg, box->r, &want, &n_want) != 0) {
		snprintf(why, whylen, "out of memory");
		return -1;
	}
	if (!mtd_xds_routes_created_same(x->ctl->rt->cfg, want, n_want)) {
		int rc = recreate(x, box, want, n_want, why, whylen);
		free(want);
		if (rc == 0)
			MTD_INFO("xds: %zu route%s of route configuration %s in force", box->r->n,
			         box->r->n == 1 ? "" : "s", box->r->name);
		return rc;
	}
	free(want);
	struct mtd_rt_xroutes *xr = mtd_xds_routes_bind(x->ctl->rt->cfg, box, &x->fault, why, whylen);

	if (xr == NULL)
		return -1;
	struct mtd_rt_batch *bt = mtd_control_batch_begin(x->ctl);
	if (bt == NULL) {
		mtd_rt_xroutes_unref(xr);
		snprintf(why, whylen, "out of memory");
		return -1;
	}
	mtd_runtime_batch_set_xroutes(bt, xr);
	mtd_runtime_batch_routes_answered(bt);
	mtd_control_batch_publish(x->ctl, bt);
	if (box != x->routes) {
		box->refs++;
		mtd_xds_routes_box_put(x->routes);
		x->routes = box;
	}
	MTD_INFO("xds: %zu route%s of route configuration %s in force", box->r->n, box->r->n == 1 ? "" : "s",
	         box->r->name);
	return 0;
}

/* The server answered for the listener without routes to install (see
 * `routes_answered`): calls waiting for them go on by :path. */
static void answered_without_routes(struct mtd_xds *x, const char *what)
{
	x->routes_answered = true;
	if (!x->ctl->rt->routes_awaited)
		return;
	struct mtd_rt_batch *bt = mtd_control_batch_begin(x->ctl);
	if (bt == NULL) {
		/* The calls' wait (xds.initial_wait) ends them instead. */
		MTD_WARN("xds: out of memory: calls waiting for the routes of %s wait out xds.initial_wait",
		         x->lds.name);
		return;
	}
	mtd_runtime_batch_routes_answered(bt);
	mtd_control_batch_publish(x->ctl, bt);
	MTD_INFO("xds: listener %s: %s: calls are routed by :path", x->lds.name, what);
}

/* The translated routes r (taken) of resource o: installed, or refused
 * into the NACK text. */
static void take_routes(struct mtd_xds *x, struct xds_one *o, const char *name, struct mtd_xds_routes *r, char *nack,
                        size_t *nack_len)
{
	char why[1024];
	struct mtd_xds_routes_box *box = mtd_xds_routes_box_new(r);

	if (box == NULL || install_routes(x, box, why, sizeof(why)) != 0) {
		if (box == NULL)
			snprintf(why, sizeof(why), "out of memory");
		xds_nack_add(nack, nack_len, name, why);
		xds_set_str(&o->nack, why);
	}
	mtd_xds_routes_box_put(box);
}

/* LDS: the one listener of xds.listener. Its connection manager names a
 * route configuration (subscribed by RDS; the routes in force stay until
 * it comes) or carries one inline. A listener the response lacks keeps
 * the routes in force. */
/* Whether resource any (of type url, a `kind`) is the one of name `asked`,
 * its name read into name (MTD_XDS_NAME_MAX + 1 bytes): 1 it is; 0 it
 * surely is not (skipped unread); -1 its name is not sure, so it may be:
 * NACKed here. A resource without a name ("(unnamed)") is never the one
 * of that name. */
static int asked_for(const char *url, const char *kind, const char *asked, const struct mtd_xds_any *any, char *name,
                     char *nack, size_t *nack_len)
{
	char why[128];
	int named = xds_name_of(url, any, name, MTD_XDS_NAME_MAX + 1);

	if (named >= 0 && asked != NULL && strcmp(name, asked) == 0)
		return 1;
	if (named == MTD_XDS_NAME_EXACT || named == MTD_XDS_NAME_LONG)
		return 0;
	snprintf(why, sizeof(why),
	         "a %s whose name is not sure (it does not decode, or its name is missing or holds a NUL)", kind);
	xds_nack_add(nack, nack_len, name, why);
	return -1;
}

void xds_on_listener(struct mtd_xds *x, const struct mtd_xds_response *r, char *nack, size_t *nack_len,
                     struct xds_stamp **st)
{
	char why[1024], name[MTD_XDS_NAME_MAX + 1];
	bool found = false, refused = false, unnamed = false;

	for (size_t i = 0; i < r->n_res; i++) {
		const struct mtd_xds_any *any = &r->res[i];
		struct mtd_xds_listener l;

		if (!mtd_xds_any_is(any, MTD_XDS_TYPE_LISTENER)) {
			xds_nack_add(nack, nack_len, "(resource)", "not a Listener");
			unnamed = true;
			continue;
		}
		int asked = asked_for(MTD_XDS_TYPE_LISTENER, "Listener", x->lds.name, any, name, nack, nack_len);
		if (asked <= 0) {
			unnamed |= asked < 0; /* it may be the one asked for: not taken as absent */
			continue;
		}
		if (found) {
			/* The first one of the name stands, as in CDS. */
			xds_nack_add(nack, nack_len, name, "sent twice in one response");
			continue;
		}
		found = true;
		int rc = mtd_xds_listener_parse(any->value, any->len, &l, why, sizeof(why));
		if (rc != 0) {
			xds_nack_add(nack, nack_len, name, rc == -ENOMEM ? "out of memory" : why);
			xds_set_str(&x->lds.nack, rc == -ENOMEM ? "out of memory" : why);
			refused = true;
			continue;
		}
		size_t before = *nack_len;
		/* The new fault filter binds the routes from here on; given
		 * back if they do not bind under it. */
		bool fault_changed = !fault_same(&x->fault, &l.fault);
		struct mtd_xds_fault old = x->fault;
		x->fault = l.fault;
		l.fault = old;
		if (l.routes != NULL) {
			take_routes(x, &x->lds, name, l.routes, nack, nack_len);
			l.routes = NULL;
		} else if (fault_changed && x->routes != NULL && install_routes(x, x->routes, why, sizeof(why)) != 0) {
			xds_nack_add(nack, nack_len, name, why);
			xds_set_str(&x->lds.nack, why);
		}
		if (*nack_len != before) {
			old = x->fault;
			x->fault = l.fault;
			l.fault = old;
			mtd_xds_listener_clear(&l);
			refused = true;
			continue;
		}
		x->lds.have = true;
		xds_set_str(&x->lds.nack, NULL);
		xds_stamp_take(&x->lds.stamp, st, r);
		snprintf(why, sizeof(why), "%s%.1000s", l.rds_name ? "rds " : "inline routes",
		         l.rds_name ? l.rds_name : "");
		xds_set_str(&x->lds.detail, why);
		if (!xds_same_str(x->rds.name, l.rds_name)) {
			xds_one_clear(&x->rds);
			x->rds.name = l.rds_name; /* taken */
			l.rds_name = NULL;
			x->t[T_RDS].subscribed = false;
			x->rds_resub = true;
		}
		mtd_xds_listener_clear(&l);
	}
	if (x->lds.name != NULL && ((!found && !unnamed) || refused))
		answered_without_routes(x, found ? "refused" : "absent from the server's listeners");
}

/* RDS: the route configuration the listener names. */
void xds_on_routes(struct mtd_xds *x, const struct mtd_xds_response *r, char *nack,
                   size_t *nack_len, struct xds_stamp **st)
{
	char why[1024], name[MTD_XDS_NAME_MAX + 1];
	bool found = false, refused = false;

	for (size_t i = 0; i < r->n_res; i++) {
		const struct mtd_xds_any *any = &r->res[i];
		struct mtd_xds_routes *routes;

		if (!mtd_xds_any_is(any, MTD_XDS_TYPE_ROUTE)) {
			xds_nack_add(nack, nack_len, "(resource)", "not a RouteConfiguration");
			continue;
		}
		if (asked_for(MTD_XDS_TYPE_ROUTE, "RouteConfiguration", x->rds.name, any, name, nack, nack_len) <= 0)
			continue;
		if (found) {
			xds_nack_add(nack, nack_len, name, "sent twice in one response");
			continue;
		}
		found = true;
		int rc = mtd_xds_routes_parse(any->value, any->len, x->lds.name, &routes, why, sizeof(why));
		if (rc != 0) {
			xds_nack_add(nack, nack_len, name, rc == -ENOMEM ? "out of memory" : why);
			xds_set_str(&x->rds.nack, rc == -ENOMEM ? "out of memory" : why);
			refused = true;
			continue;
		}
		size_t before = *nack_len, n = routes->n;
		take_routes(x, &x->rds, name, routes, nack, nack_len);
		if (*nack_len != before) {
			refused = true;
			continue;
		}
		x->rds.have = true;
		xds_set_str(&x->rds.nack, NULL);
		xds_stamp_take(&x->rds.stamp, st, r);
		snprintf(why, sizeof(why), "%zu route%s", n, n == 1 ? "" : "s");
		xds_set_str(&x->rds.detail, why);
	}
	/* A route configuration the response lacks is not one the server
	 * says it has not (unlike a listener: LDS responses hold every
	 * resource asked for): calls wait on, at most xds.initial_wait. */
	if (x->rds.name != NULL && refused)
		answered_without_routes(x, "its route configuration was refused");
}

/* ---- across a reload ---------------------------------------------------------- */

struct mtd_cfg *mtd_xds_keep_created(struct mtd_xds *x, struct mtd_cfg *cfg)
{
	const char **want;
	size_t n_want;

	if (x == NULL || x->routes == NULL || cfg->xds == NULL || !xds_same_str(cfg->xds->listener, x->lds.name))
		return cfg;
	if (mtd_xds_routes_created(cfg, x->routes->r, &want, &n_want) != 0) {
		MTD_WARN("xds: out of memory: the services created for the routes' clusters are not kept");
		return cfg;
	}
	if (n_want == 0) {
		free(want);
		return cfg;
	}
	struct mtd_cfg_errors errs = {0};
	struct mtd_cfg *with;
	int rc = mtd_cfg_with_xds_services(cfg, want, n_want, &with, &errs);
	free(want);
	if (rc != 0) {
		MTD_WARN("xds: the services created for the routes' clusters are not kept (%s)",
		         errs.n ? errs.msgs[0] : "out of memory");
		mtd_cfg_errors_clear(&errs);
		return cfg;
	}
	mtd_cfg_errors_clear(&errs);
	mtd_cfg_free(cfg);
	return with;
}

void mtd_xds_carry_routes(struct mtd_xds *x, struct mtd_runtime *rt)
{
	char why[1024];

	/* The new config's listener must be the one whose routes they are. */
	if (x == NULL || rt->cfg->xds == NULL || !xds_same_str(rt->cfg->xds->listener, x->lds.name))
		return;
	if (x->routes_answered)
		rt->routes_awaited = false;
	if (x->routes == NULL || rt->xroutes != NULL)
		return;
	rt->xroutes = mtd_xds_routes_bind(rt->cfg, x->routes, &x->fault, why, sizeof(why));
	if (rt->xroutes == NULL)
		MTD_WARN("xds: the routes of %s no longer fit the config (%s): calls are routed by :path until a "
		         "route configuration that does arrives",
		         x->routes->r->name, why);
}
