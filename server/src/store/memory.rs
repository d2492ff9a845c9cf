//! [`MemoryStore`]: one process's store, the default.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{Store, StoreFuture};
use crate::guard::claims::{self, KeyState};
use crate::guard::{Claim, ClaimOutcome, SessionRecord, StoredOutcome};
use crate::ids::{ClaimToken, IdempotencyKey, SessionId};
use crate::{Error, ErrorKind};

/// Entries of each kind kept at most (sessions, keys); beyond, expired ones are swept and,
/// if none expired, new claims are refused (retryably) rather than a guarantee dropped.
const DEFAULT_CAPACITY: usize = 100_000;
/// Bytes of stored answers kept at most: each may be as long as a response body (`max_body`,
/// 4 MiB by default) and is kept a retention, so the key count alone would let ~400 GiB in.
const DEFAULT_ANSWER_BUDGET: usize = 256 << 20;
/// How long a session record, a finished or a lost key is kept after its last write (a
/// session record: or its last touch, the guard's while the session is in use).
const DEFAULT_RETENTION: Duration = Duration::from_secs(24 * 3600);

/// The store of one process: the guards of one process share it (clone it, or pass the same
/// one to several layers). Bounded, with a retention per entry. Time is tokio's clock, so a
/// test with paused time controls leases.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug)]
struct Inner {
    sessions: HashMap<SessionId, (SessionRecord, Instant)>,
    keys: HashMap<IdempotencyKey, (Option<KeyState>, Instant)>,
    capacity: usize,
    retention: Duration,
    /// Bytes of the stored answers in `keys` (expired ones included until swept).
    answer_bytes: usize,
    answer_budget: usize,
}

impl Default for MemoryStore {
    /// Room for 100,000 sessions and 100,000 keys, and 256 MiB of stored answers, each kept
    /// 24 hours after its last write (a session record: or touch).
    fn default() -> Self {
        Self::with_limits(DEFAULT_CAPACITY, DEFAULT_RETENTION)
    }
}

impl MemoryStore {
    /// A store keeping at most `capacity` sessions and `capacity` keys, each for `retention`
    /// after its last write (a running key for `retention` after its lease ends).
    pub fn with_limits(capacity: usize, retention: Duration) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                sessions: HashMap::new(),
                keys: HashMap::new(),
                capacity: capacity.max(1),
                retention,
                answer_bytes: 0,
                answer_budget: DEFAULT_ANSWER_BUDGET,
            })),
        }
    }

    /// The most bytes of stored answers kept (default 256 MiB): past it, expired keys are
    /// swept and, if that is not enough, new claims are refused (retryably) as when the store
    /// holds as many keys as it may. A claim already granted still stores its answer (its
    /// call ran), so the store may pass the budget by the answers of the calls then running.
    pub fn with_answer_budget(self, bytes: usize) -> Self {
        self.lock().answer_budget = bytes;
        self
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere while holding it left plain data behind: still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies `f` to a key's state at `now`, keeping the entry (with a fresh retention) while
    /// it exists.
    fn with_key<T>(
        &self,
        key: &IdempotencyKey,
        f: impl FnOnce(&mut Option<KeyState>, Instant) -> T,
    ) -> T {
        let now = now();
        let mut inner = self.lock();
        let retention = inner.retention;
        let old = inner.keys.remove(key);
        inner.answer_bytes -= old.as_ref().map_or(0, |(s, _)| answer_len(s));
        let mut state = old
            .filter(|(_, expires)| *expires > now)
            .and_then(|(s, _)| s);
        let out = f(&mut state, now);
        if let Some(s) = state {
            // A running key outlives its lease by the retention: past the lease it reads as
            // lost, and it must not vanish (and be granted again) while its holder may run.
            let expires = later(
                s.lease_ends().map_or(now, |until| until.max(now)),
                retention,
            );
            inner.answer_bytes += s.answer_len();
            inner.keys.insert(key.clone(), (Some(s), expires));
        }
        out
    }
}

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// `retention` after `from`, or as late as the clock goes: a retention no clock can add
/// (`Duration::MAX`, "for ever") keeps the entry for good instead of overflowing.
fn later(from: Instant, retention: Duration) -> Instant {
    /// Longer than any process runs; an `Instant` holds it wherever it holds `from`.
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    from.checked_add(retention)
        .or_else(|| from.checked_add(CENTURY))
        .unwrap_or(from)
}

