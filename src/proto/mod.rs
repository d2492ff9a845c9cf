//! The sans-IO protocol core.
//!
//! [`Session`] is a deterministic state machine: no tokio, no reqwest, no clock reads. The
//! driver (or a language binding, or the test simulator) feeds it inputs with `handle_*`
//! and app commands, and drains its outputs with `poll_*`; time is passed in as `now`.
//!
//! Contract with the driver:
//! - After any input, drain [`Session::poll_transmit`] and [`Session::poll_output`] until they
//!   return `None`, then arm a timer for [`Session::poll_timeout`] and call
//!   [`Session::handle_timeout`] when it fires.
//! - For every [`Transmit::Send`], perform the HTTP request, then report exactly one of:
//!   [`Session::handle_head`] followed by any number of [`Session::handle_data`] and one
//!   [`Session::handle_end`]; or a [`Session::handle_error`] (before or after the head). Its
//!   [`TransportFailure`] says what is known of the request: `Connect` only when it provably
//!   never left, `Abandoned` when the connection's task went with it taken (written or not),
//!   else `Lost`. Calling a request that may have left `Connect` makes the session re-send it.
//! - A [`Output::ServerRequest`] is answered with [`Session::respond`] unless an
//!   [`Output::ServerRequestWithdrawn`] for it comes first (its session was replaced, lost or
//!   closed, or the call whose MRTR round or task asked for it ended):
//!   then its handler is stopped and nothing is answered. One the server cancels
//!   (`notifications/cancelled`) is forgotten with [`Session::withdraw_request`], which says
//!   whether it released a request of the current session (only then does the driver stop
//!   a handler: one naming an MRTR input's id stops nothing): until then its id stays held (a
//!   later request under it is ignored) and counts against the bound on requests waiting for
//!   an answer. A cancellation read on a stream of a session since replaced is not handed
//!   out at all: its server names its own requests, and the current server may ask under the
//!   same ids.
//! - [`Transmit::Abort`] drops that HTTP exchange; the session expects no more input for it
//!   (input that still arrives is ignored).
//! - Optionally, a driver decodes a success body before it hands it over, so that the session
//!   (behind a lock, say) only applies what the body says: [`read_ahead`] tells which bodies;
//!   a JSON one goes in whole by [`Session::handle_json_body`] (instead of its data and end),
//!   an SSE one by [`Session::handle_events`] with the events an [`SseAhead`] made of each
//!   chunk (and [`Session::handle_too_large`] when it refuses one), then its tail events and
//!   [`Session::handle_end`]. The session reads the same body the same way either way.
//! - Optionally ([`SessionConfig::checkpoints`]), a driver keeps a durable record of the calls
//!   in flight from [`Output::Checkpoint`]s, and a new process picks them up with
//!   [`Session::pick_up`] ([`checkpoint`]). It drains [`Session::poll_output`] before
//!   [`Session::poll_transmit`] then, and holds a call's POST until the checkpoints of stage
//!   [`CallStage::Sent`] before it are durable.
// Clocks, threads, runtimes and entropy (clippy.toml) have no place in a sans-IO core.
#![deny(clippy::disallowed_methods)]

// Module layout (owned by the protocol core):
//   session/     – the Session state machine: a facade over parts that own their data
//   classify.rs  – reads heads and refused answers (the one place that interprets them)
//   checkpoint.rs – a call's durable state, for a driver's record of calls in flight
//   decide.rs    – the pure recovery decision (`guide::recovery`), table-tested
//   probe.rs     – the pure era-detection rule (what a `server/discover` answer means), table-tested
//   version.rs   – protocol revisions as a type; methods.rs – method names
//   jsonrpc.rs   – JSON-RPC message encoding/decoding
//   ext.rs       – the resume-safety extension (advertisement, headers, rejection body)
//   walkthrough  – documentation: a cross-instance resume through the pipeline

use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use serde_json::Value;

use crate::error::Error;
use crate::ids::{EventId, IdempotencyKey};

