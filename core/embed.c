/*
 * libluma: the C API of core/luma.h over luma's Lua binding.
 *
 * Each runtime has a private Lua 5.4 state (the library's own Lua, linked in
 * with hidden symbols) holding the Lua half of luma, compiled in
 * (luafiles.h), and lua/luma/embed.lua, which does the work: JSON in, JSON
 * out. This file keeps the handles, the lock, the callbacks and the errors.
 *
 * A handle (luma_call) refers to its Lua future through the registry until
 * the future is done; then the handle takes the outcome (settles) and lets
 * the future go, so that it no longer needs the runtime.
 *
 * A tool's call, the hot path of a server, skips embed.lua: core.start_json
 * decodes the input into the call itself, and lr_call_json writes a result
 * as JSON and closes the call (its thread and record reused by the next).
 */
#define _POSIX_C_SOURCE 200809L

#include "luma.h"
#include "lcore.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "luafiles.h"
#include "lruntime.h"
#include "luma_limits.h"
#include "runtime.h"
#include "sandbox.h"

/* The private Lua's stdin, stdout and stderr (see the Makefile: Debian's
   static liblua5.4.a reads them without position independence, so libluma
   gives it variables of its own, set before any Lua runs). */
FILE *luma_lua_stdin, *luma_lua_stdout, *luma_lua_stderr;

__attribute__((constructor)) static void set_std_files(void) {
  luma_lua_stdin = stdin;
  luma_lua_stdout = stdout;
  luma_lua_stderr = stderr;
}

struct luma_runtime {
  pthread_mutex_t mu;             /* recursive: callbacks may call back in */
  lua_State *L;
  int env;                        /* registry: embed.lua's state of this runtime */
  int embed;                      /* registry: the embed module */
  int start_json;                 /* registry: core.start_json, luma_start's own */
  rt_runtime *crt;                /* retained: luma_cancel wakes it without the lock */
  luma_options o;
  luma_program *programs;
  luma_call *calls;               /* the handles not yet settled */
  int cancels;                    /* atomic: some handle asks to be cancelled */
};

struct luma_program {
  luma_runtime *rt;
  int ref;                        /* registry: the luma.Program */
  luma_program *prev, *next;
};

struct luma_call {
  luma_runtime *rt;               /* NULL once settled */
  int ref;                        /* registry: the Lua future, until settled */
  int state;                      /* atomic: LUMA_PENDING, then LUMA_OK or LUMA_FAILED */
  int cancel;                     /* atomic */
  int ask;                        /* cancelled by destruction: ASK_CANCELLED */
  int tool;                       /* a luma_start: the future is a luma.Call, closed once settled */
  int listen;                     /* luma_listen: its events are taken */
  char **kept;                    /* the events still queued when it settled */
  size_t nkept, kept_at;
  char *event;                    /* the last luma_next_event */
  char *json;
  size_t len;
  luma_error *err;                /* a failed call's, made when it settles: a handle
                                     of 1 KB more made malloc consolidate at each call */
  luma_call *prev, *next;
};

/* ------------------------------------------------------------- errors */

static void set_error(luma_error *err, const char *code, const char *fmt, ...) {
  if (!err) return;
  snprintf(err->code, sizeof err->code, "%s", code);
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(err->message, sizeof err->message, fmt, ap);
  va_end(ap);
  if (n >= (int)sizeof err->message) memcpy(err->message + sizeof err->message - 4, "...", 4);
}

static void clear_error(luma_error *err) {
  if (err) err->code[0] = err->message[0] = '\0';
}

/* The Lua error on top of L as a luma_error: a luma error's code and
   message; anything else (a bad argument) is INVALID_ARGUMENT. Pops it. */
static void take_error(lua_State *L, luma_error *err) {
  const char *code = "INVALID_ARGUMENT", *message = NULL;
  if (lua_type(L, -1) == LUA_TSTRING) {
    message = lua_tostring(L, -1);
  } else if (lua_type(L, -1) == LUA_TUSERDATA || lua_type(L, -1) == LUA_TTABLE) {
    lua_getfield(L, -1, "code");
    lua_getfield(L, -2, "message");
    if (lua_type(L, -2) == LUA_TSTRING) code = lua_tostring(L, -2);
    message = lua_tostring(L, -1);
  }
  set_error(err, code, "%s", message ? message : "an error without a message");
  lua_settop(L, 0);
}

/* ------------------------------------------------------------ locking */

