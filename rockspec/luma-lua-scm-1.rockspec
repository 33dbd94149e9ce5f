-- Builds the same module as the Makefile (spec/08-build_spec.lua checks that
-- the source lists agree): luarocks make rockspec/luma-lua-scm-1.rockspec
rockspec_format = "3.0"
package = "luma-lua"
version = "scm-1"
source = {
  url = "git+file:///luma-lua",
}
description = {
  summary = "A tool and agent runtime for LLM applications, with a C core and Lua tool handlers",
  license = "MIT",
}
dependencies = {
  "lua >= 5.4, < 5.5",
  "lua-cjson",
}
build = {
  type = "builtin",
  modules = {
    ["luma.core"] = {
      sources = {
        "base/transport.c", "base/tpmsg.c",
        "core/arena.c", "core/map.c", "core/diag.c", "core/lex.c", "core/parse.c", "core/program.c", "core/regex.c",
        "core/strbuf.c", "core/json.c", "core/jsonschema.c", "core/crypto.c", "core/idem.c",
        "core/validate.c", "core/lerror.c", "core/ljson.c", "core/lprogram.c", "core/last.c", "core/lmodule.c",
        "core/pipeline.c", "core/lruntime.c", "core/lcore.c",
        "sandbox/copy.c", "sandbox/state.c", "sandbox/module.c", "sandbox/call.c", "sandbox/bounded.c",
        "sandbox/strict.c", "sandbox/pattern.c", "sandbox/http.c",
      },
      incdirs = { "base", "core", "sandbox" },
      defines = { "_POSIX_C_SOURCE=200809L" },
      libraries = { "mbedcrypto", "curl", "pthread", "m" },
    },
    ["luma"] = "lua/luma/init.lua",
    ["luma.cli"] = "lua/luma/cli.lua",
    ["luma.compile"] = "lua/luma/compile.lua",
    ["luma.config"] = "lua/luma/config.lua",
    ["luma.exec"] = "lua/luma/exec.lua",
    ["luma.loader"] = "lua/luma/loader.lua",
  },
}
