#!/usr/bin/env python3
"""A model provider for the specs: plays a script, records every request.

    python3 mock_provider.py --port-file FILE --parent PID

Listens on 127.0.0.1 (a port the system picks, written to FILE once it
listens) and speaks HTTP/1.1 with keep-alive. Any path and method is a
provider request: it is recorded and answered with the next step of the
script. The control endpoints:

    POST /_mock/script     a JSON array of steps replaces the script
    GET  /_mock/requests   every provider request so far, in order:
                           [{method, path, query, headers: {lower-case name: value},
                             body: text, json: the parsed body or null,
                             server_ms: the time it took here, from reading the body
                             to the answer's last byte}]
    POST /_mock/reset      clears the script and the records
    POST /_mock/shutdown   stops the server

A step: {status = 200, headers = {...}, json = value} (served as JSON), or
body = "text" (served as it is, with content_type), and optionally:
    delay_ms  wait before answering (cut short when the client leaves or the
              server stops)
    close     close the connection without an answer
    truncate  announce the whole body but send only this many bytes, then close
    expect    {path =, method =}: a request that differs gets 599 and a JSON
              error naming the difference, and is recorded with mismatch set
With the script used up, the answer is 500 with a JSON error.

Before a step is taken, a provider request is checked as the provider
checks it (see `refusal`: what each family's published reference says it
refuses), and one it would refuse gets its 400, in its error shape, and is
recorded with refused set to the reason; the step stays for the next
request. A step's `check = false` skips the checks for that request.

It exits when the process PID is gone, and after an hour in any case, so a
spec that failed half-way never leaves it behind.
"""
import argparse
import json
import os
import select
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

LIFETIME_S = 3600

lock = threading.Lock()
script = []
records = []
stopping = threading.Event()


# ---------------------------------------------------------------- checks
# What the real providers refuse, from their references (PROVIDERS.md and
# the current published ones): a request the mock would take but a provider
# would not is a bug the specs must catch.

ANTHROPIC_REFUSED = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength",
                     "maxLength", "maxItems", "uniqueItems", "minProperties", "maxProperties")
OPENAI_STRICT_REFUSED = ("allOf", "not", "if", "then", "else", "default", "dependentRequired",
                         "dependentSchemas", "patternProperties")
GEMINI_TAKES = ("$id", "$defs", "$ref", "$anchor", "type", "format", "title", "description", "enum", "items",
                "prefixItems", "minItems", "maxItems", "minimum", "maximum", "anyOf", "oneOf", "properties",
                "additionalProperties", "required", "propertyOrdering")


def schemas(node, at):
    """Every sub-schema of node, with its path."""
    if not isinstance(node, dict):
        return
    yield at, node
    for key in ("properties", "$defs", "definitions"):
        if isinstance(node.get(key), dict):
            for name, sub in node[key].items():
                yield from schemas(sub, "%s.%s.%s" % (at, key, name))
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        if isinstance(node.get(key), list):
            for i, sub in enumerate(node[key]):
                yield from schemas(sub, "%s.%s[%d]" % (at, key, i))
    for key in ("items", "additionalProperties", "not"):
        if isinstance(node.get(key), dict):
            yield from schemas(node[key], "%s.%s" % (at, key))


def is_object(node):
    return node.get("type") == "object" or (isinstance(node.get("type"), list) and "object" in node["type"]) \
        or "properties" in node


def check_anthropic_schema(schema, at):
    for path, node in schemas(schema, at):
        for key in ANTHROPIC_REFUSED:
            if key in node:
                return "%s: For '%s' type, property '%s' is not supported" % (path, node.get("type", "any"), key)
        if "minItems" in node and node["minItems"] not in (0, 1):
            return "%s: minItems values other than 0 or 1 are not supported" % path
        if is_object(node) and node.get("additionalProperties") is not False:
            return "%s: For 'object' type, 'additionalProperties' must be explicitly set to false" % path
    return None


