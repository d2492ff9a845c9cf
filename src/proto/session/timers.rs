//! The timer table: every deadline and backoff the session waits for, ordered by expiry, so
//! the next one is found without looking at the others (no per-poll scan of the calls).

use std::collections::BTreeSet;

use rustc_hash::FxHashMap;
use std::time::Instant;

use crate::proto::CallId;

/// What a timer is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Timer {
    /// The (re-)initialization's backoff ended: send `initialize`.
    InitBackoff,
    /// The handshake took too long.
    InitDeadline,
    /// Reopen the standalone stream.
    ListenBackoff,
    /// A call's backoff ended: re-send or resume it.
    CallBackoff(CallId),
    /// A call's deadline.
    CallDeadline(CallId),
}

/// Timers by expiry; each timer is armed at most once (arming again moves it).
#[derive(Debug, Default)]
pub(super) struct Timers {
    queue: BTreeSet<(Instant, Timer)>,
    armed: FxHashMap<Timer, Instant>,
}

impl Timers {
    /// Arms `timer` for `at`, replacing any earlier arming.
    pub(super) fn set(&mut self, timer: Timer, at: Instant) {
        if let Some(old) = self.armed.insert(timer, at) {
            self.queue.remove(&(old, timer));
        }
        self.queue.insert((at, timer));
    }

    /// Disarms `timer`, if armed.
    pub(super) fn cancel(&mut self, timer: Timer) {
        if let Some(old) = self.armed.remove(&timer) {
            self.queue.remove(&(old, timer));
        }
    }

    /// Whether `timer` is armed.
    pub(super) fn is_armed(&self, timer: Timer) -> bool {
        self.armed.contains_key(&timer)
    }

    /// The earliest expiry.
    pub(super) fn next(&self) -> Option<Instant> {
        self.queue.first().map(|(at, _)| *at)
    }

    /// Disarms and returns the earliest timer due at `now`.
    pub(super) fn pop_due(&mut self, now: Instant) -> Option<Timer> {
        let &(at, timer) = self.queue.first()?;
        if at > now {
            return None;
        }
        self.queue.pop_first();
        self.armed.remove(&timer);
        Some(timer)
    }

    /// Disarms everything.
    pub(super) fn clear(&mut self) {
        self.queue.clear();
        self.armed.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    #[allow(clippy::disallowed_methods)] // any instant will do as the test's origin of time
    fn ordered_by_expiry_and_rearmed_in_place() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut t = Timers::default();
        t.set(Timer::CallDeadline(CallId(1)), ms(30));
        t.set(Timer::ListenBackoff, ms(10));
        t.set(Timer::CallBackoff(CallId(2)), ms(20));
        t.set(Timer::ListenBackoff, ms(40));
        assert_eq!(t.next(), Some(ms(20)));
        assert_eq!(t.pop_due(ms(25)), Some(Timer::CallBackoff(CallId(2))));
        assert_eq!(t.pop_due(ms(25)), None);
        t.cancel(Timer::CallDeadline(CallId(1)));
        assert_eq!(t.next(), Some(ms(40)));
        assert_eq!(t.pop_due(ms(40)), Some(Timer::ListenBackoff));
        assert_eq!(t.next(), None);
    }
}
