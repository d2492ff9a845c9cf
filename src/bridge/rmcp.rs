//! rmcp's client [`Transport`] over the [`Bridge`] (the `rmcp` feature): an rmcp application
//! keeps its code, its `ClientHandler` and every typed call, and gets mcp-resume's recovery
//! by building its transport differently.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use mcp_resume::bridge::rmcp::ResumeTransport;
//! use rmcp::ServiceExt;
//!
//! // Before: ().serve(StreamableHttpClientTransport::from_uri(url)).await?
//! let service = ().serve(ResumeTransport::new("http://127.0.0.1:8080/mcp")).await?;
//! let tools = service.list_all_tools().await?;
//! # let _ = tools; Ok(()) }
//! ```
//!
//! mcp-resume's own options (reconnect policy, resend policy, era, authorization, timeouts)
//! are set on a [`Bridge`]: `ResumeTransport::with_bridge(Bridge::builder(url).configure(..)
//! .build()?)`. A keyed call puts its key in `params._meta` under
//! [`IDEMPOTENCY_META_KEY`](super::IDEMPOTENCY_META_KEY); the outcomes JSON-RPC cannot
//! express reach rmcp as `ServiceError::McpError` with the codes of [`super::codes`]
//! and `data.kind` naming the [`crate::ErrorKind`]. A server request rmcp cannot read (params
//! by position, say) never reaches the `ClientHandler`: the transport answers it with
//! JSON-RPC error -32602 (invalid params), so the server is not left waiting for it.

use std::future::Future;

use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::{json, Value};

use super::{codes, Bridge};
use crate::error::{Error, ErrorKind};

/// rmcp's client transport, running every message through a [`Bridge`].
///
/// Cheap to build (no I/O until rmcp sends `initialize`); needs a tokio runtime once
/// served, as every rmcp transport does.
#[derive(Debug, Clone)]
pub struct ResumeTransport {
    bridge: Bridge,
}

impl ResumeTransport {
    /// A transport to the MCP endpoint at `url`, with mcp-resume's defaults.
    pub fn new(url: impl Into<String>) -> Self {
        ResumeTransport {
            // The default capacity is valid: nothing here can fail.
            bridge: Bridge::builder(url).assemble(),
        }
    }

    /// A transport over a bridge built with options of your own.
    pub fn with_bridge(bridge: Bridge) -> Self {
        ResumeTransport { bridge }
    }

    /// The bridge underneath: its [`events`](Bridge::events) (resumes, re-initializations,
    /// re-sends, unknown outcomes) and the session's state.
    pub fn bridge(&self) -> &Bridge {
        &self.bridge
    }
}

impl Transport<RoleClient> for ResumeTransport {
    type Error = Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Error>> + Send + 'static {
        // Handed to the bridge now, in rmcp's order: rmcp runs the futures of its sends apart,
        // and a request's cancel that follows it reaches it whichever runs first.
        let sending = serde_json::to_value(&item)
            .map_err(|e| Error::with_source(ErrorKind::Protocol, "rmcp's message is not JSON", e))
            .map(|message| self.bridge.send(message));
        async move { sending?.await }
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        let bridge = self.bridge.clone();
        async move {
            loop {
                let message = bridge.recv().await?;
                match serde_json::from_value(message.clone()) {
                    Ok(read) => return Some(read),
                    Err(error) => {
                        // An answer rmcp cannot read must still end its request, or the
                        // request would hang: it becomes an error answer with the same id.
                        // A notification of a shape rmcp does not know is left out, as
                        // rmcp's own transports do.
                        if let Some(answer) = unreadable_answer(&message, &error) {
                            return Some(answer);
                        }
                        // A server request rmcp cannot read is refused for it: left out, it
                        // would hold the server (and a 2026-07-28 call asking it) waiting on
                        // an answer no one gives.
                        if let Some(refusal) = unreadable_request(&message, &error) {
                            tracing::warn!(%error, "a server request rmcp cannot read was refused");
                            // An answer to a server request never waits for a place; a
                            // bridge closed meanwhile has no server to answer.
                            let _ = bridge.send(refusal).await;
                            continue;
                        }
                        tracing::warn!(%error, "a message rmcp cannot read was left out");
                    }
                }
            }
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Error>> + Send {
        let bridge = self.bridge.clone();
        async move { bridge.close().await }
    }
}

/// For an answer (a response or an error response) rmcp could not read: the JSON-RPC error
/// that ends the request it answers.
fn unreadable_answer(
    message: &Value,
    error: &serde_json::Error,
) -> Option<RxJsonRpcMessage<RoleClient>> {
    let id = message.get("id")?;
    if message.get("method").is_some() {
        return None;
    }
    let mut data = json!({"kind": ErrorKind::Protocol.as_str()});
    // The bridge's mark on an error it could not itself read in rmcp's terms (a server's code
    // beyond rmcp's i32, say) still reaches the host: the call may have run.
    if message
        .pointer("/error/data/mayHaveRun")
        .is_some_and(|m| m == true)
    {
        data["mayHaveRun"] = Value::Bool(true);
    }
    let answer = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": codes::PROTOCOL,
            "message": format!("the server's answer could not be read as rmcp's model: {error}"),
            "data": data,
        },
    });
    serde_json::from_value(answer).ok()
}

