// Options of the TypeScript SDK's transport that this binding does not take. Passed out of
// habit they would be ignored without a word (an `authProvider` leaving every request
// unauthenticated), so each fails the constructor, saying what to use instead.
import { InvalidConfigError } from "./errors.js";

const UNSUPPORTED = {
  authProvider:
    "this binding has no OAuth provider: pass a token obtained elsewhere as bearerToken (or in headers); the Rust SDK and the Python binding run MCP authorization",
  requestInit: "pass headers instead",
  fetch: "the Rust SDK makes the HTTP requests itself",
  reconnectionOptions: "pass reconnect instead",
  sessionId: "the SDK keeps the session itself",
};

/** Throws InvalidConfigError when `options` sets one of the transport options not taken. */
export function refuseUnsupported(options) {
  for (const [name, instead] of Object.entries(UNSUPPORTED)) {
    if (options?.[name] !== undefined && options[name] !== null) {
      throw new InvalidConfigError(`${name} is not supported: ${instead}`);
    }
  }
}
