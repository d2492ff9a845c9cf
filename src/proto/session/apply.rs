//! How a call ends or carries on: completed, exactly once, and the recovery decisions of
//! [`decide`] carried out for it: the one place that schedules resumes and re-sends and fails
//! calls; a decision to re-initialize goes to the lifecycle (`reinit`). Calls the session
//! makes for itself (a fresh tool list) end here too, and carry on the call they serve.

use std::time::Instant;

use tracing::{debug, info, warn};

use serde_json::Value;

use super::call::{Call, CallState, Retry};
use super::timers::Timer;
use super::Session;
use crate::error::{Error, ErrorKind};
use crate::proto::decide::{decide, CallFate, Decision, Failure, State};
use crate::proto::{CallId, Output, RejectReason, SessionEvent};

// Recovery decisions carried out, and how a call ends.
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
        let ready = self.life.ready().is_some();
        let resend = self.config.resend_policy;
        let Some(call) = self.calls.get_mut(id) else {
            return false;
        };
        let stale = !self.life.is_current(call.attempt().generation()) || !ready;
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
        let resend_safe = call.resend_safe(resend);
        let base = self.base_state(resend_safe);
        let Some(call) = self.calls.get_mut(id) else {
            return false;
        };
        // A call still waiting when its deadline passes, while re-initializations keep failing,
        // ran out of time because the session could not be re-established: the last failure
        // is what it ended on. One still in flight on the old session was not waiting for
        // them: it timed out.
        let waited = failure == Failure::DeadlineExpired
            && matches!(call.state(), CallState::Waiting | CallState::Backoff(_));
        let state = call.failed(base, failure == Failure::KeyInUse);
        let (state, last) = self.life.reinit_facts(state, waited);
        if let (Some(last), Some(call)) = (last, self.calls.get_mut(id)) {
            call.set_cause(last.clone());
        }
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
                } else if self.life.ready().is_some()
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
                self.fail_with_cause(id, "request refused");
            }
        }
        false
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
        if self.is_modern() {
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
        let delay = call.back_off(then, &self.config.reconnect, self.rng.next());
        self.timers.set(
            Timer::CallBackoff(id),
            now.checked_add(delay).unwrap_or(now),
        );
    }

    /// Stops the call's current exchange, if any.
    pub(super) fn detach(&mut self, id: CallId) {
        if let Some(http) = self.calls.get_mut(id).and_then(Call::leave_exchange) {
            self.exchanges.finish(http);
        }
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

    /// A call whose request may have run and cannot be sent again safely (`why`): it ends
    /// [`ErrorKind::OutcomeUnknown`], never re-sent.
    pub(super) fn unsafe_to_repeat(&mut self, id: CallId, why: &str) {
        if let Some(call) = self.calls.get_mut(id) {
            call.set_cause(Error::new(ErrorKind::Transport, why));
        }
        self.fail_call(id, ErrorKind::OutcomeUnknown);
    }

    /// Ends call `id` with the failure it recorded as its cause, or a protocol error saying
    /// `fallback` when it recorded none.
    fn fail_with_cause(&mut self, id: CallId, fallback: &str) {
        let error = self
            .calls
            .get_mut(id)
            .and_then(|c| c.take_cause())
            .unwrap_or_else(|| Error::new(ErrorKind::Protocol, fallback));
        self.complete(id, Err(error));
    }

    /// Completes a call, exactly once.
    pub(super) fn complete(&mut self, id: CallId, result: Result<serde_json::Value, Error>) {
        self.end(id, result, false);
    }

    /// Completes a task's call with its task's final status: the tool's own answer, which
    /// says by itself whether it ran, as a JSON-RPC error answering a call does.
    pub(super) fn complete_task(&mut self, id: CallId, result: Result<serde_json::Value, Error>) {
        self.end(id, result, true);
    }

    /// Completes a call, exactly once, with `result`: `outcome` when that is its task's
    /// final status.
    fn end(&mut self, id: CallId, result: Result<serde_json::Value, Error>, outcome: bool) {
        let Some(call) = self.remove_call(id) else {
            return;
        };
        // A failure that is not the server's answer tells whether the request may have run.
        // A task's call is answered only by its task's final status: a JSON-RPC error to a
        // poll, or a refusal of one, answers `tasks/get` while the task runs on. An MRTR
        // call's error after an answered round is its answer, yet the tool may have acted
        // before it asked: it says so too. So does a call's error after a send of it that may
        // have run: a JSON-RPC error refusing the re-send proves only that the re-send did not.
        let answer = match &result {
            Err(e) => {
                e.kind() == ErrorKind::Rpc
                    && ((call.task_id().is_none() && !call.ran_earlier()) || outcome)
                    && call.rounds() == 0
            }
            Ok(_) => true,
        };
        let result = match result {
            Err(e) if call.may_have_run() && !answer => Err(e.with_may_have_run()),
            result => result,
        };
        match call.serves() {
            Some(target) => self.internal_done(target, result),
            None => self
                .outputs
                .push_back(Output::Completed { call: id, result }),
        }
    }

    /// Forgets a call: its indexes, its timers and its exchange; the inputs the app is still
    /// working out for it are withdrawn.
    pub(super) fn remove_call(&mut self, id: CallId) -> Option<super::call::Call> {
        let (call, unanswered) = self.calls.remove(id)?;
        // No round or task will take their answers any more: their handlers would run on for
        // nobody, each holding one of the driver's handler slots.
        for input in unanswered {
            self.outputs
                .push_back(Output::ServerRequestWithdrawn(input));
        }
        self.timers.cancel(Timer::CallBackoff(id));
        self.timers.cancel(Timer::CallDeadline(id));
        if let Some(http) = call.state().exchange() {
            self.exchanges.finish(http);
        }
        Some(call)
    }

    /// Fails every call and connect waiter (closing, or the session lost).
    pub(super) fn fail_everything(&mut self, kind: ErrorKind, message: &str, events: bool) {
        self.answer_connects(Err(Error::new(kind, message)));
        for id in self.calls.ids() {
            if events {
                self.fail_call(id, kind);
            } else {
                self.complete(id, Err(Error::new(kind, message)));
            }
        }
    }
}

// Calls the session makes for itself: a fresh tool list for a call whose headers did not
// match, and what its end means for that call.
impl Session {
    /// The headers did not match: fetch the tool list again (a call of our own, never
    /// reported to the app), then send the call once more.
    fn refresh_tools(&mut self, target: CallId, now: Instant) {
        let Some(call) = self.calls.get_mut(target) else {
            return;
        };
        let fetch = call.refresh(target);
        let deadline = fetch.deadline();
        let id = CallId::next();
        self.calls.insert(id, fetch);
        self.timers.set(Timer::CallDeadline(id), deadline);
        debug!(
            call = target.0,
            "tool annotations refreshed before sending again"
        );
        let _ = now;
        self.send_call(id);
    }

    /// An internal call ended: carry on with the call it served.
    fn internal_done(&mut self, target: CallId, result: Result<Value, Error>) {
        let waiting = self
            .calls
            .get(target)
            .is_some_and(|c| c.state() == CallState::Waiting);
        match result {
            Ok(_) if waiting => self.send_call(target),
            Ok(_) => {}
            Err(_) => self.fail_with_cause(target, "header mismatch"),
        }
    }
}
