// The TypeScript SDK's Transport (also the Vercel AI SDK's MCPTransport) on the Rust SDK's
// message bridge: the host client keeps its API and sends JSON-RPC messages; underneath, an
// mcp-resume session resumes, re-initializes and re-sends keyed calls where that is safe. What
// JSON-RPC cannot say arrives as a JSON-RPC error with `data.kind` ("outcome_unknown", …).
import { nativeOptions, toJson } from "./json.js";
import { keyed } from "./keys.js";
import { NativeBridge, bridgeConstants } from "./native.js";
import { iterate } from "./streams.js";
import { refuseUnsupported } from "./unsupported.js";

/** `await client.connect(new ResumeTransport(url, options))`. */
export class ResumeTransport {
  #bridge;
  /**
   * @type {Promise<unknown> | null} The delivery loop, once started; it never rejects, and
   * resolves with what the host's `onclose` threw, if it did.
   */
  #delivering = null;
  /** Whether `close()` was called: an `onclose` that throws then fails it. */
  #closing = false;
  /**
   * @type {Map<string, () => void>} By the key of a request's answer (`answerKey`): what
   * stops listening to its `options.signal`, until its answer comes.
   */
  #aborts = new Map();

  /** @type {((message: any) => void) | undefined} Set by the host client. */
  onmessage = undefined;
  /** @type {((error: Error) => void) | undefined} Set by the host client. */
  onerror = undefined;
  /** @type {(() => void) | undefined} Set by the host client. */
  onclose = undefined;
  /** @type {string | undefined} The protocol version the host negotiated. */
  protocolVersion = undefined;

  /**
   * A transport to `url`. Options: those of `Client` (`era`, `reconnect`, `resendPolicy`,
   * `callTimeout`, `headers`, `bearerToken`, …) and `trustToolAnnotations`, `capacity`;
   * touches no network until the host sends `initialize`. The TypeScript SDK transport's
   * `authProvider` (no OAuth here: pass `bearerToken`), `requestInit`, `fetch`,
   * `reconnectionOptions` and `sessionId` throw InvalidConfigError rather than be ignored.
   */
  constructor(url, options = {}) {
    refuseUnsupported(options);
    this.#bridge = new NativeBridge(String(url), nativeOptions(options), options);
  }

  /** The real session's `Mcp-Session-Id` (legacy era), once initialized. */
  get sessionId() {
    return this.#bridge.sessionId ?? undefined;
  }

  /** Starts delivering the server's messages to `onmessage`. */
  async start() {
    if (this.#delivering !== null) {
      throw new Error("ResumeTransport already started (a Client starts it in connect())");
    }
    this.#delivering = this.#deliver();
  }

