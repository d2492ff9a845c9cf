//! What the driver and the callers share behind one lock: the sans-IO [`Session`] and the
//! bookkeeping around it (replies, id translation, progress routing, idle timers, server
//! requests). Every input goes in through a method here and is followed by [`State::pump`],
//! which drains the session's transmits and outputs: replies are sent, events published,
//! exchanges queued for the driver or, for a call's own first POST, handed to its caller.
//! No I/O and no awaiting here: whoever holds the lock holds it briefly.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::future::{AbortHandle, AbortRegistration};
use rustc_hash::{FxHashMap, FxHashSet};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::core::Core;
use super::dispatch::Dispatch;
use super::effects::{Effects, TaskOp};
use super::ledger::{Gate, Records, Refusal};
use crate::client::era_cache::EraCache;
use crate::client::events::{Published, ServerNotification};
use crate::client::handlers::{internal, not_found, Handlers};
use crate::client::http::{Endpoint, ExchangeEvent, Outgoing};
use crate::client::ledger::LedgerEntry;
use crate::client::models::{Cancelled, Progress, TypedNotification};
#[allow(deprecated)]
use crate::client::task_store::{StoredTask, TaskStore};
use crate::error::{Error, ErrorKind, RpcError};
use crate::ids::RequestId;
use crate::proto::{
    CallId, CallRequest, HttpId, HttpPurpose, Output, ServerRequest, Session, SessionEvent,
    Transmit, TransportFailure,
};

/// Server-to-client requests handled at once; more are answered with an error at once, so a
/// server cannot make the client spawn without bound. The inputs of the app's own 2026-07-28
/// calls do not count: a refusal would not reach the server but end the call the input serves,
/// on a limit of the client's own, and they are bounded already (16 for each call in flight,
/// ended with their call, its deadline included).
const MAX_SERVER_REQUESTS: usize = 32;
/// How long a dropped client waits for its DELETE before the driver stops anyway, and its
/// ledger writer for the writes left.
pub(super) const CLOSE_GRACE: Duration = Duration::from_secs(5);

pub(crate) type Reply = oneshot::Sender<Result<Value, Error>>;

/// What the application side asks of the session.
pub(crate) enum Command {
    /// Initialize (or report the result of the initialization already done).
    Connect { reply: Reply },
    /// The call's handle was dropped or cancelled (with the application's reason); `call`
    /// is the session's id [`State::register`] returned.
    Cancel {
        call: CallId,
        reason: Option<String>,
    },
    /// A notification to the server.
    Notify {
        method: String,
        params: Option<Value>,
    },
    /// Close the session (DELETE).
    Close { reply: Reply },
    /// Answers `Ok` while the session takes calls, [`ErrorKind::Closed`] once it was closed:
    /// a recovery asks before it claims any ledger entry.
    EnsureOpen { reply: Reply },
    /// The last client handle is gone: close (best effort) and stop.
    Shutdown,
}

/// A call the application waits on; [`State::register`] gives it the session's id.
pub(crate) enum Registration {
    /// A request; `id` names it in events.
    Call {
        id: CallId,
        request: CallRequest,
        /// Longest time without progress before the call is abandoned with a timeout.
        idle: Option<Duration>,
        /// Where the call's own progress goes.
        progress: Option<mpsc::Sender<Progress>>,
        reply: Reply,
        /// The call's span, started where it was made.
        #[cfg(feature = "otel")]
        trace: Option<Box<crate::client::telemetry::CallTrace>>,
    },
    /// Poll a task created before.
    ResumeTask {
        id: CallId,
        task_id: String,
        timeout: Option<Duration>,
        reply: Reply,
    },
    /// Pick up the call a ledger entry records (another process's, or an earlier client's),
    /// due at `deadline`.
    PickUp {
        id: CallId,
        entry: LedgerEntry,
        deadline: std::time::Instant,
        reply: Reply,
    },
}

/// The session's view of time; tokio's clock, so paused-time tests drive it.
pub(super) fn now() -> std::time::Instant {
    Instant::now().into_std()
}

/// An exchange the session asked for, not yet started: the driver turns it into a future it
/// polls, or a caller performs it in its own task. Either way `abort` (kept in
/// [`State::exchanges`]) stops it.
pub(crate) struct Pending {
    pub(crate) outgoing: Outgoing,
    pub(crate) registration: AbortRegistration,
    /// The ledger write a call's POST must wait for before it leaves.
    pub(crate) gate: Option<Arc<Gate>>,
}

