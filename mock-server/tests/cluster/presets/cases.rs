//! The seed scenario per preset, driven with raw HTTP and checked against the oracle.
//!
//! Routing is deterministic: the balancer round-robins every request over the instances in
//! order, so with 3 instances the n-th request of a test lands on instance n mod 3.
//!
//! The parent module names the shared store (`super::BACKEND`): `presets.rs` runs these
//! tests with it in memory, `presets_on_redis.rs` with it in Redis.

use crate::common;

use std::time::Duration;

use common::cluster::{start_on, TestCluster};
use common::*;
use mock_server::{Cluster, ClusterConfig, Faults, Preset};
use serde_json::{json, Value};

const NEGOTIATED: f64 = 0.2;

async fn start(config: ClusterConfig) -> std::io::Result<TestCluster> {
    start_on(super::BACKEND, config).await
}

async fn cluster(preset: Preset, cut_after: Option<u32>) -> TestCluster {
    start(ClusterConfig {
        preset,
        instances: 3,
        cut_after_events: cut_after,
        ..Default::default()
    })
    .await
    .expect("cluster starts")
}

/// Steps shared by the cross-instance scenarios. Returns (mcp, session, negotiated hash,
/// Last-Event-ID seen before the cut). Four requests: on a fresh 3-instance cluster,
/// init → I0, initialized → I1, ping → I2, slow → I0 (cut after priming + one progress),
/// and the next request lands on I1.
async fn open_and_cut(c: &Cluster) -> (Mcp, String, String, String) {
    c.set_faults(Faults {
        cut_after_events: Some(2),
        ..c.faults()
    });
    let mcp = Mcp::new(c.url());
    let (sid, hash, _) = mcp.initialize(Some(NEGOTIATED)).await;
    let hash = hash.expect("extension on: capability hash on initialize");
    assert_eq!(mcp.notify_initialized(&sid).await.status, 202);
    assert_eq!(mcp.ping(&sid).await.status, 200);
    let slow = mcp
        .call(
            &sid,
            1,
            "slow",
            json!({"steps": 3, "delay_ms": 5}),
            "slow-1",
        )
        .await;
    assert_eq!(slow.status, 200);
    assert!(slow.sse, "tools/call is answered with SSE");
    assert!(slow.cut, "the balancer cut the stream");
    assert_eq!(
        slow.events.len(),
        2,
        "cut right after the second event: {:?}",
        slow.events
    );
    assert_eq!(slow.events[0].data, "", "priming event has empty data");
    let last = slow.last_event_id().expect("events carry ids");
    assert!(last.ends_with("-2"), "sequenced ids: {last}");
    // The call keeps running after its stream is cut (a disconnect is not a cancel).
    assert!(c.wait_idle(STEP).await, "slow call finished");
    // Resumed streams are not cut again in these scenarios.
    c.set_faults(Faults {
        cut_after_events: None,
        ..c.faults()
    });
    (mcp, sid, hash, last)
}

