/*
 * core/regex: the ECMAScript subset used by JSON Schema `pattern`.
 * Rows of {pattern, input, expected} and {bad pattern, expected error}, then
 * inputs that are exponential for backtracking engines, which must simply
 * finish.
 */
#include "ctest.h"
#include "regex.h"

typedef struct match_case {
  const char *pat;
  size_t plen;
  const char *in;
  size_t ilen;
  int want;
} match_case;

/* Lengths from sizeof, so that patterns and inputs may hold NUL bytes. */
#define M(p, s, w) { p, sizeof(p) - 1, s, sizeof(s) - 1, w }

static const match_case match_cases[] = {
  /* empty pattern, empty input, unanchored search */
  M("", "", 1),
  M("", "abc", 1),
  M("a", "", 0),
  M("abc", "xxabcxx", 1),
  M("abc", "ab", 0),
  M("abc", "abxc", 0),
  /* anchors: input start and end only */
  M("^abc", "abcd", 1),
  M("^abc", "xabc", 0),
  M("abc$", "xabc", 1),
  M("abc$", "abcx", 0),
  M("^abc$", "abc", 1),
  M("^abc$", "abc\n", 0),
  M("^$", "", 1),
  M("^$", "a", 0),
  M("a^b", "a^b", 0),
  M("a$b", "ab", 0),
  M("^b", "a\nb", 0),
  M("a$", "a\nb", 0),
  M("$^", "", 1),
  /* alternation */
  M("cat|dog", "hotdog", 1),
  M("cat|dog", "cow", 0),
  M("^(cat|dog)$", "dog", 1),
  M("^(cat|dog)$", "catdog", 0),
  M("^(a|b|c|d)+$", "abcdcba", 1),
  M("^(a|b|c|d)+$", "abcde", 0),
  M("a|", "xyz", 1),
  M("^(|a)$", "", 1),
  M("^(?:ab|cd)(?:ef|gh)$", "cdef", 1),
  M("^(?:ab|cd)(?:ef|gh)$", "abcd", 0),
  /* groups */
  M("^(?:ab)+$", "ababab", 1),
  M("^(?:ab)+$", "ababa", 0),
  M("^(?<year>\\d{4})-(?<month>\\d{2})$", "2024-05", 1),
  M("^(?<year>\\d{4})-(?<month>\\d{2})$", "2024-5", 0),
  M("^()$", "", 1),
  M("^(((a)))$", "a", 1),
  M("^(?:)*$", "", 1),
  /* quantifiers */
  M("^a*$", "", 1),
  M("^a*$", "aaaa", 1),
  M("^a*$", "aab", 0),
  M("^a+$", "", 0),
  M("^a+$", "aaa", 1),
  M("^ab?c$", "ac", 1),
  M("^ab?c$", "abc", 1),
  M("^ab?c$", "abbc", 0),
  M("^a{3}$", "aaa", 1),
  M("^a{3}$", "aa", 0),
  M("^a{3}$", "aaaa", 0),
  M("^a{2,}$", "a", 0),
  M("^a{2,}$", "aaaaaaa", 1),
  M("^a{2,4}$", "aa", 1),
  M("^a{2,4}$", "aaaa", 1),
  M("^a{2,4}$", "aaaaa", 0),
  M("^a{0}$", "", 1),
  M("^a{0}b$", "ab", 0),
  M("^a{0,0}b$", "b", 1),
  M("^a{0,2}$", "aa", 1),
  M("^a{0,2}$", "aaa", 0),
  M("^(ab){2}$", "abab", 1),
  M("^(ab){2}$", "ab", 0),
  M("^(a|bc){2,3}$", "abca", 1),
  M("^(a|bc){2,3}$", "bcbcbcbc", 0),
  M("^a{1000}$", "aaa", 0),
  M("^(?:a*)*$", "aaa", 1),
  M("^(?:a*)+b$", "aab", 1),
  M("^(?:a?){3}$", "aa", 1),
  M("^(?:){5}$", "", 1),
  /* lazy forms answer the same */
  M("^a*?$", "aaa", 1),
  M("^a+?b$", "aab", 1),
  M("^a??b$", "b", 1),
  M("^a{2,3}?$", "aaa", 1),
  M("^a{2,}?$", "a", 0),
  /* dot: any code point but line terminators */
  M("^.$", "x", 1),
  M("^.$", "\n", 0),
  M("^.$", "\r", 0),
  M("^.$", "\xE2\x80\xA8", 0),
  M("^.$", "\xE2\x80\xA9", 0),
  M("^.$", "\t", 1),
  M("^a.c$", "abc", 1),
  M("^a.c$", "ac", 0),
  /* character classes */
  M("^[abc]+$", "cab", 1),
  M("^[abc]+$", "cabd", 0),
  M("^[^abc]+$", "xyz", 1),
  M("^[^abc]+$", "xaz", 0),
  M("^[a-z0-9_]+$", "snake_case_2", 1),
  M("^[a-z0-9_]+$", "Camel", 0),
  M("^[-a]+$", "-a-", 1),
  M("^[a-]+$", "a-", 1),
  M("^[a-c-e]+$", "a-e", 1),
  M("^[a-c-e]+$", "d", 0),
  M("^[.]$", ".", 1),
  M("^[.]$", "x", 0),
  M("^[*+?{}()|^$]+$", "*+?{}()|^$", 1),
  M("^[\\]\\[]+$", "][", 1),
  M("^[\\-]$", "-", 1),
  M("^[\\b]$", "\b", 1),
  M("^[\\d.]+$", "3.14", 1),
  M("^[^\\d]+$", "abc", 1),
  M("^[^\\d]+$", "ab1", 0),
  M("^[\\w-]+$", "kebab-case", 1),
  M("^[\\s\\d]+$", " 1\t2", 1),
  M("^[\\D]$", "x", 1),
  M("^[\\W]$", "_", 0),
  M("^[\\S]$", " ", 0),
  M("^[^\\W\\d]+$", "abc_", 1),
  M("^[^\\W\\d]+$", "abc1", 0),
  M("[]", "anything", 0),
  M("^[]$", "", 0),
  M("^[^]$", "\n", 1),
  M("^[^]*$", "a\nb\rc", 1),
  M("^[^\\n]*$", "a\rb", 1),
  M("^[^\\n]*$", "a\nb", 0),
  /* class escapes outside classes */
  M("^\\d+$", "0123456789", 1),
  M("^\\d+$", "12a", 0),
  M("^\\d$", "\xD9\xA3", 0),               /* ARABIC-INDIC DIGIT THREE: \d is ASCII */
  M("^\\D+$", "abc", 1),
  M("^\\w+$", "Az_09", 1),
  M("^\\w$", "-", 0),
  M("^\\w$", "\xC3\xA9", 0),               /* e-acute: \w is ASCII */
  M("^\\W$", "\xC3\xA9", 1),
  M("^\\s+$", " \t\n\v\f\r", 1),
  M("^\\s$", "\xC2\xA0", 1),               /* U+00A0 */
  M("^\\s$", "\xE1\x9A\x80", 1),           /* U+1680 */
  M("^\\s$", "\xE2\x80\x80", 1),           /* U+2000 */
  M("^\\s$", "\xE2\x80\x8A", 1),           /* U+200A */
  M("^\\s$", "\xE2\x80\x8B", 0),           /* U+200B is not white space */
  M("^\\s$", "\xE2\x80\xA8", 1),           /* U+2028 */
  M("^\\s$", "\xE2\x80\xAF", 1),           /* U+202F */
  M("^\\s$", "\xE2\x81\x9F", 1),           /* U+205F */
  M("^\\s$", "\xE3\x80\x80", 1),           /* U+3000 */
  M("^\\s$", "\xEF\xBB\xBF", 1),           /* U+FEFF */
  M("^\\s$", "\xC2\x85", 0),               /* U+0085 is not ECMA white space */
  M("^\\S+$", "abc", 1),
  M("^\\S$", "\xE3\x80\x80", 0),
  /* word boundaries */
  M("\\bcat\\b", "a cat sat", 1),
  M("\\bcat\\b", "concatenate", 0),
  M("\\Bcat\\B", "concatenate", 1),
  M("\\Bcat", "cat", 0),
  M("^\\b$", "", 0),
  M("^\\B$", "", 1),
  M("\\b", "   ", 0),
  M("\\b", " a ", 1),
  M("a\\b", "a\xC3\xA9", 1),               /* e-acute is not a word character */
  /* escapes */
  M("^\\n\\t\\r\\f\\v$", "\n\t\r\f\v", 1),
  M("^a\\0b$", "a\0b", 1),
  M("^\\x41\\x7a$", "Az", 1),
  M("^\\u0041$", "A", 1),
  M("^\\u00e9$", "\xC3\xA9", 1),
  M("^\\u{1F600}$", "\xF0\x9F\x98\x80", 1),
  M("^\\u{41}$", "A", 1),
  M("^\\uD83D\\uDE00$", "\xF0\x9F\x98\x80", 1),
  M("^\\cJ$", "\n", 1),
  M("^\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\^\\$\\\\\\/$", ".*+?()[]{}|^$\\/", 1),
  M("^a\\.b$", "axb", 0),
  M("^\\-$", "-", 1),
  M("^[\\u0041-\\u005A]+$", "HELLO", 1),
  M("^[\\x00-\\x1f]$", "\x1f", 1),
  M("^[\\u{1F600}-\\u{1F64F}]$", "\xF0\x9F\x98\x8A", 1),
  M("^[\\u{1F600}-\\u{1F64F}]$", "\xF0\x9F\x99\x90", 0),
  /* Unicode: a multi-byte character is one code point */
  M("^.$", "\xC3\xA9", 1),
  M("^.$", "\xE6\x97\xA5", 1),
  M("^.$", "\xF0\x9F\x98\x80", 1),
  M("^.{3}$", "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E", 1),
  M("^.{2}$", "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E", 0),
  M("^\xC3\xA9+$", "\xC3\xA9\xC3\xA9", 1),
  M("^[\xC3\xA9\xC3\xA8]$", "\xC3\xA8", 1),
  M("^[\xC3\xA0-\xC3\xBF]$", "\xC3\xA9", 1),
  M("^[^\xC3\xA9]$", "\xC3\xA9", 0),
  M("^\xF0\x9F\x98\x80{2}$", "\xF0\x9F\x98\x80\xF0\x9F\x98\x80", 1),
  M("^[^a]$", "\xF0\x9F\x98\x80", 1),
  /* NUL bytes inside the input */
  M("^a.b$", "a\0b", 1),
  M("b", "a\0b", 1),
  M("^a$", "a\0", 0),
  M("^[^\\0]*$", "ab\0", 0),
  M("\\0", "x\0y", 1),
  /* invalid UTF-8 input: each bad byte is one U+FFFD */
  M("^.$", "\xFF", 1),
  M("^..$", "\xE2\x82", 1),                /* truncated sequence: two bad bytes */
  M("^a.b$", "a\xC0\x80" "b", 0),          /* overlong NUL: two bad bytes */
  M("^a..b$", "a\xC0\x80" "b", 1),
  M("^.$", "\xED\xA0\x80", 0),             /* encoded surrogate: three bad bytes */
  M("^\\uFFFD$", "\xFE", 1),
  M("^\\w+$", "ab\xFF", 0),
  M("b", "\xFF\xFE" "b", 1),
  M("^[^x]{4}$", "\xF0\x9F\x98", 0),
  M("^[^x]{3}$", "\xF0\x9F\x98", 1),
  /* realistic JSON Schema patterns */
  M("^[A-Z]{2}-\\d{4}$", "AB-1234", 1),
  M("^[A-Z]{2}-\\d{4}$", "AB-12345", 0),
  M("^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\\.[a-zA-Z]{2,}$", "x.y@example.com", 1),
  M("^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\\.[a-zA-Z]{2,}$", "x.y@example", 0),
  M("^\\d{4}-\\d{2}-\\d{2}(T\\d{2}:\\d{2}(:\\d{2})?Z)?$", "2024-01-31T10:20Z", 1),
  M("^\\d{4}-\\d{2}-\\d{2}(T\\d{2}:\\d{2}(:\\d{2})?Z)?$", "2024-01-31T10Z", 0),
  M("^#[0-9a-fA-F]{6}$", "#00ff7F", 1),
  M("^(\\+|-)?\\d+(\\.\\d+)?$", "-3.5", 1),
  M("^(\\+|-)?\\d+(\\.\\d+)?$", "3.", 0),
  M("^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
    "123e4567-e89b-12d3-a456-426614174000", 1),
};

