// One replica of a TypeScript SDK 1.32 deployment, for the server guard's tests and benchmark:
// the SDK's StreamableHTTPServerTransport under Express, one transport per session (as the
// SDK's own simpleStreamableHttp example), with or without ResumeSafety in front (its
// middleware; with --plain, node:http with no body parser and ResumeSafety's `wrap`).
//
//   node replica.mjs --port N [--redis URL] [--store memory|redis] [--no-guard]
//                    [--lease-ms N] [--session-prefix iN-] [--json] [--max-body N] [--plain]
//                    [--key-scope-header NAME]
//                    [--tee] [--event-id-prefix P]
//
// Its tool `bump {tag, delay_ms}` applies a side effect first (`INCR effects:<tag>` in Redis,
// the truth the tests read, and `ran:<tag>` = its pid), waits `delay_ms` (a call to cut, drain
// or kill after its effect), then counts its finish (`INCR done:<tag>`). What the tests read to
// know a fault bit, per tag (Express only): `posts:<tag>`, the `tools/call` requests that
// reached a replica (a re-send makes two); `cut:<tag>`, those whose connection closed before
// their answer went (nginx cut it, or a drain closed it); `drained:<tag>`, the runs in flight
// when a drain began. `echo {text}` touches
// nothing; `step` sends one progress notification and answers once `POST /admin/release`
// came. Calls are answered as SSE streams with an event store (resumable), or JSON (--json).
// Session ids start with --session-prefix, so that nginx can pin a session to the replica
// that holds it in memory. With --tee, a middleware in front of the guard puts its own
// `write` and `end` on each response (as compression does) and keeps the last body they
// sent that was not empty: `GET /admin/tee`. The event store's ids are `P1`, `P2`, … (P from
// --event-id-prefix, default empty); `GET /admin/replays` lists the ids it was asked to replay
// after, as JSON.
//
// Prints `http://127.0.0.1:PORT/mcp` once it listens. SIGTERM drains it as a shutdown that does
// not wait for open responses does: new connections are refused and every open one is closed at
// once (a client whose answer had not come must come back elsewhere), while the calls already
// running go on to their end (and the guard stores their answers); then it exits. SIGKILL is a
// crash; it exits at once when its stdin closes.
import { randomUUID } from "node:crypto";
import { createServer } from "node:http";
import { createConnection } from "node:net";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { createMcpExpressApp } from "@modelcontextprotocol/sdk/server/express.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { isInitializeRequest } from "@modelcontextprotocol/sdk/types.js";
import { z } from "zod";
import { ResumeSafety } from "../../index.js";

const args = process.argv.slice(2);
const option = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : fallback;
};
const port = Number.parseInt(option("--port", "0"), 10);
const redisUrl = new URL(option("--redis", "redis://127.0.0.1:6379"));
const guarded = !args.includes("--no-guard");
const store = option("--store", "redis") === "redis" ? redisUrl.href : "memory";
const lease = Number(option("--lease-ms", "10000"));
const sessionPrefix = option("--session-prefix", "");
const json = args.includes("--json");
const maxBody = option("--max-body", undefined);
const keyScopeHeader = option("--key-scope-header", undefined);
const plain = args.includes("--plain");
const tee = args.includes("--tee");
const eventIdPrefix = option("--event-id-prefix", "");

/** Just enough of the Redis protocol for the tool's side effect: the replies, in order. */
function redis(...commands) {
  return new Promise((resolve, reject) => {
    const socket = createConnection(Number(redisUrl.port || 6379), redisUrl.hostname);
    let payload = "";
    for (const c of commands) {
      payload += `*${c.length}\r\n` + c.map((a) => `$${Buffer.byteLength(String(a))}\r\n${a}\r\n`).join("");
    }
    let received = "";
    socket.on("data", (chunk) => {
      received += chunk;
      const lines = received.split("\r\n");
      if (lines.length > commands.length) {
        socket.end();
        resolve(lines.slice(0, commands.length));
      }
    });
    socket.on("error", reject);
    socket.write(payload);
  });
}

