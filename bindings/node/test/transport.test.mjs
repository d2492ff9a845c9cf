// ResumeTransport under the TypeScript SDK's own Client (v1): cancellation through the SDK's
// AbortSignal, what JSON-RPC cannot say as an error with `data.kind`, the server's requests
// answered by the SDK client's own handlers, and the real session's events.
import assert from "node:assert/strict";
import { getEventListeners, once } from "node:events";
import { createServer } from "node:http";
import { after, before, test } from "node:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CreateMessageRequestSchema, ErrorCode, McpError } from "@modelcontextprotocol/sdk/types.js";
import { BRIDGE_ERROR_CODES, ResumeTransport } from "../index.js";
import { LoggingServer } from "./support/servers.mjs";

const FAST = { reconnect: { initialDelay: 10, maxDelay: 100, maxAttempts: 2 } };

let server;
before(async () => {
  server = await LoggingServer.v1();
});
after(() => server.stop());

async function connected(options = {}, capabilities = {}) {
  const client = new Client({ name: "host", version: "1" }, { capabilities });
  const transport = new ResumeTransport(server.url, { ...FAST, ...options });
  await client.connect(transport);
  return { client, transport };
}

test("the SDK's AbortSignal cancels the call on the server", async () => {
  const { client } = await connected();
  const mark = server.mark();
  const controller = new AbortController();
  const call = client.callTool({ name: "block", arguments: {} }, undefined, { signal: controller.signal });
  const { request_id: id } = await server.waitFor(mark, "tool", (e) => e.name === "block");
  controller.abort("changed my mind");
  await assert.rejects(call);
  await server.waitFor(mark, "cancelled", (e) => e.request_id === id);
  await client.close();
});

test("send's per-message signal: an aborted one cancels its request, an answered one is let go", async () => {
  // The Vercel AI SDK's MCPTransport.send(message, {signal}): the host's only word of a cancel.
  const transport = new ResumeTransport(server.url, FAST);
  const answers = new Map();
  const waiting = new Map();
  transport.onmessage = (message) => {
    answers.set(message.id, message);
    waiting.get(message.id)?.(message);
  };
  const answer = (id) => answers.get(id) ?? new Promise((resolve) => waiting.set(id, resolve));
  await transport.start();
  await transport.send({
    jsonrpc: "2.0",
    id: 0,
    method: "initialize",
    params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "host", version: "1" } },
  });
  await answer(0);
  await transport.send({ jsonrpc: "2.0", method: "notifications/initialized" });
  const call = (id, name, signal) =>
    transport.send({ jsonrpc: "2.0", id, method: "tools/call", params: { name, arguments: { text: "hi" } } }, { signal });
  // Answered: nothing is left listening to its signal.
  const kept = new AbortController();
  await call(1, "echo", kept.signal);
  await answer(1);
  assert.equal(getEventListeners(kept.signal, "abort").length, 0);
  // Aborted while it runs: cancelled on the server, and never answered.
  let mark = server.mark();
  const running = new AbortController();
  await call(2, "block", running.signal);
  const { request_id: id } = await server.waitFor(mark, "tool", (e) => e.name === "block");
  running.abort("changed my mind");
  await server.waitFor(mark, "cancelled", (e) => e.request_id === id, 5000);
  // Aborted already: never run, or cancelled on the server.
  mark = server.mark();
  await call(3, "block", AbortSignal.abort("never mind"));
  await call(4, "echo");
  await answer(4);
  await new Promise((resolve) => setTimeout(resolve, 300));
  await server.synced(mark);
  for (const { request_id } of server.find(mark, "tool", (e) => e.name === "block")) {
    await server.waitFor(mark, "cancelled", (e) => e.request_id === request_id, 5000);
  }
  assert.equal(answers.has(2) || answers.has(3), false);
  await transport.close();
});

test("send's per-message signal takes a BigInt id as the integer it is: sent, answered, and let go", async () => {
  // JSON crosses as JSON.stringify writes it, a BigInt as its integer: with a signal too.
  const transport = new ResumeTransport(server.url, FAST);
  const answers = new Map();
  const waiting = new Map();
  transport.onmessage = (message) => {
    answers.set(JSON.stringify(message.id), message);
    waiting.get(JSON.stringify(message.id))?.(message);
  };
  const answer = (id) => answers.get(id) ?? new Promise((resolve) => waiting.set(id, resolve));
  await transport.start();
  await transport.send({
    jsonrpc: "2.0",
    id: 0,
    method: "initialize",
    params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "host", version: "1" } },
  });
  await answer("0");
  await transport.send({ jsonrpc: "2.0", method: "notifications/initialized" });
  // One within 2^53 and one past it, whose answer names it as the nearest number.
  for (const [id, text] of [[7n, "7"], [2n ** 70n, JSON.stringify(Number(2n ** 70n))]]) {
    const kept = new AbortController();
    await transport.send({ jsonrpc: "2.0", id, method: "tools/call", params: { name: "echo", arguments: { text: "hi" } } }, { signal: kept.signal });
    const answered = await answer(text);
    assert.equal(answered.result.content[0].text, "hi");
    // Answered: nothing is left listening to its signal.
    assert.equal(getEventListeners(kept.signal, "abort").length, 0, text);
  }
  await transport.close();
});

