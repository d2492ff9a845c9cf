// OpenTelemetry from Node.js: the client's spans and metrics reach an OTLP/HTTP collector
// (exported by the Rust side), each call a child of the span active in JavaScript.
import assert from "node:assert/strict";
import { AsyncLocalStorage } from "node:async_hooks";
import { once } from "node:events";
import http from "node:http";
import { after, before, test } from "node:test";
import * as api from "@opentelemetry/api";
import { Client as SdkClient } from "@modelcontextprotocol/sdk/client/index.js";
import { Client, ResumeTransport } from "../index.js";
import { Cluster } from "./support/servers.mjs";

// What an application's SDK installs: a context manager that follows async calls.
class AsyncContexts {
  #storage = new AsyncLocalStorage();
  active() { return this.#storage.getStore() ?? api.ROOT_CONTEXT; }
  with(context, fn, thisArg, ...args) { return this.#storage.run(context, () => fn.call(thisArg, ...args)); }
  bind(_context, target) { return target; }
  enable() { return this; }
  disable() { this.#storage.disable(); return this; }
}
api.context.setGlobalContextManager(new AsyncContexts());

// The caller's span, as the application's own tracing would have it active.
const PARENT = { traceId: "0af7651916cd43dd8448eb211c80319c", spanId: "b7ad6b7169203331", traceFlags: api.TraceFlags.SAMPLED };

/** An OTLP/HTTP collector on 127.0.0.1 keeping every request body by path. */
async function collector() {
  const bodies = new Map();
  const server = http.createServer((request, response) => {
    const chunks = [];
    request.on("data", (chunk) => chunks.push(chunk));
    request.on("end", () => {
      bodies.set(request.url, Buffer.concat([bodies.get(request.url) ?? Buffer.alloc(0), ...chunks]));
      response.writeHead(200, { "content-type": "application/x-protobuf", "content-length": "0" });
      response.end();
    });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return { url: `http://127.0.0.1:${server.address().port}`, bodies, close: () => server.close() };
}

let cluster;
let otlp;
before(async () => {
  cluster = await Cluster.start("replicated", "--idle-timeout-ms", "0");
  otlp = await collector();
});
after(async () => {
  otlp.close();
  await cluster.stop();
});

test("spans and metrics reach an OTLP collector, under the span active in JavaScript", async () => {
  const client = new Client(cluster.url, { openListenStream: false, otlpEndpoint: otlp.url });
  const active = api.trace.setSpan(api.context.active(), api.trace.wrapSpanContext(PARENT));
  const result = await api.context.with(active, () => client.callTool("echo", { text: "traced" }));
  assert.equal(result.content[0].text, "traced");
  // Closing flushes what the exporters hold.
  await client.close();

  const spans = otlp.bodies.get("/v1/traces") ?? Buffer.alloc(0);
  assert.ok(spans.includes("tools/call echo") && spans.includes("mcp.method.name"));
  // The call's span is in the caller's trace, under the caller's span (raw bytes in the
  // protobuf).
  assert.ok(spans.includes(Buffer.from(PARENT.traceId, "hex")), "the caller's trace");
  assert.ok(spans.includes(Buffer.from(PARENT.spanId, "hex")), "the caller's span as parent");
  const metrics = otlp.bodies.get("/v1/metrics") ?? Buffer.alloc(0);
  assert.ok(metrics.includes("mcp.client.operation.duration"));
});

test("ResumeTransport's spans reach the OTLP collector, flushed by close()", async () => {
  const before = (otlp.bodies.get("/v1/traces") ?? Buffer.alloc(0)).length;
  const t = new ResumeTransport(cluster.url, { openListenStream: false, otlpEndpoint: otlp.url });
  const host = new SdkClient({ name: "host", version: "1" });
  await host.connect(t);
  const result = await host.callTool({ name: "echo", arguments: { text: "bridged" } });
  assert.equal(result.content[0].text, "bridged");
  await t.close();

  // Only what this transport exported: the earlier tests' spans came before.
  const spans = (otlp.bodies.get("/v1/traces") ?? Buffer.alloc(0)).subarray(before);
  assert.ok(spans.length > 0, "spans were exported");
  assert.ok(spans.includes("tools/call"));
});

test("without otlpEndpoint nothing is propagated", async () => {
  const traced = ((await cluster.oracle()).traces ?? []).length;
  const client = new Client(cluster.url, { openListenStream: false });
  const active = api.trace.setSpan(api.context.active(), api.trace.wrapSpanContext(PARENT));
  await api.context.with(active, () => client.callTool("echo", { text: "untraced" }));
  await client.close();
  // The cluster records every request that carries trace context: none did.
  assert.equal(((await cluster.oracle()).traces ?? []).length, traced, "no trace context on the wire");
});
