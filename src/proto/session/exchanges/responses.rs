//! What the server answers, as the driver reports it: response heads, body bytes (or a body
//! decoded ahead), ends and transport failures. Success heads are read through
//! [`classify`](crate::proto::classify) into a body to read; refusals are classified by its one
//! rule and mapped to what they mean for their exchange; a body that ends before what its
//! exchange waited for becomes a recovery [`Failure`]. A handshake request's head or refusal
//! is handed to the lifecycle, whose handshake it is.
//!
//! What the bodies carry is read here too: SSE events move their stream's cursor, and the
//! JSON-RPC messages in them go to the call they answer (checked against what the extension
//! lets us check; what a modern answer asks next is `call::modern`'s), to the app, or to the
//! handshake.

use std::time::Instant;

use http::HeaderMap;
use serde_json::{json, Value};
use tracing::{debug, warn};

use super::{Ended, ExKind, Exchange, Fed, Hold};
use crate::error::{Error, ErrorKind, RpcError};
use crate::ids::RequestId;
use crate::proto::classify::{self, ContentType, Refusal, Refused};
use crate::proto::decide::{decide, Decision, Failure};
use crate::proto::jsonrpc::{self, DecodeError, Decoded, Message};
use crate::proto::probe::ProbeAnswer;
use crate::proto::session::ahead::{DecodedEvent, DecodedJson};
use crate::proto::session::call::CallState;
use crate::proto::session::cursors::Observed;
use crate::proto::session::negotiated::Negotiated;
use crate::proto::session::{Session, MAX_REQUEST_METHOD_LEN};
use crate::proto::{ext, methods};
use crate::proto::{
    CallId, HttpId, Notification, Output, ServerRequest, SessionEvent, TransportFailure,
};
use crate::sse::SseEvent;

// The driver's inputs.
impl Session {
    /// The response head of an exchange arrived.
    pub fn handle_head(&mut self, http: HttpId, status: u16, headers: &HeaderMap, now: Instant) {
        if let Some(kind) = self.exchanges.on_head(http, status, headers) {
            self.on_success_head(http, kind, status, headers, now);
        }
    }

    /// Body bytes of an exchange arrived (SSE or JSON, per the head's content type).
    pub fn handle_data(&mut self, http: HttpId, data: &[u8], now: Instant) {
        let max_body = self.config.max_body_size;
        // One buffer for the events of every chunk: taken here, given back below.
        let mut events = std::mem::take(&mut self.scratch_events);
        let broken = match self.exchanges.feed(http, data, max_body, &mut events) {
            Fed::Read => None,
            Fed::Refused(ex) => {
                self.scratch_events = events;
                return self.on_refusal(*ex, now);
            }
            Fed::Broken(error) => Some(error),
        };
        self.on_events(http, &mut events, now);
        self.scratch_events = events;
        if let Some(err) = broken {
            self.exchange_broken(http, err, now);
        }
    }

    /// The body of an exchange ended cleanly.
    pub fn handle_end(&mut self, http: HttpId, now: Instant) {
        // The driver is done with it: finishing it while its last bytes are handled must not
        // send a pointless abort.
        let mut events = Vec::new();
        let Some(ended) = self.exchanges.end(http, Some(&mut events)) else {
            return;
        };
        match ended {
            Ended::NoHead { .. } | Ended::Unread => {
                // End without a body read: the driver broke its contract; treat as a lost
                // exchange.
                self.handle_error(http, TransportFailure::Lost("end without head".into()), now);
            }
            Ended::Json(buf) => {
                let decoded = self.on_payload(http, &buf, now);
                if let Some(ex) = self.remove_current(http) {
                    self.json_ended(ex.kind(), decoded, now);
                }
            }
            Ended::Sse => {
                self.on_events(http, &mut events, now);
                if let Some(ex) = self.remove_current(http) {
                    self.stream_ended(ex.kind(), ex.made_progress(), true, now);
                }
            }
            Ended::Refusal => {
                if let Some(ex) = self.remove_current(http) {
                    self.on_refusal(ex, now);
                }
            }
        }
    }

