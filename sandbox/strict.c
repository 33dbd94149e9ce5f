/*
 * The libraries of a strict state, built from an explicit allowlist (never
 * by deleting from a full state, which leaves copies in package.loaded and
 * the registry):
 *   base      assert error getmetatable ipairs next pairs pcall rawequal rawget
 *             rawlen rawset (not on the globals) select setmetatable (no __gc)
 *             tonumber tostring type xpcall _VERSION, load (text only),
 *             collectgarbage (collect step count isrunning), print (to
 *             stderr, bounded), require
 *             (only what the policy gives and the manifest's dependencies)
 *   string    without dump; coroutine, table, math, utf8; luma (ToolError, null)
 * and what allow_builtins names:
 *   os        clock date time difftime (getenv only with allow_env)
 *   io        open lines close type, for files inside the project (a
 *             relative path is read from the project's root)
 *   json      lua-cjson's encode and decode (its settings are not exposed)
 *   crypto    sha256 hmac_sha256 base64_encode base64_decode random_bytes
 * (io, json and crypto are in strict_io.c, strict_json.c, strict_crypto.c)
 * and luma.http with allow_network. Library tables are read-only, the string
 * metatable is hidden, and the globals are locked once the module's code ran.
 */
#include "strict.h"

#include <limits.h>
#include <string.h>

#include <lauxlib.h>
#include <lualib.h>

#include "compat.h"
#include "http.h"
#include "lerror.h"
#include "ljson.h"
#include "require.h"
#include "state.h"

#if LUA_VERSION_NUM >= 504

/* The libraries every strict state opens. */
static const struct { const char *name; lua_CFunction open; } libs[] = {
  { "_G", luaopen_base }, { LUA_LOADLIBNAME, luaopen_package }, { LUA_COLIBNAME, luaopen_coroutine },
  { LUA_TABLIBNAME, luaopen_table }, { LUA_STRLIBNAME, luaopen_string }, { LUA_MATHLIBNAME, luaopen_math },
  { LUA_UTF8LIBNAME, luaopen_utf8 },
};
/* Globals of the base library that a strict state goes without. */
static const char *const removed[] = { "dofile", "loadfile", "warn", NULL };
/* The options of collectgarbage in a strict state (s_collectgarbage). */
static const char *const gc_options[] = { "collect", "step", "count", "isrunning", NULL };
/* os, with the builtin "os" (getenv comes with allow_env alone). */
static const char *const os_names[] = { "clock", "date", "time", "difftime", NULL };
/* The fields of package that go, and the modules left out of package.loaded. */
static const char *const package_fields[] = { "loadlib", "cpath", "path", "searchpath", NULL };
static const char *const unloaded[] = { LUA_LOADLIBNAME, "cjson", NULL };
/* The library tables made read-only, as globals and in package.loaded. */
static const char *const frozen[] = { "string", "table", "math", "utf8", "coroutine", "os", "io", "json", "crypto", "luma", NULL };

static int is_locked(lua_State *L, int idx);
static int refuse_metatable_write(lua_State *L);

/* ------------------------------------------------------------------ base */

/* collectgarbage: "collect", "step", "count" and "isrunning"; a module
   cannot stop the collector nor retune it. */
static int s_collectgarbage(lua_State *L) {
  sx_tick(L);   /* called in a loop, each call can be long: check the deadline */
  const char *opt = luaL_optstring(L, 1, "collect");
  int i = 0;
  while (gc_options[i] && strcmp(gc_options[i], opt) != 0) i++;
  if (!gc_options[i]) return luaL_error(L, "collectgarbage('%s') is not available in a strict tool module", opt);
  lua_Integer step = luaL_optinteger(L, 2, 0);
  lua_settop(L, 0);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_pushstring(L, opt);
  lua_pushinteger(L, step);
  lua_call(L, 2, LUA_MULTRET);
  return lua_gettop(L);
}

/* setmetatable without __gc: finalizers run with the hook off, so a
   finalizer could not be stopped at the deadline. */
