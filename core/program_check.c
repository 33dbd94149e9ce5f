/* The statement checker: variables, tool calls and asks in the statements of
   agent methods and of the top level. */
#include <stdint.h>
#include <string.h>

#include "luma_limits.h"
#include "programint.h"

/* What the walk knows of a variable where it stands: whether some path to
   here assigned it, and the type of its value (null when none did). */
typedef struct st_slot {
  int set;
  vt_type type;
} st_slot;

/* A slot as it was before an assignment, so that a branch can be undone. */
typedef struct st_undo {
  int var;
  st_slot old;
} st_undo;

/* A variable a branch changed: its slot at the branch's end, and the join
   of every value it held in the branch (what a catch block may see). */
typedef struct st_change {
  int var;
  st_slot end, any;
} st_change;

typedef struct st_ctx {
  pm_ctx *c;
  const pm_agent *agent;      /* NULL at top level */
  int asks;
  mp_map vars;                /* name -> index + 1: assigned anywhere in the scope, or parameters */
  const char **names;         /* by index, for suggestions */
  ast_pos *first;             /* by index: the first assignment in the source */
  st_slot *slots;             /* by index */
  int *seen;                  /* by index: the epoch that last saw it, for st_rewind */
  int *where;
  int epoch;
  int nnames, cap;
  st_undo *undo;
  int nundo, undo_cap;
} st_ctx;

static const st_slot UNSET = { 0, { VT_NULL, 0, NULL, NULL } };

static void *grow(ar_arena *a, void *old, size_t size, int n, int cap) {
  void *p = ar_alloc(a, size * (size_t)cap);
  if (p && n) memcpy(p, old, size * (size_t)n);
  return p;
}

static void add_var(st_ctx *s, const char *name, ast_pos pos) {
  if (!name || mp_get(&s->vars, name, strlen(name))) return;
  if (s->nnames == s->cap) {
    int cap = s->cap ? s->cap * 2 : 16;
    const char **names = grow(s->c->a, s->names, sizeof *names, s->nnames, cap);
    ast_pos *first = grow(s->c->a, s->first, sizeof *first, s->nnames, cap);
    st_slot *slots = grow(s->c->a, s->slots, sizeof *slots, s->nnames, cap);
    int *seen = grow(s->c->a, s->seen, sizeof *seen, s->nnames, cap);
    int *where = grow(s->c->a, s->where, sizeof *where, s->nnames, cap);
    if (!names || !first || !slots || !seen || !where) return;
    s->names = names, s->first = first, s->slots = slots, s->seen = seen, s->where = where;
    s->cap = cap;
  }
  if (!mp_put(s->c->a, &s->vars, name, strlen(name), (void *)(intptr_t)(s->nnames + 1))) return;
  s->names[s->nnames] = name;
  s->first[s->nnames] = pos;
  s->slots[s->nnames] = UNSET;
  s->seen[s->nnames] = 0;
  s->nnames++;
}

static int var_index(st_ctx *s, const char *name) {
  if (!name) return -1;
  return (int)(intptr_t)mp_get(&s->vars, name, strlen(name)) - 1;
}

/* Every name a block assigns (or catches), at any depth: a name no
   statement of the scope assigns is an unknown variable. */
static void collect_vars(st_ctx *s, const ast_stmt *st, int depth) {
  for (; st && depth <= LIM_CHECK_DEPTH; st = st->next) {
    if (st->kind == ST_ASSIGN) add_var(s, st->name, st->pos);
    if (st->kind == ST_TRY) add_var(s, st->catch_name, st->catch_pos);
    collect_vars(s, st->body, depth + 1);
    collect_vars(s, st->orelse, depth + 1);
  }
}

static void set_slot(st_ctx *s, int v, st_slot value) {
  if (v < 0) return;
  if (s->nundo == s->undo_cap) {
    int cap = s->undo_cap ? s->undo_cap * 2 : 64;
    st_undo *undo = grow(s->c->a, s->undo, sizeof *undo, s->nundo, cap);
    if (!undo) return;
    s->undo = undo;
    s->undo_cap = cap;
  }
  s->undo[s->nundo].var = v;
  s->undo[s->nundo].old = s->slots[v];
  s->nundo++;
  s->slots[v] = value;
}

