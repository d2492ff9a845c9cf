//! [`Client`]: the cheap-to-clone handle the application calls.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use super::builder::{ClientBuilder, ClientConfig};
use super::driver::{Command, Driver};
use super::events::{EventStream, NotificationStream, Published};
use super::results::{protocol, CallToolResult, InitializeResult, Tool};
use super::tool_call::{next_call_id, ToolCall};
use crate::error::{Error, ErrorKind};
use crate::proto::{CallId, CallRequest, Era, ExtensionStatus};

/// Added to a call's deadline for the handle's own guard. The session enforces the deadline;
/// the guard only guarantees that a call never hangs, whatever happens to the driver.
const GUARD_GRACE: Duration = Duration::from_secs(2);
/// Bound on `tools/list` pages, so a server repeating cursors cannot loop the client forever.
const MAX_LIST_PAGES: usize = 1000;

/// An MCP client over the Streamable HTTP transport, resume-aware.
///
/// Cheap to clone: every clone talks to the same session through the same driver task. When
/// the last clone is dropped the driver closes the session (best effort, bounded) and stops.
///
/// Every async method must run inside a tokio runtime (with the time driver); the driver task
/// is spawned on the runtime of the first one called and lives as long as that runtime: if it
/// shuts down first, later calls fail with [`ErrorKind::Closed`]. Dropping a call's future
/// abandons the call: the server is sent `notifications/cancelled` if the call may be running.
///
/// After [`Client::close`], or once the session is lost for good
/// ([`SessionEvent::SessionLost`](crate::SessionEvent::SessionLost)), every call fails
/// ([`ErrorKind::Closed`], [`ErrorKind::SessionLost`]); build a new client to start over.
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
}

