//! The demo's workload (`examples/demo/workload.rs`) on the cluster of the incident built from
//! real parts: nginx round-robin (or affinity on `Mcp-Session-Id`) in front of three
//! `mock-cluster --instance-only` processes sharing a `redis-server`, streams cut by nginx's
//! idle timeout. The truth comes from the instances' oracle journal in Redis, joined per call
//! tag with what the client reported, by the demo's own code.
//!
//! Needs `redis-server` and `nginx` (`.ci/run` installs them); without them these tests fail
//! saying so. The `mock-cluster` binary is built by `cargo test --workspace`; run alone, this
//! test builds it first.
//!
//! `cargo test --test external real_parts -- --ignored --nocapture` prints the comparison of the
//! in-memory cluster, the in-process cluster on Redis and the real parts (docs/mock-cluster.md).

use crate::workload;

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use mcp_resume::{Client, ErrorKind, SessionEvent, ToolCall};
use mock_server::context::meta;
use mock_server::procs::{ProcessCluster, ProcessClusterConfig, RedisServer};
use mock_server::{ClusterConfig, CutStyle, OracleReport, Preset, RedisOptions, RedisStore};
use serde_json::{json, Value};
use workload::{
    build_client, render_table, row, run_calls, run_one_on, Agent, ClientKind, Row, RunReport,
    WorkloadCaller, WorkloadConfig,
};

/// nginx's `proxy_read_timeout`, and the in-process balancer's idle timeout in the
/// comparison: a stream silent for this long is cut.
const IDLE_MS: u64 = 400;

/// The demo's workload with one difference: the `slow` call's single step comes after a
/// silence longer than the idle timeout, so the balancer cuts its stream the way the seed's
/// did (by idleness, not by counting events, which nginx cannot do). One step, so the stream
/// is cut once and the resumed stream then gets its events in time.
fn workload_config() -> WorkloadConfig {
    WorkloadConfig {
        slow_steps: 1,
        slow_delay_ms: IDLE_MS + 150,
        ..WorkloadConfig::default()
    }
}

/// The `mock-cluster` binary in this test's own target directory. `cargo test --workspace`
/// has built it; when it is missing or older than the mock server's sources (this test run
/// alone after an edit), it is built here.
fn mock_cluster_binary() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Ok(p) = std::env::var("MOCK_CLUSTER_BIN") {
            return PathBuf::from(p);
        }
        let exe = std::env::current_exe().expect("the test's path");
        // target/<profile>/deps/real_parts-HASH
        let profile_dir = exe
            .parent()
            .and_then(|deps| deps.parent())
            .expect("the test runs from target/<profile>/deps")
            .to_owned();
        let bin = profile_dir.join("mock-cluster");
        let built = std::fs::metadata(&bin).and_then(|m| m.modified()).ok();
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let sources = newest_mtime(&root.join("mock-server/src"))
            .into_iter()
            .chain(newest_mtime(&root.join("mock-server/Cargo.toml")))
            .max();
        if built.is_some_and(|b| sources.is_none_or(|s| s <= b)) {
            return bin;
        }
        let target_dir = profile_dir.parent().expect("the target directory");
        let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") => "test",
            _ => "release",
        };
        let out = Command::new(env!("CARGO"))
            .args([
                "build",
                "-p",
                "mock-server",
                "--bin",
                "mock-cluster",
                "--profile",
                profile,
            ])
            .env("CARGO_TARGET_DIR", target_dir)
            .current_dir(root)
            .output()
            .expect("cargo runs");
        assert!(
            out.status.success(),
            "building mock-cluster failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        bin
    })
    .clone()
}

fn newest_mtime(path: &std::path::Path) -> Option<std::time::SystemTime> {
    let meta = std::fs::metadata(path).ok()?;
    if meta.is_file() {
        return meta.modified().ok();
    }
    std::fs::read_dir(path)
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| newest_mtime(&e.path()))
        .max()
}

