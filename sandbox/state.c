/* A Lua state: its allocator, the deadline hook and the stop, the
   handler-side `luma` table, the signal, and `print`. Nothing here knows of
   modules or policies (module.c composes a module's state). */
#include "state.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>

#include "compat.h"
#include "errors.h"
#include "lerror.h"
#include "ljson.h"
#include "luma_limits.h"

/* The hook looks at the clock every `count` VM instructions, SX_HOOK_MIN to
   SX_HOOK_MAX: the count doubles while looks come quicker than
   SX_HOOK_GAP_NS apart, and drops to SX_HOOK_MIN when one comes 4 times
   later than that, so that slow instructions (a comparison of long strings,
   a library call on a large value) cannot carry a loop far past the
   deadline. A change (lua_sethook) walks the whole call stack: when one
   takes longer than SX_HOOK_WALK_NS (a very deep stack) the count stops
   growing for the rest of the call, so that a deep recursion does not pay
   for the walk again and again. */
#define SX_HOOK_MIN 4
#define SX_HOOK_MAX 1024
#define SX_HOOK_GAP_NS 200000LL
#define SX_HOOK_WALK_NS 20000LL

long long sx_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Counts what the state holds, and refuses to grow past the limit. */
static void *sx_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  sx_state *m = ud;
  size_t old = ptr ? osize : 0;   /* with ptr NULL, osize is a type tag */
  if (nsize == 0) {
    free(ptr);
    m->memory -= old;
    return NULL;
  }
  if (nsize > old && m->memory_limit && m->memory - old + nsize > m->memory_limit) {
    m->out_of_memory = 1;
    return NULL;
  }
  void *p = realloc(ptr, nsize);
  if (!p) {
    /* shrinking never fails in the eyes of Lua: keep the old block */
    if (nsize <= old) return ptr;
    return NULL;
  }
  m->memory = m->memory - old + nsize;
  return p;
}

sx_state *sx_state_of(lua_State *L) {
  void *ud;
  lua_getallocf(L, &ud);
  return ud;
}

static int aborted(const sx_state *m) {
  return m->expired || sx_cancelled(m) || (m->deadline_ns && sx_now_ns() >= m->deadline_ns);
}

void sx_push_timeout(lua_State *L) {
  sx_state *m = sx_state_of(L);
  m->expired = 1;
  char msg[300];
  le_format(msg, sizeof msg, LE_TOOL_TIMEOUT, m->tool ? m->tool : "?", m->timeout_ms);
  le_push_code(L, LE_TOOL_TIMEOUT, msg, 0);
}

static void deadline_hook(lua_State *L, lua_Debug *ar);

int sx_raise_timeout(lua_State *L) {
  sx_state *s = sx_state_of(L);
  /* under the watch, the thread that raises is the one that runs (and the
     one a resent signal hooks while the stop unwinds) */
  if (s->watched) __atomic_store_n(&s->current, L, __ATOMIC_RELEASE);
  sx_push_timeout(L);
  /* whatever runs while the stop unwinds (pending __close handlers) is
     looked at after every instruction, and stopped again at once: the check
     is sticky. The hook raised here would otherwise leave its long interval
     behind, and those handlers would run free for up to SX_HOOK_MAX
     instructions each. */
  lua_sethook(L, deadline_hook, LUA_MASKCOUNT, 1);
  return lua_error(L);
}

void sx_tick(lua_State *L) {
  sx_state *m = sx_state_of(L);
  if ((m->deadline_ns && sx_now_ns() >= m->deadline_ns) || sx_cancelled(m)) sx_raise_timeout(L);
}

/* Sticky: once past the deadline every look raises again, so a pcall
   inside the handler cannot swallow the stop for good. */
static void deadline_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  sx_state *m = sx_state_of(L);
  long long now = sx_now_ns();
  if ((m->deadline_ns && now >= m->deadline_ns) || sx_cancelled(m)) sx_raise_timeout(L);
