//! A raw HTTP client for the wire tests: every byte and header as the server sent them.

use reqwest::header::HeaderMap;
use serde_json::Value;

pub(crate) const LEGACY: &str = "2025-11-25";

pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    pub(crate) body: String,
}

impl Reply {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The JSON-RPC messages of the body (JSON, or the data of SSE events).
    pub(crate) fn messages(&self) -> Vec<Value> {
        if self
            .header("content-type")
            .is_some_and(|c| c.starts_with("text/event-stream"))
        {
            self.events()
                .into_iter()
                .filter_map(|(_, data)| serde_json::from_str(&data).ok())
                .collect()
        } else {
            serde_json::from_str(&self.body).into_iter().collect()
        }
    }

    /// SSE events as (id, data).
    pub(crate) fn events(&self) -> Vec<(Option<String>, String)> {
        let mut out = Vec::new();
        for block in self.body.split("\n\n") {
            let mut id = None;
            let mut data: Option<String> = None;
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id:") {
                    id = Some(v.trim_start().to_owned());
                } else if let Some(v) = line.strip_prefix("data:") {
                    let v = v.strip_prefix(' ').unwrap_or(v);
                    data = Some(match data {
                        Some(d) => format!("{d}\n{v}"),
                        None => v.to_owned(),
                    });
                }
            }
            if id.is_some() || data.is_some() {
                out.push((id, data.unwrap_or_default()));
            }
        }
        out
    }

    /// The response to request `id`.
    pub(crate) fn response(&self, id: i64) -> Option<Value> {
        self.messages()
            .into_iter()
            .find(|m| m["id"] == id && m.get("method").is_none())
    }
}

pub(crate) struct Raw {
    pub(crate) http: reqwest::Client,
    pub(crate) url: String,
    pub(crate) session: Option<String>,
}

impl Raw {
    pub(crate) fn new(url: &str) -> Raw {
        Raw {
            http: reqwest::Client::new(),
            url: url.to_owned(),
            session: None,
        }
    }

    pub(crate) async fn post(&self, body: Value, extra: &[(&str, &str)]) -> Reply {
        let mut req = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_string());
        if let Some(s) = &self.session {
            req = req
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", LEGACY);
        }
        for (k, v) in extra {
            req = req.header(*k, *v);
        }
        read(req.send().await.expect("the server answers")).await
    }

    /// [`Raw::post`] with the body sent in pieces of `piece` bytes (each its own frame).
    pub(crate) async fn post_in_pieces(&self, body: Value, piece: usize) -> Reply {
        let bytes = body.to_string().into_bytes();
        let pieces: Vec<Result<Vec<u8>, std::io::Error>> =
            bytes.chunks(piece).map(|p| Ok(p.to_vec())).collect();
        let mut req = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(reqwest::Body::wrap_stream(futures::stream::iter(pieces)));
        if let Some(s) = &self.session {
            req = req
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", LEGACY);
        }
        read(req.send().await.expect("the server answers")).await
    }

    pub(crate) async fn get(&self, last_event_id: Option<&str>) -> Reply {
        let mut req = self
            .http
            .get(&self.url)
            .header("accept", "text/event-stream");
        if let Some(s) = &self.session {
            req = req
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", LEGACY);
        }
        if let Some(id) = last_event_id {
            req = req.header("last-event-id", id);
        }
        read(req.send().await.expect("the server answers")).await
    }

    /// `initialize` + `notifications/initialized`; keeps the session id.
    pub(crate) async fn initialize(&mut self, capabilities: Value) -> Reply {
        let init = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": LEGACY, "capabilities": capabilities,
            "clientInfo": {"name": "raw", "version": "1"}}});
        let reply = self.post(init, &[]).await;
        self.session = reply.header("mcp-session-id").map(str::to_owned);
        let done = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let ack = self.post(done, &[]).await;
        assert_eq!(ack.status, 202, "{}", ack.body);
        reply
    }

    pub(crate) async fn call(&self, id: i64, tool: &str, args: Value, key: Option<&str>) -> Reply {
        let mut params = serde_json::json!({"name": tool, "arguments": args});
        let mut extra = Vec::new();
        if let Some(k) = key {
            params["_meta"] = serde_json::json!({"io.github.mcp-resume/idempotency-key": k});
            extra.push(("idempotency-key", k));
        }
        let body = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
        self.post(body, &extra).await
    }
}

async fn read(resp: reqwest::Response) -> Reply {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.text().await.unwrap_or_default();
    Reply {
        status,
        headers,
        body,
    }
}
