//! The application's commands, time passing (`handle_timeout`: deadlines and backoffs come
//! due), and what the session sends for them: calls, resumes, cancellations, notifications,
//! answers to server requests, and the DELETE that closes the session.

use crate::proto::limits::MAX_QUEUED_NOTIFICATIONS;
use bytes::Bytes;
use serde_json::{json, Value};
use tracing::{debug, info, warn};

use super::exchanges::ExKind;
use super::Session;
use std::time::Instant;

use super::call::{is_round_key, Call, CallState, Retry};
use super::deadline_after;
use super::lifecycle::Standing;
use super::timers::Timer;
use crate::error::{Error, ErrorKind, RpcError};
use crate::ids::RequestId;
use crate::proto::decide::Failure;
use crate::proto::{
    jsonrpc, methods, CallId, HttpMethod, HttpPurpose, Output, ResendPolicy, SessionEvent,
};
use crate::proto::{CallRequest, HttpId};

// The application's commands.
impl Session {
    /// Starts `initialize` (+ `notifications/initialized`, + the GET stream). The returned
    /// call completes with the `initialize` result once the session is ready (at once when it
    /// already is).
    pub fn connect(&mut self, now: Instant) -> CallId {
        let id = CallId::next();
        if let Some(session) = self.life.ready() {
            let result = session.result.clone();
            self.outputs.push_back(Output::Completed {
                call: id,
                result: Ok(result),
            });
        } else if matches!(self.life.standing(), Standing::Over { .. }) {
            let error = self.terminal_error();
            self.outputs.push_back(Output::Completed {
                call: id,
                result: Err(error),
            });
        } else {
            self.life.wait_for_connect(id);
            self.start_if_stopped(now);
        }
        id
    }

