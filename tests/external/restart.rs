//! The one way a fleet restarts, with real processes: a worker process on a Redis ledger is
//! killed (SIGKILL) with calls in flight against the mock cluster (resume-safety extension
//! on), and a new process on the same ledger recovers them. The cluster's oracle is the
//! judge: every keyed side effect ran exactly once, no unkeyed call ran twice, and every
//! interrupted call is accounted for (finished, or reported with its arguments).
//!
//! The worker and the recovering process are this test binary run again
//! (`restart::worker_process`, ignored: only the processes the tests spawn run it, with
//! `MCP_RESUME_WORKER` saying what to do). One `redis-server` serves the whole binary, each
//! test under identities of its own; it dies with the binary.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::future::BoxFuture;
use mcp_resume::client::ledger::{EntryId, RedisLedger};
use mcp_resume::client::models::ElicitResult;
use mcp_resume::proto::CallStage;
use mcp_resume::{Client, Era, ErrorKind, Ledger, LedgerEntry, ToolCall};
use mock_server::context::meta;
use mock_server::{Cluster, ClusterConfig, ClusterEra, Preset};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::workload;

#[path = "../../server/tests/support/redis_cluster.rs"]
// Shared with the guard's tests, which also stop and continue its nodes.
#[allow(dead_code)]
mod redis_cluster;

/// Hang guard for waits: generous, never a stand-in for synchronisation.
async fn guarded<T>(fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), fut)
        .await
        .expect("hang guard: the future did not complete")
}

/// A mock cluster of one instance, for the calls that only make entries.
async fn plain() -> Cluster {
    Cluster::start(ClusterConfig {
        preset: Preset::Strict,
        instances: 1,
        ..ClusterConfig::default()
    })
    .await
    .unwrap()
}

/// Tells a run of this binary to be a worker.
const WORKER: &str = "MCP_RESUME_WORKER";

/// The `redis://` URL of this binary's redis-server, started on first use.
///
/// A thread of its own starts it and lives as long as the process, and the server is told
/// to die with that thread (`PR_SET_PDEATHSIG`): it never outlives the test binary, however
/// that ends.
fn redis_url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let binary = mock_server::procs::find_program("redis-server")
                .expect("the restart tests need redis-server (apt-get install redis-server)");
            let dir = mock_server::procs::TempDir::new("ledger-redis").unwrap();
            let mut last = None;
            for _ in 0..5 {
                let port = mock_server::procs::free_port().unwrap();
                let mut command = Command::new(&binary);
                command
                    .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                    .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                    .arg("--dir")
                    .arg(dir.path())
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                // SAFETY: prctl(2) in the child between fork and exec; it touches no memory.
                unsafe {
                    use std::os::unix::process::CommandExt;
                    command.pre_exec(|| {
                        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                        Ok(())
                    });
                }
                let mut child = command.spawn().expect("redis-server starts");
                if answers_ping(port, &mut child) {
                    tx.send(format!("redis://127.0.0.1:{port}")).unwrap();
                    // Lives as long as the process: the server dies with it.
                    let _keep = (child, dir);
                    loop {
                        std::thread::park();
                    }
                }
                let _ = child.kill();
                let _ = child.wait();
                last = Some(port);
            }
            panic!("redis-server did not start (last port {last:?})");
        });
        rx.recv().expect("redis-server started")
    })
}

