//! The driver's side of the ledger ([`crate::client::ledger`]): the record of each call in
//! flight, the writes queued in the order the session reported them, and the gates that hold
//! a call's POST until the write before it is durable.
//!
//! Writes are queued under the session's lock (no application code runs there) and carried
//! out after it is released by whoever gets there first: the task whose input led to them (a
//! caller, the exchange runner), a call's POST waiting at its gate, or the writer task. The
//! timer task never carries one out: it wakes the writer task for them. One entry's writes
//! are carried out one at a time, in order; different entries' side by side, so a ledger on
//! the network costs a round trip per write and not a place in one line. An in-memory
//! ledger's write is done when first polled, so a call pays no task switch for it; one that
//! waits on I/O is handed to the writer task to finish.
//!
//! The removal of the entry of a call the application dropped is the one write only the
//! writer task (or a flush) starts, never the task that dropped the call: a runtime that stops
//! drops its tasks in no particular order, the calls' futures possibly before the driver's,
//! and a client stopped that way must leave its calls' entries to the client or process that
//! takes over ("what the first left when it stopped with its runtime"). In a client that goes
//! on, the writer task removes them at once.
//!
//! An entry longer than the ledger stores ([`Ledger::max_entry_bytes`]) is never written: no
//! write of it can succeed. A POST waiting for it is told so apart from a write that failed,
//! and its call ends instead of being held back and tried again; any other such write is
//! dropped, the ledger keeping the call as it stood before.
//!
//! A write no POST waits for (a round awaiting input, a task, a resumed stream's cursor, a
//! removal) that fails is tried again by the writer task, with backoff and a bound, unless a
//! later write of its entry is queued first (that one carries what is to be written): else the
//! ledger would keep the call as it stood before, and a task left behind would expire with its
//! call's deadline, never polled again. (A write a POST waits for needs no retry: the POST is
//! held back and writes its entry again first.)
//!
//! Each client is an incarnation (a random id, written into its entries), live from when it
//! is built until it is closed or stops (a closed client runs no call, dropped or not). Within the process, `recover` never takes an entry written by
//! another live client, nor one a live client picked up and has not ended yet: two clients
//! sharing a ledger never make each other's calls again while both run (an unkeyed round sent
//! twice, say). A call picked up that ends gives its claim back, once its entry is removed or
//! at once when the entry stays (a task left behind again): the task can be polled again, and
//! the claims do not pile up in a process that recovers now and then. Nor does `recover` take
//! the entry of a call of its own client that ended while it read the ledger: the read may
//! hold the entry still, and the application has that call's outcome already. A client that
//! stops keeps the entries of its ended calls whose removal is still to make from the others
//! until it is made (or given up); its other entries go to them at once. Whether a client of
//! another process still runs cannot be told: across processes, one ledger name belongs to
//! one process at a time.
//!
//! A task's entry is shared by every call in flight polling the task, whichever client of the
//! process runs it, among the clients given the same ledger (one `Arc`): the last of them to
//! end decides whether it stays (a call left behind keeps it for a later `recover`) or goes.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use rustc_hash::{FxHashMap, FxHashSet};
use tokio::sync::Notify;

use crate::client::ledger::{EntryEndpoint, EntryId, Ledger, LedgerEntry, TASK_RETENTION};
use crate::error::{Error, ErrorKind};
use crate::proto::methods::TOOLS_CALL;
use crate::proto::{CallId, CallStage, Checkpoint};

use super::contained::Contained;
use super::state::CLOSE_GRACE;

/// The most times a write no POST waits for is tried again after it failed.
const MAX_RETRIES: u32 = 8;
/// The wait before the first retry; each next one waits twice as long, up to the longest.
const FIRST_RETRY: Duration = Duration::from_millis(100);
const LONGEST_RETRY: Duration = Duration::from_secs(5);
/// The longest one write may take: one not finished by then counts as failed, as a Redis
/// ledger's timed-out command does. A ledger that never answers then holds calls back (and
/// has its retries bounded) as one that fails does, with at most one write of each entry
/// outstanding, instead of keeping every write it stalled for the life of the client.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// How far off a call's entry is dated when its deadline lies past the wall clock's range:
/// as far as a session dates a deadline past its own clock's.
const FAR_WALL_DEADLINE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// One write.
// An op is moved into its line once and out once: boxing the entry would cost an allocation
// per write for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
enum Write {
    Put(LedgerEntry),
    Remove(EntryId),
}

/// A write waiting its turn, and the gate it opens (a checkpoint a POST waits for).
struct Op {
    write: Write,
    gate: Option<Arc<Gate>>,
    /// Times it failed before (a write tried again).
    failures: u32,
}

impl Op {
    fn new(write: Write, gate: Option<Arc<Gate>>) -> Self {
        Op {
            write,
            gate,
            failures: 0,
        }
    }
}

/// What a write no POST waits for is tried again with, should it fail: a copy made before it
/// started (the ledger takes the write itself).
struct Again {
    write: Write,
    failures: u32,
}

/// A write being carried out that did not finish at its first poll.
struct Parked {
    entry: EntryId,
    work: BoxFuture<'static, Result<(), Error>>,
    gate: Option<Arc<Gate>>,
    again: Option<Again>,
}

/// A write that failed, to be tried again from `due` unless a later write of its entry is
/// queued first.
struct Retry {
    entry: EntryId,
    again: Again,
    due: tokio::time::Instant,
}

/// The writes not carried out yet.
#[derive(Default)]
struct Line {
    /// The writes waiting, in the order they were queued. The first of an entry with no
    /// write being carried out may start; the others wait behind it. (Scanned from the front:
    /// a handful wait at a time, and one line costs no allocation per write.)
    waiting: VecDeque<(EntryId, Op)>,
    /// Writes handed to the writer task to finish.
    parked: Vec<Parked>,
    /// Entries with a write started and not finished (our own ids, or ones a recovery read
    /// back: a fast hash is safe).
    running: FxHashSet<EntryId>,
    /// Removals of the entries of calls the application dropped, in order: moved to
    /// `waiting` by the writer task or a flush only (the module's docs say why).
    dropped: Vec<(EntryId, Op)>,
    /// Failed writes to try again (the module's docs say which).
    retries: Vec<Retry>,
    /// Entries picked up whose calls ended and whose removal is queued: their claim goes once
    /// nothing of theirs is left to write, not before, so that a recovery never takes an
    /// entry whose call ended here while the ledger still holds it.
    releasing: FxHashSet<EntryId>,
    /// Entries of calls that ended whose removal is queued, each with when the ledger drops
    /// it anyway: what a removal given up on is remembered until.
    removing: FxHashMap<EntryId, SystemTime>,
    /// Entries whose removal was given up on, until the ledger drops them anyway: the
    /// ledger still holds them, and a recovery must not make their calls again (the
    /// application has their outcomes).
    given_up: FxHashMap<EntryId, SystemTime>,
    /// Entries moved to another id (a call's that became a task, moved to the task's), by
    /// the id they moved to: the new one is written once the old one names the task, and the
    /// old one removed once a write of the new one is done, not before, so that the task
    /// always has an entry and a recovery takes the two as one.
    moving: FxHashMap<EntryId, Moved>,
    /// Recoveries reading the ledger now.
    readers: usize,
    /// Entries whose last write was done while a recovery read: the read may hold them as
    /// they were before, so they count as still being written until no recovery reads.
    done_while_read: Vec<EntryId>,
}

/// An entry moved to another id ([`Line::moving`]), and how to remove it once it may go.
struct Moved {
    old: EntryId,
    /// It was picked up: its claim goes with it.
    release: bool,
    /// When the ledger drops it anyway.
    until: SystemTime,
    /// The old entry's rewrite naming the task is done (or given up on): the new one's
    /// writes may start. Before, the ledger may hold the old one as the call's send, which
    /// beside the task's entry a recovery would take for a second call.
    ready: bool,
    /// Its call ended leaving the task behind: should the new one's writes be given up on,
    /// the old one stays as the task's entry, no longer moving.
    left: bool,
}

impl Line {
    /// Nothing is being written, and what waits can start only once a write tried again
    /// later is done (a task's entry waiting for its call's entry's rewrite): as far as a
    /// flush can take the ledger now.
    fn is_settled(&self) -> bool {
        self.running.is_empty()
            && self
                .waiting
                .iter()
                .all(|(entry, _)| self.moving.get(entry).is_some_and(|m| !m.ready))
    }

    /// Queues the removal of `entry` (see [`Writer::queue_removal`]).
    fn queue_removal(&mut self, entry: EntryId, abandoned: bool, release: bool, until: SystemTime) {
        let op = Op::new(Write::Remove(entry.clone()), None);
        self.removing.insert(entry.clone(), until);
        if release {
            self.releasing.insert(entry.clone());
        }
        if abandoned {
            self.dropped.push((entry, op));
        } else {
            self.push(entry, op);
        }
    }

    /// Queues `op` of `entry`: a write of it waiting to be tried again is superseded.
    fn push(&mut self, entry: EntryId, op: Op) {
        if !self.retries.is_empty() {
            self.retries.retain(|r| r.entry != entry);
        }
        if matches!(op.write, Write::Put(_)) {
            // An entry keyed by its task is written again by a later call polling the task:
            // a dropped call's removal still held back would take that call's entry, and one
            // given up on would hide it from this client's recoveries.
            if !self.dropped.is_empty() {
                self.dropped.retain(|(queued, _)| *queued != entry);
            }
            self.given_up.remove(&entry);
        }
        self.waiting.push_back((entry, op));
    }

    /// A write of `entry` nothing waits for failed: it is tried again later, unless a later
    /// write of the entry is queued (which carries what is to be written) or it failed too
    /// often. Returns whether a retry was set.
    fn retry_later(&mut self, entry: EntryId, again: Again) -> bool {
        if self.waiting.iter().any(|(queued, _)| *queued == entry) {
            return false;
        }
        let failures = again.failures + 1;
        if failures > MAX_RETRIES {
            tracing::error!(
                %entry,
                failures,
                "a ledger write kept failing: given up (the ledger keeps the call as it stood before)"
            );
            return false;
        }
        let delay = FIRST_RETRY
            .saturating_mul(1 << (failures - 1).min(16))
            .min(LONGEST_RETRY);
        self.retries.push(Retry {
            entry,
            again: Again {
                write: again.write,
                failures,
            },
            due: tokio::time::Instant::now() + delay,
        });
        true
    }

    /// Whether a write of `entry` is waiting, held back or due again (an entry moved away
    /// counts until its removal is queued).
    fn pending(&self, entry: &EntryId) -> bool {
        self.waiting.iter().any(|(queued, _)| queued == entry)
            || self.dropped.iter().any(|(queued, _)| queued == entry)
            || self.retries.iter().any(|r| &r.entry == entry)
            || self.moving.values().any(|m| &m.old == entry)
    }

