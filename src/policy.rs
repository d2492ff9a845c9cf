//! Reconnect policy: exponential backoff with jitter, the server's `retry` as a floor.

use std::time::Duration;

/// Delays and caps for reconnecting (resumes, re-sends, re-initializations).
#[derive(Debug, Clone, PartialEq)]
pub struct ReconnectPolicy {
    /// First delay. Default: 100 ms.
    pub initial_delay: Duration,
    /// Growth factor per attempt. Default: 2.0.
    pub multiplier: f64,
    /// Largest delay before jitter. Default: 10 s.
    pub max_delay: Duration,
    /// Jitter added on top, as a fraction of the delay (0.0–1.0). Default: 0.2.
    pub jitter: f64,
    /// Consecutive failed attempts to reach the server (resume, re-send, connect) before the
    /// affected calls fail. Default: 8.
    pub max_attempts: u32,
    /// Resumes of one stream that deliver nothing new before it is treated as an unverifiable
    /// clean end. Default: 3.
    pub max_resumes_without_progress: u32,
    /// Consecutive failed re-initializations before every waiting call fails with
    /// `SessionLost`. Default: 5.
    pub max_reinit_failures: u32,
}

impl Default for ReconnectPolicy {
    fn default() -> Self {
        ReconnectPolicy {
            initial_delay: Duration::from_millis(100),
            multiplier: 2.0,
            max_delay: Duration::from_secs(10),
            jitter: 0.2,
            max_attempts: 8,
            max_resumes_without_progress: 3,
            max_reinit_failures: 5,
        }
    }
}
