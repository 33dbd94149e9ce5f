// The Vercel AI SDK's own client of a UI message stream, as useChat runs it:
// its AbstractChat (the state machine under useChat) with its
// DefaultChatTransport, which POSTs the messages and reads the answer with
// parseJsonEventStream(uiMessageChunkSchema) and processUIMessageStream.
//
//   node chat.mjs URL [--ping URL2] [--text T]   POSTs a user message (T, or "hello") to URL;
//                                                URL2 is fetched once text shows
//   node chat.mjs -                              the stream is read from stdin
//
// Prints one JSON object: status, error, finishReason, the messages, every
// update of the assistant's message ({ms, parts: how many, text: its text so far}), each chunk the transport
// parsed (chunks, with any it refused in invalid), readUIMessageStream's last
// message for the same bytes (read), and with --ping the time the second
// request took, when it was answered (at) and whether the stream had ended.
import { AbstractChat, DefaultChatTransport, parseJsonEventStream, readUIMessageStream, uiMessageChunkSchema } from "ai";

const args = process.argv.slice(2);
const url = args[0];
const opt = (name) => { const i = args.indexOf(name); return i >= 0 ? args[i + 1] : undefined; };
let t0 = performance.now();
const ms = () => Math.round(performance.now() - t0);

class State {
  constructor() { this.status = "ready"; this.error = undefined; this.messages = []; this.updates = []; }
  record(message) {
    if (message.role !== "assistant") return;
    const text = message.parts.filter((p) => p.type === "text").map((p) => p.text).join("");
    this.updates.push({ ms: ms(), parts: message.parts.length, text });
    if (text !== "" && startPing) { const go = startPing; startPing = undefined; go(); }
  }
  pushMessage = (m) => { this.messages = this.messages.concat([m]); this.record(m); };
  popMessage = () => { this.messages = this.messages.slice(0, -1); };
  replaceMessage = (i, m) => { this.messages = [...this.messages.slice(0, i), m, ...this.messages.slice(i + 1)]; this.record(m); };
  snapshot = (thing) => structuredClone(thing);
}

class Chat extends AbstractChat {
  constructor(init) { const state = new State(); super({ ...init, state }); this.st = state; }
}

// Reads an SSE text with parseJsonEventStream and readUIMessageStream ->
// { chunks, invalid, errors, message }
async function read(text) {
  const r = { chunks: [], invalid: [], errors: [] };
  const parsed = parseJsonEventStream({ stream: new Response(text).body, schema: uiMessageChunkSchema });
  const values = [];
  for await (const p of parsed) {
    if (p.success) { values.push(p.value); r.chunks.push(p.value); } else r.invalid.push(String(p.error && p.error.message));
  }
  const stream = new ReadableStream({ start(c) { for (const v of values) c.enqueue(v); c.close(); } });
  for await (const m of readUIMessageStream({ stream, onError: (e) => r.errors.push(e.message) })) r.message = m;
  return r;
}

// once before the clock starts: the first parse compiles the schemas, which
// would hold the first chunks back on a slow machine
await read('data: {"type":"start"}\n\ndata: {"type":"text-start","id":"w"}\n\ndata: {"type":"text-delta","id":"w","delta":"w"}\n\ndata: [DONE]\n\n');

// and a first fetch (of --ping's URL), which loads the HTTP client
if (opt("--ping")) await (await fetch(opt("--ping"))).text();
t0 = performance.now();
let body;          // the bytes of the answer, kept for readUIMessageStream
if (url === "-") {
  const parts = [];
  for await (const b of process.stdin) parts.push(b);
  body = Buffer.concat(parts).toString("utf8");
}

// the transport's fetch: the real one, keeping a copy of the bytes
async function fetchKeeping(input, init) {
  if (body !== undefined) {
    return new Response(body, { headers: { "content-type": "text/event-stream", "x-vercel-ai-ui-message-stream": "v1" } });
  }
  const response = await fetch(input, init);
  const [a, b] = response.body.tee();
  new Response(b).text().then((t) => { body = t; });
  return new Response(a, { status: response.status, headers: response.headers });
}

const out = { headers: undefined };
let finished;
const chat = new Chat({
  id: "chat-1",
  transport: new DefaultChatTransport({
    api: url === "-" ? "http://unused/api/chat" : url,
    fetch: async (input, init) => {
      const r = await fetchKeeping(input, init);
      out.headers = Object.fromEntries(r.headers.entries());
      return r;
    },
  }),
  onFinish: (f) => { finished = f; },
});

// --ping: fetched once the first text has shown
let ping, startPing;
if (opt("--ping")) {
  ping = new Promise((resolve) => {
    startPing = async () => {
      const start = performance.now();
      const r = await fetch(opt("--ping"));
      const text = await r.text();
      resolve({ status: r.status, text, ms: Math.round(performance.now() - start), at: ms(),
        streamDone: finished !== undefined });
    };
  });
}

await chat.sendMessage({ text: opt("--text") || "hello" });
out.status = chat.status;
out.error = chat.error ? chat.error.message : undefined;
out.finishReason = finished && finished.finishReason;
out.isError = finished && finished.isError;
out.messages = chat.messages;
out.updates = chat.st.updates;
out.ms = ms();
if (ping) out.ping = await ping;

// the same bytes through parseJsonEventStream and readUIMessageStream, chunk by chunk
while (body === undefined) await new Promise((r) => setTimeout(r, 5));
const again = await read(body);
out.chunks = again.chunks;
out.invalid = again.invalid;
out.readErrors = again.errors;
out.read = again.message;
out.done = /data: \[DONE\]\n\n$/.test(body);
process.stdout.write(JSON.stringify(out));
