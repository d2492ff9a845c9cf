// What ResumeSafety costs a TypeScript SDK server: unkeyed `echo` calls per second through a
// replica of test/support/replica.mjs (the SDK's StreamableHTTPServerTransport under Express)
// with the guard (memory store) and without it, side by side: both replicas run at once and
// rounds alternate between them, so a load that comes and goes on the machine weighs on both.
// Per server kind: SSE answers with an event store, and JSON answers.
//
//   node build.mjs --release
//   node bench/guard-overhead.mjs [calls per round] [rounds] [calls in flight]
//
// The client is this package's (the Rust SDK), in this process; each round connects a fresh
// session and the clock covers the calls only. Prints the median calls/s of each, their ratio
// and the machine's load average before and after.
import { loadavg } from "node:os";
import { Client } from "../index.js";
import { Replica } from "../test/support/deployment.mjs";

const calls = Number(process.argv[2] ?? 1000);
const rounds = Number(process.argv[3] ?? 7);
const concurrency = Number(process.argv[4] ?? 8);

async function round(url) {
  const client = new Client(url, { era: "legacy", openListenStream: false });
  await client.connect();
  let left = calls;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (left-- > 0) await client.callTool("echo", { text: "hi" });
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  await client.close();
  return calls / seconds;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const load = () => loadavg().map((l) => l.toFixed(2)).join(" ");

console.log(`${calls} calls per round, ${rounds} rounds each, ${concurrency} in flight; load average (1 5 15 min) before: ${load()}`);
console.log("| server kind | bare calls/s | guarded calls/s | guarded / bare |");
console.log("|---|---|---|---|");
for (const kind of [{ name: "SSE answers, event store", args: [] }, { name: "JSON answers", args: ["--json"] }]) {
  const bare = await Replica.start("--port", "0", "--no-guard", ...kind.args);
  const guarded = await Replica.start("--port", "0", "--store", "memory", ...kind.args);
  try {
    // One round each to warm up (JIT, connections), not counted.
    await round(bare.url);
    await round(guarded.url);
    const rates = { bare: [], guarded: [] };
    for (let i = 0; i < rounds; i++) {
      rates.bare.push(await round(bare.url));
      rates.guarded.push(await round(guarded.url));
    }
    const [b, g] = [median(rates.bare), median(rates.guarded)];
    console.log(`| ${kind.name} | ${b.toFixed(0)} | ${g.toFixed(0)} | ${(g / b).toFixed(2)}x |`);
  } finally {
    await Promise.all([bare.stop(), guarded.stop()]);
  }
}
console.log(`load average after: ${load()}`);
