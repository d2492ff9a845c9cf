// Idempotency keys from a framework's tool call id: the Vercel AI SDK hands each tool's
// `execute` the model's `toolCallId` (Mastra: `context.agent.toolCallId`) but sends no `_meta`
// with the call. `withToolCallKeys` runs each `execute` with that id in an AsyncLocalStorage,
// and ResumeTransport or resumeFetch (which the call reaches in the same asynchronous context)
// puts the key derived from it in the `tools/call`'s `_meta`: a retry of the same invocation
// (the AI SDK's `maxRetries`, Mastra's reconnect-and-retry, a re-run step) carries the same
// key, and a server that deduplicates keys runs it once.
import { AsyncLocalStorage } from "node:async_hooks";
import { createHash } from "node:crypto";

/** The tool call whose `execute` is running, for ResumeTransport. */
export const toolCall = new AsyncLocalStorage();

/** The key of one tool invocation (the Python binding derives the same one). */
export function toolCallKey(toolCallId, tool) {
  const digest = createHash("sha256").update(`${tool}\0${toolCallId}`).digest("hex");
  return `tool-call-${digest.slice(0, 40)}`;
}

/**
 * The AI SDK's tools (`await mcp.tools()`) or Mastra's (`await mcp.listTools()`) with every
 * `execute` keyed by its tool call id: a new object of new tools, each otherwise the same (a
 * Mastra `Tool` stays one).
 */
export function withToolCallKeys(tools) {
  const keyed = {};
  for (const [name, tool] of Object.entries(tools)) {
    if (typeof tool?.execute !== "function") {
      keyed[name] = tool;
      continue;
    }
    const execute = (args, options) =>
      toolCall.run(toolCallIdOf(options), () => tool.execute(args, options));
    keyed[name] = Object.assign(Object.create(Object.getPrototypeOf(tool)), tool, { execute });
  }
  return keyed;
}

/** The tool call id in an `execute`'s options: the AI SDK's, or a Mastra agent's. */
function toolCallIdOf(options) {
  return options?.toolCallId ?? options?.agent?.toolCallId ?? null;
}

/** `message` with the key of the tool call running in this context, if it is a call and has none. */
export function keyed(message, metaKey) {
  const id = toolCall.getStore();
  if (!id || message?.method !== "tools/call") return message;
  const params = message.params ?? {};
  if (params._meta?.[metaKey] !== undefined) return message;
  return {
    ...message,
    params: { ...params, _meta: { ...params._meta, [metaKey]: toolCallKey(id, String(params.name)) } },
  };
}