enum Waiter {
    Connect { reply: Reply },
    Call { reply: Reply },
    Close { reply: Option<Reply> },
}

struct Shutdown {
    /// The DELETE still awaited, if any.
    close: Option<CallId>,
    deadline: Instant,
}

/// The state behind the lock: replies and routing, never protocol state (that is the
/// session's).
#[allow(deprecated)]
pub(crate) struct State {
    session: Session,
    endpoint: Arc<Endpoint>,
    handlers: Arc<Handlers>,
    published: Arc<Published>,
    era_cache: EraCache,
    /// The application's task store, when it set one (deprecated: the ledger keeps tasks).
    task_store: Option<Arc<dyn TaskStore>>,
    /// The entries of calls in flight, when the client keeps a ledger.
    records: Option<Records>,
    /// Where handlers' answers go back to (weak: the state lives inside it).
    core: Weak<Core>,
    /// Exchanges in flight, wherever they run. Reports for an id not in here (aborted,
    /// finished) are dropped.
    exchanges: FxHashMap<HttpId, AbortHandle>,
    /// Those of them that are notification POSTs (or answers to the server): a dropped
    /// client's driver lets them finish, as a dropped call's future promised its server a
    /// cancellation. Each is bounded by the endpoint's own timeout for them.
    notifying: FxHashSet<HttpId>,
    /// Exchanges for the driver to start.
    pub(super) to_start: Vec<Pending>,
    /// The call whose registration is being pumped, when its caller performs the call's first
    /// POST itself; the POST is then left in `inline` instead of `to_start`.
    inline_for: Option<CallId>,
    inline: Option<Pending>,
    /// The exchange whose report being applied holds its end.
    pub(super) ending: Option<HttpId>,
    calls: FxHashMap<CallId, Waiter>,
    /// Server requests being handled; their number is bounded by [`MAX_SERVER_REQUESTS`].
    server_requests: HashMap<RequestId, Handling>,
    /// Numbers the server requests handed to handlers (see [`Handling::delivery`]).
    deliveries: u64,
    /// What the inputs since the lock was taken lead to outside the session, to be carried
    /// out once it is released.
    effects: Effects,
    /// Effects the timer task collected that run application code: the exchange runner
    /// carries them out, so the task keeping the deadlines never runs any.
    pub(super) deferred: Effects,
    /// Where each call's own progress goes (calls started as handles).
    progress: FxHashMap<CallId, mpsc::Sender<Progress>>,
    /// Calls that reset their timeout on progress: the allowed silence and its end.
    idle: FxHashMap<CallId, (Duration, Instant)>,
    /// The same ends, ordered.
    idle_queue: BTreeSet<(Instant, CallId)>,
    /// Calls whose allowed silence lapsed, with that silence, until the session's own
    /// completion (which knows whether each had been sent) answers them.
    idle_lapsed: FxHashMap<CallId, Duration>,
    shutdown: Option<Shutdown>,
    /// The deadline the driver's timer is armed for (`None`: not armed). Whoever adds an
    /// earlier one wakes the driver; later ones it finds when its timer fires.
    pub(super) armed: Option<Instant>,
    /// The driver has stopped: nothing more is sent.
    stopped: bool,
    #[cfg(feature = "otel")]
    telemetry: crate::client::telemetry::Tracker,
}

/// What a [`State`] is built from.
#[allow(deprecated)]
pub(crate) struct Parts {
    pub(crate) session: Session,
    pub(crate) endpoint: Arc<Endpoint>,
    pub(crate) handlers: Arc<Handlers>,
    pub(crate) published: Arc<Published>,
    pub(crate) era_cache: EraCache,
    pub(crate) task_store: Option<Arc<dyn TaskStore>>,
    pub(crate) records: Option<Records>,
}

