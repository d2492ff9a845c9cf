//! Carrying out the recovery decisions of [`decide`]: the one place that schedules resumes
//! and re-sends, fails calls, and starts a re-initialization.

use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use super::call::{Call, CallState, Retry};
use super::init::STABLE_SESSION;
use super::lifecycle::{Handshake, Lost, Phase, Step};
use super::listen::Listen;
use super::timers::Timer;
use super::Session;
use crate::error::{Error, ErrorKind};
use crate::proto::config::ResendPolicy;
use crate::proto::decide::{decide, CallFate, Decision, Failure, State};
use crate::proto::{CallId, Output, ReinitReason, RejectReason, SessionEvent};

impl Session {
    /// [`Session::apply`], with the error that explains the failure: it becomes the call's
    /// error if the call fails (as its cause when the outcome is unknown).
    pub(super) fn apply_because(
        &mut self,
        id: CallId,
        failure: Failure,
        cause: Error,
        now: Instant,
    ) -> bool {
        if let Some(call) = self.calls.get_mut(id) {
            call.set_cause(cause);
        }
        self.apply(id, failure, now)
    }

    /// Runs the recovery decision for one call's failure and carries it out. Returns `true`
    /// when the decision is to carry on as if nothing happened (a trusting client ignoring an
    /// extension signal): the caller then goes on with what it was doing.
    pub(super) fn apply(&mut self, id: CallId, failure: Failure, now: Instant) -> bool {
        let generation = self.life.generation;
        let ready = self.life.is_ready();
        let resend = self.config.resend_policy;
        let Some(call) = self.calls.get_mut(id) else {
            return false;
        };
        let stale = call.attempt().generation() != generation || !ready;
        // A stream of a replaced session cannot be resumed: its cursor and id are gone.
        let failure = match failure {
            Failure::StreamEnded {
                event_id_seen: true,
            }
            | Failure::ResumedStreamEnded { .. }
            | Failure::ResumeConnectFailed
                if stale =>
            {
                Failure::SessionReplaced
            }
            f => f,
        };
        let attempts = call.failed();
        // A task's poll (`tasks/get`) reads and never runs anything: always safe to repeat.
        let resend_safe = call.task().is_some()
            || (call.key().is_some()
                && (call.attempt().server_dedups()
                    || resend == ResendPolicy::AssumeServerDeduplicates));
        let no_progress = call.resumes_without_progress();
        let state = self
            .base_state(resend_safe)
            .attempts(attempts)
            .without_progress(no_progress)
            .reinit_failures(self.life.reinit_failures);
        // A call still waiting when its deadline passes, while re-initializations keep failing
        // (or keep replacing sessions that never worked), ran out of time because the session
        // could not be re-established: the last failure is what it ended on.
        let state = match self.life.handshake() {
            Some(h) if failure == Failure::DeadlineExpired && self.life.reinit_failures > 0 => {
                if let (Some(last), Some(call)) = (&h.last_failure, self.calls.get_mut(id)) {
                    call.set_cause(last.clone());
                }
                state.awaiting_reinit()
            }
            _ => state,
        };
        let decision = decide(&failure, &state);
        debug!(call = id.0, ?failure, ?decision, "recovery decision");
        match decision {
            Decision::Continue => return true,
            Decision::RetryReinitialize => {}
            Decision::Resume => self.schedule_retry(id, Retry::Resume, now),
            Decision::Resend => self.schedule_retry(id, Retry::Resend, now),
            Decision::Reinitialize { reason, call: fate } => {
                self.detach(id);
                if matches!(failure, Failure::PostSessionNotFound) {
                    if let Some(call) = self.calls.get_mut(id) {
                        call.not_run();
                    }
                }
                self.report_rejection(&failure);
                match fate {
                    CallFate::Resend => {}
                    CallFate::Fail(kind) => self.fail_call(id, kind),
                }
                if !stale {
                    self.start_reinit(reason, now);
                } else if self.life.is_ready()
                    && self
                        .calls
                        .get(id)
                        .is_some_and(|c| c.state() == CallState::Waiting)
                {
                    // The session this call ran on is already replaced; only the call's fate
                    // matters, and a waiting call can go now.
                    self.send_call(id);
                }
            }
            Decision::Fail(kind) => {
                self.detach(id);
                self.fail_call(id, kind);
            }
            Decision::RefreshTools => {
                self.detach(id);
                self.refresh_tools(id, now);
            }
            Decision::Report => {
                self.detach(id);
                let error = self
                    .calls
                    .get_mut(id)
                    .and_then(|c| c.take_cause())
                    .unwrap_or_else(|| Error::new(ErrorKind::Protocol, "request refused"));
                self.complete(id, Err(error));
            }
        }
        false
    }

