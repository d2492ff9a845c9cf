// A `fetch` for MCP clients that take a fetch function but no transport (Mastra's
// `MCPClient`): the host client's Streamable HTTP transport keeps its HTTP code, and every
// request it makes is answered here, in memory, by the Rust SDK's message bridge, which makes
// the real requests with every recovery rule. To the host, one endpoint that answers a request
// with JSON, sends everything else on its GET stream, and never fails a call the way a broken
// connection does: an interrupted call is a JSON-RPC error with `data.kind`, as over
// ResumeTransport.
import { randomUUID } from "node:crypto";
import { InvalidConfigError } from "./errors.js";
import { nativeOptions, toJson } from "./json.js";
import { keyed } from "./keys.js";
import { NativeBridge, bridgeConstants } from "./native.js";
import { refuseUnsupported } from "./unsupported.js";

const META_KEY = bridgeConstants.idempotencyMetaKey;
const DEFAULT_CAPACITY = 64;
// The headers of the HTTP exchange itself: set per request by the host's transport. Any
// other header is the application's (credentials, tenant), sent by the bridge on every
// request of the session it starts.
const EXCHANGE_HEADERS = new Set([
  "accept",
  "content-type",
  "content-length",
  "last-event-id",
  "mcp-method",
  "mcp-name",
  "mcp-protocol-version",
  "mcp-session-id",
]);
const encoder = new TextEncoder();

/**
 * A `fetch` whose MCP sessions run on mcp-resume: `new MCPClient({servers: {s: {url, fetch:
 * resumeFetch()}}})`. Options: those of `ResumeTransport`. One per server: a new
 * `initialize` through it closes the session it served before.
 */
export function resumeFetch(options = {}) {
  refuseUnsupported(options);
  const endpoint = new Endpoint(options);
  const fetch = (input, init) => endpoint.handle(input, init);
  fetch.close = () => endpoint.close();
  return fetch;
}

/** The endpoint the host's transport talks to: at most one session at a time. */
class Endpoint {
  #options;
  /** @type {Session | null} */
  #session = null;

  constructor(options) {
    this.#options = options;
  }

  async handle(input, init) {
    const request = new Request(input, init);
    // The host's own signal: a Request's copy of it stops following it once the Request is
    // collected, and the GET stream's must outlive its Request.
    const signal = init?.signal ?? (input instanceof Request ? input.signal : null);
    switch (request.method) {
      case "POST":
        return this.#post(request, signal);
      case "GET":
        return this.#listen(request, signal);
      case "DELETE":
        return this.#delete(request);
      default:
        return new Response(null, { status: 405, headers: { allow: "GET, POST, DELETE" } });
    }
  }

  async close() {
    const session = this.#session;
    this.#session = null;
    await session?.close();
  }

  async #post(request, signal) {
    let message;
    try {
      message = JSON.parse(await request.text());
    } catch {
      return rpcErrorResponse(400, null, -32700, "parse error: the body is not JSON");
    }
    if (Array.isArray(message) || message === null || typeof message !== "object") {
      return rpcErrorResponse(400, null, -32600, "invalid request: one JSON-RPC message per POST");
    }
    let session;
    if (request.headers.has("mcp-session-id")) {
      session = this.#known(request);
      if (session === null) return sessionNotFound();
    } else if (message.method === "initialize" || message.method === "server/discover") {
      session = await this.#starting(request);
    } else {
      return rpcErrorResponse(400, message.id ?? null, -32600, "invalid request: no Mcp-Session-Id header (initialize first)");
    }
    session.checkHeaders(request.headers);
    if (typeof message.method !== "string" || message.id === undefined || message.id === null) {
      // A notification, or the answer to one of the server's requests. The host's
      // notifications/cancelled (the TypeScript SDK's timeout and abort send only that) ends
      // the wait of the request it names: the bridge never answers a cancelled request.
      if (message.method === "notifications/cancelled") session.cancelled(message);
      await session.send(message);
      return new Response(null, { status: 202 });
    }
    const answer = await session.call(message, signal);
    if (answer === null) {
      // Cancelled by the host: no answer, as a server gives none (the host's transport reads
      // a 202 to a request as nothing to deliver).
      return new Response(null, { status: 202 });
    }
    const headers = { "content-type": "application/json" };
    if (message.method === "initialize" && answer.error === undefined) {
      session.initialized = true;
      headers["mcp-session-id"] = session.id;
    }
    return new Response(JSON.stringify(answer), { status: 200, headers });
  }

  /** The session of a handshake request (no session id yet): the one starting, or a new one. */
  async #starting(request) {
    if (this.#session !== null && !this.#session.initialized && !this.#session.closed) {
      return this.#session;
    }
    // The host starts over (its `server/discover` probe, or `initialize`).
    const previous = this.#session;
    this.#session = new Session(request.url, this.#options, request.headers);
    await previous?.close();
    return this.#session;
  }

  #known(request) {
    const session = this.#session;
    return session !== null && !session.closed && session.id === request.headers.get("mcp-session-id")
      ? session
      : null;
  }

  #listen(request, signal) {
    const session = this.#known(request);
    if (session === null) return sessionNotFound();
    session.checkHeaders(request.headers);
    // The host's transport aborts its GET stream when it is closed: the session ends with it
    // (the TypeScript SDK's transport sends no DELETE on close).
    signal?.addEventListener("abort", () => {
      if (this.#session === session) this.#session = null;
      session.close().catch(() => {});
    }, { once: true });
    return new Response(session.listen(), { status: 200, headers: { "content-type": "text/event-stream" } });
  }

  async #delete(request) {
    const session = this.#known(request);
    if (session === null) return sessionNotFound();
    this.#session = null;
    await session.close();
    return new Response(null, { status: 200 });
  }
}

