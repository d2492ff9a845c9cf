//! The demo's `strict` run, traced: the same agent workload through the mock round-robin
//! cluster (resumes across instances are refused, the client re-initializes and re-sends
//! what is safe), with the client's OpenTelemetry spans printed as a tree.
//!
//! ```text
//! cargo run --example otel --features otel             # the span tree
//! cargo run --example otel --features otel -- --json   # the spans as JSON, times in ms
//! ```
//!
//! The spans go to the SDK's in-memory exporter; an application would install an OTLP
//! exporter instead (`opentelemetry-otlp`) and pass its provider the same way.

#[path = "demo/workload.rs"]
mod workload;

use std::fmt::Write as _;
use std::time::SystemTime;

use mcp_resume::client::Telemetry;
use mcp_resume::Client;
use mock_server::{Cluster, Preset};
use opentelemetry::trace::{FutureExt as _, TraceContextExt, Tracer, TracerProvider as _};
use opentelemetry::Context;
use opentelemetry_sdk::trace::{InMemorySpanExporterBuilder, SdkTracerProvider, SpanData};
use serde_json::{json, Value};
use workload::{cluster_config, configure, run_calls, Agent, ClientKind, WorkloadConfig};

/// The attributes worth a place in the tree, in this order.
const SHOWN: &[&str] = &[
    "http.response.status_code",
    "http.request.resend_count",
    "mcp.recovery.attempt",
    "mcp.recovery.reason",
    "jsonrpc.request.id",
    "error.type",
];

#[tokio::main]
async fn main() {
    let json = std::env::args().any(|a| a == "--json");
    let exporter = InMemorySpanExporterBuilder::new().build();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();

    let cfg = WorkloadConfig::default();
    let cluster = Cluster::start(cluster_config(Preset::Strict, &cfg))
        .await
        .expect("the cluster starts on 127.0.0.1");
    let client = configure(
        Client::builder(cluster.url()),
        ClientKind::ResumeAware,
        &cfg,
    )
    .telemetry(Telemetry::new().tracer_provider(&provider))
    .build()
    .expect("the demo's configuration is valid");

    // The agent's own span: every call of the run is its child.
    let run = provider.tracer("demo").start("demo strict run");
    let cx = Context::current_with_span(run);
    let events = workload::EventCollector::start(client.events());
    let mut agent = Agent::new(&client, Preset::Strict, ClientKind::ResumeAware);
    run_calls(&mut agent, &cfg).with_context(cx.clone()).await;
    let _ = client.close().await;
    drop(client);
    // The event stream ends once the driver has stopped: the spans it held have ended then.
    events.finish().await;
    cx.span().end();
    cluster.shutdown().await;

    let spans = exporter.get_finished_spans().expect("the spans");
    if json {
        println!("{}", to_json(&spans));
    } else {
        print!("{}", tree(&spans));
    }
}

fn ms(since: SystemTime, at: SystemTime) -> f64 {
    at.duration_since(since).unwrap_or_default().as_secs_f64() * 1e3
}

fn start_of(spans: &[SpanData]) -> SystemTime {
    spans
        .iter()
        .map(|s| s.start_time)
        .min()
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

fn children<'a>(spans: &'a [SpanData], parent: Option<&SpanData>) -> Vec<&'a SpanData> {
    let ids: Vec<_> = spans.iter().map(|s| s.span_context.span_id()).collect();
    let mut out: Vec<_> = spans
        .iter()
        .filter(|s| match parent {
            Some(p) => s.parent_span_id == p.span_context.span_id(),
            None => !ids.contains(&s.parent_span_id),
        })
        .collect();
    out.sort_by_key(|s| s.start_time);
    out
}

fn tree(spans: &[SpanData]) -> String {
    let mut out = String::new();
    let t0 = start_of(spans);
    for root in children(spans, None) {
        write(spans, root, "", t0, &mut out);
    }
    out
}

fn write(spans: &[SpanData], span: &SpanData, indent: &str, t0: SystemTime, out: &mut String) {
    let mut line = format!(
        "{indent}{} [{:.1} ms +{:.1}]",
        span.name,
        ms(t0, span.start_time),
        ms(span.start_time, span.end_time)
    );
    for key in SHOWN {
        if let Some(kv) = span.attributes.iter().find(|kv| kv.key.as_str() == *key) {
            let _ = write!(line, " {}={}", key, kv.value);
        }
    }
    for event in span.events.iter() {
        let detail: Vec<String> = event
            .attributes
            .iter()
            .filter(|kv| kv.key.as_str() != "mcp.recovery.last_event_id")
            .map(|kv| format!("{}={}", kv.key, kv.value))
            .collect();
        let _ = write!(
            line,
            "\n{indent}    * {} @{:.1} ms {}",
            event.name,
            ms(t0, event.timestamp),
            detail.join(" ")
        );
    }
    let _ = writeln!(out, "{line}");
    let nested = format!("{indent}  ");
    for child in children(spans, Some(span)) {
        write(spans, child, &nested, t0, out);
    }
}

fn to_json(spans: &[SpanData]) -> Value {
    let t0 = start_of(spans);
    let list: Vec<Value> = spans
        .iter()
        .map(|s| {
            let attributes: serde_json::Map<String, Value> = s
                .attributes
                .iter()
                .map(|kv| (kv.key.to_string(), json!(kv.value.to_string())))
                .collect();
            json!({
                "id": s.span_context.span_id().to_string(),
                "parent": s.parent_span_id.to_string(),
                "name": s.name,
                "start_ms": ms(t0, s.start_time),
                "end_ms": ms(t0, s.end_time),
                "attributes": attributes,
                "events": s.events.iter().map(|e| json!({
                    "name": e.name,
                    "at_ms": ms(t0, e.timestamp),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({ "spans": list })
}
