/* RE2-syntax patterns into an NFA program, matched whole by Thompson's
 * simulation (regex.h says what is supported and refused).
 *
 * The pattern is parsed into a tree of nodes (each knowing how many
 * instructions it compiles to, so an expansion over the cap is refused
 * before anything is emitted), then emitted as a program of
 *
 *   BYTE c     the next input byte is c          CLASS k  it is in class k
 *   SPLIT x,y  go on at x and at y               JMP x    go on at x
 *   BOL / EOL  only at the text's start / end    MATCH
 *
 * A match advances the set of live states one input byte at a time; a
 * state enters a set at most once per step (its mark holds the step's
 * generation), so a step costs at most the program's size. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/utf8.h"
#include "route/regex.h"

#define COUNT_MAX 1000 /* RE2's bound on {n,m} */

enum node_kind { N_EMPTY, N_BYTE, N_CLASS, N_CAT, N_ALT, N_REPEAT, N_BOL, N_EOL };

struct node {
	uint8_t kind;
	uint8_t byte; /* N_BYTE */
	int a, b;     /* children (N_CAT, N_ALT; N_REPEAT: a), N_CLASS: the class */
	int min, max; /* N_REPEAT; max -1 = no bound */
	size_t size;  /* instructions it compiles to */
};

enum op { OP_BYTE, OP_CLASS, OP_SPLIT, OP_JMP, OP_BOL, OP_EOL, OP_MATCH };

struct insn {
	uint8_t op;
	uint8_t byte;
	uint16_t x, y; /* targets; OP_CLASS: x is the class */
};

typedef uint8_t byteset[32];

struct mtd_regex {
	struct insn *prog;
	size_t n;
	byteset *cls;
	char *pattern;
};

struct parser {
	const unsigned char *p;
	size_t len, i;
	struct node *nodes;
	size_t n_nodes, cap_nodes;
	byteset *cls;
	size_t n_cls, cap_cls;
	char *why;
	size_t whylen;
};

static int fail(struct parser *ps, size_t at, const char *fmt, ...)
{
	char msg[160];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	snprintf(ps->why, ps->whylen, "%s at byte %zu", msg, at);
	return -EINVAL;
}

static void set_bit(uint8_t *s, unsigned c)
{
	s[c >> 3] |= (uint8_t)(1u << (c & 7));
}

static bool has_bit(const uint8_t *s, unsigned c)
{
	return s[c >> 3] & (1u << (c & 7));
}

static void set_range(uint8_t *s, unsigned lo, unsigned hi)
{
	for (unsigned c = lo; c <= hi; c++)
		set_bit(s, c);
}

/* ---- the tree ----------------------------------------------------------- */

/* A new node of `size` instructions, or -1 (ENOMEM, or over the cap:
 * *rc says which). */
static int node_new(struct parser *ps, enum node_kind kind, size_t size, size_t at, int *rc)
{
	if (size > MTD_REGEX_PROGRAM_MAX - 1) {
		*rc = fail(ps, at, "the program is over %d instructions (counted repetitions expanded)",
		           MTD_REGEX_PROGRAM_MAX);
		return -1;
	}
	if (ps->n_nodes == ps->cap_nodes) {
		size_t cap = ps->cap_nodes ? 2 * ps->cap_nodes : 64;
		struct node *n = realloc(ps->nodes, cap * sizeof(*n));
		if (n == NULL) {
			*rc = -ENOMEM;
			return -1;
		}
		ps->nodes = n;
		ps->cap_nodes = cap;
	}
	struct node *n = &ps->nodes[ps->n_nodes];
	memset(n, 0, sizeof(*n));
	n->kind = (uint8_t)kind;
	n->size = size;
	return (int)ps->n_nodes++;
}

static int node_pair(struct parser *ps, enum node_kind kind, int a, int b, size_t at, int *rc)
{
	size_t extra = kind == N_ALT ? 2 : 0;
	int k = node_new(ps, kind, ps->nodes[a].size + ps->nodes[b].size + extra, at, rc);

	if (k >= 0) {
		ps->nodes[k].a = a;
		ps->nodes[k].b = b;
	}
	return k;
}

static int node_byte(struct parser *ps, unsigned c, size_t at, int *rc)
{
	int k = node_new(ps, N_BYTE, 1, at, rc);

	if (k >= 0)
		ps->nodes[k].byte = (uint8_t)c;
	return k;
}