    /// Queues the retries due at `now` (all of them without it).
    fn admit_retries(&mut self, now: Option<tokio::time::Instant>) {
        if self.retries.is_empty() {
            return;
        }
        let (due, later) = std::mem::take(&mut self.retries)
            .into_iter()
            .partition(|r| now.is_none_or(|now| r.due <= now));
        self.retries = later;
        for Retry { entry, again, .. } in due {
            let op = Op {
                write: again.write,
                gate: None,
                failures: again.failures,
            };
            self.waiting.push_back((entry, op));
        }
    }
}

/// The clients of this process that run, and the entries they picked up: what `recover`
/// never takes from them. Changed as clients start and stop and as they recover, and as
/// calls poll tasks, never per plain call.
#[derive(Default)]
struct Live {
    clients: FxHashSet<Arc<str>>,
    /// Entry picked up, by the client that did, until the call ends or the client stops.
    picked: FxHashMap<EntryId, Arc<str>>,
    /// Calls in flight keyed by a task's entry, by ledger (its address) and entry, whichever
    /// client runs them: clients sharing a ledger share a task's entry as calls of one client
    /// do, and the last of the process's calls polling the task decides whether it stays
    /// ([`Records::ended`]). A count left over errs on keeping the entry, never removing it.
    polling: FxHashMap<(usize, EntryId), usize>,
}

