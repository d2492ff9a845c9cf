//! The guard's cost, side by side in one run, as ratios: unkeyed `tools/call`s to an rmcp
//! 3.11 server bare, behind the guard with `MemoryStore`, and behind the guard with
//! `RedisStore` (a `redis-server` this bench starts); sequential and 64 concurrent callers.
//! Then the Redis round trips of a keyed call, counted by the server (`INFO commandstats`).
//!
//! `cargo bench -p mcp-resume-server`. Environment:
//! - `BENCH_QUICK=1`: 5 rounds of 300 ms (about 15 s instead of a minute).
//! - `BENCH_ROUNDS`, `BENCH_MS` (per configuration and mode, per round): override.
//! - `BENCH_SKIN_ONLY=1`: only the in-process part (for a profiler).
//! - `BENCH_SKIN_CALLS`: calls per round of the in-process part (default 100,000; 20,000
//!   with `BENCH_QUICK`), a few thousand for an instruction-counting profiler.
//! - `BENCH_SKIN_SIDE=bare|guarded`: only that side of the in-process part, so that a
//!   profiler counts it alone (the other reads as zero).
//! - `BENCH_PROFILE=bare|memory` (with `BENCH_CALLERS`, default 64): one configuration
//!   alone, its server's pid printed for a profiler to attach to.
//! - `BENCH_GUARD_PARTS=none|idempotency|resume`: the guarded servers enforce only that
//!   part of the guard (`none`: the skin's plumbing alone), to see which part costs what.
//! - `BENCH_SERVER_WORKERS`: the servers' runtime worker threads (default 2; with 1, the
//!   servers do not pay for waking each other's workers on a machine the client shares).
//!
//! Each server runs in a child process (this binary again, with `GUARD_BENCH_SERVE` set), so
//! that its own CPU time per call can be read from `/proc` beside the client's view of
//! throughput: on a shared, loaded machine throughput swings from window to window while CPU
//! per call does not. Rounds interleave the configurations, each round starting with the next
//! one, and medians over rounds are reported. The rounds are many and short (25 of 400 ms):
//! the machine's speed drifts over seconds, and two runs of 7 rounds of 1.5 s differed by up
//! to 0.15× where two runs of 25 short ones differ by about 0.03×. Targets: memory ≥ 0.95×
//! the bare server's throughput, Redis ≥ 0.90×; a keyed call at most two Redis round trips.

#[path = "../tests/layer/server.rs"]
#[allow(dead_code)]
mod server;

use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_resume_server::{MemoryStore, RedisOptions, RedisStore, ResumeSafetyLayer};
use mock_server::procs::RedisServer;
use serde_json::{json, Value};

use server::Server;

const CONCURRENT: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Config {
    Bare,
    Memory,
    Redis,
}

const CONFIGS: [Config; 3] = [Config::Bare, Config::Memory, Config::Redis];

/// A configuration, a number of callers, and per round what [`throughput`] measured.
type Samples = (Config, usize, Vec<Measured>);

/// One window: calls per second, and the server's CPU µs and allocations per call.
#[derive(Debug, Clone, Copy)]
struct Measured {
    calls_per_s: f64,
    cpu_us: f64,
    allocations: f64,
    /// Read and write system calls and context switches per call.
    syscalls: (f64, f64, f64),
}