fn rejection_reason(r: &Reply) -> Option<String> {
    let body: Value = serde_json::from_str(&r.body).ok()?;
    assert_eq!(
        body.pointer("/error/data/code"),
        Some(&json!("SESSION_RESUME_REJECTED")),
        "{body}"
    );
    body.pointer("/error/data/reason")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

#[tokio::test]
async fn naive_honors_cross_instance_resume_and_follow_up_runs_under_default_capabilities() {
    let c = cluster(Preset::Naive, Some(2)).await;
    let (mcp, sid, hash, last) = open_and_cut(&c).await;

    // Resume → I1, which never saw initialize: it replays the rest from the shared log.
    let resumed = mcp.get(&sid, Some(&last)).await;
    assert_eq!(resumed.status, 200);
    assert!(!resumed.cut, "the replayed stream ends cleanly");
    let response = resumed.response().expect("replayed response");
    assert_eq!(result_text(&response), "slow: done after 3 steps");
    // ... under a made-up default session, which its capability hash gives away.
    let resumed_hash = resumed.header("mcp-capability-hash").expect("hash header");
    assert_ne!(resumed_hash, hash);

    // Dependent follow-up → I2: silently executed with default capabilities.
    let gen = mcp
        .call(&sid, 2, "generate", json!({"prompt": "p"}), "gen-1")
        .await;
    let text = result_text(&gen.response().expect("generate answered"));
    assert!(text.contains("temperature 1"), "{text}");

    let o = c.oracle();
    assert_eq!(o.totals.cross_instance_resumes, 1);
    assert!(o.totals.rejections.is_empty());
    let slow: Vec<_> = o.executions_tagged("slow-1").collect();
    assert_eq!(slow.len(), 1);
    assert!(!slow[0].wrong_capability);
    assert_eq!(slow[0].instance, 0);
    let gen: Vec<_> = o.executions_tagged("gen-1").collect();
    assert_eq!(gen.len(), 1);
    assert!(
        gen[0].wrong_capability,
        "oracle sees the wrong capabilities: {:?}",
        gen[0]
    );
    assert_eq!(gen[0].instance, 2);
    assert_eq!(o.totals.wrong_capability, 1);
    assert!(o.totals.sessions_made_up >= 1);
    c.shutdown().await;
}

#[tokio::test]
async fn naive_commit_against_unknown_record_is_silently_executed() {
    let c = start(ClusterConfig {
        preset: Preset::Naive,
        instances: 2,
        ..Default::default()
    })
    .await
    .unwrap();
    let mcp = Mcp::new(c.url());
    let (sid, _, _) = mcp.initialize(Some(NEGOTIATED)).await; // I0
    let ping = mcp.ping(&sid).await; // I1
    assert_eq!(ping.status, 200);
    let prep = mcp
        .call(&sid, 1, "prepare", json!({"item": "x"}), "prep")
        .await; // I0
    let record = result_text(&prep.response().unwrap());
    assert_eq!(mcp.ping(&sid).await.status, 200); // I1
    let commit = mcp
        .call(&sid, 2, "commit", json!({"record": record}), "commit")
        .await; // I0
    assert!(result_text(&commit.response().unwrap()).starts_with("committed"));
    let commit2 = mcp
        .call(
            &sid,
            3,
            "commit",
            json!({"record": record}),
            "commit-elsewhere",
        )
        .await; // I1
    assert!(
        result_text(&commit2.response().unwrap()).starts_with("committed"),
        "naive commits anyway"
    );
    let o = c.oracle();
    assert!(!o.executions_tagged("commit").next().unwrap().unknown_record);
    let elsewhere = o.executions_tagged("commit-elsewhere").next().unwrap();
    assert!(elsewhere.unknown_record && elsewhere.wrong_capability);
    assert_eq!(o.totals.unknown_record, 1);
    c.shutdown().await;
}

#[tokio::test]
async fn strict_rejects_cross_instance_resume_with_the_extension_body() {
    let c = cluster(Preset::Strict, Some(2)).await;
    let (mcp, sid, _hash, last) = open_and_cut(&c).await;

    let resumed = mcp.get(&sid, Some(&last)).await; // I1
    assert_eq!(resumed.status, 404);
    assert_eq!(rejection_reason(&resumed).as_deref(), Some("not_owner"));
    assert_eq!(
        resumed.header("mcp-resume-rejected").as_deref(),
        Some("not_owner")
    );

    // The server forgot the session: any instance now answers 404.
    let after = mcp.ping(&sid).await; // I2
    assert_eq!(after.status, 404);

    // A fresh session works, with its negotiated capabilities, on every instance.
    let (sid2, hash2, _) = mcp.initialize(Some(NEGOTIATED)).await; // I0
    let gen = mcp
        .call(&sid2, 2, "generate", json!({"prompt": "p"}), "gen-2")
        .await; // I1
    assert_eq!(gen.header("mcp-capability-hash"), hash2);
    assert!(result_text(&gen.response().unwrap()).contains("temperature 0.2"));
    let prep = mcp
        .call(&sid2, 3, "prepare", json!({"item": "x"}), "prep")
        .await; // I2
    let record = result_text(&prep.response().unwrap());
    let commit = mcp
        .call(&sid2, 4, "commit", json!({"record": record}), "commit")
        .await; // I0
    assert!(result_text(&commit.response().unwrap()).starts_with("committed"));

    let o = c.oracle();
    assert_eq!(o.rejections("not_owner"), 1);
    assert_eq!(o.totals.cross_instance_resumes, 0);
    assert_eq!(o.totals.wrong_capability, 0);
    assert_eq!(o.totals.unknown_record, 0);
    c.shutdown().await;
}

#[tokio::test]
async fn strict_honors_a_resume_on_the_owner() {
    let c = cluster(Preset::Strict, Some(2)).await;
    let (mcp, sid, hash, last) = open_and_cut(&c).await;
    assert_eq!(mcp.ping(&sid).await.status, 200); // I1
    assert_eq!(mcp.ping(&sid).await.status, 200); // I2
    let resumed = mcp.get(&sid, Some(&last)).await; // I0, the owner
    assert_eq!(resumed.status, 200, "{}", resumed.body);
    assert_eq!(resumed.header("mcp-capability-hash"), Some(hash));
    let ids: Vec<_> = resumed.events.iter().filter_map(|e| e.id.clone()).collect();
    let stream = last.trim_end_matches("-2");
    assert_eq!(
        ids,
        vec![
            format!("{stream}-3"),
            format!("{stream}-4"),
            format!("{stream}-5")
        ]
    );
    assert_eq!(
        result_text(&resumed.response().unwrap()),
        "slow: done after 3 steps"
    );
    let o = c.oracle();
    assert_eq!(o.totals.resumes, 1);
    assert_eq!(o.totals.cross_instance_resumes, 0);
    assert!(o.resumes[0].honored);
    c.shutdown().await;
}

#[tokio::test]
async fn strict_rejects_gap_and_capability_drift() {
    let c = cluster(Preset::Strict, Some(2)).await;
    let (mcp, sid, _hash, last) = open_and_cut(&c).await;
    // A cursor beyond what was issued: continuity cannot be proven.
    assert_eq!(mcp.ping(&sid).await.status, 200); // I1
    assert_eq!(mcp.ping(&sid).await.status, 200); // I2
    let stream = last.trim_end_matches("-2").to_owned();
    let r = mcp.get(&sid, Some(&format!("{stream}-99"))).await; // I0
    assert_eq!(r.status, 404);
    assert_eq!(rejection_reason(&r).as_deref(), Some("event_gap"));

    // Drift: the shared record's context changes after the stream was opened. Seven
    // requests so far, so: init → I1, initialized → I2, ping → I0, slow → I1 (the owner).
    let (mcp, sid, _hash, last) = open_and_cut(&c).await;
    let drifted = c.drift_session(&sid).await.expect("shared session");
    assert_eq!(mcp.ping(&sid).await.status, 200); // I2
    let p = mcp.ping(&sid).await; // I0
    assert_eq!(p.header("mcp-capability-hash"), Some(drifted));
    let r = mcp.get(&sid, Some(&last)).await; // I1, the owner
    assert_eq!(r.status, 404);
    assert_eq!(rejection_reason(&r).as_deref(), Some("capability_mismatch"));
    let o = c.oracle();
    assert_eq!(o.rejections("event_gap"), 1);
    assert_eq!(o.rejections("capability_mismatch"), 1);
    c.shutdown().await;
}

#[tokio::test]
async fn replicated_honors_cross_instance_resume_and_follow_up_is_correct() {
    let c = cluster(Preset::Replicated, Some(2)).await;
    let (mcp, sid, hash, last) = open_and_cut(&c).await;

    let resumed = mcp.get(&sid, Some(&last)).await; // I1
    assert_eq!(resumed.status, 200);
    assert_eq!(resumed.header("mcp-capability-hash"), Some(hash.clone()));
    assert_eq!(
        result_text(&resumed.response().unwrap()),
        "slow: done after 3 steps"
    );

    let gen = mcp
        .call(&sid, 2, "generate", json!({"prompt": "p"}), "gen-1")
        .await; // I2
    assert_eq!(gen.header("mcp-capability-hash"), Some(hash));
    assert!(result_text(&gen.response().unwrap()).contains("temperature 0.2"));
    let prep = mcp
        .call(&sid, 3, "prepare", json!({"item": "x"}), "prep")
        .await; // I0
    let record = result_text(&prep.response().unwrap());
    let commit = mcp
        .call(&sid, 4, "commit", json!({"record": record}), "commit")
        .await; // I1
    assert!(result_text(&commit.response().unwrap()).starts_with("committed"));

    let o = c.oracle();
    assert_eq!(o.totals.cross_instance_resumes, 1);
    assert!(o.totals.rejections.is_empty());
    assert_eq!(o.totals.wrong_capability, 0);
    assert_eq!(o.totals.unknown_record, 0);
    c.shutdown().await;
}

#[tokio::test]
async fn replicated_follows_a_live_stream_from_another_instance() {
    let c = start(ClusterConfig {
        preset: Preset::Replicated,
        instances: 2,
        cut_after_events: Some(2),
        ..Default::default()
    })
    .await
    .unwrap();
    let mcp = Mcp::new(c.url());
    let (sid, _, _) = mcp.initialize(Some(NEGOTIATED)).await; // I0
    assert_eq!(mcp.ping(&sid).await.status, 200); // I1
    let slow = mcp
        .call(&sid, 1, "slow", json!({"steps": 6, "delay_ms": 30}), "slow")
        .await; // I0
    assert!(slow.cut);
    // Still running on I0 while I1 serves the resume from the shared log, live. No cut on
    // the resumed stream this time.
    c.set_faults(Faults {
        cut_after_events: None,
        ..c.faults()
    });
    let last = slow.last_event_id().unwrap();
    let resumed = mcp.get(&sid, Some(&last)).await; // I1
    assert_eq!(resumed.status, 200);
    assert!(!resumed.cut);
    assert_eq!(
        result_text(&resumed.response().unwrap()),
        "slow: done after 6 steps"
    );
    assert_eq!(
        resumed.events.len(),
        6,
        "progress 2..6 and the response: {:?}",
        resumed.events
    );
    assert_eq!(c.oracle().totals.cross_instance_resumes, 1);
    c.shutdown().await;
}

#[tokio::test]
async fn replicated_rejects_resume_of_a_call_lost_with_its_instance() {
    let c = start(ClusterConfig {
        preset: Preset::Replicated,
        instances: 2,
        cut_after_events: Some(2),
        ..Default::default()
    })
    .await
    .unwrap();
    let mcp = Mcp::new(c.url());
    let (sid, _, _) = mcp.initialize(Some(NEGOTIATED)).await; // I0
    assert_eq!(mcp.ping(&sid).await.status, 200); // I1
    let slow = mcp
        .call(
            &sid,
            1,
            "slow",
            json!({"steps": 1000, "delay_ms": 10}),
            "slow",
        )
        .await; // I0
    assert!(slow.cut);
    assert!(c.kill_instance(0).await);
    assert!(
        c.wait_idle(STOPS).await,
        "the killed instance's call stopped"
    );
    let r = mcp.get(&sid, Some(&slow.last_event_id().unwrap())).await; // I1 (I0 is down)
    assert_eq!(r.status, 404);
    assert_eq!(rejection_reason(&r).as_deref(), Some("orphaned_request"));
    // A restarted instance comes back empty but serves the (shared) sessions again.
    c.restart_instance(0).await.unwrap();
    let (sid2, _, _) = mcp.initialize(None).await;
    assert_eq!(mcp.ping(&sid2).await.status, 200);
    assert_eq!(mcp.ping(&sid2).await.status, 200);
    let o = c.oracle();
    assert!(o.totals.requests_per_instance[0] >= 3);
    c.shutdown().await;
}

#[tokio::test]
async fn sticky_never_crosses_instances() {
    let c = cluster(Preset::Sticky, Some(2)).await;
    let mcp = Mcp::new(c.url());
    let (sid, hash, _) = mcp.initialize(Some(NEGOTIATED)).await;
    assert_eq!(mcp.notify_initialized(&sid).await.status, 202);
    let slow = mcp
        .call(&sid, 1, "slow", json!({"steps": 3, "delay_ms": 5}), "slow")
        .await;
    assert!(slow.cut);
    assert!(c.wait_idle(STEP).await);
    c.set_faults(Faults {
        cut_after_events: None,
        ..c.faults()
    });
    for _ in 0..3 {
        assert_eq!(mcp.ping(&sid).await.status, 200);
    }
    let resumed = mcp.get(&sid, Some(&slow.last_event_id().unwrap())).await;
    assert_eq!(resumed.status, 200);
    assert_eq!(resumed.header("mcp-capability-hash"), hash);
    let gen = mcp
        .call(&sid, 2, "generate", json!({"prompt": "p"}), "gen")
        .await;
    assert!(result_text(&gen.response().unwrap()).contains("temperature 0.2"));
    let o = c.oracle();
    assert_eq!(o.totals.resumes, 1);
    assert_eq!(o.totals.cross_instance_resumes, 0);
    assert!(o.resumes.iter().all(|r| !r.cross_instance && r.honored));
    let busy: Vec<_> = o
        .totals
        .requests_per_instance
        .iter()
        .filter(|n| **n > 0)
        .collect();
    assert_eq!(
        busy.len(),
        1,
        "one instance served the whole session: {:?}",
        o.totals.requests_per_instance
    );
    assert_eq!(o.totals.wrong_capability, 0);
    c.shutdown().await;
}

#[tokio::test]
async fn idempotency_keys_are_shared_across_instances() {
    for preset in Preset::ALL {
        let c = cluster(preset, None).await;
        let mcp = Mcp::new(c.url());
        let (sid, hash, _) = mcp.initialize(None).await;
        let first = mcp
            .call_keyed(&sid, 1, "counter_increment", json!({}), "inc", "k1")
            .await;
        let second = mcp
            .call_keyed(&sid, 2, "counter_increment", json!({}), "inc", "k1")
            .await;
        let (a, b) = (first.response().unwrap(), second.response().unwrap());
        assert_eq!(
            result_text(&a),
            result_text(&b),
            "{preset}: the stored result comes back"
        );
        assert_eq!(b["id"], json!(2), "the replay answers the new request id");
        let produced_under = a
            .pointer(&format!("/result/_meta/{}", HASH_META.replace('/', "~1")))
            .cloned();
        assert!(produced_under.is_some(), "{preset}: {a}");
        if preset != Preset::Naive {
            assert_eq!(produced_under, hash.clone().map(Value::from));
        }
        let other = mcp
            .call_keyed(&sid, 3, "echo", json!({"text": "x"}), "inc2", "k1")
            .await;
        let err = other.response().unwrap();
        assert_eq!(
            err.pointer("/error/data/code"),
            Some(&json!("IDEMPOTENCY_KEY_REUSED")),
            "{err}"
        );

        // Same key while the first is still running: refused at once.
        let slow_args = json!({"steps": 200, "delay_ms": 10});
        let m2 = mcp.clone();
        let s2 = sid.clone();
        let a2 = slow_args.clone();
        let running =
            tokio::spawn(async move { m2.call_keyed(&s2, 4, "slow", a2, "slow", "k2").await });
        // Wait until the oracle sees it executing.
        let deadline = tokio::time::Instant::now() + STEP;
        while c.oracle().executions_tagged("slow").next().is_none() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "slow call never started"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let dup = mcp
            .call_keyed(&sid, 5, "slow", slow_args, "slow-dup", "k2")
            .await;
        let err = dup.response().unwrap();
        assert_eq!(
            err.pointer("/error/data/code"),
            Some(&json!("IDEMPOTENCY_KEY_IN_USE")),
            "{preset}: {err}"
        );
        running.abort();

        let o = c.oracle();
        assert_eq!(o.executions_tagged("inc").count(), 1, "{preset}: ran once");
        assert_eq!(o.totals.idempotent_replays, 1);
        assert_eq!(o.totals.duplicate_side_effects, 0);
        c.shutdown().await;
    }
}

#[tokio::test]
async fn unkeyed_repeat_of_a_side_effect_is_counted_as_duplicate() {
    let c = cluster(Preset::Replicated, None).await;
    let mcp = Mcp::new(c.url());
    let (sid, _, _) = mcp.initialize(None).await;
    mcp.call(&sid, 1, "counter_increment", json!({}), "same-tag")
        .await;
    mcp.call(&sid, 2, "counter_increment", json!({}), "same-tag")
        .await;
    let o = c.oracle();
    assert_eq!(o.totals.duplicate_side_effects, 1);
    assert!(
        o.executions_tagged("same-tag")
            .nth(1)
            .unwrap()
            .duplicate_side_effect
    );
    c.shutdown().await;
}

#[tokio::test]
async fn extension_off_looks_like_a_stock_server() {
    let c = start(ClusterConfig {
        preset: Preset::Strict,
        instances: 3,
        extension: false,
        cut_after_events: Some(2),
        ..Default::default()
    })
    .await
    .unwrap();
    let mcp = Mcp::new(c.url());
    let (sid, hash, init) = mcp.initialize(Some(NEGOTIATED)).await; // I0
    assert!(hash.is_none(), "no capability hash header");
    assert!(init
        .json()
        .pointer("/result/capabilities/experimental/resumeSafety")
        .is_none());
    assert_eq!(mcp.ping(&sid).await.status, 200); // I1
    assert_eq!(mcp.ping(&sid).await.status, 200); // I2
    let slow = mcp
        .call(&sid, 1, "slow", json!({"steps": 3, "delay_ms": 5}), "slow")
        .await; // I0
    assert!(slow.cut);
    let ids: Vec<String> = slow.events.iter().filter_map(|e| e.id.clone()).collect();
    assert!(
        ids.iter()
            .all(|id| !id.ends_with("-1") && !id.ends_with("-2")),
        "{ids:?}"
    );
    assert!(slow.headers.get("mcp-capability-hash").is_none());
    // Keys are ignored: a repeat runs again.
    mcp.call_keyed(&sid, 2, "counter_increment", json!({}), "inc", "k")
        .await; // I1
    mcp.call_keyed(&sid, 3, "counter_increment", json!({}), "inc", "k")
        .await; // I2
    assert!(c.wait_idle(STEP).await);
    // Stock servers keep a resumed stream open after the replay: let the balancer's idle
    // timeout end it.
    c.set_faults(Faults {
        cut_after_events: None,
        idle_timeout: Some(Duration::from_millis(300)),
        ..c.faults()
    });
    let r = mcp.get(&sid, Some(&slow.last_event_id().unwrap())).await; // I0: owner
    assert_eq!(r.status, 200);
    assert!(r.cut, "kept open until the idle timeout");
    assert_eq!(
        result_text(&r.response().unwrap()),
        "slow: done after 3 steps"
    );
    assert_eq!(mcp.ping(&sid).await.status, 200); // I1
    let r = mcp.get(&sid, Some(&slow.last_event_id().unwrap())).await; // I2: not the owner
    assert_eq!(r.status, 404);
    assert!(r.headers.get("mcp-resume-rejected").is_none());
    assert!(
        r.json().pointer("/error/data").is_none(),
        "plain 404: {}",
        r.body
    );
    let o = c.oracle();
    assert_eq!(o.totals.duplicate_side_effects, 1);
    assert_eq!(o.rejections("not_owner"), 1);
    c.shutdown().await;
}

/// A two-instance sticky cluster and a session on it.
async fn sticky_session() -> (TestCluster, Mcp, String) {
    let c = start(ClusterConfig {
        preset: Preset::Sticky,
        instances: 2,
        ..Default::default()
    })
    .await
    .unwrap();
    let mcp = Mcp::new(c.url());
    let (sid, _, _) = mcp.initialize(None).await;
    (c, mcp, sid)
}

/// The client's `notifications/cancelled` for its request `id`, accepted.
async fn cancel(mcp: &Mcp, sid: &str, id: u64) {
    let cancelled = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                           "params": {"requestId": id}});
    assert_eq!(mcp.post(Some(sid), cancelled).await.status, 202);
}

