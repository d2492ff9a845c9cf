//! The call table: sending a call, and completing or failing it exactly once.

use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use tracing::{debug, info, warn};

use super::exchange::ExKind;
use super::recovery::Retry;
use super::{Phase, Session, BATCH_VERSION};
use crate::error::{Error, ErrorKind};
use crate::ids::{CapabilityHash, EventId, IdempotencyKey, RequestId};
use crate::proto::config::DEFAULT_IDEMPOTENCY_META_KEY;
use crate::proto::jsonrpc;
use crate::proto::{CallId, HttpId, HttpMethod, HttpPurpose, Output, SessionEvent};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CallState {
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
pub(super) struct Call {
    pub(super) method: String,
    pub(super) params: Option<Value>,
    pub(super) key: Option<IdempotencyKey>,
    pub(super) deadline: Instant,
    pub(super) state: CallState,
    pub(super) rpc: Option<RequestId>,
    /// Session generation of the last send.
    pub(super) generation: u64,
    /// Capability hash of the session of the last send.
    pub(super) hash: Option<CapabilityHash>,
    /// Whether that session advertised idempotency.
    pub(super) server_dedups: bool,
    pub(super) cursor: Option<EventId>,
    pub(super) retry: Option<Duration>,
    pub(super) attempts: u32,
    pub(super) no_progress: u32,
    pub(super) may_have_run: bool,
    pub(super) sends: u32,
    /// What explains the last failure, for the error the call may end with.
    pub(super) cause: Option<Error>,
    /// `params._meta.progressToken`, when the call asked for progress.
    pub(super) progress_token: Option<RequestId>,
}

impl Session {
    pub(super) fn new_call_id(&mut self) -> CallId {
        self.next_call += 1;
        CallId(self.next_call)
    }

    pub(super) fn send_call(&mut self, id: CallId) {
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
            .unwrap_or(DEFAULT_IDEMPOTENCY_META_KEY);
        // `CallRequest` admits a key only where it travels on the wire (`tools/call`), so a
        // keyed call is always one the server can deduplicate.
        let params = match &call.key {
            Some(key) => Some(with_meta_key(call.params.clone(), meta_key, key)),
            None => call.params.clone(),
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
        call.cause = None;
        let mut headers = Self::session_headers(&ctx, true);
        if let Some(key) = &call.key {
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

    pub(super) fn fail_call(&mut self, id: CallId, kind: ErrorKind) {
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
        let error = match self.calls.get_mut(&id).and_then(|c| c.cause.take()) {
            Some(cause) => Error::caused_by(kind, message, cause),
            None => Error::new(kind, message),
        };
        self.complete(id, Err(error));
    }

    pub(super) fn complete(&mut self, id: CallId, result: Result<Value, Error>) {
        if self.remove_call(id).is_some() {
            self.outputs
                .push_back(Output::Completed { call: id, result });
        }
    }

    pub(super) fn remove_call(&mut self, id: CallId) -> Option<Call> {
        let call = self.calls.remove(&id)?;
        if let Some(rpc) = &call.rpc {
            self.rpc_index.remove(rpc);
        }
        if let Some(token) = &call.progress_token {
            if self.progress_tokens.get(token) == Some(&id) {
                self.progress_tokens.remove(token);
            }
        }
        if let CallState::Posting(http) | CallState::Resuming(http) = call.state {
            self.finish_exchange(http);
        }
        Some(call)
    }

    pub(super) fn fail_everything(&mut self, kind: ErrorKind, message: &str, events: bool) {
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

    pub(super) fn send_cancelled(&mut self, id: CallId, reason: &str) {
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
        self.post(ExKind::Notify, HttpPurpose::Notify, body);
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
