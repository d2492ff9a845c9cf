//! The driver: the one tokio task that owns the [`Session`] and is the only place with I/O,
//! clocks and spawning.
//!
//! It pumps the session: application commands and exchange reports go in, HTTP exchanges,
//! completions, events and notifications come out, and a single timer is kept armed for the
//! session's next deadline. Each HTTP exchange runs in its own task so a slow stream never
//! blocks the others; reports come back over one bounded channel, which keeps memory bounded
//! however fast a server sends.

use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tracing::Instrument;

use super::builder::{ClientConfig, ServerRequestHandler};
use super::era_cache::EraCache;
use super::events::{Published, ServerNotification};
use super::http::{Endpoint, ExchangeEvent};
use super::task_store::{StoredTask, TaskStore};
use crate::error::{Error, RpcError};
use crate::ids::RequestId;
use crate::proto::{
    CallId, CallRequest, HttpId, Output, Session, SessionConfig, SessionEvent, Transmit,
};

/// Exchange reports buffered before exchange tasks wait for the driver.
const EXCHANGE_BUFFER: usize = 64;
/// Server-to-client requests handled at once; more are answered with an error at once, so a
/// server cannot make the client spawn without bound.
const MAX_SERVER_REQUESTS: usize = 32;
/// Finished calls whose ids stay translatable for late events.
const RETIRED_IDS: usize = 1024;
/// How long a dropped client waits for its DELETE before the driver stops anyway.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

pub(crate) type Reply = oneshot::Sender<Result<Value, Error>>;

/// What the application side asks of the driver.
pub(crate) enum Command {
    /// Initialize (or report the result of the initialization already done).
    Connect { reply: Reply },
    /// A request; `ticket` names it for [`Command::Cancel`], `id` in events.
    Call {
        ticket: u64,
        id: CallId,
        request: CallRequest,
        reply: Reply,
    },
    /// The call's future was dropped.
    Cancel { ticket: u64 },
    /// A notification to the server.
    Notify {
        method: String,
        params: Option<Value>,
    },
    /// Poll a task created before.
    ResumeTask {
        ticket: u64,
        id: CallId,
        task_id: String,
        timeout: Option<Duration>,
        reply: Reply,
    },
    /// Close the session (DELETE).
    Close { reply: Reply },
    /// The last client handle is gone: close (best effort) and stop.
    Shutdown,
}

/// A driver not yet spawned: the client starts it on the first call that needs it.
pub(crate) struct Driver {
    endpoint: Endpoint,
    session: SessionConfig,
    handler: Option<ServerRequestHandler>,
    commands: mpsc::UnboundedReceiver<Command>,
    published: Arc<Published>,
    era_cache: EraCache,
    task_store: Arc<dyn TaskStore>,
}

impl Driver {
    pub(crate) fn new(
        config: ClientConfig,
        commands: mpsc::UnboundedReceiver<Command>,
        published: Arc<Published>,
    ) -> Self {
        Driver {
            endpoint: Endpoint {
                http: config.http,
                url: config.url,
                headers: Arc::new(config.headers),
                fire_and_forget_timeout: config.session.call_timeout,
            },
            session: config.session,
            era_cache: config.era_cache,
            task_store: config.task_store,
            handler: config.server_requests,
            commands,
            published,
        }
    }

    /// Spawns the driver task on the current tokio runtime.
    pub(crate) fn spawn(self, handle: &tokio::runtime::Handle) {
        // Only scheme, host, port and path: a query string may carry credentials.
        let url = &self.endpoint.url;
        let endpoint = format!(
            "{}://{}{}{}",
            url.scheme(),
            url.host_str().unwrap_or_default(),
            url.port().map(|p| format!(":{p}")).unwrap_or_default(),
            url.path()
        );
        let span = tracing::info_span!("mcp_client", %endpoint);
        handle.spawn(self.run().instrument(span));
    }

