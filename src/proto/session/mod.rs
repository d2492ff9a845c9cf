//! The session state machine.
//!
//! One [`Session`] follows one logical MCP connection across every stream, resume and
//! re-initialization. This file is the facade: the driver-facing `handle_*` / `poll_*` and
//! the app's commands. It owns the parts below and holds little logic of its own:
//!
//! - `lifecycle`: the phase (idle, initializing, ready, closing, terminated), each variant
//!   carrying its data, and the negotiated session;
//! - `calls`: the call table (ids, progress tokens, recovery state);
//! - `exchanges`: the HTTP exchanges in flight and the driver's action queue;
//! - `cursors`: stream cursors and the event ids already delivered;
//! - `timers`: every deadline and backoff, ordered by expiry;
//! - `listen`: the standalone GET stream;
//! - `heads`, `refusals`, `inbound`: what arrives, read through
//!   [`classify`](super::classify) into successes or [`Failure`](super::decide::Failure)s;
//! - `apply`: the recovery decision of [`decide`](super::decide::decide) carried out, the one
//!   place that starts a re-initialization;
//! - `init`: the handshake; `outbound`: what the session sends.
//!
//! The [pipeline walkthrough](super::walkthrough) follows a cross-instance resume through
//! these parts.

mod ahead;
mod apply;
mod call;
mod checkpoints;
mod cursors;
mod discover;
mod exchanges;
mod headers;
mod heads;
mod inbound;
mod init;
mod lifecycle;
mod listen;
mod modern_calls;
mod outbound;
mod refusals;
mod tasks;
mod timers;

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use serde_json::Value;
use tracing::{debug, info, warn};

pub use self::ahead::{read_ahead, BodyFormat, DecodedEvent, DecodedJson, SseAhead};
use self::call::{Call, CallState, Calls};
use self::cursors::Delivered;
use self::exchanges::{Body, ExKind, Exchange, Exchanges};
use self::headers::{session_id_header, MCP_PROTOCOL_VERSION, MCP_SESSION_ID};
use self::lifecycle::{Lifecycle, Phase, Step};
use self::listen::{Listen, ListenState};
use self::tasks::TASKS_EXTENSION;
use self::timers::{Timer, Timers};
use super::classify::{HeadFacts, MAX_ERROR_BODY};
use super::config::SessionConfig;
use super::decide::Failure;
use super::methods;
use super::modern::{ClientMeta, ParamHeader};
use super::probe::ProbeAnswer;
use super::version::ProtocolVersion;
use super::{
    jsonrpc, CallId, CallRequest, ExtensionStatus, HttpId, Output, SessionEvent, Transmit,
    TransportFailure,
};
use crate::error::{Error, ErrorKind, RpcError};
use crate::ids::{RequestId, SessionId};
use crate::sse::SseEvent;

/// A call whose deadline cannot be represented (a timeout of centuries) gets this one.
const FAR_FUTURE: std::time::Duration = std::time::Duration::from_secs(100 * 365 * 24 * 3600);

/// The deadline of a call allowed `timeout` from `now`: a timeout beyond what the clock can
/// represent means "practically never", not "at once".
fn deadline_after(now: Instant, timeout: std::time::Duration) -> Instant {
    now.checked_add(timeout)
        .or_else(|| now.checked_add(FAR_FUTURE))
        .unwrap_or(now)
}

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

/// The sans-IO MCP client session. See the [module docs](super) for the driver contract.
#[derive(Debug)]
pub struct Session {
    config: SessionConfig,
    rng: Rng,
    life: Lifecycle,
    calls: Calls,
    exchanges: Exchanges,
    timers: Timers,
    listen: Listen,
    delivered: Delivered,
    /// `x-mcp-header` annotations of the tools a modern server listed, by tool name.
    tool_headers: HashMap<String, Vec<ParamHeader>>,
    /// What a modern request says of the client: the configured capabilities with the
    /// extensions the core itself handles (tasks), and the client's name and version.
    client_meta: ClientMeta,
    /// The app's notifications held until the session is ready.
    notifications: VecDeque<Bytes>,
    /// Reused for the events decoded from each body chunk.
    scratch_events: Vec<SseEvent>,
    outputs: VecDeque<Output>,
}

