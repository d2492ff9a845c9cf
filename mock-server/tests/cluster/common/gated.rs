//! A store whose chosen operation waits at a gate the test opens: the order of events a
//! networked store makes likely (a slow write, a slow claim), made certain.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mock_server::store::{
    IdempotencyBegin, PreparedRecord, RequestRecord, SessionRecord, StoreError, StoreFuture,
    StoredEvent, StoredOutcome, StreamRecord, TaskRecord,
};
use mock_server::{MemoryStore, Store};
use serde_json::Value;
use tokio::sync::{Semaphore, SemaphorePermit};

/// The operation a [`GatedStore`] holds back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gated {
    /// The record of an instance's death.
    ReleaseInstance,
    /// The claim of an idempotency key.
    IdempotencyBegin,
    /// A session's lookup (every request of a session, `initialize` aside).
    GetSession,
    /// Nothing: only the store's failures ([`GatedStore::lost_claim_replies`],
    /// [`GatedStore::failing_releases`], [`GatedStore::failing_finishes`],
    /// [`GatedStore::failing_loses`]) are made.
    Nothing,
}

/// A [`MemoryStore`] whose [`Gated`] operation waits until the test opens the gate
/// (`gate.add_permits`), counting the calls that arrived at it; it also counts the keys
/// released without an outcome, and fails claims and releases as a store gone mid-command
/// does, when told to.
#[derive(Clone)]
pub struct GatedStore {
    pub inner: MemoryStore,
    pub gate: Arc<Semaphore>,
    gated: Gated,
    /// Operations that reached the gate (passed or waiting).
    pub arrived: Arc<AtomicUsize>,
    pub abandoned: Arc<AtomicUsize>,
    /// Keys marked lost ([`Store::idempotency_lose`] done).
    pub lost: Arc<AtomicUsize>,
    /// Claims the store has taken (or answered), past the gate.
    pub claimed: Arc<AtomicUsize>,
    /// Claims still to be taken whose reply is then lost (the claim lands, the caller is
    /// told the store failed): a store gone mid-command.
    pub lost_claim_replies: Arc<AtomicUsize>,
    /// Releases still to fail without touching the key: the store still gone.
    pub failing_releases: Arc<AtomicUsize>,
    /// Outcomes asked to be stored (failed or taken).
    pub finishes: Arc<AtomicUsize>,
    /// Outcomes still to fail without being stored.
    pub failing_finishes: Arc<AtomicUsize>,
    /// Lost marks still to fail without touching the key.
    pub failing_loses: Arc<AtomicUsize>,
}