static int s_setmetatable(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);   /* checked here, so errors name setmetatable */
  luaL_argexpected(L, lua_type(L, 2) == LUA_TNIL || lua_type(L, 2) == LUA_TTABLE, 2, "nil or table");
  if (lua_type(L, 2) == LUA_TTABLE) {
    lua_pushliteral(L, "__gc");
    lc_rawget(L, 2);
    if (!lua_isnil(L, -1)) return luaL_error(L, "__gc metamethods are not allowed in a strict tool module");
    lua_pop(L, 1);
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_pushvalue(L, 1);
  lua_pushvalue(L, 2);
  lua_call(L, 2, 1);
  return 1;
}

/* rawset on anything but the globals, which stay locked */
static int refuse_write(lua_State *L);

/* A library table of the module: a proxy whose writes are refused. */
static int is_library(lua_State *L, int idx) {
  if (!lua_getmetatable(L, idx)) return 0;
  lua_pushliteral(L, "__newindex");
  lua_rawget(L, -2);
  int library = lua_tocfunction(L, -1) == refuse_write;
  lua_pop(L, 2);
  return library;
}

static int s_rawset(lua_State *L) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
  if (lua_rawequal(L, 1, -1)) return luaL_error(L, "rawset on the globals is not available in a strict tool module");
  lua_pop(L, 1);
  luaL_checktype(L, 1, LUA_TTABLE);
  if (is_locked(L, 1)) return refuse_metatable_write(L);
  if (is_library(L, 1)) return refuse_write(L);   /* rawset would bypass the proxy's __newindex */
  luaL_checkany(L, 2);
  luaL_checkany(L, 3);
  lua_settop(L, 3);
  lua_rawset(L, 1);
  lua_settop(L, 1);
  return 1;
}

/* Replaces _G[name] by fn, keeping the original as its upvalue. */
static void wrap_global(lua_State *L, const char *name, lua_CFunction fn) {
  lua_getglobal(L, name);
  lua_pushcclosure(L, fn, 1);
  lua_setglobal(L, name);
}

/* --------------------------------------------------------------- helpers */

static int refuse_write(lua_State *L) {
  return luaL_error(L, "the library tables of a strict tool module are read-only");
}

/* pairs(proxy): an iterator that holds the real table as its upvalue, so
   that the real (writable) table is never handed to the module */
static int proxy_next(lua_State *L) {
  lua_settop(L, 2);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_replace(L, 1);
  if (lua_next(L, 1)) return 2;
  return 0;
}

static int proxy_pairs(lua_State *L) {
  lua_getmetatable(L, 1);
  lua_getfield(L, -1, "__index");
  lua_pushcclosure(L, proxy_next, 1);
  lua_pushvalue(L, 1);
  lua_pushnil(L);
  return 3;
}

/* Replaces the table on top by a read-only proxy of it. */
static void read_only(lua_State *L) {
  lua_newtable(L);
  lua_createtable(L, 0, 4);
  lua_pushvalue(L, -3);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, refuse_write);
  lua_setfield(L, -2, "__newindex");
  lua_pushcfunction(L, proxy_pairs);
  lua_setfield(L, -2, "__pairs");
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "__metatable");
  lua_setmetatable(L, -2);
  lua_remove(L, -2);
}

/* Publishes the table on top as global `name` and as require(name). */
static void provide(lua_State *L, const char *name) {
  lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  lua_pushvalue(L, -2);
  lua_setfield(L, -2, name);
  lua_pop(L, 1);
  lua_setglobal(L, name);
}

static long long http_deadline(lua_State *L) {
  sx_state *s = sx_state_of(L);
  if (sx_cancelled(s)) return 0;
  if (!s->deadline_ns) return -1;
  long long left = (s->deadline_ns - sx_now_ns()) / 1000000;
  return left > 0 ? left : 0;
}

/* A request ended by the call's deadline is the call's stop (TOOL_TIMEOUT,
   which pcall cannot swallow), not an HTTP error the handler could retry:
   libcurl ends it at the deadline rounded down to the millisecond. */
