/*
 * base/json: json_parse and the compact writer. Rows of {document, compact
 * re-serialization} and {bad document, exact error}, then documents built in
 * code (a 100k-key object, nesting at and past the limit, over-long numbers),
 * every truncation of a sample document, parse-write-parse round trips, and
 * parsing under a locale whose decimal point is a comma.
 */
#include <limits.h>
#include <locale.h>
#include <math.h>

#include "ctest.h"
#include "json.h"

#define DEPTH 64               /* max_depth for the table rows */

typedef struct ok_case {
  const char *in;
  size_t len;
  const char *out;             /* jv_write(b, v, 0) */
} ok_case;

typedef struct bad_case {
  const char *in;
  size_t len;
  int depth;
  const char *err;
} bad_case;

/* Lengths from sizeof, so that documents may hold NUL bytes. */
#define OK(i, o) { i, sizeof(i) - 1, o }
#define BAD(i, e) { i, sizeof(i) - 1, DEPTH, e }
#define BAD_DEPTH(i, d, e) { i, sizeof(i) - 1, d, e }

static const ok_case ok_cases[] = {
  /* an escaped NUL in a key is kept (RFC 8259), and written back escaped */
  OK("{\"a\\u0000b\":1}", "{\"a\\u0000b\":1}"),
  OK("{\"\\u0000\":1,\"\":2}", "{\"\\u0000\":1,\"\":2}"),
  /* literals */
  OK("null", "null"),
  OK("true", "true"),
  OK("false", "false"),
  /* integers: exact in 64 bits, JV_NUM beyond */
  OK("0", "0"),
  OK("-1", "-1"),
  OK("42", "42"),
  OK("9007199254740992", "9007199254740992"),
  OK("9007199254740993", "9007199254740993"),          /* 2^53+1 stays exact */
  OK("-9007199254740993", "-9007199254740993"),
  OK("9223372036854775807", "9223372036854775807"),    /* INT64_MAX */
  OK("-9223372036854775808", "-9223372036854775808"),  /* INT64_MIN */
  OK("9223372036854775808", "9.223372036854776e+18"),
  /* past -2^63 by less than 1024: the next double away from zero, not -2^63 */
  OK("-9223372036854775809", "-9.223372036854778e+18"),
  OK("123456789012345678901234567890", "1.2345678901234568e+29"),
  /* other numbers */
  OK("-0", "-0"),
  OK("-0.0", "-0"),
  OK("-0e5", "-0"),
  OK("0.0", "0"),
  OK("0e0", "0"),
  OK("1e3", "1000"),
  OK("1E3", "1000"),
  OK("1e+3", "1000"),
  OK("1.5e-7", "1.5e-07"),
  OK("1.5E-7", "1.5e-07"),
  OK("2.5", "2.5"),
  OK("-2.5", "-2.5"),
  OK("0.1", "0.1"),
  OK("0.30000000000000004", "0.30000000000000004"),
  OK("1e15", "1000000000000000"),
  OK("1e16", "1e+16"),
  OK("9007199254740993.0", "9007199254740992"),
  OK("1.7976931348623157e308", "1.7976931348623157e+308"),
  OK("5e-324", "4.94065645841247e-324"),
  OK("1e-400", "0"),                                   /* underflow is not out of range */
  OK("[1,-1,0.5,-0.5,1e-2,10E-1]", "[1,-1,0.5,-0.5,0.01,1]"),
  /* strings: escapes decoded, written back in the writer's form */
  OK("\"\"", "\"\""),
  OK("\"abc\"", "\"abc\""),
  OK("\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"\\\"\\\\/\\b\\f\\n\\r\\t\""),
  OK("\"\\u0041\\u00e9\\u20AC\"", "\"A\xC3\xA9\xE2\x82\xAC\""),
  OK("\"\\u007F\\u07FF\\u0800\\uFFFF\"", "\"\\u007f\xDF\xBF\xE0\xA0\x80\xEF\xBF\xBF\""),
  OK("\"\\u0001\\u001f\\u0020\"", "\"\\u0001\\u001f \""),
  OK("\"a\\u0000b\"", "\"a\\u0000b\""),
  OK("\"\\uD83D\\uDE00\"", "\"\xF0\x9F\x98\x80\""),
  OK("\"\\ud83d\\ude00\"", "\"\xF0\x9F\x98\x80\""),
  OK("\"\\uD800\\uDC00\"", "\"\xF0\x90\x80\x80\""),    /* U+10000 */
  OK("\"\\uDBFF\\uDFFF\"", "\"\xF4\x8F\xBF\xBF\""),    /* U+10FFFF */
  OK("\"x\\uD834\\uDD1Ey\"", "\"x\xF0\x9D\x84\x9Ey\""),
  OK("\"\xC3\xA9\xE6\x97\xA5\xF0\x9F\x98\x80\xF4\x8F\xBF\xBF\"", "\"\xC3\xA9\xE6\x97\xA5\xF0\x9F\x98\x80\xF4\x8F\xBF\xBF\""),
  OK("\"\xEF\xBF\xBF\xEF\xBB\xBF\"", "\"\xEF\xBF\xBF\xEF\xBB\xBF\""),
  OK("\"\x7F\"", "\"\\u007f\""),
  OK("\"/*not a comment*/\"", "\"/*not a comment*/\""),
  /* containers: order kept, nesting */
  OK("[]", "[]"),
  OK("{}", "{}"),
  OK("[[]]", "[[]]"),
  OK("[{}]", "[{}]"),
  OK("[[[1],[2,[3]]],[]]", "[[[1],[2,[3]]],[]]"),
  OK("{\"b\":1,\"a\":2}", "{\"b\":1,\"a\":2}"),
  OK("{\"a\":{\"b\":{\"c\":[1,[2,[3]]]}}}", "{\"a\":{\"b\":{\"c\":[1,[2,[3]]]}}}"),
  OK("{\"a\":{\"a\":1},\"b\":{\"a\":2}}", "{\"a\":{\"a\":1},\"b\":{\"a\":2}}"),
  OK("{\"\":1}", "{\"\":1}"),
  OK("{\"\\u0041\\n\":1,\"A\":2}", "{\"A\\n\":1,\"A\":2}"),
  OK("{\"a\":1,\"A\":2,\"a \":3}", "{\"a\":1,\"A\":2,\"a \":3}"),
  OK("{\"k1\":1,\"k2\":2,\"k3\":3,\"k4\":4,\"k5\":5,\"k6\":6,\"k7\":7,\"k8\":8,\"k9\":9,\"k10\":10}",
     "{\"k1\":1,\"k2\":2,\"k3\":3,\"k4\":4,\"k5\":5,\"k6\":6,\"k7\":7,\"k8\":8,\"k9\":9,\"k10\":10}"),
  OK("[true,false,null,\"\",0,{},[]]", "[true,false,null,\"\",0,{},[]]"),
  /* whitespace: space, tab, CR, LF around every token */
  OK(" \t\r\n42 \t\r\n", "42"),
  OK("[ 1 , 2 ]", "[1,2]"),
  OK("\n[\n1\n,\n2\n]\n", "[1,2]"),
  OK("\t{\t\"a\"\t:\t[\t]\t,\t\"b\"\t:\t{\t}\t}\t", "{\"a\":[],\"b\":{}}"),
  OK("\r\n{\r\n  \"a\" : 1 ,\r\n  \"b\" : [ true , null ]\r\n}\r\n", "{\"a\":1,\"b\":[true,null]}"),
  OK("[ ]", "[]"),
  OK("{ \n }", "{}"),
};

