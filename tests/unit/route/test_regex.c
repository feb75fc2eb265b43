/* Unit tests for lib/route/regex: RE2-syntax patterns matched whole in
 * linear time; what is refused and why; glibc's regexec as an
 * independent cross-check. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <regex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "route/regex.h"

static struct mtd_regex *compile(const char *p)
{
	struct mtd_regex *re = NULL;
	char why[256] = "";
	int rc = mtd_regex_compile(p, strlen(p), &re, why, sizeof(why));
	ck_assert_msg(rc == 0, "\"%s\" refused: %s", p, why);
	return re;
}

static const struct {
	const char *re, *in;
	bool match;
} table[] = {
        /* whole match only */
        {"abc", "abc", true},
        {"abc", "abcd", false},
        {"abc", "xabc", false},
        {"", "", true},
        {"", "a", false},
        {"/pkg.Svc/Get.*", "/pkg.Svc/GetUser", true},
        {"/pkg.Svc/Get.*", "/pkg.Svc/Put", false},
        {"/pkg\\.(Svc|Other)/[A-Z]\\w*", "/pkg.Other/Do_it2", true},
        {"/pkg\\.(Svc|Other)/[A-Z]\\w*", "/pkgxSvc/Do", false},
        /* alternation, empty branches */
        {"a|b|c", "b", true},
        {"a|b|c", "ab", false},
        {"a|", "", true},
        {"a|", "a", true},
        {"|a", "", true},
        {"(|x)y", "y", true},
        {"(|x)y", "xy", true},
        {"()", "", true},
        {"(?:)+", "", true},
        {"(a|ab)(c|bcd)", "abcd", true},
        {"(a|ab)(c|bcd)", "abc", true},
        /* repetitions */
        {"a*", "", true},
        {"a*", "aaaa", true},
        {"a+", "", false},
        {"a+", "aaa", true},
        {"ab?c", "ac", true},
        {"ab?c", "abbc", false},
        {"a{3}", "aaa", true},
        {"a{3}", "aa", false},
        {"a{3}", "aaaa", false},
        {"a{2,}", "a", false},
        {"a{2,}", "aaaaaa", true},
        {"a{2,4}", "aaaa", true},
        {"a{2,4}", "aaaaa", false},
        {"a{0}", "", true},
        {"a{0}b", "b", true},
        {"a{0,0}", "a", false},
        {"(ab){2}", "abab", true},
        {"(a{2}){3}", "aaaaaa", true},
        {"(a{2}){3}", "aaaaa", false},
        {"(a{1,2}){2}", "aaa", true},
        {"(a{1,2}){2}", "aaaaa", false},
        {"((ab)+c){2,3}", "abcababc", true},
        {"((ab)+c){2,3}", "abc", false},
        {"(a*)*", "aaa", true},
        {"(a*)+b", "b", true},
        {"(a|b)*abb", "babaabb", true},
        {"(a|b)*abb", "babaab", false},
        {"a{,3}", "a{,3}", true}, /* not a count: literal, as in RE2 */
        {"a{x}", "a{x}", true},
        {"x{", "x{", true},
        {"a{1000}", "a", false},
        /* non-greedy suffixes: the same whole matches */
        {"a*?", "aaa", true},
        {"a+?b", "aab", true},
        {"a??b", "b", true},
        {"a{2,3}?", "aaa", true},
        {"a{2}?", "aa", true},
        /* classes */
        {"[abc]+", "cab", true},
        {"[abc]+", "cad", false},
        {"[a-c]", "b", true},
        {"[^a-c]", "b", false},
        {"[^a-c]", "d", true},
        {"[^a]", "\n", true},
        {"[]a]", "]", true},
        {"[]a]", "a", true},
        {"[^]a]", "]", false},
        {"[^]a]", "b", true},
        {"[-a]", "-", true},
        {"[a-]", "-", true},
        {"[a-]", "b", false},
        {"[a\\-z]", "-", true},
        {"[a\\-z]", "m", false},
        {"[\\d_]+", "1_2", true},
        {"[\\D]", "1", false},
        {"[\\]]", "]", true},
        {"[\\x41-\\x43]+", "ABC", true},
        {"[[:alpha:]]+", "abZ", true},
        {"[[:alpha:]]+", "ab1", false},
        {"[[:^digit:]]", "a", true},
        {"[[:^digit:]]", "5", false},
        {"[[:xdigit:][:space:]]+", "aF 9", true},
        {"[[:word:]]+", "a_9", true},
        {"[[:punct:]]", "!", true},
        {"[[:punct:]]", "a", false},
        {"[.]", ".", true},
        {"[.]", "a", false},
        /* escapes */
        {"\\d+", "0123", true},
        {"\\d+", "12a", false},
        {"\\D", "a", true},
        {"\\w+", "aZ_9", true},
        {"\\W", "-", true},
        {"\\W", "_", false},
        {"\\s", " ", true},
        {"\\s", "\v", false}, /* RE2's \s has no \v */
        {"\\S", "x", true},
        {"\\t\\n\\r\\f\\v", "\t\n\r\f\v", true},
        {"\\x41\\x{42}", "AB", true},
        {"\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\^\\$\\\\\\/", ".*+?()[]{}|^$\\/", true},
        {"a\\.b", "axb", false},
        /* dot: any byte but \n */
        {".", "x", true},
        {".", "\n", false},
        {"..", "\xc3\xa9", true}, /* one byte each: é is two */
        {"\xc3\xa9+", "\xc3\xa9\xc3\xa9", true},
        {"\xc3\xa9+", "\xc3\xa9\xa9", false}, /* the character repeats, not its last byte */
        /* \x80-\xFF is a code point (RE2's): its UTF-8 bytes, repeated whole */
        {"caf\\xE9", "caf\xc3\xa9", true},
        {"caf\\xE9", "caf\xe9", false},
        {"\\x{ff}+", "\xc3\xbf\xc3\xbf", true},
        {"\\x{ff}+", "\xc3\xbf\xbf", false},
        {"\\x7f", "\x7f", true},
        /* groups */
        {"(?:ab)+", "abab", true},
        {"(?P<x>ab)+", "abab", true},
        {"(?<x>a)b", "ab", true},
        {"((a)(b(c)))", "abc", true},
        /* anchors */
        {"^abc$", "abc", true},
        {"^^a$$", "a", true},
        {"a^b", "ab", false},
        {"a$b", "ab", false},
        {"(^a|b)+", "ab", true},
        {"(^a|b)+", "aba", false},
        {"(a|^)b", "b", true},
        {"a(b|$)", "a", true},
        {"x*^y", "y", true},
        {"x*^y", "xy", false},
};