def check_openai_strict(schema, at):
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return "%s: the root of a strict schema must be an object" % at
    for path, node in schemas(schema, at):
        for key in OPENAI_STRICT_REFUSED:
            if key in node:
                return "Invalid schema: In context=%s, '%s' is not permitted." % (path, key)
        if "$ref" in node and len(node) > 1:
            return "Invalid schema: In context=%s, $ref cannot have keywords %s." % (
                path, sorted(k for k in node if k != "$ref"))
        if is_object(node):
            if node.get("additionalProperties") is not False:
                return "Invalid schema: In context=%s, 'additionalProperties' is required to be supplied and to be false." % path
            props = list((node.get("properties") or {}).keys())
            missing = [p for p in props if p not in (node.get("required") or [])]
            if missing:
                return "Invalid schema: In context=%s, 'required' is required to be supplied and to be an array including every key in properties. Missing '%s'." % (path, missing[0])
    return None


def check_gemini_schema(schema, at):
    for path, node in schemas(schema, at):
        for key in node:
            if key not in GEMINI_TAKES:
                return "%s: the JSON Schema keyword '%s' is not supported" % (path, key)
        if "$ref" in node and any(not k.startswith("$") for k in node):
            return "%s: a schema with $ref may have no other properties but those starting with $" % path
    return None


# Provider tools (PROVIDER-TOOLS.md): the entries each family takes, and
# what it refuses in them and in the conversation that echoes their calls.
ANTHROPIC_SERVER_TOOLS = {"web_search_": "web_search", "web_fetch_": "web_fetch", "code_execution_": "code_execution",
                          "tool_search_tool_regex_": "tool_search_tool_regex", "tool_search_tool_bm25_": "tool_search_tool_bm25"}
RESPONSES_INCLUDE = ("reasoning.encrypted_content", "web_search_call.action.sources", "code_interpreter_call.outputs",
                     "file_search_call.results", "message.output_text.logprobs", "computer_call_output.output.image_url")
GEMINI_BUILTINS = ("google_search", "url_context", "code_execution", "googleSearch", "urlContext", "codeExecution")


def anthropic_tools(body):
    tools = body.get("tools") or []
    searches = [t for t in tools if str(t.get("type", "")).startswith("tool_search_tool_")]
    deferred = [t for t in tools if t.get("defer_loading")]
    if deferred and not searches:
        return "tools: deferred tools (defer_loading: true) require a tool search tool"
    if any(t.get("defer_loading") for t in searches):
        return "tools: the tool search tool cannot be deferred"
    for i, t in enumerate(tools):
        kind = t.get("type")
        if kind is None or kind == "custom":
            continue
        prefix = next((p for p in ANTHROPIC_SERVER_TOOLS if kind.startswith(p)), None)
        if prefix is None:
            return "tools.%d: Input tag '%s' found using 'type' does not match any of the expected tags" % (i, kind)
        if t.get("name") != ANTHROPIC_SERVER_TOOLS[prefix]:
            return "tools.%d.name: Input should be '%s'" % (i, ANTHROPIC_SERVER_TOOLS[prefix])
        if "allowed_domains" in t and "blocked_domains" in t:
            return "tools.%d: Cannot specify both allowed_domains and blocked_domains" % i
        loc = t.get("user_location")
        if loc is not None and loc.get("type") != "approximate":
            return "tools.%d.user_location.type: Input should be 'approximate'" % i
        if prefix == "code_execution_" and set(t) - {"type", "name", "cache_control"}:
            return "tools.%d: Extra inputs are not permitted" % i
    if "container" in body and not isinstance(body["container"], str):
        return "container: Input should be a valid string"
    server_ids = set()
    for i, m in enumerate(body.get("messages") or []):
        content = m.get("content") if isinstance(m.get("content"), list) else []
        for j, b in enumerate(content):
            if b.get("type") == "server_tool_use":
                server_ids.add(b.get("id"))
            if b.get("type") == "tool_result" and (b.get("tool_use_id") in server_ids or str(b.get("tool_use_id", "")).startswith("srvtoolu_")):
                return "messages.%d.content.%d: tool_result block(s) provided for a server tool use: %s" % (i, j, b.get("tool_use_id"))
    return None


