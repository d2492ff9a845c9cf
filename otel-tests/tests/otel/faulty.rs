//! An application's span processor that panics (where the SDK calls it: when a span starts
//! and when it ends, on whatever thread does that) fails none of the client's calls and stops
//! nothing: the client turns its telemetry off and goes on.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mcp_resume::{Client, ToolCall};
use mock_server::context::meta;
use mock_server::{Cluster, Preset};
use opentelemetry::Context;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, Span, SpanData, SpanProcessor};
use serde_json::json;

use crate::support::{cluster, guarded};

/// Where the processor panics.
#[derive(Debug, Clone, Copy)]
enum Hook {
    Start,
    End,
}

/// Panics in `hook` for every span; counts the spans it saw start.
#[derive(Debug)]
struct Panicking {
    hook: Hook,
    started: Arc<AtomicUsize>,
}

impl SpanProcessor for Panicking {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {
        self.started.fetch_add(1, Ordering::Relaxed);
        if matches!(self.hook, Hook::Start) {
            panic!("the application's span processor fails on_start");
        }
    }

    fn on_end(&self, _span: SpanData) {
        if matches!(self.hook, Hook::End) {
            panic!("the application's span processor fails on_end");
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

async fn calls_go_on_when_the_processor_panics_in(hook: Hook) {
    let cluster = Cluster::start(cluster(Preset::Replicated))
        .await
        .expect("cluster starts");
    let started = Arc::new(AtomicUsize::new(0));
    let provider = SdkTracerProvider::builder()
        .with_span_processor(Panicking {
            hook,
            started: started.clone(),
        })
        .build();
    let client = Client::builder(cluster.url())
        .open_listen_stream(false)
        .call_timeout(Duration::from_secs(5))
        .telemetry(mcp_resume::client::Telemetry::new().tracer_provider(&provider))
        .build()
        .expect("valid configuration");
    for text in ["first", "second", "third"] {
        let call = ToolCall::new("echo", json!({ "text": text })).meta(meta::TAG, json!(text));
        let reply = guarded(client.call_tool(call))
            .await
            .unwrap_or_else(|e| panic!("the {text} call ({hook:?}): {e}"));
        assert_eq!(reply.text(), text);
    }
    guarded(client.list_tools())
        .await
        .expect("the client still lists its tools");
    // The processor ran (and panicked), and once it had, the client stopped starting spans.
    let seen = started.load(Ordering::Relaxed);
    assert!(seen >= 1, "the processor never ran ({hook:?})");
    assert!(
        seen <= 4,
        "{seen} spans started after the processor had panicked ({hook:?})"
    );
    guarded(client.close()).await.expect("the client closes");
    let oracle = cluster.oracle();
    for text in ["first", "second", "third"] {
        assert_eq!(
            oracle.executions_tagged(text).count(),
            1,
            "{text} ({hook:?})"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_processor_panicking_when_a_span_ends_fails_no_call() {
    calls_go_on_when_the_processor_panics_in(Hook::End).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_processor_panicking_when_a_span_starts_fails_no_call() {
    calls_go_on_when_the_processor_panics_in(Hook::Start).await;
}

/// Panics as a span ends, once armed.
#[derive(Debug)]
struct PanicsOnEndWhenArmed(Arc<AtomicBool>);

impl SpanProcessor for PanicsOnEndWhenArmed {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, _span: SpanData) {
        if self.0.load(Ordering::SeqCst) {
            panic!("the application's span processor fails on_end");
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// A call made once the client's driver has stopped (its runtime shut down) fails `Closed`:
/// the span it had started is dropped unended, and a processor that panics as it ends runs
/// then, in the caller's task, where its panic is caught as on every other path.
#[test]
fn a_call_after_the_driver_stopped_fails_closed_whatever_the_processor_does() {
    let rt = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    };
    let servers = rt();
    let cluster = servers
        .block_on(Cluster::start(cluster(Preset::Replicated)))
        .expect("cluster starts");
    let armed = Arc::new(AtomicBool::new(false));
    let provider = SdkTracerProvider::builder()
        .with_span_processor(PanicsOnEndWhenArmed(armed.clone()))
        .build();
    let client = Client::builder(cluster.url())
        .open_listen_stream(false)
        .call_timeout(Duration::from_secs(5))
        .telemetry(mcp_resume::client::Telemetry::new().tracer_provider(&provider))
        .build()
        .expect("valid configuration");
    let drivers = rt();
    drivers
        .block_on(guarded(client.connect()))
        .expect("connects");
    drop(drivers);
    armed.store(true, Ordering::SeqCst);
    let callers = rt();
    let caller = client.clone();
    let joined = callers.block_on(callers.spawn(async move {
        guarded(caller.call_tool(ToolCall::new("echo", json!({"text": "late"})))).await
    }));
    let err = joined
        .expect("the caller's task does not panic")
        .expect_err("the driver has stopped");
    assert_eq!(err.kind(), mcp_resume::ErrorKind::Closed, "{err}");
}
