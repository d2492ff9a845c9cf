// What on-headers 1.0.2 puts on a response (the version morgan <= 1.10.0, express-session
// <= 1.18.1, compression <= 1.8.0 and response-time use): its own `writeHead` on the response,
// which sets the headers it was given with `setHeader` and passes only the status on. An array
// of headers is read as `[name, value]` pairs, as that version does.

/** Calls `listener` (with the response as `this`) just before its head is written. */
export function onHeaders(res, listener) {
  res.writeHead = createWriteHead(res.writeHead, listener);
}

function createWriteHead(prevWriteHead, listener) {
  let fired = false;
  return function writeHead(statusCode) {
    const args = setWriteHeadHeaders.apply(this, arguments);
    if (!fired) {
      fired = true;
      listener.call(this);
      if (typeof args[0] === "number" && this.statusCode !== args[0]) {
        args[0] = this.statusCode;
        args.length = 1;
      }
    }
    return prevWriteHead.apply(this, args);
  };
}

function setWriteHeadHeaders(statusCode) {
  const length = arguments.length;
  const headerIndex = length > 1 && typeof arguments[1] === "string" ? 2 : 1;
  const headers = length >= headerIndex + 1 ? arguments[headerIndex] : undefined;
  this.statusCode = statusCode;
  if (Array.isArray(headers)) {
    for (let i = 0; i < headers.length; i++) this.setHeader(headers[i][0], headers[i][1]);
  } else if (headers) {
    for (const key of Object.keys(headers)) if (key) this.setHeader(key, headers[key]);
  }
  const args = new Array(Math.min(length, headerIndex));
  for (let i = 0; i < args.length; i++) args[i] = arguments[i];
  return args;
}
