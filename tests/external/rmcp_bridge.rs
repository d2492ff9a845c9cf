//! rmcp 3.11's own client API over mcp-resume's `ResumeTransport`, against independent
//! servers: the official TypeScript SDK server (list, call, progress, a sampling round trip,
//! each checked on the server's own log) and the mock cluster in the 2026-07-28 era, which
//! rmcp (a legacy-only client) reaches through the bridge's era translation. The seed
//! workload on every preset is in `tests/driver/demo_outcomes.rs` (`rmcp+bridge`).

// rmcp marks sampling deprecated (SEP-2577); the servers of this revision still ask for it.
#![allow(deprecated)]

use crate::interop_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_resume::bridge::rmcp::ResumeTransport;
use mcp_resume::bridge::Bridge;
use mock_server::context::meta;
use mock_server::{Cluster, ClusterConfig, ClusterEra, Preset};
use rmcp::model::{
    CallToolRequestParams, ClientConfig, CreateMessageRequestParams, CreateMessageResult,
    JsonObject, ProgressNotificationParam, RequestMetaObject, SamplingMessage,
};
use rmcp::service::{NotificationContext, RequestContext, RoleClient};
use rmcp::{ClientHandler, ErrorData, ServiceExt};
use serde_json::{json, Map, Value};

use interop_support::TsServer;

/// Hang guard for anything awaited in these tests.
const GUARD: Duration = Duration::from_secs(20);

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(GUARD, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {GUARD:?}"))
}

fn arguments(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

/// An rmcp client handler of an application: it samples (answering with a fixed model) and
/// records the progress it is sent.
#[derive(Clone, Default)]
struct Host {
    sampled: Arc<Mutex<Vec<CreateMessageRequestParams>>>,
    progress: Arc<Mutex<Vec<f64>>>,
}

impl ClientHandler for Host {
    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let prompt = params.messages[0]
            .content
            .first()
            .and_then(|c| c.as_text())
            .map(|t| t.text.clone())
            .unwrap_or_default();
        self.sampled.lock().unwrap().push(params);
        Ok(CreateMessageResult::new(
            SamplingMessage::assistant_text(format!("echo {prompt}")),
            "rmcp-model".to_owned(),
        )
        .with_stop_reason("endTurn"))
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push(params.progress);
    }

    fn get_info(&self) -> ClientConfig {
        serde_json::from_value(json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {"sampling": {}},
            "clientInfo": {"name": "rmcp-host", "version": "1.0.0"},
        }))
        .expect("a valid initialize request")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_over_the_bridge_lists_calls_streams_progress_and_samples_on_the_ts_server() {
    let server = TsServer::start(&[]);
    let host = Host::default();
    let service = within(
        "serve",
        host.clone().serve(ResumeTransport::new(&server.url)),
    )
    .await
    .expect("rmcp connects through the bridge");
    let info = service.peer_info().expect("the server's InitializeResult");
    let server_name = info.server_info.as_ref().map(|i| i.name.as_str());
    assert_eq!(server_name, Some("mcp-resume-interop-ts"));

    let tools = within("list", service.list_all_tools()).await.unwrap();
    assert!(tools.iter().any(|t| t.name == "echo"), "{tools:?}");

    let echoed = within(
        "echo",
        service.call_tool(
            CallToolRequestParams::new("echo").with_arguments(arguments(json!({"text": "hi"}))),
        ),
    )
    .await
    .unwrap();
    let text = echoed.content[0].as_text().map(|t| t.text.as_str());
    assert_eq!(text, Some("hi"));

    // rmcp puts a progress token of its own on the call: it travels unchanged (the bridge
    // adds none), and the progress comes back to rmcp's handler under it.
    let params =
        CallToolRequestParams::new("progress").with_arguments(arguments(json!({"steps": 3})));
    let done = within("progress", service.call_tool(params)).await.unwrap();
    let text = done.content[0].as_text().map(|t| t.text.clone());
    assert_eq!(text.as_deref(), Some("progress done after 3 steps"));
    server.settle().await;
    let run = server
        .find("tool", |e| e["name"] == "progress")
        .pop()
        .unwrap();
    let token = &run["meta"]["progressToken"];
    assert!(!token.is_null(), "{run}");
    assert!(
        !token.as_str().is_some_and(|t| t.starts_with("mcp-resume-")),
        "the host's token, not one of the client's: {token}"
    );
    // rmcp hands each notification to the handler in a task of its own: their order there
    // is rmcp's, not the wire's.
    let mut progress = host.progress.lock().unwrap().clone();
    progress.sort_by(f64::total_cmp);
    assert_eq!(progress, [1.0, 2.0, 3.0]);

    // A server request reaches rmcp's handler and its answer goes back to the server.
    let sampled = within(
        "sample",
        service.call_tool(
            CallToolRequestParams::new("sample")
                .with_arguments(arguments(json!({"prompt": "capital of France?"}))),
        ),
    )
    .await
    .unwrap();
    let text = sampled.content[0].as_text().map(|t| t.text.clone());
    assert_eq!(text.as_deref(), Some("rmcp-model: echo capital of France?"));
    assert_eq!(host.sampled.lock().unwrap().len(), 1);
    let answer = server.wait_for("sampled", GUARD, |_| true).await;
    assert_eq!(answer["result"]["stopReason"], "endTurn");

    within("cancel", service.cancel()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_reaches_a_2026_07_28_server_through_the_bridge() {
    let cluster =
        Cluster::start(ClusterConfig::new(Preset::Replicated).with_era(ClusterEra::Modern))
            .await
            .expect("the cluster starts on 127.0.0.1");
    let bridge = Bridge::builder(cluster.url()).build().unwrap();
    let transport = ResumeTransport::with_bridge(bridge);
    let service = within("serve", ().serve(transport))
        .await
        .expect("rmcp, a legacy-only client, connects to a modern-only server");
    let info = service
        .peer_info()
        .expect("an InitializeResult built from server/discover");
    assert_eq!(info.protocol_version.to_string(), "2025-11-25");
    assert!(info.capabilities.tools.is_some(), "{info:?}");

    let tools = within("list", service.list_all_tools()).await.unwrap();
    assert!(tools.iter().any(|t| t.name == "echo"), "{tools:?}");

    let mut params =
        CallToolRequestParams::new("echo").with_arguments(arguments(json!({"text": "modern"})));
    let mut tag = Map::new();
    tag.insert(meta::TAG.to_owned(), json!("rmcp-modern-echo"));
    params.meta = Some(RequestMetaObject::from(tag));
    let echoed = within("echo", service.call_tool(params)).await.unwrap();
    let text = echoed.content[0].as_text().map(|t| t.text.clone());
    assert_eq!(text.as_deref(), Some("modern"));

    // The server saw the 2026-07-28 protocol: no initialize ever reached it, and the call ran
    // once.
    cluster.wait_idle(GUARD).await;
    let oracle = cluster.oracle();
    assert_eq!(oracle.totals.initializes, 0, "{:?}", oracle.totals);
    assert_eq!(oracle.executions_tagged("rmcp-modern-echo").count(), 1);

    within("cancel", service.cancel()).await.unwrap();
    cluster.shutdown().await;
}
