//! The recovery decision (`guide::recovery`) as one pure function.
//!
//! [`decide`] maps what went wrong for one call ([`Failure`]) and a few plain facts about that
//! call ([`State`]) to what the session does next ([`Decision`]). The session gathers the facts
//! and carries the decision out; keeping the rule itself free of state and I/O is what lets
//! every row of the table be tested on one line.

use crate::error::ErrorKind;
use crate::policy::ReconnectPolicy;

use super::{ReinitReason, RejectReason};

/// What happened to a call's exchange (one row of the recovery table each).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failure {
    /// The call's POST carried a session id and was answered 404 (or a 400 in one of the
    /// shapes stock servers give an unknown session): the session is gone and the request was
    /// not executed.
    PostSessionNotFound,
    /// The call's POST could not even connect: not sent, so not executed.
    PostConnectFailed,
    /// The call's POST connection was lost after sending, before a response head (or the
    /// server's gateway answered 502/503/504): it may or may not have run.
    PostLost,
    /// The call's POST reached the server and was answered without the call's response (202,
    /// a 5xx, a body that answers another request or none): it may or may not have run.
    AnsweredWithoutResponse,
    /// The call's POST was refused with a status that proves it was not processed (400, 401,
    /// 403, 405, 406, 413, 415, 429, 503 with `Retry-After`, …).
    Refused {
        /// The server named a time to come back (`Retry-After`) that fits in the call's
        /// deadline.
        retry_within_deadline: bool,
    },
    /// The call's response stream ended (error or clean close) before its response.
    StreamEnded {
        /// Whether an event id was seen on it (a cursor to resume from).
        event_id_seen: bool,
    },
    /// The resume GET was answered 404 without a rejection body.
    ResumeNotFound,
    /// The resume GET was answered with the extension's rejection (body or header).
    ResumeRejected(RejectReason),
    /// The resume GET was answered 405, or another refusal saying the server will not resume
    /// this stream (400, 403, 406, 408, 422, …): the server cannot resume.
    ResumeNotAllowed,
    /// The resume GET did not reach the server (connection refused), was answered a 5xx, or
    /// was told to come back: 409 (the server still holds the stream for a connection it has
    /// not seen close), 429, or a refusal carrying `Retry-After` (a 503). The stream may still
    /// be resumable.
    ResumeConnectFailed,
    /// The resumed stream's capability hash differs from the one recorded at `initialize`.
    ResumeCapabilityHashChanged,
    /// A (non-resumed) response carried a capability hash other than the recorded one, or a
    /// replayed tool result was produced under another hash: the call ran in another context.
    CapabilityHashMismatch,
    /// Event ids on a resumed stream were not contiguous (server advertises sequenced ids).
    EventGap,
    /// A resumed stream delivered a response to a request that was never pending.
    OrphanedResponse,
    /// A resumed stream ended before the pending response.
    ResumedStreamEnded {
        /// Clean close (`true`) or transport error (`false`).
        clean: bool,
        /// Whether it delivered anything new (an event id past the cursor).
        progress: bool,
    },
    /// The call's stream belongs to a session that has since been replaced: it cannot be
    /// resumed with the old session id.
    SessionReplaced,
    /// A re-initialization attempt failed (or replaced a session that never worked).
    ReinitFailed,
    /// A server that deduplicates keyed calls refused this one because the key's first
    /// execution still runs (a re-send raced it): its stored result will exist once it ends.
    KeyInUse,
    /// A server that deduplicates keyed calls lost track of the key's first execution (the
    /// instance running it died): it may or may not have run, and will never run again.
    KeyOutcomeLost,
    /// The call's deadline passed.
    DeadlineExpired,
    /// The standalone GET stream is not offered (405, or a non-stream answer).
    ListenNotOffered,
    /// A modern server refused the call's mirrored headers (`HeaderMismatch`, -32020): nothing
    /// ran. `refreshed`: the tool list was already fetched again for this call.
    HeaderMismatch {
        /// A refresh was already tried.
        refreshed: bool,
    },
    /// The server does not speak the call's protocol version (-32022, listing what it speaks;
    /// on a legacy session, a list of modern revisions only: a modern-only server now): nothing
    /// ran.
    VersionRefused,
    /// A fresh standalone stream came under another capability hash. It carries no call, and
    /// a server may omit the header on GET: stop listening rather than re-initialize for it
    /// (that could loop).
    ListenHashMismatch,
}