#if LUA_VERSION_NUM >= 504
  /* a hand-off still to come (sx_call_opts.hand_off): past its promotion,
     the run yields at the first look from its own coroutine where it can */
  sx_run *run = __atomic_load_n(&m->run, __ATOMIC_ACQUIRE);
  int pending = run && run->opts.hand_off && !run->handed_off && (!m->promote_ns || now >= m->promote_ns);
  if (pending && run->co == L && lua_isyieldable(L)) {
    /* an inline run that lasts: its thread goes back to its loop, and the
       call goes on elsewhere. A hook yields by returning after lua_yield;
       a watch armed meanwhile is disarmed where the slice ends */
    m->promote_ns = 0;
    run->handed_off = 1;
    lua_yield(L, 0);
    return;
  }
#else
  int pending = 0;
  sx_run *run = NULL;
#endif
  if (m->watched) {
    /* a hook left on a coroutine from the module's load: the watch stops
       this call, and the hook only slows it; the run's own coroutine keeps
       it while a hand-off is to come (promoted in a coroutine of the
       handler's own or a C function's callback, it yields once back) */
    if (!(pending && run->co == L)) lua_sethook(L, NULL, 0, 0);
    else if (lua_gethookcount(L) < SX_HOOK_MAX) lua_sethook(L, deadline_hook, LUA_MASKCOUNT, SX_HOOK_MAX);
    return;
  }
  if (m->promote_ns && now >= m->promote_ns) {
    /* the handler ran long enough to be handed to the watch: L, the Lua
       thread running now (the handler's, or a coroutine), is the one its
       signal stops, and the coroutine wrappers switch it from now on */
    m->promote_ns = 0;
    int count = lua_gethookcount(L);
    lua_State *was_current = __atomic_load_n(&m->current, __ATOMIC_ACQUIRE);
    __atomic_store_n(&m->current, L, __ATOMIC_RELEASE);
    /* before arming: a stop set at once must stay; a run still to be
       handed off keeps the hook on its own coroutine */
    if (pending && run->co != L) lua_sethook(run->co, deadline_hook, LUA_MASKCOUNT, SX_HOOK_MIN);
    lua_sethook(L, pending && run->co == L ? deadline_hook : NULL, LUA_MASKCOUNT, SX_HOOK_MIN);
    if (m->promote(m)) {
      m->watched = 1;
      return;
    }
    __atomic_store_n(&m->current, was_current, __ATOMIC_RELEASE);
    lua_sethook(L, deadline_hook, LUA_MASKCOUNT, count);
  }
  long long gap = now - m->hook_ns;
  m->hook_ns = now;
  int was = lua_gethookcount(L);   /* each thread (coroutine) has its own */
  int count = was;
  if (gap > 4 * SX_HOOK_GAP_NS) count = SX_HOOK_MIN;
  /* until it is handed to the watch, a call keeps the shortest interval:
     fast instructions must not grow it for slow ones that follow (one
     string comparison can take 90 ms), since no signal would stop those */
  else if (gap < SX_HOOK_GAP_NS && was < SX_HOOK_MAX && !m->hook_pinned && !m->promote_ns) count = was * 2;
  if (count != was) {
    lua_sethook(L, deadline_hook, LUA_MASKCOUNT, count);
    long long walk = sx_now_ns() - now;
    m->hook_ns += walk;   /* the walk is not the handler's slowness */
    if (walk > SX_HOOK_WALK_NS) m->hook_pinned = 1;
  }
}

void sx_stop_now(sx_state *s) {
  if (!aborted(s)) return;   /* a signal that came late, for a call already ended */
  lua_State *cur = __atomic_load_n(&s->current, __ATOMIC_ACQUIRE);
  __atomic_store_n(&s->stopping, 1, __ATOMIC_RELEASE);
  if (cur) lua_sethook(cur, deadline_hook, LUA_MASKCOUNT, 1);
  if (cur != s->L) lua_sethook(s->L, deadline_hook, LUA_MASKCOUNT, 1);
}

