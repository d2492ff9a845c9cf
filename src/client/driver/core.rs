//! [`Core`]: the [`State`] behind its lock, and the one way in for everyone who touches it
//! (the client's methods, call handles, exchanges wherever they run, handlers' answers).
//!
//! Each entry takes the lock, hands its input to the state (which pumps the session),
//! releases it, and then carries out what the input led to ([`Effects`]): the lock covers
//! bookkeeping only. It wakes a driver task only when the state says that task has something
//! new to do: the timer for a deadline earlier than its own, the exchange runner for an
//! exchange to start. A call whose POST goes out at once and ends with its answer never
//! involves either.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use serde_json::Value;
use tokio::sync::Notify;

use super::contained::Contained;
use super::effects::Effects;
use super::ledger::{Gate, Writer};
use super::state::{Command, Parts, Pending, Registration, State};
use crate::client::http::{Endpoint, ExchangeEvent, ExchangeSink, Outgoing};
use crate::error::{Error, ErrorKind, RpcError};
use crate::ids::RequestId;
use crate::proto::{CallId, HttpId, TransportFailure};

/// The shared session of one client.
pub(crate) struct Core {
    state: Mutex<State>,
    /// Wake the timer task and the exchange runner (a stored permit if busy: nothing is
    /// lost).
    wake_timer: Notify,
    wake_runner: Notify,
    pub(crate) endpoint: Arc<Endpoint>,
    /// The runtime the driver's tasks were spawned on, once they were; handlers run there.
    driver_runtime: OnceLock<tokio::runtime::Handle>,
    /// The ledger's writer, when the client keeps one.
    pub(crate) writer: Option<Arc<Writer>>,
}

fn stopped() -> Error {
    Error::new(ErrorKind::Closed, "the client's driver has stopped")
}

impl Core {
    pub(crate) fn new(parts: Parts) -> Arc<Self> {
        let endpoint = parts.endpoint.clone();
        let writer = parts.records.as_ref().map(|r| r.writer().clone());
        Arc::new_cyclic(|core| Core {
            state: Mutex::new(State::new(parts, core.clone())),
            wake_timer: Notify::new(),
            wake_runner: Notify::new(),
            endpoint,
            driver_runtime: OnceLock::new(),
            writer,
        })
    }

