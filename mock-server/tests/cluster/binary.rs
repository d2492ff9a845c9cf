//! The `mock-cluster` binary: URL on the first stdout line, serves MCP, stops on SIGINT.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;

#[test]
fn help_documents_every_flag() {
    let out = Command::new(env!("CARGO_BIN_EXE_mock-cluster"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--preset",
        "--era",
        "--instances",
        "--listen",
        "--idle-timeout-ms",
        "--cut-after-events",
        "--seed",
        "--random-cut-probability",
        "--log-loss-probability",
        "--cut-style",
        "--retry-ms",
        "--json-response",
        "--no-extension",
        "--affinity",
        "--max-body-bytes",
        "--allowed-origin",
        "--store",
        "--namespace",
        "--lease-ms",
        "--instance-only",
        "--instance-index",
        "nginx-config",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}:\n{help}");
    }
    let nginx = Command::new(env!("CARGO_BIN_EXE_mock-cluster"))
        .args(["nginx-config", "--help"])
        .output()
        .unwrap();
    let nginx_help = String::from_utf8_lossy(&nginx.stdout);
    for flag in [
        "--upstream",
        "--listen",
        "--prefix",
        "--affinity",
        "--idle-timeout-ms",
    ] {
        assert!(
            nginx_help.contains(flag),
            "nginx-config --help lacks {flag}"
        );
    }
    let bad_store = Command::new(env!("CARGO_BIN_EXE_mock-cluster"))
        .args(["--store", "postgres://x"])
        .output()
        .unwrap();
    assert!(!bad_store.status.success());
    assert!(String::from_utf8_lossy(&bad_store.stderr).contains("--store must be"));
    let bad = Command::new(env!("CARGO_BIN_EXE_mock-cluster"))
        .args(["--preset", "wobbly"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown preset"));
}

#[tokio::test]
async fn prints_url_serves_and_stops_on_sigint() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mock-cluster"))
        .args([
            "--preset",
            "strict",
            "--instances",
            "2",
            "--listen",
            "127.0.0.1:0",
            "--cut-after-events",
            "3",
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
    let url = url.trim().to_owned();
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"),
        "{url}"
    );

    let http = reqwest::Client::new();
    let resp = http
        .post(&url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                   "params": {"protocolVersion": "2025-06-18", "capabilities": {}}})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().get("mcp-session-id").is_some());
    let oracle = http
        .get(url.replace("/mcp", "/admin/oracle"))
        .send()
        .await
        .unwrap();
    let report: serde_json::Value = serde_json::from_str(&oracle.text().await.unwrap()).unwrap();
    assert_eq!(report["totals"]["initializes"], json!(1));

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
    assert!(status.success(), "clean exit on SIGINT: {status:?}");
}
