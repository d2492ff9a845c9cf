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
        "--expect-client-capabilities",
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
    for (value, says) in [
        ("{sampling", "not valid JSON"),
        ("[1]", "not a JSON object"),
    ] {
        let bad_caps = Command::new(env!("CARGO_BIN_EXE_mock-cluster"))
            .args(["--expect-client-capabilities", value])
            .output()
            .unwrap();
        assert!(!bad_caps.status.success(), "{value}");
        let stderr = String::from_utf8_lossy(&bad_caps.stderr);
        assert!(
            stderr.contains("--expect-client-capabilities") && stderr.contains(says),
            "{value}: {stderr}"
        );
    }
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

/// A child process killed when dropped: a failed assertion leaves no cluster running.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `--expect-client-capabilities` reaches the oracle, with the balancer and with
/// `--instance-only`: a call in a session negotiated without them is a wrong capability, one
/// in a session negotiated with them (and more) is not.
#[tokio::test]
async fn expected_client_capabilities_reach_the_oracle() {
    let expected = json!({"experimental": {"sampling": {"temperature": 0.2}}});
    for mode in [&[][..], &["--instance-only"][..]] {
        let mut child = Running(
            Command::new(env!("CARGO_BIN_EXE_mock-cluster"))
                .args(["--listen", "127.0.0.1:0", "--json-response"])
                .args(["--preset", "replicated"])
                .args(["--expect-client-capabilities", &expected.to_string()])
                .args(mode)
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let stdout = child.0.stdout.take().unwrap();
        let line = tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            BufReader::new(stdout).read_line(&mut line).map(|_| line)
        });
        let url = tokio::time::timeout(Duration::from_secs(20), line)
            .await
            .expect("URL printed")
            .unwrap()
            .unwrap()
            .trim()
            .to_owned();
        let http = reqwest::Client::new();
        let post = |session: Option<String>, body: serde_json::Value| {
            let mut req = http
                .post(&url)
                .header("accept", "application/json, text/event-stream")
                .header("content-type", "application/json")
                .body(body.to_string());
            if let Some(s) = session {
                req = req.header("mcp-session-id", s);
            }
            req.send()
        };
        let mut more = expected.clone();
        more["roots"] = json!({});
        for (tag, capabilities) in [("bare", json!({})), ("more", more)] {
            let init = post(
                None,
                json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                    "protocolVersion": "2025-06-18", "capabilities": capabilities}}),
            )
            .await
            .unwrap();
            let session = init.headers()["mcp-session-id"]
                .to_str()
                .unwrap()
                .to_owned();
            let call = post(
                Some(session),
                json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                    "name": "echo", "arguments": {"text": tag},
                    "_meta": {"io.github.mcp-resume/tag": tag}}}),
            )
            .await
            .unwrap();
            assert_eq!(call.status(), 200, "{mode:?} {tag}");
        }
        let oracle = http
            .get(url.replace("/mcp", "/admin/oracle"))
            .send()
            .await
            .unwrap();
        let report: serde_json::Value =
            serde_json::from_str(&oracle.text().await.unwrap()).unwrap();
        let flagged = |tag: &str| {
            let e = report["executions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["tag"] == tag)
                .unwrap_or_else(|| panic!("{mode:?}: no execution tagged {tag}: {report}"));
            e["wrong_capability"] == json!(true)
        };
        assert!(flagged("bare"), "{mode:?}: {report}");
        assert!(!flagged("more"), "{mode:?}: {report}");
        assert_eq!(report["totals"]["wrong_capability"], json!(1), "{mode:?}");
    }
}
