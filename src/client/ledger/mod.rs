//! The ledger of calls in flight: what a client writes down before a call's first byte
//! leaves and as it progresses, so that the process that replaces this one can make every
//! interrupted call a call again ([`Client::recover`](crate::Client::recover)).
//!
//! One trait, [`Ledger`], and two stores: [`MemoryLedger`], shared by the clients of one
//! process, and, with the `redis` feature, `RedisLedger`, one namespace per client identity,
//! for fleets of agent workers that are redeployed, evicted and OOM-killed. The guide's
//! [fleet restarts](crate::guide::restarts) chapter says how they fit together.
//!
//! By default a client keeps a memory ledger of its own, which no one else can read: it writes
//! there only the tasks its calls leave behind (still working when a call stops waiting), for
//! its own `recover` to poll later, and nothing for a call in flight (that `recover` skips
//! those), so an ordinary call pays nothing for it. A ledger given to the builder records
//! every call, as below.
//!
//! What a client writes, and when (each write outside the session's lock, never from the
//! task that keeps deadlines; a ledger's panic is caught):
//!
//! - an entry before the first byte of a call leaves ([`CallStage::Sent`]), and again
//!   before each MRTR round's request leaves: the call is not sent until the write is
//!   durable, and a write that fails holds it back like a connection that could not be made
//!   (tried again with backoff within its deadline);
//! - the same entry, rewritten when the call waits for the application's answers to a
//!   round ([`CallStage::AwaitingInput`]), became a task ([`CallStage::Task`]), or has its
//!   stream resumed (no request waits for these writes: one that fails is tried again with
//!   backoff, up to 8 times, unless a later write of the entry supersedes it);
//! - its removal once the call has ended (except for a task still running when its call
//!   gave up waiting: kept until [`TASK_RETENTION`] passes, for a later `recover`). A call
//!   the application dropped has its entry removed by the client's own writer task, on the
//!   client's runtime: a client stopped with its runtime (which drops the calls' futures and
//!   runs nothing of it again) leaves its calls' entries to the client that takes over.
//!
//! Calls of read-only methods (ping, the lists, reads, completions) are not written: a
//! restart has nothing of them to report.
//!
//! [`CallStage::Sent`]: crate::proto::CallStage::Sent
//! [`CallStage::AwaitingInput`]: crate::proto::CallStage::AwaitingInput
//! [`CallStage::Task`]: crate::proto::CallStage::Task

mod entry;
mod memory;
#[cfg(feature = "redis")]
mod redis;

use futures::future::BoxFuture;

pub(crate) use entry::EntryEndpoint;
pub use entry::{EntryId, LedgerEntry, TASK_RETENTION};
pub use memory::MemoryLedger;
#[cfg(feature = "redis")]
pub use redis::RedisLedger;

use crate::error::Error;

/// Where a client keeps the record of its calls in flight.
///
/// The client calls it outside the session's lock, from the task of the call it serves or
/// from its driver's own tasks (never the one that keeps deadlines); for one entry one
/// operation at a time and in order, for different entries possibly at the same time. A panic
/// (in a poll, or as an unfinished operation's future is dropped at its timeout) costs the
/// operation, never the call or the client. An operation's future may start its
/// work when it is first polled or before: the client creates each only once the one before
/// it on the same entry has finished. An operation must not block its thread: its future is
/// first polled in the task that creates it (a caller's own, most often), and handed to the
/// client's writer task only if it is not done then, so blocking I/O in it holds that
/// caller's result, past the call's deadline if it lasts that long; run blocking storage with
/// `tokio::task::spawn_blocking`.
///
/// A write (`put`, `remove`) that has not finished within 10 seconds is dropped and counts
/// as failed, as if it had returned an error: a call whose entry it was writing is held back
/// (and tried again within its deadline), any other write is tried again with backoff, as
/// above. Once the client has stopped, the writes still unfinished 5 seconds later are dropped
/// and given up on, and the client lets the ledger go. A write dropped that way may still
/// land afterwards (after the entry's next write, say): a store on the network should bound
/// its own operations below 10 seconds, as `RedisLedger` does. `entries` is bounded by
/// `recover` instead: a read not finished within the call timeout fails it.
///
/// An implementation of your own stores [`LedgerEntry::to_json`] under the entry's id, drops
/// it from [`LedgerEntry::expires_at`] on, and reads it back with [`LedgerEntry::from_json`];
/// its failures are [`Error::ledger`]. A store that bounds what it reads back refuses a longer
/// entry when it is written, as `RedisLedger` does (an entry taken and then skipped is a call
/// no recovery sees), and names its bound with [`Ledger::max_entry_bytes`], so that the client
/// ends a call whose entry is longer at once instead of taking the refusal for a passing
/// fault and trying it again. One ledger (one namespace) belongs to one process at a time: the process
/// that replaces it takes its entries over with `recover`. (Within a process, `recover` leaves
/// the calls of the other clients still running to them.)
pub trait Ledger: Send + Sync + 'static {
    /// Writes `entry`, replacing the one with its id.
    fn put(&self, entry: LedgerEntry) -> BoxFuture<'_, Result<(), Error>>;

    /// Forgets entry `id` (nothing to do when there is none).
    fn remove(&self, id: EntryId) -> BoxFuture<'_, Result<(), Error>>;

    /// Every entry not expired yet, in no particular order.
    fn entries(&self) -> BoxFuture<'_, Result<Vec<LedgerEntry>, Error>>;

    /// The longest entry this ledger stores, in bytes of [`LedgerEntry::to_json`] as text;
    /// `None` (the default) when it stores any. Asked once, when a client is built with the
    /// ledger (a panic counts as `None`).
    ///
    /// The client measures each entry against it before writing it, and never writes a longer
    /// one: a call whose entry is longer is not sent and ends at once with
    /// [`ErrorKind::Ledger`](crate::ErrorKind::Ledger), since no write of it can succeed
    /// (a write that fails is otherwise taken for a passing fault: the call is held back and
    /// tried again until its attempts or its deadline run out). Any other entry so long is not
    /// written either, and the ledger keeps the call as it stood before. `put` should refuse a
    /// longer entry all the same, for whoever else writes to the store.
    fn max_entry_bytes(&self) -> Option<usize> {
        None
    }
}