fn answer_len(state: &Option<KeyState>) -> usize {
    state.as_ref().map_or(0, KeyState::answer_len)
}

impl Inner {
    /// Makes room for one more key: expired entries go first. `false` when the store is full
    /// of live ones, or of live answers' bytes.
    fn room_for_key(&mut self, now: Instant) -> bool {
        let room = |i: &Self| i.keys.len() < i.capacity && i.answer_bytes < i.answer_budget;
        if room(self) {
            return true;
        }
        let mut freed = 0;
        self.keys.retain(|_, (state, expires)| {
            let live = *expires > now;
            if !live {
                freed += answer_len(state);
            }
            live
        });
        self.answer_bytes -= freed;
        room(self)
    }
}

impl Store for MemoryStore {
    fn put_session<'a>(&'a self, record: &'a SessionRecord) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let now = now();
            let mut inner = self.lock();
            if inner.sessions.len() >= inner.capacity {
                inner.sessions.retain(|_, (_, expires)| *expires > now);
                if inner.sessions.len() >= inner.capacity {
                    // Sessions are a cache of what the guards hold: the oldest may go.
                    let oldest = inner
                        .sessions
                        .iter()
                        .min_by_key(|(_, (_, e))| *e)
                        .map(|(k, _)| k.clone());
                    if let Some(k) = oldest {
                        inner.sessions.remove(&k);
                    }
                }
            }
            let expires = later(now, inner.retention);
            inner
                .sessions
                .insert(record.session().clone(), (record.clone(), expires));
            Ok(())
        })
    }

    fn session<'a>(&'a self, id: &'a SessionId) -> StoreFuture<'a, Option<SessionRecord>> {
        Box::pin(async move {
            let now = now();
            let inner = self.lock();
            Ok(inner
                .sessions
                .get(id)
                .filter(|(_, expires)| *expires > now)
                .map(|(r, _)| r.clone()))
        })
    }

    fn forget_session<'a>(&'a self, id: &'a SessionId) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.lock().sessions.remove(id);
            Ok(())
        })
    }

    fn touch_session<'a>(&'a self, id: &'a SessionId) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let now = now();
            let mut inner = self.lock();
            let retention = inner.retention;
            // Its expiry moves: a full store drops records not in use before this one.
            if let Some((_, expires)) = inner.sessions.get_mut(id).filter(|(_, e)| *e > now) {
                *expires = later(now, retention);
            }
            Ok(())
        })
    }

    fn session_retention(&self) -> Option<Duration> {
        Some(self.lock().retention)
    }

    fn claim<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, ClaimOutcome> {
        Box::pin(async move {
            let now = now();
            {
                let mut inner = self.lock();
                let known = inner
                    .keys
                    .get(claim.key())
                    .is_some_and(|(_, expires)| *expires > now);
                if !known && !inner.room_for_key(now) {
                    return Err(Error::new(
                        ErrorKind::StoreFull,
                        "the in-memory store holds as many live keys, or answers' bytes, as it may",
                    ));
                }
            }
            Ok(self.with_key(claim.key(), |state, now| claims::claim(state, claim, now)))
        })
    }

    fn renew<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        token: &'a ClaimToken,
        lease: Duration,
    ) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            Ok(self.with_key(key, |state, now| claims::renew(state, token, lease, now)))
        })
    }

    fn finish<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        token: &'a ClaimToken,
        outcome: &'a StoredOutcome,
    ) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            Ok(self.with_key(key, |state, _| {
                claims::finish(state, token, outcome.clone())
            }))
        })
    }

    fn release<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        token: &'a ClaimToken,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.with_key(key, |state, _| claims::release(state, token));
            Ok(())
        })
    }

    fn mark_lost<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        token: &'a ClaimToken,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.with_key(key, |state, _| claims::mark_lost(state, token));
            Ok(())
        })
    }
}
