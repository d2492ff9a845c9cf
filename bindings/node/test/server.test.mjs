// ResumeSafety, the guard for Node MCP servers: its plumbing, and a TypeScript SDK 1.32
// deployment under it.
//
// The rules are the Rust guard's and are tested there; here, what the skin itself must do:
// pass what it does not guard, keep streams streaming, never block the event loop on the
// store, read its options onto the guard's builder. Then the SDK's StreamableHTTPServerTransport
// under Express (one transport per session, as the SDK's examples) as three Node replicas
// behind nginx on one Redis, with the faults of the Rust real-parts tests (a cut response, a
// rolling restart, `kill -9` mid-call) and two clients (mcp-resume's own, and the SDK's Client
// over ResumeTransport); the truth is the tool's own counters in Redis.
//
// The default run covers the SSE server guarded and unguarded; MCP_RESUME_FULL_MATRIX=1 adds
// the JSON-answering one both ways. The tables of the README are printed as test diagnostics.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { once } from "node:events";
import { createReadStream } from "node:fs";
import { Agent, createServer, request as httpRequest } from "node:http";
import { createConnection } from "node:net";
import { pipeline } from "node:stream";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { Client as SdkClient } from "@modelcontextprotocol/sdk/client/index.js";
import { McpError } from "@modelcontextprotocol/sdk/types.js";
import express from "express";
import { Client, IDEMPOTENCY_META_KEY, InvalidConfigError, OutcomeUnknownError, ResumeSafety, ResumeTransport } from "../index.js";
import { NativeGuard } from "../lib/native.js";
import { Deployment, Redis, Replica } from "./support/deployment.mjs";
import { onHeaders } from "./support/on-headers-1.0.2.mjs";

let redis;
before(async () => {
  redis = await Redis.start();
});
after(() => redis.stop());

// ---------------------------------------------------------------------------------------------
// The plumbing.

async function connected(url) {
  const client = new Client(url, { era: "legacy", openListenStream: false, callTimeout: 10000 });
  await client.connect();
  return client;
}

test("a stream reaches the client as it comes", { timeout: 30000 }, async () => {
  const replica = await Replica.start("--port", "0", "--store", "memory");
  try {
    const client = await connected(replica.url);
    const notes = client.notifications()[Symbol.asyncIterator]();
    const call = client.callTool("step", {}, { progressToken: "p-1" });
    let done = false;
    call.then(() => (done = true));
    // The progress event arrives while the tool still waits: the guard forwarded it as it
    // came, not with the rest of the stream.
    const { value: note } = await notes.next();
    assert.equal(note.method, "notifications/progress");
    assert.equal(done, false);
    await fetch(replica.url.replace(/\/mcp$/, "/admin/release"), { method: "POST" });
    assert.equal((await call).content[0].text, "done");
    await client.close();
  } finally {
    await replica.stop();
  }
});

/** Initializes a session on `url` by hand (2025-06-18): the headers of its requests. */
async function openSession(url) {
  const headers = { "content-type": "application/json", accept: "application/json, text/event-stream" };
  const init = await fetch(url, {
    method: "POST",
    headers,
    body: JSON.stringify({ jsonrpc: "2.0", id: 0, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "t", version: "1" } } }),
  });
  const session = init.headers.get("mcp-session-id");
  await init.text();
  const sessionHeaders = { ...headers, "mcp-session-id": session, "mcp-protocol-version": "2025-06-18" };
  await (await fetch(url, { method: "POST", headers: sessionHeaders, body: JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }) })).text();
  return sessionHeaders;
}

test("a stream's head reaches the client before its first event", { timeout: 30000 }, async () => {
  const replica = await Replica.start("--port", "0", "--store", "memory");
  try {
    const sessionHeaders = await openSession(replica.url);
    // The session's own stream carries no event until the server has something to say; the
    // handler flushed its head, and the guard lets it go at once instead of holding it for
    // the first event.
    const listen = new AbortController();
    const stream = await fetch(replica.url, { headers: { ...sessionHeaders, accept: "text/event-stream" }, signal: AbortSignal.any([listen.signal, AbortSignal.timeout(5000)]) });
    assert.equal(stream.status, 200);
    assert.equal(stream.headers.get("content-type"), "text/event-stream");
    assert.ok(stream.headers.get("mcp-capability-hash"));
    listen.abort();
  } finally {
    await replica.stop();
  }
});

/** Reads an SSE response until `done(text so far)`; the text. */
async function readUntil(response, done) {
  const decoder = new TextDecoder();
  let text = "";
  for await (const chunk of response.body) {
    text += decoder.decode(chunk, { stream: true });
    if (done(text)) break;
  }
  return text;
}

test("a resume reaches the inner server with the event id it issued when that id is not ASCII", { timeout: 30000 }, async () => {
  // The SDK's event store issues `é1`, `é2`, …: sent in the stream as UTF-8, taken by the
  // guard as bytes, and due back to the store as the string it issued, or it knows no such
  // event and the resumed stream stays open with nothing in it.
  const replica = await Replica.start("--port", "0", "--store", "memory", "--event-id-prefix", "é");
  try {
    const sessionHeaders = await openSession(replica.url);
    const call = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "step", arguments: {}, _meta: { progressToken: "p-1" } } });
    const cut = new AbortController();
    const stream = await fetch(replica.url, { method: "POST", headers: sessionHeaders, body: call, signal: AbortSignal.any([cut.signal, AbortSignal.timeout(5000)]) });
    const progress = await readUntil(stream, (text) => /notifications\/progress.*\n\n/s.test(text));
    const cursor = progress.match(/^id: (.+)$/m)?.[1];
    assert.match(cursor ?? "", /^[0-9a-f]+-\d+$/, progress);
    cut.abort();
    await fetch(replica.url.replace(/\/mcp$/, "/admin/release"), { method: "POST" });
    const resumed = await fetch(replica.url, {
      headers: { ...sessionHeaders, accept: "text/event-stream", "last-event-id": cursor },
      signal: AbortSignal.timeout(5000),
    });
    assert.equal(resumed.status, 200, resumed.status === 200 ? "" : await resumed.text());
    const replay = await readUntil(resumed, (text) => text.includes('"text":"done"'));
    assert.ok(replay.includes('"text":"done"'), replay);
    // `é1` was the initialize's answer; the progress, the session's second event.
    assert.deepEqual(await (await fetch(replica.url.replace(/\/mcp$/, "/admin/replays"))).json(), ["é2"]);
  } finally {
    await replica.stop();
  }
});

test("what it does not guard passes", { timeout: 30000 }, async () => {
  const replica = await Replica.start("--port", "0", "--store", "memory", "--max-body", "1024");
  try {
    // Another route of the app.
    const health = await fetch(replica.url.replace(/\/mcp$/, "/health"));
    assert.equal(await health.text(), "ok");
    assert.equal(health.headers.get("mcp-capability-hash"), null);
    const client = await connected(replica.url);
    // A body over the bound is not read by the guard: it passes to the handler as it is.
    const long = "x".repeat(4096);
    assert.equal((await client.callTool("echo", { text: long })).content[0].text, long);
    // A keyed call that long cannot be guarded: refused, not run unguarded.
    await assert.rejects(client.callTool("echo", { text: long }, { idempotencyKey: "k-long" }), /guard|413/);
    await client.close();
    // Keyed in its body only: what was read of it names the key, so it is refused too.
    const call = { jsonrpc: "2.0", id: 7, method: "tools/call", params: {
      _meta: { [IDEMPOTENCY_META_KEY]: "k-body" }, name: "echo", arguments: { text: long } } };
    const answer = await fetch(replica.url, { method: "POST", body: JSON.stringify(call),
      headers: { "content-type": "application/json", accept: "application/json, text/event-stream" } });
    assert.equal(answer.status, 413, await answer.text());
  } finally {
    await replica.stop();
  }
});

test("middleware in front that replaced the response's methods stays behind the guard", { timeout: 30000 }, async () => {
  const replica = await Replica.start("--port", "0", "--store", "memory", "--tee");
  try {
    const client = await connected(replica.url);
    assert.equal((await client.callTool("echo", { text: "teed" })).content[0].text, "teed");
    await client.close();
    // What the middleware's own `end` sent is the guard's rewriting (sequenced ids), once.
    const teed = await (await fetch(replica.url.replace(/\/mcp$/, "/admin/tee"))).text();
    assert.match(teed, /^id: [0-9a-f]+-\d+$/m, teed);
    assert.equal(teed.match(/"text":"teed"/g)?.length, 1, teed);
  } finally {
    await replica.stop();
  }
});

