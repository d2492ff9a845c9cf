//! The demo's workload driven through rmcp 3.11, the official Rust SDK, as a Rust developer
//! would configure it: `StreamableHttpClientTransport` over reqwest with rmcp's defaults
//! (re-initialization on a 404, unbounded SSE reconnects), the workload's client capabilities
//! and the protocol version mcp-resume offers.
//!
//! rmcp sets no deadline on a call by default. The demo gives each call one,
//! `tokio::time::timeout` with the workload's `call_timeout` (dropping the call makes rmcp
//! POST `notifications/cancelled`); a call it ends is reported as `deadline` in the row.
//!
//! rmcp has no per-call header option, only headers fixed per transport. The idempotency key
//! reaches the `Idempotency-Key` header through a thin [`StreamableHttpClient`] around
//! reqwest that copies it from the call's `_meta`; the same wrapper counts the `tools/call`
//! POSTs of each tag, which is how the row knows what rmcp re-sent (it reports no events).
//!
//! The `rmcp+bridge` row runs the same rmcp code over mcp-resume's `ResumeTransport`: the one
//! line that builds the transport differs. The key travels in the same `_meta` member, which
//! the bridge reads; the bridge's session events say what it resumed and re-sent.

// The demo and the end-to-end tests use different parts of this module.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use http::{HeaderName, HeaderValue};
use mcp_resume::bridge::rmcp::ResumeTransport;
use mcp_resume::bridge::Bridge;
use mcp_resume::ErrorKind;
use mock_server::context::meta;
use mock_server::{Cluster, ClusterConfig, Preset};
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ClientJsonRpcMessage, ClientRequest,
    Implementation, ProtocolVersion, RequestMetaObject,
};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::common::client_side_sse::BoxedSseResponse;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpClientTransportConfig, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ServiceError, ServiceExt};
use serde_json::{Map, Value};

use crate::workload::{
    self, client_capabilities, cluster_config, final_oracle, row, run_calls, tag, CallRecord,
    ClientKind, EventCollector, Row, RunReport, WorkloadCaller, WorkloadConfig,
};

/// The rmcp release the demo pins (`Cargo.toml`).
pub(crate) const RMCP_VERSION: &str = "3.11.0";

/// What one rmcp run produced: the report every row is built from, and what only the HTTP
/// layer under rmcp could see.
#[derive(Debug, Clone)]
pub(crate) struct RmcpRun {
    /// The same report as the other clients' runs (no session events: rmcp has none).
    pub report: RunReport,
    /// `tools/call` POSTs beyond the first for one tag: rmcp's re-sends.
    pub resent: u64,
}

impl RmcpRun {
    /// The table row: [`row`], with rmcp's re-sends (over its own transport; over the bridge
    /// the session's events count them) and the demo's deadline named as such.
    pub(crate) fn row(&self) -> Row {
        let mut r = row(&self.report);
        if self.report.client == ClientKind::Rmcp {
            r.resent = self.resent;
        }
        if let Some(n) = r.errors.remove(ErrorKind::Timeout.as_str()) {
            r.errors.insert("deadline".to_owned(), n);
        }
        r
    }

    /// Calls the demo's deadline ended.
    pub(crate) fn deadline_expired(&self) -> Vec<&CallRecord> {
        self.report
            .calls
            .iter()
            .filter(|c| c.outcome == Err(ErrorKind::Timeout))
            .collect()
    }
}

/// Runs the workload through rmcp on a fresh cluster of `preset` (streams cut), over rmcp's
/// own transport ([`ClientKind::Rmcp`]) or mcp-resume's ([`ClientKind::RmcpBridge`]).
pub(crate) async fn run_one(preset: Preset, kind: ClientKind, cfg: &WorkloadConfig) -> RmcpRun {
    run_one_on(cluster_config(preset, cfg), kind, cfg).await
}

