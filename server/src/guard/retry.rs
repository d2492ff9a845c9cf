//! When to try again a store operation that failed and that no watch waits on.

use std::time::{Duration, Instant};

use super::StoreOp;

/// The first wait before a failed release is tried again; it doubles on each failure, up to
/// [`RETRY_UP_TO`].
const RETRY_FROM: Duration = Duration::from_millis(50);

/// The longest wait between two tries.
const RETRY_UP_TO: Duration = Duration::from_secs(1);

/// How long a failed release is tried again at least. Past the key's lease the next claim
/// reads it as lost, which a release no longer undoes; until a claim comes, the release
/// still frees it: tried for a lease when that is longer.
const RETRY_FOR: Duration = Duration::from_secs(60);

/// How many times a keyed call's answer is stored again after storing it failed.
const FINISH_RETRIES: u32 = 5;

/// The wait before the first new attempt to store an answer; each next one waits twice as
/// long.
const FINISH_RETRY_FROM: Duration = Duration::from_millis(100);

/// A store operation that failed, to be tried again.
///
/// A keyed call's stored answer is tried again by its [`Watch`](super::Watch), which renews
/// the lease meanwhile. A release has no watch: it follows a refusal (the claim's answer was
/// lost, the client left mid-claim) or a keyed call its server refused before running it. A claim
/// may have landed although its answer never came (the store went away mid-command, and was
/// still away for the release): left held by nobody, the key reads as in use to the call's
/// re-send, then, past its lease, as of unknown outcome for as long as the store keeps lost
/// keys, for a call that never ran. So a failed release is tried again until the store takes
/// it. A release frees only a running key held by its own token: trying it again never
/// touches another claim's key.
///
/// Created by [`Retry::after_failure`]; run [`Retry::op`] at [`Retry::poll_timeout`], then
/// report a failure with [`Retry::handle_failed`] (a success ends it).
#[derive(Debug, Clone)]
pub struct Retry {
    op: StoreOp,
    at: Instant,
    wait: Duration,
    until: Instant,
}

impl Retry {
    /// The most failed operations a guard tries again at once (each a task of its skin's,
    /// and a store command every second or so); one past it is left, so that a long outage
    /// under steady traffic costs bounded memory and store load.
    pub const MOST_AT_ONCE: usize = 1_000;

    /// `op` failed at `now`: `Some` when it is worth trying again (a release), given the
    /// guard's claim `lease`.
    pub fn after_failure(op: &StoreOp, now: Instant, lease: Duration) -> Option<Self> {
        if !matches!(op, StoreOp::Release { .. }) {
            return None;
        }
        Some(Self {
            op: op.clone(),
            at: now + RETRY_FROM,
            wait: RETRY_FROM,
            until: now + lease.max(RETRY_FOR),
        })
    }

    /// How long a keyed call's answer whose storing failed waits before it is stored again,
    /// after `failures` earlier failures (0 for the first), given its claim's `lease`: from
    /// 100 ms, doubling, at most a third of the lease (the lease is renewed meanwhile);
    /// `None` after five tries: given up, the key is left to be taken for lost.
    pub fn finish_wait(failures: u32, lease: Duration) -> Option<Duration> {
        (failures < FINISH_RETRIES).then(|| (FINISH_RETRY_FROM * 2u32.pow(failures)).min(lease / 3))
    }

    /// The operation to run again.
    pub fn op(&self) -> &StoreOp {
        &self.op
    }

    /// When to run it.
    pub fn poll_timeout(&self) -> Instant {
        self.at
    }

    /// The try failed again at `now`: the next one (`None`: given up).
    pub fn handle_failed(mut self, now: Instant) -> Option<Self> {
        if now >= self.until {
            return None;
        }
        self.wait = (self.wait * 2).min(RETRY_UP_TO);
        self.at = now + self.wait;
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{ClaimToken, IdempotencyKey};

    /// A test's own start of time.
    #[allow(clippy::disallowed_methods)]
    fn t0() -> Instant {
        Instant::now()
    }

    fn release() -> StoreOp {
        StoreOp::Release {
            key: IdempotencyKey::new("k").unwrap(),
            token: ClaimToken::from_stored("t"),
        }
    }

    #[test]
    fn only_a_release_is_tried_again() {
        let now = t0();
        let lease = Duration::from_secs(10);
        assert!(Retry::after_failure(&release(), now, lease).is_some());
        let others = [
            StoreOp::MarkLost {
                key: IdempotencyKey::new("k").unwrap(),
                token: ClaimToken::from_stored("t"),
            },
            StoreOp::ForgetSession(crate::ids::SessionId::parse(b"s").unwrap()),
        ];
        for op in others {
            assert!(Retry::after_failure(&op, now, lease).is_none(), "{op:?}");
        }
    }

    #[test]
    fn an_answer_is_stored_again_five_times_doubling_within_a_third_of_the_lease() {
        let long = Duration::from_secs(10);
        // | failures so far | lease | wait before the next try (ms), or given up |
        let rows = [
            (0, long, Some(100)),
            (1, long, Some(200)),
            (2, long, Some(400)),
            (3, long, Some(800)),
            (4, long, Some(1600)),
            (5, long, None),
            (2, Duration::from_millis(600), Some(200)),
            (4, Duration::MAX, Some(1600)),
        ];
        for (failures, lease, wait) in rows {
            assert_eq!(
                Retry::finish_wait(failures, lease),
                wait.map(Duration::from_millis),
                "{failures} failures, lease {lease:?}"
            );
        }
    }

    #[test]
    fn waits_double_up_to_a_second_until_given_up() {
        // | failures | wait before the next try |
        let rows = [
            (0, 50),
            (1, 100),
            (2, 200),
            (3, 400),
            (4, 800),
            (5, 1000),
            (6, 1000),
        ];
        let start = t0();
        let mut retry = Retry::after_failure(&release(), start, Duration::from_secs(10)).unwrap();
        let mut now = start;
        for (failures, wait_ms) in rows {
            assert_eq!(
                retry.poll_timeout() - now,
                Duration::from_millis(wait_ms),
                "after {failures} failures"
            );
            now = retry.poll_timeout();
            retry = retry.handle_failed(now).unwrap();
        }
        assert_eq!(retry.op(), &release());
    }

    #[test]
    fn it_is_given_up_after_a_minute_or_a_lease_if_longer() {
        // | lease | still tried at (s) | given up at (s) |
        let rows = [(10, 59, 60), (30, 59, 60), (120, 119, 120)];
        for (lease, tried, given_up) in rows {
            let start = t0();
            let lease = Duration::from_secs(lease);
            let retry = Retry::after_failure(&release(), start, lease).unwrap();
            let at = |s| start + Duration::from_secs(s);
            assert!(
                retry.clone().handle_failed(at(tried)).is_some(),
                "{lease:?}"
            );
            assert!(retry.handle_failed(at(given_up)).is_none(), "{lease:?}");
        }
    }
}