void sx_start_hook(sx_state *s, lua_State *L) {
  s->hook_ns = sx_now_ns();
  s->hook_pinned = 0;
  lua_sethook(L, deadline_hook, LUA_MASKCOUNT, SX_HOOK_MIN);
}

/* The call a Lua thread is the coroutine of (its extra space), or NULL:
   a state's main thread, a coroutine a handler made. */
static sx_run *root_of(lua_State *co) {
#if LUA_VERSION_NUM >= 504
  return *(sx_run **)lua_getextraspace(co);
#else
  (void)co;
  return NULL;
#endif
}

#if LUA_VERSION_NUM >= 504

/* Its protected call's end, directly or after the handler yielded in a
   wait: (status, result or error). A yieldable pcall reports LUA_YIELD for
   a call that ended well after a yield. */
static int body_k(lua_State *L, int status, lua_KContext ctx) {
  (void)ctx;
  lua_pushinteger(L, status == LUA_YIELD ? LUA_OK : status);
  lua_insert(L, -2);
  return 2;
}

int sx_call_body(lua_State *L) {
  return body_k(L, lua_pcallk(L, 3, 1, 0, 0, body_k), 0);
}
#endif

/* luma.ToolError{ code =, message =, retryable =, details = } */
static int l_tool_error(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_getfield(L, 1, "code");
  if (lua_type(L, -1) != LUA_TSTRING) return luaL_error(L, "luma.ToolError needs a string code");
  lua_getfield(L, 1, "message");
  if (!lua_isnil(L, -1) && lua_type(L, -1) != LUA_TSTRING) return luaL_error(L, "luma.ToolError's message must be a string");
  lua_getfield(L, 1, "retryable");
  if (!lua_isnil(L, -1) && lua_type(L, -1) != LUA_TBOOLEAN) return luaL_error(L, "luma.ToolError's retryable must be a boolean");
  lua_getfield(L, 1, "details");
  le_push(L, lua_tostring(L, -4), lua_isnil(L, -3) ? "" : lua_tostring(L, -3), lua_toboolean(L, -2),
          lua_isnil(L, -1) ? 0 : lua_gettop(L));
  return 1;
}

/* print writes to stderr: stdout belongs to the host (results, protocols);
   and at most LIM_PRINT_MAX_BYTES a call, so that a loop cannot flood it. */
static int l_print(lua_State *L) {
  sx_state *m = sx_state_of(L);
  int n = lua_gettop(L);
  for (int i = 1; i <= n; i++) {
    size_t len;
    const char *s = lc_tolstring(L, i, &len);
    if (m->printed < (size_t)LIM_PRINT_MAX_BYTES) {
      size_t room = (size_t)LIM_PRINT_MAX_BYTES - m->printed, k = len < room ? len : room;
      if (i > 1) fputc('\t', stderr);
      fwrite(s, 1, k, stderr);
      m->printed += k + 1;
    }
    lua_pop(L, 1);
  }
  if (m->printed <= (size_t)LIM_PRINT_MAX_BYTES) fputc('\n', stderr);
  fflush(stderr);
  return 0;
}

static int l_signal_check(lua_State *L) {
  if (aborted(sx_state_of(L))) return sx_raise_timeout(L);
  return 0;
}

/* The wait after it resumed: over (true), cut short by the deadline or a
   cancel (false), or not over yet (it yields again). */
#if LUA_VERSION_NUM >= 504
static int sleep_k(lua_State *L, int status, lua_KContext end) {
  (void)status;
  sx_state *m = sx_state_of(L);
  if (aborted(m)) { lua_pushboolean(L, 0); return 1; }
  if (sx_now_ns() >= (long long)end) { lua_pushboolean(L, 1); return 1; }
  m->run->wake_ns = (long long)end;
  return lua_yieldk(L, 0, end, sleep_k);
}
#endif

