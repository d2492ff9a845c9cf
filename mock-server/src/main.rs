//! `mock-cluster`: runs the mock round-robin MCP cluster until Ctrl-C (or SIGTERM).
//!
//! The first line on stdout is the MCP endpoint URL; the admin routes live next to it under
//! `/admin/` (see the crate README).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use mock_server::{Cluster, ClusterConfig, CutStyle, Preset};

/// Mock round-robin MCP cluster (Streamable HTTP 2025-03-26 … 2025-11-25) with stream faults
/// and an oracle, for testing resume-aware MCP clients.
#[derive(Debug, Parser)]
#[command(name = "mock-cluster", version)]
struct Args {
    /// State placement and resume rule: naive (shared event log only, permissive replay,
    /// unknown sessions silently get a default one), strict (shared sessions; a resume must
    /// pass ownership, gap, request and capability checks, else 404 + rejection), replicated
    /// (everything shared; resume anywhere), sticky (strict behind session affinity).
    #[arg(long, default_value = "naive", value_parser = parse_preset)]
    preset: Preset,

    /// Number of MCP instances behind the balancer.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=256))]
    instances: u16,

    /// Address of the balancer, the public MCP endpoint (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,

    /// Balancer idle timeout for SSE streams, in milliseconds (0 disables it).
    #[arg(long, default_value_t = 30_000)]
    idle_timeout_ms: u64,

    /// Cut every SSE stream right after its N-th event.
    #[arg(long)]
    cut_after_events: Option<u32>,

    /// Seed of the random cuts; enables them (with --random-cut-probability, default 0.1).
    #[arg(long)]
    seed: Option<u64>,

    /// Probability of a cut after each SSE event (enables random cuts; seed from --seed or 0).
    #[arg(long)]
    random_cut_probability: Option<f64>,

    /// Probability that an event is missing from the shared log (still delivered live),
    /// creating gaps a resume can hit. Seeded by --seed.
    #[arg(long)]
    log_loss_probability: Option<f64>,

    /// How a cut ends a stream: abort (drop the connection) or clean (end the body).
    #[arg(long, value_enum, default_value_t = CutArg::Abort)]
    cut_style: CutArg,

    /// `retry:` in milliseconds, sent with priming events and on resumed streams.
    #[arg(long)]
    retry_ms: Option<u64>,

    /// Answer every request with JSON (default: tools/call gets SSE, the rest JSON).
    #[arg(long)]
    json_response: bool,

    /// Turn the resume-safety extension off: no advertisement, no Mcp-Capability-Hash, no
    /// sequenced ids, no rejection bodies, idempotency keys ignored (a stock-like server).
    #[arg(long)]
    no_extension: bool,

    /// Override the preset's routing: true pins sessions to instances, false round-robins.
    #[arg(long)]
    affinity: Option<bool>,

    /// Largest accepted POST body in bytes (larger ones get 413).
    #[arg(long, default_value_t = 1024 * 1024)]
    max_body_bytes: usize,

    /// Extra allowed Origin value (repeatable); localhost origins are always allowed.
    #[arg(long = "allowed-origin")]
    allowed_origins: Vec<String>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum CutArg {
    Abort,
    Clean,
}

fn parse_preset(s: &str) -> Result<Preset, String> {
    s.parse()
        .map_err(|e: mock_server::UnknownPreset| e.to_string())
}

fn probability(name: &str, p: f64) -> Result<f64, String> {
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(format!("--{name} must be between 0 and 1, got {p}"))
    }
}

fn config(a: &Args) -> Result<ClusterConfig, String> {
    let random_cut = match (a.seed, a.random_cut_probability) {
        (None, None) => None,
        (seed, p) => Some((
            seed.unwrap_or(0),
            probability("random-cut-probability", p.unwrap_or(0.1))?,
        )),
    };
    let log_loss = match a.log_loss_probability {
        Some(p) => Some((a.seed.unwrap_or(0), probability("log-loss-probability", p)?)),
        None => None,
    };
    Ok(ClusterConfig {
        preset: a.preset,
        instances: usize::from(a.instances),
        extension: !a.no_extension,
        idle_timeout: (a.idle_timeout_ms > 0).then(|| Duration::from_millis(a.idle_timeout_ms)),
        cut_after_events: a.cut_after_events,
        random_cut,
        cut_style: match a.cut_style {
            CutArg::Abort => CutStyle::Abort,
            CutArg::Clean => CutStyle::CleanEnd,
        },
        log_loss,
        retry_ms: a.retry_ms,
        json_response: a.json_response,
        affinity: a.affinity,
        listen: a.listen,
        max_body_bytes: a.max_body_bytes,
        allowed_origins: a.allowed_origins.clone(),
        store: None,
        oracle_record_limit: mock_server::DEFAULT_ORACLE_RECORD_LIMIT,
    })
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let cfg = match config(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mock-cluster: {e}");
            return ExitCode::from(2);
        }
    };
    let cluster = match Cluster::start(cfg).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mock-cluster: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Scripts read the first stdout line to find the server.
    println!("{}", cluster.url());
    eprintln!(
        "mock-cluster: preset {}, {} instances, affinity {}; admin at {}/oracle; Ctrl-C to stop",
        cluster.preset(),
        cluster.instances(),
        cluster.affinity(),
        cluster.admin_url()
    );
    shutdown_signal().await;
    cluster.shutdown().await;
    eprintln!("mock-cluster: stopped");
    ExitCode::SUCCESS
}
