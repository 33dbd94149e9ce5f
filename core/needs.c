/* STEP_NEEDS (steps.h): the tool's needs, each a context of luma.config.json whose fields
   come from the host's lookup (by default the process environment), parsed
   and checked against the need's schema. They reach the handler only. */
#include "needs.h"

#include "pipeline.h"

#include "luma_limits.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "json.h"
#include "ljson.h"

static int listed(const pm_strings *list, const char *s) {
  for (int i = 0; i < list->n; i++)
    if (strcmp(list->items[i], s) == 0) return 1;
  return 0;
}

/* Pushes the value of one context field; spec is the field's { env, parse }. */
static st_verdict push_field(lua_State *T, cl_call *c, const char *need, const char *field, int spec) {
  const pm_tool *t = c->t;
  lua_getfield(T, spec, "env");
  const char *var = lua_tostring(T, -1);
  lua_getfield(T, spec, "parse");
  const char *parse = lua_isnil(T, -1) ? "string" : lua_tostring(T, -1);
  lua_pop(T, 2);  /* both strings stay alive in the spec table */
  if (!parse) parse = "string";
  const char *value = var ? pl_lookup(T, c->pg, var) : (lua_pushnil(T), NULL);
  if (!value)
    return st_fail(T, LE_TOOL_CONTEXT_INVALID, "Tool '%s' needs '%s', but %s (for %s) is not set.", t->name, need,
                   var ? var : "?", field);
  int at = lua_gettop(T);
  char *end;
  int ok = 0;
  if (strcmp(parse, "string") == 0) {
    return sv_next();   /* the looked-up string is already on top */
  } else if (strcmp(parse, "boolean") == 0) {
    if (strcmp(value, "true") == 0 || strcmp(value, "false") == 0) { lua_pushboolean(T, value[0] == 't'); ok = 1; }
  } else if (strcmp(parse, "integer") == 0) {
    errno = 0;
    long long v = strtoll(value, &end, 10);
    if (*value && !*end && errno == 0) { lua_pushinteger(T, (lua_Integer)v); ok = 1; }
  } else if (strcmp(parse, "number") == 0) {
    errno = 0;
    double d = strtod(value, &end);
    if (*value && !*end && errno == 0 && isfinite(d)) { lua_pushnumber(T, d); ok = 1; }
  } else if (strcmp(parse, "json") == 0) {
    ar_arena a;
    ar_init(&a);
    char why[128];
    jv *v = json_parse(&a, value, strlen(value), LIM_CONTEXT_JSON_DEPTH, why, sizeof why);
    if (v) { lj_push(T, v, 0); ok = 1; }
    ar_free(&a);
  }
  if (ok) {
    lua_remove(T, at);
    return sv_next();
  }
  return st_fail(T, LE_TOOL_CONTEXT_INVALID, "Tool '%s' needs '%s', but %s (for %s) is not a valid %s.", t->name,
                 need, var, field, parse);
}

st_verdict st_needs(lua_State *T, cl_call *c) {
  const pm_tool *t = c->t;
  const pm_agent *ag = c->scope ? c->scope->agent : NULL;
  if (t->nneeds == 0) return sv_next();
  lua_newtable(T);
  int out = lua_gettop(T);
  for (int i = 0; i < t->nneeds; i++) {
    const pm_need *need = &t->needs[i];
    if (ag && ag->tool_contexts.present && !listed(&ag->tool_contexts, need->name))
      return st_fail(T, LE_TOOL_CONTEXT_INVALID, "Tool '%s' needs '%s', which the agent's tool_contexts do not allow.",
                     t->name, need->name);
    int found = pl_push_anchor(T, c->pg, "contexts") == LUA_TTABLE;
    if (found) {
      lua_getfield(T, -1, need->name);
      lua_remove(T, -2);
      found = lua_type(T, -1) == LUA_TTABLE;
    }
    if (!found)
      return st_fail(T, LE_TOOL_CONTEXT_INVALID,
                     "Tool '%s' needs '%s', which no tool_contexts entry of the configuration provides.", t->name,
                     need->name);
    int spec = lua_gettop(T);
    lua_newtable(T);
    int value = lua_gettop(T);
    lua_pushnil(T);
    while (lua_next(T, spec)) {
      const char *field = lua_tostring(T, -2);
      st_verdict v = push_field(T, c, need->name, field, lua_gettop(T));
      if (v.kind != SV_NEXT) return v;
      lua_pushvalue(T, -3);
      lua_insert(T, -2);
      lua_rawset(T, value);
      lua_pop(T, 1);
    }
    char root[300];
    snprintf(root, sizeof root, "%s.needs.%s", t->name, need->name);
    lv_result r;
    int bad = lv_validate(c->pg->v, T, value, need->schema, root, LV_INPUT, &r);
    st_verdict v = bad ? st_fail_validation(T, LE_TOOL_CONTEXT_INVALID, &r) : sv_next();
    lv_result_free(&r);
    if (bad) return v;
    lua_setfield(T, out, need->name);
    lua_settop(T, out);
  }
  lua_replace(T, CV_NEEDS);
  return sv_next();
}
