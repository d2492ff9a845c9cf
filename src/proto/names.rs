//! Stable names: what the configuration and lifecycle enums are called in logs, in language
//! bindings and in configuration files. Like [`ErrorKind::as_str`](crate::ErrorKind::as_str),
//! a name never changes once released; a variant added later gets a name of its own.

use std::str::FromStr;

use super::config::{Era, ResendPolicy};
use super::{ListenStopReason, ReinitReason, RejectReason, SessionEvent};
use crate::error::{Error, ErrorKind};

/// `as_str` and `FromStr` for an enum of unit variants, from one table.
macro_rules! named {
    ($ty:ident, $what:literal { $($variant:ident => $name:literal,)* }) => {
        impl $ty {
            /// The stable name.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $name,)*
                }
            }
        }

        impl FromStr for $ty {
            type Err = Error;

            /// The variant named `s` ([`Self::as_str`]); an [`ErrorKind::InvalidConfig`] error
            /// listing the names otherwise.
            fn from_str(s: &str) -> Result<Self, Error> {
                match s {
                    $($name => Ok($ty::$variant),)*
                    other => Err(Error::new(
                        ErrorKind::InvalidConfig,
                        format!(
                            concat!("unknown ", $what, " `{}` (expected {})"),
                            other,
                            [$($name),*].join(", ")
                        ),
                    )),
                }
            }
        }
    };
}

named!(Era, "era" {
    Auto => "auto",
    Legacy => "legacy",
    Modern => "modern",
});

named!(ResendPolicy, "resend policy" {
    ServerAdvertised => "server_advertised",
    AssumeServerDeduplicates => "assume_server_deduplicates",
});

impl RejectReason {
    /// The reason's name on the wire (the extension's `reason`); for
    /// [`RejectReason::Other`], the server's own text.
    pub fn as_str(&self) -> &str {
        match self {
            RejectReason::UnknownSession => "unknown_session",
            RejectReason::NotOwner => "not_owner",
            RejectReason::EventGap => "event_gap",
            RejectReason::OrphanedRequest => "orphaned_request",
            RejectReason::CapabilityMismatch => "capability_mismatch",
            RejectReason::Other(other) => other,
        }
    }
}

impl ReinitReason {
    /// The stable name (a rejected resume's own reason is [`ReinitReason::rejection`]).
    pub const fn as_str(&self) -> &'static str {
        match self {
            ReinitReason::SessionNotFound => "session_not_found",
            ReinitReason::ResumeRejected(_) => "resume_rejected",
            ReinitReason::UnverifiableCleanEnd => "unverifiable_clean_end",
            ReinitReason::EventGap => "event_gap",
            ReinitReason::OrphanedResponse => "orphaned_response",
            ReinitReason::CapabilityMismatch => "capability_mismatch",
            ReinitReason::VersionRefused => "version_refused",
        }
    }

    /// The server's reason, for a rejected resume.
    pub fn rejection(&self) -> Option<&RejectReason> {
        match self {
            ReinitReason::ResumeRejected(reason) => Some(reason),
            _ => None,
        }
    }
}

impl ListenStopReason {
    /// The stable name.
    pub const fn as_str(self) -> &'static str {
        match self {
            ListenStopReason::GaveUp { .. } => "gave_up",
            ListenStopReason::Refused => "refused",
            ListenStopReason::Unauthorized => "unauthorized",
        }
    }
}

impl SessionEvent {
    /// The stable name of the event's kind.
    pub const fn kind(&self) -> &'static str {
        match self {
            SessionEvent::Connected { .. } => "connected",
            SessionEvent::Listening => "listening",
            SessionEvent::ListenStopped { .. } => "listen_stopped",
            SessionEvent::Resumed { .. } => "resumed",
            SessionEvent::ResumeRejected { .. } => "resume_rejected",
            SessionEvent::Reinitialized { .. } => "reinitialized",
            SessionEvent::Redispatched { .. } => "redispatched",
            SessionEvent::OutcomeUnknown { .. } => "outcome_unknown",
            SessionEvent::ContextMismatch { .. } => "context_mismatch",
            SessionEvent::ChecksDegraded { .. } => "checks_degraded",
            SessionEvent::EraDetected { .. } => "era_detected",
            SessionEvent::TaskCreated { .. } => "task_created",
            SessionEvent::TaskFinished { .. } => "task_finished",
            SessionEvent::SessionLost => "session_lost",
            SessionEvent::Closed => "closed",
        }
    }
}
