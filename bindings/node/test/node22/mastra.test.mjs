// Mastra (@mastra/mcp's MCPClient, @mastra/core's Agent) over resumeFetch, with no real
// language model: a scripted one makes the agent call a tool. Mastra's MCPClient takes no
// transport, only a `fetch`; its own retry (reconnect, then run the tool call again, on an
// error whose message looks like a broken connection) is always on. Needs Node.js >= 22.13:
// test.sh runs this directory with the pinned Node 22.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";
import { Agent } from "@mastra/core/agent";
import { MCPClient } from "@mastra/mcp";
import { InvalidConfigError, resumeFetch, withToolCallKeys } from "../../index.js";
import { Cluster, LoggingServer, expecting, freePort } from "../support/servers.mjs";

const CUTS = ["--idle-timeout-ms", "0", "--cut-after-events", "3"];
// What Mastra's MCPClient declares at `initialize` (the MCP Apps extension, always; elicitation
// only with an inputRequests handler), told the oracle.
const CAPABILITIES = { extensions: { "io.modelcontextprotocol/ui": {} } };
const FAST = { reconnect: { initialDelay: 10, maxDelay: 100, maxAttempts: 2 } };

/**
 * A language model (the AI SDK's v2 interface, which Mastra's Agent runs) that calls `tool`
 * with `input` under `toolCallId`, then answers "done"; `prompts` holds what it was sent.
 */
function scriptedModel(tool, input, toolCallId) {
  const prompts = [];
  const usage = { inputTokens: 1, outputTokens: 1, totalTokens: 2 };
  return {
    prompts,
    specificationVersion: "v2",
    provider: "scripted",
    modelId: "scripted",
    supportedUrls: {},
    async doGenerate({ prompt }) {
      prompts.push(prompt);
      if (prompts.length === 1) {
        const call = { type: "tool-call", toolCallId, toolName: tool, input: JSON.stringify(input) };
        return { content: [call], finishReason: "tool-calls", usage, warnings: [] };
      }
      return { content: [{ type: "text", text: "done" }], finishReason: "stop", usage, warnings: [] };
    },
    async doStream() {
      throw new Error("the tests call generate()");
    },
  };
}

/** An agent on `tools` whose scripted model calls `s_block` (tool call "call-1"). */
function blockingAgent(tools) {
  const model = scriptedModel("s_block", {}, "call-1");
  return { model, agent: new Agent({ id: "agent", name: "agent", instructions: "Use the tools.", model, tools }) };
}

/** What the model was told of its tool calls: the tool results of its last prompt. */
const toolResults = (model) =>
  model.prompts.at(-1).filter((m) => m.role === "tool").flatMap((m) => m.content);

/** resumeFetch, counting the sessions the host client starts (its `initialize` requests). */
function countingFetch(options) {
  const fetch = resumeFetch(options);
  const counted = (url, init) => {
    if (init?.method === "POST" && JSON.parse(init.body).method === "initialize") counted.initializes += 1;
    return fetch(url, init);
  };
  counted.initializes = 0;
  return counted;
}

test("MCPClient over resumeFetch lists and runs a tool, its cut stream resumed underneath", async () => {
  const cluster = await Cluster.start("replicated", ...CUTS, ...expecting(CAPABILITIES));
  const mcp = new MCPClient({
    servers: { s: { url: new URL(cluster.url), fetch: resumeFetch(), enableProgressTracking: true } },
  });
  try {
    const progress = [];
    await mcp.progress.onUpdate("s", (params) => progress.push(params.progress));
    const tools = await mcp.listTools();
    assert.ok("s_echo" in tools && "s_slow" in tools, Object.keys(tools).join());
    // The `slow` call's stream is cut after 3 of its 6 progress events and resumed.
    const result = await tools.s_slow.execute({ steps: 6, delay_ms: 20 }, {});
    assert.equal(result.isError ?? false, false, JSON.stringify(result));
    // Its progress reached Mastra's handler through the GET stream, every step once.
    assert.deepEqual(progress, [1, 2, 3, 4, 5, 6]);
  } finally {
    await mcp.disconnect();
  }
  const oracle = await cluster.oracle();
  await cluster.stop();
  assert.equal(oracle.totals.initializes, 1, JSON.stringify(oracle.totals));
  assert.ok(oracle.totals.resumes >= 1, JSON.stringify(oracle.totals));
  assert.equal(oracle.executions.filter((e) => e.tool === "slow").length, 1);
  assert.equal(oracle.totals.wrong_capability, 0, JSON.stringify(oracle.executions));
});

test("Mastra's reconnect-and-retry never re-runs a call interrupted by a server crash; the model is told it may have run", async () => {
  const server = await LoggingServer.v1("--port", String(await freePort()));
  const fetch = countingFetch(FAST);
  const mcp = new MCPClient({ servers: { s: { url: new URL(server.url), fetch } } });
  try {
    const tools = await mcp.listTools();
    const { model, agent } = blockingAgent(tools);
    const mark = server.mark();
    const run = agent.generate("Run block.");
    await server.waitFor(mark, "tool", (e) => e.name === "block");
    await server.restart();
    const { text, steps } = await run;
    assert.equal(text, "done");
    // The explicit outcome, as Mastra hands a failed tool call over: to the model in its next
    // prompt, and to the application in the run's steps.
    const [told] = toolResults(model);
    assert.equal(told.toolCallId, "call-1");
    assert.equal(told.output.type, "error-text", JSON.stringify(told));
    assert.match(told.output.value, /^outcome_unknown: .*may or may not have run$/);
    assert.deepEqual(steps[0].content.find((c) => c.type === "tool-result").output, told.output);
    const echo = await tools.s_echo.execute({ text: "after the restart" }, {});
    assert.equal(echo.content[0].text, "after the restart");
    // Mastra never reconnected to run it again (one host session throughout), and across
    // both server processes the interrupted call ran once, sent once.
    assert.equal(fetch.initializes, 1);
    await server.synced(mark);
    assert.equal(server.find(mark, "tool", (e) => e.name === "block").length, 1);
    assert.equal(server.find(mark, "http_in", (e) => e.tool === "block").length, 1);
  } finally {
    await mcp.disconnect();
    await server.stop();
  }
});

