/* The Lua binding's side of a call (lcall.h): its input in, its outcome out. */
#include "lcall.h"

#include <lauxlib.h>

#include "callint.h"
#include "compat.h"
#include "pipeline.h"

void lcl_put_input(lua_State *L, int idx, cl_call *c, int copy) {
  lua_State *T = c->T;
  idx = lc_absindex(L, idx);
  if (copy) {
    char why[200];
    sx_limits lim = c->pg->limits;
    if (sx_copy(L, idx, T, &lim, why, sizeof why) != 0) {
      /* validation will say what is wrong with it */
      lua_pushvalue(L, idx);
      lua_xmove(L, T, 1);
    }
  } else {
    lua_pushvalue(L, idx);
    lua_xmove(L, T, 1);
  }
  lua_replace(T, CV_INPUT);
}

void lcl_put_scope_anchor(lua_State *L, int idx, cl_call *c) {
  lua_pushvalue(L, idx);
  lua_xmove(L, c->T, 1);
  lua_replace(c->T, CV_SCOPE);
}

int lcl_take(lua_State *L, cl_call *c, st_event *ev) {
  lua_pushvalue(c->T, CV_VALUE);
  lua_pushvalue(c->T, CV_WARN);
  lua_xmove(c->T, L, 2);
  *ev = c->ev;
  return c->ok;
}

void lcl_push_meta(lua_State *L, const st_event *ev, int warnings) {
  int warned = warnings && !lua_isnil(L, warnings);
  lua_createtable(L, 0, warned ? 5 : 4);   /* 4 fields fit 4 slots; a fifth takes 8 */
  if (warned) {
    lua_pushvalue(L, warnings);
    lua_setfield(L, -2, "warnings");
  }
  lua_pushinteger(L, ev->attempts);
  lua_setfield(L, -2, "attempts");
  lua_pushboolean(L, ev->cache_hit);
  lua_setfield(L, -2, "cache_hit");
  lua_pushboolean(L, ev->single_flight);
  lua_setfield(L, -2, "single_flight");
  lua_pushboolean(L, ev->idempotent_replay);
  lua_setfield(L, -2, "idempotent_replay");
}

int lcl_push_outcome(lua_State *L, cl_call *c) {
  luaL_checkstack(L, 4, "returning a tool's result");
  st_event ev;
  int ok = lcl_take(L, c, &ev);
  if (!ok) {
    lua_pop(L, 1);
    return -1;
  }
  lcl_push_meta(L, &ev, lua_gettop(L));
  lua_remove(L, -2);
  return 0;
}
