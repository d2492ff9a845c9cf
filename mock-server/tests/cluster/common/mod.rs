//! Raw-HTTP helpers for the cluster's tests: a tiny MCP caller and SSE reader.
#![allow(dead_code)]

pub mod cluster;
pub mod gated;
pub mod modern;

use std::time::Duration;

use serde_json::{json, Value};

pub const VERSION: &str = "2025-11-25";
pub const TAG: &str = "io.github.mcp-resume/tag";
pub const KEY: &str = "io.github.mcp-resume/idempotency-key";
pub const HASH_META: &str = "io.github.mcp-resume/capability-hash";

/// Hang guard for every network step.
pub const STEP: Duration = Duration::from_secs(10);

/// How long a cancelled or killed call may take to stop. The tests' long calls (1000 steps
/// of 10 ms) would run for 10 s on their own: a wait of [`STEP`] could see them end by
/// themselves, this one only if they were stopped.
pub const STOPS: Duration = Duration::from_secs(2);

/// Sends a POST of `body` in session `sid` to the MCP endpoint `url` over a connection of
/// its own, written by hand and not read: the test decides when the client leaves (drops or
/// shuts the connection), or the connection dies with its instance.
pub async fn post_by_hand(url: &str, sid: &str, body: &str) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let addr = url
        .strip_prefix("http://")
        .and_then(|u| u.strip_suffix("/mcp"))
        .expect("http://addr/mcp");
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nhost: {addr}\r\naccept: application/json, text/event-stream\r\n\
         content-type: application/json\r\nmcp-session-id: {sid}\r\n\
         mcp-protocol-version: {VERSION}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(request.as_bytes()).await.unwrap();
    conn
}

/// One SSE event as a client sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: Option<String>,
    pub data: String,
    pub retry: Option<u64>,
}

impl Event {
    pub fn json(&self) -> Option<Value> {
        if self.data.is_empty() {
            None
        } else {
            serde_json::from_str(&self.data).ok()
        }
    }
}

/// What came back for one HTTP request.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    /// Raw body for non-SSE replies.
    pub body: String,
    /// Events for SSE replies.
    pub events: Vec<Event>,
    /// The body ended with a transport error (the balancer cut it).
    pub cut: bool,
    pub sse: bool,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }

    /// `error.data.code` of its JSON-RPC answer, if any: where the guard's refusals name
    /// themselves (`IDEMPOTENCY_KEY_IN_USE`, `IDEMPOTENCY_OUTCOME_UNKNOWN`, ...).
    pub fn data_code(&self) -> Option<String> {
        self.response()?
            .pointer("/error/data/code")
            .and_then(Value::as_str)
            .map(str::to_owned)
    }

    /// The JSON-RPC response in the reply, JSON or SSE.
    pub fn response(&self) -> Option<Value> {
        if self.sse {
            self.events
                .iter()
                .filter_map(Event::json)
                .find(|v| v.get("id").is_some() && v.get("method").is_none())
        } else {
            Some(self.json())
        }
    }

    pub fn last_event_id(&self) -> Option<String> {
        self.events.iter().rev().find_map(|e| e.id.clone())
    }
}

/// Parses SSE bytes (LF, CRLF or CR line ends).
pub fn parse_sse(text: &str) -> Vec<Event> {
    let mut out = Vec::new();
    let mut id = None;
    let mut data: Option<Vec<String>> = None;
    let mut retry = None;
    let mut has_field = false;
    let normalized = text.replace("\r\n", "\n").replace('\r', "\n");
    for line in normalized.split('\n') {
        if line.is_empty() {
            if has_field && (id.is_some() || data.is_some()) {
                let d = data.take().map(|l| l.join("\n")).unwrap_or_default();
                out.push(Event {
                    id: id.take(),
                    data: d,
                    retry: retry.take(),
                });
            }
            id = None;
            data = None;
            has_field = false;
            continue;
        }
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        has_field = true;
        match field {
            "id" => id = Some(value.to_owned()),
            "data" => data.get_or_insert_with(Vec::new).push(value.to_owned()),
            "retry" => retry = value.parse().ok(),
            _ => {}
        }
    }
    out
}

