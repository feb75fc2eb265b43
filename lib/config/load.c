/* mtd_cfg_load_file / mtd_cfg_load_buffer: read, detect the format, map
 * onto maitred.config.v1.Config, build the runtime form. */
#include <config.h> /* autoconf (lib/config/config.h is the API) */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"
#include "config/config-int.h"
#include "core/utf8.h"

#define CFG_FILE_MAX (64u << 20) /* no config is 64 MiB; refuse to try */

static bool has_suffix(const char *s, const char *suf)
{
	size_t n = strlen(s), k = strlen(suf);

	return n >= k && strcasecmp(s + n - k, suf) == 0;
}

static enum mtd_cfg_format format_by_name(const char *path)
{
	if (has_suffix(path, ".yaml") || has_suffix(path, ".yml"))
		return MTD_CFG_FORMAT_YAML;
	if (has_suffix(path, ".json"))
		return MTD_CFG_FORMAT_JSON;
	if (has_suffix(path, ".pb") || has_suffix(path, ".bin") || has_suffix(path, ".binpb"))
		return MTD_CFG_FORMAT_BINARY;
	return MTD_CFG_FORMAT_AUTO;
}

/* Text is valid UTF-8 without control characters other than tab, CR, LF.
 * Serialized protobuf nearly always breaks that within its first bytes
 * (tags and lengths are small numbers). */
static bool looks_binary(const unsigned char *p, size_t n)
{
	size_t i = 0;

	if (n >= 3 && p[0] == 0xef && p[1] == 0xbb && p[2] == 0xbf)
		i = 3; /* UTF-8 BOM */
	while (i < n) {
		unsigned c = p[i];

		if (c < 0x80) {
			if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
				return true;
			if (c == 0x7f)
				return true;
			i++;
			continue;
		}
		size_t k = mtd_utf8_seq(p + i, n - i);
		if (k == 0)
			return true;
		i += k;
	}
	return false;
}

static enum mtd_cfg_format sniff(const char *data, size_t len)
{
	size_t i = 0;

	if (looks_binary((const unsigned char *)data, len))
		return MTD_CFG_FORMAT_BINARY;
	while (i < len && strchr(" \t\r\n", data[i]) != NULL && data[i] != '\0')
		i++;
	return i < len && data[i] == '{' ? MTD_CFG_FORMAT_JSON : MTD_CFG_FORMAT_YAML;
}

/* ---- services xDS creates ---------------------------------------------------- */

static void *pb_alloc(size_t n)
{
	return mtd_cfg__pb_allocator.alloc(mtd_cfg__pb_allocator.allocator_data, n);
}

static char *pb_strdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *c = pb_alloc(n);

	if (c != NULL)
		memcpy(c, s, n);
	return c;
}

/* m's services without the last n_drop (those created before), then one
 * per cluster: {name: C, discovery: {xds: {cluster: C}}}, every part
 * allocated as an unpacked message's are (freed with it). 0 or -ENOMEM
 * (m still whole, to be freed). */
static int set_created(Maitred__Config__V1__Config *m, size_t n_drop, const char *const *clusters, size_t n)
{
	size_t keep = m->n_services - n_drop;
	Maitred__Config__V1__Service **list = pb_alloc((keep + n + 1) * sizeof(*list));

	if (list == NULL)
		return -ENOMEM;
	for (size_t i = keep; i < m->n_services; i++)
		protobuf_c_message_free_unpacked(&m->services[i]->base, &mtd_cfg__pb_allocator);
	memcpy(list, m->services, keep * sizeof(*list));
	mtd_cfg__pb_allocator.free(mtd_cfg__pb_allocator.allocator_data, m->services);
	m->services = list;
	m->n_services = keep;
	for (size_t i = 0; i < n; i++) {
		Maitred__Config__V1__Service *s = pb_alloc(sizeof(*s));
		Maitred__Config__V1__Discovery *d = pb_alloc(sizeof(*d));
		Maitred__Config__V1__XdsDiscovery *x = pb_alloc(sizeof(*x));
		char *name = pb_strdup(clusters[i]), *cluster = pb_strdup(clusters[i]);
		if (s == NULL || d == NULL || x == NULL || name == NULL || cluster == NULL) {
			void *parts[] = {s, d, x, name, cluster};
			for (size_t k = 0; k < 5; k++)
				mtd_cfg__pb_allocator.free(mtd_cfg__pb_allocator.allocator_data, parts[k]);
			return -ENOMEM;
		}
		maitred__config__v1__service__init(s);
		maitred__config__v1__discovery__init(d);
		maitred__config__v1__xds_discovery__init(x);
		x->cluster = cluster;
		d->xds = x;
		s->name = name;
		s->discovery = d;
		m->services[m->n_services++] = s;
	}
	return 0;
}

