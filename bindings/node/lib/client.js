// The Rust SDK's client for JavaScript. Results are the server's JSON (the shapes of the
// TypeScript SDK's types); failures are the classes of errors.js; every rule (resume,
// re-initialization, keyed re-sends, deadlines) runs in Rust.
import { handlerOptions } from "./handlers.js";
import { NativeClient } from "./native.js";
import { withSignal } from "./signal.js";
import { iterate } from "./streams.js";
import { callerContext } from "./telemetry.js";
import { refuseUnsupported } from "./unsupported.js";

/** A resume-aware MCP client for one Streamable HTTP endpoint. */
export class Client {
  #native;

  /**
   * Checks the options and builds the client (throws InvalidConfigError); touches no
   * network. Handlers (`onSampling`, `onElicitation`, `onRoots`) declare their capability at
   * `initialize`. The TypeScript SDK's `authProvider` (no OAuth here: pass `bearerToken`),
   * `requestInit`, `fetch`, `reconnectionOptions` and `sessionId` throw InvalidConfigError
   * rather than be ignored.
   */
  constructor(url, options = {}) {
    refuseUnsupported(options);
    const caller = options.otlpEndpoint ? callerContext() : undefined;
    this.#native = new NativeClient(String(url), options, handlerOptions(options), caller);
  }

  /** `initialize` (or the 2026-07-28 discovery): the server's InitializeResult. */
  connect() { return this.#native.connect(); }

  /** Every tool (following `nextCursor`). */
  listTools() { return this.#native.listTools(); }
  /** One page of `tools/list`: `{tools, nextCursor?}`. */
  listToolsPage(cursor) { return this.#native.listToolsPage(cursor); }

  /**
   * `tools/call`. Options: `idempotencyKey` (re-sent after an interruption only where the
   * server deduplicates), `timeout` (ms, across every resume and re-send), `signal`
   * (AbortSignal: cancels the call on the server, stops every resume and re-send of it),
   * `meta` (added to `_meta`), `progressToken`.
   */
  callTool(name, args = {}, options = {}) {
    const { signal, ...rest } = options;
    return withSignal(signal, (token) => this.#native.callTool(name, args, rest, token));
  }

  /** Any request (`method`, `params`): its result. Options: `timeout`, `signal`, `meta`. */
  request(method, params, options = {}) {
    const { signal, ...rest } = options;
    return withSignal(signal, (token) => this.#native.request(method, params, rest, token));
  }

  /** Sends a notification. */
  notify(method, params) { this.#native.notify(method, params); }
  /** `ping`. */
  ping() { return this.#native.ping(); }

  /** Every resource. */
  listResources() { return this.#native.listResources(); }
  /** One page of `resources/list`. */
  listResourcesPage(cursor) { return this.#native.listResourcesPage(cursor); }
  /** Every resource template. */
  listResourceTemplates() { return this.#native.listResourceTemplates(); }
  /** One page of `resources/templates/list`. */
  listResourceTemplatesPage(cursor) { return this.#native.listResourceTemplatesPage(cursor); }
  /** `resources/read`: `{contents}`. */
  readResource(uri) { return this.#native.readResource(uri); }
  /** `resources/subscribe`: updates arrive on `notifications()`. */
  subscribeResource(uri) { return this.#native.subscribeResource(uri); }
  /** `resources/unsubscribe`. */
  unsubscribeResource(uri) { return this.#native.unsubscribeResource(uri); }

  /** Every prompt. */
  listPrompts() { return this.#native.listPrompts(); }
  /** One page of `prompts/list`. */
  listPromptsPage(cursor) { return this.#native.listPromptsPage(cursor); }
  /** `prompts/get` with string arguments. */
  getPrompt(name, args) { return this.#native.getPrompt(name, args); }

  /**
   * `completion/complete` of `argument` (`{name, value}`) of `ref` (`{type: "ref/prompt",
   * name}` or `{type: "ref/resource", uri}`), with the values of arguments already chosen
   * (`context`): the result's `completion` (`{values, total?, hasMore?}`).
   */
  complete(ref, argument, context) {
    return this.#native.complete(ref, argument.name, argument.value, context);
  }

  /** `logging/setLevel`: messages arrive on `notifications()`. */
  setLoggingLevel(level) { return this.#native.setLoggingLevel(level); }
  /** Tells the server the roots changed. */
  notifyRootsChanged() { this.#native.notifyRootsChanged(); }

  /** Closes the session (DELETE): later calls fail with ClosedError, iterators end. */
  close() { return this.#native.close(); }

  /** `"auto"` until the era is known, then `"legacy"` or `"modern"`. */
  get era() { return this.#native.era; }
  /** The current `Mcp-Session-Id` (legacy era), or null. */
  get sessionId() { return this.#native.sessionId; }
  /** The resume-safety checks in force, once connected, or null. */
  get extensionStatus() { return this.#native.extensionStatus ?? null; }

  /** Session events sent from now on (resumes, re-initializations, re-sends, …). */
  events(options) { return iterate(this.#native.events(), options); }
  /** Server notifications sent from now on (progress, log messages, list changes, …). */
  notifications(options) { return iterate(this.#native.notifications(), options); }
}