static void lock(luma_runtime *rt) { pthread_mutex_lock(&rt->mu); }
static void unlock(luma_runtime *rt) { pthread_mutex_unlock(&rt->mu); }

static long long mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------ the Lua side */

/* package.preload's loader of an embedded file: upvalue 1 is its index */
static int load_file(lua_State *L) {
  const lf_file *f = &lf_files[lua_tointeger(L, lua_upvalueindex(1))];
  char chunk[64];
  snprintf(chunk, sizeof chunk, "=%s", f->module);
  if (luaL_loadbufferx(L, f->text, f->len, chunk, "t") != LUA_OK) return lua_error(L);
  lua_pushstring(L, f->module);
  lua_call(L, 1, 1);
  return 1;
}

/* the callbacks, as Lua functions; upvalue 1 is the runtime */
static luma_runtime *cb_runtime(lua_State *L) { return lua_touserdata(L, lua_upvalueindex(1)); }

static int cb_event(lua_State *L) {
  luma_runtime *rt = cb_runtime(L);
  size_t len;
  const char *json = luaL_checklstring(L, 1, &len);
  rt->o.on_event(rt->o.ud, json, len);
  return 0;
}

static int cb_approve(lua_State *L) {
  luma_runtime *rt = cb_runtime(L);
  lua_pushboolean(L, rt->o.approve(rt->o.ud, luaL_checkstring(L, 1), lua_tostring(L, 2)) == 1);
  return 1;
}

static int cb_lookup(lua_State *L) {
  luma_runtime *rt = cb_runtime(L);
  const char *v = rt->o.lookup(rt->o.ud, luaL_checkstring(L, 1));
  if (v) lua_pushstring(L, v); else lua_pushnil(L);
  return 1;
}

static int cb_now(lua_State *L) {
  luma_runtime *rt = cb_runtime(L);
  lua_pushinteger(L, (lua_Integer)rt->o.now_ms(rt->o.ud));
  return 1;
}

static int cb_sleep(lua_State *L) {
  luma_runtime *rt = cb_runtime(L);
  long long ms = (long long)luaL_checknumber(L, 1);
  if (rt->o.sleep_ms) { rt->o.sleep_ms(rt->o.ud, ms); return 0; }
  struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {}
  return 0;
}

static void set_hook(lua_State *L, luma_runtime *rt, const char *name, lua_CFunction fn) {
  lua_pushlightuserdata(L, rt);
  lua_pushcclosure(L, fn, 1);
  lua_setfield(L, -2, name);
}

/* Opens the private state: the libraries, luma.core, the embedded files
   (and nothing from the file system: no Lua path, no C libraries), then
   embed.new. Runs protected; the runtime is upvalue... argument 1. */
static int open_state(lua_State *L) {
  luma_runtime *rt = lua_touserdata(L, 1);
  luaL_openlibs(L);
  lua_getglobal(L, "package");
  lua_pushliteral(L, "");
  lua_setfield(L, -2, "path");
  lua_pushliteral(L, "");
  lua_setfield(L, -2, "cpath");
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, luaopen_luma_core);
  lua_setfield(L, -2, "luma.core");
  for (int i = 0; lf_files[i].module; i++) {
    lua_pushinteger(L, i);
    lua_pushcclosure(L, load_file, 1);
    lua_setfield(L, -2, lf_files[i].module);
  }
  lua_settop(L, 1);
  lua_getglobal(L, "require");
  lua_pushliteral(L, "luma.embed");
  lua_call(L, 1, 1);
  lua_pushvalue(L, -1);
  rt->embed = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  lua_getfield(L, -1, "luma.core");
  lua_getfield(L, -1, "start_json");
  rt->start_json = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pop(L, 2);
  lua_getfield(L, -1, "new");
  lua_pushinteger(L, rt->o.workers);
  lua_newtable(L);
  if (rt->o.on_event) set_hook(L, rt, "on_event", cb_event);
  if (rt->o.approve) set_hook(L, rt, "approve", cb_approve);
  if (rt->o.lookup) set_hook(L, rt, "lookup", cb_lookup);
  if (rt->o.now_ms) {
    lua_newtable(L);
    set_hook(L, rt, "now", cb_now);
    set_hook(L, rt, "sleep", cb_sleep);
    lua_setfield(L, -2, "clock");
  }
  lua_call(L, 2, 1);
  lua_getfield(L, -1, "runtime");
  rt->crt = lr_runtime(L, lua_gettop(L));
  rt_retain(rt->crt);
  lua_pop(L, 1);
  rt->env = luaL_ref(L, LUA_REGISTRYINDEX);
  return 0;
}

