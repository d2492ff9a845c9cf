// The resume-safety guard for Node MCP servers (the TypeScript SDK's
// StreamableHTTPServerTransport under Express, connect or node:http), over mcp-resume-server's
// guard. A skin: every rule, the store steps and the rewriting of responses are the Rust
// guard's, the same one the tower ResumeSafetyLayer and the Python middleware drive; this file
// moves bytes between Node's request/response objects and it.
import { OutgoingMessage, ServerResponse, validateHeaderName, validateHeaderValue } from "node:http";

import { NativeGuard, NativeStep } from "./native.js";

const isPromise = (value) => value !== null && typeof value === "object" && typeof value.then === "function";

/**
 * Makes an MCP Streamable HTTP endpoint resume-safe:
 *
 *   const safety = new ResumeSafety({ store: "redis://127.0.0.1:6379" });
 *   app.post("/mcp", safety.middleware(), mcpPostHandler);   // Express / connect
 *   http.createServer(safety.wrap(handler));                  // node:http
 *
 * Options (every default is the Rust guard's; durations in milliseconds): `store` ("memory",
 * the default, or a redis:// URL, connected in the constructor), `instanceId` (default: random
 * per guard, right for every replica and every restart), `maxBody` (4 MiB), `lease` (10000),
 * `resumeChecks` (true), `idempotency` (true), `retryAfter` (1000), `keyScopeHeader` (none:
 * a header naming the authenticated client makes keys that client's own), `seed` (random).
 *
 * The request's body is read by the guard and handed on as `req.body` (parsed JSON, as
 * `express.json()` would): pass it to `transport.handleRequest(req, res, req.body)`, as the
 * SDK's examples do. A body over `maxBody` is left unread, for the handler to read, and one
 * that is not JSON is put back for it to read. A body read in front and not left in
 * `req.body` cannot be looked through for a key: the request is refused (`middleware()`
 * passes the error to `next`, `wrap()` answers 500), never forwarded.
 *
 * `middleware()` and `wrap()` take a request's first step at the end of the turn of the event
 * loop it arrived in, with the other requests that arrived in it, and the handler runs then;
 * a response's end goes to the guard at the end of the turn it was written in.
 *
 * The first guard made replaces `writeHead`, `write`, `end`, `flushHeaders`, `emit` and
 * `destroy` of `http.ServerResponse.prototype` with methods that route a guarded response
 * through its interceptor; every other response goes straight to Node's own.
 */
export class ResumeSafety {
  #guard;
  #route;

  constructor(options = {}) {
    const guard = new NativeGuard(options);
    this.#guard = guard;
    this.#route = new Route(guard);
    routeResponses();
  }

  /** The name this process writes as owner of sessions and claims. */
  get instanceId() {
    return this.#guard.instanceId;
  }

  /** An Express/connect middleware: `next()` runs the handler behind the guard. */
  middleware() {
    return (req, res, next) => this.#defer(req, res, next, next);
  }

  /** A `(req, res)` handler (node:http's, an Express route's) behind the guard. */
  wrap(handler) {
    return (req, res, ...rest) => {
      const failed = (error) => {
        if (!res.headersSent) {
          res.writeHead(500, { "content-type": "text/plain" });
        }
        res.end();
        console.error(error);
      };
      this.#defer(req, res, () => handler(req, res, ...rest), failed);
    };
  }

  /** Guards one request; `next()` runs the handler (not called when the guard answers). */
  async handle(req, res, next) {
    await this.#handle(req, res, next);
  }

