//! The bridge keeps the host SDK's tracing and puts the client's beneath it: a host request
//! whose `params._meta` carries the host's `traceparent` becomes a call whose span is a child
//! of the host's span, and the server is handed the call's span.

use mcp_resume::bridge::Bridge;
use mcp_resume::client::telemetry::names;
use mock_server::{Cluster, Preset};
use opentelemetry::trace::{Span as _, Tracer, TracerProvider as _};
use serde_json::json;

use crate::support::{cluster, guarded, text, traceparent, Exporters};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_request_is_traced_beneath_the_hosts_span() {
    let cluster = Cluster::start(cluster(Preset::Replicated))
        .await
        .expect("cluster");
    let exporters = Exporters::new();
    let telemetry = exporters.telemetry();
    let bridge = Bridge::builder(cluster.url())
        .configure(|c| c.open_listen_stream(false).telemetry(telemetry))
        .build()
        .expect("a bridge");
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "host", "version": "1"}}});
    guarded(bridge.send(initialize)).await.expect("sent");
    let answer = guarded(bridge.recv()).await.expect("initialize answered");
    assert_eq!(answer["id"], 0);

    // The host SDK's own span for its request, and the context it writes into `_meta`.
    let mut host = exporters
        .tracer
        .tracer("host sdk")
        .start("tools/call echo (host)");
    let host_context = host.span_context().clone();
    let host_traceparent = traceparent_of(&host_context);
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "echo", "arguments": {"text": "bridged"},
        "_meta": {"traceparent": host_traceparent, "tracestate": "host=1",
                  "io.github.mcp-resume/tag": "bridged"}}});
    guarded(bridge.send(call)).await.expect("sent");
    let answer = guarded(bridge.recv()).await.expect("the call answered");
    assert_eq!(answer["id"], 7, "the host's id is kept");
    assert_eq!(answer["result"]["content"][0]["text"], "bridged");
    host.end();
    guarded(bridge.close()).await.expect("closed");
    drop(bridge);
    cluster.wait_idle(crate::support::GUARD).await;
    let oracle = cluster.oracle();
    cluster.shutdown().await;

    let spans = exporters.spans();
    let host = spans.one("tools/call echo (host)");
    let ours = spans.one("tools/call echo");
    assert_eq!(ours.span_context.trace_id(), host.span_context.trace_id());
    assert_eq!(
        ours.parent_span_id,
        host.span_context.span_id(),
        "{}",
        spans.tree()
    );
    assert!(
        ours.parent_span_is_remote,
        "the host's context came through _meta"
    );
    assert_eq!(
        ours.span_context.trace_state().get("host"),
        Some("1"),
        "its tracestate too"
    );
    assert_eq!(
        text(ours, names::MCP_METHOD_NAME).as_deref(),
        Some("tools/call")
    );
    let post = spans.http_children(ours);
    assert_eq!(post.len(), 1, "{}", spans.tree());
    // The server's parent is the client's span for the call, beneath the host's.
    let seen = oracle
        .traces
        .iter()
        .find(|t| t.tag.as_deref() == Some("bridged"))
        .expect("traced");
    assert_eq!(seen.meta_traceparent, Some(traceparent(ours)));
    assert_eq!(seen.traceparent, Some(traceparent(post[0])));
    // Nothing of the host's spans was touched: it ended as the host ended it.
    assert!(host.events.is_empty() && host.attributes.is_empty());
}

fn traceparent_of(context: &opentelemetry::trace::SpanContext) -> String {
    format!("00-{}-{}-01", context.trace_id(), context.span_id())
}
