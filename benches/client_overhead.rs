//! Client overhead, side by side in one run, as ratios: a raw pooled reqwest POST + parse (the
//! floor), mcp-resume, rmcp 3.11 over a pooled reqwest client, and rmcp as its
//! `from_uri` builds it, all against the same neutral server; then recovery latency through
//! the mock cluster. docs/performance.md lists the target each row is checked
//! against.
//!
//! `cargo bench --bench client_overhead`. Environment:
//! - `BENCH_QUICK=1`: 4 rounds of 250 ms, fewer recovery calls (about 1 minute instead of 4).
//! - `BENCH_ONLY=seq,conc,inflight,memory,recovery,otel` (any subset): the metrics to run;
//!   `otel` (what the client's OpenTelemetry costs) only with `--features otel`.
//! - `BENCH_ROUNDS`, `BENCH_MS` (per client per round), `BENCH_RECOVERY_CALLS`,
//!   `BENCH_RMCP_RECOVERY_CALLS`: override the defaults.
//! - `BENCH_WORKERS` (client runtime threads, comma-separated, default `1,2`): the throughput
//!   metrics (seq, conc, inflight) run once per count, each in a runtime of its own and with
//!   a table of its own; memory and recovery run once, with the last count.
//! - `BENCH_CALLS=n` (with `BENCH_CLIENT`, `BENCH_MODE`, `BENCH_CALLERS`, `BENCH_SESSIONS`):
//!   exactly `n` calls by one kind of client and nothing else, for `time`, `perf` or callgrind
//!   (see `fixed_calls`).
//!
//! The server runs in a child process (this binary again, with `NEUTRAL_SERVER=json|sse`) so
//! that `getrusage(RUSAGE_SELF)` here measures the clients' CPU alone. Rounds interleave the
//! clients, each round starting with the next one, and medians over rounds are reported: the
//! machine is shared and noisy, so ratios within a run are what to read, not absolute figures.

#[path = "client_overhead/clients.rs"]
mod clients;
#[path = "client_overhead/meter.rs"]
mod meter;
#[path = "client_overhead/recovery.rs"]
mod recovery;
#[path = "client_overhead/server.rs"]
mod server;
#[path = "client_overhead/table.rs"]
mod table;
#[cfg(feature = "otel")]
#[path = "client_overhead/telemetry.rs"]
mod telemetry;

use std::sync::Arc;
use std::time::{Duration, Instant};

use clients::{Client, Kind, ALL};
use mcp_resume::ReconnectPolicy;
use meter::median;
use server::{Mode, NeutralServer, SERVER_ENV};
use table::{Row, Table};

#[global_allocator]
static ALLOCATOR: meter::Counting = meter::Counting;

struct Config {
    quick: bool,
    rounds: usize,
    window: Duration,
    only: Option<Vec<String>>,
    recovery_calls: usize,
    rmcp_recovery_calls: usize,
}

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// The client runtime's worker counts to measure (`BENCH_WORKERS`, comma-separated, default
/// `1,2`): one run of the throughput metrics per count, each with a runtime of its own.
fn worker_counts() -> Vec<usize> {
    let counts: Vec<usize> = std::env::var("BENCH_WORKERS")
        .ok()
        .map(|v| v.split(',').filter_map(|w| w.trim().parse().ok()).collect())
        .unwrap_or_default();
    if counts.is_empty() {
        vec![1, 2]
    } else {
        counts.into_iter().map(|w| w.max(1)).collect()
    }
}

impl Config {
    fn from_env() -> Config {
        let quick = std::env::var("BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
        Config {
            quick,
            // Many short rounds rather than a few long ones: the load other jobs put on the
            // machine comes and goes within seconds, and more samples spread it evenly.
            rounds: env_usize("BENCH_ROUNDS").unwrap_or(if quick { 4 } else { 12 }),
            window: Duration::from_millis(env_usize("BENCH_MS").unwrap_or(if quick {
                250
            } else {
                400
            }) as u64),
            only: std::env::var("BENCH_ONLY")
                .ok()
                .filter(|v| !v.is_empty())
                .map(|v| v.split(',').map(|s| s.trim().to_owned()).collect()),
            recovery_calls: env_usize("BENCH_RECOVERY_CALLS").unwrap_or(if quick {
                10
            } else {
                30
            }),
            // rmcp waits about a second before each reconnect; a few calls say enough.
            rmcp_recovery_calls: env_usize("BENCH_RMCP_RECOVERY_CALLS").unwrap_or(if quick {
                2
            } else {
                6
            }),
        }
    }

    fn wants(&self, metric: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|only| only.iter().any(|m| m == metric))
    }
}

