//! The session state machine.
//!
//! One [`Session`] follows one logical MCP connection across every stream, resume and
//! re-initialization. Failures are turned into [`Failure`]s and handed to the pure
//! [`decide`]; this module only gathers the facts and carries the decisions out.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::HeaderMap;
use serde_json::{json, Map, Value};
use tracing::{debug, info, warn};

use super::config::{ResendPolicy, SessionConfig, SUPPORTED_PROTOCOL_VERSIONS};
use super::decide::{decide, CallFate, Decision, Failure, State};
use super::ext::{self, ResumeSafety};
use super::jsonrpc::{self, Message};
use super::{
    CallId, CallRequest, HttpId, HttpMethod, HttpPurpose, HttpRequest, Notification, Output,
    ReinitReason, RejectReason, ServerRequest, SessionEvent, Transmit, TransportFailure,
};
use crate::error::{Error, ErrorKind, RpcError};
use crate::ids::{CapabilityHash, EventId, IdempotencyKey, RequestId, SessionId};
use crate::sse::{SseDecoder, SseEvent};

/// Error bodies are read only to classify them; a larger one is cut.
const MAX_ERROR_BODY: usize = 64 * 1024;
/// A server's `retry` above this is clamped: a hostile value must not park a call forever
/// (its deadline still bounds it).
const MAX_RETRY: Duration = Duration::from_secs(3600);
/// The first protocol version that has the `MCP-Protocol-Version` header.
const VERSION_HEADER_SINCE: &str = "2025-06-18";
/// The only protocol version that allows JSON-RPC batches.
const BATCH_VERSION: &str = "2025-03-26";

/// SplitMix64: a tiny seeded generator for jitter, so the core never reads entropy or clocks.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Idle,
    Initializing,
    Ready,
    Closing,
    Terminated,
}

/// What one established session negotiated.
#[derive(Debug, Clone)]
struct Ctx {
    generation: u64,
    id: Option<SessionId>,
    protocol_version: String,
    server_capabilities: Value,
    hash: Option<CapabilityHash>,
    ext: Option<ResumeSafety>,
}

#[derive(Debug)]
enum InitStep {
    Backoff { until: Instant },
    Initialize { http: HttpId, rpc: RequestId },
    Initialized { http: HttpId },
}