    /// The state, unless the client has stopped. A panic while the lock was held leaves the
    /// session in an unknown state: the client stops then (every waiting call fails with
    /// [`ErrorKind::Closed`]) rather than go on from it.
    pub(super) fn lock(&self) -> Result<MutexGuard<'_, State>, Error> {
        let state = match self.state.lock() {
            Ok(state) => state,
            Err(poisoned) => {
                let mut state = poisoned.into_inner();
                if !state.is_stopped() {
                    tracing::error!(
                        "a panic interrupted the session's bookkeeping: client stopped"
                    );
                    state.stop();
                }
                self.wake_both();
                return Err(stopped());
            }
        };
        if state.is_stopped() {
            return Err(stopped());
        }
        Ok(state)
    }

    /// Releases the lock, waking a driver task if it has something new to do.
    fn release(&self, state: MutexGuard<'_, State>) {
        let (timer, runner) = (state.timer_needed(), state.runner_needed());
        drop(state);
        if timer {
            self.wake_timer.notify_one();
        }
        if runner {
            self.wake_runner.notify_one();
        }
    }

    fn wake_both(&self) {
        self.wake_timer.notify_one();
        self.wake_runner.notify_one();
    }

    /// Runs `f` on the state (each of the state's entries pumps what it changed), releases
    /// it, then carries out the effects.
    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> Result<T, Error> {
        let mut state = self.lock()?;
        let out = f(&mut state);
        let effects = state.take_effects();
        self.release(state);
        if !effects.is_empty() {
            effects.run(self.driver_runtime.get());
        }
        Ok(out)
    }

    /// Hands a command to the session.
    pub(crate) fn command(&self, command: Command) -> Result<(), Error> {
        self.with(|state| {
            state.handle_command(command);
            state.pump();
        })
    }

    /// Registers a call; returns, when `inline`, its first POST if the caller may perform it
    /// itself (the session sent it at once); else the driver performs it.
    pub(crate) fn register(
        &self,
        registration: Registration,
        inline: bool,
    ) -> Result<Option<Inline>, Error> {
        self.with(|state| state.register(registration, inline))
            .map(|pending| pending.map(|pending| Inline { pending }))
    }

    /// Registers a call picked up from a ledger entry, unless that entry is one of this
    /// client's calls in flight already, or one that just ended (`false` then: nothing is
    /// registered).
    pub(crate) fn register_pick_up(&self, registration: Registration) -> Result<bool, Error> {
        self.with(|state| {
            if let Registration::PickUp { entry, .. } = &registration {
                if state.holds_entry(entry.id()) {
                    return false;
                }
            }
            state.register(registration, false);
            true
        })
    }

    /// A server-request handler's answer to the request it was handed as `delivery`.
    pub(super) fn answer(
        &self,
        id: RequestId,
        delivery: u64,
        result: Option<Result<Value, RpcError>>,
    ) {
        let _ = self.with(|state| state.handle_answer(id, delivery, result));
    }

    /// The driver's timer fired for `fired`. The timer task runs no application code:
    /// effects that would (a task store's) go to the exchange runner, ledger writes to the
    /// writer task (so a result the timer settles, a timeout, reaches its caller at once).
    pub(super) fn timeout(&self, fired: tokio::time::Instant) {
        let Ok(mut state) = self.lock() else {
            return;
        };
        state.handle_timeout(fired);
        let mut effects = state.take_effects();
        let ledger = effects.take_ledger();
        let effects = if effects.runs_application_code() {
            state.deferred.append(effects);
            Effects::default()
        } else {
            effects
        };
        self.release(state);
        effects.run(self.driver_runtime.get());
        if let Some(writer) = ledger {
            writer.nudge();
        }
    }

    /// The effects the timer left for the exchange runner, and the exchanges to start;
    /// `None` once the runner is to stop.
    pub(super) fn take_runner_work(&self) -> Option<(Effects, Vec<Pending>)> {
        let mut state = self.lock().ok()?;
        if state.may_stop() {
            return None;
        }
        let effects = std::mem::take(&mut state.deferred);
        let starts = std::mem::take(&mut state.to_start);
        Some((effects, starts))
    }

    /// Stops the client for good (a driver task ended, or is being dropped with its
    /// runtime): what the stop leads to is carried out without the lock.
    pub(super) fn stop(&self) {
        let mut state = match self.state.lock() {
            Ok(state) => state,
            Err(poisoned) => poisoned.into_inner(),
        };
        state.stop();
        let mut effects = std::mem::take(&mut state.deferred);
        effects.append(state.take_effects());
        drop(state);
        self.wake_both();
        effects.run(self.driver_runtime.get());
        if let Some(writer) = &self.writer {
            writer.close();
        }
        self.endpoint.close_auth();
    }

    /// Holds exchange `id` (a call's POST) until the ledger write before it has finished;
    /// `false` when that write failed: the POST is not sent, and the session hears of it as
    /// of a connection that could not be made, or (the entry is longer than the ledger
    /// stores) the call ends.
    pub(crate) async fn pass_gate(self: &Arc<Self>, id: HttpId, gate: &Gate) -> bool {
        if let Some(writer) = &self.writer {
            writer.kick();
        }
        match gate.wait().await {
            Ok(()) => true,
            Err(refusal) => {
                let _ = self.with(|state| state.ledger_refused(id, refusal));
                false
            }
        }
    }

    /// Records the runtime the driver's tasks run on.
    pub(super) fn set_driver_runtime(&self, runtime: tokio::runtime::Handle) {
        let _ = self.driver_runtime.set(runtime);
    }

    /// The runtime the driver's tasks run on, once they were spawned.
    pub(super) fn driver_runtime(&self) -> Option<&tokio::runtime::Handle> {
        self.driver_runtime.get()
    }

    /// Whether the task polling now runs on the driver's runtime. Such a task is polled only
    /// while that runtime runs, and then so is the timer task, which keeps the session's
    /// deadlines and runs no application code: a call's own guard has nothing to add there.
    pub(crate) fn on_driver_runtime(&self) -> bool {
        match (
            self.driver_runtime.get(),
            tokio::runtime::Handle::try_current(),
        ) {
            (Some(driver), Ok(current)) => current.id() == driver.id(),
            _ => false,
        }
    }

    /// The end of `call`'s allowed silence, when it resets its timeout on progress and is
    /// still waiting.
    pub(crate) fn idle_end(&self, call: CallId) -> Option<tokio::time::Instant> {
        self.lock().ok()?.idle_end(call)
    }

    /// Performs one exchange once its gate (the ledger's record of the call) is passed, in
    /// whichever task runs it: the runner's, or a caller's own for its call's first POST.
    /// A panic in what it runs (a token provider's code, the application's HTTP client)
    /// fails that exchange, never the task running it and with it the caller or the client.
    /// One as the exchange is dropped unfinished (its call's deadline, a cancellation) is
    /// logged and costs nothing else.
    pub(super) async fn exchange(self: &Arc<Self>, outgoing: Outgoing, gate: Option<Arc<Gate>>) {
        let id = outgoing.request.id;
        if let Some(gate) = &gate {
            if !self.pass_gate(id, gate).await {
                return;
            }
        }
        let performed = std::pin::pin!(Some(self.endpoint.run(outgoing, self)));
        if Contained::new(performed, "an exchange").await.is_err() {
            self.panicked(id);
        }
    }

    /// An exchange panicked: it failed, as if its connection broke (it may have been sent).
    fn panicked(self: &Arc<Self>, id: HttpId) {
        tracing::error!(http = id.0, "an exchange panicked");
        let failure = TransportFailure::Lost("the exchange panicked".to_owned());
        self.report_one(ExchangeEvent::Failed { id, failure });
    }

    /// Waits until the timer task is woken.
    pub(super) async fn timer_woken(&self) {
        self.wake_timer.notified().await;
    }

    /// Waits until the exchange runner is woken.
    pub(super) async fn runner_woken(&self) {
        self.wake_runner.notified().await;
    }
}

impl ExchangeSink for Arc<Core> {
    fn report(&self, events: &mut Vec<ExchangeEvent>) -> bool {
        let ending = events.iter().find_map(|event| match event {
            ExchangeEvent::End { id }
            | ExchangeEvent::Json { id, .. }
            | ExchangeEvent::Failed { id, .. } => Some(*id),
            _ => None,
        });
        let reported = self.with(|state| {
            state.ending = ending;
            let mut wanted = true;
            for event in events.drain(..) {
                wanted = state.handle_exchange(event);
                if !wanted {
                    break;
                }
            }
            state.ending = None;
            wanted
        });
        events.clear();
        reported.unwrap_or(false)
    }
}

/// A call's first POST, to be performed by the caller in its own task.
pub(crate) struct Inline {
    pending: Pending,
}

impl Inline {
    /// Performs the exchange, reporting to the session as it goes; returns when it has ended
    /// or was aborted (the session's deadline, a cancellation, the client's stop).
    pub(crate) async fn perform(self, core: &Arc<Core>) {
        let Pending {
            outgoing,
            registration,
            gate,
        } = self.pending;
        let exchange = core.exchange(outgoing, gate);
        let _ = futures::future::Abortable::new(exchange, registration).await;
    }
}
