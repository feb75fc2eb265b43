/* The generic proto3-JSON-mapping loader: a libyaml document mapped onto any
 * protobuf-c message by walking its descriptors, so a field added to the
 * .proto needs no change here.
 *
 * What is accepted (proto3 JSON mapping, https://protobuf.dev/programming-
 * guides/json/, with the YAML-friendly extras marked +):
 *   keys        the .proto name (snake_case) or its lowerCamel json name
 *   null        (or an empty YAML value) = field left unset
 *   integers    numbers or quoted numbers; 1e3 / 2.0 when integral
 *   floats      numbers, quoted numbers, "NaN", "Infinity", "-Infinity",
 *               + .nan .inf -.inf
 *   bool        true / false (unquoted)
 *   string      any scalar (+ unquoted YAML scalars are strings too)
 *   bytes       base64, standard or URL-safe, padding optional
 *   enum        the value name, or its number
 *   repeated    a list
 *   message     a mapping
 *   Duration    "1.5s", "-3s"; + "250ms", "100us", "10ns", "2m", "1h",
 *               "1m30s" (sum of terms); range: int64 nanoseconds
 *   *Value      google.protobuf wrappers as the plain wrapped value
 *   Timestamp   RFC 3339 "2026-12-01T08:00:00Z", "...:00.5+02:00"; years
 *               0001..9999 (proto3 JSON)
 *   map<K, V>   a mapping of key to value (the repeated *Entry messages
 *               protoc generates); a key written twice is an error
 * Other well-known types (Struct, Any, FieldMask...) are
 * reported as unsupported. Anything else is an error naming the file, line,
 * column and field path; mapping continues so every error is reported.
 * Not read: YAML tags (a value is read by its field's type, "!foo 2" as 2).
 * Refused before the document is built: nesting deeper than
 * MTD_CFG_NEST_MAX levels (mtd_cfg__yaml_too_deep: libyaml's load is
 * quadratic in it), and a top that is not a mapping. */
#include <config.h> /* autoconf (lib/config/config.h is the API) */

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <yaml.h>

#include "config/config-int.h"
#include "core/base64.h"

/* Aliases can make a document a graph (even a cycle: "&a [*a]"), so the
 * walk is bounded in depth and in total nodes visited. */
#define PBJSON_DEPTH_MAX  64
#define PBJSON_VISITS_MAX 1000000
#define PBJSON_KEYS_MAX   1024

struct mapper {
	yaml_document_t *doc;
	struct mtd_cfg__diag *d;
	char path[512];
	size_t path_len;
	unsigned depth;
	size_t visits;
	bool too_big;
};

static struct mtd_cfg__mark mark_of(const yaml_node_t *n)
{
	return (struct mtd_cfg__mark){(uint32_t)n->start_mark.line + 1, (uint32_t)n->start_mark.column + 1};
}

#define ERR(m, node, ...) mtd_cfg__error((m)->d, mark_of(node), (m)->path, __VA_ARGS__)

static void path_set_len(struct mapper *m, int k, size_t old)
{
	if (k < 0 || (size_t)k >= sizeof(m->path) - old)
		m->path_len = sizeof(m->path) - 1;
	else
		m->path_len = old + (size_t)k;
}

static size_t path_push_field(struct mapper *m, const char *name)
{
	size_t old = m->path_len;
	int k = snprintf(m->path + old, sizeof(m->path) - old, "%s%s", old != 0 ? "." : "", name);

	path_set_len(m, k, old);
	return old;
}

static size_t path_push_index(struct mapper *m, size_t i)
{
	size_t old = m->path_len;
	int k = snprintf(m->path + old, sizeof(m->path) - old, "[%zu]", i);

	path_set_len(m, k, old);
	return old;
}

static void path_pop(struct mapper *m, size_t old)
{
	m->path_len = old;
	m->path[old] = '\0';
}

static yaml_node_t *node_at(struct mapper *m, int idx)
{
	return yaml_document_get_node(m->doc, idx);
}

static const char *kind(const yaml_node_t *n)
{
	switch (n->type) {
	case YAML_MAPPING_NODE:
		return "a mapping";
	case YAML_SEQUENCE_NODE:
		return "a list";
	default:
		return "a scalar";
	}
}

static const char *sval(const yaml_node_t *n)
{
	return (const char *)n->data.scalar.value;
}

