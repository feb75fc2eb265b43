/* lib/config allocation wrapper (fail-malloc hook) and error collection. */
#include <config.h> /* autoconf (lib/config/config.h is the API) */

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "config/config-int.h"

/* ---- allocation -------------------------------------------------------- */

static _Thread_local unsigned long alloc_count;
static _Thread_local unsigned long alloc_fail_at; /* 0 = never */
static _Thread_local bool alloc_failed;

void mtd_cfg__fail_alloc_after(unsigned long n)
{
	alloc_fail_at = n;
	alloc_count = 0;
	alloc_failed = false;
}

bool mtd_cfg__alloc_failed(void)
{
	return alloc_failed;
}

static bool alloc_should_fail(void)
{
	alloc_count++;
	if (alloc_fail_at != 0 && alloc_count >= alloc_fail_at) {
		alloc_failed = true;
		return true;
	}
	return false;
}

void *mtd_cfg__malloc(size_t size)
{
	if (alloc_should_fail())
		return NULL;
	return malloc(size == 0 ? 1 : size);
}

void *mtd_cfg__calloc(size_t nmemb, size_t size)
{
	if (alloc_should_fail())
		return NULL;
	if (nmemb == 0 || size == 0)
		nmemb = size = 1;
	return calloc(nmemb, size);
}

void *mtd_cfg__realloc(void *p, size_t size)
{
	if (alloc_should_fail())
		return NULL;
	return realloc(p, size == 0 ? 1 : size);
}

char *mtd_cfg__strndup(const char *s, size_t n)
{
	char *p = mtd_cfg__malloc(n + 1);

	if (p == NULL)
		return NULL;
	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

char *mtd_cfg__strdup(const char *s)
{
	return mtd_cfg__strndup(s, strlen(s));
}

static char *vasprintf_cfg(const char *fmt, va_list ap)
{
	va_list ap2;
	int n;
	char *p;

	va_copy(ap2, ap);
	n = vsnprintf(NULL, 0, fmt, ap2);
	va_end(ap2);
	if (n < 0)
		return NULL;
	p = mtd_cfg__malloc((size_t)n + 1);
	if (p == NULL)
		return NULL;
	vsnprintf(p, (size_t)n + 1, fmt, ap);
	return p;
}

char *mtd_cfg__asprintf(const char *fmt, ...)
{
	va_list ap;
	char *p;

	va_start(ap, fmt);
	p = vasprintf_cfg(fmt, ap);
	va_end(ap);
	return p;
}

void mtd_cfg__free(void *p)
{
	free(p);
}

static void *pb_alloc(void *data, size_t size)
{
	(void)data;
	return mtd_cfg__malloc(size);
}

static void pb_free(void *data, void *p)
{
	(void)data;
	free(p);
}

ProtobufCAllocator mtd_cfg__pb_allocator = {
        .alloc = pb_alloc,
        .free = pb_free,
        .allocator_data = NULL,
};

/* ---- diagnostics -------------------------------------------------------- */

void mtd_cfg__diag_init(struct mtd_cfg__diag *d, const char *source)
{
	memset(d, 0, sizeof(*d));
	d->source = source;
}

void mtd_cfg__diag_fini(struct mtd_cfg__diag *d)
{
	for (size_t i = 0; i < d->n_errs; i++)
		mtd_cfg__free(d->errs[i].text);
	mtd_cfg__free(d->errs);
	d->errs = NULL;
	d->n_errs = d->cap_errs = 0;
	mtd_cfg__free(d->pos);
	d->pos = NULL;
	d->n_pos = d->cap_pos = 0;
}

/* Grow *arr (of elem-sized items) to hold at least need items. */
static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
	size_t ncap;
	void *p;

	if (need <= *cap)
		return 0;
	ncap = *cap != 0 ? *cap * 2 : 16;
	while (ncap < need)
		ncap *= 2;
	p = mtd_cfg__realloc(*arr, ncap * elem);
	if (p == NULL)
		return -ENOMEM;
	*arr = p;
	*cap = ncap;
	return 0;
}

bool mtd_cfg__said_under(const struct mtd_cfg__diag *d, const char *path)
{
	size_t src = strlen(d->source), n = strlen(path);

	for (size_t i = 0; i < d->n_errs; i++) {
		const char *t = d->errs[i].text;

		if (strncmp(t, d->source, src) != 0)
			continue;
		t += src;
		if (d->errs[i].at.line != 0) { /* ":LINE:COL" */
			t = strchr(t + 1, ':');
			if (t == NULL)
				continue;
			t += strcspn(t + 1, ":") + 1;
		}
		if (strncmp(t, ": ", 2) == 0 && strncmp(t + 2, path, n) == 0 &&
		    (t[2 + n] == ':' || t[2 + n] == '.' || t[2 + n] == '['))
			return true;
	}
	return false;
}

