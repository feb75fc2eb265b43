/* Protobuf wire-format field extraction (see pbwire.h for the contract).
 *
 * The scan is a loop over (start, end) windows, one per path level: at
 * level d it reads tags in [pos, end); a LEN field whose number is path[d]
 * opens the window of its payload for level d + 1, and when that window is
 * exhausted without a match the scan resumes after it at level d. Only one
 * resume point per level is kept, so the state is O(depth) and there is no
 * recursion; every byte is read at most once per level. A nested payload
 * that does not parse as a message (it is a string or bytes field sharing
 * the number) is just "no match inside"; only the top level can be
 * malformed.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "pbwire/pbwire.h"

#define MAX_GROUP_NESTING 64

enum rd {
	RD_OK = 0,
	RD_SHORT = 1, /* ran into the end of the window */
	RD_BAD = 2,
};

/* Protobuf encoding spec "Base 128 Varints": at most 10 bytes, the 10th
 * may only carry the top bit of a 64-bit value. */
static enum rd read_varint(const uint8_t *p, size_t *pos, size_t end, uint64_t *v)
{
	uint64_t x = 0;

	for (unsigned i = 0; i < 10; i++) {
		uint8_t b;

		if (*pos >= end)
			return RD_SHORT;
		b = p[(*pos)++];
		if (i == 9 && b > 1)
			return RD_BAD;
		x |= (uint64_t)(b & 0x7f) << (7 * i);
		if ((b & 0x80) == 0) {
			*v = x;
			return RD_OK;
		}
	}
	return RD_BAD; /* unreachable: the 10th byte returns above */
}

static enum rd read_tag(const uint8_t *p, size_t *pos, size_t end, uint32_t *field, unsigned *wt)
{
	uint64_t tag;
	enum rd r = read_varint(p, pos, end, &tag);

	if (r != RD_OK)
		return r;
	/* Field numbers are 1..2^29-1; wire types 6 and 7 do not exist. */
	if ((tag >> 3) == 0 || (tag >> 3) > MTD_PBWIRE_MAX_FIELD || (tag & 7) > 5)
		return RD_BAD;
	*field = (uint32_t)(tag >> 3);
	*wt = (unsigned)(tag & 7);
	return RD_OK;
}

static enum rd read_fixed(const uint8_t *p, size_t *pos, size_t end, unsigned nbytes, uint64_t *v)
{
	uint64_t x = 0;

	if (end - *pos < nbytes)
		return RD_SHORT;
	for (unsigned i = nbytes; i > 0; i--)
		x = x << 8 | p[*pos + i - 1];
	*pos += nbytes;
	*v = x;
	return RD_OK;
}

/* Skip the value of a field of wire type wt whose tag was just read.
 * For SGROUP, skip to the matching EGROUP of the same field number. */
static enum rd skip_value(const uint8_t *p, size_t *pos, size_t end, uint32_t field, unsigned wt)
{
	uint64_t v;
	uint32_t open[MAX_GROUP_NESTING];
	unsigned depth = 0;
	enum rd r;

	for (;;) {
		switch (wt) {
		case 0:
			r = read_varint(p, pos, end, &v);
			break;
		case 1:
			r = read_fixed(p, pos, end, 8, &v);
			break;
		case 5:
			r = read_fixed(p, pos, end, 4, &v);
			break;
		case 2:
			r = read_varint(p, pos, end, &v);
			if (r == RD_OK && v > end - *pos)
				r = RD_SHORT;
			if (r == RD_OK)
				*pos += (size_t)v;
			break;
		case 3:
			if (depth == MAX_GROUP_NESTING)
				return RD_BAD;
			open[depth++] = field;
			r = RD_OK;
			break;
		case 4:
			/* An EGROUP must close the innermost open group. */
			if (depth == 0 || open[depth - 1] != field)
				return RD_BAD;
			depth--;
			r = RD_OK;
			break;
		default:
			return RD_BAD;
		}
		if (r != RD_OK || depth == 0)
			return r;
		r = read_tag(p, pos, end, &field, &wt);
		if (r != RD_OK)
			return r;
	}
}

