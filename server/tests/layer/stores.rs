//! Stores that fail on purpose, shared by the layer's and the skin's tests.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mcp_resume_server::guard::{Claim, ClaimOutcome, SessionRecord, StoredOutcome};
use mcp_resume_server::ids::{ClaimToken, IdempotencyKey, SessionId};
use mcp_resume_server::store::{Store, StoreFuture};
use mcp_resume_server::MemoryStore;

/// A memory store whose first `finish` fails (after which it works).
#[derive(Clone, Default)]
pub(crate) struct FinishFailsOnce {
    inner: MemoryStore,
    failed: Arc<AtomicBool>,
}

impl FinishFailsOnce {
    /// Whether its one failure has happened.
    pub(crate) fn has_failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }
}

impl Store for FinishFailsOnce {
    fn put_session<'a>(&'a self, r: &'a SessionRecord) -> StoreFuture<'a, ()> {
        self.inner.put_session(r)
    }
    fn session<'a>(&'a self, id: &'a SessionId) -> StoreFuture<'a, Option<SessionRecord>> {
        self.inner.session(id)
    }
    fn forget_session<'a>(&'a self, id: &'a SessionId) -> StoreFuture<'a, ()> {
        self.inner.forget_session(id)
    }
    fn touch_session<'a>(&'a self, id: &'a SessionId) -> StoreFuture<'a, ()> {
        self.inner.touch_session(id)
    }
    fn claim<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, ClaimOutcome> {
        self.inner.claim(claim)
    }
    fn renew<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        token: &'a ClaimToken,
        lease: Duration,
    ) -> StoreFuture<'a, bool> {
        self.inner.renew(key, token, lease)
    }
    fn finish<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        token: &'a ClaimToken,
        outcome: &'a StoredOutcome,
    ) -> StoreFuture<'a, bool> {
        if !self.failed.swap(true, Ordering::SeqCst) {
            return Box::pin(async {
                Err(mcp_resume_server::Error::store_unavailable(
                    std::io::Error::other("down"),
                ))
            });
        }
        self.inner.finish(key, token, outcome)
    }
    fn release<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        token: &'a ClaimToken,
    ) -> StoreFuture<'a, ()> {
        self.inner.release(key, token)
    }
    fn mark_lost<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        token: &'a ClaimToken,
    ) -> StoreFuture<'a, ()> {
        self.inner.mark_lost(key, token)
    }
}

/// Two memory stores, the one a fleet's Redis was and the one it fails over to (a replica
/// that never saw the latest writes): every operation goes to `before` until
/// [`Failover::fail_over`], then to `after`. Counts what the tests wait on.
#[derive(Clone, Default)]
pub(crate) struct Failover {
    before: MemoryStore,
    after: MemoryStore,
    failed_over: Arc<AtomicBool>,
    claims: Arc<AtomicUsize>,
    renewals_after: Arc<AtomicUsize>,
}

impl Failover {
    /// From now on every operation goes to the store that never saw the earlier ones.
    pub(crate) fn fail_over(&self) {
        self.failed_over.store(true, Ordering::SeqCst);
    }

    /// Claims the store answered so far.
    pub(crate) fn claims(&self) -> usize {
        self.claims.load(Ordering::SeqCst)
    }

    /// Renewals the store answered after the fail-over.
    pub(crate) fn renewals_after(&self) -> usize {
        self.renewals_after.load(Ordering::SeqCst)
    }

    /// Waits until `seen` holds, looking every few milliseconds (for at most 10 s).
    pub(crate) async fn until(&self, seen: impl Fn(&Self) -> bool) {
        let waited = tokio::time::timeout(Duration::from_secs(10), async {
            while !seen(self) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        assert!(waited.is_ok(), "the store never saw it");
    }

    fn now(&self) -> &MemoryStore {
        if self.failed_over.load(Ordering::SeqCst) {
            &self.after
        } else {
            &self.before
        }
    }
}

impl Store for Failover {
    fn put_session<'a>(&'a self, r: &'a SessionRecord) -> StoreFuture<'a, ()> {
        self.now().put_session(r)
    }
    fn session<'a>(&'a self, id: &'a SessionId) -> StoreFuture<'a, Option<SessionRecord>> {
        self.now().session(id)
    }
    fn forget_session<'a>(&'a self, id: &'a SessionId) -> StoreFuture<'a, ()> {
        self.now().forget_session(id)
    }
    fn touch_session<'a>(&'a self, id: &'a SessionId) -> StoreFuture<'a, ()> {
        self.now().touch_session(id)
    }
    fn claim<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, ClaimOutcome> {
        Box::pin(async move {
            let outcome = self.now().claim(claim).await;
            self.claims.fetch_add(1, Ordering::SeqCst);
            outcome
        })
    }
    fn renew<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        token: &'a ClaimToken,
        lease: Duration,
    ) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let after = self.failed_over.load(Ordering::SeqCst);
            let renewed = self.now().renew(key, token, lease).await;
            if after {
                self.renewals_after.fetch_add(1, Ordering::SeqCst);
            }
            renewed
        })
    }
    fn finish<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        token: &'a ClaimToken,
        outcome: &'a StoredOutcome,
    ) -> StoreFuture<'a, bool> {
        self.now().finish(key, token, outcome)
    }
    fn release<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        token: &'a ClaimToken,
    ) -> StoreFuture<'a, ()> {
        self.now().release(key, token)
    }
    fn mark_lost<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        token: &'a ClaimToken,
    ) -> StoreFuture<'a, ()> {
        self.now().mark_lost(key, token)
    }
}