typedef struct error_case {
  const char *pat;
  size_t plen;
  const char *msg;   /* expected substring of the reason */
} error_case;

#define E(p, m) { p, sizeof(p) - 1, m }

static const error_case error_cases[] = {
  E("(a)\\1", "backreferences are not supported"),
  E("\\9", "backreferences are not supported"),
  E("(?<n>a)\\k<n>", "backreferences are not supported"),
  E("(?=a)", "lookahead and lookbehind are not supported"),
  E("(?!a)", "lookahead and lookbehind are not supported"),
  E("(?<=a)b", "lookahead and lookbehind are not supported"),
  E("(?<!a)b", "lookahead and lookbehind are not supported"),
  E("\\p{L}", "unicode property escapes are not supported"),
  E("[\\P{Lu}]", "unicode property escapes are not supported"),
  E("[z-a]", "range out of order at offset 1"),
  E("[\\d-z]", "invalid character class range"),
  E("[a-\\w]", "invalid character class range"),
  E("abc(def", "unbalanced parenthesis at offset 3"),
  E("abc)", "unbalanced parenthesis at offset 3"),
  E("((a)", "unbalanced parenthesis at offset 0"),
  E("[abc", "unterminated character class at offset 0"),
  E("[", "unterminated character class"),
  E("a]", "unbalanced bracket ']' at offset 1"),
  E("a}", "lone '}' at offset 1"),
  E("*a", "nothing to repeat at offset 0"),
  E("+", "nothing to repeat"),
  E("a|?", "nothing to repeat at offset 2"),
  E("(*)", "nothing to repeat at offset 1"),
  E("a**", "nothing to repeat at offset 2"),
  E("a{2}{3}", "nothing to repeat at offset 4"),
  E("a*??", "nothing to repeat at offset 3"),
  E("^*", "nothing to repeat at offset 1"),
  E("$+", "nothing to repeat"),
  E("\\b*", "nothing to repeat"),
  E("{2}", "nothing to repeat at offset 0"),
  E("a{3,2}", "numbers out of order in {} quantifier at offset 1"),
  E("a{1001}", "repetition count over 1000"),
  E("a{1,99999999999999999999}", "repetition count over 1000"),
  E("a{", "'{' does not start a quantifier at offset 1"),
  E("a{x}", "'{' does not start a quantifier"),
  E("a{,3}", "'{' does not start a quantifier"),
  E("a{1, 2}", "'{' does not start a quantifier"),
  E("{", "'{' does not start a quantifier at offset 0"),
  E("(a{1000}){1000}", "pattern is too complex"),
  E("(?:(?:a{100}){100}){100}", "pattern is too complex"),
  E("a{1000}b{1000}c{1000}d{1000}e{1000}f{1000}g{1000}h{1000}i{1000}j{1000}k{1000}"
    "l{1000}m{1000}n{1000}o{1000}p{1000}q{1000}r{1000}s{1000}t{1000}u{1000}", "pattern is too complex"),
  E("\\", "lone backslash"),
  E("a\\", "lone backslash at offset 1"),
  E("\\z", "unsupported escape \\z"),
  E("\\A", "unsupported escape \\A"),
  E("[\\B]", "\\B is not allowed in a character class"),
  E("\\01", "octal escapes are not supported"),
  E("\\x4", "invalid \\x escape"),
  E("\\xZZ", "invalid \\x escape"),
  E("\\u12", "invalid \\u escape"),
  E("\\u{}", "invalid \\u{...} escape"),
  E("\\u{110000}", "above U+10FFFF"),
  E("\\u{FFFFFFFFFFFF}", "above U+10FFFF"),
  E("\\c1", "invalid \\c escape"),
  E("(?x)", "invalid group at offset 0"),
  E("(?<>a)", "invalid group name"),
  E("(?<1a>a)", "invalid group name"),
  E("(?<a", "invalid group name"),
  E("a\xFF", "invalid UTF-8 in pattern at offset 1"),
  E("\xC3", "invalid UTF-8 in pattern at offset 0"),
  E("[\xED\xA0\x80]", "invalid UTF-8 in pattern at offset 1"),
};