START_TEST(matches_table)
{
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		struct mtd_regex *re = compile(table[i].re);
		ck_assert_msg(mtd_regex_match(re, table[i].in, strlen(table[i].in)) == table[i].match,
		              "\"%s\" against \"%s\": expected %d", table[i].re, table[i].in, table[i].match);
		ck_assert_str_eq(mtd_regex_pattern(re), table[i].re);
		mtd_regex_free(re);
	}
}
END_TEST

START_TEST(matches_bytes_with_nul)
{
	struct mtd_regex *re = compile("a\\x00b");
	ck_assert(mtd_regex_match(re, "a\0b", 3));
	ck_assert(!mtd_regex_match(re, "a\0c", 3));
	mtd_regex_free(re);
	struct mtd_regex *p;
	char why[128];
	ck_assert_int_eq(mtd_regex_compile("ab\0c", 4, &p, why, sizeof(why)), 0); /* by length */
	ck_assert(mtd_regex_match(p, "ab\0c", 4));
	mtd_regex_free(p);
}
END_TEST

static const struct {
	const char *re, *why;
} refused[] = {
        {"(?i)abc", "flags (?...) are not supported at byte 0"},
        {"a(?s:.)", "flags (?...) are not supported at byte 1"},
        {"(?P<>a)", "a bad group name at byte 0"},
        {"(?P<a", "a bad group name at byte 0"},
        {"\\bword", "\\b is not supported at byte 0"},
        {"a\\B", "\\B is not supported at byte 1"},
        {"\\Aa", "\\A is not supported at byte 0"},
        {"a\\z", "\\z is not supported at byte 1"},
        {"\\pN", "\\p is not supported at byte 0"},
        {"\\PL", "\\P is not supported at byte 0"},
        {"\\Qa.b\\E", "\\Q is not supported at byte 0"},
        {"\\C", "\\C is not supported at byte 0"},
        {"(a)\\1", "backreferences (\\1) are not supported at byte 3"},
        {"\\0", "octal escapes (\\0) are not supported at byte 0"},
        {"\\e", "an unknown escape \\e at byte 0"},
        {"ab\\", "a trailing \\ at byte 2"},
        {"\\x4", "a bad \\x escape (two hex digits) at byte 0"},
        {"\\x{100}", "\\x{...} over FF (matching is by bytes) at byte 0"},
        {"\\x{}", "a bad \\x{...} escape at byte 0"},
        {"(ab", "a missing ) for the ( at byte 0"},
        {"a(b(c)", "a missing ) for the ( at byte 1"},
        {"ab)", "an unmatched ) at byte 2"},
        {"a)(", "an unmatched ) at byte 1"},
        {"[ab", "a missing ] for the [ at byte 0"},
        {"[]", "a missing ] for the [ at byte 0"},
        {"x[^]", "a missing ] for the [ at byte 1"},
        {"[z-a]", "a reversed range z-a at byte 1"},
        {"[a\\d-z]", "a range from a class escape at byte 2"},
        {"[a-\\d]", "a class escape inside a range at byte 3"},
        {"[[:foo:]]", "an unknown POSIX class [:foo:] at byte 1"},
        {"[[:f\xc3:]]", "an unknown POSIX class at byte 1"},
        {"[\\x01-\\x00]", "a reversed range \\x01-\\x00 at byte 1"},
        {"[\\x7f-\\x01]", "a reversed range \\x7F-\\x01 at byte 1"},
        {"[\xc3\xa9]", "a non-ASCII byte in a class (matching is by bytes) at byte 1"},
        {"[\\xe9]", "a non-ASCII character in a class (matching is by bytes) at byte 1"},
        {"[a-\\x{ff}]", "a non-ASCII character in a class (matching is by bytes) at byte 3"},
        {"[\\x80-\\xff]", "a non-ASCII character in a class (matching is by bytes) at byte 1"},
        {"*a", "a repetition of nothing (*) at byte 0"},
        {"a|+", "a repetition of nothing (+) at byte 2"},
        {"(?)", "flags (?...) are not supported at byte 0"},
        {"(*)", "a repetition of nothing (*) at byte 1"},
        {"{2}", "a repetition of nothing ({) at byte 0"},
        {"a**", "a repetition of a repetition (*) at byte 2"},
        {"a*+", "a repetition of a repetition (+) at byte 2"},
        {"a???", "a repetition of a repetition (?) at byte 3"},
        {"a{2}{3}", "a repetition of a repetition ({) at byte 4"},
        {"a{1001}", "a count over 1000 at byte 1"},
        {"a{2,1001}", "a count over 1000 at byte 1"},
        {"a{99999999999}", "a count over 1000 at byte 1"},
        {"a{3,2}", "a reversed count {3,2} at byte 1"},
        {"(a{1000}){1000}", "the program is over 2048 instructions (counted repetitions expanded) at byte 9"},
        {"((a{30}){30}){30}", "the program is over 2048 instructions (counted repetitions expanded) at byte 13"},
        {"\xff", "invalid UTF-8 at byte 0"},
        {"a\xc3", "invalid UTF-8 at byte 1"},
};