/// Whether the redis-server child answers `PING` on `port` within 10 s.
fn answers_ping(port: u16, child: &mut Child) -> bool {
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < end {
        if child.try_wait().ok().flatten().is_some() {
            return false;
        }
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            let mut line = String::new();
            if s.write_all(b"PING\r\n").is_ok()
                && BufReader::new(&s).read_line(&mut line).is_ok()
                && line.starts_with("+PONG")
            {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// What a worker process does.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Orders {
    /// `work`: make `calls` and wait to be killed; `recover`: pick up and report.
    mode: String,
    url: String,
    redis: String,
    identity: String,
    era: String,
    calls: Vec<Order>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Order {
    tool: String,
    arguments: Value,
    tag: String,
    key: Option<String>,
}

/// What the recovering process reports of one call.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Report {
    tag: String,
    stage: String,
    arguments: Value,
    outcome: Result<Value, String>,
}

fn client(orders: &Orders, answer: bool) -> Client {
    let ledger = RedisLedger::new(&orders.redis, &orders.identity).unwrap();
    let era: Era = orders.era.parse().unwrap();
    Client::builder(&orders.url)
        .era(era)
        .client_capabilities(workload::client_capabilities())
        .ledger(Arc::new(ledger))
        .call_timeout(Duration::from_secs(60))
        .jitter_seed(7)
        .on_elicitation(move |_request, _ctx| async move {
            if !answer {
                // The worker never answers: the round waits for it when the process dies.
                std::future::pending::<()>().await;
            }
            Ok(ElicitResult::accept(json!({"confirmed": true})))
        })
        .build()
        .unwrap()
}

/// This binary as a worker process: the entry point of the processes the tests spawn, not a
/// test of its own (ignored, so that a plain run does not count it; they run it with
/// `--ignored --exact`).
#[test]
#[ignore = "the entry point of the worker processes the tests spawn"]
fn worker_process() {
    let Ok(orders) = std::env::var(WORKER) else {
        return;
    };
    let orders: Orders = serde_json::from_str(&orders).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        match orders.mode.as_str() {
            "work" => {
                let client = client(&orders, false);
                client.connect().await.unwrap();
                for order in &orders.calls {
                    let mut call = ToolCall::new(&order.tool, order.arguments.clone())
                        .meta(meta::TAG, json!(order.tag));
                    if let Some(key) = &order.key {
                        call = call.idempotency_key(key.as_str());
                    }
                    let client = client.clone();
                    tokio::spawn(async move { client.call_tool(call).await });
                }
                // Killed while waiting.
                std::future::pending::<()>().await;
            }
            "recover" => {
                let client = client(&orders, true);
                let mut out = std::io::stdout().lock();
                for call in client.recover().await.unwrap() {
                    let entry = call.entry().clone();
                    let outcome = call.await.map_err(|e| e.kind().as_str().to_owned());
                    let report = Report {
                        tag: tag(&entry).to_owned(),
                        stage: entry.stage().as_str().to_owned(),
                        arguments: entry.arguments().cloned().unwrap_or(Value::Null),
                        outcome,
                    };
                    writeln!(out, "RECOVERED {}", serde_json::to_string(&report).unwrap()).unwrap();
                }
                out.flush().unwrap();
                // The ended calls' entries are removed before the process exits.
                let _ = client.close().await;
            }
            other => panic!("unknown mode {other}"),
        }
    });
}

fn tag(entry: &LedgerEntry) -> &str {
    entry
        .params()
        .and_then(|p| p["_meta"][meta::TAG].as_str())
        .unwrap_or_default()
}

/// Starts this binary as a worker with `orders`.
fn spawn(orders: &Orders) -> tokio::process::Child {
    tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "restart::worker_process",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .args(["--test-threads", "1"])
        .env(WORKER, serde_json::to_string(orders).unwrap())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// Waits until `ready` says so of what the ledger holds and what the oracle saw.
async fn until(
    what: &str,
    ledger: &RedisLedger,
    cluster: &Cluster,
    ready: impl Fn(&[LedgerEntry], &mock_server::OracleReport) -> bool,
) {
    let wait = async {
        loop {
            let entries = ledger.entries().await.unwrap();
            if ready(&entries, &cluster.oracle()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(20), wait)
        .await
        .is_err()
    {
        let entries: Vec<(String, String)> = ledger
            .entries()
            .await
            .unwrap()
            .iter()
            .map(|e| (tag(e).to_owned(), e.stage().as_str().to_owned()))
            .collect();
        panic!("{what}: never ready; the ledger holds {entries:?}");
    }
}

fn stage_of<'a>(entries: &'a [LedgerEntry], wanted: &str) -> Option<&'a CallStage> {
    entries.iter().find(|e| tag(e) == wanted).map(|e| e.stage())
}

/// Kills a worker mid-call, recovers in a new process, and returns what it reported.
async fn kill_and_recover(
    cluster: &Cluster,
    orders: Orders,
    in_flight: impl Fn(&[LedgerEntry], &mock_server::OracleReport) -> bool,
) -> Vec<Report> {
    let watch = RedisLedger::new(&orders.redis, &orders.identity).unwrap();
    let mut worker = spawn(&orders);
    until(&orders.identity, &watch, cluster, in_flight).await;
    worker.kill().await.unwrap();
    let status = worker.wait().await.unwrap();
    assert!(!status.success(), "the worker was killed: {status}");
    let recovering = spawn(&Orders {
        mode: "recover".into(),
        ..orders.clone()
    });
    let out = guarded(recovering.wait_with_output()).await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "recovery failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every call ended, and its entry with it.
    let left = watch.entries().await.unwrap();
    assert!(left.is_empty(), "left in the ledger: {left:?}");
    stdout
        .lines()
        // libtest's own words may come first on the line.
        .filter_map(|l| l.split_once("RECOVERED ").map(|(_, report)| report))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn report<'a>(reports: &'a [Report], tag: &str) -> &'a Report {
    reports
        .iter()
        .find(|r| r.tag == tag)
        .unwrap_or_else(|| panic!("{tag} not accounted for: {reports:?}"))
}

