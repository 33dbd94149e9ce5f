/*
 * JSON for Lua values: the canonical encoder (sorted keys, shortest
 * round-tripping numbers, raw reads only) used for printing, cache keys and
 * stores, and the conversion of parsed JSON trees into Lua values.
 */
#include "ljson.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compat.h"
#include "lerror.h"
#include "utf8.h"

/* The metatable marking a Lua table as a JSON array, so that an empty one
   prints as [] (found by the address of this key in the registry). */
static const char array_mt_key = 0;

void lj_push_array_mt(lua_State *L) {
  if (!lc_registry_table(L, &array_mt_key)) return;
  lua_pushstring(L, "array");
  lua_setfield(L, -2, "__name");
}

int lj_has_array_mt(lua_State *L, int idx) {
  if (!lua_getmetatable(L, idx)) return 0;
  lj_push_array_mt(L);
  int same = lua_rawequal(L, -1, -2);
  lua_pop(L, 2);
  return same;
}

typedef struct lj_key {
  const char *s;
  size_t len;
} lj_key;

typedef struct lj_enc {
  lua_State *L;
  sb_buf *b;
  int indent;
  int max_depth;
  int depth;
  const void *tables[LIM_JSON_DEPTH_CAP + 1];
  char *err;
  size_t errlen;
  int failed;
} lj_enc;

static int fail(lj_enc *e, const char *msg) {
  if (!e->failed && e->err && e->errlen) snprintf(e->err, e->errlen, "%s", msg);
  e->failed = 1;
  return 0;
}

static int key_cmp(const void *a, const void *b) {
  const lj_key *x = a, *y = b;
  size_t n = x->len < y->len ? x->len : y->len;
  int r = memcmp(x->s, y->s, n);
  return r ? r : (x->len > y->len) - (x->len < y->len);
}

static void newline(lj_enc *e) {
  if (e->indent <= 0) return;
  sb_addc(e->b, '\n');
  for (int i = 0; i < e->indent * e->depth; i++) sb_addc(e->b, ' ');
}

static int encode(lj_enc *e, int idx);

/* Keys 1..n of a table that is an array; 0 if it is not one. */
static size_t array_length(lua_State *L, int idx, int *is_array) {
  size_t n = lc_rawlen(L, idx), count = 0;
  *is_array = 1;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TNUMBER || !lc_isinteger(L, -1) || lua_tointeger(L, -1) < 1 ||
        (size_t)lua_tointeger(L, -1) > n) {
      *is_array = 0;
      lua_pop(L, 1);
      return 0;
    }
    count++;
  }
  if (count != n) *is_array = 0;
  return n;
}

static int encode_table(lj_enc *e, int idx) {
  lua_State *L = e->L;
  const void *p = lua_topointer(L, idx);
  if (e->depth >= e->max_depth) return fail(e, "nested too deeply");
  for (int i = 0; i < e->depth; i++)
    if (e->tables[i] == p) return fail(e, "a table contains itself");
  if (!lua_checkstack(L, 6)) return fail(e, "nested too deeply");
  int is_array;
  size_t n = array_length(L, idx, &is_array);
  e->tables[e->depth++] = p;
  if (is_array && (n > 0 || lj_has_array_mt(L, idx))) {
    sb_addc(e->b, '[');
    for (size_t i = 1; i <= n && !e->failed; i++) {
      newline(e);
      lc_rawgeti(L, idx, (lua_Integer)i);
      encode(e, lua_gettop(L));
      lua_pop(L, 1);
      if (i < n) sb_addc(e->b, ',');
    }
    e->depth--;
    if (n) newline(e);
    sb_addc(e->b, ']');
    return !e->failed;
  }
  /* an object: string keys only, written in sorted order */
  size_t cap = 16, count = 0;
  lj_key *keys = malloc(cap * sizeof *keys);
  if (!keys) return fail(e, "out of memory");
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TSTRING) {
      lua_pop(L, 1);
      free(keys);
      e->depth--;
      return fail(e, "a table mixes keys that are not strings with others, or has holes");
    }
    if (count == cap) {
      lj_key *more = realloc(keys, 2 * cap * sizeof *keys);
      if (!more) { lua_pop(L, 1); free(keys); e->depth--; return fail(e, "out of memory"); }
      keys = more;
      cap *= 2;
    }
    /* the key string stays alive: the table holds it and nothing changes it */
    keys[count].s = lua_tolstring(L, -1, &keys[count].len);
    count++;
  }
  qsort(keys, count, sizeof *keys, key_cmp);
  sb_addc(e->b, '{');
  for (size_t i = 0; i < count && !e->failed; i++) {
    newline(e);
    if (!u8_valid(keys[i].s, keys[i].len)) { fail(e, "a key is not valid UTF-8"); break; }
    json_write_string(e->b, keys[i].s, keys[i].len);
    sb_adds(e->b, e->indent > 0 ? ": " : ":");
    lua_pushlstring(L, keys[i].s, keys[i].len);
    lc_rawget(L, idx);
    encode(e, lua_gettop(L));
    lua_pop(L, 1);
    if (i + 1 < count) sb_addc(e->b, ',');
  }
  free(keys);
  e->depth--;
  if (count) newline(e);
  sb_addc(e->b, '}');
  return !e->failed;
}

