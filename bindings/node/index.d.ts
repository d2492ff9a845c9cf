// Declarations of the public API (index.js). The addon's own, generated from the Rust
// sources, are native.d.ts; the suite checks that these match what index.js exports.

/** A JSON value as the server sent it. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** `initialize`'s result (for a 2026-07-28 server: its discovery, shaped alike). */
export interface InitializeResult {
  protocolVersion: string;
  capabilities: { [key: string]: Json };
  serverInfo: { name: string; version: string; [key: string]: Json };
  instructions?: string;
  [key: string]: Json | undefined;
}

/** A tool of `tools/list`. */
export interface Tool {
  name: string;
  title?: string;
  description?: string;
  inputSchema: { [key: string]: Json };
  outputSchema?: { [key: string]: Json };
  annotations?: { readOnlyHint?: boolean; idempotentHint?: boolean; [key: string]: Json | undefined };
  [key: string]: Json | undefined;
}

/** A content item (`text`, `image`, `audio`, `resource`, `resource_link`, …). */
export interface Content {
  type: string;
  text?: string;
  [key: string]: Json | undefined;
}

/** The result of `tools/call`; a tool's own failure is `isError: true`. */
export interface CallToolResult {
  content: Content[];
  structuredContent?: { [key: string]: Json };
  isError?: boolean;
  _meta?: { [key: string]: Json };
  [key: string]: Json | undefined;
}

/** One page of a list method's result: its items under the list's member, and `nextCursor`. */
export interface Page {
  nextCursor?: string;
  [key: string]: Json | undefined;
}

/** A resource, a resource template or a prompt, as listed. */
export interface Listed {
  name: string;
  [key: string]: Json | undefined;
}

/** `resources/read`'s result. */
export interface ReadResourceResult {
  contents: Array<{ uri: string; mimeType?: string; text?: string; blob?: string; [key: string]: Json | undefined }>;
  [key: string]: Json | undefined;
}

/** `prompts/get`'s result. */
export interface GetPromptResult {
  description?: string;
  messages: Array<{ role: "user" | "assistant"; content: Content }>;
  [key: string]: Json | undefined;
}

/** `completion/complete`'s `completion`. */
export interface Completion {
  values: string[];
  total?: number;
  hasMore?: boolean;
}

/** Backoff and caps; delays in milliseconds. Each left out keeps the SDK's default. */
export interface ReconnectOptions {
  initialDelay?: number;
  multiplier?: number;
  maxDelay?: number;
  jitter?: number;
  maxAttempts?: number;
  maxResumesWithoutProgress?: number;
  maxReinitFailures?: number;
}

/** The session's options; durations in milliseconds. Each left out keeps the SDK's default. */
export interface SessionOptions {
  /** Capabilities sent at `initialize` (handlers add theirs). */
  capabilities?: { [key: string]: Json };
  clientInfo?: { name: string; version: string };
  /** Offered at `initialize` (legacy era). */
  protocolVersion?: string;
  /** `auto` (default: probe with `server/discover`, fall back to `initialize`). */
  era?: "auto" | "legacy" | "modern";
  /** Sent as `Authorization: Bearer <token>` on every request. */
  bearerToken?: string;
  /** Extra headers on every request (resumes and DELETE included). */
  headers?: Record<string, string>;
  /** One deadline per call across every resume and re-send (default 60 000). */
  callTimeout?: number;
  /** TCP connect timeout (default 10 000). */
  connectTimeout?: number;
  reconnect?: ReconnectOptions;
  /** When keyed calls may be re-sent (default `server_advertised`). */
  resendPolicy?: "server_advertised" | "assume_server_deduplicates";
  /** Largest SSE event accepted, in bytes (default 16 MiB). */
  maxEventSize?: number;
  /** Largest JSON body accepted, in bytes (default 16 MiB). */
  maxBodySize?: number;
  /** Open the standalone GET stream after `initialize` (default true). */
  openListenStream?: boolean;
  /** Fixes the reconnect jitter (reproducible tests). */
  jitterSeed?: number;
  /**
   * Base URL of an OTLP/HTTP collector (e.g. `http://127.0.0.1:4318`): the client's
   * OpenTelemetry spans and metrics go to `/v1/traces` and `/v1/metrics`, each call's span a
   * child of the span active when it is made (read through `@opentelemetry/api` when it is
   * installed). `close()` flushes what is waiting. Default: no telemetry.
   */
  otlpEndpoint?: string;
  /**
   * Not taken: this binding has no OAuth provider. Pass a token obtained elsewhere as
   * `bearerToken` (or in `headers`); the Rust SDK and the Python binding run MCP
   * authorization. Given anyway, the constructor throws `InvalidConfigError` instead of
   * sending every request without credentials.
   */
  authProvider?: never;
  /** Not taken (the TypeScript SDK's): `headers` instead. Throws `InvalidConfigError`. */
  requestInit?: never;
  /** Not taken: the Rust SDK makes the requests. Throws `InvalidConfigError`. */
  fetch?: never;
  /** Not taken: `reconnect` instead. Throws `InvalidConfigError`. */
  reconnectionOptions?: never;
  /** Not taken: the SDK keeps the session. Throws `InvalidConfigError`. */
  sessionId?: never;
}