/// The guard and its tower skin alone, in process: an inner service that answers at once
/// with a canned SSE answer, called bare and through the layer; µs and allocations per call
/// of each: `((bare µs, bare allocations), (guarded µs, guarded allocations))`.
fn skin_cost(rt: &tokio::runtime::Runtime, calls: u32) -> ((f64, f64), (f64, f64)) {
    use http_body_util::{BodyExt, Full};
    use tower_layer::Layer;
    use tower_service::Service;

    #[derive(Clone)]
    struct Canned;

    impl<B: Send + 'static> Service<http::Request<B>> for Canned {
        type Response = http::Response<Full<bytes::Bytes>>;
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

        fn poll_ready(
            &mut self,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), Self::Error>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn call(&mut self, req: http::Request<B>) -> Self::Future {
            let init = !req.headers().contains_key("mcp-session-id");
            let (ct, body): (&str, &'static [u8]) = if init {
                ("application/json", br#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{}}}"#)
            } else {
                ("text/event-stream", b"id: 0/1\nretry: 50\ndata: \n\nid: 1/1\ndata: {\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"bench\"}],\"isError\":false}}\n\n")
            };
            let mut r = http::Response::new(Full::new(bytes::Bytes::from_static(body)));
            r.headers_mut().insert("content-type", ct.parse().unwrap());
            if init {
                r.headers_mut()
                    .insert("mcp-session-id", "s1".parse().unwrap());
            }
            std::future::ready(Ok(r))
        }
    }

    fn request(session: bool) -> http::Request<Full<bytes::Bytes>> {
        let body: &'static [u8] = if session {
            br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"bench"}}}"#
        } else {
            br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}"#
        };
        let mut b = http::Request::post("/mcp").header("content-type", "application/json");
        if session {
            b = b.header("mcp-session-id", "s1");
        }
        b.body(Full::new(bytes::Bytes::from_static(body))).unwrap()
    }

    rt.block_on(async move {
        let mut guarded = ResumeSafetyLayer::new(MemoryStore::default()).layer(Canned);
        let init = guarded.call(request(false)).await.unwrap();
        let _ = init.into_body().collect().await.unwrap();
        let mut bare = Canned;
        let side = std::env::var("BENCH_SKIN_SIDE").unwrap_or_default();
        let calls_of = |s: &str| {
            if side.is_empty() || side == s {
                calls
            } else {
                0
            }
        };
        let per = |t: Instant, a: u64, n: u32| {
            (
                t.elapsed().as_secs_f64() * 1e6 / f64::from(n.max(1)),
                (allocations() - a) as f64 / f64::from(n.max(1)),
            )
        };
        let (t, a) = (Instant::now(), allocations());
        for _ in 0..calls_of("bare") {
            let r = bare.call(request(true)).await.unwrap();
            let _ = r.into_body().collect().await.unwrap();
        }
        let b = per(t, a, calls_of("bare"));
        let (t, a) = (Instant::now(), allocations());
        for _ in 0..calls_of("guarded") {
            let r = guarded.call(request(true)).await.unwrap();
            let _ = r.into_body().collect().await.unwrap();
        }
        (b, per(t, a, calls_of("guarded")))
    })
}

/// Which parts of the guard the guarded servers enforce: `all` (the default), `none` (the
/// skin's plumbing alone), `idempotency`, `resume` (each alone). Read by the server children,
/// which inherit it.
const PARTS_ENV: &str = "BENCH_GUARD_PARTS";

/// Set in the child processes: which server to run (`bare`, `memory`, `redis=<url>`).
const SERVE_ENV: &str = "GUARD_BENCH_SERVE";

/// Counts the allocations of this process (a server child reports its own on request).
struct Counting;

static ALLOCATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        unsafe { std::alloc::System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        unsafe { std::alloc::System.realloc(ptr, layout, size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.load(std::sync::atomic::Ordering::Relaxed)
}

/// The child: one server, its URL on stdout, until killed.
fn serve(what: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(env_u64("BENCH_SERVER_WORKERS").unwrap_or(2).max(1) as usize)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let layer = match what.split_once('=') {
            None if what == "bare" => None,
            None => Some(ResumeSafetyLayer::new(MemoryStore::default())),
            Some((_, url)) => {
                let store = RedisStore::connect_with(url, RedisOptions::default())
                    .await
                    .unwrap();
                Some(ResumeSafetyLayer::new(store))
            }
        };
        let layer = layer.map(|l| match std::env::var(PARTS_ENV).as_deref() {
            Ok("none") => l.resume_checks(false).idempotency(false),
            Ok("idempotency") => l.resume_checks(false),
            Ok("resume") => l.idempotency(false),
            _ => l,
        });
        let server = Server::start(layer, false).await;
        println!("{}", server.url());
        // Each line on stdin asks for the allocations so far.
        std::thread::spawn(|| {
            use std::io::{BufRead, Write};
            for _ in std::io::stdin().lock().lines() {
                let n = allocations();
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{n}");
                let _ = out.flush();
            }
        });
        std::future::pending::<()>().await;
    });
}

/// A server child process.
struct Child {
    child: std::process::Child,
    url: String,
    /// The child's stdin and stdout, to ask for its allocation count.
    ask: std::sync::Mutex<(
        std::process::ChildStdin,
        std::io::BufReader<std::process::ChildStdout>,
    )>,
}

impl Child {
    fn start(what: &str) -> Child {
        use std::io::BufRead;
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .env(SERVE_ENV, what)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        out.read_line(&mut line).unwrap();
        let stdin = child.stdin.take().unwrap();
        Child {
            child,
            url: line.trim().to_owned(),
            ask: std::sync::Mutex::new((stdin, out)),
        }
    }