/// A legacy-era worker killed with a keyed and an unkeyed side effect in flight (both
/// running on the server); then a 2026-07-28 worker killed with an MRTR round awaiting its
/// input and a task still working. The next process on the same Redis ledger accounts for
/// all four, and the oracle says what really ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_workers_calls_are_accounted_for_by_the_next_process() {
    let redis = redis_url().to_owned();
    let cluster = Cluster::start(ClusterConfig {
        preset: Preset::Strict,
        era: ClusterEra::Dual,
        instances: 3,
        idle_timeout: None,
        // What every worker is configured with: a 2026-07-28 call runs under what its request
        // carried, so without this no execution of the modern worker could be a wrong one.
        expected_client_capabilities: Some(workload::client_capabilities()),
        ..ClusterConfig::default()
    })
    .await
    .unwrap();
    let slow = json!({"steps": 3, "delay_ms": 300});
    let order = |tool: &str, arguments: &Value, tag: &str, key: Option<&str>| Order {
        tool: tool.into(),
        arguments: arguments.clone(),
        tag: tag.into(),
        key: key.map(str::to_owned),
    };
    let run = uuid::Uuid::new_v4().simple().to_string();

    let legacy = Orders {
        mode: "work".into(),
        url: cluster.url(),
        redis: redis.clone(),
        identity: format!("legacy-{run}"),
        era: "legacy".into(),
        calls: vec![
            order("counter_increment", &slow, "keyed", Some("key-keyed")),
            order("counter_increment", &slow, "unkeyed", None),
        ],
    };
    let reports = kill_and_recover(&cluster, legacy, |entries, oracle| {
        // Both side effects happened, and both calls wait for their answers.
        ["keyed", "unkeyed"].iter().all(|t| {
            oracle.executions_tagged(t).count() == 1
                && matches!(stage_of(entries, t), Some(CallStage::Sent { .. }))
        })
    })
    .await;
    assert_eq!(reports.len(), 2, "{reports:?}");
    let keyed = report(&reports, "keyed");
    let value = keyed.outcome.as_ref().expect("the keyed call finished");
    assert!(value["structuredContent"]["value"].is_u64(), "{value}");
    let unkeyed = report(&reports, "unkeyed");
    assert_eq!(unkeyed.outcome, Err("outcome_unknown".to_owned()));
    assert_eq!(unkeyed.arguments, slow, "reported with its arguments");

    let modern = Orders {
        mode: "work".into(),
        url: cluster.url(),
        redis: redis.clone(),
        identity: format!("modern-{run}"),
        era: "modern".into(),
        calls: vec![
            order("confirm", &json!({"question": "ship?"}), "round", None),
            order(
                "batch_job",
                &json!({"steps": 4, "delay_ms": 300}),
                "task",
                None,
            ),
        ],
    };
    let reports = kill_and_recover(&cluster, modern, |entries, oracle| {
        matches!(
            stage_of(entries, "round"),
            Some(CallStage::AwaitingInput { round: 1, .. })
        ) && matches!(stage_of(entries, "task"), Some(CallStage::Task { .. }))
            && oracle.executions_tagged("task").count() == 1
    })
    .await;
    assert_eq!(reports.len(), 2, "{reports:?}");
    let round = report(&reports, "round");
    assert_eq!(round.stage, "awaiting_input");
    let value = round.outcome.as_ref().expect("the round was continued");
    assert_eq!(value["content"][0]["text"], "confirmed: accept", "{value}");
    let task = report(&reports, "task");
    assert_eq!(task.stage, "task");
    let value = task
        .outcome
        .as_ref()
        .expect("the task was polled to its end");
    assert!(
        value["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("done"),
        "{value}"
    );

    assert!(cluster.wait_idle(Duration::from_secs(20)).await);
    let oracle = cluster.oracle();
    for (tag, runs) in [("keyed", 1), ("unkeyed", 1), ("round", 1), ("task", 1)] {
        assert_eq!(oracle.executions_tagged(tag).count(), runs, "{tag}");
    }
    assert_eq!(oracle.totals.duplicate_side_effects, 0);
    assert_eq!(oracle.totals.wrong_capability, 0);
    cluster.shutdown().await;
}

