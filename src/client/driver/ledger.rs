//! The driver's side of the ledger ([`crate::client::ledger`]): the record of each call in
//! flight, the writes queued in the order the session reported them, and the gates that hold
//! a call's POST until the write before it is durable.
//!
//! Writes are queued under the session's lock (no application code runs there) and carried
//! out after it is released, one at a time and in order, by whoever gets there first: the
//! task whose input led to them (a caller, the exchange runner), a call's POST waiting at its
//! gate, or the writer task. The timer task never carries one out: it wakes the writer task
//! for them. An in-memory ledger's write is done when first polled, so a call pays no task
//! switch for it; one that waits on I/O is handed to the writer task to finish.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll};
use std::time::SystemTime;

use futures::future::BoxFuture;
use futures::FutureExt;
use rustc_hash::FxHashMap;
use tokio::sync::Notify;

use crate::client::ledger::{EntryId, Ledger, LedgerEntry};
use crate::error::{Error, ErrorKind};
use crate::proto::{CallId, CallStage, Checkpoint};

/// One write.
enum Write {
    Put(Box<LedgerEntry>),
    Remove(EntryId),
}

/// A write in line, and the gate it opens (a checkpoint a POST waits for).
struct Op {
    write: Write,
    gate: Option<Arc<Gate>>,
}

/// A write being carried out that did not finish at its first poll.
struct Parked {
    work: BoxFuture<'static, Result<(), Error>>,
    gate: Option<Arc<Gate>>,
}

struct Line {
    ops: VecDeque<Op>,
    /// Someone carries out the write at the head of the line (or has parked it).
    busy: bool,
    parked: Option<Parked>,
}

/// Carries out a client's ledger writes in order.
pub(crate) struct Writer {
    ledger: Arc<dyn Ledger>,
    line: Mutex<Line>,
    /// Wakes the writer task.
    wake: Notify,
    /// The client stopped: the writer task ends once the line is empty.
    closed: AtomicBool,
}

/// Opens once a checkpoint's write has finished: the POST held behind it leaves, or (the
/// write failed) it is not sent.
pub(crate) struct Gate {
    result: OnceLock<Result<(), Error>>,
    settled: Notify,
}

impl Gate {
    fn new() -> Arc<Self> {
        Arc::new(Gate {
            result: OnceLock::new(),
            settled: Notify::new(),
        })
    }

    fn settle(&self, result: Result<(), Error>) {
        let _ = self.result.set(result);
        self.settled.notify_waiters();
    }

    fn is_open(&self) -> bool {
        matches!(self.result.get(), Some(Ok(())))
    }

    /// Waits until the write has finished: its outcome.
    pub(crate) async fn wait(&self) -> Result<(), Error> {
        loop {
            let notified = self.settled.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(result) = self.result.get() {
                return result.clone();
            }
            notified.await;
        }
    }
}

impl Writer {
    pub(crate) fn new(ledger: Arc<dyn Ledger>) -> Arc<Self> {
        Arc::new(Writer {
            ledger,
            line: Mutex::new(Line {
                ops: VecDeque::new(),
                busy: false,
                parked: None,
            }),
            wake: Notify::new(),
            closed: AtomicBool::new(false),
        })
    }

    pub(crate) fn ledger(&self) -> &Arc<dyn Ledger> {
        &self.ledger
    }

    fn lock(&self) -> MutexGuard<'_, Line> {
        match self.line.lock() {
            Ok(line) => line,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn queue(&self, write: Write, gate: Option<Arc<Gate>>) {
        self.lock().ops.push_back(Op { write, gate });
    }

    /// The future carrying out `write`; a panic in the ledger is its failure.
    fn start(&self, write: Write) -> BoxFuture<'static, Result<(), Error>> {
        let ledger = self.ledger.clone();
        let work = async move {
            match write {
                Write::Put(entry) => ledger.put(*entry).await,
                Write::Remove(id) => ledger.remove(id).await,
            }
        };
        AssertUnwindSafe(work)
            .catch_unwind()
            .map(|outcome| {
                outcome.unwrap_or_else(|_| {
                    tracing::error!("the ledger panicked: a record may be missing");
                    Err(Error::new(ErrorKind::Ledger, "the ledger panicked"))
                })
            })
            .boxed()
    }

    fn finished(&self, gate: Option<Arc<Gate>>, result: Result<(), Error>) {
        if let Err(error) = &result {
            tracing::warn!(%error, "a ledger write failed");
        }
        if let Some(gate) = gate {
            gate.settle(result);
        }
        self.lock().busy = false;
    }

    /// Carries out the writes in line while each finishes at once; one that does not is
    /// handed to the writer task. Runs the ledger's code: never from the timer task.
    pub(crate) fn kick(&self) {
        loop {
            let op = {
                let mut line = self.lock();
                if line.busy {
                    return;
                }
                let Some(op) = line.ops.pop_front() else {
                    return;
                };
                line.busy = true;
                op
            };
            let mut work = self.start(op.write);
            let waker = futures::task::noop_waker();
            match work.as_mut().poll(&mut Context::from_waker(&waker)) {
                Poll::Ready(result) => self.finished(op.gate, result),
                Poll::Pending => {
                    self.lock().parked = Some(Parked {
                        work,
                        gate: op.gate,
                    });
                    self.wake.notify_one();
                    return;
                }
            }
        }
    }

