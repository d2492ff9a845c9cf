//! The neutral server: the least an MCP endpoint can answer, byte for byte the same for every
//! client, run in a child process so that `getrusage(RUSAGE_SELF)` in the parent sees the
//! client's CPU only.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};

use axum::body::Bytes;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::serve::ListenerExt;
use axum::Router;
use serde::Deserialize;
use serde_json::Value;

/// The environment variable that turns the bench binary into the server.
pub(crate) const SERVER_ENV: &str = "NEUTRAL_SERVER";

pub(crate) const SESSION_ID: &str = "neutral-session-0123456789abcdef";

/// The `text` the echo tool answers; every client checks it.
pub(crate) const ECHO_TEXT: &str = "hi";

/// How `tools/call` is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Json,
    Sse,
}

impl Mode {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Json => "json",
            Mode::Sse => "sse",
        }
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            Mode::Json => "JSON",
            Mode::Sse => "SSE",
        }
    }
}

/// A server child process; it exits when its stdin closes, so a bench that dies leaves none
/// behind.
pub(crate) struct NeutralServer {
    child: Child,
    pub url: String,
}

impl NeutralServer {
    pub(crate) fn spawn(mode: Mode) -> NeutralServer {
        let exe = std::env::current_exe().expect("the bench binary's path");
        let mut child = Command::new(exe)
            .env(SERVER_ENV, mode.name())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the neutral server starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped stdout"))
            .read_line(&mut line)
            .expect("the server prints its port");
        let port: u16 = line.trim().parse().expect("a port number");
        NeutralServer {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }
}

impl Drop for NeutralServer {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

#[derive(Deserialize)]
struct Incoming<'a> {
    #[serde(borrow)]
    method: Option<&'a str>,
    id: Option<Value>,
}

/// Runs the server in this process (the child) until stdin closes.
pub(crate) fn serve(mode: &str) -> ! {
    let mode = match mode {
        "json" => Mode::Json,
        "sse" => Mode::Sse,
        other => panic!("{SERVER_ENV}={other}: expected json or sse"),
    };
    // Two workers, like the client's runtime: with one, the server alone could cap the
    // throughput of 64 callers and hide the differences between clients.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        println!("{}", listener.local_addr().expect("addr").port());
        std::thread::spawn(|| {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
            std::process::exit(0);
        });
        let app = Router::new().route(
            "/mcp",
            post(move |headers: HeaderMap, body: Bytes| answer(mode, headers, body))
                .get(|| async { StatusCode::METHOD_NOT_ALLOWED })
                .delete(|| async { StatusCode::OK }),
        );
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        axum::serve(listener, app).await.expect("serve");
    });
    std::process::exit(0)
}

async fn answer(mode: Mode, headers: HeaderMap, body: Bytes) -> Response {
    let Ok(msg) = serde_json::from_slice::<Incoming<'_>>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let (Some(method), Some(id)) = (msg.method, msg.id) else {
        // A notification or a response.
        return StatusCode::ACCEPTED.into_response();
    };
    let id = serde_json::to_string(&id).expect("an id serializes");
    if method == "initialize" {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"protocolVersion":"2025-11-25","capabilities":{{"tools":{{}}}},"serverInfo":{{"name":"neutral","version":"1.0.0"}}}}}}"#
        );
        let mut r = json(body);
        r.headers_mut()
            .insert("mcp-session-id", HeaderValue::from_static(SESSION_ID));
        return r;
    }
    if headers.get("mcp-session-id").map(|v| v.as_bytes()) != Some(SESSION_ID.as_bytes()) {
        return StatusCode::NOT_FOUND.into_response();
    }
    match method {
        "tools/call" => {
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"{ECHO_TEXT}"}}],"isError":false}}}}"#
            );
            match mode {
                Mode::Json => json(body),
                Mode::Sse => {
                    let event = format!("event: message\ndata: {body}\n\n");
                    let mut r = event.into_response();
                    r.headers_mut().insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("text/event-stream"),
                    );
                    r
                }
            }
        }
        "ping" => json(format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#)),
        _ => json(format!(
            r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32601,"message":"Method not found"}}}}"#
        )),
    }
}

fn json(body: String) -> Response {
    let mut r = body.into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}