static int encode(lj_enc *e, int idx) {
  lua_State *L = e->L;
  char num[40];
  switch (lua_type(L, idx)) {
    case LUA_TNIL:
      sb_adds(e->b, "null");
      return 1;
    case LUA_TBOOLEAN:
      sb_adds(e->b, lua_toboolean(L, idx) ? "true" : "false");
      return 1;
    case LUA_TNUMBER:
      if (lc_isinteger(L, idx)) {
        sb_printf(e->b, "%lld", (long long)lua_tointeger(L, idx));
        return 1;
      }
      if (!json_format_number((double)lua_tonumber(L, idx), num)) return fail(e, "NaN and infinity have no JSON form");
      sb_adds(e->b, num);
      return 1;
    case LUA_TSTRING: {
      size_t len;
      const char *s = lua_tolstring(L, idx, &len);
      if (!u8_valid(s, len)) return fail(e, "a string is not valid UTF-8");
      json_write_string(e->b, s, len);
      return 1;
    }
    case LUA_TLIGHTUSERDATA:
      if (lua_touserdata(L, idx) == NULL) {
        sb_adds(e->b, "null");
        return 1;
      }
      break;
    case LUA_TTABLE:
      /* an error whose fields are made when first read (lerror.h) gets them
         now: le_is_error completes one (a table with no metatable costs it
         one lua_getmetatable) */
      le_is_error(L, idx);
      return encode_table(e, idx);
    default:
      break;
  }
  char msg[64];
  snprintf(msg, sizeof msg, "a %s has no JSON form", luaL_typename(L, idx));
  return fail(e, msg);
}

int lj_encode(lua_State *L, int idx, sb_buf *b, int indent, int max_depth, char *err, size_t errlen) {
  lj_enc e;
  e.L = L;
  e.b = b;
  e.indent = indent;
  e.max_depth = max_depth < 1 ? 1 : max_depth > LIM_JSON_DEPTH_CAP ? LIM_JSON_DEPTH_CAP : max_depth;
  e.depth = 0;
  e.err = err;
  e.errlen = errlen;
  e.failed = 0;
  int top = lua_gettop(L);
  encode(&e, lc_absindex(L, idx));
  lua_settop(L, top);
  if (!e.failed && b->failed) fail(&e, "out of memory");
  return e.failed ? -1 : 0;
}

void lj_push(lua_State *L, const jv *v, int depth) {
  luaL_checkstack(L, 4, "converting JSON");
  switch (v->type) {
    case JV_NULL: lua_pushlightuserdata(L, NULL); break;
    case JV_BOOL: lua_pushboolean(L, v->b); break;
    case JV_INT: lua_pushinteger(L, (lua_Integer)v->i); break;
    case JV_NUM: lua_pushnumber(L, v->n); break;
    case JV_STR: lua_pushlstring(L, v->s, v->len); break;
    case JV_ARR: {
      lua_createtable(L, v->count, 0);
      int i = 0;
      for (const jv *m = v->first; m && depth < LIM_JSON_DEPTH_CAP; m = m->next) {
        lj_push(L, m, depth + 1);
        lua_rawseti(L, -2, ++i);
      }
      lj_push_array_mt(L);
      lua_setmetatable(L, -2);
      break;
    }
    case JV_OBJ:
      lua_createtable(L, 0, v->count);
      for (const jv *m = v->first; m && depth < LIM_JSON_DEPTH_CAP; m = m->next) {
        lua_pushlstring(L, m->key, m->keylen);
        lj_push(L, m, depth + 1);
        lua_rawset(L, -3);
      }
      break;
  }
}

