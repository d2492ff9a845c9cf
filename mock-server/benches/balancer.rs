//! Balancer overhead: tool calls per second through the balancer vs straight to the
//! instance, in one run, printed as a ratio.
//!
//! `cargo bench -p mock-server --bench balancer` (env `BENCH_MS` per round, default 1000;
//! `BENCH_ROUNDS`, default 5; `BENCH_CONCURRENCY`, default 16; `BENCH_ONLY=echo|slow` runs
//! one workload on the multi-thread runtime only, `BENCH_ONLY=current` the current-thread
//! run only; `BENCH_CALLS`, see `fixed_calls`). About a minute with the defaults.
//!
//! One instance, so both paths end at the same server; one HTTP client (pooled keep-alive
//! connections, `TCP_NODELAY`, as reqwest sets by default) for both; rounds alternate between
//! the two paths and the median of each is reported, which keeps machine noise from
//! favouring one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mock_server::{Cluster, ClusterConfig, Preset};
use serde_json::{json, Value};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn initialize(http: &reqwest::Client, url: &str) -> String {
    let resp = http
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                   "params": {"protocolVersion": "2025-11-25", "capabilities": {}}})
            .to_string(),
        )
        .send()
        .await
        .expect("initialize");
    resp.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned()
}

/// What each call asks for.
#[derive(Clone, Copy)]
enum Work {
    /// `echo`: no work at all, the transport is everything (the balancer's worst case).
    Echo,
    /// `slow` with one 1 ms step: a call that does (very little) work.
    OneMs,
}

impl Work {
    fn params(self, w: usize, id: u64) -> Value {
        match self {
            Work::Echo => json!({"name": "echo", "arguments": {"text": format!("w{w}-{id}")}}),
            Work::OneMs => json!({"name": "slow", "arguments": {"steps": 1, "delay_ms": 1}}),
        }
    }

    fn label(self) -> &'static str {
        match self {
            Work::Echo => "tools/call echo (no work)",
            Work::OneMs => "tools/call slow (1 step of 1 ms)",
        }
    }
}

/// Runs `concurrency` callers for `ms` milliseconds against `url`; returns calls per second.
async fn round(
    http: &reqwest::Client,
    url: &str,
    session: &str,
    concurrency: usize,
    ms: u64,
    work: Work,
) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_millis(ms);
    let start = Instant::now();
    let mut workers = Vec::new();
    for w in 0..concurrency {
        let (http, url, session, done) = (
            http.clone(),
            url.to_owned(),
            session.to_owned(),
            done.clone(),
        );
        workers.push(tokio::spawn(async move {
            let mut id = 0u64;
            while Instant::now() < deadline {
                id += 1;
                call(&http, &url, &session, id, work.params(w, id)).await;
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for w in workers {
        w.await.expect("worker");
    }
    done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

/// One `tools/call` on the session; panics unless it was answered with a result.
async fn call(http: &reqwest::Client, url: &str, session: &str, id: u64, params: Value) {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
    let resp = http
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", "2025-11-25")
        .body(body.to_string())
        .send()
        .await
        .expect("call");
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.expect("body");
    assert!(text.contains("\"result\""), "{text}");
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

async fn measure(concurrency: usize, ms: u64, rounds: usize, work: Work, callers: &[usize]) {
    let cluster = Cluster::start(ClusterConfig {
        preset: Preset::Replicated,
        instances: 1,
        idle_timeout: None,
        json_response: std::env::var_os("BENCH_JSON").is_some(),
        ..Default::default()
    })
    .await
    .unwrap();
    let direct_url = cluster.instance_url(0).unwrap();
    let lb_url = cluster.url();
    // Saturated (CPU-bound: client, balancer and instance share the machine's cores)
    // and one caller at a time (latency-bound: what one agent sees).
    for &c in callers {
        let c = if c == 0 { concurrency } else { c };
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(c)
            .tcp_nodelay(true)
            .build()
            .unwrap();
        let session = initialize(&http, &direct_url).await;
        // Warm both paths' connection pools.
        round(&http, &direct_url, &session, c, 300, work).await;
        round(&http, &lb_url, &session, c, 300, work).await;
        let (mut direct, mut balanced) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            cluster.reset_oracle();
            direct.push(round(&http, &direct_url, &session, c, ms, work).await);
            cluster.reset_oracle();
            balanced.push(round(&http, &lb_url, &session, c, ms, work).await);
        }
        let (d, b) = (median(direct), median(balanced));
        println!("  {}, {c} concurrent caller(s):", work.label());
        println!(
            "    direct to instance : {d:>9.0} calls/s ({:.0} us/call per caller)",
            1e6 * c as f64 / d
        );
        println!(
            "    through balancer   : {b:>9.0} calls/s ({:.0} us/call per caller)",
            1e6 * c as f64 / b
        );
        println!(
            "    ratio balancer/direct = {:.3} (balancer costs {:.1}%)",
            b / d,
            (1.0 - b / d) * 100.0
        );
    }
    cluster.shutdown().await;
}

/// `BENCH_CALLS=n BENCH_PATH=direct|balancer`: exactly `n` echo calls (after 200 warm-up
/// calls) on one thread, for instruction counts under a profiler: the difference between
/// two values of `n`, divided by their difference, is the cost of one call.
fn fixed_calls(n: u64, through_balancer: bool) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let cluster = Cluster::start(ClusterConfig {
            preset: Preset::Replicated,
            instances: 1,
            idle_timeout: None,
            ..Default::default()
        })
        .await
        .unwrap();
        let direct_url = cluster.instance_url(0).unwrap();
        let url = if through_balancer {
            cluster.url()
        } else {
            direct_url.clone()
        };
        let http = reqwest::Client::builder()
            .tcp_nodelay(true)
            .build()
            .unwrap();
        let session = initialize(&http, &direct_url).await;
        for (i, calls) in [200, n].into_iter().enumerate() {
            for id in 0..calls {
                call(&http, &url, &session, id, Work::Echo.params(i, id)).await;
            }
        }
        cluster.shutdown().await;
    });
}

fn main() {
    if let Some(n) = std::env::var("BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        let through = std::env::var("BENCH_PATH").is_ok_and(|p| p == "balancer");
        fixed_calls(n, through);
        return;
    }
    let ms = env_or("BENCH_MS", 1000);
    let rounds = env_or("BENCH_ROUNDS", 5) as usize;
    let concurrency = env_or("BENCH_CONCURRENCY", 16) as usize;
    let only = std::env::var("BENCH_ONLY").ok();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    println!(
        "balancer overhead: SSE-answered tool calls, {rounds} alternating rounds of {ms} ms per path, medians; {cores} cores"
    );
    // Multi-threaded, as the cluster normally runs: includes the cost of the extra
    // cross-thread wake-ups a proxy hop adds, which grows with machine load.
    println!("multi-thread runtime ({cores} workers):");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    // 0 stands for `concurrency`.
    for work in [Work::Echo, Work::OneMs] {
        let name = match work {
            Work::Echo => "echo",
            Work::OneMs => "slow",
        };
        if only.is_none() || only.as_deref() == Some(name) {
            rt.block_on(measure(concurrency, ms, rounds, work, &[0, 1]));
        }
    }
    drop(rt);
    if only.is_some() && only.as_deref() != Some("current") {
        return;
    }
    // One thread for client, balancer and instance: what the hop costs in CPU alone.
    println!("current-thread runtime (client, balancer and instance on one thread):");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(measure(concurrency, ms, rounds, Work::Echo, &[1]));
}
