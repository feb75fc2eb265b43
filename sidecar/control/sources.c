/* The endpoint sources of the current config (sources.h): one per service
 * whose endpoints are not a static list of addresses (DNS, etcd, xDS), started
 * after the snapshot is in force and stopped before a reload's is. A
 * source reports through control.h (mtd_control_set_endpoints); nothing
 * here publishes. Control thread only. */
#include "config.h"

#include <stdlib.h>

#include "core/log.h"
#include "sidecar/control/control-t.h"
#include "sidecar/control/control.h"
#include "sidecar/control/dns.h"
#include "sidecar/control/etcd.h"
#include "sidecar/control/runtime.h"
#include "sidecar/control/sources.h"
#include "sidecar/control/xds.h"

/* ---- endpoint sources ------------------------------------------------------ */

static const struct mtd_disc_source_ops *source_of(const struct mtd_cfg_service *sc)
{
	switch (sc->local->source) {
	case MTD_CFG_SOURCE_DNS:
		return &mtd_dns_source_ops;
	case MTD_CFG_SOURCE_STATIC:
		/* Host names in static endpoints: all their addresses, refreshed
		 * through the same resolver as discovery.dns. */
		for (size_t i = 0; i < sc->local->n_endpoints; i++)
			if (!mtd_rt_host_is_literal(sc->local->endpoints[i].addr.host))
				return &mtd_dns_static_source_ops;
		return NULL;
	case MTD_CFG_SOURCE_ETCD:
		return &mtd_etcd_source_ops;
	case MTD_CFG_SOURCE_XDS:
		return &mtd_xds_source_ops;
	}
	return NULL;
}

void mtd_sources_start(struct mtd_control *ctl)
{
	const struct mtd_cfg *cfg = ctl->rt->cfg;
	mtd_sources_stop(ctl);
	ctl->src_ops = calloc(cfg->n_services ? cfg->n_services : 1, sizeof(*ctl->src_ops));
	ctl->src_state = calloc(cfg->n_services ? cfg->n_services : 1, sizeof(*ctl->src_state));
	if (!ctl->src_ops || !ctl->src_state) {
		MTD_ERROR("out of memory: endpoint sources not started");
		free(ctl->src_ops);
		free(ctl->src_state);
		ctl->src_ops = NULL;
		ctl->src_state = NULL;
		return;
	}
	ctl->n_src = cfg->n_services;
	/* The first start: the xDS client the services bind to (a reload
	 * prepares and commits its own, reload.c). */
	if (cfg->xds != NULL && ctl->xds == NULL) {
		struct mtd_xds *x = NULL;
		char why[300];
		if (mtd_xds_prepare(ctl, cfg, &x, why, sizeof(why)) != 0)
			MTD_ERROR("%s: the services with discovery.xds get no endpoints", why);
		else
			mtd_xds_commit(ctl, x);
	}
	for (size_t i = 0; i < cfg->n_services; i++) {
		const struct mtd_disc_source_ops *ops = source_of(&cfg->services[i]);
		if (!ops)
			continue;
		if (ops->start(ctl, i, &cfg->services[i], &ctl->src_state[i]) == 0)
			ctl->src_ops[i] = ops;
		else
			MTD_ERROR("service %s: cannot start its %s source", cfg->services[i].local->name, ops->name);
	}
	mtd_xds_sources_started(ctl->xds);
}

void mtd_sources_stop(struct mtd_control *ctl)
{
	for (size_t i = 0; i < ctl->n_src; i++)
		if (ctl->src_ops[i])
			ctl->src_ops[i]->stop(ctl->src_state[i]);
	free(ctl->src_ops);
	free(ctl->src_state);
	ctl->src_ops = NULL;
	ctl->src_state = NULL;
	ctl->n_src = 0;
}