static void test_matches(void) {
  size_t i;
  for (i = 0; i < sizeof match_cases / sizeof *match_cases; i++) {
    const match_case *c = &match_cases[i];
    char err[128];
    lre *re = lre_compile(c->pat, c->plen, err, sizeof err);
    CT_CHECK(re != NULL, "row %zu /%s/ failed to compile: %s", i, c->pat, err);
    if (!re) continue;
    CT_CHECK(lre_search(re, c->in, c->ilen) == c->want,
             "row %zu /%s/ against \"%s\": expected %d", i, c->pat, c->in, c->want);
    lre_free(re);
  }
}

static void test_errors(void) {
  size_t i;
  for (i = 0; i < sizeof error_cases / sizeof *error_cases; i++) {
    const error_case *c = &error_cases[i];
    char err[128];
    lre *re = lre_compile(c->pat, c->plen, err, sizeof err);
    CT_CHECK(re == NULL, "/%s/ compiled, expected \"%s\"", c->pat, c->msg);
    lre_free(re);
    CT_CHECK(strstr(err, c->msg) != NULL, "/%s/: expected \"%s\" in \"%s\"", c->pat, c->msg, err);
    CT_CHECK(strchr(err, '\n') == NULL, "/%s/: reason is not one line: \"%s\"", c->pat, err);
  }
}