static int load_with(const char *name, const char *basedir, const void *data, size_t len, enum mtd_cfg_format fmt,
                     size_t n_drop, const char *const *created, size_t n_created, struct mtd_cfg **out,
                     struct mtd_cfg_errors *errs);

static int load(const char *name, const char *basedir, const void *data, size_t len, enum mtd_cfg_format fmt,
                struct mtd_cfg **out, struct mtd_cfg_errors *errs)
{
	return load_with(name, basedir, data, len, fmt, 0, NULL, 0, out, errs);
}

int mtd_cfg_with_xds_services(const struct mtd_cfg *base, const char *const *clusters, size_t n,
                              struct mtd_cfg **out, struct mtd_cfg_errors *errs)
{
	size_t n_drop = 0;
	const char *slash = strrchr(base->source, '/');
	char *basedir = slash != NULL && base->source[0] != '<'
	                        ? mtd_cfg__strndup(base->source, (size_t)(slash - base->source) + 1)
	                        : mtd_cfg__strdup("");

	*out = NULL;
	if (basedir == NULL)
		return -ENOMEM;
	for (size_t i = base->n_routed; i > 0 && base->services[i - 1].local->xds_created; i--)
		n_drop++;
	int rc = load_with(base->source, basedir, base->pb, base->pb_len, MTD_CFG_FORMAT_BINARY, n_drop, clusters, n,
	                   out, errs);
	mtd_cfg__free(basedir);
	return rc;
}

static int load_with(const char *name, const char *basedir, const void *data, size_t len, enum mtd_cfg_format fmt,
                     size_t n_drop, const char *const *created, size_t n_created, struct mtd_cfg **out,
                     struct mtd_cfg_errors *errs)
{
	const ProtobufCMessageDescriptor *desc = &maitred__config__v1__config__descriptor;
	struct mtd_cfg__diag d;
	ProtobufCMessage *msg = NULL;
	struct mtd_cfg *cfg = NULL;
	int rc;

	mtd_cfg__diag_init(&d, name);
	if (fmt == MTD_CFG_FORMAT_AUTO)
		fmt = sniff(data, len);
	if (fmt == MTD_CFG_FORMAT_BINARY) {
		bool failed_before = mtd_cfg__alloc_failed();

		msg = protobuf_c_message_unpack(desc, &mtd_cfg__pb_allocator, len, data);
		if (msg == NULL) {
			/* protobuf-c says only "NULL": tell OOM from bad input. */
			if (!failed_before && mtd_cfg__alloc_failed())
				d.oom = true;
			else
				mtd_cfg__error(&d, (struct mtd_cfg__mark){0, 0}, NULL, "not a valid serialized %s",
				               desc->name);
		} else {
			mtd_cfg__pb_check(msg, &d);
		}
	} else {
		if (mtd_cfg__pbjson_load(data, len, fmt == MTD_CFG_FORMAT_JSON, desc, &d, &msg) != 0)
			goto out;
	}
	size_t n_file = 0;
	if (msg != NULL && (n_drop != 0 || n_created != 0)) {
		Maitred__Config__V1__Config *m = (Maitred__Config__V1__Config *)msg;
		if (set_created(m, n_drop, created, n_created) != 0)
			d.oom = true;
		n_file = m->n_services - n_created;
	}
	/* "*" is maitred's catch-all: a service created under that name
	 * would take the calls of every service the config does not know. */
	for (size_t i = 0; i < n_created && !d.oom; i++)
		if (strcmp(created[i], "*") == 0) {
			char path[64];
			snprintf(path, sizeof(path), "services[%zu].name", n_file + i);
			mtd_cfg__error(&d, (struct mtd_cfg__mark){0, 0}, path,
			               "no service is created for cluster \"*\" (a service of that name is the "
			               "catch-all of every service the config does not name)");
		}
	/* Build even after mapping errors, so one run reports them all. */
	if (msg != NULL && !d.oom)
		mtd_cfg__build((const Maitred__Config__V1__Config *)msg, name, basedir, &d, &cfg);
	if (cfg != NULL)
		for (size_t i = 0; i < n_created; i++)
			cfg->services[n_file + i].local->xds_created = true;
out:
	if (msg != NULL)
		protobuf_c_message_free_unpacked(msg, &mtd_cfg__pb_allocator);
	if (d.oom) {
		rc = -ENOMEM;
	} else if (d.n_errs != 0) {
		rc = mtd_cfg__diag_export(&d, errs) != 0 ? -ENOMEM : -EINVAL;
	} else {
		rc = 0;
	}
	if (rc != 0) {
		mtd_cfg_free(cfg);
		cfg = NULL;
	}
	*out = cfg;
	mtd_cfg__diag_fini(&d);
	return rc;
}