/* Pushes embed[fn] and the runtime's env, ready for more arguments. */
static void push_op(luma_runtime *rt, const char *fn) {
  lua_rawgeti(rt->L, LUA_REGISTRYINDEX, rt->embed);
  lua_getfield(rt->L, -1, fn);
  lua_remove(rt->L, -2);
  lua_rawgeti(rt->L, LUA_REGISTRYINDEX, rt->env);
}

/* lua_pcall that fills err on failure and leaves the stack empty then. */
static int pcall(lua_State *L, int nargs, int nresults, luma_error *err) {
  if (lua_pcall(L, nargs, nresults, 0) == LUA_OK) return 0;
  take_error(L, err);
  return -1;
}

/* ------------------------------------------------------------ runtimes */

const char *luma_version(void) { return LUMA_VERSION; }

int luma_set_deadline_signal(int signo) {
  return signo < 0 || sx_set_deadline_signal(signo) != 0 ? LUMA_FAILED : LUMA_OK;
}

int luma_deadline_signal(void) { return sx_deadline_signal(); }

luma_runtime *luma_new(const luma_options *o, luma_error *err) {
  clear_error(err);
  if (o && ((o->now_ms == NULL) != (o->sleep_ms == NULL) && o->sleep_ms)) {
    set_error(err, "INVALID_ARGUMENT", "luma_new: sleep_ms needs now_ms (the clock it sleeps on)");
    return NULL;
  }
  if (o && o->workers > LIM_MAX_WORKERS) {
    set_error(err, "INVALID_ARGUMENT", "luma_new: workers must be at most %d, not %d", LIM_MAX_WORKERS, o->workers);
    return NULL;
  }
  luma_runtime *rt = calloc(1, sizeof *rt);
  if (!rt) { set_error(err, "INVALID_ARGUMENT", "luma_new: out of memory"); return NULL; }
  if (o) rt->o = *o;
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
  pthread_mutex_init(&rt->mu, &attr);
  pthread_mutexattr_destroy(&attr);
  sx_forbid_c_libraries();
  rt->L = luaL_newstate();
  if (!rt->L) {
    set_error(err, "INVALID_ARGUMENT", "luma_new: cannot make a Lua state (out of memory)");
    pthread_mutex_destroy(&rt->mu);
    free(rt);
    return NULL;
  }
  lua_pushcfunction(rt->L, open_state);
  lua_pushlightuserdata(rt->L, rt);
  if (pcall(rt->L, 1, 0, err) != 0) {
    if (rt->crt) rt_unref(rt->crt);
    lua_close(rt->L);
    pthread_mutex_destroy(&rt->mu);
    free(rt);
    return NULL;
  }
  return rt;
}

static void settle(luma_call *c, int state);

void luma_destroy(luma_runtime *rt) {
  if (!rt) return;
  lock(rt);
  push_op(rt, "close");
  if (lua_pcall(rt->L, 1, 0, 0) != LUA_OK) lua_settop(rt->L, 0);
  /* the calls were cancelled and their handlers stopped: each handle takes
     its outcome now, or the cancellation when there is none yet */
  while (rt->calls) {
    luma_call *c = rt->calls;
    lua_rawgeti(rt->L, LUA_REGISTRYINDEX, c->ref);
    lua_getfield(rt->L, -1, "done");
    lua_pushvalue(rt->L, -2);
    int done = lua_pcall(rt->L, 1, 1, 0) == LUA_OK && lua_toboolean(rt->L, -1);
    lua_settop(rt->L, 0);
    settle(c, done ? LUMA_OK : LUMA_FAILED);
  }
  while (rt->programs) {
    luma_program *p = rt->programs;
    rt->programs = p->next;
    free(p);
  }
  rt_unref(rt->crt);
  lua_close(rt->L);
  unlock(rt);
  pthread_mutex_destroy(&rt->mu);
  free(rt);
}

/* ------------------------------------------------------------ programs */