impl Session {
    /// Creates an idle session. Nothing is sent until [`Session::connect`] or the first
    /// [`Session::submit`].
    pub fn new(config: SessionConfig, now: Instant) -> Self {
        let _ = now;
        let mut modern_capabilities = config.client_capabilities.clone();
        if let Value::Object(caps) = &mut modern_capabilities {
            let extensions = caps
                .entry("extensions")
                .or_insert_with(|| Value::Object(Default::default()));
            if let Value::Object(extensions) = extensions {
                extensions
                    .entry(TASKS_EXTENSION)
                    .or_insert_with(|| Value::Object(Default::default()));
            }
        }
        let client_meta = ClientMeta::new(
            modern_capabilities,
            &config.client_name,
            &config.client_version,
        );
        Session {
            rng: Rng(config.jitter_seed),
            client_meta,
            config,
            life: Lifecycle::new(),
            calls: Calls::default(),
            exchanges: Exchanges::default(),
            timers: Timers::default(),
            listen: Listen::new(),
            delivered: Delivered::default(),
            tool_headers: HashMap::new(),
            notifications: VecDeque::new(),
            scratch_events: Vec::new(),
            outputs: VecDeque::new(),
        }
    }

    /// Starts `initialize` (+ `notifications/initialized`, + the GET stream). The returned
    /// call completes with the `initialize` result once the session is ready (at once when it
    /// already is).
    pub fn connect(&mut self, now: Instant) -> CallId {
        let id = CallId::next();
        match &self.life.phase {
            Phase::Ready(e) => {
                let result = e.session.result.clone();
                self.outputs.push_back(Output::Completed {
                    call: id,
                    result: Ok(result),
                });
            }
            Phase::Initializing(_) => self.life.connect_waiters.push(id),
            Phase::Idle => {
                self.life.connect_waiters.push(id);
                self.start_handshake(None, None, None, now);
            }
            Phase::Lost(_) => {
                self.life.connect_waiters.push(id);
                self.reconnect_lost(now);
            }
            Phase::Closing { .. } | Phase::Terminated => {
                let error = self.terminal_error();
                self.outputs.push_back(Output::Completed {
                    call: id,
                    result: Err(error),
                });
            }
        }
        id
    }

    /// Submits a request as call `id` ([`CallId::next`]): the id its outputs and events name.
    /// Calls submitted before or during (re-)initialization wait for it; the first one
    /// connects. An id already in use is refused (nothing is sent, nothing reported).
    pub fn submit(&mut self, id: CallId, request: CallRequest, now: Instant) {
        if self.refuse(id, "submission") {
            return;
        }
        let deadline = deadline_after(now, request.timeout.unwrap_or(self.config.call_timeout));
        let call = Call::new(
            request.method,
            request.params,
            request.idempotency_key,
            deadline,
        );
        self.calls.insert(id, call);
        self.timers.set(Timer::CallDeadline(id), deadline);
        match self.life.phase {
            Phase::Ready(_) => self.send_call(id),
            Phase::Idle => self.start_handshake(None, None, None, now),
            Phase::Lost(_) => self.reconnect_lost(now),
            _ => {}
        }
    }

    /// Sends a notification to the server (best effort; no completion is reported). Before
    /// the session is ready it is held (bounded) and sent once it is.
    pub fn notify(&mut self, method: &str, params: Option<Value>, now: Instant) {
        if self.life.is_over() {
            debug!(method, "notification dropped: session closed");
            return;
        }
        let body = jsonrpc::encode_notification(method, params.as_ref());
        if self.life.is_ready() {
            self.post(ExKind::Notify, body);
        } else {
            self.queue_notification(body);
            match self.life.phase {
                Phase::Idle => self.start_handshake(None, None, None, now),
                Phase::Lost(_) => self.reconnect_lost(now),
                _ => {}
            }
        }
    }