  /**
   * Guards one request without waiting where nothing has to be waited for (the memory
   * store, a body read already): what `next()` returned, or a promise when a step waited.
   */
  #handle(req, res, next) {
    return this.#acted(req, res, next, this.#begin(req));
  }

  /** The request's first step (see the addon's `Step`), or a promise of it. */
  #begin(req) {
    // Headers cross to the addon as one string (NUL, which Node refuses in headers, between
    // names and values): one conversion instead of one per name and value. A body a parser
    // in front read already goes with them: one crossing instead of two.
    const method = req.method;
    const body = method === "POST" ? readAlready(req) : undefined;
    return this.#guard.begin(method, req.rawHeaders.join("\0"), body);
  }

  /** Does what the first step says: what `next()` returned, or a promise when a step waited. */
  #acted(req, res, next, step) {
    const route = this.#route;
    return isPromise(step) ? step.then((s) => act(route, req, res, next, s)) : act(route, req, res, next, step);
  }

  /**
   * Guards one request at the end of this turn of the event loop, with the others that
   * arrived in it (see `beginArrived`); a failure goes to `failed`.
   */
  #defer(req, res, next, failed) {
    if (arrived.length === 0) setImmediate(ResumeSafety.#beginArrived);
    arrived.push(this, req, res, next, failed);
  }

  /**
   * The first steps of the requests that arrived in this turn, back to back while the addon's
   * code is in the processor's caches (each after a handler's run that evicted it cost
   * several µs more), then what each says.
   */
  static #beginArrived() {
    const now = arrived;
    arrived = [];
    const steps = new Array(now.length / 5);
    const threw = new Array(now.length / 5).fill(false);
    for (let i = 0; i < steps.length; i++) {
      try {
        steps[i] = now[i * 5].#begin(now[i * 5 + 1]);
      } catch (error) {
        steps[i] = error;
        threw[i] = true;
      }
    }
    for (let i = 0; i < steps.length; i++) {
      const at = i * 5;
      const safety = now[at];
      const failed = now[at + 4];
      try {
        if (threw[i]) throw steps[i];
        const pending = safety.#acted(now[at + 1], now[at + 2], now[at + 3], steps[i]);
        if (isPromise(pending)) pending.catch(failed);
      } catch (error) {
        try {
          failed(error);
        } catch (thrown) {
          // Nobody to throw to at the end of the turn: thrown on, uncaught, once the requests
          // behind it in this batch were guarded rather than left hanging.
          queueMicrotask(() => {
            throw thrown;
          });
        }
      }
    }
  }
}

/** The requests that arrived in this turn, five entries each: guard, req, res, next, failed. */
let arrived = [];

/**
 * What a guard's responses are routed through: the guard, and what closes the outbound of
 * a response whose interceptor was collected before the response ended or its client left
 * (the addon keeps each outbound until then; see `intercept` for the responses watched).
 */
class Route {
  constructor(guard) {
    this.guard = guard;
    this.collected = new FinalizationRegistry((handle) => guard.close(handle));
  }
}

/** Does what the guard's step says (see the addon's `Step`). */
function act(route, req, res, next, step) {
  if (step === null) return next();
  if (typeof step === "number") {
    intercept(res, route, step);
    return next();
  }
  if (step instanceof NativeStep) {
    const given = (body) => {
      if (body === undefined) return; // the client left while sending: nothing to forward
      const after = step.body(body);
      return isPromise(after) ? after.then((s) => act(route, req, res, next, s)) : act(route, req, res, next, after);
    };
    const read = readAlready(req);
    if (read !== undefined) return given(read);
    return readBody(req, step.limit).then(given);
  }
  if (step.length === 2) {
    // A resume: forwarded with the inner server's own Last-Event-ID for the client's cursor
    // (only a client's own Last-Event-ID is ever replaced).
    if (req.headers["last-event-id"] !== undefined) replaceHeader(req, "last-event-id", step[1]);
    intercept(res, route, step[0]);
    return next();
  }
  return answer(res, step);
}

/**
 * The body a parser in front of the guard read already (`express.json()`): its bytes, or
 * the text of what it parsed (the addon reads its UTF-8). `undefined` when it is still to
 * be read. Throws when it was read and is not in `req.body` (Koa's bodyparser keeps it in
 * `ctx.request.body`): taken for an empty body, a call keyed in its `_meta` would be
 * forwarded as an unkeyed one and run again on each re-send.
 */
function readAlready(req) {
  if (!(req.readableEnded || req._body)) return undefined;
  const parsed = req.body;
  if (parsed === undefined) {
    if (headSaysNoBody(req)) return "";
    throw new Error(
      "mcp-resume: the request's body was read before the guard and not left in req.body, so the guard cannot look for an idempotency key in it: put the guard in front of the body parser, or use a parser that sets req.body",
    );
  }
  if (Buffer.isBuffer(parsed)) return parsed;
  return typeof parsed === "string" ? parsed : JSON.stringify(parsed);
}

/**
 * Whether the request's head says its body is empty: a length of 0, or (HTTP/1, where a
 * body needs one or the other) neither a length nor chunking. HTTP/2 sends a body without
 * either.
 */
function headSaysNoBody(req) {
  const length = req.headers["content-length"];
  if (length !== undefined) return Number(length) === 0;
  return req.httpVersionMajor === 1 && req.headers["transfer-encoding"] === undefined;
}

/**
 * The request body: its bytes; when it is longer than `limit`, what was read of it (more
 * than `limit`: the guard looks it through for a key), left for the handler to read (put
 * back); `undefined` when the client left. A complete body is handed on parsed as `req.body`;
 * one that is not JSON is put back, for the handler to read.
 *
 * Read in paused mode (`readable` and `read()`), never by `data` with an explicit `pause()`:
 * once the `readable` listener is gone the stream is neither paused nor flowing, so a handler
 * that reads the rest with `req.on("data")` (express.json(), classic handlers) starts it again.
 */