// Stock, for comparison (the README's framework table): Mastra's own transport.
test("stock: Mastra's own transport leaves a call interrupted by a server crash unanswered until its timeout; its retry does not fire, and the next call fails", async () => {
  const server = await LoggingServer.v1("--port", String(await freePort()));
  // Its resume is refused (404: the session died with the server) and it gives up without
  // failing the call: Mastra's `timeout` (60 s by default) is the only end of the wait.
  const mcp = new MCPClient({ servers: { s: { url: new URL(server.url), timeout: 3000 } } });
  try {
    const tools = await mcp.listTools();
    const { model, agent } = blockingAgent(tools);
    const mark = server.mark();
    const run = agent.generate("Run block.");
    const restarted = await server.restartMidCall(mark);
    assert.equal((await run).text, "done");
    // A timeout is not an error Mastra reconnects and retries on: the model is told so.
    const [told] = toolResults(model);
    assert.deepEqual(told.output, { type: "error-text", value: "Request timed out" });
    // It keeps the session that died with the server, and this error's message is not one
    // it reconnects on either: the next call fails.
    await assert.rejects(tools.s_echo.execute({ text: "after the restart" }, {}), /Session not found/);
    await server.synced(restarted);
    // Never reconnected, never sent again; ran once.
    assert.equal(server.find(restarted, "http_in", (e) => e.rpc_method === "initialize").length, 0);
    assert.equal(server.find(restarted, "http_in", (e) => e.tool === "block").length, 0);
    assert.equal(server.find(0, "tool", (e) => e.name === "block").length, 1);
  } finally {
    await mcp.disconnect().catch(() => {});
    await server.stop();
  }
});

test("withToolCallKeys: the agent's tool call is keyed by its id, and a re-run of it is answered from the stored result", async () => {
  const cluster = await Cluster.start("strict", ...CUTS, ...expecting(CAPABILITIES));
  const mcp = new MCPClient({ servers: { s: { url: new URL(cluster.url), fetch: resumeFetch() } } });
  try {
    const tools = withToolCallKeys(await mcp.listTools());
    const toolCallId = `call-${randomUUID()}`;
    // The same tool call twice, as a run resumed or re-run from the conversation makes it.
    const texts = [];
    for (let run = 0; run < 2; run += 1) {
      const model = scriptedModel("s_slow", { steps: 4, delay_ms: 10 }, toolCallId);
      const agent = new Agent({ id: "agent", name: "agent", instructions: "Use the tools.", model, tools });
      assert.equal((await agent.generate("Run slow.")).text, "done");
      const [told] = toolResults(model);
      assert.equal(told.output.type, "json", JSON.stringify(told));
      texts.push(JSON.stringify(told.output.value.content));
    }
    assert.equal(texts[1], texts[0]);
  } finally {
    await mcp.disconnect();
  }
  const oracle = await cluster.oracle();
  await cluster.stop();
  // The cut call's resume was refused: re-sent with its key; then the second run of the same
  // tool call answered from the stored result. One execution, keyed.
  const runs = oracle.executions.filter((e) => e.tool === "slow");
  assert.equal(runs.length, 1, JSON.stringify(oracle.executions));
  assert.ok(runs[0].keyed && !runs[0].wrong_capability, JSON.stringify(runs));
  assert.ok(oracle.totals.idempotent_replays >= 1, JSON.stringify(oracle.totals));
});

test("the application's headers reach the server, a change of them or a transport option fails loudly, and disconnect ends the session", async () => {
  const server = await LoggingServer.v1("--auth");
  const { token } = await server.admin("/admin/token");
  let authorization = `Bearer ${token}`;
  const fetch = resumeFetch();
  // Mastra reads `requestInit` once; a custom fetch is how a host changes headers per request.
  const changing = (url, init) => {
    const headers = new Headers(init.headers);
    headers.set("authorization", authorization);
    return fetch(url, { ...init, headers });
  };
  const mcp = new MCPClient({ servers: { s: { url: new URL(server.url), fetch: changing } } });
  try {
    const tools = await mcp.listTools();
    const echo = await tools.s_echo.execute({ text: "with a token" }, {});
    assert.equal(echo.content[0].text, "with a token");
    assert.equal(server.find(0, "auth_refused").length, 0);
    authorization = "Bearer another";
    await assert.rejects(tools.s_echo.execute({ text: "never sent" }, {}), InvalidConfigError);
    assert.equal(server.find(0, "tool", (e) => e.arguments.text === "never sent").length, 0);
    // Mastra's disconnect closes its transport, which sends nothing: the real session is
    // closed (DELETE) all the same.
    await mcp.disconnect();
    await server.waitFor(0, "http_in", (e) => e.method === "DELETE");
  } finally {
    await mcp.disconnect();
    await server.stop();
  }
  assert.throws(() => resumeFetch({ fetch: globalThis.fetch }), InvalidConfigError);
  assert.throws(() => resumeFetch({ authProvider: {} }), InvalidConfigError);
});
