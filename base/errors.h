/* The catalogue of error codes: every code the product raises, with what it
   means, whether an error of that code is retryable by default, and, where the
   specification fixes the message, its template. Lua-free: lerror.c is the
   binding (core.errors, and the default retryable of core.error). */
#ifndef LUMA_ERRORS_H
#define LUMA_ERRORS_H

#include <stdarg.h>
#include <stddef.h>

/* X(CODE, retryable, meaning, template or NULL); sorted by code. A template's
   conversions are its arguments, in order: %s a string, %lld a long long. */
#define LE_CODES(X) \
  X(AGENT_NOT_FOUND, 0, "the program declares no agent of that name", \
    "Unknown agent '%s'.") \
  X(ASK_BLOCKED, 0, "the provider's safety filter blocked the prompt or the answer", NULL) \
  X(ASK_CANCELLED, 0, "the ask was cancelled by its caller", NULL) \
  X(ASK_KEY_MISSING, 0, "the model's API key variable is not set", \
    "Model '%s' needs the environment variable %s, which is not set.") \
  X(ASK_MODEL_MISSING, 0, "the agent names no model, so it cannot ask", \
    "Agent '%s' has no model to ask; name one with model: in the agent.") \
  X(ASK_OUTPUT_INVALID, 0, "the model's final answer does not fit the ask's schema, after every retry", NULL) \
  X(ASK_PROVIDER_ERROR, 0, "the provider answered with an error status (retryable for 408, 409, 429, 5xx and 529)", NULL) \
  X(ASK_REFUSED, 0, "the model refused to answer", NULL) \
  X(ASK_REPLAY_MISMATCH, 0, "a request to the model differs from the recording being replayed, or is not in it", NULL) \
  X(ASK_RESPONSE_INVALID, 0, "the provider's response is not what its API sends (not JSON, truncated, a field missing)", NULL) \
  X(ASK_STREAM_INVALID, 0, "the provider's event stream is not what its API sends (an event past sse_max_event_bytes, an event that is not JSON)", NULL) \
  X(ASK_TIMEOUT, 1, "the provider did not answer within the model's timeout", NULL) \
  X(ASK_TOOL_LIMIT, 0, "the model asked for more tool calls than the agent's tool_rate_limit allows in one ask", NULL) \
  X(ASK_TRUNCATED, 0, "the model's answer was cut: at its token limit, or a stream ended before its final event (that one is retryable)", NULL) \
  X(CACHE_STORE_ERROR, 0, "the cache_store cannot be opened", NULL) \
  X(CONFIG_INVALID, 0, "luma.config.json or a tool_module_policy is invalid, or cannot be enforced here", NULL) \
  X(HTTP_CANCELLED, 0, "a luma.http request was cancelled with its call", NULL) \
  X(HTTP_ERROR, 0, "a luma.http request failed (a failure to connect is retryable)", NULL) \
  X(HTTP_TIMEOUT, 1, "a luma.http request passed its own timeout_ms", NULL) \
  X(HTTP_TOO_LARGE, 0, "a luma.http request or response body is over its limit", NULL) \
  X(IDEMPOTENCY_STORE_ERROR, 0, "the idempotency store cannot be opened, read or written", NULL) \
  X(INPUT_INVALID, 0, "the arguments of an agent method do not fit its parameters", NULL) \
  X(INVALID_ARGUMENT, 0, "a C API function was given a NULL pointer, a handle in the wrong state, or a bad option", NULL) \
  X(IO_ERROR, 0, "a file cannot be read", NULL) \
  X(JOURNAL_ERROR, 0, "a durable ask's journal cannot be opened or written, or the program has none; a run cannot be resumed (not in the journal, a record of a later format, its agent gone, a live process holds it); another process took the run over", NULL) \
  X(JSON_INVALID, 0, "text is not JSON, or a value cannot be written as JSON", NULL) \
  X(MCP_SERVER_FAILED, 1, "an mcp_server could not start, crashed, did not answer in time, flooded its output or sent what is not JSON-RPC (it is started again on the next call)", NULL) \
  X(MCP_TOOL_ERROR, 1, "an mcp_server's tool answered with isError: true (or refused the call); the message is its text, and the model sees it", NULL) \
  X(METHOD_NOT_FOUND, 0, "the agent has no method of that name", \
    "Agent '%s' has no method '%s'.") \
  X(MODULE_INVALID, 0, "a tool module cannot be loaded (unreadable, integrity, version, dependencies)", NULL) \
  X(PROGRAM_INVALID, 0, "the program does not compile; details.diagnostics lists every problem", NULL) \
  X(RUNTIME_ERROR, 0, "a statement of the program failed while running", NULL) \
  X(TOOL_AWAITING_APPROVAL, 0, "a durable ask's call needs a person's approval and no one can be asked here: its run awaits a decision (luma-lua approve or deny), then a resume", NULL) \
  X(TOOL_CANCELLED, 0, "the call was cancelled by its caller", \
    "Tool '%s' was cancelled.") \
  X(TOOL_CIRCUIT_OPEN, 0, "the agent's tool_failure_limit was reached in this method call", NULL) \
  X(TOOL_CONTEXT_INVALID, 0, "a tool's needs cannot be resolved, are not allowed, or have the wrong type", NULL) \
  X(TOOL_ERROR_INVALID, 0, "the handler's error does not fit the tool's error schema", NULL) \
  X(TOOL_FAILED, 0, "the handler raised something other than a luma.ToolError", NULL) \
  X(TOOL_IDEMPOTENCY_CONFLICT, 0, "the idempotency key was used before with another input", NULL) \
  X(TOOL_IDEMPOTENCY_UNAVAILABLE, 1, "the idempotency store cannot be reached: the handler did not run", NULL) \
  X(TOOL_INPUT_INVALID, 0, "the tool's input does not fit its parameters", NULL) \
  X(TOOL_MEMORY_LIMIT, 0, "the handler went past the module's max_memory_mb", NULL) \
  X(TOOL_NOT_FOUND, 0, "the tool is not declared, or a declared tool has no handler", \
    "'%s' is not registered in the tool registry.") \
  X(TOOL_OUTPUT_INVALID, 0, "the handler's result does not fit the tool's return type", NULL) \
  X(TOOL_PERMISSION_DENIED, 0, "a credential, scope, tool_policy or the agent's tools refused the call", NULL) \
  X(TOOL_REGISTRY_CONFLICT, 0, "two handlers are registered for the same tool", \
    "Tool registry conflict: %s.") \
  X(TOOL_TIMEOUT, 0, "the handler did not finish before its deadline", \
    "Tool '%s' timed out after %lld ms.") \
  X(VALIDATION_FAILED, 0, "a value does not fit a schema (program:validate, typed results)", NULL)

