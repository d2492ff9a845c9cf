// One Error subclass per kind of failure (the Rust SDK's `ErrorKind`), all under
// McpResumeError, each with `kind` (the SDK's name, e.g. "outcome_unknown"). The addon makes
// them through `fromNative` (registered in native.js), so a rejected promise already holds
// the right class.

/** Every error of this package: `kind` names what happened. */
export class McpResumeError extends Error {
  /** @type {string | undefined} The kind of this class's errors (each subclass names its own). */
  static kind = undefined;

  constructor(message, details = {}) {
    super(message);
    this.name = new.target.name;
    this.kind = details.kind ?? new.target.kind;
    if (details.retryAfterMs !== undefined) this.retryAfterMs = details.retryAfterMs;
    // Whether the request it ended may have run (retrying it could run it twice).
    this.mayHaveRun =
      details.mayHaveRun ?? (this.kind === "outcome_unknown" || this.kind === "context_mismatch");
    // Whether the call stopped because the app's handler could not provide an input the
    // server asked for: re-sent, it would only ask for that input again.
    this.inputRefused = details.inputRefused ?? false;
  }
}

/** The network failed beyond the recovery limits. */
export class TransportError extends McpResumeError { static kind = "transport"; }
/** The call's deadline passed (the server was told to cancel it). */
export class McpTimeoutError extends McpResumeError { static kind = "timeout"; }
/** The session could not be re-established. */
export class SessionLostError extends McpResumeError { static kind = "session_lost"; }
/** The call was interrupted and may or may not have run: check before retrying. */
export class OutcomeUnknownError extends McpResumeError { static kind = "outcome_unknown"; }
/** The answer was produced under another negotiated context (it ran: never re-sent). */
export class ContextMismatchError extends McpResumeError { static kind = "context_mismatch"; }
/** The server broke the protocol. */
export class ProtocolError extends McpResumeError { static kind = "protocol"; }
/** The server sent more than the configured maximum. */
export class TooLargeError extends McpResumeError { static kind = "too_large"; }
/** The client was closed. */
export class ClosedError extends McpResumeError { static kind = "closed"; }
/** An option or argument the SDK cannot take. */
export class InvalidConfigError extends McpResumeError { static kind = "invalid_config"; }
/** The ledger of calls in flight could not be read (`recover()`). */
export class LedgerError extends McpResumeError { static kind = "ledger"; }

/** The server refused the credentials: `authChallenge` holds its `WWW-Authenticate`. */
export class UnauthorizedError extends McpResumeError {
  static kind = "unauthorized";
  constructor(message, details = {}) {
    super(message, details);
    this.authChallenge = details.authChallenge ?? null;
  }
}

/**
 * A JSON-RPC error object: the server's answer to a call, or what a handler throws to answer
 * the server's request with a JSON-RPC error.
 */
export class RpcError extends McpResumeError {
  static kind = "rpc";
  constructor(code, message, data) {
    super(message, { kind: "rpc" });
    this.code = code;
    this.data = data;
  }
}

/** A 2026-07-28 server requires a client capability the client did not declare. */
export class MissingCapabilityError extends McpResumeError {
  static kind = "missing_capability";
  constructor(message, details = {}) {
    super(message, details);
    this.code = details.code;
    this.data = details.data;
  }
}

const CLASSES = [
  TransportError, McpTimeoutError, SessionLostError, OutcomeUnknownError, ContextMismatchError,
  ProtocolError, TooLargeError, ClosedError, InvalidConfigError, UnauthorizedError,
  MissingCapabilityError, LedgerError,
];
const BY_KIND = new Map(CLASSES.map((c) => [c.kind, c]));

/** The error the addon reports: `{kind, message, code?, rpcMessage?, data?, …}`. */
export function fromNative(details) {
  if (details.kind === "rpc") {
    const error = new RpcError(details.code, details.rpcMessage ?? details.message, details.data);
    if (details.retryAfterMs !== undefined) error.retryAfterMs = details.retryAfterMs;
    // A server's error that did not answer the call itself (a task's poll refused) may leave
    // the call running: retrying it could run it twice.
    if (details.mayHaveRun !== undefined) error.mayHaveRun = details.mayHaveRun;
    return error;
  }
  const Class = BY_KIND.get(details.kind) ?? McpResumeError;
  return new Class(details.message, details);
}
