//! The session state machine.
//!
//! One [`Session`] follows one logical MCP connection across every stream, resume and
//! re-initialization. This file holds the session's parts and its `poll_*` outputs; its
//! handlers are grouped by the input they take:
//!
//! - `outbound`: the application's commands (`connect`, `submit`, `notify`, `respond`,
//!   `cancel`, `close`), time passing (`handle_timeout`), and every request the session
//!   sends for them;
//! - `exchanges::responses`: what the server answers (`handle_head`, `handle_data`,
//!   `handle_end`, `handle_error`, bodies decoded ahead), read through
//!   [`classify`](super::classify) into successes or [`Failure`](super::decide::Failure)s, and
//!   the messages in those bodies, routed to their call, the app or the handshake; it lives
//!   inside `exchanges`, the only reader of an exchange's record and body;
//! - `lifecycle`: the phase, each variant carrying its data; with, in `lifecycle::handshake`,
//!   the handshake of either era, and in `lifecycle::reinit`, a handshake that failed,
//!   re-initialization, a session lost and found again. The phase's records keep their
//!   fields to that module: the rest asks the lifecycle (`ready`, `standing`, `close`…);
//! - `apply`: how a call ends or carries on: completed, or the recovery decision of
//!   [`decide`](super::decide::decide) carried out for it.
//!
//! The records they work on keep their own data: `negotiated` (what a session negotiated,
//! built by a handshake and read by all that is sent on it, which assembles its requests),
//! `call` (the call record and table, with what drives a call past its first answer:
//! `call::modern`, a modern call's rounds of input and its task, and `call::checkpoints`),
//! `exchanges` (the HTTP exchanges in flight and the driver's action queue), `cursors`
//! (stream cursors and the event ids already delivered), `timers` (every deadline and
//! backoff, ordered by expiry), `listen` (the standalone GET stream).
//!
//! The [pipeline walkthrough](super::walkthrough) follows a cross-instance resume through
//! these parts.

mod ahead;
mod apply;
mod call;
mod cursors;

mod exchanges;
mod headers;

mod lifecycle;
mod listen;
mod negotiated;
mod outbound;
mod timers;

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use bytes::Bytes;
use serde_json::Value;

pub use self::ahead::{read_ahead, BodyFormat, DecodedEvent, DecodedJson, SseAhead};
use self::call::{Calls, HeldTaskMessage};
use self::cursors::DeliveredBySession;
use self::exchanges::Exchanges;
use self::lifecycle::{Lifecycle, Standing};
use self::listen::Listen;
use self::timers::Timers;
use super::config::SessionConfig;
use super::modern::{ClientMeta, ParamHeader};
use super::version::ProtocolVersion;
use super::{CallId, ExtensionStatus, HttpId, Output, Transmit};
use crate::ids::SessionId;
use crate::sse::SseEvent;

/// The longest method of a server request handed out: far above any method a handler takes.
/// A server's request with a longer one is refused at once (as the decoder refuses one with
/// an overlong id), so that a server cannot make each handler it keeps busy, and the refusal,
/// hold a copy of a megabyte method.
pub(crate) const MAX_REQUEST_METHOD_LEN: usize = 256;

/// A call whose deadline cannot be represented (a timeout of centuries) gets this one.
const FAR_FUTURE: std::time::Duration = std::time::Duration::from_secs(100 * 365 * 24 * 3600);

/// The deadline of a call allowed `timeout` from `now`: a timeout beyond what the clock can
/// represent means "practically never", not "at once".
fn deadline_after(now: Instant, timeout: std::time::Duration) -> Instant {
    now.checked_add(timeout)
        .or_else(|| now.checked_add(FAR_FUTURE))
        .unwrap_or(now)
}

/// SplitMix64: a tiny seeded generator for jitter, so the core never reads entropy or clocks.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The sans-IO MCP client session. See the [module docs](super) for the driver contract.
#[derive(Debug)]
pub struct Session {
    config: SessionConfig,
    rng: Rng,
    life: Lifecycle,
    calls: Calls,
    exchanges: Exchanges,
    timers: Timers,
    listen: Listen,
    /// The event ids delivered, per session.
    delivered: DeliveredBySession,
    /// `x-mcp-header` annotations of the tools a modern server listed, by tool name.
    tool_headers: HashMap<String, Vec<ParamHeader>>,
    /// What a modern request says of the client: the configured capabilities with the
    /// extensions the core itself handles (tasks), and the client's name and version.
    client_meta: ClientMeta,
    /// The app's notifications held until the session is ready.
    notifications: VecDeque<Bytes>,
    /// `tasks/update` and `tasks/cancel` held until the session is ready.
    held_task_messages: VecDeque<HeldTaskMessage>,
    /// Reused for the events decoded from each body chunk.
    scratch_events: Vec<SseEvent>,
    outputs: VecDeque<Output>,
}

