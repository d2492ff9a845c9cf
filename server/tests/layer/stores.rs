//! Stores that fail on purpose, shared by the layer's and the skin's tests.

use std::sync::atomic::{AtomicBool, Ordering};
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
    ) -> StoreFuture<'a, ()> {
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
