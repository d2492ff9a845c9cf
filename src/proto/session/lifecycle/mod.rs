//! The session's lifecycle: a phase whose variants carry their own data, so "ready without a
//! negotiated context" or "initializing without a handshake" cannot be represented.
//!
//! The records of the phase keep their fields here: what changes them is this module's
//! children (`handshake`: the requests and answers of either era's handshake, and the era
//! probe; `reinit`: a handshake that failed, re-initialization, a session lost and found
//! again), and the rest of the session asks the [`Lifecycle`] through its methods.

use std::time::Instant;

mod handshake;
mod reinit;

use super::headers::SessionHeaders;
use super::negotiated::{Negotiated, STABLE_SESSION};
use super::Session;
use crate::error::Error;
use crate::ids::{CapabilityHash, RequestId, SessionId};
use crate::proto::decide::State;
use crate::proto::version::ProtocolVersion;
use crate::proto::{CallId, Era, HttpId, Output, ReinitReason};
use http::HeaderMap;
use serde_json::Value;

/// An established session and what has been seen of it since.
#[derive(Debug)]
struct Established {
    session: Negotiated,
    since: Instant,
    /// A call got an answer (not a refusal), or the server sent a message on its stream: the
    /// session works. Until then a re-initialization counts as a failed one.
    confirmed: bool,
    /// Set up by a handshake a version refusal called for (its probe found this era).
    after_version_refusal: bool,
}

/// Where a handshake stands.
#[derive(Debug)]
enum Step {
    /// Waiting out a backoff before sending `initialize`.
    Backoff,
    /// `initialize` sent.
    Initialize {
        http: HttpId,
        rpc: RequestId,
        /// Read off the `initialize` response head.
        head: InitHead,
    },
    /// `notifications/initialized` sent; the session is known.
    Initialized {
        http: HttpId,
        session: Box<Negotiated>,
    },
    /// `server/discover` sent (the modern era, or a probe for it).
    Discover { http: HttpId, rpc: RequestId },
}

/// What the `initialize` response head said.
#[derive(Debug, Default, Clone)]
struct InitHead {
    session_id: Option<SessionId>,
    hash: Option<CapabilityHash>,
}

/// What the `server/discover` probes of one handshake met so far.
#[derive(Debug, Default)]
struct ProbeState {
    /// Probes that got no answer (transport failure, 5xx).
    unanswered: u32,
    /// Version refusals retried.
    version_retries: u32,
    /// `initialize` was refused the way only a modern server refuses it.
    after_modern_refusal: bool,
    /// `initialize` is being tried because the probe met a 5xx: if it gets no answer either,
    /// the probe is sent again instead of the handshake failing.
    fell_back: bool,
    /// The probe's backoff is running (a deadline then names `server/discover`).
    waiting: bool,
}

/// A (re-)initialization in progress.
#[derive(Debug)]
struct Handshake {
    step: Step,
    /// `None` for the first connect.
    reason: Option<ReinitReason>,
    /// The session being replaced, to report what changed.
    previous: Option<Negotiated>,
    /// Why advertised checks cannot run on the session being set up.
    degraded: Option<String>,
    /// What the era probes of this handshake met so far.
    probe: ProbeState,
    /// Why the last attempt of this handshake failed: the cause of a waiting call's error
    /// when its deadline passes before the session is back.
    last_failure: Option<crate::Error>,
}

impl Handshake {
    /// The JSON-RPC id of the handshake request whose response is awaited, and whether it is
    /// `server/discover`.
    fn awaits(&self) -> Option<(&RequestId, bool)> {
        match &self.step {
            Step::Initialize { rpc, .. } => Some((rpc, false)),
            Step::Discover { rpc, .. } => Some((rpc, true)),
            Step::Backoff | Step::Initialized { .. } => None,
        }
    }
}

