// The resume-safety guard for Node MCP servers (the TypeScript SDK's
// StreamableHTTPServerTransport under Express, connect or node:http), over mcp-resume-server's
// guard. A skin: every rule, the store steps and the rewriting of responses are the Rust
// guard's, the same one the tower ResumeSafetyLayer and the Python middleware drive; this file
// moves bytes between Node's request/response objects and it.
import { NativeGuard, NativeOutbound, NativeStep } from "./native.js";

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
 * `resumeChecks` (true), `idempotency` (true), `retryAfter` (1000), `seed` (random).
 *
 * The request's body is read by the guard and handed on as `req.body` (parsed JSON, as
 * `express.json()` would): pass it to `transport.handleRequest(req, res, req.body)`, as the
 * SDK's examples do. A body over `maxBody` is left unread, for the handler to read.
 */
export class ResumeSafety {
  #guard;

  constructor(options = {}) {
    this.#guard = new NativeGuard(options);
  }

  /** The name this process writes as owner of sessions and claims. */
  get instanceId() {
    return this.#guard.instanceId;
  }

  /** An Express/connect middleware: `next()` runs the handler behind the guard. */
  middleware() {
    return (req, res, next) => {
      try {
        const pending = this.#handle(req, res, next);
        if (isPromise(pending)) pending.catch(next);
      } catch (error) {
        next(error);
      }
    };
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
      try {
        const pending = this.#handle(req, res, () => handler(req, res, ...rest));
        if (isPromise(pending)) pending.catch(failed);
      } catch (error) {
        failed(error);
      }
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
    // Headers cross to the addon as one string (NUL, which Node refuses in headers, between
    // names and values): one conversion instead of one per name and value. A body a parser
    // in front read already goes with them: one crossing instead of two.
    const body = req.method === "POST" ? readAlready(req) : undefined;
    const step = this.#guard.begin(req.method, req.rawHeaders.join("\0"), body);
    return isPromise(step) ? step.then((s) => act(req, res, next, s)) : act(req, res, next, step);
  }
}

/** Does what the guard's step says (see the addon's `Step`). */
function act(req, res, next, step) {
  if (step === null) return next();
  if (step instanceof NativeOutbound) {
    // Only a client's own Last-Event-ID is ever replaced (a resume's cursor).
    if (req.headers["last-event-id"] !== undefined) {
      const lastEventId = step.lastEventId;
      if (lastEventId !== null) replaceHeader(req, "last-event-id", lastEventId);
    }
    intercept(res, step);
    return next();
  }
  if (step instanceof NativeStep) {
    const given = (body) => {
      if (body === undefined) return; // the client left while sending: nothing to forward
      const after = step.body(body);
      return isPromise(after) ? after.then((s) => act(req, res, next, s)) : act(req, res, next, after);
    };
    const read = readAlready(req);
    if (read !== undefined) return given(read.length > step.limit ? null : read);
    return readBody(req, step.limit).then(given);
  }
  return answer(res, step);
}

/**
 * The body a parser in front of the guard read already (`express.json()`), as bytes: what
 * it parsed. `undefined` when it is still to be read.
 */
function readAlready(req) {
  if (!(req._body || req.readableEnded)) return undefined;
  const parsed = req.body;
  if (parsed === undefined) return Buffer.alloc(0);
  if (Buffer.isBuffer(parsed)) return parsed;
  return Buffer.from(typeof parsed === "string" ? parsed : JSON.stringify(parsed));
}

/**
 * The request body: its bytes, `null` when it is longer than `limit` (then left for the
 * handler to read, what was read put back), `undefined` when the client left. A complete
 * body is handed on parsed as `req.body`.
 */
