-- Builds the same module as the Makefile (spec/08-build_spec.lua checks that
-- the source lists agree): luarocks --lua-version=5.4 make --deps-mode=none rockspec/luma-lua-scm-1.rockspec
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
        "base/arena.c", "base/strbuf.c", "base/map.c", "base/utf8.c", "base/json.c", "base/crypto.c", "base/errors.c", "base/lerror.c",
        "base/ljson.c", "base/transport.c", "base/tpmsg.c", "base/libcurl.c",
        "sandbox/copy.c", "sandbox/state.c", "sandbox/bounded.c", "sandbox/pattern.c", "sandbox/require.c",
        "sandbox/strict.c", "sandbox/strict_io.c", "sandbox/strict_json.c", "sandbox/strict_crypto.c",
        "sandbox/http.c", "sandbox/call.c", "sandbox/module.c", "sandbox/watch.c",
        "sandbox/wire.c", "sandbox/isolate.c", "sandbox/child.c", "sandbox/confine.c", "sandbox/pids.c",
        "adapters/sse.c", "adapters/adapter.c", "adapters/openai.c", "adapters/responses.c", "adapters/anthropic.c", "adapters/gemini.c",
        "adapters/stream.c", "adapters/stream_chat.c", "adapters/stream_anthropic.c", "adapters/stream_responses.c", "adapters/stream_gemini.c",
        "adapters/schema.c", "adapters/ptools.c",
        "core/diag.c", "core/lex.c", "core/parse.c", "core/program.c", "core/program_check.c", "core/program_types.c", "core/program_config.c", "core/regex.c", "core/jsonschema.c", "core/idem.c",
        "core/pool.c", "core/record.c", "core/redact.c", "core/redis.c", "core/idem_sqlite.c", "core/idem_redis.c", "core/idem_file.c", "core/journal_base.c", "core/journal.c", "core/journal_sqlite.c", "core/journal_redis.c", "core/mcp.c", "core/mcphttp.c", "core/mcpclient.c", "core/mcpremote.c", "core/program_mcp.c",
        "core/validate.c", "core/validate_bind.c", "core/validate_issues.c", "core/pipeline.c", "core/call.c", "core/verdict.c", "core/policy.c", "core/needs.c", "core/cache.c",
        "core/idempotent.c", "core/attempt.c", "core/output.c", "core/breaker.c", "core/telemetry.c", "core/runtime.c", "core/drive.c",
        "core/ask.c", "core/asktools.c", "core/askevents.c", "core/askptools.c", "core/askjournal.c", "core/askpast.c",
        "core/lprogram.c", "core/last.c", "core/lmodule.c", "core/lruntime.c", "core/lconfigure.c", "core/lcall.c", "core/lask.c", "core/ljournal.c", "core/lmcp.c", "core/lmcphttp.c", "core/lmcpclient.c", "core/lmcpremote.c", "core/lcore.c",
      },
      incdirs = { "base", "sandbox", "adapters", "core" },
      defines = { "_POSIX_C_SOURCE=200809L" },
      -- no "curl": base/libcurl.c loads libcurl at the first HTTP request (its headers are still needed)
      libraries = { "mbedcrypto", "sqlite3", "hiredis", "seccomp", "pthread", "m", "dl" },
    },
    ["luma"] = "lua/luma/init.lua",
    ["luma.approval"] = "lua/luma/approval.lua",
    ["luma.cli"] = "lua/luma/cli.lua",
    ["luma.compile"] = "lua/luma/compile.lua",
    ["luma.config"] = "lua/luma/config.lua",
    ["luma.embed"] = "lua/luma/embed.lua",
    ["luma.exec"] = "lua/luma/exec.lua",
    ["luma.ffi"] = "lua/luma/ffi.lua",
    ["luma.future"] = "lua/luma/future.lua",
    ["luma.loader"] = "lua/luma/loader.lua",
    ["luma.mcp"] = "lua/luma/mcp.lua",
    ["luma.nginx"] = "lua/luma/nginx.lua",
    ["luma.mcpclient"] = "lua/luma/mcpclient.lua",
    ["luma.repl"] = "lua/luma/repl.lua",
    ["luma.starter"] = "lua/luma/starter.lua",
    ["luma.textstream"] = "lua/luma/textstream.lua",
    ["luma.types"] = "lua/luma/types.lua",
    ["luma.uistream"] = "lua/luma/uistream.lua",
  },
  -- the command, as a Lua script (luarocks wraps it with the tree's paths)
  install = {
    bin = { ["luma-lua"] = "dist/luma-lua.lua" },
  },
}
