//! A claim the store took although its reply was lost (the store gone mid-command): the
//! mock refuses the call `503` as the guard does, and, as the guard does, lets the key go,
//! trying the release again while the store is still gone, so the call sent again runs,
//! once. The release frees only the failed claim's own key: a key another call holds stays
//! held.

use crate::common;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use common::gated::{Gated, GatedStore};
use common::*;
use mock_server::{Cluster, ClusterConfig, Preset};
use serde_json::json;

async fn cluster(store: &GatedStore, cut_after_events: Option<u32>) -> Cluster {
    Cluster::start(ClusterConfig {
        preset: Preset::Strict,
        instances: 2,
        idle_timeout: None,
        cut_after_events,
        store: Some(Arc::new(store.clone())),
        ..Default::default()
    })
    .await
    .expect("cluster starts")
}

/// Waits, at most [`STEP`], until `store` has been asked `n` releases; false if it never was.
async fn releases_asked(store: &GatedStore, n: usize) -> bool {
    tokio::time::timeout(STEP, async {
        while store.abandoned.load(Ordering::SeqCst) < n {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await
    .is_ok()
}

/// Before the fix the key stayed running under the live instance that never ran the call:
/// every re-send was answered `IDEMPOTENCY_KEY_IN_USE`, for good.
#[tokio::test]
async fn a_claim_that_landed_though_its_reply_was_lost_lets_the_key_go() {
    let store = GatedStore::new(Gated::Nothing);
    store.lost_claim_replies.store(1, Ordering::SeqCst);
    // The store is still gone for the first two releases.
    store.failing_releases.store(2, Ordering::SeqCst);
    let cluster = cluster(&store, None).await;
    let mcp = Mcp::new(cluster.url());
    let (sid, _, _) = mcp.initialize(None).await;
    assert_eq!(mcp.notify_initialized(&sid).await.status, 202);

    let call = |id| mcp.call_keyed(&sid, id, "counter_increment", json!({}), "lost", "lost-key");
    let refused = call(1).await;
    assert_eq!(refused.status, 503, "{refused:?}");
    assert_eq!(
        refused.data_code().as_deref(),
        Some("IDEMPOTENCY_STORE_UNAVAILABLE")
    );
    assert_eq!(cluster.oracle().executions_tagged("lost").count(), 0);

    // Two releases fail, the third is taken.
    let released = releases_asked(&store, 3).await;
    let again = call(2).await;
    let resp = again.response().expect("an answer");
    assert!(
        resp.get("result").is_some(),
        "the call sent again runs (releases asked: {released}): {resp}"
    );
    let oracle = cluster.oracle();
    assert_eq!(oracle.executions_tagged("lost").count(), 1);
    assert_eq!(oracle.totals.repeated_executions, 0);
    cluster.shutdown().await;
}

/// The failed claim found the key held by another call (its reply "in use" lost): its
/// release must leave that call's key alone, or the next re-send would run it a second time.
#[tokio::test]
async fn a_lost_claim_reply_frees_no_other_calls_key() {
    let store = GatedStore::new(Gated::Nothing);
    // The call's stream is cut after priming + one progress event: the call runs on.
    let cluster = cluster(&store, Some(2)).await;
    let mcp = Mcp::new(cluster.url());
    let (sid, _, _) = mcp.initialize(None).await;
    assert_eq!(mcp.notify_initialized(&sid).await.status, 202);
    let args = json!({"steps": 1000, "delay_ms": 10});
    let call = |id| mcp.call_keyed(&sid, id, "slow", args.clone(), "held", "held-key");
    let first = call(1).await;
    assert!(first.cut, "{:?}", first.events);

    store.lost_claim_replies.store(1, Ordering::SeqCst);
    let refused = call(2).await;
    assert_eq!(refused.status, 503, "{refused:?}");
    assert!(
        releases_asked(&store, 1).await,
        "the failed claim is let go"
    );
    let again = call(3).await;
    assert_eq!(
        again.data_code().as_deref(),
        Some("IDEMPOTENCY_KEY_IN_USE"),
        "{again:?}"
    );
    let oracle = cluster.oracle();
    assert_eq!(oracle.executions_tagged("held").count(), 1);
    assert_eq!(oracle.totals.repeated_executions, 0);
    cluster.shutdown().await;
}

/// The client leaves while its call's claim waits on the store; the store then takes the
/// claim and its reply is lost. Nobody is left to hear the failure, yet the claim that may
/// have landed is let go: before the fix only the request's handler let it go, the handler
/// was gone, and the key stayed running under the live instance for good, every re-send
/// refused `IDEMPOTENCY_KEY_IN_USE` for a call that never ran.
#[tokio::test]
async fn a_lost_claim_reply_nobody_waits_for_still_lets_the_key_go() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let store = GatedStore::new(Gated::IdempotencyBegin);
    store.lost_claim_replies.store(1, Ordering::SeqCst);
    let cluster = Cluster::start(ClusterConfig {
        preset: Preset::Strict,
        instances: 1,
        idle_timeout: None,
        store: Some(Arc::new(store.clone())),
        ..Default::default()
    })
    .await
    .expect("cluster starts");
    let url = cluster.instance_url(0).expect("instance 0 is up");
    let mcp = Mcp::new(url.clone());
    let (sid, _, _) = mcp.initialize(None).await;
    assert_eq!(mcp.notify_initialized(&sid).await.status, 202);

    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "counter_increment", "arguments": {},
                                 "_meta": {TAG: "left", KEY: "left-key"}}})
    .to_string();
    let mut conn = post_by_hand(&url, &sid, &body).await;
    let waited = tokio::time::timeout(STEP, async {
        while store.arrived.load(Ordering::SeqCst) < 1 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(waited.is_ok(), "the claim reached the store");

    // The client leaves: the server, seeing its end closed mid-request, closes the
    // connection, dropping the request's handler with it; the closed connection is the
    // sign the handler is gone.
    conn.shutdown().await.unwrap();
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(STEP, conn.read_to_end(&mut rest)).await;
    assert!(
        closed.is_ok(),
        "the server closes the connection the client left"
    );
    assert!(rest.is_empty(), "nothing was answered: {rest:?}");
    drop(conn);

    // The claim lands, its reply lost, with nobody waiting for it.
    store.gate.add_permits(100);
    let landed = tokio::time::timeout(STEP, async {
        while store.claimed.load(Ordering::SeqCst) < 1 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(landed.is_ok(), "the claim landed");
    let released = releases_asked(&store, 1).await;

    let again = mcp
        .call_keyed(&sid, 2, "counter_increment", json!({}), "left", "left-key")
        .await;
    let resp = again.response().expect("an answer");
    assert!(
        resp.get("result").is_some(),
        "the call sent again runs (released: {released}): {resp}"
    );
    let oracle = cluster.oracle();
    assert_eq!(oracle.executions_tagged("left").count(), 1);
    assert_eq!(oracle.totals.repeated_executions, 0);
    cluster.shutdown().await;
}