    /// An exchange failed at the transport level.
    pub fn handle_error(&mut self, http: HttpId, failure: TransportFailure, now: Instant) {
        // Where the body stood when it failed decides what the failure means.
        let Some(ended) = self.exchanges.end(http, None) else {
            return;
        };
        let Some(ex) = self.remove_current(http) else {
            return;
        };
        let connect = matches!(failure, TransportFailure::Connect(_));
        // An answer or a notification is sent again if it may never have left.
        let maybe_unsent = connect || matches!(failure, TransportFailure::Abandoned(_));
        let reason = match failure {
            TransportFailure::Connect(r)
            | TransportFailure::Lost(r)
            | TransportFailure::Abandoned(r) => r,
        };
        let kind = ex.kind();
        debug!(http = http.0, ?kind, connect, reason = %reason, "exchange failed");
        if kind == ExKind::Discover && !matches!(ended, Ended::Refusal) {
            // No answer, or only part of one: the probe is asked again.
            let cause = Error::new(ErrorKind::Transport, reason);
            return self.probe_answered(ProbeAnswer::Transport, cause, now);
        }
        let resend = match ended {
            Ended::NoHead { resend } => resend,
            Ended::Sse => return self.stream_ended(kind, ex.made_progress(), false, now),
            Ended::Refusal => return self.on_refusal(ex, now),
            Ended::Json(_) => return self.json_ended(kind, false, now),
            Ended::Unread => return,
        };
        match kind {
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
            ExKind::Notify | ExKind::Answer => {
                // Sent again only into the session it was meant for: an answer to an earlier
                // session's request could be taken for one of the new server's under its id.
                let again = match (resend, self.life.ready()) {
                    (Some(resend), Some(session))
                        if maybe_unsent && self.life.is_current(ex.generation()) =>
                    {
                        self.exchanges.post_again(kind, resend, session)
                    }
                    _ => false,
                };
                if !again {
                    debug!("notification POST failed: {reason}");
                }
            }
            ExKind::Delete => self.close_done(Err(Error::new(ErrorKind::Transport, reason))),
        }
    }

    /// The whole body of a JSON response, ended, and what it decodes to
    /// ([`DecodedJson::decode`]): the same as [`Session::handle_data`] with `body` then
    /// [`Session::handle_end`], without reading it again. When the session would have read the
    /// body another way (it is not the exchange's body type, something of it was read already,
    /// it is over the size bound), it is exactly that.
    pub fn handle_json_body(
        &mut self,
        http: HttpId,
        body: &[u8],
        decoded: DecodedJson,
        now: Instant,
    ) {
        let message = decoded.0;
        let fits = body.len() <= self.config.max_body_size;
        let whole = fits && self.exchanges.takes_ahead(http, ContentType::Json);
        if !whole {
            debug!(http = http.0, "a body decoded ahead is read as it came");
            self.handle_data(http, body, now);
            return self.handle_end(http, now);
        }
        self.on_decoded(http, Decoded::One(message), now);
        if let Some(ex) = self.remove_current(http) {
            self.json_ended(ex.kind(), true, now);
        }
    }

    /// Events of an SSE body read ahead by an [`SseAhead`](crate::proto::session::SseAhead): the same as the
    /// [`Session::handle_data`] that completed them. The body's end is
    /// [`Session::handle_end`] as usual, after the reader's
    /// [`finish`](crate::proto::session::SseAhead::finish)ed events. An exchange whose body the session reads
    /// itself, or that is gone, takes nothing.
    pub fn handle_events(&mut self, http: HttpId, events: Vec<DecodedEvent>, now: Instant) {
        if !self.exchanges.takes_ahead(http, ContentType::Sse) {
            debug!(
                http = http.0,
                "events read ahead for a body read otherwise: dropped"
            );
            return;
        }
        self.on_events_with(http, events.into_iter().map(DecodedEvent::split), now);
    }

    /// An SSE body read ahead grew an event past the bound: the exchange is abandoned, as
    /// when the session's own decoder refuses it.
    pub fn handle_too_large(&mut self, http: HttpId, error: Error, now: Instant) {
        self.exchange_broken(http, error, now);
    }
}