/** What a handler is given besides the request's params. */
export interface HandlerContext {
  /**
   * Fires when the server cancels its request, when its session is replaced, when the MRTR
   * round or task call it serves ends, or when the client is closed.
   */
  signal: AbortSignal;
  method: string;
  requestId: string | number;
}

type Answer<T> = T | Promise<T>;

/** The client's options: the session's, its ledger, and handlers for the server's requests. */
export interface ClientOptions extends SessionOptions {
  /**
   * Where calls in flight are recorded for `recover()`: `"memory"` (default: the client's
   * own), `"none"`, or a Redis URL (`"redis://host:6379"`, with `ledgerIdentity`) for a fleet.
   */
  ledger?: "memory" | "none" | `redis://${string}` | `rediss://${string}`;
  /** The worker's stable name: the Redis ledger's namespace, the same after a restart. */
  ledgerIdentity?: string;
  /** Whether ledger entries name the session each call went out on (default false). */
  recordSessionIds?: boolean;
  /** `sampling/createMessage` (declares `sampling`): the params in, the result out. */
  onSampling?: (params: { [key: string]: Json }, context: HandlerContext) => Answer<{ [key: string]: Json }>;
  /** `elicitation/create` (declares `elicitation`). */
  onElicitation?: (params: { [key: string]: Json }, context: HandlerContext) => Answer<{ action: "accept" | "decline" | "cancel"; content?: { [key: string]: Json } }>;
  /** `roots/list` (declares `roots`): the roots. */
  onRoots?: (context: HandlerContext) => Answer<Array<{ uri: string; name?: string }>>;
  /** Any other server request (declares nothing). */
  onServerRequest?: (request: { method: string; params?: { [key: string]: Json } }, context: HandlerContext) => Answer<{ [key: string]: Json }>;
}

/** Per-call options. */
export interface CallOptions {
  /** Cancels the call on the server; no resume or re-send of it after. Rejects with its reason. */
  signal?: AbortSignal;
  /** This call's deadline (ms), across every resume and re-send. */
  timeout?: number;
  /** Members added to `_meta`. */
  meta?: { [key: string]: Json };
  /**
   * `_meta.progressToken` (a string or an integer, else the call rejects with
   * `InvalidConfigError` unsent): progress arrives under it on `notifications()`.
   */
  progressToken?: string | number;
}

/** A session event: `type` names it; the other members depend on it. */
export interface SessionEvent {
  type:
    | "connected" | "listening" | "listen_stopped" | "resumed" | "resume_rejected" | "reinitialized"
    | "redispatched" | "outcome_unknown" | "context_mismatch" | "checks_degraded" | "era_detected"
    | "task_created" | "task_finished" | "session_lost" | "closed" | "other";
  call?: number;
  method?: string;
  idempotencyKey?: string | null;
  protocolVersion?: string;
  lastEventId?: string;
  /**
   * Why the session was re-initialized (`reinitialized`), what is missing
   * (`checks_degraded`), or why the client stopped opening the stream of server messages
   * (`listen_stopped`: `"gave_up"`, `"refused"`, `"unauthorized"`).
   */
  reason?: string;
  /** Consecutive failed attempts (`listen_stopped` with `reason` `"gave_up"`). */
  attempts?: number | null;
  rejectReason?: string | null;
  capabilitiesChanged?: boolean;
  status?: ExtensionStatus;
  era?: "auto" | "legacy" | "modern";
  taskId?: string;
  detail?: string;
}

/** A server notification; `call` is the call it belongs to, when known. */
export interface ServerNotification {
  method: string;
  params: { [key: string]: Json } | null;
  call: number | null;
}

