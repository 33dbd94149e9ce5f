/*
 * The Lua binding of a compiled program: the "luma.Program" userdata.
 */
#include "lprogram.h"

#include <stdint.h>
#include <string.h>

#include "compat.h"
#include "diag.h"
#include "jsonschema.h"
#include "lerror.h"
#include "ljson.h"
#include "lask.h"
#include "lconfigure.h"
#include "last.h"
#include "lruntime.h"
#include "luma_limits.h"
#include "pipeline.h"
#include "validate.h"

#define LP_METATABLE "luma.Program"

/* The methods carry the metatable as upvalue 1: checking the argument is
   then one comparison, without a registry lookup by name. */
lp_program *lp_check(lua_State *L, int idx) {
  lp_program *lp = lua_touserdata(L, idx);
  int ok = lp && lua_getmetatable(L, idx);
  if (ok) {
    ok = lua_rawequal(L, -1, lua_upvalueindex(1));
    lua_pop(L, 1);
  }
  if (!ok) luaL_argerror(L, idx, LP_METATABLE " expected");
  if (!lp->p) luaL_argerror(L, idx, "the program is closed");
  return lp;
}

static int lp_close(lua_State *L) {
  lp_program *lp = luaL_checkudata(L, 1, LP_METATABLE);
  if (lp->pg) {
    /* calls in flight and scopes keep it alive until they are done; its
       modules' idle states (and handler processes) end now */
    pl_close(lp->pg);
    pl_unref(lp->pg);
  } else {
    lv_free(L, lp->v);
    pm_free(lp->p);
  }
  lp->pg = NULL;
  if (lp->names != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, lp->names);
  lp->v = NULL;
  lp->p = NULL;
  lp->names = LUA_NOREF;
  memset(lp->cache, 0, sizeof lp->cache);
  return 0;
}

/* ------------------------------------------------------------- options */

typedef struct lp_opts {
  pm_limits pm;
  lv_limits lv;
} lp_opts;

static const char *const option_names[] = {
  "max_source_bytes", "max_errors", "max_parse_depth", "max_depth", "max_string_bytes", "max_violations",
  "max_pattern_work", NULL
};

