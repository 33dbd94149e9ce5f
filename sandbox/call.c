/* Handler calls in three phases, so that the run itself can happen on
   another thread: prepare (the host's thread copies the inputs into the
   acquired state), execute (any thread runs the prepared calls, one after
   the other), collect (the host's thread copies results and errors back).
   Nothing here allocates in a module's state outside a protected call: a
   state at its memory limit fails the call, never the host. */
#include "state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "compat.h"
#include "errors.h"
#include "isolate.h"
#include "lerror.h"
#include "utf8.h"
#include "watch.h"

/* Pushes t[key] found by walking the table raw, without allocating in the
   state (no new string is made for the key). Pushes nil when absent. */
static void raw_field(lua_State *H, int t, const char *key) {
  size_t klen = strlen(key);
  lua_pushnil(H);
  while (lua_next(H, t)) {
    if (lua_type(H, -2) == LUA_TSTRING) {
      size_t len;
      const char *k = lua_tolstring(H, -2, &len);
      if (len == klen && memcmp(k, key, len) == 0) {
        lua_remove(H, -2);
        return;
      }
    }
    lua_pop(H, 1);
  }
  lua_pushnil(H);
}

/* A handler's error code: CODE_LIKE_THIS, and not one the runtime itself
   reports (a handler saying PROGRAM_INVALID or TOOL_TIMEOUT would make the
   host tell a lie). */
int sx_handler_code_ok(const char *code, size_t len) {
  if (len < 1 || len > SX_CODE_MAX || code[0] < 'A' || code[0] > 'Z') return 0;
  for (size_t i = 1; i < len; i++)
    if (!((code[i] >= 'A' && code[i] <= 'Z') || (code[i] >= '0' && code[i] <= '9') || code[i] == '_')) return 0;
  le_code known;
  return !le_lookup(code, &known);
}

/* At most SX_MESSAGE_MAX bytes of a message, cut on a character boundary
   and marked; malloc'd (NULL: out of memory). */
static char *capped(const char *m, size_t len) {
  if (len <= SX_MESSAGE_MAX) {
    char *out = malloc(len + 1);
    if (out) { memcpy(out, m, len); out[len] = '\0'; }
    return out;
  }
  size_t n = u8_cut(m, len, SX_MESSAGE_MAX);
  char *out = malloc(n + 64);
  if (out) snprintf(out, n + 64, "%.*s... (cut: %zu bytes)", (int)n, m, len);
  return out;
}

static char *copied(const char *m, size_t len) {
  char *out = malloc(len + 1);
  if (out) { memcpy(out, m, len); out[len] = '\0'; }
  return out;
}

/* The copy's deadline: the handler's own, and a little more for the copy of
   a result returned in its last moments. */
static sx_limits copy_limits(const sx_run *run) {
  sx_limits lim = run->opts.limits;
  long long now = sx_now_ns(), grace = SX_COPY_GRACE_MS * 1000000LL;
  lim.deadline_ns = run->deadline_ns ? (run->deadline_ns > now ? run->deadline_ns : now) + grace : 0;
  return lim;
}

/* The error value at index e of the state H, as a host error on L. A
   mirror state's error (remote) was made by isolate.c from a child's
   reply, whose code and message it checked already. */
static void push_handler_error(lua_State *H, int e, const sx_run *run, lua_State *L, int remote) {
  char msg[512];
  const sx_call_opts *o = &run->opts;
  if (run->out_of_memory || run->status == LUA_ERRMEM) {
    snprintf(msg, sizeof msg, "Tool '%s' ran out of memory.", o->tool);
    le_push(L, "TOOL_MEMORY_LIMIT", msg, 0, 0);
    return;
  }
  if (lua_type(H, e) == LUA_TTABLE && le_is_error(H, e)) {
    raw_field(H, e, "code");
    raw_field(H, e, "message");
    raw_field(H, e, "retryable");
    raw_field(H, e, "details");
    size_t codelen = 0, msglen = 0;
    const char *code = lua_type(H, -4) == LUA_TSTRING ? lua_tolstring(H, -4, &codelen) : NULL;
    const char *message = lua_type(H, -3) == LUA_TSTRING ? lua_tolstring(H, -3, &msglen) : NULL;
    int retryable = lua_toboolean(H, -2);
    int details = 0;
    if (code && !remote && !sx_handler_code_ok(code, codelen)) {
      /* the attempted code goes in details, cut to a sane length */
      lua_createtable(L, 0, 1);
      lua_pushlstring(L, code, codelen > SX_CODE_MAX ? SX_CODE_MAX : codelen);
      lua_setfield(L, -2, "attempted_code");
      details = lua_gettop(L);
      snprintf(msg, sizeof msg, "Tool '%s' raised an error with the code '%.*s', which a handler may not use "
               "(codes are [A-Z][A-Z0-9_]*, at most %d characters, and not one of the runtime's own).",
               o->tool, (int)(codelen > SX_CODE_MAX ? SX_CODE_MAX : codelen), code, SX_CODE_MAX);
      le_push(L, "TOOL_FAILED", msg, 0, details);
      lua_remove(L, details);
      lua_pop(H, 4);
      return;
    }
    if (!lua_isnil(H, -1)) {
      char why[160];
      sx_limits finite = copy_limits(run);
      finite.finite_numbers = 1;
      if (sx_copy(H, lua_gettop(H), L, &finite, why, sizeof why) == 0) details = lua_gettop(L);
    }
    /* a child's message was cut in the child already (isolate.c checked
       that it is no longer than a cut one): cutting it again would mark
       it twice */
    char *text = remote ? copied(message ? message : "", message ? msglen : 0)
                        : capped(message ? message : "", message ? msglen : 0);
    le_push(L, code ? code : "TOOL_FAILED", text ? text : "(out of memory)", retryable, details);
    free(text);
    if (details) lua_remove(L, details);
    lua_pop(H, 4);
    return;
  }
  /* only strings are read as messages: no code of the handler's runs here */
  if (lua_type(H, e) == LUA_TSTRING) snprintf(msg, sizeof msg, "%s", lua_tostring(H, e));
  else snprintf(msg, sizeof msg, "Tool '%s' raised a %s value.", o->tool, luaL_typename(H, e));
  le_push(L, "TOOL_FAILED", msg, 0, 0);
}

