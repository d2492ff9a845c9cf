//! One call: what the app asked for, where it stands, and what its sends so far prove. The
//! record's fields are private: every change goes through a method named for what happened
//! (a send, a failed attempt, progress on its stream, a new MRTR round, a task), so the rules
//! that keep a call's facts consistent live here once. [`Calls`] is the table of them.
//!
//! What drives a call past its first answer is here too, beside the state it changes:
//! `modern`, a modern call's rounds of input and its task, and `checkpoints`, a call's
//! durable state and a call picked up from one. The methods of the record that only they
//! use (a round's, a task's, a checkpoint's) stay private to this module.

mod attempt;
mod checkpoints;
mod modern;
mod table;

use self::attempt::Attempt;
pub(super) use self::table::Calls;

use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::cursors::{Cursor, Delivered, Observed};
use crate::error::Error;
use crate::ids::{CapabilityHash, EventId, IdempotencyKey, RequestId, SequencedEventId, SessionId};
use crate::policy::ReconnectPolicy;
use crate::proto::checkpoint::{CallStage, Checkpoint};
use crate::proto::config::ResendPolicy;
use crate::proto::decide::State;
use crate::proto::limits::MAX_INPUT_ROUNDS;
use crate::proto::{methods, CallId, Era, HttpId};
use crate::sse::SseEvent;

/// An MRTR round in progress: the server's inputs still unanswered and what to send back.
#[derive(Debug, Default)]
struct InputRound {
    /// Rounds so far, this one included.
    round: u32,
    /// `requestState`, echoed unchanged.
    state: Option<String>,
    /// Inputs not answered yet.
    pending: usize,
    /// `inputResponses` so far.
    responses: Map<String, Value>,
    /// The call's own idempotency key: each round's key derives from it.
    base_key: Option<IdempotencyKey>,
    /// What the server asked, kept for the call's checkpoints (only when the session makes
    /// them).
    requests: Option<Map<String, Value>>,
}

/// Why a picked-up call that may have run cannot be sent again: the process that sent it
/// stopped before its answer came, and no key the server kept makes a second send safe.
const SENDER_STOPPED: &str = "the process that sent it stopped before its answer came";

/// Why a picked-up call under a reserved key is not re-sent ([`Call::resends_reserved_key`]).
pub(super) const RESERVED_KEY: &str = "the process that sent it stopped before its answer came, \
     and its idempotency key ends in .round<n>, reserved for the rounds of multi-round calls";

/// Times an answer to a task's input is sent again when the task keeps asking for it (its
/// `tasks/update` may have been lost on the way, or refused by a replica that had not yet
/// seen the task ask).
const MAX_UPDATE_RESENDS: u8 = 2;

/// A task's input the app answered.
#[derive(Debug, Clone)]
struct AnsweredInput {
    key: String,
    value: Value,
    resends: u8,
}

/// What a task's `input_required` asks of the client.
#[derive(Debug, Default)]
struct TaskAsks {
    /// Inputs not answered yet: for the app.
    fresh: Vec<(String, Value)>,
    /// Answers to send again (bounded): the task still lists their inputs.
    again: Vec<(String, Value)>,
}

/// A `tasks/update` or `tasks/cancel` waiting for the session to be ready (the session holds
/// them; `modern` makes, sends and drops them).
#[derive(Debug)]
pub(super) struct HeldTaskMessage {
    method: &'static str,
    params: Value,
    /// The call whose task it ends, told to the app once it is sent.
    finishes: Option<(CallId, String)>,
}

/// A call that became a task: its state is the call's, changed through the call's methods.
#[derive(Debug, Clone)]
struct TaskState {
    task_id: String,
    /// The server's suggested interval between polls.
    poll: Option<Duration>,
    /// Inputs already answered, with the answer sent (a task may list them again until it
    /// sees the answer).
    answered: Vec<AnsweredInput>,
    /// Times the task asked for fresh input, bounded by `MAX_INPUT_ROUNDS`.
    input_rounds: u32,
}

impl TaskState {
    /// Task `task_id`, not polled yet.
    fn new(task_id: String) -> Self {
        TaskState {
            task_id,
            poll: None,
            answered: Vec::new(),
            input_rounds: 0,
        }
    }