test("node:http behind wrap: the guard reads the body and hands it on", { timeout: 30000 }, async () => {
  // No body parser in front: the guard reads each POST body itself.
  const replica = await Replica.start("--port", "0", "--plain", "--redis", redis.url, "--store", "memory", "--max-body", "1024");
  try {
    const client = await connected(replica.url);
    const tag = `plain-${randomUUID()}`;
    const key = `k-${tag}`;
    // A keyed call made twice (a re-send): run once, the second answered from the first.
    const first = await client.callTool("bump", { tag }, { idempotencyKey: key });
    const again = await client.callTool("bump", { tag }, { idempotencyKey: key });
    assert.equal(first.content[0].text, `${tag}:1`);
    assert.equal(again.content[0].text, `${tag}:1`);
    assert.equal(Number(await redis.command("GET", `effects:${tag}`)), 1);
    // A body over the bound is left unread, what was read put back: the handler reads it whole.
    const long = "y".repeat(4096);
    assert.equal((await client.callTool("echo", { text: long })).content[0].text, long);
    await client.close();
  } finally {
    await replica.stop();
  }
});

test("a body over the bound reaches a handler that reads it by its data events", { timeout: 10000 }, async () => {
  // As a classic handler or express.json() behind the guard reads it.
  const server = createServer(
    new ResumeSafety({ maxBody: 1024 }).wrap((req, res) => {
      let size = 0;
      req.on("data", (chunk) => (size += chunk.length));
      req.on("end", () => res.end(String(size)));
    }),
  );
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  try {
    const answer = await fetch(`http://127.0.0.1:${server.address().port}/`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ text: "z".repeat(4096 - 11) }),
      signal: AbortSignal.timeout(5000),
    });
    assert.equal(await answer.text(), "4096");
  } finally {
    server.closeAllConnections();
    server.close();
  }
});

test("a body that is not JSON reaches a handler that reads it by its data events", { timeout: 10000 }, async () => {
  // The guard read it whole (under the bound) and could not hand it on parsed.
  const server = createServer(
    new ResumeSafety({ maxBody: 1024 }).wrap((req, res) => {
      const chunks = [];
      req.on("data", (chunk) => chunks.push(chunk));
      req.on("end", () => res.end(`${req.body === undefined} ${Buffer.concat(chunks)}`));
    }),
  );
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  try {
    for (const body of ["not json", "{\"cut\": ", "x".repeat(1000)]) {
      const answer = await fetch(`http://127.0.0.1:${server.address().port}/`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body,
        signal: AbortSignal.timeout(5000),
      });
      assert.equal(await answer.text(), `true ${body}`);
    }
  } finally {
    server.closeAllConnections();
    server.close();
  }
});

/** Serves `handler` on 127.0.0.1 (a free port); its base URL and the server. */
async function serve(handler) {
  const server = createServer(handler);
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return { url: `http://127.0.0.1:${server.address().port}/mcp`, server };
}

function shut(server) {
  server.closeAllConnections();
  server.close();
}

const MCP_HEADERS = { "content-type": "application/json", accept: "application/json, text/event-stream" };

const INITIALIZE = JSON.stringify({ jsonrpc: "2.0", id: 0, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "t", version: "1" } } });

/** An initialize's answer, as an SSE stream with its session id. */
function answerInitialize(req, res) {
  res.writeHead(200, { "content-type": "text/event-stream", "mcp-session-id": "s-on-headers" });
  const result = { protocolVersion: "2025-06-18", capabilities: {}, serverInfo: { name: "t", version: "1" } };
  res.end(`event: message\ndata: ${JSON.stringify({ jsonrpc: "2.0", id: req.body.id, result })}\n\n`);
}

test("a body read in front and not left in req.body is refused, not taken for an empty one", { timeout: 30000 }, async () => {
  // As Koa's bodyparser (the body in ctx.request.body) or a handler that drains the request
  // into a field of its own: the guard cannot see a key in `_meta`, so it must not forward.
  let runs = 0;
  const handler = (req, res) => {
    runs += 1;
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ jsonrpc: "2.0", id: 1, result: { content: [{ type: "text", text: "ran" }] } }));
  };
  const safety = new ResumeSafety();
  const wrapped = safety.wrap(handler);
  const nextErrors = [];
  const { url, server } = await serve((req, res) => {
    const chunks = [];
    req.on("data", (chunk) => chunks.push(chunk));
    req.on("end", () => {
      req.rawJson = Buffer.concat(chunks).toString("utf8");
      if (req.url === "/mcp") return wrapped(req, res);
      safety.middleware()(req, res, (error) => {
        if (error) {
          nextErrors.push(error.message);
          res.statusCode = 500;
          res.end();
        } else {
          handler(req, res);
        }
      });
    });
  });
  const logged = [];
  const consoleError = console.error;
  console.error = (error) => logged.push(String(error?.message ?? error));
  try {
    const call = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { _meta: { [IDEMPOTENCY_META_KEY]: `k-${randomUUID()}` }, name: "bump", arguments: {} } });
    for (const at of [url, url, `${url}-middleware`, `${url}-middleware`]) {
      const answer = await fetch(at, { method: "POST", headers: MCP_HEADERS, body: call, signal: AbortSignal.timeout(5000) });
      assert.equal(answer.status, 500, await answer.text());
    }
    assert.equal(runs, 0);
    assert.equal(logged.length, 2);
    assert.equal(nextErrors.length, 2);
    for (const message of [...logged, ...nextErrors]) assert.match(message, /req\.body/);
    // An empty body is still one, read in front or not.
    for (const at of [url, `${url}-middleware`]) {
      const empty = await fetch(at, { method: "POST", headers: MCP_HEADERS, signal: AbortSignal.timeout(5000) });
      assert.equal(empty.status, 200, await empty.text());
    }
    assert.equal(runs, 2);
  } finally {
    console.error = consoleError;
    shut(server);
  }
});

test("middleware in front on old on-headers (a writeHead reading headers as pairs) gets whole headers", { timeout: 30000 }, async () => {
  // morgan <= 1.10.0, express-session <= 1.18.1, compression <= 1.8.0, response-time: their
  // `writeHead` sets an array of headers as [name, value] pairs and passes the status on.
  const guard = new ResumeSafety({ store: redis.url });
  const { url, server } = await serve((req, res) => {
    onHeaders(res, () => res.setHeader("x-response-time", "1ms"));
    guard.middleware()(req, res, (error) => {
      if (error) {
        res.statusCode = 500;
        res.end(String(error));
      } else {
        answerInitialize(req, res);
      }
    });
  });
  try {
    // The handler's head, as the guard let it go.
    const init = await fetch(url, { method: "POST", headers: MCP_HEADERS, body: INITIALIZE, signal: AbortSignal.timeout(5000) });
    const text = await init.text();
    assert.equal(init.status, 200, text);
    assert.equal(init.headers.get("content-type"), "text/event-stream");
    assert.equal(init.headers.get("mcp-session-id"), "s-on-headers");
    assert.equal(init.headers.get("x-response-time"), "1ms");
    assert.match(text, /"serverInfo"/);
    // The guard's own answer: a keyed call while the store cannot answer (its writes wait
    // past the store's response timeout) is refused 503 with a one-character Retry-After.
    const call = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { _meta: { [IDEMPOTENCY_META_KEY]: `k-${randomUUID()}` }, name: "echo", arguments: {} } });
    await redis.command("CLIENT", "PAUSE", "3000", "WRITE");
    let refused;
    try {
      refused = await fetch(url, { method: "POST", headers: MCP_HEADERS, body: call, signal: AbortSignal.timeout(5000) });
    } finally {
      await redis.command("CLIENT", "UNPAUSE");
    }
    const refusal = await refused.text();
    assert.equal(refused.status, 503, refusal);
    assert.equal(refused.headers.get("retry-after"), "1");
    assert.equal(refused.headers.get("content-type"), "application/json");
  } finally {
    shut(server);
  }
});

