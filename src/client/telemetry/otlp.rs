//! Exporters to an OpenTelemetry collector over OTLP/HTTP (the `otlp` feature): what the
//! Python and Node bindings give their users, and a short path for a Rust application that
//! sends nothing else.

use std::time::Duration;

use opentelemetry_otlp::{MetricExporter, SpanExporter, WithExportConfig};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::SdkTracerProvider;

use super::Telemetry;
use crate::error::{Error, ErrorKind};

/// How long one export may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// A tracer and a meter provider exporting to one OTLP/HTTP (protobuf) collector: spans in
/// batches, metrics every 60 s, from threads of their own. Dropping it shuts them down on a
/// thread of its own (exporting what is left), so the thread that drops it never waits.
///
/// ```no_run
/// use mcp_resume::client::telemetry::Otlp;
///
/// let otlp = Otlp::new("http://127.0.0.1:4318")?;
/// let client = mcp_resume::Client::builder("http://127.0.0.1:8080/mcp")
///     .telemetry(otlp.telemetry())
///     .build()?;
/// # Ok::<(), mcp_resume::Error>(())
/// ```
#[derive(Debug)]
pub struct Otlp {
    tracer: SdkTracerProvider,
    meter: SdkMeterProvider,
}

impl Otlp {
    /// Exporters to the collector at `endpoint`, a base URL (`http://127.0.0.1:4318`):
    /// spans go to `/v1/traces`, metrics to `/v1/metrics`. Must not be called from a tokio
    /// runtime's thread: the exporters' HTTP client runs a runtime of its own. A URL the
    /// exporters refuse is [`ErrorKind::InvalidConfig`].
    pub fn new(endpoint: &str) -> Result<Otlp, Error> {
        let base = endpoint.trim_end_matches('/');
        let refused = |e: opentelemetry_otlp::ExporterBuildError| {
            Error::with_source(ErrorKind::InvalidConfig, "invalid OTLP endpoint", e)
        };
        let spans = SpanExporter::builder()
            .with_http()
            .with_endpoint(format!("{base}/v1/traces"))
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(refused)?;
        let metrics = MetricExporter::builder()
            .with_http()
            .with_endpoint(format!("{base}/v1/metrics"))
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(refused)?;
        Ok(Otlp {
            tracer: SdkTracerProvider::builder()
                .with_batch_exporter(spans)
                .build(),
            meter: SdkMeterProvider::builder()
                .with_reader(PeriodicReader::builder(metrics).build())
                .build(),
        })
    }

    /// A client's telemetry into these exporters.
    pub fn telemetry(&self) -> Telemetry {
        Telemetry::new()
            .tracer_provider(&self.tracer)
            .meter_provider(&self.meter)
    }

    /// Exports what is waiting, and returns once it is out (or failed). Blocks: from async
    /// code, call it in `tokio::task::spawn_blocking`.
    pub fn flush(&self) {
        let _ = self.tracer.force_flush();
        let _ = self.meter.force_flush();
    }
}

impl Drop for Otlp {
    fn drop(&mut self) {
        let (tracer, meter) = (self.tracer.clone(), self.meter.clone());
        // The shutdown exports what is left: whoever drops the exporters (an event loop, a
        // thread holding Python's GIL) must not wait for a collector, which may need that
        // very thread to answer.
        let _ = std::thread::Builder::new()
            .name("mcp-resume-otlp-shutdown".to_owned())
            .spawn(move || {
                let _ = tracer.shutdown();
                let _ = meter.shutdown();
            });
    }
}
