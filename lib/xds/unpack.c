/* protobuf-c's unpack of an xDS resource, and the strings it cuts
 * (xds-int.h: mtd_xds__unpack); a resource's name read without either
 * (xds.h: mtd_xds_resource_name). protobuf-c hands a string field on as
 * a NUL-terminated char *: one with a NUL inside reads as the bytes
 * before it ("a\0x" as "a"), and would alias another name. The unpacked
 * message no longer says where its strings ended, so the bytes are read
 * again here, by the message's descriptors: a LEN field whose descriptor
 * says string is checked, one that says message is walked into. */
#include <config.h> /* autoconf */

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "config/config-int.h"
#include "pbwire/pbwire.h"
#include "xds/xds-int.h"
#include "xds/xds.h"

/* One message being walked: its type, the field of its parent it is
 * (NULL at the top), where its bytes start in the parent's. */
struct level {
	const ProtobufCMessageDescriptor *d;
	const ProtobufCFieldDescriptor *fd;
	const uint8_t *at;
	struct mtd_pbwire_iter it;
};

/* The index of the occurrence of field at `at` among field's in
 * msg[0..len) (a repeated field's position, as a refusal names it). */
static size_t occurrence(const uint8_t *msg, size_t len, uint32_t field, const uint8_t *at)
{
	struct mtd_pbwire_iter it;
	struct mtd_pbwire_value v;
	uint32_t f;
	size_t k = 0;

	mtd_pbwire_iter_init(&it, msg, len);
	while (mtd_pbwire_next(&it, &f, &v) == 1 && v.data != at)
		k += f == field;
	return k;
}

/* The path of lv[1..n] ("virtual_hosts[0].domains[1]") into buf. */
static void path_of(const struct level *lv, size_t n, char *buf, size_t cap)
{
	size_t used = 0;

	buf[0] = '\0';
	for (size_t i = 1; i <= n && used < cap; i++) {
		const ProtobufCFieldDescriptor *fd = lv[i].fd;
		int w;
		if (fd->label == PROTOBUF_C_LABEL_REPEATED)
			w = snprintf(buf + used, cap - used, "%s%s[%zu]", i > 1 ? "." : "", fd->name,
			             occurrence(lv[i - 1].it.msg, lv[i - 1].it.len, fd->id, lv[i].at));
		else
			w = snprintf(buf + used, cap - used, "%s%s", i > 1 ? "." : "", fd->name);
		used += w > 0 ? (size_t)w : 0;
	}
}

/* Walked as a pbwire iterator per level, without recursion. */
int mtd_xds__strings_whole(const ProtobufCMessageDescriptor *d, const uint8_t *msg, size_t len, const char *where,
                           char *why, size_t whylen)
{
	struct level lv[MTD_XDS_NEST_MAX + 2]; /* the top, the nested, a string */
	struct mtd_pbwire_value v;
	uint32_t field;
	size_t depth = 0;
	char path[256];
	const char *sep = where != NULL ? ": " : "";

	if (where == NULL)
		where = "";
	lv[0] = (struct level){.d = d};
	mtd_pbwire_iter_init(&lv[0].it, msg, len);
	for (;;) {
		int rc = mtd_pbwire_next(&lv[depth].it, &field, &v);
		if (rc == 0 && depth == 0)
			return 0;
		if (rc == 0) {
			depth--;
			continue;
		}
		if (rc < 0) /* as cla.c's reader (pbwire.h: stricter than protobuf-c) */
			return -EBADMSG;
		if (v.type != MTD_PBWIRE_LEN)
			continue;
		const ProtobufCFieldDescriptor *fd = protobuf_c_message_descriptor_get_field(lv[depth].d, field);
		if (fd == NULL || (fd->type != PROTOBUF_C_TYPE_STRING && fd->type != PROTOBUF_C_TYPE_MESSAGE))
			continue; /* unknown (kept as bytes), bytes, packed numbers */
		if (fd->type == PROTOBUF_C_TYPE_STRING && memchr(v.data, '\0', v.len) == NULL)
			continue;
		if (fd->type == PROTOBUF_C_TYPE_MESSAGE && depth == MTD_XDS_NEST_MAX) {
			path_of(lv, depth, path, sizeof(path));
			return mtd_xds__refuse(why, whylen, "%s%s%s: messages nested more than %d deep", where, sep,
			                       path, MTD_XDS_NEST_MAX);
		}
		lv[++depth] = (struct level){.d = fd->descriptor, .fd = fd, .at = v.data};
		mtd_pbwire_iter_init(&lv[depth].it, v.data, v.len);
		if (fd->type == PROTOBUF_C_TYPE_STRING) {
			path_of(lv, depth, path, sizeof(path));
			return mtd_xds__refuse(why, whylen, "%s%sa NUL in string field %s", where, sep, path);
		}
	}
}