    /// Read and write system calls the child made so far (`/proc/<pid>/io`), and its
    /// threads' context switches (`/proc/<pid>/task/*/status`).
    fn syscalls(&self) -> (u64, u64, u64) {
        let io = std::fs::read_to_string(format!("/proc/{}/io", self.child.id())).unwrap();
        let field = |name: &str| -> u64 {
            io.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        };
        let mut switches = 0;
        for task in std::fs::read_dir(format!("/proc/{}/task", self.child.id())).unwrap() {
            let status =
                std::fs::read_to_string(task.unwrap().path().join("status")).unwrap_or_default();
            switches += status
                .lines()
                .filter(|l| l.contains("ctxt_switches"))
                .filter_map(|l| l.split(':').nth(1)?.trim().parse::<u64>().ok())
                .sum::<u64>();
        }
        (field("syscr:"), field("syscw:"), switches)
    }

    /// Allocations the child made so far.
    fn allocations(&self) -> u64 {
        use std::io::{BufRead, Write};
        let mut ask = self.ask.lock().unwrap();
        let (stdin, out) = &mut *ask;
        writeln!(stdin).unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        line.trim().parse().unwrap()
    }

    /// The fields of `/proc/<pid>/stat` after the command name (which may hold spaces,
    /// hence the last ')'): the process state is the first.
    fn stat(&self) -> Vec<u64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        rest.split(' ').map(|f| f.parse().unwrap_or(0)).collect()
    }

    /// Minor page faults the process took so far.
    fn minor_faults(&self) -> u64 {
        self.stat()[7]
    }

    /// CPU time the process used so far (user + system), from `/proc/<pid>/stat`.
    fn cpu(&self) -> Duration {
        let f = self.stat();
        let ticks = f[11] + f[12];
        // SAFETY: sysconf reads a constant.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
        Duration::from_secs_f64(ticks as f64 / hz as f64)
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One session on one server, and a pooled HTTP client for it.
struct Target {
    http: reqwest::Client,
    url: String,
    session: String,
    server: Child,
}

impl Target {
    async fn start(what: &str) -> Target {
        let server = Child::start(what);
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(CONCURRENT)
            .build()
            .unwrap();
        let url = server.url.clone();
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"}}});
        let resp = post(&http, &url, None, &init, None).await;
        let session = resp
            .headers()
            .get("mcp-session-id")
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        let _ = resp.bytes().await;
        let done = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let _ = post(&http, &url, Some(&session), &done, None)
            .await
            .bytes()
            .await;
        Target {
            http,
            url,
            session,
            server,
        }
    }

    /// One `tools/call` of `echo` (keyed with `key`), its whole answer read.
    async fn call(&self, id: u64, key: Option<&str>) {
        let mut params = json!({"name": "echo", "arguments": {"text": "bench"}});
        if let Some(k) = key {
            params["_meta"] = json!({"io.github.mcp-resume/idempotency-key": k});
        }
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
        let resp = post(&self.http, &self.url, Some(&self.session), &body, key).await;
        assert!(resp.status().is_success(), "{}", resp.status());
        let text = resp.text().await.unwrap();
        assert!(text.contains("bench"), "{text}");
    }
}

async fn post(
    http: &reqwest::Client,
    url: &str,
    session: Option<&str>,
    body: &Value,
    key: Option<&str>,
) -> reqwest::Response {
    let mut req = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string());
    if let Some(s) = session {
        req = req
            .header("mcp-session-id", s)
            .header("mcp-protocol-version", "2025-11-25");
    }
    if let Some(k) = key {
        req = req.header("idempotency-key", k);
    }
    req.send().await.unwrap()
}