/// The real-parts cluster of `preset` (`sticky`: strict instances behind the affinity
/// config), or with the routing overridden.
async fn real_cluster(preset: Preset, affinity: Option<bool>) -> ProcessCluster {
    let mut config = ProcessClusterConfig::new(mock_cluster_binary(), preset);
    config.idle_timeout = Duration::from_millis(IDLE_MS);
    config.affinity = affinity;
    ProcessCluster::start(config)
        .await
        .unwrap_or_else(|e| panic!("the real-parts cluster did not start: {e}"))
}

async fn oracle(c: &ProcessCluster) -> OracleReport {
    c.oracle().await.expect("the oracle journal reads back")
}

/// Collects the client's session events until its last handle is dropped.
fn collect_events(client: &Client) -> tokio::task::JoinHandle<Vec<SessionEvent>> {
    let mut events = client.events();
    tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some(e) = events.next().await {
            seen.push(e);
        }
        seen
    })
}

async fn finish(
    client: Client,
    collector: tokio::task::JoinHandle<Vec<SessionEvent>>,
) -> Vec<SessionEvent> {
    let _ = tokio::time::timeout(Duration::from_secs(5), client.close()).await;
    drop(client);
    tokio::time::timeout(Duration::from_secs(10), collector)
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default()
}

/// The workload on a fresh real-parts cluster.
async fn run_real(
    preset: Preset,
    affinity: Option<bool>,
    kind: ClientKind,
    cfg: &WorkloadConfig,
) -> RunReport {
    run_real_logged(preset, affinity, kind, cfg).await.0
}

/// [`run_real`], and the tails of nginx's logs for failure messages.
async fn run_real_logged(
    preset: Preset,
    affinity: Option<bool>,
    kind: ClientKind,
    cfg: &WorkloadConfig,
) -> (RunReport, String) {
    let started = Instant::now();
    let cluster = real_cluster(preset, affinity).await;
    let client = build_client(kind, &cluster.url(), cfg);
    let collector = collect_events(&client);
    let connect = client.connect().await.map(drop).map_err(|e| e.kind());
    let mut agent = Agent::new(&client, preset, kind);
    if connect.is_ok() {
        run_calls(&mut agent, cfg).await;
    }
    let calls = agent.into_calls();
    let events = finish(client, collector).await;
    // Calls cut off from their client may still run; their executions count too.
    assert!(
        cluster.wait_idle(Duration::from_secs(5)).await,
        "calls still running"
    );
    let oracle = oracle(&cluster).await;
    let logs = format!(
        "nginx error log:\n{}\nnginx access log:\n{}",
        cluster.nginx().error_log(),
        cluster.nginx().access_log()
    );
    cluster.shutdown().await;
    let report = RunReport {
        preset,
        client: kind,
        connect,
        calls,
        events,
        oracle,
        // Asserted above.
        settled: true,
        seconds: started.elapsed().as_secs_f64(),
    };
    (report, logs)
}

/// The calls the client reported as success whose answer was not theirs, or went wrong
/// underneath (the demo's rule: [`workload::wrong_answer`]).
fn silent_wrong_calls(report: &RunReport) -> Vec<String> {
    report
        .calls
        .iter()
        .filter_map(|c| {
            workload::wrong_answer(c, &report.oracle).map(|why| format!("{}: {why}", c.tag))
        })
        .collect()
}

