//! When a handshake fails, and re-initialization: a first connect's failure reported, a
//! later one retried with backoff while the recovery decision allows; replacing an
//! established session; giving a session up as lost, and reconnecting it on the next call.

use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::{Handshake, Lost, Phase, Standing, Step};
use crate::error::{Error, ErrorKind};
use crate::proto::decide::{decide, Decision, Failure, State};
use crate::proto::session::call::{CallState, Retry};
use crate::proto::session::negotiated::{Negotiated, STABLE_SESSION};
use crate::proto::session::timers::Timer;
use crate::proto::session::Session;
use crate::proto::{Output, ReinitReason, SessionEvent};

impl Session {
    /// Something needs the session (a call, a notification, `connect`): an idle one starts
    /// its handshake, a lost one reconnects; one established, being set up or closed is left
    /// as it is.
    pub(in crate::proto::session) fn start_if_stopped(&mut self, now: Instant) {
        match self.life.phase {
            Phase::Idle => self.start_handshake(None, None, None, now),
            Phase::Lost(_) => self.reconnect_lost(now),
            _ => {}
        }
    }

    /// The handshake failed: report it (first connect) or back off and try again, while a
    /// call waits or until the recovery decision says the session is lost.
    pub(in crate::proto::session) fn init_failed(&mut self, error: Error, now: Instant) {
        let Some(h) = self.life.handshake() else {
            return;
        };
        match &h.step {
            Step::Initialize { http, .. }
            | Step::Initialized { http, .. }
            | Step::Discover { http, .. } => {
                let http = *http;
                self.exchanges.finish(http);
            }
            Step::Backoff => {}
        }
        self.timers.cancel(Timer::InitDeadline);
        warn!(error = %error, "initialization failed");
        if !self.life.ever_connected {
            // First connect: report to the app rather than retrying behind its back (a probe
            // waiting to be sent again included).
            self.life.phase = Phase::Idle;
            self.timers.cancel(Timer::InitBackoff);
            self.answer_connects(Err(error.clone()));
            for id in self.calls.ids() {
                self.complete(id, Err(error.clone()));
            }
            self.notifications.clear();
            return;
        }
        self.life.reinit_failures += 1;
        match decide(&Failure::ReinitFailed, &self.reinit_state()) {
            Decision::RetryReinitialize => {
                let delay = self.reinit_delay();
                if let Some(h) = self.life.handshake_mut() {
                    h.step = Step::Backoff;
                    h.last_failure = Some(error);
                }
                self.timers
                    .set(Timer::InitBackoff, now.checked_add(delay).unwrap_or(now));
            }
            _ => {
                let reason = self.life.handshake().and_then(|h| h.reason.clone());
                self.session_lost(reason, now)
            }
        }
    }

    /// Replaces the established session with a fresh one.
    ///
    /// A session that never worked (no call answered, no message on its stream, and younger
    /// than [`STABLE_SESSION`]) makes this re-initialization count as a failed one: it backs
    /// off exponentially, which is what slows the loop against a server that accepts
    /// `initialize` and refuses everything after it (each call's `max_attempts` ends it).
    pub(in crate::proto::session) fn start_reinit(&mut self, reason: ReinitReason, now: Instant) {
        let Phase::Ready(established) = &self.life.phase else {
            return;
        };
        if now.saturating_duration_since(established.since) >= STABLE_SESSION {
            self.life.confirm();
        }
        let delay = if self.life.standing() == (Standing::Ready { confirmed: true }) {
            None
        } else {
            self.life.reinit_failures += 1;
            let state = self.reinit_state();
            match decide(&Failure::ReinitFailed, &state) {
                Decision::RetryReinitialize => Some(self.reinit_delay()),
                _ => return self.session_lost(Some(reason), now),
            }
        };
        info!(?reason, ?delay, "re-initializing the session");
        let previous = match std::mem::replace(&mut self.life.phase, Phase::Idle) {
            Phase::Ready(e) => Some(e.session),
            _ => None,
        };
        // The standalone stream belongs to the old session; it is reopened afterwards.
        self.stop_listening();
        self.start_handshake(Some(reason), previous, delay, now);
        // Calls waiting for a retry on the old session: a resend waits for the new one; a
        // resume cannot happen any more (its cursor belongs to the old session).
        for id in self.calls.ids() {
            let Some(call) = self.calls.get_mut(id) else {
                continue;
            };
            match call.state() {
                CallState::Backoff(Retry::Resend) => {
                    call.wait();
                    self.timers.cancel(Timer::CallBackoff(id));
                }
                CallState::Backoff(Retry::Resume) => {
                    call.wait();
                    self.timers.cancel(Timer::CallBackoff(id));
                    self.apply(id, Failure::SessionReplaced, now);
                }
                _ => {}
            }
        }
    }

