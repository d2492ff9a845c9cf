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

/// The session's modules (`src/proto/session/`) import one another without circles: the data
/// types a module changes live with it, and behaviour sits next to its data. A circle (`calls`
/// needing `tasks` needing `calls`) means a type sits in the wrong module.
#[test]
fn the_session_modules_import_each_other_without_circles() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/proto/session");
    let mut modules: Vec<(String, Vec<String>)> = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("src/proto/session is readable") {
        let path = entry.expect("a directory entry").path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if name == "mod" {
            continue;
        }
        // A module of its own folder: its `mod.rs` names its siblings (its own files' `super::`
        // is the module itself); any of its files may name them by their full path.
        let files: Vec<PathBuf> = if path.is_dir() {
            let mut files = Vec::new();
            sources(&path, &mut files);
            files
        } else {
            vec![path.clone()]
        };
        let mut uses: Vec<String> = Vec::new();
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            let names_siblings = !path.is_dir() || file.file_name().is_some_and(|f| f == "mod.rs");
            let prefixes: &[&str] = if names_siblings {
                &["super::", "crate::proto::session::"]
            } else {
                &["crate::proto::session::"]
            };
            for prefix in prefixes {
                uses.extend(code.match_indices(prefix).filter_map(|(i, _)| {
                    let rest = &code[i + prefix.len()..];
                    let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))?;
                    // `super::Session` (the parent's type) is not a sibling module.
                    let sibling = &rest[..end];
                    (rest[end..].starts_with("::") && sibling != name).then(|| sibling.to_owned())
                }));
            }
        }
        uses.sort();
        uses.dedup();
        modules.push((name, uses));
    }
    assert!(modules.len() > 10, "found only {modules:?}");
    // Depth-first search for a back edge.
    fn visit(
        m: &str,
        modules: &[(String, Vec<String>)],
        path: &mut Vec<String>,
        done: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|p| p == m) {
            let mut circle = path[start..].to_vec();
            circle.push(m.to_owned());
            return Some(circle);
        }
        if done.iter().any(|d| d == m) {
            return None;
        }
        path.push(m.to_owned());
        let uses = modules
            .iter()
            .find(|(n, _)| n == m)
            .map(|(_, u)| u.clone())
            .unwrap_or_default();
        for next in &uses {
            if let Some(circle) = visit(next, modules, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.push(m.to_owned());
        None
    }
    let mut done = Vec::new();
    for (name, _) in &modules {
        if let Some(circle) = visit(name, &modules, &mut Vec::new(), &mut done) {
            panic!("an import circle: {}", circle.join(" -> "));
        }
    }
}
