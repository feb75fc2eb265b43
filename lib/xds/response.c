/* The DiscoveryResponse read straight from the wire (xds.h). protobuf-c's
 * unpack copies every resource's bytes and type URL into a new
 * google.protobuf.Any: a state-of-the-world push of 10,000 clusters is
 * 10,000 copies the ADS client compares and mostly drops. Here each
 * resource is a slice of the message, and only the three strings are
 * copied. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pbwire/pbwire.h"
#include "xds/xds.h"

/* DiscoveryResponse's and google.protobuf.Any's field numbers. */
enum { F_VERSION_INFO = 1, F_RESOURCES = 2, F_TYPE_URL = 4, F_NONCE = 5 };
enum { F_ANY_TYPE_URL = 1, F_ANY_VALUE = 2 };

/* A string field: LEN, no NUL inside (it is handed on as C text). */
static bool text_ok(const struct mtd_pbwire_value *v)
{
	return v->type == MTD_PBWIRE_LEN && memchr(v->data, '\0', v->len) == NULL;
}

static int any_read(const struct mtd_pbwire_value *v, struct mtd_xds_any *a)
{
	struct mtd_pbwire_iter it;
	struct mtd_pbwire_value f;
	uint32_t field;
	int rc;

	memset(a, 0, sizeof(*a));
	a->type_url = "";
	a->value = (const uint8_t *)""; /* absent: proto3's empty bytes */
	mtd_pbwire_iter_init(&it, v->data, v->len);
	while ((rc = mtd_pbwire_next(&it, &field, &f)) == 1) {
		/* A field written twice: the last one counts (protobuf's merge). */
		if (field == F_ANY_TYPE_URL) {
			if (f.type != MTD_PBWIRE_LEN)
				return -EBADMSG;
			a->type_url = (const char *)f.data;
			a->type_url_len = f.len;
		} else if (field == F_ANY_VALUE) {
			if (f.type != MTD_PBWIRE_LEN)
				return -EBADMSG;
			a->value = f.data;
			a->len = f.len;
		}
	}
	return rc;
}

static int text_take(char **slot, const struct mtd_pbwire_value *v)
{
	if (!text_ok(v))
		return -EBADMSG;
	char *s = malloc(v->len + 1);
	if (s == NULL)
		return -ENOMEM;
	memcpy(s, v->data, v->len);
	s[v->len] = '\0';
	free(*slot);
	*slot = s;
	return 0;
}

int mtd_xds_response_read(const uint8_t *msg, size_t len, struct mtd_xds_response *out)
{
	struct mtd_pbwire_iter it;
	struct mtd_pbwire_value f;
	uint32_t field;
	size_t n = 0;
	int rc;

	memset(out, 0, sizeof(*out));
	/* First pass: the message is well formed, and how many resources. */
	mtd_pbwire_iter_init(&it, msg, len);
	while ((rc = mtd_pbwire_next(&it, &field, &f)) == 1)
		if (field == F_RESOURCES)
			n++;
	if (rc != 0)
		return rc;
	if (n > MTD_XDS_MAX_RESOURCES) {
		out->too_many = n;
		n = 0;
	}
	if (n > 0 && (out->res = calloc(n, sizeof(*out->res))) == NULL)
		return -ENOMEM;
	mtd_pbwire_iter_init(&it, msg, len);
	while (rc == 0 && mtd_pbwire_next(&it, &field, &f) == 1) {
		switch (field) {
		case F_VERSION_INFO:
			rc = text_take(&out->version_info, &f);
			break;
		case F_TYPE_URL:
			rc = text_take(&out->type_url, &f);
			break;
		case F_NONCE:
			rc = text_take(&out->nonce, &f);
			break;
		case F_RESOURCES:
			if (f.type != MTD_PBWIRE_LEN)
				rc = -EBADMSG;
			else if (out->too_many == 0)
				rc = any_read(&f, &out->res[out->n_res++]);
			break;
		default:
			break; /* canary, and what a later version adds */
		}
	}
	/* Absent strings are proto3's empty ones. */
	if (rc == 0 && out->version_info == NULL)
		rc = (out->version_info = strdup("")) != NULL ? 0 : -ENOMEM;
	if (rc == 0 && out->type_url == NULL)
		rc = (out->type_url = strdup("")) != NULL ? 0 : -ENOMEM;
	if (rc == 0 && out->nonce == NULL)
		rc = (out->nonce = strdup("")) != NULL ? 0 : -ENOMEM;
	if (rc != 0)
		mtd_xds_response_clear(out);
	return rc;
}

void mtd_xds_response_clear(struct mtd_xds_response *r)
{
	free(r->version_info);
	free(r->type_url);
	free(r->nonce);
	free(r->res);
	memset(r, 0, sizeof(*r));
}

bool mtd_xds_any_is(const struct mtd_xds_any *a, const char *type_url)
{
	size_t n = strlen(type_url);
	return a->type_url_len == n && memcmp(a->type_url, type_url, n) == 0;
}
