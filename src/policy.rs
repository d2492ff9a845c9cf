//! Reconnect policy: exponential backoff with jitter, the server's `retry` as a floor.

use std::time::Duration;

/// Delays and caps for reconnecting (resumes, re-sends, re-initializations).
///
/// ```
/// use std::time::Duration;
/// use mcp_resume::ReconnectPolicy;
///
/// let policy = ReconnectPolicy::default()
///     .with_initial_delay(Duration::from_millis(50))
///     .with_max_attempts(5);
/// assert_eq!(policy.max_delay, Duration::from_secs(10));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ReconnectPolicy {
    /// First delay when the server named none (its `retry` takes this place). Default:
    /// 20 ms, so a cut stream is resumed about as fast as the network allows.
    pub initial_delay: Duration,
    /// Growth factor per attempt. Default: 2.0.
    pub multiplier: f64,
    /// Largest delay before jitter. Default: 10 s.
    pub max_delay: Duration,
    /// Jitter added on top, as a fraction of the delay (0.0–1.0). Default: 0.2.
    pub jitter: f64,
    /// Attempts to reach the server for one call or stream (its first send included) before
    /// it fails; progress starts the count over. Also bounds the re-sends of a call that
    /// keeps drawing "session gone": it then fails alone with `SessionLost`, other calls
    /// untouched. Default: 10 (about 20 s of backoff from the defaults).
    pub max_attempts: u32,
    /// Resumes of one stream that deliver nothing new before it is treated as an unverifiable
    /// clean end. Default: 3.
    pub max_resumes_without_progress: u32,
    /// Consecutive failed re-initializations after which, when no call is waiting, the client
    /// stops trying and reports `SessionEvent::SessionLost`; the next call reconnects, no
    /// sooner than the backoff reached. While a call waits, re-initialization keeps trying
    /// (backing off up to `max_delay`) and the call ends at its own deadline. Default: 5.
    pub max_reinit_failures: u32,
}

impl Default for ReconnectPolicy {
    fn default() -> Self {
        ReconnectPolicy {
            initial_delay: Duration::from_millis(20),
            multiplier: 2.0,
            max_delay: Duration::from_secs(10),
            jitter: 0.2,
            max_attempts: 10,
            max_resumes_without_progress: 3,
            max_reinit_failures: 5,
        }
    }
}

crate::setters::with_setters!(ReconnectPolicy {
    with_initial_delay => initial_delay: Duration,
    with_multiplier => multiplier: f64,
    with_max_delay => max_delay: Duration,
    with_jitter => jitter: f64,
    with_max_attempts => max_attempts: u32,
    with_max_resumes_without_progress => max_resumes_without_progress: u32,
    with_max_reinit_failures => max_reinit_failures: u32,
});