test("a head Node would refuse throws to the handler, and the server answers on", { timeout: 30000 }, async () => {
  const caught = [];
  const { url, server } = await serve(
    new ResumeSafety().wrap((req, res) => {
      if (req.body.method === "initialize") return answerInitialize(req, res);
      const { id, params } = req.body;
      const bad = params.arguments.bad;
      const answerWith = (text) => `event: message\ndata: ${JSON.stringify({ jsonrpc: "2.0", id, result: { content: [{ type: "text", text }] } })}\n\n`;
      if (bad === "value") {
        // A character above U+00FF: Node's writeHead throws ERR_INVALID_CHAR to its caller.
        try {
          res.writeHead(200, { "content-type": "text/event-stream", "x-note": "naïve ☕" });
        } catch (error) {
          caught.push(error.code);
          res.writeHead(200, { "content-type": "text/event-stream" });
        }
        res.end(answerWith("refused"));
      } else if (bad === "status") {
        try {
          res.writeHead(/** @type {any} */ ("two hundred"), { "content-type": "text/event-stream" });
        } catch (error) {
          caught.push(error.code);
          res.writeHead(200, { "content-type": "text/event-stream" });
        }
        res.end(answerWith("refused"));
      } else if (bad === "uncaught") {
        // Not caught by the handler: it fails, as it would without the guard.
        res.writeHead(200, { "content-type": "text/event-stream", "x-note": "naïve ☕" });
        res.end(answerWith("sent"));
      } else {
        res.writeHead(200, { "content-type": "text/event-stream" });
        res.end(answerWith("fine"));
      }
    }),
  );
  let headers;
  const call = (bad, key) =>
    fetch(url, {
      method: "POST",
      headers,
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { ...(key ? { _meta: { [IDEMPOTENCY_META_KEY]: key } } : {}), name: "t", arguments: { bad } } }),
      signal: AbortSignal.timeout(5000),
    });
  try {
    // Calls of a session, unkeyed and keyed: the guard routes both responses.
    const init = await fetch(url, { method: "POST", headers: MCP_HEADERS, body: INITIALIZE, signal: AbortSignal.timeout(5000) });
    await init.text();
    headers = { ...MCP_HEADERS, "mcp-session-id": init.headers.get("mcp-session-id"), "mcp-protocol-version": "2025-06-18" };
    for (const key of [undefined, `k-${randomUUID()}`]) {
      for (const bad of ["value", "status"]) {
        const answer = await call(bad, key && `${key}-${bad}`);
        assert.match(await answer.text(), /"text":"refused"/, `${bad} ${key}`);
      }
      const failed = await call("uncaught", key && `${key}-uncaught`).then(async (r) => `${r.status} ${await r.text()}`, (error) => String(error));
      assert.doesNotMatch(failed, /"text":"sent"/);
      assert.match(await (await call("none", key && `${key}-none`)).text(), /"text":"fine"/);
    }
    assert.deepEqual(caught, ["ERR_INVALID_CHAR", "ERR_HTTP_INVALID_STATUS_CODE", "ERR_INVALID_CHAR", "ERR_HTTP_INVALID_STATUS_CODE"]);
  } finally {
    shut(server);
  }
});

test("a head given as a flat list keeps its repeated names, and writeHead(status, undefined, headers) its headers", { timeout: 30000 }, async () => {
  const { url, server } = await serve(
    new ResumeSafety().wrap((req, res) => {
      if (req.body.method === "initialize") return answerInitialize(req, res);
      res.setHeader("x-set-before", "kept");
      res.setHeader("set-cookie", "replaced=1");
      if (req.body.params.arguments.form === "flat") {
        res.writeHead(200, ["content-type", "text/event-stream", "set-cookie", "a=1", "Set-Cookie", "b=2"]);
      } else {
        res.writeHead(200, undefined, { "content-type": "text/event-stream", "x-given": "third" });
      }
      res.end(`event: message\ndata: ${JSON.stringify({ jsonrpc: "2.0", id: req.body.id, result: { content: [{ type: "text", text: "ok" }] } })}\n\n`);
    }),
  );
  try {
    const init = await fetch(url, { method: "POST", headers: MCP_HEADERS, body: INITIALIZE, signal: AbortSignal.timeout(5000) });
    await init.text();
    const headers = { ...MCP_HEADERS, "mcp-session-id": init.headers.get("mcp-session-id"), "mcp-protocol-version": "2025-06-18" };
    const call = async (form) => {
      const answer = await fetch(url, {
        method: "POST",
        headers,
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "t", arguments: { form } } }),
        signal: AbortSignal.timeout(5000),
      });
      assert.match(await answer.text(), /"text":"ok"/);
      return answer.headers;
    };
    const flat = await call("flat");
    assert.deepEqual(flat.getSetCookie(), ["a=1", "b=2"]);
    assert.equal(flat.get("x-set-before"), "kept");
    assert.equal(flat.get("content-type"), "text/event-stream");
    const third = await call("third");
    assert.equal(third.get("x-given"), "third");
    assert.equal(third.get("content-type"), "text/event-stream");
    assert.deepEqual(third.getSetCookie(), ["replaced=1"]);
  } finally {
    shut(server);
  }
});

test("what fails sending a guarded response destroys that response alone", { timeout: 30000 }, async () => {
  // Middleware in front whose `writeHead` throws (its on-headers listener failed): the guard
  // calls it at the end of a turn (a stream's head) or once the store answered (a keyed
  // call's), where nobody hears a throw.
  const guard = new ResumeSafety({ store: redis.url });
  let lateEnded;
  const lateEnd = new Promise((resolve) => (lateEnded = resolve));
  const { url, server } = await serve((req, res) => {
    onHeaders(res, () => {
      if (req.headers["x-fail"]) throw new Error("the listener failed");
    });
    guard.middleware()(req, res, (error) => {
      if (error) {
        res.statusCode = 500;
        res.end();
      } else if (req.body.method === "initialize") {
        answerInitialize(req, res);
      } else {
        const event = `event: message\ndata: ${JSON.stringify({ jsonrpc: "2.0", id: req.body.id, result: { content: [{ type: "text", text: "sent" }] } })}\n\n`;
        res.writeHead(200, { "content-type": "text/event-stream" });
        if (req.headers["x-later"]) {
          res.write(event);
          setTimeout(() => {
            try {
              res.end();
            } finally {
              lateEnded();
            }
          }, 50);
        } else {
          res.end(event);
        }
      }
    });
  });
  try {
    const init = await fetch(url, { method: "POST", headers: MCP_HEADERS, body: INITIALIZE, signal: AbortSignal.timeout(5000) });
    await init.text();
    const headers = { ...MCP_HEADERS, "mcp-session-id": init.headers.get("mcp-session-id"), "mcp-protocol-version": "2025-06-18" };
    const call = (more, key) =>
      fetch(url, {
        method: "POST",
        headers: { ...headers, ...more },
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { ...(key ? { _meta: { [IDEMPOTENCY_META_KEY]: key } } : {}), name: "t", arguments: {} } }),
        signal: AbortSignal.timeout(5000),
      }).then(async (r) => `${r.status} ${await r.text()}`);
    await assert.rejects(call({ "x-fail": "1", "x-later": "1" }), /fetch failed|terminated|other side closed/);
    await assert.rejects(call({ "x-fail": "1" }, `k-${randomUUID()}`), /fetch failed|terminated|other side closed/);
    await lateEnd; // the handler's late end
    assert.match(await call({}), /"text":"sent"/);
    assert.match(await call({}, `k-${randomUUID()}`), /"text":"sent"/);
  } finally {
    shut(server);
  }
});

test("the event loop runs while the store is slow", { timeout: 30000 }, async () => {
  const replica = await Replica.start("--port", "0", "--redis", redis.url);
  try {
    const client = await connected(replica.url);
    await client.callTool("echo", { text: "warm" });
    // Writes (a claim is one) wait in Redis from now on, for less than the store's response
    // timeout (1 s; longer, and the claim would fail and the call be refused instead of
    // waiting); the replica's event loop must not wait with them.
    await redis.command("CLIENT", "PAUSE", "900", "WRITE");
    let keyedDone = false;
    const keyed = client.callTool("echo", { text: "keyed" }, { idempotencyKey: `k-slow-${randomUUID()}` });
    keyed.then(() => (keyedDone = true));
    const claimWaits = async () => /^blocked_clients:[1-9]/m.test(await redis.command("INFO", "clients"));
    await until("the keyed call's claim to wait in Redis", claimWaits);
    // An unkeyed call of the same session (no store step) is answered while the keyed one's
    // claim still waits in Redis: a loop blocked on the claim would answer it only after.
    assert.equal((await client.callTool("echo", { text: "meanwhile" })).content[0].text, "meanwhile");
    assert.ok(await claimWaits(), "the keyed call's claim no longer waited in Redis when the unkeyed call was answered");
    assert.equal(keyedDone, false);
    assert.equal((await keyed).content[0].text, "keyed");
    await client.close();
  } finally {
    await replica.stop();
  }
});

