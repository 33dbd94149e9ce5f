/* Every bound of the runtime, in one place: its name, its default, and
   whether a user may set it through opts.limits (luma.load, luma.compile).
   C code reads the defaults as LIM_<NAME>; Lua reads core.limits, { [name] =
   default } with the name in lower case; the README's "Limits" table lists
   the same rows (spec/16 checks it, and that the C sources read every row
   by its LIM_ name rather than writing its number again).

   X(NAME, default, settable, what it bounds). Defaults fit an int.
   (Not "limits.h": with -Ibase that name would hide the C library's.) */
#ifndef LUMA_LUMA_LIMITS_H
#define LUMA_LUMA_LIMITS_H

#define LUMA_LIMITS(X) \
  /* programs: opts.limits */ \
  X(MAX_SOURCE_BYTES, 8 << 20, 1, "the size of a program, in bytes") \
  X(MAX_ERRORS, 50, 1, "errors reported per file") \
  X(MAX_PARSE_DEPTH, 200, 1, "nesting of expressions, blocks and types") \
  X(MAX_PARSE_DEPTH_CAP, 1000, 0, "the largest max_parse_depth accepted") \
  X(MAX_DEPTH, 100, 1, "nesting of tables in a validated value") \
  X(MAX_DEPTH_CAP, 500, 0, "the largest max_depth accepted") \
  X(MAX_STRING_BYTES, 16 << 20, 1, "one string in a validated value, in bytes") \
  X(MAX_VIOLATIONS, 100, 1, "violations kept per validation (then details.truncated)") \
  X(MAX_PATTERN_WORK, 100000000, 1, "bytes x pattern size for one @pattern match (about 0.2 s); a longer string fails its pattern rule") \
  /* the program model */ \
  X(CHECK_DEPTH, 400, 0, "nesting of statements and expressions the statement checker walks") \
  X(MODEL_DEPTH, 100, 0, "nesting of a type, or of a literal, that the program model resolves") \
  X(DEFAULT_VALUE_DEPTH, 200, 0, "nesting of a @default value, as built and as copied into a validated value") \
  X(TYPE_DESCRIBE_DEPTH, 100, 0, "nesting of array types that program:schema and declarations describe") \
  X(SUGGEST_CANDIDATES, 5000, 0, "declarations a \"Did you mean\" suggestion looks through") \
  X(SUGGEST_LIST, 64, 0, "candidates core.suggest reads from its list") \
  X(SUGGEST_WORD_BYTES, 64, 0, "the longest word a suggestion is made for, in bytes") \
  X(DIAG_LINE_BYTES, 200, 0, "bytes of the source line shown under a diagnostic") \
  /* @pattern regular expressions */ \
  X(REGEX_MAX_PATTERN, 4096, 0, "bytes of a @pattern's source") \
  X(REGEX_MAX_DEPTH, 100, 0, "nesting of groups in a @pattern") \
  X(REGEX_MAX_REPEAT, 1000, 0, "the largest n or m of {n}, {n,}, {n,m} in a @pattern") \
  X(REGEX_MAX_PROGRAM, 20000, 0, "instructions of a compiled @pattern, counted repetition expanded") \
  /* JSON */ \
  X(JSON_DEPTH, 100, 0, "nesting that core.json_encode and core.json_decode accept by default (their max_depth)") \
  X(JSON_DEPTH_CAP, 1000, 0, "the largest max_depth core.json_encode and core.json_decode accept") \
  X(JSON_NUMBER_BYTES, 400, 0, "the longest number literal of JSON text, in bytes") \
  /* the pipeline */ \
  X(TIMEOUT_CAP_MS, 2147483647, 0, "the longest a tool call or a model request waits (24.8 days): a longer timeout, tool_timeout, default_timeout_ms, wait(ms) of a call, an ask, a future or a runtime, or luma_wait's timeout_ms is waited as this") \
  X(INPUT_KEY_DEPTH, 100, 0, "nesting of a tool input written as a cache or idempotency key") \
  X(CONTEXT_JSON_DEPTH, 64, 0, "nesting of a tool_contexts field parsed as json") \
  X(TRACE_DEPTH, 10, 0, "nesting of a telemetry event written to the trace file") \
  X(CALL_ALL_MAX_CALLS, 10000, 0, "calls one program:call_all is given") \
  X(HOST_CALL_DEPTH, 100, 0, "nesting of tool calls made by handlers that run in the host's state (program:register), each a C stack frame") \
  X(MAX_WORKERS, 256, 0, "worker threads of a runtime (workers of luma.runtime and luma_new; by default one per CPU, at most this)") \
  /* idempotency stores */ \
  X(IDEM_MAX_DEPTH, 512, 0, "nesting of a result kept in an idempotency store") \
  X(IDEM_KDF_MAX_ITERATIONS, 10000000, 0, "PBKDF2 iterations an encrypted store file may ask for") \
  X(IDEM_QUARANTINE_TRIES, 1000, 0, "names tried for the quarantined copy of a corrupt store file") \
  X(IDEM_LEASE_MS, 10000, 0, "milliseconds a claim of the sqlite and redis stores lasts unless renewed (redis: lease_ms); its holder renews it every third of this while the handler runs, so that a dead holder's key is free this long after it died") \
  X(IDEM_WAIT_MIN_MS, 10, 0, "milliseconds before a call that waits for another call's claim on its idempotency key first looks again; each look doubles it") \
  X(IDEM_WAIT_MAX_MS, 250, 0, "the longest a call waiting on another call's claim goes without looking again (a claim that ends is announced: a waiter of the same process, or of the redis store, looks again at once)") \
  X(IDEM_STORE_RETRY_MS, 100, 0, "milliseconds between tries to store a handler's result in an idempotency store that cannot be reached, until the call's deadline") \
  X(CACHE_TTL_MS, 300000, 0, "milliseconds an entry of a cache_store lives when it sets no ttl_ms") \
  /* tool modules and their policy */ \
  X(POLICY_MIN_MEMORY_MB, 16, 0, "the smallest max_memory_mb of a tool_module_policy") \
  X(POLICY_MAX_MEMORY_MB, 1048576, 0, "the largest max_memory_mb of a tool_module_policy") \
  X(POLICY_MAX_CONCURRENCY, 256, 0, "the largest max_concurrency of a tool_module_policy") \
  X(POLICY_MAX_KILL_GRACE_MS, 10000, 0, "the largest kill_grace_ms of a tool_module_policy") \
  X(MODULE_MAX_DEPENDENCIES, 256, 0, "dependencies a tool module's manifest may list") \
  X(MODULE_MAX_SOURCE, 16 << 20, 0, "bytes of a tool module or dependency file") \
  X(MODULE_LOAD_TIMEOUT_MS, 10000, 0, "milliseconds a module's top-level code may run") \
  X(STATE_CLOSE_TIMEOUT_MS, 1000, 0, "milliseconds the __close handlers of a closing state may run") \
  X(HANDLER_STDERR_MAX_BYTES, 64 << 10, 0, "bytes of a handler process's stderr the host relays to its own in one call (or load); the rest is dropped with a note") \
  X(HANDLER_MAX_TASKS, 64, 0, "tasks (the process and its threads) of one handler process: RLIMIT_NPROC in its user namespace, and pids.max of its pids cgroup where the host can make one (README: Limits, honestly)") \
  /* what a handler returns, copied out of its state */ \
  X(COPY_DEPTH, 100, 0, "nesting of a value copied out of a tool module's state") \
  X(COPY_DEPTH_CAP, 500, 0, "the largest nesting any copy between states allows") \
  X(COPY_MAX_VALUES, 1000000, 0, "values in one copy between states") \
  X(COPY_MAX_BYTES, 64 << 20, 0, "bytes of strings in one copy between states") \
  /* the libraries of a strict state */ \
  X(PRINT_MAX_BYTES, 64 << 10, 0, "bytes print may write in one call of a handler") \
  X(SIGNAL_SLEEP_MAX_MS, 86400000, 0, "milliseconds one signal:sleep(ms) of a handler may ask for") \
  X(MAX_OPEN_FILES, 32, 0, "files a strict module may have open at once") \
  X(RANDOM_BYTES_MAX, 1 << 20, 0, "bytes crypto.random_bytes returns at once") \
  X(SANDBOX_JSON_MAX_TEXT, 8 << 20, 0, "bytes json.decode reads, and json.encode writes, in a strict state") \
  X(SANDBOX_JSON_MAX_VALUES, 1000000, 0, "values json.encode writes in a strict state") \
  X(SANDBOX_JSON_DEPTH, 100, 0, "nesting json.encode and json.decode accept in a strict state") \
  X(PATTERN_MAX_CAPTURES, 32, 0, "captures of a Lua pattern in a strict state (LUA_MAXCAPTURES)") \
  X(PATTERN_MAX_DEPTH, 200, 0, "nested matcher calls of a Lua pattern in a strict state (MAXCCALLS)") \
  /* luma.http */ \
  X(HTTP_TIMEOUT_MS, 30000, 0, "milliseconds of a luma.http request without its own timeout_ms") \
  X(HTTP_MAX_BYTES, 8 << 20, 0, "bytes of a luma.http request body, and of a response") \
  X(HTTP_MAX_REDIRECTS, 5, 0, "redirects a luma.http request follows") \
  X(HTTP_JSON_DEPTH, 100, 0, "nesting of a luma.http JSON body, sent or received") \
  X(HTTP_REUSE_IN_FLIGHT, 256, 0, "HTTP requests in flight at once on one transport (luma.http's, one per process; a runtime's, for its models; a remote mcp_server's) past which a new one opens a connection of its own, closed at its end, instead of looking for one to reuse") \
  /* mcp_server: MCP servers as tool sources */ \
  X(MCP_SERVER_MESSAGE_BYTES, 8 << 20, 0, "bytes of one message an mcp_server sends (a longer one is MCP_SERVER_FAILED and the server is stopped)") \
  X(MCP_SERVER_JSON_DEPTH, 100, 0, "nesting of a message an mcp_server sends") \
  X(MCP_SERVER_LINES, 1000, 0, "messages an mcp_server may send before its answer to one request (notifications, its own requests, log noise); past it the server floods: MCP_SERVER_FAILED") \
  X(MCP_SERVER_TOOLS, 256, 0, "tools one mcp_server may list (past it the program does not load)") \
  X(MCP_SCHEMA_BYTES, 512 << 10, 0, "bytes of one inputSchema or outputSchema of an mcp_server's tool, as JSON (past it the program does not load)") \
  X(MCP_SCHEMA_DEPTH, 32, 0, "nesting of an inputSchema or outputSchema of an mcp_server's tool that becomes types (past it the program does not load)") \
  X(MCP_DESCRIPTION_BYTES, 4096, 0, "bytes of an mcp_server tool's description the model sees (a longer one is cut)") \
  X(MCP_START_TIMEOUT_MS, 10000, 0, "milliseconds an mcp_server has to start, answer initialize and list its tools, when it sets no timeout") \
  X(MCP_RELIST_INTERVAL_MS, 1000, 0, "milliseconds between two listings of an mcp_server's tools after its notifications/tools/list_changed (a server that says it with every answer is listed again at most this often)") \
  X(MCP_STOP_GRACE_MS, 500, 0, "milliseconds a stdio mcp_server has to exit after its input is closed, then after SIGTERM, before SIGKILL; and a url mcp_server has to answer the DELETE that ends its session") \
  /* asks: the exchanges with a model */ \
  X(MODEL_TIMEOUT_MS, 120000, 0, "milliseconds of a model request, retries included, when the model sets no timeout") \
  X(MODEL_MAX_RESPONSE_BYTES, 32 << 20, 0, "bytes of a model provider's response") \
  X(RETRY_AFTER_MAX_MS, 86400000, 0, "the wait a provider may ask for before a retry (retry-after-ms, retry-after, Gemini's retryDelay) must be shorter than this (a day); a longer one, or one that is not a number >= 0, is ignored") \
  X(SSE_MAX_EVENT_BYTES, 32 << 20, 0, "bytes of one server-sent event of a model's stream (its lines as they are read, its data joined); a longer one is ASK_STREAM_INVALID") \
  X(STREAM_QUEUE_BYTES, 1 << 20, 0, "bytes an ask holds for a host that has not taken its events: a stream's bytes not yet read, and the queued events (their text, and 64 bytes each); at it the transfer pauses until the host takes some") \
  X(MODEL_JSON_DEPTH, 100, 0, "nesting of a provider's response, of a model's answer and of tool arguments") \
  X(TOOL_RESULT_MAX_BYTES, 64 << 10, 0, "bytes of a tool result sent to the model when the agent sets no tool_result_max_bytes") \
  X(JOURNAL_LEASE_MS, 10000, 0, "milliseconds a durable ask's claim on its run lasts unless renewed (its heartbeat renews it every third of that); a run whose lease ended is abandoned, and another process may take it over") \
  X(JOURNAL_LEASE_MIN_MS, 30, 0, "the shortest journal_lease_ms (luma.load, --journal-lease-ms) accepted") \
  X(PAUSE_TURN_MAX, 5, 0, "times one ask continues a turn the provider paused in its own tool loop (Anthropic's pause_turn); past it the ask ends with ASK_TOOL_LIMIT") \
  /* luma-lua mcp: serving tools over MCP */ \
  X(MCP_MAX_MESSAGE_BYTES, 4 << 20, 0, "bytes of one MCP message a client sends (a longer line is dropped and answered with -32600); and of an event-stream reply of --http its client has not read (past it the progress reports are dropped)") \
  X(MCP_MAX_IN_FLIGHT, 64, 0, "tools/call requests of one MCP client running at once, or of all the clients of luma-lua mcp --http (past it: -32000, until one ends)") \
  X(MCP_JSON_DEPTH, 64, 0, "nesting of an MCP message a client sends") \
  X(MCP_HTTP_MAX_CONNECTIONS, 256, 0, "connections luma-lua mcp --http holds at once (past it an idle one is closed to make room, or the new one is answered 503 and closed)") \
  X(MCP_HTTP_MAX_HEAD_BYTES, 64 << 10, 0, "bytes of an HTTP request's line and headers (past it: 431)") \
  X(MCP_HTTP_MAX_HEADERS, 64, 0, "headers of an HTTP request (past it: 431)") \
  X(MCP_HTTP_REQUEST_MS, 10000, 0, "milliseconds an HTTP request may take to arrive whole, and its reply to be read (past it: 408, or the connection is closed)") \
  X(MCP_HTTP_IDLE_MS, 30000, 0, "milliseconds a kept-alive HTTP connection may wait for its next request") \
  X(MCP_HTTP_MAX_SESSIONS, 512, 0, "sessions of the initialize era held at once (past it the least recently used ends: its client gets 404 and starts again)") \
  X(MCP_HTTP_SESSION_IDLE_MS, 3600000, 0, "milliseconds a session of the initialize era lives unused (then 404)")

enum {
#define LIM_ENUM_(name, value, settable, doc) LIM_##name = (value),
  LUMA_LIMITS(LIM_ENUM_)
#undef LIM_ENUM_
};

#endif