luma_program *luma_load(luma_runtime *rt, const char *path, const char *config, const char *const *tool_modules,
                        luma_error *err) {
  clear_error(err);
  if (!rt || !path) {
    set_error(err, "INVALID_ARGUMENT", "luma_load: %s is NULL", rt ? "the path" : "the runtime");
    return NULL;
  }
  luma_program *p = calloc(1, sizeof *p);
  if (!p) { set_error(err, "INVALID_ARGUMENT", "luma_load: out of memory"); return NULL; }
  lock(rt);
  lua_State *L = rt->L;
  push_op(rt, "load");
  lua_pushstring(L, path);
  if (!config) lua_pushnil(L);
  else if (!*config) lua_pushboolean(L, 0);
  else lua_pushstring(L, config);
  lua_newtable(L);
  for (int i = 0; tool_modules && tool_modules[i]; i++) {
    lua_pushstring(L, tool_modules[i]);
    lua_rawseti(L, -2, i + 1);
  }
  if (pcall(L, 4, 1, err) != 0) {
    unlock(rt);
    free(p);
    return NULL;
  }
  p->rt = rt;
  p->ref = luaL_ref(L, LUA_REGISTRYINDEX);
  p->next = rt->programs;
  if (p->next) p->next->prev = p;
  rt->programs = p;
  unlock(rt);
  return p;
}

void luma_program_close(luma_program *p) {
  if (!p) return;
  luma_runtime *rt = p->rt;
  lock(rt);
  lua_rawgeti(rt->L, LUA_REGISTRYINDEX, p->ref);
  lua_getfield(rt->L, -1, "close");
  lua_insert(rt->L, -2);
  if (lua_pcall(rt->L, 1, 0, 0) != LUA_OK) lua_settop(rt->L, 0);
  luaL_unref(rt->L, LUA_REGISTRYINDEX, p->ref);
  if (p->prev) p->prev->next = p->next; else rt->programs = p->next;
  if (p->next) p->next->prev = p->prev;
  unlock(rt);
  free(p);
}

/* ------------------------------------------------------------ handlers */

typedef struct handler {
  luma_handler fn;
  void *ud;
} handler;

/* fn(input_json, needs_json) -> true, json | false, json or nil */
static int call_handler(lua_State *L) {
  handler *h = lua_touserdata(L, lua_upvalueindex(1));
  char *out = NULL;
  int rc = h->fn(h->ud, luaL_checkstring(L, 1), luaL_optstring(L, 2, "null"), &out);
  lua_pushboolean(L, rc == LUMA_OK);
  if (out) {
    lua_pushstring(L, out);   /* a memory error here loses out: nothing else can */
    free(out);
  } else if (rc == LUMA_OK) {
    lua_pushliteral(L, "null");
  } else {
    lua_pushnil(L);
  }
  return 2;
}

int luma_register(luma_program *p, const char *tool, luma_handler fn, void *ud, luma_error *err) {
  clear_error(err);
  if (!p || !tool || !fn) {
    set_error(err, "INVALID_ARGUMENT", "luma_register: %s is NULL", !p ? "the program" : !tool ? "the tool" : "the handler");
    return LUMA_FAILED;
  }
  luma_runtime *rt = p->rt;
  lock(rt);
  lua_State *L = rt->L;
  lua_rawgeti(L, LUA_REGISTRYINDEX, rt->embed);
  lua_getfield(L, -1, "register");
  lua_remove(L, -2);
  lua_rawgeti(L, LUA_REGISTRYINDEX, p->ref);
  lua_pushstring(L, tool);
  handler *h = lua_newuserdatauv(L, sizeof *h, 0);
  h->fn = fn;
  h->ud = ud;
  lua_pushcclosure(L, call_handler, 1);
  int rc = pcall(L, 3, 0, err) == 0 ? LUMA_OK : LUMA_FAILED;
  unlock(rt);
  return rc;
}

/* --------------------------------------------------------------- calls */

/* Runs embed[op](env, program, ...the strings) and wraps the future it
   gives in a handle; a tool's start (op NULL) is core.start_json(program,
   tool, json), which decodes the input into the call itself. */