    /// Runs the recovery decision for a failure of the session itself (a notification or an
    /// answer POST): no call's fate hangs on it, only the session's.
    pub(super) fn apply_to_session(&mut self, failure: Failure, now: Instant) {
        let decision = decide(&failure, &self.base_state(true));
        debug!(?failure, ?decision, "recovery decision for the session");
        if let Decision::Reinitialize { reason, .. } = decision {
            self.report_rejection(&failure);
            self.start_reinit(reason, now);
        }
    }

    /// Tells the app a resume was refused, when `failure` is such a refusal.
    pub(super) fn report_rejection(&mut self, failure: &Failure) {
        let reason = match failure {
            Failure::ResumeNotFound => None,
            Failure::ResumeRejected(r) => Some(r.clone()),
            Failure::ResumeCapabilityHashChanged => Some(RejectReason::CapabilityMismatch),
            _ => return,
        };
        info!(reason = ?reason, "resume rejected");
        self.outputs
            .push_back(Output::Event(SessionEvent::ResumeRejected { reason }));
    }

    /// Facts about the session every decision shares.
    pub(super) fn base_state(&self, resend_safe: bool) -> State {
        let state = State::new(
            &self.config.reconnect,
            resend_safe,
            self.config.dangerous_trust_replay,
        );
        if self.life.era == Some(crate::proto::Era::Modern) {
            state.modern()
        } else {
            state
        }
    }

    /// Stops the call's exchange and arms its backoff timer for `then`.
    fn schedule_retry(&mut self, id: CallId, then: Retry, now: Instant) {
        self.detach(id);
        let Some(call) = self.calls.get_mut(id) else {
            return;
        };
        let delay = self.config.reconnect.delay(
            call.attempts().saturating_sub(1),
            self.rng.next(),
            call.retry_hint(),
        );
        call.back_off(then);
        self.timers.set(
            Timer::CallBackoff(id),
            now.checked_add(delay).unwrap_or(now),
        );
    }

    /// A call's backoff ended.
    pub(super) fn fire_retry(&mut self, id: CallId, now: Instant) {
        let generation = self.life.generation;
        let ready = self.life.is_ready();
        let Some(call) = self.calls.get_mut(id) else {
            return;
        };
        let CallState::Backoff(then) = call.state() else {
            return;
        };
        call.wait();
        match then {
            Retry::Resend if ready => self.send_call(id),
            Retry::Resend => {}
            Retry::Resume if ready && call.attempt().generation() == generation => {
                self.send_resume(id)
            }
            Retry::Resume => {
                self.apply(id, Failure::SessionReplaced, now);
            }
        }
    }

    /// Stops the call's current exchange, if any.
    pub(super) fn detach(&mut self, id: CallId) {
        if let Some(http) = self.calls.get_mut(id).and_then(Call::leave_exchange) {
            self.exchanges.finish(http);
        }
    }

