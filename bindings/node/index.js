// mcp-resume for Node.js: the resume-aware client, and the TypeScript SDK's Transport over it
// (or, for a client that takes only a fetch function, a fetch over it); and the resume-safety
// guard for MCP servers (ResumeSafety).
export { Client, RecoveredCall } from "./lib/client.js";
export { ResumeTransport } from "./lib/transport.js";
export { resumeFetch } from "./lib/fetch.js";
export { ResumeSafety } from "./lib/server.js";
export { toolCallKey, withToolCallKeys } from "./lib/keys.js";
export {
  ClosedError,
  ContextMismatchError,
  InvalidConfigError,
  LedgerError,
  McpResumeError,
  McpTimeoutError,
  MissingCapabilityError,
  OutcomeUnknownError,
  ProtocolError,
  RpcError,
  SessionLostError,
  TooLargeError,
  TransportError,
  UnauthorizedError,
} from "./lib/errors.js";
import { bridgeConstants } from "./lib/native.js";

/** The `_meta` member whose string value makes a `tools/call` keyed (safe to re-send). */
export const IDEMPOTENCY_META_KEY = bridgeConstants.idempotencyMetaKey;

/**
 * The JSON-RPC error code `ResumeTransport` answers with for each failure JSON-RPC cannot name
 * (the error's `data.kind` is the key).
 */
export const BRIDGE_ERROR_CODES = Object.freeze(bridgeConstants.errorCodes);
