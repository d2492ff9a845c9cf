//! Durable calls (the tasks extension, SEP-2663): a call the server answered with a task is
//! polled with `tasks/get` until the task ends, and its final result completes the call.
//!
//! Polling is read-only, so it is always safe to repeat: a broken poll is simply sent again,
//! across lost connections and instance deaths, until the call's deadline. The task id is
//! announced ([`SessionEvent::TaskCreated`]) before the first poll, so an app can store it
//! and pick the task up again after a restart ([`Session::resume_task`]).

use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use tracing::{debug, info};

use super::call::Call;
use super::exchanges::ExKind;
use super::lifecycle::Standing;
use super::timers::Timer;
use super::Session;
use crate::error::{Error, ErrorKind, RpcError};
use crate::ids::RequestId;
use crate::proto::limits::MAX_INPUT_ROUNDS;
use crate::proto::{methods, CallId, HttpMethod, HttpPurpose, Output, ServerRequest, SessionEvent};

/// The extension's identifier in capabilities.
pub(super) const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";
/// The fastest a task is polled, whatever the server suggests.
const MIN_POLL: Duration = Duration::from_millis(10);
/// The slowest a task is polled, whatever the server suggests.
const MAX_POLL: Duration = Duration::from_secs(60);

impl Session {
    /// The call was answered with a task: announce it, then poll.
    pub(super) fn task_created(&mut self, id: CallId, result: Value, now: Instant) {
        let Some(task_id) = result.get("taskId").and_then(Value::as_str) else {
            return self.complete(
                id,
                Err(Error::new(
                    ErrorKind::Protocol,
                    "a task result without a taskId",
                )),
            );
        };
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
        self.note_checkpoint(id);
        self.on_task_status(id, result, now);
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
        if self.calls.get(id).is_some() {
            return;
        }
        let deadline = super::deadline_after(now, timeout.unwrap_or(self.config.call_timeout));
        self.calls
            .insert(id, Call::resuming_task(task_id, deadline));
        self.timers.set(Timer::CallDeadline(id), deadline);
        self.note_checkpoint(id);
        if self.life.ready().is_some() {
            self.send_call(id);
        } else if self.life.standing() == Standing::Idle {
            self.start_handshake(None, None, None, now);
        }
    }

    /// The answer to a poll of call `id`'s task: the task's state, if it is one, of this task.
    pub(super) fn on_poll_answer(&mut self, id: CallId, answer: Value, now: Instant) {
        let Some(task_id) = self.calls.get(id).and_then(|c| c.task_id()) else {
            return;
        };
        match check_poll_answer(task_id, &answer) {
            Ok(()) => self.on_task_status(id, answer, now),
            Err(error) => self.complete(id, Err(error)),
        }
    }

    /// A `tasks/get` answer (or the task a call was answered with): go on polling, ask for
    /// input, or complete the call.
    fn on_task_status(&mut self, id: CallId, status: Value, now: Instant) {
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
                let result = status.get("result").cloned().unwrap_or(json!({}));
                self.task_finished(id, &task_id);
                self.complete(id, Ok(result));
            }
            "failed" => {
                let error = status.get("error").cloned().unwrap_or(Value::Null);
                let rpc = RpcError {
                    code: error.get("code").and_then(Value::as_i64).unwrap_or(-32603),
                    message: error
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("task failed")
                        .to_owned(),
                    data: error.get("data").cloned(),
                };
                self.task_finished(id, &task_id);
                self.complete(id, Err(Error::rpc(rpc)));
            }
            "cancelled" => {
                self.task_finished(id, &task_id);
                self.complete(
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
        let Some(fresh) = call.task_asks(requests) else {
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
        if fresh.is_empty() {
            return self.schedule_poll(id, now);
        }
        for (key, request) in fresh {
            let input_id = RequestId::String(format!("task/{}/{task_id}/{key}", id.0));
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
    }

    /// An answer to one of a task's inputs: sent at once with `tasks/update` (the server may
    /// take them one by one), then polling goes on once all are in.
    pub(super) fn task_input_answered(
        &mut self,
        id: CallId,
        key: String,
        value: Value,
        now: Instant,
    ) {
        let Some(call) = self.calls.get_mut(id) else {
            return;
        };
        let Some(task_id) = call.task_id().map(str::to_owned) else {
            return;
        };
        let done = call.task_input_answered(key.clone());
        let params = json!({
            "taskId": task_id,
            "inputResponses": { key: value },
        });
        self.send_unawaited(methods::TASKS_UPDATE, params);
        if done {
            self.schedule_poll(id, now);
        }
    }

    /// Tells the server a task's call was given up (best effort: cancellation is
    /// cooperative, and nothing waits for the answer).
    pub(super) fn cancel_task(&mut self, id: CallId) {
        let Some(task_id) = self
            .calls
            .get(id)
            .and_then(|c| c.task_id())
            .map(str::to_owned)
        else {
            return;
        };
        debug!(%task_id, "cancelling the task");
        self.send_unawaited(methods::TASKS_CANCEL, json!({ "taskId": task_id }));
        self.outputs
            .push_back(Output::Event(SessionEvent::TaskFinished {
                call: id,
                task_id,
            }));
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
    /// `tasks/cancel`: their answer is an empty acknowledgement).
    fn send_unawaited(&mut self, method: &str, params: Value) {
        let Some(session) = self.life.ready() else {
            return;
        };
        let rpc = self.calls.new_rpc();
        let modern = Some((&self.client_meta, &self.tool_headers));
        let (body, headers) = session.request(&rpc, method, &mut Some(params), None, modern);
        self.exchanges.open(
            ExKind::Notify,
            HttpMethod::Post,
            HttpPurpose::Notify,
            headers,
            Some(body),
            session,
        );
    }
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