/// What one client did in one measured window.
struct Window {
    calls: u64,
    secs: f64,
    cpu_secs: f64,
}

/// `callers` tasks call `echo` back to back until the window closes.
async fn window(client: &Arc<Client>, callers: usize, length: Duration) -> Window {
    let cpu0 = meter::cpu_time();
    let t0 = Instant::now();
    let deadline = t0 + length;
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                let mut calls = 0u64;
                while Instant::now() < deadline {
                    client.echo().await;
                    calls += 1;
                }
                calls
            })
        })
        .collect();
    let mut calls = 0;
    for t in tasks {
        calls += t.await.expect("a caller panicked");
    }
    Window {
        calls,
        secs: t0.elapsed().as_secs_f64(),
        cpu_secs: (meter::cpu_time() - cpu0).as_secs_f64(),
    }
}

/// Medians over rounds for one client.
#[derive(Default, Clone, Copy)]
struct Summary {
    calls_per_sec: f64,
    us_per_call: f64,
    cpu_us_per_call: f64,
}

/// Interleaved rounds of every client in `clients` with `callers` callers each.
async fn group(clients: &[(Kind, Arc<Client>)], callers: usize, cfg: &Config) -> Vec<Summary> {
    let warm = cfg.window / 3;
    for (_, c) in clients {
        window(c, callers, warm).await;
    }
    let n = clients.len();
    let mut per: Vec<Vec<Window>> = (0..n).map(|_| Vec::new()).collect();
    for round in 0..cfg.rounds {
        for i in 0..n {
            let idx = (i + round) % n;
            per[idx].push(window(&clients[idx].1, callers, cfg.window).await);
        }
    }
    per.iter()
        .map(|ws| {
            let f = |g: &dyn Fn(&Window) -> f64| median(&ws.iter().map(g).collect::<Vec<_>>());
            Summary {
                calls_per_sec: f(&|w| w.calls as f64 / w.secs),
                us_per_call: f(&|w| w.secs * 1e6 / w.calls as f64 * callers as f64),
                cpu_us_per_call: f(&|w| w.cpu_secs * 1e6 / w.calls as f64),
            }
        })
        .collect()
}

/// Heap allocations per sequential call, counted apart from the timed windows.
async fn allocations_per_call(client: &Client, calls: u64) -> f64 {
    meter::set_counting(true);
    let before = meter::allocations();
    for _ in 0..calls {
        client.echo().await;
    }
    let n = meter::allocations() - before;
    meter::set_counting(false);
    n as f64 / calls as f64
}

async fn connect_all(url: &str, kinds: &[Kind]) -> Vec<(Kind, Arc<Client>)> {
    let mut out = Vec::new();
    for &k in kinds {
        let c = Client::connect(k, url).await;
        // Proves the client works before anything is timed.
        c.echo().await;
        out.push((k, Arc::new(c)));
    }
    out
}

async fn close_all(clients: Vec<(Kind, Arc<Client>)>) {
    for (_, c) in clients {
        if let Ok(c) = Arc::try_unwrap(c) {
            c.close().await;
        }
    }
}

fn cells(summaries: &[Summary], kinds: &[Kind], f: impl Fn(&Summary) -> f64) -> [Option<f64>; 4] {
    let mut out = [None; 4];
    for (s, k) in summaries.iter().zip(kinds) {
        out[k.column()] = Some(f(s));
    }
    out
}

/// Live heap bytes one connected client holds: measured around `connect`, after a settling
/// pause, with the client alive; the first session of each kind is thrown away so that
/// one-time statics (TLS-free reqwest internals, tracing call sites) are not counted.
async fn idle_bytes(kind: Kind, url: &str, reps: usize) -> f64 {
    let settle = Duration::from_millis(200);
    let warm = Client::connect(kind, url).await;
    warm.echo().await;
    warm.close().await;
    tokio::time::sleep(settle).await;
    let mut deltas = Vec::new();
    for _ in 0..reps {
        let before = meter::live_bytes();
        let c = Client::connect(kind, url).await;
        tokio::time::sleep(settle).await;
        deltas.push((meter::live_bytes() - before) as f64);
        c.close().await;
        tokio::time::sleep(settle).await;
    }
    median(&deltas)
}

/// Live heap bytes right after building (no request made): the floor's `reqwest::Client`
/// and mcp-resume's default builder, medians.
async fn built_bytes(url: &str, reps: usize) -> [f64; 2] {
    let mut floor = Vec::new();
    let mut mine = Vec::new();
    for _ in 0..reps {
        let before = meter::live_bytes();
        let c = clients::plain_http();
        floor.push((meter::live_bytes() - before) as f64);
        drop(c);
        let before = meter::live_bytes();
        let c = mcp_resume::Client::builder(url)
            .open_listen_stream(false)
            .build()
            .expect("a valid configuration");
        mine.push((meter::live_bytes() - before) as f64);
        drop(c);
    }
    [median(&floor), median(&mine)]
}

