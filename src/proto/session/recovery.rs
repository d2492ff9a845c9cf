//! Carrying out the recovery decisions of [`decide`]: scheduling resumes and re-sends,
//! failing calls, and re-initializing.

use std::time::{Duration, Instant};

use tracing::{debug, info};

use super::calls::CallState;
use super::exchange::ExKind;
use super::{checks, Phase, Session, BATCH_VERSION};
use crate::error::{Error, ErrorKind};
use crate::proto::config::ResendPolicy;
use crate::proto::decide::{decide, CallFate, Decision, Failure, State};
use crate::proto::{CallId, HttpMethod, HttpPurpose, Output, RejectReason, SessionEvent};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Retry {
    Resend,
    Resume,
}

impl Session {
    /// [`Session::apply`], with the error that explains the failure: it becomes the call's
    /// error if the call fails (as its cause when the failure is an unknown outcome).
    pub(super) fn apply_because(
        &mut self,
        id: CallId,
        failure: Failure,
        cause: Error,
        now: Instant,
    ) {
        if let Some(call) = self.calls.get_mut(&id) {
            call.cause = Some(cause);
        }
        self.apply(id, failure, now);
    }

    /// Runs the recovery decision for a failure of the session itself (the standalone stream,
    /// a notification or answer POST): no call's fate hangs on it, only the session's.
    pub(super) fn apply_to_session(&mut self, failure: Failure, now: Instant) {
        let decision = decide(&failure, &self.base_state(true));
        debug!(?failure, ?decision, "recovery decision for the session");
        if let Decision::Reinitialize { reason, .. } = decision {
            self.report_rejection(&failure);
            self.start_reinit(reason, now);
        }
    }

    /// Tells the app a resume was refused, when `failure` is such a refusal.
    fn report_rejection(&mut self, failure: &Failure) {
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

    /// Runs the recovery decision for one call and carries it out.
    pub(super) fn apply(&mut self, id: CallId, failure: Failure, now: Instant) {
        let Some(call) = self.calls.get_mut(&id) else {
            return;
        };
        let stale = call.generation != self.generation || self.phase != Phase::Ready;
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
        call.attempts = call.attempts.saturating_add(1);
        let resend_safe = call.key.is_some()
            && (call.server_dedups || self.config.resend == ResendPolicy::AssumeServerDeduplicates);
        let state = State {
            attempts: call.attempts,
            resumes_without_progress: call.no_progress,
            reinit_failures: self.reinit_failures,
            ..self.base_state(resend_safe)
        };
        let decision = decide(&failure, &state);
        debug!(call = id.0, ?failure, ?decision, "recovery decision");
        match decision {
            Decision::Continue | Decision::RetryReinitialize => {}
            Decision::Resume => self.schedule_retry(id, Retry::Resume, now),
            Decision::Resend => self.schedule_retry(id, Retry::Resend, now),
            Decision::Reinitialize { reason, call: fate } => {
                self.detach(id);
                if matches!(failure, Failure::PostSessionNotFound) {
                    if let Some(call) = self.calls.get_mut(&id) {
                        call.may_have_run = false;
                    }
                }
                self.report_rejection(&failure);
                match fate {
                    CallFate::Resend => {
                        if let Some(call) = self.calls.get_mut(&id) {
                            call.state = CallState::Waiting;
                        }
                    }
                    CallFate::Fail(kind) => self.fail_call(id, kind),
                }
                if !stale {
                    self.start_reinit(reason, now);
                } else if self.phase == Phase::Ready {
                    // The session this call ran on is already replaced; only the call's fate
                    // matters, and a waiting call can go now.
                    if self
                        .calls
                        .get(&id)
                        .is_some_and(|c| c.state == CallState::Waiting)
                    {
                        self.send_call(id);
                    }
                }
            }
            Decision::Fail(ErrorKind::SessionLost) => self.session_lost(),
            Decision::Fail(kind) => {
                self.detach(id);
                self.fail_call(id, kind);
            }
            Decision::Report => {
                self.detach(id);
                let error = self
                    .calls
                    .get_mut(&id)
                    .and_then(|c| c.cause.take())
                    .unwrap_or_else(|| Error::new(ErrorKind::Protocol, "request refused"));
                self.complete(id, Err(error));
            }
        }
    }

    /// Stops the call's exchange and arms its backoff timer for `then`.
    fn schedule_retry(&mut self, id: CallId, then: Retry, now: Instant) {
        self.detach(id);
        let delay = self.retry_delay(id);
        if let Some(call) = self.calls.get_mut(&id) {
            call.state = CallState::Backoff {
                until: now.checked_add(delay).unwrap_or(now),
                then,
            };
        }
    }

    fn retry_delay(&mut self, id: CallId) -> Duration {
        let (attempt, floor) = self
            .calls
            .get(&id)
            .map(|c| (c.attempts.saturating_sub(1), c.retry))
            .unwrap_or((0, None));
        self.config.reconnect.delay(attempt, self.rng.next(), floor)
    }

    /// Stops the call's current exchange, if any.
    fn detach(&mut self, id: CallId) {
        if let Some(call) = self.calls.get_mut(&id) {
            if let CallState::Posting(http) | CallState::Resuming(http) = call.state {
                call.state = CallState::Waiting;
                self.finish_exchange(http);
            }
        }
    }

    pub(super) fn fire_retry(&mut self, id: CallId, then: Retry, now: Instant) {
        let Some(call) = self.calls.get_mut(&id) else {
            return;
        };
        match then {
            Retry::Resend => {
                call.state = CallState::Waiting;
                if self.phase == Phase::Ready {
                    self.send_call(id);
                }
            }
            Retry::Resume => {
                if self.phase == Phase::Ready && call.generation == self.generation {
                    self.send_resume(id);
                } else {
                    self.apply(id, Failure::SessionReplaced, now);
                }
            }
        }
    }

    fn send_resume(&mut self, id: CallId) {
        let Some(ctx) = self.ctx.clone() else {
            return;
        };
        let Some(call) = self.calls.get(&id) else {
            return;
        };
        let Some(cursor) = call.cursor.clone() else {
            return;
        };
        info!(call = id.0, last_event_id = %cursor, "resuming stream");
        let mut headers = Self::session_headers(&ctx, false);
        headers.push(("last-event-id", cursor.as_str().to_owned()));
        let http = self.transmit(
            ExKind::Resume(id),
            HttpMethod::Get,
            HttpPurpose::Resume,
            headers,
            None,
            ctx.id.is_some(),
            ctx.protocol_version == BATCH_VERSION,
        );
        if let Some(ex) = self.exchanges.get_mut(&http) {
            ex.resumed = true;
            ex.expect_seq = checks::next_in_sequence(&cursor);
        }
        if let Some(call) = self.calls.get_mut(&id) {
            call.state = CallState::Resuming(http);
        }
    }

    pub(super) fn bump_no_progress(&mut self, id: CallId, progress: bool) {
        if let Some(call) = self.calls.get_mut(&id) {
            if progress {
                call.no_progress = 0;
            } else {
                call.no_progress = call.no_progress.saturating_add(1);
            }
        }
    }

    pub(super) fn base_state(&self, resend_safe: bool) -> State {
        State::new(
            &self.config.reconnect,
            resend_safe,
            self.config.dangerous_trust_replay,
        )
    }
}
