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
    POST /_mock/turns      a JSON array of steps that answers by turn instead: a
                           Chat Completions request whose messages hold k
                           assistant messages gets step k + 1, as often as it
                           is asked (a resumed ask that asks a turn again gets
                           the same answer); its record has turn = k + 1
    POST /_mock/reset      clears the script, the turns and the records
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

Streams: a request that asks for a stream (a JSON body with stream: true,
or Gemini's :streamGenerateContent) gets a 2xx `json` step as the stream
its family sends for that same response (see `stream_events`: Chat and
Azure chunks ending with [DONE], Azure's empty first chunk, Responses
events, Anthropic events with a ping, Gemini alt=sse chunks), so one step
serves a streamed and a non-streamed ask alike. A step's `stream`:
    false         answer with the JSON anyway (a server that cannot stream)
    {delay_ms =   wait before each event,
     cut = true   stop (close) before the final event,
     error = {type =, message =, code =}  send the family's error event
                  half-way, then close,
     keepalive = true  a comment line before each event,
     piece = n    write the bytes n at a time,
     stamp = true  each "@@@@" in an event's bytes becomes the server's
                  CLOCK_MONOTONIC in ns just before the event is written
                  (bench/agent/stream.lua: the latency of a delta),
     batch = true  every event written at once, in one write}

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
turns = []
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
GEMINI_BUILTINS = ("google_search", "url_context", "code_execution", "googleSearch", "urlContext", "codeExecution",
                   "file_search", "fileSearch")
# File Search's fields (ai.google.dev/api: FileSearch): the store names are required
GEMINI_FILE_SEARCH = {"file_search_store_names": "fileSearchStoreNames", "metadata_filter": "metadataFilter", "top_k": "topK"}


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


def gemini_file_search(key, v):
    if not isinstance(v, dict):
        return "Invalid value at 'tools[0].%s': expected an object." % key
    names = None
    for field, value in v.items():
        if field not in GEMINI_FILE_SEARCH and field not in GEMINI_FILE_SEARCH.values():
            return "Invalid JSON payload received. Unknown name \"%s\" at 'tools[0].%s': Cannot find field." % (field, key)
        if field in ("file_search_store_names", "fileSearchStoreNames"):
            names = value
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n.startswith("fileSearchStores/") for n in names):
        return "tools[0].%s.file_search_store_names: at least one file search store name (fileSearchStores/...) is required." % key
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
            if k in ("file_search", "fileSearch"):
                why = gemini_file_search(k, v)
                if why:
                    return why
            elif k in GEMINI_BUILTINS and v != {}:
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
    if path.endswith(":generateContent") or path.endswith(":streamGenerateContent"):
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


# ---------------------------------------------------------------- streams
# Each family's stream for a whole response, from STREAMING.md and the
# fixtures in spec/fixtures/streams: (events, final) where events are
# (event type or None, data) and events[final:] are what a cut drops.

def pieces(text, n=4):
    return [text[i:i + n] for i in range(0, len(text), n)] if text else []


def interleave(lists):
    out, i = [], 0
    while any(i < len(l) for l in lists):
        for l in lists:
            if i < len(l):
                out.append(l[i])
        i += 1
    return out


