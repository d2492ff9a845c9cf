// The Client: the Rust SDK's API from JavaScript, against the TypeScript SDK server of
// tests/interop (it logs what it saw and did) and the mock cluster (its oracle).
import assert from "node:assert/strict";
import { once } from "node:events";
import http from "node:http";
import { after, before, describe, test } from "node:test";
import {
  Client,
  ClosedError,
  ContextMismatchError,
  InvalidConfigError,
  McpResumeError,
  McpTimeoutError,
  MissingCapabilityError,
  OutcomeUnknownError,
  ProtocolError,
  ResumeTransport,
  RpcError,
  SessionLostError,
  TooLargeError,
  TransportError,
  UnauthorizedError,
} from "../index.js";
import { fromNative } from "../lib/errors.js";
import { Cluster, LoggingServer, expecting } from "./support/servers.mjs";
import { CAPABILITIES, TAG } from "./support/workload.mjs";

const FAST = { reconnect: { initialDelay: 10, maxDelay: 100, maxAttempts: 2 } };
const textOf = (result) => result.content.map((c) => c.text).join("");

let server;
before(async () => {
  server = await LoggingServer.v1();
});
after(() => server.stop());

/** A started `block` call's server-side request id. */
const blockRunning = async (mark) => (await server.waitFor(mark, "tool", (e) => e.name === "block")).request_id;