impl State {
    pub(super) fn new(parts: Parts, core: Weak<Core>) -> Self {
        #[cfg(feature = "otel")]
        let telemetry = crate::client::telemetry::Tracker::new(
            parts.endpoint.telemetry.clone(),
            parts.endpoint.limits.max_event_size,
        );
        State {
            session: parts.session,
            endpoint: parts.endpoint,
            handlers: parts.handlers,
            published: parts.published,
            era_cache: parts.era_cache,
            task_store: parts.task_store,
            records: parts.records,
            core,
            exchanges: FxHashMap::default(),
            notifying: FxHashSet::default(),
            to_start: Vec::new(),
            inline_for: None,
            inline: None,
            ending: None,
            calls: FxHashMap::default(),
            server_requests: HashMap::new(),
            deliveries: 0,
            effects: Effects::default(),
            deferred: Effects::default(),
            progress: FxHashMap::default(),
            idle: FxHashMap::default(),
            idle_queue: BTreeSet::new(),
            idle_lapsed: FxHashMap::default(),
            shutdown: None,
            armed: None,
            stopped: false,
            #[cfg(feature = "otel")]
            telemetry,
        }
    }

    pub(super) fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// Registers a call and pumps; returns, when `inline` and the session sends the call's
    /// POST at once, that POST for the caller to perform (else the driver performs it).
    pub(super) fn register(&mut self, registration: Registration, inline: bool) -> Option<Pending> {
        let now = now();
        let call = match registration {
            Registration::Call {
                id,
                request,
                idle,
                progress,
                reply,
                #[cfg(feature = "otel")]
                trace,
            } => {
                tracing::debug!(method = %request.method, "call submitted");
                if self.calls.contains_key(&id) {
                    // Two calls under one id would receive each other's answers: the second
                    // is refused, the first goes on. (A clone of a `ToolCall` or a `Request`
                    // has an id of its own, so only a bug gets here.)
                    let error = Error::new(
                        ErrorKind::InvalidConfig,
                        "this call is already in flight: make a new ToolCall per call",
                    );
                    self.effects.reply(reply, Err(error));
                    return None;
                }
                self.calls.insert(id, Waiter::Call { reply });
                if let Some(progress) = progress {
                    self.progress.insert(id, progress);
                }
                if let Some(period) = idle {
                    self.arm_idle(id, period);
                }
                self.session.submit(id, request, now);
                #[cfg(feature = "otel")]
                self.telemetry.registered(id, trace);
                id
            }
            Registration::ResumeTask {
                id,
                task_id,
                timeout,
                reply,
            } => {
                self.calls.insert(id, Waiter::Call { reply });
                self.session.resume_task(id, &task_id, timeout, now);
                id
            }
            Registration::PickUp {
                id,
                entry,
                deadline,
                reply,
            } => {
                tracing::debug!(method = %entry.method(), entry = %entry.id(), "picking up a call");
                if self.session.is_closed() {
                    // Closed since the recovery asked: the entry is not this client's to end.
                    // It stays in the ledger, unclaimed, for the next client, and the call
                    // may have run (its entry says it may).
                    if let Some(records) = &self.records {
                        records.writer().unclaim(entry.id());
                    }
                    let closed = Error::new(
                        ErrorKind::Closed,
                        "the client was closed: the call is left in the ledger",
                    )
                    .with_may_have_run();
                    self.effects.reply(reply, Err(closed));
                    return None;
                }
                self.calls.insert(id, Waiter::Call { reply });
                if let Some(records) = &mut self.records {
                    let task = matches!(entry.stage(), crate::proto::CallStage::Task { .. });
                    records.adopt(id, entry.id().clone(), entry.deadline(), task);
                }
                self.session.pick_up(id, entry.to_checkpoint(deadline), now);
                id
            }
        };
        self.inline_for = inline.then_some(call);
        self.pump();
        self.inline_for = None;
        #[cfg(feature = "otel")]
        self.telemetry.settled();
        self.inline.take()
    }

    /// Whether the timer task must look again: a deadline earlier than its timer's, or a
    /// shutdown that may end.
    pub(super) fn timer_needed(&self) -> bool {
        self.shutdown.is_some()
            || match (self.next_deadline(), self.armed) {
                (Some(next), Some(armed)) => next < armed,
                (Some(_), None) => true,
                (None, _) => false,
            }
    }

    /// Whether the exchange runner has something to do that it does not know of yet:
    /// exchanges to start, effects to carry out, a shutdown that may end.
    pub(super) fn runner_needed(&self) -> bool {
        !self.to_start.is_empty() || !self.deferred.is_empty() || self.shutdown.is_some()
    }