test("an interrupted call is an error naming its kind, never a success", async () => {
  const { client, transport } = await connected();
  const events = [];
  const collected = (async () => { for await (const e of transport.events()) events.push(e.type); })();
  const mark = server.mark();
  const call = client.callTool({ name: "block", arguments: {} });
  // Expected from the start: the call may fail before the admin request's own answer comes.
  const failed = assert.rejects(call, (e) => {
    assert.ok(e instanceof McpError);
    assert.equal(e.code, BRIDGE_ERROR_CODES.outcome_unknown);
    assert.equal(e.data.kind, "outcome_unknown");
    return true;
  });
  await server.waitFor(mark, "tool", (e) => e.name === "block");
  await server.admin("/admin/drop-sessions");
  await failed;
  // The re-initialization underneath is invisible to the host, which goes on.
  const echo = await client.callTool({ name: "echo", arguments: { text: "still here" } });
  assert.equal(echo.content[0].text, "still here");
  await server.waitFor(mark, "tool", (e) => e.arguments.text === "still here");
  await client.close();
  await collected;
  assert.ok(events.includes("reinitialized") && events.includes("outcome_unknown"), events.join());
  assert.equal(server.find(mark, "session_created").length, 1);
});

test("the server's sampling request reaches the SDK client's own handler", async () => {
  const client = new Client({ name: "host", version: "1" }, { capabilities: { sampling: {} } });
  client.setRequestHandler(CreateMessageRequestSchema, async (request) => ({
    role: "assistant",
    content: { type: "text", text: `echo ${request.params.messages[0].content.text}` },
    model: "host-model",
  }));
  await client.connect(new ResumeTransport(server.url));
  const mark = server.mark();
  const result = await client.callTool({ name: "sample", arguments: { prompt: "ping" } });
  assert.equal(result.content[0].text, "host-model: echo ping");
  assert.equal((await server.waitFor(mark, "sampled")).result.model, "host-model");
  await client.close();
});

test("a call interrupted by a server crash fails as outcome_unknown, ran once; the next call works", async () => {
  const crashing = await LoggingServer.v1OnFixedPort();
  try {
    const client = new Client({ name: "host", version: "1" });
    await client.connect(new ResumeTransport(crashing.url, FAST));
    const mark = crashing.mark();
    const failed = assert.rejects(client.callTool({ name: "block", arguments: {} }), (e) => {
      assert.ok(e instanceof McpError);
      assert.equal(e.code, BRIDGE_ERROR_CODES.outcome_unknown);
      return true;
    });
    await crashing.waitFor(mark, "tool", (e) => e.name === "block");
    await crashing.restart();
    await failed;
    const echo = await client.callTool({ name: "echo", arguments: { text: "after the restart" } });
    assert.equal(echo.content[0].text, "after the restart");
    await client.close();
    await crashing.synced(mark);
    assert.equal(crashing.find(mark, "http_in", (e) => e.tool === "block").length, 1);
  } finally {
    await crashing.stop();
  }
});

// Stock, for comparison (the README's framework table): the SDK's own transport, same crash.
test("stock: the SDK's own transport leaves a call interrupted by a server crash unanswered until its timeout, and keeps the dead session", async () => {
  const crashing = await LoggingServer.v1OnFixedPort();
  const client = new Client({ name: "host", version: "1" });
  try {
    await client.connect(new StreamableHTTPClientTransport(new URL(crashing.url)));
    const mark = crashing.mark();
    // Its resume is refused (404: the session died with the server) and it gives up without
    // failing the call: the request timeout (60 s by default) is the only end of the wait.
    const call = client.callTool({ name: "block", arguments: {} }, undefined, { timeout: 3000 });
    const failed = assert.rejects(call, (e) => {
      assert.ok(e instanceof McpError);
      assert.equal(e.code, ErrorCode.RequestTimeout);
      return true;
    });
    const restarted = await crashing.restartMidCall(mark);
    await failed;
    await assert.rejects(
      client.callTool({ name: "echo", arguments: { text: "after the restart" } }),
      /Session not found/,
    );
    await crashing.synced(restarted);
    // Never sent again; ran once.
    assert.equal(crashing.find(restarted, "http_in", (e) => e.tool === "block").length, 0);
    assert.equal(crashing.find(0, "tool", (e) => e.name === "block").length, 1);
  } finally {
    await client.close().catch(() => {});
    await crashing.stop();
  }
});

