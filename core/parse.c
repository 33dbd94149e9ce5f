#include "parse.h"

#include <stdio.h>
#include <string.h>

#include "lex.h"
#include "luma_limits.h"
#include "map.h"

#define PS_LOOKAHEAD 5

typedef struct ps_state {
  lx_state lx;
  lx_token buf[PS_LOOKAHEAD];  /* buf[0] is the current token */
  int nbuf;
  const char *src;
  ar_arena *a;
  dg_list *diag;
  int failed;                  /* an error was reported; unwinding to a recovery point */
  int nest;                    /* open brackets of any kind consumed so far */
  int depth, max_depth;        /* recursion depth, bounded */
  int interp;                  /* string literals are templates (statement context) */
} ps_state;

static void fill(ps_state *p, int n) {
  while (p->nbuf < n) p->buf[p->nbuf++] = lx_next(&p->lx);
}

static const lx_token *peek(ps_state *p, int k) {
  fill(p, k + 1);
  return &p->buf[k];
}

#define TOK (&p->buf[0])

static void next(ps_state *p) {
  switch (TOK->kind) {
    case TK_LBRACE: case TK_LPAREN: case TK_LBRACKET: p->nest++; break;
    case TK_RBRACE: case TK_RPAREN: case TK_RBRACKET: if (p->nest > 0) p->nest--; break;
    default: break;
  }
  if (TOK->kind == TK_EOF) return;
  memmove(&p->buf[0], &p->buf[1], sizeof(lx_token) * (size_t)(p->nbuf - 1));
  p->nbuf--;
  fill(p, 1);
}

static ast_pos pos_of(const lx_token *t) {
  ast_pos pos = { t->line, t->col };
  return pos;
}

static int is_kw(ps_state *p, const lx_token *t, const char *kw) {
  size_t n = strlen(kw);
  return t->kind == TK_NAME && t->len == n && memcmp(p->src + t->start, kw, n) == 0;
}

static int at(ps_state *p, lx_kind k) { return TOK->kind == k; }
static int at_kw(ps_state *p, const char *kw) { return is_kw(p, TOK, kw); }

/* Words with a meaning in statements; they cannot name variables. */
static int is_reserved(ps_state *p, const lx_token *t) {
  static const char *const words[] = {
    "if", "else", "try", "catch", "return", "tool", "ask", "true", "false", "null",
    "and", "or", "not", NULL
  };
  for (int i = 0; words[i]; i++)
    if (is_kw(p, t, words[i])) return 1;
  return 0;
}

static void describe(ps_state *p, const lx_token *t, char *out, size_t n) {
  switch (t->kind) {
    case TK_NAME: case TK_INT: case TK_FLOAT: {
      size_t len = t->len > 40 ? 40 : t->len;
      snprintf(out, n, "'%.*s'", (int)len, p->src + t->start);
      break;
    }
    case TK_STRING: snprintf(out, n, "a string"); break;
    default: snprintf(out, n, "%s", lx_kind_name(t->kind)); break;
  }
}

/* Reports at the current token, unless an error is already being unwound. */
static void error_at(ps_state *p, const lx_token *t, const char *what) {
  if (p->failed) return;
  p->failed = 1;
  if (t->kind == TK_ERROR) return; /* the lexer already said what is wrong */
  char found[64];
  describe(p, t, found, sizeof found);
  dg_error(p->diag, t->line, t->col, "%s, found %s", what, found);
}

static void error_msg(ps_state *p, ast_pos pos, const char *msg) {
  if (p->failed) return;
  p->failed = 1;
  dg_error(p->diag, pos.line, pos.col, "%s", msg);
}

static int expect(ps_state *p, lx_kind k, const char *what) {
  if (p->failed) return 0;
  if (TOK->kind == k) { next(p); return 1; }
  error_at(p, TOK, what);
  return 0;
}

static const char *take_name(ps_state *p, const char *what) {
  if (p->failed) return NULL;
  if (TOK->kind != TK_NAME) { error_at(p, TOK, what); return NULL; }
  const char *s = ar_strndup(p->a, p->src + TOK->start, TOK->len);
  next(p);
  return s;
}

static int enter(ps_state *p) {
  if (++p->depth > p->max_depth) {
    if (!p->failed) {
      p->failed = 1;
      dg_error(p->diag, TOK->line, TOK->col, "nesting is too deep (more than %d levels)", p->max_depth);
    }
    return 0;
  }
  return 1;
}

static void leave(ps_state *p) { p->depth--; }

/*
 * Error recovery: skips to the next item of the block that is open at nesting
 * `level`: a token that starts a new line at that level, a ';' or ',' there, or
 * the block's closer, which is left for the block to consume. When the
 * failed item consumed nothing (it starts at item_start), at least one token
 * is skipped so that the caller's loop always moves on.
 */
static void recover(ps_state *p, int level, lx_kind closer, size_t item_start) {
  if (TOK->start == item_start && TOK->kind != TK_EOF && !(p->nest <= level && TOK->kind == closer))
    next(p);
  while (TOK->kind != TK_EOF) {
    int here = p->nest <= level;
    if (here && TOK->kind == closer) break;
    if (here && TOK->nl_before) break;
    if (here && (TOK->kind == TK_SEMI || TOK->kind == TK_COMMA)) { next(p); break; }
    if (p->nest < level) break;
    next(p);
  }
  p->failed = 0;
}