static void prepare_failure(sx_run *run, const char *code, const char *fmt, const char *a, const char *b) {
  run->failed_code = code;
  snprintf(run->failed, sizeof run->failed, fmt, a, b);
}

/* The needs of a tool that has none: one empty table per state, not one per
   call. It is made again when a handler filled it or gave it a metatable,
   so every call sees it empty; a handler that keeps it sees only its own
   module's doing, as with any global. The calls of one batch after the
   first get a table of their own (`shared`: the batch's was given). May
   raise (a memory error). */
static void push_empty_needs(lua_State *H, sx_state *s, int *shared) {
  int top = lua_gettop(H);
  if (*shared) {
    lua_newtable(H);
    return;
  }
  *shared = 1;
  if (s->needs_ref != LUA_NOREF) {
    lua_rawgeti(H, LUA_REGISTRYINDEX, s->needs_ref);
    lua_pushnil(H);
    if (!lua_next(H, top + 1) && !lua_getmetatable(H, top + 1)) return;
    lua_settop(H, top);
    luaL_unref(H, LUA_REGISTRYINDEX, s->needs_ref);
    s->needs_ref = LUA_NOREF;
  }
  lua_newtable(H);
  lua_pushvalue(H, -1);
  s->needs_ref = luaL_ref(H, LUA_REGISTRYINDEX);
}

typedef struct sx_prep {
  sx_state *s;
  lua_State *L;
  sx_run *run;
  int *needs_shared;              /* the state's empty needs table went to a call of this batch */
} sx_prep;

/* Protected, in the module's state: pushes the handler, a copy of the input
   and a copy of the needs (three results), or records why it cannot. */
static int prepare_one(lua_State *H) {
  sx_prep *p = lua_touserdata(H, 1);
  sx_run *run = p->run;
  char why[200];
  if (p->s->child) {
    /* the handler is in the child: its name stands for it here */
    int n, found = 0;
    const char *const *names = sx_exports(p->s->module, &n);
    for (int i = 0; i < n && !found; i++) found = strcmp(names[i], run->name) == 0;
    if (found) lua_pushstring(H, run->name); else lua_pushnil(H);
  } else {
    lua_rawgeti(H, LUA_REGISTRYINDEX, p->s->exports_ref);
    lua_pushstring(H, run->name);
    lc_rawget(H, -2);
    lua_remove(H, -2);
  }
  if (lua_type(H, -1) != (p->s->child ? LUA_TSTRING : LUA_TFUNCTION)) {
    prepare_failure(run, "TOOL_NOT_FOUND", "'%s' is not registered in the tool registry.%s", run->name, "");
    return 0;
  }
  if (sx_copy_record(p->L, run->input, H, &run->opts.limits, run->input_keys, why, sizeof why) != 0) {
    prepare_failure(run, "TOOL_INPUT_INVALID", "%s.input cannot be passed to the handler: %s", run->opts.tool, why);
    return 0;
  }
  if (run->needs) {
    if (sx_copy(p->L, run->needs, H, &run->opts.limits, why, sizeof why) != 0) {
      prepare_failure(run, "TOOL_CONTEXT_INVALID", "the needs of %s cannot be passed to the handler: %s", run->opts.tool, why);
      return 0;
    }
  } else {
    push_empty_needs(H, p->s, p->needs_shared);
  }
  if (p->s->child) return 3;
  /* the coroutine the call runs as, its body's arguments on its stack: the
     spare one of a call that returned, or a new one */
  lua_State *co;
  int fresh = !p->s->spare_co;      /* a new one, on top of H until its ref */
  if (fresh) {
    co = lua_newthread(H);
  } else {
    co = p->s->spare_co;
    run->co_ref = p->s->spare_ref;
    p->s->spare_co = NULL;
    p->s->spare_ref = LUA_NOREF;
  }
#if LUA_VERSION_NUM >= 504
  lua_pushcfunction(co, sx_call_body);
#endif
  lua_pushvalue(H, -3 - fresh);
  lua_xmove(H, co, 1);
  lua_pushvalue(H, -2 - fresh);
  lua_xmove(H, co, 1);
  lua_rawgeti(H, LUA_REGISTRYINDEX, p->s->signal_ref);
  lua_xmove(H, co, 1);
  lua_pushvalue(H, -1 - fresh);
  lua_xmove(H, co, 1);
  if (fresh) run->co_ref = luaL_ref(H, LUA_REGISTRYINDEX);
  run->co = co;
#if LUA_VERSION_NUM >= 504
  *(sx_run **)lua_getextraspace(co) = run;
#endif
  return 0;
}