int mtd_pbwire_find(const uint8_t *msg, size_t len, bool complete, const uint32_t *path, size_t depth,
                    struct mtd_pbwire_value *out)
{
	size_t pos[MTD_PBWIRE_MAX_DEPTH], end[MTD_PBWIRE_MAX_DEPTH];
	/* A window cut short by len (its declared end lies beyond it). */
	bool cut[MTD_PBWIRE_MAX_DEPTH];
	size_t d = 0;

	if (depth == 0 || depth > MTD_PBWIRE_MAX_DEPTH || out == NULL || (msg == NULL && len > 0))
		return -EINVAL;
	for (size_t i = 0; i < depth; i++)
		if (path[i] == 0 || path[i] > MTD_PBWIRE_MAX_FIELD)
			return -EINVAL;
	pos[0] = 0;
	end[0] = len;
	cut[0] = !complete;

	for (;;) {
		uint32_t field;
		unsigned wt;
		enum rd r;

		if (pos[d] == end[d]) {
			/* This window is exhausted without a match. */
			if (cut[d])
				return -EAGAIN;
			if (d == 0)
				return 0;
			d--;
			continue;
		}
		r = read_tag(msg, &pos[d], end[d], &field, &wt);
		if (r == RD_OK && field == path[d] && d + 1 == depth) {
			uint64_t v = 0;

			switch (wt) {
			case 0:
				r = read_varint(msg, &pos[d], end[d], &v);
				break;
			case 1:
				r = read_fixed(msg, &pos[d], end[d], 8, &v);
				break;
			case 5:
				r = read_fixed(msg, &pos[d], end[d], 4, &v);
				break;
			case 2:
				r = read_varint(msg, &pos[d], end[d], &v);
				if (r == RD_OK && v > end[d] - pos[d])
					r = RD_SHORT;
				break;
			default:
				/* A group as the target: not a scalar or a
				 * length-delimited value; skip it. */
				r = skip_value(msg, &pos[d], end[d], field, wt);
				if (r == RD_OK)
					continue;
				break;
			}
			if (r == RD_OK) {
				out->type = (enum mtd_pbwire_type)wt;
				out->num = wt == 2 ? 0 : v;
				out->data = wt == 2 ? msg + pos[d] : NULL;
				out->len = wt == 2 ? (size_t)v : 0;
				return 1;
			}
		} else if (r == RD_OK && field == path[d] && wt == 2) {
			uint64_t v;

			r = read_varint(msg, &pos[d], end[d], &v);
			if (r == RD_OK) {
				size_t avail = end[d] - pos[d];

				/* Descend into the nested message; on return
				 * the scan resumes after it. */
				pos[d + 1] = pos[d];
				if (v <= avail) {
					end[d + 1] = pos[d] + (size_t)v;
					cut[d + 1] = false;
				} else if (cut[d]) {
					end[d + 1] = end[d];
					cut[d + 1] = true;
				} else {
					return -EBADMSG; /* longer than its parent */
				}
				pos[d] = end[d + 1];
				d++;
				continue;
			}
		} else if (r == RD_OK) {
			r = skip_value(msg, &pos[d], end[d], field, wt);
		}
		if (r == RD_OK)
			continue;
		if (r == RD_SHORT && cut[d])
			return -EAGAIN;
		if (d > 0) {
			/* Schema-less: a LEN payload may be a string or bytes,
			 * not a message. It holds no match; resume after it. */
			d--;
			continue;
		}
		return -EBADMSG;
	}
}

int mtd_pbwire_find_grpc(const uint8_t *frame, size_t len, size_t lookahead, const uint32_t *path, size_t depth,
                         struct mtd_pbwire_value *out)
{
	uint32_t mlen;
	size_t have, want;

