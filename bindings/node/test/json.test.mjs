// JSON across the addon's boundary behaves as JavaScript's own JSON: a whole number is sent
// as an integer however large (typed servers refuse `1700000000000.0`), a server's integer
// beyond 2^53 arrives as a number (as JSON.parse gives it, never a BigInt that JSON.stringify
// cannot write), and a message of any number of values crosses. Through `Client`, the
// handlers, `ResumeTransport` and `resumeFetch`, against a stub server that records the raw
// bodies it receives.
import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer } from "node:http";
import { after, before, test } from "node:test";
import { Client as SdkClient } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { LoggingMessageNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import { Client, ResumeTransport, resumeFetch } from "../index.js";

const FAST = { reconnect: { initialDelay: 10, maxDelay: 100, maxAttempts: 2 } };
/** Beyond 2^53: JSON.parse reads it as the nearest double. */
const HUGE_ID = "1234567890123456789";
/** Values napi's conversion counted, one more than it allowed. */
const ITEMS = 1_000_001;

/**
 * A legacy-era MCP server answering from `tools` (name → `(message, reply)`, `reply` taking
 * the raw JSON text of the result), recording the raw body of every POST.
 */
class StubServer {
  /** @type {string[]} */
  bodies = [];
  /** @type {{ test: (message: any) => boolean, resolve: (body: string) => void }[]} */
  #waiting = [];
  #http;

  constructor(tools) {
    this.tools = tools;
    this.#http = createServer((req, res) => this.#handle(req, res));
  }

  async start() {
    this.#http.listen(0, "127.0.0.1");
    await once(this.#http, "listening");
    this.url = `http://127.0.0.1:${this.#http.address().port}/mcp`;
    return this;
  }

  stop() {
    this.#http.closeAllConnections();
    this.#http.close();
  }

  /** The raw bodies of the requests of `method` received so far. */
  sent(method) {
    return this.bodies.filter((body) => JSON.parse(body).method === method);
  }

  /** The raw body of the first POST `test` accepts, once it was received. */
  received(test) {
    const body = this.bodies.find((b) => test(JSON.parse(b)));
    if (body !== undefined) return Promise.resolve(body);
    return new Promise((resolve) => this.#waiting.push({ test, resolve }));
  }

  #handle(req, res) {
    if (req.method === "DELETE") return res.writeHead(200).end();
    if (req.method !== "POST") return res.writeHead(405).end();
    let body = "";
    req.setEncoding("utf8");
    req.on("data", (chunk) => (body += chunk));
    req.on("end", () => {
      this.bodies.push(body);
      const message = JSON.parse(body);
      this.#waiting = this.#waiting.filter(({ test, resolve }) => !(test(message) && (resolve(body), true)));
      if (message.method === undefined || message.id === undefined) return res.writeHead(202).end();
      const reply = (result) => {
        res.writeHead(200, { "content-type": "application/json", "mcp-session-id": "s-1" });
        res.end(`{"jsonrpc":"2.0","id":${JSON.stringify(message.id)},"result":${result}}`);
      };
      switch (message.method) {
        case "initialize":
          return reply(JSON.stringify({
            protocolVersion: message.params.protocolVersion,
            capabilities: { tools: {}, logging: {} },
            serverInfo: { name: "stub", version: "1" },
          }));
        case "tools/list":
          return reply(JSON.stringify({
            tools: [{
              name: "big_id",
              inputSchema: { type: "object" },
              outputSchema: { type: "object", properties: { id: { type: "integer" } }, required: ["id"] },
            }],
          }));
        case "tools/call":
          return this.tools[message.params.name](message, reply, res);
        default:
          return reply("{}");
      }
    });
  }
}

/** Raw JSON texts of the tools' results. */
const RESULTS = {
  bigId: `{"content":[],"structuredContent":{"id":${HUGE_ID}}}`,
  many: `{"content":[],"structuredContent":{"items":[${Array(ITEMS).fill(0).join(",")}]}}`,
};

let server;
/** Answers `slow` once the test calls it. */
let releaseSlow;
before(async () => {
  let slowReplies = [];
  releaseSlow = () => {
    slowReplies.forEach((reply) => reply('{"content":[{"type":"text","text":"slow"}]}'));
    slowReplies = [];
  };
  server = await new StubServer({
    record: (_message, reply) => reply('{"content":[]}'),
    big_id: (_message, reply) => reply(RESULTS.bigId),
    many: (_message, reply) => reply(RESULTS.many),
    slow: (_message, reply) => slowReplies.push(reply),
    // Asks the client first (on the call's SSE stream), then answers with what it said.
    ask: async (message, _reply, res) => {
      const asked = `ask-${message.id}`;
      res.writeHead(200, { "content-type": "text/event-stream", "mcp-session-id": "s-1" });
      res.write(`event: message\ndata: {"jsonrpc":"2.0","id":"${asked}","method":"x/echo","params":{"id":${HUGE_ID}}}\n\n`);
      const answer = JSON.stringify(JSON.parse(await server.received((m) => m.id === asked)).result);
      res.end(`event: message\ndata: {"jsonrpc":"2.0","id":${JSON.stringify(message.id)},"result":{"content":[],"structuredContent":${answer}}}\n\n`);
    },
    // Logs first (on the call's SSE stream), then answers.
    log: (message, _reply, res) => {
      res.writeHead(200, { "content-type": "text/event-stream", "mcp-session-id": "s-1" });
      res.write(`event: message\ndata: {"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":{"id":${HUGE_ID}}}}\n\n`);
      res.end(`event: message\ndata: {"jsonrpc":"2.0","id":${JSON.stringify(message.id)},"result":{"content":[]}}\n\n`);
    },
  }).start();
});
after(() => server.stop());

/** Asserts the raw body of the last request of `method` holds `value`'s numbers as integers. */
function assertIntegersSent(method, ...numbers) {
  const body = server.sent(method).at(-1);
  assert.ok(body !== undefined, `no ${method} was sent`);
  for (const n of numbers) {
    assert.match(body, new RegExp(`[:,\\[]${n}(?![\\d.eE])`), `${n} as an integer in ${body}`);
  }
  assert.doesNotMatch(body.replace('"jsonrpc":"2.0"', ""), /\d\.0\b/, body);
}

test("Client: whole numbers beyond 32 bits are sent as integers", async () => {
  const client = new Client(server.url, { era: "legacy", ...FAST });
  await client.connect();
  await client.callTool("record", { at: 1700000000000, neg: -3000000000, list: [4294967296] }, {
    meta: { at: 1700000000000 },
    progressToken: 1700000000001,
  });
  assertIntegersSent("tools/call", 1700000000000, -3000000000, 4294967296, 1700000000001);
  await client.request("resources/list", { at: 1700000000000 });
  assertIntegersSent("resources/list", 1700000000000);
  client.notify("notifications/custom", { at: 1700000000000 });
  await server.received((m) => m.method === "notifications/custom");
  assertIntegersSent("notifications/custom", 1700000000000);
  // What JSON.stringify would make of them: NaN is null, undefined members are left out.
  await client.callTool("record", { nan: Number.NaN, gone: undefined, at: new Date(0) });
  assert.deepEqual(JSON.parse(server.sent("tools/call").at(-1)).params.arguments, {
    nan: null,
    at: "1970-01-01T00:00:00.000Z",
  });
  // A BigInt JSON.stringify refuses is sent as the integer it is.
  await client.callTool("record", { id: 1234567890123456789n });
  assert.match(server.sent("tools/call").at(-1), /"id":1234567890123456789\b/);
  await client.close();
});

test("Client: a server's integer beyond 2^53 arrives as a number, as JSON.parse gives it", async () => {
  const client = new Client(server.url, { era: "legacy", ...FAST });
  await client.connect();
  const result = await client.callTool("big_id");
  assert.equal(typeof result.structuredContent.id, "number");
  assert.equal(result.structuredContent.id, JSON.parse(HUGE_ID));
  assert.equal(JSON.stringify(result.structuredContent), `{"id":${JSON.parse(HUGE_ID)}}`);
  await client.close();
});

test("Client: a result of more than a million values arrives whole", async () => {
  const client = new Client(server.url, { era: "legacy", ...FAST });
  await client.connect();
  const result = await client.callTool("many");
  assert.equal(result.structuredContent.items.length, ITEMS);
  await client.close();
});

test("Client: a handler gets the server's integers as numbers, and its answer's are sent as integers", async () => {
  let seen;
  const client = new Client(server.url, {
    era: "legacy",
    ...FAST,
    onServerRequest: (request) => {
      seen = request.params;
      return { at: 1700000000000, id: request.params.id };
    },
  });
  await client.connect();
  const result = await client.callTool("ask");
  assert.equal(typeof seen.id, "number");
  assert.equal(seen.id, JSON.parse(HUGE_ID));
  assert.deepEqual(result.structuredContent, { at: 1700000000000, id: JSON.parse(HUGE_ID) });
  const answer = await server.received((m) => String(m.id).startsWith("ask-"));
  assert.match(answer, /"at":1700000000000[,}]/);
  await client.close();
});

test("Client: a notification's integer beyond 2^53 arrives as a number", async () => {
  const client = new Client(server.url, { era: "legacy", ...FAST });
  await client.connect();
  const notifications = client.notifications();
  await client.callTool("log");
  for await (const notification of notifications) {
    if (notification.method !== "notifications/message") continue;
    assert.equal(typeof notification.params.data.id, "number");
    assert.equal(notification.params.data.id, JSON.parse(HUGE_ID));
    break;
  }
  await client.close();
});

/** The TypeScript SDK's client on `transport`, with a logging notification handler. */
async function sdkClient(transport) {
  const client = new SdkClient({ name: "host", version: "1" });
  const logged = new Promise((resolve) => {
    client.setNotificationHandler(LoggingMessageNotificationSchema, (notification) => resolve(notification.params.data));
  });
  await client.connect(transport);
  return { client, logged };
}

/** The TypeScript SDK's client over a ResumeTransport to the stub. */
const overTransport = () => sdkClient(new ResumeTransport(server.url, { era: "legacy", ...FAST }));

test("ResumeTransport: whole numbers beyond 32 bits are sent as integers", async () => {
  const { client } = await overTransport();
  await client.callTool({ name: "record", arguments: { at: 1700000000000, neg: -3000000000 } });
  assertIntegersSent("tools/call", 1700000000000, -3000000000);
  await client.close();
});

test("ResumeTransport: a server's integer beyond 2^53 arrives as a number, and passes the output schema", async () => {
  const { client, logged } = await overTransport();
  // The SDK validates the structured content against the tool's output schema (an integer).
  await client.listTools();
  const result = await client.callTool({ name: "big_id", arguments: {} });
  assert.equal(typeof result.structuredContent.id, "number");
  assert.equal(JSON.stringify(result.structuredContent), `{"id":${JSON.parse(HUGE_ID)}}`);
  await client.callTool({ name: "log", arguments: {} });
  assert.equal(typeof (await logged).id, "number");
  await client.close();
});

test("ResumeTransport: an answer of more than a million values ends no other call", async () => {
  const { client } = await overTransport();
  const slow = client.callTool({ name: "slow", arguments: {} });
  await server.received((m) => m.params?.name === "slow");
  const many = await client.callTool({ name: "many", arguments: {} });
  assert.equal(many.structuredContent.items.length, ITEMS);
  releaseSlow();
  assert.equal((await slow).content[0].text, "slow");
  await client.close();
});

test("resumeFetch: a server's integer beyond 2^53 reaches the host client as a number", async () => {
  const fetch = resumeFetch({ era: "legacy", ...FAST });
  const transport = new StreamableHTTPClientTransport(new URL(server.url), { fetch });
  const { client, logged } = await sdkClient(transport);
  await client.listTools();
  const result = await client.callTool({ name: "big_id", arguments: {} });
  assert.equal(typeof result.structuredContent.id, "number");
  await client.callTool({ name: "log", arguments: {} });
  assert.equal(typeof (await logged).id, "number");
  await client.callTool({ name: "record", arguments: { at: 1700000000000, neg: -3000000000 } });
  assertIntegersSent("tools/call", 1700000000000, -3000000000);
  await client.close();
  await fetch.close();
});
