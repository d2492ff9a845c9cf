//! `wait_idle` waits for requests that have not executed yet: a request counts from its
//! acceptance until the work it started has ended, not only while its tool runs. A count of
//! executions read after `wait_idle` is then final: no late re-send is still on its way.
//!
//! The store holds each request back at a gate ([`GatedStore`]) for as long as the test
//! likes: the order of events a slow networked store makes likely, made certain.

use crate::common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use common::gated::{Gated, GatedStore};
use common::*;
use mock_server::{Cluster, ClusterConfig, Preset};
use serde_json::json;

/// How long a cluster with a request held back must keep reading as busy.
const HELD: Duration = Duration::from_millis(300);

async fn cluster(store: &GatedStore, cut_after: Option<u32>) -> Cluster {
    Cluster::start(ClusterConfig {
        preset: Preset::Strict,
        instances: 2,
        idle_timeout: None,
        cut_after_events: cut_after,
        store: Some(Arc::new(store.clone())),
        ..Default::default()
    })
    .await
    .expect("cluster starts")
}

/// Waits until a request is held at the store's gate.
async fn until_held(store: &GatedStore) {
    let deadline = tokio::time::Instant::now() + STEP;
    while store.arrived.load(Ordering::SeqCst) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no request reached the gate"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A keyed call whose key's claim is held by the store (the claim comes before any of its
/// answer, as the guard's does): nothing has executed yet, and the cluster is not idle until
/// it has.
#[tokio::test]
async fn a_call_waiting_on_its_key_claim_is_not_idle() {
    let store = GatedStore::new(Gated::IdempotencyBegin);
    let c = cluster(&store, None).await;
    let mcp = Mcp::new(c.url());
    let (sid, _, _) = mcp.initialize(Some(0.2)).await;
    let waiting = {
        let mcp = mcp.clone();
        tokio::spawn(async move {
            mcp.call_keyed(&sid, 1, "counter_increment", json!({}), "late", "key-late")
                .await
        })
    };
    until_held(&store).await;
    assert!(
        !c.wait_idle(HELD).await,
        "idle while a call waits on its key's claim"
    );
    assert_eq!(c.oracle().executions_tagged("late").count(), 0);
    store.gate.add_permits(1);
    let answered = waiting.await.expect("the call's task");
    assert!(answered.response().is_some(), "{answered:?}");
    assert!(c.wait_idle(STEP).await, "the call ended");
    assert_eq!(c.oracle().executions_tagged("late").count(), 1);
    c.shutdown().await;
}

/// A call held in its instance's handler (its session being looked up), sent to the
/// instance itself: only the instance's own count can say it is there.
#[tokio::test]
async fn a_call_in_its_instances_handler_is_not_idle() {
    let store = GatedStore::new(Gated::GetSession);
    let c = cluster(&store, None).await;
    let direct = Mcp::new(c.instance_url(0).expect("instance 0 is up"));
    let (sid, _, _) = direct.initialize(Some(0.2)).await;
    let call = {
        let (direct, sid) = (direct.clone(), sid.clone());
        tokio::spawn(async move {
            direct
                .call(&sid, 1, "counter_increment", json!({}), "held")
                .await
        })
    };
    until_held(&store).await;
    assert!(
        !c.wait_idle(HELD).await,
        "idle while a call is in its instance's handler"
    );
    assert_eq!(c.oracle().executions_tagged("held").count(), 0);
    store.gate.add_permits(1);
    let reply = tokio::time::timeout(STEP, call).await.unwrap().unwrap();
    assert!(reply.response().is_some(), "{reply:?}");
    assert!(c.wait_idle(STEP).await, "the call ended");
    assert_eq!(c.oracle().executions_tagged("held").count(), 1);
    c.shutdown().await;
}