/// Plain facts about the call (and session) the failure happened to. Made by [`State::new`]
/// and the setters below it; read by its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct State {
    /// The call carries an idempotency key and re-sending it is safe: the server advertised
    /// idempotency, or the application opted in (`ResendPolicy::AssumeServerDeduplicates`).
    pub resend_safe: bool,
    /// `dangerous_trust_replay`: behave like the stock SDKs (ignore extension signals, trust
    /// clean ends). Unsafe; for comparison only.
    pub trust_replay: bool,
    /// Streams can be resumed with `Last-Event-ID` (the legacy era; the modern era has no
    /// resumption: a broken stream loses the request).
    pub resumable: bool,
    /// Consecutive failed attempts to reach the server for this call, this one included.
    pub attempts: u32,
    /// Resumes of this stream that delivered nothing new, this one included.
    pub resumes_without_progress: u32,
    /// Consecutive failed re-initializations, this one included.
    pub reinit_failures: u32,
    /// Calls are waiting for the session (read by [`Failure::ReinitFailed`]: a
    /// re-initialization keeps trying while one does).
    pub calls_waiting: bool,
    /// The call waits for a re-initialization whose last attempt failed, or that replaces a
    /// session that never worked (read by
    /// [`Failure::DeadlineExpired`]: the call ran out of time because the session could not
    /// be re-established, not because the server was slow to answer it).
    pub awaiting_reinit: bool,
    /// [`ReconnectPolicy::max_attempts`].
    pub max_attempts: u32,
    /// [`ReconnectPolicy::max_resumes_without_progress`].
    pub max_resumes_without_progress: u32,
    /// [`ReconnectPolicy::max_reinit_failures`].
    pub max_reinit_failures: u32,
}

impl State {
    /// Initial facts for a call under `policy`.
    pub fn new(policy: &ReconnectPolicy, resend_safe: bool, trust_replay: bool) -> Self {
        State {
            resend_safe,
            trust_replay,
            resumable: true,
            attempts: 1,
            resumes_without_progress: 0,
            reinit_failures: 0,
            calls_waiting: false,
            awaiting_reinit: false,
            max_attempts: policy.max_attempts,
            max_resumes_without_progress: policy.max_resumes_without_progress,
            max_reinit_failures: policy.max_reinit_failures,
        }
    }

    /// The same facts in the modern era (no resumption).
    pub const fn modern(self) -> Self {
        State {
            resumable: false,
            ..self
        }
    }

    /// The same facts under `dangerous_trust_replay`.
    pub const fn trusting(self) -> Self {
        State {
            trust_replay: true,
            ..self
        }
    }

    /// The same facts with `attempts` failed attempts.
    pub const fn attempts(self, attempts: u32) -> Self {
        State { attempts, ..self }
    }

    /// The same facts with `n` resumes without progress.
    pub const fn without_progress(self, n: u32) -> Self {
        State {
            resumes_without_progress: n,
            ..self
        }
    }

    /// The same facts with `n` consecutive failed re-initializations.
    pub const fn reinit_failures(self, n: u32) -> Self {
        State {
            reinit_failures: n,
            ..self
        }
    }

    /// The same facts with calls waiting for the session (or none).
    pub const fn calls_waiting(self, calls_waiting: bool) -> Self {
        State {
            calls_waiting,
            ..self
        }
    }

    /// The same facts for a call waiting for a re-initialization whose last attempt failed.
    pub const fn awaiting_reinit(self) -> Self {
        State {
            awaiting_reinit: true,
            ..self
        }
    }

    fn may_retry(&self) -> bool {
        self.attempts < self.max_attempts
    }
}

/// What happens to the call after a re-initialization.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallFate {
    /// Re-sent on the new session (new JSON-RPC id, same idempotency key).
    Resend,
    /// Completed with this error.
    Fail(ErrorKind),
}

/// What the session does next.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decision {
    /// Not a failure under this policy: keep reading the stream.
    Continue,
    /// GET with `Last-Event-ID` after the backoff delay (the server's `retry` as a floor).
    Resume,
    /// Re-send on the same session after the backoff delay (new JSON-RPC id).
    Resend,
    /// Start a fresh session; the call's fate is settled as given.
    Reinitialize {
        /// Why (reported in `SessionEvent::Reinitialized`).
        reason: ReinitReason,
        /// What happens to the call.
        call: CallFate,
    },
    /// Try the re-initialization again after the backoff delay.
    RetryReinitialize,
    /// Complete the call with the server's refusal: it proves the request was not processed,
    /// so it is the call's answer, not an interruption.
    Report,
    /// Fetch the tool list again (the annotations the headers come from may have changed),
    /// then re-send the call.
    RefreshTools,
    /// Complete the call with this error. For [`Failure::ReinitFailed`], `SessionLost` means:
    /// stop re-initializing (no call waits), report the session lost, and reconnect on the
    /// next call.
    Fail(ErrorKind),
}

