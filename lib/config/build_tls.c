/* A tls block (a service's upstreams, etcd): files, the identity an
 * upstream must prove, and the patterns registry identities must match. */
#include <config.h> /* autoconf (lib/config/config.h is the API) */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/build-int.h"
#include "identity/identity.h"

#define FROM_REGISTRY "FROM_REGISTRY"

/* basedir + name for a relative name; checks the file can be read: a
 * regular file (O_NONBLOCK: a FIFO with no writer would block open()). */
char *mtd_cfg__tls_file(struct builder *b, const void *m, const char *field, const char *value, const char *path)
{
	char p[256], *full;
	struct stat st;
	int fd;

	if (value[0] == '/' || b->basedir[0] == '\0')
		full = mtd_cfg__strdup(value);
	else
		full = mtd_cfg__asprintf("%s%s", b->basedir, value);
	if (full == NULL) {
		b->d->oom = true;
		return NULL;
	}
	fd = open(full, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		BERR(mtd_cfg__at(b, m, field, NULL), mtd_cfg__sub(p, sizeof(p), path, field), "cannot read \"%s\": %s",
		     full, strerror(errno));
	else if (fstat(fd, &st) == 0 && !S_ISREG(st.st_mode))
		BERR(mtd_cfg__at(b, m, field, NULL), mtd_cfg__sub(p, sizeof(p), path, field),
		     "cannot read \"%s\": not a regular file (%s)", full, mtd_cfg__file_kind(st.st_mode));
	if (fd >= 0)
		close(fd);
	return full;
}

struct mtd_cfg_tls *mtd_cfg__build_tls(struct builder *b, const PbTls *m, const char *path)
{
	struct mtd_cfg_tls *t = mtd_cfg__calloc(1, sizeof(*t));
	bool has_cert = m->cert_file[0] != '\0', has_key = m->key_file[0] != '\0';
	char p[256];

	if (t == NULL) {
		b->d->oom = true;
		return NULL;
	}
	if (m->ca_file[0] == '\0')
		BERR(mtd_cfg__at(b, m, "ca_file", NULL), mtd_cfg__sub(p, sizeof(p), path, "ca_file"),
		     "is required when tls is set");
	else
		t->ca_file = mtd_cfg__tls_file(b, m, "ca_file", m->ca_file, path);
	if (m->server_name[0] != '\0')
		t->server_name = mtd_cfg__dup_or_oom(b, m->server_name);
	if (has_cert != has_key) {
		const char *f = has_cert ? "cert_file" : "key_file";

		BERR(mtd_cfg__at(b, m, f, NULL), mtd_cfg__sub(p, sizeof(p), path, f),
		     "cert_file and key_file must be set together (mTLS)");
	} else if (has_cert) {
		t->cert_file = mtd_cfg__tls_file(b, m, "cert_file", m->cert_file, path);
		t->key_file = mtd_cfg__tls_file(b, m, "key_file", m->key_file, path);
	}
	if (strcmp(m->server_identity, FROM_REGISTRY) == 0) {
		t->server_identity_registry = true; /* the service checks its source (mtd_cfg__build_service) */
	} else if (m->server_identity[0] != '\0') {
		const char *why = NULL;

		/* One identity, typed (lib/identity): no pattern. */
		if (strchr(m->server_identity, '*') != NULL)
			why = "an identity is exact, no '*' (allowed_identities holds patterns)";
		if (why != NULL || !mtd_identity_ok(m->server_identity, &why))
			BERR(mtd_cfg__at(b, m, "server_identity", NULL),
			     mtd_cfg__sub(p, sizeof(p), path, "server_identity"),
			     "\"%s\" is not an identity (a URI SAN such as \"spiffe://cluster.local/ns/NS/sa/SA\", "
			     "\"dns:NAME\" for a DNS SAN, or FROM_REGISTRY): %s",
			     m->server_identity, why);
		else
			t->server_identity = mtd_cfg__dup_or_oom(b, m->server_identity);
	}
	if (m->n_allowed_identities > 0 && !t->server_identity_registry)
		BERR(mtd_cfg__at(b, m, "allowed_identities", NULL),
		     mtd_cfg__sub(p, sizeof(p), path, "allowed_identities"),
		     "constrains the identities registry records name: it needs server_identity: FROM_REGISTRY");
	else if (m->n_allowed_identities > 0) {
		t->allowed_identities = mtd_cfg__calloc(m->n_allowed_identities, sizeof(*t->allowed_identities));
		if (t->allowed_identities == NULL)
			b->d->oom = true;
		for (size_t i = 0; t->allowed_identities != NULL && i < m->n_allowed_identities; i++) {
			const char *why = NULL;
			char q[300];

			snprintf(q, sizeof(q), "%s.allowed_identities[%zu]", path, i);
			if (!mtd_identity_pattern_ok(m->allowed_identities[i], &why))
				BERR(mtd_cfg__at(b, m, "allowed_identities", NULL), q, "\"%s\": %s",
				     m->allowed_identities[i], why);
			t->allowed_identities[i] = mtd_cfg__dup_or_oom(b, m->allowed_identities[i]);
			t->n_allowed_identities = i + 1;
		}
	}
	return t;
}
