//! The call table: every call the app is waiting on, and the JSON-RPC ids, progress tokens
//! and MRTR inputs that lead back to it.

use std::collections::HashMap;

use rustc_hash::FxHashMap;
use serde_json::Value;

use super::{Attempt, Call, CallState};
use crate::ids::RequestId;
use crate::proto::session::negotiated::Negotiated;
use crate::proto::{CallId, HttpId};

/// The call table.
#[derive(Debug, Default)]
pub(in crate::proto::session) struct Calls {
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
    pub(in crate::proto::session) fn new_rpc(&mut self) -> RequestId {
        self.next_rpc += 1;
        RequestId::Number(self.next_rpc)
    }

    /// Whether `id` is one this session sent at some point.
    pub(in crate::proto::session) fn was_issued(&self, id: &RequestId) -> bool {
        matches!(id, RequestId::Number(n) if *n >= 1 && *n <= self.next_rpc)
    }

    pub(in crate::proto::session) fn insert(&mut self, id: CallId, call: Call) {
        if let Some(token) = call.progress_token() {
            self.by_token.insert(token.clone(), id);
        }
        self.map.insert(id, call);
    }

    pub(in crate::proto::session) fn get(&self, id: CallId) -> Option<&Call> {
        self.map.get(&id)
    }

    pub(in crate::proto::session) fn get_mut(&mut self, id: CallId) -> Option<&mut Call> {
        self.map.get_mut(&id)
    }

    pub(in crate::proto::session) fn len(&self) -> usize {
        self.map.len()
    }

    /// Every call id, in submission order.
    pub(in crate::proto::session) fn ids(&self) -> Vec<CallId> {
        let mut ids: Vec<CallId> = self.map.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// The calls waiting for the session, in submission order.
    pub(in crate::proto::session) fn waiting(&self) -> Vec<CallId> {
        let mut ids: Vec<CallId> = self
            .map
            .iter()
            .filter(|(_, c)| c.state() == CallState::Waiting)
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Call `id`'s request went out under `rpc` on `session`, on `http`, with `params` back
    /// ([`Call::sent`]); its new JSON-RPC id now leads to it, the old one no longer does.
    pub(in crate::proto::session) fn sent(
        &mut self,
        id: CallId,
        rpc: RequestId,
        session: &Negotiated,
        params: Option<Value>,
        http: HttpId,
    ) {
        let Some(call) = self.map.get_mut(&id) else {
            return;
        };
        let attempt = Attempt::on(rpc, session);
        if let Some(old) = call.attempt().rpc() {
            self.by_rpc.remove(old);
        }
        if let Some(rpc) = attempt.rpc() {
            self.by_rpc.insert(rpc.clone(), id);
        }
        call.sent(attempt, params, http);
    }

    /// The call a response id answers, which it no longer leads to: a request is answered
    /// once, and a second copy of its answer (replayed on another stream, say) must not
    /// act again on a call that moved on (an MRTR round sent twice, a task polled twice).
    pub(in crate::proto::session) fn answered(&mut self, rpc: &RequestId) -> Option<CallId> {
        self.by_rpc.remove(rpc)
    }

    /// The call a progress token belongs to.
    pub(in crate::proto::session) fn by_progress_token(&self, token: &RequestId) -> Option<CallId> {
        self.by_token.get(token).copied()
    }

    /// Records an MRTR input of `call` the app is asked to answer under `id`.
    pub(super) fn register_input(&mut self, id: RequestId, call: CallId, key: String) {
        self.by_input.insert(id, (call, key));
    }

    /// The call and key an input answer belongs to, forgetting it.
    pub(super) fn take_input(&mut self, id: &RequestId) -> Option<(CallId, String)> {
        self.by_input.remove(id)
    }

    /// Removes a call and every index that leads to it; with it, the ids of the inputs the
    /// app was asked for it and has not answered, in order.
    pub(in crate::proto::session) fn remove(
        &mut self,
        id: CallId,
    ) -> Option<(Call, Vec<RequestId>)> {
        let call = self.map.remove(&id)?;
        if let Some(rpc) = call.attempt().rpc() {
            self.by_rpc.remove(rpc);
        }
        if let Some(token) = call.progress_token() {
            if self.by_token.get(token) == Some(&id) {
                self.by_token.remove(token);
            }
        }
        // An MRTR round's inputs, or a task's: the app's late answers must find nothing.
        let mut unanswered = Vec::new();
        if call.has_inputs() {
            self.by_input.retain(|input, (c, _)| {
                let theirs = *c == id;
                if theirs {
                    unanswered.push(input.clone());
                }
                !theirs
            });
            unanswered.sort_unstable();
        }
        Some((call, unanswered))
    }
}
