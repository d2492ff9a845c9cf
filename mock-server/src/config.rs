//! Cluster configuration: presets, faults and the knobs of the instances.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use crate::store::Store;

/// How the cluster keeps state and routes requests (the presets).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Preset {
    /// The observed system: only the event log is shared; replay is permissive (no checks);
    /// an instance that does not know a session silently makes up a fresh default one.
    #[default]
    Naive,
    /// The seed's rule: session records and completed `prepare` records are shared, so any
    /// instance serves a POST; a stream and the request records behind it belong to the
    /// instance that served the POST; a resume passes the four checks or is rejected (§5).
    Strict,
    /// Sessions, request records and a gap-free event log all shared: a resume is safe and
    /// honored on any instance.
    Replicated,
    /// `strict` instances behind a balancer with session affinity.
    Sticky,
}

impl Preset {
    /// All presets, in documentation order.
    pub const ALL: [Preset; 4] = [
        Preset::Naive,
        Preset::Strict,
        Preset::Replicated,
        Preset::Sticky,
    ];

    /// The lowercase name used on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Preset::Naive => "naive",
            Preset::Strict => "strict",
            Preset::Replicated => "replicated",
            Preset::Sticky => "sticky",
        }
    }

    /// Whether the balancer pins sessions to instances under this preset.
    pub fn affinity(self) -> bool {
        matches!(self, Preset::Sticky)
    }

    pub(crate) fn placement(self) -> Placement {
        match self {
            Preset::Naive => Placement {
                sessions: Scope::Local,
                requests: Scope::Local,
                prepared: Scope::Local,
                resume: ResumePolicy::Permissive,
            },
            Preset::Strict | Preset::Sticky => Placement {
                sessions: Scope::Shared,
                requests: Scope::Local,
                prepared: Scope::Shared,
                resume: ResumePolicy::OwnerOnly,
            },
            Preset::Replicated => Placement {
                sessions: Scope::Shared,
                requests: Scope::Shared,
                prepared: Scope::Shared,
                resume: ResumePolicy::AnyInstance,
            },
        }
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Error of [`Preset::from_str`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownPreset(pub String);

impl fmt::Display for UnknownPreset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown preset {:?} (expected naive, strict, replicated or sticky)",
            self.0
        )
    }
}

impl std::error::Error for UnknownPreset {}

impl FromStr for Preset {
    type Err = UnknownPreset;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "naive" => Ok(Preset::Naive),
            "strict" => Ok(Preset::Strict),
            "replicated" => Ok(Preset::Replicated),
            "sticky" => Ok(Preset::Sticky),
            _ => Err(UnknownPreset(s.to_owned())),
        }
    }
}

/// Which protocol revisions the instances speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ClusterEra {
    /// 2025-03-26 … 2025-11-25: sessions, `initialize`, resumable SSE. What the presets are
    /// about.
    #[default]
    Legacy,
    /// 2026-07-28 only: stateless, no session, no `initialize`, no GET, no resumption. The
    /// preset still routes (`sticky` has no session to pin, so it round-robins too); there is
    /// no session or stream for it to place, and a `prepare` record is a handle any instance
    /// resolves (shared store).
    Modern,
    /// Both, as the specification lets a dual-era server: `initialize` or a session id means
    /// the legacy era for that session, a request without either is served as 2026-07-28.
    Dual,
}

impl ClusterEra {
    /// All eras, in documentation order.
    pub const ALL: [ClusterEra; 3] = [ClusterEra::Legacy, ClusterEra::Modern, ClusterEra::Dual];

    /// The lowercase name used on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            ClusterEra::Legacy => "legacy",
            ClusterEra::Modern => "modern",
            ClusterEra::Dual => "dual",
        }
    }

    /// Whether 2026-07-28 requests are served.
    pub fn serves_modern(self) -> bool {
        self != ClusterEra::Legacy
    }

    /// Whether sessions (`initialize`, GET, DELETE) are served.
    pub fn serves_legacy(self) -> bool {
        self != ClusterEra::Modern
    }
}

impl fmt::Display for ClusterEra {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ClusterEra {
    type Err = UnknownEra;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "legacy" => Ok(ClusterEra::Legacy),
            "modern" => Ok(ClusterEra::Modern),
            "dual" => Ok(ClusterEra::Dual),
            _ => Err(UnknownEra(s.to_owned())),
        }
    }
}

/// Error of [`ClusterEra::from_str`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownEra(pub String);

impl fmt::Display for UnknownEra {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown era {:?} (expected legacy, modern or dual)",
            self.0
        )
    }
}

