// Calls per second from Node next to Rust: `echo` calls through the mock cluster (replicated,
// 3 instances, no cuts), made by this package's Client from JavaScript and by the Rust SDK
// itself on the addon's runtime (the client the package wraps), in alternating rounds in one
// process, against the same server, in the same run.
//
//   node build.mjs --release --features bench
//   MCP_RESUME_MOCK_CLUSTER=target/release/mock-cluster node bench/calls-per-second.mjs [calls] [rounds]
import { createRequire } from "node:module";
import { Client } from "../index.js";
import { Cluster } from "../test/support/servers.mjs";

const native = createRequire(import.meta.url)("../mcp-resume.node");
if (typeof native.benchRustCalls !== "function") {
  console.error("build the addon with the bench feature: node build.mjs --release --features bench");
  process.exit(2);
}
const calls = Number(process.argv[2] ?? 2000);
const rounds = Number(process.argv[3] ?? 5);

async function nodeCalls(url, n, concurrency) {
  const client = new Client(url, { openListenStream: false });
  await client.connect();
  let left = n;
  const started = performance.now();
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (left-- > 0) await client.callTool("echo", { text: "hi" });
  }));
  const seconds = (performance.now() - started) / 1000;
  await client.close();
  return seconds;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const cluster = await Cluster.start("replicated", "--idle-timeout-ms", "0");
try {
  console.log("in flight  Node calls/s  Rust calls/s  ratio  Node µs/call  Rust µs/call");
  for (const concurrency of [1, 16, 64]) {
    const node = [];
    const rust = [];
    for (let round = 0; round < rounds; round++) {
      node.push(await nodeCalls(cluster.url, calls, concurrency));
      rust.push(await native.benchRustCalls(cluster.url, calls, concurrency));
    }
    const [n, r] = [calls / median(node), calls / median(rust)];
    console.log(
      `${String(concurrency).padStart(9)}  ${n.toFixed(0).padStart(12)}  ${r.toFixed(0).padStart(12)}  ` +
      `${(n / r).toFixed(2).padStart(5)}  ${(1e6 / n).toFixed(1).padStart(12)}  ${(1e6 / r).toFixed(1).padStart(12)}`,
    );
  }
} finally {
  await cluster.stop();
}