    /// Wakes the writer task to carry out what is in line (the timer task's way: it runs no
    /// ledger code itself).
    pub(crate) fn nudge(&self) {
        self.wake.notify_one();
    }

    /// The client stopped: the writer task finishes what is in line, then ends.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// The writer task: finishes parked writes and carries out the rest of the line.
    pub(crate) async fn run(self: Arc<Self>) {
        loop {
            let job = {
                let mut line = self.lock();
                match line.parked.take() {
                    Some(parked) => Some(parked),
                    None if !line.busy => line.ops.pop_front().map(|op| {
                        line.busy = true;
                        Parked {
                            work: self.start(op.write),
                            gate: op.gate,
                        }
                    }),
                    None => None,
                }
            };
            match job {
                Some(Parked { work, gate }) => {
                    let result = work.await;
                    self.finished(gate, result);
                }
                None => {
                    let idle = {
                        let line = self.lock();
                        line.ops.is_empty() && line.parked.is_none() && !line.busy
                    };
                    if idle && self.closed.load(Ordering::Acquire) {
                        break;
                    }
                    self.wake.notified().await;
                }
            }
        }
    }
}

/// What the driver keeps of one call's entry.
struct Record {
    id: EntryId,
    deadline: SystemTime,
    /// The gate of its last checkpoint of stage `Sent`, until a POST takes it.
    gate: Option<Arc<Gate>>,
    /// It became a task that has not ended: its entry outlives the call's wait.
    task_open: bool,
    /// A write its POST waited for failed: the next POST writes the entry again first.
    rewrite: bool,
}

/// The entries of a client's calls in flight, and the writer that keeps them.
pub(crate) struct Records {
    writer: Arc<Writer>,
    /// The endpoint as entries name it: without what may carry credentials.
    endpoint: String,
    keep_session_ids: bool,
    calls: FxHashMap<CallId, Record>,
}

impl Records {
    pub(crate) fn new(writer: Arc<Writer>, endpoint: String, keep_session_ids: bool) -> Self {
        Records {
            writer,
            endpoint,
            keep_session_ids,
            calls: FxHashMap::default(),
        }
    }

    pub(crate) fn writer(&self) -> &Arc<Writer> {
        &self.writer
    }

    /// Call `call` is the one entry `id` (due at `deadline`) records, picked up.
    pub(crate) fn adopt(&mut self, call: CallId, id: EntryId, deadline: SystemTime) {
        self.calls.insert(
            call,
            Record {
                id,
                deadline,
                gate: None,
                task_open: false,
                rewrite: false,
            },
        );
    }

    /// Queues the write of `call`'s checkpoint (its first makes its entry); `now` is the
    /// session's clock and the wall clock, to date the deadline.
    pub(crate) fn checkpoint(
        &mut self,
        call: CallId,
        checkpoint: Checkpoint,
        now: (std::time::Instant, SystemTime),
    ) {
        let record = self.calls.entry(call).or_insert_with(|| Record {
            id: EntryId::fresh(),
            deadline: now.1 + checkpoint.deadline.saturating_duration_since(now.0),
            gate: None,
            task_open: false,
            rewrite: false,
        });
        let gate = match checkpoint.stage {
            CallStage::Sent { .. } => Some(Gate::new()),
            CallStage::Task { .. } => {
                record.task_open = true;
                None
            }
            _ => None,
        };
        // Written again from now: a failed write before it is made good by this one.
        record.rewrite = false;
        if gate.is_some() {
            record.gate = gate.clone();
        }
        let entry = LedgerEntry::from_checkpoint(
            record.id.clone(),
            self.endpoint.clone(),
            checkpoint,
            record.deadline,
            self.keep_session_ids,
            now.1,
        );
        self.writer.queue(Write::Put(Box::new(entry)), gate);
    }

    /// Whether `call`'s next POST must write its entry again first (a write it waited for
    /// failed).
    pub(crate) fn needs_rewrite(&self, call: CallId) -> bool {
        self.calls.get(&call).is_some_and(|r| r.rewrite)
    }

    /// The gate `call`'s POST waits at, if a write it depends on has not finished.
    pub(crate) fn gate(&mut self, call: CallId) -> Option<Arc<Gate>> {
        let gate = self.calls.get_mut(&call)?.gate.take()?;
        (!gate.is_open()).then_some(gate)
    }

    /// A write `call`'s POST waited for failed: the POST was not sent.
    pub(crate) fn refused(&mut self, call: CallId) {
        if let Some(record) = self.calls.get_mut(&call) {
            record.rewrite = true;
        }
    }

    /// `call`'s task ended: its entry goes with the call.
    pub(crate) fn task_finished(&mut self, call: CallId) {
        if let Some(record) = self.calls.get_mut(&call) {
            record.task_open = false;
        }
    }

    /// `call` ended; its entry is removed, unless it became a task still running and the call
    /// only gave up waiting (`abandoned`: the application dropped it, and the task was
    /// cancelled with it). Returns whether a write was queued.
    pub(crate) fn ended(&mut self, call: CallId, abandoned: bool) -> bool {
        let Some(record) = self.calls.remove(&call) else {
            return false;
        };
        if record.task_open && !abandoned {
            return false;
        }
        self.writer.queue(Write::Remove(record.id), None);
        true
    }

    /// Whether entry `id` is a call of this client's in flight.
    pub(crate) fn holds(&self, id: &EntryId) -> bool {
        self.calls.values().any(|r| &r.id == id)
    }
}
