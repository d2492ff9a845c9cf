//! [`Client`]: the cheap-to-clone handle the application calls.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::body::Limits;
use super::builder::{ClientBuilder, ClientConfig};
use super::driver::{Command, Core, Driver, Inline, Parts, Records, Registration, Scope, Writer};
use super::events::{EventStream, NotificationStream, Published};
use super::handle::{CallHandle, GUARD_GRACE, PROGRESS_BUFFER};
use super::http::Endpoint;
use super::models;
use super::request::{Request, Submission, Timing};
use super::results::{CallToolResult, InitializeResult};
use super::tool_call::ToolCall;
use super::Startable;
use crate::error::{Error, ErrorKind};
use crate::ids::SessionId;
use crate::proto::{CallId, CallRequest, Era, ExtensionStatus, Session};

/// An MCP client over the Streamable HTTP transport, resume-aware.
///
/// Cheap to clone: every clone talks to the same session and the same driver task. When the
/// last clone is dropped the driver closes the session (best effort, bounded) and stops.
///
/// Every async method must run inside a tokio runtime (with the time driver); the driver's
/// tasks are spawned on the runtime of the first one called and live as long as that
/// runtime: if it shuts down first (even before they ever ran), later calls fail with
/// [`ErrorKind::Closed`] at once. Server-request handlers run on that runtime too. An
/// ordinary call performs its POST in the task that awaits it (no hand-off to the driver),
/// and reqwest serves a pooled connection from the runtime that opened it: share a client
/// only between runtimes that keep running. Dropping a call's future abandons the call: the
/// server is sent `notifications/cancelled` if the call may be running.
///
/// Every call ends by its deadline, whatever the server's streams or application code do: on
/// the driver's runtime the driver's timer task keeps it, which runs no handler, token
/// provider or task store (it does log with `tracing`, some of it under the session's lock,
/// so a subscriber must not block, and with telemetry, the `otel` feature, it ends the spans
/// of the calls it ends, so a span processor must not block either: a batching one does
/// not); a call awaited elsewhere, or through a [`CallHandle`], also keeps a guard of its
/// own that ends it at most 2 s after its bound even if that runtime stops being polled. A
/// panic in application code (a handler, a token provider, a task store) fails the request it
/// served, never the client.
///
/// After [`Client::close`] every call fails with [`ErrorKind::Closed`]. A lost session
/// ([`SessionEvent::SessionLost`](crate::SessionEvent::SessionLost), or calls failing with
/// [`ErrorKind::SessionLost`]) is not an end: the next call reconnects.
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
}

struct Shared {
    core: Arc<Core>,
    published: Arc<Published>,
    /// The driver, until the first call spawns it.
    driver: Mutex<Option<Driver>>,
    /// Whether the driver was spawned (read on every call without taking the lock above).
    started: AtomicBool,
    call_timeout: Duration,
    /// The most one response may carry (its body, or one event of a stream).
    max_response_size: usize,
    #[cfg(feature = "otel")]
    telemetry: Option<super::telemetry::Instrumentation>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Without a driver nothing was ever sent; with one gone, nothing is left to close.
        if self.started.load(Ordering::Acquire) {
            let _ = self.core.command(Command::Shutdown);
        }
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

impl Client {
    /// Starts configuring a client for the MCP endpoint at `url`
    /// (e.g. `http://127.0.0.1:8080/mcp`).
    pub fn builder(url: impl Into<String>) -> ClientBuilder {
        ClientBuilder::new(url)
    }

    pub(crate) fn from_config(config: ClientConfig) -> Self {
        let published = Arc::new(Published::default());
        let call_timeout = config.session.call_timeout;
        let (max_body_size, max_event_size) =
            (config.session.max_body_size, config.session.max_event_size);
        let endpoint = Arc::new(Endpoint {
            http: config.http,
            url: config.url,
            headers: Arc::new(config.headers),
            auth: config.auth,
            limits: Limits {
                max_event_size: config.session.max_event_size,
                max_body_size: config.session.max_body_size,
            },
            fire_and_forget_timeout: call_timeout,
            #[cfg(feature = "otel")]
            telemetry: config.telemetry.clone(),
        });
        let mut session = config.session;
        session.era_hint = config.era_cache.lookup(&endpoint.url);
        let scope = if config.private_ledger {
            Scope::TasksLeftBehind
        } else {
            Scope::Calls
        };
        let records = config.ledger.map(|ledger| {
            Records::new(
                Writer::new(ledger),
                endpoint.url.as_str(),
                config.record_session_ids,
                scope,
            )
        });
        let core = Core::new(Parts {
            session: Session::new(session, tokio::time::Instant::now().into_std()),
            endpoint,
            handlers: Arc::new(config.handlers),
            published: published.clone(),
            era_cache: config.era_cache,
            task_store: config.task_store,
            records,
        });
        Client {
            shared: Arc::new(Shared {
                driver: Mutex::new(Some(Driver::new(core.clone()))),
                core,
                published,
                started: AtomicBool::new(false),
                call_timeout,
                max_response_size: max_body_size.max(max_event_size),
                #[cfg(feature = "otel")]
                telemetry: config.telemetry,
            }),
        }
    }

