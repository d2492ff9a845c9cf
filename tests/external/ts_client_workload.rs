//! The official TypeScript SDK client (`@modelcontextprotocol/sdk`, pinned in
//! `mock-server/tests/ts-client/package.json`) through the demo's workload, on every preset:
//! the same cluster configuration, tools, order, tags and client capabilities as
//! `examples/demo/workload.rs`, and the same join of each call with the oracle by tag (the
//! demo's own `row`). Prints the table; asserts what reproduces from run to run.
//!
//! Needs Node.js >= 20 and npm; runs `npm ci` there when `node_modules` is missing.
//! `MCP_RESUME_TS_WORKLOAD_DEBUG=1` also prints what the client reported, call by call, and
//! every HTTP exchange it made.

use crate::workload;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use mcp_resume::ErrorKind;
use mock_server::{Cluster, Preset};
use serde_json::{json, Value};
use workload::{
    client_capabilities, cluster_config, render_table, row, CallRecord, ClientKind, Row, RunReport,
    WorkloadConfig,
};

/// The name of this client in the table.
const CLIENT: &str = "ts-sdk";

fn client_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("mock-server/tests/ts-client")
}

/// Node.js >= 20 and npm present, the pinned packages installed; panics saying what is
/// missing otherwise.
fn ensure_node_client() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        const HELP: &str = "this test runs the official TypeScript MCP SDK client: install \
                            Node.js >= 20 and npm (e.g. `apt-get install nodejs npm`)";
        let version = match Command::new("node").arg("--version").output() {
            Ok(out) if out.status.success() => {
                String::from_utf8_lossy(&out.stdout).trim().to_owned()
            }
            _ => panic!("`node` not found: {HELP}"),
        };
        let major: u32 = version
            .trim_start_matches('v')
            .split('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or(0);
        assert!(major >= 20, "found Node.js {version}: {HELP}");
        let dir = client_dir();
        if !dir.join("node_modules/@modelcontextprotocol/sdk").exists() {
            let status = Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund", "--ignore-scripts"])
                .current_dir(&dir)
                .status()
                .unwrap_or_else(|e| panic!("`npm` not found ({e}): {HELP}"));
            assert!(status.success(), "`npm ci` failed in {}", dir.display());
        }
    });
}

/// One preset's run: the demo's report shape, plus what only this client's wire log shows.
struct TsRun {
    report: RunReport,
    summary: Value,
}

/// `tools/call` tool names as the static strings `CallRecord` holds.
fn tool_name(name: &str) -> &'static str {
    match name {
        "slow" => "slow",
        "generate" => "generate",
        "prepare" => "prepare",
        "commit" => "commit",
        "counter_increment" => "counter_increment",
        other => panic!("the workload calls no tool {other:?}"),
    }
}

/// How the TypeScript client reported a failure, as a table label (no spaces, no `=`).
fn error_label(error: &Value) -> String {
    match error["kind"].as_str() {
        Some("http") => format!("http_{}", error["status"]),
        Some("rpc") => match error["dataCode"].as_str() {
            Some(code) => format!("rpc({}/{code})", error["code"]),
            None => format!("rpc({})", error["code"]),
        },
        Some(kind) => kind.to_owned(),
        None => format!("unreadable:{error}"),
    }
}

