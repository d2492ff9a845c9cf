//! The call table: every call the app is waiting on, the JSON-RPC ids and progress tokens
//! that lead back to it, and each call's recovery state.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use serde_json::Value;

use super::cursors::Cursor;
use crate::error::Error;
use crate::ids::{CapabilityHash, IdempotencyKey, RequestId};
use crate::proto::{CallId, HttpId};

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
            CallState::Waiting | CallState::Backoff(_) => None,
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
}

/// The call table.
#[derive(Debug, Default)]
pub(super) struct Calls {
    map: BTreeMap<CallId, Call>,
    by_rpc: HashMap<RequestId, CallId>,
    by_token: HashMap<RequestId, CallId>,
    next_call: u64,
    next_rpc: i64,
}

impl Calls {
    pub(super) fn new_id(&mut self) -> CallId {
        self.next_call += 1;
        CallId(self.next_call)
    }

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

    pub(super) fn contains(&self, id: CallId) -> bool {
        self.map.contains_key(&id)
    }

    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    /// Every call id, in submission order.
    pub(super) fn ids(&self) -> Vec<CallId> {
        self.map.keys().copied().collect()
    }

    /// The calls waiting for the session, in submission order.
    pub(super) fn waiting(&self) -> Vec<CallId> {
        self.map
            .iter()
            .filter(|(_, c)| c.state == CallState::Waiting)
            .map(|(id, _)| *id)
            .collect()
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
        Some(call)
    }
}
