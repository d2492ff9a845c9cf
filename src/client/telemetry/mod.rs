//! OpenTelemetry traces and metrics (the `otel` feature), on the semantic conventions for MCP
//! ([`names::SEMCONV_VERSION`]), with what those conventions do not have yet: resumption,
//! re-initialization, re-sending and unknown outcomes.
//!
//! What a client exports, configured with [`ClientBuilder::telemetry`](super::ClientBuilder::telemetry)
//! (by default the global tracer and meter providers at `build()`):
//!
//! - **One span per MCP request** (kind `CLIENT`), named `{mcp.method.name}` or
//!   `{mcp.method.name} {tool or prompt}`, from the call to its result: every resume and
//!   re-send of the request falls inside it. Its parent is the caller's current context
//!   (`opentelemetry::Context::current()` when the call is made: an application traced with
//!   `tracing-opentelemetry` attaches its span's context, or awaits the call
//!   `.with_context(..)`), or the context a request's `params._meta` carries (`traceparent`,
//!   as a host SDK sends it through the [bridge](crate::bridge)). The handshake (`initialize`,
//!   `notifications/initialized`, `server/discover`) and the application's notifications get
//!   spans of their own.
//! - **One span per HTTP request** (kind `CLIENT`, named after its method), a child of its
//!   MCP request's span: the POST, each resume GET, each re-send, with
//!   `http.request.resend_count` and, after the first, [`names::RECOVERY_ATTEMPT`] and
//!   [`names::RECOVERY_REASON`]. It ends when the exchange does (an SSE stream's span lasts
//!   as long as the stream, so a cut shows where it happened). The standalone GET stream's
//!   spans are children of the `initialize` that opened the session.
//! - **Span events** on the MCP request's span: [`names::EVENT_RESUMED`],
//!   [`names::EVENT_RESUME_REJECTED`], [`names::EVENT_REINITIALIZED`] (with its reason),
//!   [`names::EVENT_REDISPATCHED`], [`names::EVENT_CONTEXT_MISMATCH`],
//!   [`names::EVENT_OUTCOME_UNKNOWN`].
//! - **`error.type`**: the JSON-RPC error code when the server answered one (and
//!   `rpc.response.status_code`), `tool_error` for a tool result with `isError`, otherwise the
//!   stable [`ErrorKind`](crate::ErrorKind) string (`outcome_unknown`, `timeout`, …), or
//!   `cancelled` for a call the application dropped.
//! - **Trace context**: `traceparent` (and `tracestate`) on every HTTP request, naming its HTTP
//!   span, and in every request's `params._meta`, naming its MCP span, so a server's spans
//!   join the caller's trace.
//! - **Metrics**: `mcp.client.operation.duration` and `mcp.client.session.duration`, and the
//!   `mcp.client.recovery.*` counters and histogram of [`names`].
//!
//! The SDK calls the application's span processors as spans start and end, on the client's
//! driver: a processor that exports as each span ends (the SDK's simple processor) holds up
//! the client's other calls for as long as its export takes, so give the client a batching
//! one (`SdkTracerProvider::builder().with_batch_exporter(..)`). A processor that panics fails
//! none of the client's calls: the client turns its telemetry off, with a warning, and goes
//! on. One such processor cannot be survived: one that panics in `on_start` and again in
//! `on_end` (a poisoned lock taken in both). The SDK ends the span it was starting while the
//! first panic unwinds, and Rust aborts the process on a second panic during unwinding,
//! before any `catch_unwind` sees it.
//!
//! The session id is a credential on many servers: `mcp.session.id` carries a digest of it
//! unless the application asks otherwise ([`SessionIdExport`]), and so does a resume's
//! [`names::RECOVERY_LAST_EVENT_ID`], since some servers make every event id the session id.

mod attempt;
mod calls;
mod instruments;
pub mod names;
#[cfg(feature = "otlp")]
mod otlp;
mod tracker;
mod w3c;

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use opentelemetry::global::{self, BoxedTracer};
use opentelemetry::metrics::{Meter, MeterProvider};
use opentelemetry::trace::{Tracer, TracerProvider};
use opentelemetry::{InstrumentationScope, KeyValue};
use reqwest::Url;
use sha2::{Digest, Sha256};

pub(crate) use attempt::{Attempt, Traced};
pub(crate) use calls::CallTrace;
#[cfg(feature = "otlp")]
pub use otlp::Otlp;
pub(crate) use tracker::Tracker;

use instruments::Instruments;

/// What of the session id is exported as `mcp.session.id`, and of a resume's event id as
/// [`names::RECOVERY_LAST_EVENT_ID`] (some servers make every event id the session id).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionIdExport {
    /// A digest (the first 16 bytes of the id's SHA-256, in hex): it tells sessions apart and
    /// joins a server's telemetry that hashes the same way, and cannot be presented as the
    /// id. The default.
    #[default]
    Hash,
    /// No `mcp.session.id` (nor `mcp.recovery.last_event_id`) at all.
    Omit,
    /// The id itself. Many servers accept it as a credential: whoever reads the telemetry can
    /// then act in the session.
    Expose,
}

