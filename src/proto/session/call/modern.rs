//! Calls in the modern era (2026-07-28), from their first answer on. A modern answer's
//! `resultType` says what comes next: the result; more input (a multi round-trip request,
//! MRTR: an `input_required` result answered through the app's handlers and the call sent
//! again); or a task (the tasks extension, SEP-2663), polled with `tasks/get` until it ends,
//! whose final result completes the call. Here too: the tool annotations a call's headers
//! mirror (the mirroring is part of a request's assembly, `negotiated`'s; a fresh tool list,
//! when the server says the headers do not match, is `apply`'s to fetch) and the errors only
//! a modern server sends.
//!
//! Polling a task is read-only, so it is always safe to repeat: a broken poll is simply sent
//! again, across lost connections and instance deaths, until the call's deadline. The task
//! id is announced ([`SessionEvent::TaskCreated`]) before the first poll, so an app can store
//! it and pick the task up again after a restart ([`Session::resume_task`]).

use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use tracing::{debug, info, warn};

use super::{Call, HeldTaskMessage};
use crate::error::{Error, ErrorKind, RpcError};
use crate::ids::{RequestId, SessionId};
use crate::proto::decide::Failure;
use crate::proto::jsonrpc;
use crate::proto::limits::{
    MAX_ANNOTATED_TOOLS, MAX_INPUTS_PER_ROUND, MAX_INPUT_ROUNDS, MAX_QUEUED_NOTIFICATIONS,
};
use crate::proto::modern::{self, ModernError, ResultType};
use crate::proto::session::timers::Timer;
use crate::proto::session::Session;
use crate::proto::{methods, CallId, Output, ServerRequest, SessionEvent, MAX_REQUEST_METHOD_LEN};

/// The fastest a task is polled, whatever the server suggests.
const MIN_POLL: Duration = Duration::from_millis(10);
/// The slowest a task is polled, whatever the server suggests.
const MAX_POLL: Duration = Duration::from_secs(60);
/// The longest task id accepted from a server, the bound of every id it hands out
/// ([`SessionId::MAX_LEN`], [`EventId::MAX_LEN`](crate::ids::EventId::MAX_LEN)).
const MAX_TASK_ID_LEN: usize = SessionId::MAX_LEN;