    /// Answers a server-to-client request. At most 8 answers are in flight; up to 256 wait
    /// behind them, more are dropped and counted ([`Session::dropped_answers`]).
    pub fn respond(&mut self, id: RequestId, result: Result<Value, RpcError>, now: Instant) {
        // An answer to an MRTR input goes into the call's next round, not on the wire.
        let Err(result) = self.input_answered_or(&id, result, now) else {
            return;
        };
        if self.is_modern() {
            // The modern era has no server requests to answer: this is an input of a call
            // that ended (dropped, cancelled, past its deadline), and nothing more is sent
            // for it.
            debug!(%id, "answer to an input of an ended call dropped");
            return;
        }
        if !self.life.is_ready() {
            debug!(%id, "answer to a server request dropped: session not ready");
            return;
        }
        let body = jsonrpc::encode_response(&id, &result);
        if !self.exchanges.queue_answer(body) {
            warn!(
                dropped = self.exchanges.answers.dropped,
                "answer to a server request dropped: too many queued"
            );
        }
        self.flush_answers();
    }

    /// The app gave up on a call (its future was dropped): POST `notifications/cancelled`
    /// if it may be running, abort its stream, and report nothing more for it.
    pub fn cancel(&mut self, call: CallId, now: Instant) {
        self.cancel_call(call, None, now);
    }

    /// As [`Session::cancel`], for a call whose current POST, exchange `unsent`, the driver
    /// took from [`Session::poll_transmit`] but never started (and now drops): the request
    /// is known not to have left, and the server is told nothing, as for a POST still queued.
    pub fn cancel_unsent(&mut self, call: CallId, unsent: HttpId, now: Instant) {
        self.cancel_call(call, Some(unsent), now);
    }

    fn cancel_call(&mut self, call: CallId, unsent: Option<HttpId>, now: Instant) {
        let _ = now;
        let Some(c) = self.calls.get_mut(call) else {
            return;
        };
        // Its POST never left (still queued, or given back by the driver): nothing runs, and
        // the server is told nothing. (A resume GET not sent yet says nothing: the POST before
        // it ran.)
        if let CallState::Posting(http) = c.state() {
            if unsent == Some(http) || self.exchanges.unsent(http) {
                c.not_run();
            }
        }
        self.send_cancelled(call, "cancelled by the client");
        self.cancel_task(call);
        if self.remove_call(call).is_some() {
            debug!(call = call.0, "call cancelled");
        }
    }

    /// Closes the session: fails waiting calls with `Closed` and DELETEs the session. The
    /// returned call completes when the DELETE is answered (405 tolerated, and a session the
    /// server no longer knows is closed too).
    pub fn close(&mut self, now: Instant) -> CallId {
        let _ = now;
        let id = CallId::next();
        // A lost session has nothing left to delete: the server already forgot it.
        if self.life.is_over() || matches!(self.life.phase, Phase::Idle | Phase::Lost(_)) {
            if matches!(self.life.phase, Phase::Idle | Phase::Lost(_)) {
                self.life.phase = Phase::Terminated;
                self.outputs.push_back(Output::Event(SessionEvent::Closed));
            }
            self.outputs.push_back(Output::Completed {
                call: id,
                result: Ok(Value::Null),
            });
            return id;
        }
        // The session to delete: the established one, or the one a handshake has obtained.
        let delete = match &self.life.phase {
            Phase::Ready(e) => e.session.headers.id().map(|v| (v, e.session.version)),
            Phase::Initializing(h) => match &h.step {
                Step::Initialized { session, .. } => {
                    session.headers.id().map(|v| (v, session.version))
                }
                Step::Initialize { head, .. } => head.session_id.as_ref().and_then(|sid| {
                    session_id_header(sid).map(|v| (v, self.config.protocol_version))
                }),
                Step::Backoff | Step::Discover { .. } => None,
            },
            _ => None,
        };
        self.life.phase = Phase::Terminated;
        self.fail_everything(ErrorKind::Closed, "session closed", false);
        self.exchanges.finish_all_but_delete();
        self.timers.clear();
        self.listen = Listen::new();
        self.notifications.clear();
        self.outputs.push_back(Output::Event(SessionEvent::Closed));
        match delete {
            Some((sid, version)) => {
                info!("closing session");
                let mut headers = HeaderMap::with_capacity(2);
                headers.insert(MCP_SESSION_ID, sid);
                if version.has_version_header() {
                    headers.insert(
                        MCP_PROTOCOL_VERSION,
                        HeaderValue::from_static(version.as_str()),
                    );
                }
                self.send_delete(headers, id);
            }
            None => self.outputs.push_back(Output::Completed {
                call: id,
                result: Ok(Value::Null),
            }),
        }
        id
    }

