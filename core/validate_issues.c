/* What validation found wrong: each violation recorded with its path
   (formatted only once it is known to be kept), and the violations given to
   Lua as a structured error, at once or lazily. */
#include "validateint.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "compat.h"
#include "json.h"
#include "lerror.h"
#include "strbuf.h"

static int is_ident(const char *s, size_t len) {
  if (len == 0 || !(s[0] == '_' || (s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z'))) return 0;
  for (size_t i = 1; i < len; i++)
    if (!(s[i] == '_' || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9')))
      return 0;
  return 1;
}

/* Paths deeper than this show their first and last segments only. */
#define LV_PATH_SHOWN 8

/* Decimal digits of v into out (21 bytes at least); returns their count. */
size_t lv_fmt_int(long long v, char *out) {
  char tmp[24];
  size_t n = 0, len = 0;
  unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
  do { tmp[n++] = (char)('0' + u % 10); u /= 10; } while (u);
  if (v < 0) out[len++] = '-';
  while (n) out[len++] = tmp[--n];
  out[len] = '\0';
  return len;
}

/* Where a path is written: a growable buffer, or a fixed one (sb NULL)
   that sets `over` rather than grow. */
typedef struct lv_out {
  sb_buf *sb;
  char *buf;
  size_t len, cap;
  int over;
} lv_out;

static void out_add(lv_out *o, const char *s, size_t n) {
  if (o->sb) { sb_add(o->sb, s, n); return; }
  if (o->over || n >= o->cap - o->len) { o->over = 1; return; }
  memcpy(o->buf + o->len, s, n);
  o->len += n;
}

/* The path, then a NUL and `text` when text is not NULL. */
static void write_path(lv_ctx *c, const char *text, lv_out *o) {
  out_add(o, c->root, strlen(c->root));
  for (int i = 0; i < c->npath; i++) {
    const lv_seg *s = &c->path[i];
    char num[32];
    if (c->npath > 2 * LV_PATH_SHOWN && i == LV_PATH_SHOWN) {
      size_t n = lv_fmt_int((long long)(c->npath - 2 * LV_PATH_SHOWN), num + 1);
      num[0] = '<';
      out_add(o, num, n + 1);
      out_add(o, " more levels>", 13);
      i = c->npath - LV_PATH_SHOWN - 1;
      continue;
    }
    if (s->raw) {
      out_add(o, s->key, s->len);
    } else if (!s->key) {
      size_t n = lv_fmt_int((long long)s->index, num + 1);
      num[0] = '[';
      num[n + 1] = ']';
      out_add(o, num, n + 2);
    } else if (is_ident(s->key, s->len)) {
      out_add(o, ".", 1);
      out_add(o, s->key, s->len);
    } else if (o->sb) {
      sb_addc(o->sb, '[');
      json_write_string(o->sb, s->key, s->len > 60 ? 60 : s->len);
      sb_addc(o->sb, ']');
    } else {
      o->over = 1;            /* rare: the growable buffer does it */
    }
  }
  if (text) {
    out_add(o, "", 1);
    out_add(o, text, strlen(text));
  }
  if (!o->sb && !o->over) o->buf[o->len] = '\0';
}

/* The path, then a NUL and `text` when text is not NULL: one block, that
   lv_result_free frees through the path. */
static char *render_path_text(lv_ctx *c, const char *text) {
  sb_buf b;
  sb_init(&b);
  lv_out o = { &b, NULL, 0, 0, 0 };
  write_path(c, text, &o);
  char *out = b.failed ? NULL : b.data;
  if (!out) sb_free(&b);
  return out;
}

static char *render_path(lv_ctx *c) { return render_path_text(c, NULL); }

static void free_path(lv_result *r, char *path) {
  if (path != r->inline_text) free(path);
}

static void add_issue(lv_result *r, int warn, char *path, char *text, const char *rule, int seq) {
  lv_issue **list = warn ? &r->warnings : &r->errors;
  int *n = warn ? &r->nwarnings : &r->nerrors;
  if (!warn && *n == 0) {
    *list = &r->inline_error;   /* the first error: nothing to allocate */
  } else if ((*n & (*n - 1)) == 0) {
    /* grow at powers of two */
    int inline_list = *list == &r->inline_error;
    lv_issue *more = realloc(inline_list ? NULL : *list, sizeof **list * (size_t)(*n ? *n * 2 : 1));
    if (!more) { free_path(r, path); return; }
    if (inline_list) more[0] = r->inline_error;
    *list = more;
  }
  (*list)[*n].path = path;
  (*list)[*n].text = text;
  (*list)[*n].rule = rule;
  (*list)[*n].seq = seq;
  (*n)++;
}

/* Whether a broken rule reported now would be recorded (or explain a
   union); when not, *ret is what reporting it returns, and no text needs to
   be made: formatting waits until it is known to be needed. */
int lv_needs_text(lv_ctx *c, int soft, int *ret) {
  int warn = soft && c->output;
  if (c->trial) {
    if (warn) { *ret = 1; return 0; }
    if (c->why && !c->why[0]) return 1;
    c->failed = 1;
    *ret = 0;
    return 0;
  }
  if (!warn && c->r->nerrors >= c->v->lim.max_violations) {
    c->failed = 1;
    *ret = 0;
    return 0;
  }
  return 1;
}

/* Records a broken rule, after needs_text said so; `soft` ones are warnings
   on output. Returns 0 for an error, 1 for a warning. */
int lv_report_text(lv_ctx *c, int soft, const char *rule, const char *text) {
  int warn = soft && c->output;
  if (c->trial) {
    /* explaining why a union member did not fit */
    char *path = render_path(c);
    snprintf(c->why, c->whylen, "%s %s", path ? path : "?", text);
    free(path);
    c->failed = 1;
    return 0;
  }
  /* the first error's path and text go in the result itself when they fit */
  char *path = NULL;
  if (!warn && c->r->nerrors == 0) {
    lv_out o = { NULL, c->r->inline_text, 0, sizeof c->r->inline_text, 0 };
    write_path(c, text, &o);
    if (!o.over) path = c->r->inline_text;
  }
  if (!path) path = render_path_text(c, text);
  char *stored = path ? path + strlen(path) + 1 : NULL;
  int seq = c->r->nerrors + c->r->nwarnings;
  if (warn) {
    add_issue(c->r, 1, path, stored, rule, seq);
    return 1;
  }
  add_issue(c->r, 0, path, stored, rule, seq);
  if (c->r->nerrors >= c->v->lim.max_violations) c->failed = c->r->truncated = 1;
  return 0;
}

int lv_report(lv_ctx *c, int soft, const char *rule, const char *fmt, ...) {
  int ret;
  if (!lv_needs_text(c, soft, &ret)) return ret;
  if (!strchr(fmt, '%')) return lv_report_text(c, soft, rule, fmt);
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return lv_report_text(c, soft, rule, buf);
}

void lv_result_free(lv_result *r) {
  if (!r->errors && !r->warnings) return;
  /* a text lives in its path's block */
  for (int i = 0; i < r->nerrors; i++) free_path(r, r->errors[i].path);
  for (int i = 0; i < r->nwarnings; i++) free_path(r, r->warnings[i].path);
  if (r->errors != &r->inline_error) free(r->errors);
  free(r->warnings);
  r->errors = r->warnings = NULL;
  r->nerrors = r->nwarnings = r->truncated = 0;
}

/* ------------------------------------------------- results as Lua values */

/* One { path, message, rule } at index i of the table on top. */
static void push_issue(lua_State *L, const char *path, const char *text, const char *rule, int i) {
  lua_createtable(L, 0, 3);
  lua_pushstring(L, path ? path : "?");
  lua_setfield(L, -2, "path");
  lua_pushfstring(L, "%s %s", path ? path : "?", text ? text : "is invalid");
  lua_setfield(L, -2, "message");
  if (rule) {
    lua_pushstring(L, rule);
    lua_setfield(L, -2, "rule");
  }
  lua_rawseti(L, -2, i);
}

void lv_push_issues(lua_State *L, const lv_issue *list, int n) {
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) push_issue(L, list[i].path, list[i].text, list[i].rule, i + 1);
}

/* The first violation's message becomes the error's: read from the details at idx. */
static void push_first_message(lua_State *L, int details) {
  lua_getfield(L, details, "violations");
  lua_rawgeti(L, -1, 1);
  lua_getfield(L, -1, "message");
  lua_replace(L, -3);
  lua_pop(L, 1);
}

int lv_push_error(lua_State *L, const char *code, const lv_result *r) {
  lua_createtable(L, 0, 3);
  int details = lua_gettop(L);
  lv_push_issues(L, r->errors, r->nerrors);
  lua_setfield(L, details, "violations");
  if (r->nwarnings) {
    lv_push_issues(L, r->warnings, r->nwarnings);
    lua_setfield(L, details, "warnings");
  }
  if (r->truncated) {
    lua_pushboolean(L, 1);
    lua_setfield(L, details, "truncated");
  }
  /* the message is the first violation's, already built */
  push_first_message(L, details);
  le_push(L, code, lua_tostring(L, -1), 0, details);
  lua_replace(L, details);
  lua_settop(L, details);
  return 1;
}

/* ------------------------------------------------------ the lazy error */

/* A result packed into the lazy error's data: this header, then each error
   and each warning as an lv_packed followed by its path and text with their
   NULs, padded to the alignment of a pointer. */
typedef struct lv_packed_result {
  int nerrors, nwarnings, truncated;
} lv_packed_result;

typedef struct lv_packed {
  const char *rule;           /* a constant of this file */
  int pathlen, textlen;       /* -1: none */
} lv_packed;

#define LV_ALIGN(n) (((n) + sizeof(void *) - 1) & ~(sizeof(void *) - 1))

static size_t packed_size(const lv_issue *e) {
  return LV_ALIGN(sizeof(lv_packed) + (e->path ? strlen(e->path) + 1 : 0) + (e->text ? strlen(e->text) + 1 : 0));
}

static unsigned char *pack_issue(unsigned char *out, const lv_issue *e) {
  lv_packed *k = (lv_packed *)(void *)out;
  unsigned char *at = out + sizeof *k;
  size_t pathlen = e->path ? strlen(e->path) : 0, textlen = e->text ? strlen(e->text) : 0;
  k->rule = e->rule;
  k->pathlen = e->path ? (int)pathlen : -1;
  k->textlen = e->text ? (int)textlen : -1;
  if (e->path) { memcpy(at, e->path, pathlen + 1); at += pathlen + 1; }
  if (e->text) { memcpy(at, e->text, textlen + 1); at += textlen + 1; }
  return out + LV_ALIGN((size_t)(at - out));
}

static const unsigned char *push_packed_issues(lua_State *L, const unsigned char *in, int n) {
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    const lv_packed *k = (const lv_packed *)(const void *)in;
    const char *at = (const char *)(in + sizeof *k);
    const char *path = k->pathlen >= 0 ? at : NULL;
    if (path) at += k->pathlen + 1;
    const char *text = k->textlen >= 0 ? at : NULL;
    if (text) at += k->textlen + 1;
    push_issue(L, path, text, k->rule, i + 1);
    in += LV_ALIGN((size_t)((const unsigned char *)at - in));
  }
  return in;
}

/* le_fill of a validation error: details and message, as lv_push_error makes them. */
static void fill_error(lua_State *L, int err, const void *data) {
  const lv_packed_result *h = data;
  const unsigned char *in = (const unsigned char *)data + LV_ALIGN(sizeof *h);
  luaL_checkstack(L, 8, "building an error");
  lua_createtable(L, 0, 3);
  int details = lua_gettop(L);
  in = push_packed_issues(L, in, h->nerrors);
  lua_setfield(L, details, "violations");
  if (h->nwarnings) {
    push_packed_issues(L, in, h->nwarnings);
    lua_setfield(L, details, "warnings");
  }
  if (h->truncated) {
    lua_pushboolean(L, 1);
    lua_setfield(L, details, "truncated");
  }
  /* a field the caller set before reading any keeps its value */
  lua_pushliteral(L, "message");
  lc_rawget(L, err);
  if (lua_isnil(L, -1)) {
    lua_pushliteral(L, "message");
    push_first_message(L, details);
    lua_rawset(L, err);
  }
  lua_pushliteral(L, "details");
  lc_rawget(L, err);
  if (lua_isnil(L, -1)) {
    lua_pushliteral(L, "details");
    lua_pushvalue(L, details);
    lua_rawset(L, err);
  }
  lua_settop(L, details - 1);
}

int lv_push_lazy_error(lua_State *L, const char *code, const lv_result *r) {
  size_t len = LV_ALIGN(sizeof(lv_packed_result));
  for (int i = 0; i < r->nerrors; i++) len += packed_size(&r->errors[i]);
  for (int i = 0; i < r->nwarnings; i++) len += packed_size(&r->warnings[i]);
  unsigned char *out = le_push_lazy(L, code, 0, fill_error, len);
  lv_packed_result *h = (lv_packed_result *)(void *)out;
  h->nerrors = r->nerrors;
  h->nwarnings = r->nwarnings;
  h->truncated = r->truncated;
  out += LV_ALIGN(sizeof *h);
  for (int i = 0; i < r->nerrors; i++) out = pack_issue(out, &r->errors[i]);
  for (int i = 0; i < r->nwarnings; i++) out = pack_issue(out, &r->warnings[i]);
  return 1;
}
