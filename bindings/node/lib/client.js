// The Rust SDK's client for JavaScript. Results are the server's JSON (the shapes of the
// TypeScript SDK's types); failures are the classes of errors.js; every rule (resume,
// re-initialization, keyed re-sends, deadlines) runs in Rust.
import { handlerOptions } from "./handlers.js";
import { nativeOptions, parsed, toJson } from "./json.js";
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
    this.#native = new NativeClient(String(url), nativeOptions(options), handlerOptions(options), caller);
  }

  /**
   * Picks up every call the ledger holds for this endpoint and this client does not have in
   * flight: what the process this one replaces left behind. The one way a fleet restarts:
   * build the client on the same ledger (`ledger: "redis://..."` with the worker's
   * `ledgerIdentity`) and call this first. Each is a `RecoveredCall`: the entry's facts, and
   * `outcome()` (a promise: the result, or `OutcomeUnknownError` for an unkeyed call that may
   * have run, which is never re-sent). Rejects with `LedgerError` when the ledger cannot be
   * read, and with `TooLargeError` when the entries are more than a JavaScript string holds
   * (the calls picked up are then cancelled). Ask every call's `outcome()`: until it is
   * asked, the call (and once it ends, its result) is kept for as long as this client is,
   * whether or not the `RecoveredCall` is still referenced.
   */
  async recover() {
    const entries = JSON.parse(await this.#native.recover());
    return entries.map(({ handle, ...entry }) => new RecoveredCall(entry, () => parsed(this.#native.recoveredOutcome(handle))));
  }

  /** `initialize` (or the 2026-07-28 discovery): the server's InitializeResult. */
  connect() { return parsed(this.#native.connect()); }

  /** Every tool (following `nextCursor`). */
  listTools() { return parsed(this.#native.listTools()); }
  /** One page of `tools/list`: `{tools, nextCursor?}`. */
  listToolsPage(cursor) { return parsed(settled(() => this.#native.listToolsPage(cursor))); }

  /**
   * `tools/call`. Options: `idempotencyKey` (re-sent after an interruption only where the
   * server deduplicates), `timeout` (ms, across every resume and re-send), `signal`
   * (AbortSignal: cancels the call on the server, stops every resume and re-send of it),
   * `meta` (added to `_meta`), `progressToken`.
   */
  callTool(name, args = {}, options = {}) {
    const { signal, ...rest } = options;
    return parsed(withSignal(signal, (token) => this.#native.callTool(name, toJson(args), callOptions(rest), token)));
  }

  /** Any request (`method`, `params`): its result. Options: `timeout`, `signal`, `meta`. */
  request(method, params, options = {}) {
    const { signal, ...rest } = options;
    return parsed(withSignal(signal, (token) => this.#native.request(method, toJson(params), callOptions(rest), token)));
  }

  /** Sends a notification. */
  notify(method, params) { this.#native.notify(method, toJson(params)); }
  /** `ping`. */
  ping() { return this.#native.ping(); }

  /** Every resource. */
  listResources() { return parsed(this.#native.listResources()); }
  /** One page of `resources/list`. */
  listResourcesPage(cursor) { return parsed(settled(() => this.#native.listResourcesPage(cursor))); }
  /** Every resource template. */
  listResourceTemplates() { return parsed(this.#native.listResourceTemplates()); }
  /** One page of `resources/templates/list`. */
  listResourceTemplatesPage(cursor) { return parsed(settled(() => this.#native.listResourceTemplatesPage(cursor))); }
  /** `resources/read`: `{contents}`. */
  readResource(uri) { return parsed(settled(() => this.#native.readResource(uri))); }
  /** `resources/subscribe`: updates arrive on `notifications()`. */
  subscribeResource(uri) { return settled(() => this.#native.subscribeResource(uri)); }
  /** `resources/unsubscribe`. */
  unsubscribeResource(uri) { return settled(() => this.#native.unsubscribeResource(uri)); }

  /** Every prompt. */
  listPrompts() { return parsed(this.#native.listPrompts()); }
  /** One page of `prompts/list`. */
  listPromptsPage(cursor) { return parsed(settled(() => this.#native.listPromptsPage(cursor))); }
  /** `prompts/get` with string arguments. */
  getPrompt(name, args) { return parsed(settled(() => this.#native.getPrompt(name, args))); }

  /**
   * `completion/complete` of `argument` (`{name, value}`) of `ref` (`{type: "ref/prompt",
   * name}` or `{type: "ref/resource", uri}`), with the values of arguments already chosen
   * (`context`): the result's `completion` (`{values, total?, hasMore?}`).
   */
  complete(ref, argument, context) {
    return parsed(settled(() => this.#native.complete(ref, argument.name, argument.value, context)));
  }

  /** `logging/setLevel`: messages arrive on `notifications()`. */
  setLoggingLevel(level) { return settled(() => this.#native.setLoggingLevel(level)); }
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

/**
 * What `start()` returns, or a promise rejected with what it threw: the addon refuses an
 * argument of the wrong type by throwing, and every failure of a call rejects its promise
 * (thrown, it would escape the caller's `.catch()`).
 * @template T
 * @param {() => Promise<T>} start
 * @returns {Promise<T>}
 */
function settled(start) {
  try {
    return start();
  } catch (error) {
    return Promise.reject(error);
  }
}

/**
 * Per-call options as the addon takes them: `meta` and `progressToken` as JSON text.
 * @param {Record<string, any>} options
 */
function callOptions({ meta, progressToken, ...rest }) {
  return { ...rest, meta: toJson(meta), progressToken: toJson(progressToken) };
}

/**
 * A call `Client.recover()` picked up: `entryId`, `method`, `params`, `toolName`,
 * `arguments`, `idempotencyKey`, `stage` (`"sent"`, `"awaiting_input"` or `"task"`),
 * `taskId`, `deadline` (ms since the epoch); `outcome()` once for its result.
 */
export class RecoveredCall {
  #outcome;

  constructor(entry, outcome) {
    Object.assign(this, entry);
    this.#outcome = outcome;
  }

  /** The call's result (its outcome asked for once), or the typed error. */
  outcome() { return this.#outcome(); }
}