/* After a statement or entry: the next one must start on a new line or after ';'. */
static void end_of_item(ps_state *p, const char *what) {
  if (!p->failed && !at(p, TK_RBRACE) && !at(p, TK_EOF) && !at(p, TK_SEMI) && !at(p, TK_COMMA) &&
      !TOK->nl_before)
    error_at(p, TOK, what);
}

/* The keywords that open a declaration or a statement, and those that
   follow a block: what a misspelled one was meant to be. */
static const char *const opening_keywords[] = { "schema", "tool", "agent", "model", "provider_tool", "mcp_server", "if", "try", "return" };
static const char *const following_keywords[] = { "else", "catch" };

/* After a statement, as end_of_item; but a statement that is a bare name
   with more on its line ("shema A {", "retrun x") is a misspelled opening
   keyword, and a name right after a block one that follows blocks ("esle"):
   "Unknown keyword" with the nearest, at the word. */
static void end_of_stmt(ps_state *p, const ast_stmt *s) {
  if (p->failed || at(p, TK_RBRACE) || at(p, TK_EOF) || at(p, TK_SEMI) || at(p, TK_COMMA) || TOK->nl_before)
    return;
  const char *near = NULL, *word = NULL;
  char stray[64];
  ast_pos pos = pos_of(TOK);
  if (s && s->kind == ST_EXPR && s->expr && s->expr->kind == EX_NAME) {
    word = s->expr->str.s;
    pos = s->expr->pos;
    near = dg_suggest(word, opening_keywords, (int)(sizeof opening_keywords / sizeof *opening_keywords));
  } else if (at(p, TK_NAME) && TOK->len < sizeof stray) {
    snprintf(stray, sizeof stray, "%.*s", (int)TOK->len, p->src + TOK->start);
    word = stray;
    near = dg_suggest(word, following_keywords, (int)(sizeof following_keywords / sizeof *following_keywords));
  }
  if (!near || strcmp(near, word) == 0 || at(p, TK_ERROR)) {
    error_at(p, TOK, "expected a line break or ';' after the statement");
    return;
  }
  p->failed = 1;
  dg_error(p->diag, pos.line, pos.col, "Unknown keyword '%s'. Did you mean '%s'?", word, near);
}

static void *node(ps_state *p, size_t size) { return ar_alloc(p->a, size); }

static ast_expr *new_expr(ps_state *p, ex_kind k, ast_pos pos) {
  ast_expr *e = node(p, sizeof *e);
  if (e) { e->kind = k; e->pos = pos; }
  return e;
}

/* ---------------------------------------------------------------- types */

static ast_field *parse_fields(ps_state *p, lx_kind closer);

static ast_type *parse_type(ps_state *p) {
  if (p->failed || !enter(p)) return NULL;
  ast_type *t = node(p, sizeof *t);
  if (!t) { leave(p); return NULL; }
  t->pos = pos_of(TOK);
  static const struct { const char *name; ty_kind kind; } builtins[] = {
    { "string", TY_STRING }, { "int", TY_INT }, { "float", TY_FLOAT },
    { "bool", TY_BOOL }, { "any", TY_ANY }
  };
  if (at(p, TK_NAME)) {
    int done = 0;
    for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++)
      if (at_kw(p, builtins[i].name)) { t->kind = builtins[i].kind; next(p); done = 1; break; }
    if (!done && at_kw(p, "enum") && peek(p, 1)->kind == TK_LBRACKET) {
      t->kind = TY_ENUM;
      next(p);
      next(p);
      int cap = 4;
      t->values = ar_alloc(p->a, sizeof(ast_str) * (size_t)cap);
      while (!p->failed && !at(p, TK_RBRACKET)) {
        if (!at(p, TK_STRING)) { error_at(p, TOK, "expected a string in enum[...]"); break; }
        size_t len;
        char *s = lx_decode_string(p->src, TOK->start, TOK->len, TOK->line, TOK->col, p->a, p->diag, &len);
        if (!s) { p->failed = 1; break; }
        if (t->nvalues == cap) {
          ast_str *more = ar_alloc(p->a, sizeof(ast_str) * (size_t)cap * 2);
          if (!more) { p->failed = 1; break; }
          memcpy(more, t->values, sizeof(ast_str) * (size_t)cap);
          t->values = more;
          cap *= 2;
        }
        t->values[t->nvalues].s = s;
        t->values[t->nvalues].len = len;
        t->nvalues++;
        next(p);
        if (!at(p, TK_COMMA)) break;
        next(p);
      }
      expect(p, TK_RBRACKET, "expected ']' to close enum[...]");
      if (!p->failed && t->nvalues == 0) error_msg(p, t->pos, "enum[...] needs at least one value");
    } else if (!done) {
      t->kind = TY_NAME;
      t->name = take_name(p, "expected a type");
    }
  } else if (at(p, TK_LBRACE)) {
    /* an inline record: parsed so that the rule rejecting it can say so */
    t->kind = TY_INLINE;
    next(p);
    parse_fields(p, TK_RBRACE);
    expect(p, TK_RBRACE, "expected '}' to close the inline type");
  } else if (at(p, TK_LBRACKET)) {
    error_msg(p, t->pos, "array types are written T[], as in string[]");
  } else {
    error_at(p, TOK, "expected a type");
  }
  while (!p->failed && at(p, TK_LBRACKET) && peek(p, 1)->kind == TK_RBRACKET) {
    ast_type *arr = node(p, sizeof *arr);
    if (!arr) { p->failed = 1; break; }
    arr->kind = TY_ARRAY;
    arr->pos = t->pos;
    arr->elem = t;
    t = arr;
    next(p);
    next(p);
  }
  leave(p);
  return p->failed ? NULL : t;
}

