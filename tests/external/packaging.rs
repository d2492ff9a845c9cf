//! The library packages and builds from its package alone: what `cargo package` publishes
//! (the sources, the README, the licenses) compiles without the workspace's path-only
//! dev-dependencies and without the tests and examples that need them.
//!
//! The package is checked (`cargo check`), not built: compiling it proves that nothing it needs
//! was left out, and a full verify build of the whole dependency tree a second time (with the
//! package's own feature set) costs a minute and most of a gigabyte of disk on a CI machine
//! that has already built the workspace. The check runs in a temporary directory, removed
//! afterwards.

use std::path::{Path, PathBuf};
use std::process::Command;

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()))
}

fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().expect("cargo runs");
    assert!(
        out.status.success(),
        "{what} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Removes a directory when dropped, so a failing check leaves no half-built tree behind.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The `.rs` files under `dir`, as paths relative to `root` with `/` separators.
fn sources(dir: &Path, root: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).expect("a readable source directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, root, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path.strip_prefix(root).expect("under the root");
            let parts: Vec<_> = relative.iter().map(|p| p.to_string_lossy()).collect();
            out.push(parts.join("/"));
        }
    }
}

#[test]
fn the_library_packages_and_builds_from_its_package() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let package_args = ["package", "-p", "mcp-resume", "--allow-dirty", "--offline"];

    let files = run(
        cargo().args(package_args).arg("--list").current_dir(root),
        "cargo package --list",
    );
    // Every source file, whatever feature compiles it, and the documents.
    let mut expected = vec![
        "README.md".to_owned(),
        "LICENSE-MIT".to_owned(),
        "LICENSE-APACHE".to_owned(),
    ];
    sources(&root.join("src"), root, &mut expected);
    assert!(expected.len() > 50, "found only {expected:?}");
    for expected in &expected {
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

    // Outside the workspace: inside it, cargo would take the unpacked crate for a member.
    let scratch = Scratch(
        std::env::temp_dir().join(format!("mcp-resume-package-check-{}", std::process::id())),
    );
    std::fs::create_dir_all(&scratch.0).expect("scratch directory");

    run(
        cargo()
            .args(package_args)
            .arg("--no-verify")
            .arg("--target-dir")
            .arg(&scratch.0)
            .current_dir(root),
        "cargo package",
    );
    let version = env!("CARGO_PKG_VERSION");
    let crate_file = scratch
        .0
        .join("package")
        .join(format!("mcp-resume-{version}.crate"));
    let unpacked = scratch.0.join("unpacked");
    std::fs::create_dir_all(&unpacked).expect("unpack directory");
    run(
        Command::new("tar")
            .arg("xzf")
            .arg(&crate_file)
            .arg("-C")
            .arg(&unpacked),
        "unpacking the .crate",
    );

    // Outside the workspace, with the published manifest only: path dev-dependencies are gone.
    // The `client` feature compiles most of the crate; every file's presence is checked above,
    // and the TLS and OAuth features would add minutes of C compiling (aws-lc) for nothing
    // this check can see.
    run(
        cargo()
            .args(["check", "--offline", "--lib", "--quiet"])
            .args(["--no-default-features", "--features", "client"])
            .arg("--target-dir")
            .arg(scratch.0.join("target"))
            .current_dir(unpacked.join(format!("mcp-resume-{version}"))),
        "cargo check of the packaged crate",
    );
}
