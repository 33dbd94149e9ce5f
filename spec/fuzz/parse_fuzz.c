/*
 * libFuzzer harness for the contract language: each input is a .luma source.
 * It is parsed and checked by the C core; a program with errors has every
 * diagnostic formatted, a valid one has its JSON Schemas and tool
 * declarations written, and is then compiled again through the Lua binding,
 * whose every read-only method runs on it. Build and run with `make fuzz`.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <lauxlib.h>
#include <lualib.h>

#include "diag.h"
#include "jsonschema.h"
#include "lcore.h"
#include "program.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Runs with (program, schema names) once compile has succeeded: nothing in
   it may raise for a program that compiled. Values are built anew for each
   call because validate fills in defaults in place. */
static const char methods_chunk[] =
  "local prog, names = ...\n"
  "prog:tools()\n"
  "prog:tools({ format = 'json' })\n"
  "prog:ast()\n"
  "local decls = prog:declarations()\n"
  "for _, kind in ipairs({ 'schemas', 'tools', 'agents', 'models' }) do\n"
  "  for _, name in ipairs(decls[kind]) do prog:declaration(name) end\n"
  "end\n"
  "for _, name in ipairs(names) do\n"
  "  prog:schema(name)\n"
  "  prog:json_schema(name)\n"
  "  prog:json_schema(name, { format = 'json' })\n"
  "  for _, mode in ipairs({ 'input', 'output' }) do\n"
  "    prog:validate(name, {}, { mode = mode })\n"
  "    prog:validate(name, { a = 1 }, { mode = mode })\n"
  "  end\n"
  "end\n"
  "prog:close()\n";

static void format_diagnostics(pm_program *p) {
  for (const dg_item *it = p->diag.first; it; it = it->next) dg_format(&p->diag, it);
}

static void write_json(const pm_program *p) {
  ar_arena a;
  sb_buf b;
  ar_init(&a);
  sb_init(&b);
  for (int i = 0; i < p->nschemas; i++) jv_write(&b, js_schema(&a, p, p->schemas[i], JS_CANONICAL), 2);
  jv_write(&b, js_tools(&a, p, JS_CANONICAL), 0);
  sb_free(&b);
  ar_free(&a);
}

static void run_binding(const uint8_t *data, size_t size, const pm_program *p) {
  lua_State *L = luaL_newstate();
  if (!L) return;
  luaL_openlibs(L);
  luaL_requiref(L, "luma.core", luaopen_luma_core, 0);
  lua_getfield(L, -1, "compile");
  lua_pushlstring(L, (const char *)data, size);
  lua_pushliteral(L, "fuzz.luma");
  /* a valid program model can still fail here: a @default that does not fit */
  if (lua_pcall(L, 2, 1, 0) == LUA_OK) {
    if (luaL_loadbuffer(L, methods_chunk, sizeof methods_chunk - 1, "=methods") != LUA_OK) abort();
    lua_insert(L, -2);
    lua_createtable(L, p->nschemas, 0);
    for (int i = 0; i < p->nschemas; i++) {
      lua_pushstring(L, p->schemas[i]->name);
      lua_rawseti(L, -2, i + 1);
    }
    if (lua_pcall(L, 2, 0, 0) != LUA_OK) {
      fprintf(stderr, "a compiled program's method raised: %s\n", luaL_tolstring(L, -1, NULL));
      abort();
    }
  }
  lua_close(L);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  pm_program *p = pm_build((const char *)data, size, "fuzz.luma", NULL);
  if (!p) return 0;
  if (p->diag.count > 0) {
    format_diagnostics(p);
  } else {
    write_json(p);
    run_binding(data, size, p);
  }
  pm_free(p);
  return 0;
}