#[derive(Debug)]
struct Init {
    step: InitStep,
    /// `None` for the first connect.
    reason: Option<ReinitReason>,
    deadline: Instant,
    head_session_id: Option<SessionId>,
    head_hash: Option<CapabilityHash>,
    pending: Option<Ctx>,
    result: Option<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retry {
    Resend,
    Resume,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CallState {
    /// Waits for the session to be ready, then is POSTed.
    Waiting,
    Backoff {
        until: Instant,
        then: Retry,
    },
    Posting(HttpId),
    Resuming(HttpId),
}

#[derive(Debug)]
struct Call {
    method: String,
    params: Option<Value>,
    key: Option<IdempotencyKey>,
    deadline: Instant,
    state: CallState,
    rpc: Option<RequestId>,
    /// Session generation of the last send.
    generation: u64,
    /// Capability hash of the session of the last send.
    hash: Option<CapabilityHash>,
    /// Whether that session advertised idempotency.
    server_dedups: bool,
    cursor: Option<EventId>,
    retry: Option<Duration>,
    attempts: u32,
    no_progress: u32,
    may_have_run: bool,
    sends: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ExKind {
    Initialize,
    Initialized,
    Post(CallId),
    Resume(CallId),
    Listen,
    Notify,
    Delete,
}

#[derive(Debug)]
enum Body {
    /// No head yet.
    Pending,
    Json(Vec<u8>),
    Sse(Box<SseDecoder>),
    Error(Vec<u8>),
}

#[derive(Debug)]
struct Exchange {
    kind: ExKind,
    carried_session_id: bool,
    allow_batch: bool,
    status: Option<u16>,
    body: Body,
    /// A GET with `Last-Event-ID`.
    resumed: bool,
    /// Delivered anything new.
    progress: bool,
    /// Next sequenced id expected (resume-safety extension).
    expect_seq: Option<(String, u64)>,
    /// The driver reported its end; no abort is owed.
    ended: bool,
    /// The extension checks in force for this exchange: those of the session it was sent
    /// on, fixed at send time so a re-initialization in the meantime cannot switch them off.
    checks: Option<ResumeSafety>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListenState {
    Off,
    Open(HttpId),
    Backoff(Instant),
    NotOffered,
    GaveUp,
}

#[derive(Debug)]
struct Listen {
    state: ListenState,
    cursor: Option<EventId>,
    retry: Option<Duration>,
    attempts: u32,
}

/// The sans-IO MCP client session. See the [module docs](super) for the driver contract.
#[derive(Debug)]
pub struct Session {
    config: SessionConfig,
    rng: Rng,
    phase: Phase,
    ctx: Option<Ctx>,
    previous: Option<Ctx>,
    generation: u64,
    init: Option<Init>,
    ever_connected: bool,
    /// Terminated because re-initialization kept failing (not closed by the app).
    lost: bool,
    reinit_failures: u32,
    init_result: Option<Value>,
    connect_waiters: Vec<CallId>,
    close_call: Option<CallId>,
    calls: BTreeMap<CallId, Call>,
    rpc_index: HashMap<RequestId, CallId>,
    exchanges: BTreeMap<HttpId, Exchange>,
    listen: Listen,
    /// The last re-initialization was caused by a 404 on the standalone stream.
    listen_404_reinit: bool,
    next_http: u64,
    next_call: u64,
    next_rpc: i64,
    transmits: VecDeque<Transmit>,
    outputs: VecDeque<Output>,
}

impl Session {
    /// Creates an idle session. Nothing is sent until [`Session::connect`].
    pub fn new(config: SessionConfig, now: Instant) -> Self {
        let _ = now;
        Session {
            rng: Rng(config.jitter_seed),
            config,
            phase: Phase::Idle,
            ctx: None,
            previous: None,
            generation: 0,
            init: None,
            ever_connected: false,
            lost: false,
            reinit_failures: 0,
            init_result: None,
            connect_waiters: Vec::new(),
            close_call: None,
            calls: BTreeMap::new(),
            rpc_index: HashMap::new(),
            exchanges: BTreeMap::new(),
            listen: Listen {
                state: ListenState::Off,
                cursor: None,
                retry: None,
                attempts: 0,
            },
            listen_404_reinit: false,
            next_http: 0,
            next_call: 0,
            next_rpc: 0,
            transmits: VecDeque::new(),
            outputs: VecDeque::new(),
        }
    }

    /// Starts `initialize` (+ `notifications/initialized`, + the GET stream). The returned
    /// call completes with the `initialize` result once the session is ready.
    pub fn connect(&mut self, now: Instant) -> CallId {
        let id = self.new_call_id();
        match self.phase {
            Phase::Ready => {
                let result = self.init_result.clone().unwrap_or(Value::Null);
                self.outputs.push_back(Output::Completed {
                    call: id,
                    result: Ok(result),
                });
            }
            Phase::Initializing => self.connect_waiters.push(id),
            Phase::Idle => {
                self.connect_waiters.push(id);
                self.start_init(None, now);
            }
            Phase::Closing | Phase::Terminated => self.outputs.push_back(Output::Completed {
                call: id,
                result: Err(Error::new(ErrorKind::Closed, "session closed")),
            }),
        }
        id
    }

    /// Submits a request. Calls submitted before or during (re-)initialization wait for it.
    pub fn submit(&mut self, request: CallRequest, now: Instant) -> CallId {
        let id = self.new_call_id();
        if matches!(self.phase, Phase::Closing | Phase::Terminated) {
            let error = if self.lost {
                Error::new(ErrorKind::SessionLost, "session lost")
            } else {
                Error::new(ErrorKind::Closed, "session closed")
            };
            self.outputs.push_back(Output::Completed {
                call: id,
                result: Err(error),
            });
            return id;
        }
        let timeout = request.timeout.unwrap_or(self.config.call_timeout);
        let deadline = now.checked_add(timeout).unwrap_or(now + MAX_RETRY);
        self.calls.insert(
            id,
            Call {
                method: request.method,
                params: request.params,
                key: request.idempotency_key,
                deadline,
                state: CallState::Waiting,
                rpc: None,
                generation: 0,
                hash: None,
                server_dedups: false,
                cursor: None,
                retry: None,
                attempts: 0,
                no_progress: 0,
                may_have_run: false,
                sends: 0,
            },
        );
        if self.phase == Phase::Ready {
            self.send_call(id);
        }
        id
    }

    /// Sends a notification to the server (best effort; no completion is reported).
    pub fn notify(&mut self, method: &str, params: Option<Value>, now: Instant) {
        let _ = now;
        if self.phase != Phase::Ready {
            debug!(method, "notification dropped: session not ready");
            return;
        }
        let body = jsonrpc::encode_notification(method, params.as_ref());
        self.post(ExKind::Notify, HttpPurpose::Notify, body, None);
    }

    /// Answers a server-to-client request.
    pub fn respond(&mut self, id: RequestId, result: Result<Value, RpcError>, now: Instant) {
        let _ = now;
        if self.phase != Phase::Ready {
            debug!(%id, "answer to a server request dropped: session not ready");
            return;
        }
        let body = jsonrpc::encode_response(&id, &result);
        self.post(ExKind::Notify, HttpPurpose::Notify, body, None);
    }

    /// The app gave up on a call (its future was dropped): POST `notifications/cancelled`
    /// if it may be running, abort its stream, and report nothing more for it.
    pub fn cancel(&mut self, call: CallId, now: Instant) {
        let _ = now;
        if !self.calls.contains_key(&call) {
            return;
        }
        self.send_cancelled(call, "cancelled by the client");
        if let Some(c) = self.remove_call(call) {
            debug!(call = call.0, method = %c.method, "call cancelled");
        }
    }

    /// Closes the session: fails waiting calls with `Closed` and DELETEs the session. The
    /// returned call completes when the DELETE is answered (405 tolerated).
    pub fn close(&mut self, now: Instant) -> CallId {
        let _ = now;
        let id = self.new_call_id();
        if matches!(self.phase, Phase::Closing | Phase::Terminated) {
            self.outputs.push_back(Output::Completed {
                call: id,
                result: Ok(Value::Null),
            });
            return id;
        }
        // The session to delete: the established one, or the one a re-initialization has
        // just obtained.
        let session = self
            .ctx
            .clone()
            .or_else(|| self.init.as_ref().and_then(|i| i.pending.clone()))
            .or_else(|| {
                self.init.as_ref().and_then(|i| {
                    i.head_session_id.clone().map(|id| Ctx {
                        generation: self.generation,
                        id: Some(id),
                        protocol_version: self.config.protocol_version.clone(),
                        server_capabilities: Value::Null,
                        hash: None,
                        ext: None,
                    })
                })
            });
        self.phase = Phase::Closing;
        self.init = None;
        self.fail_everything(ErrorKind::Closed, "session closed", false);
        self.abort_all_exchanges();
        self.listen.state = ListenState::Off;
        self.outputs.push_back(Output::Event(SessionEvent::Closed));
        match session.and_then(|c| c.id.clone().map(|id| (id, c))) {
            Some((sid, ctx)) => {
                info!(session = %sid, "closing session");
                let mut headers = vec![("mcp-session-id", sid.expose().to_owned())];
                if ctx.protocol_version.as_str() >= VERSION_HEADER_SINCE {
                    headers.push(("mcp-protocol-version", ctx.protocol_version.clone()));
                }
                self.close_call = Some(id);
                self.transmit(
                    ExKind::Delete,
                    HttpMethod::Delete,
                    HttpPurpose::Terminate,
                    headers,
                    None,
                    true,
                    false,
                );
            }
            None => {
                self.phase = Phase::Terminated;
                self.outputs.push_back(Output::Completed {
                    call: id,
                    result: Ok(Value::Null),
                });
            }
        }
        id
    }

    /// The response head of an exchange arrived.
    pub fn handle_head(&mut self, http: HttpId, status: u16, headers: &HeaderMap, now: Instant) {
        let Some(ex) = self.exchanges.get_mut(&http) else {
            debug!(
                http = http.0,
                "head for an unknown or aborted exchange ignored"
            );
            return;
        };
        if ex.status.is_some() {
            warn!(http = http.0, "second response head ignored");
            return;
        }
        ex.status = Some(status);
        let kind = ex.kind;
        let ct = content_type(headers);
        let ok = (200..300).contains(&status);
        match kind {
            ExKind::Initialize => self.on_initialize_head(http, status, headers, ct, now),
            ExKind::Initialized => {
                self.finish_exchange(http);
                if ok {
                    self.init_succeeded(now);
                } else {
                    self.init_failed(
                        Error::new(
                            ErrorKind::Protocol,
                            format!("notifications/initialized answered HTTP {status}"),
                        ),
                        now,
                    );
                }
            }
            ExKind::Post(call) => self.on_post_head(http, call, status, headers, ct, now),
            ExKind::Resume(call) => self.on_resume_head(http, call, status, headers, ct, now),
            ExKind::Listen => self.on_listen_head(http, status, headers, ct, now),
            ExKind::Notify => {
                let carried = self
                    .exchanges
                    .get(&http)
                    .is_some_and(|e| e.carried_session_id);
                self.finish_exchange(http);
                if status == 404 && carried {
                    self.start_reinit(ReinitReason::SessionNotFound, now);
                } else if !ok {
                    warn!(status, "notification or answer POST not accepted");
                }
            }
            ExKind::Delete => {
                self.finish_exchange(http);
                let result = if ok || status == 404 || status == 405 {
                    Ok(Value::Null)
                } else {
                    Err(Error::new(
                        ErrorKind::Protocol,
                        format!("DELETE answered HTTP {status}"),
                    ))
                };
                self.close_done(result);
            }
        }
    }

    /// Body bytes of an exchange arrived (SSE or JSON, per the head's content type).
    pub fn handle_data(&mut self, http: HttpId, data: &[u8], now: Instant) {
        let max_body = self.config.max_body_size;
        let Some(ex) = self.exchanges.get_mut(&http) else {
            return;
        };
        let mut events = Vec::new();
        let broken = match &mut ex.body {
            Body::Pending => {
                warn!(http = http.0, "body bytes before the head ignored");
                None
            }
            Body::Error(buf) => {
                let room = MAX_ERROR_BODY.saturating_sub(buf.len());
                buf.extend_from_slice(&data[..data.len().min(room)]);
                None
            }
            Body::Json(buf) => {
                if buf.len().saturating_add(data.len()) > max_body {
                    Some(Error::new(
                        ErrorKind::TooLarge,
                        format!("JSON body larger than {max_body} bytes"),
                    ))
                } else {
                    buf.extend_from_slice(data);
                    None
                }
            }
            Body::Sse(decoder) => match decoder.feed(data, &mut events) {
                Ok(()) => None,
                Err(crate::sse::SseError::TooLarge { max }) => Some(Error::new(
                    ErrorKind::TooLarge,
                    format!("SSE event larger than {max} bytes"),
                )),
            },
        };
        self.on_events(http, events, now);
        if let Some(err) = broken {
            self.exchange_broken(http, err, now);
        }
    }

    /// The body of an exchange ended cleanly.
    pub fn handle_end(&mut self, http: HttpId, now: Instant) {
        let Some(ex) = self.exchanges.get_mut(&http) else {
            return;
        };
        // The driver is done with it: finishing it while its last bytes are handled must not
        // send a pointless abort.
        ex.ended = true;
        match &mut ex.body {
            Body::Pending => {
                // End without a head: the driver broke its contract; treat as a lost exchange.
                self.handle_error(http, TransportFailure::Lost("end without head".into()), now);
            }
            Body::Json(buf) => {
                let buf = std::mem::take(buf);
                let allow_batch = ex.allow_batch;
                let decoded = self.on_payload(http, &buf, allow_batch, now);
                if let Some(ex) = self.exchanges.remove(&http) {
                    self.json_ended_without_response(ex.kind, decoded, now);
                }
            }
            Body::Sse(decoder) => {
                let mut events = Vec::new();
                decoder.finish(&mut events);
                self.on_events(http, events, now);
                if let Some(ex) = self.exchanges.remove(&http) {
                    self.stream_ended(ex, true, now);
                }
            }
            Body::Error(_) => {
                if let Some(ex) = self.exchanges.remove(&http) {
                    self.error_body_done(ex, now);
                }
            }
        }
    }

    /// An exchange failed at the transport level.
    pub fn handle_error(&mut self, http: HttpId, failure: TransportFailure, now: Instant) {
        let Some(ex) = self.exchanges.remove(&http) else {
            return;
        };
        let connect = matches!(failure, TransportFailure::Connect(_));
        let reason = match &failure {
            TransportFailure::Connect(r) | TransportFailure::Lost(r) => r.clone(),
        };
        debug!(http = http.0, kind = ?ex.kind, connect, reason = %reason, "exchange failed");
        if ex.status.is_some() {
            match ex.body {
                Body::Sse(_) => self.stream_ended(ex, false, now),
                Body::Error(_) => self.error_body_done(ex, now),
                Body::Json(_) => match ex.kind {
                    ExKind::Initialize => self.init_failed(
                        Error::new(ErrorKind::Transport, format!("initialize: {reason}")),
                        now,
                    ),
                    ExKind::Post(call) => self.apply(
                        call,
                        Failure::StreamEnded {
                            event_id_seen: false,
                        },
                        now,
                    ),
                    _ => {}
                },
                Body::Pending => {}
            }
            return;
        }
        match ex.kind {
            ExKind::Initialize | ExKind::Initialized => {
                self.init_failed(Error::new(ErrorKind::Transport, reason), now)
            }
            ExKind::Post(call) => {
                if connect {
                    if let Some(c) = self.calls.get_mut(&call) {
                        c.may_have_run = false;
                    }
                    self.apply(call, Failure::PostConnectFailed, now);
                } else {
                    self.apply(call, Failure::PostLost, now);
                }
            }
            ExKind::Resume(call) => {
                let failure = if connect {
                    Failure::ResumeConnectFailed
                } else {
                    self.bump_no_progress(call, false);
                    Failure::ResumedStreamEnded {
                        clean: false,
                        progress: false,
                    }
                };
                self.apply(call, failure, now);
            }
            ExKind::Listen => self.listen_failed(false, now),
            ExKind::Notify => debug!("notification POST failed: {reason}"),
            ExKind::Delete => self.close_done(Err(Error::new(ErrorKind::Transport, reason))),
        }
    }

    /// Time passed: fire expired timers (backoff, deadlines).
    pub fn handle_timeout(&mut self, now: Instant) {
        if matches!(self.phase, Phase::Closing | Phase::Terminated) {
            return;
        }
        if let Some(init) = &self.init {
            match init.step {
                InitStep::Backoff { until } if until <= now => self.send_initialize(now),
                InitStep::Initialize { http, .. } | InitStep::Initialized { http }
                    if init.deadline <= now =>
                {
                    self.finish_exchange(http);
                    self.init_failed(Error::new(ErrorKind::Timeout, "initialize timed out"), now);
                }
                _ => {}
            }
        }
        let ids: Vec<CallId> = self.calls.keys().copied().collect();
        for id in ids {
            let Some(call) = self.calls.get(&id) else {
                continue;
            };
            if call.deadline <= now {
                info!(call = id.0, method = %call.method, "call deadline passed");
                self.send_cancelled(id, "timeout");
                self.apply(id, Failure::DeadlineExpired, now);
                continue;
            }
            if let CallState::Backoff { until, then } = call.state {
                if until <= now {
                    self.fire_retry(id, then, now);
                }
            }
        }
        if let ListenState::Backoff(until) = self.listen.state {
            if until <= now {
                self.listen.state = ListenState::Off;
                self.open_listen();
            }
        }
    }

    /// Next network action.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// Next output for the app.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// When [`Session::handle_timeout`] must be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if matches!(self.phase, Phase::Closing | Phase::Terminated) {
            return None;
        }
        let mut next: Option<Instant> = None;
        let mut consider = |t: Instant| {
            next = Some(next.map_or(t, |n| n.min(t)));
        };
        if let Some(init) = &self.init {
            match init.step {
                InitStep::Backoff { until } => consider(until),
                _ => consider(init.deadline),
            }
        }
        for call in self.calls.values() {
            consider(call.deadline);
            if let CallState::Backoff { until, .. } = call.state {
                consider(until);
            }
        }
        if let ListenState::Backoff(until) = self.listen.state {
            consider(until);
        }
        next
    }

    /// Whether the session is closed or lost for good (the driver may stop).
    pub fn is_terminated(&self) -> bool {
        self.phase == Phase::Terminated
    }
}

// Additions beyond the driver contract: read-only views for drivers, bindings and tests.
impl Session {
    /// The current session id, once `initialize` succeeded (shown only as a prefix by
    /// `Display`).
    pub fn session_id(&self) -> Option<&SessionId> {
        self.ctx.as_ref().and_then(|c| c.id.as_ref())
    }

    /// The negotiated protocol version of the current session.
    pub fn protocol_version(&self) -> Option<&str> {
        self.ctx.as_ref().map(|c| c.protocol_version.as_str())
    }

    /// Whether the session is established and not re-initializing.
    pub fn is_ready(&self) -> bool {
        self.phase == Phase::Ready
    }

    /// Number of calls not yet completed.
    pub fn pending_calls(&self) -> usize {
        self.calls.len()
    }
}

// Initialization.
impl Session {
    fn start_init(&mut self, reason: Option<ReinitReason>, now: Instant) {
        self.phase = Phase::Initializing;
        self.generation += 1;
        self.init = Some(Init {
            step: InitStep::Backoff { until: now },
            reason,
            deadline: now,
            head_session_id: None,
            head_hash: None,
            pending: None,
            result: None,
        });
        self.send_initialize(now);
    }

    fn start_reinit(&mut self, reason: ReinitReason, now: Instant) {
        if self.phase != Phase::Ready {
            return;
        }
        info!(?reason, "re-initializing the session");
        self.previous = self.ctx.take();
        // The listen stream belongs to the old session; it is reopened afterwards.
        if let ListenState::Open(http) = self.listen.state {
            self.finish_exchange(http);
        }
        self.listen = Listen {
            state: ListenState::Off,
            cursor: None,
            retry: None,
            attempts: 0,
        };
        self.start_init(Some(reason), now);
        // Calls waiting for a retry on the old session: a resend waits for the new one; a
        // resume cannot happen any more (its cursor belongs to the old session).
        let ids: Vec<CallId> = self.calls.keys().copied().collect();
        for id in ids {
            let Some(call) = self.calls.get_mut(&id) else {
                continue;
            };
            match call.state {
                CallState::Backoff {
                    then: Retry::Resend,
                    ..
                } => call.state = CallState::Waiting,
                CallState::Backoff {
                    then: Retry::Resume,
                    ..
                } => self.apply(id, Failure::SessionReplaced, now),
                _ => {}
            }
        }
    }

    fn send_initialize(&mut self, now: Instant) {
        let Some(init) = &mut self.init else {
            return;
        };
        self.next_rpc += 1;
        let rpc = RequestId::Number(self.next_rpc);
        let params = json!({
            "protocolVersion": self.config.protocol_version,
            "capabilities": self.config.client_capabilities,
            "clientInfo": {"name": self.config.client_name, "version": self.config.client_version},
        });
        let body = jsonrpc::encode_request(&rpc, "initialize", Some(&params));
        init.deadline = now.checked_add(self.config.call_timeout).unwrap_or(now);
        init.head_session_id = None;
        init.head_hash = None;
        init.pending = None;
        init.result = None;
        debug!(generation = self.generation, "sending initialize");
        let headers = vec![
            ("accept", "application/json, text/event-stream".to_owned()),
            ("content-type", "application/json".to_owned()),
        ];
        let http = self.transmit(
            ExKind::Initialize,
            HttpMethod::Post,
            HttpPurpose::Request,
            headers,
            Some(body),
            false,
            self.config.protocol_version == BATCH_VERSION,
        );
        if let Some(init) = &mut self.init {
            init.step = InitStep::Initialize { http, rpc };
        }
    }

    fn on_initialize_head(
        &mut self,
        http: HttpId,
        status: u16,
        headers: &HeaderMap,
        ct: ContentType,
        now: Instant,
    ) {
        if !(200..300).contains(&status) || status == 202 {
            self.set_body(http, Body::Error(Vec::new()));
            return;
        }
        let session_id = match headers.get("mcp-session-id") {
            None => None,
            Some(v) => match SessionId::parse(v.as_bytes()) {
                Ok(id) => Some(id),
                Err(e) => {
                    self.finish_exchange(http);
                    self.init_failed(
                        Error::with_source(ErrorKind::Protocol, "invalid Mcp-Session-Id", e),
                        now,
                    );
                    return;
                }
            },
        };
        let hash = headers
            .get(ext::CAPABILITY_HASH_HEADER)
            .and_then(|v| CapabilityHash::parse(v.as_bytes()).ok());
        if let Some(init) = &mut self.init {
            init.head_session_id = session_id;
            init.head_hash = hash;
        }
        match ct {
            ContentType::Json => self.set_body(http, Body::Json(Vec::new())),
            ContentType::Sse => self.set_body(http, self.new_decoder()),
            ContentType::Other => {
                self.finish_exchange(http);
                self.init_failed(
                    Error::new(
                        ErrorKind::Protocol,
                        "initialize answered with an unexpected content type",
                    ),
                    now,
                );
            }
        }
    }

    fn on_initialize_response(
        &mut self,
        http: HttpId,
        result: Result<Value, RpcError>,
        now: Instant,
    ) {
        self.finish_exchange(http);
        let result = match result {
            Ok(r) => r,
            Err(e) => return self.init_failed(Error::rpc(e), now),
        };
        let version = result.get("protocolVersion").and_then(Value::as_str);
        let Some(version) = version.filter(|v| SUPPORTED_PROTOCOL_VERSIONS.contains(v)) else {
            let mut shown = version.unwrap_or("<none>").to_owned();
            jsonrpc::truncate(&mut shown, 64);
            return self.init_failed(
                Error::new(
                    ErrorKind::Protocol,
                    format!("server answered unsupported protocol version {shown:?}"),
                ),
                now,
            );
        };
        let Some(init) = &mut self.init else {
            return;
        };
        let mut ext = ResumeSafety::from_initialize_result(&result);
        if let Some(e) = &mut ext {
            if e.capability_hash && init.head_hash.is_none() {
                warn!("server advertised capability hashes but sent none at initialize; hash checks off");
                e.capability_hash = false;
            }
        }
        let ctx = Ctx {
            generation: self.generation,
            id: init.head_session_id.clone(),
            protocol_version: version.to_owned(),
            server_capabilities: result
                .get("capabilities")
                .cloned()
                .unwrap_or(Value::Object(Map::new())),
            hash: init.head_hash.clone(),
            ext,
        };
        init.pending = Some(ctx.clone());
        init.result = Some(result);
        let headers = Self::session_headers(&ctx, true);
        let body = jsonrpc::encode_notification("notifications/initialized", None);
        let http = self.transmit(
            ExKind::Initialized,
            HttpMethod::Post,
            HttpPurpose::Notify,
            headers,
            Some(body),
            ctx.id.is_some(),
            false,
        );
        if let Some(init) = &mut self.init {
            init.step = InitStep::Initialized { http };
        }
    }

    fn init_succeeded(&mut self, now: Instant) {
        let _ = now;
        let Some(init) = self.init.take() else {
            return;
        };
        let (Some(ctx), Some(result)) = (init.pending, init.result) else {
            return;
        };
        match &ctx.id {
            Some(id) => info!(session = %id, version = %ctx.protocol_version, "session ready"),
            None => info!(version = %ctx.protocol_version, "session ready (no session id)"),
        }
        self.phase = Phase::Ready;
        self.reinit_failures = 0;
        self.init_result = Some(result.clone());
        match init.reason {
            None => {
                self.ever_connected = true;
                self.outputs
                    .push_back(Output::Event(SessionEvent::Connected {
                        protocol_version: ctx.protocol_version.clone(),
                    }));
            }
            Some(reason) => {
                let changed = self.previous.as_ref().map_or(true, |p| {
                    p.protocol_version != ctx.protocol_version
                        || p.server_capabilities != ctx.server_capabilities
                        || p.hash != ctx.hash
                });
                info!(
                    ?reason,
                    capabilities_changed = changed,
                    "session re-initialized"
                );
                self.outputs
                    .push_back(Output::Event(SessionEvent::Reinitialized {
                        reason,
                        capabilities_changed: changed,
                    }));
            }
        }
        self.ctx = Some(ctx);
        for waiter in std::mem::take(&mut self.connect_waiters) {
            self.outputs.push_back(Output::Completed {
                call: waiter,
                result: Ok(result.clone()),
            });
        }
        let waiting: Vec<CallId> = self
            .calls
            .iter()
            .filter(|(_, c)| c.state == CallState::Waiting)
            .map(|(id, _)| *id)
            .collect();
        for id in waiting {
            self.send_call(id);
        }
        self.open_listen();
    }

    fn init_failed(&mut self, error: Error, now: Instant) {
        let Some(init) = &self.init else {
            return;
        };
        match init.step {
            InitStep::Initialize { http, .. } | InitStep::Initialized { http } => {
                self.finish_exchange(http)
            }
            InitStep::Backoff { .. } => {}
        }
        warn!(error = %error, "initialization failed");
        if !self.ever_connected {
            // First connect: report to the app rather than retrying behind its back.
            self.init = None;
            self.phase = Phase::Idle;
            for waiter in std::mem::take(&mut self.connect_waiters) {
                self.outputs.push_back(Output::Completed {
                    call: waiter,
                    result: Err(error.clone()),
                });
            }
            let ids: Vec<CallId> = self.calls.keys().copied().collect();
            for id in ids {
                self.complete(id, Err(error.clone()));
            }
            return;
        }
        self.reinit_failures += 1;
        let state = State {
            reinit_failures: self.reinit_failures,
            ..self.base_state(false)
        };
        match decide(&Failure::ReinitFailed, &state) {
            Decision::RetryReinitialize => {
                let delay = self.config.reconnect.delay(
                    self.reinit_failures.saturating_sub(1),
                    self.rng.next(),
                    None,
                );
                if let Some(init) = &mut self.init {
                    init.step = InitStep::Backoff {
                        until: now.checked_add(delay).unwrap_or(now),
                    };
                }
            }
            _ => self.session_lost(),
        }
    }

    fn session_lost(&mut self) {
        warn!(
            failures = self.reinit_failures,
            "session lost: re-initialization kept failing"
        );
        self.init = None;
        self.phase = Phase::Terminated;
        self.lost = true;
        self.abort_all_exchanges();
        self.listen.state = ListenState::Off;
        self.fail_everything(
            ErrorKind::SessionLost,
            "session lost: re-initialization kept failing",
            true,
        );
        self.outputs
            .push_back(Output::Event(SessionEvent::SessionLost));
    }

    fn close_done(&mut self, result: Result<Value, Error>) {
        self.phase = Phase::Terminated;
        if let Some(call) = self.close_call.take() {
            self.outputs.push_back(Output::Completed { call, result });
        }
    }
}

// Calls.
impl Session {
    fn new_call_id(&mut self) -> CallId {
        self.next_call += 1;
        CallId(self.next_call)
    }

    fn send_call(&mut self, id: CallId) {
        let Some(ctx) = self.ctx.clone() else {
            return;
        };
        let Some(call) = self.calls.get_mut(&id) else {
            return;
        };
        if call.sends > 0 {
            info!(call = id.0, method = %call.method, "re-sending call");
            self.outputs
                .push_back(Output::Event(SessionEvent::Redispatched {
                    call: id,
                    method: call.method.clone(),
                    idempotency_key: call.key.clone(),
                }));
        }
        self.next_rpc += 1;
        let rpc = RequestId::Number(self.next_rpc);
        if let Some(old) = call.rpc.replace(rpc.clone()) {
            self.rpc_index.remove(&old);
        }
        self.rpc_index.insert(rpc.clone(), id);
        let meta_key = ctx
            .ext
            .as_ref()
            .and_then(|e| e.idempotency_meta_key.as_deref())
            .unwrap_or(super::config::DEFAULT_IDEMPOTENCY_META_KEY);
        let keyed = call.method == "tools/call" && call.key.is_some();
        let params = match (&call.key, keyed) {
            (Some(key), true) => Some(with_meta_key(call.params.clone(), meta_key, key)),
            _ => call.params.clone(),
        };
        let body = jsonrpc::encode_request(&rpc, &call.method, params.as_ref());
        call.generation = ctx.generation;
        // Hash checks (head and replayed result) are the extension's: only for a session
        // whose server advertised it.
        call.hash = ctx.ext.as_ref().and(ctx.hash.clone());
        call.server_dedups = ctx
            .ext
            .as_ref()
            .is_some_and(|e| e.idempotency_meta_key.is_some());
        call.cursor = None;
        call.retry = None;
        call.no_progress = 0;
        call.may_have_run = true;
        call.sends += 1;
        let mut headers = Self::session_headers(&ctx, true);
        if let (true, Some(key)) = (keyed, &call.key) {
            headers.push(("idempotency-key", key.as_str().to_owned()));
        }
        debug!(call = id.0, %rpc, method = %call.method, "sending call");
        let http = self.transmit(
            ExKind::Post(id),
            HttpMethod::Post,
            HttpPurpose::Request,
            headers,
            Some(body),
            ctx.id.is_some(),
            ctx.protocol_version == BATCH_VERSION,
        );
        if let Some(call) = self.calls.get_mut(&id) {
            call.state = CallState::Posting(http);
        }
    }

    fn send_resume(&mut self, id: CallId) {
        let Some(ctx) = self.ctx.clone() else {
            return;
        };
        let Some(call) = self.calls.get(&id) else {
            return;
        };
        let Some(cursor) = call.cursor.clone() else {
            return;
        };
        info!(call = id.0, last_event_id = %cursor, "resuming stream");
        let mut headers = Self::session_headers(&ctx, false);
        headers.push(("last-event-id", cursor.as_str().to_owned()));
        let http = self.transmit(
            ExKind::Resume(id),
            HttpMethod::Get,
            HttpPurpose::Resume,
            headers,
            None,
            ctx.id.is_some(),
            ctx.protocol_version == BATCH_VERSION,
        );
        if let Some(ex) = self.exchanges.get_mut(&http) {
            ex.resumed = true;
            ex.expect_seq = cursor
                .sequenced()
                .map(|(s, n)| (s.to_owned(), n.saturating_add(1)));
        }
        if let Some(call) = self.calls.get_mut(&id) {
            call.state = CallState::Resuming(http);
        }
    }

    fn fire_retry(&mut self, id: CallId, then: Retry, now: Instant) {
        let Some(call) = self.calls.get_mut(&id) else {
            return;
        };
        match then {
            Retry::Resend => {
                call.state = CallState::Waiting;
                if self.phase == Phase::Ready {
                    self.send_call(id);
                }
            }
            Retry::Resume => {
                if self.phase == Phase::Ready && call.generation == self.generation {
                    self.send_resume(id);
                } else {
                    self.apply(id, Failure::SessionReplaced, now);
                }
            }
        }
    }

    fn bump_no_progress(&mut self, id: CallId, progress: bool) {
        if let Some(call) = self.calls.get_mut(&id) {
            if progress {
                call.no_progress = 0;
            } else {
                call.no_progress = call.no_progress.saturating_add(1);
            }
        }
    }

    fn base_state(&self, resend_safe: bool) -> State {
        State::new(
            &self.config.reconnect,
            resend_safe,
            self.config.dangerous_trust_replay,
        )
    }

    /// Runs the recovery decision for one call and carries it out.
    fn apply(&mut self, id: CallId, failure: Failure, now: Instant) {
        let Some(call) = self.calls.get_mut(&id) else {
            return;
        };
        let stale = call.generation != self.generation || self.phase != Phase::Ready;
        // A stream of a replaced session cannot be resumed: its cursor and id are gone.
        let failure = match failure {
            Failure::StreamEnded {
                event_id_seen: true,
            }
            | Failure::ResumedStreamEnded { .. }
            | Failure::ResumeConnectFailed
                if stale =>
            {
                Failure::SessionReplaced
            }
            f => f,
        };
        call.attempts = call.attempts.saturating_add(1);
        let resend_safe = call.key.is_some()
            && (call.server_dedups || self.config.resend == ResendPolicy::AssumeServerDeduplicates);
        let state = State {
            attempts: call.attempts,
            resumes_without_progress: call.no_progress,
            reinit_failures: self.reinit_failures,
            ..State::new(
                &self.config.reconnect,
                resend_safe,
                self.config.dangerous_trust_replay,
            )
        };
        let decision = decide(&failure, &state);
        debug!(call = id.0, ?failure, ?decision, "recovery decision");
        match decision {
            Decision::Continue | Decision::RetryReinitialize => {}
            Decision::Resume => {
                self.detach(id);
                let delay = self.retry_delay(id);
                if let Some(call) = self.calls.get_mut(&id) {
                    call.state = CallState::Backoff {
                        until: now.checked_add(delay).unwrap_or(now),
                        then: Retry::Resume,
                    };
                }
            }
            Decision::Resend => {
                self.detach(id);
                let delay = self.retry_delay(id);
                if let Some(call) = self.calls.get_mut(&id) {
                    call.state = CallState::Backoff {
                        until: now.checked_add(delay).unwrap_or(now),
                        then: Retry::Resend,
                    };
                }
            }
            Decision::Reinitialize { reason, call: fate } => {
                self.detach(id);
                if matches!(failure, Failure::PostSessionNotFound) {
                    if let Some(call) = self.calls.get_mut(&id) {
                        call.may_have_run = false;
                    }
                }
                if let Some(r) = match &failure {
                    Failure::ResumeNotFound => Some(None),
                    Failure::ResumeRejected(r) => Some(Some(r.clone())),
                    Failure::ResumeCapabilityHashChanged => {
                        Some(Some(RejectReason::CapabilityMismatch))
                    }
                    _ => None,
                } {
                    info!(call = id.0, reason = ?r, "resume rejected");
                    self.outputs
                        .push_back(Output::Event(SessionEvent::ResumeRejected { reason: r }));
                }
                match fate {
                    CallFate::Resend => {
                        if let Some(call) = self.calls.get_mut(&id) {
                            call.state = CallState::Waiting;
                        }
                    }
                    CallFate::Fail(kind) => self.fail_call(id, kind),
                }
                if !stale {
                    self.start_reinit(reason, now);
                } else if self.phase == Phase::Ready {
                    // The session this call ran on is already replaced; only the call's fate
                    // matters, and a waiting call can go now.
                    if self
                        .calls
                        .get(&id)
                        .is_some_and(|c| c.state == CallState::Waiting)
                    {
                        self.send_call(id);
                    }
                }
            }
            Decision::Fail(ErrorKind::SessionLost) => self.session_lost(),
            Decision::Fail(kind) => {
                self.detach(id);
                self.fail_call(id, kind);
            }
        }
    }

    fn retry_delay(&mut self, id: CallId) -> Duration {
        let (attempt, floor) = self
            .calls
            .get(&id)
            .map(|c| (c.attempts.saturating_sub(1), c.retry))
            .unwrap_or((0, None));
        self.config.reconnect.delay(attempt, self.rng.next(), floor)
    }

    /// Stops the call's current exchange, if any.
    fn detach(&mut self, id: CallId) {
        if let Some(call) = self.calls.get_mut(&id) {
            if let CallState::Posting(http) | CallState::Resuming(http) = call.state {
                call.state = CallState::Waiting;
                self.finish_exchange(http);
            }
        }
    }

    fn fail_call(&mut self, id: CallId, kind: ErrorKind) {
        let Some(call) = self.calls.get(&id) else {
            return;
        };
        let method = call.method.clone();
        let message = match kind {
            ErrorKind::OutcomeUnknown => {
                info!(call = id.0, %method, "outcome unknown: interrupted and not safe to re-send");
                self.outputs
                    .push_back(Output::Event(SessionEvent::OutcomeUnknown {
                        call: id,
                        method: method.clone(),
                    }));
                format!("{method} was interrupted; it may or may not have run")
            }
            ErrorKind::ContextMismatch => {
                warn!(call = id.0, %method, "response produced under another capability hash");
                self.outputs
                    .push_back(Output::Event(SessionEvent::ContextMismatch { call: id }));
                format!("{method} was answered under another negotiated context")
            }
            ErrorKind::Timeout => format!("{method} timed out"),
            ErrorKind::Transport => format!("{method}: the server could not be reached"),
            _ => format!("{method} failed"),
        };
        self.complete(id, Err(Error::new(kind, message)));
    }

    fn complete(&mut self, id: CallId, result: Result<Value, Error>) {
        if self.remove_call(id).is_some() {
            self.outputs
                .push_back(Output::Completed { call: id, result });
        }
    }

    fn remove_call(&mut self, id: CallId) -> Option<Call> {
        let call = self.calls.remove(&id)?;
        if let Some(rpc) = &call.rpc {
            self.rpc_index.remove(rpc);
        }
        if let CallState::Posting(http) | CallState::Resuming(http) = call.state {
            self.finish_exchange(http);
        }
        Some(call)
    }

    fn fail_everything(&mut self, kind: ErrorKind, message: &str, events: bool) {
        for waiter in std::mem::take(&mut self.connect_waiters) {
            self.outputs.push_back(Output::Completed {
                call: waiter,
                result: Err(Error::new(kind, message)),
            });
        }
        let ids: Vec<CallId> = self.calls.keys().copied().collect();
        for id in ids {
            if events {
                self.fail_call(id, kind);
            } else {
                self.complete(id, Err(Error::new(kind, message)));
            }
        }
    }

    fn send_cancelled(&mut self, id: CallId, reason: &str) {
        let Some(call) = self.calls.get(&id) else {
            return;
        };
        let Some(rpc) = call.rpc.clone() else {
            return;
        };
        if !call.may_have_run || call.generation != self.generation || self.phase != Phase::Ready {
            return;
        }
        let params = json!({"requestId": rpc.to_json(), "reason": reason});
        let body = jsonrpc::encode_notification("notifications/cancelled", Some(&params));
        self.post(ExKind::Notify, HttpPurpose::Notify, body, None);
    }
}

// Streams and bodies.
impl Session {
    fn new_decoder(&self) -> Body {
        Body::Sse(Box::new(SseDecoder::new(self.config.max_event_size)))
    }

    fn set_body(&mut self, http: HttpId, body: Body) {
        if let Some(ex) = self.exchanges.get_mut(&http) {
            ex.body = body;
        }
    }

    fn checks(&self) -> Option<&ResumeSafety> {
        if self.config.dangerous_trust_replay {
            return None;
        }
        self.ctx.as_ref().and_then(|c| c.ext.as_ref())
    }

    /// Whether a response head's capability hash matches `expected` (when the exchange's
    /// session advertised hashes).
    fn hash_matches(
        &self,
        http: HttpId,
        headers: &HeaderMap,
        expected: Option<&CapabilityHash>,
    ) -> bool {
        let checked = self
            .exchanges
            .get(&http)
            .and_then(|e| e.checks.as_ref())
            .is_some_and(|e| e.capability_hash);
        if !checked {
            return true;
        }
        let got = headers
            .get(ext::CAPABILITY_HASH_HEADER)
            .and_then(|v| CapabilityHash::parse(v.as_bytes()).ok());
        got.as_ref() == expected
    }

    fn on_post_head(
        &mut self,
        http: HttpId,
        id: CallId,
        status: u16,
        headers: &HeaderMap,
        ct: ContentType,
        now: Instant,
    ) {
        let Some(call) = self.calls.get(&id) else {
            self.finish_exchange(http);
            return;
        };
        if call.state != CallState::Posting(http) {
            self.finish_exchange(http);
            return;
        }
        let carried = self
            .exchanges
            .get(&http)
            .is_some_and(|e| e.carried_session_id);
        match status {
            202 => {
                self.finish_exchange(http);
                self.complete(
                    id,
                    Err(Error::new(
                        ErrorKind::Protocol,
                        "request answered 202 without a response",
                    )),
                );
            }
            200..=299 => {
                let expected = call.hash.clone();
                if !self.hash_matches(http, headers, expected.as_ref()) {
                    return self.apply(id, Failure::CapabilityHashMismatch, now);
                }
                match ct {
                    ContentType::Json => self.set_body(http, Body::Json(Vec::new())),
                    ContentType::Sse => self.set_body(http, self.new_decoder()),
                    ContentType::Other => {
                        self.finish_exchange(http);
                        self.complete(
                            id,
                            Err(Error::new(
                                ErrorKind::Protocol,
                                "response with an unexpected content type",
                            )),
                        );
                    }
                }
            }
            404 if carried => self.apply(id, Failure::PostSessionNotFound, now),
            502..=504 => self.apply(id, Failure::PostLost, now),
            _ => self.set_body(http, Body::Error(Vec::new())),
        }
    }

    fn on_resume_head(
        &mut self,
        http: HttpId,
        id: CallId,
        status: u16,
        headers: &HeaderMap,
        ct: ContentType,
        now: Instant,
    ) {
        let Some(call) = self.calls.get(&id) else {
            self.finish_exchange(http);
            return;
        };
        if call.state != CallState::Resuming(http) {
            self.finish_exchange(http);
            return;
        }
        let rejected = self
            .exchanges
            .get(&http)
            .and_then(|e| e.checks.as_ref())
            .and(headers.get(ext::REJECTED_HEADER))
            .map(|v| ext::reject_reason(&String::from_utf8_lossy(v.as_bytes())));
        match status {
            200..=299 if ct == ContentType::Sse => {
                let expected = call.hash.clone();
                let cursor = call.cursor.clone();
                if !self.hash_matches(http, headers, expected.as_ref()) {
                    return self.apply(id, Failure::ResumeCapabilityHashChanged, now);
                }
                self.set_body(http, self.new_decoder());
                if let Some(last_event_id) = cursor {
                    self.outputs
                        .push_back(Output::Event(SessionEvent::Resumed { last_event_id }));
                }
            }
            _ if rejected.is_some() => {
                let reason = rejected.unwrap_or(RejectReason::Other(String::new()));
                self.apply(id, Failure::ResumeRejected(reason), now)
            }
            404 | 400 => self.set_body(http, Body::Error(Vec::new())),
            405 => self.apply(id, Failure::ResumeNotAllowed, now),
            429 | 500..=599 => self.apply(id, Failure::ResumeConnectFailed, now),
            _ => self.apply(id, Failure::ResumeNotAllowed, now),
        }
    }

    fn on_listen_head(
        &mut self,
        http: HttpId,
        status: u16,
        headers: &HeaderMap,
        ct: ContentType,
        now: Instant,
    ) {
        let resumed = self.exchanges.get(&http).is_some_and(|e| e.resumed);
        let rejected = self
            .exchanges
            .get(&http)
            .and_then(|e| e.checks.as_ref())
            .and(headers.get(ext::REJECTED_HEADER))
            .map(|v| ext::reject_reason(&String::from_utf8_lossy(v.as_bytes())));
        match status {
            200..=299 if ct == ContentType::Sse => {
                let expected = self.ctx.as_ref().and_then(|c| c.hash.clone());
                if !self.hash_matches(http, headers, expected.as_ref()) {
                    self.finish_exchange(http);
                    if resumed {
                        return self.start_reinit(ReinitReason::CapabilityMismatch, now);
                    }
                    // A fresh stream carries no call; re-initializing for it could loop
                    // against a server that omits the header on GET. Stop listening.
                    warn!("standalone GET stream under another capability hash; not listening");
                    self.listen.state = ListenState::GaveUp;
                    return;
                }
                self.listen_404_reinit = false;
                self.set_body(http, self.new_decoder());
                if let (true, Some(last_event_id)) = (resumed, self.listen.cursor.clone()) {
                    self.outputs
                        .push_back(Output::Event(SessionEvent::Resumed { last_event_id }));
                }
            }
            405 => {
                debug!("server offers no standalone GET stream");
                self.finish_exchange(http);
                self.listen.state = ListenState::NotOffered;
            }
            _ if rejected.is_some() => {
                self.finish_exchange(http);
                let reason = rejected.unwrap_or(RejectReason::Other(String::new()));
                self.outputs
                    .push_back(Output::Event(SessionEvent::ResumeRejected {
                        reason: Some(reason.clone()),
                    }));
                self.start_reinit(ReinitReason::ResumeRejected(reason), now);
            }
            404 => self.set_body(http, Body::Error(Vec::new())),
            _ => {
                self.finish_exchange(http);
                self.listen_failed(false, now);
            }
        }
    }

    fn on_events(&mut self, http: HttpId, events: Vec<SseEvent>, now: Instant) {
        for event in events {
            if !self.exchanges.contains_key(&http) {
                return;
            }
            self.on_event(http, event, now);
        }
    }

    fn on_event(&mut self, http: HttpId, event: SseEvent, now: Instant) {
        let Some(ex) = self.exchanges.get_mut(&http) else {
            return;
        };
        let sequenced = ex.checks.as_ref().is_some_and(|e| e.sequenced_event_ids);
        let kind = ex.kind;
        let mut new_cursor: Option<Option<EventId>> = None;
        if let Some(raw) = &event.id {
            if raw.is_empty() {
                // Per the SSE spec an empty id resets the cursor.
                new_cursor = Some(None);
            } else {
                match EventId::parse(raw) {
                    Ok(id) => {
                        if sequenced && ex.resumed {
                            let ok = match (&ex.expect_seq, id.sequenced()) {
                                (None, _) => true,
                                (Some((s, n)), Some((gs, gn))) => s == gs && *n == gn,
                                (Some(_), None) => false,
                            };
                            if !ok {
                                warn!(event_id = %id, "event ids not contiguous on a resumed stream");
                                return self.stream_violation(
                                    http,
                                    Failure::EventGap,
                                    ReinitReason::EventGap,
                                    now,
                                );
                            }
                        }
                        ex.expect_seq = id
                            .sequenced()
                            .map(|(s, n)| (s.to_owned(), n.saturating_add(1)));
                        ex.progress = true;
                        new_cursor = Some(Some(id));
                    }
                    Err(e) => warn!(error = %e, "invalid SSE event id ignored"),
                }
            }
        }
        if !event.data.is_empty() {
            ex.progress = true;
        }
        let progressed = new_cursor.is_some() || !event.data.is_empty();
        let retry = event
            .retry
            .map(|ms| Duration::from_millis(ms).min(MAX_RETRY));
        match kind {
            ExKind::Post(c) | ExKind::Resume(c) => {
                if let Some(call) = self.calls.get_mut(&c) {
                    // Only progress proves the server is reachable and the stream alive;
                    // a head alone does not (a replaying instance answers 200 too).
                    if progressed {
                        call.attempts = 0;
                    }
                    if let Some(cursor) = new_cursor {
                        call.cursor = cursor;
                    }
                    if retry.is_some() {
                        call.retry = retry;
                    }
                }
            }
            ExKind::Listen => {
                if let Some(cursor) = new_cursor {
                    self.listen.cursor = cursor;
                }
                if retry.is_some() {
                    self.listen.retry = retry;
                }
            }
            _ => {}
        }
        if event.data.is_empty() {
            return;
        }
        let allow_batch = self.exchanges.get(&http).is_some_and(|e| e.allow_batch);
        let _ = self.on_payload(http, event.data.as_bytes(), allow_batch, now);
    }

    /// A protocol violation on a resumed stream (gap, orphan).
    fn stream_violation(
        &mut self,
        http: HttpId,
        failure: Failure,
        reason: ReinitReason,
        now: Instant,
    ) {
        let Some(ex) = self.exchanges.get(&http) else {
            return;
        };
        match ex.kind {
            ExKind::Resume(c) | ExKind::Post(c) => self.apply(c, failure, now),
            ExKind::Listen => {
                self.finish_exchange(http);
                self.start_reinit(reason, now);
            }
            _ => {}
        }
    }

    /// Handles a body or event payload; `false` when it was not JSON-RPC at all.
    fn on_payload(
        &mut self,
        http: HttpId,
        payload: &[u8],
        allow_batch: bool,
        now: Instant,
    ) -> bool {
        let messages = match jsonrpc::decode(payload, allow_batch) {
            Ok(m) => m,
            Err(e) => {
                warn!(error = %e, "undecodable message ignored");
                return false;
            }
        };
        for message in messages {
            if !self.exchanges.contains_key(&http) {
                return true;
            }
            match message {
                Ok(m) => self.on_message(http, m, now),
                Err(e) => warn!(error = %e, "undecodable message ignored"),
            }
        }
        true
    }

    fn on_message(&mut self, http: HttpId, message: Message, now: Instant) {
        let Some(ex) = self.exchanges.get(&http) else {
            return;
        };
        let kind = ex.kind;
        let resumed = ex.resumed;
        let stream_call = match kind {
            ExKind::Post(c) | ExKind::Resume(c) => Some(c),
            _ => None,
        };
        match message {
            Message::Request { id, method, params } => {
                if method == "ping" {
                    self.respond(id, Ok(json!({})), now);
                } else {
                    self.outputs.push_back(Output::ServerRequest(ServerRequest {
                        id,
                        method,
                        params,
                    }));
                }
            }
            Message::Notification { method, params } => {
                self.outputs.push_back(Output::Notification {
                    call: stream_call,
                    notification: Notification { method, params },
                });
            }
            Message::Response { id, result } => {
                if kind == ExKind::Initialize {
                    let expected = match &self.init {
                        Some(Init {
                            step: InitStep::Initialize { rpc, .. },
                            ..
                        }) => Some(rpc.clone()),
                        _ => None,
                    };
                    if id.is_some() && id == expected {
                        self.on_initialize_response(http, result, now);
                    } else {
                        warn!("unexpected response on the initialize stream ignored");
                    }
                    return;
                }
                let Some(id) = id else {
                    // An error the server could not attribute: on a call's own POST it can
                    // only be about that call.
                    match (kind, result) {
                        (ExKind::Post(c), Err(e)) => self.complete(c, Err(Error::rpc(e))),
                        _ => warn!("response without id ignored"),
                    }
                    return;
                };
                match self.rpc_index.get(&id).copied() {
                    Some(call) => self.deliver(call, result, now),
                    None if self.was_issued(&id) => {
                        debug!(%id, "duplicate response dropped");
                    }
                    None if resumed && !self.config.dangerous_trust_replay => {
                        warn!(%id, "resumed stream delivered a response to a request never sent");
                        self.stream_violation(
                            http,
                            Failure::OrphanedResponse,
                            ReinitReason::OrphanedResponse,
                            now,
                        );
                    }
                    None => warn!(%id, "response to an unknown request ignored"),
                }
            }
        }
    }

    fn was_issued(&self, id: &RequestId) -> bool {
        matches!(id, RequestId::Number(n) if *n >= 1 && *n <= self.next_rpc)
    }

    fn deliver(&mut self, id: CallId, result: Result<Value, RpcError>, now: Instant) {
        let Some(call) = self.calls.get(&id) else {
            return;
        };
        if let (Ok(value), Some(expected), false) =
            (&result, &call.hash, self.config.dangerous_trust_replay)
        {
            if call.method == "tools/call" {
                if let Some(got) = ext::result_capability_hash(value) {
                    if !got.eq_ignore_ascii_case(expected.as_str()) {
                        return self.apply(id, Failure::CapabilityHashMismatch, now);
                    }
                }
            }
        }
        debug!(call = id.0, ok = result.is_ok(), "call completed");
        self.complete(id, result.map_err(Error::rpc));
    }

    /// A JSON body ended: a call whose response was not in it fails.
    fn json_ended_without_response(&mut self, kind: ExKind, decoded: bool, now: Instant) {
        match kind {
            ExKind::Post(c)
                if self
                    .calls
                    .get(&c)
                    .is_some_and(|call| matches!(call.state, CallState::Posting(_))) =>
            {
                if let Some(call) = self.calls.get_mut(&c) {
                    call.state = CallState::Waiting;
                }
                if decoded {
                    self.complete(
                        c,
                        Err(Error::new(
                            ErrorKind::Protocol,
                            "JSON body without the response",
                        )),
                    );
                } else {
                    // A cut or garbled body: the call may have run.
                    self.apply(
                        c,
                        Failure::StreamEnded {
                            event_id_seen: false,
                        },
                        now,
                    );
                }
            }
            ExKind::Initialize => self.init_failed(
                Error::new(ErrorKind::Protocol, "initialize body without the response"),
                now,
            ),
            _ => {}
        }
    }

    fn stream_ended(&mut self, ex: Exchange, clean: bool, now: Instant) {
        match ex.kind {
            ExKind::Initialize => self.init_failed(
                Error::new(
                    ErrorKind::Transport,
                    "initialize stream ended before the response",
                ),
                now,
            ),
            ExKind::Post(c) => {
                let Some(call) = self.calls.get_mut(&c) else {
                    return;
                };
                if !matches!(call.state, CallState::Posting(_)) {
                    return;
                }
                call.state = CallState::Waiting;
                let event_id_seen = call.cursor.is_some();
                debug!(
                    call = c.0,
                    clean, event_id_seen, "response stream ended early"
                );
                self.apply(c, Failure::StreamEnded { event_id_seen }, now);
            }
            ExKind::Resume(c) => {
                let Some(call) = self.calls.get_mut(&c) else {
                    return;
                };
                if !matches!(call.state, CallState::Resuming(_)) {
                    return;
                }
                call.state = CallState::Waiting;
                self.bump_no_progress(c, ex.progress);
                debug!(
                    call = c.0,
                    clean,
                    progress = ex.progress,
                    "resumed stream ended early"
                );
                self.apply(
                    c,
                    Failure::ResumedStreamEnded {
                        clean,
                        progress: ex.progress,
                    },
                    now,
                );
            }
            ExKind::Listen => self.listen_failed(ex.progress, now),
            _ => {}
        }
    }

    /// An error body (non-2xx) was read to its end (or as far as it went).
    fn error_body_done(&mut self, ex: Exchange, now: Instant) {
        let status = ex.status.unwrap_or(0);
        let Body::Error(body) = ex.body else {
            return;
        };
        let mentions_session = status == 400
            && ex.carried_session_id
            && body
                .to_ascii_lowercase()
                .windows(7)
                .any(|w| w == b"session");
        let rpc_error = || -> Option<RpcError> {
            let v: Value = serde_json::from_slice(&body).ok()?;
            match jsonrpc::decode_value(v).ok()? {
                Message::Response { result: Err(e), .. } => Some(e),
                _ => None,
            }
        };
        match ex.kind {
            ExKind::Initialize => {
                let err = rpc_error().map(Error::rpc).unwrap_or_else(|| {
                    Error::new(
                        ErrorKind::Protocol,
                        format!("initialize answered HTTP {status}"),
                    )
                });
                self.init_failed(err, now);
            }
            ExKind::Post(c) => {
                if !self
                    .calls
                    .get(&c)
                    .is_some_and(|call| matches!(call.state, CallState::Posting(_)))
                {
                    return;
                }
                if mentions_session {
                    return self.apply(c, Failure::PostSessionNotFound, now);
                }
                let err = rpc_error().map(Error::rpc).unwrap_or_else(|| {
                    Error::new(
                        ErrorKind::Protocol,
                        format!("request answered HTTP {status}"),
                    )
                });
                if let Some(call) = self.calls.get_mut(&c) {
                    call.state = CallState::Waiting;
                }
                self.complete(c, Err(err));
            }
            ExKind::Resume(c) => {
                if !self
                    .calls
                    .get(&c)
                    .is_some_and(|call| matches!(call.state, CallState::Resuming(_)))
                {
                    return;
                }
                if let Some(call) = self.calls.get_mut(&c) {
                    call.state = CallState::Waiting;
                }
                let rejection = if self.config.dangerous_trust_replay {
                    None
                } else {
                    ext::rejection_from_body(&body)
                };
                let failure = match (status, rejection) {
                    (404, Some(r)) => Failure::ResumeRejected(r),
                    (404, None) => Failure::ResumeNotFound,
                    (_, Some(r)) => Failure::ResumeRejected(r),
                    (_, None) if mentions_session => Failure::ResumeNotFound,
                    _ => Failure::ResumeNotAllowed,
                };
                self.apply(c, failure, now);
            }
            ExKind::Listen => {
                let rejection = if self.config.dangerous_trust_replay {
                    None
                } else {
                    ext::rejection_from_body(&body)
                };
                let reason = match rejection {
                    Some(r) => {
                        self.outputs
                            .push_back(Output::Event(SessionEvent::ResumeRejected {
                                reason: Some(r.clone()),
                            }));
                        ReinitReason::ResumeRejected(r)
                    }
                    None => ReinitReason::SessionNotFound,
                };
                self.listen.state = ListenState::Off;
                if status == 404 && ex.carried_session_id && self.listen_404_reinit {
                    // The fresh session's stream was refused the same way: the endpoint does
                    // not offer the stream (a server that says 404 where it means 405).
                    // Re-initializing again would loop.
                    warn!("standalone GET stream answered 404 twice in a row; not offered");
                    self.listen.state = ListenState::NotOffered;
                } else if status == 404 && ex.carried_session_id {
                    self.listen_404_reinit = true;
                    self.start_reinit(reason, now);
                } else {
                    self.listen_failed(false, now);
                }
            }
            _ => {}
        }
    }

    /// Something in a body was unacceptable (too large): the exchange is abandoned.
    fn exchange_broken(&mut self, http: HttpId, error: Error, now: Instant) {
        let Some(ex) = self.exchanges.get(&http) else {
            return;
        };
        let kind = ex.kind;
        self.finish_exchange(http);
        warn!(error = %error, "exchange abandoned");
        match kind {
            ExKind::Initialize => self.init_failed(error, now),
            ExKind::Post(c) | ExKind::Resume(c) => self.complete(c, Err(error)),
            ExKind::Listen => {
                // A hostile stream would only repeat itself: stop listening.
                self.listen.state = ListenState::GaveUp;
            }
            _ => {}
        }
    }

    fn open_listen(&mut self) {
        if !self.config.open_listen_stream || self.phase != Phase::Ready {
            return;
        }
        if self.listen.state != ListenState::Off {
            return;
        }
        let Some(ctx) = self.ctx.clone() else {
            return;
        };
        let mut headers = Self::session_headers(&ctx, false);
        let cursor = self.listen.cursor.clone();
        if let Some(c) = &cursor {
            headers.push(("last-event-id", c.as_str().to_owned()));
        }
        let purpose = if cursor.is_some() {
            HttpPurpose::Resume
        } else {
            HttpPurpose::Listen
        };
        let http = self.transmit(
            ExKind::Listen,
            HttpMethod::Get,
            purpose,
            headers,
            None,
            ctx.id.is_some(),
            ctx.protocol_version == BATCH_VERSION,
        );
        if let Some(ex) = self.exchanges.get_mut(&http) {
            ex.resumed = cursor.is_some();
            ex.expect_seq = cursor
                .as_ref()
                .and_then(|c| c.sequenced())
                .map(|(s, n)| (s.to_owned(), n.saturating_add(1)));
        }
        self.listen.state = ListenState::Open(http);
    }

    fn listen_failed(&mut self, progress: bool, now: Instant) {
        if progress {
            self.listen.attempts = 0;
        }
        self.listen.attempts = self.listen.attempts.saturating_add(1);
        if self.listen.attempts > self.config.reconnect.max_attempts {
            warn!("standalone GET stream keeps failing; giving up on it");
            self.listen.state = ListenState::GaveUp;
            return;
        }
        let delay = self.config.reconnect.delay(
            self.listen.attempts - 1,
            self.rng.next(),
            self.listen.retry,
        );
        self.listen.state = ListenState::Backoff(now.checked_add(delay).unwrap_or(now));
    }
}

// Low-level helpers.
impl Session {
    fn session_headers(ctx: &Ctx, post: bool) -> Vec<(&'static str, String)> {
        let mut headers = Vec::with_capacity(5);
        if post {
            headers.push(("accept", "application/json, text/event-stream".to_owned()));
            headers.push(("content-type", "application/json".to_owned()));
        } else {
            headers.push(("accept", "text/event-stream".to_owned()));
        }
        if let Some(id) = &ctx.id {
            headers.push(("mcp-session-id", id.expose().to_owned()));
        }
        if ctx.protocol_version.as_str() >= VERSION_HEADER_SINCE {
            headers.push(("mcp-protocol-version", ctx.protocol_version.clone()));
        }
        headers
    }

    fn post(
        &mut self,
        kind: ExKind,
        purpose: HttpPurpose,
        body: Bytes,
        extra: Option<(&'static str, String)>,
    ) {
        let Some(ctx) = self.ctx.clone() else {
            return;
        };
        let mut headers = Self::session_headers(&ctx, true);
        headers.extend(extra);
        self.transmit(
            kind,
            HttpMethod::Post,
            purpose,
            headers,
            Some(body),
            ctx.id.is_some(),
            false,
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn transmit(
        &mut self,
        kind: ExKind,
        method: HttpMethod,
        purpose: HttpPurpose,
        headers: Vec<(&'static str, String)>,
        body: Option<Bytes>,
        carried_session_id: bool,
        allow_batch: bool,
    ) -> HttpId {
        self.next_http += 1;
        let id = HttpId(self.next_http);
        self.exchanges.insert(
            id,
            Exchange {
                kind,
                carried_session_id,
                allow_batch,
                status: None,
                body: Body::Pending,
                resumed: false,
                progress: false,
                expect_seq: None,
                ended: false,
                checks: self.checks().cloned(),
            },
        );
        self.transmits.push_back(Transmit::Send(HttpRequest {
            id,
            method,
            purpose,
            headers,
            body,
        }));
        id
    }

    /// Drops an exchange the session no longer needs and tells the driver to stop it.
    fn finish_exchange(&mut self, http: HttpId) {
        if let Some(ex) = self.exchanges.remove(&http) {
            if !ex.ended {
                self.transmits.push_back(Transmit::Abort(http));
            }
        }
    }

    fn abort_all_exchanges(&mut self) {
        let ids: Vec<HttpId> = self
            .exchanges
            .iter()
            .filter(|(_, e)| e.kind != ExKind::Delete)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.finish_exchange(id);
        }
    }
}

fn with_meta_key(params: Option<Value>, meta_key: &str, key: &IdempotencyKey) -> Value {
    let mut params = match params {
        Some(Value::Object(m)) => m,
        // Non-object params cannot carry `_meta`; the header still carries the key.
        Some(other) => return other,
        None => Map::new(),
    };
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    if let Value::Object(meta) = meta {
        meta.insert(meta_key.to_owned(), Value::String(key.as_str().to_owned()));
    }
    Value::Object(params)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ContentType {
    Json,
    Sse,
    Other,
}

fn content_type(headers: &HeaderMap) -> ContentType {
    let Some(v) = headers.get(http::header::CONTENT_TYPE) else {
        return ContentType::Other;
    };
    let v = String::from_utf8_lossy(v.as_bytes());
    let essence = v
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match essence.as_str() {
        "application/json" => ContentType::Json,
        "text/event-stream" => ContentType::Sse,
        _ => ContentType::Other,
    }
}