static bool is_plain(const yaml_node_t *n)
{
	return n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

/* proto3 JSON: null means "unset"; in YAML also "~" and an empty value. */
static bool is_null(const yaml_node_t *n)
{
	const char *s;

	if (!is_plain(n))
		return false;
	s = sval(n);
	return s[0] == '\0' || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 ||
	       strcmp(s, "NULL") == 0;
}

/* ---- descriptors --------------------------------------------------------- */

/* key == lowerCamel(snake): "choice_count" -> "choiceCount" (protoc's
 * json_name rule: drop '_' and upper-case the next character; a trailing
 * '_' is dropped, so "base_" -- protobuf-c reserves the C member `base` --
 * is written "base"). */
static bool camel_eq(const char *snake, const char *key)
{
	while (*snake != '\0') {
		if (*snake == '_' && snake[1] == '\0') {
			snake++;
			continue;
		}
		if (*snake == '_' && snake[1] != '\0') {
			snake++;
			if (*key != toupper((unsigned char)*snake))
				return false;
		} else if (*key != *snake) {
			return false;
		}
		snake++;
		key++;
	}
	return *key == '\0';
}

static const ProtobufCFieldDescriptor *find_field(const ProtobufCMessageDescriptor *desc, const char *key)
{
	const ProtobufCFieldDescriptor *fd;

	fd = protobuf_c_message_descriptor_get_field_by_name(desc, key);
	if (fd != NULL)
		return fd;
	for (unsigned i = 0; i < desc->n_fields; i++)
		if (camel_eq(desc->fields[i].name, key))
			return &desc->fields[i];
	return NULL;
}

static bool is_wkt(const ProtobufCMessageDescriptor *desc, const char *name)
{
	return strcmp(desc->package_name, "google.protobuf") == 0 && strcmp(desc->short_name, name) == 0;
}

/* google.protobuf.{Double,Float,Int64,UInt64,Int32,UInt32,Bool,String,
 * Bytes}Value: one field named "value", written as the bare value. */
static bool is_wrapper(const ProtobufCMessageDescriptor *desc)
{
	size_t n = strlen(desc->short_name);

	return strcmp(desc->package_name, "google.protobuf") == 0 && n > 5 &&
	       strcmp(desc->short_name + n - 5, "Value") == 0 && desc->n_fields == 1 &&
	       strcmp(desc->fields[0].name, "value") == 0;
}

static size_t elem_size(ProtobufCType t)
{
	switch (t) {
	case PROTOBUF_C_TYPE_INT32:
	case PROTOBUF_C_TYPE_SINT32:
	case PROTOBUF_C_TYPE_SFIXED32:
	case PROTOBUF_C_TYPE_UINT32:
	case PROTOBUF_C_TYPE_FIXED32:
	case PROTOBUF_C_TYPE_ENUM:
		return 4;
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64:
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64:
		return 8;
	case PROTOBUF_C_TYPE_FLOAT:
		return sizeof(float);
	case PROTOBUF_C_TYPE_DOUBLE:
		return sizeof(double);
	case PROTOBUF_C_TYPE_BOOL:
		return sizeof(protobuf_c_boolean);
	case PROTOBUF_C_TYPE_STRING:
		return sizeof(char *);
	case PROTOBUF_C_TYPE_BYTES:
		return sizeof(ProtobufCBinaryData);
	case PROTOBUF_C_TYPE_MESSAGE:
		return sizeof(ProtobufCMessage *);
	}
	return 8;
}

/* ---- scalars ------------------------------------------------------------- */

/* 0 ok; -1 not a number; -2 a number but not an integer; -3 too large. */
static int parse_integer(const char *s, bool *neg, uint64_t *mag)
{
	const char *p = s;
	char *end;
	double v;

	*neg = false;
	if (*p == '+' || *p == '-')
		*neg = *p++ == '-';
	if (isdigit((unsigned char)*p)) {
		uint64_t acc = 0;

		while (isdigit((unsigned char)*p)) {
			if (__builtin_mul_overflow(acc, 10, &acc) ||
			    __builtin_add_overflow(acc, (uint64_t)(*p - '0'), &acc))
				return -3;
			p++;
		}
		if (*p == '\0') {
			*mag = acc;
			return 0;
		}
	}
	/* A JSON number with a fraction or exponent (1e3, 2.0): only decimal
	 * digits, signs, '.', 'e' (no hex, inf or nan through strtod). */
	if (s[0] == '\0' || s[strspn(s, "0123456789+-.eE")] != '\0')
		return -1;
	v = strtod(s, &end);
	if (end == s || *end != '\0' || !isfinite(v))
		return -1;
	/* Every double from 2^53 up is whole, so the order of the two checks
	 * does not matter; truncating is the whole-number test (no libm). */
	double a = fabs(v);
	if (a >= 18446744073709551616.0)
		return -3;
	if ((double)(uint64_t)a != a)
		return -2;
	*neg = v < 0;
	*mag = (uint64_t)a;
	return 0;
}

static int parse_double(const char *s, double *out)
{
	static const struct {
		const char *word;
		double v;
	} words[] = {
	        {"NaN", NAN},         {"Infinity", INFINITY}, {"-Infinity", -INFINITY}, {".nan", NAN},
	        {".NaN", NAN},        {".inf", INFINITY},     {".Inf", INFINITY},       {"+.inf", INFINITY},
	        {"-.inf", -INFINITY}, {"-.Inf", -INFINITY},
	};
	char *end;

	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
		if (strcmp(s, words[i].word) == 0) {
			*out = words[i].v;
			return 0;
		}
	}
	if (s[0] == '\0' || s[strspn(s, "0123456789+-.eE")] != '\0')
		return -1;
	*out = strtod(s, &end);
	return end == s || *end != '\0' ? -1 : 0;
}

/* Base64, standard or URL-safe, padding optional. 0, -1 bad, -ENOMEM. */
static int b64_decode(const char *s, size_t n, ProtobufCBinaryData *out)
{
	uint8_t *buf = mtd_cfg__malloc(n * 3 / 4 + 1);
	if (buf == NULL)
		return -ENOMEM;
	ssize_t len = mtd_base64_decode((const uint8_t *)s, n, buf, n * 3 / 4 + 1);
	if (len < 0) {
		mtd_cfg__free(buf);
		return -1;
	}
	out->data = buf;
	out->len = (size_t)len;
	return 0;
}

