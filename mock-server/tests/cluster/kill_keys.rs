//! What a killed instance leaves behind in the idempotency store, with the kill's bookkeeping
//! held back by a gate so that the order of events is the one a networked store makes likely:
//! the aborted call is gone before the store has heard of the kill.
//!
//! A key whose call was running when its instance died must never run again: a re-sent call
//! waits ("in use") while the kill is being recorded, then learns "outcome unknown".

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use mock_server::store::{
    IdempotencyBegin, PreparedRecord, RequestRecord, SessionRecord, StoreFuture, StoredEvent,
    StoredOutcome, StreamRecord, TaskRecord,
};
use mock_server::{Cluster, ClusterConfig, MemoryStore, Preset, Store};
use serde_json::{json, Value};
use tokio::sync::Semaphore;

/// A [`MemoryStore`] whose `release_instance` waits for the test to open a gate, and which
/// counts the keys released without an outcome.
#[derive(Clone)]
struct GatedStore {
    inner: MemoryStore,
    gate: Arc<Semaphore>,
    abandoned: Arc<AtomicUsize>,
}

impl Store for GatedStore {
    fn put_session(&self, record: SessionRecord) -> StoreFuture<'_, ()> {
        self.inner.put_session(record)
    }
    fn get_session<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<SessionRecord>> {
        self.inner.get_session(id)
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
    ) -> StoreFuture<'a, IdempotencyBegin> {
        self.inner.idempotency_begin(key, fingerprint, instance)
    }
    fn idempotency_finish<'a>(
        &'a self,
        key: &'a str,
        outcome: StoredOutcome,
    ) -> StoreFuture<'a, ()> {
        self.inner.idempotency_finish(key, outcome)
    }
    fn idempotency_abandon<'a>(&'a self, key: &'a str) -> StoreFuture<'a, ()> {
        self.abandoned.fetch_add(1, Ordering::SeqCst);
        self.inner.idempotency_abandon(key)
    }
    fn idempotency_lose<'a>(&'a self, key: &'a str) -> StoreFuture<'a, ()> {
        self.inner.idempotency_lose(key)
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
            let _permit = self.gate.acquire().await.expect("gate open");
            self.inner.release_instance(instance).await
        })
    }
}

fn error_code(reply: &Reply) -> Option<String> {
    let resp = reply.response()?;
    resp.pointer("/error/data/code")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// The kill's record reaches the store only after the killed instance's running call has
/// been dropped. Before the fix, dropping the call released its key ("abandoned", as for a
/// cancelled call), the release found nothing to mark lost, and the re-sent call ran again.
#[tokio::test]
async fn a_key_held_by_a_killed_instance_never_runs_again() {
    let store = GatedStore {
        inner: MemoryStore::new(),
        gate: Arc::new(Semaphore::new(0)),
        abandoned: Arc::new(AtomicUsize::new(0)),
    };
    let cluster = Arc::new(
        Cluster::start(ClusterConfig {
            preset: Preset::Strict,
            instances: 2,
            idle_timeout: None,
            // The call's stream is cut after priming + one progress event: the call runs on.
            cut_after_events: Some(2),
            store: Some(Arc::new(store.clone())),
            ..Default::default()
        })
        .await
        .unwrap(),
    );
    let mcp = Mcp::new(cluster.url());
    let (sid, _, _) = mcp.initialize(Some(0.2)).await; // I0
    assert_eq!(mcp.notify_initialized(&sid).await.status, 202); // I1
    let args = json!({"steps": 1000, "delay_ms": 10});
    let first = mcp
        .call_keyed(&sid, 1, "slow", args.clone(), "slow-k", "key-1")
        .await; // I0
    assert!(first.cut, "{:?}", first.events);

    let killer = {
        let cluster = cluster.clone();
        tokio::spawn(async move { cluster.kill_instance(0).await })
    };
    // The kill has aborted the call (nothing runs any more); its record is held at the gate.
    assert!(cluster.wait_idle(STOPS).await, "the killed call stopped");
    assert!(!killer.is_finished());

    let again = mcp
        .call_keyed(&sid, 2, "slow", args.clone(), "slow-k", "key-1")
        .await; // I1, the only one up
    assert_eq!(
        error_code(&again).as_deref(),
        Some("IDEMPOTENCY_KEY_IN_USE"),
        "{again:?}"
    );
    assert_eq!(cluster.oracle().executions_tagged("slow-k").count(), 1);

    store.gate.add_permits(1);
    assert!(killer.await.unwrap());
    let after = mcp
        .call_keyed(&sid, 3, "slow", args, "slow-k", "key-1")
        .await;
    assert_eq!(
        error_code(&after).as_deref(),
        Some("IDEMPOTENCY_OUTCOME_UNKNOWN"),
        "{after:?}"
    );
    let oracle = cluster.oracle();
    assert_eq!(oracle.executions_tagged("slow-k").count(), 1);
    assert_eq!(oracle.totals.repeated_executions, 0);
    assert_eq!(
        store.abandoned.load(Ordering::SeqCst),
        0,
        "a killed instance releases no key"
    );
    if let Ok(cluster) = Arc::try_unwrap(cluster) {
        cluster.shutdown().await;
    }
}