/** The resume-safety checks in force. */
export interface ExtensionStatus {
  advertised: boolean;
  capabilityHash: boolean;
  sequencedEventIds: boolean;
  idempotency: boolean;
}

/** Ends the iteration when aborted. */
export interface IterateOptions {
  signal?: AbortSignal;
}

/** A call `Client.recover()` picked up: its ledger entry's facts, and its outcome. */
export declare class RecoveredCall {
  readonly entryId: string;
  readonly method: string;
  readonly params: { [key: string]: Json } | null;
  readonly toolName: string | null;
  readonly arguments: Json | null;
  readonly idempotencyKey: string | null;
  readonly stage: "sent" | "awaiting_input" | "task";
  readonly taskId: string | null;
  /** The call's deadline, in milliseconds since the epoch. */
  readonly deadline: number;
  /**
   * The call's result, or the typed error: `OutcomeUnknownError` for an unkeyed call that
   * may have run (never re-sent). Asked for once.
   */
  outcome(): Promise<any>;
}

/** A resume-aware MCP client for one Streamable HTTP endpoint. */
export declare class Client {
  /** Checks the options (throws InvalidConfigError); touches no network. */
  constructor(url: string | URL, options?: ClientOptions);
  connect(): Promise<InitializeResult>;
  /**
   * Picks up the calls the ledger holds for this endpoint that this client does not have in
   * flight (what the process it replaces left): keyed calls re-sent under their key where the
   * server deduplicates, MRTR rounds continued, tasks polled, unkeyed calls reported. The
   * one way a fleet restarts: call it first. Rejects with `LedgerError`, or `ClosedError`
   * after `close()` (nothing is picked up: every entry is left to the next process). Ask every call's
   * `outcome()`: until then the call (and its result once it ends) is kept as long as the
   * client is.
   */
  recover(): Promise<RecoveredCall[]>;
  listTools(): Promise<Tool[]>;
  listToolsPage(cursor?: string): Promise<Page & { tools: Tool[] }>;
  /** `idempotencyKey` makes the call keyed: re-sent after an interruption where the server deduplicates. */
  callTool(name: string, args?: { [key: string]: Json }, options?: CallOptions & { idempotencyKey?: string }): Promise<CallToolResult>;
  request(method: string, params?: { [key: string]: Json }, options?: CallOptions): Promise<{ [key: string]: Json }>;
  notify(method: string, params?: { [key: string]: Json }): void;
  ping(): Promise<void>;
  listResources(): Promise<Listed[]>;
  listResourcesPage(cursor?: string): Promise<Page>;
  listResourceTemplates(): Promise<Listed[]>;
  listResourceTemplatesPage(cursor?: string): Promise<Page>;
  readResource(uri: string): Promise<ReadResourceResult>;
  subscribeResource(uri: string): Promise<void>;
  unsubscribeResource(uri: string): Promise<void>;
  listPrompts(): Promise<Listed[]>;
  listPromptsPage(cursor?: string): Promise<Page>;
  getPrompt(name: string, args?: Record<string, string>): Promise<GetPromptResult>;
  complete(ref: { type: "ref/prompt"; name: string } | { type: "ref/resource"; uri: string }, argument: { name: string; value: string }, context?: Record<string, string>): Promise<Completion>;
  setLoggingLevel(level: "debug" | "info" | "notice" | "warning" | "error" | "critical" | "alert" | "emergency"): Promise<void>;
  notifyRootsChanged(): void;
  /** DELETEs the session: later calls fail with ClosedError, iterators end. */
  close(): Promise<void>;
  get era(): "auto" | "legacy" | "modern";
  get sessionId(): string | null;
  get extensionStatus(): ExtensionStatus | null;
  events(options?: IterateOptions): AsyncGenerator<SessionEvent, void, undefined>;
  notifications(options?: IterateOptions): AsyncGenerator<ServerNotification, void, undefined>;
}

/** A JSON-RPC message, as the TypeScript SDK's transports carry it. */
export interface JSONRPCMessage {
  jsonrpc: "2.0";
  id?: string | number;
  method?: string;
  params?: { [key: string]: unknown };
  result?: { [key: string]: unknown };
  error?: { code: number; message: string; data?: unknown };
}

/** ResumeTransport's options: the session's, and the bridge's own. */
export interface ResumeTransportOptions extends SessionOptions {
  /** Let `readOnlyHint`/`idempotentHint` make unkeyed calls safe to re-send (default false). */
  trustToolAnnotations?: boolean;
  /** The bound of each direction, in messages (default 64). */
  capacity?: number;
}

