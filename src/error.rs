//! The one public error type.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::auth::AuthChallenge;

/// What kind of failure an [`Error`] is. Stable: match on it, not on messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The network failed and the SDK could not recover within its limits.
    Transport,
    /// The call's deadline passed (it spans every resume and re-send).
    Timeout,
    /// The session could not be re-established before the call's deadline (the cause is the
    /// last failure), or the call kept finding its session gone (`max_attempts` times). Not
    /// terminal: the next call reconnects.
    SessionLost,
    /// The call was interrupted and it cannot be known whether the server executed it, or
    /// all of it. Either the request was cut off and not re-sent because re-sending it was
    /// not provably safe, or the call stopped half-way because the application could not
    /// provide an input the server asked for during it ([`Error::input_refused`]): the
    /// server had taken part of it, and a re-send would only ask for that input again.
    OutcomeUnknown,
    /// The server answered under a negotiated context (capability hash) other than this
    /// session's: the answer may be wrong, so it is not returned as success.
    ContextMismatch,
    /// The server answered with a JSON-RPC error; see [`Error::rpc_error`].
    Rpc,
    /// The server broke the protocol: malformed SSE or JSON, unexpected status, hostile
    /// headers, orphaned responses.
    Protocol,
    /// The server sent an event or body larger than the configured maximum.
    TooLarge,
    /// The client was closed (or its driver stopped) before the call completed.
    Closed,
    /// The server refused the credentials (HTTP 401, or 403 asking for more scope), fresh
    /// ones included when a token provider is configured; see [`Error::auth_challenge`].
    Unauthorized,
    /// The builder's configuration is invalid.
    InvalidConfig,
    /// A modern server requires a client capability this client did not declare
    /// (`MissingRequiredClientCapability`); [`Error::rpc_error`] carries the capabilities
    /// it named in `data.requiredCapabilities`.
    MissingCapability,
    /// The ledger of calls in flight ([`crate::client::ledger`]) could not be read or
    /// written, or held an entry it could not read back.
    Ledger,
}

impl ErrorKind {
    /// A short, stable name, e.g. `"outcome_unknown"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Transport => "transport",
            ErrorKind::Timeout => "timeout",
            ErrorKind::SessionLost => "session_lost",
            ErrorKind::OutcomeUnknown => "outcome_unknown",
            ErrorKind::ContextMismatch => "context_mismatch",
            ErrorKind::Rpc => "rpc",
            ErrorKind::Protocol => "protocol",
            ErrorKind::TooLarge => "too_large",
            ErrorKind::Closed => "closed",
            ErrorKind::Unauthorized => "unauthorized",
            ErrorKind::InvalidConfig => "invalid_config",
            ErrorKind::MissingCapability => "missing_capability",
            ErrorKind::Ledger => "ledger",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A JSON-RPC error object: returned by the server, or by a handler of the application's
/// answering a server request.
///
/// ```
/// use mcp_resume::RpcError;
///
/// let unknown = RpcError::method_not_found("acme/frobnicate");
/// assert_eq!(unknown.code, RpcError::METHOD_NOT_FOUND);
/// let bad = RpcError::invalid_params("`uri` is missing")
///     .with_data(serde_json::json!({"field": "uri"}));
/// assert_eq!(bad.code, -32602);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RpcError {
    /// The JSON-RPC error code.
    pub code: i64,
    /// The error message.
    pub message: String,
    /// Optional structured data.
    pub data: Option<serde_json::Value>,
}

impl RpcError {
    /// JSON-RPC's code for a request whose method the receiver does not know.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// JSON-RPC's code for params the method cannot take.
    pub const INVALID_PARAMS: i64 = -32602;
    /// JSON-RPC's code for a failure inside the receiver.
    pub const INTERNAL_ERROR: i64 = -32603;

    /// An error of `code` with `message` and no data.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// `-32601`: no such method (the message names it).
    pub fn method_not_found(method: &str) -> Self {
        RpcError::new(
            Self::METHOD_NOT_FOUND,
            format!("Method not found: {method}"),
        )
    }