/// Identifies one HTTP exchange the session asked for ([`HttpRequest::id`]); only a session
/// makes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HttpId(pub(crate) u64);

impl HttpId {
    /// The number behind the id (for logs and language bindings).
    pub fn get(self) -> u64 {
        self.0
    }

    /// An id no session made, for tests that feed a session input about an exchange it never
    /// asked for. Unstable.
    #[cfg(feature = "unstable")]
    pub fn from_raw(n: u64) -> Self {
        HttpId(n)
    }
}

/// Identifies one application call (a request the app is waiting on) in events,
/// notifications and outputs, from the moment it is made. Unique in the process: made only by
/// [`CallId::next`] (the client, for each [`ToolCall`](crate::ToolCall) and request; a driver of
/// the sans-IO [`Session`], for each [`Session::submit`]; the session, for what it starts
/// itself), so one id names one call everywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallId(pub(crate) u64);

impl CallId {
    /// A fresh id, never handed out before in this process. (A counter, not a clock or
    /// entropy: the core stays deterministic for a given order of calls.)
    pub fn next() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        CallId(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }

    /// The number behind the id (for logs and language bindings).
    pub fn get(self) -> u64 {
        self.0
    }
}

/// HTTP method of a [`HttpRequest`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HttpMethod {
    /// A JSON-RPC message (request, notification or response).
    Post,
    /// The standalone stream, or a resume with `Last-Event-ID`.
    Get,
    /// Session termination.
    Delete,
}

/// Why the session opened an HTTP exchange: lets the driver pick per-purpose timeouts and log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HttpPurpose {
    /// POST of a request that expects a response.
    Request,
    /// POST of a notification or of a response to a server request (202 expected).
    Notify,
    /// GET of the standalone server-to-client stream.
    Listen,
    /// GET with `Last-Event-ID` resuming a stream.
    Resume,
    /// DELETE of the session.
    Terminate,
}

/// One HTTP request to perform against the configured endpoint URL.
///
/// `headers` holds the protocol headers (`Accept`, `Content-Type`, `Mcp-Session-Id`,
/// `MCP-Protocol-Version`, `Last-Event-ID`, `Idempotency-Key`); the driver adds the app's
/// own headers (authorization, custom) to every request. The session id is a sensitive
/// header value: no `Debug` shows it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HttpRequest {
    /// Id to report the outcome under.
    pub id: HttpId,
    /// Method.
    pub method: HttpMethod,
    /// Why it is sent.
    pub purpose: HttpPurpose,
    /// Protocol headers.
    pub headers: HeaderMap,
    /// JSON body for POST.
    pub body: Option<Bytes>,
}

/// Something the driver must do on the network.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Transmit {
    /// Perform this request.
    Send(HttpRequest),
    /// Stop reading (and drop) this exchange: its stream is finished or abandoned.
    Abort(HttpId),
}

/// How an HTTP exchange failed at the transport level.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransportFailure {
    /// The request was provably never sent (connection refused, DNS failure).
    Connect(String),
    /// The connection broke after (possibly) sending: before the response head, or while
    /// reading the body.
    Lost(String),
    /// The connection's task was dropped (the runtime it ran on shut down) after it had taken
    /// the request: the request may have been written, or not. A call is judged as after
    /// [`Lost`](Self::Lost) (it may have run); an answer or a notification is sent again, as
    /// after [`Connect`](Self::Connect): a second copy of either is harmless, and a lost
    /// answer leaves the server waiting.
    Abandoned(String),
}

/// A request the app wants to make.
///
/// An idempotency key can only be attached where it travels on the wire and the server can
/// deduplicate by it ([`CallRequest::tool_call`]): a key the server never sees would make a
/// re-send look safe when it is not.
#[derive(Debug, Clone)]
pub struct CallRequest {
    pub(crate) method: String,
    pub(crate) params: Option<Value>,
    pub(crate) idempotency_key: Option<IdempotencyKey>,
    pub(crate) timeout: Option<Duration>,
}

