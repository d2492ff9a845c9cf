//! The names this client exports: span, attribute, event and metric names.
//!
//! Those of the OpenTelemetry semantic conventions are spelled as
//! [`SEMCONV_VERSION`] spells them (the MCP conventions there are in development status).
//! Those the conventions do not have yet — resumption, re-initialization, re-sending, unknown
//! outcomes — are this crate's proposal, each under one prefix: [`RECOVERY_PREFIX`] for
//! attributes and span events, [`RECOVERY_METRIC_PREFIX`] for metrics.

/// The semantic conventions release the semconv names below are read from.
pub const SEMCONV_VERSION: &str = "1.41.0";
/// The schema URL of [`SEMCONV_VERSION`], recorded on the instrumentation scope.
pub const SCHEMA_URL: &str = "https://opentelemetry.io/schemas/1.41.0";
/// The instrumentation scope's name.
pub const SCOPE: &str = "mcp-resume";

// --- Semantic conventions: MCP client spans and metrics -------------------------------------

/// `mcp.method.name`: the JSON-RPC method (`tools/call`, `initialize`, …).
pub const MCP_METHOD_NAME: &str = "mcp.method.name";
/// `mcp.session.id`: the session, hashed unless the application opted into the raw id.
pub const MCP_SESSION_ID: &str = "mcp.session.id";
/// `mcp.protocol.version`: the negotiated protocol revision.
pub const MCP_PROTOCOL_VERSION: &str = "mcp.protocol.version";
/// `mcp.resource.uri`: the `uri` of `resources/read`, `resources/subscribe`,
/// `resources/unsubscribe` (on spans only).
pub const MCP_RESOURCE_URI: &str = "mcp.resource.uri";
/// `jsonrpc.request.id`: the id of the request's latest JSON-RPC message (a re-sent request
/// gets a new one).
pub const JSONRPC_REQUEST_ID: &str = "jsonrpc.request.id";
/// `rpc.response.status_code`: the JSON-RPC error code, when the server answered one.
pub const RPC_RESPONSE_STATUS_CODE: &str = "rpc.response.status_code";
/// `error.type`: why the operation failed (see the crate's README for the values).
pub const ERROR_TYPE: &str = "error.type";
/// `gen_ai.tool.name`: the tool of a `tools/call`.
pub const GEN_AI_TOOL_NAME: &str = "gen_ai.tool.name";
/// `gen_ai.prompt.name`: the prompt of a `prompts/get`.
pub const GEN_AI_PROMPT_NAME: &str = "gen_ai.prompt.name";
/// `gen_ai.operation.name`: `execute_tool` on a `tools/call`.
pub const GEN_AI_OPERATION_NAME: &str = "gen_ai.operation.name";
/// `network.protocol.name`: `http`.
pub const NETWORK_PROTOCOL_NAME: &str = "network.protocol.name";
/// `network.protocol.version`: the HTTP version of an answer (`1.1`, `2`).
pub const NETWORK_PROTOCOL_VERSION: &str = "network.protocol.version";
/// `network.transport`: `tcp`.
pub const NETWORK_TRANSPORT: &str = "network.transport";
/// `server.address`: the endpoint's host.
pub const SERVER_ADDRESS: &str = "server.address";
/// `server.port`: the endpoint's port.
pub const SERVER_PORT: &str = "server.port";

/// `mcp.client.operation.duration` (histogram, `s`): one MCP request, from its registration
/// to its result, every resume and re-send included.
pub const MCP_CLIENT_OPERATION_DURATION: &str = "mcp.client.operation.duration";
/// `mcp.client.session.duration` (histogram, `s`): one session, from `initialize` to its end
/// (closed, lost, or replaced by a re-initialization).
pub const MCP_CLIENT_SESSION_DURATION: &str = "mcp.client.session.duration";
/// The bucket boundaries the conventions give both duration histograms.
pub const DURATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

// --- Semantic conventions: HTTP client spans (one per HTTP request of an MCP request) --------

/// `http.request.method`.
pub const HTTP_REQUEST_METHOD: &str = "http.request.method";
/// `http.response.status_code`.
pub const HTTP_RESPONSE_STATUS_CODE: &str = "http.response.status_code";
/// `http.request.resend_count`: the ordinal of this HTTP request among those of its MCP
/// request (absent on the first).
pub const HTTP_REQUEST_RESEND_COUNT: &str = "http.request.resend_count";
/// `url.full`: scheme, host, port and path only (a query string may carry credentials).
pub const URL_FULL: &str = "url.full";

// --- Proposed: recovery ------------------------------------------------------------------------

/// The prefix of every attribute and span event this crate proposes.
pub const RECOVERY_PREFIX: &str = "mcp.recovery.";
/// The prefix of every metric this crate proposes.
pub const RECOVERY_METRIC_PREFIX: &str = "mcp.client.recovery.";

