//! [`Client::recover`]: the calls a stopped process left in flight, made calls again.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use serde_json::Value;
use tokio::sync::oneshot;

use super::client::Client;
use super::driver::{Command, Contained, Registration};
use super::handle::CallHandle;
use super::ledger::{EntryEndpoint, EntryId, LedgerEntry, TASK_RETENTION};
use crate::error::{Error, ErrorKind};
use crate::proto::{CallId, CallStage};

/// A call [`Client::recover`] picked up: what its ledger entry says, and its outcome.
///
/// Await it for the result (the raw JSON-RPC `result`;
/// [`CallToolResult::from_value`](super::CallToolResult::from_value) reads a tool's). An
/// unkeyed call whose request may have run ends [`ErrorKind::OutcomeUnknown`] at once, never
/// re-sent: its [`entry`](RecoveredCall::entry) says which method, with which arguments.
#[must_use = "dropping a RecoveredCall cancels its call"]
pub struct RecoveredCall {
    entry: LedgerEntry,
    handle: CallHandle<Value>,
}

impl std::fmt::Debug for RecoveredCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecoveredCall")
            .field("id", &self.handle.id())
            .field("entry", &self.entry.id())
            .field("method", &self.entry.method())
            .finish_non_exhaustive()
    }
}

impl RecoveredCall {
    /// The call's id in this client's events and notifications.
    pub fn id(&self) -> CallId {
        self.handle.id()
    }

    /// The ledger entry it was picked up from: method, params, key, stage.
    pub fn entry(&self) -> &LedgerEntry {
        &self.entry
    }

    /// The entry and the call's handle, apart.
    pub fn into_parts(self) -> (LedgerEntry, CallHandle<Value>) {
        (self.entry, self.handle)
    }
}

impl Future for RecoveredCall {
    type Output = Result<Value, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.handle).poll(cx)
    }
}

