// Era translation, and the TypeScript SDK v2 client: a host client that speaks only the legacy
// lifecycle (`initialize`, sessions) reaches servers that speak only 2026-07-28 through
// ResumeTransport; the v2 client (@modelcontextprotocol/client) runs over it too.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, test } from "node:test";
import { Client as ClientV2 } from "@modelcontextprotocol/client";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { LATEST_PROTOCOL_VERSION } from "@modelcontextprotocol/sdk/types.js";
import { IDEMPOTENCY_META_KEY, ResumeTransport } from "../index.js";
import { Cluster, LoggingServer, expecting } from "./support/servers.mjs";
import { TAG } from "./support/workload.mjs";

const started = [];
after(() => Promise.all(started.map((s) => s.stop())));
const start = async (server) => {
  started.push(await server);
  return started.at(-1);
};

const textOf = (result) => result.content.map((c) => c.text).join("");

test("the v1 client reaches the mock cluster in the 2026-07-28 era", async () => {
  // What the bridge's client sends in each 2026-07-28 request: the tasks extension it declares
  // on top of the host client's (empty) capabilities.
  const capabilities = { extensions: { "io.modelcontextprotocol/tasks": {} } };
  const cluster = await start(Cluster.start("replicated", "--era", "modern", ...expecting(capabilities)));
  const transport = new ResumeTransport(cluster.url);
  const client = new Client({ name: "legacy-only", version: "1" });
  await client.connect(transport);
  // The answer is built from server/discover, in the version the client asked for.
  assert.equal(transport.protocolVersion, LATEST_PROTOCOL_VERSION);
  const { tools } = await client.listTools();
  assert.ok(tools.some((t) => t.name === "echo"));
  const result = await client.callTool({ name: "echo", arguments: { text: "modern" }, _meta: { [TAG]: "modern/echo" } });
  assert.equal(textOf(result), "modern");
  // The 2026-07-28 era has no sessions.
  assert.equal(transport.sessionId, undefined);
  await client.close();
  const oracle = await cluster.oracle();
  assert.equal(oracle.totals.initializes, 0, JSON.stringify(oracle.totals));
  const runs = oracle.executions.filter((e) => e.tag === "modern/echo");
  assert.ok(runs.length === 1 && !runs[0].wrong_capability, JSON.stringify(runs));
});

test("the v1 client reaches the TypeScript SDK v2 server in modern-only mode", async () => {
  const server = await start(LoggingServer.v2());
  const client = new Client({ name: "legacy-only", version: "1" });
  await client.connect(new ResumeTransport(server.url));
  const result = await client.callTool({ name: "echo", arguments: { text: "across eras" } });
  assert.equal(textOf(result), "across eras");
  await client.close();
  await server.waitFor(0, "tool", (e) => e.name === "echo");
  // What the server saw: 2026-07-28 requests only, never the legacy handshake.
  const methods = server.find(0, "http_in").map((e) => e.rpc_method);
  assert.ok(methods.includes("server/discover"), methods.join());
  assert.ok(!methods.includes("initialize"), methods.join());
  assert.equal(server.find(0, "tool", (e) => e.name === "echo").length, 1);
});

test("the v2 client runs over ResumeTransport, its cut calls recovered", async () => {
  const cluster = await start(Cluster.start("strict", "--idle-timeout-ms", "0", "--cut-after-events", "3"));
  const client = new ClientV2({ name: "v2-client", version: "1" });
  await client.connect(new ResumeTransport(cluster.url, { reconnect: { initialDelay: 10, maxDelay: 200 } }));
  const tag = "v2/slow";
  const meta = { [TAG]: tag, [IDEMPOTENCY_META_KEY]: randomUUID() };
  // Its stream is cut after 3 events; strict rejects the resume: the bridge re-initializes
  // and re-sends the keyed call, invisibly to the client.
  const result = await client.callTool({ name: "slow", arguments: { steps: 6, delay_ms: 20 }, _meta: meta });
  assert.equal(result.isError ?? false, false);
  await client.close();
  // An execution is recorded when it starts: once the call was answered, every run of it is
  // there. `slow` has no side effect the oracle would flag, so the runs are counted: the
  // re-sent call was answered from the stored result, never run again.
  const oracle = await cluster.oracle();
  assert.ok(oracle.totals.initializes >= 2, JSON.stringify(oracle.totals));
  const runs = oracle.executions.filter((e) => e.tag === tag);
  assert.equal(runs.length, 1, JSON.stringify(oracle.executions));
  assert.ok(runs[0].keyed && !runs[0].wrong_capability, JSON.stringify(runs));
  assert.ok(oracle.totals.idempotent_replays >= 1, JSON.stringify(oracle.totals));
});
