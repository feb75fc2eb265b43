/* /config_dump: a protobuf-c message as JSON, descriptor driven, so every
 * field any helper adds to config.proto shows up without a change here,
 * and a secret one is redacted by its name. */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <protobuf-c/protobuf-c.h>

#include "admin/admin.h"

bool mtd_admin_is_secret_field(const char *name)
{
	static const char *const words[] = {"password", "secret", "token", "credential", "private_key"};
	size_t n = strlen(name);
	/* A file name is not a secret: the config holds the name, never the
	 * contents (tls.key_file, discovery.etcd.password_file). */
	if (n >= 5 && strcmp(name + n - 5, "_file") == 0)
		return false;
	if (strcmp(name, "key") == 0)
		return true;
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (strstr(name, words[i]))
			return true;
	return false;
}

static void dump_msg(struct mtd_json *j, const ProtobufCMessage *msg);

static bool is_named(const ProtobufCMessageDescriptor *d, const char *name)
{
	return strcmp(d->name, name) == 0;
}

/* google.protobuf.Duration in the proto3 JSON form: "1.500s". */
static void dump_duration(struct mtd_json *j, const ProtobufCMessage *msg)
{
	int64_t s = 0;
	int32_t ns = 0;
	const ProtobufCMessageDescriptor *d = msg->descriptor;
	for (unsigned i = 0; i < d->n_fields; i++) {
		const void *p = (const char *)msg + d->fields[i].offset;
		if (strcmp(d->fields[i].name, "seconds") == 0)
			s = *(const int64_t *)p;
		else if (strcmp(d->fields[i].name, "nanos") == 0)
			ns = *(const int32_t *)p;
	}
	char buf[48];
	bool neg = s < 0 || ns < 0;
	uint64_t us = s < 0 ? (uint64_t)0 - (uint64_t)s : (uint64_t)s;
	uint32_t uns = (uint32_t)(ns < 0 ? -ns : ns);
	if (uns == 0)
		snprintf(buf, sizeof(buf), "%s%" PRIu64 "s", neg ? "-" : "", us);
	else if (uns % 1000000 == 0)
		snprintf(buf, sizeof(buf), "%s%" PRIu64 ".%03us", neg ? "-" : "", us, uns / 1000000);
	else if (uns % 1000 == 0)
		snprintf(buf, sizeof(buf), "%s%" PRIu64 ".%06us", neg ? "-" : "", us, uns / 1000);
	else
		snprintf(buf, sizeof(buf), "%s%" PRIu64 ".%09us", neg ? "-" : "", us, uns);
	mtd_json_str(j, buf);
}

/* One scalar or message value at p of field f. */
static void dump_value(struct mtd_json *j, const ProtobufCFieldDescriptor *f, const void *p)
{
	switch (f->type) {
	case PROTOBUF_C_TYPE_INT32:
	case PROTOBUF_C_TYPE_SINT32:
	case PROTOBUF_C_TYPE_SFIXED32:
		mtd_json_i64(j, *(const int32_t *)p);
		break;
	case PROTOBUF_C_TYPE_UINT32:
	case PROTOBUF_C_TYPE_FIXED32:
		mtd_json_u64(j, *(const uint32_t *)p);
		break;
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64: {
		/* proto3 JSON: 64-bit integers are strings. */
		char buf[24];
		snprintf(buf, sizeof(buf), "%" PRId64, *(const int64_t *)p);
		mtd_json_str(j, buf);
		break;
	}
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64: {
		char buf[24];
		snprintf(buf, sizeof(buf), "%" PRIu64, *(const uint64_t *)p);
		mtd_json_str(j, buf);
		break;
	}
	case PROTOBUF_C_TYPE_FLOAT:
		mtd_json_dbl(j, *(const float *)p);
		break;
	case PROTOBUF_C_TYPE_DOUBLE:
		mtd_json_dbl(j, *(const double *)p);
		break;
	case PROTOBUF_C_TYPE_BOOL:
		mtd_json_bool(j, *(const protobuf_c_boolean *)p);
		break;
	case PROTOBUF_C_TYPE_ENUM: {
		const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value(
		        (const ProtobufCEnumDescriptor *)f->descriptor, *(const int *)p);
		if (ev)
			mtd_json_str(j, ev->name);
		else
			mtd_json_i64(j, *(const int *)p);
		break;
	}
	case PROTOBUF_C_TYPE_STRING:
		if (mtd_admin_is_secret_field(f->name))
			mtd_json_str(j, MTD_ADMIN_REDACTED);
		else
			mtd_json_str(j, *(const char *const *)p);
		break;
	case PROTOBUF_C_TYPE_BYTES:
		/* Bytes are never dumped: they could be anything (keys included). */
		mtd_json_str(j, MTD_ADMIN_REDACTED);
		break;
	case PROTOBUF_C_TYPE_MESSAGE: {
		const ProtobufCMessage *m = *(const ProtobufCMessage *const *)p;
		if (m)
			dump_msg(j, m);
		else
			mtd_json_null(j);
		break;
	}
	}
}