    /// The task asks for `requests`: those not answered yet make one more round of input
    /// when there are any; those answered already have their answers sent again, a bounded
    /// number of times. `None` once the task asked more than `MAX_INPUT_ROUNDS` times (the
    /// bound of an MRTR call's rounds too).
    fn ask(&mut self, requests: Map<String, Value>) -> Option<TaskAsks> {
        let mut asks = TaskAsks::default();
        for (key, request) in requests {
            match self.answered.iter_mut().find(|a| a.key == key) {
                None => asks.fresh.push((key, request)),
                Some(answered) if answered.resends < MAX_UPDATE_RESENDS => {
                    answered.resends += 1;
                    asks.again.push((key, answered.value.clone()));
                }
                Some(_) => {}
            }
        }
        if !asks.fresh.is_empty() {
            self.input_rounds += 1;
            if self.input_rounds > MAX_INPUT_ROUNDS {
                return None;
            }
        }
        Some(asks)
    }
}

/// What a waiting call does when its backoff ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Retry {
    /// POST it again (new JSON-RPC id, same idempotency key).
    Resend,
    /// GET its stream with `Last-Event-ID`.
    Resume,
}

/// Where a call stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CallState {
    /// Waits for the session to be ready, then is POSTed.
    Waiting,
    /// Waits for the application's answers to the server's inputs (an MRTR round, or a
    /// task's): nothing is sent for it until they are all in, whatever happens to the
    /// session meanwhile (a re-initialization sends only `Waiting` calls).
    AwaitingInput,
    /// Waits out a backoff (its timer is armed), then retries.
    Backoff(Retry),
    /// Its POST is in flight.
    Posting(HttpId),
    /// Its resume GET is in flight.
    Resuming(HttpId),
}

impl CallState {
    /// The exchange the call is on, if any.
    pub(super) fn exchange(self) -> Option<HttpId> {
        match self {
            CallState::Posting(http) | CallState::Resuming(http) => Some(http),
            CallState::Waiting | CallState::AwaitingInput | CallState::Backoff(_) => None,
        }
    }
}

/// One call.
#[derive(Debug)]
pub(super) struct Call {
    method: String,
    params: Option<Value>,
    key: Option<IdempotencyKey>,
    deadline: Instant,
    state: CallState,
    /// What its sends so far proved: their ids, session, context.
    attempt: Attempt,
    /// Its response stream's cursor.
    cursor: Cursor,
    /// Consecutive failed attempts to reach the server.
    attempts: u32,
    /// Resumes in a row that delivered nothing new.
    no_progress: u32,
    /// Sends of its current request refused because its key's first execution still runs.
    busy_refusals: u32,
    /// A bare event id on its own POST stream (a priming event) once reset `attempts`.
    primed: bool,
    /// It may be running on the server (it was sent, and nothing proves otherwise).
    may_have_run: bool,
    /// A send before the latest of its current request may have run. Sticky: what proves a
    /// later send never ran (a 404, a refusal) says nothing of an earlier one.
    ran_before: bool,
    /// Sends of its current request (a new MRTR round starts over).
    sends: u32,
    /// What explains the last failure, for the error the call may end with.
    cause: Option<Error>,
    /// `params._meta.progressToken`, when the call asked for progress.
    progress_token: Option<RequestId>,
    /// A request the session makes for itself, serving this call (never reported to the
    /// app).
    internal: Option<CallId>,
    /// The tool list was fetched again for this call after a header mismatch.
    refreshed: bool,
    /// The MRTR round in progress (modern era).
    input: Option<InputRound>,
    /// The task the call became (tasks extension): it is polled, not re-sent.
    task: Option<TaskState>,
    /// Task inputs still waiting for the app's answer.
    task_inputs: usize,
    /// Picked up from another process's checkpoint with its request possibly on the server:
    /// its first send here must be provably safe.
    picked_up: bool,
}

