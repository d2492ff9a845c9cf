//! The official TypeScript SDK client (pinned in `tests/ts-client/package.json`) connects
//! through the balancer, lists the tools and calls each one; the oracle confirms what ran.
//!
//! Needs Node.js ≥ 20 and npm; installs the pinned packages with `npm ci` when
//! `node_modules` is missing. Without Node the test fails and says what to install.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use mock_server::{Cluster, ClusterConfig, Preset};
use serde_json::{json, Value};

fn client_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("ts-client")
}

fn require_node() {
    const HELP: &str =
        "this test runs the official TypeScript MCP SDK: install Node.js >= 20 and npm \
                        (e.g. `apt-get install nodejs npm`)";
    let version = Command::new("node").arg("--version").output();
    let version = match version {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        _ => panic!("`node` not found: {HELP}"),
    };
    let major: u32 = version
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    assert!(major >= 20, "found Node.js {version}: {HELP}");
    let npm = Command::new("npm").arg("--version").output();
    assert!(
        matches!(npm, Ok(ref o) if o.status.success()),
        "`npm` not found: {HELP}"
    );
}

fn install_packages(dir: &Path) {
    if dir
        .join("node_modules")
        .join("@modelcontextprotocol")
        .join("sdk")
        .exists()
    {
        return;
    }
    let status = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--ignore-scripts"])
        .current_dir(dir)
        .status()
        .expect("npm runs");
    assert!(status.success(), "`npm ci` failed in {}", dir.display());
}

async fn run_client(url: &str) -> Value {
    let dir = client_dir();
    let child = tokio::process::Command::new("node")
        .arg("client.mjs")
        .arg(url)
        .current_dir(&dir)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), child)
        .await
        .expect("node client hung")
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "client failed ({}):\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().expect("client printed its summary");
    let v: Value = serde_json::from_str(last).expect("summary is JSON");
    v["summary"].clone()
}

async fn check(config: ClusterConfig) {
    let sse = !config.json_response;
    let cluster = Cluster::start(config).await.unwrap();
    let s = run_client(&cluster.url()).await;

    assert_eq!(s["protocolVersion"], json!("2025-11-25"));
    assert_eq!(s["resumeSafety"]["version"], json!(1));
    assert_eq!(
        s["tools"],
        json!([
            "commit",
            "counter_increment",
            "echo",
            "generate",
            "prepare",
            "slow"
        ])
    );
    assert_eq!(s["echo"], json!("hello"));
    // Results echo the caller's tag; the keyed repeat's stored result carries it too.
    assert_eq!(s["echoTag"], json!("ts-echo"));
    assert_eq!(s["counterTags"], json!(["ts-counter", "ts-counter"]));
    assert_eq!(s["slow"], json!("slow: done after 3 steps"));
    // Progress travels on the call's SSE stream; a JSON answer has nowhere to put it.
    assert_eq!(s["slowProgress"], json!(if sse { 3 } else { 0 }));
    assert_eq!(
        s["generate"],
        json!("a haiku [generated at temperature 0.3]")
    );
    let record = s["record"].as_str().unwrap();
    assert!(record.starts_with("rec-"));
    assert!(s["commit"]
        .as_str()
        .unwrap()
        .starts_with(&format!("committed {record}")));
    assert_eq!(
        s["counter"], s["counterAgain"],
        "the keyed repeat got the stored result"
    );
    assert!(s["counterHash"].as_str().unwrap().starts_with("sha256:"));

    let o = cluster.oracle();
    for tag in [
        "ts-echo",
        "ts-slow",
        "ts-generate",
        "ts-prepare",
        "ts-commit",
        "ts-counter",
    ] {
        assert_eq!(
            o.executions_tagged(tag).count(),
            1,
            "{tag} ran exactly once: {:?}",
            o.executions
        );
    }
    assert_eq!(o.totals.wrong_capability, 0);
    assert_eq!(o.totals.unknown_record, 0);
    assert_eq!(o.totals.duplicate_side_effects, 0);
    assert_eq!(o.totals.idempotent_replays, 1);
    assert!(
        o.totals.requests_per_instance.iter().all(|n| *n > 0),
        "round-robin spread the session: {:?}",
        o.totals.requests_per_instance
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn official_typescript_client_uses_every_tool() {
    require_node();
    install_packages(&client_dir());
    // SSE answers for tool calls (with progress), across three instances.
    check(ClusterConfig {
        preset: Preset::Strict,
        instances: 3,
        ..Default::default()
    })
    .await;
    // JSON answers everywhere, on replicated instances.
    check(ClusterConfig {
        preset: Preset::Replicated,
        instances: 2,
        json_response: true,
        ..Default::default()
    })
    .await;
}
