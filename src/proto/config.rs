//! Configuration of the protocol core. Every default is documented here, in one place.

use std::time::Duration;

use serde_json::Value;

use crate::policy::ReconnectPolicy;
use crate::proto::version::ProtocolVersion;

/// The `_meta` key that carries an idempotency key when the server does not advertise its own.
pub const DEFAULT_IDEMPOTENCY_META_KEY: &str = "io.github.mcp-resume/idempotency-key";

/// Which era of the protocol to speak: the legacy one (sessions, `initialize`; 2025-03-26 to
/// 2025-11-25) or the modern one (2026-07-28: no session, per-request metadata).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[non_exhaustive]
pub enum Era {
    /// Probe with `server/discover`: a recognised modern answer or modern error means modern;
    /// whatever else a server answers means legacy (`initialize`); a 5xx falls back to
    /// `initialize` once, and a probe without an answer (or whose fallback got none either) is
    /// sent again within the connect deadline. **Default.**
    #[default]
    Auto,
    /// Always `initialize` (a legacy server).
    Legacy,
    /// Always the modern revision (a modern server).
    Modern,
}

/// When a keyed tool call may be re-sent after an interruption whose outcome is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ResendPolicy {
    /// Only when the server advertised idempotency support (resume-safety extension).
    /// A key sent to a server that ignores it protects nothing. **Default.**
    #[default]
    ServerAdvertised,
    /// The application knows the server deduplicates keyed calls: re-send every keyed call.
    AssumeServerDeduplicates,
}

/// Configuration of a [`crate::proto::Session`]: the defaults, then `with_*` setters.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SessionConfig {
    /// `clientInfo.name`. Default: `"mcp-resume"`.
    pub client_name: String,
    /// `clientInfo.version`. Default: this crate's version.
    pub client_version: String,
    /// Client capabilities sent at `initialize`. Default: `{}`.
    pub client_capabilities: Value,
    /// Protocol version offered at `initialize` (legacy era). Default:
    /// [`ProtocolVersion::LATEST`].
    pub protocol_version: ProtocolVersion,
    /// Which era to speak. Default: [`Era::Auto`].
    pub era: Era,
    /// The era this origin was last found to speak (a cache shared by clients), tried first
    /// under [`Era::Auto`]; a server that answers otherwise is probed again. Default: none.
    pub era_hint: Option<Era>,
    /// Default per-call deadline, spanning every resume and re-send. Default: 60 s.
    pub call_timeout: Duration,
    /// Reconnect delays and caps. Default: see [`ReconnectPolicy::default`].
    pub reconnect: ReconnectPolicy,
    /// Largest SSE event (sum of its field lines) accepted. Default: 16 MiB.
    pub max_event_size: usize,
    /// Largest JSON response body accepted. Default: 16 MiB.
    pub max_body_size: usize,
    /// Whether to open the standalone GET stream after `initialize`. Default: `true`.
    pub open_listen_stream: bool,
    /// Re-send rule for keyed calls. Default: [`ResendPolicy::ServerAdvertised`].
    pub resend_policy: ResendPolicy,
    /// Whether a 503 with `Retry-After` in seconds proves the request was not processed, so
    /// that the call (keyed or not) is sent again after that delay when it fits in the
    /// deadline (a `Retry-After` given as an HTTP date is not read: such a 503 proves nothing).
    /// Default: `true`: a server or gateway that names a time to come back is taken to have
    /// refused the request before acting on it (RFC 9110 §15.6.4), which is what load
    /// balancers and overloaded servers do. Set it to `false` for a server that may answer 503
    /// after it started processing: a 503 then leaves the call's outcome unknown, like any
    /// other 5xx (a safe keyed call is re-sent, the rest fail `OutcomeUnknown`).
    pub unavailable_not_processed: bool,
    /// Seed of the jitter generator (the driver seeds it from entropy; tests fix it).
    pub jitter_seed: u64,
    /// **Unsafe, for comparison only.** Behave like the stock SDKs: trust replayed streams
    /// and clean ends, ignore capability hashes, sequenced ids and rejection bodies.
    /// Default: `false`.
    ///
    /// With it set, the session ignores every resume-safety signal (capability-hash headers,
    /// sequenced event ids, rejection bodies and headers, capability hashes of replayed tool
    /// results) and orphaned responses; a resumed stream that ends cleanly without the
    /// awaited response is simply resumed again until `reconnect.max_attempts` runs out
    /// (then the call fails with `Transport`); a 404 still re-initializes, as the
    /// specification requires. This reproduces the silent wrong answers of the incident
    /// this crate exists to prevent: never enable it outside demonstrations and tests.
    pub dangerous_trust_replay: bool,
    /// Whether to report each change of a call's durable state as an
    /// [`Output::Checkpoint`](crate::proto::Output::Checkpoint), for a driver that keeps a
    /// durable record of its calls in flight (see [`crate::proto::checkpoint`]). Calls of
    /// read-only methods ([`is_read_only`](crate::proto::checkpoint::is_read_only)) and the
    /// session's own get none. Default: `false` (the client turns it on with its ledger).
    pub checkpoints: bool,
}

crate::setters::with_setters!(SessionConfig {
    with_client_name => client_name: String,
    with_client_version => client_version: String,
    with_client_capabilities => client_capabilities: Value,
    with_protocol_version => protocol_version: ProtocolVersion,
    with_era => era: Era,
    with_era_hint => era_hint: Option<Era>,
    with_call_timeout => call_timeout: Duration,
    with_reconnect => reconnect: ReconnectPolicy,
    with_max_event_size => max_event_size: usize,
    with_max_body_size => max_body_size: usize,
    with_open_listen_stream => open_listen_stream: bool,
    with_resend_policy => resend_policy: ResendPolicy,
    with_unavailable_not_processed => unavailable_not_processed: bool,
    with_jitter_seed => jitter_seed: u64,
    with_dangerous_trust_replay => dangerous_trust_replay: bool,
    with_checkpoints => checkpoints: bool,
});

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            client_name: "mcp-resume".to_owned(),
            client_version: env!("CARGO_PKG_VERSION").to_owned(),
            client_capabilities: Value::Object(Default::default()),
            protocol_version: ProtocolVersion::LATEST,
            era: Era::Auto,
            era_hint: None,
            call_timeout: Duration::from_secs(60),
            reconnect: ReconnectPolicy::default(),
            max_event_size: 16 * 1024 * 1024,
            max_body_size: 16 * 1024 * 1024,
            open_listen_stream: true,
            resend_policy: ResendPolicy::default(),
            unavailable_not_processed: true,
            jitter_seed: 0x5eed,
            dangerous_trust_replay: false,
            checkpoints: false,
        }
    }
}