int mtd_cfg__parse_duration(const char *s, int64_t *seconds, int32_t *nanos, const char **why)
{
	static const struct {
		const char *name;
		int64_t ns;
	} units[] = {
	        /* longest first: "ms" before "m" */
	        {"ns", 1},         {"us", 1000},       {"\xc2\xb5s", 1000},  {"ms", 1000000},
	        {"s", 1000000000}, {"m", 60000000000}, {"h", 3600000000000},
	};
	const char *p = s;
	bool neg = false;
	__int128 total = 0;

	if (*p == '-' || *p == '+')
		neg = *p++ == '-';
	if (*p == '\0') {
		*why = "empty duration";
		return -EINVAL;
	}
	while (*p != '\0') {
		uint64_t ip = 0, frac = 0;
		int fdig = 0;
		bool digits = false;
		int64_t mult = 0;

		while (isdigit((unsigned char)*p)) {
			if (ip > 1000000000000000ull) {
				*why = "duration out of range";
				return -EINVAL;
			}
			ip = ip * 10 + (uint64_t)(*p++ - '0');
			digits = true;
		}
		if (*p == '.') {
			p++;
			while (isdigit((unsigned char)*p)) {
				if (fdig < 9) {
					frac = frac * 10 + (uint64_t)(*p - '0');
					fdig++;
				}
				p++;
				digits = true;
			}
		}
		if (!digits) {
			*why = "expected a number followed by a unit, e.g. \"10s\", \"250ms\"";
			return -EINVAL;
		}
		for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
			size_t ul = strlen(units[i].name);

			if (strncmp(p, units[i].name, ul) == 0 &&
			    !(ul == 1 && units[i].name[0] == 'm' && p[1] == 's')) {
				mult = units[i].ns;
				p += ul;
				break;
			}
		}
		if (mult == 0) {
			*why = *p == '\0' ? "missing unit (e.g. \"10s\", \"250ms\")"
			                  : "unknown unit (use h, m, s, ms, us or ns)";
			return -EINVAL;
		}
		while (fdig < 9) {
			frac *= 10;
			fdig++;
		}
		total += (__int128)ip * mult + (__int128)frac * mult / 1000000000;
		if (total > INT64_MAX) {
			*why = "duration out of range";
			return -EINVAL;
		}
	}
	if (neg)
		total = -total;
	/* Duration: seconds and nanos carry the same sign. */
	*seconds = (int64_t)(total / 1000000000);
	*nanos = (int32_t)(total % 1000000000);
	return 0;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
 * days_from_civil algorithm). */
static int64_t days_from_civil(int64_t y, unsigned mo, unsigned d)
{
	y -= mo <= 2;
	int64_t era = (y >= 0 ? y : y - 399) / 400;
	unsigned yoe = (unsigned)(y - era * 400);
	unsigned doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;

	return era * 146097 + (int64_t)doe - 719468;
}

static bool take_digits(const char **p, int n, unsigned *out)
{
	unsigned v = 0;

	for (int i = 0; i < n; i++) {
		if (!isdigit((unsigned char)(*p)[i]))
			return false;
		v = v * 10 + (unsigned)((*p)[i] - '0');
	}
	*p += n;
	*out = v;
	return true;
}

int mtd_cfg__parse_timestamp(const char *s, int64_t *seconds, int32_t *nanos, const char **why)
{
	static const unsigned mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	const char *p = s;
	unsigned y, mo, d, h, mi, sec, oh = 0, om = 0;
	int64_t frac = 0, off = 0;
	int fdig = 0;

	/* RFC 3339 §5.6 date-time. */
	bool ok = take_digits(&p, 4, &y) && *p++ == '-' && take_digits(&p, 2, &mo) && *p++ == '-' &&
	          take_digits(&p, 2, &d) && (*p == 'T' || *p == 't');
	if (ok)
		p++;
	ok = ok && take_digits(&p, 2, &h) && *p++ == ':' && take_digits(&p, 2, &mi) && *p++ == ':' &&
	     take_digits(&p, 2, &sec);
	if (!ok) {
		*why = "expected an RFC 3339 time such as \"2026-12-01T08:00:00Z\"";
		return -EINVAL;
	}
	if (*p == '.') {
		p++;
		if (!isdigit((unsigned char)*p)) {
			*why = "expected digits after the decimal point";
			return -EINVAL;
		}
		while (isdigit((unsigned char)*p)) {
			if (fdig < 9) {
				frac = frac * 10 + (*p - '0');
				fdig++;
			}
			p++;
		}
		for (; fdig < 9; fdig++)
			frac *= 10;
	}
	if (*p == 'Z' || *p == 'z') {
		p++;
	} else if (*p == '+' || *p == '-') {
		bool neg = *p++ == '-';

		if (!take_digits(&p, 2, &oh) || *p++ != ':' || !take_digits(&p, 2, &om) || oh > 23 || om > 59) {
			*why = "bad time zone offset (expected Z or +HH:MM)";
			return -EINVAL;
		}
		off = (int64_t)(oh * 3600 + om * 60) * (neg ? -1 : 1);
	} else {
		*why = "missing time zone (Z or +HH:MM)";
		return -EINVAL;
	}
	if (*p != '\0') {
		*why = "trailing characters after the time";
		return -EINVAL;
	}
	bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
	if (y < 1 || mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] || (mo == 2 && d == 29 && !leap) || h > 23 ||
	    mi > 59 || sec > 60) {
		*why = "no such date or time";
		return -EINVAL;
	}
	if (sec == 60) /* a leap second: proto3 Timestamps smear it */
		sec = 59;
	*seconds = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - off;
	*nanos = (int32_t)frac;
	/* google/protobuf/timestamp.proto: 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59Z. */
	if (*seconds < -62135596800 || *seconds > 253402300799) {
		*why = "outside 0001-01-01 .. 9999-12-31";
		return -EINVAL;
	}
	return 0;
}

/* ---- the walk ------------------------------------------------------------ */

static int map_value(struct mapper *m, const ProtobufCFieldDescriptor *fd, yaml_node_t *n, void *dst);
static void map_message(struct mapper *m, yaml_node_t *n, ProtobufCMessage *msg);

static bool visit(struct mapper *m, yaml_node_t *n)
{
	if (++m->visits <= PBJSON_VISITS_MAX)
		return true;
	if (!m->too_big) {
		m->too_big = true;
		ERR(m, n, "document too large (more than %d nodes after alias expansion)", PBJSON_VISITS_MAX);
	}
	return false;
}

