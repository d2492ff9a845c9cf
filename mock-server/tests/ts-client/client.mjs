// Runs the official TypeScript MCP SDK client against the mock cluster:
//   node client.mjs <mcp-url>
// Prints one JSON line per step and a final {"summary": ...} line; exits non-zero on error.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const TAG = "io.github.mcp-resume/tag";
const KEY = "io.github.mcp-resume/idempotency-key";

const url = process.argv[2];
if (!url) {
  console.error("usage: node client.mjs <mcp-url>");
  process.exit(2);
}

const textOf = (r) => (r.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("");
const log = (obj) => console.log(JSON.stringify(obj));

async function main() {
  const client = new Client(
    { name: "mock-server-ts-client", version: "1.0.0" },
    { capabilities: { experimental: { sampling: { temperature: 0.3 } } } },
  );
  const transport = new StreamableHTTPClientTransport(new URL(url));
  await client.connect(transport);
  const summary = {
    protocolVersion: transport.protocolVersion ?? null,
    sessionId: transport.sessionId ?? null,
    resumeSafety: client.getServerCapabilities()?.experimental?.resumeSafety ?? null,
  };
  log({ step: "connected", ...summary });

  await client.ping();
  const { tools } = await client.listTools();
  summary.tools = tools.map((t) => t.name).sort();
  log({ step: "tools", tools: summary.tools });

  const call = (name, args, tag, extraMeta = {}, options = undefined) =>
    client.callTool({ name, arguments: args, _meta: { [TAG]: tag, ...extraMeta } }, undefined, options);

  const echoed = await call("echo", { text: "hello" }, "ts-echo");
  summary.echo = textOf(echoed);
  summary.echoTag = echoed._meta?.[TAG] ?? null;
  let progress = 0;
  summary.slow = textOf(
    await call("slow", { steps: 3, delay_ms: 10 }, "ts-slow", {}, { onprogress: () => { progress += 1; } }),
  );
  summary.slowProgress = progress;
  summary.generate = textOf(await call("generate", { prompt: "a haiku" }, "ts-generate"));
  const prepared = await call("prepare", { item: "order-1" }, "ts-prepare");
  summary.record = prepared.structuredContent?.record ?? textOf(prepared);
  summary.commit = textOf(await call("commit", { record: summary.record }, "ts-commit"));
  const first = await call("counter_increment", {}, "ts-counter", { [KEY]: "ts-key-1" });
  const again = await call("counter_increment", {}, "ts-counter", { [KEY]: "ts-key-1" });
  summary.counter = textOf(first);
  summary.counterAgain = textOf(again);
  summary.counterHash = first._meta?.["io.github.mcp-resume/capability-hash"] ?? null;
  summary.counterTags = [first._meta?.[TAG] ?? null, again._meta?.[TAG] ?? null];
  log({ step: "calls", ...summary });

  await transport.terminateSession();
  await client.close();
  log({ summary });
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err?.stack ?? String(err));
    process.exit(1);
  },
);
