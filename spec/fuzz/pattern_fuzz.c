/*
 * libFuzzer harness for sandbox/pattern.c, differential: every input runs
 * string.find, match, gmatch and gsub (with a string, a table and a function
 * replacement) both in a state with Lua's own string library and in a state
 * with ours, and the two summaries must be equal, errors included.
 *
 * The input is a pattern, a NUL byte, a subject, a NUL byte and a string
 * replacement; the first byte of the pattern part picks `init`. Ours runs
 * first under a step budget: an input that exceeds it (a catastrophic
 * pattern) is not given to Lua's own matcher, which nothing could stop.
 *
 *   make fuzz-pattern FUZZ_SECONDS=300
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lauxlib.h"
#include "lua.h"
#include "lualib.h"

#include "pattern.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_PATTERN 64
#define MAX_SUBJECT 256
#define TICK_BUDGET 200   /* about 200,000 matcher steps */

static const char probe_source[] =
  "local find, match, gmatch, gsub = string.find, string.match, string.gmatch, string.gsub\n"
  "local function show(ok, ...)\n"
  "  local t = { tostring(ok) }\n"
  "  for i = 1, select('#', ...) do\n"
  "    local v = select(i, ...)\n"
  "    t[#t + 1] = type(v) .. ':' .. tostring(v)\n"
  "  end\n"
  "  return table.concat(t, ',')\n"
  "end\n"
  "local function all(s, p, init)\n"
  "  local out, n = {}, 0\n"
  "  for a, b, c in gmatch(s, p, init) do\n"
  "    n = n + 1\n"
  "    out[n] = tostring(a) .. '|' .. tostring(b) .. '|' .. tostring(c)\n"
  "    if n >= 300 then break end\n"
  "  end\n"
  "  return table.concat(out, ';')\n"
  "end\n"
  "local map = { a = 'A', [1] = 'one', b = false }\n"
  "local function fn(a, b) if a == 'x' then return nil end return '<' .. tostring(a) .. tostring(b) .. '>' end\n"
  "return function(s, p, init, r)\n"
  "  return table.concat({\n"
  "    show(pcall(find, s, p, init)),\n"
  "    show(pcall(find, s, p, init, true)),\n"
  "    show(pcall(match, s, p, init)),\n"
  "    show(pcall(all, s, p, init)),\n"
  "    show(pcall(gsub, s, p, r)),\n"
  "    show(pcall(gsub, s, p, r, 2)),\n"
  "    show(pcall(gsub, s, p, map)),\n"
  "    show(pcall(gsub, s, p, fn)),\n"
  "  }, '\\n')\n"
  "end\n";

static lua_State *stock, *ours;
static long ticks;

static void budget_tick(lua_State *L) {
  if (++ticks > TICK_BUDGET) {
    lua_pushliteral(L, "budget exceeded");
    lua_error(L);
  }
}

static lua_State *new_state(int with_ours) {
  lua_State *L = luaL_newstate();
  if (!L) abort();
  luaL_openlibs(L);
  if (with_ours) {
    sp_open(L);
    sp_set_tick(L, budget_tick);
  }
  if (luaL_loadbufferx(L, probe_source, sizeof probe_source - 1, "=probe", "t") != LUA_OK ||
      lua_pcall(L, 0, 1, 0) != LUA_OK) {
    fprintf(stderr, "probe: %s\n", lua_tostring(L, -1));
    abort();
  }
  lua_setglobal(L, "probe");
  return L;
}

/* The probe's summary, or NULL when the budget ran out (ours only). The
   string stays on L's stack until the next call's lua_settop. */
static const char *run(lua_State *L, const char *s, size_t ls, const char *p, size_t lp,
                       lua_Integer init, const char *r, size_t lr) {
  lua_settop(L, 0);
  lua_getglobal(L, "probe");
  lua_pushlstring(L, s, ls);
  lua_pushlstring(L, p, lp);
  lua_pushinteger(L, init);
  lua_pushlstring(L, r, lr);
  ticks = 0;
  if (lua_pcall(L, 4, 1, 0) != LUA_OK) {
    fprintf(stderr, "probe raised: %s\n", lua_tostring(L, -1));
    abort();
  }
  const char *out = lua_tostring(L, -1);
  if (ticks > TICK_BUDGET || strstr(out, "budget exceeded")) return NULL;
  return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  if (!stock) {
    stock = new_state(0);
    ours = new_state(1);
  }
  lua_Integer init = (lua_Integer)(int8_t)data[0] / 8;   /* -16..15 */
  const char *rest = (const char *)data + 1, *end = (const char *)data + size;
  const char *z1 = memchr(rest, 0, (size_t)(end - rest));
  const char *p = rest, *s = z1 ? z1 + 1 : end;
  size_t lp = (size_t)((z1 ? z1 : end) - rest);
  const char *z2 = s < end ? memchr(s, 0, (size_t)(end - s)) : NULL;
  size_t ls = (size_t)((z2 ? z2 : end) - s);
  const char *r = z2 ? z2 + 1 : "%0";
  size_t lr = z2 ? (size_t)(end - r) : 2;
  if (lp > MAX_PATTERN || ls > MAX_SUBJECT || lr > MAX_PATTERN) return 0;
  const char *b = run(ours, s, ls, p, lp, init, r, lr);
  if (!b) return 0;
  const char *a = run(stock, s, ls, p, lp, init, r, lr);
  if (strcmp(a, b) != 0) {
    fprintf(stderr, "pattern %.*s subject %.*s init %lld\n--- lua:\n%s\n--- ours:\n%s\n",
            (int)lp, p, (int)ls, s, (long long)init, a, b);
    abort();
  }
  return 0;
}