/* signal:sleep(ms) -> true after ms, or false as soon as the call is
   cancelled or passes its deadline. In a call that may wait (a module's
   state in this process), called from the handler's own coroutine, it
   yields: the call is suspended, its thread goes back to the pool, and it
   resumes on any worker when the wait is over. Elsewhere (a coroutine of
   the handler's own, a metamethod or a callback of a C function, a
   handler process) it holds its thread, in slices short enough to notice a
   cancel at once. */
static int l_signal_sleep(lua_State *L) {
  sx_state *m = sx_state_of(L);
  lua_Number ms = luaL_checknumber(L, 2);
  if (!(ms >= 0 && ms <= LIM_SIGNAL_SLEEP_MAX_MS))
    return luaL_argerror(L, 2, lua_pushfstring(L, "a number of milliseconds from 0 to %d expected", LIM_SIGNAL_SLEEP_MAX_MS));
  long long end = sx_now_ns() + (long long)(ms * 1e6);
#if LUA_VERSION_NUM >= 504
  sx_run *run = m->run;
  if (run && run->co == L && run->opts.may_wait && lua_isyieldable(L) && ms > 0 && !aborted(m)) {
    run->wake_ns = end;
    return lua_yieldk(L, 0, (lua_KContext)end, sleep_k);
  }
#endif
  for (;;) {
    if (aborted(m)) { lua_pushboolean(L, 0); return 1; }
    long long now = sx_now_ns(), left = end - now;
    if (left <= 0) { lua_pushboolean(L, 1); return 1; }
    if (m->deadline_ns && m->deadline_ns - now < left) left = m->deadline_ns - now;
    if (left > 2000000) left = 2000000;
    struct timespec ts = { 0, (long)left };
    nanosleep(&ts, NULL);
  }
}

/* signal:progress(n [, total [, message]]): how far the call has come, for
   whoever started it to pass on (an MCP client's progress notifications);
   n and total are numbers >= 0. Nothing happens when no one listens. */
static int l_signal_progress(lua_State *L) {
  sx_state *m = sx_state_of(L);
  lua_Number n = luaL_checknumber(L, 2);
  luaL_argcheck(L, isfinite(n) && n >= 0, 2, "a finite number >= 0 expected");
  lua_Number total = -1;
  if (!lua_isnoneornil(L, 3)) {
    total = luaL_checknumber(L, 3);
    luaL_argcheck(L, isfinite(total) && total >= 0, 3, "a finite number >= 0 expected");
  }
  size_t len = 0;
  const char *msg = luaL_optlstring(L, 4, NULL, &len);
  const sx_call_opts *o = m->opts;
  if (o && o->progress) o->progress(o->progress_ud, n, total, msg, len);
  return 0;
}

/* signal.aborted, signal.reason, signal:check(), signal:sleep(ms), signal:progress(n, total, msg),
   signal.remaining_ms */
static int l_signal_index(lua_State *L) {
  sx_state *m = sx_state_of(L);
  const char *key = lua_tostring(L, 2);
  if (!key) return 0;
  if (strcmp(key, "aborted") == 0) {
    lua_pushboolean(L, aborted(m));
  } else if (strcmp(key, "reason") == 0) {
    if (aborted(m)) lua_pushstring(L, sx_cancelled(m) ? "cancelled" : "timeout"); else lua_pushnil(L);
  } else if (strcmp(key, "check") == 0) {
    lua_pushcfunction(L, l_signal_check);
  } else if (strcmp(key, "sleep") == 0) {
    lua_pushcfunction(L, l_signal_sleep);
  } else if (strcmp(key, "progress") == 0) {
    lua_pushcfunction(L, l_signal_progress);
  } else if (strcmp(key, "remaining_ms") == 0) {
    if (!m->deadline_ns) return 0;
    long long left = (m->deadline_ns - sx_now_ns()) / 1000000;
    lua_pushinteger(L, left > 0 ? (lua_Integer)left : 0);
  } else {
    return 0;
  }
  return 1;
}