/** Polls `condition` (async) until it holds; fails after `ms`. */
async function until(what, condition, ms = 10000) {
  const deadline = Date.now() + ms;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

test("a keyed call whose client left before its handler ran is stored for the re-send", { timeout: 30000 }, async () => {
  const replica = await Replica.start("--port", "0", "--redis", redis.url);
  try {
    const sessionHeaders = await openSession(replica.url);
    const tag = `left-${randomUUID()}`;
    const key = `k-${tag}`;
    const call = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { _meta: { [IDEMPOTENCY_META_KEY]: key }, name: "bump", arguments: { tag } } });
    // The call's claim waits in Redis (writes are paused) while its client leaves: its
    // handler runs on a response whose client is gone.
    await redis.command("CLIENT", "PAUSE", "20000", "WRITE");
    try {
      const { hostname, port } = new URL(replica.url);
      const socket = createConnection(Number(port), hostname);
      await once(socket, "connect");
      const head = Object.entries({ ...sessionHeaders, host: `${hostname}:${port}`, "content-length": Buffer.byteLength(call) })
        .map(([name, value]) => `${name}: ${value}\r\n`)
        .join("");
      socket.write(`POST /mcp HTTP/1.1\r\n${head}\r\n${call}`);
      await until("the claim to wait in Redis", async () => /^blocked_clients:[1-9]/m.test(await redis.command("INFO", "clients")));
      // The client half-closes; the server ends its side once it has seen that (the
      // response is then destroyed), before the claim can be answered.
      socket.resume();
      socket.end();
      await once(socket, "end");
      socket.destroy();
    } finally {
      await redis.command("CLIENT", "UNPAUSE");
    }
    // The tool runs to its end, and its answer is stored: the client's re-send (on its
    // session: the answer is its negotiated context's) gets it.
    await until("the tool to finish", async () => Number(await redis.command("GET", `done:${tag}`)) === 1);
    // Until the answer is stored, a re-send is told the call is still running.
    let again;
    await until("the answer to be stored", async () => {
      again = await (await fetch(replica.url, { method: "POST", headers: sessionHeaders, body: call })).text();
      return !again.includes("IDEMPOTENCY_KEY_IN_USE");
    });
    assert.ok(again.includes(`"text":"${tag}:1"`), again);
    assert.equal(Number(await redis.command("GET", `effects:${tag}`)), 1);
  } finally {
    await replica.stop();
  }
});

test("a keyed call whose connection dropped while its answer was backed up is stored", { timeout: 10000 }, async () => {
  let runs = 0;
  let ended;
  const handlerEnded = new Promise((resolve) => (ended = resolve));
  let backedUp;
  const isBackedUp = new Promise((resolve) => (backedUp = resolve));
  const server = createServer(
    new ResumeSafety().wrap(async (req, res) => {
      runs++;
      res.writeHead(200, { "content-type": "text/event-stream" });
      const filler = `: ${"x".repeat(64 * 1024)}\n\n`;
      for (let n = 0; ; n++) {
        assert.ok(n < 100, "the response never backed up");
        if (res.write(filler)) continue;
        if (!res.writableNeedDrain) {
          await once(res, "drain"); // the guard's own step waited
          continue;
        }
        // Backed up in the client's connection, which drops (below): it never drains.
        backedUp();
        break;
      }
      // As a handler streaming with backpressure does (the TypeScript SDK's transport).
      await once(res, "drain");
      res.end(`event: message\ndata: ${JSON.stringify({ jsonrpc: "2.0", id: req.body.id, result: { content: [{ type: "text", text: "ran" }] } })}\n\n`);
      ended();
    }),
  );
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  try {
    const { port } = server.address();
    const url = `http://127.0.0.1:${port}/mcp`;
    const headers = { "content-type": "application/json", accept: "application/json, text/event-stream" };
    const call = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { _meta: { [IDEMPOTENCY_META_KEY]: "k-backed-up" }, name: "bump", arguments: {} } });
    // A client that reads nothing of its answer, then drops its connection (a reset).
    const socket = createConnection(port, "127.0.0.1");
    await once(socket, "connect");
    const head = Object.entries({ ...headers, host: `127.0.0.1:${port}`, "content-length": Buffer.byteLength(call) })
      .map(([name, value]) => `${name}: ${value}\r\n`)
      .join("");
    socket.write(`POST /mcp HTTP/1.1\r\n${head}\r\n${call}`);
    await isBackedUp;
    socket.resetAndDestroy();
    await handlerEnded;
    const again = await (await fetch(url, { method: "POST", headers, body: call })).text();
    assert.ok(again.includes('"text":"ran"'), again);
    assert.equal(runs, 1);
  } finally {
    server.close();
  }
});

test("a keyed call whose handler fails after its head ends there under an error handler destroying its response, or wrap(): its re-send is told its outcome is unknown", { timeout: 30000 }, async () => {
  // Express 5 hands a handler's rejection to an error handler, which may destroy the response
  // with the error; wrap() ends the response itself. The handler never ends its response: the
  // call ends there, its key marked lost, as a failure before the head ends it; not "in use"
  // until the response is collected (each is kept reachable here, so collection cannot be
  // what ends it).
  const kept = [];
  let runs = 0;
  let release;
  const failing = async (req, res) => {
    runs += 1;
    kept.push(res);
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.flushHeaders();
    await new Promise((resolve) => (release = resolve)); // the client has the head
    throw new Error("the tool failed");
  };
  const app = express();
  app.set("env", "test"); // the final handler's log of the error, not wanted here
  app.post("/mcp", new ResumeSafety().middleware(), failing, (error, _req, res, _next) => res.destroy(error));
  const viaExpress = app.listen(0, "127.0.0.1");
  await once(viaExpress, "listening");
  const wrapped = await serve(new ResumeSafety().wrap(failing));
  // wrap() logs what its handler threw: kept here instead.
  const logged = [];
  const log = console.error;
  console.error = (error) => logged.push(error);
  try {
    for (const [what, url] of [
      ["an error handler", `http://127.0.0.1:${viaExpress.address().port}/mcp`],
      ["wrap()", wrapped.url],
    ]) {
      const call = keyedCall("bump");
      const post = () => fetch(url, { method: "POST", headers: MCP_HEADERS, body: call, signal: AbortSignal.timeout(5000) });
      runs = 0;
      const first = await post();
      assert.equal(first.status, 200);
      release();
      // The error handler cuts the response; wrap() ends it, with no answer in it.
      await first.text().catch((error) => assert.match(error.message, /terminated|other side closed/));
      // The client's re-send: the key is let go on the runtime, just behind the response's
      // end, so a re-send may find it held for a moment, never for longer.
      let again;
      await until(
        `the key of the call under ${what} to be let go`,
        async () => {
          again = await (await post()).text();
          return !again.includes("IDEMPOTENCY_KEY_IN_USE");
        },
        2000,
      );
      assert.ok(again.includes("IDEMPOTENCY_OUTCOME_UNKNOWN"), `${what}: ${again}`);
      assert.equal(runs, 1, what);
    }
    assert.equal(kept.length, 2);
    assert.equal(logged.length, 1);
    assert.match(logged[0].message, /the tool failed/);
  } finally {
    console.error = log;
    shut(viaExpress);
    shut(wrapped.server);
  }
});

test("a keyed call whose Express handler fails after its head, its connection destroyed bare, is held in use until its response is collected", { timeout: 30000 }, async () => {
  // Express's final handler destroys the connection when a handler fails after its head went:
  // a bare destroy, which may as well be another request's failure on the connection or its
  // client leaving. The call is not ended there: its handler hears no `close`, its key reads
  // "in use" while its response is reachable, then "outcome unknown" once it is collected
  // (the handler never ended it), and it never runs twice.
  setFlagsFromString("--expose-gc");
  const gc = runInNewContext("gc");
  let kept = [];
  let runs = 0;
  let heardClose = false;
  let release;
  let waiting;
  const isWaiting = new Promise((resolve) => (waiting = resolve));
  const app = express();
  app.set("env", "test");
  app.post("/mcp", new ResumeSafety().middleware(), async (_req, res) => {
    runs += 1;
    kept.push(res);
    res.on("close", () => (heardClose = true));
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.flushHeaders();
    await new Promise((resolve) => {
      release = resolve;
      waiting();
    });
    throw new Error("the tool failed");
  });
  const server = app.listen(0, "127.0.0.1");
  await once(server, "listening");
  try {
    const url = `http://127.0.0.1:${server.address().port}/mcp`;
    const call = keyedCall("bump");
    const post = () => fetch(url, { method: "POST", headers: MCP_HEADERS, body: call, signal: AbortSignal.timeout(5000) });
    let serverHeardClose = false;
    nextClosed(server).then(() => (serverHeardClose = true));
    const first = await post();
    assert.equal(first.status, 200);
    await isWaiting;
    release();
    await assert.rejects(first.text(), /terminated|other side closed/);
    await until("the server to hear its connection close", async () => serverHeardClose, 2000);
    assert.equal(heardClose, false);
    const held = await (await post()).text();
    assert.ok(held.includes("IDEMPOTENCY_KEY_IN_USE"), held);
    assert.equal(runs, 1);
    kept = null;
    let again;
    await until(
      "the response to be collected",
      async () => {
        for (let i = 0; i < 3; i++) gc();
        again = await (await post()).text();
        return !again.includes("IDEMPOTENCY_KEY_IN_USE");
      },
      5000,
    );
    assert.ok(again.includes("IDEMPOTENCY_OUTCOME_UNKNOWN"), again);
    assert.equal(runs, 1);
  } finally {
    shut(server);
  }
});

