//! In-memory exporters, a cluster with one traced client on it, and readers for what was
//! exported.

use std::fmt::Write as _;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use mcp_resume::client::telemetry::names;
use mcp_resume::client::Telemetry;
use mcp_resume::{
    CallToolResult, Client, ClientBuilder, Error, ReconnectPolicy, SessionEvent, ToolCall,
};
use mock_server::context::meta;
use mock_server::{Cluster, ClusterConfig, OracleReport, Preset};
use opentelemetry::trace::SpanId;
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{
    InMemorySpanExporter, InMemorySpanExporterBuilder, SdkTracerProvider, SpanData,
};
use serde_json::json;

pub const GUARD: Duration = Duration::from_secs(20);
pub const TEMPERATURE: f64 = 0.2;

pub async fn guarded<T>(fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(GUARD, fut)
        .await
        .expect("hang guard: the future did not complete")
}

/// The SDK's in-memory exporters behind a tracer and a meter provider of their own (one per
/// test: tests run side by side).
pub struct Exporters {
    pub spans: InMemorySpanExporter,
    pub metrics: InMemoryMetricExporter,
    pub tracer: SdkTracerProvider,
    pub meter: SdkMeterProvider,
}

impl Exporters {
    pub fn new() -> Self {
        let spans = InMemorySpanExporterBuilder::new().build();
        let tracer = SdkTracerProvider::builder()
            .with_simple_exporter(spans.clone())
            .build();
        let metrics = InMemoryMetricExporter::default();
        let meter = SdkMeterProvider::builder()
            .with_reader(PeriodicReader::builder(metrics.clone()).build())
            .build();
        Exporters {
            spans,
            metrics,
            tracer,
            meter,
        }
    }

    /// The client's telemetry, into these exporters.
    pub fn telemetry(&self) -> Telemetry {
        Telemetry::new()
            .tracer_provider(&self.tracer)
            .meter_provider(&self.meter)
    }

    /// Every span ended so far.
    pub fn spans(&self) -> Spans {
        Spans(self.spans.get_finished_spans().expect("in-memory spans"))
    }

    /// The metrics as of now (cumulative).
    pub fn metrics(&self) -> Metrics {
        self.meter.force_flush().expect("metrics flushed");
        let mut all = self
            .metrics
            .get_finished_metrics()
            .expect("in-memory metrics");
        Metrics(all.pop().expect("one collection at least"))
    }
}

/// Ended spans.
pub struct Spans(pub Vec<SpanData>);

impl Spans {
    pub fn named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a SpanData> + 'a {
        self.0.iter().filter(move |s| s.name == name)
    }

    /// The one span named `name`.
    pub fn one(&self, name: &str) -> &SpanData {
        let found: Vec<&SpanData> = self.0.iter().filter(|s| s.name == name).collect();
        assert_eq!(found.len(), 1, "spans named {name:?}:\n{}", self.tree());
        found[0]
    }

    /// `parent`'s children, oldest first.
    pub fn children(&self, parent: &SpanData) -> Vec<&SpanData> {
        let mut children: Vec<_> = self
            .0
            .iter()
            .filter(|s| {
                s.parent_span_id == parent.span_context.span_id()
                    && s.span_context.trace_id() == parent.span_context.trace_id()
            })
            .collect();
        children.sort_by_key(|s| s.start_time);
        children
    }

    /// `parent`'s HTTP children (the requests on the wire), oldest first.
    pub fn http_children(&self, parent: &SpanData) -> Vec<&SpanData> {
        let mut children = self.children(parent);
        children.retain(|s| matches!(s.name.as_ref(), "POST" | "GET" | "DELETE"));
        children
    }

    /// The spans as an indented tree, for failure messages.
    pub fn tree(&self) -> String {
        let mut out = String::new();
        let ids: Vec<SpanId> = self.0.iter().map(|s| s.span_context.span_id()).collect();
        let mut roots: Vec<_> = self
            .0
            .iter()
            .filter(|s| !ids.contains(&s.parent_span_id))
            .collect();
        roots.sort_by_key(|s| s.start_time);
        for root in roots {
            self.write(root, 0, &mut out);
        }
        out
    }

    fn write(&self, span: &SpanData, depth: usize, out: &mut String) {
        let events: Vec<&str> = span.events.iter().map(|e| e.name.as_ref()).collect();
        let _ = writeln!(
            out,
            "{:indent$}{} {:?} {events:?}",
            "",
            span.name,
            span.attributes
                .iter()
                .map(|kv| format!("{}={}", kv.key, kv.value))
                .collect::<Vec<_>>(),
            indent = depth * 2
        );
        for child in self.children(span) {
            self.write(child, depth + 1, out);
        }
    }
}

