//! Scale: how many idle connected sessions one client process holds, and what each costs.
//!
//! `cargo bench --bench scale` (about 4 minutes once built). Every row runs in a client
//! process of its own (this binary again, with `SCALE_CLIENT=<row>`), so that its resident
//! set, its CPU time (`getrusage(RUSAGE_SELF)`) and its file descriptors are that row's
//! alone; the servers are mock-cluster instances in further processes (`SCALE_SERVER=legacy`
//! or `modern`), the sessions spread over them round-robin so that no server process runs
//! out of descriptors. A row connects its sessions 32 at a time, lets them settle, then
//! measures:
//! - **RSS per session**: the growth of `VmRSS` from one warm session to all of them, divided
//!   by their number;
//! - **idle CPU**: the process's user + system time over `SCALE_IDLE_SECS` (default 10) with
//!   every session connected and nothing asked of it;
//! - **connect time**: each `connect`'s own duration (p50, p99) and the whole ramp's wall
//!   time per session;
//! - afterwards every session answers one `tools/call echo`, or the row fails: the sessions
//!   counted were really connected.
//!
//! Environment: `SCALE_SESSIONS` (default 10000; the rows with the listen stream on hold at
//! most what the descriptor limit allows), `SCALE_ONLY=<row>,<row>` (names below),
//! `SCALE_IDLE_SECS`, `SCALE_SERVERS` (server processes, default 4).

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_resume::Era;
use mock_server::{ClusterConfig, ClusterEra, Preset, StandaloneInstance};
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, ProtocolVersion};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::ServiceExt;
use serde_json::{json, Value};
use tokio::sync::Semaphore;

const SERVER_ENV: &str = "SCALE_SERVER";
const CLIENT_ENV: &str = "SCALE_CLIENT";
const URLS_ENV: &str = "SCALE_URLS";
/// Connects in flight at once during a ramp.
const RAMP_CONCURRENCY: usize = 32;
/// Descriptors a row leaves for everything but its sessions (runtime, pipes, pool).
const FD_RESERVE: usize = 512;