test("a keyed call whose connection its server's shutdown closed runs on and is stored", { timeout: 30000 }, async () => {
  // A shutdown that does not wait for open responses (close, then closeAllConnections)
  // destroys their connections too: the client comes back elsewhere, and the answer the run
  // goes on to must be there for it, not its key marked lost.
  const safety = new ResumeSafety();
  let runs = 0;
  let release;
  let ended;
  const handlerEnded = new Promise((resolve) => (ended = resolve));
  const handler = safety.wrap(async (req, res) => {
    runs += 1;
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.flushHeaders();
    await new Promise((resolve) => (release = resolve));
    res.end(`event: message\ndata: ${JSON.stringify({ jsonrpc: "2.0", id: req.body.id, result: { content: [{ type: "text", text: "ran" }] } })}\n\n`);
    ended();
  });
  const draining = await serve(handler);
  const elsewhere = await serve(handler); // another server behind the same guard
  try {
    const call = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { _meta: { [IDEMPOTENCY_META_KEY]: `k-${randomUUID()}` }, name: "bump", arguments: {} } });
    const post = (url) => fetch(url, { method: "POST", headers: MCP_HEADERS, body: call, signal: AbortSignal.timeout(5000) });
    const first = await post(draining.url);
    assert.equal(first.status, 200);
    draining.server.close();
    draining.server.closeAllConnections();
    await assert.rejects(first.text(), /terminated|other side closed/);
    release();
    await handlerEnded;
    const again = await (await post(elsewhere.url)).text();
    assert.ok(again.includes('"text":"ran"'), again);
    assert.equal(runs, 1);
  } finally {
    shut(elsewhere.server);
  }
});

/** A keyed `tools/call` to the tool `name`, its key fresh. */
const keyedCall = (name) => JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { _meta: { [IDEMPOTENCY_META_KEY]: `k-${randomUUID()}` }, name, arguments: {} } });

/** A POST of `body` to `path`, as bytes on a connection (`host` and length added). */
function rawPost(port, path, body) {
  const head = Object.entries({ ...MCP_HEADERS, host: `127.0.0.1:${port}`, "content-length": Buffer.byteLength(body) })
    .map(([name, value]) => `${name}: ${value}\r\n`)
    .join("");
  return `POST ${path} HTTP/1.1\r\n${head}\r\n${body}`;
}

/**
 * A promise of the close of the next connection `server` accepts, once the server has seen it
 * (the responses on it heard it too), not only its client.
 */
function nextClosed(server) {
  return new Promise((resolve) => server.once("connection", (socket) => socket.once("close", () => setImmediate(resolve))));
}

/**
 * A handler that flushes its head, waits until `release()`, then ends with the answer "ran":
 * `runs`, `release` (set once it waits), `ended` (a promise of its end) and whether it heard
 * its response close before it ended.
 */
function heldHandler() {
  const held = { runs: 0, release: null, heardClose: false };
  let ended;
  held.ended = new Promise((resolve) => (ended = resolve));
  let waiting;
  held.waiting = new Promise((resolve) => (waiting = resolve));
  held.handler = async (req, res) => {
    held.runs += 1;
    let ending = false;
    res.on("close", () => {
      if (!ending) held.heardClose = true;
    });
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.flushHeaders();
    await new Promise((resolve) => {
      held.release = resolve;
      waiting();
    });
    ending = true;
    res.end(`event: message\ndata: ${JSON.stringify({ jsonrpc: "2.0", id: req.body.id, result: { content: [{ type: "text", text: "ran" }] } })}\n\n`);
    ended();
  };
  return held;
}

test("a keyed call whose connection its server timed out runs on and is stored", { timeout: 30000 }, async () => {
  // Node's idle timeout (server.setTimeout, or req.setTimeout without a callback) destroys a
  // connection nobody hears the timeout of, with no error: a handler working without writing
  // has not failed, and the client comes back for the answer its run goes on to.
  for (const where of ["server", "request"]) {
    const held = heldHandler();
    const safety = new ResumeSafety();
    const { url, server } = await serve(
      safety.wrap((req, res) => {
        if (where === "request") req.setTimeout(300);
        return held.handler(req, res);
      }),
    );
    if (where === "server") server.setTimeout(300);
    try {
      const call = keyedCall("bump");
      const post = () => fetch(url, { method: "POST", headers: MCP_HEADERS, body: call, signal: AbortSignal.timeout(5000) });
      const closed = nextClosed(server);
      const first = await post();
      assert.equal(first.status, 200);
      await assert.rejects(first.text(), /terminated|other side closed/);
      await closed;
      held.release();
      await held.ended;
      const again = await (await post()).text();
      assert.ok(again.includes('"text":"ran"'), `${where}: ${again}`);
      assert.equal(held.runs, 1);
      assert.equal(held.heardClose, false);
    } finally {
      shut(server);
    }
  }
});

test("a keyed call whose connection failed on a later request's head runs on and is stored", { timeout: 30000 }, async () => {
  // What the client sends after its call on the same connection, when Node cannot read it
  // (not HTTP: a parse error; a head that never ends: the headers timeout), makes Node
  // destroy the connection with that error: the client's doing, not the call's failure.
  const cases = [
    ["a parse error", "NOT HTTP\r\n\r\n"],
    ["a headers timeout", "POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\n"],
  ];
  for (const [what, after] of cases) {
    const held = heldHandler();
    const server = createServer({ headersTimeout: 200, requestTimeout: 300, connectionsCheckingInterval: 50 }, new ResumeSafety().wrap(held.handler));
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    try {
      await runsOnAfterLaterBytes(server, held, what, after);
    } finally {
      shut(server);
    }
  }
});

/**
 * A keyed call sent on a raw connection, `after` sent on it once the call's head came back,
 * the connection closed by the server for it: the call's run goes on and is stored (its
 * re-send gets the answer, it ran once, its handler never heard the close).
 */
async function runsOnAfterLaterBytes(server, held, what, after) {
  const { port } = server.address();
  const call = keyedCall("bump");
  const closed = nextClosed(server);
  const socket = createConnection(port, "127.0.0.1");
  await once(socket, "connect");
  socket.on("error", () => {});
  socket.write(rawPost(port, "/mcp", call));
  await once(socket, "data"); // the call's head
  await held.waiting;
  socket.write(after);
  await closed;
  held.release();
  await held.ended;
  const again = await (await fetch(`http://127.0.0.1:${port}/mcp`, { method: "POST", headers: MCP_HEADERS, body: call })).text();
  assert.ok(again.includes('"text":"ran"'), `${what}: ${again}`);
  assert.equal(held.runs, 1);
  assert.equal(held.heardClose, false);
}

test("a keyed call whose connection was destroyed bare for a later request runs on and is stored", { timeout: 30000 }, async () => {
  // Node refuses some requests by destroying their connection with no error: a CONNECT on a
  // server with no `connect` listener; an app's `clientError` listener destroying the socket
  // on a parse error. What the client sent after its call on that connection is the cause,
  // not the call's failure: its run goes on and is stored.
  const cases = [
    ["a CONNECT nobody listens for", "CONNECT example.com:443 HTTP/1.1\r\nhost: example.com:443\r\n\r\n", false],
    ["a parse error its clientError listener destroyed for", "NOT HTTP\r\n\r\n", true],
  ];
  for (const [what, after, listens] of cases) {
    const held = heldHandler();
    const server = createServer(new ResumeSafety().wrap(held.handler));
    if (listens) server.on("clientError", (_error, socket) => socket.destroy());
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    try {
      await runsOnAfterLaterBytes(server, held, what, after);
    } finally {
      shut(server);
    }
  }
});