function readBody(req, limit) {
  return new Promise((resolve) => {
    const chunks = [];
    let size = 0;
    const done = (value) => {
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("error", onGone);
      req.off("close", onClose);
      resolve(value);
    };
    const onData = (chunk) => {
      chunks.push(chunk);
      size += chunk.length;
      if (size > limit) {
        req.pause();
        done(null);
        req.unshift(Buffer.concat(chunks));
      }
    };
    const onEnd = () => {
      const bytes = Buffer.concat(chunks);
      try {
        req.body = JSON.parse(bytes.toString("utf8"));
        req._body = true;
      } catch {
        // Not JSON: the handler answers it as it would have.
      }
      done(bytes);
    };
    const onGone = () => done(undefined);
    const onClose = () => {
      if (!req.readableEnded) done(undefined);
    };
    req.on("data", onData);
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
  res.writeHead(status, split(headers ?? ""));
  res.end(body ?? undefined);
}

/** How a `Sent` says the response ends. */
const COMPLETE = 1;
const ABORT = 2;

/** A flat name/value list from the addon's NUL-joined string. */
const split = (joined) => (joined === "" ? [] : joined.split("\0"));

/** The handler's `writeHead` headers, with those set before (`setHeader`), as a flat list. */
function headerList(res, headers) {
  const merged = new Map();
  const put = (name, value) => {
    if (value === undefined) return;
    merged.set(String(name).toLowerCase(), Array.isArray(value) ? value.map(String) : [String(value)]);
  };
  for (const name of res.getHeaderNames()) put(name, res.getHeader(name));
  if (Array.isArray(headers)) {
    if (headers.length > 0 && Array.isArray(headers[0])) {
      for (const [name, value] of headers) put(name, value);
    } else {
      for (let i = 0; i + 1 < headers.length; i += 2) put(headers[i], headers[i + 1]);
    }
  } else if (headers) {
    for (const [name, value] of Object.entries(headers)) put(name, value);
  }
  const flat = [];
  for (const [name, values] of merged) for (const value of values) flat.push(name, value);
  return flat;
}

function toBuffer(chunk, encoding) {
  if (chunk === undefined || chunk === null) return Buffer.alloc(0);
  if (typeof chunk === "string") return Buffer.from(chunk, encoding ?? "utf8");
  if (Buffer.isBuffer(chunk)) return chunk;
  return Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
}

/**
 * Routes what the handler writes to `res` through `out`: its head and body are pushed to the
 * guard, and what the guard says to send goes to the client, in order. A keyed call's handler
 * never hears that its client left (its answer is stored for the client's re-send): `close`
 * and `error` of the response reach it once it has ended.
 */
function intercept(res, out) {
  const real = {
    writeHead: res.writeHead,
    write: res.write,
    end: res.end,
    flushHeaders: res.flushHeaders,
    emit: res.emit,
  };
  const keyed = out.keyed;
  let headPushed = false; // the handler's head went to the guard
  let headSent = false; // the guard let the head go to the client
  // The handler's head, held until what follows it (a flush, body bytes, the end) so that
  // they cross to the guard together: [status, headers].
  let heldHead = null;
  let flushWanted = false; // the handler flushed its head: it goes as soon as the guard lets it
  let finished = false; // the client's response is complete (or aborted)
  let innerEnded = false; // the handler ended its response
  let detached = false; // an unkeyed call's client left: nothing more goes through the guard
  let untouched = false; // body chunks pass unchanged, without crossing to the guard
  let busy = null; // a step waiting for the store
  const backlog = [];
  let drainWanted = false;
  const deferred = [];
  const endCallbacks = [];

  const gone = () => res.destroyed;

  /** Sends what the guard said to (see the addon's `Sent`). */
  const apply = (sent) => {
    if (finished || sent === undefined) return;
    if (!Array.isArray(sent)) {
      if (!gone()) real.write.call(res, sent);
      return;
    }
    const [status, headers, body, end] = sent;
    if (status !== 0 && !gone()) {
      for (const name of res.getHeaderNames()) res.removeHeader(name);
      real.writeHead.call(res, status, split(headers));
      headSent = true;
      // Else the head goes with the first body bytes, in one write.
      if (flushWanted && body === null && end === 0) real.flushHeaders.call(res);
    }
    if (end === COMPLETE) {
      finished = true;
      if (!gone()) real.end.call(res, body ?? undefined);
      return;
    }
    if (body !== null && !gone()) real.write.call(res, body);
    if (end === ABORT) {
      finished = true;
      res.destroy(new Error("mcp-resume: the guard cut this response short"));
    }
  };

  /** A body chunk through the guard; once it says the body is untouched, none crosses. */
  const pushBody = (bytes) => {
    if (untouched) return bytes;
    const sent = out.body(bytes);
    if (sent !== true) return sent;
    untouched = true;
    return bytes;
  };

  const settle = () => {
    // The guard let the response go at its end.
    if (!innerEnded || busy !== null || backlog.length > 0) return;
    for (const cb of endCallbacks.splice(0)) cb();
    if (keyed) {
      res.emit = real.emit;
      for (const [event, args] of deferred.splice(0)) real.emit.call(res, event, ...args);
    }
  };

  const failed = (error) => {
    busy = null;
    backlog.length = 0;
    finished = true;
    out.close();
    res.destroy(error);
  };

  const flush = () => {
    busy = null;
    while (backlog.length > 0 && !detached) {
      const result = backlog.shift()();
      if (isPromise(result)) {
        busy = result.then((sent) => {
          apply(sent);
          flush();
        }, failed);
        return;
      }
      apply(result);
    }
    if (drainWanted) {
      drainWanted = false;
      real.emit.call(res, "drain");
    }
    settle();
  };

  /** Runs a step of the guard in order; false when it had to wait (or queue). */
  const run = (step) => {
    if (detached) return true;
    if (busy !== null) {
      backlog.push(step);
      return false;
    }
    const result = step();
    if (isPromise(result)) {
      busy = result.then((sent) => {
        apply(sent);
        flush();
      }, failed);
      return false;
    }
    apply(result);
    return true;
  };

  res.writeHead = function writeHead(status, reason, headers) {
    if (headPushed) return this;
    headPushed = true;
    const given = typeof reason === "string" ? headers : reason;
    this.statusCode = status;
    heldHead = [status, headerList(this, given).join("\0")];
    return this;
  };

  /** Takes the held head: [status, headers], or [0, null] when none is held. */
  const takeHead = () => {
    const head = heldHead ?? [0, null];
    heldHead = null;
    return head;
  };

  res.flushHeaders = function flushHeaders() {
    // The head goes when the guard lets it (an initialize's or a resume's is held).
    flushWanted = true;
    if (!headPushed) this.writeHead(this.statusCode);
    if (heldHead !== null) {
      const [status, headers] = takeHead();
      run(() => out.push(status, headers, null, false));
    } else if (headSent && !finished && !gone()) {
      real.flushHeaders.call(res);
    }
  };

  res.write = function write(chunk, encoding, callback) {
    if (typeof encoding === "function") [callback, encoding] = [encoding, undefined];
    if (!headPushed) this.writeHead(this.statusCode);
    const bytes = toBuffer(chunk, encoding);
    let ok = true;
    if (bytes.length > 0) {
      if (heldHead !== null) {
        const [status, headers] = takeHead();
        ok = run(() => out.push(status, headers, bytes, false));
      } else {
        ok = run(() => pushBody(bytes));
      }
    }
    if (callback) process.nextTick(callback);
    if (!ok) {
      drainWanted = true;
      return false;
    }
    // The client's own backpressure, when it is still there.
    return gone() || !res.writableNeedDrain;
  };

  res.end = function end(chunk, encoding, callback) {
    if (typeof chunk === "function") [callback, chunk, encoding] = [chunk, undefined, undefined];
    if (typeof encoding === "function") [callback, encoding] = [encoding, undefined];
    if (innerEnded) return this;
    if (!headPushed) this.writeHead(this.statusCode);
    const bytes = toBuffer(chunk, encoding);
    innerEnded = true;
    if (callback) endCallbacks.push(callback);
    const [status, headers] = takeHead();
    if (untouched && bytes.length > 0) {
      // The last bytes pass unchanged: sent as they are, not copied through the guard.
      run(() => bytes);
      run(() => out.push(0, null, null, true));
    } else {
      run(() => out.push(status, headers, bytes.length > 0 ? bytes : null, true));
    }
    settle();
    return this;
  };

  if (keyed) {
    res.emit = function emit(event, ...args) {
      if ((event === "close" || event === "error") && !innerEnded) {
        deferred.push([event, args]);
        return true;
      }
      return real.emit.call(this, event, ...args);
    };
  } else {
    // The client left (or its response was complete) before the handler ended it: the
    // outbound is let go without an end, as when the tower skin's client drops its body. An
    // end here would tell the guard the handler failed, and the stream's requests would read
    // as lost: the client's resume, which the inner server can still serve, would be refused.
    res.once("close", () => {
      if (!innerEnded && !detached) {
        detached = true;
        finished = true;
        backlog.length = 0;
        out.close();
      }
    });
  }
}
