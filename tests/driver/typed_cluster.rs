//! Call handles through the mock cluster: their own progress (across a cut and resumed
//! stream too), timeouts that restart on progress, the total bound, and paged listing.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::StreamExt;
use mcp_resume::{Client, ErrorKind, ToolCall};
use mock_server::{Cluster, ClusterConfig, Preset};
use serde_json::json;

const GUARD: Duration = Duration::from_secs(30);

async fn guarded<T>(fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(GUARD, fut)
        .await
        .expect("hang guard: the future did not complete")
}

async fn cluster(config: ClusterConfig) -> (Cluster, Client) {
    let cluster = Cluster::start(config).await.unwrap();
    let client = Client::builder(cluster.url())
        .jitter_seed(5)
        .call_timeout(GUARD)
        .build()
        .unwrap();
    guarded(client.connect()).await.unwrap();
    (cluster, client)
}

fn sticky() -> ClusterConfig {
    ClusterConfig {
        preset: Preset::Sticky,
        instances: 1,
        ..ClusterConfig::default()
    }
}

fn slow(steps: u64, delay_ms: u64) -> ToolCall {
    ToolCall::new("slow", json!({"steps": steps, "delay_ms": delay_ms}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_restarts_the_timeout_of_a_long_call() {
    let (cluster, client) = cluster(sticky()).await;
    // Six steps 150 ms apart: 900 ms in all, never 500 ms without progress.
    let mut call = client
        .start(
            slow(6, 150)
                .timeout(Duration::from_millis(500))
                .reset_timeout_on_progress(true),
        )
        .unwrap();
    let mut progress = call.progress();
    let result = guarded(&mut call).await.unwrap();
    assert_eq!(result.text(), "slow: done after 6 steps");
    let steps: Vec<f64> = guarded(progress.by_ref().collect::<Vec<_>>())
        .await
        .into_iter()
        .map(|p| p.progress)
        .collect();
    assert_eq!(steps, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);

    // The same call without the reset ends at its deadline.
    let err = guarded(client.call_tool(slow(6, 150).timeout(Duration::from_millis(500))))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_silent_for_longer_than_its_timeout_fails_and_is_cancelled() {
    let (cluster, client) = cluster(sticky()).await;
    let err = guarded(
        client.call_tool(
            slow(2, 3000)
                .timeout(Duration::from_millis(300))
                .reset_timeout_on_progress(true),
        ),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    // Ended by the silence, not by the progress its first step would report after 3 s.
    assert!(err.message().contains("no progress"), "{err}");
    // The server was told: its execution stops at once, the cluster goes idle. Left alone
    // the call would run 6 s (its first step alone takes 3 s): idle within 1 s means it was
    // stopped, not that it ended.
    assert!(
        cluster.wait_idle(Duration::from_secs(1)).await,
        "the cancelled call kept running"
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_total_bound_ends_a_call_that_keeps_progressing() {
    let (cluster, client) = cluster(sticky()).await;
    let err = guarded(
        client.call_tool(
            slow(40, 100)
                .timeout(Duration::from_millis(400))
                .reset_timeout_on_progress(true)
                .max_total_timeout(Duration::from_millis(900)),
        ),
    )
    .await
    .unwrap_err();
    // Left to run, the call would have answered after its 40 steps (4 s).
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handles_progress_survives_a_cut_and_resumed_stream() {
    let (cluster, client) = cluster(ClusterConfig {
        preset: Preset::Replicated,
        instances: 3,
        cut_after_events: Some(3),
        ..ClusterConfig::default()
    })
    .await;
    let mut events = client.events();
    let mut notifications = client.notifications();
    let mut call = client.start(slow(8, 30)).unwrap();
    let id = call.id();
    let mut progress = call.progress();
    let result = guarded(&mut call).await.unwrap();
    assert_eq!(result.text(), "slow: done after 8 steps");
    let steps: Vec<f64> = guarded(progress.by_ref().collect::<Vec<_>>())
        .await
        .into_iter()
        .map(|p| p.progress)
        .collect();
    // Every step once, in order, whichever stream carried it.
    assert_eq!(steps, (1..=8).map(f64::from).collect::<Vec<_>>());
    // The same progress on the shared notification stream names the call.
    let mut tagged = BTreeSet::new();
    while tagged.len() < 8 {
        let n = guarded(notifications.next()).await.unwrap();
        if n.method == "notifications/progress" {
            assert_eq!(n.call, Some(id));
            tagged.insert(n.params.unwrap()["progress"].as_u64().unwrap());
        }
    }
    // The balancer did cut the call's stream and the client resumed it.
    loop {
        let event = guarded(events.recv()).await.expect("event stream ended");
        if matches!(event, mcp_resume::SessionEvent::Resumed { .. }) {
            break;
        }
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_are_listed_by_page() {
    let (cluster, client) = cluster(sticky()).await;
    let page = guarded(client.list_tools_page(None)).await.unwrap();
    assert!(page.items.iter().any(|t| t.name == "slow"));
    assert_eq!(page.next_cursor, None);
    let all = guarded(client.list_tools()).await.unwrap();
    assert_eq!(all.len(), page.items.len());
    cluster.shutdown().await;
}
