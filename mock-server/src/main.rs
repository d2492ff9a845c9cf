//! `mock-cluster`: runs the mock round-robin MCP cluster until Ctrl-C (or SIGTERM).
//!
//! The first line on stdout is the MCP endpoint URL; the admin routes live next to it under
//! `/admin/` (see the crate README). `--instance-only` runs one instance without the
//! balancer (for a real balancer in front); `nginx-config` prints such a balancer's
//! configuration.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use mock_server::nginx::NginxConfig;
use mock_server::store::{RedisOptions, RedisStore, Store};
use mock_server::{Cluster, ClusterConfig, ClusterEra, CutStyle, Preset, StandaloneInstance};

/// Mock round-robin MCP cluster (Streamable HTTP 2025-03-26 … 2025-11-25, and 2026-07-28 with
/// --era) with stream faults and an oracle, for testing resume-aware MCP clients.
#[derive(Debug, Parser)]
#[command(name = "mock-cluster", version, args_conflicts_with_subcommands = true)]
struct Args {
    #[command(subcommand)]
    command: Option<Cmd>,

    /// State placement and resume rule: naive (shared event log only, permissive replay,
    /// unknown sessions silently get a default one), strict (shared sessions; a resume must
    /// pass ownership, gap, request and capability checks, else 404 + rejection), replicated
    /// (everything shared; resume anywhere), sticky (strict behind session affinity).
    #[arg(long, default_value = "naive", value_parser = parse_preset)]
    preset: Preset,

    /// Protocol era: legacy (2025-03-26 … 2025-11-25: sessions, initialize, resumable SSE),
    /// modern (2026-07-28 only: stateless, server/discover, no GET, no sessions) or dual
    /// (initialize or a session id means legacy, any other request is served as 2026-07-28).
    #[arg(long, default_value = "legacy", value_parser = parse_era)]
    era: ClusterEra,

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

    /// The shared store: `memory` (in this process) or a Redis URL such as
    /// redis://127.0.0.1:6379 (events as Redis streams, records, idempotency keys, counter,
    /// and with --instance-only the oracle's journal).
    #[arg(long, default_value = "memory")]
    store: String,

    /// Prefix of every Redis key: clusters with different namespaces share a server
    /// without seeing each other. Instances of one cluster must use the same.
    #[arg(long, default_value = "mcp:")]
    namespace: String,

    /// Lease of this process's claims in Redis, in milliseconds: after a crash, its running
    /// calls read as lost (outcome unknown) once it has expired.
    #[arg(long, default_value_t = 3_000, value_parser = clap::value_parser!(u64).range(30..))]
    lease_ms: u64,

    /// Run one instance on --listen without the built-in balancer, for a real balancer in
    /// front (see `nginx-config`). It reports to the oracle through the store's journal;
    /// GET /admin/oracle on any instance replays it. Needs a shared --store to be useful.
    #[arg(long)]
    instance_only: bool,

    /// With --instance-only: this instance's index, unique among the instances sharing the
    /// store (it names stream owners and the holders of running calls).
    #[arg(long, default_value_t = 0)]
    instance_index: usize,

    /// The client capabilities the clients are configured with, as a JSON object (e.g.
    /// '{"sampling":{}}'). Every execution whose context does not hold them (more members
    /// are fine) is then flagged wrong_capability; without it the oracle compares only with
    /// what the client itself sent, so a client sending the wrong ones goes unseen.
    #[arg(long, value_name = "JSON", value_parser = parse_capabilities)]
    expect_client_capabilities: Option<serde_json::Value>,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Print an nginx configuration fronting instances started with --instance-only:
    /// round-robin (or --affinity on the Mcp-Session-Id header), proxy_buffering off for SSE,
    /// HTTP/1.1 keep-alive upstream, proxy_read_timeout as the idle timeout that cuts
    /// streams. Run it with `nginx -p PREFIX -c PREFIX/nginx.conf -e PREFIX/error.log`.
    NginxConfig {
        /// An instance's address (repeatable, in upstream order).
        #[arg(long = "upstream", required = true)]
        upstreams: Vec<SocketAddr>,
        /// Where nginx listens.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// Directory for nginx's pid file, logs and temp files.
        #[arg(long)]
        prefix: PathBuf,
        /// Pin sessions: `hash $http_mcp_session_id consistent`.
        #[arg(long)]
        affinity: bool,
        /// proxy_read_timeout in milliseconds: idle streams are cut after it.
        #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..))]
        idle_timeout_ms: u64,
        /// Pin sessions by their id's prefix: `i<N>-` goes to the N-th upstream (the others
        /// as its backups), for servers that keep sessions in memory and name them so.
        #[arg(long, conflicts_with = "affinity")]
        session_prefixes: bool,
    },
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

fn parse_era(s: &str) -> Result<ClusterEra, String> {
    s.parse()
        .map_err(|e: mock_server::UnknownEra| e.to_string())
}

fn parse_capabilities(s: &str) -> Result<serde_json::Value, String> {
    match serde_json::from_str(s) {
        Ok(v @ serde_json::Value::Object(_)) => Ok(v),
        Ok(_) => Err("not a JSON object".to_owned()),
        Err(e) => Err(format!("not valid JSON: {e}")),
    }
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
        era: a.era,
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
        expected_client_capabilities: a.expect_client_capabilities.clone(),
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

async fn shared_store(a: &Args) -> Result<Option<Arc<dyn Store>>, String> {
    if a.store == "memory" {
        return Ok(None);
    }
    if !a.store.starts_with("redis://") {
        return Err(format!(
            "--store must be `memory` or a redis:// URL, got {:?}",
            a.store
        ));
    }
    let opts = RedisOptions {
        namespace: a.namespace.clone(),
        lease: Duration::from_millis(a.lease_ms),
        ..RedisOptions::default()
    };
    match RedisStore::connect_with(&a.store, opts).await {
        Ok(s) => Ok(Some(Arc::new(s))),
        Err(e) => Err(format!("cannot reach the store {}: {e}", a.store)),
    }
}

async fn run_instance(cfg: ClusterConfig, index: usize) -> ExitCode {
    let instance = match StandaloneInstance::start(cfg, index).await {
        Ok(i) => i,
        Err(e) => {
            eprintln!("mock-cluster: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{}", instance.url());
    eprintln!(
        "mock-cluster: instance {index} alone on {}; Ctrl-C to stop",
        instance.addr()
    );
    shutdown_signal().await;
    instance.shutdown().await;
    eprintln!("mock-cluster: stopped");
    ExitCode::SUCCESS
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(Cmd::NginxConfig {
        upstreams,
        listen,
        prefix,
        affinity,
        idle_timeout_ms,
        session_prefixes,
    }) = &args.command
    {
        let mut c = NginxConfig::new(*listen, upstreams.clone(), prefix.clone());
        c.affinity = *affinity;
        c.session_prefixes = *session_prefixes;
        c.idle_timeout = Duration::from_millis(*idle_timeout_ms);
        print!("{}", c.render());
        return ExitCode::SUCCESS;
    }
    let mut cfg = match config(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mock-cluster: {e}");
            return ExitCode::from(2);
        }
    };
    cfg.store = match shared_store(&args).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("mock-cluster: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.instance_only {
        return run_instance(cfg, args.instance_index).await;
    }
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
