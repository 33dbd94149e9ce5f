// An official MCP TypeScript client against a stdio or HTTP server, for spec/37.
//   node client.mjs v1|v2-legacy|v2-auto|v2-pin TOOL ARGS_JSON BAD_ARGS_JSON -- COMMAND ARG...
//   node client.mjs v1|v2-legacy|v2-auto|v2-pin TOOL ARGS_JSON BAD_ARGS_JSON -- http://HOST:PORT/mcp
// Over HTTP, MCP_TOKEN (when set) is sent as a bearer token, and the client
// ends its session (DELETE) on close. PROGRESS='{"tool": T, "arguments": A}'
// (when set) makes one more call, of T with A and an onprogress callback:
// out.progress = { events: [what onprogress got, in order], result }.
// ELICIT=accept|decline (v1 only): the client declares the elicitation
// capability and answers each elicitation/create so; out.elicited lists
// the messages it was asked.
// Prints one JSON object: the era the client ended in, the protocol version,
// tools/list, a call, a call the pipeline refuses, and a call of an unknown tool.
const [flavour, tool, args, badArgs, dashdash, command, ...commandArgs] = process.argv.slice(2);
if (dashdash !== "--") throw new Error("usage: client.mjs FLAVOUR TOOL ARGS BAD_ARGS -- COMMAND ARG...");

let Client, StdioClientTransport, StreamableHTTPClientTransport, options = {};
if (flavour === "v1") {
  ({ Client } = await import("@modelcontextprotocol/sdk/client/index.js"));
  ({ StdioClientTransport } = await import("@modelcontextprotocol/sdk/client/stdio.js"));
  ({ StreamableHTTPClientTransport } = await import("@modelcontextprotocol/sdk/client/streamableHttp.js"));
} else {
  ({ Client, StreamableHTTPClientTransport } = await import("@modelcontextprotocol/client"));
  ({ StdioClientTransport } = await import("@modelcontextprotocol/client/stdio"));
  const mode = { "v2-legacy": "legacy", "v2-auto": "auto", "v2-pin": { pin: "2026-07-28" } }[flavour];
  options = { versionNegotiation: { mode } };
}

if (process.env.ELICIT) options = { ...options, capabilities: { elicitation: {} } };
const client = new Client({ name: "spec37", version: "1.0.0" }, options);
const elicited = [];
if (process.env.ELICIT && flavour === "v1") {
  const { ElicitRequestSchema } = await import("@modelcontextprotocol/sdk/types.js");
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    elicited.push(request.params.message);
    return { action: process.env.ELICIT, ...(process.env.ELICIT === "accept" ? { content: {} } : {}) };
  });
}
const http = /^https?:/.test(command);
const headers = process.env.MCP_TOKEN ? { Authorization: `Bearer ${process.env.MCP_TOKEN}` } : {};
const transport = http
  ? new StreamableHTTPClientTransport(new URL(command), { requestInit: { headers } })
  : new StdioClientTransport({ command, args: commandArgs, stderr: "pipe" });
let stderr = "";
transport.stderr?.on("data", (d) => { stderr += d; });
const out = {};
try {
  await client.connect(transport);
  out.version = client.getNegotiatedProtocolVersion?.() ?? transport.protocolVersion ?? null;
  out.server = client.getServerVersion?.() ?? null;
  out.tools = (await client.listTools()).tools;
  out.call = await client.callTool({ name: tool, arguments: JSON.parse(args) });
  out.bad = await client.callTool({ name: tool, arguments: JSON.parse(badArgs) });
  try {
    out.unknown = await client.callTool({ name: "no_such_tool", arguments: {} });
  } catch (e) {
    out.unknown = { error: { code: e.code, message: e.message } };
  }
  if (process.env.PROGRESS) {
    const { tool: name, arguments: a } = JSON.parse(process.env.PROGRESS);
    const events = [];
    const onprogress = (p) => { events.push(p); };
    const result = flavour === "v1"
      ? await client.callTool({ name, arguments: a }, undefined, { onprogress })
      : await client.callTool({ name, arguments: a }, { onprogress });
    out.progress = { events, result };
  }
  if (process.env.ELICIT) out.elicited = elicited;
  out.session = http ? transport.sessionId ?? null : undefined;
  if (http && transport.sessionId) await transport.terminateSession();
  await client.close();
} catch (e) {
  out.failure = String(e && e.stack || e);
  out.stderr = stderr;
}
process.stdout.write(JSON.stringify(out) + "\n");
process.exit(0);