test("a keyed call on a keep-alive connection an earlier request's failure destroyed runs on and is stored", { timeout: 30000 }, async () => {
  // A handler that answered, then failed, makes Express's final handler destroy the connection
  // its request came on, bare: by then a keep-alive client may have sent its next request on
  // it, a keyed call still running. Nothing on the connection tells whose failure that destroy
  // was: the call runs on and its answer is stored, as when its client left.
  for (const guarded of [false, true]) {
    const held = heldHandler();
    const safety = new ResumeSafety();
    const app = express();
    app.set("env", "test"); // the final handler's log of the error, not wanted here
    const side = async (_req, res) => {
      res.json({});
      await new Promise((resolve) => setTimeout(resolve, 300));
      throw new Error("late");
    };
    if (guarded) app.post("/side", safety.middleware(), side);
    else app.post("/side", side);
    app.post("/mcp", safety.middleware(), held.handler);
    const server = app.listen(0, "127.0.0.1");
    await once(server, "listening");
    let connections = 0;
    server.on("connection", () => (connections += 1));
    let serverHeardClose = false;
    nextClosed(server).then(() => (serverHeardClose = true));
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const { port } = server.address();
    const post = (path, body, through) =>
      new Promise((resolve, reject) => {
        const req = httpRequest({ host: "127.0.0.1", port, path, method: "POST", headers: MCP_HEADERS, agent: through }, (res) => resolve({ res, socket: req.socket }));
        req.on("error", reject);
        req.end(body);
      });
    try {
      const unkeyed = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "side", arguments: {} } });
      const first = await post("/side", unkeyed, agent);
      assert.equal(first.res.statusCode, 200);
      first.res.resume();
      await once(first.res, "end");
      const call = keyedCall("bump");
      const keyed = await post("/mcp", call, agent);
      assert.equal(keyed.res.statusCode, 200);
      assert.equal(keyed.socket, first.socket);
      keyed.res.on("error", () => {});
      keyed.res.resume();
      assert.equal(connections, 1);
      await held.waiting;
      if (!keyed.socket.destroyed) await once(keyed.socket, "close");
      await until("the server to hear its connection close", async () => serverHeardClose, 2000);
      held.release();
      await held.ended;
      const fresh = new Agent();
      const again = await post("/mcp", call, fresh);
      let text = "";
      again.res.setEncoding("utf8");
      for await (const chunk of again.res) text += chunk;
      fresh.destroy();
      const what = guarded ? "guarded" : "unguarded";
      assert.ok(text.includes('"text":"ran"'), `${what}: ${text}`);
      assert.equal(held.runs, 1, what);
      assert.equal(held.heardClose, false, what);
    } finally {
      agent.destroy();
      shut(server);
    }
  }
});

test("a keyed call whose response its server destroys with a system call's error ends there", { timeout: 30000 }, async () => {
  // An error a system call failed with (a file that cannot be read, an upstream refusing the
  // connection) given to `res.destroy`, as stream.pipeline and error handlers give it, is the
  // call's failure, not its client leaving: its key is marked lost at once, not held "in use"
  // until the response is collected (each is kept reachable here).
  const kept = [];
  let runs = 0;
  let release;
  let waiting;
  const app = express();
  app.set("env", "test");
  const started = (res) => {
    runs += 1;
    kept.push(res);
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.flushHeaders();
    return new Promise((resolve) => {
      release = resolve;
      waiting();
    });
  };
  const safety = new ResumeSafety();
  // What it pipes fails: a directory read as a file (EISDIR, syscall "read").
  app.post("/piped", safety.middleware(), async (_req, res) => {
    await started(res);
    pipeline(createReadStream(fileURLToPath(new URL(".", import.meta.url))), res, () => {});
  });
  // An error handler destroying the response with an upstream's refusal.
  app.post(
    "/refused",
    safety.middleware(),
    async (_req, res) => {
      await started(res);
      throw Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:1"), { code: "ECONNREFUSED", syscall: "connect" });
    },
    (error, _req, res, _next) => res.destroy(error),
  );
  // The same behind middleware in front of the guard that put its own methods on the response
  // (as compression does): the guard's go on the response, in front of them.
  app.post(
    "/own",
    (_req, res, next) => {
      const { write, end } = res;
      res.write = (...args) => write.apply(res, args);
      res.end = (...args) => end.apply(res, args);
      next();
    },
    safety.middleware(),
    async (_req, res) => {
      await started(res);
      pipeline(createReadStream(fileURLToPath(new URL(".", import.meta.url))), res, () => {});
    },
  );
  const server = app.listen(0, "127.0.0.1");
  await once(server, "listening");
  try {
    for (const path of ["/piped", "/refused", "/own"]) {
      const url = `http://127.0.0.1:${server.address().port}${path}`;
      const call = keyedCall("bump");
      const post = () => fetch(url, { method: "POST", headers: MCP_HEADERS, body: call, signal: AbortSignal.timeout(5000) });
      runs = 0;
      const isWaiting = new Promise((resolve) => (waiting = resolve));
      const first = await post();
      assert.equal(first.status, 200);
      await isWaiting;
      release();
      await assert.rejects(first.text(), /terminated|other side closed/);
      // The key is let go on the runtime, just behind the connection's close.
      let again;
      await until(
        `the key of the call to ${path} to be let go`,
        async () => {
          again = await (await post()).text();
          return !again.includes("IDEMPOTENCY_KEY_IN_USE");
        },
        2000,
      );
      assert.ok(again.includes("IDEMPOTENCY_OUTCOME_UNKNOWN"), `${path}: ${again}`);
      assert.equal(runs, 1);
    }
    assert.equal(kept.length, 3);
  } finally {
    shut(server);
  }
});

test("a keyed call whose connection a pipelined request behind it destroyed runs on and is stored", { timeout: 30000 }, async () => {
  // Requests pipelined on one connection run side by side, the first one's response on the
  // connection: a later one failing after its head (Express's final handler destroys the
  // connection) is not the first one's failure, whose run goes on and is stored.
  const held = heldHandler();
  const app = express();
  app.set("env", "test");
  app.post("/mcp", new ResumeSafety().middleware(), async (req, res) => {
    if (req.body.params.name !== "fail") return held.handler(req, res);
    await held.waiting;
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.flushHeaders();
    await until("the failing call's head to be written", async () => res.headersSent);
    throw new Error("the tool failed");
  });
  const server = app.listen(0, "127.0.0.1");
  await once(server, "listening");
  try {
    const { port } = server.address();
    const call = keyedCall("bump");
    const failing = JSON.stringify({ jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "fail", arguments: {} } });
    const closed = nextClosed(server);
    const socket = createConnection(port, "127.0.0.1");
    await once(socket, "connect");
    socket.resume();
    socket.write(rawPost(port, "/mcp", call) + rawPost(port, "/mcp", failing));
    await closed;
    held.release();
    await held.ended;
    const again = await (await fetch(`http://127.0.0.1:${port}/mcp`, { method: "POST", headers: MCP_HEADERS, body: call })).text();
    assert.ok(again.includes('"text":"ran"'), again);
    assert.equal(held.runs, 1);
    assert.equal(held.heardClose, false);
  } finally {
    shut(server);
  }
});

test("a keyed call queued behind another on its connection whose response is destroyed ends there", { timeout: 30000 }, async () => {
  // A pipelined request's response waits behind the first one's, without its connection: it
  // hears no `close` when destroyed. `res.destroy()` ends its call there all the same (its
  // response is kept reachable here, so collection cannot be what ends it).
  const held = heldHandler();
  const kept = [];
  const app = express();
  app.set("env", "test");
  app.post(
    "/mcp",
    new ResumeSafety().middleware(),
    async (req, res) => {
      if (req.body.params.name !== "fail") return held.handler(req, res);
      kept.push(res);
      throw new Error("the tool failed");
    },
    (error, _req, res, _next) => res.destroy(error),
  );
  const server = app.listen(0, "127.0.0.1");
  await once(server, "listening");
  try {
    const { port } = server.address();
    const url = `http://127.0.0.1:${port}/mcp`;
    const failing = keyedCall("fail");
    const socket = createConnection(port, "127.0.0.1");
    await once(socket, "connect");
    let received = "";
    socket.on("data", (chunk) => (received += chunk));
    socket.write(rawPost(port, "/mcp", keyedCall("bump")) + rawPost(port, "/mcp", failing));
    await held.waiting;
    let again;
    await until(
      "the key of the queued call to be let go",
      async () => {
        again = await (await fetch(url, { method: "POST", headers: MCP_HEADERS, body: failing })).text();
        return !again.includes("IDEMPOTENCY_KEY_IN_USE");
      },
      2000,
    );
    assert.ok(again.includes("IDEMPOTENCY_OUTCOME_UNKNOWN"), again);
    assert.equal(kept.length, 1);
    // The first call is answered on the connection, which the destroyed response then ends.
    held.release();
    await once(socket, "close");
    assert.ok(received.includes('"text":"ran"'), received);
  } finally {
    shut(server);
  }
});