static void enum_names(const ProtobufCEnumDescriptor *ed, char *buf, size_t size)
{
	size_t o = 0;

	buf[0] = '\0';
	for (unsigned i = 0; i < ed->n_values && o < size; i++) {
		int k = snprintf(buf + o, size - o, "%s%s", i != 0 ? ", " : "", ed->values[i].name);
		if (k < 0)
			break;
		o += (size_t)k;
	}
}

static int map_enum(struct mapper *m, const ProtobufCEnumDescriptor *ed, yaml_node_t *n, int *dst)
{
	const ProtobufCEnumValue *ev = NULL;
	char names[1024];
	bool neg;
	uint64_t mag;

	if (n->type != YAML_SCALAR_NODE) {
		ERR(m, n, "expected an enum value name (%s), got %s", ed->short_name, kind(n));
		return -1;
	}
	ev = protobuf_c_enum_descriptor_get_value_by_name(ed, sval(n));
	if (ev == NULL && parse_integer(sval(n), &neg, &mag) == 0 && mag <= INT32_MAX)
		ev = protobuf_c_enum_descriptor_get_value(ed, neg ? -(int)mag : (int)mag);
	if (ev == NULL) {
		enum_names(ed, names, sizeof(names));
		ERR(m, n, "unknown value \"%s\" (expected one of %s)", sval(n), names);
		return -1;
	}
	*dst = ev->value;
	return 0;
}

static int map_int(struct mapper *m, const ProtobufCFieldDescriptor *fd, yaml_node_t *n, void *dst)
{
	const char *tname;
	int64_t min;
	uint64_t max;
	bool neg, sig = true;
	uint64_t mag;
	int rc;

	switch (fd->type) {
	case PROTOBUF_C_TYPE_INT32:
	case PROTOBUF_C_TYPE_SINT32:
	case PROTOBUF_C_TYPE_SFIXED32:
		tname = "int32", min = INT32_MIN, max = INT32_MAX;
		break;
	case PROTOBUF_C_TYPE_UINT32:
	case PROTOBUF_C_TYPE_FIXED32:
		tname = "uint32", min = 0, max = UINT32_MAX, sig = false;
		break;
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64:
		tname = "uint64", min = 0, max = UINT64_MAX, sig = false;
		break;
	default:
		tname = "int64", min = INT64_MIN, max = INT64_MAX;
		break;
	}
	if (n->type != YAML_SCALAR_NODE) {
		ERR(m, n, "expected an integer (%s), got %s", tname, kind(n));
		return -1;
	}
	rc = parse_integer(sval(n), &neg, &mag);
	if (rc == -1 || rc == -2) {
		ERR(m, n, "expected an integer (%s), got \"%s\"", tname, sval(n));
		return -1;
	}
	if (rc == 0 && neg && mag != 0 && !sig) {
		ERR(m, n, "negative value %s for an unsigned field (%s)", sval(n), tname);
		return -1;
	}
	if (rc != 0 || (!neg && mag > max) || (neg && mag > (uint64_t)(-(min + 1)) + 1)) {
		ERR(m, n, "value %s out of range for %s (%lld..%llu)", sval(n), tname, (long long)min,
		    (unsigned long long)max);
		return -1;
	}
	switch (elem_size(fd->type)) {
	case 4:
		if (sig)
			*(int32_t *)dst = neg ? (int32_t)(0 - mag) : (int32_t)mag;
		else
			*(uint32_t *)dst = (uint32_t)mag;
		break;
	default:
		if (sig)
			*(int64_t *)dst = neg ? (int64_t)(0 - mag) : (int64_t)mag;
		else
			*(uint64_t *)dst = mag;
		break;
	}
	return 0;
}

static int map_duration(struct mapper *m, const ProtobufCMessageDescriptor *desc, yaml_node_t *n,
                        ProtobufCMessage **slot)
{
	int64_t seconds;
	int32_t nanos;
	const char *why;
	Google__Protobuf__Duration *dur;

	if (n->type != YAML_SCALAR_NODE) {
		ERR(m, n, "expected a duration such as \"10s\" or \"250ms\", got %s", kind(n));
		return -1;
	}
	if (mtd_cfg__parse_duration(sval(n), &seconds, &nanos, &why) != 0) {
		ERR(m, n, "bad duration \"%s\": %s", sval(n), why);
		return -1;
	}
	dur = mtd_cfg__calloc(1, desc->sizeof_message);
	if (dur == NULL) {
		m->d->oom = true;
		return -1;
	}
	desc->message_init(&dur->base);
	dur->seconds = seconds;
	dur->nanos = nanos;
	*slot = &dur->base;
	return 0;
}

/* Timestamp by its descriptor (seconds = 1, nanos = 2), so no generated
 * Timestamp code is needed here. */
static int map_timestamp(struct mapper *m, const ProtobufCMessageDescriptor *desc, yaml_node_t *n,
                         ProtobufCMessage **slot)
{
	const ProtobufCFieldDescriptor *fs = protobuf_c_message_descriptor_get_field(desc, 1),
	                               *fn = protobuf_c_message_descriptor_get_field(desc, 2);
	int64_t seconds;
	int32_t nanos;
	const char *why = NULL;
	ProtobufCMessage *ts;

	if (n->type != YAML_SCALAR_NODE) {
		ERR(m, n, "expected a time such as \"2026-12-01T08:00:00Z\", got %s", kind(n));
		return -1;
	}
	if (fs == NULL || fn == NULL || mtd_cfg__parse_timestamp(sval(n), &seconds, &nanos, &why) != 0) {
		ERR(m, n, "bad time \"%s\": %s", sval(n), fs == NULL || fn == NULL ? "unexpected descriptor" : why);
		return -1;
	}
	ts = mtd_cfg__calloc(1, desc->sizeof_message);
	if (ts == NULL) {
		m->d->oom = true;
		return -1;
	}
	desc->message_init(ts);
	*(int64_t *)((char *)ts + fs->offset) = seconds;
	*(int32_t *)((char *)ts + fn->offset) = nanos;
	*slot = ts;
	return 0;
}

