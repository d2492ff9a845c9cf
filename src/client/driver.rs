//! The driver: the one tokio task that owns the [`Session`] and is the only place with I/O,
//! clocks and spawning.
//!
//! It pumps the session: application commands and exchange reports go in, HTTP exchanges,
//! completions, events and notifications come out, and a single timer is kept armed for the
//! session's next deadline. The HTTP exchanges are futures this task polls side by side (a
//! `FuturesUnordered`, no task spawned per request), so a slow stream never blocks the
//! others; their reports come back over one bounded channel, which keeps memory bounded
//! however fast a server sends. Only server-request handlers run in tasks of their own.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::future::{AbortHandle, Abortable, BoxFuture};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use rustc_hash::FxHashMap;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tracing::Instrument;

use super::builder::ClientConfig;
use super::era_cache::EraCache;
use super::events::{Published, ServerNotification};
use super::handlers::{internal, not_found, Handlers, RequestContext};
use super::http::{redacted_url, Endpoint, ExchangeEvent};
use super::models::{Progress, TypedNotification};
use super::task_store::{StoredTask, TaskStore};
use crate::error::{Error, ErrorKind, RpcError};
use crate::ids::RequestId;
use crate::proto::{
    CallId, CallRequest, HttpId, Output, ServerRequest, Session, SessionConfig, SessionEvent,
    Transmit,
};

/// Exchange reports buffered before exchange tasks wait for the driver.
const EXCHANGE_BUFFER: usize = 64;
/// Server-to-client requests handled at once; more are answered with an error at once, so a
/// server cannot make the client spawn without bound.
const MAX_SERVER_REQUESTS: usize = 32;
/// Finished calls whose ids stay translatable for late events.
const RETIRED_IDS: usize = 1024;
/// Commands or exchange events taken from a channel per turn of the driver's loop.
const BATCH: usize = 32;
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
        /// Longest time without progress before the call is abandoned with a timeout.
        idle: Option<Duration>,
        /// Where the call's own progress goes.
        progress: Option<mpsc::Sender<Progress>>,
        reply: Reply,
    },
    /// The call's handle was dropped or cancelled (with the application's reason).
    Cancel { ticket: u64, reason: Option<String> },
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
    endpoint: Arc<Endpoint>,
    session: SessionConfig,
    handlers: Arc<Handlers>,
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
            endpoint: Arc::new(Endpoint {
                http: config.http,
                url: config.url,
                headers: Arc::new(config.headers),
                auth: config.auth,
                fire_and_forget_timeout: config.session.call_timeout,
            }),
            session: config.session,
            era_cache: config.era_cache,
            task_store: config.task_store,
            handlers: Arc::new(config.handlers),
            commands,
            published,
        }
    }

    /// Spawns the driver task on the current tokio runtime.
    pub(crate) fn spawn(self, handle: &tokio::runtime::Handle) {
        // Only scheme, host, port and path: a query string may carry credentials.
        let endpoint = redacted_url(self.endpoint.url.as_str());
        let span = tracing::info_span!("mcp_client", %endpoint);
        // Entering a span on every poll costs even when nothing listens: only when enabled.
        if span.is_disabled() {
            handle.spawn(self.run());
        } else {
            handle.spawn(self.run().instrument(span));
        }
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
            handlers: self.handlers,
            published: self.published,
            exchange_tx,
            answer_tx,
            exchanges: FxHashMap::default(),
            running: FuturesUnordered::new(),
            calls: FxHashMap::default(),
            tickets: FxHashMap::default(),
            app_ids: FxHashMap::default(),
            finished: VecDeque::new(),
            server_requests: HashMap::new(),
            progress: FxHashMap::default(),
            idle: FxHashMap::default(),
            idle_queue: BTreeSet::new(),
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
    endpoint: Arc<Endpoint>,
    handlers: Arc<Handlers>,
    published: Arc<Published>,
    era_cache: EraCache,
    task_store: Arc<dyn TaskStore>,
    exchange_tx: mpsc::Sender<ExchangeEvent>,
    answer_tx: mpsc::UnboundedSender<Answer>,
    /// Exchanges in flight. Reports for an id not in here (aborted, finished) are dropped.
    exchanges: FxHashMap<HttpId, AbortHandle>,
    /// The exchanges themselves, polled by this task (no task spawned per request: a
    /// request costs no scheduling and no hand-off between threads; reqwest's connections
    /// run in tasks of their own).
    running: FuturesUnordered<Abortable<BoxFuture<'static, ()>>>,
    calls: FxHashMap<CallId, Pending>,
    tickets: FxHashMap<u64, CallId>,
    /// The session's call ids to the application's ([`ToolCall::id`](super::ToolCall::id)).
    app_ids: FxHashMap<CallId, CallId>,
    /// Calls finished recently, oldest first: their ids stay translatable for events the
    /// session reports around their completion, within a bound.
    finished: VecDeque<CallId>,
    /// Server requests being handled, each with the sender of its cancellation; their number
    /// is bounded by [`MAX_SERVER_REQUESTS`].
    server_requests: HashMap<RequestId, watch::Sender<Option<String>>>,
    /// Where each call's own progress goes (calls started as handles).
    progress: FxHashMap<CallId, mpsc::Sender<Progress>>,
    /// Calls that reset their timeout on progress: the allowed silence and its end.
    idle: FxHashMap<CallId, (Duration, Instant)>,
    /// The same ends, ordered, for the one idle timer.
    idle_queue: BTreeSet<(Instant, CallId)>,
    shutdown: Option<Shutdown>,
}

