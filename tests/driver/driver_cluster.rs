//! End-to-end smoke tests of the public API through the mock round-robin cluster, checked
//! against the cluster's oracle (what really ran), not only against what the client saw.

use std::time::Duration;

use futures::StreamExt;
use mcp_resume::{Client, ErrorKind, SessionEvent, ToolCall};
use mock_server::context::meta;
use mock_server::{Cluster, ClusterConfig, CutStyle, Preset};
use serde_json::json;

const GUARD: Duration = Duration::from_secs(30);

async fn guarded<T>(fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(GUARD, fut)
        .await
        .expect("hang guard: the future did not complete")
}

#[tokio::test]
async fn paved_path_through_a_strict_cluster() {
    let cluster = Cluster::start(ClusterConfig {
        preset: Preset::Strict,
        instances: 3,
        ..ClusterConfig::default()
    })
    .await
    .unwrap();
    let client = Client::builder(cluster.url())
        .client_capabilities(json!({"experimental": {"temperature": 0.2}}))
        .bearer_token("t")
        .jitter_seed(11)
        .build()
        .unwrap();

    let init = guarded(client.connect()).await.unwrap();
    assert!(!init.server_name.is_empty());
    let tools = guarded(client.list_tools()).await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    for expected in ["echo", "counter_increment"] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }

    let r =
        guarded(client.call_tool(
            ToolCall::new("echo", json!({"text": "hi"})).meta(meta::TAG, json!("echo-1")),
        ))
        .await
        .unwrap();
    assert!(r.text().contains("hi"), "{r:?}");
    let r = guarded(
        client.call_tool(
            ToolCall::new("counter_increment", json!({}))
                .random_idempotency_key()
                .meta(meta::TAG, json!("count-1")),
        ),
    )
    .await
    .unwrap();
    assert_eq!(r.structured_content, Some(json!({"value": 1})));
    guarded(client.ping()).await.unwrap();
    guarded(client.close()).await.unwrap();

    let report = cluster.oracle();
    assert_eq!(report.executions_tagged("echo-1").count(), 1);
    assert_eq!(report.executions_tagged("count-1").count(), 1);
    assert_eq!(report.totals.wrong_capability, 0);
    assert_eq!(report.totals.duplicate_side_effects, 0);
    assert_eq!(report.totals.initializes, 1);
    cluster.shutdown().await;
}

/// Runs `calls` keyed `counter_increment` calls against a cluster that cuts every SSE stream
/// right after its first event; returns each call's outcome, the oracle report and the
/// session events.
async fn cut_after_first_event(
    preset: Preset,
    calls: usize,
    call_timeout: Duration,
) -> (
    Vec<(
        String,
        Result<mcp_resume::CallToolResult, mcp_resume::Error>,
    )>,
    mock_server::OracleReport,
    Vec<SessionEvent>,
) {
    let cluster = Cluster::start(ClusterConfig {
        preset,
        instances: 3,
        cut_after_events: Some(1),
        cut_style: CutStyle::Abort,
        ..ClusterConfig::default()
    })
    .await
    .unwrap();
    let client = Client::builder(cluster.url())
        .open_listen_stream(false)
        .call_timeout(call_timeout)
        .jitter_seed(12)
        .build()
        .unwrap();
    let mut events = client.events();
    guarded(client.connect()).await.unwrap();
    let mut outcomes = Vec::new();
    for i in 0..calls {
        let tag = format!("inc-{i}");
        let call = ToolCall::new("counter_increment", json!({}))
            .random_idempotency_key()
            .meta(meta::TAG, json!(tag));
        let result = guarded(client.call_tool(call)).await;
        outcomes.push((tag, result));
    }
    drop(client);
    // The last handle is gone: the driver closes the session and the stream ends.
    let mut seen = Vec::new();
    while let Some(event) = guarded(events.next()).await {
        seen.push(event);
    }
    // Whatever the client sent may still be running: the oracle counts it once it ended.
    assert!(cluster.wait_idle(GUARD).await, "executions still running");
    let report = cluster.oracle();
    cluster.shutdown().await;
    (outcomes, report, seen)
}

/// Replicated: any instance may serve a resume. The POST stream is cut after the priming
/// event, the resume lands on another instance and delivers the response.
#[tokio::test]
async fn cut_streams_on_a_replicated_cluster_are_resumed() {
    let (outcomes, report, events) =
        cut_after_first_event(Preset::Replicated, 3, Duration::from_secs(10)).await;
    for (n, (tag, result)) in outcomes.iter().enumerate() {
        let result = result.as_ref().unwrap_or_else(|e| panic!("{tag}: {e}"));
        assert_eq!(
            result.structured_content,
            Some(json!({"value": n + 1})),
            "{tag}"
        );
        assert_eq!(report.executions_tagged(tag).count(), 1, "{tag}");
    }
    assert_eq!(
        report.totals.duplicate_side_effects, 0,
        "{:?}",
        report.totals
    );
    assert_eq!(report.totals.wrong_capability, 0, "{:?}", report.totals);
    let resumed = events
        .iter()
        .filter(|e| matches!(e, SessionEvent::Resumed { .. }))
        .count();
    assert!(resumed >= 3, "every call resumed once: {events:?}");
    // The cluster saw those resumes and served them, not only the client's report of them,
    // each on another instance than the one whose stream was cut.
    let honored = report.resumes.iter().filter(|r| r.honored).count();
    assert!(honored >= 3, "{:?}", report.resumes);
    assert!(
        report.totals.cross_instance_resumes >= 3,
        "{:?}",
        report.resumes
    );
    assert_eq!(report.totals.initializes, 1, "{:?}", report.totals);
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, SessionEvent::Reinitialized { .. })),
        "{events:?}"
    );
}

/// Strict: a resume on an instance that does not own the stream is rejected. The client
/// re-initializes and re-sends the keyed call; since every stream is cut before the response
/// the call cannot finish, and must end at its deadline: never a success it did not get,
/// never a hang, never a second execution.
#[tokio::test]
async fn cut_streams_on_a_strict_cluster_are_rejected_and_never_run_twice() {
    let (outcomes, report, events) =
        cut_after_first_event(Preset::Strict, 1, Duration::from_secs(2)).await;
    let (tag, result) = &outcomes[0];
    let err = result.as_ref().expect_err("the response can never arrive");
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    // It ran exactly once, and the re-send after re-initializing reached the cluster: it was
    // answered from the key's stored outcome instead of running again.
    assert_eq!(
        report.executions_tagged(tag).count(),
        1,
        "{:?}",
        report.totals
    );
    assert!(report.totals.idempotent_replays >= 1, "{:?}", report.totals);
    assert!(report.totals.initializes >= 2, "{:?}", report.totals);
    assert!(report.rejections("not_owner") >= 1, "{:?}", report.totals);
    assert_eq!(
        report.totals.duplicate_side_effects, 0,
        "{:?}",
        report.totals
    );
    assert_eq!(report.totals.wrong_capability, 0, "{:?}", report.totals);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, SessionEvent::ResumeRejected { .. })),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, SessionEvent::Reinitialized { .. })),
        "{events:?}"
    );
}