/// The recovery rule. Total and pure: the same inputs always give the same decision.
pub fn decide(failure: &Failure, state: &State) -> Decision {
    use Decision::*;
    // The fate of a call that may have run: only a safe keyed call may run again, and only
    // while it has attempts left.
    let interrupted = if state.resend_safe && state.may_retry() {
        CallFate::Resend
    } else {
        CallFate::Fail(ErrorKind::OutcomeUnknown)
    };
    let reinit = |reason: ReinitReason| Reinitialize {
        reason,
        call: interrupted.clone(),
    };
    // Same fate, on the same session, when the session itself is still fine.
    let resend_or_unknown = if state.resend_safe && state.may_retry() {
        Resend
    } else {
        Fail(ErrorKind::OutcomeUnknown)
    };
    let resume_or_give_up = if state.may_retry() {
        Resume
    } else if state.trust_replay {
        Fail(ErrorKind::Transport)
    } else {
        Fail(ErrorKind::OutcomeUnknown)
    };

    match failure {
        // Never executed, so re-sent whatever its key; but a request that keeps drawing
        // "session gone" (a proxy's 404 for this one request) must not re-initialize the
        // client for ever: after `max_attempts` it fails alone, and the session is kept.
        Failure::PostSessionNotFound if state.may_retry() => Reinitialize {
            reason: ReinitReason::SessionNotFound,
            call: CallFate::Resend,
        },
        Failure::PostSessionNotFound => Fail(ErrorKind::SessionLost),
        Failure::PostConnectFailed => {
            if state.may_retry() {
                Resend
            } else {
                Fail(ErrorKind::Transport)
            }
        }
        Failure::PostLost
        | Failure::AnsweredWithoutResponse
        | Failure::StreamEnded {
            event_id_seen: false,
        } => resend_or_unknown,
        Failure::Refused {
            retry_within_deadline: true,
        } if state.may_retry() => Resend,
        Failure::Refused { .. } => Report,
        // Without resumption a broken stream is like a lost connection: it may have run.
        Failure::StreamEnded {
            event_id_seen: true,
        } if !state.resumable => resend_or_unknown,
        Failure::StreamEnded {
            event_id_seen: true,
        } => resume_or_give_up,
        Failure::ResumeNotFound => reinit(ReinitReason::SessionNotFound),
        Failure::ResumeRejected(_) if state.trust_replay => reinit(ReinitReason::SessionNotFound),
        Failure::ResumeRejected(reason) => reinit(ReinitReason::ResumeRejected(reason.clone())),
        Failure::ResumeNotAllowed => resend_or_unknown,
        Failure::ResumeConnectFailed => resume_or_give_up,
        Failure::ResumeCapabilityHashChanged
        | Failure::CapabilityHashMismatch
        | Failure::ListenHashMismatch
        | Failure::EventGap
        | Failure::OrphanedResponse
            if state.trust_replay =>
        {
            Continue
        }
        Failure::ResumeCapabilityHashChanged => reinit(ReinitReason::CapabilityMismatch),
        Failure::CapabilityHashMismatch => Reinitialize {
            reason: ReinitReason::CapabilityMismatch,
            call: CallFate::Fail(ErrorKind::ContextMismatch),
        },
        Failure::EventGap => reinit(ReinitReason::EventGap),
        Failure::OrphanedResponse => reinit(ReinitReason::OrphanedResponse),
        Failure::ResumedStreamEnded { .. } if state.trust_replay => resume_or_give_up,
        Failure::ResumedStreamEnded {
            clean: true,
            progress: false,
        } => reinit(ReinitReason::UnverifiableCleanEnd),
        Failure::ResumedStreamEnded { .. }
            if state.resumes_without_progress > state.max_resumes_without_progress =>
        {
            reinit(ReinitReason::UnverifiableCleanEnd)
        }
        Failure::ResumedStreamEnded { .. } => resume_or_give_up,
        Failure::SessionReplaced => match interrupted {
            CallFate::Resend => Resend,
            CallFate::Fail(kind) => Fail(kind),
        },
        // Bounded by the backoff, not by giving up: while a call waits, keep trying (each
        // call ends at its own deadline); with none waiting, stop after the limit.
        Failure::ReinitFailed => {
            if state.calls_waiting || state.reinit_failures < state.max_reinit_failures {
                RetryReinitialize
            } else {
                Fail(ErrorKind::SessionLost)
            }
        }
        // Trusting clients take an idempotency refusal as the server's answer.
        Failure::KeyInUse | Failure::KeyOutcomeLost if state.trust_replay => Report,
        Failure::KeyInUse => resend_or_unknown,
        Failure::KeyOutcomeLost => Fail(ErrorKind::OutcomeUnknown),
        Failure::DeadlineExpired if state.awaiting_reinit => Fail(ErrorKind::SessionLost),
        Failure::DeadlineExpired => Fail(ErrorKind::Timeout),
        Failure::ListenNotOffered | Failure::ListenHashMismatch => Fail(ErrorKind::Protocol),
        Failure::HeaderMismatch { refreshed: false } => RefreshTools,
        Failure::HeaderMismatch { refreshed: true } => Report,
        // The server lists what it speaks: a new handshake (probing first) picks it, and the
        // call (which did not run) goes on the new session. A server whose probe and calls
        // keep disagreeing (a pool mixing eras) would be probed until the deadline: after
        // `max_attempts` its refusal is the call's answer.
        Failure::VersionRefused if state.may_retry() => Reinitialize {
            reason: ReinitReason::VersionRefused,
            call: CallFate::Resend,
        },
        Failure::VersionRefused => Report,
    }
}
