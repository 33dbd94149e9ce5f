/* A program made ready to run: its lifecycle, handlers, clock and lookup. */
#include "pipeline.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>

#include "compat.h"
#include "idem.h"
#include "lerror.h"
#include "journal.h"
#include "record.h"
#include "runtime.h"
#include "callint.h"

pl_program *pl_new(rt_runtime *rt, pm_program *p, lv_program *v) {
  lua_State *L = rt_home(rt);
  pl_program *pg = calloc(1, sizeof *pg);
  if (pg) {
    pg->kind = calloc((size_t)p->ntools + 1, sizeof *pg->kind);
    pg->module = calloc((size_t)p->ntools + 1, sizeof *pg->module);
    pg->idem = id_open_memory();
  }
  if (!pg || !pg->kind || !pg->module || !pg->idem) {
    if (pg) {
      id_close(pg->idem);
      free(pg->kind);
      free(pg->module);
      free(pg);
    }
    lv_free(L, v);
    pm_free(p);
    return NULL;
  }
  pg->refs = 1;
  pg->rt = rt;
  rt_retain(rt);
  pg->L = L;
  pg->p = p;
  pg->v = v;
  pg->default_timeout_ms = 30000;
  sx_default_limits(&pg->limits);
  lua_createtable(L, 0, 8);
  lua_newtable(L);
  lua_setfield(L, -2, "host");
  lua_newtable(L);
  lua_setfield(L, -2, "cache");
  pg->anchor = luaL_ref(L, LUA_REGISTRYINDEX);
  return pg;
}

void pl_retain(pl_program *pg) {
  pg->refs++;
}

void pl_close(pl_program *pg) {
  if (pg->closed) return;
  pg->closed = 1;
  for (int i = 0; i < pg->nclaimed; i++) sx_unclaim(pg->claimed[i]);
  pg->nclaimed = 0;
}

void pl_unref(pl_program *pg) {
  if (!pg || --pg->refs > 0) return;
  pl_close(pg);
  lua_State *L = pg->L;
  while (pg->spare) {
    cl_call *c = pg->spare;
    pg->spare = c->pg_next;
    /* a spare call (call.c's cl_release) is its thread and its memory */
    luaL_unref(L, LUA_REGISTRYINDEX, c->tref);
    free(c);
  }
  luaL_unref(L, LUA_REGISTRYINDEX, pg->anchor);
  if (pg->trace) fclose(pg->trace);
  rc_record_close(pg->record);
  jr_close(pg->journal);
  rc_replay_close(pg->replay);
  id_close(pg->idem);
  id_close(pg->cache);
  for (int i = 0; i < pg->p->ntools; i++)
    if (pg->kind[i] == PL_MODULE) sx_unref(pg->module[i]);
  free(pg->claimed);
  free(pg->kind);
  free(pg->module);
  lv_free(L, pg->v);
  pm_free(pg->p);
  rt_runtime *rt = pg->rt;
  free(pg);
  rt_unref(rt);
}

pl_scope *pl_scope_new(pl_program *pg, const pm_agent *ag) {
  pl_scope *sc = calloc(1, sizeof *sc);
  if (!sc) return NULL;
  sc->refs = 1;
  sc->pg = pg;
  pl_retain(pg);
  sc->agent = ag;
  return sc;
}

void pl_scope_retain(pl_scope *sc) {
  sc->refs++;
}

void pl_scope_unref(pl_scope *sc) {
  if (!sc || --sc->refs > 0) return;
  pl_program *pg = sc->pg;
  free(sc);
  pl_unref(pg);
}

int pl_push_anchor(lua_State *L, pl_program *pg, const char *key) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, pg->anchor);
  lua_getfield(L, -1, key);
  lua_remove(L, -2);
  return lua_type(L, -1);
}

int pl_register_host(lua_State *L, pl_program *pg, const pm_tool *t, int fn) {
  if (pg->kind[t->index] != PL_NONE) return -1;
  fn = lc_absindex(L, fn);
  pl_push_anchor(L, pg, "host");
  lua_pushvalue(L, fn);
  lua_setfield(L, -2, t->name);
  lua_pop(L, 1);
  pg->kind[t->index] = PL_HOST;
  return 0;
}

/* The program's claim on m (sx_claim), once per module: 0, or -1 when
   memory runs out. */
static int claim(pl_program *pg, sx_module *m) {
  for (int i = 0; i < pg->nclaimed; i++)
    if (pg->claimed[i] == m) return 0;
  sx_module **list = realloc(pg->claimed, ((size_t)pg->nclaimed + 1) * sizeof *list);
  if (!list) return -1;
  pg->claimed = list;
  pg->claimed[pg->nclaimed++] = m;
  sx_claim(m);
  return 0;
}

int pl_register_module(pl_program *pg, const pm_tool *t, sx_module *m) {
  if (pg->kind[t->index] != PL_NONE) return -1;
  if (!pg->closed && claim(pg, m) != 0) return -2;
  sx_retain(m);
  pg->kind[t->index] = PL_MODULE;
  pg->module[t->index] = m;
  return 0;
}

int pl_register_builtin(pl_program *pg, const pm_tool *t, pl_builtin fn) {
  if (!t->builtin || t != pg->p->discover || pg->kind[t->index] != PL_NONE) return -1;
  pg->kind[t->index] = PL_BUILTIN;
  pg->discover = fn;
  return 0;
}

/* Calls anchor.clock[name](arg) and returns its integer result. */
static long long lua_clock(lua_State *L, pl_program *pg, const char *name, long long arg, int with_arg) {
  pl_push_anchor(L, pg, "clock");
  lua_getfield(L, -1, name);
  lua_remove(L, -2);
  if (with_arg) lua_pushinteger(L, (lua_Integer)arg);
  long long v = 0;
  if (lua_pcall(L, with_arg, 1, 0) == LUA_OK && lua_type(L, -1) == LUA_TNUMBER) v = (long long)lua_tonumber(L, -1);
  lua_pop(L, 1);
  return v;
}

long long pl_wall_ms(lua_State *L, pl_program *pg) {
  if (pg->has_clock) return lua_clock(L, pg, "now", 0, 0);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

long long pl_mono_ms(lua_State *L, pl_program *pg) {
  if (pg->has_clock) return lua_clock(L, pg, "now", 0, 0);
  return sx_now_ns() / 1000000;
}

void pl_sleep_ms(lua_State *L, pl_program *pg, long long ms) {
  if (ms <= 0) return;
  if (pg->has_clock) { lua_clock(L, pg, "sleep", ms, 1); return; }
  struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {}
}

const char *pl_lookup(lua_State *L, pl_program *pg, const char *name) {
  if (!pg->has_lookup) {
    const char *v = getenv(name);
    if (v) lua_pushstring(L, v); else lua_pushnil(L);
    return lua_tostring(L, -1);
  }
  pl_push_anchor(L, pg, "lookup");
  lua_pushstring(L, name);
  if (lua_pcall(L, 1, 1, 0) != LUA_OK || lua_type(L, -1) != LUA_TSTRING) {
    lua_pop(L, 1);
    lua_pushnil(L);
  }
  return lua_tostring(L, -1);
}

void pl_lost_values(lua_State *T, int nvalues, int slot, le_code code, const char *what) {
  const char *msg = lua_type(T, -1) == LUA_TSTRING ? lua_tostring(T, -1) : "out of memory";
  char why[300];
  snprintf(why, sizeof why, "%s: %s", what, msg);
  lua_settop(T, 0);
  lua_settop(T, nvalues);
  le_push_code(T, code, why, 0);
  lua_replace(T, slot);
}