/// Calls per second over `window`, with `callers` callers each making calls back to back, and
/// the server's CPU time and allocations per call.
async fn throughput(target: &Arc<Target>, callers: usize, window: Duration) -> Measured {
    let cpu_before = target.server.cpu();
    let allocations_before = target.server.allocations();
    let syscalls_before = target.server.syscalls();
    let end = Instant::now() + window;
    let mut tasks = Vec::new();
    for c in 0..callers {
        let t = target.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < end {
                t.call(1_000_000 * c as u64 + n, None).await;
                n += 1;
            }
            n
        }));
    }
    let started = Instant::now();
    let mut calls = 0;
    for t in tasks {
        calls += t.await.unwrap();
    }
    let elapsed = started.elapsed();
    let cpu = target.server.cpu() - cpu_before;
    let allocations = target.server.allocations() - allocations_before;
    let syscalls = target.server.syscalls();
    let per_call = |x: f64| x / calls.max(1) as f64;
    Measured {
        calls_per_s: calls as f64 / elapsed.as_secs_f64(),
        cpu_us: per_call(cpu.as_secs_f64() * 1e6),
        allocations: per_call(allocations as f64),
        syscalls: (
            per_call((syscalls.0 - syscalls_before.0) as f64),
            per_call((syscalls.1 - syscalls_before.1) as f64),
            per_call((syscalls.2 - syscalls_before.2) as f64),
        ),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The median over rounds of what `read` takes from each window of `config` with `callers`.
fn median_of(
    results: &[Samples],
    config: Config,
    callers: usize,
    read: fn(&Measured) -> f64,
) -> f64 {
    let (_, _, samples) = results
        .iter()
        .find(|(c, n, _)| *c == config && *n == callers)
        .expect("every configuration was measured");
    median(samples.iter().map(read).collect())
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Round trips the store made since the last reset, per `INFO commandstats`: the commands
/// a client sends (`EVALSHA`, `EVAL`, `SCRIPT`, `GET`, `SET`). The commands a script runs
/// inside Redis (`TIME`, `HGET`, `HSET`, `PEXPIRE`) are counted there too, but are not round
/// trips.
async fn round_trips(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    const SENT: [&str; 5] = ["evalsha", "eval", "script", "get", "set"];
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest.split("calls=").nth(1)?.split(',').next()?;
            let calls = calls.parse::<u64>().ok()?;
            SENT.contains(&name.to_ascii_lowercase().as_str())
                .then_some(calls)
        })
        .sum()
}

/// One configuration alone (`bare` or `memory`), for a profiler: its server's pid on stderr,
/// a warm-up long enough to fill the guard's ledger, then one window of `BENCH_CALLERS`
/// callers (default 64) and what it measured, minor page faults included.
async fn profile(what: &str, window: Duration) {
    let target = Arc::new(Target::start(what).await);
    let callers = env_u64("BENCH_CALLERS").map_or(CONCURRENT, |n| n as usize);
    eprintln!("server pid {}", target.server.child.id());
    throughput(&target, CONCURRENT, Duration::from_secs(2)).await;
    let faults = target.server.minor_faults();
    let m = throughput(&target, callers, window).await;
    let calls = m.calls_per_s * window.as_secs_f64();
    eprintln!(
        "{what}, {callers} callers: {:.0} calls/s; per call in the server: {:.1} µs CPU, \
         {:.1} allocations, {:.3} minor page faults",
        m.calls_per_s,
        m.cpu_us,
        m.allocations,
        (target.server.minor_faults() - faults) as f64 / calls.max(1.0),
    );
}