static const bad_case bad_cases[] = {
  /* nothing, or more than one value */
  BAD("", "empty input at offset 0 (line 1, column 1)"),
  BAD("   \n\t ", "empty input at offset 6 (line 2, column 3)"),
  BAD("1 2", "unexpected '2' at offset 2 (line 1, column 3)"),
  BAD("{} {}", "unexpected '{' at offset 3 (line 1, column 4)"),
  BAD("[]]", "unexpected ']' at offset 2 (line 1, column 3)"),
  BAD("\"a\"\"b\"", "unexpected '\"' at offset 3 (line 1, column 4)"),
  BAD("[1]\0", "unexpected byte 0x00 at offset 3 (line 1, column 4)"),
  BAD("\xEF\xBB\xBF{}", "unexpected byte 0xEF at offset 0 (line 1, column 1)"),
  BAD("\f1", "unexpected byte 0x0C at offset 0 (line 1, column 1)"),
  BAD("\v1", "unexpected byte 0x0B at offset 0 (line 1, column 1)"),
  BAD("\x7F", "unexpected byte 0x7F at offset 0 (line 1, column 1)"),
  /* comments */
  BAD("/* c */ 1", "unexpected '/' at offset 0 (line 1, column 1)"),
  BAD("[1] // c", "unexpected '/' at offset 4 (line 1, column 5)"),
  BAD("[1, /* c */ 2]", "unexpected '/' at offset 4 (line 1, column 5)"),
  BAD("# c\n1", "unexpected '#' at offset 0 (line 1, column 1)"),
  /* trailing and missing commas */
  BAD("[1,2,]", "trailing comma at offset 4 (line 1, column 5)"),
  BAD("[1 , ]", "trailing comma at offset 3 (line 1, column 4)"),
  BAD("{\"a\":1,}", "trailing comma at offset 6 (line 1, column 7)"),
  BAD("[,]", "unexpected ',' at offset 1 (line 1, column 2)"),
  BAD("[1,,2]", "unexpected ',' at offset 3 (line 1, column 4)"),
  BAD("{,}", "unexpected ',' at offset 1 (line 1, column 2)"),
  BAD("[1 2]", "unexpected '2' at offset 3 (line 1, column 4)"),
  /* NaN, Infinity, other words */
  BAD("NaN", "unexpected 'NaN' (a value's words are true, false and null) at offset 0 (line 1, column 1)"),
  BAD("[nan]", "unexpected 'nan' (a value's words are true, false and null) at offset 1 (line 1, column 2)"),
  BAD("Infinity", "unexpected 'Infinity' (a value's words are true, false and null) at offset 0 (line 1, column 1)"),
  BAD("-Infinity", "unexpected 'Infinity' at offset 1 (line 1, column 2)"),
  BAD("True", "unexpected 'True' (a value's words are true, false and null) at offset 0 (line 1, column 1)"),
  BAD("nul", "unexpected end of input at offset 3 (line 1, column 4)"),
  BAD("tru e", "unexpected 'tru' (a value's words are true, false and null) at offset 0 (line 1, column 1)"),
  BAD("nulll", "unexpected 'nulll' (a value's words are true, false and null) at offset 0 (line 1, column 1)"),
  BAD("undefined", "unexpected 'undefined' (a value's words are true, false and null) at offset 0 (line 1, column 1)"),
  /* number grammar */
  BAD("01", "leading zero in number at offset 0 (line 1, column 1)"),
  BAD("-012", "leading zero in number at offset 0 (line 1, column 1)"),
  BAD("[00]", "leading zero in number at offset 1 (line 1, column 2)"),
  BAD("+1", "unexpected '+' at offset 0 (line 1, column 1)"),
  BAD(".5", "unexpected '.' at offset 0 (line 1, column 1)"),
  BAD("-.5", "unexpected '.' at offset 1 (line 1, column 2)"),
  BAD("1.", "unexpected end of input at offset 2 (line 1, column 3)"),
  BAD("[1.]", "unexpected ']' at offset 3 (line 1, column 4)"),
  BAD("1.e3", "unexpected 'e' at offset 2 (line 1, column 3)"),
  BAD("1e", "unexpected end of input at offset 2 (line 1, column 3)"),
  BAD("1e+", "unexpected end of input at offset 3 (line 1, column 4)"),
  BAD("[1e]", "unexpected ']' at offset 3 (line 1, column 4)"),
  BAD("1e+-2", "unexpected '-' at offset 3 (line 1, column 4)"),
  BAD("-", "unexpected end of input at offset 1 (line 1, column 2)"),
  BAD("- 1", "unexpected ' ' at offset 1 (line 1, column 2)"),
  BAD("0x10", "unexpected 'x' at offset 1 (line 1, column 2)"),
  BAD("1_000", "unexpected '_' at offset 1 (line 1, column 2)"),
  BAD("1e400", "number out of range at offset 0 (line 1, column 1)"),
  BAD("[-1e400]", "number out of range at offset 1 (line 1, column 2)"),
  BAD("{\"a\":1.8e308}", "number out of range at offset 5 (line 1, column 6)"),
  /* control characters in strings */
  BAD("\"a\tb\"", "control character 0x09 in string at offset 2 (line 1, column 3)"),
  BAD("\"a\nb\"", "control character 0x0A in string at offset 2 (line 1, column 3)"),
  BAD("\"\x01\"", "control character 0x01 in string at offset 1 (line 1, column 2)"),
  BAD("\"\x1F\"", "control character 0x1F in string at offset 1 (line 1, column 2)"),
  BAD("\"a\0b\"", "control character 0x00 in string at offset 2 (line 1, column 3)"),
  BAD("{\"a\rb\":1}", "control character 0x0D in string at offset 3 (line 1, column 4)"),
  /* invalid UTF-8: bad continuation, stray continuation, truncation */
  BAD("\"\xC3\x28\"", "invalid UTF-8 at offset 1 (line 1, column 2)"),
  BAD("\"\xE2\x28\xA1\"", "invalid UTF-8 at offset 1 (line 1, column 2)"),
  BAD("\"\xF0\x9F\x28\x80\"", "invalid UTF-8 at offset 1 (line 1, column 2)"),
  BAD("\"a\x80\"", "invalid UTF-8 at offset 2 (line 1, column 3)"),
  BAD("\"\xBF\"", "invalid UTF-8 at offset 1 (line 1, column 2)"),
  BAD("\"\xE2\x82\"", "invalid UTF-8 at offset 1 (line 1, column 2)"),
  BAD("\"\xF0\x9F\x98\"", "invalid UTF-8 at offset 1 (line 1, column 2)"),
  BAD("\"\xC3", "unexpected end of input at offset 2 (line 1, column 3)"),
  BAD("\"\xE2\x82", "unexpected end of input at offset 3 (line 1, column 3)"),
  BAD("\"\xF0\x9F\x98", "unexpected end of input at offset 4 (line 1, column 3)"),
  /* overlong encodings */
  BAD("\"\xC0\x80\"", "invalid UTF-8 at offset 1 (line 1, column 2)"),
  BAD("\"\xC1\xBF\"", "invalid UTF-8 at offset 1 (line 1, column 2)"),
  BAD("\"\xE0\x80\x80\"", "invalid UTF-8 at offset 1 (line 1, column 2)"),
  BAD("\"\xE0\x9F\xBF\"", "invalid UTF-8 at offset 1 (line 1, column 2)"),
  BAD("\"\xF0\x80\x80\x80\"", "invalid UTF-8 at offset 1 (line 1, column 2)"),
  BAD("\"\xF0\x8F\xBF\xBF\"", "invalid UTF-8 at offset 1 (line 1, column 2)"),
  BAD("\"\xC0", "invalid UTF-8 at offset 1 (line 1, column 2)"),
  BAD("\"\xE0\x80", "invalid UTF-8 at offset 1 (line 1, column 2)"),
  /* UTF-16 surrogates encoded in UTF-8 */
  BAD("\"\xED\xA0\x80\"", "invalid UTF-8 at offset 1 (line 1, column 2)"),
  BAD("\"\xED\xAF\xBF\xED\xBF\xBF\"", "invalid UTF-8 at offset 1 (line 1, column 2)"),
  BAD("\"\xED\xB0\x80\"", "invalid UTF-8 at offset 1 (line 1, column 2)"),
  BAD("\"\xED\xA0", "invalid UTF-8 at offset 1 (line 1, column 2)"),
  /* above U+10FFFF, and bytes that never appear */
  BAD("\"\xF4\x90\x80\x80\"", "invalid UTF-8 at offset 1 (line 1, column 2)"),
  BAD("\"\xF5\x80\x80\x80\"", "invalid UTF-8 at offset 1 (line 1, column 2)"),
  BAD("\"\xF7\xBF\xBF\xBF\"", "invalid UTF-8 at offset 1 (line 1, column 2)"),
  BAD("\"\xF8\x88\x80\x80\x80\"", "invalid UTF-8 at offset 1 (line 1, column 2)"),
  BAD("\"\xFE\"", "invalid UTF-8 at offset 1 (line 1, column 2)"),
  BAD("\"\xFF\"", "invalid UTF-8 at offset 1 (line 1, column 2)"),
  BAD("\"\xF4\x90", "invalid UTF-8 at offset 1 (line 1, column 2)"),
  BAD("{\"\xC0\x80\":1}", "invalid UTF-8 at offset 2 (line 1, column 3)"),
  BAD("\xC3\xA9", "unexpected byte 0xC3 at offset 0 (line 1, column 1)"),
  /* escapes */
  BAD("\"\\x41\"", "invalid escape '\\x' at offset 1 (line 1, column 2)"),
  BAD("\"\\U0041\"", "invalid escape '\\U' at offset 1 (line 1, column 2)"),
  BAD("\"\\'\"", "invalid escape '\\'' at offset 1 (line 1, column 2)"),
  BAD("\"\\a\"", "invalid escape '\\a' at offset 1 (line 1, column 2)"),
  BAD("\"\\ \"", "invalid escape at offset 1 (line 1, column 2)"),
  BAD("\"\\\x01\"", "invalid escape at offset 1 (line 1, column 2)"),
  BAD("\"\\\xC3\xA9\"", "invalid escape at offset 1 (line 1, column 2)"),
  BAD("\"\\", "unexpected end of input at offset 2 (line 1, column 3)"),
  /* bad \u hex */
  BAD("\"\\u12G4\"", "invalid \\u escape at offset 1 (line 1, column 2)"),
  BAD("\"\\u12\"", "invalid \\u escape at offset 1 (line 1, column 2)"),
  BAD("\"\\u 123\"", "invalid \\u escape at offset 1 (line 1, column 2)"),
  BAD("\"\\u-123\"", "invalid \\u escape at offset 1 (line 1, column 2)"),
  BAD("\"\\uXYZW\"", "invalid \\u escape at offset 1 (line 1, column 2)"),
  BAD("\"ab\\u00", "unexpected end of input at offset 7 (line 1, column 8)"),
  /* lone surrogate escapes */
  BAD("\"\\uD800\"", "lone surrogate \\uD800 at offset 1 (line 1, column 2)"),
  BAD("\"\\uDBFF\"", "lone surrogate \\uDBFF at offset 1 (line 1, column 2)"),
  BAD("\"\\uDC00\"", "lone surrogate \\uDC00 at offset 1 (line 1, column 2)"),
  BAD("\"a\\udfff\"", "lone surrogate \\uDFFF at offset 2 (line 1, column 3)"),
  BAD("\"\\uD800x\"", "lone surrogate \\uD800 at offset 1 (line 1, column 2)"),
  BAD("\"\\uD800\\u0041\"", "lone surrogate \\uD800 at offset 1 (line 1, column 2)"),
  BAD("\"\\uD800\\uD800\"", "lone surrogate \\uD800 at offset 1 (line 1, column 2)"),
  BAD("\"\\uD800\\uE000\"", "lone surrogate \\uD800 at offset 1 (line 1, column 2)"),
  BAD("\"\\uD800\\n\"", "lone surrogate \\uD800 at offset 1 (line 1, column 2)"),
  BAD("\"\\uDC00\\uD800\"", "lone surrogate \\uDC00 at offset 1 (line 1, column 2)"),
  BAD("\"\\uD800\\uDCxx\"", "invalid \\u escape at offset 7 (line 1, column 8)"),
  BAD("\"\\uD800", "unexpected end of input at offset 7 (line 1, column 8)"),
  BAD("\"\\uD800\\", "unexpected end of input at offset 8 (line 1, column 9)"),
  BAD("\"\\uD800\\uDC", "unexpected end of input at offset 11 (line 1, column 12)"),
  /* object keys */
  BAD("{\"a\\u0000b\":1,\"a\\u0000b\":2}", "duplicate key \"a\\u0000b\" (line 1, column 15) at offset 14"),
  BAD("{\"a\":1,\"a\":2}", "duplicate key \"a\" (line 1, column 8) at offset 7"),
  BAD("{\"a\":1,\"\\u0061\":2}", "duplicate key \"a\" (line 1, column 8) at offset 7"),
  BAD("{\"\":1,\"\":2}", "duplicate key \"\" (line 1, column 7) at offset 6"),
  BAD("{\"a\\n\":1,\"a\\n\":2}", "duplicate key \"a\\u000a\" (line 1, column 10) at offset 9"),
  BAD("{\"k1\":1,\"k2\":2,\"k3\":3,\"k4\":4,\"k5\":5,\"k6\":6,\"k7\":7,\"k8\":8,\"k9\":9,\"k1\":0}",
      "duplicate key \"k1\" (line 1, column 65) at offset 64"),
  BAD("{\"k1\":1,\"k2\":2,\"k3\":3,\"k4\":4,\"k5\":5,\"k6\":6,\"k7\":7,\"k8\":8,\"k9\":9,\"k9\":0}",
      "duplicate key \"k9\" (line 1, column 65) at offset 64"),
  BAD("{\"a\":{\"b\":1,\"b\":2}}", "duplicate key \"b\" (line 1, column 13) at offset 12"),
  BAD("{\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\":1,"
      "\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\":2}",
      "duplicate key \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...\" (line 1, column 75) at offset 74"),
  BAD("{a:1}", "unexpected 'a' at offset 1 (line 1, column 2)"),
  BAD("{1:1}", "unexpected '1' at offset 1 (line 1, column 2)"),
  BAD("{'a':1}", "unexpected ''' at offset 1 (line 1, column 2)"),
  BAD("{\"a\" 1}", "unexpected '1' at offset 5 (line 1, column 6)"),
  BAD("{\"a\"}", "unexpected '}' at offset 4 (line 1, column 5)"),
  BAD("{\"a\":}", "unexpected '}' at offset 5 (line 1, column 6)"),
  BAD("{\"a\"::1}", "unexpected ':' at offset 5 (line 1, column 6)"),
  /* brackets */
  BAD("[", "unexpected end of input at offset 1 (line 1, column 2)"),
  BAD("]", "unexpected ']' at offset 0 (line 1, column 1)"),
  BAD("[1}", "unexpected '}' at offset 2 (line 1, column 3)"),
  BAD("{\"a\":1]", "unexpected ']' at offset 6 (line 1, column 7)"),
  BAD("[{]}", "unexpected ']' at offset 2 (line 1, column 3)"),
  BAD("{\"a\":1", "unexpected end of input at offset 6 (line 1, column 7)"),
  BAD("\"abc", "unexpected end of input at offset 4 (line 1, column 5)"),
  /* nesting */
  BAD_DEPTH("[]", 0, "nesting deeper than 0 at offset 0 (line 1, column 1)"),
  BAD_DEPTH("{}", 0, "nesting deeper than 0 at offset 0 (line 1, column 1)"),
  BAD_DEPTH("[[1]]", 1, "nesting deeper than 1 at offset 1 (line 1, column 2)"),
  BAD_DEPTH("[[]]", 1, "nesting deeper than 1 at offset 1 (line 1, column 2)"),
  BAD_DEPTH("{\"a\":[{}]}", 2, "nesting deeper than 2 at offset 6 (line 1, column 7)"),
  BAD_DEPTH("[1,[2,[3]]]", 2, "nesting deeper than 2 at offset 6 (line 1, column 7)"),
  BAD_DEPTH("[]", -1, "nesting deeper than 0 at offset 0 (line 1, column 1)"),
};