def chat_events(resp, azure):
    rid, model = resp.get("id", "chatcmpl-s"), resp.get("model", "gpt-test")
    def chunk(delta, finish=None, choices=None):
        c = {"id": rid, "object": "chat.completion.chunk", "model": model, "usage": None,
             "choices": choices if choices is not None else [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return (None, c)
    events = []
    if azure:
        events.append((None, {"id": "", "object": "", "model": "", "choices": [],
                              "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {}}]}))
    choice = (resp.get("choices") or [{}])[0]
    msg = choice.get("message") or {}
    events.append(chunk({"role": "assistant", "content": ""}))
    for p in pieces(msg.get("content")):
        events.append(chunk({"content": p}))
    for p in pieces(msg.get("refusal")):
        events.append(chunk({"refusal": p}))
    if msg.get("annotations"):
        # a search model's url_citation annotations: one delta after the text
        events.append(chunk({"annotations": msg["annotations"]}))
    per_call = []
    for k, tc in enumerate(msg.get("tool_calls") or []):
        f = tc.get("function") or {}
        first = chunk({"tool_calls": [{"index": k, "id": tc.get("id"), "type": "function",
                                       "function": {"name": f.get("name"), "arguments": ""}}]})
        frags = [chunk({"tool_calls": [{"index": k, "function": {"arguments": a}}]})
                 for a in pieces(f.get("arguments") or "", 5)]
        per_call.append([first] + frags)
    events.extend(interleave(per_call))
    final = len(events)
    events.append(chunk({}, choice.get("finish_reason") or "stop"))
    if resp.get("usage"):
        c = chunk(None, choices=[])
        c[1]["usage"] = resp["usage"]
        events.append(c)
    events.append((None, "[DONE]"))
    return events, final


def responses_events(resp):
    seq = [0]
    base = {"id": resp.get("id", "resp_s"), "object": "response", "status": "in_progress", "output": [],
            "usage": None}
    events = []
    def ev(kind, **fields):
        fields["type"] = kind
        fields["sequence_number"] = seq[0]
        seq[0] += 1
        events.append((kind, fields))
    ev("response.created", response=base)
    ev("response.in_progress", response=base)
    for i, item in enumerate(resp.get("output") or []):
        iid = item.get("id") or "item_%d" % i
        kind = item.get("type")
        if kind == "message":
            ev("response.output_item.added", output_index=i,
               item={"id": iid, "type": "message", "status": "in_progress", "role": "assistant", "content": []})
            for j, part in enumerate(item.get("content") or []):
                if part.get("type") == "refusal":
                    ev("response.content_part.added", item_id=iid, output_index=i, content_index=j,
                       part={"type": "refusal", "refusal": ""})
                    for p in pieces(part.get("refusal")):
                        ev("response.refusal.delta", item_id=iid, output_index=i, content_index=j, delta=p)
                    ev("response.refusal.done", item_id=iid, output_index=i, content_index=j,
                       refusal=part.get("refusal"))
                else:
                    ev("response.content_part.added", item_id=iid, output_index=i, content_index=j,
                       part={"type": "output_text", "annotations": [], "text": ""})
                    for p in pieces(part.get("text")):
                        ev("response.output_text.delta", item_id=iid, output_index=i, content_index=j, delta=p)
                    for k, note in enumerate(part.get("annotations") or []):
                        ev("response.output_text.annotation.added", item_id=iid, output_index=i, content_index=j,
                           annotation_index=k, annotation=note)
                    ev("response.output_text.done", item_id=iid, output_index=i, content_index=j,
                       text=part.get("text"))
                ev("response.content_part.done", item_id=iid, output_index=i, content_index=j, part=part)
        elif kind == "function_call":
            added = dict(item, id=iid, arguments="")
            ev("response.output_item.added", output_index=i, item=added)
            for p in pieces(item.get("arguments") or "", 5):
                ev("response.function_call_arguments.delta", item_id=iid, output_index=i, delta=p)
            ev("response.function_call_arguments.done", item_id=iid, output_index=i,
               arguments=item.get("arguments") or "")
        elif kind in ("web_search_call", "file_search_call", "code_interpreter_call"):
            # a built-in call: added in progress, its progress events, done whole
            ev("response.output_item.added", output_index=i, item={"id": iid, "type": kind, "status": "in_progress"})
            steps = {"web_search_call": ("in_progress", "searching"), "file_search_call": ("in_progress", "searching"),
                     "code_interpreter_call": ("in_progress", "interpreting")}[kind]
            for step in steps:
                ev("response.%s.%s" % (kind, step), item_id=iid, output_index=i)
            if item.get("status") != "failed":
                ev("response.%s.completed" % kind, item_id=iid, output_index=i)
        else:
            ev("response.output_item.added", output_index=i, item=dict(item, summary=[]) if kind == "reasoning" else item)
            for k, sm in enumerate(item.get("summary") or []):
                for p in pieces(sm.get("text")):
                    ev("response.reasoning_summary_text.delta", item_id=iid, output_index=i, summary_index=k, delta=p)
        ev("response.output_item.done", output_index=i, item=dict(item, id=iid))
    final = len(events)
    status = resp.get("status", "completed")
    kind = {"completed": "response.completed", "incomplete": "response.incomplete",
            "failed": "response.failed"}.get(status, "response.completed")
    ev(kind, response=dict(resp, id=base["id"], object="response", status=status))
    return events, final


def anthropic_events(resp):
    events = []
    def ev(kind, **fields):
        fields["type"] = kind
        events.append((kind, fields))
    usage = resp.get("usage") or {}
    # the container comes in message_delta (null in message_start), as does
    # the whole usage (cumulative: server_tool_use too)
    start = {k: v for k, v in resp.items() if k not in ("content", "stop_reason", "usage")}
    start.update({"id": resp.get("id", "msg_s"), "type": "message", "role": "assistant", "content": [],
                  "stop_reason": None, "stop_sequence": None,
                  "usage": {"input_tokens": usage.get("input_tokens", 0), "output_tokens": 1}})
    if "container" in resp:
        start["container"] = None
    ev("message_start", message=start)
    ev("ping")
    for i, block in enumerate(resp.get("content") or []):
        kind = block.get("type")
        if kind == "text":
            ev("content_block_start", index=i, content_block={"type": "text", "text": ""})
            for c in block.get("citations") or []:
                ev("content_block_delta", index=i, delta={"type": "citations_delta", "citation": c})
            for p in pieces(block.get("text")):
                ev("content_block_delta", index=i, delta={"type": "text_delta", "text": p})
        elif kind in ("tool_use", "server_tool_use"):
            # a server tool's start has no input (the streaming reference's example)
            start_block = {"type": kind, "id": block.get("id"), "name": block.get("name")}
            if kind == "tool_use":
                start_block["input"] = {}
            ev("content_block_start", index=i, content_block=start_block)
            text = json.dumps(block.get("input"), separators=(",", ":")) if block.get("input") != {} else ""
            for p in pieces(text, 5):
                ev("content_block_delta", index=i, delta={"type": "input_json_delta", "partial_json": p})
        elif kind == "thinking":
            ev("content_block_start", index=i, content_block={"type": "thinking", "thinking": ""})
            for p in pieces(block.get("thinking")):
                ev("content_block_delta", index=i, delta={"type": "thinking_delta", "thinking": p})
            if block.get("signature"):
                ev("content_block_delta", index=i, delta={"type": "signature_delta", "signature": block["signature"]})
        else:
            ev("content_block_start", index=i, content_block=block)
        ev("content_block_stop", index=i)
    delta = {"stop_reason": resp.get("stop_reason"), "stop_sequence": None}
    if "container" in resp:
        delta["container"] = resp["container"]
    ev("message_delta", delta=delta, usage=dict(usage, output_tokens=usage.get("output_tokens", 0)))
    final = len(events)
    ev("message_stop")
    return events, final


def gemini_events(resp):
    events = []
    cands = resp.get("candidates")
    if not cands:
        return [(None, resp)], 0
    cand = cands[0]
    parts = (cand.get("content") or {}).get("parts") or []
    meta = resp.get("usageMetadata")
    def chunk(part_list, last=False):
        c = {"content": {"role": "model", "parts": part_list}, "index": 0}
        if last:
            for k, v in cand.items():
                if k not in ("content",):
                    c[k] = v
        out = {"candidates": [c]}
        if meta:
            out["usageMetadata"] = meta
        return (None, out)
    for part in parts:
        if "text" in part and "thoughtSignature" not in part:
            texts = pieces(part["text"]) or [""]
            for p in texts:
                events.append(chunk([dict(part, text=p)]))
        else:
            events.append(chunk([part]))
    final = len(events)
    if events:
        # the last chunk carries finishReason: the final event
        last = events.pop()
        events.append(chunk(last[1]["candidates"][0]["content"]["parts"], True))
        final = len(events) - 1
    else:
        events.append(chunk([], True))
        final = 0
    return events, final


def stream_events(path, resp):
    """(family, events, final) for a whole response answering path."""
    if ":streamGenerateContent" in path:
        return "gemini", *gemini_events(resp)
    if path.endswith("/v1/messages"):
        return "anthropic", *anthropic_events(resp)
    if path.endswith("/responses"):
        return "responses", *responses_events(resp)
    return "chat", *chat_events(resp, "/openai/" in path)


def error_event(family, err):
    kind, message, code = err.get("type", "server_error"), err.get("message", "the stream failed"), err.get("code")
    if family == "anthropic":
        return ("error", {"type": "error", "error": {"type": kind, "message": message}})
    if family == "responses":
        return ("error", {"type": "error", "code": code or kind, "message": message, "param": None})
    if family == "gemini":
        return (None, {"error": {"code": code or 500, "message": message, "status": kind}})
    return (None, {"error": {"message": message, "type": kind, "code": code}})


def sse_bytes(kind, data):
    text = data if isinstance(data, str) else json.dumps(data)
    return ((("event: %s\n" % kind) if kind else "") + "data: " + text + "\n\n").encode()


def take_step(record):
    with lock:
        if turns:
            body = record.get("json")
            messages = body.get("messages") if isinstance(body, dict) else None
            k = sum(1 for m in messages or [] if isinstance(m, dict) and m.get("role") == "assistant")
            record["turn"] = k + 1
            return turns[k] if k < len(turns) else None
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

    def send_stream(self, path, step):
        opts = step.get("stream") if isinstance(step.get("stream"), dict) else {}
        family, events, final = stream_events(path, step["json"])
        if opts.get("cut"):
            events = events[:final]
        if opts.get("error"):
            events = events[:max(1, len(events) // 2)] + [error_event(family, opts["error"])]
        self.send_response(step.get("status", 200))
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        for name, value in (step.get("headers") or {}).items():
            self.send_header(name, str(value))
        self.send_header("Connection", "close")
        self.close_connection = True
        self.end_headers()
        self.wfile.flush()
        delay, piece = opts.get("delay_ms", 0) / 1000.0, opts.get("piece")
        if opts.get("batch"):
            try:
                self.wfile.write(b"".join(sse_bytes(kind, data) for kind, data in events))
                self.wfile.flush()
            except OSError:
                pass
            return
        for kind, data in events:
            if delay:
                end = time.monotonic() + delay
                while time.monotonic() < end:
                    if stopping.is_set() or self.client_gone():
                        return
                    time.sleep(min(0.01, max(0.0, end - time.monotonic())))
            out = (b": keep-alive\n\n" if opts.get("keepalive") else b"") + sse_bytes(kind, data)
            if opts.get("stamp"):
                out = out.replace(b"@@@@", str(time.monotonic_ns()).encode())
            try:
                for i in range(0, len(out), piece or len(out)):
                    self.wfile.write(out[i:i + (piece or len(out))])
                    self.wfile.flush()
            except OSError:
                return

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
            upcoming = script[0] if script else (turns[0] if turns else None)
        if upcoming is None or upcoming.get("check", True):
            refused = refusal(url.path, record["headers"], parsed)
            if refused:
                record["refused"] = refused[1]
                return self.send_json(*refused)
        step = take_step(record)
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
        wants_stream = ":streamGenerateContent" in url.path or (isinstance(parsed, dict) and parsed.get("stream") is True)
        if wants_stream and "json" in step and step.get("stream") is not False and step.get("status", 200) < 300:
            self.send_stream(url.path, step)
            record["server_ms"] = (time.perf_counter() - started) * 1000
            return
        if "json" in step:
            payload, ctype = json.dumps(step["json"]).encode(), "application/json"
        else:
            payload, ctype = str(step.get("body", "")).encode(), step.get("content_type", "text/plain")
        self.send(step.get("status", 200), payload, step.get("content_type", ctype), step.get("headers"), step.get("truncate"))
        record["server_ms"] = (time.perf_counter() - started) * 1000

    def control(self, path, body):
        global script, turns
        if path == "/_mock/turns":
            steps = json.loads(body.decode() or "[]")
            with lock:
                turns = list(steps) if isinstance(steps, list) else []
            return self.send_json(200, {"steps": len(turns)})
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
                turns = []
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