impl Session {
    /// A modern answer: its `resultType` says whether it is the result, a request for
    /// input, or a task; its error may be one only a modern server sends.
    pub(in crate::proto::session) fn deliver_modern(
        &mut self,
        id: CallId,
        result: Result<Value, RpcError>,
        now: Instant,
    ) {
        let mut value = match result {
            Ok(value) => value,
            Err(error) => {
                if let Some((failure, cause)) = self.modern_failure(id, &error) {
                    // A header mismatch or a version refused turns the request away before it
                    // runs, in a 200 body as with status 400: the send that got it never ran.
                    // (A missing capability may be found by a tool already running.)
                    let unrun = matches!(
                        modern::modern_error(&error),
                        Some(ModernError::HeaderMismatch | ModernError::UnsupportedVersion { .. })
                    );
                    if unrun {
                        if let Some(call) = self.calls.get_mut(id) {
                            call.not_run();
                        }
                    }
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
        if self.calls.get(id).is_some_and(|c| c.task_id().is_some()) {
            return self.on_poll_answer(id, value, now);
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

    /// A `tools/list` result from a modern server: tools with invalid `x-mcp-header`
    /// annotations are dropped (the specification requires it; one bad tool must not hide
    /// the others), and the valid annotations are remembered for the calls.
    fn learn_tools(&mut self, result: &mut Value) {
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
                        // Tools that left the list are never named again: full, the memory
                        // starts over. A tool forgotten this way costs its next call one
                        // header-mismatch answer and a fresh list (`refresh_tools`).
                        if self.tool_headers.len() >= MAX_ANNOTATED_TOOLS
                            && !self.tool_headers.contains_key(name)
                        {
                            self.tool_headers.clear();
                        }
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
    pub(in crate::proto::session) fn modern_failure(
        &self,
        id: CallId,
        rpc: &RpcError,
    ) -> Option<(Failure, Error)> {
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
        // Saturating: a call picked up from a ledger carries the round it reached there.
        let round = call.rounds().saturating_add(1);
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
        if let Some(error) = overlong_method(&requests) {
            return self.complete(id, Err(error));
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
        self.note_checkpoint(id, false);
        for (n, (key, request)) in requests.into_iter().enumerate() {
            let input_id = input_id("input", id, round, n);
            self.ask_app(id, input_id, key, &request);
        }
        self.send_round_if_complete(id, now);
    }

    /// Whether `id` names an input a 2026-07-28 call of the app's waits for (an MRTR round's,
    /// or its task's): its answer goes into the call, never to the server. A driver need not
    /// hold such inputs to a bound meant for what a server asks at will: they come only from
    /// the app's own calls, at most [`MAX_INPUTS_PER_ROUND`] for each, and end with them.
    pub(crate) fn awaits_input(&self, id: &RequestId) -> bool {
        let RequestId::String(id) = id else {
            return false;
        };
        // The call is named in the id the session built (`input_id`); a server's own
        // request id shaped alike names no call that waits for input.
        let call = id
            .strip_prefix("input/")
            .or_else(|| id.strip_prefix("task/"))
            .and_then(|rest| rest.split('/').next())
            .and_then(|call| call.parse().ok());
        call.and_then(|call| self.calls.get(CallId(call)))
            .is_some_and(Call::has_inputs)
    }

    /// An answer to one of a call's inputs (from [`Session::respond`]), handed to the MRTR
    /// round (or the task) it belongs to; given back when `id` names no input.
    pub(in crate::proto::session) fn input_answered(
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
                // Without the input the server asked for, the call cannot go on; its task
                // would wait for that input until the server gives up on it.
                if for_task {
                    self.cancel_task(call);
                }
                // The client's failure, not the server's answer (`Rpc` would read as a
                // refusal of the call, one that never ran): the call stops half-way, after a
                // round or a task the server took, so what ran of it is not known, and it is
                // not sent again. Marked apart from an interrupted call's: a re-send would
                // start the call over and ask the app the same thing again, so no re-sender
                // may take it for one. The handler's error is the source.
                self.complete(
                    call,
                    Err(Error::caused_by(
                        ErrorKind::OutcomeUnknown,
                        format!("input {key:?} could not be provided"),
                        Error::rpc(error),
                    )
                    .with_input_refused()),
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

/// The error ending a call one of whose inputs (`requests`, a round's or its task's, by key)
/// has a method longer than a server request's may be ([`MAX_REQUEST_METHOD_LEN`]), if one
/// has. The server's error, as a round asking too much is: no handler takes such a method,
/// and none of the round's inputs is handed out, so that no handler, nor the refusal, holds a
/// copy of it (a megabyte, say). Nothing of the server's is named.
fn overlong_method(requests: &Map<String, Value>) -> Option<Error> {
    let longest = requests
        .values()
        .filter_map(|r| r.get("method").and_then(Value::as_str))
        .map(str::len)
        .max()?;
    (longest > MAX_REQUEST_METHOD_LEN).then(|| {
        Error::new(
            ErrorKind::Protocol,
            format!(
                "the server asked for an input whose method is {longest} bytes long (at most \
                 {MAX_REQUEST_METHOD_LEN})"
            ),
        )
    })
}

// Tasks.
impl Session {
    /// The call was answered with a task: announce it, then poll.
    fn task_created(&mut self, id: CallId, result: Value, now: Instant) {
        let Some(task_id) = result.get("taskId").and_then(Value::as_str) else {
            return self.complete(
                id,
                Err(Error::new(
                    ErrorKind::Protocol,
                    "a task result without a taskId",
                )),
            );
        };
        if task_id.len() > MAX_TASK_ID_LEN {
            // Refused as an over-long session or event id is: the id would be logged,
            // announced, stored and sent back with every poll.
            return self.complete(
                id,
                Err(Error::new(
                    ErrorKind::Protocol,
                    format!("a task id longer than {MAX_TASK_ID_LEN} bytes"),
                )),
            );
        }
        let task_id = task_id.to_owned();
        let Some(call) = self.calls.get_mut(id) else {
            return;
        };
        info!(call = id.0, %task_id, "the call became a task");
        call.become_task(task_id.clone());
        self.outputs
            .push_back(Output::Event(SessionEvent::TaskCreated {
                call: id,
                task_id,
            }));
        self.note_checkpoint(id, false);
        self.on_task_status(id, result, now, false);
    }

    /// Polls a task created before (by another session, or before a restart): the returned
    /// call completes with the task's final result.
    pub fn resume_task(
        &mut self,
        id: CallId,
        task_id: &str,
        timeout: Option<Duration>,
        now: Instant,
    ) {
        // As a submission: an id in use or a closed session refuses it, and a session not
        // ready (never started, or lost) is (re)connected for it.
        if self.refuse(id, "task resumption") {
            return;
        }
        let deadline =
            crate::proto::session::deadline_after(now, timeout.unwrap_or(self.config.call_timeout));
        // The `tools/call` that became the task, polled from now on.
        let mut call = Call::new(methods::TOOLS_CALL.to_owned(), None, None, deadline);
        call.become_task(task_id.to_owned());
        self.calls.insert(id, call);
        self.timers.set(Timer::CallDeadline(id), deadline);
        self.note_checkpoint(id, false);
        if self.life.ready().is_some() {
            self.send_call(id);
        } else {
            self.start_if_stopped(now);
        }
    }

    /// The answer to a poll of call `id`'s task: the task's state, if it is one, of this task.
    fn on_poll_answer(&mut self, id: CallId, answer: Value, now: Instant) {
        let Some(task_id) = self.calls.get(id).and_then(|c| c.task_id()) else {
            return;
        };
        match check_poll_answer(task_id, &answer) {
            Ok(()) => self.on_task_status(id, answer, now, true),
            Err(error) => self.complete(id, Err(error)),
        }
    }

    /// A `tasks/get` answer (`polled`), or the task a call was answered with: go on polling,
    /// ask for input, or complete the call.
    fn on_task_status(&mut self, id: CallId, status: Value, now: Instant, polled: bool) {
        let Some(call) = self.calls.get_mut(id) else {
            return;
        };
        let Some(task_id) = call.task_id().map(str::to_owned) else {
            return;
        };
        if let Some(ms) = status.get("pollIntervalMs").and_then(Value::as_u64) {
            call.suggest_poll(Duration::from_millis(ms).clamp(MIN_POLL, MAX_POLL));
        }
        match status
            .get("status")
            .and_then(Value::as_str)
            .unwrap_or("working")
        {
            "completed" => {
                let Some(result) = status.get("result").cloned() else {
                    if !polled {
                        // The call's own answer names its task; the final result is what
                        // `tasks/get` returns: a task done before it was answered (a quick
                        // tool) is polled for it.
                        return self.schedule_poll(id, now);
                    }
                    // A completed task's status carries its final result: without it there
                    // is no answer to give, and an empty one would be a success the tool
                    // never produced. The task stays recorded, to be polled again once the
                    // server answers sense.
                    return self.complete(
                        id,
                        Err(Error::new(
                            ErrorKind::Protocol,
                            format!("task {task_id} completed without its result"),
                        )),
                    );
                };
                self.task_finished(id, &task_id);
                self.complete_task(id, Ok(result));
            }
            "failed" => {
                let error = status.get("error").cloned().unwrap_or(Value::Null);
                let mut message = error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("task failed")
                    .to_owned();
                // The task's error is the server's answer to the call: held to the cap of a
                // JSON-RPC error's message, as it reaches the same errors, logs and telemetry.
                jsonrpc::cap_error_message(&mut message);
                let rpc = RpcError {
                    code: error.get("code").and_then(Value::as_i64).unwrap_or(-32603),
                    message,
                    data: error.get("data").cloned(),
                };
                self.task_finished(id, &task_id);
                self.complete_task(id, Err(Error::rpc(rpc)));
            }
            "cancelled" => {
                self.task_finished(id, &task_id);
                self.complete_task(
                    id,
                    Err(Error::new(
                        ErrorKind::Rpc,
                        format!("task {task_id} was cancelled"),
                    )),
                );
            }
            "input_required" => {
                let requests = status
                    .get("inputRequests")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                self.task_inputs(id, requests, now);
            }
            _ => self.schedule_poll(id, now),
        }
    }

    /// Asks the app for the task's inputs not answered yet; polls on when there are none.
    fn task_inputs(&mut self, id: CallId, requests: Map<String, Value>, now: Instant) {
        let Some(call) = self.calls.get_mut(id) else {
            return;
        };
        let Some(task_id) = call.task_id().map(str::to_owned) else {
            return;
        };
        if requests.len() > MAX_INPUTS_PER_ROUND {
            // An MRTR round's bound, checked before any handler runs.
            let asked = requests.len();
            self.cancel_task(id);
            return self.complete(
                id,
                Err(Error::new(
                    ErrorKind::Protocol,
                    format!(
                        "task {task_id} asked for {asked} inputs at once (at most {MAX_INPUTS_PER_ROUND})"
                    ),
                )),
            );
        }
        if let Some(error) = overlong_method(&requests) {
            self.cancel_task(id);
            return self.complete(id, Err(error));
        }
        let Some(asks) = call.task_asks(requests) else {
            // The same bound as an MRTR call's: a task that keeps asking must not keep the
            // call (and the app's handlers) busy until a deadline that may be a year away.
            self.cancel_task(id);
            return self.complete(
                id,
                Err(Error::new(
                    ErrorKind::Protocol,
                    format!("the task asked for input more than {MAX_INPUT_ROUNDS} times"),
                )),
            );
        };
        // The task's rounds of input so far, this one included: its inputs' ids.
        let round = call.task.as_ref().map_or(0, |t| t.input_rounds);
        for (key, value) in asks.again {
            debug!(%task_id, %key, "the task asks again for an answered input: sent again");
            self.send_task_update(&task_id, key, value);
        }
        if asks.fresh.is_empty() {
            return self.schedule_poll(id, now);
        }
        for (n, (key, request)) in asks.fresh.into_iter().enumerate() {
            let input_id = input_id("task", id, round, n);
            self.ask_app(id, input_id, key, &request);
        }
    }

    /// Hands one input the server asked call `id` for to the app's handlers, as a server
    /// request `input_id` whose answer goes to the call's input `key`. Its method is within
    /// [`MAX_REQUEST_METHOD_LEN`] ([`overlong_method`] checked the round's).
    fn ask_app(&mut self, id: CallId, input_id: RequestId, key: String, request: &Value) {
        self.calls.register_input(input_id.clone(), id, key);
        self.outputs.push_back(Output::ServerRequest(ServerRequest {
            id: input_id,
            method: request
                .get("method")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            params: request.get("params").cloned(),
        }));
    }

    /// An answer to one of a task's inputs: sent at once with `tasks/update` (the server may
    /// take them one by one), then polling goes on once all are in.
    fn task_input_answered(&mut self, id: CallId, key: String, value: Value, now: Instant) {
        let Some(call) = self.calls.get_mut(id) else {
            return;
        };
        let Some(task_id) = call.task_id().map(str::to_owned) else {
            return;
        };
        let done = call.task_input_answered(key.clone(), value.clone());
        self.send_task_update(&task_id, key, value);
        if done {
            self.schedule_poll(id, now);
        }
    }

    fn send_task_update(&mut self, task_id: &str, key: String, value: Value) {
        let params = json!({
            "taskId": task_id,
            "inputResponses": { key: value },
        });
        self.send_unawaited(HeldTaskMessage {
            method: methods::TASKS_UPDATE,
            params,
            finishes: None,
        });
    }

    /// Tells the server a task's call was given up (best effort: cancellation is
    /// cooperative, and nothing waits for the answer).
    pub(in crate::proto::session) fn cancel_task(&mut self, id: CallId) {
        let Some(task_id) = self
            .calls
            .get(id)
            .and_then(|c| c.task_id())
            .map(str::to_owned)
        else {
            return;
        };
        debug!(%task_id, "cancelling the task");
        // Finished for the app's records once the cancellation has gone out: held until the
        // session is ready, the task stays recorded meanwhile (and if it never goes out).
        self.send_unawaited(HeldTaskMessage {
            method: methods::TASKS_CANCEL,
            params: json!({ "taskId": task_id }),
            finishes: Some((id, task_id)),
        });
    }

    /// The next poll, after the server's interval (or the backoff when it gave none).
    fn schedule_poll(&mut self, id: CallId, now: Instant) {
        let Some(call) = self.calls.get_mut(id) else {
            return;
        };
        let delay = call.poll_later(self.config.reconnect.initial_delay.max(MIN_POLL));
        self.timers.set(
            Timer::CallBackoff(id),
            now.checked_add(delay).unwrap_or(now),
        );
    }

    fn task_finished(&mut self, id: CallId, task_id: &str) {
        self.outputs
            .push_back(Output::Event(SessionEvent::TaskFinished {
                call: id,
                task_id: task_id.to_owned(),
            }));
    }

    /// POSTs a modern request whose answer nothing waits for (`tasks/update`,
    /// `tasks/cancel`: their answer is an empty acknowledgement); while the session is not
    /// ready (re-establishing), it is held (bounded) and sent once it is.
    fn send_unawaited(&mut self, message: HeldTaskMessage) {
        if self.held_task_messages.len() < MAX_QUEUED_NOTIFICATIONS {
            self.held_task_messages.push_back(message);
        } else {
            warn!(
                method = message.method,
                "task message dropped: too many held"
            );
        }
        self.flush_task_messages();
    }

    /// Sends the task messages held while the session was not ready. A session that came
    /// back in the legacy era has no tasks to tell: they are dropped (a cancelled task stays
    /// recorded).
    pub(in crate::proto::session) fn flush_task_messages(&mut self) {
        while self.life.ready().is_some() {
            let Some(message) = self.held_task_messages.pop_front() else {
                break;
            };
            if self.is_modern() {
                self.post_task_message(message);
            } else {
                debug!(
                    method = message.method,
                    "task message dropped: legacy session"
                );
            }
        }
    }

    fn post_task_message(&mut self, message: HeldTaskMessage) {
        let Some(session) = self.life.ready() else {
            return;
        };
        let rpc = self.calls.new_rpc();
        let modern = Some((&self.client_meta, &self.tool_headers));
        let mut params = Some(message.params);
        let (body, headers) = session.request(&rpc, message.method, &mut params, None, modern);
        self.exchanges.open_notify(headers, body, session);
        if let Some((call, task_id)) = message.finishes {
            self.task_finished(call, &task_id);
        }
    }
}

/// The id the app's handler sees for input `n` of call `id`'s round `round` (`kind`: an MRTR
/// round's, `input`, or a task's, `task`). Made of the session's own numbers only: the server's
/// key for the input (the round's map holds it) or its task id could make it as long as they
/// are, past what a driver hands a handler, and unique per call and round without them.
fn input_id(kind: &str, id: CallId, round: u32, n: usize) -> RequestId {
    RequestId::String(format!("{kind}/{}/{round}/{n}", id.0))
}

/// Whether a `tasks/get` answer is the state of task `task_id`: one naming another task (its
/// result would complete the call with someone else's) or without a status is not. The call
/// then fails; the task stays recorded, to be resumed once the server answers sense.
fn check_poll_answer(task_id: &str, answer: &Value) -> Result<(), Error> {
    match answer.get("taskId") {
        None => {}
        Some(Value::String(id)) if id == task_id => {}
        Some(other) => {
            let other: String = other.to_string().chars().take(64).collect();
            return Err(Error::new(
                ErrorKind::Protocol,
                format!("tasks/get for task {task_id} answered for task {other}"),
            ));
        }
    }
    if !answer.get("status").is_some_and(Value::is_string) {
        return Err(Error::new(
            ErrorKind::Protocol,
            format!("tasks/get for task {task_id} answered without a status"),
        ));
    }
    Ok(())
}