/**
 * The TypeScript SDK's `Transport` (and the Vercel AI SDK's `MCPTransport`) over mcp-resume:
 * `await client.connect(new ResumeTransport(url))`.
 */
export declare class ResumeTransport {
  constructor(url: string | URL, options?: ResumeTransportOptions);
  onmessage?: (message: JSONRPCMessage) => void;
  onerror?: (error: Error) => void;
  onclose?: () => void;
  protocolVersion?: string;
  get sessionId(): string | undefined;
  start(): Promise<void>;
  send(message: JSONRPCMessage, options?: unknown): Promise<void>;
  /**
   * DELETEs the session; a failed DELETE goes to `onerror` and the transport closes anyway.
   * Rejects with what `onclose` threw, if it threw (as the SDK's own transports do); an async
   * `onclose` is not waited for, and what it rejects with goes to `onerror`, as what an async
   * `onmessage` rejects with does.
   */
  close(): Promise<void>;
  setProtocolVersion(version: string): void;
  events(options?: IterateOptions): AsyncGenerator<SessionEvent, void, undefined>;
}

/**
 * A `fetch` whose MCP sessions run on mcp-resume, for clients that take a fetch function but
 * no transport (Mastra's `MCPClient`: `servers: {s: {url, fetch: resumeFetch()}}`). The host
 * client's Streamable HTTP transport keeps its HTTP code; every request it makes is answered
 * in memory by a `ResumeTransport`'s bridge, which makes the real ones. One per server.
 */
export type ResumeFetch = ((input: string | URL | Request, init?: RequestInit) => Promise<Response>) & {
  /** Closes the session it serves, if any (DELETE); the host's own close does it too. */
  close(): Promise<void>;
};
/**
 * Options: those of `ResumeTransport`. The application's headers of the session's first
 * request (`requestInit.headers`) are sent on all its requests; a later request that
 * changes them fails with InvalidConfigError.
 */
export declare function resumeFetch(options?: ResumeTransportOptions): ResumeFetch;

/**
 * Options of `ResumeSafety`: the Rust guard's settings (`GuardBuilder` of mcp-resume-server),
 * each default its own. Durations in milliseconds.
 */
export interface ResumeSafetyOptions {
  /** `"memory"` (default: one process) or a `redis://` URL (replicas sharing it). */
  store?: string;
  /** The name this process writes as owner of sessions and claims. Default: random. */
  instanceId?: string;
  /**
   * Bodies and SSE events longer than this (bytes) pass untouched, except a keyed call's
   * request body (its key in the `Idempotency-Key` header or named in the bytes read): it is
   * refused 413, as it cannot be guarded. Default: 4 MiB.
   */
  maxBody?: number;
  /** A keyed call's claim lease. Default: 10000. */
  lease?: number;
  /** Capability hashes, sequenced event ids and resume authorization. Default: true. */
  resumeChecks?: boolean;
  /** Claim and deduplicate keyed `tools/call` requests. Default: true. */
  idempotency?: boolean;
  /** `Retry-After` of retryable refusals (whole seconds on the wire). Default: 1000. */
  retryAfter?: number;
  /**
   * A request header naming the client, set by what authenticated it in front of the guard:
   * idempotency keys are then that client's own, and a keyed call without it is refused.
   * Default: none, one namespace of keys per store (right when clients draw keys at random).
   */
  keyScopeHeader?: string;
  /** Seeds the stream ids (reproducible tests). Default: random. */
  seed?: number;
}

/** A request and response as node:http (and Express, connect) give them. */
type IncomingMessage = import("node:http").IncomingMessage;
type ServerResponse = import("node:http").ServerResponse;

/**
 * The resume-safety guard in front of an MCP Streamable HTTP endpoint (the TypeScript SDK's
 * `StreamableHTTPServerTransport`): keyed `tools/call`s deduplicated across replicas,
 * resumes proven before they are served, capability hashes. One per process. A JSON request
 * body is handed on parsed as `req.body`: pass it to `transport.handleRequest(req, res,
 * req.body)`; one that is not JSON, or is longer than `maxBody`, is left for the handler to
 * read. Throws InvalidConfigError on a bad option, an Error when the Redis store cannot
 * be reached.
 */
