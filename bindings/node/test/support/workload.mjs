// The demo's agent workload (examples/demo/workload.rs) run by the TypeScript SDK's Client,
// over its stock transport or over ResumeTransport: a keyed `slow` call whose stream the
// balancer cuts, then rounds of `generate`, `prepare` → `commit`, keyed and unkeyed
// `counter_increment`. Each call carries a unique tag in `_meta`, joined with what the
// cluster's oracle recorded for that tag.
import { randomUUID } from "node:crypto";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport, StreamableHTTPError } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ErrorCode, McpError } from "@modelcontextprotocol/sdk/types.js";
import { IDEMPOTENCY_META_KEY, ResumeTransport } from "../../index.js";

export const TAG = "io.github.mcp-resume/tag";
/** The demo's configuration: its sampling temperature, deadline, rounds and slow call. */
export const TEMPERATURE = 0.2;
export const CAPABILITIES = { experimental: { sampling: { temperature: TEMPERATURE } } };
const DEADLINE_MS = 3000;
const ROUNDS = 4;

/** The transport of `client` ("stock" or "bridged") to `url`. */
export function transport(client, url) {
  if (client === "stock") return new StreamableHTTPClientTransport(new URL(url));
  return new ResumeTransport(url, {
    callTimeout: DEADLINE_MS,
    reconnect: { initialDelay: 10, maxDelay: 200 },
    jitterSeed: 7,
  });
}

/** How the TypeScript client reported a failure: the bridge's `data.kind`, or the SDK's own. */
function label(error) {
  if (error instanceof McpError) {
    if (typeof error.data?.kind === "string") return error.data.kind;
    if (error.code === ErrorCode.RequestTimeout) return "sdk_timeout";
    return `rpc(${error.code})`;
  }
  if (error instanceof StreamableHTTPError) return `http_${error.code}`;
  return `error(${error?.message ?? error})`;
}

/** Runs the workload; what the client reported for each call. */
export async function runWorkload(url, preset, client) {
  const run = { preset, client, calls: [], connectError: null };
  const started = performance.now();
  const sdk = new Client({ name: "mcp-resume-node-workload", version: "1.0.0" }, { capabilities: CAPABILITIES });
  const call = async (tool, args, keyed) => {
    const tag = `${preset}/${client}/${String(run.calls.length).padStart(3, "0")}-${tool}`;
    const record = { tag, tool, keyed, ok: false, error: null };
    run.calls.push(record);
    const meta = { [TAG]: tag };
    if (keyed) meta[IDEMPOTENCY_META_KEY] = randomUUID();
    try {
      const result = await sdk.callTool({ name: tool, arguments: args, _meta: meta }, undefined, { timeout: DEADLINE_MS });
      if (result.isError) {
        record.error = "tool_error";
        return null;
      }
      record.ok = true;
      record.structuredContent = result.structuredContent ?? null;
      // The cluster echoes the tag of the call it answered: another tag (or none) means
      // another call's answer.
      record.echoedTag = result._meta?.[TAG] ?? null;
      return record.structuredContent;
    } catch (error) {
      record.error = label(error);
      return null;
    }
  };
  try {
    await sdk.connect(transport(client, url));
    await call("slow", { steps: 6, delay_ms: 20 }, true);
    for (let round = 0; round < ROUNDS; round++) {
      await call("generate", { prompt: `summary ${round}` }, false);
      const prepared = await call("prepare", { item: `order-${round}` }, true);
      if (typeof prepared?.record === "string") await call("commit", { record: prepared.record }, true);
      await call("counter_increment", {}, true);
      await call("counter_increment", {}, false);
    }
  } catch (error) {
    run.connectError = label(error);
  } finally {
    await sdk.close().catch(() => {});
  }
  run.seconds = (performance.now() - started) / 1000;
  return run;
}

/**
 * The run joined with the oracle: counts per the demo's table. A success is a silent wrong
 * answer when it is another call's (the result echoed another tag, or none), when nothing ran
 * under the call's tag, when the oracle says one of its executions was wrong, or when it is
 * a `generate` at another temperature than the negotiated one.
 */
export function judge(run, oracle) {
  const executions = (tag) => oracle.executions.filter((e) => e.tag === tag);
  const wrong = (e) => e.wrong_capability || e.unknown_record || e.duplicate_side_effect;
  const wrongAnswer = (c) =>
    c.echoedTag !== c.tag ||
    executions(c.tag).length === 0 ||
    executions(c.tag).some(wrong) ||
    (c.tool === "generate" && c.structuredContent?.temperature !== TEMPERATURE);
  const silent = run.calls.filter((c) => c.ok && wrongAnswer(c));
  const failed = run.calls.filter((c) => !c.ok);
  const errors = {};
  for (const c of failed) errors[c.error] = (errors[c.error] ?? 0) + 1;
  return {
    ...run,
    ok: run.calls.length - failed.length,
    silent: silent.map((c) => c.tag),
    failed,
    errors,
    duplicateKeyed: run.calls.filter((c) => c.keyed && executions(c.tag).some((e) => e.duplicate_side_effect)).length,
    initializes: oracle.totals.initializes,
    repeatedUnkeyed: oracle.totals.repeated_unkeyed_executions,
  };
}

/** The table the README shows. */
export function table(rows) {
  const head = `${"preset".padEnd(11)}${"client".padEnd(9)}${"calls".padStart(6)}${"ok".padStart(5)}${"SILENT".padStart(8)}${"failed".padStart(8)}${"inits".padStart(7)}${"secs".padStart(7)}  errors`;
  const lines = rows.map((r) =>
    `${r.preset.padEnd(11)}${r.client.padEnd(9)}${String(r.calls.length).padStart(6)}${String(r.ok).padStart(5)}` +
    `${String(r.silent.length).padStart(8)}${String(r.failed.length).padStart(8)}${String(r.initializes).padStart(7)}` +
    `${r.seconds.toFixed(2).padStart(7)}  ${Object.entries(r.errors).map(([k, n]) => `${k}=${n}`).join(" ")}`,
  );
  return [head, ...lines].join("\n");
}