describe("errors: one class per kind, each what really happened", () => {
  test("every kind the SDK names has its class", () => {
    const classes = {
      transport: TransportError, timeout: McpTimeoutError, session_lost: SessionLostError,
      outcome_unknown: OutcomeUnknownError, context_mismatch: ContextMismatchError, rpc: RpcError,
      protocol: ProtocolError, too_large: TooLargeError, closed: ClosedError,
      unauthorized: UnauthorizedError, invalid_config: InvalidConfigError,
      missing_capability: MissingCapabilityError,
    };
    for (const [kind, Class] of Object.entries(classes)) {
      const error = fromNative({ kind, message: "m", code: -1, rpcMessage: "m" });
      assert.ok(error instanceof Class && error instanceof McpResumeError, kind);
      assert.equal(error.kind, kind);
      assert.equal(error.name, Class.name);
    }
    // A kind this package predates is still an McpResumeError naming it.
    assert.equal(fromNative({ kind: "newer", message: "m" }).kind, "newer");
    // A server's error that did not answer the call itself (a task's poll refused) says the
    // call may have run; the server's answer to the call does not.
    const poll = { kind: "rpc", message: "m", code: -32602, rpcMessage: "unknown task" };
    assert.equal(fromNative({ ...poll, mayHaveRun: true }).mayHaveRun, true);
    assert.equal(fromNative({ ...poll, mayHaveRun: false }).mayHaveRun, false);
  });

  test("invalid_config, from the constructor", () => {
    for (const options of [{ era: "medieval" }, { callTimeout: -1 }, { connectTimeout: 1e300 }, { resendPolicy: "always" }, { reconnect: { multiplier: Number.NaN } }]) {
      assert.throws(() => new Client("http://127.0.0.1:1/mcp", options), (e) => {
        assert.ok(e instanceof InvalidConfigError && e instanceof McpResumeError && e instanceof Error);
        assert.equal(e.kind, "invalid_config");
        return true;
      });
    }
    assert.throws(() => new Client("ftp://example.com/mcp"), InvalidConfigError);
    // A count that is negative or not whole is refused, not wrapped or cut to another count
    // (-1 read as 4,294,967,295 attempts, or in flight for the bridge).
    for (const count of [-1, 1.5, 2 ** 32, Number.POSITIVE_INFINITY]) {
      for (const name of ["maxAttempts", "maxResumesWithoutProgress", "maxReinitFailures"]) {
        assert.throws(() => new Client("http://127.0.0.1:1/mcp", { reconnect: { [name]: count } }), InvalidConfigError, `${name} ${count}`);
      }
      assert.throws(() => new ResumeTransport("http://127.0.0.1:1/mcp", { capacity: count }), InvalidConfigError, `capacity ${count}`);
    }
    // A value of the wrong type is napi's conversion error, naming the option.
    assert.throws(() => new Client("http://127.0.0.1:1/mcp", { callTimeout: "soon" }), /ClientOptions\.callTimeout/);
  });

  test("an argument of the wrong type rejects its call's promise, never throws from the call", async () => {
    // Thrown, it would escape a caller's .catch() (in a callback, an uncaught exception).
    const client = new Client("http://127.0.0.1:1/mcp");
    const calls = {
      listToolsPage: () => client.listToolsPage(/** @type {any} */ (5)),
      listResourcesPage: () => client.listResourcesPage(/** @type {any} */ (5)),
      listResourceTemplatesPage: () => client.listResourceTemplatesPage(/** @type {any} */ (5)),
      listPromptsPage: () => client.listPromptsPage(/** @type {any} */ (5)),
      readResource: () => client.readResource(/** @type {any} */ (5)),
      subscribeResource: () => client.subscribeResource(/** @type {any} */ (5)),
      unsubscribeResource: () => client.unsubscribeResource(/** @type {any} */ (5)),
      getPrompt: () => client.getPrompt("p", /** @type {any} */ ({ a: 1 })),
      complete: () => client.complete({ type: "ref/prompt", name: "p" }, /** @type {any} */ (undefined)),
      setLoggingLevel: () => client.setLoggingLevel(/** @type {any} */ (5)),
      callTool: () => client.callTool(/** @type {any} */ (5)),
      request: () => client.request(/** @type {any} */ (5)),
    };
    for (const [name, call] of Object.entries(calls)) {
      let outcome;
      try {
        outcome = call();
      } catch (error) {
        assert.fail(`${name} threw ${error}`);
      }
      await assert.rejects(outcome, Error, name);
    }
    await client.close();
  });

  test("the TypeScript SDK's authProvider is refused, not ignored (no OAuth here)", () => {
    const authProvider = { tokens: async () => ({ access_token: "t", token_type: "Bearer" }) };
    for (const make of [
      () => new Client("http://127.0.0.1:1/mcp", { authProvider }),
      () => new ResumeTransport("http://127.0.0.1:1/mcp", { authProvider }),
    ]) {
      assert.throws(make, (e) => e instanceof InvalidConfigError && /authProvider.*bearerToken/.test(e.message));
    }
    for (const name of ["requestInit", "fetch", "reconnectionOptions", "sessionId"]) {
      assert.throws(() => new Client("http://127.0.0.1:1/mcp", { [name]: {} }), InvalidConfigError, name);
    }
  });

  test("transport: nothing listens", async () => {
    const client = new Client("http://127.0.0.1:9/mcp", { era: "legacy", ...FAST });
    await assert.rejects(client.connect(), (e) => e instanceof TransportError && e.kind === "transport");
    // A call that never reached a server did not run.
    await assert.rejects(client.callTool("echo", { text: "x" }, { timeout: 500 }), (e) => {
      assert.ok(["transport", "timeout"].includes(e.kind), e);
      assert.equal(e.mayHaveRun, false);
      return true;
    });
  });

  test("rpc: the server's JSON-RPC error, code and data kept", async () => {
    const client = new Client(server.url);
    await client.connect();
    await assert.rejects(client.readResource("mem://nothing"), (e) => {
      assert.ok(e instanceof RpcError);
      assert.deepEqual([e.kind, e.code, e.data], ["rpc", -32002, { uri: "mem://nothing" }]);
      return true;
    });
    await client.close();
    await assert.rejects(client.listTools(), ClosedError);
  });

  test("timeout: the deadline passes, the server is told", async () => {
    const client = new Client(server.url);
    await client.connect();
    const mark = server.mark();
    await assert.rejects(client.callTool("block", {}, { timeout: 300 }), (e) => {
      assert.ok(e instanceof McpTimeoutError, e);
      // It was sent and the server was running it: retrying could run it twice.
      assert.equal(e.mayHaveRun, true);
      return true;
    });
    const id = await blockRunning(mark);
    await server.waitFor(mark, "cancelled", (e) => e.request_id === id);
    await client.close();
  });

  test("outcome_unknown: the session is deleted under an unkeyed call", async () => {
    const client = new Client(server.url, FAST);
    await client.connect();
    const mark = server.mark();
    const call = client.callTool("block", {});
    // Expected from the start: the call may fail before the admin request's own answer comes.
    // Interrupted, not refused: the app was asked nothing.
    const failed = assert.rejects(
      call,
      (e) => e instanceof OutcomeUnknownError && e.kind === "outcome_unknown" && e.inputRefused === false,
    );
    await blockRunning(mark);
    await server.admin("/admin/drop-sessions");
    await failed;
    // The client re-initialized and goes on; the call was not sent again (the server logs in
    // order: everything before the next call's run is read once that run is).
    assert.equal(textOf(await client.callTool("echo", { text: "after" })), "after");
    await server.waitFor(mark, "tool", (e) => e.arguments.text === "after");
    assert.equal(server.find(mark, "http_in", (e) => e.tool === "block").length, 1);
    await client.close();
  });

  test("unauthorized: the server's challenge on the error", async () => {
    const guarded = await LoggingServer.v1("--auth");
    try {
      const client = new Client(guarded.url, { bearerToken: "not-the-token", era: "legacy", ...FAST });
      await assert.rejects(client.connect(), (e) => {
        assert.ok(e instanceof UnauthorizedError);
        assert.equal(e.authChallenge.status, 401);
        assert.match(e.authChallenge.resourceMetadata, /oauth-protected-resource/);
        return true;
      });
    } finally {
      await guarded.stop();
    }
  });

  test("too_large: an answer over the limit", async () => {
    const client = new Client(server.url, { era: "legacy", maxBodySize: 16, maxEventSize: 16 });
    await assert.rejects(client.connect(), TooLargeError);
  });

  test("protocol: an answer that is not MCP", async () => {
    const bogus = http.createServer((req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end('{"jsonrpc": "2.0", "id": 0, "result": {"no": "protocol version"}}');
    });
    bogus.listen(0, "127.0.0.1");
    await once(bogus, "listening");
    try {
      const client = new Client(`http://127.0.0.1:${bogus.address().port}/mcp`, { era: "legacy", ...FAST });
      await assert.rejects(client.connect(), ProtocolError);
    } finally {
      bogus.close();
    }
  });

  test("missing_capability: a 2026-07-28 tool needs elicitation", async () => {
    const cluster = await Cluster.start("replicated", "--era", "modern");
    try {
      const client = new Client(cluster.url);
      await assert.rejects(client.callTool("confirm", { question: "sure?" }), (e) => {
        assert.ok(e instanceof MissingCapabilityError);
        assert.equal(e.code, -32021);
        assert.deepEqual(e.data.requiredCapabilities, { elicitation: {} });
        return true;
      });
      await client.close();
    } finally {
      await cluster.stop();
    }
  });

  test("outcome_unknown, inputRefused: a 2026-07-28 call whose elicitation the app's handler refused", async () => {
    const cluster = await Cluster.start("replicated", "--era", "modern");
    try {
      const asked = [];
      const client = new Client(cluster.url, {
        onElicitation: (params) => {
          asked.push(params.message);
          throw new RpcError(-32000, "the user cannot be asked");
        },
      });
      await assert.rejects(client.callTool("confirm", { question: "sure?" }, { meta: { [TAG]: "refused" } }), (e) => {
        assert.ok(e instanceof OutcomeUnknownError, String(e));
        assert.equal(e.inputRefused, true);
        assert.equal(e.mayHaveRun, true);
        return true;
      });
      await client.close();
      // Asked once and never sent again: the tool never got its answer, so never ran.
      assert.deepEqual(asked, ["sure?"]);
      const oracle = await cluster.oracle();
      assert.deepEqual(oracle.executions.filter((e) => e.tool === "confirm"), []);
    } finally {
      await cluster.stop();
    }
  });

  test("context_mismatch: answers made under another context are refused, as the oracle confirms", async () => {
    const cluster = await Cluster.start("naive", ...expecting(CAPABILITIES));
    try {
      const client = new Client(cluster.url, { capabilities: CAPABILITIES, ...FAST });
      await client.connect();
      const failed = [];
      const answered = [];
      for (let n = 0; n < 4; n++) {
        const tag = `mismatch/${n}`;
        await client.callTool("generate", { prompt: "p" }, { meta: { [TAG]: tag } }).then(
          () => answered.push(tag),
          (e) => {
            assert.ok(e instanceof ContextMismatchError, String(e));
            failed.push(tag);
          },
        );
      }
      await client.close();
      assert.ok(failed.length > 0);
      const oracle = await cluster.oracle();
      for (const tag of failed) {
        assert.ok(oracle.executions.some((e) => e.tag === tag && e.wrong_capability), tag);
      }
      // An answer the client accepted ran under the capabilities it negotiated.
      for (const tag of answered) {
        const runs = oracle.executions.filter((e) => e.tag === tag);
        assert.ok(runs.length > 0 && runs.every((e) => !e.wrong_capability), JSON.stringify(runs));
      }
    } finally {
      await cluster.stop();
    }
  });
});