  async #deliver() {
    try {
      for (;;) {
        const text = await this.#bridge.recv();
        if (text === null) break;
        // What goes wrong with one message goes to onerror and ends nothing else: the
        // transport ends with the bridge only (the host fails every call in flight then).
        try {
          const message = JSON.parse(text);
          if (typeof message?.method !== "string" && message?.id !== undefined) {
            // An answer: its request's signal has nothing left to cancel.
            this.#forget(JSON.stringify(message.id));
          }
          this.#contain(this.onmessage?.(message));
        } catch (error) {
          this.#report(error);
        }
      }
    } catch (error) {
      this.#report(error);
    }
    for (const key of [...this.#aborts.keys()]) this.#forget(key);
    // The SDK's Client calls its own onclose from this one, so the host's code runs here: what
    // it throws fails the host's close(), as the SDK's own transport's close() would (with no
    // close() under way, the session ended by itself: onerror), and is never an unhandled
    // rejection of this loop, which kills the process.
    try {
      this.#contain(this.onclose?.());
    } catch (error) {
      if (this.#closing) return error;
      this.#report(error);
    }
    return undefined;
  }

  /**
   * What a host callback returned, when it is a promise (an async `onmessage` or `onclose`):
   * what it rejects with goes to `onerror`, instead of an unhandled rejection, which ends the
   * process. Not waited for: one that never settles holds nothing (`close()` included).
   */
  #contain(returned) {
    const then = /** @type {any} */ (returned)?.then;
    if (typeof then === "function") then.call(returned, undefined, (error) => this.#report(error));
  }

  /**
   * `error` to `onerror`. One that `onerror` throws in turn is the host's bug, reported as a
   * process warning: escaping here it would end the delivery loop for good, every call in
   * flight left unanswered, with the session still open.
   */
  #report(error) {
    const warn = (thrown) => {
      const text = (e) => (e instanceof Error && e.stack) || String(e);
      process.emitWarning(`ResumeTransport: onerror threw ${text(thrown)}`, {
        code: "MCP_RESUME_ONERROR_THREW",
        detail: `while reporting: ${text(error)}`,
      });
    };
    try {
      const reported = /** @type {any} */ (this.onerror?.(/** @type {Error} */ (error)));
      // An async onerror: what it rejects with is what it throws, never an unhandled rejection.
      const then = reported?.then;
      if (typeof then === "function") then.call(reported, undefined, warn);
    } catch (thrown) {
      warn(thrown);
    }
  }

  /**
   * One JSON-RPC message to the server; resolves once the bridge took it. A `tools/call` made
   * by a tool that `withToolCallKeys` wrapped gets the key of its tool call id. A request's
   * `options.signal` (the Vercel AI SDK's `abortSignal` and timeout, which it passes only
   * this way) cancels it as `notifications/cancelled` does: never resumed or re-sent again.
   */
  async send(message, options) {
    const text = toJson(keyed(message, bridgeConstants.idempotencyMetaKey));
    const signal = options?.signal;
    if (!signal || typeof message?.method !== "string" || message.id === undefined || message.id === null) {
      await this.#bridge.send(text);
      return;
    }
    const key = answerKey(message.id);
    const cancel = () => {
      const reason = signal.reason instanceof Error ? signal.reason.message : String(signal.reason ?? "aborted");
      const cancelled = { jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: message.id, reason } };
      // A bridge closing meanwhile has nothing left to cancel.
      this.#bridge.send(toJson(cancelled)).catch(() => {});
    };
    const onAbort = () => {
      this.#aborts.delete(key);
      cancel();
    };
    // Listening from the moment the request goes: an abort while it waits for its place in
    // the bridge ends that wait, and it is never sent.
    const sent = this.#bridge.send(text);
    if (signal.aborted) {
      cancel();
    } else {
      this.#forget(key);
      this.#aborts.set(key, () => signal.removeEventListener("abort", onAbort));
      signal.addEventListener("abort", onAbort, { once: true });
    }
    try {
      await sent;
    } catch (error) {
      this.#forget(key);
      throw error;
    }
  }

  /** Stops listening to the signal of the request `key` (answered, cancelled, or refused). */
  #forget(key) {
    this.#aborts.get(key)?.();
    this.#aborts.delete(key);
  }

  /**
   * Closes the session (DELETE); `onclose` is called once the last message was delivered. A
   * DELETE that fails goes to `onerror` and the transport closes all the same: the SDK's own
   * transport never fails its `close()` for that, and a host closing after an error must not
   * be left with a half-closed client. Only an `onclose` that throws fails it, with its error;
   * an async one is not waited for, and what it rejects with goes to `onerror`.
   */
  async close() {
    this.#closing = true;
    try {
      await this.#bridge.close();
    } catch (error) {
      this.#report(error);
    }
    if (this.#delivering === null) {
      this.#delivering = Promise.resolve();
      this.#contain(this.onclose?.());
    }
    const thrown = await this.#delivering;
    if (thrown !== undefined) {
      // Once: a second close() has nothing left to fail with.
      this.#delivering = Promise.resolve();
      throw thrown;
    }
  }

  /** Called by the host client with the negotiated protocol version. */
  setProtocolVersion(version) {
    this.protocolVersion = version;
  }

  /** The real session's events (resumes, re-initializations, re-sends) from now on. */
  events(options) {
    return iterate(this.#bridge.events(), options);
  }
}

/**
 * The key of the answer to a request of id `id`: the JSON text of that id as the answer's
 * `JSON.parse` gives it back. A BigInt id is sent as its integer (`toJson`), which
 * `JSON.stringify` alone refuses, and one past 2^53 comes back as the nearest number.
 */
function answerKey(id) {
  return JSON.stringify(JSON.parse(/** @type {string} */ (toJson(id))));
}