    /// Initializes the session (`initialize`, `notifications/initialized`, then the
    /// standalone GET stream if enabled) and returns the server's answer.
    ///
    /// Optional: the first call connects by itself. Calling it again returns the first
    /// result. After a re-initialization the session runs on the new server answer; watch
    /// [`Client::events`] for it.
    pub async fn connect(&self) -> Result<InitializeResult, Error> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Connect { reply })?;
        let value = self.wait(rx, self.shared.call_timeout).await?;
        InitializeResult::from_value(value)
    }

    /// Calls a tool (`tools/call`) and waits for its result.
    ///
    /// A tool that fails reports it in the result (`is_error`); an `Err` means the call
    /// itself failed. [`ErrorKind::OutcomeUnknown`] says the call was interrupted, may or may
    /// not have run, and was not re-sent because that was not provably safe: give the call
    /// an idempotency key to let the client re-send it when the server deduplicates.
    pub async fn call_tool(&self, call: ToolCall) -> Result<CallToolResult, Error> {
        let submission = call.into_submission(self.shared.call_timeout)?;
        self.perform(submission, CallToolResult::from_value).await
    }

    /// Sends a request of any method and reads its `result` as `T`: a model of this crate, a
    /// type of yours, or [`serde_json::Value`] for the raw result. A result that does not fit
    /// `T` is an [`ErrorKind::Protocol`] error.
    ///
    /// Such a request carries no idempotency key, so it is never re-sent after an
    /// interruption whose outcome is unknown; [`Client::call_tool`] with a key is the call
    /// that can be.
    ///
    /// ```no_run
    /// # async fn run(client: mcp_resume::Client) -> mcp_resume::Result<()> {
    /// use mcp_resume::Request;
    ///
    /// #[derive(serde::Deserialize)]
    /// struct Status { healthy: bool }
    ///
    /// let status: Status = client.request(Request::new("acme/status", None)).await?;
    /// let raw: serde_json::Value = client.request(Request::new("acme/status", None)).await?;
    /// # let _ = (status.healthy, raw); Ok(()) }
    /// ```
    pub async fn request<T: DeserializeOwned>(&self, request: Request) -> Result<T, Error> {
        let submission = request.into_submission(self.shared.call_timeout)?;
        let value = self.perform(submission, Ok).await?;
        models::from_result(value)
    }

    /// Starts a [`ToolCall`] or a [`Request`] and returns its [`CallHandle`] at once: its id,
    /// its own progress stream (the call carries a progress token of its own when it has
    /// none), an explicit cancel; await the handle for the result (a [`CallToolResult`] for a
    /// tool call, the raw `result` for a request; [`CallHandle::typed`] reads it as a type of
    /// yours).
    pub fn start<C: Startable>(&self, call: C) -> Result<CallHandle<C::Output>, Error> {
        let submission = call
            .into_submission(self.shared.call_timeout)?
            .with_progress()?;
        self.submit(submission, C::convert)
    }

    /// The deadline of a call that sets none ([`ClientBuilder::call_timeout`]).
    pub(crate) fn call_timeout(&self) -> Duration {
        self.shared.call_timeout
    }

    /// The most one response may carry: its body, or one event of a stream.
    pub(crate) fn max_response_size(&self) -> usize {
        self.shared.max_response_size
    }

    /// Sends a core request as it is (the bridge's path: its key and deadline already set).
    pub(crate) async fn send_core(&self, request: CallRequest) -> Result<Value, Error> {
        let timing = Timing {
            timeout: request.timeout(),
            ..Timing::default()
        };
        let submission =
            Submission::new(CallId::next(), request, timing, self.shared.call_timeout)?;
        self.perform(submission, Ok).await
    }

    /// Registers a request; the driver sends it, the handle waits for its result.
    pub(crate) fn submit<T>(
        &self,
        submission: Submission,
        convert: fn(Value) -> Result<T, Error>,
    ) -> Result<CallHandle<T>, Error> {
        self.register(submission, convert, false)
            .map(|(handle, _)| handle)
    }

    /// Registers a request and waits for its result, performing its POST in this task when
    /// the session sends it at once: an ordinary call never waits on the driver task.
    async fn perform<T>(
        &self,
        submission: Submission,
        convert: fn(Value) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let (mut handle, inline) = self.register(submission, convert, true)?;
        if let Some(inline) = inline {
            // The session's deadline aborts the exchange, and so does the driver's stop; the
            // handle's guard bounds it even if neither can happen (a driver whose runtime is
            // no longer polled): a call never hangs.
            handle.alongside(inline.perform(&self.shared.core)).await;
        }
        handle.await
    }

    fn register<T>(
        &self,
        submission: Submission,
        convert: fn(Value) -> Result<T, Error>,
        inline: bool,
    ) -> Result<(CallHandle<T>, Option<Inline>), Error> {
        self.start_driver()?;
        let (reply, rx) = oneshot::channel();
        let (progress_tx, progress_rx) = if submission.wants_progress {
            let (tx, rx) = mpsc::channel(PROGRESS_BUFFER);
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let Submission {
            id,
            request,
            idle,
            total,
            ..
        } = submission;
        // The call's span starts here, in the caller's context.
        #[cfg(feature = "otel")]
        let mut request = request;
        #[cfg(feature = "otel")]
        let trace = self
            .shared
            .telemetry
            .as_ref()
            // The application's span processors run as the span starts.
            .and_then(|t| t.contain(|| t.start_call(&mut request)))
            .map(Box::new);
        let registration = Registration::Call {
            id,
            request,
            idle,
            progress: progress_tx,
            reply,
            #[cfg(feature = "otel")]
            trace,
        };
        // A call awaited where it is made (`inline`: by `perform`), on the driver's runtime,
        // needs no guard of its own: that runtime runs the driver's timer task whenever it
        // runs this one, and that task, which runs no handler, token provider or task store
        // (only a `tracing` subscriber, when it logs, and span processors), keeps the call's
        // deadline and its allowed silence (short of application code blocking every worker
        // of the runtime, which stalls this task too). A timer per call there would cost
        // every call a trip through the runtime's timer wheel, which its workers share. A
        // handle may be awaited anywhere: it keeps its guard, as does a call awaited on
        // another runtime.
        let guarded = !inline || !self.shared.core.on_driver_runtime();
        let (guard, idle_guard) = if guarded { (total, idle) } else { (None, None) };
        let inline = self.shared.core.register(registration, inline)?;
        let handle = CallHandle::new(
            id,
            self.shared.core.clone(),
            rx,
            guard,
            idle_guard,
            progress_rx,
            convert,
        );
        Ok((handle, inline))
    }

    /// Polls a task a call became earlier (for instance before a restart: its id was in
    /// the [`TaskStore`](super::TaskStore)) until it ends, and returns its final result.
    ///
    /// `timeout` bounds the whole wait (every poll and re-send); `None` means the client's
    /// call timeout. A task may run far longer than a call: give it the time it needs. A
    /// zero timeout fails with [`ErrorKind::InvalidConfig`] at once, as a call's does, and
    /// nothing is polled or written.
    ///
    /// With a [ledger](crate::guide::restarts) given to the builder, the task is recorded
    /// there while it is polled, and kept when the wait ends before the task does (a
    /// timeout, a server that cannot be asked): a later [`Client::recover`] polls it again.
    /// The record is the task's, one per task id and endpoint: resuming the same task again,
    /// here or in another process, rewrites it rather than adding one, so a recovery polls
    /// each task once however many resumptions of it failed. A call recorded in the ledger
    /// that became a task has its entry under the same name: resuming that task adds no
    /// second one.
    pub async fn resume_task(
        &self,
        task_id: &str,
        timeout: Option<Duration>,
    ) -> Result<Value, Error> {
        if timeout.is_some_and(|t| t.is_zero()) {
            return Err(Error::new(
                ErrorKind::InvalidConfig,
                "a task's timeout must be greater than zero",
            ));
        }
        self.start_driver()?;
        let (reply, rx) = oneshot::channel();
        let id = CallId::next();
        let total = timeout.unwrap_or(self.shared.call_timeout);
        let registration = Registration::ResumeTask {
            id,
            task_id: task_id.to_owned(),
            timeout: Some(total),
            reply,
        };
        self.shared.core.register(registration, false)?;
        let handle: CallHandle<Value> = CallHandle::new(
            id,
            self.shared.core.clone(),
            rx,
            Some(total),
            None,
            None,
            Ok,
        );
        handle.await
    }

    /// Checks the server is alive (`ping`).
    pub async fn ping(&self) -> Result<(), Error> {
        self.request_ok(Request::new("ping", None)).await
    }

    /// A request whose result says nothing beyond success (`{}`).
    pub(crate) async fn request_ok(&self, request: Request) -> Result<(), Error> {
        self.request::<Value>(request).await.map(drop)
    }

    /// Sends a notification (best effort: returns once it is queued, not when delivered).
    pub fn notify(&self, method: &str, params: Option<Value>) -> Result<(), Error> {
        self.send(Command::Notify {
            method: method.to_owned(),
            params,
        })
    }

    /// Tells the server the roots changed (`notifications/roots/list_changed`): it will ask
    /// for them again, and the [`ClientBuilder::on_roots`] handler answers.
    pub fn notify_roots_changed(&self) -> Result<(), Error> {
        self.notify("notifications/roots/list_changed", None)
    }

    /// Lifecycle events: resumes, rejections, re-initializations, re-sends, unknown outcomes.
    ///
    /// Sees the events sent after it was created, and ends once the client is closed (after
    /// [`SessionEvent::Closed`](crate::SessionEvent::Closed)) or its driver has stopped (its
    /// runtime shut down; no `Closed` then: the session was not closed). A subscriber that falls more than
    /// [`EVENT_BUFFER`](super::events::EVENT_BUFFER) events behind loses the oldest (counted by
    /// [`EventStream::missed`]); the client itself never waits for subscribers.
    pub fn events(&self) -> EventStream {
        self.shared.published.subscribe_events()
    }

    /// Server notifications (progress, log messages, list changes), with the call whose
    /// stream carried them when known. Same buffering as [`Client::events`].
    pub fn notifications(&self) -> NotificationStream {
        self.shared.published.subscribe_notifications()
    }

    /// Which resume-safety checks the current session's server advertised and which are in
    /// force (capability hashes, sequenced event ids, idempotency); `None` before the first
    /// session is established. A change is announced by
    /// [`SessionEvent::ChecksDegraded`](crate::SessionEvent::ChecksDegraded).
    pub fn extension_status(&self) -> Option<ExtensionStatus> {
        self.shared.published.status()
    }

    /// The era the server was found to speak ([`Era::Legacy`] or [`Era::Modern`]); `None`
    /// before the first handshake ended. Announced by
    /// [`SessionEvent::EraDetected`](crate::SessionEvent::EraDetected).
    pub fn era(&self) -> Option<Era> {
        self.shared.published.era()
    }

    /// The current session's id (`Mcp-Session-Id`, legacy era), as of the last
    /// [`SessionEvent`](crate::SessionEvent); `None` before the first session, for a server that
    /// assigns none, and in the modern era (which has no sessions). A re-initialization
    /// changes it. A credential of sorts: its `Display` and `Debug` show a prefix only;
    /// [`SessionId::expose`] gives the whole id.
    pub fn session_id(&self) -> Option<SessionId> {
        self.shared.published.session_id()
    }

    /// Re-initializations so far that found the server's capabilities changed: what was
    /// learned of the server before the latest such change may no longer hold.
    pub(crate) fn capability_changes(&self) -> u64 {
        self.shared.published.capability_changes()
    }

    /// Closes the session: waiting calls fail with [`ErrorKind::Closed`], the handlers of
    /// server requests still being handled are cancelled (reason `"client closed"`), the
    /// session is DELETEd (a server answering 405 is fine), and later calls fail with
    /// `Closed`. With a
    /// [ledger](crate::guide::restarts), it then finishes the writes its calls queued as they
    /// ended (each within the call timeout), so a process that closes its client and exits
    /// leaves no entry of a call that ended; and a closed client no longer counts as running
    /// for [`Client::recover`]: what it left for recovery (a task its call stopped waiting
    /// for) is another client's to pick up as soon as `close` returns, dropped or not.
    ///
    /// The session is closed once `close` is first polled: a `close` dropped before it
    /// returns (an application's own timeout, a handler that closes its client, stopped by
    /// that close) closes the session all the same, and the client lets go as it would
    /// (its token provider told, what it left for recovery another client's), the writes
    /// still queued left to the ledger's writer.
    pub async fn close(&self) -> Result<(), Error> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Close { reply })?;
        // The session is closed from here, whether this future is awaited to its end or
        // dropped half way (an application's own timeout, a handler that closes its client
        // and is stopped by that close): what the closed client holds for no call any more
        // goes either way.
        let mut letting_go = LettingGo {
            core: self.core(),
            auth_closed: false,
        };
        let closed = self.wait(rx, self.shared.call_timeout).await.map(drop);
        // After the session's DELETE, which may need a token: what the token provider runs
        // for this client alone (an authorization waiting on the user) ends with it.
        letting_go.close_auth();
        // A call's entry is removed after the call has ended, off its caller's path: what
        // the calls ended by now (those this close failed included) left queued is written
        // here. A ledger that never finishes a write delays close, it does not hold it.
        if let Some(writer) = self.core().writer.clone() {
            let _ = tokio::time::timeout(self.shared.call_timeout, writer.flush()).await;
        }
        drop(letting_go);
        closed
    }

    fn send(&self, command: Command) -> Result<(), Error> {
        self.start_driver()?;
        self.shared.core.command(command)
    }

    /// The shared session and its driver.
    pub(super) fn core(&self) -> &Arc<Core> {
        &self.shared.core
    }

    pub(super) fn start_driver(&self) -> Result<(), Error> {
        if self.shared.started.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut driver = match self.shared.driver.lock() {
            Ok(guard) => guard,
            // A panic while holding this lock cannot leave the Option half-updated.
            Err(poisoned) => poisoned.into_inner(),
        };
        if driver.is_none() {
            return Ok(());
        }
        let handle = tokio::runtime::Handle::try_current().map_err(|_| {
            Error::new(
                ErrorKind::InvalidConfig,
                "mcp-resume clients must be used inside a tokio runtime",
            )
        })?;
        if let Some(driver) = driver.take() {
            driver.spawn(&handle);
            self.shared.started.store(true, Ordering::Release);
        }
        Ok(())
    }

    async fn wait(
        &self,
        rx: oneshot::Receiver<Result<Value, Error>>,
        timeout: Duration,
    ) -> Result<Value, Error> {
        match tokio::time::timeout(timeout.saturating_add(GUARD_GRACE), rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(Error::new(
                ErrorKind::Closed,
                "the client's driver stopped before the call completed",
            )
            .with_may_have_run()),
            Err(_) => {
                Err(Error::new(ErrorKind::Timeout, "the call's deadline passed")
                    .with_may_have_run())
            }
        }
    }
}

