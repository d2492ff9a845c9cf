//! What an input to the session leads to outside it, carried out once the session's lock is
//! released: the ledger's writes, the (deprecated) task store told of tasks, callers handed
//! their results, server requests handed to their handlers. Under the lock these are only
//! collected, so the lock covers the session's bookkeeping and never a store, a ledger or a
//! handler (only the `tracing` subscriber, for the events the bookkeeping logs), and a caller
//! woken by its result never finds the lock held by the task that woke it.
// The deprecated task store is still told of tasks, for applications migrating to the ledger.
#![allow(deprecated)]

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use serde_json::Value;

use super::dispatch::Dispatch;
use super::ledger::Writer;
use super::state::Reply;
use crate::client::task_store::{StoredTask, TaskStore};
use crate::error::Error;

/// A change to the task store, in the order the session reported it.
pub(super) enum TaskOp {
    Created(StoredTask),
    Finished(String),
}

/// The effects of one or more inputs, in order.
#[derive(Default)]
pub(crate) struct Effects {
    task_ops: Vec<TaskOp>,
    /// The store `task_ops` go to (set when there are any).
    task_store: Option<Arc<dyn TaskStore>>,
    replies: Vec<(Reply, Result<Value, Error>)>,
    dispatches: Vec<Dispatch>,
    /// The ledger writer, when writes were queued.
    ledger: Option<Arc<Writer>>,
}

impl Effects {
    pub(super) fn task(&mut self, store: &Arc<dyn TaskStore>, op: TaskOp) {
        self.task_store.get_or_insert_with(|| store.clone());
        self.task_ops.push(op);
    }

    /// Ledger writes were queued: they are carried out with the rest.
    pub(super) fn ledger(&mut self, writer: &Arc<Writer>) {
        if self.ledger.is_none() {
            self.ledger = Some(writer.clone());
        }
    }

    pub(super) fn reply(&mut self, reply: Reply, result: Result<Value, Error>) {
        self.replies.push((reply, result));
    }

    pub(super) fn dispatch(&mut self, dispatch: Dispatch) {
        self.dispatches.push(dispatch);
    }

    pub(super) fn is_empty(&self) -> bool {
        self.task_ops.is_empty()
            && self.replies.is_empty()
            && self.dispatches.is_empty()
            && self.ledger.is_none()
    }

    /// Whether carrying these out runs application code in the task that does it (a task
    /// store); handlers always run in tasks of their own, and ledger writes taken out with
    /// [`Effects::take_ledger`] go to the writer task.
    pub(super) fn runs_application_code(&self) -> bool {
        !self.task_ops.is_empty()
    }

    /// The ledger's writer, when writes were queued: for a task that must not carry them out
    /// itself, to hand them to the writer task.
    pub(super) fn take_ledger(&mut self) -> Option<Arc<Writer>> {
        self.ledger.take()
    }

    /// Appends `later`, keeping the order.
    pub(super) fn append(&mut self, mut later: Effects) {
        if self.task_store.is_none() {
            self.task_store = later.task_store.take();
        }
        if self.ledger.is_none() {
            self.ledger = later.ledger.take();
        }
        self.task_ops.append(&mut later.task_ops);
        self.replies.append(&mut later.replies);
        self.dispatches.append(&mut later.dispatches);
    }

    /// Carries the effects out, without the lock: the stores first (a caller that sees its
    /// result sees the stores as the result left them, a ledger's writes that finish at once
    /// included), then the results, then the handlers, started on `runtime`.
    pub(super) fn run(self, runtime: Option<&tokio::runtime::Handle>) {
        if let Some(writer) = &self.ledger {
            writer.kick();
        }
        if let Some(store) = &self.task_store {
            for op in self.task_ops {
                // A store's panic must not stop what follows: it costs the record, no more.
                let stored = catch_unwind(AssertUnwindSafe(|| match op {
                    TaskOp::Created(task) => store.created(task),
                    TaskOp::Finished(task_id) => store.finished(&task_id),
                }));
                if stored.is_err() {
                    tracing::error!("the task store panicked: a task record may be missing");
                }
            }
        }
        for (reply, result) in self.replies {
            let _ = reply.send(result);
        }
        for dispatch in self.dispatches {
            dispatch.spawn(runtime);
        }
    }
}
