//! The driver: the only place with I/O, clocks and spawning.
//!
//! The sans-IO [`Session`](crate::proto::Session) lives in a [`Core`], behind one lock that
//! everyone who touches it takes briefly (see [`core`]). A call performs its own first POST
//! in the caller's task and reports the exchange's head, data and end to the session as they
//! come, so an ordinary call costs no hand-off to another task; until that exchange ends the
//! caller polls only it and the call's guard, so the answer it applies does not wake its own
//! task through the reply. Everything else belongs to the driver task: it keeps the one timer
//! armed for the session's next deadline and polls every other exchange (the handshake,
//! resumes, re-sends, the standalone stream, notifications, answers to the server), side by
//! side in a `FuturesUnordered` (no task per request), so a slow stream never blocks another.
//! Exchanges report synchronously, under the lock: no queue between the network and the
//! session, and memory stays bounded however fast a server sends. A body that arrived whole
//! with its head is decoded before the lock is taken
//! ([`DecodedBody`](crate::proto::DecodedBody)), so the lock covers the session's bookkeeping
//! only. Only server-request handlers run in tasks of their own.

mod core;
mod state;

use std::sync::Arc;

use futures::future::{Abortable, BoxFuture};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::time::Instant;
use tracing::Instrument;

pub(crate) use self::core::{Core, Inline};
pub(crate) use self::state::{Command, Parts, Registration};
use super::http::redacted_url;

/// A driver not yet spawned: the client starts it on the first call that needs it.
pub(crate) struct Driver {
    core: Arc<Core>,
}

/// Stops the client when the driver's future ends or is dropped (its runtime shut down):
/// waiting calls fail with `Closed` instead of waiting for a timer that will never fire.
struct StopOnDrop(Arc<Core>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop();
    }
}

impl Driver {
    pub(crate) fn new(core: Arc<Core>) -> Self {
        Driver { core }
    }

    /// Spawns the driver task on `handle`'s runtime.
    pub(crate) fn spawn(self, handle: &tokio::runtime::Handle) {
        self.core.set_driver_runtime(handle.id());
        // Only scheme, host, port and path: a query string may carry credentials.
        let endpoint = redacted_url(self.core.endpoint.url.as_str());
        let span = tracing::info_span!("mcp_client", %endpoint);
        // Entering a span on every poll costs even when nothing listens: only when enabled.
        if span.is_disabled() {
            handle.spawn(self.run());
        } else {
            handle.spawn(self.run().instrument(span));
        }
    }

    async fn run(self) {
        tracing::debug!("driver started");
        let core = self.core;
        let _stop = StopOnDrop(core.clone());
        let mut running: FuturesUnordered<Abortable<BoxFuture<'static, ()>>> =
            FuturesUnordered::new();
        let timer = tokio::time::sleep_until(Instant::now());
        tokio::pin!(timer);
        let mut timer_at: Option<Instant> = None;
        loop {
            let deadline = {
                let Ok(mut state) = core.lock() else {
                    break;
                };
                for pending in state.to_start.drain(..) {
                    let sink = core.clone();
                    let exchange = async move { sink.endpoint.run(pending.request, &sink).await };
                    running.push(Abortable::new(exchange.boxed(), pending.registration));
                }
                if state.may_stop() {
                    break;
                }
                let deadline = state.next_deadline();
                state.armed = deadline;
                deadline
            };
            if let Some(deadline) = deadline.filter(|d| timer_at != Some(*d)) {
                // Re-arming costs a trip through the timer wheel: only when the time moved.
                timer.as_mut().reset(deadline);
                timer_at = Some(deadline);
            }
            tokio::select! {
                () = core.woken() => {}
                Some(_) = running.next(), if !running.is_empty() => {}
                () = &mut timer, if deadline.is_some() => {
                    // The timer fired for `deadline`: whatever is due then fires, even if the
                    // clock reads a hair earlier.
                    let fired = deadline.map_or_else(Instant::now, |d| d.max(Instant::now()));
                    timer_at = None;
                    core.timeout(fired);
                }
            }
        }
        // `_stop` aborts what still runs and fails what still waits.
        tracing::debug!("driver stopped");
    }
}