void mtd_cfg__error(struct mtd_cfg__diag *d, struct mtd_cfg__mark at, const char *path, const char *fmt, ...)
{
	va_list ap;
	char *what, *text;
	char where[48];

	va_start(ap, fmt);
	what = vasprintf_cfg(fmt, ap);
	va_end(ap);
	if (what == NULL)
		goto fail;
	if (at.line != 0)
		snprintf(where, sizeof(where), ":%u:%u", (unsigned)at.line, (unsigned)at.col);
	else
		where[0] = '\0';
	if (path != NULL && path[0] != '\0')
		text = mtd_cfg__asprintf("%s%s: %s: %s", d->source, where, path, what);
	else
		text = mtd_cfg__asprintf("%s%s: %s", d->source, where, what);
	mtd_cfg__free(what);
	if (text == NULL)
		goto fail;
	if (grow((void **)&d->errs, &d->cap_errs, d->n_errs + 1, sizeof(*d->errs)) != 0)
		goto fail_text;
	d->errs[d->n_errs].at = at;
	d->errs[d->n_errs].seq = d->n_errs;
	d->errs[d->n_errs].text = text;
	d->n_errs++;
	return;

fail_text:
	mtd_cfg__free(text);
fail:
	d->oom = true;
}

void mtd_cfg__pos_add(struct mtd_cfg__diag *d, const void *msg, uint32_t field, struct mtd_cfg__mark at)
{
	if (grow((void **)&d->pos, &d->cap_pos, d->n_pos + 1, sizeof(*d->pos)) != 0) {
		d->oom = true;
		return;
	}
	d->pos[d->n_pos].msg = msg;
	d->pos[d->n_pos].field = field;
	d->pos[d->n_pos].at = at;
	d->n_pos++;
	d->pos_sorted = false;
}

static int pos_cmp(const void *a, const void *b)
{
	const struct mtd_cfg__pos *x = a, *y = b;

	if (x->msg != y->msg)
		return (uintptr_t)x->msg < (uintptr_t)y->msg ? -1 : 1;
	if (x->field != y->field)
		return x->field < y->field ? -1 : 1;
	return 0;
}

struct mtd_cfg__mark mtd_cfg__pos_get(struct mtd_cfg__diag *d, const void *msg, uint32_t field)
{
	struct mtd_cfg__pos key = {.msg = msg, .field = field};
	const struct mtd_cfg__pos *hit;
	struct mtd_cfg__mark none = {0, 0};

	if (msg == NULL || d->n_pos == 0)
		return none;
	if (!d->pos_sorted) {
		qsort(d->pos, d->n_pos, sizeof(*d->pos), pos_cmp);
		d->pos_sorted = true;
	}
	hit = bsearch(&key, d->pos, d->n_pos, sizeof(*d->pos), pos_cmp);
	if (hit != NULL)
		return hit->at;
	if (field != 0)
		return mtd_cfg__pos_get(d, msg, 0);
	return none;
}

struct mtd_cfg__mark mtd_cfg__pos_named(struct mtd_cfg__diag *d, const ProtobufCMessage *msg, const char *field)
{
	const ProtobufCFieldDescriptor *fd;

	if (msg == NULL)
		return (struct mtd_cfg__mark){0, 0};
	fd = protobuf_c_message_descriptor_get_field_by_name(msg->descriptor, field);
	return mtd_cfg__pos_get(d, msg, fd != NULL ? fd->id : 0);
}

static int err_cmp(const void *a, const void *b)
{
	const struct mtd_cfg__err *x = a, *y = b;

	/* Errors without a place (binary input) keep report order. */
	if (x->at.line != y->at.line)
		return x->at.line < y->at.line ? -1 : 1;
	if (x->at.col != y->at.col)
		return x->at.col < y->at.col ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

int mtd_cfg__diag_export(struct mtd_cfg__diag *d, struct mtd_cfg_errors *errs)
{
	char **msgs;

	if (d->n_errs == 0)
		return 0;
	qsort(d->errs, d->n_errs, sizeof(*d->errs), err_cmp);
	msgs = mtd_cfg__realloc(errs->msgs, (errs->n + d->n_errs) * sizeof(*msgs));
	if (msgs == NULL)
		return -ENOMEM;
	errs->msgs = msgs;
	/* Ownership of each text moves to errs. */
	for (size_t i = 0; i < d->n_errs; i++) {
		errs->msgs[errs->n++] = d->errs[i].text;
		d->errs[i].text = NULL;
	}
	d->n_errs = 0;
	return 0;
}

void mtd_cfg_errors_clear(struct mtd_cfg_errors *errs)
{
	if (errs == NULL)
		return;
	for (size_t i = 0; i < errs->n; i++)
		mtd_cfg__free(errs->msgs[i]);
	mtd_cfg__free(errs->msgs);
	errs->msgs = NULL;
	errs->n = 0;
}
