//! The call table: every call the app is waiting on, the JSON-RPC ids and progress tokens
//! that lead back to it, and each call's recovery state.

use std::collections::HashMap;

use rustc_hash::FxHashMap;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use super::cursors::Cursor;
use crate::error::Error;
use crate::ids::{CapabilityHash, IdempotencyKey, RequestId};
use crate::proto::{CallId, HttpId};

/// Earlier sends of one call remembered for its cancellation: re-sends are bounded by the
/// reconnect policy's attempts, but progress resets that count.
pub(super) const MAX_EARLIER_SENDS: usize = 16;

/// An MRTR round in progress: the server's inputs still unanswered and what to send back.
#[derive(Debug, Default)]
pub(super) struct InputRound {
    /// Rounds so far, this one included.
    pub(super) round: u32,
    /// `requestState`, echoed unchanged.
    pub(super) state: Option<String>,
    /// Inputs not answered yet.
    pub(super) pending: usize,
    /// `inputResponses` so far.
    pub(super) responses: Map<String, Value>,
    /// The call's own idempotency key: each round's key derives from it.
    pub(super) base_key: Option<IdempotencyKey>,
}

/// A call that became a task.
#[derive(Debug, Clone)]
pub(super) struct TaskState {
    pub(super) task_id: String,
    /// The server's suggested interval between polls.
    pub(super) poll: Option<Duration>,
    /// Input keys already answered (a task may list them again until it sees the answer).
    pub(super) answered: Vec<String>,
    /// Times the task asked for fresh input, bounded by `MAX_INPUT_ROUNDS`.
    pub(super) input_rounds: u32,
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
    pub(super) method: String,
    pub(super) params: Option<Value>,
    pub(super) key: Option<IdempotencyKey>,
    pub(super) deadline: Instant,
    pub(super) state: CallState,
    /// The JSON-RPC id of its last send.
    pub(super) rpc: Option<RequestId>,
    /// The ids of its earlier sends on the session of its last one that may still be running
    /// (a keyed call re-sent after an interruption): a cancellation names them too.
    pub(super) earlier: Vec<RequestId>,
    /// The session generation of its last send.
    pub(super) generation: u64,
    /// The capability hash its answers must carry (extension on), from its last send.
    pub(super) hash: Option<CapabilityHash>,
    /// The session of its last send deduplicates keyed calls.
    pub(super) server_dedups: bool,
    /// Its response stream's cursor.
    pub(super) cursor: Cursor,
    /// Consecutive failed attempts to reach the server.
    pub(super) attempts: u32,
    /// Resumes in a row that delivered nothing new.
    pub(super) no_progress: u32,
    /// It may be running on the server (it was sent, and nothing proves otherwise).
    pub(super) may_have_run: bool,
    pub(super) sends: u32,
    /// What explains the last failure, for the error the call may end with.
    pub(super) cause: Option<Error>,
    /// `params._meta.progressToken`, when the call asked for progress.
    pub(super) progress_token: Option<RequestId>,
    /// A request the session makes for itself, serving this call (never reported to the
    /// app).
    pub(super) internal: Option<CallId>,
    /// The tool list was fetched again for this call after a header mismatch.
    pub(super) refreshed: bool,
    /// The MRTR round in progress (modern era).
    pub(super) input: Option<InputRound>,
    /// The task the call became (tasks extension): it is polled, not re-sent.
    pub(super) task: Option<TaskState>,
    /// Task inputs still waiting for the app's answer.
    pub(super) task_inputs: usize,
}

impl Call {
    /// A call not sent yet.
    pub(super) fn new(
        method: String,
        params: Option<Value>,
        key: Option<IdempotencyKey>,
        deadline: Instant,
    ) -> Self {
        Call {
            method,
            params,
            key,
            deadline,
            state: CallState::Waiting,
            rpc: None,
            earlier: Vec::new(),
            generation: 0,
            hash: None,
            server_dedups: false,
            cursor: Cursor::default(),
            attempts: 0,
            no_progress: 0,
            may_have_run: false,
            sends: 0,
            cause: None,
            progress_token: None,
            internal: None,
            refreshed: false,
            input: None,
            task: None,
            task_inputs: 0,
        }
    }
}