describe("AbortSignal", () => {
  test("aborting a call cancels it on the server and stops its re-sends", async () => {
    const client = new Client(server.url, { resendPolicy: "assume_server_deduplicates", ...FAST });
    await client.connect();
    const mark = server.mark();
    const controller = new AbortController();
    const call = client.callTool("block", {}, { idempotencyKey: "abort-1", signal: controller.signal });
    const id = await blockRunning(mark);
    controller.abort();
    await assert.rejects(call, (e) => e.name === "AbortError");
    await server.waitFor(mark, "cancelled", (e) => e.request_id === id);
    // A keyed call still running would be re-sent on the next session; the aborted one is not.
    await server.admin("/admin/drop-sessions");
    assert.equal(textOf(await client.callTool("echo", { text: "next" })), "next");
    await server.waitFor(mark, "tool", (e) => e.arguments.text === "next");
    assert.equal(server.find(mark, "http_in", (e) => e.tool === "block").length, 1);
    await client.close();
  });

  test("an aborted signal sends nothing and rejects with its reason", async () => {
    const client = new Client(server.url);
    await client.connect();
    const mark = server.mark();
    const reason = new Error("not wanted");
    await assert.rejects(client.callTool("echo", { text: "x" }, { signal: AbortSignal.abort(reason) }), (e) => e === reason);
    await client.callTool("echo", { text: "marker" });
    await server.waitFor(mark, "tool", (e) => e.arguments.text === "marker");
    assert.deepEqual(server.find(mark, "tool").map((e) => e.arguments.text), ["marker"]);
    await client.close();
  });
});