/// JSON-RPC "invalid params": a server request whose params rmcp cannot read.
const INVALID_PARAMS: i64 = -32602;

/// For a server request rmcp could not read: the host's error answer to it, as rmcp's own
/// service answers a request it cannot take.
fn unreadable_request(message: &Value, error: &serde_json::Error) -> Option<Value> {
    let id = message.get("id")?;
    let method = message.get("method")?.as_str()?;
    Some(json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": INVALID_PARAMS,
            "message": format!("{method}: the request could not be read as rmcp's model: {error}"),
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreadable_answer_becomes_an_error_with_its_id() {
        let answer = json!({"jsonrpc": "2.0", "id": 7, "error": "not an error object"});
        let error = serde_json::from_value::<RxJsonRpcMessage<RoleClient>>(answer.clone())
            .expect_err("rmcp reads errors as objects");
        let read = unreadable_answer(&answer, &error).expect("an answer is never left out");
        let back = serde_json::to_value(read).expect("serializes");
        assert_eq!(back["id"], 7);
        assert_eq!(back["error"]["code"], codes::PROTOCOL);
        assert_eq!(back["error"]["data"]["kind"], "protocol");
    }

    // rmcp reads codes as i32; the bridge passes a server's i64 code on unchanged, with the
    // mark it added.
    #[test]
    fn an_unreadable_error_keeps_its_may_have_run() {
        let answer = json!({"jsonrpc": "2.0", "id": 7, "error": {"code": 1_i64 << 31,
            "message": "poll refused", "data": {"mayHaveRun": true, "k": 1}}});
        let error = serde_json::from_value::<RxJsonRpcMessage<RoleClient>>(answer.clone())
            .expect_err("rmcp reads codes as i32");
        let read = unreadable_answer(&answer, &error).expect("an answer is never left out");
        let back = serde_json::to_value(read).expect("serializes");
        assert_eq!(back["error"]["code"], codes::PROTOCOL);
        assert_eq!(back["error"]["data"]["kind"], "protocol");
        assert_eq!(back["error"]["data"]["mayHaveRun"], true, "{back}");
        // An answer that did not say it may have run does not start to.
        let bare = json!({"jsonrpc": "2.0", "id": 8, "error": {"code": 1_i64 << 31,
            "message": "no"}});
        let error = serde_json::from_value::<RxJsonRpcMessage<RoleClient>>(bare.clone())
            .expect_err("rmcp reads codes as i32");
        let back = serde_json::to_value(unreadable_answer(&bare, &error).unwrap()).unwrap();
        assert_eq!(back["error"]["data"], json!({"kind": "protocol"}));
    }

    #[test]
    fn an_unreadable_notification_is_left_out() {
        let note = json!({"jsonrpc": "2.0", "method": 5});
        let error =
            serde_json::from_value::<RxJsonRpcMessage<RoleClient>>(note.clone()).unwrap_err();
        assert!(unreadable_answer(&note, &error).is_none());
    }
}
