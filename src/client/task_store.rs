//! [`TaskStore`]: where the ids of durable calls (tasks) were kept while they run, so an agent
//! that crashes can pick its tasks up again ([`Client::resume_task`](super::Client::resume_task)).
//!
//! Deprecated: the [ledger](super::ledger) records every call in flight, tasks included, and
//! [`Client::recover`](super::Client::recover) polls them again. To migrate, give the
//! builder a durable ledger instead of a task store, and call `recover` at start instead of
//! reading [`TaskStore::pending`] and calling `resume_task` for each; a store set with the
//! deprecated `ClientBuilder::task_store` is still told of every task, as before, so both can
//! run side by side while the tasks an older version stored drain.
#![allow(deprecated)]

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::http::redacted_url;

/// A task a call became, as stored.
#[deprecated(
    since = "0.1.0",
    note = "the ledger records tasks: see `mcp_resume::client::ledger` and `Client::recover`"
)]
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoredTask {
    /// The server's task id.
    pub task_id: String,
    /// The endpoint it was created on (the whole URL, query included: `Debug` leaves out
    /// what may carry credentials).
    pub endpoint: String,
}

impl StoredTask {
    /// A task as a durable [`TaskStore`] reads it back.
    pub fn new(task_id: impl Into<String>, endpoint: impl Into<String>) -> Self {
        StoredTask {
            task_id: task_id.into(),
            endpoint: endpoint.into(),
        }
    }
}

impl std::fmt::Debug for StoredTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredTask")
            .field("task_id", &self.task_id)
            .field("endpoint", &redacted_url(&self.endpoint))
            .finish()
    }
}

/// Keeps the ids of the tasks in flight. The client records a task before it polls it the
/// first time and forgets it once the task ended; an implementation that writes to durable
/// storage lets an agent resume its tasks after a restart.
///
/// Calls are made outside the session's lock, from the exchange runner or the task whose
/// input led to them: keep them quick (hand slow I/O to a task of your own), and do not call
/// the client from them.
#[deprecated(
    since = "0.1.0",
    note = "the ledger records tasks: see `mcp_resume::client::ledger` and `Client::recover`"
)]
pub trait TaskStore: Send + Sync + 'static {
    /// A call became a task.
    fn created(&self, task: StoredTask);
    /// The task ended (or the call was given up): it need not be kept.
    fn finished(&self, task_id: &str);
    /// The tasks recorded and not finished.
    fn pending(&self) -> Vec<StoredTask>;
}

/// A [`TaskStore`] in memory, for the life of the process.
#[deprecated(
    since = "0.1.0",
    note = "the ledger records tasks: see `mcp_resume::client::ledger` and `Client::recover`"
)]
#[derive(Debug, Default)]
pub struct InMemoryTaskStore {
    tasks: Mutex<BTreeMap<String, StoredTask>>,
}

impl InMemoryTaskStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, StoredTask>> {
        match self.tasks.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

impl TaskStore for InMemoryTaskStore {
    fn created(&self, task: StoredTask) {
        self.lock().insert(task.task_id.clone(), task);
    }

    fn finished(&self, task_id: &str) {
        self.lock().remove(task_id);
    }

    fn pending(&self) -> Vec<StoredTask> {
        self.lock().values().cloned().collect()
    }
}