#define NOK (int)(sizeof ok_cases / sizeof ok_cases[0])
#define NBAD (int)(sizeof bad_cases / sizeof bad_cases[0])

/* The bytes of s as a C literal for failure messages, in a static buffer. */
static const char *shown(const char *s, size_t len) {
  static char out[512];
  size_t n = 0;
  for (size_t i = 0; i < len && n + 8 < sizeof out; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c >= 0x20 && c < 0x7F && c != '\\') out[n++] = (char)c;
    else n += (size_t)snprintf(out + n, sizeof out - n, "\\x%02X", c);
  }
  if (len && n + 8 >= sizeof out) { memcpy(out + n, "...", 3); n += 3; }
  out[n] = '\0';
  return out;
}

/* Parses in[0..len) and returns its compact text (malloc'ed), or NULL with
   the reason in err. */
static char *reserialize(const char *in, size_t len, int depth, char *err, size_t errlen) {
  ar_arena a;
  sb_buf b;
  char *out = NULL;
  ar_init(&a);
  sb_init(&b);
  jv *v = json_parse(&a, in, len, depth, err, errlen);
  if (v) {
    jv_write(&b, v, 0);
    out = malloc(b.len + 1);
    if (out) memcpy(out, sb_str(&b), b.len + 1);
  }
  sb_free(&b);
  ar_free(&a);
  return out;
}