static int map_submessage(struct mapper *m, const ProtobufCMessageDescriptor *desc, yaml_node_t *n,
                          ProtobufCMessage **slot)
{
	ProtobufCMessage *msg;

	if (is_wkt(desc, "Duration"))
		return map_duration(m, desc, n, slot);
	if (is_wkt(desc, "Timestamp"))
		return map_timestamp(m, desc, n, slot);
	if (is_wrapper(desc)) {
		msg = mtd_cfg__calloc(1, desc->sizeof_message);
		if (msg == NULL) {
			m->d->oom = true;
			return -1;
		}
		desc->message_init(msg);
		if (map_value(m, &desc->fields[0], n, (char *)msg + desc->fields[0].offset) != 0) {
			mtd_cfg__free(msg);
			return -1;
		}
		*slot = msg;
		return 0;
	}
	if (strcmp(desc->package_name, "google.protobuf") == 0 && !is_wkt(desc, "Empty")) {
		ERR(m, n, "well-known type %s is not supported in YAML/JSON config", desc->name);
		return -1;
	}
	if (n->type != YAML_MAPPING_NODE) {
		ERR(m, n, "expected a mapping (%s), got %s", desc->short_name, kind(n));
		return -1;
	}
	if (m->depth >= PBJSON_DEPTH_MAX) {
		ERR(m, n, "nesting deeper than %d levels", PBJSON_DEPTH_MAX);
		return -1;
	}
	msg = mtd_cfg__calloc(1, desc->sizeof_message);
	if (msg == NULL) {
		m->d->oom = true;
		return -1;
	}
	desc->message_init(msg);
	/* Attached before it is filled: whatever happens below, freeing the
	 * root message frees it. */
	*slot = msg;
	m->depth++;
	map_message(m, n, msg);
	m->depth--;
	return 0;
}

/* Map one value of fd's type into dst. Returns 0 when dst was written
 * (ownership of anything allocated passes to the message), -1 when not. */
static int map_value(struct mapper *m, const ProtobufCFieldDescriptor *fd, yaml_node_t *n, void *dst)
{
	const char *s;
	double v;
	int rc;

	if (!visit(m, n))
		return -1;
	if (fd->type == PROTOBUF_C_TYPE_MESSAGE)
		return map_submessage(m, fd->descriptor, n, dst);
	if (n->type != YAML_SCALAR_NODE) {
		ERR(m, n, "expected a scalar, got %s", kind(n));
		return -1;
	}
	s = sval(n);
	switch (fd->type) {
	case PROTOBUF_C_TYPE_STRING: {
		char *copy;

		if (strlen(s) != n->data.scalar.length) {
			ERR(m, n, "string contains a NUL character");
			return -1;
		}
		copy = mtd_cfg__strdup(s);
		if (copy == NULL) {
			m->d->oom = true;
			return -1;
		}
		*(char **)dst = copy;
		return 0;
	}
	case PROTOBUF_C_TYPE_BYTES:
		rc = b64_decode(s, n->data.scalar.length, dst);
		if (rc == -ENOMEM)
			m->d->oom = true;
		else if (rc != 0)
			ERR(m, n, "expected base64 bytes, got \"%s\"", s);
		return rc != 0 ? -1 : 0;
	case PROTOBUF_C_TYPE_BOOL:
		if (is_plain(n) && (strcmp(s, "true") == 0 || strcmp(s, "True") == 0 || strcmp(s, "TRUE") == 0)) {
			*(protobuf_c_boolean *)dst = 1;
			return 0;
		}
		if (is_plain(n) && (strcmp(s, "false") == 0 || strcmp(s, "False") == 0 || strcmp(s, "FALSE") == 0)) {
			*(protobuf_c_boolean *)dst = 0;
			return 0;
		}
		if (!is_plain(n) && (strcasecmp(s, "true") == 0 || strcasecmp(s, "false") == 0))
			ERR(m, n, "expected true or false, got the string \"%s\" (write it without quotes)", s);
		else
			ERR(m, n, "expected true or false, got \"%s\"", s);
		return -1;
	case PROTOBUF_C_TYPE_ENUM:
		return map_enum(m, fd->descriptor, n, dst);
	case PROTOBUF_C_TYPE_FLOAT:
	case PROTOBUF_C_TYPE_DOUBLE:
		if (parse_double(s, &v) != 0) {
			ERR(m, n, "expected a number, got \"%s\"", s);
			return -1;
		}
		if (fd->type == PROTOBUF_C_TYPE_DOUBLE) {
			*(double *)dst = v;
			return 0;
		}
		if (isfinite(v) && fabs(v) > FLT_MAX) {
			ERR(m, n, "value %s out of range for float", s);
			return -1;
		}
		*(float *)dst = (float)v;
		return 0;
	default:
		return map_int(m, fd, n, dst);
	}
}

static void map_repeated(struct mapper *m, const ProtobufCFieldDescriptor *fd, yaml_node_t *n, ProtobufCMessage *msg)
{
	size_t *count = (size_t *)((char *)msg + fd->quantifier_offset);
	void **arrp = (void **)((char *)msg + fd->offset);
	size_t esz = elem_size(fd->type), cnt;
	char *arr;

	if (n->type != YAML_SEQUENCE_NODE) {
		ERR(m, n, "expected a list, got %s", kind(n));
		return;
	}
	cnt = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
	if (cnt == 0)
		return;
	arr = mtd_cfg__calloc(cnt, esz);
	if (arr == NULL) {
		m->d->oom = true;
		return;
	}
	*arrp = arr;
	*count = 0;
	for (size_t i = 0; i < cnt; i++) {
		yaml_node_t *item = node_at(m, n->data.sequence.items.start[i]);
		size_t old = path_push_index(m, i);

		if (item == NULL) {
			path_pop(m, old);
			continue;
		}
		if (is_null(item))
			ERR(m, item, "null is not allowed in a list");
		else if (map_value(m, fd, item, arr + *count * esz) == 0)
			(*count)++; /* the array stays dense: freeing sees no holes */
		path_pop(m, old);
		if (m->too_big || m->d->oom)
			break;
	}
}