void sx_prepare(sx_state *s, lua_State *L, sx_run *runs, int n) {
  lua_State *H = s->L;
  s->base = lua_gettop(H);
  s->printed = 0;
  int room = lua_checkstack(H, 4 * n + 8), needs_shared = 0;
  for (int i = 0; i < n; i++) {
    sx_run *run = &runs[i];
    run->failed_code = NULL;
    run->fn = run->input_slot = run->needs_slot = 0;
    if (!room) {
      prepare_failure(run, "TOOL_FAILED", "no stack space in the tool module's state%s%s", "", "");
      continue;
    }
    sx_prep p = { s, L, run, &needs_shared };
    s->out_of_memory = 0;
    run->co = NULL;
    run->co_ref = LUA_NOREF;
    run->started = run->waiting = 0;
    int top = lua_gettop(H);
    lua_pushcfunction(H, prepare_one);
    lua_pushlightuserdata(H, &p);
    int status = lua_pcall(H, 1, s->child ? 3 : LUA_MULTRET, 0);
    if (status != LUA_OK) {
      lua_settop(H, top);
      if (s->out_of_memory || status == LUA_ERRMEM) {
        prepare_failure(run, "TOOL_MEMORY_LIMIT", "Tool '%s' ran out of memory receiving its input.%s", run->opts.tool, "");
        s->broken = 1;
      } else {
        prepare_failure(run, "TOOL_FAILED", "Tool '%s' could not receive its input.%s", run->opts.tool, "");
      }
      continue;
    }
    if (run->failed_code || !s->child) {
      lua_settop(H, top);
      continue;
    }
    run->fn = lua_gettop(H) - 2;
    run->input_slot = run->fn + 1;
    run->needs_slot = run->fn + 2;
  }
}

/* The coroutine of a call that ended (or will not resume) goes: its
   state's registry lets it go, and it is no call's any more. */
static void drop_coroutine(lua_State *H, sx_run *run) {
  if (!run->co) return;
#if LUA_VERSION_NUM >= 504
  *(sx_run **)lua_getextraspace(run->co) = NULL;
#endif
  luaL_unref(H, LUA_REGISTRYINDEX, run->co_ref);
  run->co = NULL;
  run->co_ref = LUA_NOREF;
}

/* Runs the call's coroutine until it ends or waits: its first slice, or
   the next one after a wait. Leaves its result or error on top of the
   state's main thread once it ended; nothing while it waits. */