function readBody(req, limit) {
  return new Promise((resolve) => {
    const chunks = [];
    let size = 0;
    const done = (value) => {
      req.off("readable", onReadable);
      req.off("end", onEnd);
      req.off("error", onGone);
      req.off("close", onClose);
      resolve(value);
    };
    const onReadable = () => {
      let chunk;
      while ((chunk = req.read()) !== null) {
        chunks.push(chunk);
        size += chunk.length;
        if (size > limit) {
          const read = Buffer.concat(chunks);
          done(read);
          req.unshift(read);
          return;
        }
      }
      // The parser saw the message's end: the body is whole, and its `end` not emitted yet.
      if (req.complete) whole();
    };
    const whole = () => {
      const bytes = Buffer.concat(chunks);
      try {
        req.body = JSON.parse(bytes.toString("utf8"));
        req._body = true;
      } catch {
        // Not JSON: put back, so that the handler reads it as it would have without the
        // guard (a body parser behind answers its own 400, the SDK its parse error, a handler
        // reading by `data` gets the bytes) rather than a `req.body` no handler expects. In
        // this turn, before the stream's `end` (due at the next tick, and then not emitted
        // until the bytes are read again); after it, a stream cannot take bytes back.
        if (bytes.length > 0 && !req.readableEnded) req.unshift(bytes);
      }
      done(bytes);
    };
    const onEnd = () => whole();
    const onGone = () => done(undefined);
    const onClose = () => {
      if (!req.readableEnded) done(undefined);
    };
    req.on("readable", onReadable);
    req.on("end", onEnd);
    req.on("error", onGone);
    req.on("close", onClose);
  });
}

function replaceHeader(req, name, value) {
  req.headers[name] = value;
  const raw = [];
  for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) {
    if (req.rawHeaders[i].toLowerCase() !== name) raw.push(req.rawHeaders[i], req.rawHeaders[i + 1]);
  }
  raw.push(name, value);
  req.rawHeaders.length = 0;
  req.rawHeaders.push(...raw);
}

/** Sends the guard's own answer (a `Sent` array with its head and end). */
function answer(res, [status, headers, body]) {
  writeHeadOf(res, res.writeHead, status, split(headers ?? ""), res.writeHead === ServerResponse.prototype.writeHead);
  res.end(body ?? undefined);
}

/** Pending bytes past this size are pushed at once, not at the end of the turn. */
const PUSH_AT = 64 * 1024;

/** How a `Sent` says the response ends. */
const COMPLETE = 1;
const ABORT = 2;

/** A flat name/value list from the addon's NUL-joined string. */
const split = (joined) => (joined === "" ? [] : joined.split("\0"));

/**
 * The guard's head when the addon says it is the head given (`given`, a flat list) with
 * pairs added after it: a NUL, then those pairs joined by NUL (none: a NUL alone).
 */
const added = (given, rest) => (rest.length === 1 ? given : given.concat(rest.slice(1).split("\0")));

/**
 * Sets a flat name/value list on the response, one `setHeader` a name (a name given more than
 * once with its values in order, one given once with its value alone, as `getHeader` reads it
 * from any handler). For a `writeHead` of middleware in front, which gets the status only: old
 * ones (on-headers < 1.1.0, under morgan, express-session, compression, response-time) read an
 * array of headers as `[name, value]` pairs, and a flat list given them would be cut into
 * characters.
 */
function setHeaders(res, flat) {
  const grouped = new Map();
  for (let i = 0; i + 1 < flat.length; i += 2) {
    const name = flat[i].toLowerCase();
    const values = grouped.get(name);
    if (values === undefined) grouped.set(name, [flat[i + 1]]);
    else values.push(flat[i + 1]);
  }
  for (const [name, values] of grouped) res.setHeader(name, values.length === 1 ? values[0] : values);
}

/** Whether a flat name/value list names a header more than once. */
function repeats(flat) {
  for (let i = 2; i < flat.length; i += 2) {
    for (let j = 0; j < i; j += 2) if (flat[i] === flat[j]) return true;
  }
  return false;
}

/**
 * Writes the guard's head (a flat list) with `writeHead`: Node's own (`node`) takes the list,
 * unless a name repeats (Node 20's `writeHead`, on a response with headers set before, keeps
 * only a repeated name's last value); else the headers are set first (see `setHeaders`) and
 * `writeHead` gets the status alone.
 */
function writeHeadOf(res, writeHead, status, flat, node) {
  if (node && !repeats(flat)) {
    writeHead.call(res, status, flat);
  } else {
    setHeaders(res, flat);
    writeHead.call(res, status);
  }
}

/**
 * The handler's `writeHead` headers, with those set before (`setHeader`) under other names,
 * as a flat list. Those given here are checked as Node's `writeHead` checks them (`setHeader`
 * checked the others): one Node refuses throws to the handler, as it would without the guard,
 * instead of failing later where nobody hears it.
 */