def responses_tools(body):
    model = body.get("model") or ""
    for i, t in enumerate(body.get("tools") or []):
        kind = t.get("type")
        if kind == "web_search":
            if model.startswith("gpt-4.1-nano"):
                return "Hosted tool 'web_search' is not supported with %s." % model
            if set(t.get("filters") or {}) - {"allowed_domains"}:
                return "Unknown parameter: 'tools[%d].filters.%s'." % (i, sorted(set(t["filters"]) - {"allowed_domains"})[0])
            loc = t.get("user_location")
            if loc is not None and loc.get("type") != "approximate":
                return "Invalid value: 'tools[%d].user_location.type'." % i
            if set(t) - {"type", "filters", "user_location", "search_context_size"}:
                return "Unknown parameter: 'tools[%d].%s'." % (i, sorted(set(t) - {"type", "filters", "user_location", "search_context_size"})[0])
        elif kind == "code_interpreter":
            if "container" not in t:
                return "Missing required parameter: 'tools[%d].container'." % i
        elif kind == "file_search":
            if not t.get("vector_store_ids"):
                return "Missing required parameter: 'tools[%d].vector_store_ids'." % i
        elif kind == "tool_search":
            pass
        elif kind != "function":
            return "Invalid value: '%s'. Supported values are: 'function', 'web_search', 'file_search', 'code_interpreter', ..." % kind
    if any(t.get("defer_loading") for t in body.get("tools") or []) and not any(t.get("type") == "tool_search" for t in body.get("tools") or []):
        return "Deferred tools (defer_loading) require a tool_search tool."
    for inc in body.get("include") or []:
        if inc not in RESPONSES_INCLUDE:
            return "Invalid value: '%s'. Supported values are: %s." % (inc, ", ".join(RESPONSES_INCLUDE))
    calls = set()
    for item in body.get("input") if isinstance(body.get("input"), list) else []:
        if item.get("type") == "function_call":
            calls.add(item.get("call_id"))
        if item.get("type") == "function_call_output" and item.get("call_id") not in calls:
            return "No tool call found for function call output with call_id %s." % item.get("call_id")
    return None


def gemini_tools(path, body):
    model = path.rsplit("/", 1)[-1].split(":")[0]
    tools = body.get("tools") or []
    functions = any("functionDeclarations" in t for t in tools)
    builtins = [k for t in tools for k in t if k in GEMINI_BUILTINS]
    for t in tools:
        for k, v in t.items():
            if k != "functionDeclarations" and k not in GEMINI_BUILTINS:
                return "Invalid JSON payload received. Unknown name \"%s\" at 'tools[0]': Cannot find field." % k
            if k in GEMINI_BUILTINS and v != {}:
                return "Invalid JSON payload received. Unknown name at 'tools[0].%s': Cannot find field." % k
    if functions and builtins:
        if model.startswith("gemini-1") or model.startswith("gemini-2"):
            return "Tool use with function calling is unsupported"
        if not (body.get("toolConfig") or {}).get("includeServerSideToolInvocations"):
            return "Built-in tools ({%s}) and Function Calling cannot be combined in the same request. Please enable tool_config.include_server_side_tool_invocations=true." % builtins[0]
    contents = body.get("contents") or []
    for i, c in enumerate(contents):
        responses = [p for p in c.get("parts") or [] if "functionResponse" in p]
        if not responses:
            continue
        prev = contents[i - 1] if i else {}
        calls = [p for p in prev.get("parts") or [] if "functionCall" in p] if prev.get("role") == "model" else []
        if len(calls) != len(responses):
            return "Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn."
    return None