static st_slot join(st_slot a, st_slot b) {
  st_slot r = { a.set || b.set, vt_join(a.type, b.type) };
  return r;
}

/* The variables assigned since mark, with their slots, which are then put
   back as they were at mark. */
static st_change *st_rewind(st_ctx *s, int mark, int *n) {
  *n = 0;
  st_change *ch = ar_alloc(s->c->a, sizeof *ch * (size_t)(s->nundo > mark ? s->nundo - mark : 1));
  if (!ch) return NULL;
  s->epoch++;
  for (int i = mark; i < s->nundo; i++) {
    int v = s->undo[i].var;
    if (s->seen[v] != s->epoch) {
      s->seen[v] = s->epoch;
      s->where[v] = *n;
      ch[*n].var = v;
      ch[*n].end = ch[*n].any = s->slots[v];
      (*n)++;
    }
    ch[s->where[v]].any = join(ch[s->where[v]].any, s->undo[i].old);
  }
  for (int i = s->nundo - 1; i >= mark; i--) s->slots[s->undo[i].var] = s->undo[i].old;
  s->nundo = mark;
  return ch;
}

/* After two branches that both started from the slots now held: each
   variable either of them changed holds what one of them left. */
static void st_merge(st_ctx *s, const st_change *a, int na, const st_change *b, int nb) {
  s->epoch++;
  for (int i = 0; i < nb; i++) {
    s->seen[b[i].var] = s->epoch;
    s->where[b[i].var] = i;
  }
  int mark = s->epoch;
  for (int i = 0; i < na; i++) {
    int v = a[i].var;
    st_slot other = s->seen[v] == mark ? b[s->where[v]].end : s->slots[v];
    set_slot(s, v, join(a[i].end, other));
  }
  s->epoch++;
  for (int i = 0; i < na; i++) s->seen[a[i].var] = s->epoch;
  for (int i = 0; i < nb; i++)
    if (s->seen[b[i].var] != s->epoch) set_slot(s, b[i].var, join(b[i].end, s->slots[b[i].var]));
}

static int agent_allows(const pm_agent *ag, const pm_tool *t) {
  for (int i = 0; i < ag->tools.n; i++)
    if (ag->tools.items[i] == t) return 1;
  return 0;
}

static pm_tool *called_tool(st_ctx *s, const char *name, ast_pos pos) {
  ast_decl *d = pm_lookup(s->c, name);
  if (d && d->kind == DC_TOOL) return d->model;
  if (d && d->kind == DC_PTOOL) {
    ERR(s->c, pos, "'%s' is a provider tool: the provider runs it when the model asks, and it cannot be called with tool, nor forced with using tool.", name);
    return NULL;
  }
  pm_tool *t = d ? NULL : pm_find_tool(s->c->p, name);
  if (t && t->mcp) return t;   /* an mcp_server's tool: <server>__<name> */
  ERR(s->c, pos, "Unknown tool '%s'.%s", name, SUGGEST(s->c, name, DC_TOOL));
  return NULL;
}

static const vt_type ANY_VALUE = { VT_UNKNOWN, 0, NULL, NULL };

static vt_type check_expr(st_ctx *s, const ast_expr *e, int depth);

/* e, given for a field of type want (NULL: any) named path, as input
   validation will see it: literals are checked against the type, other
   values by their static type. */
static void check_value(st_ctx *s, const ast_expr *e, const pm_type *want, int required, const char *path,
                        int depth);

static void check_props(st_ctx *s, const ast_expr *obj, const pm_schema *rec, const char *path, int depth) {
  for (const ast_prop *q = obj->props; q; q = q->next) {
    const pm_field *f = vt_input_field(s->c, rec, obj, q, path);
    if (f) check_value(s, q->value, f->type, f->required, ar_printf(s->c->a, "%s.%s", path, q->key), depth + 1);
    else check_expr(s, q->value, depth + 1);
  }
  vt_missing(s->c, rec, obj, obj->pos, path);
}