/// Live heap bytes that subscribing to `events()` and `notifications()` adds to a connected
/// mcp-resume client (their fan-out buffers), median.
async fn subscribed_bytes(url: &str, reps: usize) -> f64 {
    let settle = Duration::from_millis(50);
    let mut deltas = Vec::new();
    for _ in 0..reps {
        let Client::McpResume(c) = Client::connect(Kind::McpResume, url).await else {
            unreachable!()
        };
        tokio::time::sleep(settle).await;
        let before = meter::live_bytes();
        let streams = (c.events(), c.notifications());
        tokio::time::sleep(settle).await;
        deltas.push((meter::live_bytes() - before) as f64);
        drop(streams);
        let _ = c.close().await;
    }
    median(&deltas)
}

/// One table: the throughput metrics on a client runtime of `workers` threads, and memory
/// and recovery when `last`.
async fn run(cfg: Arc<Config>, workers: usize, last: bool) {
    let started = Instant::now();
    let json = NeutralServer::spawn(Mode::Json);
    let sse = NeutralServer::spawn(Mode::Sse);
    let mut t = Table::default();
    println!(
        "client overhead: {} rounds of {} ms per client, medians; client runtime: tokio, {} \
         worker(s); server: child process{}",
        cfg.rounds,
        cfg.window.as_millis(),
        workers,
        if cfg.quick { " (BENCH_QUICK)" } else { "" }
    );

    if last && cfg.wants("memory") {
        // An earlier table's run switched the counters off; deltas need them on throughout.
        meter::set_counting(true);
        let mut v = [None; 4];
        for k in ALL {
            v[k.column()] = Some(idle_bytes(k, &json.url, 5).await);
        }
        let ok = v[1].is_some_and(|b| b <= 32.0 * 1024.0);
        let mut row = Row::new("idle connected session, bytes", v, Kind::Floor, 0)
            .budget("≤ 32768 B", Some(ok));
        let built = built_bytes(&json.url, 5).await;
        row.notes.push(format!(
            "floor: a reqwest::Client after initialize + initialized (one pooled connection); \
             mcp-resume adds {:.0} B to it; built and not connected: floor {:.0} B, \
             mcp-resume {:.0} B; subscribing to events() and notifications() adds {:.0} B",
            v[1].unwrap_or(f64::NAN) - v[0].unwrap_or(f64::NAN),
            built[0],
            built[1],
            subscribed_bytes(&json.url, 3).await
        ));
        t.push(row);
    }
    meter::set_counting(false);

    for mode in [Mode::Json, Mode::Sse] {
        let url = if mode == Mode::Json {
            &json.url
        } else {
            &sse.url
        };
        let l = mode.label();
        if cfg.wants("seq") {
            let clients = connect_all(url, &ALL).await;
            let s = group(&clients, 1, &cfg).await;
            let mut allocs = [None; 4];
            for (k, c) in &clients {
                allocs[k.column()] = Some(allocations_per_call(c, 1000).await);
            }
            close_all(clients).await;
            let tpc = cells(&s, &ALL, |s| s.us_per_call);
            t.push(Row::new(
                &format!("sequential calls/s, {l}"),
                cells(&s, &ALL, |s| s.calls_per_sec),
                Kind::Floor,
                0,
            ));
            let ok = ratio(tpc, Kind::McpResume, Kind::Floor).map(|r| r <= 1.05);
            t.push(
                Row::new(&format!("sequential µs/call, {l}"), tpc, Kind::Floor, 1)
                    .budget("≤ 1.05× floor", ok),
            );
            let cpu = cells(&s, &ALL, |s| s.cpu_us_per_call);
            let ok = ratio(cpu, Kind::McpResume, Kind::Floor).map(|r| r <= 1.20);
            t.push(
                Row::new(
                    &format!("CPU µs/call, sequential, {l}"),
                    cpu,
                    Kind::Floor,
                    1,
                )
                .budget("≤ 1.20× floor", ok),
            );
            t.push(Row::new(
                &format!("allocations/call, sequential, {l}"),
                allocs,
                Kind::Floor,
                0,
            ));
        }
        if cfg.wants("conc") {
            let clients = connect_all(url, &ALL).await;
            let s = group(&clients, 64, &cfg).await;
            close_all(clients).await;
            let cps = cells(&s, &ALL, |s| s.calls_per_sec);
            let over_rmcp = ratio(cps, Kind::McpResume, Kind::RmcpPooled);
            let ok = ratio(cps, Kind::McpResume, Kind::Floor)
                .zip(over_rmcp)
                .map(|(floor, rmcp)| floor >= 0.90 && rmcp >= 2.0);
            t.push(
                Row::new(&format!("64 callers calls/s, {l}"), cps, Kind::Floor, 0).budget(
                    &format!(
                        "≥ 0.90× floor, ≥ 2× rmcp pooled ({:.2}×)",
                        over_rmcp.unwrap_or(f64::NAN)
                    ),
                    ok,
                ),
            );
            t.push(Row::new(
                &format!("CPU µs/call, 64 callers, {l}"),
                cells(&s, &ALL, |s| s.cpu_us_per_call),
                Kind::Floor,
                1,
            ));
        }
    }

    if cfg.wants("inflight") {
        let kinds = [Kind::Floor, Kind::McpResume];
        let clients = connect_all(&json.url, &kinds).await;
        let mut at_64 = None;
        for callers in [1, 64, 256] {
            let s = group(&clients, callers, &cfg).await;
            let cpu = cells(&s, &kinds, |s| s.cpu_us_per_call);
            let mut row = Row::new(
                &format!("CPU µs/call, {callers} in flight, JSON"),
                cpu,
                Kind::Floor,
                1,
            );
            let over_floor = ratio(cpu, Kind::McpResume, Kind::Floor).unwrap_or(f64::NAN);
            if callers == 64 {
                at_64 = Some(over_floor);
            }
            if let (256, Some(base)) = (callers, at_64) {
                // From 1 to 64 in flight the regime changes (batched wake-ups, more
                // connections) for every client; a per-call scan would show from 64 to 256,
                // as mcp-resume's cost growing faster than the floor's.
                let growth = over_floor / base;
                row = row.budget(
                    &format!("no growth: ratio {growth:.2}× the 64-in-flight one"),
                    Some(growth <= 1.10),
                );
            }
            t.push(row);
        }
        close_all(clients).await;
    }

    if last && cfg.wants("recovery") {
        for retry in [Some(20), None] {
            let mut v = [None; 4];
            let mut notes = Vec::new();
            let mut budget_ms = f64::NAN;
            for kind in [Kind::McpResume, Kind::RmcpPooled, Kind::RmcpDefault] {
                let calls = if kind == Kind::McpResume {
                    cfg.recovery_calls
                } else {
                    cfg.rmcp_recovery_calls
                };
                let r = recovery::measure(kind, None, retry, calls).await;
                v[kind.column()] = Some(r.p50());
                if kind == Kind::McpResume {
                    budget_ms = match retry {
                        Some(ms) => ms as f64 + r.rtt_ms + 5.0,
                        None => r.rtt_ms + 25.0,
                    };
                }
                let mut note = format!(
                    "{}: {} cut calls, p10 {:.1} / p50 {:.1} / p90 {:.1} ms, round trip {:.2} ms",
                    kind.label(),
                    r.samples.len(),
                    r.percentile(0.1),
                    r.p50(),
                    r.percentile(0.9),
                    r.rtt_ms
                );
                if r.uncut > 0 {
                    note.push_str(&format!(", {} not cut", r.uncut));
                }
                note.push_str(&format!(
                    "; cluster: {} resumes served, {} executions",
                    r.server_resumes, r.executions
                ));
                if let (Some(res), Some(re)) = (r.resumed, r.reinitialized) {
                    note.push_str(&format!("; events: {res} Resumed, {re} Reinitialized"));
                }
                notes.push(note);
            }
            // What the reconnect itself costs once the policy's first delay is out of the way.
            let fast = ReconnectPolicy::default().with_initial_delay(Duration::from_millis(1));
            let r = recovery::measure(Kind::McpResume, Some(fast), retry, cfg.recovery_calls).await;
            notes.push(format!(
                "mcp-resume with ReconnectPolicy {{ initial_delay: 1 ms, .. }}: p10 {:.1} / p50 \
                 {:.1} / p90 {:.1} ms; cluster: {} resumes served, {} executions",
                r.percentile(0.1),
                r.p50(),
                r.percentile(0.9),
                r.server_resumes,
                r.executions
            ));
            let what = match retry {
                Some(ms) => format!("recovery p50 ms, retry {ms} ms"),
                None => "recovery p50 ms, no retry".to_owned(),
            };
            let bound = match retry {
                Some(ms) => format!("≤ {budget_ms:.1} ({ms} + rtt + 5)"),
                None => format!("≤ {budget_ms:.1} (rtt + 25)"),
            };
            let ok = v[1].map(|p| p <= budget_ms);
            let mut row = Row::new(&what, v, Kind::McpResume, 1)
                .no_ratio()
                .budget(&bound, ok);
            row.notes = notes;
            t.push(row);
        }
    }

    println!();
    println!("{}", t.render());
    #[cfg(feature = "otel")]
    if last && cfg.wants("otel") {
        let urls = [
            (Mode::Json, json.url.as_str()),
            (Mode::Sse, sse.url.as_str()),
        ];
        println!("{}", telemetry::measure(urls, &cfg).await);
    }
    println!("total {:.0} s", started.elapsed().as_secs_f64());
    drop((json, sse));
}

