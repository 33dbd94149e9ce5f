/*
 * Regular expressions for JSON Schema `pattern` (the `@pattern("...")`
 * annotation): an ECMAScript subset, matched by a Pike VM over code points in
 * O(len(input) * len(program)) time and bounded memory. Patterns and inputs
 * are both untrusted; nothing backtracks.
 *
 * Supported, as in JS `new RegExp(p, "u").test(s)`:
 *   literals; `.` (any code point but \n \r U+2028 U+2029); `^` `$` (input
 *   start and end only); `|`; `( )`, `(?: )`, `(?<name> )` (plain groups);
 *   `* + ? {n} {n,} {n,m}` and their lazy `?` forms; classes `[...]` `[^...]`
 *   with ranges (`[]` matches nothing, `[^]` anything); `\d \D \w \W \s \S`
 *   (ASCII \d and \w, ECMA WhiteSpace and LineTerminator for \s); `\b \B`
 *   (ASCII word characters); escapes `\n \t \r \f \v \0 \cX \xHH \uHHHH
 *   \u{H...}` (a `\uHHHH\uHHHH` surrogate pair is one code point), `\b` as
 *   backspace inside classes, and `\` before any ASCII punctuation as that
 *   character.
 *
 * Rejected with a one-line reason: backreferences (`\1`, `\k<n>`),
 * lookaround (`(?=` `(?!` `(?<=` `(?<!`), `\p{..}` `\P{..}`, other escaped
 * letters or digits (`\z`, `\A`, octal `\01`), reversed ranges and ranges
 * with a class escape at either end, unbalanced `( ) [`, a lone `]` or `}`,
 * a `{` that does not start a valid quantifier (as in unicode mode; escape
 * it as `\{`), quantifiers with nothing to repeat (`*a`, `a**`, `^*`),
 * `{n,m}` with n > m, counts over 1000, patterns over 4096 bytes or with
 * groups nested over 100 deep, programs over 20000 instructions, and
 * invalid UTF-8 in the pattern.
 *
 * Input that is not valid UTF-8 is matched with each invalid byte read as
 * one U+FFFD code point.
 */
#ifndef LUMA_REGEX_H
#define LUMA_REGEX_H

#include <stddef.h>

typedef struct lre lre;

/* Compiles pattern[0..len). On failure returns NULL and writes a one-line
   reason into err (errlen bytes, always NUL-terminated when errlen > 0; err
   may be NULL). The caller owns the result and frees it with lre_free. */
lre *lre_compile(const char *pattern, size_t len, char *err, size_t errlen);

/* 1 if re matches somewhere in s[0..len) (an unanchored search; s may hold
   NUL bytes), 0 if not, -1 if a work buffer could not be allocated. re is
   never written: concurrent calls on the same re are safe. */
int lre_search(const lre *re, const char *s, size_t len);

/* The most work lre_search can do per input byte: the program's size. A
   search costs at most about len * lre_cost(re) steps. */
size_t lre_cost(const lre *re);

/* NULL-safe. */
void lre_free(lre *re);

#endif