int mtd_xds__unpack(const ProtobufCMessageDescriptor *d, const uint8_t *buf, size_t len, const char *where, void *out,
                    char *why, size_t whylen)
{
	ProtobufCMessage **m = out;

	*m = protobuf_c_message_unpack(d, &mtd_cfg__pb_allocator, len, buf);
	if (*m == NULL)
		return -EBADMSG;
	int rc = mtd_xds__strings_whole(d, buf, len, where, why, whylen);
	if (rc != 0) {
		protobuf_c_message_free_unpacked(*m, &mtd_cfg__pb_allocator);
		*m = NULL;
	}
	return rc;
}

/* ---- a resource's name, from the wire alone ---------------------------------- */

/* The name (field 1 of each of the four types, a string) read from the
 * wire alone. MTD_XDS_NAME_EXACT when the top level scans to its end,
 * every field 1 is a string and the last one (the one protobuf keeps)
 * is not empty, fits cap and holds no NUL: the name any decoder gives
 * the resource, printable or not; MTD_XDS_NAME_LONG when that name
 * does not fit cap. MTD_XDS_NAME_GUESS when the bytes go
 * wrong: the last printable name read before, which only a NACK's text
 * may quote (the resource may be any other). */
static int name_from_wire(const uint8_t *buf, size_t len, char *name, size_t cap)
{
	struct mtd_pbwire_iter it;
	struct mtd_pbwire_value f;
	uint32_t field;
	bool found = false, clean = true, too_long = false;
	int rc;

	mtd_pbwire_iter_init(&it, buf, len);
	while ((rc = mtd_pbwire_next(&it, &field, &f)) == 1) {
		if (field != 1)
			continue;
		bool text = f.type == MTD_PBWIRE_LEN && memchr(f.data, '\0', f.len) == NULL;
		/* Empty, it is no name: the same message as one without it. */
		found = text && f.len > 0 && f.len < cap;
		too_long = text && f.len >= cap;
		clean &= f.type == MTD_PBWIRE_LEN;
		if (found) {
			memcpy(name, f.data, f.len);
			name[f.len] = '\0';
		}
	}
	if (clean && rc == 0 && (found || too_long)) {
		if (too_long)
			name[0] = '\0'; /* equal to no name asked for */
		return too_long ? MTD_XDS_NAME_LONG : MTD_XDS_NAME_EXACT;
	}
	return found && mtd_xds__name_ok(name) ? MTD_XDS_NAME_GUESS : -EINVAL;
}

/* Field 1 is the name in all four types. Where the whole resource
 * decodes, the last field 1 on the wire is the name protobuf-c keeps;
 * where it does not, the wire is all there is. An unpack of the whole
 * resource for its name alone (every resource's name is read before its
 * parse, most to be skipped) would cost as much as the parse. */
int mtd_xds_resource_name(const char *type_url, const uint8_t *buf, size_t len, char *name, size_t cap)
{
	if (cap == 0)
		return -EINVAL;
	if (strcmp(type_url, MTD_XDS_TYPE_CLUSTER) != 0 && strcmp(type_url, MTD_XDS_TYPE_ENDPOINT) != 0 &&
	    strcmp(type_url, MTD_XDS_TYPE_LISTENER) != 0 && strcmp(type_url, MTD_XDS_TYPE_ROUTE) != 0)
		return -EINVAL;
	return name_from_wire(buf, len, name, cap);
}
