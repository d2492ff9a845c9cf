//! The cluster on real parts, over raw HTTP: `redis-server`, instance processes
//! (`mock-cluster --instance-only`) and nginx, each started by the test on free 127.0.0.1
//! ports. These tests fail (they do not skip) when redis-server or nginx is missing.

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{Mcp, KEY, TAG};
use mock_server::procs::{ProcessCluster, ProcessClusterConfig, TempDir};
use mock_server::{OracleReport, Preset};
use serde_json::json;

const BIN: &str = env!("CARGO_BIN_EXE_mock-cluster");

async fn cluster(
    preset: Preset,
    idle_ms: u64,
    tweak: impl FnOnce(&mut ProcessClusterConfig),
) -> ProcessCluster {
    let mut config = ProcessClusterConfig::new(BIN.into(), preset);
    config.idle_timeout = Duration::from_millis(idle_ms);
    tweak(&mut config);
    ProcessCluster::start(config)
        .await
        .unwrap_or_else(|e| panic!("the real-parts cluster did not start: {e}"))
}

async fn oracle(c: &ProcessCluster) -> OracleReport {
    c.oracle().await.expect("the journal reads back")
}

#[test]
fn nginx_config_subcommand_prints_a_config_nginx_accepts() {
    let dir = TempDir::new("nginx-config-test").unwrap();
    for affinity in [false, true] {
        let mut args = vec![
            "nginx-config",
            "--upstream",
            "127.0.0.1:9101",
            "--upstream",
            "127.0.0.1:9102",
            "--upstream",
            "127.0.0.1:9103",
            "--listen",
            "127.0.0.1:9100",
            "--idle-timeout-ms",
            "250",
            "--prefix",
        ];
        let prefix = dir.path().to_str().unwrap().to_owned();
        args.push(&prefix);
        if affinity {
            args.push("--affinity");
        }
        let out = Command::new(BIN).args(&args).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        let conf = String::from_utf8(out.stdout).unwrap();
        for line in [
            "server 127.0.0.1:9101",
            "server 127.0.0.1:9103",
            "proxy_buffering off;",
            "proxy_http_version 1.1;",
            "proxy_set_header Connection \"\";",
            "keepalive 32;",
            "proxy_read_timeout 250ms;",
            "listen 127.0.0.1:9100;",
        ] {
            assert!(conf.contains(line), "missing {line:?}:\n{conf}");
        }
        assert_eq!(
            conf.contains("hash $http_mcp_session_id consistent;"),
            affinity
        );
        // nginx itself accepts it (`nginx -t` parses and checks, binds nothing).
        let nginx = mock_server::procs::find_program("nginx")
            .expect("nginx is needed by the real-parts tests: apt-get install nginx");
        let file = dir.path().join("nginx.conf");
        std::fs::write(&file, &conf).unwrap();
        let t = Command::new(nginx)
            .arg("-t")
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&file)
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .output()
            .unwrap();
        assert!(
            t.status.success(),
            "nginx -t refused it: {}",
            String::from_utf8_lossy(&t.stderr)
        );
    }
}