test("an unkeyed call's request is not kept by its idle keep-alive connection", { timeout: 30000 }, async () => {
  // Unkeyed calls pass as they would without the guard: once answered, nothing of theirs (the
  // request, the body the guard parsed onto it) stays reachable from the connection kept open
  // for the client's next request.
  setFlagsFromString("--expose-gc");
  const gc = runInNewContext("gc");
  let seen = null;
  const server = createServer(
    new ResumeSafety().wrap((req, res) => {
      seen = new WeakRef(req);
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ jsonrpc: "2.0", id: req.body.id, result: { content: [] } }));
    }),
  );
  let connection = null;
  server.on("connection", (socket) => (connection = socket));
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const agent = new Agent({ keepAlive: true });
  try {
    const body = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "bump", arguments: { data: "x".repeat(3 << 20) } } });
    const res = await new Promise((resolve, reject) => {
      const req = httpRequest({ host: "127.0.0.1", port: server.address().port, path: "/mcp", method: "POST", headers: MCP_HEADERS, agent }, resolve);
      req.on("error", reject);
      req.end(body);
    });
    assert.equal(res.statusCode, 200);
    res.resume();
    await once(res, "end");
    assert.ok(seen !== null);
    await until(
      "the answered request to be collected",
      async () => {
        for (let i = 0; i < 3; i++) gc();
        return seen.deref() === undefined;
      },
      2000,
    );
    assert.equal(connection.destroyed, false);
  } finally {
    agent.destroy();
    shut(server);
  }
});

test("bytes written while a store step waits reach the client in the order written", { timeout: 10000 }, async () => {
  // A step that waits for the store (Redis) answers in a turn nobody picks: here the guard's
  // push of the head is made to wait until the handler lets it answer, in a turn where the
  // handler wrote bytes due to the guard at its end. The chunk queued behind that step finds
  // the body untouched; what the handler writes on the `drain` that follows goes after those
  // bytes, not before them.
  const push = NativeGuard.prototype.push;
  let waited;
  const waiting = new Promise((resolve) => (waited = resolve));
  let release;
  let routed = false; // the initialize's response went through
  NativeGuard.prototype.push = function delayedPush(...args) {
    const sent = push.apply(this, args);
    if (!routed || release !== undefined) {
      routed ||= args[4] === true;
      return sent;
    }
    const answered = new Promise((resolve) => (release = () => resolve(sent)));
    waited();
    return answered;
  };
  const big = "A".repeat(64 * 1024);
  const { url, server } = await serve(
    new ResumeSafety().wrap(async (req, res) => {
      if (req.body.method === "initialize") return answerInitialize(req, res);
      res.writeHead(200, { "content-type": "text/plain" });
      res.write("X");
      await waiting; // the head's push (at the end of the turn) waits for the store
      res.write(big); // queued behind it
      res.write("B"); // pending, for the end of this turn
      res.once("drain", () => {
        res.write("C");
        res.end();
      });
      release();
    }),
  );
  try {
    // A call of a session: the guard routes its response.
    const init = await fetch(url, { method: "POST", headers: MCP_HEADERS, body: INITIALIZE, signal: AbortSignal.timeout(5000) });
    await init.text();
    const headers = { ...MCP_HEADERS, "mcp-session-id": init.headers.get("mcp-session-id"), "mcp-protocol-version": "2025-06-18" };
    const call = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "t", arguments: {} } });
    const answer = await fetch(url, { method: "POST", headers, body: call, signal: AbortSignal.timeout(5000) });
    const text = await answer.text();
    assert.equal(answer.status, 200, text);
    assert.equal(text.length, big.length + 3);
    assert.equal(text.slice(1, 1 + big.length), big);
    assert.equal(text.slice(0, 1) + text.slice(1 + big.length), "XBC");
  } finally {
    NativeGuard.prototype.push = push;
    shut(server);
  }
});

test("keys scoped by a header are the named client's own", { timeout: 30000 }, async () => {
  const replica = await Replica.start("--port", "0", "--store", "memory", "--key-scope-header", "x-client");
  try {
    const alice = new Client(replica.url, { era: "legacy", openListenStream: false, callTimeout: 10000, headers: { "x-client": "alice" } });
    assert.equal((await alice.callTool("echo", { text: "a" }, { idempotencyKey: "k" })).content[0].text, "a");
    await alice.close();
    const anonymous = await connected(replica.url);
    await assert.rejects(anonymous.callTool("echo", { text: "a" }, { idempotencyKey: "k" }), /x-client/);
    await anonymous.close();
  } finally {
    await replica.stop();
  }
});

test("options are read onto the guard", () => {
  assert.equal(new ResumeSafety({ instanceId: "replica-7", lease: 2500 }).instanceId, "replica-7");
  assert.throws(() => new ResumeSafety({ instanceId: "has spaces" }), InvalidConfigError);
  assert.throws(() => new ResumeSafety({ store: "mysql://db" }), InvalidConfigError);
  assert.throws(() => new ResumeSafety({ lease: -1 }), InvalidConfigError);
  assert.throws(() => new ResumeSafety({ keyScopeHeader: "not a header" }), InvalidConfigError);
  assert.throws(() => new ResumeSafety({ store: "redis://127.0.0.1:1" }), /cannot be reached/);
});

// ---------------------------------------------------------------------------------------------
// Real servers, real parts.

/** Longer than nginx's idle timeout: the response is cut while the tool waits after its effect. */
const CUT_DELAY_MS = 800;
/** Long enough for the test to see the effect and kill the replica mid-call. */
const KILL_DELAY_MS = 500;
/** Shorter than the idle timeout: only the drain interrupts these (it begins right after the effect, while the tool still waits). */
const DRAIN_DELAY_MS = 250;
/** How long any call may take before the test gives up on it. */
const DEADLINE = 10000;

/** Makes one call on a fresh session; what the client reported: `ok:<text>`, `unknown:<why>`, `failed:…`. */
async function make(d, call) {
  // Unguarded, the client assumes the server deduplicates keys (what an application would set
  // for a server it trusts), to show what happens when none does.
  const options = {
    era: "legacy",
    openListenStream: false,
    callTimeout: DEADLINE,
    ...(d.guarded ? {} : { resendPolicy: "assume_server_deduplicates" }),
  };
  const args = { tag: call.tag, delay_ms: call.delayMs };
  const key = call.keyed ? `key-${call.tag}` : undefined;
  const run = async () => {
    if (call.client === "native") {
      const client = new Client(d.url, options);
      try {
        await client.connect();
        const result = await client.callTool("bump", args, key ? { idempotencyKey: key } : {});
        return `ok:${result.content[0].text}`;
      } finally {
        await client.close().catch(() => {});
      }
    }
    const client = new SdkClient({ name: "host", version: "1" });
    try {
      await client.connect(new ResumeTransport(d.url, options));
      const result = await client.callTool({ name: "bump", arguments: args, ...(key ? { _meta: { [IDEMPOTENCY_META_KEY]: key } } : {}) });
      return `ok:${result.content[0].text}`;
    } finally {
      await client.close().catch(() => {});
    }
  };
  try {
    return await Promise.race([run(), new Promise((resolve) => setTimeout(() => resolve("failed:the client hung"), DEADLINE + 5000))]);
  } catch (error) {
    if (error instanceof OutcomeUnknownError) return `unknown:${error.message}`;
    if (error instanceof McpError && error.data?.kind === "outcome_unknown") return `unknown:${error.message}`;
    return `failed:${error?.name}: ${error?.message}`;
  }
}

function calls(d, fault, delayMs) {
  const run = `${d.json ? "json" : "sse"}-${d.guarded ? "g" : "n"}-${randomUUID().slice(0, 6)}`;
  return ["native", "sdk"].flatMap((client) =>
    [true, false].map((keyed) => ({ client, keyed, delayMs, tag: `${run}-${fault}-${client}-${keyed ? "k" : "u"}` })),
  );
}

