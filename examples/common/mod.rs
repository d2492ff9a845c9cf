//! Shared by the examples that need the TypeScript SDK server: starts
//! `tests/interop/ts-server.mjs` (Node.js 20+, after `npm ci` in `tests/interop`) unless a URL
//! is given on the command line.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A server the example talks to: one it started (stopped on drop), or one given by URL.
pub(crate) struct Server {
    pub url: String,
    child: Option<Child>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The URL given as the first argument, or a freshly started TypeScript SDK server.
pub(crate) fn server_from_args() -> Result<Server, String> {
    if let Some(url) = std::env::args().nth(1) {
        return Ok(Server { url, child: None });
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop");
    if !dir.join("node_modules/@modelcontextprotocol/sdk").exists() {
        return Err(format!(
            "no server URL given and the TypeScript SDK is not installed: run `npm ci` in {} \
             (or pass the URL of an MCP server)",
            dir.display()
        ));
    }
    let mut child = Command::new("node")
        .arg("ts-server.mjs")
        .current_dir(&dir)
        .stdin(Stdio::piped()) // the server exits when this closes
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start node: {e}"))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let url = lines
        .next()
        .and_then(Result::ok)
        .filter(|l| l.starts_with("http://"))
        .ok_or("the server did not print its URL")?;
    // The server logs one JSON line per request; the examples do not need them.
    std::thread::spawn(move || lines.map_while(Result::ok).for_each(drop));
    Ok(Server {
        url,
        child: Some(child),
    })
}