impl Call {
    /// A call not sent yet.
    pub(super) fn new(
        method: String,
        params: Option<Value>,
        key: Option<IdempotencyKey>,
        deadline: Instant,
    ) -> Self {
        let progress_token = params
            .as_ref()
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get("progressToken"))
            .and_then(RequestId::from_json);
        Call {
            method,
            params,
            key,
            deadline,
            state: CallState::Waiting,
            attempt: Attempt::default(),
            cursor: Cursor::default(),
            attempts: 0,
            busy_refusals: 0,
            primed: false,
            no_progress: 0,
            may_have_run: false,
            ran_before: false,
            sends: 0,
            cause: None,
            progress_token,
            internal: None,
            refreshed: false,
            input: None,
            task: None,
            task_inputs: 0,
            picked_up: false,
        }
    }

    /// The call `checkpoint` describes, picked up from another process: a request that may be
    /// on the server (its first send here must be safe), a round awaiting its inputs (asked
    /// again by [`Call::await_round`]), or a task to poll.
    fn picked_up(checkpoint: Checkpoint, deadline: Instant) -> Self {
        let Checkpoint {
            method,
            params,
            idempotency_key: base,
            stage,
            server_dedups,
            ..
        } = checkpoint;
        // The round the call's last request belonged to: its key, and what the next
        // `input_required` counts from.
        let (last_round, picked_up, task) = match stage {
            CallStage::Sent { round } => (round, true, None),
            CallStage::AwaitingInput { round, .. } => (round.saturating_sub(1), false, None),
            CallStage::Task { task_id } => (0, false, Some(TaskState::new(task_id))),
        };
        let key = match (&base, last_round) {
            (Some(base), round) if round > 0 => Some(round_key(base, round)),
            _ => base.clone(),
        };
        let input = (last_round > 0).then(|| InputRound {
            round: last_round,
            base_key: base,
            ..InputRound::default()
        });
        Call {
            input,
            task,
            picked_up,
            // What the send the other process made proves: whether its server kept the key.
            attempt: Attempt::recorded(server_dedups),
            ..Call::new(method, params, key, deadline)
        }
    }

    // ---- what it is ----------------------------------------------------------------------

    pub(super) fn method(&self) -> &str {
        &self.method
    }

    pub(super) fn key(&self) -> Option<&IdempotencyKey> {
        self.key.as_ref()
    }

    pub(super) fn deadline(&self) -> Instant {
        self.deadline
    }

    fn progress_token(&self) -> Option<&RequestId> {
        self.progress_token.as_ref()
    }

    /// The call it serves, when the session made it for itself.
    pub(super) fn serves(&self) -> Option<CallId> {
        self.internal
    }

    /// The id of the task it became, if it did (a task is polled, never re-sent).
    pub(super) fn task_id(&self) -> Option<&str> {
        self.task.as_ref().map(|t| t.task_id.as_str())
    }

    /// Whether its current request is an MRTR round's or a task's input it waits for.
    fn has_inputs(&self) -> bool {
        self.input.is_some() || self.task_inputs > 0
    }

    /// The MRTR rounds so far.
    pub(super) fn rounds(&self) -> u32 {
        self.input.as_ref().map_or(0, |r| r.round)
    }

    fn refreshed(&self) -> bool {
        self.refreshed
    }

    /// Whether its next send repeats a request that went out before, here or from the process
    /// it was picked up from (a task's poll repeats nothing).
    pub(super) fn sends_again(&self) -> bool {
        (self.sends > 0 || self.picked_up) && self.task.is_none()
    }

    /// Its durable state, as of now (see [`crate::proto::checkpoint`]).
    fn checkpoint(&self, era: Option<Era>, session_id: Option<SessionId>) -> Checkpoint {
        let stage = match (&self.task, &self.input) {
            (Some(task), _) => CallStage::Task {
                task_id: task.task_id.clone(),
            },
            (None, Some(round)) if self.state == CallState::AwaitingInput => {
                CallStage::AwaitingInput {
                    round: round.round,
                    request_state: round.state.clone(),
                    input_requests: round.requests.clone().unwrap_or_default(),
                }
            }
            (None, round) => CallStage::Sent {
                round: round.as_ref().map_or(0, |r| r.round),
            },
        };
        let base = match &self.input {
            Some(round) => round.base_key.clone(),
            None => self.key.clone(),
        };
        Checkpoint {
            method: self.method.clone(),
            params: self.params.clone(),
            idempotency_key: base,
            stage,
            era,
            session_id,
            last_event_id: self.cursor.last.clone(),
            server_dedups: self.attempt.server_dedups(),
            deadline: self.deadline,
        }
    }

    /// The capability hash its answers must carry, from its last send.
    pub(super) fn expected_hash(&self) -> Option<&CapabilityHash> {
        self.attempt.hash()
    }

    // ---- where it stands -----------------------------------------------------------------

    pub(super) fn state(&self) -> CallState {
        self.state
    }

    /// Waits for the session (ready again, or re-established), then is sent.
    pub(super) fn wait(&mut self) {
        self.state = CallState::Waiting;
    }

    /// Waits out a backoff, then `then`; returns how long: `reconnect`'s delay for the
    /// attempts failed so far (`random` for its jitter), never under the server's `retry`.
    pub(super) fn back_off(
        &mut self,
        then: Retry,
        reconnect: &ReconnectPolicy,
        random: u64,
    ) -> Duration {
        self.state = CallState::Backoff(then);
        // Refusals of a busy key grow the wait as failures do: the refusal's own events reset
        // `attempts`, not them.
        let waited = self.attempts.saturating_add(self.busy_refusals);
        reconnect.delay(waited.saturating_sub(1), random, self.cursor.retry)
    }

    /// Its resume GET is in flight.
    pub(super) fn resume_on(&mut self, http: HttpId) {
        self.state = CallState::Resuming(http);
    }

    /// Leaves the exchange it is on, if any, and waits: returns that exchange.
    pub(super) fn leave_exchange(&mut self) -> Option<HttpId> {
        let http = self.state.exchange()?;
        self.state = CallState::Waiting;
        Some(http)
    }

    // ---- what its sends prove ------------------------------------------------------------

    pub(super) fn attempt(&self) -> &Attempt {
        &self.attempt
    }

    pub(super) fn sends(&self) -> u32 {
        self.sends
    }

    /// Why sending it now could run it a second time, when it could: an earlier send of this
    /// request (here, or in the process it was picked up from) may have run, and no key the
    /// server deduplicates makes another harmless. `dedups`: whether the session it would go
    /// out on deduplicates keyed calls (or the policy assumes so), which may not be the session
    /// whose answer the decision to re-send it was taken on.
    pub(super) fn repeat_risk(&self, dedups: bool) -> Option<&'static str> {
        let earlier_may_have_run = self.picked_up
            || (self.task.is_none() && (self.ran_before || (self.sends > 0 && self.may_have_run)));
        // A send another process made counts only where its own server kept the key (in this
        // process, `resend_safe` asks the same of the last send before any re-send).
        let key_held = self.key.is_some() && (!self.picked_up || self.attempt.server_dedups());
        if !earlier_may_have_run || (key_held && dedups) {
            return None;
        }
        Some(if self.picked_up {
            SENDER_STOPPED
        } else {
            "it may have run, and the session it would be re-sent on does not deduplicate keyed calls"
        })
    }

    /// Whether any send of it may have run (or a task it became runs): what a failure that
    /// ends it without the server's answer must say.
    pub(super) fn may_have_run(&self) -> bool {
        // An MRTR round under way means the server answered an earlier one: a new round
        // forgets its predecessor's sends (whether to re-send is the current request's
        // question), not that they reached the server.
        self.picked_up
            || self.ran_before
            || self.may_have_run
            || self.task.is_some()
            || self.rounds() > 0
    }

    /// Whether its next send would re-send, under the app's own key, a request another
    /// process left in flight keyed with a key ending in `.round<n>` (which an older release
    /// accepted; [`Session::submit`](crate::proto::Session::submit) refuses it now). A server
    /// deduplicating keys could take it for a round of another call and answer with that
    /// round's result. Its own rounds' keys derive from the key, so never collide.
    pub(super) fn resends_reserved_key(&self) -> bool {
        self.picked_up && self.rounds() == 0 && self.key.as_ref().is_some_and(is_round_key)
    }

    /// Whether a send before its latest may have run, here or in the process it was picked
    /// up from: what proves the latest send never ran (a refusal, even one the server wrote
    /// as a JSON-RPC error) says nothing of those.
    pub(super) fn ran_earlier(&self) -> bool {
        self.picked_up || self.ran_before
    }

    /// Something proves its last send never ran (it never left, or the server refused it
    /// unprocessed).
    pub(super) fn not_run(&mut self) {
        self.may_have_run = false;
    }

    /// The JSON-RPC ids it may be running under on its session: a cancellation names them
    /// all.
    pub(super) fn running_ids(&self) -> impl Iterator<Item = &RequestId> {
        let latest = self.attempt.rpc().filter(|_| self.may_have_run);
        self.attempt.earlier().chain(latest)
    }

    /// The request its next send puts on the wire, as its method and params (for a task,
    /// `tasks/get`), and the idempotency key it carries, if keyed. The params are taken out
    /// of the call until [`Call::sent`] puts them back.
    pub(super) fn outgoing(&mut self) -> (&str, Option<Value>, Option<&IdempotencyKey>) {
        if let Some(task) = &self.task {
            let poll = json!({ "taskId": task.task_id });
            return (methods::TASKS_GET, Some(poll), None);
        }
        let params = self.params.take().unwrap_or_else(|| json!({}));
        (&self.method, Some(params), self.key.as_ref())
    }

    /// Its request went out as `attempt`, on `http`, with `params` (what
    /// [`Call::outgoing`] took, back): a new stream, and the call may be running now.
    fn sent(&mut self, attempt: Attempt, params: Option<Value>, http: HttpId) {
        if self.task.is_none() {
            self.params = params;
        }
        // What may have run before this send stays so, whatever this one meets.
        self.ran_before |= self.picked_up || self.may_have_run;
        self.picked_up = false;
        let may_have_run = self.may_have_run;
        self.attempt
            .follow(attempt, may_have_run && self.task.is_none());
        self.cursor = Cursor::default();
        self.no_progress = 0;
        self.may_have_run = true;
        self.sends += 1;
        self.cause = None;
        self.state = CallState::Posting(http);
    }

    // ---- failures and progress -----------------------------------------------------------

    /// Another attempt failed: `state`, the facts of the decision on it, with the call's own
    /// (attempts failed in a row, resumes that made no progress). `busy`: the server refused
    /// it because its key's first execution still runs; the server was reached, so it is not
    /// a failed attempt (the call waits it out, to its deadline), but its backoff grows.
    pub(super) fn failed(&mut self, state: State, busy: bool) -> State {
        if busy {
            self.busy_refusals = self.busy_refusals.saturating_add(1);
        } else {
            self.attempts = self.attempts.saturating_add(1);
        }
        state
            .attempts(self.attempts)
            .without_progress(self.no_progress)
    }

    /// Whether sending it again cannot run it twice: a task's poll (`tasks/get` reads and
    /// never runs anything), or a keyed call to a server that deduplicates keyed calls (as
    /// its session advertised, or as `policy` assumes).
    pub(super) fn resend_safe(&self, policy: ResendPolicy) -> bool {
        self.task.is_some() || self.key_deduplicated(policy)
    }

    /// Whether its key is one the server deduplicates (as its session advertised, or as
    /// `policy` assumes): the server's refusals of the key are then read as such.
    pub(super) fn key_deduplicated(&self, policy: ResendPolicy) -> bool {
        self.key.is_some()
            && (self.attempt.server_dedups() || policy == ResendPolicy::AssumeServerDeduplicates)
    }

    /// A resume ended: it made progress (the count starts over) or not.
    pub(super) fn resumed(&mut self, progress: bool) {
        self.no_progress = if progress {
            0
        } else {
            self.no_progress.saturating_add(1)
        };
    }

    /// Why it may fail, kept for the error it ends with.
    pub(super) fn set_cause(&mut self, cause: Error) {
        self.cause = Some(cause);
    }

    pub(super) fn take_cause(&mut self) -> Option<Error> {
        self.cause.take()
    }

    // ---- its stream ----------------------------------------------------------------------

    /// One event of its stream: the cursor moves, and progress proves the server reachable.
    pub(super) fn observe(
        &mut self,
        event: &SseEvent,
        expect: Option<&mut Option<SequencedEventId>>,
        delivered: &mut Delivered,
        replay: bool,
    ) -> Observed {
        let observed = self.cursor.observe(event, expect, delivered, replay);
        // Only progress proves the server is reachable and the stream alive; a head alone
        // does not (a replaying instance answers 200 too). A bare event id on the request's
        // own stream (a priming event) proves the POST reached a server, so the failures
        // before it are no longer in a row and the stream it primed is resumed; but not that
        // what follows can be had: only the call's first one counts, or a cluster that
        // primes every POST and refuses every resume would have the call re-initialized and
        // re-sent without end.
        let progressed = matches!(observed, Observed::New { progressed: true });
        let priming = !replay && event.data.is_empty();
        if progressed && !(priming && std::mem::replace(&mut self.primed, true)) {
            self.attempts = 0;
        }
        observed
    }

    /// The id a resume presents as `Last-Event-ID`.
    pub(super) fn last_event_id(&self) -> Option<&EventId> {
        self.cursor.last.as_ref()
    }

    /// The server's `retry`, or a `Retry-After`: the floor of the next reconnect's delay.
    pub(super) fn set_retry_hint(&mut self, retry: Option<Duration>) {
        self.cursor.retry = retry;
    }

    // ---- MRTR rounds and tasks -----------------------------------------------------------

    /// An `input_required` answer opened round `round` with `pending` inputs; nothing is sent
    /// until they are in. `requests` is what the server asked, kept for checkpoints.
    fn await_round(
        &mut self,
        round: u32,
        state: Option<String>,
        pending: usize,
        requests: Option<Map<String, Value>>,
    ) {
        let base_key = match self.input.take() {
            Some(previous) => previous.base_key,
            None => self.key.clone(),
        };
        self.state = CallState::AwaitingInput;
        self.input = Some(InputRound {
            round,
            state,
            pending,
            responses: Map::new(),
            base_key,
            requests,
        });
    }

    /// One of the round's inputs was answered.
    fn answer_input(&mut self, key: String, value: Value) {
        if let Some(round) = self.input.as_mut() {
            round.responses.insert(key, value);
            round.pending = round.pending.saturating_sub(1);
        }
    }

    /// Once every input of the round is answered, makes the call its next request:
    /// `inputResponses`, `requestState` echoed unchanged, and for a keyed call the round's own
    /// key (derived with [`round_key`], so re-sends of one round stay deduplicated); it waits
    /// to be sent, as a new request (no stream, no failures). `false` while inputs are missing,
    /// and for a call not awaiting its inputs: a round goes out once, and resetting the sends
    /// of one already out would hide that they may have run.
    fn next_round(&mut self) -> bool {
        if self.state != CallState::AwaitingInput {
            return false;
        }
        let Some(round) = self.input.as_mut() else {
            return false;
        };
        if round.pending > 0 {
            return false;
        }
        let responses = std::mem::take(&mut round.responses);
        round.requests = None;
        let state = round.state.clone();
        let key = round
            .base_key
            .as_ref()
            .map(|base| round_key(base, round.round));
        if let Value::Object(params) = self.params.get_or_insert_with(|| json!({})) {
            if responses.is_empty() {
                params.remove("inputResponses");
            } else {
                params.insert("inputResponses".to_owned(), Value::Object(responses));
            }
            match state {
                Some(state) => {
                    params.insert("requestState".to_owned(), Value::String(state));
                }
                None => {
                    params.remove("requestState");
                }
            }
        }
        if key.is_some() {
            self.key = key;
        }
        self.cursor = Cursor::default();
        self.attempts = 0;
        self.busy_refusals = 0;
        self.sends = 0;
        self.ran_before = false;
        // The previous round was answered: none of its sends still runs, so the new round's
        // first send repeats nothing and may be re-sent when it provably never ran.
        self.may_have_run = false;
        self.state = CallState::Waiting;
        true
    }

    /// The call was answered with task `task_id`: it is polled from now on.
    fn become_task(&mut self, task_id: String) {
        self.task = Some(TaskState::new(task_id));
    }

    /// The server suggests `interval` between polls of its task.
    fn suggest_poll(&mut self, interval: Duration) {
        if let Some(task) = self.task.as_mut() {
            task.poll = Some(interval);
        }
    }

    /// Its task asks for `requests`: returns those not answered yet; when there are any,
    /// nothing is polled until the app answers them. `None` once the task asked more than
    /// `MAX_INPUT_ROUNDS` times (the bound of an MRTR call's rounds too), or for a call that
    /// is no task.
    fn task_asks(&mut self, requests: Map<String, Value>) -> Option<TaskAsks> {
        let asks = self.task.as_mut()?.ask(requests)?;
        if !asks.fresh.is_empty() {
            self.state = CallState::AwaitingInput;
            self.task_inputs = asks.fresh.len();
        }
        Some(asks)
    }

    /// Its task's input `key` was answered with `value` (the task may list it again until
    /// it sees the answer); `true` once they all are.
    fn task_input_answered(&mut self, key: String, value: Value) -> bool {
        if let Some(task) = self.task.as_mut() {
            task.answered.push(AnsweredInput {
                key,
                value,
                resends: 0,
            });
        }
        self.task_inputs = self.task_inputs.saturating_sub(1);
        self.task_inputs == 0
    }

    /// The next poll of its task waits out `Retry::Resend`'s backoff, as a new request:
    /// returns how long, the server's suggested interval or else `default`.
    fn poll_later(&mut self, default: Duration) -> Duration {
        self.state = CallState::Backoff(Retry::Resend);
        self.attempts = 0;
        self.cursor = Cursor::default();
        self.task.as_ref().and_then(|t| t.poll).unwrap_or(default)
    }

    /// The tool list is fetched again for it (once per call; `own`: its id): returns the
    /// request that fetches it, one the session makes for itself on the call's behalf, by the
    /// call's deadline (never reported to the app).
    pub(super) fn refresh(&mut self, own: CallId) -> Call {
        self.refreshed = true;
        Call {
            internal: Some(own),
            ..Call::new(
                methods::TOOLS_LIST.to_owned(),
                Some(json!({})),
                None,
                self.deadline,
            )
        }
    }
}