impl std::error::Error for UnknownEra {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    Local,
    Shared,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResumePolicy {
    /// Replay whatever the shared log holds, no questions asked.
    Permissive,
    /// The seed's four checks; only the stream's owner can pass ownership.
    OwnerOnly,
    /// The four checks with replicated records: any instance holding them owns the session.
    AnyInstance,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Placement {
    pub sessions: Scope,
    pub requests: Scope,
    pub prepared: Scope,
    pub resume: ResumePolicy,
}

/// How the balancer ends a stream it cuts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CutStyle {
    /// Drop the connection mid-body, as a load balancer's timeout does (the client sees an
    /// I/O error).
    #[default]
    Abort,
    /// End the body cleanly, as if the server had finished the stream.
    CleanEnd,
}

/// Stream faults the balancer injects; changeable at run time with
/// [`Cluster::set_faults`](crate::Cluster::set_faults). A new value applies to streams
/// opened afterwards.
#[derive(Debug, Clone, PartialEq)]
pub struct Faults {
    /// Cut an SSE stream after this long without bytes (None: never).
    pub idle_timeout: Option<Duration>,
    /// Cut every SSE stream right after its N-th event.
    pub cut_after_events: Option<u32>,
    /// `(seed, probability)`: after each SSE event, cut with this probability.
    pub random_cut: Option<(u64, f64)>,
    /// How cuts end the stream.
    pub cut_style: CutStyle,
    /// `(seed, probability)`: each event is lost from the shared log with this probability
    /// (it is still delivered live), leaving a gap a resume can hit.
    pub log_loss: Option<(u64, f64)>,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            idle_timeout: Some(Duration::from_secs(30)),
            cut_after_events: None,
            random_cut: None,
            cut_style: CutStyle::Abort,
            log_loss: None,
        }
    }
}

/// Everything [`Cluster::start`](crate::Cluster::start) needs. Use `Default` and struct
/// update syntax, or [`ClusterConfig::new`] and the `with_*` methods.
#[derive(Clone)]
pub struct ClusterConfig {
    /// State placement, resume rule and routing.
    pub preset: Preset,
    /// Protocol revisions the instances speak (legacy by default).
    pub era: ClusterEra,
    /// Number of instances behind the balancer (at least 1).
    pub instances: usize,
    /// The resume-safety extension (§5): advertisement, `Mcp-Capability-Hash`, sequenced
    /// event ids, explicit rejection bodies, idempotency keys. Off: a stock-like server.
    pub extension: bool,
    /// Balancer idle timeout for SSE streams (the seed's 30 s by default; None: never).
    pub idle_timeout: Option<Duration>,
    /// Cut every SSE stream after this many events.
    pub cut_after_events: Option<u32>,
    /// `(seed, probability)` of a cut after each SSE event.
    pub random_cut: Option<(u64, f64)>,
    /// How cuts end a stream.
    pub cut_style: CutStyle,
    /// `(seed, probability)` of an event missing from the shared log.
    pub log_loss: Option<(u64, f64)>,
    /// `retry:` (ms) sent with the priming event (2025-11-25 sessions) and at the start of a
    /// resumed stream.
    pub retry_ms: Option<u64>,
    /// Answer every request with JSON; otherwise `tools/call` is answered with SSE (so its
    /// stream can be cut) and other requests with JSON.
    pub json_response: bool,
    /// Overrides the preset's routing: `Some(true)` pins sessions, `Some(false)` round-robins.
    pub affinity: Option<bool>,
    /// Address of the balancer (the public MCP endpoint). Port 0 picks a free port.
    pub listen: SocketAddr,
    /// Largest accepted POST body; larger ones get 413.
    pub max_body_bytes: usize,
    /// Extra allowed `Origin` values besides http(s)://localhost, 127.0.0.1 and `[::1]`.
    pub allowed_origins: Vec<String>,
    /// Shared store to use instead of a fresh [`MemoryStore`](crate::MemoryStore).
    pub store: Option<Arc<dyn Store>>,
    /// How many execution records and resume records the oracle keeps in detail (each list).
    /// Its totals keep counting beyond, and say how many records were dropped.
    pub oracle_record_limit: usize,
    /// The client capabilities the clients of this cluster are configured with, told the
    /// oracle from outside any request. Set, every execution whose context's client
    /// capabilities do not hold them (each member present with the same value; more members
    /// are fine) is flagged `wrong_capability`, in either era. Without it the oracle judges
    /// a 2026-07-28 execution only against the capabilities its own request carried, which
    /// it always runs under: a client sending the wrong ones goes unseen.
    pub expected_client_capabilities: Option<serde_json::Value>,
}