/* A map<K, V> field is, on the wire and in protobuf-c, a repeated message
 * "<Field>Entry" with key = 1 and value = 2 (protobuf language guide,
 * "Maps: backwards compatibility"). */
static bool is_map_entry(const ProtobufCFieldDescriptor *fd)
{
	const ProtobufCMessageDescriptor *d = fd->descriptor;
	size_t n;

	if (fd->type != PROTOBUF_C_TYPE_MESSAGE || d == NULL || d->n_fields != 2)
		return false;
	n = strlen(d->short_name);
	return n > 5 && strcmp(d->short_name + n - 5, "Entry") == 0 && d->fields[0].id == 1 &&
	       strcmp(d->fields[0].name, "key") == 0 && d->fields[1].id == 2 && strcmp(d->fields[1].name, "value") == 0;
}

static void map_map(struct mapper *m, const ProtobufCFieldDescriptor *fd, yaml_node_t *n, ProtobufCMessage *msg)
{
	const ProtobufCMessageDescriptor *ed = fd->descriptor;
	size_t *count = (size_t *)((char *)msg + fd->quantifier_offset);
	ProtobufCMessage ***arrp = (ProtobufCMessage ***)((char *)msg + fd->offset);
	yaml_node_pair_t *start, *top;
	size_t cnt;

	if (n->type != YAML_MAPPING_NODE) {
		ERR(m, n, "expected a mapping (map of %s), got %s", ed->fields[1].name, kind(n));
		return;
	}
	start = n->data.mapping.pairs.start;
	top = n->data.mapping.pairs.top;
	cnt = (size_t)(top - start);
	if (cnt == 0)
		return;
	if (cnt > PBJSON_KEYS_MAX) {
		ERR(m, n, "more than %d keys in one mapping", PBJSON_KEYS_MAX);
		return;
	}
	*arrp = mtd_cfg__calloc(cnt, sizeof(**arrp));
	if (*arrp == NULL) {
		m->d->oom = true;
		return;
	}
	*count = 0;
	for (yaml_node_pair_t *p = start; p < top; p++) {
		yaml_node_t *k = node_at(m, p->key), *v = node_at(m, p->value);
		ProtobufCMessage *e;
		size_t old;
		bool dup = false;

		if (k == NULL || v == NULL || !visit(m, k))
			break;
		if (k->type != YAML_SCALAR_NODE) {
			ERR(m, k, "a key must be a scalar, got %s", kind(k));
			continue;
		}
		old = path_push_field(m, sval(k));
		for (yaml_node_pair_t *q = start; q < p && !dup; q++) {
			yaml_node_t *kq = node_at(m, q->key);

			dup = kq != NULL && kq->type == YAML_SCALAR_NODE && strcmp(sval(kq), sval(k)) == 0;
		}
		if (dup) {
			ERR(m, k, "duplicate key");
			path_pop(m, old);
			continue;
		}
		e = mtd_cfg__calloc(1, ed->sizeof_message);
		if (e == NULL) {
			m->d->oom = true;
			path_pop(m, old);
			break;
		}
		ed->message_init(e);
		/* Attached first, so the root's free reaches it on any path. */
		(*arrp)[(*count)++] = e;
		if (map_value(m, &ed->fields[0], k, (char *)e + ed->fields[0].offset) == 0 && !is_null(v))
			map_value(m, &ed->fields[1], v, (char *)e + ed->fields[1].offset);
		path_pop(m, old);
		if (m->too_big || m->d->oom)
			break;
	}
}

static void map_field(struct mapper *m, const ProtobufCFieldDescriptor *fd, yaml_node_t *v, ProtobufCMessage *msg)
{
	uint32_t *oneof_case = NULL;

	/* proto3 JSON: null = the field's default, i.e. unset. */
	if (is_null(v))
		return;
	if (fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
		oneof_case = (uint32_t *)((char *)msg + fd->quantifier_offset);
		if (*oneof_case != 0 && *oneof_case != fd->id) {
			ERR(m, v, "only one field of its oneof may be set");
			return;
		}
	}
	mtd_cfg__pos_add(m->d, msg, fd->id, mark_of(v));
	if (fd->label == PROTOBUF_C_LABEL_REPEATED && is_map_entry(fd)) {
		map_map(m, fd, v, msg);
		return;
	}
	if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
		map_repeated(m, fd, v, msg);
		return;
	}
	if (map_value(m, fd, v, (char *)msg + fd->offset) != 0)
		return;
	if (oneof_case != NULL)
		*oneof_case = fd->id;
	else if (fd->label == PROTOBUF_C_LABEL_OPTIONAL && fd->type != PROTOBUF_C_TYPE_STRING &&
	         fd->type != PROTOBUF_C_TYPE_MESSAGE)
		*(protobuf_c_boolean *)((char *)msg + fd->quantifier_offset) = 1;
}

static void field_names(const ProtobufCMessageDescriptor *desc, char *buf, size_t size)
{
	size_t o = 0;

	buf[0] = '\0';
	for (unsigned i = 0; i < desc->n_fields && o < size; i++) {
		int k = snprintf(buf + o, size - o, "%s%s", i != 0 ? ", " : "", desc->fields[i].name);
		if (k < 0)
			break;
		o += (size_t)k;
	}
}

