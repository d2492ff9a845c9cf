//! What arrives in bodies: SSE events and their cursors, decoded JSON-RPC messages routed to
//! the call they answer, to the app or to the handshake, and the ways a body ends.

use std::time::Instant;

use serde_json::{json, Value};
use tracing::{debug, warn};

use super::cursors::Observed;
use super::exchanges::ExKind;

use super::Session;
use crate::error::{Error, ErrorKind, RpcError};
use crate::ids::RequestId;
use crate::proto::decide::Failure;
use crate::proto::jsonrpc::{self, DecodeError, Decoded, Message};
use crate::proto::modern::{self, ResultType};
use crate::proto::{
    ext, methods, CallId, HttpId, Notification, Output, ServerRequest, SessionEvent,
};
use crate::sse::SseEvent;

impl Session {
    /// Handles (and drains) the events of one chunk.
    pub(super) fn on_events(&mut self, http: HttpId, events: &mut Vec<SseEvent>, now: Instant) {
        self.on_events_with(http, events.drain(..).map(|event| (event, None)), now);
    }

    /// Handles events in order, each with what its data decodes to when that was done ahead;
    /// those after the exchange is gone are dropped.
    pub(super) fn on_events_with(
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
        let Some(ex) = self.exchanges.get_mut(http) else {
            return;
        };
        let kind = ex.kind();
        let (calls, listen, delivered) = (&mut self.calls, &mut self.listen, &mut self.delivered);
        let observed = ex.observe(|expect| match kind {
            ExKind::Post(c) | ExKind::Resume(c) => match calls.get_mut(c) {
                Some(call) => call.observe(&event, expect, delivered),
                None => Observed::New { progressed: false },
            },
            ExKind::Listen => listen.observe(&event, expect, delivered),
            _ => Observed::New { progressed: false },
        });
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
        let allow_batch = ex.allows_batch();
        match message {
            Some(message) => self.on_decoded(http, Decoded::One(message), now),
            None => {
                self.on_payload(http, event.data.as_bytes(), allow_batch, now);
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

    /// Handles a body or event payload; `false` when it was not JSON-RPC at all.
    pub(super) fn on_payload(
        &mut self,
        http: HttpId,
        payload: &[u8],
        allow_batch: bool,
        now: Instant,
    ) -> bool {
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
    pub(super) fn on_decoded(&mut self, http: HttpId, messages: Decoded, now: Instant) {
        for message in messages {
            if self.exchanges.get(http).is_none() {
                return;
            }
            match message {
                Ok(m) => self.on_message(http, m, now),
                Err(e) => warn!(error = %e, "undecodable message ignored"),
            }
        }
    }

    fn on_message(&mut self, http: HttpId, message: Message, now: Instant) {
        let Some(ex) = self.exchanges.get(http) else {
            return;
        };
        let (kind, resumed) = (ex.kind(), ex.is_resumed());
        match message {
            Message::Request { id, method, .. } if self.is_modern() => {
                // The modern era has no server-to-client requests on a stream (they come as
                // MRTR inputs), and no client-sent responses to answer one with.
                warn!(%id, %method, "server request on a modern stream ignored");
            }
            Message::Request { id, method, params } => {
                if method == methods::PING {
                    self.respond(id, Ok(json!({})), now);
                } else {
                    self.outputs.push_back(Output::ServerRequest(ServerRequest {
                        id,
                        method,
                        params,
                    }));
                }
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
                    // only be about that call.
                    match (kind, result) {
                        (ExKind::Post(c), Err(e)) => self.complete(c, Err(Error::rpc(e))),
                        _ => warn!("response without id ignored"),
                    }
                    return;
                };
                match self.calls.by_rpc(&id) {
                    Some(call) => self.deliver(call, result, now),
                    None if self.calls.was_issued(&id) => {
                        debug!(%id, "duplicate response dropped");
                    }
                    None if resumed => {
                        warn!(%id, "resumed stream delivered a response to a request never sent");
                        self.stream_violation(http, Failure::OrphanedResponse, now);
                    }
                    None => warn!(%id, "response to an unknown request ignored"),
                }
            }
        }
    }

    fn on_handshake_message(
        &mut self,
        http: HttpId,
        id: Option<RequestId>,
        result: Result<Value, RpcError>,
        now: Instant,
    ) {
        let (expected, discover) = match self.life.handshake().and_then(|h| h.awaits()) {
            Some((rpc, discover)) => (Some(rpc), discover),
            None => (None, false),
        };
        // An error without an id on the probe's own stream can only be about the probe.
        let unattributed_error = discover && id.is_none() && result.is_err();
        if !unattributed_error && (id.is_none() || id.as_ref() != expected) {
            warn!("unexpected response on the handshake stream ignored");
        } else if discover {
            self.on_discover_response(http, result, now);
        } else {
            self.on_initialize_response(http, result, now);
        }
    }

    /// A notification on the modern change stream: `false` when it is not for the app (the
    /// acknowledgement, or one naming another subscription).
    fn on_subscription(&mut self, method: &str, params: Option<&Value>) -> bool {
        let Some(ours) = self.listen.subscription() else {
            return true;
        };
        let named = params
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get(modern::META_SUBSCRIPTION_ID))
            .and_then(RequestId::from_json);
        if named.as_ref().is_some_and(|n| n != ours) {
            debug!(%method, "notification of another subscription dropped");
            return false;
        }
        if method == methods::SUBSCRIPTIONS_ACKNOWLEDGED {
            debug!("subscription acknowledged");
            self.life.confirm();
            self.outputs
                .push_back(Output::Event(SessionEvent::Listening));
            return false;
        }
        true
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

    /// A response reached its call: check what the extension lets us check, then complete.
    fn deliver(&mut self, id: CallId, result: Result<Value, RpcError>, now: Instant) {
        let Some(call) = self.calls.get(id) else {
            return;
        };
        let failure = match &result {
            // A replayed answer may name the context it ran under.
            Ok(value) if call.method() == methods::TOOLS_CALL => call
                .expected_hash()
                .zip(ext::result_capability_hash(value))
                .filter(|(expected, got)| !got.eq_ignore_ascii_case(expected.as_str()))
                .map(|_| Failure::CapabilityHashMismatch),
            Ok(_) => None,
            Err(error) if call.key().is_some() && call.attempt().server_dedups() => {
                match ext::key_refusal(error.data.as_ref()) {
                    Some(ext::KeyRefusal::InUse) => Some(Failure::KeyInUse),
                    Some(ext::KeyRefusal::OutcomeUnknown) => Some(Failure::KeyOutcomeLost),
                    None => None,
                }
            }
            Err(_) => None,
        };
        if let Some(failure) = failure {
            let cause = match &result {
                Err(e) => Error::rpc(e.clone()),
                Ok(_) => Error::new(ErrorKind::Protocol, "result produced under another hash"),
            };
            if !self.apply_because(id, failure, cause, now) {
                return;
            }
        }
        if self.is_modern() {
            return self.deliver_modern(id, result, now);
        }
        debug!(call = id.0, ok = result.is_ok(), "call completed");
        self.complete(id, result.map_err(Error::rpc));
    }

    /// A modern answer: its `resultType` says whether it is the result, a request for
    /// input, or a task; its error may be one only a modern server sends.
    fn deliver_modern(&mut self, id: CallId, result: Result<Value, RpcError>, now: Instant) {
        let mut value = match result {
            Ok(value) => value,
            Err(error) => {
                if let Some((failure, cause)) = self.modern_failure(id, &error) {
                    self.apply_because(id, failure, cause, now);
                } else {
                    self.complete(id, Err(Error::rpc(error)));
                }
                return;
            }
        };
        // The answer ends its request's exchange, whatever comes next: a server may hold the
        // stream open after it (keep-alive comments), and a call that moves on to its next
        // round or to polling must not leave its caller reading that stream.
        self.detach(id);
        if let Some(task_id) = self.calls.get(id).and_then(|c| c.task_id()) {
            // The answer to a poll: the task's state, if it is one, of this task.
            return match super::tasks::check_poll_answer(task_id, &value) {
                Ok(()) => self.on_task_status(id, value, now),
                Err(error) => self.complete(id, Err(error)),
            };
        }
        match modern::result_type(&value) {
            Ok(ResultType::Complete) => {
                if self
                    .calls
                    .get(id)
                    .is_some_and(|c| c.method() == methods::TOOLS_LIST)
                {
                    self.learn_tools(&mut value);
                }
                debug!(call = id.0, "call completed");
                self.complete(id, Ok(value));
            }
            Ok(ResultType::InputRequired) => self.input_required(id, value, now),
            Ok(ResultType::Task) => self.task_created(id, value, now),
            Err(unknown) => self.complete(
                id,
                Err(Error::new(
                    ErrorKind::Protocol,
                    format!("result of unknown resultType {unknown:?}"),
                )),
            ),
        }
    }
}
