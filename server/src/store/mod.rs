//! Where a guard keeps what other instances must see: session records (owner and capability
//! hash) and idempotency keys (claims, leases, stored answers).
//!
//! One trait, [`Store`]; [`MemoryStore`] for one process (the default) and, with the `redis`
//! feature, [`RedisStore`] for a fleet (Redis or Redis Cluster). Every implementation follows
//! the key life of [`guard::claims`](crate::guard::claims). A store that fails, or does not
//! answer in time, makes the guard refuse keyed calls retryably (`503` + `Retry-After`),
//! never run them unguarded, and resumes it cannot judge without a session's record;
//! unkeyed traffic passes.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::guard::{Claim, ClaimOutcome, SessionRecord, StoreOp, StoredOutcome};
use crate::ids::{ClaimToken, IdempotencyKey, SessionId};
use crate::Error;

mod memory;
#[cfg(feature = "redis")]
mod redis;
mod timed;

pub use memory::MemoryStore;
#[cfg(feature = "redis")]
pub use redis::{RedisOptions, RedisStore};
pub(crate) use timed::Timed;

/// What every [`Store`] method returns: a boxed future of owned data.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, Error>> + Send + 'a>>;

/// The shared memory of a fleet of guards. Each method is one atomic step (one round trip
/// for a networked store).
///
/// Each should end in bounded time, failing with
/// [`ErrorKind::StoreUnavailable`](crate::ErrorKind::StoreUnavailable) when the store does not
/// answer ([`RedisStore`] bounds every command by [`RedisOptions::response_timeout`], 1 s by
/// default). The guard bounds each step too, as a last resort
/// ([`GuardBuilder::store_timeout`](crate::skin::GuardBuilder::store_timeout), 5 s by
/// default): a step past it fails as unreachable.
pub trait Store: Send + Sync + 'static {
    /// Keeps a session record (replacing one of the same session).
    fn put_session<'a>(&'a self, record: &'a SessionRecord) -> StoreFuture<'a, ()>;

    /// Reads a session record; `None` when the store holds none, or none it can read (a
    /// damaged record is no context the guard can vouch for: the session's client starts a
    /// new one, as after the record expired).
    fn session<'a>(&'a self, id: &'a SessionId) -> StoreFuture<'a, Option<SessionRecord>>;

    /// Forgets a session record.
    fn forget_session<'a>(&'a self, id: &'a SessionId) -> StoreFuture<'a, ()>;

    /// Keeps a session record a full retention from now, as if written again; a record the
    /// store does not hold (forgotten, expired) stays absent. The guard asks for it while the
    /// session is in use ([`StoreOp::TouchSession`]).
    fn touch_session<'a>(&'a self, id: &'a SessionId) -> StoreFuture<'a, ()>;

    /// How long a session record is kept after its last write or touch, when the store
    /// drops records after a time. The guard touches a record in use once half of it has
    /// passed since the record was written or touched
    /// ([`GuardBuilder`](crate::skin::GuardBuilder) reads it). Default: `None`, taken as
    /// 24 hours.
    fn session_retention(&self) -> Option<Duration> {
        None
    }

    /// Claims a key ([`claims::claim`](crate::guard::claims::claim)).
    fn claim<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, ClaimOutcome>;

    /// Renews a held claim's lease; `false` when it is no longer held (its holder then claims
    /// it again, taking back a key the store lost).
    fn renew<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        token: &'a ClaimToken,
        lease: Duration,
    ) -> StoreFuture<'a, bool>;

    /// Stores a held key's answer; `false` when the store has no such key (it lost it):
    /// nothing is stored, and its holder claims it again and stores the answer then.
    fn finish<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        token: &'a ClaimToken,
        outcome: &'a StoredOutcome,
    ) -> StoreFuture<'a, bool>;

    /// Frees a held key (its call provably did not run).
    fn release<'a>(&'a self, key: &'a IdempotencyKey, token: &'a ClaimToken)
        -> StoreFuture<'a, ()>;

    /// Marks a held key lost (its call may have run; no answer can be stored).
    fn mark_lost<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        token: &'a ClaimToken,
    ) -> StoreFuture<'a, ()>;
}

