//! The life of one idempotency key, as pure transitions: what every store implements (the
//! in-memory store calls these; the Redis store's Lua scripts are these, line for line).
//!
//! ```text
//!            claim (free)                 finish (holder)
//!   (none) ──────────────► Running ─────────────────────────► Done(answer)
//!      ▲                   │  │  lease lapsed, seen by a claim,        ▲
//!      │  release (holder) │  │  or mark_lost (holder)                 │ finish (holder):
//!      └───────────────────┘  └──────────────────────► Lost ───────────┘ the answer wins
//! ```
//!
//! A key is granted to one claim at a time; it is free again only when its holder releases
//! it (the call provably did not run). Once lost it is never granted again.

use std::time::{Duration, Instant};

use super::records::{Claim, ClaimOutcome, StoredOutcome};
use crate::ids::{ArgumentsDigest, ClaimToken};

/// Where one key stands.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyState {
    digest: ArgumentsDigest,
    holder: ClaimToken,
    phase: Phase,
}

#[derive(Debug, Clone, PartialEq)]
enum Phase {
    /// Held; the holder is alive while `now < until`.
    Running {
        until: Instant,
    },
    Done(StoredOutcome),
    Lost,
}

impl KeyState {
    /// Whether the key is held by a call that has not finished (the store keeps such keys
    /// for their lease, and lost or done ones for their retention).
    pub fn is_running(&self) -> bool {
        matches!(self.phase, Phase::Running { .. })
    }

    /// When a running key's lease ends (its holder is taken for dead after it); `None` for
    /// a key that is not running.
    pub fn lease_ends(&self) -> Option<Instant> {
        match self.phase {
            Phase::Running { until } => Some(until),
            _ => None,
        }
    }

    /// Bytes of the stored answer (0 until there is one): what a store bounds its memory by.
    pub fn answer_len(&self) -> usize {
        match &self.phase {
            Phase::Done(outcome) => outcome.response().len(),
            _ => 0,
        }
    }

    /// Whether the key's outcome is unknown for good.
    pub fn is_lost(&self) -> bool {
        matches!(self.phase, Phase::Lost)
    }
}

/// When a lease taken at `now` lapses: a lease no clock can add (`Duration::MAX`, for a key
/// never taken for lost; a store's own [`Claim`] may carry any) lapses a century on, for ever
/// in effect, instead of overflowing the clock.
fn lease_end(now: Instant, lease: Duration) -> Instant {
    now.checked_add(lease.min(LONGEST_LEASE)).unwrap_or(now)
}

/// The longest lease a key is dated by, a century: every claim and renewal dates its key a
/// lease from now, and a longer one than the clock can add would overflow it.
pub(crate) const LONGEST_LEASE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// A claim of the key whose state is `entry`, at `now`.
pub fn claim(entry: &mut Option<KeyState>, claim: &Claim, now: Instant) -> ClaimOutcome {
    let Some(state) = entry else {
        *entry = Some(KeyState {
            digest: claim.digest().clone(),
            holder: claim.token().clone(),
            phase: Phase::Running {
                until: lease_end(now, claim.lease()),
            },
        });
        return ClaimOutcome::Granted;
    };
    if let Phase::Running { until } = state.phase {
        if until <= now {
            // The holder stopped renewing: it is taken for dead, and what it did is unknown.
            state.phase = Phase::Lost;
        }
    }
    if state.digest != *claim.digest() {
        return ClaimOutcome::Mismatch;
    }
    match &state.phase {
        // Its own claim sent again (a client re-sending a command whose reply it did not get):
        // still its holder's.
        Phase::Running { .. } if state.holder == *claim.token() => ClaimOutcome::Granted,
        Phase::Running { .. } => ClaimOutcome::InUse,
        Phase::Done(outcome) => ClaimOutcome::Done(outcome.clone()),
        Phase::Lost => ClaimOutcome::Lost,
    }
}

/// The holder renews its lease; `false` when it no longer holds a running claim. A holder
/// whose key the store lost (a fail-over, a restart) claims it again with its own token and
/// digest: the claim grants a missing key, and leaves one another claim took, or one lost.
pub fn renew(
    entry: &mut Option<KeyState>,
    token: &ClaimToken,
    lease: Duration,
    now: Instant,
) -> bool {
    match entry {
        Some(KeyState {
            holder,
            phase: Phase::Running { until },
            ..
        }) if holder == token => {
            *until = lease_end(now, lease);
            true
        }
        _ => false,
    }
}

/// The holder stores the answer. A key already marked lost takes it too: the call ran
/// exactly once, and later claims may as well know how it ended. `false` when there is no
/// such key (the store lost it): nothing is stored, and the holder claims it again with its
/// own token and digest, then stores its answer (the call ran once, here).
pub fn finish(entry: &mut Option<KeyState>, token: &ClaimToken, outcome: StoredOutcome) -> bool {
    let Some(state) = entry else {
        return false;
    };
    if state.holder == *token && !matches!(state.phase, Phase::Done(_)) {
        state.phase = Phase::Done(outcome);
    }
    true
}

/// The holder frees the key: its call provably did not run.
pub fn release(entry: &mut Option<KeyState>, token: &ClaimToken) {
    if matches!(entry, Some(s) if s.holder == *token && s.is_running()) {
        *entry = None;
    }
}

/// The holder gives up: its call may have run, its answer cannot be stored.
pub fn mark_lost(entry: &mut Option<KeyState>, token: &ClaimToken) {
    if let Some(state) = entry {
        if state.holder == *token && state.is_running() {
            state.phase = Phase::Lost;
        }
    }
}