/// The key of MRTR round `round` of a call keyed `base`: derived, so each round is its own
/// request to the server while re-sends of the same round carry the same key.
///
/// A base too long for the suffix is cut, and what was cut off is stood for by a digest of
/// the whole base: two bases that differ only past the cut stay two keys.
fn round_key(base: &IdempotencyKey, round: u32) -> IdempotencyKey {
    let suffix = format!(".round{round}");
    let mut text = base.as_str().to_owned();
    if text.len() + suffix.len() > 256 {
        // FNV-1a: stable across processes and releases (a picked-up call derives the same
        // key in another process), unlike the standard library's hashers.
        let digest = base
            .as_str()
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
            });
        let tail = format!("~{digest:016x}");
        text.truncate(256 - suffix.len() - tail.len());
        text.push_str(&tail);
    }
    text.push_str(&suffix);
    IdempotencyKey::new(text).unwrap_or_else(|_| base.clone())
}

/// Whether `key` ends as [`round_key`] ends every key it derives (`.round` and digits): such a
/// key is reserved, since an app's call under it could be taken by a deduplicating server for
/// a round of another call keyed with what precedes the suffix, and answered with its result.
pub(super) fn is_round_key(key: &IdempotencyKey) -> bool {
    key.as_str()
        .rsplit_once(".round")
        .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_ending_as_round_keys_are_reserved() {
        let key = |k: &str| IdempotencyKey::new(k).unwrap();
        assert!(is_round_key(&round_key(&key("order-7"), 1)));
        assert!(is_round_key(&round_key(&key(&"x".repeat(256)), 16)));
        assert!(is_round_key(&key("order-7.round12")));
        for free in [
            "order-7",
            "order-7.round",
            "order-7.roundup",
            "order-7.round1x",
        ] {
            assert!(!is_round_key(&key(free)), "{free}");
        }
    }

    #[test]
    fn round_keys_derive_from_the_base_and_stay_valid() {
        let base = IdempotencyKey::new("k-1").unwrap();
        assert_eq!(round_key(&base, 2).as_str(), "k-1.round2");
        assert_eq!(round_key(&base, 2), round_key(&base, 2));
        let long = IdempotencyKey::new("x".repeat(256)).unwrap();
        assert_eq!(round_key(&long, 16).as_str().len(), 256);
        // Two long bases that differ only where the suffix would not fit: two round keys.
        let other = IdempotencyKey::new(format!("{}y", "x".repeat(255))).unwrap();
        assert_ne!(round_key(&long, 1), round_key(&other, 1));
        assert_eq!(round_key(&other, 1), round_key(&other, 1));
    }
}