impl<S: Store + ?Sized> Store for std::sync::Arc<S> {
    fn put_session<'a>(&'a self, record: &'a SessionRecord) -> StoreFuture<'a, ()> {
        (**self).put_session(record)
    }
    fn session<'a>(&'a self, id: &'a SessionId) -> StoreFuture<'a, Option<SessionRecord>> {
        (**self).session(id)
    }
    fn forget_session<'a>(&'a self, id: &'a SessionId) -> StoreFuture<'a, ()> {
        (**self).forget_session(id)
    }
    fn touch_session<'a>(&'a self, id: &'a SessionId) -> StoreFuture<'a, ()> {
        (**self).touch_session(id)
    }
    fn session_retention(&self) -> Option<Duration> {
        (**self).session_retention()
    }
    fn claim<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, ClaimOutcome> {
        (**self).claim(claim)
    }
    fn renew<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        token: &'a ClaimToken,
        lease: Duration,
    ) -> StoreFuture<'a, bool> {
        (**self).renew(key, token, lease)
    }
    fn finish<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        token: &'a ClaimToken,
        outcome: &'a StoredOutcome,
    ) -> StoreFuture<'a, bool> {
        (**self).finish(key, token, outcome)
    }
    fn release<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        token: &'a ClaimToken,
    ) -> StoreFuture<'a, ()> {
        (**self).release(key, token)
    }
    fn mark_lost<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        token: &'a ClaimToken,
    ) -> StoreFuture<'a, ()> {
        (**self).mark_lost(key, token)
    }
}

/// A store named by text (the bindings' `store` option, a command line): `memory` (or an
/// empty string) is a [`MemoryStore::default()`]; a `redis://` or `rediss://` URL is a
/// [`RedisStore`] connected to it (feature `redis`), every other setting at its default.
///
/// Fails with [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) for anything
/// else, and as [`RedisStore::connect`] does when Redis cannot be reached.
pub async fn open(spec: &str) -> Result<std::sync::Arc<dyn Store>, Error> {
    let spec = spec.trim();
    if spec.is_empty() || spec.eq_ignore_ascii_case("memory") {
        return Ok(std::sync::Arc::new(MemoryStore::default()));
    }
    if spec.starts_with("redis://") || spec.starts_with("rediss://") {
        #[cfg(feature = "redis")]
        return Ok(std::sync::Arc::new(RedisStore::connect(spec).await?));
        #[cfg(not(feature = "redis"))]
        return Err(Error::new(
            crate::ErrorKind::InvalidConfig,
            "a Redis store needs mcp-resume-server's `redis` feature",
        ));
    }
    Err(Error::new(
        crate::ErrorKind::InvalidConfig,
        "a store is `memory` or a redis:// (rediss://) URL",
    ))
}

/// What running a [`StoreOp`] gave: what to report to the exchange that asked.
#[derive(Debug)]
#[non_exhaustive]
pub enum OpResult {
    /// The record [`StoreOp::LoadSession`] read.
    Session(Option<SessionRecord>),
    /// The outcome of [`StoreOp::Claim`].
    Claim(ClaimOutcome),
    /// An operation that reports nothing.
    Done,
}

/// Runs one store operation the guard handed out (what a skin does with
/// [`Step::Store`](crate::guard::Step::Store) and `poll_op`).
pub async fn run<S: Store + ?Sized>(store: &S, op: &StoreOp) -> Result<OpResult, Error> {
    Ok(match op {
        StoreOp::PutSession(r) => {
            store.put_session(r).await?;
            OpResult::Done
        }
        StoreOp::LoadSession(id) => OpResult::Session(store.session(id).await?),
        StoreOp::ForgetSession(id) => {
            store.forget_session(id).await?;
            OpResult::Done
        }
        StoreOp::TouchSession(id) => {
            store.touch_session(id).await?;
            OpResult::Done
        }
        StoreOp::Claim(c) => OpResult::Claim(store.claim(c).await?),
        StoreOp::Renew { key, token, lease } => {
            store.renew(key, token, *lease).await?;
            OpResult::Done
        }
        StoreOp::Finish {
            key,
            token,
            outcome,
        } => {
            store.finish(key, token, outcome).await?;
            OpResult::Done
        }
        StoreOp::Release { key, token } => {
            store.release(key, token).await?;
            OpResult::Done
        }
        StoreOp::MarkLost { key, token } => {
            store.mark_lost(key, token).await?;
            OpResult::Done
        }
    })
}
