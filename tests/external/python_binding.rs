//! The Python binding's suite (`bindings/python/test.sh`), run as part of
//! `cargo test --workspace` so that one command runs everything: it builds the extension into
//! a virtualenv, type-checks the examples and the stubs, and runs pytest against the mock
//! cluster binary this workspace builds.
//!
//! It needs `python3` (>= 3.10) with `venv` and `pip`, and PyPI for the pinned
//! `bindings/python/requirements-dev.txt`; without them it fails and says so.

use std::path::Path;
use std::process::Command;

/// The last `max` lines of `text`: enough to read a failure without a wall of build output.
fn tail(text: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(text);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(max)..].join("\n")
}

#[test]
fn python_binding_suite_passes() {
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

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("bindings/python/test.sh");
    let out = Command::new("bash")
        .arg(&script)
        .output()
        .expect("bash runs");
    let stdout = tail(&out.stdout, 60);
    let stderr = tail(&out.stderr, 60);
    assert!(
        out.status.success(),
        "bindings/python/test.sh failed ({}):\n--- stdout (last lines)\n{stdout}\n--- stderr \
         (last lines)\n{stderr}",
        out.status
    );
    // The summary line pytest ends with, for the test's own output (`--nocapture`).
    println!("{}", tail(&out.stdout, 1));
}