static void test_valid(void) {
  for (int i = 0; i < NOK; i++) {
    const ok_case *c = &ok_cases[i];
    char err[200];
    char *out = reserialize(c->in, c->len, DEPTH, err, sizeof err);
    CT_CHECK(out && strcmp(out, c->out) == 0, "valid row %d <%s>: expected <%s>, got <%s>",
             i, shown(c->in, c->len), c->out, out ? out : err);
    free(out);
  }
}

static void test_invalid(void) {
  for (int i = 0; i < NBAD; i++) {
    const bad_case *c = &bad_cases[i];
    char err[200];
    err[0] = 'X';
    char *out = reserialize(c->in, c->len, c->depth, err, sizeof err);
    CT_CHECK(!out && strcmp(err, c->err) == 0, "invalid row %d <%s>: expected error <%s>, got <%s>",
             i, shown(c->in, c->len), c->err, out ? out : err);
    free(out);
  }
}

/* Node types and values that the compact text alone does not show. */
static void test_values(void) {
  ar_arena a;
  char err[200];
  ar_init(&a);
  jv *v = json_parse(&a, "1", 1, DEPTH, err, sizeof err);
  CT_CHECK(v && v->type == JV_INT && v->i == 1, "1 is the JV_INT 1");
  CT_EQ_STR("", err);
  v = json_parse(&a, "1.0", 3, DEPTH, err, sizeof err);
  CT_CHECK(v && v->type == JV_NUM && v->n == 1.0, "1.0 is the JV_NUM 1");
  v = json_parse(&a, "-0", 2, DEPTH, err, sizeof err);
  CT_CHECK(v && v->type == JV_NUM && v->n == 0 && signbit(v->n), "-0 is a negative zero JV_NUM");
  v = json_parse(&a, "-9223372036854775808", 20, DEPTH, err, sizeof err);
  CT_CHECK(v && v->type == JV_INT && v->i == LLONG_MIN, "INT64_MIN is a JV_INT");
  v = json_parse(&a, "9223372036854775807", 19, DEPTH, err, sizeof err);
  CT_CHECK(v && v->type == JV_INT && v->i == LLONG_MAX, "INT64_MAX is a JV_INT");
  v = json_parse(&a, "9223372036854775808", 19, DEPTH, err, sizeof err);
  CT_CHECK(v && v->type == JV_NUM && v->n == 9223372036854775808.0, "INT64_MAX+1 is a JV_NUM");
  v = json_parse(&a, "9007199254740993", 16, DEPTH, err, sizeof err);
  CT_CHECK(v && v->type == JV_INT && v->i == 9007199254740993LL, "2^53+1 is exact");
  v = json_parse(&a, "1.5e-7", 6, DEPTH, err, sizeof err);
  CT_CHECK(v && v->type == JV_NUM && v->n == 1.5e-7, "1.5e-7 is the double 1.5e-7");

  /* \u0000 inside a string value: the length counts it */
  v = json_parse(&a, "\"a\\u0000b\"", 10, DEPTH, err, sizeof err);
  CT_CHECK(v && v->type == JV_STR && v->len == 3 && memcmp(v->s, "a\0b", 4) == 0,
           "\\u0000 is kept: len %zu", v ? v->len : 0);
  v = json_parse(&a, "[\"\\u0000\",\"\"]", 13, DEPTH, err, sizeof err);
  CT_CHECK(v && v->count == 2 && v->first->len == 1 && v->first->s[0] == '\0' && v->last->len == 0,
           "a string of one NUL and an empty string differ by their length");
  v = json_parse(&a, "{\"k\":\"\\u0000\"}", 14, DEPTH, err, sizeof err);
  CT_CHECK(v && jv_get(v, "k") && jv_get(v, "k")->len == 1, "a NUL is allowed in a member's value");

  /* escapes decode to the bytes they name */
  v = json_parse(&a, "\"\\uD83D\\uDE00\\u00e9\\n\"", 22, DEPTH, err, sizeof err);
  CT_CHECK(v && v->len == 7 && memcmp(v->s, "\xF0\x9F\x98\x80\xC3\xA9\n", 7) == 0,
           "a surrogate pair joins into one 4-byte sequence");

  /* members keep their order and their keys */
  v = json_parse(&a, "{\"z\":1,\"a\":[true,null],\"m\":\"s\"}", 31, DEPTH, err, sizeof err);
  CT_CHECK(v && v->type == JV_OBJ && v->count == 3, "three members");
  if (v && v->count == 3) {
    CT_EQ_STR("z", v->first->key);
    CT_EQ_STR("a", v->first->next->key);
    CT_EQ_STR("m", v->last->key);
    jv *arr = jv_get(v, "a");
    CT_CHECK(arr && arr->type == JV_ARR && arr->count == 2 && arr->first->type == JV_BOOL &&
             arr->first->b == 1 && arr->last->type == JV_NULL, "the array member");
    CT_CHECK(jv_get(v, "m") && jv_get(v, "m")->type == JV_STR, "the string member");
  }

  /* err may be NULL or short; it is cleared on success */
  CT_CHECK(json_parse(&a, "[1,]", 4, DEPTH, NULL, 0) == NULL, "a NULL err is allowed");
  char small[8];
  CT_CHECK(json_parse(&a, "[1,]", 4, DEPTH, small, sizeof small) == NULL, "a short err is allowed");
  CT_EQ_STR("trailin", small);
  strcpy(err, "stale");
  CT_CHECK(json_parse(&a, "[]", 2, DEPTH, err, sizeof err) != NULL, "[] parses");
  CT_EQ_STR("", err);
  CT_CHECK(json_parse(&a, NULL, 0, DEPTH, err, sizeof err) == NULL, "NULL text is empty input");
  CT_EQ_STR("empty input at offset 0 (line 1, column 1)", err);
  ar_free(&a);
}

