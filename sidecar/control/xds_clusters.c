/* The xDS client's CDS and EDS responses (xds.c has the overview): the
 * last good cluster and assignment of each name subscribed to, a resend
 * of the same bytes neither decoded nor applied again, a refused
 * resource's reason kept for its services and /config_dump. A CDS
 * response queues the services of the clusters it changed (the pending
 * rebuilds, xds_services.c); an EDS response gives the services of the
 * assignments it changed theirs at once. Control thread only. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "sidecar/control/xds-int.h"

/* ---- responses: CDS and EDS ---------------------------------------------------- */

static bool same_bytes(const uint8_t *raw, size_t raw_len, const struct mtd_xds_any *v)
{
	return raw != NULL && raw_len == v->len && memcmp(raw, v->value, v->len) == 0;
}

/* Keep v's bytes as the last good resource's (none when out of memory:
 * the next resend is then decoded and compared, as before there were). */
static void raw_keep(uint8_t **raw, size_t *raw_len, const struct mtd_xds_any *v)
{
	free(*raw);
	*raw_len = v->len;
	if ((*raw = malloc(v->len ? v->len : 1)) != NULL)
		memcpy(*raw, v->value, v->len);
}

/* A copy of v's bytes, or NULL (out of memory). */
static uint8_t *bytes_dup(const struct mtd_xds_any *v)
{
	uint8_t *p = malloc(v->len ? v->len : 1);

	if (p != NULL)
		memcpy(p, v->value, v->len);
	return p;
}

/* CDS: state of the world. The clusters whose translation changed (or
 * that went) are given to their services. */
