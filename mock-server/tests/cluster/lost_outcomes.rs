//! A keyed call that ran but whose outcome the store failed to keep: as the guard does, the
//! mock stores it again a few times, then marks the key lost (trying that again while the
//! store is still gone), so that its re-sends get the outcome or "outcome unknown", never
//! "in use" for good under the live instance, and never a second run.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::gated::{Gated, GatedStore};
use common::*;
use mock_server::{Cluster, ClusterConfig, Preset};
use serde_json::json;

async fn cluster(store: &GatedStore) -> Cluster {
    Cluster::start(ClusterConfig {
        preset: Preset::Strict,
        instances: 2,
        idle_timeout: None,
        store: Some(Arc::new(store.clone())),
        ..Default::default()
    })
    .await
    .expect("cluster starts")
}

/// Waits, at most `within`, until `count` reaches `n`; false if it never does.
async fn reaches(count: &AtomicUsize, n: usize, within: Duration) -> bool {
    tokio::time::timeout(within, async {
        while count.load(Ordering::SeqCst) < n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .is_ok()
}

/// Before the fix the outcome was tried once: the key stayed running and every re-send was
/// answered `IDEMPOTENCY_KEY_IN_USE`, for good.
#[tokio::test]
async fn an_outcome_the_store_failed_to_keep_is_stored_again() {
    let store = GatedStore::new(Gated::Nothing);
    store.failing_finishes.store(2, Ordering::SeqCst);
    let cluster = cluster(&store).await;
    let mcp = Mcp::new(cluster.url());
    let (sid, _, _) = mcp.initialize(None).await;
    assert_eq!(mcp.notify_initialized(&sid).await.status, 202);
    let call = |id| mcp.call_keyed(&sid, id, "counter_increment", json!({}), "kept", "kept-key");

    let first = call(1).await;
    let result = first.response().expect("an answer")["result"].clone();
    assert!(result.is_object(), "{first:?}");
    assert!(
        reaches(&store.finishes, 3, STEP).await,
        "the outcome is stored again after two failures (tries: {})",
        store.finishes.load(Ordering::SeqCst)
    );
    let again = call(2).await;
    let resp = again.response().expect("an answer");
    assert_eq!(resp["result"], result, "the stored outcome: {resp}");
    let oracle = cluster.oracle();
    assert_eq!(oracle.executions_tagged("kept").count(), 1);
    assert_eq!(oracle.totals.repeated_executions, 0);
    cluster.shutdown().await;
}

/// The store never takes the outcome: the key ends lost (the mark itself tried again while
/// the store still fails it), and its re-send is told the outcome is unknown.
#[tokio::test]
async fn an_outcome_never_kept_leaves_the_key_lost() {
    let store = GatedStore::new(Gated::Nothing);
    store.failing_finishes.store(usize::MAX, Ordering::SeqCst);
    store.failing_loses.store(1, Ordering::SeqCst);
    let cluster = cluster(&store).await;
    let mcp = Mcp::new(cluster.url());
    let (sid, _, _) = mcp.initialize(None).await;
    assert_eq!(mcp.notify_initialized(&sid).await.status, 202);
    let call = |id| mcp.call_keyed(&sid, id, "counter_increment", json!({}), "gone", "gone-key");

    assert!(call(1).await.response().expect("an answer")["result"].is_object());
    assert!(
        reaches(&store.lost, 1, STEP).await,
        "the key is marked lost once its outcome is given up on"
    );
    let again = call(2).await;
    assert_eq!(
        again.data_code().as_deref(),
        Some("IDEMPOTENCY_OUTCOME_UNKNOWN"),
        "{again:?}"
    );
    let oracle = cluster.oracle();
    assert_eq!(oracle.executions_tagged("gone").count(), 1);
    assert_eq!(oracle.totals.repeated_executions, 0);
    cluster.shutdown().await;
}

/// The instance that ran the call is killed while its outcome is being stored again: its
/// death marks the key lost, and the killed instance stores nothing after it (everything of
/// an incarnation ends with it). Before the fix its retries went on and turned the lost key
/// into a finished one, after a re-send had been told the outcome was unknown.
#[tokio::test]
async fn a_killed_instance_stores_no_outcome_after_its_death() {
    let store = GatedStore::new(Gated::Nothing);
    // The first try and two more fail: the third retry comes 700 ms after the first try,
    // well after the kill.
    store.failing_finishes.store(3, Ordering::SeqCst);
    let cluster = cluster(&store).await;
    let mcp = Mcp::new(cluster.url());
    let (sid, _, _) = mcp.initialize(None).await; // I0
    assert_eq!(mcp.notify_initialized(&sid).await.status, 202); // I1
    let call = |id| mcp.call_keyed(&sid, id, "counter_increment", json!({}), "dead", "dead-key");

    assert!(call(1).await.response().expect("an answer")["result"].is_object()); // I0
    assert!(cluster.kill_instance(0).await);
    let tried = store.finishes.load(Ordering::SeqCst);
    assert!(
        tried <= 3,
        "the kill came before the outcome was kept ({tried} tries)"
    );
    // Every try the schedule would make, and one more: none comes.
    assert!(
        !reaches(&store.finishes, 4, Duration::from_secs(4)).await,
        "the killed instance stored the outcome again ({} tries)",
        store.finishes.load(Ordering::SeqCst)
    );
    let again = call(2).await; // I1
    assert_eq!(
        again.data_code().as_deref(),
        Some("IDEMPOTENCY_OUTCOME_UNKNOWN"),
        "{again:?}"
    );
    let oracle = cluster.oracle();
    assert_eq!(oracle.executions_tagged("dead").count(), 1);
    assert_eq!(oracle.totals.repeated_executions, 0);
    cluster.shutdown().await;
}