void sx_open_luma(lua_State *L) {
  lua_createtable(L, 0, 4);
  lua_pushcfunction(L, l_tool_error);
  lua_setfield(L, -2, "ToolError");
  lua_pushlightuserdata(L, NULL);
  lua_setfield(L, -2, "null");
  lj_push_array_mt(L);
  lua_setfield(L, -2, "array_mt");
  lua_pushvalue(L, -1);
  lua_setglobal(L, "luma");
  /* require "luma" in a module gives the same table */
  lua_getglobal(L, "package");
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "loaded");
    if (lua_istable(L, -1)) {
      lua_pushvalue(L, -3);
      lua_setfield(L, -2, "luma");
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 2);
}

/* Raises the stop again if the call already passed its deadline. */
static int l_check_stop(lua_State *L) {
  if (sx_state_of(L)->expired) sx_raise_timeout(L);
  return 0;
}

/* A stop at the deadline must not be swallowed: once it happened, pcall,
   xpcall and coroutine.resume pass the error on instead of returning it.
   The wrappers are Lua functions so that yields through them still work.

   A stop raised by the hook leaves hooks off in the thread it was raised in
   until a protected call unwinds it. Lua code that would run in that window
   could never be stopped, so after a stop none is allowed to run there:
   xpcall's message handler is skipped, and the pending __close handlers of
   a coroutine the stop killed are never run (coroutine.close and the
   function coroutine.wrap returns both raise the stop instead). */
static const char rethrow_chunk[] =
  "local check, pcall, xpcall, error, co, run_in, fresh = ...\n"
  "local resume, create, close, status = co.resume, co.create, co.close, co.status\n"
  "local closing = 0\n"
  "local function pass(ok, ...)\n"
  "  if not ok then check() end\n"
  "  return ok, ...\n"
  "end\n"
  "_G.pcall = function(f, ...) return pass(pcall(f, ...)) end\n"
  "_G.xpcall = function(f, h, ...)\n"
  "  local function handler(...) check() return h(...) end\n"
  "  return pass(xpcall(f, handler, ...))\n"
  "end\n"
  "co.resume = function(c, ...) return pass(run_in(c, resume, c, ...)) end\n"
  "local function closed(ok, ...)\n"
  "  closing = closing - 1\n"
  "  if not ok then error((...), 0) end\n"
  "  return ...\n"
  "end\n"
  "co.close = function(c)\n"
  "  check()\n"
  "  if closing >= 100 then error('coroutine.close is nested more than 100 deep', 2) end\n"
  "  closing = closing + 1\n"
  "  return closed(pcall(run_in, c, close, c))\n"
  "end\n"
  "local function unwrap(c, ok, ...)\n"
  "  if ok then return ... end\n"
  "  check()\n"
  "  local e = ...\n"
  "  if status(c) == 'dead' then\n"
  "    local closed, why = run_in(c, close, c)\n"
  "    if not closed then e = why end\n"
  "  end\n"
  "  error(e, 2)\n"
  "end\n"
  "co.wrap = function(f)\n"
  "  local c = create(f)\n"
  "  fresh(c)\n"
  "  return function(...) return unwrap(c, run_in(c, resume, c, ...)) end\n"
  "end\n";

/* With the count hook, a coroutine gets it at the shortest interval when
   made and whenever it runs: one made after fast code would otherwise
   inherit a long interval (and a few slow instructions in it would run far
   past the deadline), and one made during a call under the watch has none. */
static void fresh_hook(lua_State *co) {
  if (lua_gethook(co) != deadline_hook || lua_gethookcount(co) > SX_HOOK_MIN)
    lua_sethook(co, deadline_hook, LUA_MASKCOUNT, SX_HOOK_MIN);
}

/* fresh(c), when a coroutine is made. */
static int l_fresh(lua_State *L) {
  lua_State *co = lua_tothread(L, 1);
  if (co && !sx_state_of(L)->watched) fresh_hook(co);
  return 0;
}

