//! The Node.js binding's suite (`bindings/node/test.sh`), run as part of
//! `cargo test --workspace` so that one command runs everything: it builds the N-API addon
//! into this workspace's target directory and runs its `node --test` suite against the mock
//! cluster binary this workspace builds and the TypeScript SDK servers of `tests/interop`
//! and `tests/interop-modern`.
//!
//! It needs Node.js >= 20 and npm, and the npm registry for the pinned packages (installed
//! with `npm ci` when missing); without them it fails and says so.

use crate::interop_support;

use std::path::Path;
use std::process::Command;

/// The last `max` lines of `text`: enough to read a failure without a wall of build output.
fn tail(text: &str, max: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(max)..].join("\n")
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
fn node_binding_suite_passes() {
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

    let out = Command::new("bash")
        .arg(binding.join("test.sh"))
        .output()
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "bindings/node/test.sh failed ({}):\n--- failed tests\n{}\n--- stdout (last lines)\n{}\n\
         --- stderr (last lines)\n{}",
        out.status,
        failures(&stdout),
        tail(&stdout, 40),
        tail(&stderr, 40)
    );
    // The stock-against-bridged table and node's summary, for the test's own output
    // (`--nocapture`).
    for line in stdout.lines() {
        let line = line.trim_start_matches("# ");
        let table = ["preset ", "naive ", "strict ", "replicated ", "sticky "];
        if table.iter().any(|start| line.starts_with(start)) {
            println!("{line}");
        }
    }
    println!("{}", tail(&stdout, 8));
}
