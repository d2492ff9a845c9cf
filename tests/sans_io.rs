//! The protocol core stays sans-IO: no runtime, no HTTP client, no clock reads, no threads,
//! no sockets or files, no entropy, outside its own unit tests. This is what makes every
//! fault schedule testable in virtual time and a binding able to drive the core directly.

use std::path::{Path, PathBuf};

/// What may not appear in `src/proto/` code (comments and `#[cfg(test)]` modules excepted).
const FORBIDDEN: &[&str] = &[
    "tokio",
    "reqwest",
    "Instant::now",
    "SystemTime",
    "std::thread",
    "std::net",
    "std::fs",
    "std::process",
    "std::env",
    "spawn",
    "getrandom",
    "rand::",
    "Uuid::new_v4",
];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src/proto is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn the_protocol_core_has_no_io_clocks_or_spawning() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src")
        .join("proto");
    let mut files = Vec::new();
    sources(&root, &mut files);
    assert!(files.len() > 10, "found only {files:?}");
    let mut violations = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        // Unit tests may use the real clock to build instants; they end each file.
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        for (n, line) in code.lines().enumerate() {
            let code_part = line.split("//").next().unwrap_or("");
            for word in FORBIDDEN {
                if code_part.contains(word) {
                    violations.push(format!("{}:{}: {word}: {line}", file.display(), n + 1));
                }
            }
        }
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}
