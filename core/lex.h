/*
 * The lexer of the contract language. Identifiers are all TK_NAME: keywords
 * are contextual and recognised by the parser, so `model` or `by` stay valid
 * field names.
 */
#ifndef LUMA_LEX_H
#define LUMA_LEX_H

#include <stddef.h>

#include "diag.h"

typedef enum {
  TK_EOF, TK_ERROR, TK_NAME, TK_INT, TK_FLOAT, TK_STRING,
  TK_LPAREN, TK_RPAREN, TK_LBRACE, TK_RBRACE, TK_LBRACKET, TK_RBRACKET,
  TK_COMMA, TK_SEMI, TK_COLON, TK_DOT, TK_QUESTION, TK_ASSIGN, TK_ARROW, TK_AT, TK_PIPE,
  TK_PLUS, TK_MINUS, TK_STAR, TK_SLASH, TK_PERCENT,
  TK_EQ, TK_NE, TK_LT, TK_LE, TK_GT, TK_GE, TK_AND, TK_OR, TK_NOT
} lx_kind;

typedef struct lx_token {
  lx_kind kind;
  size_t start, len;       /* source span; for TK_STRING the span between the quotes */
  int line, col;
  int nl_before;           /* a line break separates it from the previous token */
  long long ival;          /* TK_INT */
  int int_min;             /* TK_INT 9223372036854775808, only valid after a '-'
                              (ival is then -2^63, the smallest 64-bit integer) */
  double fval;             /* TK_FLOAT */
} lx_token;

typedef struct lx_state {
  const char *src;
  size_t pos, end;         /* lexing src[pos..end) */
  int line, col;
  dg_list *diag;
  int saw_newline;
} lx_state;

/* Lexes src[start..end), which begins at the given line and column. */
void lx_init(lx_state *lx, const char *src, size_t start, size_t end, int line, int col, dg_list *diag);
lx_token lx_next(lx_state *lx);
const char *lx_kind_name(lx_kind k);
/* Decodes the escapes of a string span into arena memory (NUL-terminated,
   may contain NUL bytes; *outlen gets the length). Reports bad escapes in
   diag at their position and returns NULL. */
char *lx_decode_string(const char *src, size_t start, size_t len, int line, int col,
                       ar_arena *a, dg_list *diag, size_t *outlen);

#endif
