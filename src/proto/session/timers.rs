//! The timer table: every deadline and backoff the session waits for, ordered by expiry, so
//! the next one is found without looking at the others (no per-poll scan of the calls).
//! `handle_timeout` (in `outbound`) fires them as they come due.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

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
///
/// Every call arms a deadline and nearly every one disarms it soon after, so disarming is
/// made cheap: the entry stays in the heap, no longer matching `armed`, until it reaches
/// the top, where it is dropped. The top is always an armed timer, and stale entries are
/// swept out when they come to outnumber the armed ones.
#[derive(Debug, Default)]
pub(super) struct Timers {
    queue: BinaryHeap<Reverse<(Instant, Timer)>>,
    armed: FxHashMap<Timer, Instant>,
}

impl Timers {
    /// Arms `timer` for `at`, replacing any earlier arming.
    pub(super) fn set(&mut self, timer: Timer, at: Instant) {
        match self.armed.insert(timer, at) {
            Some(old) if old == at => {}
            Some(_) => {
                self.queue.push(Reverse((at, timer)));
                self.settle();
            }
            None => self.queue.push(Reverse((at, timer))),
        }
    }

    /// Disarms `timer`, if armed.
    pub(super) fn cancel(&mut self, timer: Timer) {
        if self.armed.remove(&timer).is_some() {
            self.settle();
        }
    }

    /// Whether `timer` is armed.
    pub(super) fn is_armed(&self, timer: Timer) -> bool {
        self.armed.contains_key(&timer)
    }

    /// The earliest expiry.
    pub(super) fn next(&self) -> Option<Instant> {
        self.queue.peek().map(|Reverse((at, _))| *at)
    }

    /// Disarms and returns the earliest timer due at `now`.
    pub(super) fn pop_due(&mut self, now: Instant) -> Option<Timer> {
        let &Reverse((at, timer)) = self.queue.peek()?;
        if at > now {
            return None;
        }
        self.queue.pop();
        self.armed.remove(&timer);
        self.settle();
        Some(timer)
    }

    /// Disarms everything.
    pub(super) fn clear(&mut self) {
        self.queue.clear();
        self.armed.clear();
    }

    /// Restores the invariants: the top is armed, and stale entries stay a bounded share.
    fn settle(&mut self) {
        while let Some(&Reverse((at, timer))) = self.queue.peek() {
            if self.armed.get(&timer) == Some(&at) {
                break;
            }
            self.queue.pop();
        }
        if self.queue.len() > 2 * self.armed.len() + 64 {
            self.queue = self
                .armed
                .iter()
                .map(|(&timer, &at)| Reverse((at, timer)))
                .collect();
        }
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

    #[test]
    #[allow(clippy::disallowed_methods)] // any instant will do as the test's origin of time
    fn disarmed_and_moved_timers_never_fire_and_do_not_pile_up() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut t = Timers::default();
        // A long call holds the earliest place while thousands of others come and go.
        t.set(Timer::CallDeadline(CallId(0)), ms(1));
        for i in 1..5000 {
            t.set(Timer::CallDeadline(CallId(i)), ms(10 + i));
            t.set(Timer::CallDeadline(CallId(i)), ms(20 + i));
            t.set(Timer::CallDeadline(CallId(i)), ms(20 + i));
            t.cancel(Timer::CallDeadline(CallId(i)));
            assert!(
                t.queue.len() <= 2 * t.armed.len() + 65,
                "stale entries pile up"
            );
        }
        t.set(Timer::CallBackoff(CallId(7)), ms(3));
        t.set(Timer::InitBackoff, ms(3));
        assert_eq!(t.next(), Some(ms(1)));
        let mut fired = Vec::new();
        while let Some(timer) = t.pop_due(ms(100_000)) {
            fired.push(timer);
        }
        assert_eq!(
            fired,
            [
                Timer::CallDeadline(CallId(0)),
                Timer::InitBackoff,
                Timer::CallBackoff(CallId(7)),
            ]
        );
        assert_eq!(t.next(), None);
    }
}