static luma_call *start(luma_program *p, const char *op, const char *const *args, int nargs, int ask, int tool,
                        luma_error *err) {
  luma_runtime *rt = p->rt;
  luma_call *c = calloc(1, sizeof *c);
  if (!c) { set_error(err, "INVALID_ARGUMENT", "%s: out of memory", op ? op : "start"); return NULL; }
  lock(rt);
  lua_State *L = rt->L;
  if (tool) lua_rawgeti(L, LUA_REGISTRYINDEX, rt->start_json); else push_op(rt, op);
  lua_rawgeti(L, LUA_REGISTRYINDEX, p->ref);
  for (int i = 0; i < nargs; i++) {
    if (args[i]) lua_pushstring(L, args[i]); else lua_pushnil(L);
  }
  if (pcall(L, (tool ? 1 : 2) + nargs, 1, err) != 0) {
    unlock(rt);
    free(c);
    return NULL;
  }
  c->rt = rt;
  c->ask = ask;
  c->tool = tool;
  lua_getfield(L, -1, "done");
  lua_pushvalue(L, -2);
  int done = lua_pcall(L, 1, 1, 0) == LUA_OK && lua_toboolean(L, -1);
  lua_pop(L, 1);
  c->ref = luaL_ref(L, LUA_REGISTRYINDEX);
  __atomic_store_n(&c->state, LUMA_PENDING, __ATOMIC_RELEASE);
  c->next = rt->calls;
  if (c->next) c->next->prev = c;
  rt->calls = c;
  /* done at its start (a cache hit, bad input, a handler run inline):
     settled now, not at the next poll */
  if (done && !c->ask) settle(c, LUMA_OK);
  unlock(rt);
  return c;
}

luma_call *luma_start(luma_program *p, const char *tool, const char *input_json, luma_error *err) {
  clear_error(err);
  if (!p || !tool) {
    set_error(err, "INVALID_ARGUMENT", "luma_start: %s is NULL", !p ? "the program" : "the tool");
    return NULL;
  }
  const char *args[] = { tool, input_json ? input_json : "{}" };
  return start(p, NULL, args, 2, 0, 1, err);
}

luma_call *luma_start_method(luma_program *p, const char *agent, const char *method, const char *args_json,
                             luma_error *err) {
  clear_error(err);
  if (!p || !agent || !method) {
    set_error(err, "INVALID_ARGUMENT", "luma_start_method: %s is NULL",
              !p ? "the program" : !agent ? "the agent" : "the method");
    return NULL;
  }
  const char *args[] = { agent, method, args_json ? args_json : "{}" };
  return start(p, "start_method", args, 3, 0, 0, err);
}

luma_call *luma_start_ask(luma_program *p, const char *agent, const char *prompt, const char *schema,
                          luma_error *err) {
  clear_error(err);
  if (!p || !agent || !prompt || !schema) {
    set_error(err, "INVALID_ARGUMENT", "luma_start_ask: %s is NULL",
              !p ? "the program" : !agent ? "the agent" : !prompt ? "the prompt" : "the schema");
    return NULL;
  }
  const char *args[] = { agent, prompt, schema };
  return start(p, "start_ask", args, 3, 1, 0, err);
}

luma_call *luma_resume(luma_program *p, const char *run_id, luma_error *err) {
  clear_error(err);
  if (!p || !run_id) {
    set_error(err, "INVALID_ARGUMENT", "luma_resume: %s is NULL", !p ? "the program" : "the run id");
    return NULL;
  }
  const char *args[] = { run_id };
  return start(p, "resume", args, 1, 1, 0, err);
}

int luma_decide(luma_program *p, const char *run_id, const char *call_id, int approved, const char *reason,
                const char *input_json, luma_error *err) {
  clear_error(err);
  if (!p || !run_id || !call_id) {
    set_error(err, "INVALID_ARGUMENT", "luma_decide: %s is NULL", !p ? "the program" : !run_id ? "the run id" : "the call id");
    return LUMA_FAILED;
  }
  luma_runtime *rt = p->rt;
  lock(rt);
  lua_State *L = rt->L;
  lua_rawgeti(L, LUA_REGISTRYINDEX, p->ref);
  lua_getfield(L, -1, "decide");
  lua_insert(L, -2);
  lua_pushstring(L, run_id);
  lua_pushstring(L, call_id);
  lua_pushboolean(L, approved);
  if (reason) lua_pushstring(L, reason); else lua_pushnil(L);
  if (input_json) lua_pushstring(L, input_json); else lua_pushnil(L);
  int rc = pcall(L, 6, 0, err) == 0 ? LUMA_OK : LUMA_FAILED;
  unlock(rt);
  return rc;
}

static void keep_events(luma_call *c);

/* The call's error, made when first needed; NULL when memory ran out. */
static luma_error *call_error(luma_call *c) {
  if (!c->err) c->err = calloc(1, sizeof *c->err);
  return c->err;
}

/* An error that could not be kept for lack of memory. */
static const luma_error lost_error = { "INVALID_ARGUMENT", "out of memory keeping the call's error" };

