//! OpenTelemetry for Node.js: the client's spans and metrics, exported over OTLP/HTTP from
//! Rust, each call a child of the span active in JavaScript when it is made.
//!
//! Why OTLP from Rust, and not spans made through `@opentelemetry/api`: the client creates
//! and ends its spans in its driver, on the addon's tokio threads, which cannot call into
//! JavaScript synchronously (only queue a call for the event loop), while the ids a request's
//! `traceparent` names must exist before the request leaves. What a Node user expects is
//! kept: the spans go to the collector the application's own SDK exports to, in the same
//! trace, under the span active when the call was made (`lib/telemetry.js` reads it through
//! `@opentelemetry/api`, when it is installed).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use mcp_resume::client::telemetry::remote_parent;
use mcp_resume::client::Telemetry;
use napi::bindgen_prelude::FunctionRef;
use napi::Env;
use opentelemetry::trace::FutureExt as _;
use opentelemetry::Context;
use opentelemetry_otlp::{MetricExporter, SpanExporter, WithExportConfig};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::SdkTracerProvider;

/// A client's exporters: spans in batches, metrics every 60 s, both flushed when the client
/// closes and shut down when it is dropped.
pub(crate) struct Otlp {
    tracer: SdkTracerProvider,
    meter: SdkMeterProvider,
}

impl Otlp {
    /// Exporters to the OTLP/HTTP collector at `endpoint` (e.g. `http://127.0.0.1:4318`):
    /// spans to `/v1/traces`, metrics to `/v1/metrics`.
    pub(crate) fn new(endpoint: &str) -> Result<Arc<Otlp>, String> {
        let base = endpoint.trim_end_matches('/');
        let spans = SpanExporter::builder()
            .with_http()
            .with_endpoint(format!("{base}/v1/traces"))
            .with_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("otlpEndpoint: {e}"))?;
        let metrics = MetricExporter::builder()
            .with_http()
            .with_endpoint(format!("{base}/v1/metrics"))
            .with_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("otlpEndpoint: {e}"))?;
        Ok(Arc::new(Otlp {
            tracer: SdkTracerProvider::builder()
                .with_batch_exporter(spans)
                .build(),
            meter: SdkMeterProvider::builder()
                .with_reader(PeriodicReader::builder(metrics).build())
                .build(),
        }))
    }

    /// The client's telemetry, into these exporters.
    pub(crate) fn telemetry(&self) -> Telemetry {
        Telemetry::new()
            .tracer_provider(&self.tracer)
            .meter_provider(&self.meter)
    }

    /// Exports what is waiting, off the runtime's workers (the export blocks).
    pub(crate) async fn flush(self: Arc<Self>) {
        let _ = tokio::task::spawn_blocking(move || {
            let _ = self.tracer.force_flush();
            let _ = self.meter.force_flush();
        })
        .await;
    }
}

impl Drop for Otlp {
    /// Shuts the exporters down on a thread of their own: a shutdown exports what is left,
    /// which must not block the event loop (a collector in this very process answers on it).
    fn drop(&mut self) {
        let (tracer, meter) = (self.tracer.clone(), self.meter.clone());
        let _ = std::thread::Builder::new()
            .name("mcp-resume-otlp-shutdown".to_owned())
            .spawn(move || {
                let _ = tracer.shutdown();
                let _ = meter.shutdown();
            });
    }
}

/// `() => traceparent | undefined`: the span active in JavaScript (`lib/telemetry.js`).
pub(crate) type CallerContext = FunctionRef<(), Option<String>>;

/// The span active in JavaScript now, as the remote parent of the call about to be made
/// (called on the JavaScript thread, as the call is made).
pub(crate) fn caller_context(env: &Env, read: Option<&CallerContext>) -> Option<Context> {
    let traceparent = read?.borrow_back(env).ok()?.call(()).ok()??;
    remote_parent(&traceparent, None)
}

/// `fut`, run under `parent` when there is one (its span's parent is then `parent`).
pub(crate) async fn under<F: Future>(parent: Option<Context>, fut: F) -> F::Output {
    match parent {
        Some(parent) => fut.with_context(parent).await,
        None => fut.await,
    }
}
