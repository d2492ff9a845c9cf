//! What the session sends: calls, resumes, cancellations, notifications, answers to server
//! requests, and the DELETE that closes the session.

use crate::proto::limits::MAX_QUEUED_NOTIFICATIONS;
use bytes::Bytes;
use http::HeaderValue;
use serde_json::{json, Value};
use tracing::{debug, info, warn};

use super::call::Attempt;
use super::exchanges::{ExKind, Sent};
use super::headers::{IDEMPOTENCY_KEY, LAST_EVENT_ID};
use super::lifecycle::{KeyPlacement, Phase};
use super::modern_calls::mirror_headers;
use super::Session;
use crate::ids::{RequestId, SequencedEventId};
use crate::proto::{
    jsonrpc, methods, modern, CallId, HttpMethod, HttpPurpose, Output, ResendPolicy, SessionEvent,
};

impl Session {
    /// POSTs a call on the established session (a new JSON-RPC id for every send).
    pub(super) fn send_call(&mut self, id: CallId) {
        let Some(session) = self.life.ready() else {
            return;
        };
        // A call picked up from another process may have run there: only a key the server
        // deduplicates makes a second send safe.
        let dedups = session.keys.is_some()
            || self.config.resend_policy == ResendPolicy::AssumeServerDeduplicates;
        if self
            .calls
            .get(id)
            .is_some_and(|c| c.is_picked_up() && !(c.key().is_some() && dedups))
        {
            return self.picked_up_unsafe(id);
        }
        // The first send of a request (or of an MRTR round's) is recorded before it leaves.
        if self
            .calls
            .get(id)
            .is_some_and(|c| c.sends() == 0 && c.task().is_none())
        {
            self.note_checkpoint(id);
        }
        let Some(session) = self.life.ready() else {
            return;
        };
        let rpc = self.calls.new_rpc();
        let Some(call) = self.calls.get_mut(id) else {
            return;
        };
        if (call.sends() > 0 || call.is_picked_up()) && call.task().is_none() {
            info!(call = id.0, method = %call.method(), "re-sending call");
            self.outputs
                .push_back(Output::Event(SessionEvent::Redispatched {
                    call: id,
                    method: call.method().to_owned(),
                    idempotency_key: call.key().cloned(),
                }));
        }
        let modern = session.version.is_modern();
        // The key goes where the server said it looks: the proposed standard's
        // `params.idempotencyKey`, or the extension's `metaKey` (ours by default).
        let header_key = (session.keys != Some(KeyPlacement::Params) && call.task().is_none())
            .then(|| {
                call.key()
                    .and_then(|k| HeaderValue::from_str(k.as_str()).ok())
            })
            .flatten();
        let outgoing = call.outgoing(session.keys.as_ref());
        let method = outgoing.method;
        let mut params = outgoing.params;
        if modern {
            modern::add_request_meta(&mut params, session.version, &self.client_meta);
        }
        let body = jsonrpc::encode_request(&rpc, method, params.as_ref());
        let mut headers = session.headers.post();
        if let Some(key) = header_key {
            headers.insert(IDEMPOTENCY_KEY, key);
        }
        if modern {
            mirror_headers(&self.tool_headers, method, params.as_ref(), &mut headers);
        }
        debug!(call = id.0, %rpc, method, "sending call");
        // Hash checks (head and replayed result) are the extension's: only for a session
        // whose server advertised them.
        let hash = session.hash.clone().filter(|_| session.checks.hash);
        let attempt = Attempt::new(rpc, session.generation, hash, session.keys.is_some());
        let http = self.exchanges.open(
            ExKind::Post(id),
            HttpMethod::Post,
            HttpPurpose::Request,
            headers,
            Some(body),
            Sent::on(session),
        );
        self.calls.sent(id, attempt, params, http);
    }