/* Numbers near JP_NUMBER_MAX (400 characters). */
static void test_long_numbers(void) {
  char buf[600], err[200];
  char *out;

  memset(buf, '7', 500);
  out = reserialize(buf, 500, DEPTH, err, sizeof err);
  CT_CHECK(!out, "a 500-digit integer is refused");
  CT_EQ_STR("number too long at offset 0 (line 1, column 1)", err);
  free(out);

  buf[0] = '[';
  buf[1] = '-';
  memset(buf + 2, '1', 500);
  buf[502] = ']';
  out = reserialize(buf, 503, DEPTH, err, sizeof err);
  CT_CHECK(!out, "a 500-digit negative integer in an array is refused");
  CT_EQ_STR("number too long at offset 1 (line 1, column 2)", err);
  free(out);

  /* "1." then zeros: 400 characters parse, 401 do not */
  buf[0] = '1';
  buf[1] = '.';
  memset(buf + 2, '0', 500);
  out = reserialize(buf, 400, DEPTH, err, sizeof err);
  CT_CHECK(out && strcmp(out, "1") == 0, "a 400-character number parses: %s", out ? out : err);
  free(out);
  out = reserialize(buf, 401, DEPTH, err, sizeof err);
  CT_CHECK(!out, "a 401-character number is refused");
  CT_EQ_STR("number too long at offset 0 (line 1, column 1)", err);
  free(out);

  /* 300 digits fit in a double; 310 do not */
  buf[0] = '1';
  memset(buf + 1, '0', 309);
  out = reserialize(buf, 301, DEPTH, err, sizeof err);
  CT_CHECK(out && strcmp(out, "1e+300") == 0, "1 and 300 zeros is 1e300: %s", out ? out : err);
  free(out);
  out = reserialize(buf, 310, DEPTH, err, sizeof err);
  CT_CHECK(!out, "1 and 309 zeros overflows a double");
  CT_EQ_STR("number out of range at offset 0 (line 1, column 1)", err);
  free(out);
}

