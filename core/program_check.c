/* The statement checker: variables, tool calls and asks in the statements of
   agent methods and of the top level. */
#include <string.h>

#include "luma_limits.h"
#include "programint.h"

typedef struct st_ctx {
  pm_ctx *c;
  const pm_agent *agent;      /* NULL at top level */
  int asks;
  mp_map vars;                /* the variables of the scope: assigned anywhere in it, or parameters */
  const char **names;         /* the same, for suggestions */
  int nnames, cap;
} st_ctx;

static void add_var(st_ctx *s, const char *name) {
  if (!name || mp_get(&s->vars, name, strlen(name))) return;
  mp_put(s->c->a, &s->vars, name, strlen(name), (void *)name);
  if (s->nnames == s->cap) {
    int cap = s->cap ? s->cap * 2 : 16;
    const char **names = ar_alloc(s->c->a, sizeof *names * (size_t)cap);
    if (!names) return;
    if (s->nnames) memcpy(names, s->names, sizeof *names * (size_t)s->nnames);
    s->names = names;
    s->cap = cap;
  }
  s->names[s->nnames++] = name;
}

/* Every name a block assigns (or catches), at any depth: a variable read
   anywhere in its scope is known when some statement assigns it (one that
   did not run leaves it null, as documented). */
static void collect_vars(st_ctx *s, const ast_stmt *st, int depth) {
  for (; st && depth <= LIM_CHECK_DEPTH; st = st->next) {
    if (st->kind == ST_ASSIGN) add_var(s, st->name);
    if (st->kind == ST_TRY) add_var(s, st->catch_name);
    collect_vars(s, st->body, depth + 1);
    collect_vars(s, st->orelse, depth + 1);
  }
}

static int agent_allows(const pm_agent *ag, const pm_tool *t) {
  for (int i = 0; i < ag->tools.n; i++)
    if (ag->tools.items[i] == t) return 1;
  return 0;
}

static pm_tool *called_tool(st_ctx *s, const char *name, ast_pos pos) {
  ast_decl *d = pm_lookup(s->c, name);
  if (d && d->kind == DC_TOOL) return d->model;
  ERR(s->c, pos, "Unknown tool '%s'.%s", name, SUGGEST(s->c, name, DC_TOOL));
  return NULL;
}

static void check_expr(st_ctx *s, const ast_expr *e, int depth);

static void check_exprs(st_ctx *s, const ast_expr *e, int depth) {
  for (; e; e = e->next) check_expr(s, e, depth);
}

static void check_expr(st_ctx *s, const ast_expr *e, int depth) {
  if (!e || depth > LIM_CHECK_DEPTH) return;
  switch (e->kind) {
    case EX_TOOL:
      called_tool(s, e->tool, e->tool_pos);
      check_expr(s, e->a, depth + 1);
      break;
    case EX_ASK: {
      s->asks++;
      check_expr(s, e->a, depth + 1);
      if (!s->agent) ERR(s->c, e->pos, "ask can only be used inside an agent method.");
      pm_type *t = pm_resolve_type(s->c, e->type, 0);
      if (t && t->kind != PT_SCHEMA)
        ERR(s->c, e->type->pos, "ask must name a declared schema as its result, not '%s'.", pm_type_text(s->c, e->type));
      if (e->tool) {
        pm_tool *tool = called_tool(s, e->tool, e->tool_pos);
        if (tool && s->agent && !agent_allows(s->agent, tool))
          pm_rule(s->c, e->tool_pos, LE_MSG_USING_TOOL_DENIED, s->agent->name, e->tool);
      }
      break;
    }
    case EX_NAME:
      if (!mp_get(&s->vars, e->str.s, strlen(e->str.s))) {
        /* "ture" is the literal misspelled rather than a variable */
        static const char *const literals[] = { "true", "false", "null" };
        const char *near = dg_suggest(e->str.s, s->names, s->nnames);
        if (!near) near = dg_suggest(e->str.s, literals, 3);
        ERR(s->c, e->pos, "unknown variable '%s'%s%s%s", e->str.s, near ? " (did you mean '" : "", near ? near : "",
            near ? "'?)" : "");
      }
      break;
    case EX_FIELD:
      check_expr(s, e->a, depth + 1);
      break;
    case EX_INDEX: case EX_UNARY: case EX_BINARY:
      check_expr(s, e->a, depth + 1);
      check_expr(s, e->b, depth + 1);
      break;
    case EX_ARRAY: case EX_TEMPLATE:
      check_exprs(s, e->items, depth + 1);
      break;
    case EX_OBJECT:
      for (const ast_prop *q = e->props; q; q = q->next) check_expr(s, q->value, depth + 1);
      break;
    default:
      break;
  }
}

static void check_stmts(st_ctx *s, const ast_stmt *st, int depth) {
  for (; st && depth <= LIM_CHECK_DEPTH; st = st->next) {
    if (st->type) pm_resolve_type(s->c, st->type, 0);
    check_expr(s, st->expr, depth + 1);
    check_stmts(s, st->body, depth + 1);
    check_stmts(s, st->orelse, depth + 1);
  }
}

int pc_check_block(pm_ctx *c, const pm_agent *agent, const ast_field *params, const ast_stmt *body) {
  st_ctx s = { c, agent, 0, { 0 }, NULL, 0, 0 };
  for (const ast_field *f = params; f; f = f->next) add_var(&s, f->name);
  collect_vars(&s, body, 0);
  check_stmts(&s, body, 0);
  return s.asks;
}