/* A class (one byte: a BYTE node). */
static int node_class(struct parser *ps, const uint8_t *set, size_t at, int *rc)
{
	int only = -1, count = 0;

	for (unsigned c = 0; c < 256; c++)
		if (has_bit(set, c)) {
			only = (int)c;
			count++;
		}
	if (count == 1)
		return node_byte(ps, (unsigned)only, at, rc);
	if (ps->n_cls == ps->cap_cls) {
		size_t cap = ps->cap_cls ? 2 * ps->cap_cls : 8;
		byteset *c = realloc(ps->cls, cap * sizeof(*c));
		if (c == NULL) {
			*rc = -ENOMEM;
			return -1;
		}
		ps->cls = c;
		ps->cap_cls = cap;
	}
	int k = node_new(ps, N_CLASS, 1, at, rc);
	if (k >= 0) {
		memcpy(ps->cls[ps->n_cls], set, sizeof(byteset));
		ps->nodes[k].a = (int)ps->n_cls++;
	}
	return k;
}

/* ---- escapes and classes ------------------------------------------------ */

static bool is_word(unsigned c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static int hexval(unsigned c)
{
	if (c >= '0' && c <= '9')
		return (int)(c - '0');
	if (c >= 'a' && c <= 'f')
		return (int)(c - 'a' + 10);
	if (c >= 'A' && c <= 'F')
		return (int)(c - 'A' + 10);
	return -1;
}

/* \d \w \s and their negations into set. */
static bool perl_class(unsigned c, uint8_t *set)
{
	byteset s = {0};

	switch (c | 0x20) {
	case 'd':
		set_range(s, '0', '9');
		break;
	case 'w':
		set_range(s, '0', '9');
		set_range(s, 'a', 'z');
		set_range(s, 'A', 'Z');
		set_bit(s, '_');
		break;
	case 's': /* RE2's \s: [\t\n\f\r ], no \v */
		set_bit(s, '\t');
		set_bit(s, '\n');
		set_bit(s, '\f');
		set_bit(s, '\r');
		set_bit(s, ' ');
		break;
	default:
		return false;
	}
	for (size_t i = 0; i < sizeof(s); i++)
		set[i] |= (uint8_t)(c >= 'a' ? s[i] : ~s[i]);
	return true;
}

/* The escape at ps->i (a backslash): 0 and *byte for one byte, 1 with
 * its bytes added to set for a class escape, or -EINVAL. */
static int escape(struct parser *ps, unsigned *byte, uint8_t *set)
{
	size_t at = ps->i;

	if (at + 1 >= ps->len)
		return fail(ps, at, "a trailing \\");
	unsigned c = ps->p[at + 1];
	ps->i = at + 2;
	if ((c | 0x20) == 'd' || (c | 0x20) == 'w' || (c | 0x20) == 's') {
		perl_class(c, set);
		return 1;
	}
	switch (c) {
	case 't':
		*byte = '\t';
		return 0;
	case 'n':
		*byte = '\n';
		return 0;
	case 'r':
		*byte = '\r';
		return 0;
	case 'f':
		*byte = '\f';
		return 0;
	case 'v':
		*byte = '\v';
		return 0;
	case 'a':
		*byte = '\a';
		return 0;
	case 'x': {
		unsigned v = 0;
		size_t i = ps->i;
		if (i < ps->len && ps->p[i] == '{') {
			size_t digits = 0;
			for (i++; i < ps->len && hexval(ps->p[i]) >= 0; i++, digits++)
				if ((v = v * 16 + (unsigned)hexval(ps->p[i])) > 0xff)
					return fail(ps, at, "\\x{...} over FF (matching is by bytes)");
			if (digits == 0 || i >= ps->len || ps->p[i] != '}')
				return fail(ps, at, "a bad \\x{...} escape");
			ps->i = i + 1;
		} else {
			if (i + 2 > ps->len || hexval(ps->p[i]) < 0 || hexval(ps->p[i + 1]) < 0)
				return fail(ps, at, "a bad \\x escape (two hex digits)");
			v = (unsigned)(hexval(ps->p[i]) * 16 + hexval(ps->p[i + 1]));
			ps->i = i + 2;
		}
		*byte = v;
		return 0;
	}
	case 'b':
	case 'B':
	case 'A':
	case 'z':
	case 'p':
	case 'P':
	case 'Q':
	case 'E':
	case 'C':
		return fail(ps, at, "\\%c is not supported", c);
	default:
		break;
	}
	if (c >= '1' && c <= '9')
		return fail(ps, at, "backreferences (\\%c) are not supported", c);
	if (c == '0')
		return fail(ps, at, "octal escapes (\\0) are not supported");
	if (c < 0x80 && c > 0x20 && c != 0x7f && !is_word(c)) {
		*byte = c; /* an escaped punctuation character is itself */
		return 0;
	}
	if (c < 0x80 && c > 0x20 && c != 0x7f)
		return fail(ps, at, "an unknown escape \\%c", c);
	return fail(ps, at, "an unknown escape");
}

static const struct {
	const char *name;
	const char *ranges; /* pairs lo, hi */
} posix[] = {
        {"alnum", "09azAZ"},
        {"alpha", "azAZ"},
        {"ascii", "\x01\x7f"},
        {"blank", "\t\t  "},
        {"cntrl", "\x01\x1f\x7f\x7f"},
        {"digit", "09"},
        {"graph", "!~"},
        {"lower", "az"},
        {"print", " ~"},
        {"punct", "!/:@[`{~"},
        {"space", "\t\r  "},
        {"upper", "AZ"},
        {"word", "09azAZ__"},
        {"xdigit", "09afAF"},
};

/* [:name:] or [:^name:] at ps->i into set: 1, 0 when it is not one (the
 * '[' is a literal), or -EINVAL for an unknown name. */
static int posix_class(struct parser *ps, uint8_t *set)
{
	size_t at = ps->i, i = at + 2;

	if (i > ps->len || ps->p[at + 1] != ':')
		return 0;
	size_t end = i;
	while (end + 1 < ps->len && !(ps->p[end] == ':' && ps->p[end + 1] == ']'))
		end++;
	if (end + 1 >= ps->len)
		return 0;
	bool neg = i < end && ps->p[i] == '^';
	if (neg)
		i++;
	for (size_t k = 0; k < sizeof(posix) / sizeof(posix[0]); k++) {
		if (strlen(posix[k].name) != end - i || memcmp(posix[k].name, ps->p + i, end - i) != 0)
			continue;
		byteset s = {0};
		if (strcmp(posix[k].name, "ascii") == 0 || strcmp(posix[k].name, "cntrl") == 0)
			/* the table cannot hold a NUL */
			set_bit(s, 0);
		for (const char *r = posix[k].ranges; *r; r += 2)
			set_range(s, (unsigned char)r[0], (unsigned char)r[1]);
		for (size_t b = 0; b < sizeof(s); b++)
			set[b] |= (uint8_t)(neg ? ~s[b] : s[b]);
		ps->i = end + 2;
		return 1;
	}
	for (size_t k = i; k < end; k++)
		if (!is_word(ps->p[k]))
			return fail(ps, at, "an unknown POSIX class");
	return fail(ps, at, "an unknown POSIX class [:%.*s:]", (int)(end - i), (const char *)ps->p + i);
}

/* One byte of a class at ps->i (a range's end): 0 and *c, or -EINVAL. */
static int class_byte(struct parser *ps, unsigned *c, uint8_t *set)
{
	size_t at = ps->i;
	unsigned b = ps->p[at];

	if (b == '\\') {
		int rc = escape(ps, c, set);
		if (rc == 0 && *c >= 0x80)
			return fail(ps, at, "a non-ASCII character in a class (matching is by bytes)");
		return rc < 0 ? rc : rc == 1 ? fail(ps, at, "a class escape inside a range") : 0;
	}
	if (b >= 0x80)
		return fail(ps, at, "a non-ASCII byte in a class (matching is by bytes)");
	*c = b;
	ps->i++;
	return 0;
}

static int bracket(struct parser *ps, int *out)
{
	size_t start = ps->i;
	byteset set = {0};
	bool first = true;
	int rc = 0;

	ps->i++;
	bool neg = ps->i < ps->len && ps->p[ps->i] == '^';
	if (neg)
		ps->i++;
	for (;;) {
		if (ps->i >= ps->len)
			return fail(ps, start, "a missing ] for the [");
		size_t at = ps->i;
		unsigned c = ps->p[at];
		if (c == ']' && !first) {
			ps->i++;
			break;
		}
		first = false;
		if (c == '[' && (rc = posix_class(ps, set)) != 0) {
			if (rc < 0)
				return rc;
			continue;
		}
		unsigned lo;
		if (c == '\\') {
			if ((rc = escape(ps, &lo, set)) < 0)
				return rc;
			if (rc == 1) {
				if (ps->i + 1 < ps->len && ps->p[ps->i] == '-' && ps->p[ps->i + 1] != ']')
					return fail(ps, at, "a range from a class escape");
				continue;
			}
			if (lo >= 0x80) /* RE2's \xE9 is U+00E9, two bytes in UTF-8 */
				return fail(ps, at, "a non-ASCII character in a class (matching is by bytes)");
		} else if ((rc = class_byte(ps, &lo, set)) < 0) {
			return rc;
		}
		if (ps->i + 1 < ps->len && ps->p[ps->i] == '-' && ps->p[ps->i + 1] != ']') {
			unsigned hi;
			ps->i++;
			if ((rc = class_byte(ps, &hi, set)) < 0)
				return rc;
			if (hi < lo && lo > 0x20 && lo < 0x7f && hi > 0x20 && hi < 0x7f)
				return fail(ps, at, "a reversed range %c-%c", lo, hi);
			if (hi < lo) /* not quoted: a refusal's text stays printable */
				return fail(ps, at, "a reversed range \\x%02X-\\x%02X", lo, hi);
			set_range(set, lo, hi);
		} else {
			set_bit(set, lo);
		}
	}
	if (neg)
		for (size_t b = 0; b < sizeof(set); b++)
			set[b] = (uint8_t)~set[b];
	rc = 0;
	*out = node_class(ps, set, start, &rc);
	return rc;
}

/* ---- the grammar: alt := cat ('|' cat)*; cat := repeat*; repeat := atom quantifier* */

static int alt(struct parser *ps, int *out, int depth);

/* A counted repetition {n}, {n,} or {n,m} at ps->i: true with its
 * bounds and ps->i past it; false when it is not one (RE2 reads such a
 * '{' as a literal) or its counts are over COUNT_MAX (*over set). */
static bool counted(struct parser *ps, int *min, int *max, bool *over)
{
	size_t i = ps->i + 1;
	long v[2] = {-1, -1};
	bool comma = false;

	for (int k = 0; k < 2; k++) {
		size_t d = i;
		long n = 0;
		while (i < ps->len && ps->p[i] >= '0' && ps->p[i] <= '9' && i - d < 8)
			n = n * 10 + (ps->p[i++] - '0');
		if (i < ps->len && ps->p[i] >= '0' && ps->p[i] <= '9')
			n = COUNT_MAX + 1; /* too many digits */
		if (i > d)
			v[k] = n;
		else if (k == 0)
			return false;
		if (k == 0 && i < ps->len && ps->p[i] == ',') {
			comma = true;
			i++;
			continue;
		}
		break;
	}
	while (i < ps->len && ps->p[i] >= '0' && ps->p[i] <= '9')
		i++;
	if (i >= ps->len || ps->p[i] != '}')
		return false;
	*over = v[0] > COUNT_MAX || v[1] > COUNT_MAX;
	*min = (int)v[0];
	*max = comma ? (int)v[1] : (int)v[0];
	ps->i = i + 1;
	return true;
}

static bool quantifier_at(struct parser *ps)
{
	if (ps->i >= ps->len)
		return false;
	unsigned c = ps->p[ps->i];
	if (c == '*' || c == '+' || c == '?')
		return true;
	if (c != '{')
		return false;
	size_t save = ps->i;
	int a, b;
	bool over;
	bool yes = counted(ps, &a, &b, &over);
	ps->i = save;
	return yes;
}

/* A multi-byte UTF-8 character at ps->i as one atom (its bytes in a row). */
static int utf8_atom(struct parser *ps, int *out)
{
	size_t at = ps->i;
	size_t n = mtd_utf8_seq(ps->p + at, ps->len - at);
	int rc = 0;

	if (n < 2)
		return fail(ps, at, "invalid UTF-8");
	int node = node_byte(ps, ps->p[at], at, &rc);
	for (size_t k = 1; k < n && node >= 0; k++) {
		int b = node_byte(ps, ps->p[at + k], at, &rc);
		node = b < 0 ? -1 : node_pair(ps, N_CAT, node, b, at, &rc);
	}
	ps->i = at + n;
	*out = node;
	return rc;
}

static int atom(struct parser *ps, int *out, int depth)
{
	size_t at = ps->i;
	unsigned c = ps->p[at];
	int rc = 0;

	switch (c) {
	case '(': {
		ps->i++;
		if (ps->i < ps->len && ps->p[ps->i] == '?') {
			size_t i = ps->i + 1;
			if (i < ps->len && ps->p[i] == ':') {
				ps->i = i + 1;
			} else if (i < ps->len &&
			           (ps->p[i] == '<' || (ps->p[i] == 'P' && i + 1 < ps->len && ps->p[i + 1] == '<'))) {
				i += ps->p[i] == 'P' ? 2 : 1;
				size_t name = i;
				while (i < ps->len && is_word(ps->p[i]))
					i++;
				if (i == name || i >= ps->len || ps->p[i] != '>')
					return fail(ps, at, "a bad group name");
				ps->i = i + 1;
			} else {
				return fail(ps, at, "flags (?...) are not supported");
			}
		}
		if ((rc = alt(ps, out, depth + 1)) != 0)
			return rc;
		if (ps->i >= ps->len || ps->p[ps->i] != ')')
			return fail(ps, at, "a missing ) for the (");
		ps->i++;
		return 0;
	}
	case '[':
		return bracket(ps, out);
	case '.': {
		byteset set;
		memset(set, 0xff, sizeof(set));
		set['\n' >> 3] &= (uint8_t) ~(1u << ('\n' & 7));
		ps->i++;
		*out = node_class(ps, set, at, &rc);
		return rc;
	}
	case '^':
	case '$':
		ps->i++;
		*out = node_new(ps, c == '^' ? N_BOL : N_EOL, 1, at, &rc);
		return rc;
	case '\\': {
		byteset set = {0};
		unsigned b;
		if ((rc = escape(ps, &b, set)) < 0)
			return rc;
		bool is_class = rc == 1;
		rc = 0;
		if (!is_class && b >= 0x80) {
			/* \x80-\xFF is a code point, as in RE2: its UTF-8 bytes */
			int hi = node_byte(ps, 0xc0 | (b >> 6), at, &rc);
			int lo = hi < 0 ? -1 : node_byte(ps, 0x80 | (b & 0x3f), at, &rc);
			*out = lo < 0 ? -1 : node_pair(ps, N_CAT, hi, lo, at, &rc);
			return rc;
		}
		*out = is_class ? node_class(ps, set, at, &rc) : node_byte(ps, b, at, &rc);
		return rc;
	}
	default:
		break;
	}
	if (quantifier_at(ps))
		return fail(ps, at, "a repetition of nothing (%c)", c);
	if (c >= 0x80)
		return utf8_atom(ps, out);
	ps->i++;
	*out = node_byte(ps, c, at, &rc);
	return rc;
}

static int repeat(struct parser *ps, int *out, int depth)
{
	int rc = atom(ps, out, depth);
	bool seen = false;

	while (rc == 0 && quantifier_at(ps)) {
		size_t at = ps->i;
		unsigned c = ps->p[at];
		int min = 0, max = -1;
		bool over = false;
		if (seen)
			return fail(ps, at, "a repetition of a repetition (%c)", c);
		seen = true;
		if (c == '+')
			min = 1;
		else if (c == '?')
			max = 1;
		if (c != '{')
			ps->i++;
		else if (counted(ps, &min, &max, &over) && over)
			return fail(ps, at, "a count over %d", COUNT_MAX);
		if (max >= 0 && max < min)
			return fail(ps, at, "a reversed count {%d,%d}", min, max);
		if (ps->i < ps->len && ps->p[ps->i] == '?')
			ps->i++; /* non-greedy: the same set of whole matches */
		size_t s = ps->nodes[*out].size;
		if (s == 0)
			/* Something of no instruction matches only the empty
			 * string, however repeated; emitted once per copy, nested
			 * counts of it would cost 1000^depth emits for nothing. */
			continue;
		size_t size = max < 0 ? (min == 0 ? s + 2 : (size_t)min * s + 1)
		                      : (size_t)min * s + (size_t)(max - min) * (s + 1);
		int k = node_new(ps, N_REPEAT, size, at, &rc);
		if (k >= 0) {
			ps->nodes[k].a = *out;
			ps->nodes[k].min = min;
			ps->nodes[k].max = max;
			*out = k;
		}
	}
	return rc;
}

static int cat(struct parser *ps, int *out, int depth)
{
	int node = -1, rc = 0;

	while (ps->i < ps->len && ps->p[ps->i] != '|' && ps->p[ps->i] != ')') {
		size_t at = ps->i;
		int r;
		if ((rc = repeat(ps, &r, depth)) != 0)
			return rc;
		node = node < 0 ? r : node_pair(ps, N_CAT, node, r, at, &rc);
		if (node < 0)
			return rc;
	}
	*out = node >= 0 ? node : node_new(ps, N_EMPTY, 0, ps->i, &rc);
	return rc;
}

static int alt(struct parser *ps, int *out, int depth)
{
	int rc;

	if (depth > 200)
		return fail(ps, ps->i, "groups nested over 200 deep");
	if ((rc = cat(ps, out, depth)) != 0)
		return rc;
	while (ps->i < ps->len && ps->p[ps->i] == '|') {
		size_t at = ps->i++;
		int right;
		if ((rc = cat(ps, &right, depth)) != 0)
			return rc;
		if ((*out = node_pair(ps, N_ALT, *out, right, at, &rc)) < 0)
			return rc;
	}
	return 0;
}

/* ---- the program -------------------------------------------------------- */

struct emitter {
	const struct node *nodes;
	struct insn *prog;
	size_t pc;
};

static size_t put(struct emitter *e, enum op op, unsigned x, unsigned y)
{
	e->prog[e->pc] = (struct insn){.op = (uint8_t)op, .x = (uint16_t)x, .y = (uint16_t)y};
	return e->pc++;
}

static void emit(struct emitter *e, int k)
{
	const struct node *n = &e->nodes[k];

	switch (n->kind) {
	case N_EMPTY:
		break;
	case N_BYTE:
		e->prog[put(e, OP_BYTE, 0, 0)].byte = n->byte;
		break;
	case N_CLASS:
		put(e, OP_CLASS, (unsigned)n->a, 0);
		break;
	case N_BOL:
		put(e, OP_BOL, 0, 0);
		break;
	case N_EOL:
		put(e, OP_EOL, 0, 0);
		break;
	case N_CAT:
		emit(e, n->a);
		emit(e, n->b);
		break;
	case N_ALT: {
		size_t split = put(e, OP_SPLIT, (unsigned)e->pc + 1, 0);
		emit(e, n->a);
		size_t jmp = put(e, OP_JMP, 0, 0);
		e->prog[split].y = (uint16_t)e->pc;
		emit(e, n->b);
		e->prog[jmp].x = (uint16_t)e->pc;
		break;
	}
	case N_REPEAT:
		if (n->max < 0 && n->min == 0) { /* L: split L+1, out; a; jmp L */
			size_t split = put(e, OP_SPLIT, (unsigned)e->pc + 1, 0);
			emit(e, n->a);
			put(e, OP_JMP, (unsigned)split, 0);
			e->prog[split].y = (uint16_t)e->pc;
		} else if (n->max < 0) { /* a{min-1}, then L: a; split L, out */
			for (int i = 1; i < n->min; i++)
				emit(e, n->a);
			size_t loop = e->pc;
			emit(e, n->a);
			put(e, OP_SPLIT, (unsigned)loop, (unsigned)e->pc + 1);
		} else { /* a{min}, then (max - min) x (split next, out; a) */
			for (int i = 0; i < n->min; i++)
				emit(e, n->a);
			for (int i = n->min; i < n->max; i++) {
				size_t split = put(e, OP_SPLIT, (unsigned)e->pc + 1, 0);
				emit(e, n->a);
				e->prog[split].y = (uint16_t)e->pc;
			}
		}
		break;
	default:
		break;
	}
}

int mtd_regex_compile(const char *pattern, size_t len, struct mtd_regex **out, char *why, size_t whylen)
{
	struct parser ps = {.p = (const unsigned char *)pattern, .len = len, .why = why, .whylen = whylen};
	struct mtd_regex *re = NULL;
	int root = -1, rc;

	*out = NULL;
	if (len > MTD_REGEX_PATTERN_MAX) {
		snprintf(why, whylen, "the pattern is over %d bytes", MTD_REGEX_PATTERN_MAX);
		return -EINVAL;
	}
	if ((rc = alt(&ps, &root, 0)) != 0)
		goto done;
	if (ps.i < len) { /* alt stops only at the end or a ')' */
		rc = fail(&ps, ps.i, "an unmatched )");
		goto done;
	}
	re = calloc(1, sizeof(*re));
	if (re == NULL)
		goto oom;
	re->n = ps.nodes[root].size + 1;
	re->prog = calloc(re->n, sizeof(*re->prog));
	re->cls = calloc(ps.n_cls ? ps.n_cls : 1, sizeof(*re->cls));
	re->pattern = malloc(len + 1);
	if (re->prog == NULL || re->cls == NULL || re->pattern == NULL)
		goto oom;
	if (ps.n_cls)
		memcpy(re->cls, ps.cls, ps.n_cls * sizeof(*re->cls));
	memcpy(re->pattern, pattern, len);
	re->pattern[len] = '\0';
	struct emitter e = {.nodes = ps.nodes, .prog = re->prog};
	emit(&e, root);
	put(&e, OP_MATCH, 0, 0);
	*out = re;
	re = NULL;
	goto done;
oom:
	snprintf(why, whylen, "out of memory");
	rc = -ENOMEM;
done:
	mtd_regex_free(re);
	free(ps.nodes);
	free(ps.cls);
	return rc;
}

void mtd_regex_free(struct mtd_regex *re)
{
	if (re == NULL)
		return;
	free(re->prog);
	free(re->cls);
	free(re->pattern);
	free(re);
}

const char *mtd_regex_pattern(const struct mtd_regex *re)
{
	return re->pattern;
}

/* ---- matching ----------------------------------------------------------- */

struct run {
	const struct mtd_regex *re;
	size_t len;
	uint32_t gen;
	uint32_t mark[MTD_REGEX_PROGRAM_MAX];
	uint16_t stack[MTD_REGEX_PROGRAM_MAX];
};

/* The states reached from pc without reading (through SPLIT, JMP and
 * the assertions that hold at pos) that read a byte or match, appended
 * to list once each. */
static size_t add(struct run *r, uint16_t *list, size_t n, uint16_t pc, size_t pos)
{
	size_t top = 0;

	if (r->mark[pc] == r->gen)
		return n;
	r->mark[pc] = r->gen;
	r->stack[top++] = pc;
	while (top > 0) {
		const struct insn *in = &r->re->prog[r->stack[--top]];
		uint16_t next[2];
		int k = 0;
		switch (in->op) {
		case OP_JMP:
			next[k++] = in->x;
			break;
		case OP_SPLIT:
			next[k++] = in->y;
			next[k++] = in->x;
			break;
		case OP_BOL:
			if (pos == 0)
				next[k++] = (uint16_t)(in - r->re->prog + 1);
			break;
		case OP_EOL:
			if (pos == r->len)
				next[k++] = (uint16_t)(in - r->re->prog + 1);
			break;
		default:
			list[n++] = (uint16_t)(in - r->re->prog);
			break;
		}
		/* Each state is stacked once per step: the stack never holds
		 * more than the program's size. */
		for (int j = 0; j < k; j++)
			if (r->mark[next[j]] != r->gen) {
				r->mark[next[j]] = r->gen;
				r->stack[top++] = next[j];
			}
	}
	return n;
}

bool mtd_regex_match(const struct mtd_regex *re, const char *s, size_t len)
{
	struct run r = {.re = re, .len = len, .gen = 1};
	uint16_t a[MTD_REGEX_PROGRAM_MAX], b[MTD_REGEX_PROGRAM_MAX];
	uint16_t *cur = a, *nxt = b;
	const unsigned char *in = (const unsigned char *)s;

	if (len >= UINT32_MAX - 1)
		return false; /* the generations would wrap */
	memset(r.mark, 0, re->n * sizeof(r.mark[0]));
	size_t n = add(&r, cur, 0, 0, 0);
	for (size_t i = 0; i < len && n > 0; i++) {
		size_t m = 0;
		r.gen++;
		for (size_t k = 0; k < n; k++) {
			const struct insn *op = &re->prog[cur[k]];
			if ((op->op == OP_BYTE && op->byte == in[i]) ||
			    (op->op == OP_CLASS && has_bit(re->cls[op->x], in[i])))
				m = add(&r, nxt, m, (uint16_t)(cur[k] + 1), i + 1);
		}
		uint16_t *t = cur;
		cur = nxt;
		nxt = t;
		n = m;
	}
	for (size_t k = 0; k < n; k++)
		if (re->prog[cur[k]].op == OP_MATCH)
			return true;
	return false;
}
