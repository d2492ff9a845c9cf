//! The metrics after the seed's workload on the cluster (`strict`: resumes across instances
//! are refused, the client re-initializes and re-sends what is safe), held against what the
//! client reported and what the cluster's oracle saw.

use std::time::Duration;

use mcp_resume::client::telemetry::names;
use mcp_resume::{Client, ErrorKind, SessionEvent};
use mock_server::{Cluster, Preset};

use crate::support::{assert_one_request_resume, count, cut_slow_call, guarded, Exporters};
use crate::workload::{
    cluster_config, configure, run_calls, Agent, ClientKind, EventCollector, WorkloadConfig,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_workload_is_counted_as_it_happened() {
    let cfg = WorkloadConfig::default();
    let cluster = Cluster::start(cluster_config(Preset::Strict, &cfg))
        .await
        .expect("the cluster starts");
    let exporters = Exporters::new();
    let client = configure(
        Client::builder(cluster.url()),
        ClientKind::ResumeAware,
        &cfg,
    )
    .telemetry(exporters.telemetry())
    .build()
    .expect("a valid configuration");
    let events = EventCollector::start(client.events());
    guarded(client.connect()).await.expect("connect");
    let mut agent = Agent::new(&client, Preset::Strict, ClientKind::ResumeAware);
    guarded(run_calls(&mut agent, &cfg)).await;
    let calls = agent.into_calls();
    guarded(client.close()).await.expect("closed");
    drop(client);
    // The stream ends once the driver stopped: every span and measurement is in by then.
    let events = events.finish().await;
    assert!(cluster.wait_idle(Duration::from_secs(5)).await);
    let oracle = cluster.oracle();
    cluster.shutdown().await;
    let m = exporters.metrics();

    // One operation per call, each with its outcome.
    let calls_measured = m.total(
        names::MCP_CLIENT_OPERATION_DURATION,
        &[(names::MCP_METHOD_NAME, "tools/call")],
    );
    assert_eq!(calls_measured, calls.len() as u64);
    let unknown = calls
        .iter()
        .filter(|c| c.outcome == Err(ErrorKind::OutcomeUnknown))
        .count();
    assert_eq!(
        m.total(
            names::MCP_CLIENT_OPERATION_DURATION,
            &[(names::ERROR_TYPE, "outcome_unknown")]
        ),
        unknown as u64
    );
    for point in m.points(names::MCP_CLIENT_OPERATION_DURATION) {
        assert!(
            point.get(names::SERVER_ADDRESS).is_some()
                && point.get(names::MCP_METHOD_NAME).is_some()
        );
    }
    assert_eq!(
        m.total(
            names::MCP_CLIENT_OPERATION_DURATION,
            &[(names::MCP_METHOD_NAME, "initialize")]
        ),
        0,
        "the handshake is traced, not counted as the application's operations"
    );

    // The recovery counters tell what the client reported, event for event…
    let n = |pred: fn(&SessionEvent) -> bool| count(&events, pred) as u64;
    let reinits = n(|e| matches!(e, SessionEvent::Reinitialized { .. }));
    assert!(
        reinits >= 1,
        "the workload re-initializes on strict: {events:?}"
    );
    assert_eq!(m.total(names::METRIC_REINITIALIZATIONS, &[]), reinits);
    assert_eq!(
        m.total(names::METRIC_RESUMES, &[]),
        n(|e| matches!(e, SessionEvent::Resumed { .. }))
    );
    assert_eq!(
        m.total(names::METRIC_RESENDS, &[]),
        n(|e| matches!(e, SessionEvent::Redispatched { .. }))
    );
    assert_eq!(
        m.total(names::METRIC_OUTCOME_UNKNOWN, &[]),
        n(|e| matches!(e, SessionEvent::OutcomeUnknown { .. }))
    );
    let rejected = n(|e| matches!(e, SessionEvent::ResumeRejected { .. }));
    assert_eq!(m.total(names::METRIC_RESUME_REJECTIONS, &[]), rejected);
    // …and what really happened in the cluster.
    assert_eq!(
        reinits,
        oracle.totals.initializes - 1,
        "{:?}",
        oracle.totals
    );
    for (reason, times) in &oracle.totals.rejections {
        assert_eq!(
            m.total(
                names::METRIC_RESUME_REJECTIONS,
                &[(names::RECOVERY_REJECT_REASON, reason)]
            ),
            *times,
            "{reason}"
        );
    }
    // One session per initialize, each ended (the last one by close).
    assert_eq!(
        m.total(names::MCP_CLIENT_SESSION_DURATION, &[]),
        oracle.totals.initializes
    );
    assert_eq!(
        m.total(
            names::MCP_CLIENT_SESSION_DURATION,
            &[(names::ERROR_TYPE, "resume_rejected")]
        ),
        m.total(
            names::METRIC_REINITIALIZATIONS,
            &[(names::RECOVERY_REINIT_REASON, "resume_rejected")]
        )
    );
    assert!(m.total(names::METRIC_RECOVERY_DURATION, &[]) <= m.total(names::METRIC_RESUMES, &[]));
}

/// A call whose span is sampled out makes no spans, but its requests still carry its trace
/// context (not sampled), and its recovery is still counted and attributed to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sampled_out_call_is_counted_and_propagated_without_spans() {
    use opentelemetry_sdk::trace::{InMemorySpanExporterBuilder, Sampler, SdkTracerProvider};

    let spans = InMemorySpanExporterBuilder::new().build();
    let tracer = SdkTracerProvider::builder()
        .with_sampler(Sampler::AlwaysOff)
        .with_simple_exporter(spans.clone())
        .build();
    let seen = cut_slow_call(Preset::Sticky, false, "sampled-out", |b, exporters| {
        b.telemetry(
            mcp_resume::client::Telemetry::new()
                .tracer_provider(&tracer)
                .meter_provider(&exporters.meter),
        )
    })
    .await;
    let (events, oracle) = (seen.events, seen.oracle);

    assert!(spans.get_finished_spans().expect("spans").is_empty());
    let traced = oracle
        .traces
        .iter()
        .find(|t| t.tag.as_deref() == Some("sampled-out"))
        .expect("the call carried its context");
    let header = traced.traceparent.clone().expect("a traceparent header");
    assert!(header.ends_with("-00"), "not sampled: {header}");
    assert_eq!(
        traced.meta_traceparent.as_ref(),
        Some(&header),
        "the call's own context"
    );
    let get = oracle
        .traces
        .iter()
        .find(|t| t.http_method == "GET")
        .expect("the resume carried it too");
    assert_eq!(get.traceparent.as_ref(), Some(&header));

    let m = seen.metrics;
    assert_eq!(
        count(&events, |e| matches!(e, SessionEvent::Resumed { .. })),
        1
    );
    assert_one_request_resume(&m);
    assert_eq!(
        m.total(
            names::MCP_CLIENT_OPERATION_DURATION,
            &[(names::GEN_AI_TOOL_NAME, "slow")]
        ),
        1
    );
}