/** The ids every event store here was asked to replay after, in order. */
const replays = [];

class OrderedEventStore {
  constructor() {
    this.next = 1;
    this.events = [];
  }
  async storeEvent(streamId, message) {
    const id = `${eventIdPrefix}${this.next++}`;
    this.events.push({ id, streamId, message });
    return id;
  }
  async getStreamIdForEventId(eventId) {
    return this.events.find((e) => e.id === eventId)?.streamId;
  }
  async replayEventsAfter(lastEventId, { send }) {
    replays.push(lastEventId);
    const at = this.events.findIndex((e) => e.id === lastEventId);
    if (at < 0) return "";
    const { streamId } = this.events[at];
    for (const e of this.events.slice(at + 1)) {
      if (e.streamId === streamId && Object.keys(e.message).length > 0) await send(e.id, e.message);
    }
    return streamId;
  }
}

/** The tags of the tool runs in flight (one entry per run). */
const running = [];
/** The POSTs being answered: until their `close` (a keyed call's once the guard stored its answer). */
const posts = new Set();
/** The `tools/call`s whose answer has not gone: response → tag. */
const unanswered = new Map();

/**
 * Counts each `tools/call` that reaches this replica, and each whose connection closed before
 * its answer went (`cut:<tag>`); watches for its answer going.
 */
async function witness(req, res, next) {
  posts.add(res);
  res.once("close", () => posts.delete(res));
  const tag = req.body?.method === "tools/call" ? req.body.params?.arguments?.tag : undefined;
  if (typeof tag !== "string") return next();
  await redis(["INCR", `posts:${tag}`]);
  unanswered.set(res, tag);
  res.once("finish", () => unanswered.delete(res));
  res.once("close", () => {
    // Closed before its answer finished (a drain's closes were counted by the drain).
    if (unanswered.delete(res)) redis(["INCR", `cut:${tag}`]).catch(() => {});
  });
  next();
}

let release = null;
let released = new Promise((resolve) => (release = resolve));

function mcpServer() {
  const server = new McpServer({ name: "replica", version: "1" });
  server.registerTool(
    "bump",
    { description: "Applies one side effect for the tag, then waits delay_ms", inputSchema: { tag: z.string(), delay_ms: z.number().optional() } },
    async ({ tag, delay_ms: delay = 0 }) => {
      running.push(tag);
      try {
        const [n] = await redis(["INCR", `effects:${tag}`], ["SET", `ran:${tag}`, String(process.pid)]);
        if (delay > 0) await new Promise((resolve) => setTimeout(resolve, delay));
        await redis(["INCR", `done:${tag}`]);
        return { content: [{ type: "text", text: `${tag}:${n.slice(1)}` }] };
      } finally {
        running.splice(running.indexOf(tag), 1);
      }
    },
  );
  server.registerTool("echo", { description: "Returns its text", inputSchema: { text: z.string() } }, async ({ text }) => ({
    content: [{ type: "text", text }],
  }));
  server.registerTool("step", { description: "One progress notification, then the result once released" }, async (extra) => {
    const token = extra._meta?.progressToken;
    if (token !== undefined) {
      await extra.sendNotification({ method: "notifications/progress", params: { progressToken: token, progress: 1, total: 2 } });
    }
    await released;
    released = new Promise((resolve) => (release = resolve));
    return { content: [{ type: "text", text: "done" }] };
  });
  return server;
}

const transports = new Map();

async function post(req, res) {
  const sessionId = req.headers["mcp-session-id"];
  const known = sessionId === undefined ? undefined : transports.get(sessionId);
  if (known) return known.handleRequest(req, res, req.body);
  if (sessionId === undefined && isInitializeRequest(req.body)) {
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => `${sessionPrefix}${randomUUID()}`,
      eventStore: json ? undefined : new OrderedEventStore(),
      enableJsonResponse: json,
      onsessioninitialized: (id) => transports.set(id, transport),
    });
    transport.onclose = () => transports.delete(transport.sessionId);
    await mcpServer().connect(transport);
    return transport.handleRequest(req, res, req.body);
  }
  // An unknown session is gone (404, as the specification says); no session at all, a bad
  // request.
  const status = sessionId === undefined ? 400 : 404;
  refuse(res, status, status === 404 ? "Session not found" : "Bad Request: No valid session ID provided");
}

