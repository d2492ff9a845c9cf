// The Vercel AI SDK's MCP client (@ai-sdk/mcp) with ResumeTransport as its custom transport:
// it lists the tools and executes one, with no language model, against the mock cluster
// whose balancer cuts every stream.
import assert from "node:assert/strict";
import { test } from "node:test";
import { createMCPClient } from "@ai-sdk/mcp";
import { ResumeTransport } from "../index.js";
import { Cluster } from "./support/servers.mjs";

test("createMCPClient over ResumeTransport lists and executes a tool", async () => {
  const cluster = await Cluster.start("replicated", "--idle-timeout-ms", "0", "--cut-after-events", "3");
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
