/* A program bound to a Lua state: its field names interned there (a key is
   matched to a field by its string object), its default values stored
   there, and their fresh copies. */
#include "validateint.h"

#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "compat.h"
#include "ljson.h"

void lv_default_limits(lv_limits *lim) {
  lim->max_depth = LIM_MAX_DEPTH;
  lim->max_string_bytes = LIM_MAX_STRING_BYTES;
  lim->max_violations = LIM_MAX_VIOLATIONS;
  lim->max_pattern_work = LIM_MAX_PATTERN_WORK;
}

static const char *intern(lua_State *L, int anchor, int *n, const char *s, size_t len, const void **obj) {
  lua_pushlstring(L, s, len);
  const char *k = lua_tostring(L, -1);
  if (obj) *obj = lua_topointer(L, -1);
  lua_rawseti(L, anchor, ++*n);
  return k;
}

static void push_literal(lua_State *L, const ast_expr *e, int depth);

static void push_literal(lua_State *L, const ast_expr *e, int depth) {
  if (!lua_checkstack(L, 3) || depth > LIM_DEFAULT_VALUE_DEPTH) { lua_pushnil(L); return; }
  switch (e->kind) {
    case EX_NULL: lua_pushlightuserdata(L, NULL); break;
    case EX_TRUE: lua_pushboolean(L, 1); break;
    case EX_FALSE: lua_pushboolean(L, 0); break;
    case EX_INT: lua_pushinteger(L, (lua_Integer)e->ival); break;
    case EX_FLOAT: lua_pushnumber(L, e->fval); break;
    case EX_STRING: lua_pushlstring(L, e->str.s, e->str.len); break;
    case EX_UNARY:
      push_literal(L, e->a, depth + 1);
      if (lua_type(L, -1) == LUA_TNUMBER) {
#if LUA_VERSION_NUM >= 503
        if (lua_isinteger(L, -1)) { lua_Integer i = lua_tointeger(L, -1); lua_pop(L, 1); lua_pushinteger(L, (lua_Integer)(0u - (lua_Unsigned)i)); break; }
#endif
        lua_Number n = lua_tonumber(L, -1);
        lua_pop(L, 1);
        lua_pushnumber(L, -n);
      }
      break;
    case EX_ARRAY: {
      lua_createtable(L, e->nitems, 0);
      int i = 0;
      for (const ast_expr *x = e->items; x; x = x->next) {
        push_literal(L, x, depth + 1);
        lua_rawseti(L, -2, ++i);
      }
      if (i == 0) {
        /* [] prints as [] wherever it is filled, an `any` field too */
        lj_push_array_mt(L);
        lua_setmetatable(L, -2);
      }
      break;
    }
    case EX_OBJECT:
      lua_createtable(L, 0, e->nprops);
      for (const ast_prop *q = e->props; q; q = q->next) {
        push_literal(L, q->value, depth + 1);
        lua_setfield(L, -2, q->key);
      }
      break;
    default: lua_pushnil(L); break;
  }
}

lv_program *lv_bind(lua_State *L, const pm_program *p, const lv_limits *lim) {
  lv_program *v = calloc(1, sizeof *v);
  if (!v) return NULL;
  v->p = p;
  if (lim) v->lim = *lim; else lv_default_limits(&v->lim);
  if (v->lim.max_depth > LIM_MAX_DEPTH_CAP) v->lim.max_depth = LIM_MAX_DEPTH_CAP;
  if (v->lim.max_depth < 1) v->lim.max_depth = 1;
  if (v->lim.max_violations < 1) v->lim.max_violations = 1;
  v->recs = calloc((size_t)p->nschemas + 1, sizeof *v->recs);
  if (!v->recs) { free(v); return NULL; }
  luaL_checkstack(L, 8, "binding a program");
  lua_newtable(L);
  int anchor = lua_gettop(L), n = 0;
  for (int i = 0; i < p->nschemas; i++) {
    const pm_schema *s = p->schemas[i];
    lv_rec *r = &v->recs[i];
    if (s->is_union) {
      if (s->tag) r->tag = intern(L, anchor, &n, s->tag, strlen(s->tag), NULL);
      continue;
    }
    r->objs = calloc((size_t)s->nfields + 1, sizeof *r->objs);
    r->defaults = calloc((size_t)s->nfields + 1, sizeof *r->defaults);
    if (!r->objs || !r->defaults) goto fail;
    for (int j = 0; j < s->nfields; j++) {
      const pm_field *f = &s->fields[j];
      intern(L, anchor, &n, f->name, f->len, &r->objs[j]);
      if (f->default_value) {
        push_literal(L, f->default_value, 0);
        lua_rawseti(L, anchor, ++n);
        r->defaults[j] = n;
      }
    }
    if (s->nfields > LV_LINEAR_FIELDS) {
      unsigned cap = 32;
      while (cap < (unsigned)s->nfields * 2) cap *= 2;
      r->hash = calloc(cap, sizeof *r->hash);
      if (!r->hash) goto fail;
      r->hmask = cap - 1;
      for (int j = 0; j < s->nfields; j++) {
        size_t h = ptr_hash(r->objs[j]) & r->hmask;
        while (r->hash[h]) h = (h + 1) & r->hmask;
        r->hash[h] = (unsigned)j + 1;
      }
    }
  }
  v->anchor = luaL_ref(L, LUA_REGISTRYINDEX);
  return v;
fail:
  lua_pop(L, 1);
  v->anchor = LUA_NOREF;
  lv_free(L, v);
  return NULL;
}

void lv_free(lua_State *L, lv_program *v) {
  if (!v) return;
  if (L && v->anchor != LUA_NOREF && v->anchor != LUA_REFNIL) luaL_unref(L, LUA_REGISTRYINDEX, v->anchor);
  if (v->recs)
    for (int i = 0; i < v->p->nschemas; i++) {
      free(v->recs[i].objs);
      free(v->recs[i].defaults);
      free(v->recs[i].hash);
    }
  free(v->recs);
  free(v);
}

void lv_push_copy(lua_State *L, int idx, int depth) {
  if (lua_type(L, idx) != LUA_TTABLE || depth > LIM_DEFAULT_VALUE_DEPTH || !lua_checkstack(L, 4)) {
    lua_pushvalue(L, idx);
    return;
  }
  lua_newtable(L);
  int dst = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pushvalue(L, -2);
    lv_push_copy(L, lua_gettop(L) - 1, depth + 1);
    lua_rawset(L, dst);
    lua_pop(L, 1);
  }
  /* a default's only metatable is the JSON array mark */
  if (lua_getmetatable(L, idx)) lua_setmetatable(L, dst);
}

void lv_push_default(lv_program *v, lua_State *L, const pm_schema *s, int field) {
  const lv_rec *r = &v->recs[s->index];
  if (s->is_union || !r->defaults[field]) { lua_pushnil(L); return; }
  luaL_checkstack(L, 4, "copying a default");
  lua_rawgeti(L, LUA_REGISTRYINDEX, v->anchor);
  lua_rawgeti(L, -1, r->defaults[field]);
  lv_push_copy(L, lua_gettop(L), 0);
  lua_replace(L, -3);
  lua_pop(L, 1);
}

int lv_max_violations(const lv_program *v) { return v->lim.max_violations; }