/// Where a client's spans and metrics go, and what they may say.
///
/// ```
/// use mcp_resume::client::{SessionIdExport, Telemetry};
///
/// // The global providers (as installed with `opentelemetry::global::set_*_provider`) at
/// // `build()`, the session id hashed: the same as not configuring telemetry at all.
/// let telemetry = Telemetry::new().session_id(SessionIdExport::Hash);
/// let client = mcp_resume::Client::builder("http://127.0.0.1:8080/mcp")
///     .telemetry(telemetry)
///     .build()?;
/// # Ok::<(), mcp_resume::Error>(())
/// ```
#[must_use = "a Telemetry does nothing until passed to ClientBuilder::telemetry"]
#[derive(Clone)]
pub struct Telemetry {
    enabled: bool,
    tracer: Option<Arc<BoxedTracer>>,
    meter: Option<Meter>,
    session_id: SessionIdExport,
}

impl Default for Telemetry {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Telemetry")
            .field("enabled", &self.enabled)
            .field(
                "tracer",
                &if self.tracer.is_some() {
                    "given"
                } else {
                    "global"
                },
            )
            .field(
                "meter",
                &if self.meter.is_some() {
                    "given"
                } else {
                    "global"
                },
            )
            .field("session_id", &self.session_id)
            .finish()
    }
}

impl Telemetry {
    /// Spans and metrics through the global providers as they are when the client is built,
    /// the session id hashed.
    pub fn new() -> Self {
        Telemetry {
            enabled: true,
            tracer: None,
            meter: None,
            session_id: SessionIdExport::default(),
        }
    }

    /// Nothing exported and nothing propagated: the client behaves as without the feature.
    pub fn disabled() -> Self {
        Telemetry {
            enabled: false,
            ..Self::new()
        }
    }

    /// Spans go to `provider` instead of the global one. Default: the global provider.
    pub fn tracer_provider<P>(mut self, provider: &P) -> Self
    where
        P: TracerProvider,
        P::Tracer: Send + Sync + 'static,
        <P::Tracer as Tracer>::Span: Send + Sync + 'static,
    {
        self.tracer = Some(Arc::new(BoxedTracer::new(Box::new(
            provider.tracer_with_scope(scope()),
        ))));
        self
    }

    /// Metrics go to `provider` instead of the global one. Default: the global provider.
    pub fn meter_provider<P: MeterProvider>(mut self, provider: &P) -> Self {
        self.meter = Some(provider.meter_with_scope(scope()));
        self
    }

    /// What `mcp.session.id`, and a resume's `mcp.recovery.last_event_id`, carry. Default:
    /// [`SessionIdExport::Hash`].
    pub fn session_id(mut self, export: SessionIdExport) -> Self {
        self.session_id = export;
        self
    }

    /// What the client's driver uses; `None` when disabled.
    pub(crate) fn instrument(self, url: &Url) -> Option<Instrumentation> {
        if !self.enabled {
            return None;
        }
        let tracer = self
            .tracer
            .unwrap_or_else(|| Arc::new(global::tracer_provider().tracer_with_scope(scope())));
        let meter = self
            .meter
            .unwrap_or_else(|| global::meter_provider().meter_with_scope(scope()));
        let host = url.host_str().unwrap_or_default().to_owned();
        let port = url.port_or_known_default().map(i64::from);
        let mut server = vec![KeyValue::new(names::SERVER_ADDRESS, host)];
        if let Some(port) = port {
            server.push(KeyValue::new(names::SERVER_PORT, port));
        }
        Some(Instrumentation(Arc::new(Inner {
            tracer,
            instruments: Instruments::new(&meter),
            session_id: self.session_id,
            server,
            url: crate::client::http::redacted_url(url.as_str()),
            broken: AtomicBool::new(false),
        })))
    }
}

/// The context a W3C `traceparent` (and `tracestate`) names, as a remote parent: for a
/// language binding, the span current in its host when a call is made; attach it to the
/// call's future (`opentelemetry::trace::FutureExt::with_context`) and the call's span is its
/// child. `None` for a malformed or all-zero value.
///
/// ```
/// use opentelemetry::trace::TraceContextExt;
///
/// let parent = mcp_resume::client::telemetry::remote_parent(
///     "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
///     Some("rojo=00f067aa0ba902b7"),
/// )
/// .expect("a valid traceparent");
/// assert!(parent.span().span_context().is_remote());
/// assert!(mcp_resume::client::telemetry::remote_parent("00-zz", None).is_none());
/// ```
pub fn remote_parent(
    traceparent: &str,
    tracestate: Option<&str>,
) -> Option<opentelemetry::Context> {
    let (trace, span, flags) = w3c::parse_traceparent(traceparent)?;
    let state = tracestate
        .and_then(|s| s.parse::<opentelemetry::trace::TraceState>().ok())
        .unwrap_or_default();
    let remote = opentelemetry::trace::SpanContext::new(trace, span, flags, true, state);
    Some(
        opentelemetry::trace::TraceContextExt::with_remote_span_context(
            &opentelemetry::Context::new(),
            remote,
        ),
    )
}