/* coroutine.yield, isyieldable and running, as a handler's code saw them
   when it ran in the state's main thread: its call's own coroutine is not
   one it can yield from (only a wait suspends the call). */
#if LUA_VERSION_NUM >= 504
static int l_co_yield(lua_State *L) {
  if (root_of(L)) return luaL_error(L, "attempt to yield from outside a coroutine");
  return lua_yield(L, lua_gettop(L));
}

static int l_co_isyieldable(lua_State *L) {
  lua_State *co = lua_isnone(L, 1) ? L : lua_tothread(L, 1);
  luaL_argexpected(L, co, 1, "coroutine");
  lua_pushboolean(L, lua_isyieldable(co) && !root_of(co));
  return 1;
}

static int l_co_running(lua_State *L) {
  int ismain = lua_pushthread(L);
  lua_pushboolean(L, ismain || root_of(L));
  return 2;
}
#endif

/* coroutine.create, with fresh(c): a C function, so that no state keeps a
   Lua closure for it (an idle strict state is about 24 KiB; issue 15). */
static int l_co_create(lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  lua_State *co = lua_newthread(L);
  lua_pushvalue(L, 1);
  lua_xmove(L, co, 1);
  if (!sx_state_of(L)->watched) fresh_hook(co);
  return 1;
}

/* run_in(c, f, ...) -> f(...): runs f (the raw resume or close) with c as the
   Lua thread that runs, which is the one the watch's signal handler stops.
   Both switches happen here, in C, around a protected call, so that no
   error can come between them (a stack overflow or a memory error in the
   call is raised again after the switch back); c stays referenced by this
   frame while it is the thread that runs. With the count hook, c gets it. */
static int l_run_in(lua_State *L) {
  sx_state *s = sx_state_of(L);
  int n = lua_gettop(L);
  luaL_checkany(L, 2);
  lua_State *co = lua_tothread(L, 1);
  /* another call's coroutine (a handler's, kept in a global), suspended in
     a wait, belongs to the runtime, which resumes it */
  if (co && root_of(co)) return luaL_error(L, "a tool call's own coroutine cannot be resumed or closed by a handler");
  luaL_checkstack(L, n, "resuming a coroutine");
  for (int i = 2; i <= n; i++) lua_pushvalue(L, i);
  if (s->watched) {
    if (__atomic_load_n(&s->stopping, __ATOMIC_ACQUIRE)) return sx_raise_timeout(L);
    if (co) __atomic_store_n(&s->current, co, __ATOMIC_RELEASE);
  } else if (co) {
    fresh_hook(co);
  }
  int status = lua_pcall(L, n - 2, LUA_MULTRET, 0);
  if (s->watched) {
    __atomic_store_n(&s->current, L, __ATOMIC_RELEASE);
    if (__atomic_load_n(&s->stopping, __ATOMIC_ACQUIRE)) return sx_raise_timeout(L);
  }
  if (status != LUA_OK) return lua_error(L);
  return lua_gettop(L) - n;
}

/* The chunk compiled once for the process, without its debug information:
   every state carries it, and lines and local names cost an idle state
   about 1 KiB. NULL (the text is loaded) if it could not be made. */
static struct { char *code; size_t len; } stripped;
static pthread_once_t stripped_once = PTHREAD_ONCE_INIT;

#if LUA_VERSION_NUM >= 503
static int append(lua_State *L, const void *p, size_t sz, void *ud) {
  (void)L; (void)ud;
  char *grown = realloc(stripped.code, stripped.len + sz);
  if (!grown) return 1;
  memcpy(grown + stripped.len, p, sz);
  stripped.code = grown;
  stripped.len += sz;
  return 0;
}
#endif

static void strip_chunk(void) {
  lua_State *L = luaL_newstate();
  if (!L) return;
  int failed = luaL_loadbufferx(L, rethrow_chunk, sizeof rethrow_chunk - 1, "=luma", "t") != LUA_OK;
#if LUA_VERSION_NUM >= 503
  failed = failed || lua_dump(L, append, NULL, 1) != 0;
#else
  failed = 1;   /* Lua 5.1 (no sandbox there): the text is loaded */
#endif
  if (failed) {
    free(stripped.code);
    stripped.code = NULL;
  }
  lua_close(L);
}

