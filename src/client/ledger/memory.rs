//! [`MemoryLedger`]: the default ledger, in memory.

use std::sync::{Mutex, MutexGuard};
use std::time::SystemTime;

use futures::future::{self, BoxFuture, FutureExt};
use rustc_hash::FxHashMap;

use super::{EntryId, Ledger, LedgerEntry};
use crate::error::Error;

/// A [`Ledger`] in memory, for the life of the process: the default, one per client. Shared
/// between clients (an `Arc` of one given to each builder), it lets a client that replaces
/// another in the same process pick up its calls; across a restart it keeps nothing (that
/// is what `RedisLedger`, the `redis` feature, is for).
///
/// Its work is done when an operation is called, so a call pays a map insert and a map
/// removal, and no task switch.
#[derive(Debug, Default)]
pub struct MemoryLedger {
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    /// Keyed by ids clients made or read back from entries they wrote: a fast hash is safe.
    entries: FxHashMap<EntryId, LedgerEntry>,
    /// At this many entries the next write drops the expired ones first: entries nobody
    /// reads back (tasks left behind and never recovered) go with their expiry, at a cost
    /// per write that stays constant on average.
    sweep_at: usize,
}

/// The fewest entries a sweep waits for.
const MIN_SWEEP: usize = 64;

impl MemoryLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of entries held, expired ones included until [`Ledger::entries`] or a
    /// later write drops them.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether it holds no entry.
    pub fn is_empty(&self) -> bool {
        self.lock().entries.is_empty()
    }

    fn lock(&self) -> MutexGuard<'_, Held> {
        // A panic elsewhere while the map was held cannot leave an entry half-written.
        match self.held.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

impl Ledger for MemoryLedger {
    fn put(&self, entry: LedgerEntry) -> BoxFuture<'_, Result<(), Error>> {
        let mut held = self.lock();
        if held.entries.len() >= held.sweep_at {
            held.sweep(SystemTime::now());
        }
        held.entries.insert(entry.id().clone(), entry);
        future::ready(Ok(())).boxed()
    }

    fn remove(&self, id: EntryId) -> BoxFuture<'_, Result<(), Error>> {
        self.lock().entries.remove(&id);
        future::ready(Ok(())).boxed()
    }

    fn entries(&self) -> BoxFuture<'_, Result<Vec<LedgerEntry>, Error>> {
        let mut held = self.lock();
        held.sweep(SystemTime::now());
        future::ready(Ok(held.entries.values().cloned().collect())).boxed()
    }
}

impl Held {
    /// Drops the expired entries; the next sweep waits until the entries have doubled.
    fn sweep(&mut self, now: SystemTime) {
        self.entries.retain(|_, entry| !entry.is_expired(now));
        self.sweep_at = (self.entries.len() * 2).max(MIN_SWEEP);
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::proto::Checkpoint;

    fn entry(due: SystemTime) -> LedgerEntry {
        let checkpoint = Checkpoint::new("tools/call", None, Instant::now());
        LedgerEntry::from_checkpoint(
            EntryId::fresh(),
            &crate::client::ledger::EntryEndpoint::of("http://127.0.0.1:9/mcp"),
            checkpoint,
            due,
            false,
            SystemTime::now(),
        )
    }

    /// Entries nobody reads back or removes do not outlive their expiry by more than a
    /// sweep: the ledger stays bounded without a reader.
    #[test]
    fn expired_entries_go_without_a_reader() {
        let ledger = MemoryLedger::new();
        let past = SystemTime::now() - Duration::from_secs(1);
        let live = entry(SystemTime::now() + Duration::from_secs(3600));
        let live_id = live.id().clone();
        let _ = ledger.put(live).now_or_never();
        for _ in 0..10_000 {
            let _ = ledger.put(entry(past)).now_or_never();
            assert!(ledger.len() <= MIN_SWEEP + 1, "{}", ledger.len());
        }
        let kept = ledger.entries().now_or_never().unwrap().unwrap();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].id(), &live_id);
    }
}
