/* The routing layer of a service (lib/lb/layer.c): routing (tag pinning),
 * subset and locality. */
#include <config.h> /* autoconf (lib/config/config.h is the API) */


#include "config/build-int.h"

void mtd_cfg__build_routing(struct builder *b, const PbRouting *m, const char *path, struct mtd_cfg_routing *out)
{
	char p[256];

	*out = (struct mtd_cfg_routing){.fallback_fail = m->fallback == MAITRED__CONFIG__V1__ROUTING__FALLBACK__FAIL};
	mtd_cfg__sub(p, sizeof(p), path, "header");
	if (m->header[0] == '\0') {
		BERR(mtd_cfg__at(b, m, NULL, NULL), p, "is required (the request metadata key carrying the tag)");
	} else {
		out->header = mtd_cfg__metadata_key(b, m->header, mtd_cfg__at(b, m, "header", NULL), p);
		if (out->header == NULL)
			return;
	}
	mtd_cfg__sub(p, sizeof(p), path, "metadata_key");
	if (m->metadata_key[0] == '\0')
		BERR(mtd_cfg__at(b, m, NULL, NULL), p, "is required (the endpoint metadata key to match)");
	else
		out->metadata_key = mtd_cfg__dup_or_oom(b, m->metadata_key);
}

/* The layer options of a service (or method, with its routing). */
void mtd_cfg__layer_resolve(struct builder *b, const struct mtd_cfg_service *svc, const struct mtd_cfg_routing *r,
                            struct mtd_lb_layer_config *out)
{
	*out = svc->local->layer;
	out->metadata_key = r->metadata_key;
	out->fallback_fail = r->fallback_fail;
}

/* Service.subset (lib/lb/subset.c): RING needs this sidecar's index and
 * the count, RENDEZVOUS neither; a key the mode would ignore is refused. */
static void build_subset(struct builder *b, const PbSubset *m, const char *path, struct mtd_lb_subset_config *out)
{
	bool ring;
	char p[256];

	*out = (struct mtd_lb_subset_config){.mode = MTD_LB_SUBSET_RENDEZVOUS};
	if (m == NULL)
		return;
	out->size = m->size;
	switch (m->mode) {
	case MAITRED__CONFIG__V1__SUBSET__MODE__MODE_UNSPECIFIED:
		ring = m->count > 0;
		break;
	case MAITRED__CONFIG__V1__SUBSET__MODE__RENDEZVOUS:
		ring = false;
		break;
	case MAITRED__CONFIG__V1__SUBSET__MODE__RING:
		ring = true;
		break;
	default:
		BERR(mtd_cfg__at(b, m, "mode", NULL), mtd_cfg__sub(p, sizeof(p), path, "subset.mode"),
		     "unknown mode %d", (int)m->mode);
		return;
	}
	if (m->size == 0 &&
	    (m->mode != MAITRED__CONFIG__V1__SUBSET__MODE__MODE_UNSPECIFIED || m->index != NULL || m->count > 0))
		BERR(mtd_cfg__at(b, m, "size", NULL), mtd_cfg__sub(p, sizeof(p), path, "subset.size"),
		     "is required with mode, index or count (0 keeps every endpoint)");
	if (!ring) {
		if (m->index != NULL)
			BERR(mtd_cfg__at(b, m, "index", NULL), mtd_cfg__sub(p, sizeof(p), path, "subset.index"),
			     m->mode == MAITRED__CONFIG__V1__SUBSET__MODE__RENDEZVOUS
			             ? "is for mode RING (RENDEZVOUS places this sidecar by node_id)"
			             : "needs count (how many sidecars share the service)");
		if (m->count > 0)
			BERR(mtd_cfg__at(b, m, "count", NULL), mtd_cfg__sub(p, sizeof(p), path, "subset.count"),
			     "is for mode RING (RENDEZVOUS places this sidecar by node_id)");
		return;
	}
	out->mode = MTD_LB_SUBSET_RING;
	if (m->count == 0)
		BERR(mtd_cfg__at(b, m, "mode", NULL), mtd_cfg__sub(p, sizeof(p), path, "subset.count"),
		     "is required with mode RING (how many sidecars share the service)");
	if (m->index == NULL)
		BERR(mtd_cfg__at(b, m, m->count > 0 ? "count" : "mode", NULL),
		     mtd_cfg__sub(p, sizeof(p), path, "subset.index"),
		     "is required with mode RING (this sidecar's index, 0 .. count - 1)");
	else if (m->count > 0 && m->index->value >= m->count)
		BERR(mtd_cfg__at(b, m, "index", NULL), mtd_cfg__sub(p, sizeof(p), path, "subset.index"),
		     "%u is not below count (%u)", (unsigned)m->index->value, (unsigned)m->count);
	if (m->count == 0 || m->index == NULL || m->index->value >= m->count)
		return;
	out->index = m->index->value;
	out->count = m->count;
}

void mtd_cfg__build_locality(struct builder *b, const PbService *m, const char *path, struct mtd_cfg_service *out)
{
	const PbLocality *l = m->locality;
	char p[256];

	out->local->layer.zone = b->zone;
	out->local->layer.node_id = b->node_id;
	out->local->layer.min_healthy_percent = MTD_LB_DEFAULT_MIN_HEALTHY_PERCENT;
	/* Setting the top-level zone is asking to prefer it: PREFER_LOCAL is
	 * the default then (config.proto's Locality). */
	out->local->layer.locality = b->zone != NULL ? MTD_LB_LOCALITY_PREFER_LOCAL : MTD_LB_LOCALITY_OFF;
	build_subset(b, m->subset, path, &out->local->layer.subset);
	if (l == NULL)
		return;
	switch (l->mode) {
	case MAITRED__CONFIG__V1__LOCALITY__MODE__STRICT:
		out->local->layer.locality = MTD_LB_LOCALITY_STRICT;
		break;
	case MAITRED__CONFIG__V1__LOCALITY__MODE__OFF:
		out->local->layer.locality = MTD_LB_LOCALITY_OFF;
		break;
	default:
		break;
	}
	if (b->zone == NULL && l->mode != MAITRED__CONFIG__V1__LOCALITY__MODE__OFF &&
	    l->mode != MAITRED__CONFIG__V1__LOCALITY__MODE__MODE_UNSPECIFIED)
		BERR(mtd_cfg__at(b, l, "mode", NULL), mtd_cfg__sub(p, sizeof(p), path, "locality.mode"),
		     "needs the top-level zone (this sidecar's zone)");
	if (l->min_healthy_percent != NULL) {
		double v = l->min_healthy_percent->value;

		if (!(v >= 0.0 && v <= 100.0))
			BERR(mtd_cfg__at(b, l, "min_healthy_percent", NULL),
			     mtd_cfg__sub(p, sizeof(p), path, "locality.min_healthy_percent"), "must be in 0..100");
		else
			out->local->layer.min_healthy_percent = v;
	}
}
