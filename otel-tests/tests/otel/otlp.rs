//! The real exporter: OTLP over HTTP (protobuf), opentelemetry-otlp's behind the crate's
//! `Otlp`, to a receiver in the test that decodes the official protobuf definitions.

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use axum::Router;
use mcp_resume::client::telemetry::{names, Otlp};
use mcp_resume::{Client, ToolCall};
use mock_server::{Cluster, Preset};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::json;

use crate::support::{cluster, guarded};

#[derive(Default)]
struct Received {
    spans: Vec<Span>,
    metrics: Vec<String>,
}

async fn traces(State(got): State<Arc<Mutex<Received>>>, body: Bytes) -> &'static str {
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP trace request");
    let spans = request
        .resource_spans
        .into_iter()
        .flat_map(|r| r.scope_spans)
        .flat_map(|s| s.spans);
    got.lock().unwrap().spans.extend(spans);
    ""
}

async fn metrics(State(got): State<Arc<Mutex<Received>>>, body: Bytes) -> &'static str {
    let request = ExportMetricsServiceRequest::decode(body).expect("an OTLP metrics request");
    let names = request
        .resource_metrics
        .into_iter()
        .flat_map(|r| r.scope_metrics)
        .flat_map(|s| s.metrics)
        .map(|m| m.name);
    got.lock().unwrap().metrics.extend(names);
    ""
}

fn string(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
            AnyValue::StringValue(s) => Some(s.clone()),
            AnyValue::IntValue(i) => Some(i.to_string()),
            _ => None,
        })
}

// Not async: the exporters' blocking HTTP client is built and flushed outside the runtime.
#[test]
fn spans_and_metrics_reach_an_otlp_receiver() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let got = Arc::new(Mutex::new(Received::default()));
    let receiver = runtime.block_on(async {
        let app = Router::new()
            .route("/v1/traces", post(traces))
            .route("/v1/metrics", post(metrics))
            .with_state(got.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("an address");
        tokio::spawn(async move { axum::serve(listener, app).await });
        addr
    });
    // The crate's `Otlp`: opentelemetry-otlp's HTTP exporters behind the SDK's providers.
    let otlp = Otlp::new(&format!("http://{receiver}/")).expect("exporters");

    runtime.block_on(async {
        let cluster = Cluster::start(cluster(Preset::Replicated))
            .await
            .expect("cluster");
        let client = Client::builder(cluster.url())
            .open_listen_stream(false)
            .telemetry(otlp.telemetry())
            .build()
            .expect("a client");
        let reply = guarded(client.call_tool(ToolCall::new("echo", json!({"text": "otlp"}))))
            .await
            .expect("echo answers");
        assert_eq!(reply.text(), "otlp");
        guarded(client.close()).await.expect("closed");
        drop(client);
        cluster.shutdown().await;
    });
    otlp.flush();

    let got = got.lock().unwrap();
    let call = got
        .spans
        .iter()
        .find(|s| s.name == "tools/call echo")
        .expect("the call's span arrived");
    assert_eq!(
        string(call, names::MCP_METHOD_NAME).as_deref(),
        Some("tools/call")
    );
    assert_eq!(
        string(call, names::GEN_AI_TOOL_NAME).as_deref(),
        Some("echo")
    );
    let post = got
        .spans
        .iter()
        .find(|s| s.name == "POST" && s.parent_span_id == call.span_id)
        .expect("its HTTP span arrived");
    assert_eq!(post.trace_id, call.trace_id);
    assert_eq!(
        string(post, names::HTTP_RESPONSE_STATUS_CODE).as_deref(),
        Some("200")
    );
    for name in [
        names::MCP_CLIENT_OPERATION_DURATION,
        names::MCP_CLIENT_SESSION_DURATION,
    ] {
        assert!(
            got.metrics.iter().any(|m| m == name),
            "{name} in {:?}",
            got.metrics
        );
    }
    drop(got);
    drop(otlp);
    drop(runtime);
}

#[test]
fn an_endpoint_the_exporters_refuse_is_a_configuration_error() {
    let err = Otlp::new("not a url").expect_err("refused");
    assert_eq!(err.kind(), mcp_resume::ErrorKind::InvalidConfig, "{err}");
}