fn main() {
    if let Ok(what) = std::env::var(SERVE_ENV) {
        return serve(&what);
    }
    let quick = std::env::var("BENCH_QUICK").is_ok_and(|v| v == "1");
    let rounds = env_u64("BENCH_ROUNDS").unwrap_or(if quick { 5 } else { 25 }) as usize;
    let window =
        Duration::from_millis(env_u64("BENCH_MS").unwrap_or(if quick { 300 } else { 400 }));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let one = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    if let Ok(what) = std::env::var("BENCH_PROFILE") {
        return rt.block_on(profile(&what, window));
    }
    let mut skin = Vec::new();
    // In process nothing drifts much within a second: a few rounds suffice.
    for _ in 0..rounds.min(7) {
        let calls = env_u64("BENCH_SKIN_CALLS").unwrap_or(if quick { 20_000 } else { 100_000 });
        skin.push(skin_cost(&one, calls.clamp(1, u64::from(u32::MAX)) as u32));
    }
    let bare_us = median(skin.iter().map(|s| s.0 .0).collect());
    let guarded_us = median(skin.iter().map(|s| s.1 .0).collect());
    let (bare_allocs, guarded_allocs) = (skin[0].0 .1, skin[0].1 .1);
    println!(
        "\nthe guard and its tower skin alone, in process, per unkeyed SSE call: {:.2} µs and \
         {:.1} allocations (bare canned service {bare_us:.2} µs and {bare_allocs:.1}, through \
         the layer {guarded_us:.2} µs and {guarded_allocs:.1})",
        guarded_us - bare_us,
        guarded_allocs - bare_allocs,
    );
    if std::env::var("BENCH_SKIN_ONLY").is_ok_and(|v| v == "1") {
        return;
    }
    rt.block_on(async move {
        let redis = RedisServer::start()
            .await
            .unwrap_or_else(|e| panic!("the bench needs redis-server: {e}"));
        let targets: Vec<(Config, Arc<Target>)> = vec![
            (Config::Bare, Arc::new(Target::start("bare").await)),
            (Config::Memory, Arc::new(Target::start("memory").await)),
            (
                Config::Redis,
                Arc::new(Target::start(&format!("redis={}", redis.url())).await),
            ),
        ];
        // Warm every path (connections, the guard's session cache, scripts).
        for (_, t) in &targets {
            throughput(t, CONCURRENT, Duration::from_millis(200)).await;
        }
        let mut results: Vec<Samples> = Vec::new();
        for callers in [1, CONCURRENT] {
            for c in CONFIGS {
                results.push((c, callers, Vec::new()));
            }
        }
        for round in 0..rounds {
            for callers in [1, CONCURRENT] {
                for i in 0..targets.len() {
                    let (config, target) = &targets[(i + round) % targets.len()];
                    let measured = throughput(target, callers, window).await;
                    let slot = results
                        .iter_mut()
                        .find(|(c, n, _)| c == config && *n == callers)
                        .unwrap();
                    slot.2.push(measured);
                }
            }
        }
        println!(
            "\nunkeyed tools/call (legacy session, SSE answers), rmcp 3.11, {rounds} rounds of {window:?}, medians"
        );
        println!("| callers | bare calls/s | guard + memory | ratio (≥ 0.95) | guard + Redis | ratio (≥ 0.90) | server CPU µs/call: bare, memory, Redis | server allocations/call: bare, memory, Redis |");
        println!("|---|---|---|---|---|---|---|---|");
        for callers in [1, CONCURRENT] {
            let of = |c: Config| {
                let of = |read: fn(&Measured) -> f64| median_of(&results, c, callers, read);
                (
                    of(|s| s.calls_per_s),
                    of(|s| s.cpu_us),
                    of(|s| s.allocations),
                )
            };
            let ((bare, cb, ab), (mem, cm, am), (red, cr, ar)) =
                (of(Config::Bare), of(Config::Memory), of(Config::Redis));
            let mark = |ok: bool| if ok { "ok" } else { "BELOW TARGET" };
            println!(
                "| {callers} | {bare:.0} | {mem:.0} | {:.3} {} | {red:.0} | {:.3} {} | {cb:.1}, {cm:.1} ({:.2}×), {cr:.1} ({:.2}×) | {ab:.0}, {am:.0}, {ar:.0} |",
                mem / bare,
                mark(mem / bare >= 0.95),
                red / bare,
                mark(red / bare >= 0.90),
                cm / cb,
                cr / cb,
            );
        }

        println!("\nper call in the server (medians): read / write system calls, context switches");
        println!("| callers | bare | guard + memory | guard + Redis |");
        println!("|---|---|---|---|");
        for callers in [1, CONCURRENT] {
            let of = |c: Config| {
                let of = |read: fn(&Measured) -> f64| median_of(&results, c, callers, read);
                format!(
                    "{:.2} / {:.2}, {:.2}",
                    of(|s| s.syscalls.0),
                    of(|s| s.syscalls.1),
                    of(|s| s.syscalls.2),
                )
            };
            println!(
                "| {callers} | {} | {} | {} |",
                of(Config::Bare),
                of(Config::Memory),
                of(Config::Redis)
            );
        }

        // A keyed call's round trips, counted by Redis itself.
        let mut conn = redis::Client::open(redis.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let redis_target = &targets[2].1;
        let calls = 200u64;
        let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(&mut conn).await.unwrap();
        let before = round_trips(&mut conn).await;
        for i in 0..calls {
            redis_target.call(i, Some(&format!("bench-key-{i}"))).await;
        }
        let keyed = round_trips(&mut conn).await - before;
        let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(&mut conn).await.unwrap();
        for i in 0..calls {
            redis_target.call(i, None).await;
        }
        let unkeyed = round_trips(&mut conn).await;
        let per = keyed as f64 / calls as f64;
        println!(
            "\nRedis round trips per keyed call: {per:.2} (≤ 2: {}); per unkeyed call: {:.2}",
            if per <= 2.0 { "ok" } else { "ABOVE TARGET" },
            unkeyed as f64 / calls as f64
        );
    });
}