    /// The response head of an exchange arrived.
    pub fn handle_head(&mut self, http: HttpId, status: u16, headers: &HeaderMap, now: Instant) {
        let Some(ex) = self.exchanges.get_mut(http) else {
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
        if !(200..300).contains(&status) {
            // A refusal: what it means may depend on its body, which is read (bounded) and
            // classified when it ends.
            ex.head = HeadFacts::read(status, headers);
            ex.body = Body::Error(Vec::new());
            return;
        }
        let kind = ex.kind;
        self.on_success_head(http, kind, status, headers, now);
    }

    /// Body bytes of an exchange arrived (SSE or JSON, per the head's content type).
    pub fn handle_data(&mut self, http: HttpId, data: &[u8], now: Instant) {
        let max_body = self.config.max_body_size;
        let Some(ex) = self.exchanges.get_mut(http) else {
            return;
        };
        // One buffer for the events of every chunk: taken here, given back below.
        let mut events = std::mem::take(&mut self.scratch_events);
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
                    if let Some(ex) = self.exchanges.remove(http) {
                        self.exchanges.abort(http);
                        self.on_refusal(ex, now);
                    }
                }
                return;
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
        self.on_events(http, &mut events, now);
        self.scratch_events = events;
        if let Some(err) = broken {
            self.exchange_broken(http, err, now);
        }
    }

    /// The body of an exchange ended cleanly.
    pub fn handle_end(&mut self, http: HttpId, now: Instant) {
        let Some(ex) = self.exchanges.get_mut(http) else {
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
                if let Some(ex) = self.remove_current(http) {
                    self.json_ended(ex.kind, decoded, now);
                }
            }
            Body::Sse(decoder) => {
                let mut events = Vec::new();
                decoder.finish(&mut events);
                self.on_events(http, &mut events, now);
                if let Some(ex) = self.remove_current(http) {
                    self.stream_ended(ex.kind, ex.progress, true, now);
                }
            }
            Body::Error(_) => {
                if let Some(ex) = self.remove_current(http) {
                    self.on_refusal(ex, now);
                }
            }
        }
    }

    /// An exchange failed at the transport level.
    pub fn handle_error(&mut self, http: HttpId, failure: TransportFailure, now: Instant) {
        let Some(ex) = self.remove_current(http) else {
            return;
        };
        let connect = matches!(failure, TransportFailure::Connect(_));
        let reason = match failure {
            TransportFailure::Connect(r) | TransportFailure::Lost(r) => r,
        };
        debug!(http = http.0, kind = ?ex.kind, connect, reason = %reason, "exchange failed");
        if ex.kind == ExKind::Discover && !matches!(ex.body, Body::Error(_)) {
            // No answer, or only part of one: the probe is asked again.
            let cause = Error::new(ErrorKind::Transport, reason);
            return self.probe_answered(ProbeAnswer::Transport, cause, now);
        }
        if ex.status.is_some() {
            match ex.body {
                Body::Sse(_) => self.stream_ended(ex.kind, ex.progress, false, now),
                Body::Error(_) => self.on_refusal(ex, now),
                Body::Json(_) => self.json_ended(ex.kind, false, now),
                Body::Pending => {}
            }
            return;
        }
        match ex.kind {
            ExKind::Initialize => self.initialize_unanswered(
                Error::new(ErrorKind::Transport, reason).during(methods::INITIALIZE),
                now,
            ),
            ExKind::Initialized | ExKind::Discover => self.init_failed(
                Error::new(ErrorKind::Transport, reason).during(methods::INITIALIZE),
                now,
            ),
            ExKind::Post(call) => {
                let cause = Error::new(ErrorKind::Transport, reason);
                if connect {
                    if let Some(c) = self.calls.get_mut(call) {
                        c.not_run();
                    }
                    self.apply_because(call, Failure::PostConnectFailed, cause, now);
                } else {
                    self.apply_because(call, Failure::PostLost, cause, now);
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
            ExKind::Listen => self.listen_failed(Failure::ResumeConnectFailed, None, false, now),
            ExKind::Notify | ExKind::Answer => debug!("notification POST failed: {reason}"),
            ExKind::Delete => self.close_done(Err(Error::new(ErrorKind::Transport, reason))),
        }
    }

    /// Time passed: fire expired timers (backoffs, deadlines).
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(timer) = self.timers.pop_due(now) {
            match timer {
                Timer::InitBackoff => self.send_handshake(now),
                Timer::InitDeadline => {
                    let request = self.handshake_request();
                    let error = Error::new(ErrorKind::Timeout, format!("{request} timed out"));
                    self.init_failed(error, now)
                }
                Timer::ListenBackoff => {
                    if self.listen.state == ListenState::Backoff {
                        self.listen.state = ListenState::Off;
                        self.open_listen(now);
                    }
                }
                Timer::CallBackoff(id) => self.fire_retry(id, now),
                Timer::CallDeadline(id) => {
                    if let Some(call) = self.calls.get(id) {
                        info!(call = id.0, method = %call.method(), "call deadline passed");
                        self.send_cancelled(id, "timeout");
                        // A task is not cancelled: the deadline bounds the wait, not the
                        // durable work, whose id stays recorded to be resumed later.
                        self.apply(id, Failure::DeadlineExpired, now);
                    }
                }
            }
        }
    }

    /// Next network action.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.flush_answers();
        self.exchanges.poll_transmit()
    }

    /// Next output for the app.
    #[must_use]
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// When [`Session::handle_timeout`] must be called next.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next()
    }

    /// Whether the session is closed, with nothing left in flight (the driver may stop). A
    /// lost session is not: the next call reconnects.
    pub fn is_terminated(&self) -> bool {
        matches!(self.life.phase, Phase::Terminated)
    }
}