/// Keeps what a client writes, to hand it to the ledger under test.
#[derive(Default)]
struct Capture(std::sync::Mutex<Vec<LedgerEntry>>);

impl Ledger for Capture {
    fn put(&self, entry: LedgerEntry) -> BoxFuture<'_, Result<(), mcp_resume::Error>> {
        self.0.lock().unwrap().push(entry);
        Box::pin(async { Ok(()) })
    }

    fn remove(&self, _: EntryId) -> BoxFuture<'_, Result<(), mcp_resume::Error>> {
        Box::pin(async { Ok(()) })
    }

    fn entries(&self) -> BoxFuture<'_, Result<Vec<LedgerEntry>, mcp_resume::Error>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

/// An entry as a client writes it, for a call of `timeout`.
async fn written(timeout: Duration) -> LedgerEntry {
    let server = plain().await;
    let capture = Arc::new(Capture::default());
    let client = Client::builder(server.url())
        .ledger(capture.clone())
        .build()
        .unwrap();
    let call = ToolCall::new("echo", json!({"text": "hi"}))
        .idempotency_key("k-1")
        .timeout(timeout);
    guarded(client.call_tool(call)).await.unwrap();
    let entry = capture.0.lock().unwrap()[0].clone();
    server.shutdown().await;
    entry
}

/// The Redis ledger itself: entries round-trip and are removed, stay apart per identity,
/// expire with their deadline (a Redis TTL), and a damaged one is skipped, never acted on.
#[tokio::test]
async fn the_redis_ledger_keeps_entries_apart_and_bounded() {
    let redis = redis_url();
    let run = uuid::Uuid::new_v4().simple().to_string();
    let a = RedisLedger::new(redis, &format!("a-{run}")).unwrap();
    let b = RedisLedger::new(redis, &format!("b-{run}")).unwrap();
    let entry = written(Duration::from_secs(30)).await;
    a.put(entry.clone()).await.unwrap();
    let read = a.entries().await.unwrap();
    assert_eq!(read.len(), 1);
    assert_eq!(read[0].to_json(), entry.to_json());
    assert_eq!(read[0].idempotency_key().unwrap().as_str(), "k-1");
    assert!(
        b.entries().await.unwrap().is_empty(),
        "another identity sees nothing"
    );
    a.remove(entry.id().clone()).await.unwrap();
    assert!(a.entries().await.unwrap().is_empty());

    // Bounded: the key carries the deadline as its TTL, and is gone past it.
    let mut conn = redis::Client::open(redis)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let short = written(Duration::from_millis(300)).await;
    a.put(short.clone()).await.unwrap();
    let key = format!("mcp-resume:ledger:{{a-{run}}}:entry:{}", short.id());
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!((1..=300).contains(&ttl), "TTL {ttl} ms");
    let past = short
        .expires_at()
        .duration_since(std::time::SystemTime::now());
    tokio::time::sleep(past.unwrap_or_default() + Duration::from_millis(50)).await;
    assert!(
        a.entries().await.unwrap().is_empty(),
        "expired with its deadline"
    );
    let exists: i64 = redis::cmd("EXISTS")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(exists, 0);

    // Damaged: skipped, the others still read.
    a.put(entry.clone()).await.unwrap();
    let mut damaged = entry.to_json();
    damaged["id"] = json!("damaged-1");
    damaged["params"]["arguments"]["text"] = json!("changed");
    let far = mcp_resume::client::ledger::TASK_RETENTION.as_millis() as u64;
    let _: () = redis::pipe()
        .set(
            format!("mcp-resume:ledger:{{a-{run}}}:entry:damaged-1"),
            damaged.to_string(),
        )
        .zadd(
            format!("mcp-resume:ledger:{{a-{run}}}:index"),
            "damaged-1",
            u64::MAX / 2 - far,
        )
        .query_async(&mut conn)
        .await
        .unwrap();
    let read = a.entries().await.unwrap();
    assert_eq!(read.len(), 1, "{read:?}");
    assert_eq!(read[0].id(), entry.id());

    assert!(RedisLedger::new(redis, "").is_err());
    assert!(RedisLedger::new(redis, "has{brace}").is_err());
    let err = RedisLedger::new("not a url", "w").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
}