/// `key`'s value on `span`.
pub fn attr<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

/// `key`'s value on `span`, as a string.
pub fn text(span: &SpanData, key: &str) -> Option<String> {
    attr(span, key).map(|v| v.as_str().into_owned())
}

/// The names of `span`'s events, in order.
pub fn event_names(span: &SpanData) -> Vec<&str> {
    span.events.iter().map(|e| e.name.as_ref()).collect()
}

/// The attribute `key` of `span`'s event `name`.
pub fn event_attr(span: &SpanData, name: &str, key: &str) -> Option<String> {
    let event = span.events.iter().find(|e| e.name == name)?;
    event
        .attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.as_str().into_owned())
}

/// A span's `traceparent`, as the server should have seen it.
pub fn traceparent(span: &SpanData) -> String {
    format!(
        "00-{}-{}-01",
        span.span_context.trace_id(),
        span.span_context.span_id()
    )
}

/// One collection of metrics.
pub struct Metrics(pub ResourceMetrics);

/// One data point: its attributes and its value (a counter's sum, a histogram's count).
pub struct Point {
    pub attributes: Vec<KeyValue>,
    pub value: u64,
}

impl Point {
    pub fn get(&self, key: &str) -> Option<String> {
        self.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.as_str().into_owned())
    }
}

impl Metrics {
    /// The points of metric `name` (none if it was never recorded).
    pub fn points(&self, name: &str) -> Vec<Point> {
        let mut out = Vec::new();
        for scope in self.0.scope_metrics() {
            for metric in scope.metrics().filter(|m| m.name() == name) {
                match metric.data() {
                    AggregatedMetrics::U64(MetricData::Sum(sum)) => {
                        out.extend(sum.data_points().map(|p| Point {
                            attributes: p.attributes().cloned().collect(),
                            value: p.value(),
                        }))
                    }
                    AggregatedMetrics::F64(MetricData::Histogram(h)) => {
                        out.extend(h.data_points().map(|p| Point {
                            attributes: p.attributes().cloned().collect(),
                            value: p.count(),
                        }))
                    }
                    other => panic!("{name}: unexpected data {other:?}"),
                }
            }
        }
        out
    }

    /// The sum over `name`'s points whose attributes match every `(key, value)` of `filter`.
    pub fn total(&self, name: &str, filter: &[(&str, &str)]) -> u64 {
        self.points(name)
            .iter()
            .filter(|p| filter.iter().all(|(k, v)| p.get(k).as_deref() == Some(*v)))
            .map(|p| p.value)
            .sum()
    }
}

/// One request stream resumed, and its recovery measured once.
pub fn assert_one_request_resume(m: &Metrics) {
    let request = [(names::RECOVERY_STREAM, "request")];
    assert_eq!(m.total(names::METRIC_RESUMES, &request), 1);
    assert_eq!(m.total(names::METRIC_RECOVERY_DURATION, &request), 1);
}

/// A cluster of three instances with the resume-safety extension.
pub fn cluster(preset: Preset) -> ClusterConfig {
    ClusterConfig {
        preset,
        instances: 3,
        idle_timeout: None,
        ..ClusterConfig::default()
    }
}

