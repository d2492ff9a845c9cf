//! A client process killed mid-call, its calls picked up by the next process from the same
//! Redis ledger (`Client::recover`), against the rmcp replicas behind the guard. The truth is
//! the tool's side-effect counter in Redis: a keyed call's effect exactly once (its re-send
//! under its own key answered by the guard, not run again), an unkeyed one's once and never
//! re-sent (reported as `OutcomeUnknown`), every interrupted call accounted for.
//!
//! The worker and the recovering process are this test binary run again as
//! `restart::ledger_worker` (ignored: only the processes the test spawns run it) with its
//! orders in an environment variable.

use std::io::Write as _;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use mcp_resume::client::ledger::RedisLedger;
use mcp_resume::{Client, Era, Ledger, ToolCall};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::deployment::Deployment;

/// The orders of a worker process.
const WORKER: &str = "MCP_RESUME_LEDGER_WORKER";
/// Long after the effect: the worker is killed while every call is in flight.
const DELAY_MS: u64 = 1500;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Orders {
    /// `work`: make the calls and wait to be killed; `recover`: pick them up and report.
    mode: String,
    url: String,
    redis: String,
    identity: String,
    era: String,
    /// Tags of the calls, each with its key (unkeyed without).
    calls: Vec<(String, Option<String>)>,
}

/// What the recovering process reports of one call.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Report {
    tag: String,
    keyed: bool,
    outcome: Result<String, String>,
}

fn client(orders: &Orders) -> Client {
    let ledger = RedisLedger::new(&orders.redis, &orders.identity).unwrap();
    Client::builder(&orders.url)
        .era(orders.era.parse::<Era>().unwrap())
        .ledger(Arc::new(ledger))
        .open_listen_stream(false)
        .call_timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// This binary as a worker process: the entry point of the processes the tests spawn, not a
/// test of its own (ignored, so that a plain run does not count it; they run it with
/// `--ignored --exact`).
#[test]
#[ignore = "the entry point of the worker processes the tests spawn"]
fn ledger_worker() {
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
        let client = client(&orders);
        match orders.mode.as_str() {
            "work" => {
                client.connect().await.unwrap();
                for (tag, key) in &orders.calls {
                    let mut call = ToolCall::new("bump", json!({"tag": tag, "delay_ms": DELAY_MS}));
                    if let Some(key) = key {
                        call = call.idempotency_key(key.as_str());
                    }
                    let client = client.clone();
                    tokio::spawn(async move { client.call_tool(call).await });
                }
                // Killed while waiting.
                std::future::pending::<()>().await;
            }
            "recover" => {
                let mut out = std::io::stdout().lock();
                for call in client.recover().await.unwrap() {
                    let entry = call.entry().clone();
                    let outcome = call
                        .await
                        .map(|r| r["content"][0]["text"].as_str().unwrap_or("").to_owned())
                        .map_err(|e| e.kind().as_str().to_owned());
                    let tag = entry.arguments().and_then(|a| a["tag"].as_str());
                    let report = Report {
                        tag: tag.unwrap_or_default().to_owned(),
                        keyed: entry.idempotency_key().is_some(),
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

fn spawn(orders: &Orders) -> tokio::process::Child {
    tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "restart::ledger_worker",
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

/// Kills a worker once every call's effect ran and its entry is written, recovers in a new
/// process, and returns its reports.
async fn kill_and_recover(d: &Deployment, orders: Orders) -> Vec<Report> {
    let watch = RedisLedger::new(&orders.redis, &orders.identity).unwrap();
    let mut worker = spawn(&orders);
    for (tag, _) in &orders.calls {
        d.wait_effect(tag).await;
    }
    // Written before each request left: the effects prove the entries are there.
    let held = watch.entries().await.unwrap();
    assert_eq!(held.len(), orders.calls.len(), "{held:?}");
    worker.kill().await.unwrap();
    let status = worker.wait().await.unwrap();
    assert!(!status.success(), "the worker was killed: {status}");

    let recovering = spawn(&Orders {
        mode: "recover".into(),
        ..orders.clone()
    });
    let out = tokio::time::timeout(Duration::from_secs(30), recovering.wait_with_output())
        .await
        .expect("the recovery ends")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "recovery failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let left = watch.entries().await.unwrap();
    assert!(left.is_empty(), "left in the ledger: {left:?}");
    stdout
        .lines()
        .filter_map(|l| l.split_once("RECOVERED ").map(|(_, report)| report))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// In each era, a worker killed with a keyed and an unkeyed `bump` in flight on the guarded
/// replicas; the next process on the same Redis ledger finishes the keyed one under its key
/// (its effect once, its first answer) and reports the unkeyed one as `OutcomeUnknown`
/// without re-sending it (its effect once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_clients_calls_run_once_on_guarded_replicas() {
    let d = Deployment::start(true).await;
    for era in [Era::Legacy, Era::Modern] {
        let keyed = format!("ledger-{era:?}-k");
        let unkeyed = format!("ledger-{era:?}-u");
        let orders = Orders {
            mode: "work".into(),
            url: d.url(),
            redis: d.redis_url().to_owned(),
            identity: format!("worker-{era:?}"),
            era: era.as_str().to_owned(),
            calls: vec![
                (keyed.clone(), Some(format!("key-{keyed}"))),
                (unkeyed.clone(), None),
            ],
        };
        let reports = kill_and_recover(&d, orders).await;
        assert_eq!(reports.len(), 2, "{reports:?}");
        for r in &reports {
            assert_eq!(d.effects(&r.tag).await, 1, "{era:?}: {r:?}");
            if r.tag == keyed {
                assert!(r.keyed);
                assert_eq!(r.outcome, Ok(format!("{keyed}:1")), "{era:?}");
            } else {
                assert_eq!(r.tag, unkeyed);
                assert_eq!(r.outcome, Err("outcome_unknown".into()), "{era:?}");
            }
        }
    }
}