/* ---------------------------------------------------------- expressions */

static ast_expr *parse_expr(ps_state *p);

static ast_expr *parse_template(ps_state *p, const lx_token *t);

static ast_expr *parse_string(ps_state *p) {
  lx_token t = *TOK;
  next(p);
  if (p->interp) return parse_template(p, &t);
  ast_expr *e = new_expr(p, EX_STRING, pos_of(&t));
  if (!e) return NULL;
  e->str.s = lx_decode_string(p->src, t.start, t.len, t.line, t.col, p->a, p->diag, &e->str.len);
  if (!e->str.s) { p->failed = 1; return NULL; }
  return e;
}

/* Appends a literal part src[from..to) that begins at line/col. */
static int template_text(ps_state *p, ast_expr ***tail, size_t from, size_t to, int line, int col,
                         int *nparts) {
  if (to <= from) return 1;
  ast_pos pos = { line, col };
  ast_expr *e = new_expr(p, EX_STRING, pos);
  if (!e) return 0;
  /* decode as if the part were its own string: its opening quote is at col-1 */
  e->str.s = lx_decode_string(p->src, from, to - from, line, col - 1, p->a, p->diag, &e->str.len);
  if (!e->str.s) { p->failed = 1; return 0; }
  **tail = e;
  *tail = &e->next;
  (*nparts)++;
  return 1;
}

/* "Stats: {stats}, bonus: {bonus}" becomes text and expression parts. */
static ast_expr *parse_template(ps_state *p, const lx_token *t) {
  ast_expr *tpl = new_expr(p, EX_TEMPLATE, pos_of(t));
  if (!tpl) return NULL;
  ast_expr **tail = &tpl->items;
  const char *s = p->src;
  size_t i = t->start, end = t->start + t->len, text = i;
  int line = t->line, col = t->col + 1, text_line = line, text_col = col;
  int has_expr = 0;
  while (i < end) {
    unsigned char c = (unsigned char)s[i];
    if (c == '\\' && i + 1 < end) {
      i += 2;
      col += 2;
      continue;
    }
    if (c != '{') {
      if (c == '\n') { line++; col = 1; }
      else if ((c & 0xC0) != 0x80) col++;
      i++;
      continue;
    }
    if (!template_text(p, &tail, text, i, text_line, text_col, &tpl->nitems)) return NULL;
    int open_line = line, open_col = col;
    size_t j = i + 1;
    int depth = 1, jl = line, jc = col + 1;
    while (j < end && depth > 0) {
      unsigned char d = (unsigned char)s[j];
      if (d == '{') depth++;
      else if (d == '}' && --depth == 0) break;
      if (d == '\n') { jl++; jc = 1; }
      else if ((d & 0xC0) != 0x80) jc++;
      j++;
    }
    ast_pos open = { open_line, open_col };
    if (depth > 0) { error_msg(p, open, "unclosed '{' in string (write \\{ for a literal brace)"); return NULL; }
    ps_state sub;
    memset(&sub, 0, sizeof sub);
    sub.src = p->src;
    sub.a = p->a;
    sub.diag = p->diag;
    sub.depth = p->depth;
    sub.max_depth = p->max_depth;
    sub.interp = 1;
    lx_init(&sub.lx, p->src, i + 1, j, open_line, open_col + 1, p->diag);
    fill(&sub, 1);
    if (sub.buf[0].kind == TK_EOF) { error_msg(p, open, "empty '{}' in string (write \\{ for a literal brace)"); return NULL; }
    ast_expr *e = parse_expr(&sub);
    if (!sub.failed && sub.buf[0].kind != TK_EOF) error_at(&sub, &sub.buf[0], "expected '}' to end the interpolation");
    if (sub.failed || !e) { p->failed = 1; return NULL; }
    *tail = e;
    tail = &e->next;
    tpl->nitems++;
    has_expr = 1;
    i = j + 1;
    line = jl;
    col = jc + 1;
    text = i;
    text_line = line;
    text_col = col;
  }
  if (!template_text(p, &tail, text, end, text_line, text_col, &tpl->nitems)) return NULL;
  if (!has_expr) {
    /* no interpolation: a plain string */
    ast_expr *only = tpl->items;
    if (only) return only;
    ast_expr *e = new_expr(p, EX_STRING, pos_of(t));
    if (e) e->str.s = "";
    return e;
  }
  return tpl;
}