/// What a closed client lets go of, as [`Client::close`] ends or is dropped: its token
/// provider's part (once), and its ledger's claims.
struct LettingGo<'a> {
    core: &'a Core,
    auth_closed: bool,
}

impl LettingGo<'_> {
    fn close_auth(&mut self) {
        if !std::mem::replace(&mut self.auth_closed, true) {
            self.core.endpoint.close_auth();
        }
    }
}

impl Drop for LettingGo<'_> {
    fn drop(&mut self) {
        self.close_auth();
        // A closed client runs no call: what it left in the ledger (a task its call stopped
        // waiting for) is another client's to recover from now, not once this one is
        // dropped. Its ended calls' removals not done yet stay claimed until they are.
        if let Some(writer) = &self.core.writer {
            writer.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    }

    /// The rule that lets a call skip its own guard: only a task on the runtime the driver
    /// was spawned on counts as on it; another runtime, no runtime, or a driver not yet
    /// spawned do not.
    #[test]
    fn only_the_drivers_own_runtime_counts_as_the_drivers() {
        let client = Client::builder("http://127.0.0.1:9/mcp")
            .build()
            .expect("a client");
        let core = client.shared.core.clone();
        let (drivers, others) = (runtime(), runtime());
        drivers.block_on(async { assert!(!core.on_driver_runtime(), "no driver yet") });
        drivers
            .block_on(async { client.start_driver() })
            .expect("spawned");
        drivers.block_on(async { assert!(core.on_driver_runtime()) });
        others.block_on(async { assert!(!core.on_driver_runtime()) });
        assert!(!core.on_driver_runtime(), "outside any runtime");
    }
}