async fn run_preset(preset: Preset, cfg: &WorkloadConfig) -> TsRun {
    let started = Instant::now();
    let cluster = Cluster::start(cluster_config(preset, cfg))
        .await
        .expect("the cluster starts on 127.0.0.1");
    let config = json!({
        "url": cluster.url(),
        "tagPrefix": format!("{}/{CLIENT}", preset.as_str()),
        "capabilities": client_capabilities(),
        "slowSteps": cfg.slow_steps,
        "slowDelayMs": cfg.slow_delay_ms,
        "rounds": cfg.rounds,
        "callTimeoutMs": cfg.call_timeout.as_millis() as u64,
    });
    let child = tokio::process::Command::new("node")
        .arg("workload.mjs")
        .arg(config.to_string())
        .current_dir(client_dir())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), child)
        .await
        .expect("the node workload hung")
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{preset}: the node workload failed ({}):\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout
        .lines()
        .last()
        .expect("the workload printed a summary");
    let summary: Value = serde_json::from_str::<Value>(last)
        .unwrap_or_else(|e| panic!("{preset}: summary is not JSON ({e}): {last}"))["summary"]
        .clone();
    // Calls cut off from the client may still be running; their executions count too.
    let settled = cluster.wait_idle(Duration::from_secs(5)).await;
    let oracle = cluster.oracle();
    cluster.shutdown().await;

    let connect = if summary["connect"]["ok"] == json!(true) {
        Ok(())
    } else {
        Err(ErrorKind::Transport)
    };
    let calls = summary["calls"]
        .as_array()
        .expect("`calls` is an array")
        .iter()
        .map(|c| CallRecord {
            tag: c["tag"].as_str().expect("tag").to_owned(),
            tool: tool_name(c["tool"].as_str().expect("tool")),
            keyed: c["keyed"] == json!(true),
            // The kind only feeds the row's `errors` and `outcome_unknown`, which are
            // replaced below by what this client actually reported.
            outcome: if c["ok"] == json!(true) {
                Ok(c["structuredContent"].clone())
            } else {
                Err(ErrorKind::Transport)
            },
            elapsed: Duration::from_secs_f64(c["elapsedMs"].as_f64().unwrap_or(0.0) / 1000.0),
            echoed_tag: c["echoedTag"].as_str().map(str::to_owned),
        })
        .collect();
    TsRun {
        report: RunReport {
            preset,
            // A placeholder for the demo's enum; the row's `client` is replaced below.
            client: ClientKind::StockLike,
            connect,
            calls,
            events: Vec::new(),
            oracle,
            settled,
            seconds: started.elapsed().as_secs_f64(),
        },
        summary,
    }
}

/// The demo's row for this run, with the client-specific columns taken from what the
/// TypeScript client reported: its error labels, and as "resent" the tool calls it POSTed
/// more than once (it never re-sends a call, it only resumes streams).
fn ts_row(run: &TsRun) -> Row {
    let mut r = row(&run.report);
    r.client = CLIENT.to_owned();
    r.errors = BTreeMap::new();
    if let Some(error) = run.summary["connect"].get("error") {
        *r.errors
            .entry(format!("connect:{}", error_label(error)))
            .or_default() += 1;
    }
    for c in run.summary["calls"].as_array().into_iter().flatten() {
        if c["ok"] != json!(true) {
            *r.errors.entry(error_label(&c["error"])).or_default() += 1;
        }
    }
    let mut posted: BTreeMap<&str, u64> = BTreeMap::new();
    for h in http(run) {
        if let Some(tag) = h["tag"].as_str() {
            *posted.entry(tag).or_default() += 1;
        }
    }
    r.resent = posted.values().map(|n| n - 1).sum();
    r
}

fn http(run: &TsRun) -> impl Iterator<Item = &Value> {
    run.summary["http"].as_array().into_iter().flatten()
}

/// What the client did on the wire, beside the table.
fn wire_line(run: &TsRun) -> String {
    let resumes: Vec<String> = http(run)
        .filter(|h| h.get("lastEventId").is_some())
        .map(|h| match h["resumeRejected"].as_str() {
            Some(reason) => format!("{} rejected:{reason}", h["status"]),
            None => h["status"].to_string(),
        })
        .collect();
    let posts_404 = http(run)
        .filter(|h| h["method"] == "POST" && h["status"] == 404)
        .count();
    format!(
        "{:<10} resume GETs: [{}]; POSTs answered 404: {posts_404}; oracle: initializes={} \
         sessions_made_up={} cross_instance_resumes={}",
        run.report.preset.as_str(),
        resumes.join(", "),
        run.report.oracle.totals.initializes,
        run.report.oracle.totals.sessions_made_up,
        run.report.oracle.totals.cross_instance_resumes,
    )
}

/// One line per call: what the client reported beside the oracle's records for its tag.
fn render_ts_calls(run: &TsRun) -> String {
    let mut out = format!("== {} / {CLIENT}\n", run.report.preset);
    for c in run.summary["calls"].as_array().into_iter().flatten() {
        let tag = c["tag"].as_str().unwrap_or_default();
        let outcome = if c["ok"] == json!(true) {
            format!("ok {}", c["structuredContent"])
        } else {
            format!("error {}", error_label(&c["error"]))
        };
        let ran: Vec<String> = run
            .report
            .oracle
            .executions_tagged(tag)
            .map(|e| {
                let flags = [
                    (e.wrong_capability, "WRONG-CAPABILITY"),
                    (e.unknown_record, "UNKNOWN-RECORD"),
                    (e.duplicate_side_effect, "DUPLICATE"),
                ];
                let flags: Vec<&str> = flags.iter().filter(|f| f.0).map(|f| f.1).collect();
                format!("i{}[{}]", e.instance, flags.join(","))
            })
            .collect();
        out.push_str(&format!("{tag:<40} {outcome:<60} ran: {}\n", ran.join(" ")));
    }
    out
}