function refuse(res, status, message) {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify({ jsonrpc: "2.0", error: { code: -32000, message }, id: null }));
}

async function other(req, res) {
  const transport = transports.get(req.headers["mcp-session-id"]);
  if (!transport) {
    refuse(res, 404, "Session not found");
    return;
  }
  await transport.handleRequest(req, res);
}

const safety = guarded
  ? new ResumeSafety({
      store,
      lease,
      instanceId: `replica-${port}-${process.pid}`,
      ...(maxBody === undefined ? {} : { maxBody: Number(maxBody) }),
      ...(keyScopeHeader === undefined ? {} : { keyScopeHeader }),
    })
  : null;

/** What node:http hands a handler: the body is unread unless the guard read it. */
async function plainMcp(req, res) {
  if (req.method !== "POST") return other(req, res);
  if (req.body === undefined) {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    try {
      req.body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
    } catch {
      return refuse(res, 400, "Parse error");
    }
  }
  return post(req, res);
}

let listener;
if (plain) {
  const guardedMcp = safety ? safety.wrap(plainMcp) : plainMcp;
  listener = createServer((req, res) => {
    if (req.url === "/mcp") return guardedMcp(req, res);
    if (req.url === "/health") return res.end("ok");
    if (req.url === "/admin/replays") return res.end(JSON.stringify(replays));
    res.writeHead(404).end();
  });
} else {
  const app = createMcpExpressApp();
  if (tee) {
    let last = "";
    app.use((_req, res, next) => {
      const [write, end] = [res.write, res.end];
      let seen = "";
      const keep = (chunk) => {
        if (chunk !== undefined && chunk !== null && typeof chunk !== "function") seen += chunk.toString();
      };
      res.write = function teeWrite(chunk, ...rest) {
        keep(chunk);
        return write.call(this, chunk, ...rest);
      };
      res.end = function teeEnd(chunk, ...rest) {
        keep(chunk);
        if (seen !== "") last = seen;
        return end.call(this, chunk, ...rest);
      };
      next();
    });
    app.get("/admin/tee", (_req, res) => res.type("text").send(last));
  }
  const guard = safety ? [safety.middleware()] : [];
  app.post("/mcp", witness, ...guard, post);
  app.get("/mcp", ...guard, other);
  app.delete("/mcp", ...guard, other);
  app.get("/health", (_req, res) => res.type("text").send("ok"));
  app.get("/admin/replays", (_req, res) => res.json(replays));
  app.post("/admin/release", (_req, res) => {
    release();
    res.end();
  });
  listener = createServer(app);
}
listener.listen(port, "127.0.0.1", () => {
  process.stdout.write(`http://127.0.0.1:${listener.address().port}/mcp\n`);
});

async function drain() {
  // No new connections; the runs in flight and the answers not gone named; every connection
  // closed now, so clients come back elsewhere; the runs (and the guard's storing of their
  // answers) let end.
  listener.close();
  for (const tag of [...running]) await redis(["INCR", `drained:${tag}`]);
  // Counted here, not again when their connection closes.
  const cut = [...unanswered.values()];
  unanswered.clear();
  for (const tag of cut) await redis(["INCR", `cut:${tag}`]);
  listener.closeAllConnections();
  const deadline = Date.now() + 10000;
  while ((running.length > 0 || posts.size > 0) && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  process.exit(0);
}
process.on("SIGTERM", drain);
// The test is done with it: no request of its is in flight any more.
process.stdin.on("end", () => process.exit(0));
process.stdin.resume();
