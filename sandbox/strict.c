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
 * and luma.http with allow_network. Library tables are read-only, the string
 * metatable is hidden, and the globals are locked once the module's code ran.
 */
#define _XOPEN_SOURCE 700
#include "internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <lauxlib.h>
#include <lualib.h>

#include "compat.h"
#include "crypto.h"
#include "http.h"
#include "ljson.h"

#if LUA_VERSION_NUM >= 504

static int is_locked(lua_State *L, int idx);
static int refuse_metatable_write(lua_State *L);

/* The project's root, for io: kept in the registry under this key's address. */
static const char root_key = 0;

/* ------------------------------------------------------------------ base */

/* collectgarbage: "collect", "step", "count" and "isrunning"; a module
   cannot stop the collector nor retune it. */
static int s_collectgarbage(lua_State *L) {
  sx_tick(L);   /* called in a loop, each call can be long: check the deadline */
  static const char *const allowed[] = { "collect", "step", "count", "isrunning", NULL };
  const char *opt = luaL_optstring(L, 1, "collect");
  int i = 0;
  while (allowed[i] && strcmp(allowed[i], opt) != 0) i++;
  if (!allowed[i]) return luaL_error(L, "collectgarbage('%s') is not available in a strict tool module", opt);
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
static int s_rawset(lua_State *L) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
  if (lua_rawequal(L, 1, -1)) return luaL_error(L, "rawset on the globals is not available in a strict tool module");
  lua_pop(L, 1);
  luaL_checktype(L, 1, LUA_TTABLE);
  if (is_locked(L, 1)) return refuse_metatable_write(L);
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

/* -------------------------------------------------------------------- io */

/* What a strict module may not write, even inside the project: code and
   configuration, which the next load would trust. */
static int holds_code_or_config(const char *name) {
  size_t n = strlen(name);
  return (n >= 4 && strcmp(name + n - 4, ".lua") == 0) || (n >= 5 && strcmp(name + n - 5, ".luma") == 0) ||
         strcmp(name, "luma.config.json") == 0 || strncmp(name, ".luma", 5) == 0;
}

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

/* The path a strict module names, made absolute against the project's root
   (the process's working folder is the host's, not the module's), pushed
   on the stack; or NULL with the reason in *why. Refused: what does not lie
   inside the project, and, for writing, code and configuration. A file that
   exists is resolved with its symlinks; a new one by its folder, and a
   symlink that leads nowhere is refused, as opening it would create its
   target. The kernel's views of processes and devices are never inside,
   whatever the project (the environment of the process can be read from
   /proc). */
static const char *project_path(lua_State *L, const char *path, int write, const char **why) {
  *why = "outside the project, not available to a strict tool module";
  lua_pushlightuserdata(L, (void *)&root_key);
  lc_rawget(L, LUA_REGISTRYINDEX);
  const char *root = lua_tostring(L, -1);
  if (!root || !*path) {
    lua_pop(L, 1);
    return NULL;
  }
  if (path[0] == '/') lua_pushstring(L, path);
  else lua_pushfstring(L, "%s/%s", root, path);
  const char *full = lua_tostring(L, -1);
  char real[PATH_MAX];
  struct stat st;
  int exists = realpath(full, real) != NULL;
  if (!exists) {
    char dir[PATH_MAX];
    const char *slash = strrchr(full, '/');
    if (slash == full) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - full), full);
    if (lstat(full, &st) == 0 || !realpath(dir, real)) goto refused;
  }
  static const char *const never[] = { "/proc", "/sys", "/dev", NULL };
  for (const char *const *n = never; *n; n++) {
    size_t k = strlen(*n);
    if (strncmp(real, *n, k) == 0 && (real[k] == '/' || real[k] == '\0')) goto refused;
  }
  size_t n = strlen(root);
  if (!((n == 1 && root[0] == '/') || (strncmp(real, root, n) == 0 && (real[n] == '/' || real[n] == '\0'))))
    goto refused;
  if (write && holds_code_or_config(base_name(exists ? real : full))) {
    *why = "a strict tool module cannot write code or configuration (*.lua, *.luma, luma.config.json, .luma*)";
    goto refused;
  }
  lua_remove(L, -2);
  return full;