static ast_expr *parse_array(ps_state *p) {
  ast_expr *e = new_expr(p, EX_ARRAY, pos_of(TOK));
  next(p);
  ast_expr **tail = &e->items;
  while (!p->failed && !at(p, TK_RBRACKET)) {
    ast_expr *item = parse_expr(p);
    if (!item) break;
    *tail = item;
    tail = &item->next;
    e->nitems++;
    if (!at(p, TK_COMMA)) break;
    next(p);
  }
  expect(p, TK_RBRACKET, "expected ']' to close the array");
  return p->failed ? NULL : e;
}

static ast_expr *parse_object(ps_state *p) {
  ast_expr *e = new_expr(p, EX_OBJECT, pos_of(TOK));
  next(p);
  ast_prop **tail = &e->props;
  mp_map keys = { 0 };
  while (!p->failed && !at(p, TK_RBRACE)) {
    ast_prop *prop = node(p, sizeof *prop);
    if (!prop) { p->failed = 1; break; }
    prop->pos = pos_of(TOK);
    if (at(p, TK_STRING)) {
      size_t len;
      prop->key = lx_decode_string(p->src, TOK->start, TOK->len, TOK->line, TOK->col, p->a, p->diag, &len);
      if (!prop->key) { p->failed = 1; break; }
      if (strlen(prop->key) != len) { error_msg(p, prop->pos, "an object key cannot contain a NUL character"); break; }
      next(p);
    } else {
      prop->key = take_name(p, "expected a key in the object");
    }
    if (!expect(p, TK_COLON, "expected ':' after the key")) break;
    prop->value = parse_expr(p);
    if (!prop->value) break;
    if (mp_get(&keys, prop->key, strlen(prop->key))) {
      char msg[160];
      snprintf(msg, sizeof msg, "duplicate key '%.100s' in the object", prop->key);
      error_msg(p, prop->pos, msg);
      break;
    }
    mp_put(p->a, &keys, prop->key, strlen(prop->key), prop);
    *tail = prop;
    tail = &prop->next;
    e->nprops++;
    if (!at(p, TK_COMMA)) break;
    next(p);
  }
  expect(p, TK_RBRACE, "expected '}' to close the object");
  return p->failed ? NULL : e;
}

static ast_expr *parse_tool_call(ps_state *p) {
  ast_expr *e = new_expr(p, EX_TOOL, pos_of(TOK));
  next(p);
  e->tool_pos = pos_of(TOK);
  e->tool = take_name(p, "expected the tool's name after 'tool'");
  if (!expect(p, TK_LPAREN, "expected '(' after the tool's name")) return NULL;
  if (!at(p, TK_RPAREN)) {
    e->a = parse_expr(p);
    if (!e->a) return NULL;
  }
  expect(p, TK_RPAREN, "expected ')' after the tool's argument (pass one object)");
  return p->failed ? NULL : e;
}

static ast_expr *parse_postfix(ps_state *p);

static ast_expr *parse_ask(ps_state *p) {
  ast_expr *e = new_expr(p, EX_ASK, pos_of(TOK));
  next(p);
  e->a = parse_postfix(p);
  if (!e->a) return NULL;
  if (!expect(p, TK_ARROW, "expected '->' and a result type after the prompt")) return NULL;
  e->type = parse_type(p);
  if (!e->type) return NULL;
  if (at_kw(p, "using")) {
    next(p);
    if (!at_kw(p, "tool")) { error_at(p, TOK, "expected 'tool' after 'using'"); return NULL; }
    next(p);
    e->tool_pos = pos_of(TOK);
    e->tool = take_name(p, "expected a tool name after 'using tool'");
  }
  return p->failed ? NULL : e;
}

/* ask.citations: the sources the method's last ask's answer cites */
static ast_expr *parse_ask_citations(ps_state *p) {
  ast_expr *e = new_expr(p, EX_ASK_CITATIONS, pos_of(TOK));
  next(p);
  next(p);
  if (!is_kw(p, TOK, "citations")) {
    error_at(p, TOK, "expected 'citations' after 'ask.'");
    return NULL;
  }
  next(p);
  return p->failed ? NULL : e;
}

static ast_expr *parse_primary(ps_state *p) {
  const lx_token *t = TOK;
  ast_pos pos = pos_of(t);
  ast_expr *e;
  switch (t->kind) {
    case TK_INT:
      if (t->int_min) {
        error_msg(p, pos, "integer 9223372036854775808 is too large");
        return NULL;
      }
      e = new_expr(p, EX_INT, pos);
      if (e) e->ival = t->ival;
      next(p);
      return e;
    case TK_FLOAT:
      e = new_expr(p, EX_FLOAT, pos);
      if (e) e->fval = t->fval;
      next(p);
      return e;
    case TK_STRING: return parse_string(p);
    case TK_LBRACKET: return parse_array(p);
    case TK_LBRACE: return parse_object(p);
    case TK_LPAREN: {
      next(p);
      e = parse_expr(p);
      expect(p, TK_RPAREN, "expected ')'");
      return p->failed ? NULL : e;
    }
    case TK_NAME:
      if (is_kw(p, t, "true")) { next(p); return new_expr(p, EX_TRUE, pos); }
      if (is_kw(p, t, "false")) { next(p); return new_expr(p, EX_FALSE, pos); }
      if (is_kw(p, t, "null")) { next(p); return new_expr(p, EX_NULL, pos); }
      if (is_kw(p, t, "tool")) return parse_tool_call(p);
      if (is_kw(p, t, "ask")) return peek(p, 1)->kind == TK_DOT ? parse_ask_citations(p) : parse_ask(p);
      if (is_reserved(p, t)) { error_at(p, t, "expected an expression"); return NULL; }
      e = new_expr(p, EX_NAME, pos);
      if (e) e->str.s = take_name(p, "expected a name");
      return e;
    default:
      error_at(p, t, "expected an expression");
      return NULL;
  }
}