impl CallRequest {
    /// A request of `method` with `params`, without an idempotency key: it is never re-sent
    /// after an interruption whose outcome is unknown.
    pub fn new(method: impl Into<String>, params: impl Into<Option<Value>>) -> Self {
        CallRequest {
            method: method.into(),
            params: params.into(),
            idempotency_key: None,
            timeout: None,
        }
    }

    /// A `tools/call` with `params` (`name`, `arguments`, `_meta`) and an optional idempotency
    /// key, sent in `params._meta` and in the `Idempotency-Key` header.
    pub fn tool_call(params: Value, idempotency_key: Option<IdempotencyKey>) -> Self {
        CallRequest {
            method: "tools/call".to_owned(),
            params: Some(params),
            idempotency_key,
            timeout: None,
        }
    }

    /// Sets the call's timeout: one deadline spanning every resume and re-send. Default: the
    /// configured [`SessionConfig::call_timeout`].
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The JSON-RPC method.
    pub fn method(&self) -> &str {
        &self.method
    }

    /// The JSON-RPC params.
    pub fn params(&self) -> Option<&Value> {
        self.params.as_ref()
    }

    /// The idempotency key (only a `tools/call` has one).
    pub fn idempotency_key(&self) -> Option<&IdempotencyKey> {
        self.idempotency_key.as_ref()
    }

    /// The call's timeout, when set ([`CallRequest::with_timeout`]).
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }
}

/// A server-to-client JSON-RPC request the app must answer with [`crate::proto::Session::respond`]
/// (unless it is withdrawn first: [`Output::ServerRequestWithdrawn`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ServerRequest {
    /// The request's id (opaque to the app): the server's, or, for an input of a 2026-07-28
    /// call, one the session made (its call, round and number).
    pub id: crate::ids::RequestId,
    /// Method.
    pub method: String,
    /// Params.
    pub params: Option<Value>,
}

/// A JSON-RPC notification from the server.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Notification {
    /// Method, e.g. `notifications/progress`.
    pub method: String,
    /// Params.
    pub params: Option<Value>,
}

/// Why the client re-initialized.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReinitReason {
    /// A request carrying the session id was answered 404.
    SessionNotFound,
    /// A resume was explicitly rejected (resume-safety extension); the server's reason.
    ResumeRejected(RejectReason),
    /// A resumed stream ended cleanly without what it owed, with no progress.
    UnverifiableCleanEnd,
    /// Event ids on a resumed stream were not contiguous.
    EventGap,
    /// A resumed stream delivered a response to a request that is not pending.
    OrphanedResponse,
    /// A response carried a capability hash other than the session's.
    CapabilityMismatch,
    /// A modern server refused the protocol version in use (`UnsupportedProtocolVersion`).
    VersionRefused,
}

/// The reason in a `SESSION_RESUME_REJECTED` body (resume-safety extension).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RejectReason {
    /// The resuming instance does not know the session.
    UnknownSession,
    /// Another instance owns the session/stream.
    NotOwner,
    /// The event log has a gap after `Last-Event-ID`.
    EventGap,
    /// A replayed response refers to a request record that cannot be resolved.
    OrphanedRequest,
    /// The capability hash in force differs from the negotiated one.
    CapabilityMismatch,
    /// A reason this client version does not know (kept verbatim, truncated).
    Other(String),
}

/// Why the client stopped trying to open the stream of server-initiated messages
/// ([`SessionEvent::ListenStopped`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ListenStopReason {
    /// It failed this many times in a row (connections refused or lost, 5xx answers, streams
    /// cut before they carried anything) and the attempts of the reconnect policy
    /// ([`crate::ReconnectPolicy::max_attempts`]) ran out.
    GaveUp {
        /// Consecutive failed attempts.
        attempts: u32,
    },
    /// The server answered it in a way that trying again would not change (a stream under
    /// another capability hash, say).
    Refused,
    /// The server refused its credentials (a 401, the driver's retry with a fresh token
    /// included): opened again once a request of the session is answered, which shows they
    /// work again, at most [`crate::ReconnectPolicy::max_attempts`] times in a row.
    Unauthorized,
}