START_TEST(refuses_with_reason)
{
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		struct mtd_regex *re = (struct mtd_regex *)1;
		char why[256] = "";
		int rc = mtd_regex_compile(refused[i].re, strlen(refused[i].re), &re, why, sizeof(why));
		ck_assert_msg(rc == -EINVAL, "\"%s\" compiled", refused[i].re);
		ck_assert_ptr_null(re);
		ck_assert_msg(strcmp(why, refused[i].why) == 0, "\"%s\": \"%s\", expected \"%s\"", refused[i].re, why,
		              refused[i].why);
	}
}
END_TEST

START_TEST(refuses_over_the_size_caps)
{
	char p[MTD_REGEX_PATTERN_MAX + 2];
	struct mtd_regex *re;
	char why[256];

	memset(p, 'a', sizeof(p));
	ck_assert_int_eq(mtd_regex_compile(p, MTD_REGEX_PATTERN_MAX, &re, why, sizeof(why)), 0);
	ck_assert(mtd_regex_match(re, p, MTD_REGEX_PATTERN_MAX));
	mtd_regex_free(re);
	ck_assert_int_eq(mtd_regex_compile(p, MTD_REGEX_PATTERN_MAX + 1, &re, why, sizeof(why)), -EINVAL);
	ck_assert_str_eq(why, "the pattern is over 1024 bytes");
	/* The biggest program that fits: 2047 instructions and the match. */
	re = compile("a{1000}a{1000}a{47}");
	ck_assert(!mtd_regex_match(re, p, 1024));
	mtd_regex_free(re);
	ck_assert_int_eq(mtd_regex_compile("a{1000}a{1000}a{48}", 19, &re, why, sizeof(why)), -EINVAL);
	/* Deep nesting is bounded too. */
	char deep[1024];
	size_t n = 0;
	for (int i = 0; i < 300; i++)
		deep[n++] = '(';
	for (int i = 0; i < 300; i++)
		deep[n++] = ')';
	ck_assert_int_eq(mtd_regex_compile(deep, n, &re, why, sizeof(why)), -EINVAL);
	ck_assert_str_eq(why, "groups nested over 200 deep at byte 201");
}
END_TEST