static void test_big_object(void) {
  enum { KEYS = 100000 };
  ar_arena a;
  sb_buf b, w;
  char err[200];
  ar_init(&a);
  sb_init(&b);
  sb_init(&w);
  sb_addc(&b, '{');
  for (int i = 0; i < KEYS; i++) sb_printf(&b, "%s\"k%d\":%d", i ? "," : "", i, i);
  size_t open = b.len;
  sb_addc(&b, '}');
  jv *v = json_parse(&a, b.data, b.len, DEPTH, err, sizeof err);
  CT_CHECK(v && v->type == JV_OBJ && v->count == KEYS, "a %d-key object parses: %s", KEYS, v ? "" : err);
  if (v) {
    CT_EQ_STR("k0", v->first->key);
    CT_EQ_STR("k99999", v->last->key);
    jv *m = jv_get(v, "k54321");
    CT_CHECK(m && m->type == JV_INT && m->i == 54321, "member k54321");
    jv_write(&w, v, 0);
    CT_CHECK(w.len == b.len && memcmp(w.data, b.data, b.len) == 0, "the object writes back as it was read");
  }

  /* the same object with one repeated key at the end */
  b.len = open;
  sb_adds(&b, ",\"k77777\":0}");
  CT_CHECK(json_parse(&a, b.data, b.len, DEPTH, err, sizeof err) == NULL, "a late duplicate is found");
  char want[96];
  snprintf(want, sizeof want, "duplicate key \"k77777\" (line 1, column %zu) at offset %zu", open + 2, open + 1);
  CT_EQ_STR(want, err);
  sb_free(&w);
  sb_free(&b);
  ar_free(&a);
}

