//! Refused exchanges: every non-success answer, whatever the exchange, is classified by the
//! one rule in [`classify`](crate::proto::classify) and mapped here to what it means for that
//! exchange, then handed to the recovery decision.

use std::time::Instant;

use serde_json::Value;
use tracing::{debug, warn};

use super::call::CallState;
use super::exchanges::{Body, ExKind, Exchange};
use super::Session;
use crate::error::{Error, ErrorKind};
use crate::proto::classify::{self, Context, Refusal, Refused};
use crate::proto::decide::Failure;
use crate::proto::CallId;

impl Session {
    /// A refused exchange's body ended (or reading it stopped at its bound): classify it and
    /// act on what it means for the exchange.
    pub(super) fn on_refusal(&mut self, ex: Exchange, now: Instant) {
        let status = ex.status.unwrap_or(0);
        let Body::Error(body) = &ex.body else {
            return;
        };
        let context = Context {
            carried_session_id: ex.carried_session_id,
            extension: ex.checks.rejections,
            unavailable_not_processed: self.config.unavailable_not_processed,
        };
        let refusal = classify::refusal(status, &ex.head, body, context);
        debug!(status, class = ?refusal.class, kind = ?ex.kind, "exchange refused");
        match ex.kind {
            ExKind::Discover => self.on_discover_refused(status, refusal, now),
            ExKind::Initialize if self.initialize_refused_as_modern(&refusal, now) => {}
            ExKind::Initialize | ExKind::Initialized => {
                let error = match refusal.error.kind() {
                    ErrorKind::Rpc | ErrorKind::Unauthorized => refusal.error,
                    kind => Error::caused_by(kind, "initialize", refusal.error),
                };
                if ex.kind == ExKind::Initialize && status >= 500 {
                    self.initialize_unanswered(error, now);
                } else {
                    self.init_failed(error, now);
                }
            }
            ExKind::Post(call) => self.call_refused(call, status, refusal, now),
            ExKind::Resume(call) => self.resume_refused(call, status, refusal, now),
            ExKind::Listen => self.listen_refused(refusal.class, now),
            ExKind::Notify | ExKind::Answer => match refusal.class {
                Refused::SessionGone | Refused::Rejected(_) if ex.carried_session_id => {
                    self.apply_to_session(Failure::PostSessionNotFound, now)
                }
                _ => warn!(status, "notification or answer POST not accepted"),
            },
            ExKind::Delete => {
                // A session the server no longer knows is closed; so is one it cannot delete.
                let result = match refusal.class {
                    Refused::SessionGone | Refused::NotAllowed => Ok(Value::Null),
                    _ => Err(Error::caused_by(
                        refusal.error.kind(),
                        "DELETE",
                        refusal.error,
                    )),
                };
                self.close_done(result);
            }
        }
    }

    fn call_refused(&mut self, id: CallId, status: u16, refusal: Refusal, now: Instant) {
        let Some(call) = self.calls.get_mut(id) else {
            return;
        };
        if !matches!(call.state(), CallState::Posting(_)) {
            return;
        }
        if !matches!(refusal.class, Refused::MayHaveRun) {
            // Refused unprocessed: there is nothing running to cancel.
            call.not_run();
        }
        let modern = self.life.era == Some(crate::proto::Era::Modern);
        if let Some((failure, cause)) = refusal
            .error
            .rpc_error()
            .filter(|_| modern)
            .and_then(|rpc| self.modern_failure(id, rpc))
        {
            self.apply_because(id, failure, cause, now);
            return;
        }
        let Some(call) = self.calls.get_mut(id) else {
            return;
        };
        let failure = match refusal.class {
            Refused::SessionGone | Refused::Rejected(_) => Failure::PostSessionNotFound,
            Refused::NotAllowed => Failure::Refused {
                retry_within_deadline: false,
            },
            Refused::NotProcessed { retry_after } => {
                let fits = retry_after.is_some_and(|after| {
                    now.checked_add(after).is_some_and(|t| t <= call.deadline())
                });
                if fits {
                    // The server's time to come back is the floor of the re-send's backoff.
                    call.set_retry_hint(retry_after);
                }
                Failure::Refused {
                    retry_within_deadline: fits,
                }
            }
            Refused::MayHaveRun => Failure::AnsweredWithoutResponse,
        };
        debug!(call = id.0, status, ?failure, "call refused");
        let cause = match failure {
            // The cause of an unknown outcome names what was answered, whatever the body.
            Failure::AnsweredWithoutResponse if refusal.error.kind() == ErrorKind::Rpc => {
                Error::caused_by(
                    ErrorKind::Protocol,
                    format!("answered HTTP {status}"),
                    refusal.error,
                )
            }
            _ => refusal.error,
        };
        self.apply_because(id, failure, cause, now);
    }

    fn resume_refused(&mut self, id: CallId, status: u16, refusal: Refusal, now: Instant) {
        let Some(call) = self.calls.get_mut(id) else {
            return;
        };
        if !matches!(call.state(), CallState::Resuming(_)) {
            return;
        }
        let failure = match refusal.class {
            Refused::SessionGone => Failure::ResumeNotFound,
            Refused::Rejected(reason) => Failure::ResumeRejected(reason),
            // "Come back later" and a server error: the stream may still be resumable.
            Refused::NotProcessed {
                retry_after: Some(after),
            } => {
                call.set_retry_hint(Some(after));
                Failure::ResumeConnectFailed
            }
            Refused::NotProcessed { .. } if status == 429 => Failure::ResumeConnectFailed,
            Refused::MayHaveRun if status >= 500 => Failure::ResumeConnectFailed,
            Refused::NotAllowed | Refused::NotProcessed { .. } | Refused::MayHaveRun => {
                Failure::ResumeNotAllowed
            }
        };
        self.apply_because(id, failure, refusal.error, now);
    }

    fn listen_refused(&mut self, class: Refused, now: Instant) {
        let failure = match class {
            Refused::NotAllowed => Failure::ListenNotOffered,
            Refused::SessionGone => Failure::ResumeNotFound,
            Refused::Rejected(reason) => Failure::ResumeRejected(reason),
            Refused::NotProcessed { .. } | Refused::MayHaveRun => Failure::ResumeConnectFailed,
        };
        self.listen_failed(failure, None, false, now);
    }
}