/// A re-initialization that gave up (it kept failing and no call was waiting). Not an end:
/// the next call starts it again, no sooner than `retry_at`, so the backoff reached so far
/// carries over and a dead server is not hammered by an app that keeps calling.
#[derive(Debug)]
struct Lost {
    reason: ReinitReason,
    /// The last working session, to report what changed once one is established again.
    previous: Option<Negotiated>,
    retry_at: Instant,
}

/// The phase of the session.
#[derive(Debug, Default)]
enum Phase {
    /// Nothing sent yet.
    #[default]
    Idle,
    /// `initialize` (or its backoff) in progress.
    Initializing(Handshake),
    /// A session is established.
    Ready(Established),
    /// The app closed the session; its DELETE may be in flight.
    Closing {
        /// The call that completes when the DELETE is answered.
        close: CallId,
    },
    /// Re-initialization kept failing with no call waiting: idle until the next call.
    Lost(Lost),
    /// Over: closed by the app.
    Terminated,
}

/// Where the session stands, for the rest of the session: the phase without its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Standing {
    /// Nothing sent yet (or a first connect failed): the next call starts a handshake.
    Idle,
    /// A handshake, or its backoff, in progress.
    Connecting,
    /// A session is established; `confirmed` once it is known to work.
    Ready { confirmed: bool },
    /// Re-initialization kept failing with no call waiting: the next call reconnects.
    Lost,
    /// Closed by the app; `deleting` while the DELETE that ends it is in flight.
    Over { deleting: bool },
}

/// The lifecycle: the phase and the counters that span phases (idle, never connected, by
/// default).
#[derive(Debug, Default)]
pub(super) struct Lifecycle {
    phase: Phase,
    /// Bumped by every handshake: exchanges and calls remember the one they were sent on.
    generation: u64,
    /// A session was established once: from then on failures re-initialize by themselves.
    ever_connected: bool,
    /// Consecutive re-initializations not confirmed by a working session.
    reinit_failures: u32,
    /// The era the server was found to speak.
    era: Option<Era>,
    /// `era` was read from an answer to the probe that does not say which era the server
    /// speaks ([`says_era`](crate::proto::probe::says_era)): this connection's, not to be
    /// remembered for the origin.
    era_inferred: bool,
    /// `connect` calls waiting for the handshake.
    connect_waiters: Vec<CallId>,
}

impl Lifecycle {
    /// Where the session stands.
    pub(super) fn standing(&self) -> Standing {
        match &self.phase {
            Phase::Idle => Standing::Idle,
            Phase::Initializing(_) => Standing::Connecting,
            Phase::Ready(e) => Standing::Ready {
                confirmed: e.confirmed,
            },
            Phase::Lost(_) => Standing::Lost,
            Phase::Closing { .. } => Standing::Over { deleting: true },
            Phase::Terminated => Standing::Over { deleting: false },
        }
    }

    /// Whether what was sent on session `generation` was sent on the current one (a
    /// handshake since has replaced it).
    pub(super) fn is_current(&self, generation: u64) -> bool {
        generation == self.generation
    }

    /// The era the server was found to speak.
    pub(super) fn era(&self) -> Option<Era> {
        self.era
    }

    /// A `connect` call waits for the handshake.
    pub(super) fn wait_for_connect(&mut self, call: CallId) {
        self.connect_waiters.push(call);
    }

    /// The app closes the session. Returns the headers of the DELETE that ends it, naming the
    /// established session or the one a handshake has obtained so far (`offered`: the version
    /// `initialize` offered), and that session's generation: the session is closing until that
    /// DELETE is answered, and then `close` completes. With no session to delete, it is over
    /// at once.
    pub(super) fn close(
        &mut self,
        offered: ProtocolVersion,
        close: CallId,
    ) -> Option<(HeaderMap, u64)> {
        let delete = match &self.phase {
            Phase::Ready(e) => e.session.headers.delete(),
            Phase::Initializing(h) => match &h.step {
                Step::Initialized { session, .. } => session.headers.delete(),
                Step::Initialize { head, .. } => head
                    .session_id
                    .as_ref()
                    .and_then(|id| SessionHeaders::new(Some(id), offered).delete()),
                Step::Backoff | Step::Discover { .. } => None,
            },
            _ => None,
        };
        self.phase = match delete {
            Some(_) => Phase::Closing { close },
            None => Phase::Terminated,
        };
        delete.map(|headers| (headers, self.generation))
    }