/// The call table.
#[derive(Debug, Default)]
pub(super) struct Calls {
    /// A hash map, not an ordered one: a `Call` is large, and an ordered map's nodes shift
    /// their neighbours' values on every insert and remove. The few walks that need
    /// submission order sort the ids (they are issued in increasing order). Keyed by ids
    /// this session issued: a fast hash is safe.
    map: FxHashMap<CallId, Call>,
    /// Keyed by the ids this session issued (a server can look up, never insert): a fast
    /// hash is safe here.
    by_rpc: FxHashMap<RequestId, CallId>,
    by_token: HashMap<RequestId, CallId>,
    /// MRTR inputs awaiting the app's answer: the call and the server's key for each.
    by_input: HashMap<RequestId, (CallId, String)>,
    next_rpc: i64,
}

impl Calls {
    /// A fresh JSON-RPC id: never reused, so a late answer can never match a newer request.
    pub(super) fn new_rpc(&mut self) -> RequestId {
        self.next_rpc += 1;
        RequestId::Number(self.next_rpc)
    }

    /// Whether `id` is one this session sent at some point.
    pub(super) fn was_issued(&self, id: &RequestId) -> bool {
        matches!(id, RequestId::Number(n) if *n >= 1 && *n <= self.next_rpc)
    }

    pub(super) fn insert(&mut self, id: CallId, call: Call) {
        if let Some(token) = &call.progress_token {
            self.by_token.insert(token.clone(), id);
        }
        self.map.insert(id, call);
    }

    pub(super) fn get(&self, id: CallId) -> Option<&Call> {
        self.map.get(&id)
    }

    pub(super) fn get_mut(&mut self, id: CallId) -> Option<&mut Call> {
        self.map.get_mut(&id)
    }

    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    /// Every call id, in submission order.
    pub(super) fn ids(&self) -> Vec<CallId> {
        let mut ids: Vec<CallId> = self.map.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// The calls waiting for the session, in submission order.
    pub(super) fn waiting(&self) -> Vec<CallId> {
        let mut ids: Vec<CallId> = self
            .map
            .iter()
            .filter(|(_, c)| c.state == CallState::Waiting)
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Gives `id` the JSON-RPC id of its new send.
    pub(super) fn assign_rpc(&mut self, id: CallId, rpc: RequestId) {
        let Some(call) = self.map.get_mut(&id) else {
            return;
        };
        if let Some(old) = call.rpc.replace(rpc.clone()) {
            self.by_rpc.remove(&old);
        }
        self.by_rpc.insert(rpc, id);
    }

    /// The call a response id answers.
    pub(super) fn by_rpc(&self, rpc: &RequestId) -> Option<CallId> {
        self.by_rpc.get(rpc).copied()
    }

    /// The call a progress token belongs to.
    pub(super) fn by_progress_token(&self, token: &RequestId) -> Option<CallId> {
        self.by_token.get(token).copied()
    }

    /// Records an MRTR input of `call` the app is asked to answer under `id`.
    pub(super) fn register_input(&mut self, id: RequestId, call: CallId, key: String) {
        self.by_input.insert(id, (call, key));
    }

    /// Whether `id` names an input awaiting its answer.
    pub(super) fn has_input(&self, id: &RequestId) -> bool {
        self.by_input.contains_key(id)
    }

    /// The call and key an input answer belongs to, forgetting it.
    pub(super) fn take_input(&mut self, id: &RequestId) -> Option<(CallId, String)> {
        self.by_input.remove(id)
    }

    /// Removes a call and every index that leads to it.
    pub(super) fn remove(&mut self, id: CallId) -> Option<Call> {
        let call = self.map.remove(&id)?;
        if let Some(rpc) = &call.rpc {
            self.by_rpc.remove(rpc);
        }
        if let Some(token) = &call.progress_token {
            if self.by_token.get(token) == Some(&id) {
                self.by_token.remove(token);
            }
        }
        // An MRTR round's inputs, or a task's: the app's late answers must find nothing.
        if call.input.is_some() || call.task_inputs > 0 {
            self.by_input.retain(|_, (c, _)| *c != id);
        }
        Some(call)
    }
}