impl GatedStore {
    /// A store holding `gated` back, its gate closed.
    pub fn new(gated: Gated) -> Self {
        Self {
            inner: MemoryStore::new(),
            gate: Arc::new(Semaphore::new(0)),
            gated,
            arrived: Arc::new(AtomicUsize::new(0)),
            abandoned: Arc::new(AtomicUsize::new(0)),
            lost: Arc::new(AtomicUsize::new(0)),
            claimed: Arc::new(AtomicUsize::new(0)),
            lost_claim_replies: Arc::new(AtomicUsize::new(0)),
            failing_releases: Arc::new(AtomicUsize::new(0)),
            finishes: Arc::new(AtomicUsize::new(0)),
            failing_finishes: Arc::new(AtomicUsize::new(0)),
            failing_loses: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Takes one from `count` if it is not zero yet: whether this operation fails.
    fn fails(count: &AtomicUsize) -> bool {
        count
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    /// Waits at the gate when `op` is the one held back.
    async fn pass(&self, op: Gated) -> Option<SemaphorePermit<'_>> {
        if op != self.gated {
            return None;
        }
        self.arrived.fetch_add(1, Ordering::SeqCst);
        Some(self.gate.acquire().await.expect("gate open"))
    }
}

impl Store for GatedStore {
    fn put_session(&self, record: SessionRecord) -> StoreFuture<'_, ()> {
        self.inner.put_session(record)
    }
    fn get_session<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<SessionRecord>> {
        Box::pin(async move {
            let _permit = self.pass(Gated::GetSession).await;
            self.inner.get_session(id).await
        })
    }
    fn remove_session<'a>(&'a self, id: &'a str) -> StoreFuture<'a, bool> {
        self.inner.remove_session(id)
    }
    fn create_stream(&self, record: StreamRecord) -> StoreFuture<'_, ()> {
        self.inner.create_stream(record)
    }
    fn get_stream<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<StreamRecord>> {
        self.inner.get_stream(id)
    }
    fn append_event<'a>(&'a self, stream: &'a str, event: StoredEvent) -> StoreFuture<'a, ()> {
        self.inner.append_event(stream, event)
    }
    fn finish_stream<'a>(&'a self, stream: &'a str, head: u64) -> StoreFuture<'a, ()> {
        self.inner.finish_stream(stream, head)
    }
    fn events_after<'a>(
        &'a self,
        stream: &'a str,
        after: u64,
    ) -> StoreFuture<'a, Vec<StoredEvent>> {
        self.inner.events_after(stream, after)
    }
    fn wait_events<'a>(
        &'a self,
        stream: &'a str,
        after: u64,
        timeout: Duration,
    ) -> StoreFuture<'a, Vec<StoredEvent>> {
        self.inner.wait_events(stream, after, timeout)
    }
    fn put_request(&self, record: RequestRecord) -> StoreFuture<'_, ()> {
        self.inner.put_request(record)
    }
    fn get_request<'a>(
        &'a self,
        session: &'a str,
        request_id: &'a Value,
    ) -> StoreFuture<'a, Option<RequestRecord>> {
        self.inner.get_request(session, request_id)
    }
    fn put_prepared(&self, record: PreparedRecord) -> StoreFuture<'_, ()> {
        self.inner.put_prepared(record)
    }
    fn get_prepared<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<PreparedRecord>> {
        self.inner.get_prepared(id)
    }
    fn idempotency_begin<'a>(
        &'a self,
        key: &'a str,
        fingerprint: &'a str,
        instance: usize,
        claim: &'a str,
    ) -> StoreFuture<'a, IdempotencyBegin> {
        Box::pin(async move {
            let _permit = self.pass(Gated::IdempotencyBegin).await;
            let begun = self
                .inner
                .idempotency_begin(key, fingerprint, instance, claim)
                .await;
            self.claimed.fetch_add(1, Ordering::SeqCst);
            if Self::fails(&self.lost_claim_replies) {
                return Err(StoreError("the claim's reply was lost".into()));
            }
            begun
        })
    }
    fn idempotency_finish<'a>(
        &'a self,
        key: &'a str,
        outcome: StoredOutcome,
    ) -> StoreFuture<'a, ()> {
        self.finishes.fetch_add(1, Ordering::SeqCst);
        if Self::fails(&self.failing_finishes) {
            return Box::pin(async { Err(StoreError("the store is gone".into())) });
        }
        self.inner.idempotency_finish(key, outcome)
    }
    fn idempotency_abandon<'a>(&'a self, key: &'a str, claim: &'a str) -> StoreFuture<'a, ()> {
        self.abandoned.fetch_add(1, Ordering::SeqCst);
        if Self::fails(&self.failing_releases) {
            return Box::pin(async { Err(StoreError("the store is gone".into())) });
        }
        self.inner.idempotency_abandon(key, claim)
    }
    fn idempotency_lose<'a>(&'a self, key: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            if Self::fails(&self.failing_loses) {
                return Err(StoreError("the store is gone".into()));
            }
            let lost = self.inner.idempotency_lose(key).await;
            self.lost.fetch_add(1, Ordering::SeqCst);
            lost
        })
    }
    fn put_task(&self, record: TaskRecord) -> StoreFuture<'_, ()> {
        self.inner.put_task(record)
    }
    fn get_task<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        self.inner.get_task(id)
    }
    fn increment_counter<'a>(&'a self, name: &'a str) -> StoreFuture<'a, u64> {
        self.inner.increment_counter(name)
    }
    fn release_instance(&self, instance: usize) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            let _permit = self.pass(Gated::ReleaseInstance).await;
            self.inner.release_instance(instance).await
        })
    }
}
