//! [`Core`]: the [`State`] behind its lock, and the one way in for everyone who touches it
//! (the client's methods, call handles, exchanges wherever they run, handlers' answers).
//!
//! Each entry takes the lock, hands its input to the state (which pumps the session), and
//! releases it, waking the driver only when the state says the driver has something new to
//! do: an exchange to start, a deadline earlier than its timer's, a shutdown. A call whose
//! POST goes out at once and ends with its answer never involves the driver.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use serde_json::Value;
use tokio::sync::Notify;

use super::state::{Command, Parts, Pending, Registration, State};
use crate::client::http::{Endpoint, ExchangeEvent, ExchangeSink};
use crate::error::{Error, ErrorKind, RpcError};
use crate::ids::RequestId;
use crate::proto::CallId;

/// The shared session of one client.
pub(crate) struct Core {
    state: Mutex<State>,
    /// Wakes the driver (a stored permit if it is busy: nothing is lost).
    wake: Notify,
    pub(super) endpoint: Arc<Endpoint>,
    /// The runtime the driver task was spawned on, once it was.
    driver_runtime: OnceLock<tokio::runtime::Id>,
}

fn stopped() -> Error {
    Error::new(ErrorKind::Closed, "the client's driver has stopped")
}

impl Core {
    pub(crate) fn new(parts: Parts) -> Arc<Self> {
        let endpoint = parts.endpoint.clone();
        Arc::new_cyclic(|core| Core {
            state: Mutex::new(State::new(parts, core.clone())),
            wake: Notify::new(),
            endpoint,
            driver_runtime: OnceLock::new(),
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
                self.wake.notify_one();
                return Err(stopped());
            }
        };
        if state.is_stopped() {
            return Err(stopped());
        }
        Ok(state)
    }

    /// Releases the lock, waking the driver if it has something new to do.
    fn release(&self, state: MutexGuard<'_, State>) {
        let wake = state.driver_needed();
        drop(state);
        if wake {
            self.wake.notify_one();
        }
    }

    /// Runs `f` on the state (each of the state's entries pumps what it changed), releases
    /// it, then hands the server requests it brought to their handlers.
    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> Result<T, Error> {
        let mut state = self.lock()?;
        let out = f(&mut state);
        let dispatches = state.take_dispatches();
        self.release(state);
        for dispatch in dispatches {
            dispatch.spawn();
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

    /// Registers a call; returns the session's id for it and, when `inline`, its first POST
    /// if the caller may perform it itself (the session sent it at once); else the driver
    /// performs it.
    pub(crate) fn register(
        &self,
        registration: Registration,
        inline: bool,
    ) -> Result<(CallId, Option<Inline>), Error> {
        self.with(|state| state.register(registration, inline))
            .map(|(call, pending)| (call, pending.map(|pending| Inline { pending })))
    }

    /// A server-request handler's answer.
    pub(super) fn answer(&self, id: RequestId, result: Option<Result<Value, RpcError>>) {
        let _ = self.with(|state| state.handle_answer(id, result));
    }

    /// The driver's timer fired for `fired`.
    pub(super) fn timeout(&self, fired: tokio::time::Instant) {
        let _ = self.with(|state| state.handle_timeout(fired));
    }

    /// Stops the client for good (the driver ended, or is being dropped with its runtime).
    pub(super) fn stop(&self) {
        let mut state = match self.state.lock() {
            Ok(state) => state,
            Err(poisoned) => poisoned.into_inner(),
        };
        state.stop();
    }

    /// Records the runtime the driver task runs on.
    pub(super) fn set_driver_runtime(&self, id: tokio::runtime::Id) {
        let _ = self.driver_runtime.set(id);
    }

    /// Whether the task polling now runs on the driver's runtime. Such a task is polled only
    /// while that runtime runs, and then so is the driver, which keeps the session's
    /// deadlines: a call's own guard has nothing to add there.
    pub(crate) fn on_driver_runtime(&self) -> bool {
        match (
            self.driver_runtime.get(),
            tokio::runtime::Handle::try_current(),
        ) {
            (Some(driver), Ok(current)) => current.id() == *driver,
            _ => false,
        }
    }

    /// Waits until woken.
    pub(super) async fn woken(&self) {
        self.wake.notified().await;
    }
}

impl ExchangeSink for Arc<Core> {
    fn report(
        &self,
        event: ExchangeEvent,
        ready: &mut dyn FnMut() -> Option<ExchangeEvent>,
    ) -> bool {
        self.with(|state| {
            let mut wanted = state.handle_exchange(event);
            while wanted {
                match ready() {
                    Some(event) => wanted = state.handle_exchange(event),
                    None => break,
                }
            }
            wanted
        })
        .unwrap_or(false)
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
            request,
            registration,
        } = self.pending;
        let exchange = core.endpoint.run(request, core);
        let _ = futures::future::Abortable::new(exchange, registration).await;
    }
}
