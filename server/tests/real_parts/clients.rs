//! The clients of the real-parts runs: mcp-resume's own (keyed and unkeyed), and rmcp 3.11's
//! over `mcp_resume::bridge::rmcp::ResumeTransport`. One session per call, so concurrent
//! calls spread over the replicas.

use std::time::Duration;

use mcp_resume::bridge::rmcp::ResumeTransport;
use mcp_resume::bridge::{Bridge, IDEMPOTENCY_META_KEY};
use mcp_resume::{Client, Era, ErrorKind, ResendPolicy, ToolCall};
use rmcp::model::{CallToolRequestParams, RequestMetaObject};
use rmcp::ServiceExt;
use serde_json::{json, Map, Value};

/// Which client makes a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    Native,
    Rmcp,
}

/// What the client reported for a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reported {
    /// A result with this text.
    Ok(String),
    /// `OutcomeUnknown` (rmcp: the bridge's documented error for it), with the error's
    /// message: why, for a failing row to show.
    Unknown(String),
    /// Any other error.
    Failed(String),
}

/// One call of `bump {tag, delay_ms}`, keyed with `key` when given.
pub(crate) struct Call {
    pub(crate) via: Via,
    pub(crate) era: Era,
    pub(crate) tag: String,
    pub(crate) delay_ms: u64,
    pub(crate) key: Option<String>,
}

/// How long any call may take before the test gives up on it.
const DEADLINE: Duration = Duration::from_secs(10);

/// Makes the call on a fresh session of `url`. `trusting`: the client assumes the server
/// deduplicates keys (what an application would set for a server it believes does, here
/// to show what happens when none does).
pub(crate) async fn make(call: &Call, url: &str, trusting: bool) -> Reported {
    let policy = if trusting {
        ResendPolicy::AssumeServerDeduplicates
    } else {
        ResendPolicy::ServerAdvertised
    };
    let args = json!({"tag": call.tag, "delay_ms": call.delay_ms});
    let fut = async {
        match call.via {
            Via::Native => native(url, call, policy, args).await,
            Via::Rmcp => rmcp_call(url, call, policy, args).await,
        }
    };
    tokio::time::timeout(DEADLINE + Duration::from_secs(5), fut)
        .await
        .unwrap_or_else(|_| Reported::Failed("the client hung".into()))
}

async fn native(url: &str, call: &Call, policy: ResendPolicy, args: Value) -> Reported {
    let client = Client::builder(url)
        .era(call.era)
        .open_listen_stream(false)
        .call_timeout(DEADLINE)
        .resend_policy(policy)
        .build()
        .expect("a valid client");
    if let Err(e) = client.connect().await {
        return Reported::Failed(format!("connect: {e}"));
    }
    let mut tool = ToolCall::new("bump", args);
    if let Some(k) = &call.key {
        tool = tool.idempotency_key(k.as_str());
    }
    let out = match client.call_tool(tool).await {
        Ok(r) => Reported::Ok(r.text()),
        Err(e) if e.kind() == ErrorKind::OutcomeUnknown => Reported::Unknown(e.to_string()),
        Err(e) => Reported::Failed(format!("{:?}: {e}", e.kind())),
    };
    let _ = client.close().await;
    out
}

async fn rmcp_call(url: &str, call: &Call, policy: ResendPolicy, args: Value) -> Reported {
    let era = call.era;
    let bridge = Bridge::builder(url)
        .configure(move |c| {
            c.era(era)
                .open_listen_stream(false)
                .call_timeout(DEADLINE)
                .resend_policy(policy)
        })
        .build()
        .expect("a valid bridge");
    let service = match ().serve(ResumeTransport::with_bridge(bridge)).await {
        Ok(s) => s,
        Err(e) => return Reported::Failed(format!("rmcp initialize: {e}")),
    };
    let Value::Object(args) = args else {
        unreachable!("the arguments are an object")
    };
    let mut params = CallToolRequestParams::new("bump").with_arguments(args);
    if let Some(k) = &call.key {
        let mut meta = Map::new();
        meta.insert(IDEMPOTENCY_META_KEY.to_owned(), json!(k));
        params.meta = Some(RequestMetaObject::from(meta));
    }
    let out = match service.call_tool(params).await {
        Ok(r) => Reported::Ok(
            r.content
                .first()
                .and_then(|c| c.as_text())
                .map(|t| t.text.clone())
                .unwrap_or_default(),
        ),
        Err(rmcp::ServiceError::McpError(e))
            if e.data.as_ref().and_then(|d| d.get("kind")) == Some(&json!("outcome_unknown")) =>
        {
            Reported::Unknown(e.message.to_string())
        }
        Err(e) => Reported::Failed(format!("{e}")),
    };
    let _ = service.cancel().await;
    out
}