/// A handler's answer to a server request; `None` when the server cancelled it (no answer is
/// sent then).
type Answer = (RequestId, Option<Result<Value, RpcError>>);
type AnswerRx = mpsc::UnboundedReceiver<Answer>;

impl State {
    async fn run(
        &mut self,
        mut commands: mpsc::UnboundedReceiver<Command>,
        mut exchanges: mpsc::Receiver<ExchangeEvent>,
        mut answers: AnswerRx,
    ) {
        let timer = tokio::time::sleep_until(Instant::now());
        tokio::pin!(timer);
        let mut armed: Option<Instant> = None;
        loop {
            self.pump();
            if let Some(shutdown) = &self.shutdown {
                if shutdown.close.is_none() || Instant::now() >= shutdown.deadline {
                    break;
                }
            }
            let deadline = self.session.poll_timeout().map(Instant::from_std);
            if let Some(deadline) = deadline.filter(|d| armed != Some(*d)) {
                // Re-arming costs a trip through the timer wheel: only when the time moved.
                timer.as_mut().reset(deadline);
                armed = Some(deadline);
            }
            let shutdown_deadline = self.shutdown.as_ref().map(|s| s.deadline);
            let idle_deadline = self.idle_queue.first().map(|(at, _)| *at);
            tokio::select! {
                command = commands.recv(), if self.shutdown.is_none() => match command {
                    Some(Command::Shutdown) | None => self.begin_shutdown(),
                    Some(command) => {
                        self.handle_command(command);
                        // What is already queued is taken in the same turn: one trip through
                        // the loop (pump, timer, select) per batch instead of per command.
                        for _ in 1..BATCH {
                            match commands.try_recv() {
                                Ok(Command::Shutdown) => {
                                    self.begin_shutdown();
                                    break;
                                }
                                Ok(command) => self.handle_command(command),
                                Err(_) => break,
                            }
                        }
                    }
                },
                Some(event) = exchanges.recv() => {
                    self.handle_exchange(event);
                    for _ in 1..BATCH {
                        match exchanges.try_recv() {
                            Ok(event) => self.handle_exchange(event),
                            Err(_) => break,
                        }
                    }
                }
                Some(_) = self.running.next(), if !self.running.is_empty() => {}
                Some((id, result)) = answers.recv() => {
                    self.server_requests.remove(&id);
                    match result {
                        Some(result) => self.session.respond(id, result, now()),
                        None => tracing::debug!(%id, "server request cancelled: not answered"),
                    }
                }
                () = tokio::time::sleep_until(idle_deadline.unwrap_or_else(Instant::now)),
                    if idle_deadline.is_some() => self.idle_expired(),
                () = &mut timer, if deadline.is_some() => {
                    // The timer fired for `deadline`: whatever is due then fires, even if the
                    // clock reads a hair earlier.
                    let fired = deadline.map_or_else(Instant::now, |d| d.max(Instant::now()));
                    armed = None;
                    self.session.handle_timeout(fired.into_std());
                }
                () = tokio::time::sleep_until(shutdown_deadline.unwrap_or_else(Instant::now)),
                    if shutdown_deadline.is_some() => {}
            }
        }
        for (_, exchange) in self.exchanges.drain() {
            exchange.abort();
        }
        // Handlers still running learn that nobody will take their answer.
        for (_, cancel) in self.server_requests.drain() {
            cancel.send_replace(Some("client closed".to_owned()));
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
                idle,
                progress,
                reply,
            } => {
                tracing::debug!(method = %request.method, "call submitted");
                let call = self.session.submit(request, now);
                self.calls.insert(call, Pending::Call { ticket, reply });
                self.tickets.insert(ticket, call);
                self.app_ids.insert(call, id);
                if let Some(progress) = progress {
                    self.progress.insert(call, progress);
                }
                if let Some(period) = idle {
                    self.arm_idle(call, period);
                }
            }
            Command::Cancel { ticket, reason } => {
                if let Some(call) = self.tickets.remove(&ticket) {
                    if self.calls.remove(&call).is_some() {
                        match &reason {
                            Some(reason) => {
                                tracing::debug!(call = call.0, %reason, "call cancelled by the application")
                            }
                            None => {
                                tracing::debug!(call = call.0, "call abandoned by the application")
                            }
                        }
                        self.session.cancel(call, now);
                        self.forget(call);
                        // Its id stays translatable for what the cancellation reports (a
                        // task's end), then goes: nothing kept per call for the client's life.
                        self.retire(call);
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
                let (abort, registration) = AbortHandle::new_pair();
                let exchange = self.endpoint.clone().run(request, self.exchange_tx.clone());
                self.running
                    .push(Abortable::new(Box::pin(exchange), registration));
                if let Some(old) = self.exchanges.insert(id, abort) {
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
                let typed =
                    TypedNotification::parse(&notification.method, notification.params.as_ref());
                match (&typed, call) {
                    (TypedNotification::Progress(progress), Some(call)) => {
                        self.on_progress(call, progress);
                    }
                    (TypedNotification::Cancelled(cancelled), _) => self.on_cancelled(cancelled),
                    _ => {}
                }
                // No subscriber is not an error: notifications are informational.
                self.published.notification(ServerNotification {
                    call: call.map(|c| self.app_id(c)),
                    method: notification.method,
                    params: notification.params,
                });
            }
            Output::ServerRequest(request) => self.server_request(request),
            Output::Event(event) => {
                self.published.set_status(self.session.extension_status());
                self.published
                    .set_session_id(self.session.session_id().map(|s| s.expose().to_owned()));
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

    /// The event with the application's call ids. Every variant is named: an event that
    /// gains a call id cannot reach the application in the session's id space by omission.
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
            SessionEvent::TaskCreated { call, task_id } => SessionEvent::TaskCreated {
                call: self.app_id(call),
                task_id,
            },
            SessionEvent::TaskFinished { call, task_id } => SessionEvent::TaskFinished {
                call: self.app_id(call),
                task_id,
            },
            other @ (SessionEvent::Connected { .. }
            | SessionEvent::Listening
            | SessionEvent::Resumed { .. }
            | SessionEvent::ResumeRejected { .. }
            | SessionEvent::Reinitialized { .. }
            | SessionEvent::ChecksDegraded { .. }
            | SessionEvent::EraDetected { .. }
            | SessionEvent::SessionLost
            | SessionEvent::Closed) => other,
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
        self.forget(call);
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

    /// Drops what the driver keeps for a call besides its reply: progress routing, idle timer.
    fn forget(&mut self, call: CallId) {
        self.progress.remove(&call);
        if let Some((_, at)) = self.idle.remove(&call) {
            self.idle_queue.remove(&(at, call));
        }
    }

    fn arm_idle(&mut self, call: CallId, period: Duration) {
        if let Some((_, old)) = self.idle.remove(&call) {
            self.idle_queue.remove(&(old, call));
        }
        // Beyond what the clock can represent the call is bounded by its total deadline only.
        if let Some(at) = Instant::now().checked_add(period) {
            self.idle.insert(call, (period, at));
            self.idle_queue.insert((at, call));
        }
    }

    /// A call's progress: to its handle, and its idle timer restarts.
    fn on_progress(&mut self, call: CallId, progress: &Progress) {
        if let Some(tx) = self.progress.get(&call) {
            if tx.try_send(progress.clone()).is_err() {
                tracing::debug!(
                    call = call.0,
                    "progress dropped: the handle does not read it"
                );
            }
        }
        if let Some(&(period, _)) = self.idle.get(&call) {
            self.arm_idle(call, period);
        }
    }

    /// Calls silent for longer than they allow: abandoned (the server is told) and failed
    /// with a timeout.
    fn idle_expired(&mut self) {
        let now = Instant::now();
        while let Some(&(at, call)) = self.idle_queue.first() {
            if at > now {
                break;
            }
            let period = self.idle.get(&call).map(|(p, _)| *p).unwrap_or_default();
            self.forget(call);
            if let Some(Pending::Call { ticket, reply }) = self.calls.remove(&call) {
                tracing::debug!(
                    call = call.0,
                    ?period,
                    "no progress in time: call abandoned"
                );
                self.tickets.remove(&ticket);
                self.session.cancel(call, now.into_std());
                self.retire(call);
                let _ = reply.send(Err(Error::new(
                    ErrorKind::Timeout,
                    format!("no progress within {period:?}"),
                )));
            }
        }
    }

    /// The server cancels a request it sent: its handler stops, no answer is sent.
    fn on_cancelled(&mut self, cancelled: &super::models::Cancelled) {
        let Some(id) = RequestId::from_json(&cancelled.request_id) else {
            return;
        };
        if let Some(cancel) = self.server_requests.get(&id) {
            tracing::debug!(%id, reason = ?cancelled.reason, "server cancelled its request");
            cancel.send_replace(Some(cancelled.reason.clone().unwrap_or_default()));
        }
    }

    fn server_request(&mut self, request: ServerRequest) {
        let id = request.id.clone();
        if self.handlers.is_empty() {
            self.session
                .respond(id, Err(not_found(&request.method)), now());
            return;
        }
        if self.server_requests.contains_key(&id) {
            // One answer per id: the one being handled will give it.
            tracing::warn!(%id, "server request id reused while in flight: ignored");
            return;
        }
        if self.server_requests.len() >= MAX_SERVER_REQUESTS {
            let error = internal("too many concurrent server requests");
            self.session.respond(id, Err(error), now());
            return;
        }
        let (cancel_tx, cancel_rx) = watch::channel(None);
        self.server_requests.insert(id.clone(), cancel_tx);
        let ctx = RequestContext::new(&request, cancel_rx.clone());
        let handling = self.handlers.dispatch(request, ctx);
        let answers = self.answer_tx.clone();
        tokio::spawn(
            async move {
                // A panicking handler must still answer, or the server waits forever.
                let handling = AssertUnwindSafe(handling).catch_unwind();
                let mut cancelled = cancel_rx;
                let answer = tokio::select! {
                    result = handling => Some(result.unwrap_or_else(|_| {
                        tracing::error!("server request handler panicked");
                        Err(internal("internal error"))
                    })),
                    // The server no longer wants the answer: stop the handler, send nothing.
                    _ = cancelled.wait_for(Option::is_some) => None,
                };
                let _ = answers.send((id, answer));
            }
            .in_current_span(),
        );
    }
}
