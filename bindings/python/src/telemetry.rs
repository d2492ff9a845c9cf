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
//! the call was made (read through `opentelemetry.trace`, when it is installed). The
//! exporters are the SDK's `mcp_resume::client::telemetry::Otlp`.

use std::str::FromStr;

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::Context;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyModule;

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