/// What a test store does with each step of a memory store (see [`EachStep`]).
pub(crate) trait Step: Send + Sync + 'static {
    /// The step as the store answers it, given the memory store's answer.
    fn step<'a, T: Send + 'a>(&'a self, memory: StoreFuture<'a, T>) -> StoreFuture<'a, T>;
}

/// A memory store whose every step goes through `S`.
pub(crate) struct EachStep<S>(pub(crate) MemoryStore, pub(crate) S);

impl<S> EachStep<S> {
    pub(crate) fn new(step: S) -> Self {
        Self(MemoryStore::default(), step)
    }
}

impl<S: Step> Store for EachStep<S> {
    fn put_session<'a>(&'a self, r: &'a SessionRecord) -> StoreFuture<'a, ()> {
        self.1.step(self.0.put_session(r))
    }
    fn session<'a>(&'a self, id: &'a SessionId) -> StoreFuture<'a, Option<SessionRecord>> {
        self.1.step(self.0.session(id))
    }
    fn forget_session<'a>(&'a self, id: &'a SessionId) -> StoreFuture<'a, ()> {
        self.1.step(self.0.forget_session(id))
    }
    fn touch_session<'a>(&'a self, id: &'a SessionId) -> StoreFuture<'a, ()> {
        self.1.step(self.0.touch_session(id))
    }
    fn claim<'a>(&'a self, c: &'a Claim) -> StoreFuture<'a, ClaimOutcome> {
        self.1.step(self.0.claim(c))
    }
    fn renew<'a>(
        &'a self,
        k: &'a IdempotencyKey,
        t: &'a ClaimToken,
        lease: Duration,
    ) -> StoreFuture<'a, bool> {
        self.1.step(self.0.renew(k, t, lease))
    }
    fn finish<'a>(
        &'a self,
        k: &'a IdempotencyKey,
        t: &'a ClaimToken,
        o: &'a StoredOutcome,
    ) -> StoreFuture<'a, bool> {
        self.1.step(self.0.finish(k, t, o))
    }
    fn release<'a>(&'a self, k: &'a IdempotencyKey, t: &'a ClaimToken) -> StoreFuture<'a, ()> {
        self.1.step(self.0.release(k, t))
    }
    fn mark_lost<'a>(&'a self, k: &'a IdempotencyKey, t: &'a ClaimToken) -> StoreFuture<'a, ()> {
        self.1.step(self.0.mark_lost(k, t))
    }
}

/// Every step fails as unreachable.
pub(crate) struct Down;

impl Step for Down {
    fn step<'a, T: Send + 'a>(&'a self, _: StoreFuture<'a, T>) -> StoreFuture<'a, T> {
        Box::pin(async {
            Err(mcp_resume_server::Error::store_unavailable(
                std::io::Error::other("down"),
            ))
        })
    }
}

/// No step ever answers.
pub(crate) struct Silent;

impl Step for Silent {
    fn step<'a, T: Send + 'a>(&'a self, _: StoreFuture<'a, T>) -> StoreFuture<'a, T> {
        Box::pin(std::future::pending())
    }
}

/// Each step waits once (woken at once) before the memory store answers it.
pub(crate) struct WaitsOnce;

impl Step for WaitsOnce {
    fn step<'a, T: Send + 'a>(&'a self, memory: StoreFuture<'a, T>) -> StoreFuture<'a, T> {
        let mut yielded = false;
        let mut memory = memory;
        Box::pin(std::future::poll_fn(move |cx| {
            if !yielded {
                yielded = true;
                cx.waker().wake_by_ref();
                return std::task::Poll::Pending;
            }
            memory.as_mut().poll(cx)
        }))
    }
}

/// Each step waits until the test opens the gate ([`Gate::open`]); `arrived` is told of each
/// step that reaches it.
#[derive(Clone)]
pub(crate) struct Gate {
    permits: Arc<tokio::sync::Semaphore>,
    pub(crate) arrived: Arc<tokio::sync::Notify>,
}

impl Default for Gate {
    fn default() -> Self {
        Self {
            permits: Arc::new(tokio::sync::Semaphore::new(0)),
            arrived: Arc::default(),
        }
    }
}

impl Gate {
    /// Lets every step through, from now on.
    pub(crate) fn open(&self) {
        self.permits
            .add_permits(tokio::sync::Semaphore::MAX_PERMITS / 2);
    }
}

impl Step for Gate {
    fn step<'a, T: Send + 'a>(&'a self, memory: StoreFuture<'a, T>) -> StoreFuture<'a, T> {
        Box::pin(async move {
            self.arrived.notify_one();
            let _permit = self.permits.acquire().await;
            memory.await
        })
    }
}