    /// `-32602`: the params do not fit the method.
    pub fn invalid_params(message: impl Into<String>) -> Self {
        RpcError::new(Self::INVALID_PARAMS, message)
    }

    /// `-32603`: the receiver failed.
    pub fn internal_error(message: impl Into<String>) -> Self {
        RpcError::new(Self::INTERNAL_ERROR, message)
    }

    /// The same error with structured `data`.
    pub fn with_data(mut self, data: serde_json::Value) -> Self {
        self.data = Some(data);
        self
    }
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "JSON-RPC error {}: {}", self.code, self.message)
    }
}

/// The error type of every fallible operation in this crate.
///
/// Cheap to clone (the payload is shared), so the same error can be delivered to a caller and
/// reported on the event stream.
#[derive(Clone)]
pub struct Error {
    inner: Arc<Inner>,
}

struct Inner {
    kind: ErrorKind,
    message: String,
    rpc: Option<RpcError>,
    retry_after: Option<Duration>,
    auth: Option<Box<AuthChallenge>>,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
    /// The request it ended was sent and nothing proved it did not run.
    may_have_run: bool,
    /// The call stopped because the application could not provide an input it was asked
    /// for: sending it again would ask for that input again.
    input_refused: bool,
}

impl Error {
    /// Creates an error of `kind` with a human-readable message.
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            inner: Arc::new(Inner {
                kind,
                message: message.into(),
                rpc: None,
                retry_after: None,
                auth: None,
                source: None,
                may_have_run: false,
                input_refused: false,
            }),
        }
    }

    /// Creates an error wrapping a lower-level cause.
    pub(crate) fn with_source(
        kind: ErrorKind,
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Error {
            inner: Arc::new(Inner {
                kind,
                message: message.into(),
                rpc: None,
                retry_after: None,
                auth: None,
                source: Some(Box::new(source)),
                may_have_run: false,
                input_refused: false,
            }),
        }
    }

    /// An [`ErrorKind::Rpc`] error carrying the server's error object.
    pub(crate) fn rpc(error: RpcError) -> Self {
        Error {
            inner: Arc::new(Inner {
                kind: ErrorKind::Rpc,
                message: error.to_string(),
                rpc: Some(error),
                retry_after: None,
                auth: None,
                source: None,
                may_have_run: false,
                input_refused: false,
            }),
        }
    }

    /// The error a token provider (`ClientBuilder::auth`) returns when it cannot produce a
    /// token, `cause` saying why. The request is then not sent: the client treats it as a
    /// failure to connect (tried again with backoff within the call's deadline), and the
    /// provider's message reaches the call's error if the deadline passes first.
    pub fn token_unavailable(cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        Error::with_source(ErrorKind::Unauthorized, "no token for the request", cause)
    }

    /// The error a [`Ledger`](crate::client::ledger::Ledger) of the application's returns
    /// when its storage fails, `cause` saying why ([`ErrorKind::Ledger`]). A call whose record
    /// cannot be written is not sent: the client treats it as a failure to connect (tried
    /// again with backoff within the call's deadline, the record written again first).
    pub fn ledger(cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        Error::with_source(ErrorKind::Ledger, "the ledger failed", cause)
    }

    /// The stable kind of this error.
    pub fn kind(&self) -> ErrorKind {
        self.inner.kind
    }

    /// The server's JSON-RPC error, for [`ErrorKind::Rpc`].
    pub fn rpc_error(&self) -> Option<&RpcError> {
        self.inner.rpc.as_ref()
    }

    /// The human-readable message (without the kind).
    pub fn message(&self) -> &str {
        &self.inner.message
    }

    /// Whether the request this error ended may have run on the server, so that sending it
    /// again could run it twice. Always for [`ErrorKind::OutcomeUnknown`] and
    /// [`ErrorKind::ContextMismatch`]; for a call that failed otherwise (its deadline passed,
    /// its session was lost, the client closed) when it had been sent and nothing proved that
    /// it did not run, or when the client cannot tell (the driver stopped under it). `false`
    /// when the client knows it never ran, for the server's own answer ([`ErrorKind::Rpc`];
    /// for a call that became a task, only the task's final `failed` or `cancelled` status
    /// is its answer: any other error, a poll answered with a JSON-RPC error included, says
    /// it may have run; so does an MRTR call's answer after a round the server answered with
    /// `input_required`, as the tool may have acted before it asked, and any error of a call
    /// re-sent after a send that may have run, here or in the process it was picked up from:
    /// a refusal of the re-send proves only that the re-send did not run), and for errors
    /// that end no request. A result that cannot be read as
    /// its type ([`ErrorKind::Protocol`]) says it may have run: the server answered it.
    pub fn may_have_run(&self) -> bool {
        self.inner.may_have_run
            || matches!(
                self.inner.kind,
                ErrorKind::OutcomeUnknown | ErrorKind::ContextMismatch
            )
    }

    /// Whether the call ended because the application could not provide an input the server
    /// asked for during it: a 2026-07-28 call's `input_required` round, or its task's, whose
    /// handler answered with an error (the user could not be asked, the model could not be
    /// run, no handler takes the method; a user's `decline` is an answer, not this). Such a
    /// call ends [`ErrorKind::OutcomeUnknown`] and [`may_have_run`](Error::may_have_run):
    /// the server took a round of it, and what ran before it asked is not known. It must not be sent again as an interrupted call
    /// would be: a re-send starts the call over, so the server asks for the same input again
    /// (the user asked once more, a model run once more) and is refused again. The bridge's
    /// re-send on a tool's annotations ([`BridgeBuilder::trust_tool_annotations`]) leaves
    /// such a call alone, and so should any re-sender of the application's. The handler's
    /// error is the [`source`](std::error::Error::source) (a [`ErrorKind::Rpc`] error
    /// carrying its JSON-RPC error).
    ///
    /// [`BridgeBuilder::trust_tool_annotations`]: crate::bridge::BridgeBuilder::trust_tool_annotations
    pub fn input_refused(&self) -> bool {
        self.inner.input_refused
    }

    /// The same error, saying the call stopped for want of an input the application could
    /// not provide (see [`Error::input_refused`]).
    pub(crate) fn with_input_refused(self) -> Self {
        let inner = self.into_inner();
        Error {
            inner: Arc::new(Inner {
                input_refused: true,
                ..inner
            }),
        }
    }

    /// How long the server asked the client to wait before trying again (`Retry-After` on a
    /// 429 or 503), when that wait did not fit in the call's deadline and the call failed
    /// instead. Within the deadline the client waits and re-sends by itself.
    pub fn retry_after(&self) -> Option<Duration> {
        self.inner.retry_after
    }

    /// A [`ErrorKind::MissingCapability`] error carrying the server's JSON-RPC error.
    pub(crate) fn missing_capability(error: RpcError) -> Self {
        Error {
            inner: Arc::new(Inner {
                kind: ErrorKind::MissingCapability,
                message: error.to_string(),
                rpc: Some(error),
                retry_after: None,
                auth: None,
                source: None,
                may_have_run: false,
                input_refused: false,
            }),
        }
    }

    /// What the server said when it refused the credentials, for
    /// [`ErrorKind::Unauthorized`]: the scopes it asks for and where its OAuth
    /// protected-resource metadata is (`resource_metadata`), from `WWW-Authenticate`.
    pub fn auth_challenge(&self) -> Option<&AuthChallenge> {
        self.inner.auth.as_deref()
    }

    /// An [`ErrorKind::Unauthorized`] error: `cause` (how the refusal ended the call) with
    /// the server's challenge.
    pub(crate) fn unauthorized(challenge: AuthChallenge, cause: Error) -> Self {
        let message = format!(
            "the server refused the credentials ({challenge}): {}",
            cause.message()
        );
        Error {
            inner: Arc::new(Inner {
                kind: ErrorKind::Unauthorized,
                message,
                rpc: cause.rpc_error().cloned(),
                retry_after: cause.retry_after(),
                auth: Some(Box::new(challenge)),
                source: Some(Box::new(cause)),
                may_have_run: false,
                input_refused: false,
            }),
        }
    }

    /// This error's parts, to build a changed copy. A shared error is copied without its
    /// source: a boxed `dyn Error` cannot be cloned.
    fn into_inner(self) -> Inner {
        Arc::try_unwrap(self.inner).unwrap_or_else(|shared| Inner {
            kind: shared.kind,
            message: shared.message.clone(),
            rpc: shared.rpc.clone(),
            retry_after: shared.retry_after,
            auth: shared.auth.clone(),
            source: None,
            may_have_run: shared.may_have_run,
            input_refused: shared.input_refused,
        })
    }

    /// The same error, saying the request it ended may have run (see
    /// [`Error::may_have_run`]).
    pub(crate) fn with_may_have_run(self) -> Self {
        let inner = self.into_inner();
        Error {
            inner: Arc::new(Inner {
                may_have_run: true,
                ..inner
            }),
        }
    }

    /// The same error, naming the server's `Retry-After`.
    pub(crate) fn with_retry_after(self, after: Duration) -> Self {
        let inner = self.into_inner();
        Error {
            inner: Arc::new(Inner {
                retry_after: Some(after),
                ..inner
            }),
        }
    }

    /// The same error, its message naming the request it ended (`server/discover: …`).
    pub(crate) fn during(self, request: &str) -> Self {
        let inner = self.into_inner();
        Error {
            inner: Arc::new(Inner {
                message: format!("{request}: {}", inner.message),
                ..inner
            }),
        }
    }

    /// An error of `kind` whose cause is `cause` (its message is appended, it is the source,
    /// and its `Retry-After` is kept).
    pub(crate) fn caused_by(kind: ErrorKind, message: impl Into<String>, cause: Error) -> Self {
        let message = format!("{}: {}", message.into(), cause.message());
        let retry_after = cause.retry_after();
        Error {
            inner: Arc::new(Inner {
                kind,
                message,
                rpc: None,
                retry_after,
                auth: None,
                source: Some(Box::new(cause)),
                may_have_run: false,
                input_refused: false,
            }),
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.inner.kind)
            .field("message", &self.inner.message);
        if let Some(rpc) = &self.inner.rpc {
            d.field("rpc", rpc);
        }
        if let Some(after) = &self.inner.retry_after {
            d.field("retry_after", after);
        }
        if let Some(auth) = &self.inner.auth {
            d.field("auth", auth);
        }
        if self.inner.may_have_run {
            d.field("may_have_run", &true);
        }
        if self.inner.input_refused {
            d.field("input_refused", &true);
        }
        if let Some(source) = &self.inner.source {
            d.field("source", source);
        }
        d.finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.inner.kind, self.inner.message)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner
            .source
            .as_ref()
            .map(|s| s.as_ref() as &(dyn std::error::Error + 'static))
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// The mark survives the copies a re-sender makes of the error (`mayHaveRun` added, the
    /// request named), and an interrupted call's error does not carry it.
    #[test]
    fn an_input_refusal_is_told_apart_from_an_interruption() {
        let refused = Error::caused_by(
            ErrorKind::OutcomeUnknown,
            "input \"confirm\" could not be provided",
            Error::rpc(RpcError::internal_error("the user is away")),
        )
        .with_input_refused();
        let copy = refused.clone().with_may_have_run().during("tools/call");
        for e in [&refused, &copy] {
            assert!(e.input_refused(), "{e:?}");
            assert!(e.may_have_run());
            assert_eq!(e.kind(), ErrorKind::OutcomeUnknown);
        }
        assert!(std::error::Error::source(&refused).is_some());
        let cut = Error::new(ErrorKind::OutcomeUnknown, "tools/call was interrupted");
        assert!(!cut.input_refused());
        assert!(!cut.with_may_have_run().input_refused());
    }
}