function headerList(res, headers) {
  const flat = [];
  if (Array.isArray(headers)) {
    // A name given more than once is sent with each of its values, as Node sends it.
    if (headers.length > 0 && Array.isArray(headers[0])) {
      for (const [name, value] of headers) put(flat, checked(name, value), value);
    } else {
      if (headers.length % 2 !== 0) throw nodeError(TypeError, "ERR_INVALID_ARG_VALUE", "The argument 'headers' is invalid.");
      for (let i = 0; i < headers.length; i += 2) put(flat, checked(headers[i], headers[i + 1]), headers[i + 1]);
    }
  } else if (headers) {
    for (const name of Object.keys(headers)) {
      if (!name) continue;
      const value = headers[name];
      put(flat, checked(name, value), value);
    }
  }
  const names = getHeaderNames.call(res);
  if (names.length === 0) return flat;
  const before = [];
  for (const name of names) if (!named(flat, name)) put(before, name, getHeader.call(res, name));
  return before.length === 0 ? flat : before.concat(flat);
}

/** Appends a header's values to a flat list. */
function put(flat, name, value) {
  if (Array.isArray(value)) {
    for (const one of value) flat.push(name, String(one));
  } else {
    flat.push(name, String(value));
  }
}

/** Whether a flat list has the header `name` (lower case). */
function named(flat, name) {
  for (let i = 0; i < flat.length; i += 2) if (flat[i] === name) return true;
  return false;
}

/**
 * Node's own methods for the headers set on a response, called as they are rather than
 * looked up on each response (Express gives every response a hidden class of its own, so
 * that each lookup missed V8's caches). Node's `writeHead` reads those headers as they do.
 */
const { getHeaderNames, getHeader, removeHeader } = OutgoingMessage.prototype;