static char *repeat(const char *unit, size_t n, const char *tail) {
  size_t u = strlen(unit), t = strlen(tail), i;
  char *s = malloc(u * n + t + 1);
  if (!s) return NULL;
  for (i = 0; i < n; i++) memcpy(s + i * u, unit, u);
  memcpy(s + n * u, tail, t + 1);
  return s;
}

static int search_str(const char *pat, const char *s, size_t len) {
  char err[128];
  lre *re = lre_compile(pat, strlen(pat), err, sizeof err);
  int r;
  if (!re) {
    fprintf(stderr, "/%s/: %s\n", pat, err);
    return -2;
  }
  r = lre_search(re, s, len);
  lre_free(re);
  return r;
}

/* Exponential for backtracking engines; here each must just finish. */
static void test_pathological(void) {
  char *s = repeat("a", 30, "b");
  CT_CHECK(s && search_str("(a+)+$", s, strlen(s)) == 0, "(a+)+$ against a...ab");
  CT_CHECK(s && search_str("^(a+)+$", s, strlen(s)) == 0, "^(a+)+$ against a...ab");
  CT_CHECK(s && search_str("^(a|a)*$", s, strlen(s)) == 0, "^(a|a)*$ against a...ab");
  CT_CHECK(s && search_str("^(a*)*c$", s, strlen(s)) == 0, "^(a*)*c$ against a...ab");
  free(s);
  s = repeat("a", 5000, "");
  CT_CHECK(s && search_str("(a|a)*b", s, strlen(s)) == 0, "(a|a)*b against 5000 a's");
  CT_CHECK(s && search_str("(a|aa)+$", s, strlen(s)) == 1, "(a|aa)+$ against 5000 a's");
  free(s);
  s = repeat("x", 5000, "");
  CT_CHECK(s && search_str("(x+x+)+y", s, strlen(s)) == 0, "(x+x+)+y against 5000 x's");
  free(s);
  s = repeat("x", 5000, "y");
  CT_CHECK(s && search_str("(x+x+)+y", s, strlen(s)) == 1, "(x+x+)+y against 5000 x's then y");
  free(s);
  s = repeat("a", 1000, "");
  CT_CHECK(s && search_str("^(a?){500}a{500}$", s, strlen(s)) == 1, "(a?){500}a{500}");
  CT_CHECK(s && search_str("^(.*a){20}b", s, strlen(s)) == 0, "(.*a){20}b");
  free(s);
}