/// A bare MCP caller over reqwest.
#[derive(Clone)]
pub struct Mcp {
    pub http: reqwest::Client,
    pub url: String,
}

impl Mcp {
    pub fn new(url: impl Into<String>) -> Self {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap();
        Self {
            http,
            url: url.into(),
        }
    }

    pub async fn read(resp: reqwest::Response) -> Reply {
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let sse = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let mut resp = resp;
        let mut bytes = Vec::new();
        let mut cut = false;
        loop {
            match tokio::time::timeout(STEP, resp.chunk())
                .await
                .expect("body stalled")
            {
                Ok(Some(c)) => bytes.extend_from_slice(&c),
                Ok(None) => break,
                Err(_) => {
                    cut = true;
                    break;
                }
            }
        }
        let body = String::from_utf8_lossy(&bytes).into_owned();
        let events = if sse { parse_sse(&body) } else { Vec::new() };
        Reply {
            status,
            headers,
            body,
            events,
            cut,
            sse,
        }
    }

    pub async fn post_raw(&self, session: Option<&str>, body: String) -> Reply {
        let mut req = self
            .http
            .post(&self.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body);
        if let Some(s) = session {
            req = req
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", VERSION);
        }
        let resp = tokio::time::timeout(STEP, req.send())
            .await
            .expect("request hung")
            .expect("request failed");
        Self::read(resp).await
    }

    pub async fn post(&self, session: Option<&str>, body: Value) -> Reply {
        self.post_raw(session, body.to_string()).await
    }

    /// initialize + returns (session id, capability hash, reply).
    pub async fn initialize(&self, temperature: Option<f64>) -> (String, Option<String>, Reply) {
        let caps = match temperature {
            Some(t) => json!({"experimental": {"sampling": {"temperature": t}}}),
            None => json!({}),
        };
        let r = self
            .post(
                None,
                json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": VERSION, "capabilities": caps,
                "clientInfo": {"name": "raw-test", "version": "0"}}}),
            )
            .await;
        assert_eq!(r.status, 200, "initialize failed: {}", r.body);
        let sid = r.header("mcp-session-id").expect("no session id");
        let hash = r.header("mcp-capability-hash");
        (sid, hash, r)
    }

    pub async fn notify_initialized(&self, session: &str) -> Reply {
        self.post(
            Some(session),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        )
        .await
    }

    pub async fn ping(&self, session: &str) -> Reply {
        self.post(
            Some(session),
            json!({"jsonrpc": "2.0", "id": "ping", "method": "ping"}),
        )
        .await
    }

    pub async fn call(&self, session: &str, id: u64, tool: &str, args: Value, tag: &str) -> Reply {
        self.post(
            Some(session),
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                   "params": {"name": tool, "arguments": args, "_meta": {TAG: tag}}}),
        )
        .await
    }

    pub async fn call_keyed(
        &self,
        session: &str,
        id: u64,
        tool: &str,
        args: Value,
        tag: &str,
        key: &str,
    ) -> Reply {
        self.post(
            Some(session),
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                   "params": {"name": tool, "arguments": args, "_meta": {TAG: tag, KEY: key}}}),
        )
        .await
    }

    pub async fn get(&self, session: &str, last_event_id: Option<&str>) -> Reply {
        let mut req = self
            .http
            .get(&self.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", VERSION);
        if let Some(id) = last_event_id {
            req = req.header("last-event-id", id);
        }
        let resp = tokio::time::timeout(STEP, req.send())
            .await
            .expect("request hung")
            .expect("request failed");
        Self::read(resp).await
    }
}

/// The text of a tools/call result.
pub fn result_text(resp: &Value) -> String {
    resp.pointer("/result/content/0/text")
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no text result in {resp}"))
        .to_owned()
}