static ast_expr *parse_postfix(ps_state *p) {
  ast_expr *e = parse_primary(p);
  int chain = 0;
  while (e && !p->failed) {
    /* a.b[1].c nests left: each step deepens the tree, as an operator does */
    if ((at(p, TK_DOT) || (at(p, TK_LBRACKET) && !TOK->nl_before)) && !enter(p)) { e = NULL; break; }
    if (at(p, TK_DOT)) {
      chain++;
      ast_expr *f = new_expr(p, EX_FIELD, pos_of(TOK));
      next(p);
      if (!f) { e = NULL; break; }
      f->a = e;
      if (at(p, TK_STAR)) {
        /* srv.* : every tool of an mcp_server, in an agent's tools list */
        f->str.s = "*";
        next(p);
      } else {
        f->str.s = take_name(p, "expected a field name after '.'");
      }
      e = f;
    } else if (at(p, TK_LBRACKET) && !TOK->nl_before) {
      chain++;
      ast_expr *ix = new_expr(p, EX_INDEX, pos_of(TOK));
      next(p);
      if (!ix) { e = NULL; break; }
      ix->a = e;
      ix->b = parse_expr(p);
      expect(p, TK_RBRACKET, "expected ']' after the index");
      e = ix;
    } else {
      break;
    }
  }
  p->depth -= chain;
  return p->failed ? NULL : e;
}

static ast_expr *parse_unary(ps_state *p) {
  if (!enter(p)) return NULL;
  ast_expr *e;
  if (at(p, TK_MINUS) && peek(p, 1)->kind == TK_INT && peek(p, 1)->int_min) {
    /* -9223372036854775808 is one literal: its digits alone do not fit */
    e = new_expr(p, EX_INT, pos_of(TOK));
    if (e) e->ival = peek(p, 1)->ival;
    next(p);
    next(p);
  } else if (at(p, TK_MINUS) || at(p, TK_NOT) || at_kw(p, "not")) {
    e = new_expr(p, EX_UNARY, pos_of(TOK));
    e->op = at(p, TK_MINUS) ? OP_NEG : OP_NOT;
    next(p);
    e->a = parse_unary(p);
    if (!e->a) e = NULL;
  } else {
    e = parse_postfix(p);
  }
  leave(p);
  return p->failed ? NULL : e;
}

/* Binary operator of the current token at a given level, or -1. */
static int binop(ps_state *p, int level) {
  switch (level) {
    case 0: return (at(p, TK_OR) || at_kw(p, "or")) ? OP_OR : -1;
    case 1: return (at(p, TK_AND) || at_kw(p, "and")) ? OP_AND : -1;
    case 2:
      switch (TOK->kind) {
        case TK_EQ: return OP_EQ;
        case TK_NE: return OP_NE;
        case TK_LT: return OP_LT;
        case TK_LE: return OP_LE;
        case TK_GT: return OP_GT;
        case TK_GE: return OP_GE;
        default: return -1;
      }
    case 3: return at(p, TK_PLUS) ? OP_ADD : at(p, TK_MINUS) ? OP_SUB : -1;
    default:
      return at(p, TK_STAR) ? OP_MUL : at(p, TK_SLASH) ? OP_DIV : at(p, TK_PERCENT) ? OP_MOD : -1;
  }
}

/* Levels: or, and, comparison (not chained), additive, multiplicative. The
   levels cost no depth: only what nests in the tree does (an operator, a
   step of a.b[i], and each primary expression: parentheses, lists, objects). */
static ast_expr *parse_binary(ps_state *p, int level) {
  if (level > 4) return parse_unary(p);
  ast_expr *e = parse_binary(p, level + 1);
  int op, chain = 0;
  while (e && !p->failed && (op = binop(p, level)) >= 0) {
    /* a chain a + b + c nests left: each operator deepens the tree, and the
       depth limit is about the tree that everything after the parser walks */
    if (!enter(p)) { e = NULL; break; }
    chain++;
    ast_expr *b = new_expr(p, EX_BINARY, pos_of(TOK));
    next(p);
    if (!b) { e = NULL; break; }
    b->op = (ex_op)op;
    b->a = e;
    b->b = parse_binary(p, level + 1);
    if (!b->b) { e = NULL; break; }
    e = b;
    if (level == 2 && binop(p, 2) >= 0) {
      error_at(p, TOK, "comparisons cannot be chained; use 'and'");
      e = NULL;
    }
  }
  p->depth -= chain;
  return p->failed ? NULL : e;
}

static ast_expr *parse_expr(ps_state *p) {
  if (p->failed) return NULL;
  return parse_binary(p, 0);
}

/* ----------------------------------------------------------- statements */

static ast_stmt *parse_block(ps_state *p);