/// On an HTTP span after a request's first: what this HTTP request is — `resume` (a GET with
/// `Last-Event-ID`), `resend` (the request POSTed again), `next_round` (a multi round-trip
/// request's next round), `task_poll` (polling the task the request became).
pub const RECOVERY_ATTEMPT: &str = "mcp.recovery.attempt";
/// On a `resume` or `resend` HTTP span: what ended the previous HTTP request of the same MCP
/// request — `not_sent` (no connection), `connection_lost`, `stream_ended` (a clean end
/// without the answer), `too_large`, `session_not_found` (404), `resume_rejected`, `refused`
/// (another status), `answered` (an answer the client acts on by sending again, such as an
/// idempotency key still in use).
pub const RECOVERY_REASON: &str = "mcp.recovery.reason";
/// Which stream a resume continued: `request` (a request's own stream) or `listen` (the
/// standalone GET stream).
pub const RECOVERY_STREAM: &str = "mcp.recovery.stream";
/// Why a session was re-initialized: `session_not_found`, `resume_rejected`,
/// `unverifiable_clean_end`, `event_gap`, `orphaned_response`, `capability_mismatch`,
/// `version_refused`.
pub const RECOVERY_REINIT_REASON: &str = "mcp.recovery.reinit_reason";
/// Why a resume was rejected: the §5 reason (`unknown_session`, `not_owner`, `event_gap`,
/// `orphaned_request`, `capability_mismatch`, `other`), or `not_found` for a bare 404.
pub const RECOVERY_REJECT_REASON: &str = "mcp.recovery.reject_reason";
/// Whether a re-initialization found other capabilities (protocol version, server
/// capabilities or capability hash) than the session it replaced.
pub const RECOVERY_CAPABILITIES_CHANGED: &str = "mcp.recovery.capabilities_changed";
/// Whether a re-sent request carried an idempotency key.
pub const RECOVERY_KEYED: &str = "mcp.recovery.keyed";
/// The `Last-Event-ID` a resume presented, exported as `mcp.session.id` is (a digest by
/// default, see [`SessionIdExport`](super::SessionIdExport)): some servers make every event
/// id the session id.
pub const RECOVERY_LAST_EVENT_ID: &str = "mcp.recovery.last_event_id";

/// Span event: a stream of this request was resumed with `Last-Event-ID`.
pub const EVENT_RESUMED: &str = "mcp.recovery.resumed";
/// Span event: a resume of this request's stream was rejected.
pub const EVENT_RESUME_REJECTED: &str = "mcp.recovery.resume_rejected";
/// Span event: the session was re-initialized while this request was in flight.
pub const EVENT_REINITIALIZED: &str = "mcp.recovery.reinitialized";
/// Span event: this request was re-sent (new JSON-RPC id, same idempotency key).
pub const EVENT_REDISPATCHED: &str = "mcp.recovery.redispatched";
/// Span event: this request was answered under another negotiated context.
pub const EVENT_CONTEXT_MISMATCH: &str = "mcp.recovery.context_mismatch";
/// Span event: this request was interrupted and could not be re-sent safely.
pub const EVENT_OUTCOME_UNKNOWN: &str = "mcp.recovery.outcome_unknown";

/// Counter `{resume}`: streams resumed with `Last-Event-ID` (by [`RECOVERY_STREAM`]).
pub const METRIC_RESUMES: &str = "mcp.client.recovery.resumes";
/// Counter `{rejection}`: resumes the server rejected (by [`RECOVERY_REJECT_REASON`]).
pub const METRIC_RESUME_REJECTIONS: &str = "mcp.client.recovery.resume_rejections";
/// Counter `{reinitialization}`: sessions re-initialized (by [`RECOVERY_REINIT_REASON`]).
pub const METRIC_REINITIALIZATIONS: &str = "mcp.client.recovery.reinitializations";
/// Counter `{request}`: requests re-sent (by [`MCP_METHOD_NAME`] and [`RECOVERY_KEYED`]).
pub const METRIC_RESENDS: &str = "mcp.client.recovery.resends";
/// Counter `{request}`: requests that ended `OutcomeUnknown` (by [`MCP_METHOD_NAME`]).
pub const METRIC_OUTCOME_UNKNOWN: &str = "mcp.client.recovery.outcome_unknown";
/// Counter `{response}`: answers produced under another negotiated context (by
/// [`MCP_METHOD_NAME`]).
pub const METRIC_CONTEXT_MISMATCHES: &str = "mcp.client.recovery.context_mismatches";
/// Histogram `s`: recovery latency, from a stream's cut to the first byte of the resumed
/// stream (by [`RECOVERY_STREAM`]).
pub const METRIC_RECOVERY_DURATION: &str = "mcp.client.recovery.duration";
/// The bucket boundaries of [`METRIC_RECOVERY_DURATION`]: a resume waits the server's
/// `retry` or the backoff, milliseconds to seconds.
pub const RECOVERY_BUCKETS: [f64; 12] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
