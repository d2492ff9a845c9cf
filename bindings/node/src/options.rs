//! The options objects JavaScript passes, read into the SDK's builder settings.
//!
//! Durations are milliseconds (as everywhere in Node); every option left out keeps the SDK's
//! default. A value the SDK cannot take (a negative duration, an unknown era) fails as
//! `invalid_config`, like the SDK's own configuration errors; a value of the wrong type is
//! napi's `TypeError`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use mcp_resume::client::telemetry::Otlp;
use mcp_resume::client::Telemetry;
use mcp_resume::{ClientBuilder, Era, ProtocolVersion, ReconnectPolicy, ResendPolicy};
use napi_derive::napi;

use crate::convert::parse_optional;
use crate::errors::{invalid, Failure};

/// `clientInfo` sent at `initialize`.
#[napi(object)]
pub struct ClientInfo {
    /// `clientInfo.name`.
    pub name: String,
    /// `clientInfo.version`.
    pub version: String,
}

/// Reconnect delays and caps (the SDK's `ReconnectPolicy`); delays in milliseconds.
#[napi(object)]
pub struct ReconnectOptions {
    /// First delay when the server named none.
    pub initial_delay: Option<f64>,
    /// Growth factor per attempt.
    pub multiplier: Option<f64>,
    /// Largest delay before jitter.
    pub max_delay: Option<f64>,
    /// Jitter, as a fraction of the delay (0 to 1).
    pub jitter: Option<f64>,
    /// Attempts to reach the server for one call or stream.
    pub max_attempts: Option<f64>,
    /// Resumes of one stream delivering nothing new before it counts as an unverifiable end.
    pub max_resumes_without_progress: Option<f64>,
    /// Failed re-initializations in a row after which an idle client stops trying.
    pub max_reinit_failures: Option<f64>,
}

/// The client's options (the SDK's `ClientBuilder`).
#[napi(object)]
pub struct ClientOptions {
    /// Capabilities sent at `initialize`, as JSON text.
    pub capabilities: Option<String>,
    /// `clientInfo` sent at `initialize`.
    pub client_info: Option<ClientInfo>,
    /// Protocol version offered at `initialize`.
    pub protocol_version: Option<String>,
    /// `auto` (default), `legacy` or `modern`.
    pub era: Option<String>,
    /// Sent as `Authorization: Bearer <token>` on every request.
    pub bearer_token: Option<String>,
    /// Extra headers on every request (resumes and DELETE included).
    pub headers: Option<HashMap<String, String>>,
    /// One deadline per call, across every resume and re-send (ms).
    pub call_timeout: Option<f64>,
    /// TCP connect timeout (ms).
    pub connect_timeout: Option<f64>,
    /// Backoff and caps.
    pub reconnect: Option<ReconnectOptions>,
    /// `server_advertised` (default) or `assume_server_deduplicates`.
    pub resend_policy: Option<String>,
    /// Largest SSE event accepted, in bytes.
    pub max_event_size: Option<f64>,
    /// Largest JSON body accepted, in bytes.
    pub max_body_size: Option<f64>,
    /// Open the standalone GET stream after `initialize`.
    pub open_listen_stream: Option<bool>,
    /// Fixes the reconnect jitter (reproducible tests).
    pub jitter_seed: Option<i64>,
    /// Where calls in flight are recorded for `recover()`: `"memory"` (default: the
    /// client's own), `"none"`, or a Redis URL (`redis://host:6379`, with `ledgerIdentity`).
    pub ledger: Option<String>,
    /// The worker's stable name: the Redis ledger's namespace, the same in the process that
    /// replaces this one.
    pub ledger_identity: Option<String>,
    /// Whether ledger entries name the session each call went out on (default `false`).
    pub record_session_ids: Option<bool>,
    /// Base URL of an OTLP/HTTP collector: the client's spans and metrics go there.
    pub otlp_endpoint: Option<String>,
}

/// What only the message bridge takes, besides the client's options.
#[napi(object)]
pub struct BridgeOptions {
    /// Let tool annotations make unkeyed calls safe to re-send (off by default).
    pub trust_tool_annotations: Option<bool>,
    /// The bound of each direction, in messages.
    pub capacity: Option<f64>,
}

/// `b` with every setting of `options` (absent: every default), each checked and converted as
/// it is read, and the OTLP exporters when `otlpEndpoint` was given. Without an endpoint, no
/// telemetry at all (not the Rust global providers, which nothing in a Node process sets).
pub(crate) fn configure(
    b: ClientBuilder,
    options: Option<ClientOptions>,
) -> Result<(ClientBuilder, Option<Arc<Otlp>>), Failure> {
    let Some(mut o) = options else {
        return Ok((b.telemetry(Telemetry::disabled()), None));
    };
    let otlp = o
        .otlp_endpoint
        .take()
        .map(|endpoint| Otlp::new(&endpoint).map(Arc::new))
        .transpose()?;
    let telemetry = match &otlp {
        Some(otlp) => otlp.telemetry(),
        None => Telemetry::disabled(),
    };
    Ok((settings(b, o)?.telemetry(telemetry), otlp))
}

