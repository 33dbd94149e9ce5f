-- Packaging: make install (PREFIX, DESTDIR) and make uninstall, and
-- luarocks make; each install is then used with nothing from the build tree
-- on any path: require "luma" from lua5.4, luma-lua check, a run, a C
-- program built with pkg-config against libluma, and luma.ffi from LuaJIT.
local h = require "spec.helpers"

local build = os.getenv("LUMA_BUILD") or "build"
local sanitize = build:match("asan") and " SANITIZE=1" or ""

-- A copy of the calculate example, to check and run from the install.
local function example()
  local dir = h.tmpname("-example")
  local status, out, err = h.sh("mkdir -p " .. h.quote(dir) .. " && env -u LD_PRELOAD cp " .. h.quote(h.root .. "/examples/calculate.luma") ..
    " " .. h.quote(h.root .. "/examples/tools.lua") .. " " .. h.quote(h.root .. "/examples/luma.config.json") .. " " ..
    h.quote(dir))
  assert(status == 0, "cannot copy the example (" .. status .. "): " .. out .. err)
  return dir
end

-- Runs cmd in dir with an environment holding only what an install gives:
-- the prefix's bin on PATH and its Lua folders on LUA_PATH / LUA_CPATH.
local function in_prefix(prefix, dir, cmd)
  local lua_path = prefix .. "/share/lua/5.4/?.lua;" .. prefix .. "/share/lua/5.4/?/init.lua;;"
  local lua_cpath = prefix .. "/lib/lua/5.4/?.so;;"
  return h.sh("cd " .. h.quote(dir) .. " && env -i PATH=" .. h.quote(prefix .. "/bin:/usr/bin:/bin") ..
    " HOME=" .. h.quote(dir) .. (os.getenv("LD_PRELOAD") and (" LD_PRELOAD=" .. h.quote(os.getenv("LD_PRELOAD")) ..
    " ASAN_OPTIONS=detect_leaks=0") or "") ..
    " LUA_PATH_5_4=" .. h.quote(lua_path) .. " LUA_CPATH_5_4=" .. h.quote(lua_cpath) .. " " .. cmd)
end

local function use_install(prefix)
  local dir = example()
  local status, out, err = in_prefix(prefix, dir,
    "lua5.4 -e 'io.write(require(\"luma\").version, \" \", package.searchpath(\"luma.core\", package.cpath))'")
  assert(status == 0, out .. err)
  assert.are.equal("0.1.0 " .. prefix .. "/lib/lua/5.4/luma/core.so", out)
  status, out, err = in_prefix(prefix, dir, "luma-lua check calculate.luma")
  assert(status == 0, out .. err)
  assert.are.equal("ok\n", out)
  status, out, err = in_prefix(prefix, dir, "luma-lua calculate.luma")
  assert(status == 0, out .. err)
  assert.matches('"result"', out)
  os.execute("rm -rf " .. h.quote(dir))
end

-- every file under dir
local function files(dir)
  local _, out = h.sh("cd " .. h.quote(dir) .. " && find . ! -type d | sort")
  return out
end