#[tokio::test]
async fn cancelled_notification_stops_the_call_on_its_instance() {
    let (c, mcp, sid) = sticky_session().await;
    let m2 = mcp.clone();
    let s2 = sid.clone();
    let call = tokio::spawn(async move {
        m2.post(
            Some(&s2),
            json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                   "params": {"name": "slow", "arguments": {"steps": 1000, "delay_ms": 10},
                              "_meta": {"progressToken": "p", TAG: "slow"}}}),
        )
        .await
    });
    let deadline = tokio::time::Instant::now() + STEP;
    while c.oracle().executions_tagged("slow").next().is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "slow call never started"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    cancel(&mcp, &sid, 7).await;
    let reply = tokio::time::timeout(STEP, call)
        .await
        .expect("stream ended")
        .unwrap();
    assert!(
        reply.response().is_none(),
        "no response to a cancelled request"
    );
    assert!(c.wait_idle(STOPS).await, "the call stopped");
    c.shutdown().await;
}

/// A keyed side effect cancelled after it ran keeps its key, as a guard keeps one whose call
/// ended without an answer: the same call under the same key is never run again, it is
/// answered `IDEMPOTENCY_OUTCOME_UNKNOWN`.
#[tokio::test]
async fn a_keyed_call_cancelled_after_its_effect_never_runs_again() {
    let (c, mcp, sid) = sticky_session().await;
    let args = json!({"steps": 1000, "delay_ms": 10});
    let call = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "counter_increment", "arguments": args,
                          "_meta": {TAG: "count", KEY: "key-cancelled"}}})
    };
    let mut stream = tokio::time::timeout(
        STEP,
        mcp.http
            .post(&mcp.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-session-id", &sid)
            .header("mcp-protocol-version", VERSION)
            .body(call(7).to_string())
            .send(),
    )
    .await
    .expect("request hung")
    .unwrap();
    // Its first step comes after the increment: the effect is applied.
    let mut seen = String::new();
    while !seen.contains("step 1 of") {
        let chunk = tokio::time::timeout(STEP, stream.chunk())
            .await
            .expect("the first step never came")
            .unwrap()
            .expect("the stream goes on");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    cancel(&mcp, &sid, 7).await;
    let rest = Mcp::read(stream).await;
    assert!(
        rest.response().is_none(),
        "no response to a cancelled request"
    );
    assert!(c.wait_idle(STOPS).await, "the call stopped");
    // The same call again: in use only until the cancelled call's end reaches the store.
    let code = |r: &Reply| {
        r.response()
            .and_then(|v| v.pointer("/error/data/code").cloned())
    };
    let deadline = tokio::time::Instant::now() + STEP;
    let again = loop {
        let again = mcp.post(Some(&sid), call(8)).await;
        if code(&again) != Some(json!("IDEMPOTENCY_KEY_IN_USE"))
            || tokio::time::Instant::now() >= deadline
        {
            break again;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(
        code(&again),
        Some(json!("IDEMPOTENCY_OUTCOME_UNKNOWN")),
        "{:?}",
        again.response()
    );
    assert!(c.wait_idle(STOPS).await);
    let o = c.oracle();
    assert_eq!(o.executions_tagged("count").count(), 1, "{:?}", o.totals);
    assert_eq!(o.totals.duplicate_side_effects, 0, "{:?}", o.totals);
    assert_eq!(o.totals.idempotent_replays, 0, "{:?}", o.totals);
    c.shutdown().await;
}

#[tokio::test]
async fn a_killed_instance_refuses_and_comes_back_empty() {
    let c = cluster(Preset::Naive, None).await;
    let mcp = Mcp::new(c.url());
    let single = Mcp::new(c.instance_url(0).unwrap());
    let (sid, hash, _) = single.initialize(Some(NEGOTIATED)).await;
    assert!(c.kill_instance(0).await);
    assert!(!c.kill_instance(0).await, "already down");
    assert!(!c.is_up(0) && c.instance_url(0).is_none());
    // The balancer no longer routes to it.
    for _ in 0..3 {
        assert_eq!(mcp.ping(&sid).await.status, 200);
    }
    assert_eq!(
        c.oracle().totals.requests_per_instance[0],
        1,
        "only the initialize"
    );
    c.restart_instance(0).await.unwrap();
    let single = Mcp::new(c.instance_url(0).unwrap());
    let r = single.ping(&sid).await;
    assert_eq!(r.status, 200, "naive makes a session up");
    assert_ne!(
        r.header("mcp-capability-hash"),
        hash,
        "the negotiated context is gone"
    );
    let o = c.oracle();
    assert_eq!(o.totals.sessions_made_up, 3, "I1, I2 and the restarted I0");
    c.shutdown().await;
}

#[tokio::test]
async fn dropping_the_cluster_closes_its_port() {
    let c = cluster(Preset::Strict, None).await;
    let addr = c.addr();
    drop(c);
    let deadline = tokio::time::Instant::now() + STEP;
    while tokio::net::TcpStream::connect(addr).await.is_ok() {
        assert!(tokio::time::Instant::now() < deadline, "port still open");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test]
async fn standalone_get_stream_is_primed_and_resumable_on_its_owner() {
    let c = start(ClusterConfig {
        preset: Preset::Sticky,
        instances: 2,
        idle_timeout: Some(Duration::from_millis(200)),
        retry_ms: Some(1500),
        ..Default::default()
    })
    .await
    .unwrap();
    let mcp = Mcp::new(c.url());
    let (sid, hash, _) = mcp.initialize(None).await;
    let stream = mcp.get(&sid, None).await;
    assert_eq!(stream.status, 200);
    assert!(stream.cut, "idle standalone stream cut by the balancer");
    assert_eq!(stream.header("mcp-capability-hash"), hash);
    assert_eq!(stream.events.len(), 1);
    let priming = &stream.events[0];
    assert!(priming.id.as_deref().is_some_and(|id| id.ends_with("-1")));
    assert_eq!((priming.data.as_str(), priming.retry), ("", Some(1500)));
    let resumed = mcp.get(&sid, priming.id.as_deref()).await;
    assert_eq!(resumed.status, 200);
    assert!(
        resumed.body.starts_with("retry: 1500\n\n"),
        "{:?}",
        resumed.body
    );
    let o = c.oracle();
    assert_eq!(o.totals.resumes, 1);
    assert!(o.resumes[0].honored && !o.resumes[0].cross_instance);
    c.shutdown().await;
}

#[tokio::test]
async fn older_protocol_versions_get_no_priming_event() {
    let c = cluster(Preset::Replicated, None).await;
    let mcp = Mcp::new(c.url());
    let r = mcp
        .post(
            None,
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                          "params": {"protocolVersion": "2025-03-26", "capabilities": {}}}),
        )
        .await;
    assert_eq!(
        r.json().pointer("/result/protocolVersion"),
        Some(&json!("2025-03-26"))
    );
    let sid = r.header("mcp-session-id").unwrap();
    let call = mcp
        .call(&sid, 1, "slow", json!({"steps": 1, "delay_ms": 0}), "t")
        .await;
    let ids: Vec<_> = call.events.iter().map(|e| e.id.clone().unwrap()).collect();
    assert_eq!(
        ids.len(),
        2,
        "progress and response only: {:?}",
        call.events
    );
    assert!(ids[0].ends_with("-1") && ids[1].ends_with("-2"));
    assert!(call.events.iter().all(|e| !e.data.is_empty()));
    // Unknown versions are answered with the latest.
    let r = mcp
        .post(
            None,
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                          "params": {"protocolVersion": "2099-01-01", "capabilities": {}}}),
        )
        .await;
    assert_eq!(
        r.json().pointer("/result/protocolVersion"),
        Some(&json!("2025-11-25"))
    );
    c.shutdown().await;
}