/// [`run_one`] on a fresh cluster started with `config`.
pub(crate) async fn run_one_on(
    config: ClusterConfig,
    kind: ClientKind,
    cfg: &WorkloadConfig,
) -> RmcpRun {
    let preset = config.preset;
    let started = Instant::now();
    let cluster = Cluster::start(config)
        .await
        .expect("the cluster starts on 127.0.0.1");

    let capabilities: ClientCapabilities = serde_json::from_value(client_capabilities())
        .expect("the workload's capabilities are valid client capabilities");
    let client_config = ClientConfig::new(capabilities, Implementation::from_build_env())
        .with_protocol_version(ProtocolVersion::V_2025_11_25);

    let (connect, calls, events, resent) = match kind {
        ClientKind::Rmcp => {
            let http = RecordingHttp::new();
            let transport = StreamableHttpClientTransport::with_client(
                http.clone(),
                StreamableHttpClientTransportConfig::with_uri(cluster.url()),
            );
            let served = tokio::time::timeout(cfg.call_timeout, client_config.serve(transport));
            let (connect, calls) = drive(served.await, preset, kind, cfg, |service| {
                http.learn_idempotency(service)
            })
            .await;
            (connect, calls, Vec::new(), http.resent())
        }
        ClientKind::RmcpBridge => {
            let bridge = Bridge::builder(cluster.url())
                .configure(|c| workload::configure(c, kind, cfg))
                .build()
                .expect("a valid configuration");
            let events = EventCollector::start(bridge.events());
            let transport = ResumeTransport::with_bridge(bridge);
            let served = tokio::time::timeout(cfg.call_timeout, client_config.serve(transport));
            let (connect, calls) = drive(served.await, preset, kind, cfg, |_| {}).await;
            // The service is gone and with it the last handle on the bridge: the session is
            // closed and its event stream ends.
            (connect, calls, events.finish().await, 0)
        }
        other => panic!("{other:?} is not driven by rmcp"),
    };

    let (oracle, settled) = final_oracle(cluster).await;
    RmcpRun {
        report: RunReport {
            preset,
            client: kind,
            connect,
            calls,
            events,
            oracle,
            settled,
            seconds: started.elapsed().as_secs_f64(),
        },
        resent,
    }
}

/// Runs the workload on a served rmcp client (or reports why it could not connect), then
/// ends the service (its transport DELETEs the session).
async fn drive<E>(
    served: Result<
        Result<RunningService<RoleClient, ClientConfig>, E>,
        tokio::time::error::Elapsed,
    >,
    preset: Preset,
    kind: ClientKind,
    cfg: &WorkloadConfig,
    on_connect: impl FnOnce(&RunningService<RoleClient, ClientConfig>),
) -> (Result<(), ErrorKind>, Vec<CallRecord>) {
    match served {
        Ok(Ok(service)) => {
            on_connect(&service);
            let mut agent = Agent {
                service: &service,
                preset,
                kind,
                calls: Vec::new(),
                call_timeout: cfg.call_timeout,
            };
            run_calls(&mut agent, cfg).await;
            let calls = agent.calls;
            let _ = tokio::time::timeout(Duration::from_secs(5), service.cancel()).await;
            (Ok(()), calls)
        }
        Ok(Err(_)) => (Err(ErrorKind::Transport), Vec::new()),
        Err(_) => (Err(ErrorKind::Timeout), Vec::new()),
    }
}

struct Agent<'a> {
    service: &'a RunningService<RoleClient, ClientConfig>,
    preset: Preset,
    kind: ClientKind,
    calls: Vec<CallRecord>,
    call_timeout: Duration,
}

impl WorkloadCaller for Agent<'_> {
    async fn call(&mut self, tool: &'static str, args: Value, keyed: bool) -> Option<Value> {
        let tag = tag(self.preset, self.kind, self.calls.len(), tool);
        let mut meta = Map::new();
        meta.insert(meta::TAG.to_owned(), Value::String(tag.clone()));
        if keyed {
            meta.insert(
                meta::IDEMPOTENCY_KEY.to_owned(),
                Value::String(uuid::Uuid::new_v4().to_string()),
            );
        }
        let arguments = match args {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        let mut params = CallToolRequestParams::new(tool).with_arguments(arguments);
        params.meta = Some(RequestMetaObject::from(meta));

        let started = Instant::now();
        let outcome =
            match tokio::time::timeout(self.call_timeout, self.service.call_tool(params)).await {
                Ok(Ok(result)) => Ok((
                    result.structured_content.unwrap_or(Value::Null),
                    result
                        .meta
                        .as_deref()
                        .and_then(|m| m.get(meta::TAG))
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                )),
                Ok(Err(error)) => Err(error_kind(&error)),
                Err(_) => Err(ErrorKind::Timeout),
            };
        let (outcome, echoed_tag) = match outcome {
            Ok((value, echoed)) => (Ok(value), echoed),
            Err(kind) => (Err(kind), None),
        };
        self.calls.push(CallRecord {
            tag,
            tool,
            keyed,
            outcome: outcome.clone(),
            elapsed: started.elapsed(),
            echoed_tag,
        });
        outcome.ok()
    }
}

