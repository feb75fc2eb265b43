/* Prometheus text exposition format 0.0.4: "# HELP", "# TYPE", then
 * name{labels} value lines; label values escape \, " and newline. */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "admin/admin.h"

void mtd_prom_family(struct mtd_abuf *b, const char *name, const char *type, const char *help)
{
	mtd_abuf_printf(b, "# HELP %s ", name);
	/* HELP text escapes \ and newline (label values also escape "). */
	for (const char *p = help; *p; p++) {
		if (*p == '\\')
			mtd_abuf_puts(b, "\\\\");
		else if (*p == '\n')
			mtd_abuf_puts(b, "\\n");
		else
			mtd_abuf_add(b, p, 1);
	}
	mtd_abuf_printf(b, "\n# TYPE %s %s\n", name, type);
}

static void label_value(struct mtd_abuf *b, const char *v)
{
	size_t run = 0;
	const char *p = v;
	for (; *p; p++) {
		const char *esc = *p == '\\' ? "\\\\" : *p == '"' ? "\\\"" : *p == '\n' ? "\\n" : NULL;
		if (!esc) {
			run++;
			continue;
		}
		mtd_abuf_add(b, p - run, run);
		run = 0;
		mtd_abuf_puts(b, esc);
	}
	mtd_abuf_add(b, p - run, run);
}

static void head(struct mtd_abuf *b, const char *name, const char *suffix, const char *const *keys,
                 const char *const *values, size_t n, const char *le)
{
	mtd_abuf_puts(b, name);
	if (suffix)
		mtd_abuf_puts(b, suffix);
	if (n == 0 && !le) {
		mtd_abuf_add(b, " ", 1);
		return;
	}
	mtd_abuf_add(b, "{", 1);
	for (size_t i = 0; i < n; i++) {
		mtd_abuf_printf(b, "%s%s=\"", i ? "," : "", keys[i]);
		label_value(b, values[i] ? values[i] : "");
		mtd_abuf_add(b, "\"", 1);
	}
	if (le)
		mtd_abuf_printf(b, "%sle=\"%s\"", n ? "," : "", le);
	mtd_abuf_add(b, "} ", 2);
}

static void value(struct mtd_abuf *b, double v)
{
	if (isnan(v))
		mtd_abuf_puts(b, "NaN\n");
	else if (isinf(v))
		mtd_abuf_puts(b, v > 0 ? "+Inf\n" : "-Inf\n");
	else
		mtd_abuf_printf(b, "%.17g\n", v);
}

void mtd_prom_sample(struct mtd_abuf *b, const char *name, const char *suffix, const char *const *keys,
                     const char *const *values, size_t n_labels, double v)
{
	head(b, name, suffix, keys, values, n_labels, NULL);
	value(b, v);
}

void mtd_prom_sample_u64(struct mtd_abuf *b, const char *name, const char *suffix, const char *const *keys,
                         const char *const *values, size_t n_labels, uint64_t v)
{
	head(b, name, suffix, keys, values, n_labels, NULL);
	mtd_abuf_printf(b, "%" PRIu64 "\n", v);
}

void mtd_prom_sample_le(struct mtd_abuf *b, const char *name, const char *const *keys, const char *const *values,
                        size_t n_labels, double le, uint64_t count)
{
	char lebuf[32];
	if (isinf(le))
		strcpy(lebuf, "+Inf");
	else
		snprintf(lebuf, sizeof(lebuf), "%g", le);
	head(b, name, "_bucket", keys, values, n_labels, lebuf);
	mtd_abuf_printf(b, "%" PRIu64 "\n", count);
}