/// Successful calls whose result echoes another call's tag.
fn misrouted(run: &TsRun) -> Vec<String> {
    run.summary["calls"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["ok"] == json!(true) && c["echoedTag"] != c["tag"])
        .map(|c| format!("{} got {}", c["tag"], c["echoedTag"]))
        .collect()
}

fn oracle_flags(report: &RunReport, tag: &str) -> (bool, bool) {
    report
        .oracle
        .executions_tagged(tag)
        .fold((false, false), |(w, u), e| {
            (w || e.wrong_capability, u || e.unknown_record)
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_typescript_client_through_the_demo_workload() {
    ensure_node_client();
    let cfg = WorkloadConfig::default();
    let mut runs = Vec::new();
    for preset in Preset::ALL {
        runs.push(run_preset(preset, &cfg).await);
    }
    let rows: Vec<Row> = runs.iter().map(ts_row).collect();
    // The demo's table without its footer, which compares the demo's two clients.
    let table = render_table(&rows);
    let table = table.split("\n\n").next().unwrap_or_default();
    eprintln!("official TypeScript SDK client, the demo's workload and cluster:\n\n{table}\n");
    for run in &runs {
        eprintln!("{}", wire_line(run));
        if std::env::var_os("MCP_RESUME_TS_WORKLOAD_DEBUG").is_some() {
            eprintln!("{}\n{:#}", render_ts_calls(run), run.summary);
        }
    }

    for (run, r) in runs.iter().zip(&rows) {
        let preset = run.report.preset;
        let ctx = || format!("{preset}: {r:?}\n{}", wire_line(run));
        assert!(run.report.connect.is_ok(), "{}", ctx());
        // The counts below are final only once the cluster went idle.
        assert!(run.report.settled, "the cluster never went idle: {}", ctx());
        assert!(misrouted(run).is_empty(), "{:?} {}", misrouted(run), ctx());
        // It never re-initializes and never re-sends a call: it only resumes streams.
        assert_eq!(run.report.oracle.totals.initializes, 1, "{}", ctx());
        assert_eq!(r.resent, 0, "{}", ctx());
        assert_eq!(r.duplicate_side_effects, 0, "{}", ctx());
        // The `slow` call's stream was cut and the client tried to resume it.
        assert!(
            http(run).any(|h| h.get("lastEventId").is_some()),
            "{}",
            ctx()
        );
        match preset {
            Preset::Naive => {
                // The incident: success reported, wrong context underneath, no error. (The
                // cut `slow` call itself times out once in a few dozen runs; every other call
                // always reports success.)
                assert!(r.silent_wrong > 0, "{}", ctx());
                assert!(
                    run.report
                        .calls
                        .iter()
                        .all(|c| c.tool == "slow" || c.outcome.is_ok()),
                    "{}",
                    ctx()
                );
                assert!(run.report.oracle.totals.sessions_made_up > 0, "{}", ctx());
                // Wrong answers come from plain round-robin, not only from the resume: calls
                // whose streams were never cut ran under a made-up session too.
                let unresumed_wrong = run
                    .report
                    .calls
                    .iter()
                    .filter(|c| c.tool != "slow" && c.outcome.is_ok())
                    .filter(|c| oracle_flags(&run.report, &c.tag).0)
                    .count();
                assert!(unresumed_wrong > 0, "{}", ctx());
            }
            Preset::Strict => {
                // The resume is rejected and the session forgotten; the client keeps the
                // old session id, so the call and every later one fail.
                assert!(
                    run.report.oracle.totals.rejections.values().sum::<u64>() > 0,
                    "{}",
                    ctx()
                );
                assert_eq!(r.ok, 0, "{}", ctx());
                assert!(
                    r.errors.get("http_404").is_some_and(|n| *n > 0),
                    "{}",
                    ctx()
                );
                assert_eq!(r.silent_wrong, 0, "{}", ctx());
            }
            Preset::Replicated | Preset::Sticky => {
                assert_eq!(r.ok, r.calls, "{}", ctx());
                assert_eq!(r.silent_wrong, 0, "{}", ctx());
                assert_eq!(r.wrong_capability + r.unknown_record, 0, "{}", ctx());
            }
        }
    }
}