impl fmt::Debug for ClusterConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterConfig")
            .field("preset", &self.preset)
            .field("era", &self.era)
            .field("instances", &self.instances)
            .field("extension", &self.extension)
            .field("idle_timeout", &self.idle_timeout)
            .field("cut_after_events", &self.cut_after_events)
            .field("random_cut", &self.random_cut)
            .field("cut_style", &self.cut_style)
            .field("log_loss", &self.log_loss)
            .field("retry_ms", &self.retry_ms)
            .field("json_response", &self.json_response)
            .field("affinity", &self.affinity)
            .field("listen", &self.listen)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("allowed_origins", &self.allowed_origins)
            .field("store", &self.store.as_ref().map(|_| "custom"))
            .field("oracle_record_limit", &self.oracle_record_limit)
            .field(
                "expected_client_capabilities",
                &self.expected_client_capabilities,
            )
            .finish()
    }
}

impl Default for ClusterConfig {
    fn default() -> Self {
        let f = Faults::default();
        Self {
            preset: Preset::Naive,
            era: ClusterEra::Legacy,
            instances: 3,
            extension: true,
            idle_timeout: f.idle_timeout,
            cut_after_events: None,
            random_cut: None,
            cut_style: CutStyle::Abort,
            log_loss: None,
            retry_ms: None,
            json_response: false,
            affinity: None,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            max_body_bytes: 1024 * 1024,
            allowed_origins: Vec::new(),
            store: None,
            oracle_record_limit: crate::DEFAULT_ORACLE_RECORD_LIMIT,
            expected_client_capabilities: None,
        }
    }
}

impl ClusterConfig {
    /// Defaults with this preset.
    pub fn new(preset: Preset) -> Self {
        Self {
            preset,
            ..Self::default()
        }
    }

    /// Sets the protocol era.
    pub fn with_era(mut self, era: ClusterEra) -> Self {
        self.era = era;
        self
    }

    /// Sets the number of instances.
    pub fn with_instances(mut self, n: usize) -> Self {
        self.instances = n;
        self
    }

    /// Turns the extension on or off.
    pub fn with_extension(mut self, on: bool) -> Self {
        self.extension = on;
        self
    }

    /// Sets the stream faults from a [`Faults`] value.
    pub fn with_faults(mut self, faults: Faults) -> Self {
        self.idle_timeout = faults.idle_timeout;
        self.cut_after_events = faults.cut_after_events;
        self.random_cut = faults.random_cut;
        self.cut_style = faults.cut_style;
        self.log_loss = faults.log_loss;
        self
    }

    /// Sets `retry:` in milliseconds.
    pub fn with_retry_ms(mut self, ms: u64) -> Self {
        self.retry_ms = Some(ms);
        self
    }

    /// Tells the oracle the client capabilities the cluster's clients are configured with
    /// (see [`ClusterConfig::expected_client_capabilities`]).
    pub fn with_expected_client_capabilities(mut self, capabilities: serde_json::Value) -> Self {
        self.expected_client_capabilities = Some(capabilities);
        self
    }

    /// Answers everything with JSON.
    pub fn with_json_response(mut self, on: bool) -> Self {
        self.json_response = on;
        self
    }

    /// The fault part of the configuration.
    pub fn faults(&self) -> Faults {
        Faults {
            idle_timeout: self.idle_timeout,
            cut_after_events: self.cut_after_events,
            random_cut: self.random_cut,
            cut_style: self.cut_style,
            log_loss: self.log_loss,
        }
    }

    /// Whether the balancer pins sessions (the override, else the preset's choice).
    pub fn uses_affinity(&self) -> bool {
        self.affinity.unwrap_or_else(|| self.preset.affinity())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preset_round_trips() {
        for p in Preset::ALL {
            assert_eq!(p.as_str().parse::<Preset>().unwrap(), p);
        }
        assert_eq!(" Strict ".parse::<Preset>().unwrap(), Preset::Strict);
        assert!("sticky-ish".parse::<Preset>().is_err());
    }

    #[test]
    fn era_round_trips() {
        for e in ClusterEra::ALL {
            assert_eq!(e.as_str().parse::<ClusterEra>().unwrap(), e);
        }
        assert!("2026".parse::<ClusterEra>().is_err());
        assert!(ClusterEra::Dual.serves_legacy() && ClusterEra::Dual.serves_modern());
        assert!(!ClusterEra::Modern.serves_legacy() && !ClusterEra::Legacy.serves_modern());
    }
}