test("a DELETE the server fails goes to onerror, and close() still closes", async () => {
  // A minimal legacy server whose sessions cannot be ended: DELETE answers 500.
  const deletes = [];
  const failing = createServer((req, res) => {
    if (req.method === "DELETE") {
      deletes.push(req.headers["mcp-session-id"]);
      res.writeHead(500).end();
      return;
    }
    if (req.method !== "POST") {
      res.writeHead(405).end();
      return;
    }
    let body = "";
    req.on("data", (chunk) => (body += chunk));
    req.on("end", () => {
      const message = JSON.parse(body);
      if (message.id === undefined) {
        res.writeHead(202).end();
        return;
      }
      const result = message.method === "initialize"
        ? { protocolVersion: "2025-06-18", capabilities: {}, serverInfo: { name: "failing", version: "1" } }
        : {};
      res.writeHead(200, { "content-type": "application/json", "mcp-session-id": "s-1" });
      res.end(JSON.stringify({ jsonrpc: "2.0", id: message.id, result }));
    });
  });
  failing.listen(0, "127.0.0.1");
  await once(failing, "listening");
  try {
    const client = new Client({ name: "host", version: "1" });
    const transport = new ResumeTransport(`http://127.0.0.1:${failing.address().port}/mcp`, FAST);
    const errors = [];
    let closed = 0;
    await client.connect(transport);
    transport.onerror = (error) => errors.push(error);
    const onclose = transport.onclose;
    transport.onclose = () => {
      closed += 1;
      onclose?.();
    };
    await client.close();
    assert.deepEqual(deletes, ["s-1"]);
    assert.equal(errors.length, 1);
    assert.match(String(errors[0]), /DELETE/);
    assert.equal(closed, 1);
  } finally {
    failing.close();
  }
});

test("a call answered with a result that is no object fails at once as protocol, mayHaveRun, never the SDK's timeout", async () => {
  // A minimal legacy server answering every tools/call with a bare JSON value: the SDK's Client
  // cannot classify such an answer, and would wait for its own request timeout.
  const answers = [null, "ok", 5, []];
  const calls = [];
  const scripted = createServer((req, res) => {
    if (req.method !== "POST") {
      res.writeHead(req.method === "DELETE" ? 200 : 405).end();
      return;
    }
    let body = "";
    req.on("data", (chunk) => (body += chunk));
    req.on("end", () => {
      const message = JSON.parse(body);
      if (message.id === undefined) {
        res.writeHead(202).end();
        return;
      }
      let result = {};
      if (message.method === "initialize") {
        result = { protocolVersion: "2025-06-18", capabilities: { tools: {} }, serverInfo: { name: "bare", version: "1" } };
      } else if (message.method === "tools/call") {
        calls.push(message.params.name);
        result = message.params.name === "fine" ? { content: [] } : answers[Number(message.params.name)];
      }
      res.writeHead(200, { "content-type": "application/json", "mcp-session-id": "s-1" });
      res.end(JSON.stringify({ jsonrpc: "2.0", id: message.id, result }));
    });
  });
  scripted.listen(0, "127.0.0.1");
  await once(scripted, "listening");
  try {
    const client = new Client({ name: "host", version: "1" });
    const url = `http://127.0.0.1:${scripted.address().port}/mcp`;
    await client.connect(new ResumeTransport(url, { ...FAST, callTimeout: 120_000 }));
    for (const [index, answer] of answers.entries()) {
      // The SDK's own timeout is the test's bound: a hang ends as its -32001, not as this.
      const call = client.callTool({ name: String(index), arguments: {} }, undefined, { timeout: 20_000 });
      await assert.rejects(call, (e) => {
        assert.ok(e instanceof McpError, `${JSON.stringify(answer)}: ${e}`);
        assert.equal(e.code, BRIDGE_ERROR_CODES.protocol, `${JSON.stringify(answer)}: ${e}`);
        assert.equal(e.data.kind, "protocol");
        assert.equal(e.data.mayHaveRun, true);
        return true;
      });
    }
    assert.deepEqual(calls, ["0", "1", "2", "3"]);
    const fine = await client.callTool({ name: "fine", arguments: {} });
    assert.deepEqual(fine.content, []);
    await client.close();
  } finally {
    scripted.close();
  }
});