static void map_message(struct mapper *m, yaml_node_t *n, ProtobufCMessage *msg)
{
	const ProtobufCMessageDescriptor *desc = msg->descriptor;
	yaml_node_pair_t *start, *top;
	char names[1024];

	if (n->type != YAML_MAPPING_NODE) {
		ERR(m, n, "expected a mapping (%s), got %s", desc->short_name, kind(n));
		return;
	}
	mtd_cfg__pos_add(m->d, msg, 0, mark_of(n));
	start = n->data.mapping.pairs.start;
	top = n->data.mapping.pairs.top;
	/* The duplicate check below is quadratic; no message has this many
	 * fields, so such a mapping is garbage anyway. */
	if (top - start > PBJSON_KEYS_MAX) {
		ERR(m, n, "more than %d keys in one mapping", PBJSON_KEYS_MAX);
		return;
	}
	for (yaml_node_pair_t *p = start; p < top; p++) {
		yaml_node_t *k = node_at(m, p->key), *v = node_at(m, p->value);
		const ProtobufCFieldDescriptor *fd;
		const yaml_node_pair_t *dup = NULL;
		size_t old;

		if (k == NULL || v == NULL || !visit(m, k))
			break;
		if (k->type != YAML_SCALAR_NODE) {
			ERR(m, k, "a key must be a string, got %s", kind(k));
			continue;
		}
		fd = find_field(desc, sval(k));
		old = path_push_field(m, fd != NULL ? fd->name : sval(k));
		/* "name" and "name" twice, or "choice_count" and "choiceCount". */
		for (yaml_node_pair_t *q = start; q < p && dup == NULL; q++) {
			yaml_node_t *kq = node_at(m, q->key);

			if (kq == NULL || kq->type != YAML_SCALAR_NODE)
				continue;
			if (fd != NULL ? find_field(desc, sval(kq)) == fd : strcmp(sval(kq), sval(k)) == 0)
				dup = q;
		}
		if (dup != NULL) {
			ERR(m, k, "duplicate key (first at line %u)", (unsigned)mark_of(node_at(m, dup->key)).line);
		} else if (fd == NULL) {
			field_names(desc, names, sizeof(names));
			ERR(m, k, "unknown field (expected one of %s)", names);
		} else {
			map_field(m, fd, v, msg);
		}
		path_pop(m, old);
		if (m->too_big || m->d->oom)
			break;
	}
}

/* ---- JSON escapes libyaml rejects --------------------------------------- */

static int hex4(const char *p)
{
	int v = 0;

	for (int i = 0; i < 4; i++) {
		int c = (unsigned char)p[i], d;

		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			d = c - 'A' + 10;
		else
			return -1;
		v = v << 4 | d;
	}
	return v;
}

/* JSON writes characters beyond the BMP as a UTF-16 surrogate pair
 * ("\ud83d\ude00", RFC 8259 §7); libyaml rejects surrogates, so pairs inside
 * strings become the UTF-8 bytes (shorter, so columns after one on the same
 * line shift left). Returns a new buffer of *len bytes, or NULL. */
static char *json_fix_surrogates(const char *in, size_t *len)
{
	char *out = mtd_cfg__malloc(*len + 1);
	size_t o = 0, n = *len;
	bool str = false;

	if (out == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		char c = in[i];

		if (!str) {
			str = c == '"';
			out[o++] = c;
			continue;
		}
		if (c == '"') {
			str = false;
			out[o++] = c;
			continue;
		}
		if (c != '\\' || i + 1 >= n) {
			out[o++] = c;
			continue;
		}
		if (in[i + 1] == 'u' && i + 12 <= n && in[i + 6] == '\\' && in[i + 7] == 'u') {
			int hi = hex4(in + i + 2), lo = hex4(in + i + 8);

			if (hi >= 0xd800 && hi <= 0xdbff && lo >= 0xdc00 && lo <= 0xdfff) {
				uint32_t cp = 0x10000 + (((uint32_t)hi - 0xd800) << 10) + ((uint32_t)lo - 0xdc00);

				out[o++] = (char)(0xf0 | cp >> 18);
				out[o++] = (char)(0x80 | (cp >> 12 & 0x3f));
				out[o++] = (char)(0x80 | (cp >> 6 & 0x3f));
				out[o++] = (char)(0x80 | (cp & 0x3f));
				i += 11;
				continue;
			}
		}
		/* any other escape: copy both characters */
		out[o++] = c;
		out[o++] = in[++i];
	}
	out[o] = '\0';
	*len = o;
	return out;
}

/* ---- entry points -------------------------------------------------------- */

int mtd_cfg__yaml_too_deep(const char *data, size_t len, unsigned max, struct mtd_cfg__mark *at)
{
	yaml_parser_t parser;
	yaml_event_t ev;
	unsigned depth = 0;
	int rc = 0;

	if (!yaml_parser_initialize(&parser))
		return -ENOMEM;
	yaml_parser_set_input_string(&parser, (const unsigned char *)data, len);
	for (;;) {
		if (!yaml_parser_parse(&parser, &ev)) {
			rc = parser.error == YAML_MEMORY_ERROR ? -ENOMEM : 0;
			break;
		}
		yaml_event_type_t type = ev.type;

		if (type == YAML_SEQUENCE_START_EVENT || type == YAML_MAPPING_START_EVENT) {
			if (++depth > max) {
				at->line = (uint32_t)ev.start_mark.line + 1;
				at->col = (uint32_t)ev.start_mark.column + 1;
				rc = 1;
			}
		} else if (type == YAML_SEQUENCE_END_EVENT || type == YAML_MAPPING_END_EVENT) {
			depth--;
		}
		yaml_event_delete(&ev);
		if (rc != 0 || type == YAML_STREAM_END_EVENT)
			break;
	}
	yaml_parser_delete(&parser);
	return rc;
}

