// The demo's agent workload (examples/demo/workload.rs), run by the official TypeScript MCP SDK
// client instead of ours:
//   node workload.mjs '<config JSON>'
// config: {url, tagPrefix, capabilities, slowSteps, slowDelayMs, rounds, callTimeoutMs}.
// Same tools in the same order, same tags in `_meta`, same client capabilities, one deadline
// per call. The client keeps its stock settings (reconnection included): what a user of the
// SDK gets. Prints one final line {"summary": ...}: what the client reported for each call,
// and every HTTP exchange it made. Exits 0 whatever the calls' outcomes; non-zero only when
// the script itself breaks.
import { randomUUID } from "node:crypto";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import {
  StreamableHTTPClientTransport,
  StreamableHTTPError,
} from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ErrorCode, McpError } from "@modelcontextprotocol/sdk/types.js";

const TAG = "io.github.mcp-resume/tag";
const KEY = "io.github.mcp-resume/idempotency-key";

const config = JSON.parse(process.argv[2] ?? "null");
if (!config?.url) {
  console.error("usage: node workload.mjs '{\"url\": ..., \"tagPrefix\": ..., ...}'");
  process.exit(2);
}

// Every HTTP exchange, so a test can see what the client did on the wire: resumes
// (GET + Last-Event-ID), statuses, and whether a tool call was ever POSTed twice.
const http = [];
const recordingFetch = async (url, init = {}) => {
  const headers = new Headers(init.headers);
  const entry = { method: init.method ?? "GET", status: null };
  if (headers.get("last-event-id")) entry.lastEventId = headers.get("last-event-id");
  if (typeof init.body === "string") {
    try {
      const msg = JSON.parse(init.body);
      entry.rpc = msg.method ?? "response";
      if (msg.method === "tools/call") entry.tag = msg.params?._meta?.[TAG] ?? null;
    } catch {
      entry.rpc = "unparsable";
    }
  }
  http.push(entry);
  try {
    const response = await fetch(url, init);
    entry.status = response.status;
    const rejected = response.headers.get("mcp-resume-rejected");
    if (rejected) entry.resumeRejected = rejected;
    return response;
  } catch (err) {
    entry.error = String(err?.cause?.code ?? err?.message ?? err);
    throw err;
  }
};

// How the client reported a failed call, named by what it exposes.
function describeError(err) {
  if (err instanceof McpError) {
    if (err.code === ErrorCode.RequestTimeout) return { kind: "timeout", message: err.message };
    const dataCode = typeof err.data?.code === "string" ? err.data.code : null;
    return { kind: "rpc", code: err.code, dataCode, message: err.message };
  }
  if (err instanceof StreamableHTTPError) {
    return { kind: "http", status: err.code, message: err.message };
  }
  return { kind: "transport", message: String(err?.message ?? err) };
}

async function main() {
  const client = new Client(
    { name: "mcp-resume-ts-workload", version: "1.0.0" },
    { capabilities: config.capabilities },
  );
  const transportErrors = [];
  const transport = new StreamableHTTPClientTransport(new URL(config.url), {
    fetch: recordingFetch,
  });
  client.onerror = (err) => transportErrors.push(String(err?.message ?? err));

  const summary = { connect: { ok: true }, calls: [], http, transportErrors };
  try {
    await client.connect(transport);
    summary.protocolVersion = transport.protocolVersion ?? null;
  } catch (err) {
    summary.connect = { ok: false, error: describeError(err) };
  }

  const call = async (tool, args, keyed) => {
    const n = summary.calls.length;
    const tag = `${config.tagPrefix}/${String(n).padStart(3, "0")}-${tool}`;
    const meta = { [TAG]: tag };
    if (keyed) meta[KEY] = randomUUID();
    const options = { timeout: config.callTimeoutMs };
    let progress = 0;
    if (tool === "slow") options.onprogress = () => { progress += 1; };
    const record = { tag, tool, keyed };
    const started = performance.now();
    try {
      const result = await client.callTool({ name: tool, arguments: args, _meta: meta }, undefined, options);
      record.ok = true;
      record.structuredContent = result.structuredContent ?? null;
      record.echoedTag = result._meta?.[TAG] ?? null;
      record.isError = result.isError === true;
    } catch (err) {
      record.ok = false;
      record.error = describeError(err);
    }
    record.elapsedMs = performance.now() - started;
    if (tool === "slow") record.progress = progress;
    summary.calls.push(record);
    return record.ok ? record.structuredContent : null;
  };

  if (summary.connect.ok) {
    await call("slow", { steps: config.slowSteps, delay_ms: config.slowDelayMs }, true);
    for (let round = 0; round < config.rounds; round++) {
      await call("generate", { prompt: `summary ${round}` }, false);
      const prepared = await call("prepare", { item: `order-${round}` }, true);
      const record = prepared?.record;
      if (typeof record === "string") await call("commit", { record }, true);
      await call("counter_increment", {}, true);
      await call("counter_increment", {}, false);
    }
    try {
      await transport.terminateSession();
    } catch (err) {
      summary.terminate = describeError(err);
    }
  }
  await client.close();
  console.log(JSON.stringify({ summary }));
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err?.stack ?? String(err));
    process.exit(1);
  },
);