static void check_value(st_ctx *s, const ast_expr *e, const pm_type *want, int required, const char *path,
                        int depth) {
  if (!e || depth > LIM_CHECK_DEPTH) return;
  if (want && e->kind == EX_OBJECT && want->kind == PT_SCHEMA && !want->schema->is_union) {
    check_props(s, e, want->schema, path, depth);
    return;
  }
  if (want && e->kind == EX_ARRAY && want->kind == PT_ARRAY) {
    int i = 1;
    for (const ast_expr *item = e->items; item; item = item->next, i++)
      check_value(s, item, want->elem, 1, ar_printf(s->c->a, "%s[%d]", path, i), depth + 1);
    return;
  }
  vt_fits(s->c, e, check_expr(s, e, depth), want, required, path);
}

/* The argument of a call to t (NULL: none, an empty object). */
static void check_input(st_ctx *s, const pm_tool *t, const ast_expr *call, int depth) {
  const ast_expr *arg = call->a;
  const pm_schema *in = t->input;
  if (!in) { check_expr(s, arg, depth); return; }
  if (!arg) { vt_missing(s->c, in, NULL, call->pos, in->display); return; }
  if (arg->kind == EX_OBJECT) { check_props(s, arg, in, in->display, depth); return; }
  vt_type have = check_expr(s, arg, depth);
  if (have.kind == VT_NULL || (have.kind != VT_UNKNOWN && have.kind != VT_OBJECT && have.kind != VT_RECORD &&
                               !have.nullable))
    ERR(s->c, arg->pos, "%s must be an object", in->display);
}

static vt_type check_exprs(st_ctx *s, const ast_expr *e, int depth) {
  for (; e; e = e->next) check_expr(s, e, depth);
  return ANY_VALUE;
}

static vt_type check_expr(st_ctx *s, const ast_expr *e, int depth) {
  if (!e || depth > LIM_CHECK_DEPTH) return ANY_VALUE;
  switch (e->kind) {
    case EX_NULL: return vt_kind_of(VT_NULL);
    case EX_TRUE: case EX_FALSE: return vt_kind_of(VT_BOOL);
    case EX_INT: return vt_kind_of(VT_INT);
    case EX_FLOAT: return vt_kind_of(VT_FLOAT);
    case EX_STRING: return vt_kind_of(VT_STRING);
    case EX_TEMPLATE:
      check_exprs(s, e->items, depth + 1);
      return vt_kind_of(VT_STRING);
    case EX_TOOL: {
      pm_tool *t = called_tool(s, e->tool, e->tool_pos);
      if (!t) { check_expr(s, e->a, depth + 1); return ANY_VALUE; }
      check_input(s, t, e, depth + 1);
      vt_type r = { t->output ? VT_RECORD : VT_UNKNOWN, 0, NULL, t->output };
      return r;
    }
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
      return t && t->kind == PT_SCHEMA ? vt_from(t, 0) : ANY_VALUE;
    }
    case EX_ASK_CITATIONS:
      if (!s->agent) ERR(s->c, e->pos, "ask.citations can only be used inside an agent method.");
      return vt_kind_of(VT_ARRAY);
    case EX_NAME: {
      int v = var_index(s, e->str.s);
      if (v < 0) {
        /* "ture" is the literal misspelled rather than a variable */
        static const char *const literals[] = { "true", "false", "null" };
        const char *near = dg_suggest(e->str.s, s->names, s->nnames);
        if (!near) near = dg_suggest(e->str.s, literals, 3);
        ERR(s->c, e->pos, "unknown variable '%s'%s%s%s", e->str.s, near ? " (did you mean '" : "", near ? near : "",
            near ? "'?)" : "");
        return ANY_VALUE;
      }
      if (!s->slots[v].set) {
        ERR(s->c, e->pos, "variable '%s' is read before it is assigned (first assigned at %d:%d)", e->str.s,
            s->first[v].line, s->first[v].col);
        return ANY_VALUE;
      }
      return s->slots[v].type;
    }
    case EX_FIELD:
      if (strcmp(e->str.s, "*") == 0) {
        ERR(s->c, e->pos, "'.*' only lists every tool of an mcp_server, in an agent's tools: [server.*]");
        return ANY_VALUE;
      }
      return vt_field(s->c, e, check_expr(s, e->a, depth + 1));
    case EX_INDEX: {
      vt_type obj = check_expr(s, e->a, depth + 1);
      check_expr(s, e->b, depth + 1);
      return vt_index(s->c, e, obj);
    }
    case EX_UNARY:
      return vt_unary(s->c, e, check_expr(s, e->a, depth + 1));
    case EX_BINARY: {
      vt_type a = check_expr(s, e->a, depth + 1);
      return vt_binary(s->c, e, a, check_expr(s, e->b, depth + 1));
    }
    case EX_ARRAY: {
      check_exprs(s, e->items, depth + 1);
      return vt_kind_of(VT_ARRAY);
    }
    case EX_OBJECT:
      for (const ast_prop *q = e->props; q; q = q->next) check_expr(s, q->value, depth + 1);
      return vt_kind_of(VT_OBJECT);
  }
  return ANY_VALUE;
}