static void test_large_input(void) {
  size_t n = 1u << 20;
  char *s = repeat("ab", n / 2, "");
  CT_CHECK(s && search_str("^(ab)*$", s, n) == 1, "1 MB of ab matches ^(ab)*$");
  CT_CHECK(s && search_str("(a|b)*c", s, n) == 0, "1 MB without c");
  CT_CHECK(s && search_str("^[ab]*$", s, n) == 1, "1 MB class loop");
  CT_CHECK(s && search_str("^b", s, n) == 0, "anchored search stops early");
  CT_CHECK(s && search_str("ba$", s, n) == 0, "1 MB ending in ab");
  CT_CHECK(s && search_str("\\w+\\s", s, n) == 0, "1 MB without white space");
  if (s) s[n - 1] = 'c';
  CT_CHECK(s && search_str("(a|b)*c$", s, n) == 1, "1 MB ending in c");
  free(s);
}

static void test_api(void) {
  char err[8], big[4097];
  lre *re;
  memset(big, 'a', sizeof big);
  re = lre_compile(big, sizeof big, NULL, 0);
  CT_CHECK(re == NULL, "a 4097-byte pattern is rejected with err NULL");
  re = lre_compile(big, sizeof big - 1, NULL, 0);
  CT_CHECK(re != NULL, "a 4096-byte pattern compiles");
  CT_CHECK(re && lre_search(re, big, sizeof big) == 1, "and matches");
  lre_free(re);
  re = lre_compile("(", 1, err, sizeof err);
  CT_CHECK(re == NULL && strlen(err) == sizeof err - 1, "a short err buffer is truncated and terminated");
  memset(err, 'x', sizeof err);
  re = lre_compile("a", 1, err, sizeof err);
  CT_EQ_STR("", err);
  CT_CHECK(re && lre_search(re, NULL, 0) == 0, "an empty input may be NULL");
  lre_free(re);
  re = lre_compile(NULL, 0, err, sizeof err);
  CT_CHECK(re && lre_search(re, "", 0) == 1, "a NULL empty pattern matches");
  lre_free(re);
  lre_free(NULL);
}

