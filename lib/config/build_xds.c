/* The top-level xds block: the management server services with
 * discovery.xds follow, from the config's own keys or from a gRPC xDS
 * bootstrap file (xds.bootstrap, else GRPC_XDS_BOOTSTRAP when the block
 * names no server). */
#include <config.h> /* autoconf (lib/config/config.h is the API) */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "config/build-int.h"
#include "config/config.h"

#define BOOTSTRAP_MAX (1u << 20) /* bytes of a bootstrap file read at most */

/* What maitred takes from a bootstrap file. Strings owned (free()). */
struct bootstrap {
	char *server_uri; /* xds_servers[0].server_uri */
	char *creds;      /* the first of xds_servers[0].channel_creds[].type maitred speaks ("insecure",
	                   * "tls"), as gRPC takes the first it supports; else the first listed; NULL =
	                   * none listed */
	char *node_id;    /* node.id */
	char *zone;       /* node.locality.zone */
	struct mtd_cfg_cert_providers providers; /* certificate_providers */
};

static yaml_node_t *member(yaml_document_t *doc, yaml_node_t *map, const char *key)
{
	if (map == NULL || map->type != YAML_MAPPING_NODE)
		return NULL;
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
		yaml_node_t *k = yaml_document_get_node(doc, p->key);
		if (k != NULL && k->type == YAML_SCALAR_NODE && strcmp((const char *)k->data.scalar.value, key) == 0)
			return yaml_document_get_node(doc, p->value);
	}
	return NULL;
}

/* The type of the first channel_creds entry maitred speaks, else of the
 * first entry; NULL when there is none. */
static yaml_node_t *creds_type(yaml_document_t *doc, yaml_node_t *seq)
{
	yaml_node_t *first = NULL;

	if (seq == NULL || seq->type != YAML_SEQUENCE_NODE)
		return NULL;
	for (yaml_node_item_t *i = seq->data.sequence.items.start; i < seq->data.sequence.items.top; i++) {
		yaml_node_t *t = member(doc, yaml_document_get_node(doc, *i), "type");
		if (t == NULL || t->type != YAML_SCALAR_NODE)
			continue;
		if (strcmp((const char *)t->data.scalar.value, "insecure") == 0 ||
		    strcmp((const char *)t->data.scalar.value, "tls") == 0)
			return t;
		if (first == NULL)
			first = t;
	}
	return first;
}

static yaml_node_t *first(yaml_document_t *doc, yaml_node_t *seq)
{
	if (seq == NULL || seq->type != YAML_SEQUENCE_NODE ||
	    seq->data.sequence.items.start == seq->data.sequence.items.top)
		return NULL;
	return yaml_document_get_node(doc, *seq->data.sequence.items.start);
}

/* A scalar's text copied, NULL when absent or not a scalar; -1 on out of
 * memory. */
static int text_of(yaml_node_t *n, char **out)
{
	*out = NULL;
	if (n == NULL || n->type != YAML_SCALAR_NODE)
		return 0;
	*out = strdup((const char *)n->data.scalar.value);
	return *out != NULL ? 0 : -1;
}

#define PROVIDERS_MAX      64
#define PROVIDER_NAME_MAX  256
#define REFRESH_DEFAULT_MS (600 * 1000) /* gRPC's file_watcher default */

/* A provider's file name, relative ones resolved against the directory of
 * the bootstrap file, and readable now (as maitred's own TLS files must
 * be at load: a typo is said at start, not at the first handshake). 0,
 * or -1 with the reason in why. */
