// @ts-check
// The resume-aware client: node examples/quickstart.mjs [url]
// (e.g. against `cargo run -p mock-server --bin mock-cluster -- --preset strict`).
import { randomUUID } from "node:crypto";
import { Client, OutcomeUnknownError } from "mcp-resume";

const url = process.argv[2] ?? "http://127.0.0.1:8080/mcp";
const client = new Client(url, { callTimeout: 30_000 });
const server = await client.connect();
console.log(`connected to ${server.serverInfo.name} (${server.protocolVersion})`);

for (const tool of await client.listTools()) console.log(`- ${tool.name}`);
const echoed = await client.callTool("echo", { text: "hi" });
console.log(echoed.content.map((c) => c.text).join(""));

// A call with a side effect: its key lets the client re-send it safely after an
// interruption, where the server deduplicates by key.
try {
  const counted = await client.callTool("counter_increment", {}, { idempotencyKey: randomUUID() });
  console.log(counted.structuredContent);
} catch (error) {
  if (!(error instanceof OutcomeUnknownError)) throw error;
  console.log("interrupted: it may or may not have run; check before retrying");
}

// Cancellation: an AbortSignal cancels the call on the server.
await client.callTool("slow", { steps: 50, delay_ms: 20 }, { signal: AbortSignal.timeout(100) })
  .catch((error) => console.log(`slow: ${error.name}`));
await client.close();