/* The library may be unloaded (a Lua state closing unloads its C modules):
   the copy goes with it. */
__attribute__((destructor)) static void free_stripped(void) {
  free(stripped.code);
  stripped.code = NULL;
}

void sx_state_prime(void) {
  pthread_once(&stripped_once, strip_chunk);
}

static void wrap_protected_calls(lua_State *L) {
  pthread_once(&stripped_once, strip_chunk);
  int loaded = stripped.code
    ? luaL_loadbufferx(L, stripped.code, stripped.len, "=luma", "b")
    : luaL_loadbufferx(L, rethrow_chunk, sizeof rethrow_chunk - 1, "=luma", "t");
  if (loaded != LUA_OK) lua_error(L);
  lua_pushcfunction(L, l_check_stop);
  lua_getglobal(L, "pcall");
  lua_getglobal(L, "xpcall");
  lua_getglobal(L, "error");
  lua_getglobal(L, "coroutine");
  lua_pushcfunction(L, l_run_in);
  lua_pushcfunction(L, l_fresh);
  lua_call(L, 7, 0);
  lua_getglobal(L, "coroutine");
  lua_pushcfunction(L, l_co_create);
  lua_setfield(L, -2, "create");
#if LUA_VERSION_NUM >= 504
  lua_pushcfunction(L, l_co_yield);
  lua_setfield(L, -2, "yield");
  lua_pushcfunction(L, l_co_isyieldable);
  lua_setfield(L, -2, "isyieldable");
  lua_pushcfunction(L, l_co_running);
  lua_setfield(L, -2, "running");
#endif
  lua_pop(L, 1);
}

void sx_open_print(lua_State *L) {
  lua_pushcfunction(L, l_print);
  lua_setglobal(L, "print");
}

void sx_open_stop(lua_State *L) {
  wrap_protected_calls(L);
}

void sx_open_signal(lua_State *L) {
  sx_state *s = sx_state_of(L);
  lua_newuserdata(L, 1);
  lua_createtable(L, 0, 2);
  lua_pushcfunction(L, l_signal_index);
  lua_setfield(L, -2, "__index");
  lua_pushliteral(L, "luma.Signal");
  lua_setfield(L, -2, "__name");
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "__metatable");
  lua_setmetatable(L, -2);
  s->signal_ref = luaL_ref(L, LUA_REGISTRYINDEX);
}

sx_state *sx_state_new(size_t memory_limit, char *err, size_t errlen) {
  sx_state *s = calloc(1, sizeof *s);
  if (!s) { snprintf(err, errlen, "out of memory"); return NULL; }
  s->memory_limit = memory_limit;
  s->exports_ref = s->signal_ref = s->needs_ref = s->spare_ref = LUA_NOREF;
  s->watch_slot = -1;
  s->L = lua_newstate(sx_alloc, s);
  if (!s->L) { snprintf(err, errlen, "out of memory"); free(s); return NULL; }
#if LUA_VERSION_NUM >= 504
  /* every thread made in it starts with a copy: not a call's coroutine */
  memset(lua_getextraspace(s->L), 0, LUA_EXTRASPACE);
#endif
  return s;
}

/* Closing runs pending __close handlers: they get a deadline too
   (LIM_STATE_CLOSE_TIMEOUT_MS). */
void sx_state_free(sx_state *s) {
  if (!s) return;
  if (s->L) {
    s->tool = "(closing the state)";
    s->timeout_ms = LIM_STATE_CLOSE_TIMEOUT_MS;
    s->deadline_ns = sx_now_ns() + LIM_STATE_CLOSE_TIMEOUT_MS * 1000000LL;
    sx_start_hook(s, s->L);
    lua_close(s->L);
  }
  free(s->dropped);
  free(s);
}