/* n nested arrays, or n nested objects with member "a", around 0. */
static void nested(sb_buf *b, int n, int obj) {
  for (int i = 0; i < n; i++) sb_adds(b, obj ? "{\"a\":" : "[");
  sb_addc(b, '0');
  for (int i = 0; i < n; i++) sb_addc(b, obj ? '}' : ']');
}

static void test_depth(void) {
  static const int limits[] = { 1, 2, 31, 32, 33, 64, 65, 1000, 100000 };
  for (size_t k = 0; k < sizeof limits / sizeof limits[0]; k++) {
    int max = limits[k];
    for (int obj = 0; obj <= 1; obj++) {
      ar_arena a;
      sb_buf b;
      char err[200], want[120];
      ar_init(&a);
      sb_init(&b);
      nested(&b, max, obj);
      jv *v = json_parse(&a, b.data, b.len, max, err, sizeof err);
      CT_CHECK(v != NULL, "depth %d %s at max_depth %d parses: %s", max, obj ? "objects" : "arrays", max, err);
      /* the innermost value is at the bottom */
      int d = 0;
      while (v && (v->type == JV_ARR || v->type == JV_OBJ)) { v = v->first; d++; }
      CT_CHECK(d == max && v && v->type == JV_INT, "depth %d: walked down %d levels", max, d);
      sb_free(&b);
      nested(&b, max + 1, obj);
      CT_CHECK(json_parse(&a, b.data, b.len, max, err, sizeof err) == NULL, "depth %d+1 is refused", max);
      snprintf(want, sizeof want, "nesting deeper than %d at offset %d (line 1, column %d)", max, obj ? max * 5 : max,
               (obj ? max * 5 : max) + 1);
      CT_EQ_STR(want, err);
      sb_free(&b);
      ar_free(&a);
    }
  }

  /* very deep input against a small limit stops early, with no stack growth */
  ar_arena a;
  sb_buf b;
  char err[200];
  ar_init(&a);
  sb_init(&b);
  nested(&b, 200000, 0);
  CT_CHECK(json_parse(&a, b.data, b.len, DEPTH, err, sizeof err) == NULL, "200000 levels at max_depth 64");
  CT_EQ_STR("nesting deeper than 64 at offset 64 (line 1, column 65)", err);
  sb_free(&b);
  for (int i = 0; i < 100000; i++) sb_addc(&b, '[');
  CT_CHECK(json_parse(&a, b.data, b.len, 1000000, err, sizeof err) == NULL, "100000 unclosed arrays");
  CT_EQ_STR("unexpected end of input at offset 100000 (line 1, column 100001)", err);
  sb_free(&b);
  ar_free(&a);
}

/* Every proper prefix of a document that ends with its closing bracket is
   incomplete; each is copied to a buffer of its exact size, so that a read
   past the end shows under ASan and valgrind. */
