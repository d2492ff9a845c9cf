//! The session state machine.
//!
//! One [`Session`] follows one logical MCP connection across every stream, resume and
//! re-initialization. Failures are turned into [`Failure`]s and handed to the pure
//! [`decide`](super::decide::decide); the modules below only gather the facts and carry the
//! decisions out:
//!
//! - this file: the [`Session`] struct, its public API and the driver-facing `handle_*` /
//!   `poll_*`;
//! - `init`: initialize, re-initialize, and comparing the new context with the old one;
//! - `calls`: the call table: sending, completing and failing calls;
//! - `recovery`: carrying each decision out: scheduling resumes and re-sends;
//! - `streams`: response heads, bodies and SSE events of a call's exchanges; cursors;
//! - `messages`: routing decoded JSON-RPC messages to calls, the app or `initialize`;
//! - `listen`: the standalone GET stream;
//! - `checks`: the resume-safety extension checks (capability hash, event sequence,
//!   rejection);
//! - `exchange`: HTTP exchange bookkeeping and the headers every request carries.

mod calls;
mod checks;
mod delivered;
mod exchange;
mod init;
mod listen;
mod messages;
mod recovery;
mod refusals;
mod streams;

pub use self::exchange::{MAX_ANSWERS_IN_FLIGHT, MAX_QUEUED_ANSWERS};

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use http::HeaderMap;
use serde_json::Value;
use tracing::{debug, info, warn};

use self::calls::{Call, CallState};
use self::delivered::Delivered;
use self::exchange::{content_type, Answers, Body, ExKind, Exchange};
use self::init::{Init, InitStep};
use self::listen::{Listen, ListenState};
use super::classify::{HeadFacts, MAX_ERROR_BODY};
use super::config::SessionConfig;
use super::decide::Failure;
use super::ext::ResumeSafety;
use super::jsonrpc;
use super::{
    CallId, CallRequest, ExtensionStatus, HttpId, HttpMethod, HttpPurpose, Output, SessionEvent,
    Transmit, TransportFailure,
};
use crate::error::{Error, ErrorKind, RpcError};
use crate::ids::{CapabilityHash, RequestId, SessionId};

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
    /// When the current session was established.
    established_at: Option<Instant>,
    /// Consecutive re-initializations not yet confirmed by a successful exchange (failed
    /// ones included): what bounds a server that accepts `initialize` and refuses the rest.
    reinit_failures: u32,
    /// A call of the current session got a success answer since it was established.
    confirmed: bool,
    init_result: Option<Value>,
    connect_waiters: Vec<CallId>,
    close_call: Option<CallId>,
    calls: BTreeMap<CallId, Call>,
    rpc_index: HashMap<RequestId, CallId>,
    exchanges: BTreeMap<HttpId, Exchange>,
    answers: Answers,
    /// Event ids already delivered in this session (they are unique across its streams), so
    /// a server that replays more than asked never delivers anything twice.
    delivered: Delivered,
    /// Which call a `progressToken` belongs to.
    progress_tokens: HashMap<RequestId, CallId>,
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
            established_at: None,
            reinit_failures: 0,
            confirmed: false,
            init_result: None,
            connect_waiters: Vec::new(),
            close_call: None,
            calls: BTreeMap::new(),
            rpc_index: HashMap::new(),
            exchanges: BTreeMap::new(),
            answers: Answers::default(),
            delivered: Delivered::default(),
            progress_tokens: HashMap::new(),
            listen: Listen::new(),
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
                self.start_init(None, None, now);
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
        let progress_token = request
            .params
            .as_ref()
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get("progressToken"))
            .and_then(RequestId::from_json);
        if let Some(token) = &progress_token {
            self.progress_tokens.insert(token.clone(), id);
        }
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
                cause: None,
                progress_token,
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
        self.post(ExKind::Notify, HttpPurpose::Notify, body);
    }

    /// Answers a server-to-client request.
    pub fn respond(&mut self, id: RequestId, result: Result<Value, RpcError>, now: Instant) {
        let _ = now;
        if self.phase != Phase::Ready {
            debug!(%id, "answer to a server request dropped: session not ready");
            return;
        }
        let body = jsonrpc::encode_response(&id, &result);
        self.send_answer(body);
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
                let mut headers = vec![(SessionId::HEADER, sid.expose().to_owned())];
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
        if !(200..300).contains(&status) {
            // A refusal: what it means may depend on its body, which is read (bounded) and
            // classified when it ends.
            ex.head = HeadFacts::read(headers, !self.config.dangerous_trust_replay);
            ex.body = Body::Error(Vec::new());
            return;
        }
        let ct = content_type(headers);
        match kind {
            ExKind::Initialize => self.on_initialize_head(http, headers, ct, now),
            ExKind::Initialized => {
                self.finish_exchange(http);
                self.init_succeeded(now);
            }
            ExKind::Post(call) => self.on_post_head(http, call, status, headers, ct, now),
            ExKind::Resume(call) => self.on_resume_head(http, call, headers, ct, now),
            ExKind::Listen => self.on_listen_head(http, headers, ct, now),
            ExKind::Notify | ExKind::Answer => self.finish_exchange(http),
            ExKind::Delete => {
                self.finish_exchange(http);
                self.close_done(Ok(Value::Null));
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
                if buf.len() >= MAX_ERROR_BODY {
                    // Enough to classify: an endless error body must not hold the answer.
                    if let Some(ex) = self.remove_exchange(http) {
                        self.transmits.push_back(Transmit::Abort(http));
                        self.on_refusal(ex, now);
                    }
                    return;
                }
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
                if let Some(ex) = self.remove_exchange(http) {
                    self.json_ended_without_response(ex.kind, decoded, now);
                }
            }
            Body::Sse(decoder) => {
                let mut events = Vec::new();
                decoder.finish(&mut events);
                self.on_events(http, events, now);
                if let Some(ex) = self.remove_exchange(http) {
                    self.stream_ended(ex, true, now);
                }
            }
            Body::Error(_) => {
                if let Some(ex) = self.remove_exchange(http) {
                    self.on_refusal(ex, now);
                }
            }
        }
    }

    /// An exchange failed at the transport level.
    pub fn handle_error(&mut self, http: HttpId, failure: TransportFailure, now: Instant) {
        let Some(ex) = self.remove_exchange(http) else {
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
                Body::Error(_) => self.on_refusal(ex, now),
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
            ExKind::Notify | ExKind::Answer => debug!("notification POST failed: {reason}"),
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

    /// Which resume-safety checks the current session's server advertised and which are in
    /// force; `None` before the first session is established.
    pub fn extension_status(&self) -> Option<ExtensionStatus> {
        let ctx = self.ctx.as_ref()?;
        Some(match &ctx.ext {
            None => ExtensionStatus::default(),
            Some(ext) => ExtensionStatus {
                advertised: true,
                capability_hash: ext.capability_hash,
                sequenced_event_ids: ext.sequenced_event_ids,
                idempotency: ext.idempotency_meta_key.is_some(),
            },
        })
    }

    /// Answers to server requests dropped because too many were queued (see
    /// [`MAX_QUEUED_ANSWERS`]).
    pub fn dropped_answers(&self) -> u64 {
        self.answers.dropped
    }
}

// Closing.
impl Session {
    fn close_done(&mut self, result: Result<Value, Error>) {
        self.phase = Phase::Terminated;
        if let Some(call) = self.close_call.take() {
            self.outputs.push_back(Output::Completed { call, result });
        }
    }
}