/* The handle takes the future's outcome (state LUMA_OK: it is done; else
   the runtime is going away and a future not done is cancelled) and
   leaves the runtime's list. The lock is held. */
static void settle(luma_call *c, int state) {
  luma_runtime *rt = c->rt;
  lua_State *L = rt->L;
  int ok = 0, fast = 0;
  if (state == LUMA_OK && c->tool) {
    /* a result: its JSON straight from the call, which closes */
    lua_pushcfunction(L, lr_call_json);
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->ref);
    if (lua_pcall(L, 1, 1, 0) == LUA_OK && lua_type(L, -1) == LUA_TSTRING) {
      const char *json = lua_tolstring(L, -1, &c->len);
      c->json = malloc(c->len + 1);
      if (c->json) memcpy(c->json, json, c->len + 1);
      ok = fast = 1;
    }
    lua_settop(L, 0);
  }
  if (state == LUMA_OK && !fast) {
    push_op(rt, "outcome");
    lua_pop(L, 1);
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->ref);
    if (lua_pcall(L, 1, 4, 0) == LUA_OK) {
      ok = lua_toboolean(L, -4);
      const char *json = lua_tolstring(L, ok ? -3 : -1, &c->len);
      c->json = json ? malloc(c->len + 1) : NULL;
      if (c->json) memcpy(c->json, json, c->len + 1);
      if (!ok) set_error(call_error(c), lua_tostring(L, -3), "%s", lua_tostring(L, -2));
    } else {
      take_error(L, call_error(c));
    }
    lua_settop(L, 0);
  } else if (state != LUMA_OK) {
    set_error(call_error(c), c->ask ? "ASK_CANCELLED" : "TOOL_CANCELLED",
              "The runtime was destroyed before the %s finished.", c->ask ? "ask" : "call");
  }
  if (!ok && !c->json) {
    /* {"code":..., "message":...} without Lua: the message needs escaping */
    const luma_error *e = c->err ? c->err : &lost_error;
    size_t cap = strlen(e->message) * 6 + 96;
    c->json = malloc(cap);
    if (c->json) {
      size_t n = (size_t)snprintf(c->json, cap, "{\"code\":\"%s\",\"message\":\"", e->code);
      for (const unsigned char *s = (const unsigned char *)e->message; *s; s++) {
        if (*s == '"' || *s == '\\') { c->json[n++] = '\\'; c->json[n++] = (char)*s; }
        else if (*s < 0x20) n += (size_t)snprintf(c->json + n, cap - n, "\\u%04x", *s);
        else c->json[n++] = (char)*s;
      }
      n += (size_t)snprintf(c->json + n, cap - n, "\"}");
      c->len = n;
    }
  }
  if (c->listen) keep_events(c);
  if (c->tool && !fast) {
    /* its thread and record go back to the program's spares now, not at
       the private state's next collection: a call at a time reuses one */
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->ref);
    lua_getfield(L, -1, "close");
    lua_insert(L, -2);
    if (lua_pcall(L, 1, 0, 0) != LUA_OK) lua_settop(L, 0);
  }
  luaL_unref(L, LUA_REGISTRYINDEX, c->ref);
  c->ref = LUA_NOREF;
  if (c->prev) c->prev->next = c->next; else rt->calls = c->next;
  if (c->next) c->next->prev = c->prev;
  c->prev = c->next = NULL;
  __atomic_store_n(&c->rt, NULL, __ATOMIC_RELEASE);
  __atomic_store_n(&c->state, ok ? LUMA_OK : LUMA_FAILED, __ATOMIC_RELEASE);
}

/* The next event of c's future as JSON (malloc'd), or NULL. The lock is held. */
static char *take_event(luma_call *c, size_t *len) {
  luma_runtime *rt = c->rt;
  lua_State *L = rt->L;
  push_op(rt, "next_event");
  lua_rawgeti(L, LUA_REGISTRYINDEX, c->ref);
  char *out = NULL;
  if (lua_pcall(L, 2, 1, 0) == LUA_OK && lua_type(L, -1) == LUA_TSTRING) {
    const char *s = lua_tolstring(L, -1, len);
    out = malloc(*len + 1);
    if (out) memcpy(out, s, *len + 1);
  }
  lua_settop(L, 0);
  return out;
}

