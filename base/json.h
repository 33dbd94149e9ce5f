/*
 * JSON values built in C (JSON Schemas, tool declarations) as a small tree
 * that keeps the order members were added in, and the writer for JSON text.
 * Lua-free; the nodes live in an arena.
 */
#ifndef LUMA_JSON_H
#define LUMA_JSON_H

#include <stddef.h>

#include "arena.h"
#include "strbuf.h"

typedef enum { JV_NULL, JV_BOOL, JV_INT, JV_NUM, JV_STR, JV_ARR, JV_OBJ } jv_type;

typedef struct jv {
  jv_type type;
  int b;
  long long i;
  double n;
  const char *s;              /* JV_STR (may hold NUL bytes) */
  size_t len;
  const char *key;            /* set when the node is an object member; NUL-terminated, */
  size_t keylen;              /* and may hold NUL bytes (a parsed "\u0000"): keylen says */
  struct jv *first, *last;    /* JV_ARR items, JV_OBJ members */
  int count;
  struct jv *next;
} jv;

jv *jv_null(ar_arena *a);
jv *jv_bool(ar_arena *a, int b);
jv *jv_int(ar_arena *a, long long i);
jv *jv_num(ar_arena *a, double n);
/* jv_str and jv_cstr keep the pointer: s must live as long as the tree
   (jv_strcopy copies it into the arena). */
jv *jv_str(ar_arena *a, const char *s, size_t len);
jv *jv_strcopy(ar_arena *a, const char *s, size_t len);
jv *jv_cstr(ar_arena *a, const char *s);
jv *jv_arr(ar_arena *a);
jv *jv_obj(ar_arena *a);
/* Appends; both return the container, and ignore a NULL value or container. */
jv *jv_push(jv *arr, jv *v);
jv *jv_set(jv *obj, const char *key, jv *v);
/* jv_set with a key of keylen bytes, which may hold NUL. */
jv *jv_setn(jv *obj, const char *key, size_t keylen, jv *v);
/* The member whose key is exactly key (a C string). */
jv *jv_get(const jv *obj, const char *key);

/*
 * Parses JSON text (RFC 8259, strict: no comments, trailing commas, NaN or
 * Infinity, no bytes after the value but whitespace) into a tree in the
 * arena. Integers that fit in 64 bits become JV_INT (exactly), other numbers
 * JV_NUM (finite; 1e400 is an error); strings are valid UTF-8 with escapes
 * decoded and surrogate pairs joined, in keys too (an escaped NUL is kept:
 * see keylen); a duplicate key in an object is an error. Nesting deeper than max_depth is an error, never a stack overflow.
 * On failure returns NULL and writes a one-line reason with the byte offset
 * into err, e.g. "unexpected ',' at offset 17".
 */
jv *json_parse(ar_arena *a, const char *text, size_t len, int max_depth, char *err, size_t errlen);

/* Writes v as JSON text; indent > 0 pretty-prints with that many spaces. */
void jv_write(sb_buf *b, const jv *v, int indent);
/* JSON string literal for s[0..len), with quotes. */
void json_write_string(sb_buf *b, const char *s, size_t len);
/* The shortest text that reads back as the same double, with '.' as the
   decimal point whatever the locale; integral values print without ".0".
   Returns 0 for NaN and infinities, which JSON cannot hold. */
int json_format_number(double d, char out[40]);

#endif