    /// The DELETE closing the session was answered (or failed): the session is over, and the
    /// call waiting for it is returned.
    pub(super) fn closed(&mut self) -> Option<CallId> {
        let Phase::Closing { close } = self.phase else {
            return None;
        };
        self.phase = Phase::Terminated;
        Some(close)
    }

    /// The established session, when ready (what most requests wait for).
    pub(super) fn ready(&self) -> Option<&Negotiated> {
        match &self.phase {
            Phase::Ready(e) => Some(&e.session),
            _ => None,
        }
    }

    fn handshake(&self) -> Option<&Handshake> {
        match &self.phase {
            Phase::Initializing(h) => Some(h),
            _ => None,
        }
    }

    /// Adds to a call's recovery `state` what re-initialization says: the attempts failed in a
    /// row and, for a call whose deadline passed while it waited for one (`waited_out`) and
    /// they keep failing (or keep replacing sessions that never worked), that it ran out of
    /// time waiting. Returns, then, why the last attempt failed, when that is known: what the
    /// call ended on.
    pub(super) fn reinit_facts(
        &self,
        state: State,
        waited_out: bool,
    ) -> (State, Option<&crate::Error>) {
        let state = state.reinit_failures(self.reinit_failures);
        let failing = self.handshake().filter(|_| self.reinit_failures > 0);
        match failing {
            Some(h) if waited_out => (state.awaiting_reinit(), h.last_failure.as_ref()),
            _ => (state, None),
        }
    }

    fn handshake_mut(&mut self) -> Option<&mut Handshake> {
        match &mut self.phase {
            Phase::Initializing(h) => Some(h),
            _ => None,
        }
    }

    /// Whether the established session was set up because the server refused the previous
    /// one's revision, and has not worked since (nor lived [`STABLE_SESSION`]): the same
    /// refusal again means the server answers the probe and the calls in different eras, and
    /// probing once more would only go round in circles. A session that lived that long may
    /// have met a real redeploy since.
    fn refused_again(&self, now: Instant) -> bool {
        matches!(&self.phase, Phase::Ready(e) if e.after_version_refusal
            && !e.confirmed
            && now.saturating_duration_since(e.since) < STABLE_SESSION)
    }

    /// The current session works: re-initializations start counting afresh.
    pub(super) fn confirm(&mut self) {
        if let Phase::Ready(e) = &mut self.phase {
            e.confirmed = true;
        }
        self.reinit_failures = 0;
    }
}

impl Session {
    /// The era to remember for the server's origin (an `EraCache`) when
    /// [`SessionEvent::EraDetected`](crate::proto::SessionEvent::EraDetected) reports one: the
    /// era found, or `None` when it was read from an answer to the probe that does not say which
    /// era the server speaks: a 5xx, or a 401, 403, 407, 408 or 429 whose body is no modern
    /// error (`guide::eras`). Such an era holds for this session, and the next client of the
    /// origin probes again.
    pub fn era_to_remember(&self) -> Option<Era> {
        self.life.era.filter(|_| !self.life.era_inferred)
    }

    /// Whether the server is known to speak the modern era.
    pub(super) fn is_modern(&self) -> bool {
        self.life.era() == Some(Era::Modern)
    }

    /// Completes the `connect` calls waiting for the handshake with `result`.
    pub(super) fn answer_connects(&mut self, result: Result<Value, Error>) {
        for waiter in std::mem::take(&mut self.life.connect_waiters) {
            self.outputs.push_back(Output::Completed {
                call: waiter,
                result: result.clone(),
            });
        }
    }
}