	if (frame == NULL && len > 0)
		return -EINVAL;
	if (len < 5)
		return -EAGAIN;
	/* gRPC PROTOCOL-HTTP2: Compressed-Flag (1 byte), Message-Length
	 * (4 bytes, big-endian), Message. */
	if (frame[0] != 0)
		return -ENOTSUP;
	mlen = (uint32_t)frame[1] << 24 | (uint32_t)frame[2] << 16 | (uint32_t)frame[3] << 8 | (uint32_t)frame[4];
	have = len - 5;
	want = mlen < lookahead ? mlen : lookahead;
	if (have < want)
		return -EAGAIN;
	/* The first `want` bytes are all we look at: the whole message when
	 * it fits the look-ahead, else its prefix, read as if complete. A
	 * value cut by the look-ahead then reads as malformed, i.e. absent. */
	return mtd_pbwire_find(frame + 5, want, true, path, depth, out);
}

size_t mtd_pbwire_key_bytes(const struct mtd_pbwire_value *v, char buf[MTD_PBWIRE_NUMBUF], const uint8_t **key)
{
	int n;

	switch (v->type) {
	case MTD_PBWIRE_LEN:
		*key = v->data;
		return v->len;
	case MTD_PBWIRE_VARINT:
		n = snprintf(buf, MTD_PBWIRE_NUMBUF, "%lld", (long long)(int64_t)v->num);
		break;
	default:
		n = snprintf(buf, MTD_PBWIRE_NUMBUF, "%llu", (unsigned long long)v->num);
		break;
	}
	*key = (const uint8_t *)buf;
	return n > 0 ? (size_t)n : 0;
}

int mtd_pbwire_path_parse(const char *text, uint32_t path[MTD_PBWIRE_MAX_DEPTH], size_t *depth)
{
	size_t d = 0;
	const char *p = text;

	if (text == NULL || depth == NULL)
		return -EINVAL;
	for (;;) {
		uint64_t v = 0;
		const char *start = p;

		while (*p >= '0' && *p <= '9') {
			v = v * 10 + (uint64_t)(*p - '0');
			if (v > MTD_PBWIRE_MAX_FIELD)
				return -EINVAL;
			p++;
		}
		if (p == start || v == 0 || (*start == '0') || d == MTD_PBWIRE_MAX_DEPTH)
			return -EINVAL;
		path[d++] = (uint32_t)v;
		if (*p == '\0')
			break;
		if (*p != '.')
			return -EINVAL;
		p++;
	}
	*depth = d;
	return 0;
}

int mtd_pbwire_next(struct mtd_pbwire_iter *it, uint32_t *field, struct mtd_pbwire_value *out)
{
	while (it->pos < it->len) {
		uint32_t f;
		unsigned wt;
		uint64_t v = 0;
		size_t at = it->pos;
		enum rd r = read_tag(it->msg, &it->pos, it->len, &f, &wt);

		/* A tag is a 32-bit varint: at most 5 bytes (protobuf-c refuses
		 * a longer one, however small its value). */
		if (r == RD_OK && it->pos - at > 5)
			r = RD_BAD;
		if (r == RD_OK) {
			switch (wt) {
			case 0:
				r = read_varint(it->msg, &it->pos, it->len, &v);
				break;
			case 1:
				r = read_fixed(it->msg, &it->pos, it->len, 8, &v);
				break;
			case 5:
				r = read_fixed(it->msg, &it->pos, it->len, 4, &v);
				break;
			case 2:
				at = it->pos;
				r = read_varint(it->msg, &it->pos, it->len, &v);
				if (r == RD_OK && it->pos - at > 5)
					r = RD_BAD; /* a length is a 32-bit varint too */
				if (r == RD_OK && v > it->len - it->pos)
					r = RD_SHORT;
				break;
			default:
				r = RD_BAD; /* a group: proto3 has none */
				break;
			}
		}
		if (r != RD_OK) {
			it->pos = it->len + 1; /* stays malformed */
			return -EBADMSG;
		}
		*field = f;
		out->type = (enum mtd_pbwire_type)wt;
		out->num = wt == 2 ? 0 : v;
		out->data = wt == 2 ? it->msg + it->pos : NULL;
		out->len = wt == 2 ? (size_t)v : 0;
		if (wt == 2)
			it->pos += (size_t)v;
		return 1;
	}
	return it->pos == it->len ? 0 : -EBADMSG;
}