static void http_error(lua_State *L, const char *code, const char *message, int retryable) {
  sx_state *s = sx_state_of(L);
  if (strcmp(code, "HTTP_TIMEOUT") == 0 && s->deadline_ns && sx_now_ns() >= s->deadline_ns - 5000000LL) {
    sx_push_timeout(L);
    return;
  }
  le_push(L, code, message, retryable, 0);
}

/* A request made from a call's own coroutine, where it can yield, in a
   call that may wait, suspends the call (sx_suspend) until its transfer
   ends; its end's callback is the call's wake. */
static int http_may_yield(lua_State *L, void (**done)(void *ud), void **ud) {
  sx_state *s = sx_state_of(L);
  sx_run *run = s->run;
  if (!run || run->co != L || !run->opts.may_wait || !run->opts.wake || !lua_isyieldable(L) || sx_cancelled(s))
    return 0;
  *done = run->opts.wake;
  *ud = run->opts.wake_ud;
  return 1;
}

static int http_yield(lua_State *L, void *transfer, lua_KContext ctx, lua_KFunction k) {
  sx_run *run = sx_state_of(L)->run;
  run->transfer = transfer;
  run->wake_ns = LLONG_MAX;
  return lua_yieldk(L, 0, ctx, k);
}

static const sh_wait http_wait = { http_may_yield, http_yield };

void sx_open_strict(lua_State *L, const sx_strict *conf) {
  for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++) {
    luaL_requiref(L, libs[i].name, libs[i].open, 1);
    lua_pop(L, 1);
  }
  for (const char *const *r = removed; *r; r++) {
    lua_pushnil(L);
    lua_setglobal(L, *r);
  }
  wrap_global(L, "setmetatable", s_setmetatable);
  wrap_global(L, "collectgarbage", s_collectgarbage);
  lua_pushcfunction(L, s_rawset);
  lua_setglobal(L, "rawset");
  lua_getglobal(L, "string");
  lua_pushnil(L);
  lua_setfield(L, -2, "dump");
  lua_pop(L, 1);

  const sx_policy *p = conf->policy;
  if (p->builtins & SX_JSON) {
    sx_push_strict_json(L);   /* needs the C searcher once, before it goes */
    provide(L, "json");
  }
  if ((p->builtins & SX_OS) || p->allow_env) {
    luaL_requiref(L, "os", luaopen_os, 0);
    lua_newtable(L);
    if (p->builtins & SX_OS)
      for (const char *const *n = os_names; *n; n++) {
        lua_getfield(L, -2, *n);
        lua_setfield(L, -2, *n);
      }
    if (p->allow_env) {
      lua_getfield(L, -2, "getenv");
      lua_setfield(L, -2, "getenv");
    }
    lua_remove(L, -2);
    provide(L, "os");
  }
  if (p->builtins & SX_IO) {
    sx_push_strict_io(L, conf->project_root);
    provide(L, "io");
  }
  if (p->builtins & SX_CRYPTO) {
    sx_push_strict_crypto(L);
    provide(L, "crypto");
  }
  sx_open_luma(L);
  if (p->allow_network) {
    lua_getglobal(L, "luma");
    sh_push_http_waiting(L, http_deadline, http_error, &http_wait, NULL);
    lua_setfield(L, -2, "http");
    lua_pop(L, 1);
  }

  /* require: the preloaded and provided modules, plus Lua files found by
     the dependency searcher (the manifest's dependencies, else the project) */
  lua_getglobal(L, LUA_LOADLIBNAME);
  sx_set_searchers(L, -1);
  for (const char *const *f = package_fields; *f; f++) {
    lua_pushnil(L);
    lua_setfield(L, -2, *f);
  }
  lua_pop(L, 1);
  lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  for (const char *const *u = unloaded; *u; u++) {
    lua_pushnil(L);
    lua_setfield(L, -2, *u);
  }
  lua_pop(L, 1);
  lua_pushnil(L);
  lua_setglobal(L, LUA_LOADLIBNAME);

}