impl Session {
    /// Creates an idle session. Nothing is sent until [`Session::connect`] or the first
    /// [`Session::submit`].
    pub fn new(config: SessionConfig, now: Instant) -> Self {
        let _ = now;
        let mut modern_capabilities = config.client_capabilities.clone();
        if let Value::Object(caps) = &mut modern_capabilities {
            let extensions = caps
                .entry("extensions")
                .or_insert_with(|| Value::Object(Default::default()));
            if let Value::Object(extensions) = extensions {
                extensions
                    .entry(super::modern::TASKS_EXTENSION)
                    .or_insert_with(|| Value::Object(Default::default()));
            }
        }
        let client_meta = ClientMeta::new(
            modern_capabilities,
            &config.client_name,
            &config.client_version,
        );
        Session {
            rng: Rng(config.jitter_seed),
            client_meta,
            config,
            life: Lifecycle::default(),
            calls: Calls::default(),
            exchanges: Exchanges::default(),
            timers: Timers::default(),
            listen: Listen::default(),
            delivered: DeliveredBySession::default(),
            tool_headers: HashMap::new(),
            notifications: VecDeque::new(),
            held_task_messages: VecDeque::new(),
            scratch_events: Vec::new(),
            outputs: VecDeque::new(),
        }
    }

    /// Next network action.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.flush_answers();
        self.flush_notifications();
        self.flush_task_messages();
        self.exchanges.poll_transmit()
    }

    /// Next output for the app.
    #[must_use]
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// When [`Session::handle_timeout`] must be called next.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next()
    }

    /// Whether the session is closed, with nothing left in flight (the driver may stop). A
    /// lost session is not: the next call reconnects.
    pub fn is_terminated(&self) -> bool {
        self.life.standing() == Standing::Over { deleting: false }
    }

    /// Whether the session was closed ([`Session::close`]), its DELETE perhaps still in
    /// flight: it takes no call again (a submission or a pick-up completes `Closed` at once).
    /// A lost session is not closed: the next call reconnects.
    pub fn is_closed(&self) -> bool {
        matches!(self.life.standing(), Standing::Over { .. })
    }
}

// Read-only views for drivers, bindings and tests.
impl Session {
    /// The current session id, once `initialize` succeeded (shown only as a prefix by
    /// `Display`).
    pub fn session_id(&self) -> Option<&SessionId> {
        self.life.ready().and_then(|s| s.id.as_ref())
    }

    /// The negotiated protocol version of the current session.
    pub fn protocol_version(&self) -> Option<ProtocolVersion> {
        self.life.ready().map(|s| s.version)
    }

    /// Whether the session is established and not re-initializing.
    pub fn is_ready(&self) -> bool {
        self.life.ready().is_some()
    }

    /// Whether the session is lost: re-initialization kept failing while no call waited, and
    /// stopped. The next call (or `connect`) starts it again.
    pub fn is_lost(&self) -> bool {
        self.life.standing() == Standing::Lost
    }

    /// The call whose request the exchange `http` POSTs, if it is a call's POST (not a resume,
    /// a handshake or a notification). A driver may perform that exchange wherever the call
    /// is awaited; every other exchange belongs to the session as a whole.
    pub fn exchange_call(&self, http: HttpId) -> Option<CallId> {
        self.exchanges.posted_call(http)
    }

    /// Number of calls not yet completed.
    pub fn pending_calls(&self) -> usize {
        self.calls.len()
    }

    /// Which resume-safety checks the current session's server advertised and which are in
    /// force; `None` before the first session is established.
    pub fn extension_status(&self) -> Option<ExtensionStatus> {
        self.life.ready().map(|s| s.extension_status())
    }

    /// Answers to server requests dropped because more than 256 were queued behind those in
    /// flight.
    pub fn dropped_answers(&self) -> u64 {
        self.exchanges.dropped_answers()
    }
}