static void check_stmts(st_ctx *s, const ast_stmt *st, int depth);

/* if: the then block and the else block start from the same slots; after
   them a variable holds what either left. */
static void check_if(st_ctx *s, const ast_stmt *st, int depth) {
  check_expr(s, st->expr, depth + 1);
  int mark = s->nundo, nt, ne;
  check_stmts(s, st->body, depth + 1);
  st_change *then = st_rewind(s, mark, &nt);
  check_stmts(s, st->orelse, depth + 1);
  st_change *orelse = st_rewind(s, mark, &ne);
  if (then && orelse) st_merge(s, then, nt, orelse, ne);
}

/* try: the catch block may start after any statement of the try block, so
   a variable there holds any value it held in it; after both, what either
   left. */
static void check_try(st_ctx *s, const ast_stmt *st, int depth) {
  int mark = s->nundo, nt, nc;
  check_stmts(s, st->body, depth + 1);
  st_change *tried = st_rewind(s, mark, &nt);
  if (!tried) return;
  for (int i = 0; i < nt; i++) set_slot(s, tried[i].var, tried[i].any);
  st_slot err = { 1, ANY_VALUE };
  set_slot(s, var_index(s, st->catch_name), err);
  check_stmts(s, st->orelse, depth + 1);
  st_change *caught = st_rewind(s, mark, &nc);
  if (caught) st_merge(s, tried, nt, caught, nc);
}

static void check_stmts(st_ctx *s, const ast_stmt *st, int depth) {
  for (; st && depth <= LIM_CHECK_DEPTH; st = st->next) {
    switch (st->kind) {
      case ST_ASSIGN: {
        pm_type *t = st->type ? pm_resolve_type(s->c, st->type, 0) : NULL;
        vt_type v;
        if (t) {
          check_value(s, st->expr, t, 1, st->name, depth + 1);
          v = vt_from(t, 0);
        } else {
          v = check_expr(s, st->expr, depth + 1);
        }
        st_slot slot = { 1, v };
        set_slot(s, var_index(s, st->name), slot);
        break;
      }
      case ST_IF: check_if(s, st, depth); break;
      case ST_TRY: check_try(s, st, depth); break;
      default: check_expr(s, st->expr, depth + 1); break;
    }
  }
}

int pc_check_block(pm_ctx *c, const pm_agent *agent, const ast_field *params, const pm_schema *input,
                   const ast_stmt *body) {
  st_ctx s;
  memset(&s, 0, sizeof s);
  s.c = c;
  s.agent = agent;
  for (const ast_field *f = params; f; f = f->next) add_var(&s, f->name, f->pos);
  collect_vars(&s, body, 0);
  for (const ast_field *f = params; f; f = f->next) {
    st_slot slot = { 1, ANY_VALUE };
    for (int i = 0; input && i < input->nfields; i++)
      if (strcmp(input->fields[i].name, f->name) == 0) slot.type = vt_from(input->fields[i].type, !input->fields[i].required);
    set_slot(&s, var_index(&s, f->name), slot);
  }
  check_stmts(&s, body, 0);
  return s.asks;
}
