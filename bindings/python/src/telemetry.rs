//! OpenTelemetry for Python: the client's spans and metrics, exported over OTLP/HTTP from
//! Rust, each call a child of the Python caller's current span.
//!
//! Why OTLP from Rust, and not spans made through Python's `opentelemetry-api`: the client
//! creates and ends its spans in its driver, under the session's lock, on the binding's tokio
//! threads; making them through the Python API would take the GIL there (serializing the
//! driver on it, and deadlocking against a Python thread that holds the GIL while it waits for
//! the session), and the ids a request's `traceparent` names must exist before the request
//! leaves, which rules out re-creating the spans in Python afterwards. What a Python user
//! expects is kept: the spans land where the application's other spans go (the collector of
//! `OTEL_EXPORTER_OTLP_ENDPOINT`), in the same trace, as children of the span current when
//! the call was made (read through `opentelemetry.trace`, when it is installed).

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use mcp_resume::client::Telemetry;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::Context;
use opentelemetry_otlp::{MetricExporter, SpanExporter, WithExportConfig};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::SdkTracerProvider;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyModule;

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
            .map_err(|e| format!("otlp_endpoint: {e}"))?;
        let metrics = MetricExporter::builder()
            .with_http()
            .with_endpoint(format!("{base}/v1/metrics"))
            .with_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("otlp_endpoint: {e}"))?;
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

    /// Exports what is waiting (blocks: call it off the runtime's workers).
    pub(crate) fn flush(&self) {
        let _ = self.tracer.force_flush();
        let _ = self.meter.force_flush();
    }
}

impl Drop for Otlp {
    /// Shuts the exporters down on a thread of their own: the client is dropped with the GIL
    /// held, and a shutdown exports what is left, which must not wait on Python (a collector
    /// in this very process needs the GIL to answer).
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

/// `opentelemetry.trace`, if it is installed (looked up once).
fn python_trace(py: Python<'_>) -> Option<&Bound<'_, PyModule>> {
    static MODULE: PyOnceLock<Option<Py<PyModule>>> = PyOnceLock::new();
    MODULE
        .get_or_init(py, || {
            py.import("opentelemetry.trace").ok().map(Bound::unbind)
        })
        .as_ref()
        .map(|m| m.bind(py))
}

/// The Python caller's current span, as the remote parent of the call about to be made.
pub(crate) fn caller_context(py: Python<'_>) -> Option<Context> {
    let read = || -> PyResult<Option<Context>> {
        let Some(trace) = python_trace(py) else {
            return Ok(None);
        };
        let span = trace
            .call_method0("get_current_span")?
            .call_method0("get_span_context")?;
        if !span.getattr("is_valid")?.extract::<bool>()? {
            return Ok(None);
        }
        let trace_id: u128 = span.getattr("trace_id")?.extract()?;
        let span_id: u64 = span.getattr("span_id")?.extract()?;
        let flags: u8 = span.getattr("trace_flags")?.extract()?;
        let state: String = span
            .getattr("trace_state")?
            .call_method0("to_header")?
            .extract()?;
        let parent = SpanContext::new(
            TraceId::from(trace_id),
            SpanId::from(span_id),
            TraceFlags::new(flags & TraceFlags::SAMPLED.to_u8()),
            true,
            TraceState::from_str(&state).unwrap_or_default(),
        );
        Ok(Some(Context::new().with_remote_span_context(parent)))
    };
    // A broken or unusual `opentelemetry` installation costs the call its parent, not more.
    read().ok().flatten()
}