static ast_stmt *new_stmt(ps_state *p, st_kind k, ast_pos pos) {
  ast_stmt *s = node(p, sizeof *s);
  if (s) { s->kind = k; s->pos = pos; }
  return s;
}

static ast_stmt *parse_stmt(ps_state *p);

static ast_stmt *parse_if(ps_state *p) {
  ast_stmt *s = new_stmt(p, ST_IF, pos_of(TOK));
  next(p);
  s->expr = parse_expr(p);
  if (!s->expr) return NULL;
  s->body = parse_block(p);
  if (p->failed) return NULL;
  if (at_kw(p, "else")) {
    next(p);
    s->has_else = 1;
    if (at_kw(p, "if")) {
      if (!enter(p)) return NULL;
      s->orelse = parse_if(p);
      leave(p);
    } else {
      s->orelse = parse_block(p);
    }
  }
  return p->failed ? NULL : s;
}

static ast_stmt *parse_try(ps_state *p) {
  ast_stmt *s = new_stmt(p, ST_TRY, pos_of(TOK));
  next(p);
  s->body = parse_block(p);
  if (p->failed) return NULL;
  if (!at_kw(p, "catch")) { error_at(p, TOK, "expected 'catch' after the try block"); return NULL; }
  next(p);
  if (at(p, TK_NAME)) {
    if (is_reserved(p, TOK)) { error_at(p, TOK, "expected a variable name after 'catch'"); return NULL; }
    s->catch_pos = pos_of(TOK);
    s->catch_name = take_name(p, "expected a variable name after 'catch'");
  }
  s->orelse = parse_block(p);
  return p->failed ? NULL : s;
}

static ast_stmt *parse_stmt(ps_state *p) {
  int depth = p->depth;           /* restored whatever failed inside */
  if (!enter(p)) { p->depth = depth; return NULL; }
  ast_stmt *s = NULL;
  ast_pos pos = pos_of(TOK);
  if (at_kw(p, "if")) {
    s = parse_if(p);
  } else if (at_kw(p, "try")) {
    s = parse_try(p);
  } else if (at_kw(p, "return")) {
    s = new_stmt(p, ST_RETURN, pos);
    next(p);
    if (!at(p, TK_RBRACE) && !at(p, TK_SEMI) && !at(p, TK_EOF) && !TOK->nl_before)
      s->expr = parse_expr(p);
  } else if (at(p, TK_NAME) && !is_reserved(p, TOK) &&
             (peek(p, 1)->kind == TK_ASSIGN || peek(p, 1)->kind == TK_COLON)) {
    s = new_stmt(p, ST_ASSIGN, pos);
    s->name = take_name(p, "expected a name");
    if (at(p, TK_COLON)) {
      next(p);
      s->type = parse_type(p);
    }
    if (expect(p, TK_ASSIGN, "expected '=' in the assignment"))
      s->expr = parse_expr(p);
  } else if (at_kw(p, "else") || at_kw(p, "catch")) {
    error_at(p, TOK, "expected a statement ('else' and 'catch' follow a block)");
  } else {
    s = new_stmt(p, ST_EXPR, pos);
    s->expr = parse_expr(p);
  }
  p->depth = depth;
  return p->failed ? NULL : s;
}

/* '{' statements '}', recovering from errors statement by statement. */
static ast_stmt *parse_block(ps_state *p) {
  if (!expect(p, TK_LBRACE, "expected '{' to open a block")) return NULL;
  int level = p->nest;
  ast_stmt *first = NULL, **tail = &first;
  while (!at(p, TK_RBRACE) && !at(p, TK_EOF)) {
    size_t start = TOK->start;
    ast_stmt *s = parse_stmt(p);
    end_of_stmt(p, s);
    if (p->failed) {
      recover(p, level, TK_RBRACE, start);
      continue;
    }
    *tail = s;
    tail = &s->next;
    if (at(p, TK_SEMI)) next(p);
  }
  expect(p, TK_RBRACE, "expected '}' to close the block");
  return first;
}

/* ------------------------------------------------------- declarations */

static ast_annot *parse_annotation(ps_state *p) {
  ast_annot *an = node(p, sizeof *an);
  an->pos = pos_of(TOK);
  next(p);
  if (!at(p, TK_NAME) || TOK->nl_before) { error_at(p, TOK, "expected an annotation name after '@'"); return NULL; }
  an->name = take_name(p, "expected an annotation name after '@'");
  if (at(p, TK_LPAREN)) {
    next(p);
    ast_expr **tail = &an->args;
    while (!p->failed && !at(p, TK_RPAREN)) {
      ast_expr *e = parse_expr(p);
      if (!e) break;
      *tail = e;
      tail = &e->next;
      an->nargs++;
      if (!at(p, TK_COMMA)) break;
      next(p);
    }
    expect(p, TK_RPAREN, "expected ')' after the annotation's arguments");
  }
  return p->failed ? NULL : an;
}

static ast_field *parse_field(ps_state *p) {
  ast_field *f = node(p, sizeof *f);
  f->pos = pos_of(TOK);
  f->name = take_name(p, "expected a field name");
  if (!f->name) return NULL;
  if (at(p, TK_QUESTION)) { f->optional = 1; next(p); }
  if (!expect(p, TK_COLON, "expected ':' and a type after the field name")) return NULL;
  f->type = parse_type(p);
  if (!f->type) return NULL;
  ast_annot **tail = &f->annots;
  while (at(p, TK_AT)) {
    ast_annot *an = parse_annotation(p);
    if (!an) return NULL;
    *tail = an;
    tail = &an->next;
  }
  return f;
}

