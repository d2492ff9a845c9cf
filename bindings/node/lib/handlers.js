// The JavaScript side of the addon's handlers (src/handlers.rs): one `dispatch` per client
// running the application's callbacks, each with an AbortSignal that fires when the server
// cancels its request. Messages and answers cross as JSON text (json.js).
import { RpcError } from "./errors.js";
import { toJson } from "./json.js";

const KINDS = { sampling: "onSampling", elicitation: "onElicitation", roots: "onRoots", request: "onServerRequest" };

/**
 * The addon's `handlers` option for the callbacks in `options` (`onSampling`,
 * `onElicitation`, `onRoots`, `onServerRequest`), or undefined when there are none.
 */
export function handlerOptions(options) {
  const callbacks = {};
  for (const [kind, name] of Object.entries(KINDS)) {
    const callback = options[name];
    if (callback === undefined || callback === null) continue;
    if (typeof callback !== "function") throw new TypeError(`${name} must be a function`);
    callbacks[kind] = callback;
  }
  if (Object.keys(callbacks).length === 0) return undefined;
  return {
    dispatch: dispatcher(callbacks),
    sampling: "sampling" in callbacks,
    elicitation: "elicitation" in callbacks,
    roots: "roots" in callbacks,
    serverRequest: "request" in callbacks,
  };
}

function dispatcher(callbacks) {
  const running = new Map();
  const run = call(callbacks, running);
  return async (text) => {
    const message = JSON.parse(text);
    if (message.type === "abort") {
      running.get(message.id)?.abort(new Error("the server cancelled its request"));
      return "null";
    }
    if (message.type === "warning") {
      // An answer the SDK's types refused: the server was answered "internal error"; what is
      // wrong quotes the answer, so it is told here only.
      process.emitWarning(`mcp-resume: the ${KINDS[message.kind]} handler for ${message.method} ${message.message}`);
      return "null";
    }
    const answer = await run(message);
    try {
      // JSON writes a symbol or a function as nothing: `{result}` would lose its member and
      // reach the SDK as neither answer nor error.
      if ("result" in answer && toJson(answer.result) === undefined) {
        throw new TypeError(`a ${typeof answer.result}, which JSON cannot write`);
      }
      return toJson(answer);
    } catch (error) {
      // An answer JSON cannot hold (a cycle, a symbol).
      process.emitWarning(`mcp-resume: the ${KINDS[message.kind]} handler for ${message.method} answered with what is not JSON: ${describe(error)}`);
      return toJson({ error: { code: -32603, message: "internal error" } });
    }
  };
}

/** Runs the callback of a `call` message: its answer, `{result}` or `{error}`. */
function call(callbacks, running) {
  return async (message) => {
    const controller = new AbortController();
    running.set(message.id, controller);
    const context = { signal: controller.signal, method: message.method, requestId: message.requestId };
    try {
      const callback = callbacks[message.kind];
      const result = message.kind === "request"
        ? await callback({ method: message.method, params: message.params ?? undefined }, context)
        : message.kind === "roots"
          ? await callback(context)
          : await callback(message.params, context);
      return { result: result ?? {} };
    } catch (error) {
      // Reading what was thrown runs the application's code again (getters, a Proxy's traps,
      // toString), which may throw in turn: that is this handler's failure too, reported as
      // such rather than left to reject the dispatch unreported.
      try {
        if (error instanceof RpcError) {
          return { error: { code: error.code, message: error.message, data: error.data ?? null } };
        }
      } catch {
        // Not an answer the server can be given: the internal error below.
      }
      // Its text may hold what the server should not see: logged here, not sent. A handler
      // that ends because the server cancelled its request has no one to answer.
      if (!controller.signal.aborted) process.emitWarning(`mcp-resume: the ${KINDS[message.kind]} handler for ${message.method} failed: ${describe(error)}`);
      return { error: { code: -32603, message: "internal error" } };
    } finally {
      running.delete(message.id);
    }
  };
}

/**
 * What a handler threw, as text for its warning: its stack, else its string; never throws,
 * whatever was thrown (an object without `toString`, one whose `toString` or `stack` throws,
 * a revoked Proxy).
 */
function describe(error) {
  try {
    return error instanceof Error ? String(error.stack) : String(error);
  } catch {
    return `a value of type ${typeof error} that cannot be written as text`;
  }
}