describe("handlers", () => {
  test("sampling, elicitation and roots: declared at initialize, answered by JavaScript", async () => {
    const seen = [];
    const client = new Client(server.url, {
      onSampling: async (params, ctx) => {
        seen.push(["sampling", params.messages[0].content.text, params.maxTokens, ctx.method]);
        return { role: "assistant", content: { type: "text", text: "from node" }, model: "node-model" };
      },
      onElicitation: (params) => {
        seen.push(["elicitation", params.message]);
        return { action: "accept", content: { name: "Ada" } };
      },
      onRoots: async () => [{ uri: "file:///work", name: "work" }],
    });
    await client.connect();
    const mark = server.mark();
    assert.equal(textOf(await client.callTool("sample", { prompt: "hi" })), "node-model: from node");
    await client.callTool("elicit");
    await client.callTool("roots");
    await client.close();
    assert.deepEqual(seen, [["sampling", "hi", 64, "sampling/createMessage"], ["elicitation", "What is your name?"]]);
    // What the server received.
    assert.equal((await server.waitFor(mark, "sampled")).result.model, "node-model");
    assert.deepEqual((await server.waitFor(mark, "elicited")).result, { action: "accept", content: { name: "Ada" } });
    assert.deepEqual((await server.waitFor(mark, "roots")).result.roots, [{ uri: "file:///work", name: "work" }]);
  });

  test("without a handler the capability is not declared and the server's request fails", async () => {
    const client = new Client(server.url);
    await client.connect();
    const result = await client.callTool("sample", { prompt: "hi" }).catch((e) => e);
    assert.ok(result instanceof RpcError || result.isError, JSON.stringify(result));
    await client.close();
  });

  test("a thrown RpcError is the server's answer; the server's cancellation aborts the handler", async () => {
    let aborted;
    let sampling;
    const asked = new Promise((resolve) => { sampling = resolve; });
    const client = new Client(server.url, {
      onSampling: (params, { signal }) => {
        if (params.messages[0].content.text === "never answered") {
          // sample_then_cancel: answered only by the server's cancellation.
          sampling();
          return new Promise((_, reject) => {
            aborted = new Promise((resolve) => signal.addEventListener("abort", resolve));
            signal.addEventListener("abort", () => reject(signal.reason));
          });
        }
        throw new RpcError(-32042, "declined by policy", { why: "test" });
      },
    });
    await client.connect();
    const mark = server.mark();
    const declined = await client.callTool("sample", { prompt: "hi" }).catch((e) => e);
    // The server's createMessage rejected with the handler's error, and its tool passed it on.
    assert.ok(declined instanceof RpcError, String(declined));
    assert.deepEqual([declined.code, declined.data], [-32042, { why: "test" }]);
    assert.match(declined.message, /declined by policy/);

    const call = client.callTool("sample_then_cancel");
    await asked;
    await server.admin("/admin/release");
    await aborted;
    await call;
    await server.waitFor(mark, "sampling_cancelled");
    await client.close();
  });

  test("a handler's answer of the wrong shape is a bare internal error for the server, its detail a local warning", async () => {
    const warned = [];
    const onWarning = (w) => warned.push(String(w.message));
    process.on("warning", onWarning);
    try {
      // Each answer holds what the server should not see where the SDK's types want another
      // shape; the reason it is refused would name it.
      for (const [options, tool, handler] of [
        [{ onSampling: () => ({ role: "secret model output", content: { type: "text", text: "x" }, model: "m" }) }, "sample", "onSampling"],
        [{ onElicitation: () => ({ action: "accept", content: "secret answer" }) }, "elicit", "onElicitation"],
        [{ onRoots: () => ["file:///home/secret"] }, "roots", "onRoots"],
      ]) {
        const client = new Client(server.url, options);
        await client.connect();
        const refused = await client.callTool(tool, { prompt: "hi" }).catch((e) => e);
        await client.close();
        // The server's request rejected with the client's error, and its tool passed it on.
        assert.ok(refused instanceof RpcError, `${tool}: ${String(refused)}`);
        assert.equal(refused.code, -32603, tool);
        assert.doesNotMatch(refused.message, /secret/, tool);
        assert.doesNotMatch(JSON.stringify(refused.data ?? null), /secret/, tool);
        // What is wrong is told here, to the handler's author.
        for (let i = 0; i < 100 && !warned.some((w) => w.includes(handler)); i++) await new Promise((r) => setTimeout(r, 10));
        assert.ok(warned.some((w) => w.includes(handler) && /secret/.test(w)), `${tool}: ${warned.join("\n")}`);
      }
    } finally {
      process.off("warning", onWarning);
    }
  });
  test("a handler that answers what JSON writes as nothing (a symbol, a function) is reported, and answered as an internal error", async () => {
    const warned = [];
    const onWarning = (w) => warned.push(String(w.message));
    process.on("warning", onWarning);
    try {
      for (const answer of [Symbol("secret"), () => "secret"]) {
        const client = new Client(server.url, { onElicitation: () => answer });
        await client.connect();
        const before = warned.length;
        const refused = await client.callTool("elicit").catch((e) => e);
        await client.close();
        assert.ok(refused instanceof RpcError, `${typeof answer}: ${String(refused)}`);
        assert.equal(refused.code, -32603, typeof answer);
        for (let i = 0; i < 100 && warned.length === before; i++) await new Promise((r) => setTimeout(r, 10));
        assert.ok(warned.slice(before).some((w) => w.includes("onElicitation") && /not JSON/.test(w)), `${typeof answer}: ${warned.slice(before).join("\n")}`);
      }
    } finally {
      process.off("warning", onWarning);
    }
  });

  test("a handler that throws what cannot be written as text is still reported, and still answered as an internal error", async () => {
    const warned = [];
    const onWarning = (w) => warned.push(String(w.message));
    process.on("warning", onWarning);
    try {
      // Each thrown value makes String() throw: no toString, one that throws, a Proxy whose
      // prototype cannot be read; and an RpcError whose data cannot be read.
      const unreadable = new RpcError(-32000, "x");
      Object.defineProperty(unreadable, "data", { get() { throw new Error("data unreadable"); } });
      for (const [n, thrown] of [
        Object.create(null),
        { toString() { throw new Error("no text"); } },
        new Proxy({}, { getPrototypeOf() { throw new Error("no prototype"); } }),
        unreadable,
      ].entries()) {
        const client = new Client(server.url, { onElicitation: () => { throw thrown; } });
        await client.connect();
        const before = warned.length;
        const refused = await client.callTool("elicit").catch((e) => e);
        // The client goes on: the next call is answered.
        assert.equal(textOf(await client.callTool("echo", { text: "next" })), "next");
        await client.close();
        assert.ok(refused instanceof RpcError, `${n}: ${String(refused)}`);
        assert.equal(refused.code, -32603, `${n}`);
        for (let i = 0; i < 100 && warned.length === before; i++) await new Promise((r) => setTimeout(r, 10));
        assert.ok(warned.slice(before).some((w) => w.includes("onElicitation") && w.includes("failed")), `${n}: ${warned.slice(before).join("\n")}`);
      }
    } finally {
      process.off("warning", onWarning);
    }
  });
});