fn scope() -> InstrumentationScope {
    InstrumentationScope::builder(names::SCOPE)
        .with_version(env!("CARGO_PKG_VERSION"))
        .with_schema_url(names::SCHEMA_URL)
        .build()
}

/// A client's tracer, instruments and settings, shared by its calls, its driver and its
/// exchanges.
#[derive(Clone)]
pub(crate) struct Instrumentation(Arc<Inner>);

struct Inner {
    tracer: Arc<BoxedTracer>,
    instruments: Instruments,
    session_id: SessionIdExport,
    /// `server.address` and `server.port`.
    server: Vec<KeyValue>,
    /// `url.full`, without what may carry credentials.
    url: String,
    /// Application code under it panicked: the client records nothing more.
    broken: AtomicBool,
}

impl Instrumentation {
    /// Runs `f`, telemetry that may call application code: the SDK calls the application's
    /// span processors (and through them its exporters) when a span starts or ends, on the
    /// thread that starts or ends it, which is the driver's, often under its lock. A panic
    /// there must fail nothing of the client's: it is caught, and the first one turns this
    /// client's telemetry off (a processor that panicked once may do so on every span, and a
    /// span it left half-exported is not worth more). `None` when `f` panicked or telemetry
    /// was off already (then `f` does not run).
    pub(crate) fn contain<R>(&self, f: impl FnOnce() -> R) -> Option<R> {
        if self.0.broken.load(Ordering::Relaxed) {
            return None;
        }
        self.caught(f)
    }

    /// Runs `f` even when telemetry is off (ending a span: dropped, it would end anyway,
    /// wherever that happens), its panic caught as [`contain`](Self::contain) catches it.
    pub(crate) fn caught<R>(&self, f: impl FnOnce() -> R) -> Option<R> {
        let result = isolate(f);
        if result.is_none() && !self.0.broken.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "an OpenTelemetry span processor or exporter panicked: \
                 this client's telemetry is off from now on"
            );
        }
        result
    }

    fn tracer(&self) -> &BoxedTracer {
        &self.0.tracer
    }

    fn instruments(&self) -> &Instruments {
        &self.0.instruments
    }

    /// `server.address`, `server.port`, `network.protocol.name`, `network.transport`.
    fn connection(&self) -> impl Iterator<Item = KeyValue> + '_ {
        self.0.server.iter().cloned().chain([
            KeyValue::new(names::NETWORK_PROTOCOL_NAME, "http"),
            KeyValue::new(names::NETWORK_TRANSPORT, "tcp"),
        ])
    }

    /// What `mcp.session.id` carries for `id`, if anything (and a resume's event id, which
    /// may be the session id).
    fn session_attribute(&self, id: &str) -> Option<String> {
        match self.0.session_id {
            SessionIdExport::Hash => Some(digest(id)),
            SessionIdExport::Expose => Some(id.to_owned()),
            SessionIdExport::Omit => None,
        }
    }
}

/// Runs `f` (application telemetry code, or dropping what holds a span, which ends it), with
/// its panic caught: `None` then. For what must run even once telemetry is off, since a span
/// not ended explicitly ends when dropped.
pub(crate) fn isolate<R>(f: impl FnOnce() -> R) -> Option<R> {
    catch_unwind(AssertUnwindSafe(f)).ok()
}

/// The first 16 bytes of `id`'s SHA-256, in hex.
fn digest(id: &str) -> String {
    let hash = Sha256::digest(id.as_bytes());
    hash.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_id_is_hashed_unless_asked_otherwise() {
        let url = Url::parse("http://127.0.0.1:9/mcp").unwrap();
        let hashed = Telemetry::new().instrument(&url).unwrap();
        let attribute = hashed.session_attribute("secret-session").unwrap();
        assert_eq!(attribute.len(), 32);
        assert!(!attribute.contains("secret"));
        assert_eq!(
            attribute,
            digest("secret-session"),
            "stable across sessions"
        );
        let omitted = Telemetry::new().session_id(SessionIdExport::Omit);
        assert!(omitted
            .instrument(&url)
            .unwrap()
            .session_attribute("s")
            .is_none());
        let exposed = Telemetry::new().session_id(SessionIdExport::Expose);
        assert_eq!(
            exposed
                .instrument(&url)
                .unwrap()
                .session_attribute("s")
                .as_deref(),
            Some("s")
        );
        assert!(Telemetry::disabled().instrument(&url).is_none());
    }
}
