// The Vercel AI SDK's MCP client (@ai-sdk/mcp) with ResumeTransport as its custom transport,
// with no language model: against the mock cluster whose balancer cuts every stream, against
// the TypeScript SDK server killed in the middle of a call with the AI SDK's own retry on
// (`maxRetries`), and with keys from the tool call id against the cluster, which
// deduplicates them.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";
import { createMCPClient } from "@ai-sdk/mcp";
import { BRIDGE_ERROR_CODES, ResumeTransport, toolCallKey, withToolCallKeys } from "../index.js";
import { Cluster, LoggingServer } from "./support/servers.mjs";

const CUTS = ["--idle-timeout-ms", "0", "--cut-after-events", "3"];

test("createMCPClient over ResumeTransport lists and executes a tool", async () => {
  const cluster = await Cluster.start("replicated", ...CUTS);
  try {
    const client = await createMCPClient({ transport: new ResumeTransport(cluster.url) });
    const tools = await client.tools();
    assert.ok("echo" in tools && "slow" in tools, Object.keys(tools).join());
    // The `slow` call's stream is cut after 3 of its progress events and resumed underneath.
    const result = await tools.slow.execute({ steps: 6, delay_ms: 20 }, { toolCallId: "call-1", messages: [] });
    assert.equal(result.isError ?? false, false, JSON.stringify(result));
    await client.close();
    const oracle = await cluster.oracle();
    assert.equal(oracle.totals.initializes, 1, JSON.stringify(oracle.totals));
    assert.ok(oracle.totals.resumes >= 1, JSON.stringify(oracle.totals));
    assert.equal(oracle.executions.filter((e) => e.tool === "slow").length, 1);
  } finally {
    await cluster.stop();
  }
});

test("the AI SDK's maxRetries never re-runs a call interrupted by a server crash", async () => {
  const server = await LoggingServer.v1OnFixedPort();
  try {
    const client = await createMCPClient({ transport: new ResumeTransport(server.url), maxRetries: 2 });
    const tools = await client.tools();
    const mark = server.mark();
    const call = tools.block.execute({}, { toolCallId: "call-1", messages: [] });
    // Expected from the start: the call may fail before the restart is done.
    const failed = assert.rejects(call, (error) => {
      // What the model's tool-error part and the application read.
      assert.equal(error.data?.kind, "outcome_unknown", String(error));
      assert.equal(error.code, BRIDGE_ERROR_CODES.outcome_unknown);
      assert.match(error.message, /may or may not have run/);
      return true;
    });
    await server.waitFor(mark, "tool", (e) => e.name === "block");
    await server.restart();
    await failed;
    const echo = await tools.echo.execute({ text: "after the restart" }, { toolCallId: "call-2", messages: [] });
    assert.equal(echo.content[0].text, "after the restart");
    await client.close();
    await server.synced(mark);
    // Across both processes: the interrupted call ran once, and was never sent again.
    assert.equal(server.find(mark, "tool", (e) => e.name === "block").length, 1);
    assert.equal(server.find(mark, "http_in", (e) => e.tool === "block").length, 1);
  } finally {
    await server.stop();
  }
});

test("the AI SDK's abortSignal (its timeout too) cancels the call on the server", async () => {
  const server = await LoggingServer.v1();
  try {
    const client = await createMCPClient({ transport: new ResumeTransport(server.url) });
    const tools = await client.tools();
    const mark = server.mark();
    // The AI SDK passes its signal to the transport's send and sends no
    // notifications/cancelled itself.
    await assert.rejects(
      tools.block.execute({}, { toolCallId: "call-1", messages: [], abortSignal: AbortSignal.timeout(300) }),
    );
    const { request_id: id } = await server.waitFor(mark, "tool", (e) => e.name === "block");
    await server.waitFor(mark, "http_in", (e) => e.rpc_method === "notifications/cancelled", 5000);
    await server.waitFor(mark, "cancelled", (e) => e.request_id === id, 5000);
    await client.close();
  } finally {
    await server.stop();
  }
});

// Stock, for comparison (the README's framework table): the AI SDK's own HTTP transport.
test("stock: the AI SDK's own transport leaves a call interrupted by a server crash unanswered, so maxRetries never fires", async () => {
  const server = await LoggingServer.v1OnFixedPort();
  const client = await createMCPClient({ transport: { type: "http", url: server.url }, maxRetries: 2 });
  try {
    const tools = await client.tools();
    const mark = server.mark();
    // It does not resume the call's stream and nothing fails it: the application's own
    // signal is the only end of the wait (here 4 s, the call killed in its first second).
    const signal = AbortSignal.timeout(4000);
    const failed = assert.rejects(
      tools.block.execute({}, { toolCallId: "call-1", messages: [], abortSignal: signal }),
      /Request was aborted/,
    );
    const restarted = await server.restartMidCall(mark);
    await failed;
    // It keeps the session that died with the server: the next call fails (404).
    await assert.rejects(
      tools.echo.execute({ text: "after the restart" }, { toolCallId: "call-2", messages: [] }),
      /HTTP 404/,
    );
    await server.synced(restarted);
    // Never resumed, never sent again; ran once.
    assert.equal(server.find(restarted, "http_in", (e) => e.last_event_id !== null).length, 0);
    assert.equal(server.find(restarted, "http_in", (e) => e.tool === "block").length, 0);
    assert.equal(server.find(0, "tool", (e) => e.name === "block").length, 1);
  } finally {
    await client.close().catch(() => {});
    await server.stop();
  }
});

test("withToolCallKeys: a re-run of the same tool call is answered from the stored result", async () => {
  const cluster = await Cluster.start("strict", ...CUTS);
  try {
    const client = await createMCPClient({ transport: new ResumeTransport(cluster.url) });
    const tools = withToolCallKeys(await client.tools());
    const toolCallId = `call-${randomUUID()}`;
    const options = { toolCallId, messages: [] };
    const first = await tools.slow.execute({ steps: 4, delay_ms: 10 }, options);
    const second = await tools.slow.execute({ steps: 4, delay_ms: 10 }, options);
    assert.deepEqual(second.content, first.content);
    await client.close();
    const oracle = await cluster.oracle();
    // The cut call's resume was refused: re-sent with its key, then the second execute (the
    // same invocation) answered from the stored result. One execution, keyed.
    const runs = oracle.executions.filter((e) => e.tool === "slow");
    assert.equal(runs.length, 1, JSON.stringify(oracle.executions));
    assert.ok(runs[0].keyed, JSON.stringify(runs));
    assert.ok(oracle.totals.idempotent_replays >= 1, JSON.stringify(oracle.totals));
    assert.ok(oracle.totals.initializes >= 2, JSON.stringify(oracle.totals));
    // One key per invocation and tool.
    assert.notEqual(toolCallKey(toolCallId, "slow"), toolCallKey(toolCallId, "echo"));
  } finally {
    await cluster.stop();
  }
});
