//! What the session sends: calls, resumes, cancellations, notifications, answers to server
//! requests, and the DELETE that closes the session.

use crate::proto::limits::MAX_QUEUED_NOTIFICATIONS;
use bytes::Bytes;
use http::HeaderValue;
use serde_json::{json, Map, Value};
use tracing::{debug, info, warn};

use super::calls::{CallState, MAX_EARLIER_SENDS};
use super::exchanges::{ExKind, Sent};
use super::headers::{IDEMPOTENCY_KEY, LAST_EVENT_ID};
use super::lifecycle::{KeyPlacement, Phase};
use super::modern_calls::mirror_headers;
use super::Session;
use crate::ids::{IdempotencyKey, RequestId, SequencedEventId};
use crate::proto::config::DEFAULT_IDEMPOTENCY_META_KEY;
use crate::proto::{
    jsonrpc, methods, modern, CallId, HttpMethod, HttpPurpose, Output, SessionEvent,
};

impl Session {
    /// POSTs a call on the established session (a new JSON-RPC id for every send).
    pub(super) fn send_call(&mut self, id: CallId) {
        let Some(session) = self.life.ready() else {
            return;
        };
        let rpc = self.calls.new_rpc();
        let Some(call) = self.calls.get_mut(id) else {
            return;
        };
        if call.sends > 0 && call.task.is_none() {
            info!(call = id.0, method = %call.method, "re-sending call");
            self.outputs
                .push_back(Output::Event(SessionEvent::Redispatched {
                    call: id,
                    method: call.method.clone(),
                    idempotency_key: call.key.clone(),
                }));
        }
        let modern = session.version.is_modern();
        if let Some(key) = &call.key {
            // The key goes where the server said it looks: the proposed standard's
            // `params.idempotencyKey`, or the extension's `metaKey` (ours by default).
            match &session.keys {
                Some(KeyPlacement::Params) => set_param_key(&mut call.params, key),
                Some(KeyPlacement::Meta(meta_key)) => set_meta_key(&mut call.params, meta_key, key),
                None => set_meta_key(&mut call.params, DEFAULT_IDEMPOTENCY_META_KEY, key),
            }
        }
        // A call that became a task is polled: the request sent is `tasks/get`.
        let mut task_params = call
            .task
            .as_ref()
            .map(|t| serde_json::json!({ "taskId": t.task_id }));
        let (method, params) = match &mut task_params {
            Some(p) => (methods::TASKS_GET, p),
            None => (
                call.method.as_str(),
                call.params.get_or_insert_with(|| json!({})),
            ),
        };
        let mut params = Some(std::mem::take(params));
        if modern {
            modern::add_request_meta(&mut params, session.version, &self.client_meta);
        }
        let body = jsonrpc::encode_request(&rpc, method, params.as_ref());
        let mut headers = session.headers.post();
        if session.keys != Some(KeyPlacement::Params) && call.task.is_none() {
            if let Some(v) = call
                .key
                .as_ref()
                .and_then(|k| HeaderValue::from_str(k.as_str()).ok())
            {
                headers.insert(IDEMPOTENCY_KEY, v);
            }
        }
        if modern {
            mirror_headers(&self.tool_headers, method, params.as_ref(), &mut headers);
        }
        debug!(call = id.0, %rpc, method, "sending call");
        if call.task.is_none() {
            call.params = params;
        }
        // A send of this call on this session that may still be running stays to be told of
        // a cancellation; one on a replaced session has nobody to tell.
        if call.generation != session.generation || call.task.is_some() {
            call.earlier.clear();
        } else if let Some(old) = call.rpc.clone().filter(|_| call.may_have_run) {
            if call.earlier.len() == MAX_EARLIER_SENDS {
                call.earlier.remove(0);
            }
            call.earlier.push(old);
        }
        call.generation = session.generation;
        // Hash checks (head and replayed result) are the extension's: only for a session
        // whose server advertised them.
        call.hash = if session.checks.hash {
            session.hash.clone()
        } else {
            None
        };
        call.server_dedups = session.keys.is_some();
        call.cursor = Default::default();
        call.no_progress = 0;
        call.may_have_run = true;
        call.sends += 1;
        call.cause = None;
        let sent = Sent::on(session);
        let http = self.exchanges.open(
            ExKind::Post(id),
            HttpMethod::Post,
            HttpPurpose::Request,
            headers,
            Some(body),
            sent,
        );
        self.calls.assign_rpc(id, rpc);
        if let Some(call) = self.calls.get_mut(id) {
            call.state = CallState::Posting(http);
        }
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
        let Some(cursor) = call.cursor.last.clone() else {
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
        call.state = CallState::Resuming(http);
        if let Some(ex) = self.exchanges.get_mut(http) {
            ex.resumed = true;
            ex.expect = SequencedEventId::of(&cursor).map(|s| s.next());
        }
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
        if call.generation != generation {
            return;
        }
        let latest = call.rpc.as_ref().filter(|_| call.may_have_run);
        let running: Vec<RequestId> = call.earlier.iter().chain(latest).cloned().collect();
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

/// Puts the idempotency key in `params.idempotencyKey` (the proposed standard, SEP-3182).
fn set_param_key(params: &mut Option<Value>, key: &IdempotencyKey) {
    let params = params.get_or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(params) = params {
        params.insert(
            "idempotencyKey".to_owned(),
            Value::String(key.as_str().to_owned()),
        );
    }
}

/// Puts the idempotency key in `params._meta[meta_key]` (non-object params cannot carry
/// `_meta`; the header still carries the key).
fn set_meta_key(params: &mut Option<Value>, meta_key: &str, key: &IdempotencyKey) {
    if let Some(meta) = modern::meta_mut(params) {
        if meta.get(meta_key).and_then(Value::as_str) != Some(key.as_str()) {
            meta.insert(meta_key.to_owned(), Value::String(key.as_str().to_owned()));
        }
    }
}