/* Reads `opts.limits`; a misspelt or ill-typed limit is a programmer error. */
static void read_opts(lua_State *L, int idx, lp_opts *o) {
  pm_default_limits(&o->pm);
  lv_default_limits(&o->lv);
  if (lua_isnoneornil(L, idx)) return;
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_getfield(L, idx, "allow_unknown_models");
  o->pm.allow_unknown_models = lua_toboolean(L, -1);
  lua_pop(L, 1);
  lua_getfield(L, idx, "limits");
  if (lua_isnil(L, -1)) { lua_pop(L, 1); return; }
  if (!lua_istable(L, -1)) luaL_error(L, "opts.limits must be a table");
  int t = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, t)) {
    int which = -1;
    if (lua_type(L, -2) == LUA_TSTRING)
      for (int i = 0; option_names[i]; i++)
        if (strcmp(lua_tostring(L, -2), option_names[i]) == 0) which = i;
    if (which < 0) {
      const char *key = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "?";
      luaL_error(L, "opts.limits has no limit '%s'", key);
    }
    if (!lc_isinteger(L, -1) || lua_tointeger(L, -1) < 1)
      luaL_error(L, "opts.limits.%s must be a positive integer", option_names[which]);
    lua_Integer n = lua_tointeger(L, -1);
    int small = n > 1000000000 ? 1000000000 : (int)n;
    switch (which) {
      case 0: o->pm.max_source_bytes = (size_t)n; break;
      case 1: o->pm.max_errors = small; break;
      case 2: o->pm.max_parse_depth = small > LIM_MAX_PARSE_DEPTH_CAP ? LIM_MAX_PARSE_DEPTH_CAP : small; break;
      case 3: o->lv.max_depth = small > LIM_MAX_DEPTH_CAP ? LIM_MAX_DEPTH_CAP : small; break;
      case 4: o->lv.max_string_bytes = (size_t)n; break;
      case 5: o->lv.max_violations = small; break;
      case 6: o->lv.max_pattern_work = (double)n; break;
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

/* ------------------------------------------------------------- compile */

/* Raises PROGRAM_INVALID with every diagnostic, formatted and as data.
   The program stays owned by its (unreturned) userdata, which frees it. */
static int raise_diagnostics(lua_State *L, pm_program *p) {
  luaL_Buffer b;
  lua_createtable(L, 0, 1);                      /* details */
  int details = lua_gettop(L);
  lua_createtable(L, p->diag.count, 0);          /* details.diagnostics */
  int list = lua_gettop(L);
  int i = 0;
  for (const dg_item *it = p->diag.first; it; it = it->next) {
    lua_createtable(L, 0, 4);
    lua_pushstring(L, p->chunk);
    lua_setfield(L, -2, "file");
    lua_pushinteger(L, it->line);
    lua_setfield(L, -2, "line");
    lua_pushinteger(L, it->col);
    lua_setfield(L, -2, "col");
    lua_pushstring(L, it->msg);
    lua_setfield(L, -2, "message");
    lua_pushstring(L, dg_format(&p->diag, it));
    lua_setfield(L, -2, "text");
    lua_rawseti(L, list, ++i);
  }
  lua_setfield(L, details, "diagnostics");
  lua_pushinteger(L, p->diag.dropped);
  lua_setfield(L, details, "more");
  luaL_buffinit(L, &b);
  for (const dg_item *it = p->diag.first; it; it = it->next) {
    if (it != p->diag.first) luaL_addchar(&b, '\n');
    luaL_addstring(&b, dg_format(&p->diag, it));
  }
  if (p->diag.dropped) {
    lua_pushfstring(L, "\n\xe2\x80\xa6 and %d more errors", p->diag.dropped);
    luaL_addvalue(&b);
  }
  luaL_pushresult(&b);
  le_push(L, "PROGRAM_INVALID", lua_tostring(L, -1), 0, details);
  return lua_error(L);
}

/* ------------------------------------------------------------ mcp_server */

static void set_str(lua_State *L, const char *key, const char *value);
static void set_int(lua_State *L, const char *key, long long value);
static void push_strings(lua_State *L, const char *const *items, int n);

/* A string field of the table on top, or NULL (an arena copy). */
static const char *opt_string(lua_State *L, ar_arena *a, const char *key) {
  lua_getfield(L, -1, key);
  size_t len;
  const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &len) : NULL;
  const char *copy = s ? ar_strndup(a, s, len) : NULL;
  lua_pop(L, 1);
  return copy;
}

/* A schema field of the table on top as JSON text (an arena copy): what a
   server sent, re-written by the one codec; "null" when it is absent or
   cannot be written (program_mcp.c then says it is not an object schema). */
static const char *opt_schema(lua_State *L, ar_arena *a, const char *key, size_t *len) {
  lua_getfield(L, -1, key);
  const char *text = NULL;
  *len = 0;
  if (!lua_isnil(L, -1)) {
    sb_buf b;
    char err[100];
    sb_init(&b);
    if (lj_encode(L, -1, &b, 0, LIM_MCP_SERVER_JSON_DEPTH, err, sizeof err) == 0 && !b.failed) {
      text = ar_strndup(a, b.data, b.len);
      *len = b.len;
    }
    sb_free(&b);
  } else if (strcmp(key, "outputSchema") != 0) {
    text = "null";
    *len = 4;
  }
  lua_pop(L, 1);
  return text;
}

/* opts.mcp = { [server] = { { name, description, inputSchema, outputSchema }, ... } }:
   what each started server listed, read into a (the listings pm_build_mcp takes). */
static int read_listings(lua_State *L, int opts, ar_arena *a, pm_mcp_listing **out) {
  *out = NULL;
  if (!lua_istable(L, opts)) return 0;
  lua_getfield(L, opts, "mcp");
  if (!lua_istable(L, -1)) { lua_pop(L, 1); return 0; }
  int servers = lua_gettop(L), n = 0;
  lua_pushnil(L);
  while (lua_next(L, servers)) { n++; lua_pop(L, 1); }
  pm_mcp_listing *ls = ar_alloc(a, sizeof *ls * (size_t)(n ? n : 1));
  int i = 0;
  lua_pushnil(L);
  while (ls && lua_next(L, servers)) {
    if (lua_type(L, -2) != LUA_TSTRING || !lua_istable(L, -1)) { lua_pop(L, 1); continue; }
    pm_mcp_listing *l = &ls[i++];
    l->server = ar_strdup(a, lua_tostring(L, -2));
    int list = lua_gettop(L);
    int count = (int)lc_rawlen(L, list);
    pm_mcp_tool *tools = ar_alloc(a, sizeof *tools * (size_t)(count ? count : 1));
    for (int j = 1; tools && j <= count; j++) {
      lua_rawgeti(L, list, j);
      if (lua_istable(L, -1)) {
        pm_mcp_tool *t = &tools[l->ntools];
        t->name = opt_string(L, a, "name");
        t->description = opt_string(L, a, "description");
        t->input = opt_schema(L, a, "inputSchema", &t->input_len);
        t->output = opt_schema(L, a, "outputSchema", &t->output_len);
        if (t->name) l->ntools++;
      }
      lua_pop(L, 1);
    }
    l->tools = tools;
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  *out = ls;
  return i;
}

/* core.mcp_servers(source, chunkname [, opts]) -> { { name, command, args,
   url, token, headers = { { name, value }, ... }, tools, timeout, start_timeout, relist_interval, line, col }, ... }: the
   mcp_server declarations to start before compiling with opts.mcp (only the
   ones written without a mistake: compile reports the others). */
static int l_mcp_servers(lua_State *L) {
  size_t len;
  const char *src = luaL_checklstring(L, 1, &len);
  const char *chunk = luaL_optstring(L, 2, "program.luma");
  lp_opts o;
  read_opts(L, 3, &o);
  pm_program *p = pm_build(src, len, chunk, &o.pm);
  if (!p) return luaL_error(L, "out of memory compiling %s", chunk);
  lua_createtable(L, p->nmcps, 0);
  int k = 0;
  for (int i = 0; i < p->nmcps; i++) {
    const pm_mcp *m = p->mcps[i];
    int clean = !m->decl->broken;
    for (const dg_item *it = p->diag.first; it && clean; it = it->next)
      if (it->line >= m->decl->pos.line && (!m->decl->next || it->line < m->decl->next->pos.line)) clean = 0;
    if (!clean || (!m->command && !m->url)) continue;
    lua_createtable(L, 0, 10);
    set_str(L, "name", m->name);
    set_str(L, "command", m->command);
    set_str(L, "url", m->url);
    set_str(L, "token", m->token);
    if (m->headers.n) {
      lua_createtable(L, m->headers.n, 0);
      for (int j = 0; j < m->headers.n; j++) {
        lua_createtable(L, 2, 0);
        lua_pushstring(L, m->headers.names[j]);
        lua_rawseti(L, -2, 1);
        lua_pushstring(L, m->headers.values[j]);
        lua_rawseti(L, -2, 2);
        lua_rawseti(L, -2, j + 1);
      }
      lua_setfield(L, -2, "headers");
    }
    push_strings(L, m->args.items, m->args.n);
    lua_setfield(L, -2, "args");
    if (m->tools.present) {
      push_strings(L, m->tools.items, m->tools.n);
      lua_setfield(L, -2, "tools");
    }
    if (m->timeout > 0) set_int(L, "timeout", m->timeout);
    set_int(L, "start_timeout", m->start_timeout > 0 ? m->start_timeout : LIM_MCP_START_TIMEOUT_MS);
    set_int(L, "relist_interval", LIM_MCP_RELIST_INTERVAL_MS);
    set_int(L, "line", m->pos.line);
    set_int(L, "col", m->pos.col);
    lua_rawseti(L, -2, ++k);
  }
  pm_free(p);
  return 1;
}

/* core.compile(source, chunkname [, opts]) -> program; raises PROGRAM_INVALID */
static int l_compile(lua_State *L) {
  size_t len;
  const char *src = luaL_checklstring(L, 1, &len);
  const char *chunk = luaL_optstring(L, 2, "program.luma");
  lp_opts o;
  read_opts(L, 3, &o);
  int rt_at = 0;
  if (lua_istable(L, 3)) {
    lua_getfield(L, 3, "runtime");
    rt_at = lua_gettop(L);
  }
  rt_runtime *rt = lr_runtime(L, rt_at);
  lp_program *lp = lua_newuserdata(L, sizeof *lp);
  memset(lp, 0, sizeof *lp);
  lp->names = LUA_NOREF;
  lc_setmetatable(L, LP_METATABLE);
  lua_newtable(L);
  lp->names = luaL_ref(L, LUA_REGISTRYINDEX);
  ar_arena listed;
  ar_init(&listed);
  pm_mcp_listing *listings;
  int nlistings = read_listings(L, 3, &listed, &listings);
  lp->p = listed.failed ? NULL : pm_build_mcp(src, len, chunk, &o.pm, listings, nlistings);
  ar_free(&listed);
  if (!lp->p) return luaL_error(L, "out of memory compiling %s", chunk);
  if (lp->p->diag.count == 0) {
    lp->v = lv_bind(L, lp->p, &o.lv);
    if (!lp->v) return luaL_error(L, "out of memory compiling %s", chunk);
    if (lv_check_defaults(lp->v, L, lp->p) == 0) {
      lp->pg = pl_new(rt, lp->p, lp->v);
      if (!lp->pg) {
        lp->p = NULL;
        lp->v = NULL;
        return luaL_error(L, "out of memory compiling %s", chunk);
      }
      return 1;
    }
  }
  return raise_diagnostics(L, lp->p);
}

/* --------------------------------------------------------- descriptions */

static void set_str(lua_State *L, const char *key, const char *value) {
  if (!value) return;
  lua_pushstring(L, value);
  lua_setfield(L, -2, key);
}

static void set_int(lua_State *L, const char *key, long long value) {
  lua_pushinteger(L, (lua_Integer)value);
  lua_setfield(L, -2, key);
}

static void set_bool(lua_State *L, const char *key, int value) {
  lua_pushboolean(L, value);
  lua_setfield(L, -2, key);
}

static void push_num(lua_State *L, pm_num n) {
  if (n.is_int) lua_pushinteger(L, (lua_Integer)n.i);
  else lua_pushnumber(L, n.d);
}

static void push_strings(lua_State *L, const char *const *items, int n) {
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    lua_pushstring(L, items[i]);
    lua_rawseti(L, -2, i + 1);
  }
}

static void push_type(lua_State *L, const pm_type *t, int depth) {
  static const char *const kinds[] = { "string", "int", "float", "bool", "any", "enum", "schema", "array" };
  luaL_checkstack(L, 4, "describing a type");
  lua_createtable(L, 0, 4);
  set_str(L, "kind", kinds[t->kind]);
  if (t->kind == PT_SCHEMA) set_str(L, "name", t->schema->name);
  if (t->kind == PT_ENUM) {
    lt_push_strs(L, t->values, t->nvalues);
    lua_setfield(L, -2, "values");
  }
  if (t->kind == PT_ARRAY && depth < LIM_TYPE_DESCRIBE_DEPTH) {
    push_type(L, t->elem, depth + 1);
    lua_setfield(L, -2, "items");
  }
  if (t->rules & PR_MIN) { push_num(L, t->min); lua_setfield(L, -2, "minimum"); }
  if (t->rules & PR_MAX) { push_num(L, t->max); lua_setfield(L, -2, "maximum"); }
  if (t->rules & PR_MINLEN) set_int(L, "min_length", t->minlen);
  if (t->rules & PR_MAXLEN) set_int(L, "max_length", t->maxlen);
  if (t->rules & PR_MINITEMS) set_int(L, "min_items", t->minitems);
  if (t->rules & PR_MAXITEMS) set_int(L, "max_items", t->maxitems);
  if (t->rules & PR_PATTERN) {
    lua_pushlstring(L, t->pattern, t->pattern_len);   /* it may hold NUL */
    lua_setfield(L, -2, "pattern");
  }
  if (t->soft) set_bool(L, "soft", 1);
}

static void push_fields(lua_State *L, lp_program *lp, const pm_schema *s) {
  lua_createtable(L, s->nfields, 0);
  for (int i = 0; i < s->nfields; i++) {
    const pm_field *f = &s->fields[i];
    lua_createtable(L, 0, 5);
    set_str(L, "name", f->name);
    push_type(L, f->type, 0);
    lua_setfield(L, -2, "type");
    set_bool(L, "required", f->required);
    set_str(L, "description", f->desc);
    if (f->default_value) {
      lv_push_default(lp->v, L, s, i);
      lua_setfield(L, -2, "default");
    }
    lua_rawseti(L, -2, i + 1);
  }
}

static void push_schema_info(lua_State *L, lp_program *lp, const pm_schema *s) {
  lua_createtable(L, 0, 5);
  set_str(L, "name", s->name);
  set_str(L, "kind", s->is_union ? "union" : "record");
  if (s->is_union) {
    lua_createtable(L, s->nmembers, 0);
    for (int i = 0; i < s->nmembers; i++) {
      lua_pushstring(L, s->members[i]->name);
      lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "members");
    set_str(L, "tag", s->tag);
  } else {
    push_fields(L, lp, s);
    lua_setfield(L, -2, "fields");
  }
}

/* The schema or tool named by the string at idx (names are unique across
   declarations, and internal schemas start with "__"). */
static const lp_cache *lookup(lua_State *L, lp_program *lp, int idx) {
  static const lp_cache none = { NULL, NULL, NULL };
  const char *name = lua_tostring(L, idx);
  lp_cache *slot = &lp->cache[((uintptr_t)name >> 4) % LP_CACHE];
  if (slot->key == name) return slot;
  const pm_schema *s = pm_find_schema(lp->p, name);
  const pm_tool *t = pm_find_tool(lp->p, name);
  if (!s && !t) return &none;
  lua_rawgeti(L, LUA_REGISTRYINDEX, lp->names);
  lua_pushvalue(L, idx);
  lua_rawseti(L, -2, (lua_Integer)(slot - lp->cache) + 1);
  lua_pop(L, 1);
  slot->key = name;
  slot->schema = s;
  slot->tool = t;
  return slot;
}

static const pm_schema *find_schema(lua_State *L, lp_program *lp, int idx) {
  return lookup(L, lp, idx)->schema;
}

const pm_tool *lp_find_tool(lua_State *L, lp_program *lp, int idx) {
  return lookup(L, lp, idx)->tool;
}

/* program:schema(name) -> description, or nil */
static int l_schema(lua_State *L) {
  lp_program *lp = lp_check(L, 1);
  luaL_checktype(L, 2, LUA_TSTRING);
  const pm_schema *s = find_schema(L, lp, 2);
  if (!s) { lua_pushnil(L); return 1; }
  push_schema_info(L, lp, s);
  return 1;
}

static void push_tool_info(lua_State *L, lp_program *lp, const pm_tool *t) {
  static const char *const effects[] = { "none", "read", "write" };
  static const char *const backoffs[] = { "none", "fixed", "exponential" };
  lua_createtable(L, 0, 20);
  set_str(L, "kind", "tool");
  set_str(L, "name", t->name);
  set_int(L, "line", t->pos.line);
  set_int(L, "col", t->pos.col);
  set_str(L, "description", t->description ? t->description : "");
  set_str(L, "input", t->input->name);
  if (t->output) set_str(L, "output", t->output->name);
  push_fields(L, lp, t->input);
  lua_setfield(L, -2, "params");
  set_str(L, "side_effects", effects[t->side_effects]);
  set_str(L, "handler", pm_handler_names[t->handler]);
  set_bool(L, "cache", t->cache);
  set_str(L, "scope", t->scope);
  set_str(L, "credential", t->credential);
  if (t->error) set_str(L, "error", t->error->name);
  set_int(L, "retries", t->retries);
  set_str(L, "retry_backoff", backoffs[t->retry_backoff]);
  set_int(L, "retry_delay", t->retry_delay);
  if (t->timeout >= 0) set_int(L, "timeout", t->timeout);
  set_bool(L, "idempotent", t->idempotent);
  if (t->idempotency_key.present) {
    push_strings(L, t->idempotency_key.items, t->idempotency_key.n);
    lua_setfield(L, -2, "idempotency_key");
  }
  set_int(L, "idempotency_ttl_ms", t->idempotency_ttl_ms);
  if (t->mcp) {
    set_str(L, "mcp_server", t->mcp->name);
    set_str(L, "mcp_tool", t->mcp_tool);
  }
  lua_createtable(L, t->nneeds, 0);
  for (int i = 0; i < t->nneeds; i++) {
    lua_createtable(L, 0, 2);
    set_str(L, "name", t->needs[i].name);
    set_str(L, "schema", t->needs[i].schema->name);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "needs");
}

static void push_agent_info(lua_State *L, const pm_agent *ag) {
  static const char *const policies[] = { "allow", "deny_write", "approval" };
  lua_createtable(L, 0, 14);
  set_str(L, "kind", "agent");
  set_str(L, "name", ag->name);
  set_str(L, "description", ag->description);
  if (ag->model) set_str(L, "model", ag->model->name);
  lua_createtable(L, ag->tools.n, 0);
  for (int i = 0; i < ag->tools.n; i++) {
    lua_pushstring(L, ag->tools.items[i]->name);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "tools");
  if (ag->ptools.n) {
    lua_createtable(L, ag->ptools.n, 0);
    for (int i = 0; i < ag->ptools.n; i++) {
      lua_pushstring(L, ag->ptools.items[i]->name);
      lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "provider_tools");
  }
  if (ag->lazy_tools.n) {
    push_strings(L, ag->lazy_tools.items, ag->lazy_tools.n);
    lua_setfield(L, -2, "lazy_tools");
    set_str(L, "tool_search", pm_tool_search_names[ag->tool_search]);
  }
  if (ag->tool_rate_limit >= 0) set_int(L, "tool_rate_limit", ag->tool_rate_limit);
  set_int(L, "tool_concurrency", ag->tool_concurrency);
  if (ag->tool_failure_limit >= 0) set_int(L, "tool_failure_limit", ag->tool_failure_limit);
  if (ag->tool_timeout >= 0) set_int(L, "tool_timeout", ag->tool_timeout);
  if (ag->tool_timeout_max >= 0) set_int(L, "tool_timeout_max", ag->tool_timeout_max);
  set_int(L, "retries", ag->retries >= 0 ? ag->retries : 0);
  set_int(L, "tool_result_max_bytes", ag->tool_result_max_bytes > 0 ? ag->tool_result_max_bytes : LIM_TOOL_RESULT_MAX_BYTES);
  set_str(L, "tool_policy", policies[ag->tool_policy]);
  if (ag->tool_scopes.present) {
    push_strings(L, ag->tool_scopes.items, ag->tool_scopes.n);
    lua_setfield(L, -2, "tool_scopes");
  }
  if (ag->tool_contexts.present) {
    push_strings(L, ag->tool_contexts.items, ag->tool_contexts.n);
    lua_setfield(L, -2, "tool_contexts");
  }
  int n = 0;
  for (const ast_method *m = ag->decl->methods; m; m = m->next) n++;
  lua_createtable(L, n, 0);
  n = 0;
  for (const ast_method *m = ag->decl->methods; m; m = m->next) {
    lua_pushstring(L, m->name);
    lua_rawseti(L, -2, ++n);
  }
  lua_setfield(L, -2, "methods");
}

static void push_model_info(lua_State *L, const pm_model *m) {
  lua_createtable(L, 0, 10);
  set_str(L, "kind", "model");
  set_str(L, "name", m->name);
  set_str(L, "provider", ad_providers[m->provider].name);
  set_str(L, "model", m->model);
  set_str(L, "base_url", m->base_url);
  set_str(L, "api", ad_api_names[m->api]);
  set_str(L, "api_key_env", pm_model_key_env(m));
  set_str(L, "deployment", m->deployment);
  set_str(L, "api_version", m->api_version);
  if (m->has_temperature) { push_num(L, m->temperature); lua_setfield(L, -2, "temperature"); }
  if (m->max_tokens >= 0) set_int(L, "max_tokens", m->max_tokens);
  if (m->timeout >= 0) set_int(L, "timeout", m->timeout);
  set_int(L, "retries", m->retries >= 0 ? m->retries : 2);
  lua_pushboolean(L, m->stream);
  lua_setfield(L, -2, "stream");
  if (m->headers.n) {
    lua_createtable(L, 0, m->headers.n);
    for (int i = 0; i < m->headers.n; i++) set_str(L, m->headers.names[i], m->headers.values[i]);
    lua_setfield(L, -2, "headers");
  }
}

static void push_ptool_info(lua_State *L, const pm_ptool *t) {
  lua_createtable(L, 0, 8);
  set_str(L, "kind", "provider_tool");
  set_str(L, "name", t->name);
  if (t->has_kind) set_str(L, "tool_kind", ad_ptkind_names[t->kind]);
  if (t->max_uses > 0) set_int(L, "max_uses", t->max_uses);
  const pm_strings *lists[] = { &t->allowed_domains, &t->blocked_domains, &t->vector_stores };
  static const char *const keys[] = { "allowed_domains", "blocked_domains", "vector_stores" };
  for (int i = 0; i < 3; i++) {
    if (!lists[i]->present) continue;
    push_strings(L, lists[i]->items, lists[i]->n);
    lua_setfield(L, -2, keys[i]);
  }
  if (t->user_location.n) {
    lua_createtable(L, 0, t->user_location.n);
    for (int i = 0; i < t->user_location.n; i++) set_str(L, t->user_location.names[i], t->user_location.values[i]);
    lua_setfield(L, -2, "user_location");
  }
  set_str(L, "container", t->container);
}

static const pm_ptool *find_ptool(const pm_program *p, const char *name) {
  for (int i = 0; i < p->nptools; i++)
    if (strcmp(p->ptools[i]->name, name) == 0) return p->ptools[i];
  return NULL;
}

/* program:declaration(name) -> description of any declaration, or nil */
static int l_declaration(lua_State *L) {
  lp_program *lp = lp_check(L, 1);
  luaL_checktype(L, 2, LUA_TSTRING);
  const char *name = lua_tostring(L, 2);
  const pm_schema *s = find_schema(L, lp, 2);
  const pm_tool *t;
  const pm_agent *ag;
  const pm_model *m;
  if (s && !s->internal) {
    push_schema_info(L, lp, s);
    set_str(L, "kind", "schema");
    set_str(L, "form", s->is_union ? "union" : "record");
  } else if ((t = pm_find_tool(lp->p, name))) {
    push_tool_info(L, lp, t);
  } else if ((ag = pm_find_agent(lp->p, name))) {
    push_agent_info(L, ag);
  } else if ((m = pm_find_model(lp->p, name))) {
    push_model_info(L, m);
  } else if (find_ptool(lp->p, name)) {
    push_ptool_info(L, find_ptool(lp->p, name));
  } else {
    lua_pushnil(L);
  }
  return 1;
}

/* program:declarations() -> { schemas = {...}, tools = {...}, agents = {...}, models = {...},
   provider_tools = {...} } */
static int l_declarations(lua_State *L) {
  lp_program *lp = lp_check(L, 1);
  const pm_program *p = lp->p;
  lua_createtable(L, 0, 4);
  int n = 0;
  lua_createtable(L, p->nschemas, 0);
  for (int i = 0; i < p->nschemas; i++)
    if (!p->schemas[i]->internal) {
      lua_pushstring(L, p->schemas[i]->name);
      lua_rawseti(L, -2, ++n);
    }
  lua_setfield(L, -2, "schemas");
  lua_createtable(L, p->ntools, 0);
  for (int i = 0; i < p->ntools; i++) { lua_pushstring(L, p->tools[i]->name); lua_rawseti(L, -2, i + 1); }
  lua_setfield(L, -2, "tools");
  lua_createtable(L, p->nagents, 0);
  for (int i = 0; i < p->nagents; i++) { lua_pushstring(L, p->agents[i]->name); lua_rawseti(L, -2, i + 1); }
  lua_setfield(L, -2, "agents");
  lua_createtable(L, p->nmodels, 0);
  for (int i = 0; i < p->nmodels; i++) { lua_pushstring(L, p->models[i]->name); lua_rawseti(L, -2, i + 1); }
  lua_setfield(L, -2, "models");
  lua_createtable(L, p->nptools, 0);
  for (int i = 0; i < p->nptools; i++) { lua_pushstring(L, p->ptools[i]->name); lua_rawseti(L, -2, i + 1); }
  lua_setfield(L, -2, "provider_tools");
  return 1;
}

/* ---------------------------------------------------------- JSON output */

/* Whether opts (at idx) asks for JSON text: { format = "json" }. */
static int want_text(lua_State *L, int idx) {
  if (lua_isnoneornil(L, idx)) return 0;
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_getfield(L, idx, "format");
  const char *f = lua_tostring(L, -1);
  int text = 0;
  if (f && strcmp(f, "json") == 0) text = 1;
  else if (f && strcmp(f, "table") != 0) luaL_error(L, "opts.format must be \"json\" or \"table\"");
  lua_pop(L, 1);
  return text;
}

static int scratch_gc(lua_State *L) {
  ar_free(lua_touserdata(L, 1));
  return 0;
}

/* An arena owned by a userdata on the stack, so that an error raised while
   it is in use cannot leak it. */
static ar_arena *push_scratch(lua_State *L) {
  ar_arena *a = lua_newuserdata(L, sizeof *a);
  ar_init(a);
  if (luaL_newmetatable(L, "luma.Scratch")) {
    lua_pushcfunction(L, scratch_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  return a;
}

/* Replaces the scratch arena on top with v as a Lua table, or as pretty JSON text. */
static int push_result(lua_State *L, ar_arena *a, const jv *v, int text) {
  if (!v || a->failed) return luaL_error(L, "out of memory");
  if (text) {
    sb_buf b;
    sb_init(&b);
    jv_write(&b, v, 2);
    int failed = b.failed;
    if (!failed) lua_pushlstring(L, b.data, b.len);
    sb_free(&b);
    if (failed) return luaL_error(L, "out of memory");
  } else {
    lj_push(L, v, 0);
  }
  ar_free(a);
  return 1;
}

/* program:json_schema(name [, opts]) -> table (or JSON text), or nil */
static int l_json_schema(lua_State *L) {
  lp_program *lp = lp_check(L, 1);
  luaL_checktype(L, 2, LUA_TSTRING);
  const pm_schema *s = find_schema(L, lp, 2);
  int text = want_text(L, 3);
  if (!s) { lua_pushnil(L); return 1; }
  ar_arena *a = push_scratch(L);
  return push_result(L, a, js_schema(a, lp->p, s, JS_CANONICAL), text);
}

/* program:tools([opts]) -> { {name, description, parameters}, ... } (or JSON text) */
static int l_tools(lua_State *L) {
  lp_program *lp = lp_check(L, 1);
  int text = want_text(L, 2);
  ar_arena *a = push_scratch(L);
  return push_result(L, a, js_tools(a, lp->p, JS_CANONICAL), text);
}

/* ----------------------------------------------------------- validation */

/* program:validate(name, value [, { mode = "input" | "output", root = "..." }])
   -> true [, warnings] | nil, err */
/* "no schema named 'X'", with the closest declared name when there is one. */
static int no_schema(lua_State *L, lp_program *lp, int idx) {
  const char *word = lua_tostring(L, idx);
  int n = lp->p->nschemas < LIM_SUGGEST_CANDIDATES ? lp->p->nschemas : LIM_SUGGEST_CANDIDATES, k = 0;
  const char **names = lua_newuserdata(L, sizeof *names * (size_t)(n + 1));
  for (int i = 0; i < n; i++)
    if (strncmp(lp->p->schemas[i]->name, "__", 2) != 0) names[k++] = lp->p->schemas[i]->name;
  const char *best = dg_suggest(word, names, k);
  if (best) return luaL_argerror(L, idx, lua_pushfstring(L, "no schema named '%s'. Did you mean '%s'?", word, best));
  return luaL_argerror(L, idx, lua_pushfstring(L, "no schema named '%s'", word));
}

static int l_validate(lua_State *L) {
  lp_program *lp = lp_check(L, 1);
  luaL_checktype(L, 2, LUA_TSTRING);
  luaL_checkany(L, 3);
  const pm_schema *s = find_schema(L, lp, 2);
  if (!s) return no_schema(L, lp, 2);
  int mode = LV_INPUT;
  const char *root = s->display;
  if (!lua_isnoneornil(L, 4)) {
    luaL_checktype(L, 4, LUA_TTABLE);
    lua_getfield(L, 4, "mode");
    const char *m = lua_tostring(L, -1);
    if (m && strcmp(m, "output") == 0) mode = LV_OUTPUT;
    else if (m && strcmp(m, "input") != 0) return luaL_error(L, "opts.mode must be \"input\" or \"output\"");
    lua_getfield(L, 4, "root");
    if (lua_type(L, -1) == LUA_TSTRING) root = lua_tostring(L, -1);
    else if (!lua_isnil(L, -1)) return luaL_error(L, "opts.root must be a string");
  }
  lv_result r;
  int errors = lv_validate(lp->v, L, 3, s, root, mode, &r);
  if (errors) {
    lua_pushnil(L);
    lv_push_lazy_error(L, "VALIDATION_FAILED", &r);
    lv_result_free(&r);
    return 2;
  }
  int results = 1;
  lua_pushboolean(L, 1);
  if (r.nwarnings) {
    lv_push_issues(L, r.warnings, r.nwarnings);
    results = 2;
  }
  lv_result_free(&r);
  return results;
}

/* ------------------------------------------------------------------ misc */

static int l_tostring(lua_State *L) {
  lp_program *lp = luaL_checkudata(L, 1, LP_METATABLE);
  lua_pushfstring(L, "luma.Program (%s)", lp->p ? lp->p->chunk : "closed");
  return 1;
}

static int l_chunkname(lua_State *L) {
  lp_program *lp = lp_check(L, 1);
  lua_pushstring(L, lp->p->chunk);
  return 1;
}

static int l_ast(lua_State *L) {
  lp_program *lp = lp_check(L, 1);
  lt_push_program(L, lp->p);
  return 1;
}

/* ------------------------------------------------ the methods that run it */

static const pm_tool *check_tool(lua_State *L, lp_program *lp, int idx) {
  luaL_checktype(L, idx, LUA_TSTRING);
  const pm_tool *t = lp_find_tool(L, lp, idx);
  if (!t) {
    const char *near = pm_near_tool(lp->p, lua_tostring(L, idx));
    if (near) lua_pushfstring(L, "Unknown tool '%s'. Did you mean '%s'?", lua_tostring(L, idx), near);
    else lua_pushfstring(L, "Unknown tool '%s'.", lua_tostring(L, idx));
    le_raise(L, "TOOL_NOT_FOUND", lua_tostring(L, -1), 0);
  }
  return t;
}

/* program:register(name, fn): a handler run in this Lua state */
static int l_register(lua_State *L) {
  lp_program *lp = lp_check(L, 1);
  return lg_register(L, lp->pg, check_tool(L, lp, 2));
}

/* program:attach(module) -> { tool names registered } */
static int l_attach(lua_State *L) {
  return lg_attach(L, lp_check(L, 1)->pg);
}

/* program:missing_handlers() -> { declared tools without a handler }, but
   for those the host handles (handler: "host") */
static int l_missing(lua_State *L) {
  return lg_missing(L, lp_check(L, 1)->pg);
}

/* program:configure{ ... } */
static int l_configure(lua_State *L) {
  return lg_configure(L, lp_check(L, 1)->pg);
}

/* program:scope(agent) -> a scope for one agent method call */
static int l_scope(lua_State *L) {
  return lr_scope(L, lp_check(L, 1)->pg);
}

/* program:call(name, input) -> result, meta: a direct call outside any agent */
static int l_call(lua_State *L) {
  lp_program *lp = lp_check(L, 1);
  const pm_tool *t = check_tool(L, lp, 2);
  luaL_checkany(L, 3);
  return lr_call(L, lp->pg, 0, t, 3);
}

/* program:invoke(scope or nil, name, input) -> result, meta */
static int l_invoke(lua_State *L) {
  lp_program *lp = lp_check(L, 1);
  const pm_tool *t = check_tool(L, lp, 3);
  luaL_checkany(L, 4);
  return lr_call(L, lp->pg, lua_isnil(L, 2) ? 0 : 2, t, 4);
}

/* program:start(name, input [, { scope = }]) -> a luma.Call to poll */
static int l_start(lua_State *L) {
  lp_program *lp = lp_check(L, 1);
  const pm_tool *t = check_tool(L, lp, 2);
  luaL_checkany(L, 3);
  return lr_start(L, lp->pg, t, 3, 4, 1);
}

/* core.start_json(program, name, json) -> a luma.Call: program:start with
   the input as JSON text (libluma's luma_start), decoded as
   core.json_decode decodes it (null: {}) and taken by the call as it is,
   without program:start's copy, since nothing else holds it. A text that
   is not JSON is JSON_INVALID before the tool is looked up. */
static int l_start_json(lua_State *L) {
  lp_program *lp = lp_check(L, 1);
  size_t len;
  const char *json = luaL_checklstring(L, 3, &len);
  char err[160];
  lua_settop(L, 3);
  if (!lj_push_text(L, json, len, LIM_JSON_DEPTH, err, sizeof err)) {
    lua_pushfstring(L, "the input is not JSON: %s", err);
    return le_raise_code(L, LE_JSON_INVALID, lua_tostring(L, -1), 0);
  }
  if (lua_type(L, 4) == LUA_TLIGHTUSERDATA && lua_touserdata(L, 4) == NULL) {
    lua_pop(L, 1);
    lua_newtable(L);
  }
  const pm_tool *t = check_tool(L, lp, 2);
  return lr_start(L, lp->pg, t, 4, 0, 0);
}

/* program:resume(run [, listen]) -> the answer of a durable ask's run */
static int l_resume(lua_State *L) {
  return la_resume(L, lp_check(L, 1)->pg);
}

/* program:decide(run, call, approved [, reason [, input]]) -> seq */
static int l_decide(lua_State *L) {
  return la_decide(L, lp_check(L, 1)->pg);
}

/* program:start_resume(run [, listen]) -> a luma.Ask to poll */
static int l_start_resume(lua_State *L) {
  return la_start_resume(L, lp_check(L, 1)->pg);
}

/* program:ask(scope, prompt, schema [, using]) -> the model's answer, and the
   sources it cites (as ask:citations()) */
static int l_ask(lua_State *L) {
  return la_ask(L, lp_check(L, 1)->pg);
}

/* program:start_ask(scope, prompt, schema [, using]) -> a luma.Ask to poll */
static int l_start_ask(lua_State *L) {
  return la_start_ask(L, lp_check(L, 1)->pg);
}

/* program:call_all({ { name, input }, ... } [, { concurrency =, scope = }]) */
static int l_call_all(lua_State *L) {
  return lr_call_all(L, lp_check(L, 1)->pg);
}

/* program:check_return(agent, method, value) -> true [, warnings] | nil, err */
static int l_check_return(lua_State *L) {
  return lr_check_return(L, lp_check(L, 1)->pg);
}

void lp_open(lua_State *L) {
  static const luaL_Reg methods[] = {
    { "schema", l_schema },
    { "json_schema", l_json_schema },
    { "tools", l_tools },
    { "validate", l_validate },
    { "declaration", l_declaration },
    { "declarations", l_declarations },
    { "chunkname", l_chunkname },
    { "ast", l_ast },
    { "register", l_register },
    { "attach", l_attach },
    { "missing_handlers", l_missing },
    { "configure", l_configure },
    { "scope", l_scope },
    { "call", l_call },
    { "invoke", l_invoke },
    { "start", l_start },
    { "ask", l_ask },
    { "start_ask", l_start_ask },
    { "resume", l_resume },
    { "start_resume", l_start_resume },
    { "decide", l_decide },
    { "call_all", l_call_all },
    { "check_return", l_check_return },
    { "close", lp_close },
    { NULL, NULL }
  };
  static const luaL_Reg meta[] = {
    { "__gc", lp_close },
    { "__close", lp_close },
    { "__tostring", l_tostring },
    { NULL, NULL }
  };
  if (luaL_newmetatable(L, LP_METATABLE)) {
    lc_setfuncs(L, meta, 0);
    lua_newtable(L);
    lua_setfield(L, -2, "__index");
    lua_pushstring(L, LP_METATABLE);
    lua_setfield(L, -2, "__name");
  }
  /* core.Program: the methods, so that the Lua side can add its own. Set
     at every opening: the metatable outlives a package.loaded that is
     emptied (busted's insulation), and a second luma/init.lua must wrap
     these, not the first one's wrappers. */
  lua_getfield(L, -1, "__index");
  lua_pushvalue(L, -2);
  lc_setfuncs(L, methods, 1);
  lua_setfield(L, -3, "Program");
  lua_pop(L, 1);
  static const luaL_Reg fns[] = {
    { "compile", l_compile },
    { "mcp_servers", l_mcp_servers },
    { NULL, NULL }
  };
  lc_setfuncs(L, fns, 0);
  /* as the methods, it knows a program by the metatable, its upvalue */
  luaL_getmetatable(L, LP_METATABLE);
  lua_pushcclosure(L, l_start_json, 1);
  lua_setfield(L, -2, "start_json");
}
