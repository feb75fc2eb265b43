/* An endpoint identity's allocation (runtime-t.h struct mtd_endpoint):
 * the struct, then its address (sockaddr, text, the host only when it is
 * not the text's own), in one block; its registry key and identity, which
 * xDS, DNS and static endpoints lack, in another made only when there are
 * some. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/lazy.h"
#include "lb/lb.h"
#include "sidecar/control/runtime.h"

/* "host:port" / "[v6]:port" -> its host part (*h, *nh bytes). -EINVAL
 * when address has no port. */
static int host_part(const char *address, const char **h, size_t *nh)
{
	const char *colon = strrchr(address, ':');
	if (!colon || colon == address)
		return -EINVAL;
	const char *start = address, *end = colon;
	if (*start == '[' && end > start + 1 && end[-1] == ']') {
		start++;
		end--;
	}
	*h = start;
	*nh = (size_t)(end - start);
	return 0;
}

static struct mtd_endpoint_names *names_new(const char *key, const char *identity)
{
	size_t nk = key ? strlen(key) + 1 : 0, ni = identity ? strlen(identity) + 1 : 0;
	struct mtd_endpoint_names *n = malloc(sizeof(*n) + nk + ni);
	if (!n)
		return NULL;
	char *p = (char *)(n + 1);
	n->key = key ? memcpy(p, key, nk) : NULL;
	n->identity = identity ? memcpy(p + nk, identity, ni) : NULL;
	return n;
}

struct mtd_endpoint *mtd_endpoint_new(const struct mtd_disc_endpoint *d, const char *host, unsigned n_workers,
                                      int64_t now_ms)
{
	const char *h;
	size_t nh, nt = strlen(d->address);
	socklen_t salen;
	if (d->sa.ss_family == AF_INET)
		salen = sizeof(struct sockaddr_in);
	else if (d->sa.ss_family == AF_INET6)
		salen = sizeof(struct sockaddr_in6);
	else
		return NULL;
	if (d->salen < salen || host_part(d->address, &h, &nh) < 0)
		return NULL;
	/* The host is stored only when the text does not hold it. */
	bool own_host = host && (strlen(host) != nh || memcmp(host, h, nh) != 0);
	size_t nown = own_host ? strlen(host) + 1 : 0;
	struct mtd_endpoint *ep = calloc(1, sizeof(*ep) + salen + nt + 1 + nown);
	if (!ep)
		return NULL;
	mtd_ref_init(&ep->ref);
	ep->n_slots = (uint16_t)(n_workers ? n_workers : 1);
	ep->own_host = own_host;
	memcpy(ep->addr, &d->sa, salen);
	memcpy(ep->addr + salen, d->address, nt + 1);
	if (own_host)
		memcpy(ep->addr + salen + nt + 1, host, nown);
	const char *id = d->identity && d->identity[0] ? d->identity : NULL;
	if (d->key || id) {
		ep->names = names_new(d->key, id);
		if (!ep->names) {
			free(ep);
			return NULL;
		}
	}
	/* Issue 3: a registry record's start time, else the moment maitred
	 * first saw the identity; kept while the identity stays. */
	ep->start_ms = d->start_ms > 0 ? d->start_ms : now_ms;
	return ep;
}

void mtd_endpoint_free(struct mtd_endpoint *ep)
{
	/* Every pool held a reference: none is left. */
	mtd_lb_stats_fini(&ep->stats);
	mtd_lazy_free(&ep->mx);
	mtd_lazy_free(&ep->pools);
	free((void *)ep->names);
	free(ep); /* its address too */
}

const char *mtd_endpoint_host(const struct mtd_endpoint *ep, char *buf, size_t size)
{
	const char *text = mtd_endpoint_text(ep), *h;
	size_t nh;
	if (ep->own_host)
		return text + strlen(text) + 1;
	if (size == 0)
		return "";
	if (host_part(text, &h, &nh) < 0) {
		h = text; /* not made without a port (mtd_endpoint_new) */
		nh = 0;
	}
	if (nh >= size)
		nh = size - 1;
	memcpy(buf, h, nh);
	buf[nh] = '\0';
	return buf;
}