    /// POSTs a modern request whose answer nothing waits for (`tasks/update`,
    /// `tasks/cancel`: their answer is an empty acknowledgement).
    pub(super) fn send_unawaited(&mut self, method: &str, params: Value) {
        let Some(session) = self.life.ready() else {
            return;
        };
        let rpc = self.calls.new_rpc();
        let mut params = Some(params);
        modern::add_request_meta(&mut params, session.version, &self.client_meta);
        let body = jsonrpc::encode_request(&rpc, method, params.as_ref());
        let mut headers = session.headers.post();
        mirror_headers(&self.tool_headers, method, params.as_ref(), &mut headers);
        let sent = Sent::on(session);
        self.exchanges.open(
            ExKind::Notify,
            HttpMethod::Post,
            HttpPurpose::Notify,
            headers,
            Some(body),
            sent,
        );
    }

    /// GETs a call's stream with `Last-Event-ID`.
    pub(super) fn send_resume(&mut self, id: CallId) {
        let Some(session) = self.life.ready() else {
            return;
        };
        let Some(call) = self.calls.get_mut(id) else {
            return;
        };
        let Some(cursor) = call.last_event_id().cloned() else {
            return;
        };
        info!(call = id.0, last_event_id = %cursor, "resuming stream");
        let mut headers = session.headers.get();
        if let Ok(v) = HeaderValue::from_str(cursor.as_str()) {
            headers.insert(LAST_EVENT_ID, v);
        }
        let sent = Sent::on(session);
        let http = self.exchanges.open(
            ExKind::Resume(id),
            HttpMethod::Get,
            HttpPurpose::Resume,
            headers,
            None,
            sent,
        );
        call.resume_on(http);
        if let Some(ex) = self.exchanges.get_mut(http) {
            ex.resumed = true;
            ex.expect = SequencedEventId::of(&cursor).map(|s| s.next());
        }
        // The cursor it resumes from, for the record.
        self.note_checkpoint(id);
    }

    /// POSTs `notifications/cancelled` for a call that may be running on this session. (In
    /// the modern era closing the call's stream is the cancellation: nothing is sent.)
    pub(super) fn send_cancelled(&mut self, id: CallId, reason: &str) {
        if self.is_modern() {
            return;
        }
        let generation = self.life.generation;
        let Some(call) = self.calls.get(id) else {
            return;
        };
        if call.attempt().generation() != generation {
            return;
        }
        let running: Vec<RequestId> = call.running_ids().cloned().collect();
        for rpc in running {
            let params = json!({"requestId": rpc.to_json(), "reason": reason});
            let body = jsonrpc::encode_notification(methods::CANCELLED, Some(&params));
            self.post(ExKind::Notify, body);
        }
    }

    /// POSTs a notification or an answer on the established session.
    pub(super) fn post(&mut self, kind: ExKind, body: Bytes) -> bool {
        let Some(session) = self.life.ready() else {
            return false;
        };
        let headers = session.headers.post();
        let sent = Sent::on(session);
        self.exchanges.open(
            kind,
            HttpMethod::Post,
            HttpPurpose::Notify,
            headers,
            Some(body),
            sent,
        );
        true
    }

    /// Sends the app's notifications held while the session was not ready.
    pub(super) fn flush_notifications(&mut self) {
        while self.life.is_ready() {
            let Some(body) = self.notifications.pop_front() else {
                break;
            };
            self.post(ExKind::Notify, body);
        }
    }

    /// Holds a notification until the session is ready (bounded).
    pub(super) fn queue_notification(&mut self, body: Bytes) {
        if self.notifications.len() < MAX_QUEUED_NOTIFICATIONS {
            self.notifications.push_back(body);
        } else {
            warn!("notification dropped: too many queued while the session is not ready");
        }
    }

    /// Sends queued answers while slots are free.
    pub(super) fn flush_answers(&mut self) {
        while self.life.is_ready() {
            let Some(body) = self.exchanges.next_answer() else {
                break;
            };
            self.post(ExKind::Answer, body);
        }
    }

    /// DELETEs the session named `id` (closing).
    pub(super) fn send_delete(&mut self, headers: http::HeaderMap, close: CallId) {
        let sent = Sent {
            carried_session_id: true,
            allow_batch: false,
            checks: Default::default(),
        };
        self.exchanges.open(
            ExKind::Delete,
            HttpMethod::Delete,
            HttpPurpose::Terminate,
            headers,
            None,
            sent,
        );
        self.life.phase = Phase::Closing { close };
    }
}
