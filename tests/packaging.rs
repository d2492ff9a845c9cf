//! The library packages and builds from its package alone: what `cargo package` publishes
//! (the sources, the README, the licenses) compiles without the workspace's path-only
//! dev-dependencies and without the tests and examples that need them.

use std::process::Command;

#[test]
fn the_library_packages_and_builds_from_its_package() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .args(["package", "-p", "mcp-resume", "--allow-dirty", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo package failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listing = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()))
        .args([
            "package",
            "-p",
            "mcp-resume",
            "--allow-dirty",
            "--offline",
            "--list",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    let files = String::from_utf8_lossy(&listing.stdout);
    for expected in ["src/lib.rs", "README.md", "LICENSE-MIT", "LICENSE-APACHE"] {
        assert!(
            files.lines().any(|f| f == expected),
            "{expected} not packaged:\n{files}"
        );
    }
    assert!(
        !files
            .lines()
            .any(|f| f.starts_with("tests/") || f.starts_with("mock-server/")),
        "test sources packaged:\n{files}"
    );
}