describe("events, notifications, and the rest of the surface", () => {
  test("events and notifications as async iterators that end with the client", async () => {
    const client = new Client(server.url);
    const events = [];
    const notifications = [];
    const collected = Promise.all([
      (async () => { for await (const e of client.events()) events.push(e.type); })(),
      (async () => { for await (const n of client.notifications()) notifications.push(n); })(),
    ]);
    await client.connect();
    await client.callTool("progress", { steps: 3 }, { progressToken: "p-1" });
    await client.close();
    await collected;
    assert.ok(events.includes("connected") && events.at(-1) === "closed", events.join());
    const progress = notifications.filter((n) => n.method === "notifications/progress");
    assert.deepEqual(progress.map((n) => [n.params.progressToken, n.params.progress]), [["p-1", 1], ["p-1", 2], ["p-1", 3]]);
  });

  test("notify and notifyRootsChanged before any other call: sent, not refused for want of a runtime", async () => {
    const client = new Client(server.url);
    client.notify("notifications/custom", {});
    await client.connect();
    await client.ping();
    await client.close();

    const roots = new Client(server.url, { onRoots: () => [{ uri: "file:///work", name: "work" }] });
    roots.notifyRootsChanged();
    await roots.connect();
    assert.equal(JSON.parse(textOf(await roots.callTool("roots")))[0].uri, "file:///work");
    await roots.close();
  });

  test("an AbortSignal ends an iterator", async () => {
    const client = new Client(server.url);
    const controller = new AbortController();
    const seen = [];
    const loop = (async () => { for await (const e of client.events({ signal: controller.signal })) seen.push(e.type); })();
    await client.connect();
    controller.abort();
    await loop;
    await client.close();
  });

  test("resources, prompts, completion, logging", async () => {
    const client = new Client(server.url);
    const info = await client.connect();
    assert.equal(info.serverInfo.name, "mcp-resume-interop-ts");
    assert.equal(client.era, "legacy");
    assert.ok(client.sessionId);
    assert.equal((await client.listResources()).length, 6);
    assert.equal((await client.listResourcesPage()).resources.length, 2);
    assert.equal((await client.readResource("mem://notes/2")).contents[0].text, "note 2 body");
    assert.equal((await client.listResourceTemplates())[0].uriTemplate, "mem://notes/{id}");
    assert.deepEqual((await client.listPrompts()).map((p) => p.name), ["greet", "summarize"]);
    const prompt = await client.getPrompt("greet", { name: "Ada", language: "fr" });
    assert.equal(prompt.messages[0].content.text, "Greet Ada in fr");
    const completion = await client.complete({ type: "ref/prompt", name: "greet" }, { name: "language", value: "e" });
    assert.deepEqual(completion.values, ["en", "es"]);
    await client.setLoggingLevel("warning");
    const result = await client.callTool("log", { levels: ["info", "warning", "error"] });
    assert.equal(textOf(result), "logged warning,error");
    await assert.rejects(client.setLoggingLevel("loud"), InvalidConfigError);
    await client.ping();
    await client.close();
  });
});