fn ratio(cells: [Option<f64>; 4], a: Kind, b: Kind) -> Option<f64> {
    Some(cells[a.column()]? / cells[b.column()]?)
}

/// `BENCH_CALLS=n`: exactly `n` echo calls by one client (`BENCH_CLIENT=floor|mcp-resume|
/// rmcp-pooled|rmcp-default`, `BENCH_MODE=json|sse`, `BENCH_CALLERS` concurrent callers,
/// default 1), for profilers: run it under callgrind at two counts and subtract, and
/// start-up cancels out. `BENCH_SESSIONS=k` (default 1) spreads the callers over `k` clients
/// of that kind, each with a session (and a connection pool) of its own: what one shared
/// session costs the callers, next to what each call costs.
async fn fixed_calls(calls: u64) {
    let kind = match std::env::var("BENCH_CLIENT").as_deref() {
        Ok("floor") => Kind::Floor,
        Ok("mcp-resume") | Err(_) => Kind::McpResume,
        Ok("rmcp-pooled") => Kind::RmcpPooled,
        Ok("rmcp-default") => Kind::RmcpDefault,
        Ok(other) => panic!("BENCH_CLIENT={other}: unknown client"),
    };
    let mode = match std::env::var("BENCH_MODE").as_deref() {
        Ok("sse") => Mode::Sse,
        _ => Mode::Json,
    };
    meter::set_counting(false);
    let server = NeutralServer::spawn(mode);
    let sessions = env_usize("BENCH_SESSIONS").unwrap_or(1).max(1);
    let mut clients = Vec::with_capacity(sessions);
    for _ in 0..sessions {
        clients.push(Arc::new(Client::connect(kind, &server.url).await));
    }
    let callers = env_usize("BENCH_CALLERS").unwrap_or(1).max(1) as u64;
    let cpu0 = meter::cpu_time();
    let split0 = meter::cpu_split();
    let t0 = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|i| {
            let client = clients[i as usize % sessions].clone();
            let share = calls / callers + u64::from(i < calls % callers);
            tokio::spawn(async move {
                for _ in 0..share {
                    client.echo().await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("a caller panicked");
    }
    let secs = t0.elapsed().as_secs_f64();
    let cpu = (meter::cpu_time() - cpu0).as_secs_f64();
    let split = meter::cpu_split();
    let per = |d: Duration| d.as_secs_f64() * 1e6 / calls as f64;
    println!(
        "{} {}: {calls} calls by {callers} caller(s) on {sessions} session(s), {:.1} µs/call, \
         CPU {:.1} µs/call (user {:.1}, system {:.1})",
        kind.label(),
        mode.label(),
        secs * 1e6 / calls as f64,
        cpu * 1e6 / calls as f64,
        per(split.0 - split0.0),
        per(split.1 - split0.1),
    );
    for client in clients {
        if let Ok(client) = Arc::try_unwrap(client) {
            client.close().await;
        }
    }
}

fn main() {
    if let Ok(mode) = std::env::var(SERVER_ENV) {
        server::serve(&mode);
    }
    let counts = worker_counts();
    let cfg = Arc::new(Config::from_env());
    let fixed = env_usize("BENCH_CALLS");
    for (i, &workers) in counts.iter().enumerate() {
        let last = i + 1 == counts.len();
        // `BENCH_CALLS` measures one client once, with the last count.
        if fixed.is_some() && !last {
            continue;
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
            .expect("a runtime");
        let cfg = cfg.clone();
        // On a worker, not on `block_on`'s thread: a future driven there is woken across
        // threads for every step of every call, which would be timed too.
        let work = async move {
            match fixed {
                Some(calls) => tokio::spawn(fixed_calls(calls as u64)).await,
                None => tokio::spawn(run(cfg, workers, last)).await,
            }
        };
        rt.block_on(work).expect("the bench panicked");
    }
}
