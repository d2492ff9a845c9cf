//! A store whose every step ends by a deadline: the guard's own bound over the store it is
//! given, so that a store that never answers (a custom one with no timeout of its own, a
//! connection stuck past what its client bounds) fails its steps as unreachable instead of
//! holding the requests that wait on them.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use super::{Store, StoreFuture};
use crate::guard::{Claim, ClaimOutcome, SessionRecord, StoredOutcome};
use crate::ids::{ClaimToken, IdempotencyKey, SessionId};
use crate::Error;

/// `inner`, each step failed as unreachable past `limit`.
pub(crate) struct Timed {
    pub(crate) inner: Arc<dyn Store>,
    pub(crate) limit: Duration,
}

/// A step that did not answer in time.
#[derive(Debug, thiserror::Error)]
#[error("the store did not answer within {0:?}")]
struct NoAnswer(Duration);

impl Timed {
    /// `step`, failed as unreachable once `limit` passed. The deadline is kept by a timer
    /// thread of its own, not the runtime's: a runtime built without timers runs the guard
    /// too (a tokio timer panics there). It is armed only once the step waits: a step that
    /// ends at its first poll (the memory store's, most) costs no timer.
    fn bounded<'a, T: Send + 'a>(&self, mut step: StoreFuture<'a, T>) -> StoreFuture<'a, T> {
        let limit = self.limit;
        let mut deadline: Option<futures_timer::Delay> = None;
        Box::pin(std::future::poll_fn(move |cx| {
            if let Poll::Ready(done) = step.as_mut().poll(cx) {
                return Poll::Ready(done);
            }
            let deadline = deadline.get_or_insert_with(|| futures_timer::Delay::new(limit));
            match Pin::new(deadline).poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(Error::store_unavailable(NoAnswer(limit)))),
                Poll::Pending => Poll::Pending,
            }
        }))
    }
}

impl Store for Timed {
    fn put_session<'a>(&'a self, record: &'a SessionRecord) -> StoreFuture<'a, ()> {
        self.bounded(self.inner.put_session(record))
    }
    fn session<'a>(&'a self, id: &'a SessionId) -> StoreFuture<'a, Option<SessionRecord>> {
        self.bounded(self.inner.session(id))
    }
    fn forget_session<'a>(&'a self, id: &'a SessionId) -> StoreFuture<'a, ()> {
        self.bounded(self.inner.forget_session(id))
    }
    fn touch_session<'a>(&'a self, id: &'a SessionId) -> StoreFuture<'a, ()> {
        self.bounded(self.inner.touch_session(id))
    }
    fn session_retention(&self) -> Option<Duration> {
        self.inner.session_retention()
    }
    fn claim<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, ClaimOutcome> {
        self.bounded(self.inner.claim(claim))
    }
    fn renew<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        token: &'a ClaimToken,
        lease: Duration,
    ) -> StoreFuture<'a, bool> {
        self.bounded(self.inner.renew(key, token, lease))
    }
    fn finish<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        token: &'a ClaimToken,
        outcome: &'a StoredOutcome,
    ) -> StoreFuture<'a, bool> {
        self.bounded(self.inner.finish(key, token, outcome))
    }
    fn release<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        token: &'a ClaimToken,
    ) -> StoreFuture<'a, ()> {
        self.bounded(self.inner.release(key, token))
    }
    fn mark_lost<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        token: &'a ClaimToken,
    ) -> StoreFuture<'a, ()> {
        self.bounded(self.inner.mark_lost(key, token))
    }
}
