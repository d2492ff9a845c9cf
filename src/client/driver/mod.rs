//! The driver: the only place with I/O, clocks and spawning.
//!
//! The sans-IO [`Session`](crate::proto::Session) lives in a [`Core`], behind one lock that
//! everyone who touches it takes briefly (see [`core`]). A call performs its own first POST
//! in the caller's task and reports the exchange's head, data and end to the session as they
//! come, so an ordinary call costs no hand-off to another task; until that exchange ends the
//! caller polls only it and the call's guard, so the answer it applies does not wake its own
//! task through the reply. The session finishes every exchange of a call as soon as it has
//! served (the call completed, or moved on to its next round or to polling its task), so a
//! caller never reads a stream the server holds open after its answer.
//!
//! Two tasks do the rest, on the runtime of the first call:
//! - the **timer** keeps the one timer armed for the session's next deadline (calls,
//!   backoffs, idle calls, the shutdown's bound) and fires it. It runs no token provider,
//!   task store or handler, so such code that blocks cannot delay a deadline: a call awaited
//!   on this runtime needs no timer of its own. It does log (`tracing` events, some under the
//!   session's lock): a subscriber that blocks delays every deadline, and one that panics
//!   stops the client as any panic under the lock does (the session's state cannot be
//!   trusted after it), so subscribers that write to a pipe belong behind a non-blocking
//!   writer. With telemetry it also ends the spans of the calls it ends (a deadline, an
//!   allowed silence), under the session's lock, where the application's span processors
//!   run: one that exports as each span ends (the SDK's simple processor) delays every
//!   deadline by its export;
//! - the **exchange runner** polls every other exchange (the handshake, resumes, re-sends,
//!   the standalone stream, notifications, answers to the server) side by side in a
//!   `FuturesUnordered` (no task per request), so a slow stream never blocks another, and
//!   carries out the effects the timer left it. A token provider runs here for those
//!   exchanges, under `catch_unwind`: a panic fails the exchange, never the client.
//!
//! Exchanges report under the lock, but decode what they read before taking it: no queue
//! between the network and the session, memory bounded however fast a server sends, and the
//! lock held for the session's bookkeeping only. What an input leads to outside the session
//! (results to callers, the task store, handlers) is carried out after the lock is released
//! ([`effects`]). Server-request handlers run in tasks of their own on the driver's runtime
//! ([`dispatch`]).

mod contained;
mod core;
mod dispatch;
mod effects;
mod ledger;
mod state;

use std::sync::Arc;

use futures::future::{Abortable, BoxFuture};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::time::Instant;
use tracing::Instrument;

pub(crate) use self::contained::Contained;
pub(crate) use self::core::{Core, Inline};
pub(crate) use self::ledger::{Records, Scope, Writer};
pub(crate) use self::state::{Command, Parts, Registration};
use super::http::redacted_url;

/// A driver not yet spawned: the client starts it on the first call that needs it.
pub(crate) struct Driver {
    core: Arc<Core>,
}

/// Stops the client when a driver task ends or is dropped (its runtime shut down, even
/// before it was ever polled): waiting calls fail with `Closed` instead of waiting for a timer
/// that will never fire.
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

    /// Spawns the driver's two tasks on `handle`'s runtime.
    pub(crate) fn spawn(self, handle: &tokio::runtime::Handle) {
        let core = self.core;
        core.set_driver_runtime(handle.clone());
        // Made here, not inside the tasks: a task dropped before its first poll drops its
        // guard too.
        let timer = keep_time(core.clone(), StopOnDrop(core.clone()));
        let runner = run_exchanges(core.clone(), StopOnDrop(core.clone()));
        // Only scheme, host, port and path: a query string may carry credentials.
        let endpoint = redacted_url(core.endpoint.url.as_str());
        let span = tracing::info_span!("mcp_client", %endpoint);
        // Entering a span on every poll costs even when nothing listens: only when enabled.
        if let Some(writer) = &core.writer {
            // Ledger writes that wait on I/O finish here; it ends once the client has stopped
            // and nothing is left to write.
            handle.spawn(writer.clone().run());
        }
        if span.is_disabled() {
            handle.spawn(timer);
            handle.spawn(runner);
        } else {
            handle.spawn(timer.instrument(span.clone()));
            handle.spawn(runner.instrument(span));
        }
    }
}

/// The timer task: fires the session's deadlines. It runs no handler, token provider or task
/// store (only the `tracing` subscriber, for what it logs, and with telemetry the span
/// processors of the calls it ends).
async fn keep_time(core: Arc<Core>, _stop: StopOnDrop) {
    tracing::debug!("driver started");
    let timer = tokio::time::sleep_until(Instant::now());
    tokio::pin!(timer);
    let mut timer_at: Option<Instant> = None;
    loop {
        let deadline = {
            let Ok(mut state) = core.lock() else {
                break;
            };
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
            () = core.timer_woken() => {}
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

/// The exchange runner: performs the exchanges no caller performs, and the effects the
/// timer left it (before the exchanges queued with them: a task is recorded before its
/// first poll is sent).
async fn run_exchanges(core: Arc<Core>, _stop: StopOnDrop) {
    let mut running: FuturesUnordered<Abortable<BoxFuture<'static, ()>>> = FuturesUnordered::new();
    loop {
        let Some((effects, starts)) = core.take_runner_work() else {
            break;
        };
        effects.run(core.driver_runtime());
        for pending in starts {
            let sink = core.clone();
            let exchange = async move { sink.exchange(pending.outgoing, pending.gate).await };
            running.push(Abortable::new(exchange.boxed(), pending.registration));
        }
        tokio::select! {
            () = core.runner_woken() => {}
            Some(_) = running.next(), if !running.is_empty() => {}
        }
    }
}
