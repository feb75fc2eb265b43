/* A regular expression of RE2's syntax (a subset) matched against a whole
 * string in linear time: xDS's safe_regex (a route's :path, a header's
 * value). The pattern compiles once into a small NFA program; a match
 * runs it by Thompson's simulation (two state lists, each state added at
 * most once per input byte), so it costs O(input x program) whatever the
 * input, which is a caller's and may be hostile. No captures, no
 * backtracking, no allocation and no lock while matching: a compiled
 * program is immutable and any thread may match with it at once.
 *
 * Supported: literals; `\` before a punctuation character (that
 * character); \d \D \w \W \s \S (RE2's: [0-9], [0-9A-Za-z_],
 * [\t\n\f\r ]) \t \n \r \f \v \a \xHH \x{HH} (80-FF: that code point, its
 * two UTF-8 bytes, as RE2 reads it; refused in a class); `.` (any byte
 * but \n);
 * bracket classes with ranges, negation, `]` first or `-` first or last
 * as themselves, the escapes above and [:alpha:]-style POSIX classes
 * ([:^alpha:] negated) inside; groups ( ), (?: ), (?P<name> ), (?<name> );
 * alternation `|` (empty branches too); * + ? {n} {n,} {n,m} (counts at
 * most 1000, as RE2's), each optionally followed by `?` (non-greedy:
 * the same thing for a whole match); ^ and $ (the text's start and end:
 * in a whole match they matter only in the middle, `a^b` matches
 * nothing).
 *
 * Matching is by bytes: `.`, \D, \W, \S and a negated class take one
 * byte, where RE2 takes one UTF-8 code point (so `^.$` matches "é" in
 * RE2 and not here, `^..$` the reverse). Where calls are matched the two
 * agree: gRPC's :path and its ASCII metadata values are printable ASCII
 * (PROTOCOL-HTTP2; -bin values are base64). A multi-byte character written
 * in the pattern is one atom (`é+` repeats it whole); inside a class it
 * is refused.
 *
 * Refused, with the construct and its byte offset: flags ((?i) and the
 * like), \b \B \A \z \p \P \Q..\E \C, backreferences (\1), other
 * escapes, unbalanced parentheses or brackets, an empty or reversed
 * range, a repetition of nothing or of a repetition (`**`), counts over
 * 1000, invalid UTF-8, a pattern over MTD_REGEX_PATTERN_MAX bytes or
 * whose program (counted repetitions expanded) is over
 * MTD_REGEX_PROGRAM_MAX instructions: `(a{1000}){1000}` is refused, not
 * compiled. */
#ifndef MTD_ROUTE_REGEX_H
#define MTD_ROUTE_REGEX_H

#include <stdbool.h>
#include <stddef.h>

#define MTD_REGEX_PATTERN_MAX 1024
/* A match keeps two state lists, a mark and a work stack of this many
 * entries on its stack: about 20 KiB. */
#define MTD_REGEX_PROGRAM_MAX 2048

struct mtd_regex;

/* Compile pattern[0..len) (need not be NUL-terminated). 0 and *out
 * (the caller's, mtd_regex_free); -EINVAL with the reason in why
 * ("flags (?...) are not supported at byte 1": printable ASCII whatever
 * the pattern's bytes); -ENOMEM. *out is NULL on error. */
int mtd_regex_compile(const char *pattern, size_t len, struct mtd_regex **out, char *why, size_t whylen);

/* Whether the whole of s[0..len) matches. Any thread, concurrently. */
bool mtd_regex_match(const struct mtd_regex *re, const char *s, size_t len);

/* The pattern as given, NUL-terminated (for logs and dumps). */
const char *mtd_regex_pattern(const struct mtd_regex *re);

void mtd_regex_free(struct mtd_regex *re);

#endif