/// A cluster, one traced client on it, and every session event the client reports.
pub struct Bench {
    pub cluster: Cluster,
    pub client: Client,
    pub exporters: Exporters,
    events: Arc<Mutex<Vec<SessionEvent>>>,
    collector: tokio::task::JoinHandle<()>,
}

/// What a scenario ends with.
pub struct Seen {
    pub spans: Spans,
    pub metrics: Metrics,
    pub events: Vec<SessionEvent>,
    pub oracle: OracleReport,
}

impl Bench {
    /// As the seed scenarios set it up: deterministic routing (no standalone stream), short
    /// backoffs, telemetry into the bench's exporters; `client` may change any of it.
    pub async fn start(
        config: ClusterConfig,
        client: impl FnOnce(ClientBuilder, &Exporters) -> ClientBuilder,
    ) -> Bench {
        let cluster = Cluster::start(config).await.expect("cluster starts");
        let exporters = Exporters::new();
        let builder = Client::builder(cluster.url())
            .client_capabilities(
                json!({"experimental": {"sampling": {"temperature": TEMPERATURE}}}),
            )
            .open_listen_stream(false)
            .call_timeout(Duration::from_secs(5))
            .reconnect(
                ReconnectPolicy::default()
                    .with_initial_delay(Duration::from_millis(20))
                    .with_max_delay(Duration::from_millis(200)),
            )
            .jitter_seed(3)
            .telemetry(exporters.telemetry());
        let client = client(builder, &exporters)
            .build()
            .expect("valid configuration");
        let events = Arc::new(Mutex::new(Vec::new()));
        let mut stream = client.events();
        let sink = events.clone();
        let collector = tokio::spawn(async move {
            while let Some(event) = stream.next().await {
                sink.lock().unwrap().push(event);
            }
        });
        Bench {
            cluster,
            client,
            exporters,
            events,
            collector,
        }
    }

    pub async fn call(
        &self,
        tool: &str,
        args: serde_json::Value,
        keyed: bool,
        tag: &str,
    ) -> Result<CallToolResult, Error> {
        let mut call = ToolCall::new(tool, args).meta(meta::TAG, json!(tag));
        if keyed {
            call = call.random_idempotency_key();
        }
        guarded(self.client.call_tool(call)).await
    }

    /// Closes the client and waits until its driver has stopped (its event stream ends then,
    /// and every span it held has ended), then reads what was exported and what happened.
    pub async fn finish(self) -> Seen {
        let _ = guarded(self.client.close()).await;
        drop(self.client);
        guarded(self.collector).await.expect("collector");
        assert!(
            self.cluster.wait_idle(GUARD).await,
            "executions still running"
        );
        let oracle = self.cluster.oracle();
        self.cluster.shutdown().await;
        let events = std::mem::take(&mut *self.events.lock().unwrap());
        Seen {
            spans: self.exporters.spans(),
            metrics: self.exporters.metrics(),
            events,
            oracle,
        }
    }
}

/// A `slow` call of two steps (keyed when `keyed`), whose stream the balancer cuts after its
/// second event, on a `preset` cluster: what happened, once it completed.
pub async fn cut_slow_call(
    preset: Preset,
    keyed: bool,
    tag: &str,
    client: impl FnOnce(ClientBuilder, &Exporters) -> ClientBuilder,
) -> Seen {
    let config = ClusterConfig {
        cut_after_events: Some(2),
        ..cluster(preset)
    };
    let bench = Bench::start(config, client).await;
    let reply = bench
        .call("slow", json!({"steps": 2, "delay_ms": 0}), keyed, tag)
        .await
        .expect("the cut call completes");
    assert_eq!(reply.text(), "slow: done after 2 steps");
    bench.finish().await
}

pub fn count(events: &[SessionEvent], pred: impl Fn(&SessionEvent) -> bool) -> usize {
    events.iter().filter(|e| pred(e)).count()
}