    /// Submits a request as call `id` ([`CallId::next`]): the id its outputs and events name.
    /// Calls submitted before or during (re-)initialization wait for it; the first one
    /// connects. An id already in use is refused (nothing is sent, nothing reported). A
    /// request whose idempotency key ends in `.round` and digits (reserved for the keys of a
    /// multi-round call's rounds) completes at once with [`ErrorKind::InvalidConfig`],
    /// nothing sent.
    pub fn submit(&mut self, id: CallId, request: CallRequest, now: Instant) {
        if self.refuse(id, "submission") {
            return;
        }
        if let Some(key) = request.idempotency_key.as_ref().filter(|k| is_round_key(k)) {
            // Reserved for the rounds of multi-round calls: a server deduplicating keys could
            // take this call for another call's round and answer it with that round's result.
            let message = format!(
                "invalid idempotency key {:?}: a key ending in .round<n> is reserved for the \
                 rounds of multi-round calls",
                key.as_str()
            );
            let result = Err(Error::new(ErrorKind::InvalidConfig, message));
            self.outputs
                .push_back(Output::Completed { call: id, result });
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
        if self.life.ready().is_some() {
            self.send_call(id);
        } else {
            self.start_if_stopped(now);
        }
    }

    /// Sends a notification to the server (best effort; no completion is reported). Before
    /// the session is ready it is held (bounded) and sent once it is; at most 8 are POSTed at
    /// once, the rest held behind them.
    pub fn notify(&mut self, method: &str, params: Option<Value>, now: Instant) {
        if matches!(self.life.standing(), Standing::Over { .. }) {
            debug!(method, "notification dropped: session closed");
            return;
        }
        let body = jsonrpc::encode_notification(method, params.as_ref());
        self.queue_notification(body);
        if self.life.ready().is_some() {
            self.flush_notifications();
        } else {
            self.start_if_stopped(now);
        }
    }

    /// Answers a server-to-client request. At most 8 answers are in flight; up to 256 wait
    /// behind them, more are dropped and counted ([`Session::dropped_answers`]).
    ///
    /// Only a request of the current session is answered, once: an answer to a request
    /// delivered before the session was replaced or lost ([`SessionEvent::Reinitialized`],
    /// [`SessionEvent::SessionLost`]) is dropped, as is a second answer. A driver must not
    /// carry an answer across sessions, since the new session's server may have sent a request
    /// under the same id; the tokio driver ties each answer to the delivery it answers.
    pub fn respond(&mut self, id: RequestId, result: Result<Value, RpcError>, now: Instant) {
        // An answer to an MRTR input goes into the call's next round, not on the wire.
        let Err(result) = self.input_answered(&id, result, now) else {
            return;
        };
        if self.is_modern() {
            // The modern era has no server requests to answer: this is an input of a call
            // that ended (dropped, cancelled, past its deadline), and nothing more is sent
            // for it.
            debug!(%id, "answer to an input of an ended call dropped");
            return;
        }
        if !self.exchanges.release_request(&id) {
            // A request of an earlier session (whose server is gone, and whose successor may
            // have sent another request under the same id), or one answered already.
            debug!(%id, "answer dropped: no request of this session waits for it");
            return;
        }
        self.send_answer(id, result);
    }

    /// Forgets a server request without answering it: the server cancelled it
    /// (`notifications/cancelled`) and its handler was stopped, so no answer is owed. Its id
    /// is free again, and a later request under it is handed out as a new one; without this
    /// the id stays held for good (a later request under it is ignored) and counts against
    /// the bound on requests waiting for an answer. A later [`Session::respond`] for it is
    /// dropped.
    ///
    /// Returns whether a request of the current session waited on `id`: only then is there a
    /// handler to stop. An id no request of this session waits on (one answered already, or a
    /// 2026-07-28 call's input, which the server cannot cancel this way: the round it belongs
    /// to waits for its answer) is ignored. A driver may withdraw whatever id a cancellation
    /// it is handed names: the session hands out none read on a stream of a session since
    /// replaced, whose server names its own requests, not the current server's under the
    /// same ids.
    pub fn withdraw_request(&mut self, id: &RequestId) -> bool {
        let released = self.exchanges.release_request(id);
        if released {
            debug!(%id, "server request withdrawn: not answered");
        }
        released
    }

    /// Sends an answer to a request of this session's server (through the bounded queue).
    pub(super) fn send_answer(&mut self, id: RequestId, result: Result<Value, RpcError>) {
        if self.life.ready().is_none() {
            debug!(%id, "answer to a server request dropped: session not ready");
            return;
        }
        let body = jsonrpc::encode_response(&id, &result);
        if !self.exchanges.queue_answer(body) {
            warn!(
                dropped = self.exchanges.dropped_answers(),
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

    /// Ends call `call`'s wait now as its deadline would (a driver's own bound on it, such as
    /// a timeout restarted on progress, lapsed): the server is told as at the deadline, a
    /// task the call became is left running, to be resumed, and the call completes with
    /// [`ErrorKind::Timeout`].
    pub fn expire(&mut self, call: CallId, now: Instant) {
        self.deadline_passed(call, now);
    }

    fn deadline_passed(&mut self, id: CallId, now: Instant) {
        if let Some(call) = self.calls.get(id) {
            info!(call = id.0, method = %call.method(), "call deadline passed");
            self.send_cancelled(id, "timeout");
            // A task is not cancelled: the deadline bounds the wait, not the durable work,
            // whose id stays recorded to be resumed later.
            self.apply(id, Failure::DeadlineExpired, now);
        }
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

    /// Closes the session: fails waiting calls with `Closed`, withdraws the server requests
    /// still unanswered ([`Output::ServerRequestWithdrawn`]: nobody will send their answers)
    /// and DELETEs the session. The returned call completes when the DELETE is answered (405
    /// tolerated, and a session the server no longer knows is closed too).
    ///
    /// Before a legacy-era session is deleted, every call that may be running on it is
    /// cancelled (`notifications/cancelled`, queued ahead of the DELETE), and notifications
    /// already queued or in flight (a dropped call's cancellation among them) still go: a
    /// server that refuses the DELETE would run the calls on otherwise. The close call does
    /// not wait for them.
    pub fn close(&mut self, now: Instant) -> CallId {
        let _ = now;
        let id = CallId::next();
        let standing = self.life.standing();
        // A lost session has nothing left to delete: the server already forgot it.
        let stopped = matches!(standing, Standing::Idle | Standing::Lost);
        if stopped || matches!(standing, Standing::Over { .. }) {
            if stopped {
                let nothing = self.life.close(self.config.protocol_version, id);
                debug_assert!(nothing.is_none());
                self.outputs.push_back(Output::Event(SessionEvent::Closed));
            }
            self.outputs.push_back(Output::Completed {
                call: id,
                result: Ok(Value::Null),
            });
            return id;
        }
        // A legacy server runs a call until it is told to stop, and one that keeps the
        // session (answering the DELETE 405) would run it on for nobody: each call that may
        // be running is cancelled, ahead of the DELETE, while the session still takes POSTs.
        for call in self.calls.ids() {
            self.send_cancelled(call, "the client closed its session");
        }
        // The session to delete: the established one, or the one a handshake has obtained.
        let delete = self.life.close(self.config.protocol_version, id);
        self.fail_everything(ErrorKind::Closed, "session closed", false);
        self.withdraw_server_requests();
        // Those cancellations go, and so do the ones queued before (a call dropped just now).
        self.exchanges.finish_all_but_delete_and_notifications();
        self.timers.clear();
        self.stop_listening();
        self.notifications.clear();
        self.outputs.push_back(Output::Event(SessionEvent::Closed));
        match delete {
            Some((headers, generation)) => {
                info!("closing session");
                self.exchanges.open_delete(headers, generation);
            }
            None => self.outputs.push_back(Output::Completed {
                call: id,
                result: Ok(Value::Null),
            }),
        }
        id
    }

    /// Whether call `id` cannot start (`what`: a submission or a pick-up): its id is in use
    /// (ignored), or the session is over (the call completed at once with why).
    pub(super) fn refuse(&mut self, id: CallId, what: &str) -> bool {
        if self.calls.get(id).is_some() {
            warn!(call = id.0, "call id already in use: {what} ignored");
            return true;
        }
        if matches!(self.life.standing(), Standing::Over { .. }) {
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
}

// Time.
impl Session {
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
                Timer::ListenBackoff => self.open_listen(now),
                Timer::CallBackoff(id) => self.fire_retry(id, now),
                Timer::CallDeadline(id) => self.deadline_passed(id, now),
            }
        }
    }

    /// A call's backoff ended.
    fn fire_retry(&mut self, id: CallId, now: Instant) {
        let ready = self.life.ready().is_some();
        let Some(call) = self.calls.get_mut(id) else {
            return;
        };
        let CallState::Backoff(then) = call.state() else {
            return;
        };
        call.wait();
        match then {
            Retry::Resend if ready => self.send_call(id),
            Retry::Resend => {}
            Retry::Resume if ready && self.life.is_current(call.attempt().generation()) => {
                self.send_resume(id, now)
            }
            Retry::Resume => {
                self.apply(id, Failure::SessionReplaced, now);
            }
        }
    }
}

// What goes out.
impl Session {
    /// POSTs a call on the established session (a new JSON-RPC id for every send).
    pub(super) fn send_call(&mut self, id: CallId) {
        let Some(session) = self.life.ready() else {
            return;
        };
        // A call that may have run already (picked up from another process, or re-sent after
        // an interruption) goes out again only if this session's server deduplicates its key:
        // the session it was re-sent for may have been replaced by one that does not.
        let dedups =
            session.dedups() || self.config.resend_policy == ResendPolicy::AssumeServerDeduplicates;
        if let Some(why) = self.calls.get(id).and_then(|c| c.repeat_risk(dedups)) {
            return self.unsafe_to_repeat(id, why);
        }
        // The first send of a request (or of an MRTR round's) is recorded before it leaves,
        // and so is a re-send to a server that keeps keys otherwise than the last one did: a
        // new process reads from the record whether a second send under the key is safe.
        let advertised = session.dedups();
        let record = self.calls.get(id).is_some_and(|c| {
            c.task_id().is_none() && (c.sends() == 0 || c.attempt().server_dedups() != advertised)
        });
        if record {
            self.note_checkpoint(id, true);
        }
        let Some(session) = self.life.ready() else {
            return;
        };
        let rpc = self.calls.new_rpc();
        let Some(call) = self.calls.get_mut(id) else {
            return;
        };
        if call.sends_again() {
            info!(call = id.0, method = %call.method(), "re-sending call");
            self.outputs
                .push_back(Output::Event(SessionEvent::Redispatched {
                    call: id,
                    method: call.method().to_owned(),
                    idempotency_key: call.key().cloned(),
                }));
        }
        let modern = session
            .version
            .is_modern()
            .then_some((&self.client_meta, &self.tool_headers));
        let (method, mut params, key) = call.outgoing();
        let (body, headers) = session.request(&rpc, method, &mut params, key, modern);
        debug!(call = id.0, %rpc, method, "sending call");
        let http = self.exchanges.open(
            ExKind::Post(id),
            HttpMethod::Post,
            HttpPurpose::Request,
            headers,
            Some(body),
            session,
        );
        self.calls.sent(id, rpc, session, params, http);
    }

    /// GETs a call's stream with `Last-Event-ID`.
    fn send_resume(&mut self, id: CallId, now: Instant) {
        let Some(session) = self.life.ready() else {
            return;
        };
        let Some(call) = self.calls.get_mut(id) else {
            return;
        };
        let Some(cursor) = call.last_event_id().cloned() else {
            // The stream's last event reset its cursor (an empty `id:`): there is nothing to
            // resume from, as if no id had been seen.
            self.apply(
                id,
                Failure::StreamEnded {
                    event_id_seen: false,
                },
                now,
            );
            return;
        };
        info!(call = id.0, last_event_id = %cursor, "resuming stream");
        let headers = session.headers.get(Some(&cursor));
        let http = self
            .exchanges
            .open_stream(ExKind::Resume(id), headers, Some(&cursor), session);
        call.resume_on(http);
        // The cursor it resumes from, for the record.
        self.note_checkpoint(id, false);
    }

    /// POSTs `notifications/cancelled` for a call that may be running on this session. (In
    /// the modern era closing the call's stream is the cancellation: nothing is sent.)
    fn send_cancelled(&mut self, id: CallId, reason: &str) {
        if self.is_modern() {
            return;
        }
        let Some(call) = self.calls.get(id) else {
            return;
        };
        if !self.life.is_current(call.attempt().generation()) {
            return;
        }
        // A POST still queued has not left (and is taken back with the call): its id names
        // nothing the server has seen.
        let unsent = match call.state() {
            CallState::Posting(http) if self.exchanges.unsent(http) => call.attempt().rpc(),
            _ => None,
        };
        let running: Vec<RequestId> = call
            .running_ids()
            .filter(|rpc| Some(*rpc) != unsent)
            .cloned()
            .collect();
        for rpc in running {
            let params = json!({"requestId": rpc.to_json(), "reason": reason});
            let body = jsonrpc::encode_notification(methods::CANCELLED, Some(&params));
            self.post(ExKind::Notify, body);
        }
    }

    /// POSTs a notification or an answer on the established session.
    fn post(&mut self, kind: ExKind, body: Bytes) {
        let Some(session) = self.life.ready() else {
            return;
        };
        let headers = session.headers.post(None);
        self.exchanges.open(
            kind,
            HttpMethod::Post,
            HttpPurpose::Notify,
            headers,
            Some(body),
            session,
        );
    }

    /// Sends the app's notifications held while the session was not ready, or while as many as
    /// the bound were being POSTed.
    pub(super) fn flush_notifications(&mut self) {
        while self.life.ready().is_some() && self.exchanges.may_notify() {
            let Some(body) = self.notifications.pop_front() else {
                break;
            };
            self.post(ExKind::Notify, body);
        }
    }

    /// Holds a notification until it can be POSTed (bounded).
    fn queue_notification(&mut self, body: Bytes) {
        if self.notifications.len() < MAX_QUEUED_NOTIFICATIONS {
            self.notifications.push_back(body);
        } else {
            warn!("notification dropped: too many queued");
        }
    }

    /// Sends queued answers while slots are free.
    pub(super) fn flush_answers(&mut self) {
        while self.life.ready().is_some() {
            let Some(body) = self.exchanges.next_answer() else {
                break;
            };
            self.post(ExKind::Answer, body);
        }
    }
}