/// What the session tells the application about itself. Delivered on `Client::events()`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum SessionEvent {
    /// `initialize` succeeded (first time).
    Connected {
        /// Negotiated protocol version.
        protocol_version: ProtocolVersion,
    },
    /// The stream of server-initiated messages is open (the standalone GET stream, or in
    /// the modern era an acknowledged `subscriptions/listen`): what the server sends outside
    /// any call reaches the client from now on.
    Listening,
    /// The stream of server-initiated messages is closed and the client has stopped trying to
    /// open it: what the server sends outside any call does not reach the client. Reported
    /// once per stop; [`SessionEvent::Listening`] follows if the stream is opened again
    /// (after [`ListenStopReason::Unauthorized`], once a request of the session is answered,
    /// or another `ListenStopped` if it then fails for good;
    /// otherwise only on a new session, after [`SessionEvent::Reinitialized`], whose stream
    /// is reported afresh). A server that does not offer the stream (405 to the GET, an
    /// answer that is not an event stream, a new session's GET refused as "session gone"
    /// again, a modern server that sends no list changes) is not reported: there was nothing
    /// to stop (but found so after [`ListenStopReason::Unauthorized`], it is reported
    /// [`ListenStopReason::Refused`]: the app was told the stream would be reopened).
    ListenStopped {
        /// Why.
        reason: ListenStopReason,
    },
    /// A dropped stream was resumed with `Last-Event-ID`.
    Resumed {
        /// The cursor presented.
        last_event_id: EventId,
    },
    /// A resume was rejected by the server (404, rejection body, or capability-hash change).
    ResumeRejected {
        /// The server's reason, when it gave one.
        reason: Option<RejectReason>,
    },
    /// A new session replaced the old one.
    Reinitialized {
        /// Why.
        reason: ReinitReason,
        /// Whether protocol version, server capabilities or capability hash differ from the
        /// previous session's.
        capabilities_changed: bool,
    },
    /// An interrupted call was re-sent (new JSON-RPC id, same idempotency key if any).
    Redispatched {
        /// The call.
        call: CallId,
        /// Its method.
        method: String,
        /// Its idempotency key, if any.
        idempotency_key: Option<IdempotencyKey>,
    },
    /// An interrupted call ended with [`crate::ErrorKind::OutcomeUnknown`].
    OutcomeUnknown {
        /// The call.
        call: CallId,
        /// Its method.
        method: String,
    },
    /// A response was produced under another capability hash; the call failed with
    /// [`crate::ErrorKind::ContextMismatch`].
    ContextMismatch {
        /// The call.
        call: CallId,
    },
    /// The server advertised resume-safety checks this session cannot use (e.g. capability
    /// hashes without a valid hash at `initialize`): the session runs with fewer checks.
    ChecksDegraded {
        /// The checks in force now.
        status: ExtensionStatus,
        /// What is missing, and which checks are off because of it.
        reason: String,
    },
    /// The era of the server was determined (by probing, or by a cached assumption that
    /// held). A driver may cache per origin what [`Session::era_to_remember`] names then (not
    /// an era read from an answer that says nothing about it, such as a 429 to the probe).
    EraDetected {
        /// [`Era::Legacy`] or [`Era::Modern`].
        era: Era,
    },
    /// A call became a durable task (tasks extension): store `task_id` to pick the task up
    /// again after a restart ([`Session::resume_task`]); it is polled until it ends.
    TaskCreated {
        /// The call.
        call: CallId,
        /// The server's task id.
        task_id: String,
    },
    /// A task ended (completed, failed, or cancelled): its id need not be kept any longer.
    TaskFinished {
        /// The call.
        call: CallId,
        /// The server's task id.
        task_id: String,
    },
    /// Re-initialization kept failing with no call waiting and stopped; the next call
    /// reconnects.
    SessionLost,
    /// The session was closed by the app.
    Closed,
}