void xds_on_clusters(struct mtd_xds *x, const struct mtd_xds_response *r, char *nack,
                     size_t *nack_len, struct xds_stamp **st)
{
	bool *seen = calloc(x->n_cls ? x->n_cls : 1, sizeof(*seen));
	size_t n_changed = 0;
	bool eds_names = false; /* a cluster came, went or changed its EDS name */
	bool unnamed = false;   /* a resource refused whose name cannot be read */
	char why[1024], name[MTD_XDS_NAME_MAX + 1];

	if (seen == NULL) {
		xds_nack_add(nack, nack_len, "(response)", "out of memory");
		goto out;
	}
	for (size_t i = 0; i < r->n_res; i++) {
		const struct mtd_xds_any *any = &r->res[i];
		struct mtd_xds_cluster c;

		if (!mtd_xds_any_is(any, MTD_XDS_TYPE_CLUSTER)) {
			xds_nack_add(nack, nack_len, "(resource)", "not a Cluster");
			unnamed = true;
			continue;
		}
		int named = xds_name_of(MTD_XDS_TYPE_CLUSTER, any, name, sizeof(name));
		struct xds_cl *same = named == MTD_XDS_NAME_EXACT ? xds_find_cl(x, name) : NULL;
		if ((named == MTD_XDS_NAME_EXACT && same == NULL) || named == MTD_XDS_NAME_LONG)
			continue; /* not asked for: skipped unread, as gRPC's clients do (istiod sends every cluster) */
		if (same != NULL && same->have && same_bytes(same->raw, same->raw_len, any)) {
			/* Resent as it was: what its bytes said last time. */
			if (seen[same - x->cls]) {
				xds_nack_add(nack, nack_len, same->name, "sent twice in one response");
				continue;
			}
			seen[same - x->cls] = true;
			xds_set_str(&same->nack, NULL);
			xds_stamp_take(&same->stamp, st, r);
			continue;
		}
		int rc = mtd_xds_cluster_parse(any->value, any->len, &x->providers, &c, why, sizeof(why));
		if (rc != 0) {
			/* Named by a guess or not at all, it may be any cluster. */
			unnamed |= named != MTD_XDS_NAME_EXACT;
			/* Unnamed (name "(unnamed)"), it is not the cluster of that name. */
			struct xds_cl *e = named >= 0 ? xds_find_cl(x, name) : NULL;
			if (e != NULL && seen[e - x->cls]) {
				/* The first of the name stands, its refusal or none. */
				xds_nack_add(nack, nack_len, name, "sent twice in one response");
				continue;
			}
			xds_nack_add(nack, nack_len, name, rc == -ENOMEM ? "out of memory" : why);
			if (e != NULL) {
				seen[e - x->cls] = true; /* present, refused: the last good stays */
				xds_set_str(&e->nack, rc == -ENOMEM ? "out of memory" : why);
				if (!e->have) {
					/* No good one to keep: its services' calls stop
					 * waiting for it and fail with the refusal. */
					e->dirty = true;
					n_changed++;
				}
			}
			continue;
		}
		struct xds_cl *e = xds_find_cl(x, c.name);
		if (e == NULL) {
			mtd_xds_cluster_clear(&c); /* not asked for: a server may send more */
			continue;
		}
		if (seen[e - x->cls]) {
			xds_nack_add(nack, nack_len, c.name, "sent twice in one response");
			mtd_xds_cluster_clear(&c);
			continue;
		}
		seen[e - x->cls] = true;
		xds_set_str(&e->nack, NULL);
		xds_stamp_take(&e->stamp, st, r);
		raw_keep(&e->raw, &e->raw_len, any);
		if (e->have && mtd_xds_cluster_equal(&e->c, &c)) {
			mtd_xds_cluster_clear(&c);
			continue;
		}
		if (!e->have || strcmp(e->c.eds_name, c.eds_name) != 0)
			eds_names = true;
		if (c.tls_only_in_matches && !(e->have && e->c.tls_only_in_matches))
			MTD_WARN("xds: cluster %s: its TLS is in transport_socket_matches, which maitred does not read "
			         "(transport_socket only): its connections are h2c",
			         c.name);
		mtd_xds_cluster_clear(&e->c);
		e->c = c;
		e->have = true;
		e->removed = false;
		e->gen = xds_cluster_gen_next();
		e->dirty = true;
		n_changed++;
	}
	/* A cluster the response lacks is gone (CDS is state of the world),
	 * unless a resource refused could not be named: it may be that
	 * cluster, and the whole response is NACKed (Envoy keeps every
	 * cluster then). */
	for (size_t i = 0; i < x->n_cls && !unnamed; i++) {
		if (seen[i] || !x->cls[i].have)
			continue;
		MTD_WARN("xds: cluster %s is no longer served by %s: its services have no endpoints", x->cls[i].name,
		         x->server.text);
		mtd_xds_cluster_clear(&x->cls[i].c);
		free(x->cls[i].raw);
		x->cls[i].raw = NULL;
		x->cls[i].have = false;
		x->cls[i].removed = true;
		x->cls[i].dirty = true;
		eds_names = true;
		n_changed++;
	}
	if (n_changed > 0) {
		/* EDS names follow the clusters: subscribe before applying, so a
		 * service on a new EDS name waits for it (the table is rebuilt
		 * only when a name may have changed: 10,000 names sorted). */
		if (eds_names && xds_retable(x, T_EDS))
			x->t[T_EDS].subscribed = false;
		xds_queue_changed(x);
	}
out:
	free(seen);
}

/* The subscribed assignment e whose last good one came as exactly v's
 * bytes, or NULL. */
static struct xds_cla *same_as_last_good(struct xds_cla *e, const struct mtd_xds_any *v)
{
	return e != NULL && e->raw != NULL && same_bytes(e->raw, e->raw_len, v) ? e : NULL;
}

/* EDS: an assignment in the response replaces the last good one of its
 * name; a name it lacks keeps its own. One equal to the one in force
 * (the same bytes) only takes the response's stamp: its services keep
 * their snapshot. */