/* A settling ask keeps the events the host has not taken. The lock is held. */
static void keep_events(luma_call *c) {
  size_t len;
  char *ev;
  while ((ev = take_event(c, &len))) {
    char **grown = realloc(c->kept, (c->nkept + 1) * sizeof *grown);
    if (!grown) { free(ev); return; }
    c->kept = grown;
    c->kept[c->nkept++] = ev;
  }
}

int luma_listen(luma_call *c, luma_error *err) {
  clear_error(err);
  if (!c || !c->ask) {
    set_error(err, "INVALID_ARGUMENT", "luma_listen: %s", !c ? "the call is NULL" : "only an ask has events");
    return LUMA_FAILED;
  }
  luma_runtime *rt = __atomic_load_n(&c->rt, __ATOMIC_ACQUIRE);
  if (!rt) {
    set_error(err, "INVALID_ARGUMENT", "luma_listen: the ask is done");
    return LUMA_FAILED;
  }
  lock(rt);
  int rc = LUMA_FAILED;
  if (c->rt) {
    push_op(rt, "listen");
    lua_rawgeti(rt->L, LUA_REGISTRYINDEX, c->ref);
    if (pcall(rt->L, 2, 0, err) == 0) {
      c->listen = 1;
      rc = LUMA_OK;
    }
  }
  unlock(rt);
  return rc;
}

const char *luma_next_event(luma_call *c, size_t *len) {
  size_t n = 0;
  if (len) *len = 0;
  if (!c || !c->listen) return NULL;
  free(c->event);
  c->event = NULL;
  luma_runtime *rt = __atomic_load_n(&c->rt, __ATOMIC_ACQUIRE);
  if (rt) {
    lock(rt);
    if (c->rt) c->event = take_event(c, &n);
    unlock(rt);
  }
  if (!c->event && c->kept_at < c->nkept) {
    c->event = c->kept[c->kept_at];
    c->kept[c->kept_at++] = NULL;
    n = strlen(c->event);
  }
  if (len && c->event) *len = n;
  return c->event;
}

/* Cancels the handles that asked for it. The lock is held. */
static void run_cancels(luma_runtime *rt) {
  if (!__atomic_exchange_n(&rt->cancels, 0, __ATOMIC_ACQ_REL)) return;
  lua_State *L = rt->L;
  for (luma_call *c = rt->calls; c; c = c->next) {
    if (!__atomic_exchange_n(&c->cancel, 0, __ATOMIC_ACQ_REL)) continue;
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->ref);
    lua_getfield(L, -1, "cancel");
    lua_insert(L, -2);
    if (lua_pcall(L, 1, 0, 0) != LUA_OK) lua_settop(L, 0);
  }
}

/* luma_poll with the lock held */
static int poll_locked(luma_runtime *rt, long long *wait_ms) {
  lua_State *L = rt->L;
  run_cancels(rt);
  push_op(rt, "poll");
  long long wait = -1;
  int n = 0;
  if (lua_pcall(L, 1, 2, 0) == LUA_OK) {
    n = (int)lua_tointeger(L, -2);
    if (lua_isinteger(L, -1)) wait = (long long)lua_tointeger(L, -1);
  }
  lua_settop(L, 0);
  /* settle what is done */
  for (luma_call *c = rt->calls, *next; c; c = next) {
    next = c->next;
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->ref);
    lua_getfield(L, -1, "done");
    lua_insert(L, -2);
    int done = lua_pcall(L, 1, 1, 0) == LUA_OK && lua_toboolean(L, -1);
    lua_settop(L, 0);
    if (done) settle(c, LUMA_OK);
  }
  /* a cancel that came during this poll (its wake-up may have been drained
     with the others): the host polls again at once */
  if (__atomic_load_n(&rt->cancels, __ATOMIC_ACQUIRE)) wait = 0;
  if (wait_ms) *wait_ms = wait;
  return n;
}

int luma_poll(luma_runtime *rt, long long *wait_ms) {
  if (wait_ms) *wait_ms = -1;
  if (!rt) return LUMA_FAILED;
  lock(rt);
  int n = poll_locked(rt, wait_ms);
  unlock(rt);
  return n;
}

int luma_fd(luma_runtime *rt) {
  return rt ? rt_fd(rt->crt) : -1;
}

int luma_set_inline(luma_runtime *rt, int on) {
  if (!rt) return LUMA_FAILED;
  lock(rt);
  rt_set_inline(rt->crt, on != 0);
  unlock(rt);
  return LUMA_OK;
}