describe("make install", function()
  it("installs into PREFIX what runs from there, and uninstall removes exactly that", function()
    local prefix = h.tmpname("-prefix")
    local status, out, err = h.sh("cd " .. h.quote(h.root) .. " && env -u LD_PRELOAD make --no-print-directory -s install" ..
      sanitize .. " BUILD=" .. h.quote(build) .. " PREFIX=" .. h.quote(prefix))
    assert(status == 0, out .. err)
    local listing = files(prefix)
    for _, f in ipairs { "./bin/luma-lua", "./share/lua/5.4/luma/init.lua", "./lib/lua/5.4/luma/core.so",
      "./lib/libluma.so.0.1.0", "./lib/libluma.so.0", "./lib/libluma.so", "./include/luma.h", "./lib/pkgconfig/luma.pc",
      "./share/man/man1/luma-lua.1", "./share/bash-completion/completions/luma-lua", "./share/lua/5.1/luma/ffi.lua",
      "./share/lua/5.1/luma/uistream.lua", "./share/lua/5.1/luma/nginx.lua" } do
      assert.is_truthy(listing:find(f .. "\n", 1, true), f .. " is missing:\n" .. listing)
    end
    -- the library is fully versioned; its soname and the linker's name link to it
    local _, links = h.sh("cd " .. h.quote(prefix .. "/lib") .. " && readlink libluma.so.0 libluma.so && test -f libluma.so.0.1.0 && " ..
      "test ! -L libluma.so.0.1.0 && echo file")
    assert.are.equal("libluma.so.0.1.0\nlibluma.so.0\nfile\n", links)
    use_install(prefix)

    -- a C program built from the install alone, through pkg-config
    local dir = example()
    h.write(dir .. "/host.c", [[
#include <stdio.h>
#include <luma.h>
int main(void) {
  luma_error err;
  luma_runtime *rt = luma_new(NULL, &err);
  luma_program *p = luma_load(rt, "calculate.luma", NULL, NULL, &err);
  if (!p) { printf("%s %s\n", err.code, err.message); return 1; }
  luma_call *c = luma_start(p, "calculate", "{\"a\": 2, \"b\": 3, \"operation\": \"add\"}", &err);
  luma_wait(c, 5000);
  const char *json;
  int rc = luma_result(c, &json, NULL, &err);
  printf("%s\n", rc == LUMA_OK ? json : err.message);
  luma_call_free(c);
  luma_destroy(rt);
  return rc;
}
]])
    status, out, err = h.sh("cd " .. h.quote(dir) .. " && env -u LD_PRELOAD PKG_CONFIG_PATH=" ..
      h.quote(prefix .. "/lib/pkgconfig") .. " sh -c 'cc host.c $(pkg-config --cflags --libs luma) -Wl,-rpath," ..
      prefix .. "/lib -o host' && ./host")
    assert(status == 0, out .. err)
    assert.are.equal('{"result":5}\n', out)

    -- a host that uses every function luma.h declares links against libluma
    -- alone: the declarations are read from the installed header itself
    local header = h.read(prefix .. "/include/luma.h")
    local names = {}
    for line in header:gmatch("[^\n]+") do
      names[#names + 1] = line:match("^LUMA_API[^(]-([%w_]+)%s*%(")
    end
    assert.is_true(#names >= 18, "too few LUMA_API declarations found in luma.h: " .. table.concat(names, " "))
    local refs = {}
    for _, name in ipairs(names) do refs[#refs + 1] = "  (void *)" .. name .. "," end
    h.write(dir .. "/every.c", "#include <stdio.h>\n#include <luma.h>\nvoid *every[] = {\n" .. table.concat(refs, "\n") ..
      "\n};\nint main(void) { printf(\"%s\\n\", luma_version()); return every[0] == NULL; }\n")
    status, out, err = h.sh("cd " .. h.quote(dir) .. " && env -u LD_PRELOAD PKG_CONFIG_PATH=" ..
      h.quote(prefix .. "/lib/pkgconfig") .. " sh -c 'cc every.c $(pkg-config --cflags --libs luma) -Wl,-rpath," ..
      prefix .. "/lib -o every' && ./every")
    assert(status == 0, "a host referring to every LUMA_API function (" .. table.concat(names, " ") .. ") does not link:\n" ..
      out .. err)
    assert.are.equal("0.1.0\n", out)

    -- LuaJIT finds luma.ffi where it looks in a prefix (share/lua/5.1) and runs a tool through libluma;
    -- luma.nginx and luma.uistream load there too, and encode an event
    -- (a sanitized build's libluma needs its runtime preloaded, as the run has it)
    local keep = ""
    for _, v in ipairs({ "LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS" }) do
      if os.getenv(v) then keep = keep .. " " .. v .. "=" .. h.quote(os.getenv(v)) end
    end
    status, out, err = h.sh("cd " .. h.quote(dir) .. " && env -i PATH=/usr/bin:/bin" .. keep .. " LUA_PATH=" ..
      h.quote(prefix .. "/share/lua/5.1/?.lua") .. " luajit -e '" ..
      "local luma = require(\"luma.ffi\").open(\"" .. prefix .. "/lib/libluma.so\") " ..
      "local f = luma.runtime():load(\"calculate.luma\"):start(\"calculate\", { a = 2, b = 3, operation = \"add\" }) " ..
      "f:wait(5000) io.write(f:result().result) require(\"luma.nginx\") " ..
      "io.write(\" \", require(\"luma.uistream\").new():push({ type = \"finish\", ok = true, answer = \"\" }))'")
    assert(status == 0, out .. err)
    assert.are.equal('5 data: {"type":"start"}\n\ndata: {"finishReason":"stop","type":"finish"}\n\ndata: [DONE]\n\n', out)
    os.execute("rm -rf " .. h.quote(dir))

    -- pkg-config's paths follow the prefix it names
    local pc = h.read(prefix .. "/lib/pkgconfig/luma.pc")
    assert.matches("\nlibdir=${prefix}/lib\n", pc, 1, true)
    assert.matches("\nincludedir=${prefix}/include\n", pc, 1, true)

    status, out, err = h.sh("cd " .. h.quote(h.root) .. " && env -u LD_PRELOAD make --no-print-directory -s uninstall" ..
      " BUILD=" .. h.quote(build) .. " PREFIX=" .. h.quote(prefix))
    assert(status == 0, out .. err)
    assert.are.equal("", files(prefix))
    os.execute("rm -rf " .. h.quote(prefix))
  end)

  it("installs under DESTDIR with the PREFIX the files will have", function()
    local dest = h.tmpname("-dest")
    local status, out, err = h.sh("cd " .. h.quote(h.root) .. " && env -u LD_PRELOAD make --no-print-directory -s install" ..
      sanitize .. " BUILD=" .. h.quote(build) .. " DESTDIR=" .. h.quote(dest) .. " PREFIX=/opt/luma")
    assert(status == 0, out .. err)
    local listing = files(dest)
    assert.is_truthy(listing:find("./opt/luma/bin/luma-lua\n", 1, true), listing)
    assert.matches("prefix=/opt/luma\n", h.read(dest .. "/opt/luma/lib/pkgconfig/luma.pc"))
    status, out = h.sh("env PKG_CONFIG_SYSROOT_DIR= PKG_CONFIG_PATH=" .. h.quote(dest .. "/opt/luma/lib/pkgconfig") ..
      " pkg-config --variable=libdir luma")
    assert.are.equal("/opt/luma/lib\n", out)
    -- the command finds its Lua files next to itself, wherever the tree is put
    use_install(dest .. "/opt/luma")
    os.execute("rm -rf " .. h.quote(dest))
  end)
end)

describe("make install and the dynamic linker's cache", function()
  -- what make would run, without running it
  local function plan(args)
    local status, out, err = h.sh("cd " .. h.quote(h.root) .. " && env -u LD_PRELOAD make --no-print-directory -n install" ..
      sanitize .. " BUILD=" .. h.quote(build) .. " " .. args)
    assert(status == 0, out .. err)
    return out
  end
  it("runs ldconfig after an install into a system prefix", function()
    assert.matches("\nldconfig\n", plan("PREFIX=/usr/local"))
    assert.matches("\nldconfig\n", plan("PREFIX=/usr"))
  end)
  it("leaves the cache alone for a staged install (DESTDIR) or another prefix", function()
    assert.is_nil(plan("PREFIX=/usr DESTDIR=/tmp/stage"):find("ldconfig", 1, true))
    assert.is_nil(plan("PREFIX=/opt/luma"):find("ldconfig", 1, true))
  end)
end)

describe("luarocks make", function()
  it("installs the same module and the luma-lua command with the README's command", function()
    local command = h.read(h.root .. "/README.md"):match("`(luarocks [^`]* make [^`]*)`")
    assert(command, "the README shows no luarocks make command")
    local tree, copy = h.tmpname("-tree"), h.tmpname("-src")
    local status, out, err = h.sh(string.format(
      "mkdir -p %s && env -u LD_PRELOAD cp -r %s/base %s/core %s/sandbox %s/adapters %s/lua %s/rockspec %s/dist %s/ && cd %s && " ..
      "env -u LD_PRELOAD %s --tree=%s",
      h.quote(copy), h.root, h.root, h.root, h.root, h.root, h.root, h.root, h.quote(copy), h.quote(copy),
      command, h.quote(tree)))
    assert(status == 0, "luarocks make: status " .. tostring(status) .. "\n" .. out .. err)
    use_install(tree)
    os.execute("rm -rf " .. h.quote(tree) .. " " .. h.quote(copy))
  end)
end)