/// rmcp's error, in the vocabulary of the table's "explicit errors by kind". Over the bridge,
/// an outcome JSON-RPC cannot express arrives as a JSON-RPC error whose `data.kind` names it.
fn error_kind(error: &ServiceError) -> ErrorKind {
    match error {
        ServiceError::McpError(e) => e
            .data
            .as_ref()
            .and_then(|d| d.get("kind"))
            .and_then(Value::as_str)
            .and_then(kind_named)
            .unwrap_or(ErrorKind::Rpc),
        ServiceError::TransportSend(_) => ErrorKind::Transport,
        ServiceError::TransportClosed | ServiceError::Cancelled { .. } => ErrorKind::Closed,
        ServiceError::Timeout { .. } => ErrorKind::Timeout,
        _ => ErrorKind::Protocol,
    }
}

/// The [`ErrorKind`] whose `as_str()` is `name`.
fn kind_named(name: &str) -> Option<ErrorKind> {
    [
        ErrorKind::Transport,
        ErrorKind::Timeout,
        ErrorKind::SessionLost,
        ErrorKind::OutcomeUnknown,
        ErrorKind::ContextMismatch,
        ErrorKind::Protocol,
        ErrorKind::TooLarge,
        ErrorKind::Closed,
        ErrorKind::Unauthorized,
        ErrorKind::InvalidConfig,
        ErrorKind::MissingCapability,
    ]
    .into_iter()
    .find(|k| k.as_str() == name)
}

/// reqwest under rmcp, plus what rmcp cannot do per call: the `Idempotency-Key` header of a
/// keyed `tools/call`, and a count of the POSTs of each tag.
#[derive(Clone)]
struct RecordingHttp {
    http: reqwest::Client,
    /// The advertised `_meta` key and header of the idempotency key, once `initialize` said.
    idempotency: Arc<OnceLock<(String, HeaderName)>>,
    posts_per_tag: Arc<Mutex<HashMap<String, u64>>>,
}

impl RecordingHttp {
    /// The reqwest client `StreamableHttpClientTransport::from_uri` builds (no idle
    /// connections kept: rmcp's answer to stalls on half-read bodies), so that the transport
    /// behaves as rmcp's default one.
    fn new() -> Self {
        RecordingHttp {
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .build()
                .expect("a reqwest client"),
            idempotency: Arc::default(),
            posts_per_tag: Arc::default(),
        }
    }

    /// Reads `capabilities.experimental.resumeSafety.idempotency` from the `initialize`
    /// result; a server that does not advertise it gets no header.
    fn learn_idempotency(&self, service: &RunningService<RoleClient, ClientConfig>) {
        let Some(info) = service.peer_info() else {
            return;
        };
        let Some(idempotency) = info
            .capabilities
            .experimental
            .as_ref()
            .and_then(|e| e.get("resumeSafety"))
            .and_then(|r| r.get("idempotency"))
        else {
            return;
        };
        let meta_key = idempotency
            .get("metaKey")
            .and_then(Value::as_str)
            .unwrap_or(meta::IDEMPOTENCY_KEY);
        let header = idempotency
            .get("header")
            .and_then(Value::as_str)
            .and_then(|h| HeaderName::try_from(h).ok());
        if let Some(header) = header {
            let _ = self.idempotency.set((meta_key.to_owned(), header));
        }
    }

    fn resent(&self) -> u64 {
        let posts = self.posts_per_tag.lock().expect("not poisoned");
        posts.values().map(|n| n.saturating_sub(1)).sum()
    }

    fn before_post(
        &self,
        message: &ClientJsonRpcMessage,
        headers: &mut HashMap<HeaderName, HeaderValue>,
    ) {
        let ClientJsonRpcMessage::Request(request) = message else {
            return;
        };
        let ClientRequest::CallToolRequest(call) = &request.request else {
            return;
        };
        let Some(meta) = call.params.meta.as_ref() else {
            return;
        };
        let meta = &meta.0 .0;
        if let Some(tag) = meta.get(meta::TAG).and_then(Value::as_str) {
            let mut posts = self.posts_per_tag.lock().expect("not poisoned");
            *posts.entry(tag.to_owned()).or_default() += 1;
        }
        if let Some((meta_key, header)) = self.idempotency.get() {
            let key = meta.get(meta_key).and_then(Value::as_str);
            if let Some(value) = key.and_then(|k| HeaderValue::from_str(k).ok()) {
                headers.insert(header.clone(), value);
            }
        }
    }
}

impl StreamableHttpClient for RecordingHttp {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        mut custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.before_post(&message, &mut custom_headers);
        self.http
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.http
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxedSseResponse, StreamableHttpError<Self::Error>> {
        self.http
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxedSseResponse, StreamableHttpError<Self::Error>> {
        self.http
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}