/** One host session: a bridge, the host's requests waiting for their answers, the GET stream. */
class Session {
  id = randomUUID();
  /** Set once the host's `initialize` was answered. */
  initialized = false;
  closed = false;
  #bridge;
  #capacity;
  /** The application's headers, as the session was started with. */
  #headers;
  /**
   * The host's requests waiting for their answers, by the JSON text of the request's id:
   * `taken` once the bridge took the request (it may run from then on).
   * @type {Map<string, { resolve: (answer: any) => void, taken: boolean }>}
   */
  #pending = new Map();
  /** What waits for the GET stream: the server's requests and notifications. */
  #queue = [];
  /** @type {(() => void)[]} The delivery loop, waiting for room in the queue. */
  #roomWaiters = [];
  /** @type {{ controller: ReadableStreamDefaultController, wake: (() => void) | null } | null} */
  #listener = null;
  #delivered;

  constructor(url, options, headers) {
    this.#headers = applicationHeaders(headers);
    this.#capacity = options.capacity ?? DEFAULT_CAPACITY;
    const sessionOptions = { ...options, headers: { ...this.#headers, ...options.headers } };
    this.#bridge = new NativeBridge(url, nativeOptions(sessionOptions), options);
    this.#delivered = this.#deliver();
  }

  /**
   * The bridge sends the application's headers of the session's first request on every
   * request: a later request that changes them (a refreshed token of an `authProvider`)
   * fails rather than be sent with the old ones.
   */
  checkHeaders(headers) {
    const now = applicationHeaders(headers);
    const same =
      Object.keys(now).length === Object.keys(this.#headers).length &&
      Object.entries(now).every(([name, value]) => this.#headers[name] === value);
    if (!same) {
      throw new InvalidConfigError(
        "resumeFetch: the request's headers differ from those the session started with (they are sent on every request of the session); pass a token as bearerToken rather than through an authProvider",
      );
    }
  }

  async send(message) {
    await this.#bridge.send(toJson(message));
  }

  /**
   * The answer to the host's request (a JSON-RPC response or error), `null` once the host
   * cancelled it (notifications/cancelled), or the abort's reason.
   */
  async call(message, signal) {
    signal?.throwIfAborted();
    const key = JSON.stringify(message.id);
    if (this.#pending.has(key)) {
      return errorAnswer(message.id, -32600, `invalid request: id ${key} is already in flight`);
    }
    /** @type {{ resolve: (answer: any) => void, taken: boolean }} */
    const pending = { resolve: () => {}, taken: false };
    const answered = new Promise((resolve) => {
      pending.resolve = resolve;
    });
    this.#pending.set(key, pending);
    try {
      // A tools/call made by a tool that withToolCallKeys wrapped gets its tool call's key.
      await this.#bridge.send(toJson(keyed(message, META_KEY)));
    } catch (error) {
      if (this.#pending.get(key) === pending) this.#pending.delete(key);
      throw error;
    }
    pending.taken = true;
    if (!signal) return answered;
    // The host cancels the call itself (`notifications/cancelled`): only its wait ends here.
    let onAbort;
    const aborted = new Promise((_, reject) => {
      onAbort = () => {
        if (this.#pending.get(key) === pending) this.#pending.delete(key);
        reject(signal.reason);
      };
      signal.addEventListener("abort", onAbort, { once: true });
    });
    try {
      return await Promise.race([answered, aborted]);
    } finally {
      signal.removeEventListener("abort", onAbort);
    }
  }

  /**
   * The host cancelled the request `cancel.params.requestId`: its wait ends with no answer
   * (`null`), and an answer that comes anyway is dropped.
   */
  cancelled(cancel) {
    const key = JSON.stringify(cancel.params?.requestId);
    const pending = this.#pending.get(key);
    if (pending === undefined) return;
    this.#pending.delete(key);
    pending.resolve(null);
  }

  /** The GET stream: what the server sends besides answers, as SSE; a new one replaces the last. */
  listen() {
    this.#endListener();
    let listener;
    return new ReadableStream(
      {
        start: (controller) => {
          listener = { controller, wake: null };
          this.#listener = listener;
          if (this.closed) controller.close();
        },
        pull: () => {
          if (this.#listener !== listener) return undefined;
          const message = this.#queue.shift();
          if (message !== undefined) {
            listener.controller.enqueue(frame(message));
            this.#roomWaiters.shift()?.();
            return undefined;
          }
          return new Promise((resolve) => {
            listener.wake = resolve;
          });
        },
        cancel: () => {
          if (this.#listener === listener) this.#listener = null;
          listener.wake?.();
        },
      },
      { highWaterMark: 0 },
    );
  }

  async close() {
    if (!this.closed) {
      this.closed = true;
      // The delivery loop may wait for room: it drains the bridge until its end instead.
      this.#roomWaiters.splice(0).forEach((wake) => wake());
      await this.#bridge.close().catch(() => {});
    }
    await this.#delivered;
  }

  async #deliver() {
    /** @type {Error | null} */
    let failure = null;
    try {
      for (;;) {
        const text = await this.#bridge.recv();
        if (text === null) break;
        const message = JSON.parse(text);
        if (typeof message.method !== "string") {
          const pending = this.#pending.get(JSON.stringify(message.id));
          if (pending !== undefined) {
            this.#pending.delete(JSON.stringify(message.id));
            pending.resolve(message);
          }
          // An answer nobody waits for was cancelled by the host: dropped, as the host would.
          continue;
        }
        // At most `capacity` messages wait for the GET stream: then the bridge waits too.
        while (this.#queue.length >= this.#capacity && !this.closed) {
          await new Promise((resolve) => this.#roomWaiters.push(() => resolve(undefined)));
        }
        this.#toListener(message);
      }
    } catch (error) {
      failure = /** @type {Error} */ (error);
    }
    this.closed = true;
    const reason = failure?.message ?? "closed: the session was closed before the answer came";
    // The bridge's own answers to what it had taken (which say whether each may have run) are
    // not read once it is closed: a request it took may have run on the server.
    for (const [key, { resolve, taken }] of this.#pending) {
      const data = taken ? { kind: "closed", mayHaveRun: true } : { kind: "closed" };
      resolve(errorAnswer(JSON.parse(key), bridgeConstants.errorCodes.closed, reason, data));
    }
    this.#pending.clear();
    this.#queue = [];
    this.#roomWaiters.splice(0).forEach((wake) => wake());
    this.#endListener();
  }

  /** Ends the GET stream, if one is open. */
  #endListener() {
    const listener = this.#listener;
    this.#listener = null;
    if (listener === null) return;
    try {
      listener.controller.close();
    } catch {
      // Already closed by its reader.
    }
    listener.wake?.();
  }

  #toListener(message) {
    const listener = this.#listener;
    if (listener?.wake) {
      // A pull waits: the message goes to its stream now.
      const wake = listener.wake;
      listener.wake = null;
      listener.controller.enqueue(frame(message));
      wake();
      return;
    }
    this.#queue.push(message);
  }
}

/** The application's headers among `headers` (lower-case names). */
function applicationHeaders(headers) {
  const own = {};
  for (const [name, value] of headers) {
    if (!EXCHANGE_HEADERS.has(name)) own[name] = value;
  }
  return own;
}

function frame(message) {
  return encoder.encode(`event: message\ndata: ${JSON.stringify(message)}\n\n`);
}

function errorAnswer(id, code, message, data) {
  return { jsonrpc: "2.0", id, error: { code, message, ...(data === undefined ? {} : { data }) } };
}

function rpcErrorResponse(status, id, code, message) {
  return new Response(JSON.stringify(errorAnswer(id, code, message)), {
    status,
    headers: { "content-type": "application/json" },
  });
}

/** A session this endpoint does not serve (closed, or another's): the host starts a new one. */
function sessionNotFound() {
  return rpcErrorResponse(404, null, -32001, "session not found");
}