fn check_complete(report: &RunReport) {
    assert!(report.oracle.executions_complete());
    let mut tags: Vec<&str> = report.calls.iter().map(|c| c.tag.as_str()).collect();
    tags.sort_unstable();
    tags.dedup();
    assert_eq!(
        tags.len(),
        report.calls.len(),
        "each call ends exactly once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stock_like_client_through_nginx_on_naive_gives_silent_wrong_answers() {
    let report = run_real(
        Preset::Naive,
        None,
        ClientKind::StockLike,
        &workload_config(),
    )
    .await;
    let r = row(&report);
    assert!(report.connect.is_ok(), "{:?}", report.connect);
    check_complete(&report);
    // The incident, on real parts: success reported, wrong context underneath, no error.
    assert!(r.silent_wrong > 0, "{r:?}");
    assert!(report.oracle.totals.wrong_capability > 0, "{r:?}");
    assert!(report.oracle.totals.sessions_made_up > 0);
    assert!(
        report
            .calls
            .iter()
            .any(|c| c.tool == "generate"
                && c.outcome.as_ref().is_ok_and(|v| v["temperature"] == 1.0)),
        "{:#?}",
        report.calls
    );
    assert!(r.errors.is_empty(), "no explicit error surfaced: {r:?}");
    // nginx cut the slow call's stream and the client resumed it.
    assert!(
        report.oracle.totals.resumes > 0,
        "{:?}",
        report.oracle.totals
    );
    assert_eq!(r.duplicate_keyed, 0, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_aware_client_through_nginx_has_no_silent_wrong_answers_anywhere() {
    let cfg = workload_config();
    let mut failures = Vec::new();
    for (preset, affinity) in [
        (Preset::Naive, None),
        (Preset::Naive, None),
        (Preset::Strict, None),
        (Preset::Replicated, None),
        (Preset::Sticky, None),
    ] {
        let report = run_real(preset, affinity, ClientKind::ResumeAware, &cfg).await;
        let r = row(&report);
        assert!(report.connect.is_ok(), "{preset}: {:?}", report.connect);
        check_complete(&report);
        let wrong = silent_wrong_calls(&report);
        if !wrong.is_empty() || r.silent_wrong != 0 {
            failures.push(format!("{preset}: {wrong:?}"));
        }
        assert_eq!(r.duplicate_keyed, 0, "{preset}: {r:?}");
        assert_eq!(
            report.oracle.totals.duplicate_side_effects, 0,
            "{preset}: {r:?}"
        );
    }
    assert!(failures.is_empty(), "silent wrong answers: {failures:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_reinitialization_where_resume_is_safe_replicated_and_affinity() {
    let cfg = workload_config();
    for (preset, affinity, label) in [
        (Preset::Replicated, None, "replicated"),
        (Preset::Sticky, None, "affinity config (strict instances)"),
        (
            Preset::Replicated,
            Some(true),
            "replicated behind the affinity config",
        ),
    ] {
        for kind in ClientKind::ALL {
            let (report, nginx_log) = run_real_logged(preset, affinity, kind, &cfg).await;
            let r = row(&report);
            let totals = &report.oracle.totals;
            assert!(report.connect.is_ok(), "{label}: {:?}", report.connect);
            assert_eq!(
                totals.initializes,
                1,
                "{label} {kind:?}: {r:?}\n{:#?}\n{}\n{}",
                report.oracle.resumes,
                workload::render_calls(&report),
                nginx_log
            );
            assert_eq!(r.silent_wrong, 0, "{label} {kind:?}: {r:?}");
            assert_eq!(totals.wrong_capability, 0, "{label} {kind:?}: {totals:?}");
            assert_eq!(totals.unknown_record, 0, "{label} {kind:?}: {totals:?}");
            assert_eq!(
                totals.duplicate_side_effects, 0,
                "{label} {kind:?}: {totals:?}"
            );
            // nginx cut the slow call's stream; the resume was honored and every call
            // succeeded, each run exactly once.
            let honored = report.oracle.resumes.iter().filter(|r| r.honored).count();
            assert!(honored > 0, "{label} {kind:?}: {:?}", report.oracle.resumes);
            let failed: Vec<_> = report.calls.iter().filter(|c| c.outcome.is_err()).collect();
            assert!(failed.is_empty(), "{label} {kind:?}: {failed:#?}");
            for call in &report.calls {
                assert_eq!(
                    report.oracle.executions_tagged(&call.tag).count(),
                    1,
                    "{label} {kind:?}: {}",
                    call.tag
                );
            }
        }
    }
}

/// Starts `tool` on `client` in the background and waits until the oracle has recorded its
/// execution; returns the task and the instance that runs it.
async fn start_and_locate(
    cluster: &ProcessCluster,
    client: &Client,
    tag: &str,
    keyed: bool,
) -> (tokio::task::JoinHandle<Result<Value, ErrorKind>>, usize) {
    let mut call =
        ToolCall::new("slow", json!({"steps": 40, "delay_ms": 50})).meta(meta::TAG, json!(tag));
    if keyed {
        call = call.random_idempotency_key();
    }
    let c = client.clone();
    let task = tokio::spawn(async move {
        c.call_tool(call)
            .await
            .map(|r| r.structured_content.unwrap_or(Value::Null))
            .map_err(|e| e.kind())
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(e) = oracle(cluster).await.executions_tagged(tag).next() {
            return (task, e.instance);
        }
        assert!(Instant::now() < deadline, "{tag} never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_process_killed_mid_call() {
    for preset in [Preset::Replicated, Preset::Strict] {
        let mut cluster = real_cluster(preset, None).await;
        let cfg = workload_config();
        let client = build_client(ClientKind::ResumeAware, &cluster.url(), &cfg);
        let collector = collect_events(&client);
        client.connect().await.expect("connects");
        for keyed in [true, false] {
            let tag = format!("{preset}/killed-{keyed}");
            let (task, instance) = start_and_locate(&cluster, &client, &tag, keyed).await;
            assert!(cluster.kill_instance(instance).await);
            let outcome = tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("the call ends")
                .unwrap();
            // The instance may have applied the effect: never success, never run twice.
            let kind = outcome.expect_err("a call killed with its instance cannot succeed");
            // Keyed: re-sent with its key, which the store holds as "outcome unknown" for
            // good; unkeyed: not re-sent at all.
            assert_eq!(kind, ErrorKind::OutcomeUnknown, "{tag}");
            cluster.restart_instance(instance).await.unwrap();
            let report = oracle(&cluster).await;
            assert_eq!(report.executions_tagged(&tag).count(), 1, "{tag}");
        }
        // The client goes on, under the context it negotiated.
        for n in 0..4 {
            let r = client
                .call_tool(
                    ToolCall::new("generate", json!({"prompt": "after"}))
                        .meta(meta::TAG, json!(format!("{preset}/after-{n}"))),
                )
                .await
                .unwrap_or_else(|e| panic!("{preset}: {e}\n{}", cluster.instance_logs()));
            assert_eq!(r.structured_content.unwrap()["temperature"], 0.2);
        }
        let events = finish(client, collector).await;
        let report = oracle(&cluster).await;
        assert_eq!(report.totals.wrong_capability, 0, "{preset}: {events:?}");
        assert_eq!(report.totals.duplicate_side_effects, 0, "{preset}");
        cluster.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_mid_run_fails_loudly_and_nothing_is_silently_wrong() {
    // Not `naive`: its sessions cannot be served correctly even with Redis up (the client
    // gives them up), so there is nothing to recover to.
    for preset in [Preset::Strict, Preset::Replicated] {
        let mut cluster = real_cluster(preset, None).await;
        let cfg = WorkloadConfig {
            call_timeout: Duration::from_secs(2),
            ..workload_config()
        };
        let kind = ClientKind::ResumeAware;
        let client = build_client(kind, &cluster.url(), &cfg);
        let collector = collect_events(&client);
        client.connect().await.expect("connects");
        let mut agent = Agent::new(&client, preset, kind);
        for n in 0..3 {
            agent.call("counter_increment", json!({}), n % 2 == 0).await;
        }
        let before = agent.calls().len();
        cluster.redis_mut().kill();
        for n in 0..3 {
            agent
                .call("generate", json!({"prompt": format!("down {n}")}), false)
                .await;
            agent.call("counter_increment", json!({}), true).await;
        }
        let during = agent.calls().len();
        cluster.redis_mut().start_again().await.unwrap();
        // Back: the client gets answers again (a session may have to be re-initialized on
        // `naive`, whose sessions live in the instances).
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let ok = agent
                .call("generate", json!({"prompt": "back"}), false)
                .await
                .is_some();
            if ok {
                break;
            }
            assert!(Instant::now() < deadline, "{preset}: never recovered");
        }
        agent.call("counter_increment", json!({}), true).await;
        let calls = agent.into_calls();
        let events = finish(client, collector).await;
        assert!(cluster.wait_idle(Duration::from_secs(5)).await);
        let report = RunReport {
            preset,
            client: kind,
            connect: Ok(()),
            calls,
            events,
            oracle: oracle(&cluster).await,
            // Asserted above.
            settled: true,
            seconds: 0.0,
        };
        // While Redis was down, no call succeeded: every one failed with an explicit error.
        for c in &report.calls[before..during] {
            assert!(
                c.outcome.is_err(),
                "{preset}: {} answered while Redis was down",
                c.tag
            );
            assert_eq!(
                report.oracle.executions_tagged(&c.tag).count(),
                0,
                "{preset}: {} ran unrecorded",
                c.tag
            );
        }
        let wrong = silent_wrong_calls(&report);
        assert!(wrong.is_empty(), "{preset}: {wrong:?}");
        assert_eq!(row(&report).duplicate_keyed, 0, "{preset}");
        cluster.shutdown().await;
    }
}

/// The same workload, three setups: the in-process cluster (in-memory store, its own balancer
/// cutting idle streams), the in-process cluster on Redis, and the real parts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "prints docs/mock-cluster.md's comparison; run with --ignored --nocapture"]
async fn comparison_table() {
    let cfg = workload_config();
    let in_process = |preset: Preset, store: Option<Arc<dyn mock_server::Store>>| ClusterConfig {
        preset,
        instances: cfg.instances,
        extension: true,
        idle_timeout: Some(Duration::from_millis(IDLE_MS)),
        cut_after_events: None,
        cut_style: CutStyle::Abort,
        store,
        ..ClusterConfig::default()
    };
    let redis = RedisServer::start().await.expect("redis-server");
    let mut memory: Vec<RunReport> = Vec::new();
    let mut on_redis: Vec<RunReport> = Vec::new();
    let mut real: Vec<RunReport> = Vec::new();
    for preset in Preset::ALL {
        for kind in ClientKind::ALL {
            memory.push(run_one_on(in_process(preset, None), kind, &cfg).await);
            let store = RedisStore::connect_with(
                &redis.url(),
                RedisOptions {
                    namespace: format!("cmp-{}:", uuid::Uuid::new_v4().simple()),
                    ..RedisOptions::default()
                },
            )
            .await
            .unwrap();
            on_redis.push(run_one_on(in_process(preset, Some(Arc::new(store))), kind, &cfg).await);
            real.push(run_real(preset, None, kind, &cfg).await);
        }
    }
    for (title, reports) in [
        (
            format!("in process, in-memory store, its balancer cutting streams idle {IDLE_MS} ms:"),
            &memory,
        ),
        ("in process, Redis store:".to_owned(), &on_redis),
        (
            format!("nginx (idle {IDLE_MS} ms) + 3 instance processes + redis-server:"),
            &real,
        ),
    ] {
        let rows: Vec<Row> = reports.iter().map(row).collect();
        println!("{title}");
        print!("{}", render_table(&rows));
        println!("{}\n", latencies(reports));
    }
}

/// Median and 90th percentile of the calls other than `slow` that succeeded, over all runs.
fn latencies(reports: &[RunReport]) -> String {
    let mut ms: Vec<f64> = reports
        .iter()
        .flat_map(|r| &r.calls)
        .filter(|c| c.tool != "slow" && c.outcome.is_ok())
        .map(|c| c.elapsed.as_secs_f64() * 1000.0)
        .collect();
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    format!(
        "successful calls other than slow: {}, median {:.2} ms, p90 {:.2} ms",
        ms.len(),
        at(0.5),
        at(0.9)
    )
}
