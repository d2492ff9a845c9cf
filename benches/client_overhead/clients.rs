//! The four clients, each making the same checked `echo` call.

use std::sync::atomic::{AtomicU64, Ordering};

use mcp_resume::ReconnectPolicy;
use reqwest::header::{HeaderValue, ACCEPT, CONTENT_TYPE};
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, JsonObject,
    ProtocolVersion,
};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::ServiceExt;
use serde::Serialize;
use serde_json::{json, Value};

use crate::server::ECHO_TEXT;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A pooled `reqwest::Client` POSTing the JSON-RPC body and parsing the answer: what any
    /// client must at least do.
    Floor,
    /// The default builder with the listen stream off.
    McpResume,
    /// rmcp over a `reqwest::Client` that keeps idle connections (the application's own).
    RmcpPooled,
    /// rmcp as `StreamableHttpClientTransport::from_uri` builds it (no idle connections kept).
    RmcpDefault,
}

pub(crate) const ALL: [Kind; 4] = [
    Kind::Floor,
    Kind::McpResume,
    Kind::RmcpPooled,
    Kind::RmcpDefault,
];

impl Kind {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::Floor => "floor",
            Kind::McpResume => "mcp-resume",
            Kind::RmcpPooled => "rmcp pooled",
            Kind::RmcpDefault => "rmcp default",
        }
    }

    pub(crate) fn column(self) -> usize {
        ALL.iter().position(|k| *k == self).expect("a kind")
    }
}

pub(crate) enum Client {
    Floor(Floor),
    McpResume(mcp_resume::Client),
    Rmcp(RunningService<RoleClient, ClientConfig>),
}

/// The HTTP client the floor and rmcp pooled run on: built as mcp-resume builds its own for
/// a plain-http endpoint (no TLS trust anchors loaded), so the memory rows compare the
/// clients and not which certificates each one loaded.
pub(crate) fn plain_http() -> reqwest::Client {
    reqwest::Client::builder()
        .tls_certs_only([])
        .build()
        .expect("a plain-http reqwest client builds")
}

impl Client {
    /// A connected session: `initialize` answered and `notifications/initialized` sent.
    pub(crate) async fn connect(kind: Kind, url: &str) -> Client {
        match kind {
            Kind::Floor => Client::Floor(Floor::connect(plain_http(), url).await),
            Kind::McpResume => Client::connect_mcp_resume(url, None).await,
            Kind::RmcpPooled => {
                let transport = StreamableHttpClientTransport::with_client(
                    plain_http(),
                    StreamableHttpClientTransportConfig::with_uri(url),
                );
                Client::Rmcp(rmcp_config().serve(transport).await.expect("rmcp connects"))
            }
            Kind::RmcpDefault => {
                let transport = StreamableHttpClientTransport::from_uri(url);
                Client::Rmcp(rmcp_config().serve(transport).await.expect("rmcp connects"))
            }
        }
    }

    /// mcp-resume with the default builder and the listen stream off, and `policy` if given.
    pub(crate) async fn connect_mcp_resume(url: &str, policy: Option<ReconnectPolicy>) -> Client {
        let mut builder = mcp_resume::Client::builder(url).open_listen_stream(false);
        if let Some(policy) = policy {
            builder = builder.reconnect(policy);
        }
        let client = builder.build().expect("a valid configuration");
        client.connect().await.expect("mcp-resume connects");
        Client::McpResume(client)
    }

    /// mcp-resume with the default builder, the listen stream off, and `configure` applied
    /// (a ledger choice, for the ledger rows).
    pub(crate) async fn connect_mcp_resume_with(
        url: &str,
        configure: impl FnOnce(mcp_resume::ClientBuilder) -> mcp_resume::ClientBuilder,
    ) -> Client {
        let builder = configure(mcp_resume::Client::builder(url).open_listen_stream(false));
        let client = builder.build().expect("a valid configuration");
        client.connect().await.expect("mcp-resume connects");
        Client::McpResume(client)
    }

    /// One `tools/call echo`; panics unless the answer is the echoed text.
    pub(crate) async fn echo(&self) {
        let ok = match self {
            Client::Floor(f) => f.echo().await,
            Client::McpResume(c) => {
                let r = c
                    .call_tool(mcp_resume::ToolCall::new(
                        "echo",
                        json!({"text": ECHO_TEXT}),
                    ))
                    .await
                    .expect("mcp-resume echo");
                !r.is_error && r.content.first().and_then(|c| c.as_text()) == Some(ECHO_TEXT)
            }
            Client::Rmcp(s) => {
                let mut args = JsonObject::new();
                args.insert("text".into(), Value::from(ECHO_TEXT));
                let r = s
                    .call_tool(CallToolRequestParams::new("echo").with_arguments(args))
                    .await
                    .expect("rmcp echo");
                r.is_error != Some(true)
                    && r.content
                        .first()
                        .and_then(|c| c.as_text())
                        .map(|t| t.text.as_str())
                        == Some(ECHO_TEXT)
            }
        };
        assert!(ok, "a wrong echo answer");
    }