    async fn run(self) {
        let (exchange_tx, exchange_rx) = mpsc::channel(EXCHANGE_BUFFER);
        let (answer_tx, answer_rx) = mpsc::unbounded_channel();
        let mut config = self.session;
        config.era_hint = self.era_cache.lookup(&self.endpoint.url);
        let mut state = State {
            session: Session::new(config, now()),
            era_cache: self.era_cache,
            task_store: self.task_store,
            endpoint: self.endpoint,
            handler: self.handler,
            published: self.published,
            exchange_tx,
            answer_tx,
            exchanges: HashMap::new(),
            calls: HashMap::new(),
            tickets: HashMap::new(),
            app_ids: HashMap::new(),
            finished: VecDeque::new(),
            server_requests_in_flight: 0,
            shutdown: None,
        };
        tracing::debug!("driver started");
        state.run(self.commands, exchange_rx, answer_rx).await;
        tracing::debug!("driver stopped");
    }
}

/// The session's view of time; tokio's clock, so paused-time tests drive it.
fn now() -> std::time::Instant {
    Instant::now().into_std()
}

enum Pending {
    Connect { reply: Reply },
    Call { ticket: u64, reply: Reply },
    Close { reply: Option<Reply> },
}

struct Shutdown {
    /// The DELETE still awaited, if any.
    close: Option<CallId>,
    deadline: Instant,
}

/// The driver's own state: channels and replies, never protocol state (that is the
/// session's).
struct State {
    session: Session,
    endpoint: Endpoint,
    handler: Option<ServerRequestHandler>,
    published: Arc<Published>,
    era_cache: EraCache,
    task_store: Arc<dyn TaskStore>,
    exchange_tx: mpsc::Sender<ExchangeEvent>,
    answer_tx: mpsc::UnboundedSender<(RequestId, Result<Value, RpcError>)>,
    /// Exchanges in flight. Reports for an id not in here (aborted, finished) are dropped.
    exchanges: HashMap<HttpId, AbortHandle>,
    calls: HashMap<CallId, Pending>,
    tickets: HashMap<u64, CallId>,
    /// The session's call ids to the application's ([`ToolCall::id`](super::ToolCall::id)).
    app_ids: HashMap<CallId, CallId>,
    /// Calls finished recently, oldest first: their ids stay translatable for events the
    /// session reports around their completion, within a bound.
    finished: VecDeque<CallId>,
    server_requests_in_flight: usize,
    shutdown: Option<Shutdown>,
}

type AnswerRx = mpsc::UnboundedReceiver<(RequestId, Result<Value, RpcError>)>;

impl State {
    async fn run(
        &mut self,
        mut commands: mpsc::UnboundedReceiver<Command>,
        mut exchanges: mpsc::Receiver<ExchangeEvent>,
        mut answers: AnswerRx,
    ) {
        let timer = tokio::time::sleep_until(Instant::now());
        tokio::pin!(timer);
        loop {
            self.pump();
            if let Some(shutdown) = &self.shutdown {
                if shutdown.close.is_none() || Instant::now() >= shutdown.deadline {
                    break;
                }
            }
            let deadline = self.session.poll_timeout().map(Instant::from_std);
            if let Some(deadline) = deadline {
                timer.as_mut().reset(deadline);
            }
            let shutdown_deadline = self.shutdown.as_ref().map(|s| s.deadline);
            tokio::select! {
                command = commands.recv(), if self.shutdown.is_none() => match command {
                    Some(Command::Shutdown) | None => self.begin_shutdown(),
                    Some(command) => self.handle_command(command),
                },
                Some(event) = exchanges.recv() => self.handle_exchange(event),
                Some((id, result)) = answers.recv() => {
                    self.server_requests_in_flight -= 1;
                    self.session.respond(id, result, now());
                }
                () = &mut timer, if deadline.is_some() => {
                    // The timer fired for `deadline`: whatever is due then fires, even if the
                    // clock reads a hair earlier.
                    let fired = deadline.map_or_else(Instant::now, |d| d.max(Instant::now()));
                    self.session.handle_timeout(fired.into_std());
                }
                () = tokio::time::sleep_until(shutdown_deadline.unwrap_or_else(Instant::now)),
                    if shutdown_deadline.is_some() => {}
            }
        }
        for (_, exchange) in self.exchanges.drain() {
            exchange.abort();
        }
    }

