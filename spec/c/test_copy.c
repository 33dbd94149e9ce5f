/* Copying values between Lua states (sandbox/copy.c) against its deadline:
   the clock is read on each table and every few hundred pairs, so a copy
   of one big table stops soon after the deadline passes, however long its
   inserts take (keys that all collide make them quadratic). */
#include "ctest.h"

#include <lauxlib.h>

#include "sandbox.h"

/* A table of n string keys on top of L. */
static void big_table(lua_State *L, int n) {
  lua_createtable(L, 0, n);
  for (int i = 0; i < n; i++) {
    lua_pushfstring(L, "key%d", i);
    lua_pushinteger(L, i);
    lua_rawset(L, -3);
  }
}

/* sx_copy of the value on top of from, with a deadline in ms from now
   (-1: none); the copy is left on `to` when it succeeds. */
static int copy_within(lua_State *from, lua_State *to, long long ms, char *err, size_t errlen) {
  sx_limits lim;
  sx_default_limits(&lim);
  lim.deadline_ns = ms < 0 ? 0 : sx_now_ns() + ms * 1000000LL;
  return sx_copy(from, -1, to, &lim, err, errlen);
}

int main(void) {
  lua_State *from = luaL_newstate(), *to = luaL_newstate();
  char err[200] = "";

  big_table(from, 400000);
  int top = lua_gettop(to);
  CT_CHECK(copy_within(from, to, 1, err, sizeof err) == -2, "a copy of one big table stops at its deadline");
  CT_EQ_STR("copying it passed the call's deadline", err);
  CT_CHECK(lua_gettop(to) == top, "a late copy leaves nothing behind");

  CT_CHECK(copy_within(from, to, -1, err, sizeof err) == 0, "the same table copies without a deadline");
  lua_pushnil(to);
  int n = 0;
  while (lua_next(to, -2)) { lua_pop(to, 1); n++; }
  CT_CHECK(n == 400000, "all of its %d keys are copied", n);
  lua_settop(to, top);

  lua_pop(from, 1);
  big_table(from, 100);
  CT_CHECK(copy_within(from, to, 1000, err, sizeof err) == 0, "a small table copies within its deadline");

  lua_close(from);
  lua_close(to);
  return ct_finish("copy");
}