/** Records every unhandled rejection until `stop()`; none must come from the transport. */
function unhandledRejections() {
  const seen = [];
  const record = (reason) => seen.push(reason);
  process.on("unhandledRejection", record);
  return {
    seen,
    async stop() {
      // Node reports an unhandled rejection once the microtasks of its tick ran.
      await new Promise((resolve) => setTimeout(resolve, 50));
      process.off("unhandledRejection", record);
      return seen;
    },
  };
}

test("a host onclose that throws makes close() reject with its error, and no rejection goes unhandled", async () => {
  const rejections = unhandledRejections();
  const { client } = await connected();
  client.onclose = () => {
    throw new Error("app bug in onclose");
  };
  await assert.rejects(client.close(), /app bug in onclose/);
  assert.deepEqual(await rejections.stop(), []);
});

test("a host onerror that throws is contained: delivery goes on and the session closes", async () => {
  const rejections = unhandledRejections();
  const warnings = [];
  const warned = (warning) => warnings.push(warning);
  process.on("warning", warned);
  try {
    const { client, transport } = await connected();
    const onmessage = transport.onmessage;
    let failures = 1;
    transport.onmessage = (message) => {
      onmessage?.(message);
      if (failures-- > 0) throw new Error("app bug in onmessage");
    };
    const errors = [];
    transport.onerror = (error) => {
      errors.push(error);
      throw new Error("app bug in onerror");
    };
    const first = await client.callTool({ name: "echo", arguments: { text: "one" } });
    assert.equal(first.content[0].text, "one");
    // Delivered after onmessage then onerror threw: the loop still runs.
    const second = await client.callTool({ name: "echo", arguments: { text: "two" } });
    assert.equal(second.content[0].text, "two");
    const mark = server.mark();
    await client.close();
    // The session ended with the transport: onerror throwing did not stop its delivery loop.
    await server.waitFor(mark, "http_in", (e) => e.method === "DELETE");
    assert.deepEqual(errors.map((e) => e.message), ["app bug in onmessage"]);
    assert.ok(warnings.some((w) => /app bug in onerror/.test(String(w.message))), warnings.join());
  } finally {
    process.off("warning", warned);
  }
  assert.deepEqual(await rejections.stop(), []);
});

test("a host onmessage that rejects (an async one) goes to onerror, never an unhandled rejection, and delivery goes on", async () => {
  const rejections = unhandledRejections();
  const { client, transport } = await connected();
  const onmessage = transport.onmessage;
  let failures = 1;
  transport.onmessage = async (message) => {
    onmessage?.(message);
    await null;
    if (failures-- > 0) throw new Error("app bug in an async onmessage");
  };
  const errors = [];
  transport.onerror = (error) => errors.push(error);
  const first = await client.callTool({ name: "echo", arguments: { text: "one" } });
  assert.equal(first.content[0].text, "one");
  const second = await client.callTool({ name: "echo", arguments: { text: "two" } });
  assert.equal(second.content[0].text, "two");
  await client.close();
  assert.deepEqual(errors.map((e) => e.message), ["app bug in an async onmessage"]);
  assert.deepEqual(await rejections.stop(), []);
});

test("a host's async onclose and onerror that reject are contained: to onerror, then a warning, never an unhandled rejection, close() never waiting for them", async () => {
  const rejections = unhandledRejections();
  const warnings = [];
  const warned = (warning) => warnings.push(warning);
  process.on("warning", warned);
  try {
    const { client, transport } = await connected();
    transport.onerror = async () => {
      throw new Error("app bug in an async onerror");
    };
    const onmessage = transport.onmessage;
    let failures = 1;
    transport.onmessage = (message) => {
      onmessage?.(message);
      if (failures-- > 0) throw new Error("app bug in onmessage");
    };
    assert.equal((await client.callTool({ name: "echo", arguments: { text: "one" } })).content[0].text, "one");
    await client.close();
    // onclose as the transport's own host sets it (a host client's wraps its own): called by
    // the delivery loop once started, by close() itself when never started.
    for (const started of [true, false]) {
      const bare = new ResumeTransport(server.url, FAST);
      const reported = new Promise((resolve) => {
        bare.onerror = resolve;
      });
      bare.onclose = async () => {
        throw new Error(`app bug in an async onclose (started: ${started})`);
      };
      if (started) await bare.start();
      await bare.close();
      assert.match(String(await reported), new RegExp(`app bug in an async onclose \\(started: ${started}\\)`));
      // One that never settles holds nothing.
      const stuck = new ResumeTransport(server.url, FAST);
      stuck.onclose = () => new Promise(() => {});
      if (started) await stuck.start();
      await stuck.close();
    }
    assert.ok(warnings.some((w) => /app bug in an async onerror/.test(String(w.message))), warnings.join());
  } finally {
    process.off("warning", warned);
  }
  assert.deepEqual(await rejections.stop(), []);
});
