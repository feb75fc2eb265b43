/* A reload as a transaction (reload.h): prepare, then commit or abort. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "core/log.h"
#include "sidecar/control/certwatch.h"
#include "sidecar/control/control-t.h"
#include "sidecar/control/control.h"
#include "sidecar/control/etcd.h"
#include "sidecar/control/reload.h"
#include "sidecar/control/runtime.h"
#include "sidecar/control/sources.h"
#include "sidecar/control/xds.h"
#include "sidecar/io/inbound.h"
#include "sidecar/ops/access_log.h"
#include "sidecar/ops/trace_export.h"

/* An xDS service's override over the reload's config, from the client in
 * force (its clusters serve on until a new client's stream reports). */
static struct mtd_rt_over *xds_over_now(struct mtd_control *ctl, const struct mtd_cfg_service *base)
{
	return mtd_xds_over_now(ctl->xds, base);
}

int mtd_reload_prepare(struct mtd_control *ctl, struct mtd_cfg *cfg, struct mtd_reload_tx *tx, char *err,
                       size_t errlen)
{
	memset(tx, 0, sizeof(*tx));
	tx->access_fd = -1;
	tx->reg_changed = !mtd_register_same_config(ctl->reg, cfg);
	if (mtd_access_log_open(cfg, &tx->access_fd, err, errlen) < 0) {
		mtd_cfg_free(cfg);
		return -1;
	}
	/* The inbound set before the runtime: its entries point into cfg,
	 * which the runtime then owns (and frees, when it fails). */
	struct mtd_rt_inset *in = mtd_inbound_set_build(cfg, ctl->rt->inbound, ctl->n_workers, err, errlen);
	if (!in && cfg->n_inbound) {
		mtd_cfg_free(cfg);
		goto fail;
	}
	tx->rt = mtd_runtime_reload(ctl, cfg, xds_over_now, err, errlen);
	if (!tx->rt) {
		mtd_rt_inset_unref(in);
		goto fail;
	}
	mtd_runtime_set_inbound(tx->rt, in);
	if (mtd_certwatch_prepare(ctl->certs, tx->rt, &tx->cw, err, errlen) < 0)
		goto fail;
	if (mtd_reload_tracing(ctl, tx->rt, &tx->trace, err, errlen) < 0)
		goto fail;
	if (mtd_xds_prepare(ctl, tx->rt->cfg, &tx->xds, err, errlen) < 0)
		goto fail;
	return 0;
fail:
	mtd_reload_abort(tx);
	return -1;
}

int mtd_reload_tracing(struct mtd_control *ctl, struct mtd_runtime *rt, struct mtd_trace_target **target, char *err,
                       size_t errlen)
{
	*target = NULL;
	rt->tracer = NULL;
	if (!rt->cfg->tracing)
		return 0;
	*target = mtd_trace_target_new(rt->cfg->tracing, err, errlen);
	if (!*target)
		return -1;
	/* Started here, not at the commit, because it can fail; a refused
	 * reload leaves it running with no target, which exports nothing. */
	if (!ctl->tracer && !(ctl->tracer = mtd_tracer_start(ctl->run_workers, err, errlen))) {
		mtd_trace_target_free(*target);
		*target = NULL;
		return -1;
	}
	rt->tracer = ctl->tracer;
	return 0;
}

void mtd_reload_abort(struct mtd_reload_tx *tx)
{
	mtd_trace_target_free(tx->trace);
	mtd_certwatch_abort(tx->cw);
	mtd_xds_free(tx->xds);
	/* Never published. The sockets of new listen addresses close now
	 * (the set's last reference), not at the reclaim: nothing may
	 * accept there meanwhile. The runtime goes to the reclaim mailbox. */
	if (tx->rt) {
		mtd_runtime_set_inbound(tx->rt, NULL);
		mtd_runtime_unref(tx->rt);
	}
	if (tx->access_fd >= 0)
		close(tx->access_fd);
	memset(tx, 0, sizeof(*tx));
	tx->access_fd = -1;
}

/* A changed `register` applies live: the new entries register, then the
 * old leases go (mtd_register_handover), so a record both configs keep
 * never disappears from etcd. */
static void reload_register(struct mtd_control *ctl)
{
	struct mtd_register *next = mtd_register_start(ctl->base, ctl->rt->cfg);

	if (next == NULL || !mtd_register_handover(ctl->reg, next)) {
		mtd_register_free(next);
		MTD_ERROR("reload: register changed but its new entries cannot start (out of memory or unusable etcd "
		          "TLS files, said above): the previous registration stays");
		return;
	}
	MTD_INFO("reload: register changed: %zu entr%s now, the old leases go once they are live",
	         ctl->rt->cfg->n_registers, ctl->rt->cfg->n_registers == 1 ? "" : "ies");
	ctl->reg = next;
}

void mtd_reload_commit(struct mtd_control *ctl, struct mtd_reload_tx *tx)
{
	struct mtd_runtime *rt = tx->rt;
	struct mtd_rt_inset *was = ctl->rt->inbound;
	if (was)
		mtd_ref_get(&was->ref);
	mtd_inbound_set_log(was, rt->inbound);
	mtd_access_log_apply(rt->cfg, tx->access_fd);
	if (ctl->tracer)
		mtd_tracer_set_target(ctl->tracer, tx->trace); /* NULL: tracing off */
	tx->trace = NULL;
	mtd_sources_stop(ctl);
	/* The xds client's routes, bound to the new services. */
	mtd_xds_carry_routes(ctl->xds, rt);
	mtd_control_publish(ctl, rt);
	mtd_inbound_set_retire(was, rt->inbound);
	mtd_rt_inset_unref(was);
	/* Between the sources: the services bind to the client that stays or
	 * to the new one. */
	mtd_xds_commit(ctl, tx->xds);
	mtd_sources_start(ctl);
	if (tx->reg_changed)
		reload_register(ctl);
	mtd_certwatch_commit(ctl->certs, tx->cw);
	memset(tx, 0, sizeof(*tx));
	tx->access_fd = -1;
}