    /// Replaces the established session with a fresh one.
    ///
    /// A session that never worked (no call answered, no message on its stream, and younger
    /// than [`STABLE_SESSION`]) makes this re-initialization count as a failed one: it backs
    /// off exponentially, which is what slows the loop against a server that accepts
    /// `initialize` and refuses everything after it (each call's `max_attempts` ends it).
    pub(super) fn start_reinit(&mut self, reason: ReinitReason, now: Instant) {
        let Phase::Ready(established) = &self.life.phase else {
            return;
        };
        if now.saturating_duration_since(established.since) >= STABLE_SESSION {
            self.life.confirm();
        }
        let delay = if self.is_confirmed() {
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
        if let super::listen::ListenState::Open(http) = self.listen.state {
            self.exchanges.finish(http);
        }
        self.timers.cancel(Timer::ListenBackoff);
        self.listen = Listen::new();
        // Answers queued for the old session's requests have nobody to reach.
        self.exchanges.answers.queue.clear();
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
    pub(super) fn start_handshake(
        &mut self,
        reason: Option<ReinitReason>,
        previous: Option<super::lifecycle::Negotiated>,
        delay: Option<Duration>,
        now: Instant,
    ) {
        self.life.generation += 1;
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

    /// Sends the first request of a handshake: `server/discover` or `initialize`, per era.
    pub(super) fn send_handshake(&mut self, now: Instant) {
        match self.handshake_era() {
            crate::proto::Era::Legacy => self.send_initialize(now),
            _ => self.send_discover(now),
        }
    }

    /// Backoff before the next re-initialization attempt.
    pub(super) fn reinit_delay(&mut self) -> Duration {
        self.config.reconnect.delay(
            self.life.reinit_failures.saturating_sub(1),
            self.rng.next(),
            None,
        )
    }

    /// Facts for deciding on a failed re-initialization.
    pub(super) fn reinit_state(&self) -> State {
        self.base_state(false)
            .reinit_failures(self.life.reinit_failures)
            // `connect` waiters are not counted: the driver bounds them with a timeout the core
            // does not see, so they could keep a dead server busy for ever.
            .calls_waiting(self.calls.len() > 0)
    }

    /// Re-initialization kept failing and no call waits: stop trying until the next call.
    /// Not an end: the backoff reached so far is kept for that next attempt.
    pub(super) fn session_lost(&mut self, reason: Option<ReinitReason>, now: Instant) {
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
        self.listen = Listen::new();
        self.fail_everything(
            ErrorKind::SessionLost,
            "session lost: re-initialization kept failing",
            true,
        );
        self.outputs
            .push_back(Output::Event(SessionEvent::SessionLost));
    }

    /// The first call after the session was lost: re-initialize, no sooner than the backoff
    /// reached when it was given up.
    pub(super) fn reconnect_lost(&mut self, now: Instant) {
        let Phase::Lost(lost) = std::mem::replace(&mut self.life.phase, Phase::Idle) else {
            return;
        };
        let wait = lost.retry_at.saturating_duration_since(now);
        info!(?wait, "reconnecting a lost session");
        let delay = (!wait.is_zero()).then_some(wait);
        self.start_handshake(Some(lost.reason), lost.previous, delay, now);
    }

    /// Whether the established session is known to work.
    pub(super) fn is_confirmed(&self) -> bool {
        matches!(&self.life.phase, Phase::Ready(e) if e.confirmed)
    }

    /// Fails a call with `kind`, reporting the event that goes with it.
    fn fail_call(&mut self, id: CallId, kind: ErrorKind) {
        let Some(call) = self.calls.get(id) else {
            return;
        };
        let method = call.method().to_owned();
        // The app hears of its own calls only.
        let report = call.serves().is_none();
        let message = match kind {
            ErrorKind::OutcomeUnknown if !report => format!("{method} was interrupted"),
            ErrorKind::ContextMismatch if !report => format!("{method}: another context"),
            ErrorKind::OutcomeUnknown => {
                info!(call = id.0, %method, "outcome unknown: interrupted and not safe to re-send");
                self.outputs
                    .push_back(Output::Event(SessionEvent::OutcomeUnknown {
                        call: id,
                        method: method.clone(),
                    }));
                format!("{method} was interrupted; it may or may not have run")
            }
            ErrorKind::ContextMismatch => {
                warn!(call = id.0, %method, "response produced under another capability hash");
                self.outputs
                    .push_back(Output::Event(SessionEvent::ContextMismatch { call: id }));
                format!("{method} was answered under another negotiated context")
            }
            ErrorKind::Timeout => format!("{method} timed out"),
            ErrorKind::Transport => format!("{method}: the server could not be reached"),
            _ => format!("{method} failed"),
        };
        let error = match self.calls.get_mut(id).and_then(|c| c.take_cause()) {
            Some(cause) => Error::caused_by(kind, message, cause),
            None => Error::new(kind, message),
        };
        self.complete(id, Err(error));
    }

    /// Completes a call, exactly once.
    pub(super) fn complete(&mut self, id: CallId, result: Result<serde_json::Value, Error>) {
        let Some(call) = self.remove_call(id) else {
            return;
        };
        match call.serves() {
            Some(target) => self.internal_done(target, result),
            None => self
                .outputs
                .push_back(Output::Completed { call: id, result }),
        }
    }

    /// Forgets a call: its indexes, its timers and its exchange.
    pub(super) fn remove_call(&mut self, id: CallId) -> Option<super::call::Call> {
        let call = self.calls.remove(id)?;
        self.timers.cancel(Timer::CallBackoff(id));
        self.timers.cancel(Timer::CallDeadline(id));
        if let Some(http) = call.state().exchange() {
            self.exchanges.finish(http);
        }
        Some(call)
    }

    /// Fails every call and connect waiter (closing, or the session lost).
    pub(super) fn fail_everything(&mut self, kind: ErrorKind, message: &str, events: bool) {
        for waiter in std::mem::take(&mut self.life.connect_waiters) {
            self.outputs.push_back(Output::Completed {
                call: waiter,
                result: Err(Error::new(kind, message)),
            });
        }
        for id in self.calls.ids() {
            if events {
                self.fail_call(id, kind);
            } else {
                self.complete(id, Err(Error::new(kind, message)));
            }
        }
    }
}