/* Patterns that take exponential time by backtracking finish here:
 * Check's timeout, not a clock, would catch a non-linear matcher. */
START_TEST(pathological_patterns_stay_linear)
{
	static const char *pats[] = {"(a*)*b", "(a|a)*b", "(a|a)*", "(a*)*", "(a?){50}a{50}", "(.*)*x", "(a+)+$"};
	size_t len = 64 * 1024;
	char *in = malloc(len);

	ck_assert_ptr_nonnull(in);
	memset(in, 'a', len);
	for (size_t i = 0; i < sizeof(pats) / sizeof(pats[0]); i++) {
		struct mtd_regex *re = compile(pats[i]);
		bool want = strcmp(pats[i], "(a|a)*") == 0 || strcmp(pats[i], "(a*)*") == 0 ||
		            strcmp(pats[i], "(a+)+$") == 0;
		ck_assert_msg(mtd_regex_match(re, in, len) == want, "%s", pats[i]);
		mtd_regex_free(re);
	}
	free(in);
}
END_TEST

/* Counted repetitions of something of no instruction (an empty group)
 * nested four deep: compiled by walking the tree once per copy, this
 * took 1000^4 steps (the control thread hung on one RDS response);
 * Check's timeout, not a clock, judges it. */
START_TEST(nested_counts_of_nothing_compile_at_once)
{
	static const char *pats[] = {"((((){1000}){1000}){1000}){1000}", "((((?:){1000}){999,}){1000}){0,1000}x",
	                             "(((((()()){1000}){1000}){1000}){1000}|a){100}"};
	static const bool empty_matches[] = {true, false, true};

	for (size_t i = 0; i < sizeof(pats) / sizeof(pats[0]); i++) {
		struct mtd_regex *re = compile(pats[i]);
		ck_assert_msg(mtd_regex_match(re, "", 0) == empty_matches[i], "%s", pats[i]);
		ck_assert_msg(mtd_regex_match(re, "x", 1) == (i == 1), "%s", pats[i]);
		ck_assert_msg(mtd_regex_match(re, "aaa", 3) == (i == 2), "%s", pats[i]);
		mtd_regex_free(re);
	}
}
END_TEST

