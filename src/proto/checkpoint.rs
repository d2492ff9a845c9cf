//! Checkpoints: what a call's durable record must say for another process to pick the call
//! up after this one stops.
//!
//! With [`SessionConfig::checkpoints`](super::SessionConfig::checkpoints) on, the session
//! reports, as [`Output::Checkpoint`](super::Output::Checkpoint), each moment a call's
//! durable state changes: its request (or an MRTR round's) is about to leave, it waits for
//! the application's answers to a round's inputs, it became a task, its stream is being
//! resumed. A driver writes them down (the client's [ledger](crate::client::ledger)); a new
//! process hands each one it finds to [`Session::pick_up`](super::Session::pick_up), which
//! makes the call again by the one rule: re-send only what is provably safe.
//!
//! The order is the contract: a checkpoint whose stage is [`CallStage::Sent`] comes before
//! the call's POST it describes, and must be durable before that POST leaves. Then a record
//! that says a round is awaiting input proves the round was never sent, so a new process
//! may send it, keyed or not.

use std::time::Instant;

use serde_json::{Map, Value};

use super::config::Era;
use crate::ids::{EventId, IdempotencyKey, SessionId};

/// Where a call stands, from its durable record's point of view.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum CallStage {
    /// Its request (MRTR round `round`; `0` is the original request) is on its way to the
    /// server or may have reached it. Picked up, it is re-sent only under its idempotency key
    /// to a server that deduplicates keys; otherwise it ends
    /// [`ErrorKind::OutcomeUnknown`](crate::ErrorKind::OutcomeUnknown), never re-sent.
    Sent {
        /// Input rounds answered so far.
        round: u32,
    },
    /// The server answered `input_required`: the application's answers to round `round`'s
    /// inputs are awaited and nothing of the call is in flight. Picked up, the handlers are
    /// asked again and the round is sent (for the first time).
    AwaitingInput {
        /// The round the inputs are for (1 for the first `input_required`).
        round: u32,
        /// `requestState`, to be echoed unchanged.
        request_state: Option<String>,
        /// `inputRequests`: what the server asked, by key.
        input_requests: Map<String, Value>,
    },
    /// The call became a task (tasks extension): picked up, it is polled (`tasks/get`,
    /// read-only) until it ends.
    Task {
        /// The server's task id.
        task_id: String,
    },
}

impl CallStage {
    /// A stable name: `"sent"`, `"awaiting_input"` or `"task"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            CallStage::Sent { .. } => "sent",
            CallStage::AwaitingInput { .. } => "awaiting_input",
            CallStage::Task { .. } => "task",
        }
    }
}

/// One call's durable state: what a new process needs to make the call again.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Checkpoint {
    /// The JSON-RPC method.
    pub method: String,
    /// The params of its current request, idempotency key included where it travels (an
    /// MRTR round's carry `inputResponses` and `requestState`).
    pub params: Option<Value>,
    /// The call's own idempotency key; an MRTR round's key derives from it and the round.
    pub idempotency_key: Option<IdempotencyKey>,
    /// Where it stands.
    pub stage: CallStage,
    /// The era of the session it went out on, when known.
    pub era: Option<Era>,
    /// The session it went out on (legacy era). A credential of sorts: a driver writes it
    /// down only if the application asks for it.
    pub session_id: Option<SessionId>,
    /// Its response stream's cursor (legacy era), when it had one.
    pub last_event_id: Option<EventId>,
    /// The server its request went to deduplicates keyed calls: only then may a new process
    /// send it again under its key (a key a server ignored protects nothing, whatever the
    /// server a new process finds).
    pub server_dedups: bool,
    /// The call's deadline.
    pub deadline: Instant,
}

impl Checkpoint {
    /// A call of `method` with `params` about to be sent (stage [`CallStage::Sent`], round
    /// 0): what a record written by hand, or read back from storage, starts from.
    pub fn new(method: impl Into<String>, params: Option<Value>, deadline: Instant) -> Self {
        Checkpoint {
            method: method.into(),
            params,
            idempotency_key: None,
            stage: CallStage::Sent { round: 0 },
            era: None,
            session_id: None,
            last_event_id: None,
            server_dedups: false,
            deadline,
        }
    }

    /// The same checkpoint, sent to a server that deduplicates keyed calls (or not).
    pub fn with_server_dedups(mut self, dedups: bool) -> Self {
        self.server_dedups = dedups;
        self
    }

    /// The same checkpoint with the call's idempotency key.
    pub fn with_idempotency_key(mut self, key: Option<IdempotencyKey>) -> Self {
        self.idempotency_key = key;
        self
    }

    /// The same checkpoint at `stage`.
    pub fn with_stage(mut self, stage: CallStage) -> Self {
        self.stage = stage;
        self
    }
}

/// Whether calls of `method` change nothing on the server by the specification's own
/// definition (pings, lists, reads, completions, polls): those get no checkpoints, so a
/// restart has nothing of them to report.
pub fn is_read_only(method: &str) -> bool {
    matches!(
        method,
        "ping"
            | "tools/list"
            | "resources/list"
            | "resources/templates/list"
            | "resources/read"
            | "prompts/list"
            | "prompts/get"
            | "completion/complete"
            | "tasks/get"
            | "tasks/list"
            | "server/discover"
    )
}
