//! What a killed instance leaves behind in the idempotency store, with the kill's bookkeeping
//! held back by a gate so that the order of events is the one a networked store makes likely:
//! the aborted call is gone before the store has heard of the kill.
//!
//! A key whose call was running when its instance died must never run again: a re-sent call
//! waits ("in use") while the kill is being recorded, then learns "outcome unknown".

use crate::common;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use common::gated::{Gated, GatedStore};
use common::*;
use mock_server::{Cluster, ClusterConfig, Preset};
use serde_json::json;

/// The kill's record reaches the store only after the killed instance's running call has
/// been dropped. Before the fix, dropping the call released its key ("abandoned", as for a
/// cancelled call), the release found nothing to mark lost, and the re-sent call ran again.
#[tokio::test]
async fn a_key_held_by_a_killed_instance_never_runs_again() {
    let store = GatedStore::new(Gated::ReleaseInstance);
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
        again.data_code().as_deref(),
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
        after.data_code().as_deref(),
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

/// The claim of a call whose instance is killed meanwhile reaches the store after the kill's
/// record: nobody holds the key any more, as after a guard that died mid-claim, and it reads
/// as lost (`IDEMPOTENCY_OUTCOME_UNKNOWN`), as the death's record would have made it and as
/// a dead holder's lease makes it. Before the fix it stayed running under the dead
/// instance's index, and every re-send was refused "in use" for good.
#[tokio::test]
async fn a_claim_landing_after_its_instance_died_is_lost_not_held_by_nobody() {
    let store = GatedStore::new(Gated::IdempotencyBegin);
    let cluster = Cluster::start(ClusterConfig {
        preset: Preset::Strict,
        instances: 2,
        idle_timeout: None,
        store: Some(Arc::new(store.clone())),
        ..Default::default()
    })
    .await
    .unwrap();
    let url0 = cluster.instance_url(0).expect("instance 0 is up");
    let mcp1 = Mcp::new(cluster.instance_url(1).expect("instance 1 is up"));
    let (sid, _, _) = mcp1.initialize(None).await;
    assert_eq!(mcp1.notify_initialized(&sid).await.status, 202);

    let call = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "counter_increment", "arguments": {},
                          "_meta": {TAG: "late", KEY: "late-key"}}})
    };
    // Sent to instance 0 by hand: its connection dies with the instance.
    let body = call(1).to_string();
    let conn = post_by_hand(&url0, &sid, &body).await;
    let waited = tokio::time::timeout(STEP, async {
        while store.arrived.load(Ordering::SeqCst) < 1 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(waited.is_ok(), "the claim reached the store");

    // The death is recorded while the claim waits; then the claim lands.
    assert!(cluster.kill_instance(0).await);
    store.gate.add_permits(100);
    let landed = tokio::time::timeout(STEP, async {
        while store.claimed.load(Ordering::SeqCst) < 1 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(landed.is_ok(), "the claim landed");
    // The key is marked lost after its claim (never, before the fix: then the assertion
    // below says what was answered).
    let _ = tokio::time::timeout(STEP, async {
        while store.lost.load(Ordering::SeqCst) < 1 {
            tokio::task::yield_now().await;
        }
    })
    .await;

    let again = mcp1.post(Some(&sid), call(2)).await;
    assert_eq!(
        again.data_code().as_deref(),
        Some("IDEMPOTENCY_OUTCOME_UNKNOWN"),
        "{again:?}"
    );
    let oracle = cluster.oracle();
    assert_eq!(oracle.executions_tagged("late").count(), 0);
    drop(conn);
    cluster.shutdown().await;
}