/* ---- a cross-check with glibc's regexec ---------------------------------- */

static uint64_t rng = 0x9e3779b97f4a7c15u;

static unsigned draw(unsigned n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (unsigned)(rng % n);
}

/* A random pattern of the syntax both read the same way (no empty
 * branches or groups, no stacked quantifiers) over {a, b, c}. */
static void gen(char *out, size_t *n, size_t cap, int depth)
{
	unsigned items = 1 + draw(3);
	for (unsigned i = 0; i < items && *n + 40 < cap; i++) {
		unsigned k = draw(depth > 2 ? 4 : 6);
		static const char *atoms[] = {"a", "b", "c", ".", "[ab]", "[^a]", "[a-b]"};
		if (k < 4) {
			const char *a = atoms[draw(7)];
			memcpy(out + *n, a, strlen(a));
			*n += strlen(a);
		} else {
			out[(*n)++] = '(';
			gen(out, n, cap, depth + 1);
			if (k == 5 && *n + 40 < cap) {
				out[(*n)++] = '|';
				gen(out, n, cap, depth + 1);
			}
			out[(*n)++] = ')';
		}
		static const char *q[] = {"", "", "*", "+", "?", "{2}", "{1,2}", "{0,3}", "{2,}"};
		const char *s = q[draw(9)];
		memcpy(out + *n, s, strlen(s));
		*n += strlen(s);
	}
}

START_TEST(agrees_with_glibc)
{
	int compared = 0;
	for (int round = 0; round < 400; round++) {
		char pat[200], anchored[220];
		size_t n = 0;
		gen(pat, &n, sizeof(pat) - 1, 0);
		pat[n] = '\0';
		snprintf(anchored, sizeof(anchored), "^(%s)$", pat);
		regex_t posix;
		ck_assert_msg(regcomp(&posix, anchored, REG_EXTENDED | REG_NOSUB) == 0, "glibc refused %s", anchored);
		struct mtd_regex *re = compile(pat);
		for (int t = 0; t < 40; t++) {
			char in[12];
			unsigned len = draw(9);
			for (unsigned k = 0; k < len; k++)
				in[k] = "abc"[draw(3)];
			in[len] = '\0';
			bool theirs = regexec(&posix, in, 0, NULL, 0) == 0;
			ck_assert_msg(mtd_regex_match(re, in, len) == theirs, "\"%s\" against \"%s\": glibc says %d",
			              pat, in, theirs);
			compared++;
		}
		mtd_regex_free(re);
		regfree(&posix);
	}
	ck_assert_int_eq(compared, 400 * 40);
}
END_TEST

/* A refusal late in the pattern frees the tree built so far (ASan's
 * leak check). */
START_TEST(refusal_frees_a_half_built_tree)
{
	struct mtd_regex *re;
	char why[128];
	ck_assert_int_eq(mtd_regex_compile("(a|b|[cd]|e{3})*(f", 19, &re, why, sizeof(why)), -EINVAL);
	ck_assert_ptr_null(re);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("route_regex");
	TCase *tc = tcase_create("regex");
	tcase_add_test(tc, matches_table);
	tcase_add_test(tc, matches_bytes_with_nul);
	tcase_add_test(tc, refuses_with_reason);
	tcase_add_test(tc, refuses_over_the_size_caps);
	tcase_add_test(tc, pathological_patterns_stay_linear);
	tcase_add_test(tc, nested_counts_of_nothing_compile_at_once);
	tcase_add_test(tc, agrees_with_glibc);
	tcase_add_test(tc, refusal_frees_a_half_built_tree);
	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