// Read-only views for drivers, bindings and tests.
impl Session {
    /// The current session id, once `initialize` succeeded (shown only as a prefix by
    /// `Display`).
    pub fn session_id(&self) -> Option<&SessionId> {
        self.life.ready().and_then(|s| s.id.as_ref())
    }

    /// The negotiated protocol version of the current session.
    pub fn protocol_version(&self) -> Option<ProtocolVersion> {
        self.life.ready().map(|s| s.version)
    }

    /// Whether the session is established and not re-initializing.
    pub fn is_ready(&self) -> bool {
        self.life.is_ready()
    }

    /// Whether the session is lost: re-initialization kept failing while no call waited, and
    /// stopped. The next call (or `connect`) starts it again.
    pub fn is_lost(&self) -> bool {
        matches!(self.life.phase, Phase::Lost(_))
    }

    /// The call whose request the exchange `http` POSTs, if it is a call's POST (not a resume,
    /// a handshake or a notification). A driver may perform that exchange wherever the call
    /// is awaited; every other exchange belongs to the session as a whole.
    pub fn exchange_call(&self, http: HttpId) -> Option<CallId> {
        match self.exchanges.get(http)?.kind {
            ExKind::Post(call) => Some(call),
            _ => None,
        }
    }

    /// Number of calls not yet completed.
    pub fn pending_calls(&self) -> usize {
        self.calls.len()
    }

    /// Which resume-safety checks the current session's server advertised and which are in
    /// force; `None` before the first session is established.
    pub fn extension_status(&self) -> Option<ExtensionStatus> {
        self.life.ready().map(|s| s.extension_status())
    }

    /// Answers to server requests dropped because more than 256 were queued behind those in
    /// flight.
    pub fn dropped_answers(&self) -> u64 {
        self.exchanges.answers.dropped
    }
}

// Small helpers of the facade.
impl Session {
    /// Hands an answer to the MRTR round it belongs to; gives it back when it is not one.
    fn input_answered_or(
        &mut self,
        id: &RequestId,
        result: Result<Value, RpcError>,
        now: Instant,
    ) -> Result<(), Result<Value, RpcError>> {
        if self.calls.has_input(id) {
            self.input_answered(id, result, now);
            Ok(())
        } else {
            Err(result)
        }
    }

    /// Whether call `id` cannot start (`what`: a submission or a pick-up): its id is in use
    /// (ignored), or the session is over (the call completed at once with why).
    fn refuse(&mut self, id: CallId, what: &str) -> bool {
        if self.calls.get(id).is_some() {
            warn!(call = id.0, "call id already in use: {what} ignored");
            return true;
        }
        if self.life.is_over() {
            let error = self.terminal_error();
            self.outputs.push_back(Output::Completed {
                call: id,
                result: Err(error),
            });
            return true;
        }
        false
    }

