/* luaopen_luma_core: one entry that opens each concern's binding. */
#define _GNU_SOURCE   /* dladdr, RTLD_NODELETE */
#include "lcore.h"

#include <ctype.h>
#include <dlfcn.h>
#include <signal.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "diag.h"
#include "libcurl.h"
#include "ljournal.h"
#include "lmcp.h"
#include "lmcphttp.h"
#include "lmcpclient.h"
#include "lmcpremote.h"

#include "compat.h"
#include "lerror.h"
#include "luma_limits.h"
#include "ljson.h"
#include "lmodule.h"
#include "lprogram.h"
#include "lask.h"
#include "lruntime.h"
#include "sandbox.h"

/* core.realpath(path) -> absolute path, or nil and the reason */
static int l_realpath(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  char out[PATH_MAX];
  if (!realpath(path, out)) {
    lua_pushnil(L);
    lua_pushstring(L, strerror(errno));
    return 2;
  }
  lua_pushstring(L, out);
  return 1;
}

/* core.suggest(word, { candidates }) -> the closest candidate, or nil */
static int l_suggest(lua_State *L) {
  const char *word = luaL_checkstring(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  const char *names[LIM_SUGGEST_LIST];
  int n = 0;
  for (int i = 1; n < LIM_SUGGEST_LIST; i++) {
    lc_rawgeti(L, 2, i);
    if (lua_type(L, -1) != LUA_TSTRING) { lua_pop(L, 1); break; }
    names[n++] = lua_tostring(L, -1);
    lua_pop(L, 1);  /* kept alive by the table */
  }
  const char *best = dg_suggest(word, names, n);
  if (best) lua_pushstring(L, best); else lua_pushnil(L);
  return 1;
}

/* core.monotonic_ms() -> milliseconds (a float) on a clock that only goes
   forward: for measuring wall time, in specs and benchmarks */
static int l_monotonic_ms(lua_State *L) {
  lua_pushnumber(L, (lua_Number)sx_now_ns() / 1e6);
  return 1;
}

/* core.deadline_signal() -> the signal that stops handlers, or false (the
   count hook); core.deadline_signal(n | false) chooses: true, or nil and why */
static int l_deadline_signal(lua_State *L) {
  if (lua_gettop(L) == 0) {
    int signo = sx_deadline_signal();
    if (signo) lua_pushinteger(L, signo); else lua_pushboolean(L, 0);
    return 1;
  }
  int signo = 0;
  if (lua_type(L, 1) != LUA_TBOOLEAN || lua_toboolean(L, 1)) {
    lua_Integer n = luaL_checkinteger(L, 1);
    luaL_argcheck(L, n > 0 && n < 128, 1, "a signal number, or false for the count hook, expected");
    signo = (int)n;
  }
  if (sx_set_deadline_signal(signo) != 0) {
    lua_pushnil(L);
    lua_pushfstring(L, "signal %d cannot stop handlers: a real-time signal (%d to %d) that the process does not "
                    "handle already is needed, and a build without ThreadSanitizer; handlers get the count hook",
                    signo, (int)SIGRTMIN, (int)SIGRTMAX);
    return 2;
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* core.isatty(fd) */
static int l_isatty(lua_State *L) {
  lua_pushboolean(L, isatty((int)luaL_checkinteger(L, 1)));
  return 1;
}

/* core.limits: { [name] = default } for every bound of base/luma_limits.h,
   the name in lower case */
static void push_limits(lua_State *L) {
  static const struct { const char *name; int value; } limits[] = {
#define LIM_ROW_(name, value, settable, doc) { #name, LIM_##name },
    LUMA_LIMITS(LIM_ROW_)
#undef LIM_ROW_
  };
  int n = (int)(sizeof limits / sizeof limits[0]);
  lua_createtable(L, 0, n);
  for (int i = 0; i < n; i++) {
    char lower[64];
    size_t j = 0;
    for (; limits[i].name[j] && j < sizeof lower - 1; j++)
      lower[j] = (char)tolower((unsigned char)limits[i].name[j]);
    lower[j] = '\0';
    lua_pushinteger(L, limits[i].value);
    lua_setfield(L, -2, lower);
  }
}

/* The module stays loaded once loaded: it runs threads of its own (the
   runtime's pool, the transport's, the deadline watch), and a Lua state
   that closes unloads its C modules, which would unmap their code, and
   leave stale thread-local slots of the libraries it brought in. */
static void stay_loaded(void) {
  Dl_info self;
  if (dladdr((void *)stay_loaded, &self) && self.dli_fname)
    dlopen(self.dli_fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
}

/* core.confinement() -> { landlock_abi = n, holds = { sentence, ... },
   missing = { sentence, ... } }: what confines a process-isolated handler
   on this machine (sandbox/confine.c) */
static int l_confinement(lua_State *L) {
  const char *holds[16], *missing[16];
  int nmissing = 0;
  int nholds = sx_confine_layers(holds, 16, missing, 16, &nmissing);
  lua_createtable(L, 0, 3);
  lua_pushinteger(L, sx_landlock_abi());
  lua_setfield(L, -2, "landlock_abi");
  const char **lists[2] = { holds, missing };
  int counts[2] = { nholds, nmissing };
  for (int k = 0; k < 2; k++) {
    lua_createtable(L, counts[k], 0);
    for (int i = 0; i < counts[k]; i++) {
      lua_pushstring(L, lists[k][i]);
      lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, k == 0 ? "holds" : "missing");
  }
  return 1;
}

/* core.load_http() -> true | false, why: loads libcurl now (libcurl.h), so
   that a program's first request does not: luma.load calls it for a program
   that declares a model or a remote MCP server, when a game loads it rather
   than in a frame (loading it takes tens of ms). */
static int l_load_http(lua_State *L) {
  char err[300];
  if (cu_load(err, sizeof err) == 0) {
    lua_pushboolean(L, 1);
    return 1;
  }
  lua_pushboolean(L, 0);
  lua_pushstring(L, err);
  return 2;
}

LUMA_API int luaopen_luma_core(lua_State *L) {
  stay_loaded();
#ifdef __SANITIZE_THREAD__
  /* a ThreadSanitizer build is preloaded into lua5.4: the shells and tools
     the specs start must not get it (uninstrumented, they crash with it) */
  unsetenv("LD_PRELOAD");
#endif
  static const luaL_Reg fns[] = {
    { "realpath", l_realpath },
    { "suggest", l_suggest },
    { "isatty", l_isatty },
    { "monotonic_ms", l_monotonic_ms },
    { "deadline_signal", l_deadline_signal },
    { "confinement", l_confinement },
    { "load_http", l_load_http },
    { NULL, NULL }
  };
  lua_newtable(L);
  lc_setfuncs(L, fns, 0);
  lp_open(L);
  le_open(L);
  lj_open(L);
  lm_open(L);
  lr_open(L);
  la_open(L);
  lmcp_open(L);
  lmcphttp_open(L);
  lmcpclient_open(L);
  ljr_open_lib(L);
  lmcpremote_open(L);
  push_limits(L);
  lua_setfield(L, -2, "limits");
  lua_pushlightuserdata(L, NULL);
  lua_setfield(L, -2, "null");
  lua_pushstring(L, LUMA_VERSION);
  lua_setfield(L, -2, "version");
  lua_pushstring(L, LUA_RELEASE);
  lua_setfield(L, -2, "lua_release");
#ifdef __SANITIZE_THREAD__
  lua_pushboolean(L, 1);   /* no deadline signal there: specs expect the count hook */
#else
  lua_pushboolean(L, 0);
#endif
  lua_setfield(L, -2, "thread_sanitizer");
  return 1;
}