struct Shared {
    commands: mpsc::UnboundedSender<Command>,
    published: Arc<Published>,
    /// The driver, until the first call spawns it.
    driver: Mutex<Option<Driver>>,
    next_ticket: AtomicU64,
    call_timeout: Duration,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The driver may already be gone; nothing to do then.
        let _ = self.commands.send(Command::Shutdown);
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
        let (commands, command_rx) = mpsc::unbounded_channel();
        let published = Arc::new(Published::default());
        let call_timeout = config.session.call_timeout;
        let driver = Driver::new(config, command_rx, published.clone());
        Client {
            shared: Arc::new(Shared {
                commands,
                published,
                driver: Mutex::new(Some(driver)),
                next_ticket: AtomicU64::new(0),
                call_timeout,
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
        let value = self.wait(rx, self.shared.call_timeout, None).await?;
        InitializeResult::from_value(value)
    }

    /// Lists the server's tools (`tools/list`, following `nextCursor` to the end).
    pub async fn list_tools(&self) -> Result<Vec<Tool>, Error> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_LIST_PAGES {
            let params = match &cursor {
                Some(cursor) => json!({ "cursor": cursor }),
                None => json!({}),
            };
            let page = self.request("tools/list", Some(params)).await?;
            let items = page
                .get("tools")
                .and_then(Value::as_array)
                .ok_or_else(|| protocol("tools/list result lacks a `tools` array"))?;
            for item in items {
                tools.push(Tool::from_value(item.clone())?);
            }
            match page.get("nextCursor").and_then(Value::as_str) {
                Some(next) if Some(next) != cursor.as_deref() => cursor = Some(next.to_owned()),
                _ => return Ok(tools),
            }
        }
        Err(protocol("tools/list did not end after 1000 pages"))
    }

    /// Calls a tool (`tools/call`).
    ///
    /// A tool that fails reports it in the result (`is_error`); an `Err` means the call
    /// itself failed. [`ErrorKind::OutcomeUnknown`] says the call was interrupted, may or may
    /// not have run, and was not re-sent because that was not provably safe: give the call
    /// an idempotency key to let the client re-send it when the server deduplicates.
    pub async fn call_tool(&self, call: ToolCall) -> Result<CallToolResult, Error> {
        let (id, request) = call.into_request()?;
        let value = self.submit(id, request).await?;
        CallToolResult::from_value(value)
    }

    /// Sends any request and returns its JSON-RPC `result`.
    ///
    /// Such a request is never re-sent after an interruption whose outcome is unknown (it has
    /// no idempotency key); use [`Client::call_tool`] with a key for calls worth re-sending.
    pub async fn request(&self, method: &str, params: Option<Value>) -> Result<Value, Error> {
        self.call(CallRequest::new(method, params)).await
    }

    /// Sends a request with every option of the core ([`CallRequest`]): deadline, and for a
    /// `tools/call` an idempotency key.
    pub async fn call(&self, request: CallRequest) -> Result<Value, Error> {
        self.submit(next_call_id(), request).await
    }

    async fn submit(&self, id: CallId, request: CallRequest) -> Result<Value, Error> {
        if request.timeout == Some(Duration::ZERO) {
            return Err(Error::new(
                ErrorKind::InvalidConfig,
                "a call timeout must be greater than zero",
            ));
        }
        let timeout = request.timeout.unwrap_or(self.shared.call_timeout);
        let ticket = self.shared.next_ticket.fetch_add(1, Ordering::Relaxed);
        let (reply, rx) = oneshot::channel();
        self.send(Command::Call {
            ticket,
            id,
            request,
            reply,
        })?;
        self.wait(rx, timeout, Some(ticket)).await
    }

    /// Polls a task a call became earlier (for instance before a restart: its id was in
    /// the [`TaskStore`](super::TaskStore)) until it ends, and returns its final result.
    pub async fn resume_task(&self, task_id: &str) -> Result<Value, Error> {
        let ticket = self.shared.next_ticket.fetch_add(1, Ordering::Relaxed);
        let (reply, rx) = oneshot::channel();
        self.send(Command::ResumeTask {
            ticket,
            id: next_call_id(),
            task_id: task_id.to_owned(),
            timeout: None,
            reply,
        })?;
        self.wait(rx, self.shared.call_timeout, Some(ticket)).await
    }

    /// Checks the server is alive (`ping`).
    pub async fn ping(&self) -> Result<(), Error> {
        self.request("ping", None).await.map(drop)
    }

    /// Sends a notification (best effort: returns once it is queued, not when delivered).
    pub async fn notify(&self, method: &str, params: Option<Value>) -> Result<(), Error> {
        self.send(Command::Notify {
            method: method.to_owned(),
            params,
        })
    }

    /// Lifecycle events: resumes, rejections, re-initializations, re-sends, unknown outcomes.
    ///
    /// Sees the events sent after it was created. A subscriber that falls more than
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

    /// Closes the session: waiting calls fail with [`ErrorKind::Closed`], the session is
    /// DELETEd (a server answering 405 is fine), and later calls fail with `Closed`.
    pub async fn close(&self) -> Result<(), Error> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Close { reply })?;
        self.wait(rx, self.shared.call_timeout, None)
            .await
            .map(drop)
    }

    fn send(&self, command: Command) -> Result<(), Error> {
        self.start_driver()?;
        self.shared
            .commands
            .send(command)
            .map_err(|_| Error::new(ErrorKind::Closed, "the client's driver has stopped"))
    }

    fn start_driver(&self) -> Result<(), Error> {
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
        }
        Ok(())
    }

    async fn wait(
        &self,
        rx: oneshot::Receiver<Result<Value, Error>>,
        timeout: Duration,
        ticket: Option<u64>,
    ) -> Result<Value, Error> {
        let mut guard = CancelOnDrop {
            commands: &self.shared.commands,
            ticket,
        };
        let outcome = tokio::time::timeout(timeout.saturating_add(GUARD_GRACE), rx).await;
        match outcome {
            Ok(Ok(result)) => {
                guard.ticket = None;
                result
            }
            Ok(Err(_)) => {
                guard.ticket = None;
                Err(Error::new(
                    ErrorKind::Closed,
                    "the client's driver stopped before the call completed",
                ))
            }
            // The guard cancels the call, which posts `notifications/cancelled`.
            Err(_) => Err(Error::new(ErrorKind::Timeout, "the call's deadline passed")),
        }
    }
}

/// Cancels its call when the call's future is dropped before completion.
struct CancelOnDrop<'a> {
    commands: &'a mpsc::UnboundedSender<Command>,
    ticket: Option<u64>,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket {
            let _ = self.commands.send(Command::Cancel { ticket });
        }
    }
}
