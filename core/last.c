/*
 * The syntax tree as Lua tables, for the compiler of statements (lua/luma).
 * Every node has `kind`, `line` and `col`:
 *   statements: assign{name, type?, value}, expr{value}, if{cond, body, orelse?},
 *               try{body, catch_name?, catch_body}, return{value?}
 *   expressions: null, bool{value}, int{value}, float{value}, string{value},
 *               template{parts}, name{name}, field{object, name},
 *               index{object, index}, array{items}, object{props = {{key, value}}},
 *               unary{op, operand}, binary{op, left, right}, tool{tool, arg?},
 *               ask{prompt, type, using?}, ask_citations
 *   types: string, int, float, bool, any, enum{values}, name{name}, array{items}
 */
#include "last.h"

#include <lauxlib.h>

#include "compat.h"

static const char *const op_names[] = {
  "-", "not", "+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">=", "and", "or"
};

static void node(lua_State *L, const char *kind, ast_pos pos) {
  luaL_checkstack(L, 6, "converting the syntax tree");
  lua_createtable(L, 0, 6);
  lua_pushstring(L, kind);
  lua_setfield(L, -2, "kind");
  lua_pushinteger(L, pos.line);
  lua_setfield(L, -2, "line");
  lua_pushinteger(L, pos.col);
  lua_setfield(L, -2, "col");
}

void lt_push_strs(lua_State *L, const ast_str *items, int n) {
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    lua_pushlstring(L, items[i].s, items[i].len);
    lua_rawseti(L, -2, i + 1);
  }
}

static void push_type(lua_State *L, const ast_type *t) {
  static const char *const kinds[] = { "string", "int", "float", "bool", "any", "enum", "name", "array", "inline" };
  node(L, kinds[t->kind], t->pos);
  if (t->kind == TY_NAME) { lua_pushstring(L, t->name); lua_setfield(L, -2, "name"); }
  if (t->kind == TY_ENUM) {
    lt_push_strs(L, t->values, t->nvalues);
    lua_setfield(L, -2, "values");
  }
  if (t->kind == TY_ARRAY) { push_type(L, t->elem); lua_setfield(L, -2, "items"); }
}

static void push_expr(lua_State *L, const ast_expr *e);

static void set_expr(lua_State *L, const char *key, const ast_expr *e) {
  if (!e) return;
  push_expr(L, e);
  lua_setfield(L, -2, key);
}

static void push_exprs(lua_State *L, const ast_expr *e, int n) {
  lua_createtable(L, n, 0);
  for (int i = 1; e; e = e->next, i++) {
    push_expr(L, e);
    lua_rawseti(L, -2, i);
  }
}

static void push_expr(lua_State *L, const ast_expr *e) {
  switch (e->kind) {
    case EX_NULL: node(L, "null", e->pos); break;
    case EX_TRUE: case EX_FALSE:
      node(L, "bool", e->pos);
      lua_pushboolean(L, e->kind == EX_TRUE);
      lua_setfield(L, -2, "value");
      break;
    case EX_INT:
      node(L, "int", e->pos);
      lua_pushinteger(L, (lua_Integer)e->ival);
      lua_setfield(L, -2, "value");
      break;
    case EX_FLOAT:
      node(L, "float", e->pos);
      lua_pushnumber(L, e->fval);
      lua_setfield(L, -2, "value");
      break;
    case EX_STRING:
      node(L, "string", e->pos);
      lua_pushlstring(L, e->str.s, e->str.len);
      lua_setfield(L, -2, "value");
      break;
    case EX_TEMPLATE:
      node(L, "template", e->pos);
      push_exprs(L, e->items, e->nitems);
      lua_setfield(L, -2, "parts");
      break;
    case EX_NAME:
      node(L, "name", e->pos);
      lua_pushstring(L, e->str.s);
      lua_setfield(L, -2, "name");
      break;
    case EX_FIELD:
      node(L, "field", e->pos);
      set_expr(L, "object", e->a);
      lua_pushstring(L, e->str.s);
      lua_setfield(L, -2, "name");
      break;
    case EX_INDEX:
      node(L, "index", e->pos);
      set_expr(L, "object", e->a);
      set_expr(L, "index", e->b);
      break;
    case EX_ARRAY:
      node(L, "array", e->pos);
      push_exprs(L, e->items, e->nitems);
      lua_setfield(L, -2, "items");
      break;
    case EX_OBJECT: {
      node(L, "object", e->pos);
      lua_createtable(L, e->nprops, 0);
      int i = 0;
      for (const ast_prop *q = e->props; q; q = q->next) {
        lua_createtable(L, 0, 2);
        lua_pushstring(L, q->key);
        lua_setfield(L, -2, "key");
        set_expr(L, "value", q->value);
        lua_rawseti(L, -2, ++i);
      }
      lua_setfield(L, -2, "props");
      break;
    }
    case EX_UNARY:
      node(L, "unary", e->pos);
      lua_pushstring(L, op_names[e->op]);
      lua_setfield(L, -2, "op");
      set_expr(L, "operand", e->a);
      break;
    case EX_BINARY:
      node(L, "binary", e->pos);
      lua_pushstring(L, op_names[e->op]);
      lua_setfield(L, -2, "op");
      set_expr(L, "left", e->a);
      set_expr(L, "right", e->b);
      break;
    case EX_TOOL:
      node(L, "tool", e->pos);
      lua_pushstring(L, e->tool);
      lua_setfield(L, -2, "tool");
      set_expr(L, "arg", e->a);
      break;
    case EX_ASK:
      node(L, "ask", e->pos);
      set_expr(L, "prompt", e->a);
      push_type(L, e->type);
      lua_setfield(L, -2, "type");
      if (e->tool) { lua_pushstring(L, e->tool); lua_setfield(L, -2, "using"); }
      break;
    case EX_ASK_CITATIONS:
      node(L, "ask_citations", e->pos);
      break;
  }
}

