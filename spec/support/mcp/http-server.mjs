// The official MCP TypeScript SDK (1.x, the initialize era) serving a few
// tools over Streamable HTTP, for spec/43's url mcp_servers. It listens on
// 127.0.0.1 on a free port and prints its URL on one line of stdout.
//   node http-server.mjs [json]     json: replies are application/json
//                                   (default: each reply is an event stream)
// MCP_TOKEN (when set) is the bearer token every request must carry (401
// otherwise). Tools: add {a, b} (an outputSchema), echo {message}, header
// {name} (the value of a request header the server got), fail {} (isError),
// slow {ms, steps} (progress notifications on the reply's stream, then the
// answer), big {bytes} (a text of that many bytes), grow {} (adds a tool:
// notifications/tools/list_changed).
// Each session is a server of its own; DELETE ends it.
import http from "node:http";
import { randomUUID } from "node:crypto";
import { z } from "zod";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";

const json = process.argv[2] === "json";
const token = process.env.MCP_TOKEN;
const sessions = new Map();
const text = (t) => ({ content: [{ type: "text", text: t }] });

function serverOf() {
  const s = new McpServer({ name: "spec43-http", version: "1.0.0" }, { capabilities: { logging: {} } });
  s.registerTool("add", {
    description: "Adds two integers",
    inputSchema: { a: z.number().int(), b: z.number().int() },
    outputSchema: { sum: z.number().int() },
  }, async ({ a, b }) => ({ ...text(String(a + b)), structuredContent: { sum: a + b } }));
  s.registerTool("echo", { description: "Echoes a message", inputSchema: { message: z.string() } },
    async ({ message }) => text("Echo: " + message));
  s.registerTool("header", { description: "A request header's value", inputSchema: { name: z.string() } },
    async ({ name }, extra) => text(String(extra.requestInfo?.headers?.[name.toLowerCase()] ?? "")));
  s.registerTool("fail", { description: "Always fails", inputSchema: {} },
    async () => ({ ...text("it failed on purpose"), isError: true }));
  s.registerTool("slow", { description: "Reports progress", inputSchema: { ms: z.number().int(), steps: z.number().int() } },
    async ({ ms, steps }, extra) => {
      for (let i = 1; i <= steps; i++) {
        await new Promise((r) => setTimeout(r, ms / steps));
        await extra.sendNotification({ method: "notifications/message", params: { level: "info", data: "step " + i } });
      }
      return text("done after " + steps + " steps");
    });
  s.registerTool("big", { description: "A result of n bytes", inputSchema: { bytes: z.number().int() } },
    async ({ bytes }) => text("x".repeat(bytes)));
  let grown = 0;
  s.registerTool("grow", { description: "Adds a tool", inputSchema: {} }, async () => {
    grown++;
    s.registerTool("grown" + grown, { description: "A grown tool", inputSchema: {} }, async () => text("grown"));
    return text("grew");
  });
  return s;
}

const httpServer = http.createServer(async (req, res) => {
  if (token && req.headers.authorization !== "Bearer " + token) {
    res.writeHead(401, { "WWW-Authenticate": "Bearer", "Content-Type": "text/plain" }).end("no valid bearer token");
    return;
  }
  const chunks = [];
  for await (const c of req) chunks.push(c);
  const body = chunks.length ? JSON.parse(Buffer.concat(chunks).toString()) : undefined;
  const id = req.headers["mcp-session-id"];
  let transport = id && sessions.get(id);
  if (!transport && body?.method === "initialize") {
    transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      enableJsonResponse: json,
      onsessioninitialized: (sid) => sessions.set(sid, transport),
    });
    transport.onclose = () => sessions.delete(transport.sessionId);
    await serverOf().connect(transport);
  }
  if (!transport) {
    res.writeHead(id ? 404 : 400, { "Content-Type": "application/json" }).end(JSON.stringify({
      jsonrpc: "2.0", id: null, error: { code: -32000, message: id ? "Session not found" : "Bad Request: no session" },
    }));
    return;
  }
  await transport.handleRequest(req, res, body);
});
httpServer.listen(0, "127.0.0.1", () => {
  console.log(`http://127.0.0.1:${httpServer.address().port}/mcp`);
});
process.on("SIGTERM", () => process.exit(0));
