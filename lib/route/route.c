#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "route/regex.h"
#include "route/route.h"

struct route_slot {
	const char *name; /* NULL = empty */
	size_t len;
	int index;
};

struct mtd_route_table {
	struct route_slot *slots;
	size_t mask;   /* capacity - 1, capacity a power of two >= 2n */
	int catch_all; /* index of "*", or -1 */
};

static uint64_t name_hash(const char *s, size_t len)
{
	return mtd_fnv1a(MTD_FNV1A_START, s, len);
}

static int valid_part(const char *p, size_t len)
{
	if (len == 0)
		return 0;
	for (size_t i = 0; i < len; i++)
		if (p[i] == '/' || p[i] == '?' || p[i] == '#')
			return 0;
	return 1;
}

int mtd_route_parse_path(const char *path, size_t len, struct mtd_route_path *out)
{
	if (len < 4 || path[0] != '/')
		return -EINVAL;
	const char *slash = memchr(path + 1, '/', len - 1);
	if (!slash)
		return -EINVAL;
	size_t svc_len = (size_t)(slash - path - 1);
	size_t method_len = len - svc_len - 2;
	if (!valid_part(path + 1, svc_len) || !valid_part(slash + 1, method_len))
		return -EINVAL;
	out->path = path;
	out->path_len = len;
	out->service = path + 1;
	out->service_len = svc_len;
	out->method = slash + 1;
	out->method_len = method_len;
	return 0;
}

struct mtd_route_table *mtd_route_table_new(const char *const *names, size_t n)
{
	struct mtd_route_table *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	size_t cap = 8;
	while (cap < 2 * n)
		cap <<= 1;
	t->slots = calloc(cap, sizeof(*t->slots));
	if (!t->slots) {
		free(t);
		return NULL;
	}
	t->mask = cap - 1;
	t->catch_all = -1;
	for (size_t i = 0; i < n; i++) {
		if (!names[i])
			continue;
		size_t len = strlen(names[i]);
		if (len == 1 && names[i][0] == '*') {
			t->catch_all = (int)i;
			continue;
		}
		size_t s = name_hash(names[i], len) & t->mask;
		while (t->slots[s].name)
			s = (s + 1) & t->mask;
		t->slots[s] = (struct route_slot){names[i], len, (int)i};
	}
	return t;
}

void mtd_route_table_free(struct mtd_route_table *t)
{
	if (!t)
		return;
	free(t->slots);
	free(t);
}

int mtd_route_lookup(const struct mtd_route_table *t, const char *svc, size_t len)
{
	size_t s = name_hash(svc, len) & t->mask;
	/* Load factor <= 1/2, so an empty slot ends every probe. */
	for (; t->slots[s].name; s = (s + 1) & t->mask)
		if (t->slots[s].len == len && memcmp(t->slots[s].name, svc, len) == 0)
			return t->slots[s].index;
	return t->catch_all;
}

static bool same(const char *a, size_t alen, const char *b, size_t blen)
{
	return alen == blen && memcmp(a, b, alen) == 0;
}

int mtd_route_match(const struct mtd_route_rule *rules, size_t n, const struct mtd_route_path *p,
                    mtd_route_header_fn *hdr, void *arg)
{
	for (size_t i = 0; i < n; i++) {
		const struct mtd_route_rule *r = &rules[i];
		if (!(r->service_len == 1 && r->service[0] == '*') &&
		    !same(r->service, r->service_len, p->service, p->service_len))
			continue;
		if (r->method && !same(r->method, r->method_len, p->method, p->method_len))
			continue;
		if (r->path_re != NULL && !mtd_regex_match(r->path_re, p->path, p->path_len))
			continue;
		if (r->kind != MTD_ROUTE_HEADER_NONE) {
			size_t len = 0;
			const char *v = hdr(arg, r->header, &len);
			if (!v)
				continue;
			if (r->kind == MTD_ROUTE_HEADER_VALUE && !same(r->value, r->value_len, v, len))
				continue;
			if (r->kind == MTD_ROUTE_HEADER_PREFIX &&
			    (len < r->value_len || memcmp(v, r->value, r->value_len)))
				continue;
			if (r->kind == MTD_ROUTE_HEADER_REGEX && !mtd_regex_match(r->value_re, v, len))
				continue;
		}
		return (int)i;
	}
	return -1;
}