    fn handle_command(&mut self, command: Command) {
        let now = now();
        match command {
            // The session answers from its state: at once when ready (or closed, or lost),
            // else once the handshake ends. The first call or notification connects too.
            Command::Connect { reply } => {
                let call = self.session.connect(now);
                self.calls.insert(call, Pending::Connect { reply });
            }
            Command::Call {
                ticket,
                id,
                request,
                reply,
            } => {
                tracing::debug!(method = %request.method, "call submitted");
                let call = self.session.submit(request, now);
                self.calls.insert(call, Pending::Call { ticket, reply });
                self.tickets.insert(ticket, call);
                self.app_ids.insert(call, id);
            }
            Command::Cancel { ticket } => {
                if let Some(call) = self.tickets.remove(&ticket) {
                    if self.calls.remove(&call).is_some() {
                        tracing::debug!(call = call.0, "call abandoned by the application");
                        self.session.cancel(call, now);
                    }
                }
            }
            Command::Notify { method, params } => self.session.notify(&method, params, now),
            Command::ResumeTask {
                ticket,
                id,
                task_id,
                timeout,
                reply,
            } => {
                let call = self.session.resume_task(&task_id, timeout, now);
                self.calls.insert(call, Pending::Call { ticket, reply });
                self.tickets.insert(ticket, call);
                self.app_ids.insert(call, id);
            }
            Command::Close { reply } => {
                let call = self.session.close(now);
                self.calls
                    .insert(call, Pending::Close { reply: Some(reply) });
            }
            Command::Shutdown => self.begin_shutdown(),
        }
    }

    fn begin_shutdown(&mut self) {
        if self.shutdown.is_some() {
            return;
        }
        tracing::debug!("last client handle dropped: closing the session");
        let call = self.session.close(now());
        self.calls.insert(call, Pending::Close { reply: None });
        self.shutdown = Some(Shutdown {
            close: Some(call),
            deadline: Instant::now() + CLOSE_GRACE,
        });
    }

    fn handle_exchange(&mut self, event: ExchangeEvent) {
        let id = event.id();
        if !self.exchanges.contains_key(&id) {
            return;
        }
        let now = now();
        match event {
            ExchangeEvent::Head {
                id,
                status,
                headers,
            } => self.session.handle_head(id, status, &headers, now),
            ExchangeEvent::Data { id, bytes } => self.session.handle_data(id, &bytes, now),
            ExchangeEvent::End { id } => {
                self.exchanges.remove(&id);
                self.session.handle_end(id, now);
            }
            ExchangeEvent::Failed { id, failure } => {
                self.exchanges.remove(&id);
                self.session.handle_error(id, failure, now);
            }
        }
    }

    /// Drains the session's actions until it has nothing more to say.
    fn pump(&mut self) {
        loop {
            let mut progressed = false;
            while let Some(transmit) = self.session.poll_transmit() {
                progressed = true;
                self.transmit(transmit);
            }
            while let Some(output) = self.session.poll_output() {
                progressed = true;
                self.output(output);
            }
            if !progressed {
                break;
            }
        }
    }

    fn transmit(&mut self, transmit: Transmit) {
        match transmit {
            Transmit::Send(request) => {
                let id = request.id;
                tracing::debug!(
                    http = id.0,
                    method = ?request.method,
                    purpose = ?request.purpose,
                    "http exchange"
                );
                let span = tracing::debug_span!(
                    "http",
                    id = id.0,
                    method = ?request.method,
                    purpose = ?request.purpose
                );
                let task = tokio::spawn(
                    self.endpoint
                        .clone()
                        .run(request, self.exchange_tx.clone())
                        .instrument(span),
                );
                if let Some(old) = self.exchanges.insert(id, task.abort_handle()) {
                    old.abort();
                }
            }
            Transmit::Abort(id) => {
                if let Some(exchange) = self.exchanges.remove(&id) {
                    tracing::trace!(http = id.0, "exchange aborted");
                    exchange.abort();
                }
            }
        }
    }