/// `b` with every setting of `o` but telemetry.
fn settings(mut b: ClientBuilder, o: ClientOptions) -> Result<ClientBuilder, Failure> {
    if let Some(caps) = parse_optional(o.capabilities.as_deref(), "capabilities")? {
        b = b.client_capabilities(caps);
    }
    if let Some(info) = o.client_info {
        b = b.client_info(info.name, info.version);
    }
    if let Some(version) = o.protocol_version {
        b = b.protocol_version(version.parse::<ProtocolVersion>()?);
    }
    if let Some(era) = o.era {
        b = b.era(era.parse::<Era>()?);
    }
    if let Some(token) = o.bearer_token {
        b = b.bearer_token(token);
    }
    for (name, value) in o.headers.unwrap_or_default() {
        b = b.header(name, value);
    }
    if let Some(t) = o.call_timeout {
        b = b.call_timeout(millis(t, "callTimeout")?);
    }
    if let Some(t) = o.connect_timeout {
        b = b.connect_timeout(millis(t, "connectTimeout")?);
    }
    if let Some(policy) = o.reconnect {
        b = b.reconnect(reconnect(policy)?);
    }
    if let Some(policy) = o.resend_policy {
        b = b.resend_policy(policy.parse::<ResendPolicy>()?);
    }
    if let Some(n) = o.max_event_size {
        b = b.max_event_size(size(n, "maxEventSize")?);
    }
    if let Some(n) = o.max_body_size {
        b = b.max_body_size(size(n, "maxBodySize")?);
    }
    if let Some(open) = o.open_listen_stream {
        b = b.open_listen_stream(open);
    }
    if let Some(seed) = o.jitter_seed {
        let seed = u64::try_from(seed).map_err(|_| invalid("jitterSeed must not be negative"))?;
        b = b.jitter_seed(seed);
    }
    if let Some(record) = o.record_session_ids {
        b = b.record_session_ids(record);
    }
    ledger(b, o.ledger, o.ledger_identity)
}

/// `ledger` and `ledgerIdentity` onto `b` (named as the SDK's `ClientBuilder::ledger_named`
/// reads them; no ledger named is the client's own).
fn ledger(
    b: ClientBuilder,
    ledger: Option<String>,
    identity: Option<String>,
) -> Result<ClientBuilder, Failure> {
    let name = ledger.as_deref().unwrap_or("memory");
    Ok(b.ledger_named(name, identity.as_deref())?)
}

/// A duration in milliseconds: finite, not negative, and within what a `Duration` holds.
pub(crate) fn millis(ms: f64, name: &str) -> Result<Duration, Failure> {
    Duration::try_from_secs_f64(ms / 1000.0).map_err(|_| {
        invalid(format!(
            "{name} must be a finite, non-negative number of milliseconds (got {ms})"
        ))
    })
}

fn size(n: f64, name: &str) -> Result<usize, Failure> {
    if n.is_finite() && n >= 0.0 && n.fract() == 0.0 && n <= usize::MAX as f64 {
        Ok(n as usize)
    } else {
        Err(invalid(format!(
            "{name} must be a non-negative integer number of bytes (got {n})"
        )))
    }
}

/// A count: a whole number from 0 to 2^32 - 1. Read as napi reads a `u32`, -1 would be
/// 4,294,967,295 and 1.5 would be 1, another setting than the one given.
pub(crate) fn count(n: f64, name: &str) -> Result<u32, Failure> {
    if n.is_finite() && n >= 0.0 && n.fract() == 0.0 && n <= f64::from(u32::MAX) {
        Ok(n as u32)
    } else {
        Err(invalid(format!(
            "{name} must be a non-negative integer no larger than 4294967295 (got {n})"
        )))
    }
}

fn reconnect(o: ReconnectOptions) -> Result<ReconnectPolicy, Failure> {
    let mut policy = ReconnectPolicy::default();
    if let Some(ms) = o.initial_delay {
        policy.initial_delay = millis(ms, "reconnect.initialDelay")?;
    }
    if let Some(ms) = o.max_delay {
        policy.max_delay = millis(ms, "reconnect.maxDelay")?;
    }
    if let Some(m) = o.multiplier {
        policy.multiplier = m;
    }
    if let Some(j) = o.jitter {
        policy.jitter = j;
    }
    if let Some(n) = o.max_attempts {
        policy.max_attempts = count(n, "reconnect.maxAttempts")?;
    }
    if let Some(n) = o.max_resumes_without_progress {
        policy.max_resumes_without_progress = count(n, "reconnect.maxResumesWithoutProgress")?;
    }
    if let Some(n) = o.max_reinit_failures {
        policy.max_reinit_failures = count(n, "reconnect.maxReinitFailures")?;
    }
    policy.validate()?;
    Ok(policy)
}