/// The Redis ledger on a three-node Redis Cluster, given one node: identities whose keys live
/// on each of the three nodes keep, read and remove their entries (each operation goes to the
/// node that owns the identity's slot), where a ledger on that one node as a plain server is
/// refused by the other two (`MOVED`). And the hand-over over it: a client stopped with its
/// runtime mid-call leaves its keyed call to the next, which gets its one execution's answer.
#[test]
fn the_redis_ledger_works_on_a_cluster() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let redis = runtime.block_on(redis_cluster::RedisCluster::start());
    let urls = redis.urls();
    let first = [urls[0].as_str()];
    let run = uuid::Uuid::new_v4().simple().to_string();
    let server = runtime.block_on(plain());
    runtime.block_on(async {
        // An identity on each node's slots.
        let mut conn = redis::Client::open(first[0])
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let mut identities: [Option<String>; 3] = Default::default();
        for n in 0.. {
            let identity = format!("c{n}-{run}");
            let slot: u16 = redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(format!("mcp-resume:ledger:{{{identity}}}:index"))
                .query_async(&mut conn)
                .await
                .unwrap();
            // The test cluster's slot ranges: 0-5460, 5461-10922, 10923-16383.
            let node = usize::from(slot / 5461).min(2);
            identities[node].get_or_insert(identity);
            if identities.iter().all(Option::is_some) {
                break;
            }
        }
        let entry = written(Duration::from_secs(30)).await;
        for identity in identities.iter().flatten() {
            let ledger = RedisLedger::cluster(&first, identity).unwrap();
            ledger.put(entry.clone()).await.unwrap();
            let read = ledger.entries().await.unwrap();
            assert_eq!(read.len(), 1, "{identity}");
            assert_eq!(read[0].to_json(), entry.to_json());
            ledger.remove(entry.id().clone()).await.unwrap();
            assert!(ledger.entries().await.unwrap().is_empty(), "{identity}");
        }
        let refused = identities.iter().flatten().any(|identity| {
            let plain = RedisLedger::new(first[0], identity).unwrap();
            futures::executor::block_on(plain.put(entry.clone())).is_err()
        });
        assert!(refused, "one node alone does not hold every identity");
        assert!(RedisLedger::cluster(&[], "w").is_err());
        assert!(RedisLedger::cluster(&["not a url"], "w").is_err());
    });

    // The hand-over, on the cluster.
    let identity = format!("handover-{run}");
    let url = server.url();
    let builder = |identity: &str| {
        Client::builder(url.clone())
            .ledger(Arc::new(RedisLedger::cluster(&first, identity).unwrap()))
            .call_timeout(Duration::from_secs(20))
    };
    let stopping = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = builder(&identity).build().unwrap();
    let call = ToolCall::new("counter_increment", json!({"steps": 4, "delay_ms": 150}))
        .meta(meta::TAG, json!("on-cluster"))
        .idempotency_key("key-on-cluster");
    let call = {
        let _on = stopping.enter();
        client.start(call).unwrap()
    };
    stopping.block_on(guarded(async {
        while server.oracle().executions_tagged("on-cluster").count() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }));
    drop(call);
    drop(stopping);
    drop(client);
    runtime.block_on(async {
        let next = builder(&identity).build().unwrap();
        let recovered = guarded(next.recover()).await.unwrap();
        assert_eq!(recovered.len(), 1, "{recovered:?}");
        for call in recovered {
            let value = guarded(call).await.unwrap();
            assert!(value["structuredContent"]["value"].is_u64(), "{value}");
        }
        guarded(next.close()).await.unwrap();
        // Its entry went with it: a client after it finds nothing.
        let after = builder(&identity).build().unwrap();
        assert!(guarded(after.recover()).await.unwrap().is_empty());
        guarded(after.close()).await.unwrap();
        assert_eq!(server.oracle().executions_tagged("on-cluster").count(), 1);
        server.shutdown().await;
    });
}