/* core.json_encode(value [, { indent = n, max_depth = n }]) -> text; raises JSON_INVALID */
static int l_encode(lua_State *L) {
  luaL_checkany(L, 1);
  int indent = 0, max_depth = LIM_JSON_DEPTH;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_getfield(L, 2, "indent");
    indent = (int)luaL_optinteger(L, -1, 0);
    lua_getfield(L, 2, "max_depth");
    max_depth = (int)luaL_optinteger(L, -1, LIM_JSON_DEPTH);
    lua_pop(L, 2);
  }
  sb_buf b;
  sb_init(&b);
  char err[128];
  if (lj_encode(L, 1, &b, indent, max_depth, err, sizeof err) != 0) {
    sb_free(&b);
    return le_raise_code(L, LE_JSON_INVALID, err, 0);
  }
  lua_pushlstring(L, b.data ? b.data : "", b.len);
  sb_free(&b);
  return 1;
}

static int arena_gc(lua_State *L) {
  ar_free(lua_touserdata(L, 1));
  return 0;
}

/* The registry's key of a state's spare parse arena. */
static const char spare_arena = 's';

/* Pushes an empty arena userdata: the state's spare one, taken out of the
   registry while it is in use (a decode nested in a finalizer that runs
   meanwhile makes its own), or a new one. A new chunk and a userdata with
   a finalizer at each decode cost a small one more than the parse. */
static ar_arena *take_arena(lua_State *L) {
  lua_pushlightuserdata(L, (void *)&spare_arena);
  lua_rawget(L, LUA_REGISTRYINDEX);
  if (lua_type(L, -1) == LUA_TUSERDATA) {
    lua_pushlightuserdata(L, (void *)&spare_arena);
    lua_pushboolean(L, 0);
    lua_rawset(L, LUA_REGISTRYINDEX);
    return lua_touserdata(L, -1);
  }
  lua_pop(L, 1);
  ar_arena *a = lua_newuserdata(L, sizeof *a);
  ar_init(a);
  if (luaL_newmetatable(L, "luma.json_arena")) {
    lua_pushcfunction(L, arena_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  return a;
}

/* The arena at idx, emptied, is the state's spare again. */
static void give_arena(lua_State *L, int idx, ar_arena *a) {
  ar_reset(a);
  lua_pushlightuserdata(L, (void *)&spare_arena);
  lua_pushvalue(L, idx);
  lua_rawset(L, LUA_REGISTRYINDEX);
}

int lj_push_text(lua_State *L, const char *text, size_t len, int max_depth, char *err, size_t errlen) {
  ar_arena *a = take_arena(L);
  int at = lua_gettop(L);
  jv *v = json_parse(a, text, len, max_depth, err, errlen);
  if (v) lj_push(L, v, 0);
  give_arena(L, at, a);
  lua_remove(L, at);
  return v != NULL;
}

/* core.json_decode(text [, { max_depth = n }]) -> value; raises JSON_INVALID.
   Arrays get array_mt; null is luma.null; integers stay exact. */
static int l_decode(lua_State *L) {
  size_t len;
  const char *text = luaL_checklstring(L, 1, &len);
  int max_depth = LIM_JSON_DEPTH;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_getfield(L, 2, "max_depth");
    max_depth = (int)luaL_optinteger(L, -1, LIM_JSON_DEPTH);
    lua_pop(L, 1);
  }
  if (max_depth < 1) max_depth = 1;
  if (max_depth > LIM_JSON_DEPTH_CAP) max_depth = LIM_JSON_DEPTH_CAP;
  char err[160];
  if (!lj_push_text(L, text, len, max_depth, err, sizeof err)) return le_raise_code(L, LE_JSON_INVALID, err, 0);
  return 1;
}

void lj_open(lua_State *L) {
  static const luaL_Reg fns[] = {
    { "json_encode", l_encode },
    { "json_decode", l_decode },
    { NULL, NULL }
  };
  lc_setfuncs(L, fns, 0);
  lj_push_array_mt(L);
  lua_setfield(L, -2, "array_mt");
}