static void run_slice(sx_state *s, sx_run *run) {
  lua_State *H = s->L, *co = run->co;
  int nargs = 0;
  if (!run->started) {
    run->started = 1;
    run->printed = 0;
    run->deadline_ns = run->opts.timeout_ms > 0 ? sx_now_ns() + run->opts.timeout_ms * 1000000LL : 0;
    nargs = 3;
  }
  run->waiting = 0;
  run->handed_off = 0;
  run->wake_ns = 0;
  run->transfer = NULL;
  s->tool = run->opts.tool;
  s->timeout_ms = run->opts.timeout_ms;
  s->opts = &run->opts;
  s->expired = 0;
  s->out_of_memory = 0;
  s->printed = run->printed;
  s->deadline_ns = run->deadline_ns;
  s->current = co;
  s->stopping = 0;
  __atomic_store_n(&s->run, run, __ATOMIC_RELEASE);
  /* The handler starts under the count hook. One that runs longer than
     SX_PROMOTE_NS is handed to the watch by the hook, and runs on with no
     hook, at the speed of plain Lua, until a signal sets one (watch.c).
     Arming the watch reads the thread's signal mask, a system call that
     would cost a short call more than all the rest of it (2.4 µs of 5 on
     the machine of issue 15). */
  s->watched = 0;
  s->promote = sx_watch_arm;
  s->promote_ns = sx_now_ns() + SX_PROMOTE_NS;
  sx_start_hook(s, co);
#if LUA_VERSION_NUM >= 504
  int nres = 0;
  int status = lua_resume(co, H, nargs ? nargs + 1 : 0, &nres);
#else
  (void)nargs;
  int status = lua_pcall(co, 3, 1, 0);
#endif
  s->opts = NULL;
  s->promote_ns = 0;
  if (s->watched) {
    __atomic_store_n(&s->current, co, __ATOMIC_RELEASE);
    sx_watch_disarm(s);
    s->watched = 0;
  }
  __atomic_store_n(&s->run, NULL, __ATOMIC_RELEASE);
  run->printed = s->printed;
  run->out_of_memory |= s->out_of_memory;
  if (status == LUA_YIELD && (run->wake_ns || run->handed_off)) {
    /* suspended in a wait: the state may serve other calls meanwhile, but
       not new ones if this slice found it out of memory */
    run->waiting = 1;
    s->deadline_ns = 0;
    if (s->out_of_memory) s->broken = 1;
    return;
  }
#if LUA_VERSION_NUM >= 504
  if (status == LUA_OK) {
    run->status = (int)lua_tointeger(co, -2);
  } else if (status == LUA_YIELD) {
    /* only a wait may yield from a call's own coroutine */
    run->status = LUA_ERRRUN;
    lua_pushfstring(co, "Tool '%s' yielded outside a wait.", run->opts.tool);
  } else {
    run->status = status;
  }
#else
  run->status = status;
#endif
  lua_xmove(co, H, 1);
#if LUA_VERSION_NUM >= 504
  if (status == LUA_OK && !s->spare_co) {
    /* it returned: its stack emptied, it is the next call's */
    lua_settop(co, 0);
    *(sx_run **)lua_getextraspace(co) = NULL;
    s->spare_co = co;
    s->spare_ref = run->co_ref;
    run->co = NULL;
    run->co_ref = LUA_NOREF;
  }
#endif
  drop_coroutine(H, run);
  /* a result that comes after the deadline is late: the call timed out */
  if (s->deadline_ns && sx_now_ns() >= s->deadline_ns) s->expired = 1;
  s->deadline_ns = 0;
  run->expired = s->expired;
  run->out_of_memory = run->out_of_memory || run->status == LUA_ERRMEM;
  /* a state that ran out of memory or time is not trusted again */
  if (run->expired || run->out_of_memory || __atomic_load_n(&run->cancelled, __ATOMIC_ACQUIRE)) s->broken = 1;
  run->result_slot = lua_gettop(H);
}

void sx_execute(sx_state *s, sx_run *runs, int n) {
  if (s->child) {
    sx_remote_execute(s, runs, n);
    return;
  }
  for (int i = 0; i < n; i++) {
    sx_run *run = &runs[i];
    if (!run->waiting) run->result_slot = 0;
    if (run->failed_code || !run->co) continue;
    run_slice(s, run);
  }
}

void sx_drop_call(sx_state *s, sx_run *run) {
  drop_coroutine(s->L, run);
}

int sx_collect(sx_state *s, lua_State *L, const sx_run *run) {
  lua_State *H = s->L;
  char why[200];
  if (run->failed_code) {
    le_push(L, run->failed_code, run->failed, 0, 0);
    return -1;
  }
  if (run->expired) {
    le_format(why, sizeof why, LE_TOOL_TIMEOUT, run->opts.tool, run->opts.timeout_ms);
    le_push_code(L, LE_TOOL_TIMEOUT, why, 0);
    return -1;
  }
  if (run->status != LUA_OK || run->out_of_memory) {
    push_handler_error(H, run->result_slot, run, L, s->child != NULL);
    return -1;
  }
  sx_limits lim = copy_limits(run);
  int copied = sx_copy_record(H, run->result_slot, L, &lim, run->result_keys, why, sizeof why);
  if (copied == -2) {
    le_format(why, sizeof why, LE_TOOL_TIMEOUT, run->opts.tool, run->opts.timeout_ms);
    le_push_code(L, LE_TOOL_TIMEOUT, why, 0);
    return -1;
  }
  if (copied != 0) {
    char msg[300];
    snprintf(msg, sizeof msg, "%s.output cannot be returned: %s", run->opts.tool, why);
    le_push(L, "TOOL_OUTPUT_INVALID", msg, 0, 0);
    return -1;
  }
  return 0;
}