int luma_wake_socket(luma_runtime *rt, char *path, size_t len, luma_error *err) {
  clear_error(err);
  if (!rt || !path) {
    set_error(err, "INVALID_ARGUMENT", "luma_wake_socket: %s is NULL", !rt ? "the runtime" : "the path");
    return LUMA_FAILED;
  }
  char why[256];
  lock(rt);
  int rc = rt_wake_socket(rt->crt, path, len, why, sizeof why);
  unlock(rt);
  if (rc != 0) {
    set_error(err, "INVALID_ARGUMENT", "luma_wake_socket: %s", why);
    return LUMA_FAILED;
  }
  return LUMA_OK;
}

int luma_ready(const luma_call *c) {
  if (!c) return LUMA_FAILED;
  return __atomic_load_n(&c->state, __ATOMIC_ACQUIRE) != LUMA_PENDING;
}

int luma_wait(luma_call *c, long long timeout_ms) {
  if (!c) return LUMA_FAILED;
  long long end = tp_deadline_ms(timeout_ms);
  for (;;) {
    luma_runtime *rt = __atomic_load_n(&c->rt, __ATOMIC_ACQUIRE);
    if (!rt) return 1;   /* settled */
    long long wait;
    lock(rt);
    poll_locked(rt, &wait);
    unlock(rt);
    if (luma_ready(c) == 1) return 1;
    long long now = mono_ms();
    if (end >= 0 && now >= end) return 0;
    if (end >= 0 && (wait < 0 || wait > end - now)) wait = end - now;
    /* a cancel that came after this poll's run_cancels may have had its
       wake-up eaten by the poll's drain: look again instead of sleeping */
    if (__atomic_load_n(&rt->cancels, __ATOMIC_ACQUIRE)) continue;
    if (wait >= 0 && rt->o.sleep_ms) {
      rt->o.sleep_ms(rt->o.ud, wait);
      continue;
    }
    struct pollfd pfd = { rt_fd(rt->crt), POLLIN, 0 };
    int ms = wait < 0 || wait > 1000000 ? 1000000 : (int)wait;
    while (poll(&pfd, 1, ms) == -1 && errno == EINTR) {}
  }
}

int luma_result(luma_call *c, const char **json, size_t *len, luma_error *err) {
  clear_error(err);
  if (json) *json = NULL;
  if (len) *len = 0;
  if (!c) {
    set_error(err, "INVALID_ARGUMENT", "luma_result: the call is NULL");
    return LUMA_FAILED;
  }
  int state = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);
  if (state == LUMA_PENDING) return LUMA_PENDING;
  if (json) *json = c->json;
  if (len) *len = c->len;
  if (state == LUMA_FAILED && err) *err = c->err ? *c->err : lost_error;
  return state;
}

void luma_cancel(luma_call *c) {
  if (!c || __atomic_load_n(&c->state, __ATOMIC_ACQUIRE) != LUMA_PENDING) return;
  luma_runtime *rt = __atomic_load_n(&c->rt, __ATOMIC_ACQUIRE);
  if (!rt) return;
  __atomic_store_n(&c->cancel, 1, __ATOMIC_RELEASE);
  __atomic_store_n(&rt->cancels, 1, __ATOMIC_RELEASE);
  if (pthread_mutex_trylock(&rt->mu) == 0) {
    run_cancels(rt);
    unlock(rt);
  }
  rt_notify(rt->crt);   /* a thread waiting in luma_wait polls again */
}

void luma_call_free(luma_call *c) {
  if (!c) return;
  luma_runtime *rt = __atomic_load_n(&c->rt, __ATOMIC_ACQUIRE);
  if (rt) {
    lock(rt);
    if (c->rt) {
      /* still in flight: it is cancelled, then dropped */
      lua_State *L = rt->L;
      lua_rawgeti(L, LUA_REGISTRYINDEX, c->ref);
      lua_getfield(L, -1, "cancel");
      lua_insert(L, -2);
      if (lua_pcall(L, 1, 0, 0) != LUA_OK) lua_settop(L, 0);
      luaL_unref(L, LUA_REGISTRYINDEX, c->ref);
      if (c->prev) c->prev->next = c->next; else rt->calls = c->next;
      if (c->next) c->next->prev = c->prev;
    }
    unlock(rt);
  }
  free(c->json);
  free(c->err);
  free(c->event);
  for (size_t i = c->kept_at; i < c->nkept; i++) free(c->kept[i]);
  free(c->kept);
  free(c);
}