// What a body's end means.
impl Session {
    /// The DELETE was answered (or failed): the close call completes.
    fn close_done(&mut self, result: Result<Value, Error>) {
        if let Some(close) = self.life.closed() {
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
                let event_id_seen = self.listen.last_event_id().is_some();
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
        match ex.kind() {
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
        let kind = ex.kind();
        self.exchanges.finish(http);
        warn!(error = %error, "exchange abandoned");
        match kind {
            ExKind::Initialize => self.init_failed(error.during(methods::INITIALIZE), now),
            // Not an answer to read: a legacy server's page, say (`read_probe` decides).
            ExKind::Discover => self.probe_answered(ProbeAnswer::NoResponse, error, now),
            ExKind::Post(c) | ExKind::Resume(c) => self.complete(c, Err(error)),
            ExKind::Listen => self.listen_broken(),
            _ => {}
        }
    }

    /// A JSON body ended (`decoded`: it was JSON-RPC): a call whose response was not in it
    /// may have run.
    fn json_ended(&mut self, kind: ExKind, decoded: bool, now: Instant) {
        match kind {
            ExKind::Post(c)
                if self
                    .calls
                    .get(c)
                    .is_some_and(|call| matches!(call.state(), CallState::Posting(_))) =>
            {
                let cause = if decoded {
                    "the JSON body answered another request id or none"
                } else {
                    "the JSON body was cut or undecodable"
                };
                let cause = Error::new(ErrorKind::Protocol, cause);
                self.apply_because(c, Failure::AnsweredWithoutResponse, cause, now);
            }
            ExKind::Initialize => self.init_failed(
                Error::new(ErrorKind::Protocol, "initialize: body without the response"),
                now,
            ),
            ExKind::Discover => self.probe_answered(
                ProbeAnswer::NoResponse,
                Error::new(ErrorKind::Protocol, "body without the response"),
                now,
            ),
            _ => {}
        }
    }
}

// Success heads.
impl Session {
    /// A 2xx head arrived for `http`.
    fn on_success_head(
        &mut self,
        http: HttpId,
        kind: ExKind,
        status: u16,
        headers: &HeaderMap,
        now: Instant,
    ) {
        let ct = classify::content_type(headers);
        match kind {
            ExKind::Initialize | ExKind::Discover | ExKind::Initialized => {
                if let Some(ct) = self.handshake_head(http, kind, headers, ct, now) {
                    self.read_body(http, ct);
                }
            }
            ExKind::Post(call) => self.on_post_head(http, call, status, headers, ct, now),
            ExKind::Resume(call) => self.on_resume_head(http, call, headers, ct, now),
            ExKind::Listen => {
                let Some(ex) = self.exchanges.get(http) else {
                    return;
                };
                let resumed = ex.is_resumed();
                // The standalone stream is the session's: its hash is the session's.
                let expected = self.life.ready().and_then(Negotiated::expected_hash);
                let hash_matches = ex.hash_matches(headers, expected);
                if self.on_listen_head(http, resumed, hash_matches, ct, now) {
                    self.read_body(http, ContentType::Sse);
                }
            }
            ExKind::Notify | ExKind::Answer => self.exchanges.finish(http),
            ExKind::Delete => {
                self.exchanges.finish(http);
                self.close_done(Ok(serde_json::Value::Null));
            }
        }
    }

    fn read_body(&mut self, http: HttpId, ct: ContentType) {
        let max_event_size = self.config.max_event_size;
        self.exchanges.read(http, ct, max_event_size);
    }

    /// Whether the call is still on the exchange `http`; a stale exchange is dropped.
    fn still_on(&mut self, id: CallId, http: HttpId, on: CallState) -> bool {
        let current = self.calls.get(id).is_some_and(|c| c.state() == on);
        if !current {
            self.exchanges.finish(http);
        }
        current
    }

    /// Whether a head carries the capability hash the call's session negotiated.
    fn call_hash_matches(&self, id: CallId, http: HttpId, headers: &HeaderMap) -> bool {
        let expected = self.calls.get(id).and_then(|c| c.expected_hash());
        self.exchanges
            .get(http)
            .is_none_or(|ex| ex.hash_matches(headers, expected))
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
        if !self.still_on(id, http, CallState::Posting(http)) {
            return;
        }
        if ct == ContentType::Other || status == 202 || status == 204 {
            // Accepted with no response to come, or a body that is not one: whatever
            // happened to the call is unknown.
            self.exchanges.finish(http);
            let cause = if status == 202 || status == 204 {
                format!("request answered {status} without a response")
            } else {
                "response with an unexpected content type".to_owned()
            };
            let cause = Error::new(ErrorKind::Protocol, cause);
            self.apply_because(id, Failure::AnsweredWithoutResponse, cause, now);
            return;
        }
        if !self.call_hash_matches(id, http, headers)
            && !self.apply(id, Failure::CapabilityHashMismatch, now)
        {
            return;
        }
        self.read_body(http, ct);
    }

    fn on_resume_head(
        &mut self,
        http: HttpId,
        id: CallId,
        headers: &HeaderMap,
        ct: ContentType,
        now: Instant,
    ) {
        if !self.still_on(id, http, CallState::Resuming(http)) {
            return;
        }
        if ct != ContentType::Sse {
            self.apply(id, Failure::ResumeNotAllowed, now);
            return;
        }
        if !self.call_hash_matches(id, http, headers)
            && !self.apply(id, Failure::ResumeCapabilityHashChanged, now)
        {
            return;
        }
        self.read_body(http, ContentType::Sse);
        if let Some(last_event_id) = self.calls.get(id).and_then(|c| c.last_event_id().cloned()) {
            self.outputs
                .push_back(Output::Event(SessionEvent::Resumed { last_event_id }));
        }
    }
}

// What the bodies carry: events and their cursors, and the JSON-RPC messages in them, routed
// to the call they answer, to the app or to the handshake.
impl Session {
    /// Handles (and drains) the events of one chunk.
    fn on_events(&mut self, http: HttpId, events: &mut Vec<SseEvent>, now: Instant) {
        self.on_events_with(http, events.drain(..).map(|event| (event, None)), now);
    }

    /// Handles events in order, each with what its data decodes to when that was done ahead;
    /// those after the exchange is gone are dropped.
    fn on_events_with(
        &mut self,
        http: HttpId,
        events: impl IntoIterator<Item = (SseEvent, Option<Result<Message, DecodeError>>)>,
        now: Instant,
    ) {
        for (event, message) in events {
            if self.exchanges.get(http).is_none() {
                continue;
            }
            self.on_event(http, event, message, now);
        }
    }

    /// One event; `message` is what its data decodes to, when that was done ahead.
    fn on_event(
        &mut self,
        http: HttpId,
        event: SseEvent,
        message: Option<Result<Message, DecodeError>>,
        now: Instant,
    ) {
        let Some(ex) = self.exchanges.get(http) else {
            return;
        };
        let kind = ex.kind();
        // The delivered ids are those of the stream's own session: another session numbers
        // its events on its own, and the same id there is another event.
        let delivered = self.delivered.of(ex.generation());
        let (calls, listen) = (&mut self.calls, &mut self.listen);
        let observed = self.exchanges.observe(http, |expect, replay| match kind {
            ExKind::Post(c) | ExKind::Resume(c) => match calls.get_mut(c) {
                Some(call) => call.observe(&event, expect, delivered, replay),
                None => Observed::New { progressed: false },
            },
            ExKind::Listen => listen.observe(&event, expect, delivered, replay),
            _ => Observed::New { progressed: false },
        });
        let Some(observed) = observed else {
            return;
        };
        match observed {
            Observed::Duplicate => return,
            Observed::Gap => return self.stream_violation(http, Failure::EventGap, now),
            Observed::New { .. } => {}
        }
        if event.data.is_empty() {
            return;
        }
        if kind == ExKind::Listen {
            // A message from the server on its own stream: the session works.
            self.life.confirm();
        }
        match message {
            Some(message) => self.on_decoded(http, Decoded::One(message), now),
            None => {
                self.on_payload(http, event.data.as_bytes(), now);
            }
        }
    }

    /// A protocol violation on a stream (gap, orphan): the recovery decision for whatever the
    /// stream carried.
    fn stream_violation(&mut self, http: HttpId, failure: Failure, now: Instant) {
        let Some(ex) = self.exchanges.get(http) else {
            return;
        };
        match ex.kind() {
            ExKind::Resume(c) | ExKind::Post(c) => {
                self.apply(c, failure, now);
            }
            ExKind::Listen => {
                let progress = ex.made_progress();
                self.listen_failed(failure, Some(http), progress, now);
            }
            _ => {}
        }
    }

    /// Handles a body or event payload of exchange `http` (a batch only where the exchange
    /// allows them); `false` when it was not JSON-RPC at all.
    fn on_payload(&mut self, http: HttpId, payload: &[u8], now: Instant) -> bool {
        let allow_batch = self.exchanges.get(http).is_some_and(Exchange::allows_batch);
        match jsonrpc::decode(payload, allow_batch) {
            Ok(messages) => {
                self.on_decoded(http, messages, now);
                true
            }
            Err(e) => {
                warn!(error = %e, "undecodable message ignored");
                false
            }
        }
    }

    /// The messages of one payload, in order, while the exchange lasts.
    fn on_decoded(&mut self, http: HttpId, messages: Decoded, now: Instant) {
        // Said once for the payload: a batch may hold thousands of elements that are not
        // messages, and a line for each would flood the log.
        let mut undecodable = 0usize;
        let mut first = None;
        for message in messages {
            if self.exchanges.get(http).is_none() {
                break;
            }
            match message {
                Ok(m) => self.on_message(http, m, now),
                Err(e) => {
                    undecodable += 1;
                    first.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first {
            warn!(error = %e, count = undecodable, "undecodable message ignored");
        }
    }

    fn on_message(&mut self, http: HttpId, message: Message, now: Instant) {
        let Some(ex) = self.exchanges.get(http) else {
            return;
        };
        let (kind, resumed) = (ex.kind(), ex.is_resumed());
        let current = self.life.is_current(ex.generation());
        match message {
            Message::Request { id, method, .. } if !current => {
                // The server that sent it serves a session this client has replaced: what
                // it asks has nobody to answer it, and an answer would go to the new session.
                debug!(
                    id = %logged_id(&id),
                    method = %logged(&method),
                    "request on a stream of an earlier session ignored"
                );
            }
            Message::Request { id, method, .. } if self.is_modern() => {
                // The modern era has no server-to-client requests on a stream (they come as
                // MRTR inputs), and no client-sent responses to answer one with.
                warn!(
                    id = %logged_id(&id),
                    method = %logged(&method),
                    "server request on a modern stream ignored"
                );
            }
            Message::Request { id, method, .. } if method == methods::PING => {
                self.send_answer(id, Ok(json!({})));
            }
            Message::Request { id, method, params } => match self.exchanges.hold_request(&id) {
                Hold::Held if method.len() > MAX_REQUEST_METHOD_LEN => {
                    // Refused as a method no handler takes, without naming it: each handler
                    // and its answer would hold a copy, and the refusal would echo it.
                    warn!(
                        id = %logged_id(&id),
                        method_len = method.len(),
                        "server request with an overlong method refused"
                    );
                    self.exchanges.release_request(&id);
                    let error = RpcError::new(
                        RpcError::METHOD_NOT_FOUND,
                        "method not found: the request's method is too long",
                    );
                    self.send_answer(id, Err(error));
                }
                Hold::Held => self.outputs.push_back(Output::ServerRequest(ServerRequest {
                    id,
                    method,
                    params,
                })),
                Hold::AlreadyOpen => {
                    // Its first copy gets the one answer this id may have.
                    warn!(
                        id = %logged_id(&id),
                        method = %logged(&method),
                        "server request id reused while it waits: ignored"
                    );
                }
                Hold::Full => {
                    warn!(
                        id = %logged_id(&id),
                        method = %logged(&method),
                        "too many server requests wait: refused"
                    );
                    let error =
                        RpcError::new(RpcError::INTERNAL_ERROR, "too many server requests waiting");
                    self.send_answer(id, Err(error));
                }
            },
            Message::Notification { method, .. } if !current && method == methods::CANCELLED => {
                // The server of a session since replaced cancels one of its own requests,
                // withdrawn already; the current server may have asked under the same id, and
                // a driver that stopped what this names would stop that request instead.
                debug!("cancellation on a stream of an earlier session ignored");
            }
            Message::Notification { method, params }
                if kind == ExKind::Listen && !self.on_subscription(&method, params.as_ref()) => {}
            Message::Notification { method, params } => {
                let call = self.related_call(&method, params.as_ref(), kind, resumed);
                self.outputs.push_back(Output::Notification {
                    call,
                    notification: Notification { method, params },
                });
            }
            Message::Response { id, result } => {
                if matches!(kind, ExKind::Initialize | ExKind::Discover) {
                    return self.on_handshake_message(http, id, result, now);
                }
                let Some(id) = id else {
                    // An error the server could not attribute: on a call's own POST it can
                    // only be about that call, and is read as its answer would be (a key
                    // refusal included).
                    match (kind, result) {
                        (ExKind::Post(c), Err(e)) => self.deliver(c, Err(e), now),
                        _ => warn!("response without id ignored"),
                    }
                    return;
                };
                match self.calls.answered(&id) {
                    Some(call) => self.deliver(call, result, now),
                    None if self.calls.was_issued(&id) => {
                        debug!(id = %logged_id(&id), "duplicate response dropped");
                    }
                    None if resumed => {
                        warn!(
                            id = %logged_id(&id),
                            "resumed stream delivered a response to a request never sent"
                        );
                        self.stream_violation(http, Failure::OrphanedResponse, now);
                    }
                    None => warn!(id = %logged_id(&id), "response to an unknown request ignored"),
                }
            }
        }
    }

    /// A response reached its call: check what the extension lets us check, then complete.
    fn deliver(&mut self, id: CallId, result: Result<Value, RpcError>, now: Instant) {
        let Some(call) = self.calls.get(id) else {
            return;
        };
        // Read in the terms of the era the call went out in: a modern answer arriving after
        // the client fell back to legacy is still an `input_required` or a task, not a result.
        let modern = call.task_id().is_some() || call.attempt().is_modern();
        let failure = match &result {
            // A replayed answer may name the context it ran under.
            Ok(value) if call.method() == methods::TOOLS_CALL => call
                .expected_hash()
                .zip(ext::result_capability_hash(value))
                .filter(|(expected, got)| !got.eq_ignore_ascii_case(expected.as_str()))
                .map(|_| Failure::CapabilityHashMismatch),
            Ok(_) => None,
            // Read wherever the call's key is trusted to be deduplicated: the server said so,
            // or the application assumes it (a refused re-send then waits for the stored
            // result, or is an unknown outcome, never a plain error saying it did not run).
            Err(error) if call.key_deduplicated(self.config.resend_policy) => {
                match ext::key_refusal(error.data.as_ref()) {
                    Some(ext::KeyRefusal::InUse) => Some(Failure::KeyInUse),
                    Some(ext::KeyRefusal::OutcomeUnknown) => Some(Failure::KeyOutcomeLost),
                    None => None,
                }
            }
            Err(_) => None,
        };
        // An answer, an error included, is what proves the session works, unless it refuses
        // the call or names another context; a 2xx head is not (a session whose every call
        // is cut after its head does not work): until then a re-initialization it causes
        // backs off (see `start_reinit`). A modern error refusing the call (a header
        // mismatch, a version or capability missing) is one.
        let works = failure.is_none()
            && !(modern
                && result
                    .as_ref()
                    .is_err_and(|e| self.modern_failure(id, e).is_some()))
            && self.life.is_current(call.attempt().generation());
        if let Some(failure) = failure {
            let cause = match &result {
                Err(e) => Error::rpc(e.clone()),
                Ok(_) => Error::new(ErrorKind::Protocol, "result produced under another hash"),
            };
            if !self.apply_because(id, failure, cause, now) {
                return;
            }
        }
        if works {
            self.life.confirm();
        }
        // Answered, an error included: the server took the request's credentials.
        self.credentials_work(now);
        if modern {
            return self.deliver_modern(id, result, now);
        }
        debug!(call = id.0, ok = result.is_ok(), "call completed");
        self.complete(id, result.map_err(Error::rpc));
    }

    /// The call a notification is about: a progress notification's by its `progressToken`;
    /// any other's, the call whose own POST stream carried it (the specification relates such
    /// messages to that request). Never by a resumed or standalone stream: a server may
    /// replay other calls' messages there.
    fn related_call(
        &self,
        method: &str,
        params: Option<&Value>,
        kind: ExKind,
        resumed: bool,
    ) -> Option<CallId> {
        if method == methods::PROGRESS {
            let token = params?
                .get("progressToken")
                .and_then(RequestId::from_json)?;
            return self.calls.by_progress_token(&token);
        }
        match kind {
            ExKind::Post(c) if !resumed => Some(c),
            _ => None,
        }
    }
}

// Refusals.
impl Session {
    /// A refused exchange's body ended (or reading it stopped at its bound): classify it and
    /// act on what it means for the exchange.
    fn on_refusal(&mut self, ex: Exchange, now: Instant) {
        let Some((status, refusal)) = ex.refusal(self.config.unavailable_not_processed) else {
            return;
        };
        let kind = ex.kind();
        debug!(status, class = ?refusal.class, ?kind, "exchange refused");
        match kind {
            ExKind::Discover | ExKind::Initialize | ExKind::Initialized => {
                self.handshake_refused(kind, status, refusal, now)
            }
            ExKind::Post(call) => self.call_refused(call, status, refusal, now),
            ExKind::Resume(call) => self.resume_refused(call, status, refusal, now),
            ExKind::Listen if refusal.error.kind() == ErrorKind::Unauthorized => {
                self.listen_unauthorized()
            }
            ExKind::Listen => self.listen_refused(refusal.class, now),
            ExKind::Notify | ExKind::Answer => match refusal.class {
                // Only about the session it was sent on: that an earlier one is gone is known.
                Refused::SessionGone | Refused::Rejected(_)
                    if ex.carried_session_id() && self.life.is_current(ex.generation()) =>
                {
                    self.apply_to_session(Failure::PostSessionNotFound, now)
                }
                _ => warn!(status, "notification or answer POST not accepted"),
            },
            ExKind::Delete => {
                // A session the server no longer knows is closed; so is one it cannot delete.
                let result = match refusal.class {
                    Refused::SessionGone | Refused::NotAllowed => Ok(Value::Null),
                    _ => Err(Error::caused_by(
                        refusal.error.kind(),
                        "DELETE",
                        refusal.error,
                    )),
                };
                self.close_done(result);
            }
        }
    }

    /// Runs the recovery decision for a failure of the session itself (a notification or an
    /// answer POST): no call's fate hangs on it, only the session's.
    fn apply_to_session(&mut self, failure: Failure, now: Instant) {
        let decision = decide(&failure, &self.base_state(true));
        debug!(?failure, ?decision, "recovery decision for the session");
        if let Decision::Reinitialize { reason, .. } = decision {
            self.report_rejection(&failure);
            self.start_reinit(reason, now);
        }
    }

    fn call_refused(&mut self, id: CallId, status: u16, refusal: Refusal, now: Instant) {
        let Some(call) = self.calls.get_mut(id) else {
            return;
        };
        if !matches!(call.state(), CallState::Posting(_)) {
            return;
        }
        if !matches!(refusal.class, Refused::MayHaveRun) {
            // Refused unprocessed: there is nothing running to cancel.
            call.not_run();
        }
        let modern = call.attempt().is_modern();
        let rpc = refusal.error.rpc_error();
        if let Some((failure, cause)) = rpc
            .filter(|_| modern)
            .and_then(|rpc| self.modern_failure(id, rpc))
        {
            self.apply_because(id, failure, cause, now);
            return;
        }
        if let Some(rpc) = rpc.filter(|rpc| !modern && self.refused_as_modern_only(rpc, now)) {
            // The server now speaks the other era (a redeploy): a new handshake probes, and
            // the call, which did not run, goes on the era it finds.
            let cause = Error::rpc(rpc.clone());
            self.apply_because(id, Failure::VersionRefused, cause, now);
            return;
        }
        let Some(call) = self.calls.get_mut(id) else {
            return;
        };
        let failure = match refusal.class {
            Refused::SessionGone | Refused::Rejected(_) => Failure::PostSessionNotFound,
            Refused::NotAllowed => Failure::Refused {
                retry_within_deadline: false,
            },
            Refused::NotProcessed { retry_after } => {
                let fits = retry_after.is_some_and(|after| {
                    now.checked_add(after).is_some_and(|t| t <= call.deadline())
                });
                if fits {
                    // The server's time to come back is the floor of the re-send's backoff.
                    call.set_retry_hint(retry_after);
                }
                Failure::Refused {
                    retry_within_deadline: fits,
                }
            }
            Refused::MayHaveRun => Failure::AnsweredWithoutResponse,
        };
        debug!(call = id.0, status, ?failure, "call refused");
        let cause = match failure {
            // The cause of an unknown outcome names what was answered, whatever the body.
            Failure::AnsweredWithoutResponse if refusal.error.kind() == ErrorKind::Rpc => {
                Error::caused_by(
                    ErrorKind::Protocol,
                    format!("answered HTTP {status}"),
                    refusal.error,
                )
            }
            _ => refusal.error,
        };
        self.apply_because(id, failure, cause, now);
    }

    fn resume_refused(&mut self, id: CallId, status: u16, refusal: Refusal, now: Instant) {
        let Some(call) = self.calls.get_mut(id) else {
            return;
        };
        if !matches!(call.state(), CallState::Resuming(_)) {
            return;
        }
        let failure = match refusal.class {
            Refused::SessionGone => Failure::ResumeNotFound,
            Refused::Rejected(reason) => Failure::ResumeRejected(reason),
            // "Come back later" and a server error: the stream may still be resumable.
            Refused::NotProcessed {
                retry_after: Some(after),
            } => {
                call.set_retry_hint(Some(after));
                Failure::ResumeConnectFailed
            }
            Refused::NotProcessed { .. } if status == 429 => Failure::ResumeConnectFailed,
            Refused::MayHaveRun if status >= 500 => Failure::ResumeConnectFailed,
            // A conflict: the server still holds the stream for a connection it has not seen
            // close (the TypeScript SDK's answer to a resume that beats its notice of the
            // cut). The stream is there, and free once it notices.
            Refused::MayHaveRun if status == 409 => Failure::ResumeConnectFailed,
            Refused::NotAllowed | Refused::NotProcessed { .. } | Refused::MayHaveRun => {
                Failure::ResumeNotAllowed
            }
        };
        self.apply_because(id, failure, refusal.error, now);
    }

    fn listen_refused(&mut self, class: Refused, now: Instant) {
        let failure = match class {
            Refused::NotAllowed => Failure::ListenNotOffered,
            Refused::SessionGone => Failure::ResumeNotFound,
            Refused::Rejected(reason) => Failure::ResumeRejected(reason),
            Refused::NotProcessed { .. } | Refused::MayHaveRun => Failure::ResumeConnectFailed,
        };
        self.listen_failed(failure, None, false, now);
    }
}

/// A string a server sent (a method, an id) as logged: its start, cut as its error messages
/// are, since nothing else bounds it and a line per message of megabytes would flood a log.
fn logged(text: &str) -> String {
    let mut shown: String = text.chars().take(jsonrpc::MAX_ERROR_MESSAGE).collect();
    jsonrpc::cap_error_message(&mut shown);
    shown
}

/// A server's id as logged: a string one cut as [`logged`] cuts it.
fn logged_id(id: &RequestId) -> String {
    match id {
        RequestId::String(s) => format!("{:?}", logged(s)),
        number => number.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;
    use std::sync::{Arc, Mutex};

    use serde_json::json;
    use tracing::field::{Field, Visit};

    use super::super::tests::call_stream;

    /// Every event logged while it is the thread's subscriber, one line each.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<String>>>);

    struct Line<'a>(&'a mut String);

    impl Visit for Line<'_> {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            let _ = write!(self.0, "{}={value:?} ", field.name());
        }
    }

    impl tracing::Subscriber for Captured {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, event: &tracing::Event<'_>) {
            let mut line = String::new();
            event.record(&mut Line(&mut line));
            self.0.lock().unwrap().push(line);
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    #[test]
    fn a_servers_megabyte_id_or_method_is_logged_cut() {
        let long = "x".repeat(1 << 20);
        let captured = Captured::default();
        let lines = captured.0.clone();
        tracing::subscriber::with_default(captured, || {
            let (mut session, stream, now) = call_stream();
            let events = [
                // A response to no request of ours.
                json!({"jsonrpc": "2.0", "id": long, "result": {}}),
                // A request whose id is used again while its first copy waits.
                json!({"jsonrpc": "2.0", "id": 1, "method": "roots/list"}),
                json!({"jsonrpc": "2.0", "id": 1, "method": long}),
                // A request whose method no handler takes, under the longest id.
                json!({"jsonrpc": "2.0", "id": "i".repeat(1024), "method": long}),
            ];
            for event in events {
                session.handle_data(stream, format!("data: {event}\n\n").as_bytes(), now);
            }
        });
        let lines = lines.lock().unwrap();
        let logged = |what: &str| lines.iter().find(|l| l.contains(what)).cloned();
        for what in [
            "response to an unknown request ignored",
            "server request id reused while it waits",
            "server request with an overlong method refused",
        ] {
            let line = logged(what).unwrap_or_else(|| panic!("{what}: not logged: {lines:?}"));
            assert!(line.len() < 4096, "{what}: a line of {} bytes", line.len());
        }
    }
}