/* The fixed messages of a code that has more than one, and the consistency
   rules' messages (load-time diagnostics of a PROGRAM_INVALID error):
   X(NAME, CODE, template). CACHE_WITH_NEEDS is both a load-time rule and,
   for a cache turned on at run time, a TOOL_PERMISSION_DENIED. */
#define LE_MESSAGES(X) \
  X(MISSING_CREDENTIAL, TOOL_PERMISSION_DENIED, "Tool '%s' is missing credential: %s.") \
  X(SCOPE_DENIED, TOOL_PERMISSION_DENIED, "Tool '%s' scope access was denied: %s.") \
  X(NOT_ALLOWED_DIRECTLY, TOOL_PERMISSION_DENIED, "Agent '%s' does not allow tool '%s' to be called directly.") \
  X(DENY_WRITE, TOOL_PERMISSION_DENIED, "Tool '%s' writes, and agent '%s' has tool_policy deny_write.") \
  X(CACHE_WITH_NEEDS, TOOL_PERMISSION_DENIED, "Cache cannot be used on a tool that uses needs: %s") \
  X(WRITE_CACHED, PROGRAM_INVALID, "Write tool '%s' cannot use cache.") \
  X(WRITE_RETRIED, PROGRAM_INVALID, "A write tool '%s' must be idempotent and specify an idempotency_key to be retried.") \
  X(IDEMPOTENT_NO_KEY, PROGRAM_INVALID, "Idempotent tool '%s' must specify an idempotency_key.") \
  X(USING_TOOL_DENIED, PROGRAM_INVALID, "Agent '%s' does not allow the tool '%s' required by using tool.")

typedef enum le_code {
#define LE_ENUM_(name, retryable, meaning, tmpl) LE_##name,
  LE_CODES(LE_ENUM_)
#undef LE_ENUM_
  LE_NCODES
} le_code;

typedef enum le_msg {
#define LE_MSG_ENUM_(name, code, tmpl) LE_MSG_##name,
  LE_MESSAGES(LE_MSG_ENUM_)
#undef LE_MSG_ENUM_
  LE_NMSGS
} le_msg;

const char *le_name(le_code code);          /* "TOOL_TIMEOUT" */
const char *le_meaning(le_code code);
int le_default_retryable(le_code code);
const char *le_template(le_code code);      /* NULL when the message is not fixed */
/* One of a code's several fixed messages: its code and its template. */
le_code le_msg_code(le_msg msg);
const char *le_msg_template(le_msg msg);
/* The code named `name`: 1 and *out set, or 0 for a code not in the catalogue. */
int le_lookup(const char *name, le_code *out);

/* Writes the code's template filled with the arguments (vsnprintf: the text
   is cut at n - 1 bytes); returns the code's name. A code without a template
   writes "". */
const char *le_format(char *out, size_t n, le_code code, ...);
/* The same for one of a code's several fixed messages; returns its code. */
le_code le_format_msg(char *out, size_t n, le_msg msg, ...);
/* Both, with the arguments as a va_list. */
const char *le_vformat(char *out, size_t n, le_code code, va_list ap);
le_code le_vformat_msg(char *out, size_t n, le_msg msg, va_list ap);

#endif
