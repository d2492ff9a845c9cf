//! Calls in the modern era (2026-07-28): the tool annotations a call's headers mirror (the
//! mirroring is part of a request's assembly, `negotiated`'s; a fresh tool list, when the
//! server says the headers do not match, is `apply`'s to fetch), the errors only a modern
//! server sends, and multi round-trip requests (MRTR): an `input_required` result answered
//! through the app's handlers and the call sent again.

use crate::proto::limits::{MAX_INPUTS_PER_ROUND, MAX_INPUT_ROUNDS};
use std::time::Instant;

use serde_json::{Map, Value};
use tracing::warn;

use super::call::Call;
use super::Session;
use crate::error::{Error, ErrorKind, RpcError};
use crate::ids::RequestId;
use crate::proto::decide::Failure;
use crate::proto::modern::{self, ModernError};
use crate::proto::{CallId, Era, Output, ServerRequest};

impl Session {
    /// Whether the server is known to speak the modern era.
    pub(super) fn is_modern(&self) -> bool {
        self.life.era() == Some(Era::Modern)
    }

    /// A `tools/list` result from a modern server: tools with invalid `x-mcp-header`
    /// annotations are dropped (the specification requires it; one bad tool must not hide
    /// the others), and the valid annotations are remembered for the calls.
    pub(super) fn learn_tools(&mut self, result: &mut Value) {
        let Some(tools) = result.get_mut("tools").and_then(Value::as_array_mut) else {
            return;
        };
        tools.retain(|tool| {
            let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
            let schema = tool.get("inputSchema").unwrap_or(&Value::Null);
            match modern::param_headers(schema) {
                Ok(annotations) => {
                    if annotations.is_empty() {
                        self.tool_headers.remove(name);
                    } else {
                        self.tool_headers.insert(name.to_owned(), annotations);
                    }
                    true
                }
                Err(why) => {
                    warn!(tool = name, reason = %why.0, "tool with invalid x-mcp-header dropped");
                    self.tool_headers.remove(name);
                    false
                }
            }
        });
    }

    /// What a modern error answering call `id` means, when it is one only a modern server
    /// sends: the recovery failure, and the error the call ends with if it ends.
    pub(super) fn modern_failure(&self, id: CallId, rpc: &RpcError) -> Option<(Failure, Error)> {
        let refreshed = self.calls.get(id).is_some_and(|c| c.refreshed());
        Some(match modern::modern_error(rpc)? {
            ModernError::HeaderMismatch => (
                Failure::HeaderMismatch { refreshed },
                Error::rpc(rpc.clone()),
            ),
            // A list with a revision we speak, in this era or (by a new handshake) the
            // legacy one, is worth a new handshake; a list with none cannot become one, and
            // handshakes that each succeed would only end with the session lost.
            ModernError::UnsupportedVersion { supported }
                if modern::pick_version(&supported).is_none()
                    && !self.may_fall_back_to(&supported) =>
            {
                (
                    Failure::Refused {
                        retry_within_deadline: false,
                    },
                    Error::rpc(rpc.clone()),
                )
            }
            ModernError::UnsupportedVersion { .. } => {
                (Failure::VersionRefused, Error::rpc(rpc.clone()))
            }
            ModernError::MissingCapability { .. } => (
                Failure::Refused {
                    retry_within_deadline: false,
                },
                Error::missing_capability(rpc.clone()),
            ),
        })
    }

    /// An `input_required` result: ask the app's handlers for each input, or send the call
    /// again at once when the server asked for nothing but its state back.
    pub(super) fn input_required(&mut self, id: CallId, mut result: Value, now: Instant) {
        let Some(call) = self.calls.get_mut(id) else {
            return;
        };
        let round = call.rounds() + 1;
        if round > MAX_INPUT_ROUNDS {
            return self.complete(
                id,
                Err(Error::new(
                    ErrorKind::Protocol,
                    format!("the server asked for input more than {MAX_INPUT_ROUNDS} times"),
                )),
            );
        }
        // Taken, not copied: a state or a list of requests may be as large as a body.
        let state = match result.get_mut("requestState").map(Value::take) {
            None => None,
            Some(Value::String(s)) => Some(s),
            Some(_) => {
                return self.complete(
                    id,
                    Err(Error::new(
                        ErrorKind::Protocol,
                        "requestState is not a string",
                    )),
                )
            }
        };
        let requests = match result.get_mut("inputRequests").map(Value::take) {
            None => Map::new(),
            Some(Value::Object(m)) => m,
            Some(_) => {
                return self.complete(
                    id,
                    Err(Error::new(
                        ErrorKind::Protocol,
                        "inputRequests is not an object",
                    )),
                )
            }
        };
        if requests.len() > MAX_INPUTS_PER_ROUND {
            return self.complete(
                id,
                Err(Error::new(
                    ErrorKind::Protocol,
                    format!(
                        "the server asked for {} inputs in one round (at most {MAX_INPUTS_PER_ROUND})",
                        requests.len()
                    ),
                )),
            );
        }
        if requests.is_empty() && state.is_none() {
            return self.complete(
                id,
                Err(Error::new(
                    ErrorKind::Protocol,
                    "input_required with neither inputRequests nor requestState",
                )),
            );
        }
        let kept = self.config.checkpoints.then(|| requests.clone());
        call.await_round(round, state, requests.len(), kept);
        self.note_checkpoint(id);
        for (key, request) in requests {
            let method = request
                .get("method")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let params = request.get("params").cloned();
            let input_id = RequestId::String(format!("input/{}/{round}/{key}", id.0));
            self.calls.register_input(input_id.clone(), id, key);
            self.outputs.push_back(Output::ServerRequest(ServerRequest {
                id: input_id,
                method,
                params,
            }));
        }
        self.send_round_if_complete(id, now);
    }

    /// An answer to one of a call's inputs (from [`Session::respond`]), handed to the MRTR
    /// round (or the task) it belongs to; given back when `id` names no input.
    pub(super) fn input_answered(
        &mut self,
        id: &RequestId,
        result: Result<Value, RpcError>,
        now: Instant,
    ) -> Result<(), Result<Value, RpcError>> {
        let Some((call, key)) = self.calls.take_input(id) else {
            return Err(result);
        };
        let for_task = self.calls.get(call).is_some_and(|c| c.task_id().is_some());
        match result {
            Ok(value) if for_task => self.task_input_answered(call, key, value, now),
            Err(error) => {
                // Without the input the server asked for, the call cannot go on.
                self.complete(
                    call,
                    Err(Error::caused_by(
                        ErrorKind::Rpc,
                        format!("input {key:?} could not be provided"),
                        Error::rpc(error),
                    )),
                );
            }
            Ok(value) => {
                if let Some(call) = self.calls.get_mut(call) {
                    call.answer_input(key, value);
                }
                self.send_round_if_complete(call, now);
            }
        }
        Ok(())
    }

    /// Once every input of the round is answered, sends the call again: a new JSON-RPC id,
    /// `inputResponses`, `requestState` echoed unchanged, and for a keyed call the round's
    /// own key, so re-sends of one round stay deduplicated.
    fn send_round_if_complete(&mut self, id: CallId, now: Instant) {
        let _ = now;
        // A new round is a new request: it starts without a stream or a count of failures,
        // and waits to be sent: now, or once the session is (re-)established.
        let ready = self.calls.get_mut(id).is_some_and(Call::next_round);
        if ready && self.life.ready().is_some() {
            self.send_call(id);
        }
    }
}