static char *nest(int depth) {
  char *s = malloc(2 * (size_t)depth + 2), *p = s;
  int i;
  if (!s) return NULL;
  for (i = 0; i < depth; i++) *p++ = '(';
  *p++ = 'a';
  for (i = 0; i < depth; i++) *p++ = ')';
  *p = '\0';
  return s;
}

static void test_depth(void) {
  char err[128], *ok = nest(100), *deep = nest(101);
  lre *re = ok ? lre_compile(ok, strlen(ok), err, sizeof err) : NULL;
  CT_CHECK(re != NULL, "100 nested groups compile");
  CT_CHECK(re && lre_search(re, "a", 1) == 1, "and match");
  lre_free(re);
  re = deep ? lre_compile(deep, strlen(deep), err, sizeof err) : NULL;
  CT_CHECK(re == NULL && strstr(err, "nested too deeply"), "101 nested groups are rejected: %s", err);
  lre_free(re);
  free(ok);
  free(deep);
  deep = repeat("(", 4000, "");
  re = deep ? lre_compile(deep, strlen(deep), err, sizeof err) : NULL;
  CT_CHECK(re == NULL && strstr(err, "nested too deeply"), "4000 open groups: %s", err);
  free(deep);
  deep = repeat("[", 4000, "");
  re = deep ? lre_compile(deep, strlen(deep), err, sizeof err) : NULL;
  CT_CHECK(re == NULL && strstr(err, "unterminated character class"), "4000 '[': %s", err);
  free(deep);
}

int main(void) {
  test_matches();
  test_errors();
  test_pathological();
  test_large_input();
  test_api();
  test_depth();
  return ct_finish("regex");
}