impl ReconnectPolicy {
    /// The delay before reconnect attempt `attempt` (0 for the first retry after a failure).
    ///
    /// `base = min(first * multiplier^attempt, max_delay)`, where `first` is the server's
    /// `retry` (`floor`) when it named one, else `initial_delay`: the first reconnect waits
    /// what the server asked, no more, and later ones grow from there. The server's `retry` is
    /// never undercut, even above `max_delay`, because reconnecting earlier than the server
    /// asked breaks the SSE contract. Jitter is added on top, as a fraction of `base` scaled
    /// by `random` (uniform over `u64`), which spreads a crowd of clients that failed
    /// together.
    ///
    /// Pure: the caller supplies the randomness, so the same inputs give the same delay.
    pub fn delay(&self, attempt: u32, random: u64, floor: Option<Duration>) -> Duration {
        let initial = floor.unwrap_or(self.initial_delay).as_secs_f64();
        let cap = self.max_delay.as_secs_f64().max(initial);
        let multiplier = if self.multiplier.is_finite() && self.multiplier >= 1.0 {
            self.multiplier
        } else {
            1.0
        };
        // powi saturates to +inf for large exponents; min() then brings it back to the cap.
        let exponent = i32::try_from(attempt).unwrap_or(i32::MAX);
        let base = (initial * multiplier.powi(exponent)).min(cap);
        let jitter = if self.jitter.is_finite() {
            self.jitter.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let fraction = (random >> 11) as f64 / (1u64 << 53) as f64;
        let base = Duration::try_from_secs_f64(base).unwrap_or(self.max_delay);
        let extra = Duration::try_from_secs_f64(base.as_secs_f64() * jitter * fraction)
            .unwrap_or(Duration::ZERO);
        base.max(floor.unwrap_or(Duration::ZERO))
            .saturating_add(extra)
    }

    /// Checks the policy for values that would make reconnection meaningless.
    pub fn validate(&self) -> Result<(), crate::Error> {
        let bad = |what: &str| {
            Err(crate::Error::new(
                crate::ErrorKind::InvalidConfig,
                format!("reconnect policy: {what}"),
            ))
        };
        if !(self.multiplier.is_finite() && self.multiplier >= 1.0) {
            return bad("multiplier must be a finite number >= 1.0");
        }
        if !(self.jitter.is_finite() && (0.0..=1.0).contains(&self.jitter)) {
            return bad("jitter must be within 0.0..=1.0");
        }
        if self.max_delay < self.initial_delay {
            return bad("max_delay must be >= initial_delay");
        }
        if self.max_attempts == 0 || self.max_reinit_failures == 0 {
            return bad("max_attempts and max_reinit_failures must be at least 1");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn exponential_then_capped() {
        let p = ReconnectPolicy {
            jitter: 0.0,
            ..ReconnectPolicy::default()
        };
        assert_eq!(p.delay(0, 0, None), ms(20));
        assert_eq!(p.delay(1, 0, None), ms(40));
        assert_eq!(p.delay(3, 0, None), ms(160));
        assert_eq!(p.delay(20, 0, None), Duration::from_secs(10));
        assert_eq!(p.delay(u32::MAX, u64::MAX, None), Duration::from_secs(10));
    }

    #[test]
    fn jitter_is_on_top_and_bounded() {
        let p = ReconnectPolicy {
            initial_delay: ms(100),
            ..ReconnectPolicy::default()
        };
        assert_eq!(p.delay(0, 0, None), ms(100));
        let top = p.delay(0, u64::MAX, None);
        assert!(top > ms(119) && top <= ms(120), "{top:?}");
        let mid = p.delay(1, u64::MAX / 2, None);
        assert!(mid > ms(219) && mid <= ms(220), "{mid:?}");
    }

    #[test]
    fn retry_is_a_floor_never_undercut() {
        let p = ReconnectPolicy::default();
        for r in [0, 1, u64::MAX / 3, u64::MAX] {
            assert!(p.delay(0, r, Some(ms(500))) >= ms(500));
            assert!(p.delay(0, r, Some(ms(500))) <= ms(600));
            assert!(p.delay(0, r, Some(Duration::from_secs(30))) >= Duration::from_secs(30));
        }
        // The server's time replaces the initial delay, and the backoff grows from it.
        let exact = ReconnectPolicy {
            jitter: 0.0,
            ..p.clone()
        };
        assert_eq!(exact.delay(0, 0, Some(ms(10))), ms(10));
        assert_eq!(exact.delay(2, 0, Some(ms(10))), ms(40));
        assert_eq!(exact.delay(0, 0, Some(ms(500))), ms(500));
    }

    #[test]
    fn odd_values_do_not_panic() {
        let p = ReconnectPolicy {
            multiplier: f64::NAN,
            jitter: f64::INFINITY,
            max_delay: Duration::ZERO,
            initial_delay: Duration::MAX,
            ..ReconnectPolicy::default()
        };
        let _ = p.delay(5, u64::MAX, Some(Duration::MAX));
        assert!(p.validate().is_err());
        assert!(ReconnectPolicy::default().validate().is_ok());
    }
}