    /// Starts a handshake: at once, or after `delay` (a re-initialization backing off).
    fn start_handshake(
        &mut self,
        reason: Option<ReinitReason>,
        previous: Option<Negotiated>,
        delay: Option<Duration>,
        now: Instant,
    ) {
        self.life.generation += 1;
        // Every new session (a first one, a replacement, a reconnection after a loss) starts
        // owing its server nothing.
        self.withdraw_server_requests();
        self.life.phase = Phase::Initializing(Handshake {
            step: Step::Backoff,
            reason,
            previous,
            degraded: None,
            probe: Default::default(),
            last_failure: None,
        });
        match delay {
            Some(delay) => self
                .timers
                .set(Timer::InitBackoff, now.checked_add(delay).unwrap_or(now)),
            None => self.send_handshake(now),
        }
    }

    /// Backoff before the next re-initialization attempt.
    fn reinit_delay(&mut self) -> Duration {
        self.config.reconnect.delay(
            self.life.reinit_failures.saturating_sub(1),
            self.rng.next(),
            None,
        )
    }

    /// Facts for deciding on a failed re-initialization.
    fn reinit_state(&self) -> State {
        self.base_state(false)
            .reinit_failures(self.life.reinit_failures)
            // `connect` waiters are not counted: the driver bounds them with a timeout the core
            // does not see, so they could keep a dead server busy for ever.
            .calls_waiting(self.calls.len() > 0)
    }

    /// Re-initialization kept failing and no call waits: stop trying until the next call.
    /// Not an end: the backoff reached so far is kept for that next attempt.
    fn session_lost(&mut self, reason: Option<ReinitReason>, now: Instant) {
        warn!(
            failures = self.life.reinit_failures,
            "session lost: re-initialization kept failing; the next call reconnects"
        );
        let previous = match std::mem::replace(&mut self.life.phase, Phase::Idle) {
            Phase::Initializing(h) => h.previous,
            Phase::Ready(e) => Some(e.session),
            _ => None,
        };
        let retry_at = now.checked_add(self.reinit_delay()).unwrap_or(now);
        self.life.phase = Phase::Lost(Lost {
            reason: reason.unwrap_or(ReinitReason::SessionNotFound),
            previous,
            retry_at,
        });
        self.exchanges.finish_all_but_delete();
        self.timers.clear();
        self.stop_listening();
        self.withdraw_server_requests();
        self.fail_everything(
            ErrorKind::SessionLost,
            "session lost: re-initialization kept failing",
            true,
        );
        self.outputs
            .push_back(Output::Event(SessionEvent::SessionLost));
    }

    /// The server requests the app has not answered belong to a session that is gone (or
    /// closed): their handlers are told to stop (and their answers would be dropped).
    pub(in crate::proto::session) fn withdraw_server_requests(&mut self) {
        for id in self.exchanges.forget_answers() {
            self.outputs.push_back(Output::ServerRequestWithdrawn(id));
        }
    }

    /// The first call after the session was lost: re-initialize, no sooner than the backoff
    /// reached when it was given up.
    fn reconnect_lost(&mut self, now: Instant) {
        let Phase::Lost(lost) = std::mem::replace(&mut self.life.phase, Phase::Idle) else {
            return;
        };
        let wait = lost.retry_at.saturating_duration_since(now);
        info!(?wait, "reconnecting a lost session");
        let delay = (!wait.is_zero()).then_some(wait);
        self.start_handshake(Some(lost.reason), lost.previous, delay, now);
    }
}