static int provider_file(const char *bootstrap, const char *inst, yaml_node_t *n, const char *field, char **out,
                         char *why, size_t whylen)
{
	const char *v, *slash = strrchr(bootstrap, '/');
	struct stat st;
	int fd;

	*out = NULL;
	if (n == NULL)
		return 0;
	/* A NUL inside (JSON's \u0000) would name the file before it. */
	if (n->type != YAML_SCALAR_NODE || ((const char *)n->data.scalar.value)[0] == '\0' ||
	    n->data.scalar.length > 4096 || memchr(n->data.scalar.value, '\0', n->data.scalar.length) != NULL) {
		snprintf(why, whylen, "certificate_providers[\"%s\"].config.%s: must be a file name", inst, field);
		return -1;
	}
	v = (const char *)n->data.scalar.value;
	if (v[0] == '/' || slash == NULL) {
		*out = strdup(v);
	} else {
		size_t dir = (size_t)(slash - bootstrap) + 1, len = strlen(v);
		*out = malloc(dir + len + 1);
		if (*out != NULL) {
			memcpy(*out, bootstrap, dir);
			memcpy(*out + dir, v, len + 1);
		}
	}
	if (*out == NULL) {
		snprintf(why, whylen, "out of memory");
		return -1;
	}
	/* O_NONBLOCK: a FIFO with no writer would block open(). */
	fd = open(*out, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		snprintf(why, whylen, "certificate_providers[\"%s\"].config.%s: cannot read \"%s\": %s", inst, field,
		         *out, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) == 0 && !S_ISREG(st.st_mode)) {
		snprintf(why, whylen,
		         "certificate_providers[\"%s\"].config.%s: cannot read \"%s\": not a regular file (%s)", inst,
		         field, *out, mtd_cfg__file_kind(st.st_mode));
		close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

/* certificate_providers: instance name -> {plugin_name: "file_watcher",
 * config: {certificate_file, private_key_file, ca_certificate_file,
 * refresh_interval}}, gRPC's rules (gRFC A29): the certificate and key
 * together, at least them or the CA. 0, or -1 with the reason in why. */
static int read_providers(yaml_document_t *doc, yaml_node_t *map, const char *bootstrap,
                          struct mtd_cfg_cert_providers *out, char *why, size_t whylen)
{
	size_t n;

	if (map == NULL)
		return 0;
	if (map->type != YAML_MAPPING_NODE) {
		snprintf(why, whylen, "certificate_providers: must be an object");
		return -1;
	}
	n = (size_t)(map->data.mapping.pairs.top - map->data.mapping.pairs.start);
	if (n > PROVIDERS_MAX) {
		snprintf(why, whylen, "certificate_providers: %zu instances, at most %d", n, PROVIDERS_MAX);
		return -1;
	}
	out->e = calloc(n ? n : 1, sizeof(*out->e));
	if (out->e == NULL) {
		snprintf(why, whylen, "out of memory");
		return -1;
	}
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
		yaml_node_t *k = yaml_document_get_node(doc, p->key), *v = yaml_document_get_node(doc, p->value);
		struct mtd_cfg_cert_provider *e = &out->e[out->n];
		const char *inst, *plugin;
		yaml_node_t *pn, *cfg, *ri;

		/* A NUL inside would make "a\0b" the instance a cluster names "a". */
		if (k == NULL || k->type != YAML_SCALAR_NODE || k->data.scalar.length == 0 ||
		    k->data.scalar.length > PROVIDER_NAME_MAX ||
		    memchr(k->data.scalar.value, '\0', k->data.scalar.length) != NULL) {
			snprintf(why, whylen, "certificate_providers: an instance name must be 1 to %d characters, no NUL",
			         PROVIDER_NAME_MAX);
			return -1;
		}
		inst = (const char *)k->data.scalar.value;
		if (mtd_cfg_cert_provider_find(out, inst) != NULL) {
			snprintf(why, whylen, "certificate_providers: \"%s\" twice", inst);
			return -1;
		}
		pn = member(doc, v, "plugin_name");
		if (v == NULL || v->type != YAML_MAPPING_NODE || pn == NULL || pn->type != YAML_SCALAR_NODE) {
			snprintf(why, whylen, "certificate_providers[\"%s\"]: an object with a plugin_name is required",
			         inst);
			return -1;
		}
		plugin = (const char *)pn->data.scalar.value;
		if (strcmp(plugin, "file_watcher") != 0) {
			snprintf(why, whylen,
			         "certificate_providers[\"%s\"].plugin_name \"%.64s\": maitred reads file_watcher only",
			         inst, plugin);
			return -1;
		}
		cfg = member(doc, v, "config");
		if (cfg == NULL || cfg->type != YAML_MAPPING_NODE) {
			snprintf(why, whylen, "certificate_providers[\"%s\"].config: must be an object", inst);
			return -1;
		}
		out->n++;
		e->name = strdup(inst);
		if (e->name == NULL) {
			snprintf(why, whylen, "out of memory");
			return -1;
		}
		if (provider_file(bootstrap, inst, member(doc, cfg, "certificate_file"), "certificate_file",
		                  &e->cert_file, why, whylen) != 0 ||
		    provider_file(bootstrap, inst, member(doc, cfg, "private_key_file"), "private_key_file",
		                  &e->key_file, why, whylen) != 0 ||
		    provider_file(bootstrap, inst, member(doc, cfg, "ca_certificate_file"), "ca_certificate_file",
		                  &e->ca_file, why, whylen) != 0)
			return -1;
		if ((e->cert_file == NULL) != (e->key_file == NULL)) {
			snprintf(why, whylen,
			         "certificate_providers[\"%s\"].config: certificate_file and private_key_file go "
			         "together",
			         inst);
			return -1;
		}
		if (e->cert_file == NULL && e->ca_file == NULL) {
			snprintf(why, whylen,
			         "certificate_providers[\"%s\"].config: certificate_file and private_key_file, or "
			         "ca_certificate_file, are required",
			         inst);
			return -1;
		}
		e->refresh_ms = REFRESH_DEFAULT_MS;
		ri = member(doc, cfg, "refresh_interval");
		if (ri != NULL) {
			const char *bad = "must be a duration such as \"600s\"";
			int64_t sec = 0;
			int32_t ns = 0;
			if (ri->type != YAML_SCALAR_NODE ||
			    mtd_cfg__parse_duration((const char *)ri->data.scalar.value, &sec, &ns, &bad) != 0 ||
			    sec < 0 || ns < 0 || (sec == 0 && ns < 1000000) || sec > 366 * 86400) {
				snprintf(why, whylen,
				         "certificate_providers[\"%s\"].config.refresh_interval: %s (1ms to 366 days)",
				         inst, bad);
				return -1;
			}
			e->refresh_ms = sec * 1000 + ns / 1000000;
		}
	}
	return 0;
}

/* Read and parse the bootstrap file: 0, or -1 with the reason in why. */
static int read_bootstrap(const char *file, struct bootstrap *bs, char *why, size_t whylen)
{
	yaml_parser_t parser;
	yaml_document_t doc;
	char *data = NULL;
	size_t len = 0;
	ssize_t got;
	int fd, rc = -1;

	memset(bs, 0, sizeof(*bs));
	/* O_NONBLOCK: a FIFO with no writer would block open(). */
	fd = open(file, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		snprintf(why, whylen, "cannot read \"%s\": %s", file, strerror(errno));
		return -1;
	}
	struct stat st;
	if (fstat(fd, &st) == 0 && !S_ISREG(st.st_mode)) {
		close(fd);
		snprintf(why, whylen, "\"%s\": not a regular file (%s)", file, mtd_cfg__file_kind(st.st_mode));
		return -1;
	}
	data = malloc(BOOTSTRAP_MAX + 1);
	if (data == NULL) {
		close(fd);
		snprintf(why, whylen, "out of memory");
		return -1;
	}
	while (len <= BOOTSTRAP_MAX && (got = read(fd, data + len, BOOTSTRAP_MAX + 1 - len)) > 0)
		len += (size_t)got;
	close(fd);
	if (len > BOOTSTRAP_MAX) {
		snprintf(why, whylen, "\"%s\" is larger than %u bytes", file, BOOTSTRAP_MAX);
		free(data);
		return -1;
	}
	struct mtd_cfg__mark deep;
	int too_deep = mtd_cfg__yaml_too_deep(data, len, MTD_CFG_NEST_MAX, &deep);

	if (too_deep != 0 || !yaml_parser_initialize(&parser)) {
		free(data);
		if (too_deep > 0)
			snprintf(why, whylen, "\"%s\" is not JSON: nesting deeper than %d levels (line %u)", file,
			         MTD_CFG_NEST_MAX, deep.line);
		else
			snprintf(why, whylen, "out of memory");
		return -1;
	}
	yaml_parser_set_input_string(&parser, (const unsigned char *)data, len);
	if (!yaml_parser_load(&parser, &doc)) {
		snprintf(why, whylen, "\"%s\" is not JSON: %s (line %zu)", file,
		         parser.problem ? parser.problem : "syntax error", parser.problem_mark.line + 1);
		yaml_parser_delete(&parser);
		free(data);
		return -1;
	}
	yaml_node_t *root = yaml_document_get_root_node(&doc);
	yaml_node_t *server = first(&doc, member(&doc, root, "xds_servers"));
	yaml_node_t *node = member(&doc, root, "node");
	if (text_of(member(&doc, server, "server_uri"), &bs->server_uri) != 0 ||
	    text_of(creds_type(&doc, member(&doc, server, "channel_creds")), &bs->creds) != 0 ||
	    text_of(member(&doc, node, "id"), &bs->node_id) != 0 ||
	    text_of(member(&doc, member(&doc, node, "locality"), "zone"), &bs->zone) != 0)
		snprintf(why, whylen, "out of memory");
	else if (root == NULL || root->type != YAML_MAPPING_NODE)
		snprintf(why, whylen, "\"%s\": not a JSON object", file);
	else if (bs->server_uri == NULL || bs->server_uri[0] == '\0')
		snprintf(why, whylen, "\"%s\": xds_servers[0].server_uri is required", file);
	else if (read_providers(&doc, member(&doc, root, "certificate_providers"), file, &bs->providers, why, whylen) ==
	         0)
		rc = 0;
	yaml_document_delete(&doc);
	yaml_parser_delete(&parser);
	free(data);
	return rc;
}

static void bootstrap_fini(struct bootstrap *bs)
{
	free(bs->server_uri);
	free(bs->creds);
	free(bs->node_id);
	free(bs->zone);
	mtd_cfg_cert_providers_fini(&bs->providers);
}

struct mtd_cfg_xds *mtd_cfg__build_xds(struct builder *b, const PbXds *m)
{
	const char *env = getenv("GRPC_XDS_BOOTSTRAP");
	struct bootstrap bs = {0};
	struct mtd_cfg_xds *x;
	const char *server, *node_id, *zone;
	char p[64], why[512];

	if (m == NULL)
		return NULL;
	x = mtd_cfg__calloc(1, sizeof(*x));
	if (x == NULL) {
		b->d->oom = true;
		return NULL;
	}
	if (m->listener[0] != '\0') {
		size_t n = strlen(m->listener);
		bool printable = n <= 1024;
		for (size_t i = 0; i < n && printable; i++)
			printable = (unsigned char)m->listener[i] > 0x20 && m->listener[i] != 0x7f;
		if (!printable)
			BERR(mtd_cfg__at(b, m, "listener", NULL), "xds.listener",
			     "must be a Listener name: at most 1024 printable characters, no spaces");
		else
			x->listener = mtd_cfg__dup_or_oom(b, m->listener);
	}
	x->initial_wait_ms = mtd_cfg__dur_ms(b, m->initial_wait, MTD_CFG_INITIAL_WAIT_MS, ZERO_ALLOWED,
	                                     mtd_cfg__at(b, m, "initial_wait", NULL), "xds.initial_wait");
	if (m->initial_wait != NULL && m->listener[0] == '\0')
		BERR(mtd_cfg__at(b, m, "initial_wait", NULL), "xds.initial_wait",
		     "is the wait for xds.listener's first routes, and no listener is set (a service's wait for its "
		     "first endpoints is its discovery.initial_wait)");
	else if (x->initial_wait_ms > MTD_CFG_INITIAL_WAIT_MAX_MS) {
		BERR(mtd_cfg__at(b, m, "initial_wait", NULL), "xds.initial_wait",
		     "must be at most 1h (calls past it are routed by :path; a client's deadline ends them sooner)");
		x->initial_wait_ms = MTD_CFG_INITIAL_WAIT_MS;
	}
	if (m->server[0] != '\0' && m->bootstrap[0] != '\0') {
		BERR(mtd_cfg__at(b, m, "bootstrap", NULL), "xds.bootstrap",
		     "and xds.server are both set: the server comes from one of them");
		return x;
	}
	if (m->bootstrap[0] != '\0') {
		size_t errs = b->d->n_errs;
		x->bootstrap = mtd_cfg__tls_file(b, m, "bootstrap", m->bootstrap, "xds");
		if (b->d->n_errs != errs)
			return x; /* unreadable, said once */
	} else if (m->server[0] == '\0') {
		if (env == NULL || env[0] == '\0') {
			BERR(mtd_cfg__at(b, m, "server", NULL), "xds.server",
			     "is required (\"HOST:PORT\"), or xds.bootstrap, or GRPC_XDS_BOOTSTRAP in the environment");
			return x;
		}
		x->bootstrap = mtd_cfg__dup_or_oom(b, env);
	}
	if (b->d->oom)
		return x;
	server = m->server;
	if (x->bootstrap != NULL) {
		const char *field = m->bootstrap[0] != '\0' ? "xds.bootstrap" : "xds (GRPC_XDS_BOOTSTRAP)";

		if (read_bootstrap(x->bootstrap, &bs, why, sizeof(why)) != 0) {
			BERR(mtd_cfg__at(b, m, "bootstrap", NULL), field, "%s", why);
			bootstrap_fini(&bs);
			return x;
		}
		/* gRPC's bootstrap may spell the target as a URI scheme. */
		server = bs.server_uri;
		if (strncmp(server, "dns:///", 7) == 0)
			server += 7;
		if (strncmp(server, "unix:", 5) == 0) {
			/* istio-agent's bootstrap for proxyless gRPC names its socket. */
			BERR(mtd_cfg__at(b, m, "bootstrap", NULL), field,
			     "xds_servers[0].server_uri \"%.200s\" is a Unix socket: maitred dials HOST:PORT (h2c or TLS)",
			     server);
			bootstrap_fini(&bs);
			return x;
		}
		if (m->tls == NULL && bs.creds != NULL && strcmp(bs.creds, "insecure") != 0)
			BERR(mtd_cfg__at(b, m, "bootstrap", NULL), field,
			     "channel_creds \"%s\": maitred speaks h2c, or TLS with xds.tls {ca_file, ...}", bs.creds);
	}
	if (mtd_cfg__build_addr(b, server, mtd_cfg__at(b, m, x->bootstrap != NULL ? "bootstrap" : "server", NULL),
	                        x->bootstrap != NULL ? "xds.bootstrap: xds_servers[0].server_uri" : "xds.server",
	                        &x->server) != 0) {
		bootstrap_fini(&bs);
		return x;
	}
	node_id = m->node_id[0] != '\0'                         ? m->node_id
	          : bs.node_id != NULL && bs.node_id[0] != '\0' ? bs.node_id
	                                                        : b->node_id;
	zone = m->zone[0] != '\0' ? m->zone : bs.zone != NULL && bs.zone[0] != '\0' ? bs.zone : b->zone;
	if (strlen(node_id) > 1024 || (zone != NULL && strlen(zone) > 255))
		BERR(mtd_cfg__at(b, m, "node_id", NULL), "xds.node_id", "node id (1024) or zone (255) too long");
	x->node_id = mtd_cfg__dup_or_oom(b, node_id);
	if (zone != NULL)
		x->zone = mtd_cfg__dup_or_oom(b, zone);
	x->providers = bs.providers; /* taken */
	bs.providers = (struct mtd_cfg_cert_providers){0};
	bootstrap_fini(&bs);
	if (m->tls != NULL) {
		x->tls = mtd_cfg__build_tls(b, m->tls, "xds.tls");
		if (m->tls->server_identity[0] != '\0' || m->tls->n_allowed_identities != 0)
			BERR(mtd_cfg__at(b, m->tls, "server_identity", NULL),
			     mtd_cfg__sub(p, sizeof(p), "xds.tls", "server_identity"),
			     "server_identity and allowed_identities are for a service's upstreams, not for the xds "
			     "server");
	}
	return x;
}