fn live() -> MutexGuard<'static, Live> {
    static LIVE: OnceLock<Mutex<Live>> = OnceLock::new();
    let live = LIVE.get_or_init(Mutex::default);
    // Sets updated by one insertion or removal at a time: a panic cannot leave them halfway.
    match live.lock() {
        Ok(live) => live,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Carries out a client's ledger writes: one entry's in order, different entries' side by
/// side.
pub(crate) struct Writer {
    ledger: Arc<dyn Ledger>,
    /// The ledger's identity within the process (the address of its data): what the clients
    /// sharing it share a task's entry by ([`Live::polling`]).
    ledger_key: usize,
    /// The ledger's [`Ledger::max_entry_bytes`], asked once.
    max_entry_bytes: Option<usize>,
    /// This client's incarnation: written into its entries, live until it stops.
    incarnation: Arc<str>,
    line: Mutex<Line>,
    /// Wakes the writer task.
    wake: Notify,
    /// Told when no write is waiting or being carried out.
    idle: Notify,
    /// The client stopped: the writer task ends once nothing is left to write.
    closed: AtomicBool,
    /// The client was closed or stopped: its claims were let go ([`Writer::release`]).
    released: AtomicBool,
}

/// Opens once a checkpoint's write has finished: the POST held behind it leaves, or (the
/// write failed) it is not sent.
pub(crate) struct Gate {
    result: OnceLock<Result<(), Refusal>>,
    settled: Notify,
}

/// Why a checkpoint's write did not open its gate.
#[derive(Clone, Debug)]
pub(crate) enum Refusal {
    /// The write failed: written again, it may succeed (the store was unreachable, say).
    Failed(Error),
    /// The entry is longer than the ledger stores: no write of it can succeed.
    TooLong(Error),
}

impl Gate {
    fn new() -> Arc<Self> {
        Arc::new(Gate {
            result: OnceLock::new(),
            settled: Notify::new(),
        })
    }

    fn settle(&self, result: Result<(), Refusal>) {
        let _ = self.result.set(result);
        self.settled.notify_waiters();
    }

    fn is_open(&self) -> bool {
        matches!(self.result.get(), Some(Ok(())))
    }

    /// Waits until the write has finished: its outcome.
    pub(crate) async fn wait(&self) -> Result<(), Refusal> {
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
        let incarnation: Arc<str> = uuid::Uuid::new_v4().simple().to_string().into();
        live().clients.insert(incarnation.clone());
        let max_entry_bytes =
            std::panic::catch_unwind(AssertUnwindSafe(|| ledger.max_entry_bytes())).unwrap_or_else(
                |_| {
                    tracing::error!("the ledger panicked naming its longest entry: taken as none");
                    None
                },
            );
        let ledger_key = Arc::as_ptr(&ledger) as *const () as usize;
        Arc::new(Writer {
            ledger,
            ledger_key,
            max_entry_bytes,
            incarnation,
            line: Mutex::new(Line::default()),
            wake: Notify::new(),
            idle: Notify::new(),
            closed: AtomicBool::new(false),
            released: AtomicBool::new(false),
        })
    }

    pub(crate) fn ledger(&self) -> &Arc<dyn Ledger> {
        &self.ledger
    }

    /// Whether this client may pick `entry` up, and if so it is this client's from now on:
    /// not if another live client of the process wrote it, or any picked it up already.
    pub(crate) fn claim(&self, entry: &LedgerEntry) -> bool {
        let mut live = live();
        let owned_elsewhere = entry
            .owner()
            .is_some_and(|owner| *owner != *self.incarnation && live.clients.contains(owner));
        if owned_elsewhere || live.picked.contains_key(entry.id()) {
            return false;
        }
        live.picked
            .insert(entry.id().clone(), self.incarnation.clone());
        true
    }

    /// `claim` did not lead to a pick-up after all, or the call picked up has ended and its
    /// entry, if the ledger keeps it, may be picked up again.
    pub(crate) fn unclaim(&self, id: &EntryId) {
        let mut live = live();
        if live.picked.get(id) == Some(&self.incarnation) {
            live.picked.remove(id);
        }
    }

    /// A call of this client's in flight is keyed by task entry `id` from now on
    /// ([`Live::polling`]).
    fn polls(&self, id: &EntryId) {
        *live()
            .polling
            .entry((self.ledger_key, id.clone()))
            .or_default() += 1;
    }

    /// Calls of this client's keyed by the entries `ids` (one per call) are no longer in
    /// flight under them. Returns whether another call of the process still is, under the
    /// last of them.
    fn polled(&self, ids: impl IntoIterator<Item = EntryId>) -> bool {
        let mut live = live();
        let mut others = false;
        for id in ids {
            let key = (self.ledger_key, id);
            others = match live.polling.get_mut(&key) {
                Some(count) if *count > 1 => {
                    *count -= 1;
                    true
                }
                Some(_) => {
                    live.polling.remove(&key);
                    false
                }
                None => false,
            };
        }
        others
    }

    /// A recovery is about to read the ledger: until the guard returned is dropped, an entry
    /// whose last write is done meanwhile still counts as being written
    /// ([`Writer::is_writing`]), since the read may have seen it before it was.
    pub(crate) fn reading(&self) -> Reading<'_> {
        self.lock().readers += 1;
        Reading(self)
    }

    /// Whether this client has a write of `entry` not done yet, or done while a recovery
    /// reads. For an entry whose call is no longer in flight here, that is a call that ended
    /// here (its removal is the write) whose entry a read may still hold. Derived from the
    /// queues rather than tracked per call: every call ends, few while a recovery reads.
    pub(crate) fn is_writing(&self, entry: &EntryId) -> bool {
        let line = self.lock();
        line.running.contains(entry)
            || line.pending(entry)
            || line.done_while_read.contains(entry)
            || line
                .given_up
                .get(entry)
                .is_some_and(|until| SystemTime::now() < *until)
    }

    /// This client stopped: what it wrote or picked up may be taken over, but for the
    /// entries in `kept` (ended calls whose removal is still to make), claimed until then.
    fn stopped(&self, kept: &FxHashSet<EntryId>) {
        let mut live = live();
        if live.clients.remove(&self.incarnation) {
            live.picked
                .retain(|id, by| *by != self.incarnation || kept.contains(id));
            for id in kept {
                live.picked
                    .entry(id.clone())
                    .or_insert_with(|| self.incarnation.clone());
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Line> {
        match self.line.lock() {
            Ok(line) => line,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn queue(&self, entry: EntryId, write: Write, gate: Option<Arc<Gate>>) {
        self.lock().push(entry, Op::new(write, gate));
    }

    /// Queues the removal of `entry`. That of a call the application dropped (`abandoned`)
    /// waits for the writer task, so a client whose runtime stopped (and with it that task)
    /// never makes it. When `release`, the claim on an entry picked up goes once the removal
    /// is done: queued under the same lock, so the removal cannot finish before it is noted.
    /// `until`: when the ledger drops the entry anyway (how long a removal given up on is
    /// remembered).
    fn queue_removal(&self, entry: EntryId, abandoned: bool, release: bool, until: SystemTime) {
        self.lock().queue_removal(entry, abandoned, release, until);
    }

    /// Queues the move of an entry to a new id: the put of `renamed` (the entry under its old
    /// id, naming the task), then that of `entry` under its new id, started only once the
    /// first is done (or given up on), then the old one's removal, once a write of the new id
    /// is done. The ledger holds at every moment an entry naming the task, and never the
    /// old one still at the call's send beside the new one (two of one call for a recovery);
    /// the two for a while, which a recovery takes as one. The old one is kept if the new
    /// one's writes are given up on, until the call ends ([`Writer::moved_call_ended`]).
    /// `release`: `old` was picked up, its claim goes with it.
    fn queue_move(
        &self,
        entry: LedgerEntry,
        renamed: LedgerEntry,
        release: bool,
        until: SystemTime,
    ) {
        let (new, old) = (entry.id().clone(), renamed.id().clone());
        let mut line = self.lock();
        // Noted under the same lock as the puts are queued: neither can finish unnoticed.
        line.push(old.clone(), Op::new(Write::Put(renamed), None));
        line.moving.insert(
            new.clone(),
            Moved {
                old,
                release,
                until,
                ready: false,
                left: false,
            },
        );
        line.push(new, Op::new(Write::Put(entry), None));
    }

    /// The call whose entry moved to `new` ended. Its entry leaving with it (`kept` false)
    /// takes the old one along whatever became of the move (a call whose outcome the
    /// application has leaves nothing to recover), removed as its own is (`abandoned`).
    /// Kept (its task left behind, or left to the next client), the old one stays until a
    /// write of the new one is done; if none is, it stays, no longer moving, the task's
    /// entry for a recovery to take.
    fn moved_call_ended(&self, new: &EntryId, kept: bool, abandoned: bool) {
        let mut line = self.lock();
        if !kept {
            if let Some(moved) = line.moving.remove(new) {
                if !moved.ready {
                    // The old one is not rewritten yet: the new one's writes, which waited
                    // for that, are not made at all (its removal follows), else one could
                    // land beside the old one still at the call's send.
                    let (unwritten, kept): (VecDeque<_>, VecDeque<_>) =
                        std::mem::take(&mut line.waiting)
                            .into_iter()
                            .partition(|(entry, _)| entry == new);
                    line.waiting = kept;
                    for (_, op) in unwritten {
                        if let Some(gate) = op.gate {
                            gate.settle(Err(Refusal::Failed(Error::new(
                                ErrorKind::Ledger,
                                "the call ended before its entry was written",
                            ))));
                        }
                    }
                }
                line.queue_removal(moved.old, abandoned, moved.release, moved.until);
            }
            return;
        }
        let writing = line.running.contains(new) || line.pending(new);
        let Some(moved) = line.moving.get_mut(new) else {
            return;
        };
        if writing {
            moved.left = true;
            return;
        }
        let moved = line.moving.remove(new);
        drop(line);
        if let Some(Moved {
            old, release: true, ..
        }) = moved
        {
            self.unclaim(&old);
        }
    }

    /// Entry `entry`, a duplicate of a task's entry a recovery picked up, goes: claimed by
    /// this client (by [`Writer::claim`]) until its removal is done.
    pub(crate) fn retire(&self, entry: &LedgerEntry) {
        self.queue_removal(entry.id().clone(), false, true, entry.expires_at());
    }

    /// Lets the removals of dropped calls' entries start: only from the writer task or a
    /// flush, each of which runs only while the client's runtime does.
    fn admit_dropped(&self) {
        let mut line = self.lock();
        if !line.dropped.is_empty() {
            for (entry, op) in std::mem::take(&mut line.dropped) {
                line.push(entry, op);
            }
        }
    }

    /// The future carrying out `write`; a panic in the ledger is its failure.
    fn start(&self, write: Write) -> BoxFuture<'static, Result<(), Error>> {
        let ledger = self.ledger.clone();
        async move {
            let work = std::pin::pin!(Some(async move {
                match write {
                    Write::Put(entry) => ledger.put(entry).await,
                    Write::Remove(id) => ledger.remove(id).await,
                }
            }));
            Contained::new(work, "the ledger")
                .await
                .unwrap_or_else(|()| {
                    tracing::error!("the ledger panicked: a record may be missing");
                    Err(Error::new(ErrorKind::Ledger, "the ledger panicked"))
                })
        }
        .boxed()
    }

    /// Why `write` cannot be made: an entry longer than the ledger stores. Measured as the
    /// ledger would store it, and no further than the bound, outside the session's lock.
    fn too_long(&self, write: &Write) -> Option<Error> {
        let (Write::Put(entry), Some(max)) = (write, self.max_entry_bytes) else {
            return None;
        };
        let mut measure = Measure { len: 0, max };
        if serde_json::to_writer(&mut measure, &entry.to_json()).is_ok() {
            return None;
        }
        Some(Error::new(
            ErrorKind::Ledger,
            format!(
                "the call's ledger entry is longer than the {max} bytes the ledger stores: \
                 it cannot be recorded, and was not sent"
            ),
        ))
    }

    /// The next write that may start: the first waiting of an entry with none being carried
    /// out.
    fn next_startable(&self) -> Option<(EntryId, Op)> {
        let mut line = self.lock();
        let at = line.waiting.iter().position(|(entry, _)| {
            !line.running.contains(entry) && line.moving.get(entry).is_none_or(|m| m.ready)
        })?;
        let (entry, op) = line.waiting.remove(at)?;
        line.running.insert(entry.clone());
        Some((entry, op))
    }

    /// A write of `entry` has finished: its gate opens (or says why not), a failed one
    /// nothing waited for is tried again later, and the entry's next write may start.
    fn finished(
        &self,
        entry: EntryId,
        gate: Option<Arc<Gate>>,
        again: Option<Again>,
        result: Result<(), Refusal>,
    ) {
        let failed = match &result {
            Ok(()) => false,
            Err(Refusal::Failed(error)) => {
                tracing::warn!(%error, "a ledger write failed");
                true
            }
            Err(Refusal::TooLong(error)) => {
                tracing::error!(%error, "a ledger entry not written");
                true
            }
        };
        let removal = again
            .as_ref()
            .is_some_and(|a| matches!(a.write, Write::Remove(_)));
        if let Some(gate) = gate {
            gate.settle(result);
        }
        let mut line = self.lock();
        line.running.remove(&entry);
        let retry = match again.filter(|_| failed) {
            Some(again) => line.retry_later(entry.clone(), again),
            None => false,
        };
        // An entry moved from here names the task now, or never will (its rewrite was given
        // up on: the task's entry is written anyway, the task never left without one): the
        // new one's writes may start.
        if !retry && !line.waiting.iter().any(|(queued, _)| *queued == entry) {
            for moved in line.moving.values_mut().filter(|m| m.old == entry) {
                moved.ready = true;
            }
        }
        // An entry moved here: the old one goes once a write of this one is done. If this
        // one's writes are given up on (none is tried again or waits), the old one stays, the
        // task's entry still, and still moving while its call runs: a later write of this one
        // (the call's next, its removal) may succeed, and the call's end removes it anyway
        // ([`Writer::moved_call_ended`]). A call that left its task behind leaves it then.
        let mut let_go = None;
        let given_up = failed && !retry && !line.pending(&entry);
        let settled = match line.moving.get(&entry) {
            Some(moved) => !failed || (given_up && moved.left),
            None => false,
        };
        if settled {
            if let Some(moved) = line.moving.remove(&entry) {
                if failed {
                    let_go = moved.release.then_some(moved.old);
                } else {
                    line.queue_removal(moved.old, false, moved.release, moved.until);
                }
            }
        }
        // Released when its last write is done, whatever its outcome: a removal given up on
        // leaves an entry the next process would pick up anyway. This client still knows it
        // as ended (`given_up`), so its own recoveries never make the call again.
        let last = !line.pending(&entry);
        if last {
            if let Some(until) = line.removing.remove(&entry).filter(|_| failed && removal) {
                // Those that expired meanwhile go, so the set stays as small as the
                // removals given up on in one entry's lifetime.
                let now = SystemTime::now();
                line.given_up.retain(|_, until| now < *until);
                line.given_up.insert(entry.clone(), until);
            }
        }
        let release = last && line.releasing.remove(&entry);
        if last && line.readers > 0 {
            line.done_while_read.push(entry.clone());
        }
        if line.is_settled() {
            self.idle.notify_waiters();
        }
        drop(line);
        if release {
            self.unclaim(&entry);
        }
        if let Some(old) = let_go {
            self.unclaim(&old);
        }
        if retry {
            self.wake.notify_one();
        }
    }

    /// Carries out the writes queued so far, and those they wait behind, and tries the
    /// failed ones waiting for a retry once more now: a recovery reads after them, so it sees
    /// what this client's calls left behind an instant ago (a call that just timed out has its
    /// entry's last write queued, not yet made). Runs the ledger's code.
    pub(crate) async fn flush(&self) {
        self.lock().admit_retries(None);
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            self.admit_dropped();
            self.kick();
            if self.lock().is_settled() {
                return;
            }
            idle.await;
        }
    }

    /// Carries out the writes that may start, each as far as its first poll takes it; one
    /// that does not finish there is handed to the writer task, and so are the removals of
    /// dropped calls' entries. Runs the ledger's code: never from the timer task.
    pub(crate) fn kick(&self) {
        let mut handed = !self.lock().dropped.is_empty();
        while let Some((entry, op)) = self.next_startable() {
            if let Some(error) = self.too_long(&op.write) {
                // Not tried again: no write of it can succeed.
                self.finished(entry, op.gate, None, Err(Refusal::TooLong(error)));
                continue;
            }
            // A write a POST waits for is made again by that POST if it fails; any other is
            // tried again from a copy.
            let again = op.gate.is_none().then(|| Again {
                write: op.write.clone(),
                failures: op.failures,
            });
            let mut work = self.start(op.write);
            let waker = futures::task::noop_waker();
            match work.as_mut().poll(&mut Context::from_waker(&waker)) {
                Poll::Ready(result) => {
                    self.finished(entry, op.gate, again, result.map_err(Refusal::Failed))
                }
                Poll::Pending => {
                    self.lock().parked.push(Parked {
                        entry,
                        work,
                        gate: op.gate,
                        again,
                    });
                    handed = true;
                }
            }
        }
        if handed {
            self.wake.notify_one();
        }
    }

    /// Wakes the writer task to carry out what is waiting (the timer task's way: it runs no
    /// ledger code itself).
    pub(crate) fn nudge(&self) {
        self.wake.notify_one();
    }

    /// The client stopped: what it wrote or picked up may be taken over, but for the entries
    /// of its ended calls, until their removal is done. The writer task finishes what is
    /// waiting (failed writes tried again included), then ends; within [`CLOSE_GRACE`] (as
    /// long as a dropped client waits for its DELETE), giving up on what is left then: a
    /// ledger that never answers is not kept, with the writes it stalled, for the life of the
    /// process.
    pub(crate) fn close(&self) {
        self.release();
        self.closed.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// The client was closed (or stopped): it runs no call any more, so what it wrote or
    /// picked up may be taken over by another client of the process from now on, but for the
    /// entries of its ended calls, until their removal is done. The writer task goes on (a
    /// closed client that is not dropped still finishes what it queued, and may be flushed).
    /// Once is enough: later calls change nothing.
    pub(crate) fn release(&self) {
        if self.released.swap(true, Ordering::AcqRel) {
            return;
        }
        {
            let mut line = self.lock();
            // The entries of calls that ended here stay claimed until their removal is done
            // or given up ([`Writer::finished`], [`Writer::give_up`]): until then another
            // client of the process would make again a call whose outcome the application
            // has. Not those of calls the application dropped: a client stopped with its
            // runtime never removes them, and leaves them to whoever takes over. Claimed under
            // the line's lock, so a removal cannot finish before its claim is noted.
            let dropped: FxHashSet<EntryId> =
                line.dropped.iter().map(|(id, _)| id.clone()).collect();
            let ended: Vec<EntryId> = line
                .removing
                .keys()
                .filter(|id| !dropped.contains(*id))
                .cloned()
                .collect();
            line.releasing.retain(|id| !dropped.contains(id));
            line.releasing.extend(ended);
            self.stopped(&line.releasing);
        }
    }

    /// The client stopped [`CLOSE_GRACE`] ago with `stuck` writes still being carried out by
    /// the writer task: they and whatever waits are given up on. No POST waits at their gates
    /// any more (the client's stop aborted them), and a flush finds nothing left to wait for.
    fn give_up(&self, stuck: usize) {
        let mut line = self.lock();
        let count = stuck
            + line.waiting.len()
            + line.parked.len()
            + line.dropped.len()
            + line.retries.len();
        tracing::error!(
            left = count,
            "the ledger did not finish its writes within {CLOSE_GRACE:?} of the client's stop: \
             given up (the ledger keeps those calls as they stood before)"
        );
        // Dropped after the lock is released: the writes are the ledger's code.
        let unwritten = (
            std::mem::take(&mut line.waiting),
            std::mem::take(&mut line.parked),
            std::mem::take(&mut line.dropped),
            std::mem::take(&mut line.retries),
        );
        line.running.clear();
        line.removing.clear();
        line.moving.clear();
        // Their removals given up on: whoever takes over may have them.
        let released = std::mem::take(&mut line.releasing);
        drop(line);
        drop(unwritten);
        for id in &released {
            self.unclaim(id);
        }
        self.idle.notify_waiters();
    }

    /// The writer task: starts what may start, finishes the writes handed to it, side by
    /// side (each within [`WRITE_TIMEOUT`]), and tries failed ones again when they are due.
    /// Once the client has stopped it ends when nothing is left to write, or [`CLOSE_GRACE`]
    /// later at the latest.
    pub(crate) async fn run(self: Arc<Self>) {
        let mut writing = FuturesUnordered::new();
        let mut give_up_at = None;
        loop {
            self.admit_dropped();
            self.lock().admit_retries(Some(tokio::time::Instant::now()));
            self.kick();
            let (idle, next_retry) = {
                let mut line = self.lock();
                for parked in line.parked.drain(..) {
                    let Parked {
                        entry,
                        work,
                        gate,
                        again,
                    } = parked;
                    let work = tokio::time::timeout(WRITE_TIMEOUT, work).map(|done| {
                        done.unwrap_or_else(|_| {
                            Err(Error::new(
                                ErrorKind::Ledger,
                                format!(
                                    "the ledger did not finish a write within {WRITE_TIMEOUT:?}"
                                ),
                            ))
                        })
                    });
                    writing.push(work.map(move |result| (entry, gate, again, result)));
                }
                let idle = line.running.is_empty()
                    && line.waiting.is_empty()
                    && line.dropped.is_empty()
                    && line.retries.is_empty();
                (idle, line.retries.iter().map(|r| r.due).min())
            };
            if self.closed.load(Ordering::Acquire) {
                if idle && writing.is_empty() {
                    break;
                }
                give_up_at.get_or_insert_with(|| tokio::time::Instant::now() + CLOSE_GRACE);
            }
            tokio::select! {
                () = self.wake.notified() => {}
                Some((entry, gate, again, result)) = writing.next(), if !writing.is_empty() => {
                    self.finished(entry, gate, again, result.map_err(Refusal::Failed));
                }
                () = until(next_retry) => {}
                () = until(give_up_at) => {
                    self.give_up(writing.len());
                    break;
                }
            }
        }
    }
}

/// Counts the bytes written to it, failing once they pass `max`.
struct Measure {
    len: usize,
    max: usize,
}

impl std::io::Write for Measure {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.len = self.len.saturating_add(buf.len());
        if self.len > self.max {
            return Err(std::io::Error::other("past the bound"));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A recovery reading the ledger ([`Writer::reading`]).
pub(crate) struct Reading<'a>(&'a Writer);

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        let mut line = self.0.lock();
        line.readers = line.readers.saturating_sub(1);
        if line.readers == 0 {
            line.done_while_read.clear();
        }
    }
}

/// Sleeps until `at`; for ever without it.
async fn until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Nothing of it is written any more: whatever it still kept goes.
        let mut live = live();
        live.clients.remove(&self.incarnation);
        live.picked.retain(|_, by| *by != self.incarnation);
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
    /// The task it became (kept when only tasks left behind are written).
    task_id: Option<String>,
    /// Its entry is in the ledger (it was picked up from one, or written).
    stored: bool,
    /// It became a task at some point: its entry may outlive its deadline.
    was_task: bool,
    /// A checkpoint of a send of it was queued.
    sent: bool,
    /// A send of it may have run, as far as its checkpoints tell: it was picked up, sent
    /// again, or went past its first request (a round, a task). Erring towards yes.
    may_have_run: bool,
    /// It counts among the calls of the process polling the task its id names
    /// ([`Live::polling`]), until it leaves the records.
    polling: bool,
}

impl Record {
    /// When the ledger drops its entry at the latest: its deadline, or for a task's the
    /// retention a task's entry was last written with ([`LedgerEntry::expires_at`]), which
    /// is no later than that from now.
    fn expiry(&self) -> SystemTime {
        if self.was_task {
            let now = SystemTime::now();
            let retained = now.checked_add(TASK_RETENTION).unwrap_or(now);
            self.deadline.max(retained)
        } else {
            self.deadline
        }
    }

    fn new(id: EntryId, deadline: SystemTime) -> Self {
        Record {
            id,
            deadline,
            gate: None,
            task_open: false,
            rewrite: false,
            task_id: None,
            stored: false,
            was_task: false,
            sent: false,
            may_have_run: false,
            polling: false,
        }
    }
}

/// What a client writes to its ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Every call in flight, as it progresses (a ledger another client or process reads).
    Calls,
    /// Only the tasks still running when their calls stopped waiting: for a ledger no one but
    /// the client itself ever reads (the default, a memory ledger of its own). Its own
    /// `recover` skips its calls in flight, so an entry for one of them could never be read;
    /// not writing them costs a call nothing.
    TasksLeftBehind,
}

/// The entries of a client's calls in flight, and the writer that keeps them.
pub(crate) struct Records {
    writer: Arc<Writer>,
    /// The endpoint as entries name it.
    endpoint: EntryEndpoint,
    keep_session_ids: bool,
    scope: Scope,
    calls: FxHashMap<CallId, Record>,
}

impl Records {
    pub(crate) fn new(
        writer: Arc<Writer>,
        endpoint: &str,
        keep_session_ids: bool,
        scope: Scope,
    ) -> Self {
        Records {
            writer,
            endpoint: EntryEndpoint::of(endpoint),
            keep_session_ids,
            scope,
            calls: FxHashMap::default(),
        }
    }

    pub(crate) fn writer(&self) -> &Arc<Writer> {
        &self.writer
    }

    /// Call `call` is the one entry `id` (due at `deadline`; a task's when `task`) records,
    /// picked up.
    pub(crate) fn adopt(&mut self, call: CallId, id: EntryId, deadline: SystemTime, task: bool) {
        let mut record = Record::new(id, deadline);
        record.task_open = task;
        record.was_task = task;
        record.stored = true;
        record.may_have_run = true;
        if task {
            self.writer.polls(&record.id);
            record.polling = true;
        }
        self.calls.insert(call, record);
    }

    /// `call` became task `task_id` (what a ledger of tasks left behind keeps of it).
    pub(crate) fn task_created(&mut self, call: CallId, task_id: &str) {
        if self.scope == Scope::TasksLeftBehind {
            let record = self.calls.entry(call).or_insert_with(|| {
                // Keyed by the task, as a resumed task's entry is: one entry per task.
                let id = EntryId::of_task(&self.endpoint, task_id);
                Record::new(id, SystemTime::now())
            });
            record.task_open = true;
            record.was_task = true;
            record.task_id = Some(task_id.to_owned());
            if !record.polling {
                self.writer.polls(&record.id);
                record.polling = true;
            }
        }
    }

    /// Queues the write of `call`'s checkpoint (its first makes its entry); `now` is the
    /// session's clock and the wall clock, to date the deadline.
    pub(crate) fn checkpoint(
        &mut self,
        call: CallId,
        checkpoint: Checkpoint,
        now: (std::time::Instant, SystemTime),
    ) {
        let record = self.calls.entry(call).or_insert_with(|| {
            // A deadline the session's clock holds may lie past the wall clock's range (it
            // starts decades later): dated far off instead, as the session dates one past its
            // own clock's, not a panic under the session's lock, which would stop the client.
            let left = checkpoint.deadline.saturating_duration_since(now.0);
            let deadline = now
                .1
                .checked_add(left)
                .or_else(|| now.1.checked_add(FAR_WALL_DEADLINE))
                .unwrap_or(now.1);
            // A call whose first checkpoint is a task's is a task resumed by its id: its
            // entry is keyed by the task, so that each resumption of it (each left behind
            // by a failed wait, say) writes the same entry instead of one more to recover.
            let id = match &checkpoint.stage {
                CallStage::Task { task_id } => EntryId::of_task(&self.endpoint, task_id),
                _ => EntryId::fresh(),
            };
            Record::new(id, deadline)
        });
        // A send's checkpoint written again after a write it waited for failed is the same
        // send's; any other after a send is a later one's (a connection refused counts too:
        // the record cannot tell).
        let sending = matches!(checkpoint.stage, CallStage::Sent { .. });
        record.may_have_run |= (sending && record.sent && !record.rewrite)
            || !matches!(checkpoint.stage, CallStage::Sent { round: 0 });
        record.sent |= sending;
        let gate = match checkpoint.stage {
            CallStage::Sent { .. } => Some(Gate::new()),
            CallStage::Task { .. } => {
                record.task_open = true;
                record.was_task = true;
                None
            }
            _ => None,
        };
        // Written again from now: a failed write before it is made good by this one.
        record.rewrite = false;
        if gate.is_some() {
            record.gate = gate.clone();
        }
        // A call that became a task moves to the task's id, the one `resume_task` writes
        // (here or in another process): the task has one entry, not the call's and the
        // resumption's, each polled by a recovery. The call's entry says so first, so that
        // until its removal (once the task's is written) a recovery reading both takes them
        // as one.
        let moved = match &checkpoint.stage {
            CallStage::Task { task_id } => {
                let keyed = EntryId::of_task(&self.endpoint, task_id);
                let moved = (record.id != keyed).then(|| std::mem::replace(&mut record.id, keyed));
                if !record.polling || moved.is_some() {
                    if let Some(old) = moved.as_ref().filter(|_| record.polling) {
                        self.writer.polled([old.clone()]);
                    }
                    self.writer.polls(&record.id);
                    record.polling = true;
                }
                moved
            }
            _ => None,
        };
        let entry = LedgerEntry::from_checkpoint(
            record.id.clone(),
            &self.endpoint,
            checkpoint,
            record.deadline,
            self.keep_session_ids,
            now.1,
        )
        .with_owner(self.writer.incarnation.clone());
        match moved {
            None => self
                .writer
                .queue(record.id.clone(), Write::Put(entry), gate),
            Some(old) => {
                let until = record.expiry();
                let release = record.stored;
                let renamed = entry.clone().with_id(old);
                self.writer.queue_move(entry, renamed, release, until);
            }
        }
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

    /// Whether a send of `call` may have run, as far as its record tells (erring towards
    /// yes): what a call ended before its POST left says.
    pub(crate) fn may_have_run(&self, call: CallId) -> bool {
        self.calls.get(&call).is_some_and(|r| r.may_have_run)
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
    /// cancelled with it). An abandoned call's entry is removed by the writer task, never at
    /// once: dropped with a runtime that stops, the call leaves its entry to whoever takes
    /// over. A call picked up gives up its claim on the entry: at once when the entry stays
    /// (a task left behind again, for a later `recover` of this client's to poll), once it is
    /// removed otherwise; one failed by the client's close (`closed`) keeps its entry for the
    /// next client. An entry shared with another call still in flight (one task polled by
    /// both), of this client or of another of the process on the same ledger, is the last
    /// one's to remove or keep. Returns whether a write was queued.
    pub(crate) fn ended(&mut self, call: CallId, abandoned: bool, closed: bool) -> bool {
        let Some(record) = self.calls.remove(&call) else {
            return false;
        };
        let polled_elsewhere = record.polling && self.writer.polled([record.id.clone()]);
        if record.stored && closed && !abandoned {
            // Picked up from its entry and failed by the client's close: the entry (and the
            // call) go to the next client, as they came to this one.
            self.writer.unclaim(&record.id);
            self.writer.moved_call_ended(&record.id, true, false);
            return false;
        }
        let left_behind = record.task_open && !abandoned;
        if record.stored && left_behind {
            self.writer.unclaim(&record.id);
        }
        if self.scope == Scope::TasksLeftBehind {
            if !left_behind && record.stored {
                // A task picked up from its entry, ended: the entry goes.
                let until = record.expiry();
                self.remove(record.id, abandoned, true, until);
                return true;
            }
            // Written once, when the call leaves its task behind: a later `recover` polls it
            // (one picked up and left behind again keeps its entry).
            let Some(task_id) = record.task_id.filter(|_| left_behind) else {
                return false;
            };
            let now = SystemTime::now();
            let checkpoint = Checkpoint::new(TOOLS_CALL, None, std::time::Instant::now())
                .with_stage(CallStage::Task { task_id });
            let entry = LedgerEntry::from_checkpoint(
                record.id.clone(),
                &self.endpoint,
                checkpoint,
                now,
                false,
                now,
            )
            .with_owner(self.writer.incarnation.clone());
            self.writer.queue(record.id, Write::Put(entry), None);
            return true;
        }
        if left_behind {
            self.writer.moved_call_ended(&record.id, true, false);
            return false;
        }
        // A task's entry is keyed by the task: another call in flight here that polls the
        // same task (a second resumption of it, or the call that became it) shares it. The
        // last of them to end decides whether it stays, or one that ends later leaving the
        // task behind would find it removed and write nothing, and no recovery would poll the
        // task. A claim on it passes to those that remain. (Only a task's id can be shared: a
        // call's own is fresh.)
        let mut shared = false;
        let siblings = self.calls.values_mut().filter(|_| record.was_task);
        for other in siblings.filter(|r| r.id == record.id) {
            other.stored |= record.stored;
            shared = true;
        }
        if shared {
            return false;
        }
        // So does a call of another client sharing the ledger: the entry stays as if this call
        // left the task behind, for that one to decide. A claim cannot pass to another
        // client's call: it goes at once, as when the entry stays.
        if polled_elsewhere {
            if record.stored {
                self.writer.unclaim(&record.id);
            }
            self.writer.moved_call_ended(&record.id, true, false);
            return false;
        }
        let until = record.expiry();
        self.writer.moved_call_ended(&record.id, false, abandoned);
        self.remove(record.id, abandoned, record.stored, until);
        true
    }

    /// Queues the removal of entry `id`, of a call `abandoned` or not; `picked`: the call was
    /// picked up from it, and the claim goes with the entry.
    fn remove(&self, id: EntryId, abandoned: bool, picked: bool, until: SystemTime) {
        self.writer.queue_removal(id, abandoned, picked, until);
    }

    /// Whether entry `id` is a call of this client's in flight, or one that ended whose
    /// entry a recovery may still read ([`Writer::is_writing`]).
    pub(crate) fn holds(&self, id: &EntryId) -> bool {
        self.calls.values().any(|r| &r.id == id) || self.writer.is_writing(id)
    }
}

impl Drop for Records {
    fn drop(&mut self) {
        // The client stopped with these calls in flight: they poll their tasks no more, and
        // the entries are the remaining calls' of the process to remove or keep.
        let polling = self.calls.values().filter(|r| r.polling);
        self.writer.polled(polling.map(|r| r.id.clone()));
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    /// Logs each write as it starts; a put of an entry named `slow…` then waits for `go`.
    #[derive(Default)]
    struct Held {
        log: Mutex<Vec<String>>,
        go: Notify,
        /// Its [`Ledger::max_entry_bytes`].
        max: Option<usize>,
    }

    impl Ledger for Held {
        fn put(&self, entry: LedgerEntry) -> BoxFuture<'_, Result<(), Error>> {
            self.log.lock().unwrap().push(format!("put {}", entry.id()));
            Box::pin(async move {
                if entry.id().as_str().starts_with("slow") {
                    self.go.notified().await;
                }
                Ok(())
            })
        }

        fn remove(&self, id: EntryId) -> BoxFuture<'_, Result<(), Error>> {
            self.log.lock().unwrap().push(format!("remove {id}"));
            Box::pin(async { Ok(()) })
        }

        fn entries(&self) -> BoxFuture<'_, Result<Vec<LedgerEntry>, Error>> {
            Box::pin(async { Ok(Vec::new()) })
        }

        fn max_entry_bytes(&self) -> Option<usize> {
            self.max
        }
    }

    fn entry(id: &str) -> LedgerEntry {
        let checkpoint = Checkpoint::new("tools/call", None, Instant::now());
        let now = SystemTime::now();
        LedgerEntry::from_checkpoint(
            EntryId::parse(id).unwrap(),
            &EntryEndpoint::of("http://h/mcp"),
            checkpoint,
            now + Duration::from_secs(60),
            false,
            now,
        )
    }

    /// A ledger only its client reads keeps exactly the tasks calls leave behind: not a call
    /// that never became a task, nor a task that ended or was cancelled with its call; and a
    /// task picked up from its entry takes the entry with it when it ends.
    #[test]
    fn a_private_ledger_keeps_only_the_tasks_left_behind() {
        let ledger = Arc::new(crate::client::ledger::MemoryLedger::new());
        let writer = Writer::new(ledger.clone());
        let mut records = Records::new(
            writer.clone(),
            "http://h/mcp",
            false,
            Scope::TasksLeftBehind,
        );
        let [left, finished, plain, dropped] = [(); 4].map(|()| CallId::next());
        records.task_created(left, "t-left");
        records.task_created(finished, "t-finished");
        records.task_finished(finished);
        records.task_created(dropped, "t-dropped");
        assert!(records.ended(left, false, false));
        assert!(!records.ended(finished, false, false));
        assert!(!records.ended(plain, false, false));
        assert!(!records.ended(dropped, true, false));
        writer.kick();
        let held = ledger.entries().now_or_never().unwrap().unwrap();
        assert_eq!(held.len(), 1, "{held:?}");
        assert_eq!(
            held[0].stage(),
            &CallStage::Task {
                task_id: "t-left".into()
            }
        );

        let picked = CallId::next();
        records.adopt(picked, held[0].id().clone(), SystemTime::now(), true);
        records.task_finished(picked);
        assert!(records.ended(picked, false, false));
        writer.kick();
        assert!(ledger.is_empty());
    }

    /// Two calls in flight polling one task share its entry: whichever ends first, by the
    /// task's end or given up, leaves it to the other; the last decides, keeping it when it
    /// leaves the task behind and removing it otherwise, a claim on it passed along.
    #[test]
    fn a_shared_task_entry_is_the_last_calls_to_remove_or_keep() {
        let ledger = Arc::new(crate::client::ledger::MemoryLedger::new());
        let writer = Writer::new(ledger.clone());
        let mut records = Records::new(writer.clone(), "http://h/mcp", false, Scope::Calls);
        let now = (Instant::now(), SystemTime::now());
        let resume = |records: &mut Records, call| {
            let checkpoint = Checkpoint::new(TOOLS_CALL, None, now.0 + Duration::from_secs(60))
                .with_stage(CallStage::Task {
                    task_id: "t1".into(),
                });
            records.checkpoint(call, checkpoint, now);
        };

        let [finished, dropped, left] = [(); 3].map(|()| CallId::next());
        for call in [finished, dropped, left] {
            resume(&mut records, call);
        }
        writer.kick();
        assert_eq!(ledger.len(), 1, "one entry of the task");
        records.task_finished(finished);
        assert!(!records.ended(finished, false, false));
        assert!(!records.ended(dropped, true, false));
        writer.flush().now_or_never().unwrap();
        assert_eq!(ledger.len(), 1, "the last call still polls the task");
        assert!(!records.ended(left, false, false));
        writer.flush().now_or_never().unwrap();
        assert_eq!(ledger.len(), 1, "the last left the task behind");

        // Picked up, and resumed by its id meanwhile: the claim passes to the resumption,
        // which goes with the entry.
        let id = ledger.entries().now_or_never().unwrap().unwrap()[0].clone();
        assert!(writer.claim(&id));
        let (picked, resumed) = (CallId::next(), CallId::next());
        records.adopt(picked, id.id().clone(), id.deadline(), true);
        resume(&mut records, resumed);
        assert!(!records.ended(picked, true, false));
        assert!(writer.lock().releasing.is_empty(), "the claim is kept");
        records.task_finished(resumed);
        assert!(records.ended(resumed, false, false));
        writer.flush().now_or_never().unwrap();
        assert!(ledger.is_empty(), "the task ended with the last");
        assert!(
            !live().picked.contains_key(id.id()),
            "released once removed"
        );
    }

    /// Two clients of one process sharing a ledger, each polling one task, share its entry as
    /// two calls of one client do: the one whose call ends first with the task's end leaves it
    /// to the other's still in flight, which keeps it when it leaves the task behind. A client
    /// that stops with its call in flight leaves no count behind.
    #[test]
    fn a_task_entry_shared_by_two_clients_is_the_last_calls_to_remove_or_keep() {
        let ledger = Arc::new(crate::client::ledger::MemoryLedger::new());
        let records = || {
            let writer = Writer::new(ledger.clone());
            Records::new(writer, "http://h/mcp", false, Scope::Calls)
        };
        let (mut first, mut last) = (records(), records());
        let now = (Instant::now(), SystemTime::now());
        let resume = |records: &mut Records, call| {
            let checkpoint = Checkpoint::new(TOOLS_CALL, None, now.0 + Duration::from_secs(60))
                .with_stage(CallStage::Task {
                    task_id: "t2".into(),
                });
            records.checkpoint(call, checkpoint, now);
        };

        let (finished, left) = (CallId::next(), CallId::next());
        resume(&mut first, finished);
        resume(&mut last, left);
        first.writer().kick();
        last.writer().kick();
        assert_eq!(ledger.len(), 1, "one entry of the task");
        first.task_finished(finished);
        assert!(!first.ended(finished, false, false));
        first.writer().flush().now_or_never().unwrap();
        assert_eq!(
            ledger.len(),
            1,
            "the other client's call still polls the task"
        );
        assert!(!last.ended(left, false, false));
        last.writer().flush().now_or_never().unwrap();
        assert_eq!(ledger.len(), 1, "the last left the task behind");

        // A client stopped with its call in flight: the entry is the other's again to remove.
        let (stopped, finished) = (CallId::next(), CallId::next());
        resume(&mut first, stopped);
        resume(&mut last, finished);
        drop(first);
        last.task_finished(finished);
        assert!(last.ended(finished, false, false));
        last.writer().flush().now_or_never().unwrap();
        assert!(
            ledger.is_empty(),
            "the task ended with the last call in flight"
        );
    }

    /// Refuses the puts of task-named entries while `refuse` is set.
    #[derive(Default)]
    struct RefusesTasks {
        inner: crate::client::ledger::MemoryLedger,
        refuse: AtomicBool,
    }

    impl Ledger for RefusesTasks {
        fn put(&self, entry: LedgerEntry) -> BoxFuture<'_, Result<(), Error>> {
            if self.refuse.load(Ordering::SeqCst) && entry.id().as_str().starts_with("task-") {
                return Box::pin(async { Err(Error::new(ErrorKind::Ledger, "unavailable")) });
            }
            self.inner.put(entry)
        }

        fn remove(&self, id: EntryId) -> BoxFuture<'_, Result<(), Error>> {
            self.inner.remove(id)
        }

        fn entries(&self) -> BoxFuture<'_, Result<Vec<LedgerEntry>, Error>> {
            self.inner.entries()
        }
    }

    /// A call that becomes a task moves its entry to the task's id, and its own entry goes
    /// only once the task's is written: while that write fails, the call's entry stays (it
    /// names the task) and the client counts it as being written; once it succeeds, the
    /// ledger holds the task's entry alone.
    #[tokio::test(start_paused = true)]
    async fn a_calls_entry_moves_to_its_tasks_only_once_that_is_written() {
        let ledger = Arc::new(RefusesTasks::default());
        let writer = Writer::new(ledger.clone());
        let mut records = Records::new(writer.clone(), "http://h/mcp", false, Scope::Calls);
        let now = (Instant::now(), SystemTime::now());
        let call = CallId::next();
        let deadline = now.0 + Duration::from_secs(60);
        records.checkpoint(call, Checkpoint::new("tools/call", None, deadline), now);
        writer.kick();
        let old = records.calls[&call].id.clone();
        assert!(ledger.inner.entries().now_or_never().unwrap().unwrap()[0].id() == &old);

        ledger.refuse.store(true, Ordering::SeqCst);
        let task = CallStage::Task {
            task_id: "t1".into(),
        };
        let checkpoint = Checkpoint::new("tools/call", None, deadline).with_stage(task.clone());
        records.checkpoint(call, checkpoint, now);
        writer.kick();
        let held = ledger.inner.entries().now_or_never().unwrap().unwrap();
        assert_eq!(held.len(), 1, "the task's entry is not written yet");
        assert_eq!((held[0].id(), held[0].stage()), (&old, &task));
        assert!(writer.is_writing(&old), "the call's entry is still moving");

        ledger.refuse.store(false, Ordering::SeqCst);
        tokio::time::timeout(Duration::from_secs(5), writer.flush())
            .await
            .unwrap();
        let held = ledger.inner.entries().now_or_never().unwrap().unwrap();
        let keyed = EntryId::of_task(&EntryEndpoint::of("http://h/mcp"), "t1");
        assert_eq!(held.len(), 1, "{held:?}");
        assert_eq!((held[0].id(), held[0].stage()), (&keyed, &task));
        assert!(!writer.is_writing(&old));
    }

    /// Holds the puts of entries not keyed by a task while `hold` is set, until `go` (each
    /// made once let go), and fails the next `fail` of them: a call's entry whose rewrite is
    /// slow or fails, and the instants between two writes a crash would leave the ledger at.
    #[derive(Default)]
    struct HoldsCalls {
        inner: crate::client::ledger::MemoryLedger,
        hold: AtomicBool,
        fail: std::sync::atomic::AtomicUsize,
        go: Notify,
    }

    impl Ledger for HoldsCalls {
        fn put(&self, entry: LedgerEntry) -> BoxFuture<'_, Result<(), Error>> {
            if entry.id().as_str().starts_with("task-") {
                return self.inner.put(entry);
            }
            let failing = self
                .fail
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if failing {
                return Box::pin(async { Err(Error::new(ErrorKind::Ledger, "unavailable")) });
            }
            let hold = self.hold.load(Ordering::SeqCst);
            Box::pin(async move {
                if hold {
                    self.go.notified().await;
                }
                self.inner.put(entry).await
            })
        }

        fn remove(&self, id: EntryId) -> BoxFuture<'_, Result<(), Error>> {
            self.inner.remove(id)
        }

        fn entries(&self) -> BoxFuture<'_, Result<Vec<LedgerEntry>, Error>> {
            self.inner.entries()
        }
    }

    /// What a recovery reading `ledger` now (a process that died now) would find of a call
    /// that became task `t1`: a task's entry never stands beside an entry of the call that
    /// does not name the task (the call would be made again or reported unknown, and its
    /// task recovered too).
    fn assert_one_call(ledger: &crate::client::ledger::MemoryLedger, at: &str) {
        let held = ledger.entries().now_or_never().unwrap().unwrap();
        let task = CallStage::Task {
            task_id: "t1".into(),
        };
        if held.iter().any(|e| e.id().as_str().starts_with("task-")) {
            for e in &held {
                assert_eq!(e.stage(), &task, "{at}: {held:?}");
            }
        }
        assert!(!held.is_empty(), "{at}: the call has an entry");
    }

    /// A call that becomes a task has its own entry name the task before the task's entry is
    /// written: whatever instant the process dies at, the ledger never holds the call's
    /// entry at its send beside the task's, a call a recovery would surface twice. A rewrite
    /// of the call's entry that fails holds the task's back until it is tried again and
    /// succeeds.
    #[tokio::test(start_paused = true)]
    async fn a_calls_entry_names_its_task_before_the_tasks_entry_is_written() {
        let ledger = Arc::new(HoldsCalls::default());
        let writer = Writer::new(ledger.clone());
        let run = tokio::spawn(writer.clone().run());
        let mut records = Records::new(writer.clone(), "http://h/mcp", false, Scope::Calls);
        let now = (Instant::now(), SystemTime::now());
        let deadline = now.0 + Duration::from_secs(60);
        let became_task = |records: &mut Records, call| {
            let task = CallStage::Task {
                task_id: "t1".into(),
            };
            let checkpoint = Checkpoint::new("tools/call", None, deadline).with_stage(task);
            records.checkpoint(call, checkpoint, now);
        };

        // Its rewrite slow: the task's entry waits for it.
        let call = CallId::next();
        records.checkpoint(call, Checkpoint::new("tools/call", None, deadline), now);
        writer.kick();
        ledger.hold.store(true, Ordering::SeqCst);
        became_task(&mut records, call);
        writer.kick();
        tokio::task::yield_now().await;
        assert_one_call(&ledger.inner, "the call's rewrite held");
        ledger.go.notify_one();
        tokio::time::timeout(Duration::from_secs(5), writer.flush())
            .await
            .unwrap();
        assert_one_call(&ledger.inner, "moved");
        assert_eq!(ledger.inner.len(), 1);
        records.task_finished(call);
        assert!(records.ended(call, false, false));
        writer.flush().await;
        assert!(ledger.inner.is_empty());

        // Its rewrite failing: the task's entry waits until it is tried again and succeeds.
        ledger.hold.store(false, Ordering::SeqCst);
        let call = CallId::next();
        records.checkpoint(call, Checkpoint::new("tools/call", None, deadline), now);
        writer.kick();
        ledger.fail.store(2, Ordering::SeqCst);
        became_task(&mut records, call);
        writer.kick();
        assert_one_call(&ledger.inner, "the call's rewrite failed");
        tokio::time::timeout(Duration::from_secs(60), async {
            while ledger.fail.load(Ordering::SeqCst) > 0 {
                assert_one_call(&ledger.inner, "the call's rewrite tried again");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .unwrap();
        tokio::time::timeout(Duration::from_secs(60), writer.flush())
            .await
            .unwrap();
        let held = ledger.inner.entries().now_or_never().unwrap().unwrap();
        assert_eq!(held.len(), 1, "{held:?}");
        assert!(held[0].id().as_str().starts_with("task-"));
        writer.close();
        run.await.unwrap();
    }

    /// A call dropped while its entry's rewrite naming its task is still under way: the
    /// task's entry, which waited for that rewrite, is not written after all (the call's
    /// entries go), so a process that dies then never leaves it beside the call's send.
    #[tokio::test]
    async fn a_call_dropped_mid_move_never_leaves_its_send_beside_its_task() {
        let ledger = Arc::new(HoldsCalls::default());
        let writer = Writer::new(ledger.clone());
        let mut records = Records::new(writer.clone(), "http://h/mcp", false, Scope::Calls);
        let now = (Instant::now(), SystemTime::now());
        let deadline = now.0 + Duration::from_secs(60);
        let call = CallId::next();
        records.checkpoint(call, Checkpoint::new("tools/call", None, deadline), now);
        writer.kick();
        ledger.hold.store(true, Ordering::SeqCst);
        let task = CallStage::Task {
            task_id: "t1".into(),
        };
        let checkpoint = Checkpoint::new("tools/call", None, deadline).with_stage(task);
        records.checkpoint(call, checkpoint, now);
        writer.kick();
        assert_one_call(&ledger.inner, "the call's rewrite held");
        assert!(records.ended(call, true, false));
        writer.kick();
        assert_one_call(&ledger.inner, "the call dropped mid-move");
    }

    /// A flush while the rewrite of a moved call's entry fails: it tries that rewrite once
    /// more and returns, the task's entry still waiting for a later try, instead of waiting
    /// out every retry.
    #[tokio::test]
    async fn a_flush_does_not_wait_out_a_failing_moves_retries() {
        let ledger = Arc::new(HoldsCalls::default());
        let writer = Writer::new(ledger.clone());
        let mut records = Records::new(writer.clone(), "http://h/mcp", false, Scope::Calls);
        let now = (Instant::now(), SystemTime::now());
        let deadline = now.0 + Duration::from_secs(60);
        let call = CallId::next();
        records.checkpoint(call, Checkpoint::new("tools/call", None, deadline), now);
        writer.kick();
        ledger.fail.store(usize::MAX, Ordering::SeqCst);
        let task = CallStage::Task {
            task_id: "t1".into(),
        };
        let checkpoint = Checkpoint::new("tools/call", None, deadline).with_stage(task);
        records.checkpoint(call, checkpoint, now);
        writer.kick();
        tokio::time::timeout(Duration::from_secs(5), writer.flush())
            .await
            .expect("the flush returned");
        assert_one_call(&ledger.inner, "the call's rewrite failing");
    }

    /// A move whose writes of the task's entry were given up on still takes the call's entry
    /// away when the call ends (its outcome delivered, nothing of it is left to recover); a
    /// call that leaves its task behind keeps it, the task's one entry, for a recovery of
    /// this client's to take.
    #[tokio::test(start_paused = true)]
    async fn a_move_given_up_on_removes_the_calls_entry_when_it_ends() {
        let ledger = Arc::new(RefusesTasks::default());
        let writer = Writer::new(ledger.clone());
        let run = tokio::spawn(writer.clone().run());
        let mut records = Records::new(writer.clone(), "http://h/mcp", false, Scope::Calls);
        let now = (Instant::now(), SystemTime::now());
        let deadline = now.0 + Duration::from_secs(60);
        let task = |task_id: &str| CallStage::Task {
            task_id: task_id.into(),
        };
        let [finished, left] = [(); 2].map(|()| CallId::next());
        for call in [finished, left] {
            records.checkpoint(call, Checkpoint::new("tools/call", None, deadline), now);
        }
        writer.kick();
        let old = |records: &Records, call| records.calls[&call].id.clone();
        let (finished_old, left_old) = (old(&records, finished), old(&records, left));

        ledger.refuse.store(true, Ordering::SeqCst);
        for (call, task_id) in [(finished, "t1"), (left, "t2")] {
            let checkpoint =
                Checkpoint::new("tools/call", None, deadline).with_stage(task(task_id));
            records.checkpoint(call, checkpoint, now);
        }
        writer.kick();
        for _ in 0..MAX_RETRIES * 2 {
            tokio::time::sleep(LONGEST_RETRY).await;
        }
        assert!(writer.lock().retries.is_empty(), "given up");
        ledger.refuse.store(false, Ordering::SeqCst);

        records.task_finished(finished);
        assert!(records.ended(finished, false, false));
        tokio::time::timeout(Duration::from_secs(60), writer.flush())
            .await
            .unwrap();
        let held = ledger.inner.entries().now_or_never().unwrap().unwrap();
        assert!(
            held.iter().all(|e| e.id() != &finished_old),
            "the ended call's entry went: {held:?}"
        );

        assert!(!records.ended(left, false, false), "left behind");
        tokio::time::timeout(Duration::from_secs(60), writer.flush())
            .await
            .unwrap();
        let held = ledger.inner.entries().now_or_never().unwrap().unwrap();
        assert_eq!(held.len(), 1, "{held:?}");
        assert_eq!((held[0].id(), held[0].stage()), (&left_old, &task("t2")));
        assert!(!records.holds(&left_old), "a recovery may take it");
        writer.close();
        run.await.unwrap();
    }

    /// A task resumed by its id has one entry whatever number of calls poll it: a second
    /// resumption rewrites the first's, and the removal the first left when the application
    /// dropped it (held back for the writer task) does not take the second's entry.
    #[tokio::test]
    async fn a_task_resumed_again_keeps_one_entry() {
        let ledger = Arc::new(crate::client::ledger::MemoryLedger::new());
        let writer = Writer::new(ledger.clone());
        let mut records = Records::new(writer.clone(), "http://h/mcp", false, Scope::Calls);
        let now = (Instant::now(), SystemTime::now());
        let resume = |records: &mut Records, call| {
            let checkpoint = Checkpoint::new("tools/call", None, now.0 + Duration::from_secs(60))
                .with_stage(CallStage::Task {
                    task_id: "t1".into(),
                });
            records.checkpoint(call, checkpoint, now);
        };
        let (failed, dropped, again) = (CallId::next(), CallId::next(), CallId::next());
        resume(&mut records, failed);
        assert!(!records.ended(failed, false, false), "left behind");
        resume(&mut records, dropped);
        assert!(records.ended(dropped, true, false));
        resume(&mut records, again);
        assert!(!records.ended(again, false, false), "left behind");
        writer.flush().await;
        let held = ledger.entries().await.unwrap();
        assert_eq!(held.len(), 1, "{held:?}");
        assert_eq!(
            held[0].id(),
            &EntryId::of_task(&EntryEndpoint::of("http://h/mcp"), "t1")
        );
    }

    /// A call picked up holds its entry against every other recovery while it runs, and
    /// gives it back when it ends: once its removal is done (no recovery takes an entry
    /// whose call ended here while the ledger still holds it), at once when the entry stays.
    #[test]
    fn a_picked_up_calls_claim_goes_when_it_ends() {
        let ledger = Arc::new(crate::client::ledger::MemoryLedger::new());
        let (writer, other) = (Writer::new(ledger.clone()), Writer::new(ledger.clone()));
        let mut records = Records::new(writer.clone(), "http://h/mcp", false, Scope::Calls);
        let (removed, kept) = (entry("picked-1"), entry("picked-2"));
        for e in [&removed, &kept] {
            ledger.put(e.clone()).now_or_never().unwrap().unwrap();
            assert!(writer.claim(e));
            assert!(!other.claim(e), "claimed");
        }
        let (first, second) = (CallId::next(), CallId::next());
        records.adopt(first, removed.id().clone(), SystemTime::now(), false);
        records.adopt(second, kept.id().clone(), SystemTime::now(), true);

        assert!(records.ended(first, false, false));
        assert!(!other.claim(&removed), "held until the removal is done");
        writer.kick();
        assert!(!live().picked.contains_key(removed.id()));

        assert!(
            !records.ended(second, false, false),
            "a task left behind keeps its entry"
        );
        assert!(other.claim(&kept), "given back at once");
        other.unclaim(kept.id());
    }

    /// A client that closes with the removals of ended calls' entries still to make keeps
    /// those entries from every other client of the process until the removals are done:
    /// the application has those calls' outcomes.
    #[tokio::test]
    async fn a_closing_client_keeps_its_ended_calls_until_their_removal() {
        let ledger = Arc::new(crate::client::ledger::MemoryLedger::new());
        let (writer, other) = (Writer::new(ledger.clone()), Writer::new(ledger.clone()));
        let mut records = Records::new(writer.clone(), "http://h/mcp", false, Scope::Calls);
        let now = (Instant::now(), SystemTime::now());
        let own = CallId::next();
        let checkpoint = Checkpoint::new("tools/call", None, now.0 + Duration::from_secs(60));
        records.checkpoint(own, checkpoint, now);
        writer.kick();
        let written = ledger.entries().now_or_never().unwrap().unwrap().remove(0);
        let picked = entry("picked-1");
        ledger.put(picked.clone()).now_or_never().unwrap().unwrap();
        assert!(writer.claim(&picked));
        let adopted = CallId::next();
        records.adopt(adopted, picked.id().clone(), picked.deadline(), false);

        assert!(records.ended(own, false, false));
        assert!(records.ended(adopted, false, false));
        writer.close();
        for e in [&written, &picked] {
            assert!(!other.claim(e), "its removal is not done yet");
        }
        let task = tokio::spawn(writer.clone().run());
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap();
        assert!(ledger.is_empty());
        for e in [&written, &picked] {
            assert!(other.claim(e), "released once removed");
            other.unclaim(e.id());
        }
    }

    /// An ended call's entry is known as ended until its removal is done, or, if a recovery
    /// was reading then, until no recovery reads: never for longer.
    #[test]
    fn an_ended_calls_entry_is_known_until_no_read_can_hold_it() {
        let ledger = Arc::new(crate::client::ledger::MemoryLedger::new());
        let writer = Writer::new(ledger.clone());
        let mut records = Records::new(writer.clone(), "http://h/mcp", false, Scope::Calls);
        let now = (Instant::now(), SystemTime::now());
        let [quiet, read] = [(); 2].map(|()| {
            let call = CallId::next();
            let checkpoint = Checkpoint::new("tools/call", None, now.0 + Duration::from_secs(60));
            records.checkpoint(call, checkpoint, now);
            call
        });
        writer.kick();
        let id = |call| records.calls[&call].id.clone();
        let (quiet_id, read_id) = (id(quiet), id(read));

        assert!(records.ended(quiet, false, false));
        assert!(records.holds(&quiet_id), "its removal is queued, not done");
        writer.kick();
        assert!(!records.holds(&quiet_id), "removed, and no recovery reads");

        let reading = writer.reading();
        assert!(records.ended(read, false, false));
        writer.kick();
        assert!(ledger.is_empty());
        assert!(records.holds(&read_id), "the read may have seen it");
        drop(reading);
        assert!(!records.holds(&read_id));
        assert!(writer.lock().done_while_read.is_empty());
    }

    /// Fails its next `fail` puts, counting them all, and every removal when `fail_removes`.
    #[derive(Default)]
    struct Flaky {
        inner: crate::client::ledger::MemoryLedger,
        fail: std::sync::atomic::AtomicUsize,
        puts: std::sync::atomic::AtomicUsize,
        fail_removes: AtomicBool,
    }

    impl Ledger for Flaky {
        fn put(&self, entry: LedgerEntry) -> BoxFuture<'_, Result<(), Error>> {
            self.puts.fetch_add(1, Ordering::SeqCst);
            let failing = self
                .fail
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if failing {
                return Box::pin(async { Err(Error::new(ErrorKind::Ledger, "unavailable")) });
            }
            self.inner.put(entry)
        }

        fn remove(&self, id: EntryId) -> BoxFuture<'_, Result<(), Error>> {
            if self.fail_removes.load(Ordering::SeqCst) {
                return Box::pin(async { Err(Error::new(ErrorKind::Ledger, "unavailable")) });
            }
            self.inner.remove(id)
        }

        fn entries(&self) -> BoxFuture<'_, Result<Vec<LedgerEntry>, Error>> {
            self.inner.entries()
        }
    }

    /// A failed write no POST waits for is tried again (by the writer task when it is due,
    /// at once by a flush), a bounded number of times, and never once a later write of its
    /// entry was queued: that one is the entry as it stands.
    #[tokio::test(start_paused = true)]
    async fn a_failed_write_is_tried_again_unless_a_later_one_supersedes_it() {
        let ledger = Arc::new(Flaky::default());
        let writer = Writer::new(ledger.clone());
        let task = tokio::spawn(writer.clone().run());
        let id = EntryId::parse("e-1").unwrap();

        // Tried again by the writer task, once due.
        ledger.fail.store(1, Ordering::SeqCst);
        writer.queue(id.clone(), Write::Put(entry("e-1")), None);
        writer.kick();
        assert!(ledger.inner.is_empty());
        // The clock is paused: it moves only when every task waits, and then to the next
        // timer (the retry's, before this loop's).
        tokio::time::timeout(Duration::from_secs(60), async {
            while ledger.inner.is_empty() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .unwrap();
        assert_eq!(ledger.puts.load(Ordering::SeqCst), 2);

        // Superseded: the removal queued after the failed put is the entry as it stands.
        ledger.fail.store(1, Ordering::SeqCst);
        writer.queue(id.clone(), Write::Put(entry("e-1")), None);
        writer.kick();
        writer.queue(id.clone(), Write::Remove(id.clone()), None);
        writer.kick();
        writer.flush().await;
        tokio::time::sleep(LONGEST_RETRY * 2).await;
        writer.flush().await;
        assert!(ledger.inner.is_empty(), "the failed put was not made after");
        assert_eq!(ledger.puts.load(Ordering::SeqCst), 3);

        // Bounded: a ledger that always fails is tried `MAX_RETRIES` times more, no more.
        ledger.fail.store(usize::MAX, Ordering::SeqCst);
        writer.queue(id.clone(), Write::Put(entry("e-1")), None);
        writer.kick();
        for _ in 0..MAX_RETRIES * 2 {
            writer.flush().await;
        }
        assert_eq!(
            ledger.puts.load(Ordering::SeqCst),
            3 + 1 + MAX_RETRIES as usize
        );
        assert!(writer.lock().retries.is_empty());
        writer.close();
        task.await.unwrap();
    }

    /// Never finishes a put of an entry named `stuck…`, and panics when such a put is dropped.
    #[derive(Default)]
    struct PanicsOnDrop {
        inner: crate::client::ledger::MemoryLedger,
    }

    struct Bomb;

    impl Drop for Bomb {
        fn drop(&mut self) {
            panic!("a ledger's bug in a drop");
        }
    }

    impl Ledger for PanicsOnDrop {
        fn put(&self, entry: LedgerEntry) -> BoxFuture<'_, Result<(), Error>> {
            if !entry.id().as_str().starts_with("stuck") {
                return self.inner.put(entry);
            }
            Box::pin(async move {
                let _bomb = Bomb;
                std::future::pending::<()>().await;
                Ok(())
            })
        }

        fn remove(&self, id: EntryId) -> BoxFuture<'_, Result<(), Error>> {
            self.inner.remove(id)
        }

        fn entries(&self) -> BoxFuture<'_, Result<Vec<LedgerEntry>, Error>> {
            self.inner.entries()
        }
    }

    /// A write the ledger never finishes is dropped after [`WRITE_TIMEOUT`]; one that panics
    /// as it is dropped costs that write, never the writer task every later write of the
    /// client goes through.
    #[tokio::test(start_paused = true)]
    async fn a_write_that_panics_when_dropped_costs_only_itself() {
        let ledger = Arc::new(PanicsOnDrop::default());
        let writer = Writer::new(ledger.clone());
        let task = tokio::spawn(writer.clone().run());
        let stuck = EntryId::parse("stuck-1").unwrap();
        let gate = Gate::new();
        writer.queue(stuck, Write::Put(entry("stuck-1")), Some(gate.clone()));
        writer.kick();
        let waited = tokio::time::timeout(WRITE_TIMEOUT * 2, gate.wait()).await;
        assert!(
            matches!(waited, Ok(Err(_))),
            "the write failed at its timeout"
        );

        let fine = EntryId::parse("fine-1").unwrap();
        let gate = Gate::new();
        writer.queue(fine, Write::Put(entry("fine-1")), Some(gate.clone()));
        writer.kick();
        writer.nudge();
        tokio::time::timeout(Duration::from_secs(60), gate.wait())
            .await
            .expect("the writer still writes")
            .unwrap();
        assert_eq!(ledger.inner.len(), 1);
        assert!(!task.is_finished(), "the writer task lives");
        writer.close();
        task.await.expect("the writer task ended without a panic");
    }

    /// An ended call whose entry's removal was given up on is still known as ended until the
    /// entry expires: a later recovery of the same client never makes it again (the
    /// application has its outcome).
    #[tokio::test(start_paused = true)]
    async fn a_removal_given_up_on_is_known_until_the_entry_expires() {
        let ledger = Arc::new(Flaky::default());
        let writer = Writer::new(ledger.clone());
        let task = tokio::spawn(writer.clone().run());
        let mut records = Records::new(writer.clone(), "http://h/mcp", false, Scope::Calls);
        let picked = entry("picked-1");
        ledger
            .inner
            .put(picked.clone())
            .now_or_never()
            .unwrap()
            .unwrap();
        assert!(writer.claim(&picked));
        let call = CallId::next();
        records.adopt(call, picked.id().clone(), picked.deadline(), false);

        ledger.fail_removes.store(true, Ordering::SeqCst);
        assert!(records.ended(call, false, false));
        writer.kick();
        for _ in 0..MAX_RETRIES * 2 {
            tokio::time::sleep(LONGEST_RETRY).await;
        }
        assert!(writer.lock().retries.is_empty(), "given up");
        assert_eq!(ledger.inner.len(), 1, "the ledger still holds it");
        assert!(records.holds(picked.id()), "its call ended here");
        writer.close();
        task.await.unwrap();
    }

    /// The removal of a dropped call's entry waits for the writer task or a flush: another
    /// task's kick (a call's future dropped by a runtime that stops) never makes it, and an
    /// ended call's removal is not held up behind it.
    #[tokio::test]
    async fn a_dropped_calls_removal_waits_for_the_writer_task() {
        let ledger = Arc::new(crate::client::ledger::MemoryLedger::new());
        let writer = Writer::new(ledger.clone());
        let mut records = Records::new(writer.clone(), "http://h/mcp", false, Scope::Calls);
        let (dropped, ended) = (CallId::next(), CallId::next());
        let now = (Instant::now(), SystemTime::now());
        for call in [dropped, ended] {
            let checkpoint = Checkpoint::new("tools/call", None, now.0 + Duration::from_secs(60));
            records.checkpoint(call, checkpoint, now);
        }
        writer.kick();
        assert_eq!(ledger.len(), 2);
        assert!(records.ended(dropped, true, false));
        assert!(records.ended(ended, false, false));
        writer.kick();
        assert_eq!(ledger.len(), 1, "only the ended call's entry went");
        tokio::time::timeout(Duration::from_secs(5), writer.flush())
            .await
            .unwrap();
        assert!(ledger.is_empty(), "a flush made the dropped call's removal");
    }

    /// One entry's writes in order, another's not held up behind them; a gate opens when its
    /// write has finished, not before.
    #[tokio::test]
    async fn writes_keep_each_entrys_order_and_no_other_waits() {
        let ledger = Arc::new(Held::default());
        let writer = Writer::new(ledger.clone());
        tokio::spawn(writer.clone().run());
        let held = Gate::new();
        let (slow, fast) = (
            EntryId::parse("slow-1").unwrap(),
            EntryId::parse("fast-1").unwrap(),
        );
        writer.queue(
            slow.clone(),
            Write::Put(entry("slow-1")),
            Some(held.clone()),
        );
        writer.queue(slow.clone(), Write::Remove(slow), None);
        let open = Gate::new();
        writer.queue(
            fast.clone(),
            Write::Put(entry("fast-1")),
            Some(open.clone()),
        );
        writer.queue(fast.clone(), Write::Remove(fast), None);
        writer.kick();
        assert!(open.is_open(), "the other entry's write is not held up");
        assert!(!held.is_open());
        assert_eq!(
            *ledger.log.lock().unwrap(),
            ["put slow-1", "put fast-1", "remove fast-1"],
            "the held entry's removal waits behind its put"
        );
        ledger.go.notify_one();
        tokio::time::timeout(Duration::from_secs(5), held.wait())
            .await
            .unwrap()
            .unwrap();
        tokio::time::timeout(Duration::from_secs(5), async {
            while ledger.log.lock().unwrap().len() < 4 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .unwrap();
        assert_eq!(ledger.log.lock().unwrap()[3], "remove slow-1");
        writer.close();
    }

    /// An entry longer than the ledger stores is never written: a POST waiting for it is told
    /// that no write of it can succeed, and a write no POST waits for is dropped, not tried
    /// again; an entry at the bound is written.
    #[tokio::test(start_paused = true)]
    async fn an_entry_longer_than_the_ledger_stores_is_never_written() {
        let at_bound = entry("fits").to_json().to_string().len();
        let ledger = Arc::new(Held {
            max: Some(at_bound),
            ..Held::default()
        });
        let writer = Writer::new(ledger.clone());
        let task = tokio::spawn(writer.clone().run());
        let long = |id: &str| {
            let checkpoint = Checkpoint::new(
                "tools/call",
                Some(serde_json::json!({"x": "y"})),
                Instant::now(),
            );
            LedgerEntry::from_checkpoint(
                EntryId::parse(id).unwrap(),
                &EntryEndpoint::of("http://h/mcp"),
                checkpoint,
                SystemTime::now() + Duration::from_secs(60),
                false,
                SystemTime::now(),
            )
        };
        let gate = Gate::new();
        let gated = EntryId::parse("long-1").unwrap();
        writer.queue(gated, Write::Put(long("long-1")), Some(gate.clone()));
        writer.queue(
            EntryId::parse("long-2").unwrap(),
            Write::Put(long("long-2")),
            None,
        );
        writer.queue(
            EntryId::parse("fits").unwrap(),
            Write::Put(entry("fits")),
            None,
        );
        writer.kick();
        let Err(Refusal::TooLong(err)) = gate.wait().await else {
            panic!("the gate did not say the entry is too long");
        };
        assert_eq!(err.kind(), ErrorKind::Ledger, "{err}");
        assert!(err.to_string().contains("longer than"), "{err}");
        // Past every retry's backoff: nothing was tried again.
        tokio::time::sleep(LONGEST_RETRY * (MAX_RETRIES + 1)).await;
        writer.flush().await;
        assert_eq!(*ledger.log.lock().unwrap(), ["put fits"]);
        writer.close();
        task.await.unwrap();
    }

    /// A write that never finishes counts as failed after [`WRITE_TIMEOUT`] (its gate says
    /// so, the entry's next write starts), and once the client has stopped the writer task
    /// gives up on one after [`CLOSE_GRACE`] and ends.
    #[tokio::test(start_paused = true)]
    async fn a_write_that_never_finishes_is_bounded() {
        let ledger = Arc::new(Held::default());
        let writer = Writer::new(ledger.clone());
        let task = tokio::spawn(writer.clone().run());
        let slow = EntryId::parse("slow-1").unwrap();
        let gate = Gate::new();
        writer.queue(
            slow.clone(),
            Write::Put(entry("slow-1")),
            Some(gate.clone()),
        );
        writer.queue(slow.clone(), Write::Remove(slow), None);
        writer.kick();
        let started = tokio::time::Instant::now();
        let Refusal::Failed(err) = gate.wait().await.unwrap_err() else {
            panic!("a write that timed out taken for one that cannot succeed");
        };
        assert_eq!(err.kind(), ErrorKind::Ledger, "{err}");
        assert_eq!(started.elapsed(), WRITE_TIMEOUT);
        writer.flush().await;
        assert_eq!(*ledger.log.lock().unwrap(), ["put slow-1", "remove slow-1"]);

        writer.queue(
            EntryId::parse("slow-2").unwrap(),
            Write::Put(entry("slow-2")),
            None,
        );
        writer.kick();
        writer.close();
        let closed = tokio::time::Instant::now();
        task.await.unwrap();
        assert_eq!(closed.elapsed(), CLOSE_GRACE);
        assert!(writer.lock().running.is_empty());
        assert_eq!(Arc::strong_count(&ledger), 2, "the test's and the writer's");
    }

    /// A flush returns once the writes queued before it have finished, not before: what a
    /// recovery reads right after a call ended includes that call's last write.
    #[tokio::test]
    async fn a_flush_waits_for_the_writes_queued_before_it() {
        let ledger = Arc::new(Held::default());
        let writer = Writer::new(ledger.clone());
        tokio::spawn(writer.clone().run());
        let slow = EntryId::parse("slow-1").unwrap();
        writer.queue(slow.clone(), Write::Put(entry("slow-1")), None);
        writer.queue(slow.clone(), Write::Remove(slow), None);
        let flush = writer.flush();
        tokio::pin!(flush);
        assert!(
            (&mut flush).now_or_never().is_none(),
            "the put is held: the flush waits"
        );
        ledger.go.notify_one();
        tokio::time::timeout(Duration::from_secs(5), flush)
            .await
            .unwrap();
        assert_eq!(
            *ledger.log.lock().unwrap(),
            ["put slow-1", "remove slow-1"],
            "both writes were made before the flush returned"
        );
        writer.close();
    }
}