def refusal(path, headers, body):
    """(status, error JSON) for a request the provider would refuse, or None."""
    if path.endswith("/v1/messages"):
        def error(message):
            return 400, {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
        if not headers.get("anthropic-version"):
            return error("anthropic-version: header is required")
        if not isinstance(body, dict) or not isinstance(body.get("model"), str) or not isinstance(body.get("max_tokens"), int):
            return error("model: Field required; max_tokens: Field required")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return error("messages: at least one message is required")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
                return error("messages.%d: role must be user or assistant" % i)
            content = m.get("content")
            final_assistant = i == len(messages) - 1 and m["role"] == "assistant"
            if not content and not final_assistant:
                return error("messages.%d: all messages must have non-empty content except for the optional final assistant message" % i)
        fmt = (body.get("output_config") or {}).get("format")
        if fmt is not None:
            why = check_anthropic_schema(fmt.get("schema"), "output_config.format.schema")
            if why:
                return error(why)
        why = anthropic_tools(body)
        if why:
            return error(why)
        return None
    if path.endswith(":generateContent"):
        def error(message):
            return 400, {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}
        contents = body.get("contents") if isinstance(body, dict) else None
        if not isinstance(contents, list) or not contents:
            return error("* GenerateContentRequest.contents: contents is not specified")
        for i, c in enumerate(contents):
            if not isinstance(c, dict):
                return error("Invalid value at 'contents[%d]' (type.googleapis.com/google.ai.generativelanguage.v1beta.Content), null" % i)
            if c.get("role") not in ("user", "model"):
                return error("* GenerateContentRequest.contents[%d].role: must be user or model" % i)
            if not isinstance(c.get("parts"), list) or not c["parts"]:
                return error("* GenerateContentRequest.contents[%d].parts: contents.parts must not be empty." % i)
        schema = (body.get("generationConfig") or {}).get("responseJsonSchema")
        if schema is not None:
            why = check_gemini_schema(schema, "generationConfig.responseJsonSchema")
            if why:
                return error(why)
        for t, tool in enumerate(body.get("tools") or []):
            for d, decl in enumerate(tool.get("functionDeclarations") or []):
                why = check_gemini_schema(decl.get("parametersJsonSchema"), "tools[%d].functionDeclarations[%d].parametersJsonSchema" % (t, d))
                if why:
                    return error(why)
        why = gemini_tools(path, body)
        if why:
            return error(why)
        return None
    chat, responses = path.endswith("/chat/completions"), path.endswith("/responses")
    if not (chat or responses):
        return None

    def error(message, code=None):
        return 400, {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}
    if not isinstance(body, dict):
        return error("the body must be a JSON object")
    # azure's classic path names the deployment; everywhere else the body's model does
    if "/openai/deployments/" not in path and not isinstance(body.get("model"), str):
        return error("you must provide a model parameter", "missing_required_parameter")
    if chat:
        for i, m in enumerate(body.get("messages") or []):
            if m.get("role") == "assistant" and m.get("content") is None and not m.get("tool_calls"):
                return error("Invalid value for 'content': expected a string, got null.", "invalid_value")
        for i, t in enumerate(body.get("tools") or []):
            f = t.get("function") or {}
            if f.get("strict"):
                why = check_openai_strict(f.get("parameters"), "tools[%d].function.parameters" % i)
                if why:
                    return error(why, "invalid_function_parameters")
        search = any(body.get("model", "").startswith(m) for m in ("gpt-5-search-api", "gpt-4o-search-preview", "gpt-4o-mini-search-preview"))
        if "web_search_options" in body and not search:
            return error("web_search_options is only supported with the search models.", "invalid_request_error")
        loc = (body.get("web_search_options") or {}).get("user_location")
        if loc is not None and (loc.get("type") != "approximate" or "type" in (loc.get("approximate") or {})):
            return error("Invalid value: 'web_search_options.user_location'.", "invalid_value")
        rf = body.get("response_format") or {}
        if rf.get("type") == "json_schema" and (rf.get("json_schema") or {}).get("strict"):
            why = check_openai_strict(rf["json_schema"].get("schema"), "response_format.json_schema.schema")
            if why:
                return error(why, "invalid_json_schema")
    else:
        for i, t in enumerate(body.get("tools") or []):
            if t.get("strict"):
                why = check_openai_strict(t.get("parameters"), "tools[%d].parameters" % i)
                if why:
                    return error(why, "invalid_function_parameters")
        fmt = (body.get("text") or {}).get("format") or {}
        if fmt.get("type") == "json_schema" and fmt.get("strict"):
            why = check_openai_strict(fmt.get("schema"), "text.format.schema")
            if why:
                return error(why, "invalid_json_schema")
        why = responses_tools(body)
        if why:
            return error(why, "invalid_request_error")
    return None


def take_step():
    with lock:
        return script.pop(0) if script else None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def setup(self):
        super().setup()
        # headers and body go out in two writes: without this, Nagle's
        # algorithm and the client's delayed ACK hold the body for 40 ms
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def send(self, status, body, content_type="application/json", headers=None, truncate=None):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, str(value))
        if truncate is not None:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body if truncate is None else body[:truncate])
        self.wfile.flush()

    def send_json(self, status, value, headers=None):
        self.send(status, json.dumps(value).encode(), headers=headers)

    def client_gone(self):
        readable, _, _ = select.select([self.connection], [], [], 0)
        if not readable:
            return False
        try:
            return self.connection.recv(1, 0x2) == b""   # MSG_PEEK
        except OSError:
            return True

    def handle_any(self):
        started = time.perf_counter()
        body = self.read_body()
        url = urlsplit(self.path)
        if url.path.startswith("/_mock/"):
            return self.control(url.path, body)
        text = body.decode("utf-8", "replace")
        try:
            parsed = json.loads(text) if text else None
        except ValueError:
            parsed = None
        record = {
            "method": self.command, "path": url.path, "query": url.query,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": text, "json": parsed,
        }
        with lock:
            records.append(record)
            upcoming = script[0] if script else None
        if upcoming is None or upcoming.get("check", True):
            refused = refusal(url.path, record["headers"], parsed)
            if refused:
                record["refused"] = refused[1]
                return self.send_json(*refused)
        step = take_step()
        if step is None:
            return self.send_json(500, {"error": {"message": "mock provider: no scripted response left for %s %s" % (self.command, url.path)}})
        expect = step.get("expect") or {}
        for field, got in (("path", url.path), ("method", self.command)):
            if field in expect and expect[field] != got:
                record["mismatch"] = True
                return self.send_json(599, {"error": {"message": "mock provider: expected %s %s, got %s" % (field, expect[field], got)}})
        delay = step.get("delay_ms", 0) / 1000.0
        end = time.monotonic() + delay
        while time.monotonic() < end:
            if stopping.is_set() or self.client_gone():
                self.close_connection = True
                return
            time.sleep(min(0.02, max(0.0, end - time.monotonic())))
        if step.get("close"):
            self.close_connection = True
            return
        if "json" in step:
            payload, ctype = json.dumps(step["json"]).encode(), "application/json"
        else:
            payload, ctype = str(step.get("body", "")).encode(), step.get("content_type", "text/plain")
        self.send(step.get("status", 200), payload, step.get("content_type", ctype), step.get("headers"), step.get("truncate"))
        record["server_ms"] = (time.perf_counter() - started) * 1000

    def control(self, path, body):
        global script
        if path == "/_mock/script":
            steps = json.loads(body.decode() or "[]")
            with lock:
                script = list(steps) if isinstance(steps, list) else []
            return self.send_json(200, {"steps": len(script)})
        if path == "/_mock/requests":
            with lock:
                data = list(records)
            return self.send_json(200, data)
        if path == "/_mock/reset":
            with lock:
                script = []
                records.clear()
            return self.send_json(200, {"ok": True})
        if path == "/_mock/shutdown":
            self.send_json(200, {"ok": True})
            stopping.set()
            threading.Thread(target=self.server.shutdown, daemon=True).start()
            return
        return self.send_json(404, {"error": {"message": "mock provider: no control endpoint " + path}})

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = handle_any


def watch_parent(pid, server):
    started = time.monotonic()
    while not stopping.is_set():
        gone = False
        try:
            os.kill(pid, 0)
        except OSError:
            gone = True
        if gone or time.monotonic() - started > LIFETIME_S:
            stopping.set()
            server.shutdown()
            return
        time.sleep(0.2)


def main():
    args = argparse.ArgumentParser()
    args.add_argument("--port-file", required=True)
    args.add_argument("--parent", type=int, required=True)
    opts = args.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    tmp = opts.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(tmp, opts.port_file)
    threading.Thread(target=watch_parent, args=(opts.parent, server), daemon=True).start()
    server.serve_forever(poll_interval=0.1)
    server.server_close()


if __name__ == "__main__":
    sys.exit(main())