impl Client {
    /// Picks up every call the ledger holds for this client's endpoint (the URL it was given,
    /// query and user info included) and that this client does not have in flight: the calls a process (or a client) that stopped left behind.
    /// Within the process, the calls of another client that still runs on the same ledger
    /// (its own, or ones it picked up) are left to it (a closed one no longer runs, dropped or
    /// not: what it left is picked up); across processes nothing tells a live
    /// one from a dead one, so one ledger name belongs to one process at a time.
    /// **The one way a fleet restarts**: build the client on the same ledger (for a fleet, a
    /// `RedisLedger` under the worker's stable name) and call this before anything else.
    ///
    /// Each entry becomes a call again, by the rule that governs every interruption:
    /// - a call whose request may have run is re-sent under its own idempotency key (an MRTR
    ///   round's, for a round) when the server deduplicates keys, or the application said it
    ///   does ([`ResendPolicy::AssumeServerDeduplicates`](crate::ResendPolicy)); without a
    ///   key, or to a server that ignores keys, it ends [`ErrorKind::OutcomeUnknown`] and is
    ///   never re-sent (an unkeyed one at once, without connecting);
    /// - a call that was waiting for the application's answers to an MRTR round asks this
    ///   client's handlers again, then sends the round;
    /// - a call that became a task is polled until the task ends, once however many entries
    ///   name the task (the extra ones go when it is picked up).
    ///
    /// Each call ends by its recorded deadline (a task whose call's deadline passed gets
    /// [`ClientBuilder::call_timeout`](super::ClientBuilder::call_timeout) more), and never
    /// later than [`TASK_RETENTION`](super::ledger::TASK_RETENTION) from now or the call
    /// timeout, whichever is longer (a deadline further off is damage or a hostile write);
    /// its entry goes once it has ended. A closed client ([`Client::close`]) fails with
    /// [`ErrorKind::Closed`] and picks up nothing, leaving every entry to the next client (a
    /// call it had picked up when the close came fails `Closed`, may have run, its entry
    /// left too). A ledger that cannot be read (it fails, panics, or has
    /// not answered within the call timeout) fails with [`ErrorKind::Ledger`]; without a ledger ([`super::ClientBuilder::no_ledger`]) there is nothing
    /// to recover.
    ///
    /// ```no_run
    /// # async fn run(client: mcp_resume::Client) -> mcp_resume::Result<()> {
    /// use mcp_resume::ErrorKind;
    ///
    /// for call in client.recover().await? {
    ///     let entry = call.entry().clone();
    ///     match call.await {
    ///         Ok(result) => println!("{} finished: {result}", entry.method()),
    ///         Err(e) if e.kind() == ErrorKind::OutcomeUnknown => {
    ///             eprintln!("{:?} {:?} may or may not have run", entry.tool_name(), entry.arguments())
    ///         }
    ///         Err(e) => eprintln!("{} failed: {e}", entry.method()),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn recover(&self) -> Result<Vec<RecoveredCall>, Error> {
        self.start_driver()?;
        let core = self.core().clone();
        // A closed client takes nothing: every entry is left, unclaimed, to the next client
        // (and one without a ledger says it is closed, as every other client does).
        let (reply, open) = oneshot::channel();
        core.command(Command::EnsureOpen { reply })?;
        open.await.map_err(|_| {
            Error::new(
                ErrorKind::Closed,
                "the client's driver stopped before the recovery began",
            )
        })??;
        let Some(writer) = core.writer.clone() else {
            return Ok(Vec::new());
        };
        // This client's own latest writes first (a call that just ended may have its entry's
        // last write queued), within a call's time: a ledger that never finishes a write
        // delays the recovery, it does not hold it.
        let _ = tokio::time::timeout(self.call_timeout(), writer.flush()).await;
        // The read too is bounded by a call's time, and guarded whole (what the ledger runs
        // before handing out its future included): a ledger that hangs or panics fails the
        // recovery with `Ledger`, it does not hold the process that is starting.
        // From before the read to the last pick-up, a call of this client's that ends is
        // known as ended, its removal done or not: the read may have seen its entry first.
        let _reading = writer.reading();
        let ledger = writer.ledger().clone();
        let read = async move {
            let work = std::pin::pin!(Some(async move { ledger.entries().await }));
            Contained::new(work, "the ledger's read").await
        };
        let entries = match tokio::time::timeout(self.call_timeout(), read).await {
            Ok(Ok(entries)) => entries?,
            Ok(Err(_)) => {
                return Err(Error::new(
                    ErrorKind::Ledger,
                    "the ledger panicked reading its entries",
                ))
            }
            Err(_) => {
                return Err(Error::new(
                    ErrorKind::Ledger,
                    "the ledger did not read its entries within the call timeout",
                ))
            }
        };
        let endpoint = EntryEndpoint::of(core.endpoint.url.as_str());
        let now = SystemTime::now();
        let unknown = entries
            .iter()
            .filter(|e| e.has_no_endpoint_digest() && !e.is_expired(now))
            .count();
        if unknown > 0 {
            // Whose they are cannot be told (another tenant's query, other credentials):
            // left to expire rather than re-sent where they may not belong.
            tracing::warn!(
                entries = unknown,
                "ledger entries of an earlier format name no endpoint digest: not recovered"
            );
        }
        let mut entries: Vec<LedgerEntry> = entries
            .into_iter()
            .filter(|e| e.is_for(&endpoint) && !e.is_expired(now))
            .collect();
        // Oldest deadline first: the order they were most likely made in.
        entries.sort_by_key(|e| e.deadline());
        let entries = one_per_task(entries, &endpoint);
        let mut recovered = Vec::with_capacity(entries.len());
        for (entry, duplicates) in entries {
            let Some(timeout) = pick_up_timeout(&entry, now, self.call_timeout()) else {
                continue;
            };
            // Another live client's call (its own, or one it picked up) is left to it.
            if !writer.claim(&entry) {
                continue;
            }
            // A task's other entries go with the one picked up, unless another client has
            // one of them, or this one writes it still (a call of its own moving to the
            // task's entry): then the task is in flight, and all of them are left.
            let mut claimed = Vec::with_capacity(duplicates.len());
            for duplicate in &duplicates {
                if writer.is_writing(duplicate.id()) || !writer.claim(duplicate) {
                    break;
                }
                claimed.push(duplicate);
            }
            if claimed.len() < duplicates.len() {
                for id in std::iter::once(&entry).chain(claimed).map(LedgerEntry::id) {
                    writer.unclaim(id);
                }
                continue;
            }
            let id = CallId::next();
            let (reply, rx) = oneshot::channel();
            let deadline = deadline_in(timeout);
            let registration = Registration::PickUp {
                id,
                entry: entry.clone(),
                deadline,
                reply,
            };
            // A call already in flight here is left as it is, and one that ended here since
            // the read is not made again.
            let entry_id = entry.id().clone();
            let unclaim = || {
                for id in std::iter::once(&entry_id).chain(duplicates.iter().map(|d| d.id())) {
                    writer.unclaim(id);
                }
            };
            match core.register_pick_up(registration) {
                Ok(true) => {}
                Ok(false) => {
                    unclaim();
                    continue;
                }
                Err(error) => {
                    unclaim();
                    return Err(error);
                }
            }
            // The entry picked up stands for the task until its call ends: the others may
            // go at once.
            for duplicate in &duplicates {
                writer.retire(duplicate);
            }
            if !duplicates.is_empty() {
                writer.kick();
            }
            let handle = CallHandle::new(id, core.clone(), rx, Some(timeout), None, None, Ok);
            recovered.push(RecoveredCall { entry, handle });
        }
        Ok(recovered)
    }
}