    /// One `slow` call of one step (its stream is the one the cluster cuts); panics unless
    /// it answers as the tool does.
    pub(crate) async fn slow(&self) {
        let text = match self {
            Client::Floor(_) => panic!("the floor does not resume"),
            Client::McpResume(c) => c
                .call_tool(mcp_resume::ToolCall::new(
                    "slow",
                    json!({"steps": 1, "delay_ms": 0}),
                ))
                .await
                .expect("mcp-resume slow")
                .text(),
            Client::Rmcp(s) => {
                let args = json!({"steps": 1, "delay_ms": 0});
                let Value::Object(args) = args else {
                    unreachable!()
                };
                let r = s
                    .call_tool(CallToolRequestParams::new("slow").with_arguments(args))
                    .await
                    .expect("rmcp slow");
                r.content
                    .first()
                    .and_then(|c| c.as_text())
                    .map(|t| t.text.clone())
                    .unwrap_or_default()
            }
        };
        assert_eq!(text, "slow: done after 1 steps");
    }

    pub(crate) async fn close(self) {
        match self {
            Client::Floor(_) => {}
            Client::McpResume(c) => {
                let _ = c.close().await;
            }
            Client::Rmcp(s) => {
                let _ = s.cancel().await;
            }
        }
    }
}

/// Both rmcp rows offer the protocol version the others speak, so that every client runs the
/// same legacy-era exchange.
fn rmcp_config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::from_build_env(),
    )
    .with_protocol_version(ProtocolVersion::V_2025_11_25)
}

pub(crate) struct Floor {
    http: reqwest::Client,
    url: reqwest::Url,
    session: HeaderValue,
    // Built once: a header value cloned from a static costs no allocation.
    accept: HeaderValue,
    json: HeaderValue,
    protocol: HeaderValue,
    next_id: AtomicU64,
}

fn accept_both() -> HeaderValue {
    HeaderValue::from_static("application/json, text/event-stream")
}

fn json_type() -> HeaderValue {
    HeaderValue::from_static("application/json")
}

fn protocol() -> HeaderValue {
    HeaderValue::from_static("2025-11-25")
}

#[derive(Serialize)]
struct Request<P> {
    jsonrpc: &'static str,
    id: u64,
    method: &'static str,
    params: P,
}

#[derive(Serialize)]
struct EchoParams {
    name: &'static str,
    arguments: EchoArgs,
}

#[derive(Serialize)]
struct EchoArgs {
    text: &'static str,
}

impl Floor {
    pub(crate) async fn connect(http: reqwest::Client, url: &str) -> Floor {
        let url = reqwest::Url::parse(url).expect("a URL");
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "floor", "version": "1.0.0"}}});
        let resp = http
            .post(url.clone())
            .header(ACCEPT, accept_both())
            .header(CONTENT_TYPE, json_type())
            .body(init.to_string())
            .send()
            .await
            .expect("initialize");
        let session = resp.headers()["mcp-session-id"].clone();
        resp.bytes().await.expect("initialize body");
        let resp = http
            .post(url.clone())
            .header(ACCEPT, accept_both())
            .header(CONTENT_TYPE, json_type())
            .header("mcp-session-id", session.clone())
            .header("mcp-protocol-version", protocol())
            .body(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .send()
            .await
            .expect("initialized");
        assert_eq!(resp.status(), 202);
        resp.bytes().await.expect("initialized body");
        Floor {
            http,
            url,
            session,
            accept: accept_both(),
            json: json_type(),
            protocol: protocol(),
            next_id: AtomicU64::new(1),
        }
    }

    async fn echo(&self) -> bool {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let body = serde_json::to_vec(&Request {
            jsonrpc: "2.0",
            id,
            method: "tools/call",
            params: EchoParams {
                name: "echo",
                arguments: EchoArgs { text: ECHO_TEXT },
            },
        })
        .expect("serializes");
        let resp = self
            .http
            .post(self.url.clone())
            .header(ACCEPT, self.accept.clone())
            .header(CONTENT_TYPE, self.json.clone())
            .header("mcp-session-id", self.session.clone())
            .header("mcp-protocol-version", self.protocol.clone())
            .body(body)
            .send()
            .await
            .expect("echo");
        let sse = resp
            .headers()
            .get(CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
        let bytes = resp.bytes().await.expect("echo body");
        let json = if sse { sse_data(&bytes) } else { &bytes[..] };
        let v: Value = serde_json::from_slice(json).expect("a JSON-RPC answer");
        v["id"] == id && v["result"]["content"][0]["text"] == ECHO_TEXT
    }
}

impl Floor {
    /// One `ping`, the least a round trip through the server can be.
    pub(crate) async fn ping(&self) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let resp = self
            .http
            .post(self.url.clone())
            .header(ACCEPT, self.accept.clone())
            .header(CONTENT_TYPE, self.json.clone())
            .header("mcp-session-id", self.session.clone())
            .header("mcp-protocol-version", self.protocol.clone())
            .body(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#))
            .send()
            .await
            .expect("ping");
        assert!(resp.status().is_success());
        resp.bytes().await.expect("ping body");
    }
}

/// The `data` of the first event of a body holding one single-line event.
fn sse_data(body: &[u8]) -> &[u8] {
    let start = memchr::memmem::find(body, b"data:").expect("an SSE data line") + 5;
    let rest = &body[start..];
    let rest = rest.strip_prefix(b" ").unwrap_or(rest);
    let end = memchr::memchr(b'\n', rest).unwrap_or(rest.len());
    &rest[..end]
}
