//! Decoded JSON-RPC messages, routed to the call they answer, to the app, or to
//! `initialize`.

use std::time::Instant;

use serde_json::{json, Value};
use tracing::{debug, warn};

use super::exchange::ExKind;
use super::init::{Init, InitStep};
use super::Session;
use crate::error::{Error, RpcError};
use crate::ids::RequestId;
use crate::proto::decide::Failure;
use crate::proto::jsonrpc::{self, Message};
use crate::proto::{CallId, HttpId, Notification, Output, ServerRequest};

impl Session {
    /// Handles a body or event payload; `false` when it was not JSON-RPC at all.
    pub(super) fn on_payload(
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
                let call = self.related_call(&method, params.as_ref(), kind, resumed);
                self.outputs.push_back(Output::Notification {
                    call,
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
                        self.stream_violation(http, Failure::OrphanedResponse, now);
                    }
                    None => warn!(%id, "response to an unknown request ignored"),
                }
            }
        }
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
        match method {
            "notifications/progress" => {
                let token = params?
                    .get("progressToken")
                    .and_then(RequestId::from_json)?;
                self.progress_tokens.get(&token).copied()
            }
            _ => match kind {
                ExKind::Post(c) if !resumed => Some(c),
                _ => None,
            },
        }
    }

    fn was_issued(&self, id: &RequestId) -> bool {
        matches!(id, RequestId::Number(n) if *n >= 1 && *n <= self.next_rpc)
    }

    fn deliver(&mut self, id: CallId, result: Result<Value, RpcError>, now: Instant) {
        let Some(call) = self.calls.get(&id) else {
            return;
        };
        let failure = match &result {
            Ok(value) if !self.result_hash_matches(call, value) => {
                Some(Failure::CapabilityHashMismatch)
            }
            Ok(_) => None,
            Err(error) => self.key_refusal(call, error),
        };
        if let Some(failure) = failure {
            return self.apply(id, failure, now);
        }
        debug!(call = id.0, ok = result.is_ok(), "call completed");
        self.complete(id, result.map_err(Error::rpc));
    }
}