/// `entries` (of one endpoint) with each task's entries as one: the task's own entry (the one
/// named after it) or else the first, with the others. A task has two while a call's entry
/// moves to the task's id, and had one per call and per resumption before calls' entries
/// moved: polled once, not once per entry. Order kept, by the first of each task's.
fn one_per_task(
    entries: Vec<LedgerEntry>,
    endpoint: &EntryEndpoint,
) -> Vec<(LedgerEntry, Vec<LedgerEntry>)> {
    let mut out: Vec<(LedgerEntry, Vec<LedgerEntry>)> = Vec::with_capacity(entries.len());
    let mut tasks: rustc_hash::FxHashMap<String, usize> = rustc_hash::FxHashMap::default();
    for entry in entries {
        let CallStage::Task { task_id } = entry.stage() else {
            out.push((entry, Vec::new()));
            continue;
        };
        let Some(&at) = tasks.get(task_id) else {
            tasks.insert(task_id.clone(), out.len());
            out.push((entry, Vec::new()));
            continue;
        };
        let named = EntryId::of_task(endpoint, task_id);
        let (first, others) = &mut out[at];
        if *entry.id() == named {
            others.push(std::mem::replace(first, entry));
        } else {
            others.push(entry);
        }
    }
    out
}

/// The longest a call picked up may take, whatever deadline its entry records, unless the
/// client's call timeout is longer. Anyone who can write the ledger can write any deadline;
/// the client's call timeout alone would cut short a call given a longer timeout of its own,
/// so the bound is the ledger's own horizon for a call: as long as it keeps a task left
/// behind.
const MAX_PICK_UP_TIMEOUT: Duration = TASK_RETENTION;

/// How long the call picked up from `entry` may take from `now`, by its recorded deadline;
/// `None` when it is past and the call is not a task (nothing to wait for).
fn pick_up_timeout(
    entry: &LedgerEntry,
    now: SystemTime,
    call_timeout: Duration,
) -> Option<Duration> {
    let remaining = entry
        .deadline()
        .duration_since(now)
        .ok()
        .filter(|d| !d.is_zero());
    match (remaining, entry.stage()) {
        (Some(remaining), _) => Some(remaining.min(call_timeout.max(MAX_PICK_UP_TIMEOUT))),
        // The task outlived its call's wait: this one waits as long as a call does.
        (None, CallStage::Task { .. }) => Some(call_timeout),
        (None, _) => None,
    }
}

/// The session's deadline `timeout` from now (far away rather than at once when it cannot be
/// represented).
fn deadline_in(timeout: Duration) -> std::time::Instant {
    let now = tokio::time::Instant::now();
    now.checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
        .into_std()
}

#[cfg(test)]
mod tests {
    use crate::proto::Checkpoint;

    use super::*;

    /// An entry of `stage` due at `deadline`, read back from its stored form.
    fn entry(stage: CallStage, deadline: SystemTime) -> LedgerEntry {
        let checkpoint =
            Checkpoint::new("tools/call", None, std::time::Instant::now()).with_stage(stage);
        let written = LedgerEntry::from_checkpoint(
            EntryId::fresh(),
            &EntryEndpoint::of("http://h/mcp"),
            checkpoint,
            deadline,
            false,
            SystemTime::now(),
        );
        LedgerEntry::from_json(&written.to_json()).unwrap()
    }

    /// A deadline in the far future (a damaged or hostile entry) does not hold the call
    /// picked up for as long: it is bounded by [`MAX_PICK_UP_TIMEOUT`], or the client's call
    /// timeout when that is longer. One within the bound is kept as it is.
    #[test]
    fn a_far_deadline_is_bounded() {
        let now = SystemTime::now();
        let call_timeout = Duration::from_secs(60);
        let far = now + Duration::from_secs(1000 * 365 * 24 * 3600);
        for stage in [
            CallStage::Sent { round: 0 },
            CallStage::Task {
                task_id: "t-1".into(),
            },
        ] {
            let timeout = pick_up_timeout(&entry(stage, far), now, call_timeout).unwrap();
            assert_eq!(timeout, MAX_PICK_UP_TIMEOUT);
        }
        let long = Duration::from_secs(48 * 3600);
        let timeout = pick_up_timeout(&entry(CallStage::Sent { round: 0 }, far), now, long);
        assert_eq!(timeout, Some(long));
        let near = entry(CallStage::Sent { round: 0 }, now + Duration::from_secs(30));
        let timeout = pick_up_timeout(&near, now, call_timeout).unwrap();
        assert!(timeout <= Duration::from_secs(30) && timeout >= Duration::from_secs(29));
    }
}