static void syntax_error(struct mtd_cfg__diag *d, yaml_parser_t *p)
{
	struct mtd_cfg__mark at = {(uint32_t)p->problem_mark.line + 1, (uint32_t)p->problem_mark.column + 1};

	if (p->error == YAML_MEMORY_ERROR) {
		d->oom = true;
		return;
	}
	mtd_cfg__error(d, at, NULL, "syntax error: %s%s%s", p->problem != NULL ? p->problem : "malformed input",
	               p->context != NULL ? " " : "", p->context != NULL ? p->context : "");
}

int mtd_cfg__pbjson_load(const char *data, size_t len, bool json, const ProtobufCMessageDescriptor *desc,
                         struct mtd_cfg__diag *d, ProtobufCMessage **out)
{
	yaml_parser_t parser;
	yaml_document_t doc, extra;
	yaml_node_t *root, *second;
	ProtobufCMessage *msg = NULL;
	char *fixed = NULL;
	struct mapper *m = NULL;

	*out = NULL;
	if (json && memmem(data, len, "\\u", 2) != NULL) {
		fixed = json_fix_surrogates(data, &len);
		if (fixed == NULL)
			goto fail_oom;
		data = fixed;
	}
	struct mtd_cfg__mark deep;
	int too_deep = mtd_cfg__yaml_too_deep(data, len, MTD_CFG_NEST_MAX, &deep);

	if (too_deep < 0)
		goto fail_fixed;
	if (too_deep > 0) {
		mtd_cfg__error(d, deep, NULL, "nesting deeper than %d levels", MTD_CFG_NEST_MAX);
		mtd_cfg__free(fixed);
		return d->oom ? -ENOMEM : 0;
	}
	if (!yaml_parser_initialize(&parser))
		goto fail_fixed;
	yaml_parser_set_input_string(&parser, (const unsigned char *)data, len);
	if (!yaml_parser_load(&parser, &doc)) {
		syntax_error(d, &parser);
		goto out_parser;
	}
	root = yaml_document_get_root_node(&doc);
	if (root != NULL && !is_null(root) && root->type != YAML_MAPPING_NODE) {
		/* A word or a list, not a config with its keys: that is the
		 * error, as a syntax error is (no message, nothing to validate). */
		mtd_cfg__error(d, mark_of(root), NULL, "expected a mapping (%s), got %s", desc->short_name, kind(root));
		goto out_doc;
	}
	if (root != NULL) {
		if (!yaml_parser_load(&parser, &extra)) {
			syntax_error(d, &parser);
			goto out_doc;
		}
		second = yaml_document_get_root_node(&extra);
		if (second != NULL)
			mtd_cfg__error(d, mark_of(second), NULL, "only one YAML document is allowed");
		yaml_document_delete(&extra);
	}
	msg = mtd_cfg__calloc(1, desc->sizeof_message);
	if (msg == NULL)
		goto fail_doc;
	desc->message_init(msg);
	if (root != NULL && !is_null(root)) {
		m = mtd_cfg__calloc(1, sizeof(*m));
		if (m == NULL)
			goto fail_msg;
		m->doc = &doc;
		m->d = d;
		map_message(m, root, msg);
		mtd_cfg__free(m);
		m = NULL;
	}
	if (d->oom)
		goto fail_msg;
	*out = msg;
out_doc:
	yaml_document_delete(&doc);
out_parser:
	yaml_parser_delete(&parser);
	mtd_cfg__free(fixed);
	return d->oom ? -ENOMEM : 0;

fail_msg:
	protobuf_c_message_free_unpacked(msg, &mtd_cfg__pb_allocator);
fail_doc:
	yaml_document_delete(&doc);
	yaml_parser_delete(&parser);
fail_fixed:
	mtd_cfg__free(fixed);
fail_oom:
	d->oom = true;
	return -ENOMEM;
}

/* ---- binary input --------------------------------------------------------- */

static void check_msg(struct mapper *m, const ProtobufCMessage *msg)
{
	const ProtobufCMessageDescriptor *desc = msg->descriptor;
	struct mtd_cfg__mark none = {0, 0};

	for (unsigned i = 0; i < msg->n_unknown_fields; i++)
		mtd_cfg__error(m->d, none, m->path, "unknown field number %u", (unsigned)msg->unknown_fields[i].tag);
	for (unsigned f = 0; f < desc->n_fields; f++) {
		const ProtobufCFieldDescriptor *fd = &desc->fields[f];
		const char *member = (const char *)msg + fd->offset;
		size_t n = 1, old;
		bool rep = fd->label == PROTOBUF_C_LABEL_REPEATED;

		if (fd->type != PROTOBUF_C_TYPE_MESSAGE && fd->type != PROTOBUF_C_TYPE_ENUM)
			continue;
		if ((fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
		    *(const uint32_t *)((const char *)msg + fd->quantifier_offset) != fd->id)
			continue;
		if (rep) {
			n = *(const size_t *)((const char *)msg + fd->quantifier_offset);
			member = *(const char *const *)member;
		}
		old = path_push_field(m, fd->name);
		for (size_t k = 0; k < n; k++) {
			size_t old2 = rep ? path_push_index(m, k) : m->path_len;

			if (fd->type == PROTOBUF_C_TYPE_ENUM) {
				int v = ((const int *)member)[k];

				if (protobuf_c_enum_descriptor_get_value(fd->descriptor, v) == NULL)
					mtd_cfg__error(m->d, none, m->path, "unknown enum value %d", v);
			} else {
				const ProtobufCMessage *sub = ((const ProtobufCMessage *const *)member)[k];

				if (sub != NULL)
					check_msg(m, sub);
			}
			path_pop(m, old2);
		}
		path_pop(m, old);
	}
}

void mtd_cfg__pb_check(const ProtobufCMessage *msg, struct mtd_cfg__diag *d)
{
	struct mapper m = {.d = d};

	check_msg(&m, msg);
}