    /// The earliest of the session's next deadline, the idle timers and the shutdown's bound
    /// (until it passes: notifications still in flight then wake the driver as they end).
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        let session = self.session.poll_timeout().map(Instant::from_std);
        let idle = self.idle_queue.first().map(|(at, _)| *at);
        let shutdown = self
            .shutdown
            .as_ref()
            .map(|s| s.deadline)
            .filter(|d| Instant::now() < *d);
        [session, idle, shutdown].into_iter().flatten().min()
    }

    /// Whether the driver may stop: the client is gone, its DELETE answered or overdue, and
    /// no notification it sent still in flight (a server answering the DELETE first would
    /// otherwise see a dropped call's cancellation cut off).
    pub(super) fn may_stop(&self) -> bool {
        self.notifying.is_empty()
            && self
                .shutdown
                .as_ref()
                .is_some_and(|s| s.close.is_none() || Instant::now() >= s.deadline)
    }

    /// The driver's timer fired for `fired`: whatever is due then fires.
    pub(super) fn handle_timeout(&mut self, fired: Instant) {
        self.session.handle_timeout(fired.into_std());
        self.idle_expired(fired);
        self.pump();
        self.idle_unanswered();
    }

    /// A handler's answer to the server request it was handed as `delivery` (`None`: the
    /// server cancelled it, nothing is sent).
    pub(super) fn handle_answer(
        &mut self,
        id: RequestId,
        delivery: u64,
        result: Option<Result<Value, RpcError>>,
    ) {
        // An answer to a request that a later one under the same id replaced answers nothing:
        // only the latest delivery of an id may answer it.
        let current = self
            .server_requests
            .get(&id)
            .is_some_and(|h| h.delivery == delivery);
        if !current || self.stopped {
            return;
        }
        self.server_requests.remove(&id);
        match result {
            Some(result) => self.session.respond(id, result, now()),
            // The server's cancellation withdrew the request already; whatever else stops a
            // handler unanswered owes nothing either.
            None => {
                tracing::debug!(%id, "server request cancelled: not answered");
                self.session.withdraw_request(&id);
            }
        }
        self.pump();
    }

    /// The driver stopped (or is gone): every exchange is aborted, every waiting call fails
    /// with [`ErrorKind::Closed`], running handlers learn that nobody will take their answer,
    /// nothing more is sent, and the event and notification streams end.
    pub(super) fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        for (_, exchange) in self.exchanges.drain() {
            exchange.abort();
        }
        self.notifying.clear();
        self.to_start.clear();
        for (_, handling) in self.server_requests.drain() {
            handling.cancel("client closed");
        }
        for (_, waiter) in self.calls.drain() {
            let stopped = Error::new(
                ErrorKind::Closed,
                "the client's driver stopped before the call completed",
            );
            let (reply, error) = match waiter {
                Waiter::Connect { reply } => (Some(reply), stopped),
                // Whether the call was on the wire when the driver stopped is not known here.
                Waiter::Call { reply, .. } => (Some(reply), stopped.with_may_have_run()),
                Waiter::Close { reply } => (reply, stopped),
            };
            if let Some(reply) = reply {
                let _ = reply.send(Err(error));
            }
        }
        self.progress.clear();
        self.idle.clear();
        self.idle_queue.clear();
        // Nothing will be published again, but the client holds the senders: only closing
        // them ends its subscribers' streams. No `SessionEvent::Closed` first, as the app did
        // not close the session (its server was never told).
        self.published.close();
        #[cfg(feature = "otel")]
        self.telemetry.stop();
    }

    pub(super) fn handle_command(&mut self, command: Command) {
        let now = now();
        match command {
            // The session answers from its state: at once when ready (or closed, or lost),
            // else once the handshake ends. The first call or notification connects too.
            Command::Connect { reply } => {
                let call = self.session.connect(now);
                self.calls.insert(call, Waiter::Connect { reply });
            }
            Command::Cancel { call, reason } => {
                if self.calls.remove(&call).is_some() {
                    match &reason {
                        Some(reason) => {
                            tracing::debug!(call = call.0, %reason, "call cancelled by the application")
                        }
                        None => {
                            tracing::debug!(call = call.0, "call abandoned by the application")
                        }
                    }
                    match self.withdraw_post(call) {
                        Some(unsent) => self.session.cancel_unsent(call, unsent, now),
                        None => self.session.cancel(call, now),
                    }
                    #[cfg(feature = "otel")]
                    self.telemetry.abandoned(call, None);
                    self.forget(call);
                    self.entry_ended(call, true, false);
                }
            }
            Command::Notify { method, params } => self.session.notify(&method, params, now),
            Command::Close { reply } => {
                let call = self.session.close(now);
                self.calls
                    .insert(call, Waiter::Close { reply: Some(reply) });
            }
            Command::EnsureOpen { reply } => {
                let open = if self.session.is_closed() {
                    Err(Error::new(ErrorKind::Closed, "the client was closed"))
                } else {
                    Ok(Value::Null)
                };
                self.effects.reply(reply, open);
            }
            Command::Shutdown => self.begin_shutdown(),
        }
    }

    /// Takes back `call`'s POST if the driver has not started it yet (a call started and
    /// dropped before the driver ran): it is never sent then.
    fn withdraw_post(&mut self, call: CallId) -> Option<HttpId> {
        let session = &self.session;
        let at = self
            .to_start
            .iter()
            .position(|p| session.exchange_call(p.outgoing.request.id) == Some(call))?;
        let id = self.to_start.remove(at).outgoing.request.id;
        self.forget_exchange(id);
        Some(id)
    }

    pub(super) fn begin_shutdown(&mut self) {
        if self.shutdown.is_some() {
            return;
        }
        tracing::debug!("last client handle dropped: closing the session");
        let call = self.session.close(now());
        self.calls.insert(call, Waiter::Close { reply: None });
        self.shutdown = Some(Shutdown {
            close: Some(call),
            deadline: Instant::now() + CLOSE_GRACE,
        });
    }

    /// Exchange `id` is over (ended, failed, aborted or withdrawn): its abort handle, if it
    /// was still in flight.
    fn forget_exchange(&mut self, id: HttpId) -> Option<AbortHandle> {
        self.notifying.remove(&id);
        self.exchanges.remove(&id)
    }

    /// One event of an exchange, then the pump. Returns whether the exchange is still wanted
    /// (false once it was aborted or has ended).
    pub(super) fn handle_exchange(&mut self, event: ExchangeEvent) -> bool {
        let id = event.id();
        if !self.exchanges.contains_key(&id) {
            return false;
        }
        let now = now();
        #[cfg(feature = "otel")]
        self.telemetry.exchange_event(&event);
        match event {
            ExchangeEvent::Head {
                id,
                status,
                headers,
            } => self.session.handle_head(id, status, &headers, now),
            ExchangeEvent::Data { id, bytes } => self.session.handle_data(id, &bytes, now),
            ExchangeEvent::End { id } => {
                self.forget_exchange(id);
                self.session.handle_end(id, now);
            }
            ExchangeEvent::Failed { id, failure } => {
                self.forget_exchange(id);
                self.session.handle_error(id, failure, now);
            }
            ExchangeEvent::Json { id, body, decoded } => {
                self.forget_exchange(id);
                self.session.handle_json_body(id, &body, decoded, now);
            }
            ExchangeEvent::Events { id, events } => self.session.handle_events(id, events, now),
            ExchangeEvent::TooLarge { id, error } => self.session.handle_too_large(id, error, now),
        }
        self.pump();
        #[cfg(feature = "otel")]
        self.telemetry.exchange_applied(id, &self.session);
        self.exchanges.contains_key(&id)
    }

    /// Drains the session's actions until it has nothing more to say.
    pub(super) fn pump(&mut self) {
        // Outputs first: a checkpoint comes before the POST it describes, which then waits
        // for its write.
        loop {
            let mut progressed = false;
            while let Some(output) = self.session.poll_output() {
                progressed = true;
                self.output(output);
            }
            while let Some(transmit) = self.session.poll_transmit() {
                progressed = true;
                self.transmit(transmit);
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
                if let Some(old) = self.exchanges.insert(id, abort) {
                    old.abort();
                }
                if request.purpose == HttpPurpose::Notify {
                    self.notifying.insert(id);
                } else {
                    self.notifying.remove(&id);
                }
                let call = self.session.exchange_call(id);
                let gate = call.and_then(|call| self.ledger_gate(call));
                let outgoing = Outgoing {
                    #[cfg(feature = "otel")]
                    attempt: self.telemetry.attempt(&self.session, &request),
                    request,
                };
                let pending = Pending {
                    outgoing,
                    registration,
                    gate,
                };
                let own_post =
                    self.inline_for.is_some() && self.inline.is_none() && call == self.inline_for;
                if own_post {
                    self.inline = Some(pending);
                } else {
                    self.to_start.push(pending);
                }
            }
            Transmit::Abort(id) => {
                #[cfg(feature = "otel")]
                self.telemetry.aborted(id);
                if let Some(exchange) = self.forget_exchange(id) {
                    // One whose end is in the report being applied stops by itself: aborting
                    // it would only wake the task reading it, from inside its own poll.
                    if self.ending != Some(id) {
                        tracing::trace!(http = id.0, "exchange aborted");
                        exchange.abort();
                    }
                }
            }
        }
    }

    #[allow(deprecated)]
    fn output(&mut self, output: Output) {
        match output {
            Output::Completed { call, result } => {
                #[cfg(feature = "otel")]
                self.telemetry.completed(call, &result);
                self.complete(call, result);
            }
            Output::Checkpoint { call, checkpoint } => {
                if let Some(records) = &mut self.records {
                    records.checkpoint(call, *checkpoint, (now(), std::time::SystemTime::now()));
                    self.effects.ledger(records.writer());
                }
            }
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
                    call,
                    method: notification.method,
                    params: notification.params,
                });
            }
            Output::ServerRequestWithdrawn(id) => {
                if let Some(handling) = self.server_requests.remove(&id) {
                    // Withdrawn by the close itself (its outputs are pumped once it is
                    // closed), or because its session (or, for an input, its call) ended.
                    let why = if self.session.is_closed() {
                        "client closed"
                    } else {
                        "session replaced"
                    };
                    handling.cancel(why);
                }
            }
            Output::ServerRequest(request) => {
                #[cfg(feature = "otel")]
                self.telemetry.server_request();
                self.server_request(request);
            }
            Output::Event(event) => {
                #[cfg(feature = "otel")]
                self.telemetry.event(&event, &self.session);
                self.published.set_status(self.session.extension_status());
                self.published
                    .set_session_id(self.session.session_id().cloned());
                match &event {
                    SessionEvent::EraDetected { era } => {
                        tracing::info!(?era, "era detected");
                        // Not an era read from an answer that says nothing about it (a 429
                        // to the probe, say): the next client of the origin probes again.
                        if let Some(era) = self.session.era_to_remember() {
                            self.era_cache.record(&self.endpoint.url, era);
                        }
                        self.published.set_era(*era);
                    }
                    SessionEvent::TaskCreated { call, task_id } => {
                        if let Some(records) = &mut self.records {
                            records.task_created(*call, task_id);
                        }
                        // Recorded before the first poll is sent: the runner that sends it
                        // carries out the effects queued before it first.
                        if let Some(store) = &self.task_store {
                            let task = StoredTask {
                                task_id: task_id.clone(),
                                endpoint: self.endpoint.url.as_str().to_owned(),
                            };
                            self.effects.task(store, TaskOp::Created(task));
                        }
                    }
                    SessionEvent::TaskFinished { call, task_id } => {
                        if let Some(records) = &mut self.records {
                            records.task_finished(*call);
                        }
                        if let Some(store) = &self.task_store {
                            let op = TaskOp::Finished(task_id.clone());
                            self.effects.task(store, op);
                        }
                    }
                    SessionEvent::Reinitialized {
                        capabilities_changed: true,
                        ..
                    } => {
                        tracing::info!(event = ?event, "session event");
                        // Before any waiter of the new session is answered (they come later
                        // among these outputs): whoever it answers sees the change.
                        self.published.capabilities_changed();
                    }
                    SessionEvent::SessionLost => tracing::warn!("session lost"),
                    SessionEvent::Closed => tracing::debug!("session closed"),
                    other => tracing::info!(event = ?other, "session event"),
                }
                let closed = matches!(event, SessionEvent::Closed);
                self.published.event(event);
                if closed {
                    self.published.close();
                }
            }
        }
    }

    fn complete(&mut self, call: CallId, result: Result<Value, Error>) {
        self.forget(call);
        let result = self.silence_timeout(call, result);
        let closed = matches!(&result, Err(e) if e.kind() == ErrorKind::Closed);
        self.entry_ended(call, false, closed);
        match self.calls.remove(&call) {
            Some(Waiter::Connect { reply }) => {
                match &result {
                    Ok(_) => tracing::debug!("connected"),
                    Err(err) => tracing::debug!(error = %err, "connect failed"),
                }
                self.effects.reply(reply, result);
            }
            Some(Waiter::Call { reply }) => self.effects.reply(reply, result),
            Some(Waiter::Close { reply }) => {
                if let Some(shutdown) = &mut self.shutdown {
                    if shutdown.close == Some(call) {
                        shutdown.close = None;
                    }
                }
                if let Some(reply) = reply {
                    self.effects.reply(reply, result);
                }
            }
            // Cancelled by the application: nobody is waiting.
            None => {}
        }
    }

    /// The gate `call`'s POST waits at: the write of its last checkpoint, or of its entry
    /// again after a write it waited for failed.
    fn ledger_gate(&mut self, call: CallId) -> Option<Arc<Gate>> {
        let records = self.records.as_mut()?;
        if records.needs_rewrite(call) {
            if let Some(checkpoint) = self.session.checkpoint(call) {
                records.checkpoint(call, checkpoint, (now(), std::time::SystemTime::now()));
                self.effects.ledger(records.writer());
            }
        }
        records.gate(call)
    }

    /// `call` ended (`abandoned`: given up by the application; `closed`: failed by the
    /// client's close): its entry goes, unless the record says otherwise.
    fn entry_ended(&mut self, call: CallId, abandoned: bool, closed: bool) {
        if let Some(records) = &mut self.records {
            if records.ended(call, abandoned, closed) {
                self.effects.ledger(records.writer());
            }
        }
    }

    /// The ledger write exchange `id` (a call's POST) waited for failed: the POST is not
    /// sent, as if it could not connect, and the call's next POST writes its entry first. An
    /// entry longer than the ledger stores ends the call instead: no write of it can succeed,
    /// and trying again would only wait out the call's attempts or deadline.
    pub(super) fn ledger_refused(&mut self, id: HttpId, refusal: Refusal) {
        let call = self.session.exchange_call(id);
        let error = match (refusal, call) {
            (Refusal::TooLong(error), Some(call)) => return self.unrecordable(id, call, error),
            (Refusal::Failed(error) | Refusal::TooLong(error), _) => error,
        };
        if let (Some(records), Some(call)) = (&mut self.records, call) {
            records.refused(call);
        }
        let failure =
            TransportFailure::Connect(format!("the ledger could not record the call: {error}"));
        self.handle_exchange(ExchangeEvent::Failed { id, failure });
    }

    /// `call`'s entry is longer than the ledger stores: its POST, exchange `id`, is dropped
    /// unsent and the call ends with `error` ([`ErrorKind::Ledger`]), saying it may have run
    /// only if an earlier send of it may have.
    fn unrecordable(&mut self, id: HttpId, call: CallId, error: Error) {
        if self.forget_exchange(id).is_none() {
            // Aborted meanwhile (the call was cancelled, the client stopped).
            return;
        }
        let ran = self
            .records
            .as_ref()
            .is_some_and(|records| records.may_have_run(call));
        let error = if ran {
            error.with_may_have_run()
        } else {
            error
        };
        self.session.cancel_unsent(call, id, now());
        #[cfg(feature = "otel")]
        self.telemetry.abandoned(call, Some(&error));
        self.complete(call, Err(error));
        self.pump();
    }

    /// Whether ledger entry `id` is one of this client's calls in flight, or one that ended
    /// while a recovery may have read its entry.
    pub(super) fn holds_entry(&self, id: &crate::client::ledger::EntryId) -> bool {
        self.records.as_ref().is_some_and(|r| r.holds(id))
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

    /// Calls silent for longer than they allow: failed with a timeout, ended as at their
    /// deadline (the server is told; a task is left running, its entry kept to be resumed).
    fn idle_expired(&mut self, now: Instant) {
        while let Some(&(at, call)) = self.idle_queue.first() {
            if at > now {
                break;
            }
            let period = self.idle.get(&call).map(|(p, _)| *p).unwrap_or_default();
            self.forget(call);
            if matches!(self.calls.get(&call), Some(Waiter::Call { .. })) {
                tracing::debug!(call = call.0, ?period, "no progress in time: the wait ends");
                // This timeout is the call's own, only restarted by progress: its lapse means
                // what the deadline's does. Task polls are no progress (an endless "working"
                // would never time out), so cancelling the task here would end durable work
                // a plain timeout keeps. The session's completion answers the call, saying
                // whether it may have run, and ends the ledger entry.
                self.idle_lapsed.insert(call, period);
                self.session.expire(call, now.into_std());
            }
        }
    }

    /// The error of a call whose allowed silence lapsed, from the session's for it.
    fn silence_timeout(
        &mut self,
        call: CallId,
        result: Result<Value, Error>,
    ) -> Result<Value, Error> {
        match (self.idle_lapsed.remove(&call), result) {
            (Some(period), Err(err)) if err.kind() == ErrorKind::Timeout => {
                let timeout =
                    Error::new(ErrorKind::Timeout, format!("no progress within {period:?}"));
                Err(if err.may_have_run() {
                    timeout.with_may_have_run()
                } else {
                    timeout
                })
            }
            (_, result) => result,
        }
    }

    /// Calls whose silence lapsed and that the session did not end (it had none of them):
    /// answered here, as ones that may have run, since nothing says otherwise.
    fn idle_unanswered(&mut self) {
        for (call, period) in std::mem::take(&mut self.idle_lapsed) {
            if let Some(Waiter::Call { reply }) = self.calls.remove(&call) {
                let timeout =
                    Error::new(ErrorKind::Timeout, format!("no progress within {period:?}"))
                        .with_may_have_run();
                #[cfg(feature = "otel")]
                self.telemetry.abandoned(call, Some(&timeout));
                self.effects.reply(reply, Err(timeout));
            }
        }
    }

    /// The server cancels a request it sent: its handler stops, no answer is sent, and the
    /// session forgets the request at once, so the id is free for the server's next request
    /// (the handler's late answer, if any, answers nothing: its delivery is gone).
    ///
    /// Only a request the session released is the server's to cancel: not a 2026-07-28 call's
    /// input, whose round waits for its answer. (A replaced session's server names its own
    /// requests, not the current session's under the same ids: the session hands out no
    /// cancellation read on such a stream.)
    fn on_cancelled(&mut self, cancelled: &Cancelled) {
        let Some(id) = RequestId::from_json(&cancelled.request_id) else {
            return;
        };
        if !self.session.withdraw_request(&id) {
            return;
        }
        if let Some(handling) = self.server_requests.remove(&id) {
            tracing::debug!(%id, reason = ?cancelled.reason, "server cancelled its request");
            handling.cancel(cancelled.reason.as_deref().unwrap_or_default());
        }
    }

    fn server_request(&mut self, request: ServerRequest) {
        let id = request.id.clone();
        // No bound on the method here: the session hands out no request (a server's own, or
        // a 2026-07-28 call's input) whose method is longer than a handler could take.
        let input = self.session.awaits_input(&id);
        if self.handlers.is_empty() {
            self.session
                .respond(id, Err(not_found(&request.method)), now());
            return;
        }
        if let Some(earlier) = self.server_requests.remove(&id) {
            // The session hands an id out once while it is open and withdraws it when its
            // session ends, so this should not happen; if it does, the newer request is the
            // one the server waits on.
            earlier.cancel("superseded");
        }
        if !input
            && self.server_requests.values().filter(|h| !h.input).count() >= MAX_SERVER_REQUESTS
        {
            let error = internal("too many concurrent server requests");
            self.session.respond(id, Err(error), now());
            return;
        }
        let (cancel_tx, cancel) = watch::channel(None);
        self.deliveries += 1;
        let delivery = self.deliveries;
        let handling = Handling {
            delivery,
            cancel: cancel_tx,
            input,
        };
        self.server_requests.insert(id, handling);
        self.effects.dispatch(Dispatch {
            request,
            delivery,
            cancel,
            handlers: self.handlers.clone(),
            core: self.core.clone(),
        });
    }

    /// What the inputs since the lock was taken lead to outside the session.
    pub(super) fn take_effects(&mut self) -> Effects {
        std::mem::take(&mut self.effects)
    }

    /// The end of `call`'s allowed silence, if it resets its timeout on progress.
    pub(super) fn idle_end(&self, call: CallId) -> Option<Instant> {
        self.idle.get(&call).map(|(_, at)| *at)
    }
}

/// A server request in a handler's hands.
struct Handling {
    /// Which delivery this is: its answer must name it, so that a late answer to an earlier
    /// session's request under the same id is not taken for this one's.
    delivery: u64,
    /// Tells the handler that its answer is no longer wanted, and why.
    cancel: watch::Sender<Option<String>>,
    /// It answers an input of one of the app's calls, not the server: it takes none of the
    /// `MAX_SERVER_REQUESTS` slots.
    input: bool,
}

impl Handling {
    fn cancel(&self, why: &str) {
        self.cancel.send_replace(Some(why.to_owned()));
    }
}