/* Whether a singular proto3 field holds its default (and is left out). */
static bool is_default(const ProtobufCFieldDescriptor *f, const void *p)
{
	switch (f->type) {
	case PROTOBUF_C_TYPE_INT32:
	case PROTOBUF_C_TYPE_SINT32:
	case PROTOBUF_C_TYPE_SFIXED32:
	case PROTOBUF_C_TYPE_UINT32:
	case PROTOBUF_C_TYPE_FIXED32:
	case PROTOBUF_C_TYPE_ENUM:
		return *(const uint32_t *)p == 0;
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64:
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64:
		return *(const uint64_t *)p == 0;
	case PROTOBUF_C_TYPE_FLOAT:
		return *(const float *)p == 0.0f;
	case PROTOBUF_C_TYPE_DOUBLE:
		return *(const double *)p == 0.0;
	case PROTOBUF_C_TYPE_BOOL:
		return !*(const protobuf_c_boolean *)p;
	case PROTOBUF_C_TYPE_STRING: {
		const char *s = *(const char *const *)p;
		return !s || !*s;
	}
	case PROTOBUF_C_TYPE_BYTES:
		return ((const ProtobufCBinaryData *)p)->len == 0;
	case PROTOBUF_C_TYPE_MESSAGE:
		return *(const void *const *)p == NULL;
	}
	return true;
}

static size_t elem_size(ProtobufCType t)
{
	switch (t) {
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64:
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64:
	case PROTOBUF_C_TYPE_DOUBLE:
		return 8;
	case PROTOBUF_C_TYPE_STRING:
	case PROTOBUF_C_TYPE_MESSAGE:
		return sizeof(void *);
	case PROTOBUF_C_TYPE_BYTES:
		return sizeof(ProtobufCBinaryData);
	case PROTOBUF_C_TYPE_BOOL:
		return sizeof(protobuf_c_boolean);
	default:
		return 4;
	}
}

static void dump_msg(struct mtd_json *j, const ProtobufCMessage *msg)
{
	const ProtobufCMessageDescriptor *d = msg->descriptor;
	if (is_named(d, "google.protobuf.Duration")) {
		dump_duration(j, msg);
		return;
	}
	/* Wrappers (DoubleValue, UInt32Value, ...) are their value. */
	if (strncmp(d->name, "google.protobuf.", 16) == 0 && d->n_fields == 1 &&
	    strcmp(d->fields[0].name, "value") == 0) {
		dump_value(j, &d->fields[0], (const char *)msg + d->fields[0].offset);
		return;
	}
	/* A map's entry: its key is a name, never a secret ("key" would read
	 * as one); the value of a map of request headers (otlp.headers: API
	 * keys, bearer tokens) always is. */
	size_t dn = strlen(d->name);
	if (d->n_fields == 2 && dn > 5 && strcmp(d->name + dn - 5, "Entry") == 0 &&
	    strcmp(d->fields[0].name, "key") == 0 && strcmp(d->fields[1].name, "value") == 0) {
		mtd_json_obj_begin(j);
		mtd_json_key(j, "key");
		mtd_json_str(j, *(const char *const *)((const char *)msg + d->fields[0].offset));
		mtd_json_key(j, "value");
		if (dn >= 12 && strcmp(d->name + dn - 12, "HeadersEntry") == 0)
			mtd_json_str(j, MTD_ADMIN_REDACTED);
		else
			dump_value(j, &d->fields[1], (const char *)msg + d->fields[1].offset);
		mtd_json_obj_end(j);
		return;
	}
	mtd_json_obj_begin(j);
	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		const char *p = (const char *)msg + f->offset;
		if (f->label == PROTOBUF_C_LABEL_REPEATED) {
			size_t n = *(const size_t *)((const char *)msg + f->quantifier_offset);
			if (n == 0)
				continue;
			const char *arr = *(const char *const *)p;
			mtd_json_key(j, f->name);
			mtd_json_arr_begin(j);
			for (size_t k = 0; k < n; k++)
				dump_value(j, f, arr + k * elem_size(f->type));
			mtd_json_arr_end(j);
			continue;
		}
		if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->quantifier_offset &&
		    f->type != PROTOBUF_C_TYPE_MESSAGE && f->type != PROTOBUF_C_TYPE_STRING) {
			if (!*(const protobuf_c_boolean *)((const char *)msg + f->quantifier_offset))
				continue;
		} else if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
			if (*(const uint32_t *)((const char *)msg + f->quantifier_offset) != f->id)
				continue;
		} else if (is_default(f, p)) {
			continue;
		}
		mtd_json_key(j, f->name);
		dump_value(j, f, p);
	}
	mtd_json_obj_end(j);
}

void mtd_admin_dump_message(struct mtd_json *j, const struct ProtobufCMessage *msg)
{
	dump_msg(j, msg);
}