/* The lock on the metatables the core made (upvalue-free, one per state):
   their own metatable, refusing new fields. */
static const char lock_key = 0;

static int refuse_metatable_write(lua_State *L) {
  return luaL_error(L, "the metatables of a strict tool module's values are read-only");
}

/* Hides the metatable on top from getmetatable and locks it: no field can be
   added to it, by assignment or rawset. A __gc planted on the metatable of
   a value the core makes (an error, a file, an array) would run with hooks
   off, where nothing could stop it. Pops it. */
static void protect_metatable(lua_State *L) {
  if (!lua_istable(L, -1)) {
    lua_pop(L, 1);
    return;
  }
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "__metatable");
  lua_pushlightuserdata(L, (void *)&lock_key);
  lc_rawget(L, LUA_REGISTRYINDEX);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_createtable(L, 0, 2);
    lua_pushcfunction(L, refuse_metatable_write);
    lua_setfield(L, -2, "__newindex");
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    lua_pushlightuserdata(L, (void *)&lock_key);
    lua_pushvalue(L, -2);
    lua_rawset(L, LUA_REGISTRYINDEX);
  }
  lua_setmetatable(L, -2);
  lua_pop(L, 1);
}

/* Whether the table at idx is a locked metatable. */
static int is_locked(lua_State *L, int idx) {
  if (!lua_getmetatable(L, idx)) return 0;
  lua_pushlightuserdata(L, (void *)&lock_key);
  lc_rawget(L, LUA_REGISTRYINDEX);
  int locked = lua_rawequal(L, -1, -2);
  lua_pop(L, 2);
  return locked;
}

/* Once every library is in place: the string metatable and the metatables
   of the core's values cannot be reached or changed, nor the library tables
   (as globals or through require). */
void sx_freeze_strict(lua_State *L) {
  lua_pushliteral(L, "");
  lua_getmetatable(L, -1);
  protect_metatable(L);
  lua_pop(L, 1);
  le_push_metatable(L);
  protect_metatable(L);
  lj_push_array_mt(L);
  protect_metatable(L);
  luaL_getmetatable(L, LUA_FILEHANDLE);
  protect_metatable(L);
  luaL_getmetatable(L, SH_TRANSFER_MT);
  protect_metatable(L);
  lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  int loaded = lua_gettop(L);
  for (const char *const *f = frozen; *f; f++) {
    lua_getglobal(L, *f);
    if (lua_istable(L, -1)) {
      read_only(L);
      lua_pushvalue(L, -1);
      lua_setfield(L, loaded, *f);
      lua_setglobal(L, *f);
    } else {
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
}

static int refuse_global(lua_State *L) {
  return luaL_error(L, "cannot set the global '%s' in a strict tool module (use a local)",
                    lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "?");
}

void sx_lock_globals(lua_State *L) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
  int g = lua_gettop(L);
  lua_newtable(L);
  int hidden = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, g)) {
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_rawset(L, hidden);
  }
  /* emptied after the walk: clearing during it is allowed, adding is not */
  lua_pushnil(L);
  while (lua_next(L, hidden)) {
    lua_pop(L, 1);
    lua_pushvalue(L, -1);
    lua_pushnil(L);
    lua_rawset(L, g);
  }
  lua_createtable(L, 0, 3);
  lua_pushvalue(L, hidden);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, refuse_global);
  lua_setfield(L, -2, "__newindex");
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "__metatable");
  lua_setmetatable(L, g);
  lua_settop(L, g - 1);
}

#else /* LuaJIT and Lua 5.1: see sandbox/README.md */

/* never called: a policy is refused on these Lua versions (core/lmodule.c) */
void sx_open_strict(lua_State *L, const sx_strict *conf) { (void)conf; luaL_error(L, "no strict sandbox on this Lua"); }
void sx_freeze_strict(lua_State *L) { (void)L; }
void sx_lock_globals(lua_State *L) { (void)L; }

#endif