static void push_block(lua_State *L, const ast_stmt *s);

static void push_stmt(lua_State *L, const ast_stmt *s) {
  static const char *const kinds[] = { "assign", "expr", "if", "try", "return" };
  node(L, kinds[s->kind], s->pos);
  switch (s->kind) {
    case ST_ASSIGN:
      lua_pushstring(L, s->name);
      lua_setfield(L, -2, "name");
      if (s->type) { push_type(L, s->type); lua_setfield(L, -2, "type"); }
      set_expr(L, "value", s->expr);
      break;
    case ST_EXPR: case ST_RETURN:
      set_expr(L, "value", s->expr);
      break;
    case ST_IF:
      set_expr(L, "cond", s->expr);
      push_block(L, s->body);
      lua_setfield(L, -2, "body");
      if (s->has_else) { push_block(L, s->orelse); lua_setfield(L, -2, "orelse"); }
      break;
    case ST_TRY:
      push_block(L, s->body);
      lua_setfield(L, -2, "body");
      if (s->catch_name) { lua_pushstring(L, s->catch_name); lua_setfield(L, -2, "catch_name"); }
      push_block(L, s->orelse);
      lua_setfield(L, -2, "catch_body");
      break;
  }
}

static void push_block(lua_State *L, const ast_stmt *s) {
  lua_newtable(L);
  for (int i = 1; s; s = s->next, i++) {
    push_stmt(L, s);
    lua_rawseti(L, -2, i);
  }
}

static void push_params(lua_State *L, const ast_field *f) {
  lua_newtable(L);
  for (int i = 1; f; f = f->next, i++) {
    lua_createtable(L, 0, 3);
    lua_pushstring(L, f->name);
    lua_setfield(L, -2, "name");
    lua_pushboolean(L, f->optional);
    lua_setfield(L, -2, "optional");
    push_type(L, f->type);
    lua_setfield(L, -2, "type");
    lua_rawseti(L, -2, i);
  }
}

void lt_push_program(lua_State *L, const pm_program *p) {
  lua_createtable(L, 0, 2);
  push_block(L, p->ast->stmts);
  lua_setfield(L, -2, "statements");
  lua_newtable(L);
  int n = 0;
  for (const ast_decl *d = p->ast->decls; d; d = d->next) {
    if (d->kind != DC_AGENT || !d->model) continue;
    node(L, "agent", d->pos);
    lua_pushstring(L, d->name);
    lua_setfield(L, -2, "name");
    lua_newtable(L);
    int m = 0;
    for (const ast_method *fn = d->methods; fn; fn = fn->next) {
      node(L, "method", fn->pos);
      lua_pushstring(L, fn->name);
      lua_setfield(L, -2, "name");
      push_params(L, fn->params);
      lua_setfield(L, -2, "params");
      if (fn->ret) { push_type(L, fn->ret); lua_setfield(L, -2, "returns"); }
      push_block(L, fn->body);
      lua_setfield(L, -2, "body");
      lua_rawseti(L, -2, ++m);
    }
    lua_setfield(L, -2, "methods");
    lua_rawseti(L, -2, ++n);
  }
  lua_setfield(L, -2, "agents");
}