int mtd_cfg_load_buffer(const char *name, const void *data, size_t len, enum mtd_cfg_format fmt, struct mtd_cfg **out,
                        struct mtd_cfg_errors *errs)
{
	return load(name != NULL ? name : "<buffer>", "", data, len, fmt, out, errs);
}

/* One error line for a file that cannot be read. */
static int io_error(const char *path, int err, const char *what, struct mtd_cfg_errors *errs)
{
	struct mtd_cfg__diag d;
	int rc = -err;

	mtd_cfg__diag_init(&d, path);
	mtd_cfg__error(&d, (struct mtd_cfg__mark){0, 0}, NULL, "%s: %s", what, strerror(err));
	if (d.oom || mtd_cfg__diag_export(&d, errs) != 0)
		rc = -ENOMEM;
	mtd_cfg__diag_fini(&d);
	return rc;
}

const char *mtd_cfg__file_kind(mode_t mode)
{
	return S_ISDIR(mode)    ? "a directory"
	       : S_ISFIFO(mode) ? "a FIFO"
	       : S_ISSOCK(mode) ? "a socket"
	       : S_ISCHR(mode)  ? "a character device"
	       : S_ISBLK(mode)  ? "a block device"
	                        : "not a file";
}

int mtd_cfg_load_file(const char *path, enum mtd_cfg_format fmt, struct mtd_cfg **out, struct mtd_cfg_errors *errs)
{
	struct stat st;
	char *buf = NULL, *basedir = NULL;
	const char *slash;
	size_t len = 0;
	int fd, rc;

	*out = NULL;
	if (path == NULL)
		return load("<embedded default>", "", mtd_cfg_default_yaml, strlen(mtd_cfg_default_yaml),
		            MTD_CFG_FORMAT_YAML, out, errs);
	/* O_NONBLOCK: a FIFO with no writer would block open() (the start, a
	 * reload on the control thread); a regular file ignores the flag. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return io_error(path, errno, "cannot open", errs);
	if (fstat(fd, &st) != 0) {
		rc = io_error(path, errno, "cannot stat", errs);
		goto out_fd;
	}
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > CFG_FILE_MAX) {
		struct mtd_cfg__diag d;

		rc = S_ISREG(st.st_mode) ? -EFBIG : -EINVAL;
		mtd_cfg__diag_init(&d, path);
		if (S_ISREG(st.st_mode))
			mtd_cfg__error(&d, (struct mtd_cfg__mark){0, 0}, NULL, "larger than 64 MiB (%llu bytes)",
			               (unsigned long long)st.st_size);
		else
			mtd_cfg__error(&d, (struct mtd_cfg__mark){0, 0}, NULL, "not a regular file (%s)",
			               mtd_cfg__file_kind(st.st_mode));
		if (d.oom || mtd_cfg__diag_export(&d, errs) != 0)
			rc = -ENOMEM;
		mtd_cfg__diag_fini(&d);
		goto out_fd;
	}
	buf = mtd_cfg__malloc((size_t)st.st_size + 1);
	if (buf == NULL) {
		rc = -ENOMEM;
		goto out_fd;
	}
	while (len < (size_t)st.st_size) {
		ssize_t k = read(fd, buf + len, (size_t)st.st_size - len);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			rc = io_error(path, errno, "cannot read", errs);
			goto out_buf;
		}
		if (k == 0)
			break;
		len += (size_t)k;
	}
	buf[len] = '\0';
	/* Relative file names inside the config (TLS files) are relative to
	 * the directory of the config file, not to the working directory. */
	slash = strrchr(path, '/');
	basedir = slash != NULL ? mtd_cfg__strndup(path, (size_t)(slash - path) + 1) : mtd_cfg__strdup("");
	if (basedir == NULL) {
		rc = -ENOMEM;
		goto out_buf;
	}
	if (fmt == MTD_CFG_FORMAT_AUTO)
		fmt = format_by_name(path);
	rc = load(path, basedir, buf, len, fmt, out, errs);
	mtd_cfg__free(basedir);
out_buf:
	mtd_cfg__free(buf);
out_fd:
	close(fd);
	return rc;
}