export declare class ResumeSafety {
  constructor(options?: ResumeSafetyOptions);
  /** The name this process writes as owner of sessions and claims. */
  get instanceId(): string;
  /** An Express/connect middleware in front of the MCP route's handler. */
  middleware(): (req: IncomingMessage, res: ServerResponse, next: (error?: unknown) => void) => void;
  /** A node:http handler (or an Express route's) behind the guard. */
  wrap<A extends unknown[]>(
    handler: (req: IncomingMessage, res: ServerResponse, ...rest: A) => unknown,
  ): (req: IncomingMessage, res: ServerResponse, ...rest: A) => void;
  /** Guards one request; `next()` runs the handler (not called when the guard answers). */
  handle(req: IncomingMessage, res: ServerResponse, next: () => unknown): Promise<unknown>;
}

/** Every error of this package: `kind` names what happened (the Rust SDK's `ErrorKind`). */
export declare class McpResumeError extends Error {
  constructor(
    message: string,
    details?: { kind?: string; retryAfterMs?: number; mayHaveRun?: boolean; inputRefused?: boolean },
  );
  readonly kind: string;
  /** The wait the server asked for (`Retry-After`) when it did not fit in the deadline. */
  readonly retryAfterMs?: number;
  /**
   * Whether the request this error ended may have run on the server, so that retrying it
   * could run it twice: always for `outcome_unknown` and `context_mismatch`; for a timed-out,
   * lost or closed call when it had been sent and nothing proved it did not run; for a call
   * that became a task, for any error but the task's own final status.
   */
  readonly mayHaveRun: boolean;
  /**
   * Whether the call ended because the application's handler could not provide an input the
   * server asked for during it (a 2026-07-28 call's `input_required` round, or its task's,
   * whose handler threw; a user's `decline` is an answer, not this). Such an error is
   * `outcome_unknown` and `mayHaveRun`, but must not be re-sent as an interrupted call
   * would be: a re-send starts the call over and asks for the same input again.
   */
  readonly inputRefused: boolean;
}
export declare class TransportError extends McpResumeError {}
export declare class McpTimeoutError extends McpResumeError {}
export declare class SessionLostError extends McpResumeError {}
export declare class OutcomeUnknownError extends McpResumeError {}
export declare class ContextMismatchError extends McpResumeError {}
export declare class ProtocolError extends McpResumeError {}
export declare class TooLargeError extends McpResumeError {}
export declare class ClosedError extends McpResumeError {}
export declare class InvalidConfigError extends McpResumeError {}
/** The ledger of calls in flight could not be read. */
export declare class LedgerError extends McpResumeError {}
export declare class UnauthorizedError extends McpResumeError {
  readonly authChallenge: {
    status: number;
    scheme: string | null;
    error: string | null;
    errorDescription: string | null;
    scope: string | null;
    resourceMetadata: string | null;
    realm: string | null;
  } | null;
}
/** A JSON-RPC error: the server's, or thrown by a handler to answer with it. */
export declare class RpcError extends McpResumeError {
  constructor(code: number, message: string, data?: Json);
  readonly code: number;
  readonly data?: Json;
}
export declare class MissingCapabilityError extends McpResumeError {
  readonly code: number;
  readonly data?: Json;
}

/** The `_meta` member whose string value makes a `tools/call` keyed. */
export declare const IDEMPOTENCY_META_KEY: string;
/** ResumeTransport's JSON-RPC error code per failure kind (`error.data.kind`). */
export declare const BRIDGE_ERROR_CODES: Readonly<Record<
  "closed" | "timeout" | "outcome_unknown" | "context_mismatch" | "session_lost" | "transport"
  | "protocol" | "too_large" | "unauthorized" | "invalid_config" | "ledger",
  number
>>;

/**
 * The Vercel AI SDK's tools (`await mcp.tools()` over a `ResumeTransport`) or Mastra's
 * (`await mcp.listTools()` over `resumeFetch`) with each `execute` keyed by its tool call id
 * (`toolCallId`; Mastra: `context.agent.toolCallId`): the `tools/call` it makes carries the
 * idempotency key `toolCallKey(toolCallId, name)`, so a retry of the same invocation is
 * deduplicated by a server that honours keys. Opt-in; a new object of new tools, each
 * otherwise unchanged.
 */
export declare function withToolCallKeys<T extends Record<string, unknown>>(tools: T): T;
/** The idempotency key of one tool invocation (the Python binding derives the same one). */
export declare function toolCallKey(toolCallId: string, tool: string): string;