/** A token's characters: what Node accepts in a header name. */
const TOKEN = /^[\^_`a-zA-Z\-0-9!#$%&'*+.|~]+$/;
/** What Node refuses in a header value (and in a reason phrase). */
const NOT_FIELD_TEXT = /[^\t\x20-\x7e\x80-\xff]/;

/**
 * A header given to `writeHead`, checked as Node checks it: its name in lower case, or
 * Node's own error (thrown by Node's checks, run only when the quick ones failed).
 */
function checked(name, value) {
  if (typeof name !== "string" || !TOKEN.test(name)) validateHeaderName(name);
  if (Array.isArray(value)) {
    for (const one of value) if (one === undefined || NOT_FIELD_TEXT.test(one)) validateHeaderValue(name, one);
  } else if (value === undefined || NOT_FIELD_TEXT.test(value)) {
    validateHeaderValue(name, value);
  }
  return String(name).toLowerCase();
}

/** An error as Node's own `http` throws it: its class, `code` and message. */
function nodeError(Class, code, message) {
  const error = new Class(message);
  /** @type {any} */ (error).code = code;
  return error;
}

/** The status Node's `writeHead` would write: a number of three digits, else it throws. */
function statusOf(status) {
  const code = status | 0;
  if (code < 100 || code > 999) throw nodeError(RangeError, "ERR_HTTP_INVALID_STATUS_CODE", `Invalid status code: ${status}`);
  return code;
}

/** Refuses what Node's `writeHead` refuses in a reason phrase. */
function checkReason(reason) {
  if (NOT_FIELD_TEXT.test(reason)) throw nodeError(TypeError, "ERR_INVALID_CHAR", "Invalid character in statusMessage");
}

/** No bytes (never written to: shared). */
const EMPTY = Buffer.alloc(0);

/** A chunk as bytes: a `Buffer` or any `Uint8Array` as it is (both go to the addon and to Node). */
function toBuffer(chunk, encoding) {
  if (chunk === undefined || chunk === null) return EMPTY;
  if (typeof chunk === "string") return Buffer.from(chunk, encoding ?? "utf8");
  if (chunk instanceof Uint8Array) return chunk;
  return Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
}

/**
 * The interceptor of each response routed through the guard. Kept beside the responses, not
 * on them: a property added to a response makes it a new shape for V8, and Express gives
 * every response a shape of its own (`Object.setPrototypeOf`), so that each addition built a
 * new hidden class and copied its descriptors, on every request.
 */
const routes = new WeakMap();

/** The methods `routeResponses` replaces. */
const ROUTED = ["writeHead", "write", "end", "flushHeaders", "emit", "destroy"];

/** Those methods as Node defines them. */
let real = null;

/**
 * Routes the methods a handler writes a response with through the response's interceptor,
 * when it has one. They are replaced once, on `http.ServerResponse.prototype` (Express's
 * responses inherit from it), the first time a guard is made: a response the guard does not
 * route has no interceptor and calls Node's own at once. Adding methods to each response
 * instead made every response a new shape for V8 and kept its optimizing compiler busy.
 */
function routeResponses() {
  if (real !== null) return;
  // Typed loosely: the replacements take every overload's arguments and pass them on.
  const proto = /** @type {any} */ (ServerResponse.prototype);
  real = Object.fromEntries(ROUTED.map((name) => [name, proto[name]]));
  proto.writeHead = function writeHead(status, reason, headers) {
    const routed = routes.get(this);
    if (routed === undefined) return real.writeHead.apply(this, arguments);
    routed.writeHead(status, reason, headers);
    return this;
  };
  proto.write = function write(chunk, encoding, callback) {
    const routed = routes.get(this);
    if (routed === undefined) return real.write.apply(this, arguments);
    return routed.write(chunk, encoding, callback);
  };
  proto.end = function end(chunk, encoding, callback) {
    const routed = routes.get(this);
    if (routed === undefined) return real.end.apply(this, arguments);
    routed.end(chunk, encoding, callback);
    return this;
  };
  proto.flushHeaders = function flushHeaders() {
    const routed = routes.get(this);
    if (routed === undefined) return real.flushHeaders.apply(this, arguments);
    routed.flushHeaders();
  };
  proto.emit = function emit(event) {
    const routed = routes.get(this);
    if (routed !== undefined && routed.sees(event)) {
      routed.hold(event, Array.prototype.slice.call(arguments, 1));
      return true;
    }
    return real.emit.apply(this, arguments);
  };
  proto.destroy = function destroy(error) {
    routes.get(this)?.destroying();
    return real.destroy.apply(this, arguments);
  };
}

/**
 * Routes what the handler writes to `res` through `out`: its head and body are pushed to the
 * guard, and what the guard says to send goes to the client, in order. A keyed call's handler
 * never hears that its client left (its answer is stored for the client's re-send): `close`
 * and `error` of the response reach it once it has ended, `res.destroyed` reads false until
 * then, and a handler waiting for `drain` gets it when the client leaves.
 */
function intercept(res, route, handle) {
  let own = false;
  for (const name of ROUTED) own ||= Object.hasOwn(res, name);
  // Middleware in front of the guard that put its own methods on this response (compression)
  // keeps them, behind the guard: the guard's are put on the response in front of them, and
  // what the guard sends goes through them. Else Node's own send it.
  const down = own ? Object.fromEntries(ROUTED.map((name) => [name, res[name]])) : real;
  const routed = new Interceptor(res, route, handle, down);
  if (own) {
    res.writeHead = (status, reason, headers) => {
      routed.writeHead(status, reason, headers);
      return res;
    };
    res.write = (chunk, encoding, callback) => routed.write(chunk, encoding, callback);
    res.end = (chunk, encoding, callback) => {
      routed.end(chunk, encoding, callback);
      return res;
    };
    res.flushHeaders = () => routed.flushHeaders();
    res.emit = (event, ...args) => {
      if (routed.sees(event)) {
        routed.hold(event, args);
        return true;
      }
      return down.emit.call(res, event, ...args);
    };
    res.destroy = (error) => {
      routed.destroying();
      return down.destroy.call(res, error);
    };
  } else {
    routes.set(res, routed);
  }
  // Its outbound is let go at the response's end, or at its `close` for an unkeyed call. A
  // keyed call's, and an unkeyed one's whose `close` came already (its client left while a
  // step waited for the store), are also let go should the interceptor be collected first
  // (a handler that never ended the response): a keyed call is then recorded as one that did
  // not reach its end, as the response's own finalizer did when the outbound was an object.
  // Watching every response cost a runtime call each.
  const gone = res.destroyed;
  if (routed.keyed || gone) {
    route.collected.register(routed, handle, routed);
    routed.watched = true;
  }
  if (routed.keyed) {
    // What a handler checks before it writes (the TypeScript SDK's transport, through
    // @hono/node-server, stops streaming its answer to a destroyed response and never ends
    // it): false until it ended. Node sets it when the client leaves; the interceptor reads
    // what Node set.
    routed.clientGone = gone;
    Object.defineProperty(res, "destroyed", {
      configurable: true,
      enumerable: true,
      get: () => routed.innerEnded && routed.clientGone,
      set: (value) => {
        routed.clientGone = value;
      },
    });
  }
}

/** The interceptors whose pending bytes are pushed at the end of this turn (`pushSoon`). */
let due = [];

/** Pushes the pending bytes of each interceptor due, at the end of the turn they were written in. */
function pushDue() {
  const now = due;
  due = [];
  for (const routed of now) {
    // Pushed already (the handler ended, or more than `PUSH_AT` bytes were written).
    if (!routed.scheduled) continue;
    try {
      routed.pushPending();
    } catch {
      // Nobody to throw to at the end of the turn: the response failed (see `run`).
    }
  }
}

/** What `end` pushes when no head is held. */
const NO_HEAD = [0, null];

/** One response's way through the guard (see `intercept`). */
class Interceptor {
  constructor(res, route, handle, down) {
    this.res = res;
    this.route = route;
    this.guard = route.guard;
    /** The response's outbound in the addon: odd for a keyed call (see the addon's `Step`). */
    this.handle = handle;
    this.watched = false; // closed should this be collected before the outbound was let go
    /** What sends to the client: Node's methods, or those of middleware in front. */
    this.down = down;
    this.keyed = handle % 2 === 1;
    this.clientGone = false; // a keyed call's client left (`res.destroyed` as Node set it)
    this.headPushed = false; // the handler's head went to the guard
    this.headSent = false; // the guard let the head go to the client
    // The handler's head, held until what follows it (a flush, body bytes, the end) so that
    // they cross to the guard together: [status, headers joined].
    this.heldHead = null;
    this.givenHead = null; // that head's headers, a flat list (the guard's head may add to it)
    this.flushWanted = false; // the handler flushed its head: it goes as soon as the guard lets it
    this.finished = false; // the client's response is complete (or aborted)
    this.broken = false; // a step failed, or `res.destroy()` ended the call (see `stop`)
    this.innerEnded = false; // the handler ended its response
    this.endDue = false; // that end is still to go to the guard, at the end of this turn
    this.detached = false; // an unkeyed call's client left: nothing more goes through the guard
    this.untouched = false; // body chunks pass unchanged, without crossing to the guard
    this.busy = null; // a step waiting for the store
    this.backlog = null; // the steps queued behind it (an array once there is one)
    this.drainWanted = false;
    this.deferred = null; // a keyed call's `close`/`error`, held until its handler ended
    this.endCallbacks = null;
    // Bytes written in this turn of the event loop, not yet pushed to the guard: what a
    // handler writes in one turn (a flushed head and the events after it) crosses together.
    this.pending = null;
    this.pendingSize = 0;
    this.scheduled = false; // a push of what is pending is due at the end of this turn
  }

  gone() {
    return this.keyed ? this.clientGone : this.res.destroyed;
  }

  /** Lets the outbound go before its end (a keyed call that did not reach it is recorded). */
  close() {
    this.guard.close(this.handle);
    this.letGo();
  }

  /** The outbound is let go (closed, or its end pushed): collecting this needs no close. */
  letGo() {
    if (this.watched) {
      this.watched = false;
      this.route.collected.unregister(this);
    }
  }

  /**
   * Sees an event of the response before its listeners: whether it waits for the handler's
   * end (a keyed call's `close` and `error`, then `hold` it). An unkeyed call's `close` lets
   * the outbound go (see `detach`). A keyed call's `close` is held whatever destroyed the
   * connection: a bare destroy (Express's and connect's final handler, Node's idle timeout, a
   * shutdown, what Node does with what it cannot read) may be the failure of any request the
   * connection carried, before the call on keep-alive or beside it pipelined, or the client's
   * leaving, and nothing on the connection tells which. The run goes on and its answer is
   * stored; only `res.destroy()` of the call's own response is its failure (see `destroying`).
   */
  sees(event) {
    if (event !== "close" && event !== "error") return false;
    if (this.keyed) return !this.innerEnded;
    if (event === "close") this.detach();
    return false;
  }

  /**
   * The response is being destroyed by `res.destroy()` (an error handler's, `stream.pipeline`
   * when what it pipes fails): a keyed call whose handler did not end it failed, whatever the
   * error (one a system call failed with, as reading a file or reaching an upstream does, is
   * no client leaving). It ends here (see `stop`), not at the `close` that follows: a response
   * queued behind another on its connection (pipelined) never hears one once that connection
   * is gone, and one whose client left heard it already (held).
   */
  destroying() {
    if (!this.keyed || this.innerEnded || this.finished) return;
    this.stop();
    // What was held reaches the handler as Node emits a destroyed response's events: after
    // the destroy returned.
    if (this.deferred !== null) process.nextTick(() => this.emitDeferred());
  }

  /** Holds `event` until the handler ended (see `sees`). */
  hold(event, args) {
    (this.deferred ??= []).push([event, args]);
    if (event === "close") {
      // A gone client never drains: a handler waiting for it to (a write returned false)
      // would wait for ever. What it writes now goes to the guard alone.
      process.nextTick(() => {
        if (!this.innerEnded) this.down.emit.call(this.res, "drain");
      });
    }
  }

  /** Sends what the guard said to (see the addon's `Sent`). */
  apply(sent) {
    const res = this.res;
    if (this.finished || sent === undefined) return;
    const gone = this.gone();
    if (!Array.isArray(sent)) {
      if (!gone) this.down.write.call(res, sent);
      return;
    }
    const [status, headers, body, end] = sent;
    if (status !== 0 && !gone) {
      // The guard's head is the whole head: what was set before and is not in it goes (what
      // is in it is set again by `writeHead`).
      const flat = headers.charCodeAt(0) === 0 ? added(this.givenHead, headers) : split(headers);
      for (const name of getHeaderNames.call(res)) if (!named(flat, name)) removeHeader.call(res, name);
      writeHeadOf(res, this.down.writeHead, status, flat, this.down === real);
      this.headSent = true;
      // Else the head goes with the first body bytes, in one write.
      if (this.flushWanted && body === null && end === 0) this.down.flushHeaders.call(res);
    }
    if (end === COMPLETE) {
      this.finished = true;
      if (!gone) this.down.end.call(res, body ?? undefined);
      return;
    }
    if (body !== null && !gone) this.down.write.call(res, body);
    if (end === ABORT) {
      this.finished = true;
      res.destroy(new Error("mcp-resume: the guard cut this response short"));
    }
  }

  /** A body chunk through the guard; once it says the body is untouched, none crosses. */
  pushBody(bytes) {
    if (this.untouched) return bytes;
    const sent = this.guard.body(this.handle, bytes);
    if (sent !== true) return sent;
    this.untouched = true;
    return bytes;
  }

  settle() {
    // The guard let the response go at its end.
    if (!this.innerEnded || this.endDue || this.busy !== null || (this.backlog !== null && this.backlog.length > 0)) return;
    const callbacks = this.endCallbacks;
    this.endCallbacks = null;
    if (callbacks !== null) for (const cb of callbacks) cb();
    this.emitDeferred();
  }

  /** Emits what was held for the handler's end (see `hold`). */
  emitDeferred() {
    const deferred = this.deferred;
    this.deferred = null;
    if (deferred !== null) for (const [event, args] of deferred) this.down.emit.call(this.res, event, ...args);
  }

  /**
   * A step failed (the store, or sending what the guard let go): this response alone is
   * destroyed, and nothing the handler does afterwards reaches the guard or the client. What
   * was held for the handler's end (a keyed call's `close`) reaches it now.
   */
  failed(error) {
    if (this.broken) return;
    this.stop();
    this.res.destroy(error);
    this.emitDeferred();
  }

  /**
   * Ends the response's way through the guard where it is: its outbound is closed (a keyed
   * call that did not reach its end is recorded as such: its key reads
   * `IDEMPOTENCY_OUTCOME_UNKNOWN`), and nothing the handler does afterwards reaches the guard
   * or the client.
   */
  stop() {
    this.broken = true;
    this.busy = null;
    this.backlog = null;
    this.takePending();
    this.finished = true;
    this.innerEnded = true;
    this.close();
  }

  /** What a step waiting for the store gave: sent, then the steps queued behind it. */
  waited(result) {
    this.busy = result.then(
      (sent) => {
        try {
          this.apply(sent);
          this.flush();
        } catch (error) {
          this.failed(error);
        }
      },
      (error) => this.failed(error),
    );
  }

  flush() {
    this.busy = null;
    while (this.backlog !== null && this.backlog.length > 0 && !this.detached) {
      const result = this.backlog.shift()();
      if (isPromise(result)) {
        this.waited(result);
        return;
      }
      this.apply(result);
    }
    if (this.drainWanted) {
      this.drainWanted = false;
      this.down.emit.call(this.res, "drain");
    }
    this.settle();
  }

  /**
   * Runs a step of the guard in order; false when it had to wait (or queue). A step that
   * throws (or what it sends) fails the response (see `failed`) and throws to the caller.
   */
  run(step) {
    if (this.detached) return true;
    if (this.busy !== null) {
      (this.backlog ??= []).push(step);
      return false;
    }
    try {
      const result = step();
      if (isPromise(result)) {
        this.waited(result);
        return false;
      }
      this.apply(result);
    } catch (error) {
      this.failed(error);
      throw error;
    }
    return true;
  }

  /**
   * The client left (or its response was complete) before the handler ended it: the
   * outbound is let go without an end, as when the tower skin's client drops its body. An
   * end here would tell the guard the handler failed, and the stream's requests would read
   * as lost: the client's resume, which the inner server can still serve, would be refused.
   */
  detach() {
    if (!this.innerEnded && !this.detached) {
      this.detached = true;
      this.finished = true;
      this.backlog = null;
      this.takePending();
      this.close();
    }
  }

  /** What is pending, as one buffer (`null` when nothing is), leaving nothing. */
  takePending() {
    const pending = this.pending;
    this.pending = null;
    this.pendingSize = 0;
    this.scheduled = false;
    if (pending === null) return null;
    return pending.length === 1 ? pending[0] : Buffer.concat(pending);
  }

  /**
   * Pushes the held head and the pending bytes, in one crossing, with the end when the handler
   * ended; false when it had to wait.
   */
  pushPending() {
    const bytes = this.takePending();
    const head = this.heldHead;
    if (this.endDue) {
      this.endDue = false;
      this.heldHead = null;
      const [status, headers] = head ?? NO_HEAD;
      // Ended once the end went to the guard: a push that threw failed the response (`run`).
      if (this.untouched && bytes !== null) {
        // The last bytes pass unchanged: sent as they are, not copied through the guard.
        this.run(() => bytes);
        this.run(() => this.guard.push(this.handle, 0, null, null, true));
      } else {
        this.run(() => this.guard.push(this.handle, status, headers, bytes, true));
      }
      this.letGo();
      this.settle();
      return true;
    }
    if (head !== null) {
      this.heldHead = null;
      return this.run(() => this.guard.push(this.handle, head[0], head[1], bytes, false));
    }
    return bytes === null || this.run(() => this.pushBody(bytes));
  }

  /** Pushes what is pending at the end of this turn of the event loop (see `pushDue`). */
  pushSoon() {
    if (this.scheduled) return;
    this.scheduled = true;
    if (due.length === 0) setImmediate(pushDue);
    due.push(this);
  }

  writeHead(status, reason, headers) {
    if (this.headPushed) return;
    // Checked now, as Node's own `writeHead` does: what it refuses throws to the handler,
    // which can still write another head.
    const code = statusOf(status);
    // The headers are the third argument after a reason phrase, else the second unless a
    // third is given (`writeHead(200, undefined, headers)`), as Node reads them.
    let given = headers;
    if (typeof reason === "string") checkReason(reason);
    else given ??= reason;
    const list = headerList(this.res, given);
    this.headPushed = true;
    this.res.statusCode = code;
    this.heldHead = [code, list.join("\0")];
    this.givenHead = list;
  }

  flushHeaders() {
    // The head goes when the guard lets it (an initialize's or a resume's is held).
    this.flushWanted = true;
    if (!this.headPushed) this.writeHead(this.res.statusCode);
    if (this.heldHead !== null) {
      // With the bytes written in this turn, if any.
      this.pushSoon();
    } else if (this.headSent && !this.finished && !this.gone()) {
      this.down.flushHeaders.call(this.res);
    }
  }

  write(chunk, encoding, callback) {
    if (typeof encoding === "function") [callback, encoding] = [encoding, undefined];
    if (this.innerEnded) {
      // Past the end nothing more reaches the client (the guard let the response go).
      if (callback) process.nextTick(callback);
      return !this.headSent || this.gone() || !this.res.writableNeedDrain;
    }
    if (!this.headPushed) this.writeHead(this.res.statusCode);
    const bytes = toBuffer(chunk, encoding);
    let ok = true;
    if (bytes.length > 0) {
      if (this.untouched && this.heldHead === null && this.pending === null) {
        // Passes unchanged, without crossing to the guard. Not while bytes written before
        // it are pending (the guard said untouched, for a chunk queued behind a store step,
        // after they were written): it goes after them.
        ok = this.run(() => bytes);
      } else {
        (this.pending ??= []).push(bytes);
        this.pendingSize += bytes.length;
        if (this.pendingSize >= PUSH_AT) ok = this.pushPending();
        else this.pushSoon();
      }
    }
    if (callback) process.nextTick(callback);
    if (!ok) {
      this.drainWanted = true;
      return false;
    }
    // The client's own backpressure, when it is still there (none before anything was sent).
    return !this.headSent || this.gone() || !this.res.writableNeedDrain;
  }

  end(chunk, encoding, callback) {
    if (typeof chunk === "function") [callback, chunk, encoding] = [chunk, undefined, undefined];
    if (typeof encoding === "function") [callback, encoding] = [encoding, undefined];
    if (this.innerEnded) return;
    if (!this.headPushed) this.writeHead(this.res.statusCode);
    const last = toBuffer(chunk, encoding);
    if (callback) (this.endCallbacks ??= []).push(callback);
    if (last.length > 0) {
      (this.pending ??= []).push(last);
      this.pendingSize += last.length;
    }
    this.innerEnded = true;
    // The end goes to the guard at the end of this turn, with the other responses ended in it
    // (see `pushDue`): their crossings come one after the other, while the addon's code is in
    // the processor's caches, instead of each after a handler's run that evicted it.
    this.endDue = true;
    this.pushSoon();
  }
}