/// An entry whose round is past the core's last (damage, or a hostile write) is malformed:
/// `recover` never picks it up, so nothing is sent for it, and it is left where it is.
#[tokio::test]
async fn an_entry_past_the_last_round_is_never_picked_up() {
    let redis = redis_url();
    let server = plain().await;
    let identity = format!("rounds-{}", uuid::Uuid::new_v4().simple());
    // A keyed call's entry as a client of this server writes it.
    let capture = Arc::new(Capture::default());
    let writing = Client::builder(server.url())
        .ledger(capture.clone())
        .build()
        .unwrap();
    let call = ToolCall::new("echo", json!({"text": "hi"}))
        .idempotency_key("k-round")
        .meta(meta::TAG, json!("round-max"))
        .timeout(Duration::from_secs(30));
    guarded(writing.call_tool(call)).await.unwrap();
    let entry = capture.0.lock().unwrap()[0].clone();
    let ran = server.oracle().executions_tagged("round-max").count();
    // Its writer is gone: a live client's entries are left to it, whatever their round.
    guarded(writing.close()).await.unwrap();
    drop(writing);

    let mut hostile = entry.to_json();
    hostile["round"] = json!(u32::MAX);
    let key = format!("mcp-resume:ledger:{{{identity}}}:entry:{}", entry.id());
    let expires = entry
        .expires_at()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let mut conn = redis::Client::open(redis)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::pipe()
        .set(&key, hostile.to_string())
        .zadd(
            format!("mcp-resume:ledger:{{{identity}}}:index"),
            entry.id().as_str(),
            expires,
        )
        .query_async(&mut conn)
        .await
        .unwrap();

    let ledger = RedisLedger::new(redis, &identity).unwrap();
    let client = Client::builder(server.url())
        .ledger(Arc::new(ledger))
        .build()
        .unwrap();
    // The call is keyed and its first send finished: sent again, it would be answered from
    // the key's stored outcome, a replay and not an execution.
    let replays = server.oracle().totals.idempotent_replays;
    let recovered = guarded(client.recover()).await.unwrap();
    assert!(recovered.is_empty(), "{recovered:?}");
    // A call of the same client after it: whatever the recovery had taken up goes out with
    // or before it.
    let after = ToolCall::new("echo", json!({"text": "after"})).meta(meta::TAG, json!("after"));
    guarded(client.call_tool(after)).await.unwrap();
    let oracle = server.oracle();
    assert_eq!(
        (
            oracle.executions_tagged("round-max").count(),
            oracle.totals.idempotent_replays
        ),
        (ran, replays),
        "nothing was sent for it"
    );
    let exists: i64 = redis::cmd("EXISTS")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(exists, 1, "left where it is, for whoever looks");
    server.shutdown().await;
}

/// A Redis that is down holds calls back (never sent unrecorded) and fails them saying
/// why; `recover` says the ledger cannot be read.
#[tokio::test]
async fn a_redis_that_is_down_holds_calls_back() {
    let server = plain().await;
    let port = mock_server::procs::free_port().unwrap();
    let down = RedisLedger::new(&format!("redis://127.0.0.1:{port}"), "w").unwrap();
    let client = Client::builder(server.url())
        .ledger(Arc::new(down))
        .reconnect(
            mcp_resume::ReconnectPolicy::default()
                .with_initial_delay(Duration::from_millis(5))
                .with_max_attempts(2),
        )
        .build()
        .unwrap();
    let call = ToolCall::new("echo", json!({"text": "x"})).meta(meta::TAG, json!("never"));
    let err = guarded(client.call_tool(call)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transport, "{err}");
    assert!(format!("{err:#}").contains("ledger"), "{err:#}");
    assert_eq!(server.oracle().executions_tagged("never").count(), 0);
    let err = guarded(client.recover()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Ledger, "{err}");
    server.shutdown().await;
}