    fn terminal_error(&self) -> Error {
        Error::new(ErrorKind::Closed, "session closed")
    }

    /// The DELETE was answered (or failed): the close call completes.
    fn close_done(&mut self, result: Result<Value, Error>) {
        if let Phase::Closing { close } = self.life.phase {
            self.life.phase = Phase::Terminated;
            self.outputs.push_back(Output::Completed {
                call: close,
                result,
            });
        }
    }

    fn bump_no_progress(&mut self, id: CallId, progress: bool) {
        if let Some(call) = self.calls.get_mut(id) {
            call.resumed(progress);
        }
    }

    /// An SSE body ended (cleanly or not) before what its exchange was waiting for.
    fn stream_ended(&mut self, kind: ExKind, progress: bool, clean: bool, now: Instant) {
        match kind {
            ExKind::Initialize => self.initialize_unanswered(
                Error::new(
                    ErrorKind::Transport,
                    "initialize stream ended before the response",
                ),
                now,
            ),
            ExKind::Discover if clean => self.probe_answered(
                ProbeAnswer::NoResponse,
                Error::new(ErrorKind::Protocol, "stream ended without the response"),
                now,
            ),
            ExKind::Discover => self.probe_answered(
                ProbeAnswer::Transport,
                Error::new(ErrorKind::Transport, "stream broke before the response"),
                now,
            ),
            ExKind::Post(c) => {
                let Some(call) = self.calls.get_mut(c) else {
                    return;
                };
                if !matches!(call.state(), CallState::Posting(_)) {
                    return;
                }
                call.wait();
                let event_id_seen = call.last_event_id().is_some();
                debug!(
                    call = c.0,
                    clean, event_id_seen, "response stream ended early"
                );
                self.apply(c, Failure::StreamEnded { event_id_seen }, now);
            }
            ExKind::Resume(c) => {
                let Some(call) = self.calls.get_mut(c) else {
                    return;
                };
                if !matches!(call.state(), CallState::Resuming(_)) {
                    return;
                }
                call.wait();
                self.bump_no_progress(c, progress);
                debug!(call = c.0, clean, progress, "resumed stream ended early");
                self.apply(c, Failure::ResumedStreamEnded { clean, progress }, now);
            }
            ExKind::Listen => {
                let event_id_seen = self.listen.cursor.last.is_some();
                self.listen_failed(Failure::StreamEnded { event_id_seen }, None, progress, now);
            }
            _ => {}
        }
    }

    /// Removes exchange `http`, returning it only if its end still speaks for what it
    /// served: a call that has moved on to another exchange (the next MRTR round's POST, a
    /// resume after a cut) is not ended by the end of an earlier one.
    fn remove_current(&mut self, http: HttpId) -> Option<Exchange> {
        let ex = self.exchanges.remove(http)?;
        match ex.kind {
            ExKind::Post(c) | ExKind::Resume(c)
                if self
                    .calls
                    .get(c)
                    .is_some_and(|call| call.state().exchange() != Some(http)) =>
            {
                debug!(http = http.0, call = c.0, "a call's former exchange ended");
                None
            }
            _ => Some(ex),
        }
    }

    /// Something in a body was unacceptable (too large): the exchange is abandoned.
    fn exchange_broken(&mut self, http: HttpId, error: Error, now: Instant) {
        let Some(ex) = self.exchanges.get(http) else {
            return;
        };
        let kind = ex.kind;
        self.exchanges.finish(http);
        warn!(error = %error, "exchange abandoned");
        match kind {
            ExKind::Initialize => self.init_failed(error.during(methods::INITIALIZE), now),
            // Not an answer to read: a legacy server's page, say (`read_probe` decides).
            ExKind::Discover => self.probe_answered(ProbeAnswer::NoResponse, error, now),
            ExKind::Post(c) | ExKind::Resume(c) => self.complete(c, Err(error)),
            ExKind::Listen => {
                // A hostile stream would only repeat itself: stop listening.
                self.listen.state = ListenState::GaveUp;
            }
            _ => {}
        }
    }
}
