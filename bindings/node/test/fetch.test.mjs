// resumeFetch under the TypeScript SDK's own Streamable HTTP transport (what Mastra's
// MCPClient runs): a request the host cancels (its timeout sends only
// `notifications/cancelled`) leaves no POST waiting, and a call cut short by close() says it
// may have run.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { McpError } from "@modelcontextprotocol/sdk/types.js";
import { BRIDGE_ERROR_CODES, resumeFetch } from "../index.js";
import { LoggingServer } from "./support/servers.mjs";

const FAST = { reconnect: { initialDelay: 10, maxDelay: 100, maxAttempts: 2 } };

let server;
before(async () => {
  server = await LoggingServer.v1();
});
after(() => server.stop());

/** resumeFetch, recording each POST's JSON-RPC message and whether its fetch has settled. */
function recordingFetch(options) {
  const fetch = resumeFetch(options);
  /** @type {{ message: any, settled: boolean }[]} */
  const posts = [];
  const recording = (url, init) => {
    const response = fetch(url, init);
    if (init?.method === "POST") {
      const post = { message: JSON.parse(init.body), settled: false };
      posts.push(post);
      const settle = () => {
        post.settled = true;
      };
      response.then(settle, settle);
    }
    return response;
  };
  recording.posts = posts;
  recording.close = fetch.close;
  return recording;
}

async function connected(fetch) {
  const client = new Client({ name: "host", version: "1" });
  await client.connect(new StreamableHTTPClientTransport(new URL(server.url), { fetch }));
  return client;
}

/** Resolves once `condition()` holds; fails after `timeoutMs`. */
async function until(condition, what, timeoutMs = 3000) {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`not within ${timeoutMs} ms: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

test("a call the host cancels (its timeout) leaves no POST waiting for an answer", async () => {
  const fetch = recordingFetch(FAST);
  const client = await connected(fetch);
  const mark = server.mark();
  for (let i = 0; i < 5; i += 1) {
    // The SDK's timeout sends notifications/cancelled, which the bridge never answers.
    await assert.rejects(client.callTool({ name: "block", arguments: {} }, undefined, { timeout: 100 }), McpError);
  }
  const calls = () => fetch.posts.filter((p) => p.message.method === "tools/call");
  assert.equal(calls().length, 5);
  await until(() => calls().every((p) => p.settled), "every cancelled call's POST settled");
  // Cancelled on the server too.
  await until(() => server.find(mark, "cancelled").length === 5, "five calls cancelled on the server");
  await client.close();
  await fetch.close();
});

test("a call cut short by close() is an error saying it may have run", async () => {
  const fetch = recordingFetch(FAST);
  const client = await connected(fetch);
  const mark = server.mark();
  const call = client.callTool({ name: "block", arguments: {} });
  const failed = assert.rejects(call, (error) => {
    assert.ok(error instanceof McpError, String(error));
    assert.equal(error.code, BRIDGE_ERROR_CODES.closed);
    assert.equal(error.data?.kind, "closed");
    assert.equal(error.data?.mayHaveRun, true, JSON.stringify(error.data));
    return true;
  });
  await server.waitFor(mark, "tool", (e) => e.name === "block");
  await fetch.close();
  await failed;
  await client.close();
});