void xds_on_endpoints(struct mtd_xds *x, const struct mtd_xds_response *r, char *nack,
                      size_t *nack_len, struct xds_stamp **st)
{
	char why[1024], name[MTD_XDS_NAME_MAX + 1];
	/* The names this response held (refused or not): the first of a
	 * name stands, as in CDS, LDS and RDS. */
	bool *seen = calloc(x->n_clas ? x->n_clas : 1, sizeof(*seen));

	if (seen == NULL) {
		xds_nack_add(nack, nack_len, "(response)", "out of memory");
		return;
	}
	for (size_t i = 0; i < r->n_res; i++) {
		const struct mtd_xds_any *any = &r->res[i];
		struct mtd_xds_cla *c;

		if (!mtd_xds_any_is(any, MTD_XDS_TYPE_ENDPOINT)) {
			xds_nack_add(nack, nack_len, "(resource)", "not a ClusterLoadAssignment");
			continue;
		}
		int named = xds_name_of(MTD_XDS_TYPE_ENDPOINT, any, name, sizeof(name));
		bool exact = named == MTD_XDS_NAME_EXACT;
		struct xds_cla *asked = exact ? xds_find_cla(x, name) : NULL;
		if ((exact && asked == NULL) || named == MTD_XDS_NAME_LONG)
			continue; /* not asked for: skipped unread */
		/* Named by a guess, it is taken for the one of that name, as
		 * its refusal is (below). */
		struct xds_cla *of = exact ? asked : named >= 0 ? xds_find_cla(x, name) : NULL;
		if (of != NULL && seen[of - x->clas]) {
			xds_nack_add(nack, nack_len, name, "sent twice in one response");
			continue;
		}
		if (of != NULL)
			seen[of - x->clas] = true;
		struct xds_cla *same = same_as_last_good(asked, any);
		if (same != NULL) {
			xds_set_str(&same->nack, NULL);
			xds_stamp_take(&same->stamp, st, r);
			same->resent = true;
			continue;
		}
		int rc = mtd_xds_cla_parse(any->value, any->len, &c, why, sizeof(why));
		if (rc != 0) {
			xds_nack_add(nack, nack_len, name, rc == -ENOMEM ? "out of memory" : why);
			if (of != NULL) {
				xds_set_str(&of->nack, rc == -ENOMEM ? "out of memory" : why);
				if (of->raw == NULL)
					of->dirty = true; /* none to keep: its services hear of the refusal */
			}
			continue;
		}
		/* Accepted, its name was sure and is the parse's (xds_fuzz checks
		 * the two agree): of is its entry. */
		struct xds_cla *e = of;
		if (e == NULL || strcmp(e->name, c->name) != 0) {
			mtd_xds_cla_free(c);
			continue;
		}
		uint8_t *raw = bytes_dup(any);
		if (raw == NULL) {
			/* The bytes are the one form kept: the last good stays. */
			xds_nack_add(nack, nack_len, c->name, "out of memory");
			xds_set_str(&e->nack, "out of memory");
			mtd_xds_cla_free(c);
			continue;
		}
		xds_set_str(&e->nack, NULL);
		xds_stamp_take(&e->stamp, st, r);
		free(e->raw);
		e->raw = raw;
		e->raw_len = any->len;
		e->n = (uint32_t)c->n;
		e->priority = c->priority;
		e->n_skipped = c->n_skipped;
		/* A large assignment's records serve its services (translating
		 * 10,000 endpoints again would cost a fifth of the update); a
		 * small one is translated again when applied: held until then,
		 * the records of every assignment of a state-of-the-world push
		 * would all be alive at once, and their freed chunks would stay
		 * in the heap (about 640 B a cluster of 10). */
		mtd_xds_cla_free(e->fresh); /* NULL: one of a name a response, freed by each apply */
		e->fresh = NULL;
		if (c->n >= FRESH_MIN)
			e->fresh = c;
		else
			mtd_xds_cla_free(c);
		e->updates++;
		e->dirty = true;
	}
	free(seen);
	/* The services of every cluster on these EDS names, and only those. */
	xds_apply_dirty(x);
}