/* Fields up to `closer` (not consumed), separated by ',' ';' or line breaks. */
static ast_field *parse_fields(ps_state *p, lx_kind closer) {
  int level = p->nest;
  ast_field *first = NULL, **tail = &first;
  while (!at(p, closer) && !at(p, TK_EOF)) {
    /* "schema B {" on a line of its own: no field, the next declaration
       (the caller says the '}' is missing) */
    if (closer == TK_RBRACE && TOK->nl_before && peek(p, 1)->kind == TK_NAME &&
        (at_kw(p, "schema") || at_kw(p, "tool") || at_kw(p, "agent") || at_kw(p, "model") || at_kw(p, "provider_tool") || at_kw(p, "mcp_server")))
      break;
    size_t start = TOK->start;
    ast_field *f = parse_field(p);
    if (!p->failed && !at(p, closer) && !at(p, TK_COMMA) && !at(p, TK_SEMI) && !TOK->nl_before)
      error_at(p, TOK, closer == TK_RPAREN ? "expected ',' or ')' after the parameter"
                                           : "expected a line break or ',' after the field");
    if (p->failed) {
      recover(p, level, closer, start);
      continue;
    }
    *tail = f;
    tail = &f->next;
    if (at(p, TK_COMMA) || at(p, TK_SEMI)) next(p);
  }
  return first;
}

static ast_method *parse_method(ps_state *p) {
  ast_method *m = node(p, sizeof *m);
  next(p);
  m->pos = pos_of(TOK);
  m->name = take_name(p, "expected the method's name after 'fn'");
  if (!expect(p, TK_LPAREN, "expected '(' after the method's name")) return NULL;
  m->params = parse_fields(p, TK_RPAREN);
  if (!expect(p, TK_RPAREN, "expected ')' after the parameters")) return NULL;
  if (at(p, TK_ARROW)) {
    next(p);
    m->ret = parse_type(p);
    if (!m->ret) return NULL;
  }
  int saved = p->interp;
  p->interp = 1;
  m->body = parse_block(p);
  p->interp = saved;
  return p->failed ? NULL : m;
}

/* Configuration entries (and, for agents, methods) up to the closing '}'. */
static void parse_body(ps_state *p, ast_decl *d, int allow_methods, int allow_needs) {
  if (!expect(p, TK_LBRACE, "expected '{' to open the body")) return;
  int level = p->nest;
  ast_config **tail = &d->config;
  ast_method **mtail = &d->methods;
  while (!at(p, TK_RBRACE) && !at(p, TK_EOF)) {
    size_t start = TOK->start;
    if (allow_methods && at_kw(p, "fn") && peek(p, 1)->kind == TK_NAME) {
      ast_method *m = parse_method(p);
      if (p->failed) { recover(p, level, TK_RBRACE, start); continue; }
      *mtail = m;
      mtail = &m->next;
      continue;
    }
    ast_config *c = node(p, sizeof *c);
    c->pos = pos_of(TOK);
    if (allow_needs && at_kw(p, "needs") && peek(p, 1)->kind == TK_NAME) {
      c->key = "needs";
      next(p);
      c->needs_name = take_name(p, "expected a name after 'needs'");
      if (expect(p, TK_COLON, "expected ':' and a type after the needs name"))
        c->needs_type = parse_type(p);
    } else {
      if (!at(p, TK_NAME)) {
        error_at(p, TOK, allow_methods ? "expected a configuration key or 'fn'" : "expected a configuration key");
      } else {
        c->key = take_name(p, "expected a configuration key");
        if (expect(p, TK_COLON, "expected ':' after the configuration key"))
          c->value = parse_expr(p);
      }
    }
    end_of_item(p, "expected a line break after the configuration entry");
    if (p->failed) { recover(p, level, TK_RBRACE, start); continue; }
    *tail = c;
    tail = &c->next;
    if (at(p, TK_COMMA) || at(p, TK_SEMI)) next(p);
  }
  expect(p, TK_RBRACE, "expected '}' to close the body");
}

static ast_decl *new_decl(ps_state *p, dc_kind k) {
  ast_decl *d = node(p, sizeof *d);
  d->kind = k;
  d->pos = pos_of(TOK);
  next(p);
  d->name_pos = pos_of(TOK);
  d->name = take_name(p, "expected a name");
  return d;
}

