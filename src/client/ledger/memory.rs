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
    /// Keyed by ids clients made or read back from entries they wrote: a fast hash is safe.
    entries: Mutex<FxHashMap<EntryId, LedgerEntry>>,
}

impl MemoryLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of entries held, expired ones included until the next
    /// [`Ledger::entries`] drops them.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether it holds no entry.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> MutexGuard<'_, FxHashMap<EntryId, LedgerEntry>> {
        // A panic elsewhere while the map was held cannot leave an entry half-written.
        match self.entries.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

impl Ledger for MemoryLedger {
    fn put(&self, entry: LedgerEntry) -> BoxFuture<'_, Result<(), Error>> {
        self.lock().insert(entry.id().clone(), entry);
        future::ready(Ok(())).boxed()
    }

    fn remove(&self, id: EntryId) -> BoxFuture<'_, Result<(), Error>> {
        self.lock().remove(&id);
        future::ready(Ok(())).boxed()
    }

    fn entries(&self) -> BoxFuture<'_, Result<Vec<LedgerEntry>, Error>> {
        let now = SystemTime::now();
        let mut entries = self.lock();
        entries.retain(|_, entry| !entry.is_expired(now));
        future::ready(Ok(entries.values().cloned().collect())).boxed()
    }
}
