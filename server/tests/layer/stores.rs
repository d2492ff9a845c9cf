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