    fn output(&mut self, output: Output) {
        match output {
            Output::Completed { call, result } => self.complete(call, result),
            Output::Notification { call, notification } => {
                // No subscriber is not an error: notifications are informational.
                self.published.notification(ServerNotification {
                    call: call.map(|c| self.app_id(c)),
                    method: notification.method,
                    params: notification.params,
                });
            }
            Output::ServerRequest(request) => {
                let id = request.id.clone();
                let Some(handler) = self.handler.clone() else {
                    let error = RpcError {
                        code: -32601,
                        message: format!("method not found: {}", request.method),
                        data: None,
                    };
                    self.session.respond(id, Err(error), now());
                    return;
                };
                if self.server_requests_in_flight >= MAX_SERVER_REQUESTS {
                    let error = RpcError {
                        code: -32603,
                        message: "too many concurrent server requests".to_owned(),
                        data: None,
                    };
                    self.session.respond(id, Err(error), now());
                    return;
                }
                self.server_requests_in_flight += 1;
                let answers = self.answer_tx.clone();
                tokio::spawn(
                    async move {
                        // A panicking handler must still answer, or the server waits forever.
                        let result = AssertUnwindSafe(handler(request))
                            .catch_unwind()
                            .await
                            .unwrap_or_else(|_| {
                                tracing::error!("server request handler panicked");
                                Err(RpcError {
                                    code: -32603,
                                    message: "internal error".to_owned(),
                                    data: None,
                                })
                            });
                        let _ = answers.send((id, result));
                    }
                    .in_current_span(),
                );
            }
            Output::Event(event) => {
                self.published.set_status(self.session.extension_status());
                match &event {
                    SessionEvent::EraDetected { era } => {
                        tracing::info!(?era, "era detected");
                        self.era_cache.record(&self.endpoint.url, *era);
                        self.published.set_era(*era);
                    }
                    SessionEvent::TaskCreated { task_id, .. } => {
                        // Recorded before the first poll is sent (the pump handles this
                        // output before the poll's timer can fire).
                        self.task_store.created(StoredTask {
                            task_id: task_id.clone(),
                            endpoint: self.endpoint.url.as_str().to_owned(),
                        });
                    }
                    SessionEvent::TaskFinished { task_id, .. } => {
                        self.task_store.finished(task_id);
                    }
                    SessionEvent::SessionLost => tracing::warn!("session lost"),
                    SessionEvent::Closed => tracing::debug!("session closed"),
                    other => tracing::info!(event = ?other, "session event"),
                }
                self.published.event(self.translate(event));
            }
        }
    }

    /// The application's id for a session call id (unchanged if unknown).
    fn app_id(&self, call: CallId) -> CallId {
        self.app_ids.get(&call).copied().unwrap_or(call)
    }

    fn translate(&self, event: SessionEvent) -> SessionEvent {
        match event {
            SessionEvent::Redispatched {
                call,
                method,
                idempotency_key,
            } => SessionEvent::Redispatched {
                call: self.app_id(call),
                method,
                idempotency_key,
            },
            SessionEvent::OutcomeUnknown { call, method } => SessionEvent::OutcomeUnknown {
                call: self.app_id(call),
                method,
            },
            SessionEvent::ContextMismatch { call } => SessionEvent::ContextMismatch {
                call: self.app_id(call),
            },
            other => other,
        }
    }

    /// Keeps a finished call's id translatable for a while, then forgets it.
    fn retire(&mut self, call: CallId) {
        self.finished.push_back(call);
        if self.finished.len() > RETIRED_IDS {
            if let Some(old) = self.finished.pop_front() {
                self.app_ids.remove(&old);
            }
        }
    }

    fn complete(&mut self, call: CallId, result: Result<Value, Error>) {
        match self.calls.remove(&call) {
            Some(Pending::Connect { reply }) => {
                match &result {
                    Ok(_) => tracing::debug!("connected"),
                    Err(err) => tracing::debug!(error = %err, "connect failed"),
                }
                let _ = reply.send(result);
            }
            Some(Pending::Call { ticket, reply }) => {
                self.tickets.remove(&ticket);
                self.retire(call);
                let _ = reply.send(result);
            }
            Some(Pending::Close { reply }) => {
                if let Some(shutdown) = &mut self.shutdown {
                    if shutdown.close == Some(call) {
                        shutdown.close = None;
                    }
                }
                if let Some(reply) = reply {
                    let _ = reply.send(result);
                }
            }
            // Cancelled by the application: nobody is waiting.
            None => {}
        }
    }
}