refused:
  lua_pop(L, 2);
  return NULL;
}

/* The files a strict module has opened, in a weak table: at most
   SX_MAX_FILES are open at once, so that a module cannot take every file
   descriptor of the process. */
#define SX_MAX_FILES 32
static const char files_key = 0;

static int open_files(lua_State *L) {
  lua_pushlightuserdata(L, (void *)&files_key);
  lc_rawget(L, LUA_REGISTRYINDEX);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_pushlightuserdata(L, (void *)&files_key);
    lua_pushvalue(L, -2);
    lua_rawset(L, LUA_REGISTRYINDEX);
  }
  int files = lua_gettop(L), count = 0;
  lua_pushnil(L);
  while (lua_next(L, files)) {
    luaL_Stream *f = luaL_testudata(L, -2, LUA_FILEHANDLE);
    if (f && f->closef) count++;
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return count;
}

static int room_for_a_file(lua_State *L) {
  if (open_files(L) < SX_MAX_FILES) return 1;
  lua_gc(L, LUA_GCCOLLECT, 0);   /* files no longer reachable are closed */
  return open_files(L) < SX_MAX_FILES;
}

static void remember_file(lua_State *L, int idx) {
  if (!luaL_testudata(L, idx, LUA_FILEHANDLE)) return;
  idx = lua_absindex(L, idx);
  lua_pushlightuserdata(L, (void *)&files_key);
  lc_rawget(L, LUA_REGISTRYINDEX);
  lua_pushvalue(L, idx);
  lua_pushboolean(L, 1);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

#define TOO_MANY_FILES "too many open files (at most 32 in a strict tool module)"

/* Calls the original function (upvalue 1) with the first argument replaced
   by the checked path on the top of the stack. */
static int call_with_path(lua_State *L) {
  lua_replace(L, 1);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

static int s_io_open(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  const char *mode = luaL_optstring(L, 2, "r");
  int write = strpbrk(mode, "wa+") != NULL;
  const char *why;
  const char *full = project_path(L, path, write, &why);
  if (!full) {
    lua_pushnil(L);
    lua_pushfstring(L, "%s: %s", path, why);
    return 2;
  }
  if (!room_for_a_file(L)) {
    lua_pushnil(L);
    lua_pushfstring(L, "%s: " TOO_MANY_FILES, path);
    return 2;
  }
  int n = call_with_path(L);
  remember_file(L, 1);
  return n;
}

static int s_io_lines(lua_State *L) {
  if (lua_isnoneornil(L, 1)) return luaL_error(L, "io.lines needs a file name in a strict tool module");
  const char *path = luaL_checkstring(L, 1);
  const char *why;
  const char *full = project_path(L, path, 0, &why);
  if (!full) return luaL_error(L, "%s: %s", path, why);
  if (!room_for_a_file(L)) return luaL_error(L, "%s: " TOO_MANY_FILES, path);
  int n = call_with_path(L);
  if (n >= 4) remember_file(L, 4);   /* Lua 5.4 returns the file as its fourth value */
  return n;
}

/* io.close(file): with no file, the original would close the host's stdout */
static int s_io_close(lua_State *L) {
  luaL_checkudata(L, 1, LUA_FILEHANDLE);
  lua_settop(L, 1);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, 1, LUA_MULTRET);
  return lua_gettop(L);
}

/* ---------------------------------------------------------------- crypto */

static void push_hex(lua_State *L, const unsigned char *d, size_t n) {
  static const char hex[] = "0123456789abcdef";
  char out[129];
  for (size_t i = 0; i < n && i < 64; i++) {
    out[2 * i] = hex[d[i] >> 4];
    out[2 * i + 1] = hex[d[i] & 15];
  }
  lua_pushlstring(L, out, 2 * n);
}

static int c_sha256(lua_State *L) {
  sx_tick(L);   /* called in a loop, each call can be long: check the deadline */
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  unsigned char d[32];
  cr_sha256(s, len, d);
  push_hex(L, d, sizeof d);
  return 1;
}

static int c_hmac(lua_State *L) {
  sx_tick(L);   /* called in a loop, each call can be long: check the deadline */
  size_t klen, len;
  const char *k = luaL_checklstring(L, 1, &klen), *s = luaL_checklstring(L, 2, &len);
  unsigned char d[32];
  cr_hmac_sha256(k, klen, s, len, d);
  push_hex(L, d, sizeof d);
  return 1;
}

static int c_b64_encode(lua_State *L) {
  sx_tick(L);   /* called in a loop, each call can be long: check the deadline */
  size_t len;
  const unsigned char *s = (const unsigned char *)luaL_checklstring(L, 1, &len);
  size_t cap = (len + 2) / 3 * 4 + 1;
  luaL_Buffer b;
  char *out = luaL_buffinitsize(L, &b, cap);
  size_t n = cr_base64_encode(s, len, out, cap);
  luaL_pushresultsize(&b, n);
  return 1;
}

static int c_b64_decode(lua_State *L) {
  sx_tick(L);   /* called in a loop, each call can be long: check the deadline */
  size_t len, n = 0;
  const char *s = luaL_checklstring(L, 1, &len);
  luaL_Buffer b;
  unsigned char *out = (unsigned char *)luaL_buffinitsize(L, &b, len / 4 * 3 + 3);
  if (cr_base64_decode(s, len, out, len / 4 * 3 + 3, &n) != 0) {
    luaL_pushresultsize(&b, 0);
    lua_pushnil(L);
    lua_pushliteral(L, "invalid base64");
    return 2;
  }
  luaL_pushresultsize(&b, n);
  return 1;
}

static int c_random(lua_State *L) {
  sx_tick(L);   /* called in a loop, each call can be long: check the deadline */
  lua_Integer n = luaL_checkinteger(L, 1);
  luaL_argcheck(L, n >= 0 && n <= (1 << 20), 1, "between 0 and 1048576 bytes");
  luaL_Buffer b;
  char *out = luaL_buffinitsize(L, &b, (size_t)n);
  if (cr_random(out, (size_t)n) != 0) return luaL_error(L, "no random bytes available");
  luaL_pushresultsize(&b, (size_t)n);
  return 1;
}

/* ------------------------------------------------------------------- json */

/* lua-cjson's loops run in C, out of reach of the deadline hook, and its
   buffers are outside the state's allocator: what it is given is bounded
   instead, so that one call takes milliseconds at most. */
#define SX_JSON_MAX_TEXT (8u << 20)
#define SX_JSON_MAX_VALUES 1000000u
#define SX_JSON_MAX_DEPTH 100

/* Decoded values take at most this many bytes of the state's memory per
   byte of text (an array of empty tables comes close). */
#define SX_JSON_GROWTH 48

static int j_decode(lua_State *L) {
  sx_tick(L);   /* called in a loop, each call can be long: check the deadline */
  size_t len;
  luaL_checklstring(L, 1, &len);
  if (len > SX_JSON_MAX_TEXT) return luaL_error(L, "json.decode: the text is longer than %d bytes", (int)SX_JSON_MAX_TEXT);
  /* lua-cjson keeps a buffer of its own while it decodes, and would lose
     it if the state's memory ran out half-way: it runs only with room */
  sx_state *s = sx_state_of(L);
  if (s->memory_limit && s->memory + len * SX_JSON_GROWTH > s->memory_limit)
    return luaL_error(L, "json.decode: decoding %d bytes may need more memory than the state has left", (int)len);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_pushvalue(L, 1);
  lua_call(L, 1, 1);
  return 1;
}

typedef struct json_size { size_t values, bytes; } json_size;

/* Counts the values and string bytes under idx (raw, as lua-cjson reads),
   stopping at the limits; deeper than the depth limit, cjson refuses. */
static void measure(lua_State *L, int idx, int depth, json_size *n) {
  if (++n->values > SX_JSON_MAX_VALUES || n->bytes > SX_JSON_MAX_TEXT) return;
  if ((n->values & 4095) == 0) sx_tick(L);
  if (lua_type(L, idx) == LUA_TSTRING) {
    n->bytes += lc_rawlen(L, idx);
  } else if (lua_type(L, idx) == LUA_TTABLE && depth < SX_JSON_MAX_DEPTH) {
    luaL_checkstack(L, 3, "json.encode");
    lua_pushnil(L);
    while (lua_next(L, idx)) {
      int top = lua_gettop(L);
      measure(L, top - 1, depth + 1, n);
      measure(L, top, depth + 1, n);
      lua_pop(L, 1);
      if (n->values > SX_JSON_MAX_VALUES || n->bytes > SX_JSON_MAX_TEXT) {
        lua_pop(L, 1);
        return;
      }
    }
  }
}

static int j_encode(lua_State *L) {
  sx_tick(L);   /* called in a loop, each call can be long: check the deadline */
  luaL_checkany(L, 1);
  lua_settop(L, 1);
  json_size n = { 0, 0 };
  measure(L, 1, 0, &n);
  if (n.values > SX_JSON_MAX_VALUES || n.bytes > SX_JSON_MAX_TEXT)
    return luaL_error(L, "json.encode: the value is larger than %d values or %d bytes of text",
                      (int)SX_JSON_MAX_VALUES, (int)SX_JSON_MAX_TEXT);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_pushvalue(L, 1);
  lua_call(L, 1, 1);
  return 1;
}

/* Pushes { encode, decode, null } of lua-cjson, set up strictly. */
static void push_json(lua_State *L) {
  lua_getglobal(L, "require");
  lua_pushliteral(L, "cjson");
  lua_call(L, 1, 1);
  int cjson = lua_gettop(L);
  static const struct { const char *fn; int arg; } settings[] = {
    { "decode_invalid_numbers", 0 }, { "encode_invalid_numbers", 0 },
    { "decode_max_depth", SX_JSON_MAX_DEPTH }, { "encode_max_depth", SX_JSON_MAX_DEPTH }, { "encode_number_precision", 14 },
  };
  for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) {
    lua_getfield(L, cjson, settings[i].fn);
    if (settings[i].arg) lua_pushinteger(L, settings[i].arg); else lua_pushboolean(L, 0);
    lua_call(L, 1, 0);
  }
  lua_createtable(L, 0, 3);
  lua_getfield(L, cjson, "encode");
  lua_pushcclosure(L, j_encode, 1);
  lua_setfield(L, -2, "encode");
  lua_getfield(L, cjson, "decode");
  lua_pushcclosure(L, j_decode, 1);
  lua_setfield(L, -2, "decode");
  lua_getfield(L, cjson, "null");
  lua_setfield(L, -2, "null");
  lua_remove(L, cjson);
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

/* Keeps only `names` of the table on top. */
static void keep(lua_State *L, const char *const *names) {
  lua_newtable(L);
  for (; *names; names++) {
    lua_getfield(L, -2, *names);
    lua_setfield(L, -2, *names);
  }
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
  sx_push_tool_error(L, code, message, retryable);
}

void sx_open_strict(lua_State *L, const sx_module *m) {
  static const struct { const char *name; lua_CFunction open; } libs[] = {
    { "_G", luaopen_base }, { LUA_LOADLIBNAME, luaopen_package }, { LUA_COLIBNAME, luaopen_coroutine },
    { LUA_TABLIBNAME, luaopen_table }, { LUA_STRLIBNAME, luaopen_string }, { LUA_MATHLIBNAME, luaopen_math },
    { LUA_UTF8LIBNAME, luaopen_utf8 },
  };
  for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++) {
    luaL_requiref(L, libs[i].name, libs[i].open, 1);
    lua_pop(L, 1);
  }
  static const char *const removed[] = { "dofile", "loadfile", "warn", NULL };
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

  const sx_policy *p = &m->policy;
  if (p->builtins & SX_JSON) {
    push_json(L);   /* needs the C searcher once, before it goes */
    provide(L, "json");
  }
  if ((p->builtins & SX_OS) || p->allow_env) {
    static const char *const os_names[] = { "clock", "date", "time", "difftime", NULL };
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
    static const char *const io_names[] = { "type", NULL };
    lua_pushlightuserdata(L, (void *)&root_key);
    lua_pushstring(L, m->project_root ? m->project_root : "/nonexistent");
    lua_rawset(L, LUA_REGISTRYINDEX);
    luaL_requiref(L, "io", luaopen_io, 0);
    int full = lua_gettop(L);
    lua_pushvalue(L, full);
    keep(L, io_names);
    lua_getfield(L, full, "open");
    lua_pushcclosure(L, s_io_open, 1);
    lua_setfield(L, -2, "open");
    lua_getfield(L, full, "lines");
    lua_pushcclosure(L, s_io_lines, 1);
    lua_setfield(L, -2, "lines");
    lua_getfield(L, full, "close");
    lua_pushcclosure(L, s_io_close, 1);
    lua_setfield(L, -2, "close");
    lua_remove(L, full);
    provide(L, "io");
  }
  if (p->builtins & SX_CRYPTO) {
    static const luaL_Reg crypto_fns[] = {
      { "sha256", c_sha256 }, { "hmac_sha256", c_hmac }, { "base64_encode", c_b64_encode },
      { "base64_decode", c_b64_decode }, { "random_bytes", c_random }, { NULL, NULL }
    };
    lc_newlib(L, crypto_fns);
    provide(L, "crypto");
  }
  sx_open_luma(L);
  if (p->allow_network) {
    lua_getglobal(L, "luma");
    sh_limits lim = { 30000, 8u << 20, 8u << 20 };
    sh_set_error_pusher(http_error);
    sh_push_http(L, http_deadline, &lim);
    lua_setfield(L, -2, "http");
    lua_pop(L, 1);
  }

  /* require: the preloaded and provided modules, plus Lua files found by
     the dependency searcher (the manifest's dependencies, else the project) */
  lua_getglobal(L, LUA_LOADLIBNAME);
  lua_newtable(L);
  lua_getfield(L, -2, LC_SEARCHERS);
  lua_rawgeti(L, -1, 1);
  lua_rawseti(L, -3, 1);
  lua_pop(L, 1);
  lua_pushcfunction(L, sx_dependency_searcher);
  lua_rawseti(L, -2, 2);
  lua_setfield(L, -2, LC_SEARCHERS);
  static const char *const package_fields[] = { "loadlib", "cpath", "path", "searchpath", NULL };
  for (const char *const *f = package_fields; *f; f++) {
    lua_pushnil(L);
    lua_setfield(L, -2, *f);
  }
  lua_pop(L, 1);
  lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  static const char *const unloaded[] = { LUA_LOADLIBNAME, "cjson", NULL };
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
  sx_push_tool_error_mt(L);
  protect_metatable(L);
  lj_push_array_mt(L);
  protect_metatable(L);
  luaL_getmetatable(L, LUA_FILEHANDLE);
  protect_metatable(L);
  luaL_getmetatable(L, SH_TRANSFER_MT);
  protect_metatable(L);
  static const char *const frozen[] = { "string", "table", "math", "utf8", "coroutine", "os", "io", "json", "crypto", "luma", NULL };
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
void sx_open_strict(lua_State *L, const sx_module *m) { (void)m; luaL_error(L, "no strict sandbox on this Lua"); }
void sx_freeze_strict(lua_State *L) { (void)L; }
void sx_lock_globals(lua_State *L) { (void)L; }

#endif