static ast_decl *parse_schema(ps_state *p) {
  ast_decl *d = new_decl(p, DC_SCHEMA);
  if (p->failed) return d;
  if (at(p, TK_ASSIGN)) {
    d->kind = DC_UNION;
    next(p);
    ast_name **tail = &d->members;
    for (;;) {
      ast_name *n = node(p, sizeof *n);
      n->pos = pos_of(TOK);
      n->name = take_name(p, "expected a schema name in the union");
      if (!n->name) break;
      *tail = n;
      tail = &n->next;
      if (!at(p, TK_PIPE)) break;
      next(p);
    }
    if (!p->failed && !at_kw(p, "tagged")) error_at(p, TOK, "expected 'tagged by <field>' after the union's members");
    if (!p->failed) next(p);
    if (!p->failed && !at_kw(p, "by")) error_at(p, TOK, "expected 'by' after 'tagged'");
    if (!p->failed) next(p);
    d->tag_pos = pos_of(TOK);
    d->tag = take_name(p, "expected the tag field's name after 'tagged by'");
    return d;
  }
  ast_pos open = pos_of(TOK);
  if (!expect(p, TK_LBRACE, "expected '{' or '=' after the schema's name")) return d;
  d->fields = parse_fields(p, TK_RBRACE);
  if (!p->failed && !at(p, TK_RBRACE)) {
    /* said where the '{' is, which the reader must close; what follows
       is parsed as if it had been */
    char msg[200];
    if (at(p, TK_EOF))
      snprintf(msg, sizeof msg, "the '{' of schema '%s' is never closed: expected '}' before the end of the file",
               d->name ? d->name : "?");
    else
      snprintf(msg, sizeof msg, "the '{' of schema '%s' is not closed: expected '}' before '%.*s' on line %d",
               d->name ? d->name : "?", (int)(TOK->len > 40 ? 40 : TOK->len), p->src + TOK->start, TOK->line);
    error_msg(p, open, msg);
    p->nest--;
    return d;
  }
  expect(p, TK_RBRACE, "expected '}' to close the schema");
  return d;
}

static ast_decl *parse_tool(ps_state *p) {
  ast_decl *d = new_decl(p, DC_TOOL);
  if (!expect(p, TK_LPAREN, "expected '(' after the tool's name")) return d;
  d->fields = parse_fields(p, TK_RPAREN);
  if (!expect(p, TK_RPAREN, "expected ')' after the parameters")) return d;
  if (!at(p, TK_ARROW)) {
    error_at(p, TOK, "expected '->' and the tool's return schema");
    return d;
  }
  next(p);
  d->ret = parse_type(p);
  if (p->failed) return d;
  parse_body(p, d, 0, 1);
  return d;
}

/* `tool name(` starts a declaration when a parameter (`x:` / `x?:`) or `) ->` follows. */
static int tool_decl_ahead(ps_state *p) {
  if (peek(p, 1)->kind != TK_NAME || peek(p, 2)->kind != TK_LPAREN) return 0;
  const lx_token *t = peek(p, 3);
  if (t->kind == TK_RPAREN) return peek(p, 4)->kind == TK_ARROW;
  if (t->kind != TK_NAME) return 0;
  lx_kind k = peek(p, 4)->kind;
  return k == TK_COLON || k == TK_QUESTION;
}

ast_program *ps_parse(const char *src, size_t len, ar_arena *a, dg_list *diag, int max_depth) {
  ps_state ps, *p = &ps;
  memset(p, 0, sizeof *p);
  p->src = src;
  p->a = a;
  p->diag = diag;
  p->max_depth = max_depth > 0 ? max_depth : LIM_MAX_PARSE_DEPTH;
  /* a byte order mark, as some editors write, is no part of the program */
  size_t bom = len >= 3 && memcmp(src, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
  lx_init(&p->lx, src, bom, len, 1, 1, diag);
  fill(p, 1);
  ast_program *prog = ar_alloc(a, sizeof *prog);
  if (!prog) return NULL;
  ast_decl **dtail = &prog->decls;
  ast_stmt **stail = &prog->stmts;
  while (!at(p, TK_EOF)) {
    if (a->failed) return NULL;
    ast_decl *d = NULL;
    ast_stmt *s = NULL;
    size_t start = TOK->start;
    int errors = diag->count + diag->dropped;
    if (at_kw(p, "schema") && peek(p, 1)->kind == TK_NAME) {
      d = parse_schema(p);
    } else if (at_kw(p, "tool") && tool_decl_ahead(p)) {
      d = parse_tool(p);
    } else if (at_kw(p, "agent") && peek(p, 1)->kind == TK_NAME) {
      d = new_decl(p, DC_AGENT);
      parse_body(p, d, 1, 0);
    } else if (at_kw(p, "model") && peek(p, 1)->kind == TK_NAME) {
      d = new_decl(p, DC_MODEL);
      parse_body(p, d, 0, 0);
    } else if (at_kw(p, "provider_tool") && peek(p, 1)->kind == TK_NAME) {
      d = new_decl(p, DC_PTOOL);
      parse_body(p, d, 0, 0);
    } else if (at_kw(p, "mcp_server") && peek(p, 1)->kind == TK_NAME) {
      d = new_decl(p, DC_MCP);
      parse_body(p, d, 0, 0);
    } else {
      p->interp = 1;
      s = parse_stmt(p);
      p->interp = 0;
      end_of_stmt(p, s);
    }
    if (d && d->name) {
      if (p->failed || diag->count + diag->dropped > errors) d->broken = 1;
      *dtail = d;
      dtail = &d->next;
    }
    if (s && !p->failed) {
      *stail = s;
      stail = &s->next;
    }
    if (p->failed) recover(p, 0, TK_EOF, start);
    else if (at(p, TK_SEMI)) next(p);
  }
  return a->failed ? NULL : prog;
}
