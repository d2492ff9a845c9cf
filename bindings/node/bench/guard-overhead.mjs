// What ResumeSafety costs a TypeScript SDK server: unkeyed `echo` calls per second through a
// replica of test/support/replica.mjs (the SDK's StreamableHTTPServerTransport under Express)
// with the guard (memory store) and without it, side by side: both replicas run at once and
// rounds alternate between them, so a load that comes and goes on the machine weighs on both.
// Per server kind: SSE answers with an event store, and JSON answers.
//
//   node build.mjs --release
//   node bench/guard-overhead.mjs [calls per round] [rounds] [calls in flight] [--main-thread] [--only sse|json]
//
// The client is this package's (the Rust SDK), in this process; each round connects a fresh
// session and the clock covers the calls only. Prints the median calls/s of each, their ratio,
// each replica's CPU time per call (the nanoseconds its threads ran, from /proc: Linux), and
// the machine's load average before and after. Rounds are many and short (25 of 300 calls by
// default): the machine's speed drifts over seconds, and short rounds interleaved finely
// cancel that drift better than a few long ones. A second bare replica runs beside them as a
// control: its ratio to the first (A/A) is what two identical servers differ by in this run,
// the noise the guarded ratio is to be read against (each Node process's own JIT and heap move
// it by several percent); the guarded replica is also read against the mean of both bare ones,
// and the server CPU it adds per call against theirs.
//
// `--main-thread` adds each replica's CPU per call on its JavaScript thread alone: the rest is
// V8's helper threads (the collector's concurrent marking and sweeping, the optimizing
// compiler), several hundred µs a call that come and go with the heap and the JIT rather than
// with the work done, so the guard's own cost reads with less noise there. `--only sse` or
// `--only json` runs one server kind.
import { readdirSync, readFileSync } from "node:fs";
import { loadavg } from "node:os";
import { Client } from "../index.js";
import { Replica } from "../test/support/deployment.mjs";

const flags = process.argv.slice(2);
const only = flags.includes("--only") ? flags[flags.indexOf("--only") + 1] : undefined;
const mainThread = flags.includes("--main-thread");
const positional = flags.filter((a, i) => !a.startsWith("--") && flags[i - 1] !== "--only");
const calls = Number(positional[0] ?? 300);
const rounds = Number(positional[1] ?? 25);
const concurrency = Number(positional[2] ?? 8);

/**
 * A process's CPU time so far (µs): what its threads ran, each one's /proc schedstat (Linux);
 * with `main`, its JavaScript thread's alone (the thread whose id is the process's).
 */
function cpu(pid, main = false) {
  let ns = 0;
  for (const task of main ? [String(pid)] : readdirSync(`/proc/${pid}/task`)) {
    try {
      ns += Number(readFileSync(`/proc/${pid}/task/${task}/schedstat`, "utf8").split(" ")[0]);
    } catch {
      // A thread that ended between the listing and the read.
    }
  }
  return ns / 1000;
}

/** One round: calls per second, and the server's CPU µs per call. */
async function round(replica) {
  const url = replica.url;
  const client = new Client(url, { era: "legacy", openListenStream: false });
  await client.connect();
  let left = calls;
  const started = performance.now();
  const cpuBefore = cpu(replica.pid);
  const mainBefore = cpu(replica.pid, true);
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (left-- > 0) await client.callTool("echo", { text: "hi" });
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  const cpuPerCall = (cpu(replica.pid) - cpuBefore) / calls;
  const mainPerCall = (cpu(replica.pid, true) - mainBefore) / calls;
  await client.close();
  return { rate: calls / seconds, cpuPerCall, mainPerCall };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const load = () => loadavg().map((l) => l.toFixed(2)).join(" ");

console.log(`${calls} calls per round, ${rounds} rounds each, ${concurrency} in flight; load average (1 5 15 min) before: ${load()}`);
const mainColumns = mainThread ? " JavaScript thread µs/call, bare | control | guarded | added by the guard |" : "";
console.log(`| server kind | bare calls/s | guarded calls/s | guarded / bare | control / bare (A/A) | guarded / mean of both bare | server CPU µs/call, bare | control | guarded | added by the guard |${mainColumns}`);
console.log(`|---|---|---|---|---|---|---|---|---|---|${mainThread ? "---|---|---|---|" : ""}`);
const kinds = [
  { key: "sse", name: "SSE answers, event store", args: [] },
  { key: "json", name: "JSON answers", args: ["--json"] },
];
for (const kind of kinds.filter((k) => only === undefined || k.key === only)) {
  const bare = await Replica.start("--port", "0", "--no-guard", ...kind.args);
  const control = await Replica.start("--port", "0", "--no-guard", ...kind.args);
  const guarded = await Replica.start("--port", "0", "--store", "memory", ...kind.args);
  const replicas = { bare, control, guarded };
  try {
    // One round each to warm up (JIT, connections), not counted.
    for (const replica of Object.values(replicas)) await round(replica);
    const runs = { bare: [], control: [], guarded: [] };
    for (let i = 0; i < rounds; i++) {
      for (const [name, replica] of Object.entries(replicas)) runs[name].push(await round(replica));
    }
    const rate = (name) => median(runs[name].map((r) => r.rate));
    const cpu = (name, field = "cpuPerCall") => median(runs[name].map((r) => r[field]));
    const [b, c, g] = [rate("bare"), rate("control"), rate("guarded")];
    const [cb, cc, cg] = [cpu("bare"), cpu("control"), cpu("guarded")];
    // Read against both bare replicas: each alone moves by what A/A shows.
    const againstBoth = g / ((b + c) / 2);
    const added = cg - (cb + cc) / 2;
    let main = "";
    if (mainThread) {
      const [mb, mc, mg] = [cpu("bare", "mainPerCall"), cpu("control", "mainPerCall"), cpu("guarded", "mainPerCall")];
      main = ` ${mb.toFixed(0)} | ${mc.toFixed(0)} | ${mg.toFixed(0)} | ${(mg - (mb + mc) / 2).toFixed(0)} |`;
    }
    console.log(
      `| ${kind.name} | ${b.toFixed(0)} | ${g.toFixed(0)} | ${(g / b).toFixed(2)}x | ${(c / b).toFixed(2)}x | ${againstBoth.toFixed(2)}x | ${cb.toFixed(0)} | ${cc.toFixed(0)} | ${cg.toFixed(0)} | ${added.toFixed(0)} |${main}`,
    );
  } finally {
    await Promise.all(Object.values(replicas).map((r) => r.stop()));
  }
}
console.log(`load average after: ${load()}`);
