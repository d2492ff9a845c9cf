//! Resume authorization: the incident report's `authorize_resume`, as one pure function.
//!
//! A replay from `Last-Event-ID` is allowed only if this instance can prove, before the
//! first replayed byte: it holds the session's record and owns the stream; the log is gap-free from the cursor to
//! the head; every request whose answer may still be replayed is resolvable; the capability
//! hash in force is the one the stream was opened under. The first check that fails names
//! the rejection.

use std::fmt;

use crate::ids::CapabilityHash;

/// Why a resume was refused: the `reason` of the `SESSION_RESUME_REJECTED` body and the
/// `Mcp-Resume-Rejected` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RejectReason {
    /// No session record for the presented `Mcp-Session-Id`.
    UnknownSession,
    /// The session is owned by another instance, which alone holds its streams.
    NotOwner,
    /// Continuity from the cursor to the head cannot be proven (unknown stream, cursor
    /// beyond what was issued, positions forgotten: past the log's bounds, or before an event
    /// whose inner id was empty, which the inner server gave no resume point; or the stream
    /// passed something that could not be numbered).
    EventGap,
    /// A request whose answer the replay would owe cannot be resolved any more.
    OrphanedRequest,
    /// The context in force is not the one the stream was opened under.
    CapabilityMismatch,
}

impl RejectReason {
    /// The wire name (`unknown_session`, `not_owner`, `event_gap`, `orphaned_request`,
    /// `capability_mismatch`).
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::UnknownSession => "unknown_session",
            RejectReason::NotOwner => "not_owner",
            RejectReason::EventGap => "event_gap",
            RejectReason::OrphanedRequest => "orphaned_request",
            RejectReason::CapabilityMismatch => "capability_mismatch",
        }
    }
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the `Last-Event-ID` says, when it is an id a guard of this deployment issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CursorFacts {
    /// The last position the client has seen.
    pub seq: u64,
    /// The stream was opened by this instance (its id names the instance that numbered it):
    /// only that instance holds what the stream depends on (the inner server's replay, the
    /// requests answered on it).
    pub owned_here: bool,
}

/// What this instance's ledger says about the stream the cursor names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamFacts {
    /// The stream belongs to the presented session.
    pub of_session: bool,
    /// The last position issued on it.
    pub head: u64,
    /// The earliest position whose inner event id is still known (one past `head` when none
    /// is: every position was forgotten, as before an event whose inner id was empty).
    pub earliest: u64,
    /// The stream passed something that could not be numbered.
    pub broken: bool,
    /// A request on it was lost before its answer.
    pub orphans: bool,
    /// The capability hash in force when the stream was opened.
    pub hash: CapabilityHash,
}

/// Everything a resume is judged on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumeFacts {
    /// The capability hash of the session's record (cache or store), when there is one.
    pub session: Option<CapabilityHash>,
    /// The cursor, when it is an id a guard issued.
    pub cursor: Option<CursorFacts>,
    /// The cursor's stream, when this instance's ledger still holds it.
    pub stream: Option<StreamFacts>,
}

/// The seed's `authorize_resume`: `Ok` only when all four conditions hold, else the first
/// failed one, in the report's order.
///
/// Ownership is judged per stream: a session's record (its negotiated context) may be
/// shared by every instance, as with servers that restore sessions from a shared store,
/// but a stream's continuation (the inner server's replay cache, the requests answered on
/// it) lives only on the instance that served the request which opened it.
pub fn authorize_resume(facts: &ResumeFacts) -> Result<(), RejectReason> {
    let Some(session_hash) = &facts.session else {
        return Err(RejectReason::UnknownSession);
    };
    let Some(cursor) = facts.cursor else {
        // A cursor no guard issued: nothing proves what came after it.
        return Err(RejectReason::EventGap);
    };
    if !cursor.owned_here {
        return Err(RejectReason::NotOwner);
    }
    let Some(stream) = &facts.stream else {
        // Opened here, but no longer held (forgotten, or from before a restart under the same
        // instance name).
        return Err(RejectReason::EventGap);
    };
    if !stream.of_session || stream.broken || cursor.seq > stream.head {
        return Err(RejectReason::EventGap);
    }
    // The inner ids of positions cursor..=head must all still be known: the cursor's own
    // (to ask the inner server for what follows it) and every one after it (to check the
    // replay event by event). Positions start at 1: a cursor 0 was never issued.
    if cursor.seq < stream.earliest.max(1) {
        return Err(RejectReason::EventGap);
    }
    if stream.orphans {
        return Err(RejectReason::OrphanedRequest);
    }
    if stream.hash != *session_hash {
        return Err(RejectReason::CapabilityMismatch);
    }
    Ok(())
}