/// What the server advertised of the resume-safety extension, and which checks are in force.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExtensionStatus {
    /// The server advertised the extension (`capabilities.experimental.resumeSafety`).
    pub advertised: bool,
    /// Capability hashes are compared on every response (advertised, and a valid hash was
    /// recorded at `initialize`).
    pub capability_hash: bool,
    /// Event ids on resumed streams are checked for gaps.
    pub sequenced_event_ids: bool,
    /// The server deduplicates keyed tool calls, so a keyed call is safe to re-send.
    pub idempotency: bool,
}

/// An output of the session for the app side of the driver.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Output {
    /// A call finished, exactly once.
    Completed {
        /// The call.
        call: CallId,
        /// Its result (the JSON-RPC `result` member) or error.
        result: Result<Value, Error>,
    },
    /// A notification from the server; `call` is set when it arrived on that call's stream
    /// (e.g. progress). A `notifications/cancelled` read on a stream of a session since
    /// replaced is not one: it names a request of that session's server, withdrawn already
    /// ([`Output::ServerRequestWithdrawn`]), not the current server's under the same id.
    Notification {
        /// The call whose stream carried it, if any.
        call: Option<CallId>,
        /// The notification.
        notification: Notification,
    },
    /// A request from the server the app must answer. One whose method is longer than 256
    /// bytes is never handed out: a server's own request is answered at once as a method not
    /// found, naming nothing the server sent but the id; an MRTR round or a task asking for
    /// such an input fails its call `Protocol` (it may have run) before any input of the
    /// round is handed out.
    ServerRequest(ServerRequest),
    /// A server request handed out earlier will not be answered: its session was replaced,
    /// lost or closed, or the call whose MRTR round or task asked for it ended, so an answer would
    /// reach nobody (and [`Session::respond`] drops it). A driver stops the request's handler.
    ServerRequestWithdrawn(crate::ids::RequestId),
    /// Lifecycle news.
    Event(SessionEvent),
    /// A call's durable state changed (only with [`SessionConfig::checkpoints`]): what a
    /// driver writes down so that another process can pick the call up
    /// ([`Session::pick_up`]). One whose stage is [`CallStage::Sent`] comes before the POST
    /// it describes (drain [`Session::poll_output`] before [`Session::poll_transmit`]), and
    /// must be durable before that POST leaves; see [`checkpoint`].
    Checkpoint {
        /// The call.
        call: CallId,
        /// Its state.
        checkpoint: Box<Checkpoint>,
    },
}

pub mod checkpoint;
pub(crate) mod classify;
pub mod config;
pub mod decide;
mod ext;
pub(crate) mod jsonrpc;
mod names;
mod session;

pub mod version;
pub mod walkthrough;

/// Declares modules that are public only with the `unstable` feature: outside the
/// compatibility promise, kept reachable for this crate's own tests and tools.
macro_rules! unstable_modules {
    ($($(#[$meta:meta])* $name:ident;)*) => {$(
        $(#[$meta])*
        #[cfg(feature = "unstable")]
        pub mod $name;
        #[cfg(not(feature = "unstable"))]
        #[allow(unreachable_pub, dead_code)]
        pub(crate) mod $name;
    )*};
}

unstable_modules! {
    /// The core's bounds on what a server can make it hold or do (unstable).
    limits;
    /// JSON-RPC method names the core itself sends or reads (unstable).
    methods;
    /// The 2026-07-28 era's wire helpers (unstable).
    modern;
    /// The era probe's rule, row-tested (unstable).
    probe;
}

pub use checkpoint::{CallStage, Checkpoint};
pub use config::{Era, ResendPolicy, SessionConfig};
pub(crate) use session::MAX_REQUEST_METHOD_LEN;
pub use session::{read_ahead, BodyFormat, DecodedEvent, DecodedJson, Session, SseAhead};
pub use version::ProtocolVersion;