/// How many times a scenario is run again when nginx sent its resume back to the stream's
/// owner, which shows nothing of a cross-instance resume. Round-robin over three instances
/// with one worker sends it elsewhere nearly always.
const OWNER_RETRIES: usize = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_cuts_an_idle_stream_and_the_resume_follows_the_preset() {
    for preset in [Preset::Naive, Preset::Strict, Preset::Replicated] {
        let c = cluster(preset, 200, |_| {}).await;
        let mcp = Mcp::new(c.url());
        let mut tries = 0;
        let (hash, attempt, resumed) = loop {
            tries += 1;
            let tag = format!("slow-{tries}");
            let (sid, hash, _) = mcp.initialize(Some(0.2)).await;
            mcp.notify_initialized(&sid).await;
            // Steps 300 ms apart: nginx's 200 ms idle timeout cuts the stream after the
            // priming event.
            let cut = mcp
                .call(&sid, 7, "slow", json!({"steps": 2, "delay_ms": 300}), &tag)
                .await;
            assert_eq!(cut.status, 200, "{preset}");
            assert!(
                cut.cut,
                "{preset}: nginx should abort the idle stream: {cut:?}"
            );
            assert!(cut.response().is_none(), "{preset}");
            let cursor = cut.last_event_id().expect("the priming event");
            let owner = oracle(&c)
                .await
                .executions_tagged(&tag)
                .next()
                .expect("the call ran")
                .instance;
            // Resume through nginx: round-robin sends it to whichever instance is next.
            let resumed = mcp.get(&sid, Some(&cursor)).await;
            let report = oracle(&c).await;
            let attempt = report
                .resumes
                .last()
                .expect("a resume reached an instance")
                .clone();
            assert_eq!(attempt.owner, Some(owner), "{preset}");
            assert!(
                c.wait_idle(Duration::from_secs(5)).await,
                "{preset}: calls still running"
            );
            if attempt.instance != owner || tries == OWNER_RETRIES {
                break (hash, attempt, resumed);
            }
        };
        assert!(
            attempt.cross_instance,
            "{preset}: every resume of {tries} went back to the stream's owner: {attempt:?}"
        );
        match preset {
            Preset::Strict => {
                assert_eq!(resumed.status, 404, "{preset}");
                assert_eq!(
                    resumed.header("mcp-resume-rejected").as_deref(),
                    Some("not_owner")
                );
                assert!(!attempt.honored, "{preset}: {attempt:?}");
            }
            Preset::Naive => {
                // The observed system: replays what the log holds and ends cleanly without
                // the response.
                assert_eq!(resumed.status, 200, "{preset}");
                assert!(!resumed.cut, "{preset}");
                assert!(resumed.response().is_none(), "{preset}");
                assert!(attempt.honored, "{preset}: {attempt:?}");
            }
            _ => {
                // Any instance of `replicated`: the shared log is followed live (XREAD BLOCK)
                // until the response, and nginx cuts again in between when a step takes
                // longer than its idle timeout.
                assert_eq!(resumed.status, 200, "{preset}");
                assert_eq!(resumed.header("mcp-capability-hash"), hash, "{preset}");
                assert!(attempt.honored, "{preset}: {attempt:?}");
            }
        }
        c.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicated_resume_on_another_process_follows_the_live_call_to_its_response() {
    let c = cluster(Preset::Replicated, 1_000, |_| {}).await;
    let mcp = Mcp::new(c.url());
    let (sid, _, _) = mcp.initialize(Some(0.2)).await;
    // Drive the call on instance 0 directly; read its first event, then resume on instance
    // 1 while the call still runs there.
    let direct = Mcp::new(c.instance_url(0).unwrap());
    let call = direct
        .http
        .post(&direct.url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-session-id", &sid)
        .header("mcp-protocol-version", common::VERSION)
        .body(
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "slow", "arguments": {"steps": 4, "delay_ms": 100},
                       "_meta": {TAG: "live-1"}}})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    let mut call = call;
    let first = tokio::time::timeout(Duration::from_secs(5), call.chunk())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let first = common::parse_sse(&String::from_utf8_lossy(&first));
    let cursor = first[0].id.clone().expect("priming id");
    drop(call);
    let other = Mcp::new(c.instance_url(1).unwrap());
    let resumed = other.get(&sid, Some(&cursor)).await;
    assert_eq!(resumed.status, 200);
    // Followed to the end: that a waiting reader is woken by an append rather than by its
    // poll period is the store's test (`wait_events_wakes_on_append_and_finish`).
    let response = resumed.response().expect("the response, followed live");
    assert_eq!(common::result_text(&response), "slow: done after 4 steps");
    let report = oracle(&c).await;
    assert_eq!(report.totals.cross_instance_resumes, 1);
    assert_eq!(report.totals.executions, 1);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_instance_process_leaves_its_keyed_call_outcome_unknown_for_good() {
    // Announced (the harness releases it in the store, as an orchestrator would) and silent
    // (only the lease says the process is gone).
    for announced in [true, false] {
        let mut c = cluster(Preset::Replicated, 5_000, |cfg| {
            cfg.lease = Duration::from_millis(400);
        })
        .await;
        let mcp = Mcp::new(c.url());
        let (sid, _, _) = mcp.initialize(Some(0.2)).await;
        let direct = Mcp::new(c.instance_url(2).unwrap());
        let key = format!("k-{announced}");
        let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
            "params": {"name": "slow", "arguments": {"steps": 50, "delay_ms": 100},
                       "_meta": {TAG: "doomed", KEY: key}}});
        let req = direct
            .http
            .post(&direct.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-session-id", &sid)
            .header("mcp-protocol-version", common::VERSION)
            .body(body.to_string())
            .send();
        let mut resp = tokio::time::timeout(Duration::from_secs(5), req)
            .await
            .unwrap()
            .unwrap();
        // The call runs (its key claimed) once its first step is here; the priming event
        // comes before the claim.
        let mut seen = String::new();
        while !seen.contains("step 1 of") {
            let chunk = tokio::time::timeout(Duration::from_secs(5), resp.chunk())
                .await
                .unwrap()
                .unwrap()
                .expect("the stream goes on");
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
        if announced {
            assert!(c.kill_instance(2).await);
        } else {
            assert!(c.kill_instance_silently(2));
        }
        // The client's connection dies with the process.
        let rest = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                match resp.chunk().await {
                    Ok(Some(_)) => continue,
                    other => break other.is_err(),
                }
            }
        })
        .await
        .unwrap();
        assert!(rest, "the stream should break, not end cleanly");
        // The same call re-sent with the same key, through nginx (which skips the dead
        // instance): never run again.
        let deadline = Instant::now() + Duration::from_secs(5);
        let (code, again) = loop {
            let again = mcp
                .call_keyed(
                    &sid,
                    6,
                    "slow",
                    json!({"steps": 50, "delay_ms": 100}),
                    "doomed-again",
                    &key,
                )
                .await;
            let code = again.data_code();
            match code.as_deref() {
                // Silent death: the key is in use until the lease lapses.
                Some("IDEMPOTENCY_KEY_IN_USE") if !announced && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                _ => break (code, again),
            }
        };
        assert_eq!(
            code.as_deref(),
            Some("IDEMPOTENCY_OUTCOME_UNKNOWN"),
            "announced {announced}: {again:?}\n{}",
            c.nginx().access_log()
        );
        let again = mcp
            .call_keyed(
                &sid,
                7,
                "slow",
                json!({"steps": 50, "delay_ms": 100}),
                "doomed-again",
                &key,
            )
            .await;
        assert_eq!(
            again.data_code().as_deref(),
            Some("IDEMPOTENCY_OUTCOME_UNKNOWN")
        );
        let report = oracle(&c).await;
        assert_eq!(report.executions_tagged("doomed").count(), 1);
        assert_eq!(report.executions_tagged("doomed-again").count(), 0);
        // The restarted process starts empty and serves.
        c.restart_instance(2).await.unwrap();
        let back = Mcp::new(c.instance_url(2).unwrap());
        let r = back
            .call(&sid, 8, "echo", json!({"text": "back"}), "echo-back")
            .await;
        assert_eq!(common::result_text(&r.response().unwrap()), "back");
        c.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_mid_run_instances_fail_loudly_then_serve_the_same_session() {
    let mut c = cluster(Preset::Strict, 5_000, |_| {}).await;
    let mcp = Mcp::new(c.url());
    let (sid, _, _) = mcp.initialize(Some(0.2)).await;
    let ok = mcp
        .call_keyed(&sid, 1, "counter_increment", json!({}), "inc-1", "key-1")
        .await;
    assert_eq!(
        ok.response()
            .unwrap()
            .pointer("/result/structuredContent/value"),
        Some(&json!(1))
    );
    c.redis_mut().kill();
    // Down: every request that needs the store is an explicit error, none hangs, none is
    // a made-up answer.
    for n in 0..3 {
        let started = Instant::now();
        let r = mcp
            .call(
                &sid,
                10 + n,
                "generate",
                json!({"prompt": "x"}),
                &format!("gen-down-{n}"),
            )
            .await;
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        let failed = r.status >= 500 || r.response().is_some_and(|v| v.get("error").is_some());
        assert!(failed, "answered while the store was down: {r:?}");
    }
    c.redis_mut().start_again().await.unwrap();
    // Back: the session and the key survived (append-only file), the connections recover.
    let deadline = Instant::now() + Duration::from_secs(10);
    let replay = loop {
        let r = mcp
            .call_keyed(&sid, 20, "counter_increment", json!({}), "inc-1", "key-1")
            .await;
        if r.status == 200 && r.response().is_some_and(|v| v.get("result").is_some()) {
            break r;
        }
        assert!(
            Instant::now() < deadline,
            "never recovered: {r:?}\n{}",
            c.instance_logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // The keyed call's stored result, not a second increment.
    assert_eq!(
        replay
            .response()
            .unwrap()
            .pointer("/result/structuredContent/value"),
        Some(&json!(1))
    );
    let r = mcp
        .call(&sid, 21, "generate", json!({"prompt": "y"}), "gen-after")
        .await;
    let v = r.response().unwrap();
    assert_eq!(
        v.pointer("/result/structuredContent/temperature"),
        Some(&json!(0.2))
    );
    let report = oracle(&c).await;
    assert_eq!(report.executions_tagged("inc-1").count(), 1);
    assert_eq!(report.totals.wrong_capability, 0);
    assert_eq!(
        report
            .executions
            .iter()
            .filter(|e| e.tag.as_deref().is_some_and(|t| t.starts_with("gen-down")))
            .count(),
        0
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_runs_the_whole_cluster_on_redis() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let redis = mock_server::procs::RedisServer::start()
        .await
        .unwrap_or_else(|e| panic!("this test needs redis-server: {e}"));
    let mut child = Command::new(BIN)
        .args([
            "--preset",
            "replicated",
            "--listen",
            "127.0.0.1:0",
            "--namespace",
            "bin-test:",
            "--store",
            &redis.url(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    });
    let url = tokio::time::timeout(Duration::from_secs(20), line)
        .await
        .expect("URL printed")
        .unwrap()
        .unwrap();
    let mcp = Mcp::new(url.trim());
    let (sid, _, _) = mcp.initialize(Some(0.2)).await;
    let r = mcp
        .call_keyed(&sid, 1, "counter_increment", json!({}), "inc", "k1")
        .await;
    assert_eq!(
        r.response()
            .unwrap()
            .pointer("/result/structuredContent/value"),
        Some(&json!(1))
    );
    // The records are in Redis, under the namespace.
    let store = mock_server::RedisStore::connect_with(
        &redis.url(),
        mock_server::RedisOptions {
            namespace: "bin-test:".into(),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    use mock_server::Store;
    let rec = store
        .get_session(&sid)
        .await
        .unwrap()
        .expect("session in Redis");
    assert_eq!(
        rec.client_capabilities
            .pointer("/experimental/sampling/temperature"),
        Some(&json!(0.2))
    );
    assert_eq!(store.increment_counter("counter").await.unwrap(), 2);
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    let status = tokio::task::spawn_blocking(move || child.wait());
    let status = tokio::time::timeout(Duration::from_secs(20), status)
        .await
        .expect("stops")
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status:?}");
}