static void test_truncation(void) {
  static const char doc[] =
    "{\"name\": \"caf\xC3\xA9 \xE6\x97\xA5 \xF0\x9F\x98\x80\", \"esc\": \"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\uD83D\\uDE00\","
    " \"nums\": [0, -0, 12, -3.25, 6.02e+23, 1E-9, 9223372036854775807],"
    " \"lit\": [true, false, null], \"nest\": {\"a\": [[], {}, [{\"b\": \"\"}]]},\r\n\t\"k\": \"v\"}";
  const size_t len = sizeof doc - 1;
  char err[200], want[120];
  int bad = 0;
  for (size_t k = 0; k < len; k++) {
    char *buf = malloc(k ? k : 1);
    if (!buf) break;
    memcpy(buf, doc, k);
    char *out = reserialize(buf, k, DEPTH, err, sizeof err);
    if (k == 0) snprintf(want, sizeof want, "empty input at offset 0 (line 1, column 1)");
    else {
      /* the line and column (in characters) too */
      long line = 1, col = 1;
      for (size_t i = 0; i < k; i++) {
        if (doc[i] == '\n') { line++; col = 1; }
        else if ((doc[i] & 0xC0) != 0x80) col++;
      }
      snprintf(want, sizeof want, "unexpected end of input at offset %zu (line %ld, column %ld)", k, line, col);
    }
    if (out || strcmp(err, want) != 0) {
      bad++;
      CT_CHECK(0, "prefix of %zu bytes: expected <%s>, got <%s>", k, want, out ? out : err);
    }
    free(out);
    free(buf);
  }
  CT_CHECK(bad == 0, "%d of %zu prefixes misbehaved", bad, len);
  char *out = reserialize(doc, len, DEPTH, err, sizeof err);
  CT_CHECK(out != NULL, "the whole sample parses: %s", err);
  free(out);
}

static const char *const round_trip_docs[] = {
  "null",
  "[true,false]",
  "0",
  "-0",
  "-0.0e-5",
  "1e3",
  "1.5e-7",
  "0.1",
  "-123.456e78",
  "4.9e-324",
  "2.2250738585072014e-308",
  "1.7976931348623157e308",
  "123456789012345678901234567890",
  "9007199254740993",
  "[-9223372036854775808,9223372036854775807,9223372036854775808]",
  "\"\"",
  "\"\\u0000\\u0001\\u001F\\u007f\\\"\\\\\\/\\b\\f\\n\\r\\t\"",
  "\"\\uD83D\\uDE00 \xF0\x9F\x98\x80 \\u00E9 \xC3\xA9 \\u2028\\u2029\"",
  "{\"\":\"\",\" \":\" \"}",
  "{\"\\u00e9\":{\"\\uD83D\\uDE00\":[{\"\\n\":null}]}}",
  "[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]",
  "{\"a\":1,\"b\":2,\"c\":3,\"d\":4,\"e\":5,\"f\":6,\"g\":7,\"h\":8,\"i\":9,\"j\":[0.5,-0.25]}",
  " { \"type\" : \"object\" , \"properties\" : { \"x\" : { \"minimum\" : -1.5 } } , \"required\" : [ \"x\" ] } ",
};

static void test_round_trip(void) {
  const int n = (int)(sizeof round_trip_docs / sizeof round_trip_docs[0]);
  for (int i = -NOK; i < n; i++) {
    const char *doc = i < 0 ? ok_cases[i + NOK].in : round_trip_docs[i];
    size_t len = i < 0 ? ok_cases[i + NOK].len : strlen(doc);
    char err[200];
    char *once = reserialize(doc, len, DEPTH, err, sizeof err);
    CT_CHECK(once != NULL, "round trip <%s> parses: %s", shown(doc, len), err);
    if (!once) continue;
    char *twice = reserialize(once, strlen(once), DEPTH, err, sizeof err);
    CT_CHECK(twice && strcmp(once, twice) == 0, "round trip <%s>: <%s> then <%s>",
             shown(doc, len), once, twice ? twice : err);
    free(twice);
    free(once);
  }
}

/* strtod follows LC_NUMERIC; JSON's decimal point is '.' in every locale. */
static void test_locale(void) {
  static const char *const names[] = { "de_DE.UTF-8", "fr_FR.UTF-8" };
  const char *name = NULL;
  for (size_t i = 0; i < sizeof names / sizeof names[0] && !name; i++)
    if (setlocale(LC_NUMERIC, names[i])) name = names[i];
  if (!name) {
    printf("json: locale checks skipped: neither de_DE.UTF-8 nor fr_FR.UTF-8 is installed\n");
    return;
  }
  CT_EQ_STR(",", localeconv()->decimal_point);
  ar_arena a;
  char err[200];
  ar_init(&a);
  jv *v = json_parse(&a, "1.5", 3, DEPTH, err, sizeof err);
  CT_CHECK(v && v->type == JV_NUM && v->n == 1.5, "1.5 under %s: %s", name, v ? "wrong value" : err);
  CT_CHECK(json_parse(&a, "1,5", 3, DEPTH, err, sizeof err) == NULL, "1,5 under %s", name);
  CT_EQ_STR("unexpected ',' at offset 1", err);
  ar_free(&a);
  char *out = reserialize("[1.5,-2.25e3,0.1,1e-7]", 22, DEPTH, err, sizeof err);
  CT_CHECK(out && strcmp(out, "[1.5,-2250,0.1,1e-07]") == 0, "written under %s: %s", name, out ? out : err);
  free(out);
  setlocale(LC_NUMERIC, "C");
}

int main(void) {
  test_valid();
  test_invalid();
  test_values();
  test_long_numbers();
  test_big_object();
  test_depth();
  test_truncation();
  test_round_trip();
  test_locale();
  return ct_finish("json");
}
