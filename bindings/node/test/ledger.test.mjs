// The ledger through the addon: the store choices read onto the SDK's builder, and a worker
// process killed mid-call on a Redis ledger whose calls the next process recovers (judged by
// the mock cluster's oracle). The rules are the Rust SDK's (tests/external/restart.rs); this
// proves the plumbing.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { Client, InvalidConfigError, OutcomeUnknownError } from "../index.js";
import { Cluster, freePort } from "./support/servers.mjs";
import { TAG } from "./support/workload.mjs";

const INDEX = fileURLToPath(new URL("../index.js", import.meta.url));

/** A redis-server of this file's own, on a free port; its URL. */
async function startRedis() {
  const binary = ["/usr/bin/redis-server", "/usr/sbin/redis-server", "/usr/local/bin/redis-server"]
    .find(existsSync);
  if (!binary) throw new Error("the ledger tests need redis-server (apt-get install redis-server)");
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), "mcp-resume-node-redis-"));
  const child = spawn(binary, ["--port", String(port), "--bind", "127.0.0.1", "--save", "",
    "--appendonly", "no", "--dir", dir], { stdio: "ignore" });
  const deadline = Date.now() + 10_000;
  for (;;) {
    const pong = await new Promise((resolve) => {
      const socket = connect(port, "127.0.0.1");
      socket.on("error", () => resolve(false));
      socket.on("data", (data) => { socket.end(); resolve(String(data).startsWith("+PONG")); });
      socket.on("connect", () => socket.write("PING\r\n"));
    });
    if (pong) break;
    if (Date.now() > deadline) throw new Error("redis-server did not start");
    await new Promise((r) => setTimeout(r, 10));
  }
  return { url: `redis://127.0.0.1:${port}`, stop: () => { child.kill("SIGKILL"); rmSync(dir, { recursive: true, force: true }); } };
}

let cluster;
let redis;
before(async () => {
  cluster = await Cluster.start("strict");
  redis = await startRedis();
});
after(async () => {
  await cluster?.stop();
  redis?.stop();
});

const executions = async (tag) => (await cluster.oracle()).executions.filter((e) => e.tag === tag);

test("the store choices are read onto the builder", async () => {
  for (const options of [
    { ledger: "bogus" },
    { ledger: "redis://127.0.0.1:1" },
    { ledgerIdentity: "w-1" },
    { ledger: "redis://127.0.0.1:1", ledgerIdentity: "has{brace}" },
  ]) {
    assert.throws(() => new Client(cluster.url, options), InvalidConfigError, JSON.stringify(options));
  }
  const none = new Client(cluster.url, { ledger: "none" });
  assert.equal((await none.callTool("echo", { text: "hi" })).content[0].text, "hi");
  assert.deepEqual(await none.recover(), []);
  await none.close();
});

const WORKER = `
  import { Client } from ${JSON.stringify(INDEX)};
  const client = new Client(process.env.URL, { era: "legacy", ledger: process.env.REDIS,
    ledgerIdentity: process.env.IDENTITY, callTimeout: 60_000 });
  await client.connect();
  const slow = { steps: 3, delay_ms: 300 };
  const tag = ${JSON.stringify(TAG)};
  client.callTool("counter_increment", slow, { idempotencyKey: "js-key", meta: { [tag]: "js-keyed" } }).catch(() => {});
  client.callTool("counter_increment", slow, { meta: { [tag]: "js-unkeyed" } }).catch(() => {});
  setInterval(() => {}, 1000); // killed while waiting
`;

test("a killed worker's calls are recovered by the next process", async () => {
  const identity = `js-worker-${process.pid}`;
  const worker = spawn(process.execPath, ["--input-type=module", "-e", WORKER], {
    env: { ...process.env, URL: cluster.url, REDIS: redis.url, IDENTITY: identity },
    stdio: "inherit",
  });
  try {
    const deadline = Date.now() + 20_000;
    // Both side effects ran: their entries were written before their requests left.
    while ((await executions("js-keyed")).length === 0 || (await executions("js-unkeyed")).length === 0) {
      assert.equal(worker.exitCode, null, "the worker exited");
      assert.ok(Date.now() < deadline, "the worker's calls never ran");
      await new Promise((r) => setTimeout(r, 10));
    }
  } finally {
    worker.kill("SIGKILL");
  }

  const client = new Client(cluster.url, { era: "legacy", ledger: redis.url, ledgerIdentity: identity, callTimeout: 60_000 });
  const calls = await client.recover();
  assert.deepEqual(calls.map((c) => c.params._meta[TAG]).sort(), ["js-keyed", "js-unkeyed"]);
  for (const call of calls) {
    assert.equal(call.method, "tools/call");
    assert.equal(call.toolName, "counter_increment");
    assert.deepEqual(call.arguments, { steps: 3, delay_ms: 300 });
    assert.equal(call.stage, "sent");
    if (call.idempotencyKey === "js-key") {
      const result = await call.outcome();
      assert.ok(result.structuredContent, JSON.stringify(result));
    } else {
      assert.equal(call.idempotencyKey, null);
      await assert.rejects(call.outcome(), OutcomeUnknownError);
    }
  }
  assert.deepEqual(await client.recover(), [], "every entry went with its call");
  await client.close();
  assert.equal((await executions("js-keyed")).length, 1);
  assert.equal((await executions("js-unkeyed")).length, 1);
  assert.equal((await cluster.oracle()).totals.duplicate_side_effects, 0);
});