/// One row: which client, in which configuration, against which era.
#[derive(Clone, Copy, Debug)]
struct Row {
    name: &'static str,
    label: &'static str,
    server: ServerEra,
    client: ClientKind,
    /// Descriptors each session keeps open (pooled POST connection, listen stream).
    fds_per_session: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ServerEra {
    Legacy,
    Modern,
}

impl ServerEra {
    fn name(self) -> &'static str {
        match self {
            ServerEra::Legacy => "legacy",
            ServerEra::Modern => "modern",
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum ClientKind {
    /// mcp-resume; `shared`: one `reqwest::Client` for every session (`http_client`),
    /// otherwise each builds its own (the default).
    McpResume { listen: bool, shared: bool },
    /// rmcp 3.11 as `StreamableHttpClientTransport::from_uri` builds it: one HTTP client per
    /// session, no idle connections kept, its GET stream opened after `initialize`.
    Rmcp,
}

const ROWS: [Row; 7] = [
    Row {
        name: "legacy-own",
        label: "legacy, listen off, own HTTP client",
        server: ServerEra::Legacy,
        client: ClientKind::McpResume {
            listen: false,
            shared: false,
        },
        fds_per_session: 1,
    },
    Row {
        name: "legacy-shared",
        label: "legacy, listen off, shared HTTP client",
        server: ServerEra::Legacy,
        client: ClientKind::McpResume {
            listen: false,
            shared: true,
        },
        fds_per_session: 1,
    },
    Row {
        name: "legacy-listen-own",
        label: "legacy, listen on, own HTTP client",
        server: ServerEra::Legacy,
        client: ClientKind::McpResume {
            listen: true,
            shared: false,
        },
        fds_per_session: 2,
    },
    Row {
        name: "legacy-listen-shared",
        label: "legacy, listen on, shared HTTP client",
        server: ServerEra::Legacy,
        client: ClientKind::McpResume {
            listen: true,
            shared: true,
        },
        fds_per_session: 1,
    },
    Row {
        name: "modern-own",
        label: "2026-07-28, own HTTP client",
        server: ServerEra::Modern,
        client: ClientKind::McpResume {
            listen: false,
            shared: false,
        },
        fds_per_session: 1,
    },
    Row {
        name: "modern-shared",
        label: "2026-07-28, shared HTTP client",
        server: ServerEra::Modern,
        client: ClientKind::McpResume {
            listen: false,
            shared: true,
        },
        fds_per_session: 1,
    },
    Row {
        name: "rmcp",
        label: "rmcp 3.11 from_uri (GET stream on)",
        server: ServerEra::Legacy,
        client: ClientKind::Rmcp,
        fds_per_session: 1,
    },
];

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn main() {
    if let Ok(era) = std::env::var(SERVER_ENV) {
        serve(&era);
    }
    if let Ok(row) = std::env::var(CLIENT_ENV) {
        let row = ROWS
            .iter()
            .find(|r| r.name == row)
            .unwrap_or_else(|| panic!("{CLIENT_ENV}={row}: no such row"));
        client_row(*row);
    }
    // `cargo bench` passes `--bench`; the test harness's list probe passes `--list`.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    orchestrate();
}

// ---------------------------------------------------------------- the parent process

fn orchestrate() {
    let sessions = env_usize("SCALE_SESSIONS").unwrap_or(10_000);
    let servers = env_usize("SCALE_SERVERS").unwrap_or(4).max(1);
    let only: Option<Vec<String>> = std::env::var("SCALE_ONLY")
        .ok()
        .filter(|v| !v.is_empty())
        .map(|v| v.split(',').map(|s| s.trim().to_owned()).collect());
    let fd_limit = fd_limit();
    println!(
        "scale: up to {sessions} sessions per row, {servers} server processes per era, \
         descriptor limit {fd_limit}, idle window {} s",
        idle_secs()
    );
    println!(
        "{:<40} {:>8} {:>12} {:>13} {:>13} {:>11} {:>11} {:>11}",
        "row",
        "sessions",
        "RSS/session",
        "idle CPU",
        "CPU/sess.",
        "connect p50",
        "connect p99",
        "ramp/sess."
    );
    let mut fleets: Vec<(ServerEra, Vec<ServerProcess>)> = Vec::new();
    let mut reports: Vec<(Row, Value)> = Vec::new();
    for row in ROWS {
        if only
            .as_ref()
            .is_some_and(|o| !o.iter().any(|n| n == row.name))
        {
            continue;
        }
        if !fleets.iter().any(|(era, _)| *era == row.server) {
            let fleet = (0..servers)
                .map(|_| ServerProcess::spawn(row.server))
                .collect();
            fleets.push((row.server, fleet));
        }
        let (_, fleet) = fleets
            .iter()
            .find(|(era, _)| *era == row.server)
            .expect("started above");
        let urls: Vec<&str> = fleet.iter().map(|s| s.url.as_str()).collect();
        let fit = fd_limit.saturating_sub(FD_RESERVE) / row.fds_per_session;
        let n = sessions.min(fit);
        let report = run_row(row, &urls.join(","), n);
        println!(
            "{:<40} {:>8} {:>9.1} KiB {:>10.3} ms/s {:>10.2} ns/s {:>8.2} ms {:>8.2} ms {:>8.3} ms",
            row.label,
            report["sessions"],
            report["rss_bytes_per_session"].as_f64().unwrap_or(f64::NAN) / 1024.0,
            report["idle_cpu_ms_per_s"].as_f64().unwrap_or(f64::NAN),
            report["idle_cpu_ns_per_s_per_session"]
                .as_f64()
                .unwrap_or(f64::NAN),
            report["connect_p50_ms"].as_f64().unwrap_or(f64::NAN),
            report["connect_p99_ms"].as_f64().unwrap_or(f64::NAN),
            report["ramp_ms_per_session"].as_f64().unwrap_or(f64::NAN),
        );
        println!(
            "    {} descriptors open after connecting; RSS {:.1} MiB with one session, {:.1} MiB \
             with all; {} of {} sessions answered a tools/call afterwards",
            report["fds"],
            report["rss_warm_bytes"].as_f64().unwrap_or(f64::NAN) / 1048576.0,
            report["rss_all_bytes"].as_f64().unwrap_or(f64::NAN) / 1048576.0,
            report["answered"],
            report["sessions"],
        );
        reports.push((row, report));
    }
    print_ratios(&reports);
}

/// Each mcp-resume row against rmcp's (the baseline), when both ran: the ratios are what to
/// compare, the absolute figures move with the machine.
fn print_ratios(reports: &[(Row, Value)]) {
    let Some((_, baseline)) = reports
        .iter()
        .find(|(r, _)| matches!(r.client, ClientKind::Rmcp))
    else {
        return;
    };
    let metric = |v: &Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    println!("ratios to rmcp (lower is better): RSS per session, connect p50");
    for (row, report) in reports {
        if matches!(row.client, ClientKind::Rmcp) {
            continue;
        }
        println!(
            "    {:<40} {:>5.2}x {:>5.2}x",
            row.label,
            metric(report, "rss_bytes_per_session") / metric(baseline, "rss_bytes_per_session"),
            metric(report, "connect_p50_ms") / metric(baseline, "connect_p50_ms"),
        );
    }
}

/// Runs one row in a child process and returns the JSON line it prints.
fn run_row(row: Row, urls: &str, sessions: usize) -> Value {
    let exe = std::env::current_exe().expect("the bench binary's path");
    let out = Command::new(exe)
        .env(CLIENT_ENV, row.name)
        .env(URLS_ENV, urls)
        .env("SCALE_SESSIONS", sessions.to_string())
        .stderr(Stdio::inherit())
        .output()
        .expect("the client process runs");
    assert!(
        out.status.success(),
        "row {} failed: {}",
        row.name,
        out.status
    );
    let line = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(line.trim()).expect("the row prints one JSON line");
    assert_eq!(
        report["answered"], report["sessions"],
        "row {}: every connected session answers a call",
        row.name
    );
    report
}

/// A server child process; it exits when its stdin closes.
struct ServerProcess {
    child: Child,
    url: String,
}

impl ServerProcess {
    fn spawn(era: ServerEra) -> ServerProcess {
        let exe = std::env::current_exe().expect("the bench binary's path");
        let mut child = Command::new(exe)
            .env(SERVER_ENV, era.name())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("a server process starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped stdout"))
            .read_line(&mut line)
            .expect("the server prints its URL");
        ServerProcess {
            child,
            url: line.trim().to_owned(),
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// Runs a mock-cluster instance (no faults) in this process until stdin closes.
fn serve(era: &str) -> ! {
    let era = match era {
        "legacy" => ClusterEra::Legacy,
        "modern" => ClusterEra::Modern,
        other => panic!("{SERVER_ENV}={other}: expected legacy or modern"),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async move {
        let config = ClusterConfig::new(Preset::Sticky).with_era(era);
        let instance = StandaloneInstance::start(config, 0)
            .await
            .expect("the instance starts");
        println!("{}", instance.url());
        tokio::task::spawn_blocking(|| {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
        })
        .await
        .expect("stdin watcher");
        std::process::exit(0)
    })
}

// ---------------------------------------------------------------- a row's process

enum Session {
    McpResume(mcp_resume::Client),
    Rmcp(rmcp::service::RunningService<rmcp::service::RoleClient, ClientConfig>),
}

impl Session {
    /// One `tools/call echo`; true when the answer is the echoed text.
    async fn echo(&self) -> bool {
        match self {
            Session::McpResume(c) => c
                .call_tool(mcp_resume::ToolCall::new("echo", json!({"text": "hi"})))
                .await
                .is_ok_and(|r| !r.is_error && r.text() == "hi"),
            Session::Rmcp(s) => {
                let mut args = rmcp::model::JsonObject::new();
                args.insert("text".into(), json!("hi"));
                s.call_tool(rmcp::model::CallToolRequestParams::new("echo").with_arguments(args))
                    .await
                    .is_ok_and(|r| r.is_error != Some(true))
            }
        }
    }
}

struct Connector {
    row: Row,
    shared: reqwest::Client,
}

impl Connector {
    async fn connect(&self, url: &str) -> Session {
        match self.row.client {
            ClientKind::McpResume { listen, shared } => {
                let era = match self.row.server {
                    ServerEra::Legacy => Era::Legacy,
                    ServerEra::Modern => Era::Modern,
                };
                let mut builder = mcp_resume::Client::builder(url)
                    .open_listen_stream(listen)
                    .era(era);
                if shared {
                    builder = builder.http_client(self.shared.clone());
                }
                let client = builder.build().expect("a valid configuration");
                client.connect().await.expect("mcp-resume connects");
                Session::McpResume(client)
            }
            ClientKind::Rmcp => {
                let config = ClientConfig::new(
                    ClientCapabilities::default(),
                    Implementation::from_build_env(),
                )
                .with_protocol_version(ProtocolVersion::V_2025_11_25);
                let transport = StreamableHttpClientTransport::from_uri(url);
                Session::Rmcp(config.serve(transport).await.expect("rmcp connects"))
            }
        }
    }
}

fn client_row(row: Row) -> ! {
    let sessions = env_usize("SCALE_SESSIONS").expect("the parent sets SCALE_SESSIONS");
    let urls: Vec<String> = std::env::var(URLS_ENV)
        .expect("the parent sets SCALE_URLS")
        .split(',')
        .map(str::to_owned)
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let report = rt.block_on(measure(row, sessions, urls));
    println!("{report}");
    // Tearing down thousands of sessions (a DELETE each) is not what is measured.
    std::process::exit(0)
}

async fn measure(row: Row, sessions: usize, urls: Vec<String>) -> Value {
    let connector = Arc::new(Connector {
        row,
        // Built as the default builder builds its own for a plain-http endpoint.
        shared: reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .tcp_nodelay(true)
            .tls_certs_only([])
            .build()
            .expect("a plain-http reqwest client builds"),
    });
    // One warm session first: one-time statics (runtime, TLS-free reqwest internals, tracing
    // call sites) are then not charged to the sessions.
    let warm = connector.connect(&urls[0]).await;
    settle().await;
    let rss_warm = rss_bytes();

    let permits = Arc::new(Semaphore::new(RAMP_CONCURRENCY));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..sessions {
        let permit = permits.clone().acquire_owned().await.expect("open");
        let connector = connector.clone();
        let url = urls[i % urls.len()].clone();
        tasks.spawn(async move {
            let t = Instant::now();
            let s = connector.connect(&url).await;
            drop(permit);
            (s, t.elapsed())
        });
    }
    let mut held = Vec::with_capacity(sessions);
    let mut connect_times = Vec::with_capacity(sessions);
    while let Some(done) = tasks.join_next().await {
        let (s, took) = done.expect("a connect task");
        held.push(s);
        connect_times.push(took.as_secs_f64() * 1000.0);
    }
    let ramp = started.elapsed();
    settle().await;
    let rss_all = rss_bytes();
    let fds = open_fds();

    let idle = Duration::from_secs(idle_secs());
    let cpu_before = cpu_time();
    tokio::time::sleep(idle).await;
    let idle_cpu = cpu_time() - cpu_before;

    let held = Arc::new(held);
    let mut calls = tokio::task::JoinSet::new();
    for chunk in 0..RAMP_CONCURRENCY {
        let held = held.clone();
        calls.spawn(async move {
            let mut ok = 0usize;
            for s in held.iter().skip(chunk).step_by(RAMP_CONCURRENCY) {
                ok += usize::from(s.echo().await);
            }
            ok
        });
    }
    let mut answered = 0;
    while let Some(ok) = calls.join_next().await {
        answered += ok.expect("a call task");
    }
    drop(warm);

    connect_times.sort_by(f64::total_cmp);
    let pct = |p: f64| connect_times[((connect_times.len() - 1) as f64 * p) as usize];
    let idle_ms_per_s = idle_cpu.as_secs_f64() * 1000.0 / idle.as_secs_f64();
    json!({
        "row": row.name,
        "sessions": sessions,
        "rss_warm_bytes": rss_warm,
        "rss_all_bytes": rss_all,
        "rss_bytes_per_session": (rss_all as f64 - rss_warm as f64) / sessions as f64,
        "fds": fds,
        "idle_cpu_ms_per_s": idle_ms_per_s,
        "idle_cpu_ns_per_s_per_session": idle_ms_per_s * 1e6 / sessions as f64,
        "connect_p50_ms": pct(0.5),
        "connect_p99_ms": pct(0.99),
        "ramp_ms_per_session": ramp.as_secs_f64() * 1000.0 / sessions as f64,
        "answered": answered,
    })
}

/// Lets connections finish their handshakes and background tasks reach their idle state.
async fn settle() {
    tokio::time::sleep(Duration::from_secs(2)).await;
}

fn idle_secs() -> u64 {
    env_usize("SCALE_IDLE_SECS").unwrap_or(10) as u64
}

/// `VmRSS` of this process, in bytes.
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("a VmRSS line")
        * 1024
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

fn fd_limit() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given and nothing else.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    assert_eq!(rc, 0, "getrlimit");
    usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
}

/// User + system CPU time of this process.
fn cpu_time() -> Duration {
    // SAFETY: an all-zero rusage is a valid value; getrusage only writes into it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    assert_eq!(rc, 0, "getrusage");
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}
