/* The certificate provider instances of a gRPC bootstrap file
 * (certificate_providers, gRFC A29), as the xDS client keeps them: looked
 * up by a cluster's UpstreamTlsContext, copied into the client (which
 * outlives the config it was made from when a reload keeps its stream)
 * and compared there (a change restarts the stream: every cluster is
 * translated again with the new files). */
#include <config.h> /* autoconf (lib/config/config.h is the API) */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"

const struct mtd_cfg_cert_provider *mtd_cfg_cert_provider_find(const struct mtd_cfg_cert_providers *ps,
                                                               const char *name)
{
	for (size_t i = 0; ps != NULL && i < ps->n; i++)
		if (strcmp(ps->e[i].name, name) == 0)
			return &ps->e[i];
	return NULL;
}

static bool same_text(const char *a, const char *b)
{
	return a == b || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

bool mtd_cfg_cert_providers_same(const struct mtd_cfg_cert_providers *a, const struct mtd_cfg_cert_providers *b)
{
	if (a->n != b->n)
		return false;
	for (size_t i = 0; i < a->n; i++) {
		const struct mtd_cfg_cert_provider *p = &a->e[i], *q = &b->e[i];
		if (!same_text(p->name, q->name) || !same_text(p->cert_file, q->cert_file) ||
		    !same_text(p->key_file, q->key_file) || !same_text(p->ca_file, q->ca_file) ||
		    p->refresh_ms != q->refresh_ms)
			return false;
	}
	return true;
}

void mtd_cfg_cert_providers_fini(struct mtd_cfg_cert_providers *ps)
{
	for (size_t i = 0; i < ps->n; i++) {
		free(ps->e[i].name);
		free(ps->e[i].cert_file);
		free(ps->e[i].key_file);
		free(ps->e[i].ca_file);
	}
	free(ps->e);
	ps->e = NULL;
	ps->n = 0;
}

static bool dup_ok(char **dst, const char *src)
{
	*dst = src != NULL ? strdup(src) : NULL;
	return src == NULL || *dst != NULL;
}

int mtd_cfg_cert_providers_copy(struct mtd_cfg_cert_providers *dst, const struct mtd_cfg_cert_providers *src)
{
	*dst = (struct mtd_cfg_cert_providers){0};
	if (src->n == 0)
		return 0;
	dst->e = calloc(src->n, sizeof(*dst->e));
	if (dst->e == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < src->n; i++) {
		const struct mtd_cfg_cert_provider *p = &src->e[i];
		struct mtd_cfg_cert_provider *q = &dst->e[i];
		dst->n++;
		q->refresh_ms = p->refresh_ms;
		if (!dup_ok(&q->name, p->name) || !dup_ok(&q->cert_file, p->cert_file) ||
		    !dup_ok(&q->key_file, p->key_file) || !dup_ok(&q->ca_file, p->ca_file)) {
			mtd_cfg_cert_providers_fini(dst);
			return -ENOMEM;
		}
	}
	return 0;
}
