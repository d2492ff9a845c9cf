//! With the `otel` feature (`cargo bench --bench client_overhead --features otel`): what
//! the client's telemetry costs a sequential call, telemetry disabled at run time against
//! telemetry on with no exporter (the global providers, not set: the API's no-op) and with
//! the SDK's in-memory exporters (every span exported as it ends, every metric aggregated).

use std::sync::Arc;

use mcp_resume::client::Telemetry;
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{
    InMemorySpanExporter, InMemorySpanExporterBuilder, SdkTracerProvider,
};

use crate::clients::{Client, Kind};
use crate::server::Mode;
use crate::{allocations_per_call, group, Config, Summary};

/// The three ways to run the same client.
const VARIANTS: [&str; 3] = ["telemetry disabled", "no exporter", "in-memory exporter"];

struct Sdk {
    spans: InMemorySpanExporter,
    tracer: SdkTracerProvider,
    meter: SdkMeterProvider,
}

impl Sdk {
    fn new() -> Sdk {
        let spans = InMemorySpanExporterBuilder::new().build();
        let tracer = SdkTracerProvider::builder()
            .with_simple_exporter(spans.clone())
            .build();
        let meter = SdkMeterProvider::builder()
            .with_reader(PeriodicReader::builder(InMemoryMetricExporter::default()).build())
            .build();
        Sdk {
            spans,
            tracer,
            meter,
        }
    }
}

async fn connect(url: &str, telemetry: Telemetry) -> Arc<Client> {
    let client = mcp_resume::Client::builder(url)
        .open_listen_stream(false)
        .telemetry(telemetry)
        .build()
        .expect("a valid configuration");
    client.connect().await.expect("mcp-resume connects");
    let client = Client::McpResume(client);
    client.echo().await;
    Arc::new(client)
}

/// The table's lines: µs and CPU µs per sequential call of each variant, with the ratio to
/// the disabled one, JSON then SSE.
pub(crate) async fn measure(urls: [(Mode, &str); 2], cfg: &Config) -> String {
    let sdk = Sdk::new();
    let mut out = format!(
        "{:<34}{:>24}{:>24}{:>24}\n",
        "telemetry (ratio to disabled)", VARIANTS[0], VARIANTS[1], VARIANTS[2]
    );
    for (mode, url) in urls {
        let clients = vec![
            (Kind::McpResume, connect(url, Telemetry::disabled()).await),
            (Kind::McpResume, connect(url, Telemetry::new()).await),
            (
                Kind::McpResume,
                connect(
                    url,
                    Telemetry::new()
                        .tracer_provider(&sdk.tracer)
                        .meter_provider(&sdk.meter),
                )
                .await,
            ),
        ];
        let s = group(&clients, 1, cfg).await;
        let mut allocations = Vec::new();
        for (_, c) in &clients {
            allocations.push(allocations_per_call(c, 1000).await);
        }
        let spans = sdk.spans.get_finished_spans().map_or(0, |s| s.len());
        sdk.spans.reset();
        for (metric, f) in [
            (
                "sequential µs/call",
                (|s: &Summary| s.us_per_call) as fn(&Summary) -> f64,
            ),
            ("CPU µs/call, sequential", |s: &Summary| s.cpu_us_per_call),
        ] {
            let base = f(&s[0]);
            out.push_str(&format!("{:<34}", format!("{metric}, {}", mode.label())));
            for summary in &s {
                let v = f(summary);
                out.push_str(&format!("{:>24}", format!("{v:.1} ({:.2})", v / base)));
            }
            out.push('\n');
        }
        out.push_str(&format!(
            "{:<34}",
            format!("allocations/call, sequential, {}", mode.label())
        ));
        for n in &allocations {
            out.push_str(&format!(
                "{:>24}",
                format!("{n:.0} ({:.2})", n / allocations[0])
            ));
        }
        out.push('\n');
        out.push_str(&format!(
            "  ({spans} spans exported in memory during the {} run)\n",
            mode.label()
        ));
        for (_, c) in clients {
            if let Ok(c) = Arc::try_unwrap(c) {
                c.close().await;
            }
        }
    }
    out
}