async function judge(d, fault, made, reported) {
  const count = async (what, tag) => Number((await d.redis.command("GET", `${what}:${tag}`)) ?? 0);
  const rows = [];
  for (const [i, call] of made.entries()) {
    rows.push({
      fault,
      call,
      reported: reported[i],
      effects: await d.effects(call.tag),
      finished: await d.finished(call.tag),
      // Its `tools/call` requests that reached a replica (a re-send makes two), those whose
      // connection closed before their answer went (nginx cut it, or a drain closed it), its
      // runs a drain found in flight.
      posts: await count("posts", call.tag),
      cut: await count("cut", call.tag),
      drained: await count("drained", call.tag),
    });
  }
  return rows;
}

const firstAnswer = (r) => `ok:${r.call.tag}:1`;
const wrongAnswer = (r) => r.reported.startsWith("ok:") && (r.reported !== firstAnswer(r) || r.effects !== 1);

/** nginx cuts each call's silent response while the tool waits after its effect. */
async function cut(d) {
  const made = calls(d, "cut", CUT_DELAY_MS);
  return judge(d, "cut", made, await Promise.all(made.map((c) => make(d, c))));
}

/** The replica running each call is killed (SIGKILL) right after the call's effect. */
async function kill(d) {
  const rows = [];
  // One at a time: each kill takes a replica down until it is revived. Both of mcp-resume's
  // calls, and the keyed one of the SDK's Client.
  for (const call of calls(d, "kill", KILL_DELAY_MS).slice(0, 3)) {
    const [reported] = await Promise.all([make(d, call), d.waitEffect(call.tag).then((pid) => d.kill9(pid))]);
    rows.push(...(await judge(d, "kill", [call], [reported])));
    await d.revive();
  }
  return rows;
}

/**
 * A rolling restart's step lands on each call: the replica running it is drained (SIGTERM)
 * right after the call's effect, while the tool still waits, then started again. The drain
 * closes the call's connection before its answer and lets its run end.
 */
async function drain(d) {
  const rows = [];
  // One at a time: each drain lands on the one replica running its call.
  for (const call of calls(d, "drain", DRAIN_DELAY_MS)) {
    const restart = async () => {
      const pid = await d.waitEffect(call.tag);
      const replica = d.replicas.find((r) => r.pid === pid);
      await replica.drain();
      await replica.start();
    };
    const [reported] = await Promise.all([make(d, call), restart()]);
    rows.push(...(await judge(d, "drain", [call], [reported])));
  }
  return rows;
}

/** It ended `OutcomeUnknown` (why is in `reported`). */
const unknown = (r) => r.reported.startsWith("unknown:");

/**
 * Why a row's fault did not bite its call (`null` if it did): a fault that interrupts nothing
 * proves nothing about the guard. `json`: the replicas answer calls with JSON (a cut answer
 * cannot be resumed).
 */
function bit(r, json) {
  if (r.fault === "cut") {
    // nginx closed the call's response before its answer; with nothing to resume, a keyed call
    // was re-sent.
    if (!r.cut) return "nginx never cut the call before its answer";
    if (r.call.keyed && json && r.posts < 2) return "a keyed call whose JSON answer nginx cut was never re-sent";
    // An SSE answer carries event ids (an event store): the client resumes it, keyed or not.
    if (!json && r.posts !== 1) return "a call whose SSE answer nginx cut was re-sent, not resumed";
  } else if (r.fault === "kill") {
    // The killed run never reached its end (a re-sent keyed call's second run may have), and
    // the replica running an unkeyed call, sent once, never lived to see its connection close.
    if (r.finished >= r.effects) return "the killed run ended";
    if (!r.call.keyed && r.cut) return "the replica running the unkeyed call lived to see its connection cut";
    // Both runs' clients re-send a keyed call to a server that (says it) deduplicates: an
    // unknown reported without asking again would be a guess, not the guard's answer.
    if (r.call.keyed && r.posts < 2) return "the killed keyed call was not re-sent";
  } else {
    return drainBit(r);
  }
  if (!r.call.keyed && r.posts !== 1) return "an unkeyed call was sent other than once";
  return null;
}

/** Why a drain row's drain did not bite its call (`null` if it did). */
function drainBit(r) {
  if (!r.drained) return "the drain found the call's run ended";
  if (!r.finished) return "the drained run did not end";
  if (!r.cut) return "the drain did not close the call before its answer";
  if (r.call.keyed && r.posts < 2) return "the drained keyed call was not re-sent";
  if (!r.call.keyed && (r.posts !== 1 || !unknown(r))) return "an unkeyed call was re-sent, or answered after its answer was cut";
  return null;
}

/** The README's table: per fault, what happened to keyed and unkeyed calls. */
function table(d, rows) {
  let out = `${d.json ? "JSON answers" : "SSE answers, event store"} ${d.guarded ? "with the guard" : "without the guard (client trusting the server to deduplicate)"}\n`;
  out += "| fault | calls keyed/unkeyed | keyed run twice (runs) | unkeyed run twice | keyed completed once with their first answer | OutcomeUnknown | silent wrong answers | other errors |\n";
  for (const fault of ["cut", "drain", "kill"]) {
    const of = rows.filter((r) => r.fault === fault);
    const keyed = of.filter((r) => r.call.keyed);
    const twice = keyed.filter((r) => r.effects > 1).map((r) => r.effects);
    out += `| ${fault} | ${keyed.length}/${of.length - keyed.length} | ${twice.length} [${twice}] | ${of.filter((r) => !r.call.keyed && r.effects > 1).length} | `;
    out += `${keyed.filter((r) => r.reported === firstAnswer(r) && r.effects === 1).length}/${keyed.length} | `;
    out += `${of.filter(unknown).length} | ${of.filter(wrongAnswer).length} | ${of.filter((r) => r.reported.startsWith("failed")).length} |\n`;
  }
  return out;
}

const KINDS = [
  { guarded: true, json: false },
  { guarded: false, json: false },
  ...(process.env.MCP_RESUME_FULL_MATRIX ? [{ guarded: true, json: true }, { guarded: false, json: true }] : []),
];

for (const kind of KINDS) {
  test(`a deployment under faults: ${kind.json ? "JSON" : "SSE"} ${kind.guarded ? "guarded" : "bare"}`, { timeout: 120000 }, async (t) => {
    const d = await Deployment.start(redis, kind);
    let rows;
    try {
      rows = [...(await cut(d)), ...(await kill(d)), ...(await drain(d))];
    } finally {
      await d.stop();
    }
    const report = table(d, rows);
    t.diagnostic(report);
    const details = `${report}\n${rows.map((r) => JSON.stringify(r)).join("\n")}`;
    const missed = rows.flatMap((r) => {
      const why = bit(r, kind.json);
      return why === null ? [] : [`a ${r.fault} row: ${why}: ${JSON.stringify(r)}`];
    });
    assert.deepEqual(missed, [], `the fault did not bite:\n${missed.join("\n")}\n${details}`);
    if (!kind.guarded) {
      // Without the guard, keyed calls a client re-sends run again: the duplicates the guard
      // prevents, every drained one among them. Unkeyed calls are never re-sent.
      assert.ok(rows.some((r) => r.call.keyed && r.effects > 1), details);
      assert.ok(rows.every((r) => r.fault !== "drain" || !r.call.keyed || r.effects > 1), details);
      assert.ok(rows.every((r) => r.call.keyed || r.effects <= 1), details);
      // A cut SSE answer is resumed, not re-sent: its one run's answer, guard or no guard.
      assert.ok(rows.every((r) => r.fault !== "cut" || kind.json || (r.effects === 1 && r.reported === firstAnswer(r))), details);
      return;
    }
    for (const r of rows) {
      const what = `${JSON.stringify(r)}\n${details}`;
      assert.ok(r.effects <= 1, `ran twice: ${what}`);
      assert.ok(!wrongAnswer(r), `a silent wrong answer: ${what}`);
      assert.ok(!r.reported.startsWith("failed"), `an error: ${what}`);
      assert.equal(r.effects, 1, `never ran: ${what}`);
      if (r.call.keyed && r.finished) {
        // Its run finished: exactly once, with its stored (first) answer.
        assert.equal(r.reported, firstAnswer(r), what);
      } else if (r.call.keyed) {
        // Its run died (its replica killed): never success, never a second run.
        assert.ok(unknown(r), what);
      } else if (r.fault === "cut" && !kind.json) {
        // Unkeyed, its replica alive (cut, not drained or killed), its stream resumable (an
        // event store): the client resumes it and gets its answer, as it does without the guard.
        assert.equal(r.reported, firstAnswer(r), what);
      } else {
        // Unkeyed: the answer if the client got it, else an honest unknown.
        assert.ok(r.reported === firstAnswer(r) || unknown(r), what);
      }
    }
  });
}
